/* The option table of the command line: every subcommand declares its options as data (one
 * row each: names, value kind and range, the field it sets, the subcommands it belongs to,
 * its longest value, its help text and group), and one parser, one --help printer and the
 * --config JSON reader of train/evaluate/predict all read that table. The wording of the
 * errors every subcommand shares lives here too, once:
 *
 *   unknown option    unknown option '--bogus'; run 'tpusim gemm --help' for the list
 *   missing value     option '--chip' needs a value: --chip NAME|FILE (see 'tpusim gemm --help')
 *   bad number        --chips '0' is not a whole number from 1 to 4096; give e.g. --chips 1
 *                     --l2 'x' is not a number from 0 to 10; give e.g. --l2 0
 *   bad word          --dtype 'fp16' is not one of bf16, int8, fp32; give e.g. --dtype bf16
 *   other subcommand  --limit belongs to 'tpusim predict', not to 'tpusim train' (<why>);
 *                     leave it out
 *   not an option     'tiny' is not an option (options start with --)
 *
 * What the table does not hold: defaults (each subcommand sets them before parsing, and its
 * help text states them) and rules that join several options (checked after parsing). Only
 * `--opt value` is taken (no `--opt=value`), and `-h`/`--help` print the help anywhere. */
#ifndef TPUSIM_CLI_OPTIONS_H
#define TPUSIM_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What an option's value is, and so how the parser turns it into the field it sets. */
enum tpu__cli_opt_kind {
    TPU__CLI_FLAG,   /* no value: sets a bool to true (a config file may give false) */
    TPU__CLI_U64,    /* a whole number in [min, max] (and one of `only`, if given) into an
                        unsigned field of 1, 4 or 8 bytes */
    TPU__CLI_DOUBLE, /* a finite number in [lo, hi] into a double or a float field */
    TPU__CLI_ENUM,   /* one of `words` (exactly), its `values` entry into an int-sized enum
                        or a bool field */
    TPU__CLI_STR,    /* the argument itself: a `const char *` field pointing into argv */
    TPU__CLI_TEXT,   /* a copy into a char array field (outlives argv and a config file) */
    TPU__CLI_CUSTOM, /* `set` parses and stores it */
};

struct tpu__cli_opt;

/* What a setter (and the shared error helpers) know of the parse in progress. */
struct tpu__cli_parse {
    const struct tpu__cli_opts *table;
    const char *cmd;   /* the subcommand as messages name it: "gemm", "config show", "train" */
    unsigned scope;    /* this subcommand's bit in the table's scopes (0: no scopes) */
    void *target;      /* the options struct the fields are in */
};

/* One option. Designated initializers: a field left out is 0/NULL and means "none". */
struct tpu__cli_opt {
    const char *name;       /* "--chip" */
    const char *short_name; /* "-m", or NULL */
    enum tpu__cli_opt_kind kind;
    size_t offset, size;    /* the field it sets in the target (TPU__CLI_FIELD) */
    bool has_given;         /* sets the bool at given_offset when given (TPU__CLI_GIVEN) */
    size_t given_offset;
    uint64_t min, max;      /* TPU__CLI_U64 */
    const uint64_t *only;   /* TPU__CLI_U64: the values allowed within [min, max], n_only */
    size_t n_only;
    double lo, hi;          /* TPU__CLI_DOUBLE */
    const char *const *words; /* TPU__CLI_ENUM (and CUSTOM options taking words): NULL-ended */
    const int *values;        /* TPU__CLI_ENUM: the value of each word */
    /* ENUM, or U64 with `only`: what the allowed values mean, added to the error naming
     * them, e.g. "(bf16, XLA HIGH, XLA HIGHEST)"; NULL: nothing */
    const char *values_help;
    /* called just before the value is stored (train's "how long to train" bookkeeping) */
    void (*before)(void *target);
    /* TPU__CLI_CUSTOM: parses value and stores it; returns 0 or an exit code (error printed) */
    int (*set)(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
               const char *value);
    unsigned scope;         /* the subcommands it belongs to (bits of the table's scopes);
                               0: all of them */
    const char *scope_why;  /* why the others do not take it */
    size_t max_chars;       /* longest value; 0: the table's text_max */
    const char *arg;        /* the value in --help: "NAME|FILE" (ENUM: the words) */
    const char *help;       /* its text in --help; '\n' starts a continuation line */
    const char *group;      /* a heading printed before it in --help, or NULL */
};

