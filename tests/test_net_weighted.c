/* The Keras-style flags of a net's lowering (runtime.h's struct tpu_build_shape): weighted
 * training (row weights infed after the labels, softmax_xent_w / mse_w), train_counts (the
 * counts outfed after the loss) and the infeed tensors the net model reports; and, on the
 * chip, the exactness rule: with every weight 1 / (B * R) the params after several steps are
 * bit-identical to the unweighted program's, and the training counts equal what the
 * evaluation program counts on the same batch with the same params. Also the spec's
 * schedule host: the train program's "learning_rate" variable, read by every optimizer op,
 * on the chip bit for bit the constant-rate program at the rate the variable holds.
 *
 * The chip runs: the tiny preset, 2 cores as 2 replicas of one core, programs driven through
 * the device API (one launch per step, a feeder thread for the infeed queues of 2 entries). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_helpers.h"
#include "expect_same_bits.h"
#include "net_build.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"
#include "xorshift.h"

#define B 4     /* examples per replica */
#define R 2     /* replicas (tiny: 2 cores) */
#define IN 6    /* input features */
#define K 3     /* classes, or an MSE model's outputs */
#define STEPS 5

static struct tpu_build_shape shape_of(bool weighted, bool counts)
{
    struct tpu_build_shape s = *DATA_SHAPE(B, B * R);
    s.weighted = weighted;
    s.train_counts = counts;
    return s;
}

/* dense IN -> 8 relu -> K, softmax cross-entropy or MSE */
static struct tpu_net *small_net(enum tpu_loss loss)
{
    struct tpu_net *net = new_net(1, 1, IN);
    uint32_t t = dense(net, 0, 8, TPU_ACT_RELU);
    t = dense(net, t, K, TPU_ACT_NONE);
    output(net, t, loss);
    return net;
}

static struct tpu_model_program build(const struct tpu_net *net, const struct tpu_train_spec *sp,
                                      enum tpu_mode mode, const struct tpu_build_shape *sh)
{
    struct tpu_model_program mp;
    struct tpu_diag d = {0};
    ok(tpu_net_build(net, sp, mode, sh, &mp, NULL, &d), &d);
    ok(tpu_program_verify(mp.prog, NULL, &d), &d);
    return mp;
}

static const struct tpu_buffer_desc *bufd(const struct tpu_model_program *mp, uint32_t id)
{
    return tpu_program_buffer(mp->prog, id);
}

/* The ops of code in the program. */
static unsigned count_ops(const struct tpu_program *p, enum tpu_opcode code, size_t *first)
{
    unsigned n = 0;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++)
        if (tpu_program_op(p, i)->code == code && n++ == 0 && first)
            *first = i;
    return n;
}

static char *text_of(const struct tpu_program *p)
{
    char *s = NULL;
    assert_int_equal(tpu_program_to_string(p, &s), 0);
    return s;
}

/* ---- the lowering ---------------------------------------------------------------------------- */

static void test_weighted_xent_lowering(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_SOFTMAX_XENT);
    struct tpu_train_spec sp;
    tpu_train_spec_default(&sp);
    const struct tpu_build_shape sh = shape_of(true, false);
    struct tpu_model_program mp = build(net, &sp, TPU_MODE_TRAIN, &sh);
    assert_int_equal(mp.n_infeed, 3);
    assert_string_equal(bufd(&mp, mp.infeed[0])->name, "x");
    assert_string_equal(bufd(&mp, mp.infeed[1])->name, "labels");
    const struct tpu_buffer_desc *w = bufd(&mp, mp.infeed[2]);
    assert_string_equal(w->name, "weights");
    assert_int_equal(w->dtype, TPU_F32);
    assert_int_equal(w->rows, B);
    assert_int_equal(w->cols, 1);
    size_t at = 0;
    assert_int_equal(count_ops(mp.prog, TPU_OP_SOFTMAX_XENT, NULL), 0);
    assert_int_equal(count_ops(mp.prog, TPU_OP_SOFTMAX_XENT_W, &at), 1);
    const struct tpu_op *op = tpu_program_op(mp.prog, at);
    assert_int_equal(op->in[2], mp.infeed[2]);
    assert_true(op->attrs.alpha == 0.0f); /* the weights carry the scale */
    /* the loss alone is outfed, as without weights */
    assert_int_equal(mp.n_outfeed, 1);
    tpu_program_destroy(&mp.prog);

    /* evaluation and prediction ignore the training flags: their texts are unchanged */
    const struct tpu_build_shape plain = shape_of(false, false), both = shape_of(true, true);
    for (int mode = TPU_MODE_EVAL; mode <= TPU_MODE_PREDICT; mode++) {
        struct tpu_model_program a = build(net, &sp, (enum tpu_mode)mode, &plain);
        struct tpu_model_program b = build(net, &sp, (enum tpu_mode)mode, &both);
        char *ta = text_of(a.prog), *tb = text_of(b.prog);
        assert_string_equal(ta, tb);
        assert_int_equal(a.n_infeed, b.n_infeed);
        free(ta);
        free(tb);
        tpu_program_destroy(&a.prog);
        tpu_program_destroy(&b.prog);
    }
    tpu_net_destroy(&net);
}

