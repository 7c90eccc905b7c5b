/* Layer graphs on the chip against the naive double-precision reference (net_ref.c): small
 * nets lowered by tpu_net_model and run through the estimator on the `tiny` and `tpu-v3`
 * chips, with every matmul in 6 bf16 passes (fp32 accuracy).
 *   - predict: the program's output rows against the reference's forward in inference mode
 *     (batch norm with the moving statistics, dropout the identity), a last batch padded;
 *     evaluate: its mean loss over the same examples, and its accuracy (none for MSE);
 *   - train: one step of SGD with learning rate 1, momentum 0 and no L2, so each trainable
 *     param moves by exactly its gradient (param_new = param - grad): the change read back
 *     with tpu_estimator_read_param against the reference's gradient over the global batch;
 *     the loss the outfeed reports (replica 0's mean) against the reference's; batch norm's
 *     moving statistics against the reference's update (per replica: the mean over the
 *     replicas of their batch statistics), the same on every replica;
 *   - every layer kind: dense (also per pixel), conv2d (valid and same, strides, with and
 *     without bias, fused relu), max, average and global-average pools, flatten, reshape,
 *     relu, dropout (the mask from tpu_dropout_mask_value, as the chip draws it), batch norm
 *     per replica and cross-replica over 2 replicas (the reference's statistics over each
 *     replica's examples or over the global batch), a residual add; softmax cross-entropy and
 *     MSE.
 *
 * Tolerance. The chip computes in fp32 (the matmuls' 6 bf16 passes give products accurate to
 * fp32, the sums rounded in fp32), so each value carries a rounding error of about u = 2^-24
 * per addition of a sum: at most ~L u times the sum of the magnitudes it adds, with L the
 * longest sum in the net (a dot product's length, or the B*h*w terms of a kernel's gradient
 * or of batch-norm's statistics; computed per net below as `sum_len`). The check allows
 * |chip - ref| <= 4 u (L * scale + |param|), with `scale` the largest magnitude of the
 * compared tensor in the reference (a stand-in for the magnitudes summed, which are of that
 * order in these small nets) and |param| for the rounding of param - grad when the gradient
 * is read as a param change (the largest error seen in these runs is 0.4 of that unit). A
 * wrong term, a missed padding or a wrong statistic moves values by O(scale), thousands of
 * times the tolerance; a mask drawn with another step or index, or batch statistics over the
 * wrong examples, fail the check. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_build.h"
#include "net_ref.h"
#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"
#include "xorshift.h"

#define U32 (1.0 / 16777216.0) /* 2^-24, fp32's unit roundoff */
#define TOL_ULPS 4.0

static double uniform(struct rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(r) >> 11) / 9007199254740992.0;
}

/* ---- the model: tpu_net_model's, with the reference's param values ------------------------ */

/* Kernels keep the model's Glorot-uniform values; biases, beta and moving means are drawn in
 * [-0.5, 0.5], gamma in [0.5, 1.5] and moving variances in [0.5, 2] (not the defaults 0 and
 * 1, so that a param read in the wrong place shows). The values are fp32 and the reference
 * gets them exactly. */
struct wrapped {
    struct tpu_model inner;
    struct net_ref *ref;
};

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h | 1;
}

static void wrapped_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                         uint64_t seed)
{
    struct wrapped *w = ctx;
    w->inner.init_param(w->inner.ctx, name, rows, cols, data, seed);
    size_t n;
    double *v = net_ref_param(w->ref, name, &n);
    if (!v)
        return; /* optimizer state */
    assert_int_equal(n, (size_t)rows * cols);
    struct rng g = {name_hash(name)};
    bool kernel = strstr(name, ".kernel") != NULL;
    bool gamma = strstr(name, ".gamma") != NULL, var = strstr(name, ".moving_variance") != NULL;
    for (size_t k = 0; k < n; k++) {
        if (!kernel)
            data[k] = (float)(gamma ? uniform(&g, 0.5, 1.5)
                              : var ? uniform(&g, 0.5, 2.0)
                                    : uniform(&g, -0.5, 0.5));
        v[k] = (double)data[k];
    }
}

