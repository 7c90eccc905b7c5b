/* The values of the device program's local ops on one core: the dispatcher, the operand
 * checks shared by the op files, `var_add`, and `matmul` on the matrix unit's numerics.
 * Vector ops are in ops_vector.c, loss, accuracy and optimizers in ops_train.c. This file
 * computes values only; when an op runs and how many cycles it takes is the chip's business.
 *
 * matmul  y = op(a) * op(b)  (or y += ... with `accumulate`), op(x) = x^T when trans_a /
 * trans_b. Operands and results:
 *   - int8 x int8 -> int32: tpu_gemm_int8 (two's-complement, wraps); `passes` is ignored.
 *   - a and b each f32 or bf16 -> f32. bf16 operands enter the array as they are. When
 *     either operand is f32, `passes` (1, 3 or 6) says how f32 values enter it:
 *       1  each f32 value is rounded to bf16 (nearest even) and the product is one bf16 GEMM
 *          with fp32 accumulation (mixed precision, XLA's DEFAULT): tpu_gemm_bf16;
 *       3, 6  f32 in several bf16 passes as mxu.h defines (XLA's HIGH and HIGHEST): without
 *          `accumulate` exactly tpu_gemm_f32; with `accumulate` the same split and the same
 *          passes in the same order, the first pass adding to y's prior values instead of
 *          overwriting them (the accumulators hold y, as on the array). A bf16 operand splits
 *          as hi = x, mid = lo = 0.
 *     With two bf16 operands `passes` is ignored (one pass is exact for bf16).
 *   Accumulation order, NaN canonicalisation and the rest of the numerics are mxu.h's for an
 *   array of tile_rows rows. Transposed operands are copied (and rounded, where needed) into
 *   row-major scratch first. y must be a buffer of its own (not a or b). Results do not
 *   depend on n_threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mxu.h"
#include "ops_int.h"
#include "util.h"

/* ---- shared helpers --------------------------------------------------------------------- */

static const char *const op_names[] = {
#define TPU__OP_NAME(e, name, nout, nin, unit) name,
    TPU_OP_TABLE(TPU__OP_NAME)
#undef TPU__OP_NAME
};

const char *tpu__ops_op_name(enum tpu_opcode code)
{
    if ((unsigned)code >= sizeof op_names / sizeof op_names[0])
        return "unknown";
    return op_names[code];
}

size_t tpu__ops_dtype_bytes(enum tpu_buf_dtype t)
{
    switch (t) {
    case TPU_BUF_F32:
    case TPU_BUF_INT32:
        return 4;
    case TPU_BUF_BF16:
        return 2;
    case TPU_BUF_INT8:
        return 1;
    }
    return 0;
}

const char *tpu__ops_dtype_name(enum tpu_buf_dtype t)
{
    switch (t) {
    case TPU_BUF_F32:
        return "f32";
    case TPU_BUF_BF16:
        return "bf16";
    case TPU_BUF_INT8:
        return "int8";
    case TPU_BUF_INT32:
        return "int32";
    }
    return "unknown";
}

size_t tpu__ops_count(const struct tpu__bufmem *b)
{
    return (size_t)b->rows * (size_t)b->cols;
}

static void dim_text(char *s, size_t n, uint32_t v)
{
    if (v == TPU__OPS_ANY)
        snprintf(s, n, "*");
    else
        snprintf(s, n, "%u", (unsigned)v);
}

int tpu__ops_check_buf(struct tpu_diag *d, const struct tpu_op *op, const char *role,
                       const struct tpu__bufmem *b, int dtype, uint32_t rows, uint32_t cols)
{
    const char *name = tpu__ops_op_name(op->code);
    if (dtype >= 0 && b->dtype != (enum tpu_buf_dtype)dtype)
        return tpu__fail(d, TPU_ESHAPE, "%s: operand %s is %s but must be %s", name, role,
                         tpu__ops_dtype_name(b->dtype),
                         tpu__ops_dtype_name((enum tpu_buf_dtype)dtype));
    if ((rows != TPU__OPS_ANY && b->rows != rows) || (cols != TPU__OPS_ANY && b->cols != cols)) {
        char r[16], c[16];
        dim_text(r, sizeof r, rows);
        dim_text(c, sizeof c, cols);
        return tpu__fail(d, TPU_ESHAPE, "%s: operand %s is [%u][%u] but must be [%s][%s]",
                         name, role, (unsigned)b->rows, (unsigned)b->cols, r, c);
    }
    if (b->data == NULL && tpu__ops_count(b) != 0)
        return tpu__fail(d, TPU_EINVAL, "%s: operand %s ([%u][%u]) has no memory", name,
                         role, (unsigned)b->rows, (unsigned)b->cols);
    return 0;
}

