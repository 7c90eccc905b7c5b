/* The device program's verifier: the rules a program must satisfy before a chip runs it.
 *
 * It works like a compiler's checker for a static-shape accelerator: one pass over the ops
 * in program order, stopping at the first broken rule with a message that names the op by
 * index and text, the rule, the offending shapes or dtypes, and the fix. It does not
 * compute anything and does not know the runtime; the ops' values are defined in sim/ops/.
 *
 * Rules (program.h describes the ops themselves; the op table's `rule` column says which of
 * T1-T13 an op follows, its `attrs` column which attributes it reads):
 *
 * Structure
 *   S1  At most one loop, not nested; every loop_begin has its loop_end and every loop_end
 *       its loop_begin. A loop's body is not empty. A program without ops is valid.
 *   S2  Inside the loop, var_add does not change the loop's own trip-count variable (the
 *       count is read at launch; changing it on the chip is always a mistake). adam's step
 *       variable is not the trip-count variable either.
 *   S3  Infeed, outfeed and collectives may appear before, inside or after the loop.
 * Attributes
 *   A1  An op leaves the attributes it does not read at zero (tpu_opcode_attrs).
 *   A2  Float attributes the op reads are finite.
 *   A3  matmul passes is 1, 3 or 6; 3 and 6 need an f32 input (they split f32 values into
 *       bf16 parts; bf16 x bf16 and int8 x int8 are exact in one pass). reduce_* axis is 0 or 1.
 *       all_reduce reduce is sum or mean, group replicas or replica_cores.
 *       collective_permute group is replicas or replica_cores (any shift). adam, adamw:
 *       0 <= beta < 1, 0 <= delta < 1 (the bias corrections divide by 1 - beta^t), eps > 0.
 * Shapes and dtypes ([rows, cols])
 *   T1  matmul: a [M, K] ([K, M] if trans_a), b [K, N] ([N, K] if trans_b), y [M, N]. Inputs
 *       are f32 or bf16 in any mix (y f32), or both int8 (y int32); int32 inputs and a mix
 *       of int8 and float are rejected. With a chip config, the chip's matrix unit must
 *       support the type (bf16 for float inputs, int8 for int8).
 *   T2  add, sub, mul, max: a, b, y f32; y has a's shape; b has a's shape, [1, cols]
 *       (broadcast over rows) or [1, 1]. scale, relu, exp: x, y f32 of one shape. relu_grad:
 *       dy, x, y f32 of one shape. The vector unit computes in f32 only.
 *   T3  convert: one shape; any pair of dtypes except f32 or bf16 to int8 or int32 (that
 *       truncates and saturates, never a quantization: use quantize, with a scale).
 *       The same dtype is a copy.
 *   T3q quantize: x f32, y int8 of one shape; alpha > 0 and finite (1 / the scale).
 *   T4  reduce_sum, reduce_max: x, y f32; axis 0 gives [1, cols], axis 1 [rows, 1].
 *   T5  softmax_xent: logits f32 [B, C], labels int32 [B, 1], loss f32 [1, 1], dlogits f32
 *       [B, C]; softmax_xent_w also weights f32 [B, 1]. classify_count: logits and labels
 *       likewise, y f32 [1, 2].
 *   T6  sgd_momentum, adam, adamw: param, state and grad f32 of one shape; param and state
 *       are `param` buffers (they persist across launches).
 *   T7  all_reduce: x, y f32 of one shape. collective_permute: x, y of one shape and dtype.
 *   T8  infeed writes a temp. (T9-T11 and A4, the training ops: program_verify_train.c)
 *   T12 im2col, col2im, max_pool, max_pool_grad, avg_pool, avg_pool_grad (WINDOW) and
 *   T13 reshape (RESHAPE): program_verify_window.c states them.
 *   T14 conv2d, conv2d_grad_input, conv2d_grad_filter (CONV): program_verify_window.c.
 *   T15 halo, halo_grad (HALO) and T16 row_mask (ROW_MASK), and a window's parts:
 *       program_verify_part.c states them.
 * Buffers and dataflow
 *   D1  An op's outputs are distinct buffers. An output may also be an input (in place) only
 *       where the op table's `alias` column allows it: add, sub, mul, max, scale, relu,
 *       relu_grad, exp and all_reduce; never for
 *       matmul or the conv2d ops (the array reads its inputs while the output drains),
 *       reductions, convert, softmax_xent, classify_count, collective_permute, the window
 *       ops, reshape, or an optimizer's grad.
 *   D2  A temp is read only after it is written: earlier in the same loop iteration, or
 *       before the loop. Params are always defined. After the loop, a temp written only in
 *       the loop body is undefined (the loop may run zero times).
 *   D3  Within the loop body, a temp the body writes is not read before the body writes it
 *       (that would read the previous iteration's value: loop-carried state belongs in a
 *       param).
 *   D4  A temp is written at most once per pass (once per iteration in the body, once per
 *       launch outside it) by an op that does not read it; later writes must update it in
 *       place (the op also reads it, or matmul accumulate). matmul accumulate reads y, so
 *       y must be defined before (D2).
 *   D5  A param takes at most one optimizer update per pass.
 * Memory
 *   M1  With a chip config, the program fits in one core's share of HBM (hbm_bytes /
 *       cores_per_chip): its params plus the peak of its live temps (tpu_program_memory,
 *       program_memory.c, says when a temp is live). The message gives the need and both
 *       parts, the op at the peak, the sum of all temps, the limit and the three largest
 *       buffers that count at the peak. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_int.h"
#include "util.h"

#define NONE SIZE_MAX

struct verifier {
    const struct tpu_program *p;
    const struct tpu_chip_config *cfg;
    struct tpu_diag *d;
    size_t i; /* the op being checked */
    const struct tpu_op *op;
    const char *opname;
    /* the loop found by the first scan: loop_begin at lb, its loop_end at le (NONE if
     * missing); lb is NONE when there is no loop */
    size_t lb, le;
    uint32_t loop_var;
    /* dataflow, per buffer id: last write (temps) and optimizer update (params) in the
     * current region, and the first write inside the loop body */
    size_t *outer_w, *body_w, *body_first, *opt_outer, *opt_body;
};

