/* Each layer's ops in the lowered programs: forward (every mode) and backward (training),
 * and the helpers that append them (net_lower_int.h). net_lower.c's opening comment gives the
 * formulas and the layout; it builds the program around these: params, loss, gradient
 * reduction, optimizers and the loop. */
#include <stdio.h>
#include <string.h>

#include "models/net_lower_int.h"
#include "rng.h"

uint64_t tpu__nl_rows_of(const struct lower *s, uint32_t t)
{
    /* hl is the tensor's h, or its local rows when it is cut by rows */
    return (uint64_t)s->B * s->lw[t].hl * s->net->layers[t].out.w;
}

static uint32_t cols_of(const struct lower *s, uint32_t t)
{
    return s->lw[t].cl; /* c, or the local columns of a cut tensor */
}

static const char *lname(const struct lower *s, uint32_t t)
{
    return s->net->layers[t].desc.name;
}

/* A f32 temp "<layer>.<what>". */
uint32_t tpu__nl_tmp(struct lower *s, uint32_t t, const char *what, uint64_t rows, uint32_t cols)
{
    char name[96]; /* at most 31 + 1 + 15 characters: within the program's 47 */
    snprintf(name, sizeof name, "%s.%s", lname(s, t), what);
    return tpu__b_buf(&s->b, name, TPU_F32, TPU_BUF_TEMP, (uint32_t)rows, cols);
}

void tpu__nl_op(struct lower *s, enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t i0,
                uint32_t i1, const struct tpu_op_attrs *at)
{
    tpu__b_op(&s->b, code, o0, o1, N, i0, i1, at);
}

struct tpu_op_attrs tpu__nl_attrs0(void)
{
    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    return at;
}

static void scale(struct lower *s, uint32_t y, uint32_t x, float alpha)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.alpha = alpha;
    tpu__nl_op(s, TPU_OP_SCALE, y, N, x, N, &at);
}

static void reduce_rows(struct lower *s, uint32_t y, uint32_t x)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.axis = 0;
    tpu__nl_op(s, TPU_OP_REDUCE_SUM, y, N, x, N, &at);
}

void tpu__nl_all_reduce(struct lower *s, uint32_t y, enum tpu_reduce_kind k)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.reduce = k;
    tpu__nl_op(s, TPU_OP_ALL_REDUCE, y, N, y, N, &at);
}

static void matmul(struct lower *s, uint32_t y, uint32_t a, uint32_t b, bool ta, bool tb,
                   bool acc)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.passes = (uint8_t)s->spec->passes;
    at.trans_a = ta;
    at.trans_b = tb;
    at.accumulate = acc;
    tpu__nl_op(s, TPU_OP_MATMUL, y, N, a, b, &at);
}

/* Tensor t as rows of pixels [B*h*w][c]. */
static uint32_t rows(const struct lower *s, uint32_t t)
{
    return t == 0 ? s->lw[0].rows : s->lw[t].y;
}

static void window_op(struct lower *s, enum tpu_opcode code, uint32_t y, uint32_t a, uint32_t b,
                      uint32_t layer)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.win = tpu__nl_window(s, layer);
    tpu__nl_op(s, code, y, N, a, b, &at);
}

/* Whether layer i's input is an image cut by rows (its window ops take parts). */
static bool cut_rows(const struct lower *s, uint32_t i)
{
    return s->lw[s->net->layers[i].in[0]].part == NL_ROWS;
}

/* The image a window op of layer i reads: its input, or the extended slice of it. */
static uint32_t window_input(struct lower *s, uint32_t i)
{
    return cut_rows(s, i) ? tpu__nl_halo(s, i) : s->lw[s->net->layers[i].in[0]].y;
}

/* A conv2d op of layer `layer` (conv2d, conv2d_grad_input, conv2d_grad_filter) with the
 * layer's window and the spec's passes. */
