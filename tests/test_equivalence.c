/* The equivalence check (include/tpusim/equivalence.h): data parallelism on 1, 2, 4 and 8
 * cores equals one core on the global batch, for an MLP and a small CNN (convolution, max
 * pool, dropout, dense); the check catches a sharding error (a loss scaled by the per-replica
 * batch) and a model that is not data parallel (per-replica batch norm); its refusals; and
 * the two runtime calls it stands on (tpu_loop_info.global_loss, tpu_estimator_write_param).
 *
 * The bounds are the library's (tpu_equivalence_bound_of): the loss of a step from the same
 * params within 2 gamma(G + 1), a theorem; the params within 2^-10 of their largest value,
 * a budget (host/shard/equivalence.c says why). Where a test asserts more than "within", it
 * asserts the exact value: one replica of one core is bit for bit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/equivalence.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"
#include "net_build.h"
#include "toy_dataset.h"

enum { BATCH = 16, STEPS = 4 };

/* What the callback saw, step by step. */
struct seen {
    struct tpu_equivalence_step steps[16];
    uint32_t n;
    struct tpu_equivalence_bound bound;
    int fail_at; /* a step at which the callback stops the check (0: never) */
};

static int on_step(void *ctx, const struct tpu_equivalence_report *so_far,
                   const struct tpu_equivalence_step *st, struct tpu_diag *d)
{
    struct seen *s = ctx;
    s->bound = so_far->bound;
    if (s->n < 16)
        s->steps[s->n++] = *st;
    if (s->fail_at && (int)st->step == s->fail_at) {
        snprintf(d->msg, sizeof d->msg, "stopped by the caller at step %llu",
                 (unsigned long long)st->step);
        return TPU_EIO;
    }
    return 0;
}

/* The tiny chip with `cores` cores: 2 per chip, or one chip of one core. */
static void device_of(struct tpu_device_settings *s, uint32_t cores)
{
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    ok(tpu_config_load_preset("tiny", &chip, &d), &d);
    if (cores == 1)
        chip.cores_per_chip = 1;
    tpu_device_default_settings(s, &chip);
    s->n_chips = cores == 1 ? 1 : cores / chip.cores_per_chip;
    s->n_threads = 2;
}

struct fixture {
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    struct tpu_mlp_spec spec;
    struct tpu_net *net;
    struct tpu_train_spec tspec;
    struct tpu_equivalence_settings s;
    struct seen seen;
};

static void fixture_init(struct fixture *f, uint32_t cores)
{
    memset(f, 0, sizeof *f);
    toy_dataset(&f->ds, 256, 3);
    tpu_dataset_input_init(&f->in, &f->ds, 5);
    device_of(&f->s.device, cores);
    tpu_run_config_default(&f->s.run);
    f->s.run.train_batch_size = BATCH;
    f->s.run.seed = 7;
    f->s.input = &f->in.input;
    f->s.steps = STEPS;
    f->s.on_step = on_step;
    f->s.ctx = &f->seen;
}

static void fixture_mlp(struct fixture *f)
{
    tpu_mlp_default_spec(&f->spec);
    f->spec.n_layers = 2;
    f->spec.sizes[0] = TOY_FEATURES;
    f->spec.sizes[1] = 12;
    f->spec.sizes[2] = TOY_CLASSES;
    f->spec.optimizer = TPU_OPT_ADAM;
    f->spec.learning_rate = 0.01f;
    tpu_mlp_model(&f->s.model, &f->spec);
}

/* A small CNN on the toy set's 4x4 images: conv 3x3 (same) relu, max pool 2x2, dropout,
 * flatten, dense; with per-replica batch_norm (no bias before it) when bn is set. */
static void fixture_cnn(struct fixture *f, bool bn)
{
    f->net = new_net(4, 4, 1);
    uint32_t x = conv(f->net, 0, 6, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, !bn);
    if (bn)
        x = batch_norm(f->net, x, false);
    x = pool(f->net, TPU_LAYER_MAX_POOL2D, x, 2, 2, 2, 2, TPU_PADDING_VALID);
    x = dropout(f->net, x, 0.25f);
    x = unary(f->net, TPU_LAYER_FLATTEN, x);
    x = dense(f->net, x, TOY_CLASSES, TPU_ACT_NONE);
    output(f->net, x, TPU_LOSS_SOFTMAX_XENT);
    tpu_train_spec_default(&f->tspec);
    f->tspec.learning_rate = 0.01f;
    f->tspec.seed = 7;
    struct tpu_diag d = {0};
    ok(tpu_net_model(&f->s.model, f->net, &f->tspec, &d), &d);
}