static int wrapped_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                         struct tpu_model_program *out, struct tpu_diag *d)
{
    struct wrapped *w = ctx;
    return w->inner.build(w->inner.ctx, mode, shape, out, d);
}

/* ---- the input: one fixed global batch, in order ------------------------------------------- */

struct feed {
    uint32_t n;          /* examples */
    uint32_t features;   /* h*w*c of the input */
    uint32_t out_size;   /* h*w*c of the output (MSE targets) */
    enum tpu_loss loss;
    float *x;            /* [n][features] */
    int32_t *labels;     /* [n] */
    float *targets;      /* [n][out_size] */
    uint64_t pos;        /* predict: the next example */
};

/* train: the first `batch` examples at every step; predict: one ordered pass */
static int feed_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                     void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    (void)shard;
    (void)d;
    struct feed *f = ctx;
    uint64_t first = 0;
    if (mode != TPU_MODE_TRAIN) {
        if (f->pos >= f->n)
            return 0;
        first = f->pos;
    }
    uint32_t rows = (uint32_t)(f->n - first < batch ? f->n - first : batch);
    memcpy(tensors[0], f->x + first * f->features, (size_t)rows * f->features * sizeof(float));
    if (mode != TPU_MODE_PREDICT) {
        if (f->loss == TPU_LOSS_SOFTMAX_XENT) {
            memcpy(tensors[1], f->labels + first, rows * sizeof(int32_t));
        } else {
            memcpy(tensors[1], f->targets + first * f->out_size,
                   (size_t)rows * f->out_size * sizeof(float));
            memset(tensors[2], 0, rows * sizeof(int32_t)); /* 0: a real row */
        }
    }
    if (mode != TPU_MODE_TRAIN)
        f->pos += rows;
    *n_real = rows;
    return 1;
}

static int feed_start(void *ctx, enum tpu_mode mode, uint64_t step, uint32_t global,
                      struct tpu_diag *d)
{
    (void)mode;
    (void)step;
    (void)global;
    (void)d;
    ((struct feed *)ctx)->pos = 0;
    return 0;
}

/* ---- dropout: the chip's mask --------------------------------------------------------------- */

/* The seed and the step each dropout layer's mask is drawn with, read from the lowered train
 * program (its dropout_mask op: imm the seed, var the step variable, which the step's var_add
 * has advanced or not by the time the op runs); the values themselves come from the public
 * tpu_dropout_mask_value, as the op computes them. */
struct mask_ctx {
    const struct tpu_net *net;
    uint32_t per_replica;
    uint64_t seed[TPU_NET_MAX_LAYERS];
    int64_t step[TPU_NET_MAX_LAYERS];
    uint32_t n_masks;
};

static void find_masks(struct mask_ctx *m, const struct tpu_train_spec *spec, uint32_t replicas,
                       uint32_t global, uint64_t global_step)
{
    struct tpu_diag d = {0};
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    uint32_t *op_layer = NULL;
    ok(tpu_net_build(m->net, spec, TPU_MODE_TRAIN, DATA_SHAPE(global / replicas, global), &mp,
                     &op_layer, &d), &d);
    int64_t step = (int64_t)global_step;
    for (size_t i = 0; i < tpu_program_n_ops(mp.prog); i++) {
        const struct tpu_op *op = tpu_program_op(mp.prog, i);
        if (op->code == TPU_OP_VAR_ADD && op->attrs.var == mp.var_step)
            step += op->attrs.imm;
        if (op->code != TPU_OP_DROPOUT_MASK)
            continue;
        uint32_t layer = op_layer[i];
        assert_true(layer < tpu_net_n_layers(m->net));
        assert_int_equal(op->attrs.var, mp.var_step);
        m->seed[layer] = (uint64_t)op->attrs.imm;
        m->step[layer] = step;
        m->n_masks++;
    }
    free(op_layer);
    tpu_program_destroy(&mp.prog);
}