static void test_weighted_mse_lowering(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_MSE);
    struct tpu_train_spec sp;
    tpu_train_spec_default(&sp);
    const struct tpu_build_shape sh = shape_of(true, false);
    struct tpu_model_program mp = build(net, &sp, TPU_MODE_TRAIN, &sh);
    assert_int_equal(mp.n_infeed, 4);
    assert_string_equal(bufd(&mp, mp.infeed[1])->name, "targets");
    assert_string_equal(bufd(&mp, mp.infeed[2])->name, "mask");
    assert_string_equal(bufd(&mp, mp.infeed[3])->name, "weights");
    size_t at = 0;
    assert_int_equal(count_ops(mp.prog, TPU_OP_MSE, NULL), 0);
    assert_int_equal(count_ops(mp.prog, TPU_OP_MSE_W, &at), 1);
    const struct tpu_op *op = tpu_program_op(mp.prog, at);
    assert_int_equal(op->in[1], mp.infeed[1]);
    assert_int_equal(op->in[2], mp.infeed[2]);
    assert_int_equal(op->in[3], mp.infeed[3]);
    assert_true(op->attrs.alpha == 0.0f);
    tpu_program_destroy(&mp.prog);
    tpu_net_destroy(&net);
}

static void test_train_counts_lowering(void **state)
{
    (void)state;
    for (int loss = TPU_LOSS_SOFTMAX_XENT; loss <= TPU_LOSS_MSE; loss++) {
        struct tpu_net *net = small_net((enum tpu_loss)loss);
        struct tpu_train_spec sp;
        tpu_train_spec_default(&sp);
        for (int weighted = 0; weighted <= 1; weighted++) {
            const struct tpu_build_shape sh = shape_of(weighted, true);
            struct tpu_model_program mp = build(net, &sp, TPU_MODE_TRAIN, &sh);
            assert_int_equal(mp.n_outfeed, 2);
            assert_string_equal(bufd(&mp, mp.outfeed[0])->name, "loss");
            const struct tpu_buffer_desc *c = bufd(&mp, mp.outfeed[1]);
            assert_string_equal(c->name, "counts");
            assert_int_equal(c->rows, 1);
            assert_int_equal(c->cols, 2);
            const enum tpu_opcode want = loss == TPU_LOSS_MSE ? TPU_OP_COUNT_ROWS
                                                              : TPU_OP_CLASSIFY_COUNT;
            size_t at = 0;
            assert_int_equal(count_ops(mp.prog, want, &at), 1);
            assert_int_equal(tpu_program_op(mp.prog, at)->out[0], mp.outfeed[1]);
            assert_int_equal(mp.no_accuracy, loss == TPU_LOSS_MSE);
            /* the counts are outfed right after the loss, the step's last two ops in the
             * loop */
            size_t n = tpu_program_n_ops(mp.prog), end = 0;
            count_ops(mp.prog, TPU_OP_LOOP_END, &end);
            assert_true(end >= 2 && end < n);
            assert_int_equal(tpu_program_op(mp.prog, end - 2)->code, TPU_OP_OUTFEED);
            assert_int_equal(tpu_program_op(mp.prog, end - 2)->in[0], mp.outfeed[0]);
            assert_int_equal(tpu_program_op(mp.prog, end - 1)->code, TPU_OP_OUTFEED);
            assert_int_equal(tpu_program_op(mp.prog, end - 1)->in[0], mp.outfeed[1]);
            tpu_program_destroy(&mp.prog);
        }
        tpu_net_destroy(&net);
    }
}

/* With labels dims of product 1 on 2 cores per replica, the weights come to logical core 0
 * with the labels (infeed core0), and the loss is shared from core 0 as before. */