static void fixture_free(struct fixture *f)
{
    tpu_dataset_input_free(&f->in);
    tpu_dataset_free(&f->ds);
    tpu_net_destroy(&f->net);
}

/* Runs the check and asserts what holds on every configuration of `cores` cores, P of them
 * a replica. */
static void check_ok_p(struct fixture *f, uint32_t cores, uint32_t P,
                       struct tpu_equivalence_report *r)
{
    struct tpu_diag d = {0};
    int rc = tpu_equivalence_check(&f->s, r, &d);
    if (rc)
        fail_msg("equivalence check on %u cores, %u a replica: %s", cores, P, d.msg);
    assert_int_equal(r->n_cores, cores);
    assert_int_equal(r->n_replicas, cores / P);
    assert_int_equal(r->cores_per_replica, P);
    assert_int_equal(r->steps, STEPS);
    assert_int_equal(f->seen.n, STEPS);
    for (uint32_t i = 0; i < STEPS; i++) {
        const struct tpu_equivalence_step *st = &f->seen.steps[i];
        assert_int_equal(st->step, i + 1);
        assert_true(isfinite(st->loss_single) && st->loss_single > 0);
        if (!st->within)
            fail_msg("%u cores, step %u: loss %.9g vs %.9g (rel %.3g, bound %.3g), params rel "
                     "%.3g in %s (bound %.3g)", cores, i + 1, (double)st->loss_sharded,
                     (double)st->loss_single, st->loss_rel, r->bound.loss_rel, st->param_rel,
                     st->worst_param, r->bound.param_rel);
    }
    assert_int_equal(r->steps_outside, 0);
    if (cores == 1) {
        /* one replica of one core: the same operations, so bit for bit */
        assert_true(r->bound.exact);
        for (uint32_t i = 0; i < STEPS; i++) {
            assert_true(f->seen.steps[i].loss_abs == 0);
            assert_true(f->seen.steps[i].param_abs == 0);
            assert_string_equal(f->seen.steps[i].worst_param, "");
        }
    } else if (P == 1) {
        assert_false(r->bound.exact);
        /* 2 gamma(G + 1), gamma(n) = n u / (1 - n u), u = 2^-24 */
        const double u = ldexp(1.0, -24), n = BATCH + 1;
        assert_true(r->bound.loss_rel == 2 * (n * u / (1 - n * u)));
        assert_true(r->bound.param_rel == ldexp(1.0, -10));
    } else {
        assert_true(r->bound.loss_rel == TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL); /* the lowering's */
        assert_true(r->bound.param_rel == ldexp(1.0, -10));
    }
}

static void check_ok(struct fixture *f, uint32_t cores, struct tpu_equivalence_report *r)
{
    check_ok_p(f, cores, 1, r);
}

static void mlp_on(uint32_t cores)
{
    struct fixture f;
    fixture_init(&f, cores);
    fixture_mlp(&f);
    struct tpu_equivalence_report r;
    check_ok(&f, cores, &r);
    assert_int_equal(r.n_params, 12); /* w0 b0 w1 b1, each with Adam's m and v */
    assert_int_equal(r.n_param_values, 3 * (16 * 12 + 12 + 12 * 4 + 4));
    fixture_free(&f);
}

static void test_mlp_1_core(void **state) { (void)state; mlp_on(1); }
static void test_mlp_2_cores(void **state) { (void)state; mlp_on(2); }
static void test_mlp_4_cores(void **state) { (void)state; mlp_on(4); }
static void test_mlp_8_cores(void **state) { (void)state; mlp_on(8); }

static void cnn_on(uint32_t cores)
{
    struct fixture f;
    fixture_init(&f, cores);
    fixture_cnn(&f, false);
    struct tpu_equivalence_report r;
    check_ok(&f, cores, &r);
    fixture_free(&f);
}