static void conv_op(struct lower *s, enum tpu_opcode code, uint32_t y, uint32_t a, uint32_t b,
                    uint32_t layer)
{
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.win = tpu__nl_window(s, layer);
    at.passes = (uint8_t)s->spec->passes;
    tpu__nl_op(s, code, y, N, a, b, &at);
}

/* A conv2d that is a plain matmul over the pixels: 1 x 1 kernel, strides 1 (no padding). */
static bool pointwise(const struct tpu__net_layer *L)
{
    const struct tpu_layer_desc *l = &L->desc;
    return l->kh == 1 && l->kw == 1 && l->sh == 1 && l->sw == 1;
}

/* Whether a layer reads its input as an image in any 2-D shape (the window ops and
 * reshape), rather than as rows of pixels. */
bool tpu__nl_reads_image(const struct tpu__net_layer *L)
{
    switch (L->desc.kind) {
    case TPU_LAYER_CONV2D:
        return !pointwise(L);
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
    case TPU_LAYER_FLATTEN:
    case TPU_LAYER_RESHAPE:
        return true;
    default:
        return false;
    }
}

/* ---- gradients ------------------------------------------------------------------------- */

uint32_t tpu__nl_dy_buf(struct lower *s, uint32_t t)
{
    if (s->lw[t].dy == N)
        s->lw[t].dy = tpu__nl_tmp(s, t, "dy", tpu__nl_rows_of(s, t), cols_of(s, t));
    return s->lw[t].dy;
}

/* Where a gradient contribution to tensor t goes: its gradient buffer if it is the first,
 * else a fresh temp that contrib_end adds in. */
static uint32_t contrib_begin(struct lower *s, uint32_t t)
{
    uint32_t dy = tpu__nl_dy_buf(s, t);
    if (!s->lw[t].dy_written)
        return dy;
    char what[24];
    snprintf(what, sizeof what, "dy%u", ++s->lw[t].n_contrib);
    return tpu__nl_tmp(s, t, what, tpu__nl_rows_of(s, t), cols_of(s, t));
}

static void contrib_end(struct lower *s, uint32_t t, uint32_t buf)
{
    if (buf == s->lw[t].dy)
        s->lw[t].dy_written = true;
    else
        tpu__nl_op(s, TPU_OP_ADD, s->lw[t].dy, N, s->lw[t].dy, buf, NULL);
}

/* dx += dy (add's backward): a copy for the first contribution, else an add in place. */
static void contrib_copy(struct lower *s, uint32_t t, uint32_t src)
{
    uint32_t dy = tpu__nl_dy_buf(s, t);
    if (!s->lw[t].dy_written) {
        scale(s, dy, src, 1.0f);
        s->lw[t].dy_written = true;
    } else {
        tpu__nl_op(s, TPU_OP_ADD, dy, N, dy, src, NULL);
    }
}

/* ---- forward ----------------------------------------------------------------------------- */

