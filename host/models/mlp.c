/* The MLP lowered to device programs (include/tpusim/models.h).
 *
 * Training step, per replica, for layers l = 0 .. L-1 (h_{-1} = x):
 *     a_l = h_{l-1} W_l            matmul
 *     z_l = a_l + b_l              add, bias broadcast over rows
 *     h_l = relu(z_l)              (not for the last layer: its z is the logits)
 *     loss, g = softmax_xent(z_{L-1}, labels, alpha = 1/global_batch)
 *   backward, l = L-1 .. 0 (g = dL/dz_l):
 *     gW_l = h_{l-1}^T g           matmul trans_a
 *     gb_l = sum over rows of g    reduce_sum axis 0
 *     dh   = g W_l^T               matmul trans_b    (not for l = 0)
 *     g    = relu_grad(dh, z_{l-1})
 *   then every gradient is all_reduce'd (sum: the 1/global_batch scale makes it the mean
 *   loss's gradient), the optimizer updates each param, `step` advances, and each replica
 *   outfeeds its own loss (its examples' loss sum / global batch; the host reports replica
 *   0's, as TPUEstimator does). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/builder.h"
#include "models/net_int.h"
#include "rng.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"
#include "util.h"

void tpu_mlp_default_spec(struct tpu_mlp_spec *s)
{
    memset(s, 0, sizeof *s);
    s->passes = 1;
    s->optimizer = TPU_OPT_SGD_MOMENTUM;
    s->learning_rate = 0.1f;
    s->momentum = 0.9f;
    s->beta1 = 0.9f;
    s->beta2 = 0.999f;
    s->epsilon = 1e-7f;
}

static int check_spec(const struct tpu_mlp_spec *s, struct tpu_diag *d)
{
    if (s->n_layers < 1 || s->n_layers > TPU_MLP_MAX_LAYERS)
        return tpu__fail(d, TPU_EINVAL, "the MLP has %u layers; use 1 to %d", s->n_layers,
                         TPU_MLP_MAX_LAYERS);
    for (uint32_t i = 0; i <= s->n_layers; i++)
        if (s->sizes[i] < 1 || s->sizes[i] > (1u << 20))
            return tpu__fail(d, TPU_EINVAL, "layer width sizes[%u] = %u is out of range; use 1 "
                             "to %u", i, s->sizes[i], 1u << 20);
    if (s->sizes[s->n_layers] < 2)
        return tpu__fail(d, TPU_EINVAL, "the last layer has %u output; a classifier needs at "
                         "least 2 classes", s->sizes[s->n_layers]);
    if (s->batch_per_replica < 1)
        return tpu__fail(d, TPU_EINVAL, "batch_per_replica is 0; each replica needs at least "
                         "one example per step");
    if (s->global_batch < s->batch_per_replica)
        return tpu__fail(d, TPU_EINVAL, "global_batch %u is smaller than batch_per_replica %u",
                         s->global_batch, s->batch_per_replica);
    if (s->passes != 1 && s->passes != 3 && s->passes != 6)
        return tpu__fail(d, TPU_EINVAL, "passes %u: use 1 (bf16), 3 or 6", s->passes);
    if (!(s->learning_rate > 0) || s->learning_rate > 1e3f)
        return tpu__fail(d, TPU_EINVAL, "learning rate %g must be above 0 (and at most 1000)",
                         (double)s->learning_rate);
    if (s->optimizer == TPU_OPT_SGD_MOMENTUM && !(s->momentum >= 0 && s->momentum < 1))
        return tpu__fail(d, TPU_EINVAL, "momentum %g must be in [0, 1)", (double)s->momentum);
    if (s->optimizer == TPU_OPT_ADAM &&
        (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1) ||
         !(s->epsilon > 0)))
        return tpu__fail(d, TPU_EINVAL, "Adam needs 0 <= beta1, beta2 < 1 and epsilon > 0; got "
                         "%g, %g, %g", (double)s->beta1, (double)s->beta2, (double)s->epsilon);
    if (!(s->l2 >= 0))
        return tpu__fail(d, TPU_EINVAL, "l2 %g must be >= 0", (double)s->l2);
    return 0;
}

/* The shared builder (builder.h) under short names. */
#define builder tpu__builder
#define buf tpu__b_buf
#define bufi tpu__b_bufi
#define op tpu__b_op
#define N TPU_NO_BUF

