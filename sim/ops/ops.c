/* The values of the device program's local ops on one core: the dispatcher (the op table's
 * `sem` column: tpu__ops_<sem> for each op), the operand
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
 *   array of tile_rows rows. The float GEMMs read the operands where they are
 *   (tpu__gemm_ex: the packer rounds or splits f32 to bf16 and reads transposed layouts
 *   directly), so no converted or transposed copy is made; an int8 matmul copies transposed
 *   operands. Working memory comes from the caller's scratch arena. y must be a buffer of
 *   its own (not a or b). Results do not depend on n_threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mxu.h"
#include "kernels/gemm_int.h"
#include "ops_int.h"
#include "util.h"

/* ---- shared helpers --------------------------------------------------------------------- */

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
    const char *name = tpu_opcode_name(op->code);
    if (dtype >= 0 && b->dtype != (enum tpu_dtype)dtype)
        return tpu__fail(d, TPU_ESHAPE, "%s: operand %s is %s but must be %s", name, role,
                         tpu_dtype_name(b->dtype),
                         tpu_dtype_name((enum tpu_dtype)dtype));
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
 * source block and the destination block in L1. */
#define PACK_BLOCK 32u

/* Copies the int8 matrix s ([rows][cols]) into dst as its transpose [cols][rows]. */
static void transpose_int8(const struct tpu__bufmem *s, int8_t *dst)
{
    const size_t rows = s->rows, cols = s->cols;
    const int8_t *x = s->data;
    for (size_t i0 = 0; i0 < rows; i0 += PACK_BLOCK) {
        size_t i1 = rows - i0 < PACK_BLOCK ? rows : i0 + PACK_BLOCK;
        for (size_t j0 = 0; j0 < cols; j0 += PACK_BLOCK) {
            size_t j1 = cols - j0 < PACK_BLOCK ? cols : j0 + PACK_BLOCK;
            for (size_t i = i0; i < i1; i++)
                for (size_t j = j0; j < j1; j++)
                    dst[j * rows + i] = x[i * cols + j];
        }
    }
}

/* int8 matmul: the int8 GEMM reads row-major operands, so transposed ones are copied first,
 * into the arena's ops slot (or, without an arena, into memory freed here). */
static int matmul_int8(const struct tpu__bufmem *a, bool ta, const struct tpu__bufmem *b,
                       bool tb, int32_t *y, size_t m, size_t k, size_t n, uint32_t tile_rows,
                       bool acc, unsigned n_threads, struct tpu__scratch *scratch)
{
    const size_t bytes_a = ta ? m * k : 0, bytes_b = tb ? k * n : 0;
    const size_t off_b = (bytes_a + 63) / 64 * 64;
    int8_t *mem = NULL, *owned = NULL;
    if (ta || tb) {
        mem = scratch ? tpu__scratch_get(scratch, TPU__SCRATCH_OPS, off_b + bytes_b + 1)
                      : (owned = malloc(off_b + bytes_b + 1));
        if (!mem)
            return TPU_ENOMEM;
    }
    const int8_t *pa = a->data, *pb = b->data;
    if (ta) {
        transpose_int8(a, mem);
        pa = mem;
    }
    if (tb) {
        transpose_int8(b, mem + off_b);
        pb = mem + off_b;
    }
    int rc = tpu__gemm_int8_ex(pa, pb, y, m, k, n, tile_rows, acc, n_threads, scratch);
    free(owned);
    return rc;
}

static bool is_float_dtype(enum tpu_dtype t)
{
    return t == TPU_F32 || t == TPU_BF16;
}

int tpu__ops_gemm_float(const void *a, bool a_f32, bool ta, const void *b, bool b_f32, bool tb,
                        float *y, size_t m, size_t k, size_t n, unsigned passes, bool acc,
                        const struct tpu__op_ctx *cx)
{
    /* (A part, B part) per pass, smallest terms first (mxu.h); parts 0 = hi, 1 = mid,
     * 2 = lo, and a bf16 operand's mid and lo are zero (tpu__gemm_ex). The 3 pass form
     * splits x = hi + mid (XLA's bf16_3x). Two bf16 operands take one pass. */
    static const unsigned char order1[1][2] = {{0, 0}};
    static const unsigned char order3[3][2] = {{1, 0}, {0, 1}, {0, 0}};
    static const unsigned char order6[6][2] = {{2, 0}, {1, 1}, {0, 2},
                                               {1, 0}, {0, 1}, {0, 0}};
    if (!a_f32 && !b_f32)
        passes = 1;
    const unsigned char(*order)[2] = passes == 1 ? order1 : passes == 3 ? order3 : order6;
    int rc = 0;
    for (unsigned p = 0; p < passes && rc == 0; p++) {
        const struct tpu__gemm_operand oa = {a, a_f32, ta, order[p][0]};
        const struct tpu__gemm_operand ob = {b, b_f32, tb, order[p][1]};
        rc = tpu__gemm_ex(&oa, &ob, y, m, k, n, cx->tile_rows, acc || p > 0, cx->n_threads,
                          cx->scratch, NULL, NULL);
    }
    return rc;
}

