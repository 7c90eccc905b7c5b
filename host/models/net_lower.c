/* The layer graph lowered to device programs (tpu_net_build). The builder and shapes are in
 * net.c, the runtime model and the params' initial values in net_model.c. This file builds
 * the program around the layers (params, loss, gradient reduction, optimizers, the loop);
 * each layer's forward and backward ops are net_lower_layers.c's (net_lower_int.h).
 *
 * Layout. Every program is per replica with B examples. A tensor h x w x c is a buffer
 * [B*h*w][c] ("<layer>.y"): a row per pixel, so a per-channel bias, scale or mean broadcasts
 * over rows. The input is infed as x [B][h*w*c] (the same bytes); the window ops read it as
 * it is, and a layer that needs rows of pixels reads "input.rows", one reshape of it.
 *
 * Forward, per layer (training mode; evaluation and prediction the same except where said):
 *   dense        y = matmul(x, kernel [c][units]); y += bias; y = relu(y)     (in place)
 *   conv2d       y = conv2d(x, kernel) [B*ho*wo][filters] (= matmul(im2col(x), kernel), the
 *                patches formed on chip, never stored); bias; relu (a 1 x 1 kernel with
 *                strides 1 is a matmul of x's rows of pixels)
 *   max_pool2d, avg_pool2d   their window ops; global_avg_pool2d = avg_pool over the whole
 *                image; flatten, reshape = reshape (a copy into the new shape); relu; add
 *   dropout      mask = dropout_mask(rate, seed, step); y = x * mask; evaluation and
 *                prediction: y is x (no op)
 *   batch_norm   mean = sum(x) / R over rows (R = B*h*w); xc = x - mean; var = sum(xc*xc) / R
 *                (two passes, biased as Keras); cross_replica: all_reduce mean of the mean,
 *                and of the variance around the global mean; inv = rsqrt(var + eps);
 *                xhat = xc * inv; y = xhat * gamma + beta; moving_mean = momentum * mm +
 *                (1 - momentum) * mean, the same for moving_variance; without
 *                cross_replica, on more than one replica, mean and var there are their
 *                all_reduce means over the replicas (each replica normalizes with its own,
 *                and all hold the same moving statistics). Evaluation and
 *                prediction: y = (x - moving_mean) * rsqrt(moving_variance + eps) * gamma +
 *                beta.
 * Loss: softmax_xent (alpha 1 / (B * R), R replicas: runtime.h's struct tpu_build_shape) of
 * the output [B][K] with the labels, or mse of the output as [B][size] with the targets and
 * the mask. Evaluation: the same with alpha 1 (a per-example sum) and classify_count (mse:
 * count_rows, no accuracy). Prediction outfeeds the output as [B][size].
 * Training with shape.weighted infeeds the row weights f32 [B][1] after the labels (or the
 * targets and mask; with labels on core 0 only, the weights too) and uses softmax_xent_w /
 * mse_w, the weights in alpha's place; with shape.train_counts it adds classify_count (mse:
 * count_rows) after the loss and outfeeds the counts after the loss at the step's end.
 *
 * Backward, layers in reverse order, each only if the loss depends on it and some param
 * lies at or before it (the input gets no gradient). A tensor read by several layers gets
 * the sum of their contributions: the first writes its gradient buffer ("<layer>.dy"), each
 * later one is added (matmul with accumulate, or a temp and an add).
 *   dense, conv2d  dy = relu_grad(dy, y); d_kernel = matmul trans_a(x, dy) (conv2d:
 *                  conv2d_grad_filter(x, dy), its patches formed on chip again); d_bias =
 *                  sum(dy); dx = matmul trans_b(dy, kernel) (conv2d: conv2d_grad_input(dy,
 *                  kernel))
 *   pools          max_pool_grad(dy, x), avg_pool_grad(dy); flatten, reshape: reshape back;
 *                  relu: relu_grad(dy, y); dropout: dy * mask; add: dy to both inputs
 *   batch_norm     d_gamma = sum(dy * xhat); d_beta = sum(dy); with dxhat = dy * gamma,
 *                  dx = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 *                     = inv * gamma * (dy - d_beta / R - xhat * d_gamma / R), the sums over
 *                  rows (cross_replica: all_reduce mean of d_beta / R and d_gamma / R, the
 *                  global means; the param gradients are all-reduced later as sums)
 * Then each param gradient is all_reduce'd (sum: the 1 / (B * R) in the loss makes it the
 * gradient of the mean loss), `step` advances, and the optimizer updates each trainable param
 * (l2 on kernels only; AdamW decays every trainable param, as Keras's default). Batch norm's
 * moving statistics are params without an optimizer. With the spec's schedule host, the
 * training program declares a third variable, "learning_rate", and every optimizer op reads
 * its rate from it (schedule=host lr_var=learning_rate; alpha, the spec's rate, while the
 * host has set none).
 *
 * Params: in layer order <layer>.kernel, .bias, .gamma, .beta, .moving_mean,
 * .moving_variance; training adds the optimizer state after them (<param>.vel, or .m and .v).
 *
 * Several cores per replica (model parallelism): net_lower_part.c plans how each tensor lies
 * over a replica's cores (whole, cut by image rows, flattened rows, or a dense output cut by
 * columns) and its opening comment gives the ops each layer then takes: halo before the
 * window ops and halo_grad after their adjoints, row masks, all_reduce over the replica's
 * cores (group 1) for partial sums, dense kernels split by rows or columns (the program's
 * param_split, which the optimizer state shares). Here: the features or labels of dims of
 * product 1 are infed with core0 and shared by an all_reduce, and each partial param
 * gradient is summed over the replica's cores before the sum over replicas. With one core
 * per replica the programs are exactly those described above. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/net_lower_int.h"
#include "util.h"

/* ---- the program ------------------------------------------------------------------------- */