static double chip_mask(void *ctx, uint32_t layer, uint32_t example, uint64_t element)
{
    struct mask_ctx *m = ctx;
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(m->net, layer, &li), 0);
    uint64_t size = (uint64_t)li.out.h * li.out.w * li.out.c;
    /* the global index: the replicas' masks [B*h*w][c] laid end to end in replica order */
    uint64_t index = (uint64_t)example * size + element;
    return (double)tpu_dropout_mask_value(m->seed[layer], m->step[layer], index, li.desc.rate);
}

/* ---- comparing ---------------------------------------------------------------------------- */

/* the longest sum any layer of the net computes for a global batch of `batch` */
static double sum_len(const struct tpu_net *net, uint32_t batch)
{
    double L = 1;
    for (uint32_t i = 1; i < tpu_net_n_layers(net); i++) {
        struct tpu_layer_info li, in;
        assert_int_equal(tpu_net_layer(net, i, &li), 0);
        assert_int_equal(tpu_net_layer(net, li.in[0], &in), 0);
        double positions = (double)batch * li.out.h * li.out.w;
        double fan_in = in.out.c;
        if (li.kind == TPU_LAYER_CONV2D || li.kind == TPU_LAYER_MAX_POOL2D ||
            li.kind == TPU_LAYER_AVG_POOL2D)
            fan_in = (double)li.desc.kh * li.desc.kw * in.out.c;
        if (li.kind == TPU_LAYER_GLOBAL_AVG_POOL2D || li.kind == TPU_LAYER_BATCH_NORM)
            positions = (double)batch * in.out.h * in.out.w;
        L = fmax(L, fmax(positions, fan_in + li.out.c)); /* + c: the input gradient's sum */
    }
    return L;
}

/* |got - want| <= TOL_ULPS u (L * scale + |base|) with scale the largest |want| */
static void compare(const char *what, const float *got, const double *want, const double *base,
                    size_t n, double L)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        double tol = TOL_ULPS * U32 * (L * scale + (base ? fabs(base[i]) : 0.0));
        worst = fmax(worst, err / (U32 * (L * scale + (base ? fabs(base[i]) : 0.0)) + 1e-300));
        if (err > tol && bad++ < 5)
            print_message("  %s[%zu]: chip %.9g, reference %.9g (tolerance %.3g)\n", what, i,
                          (double)got[i], want[i], tol);
    }
    print_message("  %-30s %5zu values, largest |chip - ref| = %.2f u (L * scale + |p|), "
                  "L = %.0f\n", what, n, worst, L);
    if (bad)
        fail_msg("%s: %zu of %zu values differ from the reference", what, bad, n);
    if (scale == 0.0)
        fail_msg("%s: the reference is all zeros: the check would not see a mistake", what);
}

/* ---- one net on one chip ----------------------------------------------------------------- */

struct chip_case {
    const char *chip;
    uint32_t replicas;
    uint32_t global;     /* the training batch; predict runs `global + 2` examples with it */
    uint64_t seed;
};

struct collect {
    float *out;
    uint32_t cols;
    uint64_t n;
};

static void collect_row(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct collect *c = ctx;
    assert_int_equal(cols, c->cols);
    memcpy(c->out + index * cols, row, cols * sizeof *row);
    c->n++;
}

/* The id of buffer `name` in the train program the estimator loads for cc. */
static uint32_t train_buffer(const struct tpu_net *net, const struct tpu_train_spec *spec,
                             const struct chip_case *cc, const char *name)
{
    struct tpu_diag d = {0};
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    ok(tpu_net_build(net, spec, TPU_MODE_TRAIN, DATA_SHAPE(cc->global / cc->replicas, cc->global),
                     &mp, NULL, &d), &d);
    uint32_t id = 0;
    assert_int_equal(tpu_program_find_buffer(mp.prog, name, &id), 0);
    tpu_program_destroy(&mp.prog);
    return id;
}