/* Opens program `name` with its loop variables (in r, which starts empty). A nonzero
 * return (b->rc) means nothing is left to free. */
static int start(struct builder *b, const char *name, struct tpu_mlp_program *r)
{
    memset(r, 0, sizeof *r);
    return tpu__b_start(b, name, &r->var_iterations, &r->var_step);
}

/* Closes the loop and hands the program over: *out owns it; on an error nothing is left. */
static int finish(struct builder *b, struct tpu_mlp_program *r, struct tpu_mlp_program *out)
{
    if (tpu__b_finish(b, r->var_iterations, &r->prog))
        return b->rc;
    *out = *r;
    return 0;
}

/* The end of the evaluation and prediction steps, from the logits [B][C]: predict outfeeds
 * them; evaluate outfeeds the loss as a per-example sum (alpha 1), then the counts. */
static void build_tail(struct builder *b, enum tpu_mlp_kind kind, uint32_t logits, uint32_t B,
                       uint32_t C, struct tpu_mlp_program *r)
{
    if (kind == TPU_MLP_PREDICT) {
        op(b, TPU_OP_OUTFEED, N, N, N, logits, N, NULL);
        r->buf_out = logits;
        return;
    }
    uint32_t loss = buf(b, "loss", TPU_F32, TPU_BUF_TEMP, 1, 1);
    uint32_t dl = buf(b, "dlogits", TPU_F32, TPU_BUF_TEMP, B, C);
    uint32_t counts = buf(b, "counts", TPU_F32, TPU_BUF_TEMP, 1, 2);
    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    at.alpha = 1.0f;
    op(b, TPU_OP_SOFTMAX_XENT, loss, dl, N, logits, r->buf_labels, &at);
    op(b, TPU_OP_CLASSIFY_COUNT, counts, N, N, logits, r->buf_labels, NULL);
    op(b, TPU_OP_OUTFEED, N, N, N, loss, N, NULL);
    op(b, TPU_OP_OUTFEED, N, N, N, counts, N, NULL);
    r->buf_out = counts;
}

/* Buffer ids of the fp32 MLP program, per layer l. */
struct mlp_bufs {
    uint32_t w[TPU_MLP_MAX_LAYERS], bias[TPU_MLP_MAX_LAYERS]; /* params */
    uint32_t st[2][2 * TPU_MLP_MAX_LAYERS]; /* training: optimizer state k of w_l at [k][2l],
                                               of b_l at [k][2l + 1] */
    uint32_t a[TPU_MLP_MAX_LAYERS], z[TPU_MLP_MAX_LAYERS], h[TPU_MLP_MAX_LAYERS];
    /* training: dL/dz_l, dL/dh_l, and the gradients of w_l and b_l */
    uint32_t g[TPU_MLP_MAX_LAYERS], dh[TPU_MLP_MAX_LAYERS], gw[TPU_MLP_MAX_LAYERS],
        gb[TPU_MLP_MAX_LAYERS];
};

/* The params (weights and biases, then for training the optimizer state), listed in
 * r->params in that order. */
static void mlp_params(struct builder *b, const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                       struct tpu_mlp_program *r, struct mlp_bufs *m)
{
    const uint32_t L = s->n_layers;
    for (uint32_t l = 0; l < L; l++) {
        m->w[l] = bufi(b, "w", (int)l, TPU_BUF_PARAM, s->sizes[l], s->sizes[l + 1]);
        m->bias[l] = bufi(b, "b", (int)l, TPU_BUF_PARAM, 1, s->sizes[l + 1]);
        r->params[r->n_params++] = m->w[l];
        r->params[r->n_params++] = m->bias[l];
    }
    if (kind != TPU_MLP_TRAIN)
        return;
    for (uint32_t l = 0; l < L; l++) {
        const char *sfx[2] = {s->optimizer == TPU_OPT_ADAM ? "m" : "vel", "v"};
        unsigned n_state = s->optimizer == TPU_OPT_ADAM ? 2 : 1;
        for (unsigned k = 0; k < n_state; k++) {
            char name[48];
            snprintf(name, sizeof name, "w%u.%s", l, sfx[k]);
            m->st[k][2 * l] = buf(b, name, TPU_F32, TPU_BUF_PARAM, s->sizes[l], s->sizes[l + 1]);
            snprintf(name, sizeof name, "b%u.%s", l, sfx[k]);
            m->st[k][2 * l + 1] = buf(b, name, TPU_F32, TPU_BUF_PARAM, 1, s->sizes[l + 1]);
            r->params[r->n_params++] = m->st[k][2 * l];
            r->params[r->n_params++] = m->st[k][2 * l + 1];
        }
    }
}

