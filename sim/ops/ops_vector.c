/* The vector unit's elementwise ops, dtype conversion and reductions, as one core computes
 * them. It is not the timing of the vector unit (the chip's business) and not the loss or
 * optimizer ops (ops_train.c).
 *
 * All arithmetic is IEEE-754 binary32, round to nearest even, with subnormals kept; each
 * operation below is one rounded fp32 operation and nothing is fused (the project compiles
 * with -ffp-contract=off). Every operand except convert's and quantize's output is f32. A
 * NaN result is a quiet NaN; its sign and payload are the host's and not part of the
 * contract (tests compare NaNs as NaNs). y may be the same buffer as an input (in place):
 * each element is read before its own result is written and no other.
 *
 *   add, sub, mul   y = a + b, a - b, a * b
 *   max             y = (a > b or a is NaN) ? a : b   (a NaN in either operand gives NaN;
 *                   of equal values, including +0 and -0, the result is b)
 *   b broadcasts: b is [rows][cols] like a, or [1][cols] (row 0 of b for every row), or
 *   [1][1] (one value for every element).
 *   scale           y = alpha * x + beta   (the product rounded, then the sum)
 *   relu            y = x > 0 ? x : (x is NaN ? x : +0)   (relu(-0) = +0, NaN stays NaN)
 *   relu_grad       y = x > 0 ? dy : +0   (in[0] = dy, in[1] = x)
 *   exp             y = expf(x) of the host's C library. Deterministic on one machine and
 *                   libm version, but libms differ in the last bit (glibc's expf is within
 *                   one ulp), so exp results are not promised bit-identical across hosts.
 *   rsqrt           y = 1 / sqrtf(x + eps): three rounded operations (the sum, IEEE's
 *                   correctly rounded square root, the quotient), so bit-exact on any IEEE
 *                   host; x + eps < 0 gives NaN, x + eps = +0 gives +Inf.
 *   convert         any of f32, bf16, int8, int32 to any of them, element by element:
 *                     to f32:   from bf16 and int8 exact; from int32 rounded to nearest even
 *                     to bf16:  from f32 nearest even (bf16.h); from int8 exact; from int32
 *                               rounded once to nearest even (no double rounding via f32)
 *                     to int8 / int32 from f32 or bf16: truncated toward zero (C's and XLA's
 *                               convert), saturated to the type's range, NaN -> 0
 *                     int32 -> int8 saturates; int8 -> int32 exact; same dtype copies.
 *                   Every pair is defined here; tpu_program_verify decides which of them a
 *                   program may use.
 *   quantize        f32 -> int8 with a scale: y = clamp(round(alpha * x), -127, 127), the
 *                   product rounded in fp32, then rounded to the nearest integer with ties
 *                   to even; NaN -> 0. Symmetric: -128 is never produced.
 *   reduce_sum      axis 0: y[0][j] = x[0][j] + x[1][j] + ... + x[rows-1][j]
 *                   axis 1: y[i][0] = x[i][0] + x[i][1] + ... + x[i][cols-1]
 *                   sequential in index order, fp32, starting from the first element (so a
 *                   sum of -0s is -0); an empty sum is +0.
 *   reduce_max      the same order with m = max(x_next, m) as defined for `max` above: NaN
 *                   propagates, of equal values the earlier one is kept; empty gives -Inf.
 * Loops run over contiguous memory with no per-element calls (except expf), so the
 * compiler vectorises them; vectorising never changes a value since every element's
 * operations stay the same, in the same order. */
#include <math.h>
#include <string.h>

#include "tpusim/bf16.h"
#include "ops_int.h"
#include "util.h"

/* ---- elementwise ---------------------------------------------------------------------- */

static inline float max_f32(float a, float b)
{
    return ((a > b) | (a != a)) ? a : b;
}