static void fwd_batch_norm(struct lower *s, uint32_t i)
{
    const struct tpu_layer_desc *l = &s->net->layers[i].desc;
    struct lw *w = &s->lw[i];
    const uint32_t x = rows(s, s->net->layers[i].in[0]);
    const uint64_t R = tpu__nl_rows_of(s, i);
    const uint32_t C = cols_of(s, i);
    const bool cut = w->part == NL_ROWS; /* sums over the replica's cores, padding masked */
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.eps = l->epsilon;
    w->y = tpu__nl_tmp(s, i, "y", R, C);
    if (!s->train) {
        w->inv = tpu__nl_tmp(s, i, "inv", 1, C);
        tpu__nl_op(s, TPU_OP_RSQRT, w->inv, N, w->p[TPU__P_MV], N, &at);
        tpu__nl_op(s, TPU_OP_SUB, w->y, N, x, w->p[TPU__P_MM], NULL);
        tpu__nl_op(s, TPU_OP_MUL, w->y, N, w->y, w->inv, NULL);
        tpu__nl_op(s, TPU_OP_MUL, w->y, N, w->y, w->p[TPU__P_GAMMA], NULL);
        tpu__nl_op(s, TPU_OP_ADD, w->y, N, w->y, w->p[TPU__P_BETA], NULL);
        tpu__nl_mask_rows(s, i, w->y);
        return;
    }
    const struct tpu_shape o = s->net->layers[i].out;
    const float inv_r = 1.0f / (float)((uint64_t)s->B * o.h * o.w); /* the global rows */
    uint32_t mean = tpu__nl_tmp(s, i, "mean", 1, C), var = tpu__nl_tmp(s, i, "var", 1, C);
    uint32_t sq = tpu__nl_tmp(s, i, "sq", R, C);
    w->xhat = tpu__nl_tmp(s, i, "xhat", R, C); /* first x - mean, then scaled in place to xhat */
    w->inv = tpu__nl_tmp(s, i, "inv", 1, C);
    reduce_rows(s, mean, x);
    if (cut)
        tpu__nl_all_reduce_cores(s, mean);
    scale(s, mean, mean, inv_r);
    if (l->cross_replica)
        tpu__nl_all_reduce(s, mean, TPU_REDUCE_MEAN);
    tpu__nl_op(s, TPU_OP_SUB, w->xhat, N, x, mean, NULL);
    if (cut) /* padding rows: 0 - mean, masked back to 0 (and so xhat and y's scaled part) */
        tpu__nl_mask_rows(s, i, w->xhat);
    tpu__nl_op(s, TPU_OP_MUL, sq, N, w->xhat, w->xhat, NULL);
    reduce_rows(s, var, sq);
    if (cut)
        tpu__nl_all_reduce_cores(s, var);
    scale(s, var, var, inv_r);
    if (l->cross_replica)
        tpu__nl_all_reduce(s, var, TPU_REDUCE_MEAN);
    tpu__nl_op(s, TPU_OP_RSQRT, w->inv, N, var, N, &at);
    tpu__nl_op(s, TPU_OP_MUL, w->xhat, N, w->xhat, w->inv, NULL);
    tpu__nl_op(s, TPU_OP_MUL, w->y, N, w->xhat, w->p[TPU__P_GAMMA], NULL);
    tpu__nl_op(s, TPU_OP_ADD, w->y, N, w->y, w->p[TPU__P_BETA], NULL);
    tpu__nl_mask_rows(s, i, w->y); /* beta in the padding rows */
    /* moving = momentum * moving + (1 - momentum) * batch, as Keras. Per-replica statistics
     * normalize this replica's batch, but the moving averages take their mean over the
     * replicas (Keras on TPU aggregates them ON_READ with MEAN), so every replica holds the
     * same moving statistics and they see the whole global batch. */
    const uint32_t stat[2] = {mean, var}, mv[2] = {w->p[TPU__P_MM], w->p[TPU__P_MV]};
    const char *what[2] = {"mean_part", "var_part"};
    const bool replicas_mean = !l->cross_replica && s->R > 1;
    for (int k = 0; k < 2; k++) {
        uint32_t part = tpu__nl_tmp(s, i, what[k], 1, C);
        if (replicas_mean) {
            struct tpu_op_attrs ar = tpu__nl_attrs0();
            ar.reduce = TPU_REDUCE_MEAN;
            tpu__nl_op(s, TPU_OP_ALL_REDUCE, part, N, stat[k], N, &ar);
        }
        scale(s, part, replicas_mean ? part : stat[k], 1.0f - l->momentum);
        scale(s, mv[k], mv[k], l->momentum);
        tpu__nl_op(s, TPU_OP_ADD, mv[k], N, mv[k], part, NULL);
    }
}