/* A subcommand's (or a family of subcommands') options and help. */
struct tpu__cli_opts {
    const struct tpu__cli_opt *opts;
    size_t n_opts;
    const char *usage;        /* the help's text before the options */
    const char *footer;       /* and after them (or NULL) */
    unsigned help_column;     /* where the options' texts start in --help */
    size_t text_max;          /* longest value of an option without max_chars; 0: no limit */
    const char *const *scope_names; /* scope bit b is scope_names[b] ("train"), NULL-ended */
    bool dash_is_operand;     /* "-" alone is an operand (a file name), not an option */
};

/* The offset and size of field f of struct type T, for a row's .offset and .size. */
#define TPU__CLI_FIELD(T, f) .offset = offsetof(T, f), .size = sizeof(((T *)0)->f)
/* A bool field of T set when the option is given. */
#define TPU__CLI_GIVEN(T, f) .has_given = true, .given_offset = offsetof(T, f)

/* The result of tpu__cli_opts_parse when it printed the help: exit 0 without running. */
#define TPU__CLI_HELP (-1)

/* Handles one operand (an argument that is not an option) at argv index i; returns 0 or an
 * exit code after printing the error. NULL: operands are refused ("... is not an option"). */
typedef int (*tpu__cli_operand_fn)(const struct tpu__cli_parse *p, const char *arg);

/* Parses argv[first..argc) into p->target. Returns 0, TPU__CLI_HELP after printing the help
 * on stdout (-h, --help), or an exit code after printing the error (TPU_CLI_USAGE). */
int tpu__cli_opts_parse(const struct tpu__cli_parse *p, int argc, char **argv, int first,
                        tpu__cli_operand_fn operand);

/* The option named `name` ("--chip" or "-m"), or NULL. */
const struct tpu__cli_opt *tpu__cli_opts_find(const struct tpu__cli_opts *t, const char *name);

/* Sets option opt from its text value as the command line does (the --config reader calls
 * it for each key). An option with a scope or a max_chars of its own is held to both before
 * its value is parsed; any other option's value is parsed first, then held to the table's
 * text_max (so "--seed ''" is a bad number, "--layers ''" an empty value). For FLAG options,
 * `value` is ignored and `on` is stored. Returns 0 or an exit code after printing the error. */
int tpu__cli_opts_set(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *value, bool on);

/* Whether opt belongs to p's subcommand; if not, prints why and returns TPU_CLI_USAGE. */
int tpu__cli_opts_check_scope(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt);

/* Prints the help of table t to f: usage, then each option (its group heading first), the
 * options that belong to some subcommands only marked "[train, evaluate]", then -h, --help
 * and the footer. */
void tpu__cli_opts_help(const struct tpu__cli_opts *t, FILE *f);

/* The shared wordings, for setters and for checks made after parsing. Each prints and
 * returns TPU_CLI_USAGE. */
int tpu__cli_opts_bad_u64(const struct tpu__cli_parse *p, const char *opt, const char *value,
                          uint64_t min, uint64_t max);
int tpu__cli_opts_bad_word(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                           const char *value);

/* Every table of the command line, for the tests that walk them: each with the argv words
 * that reach it ("program", "run"; "config", "show") and the subcommand its scope bit names. */
struct tpu__cli_table_ref {
    const char *words[2]; /* argv after "tpusim" before the options; words[1] may be NULL */
    const char *cmd;      /* the name messages give it */
    unsigned scope;       /* its scope bit, 0 for a table without scopes */
    const struct tpu__cli_opts *table;
};
const struct tpu__cli_table_ref *tpu__cli_tables(size_t *n);

/* The tables (beside their subcommands). */
extern const struct tpu__cli_opts tpu__cli_gemm_options, tpu__cli_program_options,
    tpu__cli_train_options, tpu__cli_config_list_options, tpu__cli_config_show_options,
    tpu__cli_config_check_options, tpu__cli_model_show_options,
    tpu__cli_shard_options;
extern const struct tpu__cli_opts tpu__cli_bench_loops_options;

#endif
