/* Replicas that cost little (device.h, settings.share_replicas; sim/chip/share.c): the same
 * training with sharing on and off gives the same bytes everywhere. An MLP (Adam) and a small
 * CNN (conv, max pool, dropout, dense; SGD with momentum) train on 1, 2 and 8 replicas of 1
 * and 2 cores; after every step the two devices hold identical params and optimizer state on
 * every core, the same losses, and every core has the same counters and per-op statistics.
 * A write to one core makes that replica differ (and only it), both devices go on computing
 * it apart identically, and writing the replicas' common value back joins them again. All
 * comparisons are exact (memcmp): sharing must change no bit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"
#include "net_build.h"
#include "toy_dataset.h"
#include "xorshift.h"

enum { BATCH = 16, STEPS = 3 };

enum model_kind { MLP, CNN, BN };

/* One training setup: a device (sharing on or off), its estimator and its input. */
struct run {
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    struct tpu_mlp_spec spec;
    struct tpu_net *net;
    struct tpu_train_spec tspec;
    struct tpu_model model;
};

static void run_open(struct run *r, enum model_kind kind, uint32_t replicas, uint32_t P,
                     bool share)
{
    memset(r, 0, sizeof *r);
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    ok(tpu_config_load_preset("tiny", &chip, &d), &d);
    const uint32_t cores = replicas * P;
    if (cores == 1)
        chip.cores_per_chip = 1;
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    assert_true(s.share_replicas); /* the documented default */
    s.share_replicas = share;
    s.n_chips = cores / chip.cores_per_chip;
    s.cores_per_replica = P;
    s.n_threads = 2;
    s.op_stats = true;
    ok(tpu_device_open(&s, &r->dev, &d), &d);

    toy_dataset(&r->ds, 256, 3);
    tpu_dataset_input_init(&r->in, &r->ds, 5);
    if (kind == MLP) {
        tpu_mlp_default_spec(&r->spec);
        r->spec.n_layers = 2;
        r->spec.sizes[0] = TOY_FEATURES;
        r->spec.sizes[1] = 12;
        r->spec.sizes[2] = TOY_CLASSES;
        r->spec.optimizer = TPU_OPT_ADAM;
        r->spec.learning_rate = 0.01f;
        tpu_mlp_model(&r->model, &r->spec);
    } else if (kind == BN) {
        /* batch norm: per-replica batch statistics, moving mean and variance (params the
         * optimizer does not write) and gamma and beta (params it does) */
        r->net = new_net(4, 4, 1);
        uint32_t x = conv(r->net, 0, 4, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, false);
        x = batch_norm(r->net, x, false);
        x = unary(r->net, TPU_LAYER_RELU, x);
        x = unary(r->net, TPU_LAYER_FLATTEN, x);
        x = dense(r->net, x, TOY_CLASSES, TPU_ACT_NONE);
        output(r->net, x, TPU_LOSS_SOFTMAX_XENT);
        tpu_train_spec_default(&r->tspec);
        r->tspec.optimizer = TPU_OPT_ADAM;
        r->tspec.learning_rate = 0.01f;
        r->tspec.seed = 7;
        ok(tpu_net_model(&r->model, r->net, &r->tspec, &d), &d);
    } else {
        r->net = new_net(4, 4, 1);
        uint32_t x = conv(r->net, 0, 6, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, true);
        x = pool(r->net, TPU_LAYER_MAX_POOL2D, x, 2, 2, 2, 2, TPU_PADDING_VALID);
        x = dropout(r->net, x, 0.25f);
        x = unary(r->net, TPU_LAYER_FLATTEN, x);
        x = dense(r->net, x, TOY_CLASSES, TPU_ACT_NONE);
        output(r->net, x, TPU_LOSS_SOFTMAX_XENT);
        tpu_train_spec_default(&r->tspec);
        r->tspec.optimizer = TPU_OPT_SGD_MOMENTUM;
        r->tspec.learning_rate = 0.05f;
        r->tspec.seed = 7;
        ok(tpu_net_model(&r->model, r->net, &r->tspec, &d), &d);
    }
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = BATCH;
    cfg.eval_batch_size = BATCH;
    cfg.predict_batch_size = BATCH;
    cfg.iterations_per_loop = 2;
    cfg.num_cores_per_replica = P;
    cfg.seed = 7;
    ok(tpu_estimator_create(r->dev, &cfg, &r->model, NULL, 0, &r->est, &d), &d);
}