/* Which layers the loss depends on, and which have a param at or before them. */
static void mark(struct lower *s)
{
    const struct tpu_net *net = s->net;
    for (uint32_t i = 1; i < net->n_layers; i++) {
        const struct tpu__net_layer *L = &net->layers[i];
        bool g = tpu__net_has_param(L, TPU__P_KERNEL) || tpu__net_has_param(L, TPU__P_GAMMA);
        for (uint32_t k = 0; k < L->n_in; k++)
            g = g || s->lw[L->in[k]].need_grad;
        s->lw[i].need_grad = g;
    }
    s->lw[net->output].live = true;
    for (uint32_t i = net->output + 1; i-- > 0;)
        if (s->lw[i].live)
            for (uint32_t k = 0; k < net->layers[i].n_in; k++)
                s->lw[net->layers[i].in[k]].live = true;
}

/* Param k of layer i: its device buffer's shape and how it is cut over the replica's cores
 * (a dense layer's split: its kernel, and with COLS its bias; net_lower_part.c). */
static void param_shape(const struct lower *s, uint32_t i, int k, uint32_t *rows,
                        uint32_t *cols, uint8_t *split, uint32_t *full)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    const uint32_t c = L->in_shape.c;
    *rows = 1;
    *cols = L->out.c;
    if (k == TPU__P_KERNEL)
        *rows = L->desc.kind == TPU_LAYER_CONV2D ? L->desc.kh * L->desc.kw * c : c;
    *split = TPU_SPLIT_NONE;
    *full = 0;
    if (s->lw[i].split == TPU_SPLIT_ROWS && k == TPU__P_KERNEL) {
        *split = TPU_SPLIT_ROWS;
        *full = *rows;
        *rows = (*rows + s->P - 1) / s->P;
    } else if (s->lw[i].split == TPU_SPLIT_COLS && (k == TPU__P_KERNEL || k == TPU__P_BIAS)) {
        *split = TPU_SPLIT_COLS;
        *full = *cols;
        *cols = (*cols + s->P - 1) / s->P;
    }
}

/* Param k of layer i's name: <layer>.<suffix>, or for the MLP's net (net->mlp_names) w<l>
 * and b<l>, l the dense layer's index. */
