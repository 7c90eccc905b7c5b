/* A short training run's outcome, for the tests that compare a backend with the native chip
 * (test_device_backend.c: a wrapping backend; test_systemc_backend.c: the SystemC one). The
 * including file includes cmocka.h and the tpusim headers first. */
#ifndef TPUSIM_TESTS_BACKEND_OUTCOME_H
#define TPUSIM_TESTS_BACKEND_OUTCOME_H

#include <string.h>

#include "toy_dataset.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"

enum {
    FEATURES = TOY_FEATURES,
    HIDDEN = 12,
    CLASSES = TOY_CLASSES,
    STEPS = 10,
    IPL = 4,
    MAX_CORES = 8
};

/* Everything a run produced that a backend could change. */
struct outcome {
    float step_loss[STEPS];         /* replica 0's loss at each global step (host calls) */
    uint64_t host_call_steps[STEPS];
    int n_host_calls;
    float loop_loss[8];
    uint64_t loop_step[8];
    double loop_device_s[8];
    int n_loops;
    float w0[FEATURES * HIDDEN], b0[HIDDEN], w1[HIDDEN * CLASSES], b1[CLASSES];
    struct tpu_eval_result eval;
    uint32_t n_cores;
    struct tpu_core_counters ctr[MAX_CORES];
    char *trace;                    /* the timeline file's text (when the test writes one) */
    size_t trace_bytes;
};

static int on_host_call(void *ctx, uint64_t step, float loss, struct tpu_diag *d)
{
    struct outcome *o = ctx;
    (void)d;
    if (o->n_host_calls < STEPS) {
        o->host_call_steps[o->n_host_calls] = step;
        o->step_loss[o->n_host_calls++] = loss;
    }
    return 0;
}

static int on_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct outcome *o = ctx;
    (void)d;
    if (li->mode == TPU_MODE_TRAIN && o->n_loops < 8) {
        o->loop_loss[o->n_loops] = li->loss;
        o->loop_step[o->n_loops] = li->global_step;
        o->loop_device_s[o->n_loops++] = li->device_seconds;
    }
    return 0;
}

static void read_param(struct tpu_estimator *est, const char *name, float *data, size_t bytes)
{
    struct tpu_diag d = {0};
    if (tpu_estimator_read_param(est, name, data, bytes, &d) != 0)
        fail_msg("read_param %s: %s", name, d.msg);
}

/* Trains the MLP for STEPS steps on dev (Adam, iterations_per_loop IPL, host calls every
 * step), evaluates it once, and keeps what came out in *o (zeroed by the caller); `who`
 * names the backend in messages. The device stays open. */
static void outcome_train(struct tpu_device *dev, const char *who, struct outcome *o)
{
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = 16;
    cfg.eval_batch_size = 16;
    cfg.iterations_per_loop = IPL;
    cfg.host_call_every_n_steps = 1;
    cfg.seed = 7;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 2;
    spec.sizes[0] = FEATURES;
    spec.sizes[1] = HIDDEN;
    spec.sizes[2] = CLASSES;
    spec.optimizer = TPU_OPT_ADAM;
    spec.learning_rate = 0.01f;
    struct tpu_model model;
    tpu_mlp_model(&model, &spec);
    struct tpu_hook hook = {.ctx = o, .after_loop = on_loop, .host_call = on_host_call};
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    if (tpu_estimator_create(dev, &cfg, &model, &hook, 1, &est, &d) != 0)
        fail_msg("estimator on %s: %s", who, d.msg);
    struct tpu_dataset ds;
    toy_dataset(&ds, 200, 1);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &ds, 3);
    if (tpu_estimator_train(est, &in.input, STEPS, 0, &d) != 0)
        fail_msg("train on %s: %s", who, d.msg);
    if (tpu_estimator_evaluate(est, &in.input, 0, &o->eval, &d) != 0)
        fail_msg("evaluate on %s: %s", who, d.msg);
    read_param(est, "w0", o->w0, sizeof o->w0);
    read_param(est, "b0", o->b0, sizeof o->b0);
    read_param(est, "w1", o->w1, sizeof o->w1);
    read_param(est, "b1", o->b1, sizeof o->b1);
    o->n_cores = tpu_device_n_cores(dev);
    assert_true(o->n_cores <= MAX_CORES);
    for (uint32_t c = 0; c < o->n_cores; c++)
        assert_int_equal(tpu_device_counters(dev, c, &o->ctr[c]), 0);
    tpu_estimator_destroy(&est);
    tpu_dataset_input_free(&in);
    tpu_dataset_free(&ds);
}

/* The first differing float of two arrays (the native run's and `peer`'s), for a message
 * that shows it. */
static void assert_same_floats(const char *what, const char *peer, const float *a,
                               const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            fail_msg("%s[%zu]: native %.9g, %s %.9g (bits differ)", what, i, (double)a[i], peer,
                     (double)b[i]);
}

#endif