static int fail_op(struct verifier *v, int code, const char *fmt, ...) TPU__PRINTF(3, 4);

/* "op 7 'h = matmul x, w1': " and the sentence. */
static int fail_op(struct verifier *v, int code, const char *fmt, ...)
{
    char line[160], msg[TPU_DIAG_MAX];
    tpu_program_format_op(v->p, v->i, line, sizeof line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tpu__fail(v->d, code, "op %zu '%s': %s", v->i, line, msg);
}

static const struct tpu_buffer_desc *buf(const struct verifier *v, uint32_t id)
{
    return tpu_program_buffer(v->p, id);
}

/* "'x' bf16[128, 784]" */
static const char *bdesc(const struct verifier *v, uint32_t id, char out[96])
{
    const struct tpu_buffer_desc *b = buf(v, id);
    snprintf(out, 96, "'%s' %s[%" PRIu32 ", %" PRIu32 "]", b->name, tpu_dtype_name(b->dtype),
             b->rows, b->cols);
    return out;
}

static const char *in_role(const struct verifier *v, unsigned k)
{
    return tpu_opcode_operand_name(v->op->code, false, k);
}

static const char *out_role(const struct verifier *v, unsigned k)
{
    return tpu_opcode_operand_name(v->op->code, true, k);
}

/* The operand `role` (buffer id) must be f32. */
static int need_f32(struct verifier *v, const char *role, uint32_t id)
{
    const struct tpu_buffer_desc *b = buf(v, id);
    if (b->dtype == TPU_F32)
        return 0;
    char s[96];
    return fail_op(v, TPU_ESHAPE, "%s %s is %s, but %s computes in f32 (the vector unit's "
                   "type); convert '%s' to f32 first or declare it f32", role, bdesc(v, id, s),
                   tpu_dtype_name(b->dtype), v->opname, b->name);
}

/* Buffer `id` (operand `role`) must be [rows, cols]; `why` explains where that comes from. */
static int need_shape(struct verifier *v, const char *role, uint32_t id, uint32_t rows,
                      uint32_t cols, const char *why)
{
    const struct tpu_buffer_desc *b = buf(v, id);
    if (b->rows == rows && b->cols == cols)
        return 0;
    char s[96];
    return fail_op(v, TPU_ESHAPE, "%s %s must be [%" PRIu32 ", %" PRIu32 "] (%s); declare it "
                   "%s[%" PRIu32 ", %" PRIu32 "]", role, bdesc(v, id, s), rows, cols, why,
                   tpu_dtype_name(b->dtype), rows, cols);
}

/* Every operand of the op f32 and of one shape (the first input's, or the first output's
 * for an op without inputs). */
static int need_f32_same_shape(struct verifier *v)
{
    unsigned n_out = tpu_opcode_n_out(v->op->code), n_in = tpu_opcode_n_in(v->op->code);
    uint32_t ref = n_in ? v->op->in[0] : v->op->out[0];
    const char *ref_role = n_in ? in_role(v, 0) : out_role(v, 0);
    for (unsigned k = 0; k < n_out + n_in; k++) {
        bool is_out = k < n_out;
        uint32_t id = is_out ? v->op->out[k] : v->op->in[k - n_out];
        char role[48];
        snprintf(role, sizeof role, "%s %s", is_out ? "output" : "input",
                 is_out ? out_role(v, k) : in_role(v, k - n_out));
        int rc = need_f32(v, role, id);
        if (rc)
            return rc;
        const struct tpu_buffer_desc *b = buf(v, id), *r = buf(v, ref);
        if (b->rows != r->rows || b->cols != r->cols) {
            char s1[96], s2[96];
            return fail_op(v, TPU_ESHAPE, "%s %s and %s %s %s differ in shape; %s needs one "
                           "shape for all its operands", role, bdesc(v, id, s1),
                           n_in ? "input" : "output", ref_role, bdesc(v, ref, s2), v->opname);
        }
    }
    return 0;
}

/* ---- attributes ------------------------------------------------------------------------ */

/* Whether attribute `ad` of `a` differs from zero (a float's -0 and NaN count as set). */
static bool attr_is_set(const struct tpu_op_attrs *a, const struct tpu__text_attr *ad)
{
    struct tpu_op_attrs c = *a;
    switch (ad->type) {
    case TPU__TA_FLAG:
        return *tpu__text_attr_flag(&c, ad->bit);
    case TPU__TA_PASSES:
        return c.passes != 0;
    case TPU__TA_INT32:
    case TPU__TA_REDUCE:
    case TPU__TA_GROUP:
    case TPU__TA_SCHEDULE:
        return *tpu__text_attr_int32(&c, ad->bit) != 0;
    case TPU__TA_UINT32:
        return *tpu__text_attr_uint32(&c, ad) != 0;
    case TPU__TA_VAR:
        return c.var != 0;
    case TPU__TA_LR_VAR:
        return c.lr_var != 0;
    case TPU__TA_IMM:
        return c.imm != 0;
    case TPU__TA_FLOAT: {
        float f = *tpu__text_attr_float(&c, ad->bit);
        return f != 0.0f || signbit(f) || isnan(f);
    }
    case TPU__TA_WINDOW:
    case TPU__TA_PARTS:
        return *tpu__text_attr_window(&c, ad) != 0;
    }
    return false;
}

/* A1 and A2: the attributes the op does not read (the op table's `attrs`) are zero, and
 * the float attributes it reads are finite. */
static int check_attrs(struct verifier *v)
{
    struct tpu_op_attrs a = v->op->attrs; /* a copy: the accessors take a mutable struct */
    unsigned used = tpu_opcode_attrs(v->op->code);
    for (size_t k = 0; k < tpu__text_n_attrs; k++) {
        const struct tpu__text_attr *ad = &tpu__text_attrs[k];
        if (ad->type == TPU__TA_FLOAT && (used & ad->bit)) {
            float f = *tpu__text_attr_float(&a, ad->bit);
            if (!isfinite(f))
                return fail_op(v, TPU_EINVAL, "%s=%g is not finite; %s's attributes must be "
                               "finite numbers", ad->name, (double)f, v->opname);
        }
        if (attr_is_set(&a, ad) && !(used & ad->bit))
            return fail_op(v, TPU_EINVAL, "%s does not read attribute %s, which is set; "
                           "attributes an op does not read must stay zero: remove it",
                           v->opname, ad->name);
    }
    return 0;
}

/* ---- per-op rules ----------------------------------------------------------------------- */

static bool is_float(enum tpu_dtype t)
{
    return t == TPU_F32 || t == TPU_BF16;
}

static int check_matmul(struct verifier *v)
{
    const struct tpu_op_attrs *at = &v->op->attrs;
    uint32_t ia = v->op->in[0], ib = v->op->in[1], iy = v->op->out[0];
    const struct tpu_buffer_desc *a = buf(v, ia), *b = buf(v, ib), *y = buf(v, iy);
    char s1[96], s2[96];
    for (unsigned k = 0; k < 2; k++) {
        const struct tpu_buffer_desc *x = k ? b : a;
        if (x->dtype == TPU_INT32)
            return fail_op(v, TPU_ESHAPE, "input %s %s is int32; the matrix unit multiplies "
                           "f32, bf16 or int8: convert it first", k ? "b" : "a",
                           bdesc(v, k ? ib : ia, s1));
    }
    bool int8 = a->dtype == TPU_INT8;
    if (int8 != (b->dtype == TPU_INT8))
        return fail_op(v, TPU_ESHAPE, "mixes int8 and floating point: a is %s, b is %s; both "
                       "must be int8 (int32 result) or both f32/bf16 (f32 result): convert one",
                       bdesc(v, ia, s1), bdesc(v, ib, s2));
    if (at->passes != 1 && at->passes != 3 && at->passes != 6)
        return fail_op(v, TPU_EINVAL, "passes=%u; matmul runs in 1 pass (bf16 inputs: mixed "
                       "precision), or 3 or 6 bf16 passes (f32 precision)",
                       (unsigned)at->passes);
    if (at->passes != 1 && a->dtype != TPU_F32 && b->dtype != TPU_F32)
        return fail_op(v, TPU_EINVAL, "passes=%u needs an f32 input (it splits f32 values into "
                       "bf16 parts; %s inputs are exact in one pass), but a is %s and b is %s; "
                       "use passes=1", (unsigned)at->passes, int8 ? "int8" : "bf16",
                       bdesc(v, ia, s1), bdesc(v, ib, s2));
    uint32_t m = at->trans_a ? a->cols : a->rows, ka = at->trans_a ? a->rows : a->cols;
    uint32_t kb = at->trans_b ? b->cols : b->rows, n = at->trans_b ? b->rows : b->cols;
    if (ka != kb)
        return fail_op(v, TPU_ESHAPE, "inner dimensions differ: a is %s%s (K = %" PRIu32 "), "
                       "b is %s%s (K = %" PRIu32 "); matmul needs a's columns (rows if "
                       "trans_a) to equal b's rows (cols if trans_b)", bdesc(v, ia, s1),
                       at->trans_a ? " transposed" : "", ka, bdesc(v, ib, s2),
                       at->trans_b ? " transposed" : "", kb);
    enum tpu_dtype ydt = int8 ? TPU_INT32 : TPU_F32;
    if (y->dtype != ydt)
        return fail_op(v, TPU_ESHAPE, "output y %s must be %s: matmul of %s inputs gives %s "
                       "(the accumulators' type); declare it %s and convert afterwards if "
                       "needed", bdesc(v, iy, s1), tpu_dtype_name(ydt),
                       int8 ? "int8" : "floating-point", tpu_dtype_name(ydt),
                       tpu_dtype_name(ydt));
    char why[96];
    snprintf(why, sizeof why, "a gives M = %" PRIu32 " rows, b gives N = %" PRIu32 " columns",
             m, n);
    int rc = need_shape(v, "output y", iy, m, n, why);
    if (rc)
        return rc;
    if (v->cfg) {
        uint32_t bit = int8 ? TPU_DTYPE_BIT(TPU_INT8) : TPU_DTYPE_BIT(TPU_BF16);
        if (!(v->cfg->mxu_dtypes & bit))
            return fail_op(v, TPU_EUNSUPPORTED, "chip '%s' has no %s matrix unit (it "
                           "multiplies %s only); %s", v->cfg->name, int8 ? "int8" : "bf16",
                           int8 ? "bf16" : "int8",
                           int8 ? "convert the inputs to bf16 or f32"
                                : "use int8 inputs (quantize them with the quantize op)");
    }
    return 0;
}

static int check_binary(struct verifier *v)
{
    uint32_t ia = v->op->in[0], ib = v->op->in[1], iy = v->op->out[0];
    int rc = need_f32(v, "input a", ia);
    if (!rc)
        rc = need_f32(v, "input b", ib);
    if (!rc)
        rc = need_f32(v, "output y", iy);
    if (rc)
        return rc;
    const struct tpu_buffer_desc *a = buf(v, ia), *b = buf(v, ib);
    bool ok = (b->rows == a->rows && b->cols == a->cols) || (b->rows == 1 && b->cols == a->cols) ||
              (b->rows == 1 && b->cols == 1);
    if (!ok) {
        char s1[96], s2[96];
        return fail_op(v, TPU_ESHAPE, "b %s does not fit a %s; b must have a's shape, [1, %" PRIu32
                       "] (one row, broadcast over the rows) or [1, 1]", bdesc(v, ib, s1),
                       bdesc(v, ia, s2), a->cols);
    }
    return need_shape(v, "output y", iy, a->rows, a->cols, "the shape of a");
}

static int check_convert(struct verifier *v)
{
    uint32_t ix = v->op->in[0], iy = v->op->out[0];
    const struct tpu_buffer_desc *x = buf(v, ix), *y = buf(v, iy);
    char s1[96], s2[96];
    enum tpu_dtype from = x->dtype, to = y->dtype;
    if (is_float(from) && !is_float(to))
        return fail_op(v, TPU_ESHAPE, "convert from %s to %s (x %s, y %s) would truncate and "
                       "saturate, which is not a quantization; use quantize with a scale "
                       "(alpha), or keep the values in floating point", tpu_dtype_name(from),
                       tpu_dtype_name(to), bdesc(v, ix, s1), bdesc(v, iy, s2));
    return need_shape(v, "output y", iy, x->rows, x->cols, "the shape of x");
}

static int check_quantize(struct verifier *v)
{
    uint32_t ix = v->op->in[0], iy = v->op->out[0];
    const struct tpu_buffer_desc *x = buf(v, ix), *y = buf(v, iy);
    char s1[96], s2[96];
    if (x->dtype != TPU_F32 || y->dtype != TPU_INT8)
        return fail_op(v, TPU_ESHAPE, "quantize takes f32 to int8; x is %s and y is %s",
                       bdesc(v, ix, s1), bdesc(v, iy, s2));
    if (!(v->op->attrs.alpha > 0))
        return fail_op(v, TPU_EINVAL, "alpha=%g; quantize multiplies by alpha = 1 / the scale, "
                       "which must be above 0", (double)v->op->attrs.alpha);
    return need_shape(v, "output y", iy, x->rows, x->cols, "the shape of x");
}

static int check_reduce(struct verifier *v)
{
    uint32_t ix = v->op->in[0], iy = v->op->out[0];
    int axis = v->op->attrs.axis;
    if (axis != 0 && axis != 1)
        return fail_op(v, TPU_EINVAL, "axis=%d; %s reduces over axis 0 (the rows: y is [1, "
                       "cols]) or 1 (the columns: y is [rows, 1])", axis, v->opname);
    int rc = need_f32(v, "input x", ix);
    if (!rc)
        rc = need_f32(v, "output y", iy);
    if (rc)
        return rc;
    const struct tpu_buffer_desc *x = buf(v, ix);
    return axis == 0 ? need_shape(v, "output y", iy, 1, x->cols, "axis 0 reduces the rows")
                     : need_shape(v, "output y", iy, x->rows, 1, "axis 1 reduces the columns");
}

/* logits f32 [B, C], labels int32 [B, 1] (softmax_xent and classify_count). */
static int check_logits_labels(struct verifier *v)
{
    uint32_t il = v->op->in[0], ilab = v->op->in[1];
    int rc = need_f32(v, "input logits", il);
    if (rc)
        return rc;
    const struct tpu_buffer_desc *l = buf(v, il), *lab = buf(v, ilab);
    if (lab->dtype != TPU_INT32) {
        char s[96];
        return fail_op(v, TPU_ESHAPE, "labels %s must be int32 (one class index per row, < 0 "
                       "for padding); declare it int32", bdesc(v, ilab, s));
    }
    return need_shape(v, "input labels", ilab, l->rows, 1, "one label per row of logits");
}

static int check_softmax_xent(struct verifier *v)
{
    int rc = check_logits_labels(v);
    uint32_t iloss = v->op->out[0], idl = v->op->out[1], il = v->op->in[0];
    const struct tpu_buffer_desc *l = buf(v, il);
    if (!rc && v->op->code == TPU_OP_SOFTMAX_XENT_W)
        rc = need_f32(v, "input weights", v->op->in[2]);
    if (!rc && v->op->code == TPU_OP_SOFTMAX_XENT_W)
        rc = need_shape(v, "input weights", v->op->in[2], l->rows, 1,
                        "one weight per row of logits");
    if (!rc)
        rc = need_f32(v, "output loss", iloss);
    if (!rc)
        rc = need_shape(v, "output loss", iloss, 1, 1, "the loss is a scalar");
    if (!rc)
        rc = need_f32(v, "output dlogits", idl);
    if (!rc)
        rc = need_shape(v, "output dlogits", idl, l->rows, l->cols, "the shape of logits");
    return rc;
}

static int check_classify_count(struct verifier *v)
{
    int rc = check_logits_labels(v);
    if (!rc)
        rc = need_f32(v, "output y", v->op->out[0]);
    if (!rc)
        rc = need_shape(v, "output y", v->op->out[0], 1, 2, "correct rows, labelled rows");
    return rc;
}

static int check_optimizer(struct verifier *v)
{
    int rc = need_f32_same_shape(v);
    if (rc)
        return rc;
    unsigned n_out = tpu_opcode_n_out(v->op->code);
    for (unsigned k = 0; k < n_out; k++) {
        uint32_t id = v->op->out[k];
        if (buf(v, id)->kind != TPU_BUF_PARAM) {
            char s[96];
            return fail_op(v, TPU_EINVAL, "%s %s is a temp, but %s updates it in place across "
                           "steps; declare it 'param'", out_role(v, k), bdesc(v, id, s),
                           v->opname);
        }
    }
    return 0;
}

/* adam: check_optimizer's rules and its attributes'. */
static int check_adam(struct verifier *v)
{
    int rc = check_optimizer(v);
    if (rc)
        return rc;
    const struct tpu_op_attrs *a = &v->op->attrs;
    if (!(a->beta >= 0.0f && a->beta < 1.0f) || !(a->delta >= 0.0f && a->delta < 1.0f))
        return fail_op(v, TPU_EINVAL, "beta=%g, delta=%g; %s's decay rates b1 (beta) and b2 "
                       "(delta) must lie in [0, 1) (the bias corrections divide by 1 - b^t): "
                       "the usual values are 0.9 and 0.999", (double)a->beta,
                       (double)a->delta, v->opname);
    if (!(a->eps > 0.0f))
        return fail_op(v, TPU_EINVAL, "eps=%g; %s's eps must be positive (it keeps "
                       "m / (sqrt(v) + eps) finite): 1e-07 is usual", (double)a->eps, v->opname);
    if (v->lb != NONE && a->var == v->loop_var)
        return fail_op(v, TPU_EINVAL, "%s's step variable '%s' is the loop's trip-count "
                       "variable; give it the step counter (a variable the loop increments "
                       "with var_add)", v->opname, tpu_program_var_name(v->p, a->var));
    return 0;
}

static int check_all_reduce(struct verifier *v)
{
    const struct tpu_op_attrs *a = &v->op->attrs;
    if (a->reduce != TPU_REDUCE_SUM && a->reduce != TPU_REDUCE_MEAN)
        return fail_op(v, TPU_EINVAL, "reduce=%" PRId32 "; all_reduce takes reduce=sum (0) "
                       "or reduce=mean (1)", a->reduce);
    if (a->group != TPU_GROUP_REPLICAS && a->group != TPU_GROUP_REPLICA_CORES)
        return fail_op(v, TPU_EINVAL, "group=%" PRId32 "; all_reduce takes group=replicas (0: "
                       "over the replicas, the default) or group=replica_cores (1: over the "
                       "cores of one replica)", a->group);
    return need_f32_same_shape(v);
}

static int check_permute(struct verifier *v)
{
    uint32_t ix = v->op->in[0], iy = v->op->out[0];
    const struct tpu_op_attrs *a = &v->op->attrs;
    if (a->group != TPU_GROUP_REPLICAS && a->group != TPU_GROUP_REPLICA_CORES)
        return fail_op(v, TPU_EINVAL, "group=%" PRId32 "; collective_permute takes "
                       "group=replicas (0) or group=replica_cores (1)", a->group);
    const struct tpu_buffer_desc *x = buf(v, ix), *y = buf(v, iy);
    if (x->dtype != y->dtype || x->rows != y->rows || x->cols != y->cols) {
        char s1[96], s2[96];
        return fail_op(v, TPU_ESHAPE, "x %s and y %s differ; collective_permute moves x into "
                       "y unchanged, so they need one shape and dtype", bdesc(v, ix, s1),
                       bdesc(v, iy, s2));
    }
    return 0;
}

static int check_infeed(struct verifier *v)
{
    if (buf(v, v->op->out[0])->kind != TPU_BUF_TEMP) {
        char s[96];
        return fail_op(v, TPU_EINVAL, "infeed writes y %s, a param; infeed fills a temp "
                       "(copy it into a param with convert if it must persist)",
                       bdesc(v, v->op->out[0], s));
    }
    return 0;
}

static int check_train(struct verifier *v, int rc) /* T9-T11, A4, once rc (the rest) is 0 */
{
    char msg[TPU_DIAG_MAX];
    int e = rc ? 0 : tpu__verify_train(v->p, v->op, v->lb != NONE, v->loop_var, msg, sizeof msg);
    return e ? fail_op(v, e, "%s", msg) : rc;
}

/* The op's shape and dtype rule: the op table's `rule` column. */
static int check_op_types(struct verifier *v)
{
    switch (tpu__op_info(v->op->code)->rule) {
    case TPU__RULE_INFEED:
        return check_infeed(v);
    case TPU__RULE_MATMUL:
        return check_matmul(v);
    case TPU__RULE_BINARY:
        return check_binary(v);
    case TPU__RULE_F32:
        return need_f32_same_shape(v);
    case TPU__RULE_CONVERT:
        return check_convert(v);
    case TPU__RULE_QUANTIZE:
        return check_quantize(v);
    case TPU__RULE_REDUCE:
        return check_reduce(v);
    case TPU__RULE_WINDOW:
    case TPU__RULE_RESHAPE: {
        char msg[TPU_DIAG_MAX];
        int rc = tpu__verify_window(v->p, v->op, msg, sizeof msg);
        return rc ? fail_op(v, rc, "%s", msg) : 0;
    }
    case TPU__RULE_CONV: {
        char msg[TPU_DIAG_MAX];
        int rc = tpu__verify_conv(v->p, v->op, v->cfg, msg, sizeof msg);
        return rc ? fail_op(v, rc, "%s", msg) : 0;
    }
    case TPU__RULE_SOFTMAX_XENT:
        return check_softmax_xent(v);
    case TPU__RULE_CLASSIFY_COUNT:
        return check_classify_count(v);
    case TPU__RULE_OPTIMIZER:
        return check_train(v, check_optimizer(v));
    case TPU__RULE_ADAM:
        return check_train(v, check_adam(v));
    case TPU__RULE_ALL_REDUCE:
        return check_all_reduce(v);
    case TPU__RULE_PERMUTE:
        return check_permute(v);
    case TPU__RULE_HALO:
    case TPU__RULE_ROW_MASK: {
        char msg[TPU_DIAG_MAX];
        int rc = tpu__verify_part(v->p, v->op, msg, sizeof msg);
        return rc ? fail_op(v, rc, "%s", msg) : 0;
    }
    default: /* MSE, COUNT_ROWS, DROPOUT; ANY: outfeed takes anything, var_add and loops
              * have no buffers (tpu__verify_train checks nothing for them) */
        return check_train(v, 0);
    }
}

/* ---- buffers and dataflow --------------------------------------------------------------- */

/* D1, with the op table's `alias` column: which inputs output 0 may be. */
static int check_aliasing(struct verifier *v)
{
    const struct tpu__op_info *info = tpu__op_info(v->op->code);
    unsigned n_out = tpu_opcode_n_out(v->op->code), n_in = tpu_opcode_n_in(v->op->code);
    for (unsigned k = 0; k < n_out; k++) {
        uint32_t id = v->op->out[k];
        for (unsigned j = 0; j < k; j++)
            if (v->op->out[j] == id)
                return fail_op(v, TPU_EINVAL, "outputs %s and %s are both '%s'; an op's "
                               "outputs must be distinct buffers", out_role(v, j),
                               out_role(v, k), buf(v, id)->name);
        for (unsigned j = 0; j < n_in; j++) {
            if (v->op->in[j] != id || (k == 0 && (info->alias & (1u << j))))
                continue;
            const char *why = info->rule == TPU__RULE_MATMUL
                                  ? " (the array reads a and b while y drains)"
                              : info->rule == TPU__RULE_CONV
                                  ? " (the array reads its inputs while the output drains)"
                                  : "";
            return fail_op(v, TPU_EINVAL, "output %s and input %s are both '%s'; %s cannot "
                           "write a buffer it reads%s: use another buffer", out_role(v, k),
                           in_role(v, j), buf(v, id)->name, v->opname, why);
        }
    }
    return 0;
}

/* Whether op reads buffer id. */
static bool op_reads(const struct tpu_op *op, uint32_t id)
{
    for (unsigned j = 0; j < tpu_opcode_n_in(op->code); j++)
        if (op->in[j] == id)
            return true;
    return op->attrs.accumulate && op->out[0] == id; /* attributes checked: matmul only */
}

static int check_read(struct verifier *v, uint32_t id, bool in_body, bool after_loop)
{
    const struct tpu_buffer_desc *b = buf(v, id);
    if (b->kind != TPU_BUF_TEMP)
        return 0;
    bool acc = v->op->attrs.accumulate && v->op->out[0] == id;
    if (in_body && v->body_w[id] == NONE && v->body_first[id] != NONE)
        return fail_op(v, TPU_EINVAL, "reads temp '%s' in the loop body before the body writes "
                       "it (op %zu): from the second iteration on it would see the previous "
                       "iteration's value; write '%s' before reading it, or keep state that "
                       "crosses iterations in a param", b->name, v->body_first[id], b->name);
    if (v->outer_w[id] != NONE || (in_body && v->body_w[id] != NONE))
        return 0;
    if (after_loop && v->body_first[id] != NONE)
        return fail_op(v, TPU_EINVAL, "reads temp '%s' after the loop, but only the loop body "
                       "writes it (op %zu) and the loop may run zero times; read it inside the "
                       "loop, or write it before the loop", b->name, v->body_first[id]);
    if (acc)
        return fail_op(v, TPU_EINVAL, "accumulate adds into temp '%s', which no earlier op "
                       "writes; write it first (a matmul without accumulate) or drop "
                       "accumulate", b->name);
    return fail_op(v, TPU_EINVAL, "reads temp '%s' before any op writes it; a temp is "
                   "undefined until written in the same pass: write it earlier, or declare "
                   "it 'param' if the host sets it", b->name);
}

static int check_dataflow(struct verifier *v, bool in_body, bool after_loop)
{
    const struct tpu_op *op = v->op;
    unsigned n_out = tpu_opcode_n_out(op->code), n_in = tpu_opcode_n_in(op->code);
    int rc;
    for (unsigned j = 0; j < n_in; j++)
        if ((rc = check_read(v, op->in[j], in_body, after_loop)) != 0)
            return rc;
    if (op->attrs.accumulate &&
        (rc = check_read(v, op->out[0], in_body, after_loop)) != 0)
        return rc;
    size_t *last_w = in_body ? v->body_w : v->outer_w;
    size_t *last_opt = in_body ? v->opt_body : v->opt_outer;
    bool optimizer = tpu__op_info(op->code)->rmw; /* updates its params in place */
    for (unsigned k = 0; k < n_out; k++) {
        uint32_t id = op->out[k];
        const struct tpu_buffer_desc *b = buf(v, id);
        if (b->kind == TPU_BUF_TEMP) {
            if (!op_reads(op, id) && last_w[id] != NONE)
                return fail_op(v, TPU_EINVAL, "writes temp '%s' again: op %zu already wrote it "
                               "in this %s; a temp holds one value per pass: write a new temp, "
                               "or update it in place (an op that also reads it, or matmul "
                               "accumulate)", b->name, last_w[id],
                               in_body ? "iteration" : "launch");
            last_w[id] = v->i;
        } else if (optimizer) {
            if (last_opt[id] != NONE)
                return fail_op(v, TPU_EINVAL, "updates param '%s', which op %zu already "
                               "updated in this %s; a param takes one optimizer step per pass",
                               b->name, last_opt[id], in_body ? "iteration" : "launch");
            last_opt[id] = v->i;
        }
    }
    return 0;
}

/* ---- structure --------------------------------------------------------------------------- */

/* Finds the first loop and its end, and the first write of each temp inside it. */
static void scan_loop(struct verifier *v)
{
    size_t n_ops = tpu_program_n_ops(v->p);
    v->lb = v->le = NONE;
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *op = tpu_program_op(v->p, i);
        if (v->lb == NONE && op->code == TPU_OP_LOOP_BEGIN) {
            v->lb = i;
            v->loop_var = op->attrs.var;
        } else if (v->lb != NONE && op->code == TPU_OP_LOOP_END) {
            v->le = i;
            break;
        } else if (v->lb != NONE) {
            for (unsigned k = 0; k < tpu_opcode_n_out(op->code); k++)
                if (v->body_first[op->out[k]] == NONE)
                    v->body_first[op->out[k]] = i;
        }
    }
}

