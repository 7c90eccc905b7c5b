/* The verifier's rules for the window ops, reshape and the conv2d ops (program_verify.c lists
 * every rule and calls these for the op table's rules WINDOW, RESHAPE and CONV). It checks
 * shapes, dtypes and the window's geometry only; what the ops compute is sim/ops/
 * ops_window.c's and ops_conv.c's.
 *
 *   T12 WINDOW (im2col, col2im, max_pool, max_pool_grad, avg_pool, avg_pool_grad): every
 *       window field is at least 1 except pt and pl; kh*kw*c < 2^32-1 (the ops index
 *       a window's elements in 32 bits); pt < kh and pl < kw; every window
 *       overlaps the image: (ho-1)*sh - pt <= h-1 and (wo-1)*sw - pl <= w-1. Every operand
 *       is f32. The image operand (x; col2im's y; avg_pool_grad's dx) has N*h*w*c elements,
 *       N >= 1, in any 2-D shape; max_pool_grad's dx has x's shape. im2col's y and col2im's
 *       cols are [N*ho*wo, kh*kw*c]; the pooling outputs y and the gradients dy are
 *       [N*ho*wo, c].
 *   T13 RESHAPE (reshape): y has x's dtype and element count, any shapes.
 *   T14 CONV (conv2d, conv2d_grad_input, conv2d_grad_filter): the window fields as WINDOW's.
 *       The inputs are f32 or bf16 in any mix, the output f32 (the accumulators' type).
 *       passes is 1, 3 or 6, and 3 or 6 need an f32 input (matmul's A3). The image (x;
 *       conv2d_grad_input's dx) has N*h*w*c elements, N >= 1, in any 2-D shape; the kernel w
 *       and conv2d_grad_filter's dw are [kh*kw*c, f]; y and dy are [N*ho*wo, f], with f the
 *       columns of w (conv2d, conv2d_grad_input) or of dy (conv2d_grad_filter). With a chip
 *       config, the chip's matrix unit multiplies bf16 (matmul's T1).
 *   With row partitioning (the window's parts >= 2; program.h's "Row partitioning"), the
 *   image operands above are ext images (N*E*w*c elements) and the window-side operands
 *   (y, dy, cols) have N*hoc*wo rows. */
#include <inttypes.h>
#include <stdio.h>

#include "program_int.h"
#include "tpusim/config.h"

/* a * b, or UINT64_MAX if it overflows. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* "'x' f32[128, 784]" */
static const char *bdesc(const struct tpu_buffer_desc *b, char out[96])
{
    snprintf(out, 96, "'%s' %s[%" PRIu32 ", %" PRIu32 "]", b->name, tpu_dtype_name(b->dtype),
             b->rows, b->cols);
    return out;
}

static uint64_t elems(const struct tpu_buffer_desc *b)
{
    return (uint64_t)b->rows * b->cols;
}