/* The step's input and activations, the loop's start, its infeed and the forward pass.
 * Returns the logits' buffer. */
static uint32_t mlp_forward(struct builder *b, const struct tpu_mlp_spec *s,
                            enum tpu_mlp_kind kind, struct tpu_mlp_program *r, struct mlp_bufs *m)
{
    const uint32_t L = s->n_layers, B = s->batch_per_replica;
    r->buf_x = buf(b, "x", TPU_F32, TPU_BUF_TEMP, B, s->sizes[0]);
    r->buf_labels = kind == TPU_MLP_PREDICT ? N : buf(b, "labels", TPU_INT32, TPU_BUF_TEMP, B, 1);
    for (uint32_t l = 0; l < L; l++) {
        m->a[l] = bufi(b, "a", (int)l, TPU_BUF_TEMP, B, s->sizes[l + 1]);
        m->z[l] = bufi(b, "z", (int)l, TPU_BUF_TEMP, B, s->sizes[l + 1]);
        m->h[l] = l + 1 < L ? bufi(b, "h", (int)l, TPU_BUF_TEMP, B, s->sizes[l + 1]) : N;
    }

    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    at.var = r->var_iterations;
    op(b, TPU_OP_LOOP_BEGIN, N, N, N, N, N, &at);
    op(b, TPU_OP_INFEED, r->buf_x, N, N, N, N, NULL);
    if (kind != TPU_MLP_PREDICT)
        op(b, TPU_OP_INFEED, r->buf_labels, N, N, N, N, NULL);
    for (uint32_t l = 0; l < L; l++) {
        memset(&at, 0, sizeof at);
        at.passes = (uint8_t)s->passes;
        op(b, TPU_OP_MATMUL, m->a[l], N, N, l ? m->h[l - 1] : r->buf_x, m->w[l], &at);
        op(b, TPU_OP_ADD, m->z[l], N, N, m->a[l], m->bias[l], NULL);
        if (l + 1 < L)
            op(b, TPU_OP_RELU, m->h[l], N, N, m->z[l], N, NULL);
    }
    return m->z[L - 1];
}

/* Training: the loss and the backward pass from the logits, then the gradients' all-reduce
 * across replicas. Returns the loss's buffer. */
static uint32_t mlp_backward(struct builder *b, const struct tpu_mlp_spec *s,
                             struct tpu_mlp_program *r, struct mlp_bufs *m, uint32_t logits)
{
    const uint32_t L = s->n_layers, B = s->batch_per_replica;
    uint32_t loss = buf(b, "loss", TPU_F32, TPU_BUF_TEMP, 1, 1);
    for (uint32_t l = 0; l < L; l++) {
        m->g[l] = bufi(b, "dz", (int)l, TPU_BUF_TEMP, B, s->sizes[l + 1]);
        m->dh[l] = l + 1 < L ? bufi(b, "dh", (int)l, TPU_BUF_TEMP, B, s->sizes[l + 1]) : N;
        m->gw[l] = bufi(b, "gw", (int)l, TPU_BUF_TEMP, s->sizes[l], s->sizes[l + 1]);
        m->gb[l] = bufi(b, "gb", (int)l, TPU_BUF_TEMP, 1, s->sizes[l + 1]);
    }
    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    at.alpha = 1.0f / (float)s->global_batch;
    op(b, TPU_OP_SOFTMAX_XENT, loss, m->g[L - 1], N, logits, r->buf_labels, &at);
    for (uint32_t li = L; li-- > 0;) {
        memset(&at, 0, sizeof at);
        at.passes = (uint8_t)s->passes;
        at.trans_a = true;
        op(b, TPU_OP_MATMUL, m->gw[li], N, N, li ? m->h[li - 1] : r->buf_x, m->g[li], &at);
        memset(&at, 0, sizeof at);
        at.axis = 0;
        op(b, TPU_OP_REDUCE_SUM, m->gb[li], N, N, m->g[li], N, &at);
        if (li > 0) {
            memset(&at, 0, sizeof at);
            at.passes = (uint8_t)s->passes;
            at.trans_b = true;
            op(b, TPU_OP_MATMUL, m->dh[li - 1], N, N, m->g[li], m->w[li], &at);
            op(b, TPU_OP_RELU_GRAD, m->g[li - 1], N, N, m->dh[li - 1], m->z[li - 1], NULL);
        }
    }
    memset(&at, 0, sizeof at);
    at.reduce = TPU_REDUCE_SUM;
    for (uint32_t l = 0; l < L; l++) {
        op(b, TPU_OP_ALL_REDUCE, m->gw[l], N, N, m->gw[l], N, &at);
        op(b, TPU_OP_ALL_REDUCE, m->gb[l], N, N, m->gb[l], N, &at);
    }
    return loss;
}

