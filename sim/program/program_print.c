/* The device program's text form, printing: tpu_program_print, tpu_program_to_string and
 * tpu_program_format_op (include/tpusim/program.h). The grammar of the text, which attributes
 * an op must state and what the parser checks are in the opening comment of program_parse.c.
 *
 * Printing is canonical (one spelling per program), so print -> parse -> print gives the same
 * bytes and parse(print(p)) equals p field by field. It prints whatever the program holds,
 * checked or not: an attribute the op must state is always printed, any other only when it
 * differs from its default, and an attribute the op does not read is printed if it is not
 * zero, so that nothing is hidden (the parser rejects it).
 *
 * Printing lays the program out as: the header; the variables; the buffers ("temp " padded to
 * the width of "param"); the ops, a loop's body indented by two spaces; a blank line between
 * these groups. Floats print as the shortest "%.6g" .. "%.9g" that reads back to the same bits
 * (strtof in the C locale), so "0.1" stays "0.1".
 *
 * This file also defines the attribute table that the parser shares (program_int.h). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_int.h"
#include "util.h"

#define INDENT "  "

/* ---- attributes as text (shared with the parser through program_int.h) ------------- */

const struct tpu__text_attr tpu__text_attrs[] = {
    {TPU_ATTR_TRANS_A, "trans_a", TPU__TA_FLAG, "trans_a"},
    {TPU_ATTR_TRANS_B, "trans_b", TPU__TA_FLAG, "trans_b"},
    {TPU_ATTR_ACCUMULATE, "accumulate", TPU__TA_FLAG, "accumulate"},
    {TPU_ATTR_CORE0, "core0", TPU__TA_FLAG, "core0"},
    {TPU_ATTR_PASSES, "passes", TPU__TA_PASSES, "passes=<1|3|6>"},
    {TPU_ATTR_AXIS, "axis", TPU__TA_INT32, "axis=<0|1>"},
    {TPU_ATTR_REDUCE, "reduce", TPU__TA_REDUCE, "reduce=<sum|mean>"},
    {TPU_ATTR_SHIFT, "shift", TPU__TA_INT32, "shift=<int>"},
    {TPU_ATTR_GROUP, "group", TPU__TA_GROUP, "group=<replicas|replica_cores>"},
    {TPU_ATTR_VAR, "var", TPU__TA_VAR, "var=<variable>"},
    {TPU_ATTR_IMM, "imm", TPU__TA_IMM, "imm=<int>"},
    {TPU_ATTR_ALPHA, "alpha", TPU__TA_FLOAT, "alpha=<float>"},
    {TPU_ATTR_BETA, "beta", TPU__TA_FLOAT, "beta=<float>"},
    {TPU_ATTR_GAMMA, "gamma", TPU__TA_FLOAT, "gamma=<float>"},
    {TPU_ATTR_DELTA, "delta", TPU__TA_FLOAT, "delta=<float>"},
    {TPU_ATTR_EPS, "eps", TPU__TA_FLOAT, "eps=<float>"},
    {TPU_ATTR_WINDOW, "h", TPU__TA_WINDOW, "h=<rows>"},
    {TPU_ATTR_WINDOW, "w", TPU__TA_WINDOW, "w=<cols>"},
    {TPU_ATTR_WINDOW, "c", TPU__TA_WINDOW, "c=<channels>"},
    {TPU_ATTR_WINDOW, "kh", TPU__TA_WINDOW, "kh=<rows>"},
    {TPU_ATTR_WINDOW, "kw", TPU__TA_WINDOW, "kw=<cols>"},
    {TPU_ATTR_WINDOW, "sh", TPU__TA_WINDOW, "sh=<stride>"},
    {TPU_ATTR_WINDOW, "sw", TPU__TA_WINDOW, "sw=<stride>"},
    {TPU_ATTR_WINDOW, "pt", TPU__TA_WINDOW, "pt=<pad>"},
    {TPU_ATTR_WINDOW, "pl", TPU__TA_WINDOW, "pl=<pad>"},
    {TPU_ATTR_WINDOW, "ho", TPU__TA_WINDOW, "ho=<rows>"},
    {TPU_ATTR_WINDOW, "wo", TPU__TA_WINDOW, "wo=<cols>"},
    {TPU_ATTR_WINDOW, "parts", TPU__TA_PARTS, "parts=<cores>"},
    {TPU_ATTR_SCHEDULE, "schedule", TPU__TA_SCHEDULE, "schedule=<constant|step|cosine|host>"},
    {TPU_ATTR_SCHEDULE, "warmup", TPU__TA_UINT32, "warmup=<steps>"},
    {TPU_ATTR_SCHEDULE, "decay_steps", TPU__TA_UINT32, "decay_steps=<steps>"},
    {TPU_ATTR_SCHEDULE, "decay_rate", TPU__TA_FLOAT, "decay_rate=<float>"},
    {TPU_ATTR_SCHEDULE, "lr_var", TPU__TA_LR_VAR, "lr_var=<variable>"},
};
const size_t tpu__text_n_attrs = sizeof tpu__text_attrs / sizeof tpu__text_attrs[0];
/* the parser keeps one bit per entry in a uint64_t (program_parse_attr.c) */
_Static_assert(sizeof tpu__text_attrs / sizeof tpu__text_attrs[0] <= 64,
               "at most 64 text attributes");