static void param_name(const struct lower *s, uint32_t i, int k, char *name, size_t size)
{
    const struct tpu__net_layer *L = &s->net->layers[i];
    if (!s->net->mlp_names || L->desc.kind != TPU_LAYER_DENSE) {
        snprintf(name, size, "%s.%s", L->desc.name, tpu__net_param_suffix[k]);
        return;
    }
    uint32_t l = 0;
    for (uint32_t j = 1; j < i; j++)
        l += s->net->layers[j].desc.kind == TPU_LAYER_DENSE;
    snprintf(name, size, "%c%u", k == TPU__P_KERNEL ? 'w' : 'b', l);
}

/* Lists buffer id among the program's params with its split. */
static void list_param(struct lower *s, uint32_t id, uint8_t split, uint32_t full)
{
    struct tpu_model_program *r = s->r;
    r->param_split[r->n_params] = split;
    r->param_full[r->n_params] = full;
    r->params[r->n_params++] = id;
}

/* The params (in layer order), then for training the gradients and optimizer state. */
static void declare_params(struct lower *s)
{
    char name[96];
    for (uint32_t i = 1; i < s->net->n_layers; i++) {
        const struct tpu__net_layer *L = &s->net->layers[i];
        for (int k = 0; k < TPU__P_COUNT; k++) {
            if (!tpu__net_has_param(L, k))
                continue;
            uint32_t rows, cols, full;
            uint8_t split;
            param_shape(s, i, k, &rows, &cols, &split, &full);
            param_name(s, i, k, name, sizeof name);
            s->lw[i].p[k] = tpu__b_buf(&s->b, name, TPU_F32, TPU_BUF_PARAM, rows, cols);
            list_param(s, s->lw[i].p[k], split, full);
        }
    }
    if (!s->train)
        return;
    const bool adam = s->spec->optimizer != TPU_OPT_SGD_MOMENTUM;
    const char *sfx[2] = {adam ? "m" : "vel", "v"};
    for (uint32_t i = 1; i < s->net->n_layers; i++) {
        const struct tpu__net_layer *L = &s->net->layers[i];
        for (int k = 0; k < TPU__P_COUNT; k++) {
            if (!tpu__net_has_param(L, k) || !tpu__net_trainable(k))
                continue;
            uint32_t prow, pcol, full;
            uint8_t split;
            param_shape(s, i, k, &prow, &pcol, &split, &full);
            for (int j = 0; j < (adam ? 2 : 1); j++) { /* the state is split as its param */
                char pname[64];
                param_name(s, i, k, pname, sizeof pname);
                snprintf(name, sizeof name, "%s.%s", pname, sfx[j]);
                s->lw[i].st[k][j] = tpu__b_buf(&s->b, name, TPU_F32, TPU_BUF_PARAM, prow, pcol);
                list_param(s, s->lw[i].st[k][j], split, full);
            }
            if (!s->lw[i].live)
                continue; /* a layer the loss does not read keeps its initial values */
            char what[24];
            snprintf(what, sizeof what, "d_%s", tpu__net_param_suffix[k]);
            s->lw[i].g[k] = tpu__nl_tmp(s, i, what, prow, pcol);
        }
    }
}

static void optimizer_update(struct lower *s, uint32_t i, int k)
{
    const struct tpu_train_spec *sp = s->spec;
    const struct lw *w = &s->lw[i];
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.alpha = sp->learning_rate;
    if (sp->schedule == TPU_SCHEDULE_HOST) {
        at.schedule = (int32_t)sp->schedule;
        at.lr_var = s->var_lr;
    } else if (sp->schedule != TPU_SCHEDULE_CONSTANT) {
        at.schedule = (int32_t)sp->schedule;
        at.warmup = sp->warmup_steps;
        at.decay_steps = sp->decay_steps;
        at.decay_rate = sp->decay_rate;
        at.var = s->r->var_step;
    }
    if (sp->optimizer == TPU_OPT_SGD_MOMENTUM) {
        at.beta = sp->momentum;
        at.gamma = k == TPU__P_KERNEL ? sp->l2 : 0.0f;
        tpu__b_op(&s->b, TPU_OP_SGD_MOMENTUM, w->p[k], w->st[k][0], N, w->g[k], N, &at);
        return;
    }
    at.beta = sp->beta1;
    at.delta = sp->beta2;
    at.eps = sp->epsilon;
    at.var = s->r->var_step;
    if (sp->optimizer == TPU_OPT_ADAMW) {
        at.gamma = sp->weight_decay;
        tpu__b_op(&s->b, TPU_OP_ADAMW, w->p[k], w->st[k][0], w->st[k][1], w->g[k], N, &at);
    } else {
        at.gamma = k == TPU__P_KERNEL ? sp->l2 : 0.0f;
        tpu__b_op(&s->b, TPU_OP_ADAM, w->p[k], w->st[k][0], w->st[k][1], w->g[k], N, &at);
    }
}

