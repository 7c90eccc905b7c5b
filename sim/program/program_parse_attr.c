/* The device program's text form, parsing the attributes of an op line: "name" (a flag) or
 * "name=value" after the inputs, each value read as the attribute's type says (program_int.h's
 * table; FLOAT as the grammar in program_parse.c states it), the message for a word that is
 * not an attribute of the op, the checks that need the whole line (the number of inputs, the
 * attributes the op must state) and var_add's "VAR INT". It is not the rest of the parser
 * (the cursor, declarations, outputs and inputs, loops: program_parse.c, which calls this
 * file for each op line) nor the semantic rules (program_verify.c). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_int.h"
#include "util.h"

/* The longest list of an op's attributes in a message (the window ops' eleven fit). */
#define ATTR_LIST_MAX 320

static int perr(struct tpu__parser *ps, const char *at, const char *fmt, ...) TPU__PRINTF(3, 4);

/* A parse error at `at` (a position in the current line). */
static int perr(struct tpu__parser *ps, const char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tpu__parse_verror(ps, at, fmt, ap);
    va_end(ap);
    return rc;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* "(a, b)" or "" for the op's outputs or inputs. */
void tpu__parse_role_list(enum tpu_opcode code, bool out, char buf[96])
{
    size_t len = 0;
    buf[0] = '\0';
    const char *r;
    for (unsigned i = 0; (r = tpu_opcode_operand_name(code, out, i)) != NULL; i++)
        len += (size_t)snprintf(buf + len, 96 - len, "%s%s", i ? ", " : " (", r);
    if (len)
        snprintf(buf + len, 96 - len, ")");
}

/* "trans_a, trans_b, accumulate, passes=<1|3|6>" for the op (cut short if it does not fit). */
static void attr_list(enum tpu_opcode code, char buf[ATTR_LIST_MAX])
{
    size_t len = 0;
    buf[0] = '\0';
    unsigned used = tpu_opcode_attrs(code);
    for (size_t i = 0; i < tpu__text_n_attrs && len < ATTR_LIST_MAX; i++)
        if (used & tpu__text_attrs[i].bit)
            len += (size_t)snprintf(buf + len, ATTR_LIST_MAX - len, "%s%s", len ? ", " : "",
                                    tpu__text_attrs[i].hint);
}

const struct tpu__text_attr *tpu__parse_find_attr(const char *name)
{
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (strcmp(tpu__text_attrs[i].name, name) == 0)
            return &tpu__text_attrs[i];
    return NULL;
}

/* Parses an integer token into [lo, hi]. */
static int parse_int(struct tpu__parser *ps, const char *at, const char *tok, const char *what,
                     long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    bool digits = tok[0] != '\0' && (tok[0] == '-' || tok[0] == '+' ||
                                     (tok[0] >= '0' && tok[0] <= '9'));
    if (!digits || end == tok || *end != '\0')
        return perr(ps, at, "expected an integer for %s, found '%s'", what, tok);
    if (errno == ERANGE || v < lo || v > hi)
        return perr(ps, at, "%s=%s is out of range (%lld to %lld)", what, tok, lo, hi);
    *out = v;
    return 0;
}

/* Parses a FLOAT token (see the grammar). */
static int parse_float(struct tpu__parser *ps, const char *at, const char *tok, const char *what,
                       float *out)
{
    if (strncmp(tok, "nan:0x", 6) == 0) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(tok + 6, &end, 16);
        if (strlen(tok + 6) != 8 || *end != '\0' || errno)
            return perr(ps, at, "expected 8 hex digits after 'nan:0x' for %s, found '%s'", what,
                        tok);
        float f = bits_float((uint32_t)v);
        if (!isnan(f))
            return perr(ps, at, "%s=%s is not a NaN bit pattern (exponent all ones, mantissa "
                        "not zero); write the number itself", what, tok);
        *out = f;
        return 0;
    }
    if (strcmp(tok, "nan") == 0) {
        *out = bits_float(0x7fc00000u);
        return 0;
    }
    if (strcmp(tok, "inf") == 0 || strcmp(tok, "+inf") == 0 || strcmp(tok, "-inf") == 0) {
        *out = tok[0] == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    char c0 = tok[0] == '-' || tok[0] == '+' ? tok[1] : tok[0];
    if (!((c0 >= '0' && c0 <= '9') || c0 == '.'))
        return perr(ps, at, "expected a number for %s, found '%s'", what, tok);
    char *end;
    errno = 0;
    float f = strtof(tok, &end);
    if (end == tok || *end != '\0')
        return perr(ps, at, "expected a number for %s, found '%s'", what, tok);
    if (errno == ERANGE && isinf(f))
        return perr(ps, at, "%s=%s overflows f32 (the largest is 3.40282347e+38)", what, tok);
    if (errno == ERANGE && f == 0.0f)
        return perr(ps, at, "%s=%s underflows to zero in f32 (the smallest is 1.4e-45); write "
                    "0 if you mean zero", what, tok);
    *out = f;
    return 0;
}

/* The value of attribute `ad` (its name, at `at`, already read) into op's attributes. */
static int parse_attr_value(struct tpu__parser *ps, struct tpu_op *op, const char *at,
                            const char *name, const struct tpu__text_attr *ad)
{
    int rc;
    tpu__parse_skip_ws(ps);
    bool has_value = ps->cur < ps->line_end && *ps->cur == '=';
    if (ad->type == TPU__TA_FLAG) {
        if (has_value)
            return perr(ps, at, "'%s' is a flag: write '%s' alone, without '='", name, name);
        *tpu__text_attr_flag(&op->attrs, ad->bit) = true;
        return 0;
    }
    if (!has_value)
        return perr(ps, at, "attribute '%s' needs a value: %s", name, ad->hint);
    ps->cur++;
    tpu__parse_skip_ws(ps);
    char tok[64];
    const char *val_at = tpu__parse_read_token(ps, tok);
    if (tok[0] == '\0') {
        ps->cur = val_at;
        char found[64];
        tpu__parse_describe(ps, found);
        return perr(ps, val_at, "expected a value for '%s' (%s), found %s", name, ad->hint,
                    found);
    }
    long long v;
    switch (ad->type) {
    case TPU__TA_PASSES:
        rc = parse_int(ps, val_at, tok, name, 0, UINT8_MAX, &v);
        if (!rc)
            op->attrs.passes = (uint8_t)v;
        return rc;
    case TPU__TA_REDUCE:
    case TPU__TA_GROUP: {
        const char *n0 = ad->type == TPU__TA_REDUCE ? "sum" : "replicas";
        const char *n1 = ad->type == TPU__TA_REDUCE ? "mean" : "replica_cores";
        if (strcmp(tok, n0) == 0 || strcmp(tok, n1) == 0) {
            *tpu__text_attr_int32(&op->attrs, ad->bit) = strcmp(tok, n1) == 0;
            return 0;
        }
        if (tpu__parse_is_ident_start(tok[0]))
            return perr(ps, val_at, "%s=%s is not known; write %s=%s or %s=%s", name, tok, name,
                        n0, name, n1);
        rc = parse_int(ps, val_at, tok, name, INT32_MIN, INT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_int32(&op->attrs, ad->bit) = (int32_t)v;
        return rc;
    }
    case TPU__TA_INT32:
        rc = parse_int(ps, val_at, tok, name, INT32_MIN, INT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_int32(&op->attrs, ad->bit) = (int32_t)v;
        return rc;
    case TPU__TA_VAR:
    case TPU__TA_LR_VAR: {
        const bool lr = ad->type == TPU__TA_LR_VAR;
        ps->cur = val_at;
        char var[TPU__TEXT_NAME_MAX_CHARS + 1];
        rc = tpu__parse_read_name(ps, var, lr ? "a variable name after 'lr_var='"
                                              : "a variable name after 'var='");
        if (!rc)
            rc = tpu__parse_lookup_var(ps, val_at, var, lr ? &op->attrs.lr_var : &op->attrs.var);
        return rc;
    }
    case TPU__TA_FLOAT:
        return parse_float(ps, val_at, tok, name, tpu__text_attr_float(&op->attrs, ad->bit));
    case TPU__TA_WINDOW:
    case TPU__TA_PARTS:
        rc = parse_int(ps, val_at, tok, name, 0, UINT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_window(&op->attrs, ad) = (uint32_t)v;
        return rc;
    case TPU__TA_SCHEDULE: {
        static const char *const names[] = {"constant", "step", "cosine", "host"};
        for (int32_t k = 0; k <= TPU_SCHEDULE_HOST; k++)
            if (strcmp(tok, names[k]) == 0) {
                op->attrs.schedule = k;
                return 0;
            }
        if (tpu__parse_is_ident_start(tok[0]))
            return perr(ps, val_at, "schedule=%s is not known; write schedule=constant, "
                        "schedule=step or schedule=cosine (or schedule=host with "
                        "lr_var=<variable>: a rate the host sets)", tok);
        rc = parse_int(ps, val_at, tok, name, INT32_MIN, INT32_MAX, &v);
        if (!rc)
            op->attrs.schedule = (int32_t)v;
        return rc;
    }
    case TPU__TA_UINT32:
        rc = parse_int(ps, val_at, tok, name, 0, UINT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_uint32(&op->attrs, ad) = (uint32_t)v;
        return rc;
    case TPU__TA_IMM:
        rc = parse_int(ps, val_at, tok, name, INT64_MIN, INT64_MAX, &v);
        if (!rc)
            op->attrs.imm = (int64_t)v;
        return rc;
    case TPU__TA_FLAG:
        break;
    }
    return 0;
}

/* The error for `name` (at `at`), a word after op's inputs that is not one of the attributes
 * it reads (ad is NULL if no op has such an attribute). `n_ins` inputs were read. */
static int unknown_attr(struct tpu__parser *ps, const struct tpu_op *op, const char *at,
                        const char *name, const struct tpu__text_attr *ad, unsigned n_ins)
{
    const char *opname = tpu_opcode_name(op->code);
    unsigned used = tpu_opcode_attrs(op->code);
    char list[ATTR_LIST_MAX];
    attr_list(op->code, list);
    /* the window fields' short names (h, w, c, ...) are common buffer names: such a word
     * after an op that has no window is taken as a misplaced buffer, like any non-attribute */
    const bool not_attr = !ad || ad->type == TPU__TA_WINDOW || ad->type == TPU__TA_PARTS;
    if (not_attr && tpu_program_find_buffer(ps->p, name, NULL) == 0) {
        if (tpu_opcode_n_in(op->code) == 0)
            return perr(ps, at, "%s takes no inputs, got '%s'", opname, name);
        return perr(ps, at, "'%s' is a buffer, not an attribute of %s; separate inputs "
                    "with ','", name, opname);
    }
    unsigned n_in = tpu_opcode_n_in(op->code);
    if (not_attr && n_ins < n_in) {
        char roles[96];
        tpu__parse_role_list(op->code, false, roles);
        return perr(ps, at, "'%s' is not an attribute of %s, and %s takes %u inputs%s but "
                    "got %u: separate inputs with ','", name, opname, opname, n_in, roles,
                    n_ins);
    }
    if (!used)
        return perr(ps, at, "%s takes no attributes, got '%s'", opname, name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (used & tpu__text_attrs[i].bit)
            tpu__parse_consider(name, tpu__text_attrs[i].name, &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown attribute '%s' for %s%s; %s takes %s", name, opname, dym,
                opname, list);
}

/* One "name" or "name=value" attribute of op at the cursor. `seen` collects the TPU_ATTR_
 * bits, `seen_rows` the attributes read, bit i for tpu__text_attrs[i] (several rows may
 * share a bit: the window group's fields, the schedule's). */
static int parse_attr(struct tpu__parser *ps, struct tpu_op *op, unsigned *seen,
                      uint64_t *seen_rows, unsigned n_ins)
{
    const char *at = ps->cur;
    char name[TPU__TEXT_NAME_MAX_CHARS + 1];
    int rc = tpu__parse_read_name(ps, name, "an attribute");
    if (rc)
        return rc;
    const struct tpu__text_attr *ad = tpu__parse_find_attr(name);
    if (!ad || !(tpu_opcode_attrs(op->code) & ad->bit))
        return unknown_attr(ps, op, at, name, ad, n_ins);
    uint64_t row = 1ull << (size_t)(ad - tpu__text_attrs);
    if (*seen_rows & row)
        return perr(ps, at, "attribute '%s' given twice", name);
    *seen_rows |= row;
    *seen |= ad->bit;
    return parse_attr_value(ps, op, at, name, ad);
}

/* The bit of the lr_var row in a parse's seen_rows. */
static uint64_t lr_var_row(void)
{
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (tpu__text_attrs[i].type == TPU__TA_LR_VAR)
            return UINT64_C(1) << i;
    return 0;
}

/* The attributes up to the end of the line, then the checks that need the whole line: the
 * number of inputs and the attributes the op must state. */
int tpu__parse_attrs(struct tpu__parser *ps, struct tpu__op_line *ol)
{
    enum tpu_opcode code = ol->op.code;
    unsigned seen = 0;
    uint64_t seen_rows = 0;
    while (!tpu__parse_at_eol(ps)) {
        if (!tpu__parse_next_is_name(ps)) {
            char found[64];
            tpu__parse_describe(ps, found);
            return perr(ps, ps->cur, "expected an attribute or the end of the line after "
                        "%s's operands, found %s", ol->opname, found);
        }
        int rc = parse_attr(ps, &ol->op, &seen, &seen_rows, ol->n_ins);
        if (rc)
            return rc;
    }
    unsigned n_in = tpu_opcode_n_in(code);
    if (ol->n_ins != n_in) {
        char roles[96];
        tpu__parse_role_list(code, false, roles);
        if (n_in == 0)
            return perr(ps, ol->ins_at, "%s takes no inputs, got %u", ol->opname, ol->n_ins);
        return perr(ps, ol->op_at, "%s takes %u input%s%s, got %u", ol->opname, n_in,
                    n_in == 1 ? "" : "s", roles, ol->n_ins);
    }
    unsigned required = tpu__op_info(code)->required;
    for (size_t i = 0; required && i < tpu__text_n_attrs; i++)
        if ((required & tpu__text_attrs[i].bit) && tpu__text_attrs[i].type != TPU__TA_PARTS &&
            !(seen_rows & (UINT64_C(1) << i)))
            return perr(ps, ol->op_at, "%s needs attribute %s", ol->opname,
                        tpu__text_attrs[i].hint);
    const int32_t sched = ol->op.attrs.schedule;
    if (sched != TPU_SCHEDULE_CONSTANT && sched != TPU_SCHEDULE_HOST && !(seen & TPU_ATTR_VAR))
        return perr(ps, ol->op_at, "%s with a schedule other than constant needs attribute "
                    "var=<variable>: the step counter the learning rate follows", ol->opname);
    if (sched == TPU_SCHEDULE_HOST && !(seen_rows & lr_var_row()))
        return perr(ps, ol->op_at, "%s with schedule=host needs attribute lr_var=<variable>: "
                    "the variable whose low 32 bits hold the rate's f32 bits", ol->opname);
    return 0;
}

/* "var_add VAR INT" after the op name. */
int tpu__parse_var_add(struct tpu__parser *ps, struct tpu_op *op)
{
    char var[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *at = (tpu__parse_skip_ws(ps), ps->cur);
    int rc = tpu__parse_read_name(ps, var, "a variable after var_add (var_add <variable> <int>)");
    if (!rc)
        rc = tpu__parse_lookup_var(ps, at, var, &op->attrs.var);
    if (rc)
        return rc;
    char tok[64];
    tpu__parse_skip_ws(ps);
    const char *num_at = tpu__parse_read_token(ps, tok);
    if (tok[0] == '\0') {
        ps->cur = num_at;
        char found[64];
        tpu__parse_describe(ps, found);
        return perr(ps, num_at, "expected the integer to add after 'var_add %s', found %s", var,
                    found);
    }
    long long v;
    rc = parse_int(ps, num_at, tok, "var_add's increment", INT64_MIN, INT64_MAX, &v);
    if (!rc) {
        op->attrs.imm = (int64_t)v;
        rc = tpu__parse_expect_eol(ps, "var_add's increment");
    }
    return rc;
}
