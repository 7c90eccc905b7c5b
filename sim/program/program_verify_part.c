/* The verifier's rules for row partitioning (program.h's "Row partitioning"): the halo ops,
 * row_mask and dropout_mask's optional window. program_verify.c calls this file for the op
 * table's rules HALO and ROW_MASK and program_verify_train.c for a dropout_mask that has a
 * window; the window ops' own rules with parts >= 2 are program_verify_window.c's. Whether
 * parts matches the device (its cores_per_replica) is tpu_device_load's check, not the
 * verifier's: a program does not know the device it will run on.
 *
 *   T15 HALO (halo, halo_grad): the window's fields as WINDOW's, and parts >= 2 (they
 *       exchange the rows of a partitioned image). halo: x the local image (N*hc*w*c
 *       elements), f32 or bf16; y the ext image (N*E*w*c elements) of x's dtype and the
 *       same N. halo_grad: dy the ext image f32, dx the local image f32, the same N.
 *   T16 ROW_MASK (row_mask): h, w, c >= 1 and parts >= 2 (the other window fields are not
 *       read; the lowering passes the identity window); y f32 with N*hc*w*c elements.
 *   T11 (continued) dropout_mask with a window: parts >= 2, h, w, c >= 1; the mask has
 *       N*hc*w*c elements. A window with parts 0 or 1 is refused (it would not be read). */
#include <inttypes.h>
#include <stdio.h>

#include "program_int.h"

static const char *bdesc(const struct tpu_buffer_desc *b, char out[96])
{
    snprintf(out, 96, "'%s' %s[%" PRIu32 ", %" PRIu32 "]", b->name, tpu_dtype_name(b->dtype),
             b->rows, b->cols);
    return out;
}

/* parts >= 2 and h, w, c >= 1. */
static int need_parts(const struct tpu_op *op, char *msg, size_t size)
{
    const struct tpu_window *w = &op->attrs.win;
    const char *name = tpu_opcode_name(op->code);
    if (w->parts < 2) {
        snprintf(msg, size, "window parts=%" PRIu32 "; %s works on a row-partitioned image "
                 "and needs parts >= 2 (the cores of a replica its rows are split over): set "
                 "parts to the device's cores_per_replica", w->parts, name);
        return TPU_EINVAL;
    }
    const struct {
        const char *field;
        uint32_t v;
    } pos[] = {{"h", w->h}, {"w", w->w}, {"c", w->c}};
    for (size_t i = 0; i < 3; i++)
        if (pos[i].v == 0) {
            snprintf(msg, size, "window field %s=0; %s needs the image's h, w and c, each at "
                     "least 1: set %s", pos[i].field, name, pos[i].field);
            return TPU_EINVAL;
        }
    return 0;
}

static int need_dtype(const struct tpu_op *op, const char *role, const struct tpu_buffer_desc *b,
                      bool bf16_ok, char *msg, size_t size)
{
    if (b->dtype == TPU_F32 || (bf16_ok && b->dtype == TPU_BF16))
        return 0;
    char s[96];
    snprintf(msg, size, "%s %s is %s, but %s takes %s; convert '%s' first or declare it so",
             role, bdesc(b, s), tpu_dtype_name(b->dtype), tpu_opcode_name(op->code),
             bf16_ok ? "f32 or bf16" : "f32", b->name);
    return TPU_ESHAPE;
}

static int check_halo(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                      size_t size)
{
    int rc = tpu__verify_window_fields(op, msg, size);
    if (!rc)
        rc = need_parts(op, msg, size);
    if (rc)
        return rc;
    const bool grad = op->code == TPU_OP_HALO_GRAD;
    const struct tpu_buffer_desc *out = tpu_program_buffer(p, op->out[0]);
    const struct tpu_buffer_desc *in = tpu_program_buffer(p, op->in[0]);
    /* halo: x local -> y ext; halo_grad: dy ext -> dx local */
    const char *in_role = grad ? "input dy" : "input x", *out_role = grad ? "output dx"
                                                                            : "output y";
    rc = need_dtype(op, in_role, in, !grad, msg, size);
    if (!rc)
        rc = need_dtype(op, out_role, out, !grad, msg, size);
    if (rc)
        return rc;
    if (out->dtype != in->dtype) {
        char s1[96], s2[96];
        snprintf(msg, size, "%s %s and %s %s differ in dtype; %s moves rows unchanged, so "
                 "both need one dtype", out_role, bdesc(out, s1), in_role, bdesc(in, s2),
                 tpu_opcode_name(op->code));
        return TPU_ESHAPE;
    }
    uint64_t n_in = 0, n_out = 0;
    rc = tpu__verify_image(op, in_role, in, grad ? TPU__IMAGE_EXT : TPU__IMAGE_LOCAL, &n_in,
                           msg, size);
    if (!rc)
        rc = tpu__verify_image(op, out_role, out, grad ? TPU__IMAGE_LOCAL : TPU__IMAGE_EXT,
                               &n_out, msg, size);
    if (rc)
        return rc;
    if (n_in != n_out) {
        char s1[96], s2[96];
        snprintf(msg, size, "%s %s holds %" PRIu64 " examples but %s %s holds %" PRIu64
                 "; %s keeps the example count N (local image N*hc*w*c, ext image N*E*w*c "
                 "elements): declare both for one N", in_role, bdesc(in, s1), n_in, out_role,
                 bdesc(out, s2), n_out, tpu_opcode_name(op->code));
        return TPU_ESHAPE;
    }
    return 0;
}

/* row_mask's y, or dropout_mask's mask: a local image of f32. */
static int check_mask(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                      size_t size)
{
    int rc = need_parts(op, msg, size);
    if (rc)
        return rc;
    const char *role = op->code == TPU_OP_ROW_MASK ? "output y" : "output mask";
    const struct tpu_buffer_desc *out = tpu_program_buffer(p, op->out[0]);
    uint64_t n;
    rc = need_dtype(op, role, out, false, msg, size);
    return rc ? rc : tpu__verify_image(op, role, out, TPU__IMAGE_LOCAL, &n, msg, size);
}

int tpu__verify_part(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                     size_t size)
{
    switch (op->code) {
    case TPU_OP_HALO:
    case TPU_OP_HALO_GRAD:
        return check_halo(p, op, msg, size);
    case TPU_OP_ROW_MASK:
    case TPU_OP_DROPOUT_MASK:
        return check_mask(p, op, msg, size);
    default:
        snprintf(msg, size, "%s has no row-partitioning rule", tpu_opcode_name(op->code));
        return TPU_EINVAL;
    }
}