/* The counts [1][2] (correct, real rows) of the output pred [B][size]: classify_count, or
 * for MSE count_rows (no correct answers: no_accuracy). Returns the buffer, "counts". */
static uint32_t counts_of(struct lower *s, uint32_t pred)
{
    uint32_t counts = tpu__b_buf(&s->b, "counts", TPU_F32, TPU_BUF_TEMP, 1, 2);
    if (s->net->loss == TPU_LOSS_SOFTMAX_XENT) {
        tpu__nl_op(s, TPU_OP_CLASSIFY_COUNT, counts, N, pred, s->labels, NULL);
    } else {
        tpu__nl_op(s, TPU_OP_COUNT_ROWS, counts, N, s->mask, N, NULL);
        s->r->no_accuracy = true;
    }
    if (s->labels_core0)
        tpu__nl_core0_share(s, counts, 1, 2);
    return counts;
}

/* The loss from the output tensor; training writes the output's gradient. Returns the
 * output as [B][size] (predict outfeeds it). */
static uint32_t loss_and_tail(struct lower *s)
{
    struct tpu_model_program *r = s->r;
    const uint32_t o = s->net->output;
    const uint32_t size = (uint32_t)tpu__shape_size(s->net->layers[o].out);
    const bool flat = tpu__nl_rows_of(s, o) == s->B;
    s->b.tag = TPU_NET_OP_LOSS;
    uint32_t pred = s->lw[o].y;
    if (!flat) {
        pred = tpu__b_buf(&s->b, "pred", TPU_F32, TPU_BUF_TEMP, s->B, size);
        tpu__nl_op(s, TPU_OP_RESHAPE, pred, N, s->lw[o].y, N, NULL);
    }
    if (s->mode == TPU_MODE_PREDICT) {
        s->b.tag = TPU_NET_OP_STEP;
        tpu__nl_op(s, TPU_OP_OUTFEED, N, N, pred, N, NULL);
        r->outfeed[r->n_outfeed++] = pred;
        return pred;
    }
    uint32_t loss = tpu__b_buf(&s->b, "loss", TPU_F32, TPU_BUF_TEMP, 1, 1);
    uint32_t dpred = s->train && flat ? tpu__nl_dy_buf(s, o)
                                      : tpu__b_buf(&s->b, s->train ? "dpred" : "dloss",
                                                   TPU_F32, TPU_BUF_TEMP, s->B, size);
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.alpha = s->train ? 1.0f / (float)((uint64_t)s->B * s->R) : 1.0f;
    if (s->net->loss == TPU_LOSS_SOFTMAX_XENT && !s->weighted) {
        tpu__nl_op(s, TPU_OP_SOFTMAX_XENT, loss, dpred, pred, s->labels, &at);
    } else { /* mse, or a weighted loss: an input past the builder's two */
        const bool xent = s->net->loss == TPU_LOSS_SOFTMAX_XENT;
        struct tpu_op m;
        tpu_op_init(&m, xent ? TPU_OP_SOFTMAX_XENT_W : s->weighted ? TPU_OP_MSE_W : TPU_OP_MSE);
        m.out[0] = loss;
        m.out[1] = dpred;
        m.in[0] = pred;
        m.in[1] = xent ? s->labels : s->targets;
        m.in[xent ? 2 : 3] = s->weights; /* N (unused) for mse */
        if (!xent)
            m.in[2] = s->mask;
        if (!s->weighted) /* the weights carry the scale: the weighted ops have no alpha */
            m.attrs = at;
        tpu__b_add(&s->b, &m);
    }
    if (s->labels_core0) /* only core 0 has the labels: its loss and gradient, shared */
        tpu__nl_core0_share(s, loss, 1, 1);
    if (s->train) {
        if (s->labels_core0)
            tpu__nl_core0_share(s, dpred, s->B, size);
        if (!flat) {
            tpu__nl_op(s, TPU_OP_RESHAPE, tpu__nl_dy_buf(s, o), N, dpred, N, NULL);
        }
        s->lw[o].dy_written = true;
        if (s->train_counts) /* outfed after the loss, lower_step's end */
            counts_of(s, pred);
        return pred;
    }
    uint32_t counts = counts_of(s, pred);
    s->b.tag = TPU_NET_OP_STEP;
    tpu__nl_op(s, TPU_OP_OUTFEED, N, N, loss, N, NULL);
    tpu__nl_op(s, TPU_OP_OUTFEED, N, N, counts, N, NULL);
    r->outfeed[r->n_outfeed++] = loss;
    r->outfeed[r->n_outfeed++] = counts;
    return pred;
}