/* Training: the step counter, then the optimizer's update of every param. */
static void mlp_update(struct builder *b, const struct tpu_mlp_spec *s,
                       const struct tpu_mlp_program *r, const struct mlp_bufs *m)
{
    /* the step counter first: Adam's bias correction counts from 1 */
    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    at.var = r->var_step;
    at.imm = 1;
    op(b, TPU_OP_VAR_ADD, N, N, N, N, N, &at);
    for (uint32_t l = 0; l < s->n_layers; l++) {
        for (int k = 0; k < 2; k++) {
            uint32_t param = k ? m->bias[l] : m->w[l], grad = k ? m->gb[l] : m->gw[l];
            memset(&at, 0, sizeof at);
            at.alpha = s->learning_rate;
            at.gamma = k ? 0.0f : s->l2; /* no decay on biases */
            if (s->optimizer == TPU_OPT_ADAM) {
                at.beta = s->beta1;
                at.delta = s->beta2;
                at.eps = s->epsilon;
                at.var = r->var_step;
                op(b, TPU_OP_ADAM, param, m->st[0][2 * l + k], m->st[1][2 * l + k], grad, N,
                   &at);
            } else {
                at.beta = s->momentum;
                op(b, TPU_OP_SGD_MOMENTUM, param, m->st[0][2 * l + k], N, grad, N, &at);
            }
        }
    }
}

int tpu_mlp_build(const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                  struct tpu_mlp_program *out, struct tpu_diag *d)
{
    int rc = check_spec(s, d);
    if (rc)
        return rc;
    const char *names[] = {"mlp_train", "mlp_eval", "mlp_predict"};
    struct tpu_mlp_program r;
    struct builder b = {.d = d};
    if (start(&b, names[kind], &r))
        return b.rc;
    struct mlp_bufs m;
    mlp_params(&b, s, kind, &r, &m);
    const uint32_t logits = mlp_forward(&b, s, kind, &r, &m);
    if (kind != TPU_MLP_TRAIN) {
        build_tail(&b, kind, logits, s->batch_per_replica, s->sizes[s->n_layers], &r);
    } else {
        uint32_t loss = mlp_backward(&b, s, &r, &m, logits);
        mlp_update(&b, s, &r, &m);
        op(&b, TPU_OP_OUTFEED, N, N, N, loss, N, NULL);
        r.buf_out = loss;
    }
    return finish(&b, &r, out);
}

/* ---- the int8 inference programs ----------------------------------------------------------
 *
 * Per replica, for layers l = 0 .. L-1 (h_{-1} = x), with f32 params w<l>.int8 (the int8
 * weights, as exact f32 integers), w<l>.dequant [1][out] and b<l> [1][out]:
 *   before the loop, once per launch:
 *     wq_l  = quantize w<l>.int8 alpha=1          int8 [in][out] (exact: already integers)
 *   the loop body:
 *     xq_l  = quantize h_{l-1} alpha=in_alpha[l]  int8 [B][in]
 *     acc_l = matmul xq_l, wq_l                   int32 [B][out] on the matrix unit
 *     z_l   = convert acc_l                       f32 (exact while |acc| < 2^24)
 *     z_l   = z_l * w<l>.dequant                  broadcast over rows
 *     z_l   = z_l + b<l>
 *     h_l   = relu(z_l)                           (not for the last layer: z is the logits)
 *   then the same evaluation or prediction tail as the fp32 programs. */