int32_t *tpu__text_attr_int32(struct tpu_op_attrs *a, unsigned bit)
{
    switch (bit) {
    case TPU_ATTR_AXIS:
        return &a->axis;
    case TPU_ATTR_REDUCE:
        return &a->reduce;
    case TPU_ATTR_SHIFT:
        return &a->shift;
    case TPU_ATTR_SCHEDULE:
        return &a->schedule;
    default:
        return &a->group;
    }
}

uint32_t *tpu__text_attr_uint32(struct tpu_op_attrs *a, const struct tpu__text_attr *ad)
{
    return strcmp(ad->name, "warmup") == 0 ? &a->warmup : &a->decay_steps;
}

bool *tpu__text_attr_flag(struct tpu_op_attrs *a, unsigned bit)
{
    switch (bit) {
    case TPU_ATTR_TRANS_A:
        return &a->trans_a;
    case TPU_ATTR_TRANS_B:
        return &a->trans_b;
    case TPU_ATTR_CORE0:
        return &a->core0;
    default:
        return &a->accumulate;
    }
}

float *tpu__text_attr_float(struct tpu_op_attrs *a, unsigned bit)
{
    switch (bit) {
    case TPU_ATTR_ALPHA:
        return &a->alpha;
    case TPU_ATTR_BETA:
        return &a->beta;
    case TPU_ATTR_GAMMA:
        return &a->gamma;
    case TPU_ATTR_DELTA:
        return &a->delta;
    case TPU_ATTR_SCHEDULE:
        return &a->decay_rate;
    default:
        return &a->eps;
    }
}

uint32_t *tpu__text_attr_window(struct tpu_op_attrs *a, const struct tpu__text_attr *ad)
{
    struct tpu_window *w = &a->win;
    uint32_t *const fields[] = {&w->h,  &w->w,  &w->c,  &w->kh, &w->kw, &w->sh,
                                &w->sw, &w->pt, &w->pl, &w->ho, &w->wo, &w->parts};
    static const char *const names[] = {"h", "w", "c", "kh", "kw", "sh", "sw", "pt", "pl",
                                        "ho", "wo", "parts"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(ad->name, names[i]) == 0)
            return fields[i];
    return &w->wo;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Whether the attribute holds the value the parser gives it when the text omits it. */
static bool attr_is_default(const struct tpu_op *op, const struct tpu__text_attr *ad)
{
    struct tpu_op_attrs a = op->attrs;
    switch (ad->type) {
    case TPU__TA_FLAG:
        return !*tpu__text_attr_flag(&a, ad->bit);
    case TPU__TA_PASSES:
        return a.passes == ((tpu_opcode_attrs(op->code) & TPU_ATTR_PASSES) ? 1 : 0);
    case TPU__TA_INT32:
    case TPU__TA_REDUCE:
    case TPU__TA_GROUP:
    case TPU__TA_SCHEDULE:
        return *tpu__text_attr_int32(&a, ad->bit) == 0;
    case TPU__TA_UINT32:
        return *tpu__text_attr_uint32(&a, ad) == 0;
    case TPU__TA_VAR:
        /* a scheduled sgd_momentum reads its variable even when it is variable 0 (not with
         * the host's rate, which is in lr_var) */
        return a.var == 0 &&
               (a.schedule == TPU_SCHEDULE_CONSTANT || a.schedule == TPU_SCHEDULE_HOST);
    case TPU__TA_LR_VAR:
        /* schedule=host reads lr_var even when it is variable 0 */
        return a.lr_var == 0 && a.schedule != TPU_SCHEDULE_HOST;
    case TPU__TA_IMM:
        return a.imm == 0;
    case TPU__TA_FLOAT:
        return float_bits(*tpu__text_attr_float(&a, ad->bit)) == 0;
    case TPU__TA_WINDOW:
    case TPU__TA_PARTS:
        return *tpu__text_attr_window(&a, ad) == 0;
    }
    return true;
}

/* ---- a growing string ------------------------------------------------------------------ */

struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
};