/* ---- matmul --------------------------------------------------------------------------- */

/* Rows and columns per block of the blocked transposing copy: 32 x 32 elements keep the
 * source block and the destination block in L1 for every element size. */
#define PACK_BLOCK 32u

/* Copies s into dst as `want` ([rows][cols], or [cols][rows] when trans), converting f32 ->
 * bf16 (nearest even) or bf16 -> f32 (exact) where the dtypes differ. Supported pairs: the
 * ones matmul needs (f32 or bf16 to f32 or bf16, int8 to int8). */
static void pack_into(const struct tpu__bufmem *s, bool trans, enum tpu_buf_dtype want,
                      void *dst)
{
    const size_t rows = s->rows, cols = s->cols;
    const size_t di = trans ? 1 : cols, dj = trans ? rows : 1; /* dst index = i*di + j*dj */
    for (size_t i0 = 0; i0 < rows; i0 += PACK_BLOCK) {
        size_t i1 = rows - i0 < PACK_BLOCK ? rows : i0 + PACK_BLOCK;
        for (size_t j0 = 0; j0 < cols; j0 += PACK_BLOCK) {
            size_t j1 = cols - j0 < PACK_BLOCK ? cols : j0 + PACK_BLOCK;
            if (s->dtype == TPU_BUF_F32 && want == TPU_BUF_BF16) {
                const float *x = s->data; /* [rows][cols] */
                tpu_bf16 *o = dst;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++)
                        o[i * di + j * dj] = tpu_bf16_from_f32(x[i * cols + j]);
            } else if (s->dtype == TPU_BUF_BF16 && want == TPU_BUF_F32) {
                const tpu_bf16 *x = s->data;
                float *o = dst;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++)
                        o[i * di + j * dj] = tpu_bf16_to_f32(x[i * cols + j]);
            } else if (s->dtype == TPU_BUF_F32) { /* f32 -> f32 */
                const float *x = s->data;
                float *o = dst;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++)
                        o[i * di + j * dj] = x[i * cols + j];
            } else if (s->dtype == TPU_BUF_BF16) { /* bf16 -> bf16 */
                const tpu_bf16 *x = s->data;
                tpu_bf16 *o = dst;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++)
                        o[i * di + j * dj] = x[i * cols + j];
            } else { /* int8 -> int8 */
                const int8_t *x = s->data;
                int8_t *o = dst;
                for (size_t i = i0; i < i1; i++)
                    for (size_t j = j0; j < j1; j++)
                        o[i * di + j * dj] = x[i * cols + j];
            }
        }
    }
}

/* The operand as a row-major `want` matrix op(s). Points into s when no copy is needed
 * (*scratch stays NULL); otherwise into a malloc'd copy that the caller frees through
 * *scratch. NULL only when out of memory. */
static const void *operand(const struct tpu__bufmem *s, bool trans, enum tpu_buf_dtype want,
                           void **scratch)
{
    *scratch = NULL;
    if (!trans && s->dtype == want)
        return s->data;
    size_t count = tpu__ops_count(s), bytes;
    if (!tpu__mul_size(count ? count : 1, tpu__ops_dtype_bytes(want), &bytes))
        return NULL;
    *scratch = malloc(bytes);
    if (*scratch)
        pack_into(s, trans, want, *scratch);
    return *scratch;
}

/* y[m][n] += a[m][k] * b[k][n] in `passes` (3 or 6) bf16 passes: tpu_gemm_f32's split and
 * pass order (mxu.h), every pass accumulating into y. */