/* y[i] = a[i] (op) b[i] for i < n */
static void binary_vec(enum tpu_opcode code, float *y, const float *a, const float *b, size_t n)
{
    switch (code) {
    case TPU_OP_ADD:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] + b[i];
        break;
    case TPU_OP_SUB:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] - b[i];
        break;
    case TPU_OP_MUL:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] * b[i];
        break;
    default: /* TPU_OP_MAX */
        for (size_t i = 0; i < n; i++)
            y[i] = max_f32(a[i], b[i]);
        break;
    }
}

/* y[i] = a[i] (op) s for i < n */
static void binary_scalar(enum tpu_opcode code, float *y, const float *a, float s, size_t n)
{
    switch (code) {
    case TPU_OP_ADD:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] + s;
        break;
    case TPU_OP_SUB:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] - s;
        break;
    case TPU_OP_MUL:
        for (size_t i = 0; i < n; i++)
            y[i] = a[i] * s;
        break;
    default: /* TPU_OP_MAX */
        for (size_t i = 0; i < n; i++)
            y[i] = max_f32(a[i], s);
        break;
    }
}

int tpu__ops_binary(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                    struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *a = &bufs[op->in[0]], *b = &bufs[op->in[1]];
    int rc = tpu__ops_check_buf(d, op, "a", a, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, a->rows, a->cols);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "b", b, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (rc)
        return rc;
    const size_t rows = a->rows, cols = a->cols;
    float *yv = y->data;                   /* [rows][cols] */
    const float *av = a->data, *bv = b->data; /* [rows][cols]; b see below */
    if (b->rows == a->rows && b->cols == a->cols) {
        binary_vec(op->code, yv, av, bv, rows * cols);
    } else if (b->rows == 1 && b->cols == a->cols) { /* b [1][cols] */
        for (size_t i = 0; i < rows; i++)
            binary_vec(op->code, yv + i * cols, av + i * cols, bv, cols);
    } else if (b->rows == 1 && b->cols == 1) { /* b [1][1] */
        binary_scalar(op->code, yv, av, bv[0], rows * cols);
    } else {
        return tpu__fail(d, TPU_ESHAPE,
                         "%s: operand b is [%u][%u] but must be [%zu][%zu] like a, [1][%zu] "
                         "(broadcast over rows) or [1][1]",
                         tpu_opcode_name(op->code), (unsigned)b->rows, (unsigned)b->cols,
                         rows, cols, cols);
    }
    return 0;
}

int tpu__ops_unary(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                   struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *x = &bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "x", x, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, x->rows, x->cols);
    if (rc)
        return rc;
    const size_t n = tpu__ops_count(x);
    float *yv = y->data;       /* [rows][cols] */
    const float *xv = x->data; /* [rows][cols] */
    switch (op->code) {
    case TPU_OP_SCALE: {
        const float alpha = op->attrs.alpha, beta = op->attrs.beta;
        for (size_t i = 0; i < n; i++)
            yv[i] = alpha * xv[i] + beta;
        break;
    }
    case TPU_OP_RELU:
        for (size_t i = 0; i < n; i++) {
            const float v = xv[i];
            yv[i] = ((v > 0.0f) | (v != v)) ? v : 0.0f;
        }
        break;
    case TPU_OP_RSQRT: {
        const float eps = op->attrs.eps;
        for (size_t i = 0; i < n; i++)
            yv[i] = 1.0f / sqrtf(xv[i] + eps);
        break;
    }
    default: /* TPU_OP_EXP */
        for (size_t i = 0; i < n; i++)
            yv[i] = expf(xv[i]);
        break;
    }
    return 0;
}

int tpu__ops_relu_grad(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                       struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *dy = &bufs[op->in[0]], *x = &bufs[op->in[1]];
    int rc = tpu__ops_check_buf(d, op, "dy", dy, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "x", x, TPU_F32, dy->rows, dy->cols);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, dy->rows, dy->cols);
    if (rc)
        return rc;
    const size_t n = tpu__ops_count(x);
    float *yv = y->data;                         /* [rows][cols] */
    const float *dyv = dy->data, *xv = x->data; /* [rows][cols] */
    for (size_t i = 0; i < n; i++) {
        const float g = dyv[i]; /* loaded unconditionally, so the loop has no branch */
        yv[i] = xv[i] > 0.0f ? g : 0.0f;
    }
    return 0;
}