static void test_weights_follow_label_dims(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_SOFTMAX_XENT);
    struct tpu_train_spec sp;
    tpu_train_spec_default(&sp);
    struct tpu_build_shape sh = {.batch_per_replica = B, .global_batch = B, .n_replicas = 1,
                                 .cores_per_replica = 2, .n_dims = 2, .weighted = true};
    sh.dims[1].rank = 2;
    sh.dims[1].dims[0] = 1;
    sh.dims[1].dims[1] = 1;
    struct tpu_model_program mp = build(net, &sp, TPU_MODE_TRAIN, &sh);
    assert_int_equal(mp.n_infeed, 3);
    unsigned seen = 0;
    for (size_t i = 0; i < tpu_program_n_ops(mp.prog); i++) {
        const struct tpu_op *op = tpu_program_op(mp.prog, i);
        if (op->code != TPU_OP_INFEED)
            continue;
        const bool label_side = op->out[0] == mp.infeed[1] || op->out[0] == mp.infeed[2];
        assert_int_equal(op->attrs.core0, label_side);
        seen++;
    }
    assert_int_equal(seen, 3);
    tpu_program_destroy(&mp.prog);
    tpu_net_destroy(&net);
}

static void test_infeed_shapes(void **state)
{
    (void)state;
    for (int loss = TPU_LOSS_SOFTMAX_XENT; loss <= TPU_LOSS_MSE; loss++) {
        struct tpu_net *net = small_net((enum tpu_loss)loss);
        struct tpu_train_spec sp;
        tpu_train_spec_default(&sp);
        struct tpu_model m;
        struct tpu_diag d = {0};
        ok(tpu_net_model(&m, net, &sp, &d), &d);
        const uint32_t base = loss == TPU_LOSS_MSE ? 3 : 2;
        for (int mode = TPU_MODE_TRAIN; mode <= TPU_MODE_PREDICT; mode++)
            for (int weighted = 0; weighted <= 1; weighted++) {
                struct tpu_infeed_shape out[4];
                memset(out, 0, sizeof out);
                uint32_t n = 0;
                ok(m.infeed_shapes(m.ctx, (enum tpu_mode)mode, weighted, &n, out, &d), &d);
                uint32_t want = mode == TPU_MODE_PREDICT ? 1 : base;
                if (mode == TPU_MODE_TRAIN && weighted)
                    want++;
                assert_int_equal(n, want);
                if (mode == TPU_MODE_TRAIN && weighted) {
                    assert_string_equal(out[n - 1].name, "weights");
                    assert_int_equal(out[n - 1].rank, 1);
                    assert_int_equal(out[n - 1].dims[0], 1);
                }
                /* the model's list matches the program's infeed */
                const struct tpu_build_shape sh = shape_of(weighted, false);
                struct tpu_model_program mp = build(net, &sp, (enum tpu_mode)mode, &sh);
                assert_int_equal(mp.n_infeed, n);
                tpu_program_destroy(&mp.prog);
            }
        tpu_net_destroy(&net);
    }
}

/* ---- on the chip -------------------------------------------------------------------------- */

struct feed {
    struct tpu_device *dev;
    uint32_t n;                /* tensors per core */
    const void *data[R][4];
    size_t bytes[4];
    int rc;
    char msg[TPU_DIAG_MAX];
};

static void *feeder(void *arg)
{
    struct feed *f = arg;
    struct tpu_diag d = {0};
    for (uint32_t c = 0; c < R && !f->rc; c++)
        for (uint32_t k = 0; k < f->n && !f->rc; k++)
            f->rc = tpu_device_infeed(f->dev, c, f->data[c][k], f->bytes[k], 0, &d);
    if (f->rc)
        snprintf(f->msg, sizeof f->msg, "%s", d.msg);
    return NULL;
}

/* One launch of one step: infeeds every core's tensors (a thread: the queues hold 2),
 * runs, and takes each core's outfeed tensors into out[core][k] (bytes outb[k]). */