static void run_close(struct run *r)
{
    tpu_estimator_destroy(&r->est);
    tpu_device_close(&r->dev);
    tpu_dataset_input_free(&r->in);
    tpu_dataset_free(&r->ds);
    tpu_net_destroy(&r->net);
}

static void train(struct run *r, uint64_t steps)
{
    struct tpu_diag d = {0};
    if (tpu_estimator_train(r->est, &r->in.input, steps, 0, &d))
        fail_msg("train: %s", d.msg);
}

static size_t param_bytes(const struct tpu_program *p, uint32_t b)
{
    return tpu_buffer_bytes(tpu_program_buffer(p, b));
}

/* Asserts that a and b hold the same bytes in every param buffer of every core, the same
 * counters and the same per-op statistics on every core, and the same last losses. */
static void assert_same(const struct run *a, const struct run *b, const char *when)
{
    const struct tpu_program *p = tpu_device_program(a->dev);
    assert_non_null(p);
    const uint32_t n_cores = tpu_device_n_cores(a->dev);
    assert_int_equal(n_cores, tpu_device_n_cores(b->dev));
    struct tpu_diag d = {0};
    for (uint32_t buf = 0; buf < tpu_program_n_buffers(p); buf++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, buf);
        if (bd->kind != TPU_BUF_PARAM)
            continue;
        const size_t bytes = param_bytes(p, buf);
        unsigned char *x = malloc(bytes), *y = malloc(bytes);
        assert_non_null(x);
        assert_non_null(y);
        for (uint32_t c = 0; c < n_cores; c++) {
            ok(tpu_device_read(a->dev, c, buf, x, bytes, &d), &d);
            ok(tpu_device_read(b->dev, c, buf, y, bytes, &d), &d);
            if (memcmp(x, y, bytes) != 0) {
                size_t i = 0;
                while (x[i] == y[i])
                    i++;
                fail_msg("%s: param '%s' on core %u differs first at byte %zu of %zu", when,
                         bd->name, c, i, bytes);
            }
        }
        free(x);
        free(y);
    }
    const size_t n_ops = tpu_program_n_ops(p);
    struct tpu_op_stats *sa = calloc(n_ops, sizeof *sa), *sb = calloc(n_ops, sizeof *sb);
    assert_non_null(sa);
    assert_non_null(sb);
    for (uint32_t c = 0; c < n_cores; c++) {
        struct tpu_core_counters ca, cb;
        assert_int_equal(tpu_device_counters(a->dev, c, &ca), 0);
        assert_int_equal(tpu_device_counters(b->dev, c, &cb), 0);
        if (memcmp(&ca, &cb, sizeof ca) != 0)
            fail_msg("%s: core %u's counters differ (cycles %llu vs %llu)", when, c,
                     (unsigned long long)ca.cycles, (unsigned long long)cb.cycles);
        ok(tpu_device_op_stats(a->dev, c, sa, n_ops, &d), &d);
        ok(tpu_device_op_stats(b->dev, c, sb, n_ops, &d), &d);
        for (size_t i = 0; i < n_ops; i++)
            if (memcmp(&sa[i], &sb[i], sizeof sa[i]) != 0)
                fail_msg("%s: core %u, op %zu: statistics differ", when, c, i);
    }
    free(sa);
    free(sb);
    const struct tpu_loop_info *ia = tpu_estimator_last_info(a->est);
    const struct tpu_loop_info *ib = tpu_estimator_last_info(b->est);
    assert_memory_equal(&ia->loss, &ib->loss, sizeof ia->loss);
    assert_memory_equal(&ia->global_loss, &ib->global_loss, sizeof ia->global_loss);
    assert_memory_equal(&ia->device_seconds, &ib->device_seconds, sizeof ia->device_seconds);
    assert_true(ia->loss == ia->loss); /* trained: a real number */
}