/* ---- convert -------------------------------------------------------------------------- */

static int32_t i32_from_f32(float f)
{
    if (f != f)
        return 0;
    if (f >= 2147483648.0f)
        return INT32_MAX;
    if (f < -2147483648.0f)
        return INT32_MIN;
    return (int32_t)f; /* truncates toward zero; in range here */
}

static int8_t i8_from_f32(float f)
{
    if (f != f)
        return 0;
    if (f >= 128.0f)
        return INT8_MAX;
    if (f <= -129.0f)
        return INT8_MIN;
    return (int8_t)(int32_t)f; /* (-129, 128) truncates into [-128, 127] */
}

static int8_t i8_from_i32(int32_t v)
{
    return v > INT8_MAX ? INT8_MAX : v < INT8_MIN ? INT8_MIN : (int8_t)v;
}

/* int32 -> bf16 with one rounding to nearest even on the magnitude's 8 leading bits. (Going
 * through f32 would round twice: to 24 bits, then to 8, which can break a tie the wrong
 * way.) The rounded magnitude q * 2^shift has at most 9 significant bits, so it is exact in
 * f32 and in bf16. */
static tpu_bf16 bf16_from_i32(int32_t v)
{
    uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v; /* |v|, 2^31 for INT32_MIN */
    unsigned shift = 0;
    while ((u >> shift) > 255u)
        shift++;
    uint32_t q = u >> shift;
    if (shift > 0) {
        uint32_t rem = u & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
    }
    float f = (float)((uint64_t)q << shift);
    return tpu_bf16_from_f32(v < 0 ? -f : f);
}

/* ---- quantize ------------------------------------------------------------------------- */

/* One f32 to int8 with a scale: alpha * v rounded once (fp32 product), then to the nearest
 * integer with ties to even (the bit trick below, exact for |p| < 2^22; larger values
 * saturate anyway), then saturated to [-127, 127]. NaN gives 0. */
static int8_t quantize_one(float alpha, float v)
{
    const float p = alpha * v;
    if (p != p)
        return 0;
    if (p >= 127.0f)
        return 127;
    if (p <= -127.0f)
        return -127;
    /* |p| < 127: adding and subtracting 1.5 * 2^23 rounds to an integer, ties to even (IEEE
     * arithmetic as written: the project does not compile with -ffast-math) */
    const float big = 12582912.0f;
    const float r = (p + big) - big;
    return (int8_t)(int32_t)r;
}

int tpu__ops_quantize(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                      struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *x = &bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "x", x, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_INT8, x->rows, x->cols);
    if (rc)
        return rc;
    const size_t n = tpu__ops_count(x);
    const float alpha = op->attrs.alpha;
    int8_t *yv = y->data;      /* [rows][cols] */
    const float *xv = x->data; /* [rows][cols] */
    for (size_t i = 0; i < n; i++)
        yv[i] = quantize_one(alpha, xv[i]);
    return 0;
}