static void step(struct tpu_device *dev, const struct tpu_model_program *mp,
                 const void *data[R][4], float out[R][2][2])
{
    struct feed f = {.dev = dev, .n = mp->n_infeed};
    for (uint32_t k = 0; k < mp->n_infeed; k++)
        f.bytes[k] = tpu_buffer_bytes(bufd(mp, mp->infeed[k]));
    for (uint32_t c = 0; c < R; c++)
        for (uint32_t k = 0; k < mp->n_infeed; k++)
            f.data[c][k] = data[c][k];
    assert_int_equal(tpu_device_set_var(dev, mp->var_iterations, 1), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, feeder, &f), 0);
    struct tpu_diag d = {0};
    int rc = tpu_device_run(dev, 0, NULL, &d);
    pthread_join(th, NULL);
    if (f.rc)
        fail_msg("infeed: %s", f.msg);
    ok(rc, &d);
    for (uint32_t c = 0; c < R; c++)
        for (uint32_t k = 0; k < mp->n_outfeed; k++) {
            const size_t bytes = tpu_buffer_bytes(bufd(mp, mp->outfeed[k]));
            assert_true(bytes <= sizeof out[c][k]);
            ok(tpu_device_outfeed(dev, c, out[c][k], bytes, 0, NULL, &d), &d);
        }
}

/* A device with mp loaded and its params set: kernels from the seed and the name (the same
 * values in every program), everything else 0. */
static struct tpu_device *open_loaded(const struct tpu_model_program *mp)
{
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    struct tpu_device *dev = open_settings(&s);
    load(dev, mp->prog);
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *b = bufd(mp, mp->params[i]);
        const size_t n = (size_t)b->rows * b->cols;
        float *v = calloc(n, sizeof *v);
        assert_non_null(v);
        const char *dot = strrchr(b->name, '.');
        if (dot && strcmp(dot, ".kernel") == 0) {
            uint64_t h = 1469598103934665603u;
            for (const char *c = b->name; *c; c++)
                h = (h ^ (uint8_t)*c) * 1099511628211u;
            struct rng r = {h | 1};
            for (size_t k = 0; k < n; k++)
                v[k] = rnd_f32(&r, -0.6f, 0.6f);
        }
        struct tpu_diag d = {0};
        for (uint32_t c = 0; c < R; c++)
            ok(tpu_device_write(dev, c, mp->params[i], v, n * sizeof *v, &d), &d);
        free(v);
    }
    return dev;
}

/* One step's data for every core: x, labels (or targets and mask), weights = w. Row 1 of
 * replica 1 is a padding row at odd steps (label / mask -1). */
struct batch {
    float x[R][B * IN];
    int32_t labels[R][B];
    float targets[R][B * K];
    float weights[R][B];
};

static void make_batch(struct batch *bt, struct rng *r, int s, float w)
{
    for (uint32_t c = 0; c < R; c++) {
        for (uint32_t i = 0; i < B * IN; i++)
            bt->x[c][i] = rnd_f32(r, -1.0f, 1.0f);
        for (uint32_t i = 0; i < B * K; i++)
            bt->targets[c][i] = rnd_f32(r, -1.0f, 1.0f);
        for (uint32_t i = 0; i < B; i++) {
            bt->labels[c][i] = (int32_t)rnd_below(r, K);
            bt->weights[c][i] = w;
        }
    }
    if (s % 2)
        bt->labels[1][1] = -1;
}

static void tensors_of(const struct batch *bt, enum tpu_loss loss, bool weighted,
                       const void *data[R][4])
{
    for (uint32_t c = 0; c < R; c++) {
        uint32_t k = 0;
        data[c][k++] = bt->x[c];
        if (loss == TPU_LOSS_MSE) {
            data[c][k++] = bt->targets[c];
            data[c][k++] = bt->labels[c]; /* the mask: -1 on padding, else >= 0 */
        } else {
            data[c][k++] = bt->labels[c];
        }
        if (weighted)
            data[c][k++] = bt->weights[c];
    }
}

/* Trains the unweighted and the weighted (w = 1 / (B * R), with train_counts) programs
 * STEPS steps on the same batches; compares every param bit for bit after each step, the
 * losses within rounding, and the training counts with the evaluation program's on the same
 * batch and params. */