/* The window's own fields (before any operand is looked at). */
int tpu__verify_window_fields(const struct tpu_op *op, char *msg, size_t size)
{
    const struct tpu_window *w = &op->attrs.win;
    const char *name = tpu_opcode_name(op->code);
    const struct {
        const char *field;
        uint32_t v;
    } pos[] = {{"h", w->h},   {"w", w->w},   {"c", w->c},   {"kh", w->kh}, {"kw", w->kw},
               {"sh", w->sh}, {"sw", w->sw}, {"ho", w->ho}, {"wo", w->wo}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v == 0) {
            snprintf(msg, size, "window field %s=0; rule WINDOW: %s's h, w, c, kh, kw, sh, "
                     "sw, ho and wo are at least 1 (only the paddings pt and pl may be 0): set "
                     "%s", pos[i].field, name, pos[i].field);
            return TPU_EINVAL;
        }
    const struct {
        const char *pad, *k, *dim, *out, *stride, *o;
        uint32_t p, kv, n, ov, s;
    } ax[2] = {{"pt", "kh", "h", "rows", "sh", "ho", w->pt, w->kh, w->h, w->ho, w->sh},
               {"pl", "kw", "w", "columns", "sw", "wo", w->pl, w->kw, w->w, w->wo, w->sw}};
    const uint64_t k_elems = (uint64_t)w->kh * w->kw * w->c; /* below 2^96: no overflow */
    if (k_elems >= UINT32_MAX) {
        snprintf(msg, size, "window kh*kw*c = %" PRIu32 "*%" PRIu32 "*%" PRIu32 " = %" PRIu64
                 " elements; rule WINDOW: a window holds fewer than 2^32-1 = 4294967295 "
                 "elements (the ops index them in 32 bits): lower kh, kw or c", w->kh, w->kw,
                 w->c, k_elems);
        return TPU_EINVAL;
    }
    for (int i = 0; i < 2; i++) {
        if (ax[i].p >= ax[i].kv) {
            snprintf(msg, size, "window field %s=%" PRIu32 " is not below %s=%" PRIu32 "; rule "
                     "WINDOW: the padding before the first %s must be smaller than the "
                     "window, or the first window lies wholly in the padding: lower %s",
                     ax[i].pad, ax[i].p, ax[i].k, ax[i].kv, ax[i].out, ax[i].pad);
            return TPU_EINVAL;
        }
        const uint64_t last = (uint64_t)(ax[i].ov - 1) * ax[i].s; /* + pad: the last start */
        if (last > (uint64_t)ax[i].n - 1 + ax[i].p) {
            uint64_t fit = ((uint64_t)ax[i].n - 1 + ax[i].p) / ax[i].s + 1;
            snprintf(msg, size, "window field %s=%" PRIu32 " is too large: the last window "
                     "starts at (%s-1)*%s - %s = %" PRId64 ", past the image's last %s "
                     "%s-1 = %" PRIu32 "; rule WINDOW: every window overlaps the image: set "
                     "%s to at most %" PRIu64, ax[i].o, ax[i].ov, ax[i].o, ax[i].stride,
                     ax[i].pad, (int64_t)last - (int64_t)ax[i].p,
                     i ? "column" : "row", ax[i].dim, ax[i].n - 1, ax[i].o, fit);
            return TPU_EINVAL;
        }
    }
    return 0;
}

/* Operand `role` must be f32. */
static int need_f32(const struct tpu_op *op, const char *role, const struct tpu_buffer_desc *b,
                    char *msg, size_t size)
{
    if (b->dtype == TPU_F32)
        return 0;
    char s[96];
    snprintf(msg, size, "%s %s is %s, but %s computes in f32 (rule WINDOW); convert '%s' to "
             "f32 first or declare it f32", role, bdesc(b, s), tpu_dtype_name(b->dtype),
             tpu_opcode_name(op->code), b->name);
    return TPU_ESHAPE;
}

int tpu__verify_image(const struct tpu_op *op, const char *role,
                      const struct tpu_buffer_desc *b, enum tpu__image_kind kind, uint64_t *n,
                      char *msg, size_t size)
{
    const struct tpu_window *w = &op->attrs.win;
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const uint64_t rows = wp.parts == 1 ? w->h : kind == TPU__IMAGE_EXT ? wp.ext : wp.hc;
    const uint64_t per = mul_sat(mul_sat(rows, w->w), w->c), e = elems(b);
    char s[96];
    if (per != UINT64_MAX && per != 0 && e % per == 0) {
        *n = e / per;
        return 0;
    }
    if (wp.parts == 1) {
        snprintf(msg, size, "%s %s has %" PRIu64 " elements, not a multiple of h*w*c = "
                 "%" PRIu32 "*%" PRIu32 "*%" PRIu32 " (rule WINDOW: it holds N >= 1 images "
                 "of h x w x c); declare it with N*h*w*c elements or fix h, w, c", role,
                 bdesc(b, s), e, w->h, w->w, w->c);
    } else if (kind == TPU__IMAGE_EXT) {
        snprintf(msg, size, "%s %s has %" PRIu64 " elements, not a multiple of E*w*c = "
                 "%" PRIu64 "*%" PRIu32 "*%" PRIu32 " (row partitioning, parts=%" PRIu32 ": "
                 "it is the ext image, E = (hoc-1)*sh + kh = (%" PRIu64 "-1)*%" PRIu32
                 " + %" PRIu32 " rows per example, hoc = ceil(ho/parts)); declare it with "
                 "N*E*w*c elements or fix the window", role, bdesc(b, s), e, wp.ext, w->w,
                 w->c, wp.parts, wp.hoc, w->sh, w->kh);
    } else {
        snprintf(msg, size, "%s %s has %" PRIu64 " elements, not a multiple of hc*w*c = "
                 "%" PRIu64 "*%" PRIu32 "*%" PRIu32 " (row partitioning, parts=%" PRIu32 ": "
                 "it is the core's local image, hc = ceil(h/parts) = ceil(%" PRIu32 "/%" PRIu32
                 ") rows per example); declare it with N*hc*w*c elements or fix the window",
                 role, bdesc(b, s), e, wp.hc, w->w, w->c, wp.parts, w->h, wp.parts);
    }
    return TPU_ESHAPE;
}