int tpu__ops_convert(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                     struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *x = &bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "x", x, -1, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, -1, x->rows, x->cols);
    if (rc)
        return rc;
    if (tpu_dtype_bytes(x->dtype) == 0 || tpu_dtype_bytes(y->dtype) == 0)
        return tpu__fail(d, TPU_EINVAL, "convert: unknown dtype %d -> %d", (int)x->dtype,
                         (int)y->dtype);
    const size_t n = tpu__ops_count(x);
    if (x->dtype == y->dtype) {
        if (y->data != x->data && n != 0)
            memmove(y->data, x->data, n * tpu_dtype_bytes(x->dtype));
        return 0;
    }
    /* [rows][cols] each; the pointers of the wrong dtype are never read */
    const float *xf = x->data;
    const tpu_bf16 *xb = x->data;
    const int8_t *x8 = x->data;
    const int32_t *x32 = x->data;
    switch (y->dtype) {
    case TPU_F32: {
        float *o = y->data;
        if (x->dtype == TPU_BF16)
            for (size_t i = 0; i < n; i++)
                o[i] = tpu_bf16_to_f32(xb[i]);
        else if (x->dtype == TPU_INT8)
            for (size_t i = 0; i < n; i++)
                o[i] = (float)x8[i];
        else
            for (size_t i = 0; i < n; i++)
                o[i] = (float)x32[i];
        break;
    }
    case TPU_BF16: {
        tpu_bf16 *o = y->data;
        if (x->dtype == TPU_F32)
            for (size_t i = 0; i < n; i++)
                o[i] = tpu_bf16_from_f32(xf[i]);
        else if (x->dtype == TPU_INT8)
            for (size_t i = 0; i < n; i++)
                o[i] = tpu_bf16_from_f32((float)x8[i]);
        else
            for (size_t i = 0; i < n; i++)
                o[i] = bf16_from_i32(x32[i]);
        break;
    }
    case TPU_INT8: {
        int8_t *o = y->data;
        if (x->dtype == TPU_F32)
            for (size_t i = 0; i < n; i++)
                o[i] = i8_from_f32(xf[i]);
        else if (x->dtype == TPU_BF16)
            for (size_t i = 0; i < n; i++)
                o[i] = i8_from_f32(tpu_bf16_to_f32(xb[i]));
        else
            for (size_t i = 0; i < n; i++)
                o[i] = i8_from_i32(x32[i]);
        break;
    }
    case TPU_INT32: {
        int32_t *o = y->data;
        if (x->dtype == TPU_F32)
            for (size_t i = 0; i < n; i++)
                o[i] = i32_from_f32(xf[i]);
        else if (x->dtype == TPU_BF16)
            for (size_t i = 0; i < n; i++)
                o[i] = i32_from_f32(tpu_bf16_to_f32(xb[i]));
        else
            for (size_t i = 0; i < n; i++)
                o[i] = x8[i];
        break;
    }
    }
    return 0;
}

/* ---- reductions ----------------------------------------------------------------------- */

int tpu__ops_reduce(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                    struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *x = &bufs[op->in[0]];
    const int32_t axis = op->attrs.axis;
    const bool is_max = op->code == TPU_OP_REDUCE_MAX;
    if (axis != 0 && axis != 1)
        return tpu__fail(d, TPU_EINVAL, "%s: axis is %d but must be 0 (over rows) or 1 (over "
                                        "columns)",
                         tpu_opcode_name(op->code), (int)axis);
    int rc = tpu__ops_check_buf(d, op, "x", x, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, axis == 0 ? 1 : x->rows,
                                axis == 0 ? x->cols : 1);
    if (rc)
        return rc;
    const size_t rows = x->rows, cols = x->cols;
    const float *xv = x->data; /* [rows][cols] */
    float *yv = y->data;       /* [1][cols] (axis 0) or [rows][1] (axis 1) */
    const float empty = is_max ? -INFINITY : 0.0f;

    if (axis == 0) {
        /* whole rows at a time: contiguous, vectorised over the columns */
        if (rows == 0) {
            for (size_t j = 0; j < cols; j++)
                yv[j] = empty;
            return 0;
        }
        for (size_t j = 0; j < cols; j++)
            yv[j] = xv[j]; /* y may be x itself when rows == 1 */
        for (size_t i = 1; i < rows; i++) {
            const float *row = xv + i * cols;
            if (is_max)
                for (size_t j = 0; j < cols; j++)
                    yv[j] = max_f32(row[j], yv[j]);
            else
                for (size_t j = 0; j < cols; j++)
                    yv[j] = yv[j] + row[j];
        }
        return 0;
    }
    for (size_t i = 0; i < rows; i++) {
        const float *row = xv + i * cols;
        float s = cols ? row[0] : empty;
        if (is_max)
            for (size_t j = 1; j < cols; j++)
                s = max_f32(row[j], s);
        else
            for (size_t j = 1; j < cols; j++)
                s = s + row[j];
        yv[i] = s;
    }
    return 0;
}
