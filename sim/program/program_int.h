/* Internal interface of the device program's files: printing (program_print.c), parsing
 * (program_parse.c, whose opening comment holds the grammar, and program_parse_attr.c for the
 * attributes of an op line), the verifier (program_verify.c) and its memory rule
 * (program_memory.c). What they share is here: the table of attributes as the text writes
 * them and where each attribute lives in struct tpu_op_attrs (defined in program_print.c),
 * the parser's state and helpers that the two parsing files share, and the memory rule;
 * what the text writes for each op (its syntax, operands and the attributes it must state)
 * is the op table's (op_table.h). Not part of the public API. */
#ifndef TPUSIM_SIM_PROGRAM_INT_H
#define TPUSIM_SIM_PROGRAM_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op_table.h"
#include "tpusim/program.h"
#include "util.h" /* TPU__PRINTF */

/* How an attribute's value is written. */
enum tpu__text_attr_type {
    TPU__TA_FLAG,   /* the name alone */
    TPU__TA_PASSES, /* passes=<uint8> */
    TPU__TA_INT32,  /* name=<int32> */
    TPU__TA_REDUCE, /* reduce=<sum|mean|int32> */
    TPU__TA_GROUP,  /* group=<replicas|replica_cores|int32> */
    TPU__TA_VAR,    /* var=<variable> */
    TPU__TA_IMM,    /* imm=<int64> */
    TPU__TA_FLOAT,  /* name=<FLOAT> */
};

struct tpu__text_attr {
    unsigned bit; /* TPU_ATTR_* */
    const char *name;
    enum tpu__text_attr_type type;
    const char *hint; /* how to write it, for messages */
};

/* Every attribute, in printing order: tpu__text_attrs[0 .. tpu__text_n_attrs). */
extern const struct tpu__text_attr tpu__text_attrs[];
extern const size_t tpu__text_n_attrs;

/* The field of `a` that holds attribute `bit` of the type the name says: int32 (axis, reduce,
 * shift, group), flag (trans_a, trans_b, accumulate) or float (alpha, beta, gamma, delta,
 * eps). A bit of another type gives the last field of the list. */
int32_t *tpu__text_attr_int32(struct tpu_op_attrs *a, unsigned bit);
bool *tpu__text_attr_flag(struct tpu_op_attrs *a, unsigned bit);
float *tpu__text_attr_float(struct tpu_op_attrs *a, unsigned bit);

/* ---- parsing: program_parse.c and program_parse_attr.c --------------------------------------- */

/* The longest NAME of the text form, in characters: program.h's limit. */
#define TPU__TEXT_NAME_MAX_CHARS TPU_PROGRAM_NAME_MAX

/* The parser's state while it reads one text (tpu_program_parse). */
struct tpu__parser {
    const char *origin;
    const char *line_start, *line_end, *cur; /* the current line and the cursor in it */
    size_t line;                             /* 1-based */
    struct tpu_program *p;
    struct tpu_diag *d;
    size_t *buf_line, *var_line; /* the line each buffer and variable was declared on */
    size_t cap_buf_line, cap_var_line;
    size_t header_line;
    size_t first_op_line; /* 0 until an op is seen */
    size_t loop_line;     /* the open loop's line, 0 when none is open */
};

/* What parse_op (program_parse.c) has read of an op line so far. */
struct tpu__op_line {
    uint32_t outs[TPU_OP_MAX_OUT + 1];
    unsigned n_outs;
    char first_out[TPU__TEXT_NAME_MAX_CHARS + 1];
    char opname[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *op_at; /* where the op name starts */
    unsigned n_ins;
    const char *ins_at; /* where the inputs start */
    struct tpu_op op;
};

/* program_parse.c: the error at `at` (a position in the current line) as "origin:line:col:
 * message", TPU_EPARSE; the cursor and the names (each as its definition says). */
int tpu__parse_verror(struct tpu__parser *ps, const char *at, const char *fmt, va_list ap)
    TPU__PRINTF(3, 0);
bool tpu__parse_is_ident_start(char c);
void tpu__parse_skip_ws(struct tpu__parser *ps);
bool tpu__parse_at_eol(struct tpu__parser *ps);
void tpu__parse_describe(struct tpu__parser *ps, char out[64]);
int tpu__parse_expect_eol(struct tpu__parser *ps, const char *after);
int tpu__parse_read_name(struct tpu__parser *ps, char out[TPU__TEXT_NAME_MAX_CHARS + 1],
                         const char *what);
bool tpu__parse_next_is_name(struct tpu__parser *ps);
const char *tpu__parse_read_token(struct tpu__parser *ps, char out[64]);
void tpu__parse_consider(const char *word, const char *cand, const char **best,
                         size_t *best_d);
int tpu__parse_lookup_var(struct tpu__parser *ps, const char *at, const char *name,
                          uint32_t *id);

/* program_parse_attr.c: the attributes of an op line and var_add's operands. */
void tpu__parse_role_list(enum tpu_opcode code, bool out, char buf[96]);
const struct tpu__text_attr *tpu__parse_find_attr(const char *name);
int tpu__parse_attrs(struct tpu__parser *ps, struct tpu__op_line *ol);
int tpu__parse_var_add(struct tpu__parser *ps, struct tpu_op *op);

/* program_memory.c: the verifier's rule M1 (program_verify.c): the program's params plus the
 * peak of its live temps fit in one core's share of cfg's HBM; TPU_ERANGE with the message
 * otherwise (or TPU_ENOMEM). */
int tpu__verify_memory(const struct tpu_program *p, const struct tpu_chip_config *cfg,
                       struct tpu_diag *d);

#endif