static void lower_step(struct lower *s)
{
    const struct tpu_net *net = s->net;
    struct tpu_model_program *r = s->r;
    const struct tpu_shape in = net->layers[0].out;
    /* the whole input, or (cut by rows) this core's rows of it */
    const uint32_t insize = s->lw[0].hl * in.w * in.c;
    s->b.tag = TPU_NET_OP_STEP;
    uint32_t x = tpu__b_buf(&s->b, "x", TPU_F32, TPU_BUF_TEMP, s->B, insize);
    r->infeed[r->n_infeed++] = x;
    if (s->mode != TPU_MODE_PREDICT) {
        if (net->loss == TPU_LOSS_SOFTMAX_XENT) {
            s->labels = tpu__b_buf(&s->b, "labels", TPU_INT32, TPU_BUF_TEMP, s->B, 1);
            r->infeed[r->n_infeed++] = s->labels;
        } else {
            s->targets = tpu__b_buf(&s->b, "targets", TPU_F32, TPU_BUF_TEMP, s->B,
                                    (uint32_t)tpu__shape_size(net->layers[net->output].out));
            s->mask = tpu__b_buf(&s->b, "mask", TPU_INT32, TPU_BUF_TEMP, s->B, 1);
            r->infeed[r->n_infeed++] = s->targets;
            r->infeed[r->n_infeed++] = s->mask;
        }
        if (s->weighted) {
            s->weights = tpu__b_buf(&s->b, "weights", TPU_F32, TPU_BUF_TEMP, s->B, 1);
            r->infeed[r->n_infeed++] = s->weights;
        }
    }
    struct tpu_op_attrs at = tpu__nl_attrs0();
    at.var = r->var_iterations;
    tpu__nl_op(s, TPU_OP_LOOP_BEGIN, N, N, N, N, &at);
    for (uint32_t k = 0; k < r->n_infeed; k++) {
        /* dims of product 1: logical core 0 dequeues, the others get zeros */
        at = tpu__nl_attrs0();
        at.core0 = k == 0 ? s->x_core0 : s->labels_core0;
        tpu__nl_op(s, TPU_OP_INFEED, r->infeed[k], N, N, N, &at);
    }
    if (s->x_core0) /* shared: core 0's plus zeros (labels: the loss is, loss_and_tail) */
        tpu__nl_all_reduce_cores(s, x);

    /* the input as rows of pixels, if a live layer reads it so */
    s->lw[0].y = x;
    s->lw[0].rows = x;
    bool want_rows = false;
    for (uint32_t i = 1; i < net->n_layers; i++) {
        const struct tpu__net_layer *L = &net->layers[i];
        for (uint32_t k = 0; k < L->n_in; k++)
            if (L->in[k] == 0 && s->lw[i].live && !tpu__nl_reads_image(L))
                want_rows = true;
    }
    if (want_rows && in.h * in.w != 1) {
        s->b.tag = 0;
        s->lw[0].rows = tpu__nl_tmp(s, 0, "rows", tpu__nl_rows_of(s, 0), in.c);
        tpu__nl_op(s, TPU_OP_RESHAPE, s->lw[0].rows, N, x, N, NULL);
    }
    for (uint32_t i = 1; i < net->n_layers; i++)
        if (s->lw[i].live) {
            s->b.tag = i;
            tpu__nl_forward(s, i);
        }
    loss_and_tail(s);
    if (!s->train)
        return;
    for (uint32_t i = net->n_layers; i-- > 1;)
        if (s->lw[i].live && s->lw[i].need_grad) {
            s->b.tag = i;
            tpu__nl_backward(s, i);
        }
    /* gradients summed over replicas, the step, the updates */
    for (uint32_t i = 1; i < net->n_layers; i++)
        for (int k = 0; k < TPU__P_COUNT; k++)
            if (s->lw[i].live && tpu__net_has_param(&net->layers[i], k) && tpu__net_trainable(k)) {
                s->b.tag = i;
                if (s->lw[i].g1[k]) /* a core's part of the replica's sum */
                    tpu__nl_all_reduce_cores(s, s->lw[i].g[k]);
                tpu__nl_all_reduce(s, s->lw[i].g[k], TPU_REDUCE_SUM);
            }
    s->b.tag = TPU_NET_OP_STEP;
    at = tpu__nl_attrs0();
    at.var = r->var_step;
    at.imm = 1;
    tpu__nl_op(s, TPU_OP_VAR_ADD, N, N, N, N, &at);
    for (uint32_t i = 1; i < net->n_layers; i++)
        for (int k = 0; k < TPU__P_COUNT; k++)
            if (s->lw[i].live && tpu__net_has_param(&net->layers[i], k) && tpu__net_trainable(k)) {
                s->b.tag = i;
                optimizer_update(s, i, k);
            }
    uint32_t loss = N;
    tpu_program_find_buffer(s->b.p, "loss", &loss);
    s->b.tag = TPU_NET_OP_STEP;
    tpu__nl_op(s, TPU_OP_OUTFEED, N, N, loss, N, NULL);
    r->outfeed[r->n_outfeed++] = loss;
    uint32_t counts = N;
    if (s->train_counts && tpu_program_find_buffer(s->b.p, "counts", &counts) == 0) {
        tpu__nl_op(s, TPU_OP_OUTFEED, N, N, counts, N, NULL);
        r->outfeed[r->n_outfeed++] = counts;
    }
}