static void test_cnn_1_core(void **state) { (void)state; cnn_on(1); }
static void test_cnn_2_cores(void **state) { (void)state; cnn_on(2); }
static void test_cnn_4_cores(void **state) { (void)state; cnn_on(4); }
static void test_cnn_8_cores(void **state) { (void)state; cnn_on(8); }

/* ---- model parallelism (host/models/net_lower_part.c) ----------------------------------- */

/* P cores a replica. */
static void model_parallel(struct fixture *f, uint32_t P)
{
    f->s.device.cores_per_replica = P;
    f->s.run.num_cores_per_replica = P;
}

/* The MLP's dense layers split over the cores of a replica (columns, then rows). */
static void mlp_split(uint32_t cores, uint32_t P)
{
    struct fixture f;
    fixture_init(&f, cores);
    fixture_mlp(&f);
    model_parallel(&f, P);
    struct tpu_equivalence_report r;
    check_ok_p(&f, cores, P, &r);
    assert_int_equal(r.n_params, 12); /* the whole params, as on one core */
    fixture_free(&f);
}

static void test_mlp_split_2_cores(void **state) { (void)state; mlp_split(2, 2); }
static void test_mlp_split_4_cores(void **state) { (void)state; mlp_split(4, 4); }
static void test_mlp_split_2x2_cores(void **state) { (void)state; mlp_split(4, 2); }

/* A CNN spatially partitioned: features dims [1, P, 1, 1] cut the 4x4 images by rows; the
 * 3x3 convolution exchanges halo rows; dropout keyed by the global element; flatten of 4
 * rows into a dense layer split by rows. */
static void cnn_spatial(uint32_t cores, uint32_t P)
{
    struct fixture f;
    fixture_init(&f, cores);
    f.net = new_net(4, 4, 1);
    uint32_t x = conv(f.net, 0, 6, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, true);
    x = dropout(f.net, x, 0.25f);
    x = unary(f.net, TPU_LAYER_FLATTEN, x);
    x = dense(f.net, x, TOY_CLASSES, TPU_ACT_NONE);
    output(f.net, x, TPU_LOSS_SOFTMAX_XENT);
    tpu_train_spec_default(&f.tspec);
    f.tspec.learning_rate = 0.01f;
    f.tspec.seed = 7;
    struct tpu_diag d = {0};
    ok(tpu_net_model(&f.s.model, f.net, &f.tspec, &d), &d);
    model_parallel(&f, P);
    f.s.run.n_input_partition_dims = 1;
    f.s.run.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, P, 1, 1}};
    struct tpu_equivalence_report r;
    check_ok_p(&f, cores, P, &r);
    fixture_free(&f);
}

static void test_cnn_spatial_2_cores(void **state) { (void)state; cnn_spatial(2, 2); }
static void test_cnn_spatial_4_cores(void **state) { (void)state; cnn_spatial(4, 4); }
static void test_cnn_spatial_2x2_cores(void **state) { (void)state; cnn_spatial(4, 2); }

/* Batch norm with each replica's own statistics is another model (TPUEstimator's default
 * tf.layers batch norm does this): the check must say so, at the first step. */
static void test_per_replica_batch_norm_is_caught(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    fixture_cnn(&f, true);
    f.s.steps = 2;
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    ok(tpu_equivalence_check(&f.s, &r, &d), &d);
    assert_int_equal(r.steps, 2);
    assert_int_equal(r.steps_outside, 2);
    assert_false(f.seen.steps[0].within);
    assert_true(f.seen.steps[0].param_rel > r.bound.param_rel);
    assert_true(f.seen.steps[0].worst_param[0] != '\0');
    fixture_free(&f);
}

/* A sharding error: a model that scales the loss by the per-replica batch instead of the
 * global one (so the all-reduce sums R means: gradients R times too large). */
static int bad_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                     struct tpu_model_program *out, struct tpu_diag *d)
{
    const struct tpu_model *inner = ctx;
    struct tpu_build_shape wrong = *shape;
    wrong.global_batch = shape->batch_per_replica;
    wrong.n_replicas = 1;
    return inner->build(inner->ctx, mode, &wrong, out, d);
}