static void bit_identity(enum tpu_loss loss, enum tpu_optimizer opt)
{
    struct tpu_net *net = small_net(loss);
    struct tpu_train_spec sp;
    tpu_train_spec_default(&sp);
    sp.optimizer = opt;
    sp.learning_rate = 0.05f;
    sp.passes = 3;
    const struct tpu_build_shape plain = shape_of(false, false), wsh = shape_of(true, true);
    struct tpu_model_program a = build(net, &sp, TPU_MODE_TRAIN, &plain);
    struct tpu_model_program b = build(net, &sp, TPU_MODE_TRAIN, &wsh);
    struct tpu_model_program e = build(net, &sp, TPU_MODE_EVAL, &plain);
    assert_int_equal(a.n_params, b.n_params);
    struct tpu_device *da = open_loaded(&a), *db = open_loaded(&b), *de = open_loaded(&e);
    const float w = 1.0f / (float)(B * R); /* the lowering's alpha, computed alike */
    struct rng r = {2024 + (uint64_t)loss * 7 + (uint64_t)opt};
    struct batch *bt = malloc(sizeof *bt);
    assert_non_null(bt);
    const struct tpu_buffer_desc *k0 = bufd(&a, a.params[0]);
    const size_t k0_bytes = tpu_buffer_bytes(k0);
    float *init = malloc(k0_bytes), *last = malloc(k0_bytes);
    assert_true(init && last);
    struct tpu_diag d0 = {0};
    ok(tpu_device_read(da, 0, a.params[0], init, k0_bytes, &d0), &d0);
    for (int s = 0; s < STEPS; s++) {
        make_batch(bt, &r, s, w);
        const void *ta[R][4], *tb[R][4], *te[R][4];
        tensors_of(bt, loss, false, ta);
        tensors_of(bt, loss, true, tb);
        tensors_of(bt, loss, false, te);
        /* evaluation first, with the params before this step (b's, equal to a's) */
        struct tpu_diag d = {0};
        for (uint32_t i = 0; i < e.n_params; i++) {
            const struct tpu_buffer_desc *pd = bufd(&e, e.params[i]);
            uint32_t id = 0;
            assert_int_equal(tpu_program_find_buffer(b.prog, pd->name, &id), 0);
            const size_t bytes = tpu_buffer_bytes(pd);
            float *v = malloc(bytes);
            assert_non_null(v);
            ok(tpu_device_read(db, 0, id, v, bytes, &d), &d);
            for (uint32_t c = 0; c < R; c++)
                ok(tpu_device_write(de, c, e.params[i], v, bytes, &d), &d);
            free(v);
        }
        float oa[R][2][2], ob[R][2][2], oe[R][2][2];
        step(de, &e, te, oe);
        step(da, &a, ta, oa);
        step(db, &b, tb, ob);
        for (uint32_t c = 0; c < R; c++) {
            /* counts: the evaluation program's, bit for bit (correct, real rows) */
            expect_same(ob[c][1], oe[c][1], 2, "train counts vs eval counts");
            const float real = (s % 2 && c == 1) ? B - 1 : B;
            assert_true(ob[c][1][1] == real);
            if (loss == TPU_LOSS_MSE)
                assert_true(ob[c][1][0] == 0.0f);
            /* loss: alpha * sum vs sum of w * row: the same terms (all >= 0), rounded in
             * another order: within 2 (B + 2) u relative */
            const double la = oa[c][0][0], lb = ob[c][0][0];
            if (!(fabs(la - lb) <= 2.0 * (B + 2) * ldexp(1, -24) * fabs(la)))
                fail_msg("step %d core %u: loss %.9g unweighted, %.9g weighted", s, c, la, lb);
        }
        for (uint32_t i = 0; i < a.n_params; i++) {
            const struct tpu_buffer_desc *pd = bufd(&a, a.params[i]);
            const size_t n = (size_t)pd->rows * pd->cols;
            float *va = malloc(n * 4), *vb = malloc(n * 4);
            assert_true(va && vb);
            for (uint32_t c = 0; c < R; c++) {
                ok(tpu_device_read(da, c, a.params[i], va, n * 4, &d), &d);
                ok(tpu_device_read(db, c, b.params[i], vb, n * 4, &d), &d);
                char what[96];
                snprintf(what, sizeof what, "step %d core %u param %s", s, c, pd->name);
                expect_same(vb, va, n, what);
            }
            free(va);
            free(vb);
        }
    }
    /* the params moved: the check compared something that trains */
    ok(tpu_device_read(da, 0, a.params[0], last, k0_bytes, &d0), &d0);
    assert_memory_not_equal(init, last, k0_bytes);
    free(init);
    free(last);
    free(bt);
    tpu_device_close(&da);
    tpu_device_close(&db);
    tpu_device_close(&de);
    tpu_program_destroy(&a.prog);
    tpu_program_destroy(&b.prog);
    tpu_program_destroy(&e.prog);
    tpu_net_destroy(&net);
}

static void test_bit_identity_xent_sgd(void **state)
{
    (void)state;
    bit_identity(TPU_LOSS_SOFTMAX_XENT, TPU_OPT_SGD_MOMENTUM);
}