static int check_structure(struct verifier *v, bool in_body, bool after_loop)
{
    const struct tpu_op *op = v->op;
    if (op->code == TPU_OP_LOOP_BEGIN) {
        if (in_body)
            return fail_op(v, TPU_EINVAL, "nested loop: it opens inside the loop opened at op "
                           "%zu; a program has one loop level: move these ops into that "
                           "loop's body", v->lb);
        if (after_loop)
            return fail_op(v, TPU_EINVAL, "a second loop: the program already has a loop (ops "
                           "%zu to %zu); a program has at most one loop: merge their bodies",
                           v->lb, v->le);
    } else if (op->code == TPU_OP_LOOP_END) {
        if (!in_body)
            return fail_op(v, TPU_EINVAL, "closes a loop, but no loop is open");
        if (v->i == v->lb + 1)
            return fail_op(v, TPU_EINVAL, "the loop opened at op %zu has an empty body; put the "
                           "step's ops inside it or remove the loop", v->lb);
    } else if (op->code == TPU_OP_VAR_ADD && in_body && op->attrs.var == v->loop_var) {
        return fail_op(v, TPU_EINVAL, "changes the loop's trip-count variable '%s' inside the "
                       "loop; the count is read once per launch and set by the host: count "
                       "steps in another variable", tpu_program_var_name(v->p, op->attrs.var));
    }
    return 0;
}

