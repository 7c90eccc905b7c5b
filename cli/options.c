/* The one option parser of the command line, its --help printer and the error wordings every
 * subcommand shares (options.h). It knows no subcommand: each one's table says what its
 * options are; this file only walks argv and the table. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "util.h"

/* ---- the shared wordings ------------------------------------------------------------------ */

int tpu__cli_opts_bad_u64(const struct tpu__cli_parse *p, const char *opt, const char *value,
                          uint64_t min, uint64_t max)
{
    char qb[TPU__QUOTE_BYTES];
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE,
                          "%s '%s' is not a whole number from %" PRIu64 " to %" PRIu64
                          "; give e.g. %s %" PRIu64,
                          opt, tpu__quote(value ? value : "", qb, sizeof qb), min, max, opt,
                          min);
}

/* The tables write an open bound "less than 1" as .hi = 0.999999 (the largest value a
 * user is likely to type below 1); the message says the bound as the rule has it. */
#define TPU__CLI_BELOW_1 0.999999

static int bad_double(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *value)
{
    char qb[TPU__QUOTE_BYTES], range[96];
    if (opt->hi == TPU__CLI_BELOW_1)
        snprintf(range, sizeof range, "at least %g and less than 1", opt->lo);
    else
        snprintf(range, sizeof range, "from %g to %g", opt->lo, opt->hi);
    /* the example: 0.1 or 1 where the range holds them, else its low end */
    const double example = opt->lo <= 0.1 && 0.1 <= opt->hi ? 0.1
                           : opt->lo <= 1 && 1 <= opt->hi   ? 1
                                                            : opt->lo;
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%s' is not a number %s; give e.g. %s %g",
                          opt->name, tpu__quote(value, qb, sizeof qb), range, opt->name,
                          example);
}

/* The allowed words of opt, "a, b, c", into buf. */
static void list_words(const struct tpu__cli_opt *opt, char *buf, size_t n)
{
    buf[0] = '\0';
    size_t len = 0;
    if (opt->words) {
        for (size_t i = 0; opt->words[i] && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", opt->words[i]);
    } else {
        for (size_t i = 0; i < opt->n_only && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%" PRIu64, i ? ", " : "",
                                    opt->only[i]);
    }
}

int tpu__cli_opts_bad_word(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                           const char *value)
{
    char qb[TPU__QUOTE_BYTES], words[256];
    list_words(opt, words, sizeof words);
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%s' is not one of %s%s%s", opt->name,
                          tpu__quote(value, qb, sizeof qb), words,
                          opt->values_help ? " " : "", opt->values_help ? opt->values_help : "");
}

static int unknown_option(const struct tpu__cli_parse *p, const char *arg)
{
    char qb[TPU__QUOTE_BYTES];
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE,
                          "unknown option '%s'; run 'tpusim %s --help' for the list",
                          tpu__quote(arg, qb, sizeof qb), p->cmd);
}

/* The value as --help shows it: the row's arg, or the words of an enum ("a|b"). */
static void arg_text(const struct tpu__cli_opt *opt, char *buf, size_t n)
{
    buf[0] = '\0';
    if (opt->arg) {
        snprintf(buf, n, "%s", opt->arg);
        return;
    }
    size_t len = 0;
    for (size_t i = 0; opt->words && opt->words[i] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", opt->words[i]);
    for (size_t i = 0; !opt->words && i < opt->n_only && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRIu64, i ? "|" : "", opt->only[i]);
}

static int missing_value(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                         const char *as_given)
{
    char arg[256];
    arg_text(opt, arg, sizeof arg);
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE,
                          "option '%s' needs a value: %s %s (see 'tpusim %s --help')", as_given,
                          as_given, arg[0] ? arg : "VALUE", p->cmd);
}

/* The subcommands of scope bits `bits`: "'tpusim train' and 'tpusim evaluate'". */
static void scope_owners(const struct tpu__cli_opts *t, unsigned bits, char *buf, size_t n)
{
    buf[0] = '\0';
    for (unsigned b = 0; t->scope_names && t->scope_names[b]; b++)
        if (bits & (1u << b))
            snprintf(buf + strlen(buf), n - strlen(buf), "%s'tpusim %s'", buf[0] ? " and " : "",
                     t->scope_names[b]);
}

int tpu__cli_opts_check_scope(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt)
{
    if (!opt->scope || !p->scope || (opt->scope & p->scope))
        return 0;
    char owners[128];
    scope_owners(p->table, opt->scope, owners, sizeof owners);
    const char *self = p->cmd;
    for (unsigned b = 0; p->table->scope_names && p->table->scope_names[b]; b++)
        if (p->scope & (1u << b))
            self = p->table->scope_names[b];
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s belongs to %s, not to 'tpusim %s' (%s); "
                          "leave it out", opt->name, owners, self, opt->scope_why);
}