static void test_bit_identity_xent_adam(void **state)
{
    (void)state;
    bit_identity(TPU_LOSS_SOFTMAX_XENT, TPU_OPT_ADAM);
}

static void test_bit_identity_mse_adamw(void **state)
{
    (void)state;
    bit_identity(TPU_LOSS_MSE, TPU_OPT_ADAMW);
}

/* Weights other than 1 / (B * R) change the training: a check that the weights are read. */
static void test_weights_matter(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_SOFTMAX_XENT);
    struct tpu_train_spec sp;
    tpu_train_spec_default(&sp);
    sp.optimizer = TPU_OPT_SGD_MOMENTUM;
    sp.learning_rate = 1.0f;
    sp.momentum = 0.0f;
    const struct tpu_build_shape wsh = shape_of(true, false);
    struct tpu_model_program b = build(net, &sp, TPU_MODE_TRAIN, &wsh);
    struct tpu_device *d1 = open_loaded(&b), *d2 = open_loaded(&b);
    struct rng r1 = {99}, r2 = {99};
    struct batch *x1 = malloc(sizeof *x1), *x2 = malloc(sizeof *x2);
    assert_true(x1 && x2);
    make_batch(x1, &r1, 0, 0.125f);
    make_batch(x2, &r2, 0, 0.125f);
    for (uint32_t c = 0; c < R; c++)
        x2->weights[c][2] = 0.0f; /* one row of each replica weighs nothing */
    const void *t1[R][4], *t2[R][4];
    tensors_of(x1, TPU_LOSS_SOFTMAX_XENT, true, t1);
    tensors_of(x2, TPU_LOSS_SOFTMAX_XENT, true, t2);
    float o1[R][2][2], o2[R][2][2];
    step(d1, &b, t1, o1);
    step(d2, &b, t2, o2);
    uint32_t id = 0;
    assert_int_equal(tpu_program_find_buffer(b.prog, "dense_1.bias", &id), 0);
    float v1[K], v2[K];
    struct tpu_diag d = {0};
    ok(tpu_device_read(d1, 0, id, v1, sizeof v1, &d), &d);
    ok(tpu_device_read(d2, 0, id, v2, sizeof v2, &d), &d);
    assert_memory_not_equal(v1, v2, sizeof v1);
    /* the loss is the weighted sum: the zero-weight rows' terms are gone */
    assert_true(o2[0][0][0] < o1[0][0][0]);
    free(x1);
    free(x2);
    tpu_device_close(&d1);
    tpu_device_close(&d2);
    tpu_program_destroy(&b.prog);
    tpu_net_destroy(&net);
}

/* The MLP model (models.h) builds its weighted or counting training program through the
 * layer graph's lowering; without the flags its program is mlp.c's, unchanged. */
static void test_mlp_model_flags(void **state)
{
    (void)state;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 2;
    spec.sizes[0] = IN;
    spec.sizes[1] = 8;
    spec.sizes[2] = K;
    struct tpu_model m;
    tpu_mlp_model(&m, &spec);
    struct tpu_diag d = {0};
    const struct tpu_build_shape plain = shape_of(false, false), wsh = shape_of(true, true);
    struct tpu_model_program a, b;
    ok(m.build(m.ctx, TPU_MODE_TRAIN, &plain, &a, &d), &d);
    ok(m.build(m.ctx, TPU_MODE_TRAIN, &wsh, &b, &d), &d);
    ok(tpu_program_verify(b.prog, NULL, &d), &d);
    assert_int_equal(a.n_infeed, 2);
    assert_int_equal(count_ops(a.prog, TPU_OP_SOFTMAX_XENT, NULL), 1);
    assert_int_equal(b.n_infeed, 3);
    assert_string_equal(bufd(&b, b.infeed[2])->name, "weights");
    assert_int_equal(count_ops(b.prog, TPU_OP_SOFTMAX_XENT_W, NULL), 1);
    assert_int_equal(b.n_outfeed, 2);
    /* the same params, by name and shape, in the same order (checkpoints fit both) */
    assert_int_equal(a.n_params, b.n_params);
    for (uint32_t i = 0; i < a.n_params; i++) {
        const struct tpu_buffer_desc *pa = bufd(&a, a.params[i]), *pb = bufd(&b, b.params[i]);
        assert_string_equal(pa->name, pb->name);
        assert_int_equal(pa->rows, pb->rows);
        assert_int_equal(pa->cols, pb->cols);
    }
    tpu_program_destroy(&a.prog);
    tpu_program_destroy(&b.prog);
}