/* The image operand `role` of a window op: the image, or with parts >= 2 the ext image. */
static int need_image(const struct tpu_op *op, const char *role,
                      const struct tpu_buffer_desc *b, uint64_t *n, char *msg, size_t size)
{
    return tpu__verify_image(op, role, b, TPU__IMAGE_EXT, n, msg, size);
}

/* The rows of the window side per example: ho, or hoc with parts >= 2. */
static uint64_t out_rows(const struct tpu_window *w)
{
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    return wp.hoc;
}

/* The window-side operand `role`: [N*ho*wo, cols] (`what` names the columns). */
static int need_windows(const struct tpu_op *op, const char *role,
                        const struct tpu_buffer_desc *b, uint64_t n, uint64_t cols,
                        const char *what, char *msg, size_t size)
{
    const struct tpu_window *w = &op->attrs.win;
    const uint64_t rows = mul_sat(n, mul_sat(out_rows(w), w->wo));
    if (b->rows == rows && b->cols == cols)
        return 0;
    char s[96];
    if (w->parts > 1)
        snprintf(msg, size, "%s %s must be [%" PRIu64 ", %" PRIu64 "] (rule WINDOW with "
                 "parts=%" PRIu32 ": the core's local out, N*hoc*wo = %" PRIu64 "*%" PRIu64
                 "*%" PRIu32 " rows, hoc = ceil(ho/parts), and %s); declare it %s[%" PRIu64
                 ", %" PRIu64 "]", role, bdesc(b, s), rows, cols, w->parts, n, out_rows(w),
                 w->wo, what, tpu_dtype_name(b->dtype), rows, cols);
    else
        snprintf(msg, size, "%s %s must be [%" PRIu64 ", %" PRIu64 "] (rule WINDOW: N*ho*wo = "
                 "%" PRIu64 "*%" PRIu32 "*%" PRIu32 " rows, one per window, and %s); declare "
                 "it %s[%" PRIu64 ", %" PRIu64 "]", role, bdesc(b, s), rows, cols, n, w->ho,
                 w->wo, what, tpu_dtype_name(b->dtype), rows, cols);
    return TPU_ESHAPE;
}

static int check_reshape(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                         size_t size)
{
    const struct tpu_buffer_desc *x = tpu_program_buffer(p, op->in[0]);
    const struct tpu_buffer_desc *y = tpu_program_buffer(p, op->out[0]);
    if (x->dtype == y->dtype && elems(x) == elems(y))
        return 0;
    char s1[96], s2[96];
    snprintf(msg, size, "output y %s and input x %s differ in %s; reshape copies x's elements "
             "in row-major order (rule RESHAPE), so y needs x's dtype and element count "
             "(%" PRIu64 "): declare y so", bdesc(y, s1), bdesc(x, s2),
             x->dtype != y->dtype ? "dtype" : "element count", elems(x));
    return TPU_ESHAPE;
}