static void chip_check(const struct tpu_net *net, const struct chip_case *cc)
{
    struct tpu_diag d = {0};
    print_message("%s, %u replica(s), global batch %u\n", cc->chip, cc->replicas, cc->global);
    struct net_ref *ref = NULL;
    ok(net_ref_create(net, &ref, &d), &d);
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.passes = 6;
    spec.optimizer = TPU_OPT_SGD_MOMENTUM;
    spec.learning_rate = 1.0f;
    spec.momentum = 0.0f;
    spec.l2 = 0.0f;
    spec.seed = cc->seed;
    struct wrapped w = {.ref = ref};
    ok(tpu_net_model(&w.inner, net, &spec, &d), &d);
    struct tpu_model model = {.ctx = &w, .build = wrapped_build, .init_param = wrapped_init};

    struct tpu_chip_config chip;
    ok(tpu_config_load_preset(cc->chip, &chip, &d), &d);
    chip.cores_per_chip = cc->replicas; /* one chip of 1 or 2 cores, a replica each */
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 1;
    s.n_threads = 1;
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&s, &dev, &d), &d);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.num_shards = cc->replicas;
    cfg.train_batch_size = cfg.eval_batch_size = cfg.predict_batch_size = cc->global;
    cfg.per_host_input_for_training = TPU_PER_HOST_V1; /* replica r: rows r*per .. */
    cfg.iterations_per_loop = 1;
    cfg.seed = cc->seed;
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d), &d);

    /* data */
    struct tpu_layer_info in, outl;
    assert_int_equal(tpu_net_layer(net, 0, &in), 0);
    uint32_t out_t;
    enum tpu_loss loss;
    assert_int_equal(tpu_net_output(net, &out_t, &loss), 0);
    assert_int_equal(tpu_net_layer(net, out_t, &outl), 0);
    struct feed f = {.n = cc->global + 2, .loss = loss};
    f.features = in.out.h * in.out.w * in.out.c;
    f.out_size = outl.out.h * outl.out.w * outl.out.c;
    f.x = malloc((size_t)f.n * f.features * sizeof *f.x);
    f.labels = malloc(f.n * sizeof *f.labels);
    f.targets = malloc((size_t)f.n * f.out_size * sizeof *f.targets);
    double *xd = malloc((size_t)f.n * f.features * sizeof *xd);
    double *td = malloc((size_t)f.n * f.out_size * sizeof *td);
    assert_true(f.x && f.labels && f.targets && xd && td);
    struct rng g = {cc->seed};
    for (size_t k = 0; k < (size_t)f.n * f.features; k++) {
        f.x[k] = (float)uniform(&g, -1.0, 1.0);
        xd[k] = f.x[k];
    }
    for (uint32_t e = 0; e < f.n; e++)
        f.labels[e] = (int32_t)rnd_below(&g, f.out_size);
    for (size_t k = 0; k < (size_t)f.n * f.out_size; k++) {
        f.targets[k] = (float)uniform(&g, -1.0, 1.0);
        td[k] = f.targets[k];
    }
    struct tpu_input input = {.ctx = &f, .next = feed_next, .start = feed_start};
    double L = sum_len(net, cc->global + 2);

    /* predict: the moving statistics, no dropout; the last batch is padded */
    float *got = malloc((size_t)f.n * f.out_size * sizeof *got);
    struct collect col = {.out = got, .cols = f.out_size};
    uint64_t n_pred = 0;
    ok(tpu_estimator_predict(est, &input, collect_row, &col, &n_pred, &d), &d);
    assert_int_equal(n_pred, f.n);
    struct net_ref_run run = {.training = false};
    ok(net_ref_forward(ref, &run, xd, f.n, &d), &d);
    compare("predict", got, net_ref_tensor(ref, out_t, NULL), NULL,
            (size_t)f.n * f.out_size, L);

    /* evaluate: the mean loss over the same examples in inference mode, and the accuracy
     * of the reference's argmax (none for MSE) */
    struct tpu_eval_result ev;
    ok(tpu_estimator_evaluate(est, &input, 0, &ev, &d), &d);
    assert_int_equal(ev.examples, f.n);
    double eval_loss;
    ok(net_ref_loss(ref, f.labels, td, &eval_loss, NULL, &d), &d);
    float chip_eval_loss = (float)ev.loss;
    compare("evaluate loss", &chip_eval_loss, &eval_loss, NULL, 1, L);
    if (loss == TPU_LOSS_SOFTMAX_XENT) {
        const double *z = net_ref_tensor(ref, out_t, NULL);
        uint32_t correct = 0;
        for (uint32_t e = 0; e < f.n; e++) {
            uint32_t best = 0;
            for (uint32_t k = 1; k < f.out_size; k++)
                if (z[(size_t)e * f.out_size + k] > z[(size_t)e * f.out_size + best])
                    best = k;
            correct += (int32_t)best == f.labels[e];
        }
        assert_true(fabs(ev.accuracy - (double)correct / f.n) < 1e-12);
    } else {
        assert_true(isnan(ev.accuracy));
    }

    /* one training step of SGD with lr 1: param_new = param - grad */
    uint32_t np = net_ref_n_params(ref);
    double **before = calloc(np, sizeof *before);
    for (uint32_t i = 0; i < np; i++) {
        size_t n;
        const double *v = net_ref_param_at(ref, i, &n);
        before[i] = malloc(n * sizeof(double));
        memcpy(before[i], v, n * sizeof(double));
    }
    ok(tpu_estimator_train(est, &input, 1, 0, &d), &d);
    static struct mask_ctx mc;
    memset(&mc, 0, sizeof mc);
    mc.net = net;
    mc.per_replica = cc->global / cc->replicas;
    find_masks(&mc, &spec, cc->replicas, cc->global, 0);
    uint32_t n_dropout = 0;
    for (uint32_t i = 0; i < tpu_net_n_layers(net); i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(net, i, &li), 0);
        if (li.kind != TPU_LAYER_DROPOUT)
            continue;
        n_dropout++;
        /* the mask drops some elements and keeps some, so both paths are checked */
        uint64_t size = (uint64_t)li.out.h * li.out.w * li.out.c, dropped = 0;
        for (uint32_t e = 0; e < cc->global; e++)
            for (uint64_t k = 0; k < size; k++)
                dropped += chip_mask(&mc, i, e, k) == 0.0;
        assert_true(dropped > 0 && dropped < cc->global * size);
    }
    assert_int_equal(mc.n_masks, n_dropout); /* a mask op per dropout layer */
    run = (struct net_ref_run){.training = true, .bn_group = cc->global / cc->replicas,
                               .mask = chip_mask, .mask_ctx = &mc};
    ok(net_ref_forward(ref, &run, xd, cc->global, &d), &d);
    double ref_loss, *per_example = malloc(cc->global * sizeof(double));
    ok(net_ref_loss(ref, f.labels, td, &ref_loss, per_example, &d), &d);
    ok(net_ref_backward(ref, &d), &d);
    /* the outfeed's loss: replica 0's mean over its examples */
    double want_loss = 0;
    for (uint32_t e = 0; e < mc.per_replica; e++)
        want_loss += per_example[e] / mc.per_replica;
    float chip_loss = tpu_estimator_last_info(est)->loss;
    compare("loss", &chip_loss, &want_loss, NULL, 1, L);
    for (uint32_t i = 0; i < np; i++) {
        size_t n;
        const char *name = net_ref_param_name(ref, i);
        net_ref_param_at(ref, i, &n);
        float *after = malloc(n * sizeof(float)), *delta = malloc(n * sizeof(float));
        ok(tpu_estimator_read_param(est, name, after, n * sizeof(float), &d), &d);
        if (net_ref_param_trainable(ref, i)) {
            for (size_t k = 0; k < n; k++) /* exact in double, then rounded once */
                delta[k] = (float)(before[i][k] - (double)after[k]);
            char what[64];
            snprintf(what, sizeof what, "grad %s", name);
            compare(what, delta, net_ref_grad(ref, name, NULL), before[i], n, L);
        } else {
            char what[64];
            snprintf(what, sizeof what, "new %s", name);
            compare(what, after, net_ref_moving_update(ref, name, NULL), NULL, n, L);
            /* every replica holds the same moving statistics (the replicas' mean) */
            for (uint32_t core = 1; core < cc->replicas; core++) {
                float *other = malloc(n * sizeof(float));
                ok(tpu_device_read(dev, core, train_buffer(net, &spec, cc, name), other,
                                   n * sizeof(float), &d), &d);
                assert_memory_equal(other, after, n * sizeof(float));
                free(other);
            }
        }
        free(after);
        free(delta);
    }
    for (uint32_t i = 0; i < np; i++)
        free(before[i]);
    free(before);
    free(per_example);
    free(got);
    free(xd);
    free(td);
    free(f.x);
    free(f.labels);
    free(f.targets);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    net_ref_destroy(&ref);
}

