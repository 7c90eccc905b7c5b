/* The convolution ops on the matrix unit, as one core computes them: conv2d, conv2d_grad_input
 * and conv2d_grad_filter (program.h). It is not their timing (sim/chip/timing.c: the
 * equivalent GEMM's) nor their verifier rule (sim/program/program_verify_conv.c).
 *
 * Each is defined as a window op and a matmul, and computed as exactly that: the patches are
 * formed in the core's scratch arena (TPU__SCRATCH_OPS; as XLA's convolution emitter forms
 * them on chip instead of in HBM) and the GEMM is matmul's (tpu__ops_gemm_float, with the
 * same passes), so the results are bit for bit those of the two-op form:
 *   conv2d              y = matmul(im2col(x), w)                       (x f32 or bf16: the
 *                                                                       patches keep x's type)
 *   conv2d_grad_input   dx = col2im(matmul(dy, w, trans_b))            (the product in f32)
 *   conv2d_grad_filter  dw = matmul(im2col(x), dy, trans_a), or dw += ... with accumulate
 * Shapes: x the NHWC image (N*h*w*c elements, any 2-D shape), w [kh*kw*c][f], y and dy
 * [N*ho*wo][f], dx N*h*w*c elements (any 2-D shape), dw [kh*kw*c][f]. Inputs f32 or bf16,
 * outputs f32; passes 1, 3 or 6 as matmul's (ignored when no input is f32).
 *
 * Row partitioning (the window's parts >= 2, program.h): the image is the ext image and
 * y, dy have the local out's N*hoc*wo rows; the patches are those of ops_window.c's
 * partitioned im2col (0 on padding output rows). conv2d writes 0 to its padding output rows
 * (oy >= ho) after the GEMM, whatever w holds; conv2d_grad_filter multiplies a copy of dy
 * whose padding rows are 0 (so dy's padding rows are not read: the patch rows there are 0
 * too, and 0 * 0 adds nothing); conv2d_grad_input's col2im skips the padding rows of its
 * product. The other rows are the unpartitioned op's (a GEMM row depends on its own row of
 * the left operand only), and dw is the core's partial sum. */
#include <stdlib.h>
#include <string.h>

#include "ops_int.h"
#include "util.h"

static bool is_float_dtype(enum tpu_dtype t)
{
    return t == TPU_F32 || t == TPU_BF16;
}

static int check_float(struct tpu_diag *d, const struct tpu_op *op, const char *role,
                       const struct tpu__bufmem *b)
{
    if (is_float_dtype(b->dtype))
        return 0;
    return tpu__fail(d, TPU_ESHAPE, "%s: operand %s is %s but must be f32 or bf16",
                     tpu_opcode_name(op->code), role, tpu_dtype_name(b->dtype));
}