static int gemm_f32_accumulate(const float *a, const float *b, float *y, size_t m, size_t k,
                               size_t n, uint32_t tile_rows, unsigned passes, unsigned n_threads)
{
    /* parts: 0 = hi, 1 = mid, 2 = lo. (A part, B part) per pass, smallest terms first; the 3
     * pass form splits x = hi + mid (XLA's bf16_3x, mxu.h's "lo" of the two-part split). */
    static const unsigned char order3[3][2] = {{1, 0}, {0, 1}, {0, 0}};
    static const unsigned char order6[6][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
    const unsigned char(*order)[2] = passes == 3 ? order3 : order6;
    size_t n_parts = passes == 3 ? 2 : 3, mk = m * k, kn = k * n, per_part, bytes;
    if (!tpu__mul_size(mk + kn + 1, sizeof(tpu_bf16), &per_part) ||
        !tpu__mul_size(per_part, n_parts, &bytes))
        return TPU_ENOMEM;
    tpu_bf16 *mem = malloc(bytes);
    if (!mem)
        return TPU_ENOMEM;
    tpu_bf16 *ap[3], *bp[3];
    for (size_t p = 0; p < n_parts; p++) {
        ap[p] = mem + p * (mk + kn + 1);
        bp[p] = ap[p] + mk;
    }
    for (size_t i = 0; i < mk; i++)
        tpu_f32_split_bf16(a[i], &ap[0][i], &ap[1][i], n_parts > 2 ? &ap[2][i] : NULL);
    for (size_t i = 0; i < kn; i++)
        tpu_f32_split_bf16(b[i], &bp[0][i], &bp[1][i], n_parts > 2 ? &bp[2][i] : NULL);
    int rc = 0;
    for (unsigned p = 0; p < passes && rc == 0; p++)
        rc = tpu_gemm_bf16(ap[order[p][0]], bp[order[p][1]], y, m, k, n, tile_rows, true,
                           n_threads);
    free(mem);
    return rc;
}

static bool is_float_dtype(enum tpu_buf_dtype t)
{
    return t == TPU_BUF_F32 || t == TPU_BUF_BF16;
}

int tpu__ops_matmul(const struct tpu_op *op, struct tpu__bufmem *bufs, uint32_t tile_rows,
                    unsigned n_threads, struct tpu_diag *d)
{
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *a = &bufs[op->in[0]], *b = &bufs[op->in[1]];
    const bool ta = op->attrs.trans_a, tb = op->attrs.trans_b, acc = op->attrs.accumulate;
    const size_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
    const size_t kb = tb ? b->cols : b->rows, n = tb ? b->rows : b->cols;
    const bool int8 = a->dtype == TPU_BUF_INT8 && b->dtype == TPU_BUF_INT8;

    if (!int8 && !(is_float_dtype(a->dtype) && is_float_dtype(b->dtype)))
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: operands a (%s) and b (%s) do not go together; use int8 "
                         "with int8 (int32 result) or f32/bf16 with f32/bf16 (f32 result)",
                         tpu__ops_dtype_name(a->dtype), tpu__ops_dtype_name(b->dtype));
    if (k != kb)
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: op(a) is [%zu][%zu] and op(b) is [%zu][%zu]; the inner "
                         "dimensions must agree",
                         m, k, kb, n);
    int rc = tpu__ops_check_buf(d, op, "y", y, int8 ? TPU_BUF_INT32 : TPU_BUF_F32,
                                (uint32_t)m, (uint32_t)n);
    if (rc)
        return rc;
    if ((a->data == NULL && m * k != 0) || (b->data == NULL && k * n != 0))
        return tpu__fail(d, TPU_EINVAL, "matmul: an input operand has no memory");
    if (tile_rows == 0 || n_threads == 0)
        return tpu__fail(d, TPU_EINVAL,
                         "matmul: the matrix unit needs at least one row and one thread "
                         "(tile_rows %u, n_threads %u)",
                         (unsigned)tile_rows, n_threads);
    unsigned passes = 1;
    if (!int8 && (a->dtype == TPU_BUF_F32 || b->dtype == TPU_BUF_F32)) {
        passes = op->attrs.passes;
        if (passes != 1 && passes != 3 && passes != 6)
            return tpu__fail(d, TPU_EINVAL,
                             "matmul: passes is %u; an f32 matmul runs in 1 (bf16 inputs), "
                             "3 or 6 bf16 passes",
                             passes);
    }

    void *sa = NULL, *sb = NULL;
    const void *pa, *pb;
    enum tpu_buf_dtype want = int8 ? TPU_BUF_INT8 : passes == 1 ? TPU_BUF_BF16 : TPU_BUF_F32;
    pa = operand(a, ta, want, &sa);
    pb = pa ? operand(b, tb, want, &sb) : NULL;
    if (!pa || !pb) {
        rc = TPU_ENOMEM;
    } else if (int8) {
        rc = tpu_gemm_int8(pa, pb, y->data, m, k, n, tile_rows, acc, n_threads);
    } else if (passes == 1) {
        rc = tpu_gemm_bf16(pa, pb, y->data, m, k, n, tile_rows, acc, n_threads);
    } else if (!acc) {
        rc = tpu_gemm_f32(pa, pb, y->data, m, k, n, tile_rows, passes, n_threads);
    } else {
        rc = gemm_f32_accumulate(pa, pb, y->data, m, k, n, tile_rows, passes, n_threads);
    }
    free(sa);
    free(sb);
    if (rc == TPU_ENOMEM)
        return tpu__fail(d, rc,
                         "matmul: out of memory for the working copies of a [%zu][%zu] x "
                         "[%zu][%zu] product",
                         m, k, k, n);
    if (rc == TPU_ETHREAD)
        return tpu__fail(d, rc, "matmul: could not start the GEMM's %u worker threads",
                         n_threads);
    if (rc)
        return tpu__fail(d, rc, "matmul: the GEMM of a [%zu][%zu] x [%zu][%zu] product failed "
                                "(%s)",
                         m, k, k, n, tpu_strerror(rc));
    return 0;
}