static void same_training(enum model_kind kind, uint32_t replicas, uint32_t P)
{
    struct run on, off;
    run_open(&on, kind, replicas, P, true);
    run_open(&off, kind, replicas, P, false);
    char when[64];
    for (int step = 1; step <= STEPS; step++) {
        train(&on, 1);
        train(&off, 1);
        snprintf(when, sizeof when, "%s, %u replicas of %u cores, step %d",
                 kind == MLP ? "MLP" : kind == CNN ? "CNN" : "batch norm", replicas, P, step);
        assert_same(&on, &off, when);
    }
    train(&on, 2); /* a launch of two steps: the loop runs on the chip */
    train(&off, 2);
    assert_same(&on, &off, "after a launch of two steps");
    run_close(&on);
    run_close(&off);
}

static void test_mlp_1x1(void **state) { (void)state; same_training(MLP, 1, 1); }
static void test_mlp_2x1(void **state) { (void)state; same_training(MLP, 2, 1); }
static void test_mlp_8x1(void **state) { (void)state; same_training(MLP, 8, 1); }
static void test_mlp_1x2(void **state) { (void)state; same_training(MLP, 1, 2); }
static void test_mlp_2x2(void **state) { (void)state; same_training(MLP, 2, 2); }
static void test_mlp_8x2(void **state) { (void)state; same_training(MLP, 8, 2); }
static void test_cnn_1x1(void **state) { (void)state; same_training(CNN, 1, 1); }
static void test_cnn_2x1(void **state) { (void)state; same_training(CNN, 2, 1); }
static void test_cnn_8x1(void **state) { (void)state; same_training(CNN, 8, 1); }
static void test_cnn_1x2(void **state) { (void)state; same_training(CNN, 1, 2); }
static void test_cnn_2x2(void **state) { (void)state; same_training(CNN, 2, 2); }
static void test_cnn_8x2(void **state) { (void)state; same_training(CNN, 8, 2); }
static void test_bn_1x1(void **state) { (void)state; same_training(BN, 1, 1); }
static void test_bn_8x1(void **state) { (void)state; same_training(BN, 8, 1); }
static void test_bn_2x2(void **state) { (void)state; same_training(BN, 2, 2); }

/* The first param of the program (the first dense kernel): its id and size. */
static uint32_t first_param(const struct run *r, size_t *bytes)
{
    const struct tpu_program *p = tpu_device_program(r->dev);
    for (uint32_t b = 0; b < tpu_program_n_buffers(p); b++)
        if (tpu_program_buffer(p, b)->kind == TPU_BUF_PARAM) {
            *bytes = param_bytes(p, b);
            return b;
        }
    fail_msg("the program has no param");
    return 0;
}

/* Every core's gradient sums (the all_reduce outputs, temps) as the host reads them: a
 * non-leader member whose gradient buffer went back to the pool reads as the leader's sum,
 * which is what it holds apart. */
static void assert_same_gradients(const struct run *a, const struct run *b, const char *when)
{
    const struct tpu_program *p = tpu_device_program(a->dev);
    const uint32_t n_cores = tpu_device_n_cores(a->dev);
    struct tpu_diag d = {0};
    unsigned n_checked = 0;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code != TPU_OP_ALL_REDUCE)
            continue;
        const uint32_t y = op->out[0];
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, y);
        if (bd->kind != TPU_BUF_TEMP)
            continue;
        const size_t bytes = tpu_buffer_bytes(bd);
        unsigned char *x = malloc(bytes), *z = malloc(bytes), *lead = malloc(bytes);
        assert_non_null(x);
        assert_non_null(z);
        assert_non_null(lead);
        ok(tpu_device_read(b->dev, 0, y, lead, bytes, &d), &d);
        for (uint32_t c = 0; c < n_cores; c++) {
            ok(tpu_device_read(a->dev, c, y, x, bytes, &d), &d);
            ok(tpu_device_read(b->dev, c, y, z, bytes, &d), &d);
            if (memcmp(x, z, bytes) != 0)
                fail_msg("%s: gradient sum '%s' on core %u differs", when, bd->name, c);
            n_checked++;
        }
        /* a real sum: not all zeros (a temp no op wrote would read as zeros) */
        size_t nz = 0;
        for (size_t k = 0; k < bytes; k++)
            nz += lead[k] != 0;
        if (nz == 0)
            fail_msg("%s: gradient sum '%s' reads as zeros", when, bd->name);
        free(x);
        free(z);
        free(lead);
    }
    assert_true(n_checked >= 2 * n_cores); /* a kernel's and a bias's at least */
}