static int check_int8_args(const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                           const float *in_alpha, struct tpu_diag *d)
{
    if (kind == TPU_MLP_TRAIN)
        return tpu__fail(d, TPU_EUNSUPPORTED, "the int8 MLP is an inference model (evaluate "
                         "and predict); train the fp32 model and quantize its checkpoint");
    if (!in_alpha)
        return tpu__fail(d, TPU_EINVAL, "the int8 MLP needs one activation scale per layer "
                         "(in_alpha)");
    for (uint32_t l = 0; l < s->n_layers; l++)
        if (!(in_alpha[l] > 0) || isinf(in_alpha[l]))
            return tpu__fail(d, TPU_EINVAL, "in_alpha[%u] = %g: the reciprocal of layer %u's "
                             "input scale must be finite and above 0", l,
                             (double)in_alpha[l], l);
    return 0;
}

int tpu_mlp_build_int8(const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                       const float *in_alpha, struct tpu_mlp_program *out, struct tpu_diag *d)
{
    int rc = check_spec(s, d);
    if (!rc)
        rc = check_int8_args(s, kind, in_alpha, d);
    if (rc)
        return rc;
    struct tpu_mlp_program r;
    struct builder b = {.d = d};
    if (start(&b, kind == TPU_MLP_EVAL ? "mlp_int8_eval" : "mlp_int8_predict", &r))
        return b.rc;
    const uint32_t L = s->n_layers, B = s->batch_per_replica, C = s->sizes[L];

    uint32_t w[TPU_MLP_MAX_LAYERS], dq[TPU_MLP_MAX_LAYERS], bias[TPU_MLP_MAX_LAYERS];
    uint32_t wq[TPU_MLP_MAX_LAYERS], xq[TPU_MLP_MAX_LAYERS], acc[TPU_MLP_MAX_LAYERS];
    uint32_t z[TPU_MLP_MAX_LAYERS], h[TPU_MLP_MAX_LAYERS];
    char name[48];
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t in = s->sizes[l], o = s->sizes[l + 1];
        snprintf(name, sizeof name, "w%u.int8", l);
        w[l] = buf(&b, name, TPU_F32, TPU_BUF_PARAM, in, o);
        snprintf(name, sizeof name, "w%u.dequant", l);
        dq[l] = buf(&b, name, TPU_F32, TPU_BUF_PARAM, 1, o);
        bias[l] = bufi(&b, "b", (int)l, TPU_BUF_PARAM, 1, o);
        r.params[r.n_params++] = w[l];
        r.params[r.n_params++] = dq[l];
        r.params[r.n_params++] = bias[l];
    }
    r.buf_x = buf(&b, "x", TPU_F32, TPU_BUF_TEMP, B, s->sizes[0]);
    r.buf_labels = kind == TPU_MLP_PREDICT ? N : buf(&b, "labels", TPU_INT32, TPU_BUF_TEMP, B, 1);
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t in = s->sizes[l], o = s->sizes[l + 1];
        snprintf(name, sizeof name, "wq%u", l);
        wq[l] = buf(&b, name, TPU_INT8, TPU_BUF_TEMP, in, o);
        snprintf(name, sizeof name, "xq%u", l);
        xq[l] = buf(&b, name, TPU_INT8, TPU_BUF_TEMP, B, in);
        snprintf(name, sizeof name, "acc%u", l);
        acc[l] = buf(&b, name, TPU_INT32, TPU_BUF_TEMP, B, o);
        z[l] = bufi(&b, "z", (int)l, TPU_BUF_TEMP, B, o);
        h[l] = l + 1 < L ? bufi(&b, "h", (int)l, TPU_BUF_TEMP, B, o) : N;
    }

    struct tpu_op_attrs at;
    /* the weights go to int8 once per launch, as a TPU loads its weight memory */
    for (uint32_t l = 0; l < L; l++) {
        memset(&at, 0, sizeof at);
        at.alpha = 1.0f;
        op(&b, TPU_OP_QUANTIZE, wq[l], N, N, w[l], N, &at);
    }
    memset(&at, 0, sizeof at);
    at.var = r.var_iterations;
    op(&b, TPU_OP_LOOP_BEGIN, N, N, N, N, N, &at);
    op(&b, TPU_OP_INFEED, r.buf_x, N, N, N, N, NULL);
    if (kind != TPU_MLP_PREDICT)
        op(&b, TPU_OP_INFEED, r.buf_labels, N, N, N, N, NULL);
    for (uint32_t l = 0; l < L; l++) {
        memset(&at, 0, sizeof at);
        at.alpha = in_alpha[l];
        op(&b, TPU_OP_QUANTIZE, xq[l], N, N, l ? h[l - 1] : r.buf_x, N, &at);
        op(&b, TPU_OP_MATMUL, acc[l], N, N, xq[l], wq[l], NULL);
        op(&b, TPU_OP_CONVERT, z[l], N, N, acc[l], N, NULL);
        op(&b, TPU_OP_MUL, z[l], N, N, z[l], dq[l], NULL);
        op(&b, TPU_OP_ADD, z[l], N, N, z[l], bias[l], NULL);
        if (l + 1 < L)
            op(&b, TPU_OP_RELU, h[l], N, N, z[l], N, NULL);
    }
    build_tail(&b, kind, z[L - 1], B, C, &r);
    return finish(&b, &r, out);
}