int tpu__ops_conv_check(const struct tpu_op *op, uint32_t part, const struct tpu__bufmem *bufs,
                        struct tpu__conv_gemm *cg, struct tpu_diag *d)
{
    const struct tpu__bufmem *out = &bufs[op->out[0]];
    const struct tpu__bufmem *in0 = &bufs[op->in[0]], *in1 = &bufs[op->in[1]];
    const bool grad_input = op->code == TPU_OP_CONV2D_GRAD_INPUT;
    /* the image: x (in0) for conv2d and conv2d_grad_filter, dx (out) for conv2d_grad_input */
    const struct tpu__bufmem *img = grad_input ? out : in0;
    const char *img_role = grad_input ? "dx" : "x";
    struct tpu__win_geom *g = &cg->g;
    int rc = tpu__win_geom_get(op, part, img_role, tpu__ops_count(img), g, d);
    if (rc)
        return rc;
    /* patch rows and columns; f: the filters, from w (conv2d, grad_input) or dy (grad_filter) */
    const size_t m = tpu__win_out_rows(g), kc = g->kh * g->kw * g->c, f = in1->cols;
    cg->m = m, cg->kc = kc, cg->f = f;
    const char *r0 = tpu_opcode_operand_name(op->code, false, 0);
    const char *r1 = tpu_opcode_operand_name(op->code, false, 1);
    const char *ro = tpu_opcode_operand_name(op->code, true, 0);
    rc = check_float(d, op, r0, in0);
    if (!rc)
        rc = check_float(d, op, r1, in1);
    switch (op->code) {
    case TPU_OP_CONV2D: /* in0 x image, in1 w [kc][f], out y [m][f] */
        if (!rc)
            rc = tpu__ops_check_buf(d, op, r1, in1, -1, (uint32_t)kc, TPU__OPS_ANY);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, ro, out, TPU_F32, (uint32_t)m, (uint32_t)f);
        break;
    case TPU_OP_CONV2D_GRAD_INPUT: /* in0 dy [m][f], in1 w [kc][f], out dx image */
        if (!rc)
            rc = tpu__ops_check_buf(d, op, r1, in1, -1, (uint32_t)kc, TPU__OPS_ANY);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, r0, in0, -1, (uint32_t)m, (uint32_t)f);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, ro, out, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
        break;
    default: /* conv2d_grad_filter: in0 x image, in1 dy [m][f], out dw [kc][f] */
        if (!rc)
            rc = tpu__ops_check_buf(d, op, r1, in1, -1, (uint32_t)m, TPU__OPS_ANY);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, ro, out, TPU_F32, (uint32_t)kc, (uint32_t)f);
        break;
    }
    if (!rc)
        rc = tpu__ops_check_buf(d, op, r0, in0, -1, TPU__OPS_ANY, TPU__OPS_ANY);
    if (rc)
        return rc;
    const unsigned passes = op->attrs.passes;
    if ((in0->dtype == TPU_F32 || in1->dtype == TPU_F32) && passes != 1 && passes != 3 &&
        passes != 6)
        return tpu__fail(d, TPU_EINVAL,
                         "%s: passes is %u; an f32 convolution runs in 1 (bf16 inputs), 3 or "
                         "6 bf16 passes",
                         tpu_opcode_name(op->code), passes);
    /* the buffer of the patches (im2col(x) in x's type) or of the product dcols (f32) */
    cg->esize = grad_input ? sizeof(float) : tpu_dtype_bytes(in0->dtype);
    if (!tpu__mul_size(m, kc, &cg->bytes) || !tpu__mul_size(cg->bytes, cg->esize, &cg->bytes))
        return tpu__fail(d, TPU_ENOMEM, "%s: the [%zu][%zu] patch matrix does not fit in "
                         "memory; use a smaller batch or image", tpu_opcode_name(op->code), m,
                         kc);
    return 0;
}

void tpu__conv_zero_pad_rows(const struct tpu__win_geom *g, float *y, size_t f)
{
    for (size_t n = 0, r = 0; n < g->n; n++)
        for (size_t oy = g->oy0; oy < g->oy0 + g->hos; oy++, r += g->wo)
            if (oy >= g->ho)
                memset(y + r * f, 0, g->wo * f * sizeof *y);
}

void tpu__conv_copy_real_rows(const struct tpu__win_geom *g, const void *src, size_t row_bytes,
                              void *dst)
{
    const size_t m = g->n * g->hos * g->wo;
    for (size_t r = 0; r < m; r++) {
        const size_t oy = g->oy0 + (r / g->wo) % g->hos;
        unsigned char *to = (unsigned char *)dst + r * row_bytes;
        if (oy >= g->ho)
            memset(to, 0, row_bytes);
        else
            memcpy(to, (const unsigned char *)src + r * row_bytes, row_bytes);
    }
}