static void sb_putf(struct sbuf *b, const char *fmt, ...) TPU__PRINTF(2, 3);

static void sb_putf(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
        b->len += (size_t)n;
        return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap <= b->len + (size_t)n)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = true;
        return;
    }
    b->s = s;
    b->cap = cap;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* ---- printing ---------------------------------------------------------------------------- */

/* The shortest decimal form of f that strtof reads back to the same bits. */
static void format_float(float f, char out[32])
{
    uint32_t u = float_bits(f);
    if (isnan(f)) {
        if (u == 0x7fc00000u)
            snprintf(out, 32, "nan");
        else
            snprintf(out, 32, "nan:0x%08" PRIx32, u);
        return;
    }
    if (isinf(f)) {
        snprintf(out, 32, "%s", f < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, 32, "%.*g", prec, (double)f);
        if (float_bits(strtof(out, NULL)) == u)
            return;
    }
}

static const char *buf_name(const struct tpu_program *p, uint32_t id)
{
    const struct tpu_buffer_desc *b = tpu_program_buffer(p, id);
    return b ? b->name : "?";
}

static void put_attr(struct sbuf *b, const struct tpu_program *p, const struct tpu_op *op,
                     const struct tpu__text_attr *ad)
{
    struct tpu_op_attrs a = op->attrs;
    char num[32];
    switch (ad->type) {
    case TPU__TA_FLAG:
        sb_putf(b, " %s", ad->name);
        return;
    case TPU__TA_PASSES:
        sb_putf(b, " passes=%u", (unsigned)a.passes);
        return;
    case TPU__TA_INT32:
        sb_putf(b, " %s=%" PRId32, ad->name, *tpu__text_attr_int32(&a, ad->bit));
        return;
    case TPU__TA_REDUCE:
        if (a.reduce == TPU_REDUCE_SUM || a.reduce == TPU_REDUCE_MEAN)
            sb_putf(b, " reduce=%s", a.reduce == TPU_REDUCE_SUM ? "sum" : "mean");
        else
            sb_putf(b, " reduce=%" PRId32, a.reduce);
        return;
    case TPU__TA_GROUP:
        if (a.group == TPU_GROUP_REPLICAS || a.group == TPU_GROUP_REPLICA_CORES)
            sb_putf(b, " group=%s", a.group == TPU_GROUP_REPLICAS ? "replicas" : "replica_cores");
        else
            sb_putf(b, " group=%" PRId32, a.group);
        return;
    case TPU__TA_VAR:
        if (tpu_program_var_name(p, a.var))
            sb_putf(b, " var=%s", tpu_program_var_name(p, a.var));
        else
            sb_putf(b, " var=%" PRIu32, a.var);
        return;
    case TPU__TA_IMM:
        sb_putf(b, " imm=%" PRId64, a.imm);
        return;
    case TPU__TA_LR_VAR:
        if (tpu_program_var_name(p, a.lr_var))
            sb_putf(b, " lr_var=%s", tpu_program_var_name(p, a.lr_var));
        else
            sb_putf(b, " lr_var=%" PRIu32, a.lr_var);
        return;
    case TPU__TA_SCHEDULE: {
        static const char *const names[] = {"constant", "step", "cosine", "host"};
        if (a.schedule >= 0 && a.schedule <= TPU_SCHEDULE_HOST)
            sb_putf(b, " schedule=%s", names[a.schedule]);
        else
            sb_putf(b, " schedule=%" PRId32, a.schedule);
        return;
    }
    case TPU__TA_UINT32:
        sb_putf(b, " %s=%" PRIu32, ad->name, *tpu__text_attr_uint32(&a, ad));
        return;
    case TPU__TA_FLOAT:
        format_float(*tpu__text_attr_float(&a, ad->bit), num);
        sb_putf(b, " %s=%s", ad->name, num);
        return;
    case TPU__TA_WINDOW:
    case TPU__TA_PARTS:
        sb_putf(b, " %s=%" PRIu32, ad->name, *tpu__text_attr_window(&a, ad));
        return;
    }
}