void tpu_mlp_program_free(struct tpu_mlp_program *p)
{
    if (p)
        tpu_program_destroy(&p->prog);
}

/* ---- the MLP as a runtime model ------------------------------------------------------------ */

void tpu_mlp_model_program(struct tpu_mlp_program *mp, int mode, struct tpu_model_program *out)
{
    memset(out, 0, sizeof *out);
    out->prog = mp->prog;
    mp->prog = NULL;
    out->var_iterations = mp->var_iterations;
    out->var_step = mp->var_step;
    out->infeed[out->n_infeed++] = mp->buf_x;
    if (mp->buf_labels != TPU_NO_BUF)
        out->infeed[out->n_infeed++] = mp->buf_labels;
    if (mode == TPU_MODE_EVAL) {
        uint32_t loss = TPU_NO_BUF, counts = TPU_NO_BUF;
        tpu_program_find_buffer(out->prog, "loss", &loss);
        tpu_program_find_buffer(out->prog, "counts", &counts);
        out->outfeed[out->n_outfeed++] = loss;
        out->outfeed[out->n_outfeed++] = counts;
    } else {
        out->outfeed[out->n_outfeed++] = mp->buf_out;
    }
    out->n_params = mp->n_params;
    memcpy(out->params, mp->params, mp->n_params * sizeof *mp->params);
}

int tpu__mlp_check_shape(const struct tpu_build_shape *shape, const char *model,
                         struct tpu_diag *d)
{
    uint64_t product[2] = {1, 1};
    for (uint32_t t = 0; t < shape->n_dims && t < 2; t++)
        for (uint32_t k = 0; k < shape->dims[t].rank && k < TPU_PARTITION_MAX_RANK; k++)
            product[t] *= shape->dims[t].dims[k];
    if (shape->n_replicas < 1 || (uint64_t)shape->batch_per_replica * shape->n_replicas >
                                     UINT32_MAX)
        return tpu__fail(d, TPU_EINVAL, "the %s: %u replicas of %u examples; use at least one "
                         "replica and fewer than 2^32 examples in all", model,
                         shape->n_replicas, shape->batch_per_replica);
    for (uint32_t t = 0; t < shape->n_dims && t < 2; t++)
        /* on one core per replica, a product of 1 (core 0's) is the whole tensor */
        if (shape->dims[t].rank && (shape->cores_per_replica > 1 || product[t] != 1)) {
            char text[96];
            size_t n = 0;
            for (uint32_t k = 0; k < shape->dims[t].rank && k < TPU_PARTITION_MAX_RANK; k++)
                n += (size_t)snprintf(text + n, n < sizeof text ? sizeof text - n : 0, "%s%u",
                                      k ? ", " : "", shape->dims[t].dims[k]);
            return tpu__fail(d, TPU_EUNSUPPORTED, "the %s takes no input_partition_dims, but "
                             "the %s have [%s]; give None for them (every core of a replica "
                             "then gets the whole tensor), or train a layer graph (a model "
                             "file, or --layers with --cores-per-replica > 1), whose lowering "
                             "partitions", model, t ? "labels" : "features", text);
        }
    return 0;
}