static void bad_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                     uint64_t seed)
{
    const struct tpu_model *inner = ctx;
    inner->init_param(inner->ctx, name, rows, cols, data, seed);
}

static void test_sharding_error_is_caught(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    fixture_mlp(&f);
    struct tpu_model inner = f.s.model;
    f.s.model = (struct tpu_model){.ctx = &inner, .build = bad_build, .init_param = bad_init};
    f.s.steps = 3;
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    ok(tpu_equivalence_check(&f.s, &r, &d), &d);
    assert_int_equal(r.steps, 3);
    assert_int_equal(r.steps_outside, 3);
    /* the sharded loss is the sum of two replicas' means: twice the one-core mean, to
     * rounding (the first step starts from the same params) */
    const struct tpu_equivalence_step *s1 = &f.seen.steps[0];
    assert_false(s1->within);
    assert_true(fabs(s1->loss_rel - 1.0) < 1e-5);
    assert_true(fabs((double)s1->loss_sharded - 2.0 * s1->loss_single) <
                1e-5 * s1->loss_single);
    fixture_free(&f);
}

/* The one-core run is the plain one-core estimator on the global batch: its loss and params
 * after the check's steps are those of a separate run, bit for bit. */
static void test_single_run_is_the_plain_run(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    fixture_mlp(&f);
    f.s.steps = 3;
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    ok(tpu_equivalence_check(&f.s, &r, &d), &d);

    struct tpu_device_settings one;
    device_of(&one, 1);
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&one, &dev, &d), &d);
    struct tpu_run_config rc = f.s.run;
    rc.iterations_per_loop = 1;
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &rc, &f.s.model, NULL, 0, &est, &d), &d);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &f.ds, 5);
    for (uint32_t s = 0; s < 3; s++) {
        ok(tpu_estimator_train(est, &in.input, 1, 0, &d), &d);
        const struct tpu_loop_info *li = tpu_estimator_last_info(est);
        /* one replica: the global batch's loss is replica 0's */
        assert_true(li->global_loss == li->loss);
        assert_true(li->global_loss == f.seen.steps[s].loss_single);
    }
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    fixture_free(&f);
}

/* global_loss sums every replica's share: with 4 replicas it is the one-core loss to
 * rounding, while `loss` (replica 0's mean) is another number. */
static void test_global_loss_sums_the_replicas(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    fixture_mlp(&f);
    struct tpu_diag d = {0};
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&f.s.device, &dev, &d), &d);
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &f.s.run, &f.s.model, NULL, 0, &est, &d), &d);
    ok(tpu_estimator_train(est, &f.in.input, 1, 0, &d), &d);
    const struct tpu_loop_info *li = tpu_estimator_last_info(est);
    const float g4 = li->global_loss, r0 = li->loss;
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);

    struct tpu_device_settings one;
    device_of(&one, 1);
    ok(tpu_device_open(&one, &dev, &d), &d);
    ok(tpu_estimator_create(dev, &f.s.run, &f.s.model, NULL, 0, &est, &d), &d);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &f.ds, 5);
    ok(tpu_estimator_train(est, &in.input, 1, 0, &d), &d);
    const float g1 = tpu_estimator_last_info(est)->global_loss;
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    struct tpu_equivalence_bound b;
    tpu_equivalence_bound_of(4, 1, BATCH, false, &b);
    assert_true(fabs((double)g4 - g1) <= b.loss_rel * g1);
    assert_true(r0 != g4); /* replica 0's 4 examples are not the 16 */
    fixture_free(&f);
}