enum { PRED_MAX = 1024 }; /* rows the prediction buffers hold */

static void collect_row(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    float *out = ctx;
    assert_int_equal(cols, TOY_CLASSES);
    assert_true(index < PRED_MAX);
    memcpy(out + index * cols, row, cols * sizeof *row);
}

/* Evaluation and prediction programs on the trained replicas, then training again on the
 * same device (the train program loaded a second time), then a new estimator on the same
 * device (another load): sharing on and off agree at each point, gradient sums included. */
static void test_eval_predict_and_reload(void **state)
{
    (void)state;
    enum { R = 4 };
    struct run on, off;
    run_open(&on, MLP, R, 1, true);
    run_open(&off, MLP, R, 1, false);
    train(&on, 2);
    train(&off, 2);
    assert_same(&on, &off, "after training");
    assert_same_gradients(&on, &off, "after training");

    struct tpu_diag d = {0};
    struct tpu_eval_result ea, eb;
    ok(tpu_estimator_evaluate(on.est, &on.in.input, 4, &ea, &d), &d);
    ok(tpu_estimator_evaluate(off.est, &off.in.input, 4, &eb, &d), &d);
    assert_int_equal(ea.examples, 4 * BATCH);
    assert_int_equal(ea.examples, eb.examples);
    assert_memory_equal(&ea.loss, &eb.loss, sizeof ea.loss);
    assert_memory_equal(&ea.accuracy, &eb.accuracy, sizeof ea.accuracy);
    assert_memory_equal(&ea.device_seconds, &eb.device_seconds, sizeof ea.device_seconds);
    assert_true(ea.loss > 0.0 && ea.accuracy >= 0.0);

    float *pa = calloc((size_t)PRED_MAX * TOY_CLASSES, sizeof *pa);
    float *pb = calloc((size_t)PRED_MAX * TOY_CLASSES, sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    struct tpu_dataset_input ia, ib;
    tpu_dataset_input_init(&ia, &on.ds, 5);
    tpu_dataset_input_init(&ib, &off.ds, 5);
    uint64_t na = 0, nb = 0;
    ok(tpu_estimator_predict(on.est, &ia.input, collect_row, pa, &na, &d), &d);
    ok(tpu_estimator_predict(off.est, &ib.input, collect_row, pb, &nb, &d), &d);
    assert_true(na > 0);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, (size_t)na * TOY_CLASSES * sizeof *pa);
    tpu_dataset_input_free(&ia);
    tpu_dataset_input_free(&ib);
    free(pa);
    free(pb);

    /* back to training: the train program is loaded again on the same devices */
    train(&on, 2);
    train(&off, 2);
    assert_same(&on, &off, "training again after evaluate and predict");
    assert_same_gradients(&on, &off, "training again after evaluate and predict");

    /* a new estimator on the same device loads its programs once more */
    tpu_estimator_destroy(&on.est);
    tpu_estimator_destroy(&off.est);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = BATCH;
    cfg.eval_batch_size = BATCH;
    cfg.predict_batch_size = BATCH;
    cfg.iterations_per_loop = 2;
    cfg.seed = 7;
    ok(tpu_estimator_create(on.dev, &cfg, &on.model, NULL, 0, &on.est, &d), &d);
    ok(tpu_estimator_create(off.dev, &cfg, &off.model, NULL, 0, &off.est, &d), &d);
    train(&on, 3);
    train(&off, 3);
    assert_same(&on, &off, "a second estimator on the same device");
    assert_same_gradients(&on, &off, "a second estimator on the same device");
    run_close(&on);
    run_close(&off);
}

/* A write to one core changes that core only; the replicas then compute apart, with
 * sharing as without; writing the common value back joins them again. */