int tpu__ops_conv(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    const char *name = tpu_opcode_name(op->code);
    struct tpu__bufmem *out = &cx->bufs[op->out[0]];
    const struct tpu__bufmem *in0 = &cx->bufs[op->in[0]], *in1 = &cx->bufs[op->in[1]];
    struct tpu__conv_gemm cg;
    int rc = tpu__ops_conv_check(op, cx->part, cx->bufs, &cg, d);
    if (rc)
        return rc;
    const size_t m = cg.m, kc = cg.kc, f = cg.f, bytes = cg.bytes;
    const unsigned passes = op->attrs.passes;
    if (cx->tile_rows == 0 || cx->n_threads == 0)
        return tpu__fail(d, TPU_EINVAL,
                         "%s: the matrix unit needs at least one row and one thread "
                         "(tile_rows %u, n_threads %u)",
                         name, (unsigned)cx->tile_rows, cx->n_threads);

    /* The patches (conv2d, grad_filter: im2col(x) in x's type) or the product dcols
     * (grad_input: f32), [m][kc], in the arena's ops slot; after them, for a partitioned
     * grad_filter with padding output rows, the copy of dy [m][f] with those rows 0. */
    const bool pad_rows = cg.g.parts > 1 && cg.g.oy0 + cg.g.hos > cg.g.ho;
    const bool dy_copy = pad_rows && op->code == TPU_OP_CONV2D_GRAD_FILTER;
    const size_t dy_at = (bytes + 15) / 16 * 16, dy_esize = tpu_dtype_bytes(in1->dtype);
    size_t total = bytes + 1;
    if (dy_copy && (!tpu__mul_size(m * f, dy_esize, &total) || (total += dy_at) < dy_at))
        return tpu__fail(d, TPU_ENOMEM, "%s: the copy of dy [%zu][%zu] does not fit in memory",
                         name, m, f);
    void *owned = NULL;
    void *cols = cx->scratch ? tpu__scratch_get(cx->scratch, TPU__SCRATCH_OPS, total)
                             : (owned = malloc(total));
    if (!cols)
        return tpu__fail(d, TPU_ENOMEM, "%s: out of memory for the [%zu][%zu] patch matrix",
                         name, m, kc);
    const void *b_data = in1->data;
    if (dy_copy) {
        tpu__conv_copy_real_rows(&cg.g, in1->data, f * dy_esize, (unsigned char *)cols + dy_at);
        b_data = (unsigned char *)cols + dy_at;
    }
    const bool x_f32 = in0->dtype == TPU_F32, other_f32 = in1->dtype == TPU_F32;
    switch (op->code) {
    case TPU_OP_CONV2D:
        tpu__win_im2col(&cg.g, in0->data, cg.esize, cols);
        rc = tpu__ops_gemm_float(cols, x_f32, false, in1->data, other_f32, false, out->data, m,
                                 kc, f, passes, false, cx);
        if (!rc && pad_rows)
            tpu__conv_zero_pad_rows(&cg.g, out->data, f);
        break;
    case TPU_OP_CONV2D_GRAD_INPUT:
        rc = tpu__ops_gemm_float(in0->data, x_f32, false, in1->data, other_f32, true, cols, m,
                                 f, kc, passes, false, cx);
        if (!rc)
            tpu__win_col2im(&cg.g, cols, out->data);
        break;
    default:
        tpu__win_im2col(&cg.g, in0->data, cg.esize, cols);
        rc = tpu__ops_gemm_float(cols, x_f32, true, b_data, other_f32, false, out->data, kc,
                                 m, f, passes, op->attrs.accumulate, cx);
        break;
    }
    free(owned);
    if (rc == TPU_ENOMEM)
        return tpu__fail(d, rc, "%s: out of memory for the GEMM's working buffers", name);
    if (rc == TPU_ETHREAD)
        return tpu__fail(d, rc, "%s: could not start the GEMM's %u worker threads", name,
                         cx->n_threads);
    if (rc)
        return tpu__fail(d, rc, "%s: the GEMM failed (%s)", name, tpu_strerror(rc));
    return 0;
}