int tpu__verify_window(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                       size_t size)
{
    if (op->code == TPU_OP_RESHAPE)
        return check_reshape(p, op, msg, size);
    int rc = tpu__verify_window_fields(op, msg, size);
    if (rc)
        return rc;
    const unsigned n_out = tpu_opcode_n_out(op->code), n_in = tpu_opcode_n_in(op->code);
    for (unsigned k = 0; k < n_out + n_in; k++) {
        const bool is_out = k < n_out;
        const uint32_t id = is_out ? op->out[k] : op->in[k - n_out];
        char role[48];
        snprintf(role, sizeof role, "%s %s", is_out ? "output" : "input",
                 tpu_opcode_operand_name(op->code, is_out, is_out ? k : k - n_out));
        if ((rc = need_f32(op, role, tpu_program_buffer(p, id), msg, size)) != 0)
            return rc;
    }
    const struct tpu_window *w = &op->attrs.win;
    const uint64_t k_cols = mul_sat(mul_sat(w->kh, w->kw), w->c);
    const struct tpu_buffer_desc *out = tpu_program_buffer(p, op->out[0]);
    const struct tpu_buffer_desc *in0 = tpu_program_buffer(p, op->in[0]);
    uint64_t n = 0;
    switch (op->code) {
    case TPU_OP_IM2COL:
        rc = need_image(op, "input x", in0, &n, msg, size);
        return rc ? rc : need_windows(op, "output y", out, n, k_cols,
                                      "kh*kw*c columns, one per window element", msg, size);
    case TPU_OP_MAX_POOL:
    case TPU_OP_AVG_POOL:
        rc = need_image(op, "input x", in0, &n, msg, size);
        return rc ? rc : need_windows(op, "output y", out, n, w->c, "c columns", msg, size);
    case TPU_OP_COL2IM:
        rc = need_image(op, "output y", out, &n, msg, size);
        return rc ? rc : need_windows(op, "input cols", in0, n, k_cols,
                                      "kh*kw*c columns, one per window element", msg, size);
    case TPU_OP_AVG_POOL_GRAD:
        rc = need_image(op, "output dx", out, &n, msg, size);
        return rc ? rc : need_windows(op, "input dy", in0, n, w->c, "c columns", msg, size);
    case TPU_OP_MAX_POOL_GRAD: {
        const struct tpu_buffer_desc *x = tpu_program_buffer(p, op->in[1]);
        rc = need_image(op, "input x", x, &n, msg, size);
        if (rc)
            return rc;
        if (out->rows != x->rows || out->cols != x->cols) {
            char s1[96], s2[96];
            snprintf(msg, size, "output dx %s must have input x's shape %s (rule WINDOW: dx "
                     "is the gradient of x); declare it f32[%" PRIu32 ", %" PRIu32 "]",
                     bdesc(out, s1), bdesc(x, s2), x->rows, x->cols);
            return TPU_ESHAPE;
        }
        return need_windows(op, "input dy", in0, n, w->c, "c columns", msg, size);
    }
    default:
        snprintf(msg, size, "%s has no window rule", tpu_opcode_name(op->code));
        return TPU_EINVAL;
    }
}

/* Operand `role` of a conv op must be [rows, cols] (`why` gives the reason). */
static int conv_shape(const struct tpu_op *op, const char *role,
                      const struct tpu_buffer_desc *b, uint64_t rows, uint64_t cols,
                      const char *why, char *msg, size_t size)
{
    if (b->rows == rows && b->cols == cols)
        return 0;
    char s[96];
    snprintf(msg, size, "%s %s must be [%" PRIu64 ", %" PRIu64 "] (rule CONV: %s); declare "
             "it %s[%" PRIu64 ", %" PRIu64 "] or fix the window of %s", role, bdesc(b, s), rows,
             cols, why, tpu_dtype_name(b->dtype), rows, cols, tpu_opcode_name(op->code));
    return TPU_ESHAPE;
}