/* ---- the host-set learning rate (schedule host) ----------------------------------------------- */

static void test_host_schedule_lowering(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_SOFTMAX_XENT);
    const struct tpu_build_shape sh = shape_of(false, false);
    for (int o = TPU_OPT_SGD_MOMENTUM; o <= TPU_OPT_ADAMW; o++) {
        struct tpu_train_spec sp;
        tpu_train_spec_default(&sp);
        sp.optimizer = (enum tpu_optimizer)o;
        sp.schedule = TPU_SCHEDULE_HOST;
        sp.learning_rate = 0.02f;
        struct tpu_diag d = {0};
        ok(tpu_train_spec_check(&sp, &d), &d);
        struct tpu_model_program mp = build(net, &sp, TPU_MODE_TRAIN, &sh);
        uint32_t lr = 0;
        assert_int_equal(tpu_program_find_var(mp.prog, "learning_rate", &lr), 0);
        assert_int_equal(tpu_program_n_vars(mp.prog), 3);
        unsigned updates = 0;
        for (size_t i = 0; i < tpu_program_n_ops(mp.prog); i++) {
            const struct tpu_op *op = tpu_program_op(mp.prog, i);
            if (!(tpu_opcode_attrs(op->code) & TPU_ATTR_SCHEDULE))
                continue;
            updates++;
            assert_int_equal(op->attrs.schedule, TPU_SCHEDULE_HOST);
            assert_int_equal(op->attrs.lr_var, lr);
            assert_true(op->attrs.alpha == 0.02f);
            assert_int_equal(op->attrs.decay_steps, 0);
            if (op->code == TPU_OP_SGD_MOMENTUM)
                assert_int_equal(op->attrs.var, 0); /* no step schedule to follow */
            else
                assert_int_equal(op->attrs.var, mp.var_step);
        }
        assert_int_equal(updates, 4); /* two dense layers' kernel and bias */
        char *t = text_of(mp.prog);
        assert_non_null(strstr(t, " schedule=host lr_var=learning_rate\n"));
        free(t);
        tpu_program_destroy(&mp.prog);
        /* evaluation and prediction have no optimizer, so no rate variable */
        for (int mode = TPU_MODE_EVAL; mode <= TPU_MODE_PREDICT; mode++) {
            mp = build(net, &sp, (enum tpu_mode)mode, &sh);
            assert_int_equal(tpu_program_find_var(mp.prog, "learning_rate", &lr), TPU_ENOTFOUND);
            tpu_program_destroy(&mp.prog);
        }
    }
    tpu_net_destroy(&net);
}

/* Params of dst := src's (every core), and the step variable. */
static void copy_state(struct tpu_device *dst, const struct tpu_model_program *md,
                       const struct tpu_device *src, const struct tpu_model_program *ms)
{
    assert_int_equal(md->n_params, ms->n_params);
    struct tpu_diag d = {0};
    for (uint32_t i = 0; i < ms->n_params; i++) {
        const size_t bytes = tpu_buffer_bytes(bufd(ms, ms->params[i]));
        assert_int_equal(bytes, tpu_buffer_bytes(bufd(md, md->params[i])));
        void *v = malloc(bytes);
        assert_non_null(v);
        for (uint32_t c = 0; c < R; c++) {
            ok(tpu_device_read(src, c, ms->params[i], v, bytes, &d), &d);
            ok(tpu_device_write(dst, c, md->params[i], v, bytes, &d), &d);
        }
        free(v);
    }
    ok(tpu_device_set_var(dst, md->var_step, tpu_device_get_var(src, 0, ms->var_step)), &d);
    assert_true(tpu_device_get_var(dst, 1, md->var_step) > 0);
}

static void expect_same_params(const struct tpu_device *da, const struct tpu_model_program *a,
                               const struct tpu_device *db, const struct tpu_model_program *b,
                               const char *when)
{
    struct tpu_diag d = {0};
    for (uint32_t i = 0; i < a->n_params; i++) {
        const struct tpu_buffer_desc *pd = bufd(a, a->params[i]);
        const size_t n = (size_t)pd->rows * pd->cols;
        float *va = malloc(n * 4), *vb = malloc(n * 4);
        assert_true(va && vb);
        for (uint32_t c = 0; c < R; c++) {
            ok(tpu_device_read(da, c, a->params[i], va, n * 4, &d), &d);
            ok(tpu_device_read(db, c, b->params[i], vb, n * 4, &d), &d);
            char what[96];
            snprintf(what, sizeof what, "%s: core %u param %s", when, c, pd->name);
            expect_same(va, vb, n, what);
        }
        free(va);
        free(vb);
    }
}