static int check_build(const struct tpu_net *net, const struct tpu_train_spec *spec,
                       enum tpu_mode mode, const struct tpu_build_shape *sh, struct tpu_diag *d)
{
    if (!net || !spec || !sh)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_build needs a net, a training spec and a "
                         "build shape");
    int rc = tpu__net_check_ready(net, spec, d);
    if (rc)
        return rc;
    if (mode != TPU_MODE_TRAIN && mode != TPU_MODE_EVAL && mode != TPU_MODE_PREDICT)
        return tpu__fail(d, TPU_EINVAL, "mode %d is not train, eval or predict", (int)mode);
    const uint32_t B = sh->batch_per_replica, G = sh->global_batch;
    if (B < 1 || G < B)
        return tpu__fail(d, TPU_EINVAL, "net '%s': batch_per_replica %u and global batch %u: "
                         "each replica needs at least one example and the global batch is at "
                         "least the per-replica one", net->name, B, G);
    if (sh->n_replicas < 1 || (uint64_t)B * sh->n_replicas > UINT32_MAX)
        return tpu__fail(d, TPU_EINVAL, "net '%s': %u replicas of %u examples; use at least one "
                         "replica and fewer than 2^32 examples in all", net->name,
                         sh->n_replicas, B);
    if (sh->cores_per_replica < 1 || sh->cores_per_replica > 128 ||
        (sh->cores_per_replica & (sh->cores_per_replica - 1)))
        return tpu__fail(d, TPU_EINVAL, "net '%s': cores_per_replica %u must be a power of two "
                         "from 1 to 128", net->name, sh->cores_per_replica);
    if (sh->n_dims > 2)
        return tpu__fail(d, TPU_EINVAL, "net '%s': %u input partition dims; give at most 2 "
                         "(the features, then the labels)", net->name, sh->n_dims);
    uint64_t params = 0;
    for (uint32_t i = 0; i < net->n_layers; i++) {
        const struct tpu__net_layer *L = &net->layers[i];
        uint64_t rows = (uint64_t)B * L->out.h * L->out.w;
        uint64_t k = (uint64_t)L->desc.kh * L->desc.kw * L->in_shape.c;
        if (rows > UINT32_MAX || (uint64_t)B * tpu__shape_size(L->out) > UINT32_MAX ||
            (L->desc.kind == TPU_LAYER_CONV2D && k > UINT32_MAX))
            return tpu__fail(d, TPU_ERANGE, "net '%s': layer '%s' with %u examples per replica "
                             "makes a buffer of more than 2^32 rows or elements; use a smaller "
                             "batch", net->name, L->desc.name, B);
        const unsigned state = mode != TPU_MODE_TRAIN ? 0
                               : spec->optimizer == TPU_OPT_SGD_MOMENTUM ? 1 : 2;
        for (int p = 0; p < TPU__P_COUNT; p++)
            params += tpu__net_has_param(L, p) ? 1 + (tpu__net_trainable(p) ? state : 0) : 0;
    }
    if (params > TPU_MODEL_MAX_PARAMS)
        return tpu__fail(d, TPU_ERANGE, "net '%s' has %llu param tensors with their "
                         "optimizer state, more than a runtime model holds (%d); use fewer "
                         "layers (or SGD, one state tensor per param)", net->name,
                         (unsigned long long)params, TPU_MODEL_MAX_PARAMS);
    return 0;
}