void tpu__nl_forward(struct lower *s, uint32_t i)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    const struct tpu_layer_desc *l = &L->desc;
    struct lw *w = &s->lw[i];
    const uint32_t in0 = L->in[0];
    const uint64_t R = tpu__nl_rows_of(s, i);
    const uint32_t C = cols_of(s, i);
    switch (l->kind) {
    case TPU_LAYER_DENSE:
    case TPU_LAYER_CONV2D: {
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        if (l->kind == TPU_LAYER_CONV2D && !pointwise(L)) /* the patches formed on chip */
            conv_op(s, TPU_OP_CONV2D, w->y, window_input(s, i), w->p[TPU__P_KERNEL], i);
        else
            matmul(s, w->y, rows(s, in0), w->p[TPU__P_KERNEL], false, false, false);
        if (w->split == TPU_SPLIT_ROWS) /* this core's part of the product: sum them */
            tpu__nl_all_reduce_cores(s, w->y);
        if (l->use_bias) {
            tpu__nl_op(s, TPU_OP_ADD, w->y, N, w->y, w->p[TPU__P_BIAS], NULL);
            tpu__nl_mask_rows(s, i, w->y); /* the bias in the padding rows */
        }
        if (l->activation == TPU_ACT_RELU)
            tpu__nl_op(s, TPU_OP_RELU, w->y, N, w->y, N, NULL);
        break;
    }
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        window_op(s, l->kind == TPU_LAYER_MAX_POOL2D ? TPU_OP_MAX_POOL : TPU_OP_AVG_POOL, w->y,
                  window_input(s, i), N, i);
        if (w->part == NL_WHOLE && cut_rows(s, i)) /* core 0's pool, zeros elsewhere */
            tpu__nl_all_reduce_cores(s, w->y);
        break;
    case TPU_LAYER_FLATTEN:
    case TPU_LAYER_RESHAPE:
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        tpu__nl_op(s, TPU_OP_RESHAPE, w->y, N, s->lw[in0].y, N, NULL);
        if (w->part == NL_WHOLE && cut_rows(s, i)) /* a 1-row image: core 0's, zeros else */
            tpu__nl_all_reduce_cores(s, w->y);
        break;
    case TPU_LAYER_RELU:
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        tpu__nl_op(s, TPU_OP_RELU, w->y, N, rows(s, in0), N, NULL);
        break;
    case TPU_LAYER_DROPOUT: {
        if (!s->train) {
            w->y = rows(s, in0);
            break;
        }
        w->mask = tpu__nl_tmp(s, i, "mask", R, C);
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        struct tpu_op_attrs at = tpu__nl_attrs0();
        at.alpha = l->rate;
        at.var = s->r->var_step;
        at.imm = (int64_t)(tpu__mix64(s->spec->seed ^ tpu__mix64(i)) >> 1);
        if (w->part == NL_ROWS || w->part == NL_FLAT) {
            /* the local rows' part of the whole image's mask (padding rows: 0) */
            const struct tpu_shape im = w->part == NL_ROWS ? L->out : w->img;
            at.win = (struct tpu_window){.h = im.h, .w = im.w, .c = im.c, .kh = 1, .kw = 1,
                                         .sh = 1, .sw = 1, .ho = im.h, .wo = im.w,
                                         .parts = s->P};
        }
        tpu__nl_op(s, TPU_OP_DROPOUT_MASK, w->mask, N, N, N, &at);
        tpu__nl_op(s, TPU_OP_MUL, w->y, N, rows(s, in0), w->mask, NULL);
        break;
    }
    case TPU_LAYER_BATCH_NORM:
        fwd_batch_norm(s, i);
        break;
    case TPU_LAYER_ADD:
        w->y = tpu__nl_tmp(s, i, "y", R, C);
        tpu__nl_op(s, TPU_OP_ADD, w->y, N, rows(s, in0), rows(s, L->in[1]), NULL);
        break;
    default:
        break;
    }
}

/* ---- backward ---------------------------------------------------------------------------- */