/* write_param sets a param that read_param then gives, and the next step starts from it. */
static void test_write_param(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    fixture_mlp(&f);
    struct tpu_diag d = {0};
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&f.s.device, &dev, &d), &d);
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &f.s.run, &f.s.model, NULL, 0, &est, &d), &d);
    float b0[12];
    assert_int_equal(tpu_estimator_write_param(est, "b0", b0, sizeof b0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "no params yet"));
    ok(tpu_estimator_train(est, &f.in.input, 1, 0, &d), &d);
    for (int i = 0; i < 12; i++)
        b0[i] = 0.25f * (float)i;
    ok(tpu_estimator_write_param(est, "b0", b0, sizeof b0, &d), &d);
    float back[12];
    ok(tpu_estimator_read_param(est, "b0", back, sizeof back, &d), &d);
    assert_memory_equal(back, b0, sizeof b0);
    assert_int_equal(tpu_estimator_write_param(est, "b0", b0, 4, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "param 'b0' is [1, 12] f32: 48 bytes, not 4"));
    assert_int_equal(tpu_estimator_write_param(est, "nope", b0, 4, &d), TPU_ENOTFOUND);
    assert_non_null(strstr(d.msg, "no param 'nope'"));
    /* the next step starts from the value written: b0 moves from it by at most Adam's step
     * of the learning rate (0.01) per element */
    ok(tpu_estimator_train(est, &f.in.input, 1, 0, &d), &d);
    ok(tpu_estimator_read_param(est, "b0", back, sizeof back, &d), &d);
    for (int i = 0; i < 12; i++)
        assert_true(fabsf(back[i] - b0[i]) <= 0.0101f);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    fixture_free(&f);
}

/* Free-running, the runs go on from their own params; a few steps of the MLP stay within. */
static void test_free_running(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    fixture_mlp(&f);
    f.s.free_running = true;
    struct tpu_equivalence_report r;
    check_ok(&f, 4, &r);
    assert_true(r.bound.loss_rel_later == ldexp(1.0, -12));
    assert_non_null(strstr(r.bound.why, "free-running"));
    fixture_free(&f);
}

/* The bounds by configuration, exactly. */
static void test_bounds(void **state)
{
    (void)state;
    struct tpu_equivalence_bound b;
    const double u = ldexp(1.0, -24);
    tpu_equivalence_bound_of(1, 1, 64, false, &b);
    assert_true(b.exact && b.loss_rel == 0 && b.param_rel == 0);
    assert_non_null(strstr(b.why, "bit for bit"));
    tpu_equivalence_bound_of(8, 1, 64, false, &b);
    assert_false(b.exact);
    assert_true(b.loss_rel == 2 * (65 * u / (1 - 65 * u)) && b.loss_rel_later == b.loss_rel);
    assert_true(b.param_rel == ldexp(1.0, -10));
    assert_non_null(strstr(b.why, "data parallelism over 8 replicas"));
    tpu_equivalence_bound_of(8, 1, 64, true, &b);
    assert_true(b.loss_rel_later == ldexp(1.0, -12));
    /* model parallelism: the partitioned lowering's 5e-5 on the loss */
    tpu_equivalence_bound_of(1, 4, 64, false, &b);
    assert_true(b.loss_rel == 5e-5 && b.loss_rel_later == 5e-5);
    assert_true(b.loss_rel == TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL);
    assert_true(b.param_rel == ldexp(1.0, -10));
    assert_non_null(strstr(b.why, "model parallelism over 4 cores a replica (1 replica)"));
    tpu_equivalence_bound_of(2, 2, 64, false, &b);
    assert_non_null(strstr(b.why, "model parallelism over 2 cores a replica (2 replicas)"));
}

/* In BROADCAST every replica sees the whole global batch and scales its loss by
 * 1 / (G * R): global_loss adds the R shares up to the mean, the one-core loss to rounding. */
static void test_broadcast_global_loss_is_the_mean(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 4);
    fixture_mlp(&f);
    f.s.run.per_host_input_for_training = TPU_BROADCAST;
    struct tpu_diag d = {0};
    struct tpu_device *dev = NULL;
    ok(tpu_device_open(&f.s.device, &dev, &d), &d);
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &f.s.run, &f.s.model, NULL, 0, &est, &d), &d);
    ok(tpu_estimator_train(est, &f.in.input, 1, 0, &d), &d);
    const float g4 = tpu_estimator_last_info(est)->global_loss;
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    struct tpu_device_settings one;
    device_of(&one, 1);
    f.s.run.per_host_input_for_training = TPU_PER_HOST_V2;
    ok(tpu_device_open(&one, &dev, &d), &d);
    ok(tpu_estimator_create(dev, &f.s.run, &f.s.model, NULL, 0, &est, &d), &d);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &f.ds, 5);
    ok(tpu_estimator_train(est, &in.input, 1, 0, &d), &d);
    const float g1 = tpu_estimator_last_info(est)->global_loss;
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    /* each replica sums the same 16 terms in the same order, scaled by 1 / 64; four such
     * shares add up to the one-core mean within a few roundings */
    assert_true(fabs((double)g4 - g1) <= 8 * ldexp(1.0, -24) * g1);
    fixture_free(&f);
}