/* ---- the pass ------------------------------------------------------------------------------ */

static int run(struct verifier *v)
{
    size_t n_ops = tpu_program_n_ops(v->p);
    scan_loop(v);
    bool in_body = false, after_loop = false;
    int rc = 0;
    for (size_t i = 0; i < n_ops && !rc; i++) {
        v->i = i;
        v->op = tpu_program_op(v->p, i);
        v->opname = tpu_opcode_name(v->op->code);
        rc = check_structure(v, in_body, after_loop);
        if (!rc)
            rc = check_attrs(v);
        if (!rc)
            rc = check_op_types(v);
        if (!rc)
            rc = check_aliasing(v);
        if (!rc)
            rc = check_dataflow(v, in_body, after_loop);
        if (v->op->code == TPU_OP_LOOP_BEGIN) {
            in_body = true;
        } else if (v->op->code == TPU_OP_LOOP_END) {
            in_body = false;
            after_loop = true;
        }
    }
    if (!rc && in_body) {
        v->i = v->lb;
        v->op = tpu_program_op(v->p, v->lb);
        rc = fail_op(v, TPU_EINVAL, "the loop it opens is never closed; add a loop_end after "
                     "the body's last op");
    }
    if (!rc && v->cfg)
        rc = tpu__verify_memory(v->p, v->cfg, v->d);
    return rc;
}

int tpu_program_verify(const struct tpu_program *p, const struct tpu_chip_config *cfg,
                       struct tpu_diag *d)
{
    if (!p)
        return tpu__fail(d, TPU_EINVAL, "no program to verify");
    struct verifier v = {.p = p, .cfg = cfg, .d = d};
    size_t n = tpu_program_n_buffers(p);
    size_t *mem = malloc((5 * n + 1) * sizeof *mem);
    if (!mem)
        return tpu__fail(d, TPU_ENOMEM, "out of memory verifying program '%s' (%zu buffers)",
                         tpu_program_name(p), n);
    for (size_t k = 0; k < 5 * n; k++)
        mem[k] = NONE;
    v.outer_w = mem;
    v.body_w = mem + n;
    v.body_first = mem + 2 * n;
    v.opt_outer = mem + 3 * n;
    v.opt_body = mem + 4 * n;
    int rc = run(&v);
    free(mem);
    if (!rc)
        tpu_diag_clear(d);
    return rc;
}