static void test_write_diverges(void **state)
{
    (void)state;
    enum { R = 4 };
    struct run on, off;
    run_open(&on, MLP, R, 1, true);
    run_open(&off, MLP, R, 1, false);
    train(&on, 2);
    train(&off, 2);
    assert_same(&on, &off, "before the write");
    size_t bytes = 0;
    const uint32_t w = first_param(&on, &bytes);
    const char *name = tpu_program_buffer(tpu_device_program(on.dev), w)->name;
    float *orig = malloc(bytes), *pert = malloc(bytes), *got = malloc(bytes);
    assert_non_null(orig);
    assert_non_null(pert);
    assert_non_null(got);
    struct tpu_diag d = {0};
    ok(tpu_device_read(on.dev, 0, w, orig, bytes, &d), &d);
    memcpy(pert, orig, bytes);
    pert[0] += 0.5f; /* replica 2 drifts */
    ok(tpu_device_write(on.dev, 2, w, pert, bytes, &d), &d);
    ok(tpu_device_write(off.dev, 2, w, pert, bytes, &d), &d);
    for (uint32_t c = 0; c < R; c++) {
        ok(tpu_device_read(on.dev, c, w, got, bytes, &d), &d);
        assert_memory_equal(got, c == 2 ? pert : orig, bytes);
    }
    /* what the equivalence check reads: replica 2's copy differs, the others do not */
    const size_t n = bytes / sizeof(float);
    for (uint32_t rep = 0; rep < R; rep++) {
        ok(tpu_estimator_read_param_replica(on.est, name, rep, got, bytes, &d), &d);
        assert_memory_equal(got, rep == 2 ? pert : orig, bytes);
    }
    assert_same(&on, &off, "after the write");
    train(&on, 2);
    train(&off, 2);
    assert_same(&on, &off, "two steps after the write");
    float *r0 = malloc(bytes);
    assert_non_null(r0);
    ok(tpu_device_read(on.dev, 0, w, r0, bytes, &d), &d);
    ok(tpu_device_read(on.dev, 2, w, got, bytes, &d), &d);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp(&r0[i], &got[i], sizeof(float)) != 0;
    assert_true(differ > 0); /* replica 2 went on from its own params */
    ok(tpu_device_read(on.dev, 1, w, got, bytes, &d), &d);
    assert_memory_equal(got, r0, bytes); /* replica 1 is replica 0's */

    /* writing every param's replica-0 value to core 2 joins the replicas again */
    const struct tpu_program *p = tpu_device_program(on.dev);
    for (uint32_t b = 0; b < tpu_program_n_buffers(p); b++) {
        if (tpu_program_buffer(p, b)->kind != TPU_BUF_PARAM)
            continue;
        const size_t nb = param_bytes(p, b);
        void *v = malloc(nb);
        assert_non_null(v);
        ok(tpu_device_read(on.dev, 0, b, v, nb, &d), &d);
        ok(tpu_device_write(on.dev, 2, b, v, nb, &d), &d);
        ok(tpu_device_read(off.dev, 0, b, v, nb, &d), &d);
        ok(tpu_device_write(off.dev, 2, b, v, nb, &d), &d);
        free(v);
    }
    train(&on, 2);
    train(&off, 2);
    assert_same(&on, &off, "after joining the replicas again");
    ok(tpu_device_read(on.dev, 0, w, r0, bytes, &d), &d);
    for (uint32_t c = 1; c < R; c++) {
        ok(tpu_device_read(on.dev, c, w, got, bytes, &d), &d);
        assert_memory_equal(got, r0, bytes);
    }
    free(r0);
    free(orig);
    free(pert);
    free(got);
    run_close(&on);
    run_close(&off);
}

/* ---- deferred products (share.c) -------------------------------------------------------- */

/* One matmul's product summed over the replicas by a streamed reduce and read only by an
 * optimizer: with sharing on, the product is deferred (the replicas' operands gathered, the
 * sum one GEMM whose K-tiles are the replicas') when it is one K-tile of one bf16 pass. */
struct defer_case {
    bool ta, tb;              /* matmul trans_a, trans_b */
    enum tpu_dtype da, db;    /* the operands' dtypes (f32 or bf16) */
    uint32_t k;               /* per-replica K: <= 8 is one tile of the tiny chip's array */
    unsigned passes;          /* 1, or 3 (not deferred) */
    bool mean;                /* reduce=mean */
    bool specials;            /* Inf, -Inf and NaN operands (see defer_operand) */
    uint32_t replicas;        /* tiny cores, one replica each; 0: DEFER_REPLICAS */
};