static const struct chip_case CASES[] = {
    {"tiny", 1, 4, 101},
    {"tiny", 2, 6, 102},
    {"tpu-v3", 2, 4, 103},
};

static void run_cases(const struct tpu_net *net)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        chip_check(net, &CASES[i]);
}

/* ---- the nets ------------------------------------------------------------------------------ */

/* conv2d same with a fused relu, max pool (3 x 3, stride 2, same: overlapping windows and a
 * padded row and column), conv2d valid without bias, average pool (same, a window over the
 * padding), flatten, dense with relu, dropout, dense; softmax cross-entropy */
static void test_cnn(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(6, 6, 2);
    uint32_t t = conv(net, 0, 4, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, true); /* 6x6x4 */
    t = pool(net, TPU_LAYER_MAX_POOL2D, t, 3, 3, 2, 2, TPU_PADDING_SAME);        /* 3x3x4 */
    t = conv(net, t, 3, 2, 2, 1, TPU_PADDING_VALID, TPU_ACT_NONE, false);        /* 2x2x3 */
    t = pool(net, TPU_LAYER_AVG_POOL2D, t, 2, 2, 1, 1, TPU_PADDING_SAME);        /* 2x2x3 */
    t = unary(net, TPU_LAYER_FLATTEN, t);
    t = dense(net, t, 8, TPU_ACT_RELU);
    t = dropout(net, t, 0.25f);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    run_cases(net);
    tpu_net_destroy(&net);
}