/* With several cores per replica, or with weighted training or training counts (struct
 * tpu_build_shape's weighted, train_counts): the MLP as a layer graph of dense layers (the
 * same math),
 * whose lowering splits consecutive dense layers over the replica's cores (net_lower_part.c)
 * and takes the input partition dims a net takes. Its params keep the MLP's names (w<l>, b<l>
 * and their optimizer state), so init_param and checkpoints are the MLP's whatever the cores
 * per replica. */
static int mlp_build_net(const struct tpu_mlp_spec *spec, enum tpu_mode mode,
                         const struct tpu_build_shape *shape, struct tpu_model_program *out,
                         struct tpu_diag *d)
{
    struct tpu_mlp_spec copy = *spec;
    const struct tpu_mlp_spec *s = &copy;
    copy.batch_per_replica = shape->batch_per_replica;
    copy.global_batch = shape->batch_per_replica * shape->n_replicas;
    int rc = check_spec(s, d);
    struct tpu_net *net = NULL;
    if (!rc)
        rc = tpu_net_create("mlp", 1, 1, s->sizes[0], &net, d);
    uint32_t t = 0;
    for (uint32_t l = 0; !rc && l < s->n_layers; l++)
        rc = tpu_net_dense(net, NULL, t, s->sizes[l + 1],
                           l + 1 < s->n_layers ? TPU_ACT_RELU : TPU_ACT_NONE, &t, d);
    if (!rc)
        rc = tpu_net_set_output(net, t, TPU_LOSS_SOFTMAX_XENT, d);
    if (!rc) {
        net->mlp_names = true;
        struct tpu_train_spec ts;
        tpu_train_spec_default(&ts);
        ts.passes = s->passes;
        ts.optimizer = s->optimizer;
        ts.learning_rate = s->learning_rate;
        ts.momentum = s->momentum;
        ts.beta1 = s->beta1;
        ts.beta2 = s->beta2;
        ts.epsilon = s->epsilon;
        ts.l2 = s->l2;
        rc = tpu_net_build(net, &ts, mode, shape, out, NULL, d);
    }
    tpu_net_destroy(&net);
    return rc;
}

static int mlp_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                     struct tpu_model_program *out, struct tpu_diag *d)
{
    /* several cores per replica, or the training flags of the Keras-style runtime (row
     * weights, counts) that only the layer graph's lowering builds */
    const bool flags = mode == TPU_MODE_TRAIN && (shape->weighted || shape->train_counts);
    if (shape->cores_per_replica > 1 || flags)
        return mlp_build_net(ctx, mode, shape, out, d);
    int rc = tpu__mlp_check_shape(shape, "MLP model", d);
    if (rc)
        return rc;
    struct tpu_mlp_spec s = *(const struct tpu_mlp_spec *)ctx;
    s.batch_per_replica = shape->batch_per_replica;
    /* the loss's scale is 1 / (B * R) (runtime.h): the global batch except in BROADCAST */
    s.global_batch = shape->batch_per_replica * shape->n_replicas;
    static const enum tpu_mlp_kind kinds[] = {TPU_MLP_TRAIN, TPU_MLP_EVAL, TPU_MLP_PREDICT};
    struct tpu_mlp_program mp;
    rc = tpu_mlp_build(&s, kinds[mode], &mp, d);
    if (rc)
        return rc;
    tpu_mlp_model_program(&mp, mode, out);
    return 0;
}

/* Glorot (Xavier) uniform for weights "w<l>": U(-a, a), a = sqrt(6 / (fan_in + fan_out));
 * everything else (biases, optimizer state) starts at zero. */
static void mlp_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                     uint64_t seed)
{
    (void)ctx;
    size_t n = (size_t)rows * cols;
    bool weight = name[0] == 'w' && !strchr(name, '.');
    if (!weight) {
        memset(data, 0, n * sizeof *data);
        return;
    }
    struct tpu__rng r;
    tpu__rng_seed(&r, seed * 0x9E3779B97F4A7C15ull + 1);
    float a = sqrtf(6.0f / (float)(rows + cols));
    for (size_t i = 0; i < n; i++)
        data[i] = (tpu__rng_uniform(&r) * 2.0f - 1.0f) * a;
}

void tpu_mlp_model(struct tpu_model *m, struct tpu_mlp_spec *spec)
{
    memset(m, 0, sizeof *m);
    m->ctx = spec;
    m->build = mlp_build;
    m->init_param = mlp_init;
}