enum { DEFER_M = 13, DEFER_N = 21, DEFER_REPLICAS = 6, DEFER_STEPS = 3 };

/* Operand element (i, j) of op(A) (is_a) or op(B) of replica r. With specials, op(B)'s
 * row 0 is all ones and op(A)'s column 0 holds +Inf in row 1 on replica 1 and -Inf there on
 * replica 2, so every output of row 1 is +Inf on replica 1 and -Inf on replica 2, and their
 * sum is a NaN that no operand holds (the NaN an addition makes, not the canonical one);
 * replica 4 then adds a product that is a NaN there (canonical), so the sum adds two NaNs
 * (which payload wins is the adds' choice, the same on every path); and a NaN in row 2 on
 * replica 3 makes row 2's sums NaN too: 2 N NaNs. */
static float defer_operand(struct rng *g, bool is_a, uint32_t r, uint32_t i, uint32_t j,
                           bool specials)
{
    const float v = rnd_f32(g, -2.0f, 2.0f);
    if (!specials)
        return v;
    if (!is_a)
        return i == 0 ? 1.0f : v;
    if (j == 0 && i == 1 && r == 1)
        return INFINITY;
    if (j == 0 && i == 1 && r == 2)
        return -INFINITY;
    if (j == 0 && i == 2 && r == 3)
        return NAN;
    if (j == 0 && i == 1 && r == 4)
        return NAN;
    return v;
}

/* Writes replica r's operands: op(A) [M][K] and op(B) [K][N], stored as the case says. */
static void defer_write(struct tpu_device *dev, uint32_t core, uint32_t a_id, uint32_t b_id,
                        const struct defer_case *dc, uint64_t seed)
{
    struct rng g = {seed};
    const uint32_t M = DEFER_M, N = DEFER_N, K = dc->k;
    float *a = malloc((size_t)M * K * sizeof *a), *b = malloc((size_t)K * N * sizeof *b);
    tpu_bf16 *h = malloc((size_t)(M > N ? M : N) * K * sizeof *h);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(h);
    for (uint32_t i = 0; i < M; i++) /* op(A)[i][kk] at its stored place */
        for (uint32_t kk = 0; kk < K; kk++)
            a[dc->ta ? kk * M + i : i * K + kk] = defer_operand(&g, true, core, i, kk,
                                                                dc->specials);
    for (uint32_t kk = 0; kk < K; kk++)
        for (uint32_t j = 0; j < N; j++)
            b[dc->tb ? j * K + kk : kk * N + j] = defer_operand(&g, false, core, kk, j,
                                                                dc->specials);
    struct tpu_diag d = {0};
    const uint32_t ids[2] = {a_id, b_id};
    const float *vals[2] = {a, b};
    const enum tpu_dtype dts[2] = {dc->da, dc->db};
    const size_t counts[2] = {(size_t)M * K, (size_t)K * N};
    for (int o = 0; o < 2; o++) {
        if (dts[o] == TPU_BF16) {
            for (size_t e = 0; e < counts[o]; e++)
                h[e] = tpu_bf16_from_f32(vals[o][e]);
            ok(tpu_device_write(dev, core, ids[o], h, counts[o] * sizeof *h, &d), &d);
        } else {
            ok(tpu_device_write(dev, core, ids[o], vals[o], counts[o] * sizeof(float), &d),
               &d);
        }
    }
    free(a);
    free(b);
    free(h);
}

static uint32_t defer_replicas(const struct defer_case *dc)
{
    return dc->replicas ? dc->replicas : DEFER_REPLICAS;
}