/* Whether value v is within opt's length (and not empty, if the table limits lengths). */
static int check_length(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                        const char *v)
{
    const size_t text_max = p->table->text_max;
    size_t max = opt->max_chars ? opt->max_chars : text_max, n = strlen(v);
    if (!max)
        return 0;
    if (n > max)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%.40s...' is %zu characters long; it "
                              "takes at most %zu%s", opt->name, v, n, max,
                              max == text_max ? "" : ": give a shorter path (a relative "
                              "one, or through a symbolic link)");
    if (n == 0)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '' is empty: give it a value, or leave "
                              "the option out", opt->name);
    return 0;
}

/* ---- values into fields ------------------------------------------------------------------- */

static void *field(const struct tpu__cli_parse *p, size_t offset)
{
    return (char *)p->target + offset;
}

static void store_uint(void *f, size_t size, uint64_t v)
{
    if (size == 1)
        *(uint8_t *)f = (uint8_t)v;
    else if (size == 2)
        *(uint16_t *)f = (uint16_t)v;
    else if (size == 4)
        *(uint32_t *)f = (uint32_t)v;
    else
        *(uint64_t *)f = v;
}

static int set_u64(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt, const char *v)
{
    char *end = NULL;
    unsigned long long x = 0;
    bool ok = *v >= '0' && *v <= '9'; /* strtoull would take " 5", "-1", "+5" */
    if (ok) {
        errno = 0;
        x = strtoull(v, &end, 10);
        ok = errno == 0 && *end == '\0' && x >= opt->min && x <= opt->max;
    }
    if (!ok && opt->n_only > 0) /* a few values allowed: name them, not the range */
        return tpu__cli_opts_bad_word(p, opt, v);
    if (!ok)
        return tpu__cli_opts_bad_u64(p, opt->name, v, opt->min, opt->max);
    bool allowed = opt->n_only == 0;
    for (size_t i = 0; i < opt->n_only; i++)
        allowed = allowed || opt->only[i] == x;
    if (!allowed)
        return tpu__cli_opts_bad_word(p, opt, v);
    store_uint(field(p, opt->offset), opt->size, x);
    return 0;
}

static int set_double(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < opt->lo || x > opt->hi)
        return bad_double(p, opt, v);
    if (opt->size == sizeof(float))
        *(float *)field(p, opt->offset) = (float)x;
    else
        *(double *)field(p, opt->offset) = x;
    return 0;
}

static int set_enum(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                    const char *v)
{
    for (size_t i = 0; opt->words[i]; i++)
        if (!strcmp(v, opt->words[i])) {
            void *f = field(p, opt->offset);
            if (opt->size == sizeof(bool))
                *(bool *)f = opt->values[i] != 0;
            else
                *(int *)f = opt->values[i];
            return 0;
        }
    return tpu__cli_opts_bad_word(p, opt, v);
}

static int set_value(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                     const char *v)
{
    switch (opt->kind) {
    case TPU__CLI_U64:
        return set_u64(p, opt, v);
    case TPU__CLI_DOUBLE:
        return set_double(p, opt, v);
    case TPU__CLI_ENUM:
        return set_enum(p, opt, v);
    case TPU__CLI_STR:
        *(const char **)field(p, opt->offset) = v;
        return 0;
    case TPU__CLI_TEXT:
        snprintf(field(p, opt->offset), opt->size, "%s", v);
        return 0;
    case TPU__CLI_CUSTOM:
        return opt->set(p, opt, v);
    case TPU__CLI_FLAG:
        break;
    }
    return 0;
}

/* An option with a scope or a length of its own is held to both before its value is read;
 * any other option's value is read first, then held to the table's length (so "--seed ''"
 * is a bad number, "--layers ''" an empty value). */
int tpu__cli_opts_set(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *value, bool on)
{
    int rc;
    if (opt->before)
        opt->before(p->target);
    if (opt->kind == TPU__CLI_FLAG) {
        *(bool *)field(p, opt->offset) = on;
        return tpu__cli_opts_check_scope(p, opt);
    }
    const bool checked_first = opt->scope || opt->max_chars;
    if (checked_first &&
        ((rc = check_length(p, opt, value)) || (rc = tpu__cli_opts_check_scope(p, opt))))
        return rc;
    if (opt->has_given)
        *(bool *)field(p, opt->given_offset) = true;
    if ((rc = set_value(p, opt, value)))
        return rc;
    return checked_first ? 0 : check_length(p, opt, value);
}

/* ---- argv ---------------------------------------------------------------------------------- */