int tpu__verify_conv(const struct tpu_program *p, const struct tpu_op *op,
                     const struct tpu_chip_config *cfg, char *msg, size_t size)
{
    int rc = tpu__verify_window_fields(op, msg, size);
    if (rc)
        return rc;
    const char *name = tpu_opcode_name(op->code);
    const struct tpu_buffer_desc *out = tpu_program_buffer(p, op->out[0]);
    const struct tpu_buffer_desc *in[2] = {tpu_program_buffer(p, op->in[0]),
                                           tpu_program_buffer(p, op->in[1])};
    char s1[96], s2[96];
    bool any_f32 = false;
    for (unsigned k = 0; k < 2; k++) {
        const char *role = tpu_opcode_operand_name(op->code, false, k);
        if (in[k]->dtype != TPU_F32 && in[k]->dtype != TPU_BF16) {
            snprintf(msg, size, "input %s %s is %s, but %s multiplies f32 or bf16 on the "
                     "matrix unit (rule CONV); convert '%s' to f32 or bf16 first", role,
                     bdesc(in[k], s1), tpu_dtype_name(in[k]->dtype), name, in[k]->name);
            return TPU_ESHAPE;
        }
        any_f32 = any_f32 || in[k]->dtype == TPU_F32;
    }
    const char *out_role = tpu_opcode_operand_name(op->code, true, 0);
    if (out->dtype != TPU_F32) {
        snprintf(msg, size, "output %s %s must be f32: %s gives f32, the accumulators' type "
                 "(rule CONV); declare it f32 and convert afterwards if needed", out_role,
                 bdesc(out, s1), name);
        return TPU_ESHAPE;
    }
    const unsigned passes = op->attrs.passes;
    if (passes != 1 && passes != 3 && passes != 6) {
        snprintf(msg, size, "passes=%u; %s runs in 1 pass (bf16 inputs: mixed precision), or "
                 "3 or 6 bf16 passes (f32 precision) (rule CONV): set passes to 1, 3 or 6",
                 passes, name);
        return TPU_EINVAL;
    }
    if (passes != 1 && !any_f32) {
        snprintf(msg, size, "passes=%u needs an f32 input (it splits f32 values into bf16 "
                 "parts; bf16 inputs are exact in one pass), but %s is %s and %s is %s (rule "
                 "CONV); use passes=1", passes, tpu_opcode_operand_name(op->code, false, 0),
                 bdesc(in[0], s1), tpu_opcode_operand_name(op->code, false, 1),
                 bdesc(in[1], s2));
        return TPU_EINVAL;
    }
    const struct tpu_window *w = &op->attrs.win;
    const uint64_t k_cols = mul_sat(mul_sat(w->kh, w->kw), w->c);
    const bool grad_input = op->code == TPU_OP_CONV2D_GRAD_INPUT;
    uint64_t n = 0;
    rc = grad_input ? need_image(op, "output dx", out, &n, msg, size)
                    : need_image(op, "input x", in[0], &n, msg, size);
    if (rc)
        return rc;
    const uint64_t rows = mul_sat(n, mul_sat(out_rows(w), w->wo));
    const char *kernel = "the kernel is [kh*kw*c, f], one row per window element";
    const char *win_rows = w->parts > 1 ? "N*hoc*wo rows with parts > 1 (the core's local "
                                          "out, hoc = ceil(ho/parts)), and f columns, one per "
                                          "filter"
                                        : "N*ho*wo rows, one per window, and f columns, one "
                                          "per filter";
    if (op->code == TPU_OP_CONV2D_GRAD_FILTER) {
        rc = conv_shape(op, "input dy", in[1], rows, in[1]->cols, win_rows, msg, size);
        if (!rc)
            rc = conv_shape(op, "output dw", out, k_cols, in[1]->cols, kernel, msg, size);
    } else {
        rc = conv_shape(op, "input w", in[1], k_cols, in[1]->cols, kernel, msg, size);
        if (!rc && grad_input)
            rc = conv_shape(op, "input dy", in[0], rows, in[1]->cols, win_rows, msg, size);
        else if (!rc)
            rc = conv_shape(op, "output y", out, rows, in[1]->cols, win_rows, msg, size);
    }
    if (rc)
        return rc;
    if (cfg && !(cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16))) {
        snprintf(msg, size, "chip '%s' has no bf16 matrix unit (it multiplies int8 only), and "
                 "%s multiplies bf16 (rule CONV); use a chip with a bf16 matrix unit",
                 cfg->name, name);
        return TPU_EUNSUPPORTED;
    }
    return 0;
}