int tpu__ops_matmul(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    const uint32_t tile_rows = cx->tile_rows;
    const unsigned n_threads = cx->n_threads;
    struct tpu__scratch *scratch = cx->scratch;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *a = &bufs[op->in[0]], *b = &bufs[op->in[1]];
    const bool ta = op->attrs.trans_a, tb = op->attrs.trans_b, acc = op->attrs.accumulate;
    const size_t m = ta ? a->cols : a->rows, k = ta ? a->rows : a->cols;
    const size_t kb = tb ? b->cols : b->rows, n = tb ? b->rows : b->cols;
    const bool int8 = a->dtype == TPU_INT8 && b->dtype == TPU_INT8;

    if (!int8 && !(is_float_dtype(a->dtype) && is_float_dtype(b->dtype)))
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: operands a (%s) and b (%s) do not go together; use int8 "
                         "with int8 (int32 result) or f32/bf16 with f32/bf16 (f32 result)",
                         tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype));
    if (k != kb)
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: op(a) is [%zu][%zu] and op(b) is [%zu][%zu]; the inner "
                         "dimensions must agree",
                         m, k, kb, n);
    int rc = tpu__ops_check_buf(d, op, "y", y, int8 ? TPU_INT32 : TPU_F32,
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
    if (!int8 && (a->dtype == TPU_F32 || b->dtype == TPU_F32)) {
        passes = op->attrs.passes;
        if (passes != 1 && passes != 3 && passes != 6)
            return tpu__fail(d, TPU_EINVAL,
                             "matmul: passes is %u; an f32 matmul runs in 1 (bf16 inputs), "
                             "3 or 6 bf16 passes",
                             passes);
    }

    if (int8) {
        rc = matmul_int8(a, ta, b, tb, y->data, m, k, n, tile_rows, acc, n_threads, scratch);
    } else {
        rc = tpu__ops_gemm_float(a->data, a->dtype == TPU_F32, ta, b->data,
                                 b->dtype == TPU_F32, tb, y->data, m, k, n, passes, acc, cx);
    }
    if (rc == TPU_ENOMEM)
        return tpu__fail(d, rc,
                         "matmul: out of memory for the working buffers of a [%zu][%zu] x "
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

/* ---- var_add, the chip's ops and the dispatcher --------------------------------------- */

int tpu__ops_var_add(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    int64_t *v = &cx->vars[op->attrs.var], imm = op->attrs.imm;
    if ((imm > 0 && *v > INT64_MAX - imm) || (imm < 0 && *v < INT64_MIN - imm))
        return tpu__fail(d, TPU_ERANGE,
                         "var_add: variable %u holds %lld and adding %lld would overflow "
                         "int64; reset the variable or add less",
                         (unsigned)op->attrs.var, (long long)*v, (long long)imm);
    *v += imm;
    return 0;
}

int tpu__ops_chip(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    (void)cx;
    return tpu__fail(d, TPU_EINVAL,
                     "%s is not a local op: the chip runs infeed, outfeed, collectives "
                     "and loops itself, not one core's op computation",
                     tpu_opcode_name(op->code));
}

/* The op table's `sem` column: the function that computes each op. */
static tpu__op_fn *const op_fns[TPU_OP_COUNT] = {
#define TPU__OP_SEM(e, name, syntax, n_out, n_in, roles, alias, rmw, rule, attrs, required,   \
                    unit, vpu_ops, sem)                                                        \
    [TPU_OP_##e] = tpu__ops_##sem,
    TPU_OP_TABLE(TPU__OP_SEM)
#undef TPU__OP_SEM
};

int tpu__op_compute(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                    uint32_t tile_rows, unsigned n_threads, struct tpu__scratch *scratch,
                    struct tpu_diag *d)
{
    return tpu__op_compute_on(op, bufs, vars, 0, tile_rows, n_threads, scratch, d);
}

int tpu__op_compute_on(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                       uint32_t replica, uint32_t tile_rows, unsigned n_threads,
                       struct tpu__scratch *scratch, struct tpu_diag *d)
{
    return tpu__op_compute_core(op, bufs, vars, replica, 0, tile_rows, n_threads, scratch, d);
}

int tpu__op_compute_core(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                         uint32_t replica, uint32_t part, uint32_t tile_rows,
                         unsigned n_threads, struct tpu__scratch *scratch, struct tpu_diag *d)
{
    if (!op)
        return tpu__fail(d, TPU_EINVAL, "no op to compute");
    if ((unsigned)op->code >= TPU_OP_COUNT)
        return tpu__fail(d, TPU_EINVAL, "unknown opcode %d; valid opcodes are 0 to %d",
                         (int)op->code, (int)TPU_OP_COUNT - 1);
    const struct tpu__op_ctx cx = {.bufs = bufs, .vars = vars, .replica = replica, .part = part,
                                   .tile_rows = tile_rows,
                                   .n_threads = n_threads, .scratch = scratch};
    return op_fns[op->code](op, &cx, d);
}