/* On the chip: with no rate set the host program trains as the constant program at the
 * spec's rate; after the host sets 0.01 in "learning_rate" (kept across launches) it trains
 * as the constant program at 0.01, bit for bit (Adam: the step counter carries on). */
static void test_host_rate_on_chip(void **state)
{
    (void)state;
    struct tpu_net *net = small_net(TPU_LOSS_SOFTMAX_XENT);
    struct tpu_train_spec sh_spec, c1_spec, c2_spec;
    tpu_train_spec_default(&sh_spec);
    sh_spec.passes = 3;
    sh_spec.learning_rate = 0.05f;
    c1_spec = c2_spec = sh_spec;
    sh_spec.schedule = TPU_SCHEDULE_HOST;
    c2_spec.learning_rate = 0.01f;
    const struct tpu_build_shape sh = shape_of(false, false);
    struct tpu_model_program h = build(net, &sh_spec, TPU_MODE_TRAIN, &sh);
    struct tpu_model_program c1 = build(net, &c1_spec, TPU_MODE_TRAIN, &sh);
    struct tpu_model_program c2 = build(net, &c2_spec, TPU_MODE_TRAIN, &sh);
    struct tpu_device *dh = open_loaded(&h), *d1 = open_loaded(&c1), *d2 = open_loaded(&c2);
    uint32_t lr = 0;
    assert_int_equal(tpu_program_find_var(h.prog, "learning_rate", &lr), 0);
    struct rng r = {4242};
    struct batch *bt = malloc(sizeof *bt);
    assert_non_null(bt);
    for (int s = 0; s < 4; s++) {
        make_batch(bt, &r, s, 0.0f);
        const void *t[R][4];
        tensors_of(bt, TPU_LOSS_SOFTMAX_XENT, false, t);
        float o1[R][2][2], o2[R][2][2];
        if (s == 2) { /* the host sets a rate; the constant program at that rate takes over */
            copy_state(d2, &c2, d1, &c1);
            struct tpu_diag dv = {0, ""};
            ok(tpu_device_set_var(dh, lr, tpu_lr_host_bits(0.01f)), &dv);
        }
        step(dh, &h, t, o1);
        step(s < 2 ? d1 : d2, s < 2 ? &c1 : &c2, t, o2);
        if (s >= 2) /* the constant program at 0.05 goes on, for the check below */
            step(d1, &c1, t, o2);
        char when[32];
        snprintf(when, sizeof when, "step %d", s);
        expect_same_params(dh, &h, s < 2 ? d1 : d2, s < 2 ? &c1 : &c2, when);
    }
    /* the rate mattered: the constant program at 0.05 throughout ends elsewhere */
    const size_t bytes = tpu_buffer_bytes(bufd(&h, h.params[0]));
    float *vh = malloc(bytes), *v1 = malloc(bytes);
    assert_true(vh && v1);
    struct tpu_diag d = {0};
    ok(tpu_device_read(dh, 0, h.params[0], vh, bytes, &d), &d);
    ok(tpu_device_read(d1, 0, c1.params[0], v1, bytes, &d), &d);
    assert_memory_not_equal(vh, v1, bytes);
    free(vh);
    free(v1);
    free(bt);
    tpu_device_close(&dh);
    tpu_device_close(&d1);
    tpu_device_close(&d2);
    tpu_program_destroy(&h.prog);
    tpu_program_destroy(&c1.prog);
    tpu_program_destroy(&c2.prog);
    tpu_net_destroy(&net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weighted_xent_lowering),
        cmocka_unit_test(test_weighted_mse_lowering),
        cmocka_unit_test(test_train_counts_lowering),
        cmocka_unit_test(test_weights_follow_label_dims),
        cmocka_unit_test(test_infeed_shapes),
        cmocka_unit_test(test_bit_identity_xent_sgd),
        cmocka_unit_test(test_bit_identity_xent_adam),
        cmocka_unit_test(test_bit_identity_mse_adamw),
        cmocka_unit_test(test_weights_matter),
        cmocka_unit_test(test_mlp_model_flags),
        cmocka_unit_test(test_host_schedule_lowering),
        cmocka_unit_test(test_host_rate_on_chip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