/* With dxhat = dy * gamma, the means of dxhat and dxhat * xhat are gamma times those of dy
 * and dy * xhat, which the param gradients already sum: so
 *   dx = inv * gamma * (dy - mean(dy) - xhat * mean(dy * xhat)),
 * two [R][C] temps instead of four. */
static void bwd_batch_norm(struct lower *s, uint32_t i)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    struct lw *w = &s->lw[i];
    const uint32_t in0 = L->in[0], dy = w->dy;
    const uint64_t R = tpu__nl_rows_of(s, i);
    const uint32_t C = cols_of(s, i);
    uint32_t dy_xhat = tpu__nl_tmp(s, i, "dy_xhat", R, C);
    tpu__nl_op(s, TPU_OP_MUL, dy_xhat, N, dy, w->xhat, NULL);
    reduce_rows(s, w->g[TPU__P_GAMMA], dy_xhat);
    reduce_rows(s, w->g[TPU__P_BETA], dy);
    if (w->part == NL_ROWS) { /* the replica's sums, which dx needs too */
        tpu__nl_all_reduce_cores(s, w->g[TPU__P_GAMMA]);
        tpu__nl_all_reduce_cores(s, w->g[TPU__P_BETA]);
    }
    if (!s->lw[in0].need_grad)
        return;
    const struct tpu_shape o = L->out;
    const float inv_r = 1.0f / (float)((uint64_t)s->B * o.h * o.w); /* the global rows */
    uint32_t m1 = tpu__nl_tmp(s, i, "dy_mean", 1, C), m2 = tpu__nl_tmp(s, i, "dy_xhat_mean", 1, C);
    uint32_t k = tpu__nl_tmp(s, i, "inv_gamma", 1, C), t = tpu__nl_tmp(s, i, "xhat_m2", R, C);
    scale(s, m1, w->g[TPU__P_BETA], inv_r);
    scale(s, m2, w->g[TPU__P_GAMMA], inv_r);
    if (L->desc.cross_replica) {
        tpu__nl_all_reduce(s, m1, TPU_REDUCE_MEAN);
        tpu__nl_all_reduce(s, m2, TPU_REDUCE_MEAN);
    }
    tpu__nl_op(s, TPU_OP_MUL, k, N, w->inv, w->p[TPU__P_GAMMA], NULL);
    tpu__nl_op(s, TPU_OP_MUL, t, N, w->xhat, m2, NULL);
    uint32_t dx = contrib_begin(s, in0);
    tpu__nl_op(s, TPU_OP_SUB, dx, N, dy, m1, NULL);
    tpu__nl_op(s, TPU_OP_SUB, dx, N, dx, t, NULL);
    tpu__nl_op(s, TPU_OP_MUL, dx, N, dx, k, NULL);
    tpu__nl_mask_rows(s, i, dx); /* -inv * gamma * mean(dy) in the padding rows */
    contrib_end(s, in0, dx);
}