static void expect_refusal(struct fixture *f, int code, const char *text)
{
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_equivalence_check(&f->s, &r, &d), code);
    if (!strstr(d.msg, text))
        fail_msg("expected '%s' in: %s", text, d.msg);
    assert_int_equal(f->seen.n, 0);
}

static void test_refusals(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    fixture_mlp(&f);
    f.s.run.per_host_input_for_training = TPU_BROADCAST;
    expect_refusal(&f, TPU_EINVAL, "BROADCAST gives every replica the whole global batch");
    f.s.run.per_host_input_for_training = TPU_PER_HOST_V2;
    snprintf(f.s.run.model_dir, sizeof f.s.run.model_dir, "/tmp/somewhere");
    expect_refusal(&f, TPU_EINVAL, "model_dir '/tmp/somewhere' is set");
    f.s.run.model_dir[0] = '\0';
    f.s.device.timing_only = true;
    expect_refusal(&f, TPU_EINVAL, "a timing-only device computes no values");
    f.s.device.timing_only = false;
    f.s.steps = 0;
    expect_refusal(&f, TPU_EINVAL, "steps is 0");
    f.s.steps = 2;
    f.s.run.train_batch_size = 15; /* not divisible by the 2 replicas */
    expect_refusal(&f, TPU_EINVAL, "the sharded device: train_batch_size 15 must be divisible");
    fixture_free(&f);
}

/* The input ends before the steps asked: an error that says after how many. */
static void test_input_ends(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    fixture_mlp(&f);
    f.in.max_examples = 2 * BATCH + 3;
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_equivalence_check(&f.s, &r, &d), TPU_ERANGE);
    assert_string_equal(d.msg, "equivalence check: the training input ended after 2 full "
                        "global batches of 16, before the 4 steps asked; give fewer steps or "
                        "a longer input");
    assert_int_equal(r.steps, 2);
    fixture_free(&f);
}

/* The caller's callback stops the check with its error. */
static void test_callback_stops(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, 2);
    fixture_mlp(&f);
    f.seen.fail_at = 2;
    struct tpu_equivalence_report r;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_equivalence_check(&f.s, &r, &d), TPU_EIO);
    assert_string_equal(d.msg, "stopped by the caller at step 2");
    assert_int_equal(r.steps, 2);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_1_core),
        cmocka_unit_test(test_mlp_2_cores),
        cmocka_unit_test(test_mlp_4_cores),
        cmocka_unit_test(test_mlp_8_cores),
        cmocka_unit_test(test_cnn_1_core),
        cmocka_unit_test(test_cnn_2_cores),
        cmocka_unit_test(test_cnn_4_cores),
        cmocka_unit_test(test_cnn_8_cores),
        cmocka_unit_test(test_mlp_split_2_cores),
        cmocka_unit_test(test_mlp_split_4_cores),
        cmocka_unit_test(test_mlp_split_2x2_cores),
        cmocka_unit_test(test_cnn_spatial_2_cores),
        cmocka_unit_test(test_cnn_spatial_4_cores),
        cmocka_unit_test(test_cnn_spatial_2x2_cores),
        cmocka_unit_test(test_per_replica_batch_norm_is_caught),
        cmocka_unit_test(test_sharding_error_is_caught),
        cmocka_unit_test(test_single_run_is_the_plain_run),
        cmocka_unit_test(test_global_loss_sums_the_replicas),
        cmocka_unit_test(test_write_param),
        cmocka_unit_test(test_free_running),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_broadcast_global_loss_is_the_mean),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_input_ends),
        cmocka_unit_test(test_callback_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