int tpu_net_build(const struct tpu_net *net, const struct tpu_train_spec *spec,
                  enum tpu_mode mode, const struct tpu_build_shape *shape,
                  struct tpu_model_program *out, uint32_t **op_layer, struct tpu_diag *d)
{
    if (op_layer)
        *op_layer = NULL;
    int rc = check_build(net, spec, mode, shape, d);
    if (rc)
        return rc;
    struct lower s;
    memset(&s, 0, sizeof s);
    s.b.d = d;
    s.b.tagging = op_layer != NULL;
    s.b.tag = TPU_NET_OP_STEP;
    s.net = net;
    s.spec = spec;
    s.mode = mode;
    s.train = mode == TPU_MODE_TRAIN;
    s.B = shape->batch_per_replica;
    s.G = shape->global_batch;
    s.R = shape->n_replicas;
    s.P = shape->cores_per_replica;
    s.labels = s.targets = s.mask = s.weights = N;
    s.weighted = s.train && shape->weighted;
    s.train_counts = s.train && shape->train_counts;
    s.r = calloc(1, sizeof *s.r);
    s.lw = calloc(net->n_layers, sizeof *s.lw);
    if (!s.r || !s.lw) {
        free(s.r);
        free(s.lw);
        return tpu__fail(d, TPU_ENOMEM, "out of memory lowering net '%s'", net->name);
    }
    for (uint32_t i = 0; i < net->n_layers; i++) {
        struct lw *w = &s.lw[i];
        w->y = w->rows = w->dy = w->mask = w->xhat = w->inv = N;
        for (int k = 0; k < TPU__P_COUNT; k++)
            w->p[k] = w->g[k] = w->st[k][0] = w->st[k][1] = N;
    }
    mark(&s);
    rc = tpu__nl_plan(&s, shape, d); /* refuses what it cannot partition, before any op */
    if (rc) {
        free(s.r);
        free(s.lw);
        return rc;
    }
    static const char *const mode_name[] = {"train", "eval", "predict"};
    char pname[64];
    snprintf(pname, sizeof pname, "%s_%s", net->name, mode_name[mode]);
    if (!tpu__b_start(&s.b, pname, &s.r->var_iterations, &s.r->var_step)) {
        if (s.train && spec->schedule == TPU_SCHEDULE_HOST) /* the rate the host sets */
            s.b.rc = tpu_program_add_var(s.b.p, "learning_rate", &s.var_lr, d);
        declare_params(&s);
        lower_step(&s);
        s.b.tag = TPU_NET_OP_STEP;
        rc = tpu__b_finish(&s.b, s.r->var_iterations, &s.r->prog);
    } else {
        rc = s.b.rc;
    }
    if (!rc) {
        *out = *s.r;
        if (op_layer) {
            *op_layer = s.b.tags;
            s.b.tags = NULL;
        }
    }
    free(s.b.tags);
    free(s.r);
    free(s.lw);
    return rc;
}