/* The program of a case on a device of defer_replicas(dc) tiny cores, sharing on or off. */
static struct tpu_device *defer_open(const struct defer_case *dc, bool share,
                                     struct tpu_program **prog)
{
    char text[1024];
    const uint32_t M = DEFER_M, N = DEFER_N, K = dc->k;
    snprintf(text, sizeof text,
             "program deferred\n"
             "param a: %s[%u, %u]\n"
             "param b: %s[%u, %u]\n"
             "param w: f32[%u, %u]\n"
             "param v: f32[%u, %u]\n"
             "temp g: f32[%u, %u]\n"
             "g = matmul a, b%s%s passes=%u\n"
             "g = all_reduce g reduce=%s\n"
             "w, v = sgd_momentum g alpha=0.5 beta=0.9\n",
             tpu_dtype_name(dc->da), dc->ta ? K : M, dc->ta ? M : K, tpu_dtype_name(dc->db),
             dc->tb ? N : K, dc->tb ? K : N, M, N, M, N, M, N, dc->ta ? " trans_a" : "",
             dc->tb ? " trans_b" : "", dc->passes, dc->mean ? "mean" : "sum");
    struct tpu_diag d = {0};
    ok(tpu_program_parse(text, "deferred", prog, &d), &d);
    struct tpu_chip_config chip;
    ok(tpu_config_load_preset("tiny", &chip, &d), &d);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.share_replicas = share;
    s.n_chips = defer_replicas(dc) / chip.cores_per_chip;
    s.n_threads = 2;
    s.op_stats = true;
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&s, &dev, &d), &d);
    ok(tpu_device_load(dev, *prog, &d), &d);
    return dev;
}

/* Reads buffer `name` of every core of both devices and asserts the same bytes; returns how
 * many of the leader's values are NaN. */
static size_t defer_same(struct tpu_device *on, struct tpu_device *off,
                         const struct tpu_program *p, const char *name, const char *when,
                         uint32_t n_cores)
{
    uint32_t id;
    assert_int_equal(tpu_program_find_buffer(p, name, &id), 0);
    const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(p, id));
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    assert_non_null(x);
    assert_non_null(y);
    struct tpu_diag d = {0};
    size_t nans = 0;
    for (uint32_t c = 0; c < n_cores; c++) {
        ok(tpu_device_read(on, c, id, x, bytes, &d), &d);
        ok(tpu_device_read(off, c, id, y, bytes, &d), &d);
        if (memcmp(x, y, bytes) != 0) {
            size_t i = 0;
            while (x[i] == y[i])
                i++;
            uint32_t bx, by;
            memcpy(&bx, x + i / 4 * 4, 4);
            memcpy(&by, y + i / 4 * 4, 4);
            fail_msg("%s: '%s' on core %u differs first at element %zu: 0x%08x shared, "
                     "0x%08x apart", when, name, c, i / 4, bx, by);
        }
        if (c == 0)
            for (size_t e = 0; e < bytes / 4; e++) {
                float f;
                memcpy(&f, x + 4 * e, 4);
                nans += f != f;
            }
    }
    free(x);
    free(y);
    return nans;
}

static void defer_check(const struct defer_case *dc)
{
    struct tpu_program *p_on = NULL, *p_off = NULL;
    struct tpu_device *on = defer_open(dc, true, &p_on), *off = defer_open(dc, false, &p_off);
    uint32_t a_id, b_id;
    assert_int_equal(tpu_program_find_buffer(p_on, "a", &a_id), 0);
    assert_int_equal(tpu_program_find_buffer(p_on, "b", &b_id), 0);
    struct tpu_diag d = {0};
    size_t nans = 0;
    const uint32_t n_rep = defer_replicas(dc);
    for (int step = 0; step < DEFER_STEPS; step++) {
        /* new operands on every replica, as a step's activations and gradients are */
        for (uint32_t c = 0; c < n_rep; c++) {
            const uint64_t seed = 1000u * (uint64_t)step + c + 1;
            defer_write(on, c, a_id, b_id, dc, seed);
            defer_write(off, c, a_id, b_id, dc, seed);
        }
        ok(tpu_device_run(on, 0, NULL, &d), &d);
        ok(tpu_device_run(off, 0, NULL, &d), &d);
        char when[96];
        snprintf(when, sizeof when, "K %u%s%s %s x %s, step %d", dc->k, dc->ta ? " trans_a" : "",
                 dc->tb ? " trans_b" : "", tpu_dtype_name(dc->da), tpu_dtype_name(dc->db),
                 step);
        nans += defer_same(on, off, p_on, "g", when, n_rep);
        defer_same(on, off, p_on, "w", when, n_rep);
        defer_same(on, off, p_on, "v", when, n_rep);
        for (uint32_t c = 0; c < n_rep; c++) {
            struct tpu_core_counters ca, cb;
            assert_int_equal(tpu_device_counters(on, c, &ca), 0);
            assert_int_equal(tpu_device_counters(off, c, &cb), 0);
            assert_memory_equal(&ca, &cb, sizeof ca);
        }
    }
    if (dc->specials) /* rows 1 and 2 of every step's sum, and no others */
        assert_int_equal(nans, 2 * DEFER_N * DEFER_STEPS);
    else
        assert_int_equal(nans, 0);
    tpu_device_close(&on);
    tpu_device_close(&off);
    tpu_program_destroy(&p_on);
    tpu_program_destroy(&p_off);
}