/* a residual block: conv same (stride 1, no bias) -> batch norm -> relu, added to the input,
 * global average pool, dense; per-replica and cross-replica batch norm */
static void test_residual_batch_norm(void **state)
{
    (void)state;
    for (int cross = 0; cross < 2; cross++) {
        struct tpu_net *net = new_net(4, 4, 3);
        uint32_t t = conv(net, 0, 3, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, false);
        t = batch_norm(net, t, cross);
        t = unary(net, TPU_LAYER_RELU, t);
        t = add(net, t, 0);
        t = unary(net, TPU_LAYER_GLOBAL_AVG_POOL2D, t);
        t = dense(net, t, 4, TPU_ACT_NONE);
        output(net, t, TPU_LOSS_SOFTMAX_XENT);
        run_cases(net);
        tpu_net_destroy(&net);
    }
}

/* conv2d with stride 2 and same padding (odd input), reshape, dense per pixel, batch norm on
 * an image; MSE on a 3-D output */
static void test_regression(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(5, 5, 2);
    uint32_t t = conv(net, 0, 4, 3, 3, 2, TPU_PADDING_SAME, TPU_ACT_NONE, true); /* 3x3x4 */
    t = reshape(net, t, 3, 6, 2);
    t = dense(net, t, 3, TPU_ACT_RELU);                                          /* 3x6x3 */
    t = batch_norm(net, t, false);
    t = pool(net, TPU_LAYER_AVG_POOL2D, t, 2, 2, 2, 2, TPU_PADDING_VALID);       /* 1x3x3 */
    output(net, t, TPU_LOSS_MSE);
    run_cases(net);
    tpu_net_destroy(&net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cnn),
        cmocka_unit_test(test_residual_batch_norm),
        cmocka_unit_test(test_regression),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