const struct tpu__cli_opt *tpu__cli_opts_find(const struct tpu__cli_opts *t, const char *name)
{
    for (size_t i = 0; i < t->n_opts; i++) {
        const struct tpu__cli_opt *o = &t->opts[i];
        if (!strcmp(o->name, name) || (o->short_name && !strcmp(o->short_name, name)))
            return o;
    }
    return NULL;
}

static bool has_short_names(const struct tpu__cli_opts *t)
{
    for (size_t i = 0; i < t->n_opts; i++)
        if (t->opts[i].short_name || strncmp(t->opts[i].name, "--", 2) != 0)
            return true;
    return false;
}

/* An argument that is not an option where none is taken; names the flag before it if it
 * looks like that flag's value. */
static int not_an_option(const struct tpu__cli_parse *p, const char *arg, const char *before)
{
    const struct tpu__cli_opt *prev = before ? tpu__cli_opts_find(p->table, before) : NULL;
    const bool after_flag = prev && prev->kind == TPU__CLI_FLAG;
    char qb[TPU__QUOTE_BYTES];
    return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "'%s' is not an option (options start with "
                          "%s)%s%s%s", tpu__quote(arg, qb, sizeof qb),
                          has_short_names(p->table) ? "-" : "--", after_flag ? "; " : "",
                          after_flag ? before : "",
                          after_flag ? " takes no value: it is on when given" : "");
}

int tpu__cli_opts_parse(const struct tpu__cli_parse *p, int argc, char **argv, int first,
                        tpu__cli_operand_fn operand)
{
    const struct tpu__cli_opts *t = p->table;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tpu__cli_opts_help(t, stdout);
            return TPU__CLI_HELP;
        }
        int rc;
        const bool is_option = a[0] == '-' && !(t->dash_is_operand && a[1] == '\0');
        if (!is_option) {
            rc = operand ? operand(p, a) : not_an_option(p, a, i > first ? argv[i - 1] : NULL);
            if (rc)
                return rc;
            continue;
        }
        const struct tpu__cli_opt *opt = tpu__cli_opts_find(t, a);
        if (!opt)
            return unknown_option(p, a);
        if (opt->kind == TPU__CLI_FLAG)
            rc = tpu__cli_opts_set(p, opt, NULL, true);
        else if (i + 1 >= argc)
            rc = missing_value(p, opt, a);
        else
            rc = tpu__cli_opts_set(p, opt, argv[++i], true);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- --help --------------------------------------------------------------------------------- */

/* One option's lines: "  NAMES ARG" padded to the help column, then its text (on the next
 * line if NAMES ARG reach the column), each further line of the text indented to it. */
static void help_option(const struct tpu__cli_opts *t, FILE *f, const char *names,
                        const char *arg, const char *scope, const char *text)
{
    char left[256];
    snprintf(left, sizeof left, "  %s%s%s", names, arg[0] ? " " : "", arg);
    size_t len = strlen(left);
    const unsigned col = t->help_column;
    fputs(left, f);
    if (!text) {
        fputc('\n', f);
        return;
    }
    if (len < col)
        fprintf(f, "%*s%s", (int)(col - len), "", scope);
    else
        fprintf(f, "\n%*s%s", (int)col, "", scope);
    for (const char *line = text;;) {
        const char *nl = strchr(line, '\n');
        fprintf(f, "%.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
        if (!nl)
            break;
        line = nl + 1;
        fprintf(f, "%*s", (int)col, "");
    }
}

void tpu__cli_opts_help(const struct tpu__cli_opts *t, FILE *f)
{
    fputs(t->usage, f);
    for (size_t i = 0; i < t->n_opts; i++) {
        const struct tpu__cli_opt *o = &t->opts[i];
        char names[64], arg[256], scope[128] = "";
        if (o->group)
            fprintf(f, "%s\n", o->group);
        snprintf(names, sizeof names, "%s%s%s", o->short_name ? o->short_name : "",
                 o->short_name ? ", " : "", o->name);
        if (o->kind == TPU__CLI_FLAG)
            arg[0] = '\0';
        else
            arg_text(o, arg, sizeof arg);
        if (o->scope) {
            size_t n = 1;
            scope[0] = '[';
            for (unsigned b = 0; t->scope_names && t->scope_names[b]; b++)
                if (o->scope & (1u << b))
                    n += (size_t)snprintf(scope + n, sizeof scope - n, "%s%s", n > 1 ? ", " : "",
                                          t->scope_names[b]);
            snprintf(scope + n, sizeof scope - n, "] ");
        }
        help_option(t, f, names, arg, scope, o->help);
    }
    help_option(t, f, "-h, --help", "", "", "this text");
    if (t->footer)
        fputs(t->footer, f);
}