/* Every layout and dtype of the operands, K = 1 and a full tile, sum and mean: the same
 * bytes shared (deferred) as apart. */
static void test_deferred_products(void **state)
{
    (void)state;
    for (int layout = 0; layout < 4; layout++)
        for (int types = 0; types < 3; types++)
            for (uint32_t k = 1; k <= 8; k += 7) {
                const struct defer_case dc = {
                    .ta = layout & 1, .tb = layout >> 1,
                    .da = types == 1 ? TPU_BF16 : TPU_F32,
                    .db = types == 2 ? TPU_BF16 : TPU_F32,
                    .k = k, .passes = 1, .mean = layout == 2};
                defer_check(&dc);
            }
}

/* Inf, -Inf and NaN among the operands: a sum whose NaN the additions made (not an
 * operand's) has a payload the deferred GEMM would canonicalise where the streamed adds do
 * not, so the sum is done product by product; the bytes are the apart run's. */
static void test_deferred_products_nan(void **state)
{
    (void)state;
    for (int layout = 0; layout < 4; layout++) {
        const struct defer_case dc = {.ta = layout & 1, .tb = layout >> 1, .da = TPU_F32,
                                      .db = TPU_F32, .k = 5, .passes = 1, .specials = true};
        defer_check(&dc);
    }
}

/* A deferred sum longer than the GEMM's K chunks: 60 replicas of K = 7 (420 rows of the
 * gathered operands, past a 384-row chunk, with a replica's tile across the boundary), sum
 * and mean, with and without specials. */
static void test_deferred_across_chunks(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        const struct defer_case dc = {.ta = v == 1, .da = TPU_F32, .db = v == 2 ? TPU_BF16
                                                                                 : TPU_F32,
                                      .k = 7, .passes = 1, .mean = v == 1, .specials = v == 0,
                                      .replicas = 60};
        defer_check(&dc);
    }
}

/* Products that are not deferred (K beyond one tile, three passes) stay equal as well. */
static void test_products_not_deferred(void **state)
{
    (void)state;
    const struct defer_case more_k = {.ta = true, .da = TPU_F32, .db = TPU_F32, .k = 11,
                                      .passes = 1};
    defer_check(&more_k);
    const struct defer_case passes3 = {.ta = true, .da = TPU_F32, .db = TPU_F32, .k = 5,
                                       .passes = 3};
    defer_check(&passes3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_1x1), cmocka_unit_test(test_mlp_2x1),
        cmocka_unit_test(test_mlp_8x1), cmocka_unit_test(test_mlp_1x2),
        cmocka_unit_test(test_mlp_2x2), cmocka_unit_test(test_mlp_8x2),
        cmocka_unit_test(test_cnn_1x1), cmocka_unit_test(test_cnn_2x1),
        cmocka_unit_test(test_cnn_8x1), cmocka_unit_test(test_cnn_1x2),
        cmocka_unit_test(test_cnn_2x2), cmocka_unit_test(test_cnn_8x2),
        cmocka_unit_test(test_bn_1x1), cmocka_unit_test(test_bn_8x1),
        cmocka_unit_test(test_bn_2x2),
        cmocka_unit_test(test_write_diverges),
        cmocka_unit_test(test_eval_predict_and_reload),
        cmocka_unit_test(test_deferred_products),
        cmocka_unit_test(test_deferred_products_nan),
        cmocka_unit_test(test_deferred_across_chunks),
        cmocka_unit_test(test_products_not_deferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