void tpu__nl_backward(struct lower *s, uint32_t i)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    const struct tpu_layer_desc *l = &L->desc;
    struct lw *w = &s->lw[i];
    const uint32_t in0 = L->in[0], dy = w->dy;
    const bool gx = s->lw[in0].need_grad;
    uint32_t dx;
    switch (l->kind) {
    case TPU_LAYER_DENSE:
    case TPU_LAYER_CONV2D: {
        const bool window = l->kind == TPU_LAYER_CONV2D && !pointwise(L);
        if (l->activation == TPU_ACT_RELU)
            tpu__nl_op(s, TPU_OP_RELU_GRAD, dy, N, dy, w->y, NULL);
        if (window) /* the patches formed on chip again: none kept from the forward pass */
            conv_op(s, TPU_OP_CONV2D_GRAD_FILTER, w->g[TPU__P_KERNEL],
                    cut_rows(s, i) ? w->ext : s->lw[in0].y, dy, i);
        else
            matmul(s, w->g[TPU__P_KERNEL], rows(s, in0), dy, true, false, false);
        if (l->use_bias)
            reduce_rows(s, w->g[TPU__P_BIAS], dy);
        /* on rows cut over the cores: sums over this core's rows only */
        w->g1[TPU__P_KERNEL] = w->g1[TPU__P_BIAS] = w->part == NL_ROWS;
        if (!gx)
            break;
        if (!window && w->split == TPU_SPLIT_COLS) { /* a partial sum over the columns */
            dx = contrib_begin(s, in0);
            matmul(s, dx, dy, w->p[TPU__P_KERNEL], false, true, false);
            tpu__nl_all_reduce_cores(s, dx);
            contrib_end(s, in0, dx);
            break;
        }
        if (!window) {
            uint32_t d = tpu__nl_dy_buf(s, in0);
            matmul(s, d, dy, w->p[TPU__P_KERNEL], false, true, s->lw[in0].dy_written);
            s->lw[in0].dy_written = true;
            break;
        }
        if (cut_rows(s, i)) {
            uint32_t ext = tpu__nl_ext_tmp(s, i, "dext");
            conv_op(s, TPU_OP_CONV2D_GRAD_INPUT, ext, dy, w->p[TPU__P_KERNEL], i);
            dx = contrib_begin(s, in0);
            tpu__nl_halo_grad(s, i, dx, ext);
            contrib_end(s, in0, dx);
            break;
        }
        dx = contrib_begin(s, in0);
        conv_op(s, TPU_OP_CONV2D_GRAD_INPUT, dx, dy, w->p[TPU__P_KERNEL], i);
        contrib_end(s, in0, dx);
        break;
    }
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
    case TPU_LAYER_GLOBAL_AVG_POOL2D: {
        const bool max = l->kind == TPU_LAYER_MAX_POOL2D, cut = cut_rows(s, i);
        const enum tpu_opcode code = max ? TPU_OP_MAX_POOL_GRAD : TPU_OP_AVG_POOL_GRAD;
        const uint32_t x = !max ? N : cut ? w->ext : s->lw[in0].y;
        if (!cut) {
            dx = contrib_begin(s, in0);
            window_op(s, code, dx, dy, x, i);
            contrib_end(s, in0, dx);
            break;
        }
        /* the adjoint on the extended slice, summed back to the rows' owners */
        uint32_t ext = tpu__nl_ext_tmp(s, i, "dext");
        window_op(s, code, ext, dy, x, i);
        dx = contrib_begin(s, in0);
        tpu__nl_halo_grad(s, i, dx, ext);
        contrib_end(s, in0, dx);
        break;
    }
    case TPU_LAYER_FLATTEN:
    case TPU_LAYER_RESHAPE:
        dx = contrib_begin(s, in0);
        tpu__nl_op(s, TPU_OP_RESHAPE, dx, N, dy, N, NULL);
        if (w->part == NL_WHOLE && cut_rows(s, i)) /* a 1-row image: core 0's row only */
            tpu__nl_mask_rows(s, in0, dx);
        contrib_end(s, in0, dx);
        break;
    case TPU_LAYER_RELU:
        dx = contrib_begin(s, in0);
        tpu__nl_op(s, TPU_OP_RELU_GRAD, dx, N, dy, w->y, NULL);
        contrib_end(s, in0, dx);
        break;
    case TPU_LAYER_DROPOUT:
        dx = contrib_begin(s, in0);
        tpu__nl_op(s, TPU_OP_MUL, dx, N, dy, w->mask, NULL);
        contrib_end(s, in0, dx);
        break;
    case TPU_LAYER_BATCH_NORM:
        bwd_batch_norm(s, i);
        break;
    case TPU_LAYER_ADD:
        for (uint32_t k = 0; k < 2; k++)
            if (s->lw[L->in[k]].need_grad)
                contrib_copy(s, L->in[k], dy);
        break;
    default:
        break;
    }
}