/* ---- var_add and the dispatcher ------------------------------------------------------- */

static int var_add(const struct tpu_op *op, int64_t *vars, struct tpu_diag *d)
{
    int64_t *v = &vars[op->attrs.var], imm = op->attrs.imm;
    if ((imm > 0 && *v > INT64_MAX - imm) || (imm < 0 && *v < INT64_MIN - imm))
        return tpu__fail(d, TPU_ERANGE,
                         "var_add: variable %u holds %lld and adding %lld would overflow "
                         "int64; reset the variable or add less",
                         (unsigned)op->attrs.var, (long long)*v, (long long)imm);
    *v += imm;
    return 0;
}

int tpu__op_compute(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                    uint32_t tile_rows, unsigned n_threads, struct tpu_diag *d)
{
    if (!op)
        return tpu__fail(d, TPU_EINVAL, "no op to compute");
    switch (op->code) {
    case TPU_OP_MATMUL:
        return tpu__ops_matmul(op, bufs, tile_rows, n_threads, d);
    case TPU_OP_ADD:
    case TPU_OP_SUB:
    case TPU_OP_MUL:
    case TPU_OP_MAX:
    case TPU_OP_SCALE:
    case TPU_OP_RELU:
    case TPU_OP_RELU_GRAD:
    case TPU_OP_EXP:
    case TPU_OP_CONVERT:
    case TPU_OP_REDUCE_SUM:
    case TPU_OP_REDUCE_MAX:
        return tpu__ops_vector(op, bufs, d);
    case TPU_OP_SOFTMAX_XENT:
    case TPU_OP_CLASSIFY_COUNT:
    case TPU_OP_SGD_MOMENTUM:
    case TPU_OP_ADAM:
        return tpu__ops_train(op, bufs, vars, d);
    case TPU_OP_VAR_ADD:
        return var_add(op, vars, d);
    case TPU_OP_INFEED:
    case TPU_OP_OUTFEED:
    case TPU_OP_ALL_REDUCE:
    case TPU_OP_COLLECTIVE_PERMUTE:
    case TPU_OP_LOOP_BEGIN:
    case TPU_OP_LOOP_END:
        return tpu__fail(d, TPU_EINVAL,
                         "%s is not a local op: the chip runs infeed, outfeed, collectives "
                         "and loops itself, not one core's op computation",
                         tpu__ops_op_name(op->code));
    case TPU_OP_COUNT:
        break;
    }
    return tpu__fail(d, TPU_EINVAL, "unknown opcode %d; valid opcodes are 0 to %d",
                     (int)op->code, (int)TPU_OP_COUNT - 1);
}