/* Appends the op's line (no indentation, no newline). */
static void put_op(struct sbuf *b, const struct tpu_program *p, const struct tpu_op *op)
{
    const struct tpu__op_info *info = tpu__op_info(op->code);
    const char *var = tpu_program_var_name(p, op->attrs.var);
    switch (info->syntax) {
    case TPU__SYNTAX_LOOP:
        sb_putf(b, "loop %s {", var ? var : "?");
        return;
    case TPU__SYNTAX_LOOP_END:
        sb_putf(b, "}");
        return;
    case TPU__SYNTAX_VAR_IMM:
        sb_putf(b, "%s %s %" PRId64, info->name, var ? var : "?", op->attrs.imm);
        return;
    case TPU__SYNTAX_OPERANDS:
        break;
    }
    unsigned n_out = tpu_opcode_n_out(op->code), n_in = tpu_opcode_n_in(op->code);
    for (unsigned i = 0; i < n_out; i++)
        sb_putf(b, "%s%s", i ? ", " : "", buf_name(p, op->out[i]));
    sb_putf(b, "%s%s", n_out ? " = " : "", tpu_opcode_name(op->code));
    for (unsigned i = 0; i < n_in; i++)
        sb_putf(b, "%s%s", i ? ", " : " ", buf_name(p, op->in[i]));
    unsigned required = info->required;
    for (size_t i = 0; i < tpu__text_n_attrs; i++) {
        const struct tpu__text_attr *ad = &tpu__text_attrs[i];
        /* parts shares the window's bit but is never required: printed when set */
        const bool req = (required & ad->bit) && ad->type != TPU__TA_PARTS;
        if (req || !attr_is_default(op, ad))
            put_attr(b, p, op, ad);
    }
}

int tpu_program_format_op(const struct tpu_program *p, size_t i, char *buf, size_t size)
{
    if (!buf || size < 4)
        return TPU_EINVAL;
    buf[0] = '\0';
    const struct tpu_op *op = tpu_program_op(p, i);
    if (!op)
        return TPU_EINVAL;
    struct sbuf b = {0};
    put_op(&b, p, op);
    if (b.oom) {
        free(b.s);
        return TPU_ENOMEM;
    }
    if (b.len < size) {
        memcpy(buf, b.s, b.len + 1);
    } else {
        memcpy(buf, b.s, size - 4);
        memcpy(buf + size - 4, "...", 4);
    }
    free(b.s);
    return 0;
}

/* The whole text into b. */
static void put_program(struct sbuf *b, const struct tpu_program *p)
{
    sb_putf(b, "program %s\n", tpu_program_name(p));
    size_t n_vars = tpu_program_n_vars(p), n_bufs = tpu_program_n_buffers(p);
    if (n_vars)
        sb_putf(b, "\n");
    for (uint32_t v = 0; v < n_vars; v++)
        sb_putf(b, "var %s\n", tpu_program_var_name(p, v));
    if (n_bufs)
        sb_putf(b, "\n");
    for (uint32_t id = 0; id < n_bufs; id++) {
        const struct tpu_buffer_desc *d = tpu_program_buffer(p, id);
        sb_putf(b, "%s %s: %s[%" PRIu32 ", %" PRIu32 "]\n",
                d->kind == TPU_BUF_PARAM ? "param" : "temp ", d->name,
                tpu_dtype_name(d->dtype), d->rows, d->cols);
    }
    size_t n_ops = tpu_program_n_ops(p);
    if (n_ops)
        sb_putf(b, "\n");
    unsigned depth = 0;
    for (size_t i = 0; i < n_ops && !b->oom; i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_LOOP_END && depth > 0)
            depth--;
        for (unsigned k = 0; k < depth; k++)
            sb_putf(b, INDENT);
        put_op(b, p, op);
        sb_putf(b, "\n");
        if (op->code == TPU_OP_LOOP_BEGIN)
            depth++;
    }
}

int tpu_program_to_string(const struct tpu_program *p, char **out)
{
    if (!out)
        return TPU_EINVAL;
    *out = NULL;
    if (!p)
        return TPU_EINVAL;
    struct sbuf b = {0};
    put_program(&b, p);
    if (b.oom || !b.s) {
        free(b.s);
        return TPU_ENOMEM;
    }
    *out = b.s;
    return 0;
}

int tpu_program_print(const struct tpu_program *p, FILE *f)
{
    if (!p || !f)
        return TPU_EINVAL;
    char *s;
    int rc = tpu_program_to_string(p, &s);
    if (rc)
        return rc;
    size_t len = strlen(s);
    rc = fwrite(s, 1, len, f) == len ? 0 : TPU_EIO;
    free(s);
    return rc;
}
