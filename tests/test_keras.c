/* The Keras-style layer (include/tpusim/keras.h, host/keras/): compile, fit, evaluate,
 * predict and the *_on_batch calls on the tiny chip (2 cores: 2 replicas), with a
 * recording callback that writes each hook it sees as a token ("eb0" on_epoch_begin 0,
 * "bb4" on_train_batch_begin 4, "be7" on_train_batch_end 7, ...). What is checked:
 *   - executions: batch callbacks once per execution, begin its first batch, end its last,
 *     never across an epoch (10 batches, N 4: 0-3, 4-7, 8-9), N larger than the epoch cut to
 *     it, N 1 every batch; epochs, initial_epoch, steps_per_epoch;
 *   - validation_split takes the last examples before shuffling; validation_freq as an
 *     interval and as a list;
 *   - sample_weight and class_weight train as Keras's formula says (w_i / real rows of the
 *     step): bit-identical to a direct estimator run with those row weights; a partial last
 *     batch is trained the same way;
 *   - an input that runs out mid-epoch ends fit with Keras's warning; an input of unknown
 *     size with steps_per_execution > 1 is refused with Keras's error; every argument error;
 *   - evaluate and predict give exactly N results for N examples (a partial last batch);
 *     *_on_batch;
 *   - fit and a direct estimator run of the same steps give bit-identical params.
 * Exactness is tested exactly: both sides run the same device programs on the same rows. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/device.h"
#include "tpusim/keras.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

#define FEATURES 8u
#define CLASSES 4u
#define MAX_N 64u

static const char *const param_names[] = {"dense.kernel", "dense.bias", "dense_1.kernel",
                                          "dense_1.bias"};
static const size_t param_floats[] = {FEATURES * 12, 12, 12 * CLASSES, CLASSES};

static void ok(int rc, const struct tpu_diag *d)
{
    if (rc)
        fail_msg("error %d: %s", rc, d->msg);
}

/* ---- data and the net ---------------------------------------------------------------------- */

struct env {
    struct tpu_device *dev;
    struct tpu_net *net;
    struct tpu_dataset ds; /* MAX_N examples, owned */
    struct tpu_keras_model *m;
};

static void make_data(struct tpu_dataset *ds, uint32_t n)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->n_features = FEATURES;
    ds->image_rows = 1;
    ds->image_cols = 1;
    ds->image_channels = FEATURES;
    ds->n_classes = CLASSES;
    ds->x = malloc((size_t)n * FEATURES * sizeof *ds->x);
    ds->y = malloc((size_t)n * sizeof *ds->y);
    assert_non_null(ds->x);
    assert_non_null(ds->y);
    for (uint32_t i = 0; i < n; i++) {
        ds->y[i] = (int32_t)((i * 7u + i / 5u) % CLASSES);
        for (uint32_t j = 0; j < FEATURES; j++)
            ds->x[i * FEATURES + j] =
                (float)sin(0.37 * (i + 1) * (j + 2)) + (j == (uint32_t)ds->y[i] ? 0.8f : 0.0f);
    }
}

static struct tpu_device *open_tiny(void)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 2;
    struct tpu_device *dev = NULL;
    assert_int_equal(tpu_device_open(&s, &dev, NULL), 0);
    return dev;
}

static void compile_default(struct tpu_keras_compile *c)
{
    tpu_keras_compile_default(c);
    c->optimizer.optimizer = TPU_OPT_SGD_MOMENTUM;
    c->optimizer.learning_rate = 0.05f;
    c->run.seed = 3;
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->dev = open_tiny();
    struct tpu_diag d = {0};
    uint32_t h, o;
    ok(tpu_net_create("keras_test", 1, 1, FEATURES, &e->net, &d), &d);
    ok(tpu_net_dense(e->net, NULL, 0, 12, TPU_ACT_RELU, &h, &d), &d);
    ok(tpu_net_dense(e->net, NULL, h, CLASSES, TPU_ACT_NONE, &o, &d), &d);
    ok(tpu_net_set_output(e->net, o, TPU_LOSS_SOFTMAX_XENT, &d), &d);
    make_data(&e->ds, MAX_N);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    tpu_keras_model_destroy(&e->m);
    tpu_net_destroy(&e->net);
    tpu_device_close(&e->dev);
    tpu_dataset_free(&e->ds);
    free(e);
    return 0;
}

static void compile_with(struct env *e, const struct tpu_keras_compile *c)
{
    struct tpu_diag d = {0};
    tpu_keras_model_destroy(&e->m);
    ok(tpu_keras_model_compile(e->dev, e->net, c, &e->m, &d), &d);
}

static void compile_spe(struct env *e, uint64_t spe, bool accuracy)
{
    struct tpu_keras_compile c;
    compile_default(&c);
    c.steps_per_execution = spe;
    if (accuracy) {
        c.n_metrics = 1;
        c.metrics[0] = TPU_METRIC_ACCURACY;
    }
    compile_with(e, &c);
}

/* rows [first, first + n) of the env's data, as a view (not owned) */
static struct tpu_dataset view(const struct env *e, uint32_t first, uint32_t n)
{
    struct tpu_dataset v = e->ds;
    v.n_examples = n;
    v.x = e->ds.x + (size_t)first * FEATURES;
    v.y = e->ds.y + first;
    return v;
}

/* ---- the recording callback ----------------------------------------------------------------- */

struct rec {
    char log[8192];
    struct tpu_logs batch_end[64]; /* the logs at each train batch end */
    uint32_t n_batch_end;
    uint64_t stop_at_epoch;        /* UINT64_MAX: never */
    uint64_t stop_at_batch;        /* UINT64_MAX: never */
    struct tpu_keras_params params;
    uint32_t n_params;
};

__attribute__((format(printf, 2, 3))) static void put(struct rec *r, const char *fmt, ...)
{
    size_t len = strlen(r->log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->log + len, sizeof r->log - len, fmt, ap);
    va_end(ap);
    len = strlen(r->log);
    if (len + 1 < sizeof r->log) {
        r->log[len] = ' ';
        r->log[len + 1] = 0;
    }
}

/* The recorder's hooks that only log a token (and the index, for batch and epoch hooks). */
#define REC_HOOK(fn, token)                                                                 \
    static int fn(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *l,          \
                  struct tpu_diag *d)                                                      \
    {                                                                                      \
        (void)m, (void)l, (void)d;                                                         \
        put(ctx, token);                                                                   \
        return 0;                                                                          \
    }
#define REC_INDEX_HOOK(fn, token)                                                           \
    static int fn(void *ctx, struct tpu_keras_model *m, uint64_t i,                        \
                  const struct tpu_logs *l, struct tpu_diag *d)                            \
    {                                                                                      \
        (void)m, (void)l, (void)d;                                                         \
        put(ctx, token "%llu", (unsigned long long)i);                                     \
        return 0;                                                                          \
    }
REC_HOOK(r_train_begin, "tb")
REC_HOOK(r_train_end, "te")
REC_HOOK(r_test_begin, "vb")
REC_HOOK(r_test_end, "ve")
REC_HOOK(r_predict_begin, "pb")
REC_HOOK(r_predict_end, "pe")
REC_INDEX_HOOK(r_epoch_begin, "eb")
REC_INDEX_HOOK(r_test_batch_begin, "tbb")
REC_INDEX_HOOK(r_test_batch_end, "tbe")
REC_INDEX_HOOK(r_predict_batch_begin, "pbb")
REC_INDEX_HOOK(r_predict_batch_end, "pbe")
REC_INDEX_HOOK(r_batch_begin, "bb")
static int r_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t i, struct tpu_logs *l,
                       struct tpu_diag *d)
{
    struct rec *r = ctx;
    (void)d;
    put(r, "ee%llu%s", (unsigned long long)i, isnan(tpu_logs_get(l, "val_loss")) ? "" : "v");
    if (r->stop_at_epoch == i)
        tpu_keras_stop_training(m);
    return 0;
}
static int r_batch_end(void *ctx, struct tpu_keras_model *m, uint64_t i,
                       const struct tpu_logs *l, struct tpu_diag *d)
{
    struct rec *r = ctx;
    (void)d;
    put(r, "be%llu", (unsigned long long)i);
    if (r->stop_at_batch == i)
        tpu_keras_stop_training(m);
    if (r->n_batch_end < 64)
        r->batch_end[r->n_batch_end++] = *l;
    return 0;
}
static void r_set_params(void *ctx, const struct tpu_keras_params *p)
{
    struct rec *r = ctx;
    r->params = *p;
    r->n_params++;
}

static struct tpu_callback recorder(struct rec *r)
{
    memset(r, 0, sizeof *r);
    r->stop_at_epoch = UINT64_MAX;
    r->stop_at_batch = UINT64_MAX;
    return (struct tpu_callback){
        .ctx = r, .on_train_begin = r_train_begin, .on_train_end = r_train_end,
        .on_epoch_begin = r_epoch_begin, .on_epoch_end = r_epoch_end,
        .on_train_batch_begin = r_batch_begin, .on_train_batch_end = r_batch_end,
        .on_test_begin = r_test_begin, .on_test_end = r_test_end,
        .on_test_batch_begin = r_test_batch_begin, .on_test_batch_end = r_test_batch_end,
        .on_predict_begin = r_predict_begin, .on_predict_end = r_predict_end,
        .on_predict_batch_begin = r_predict_batch_begin,
        .on_predict_batch_end = r_predict_batch_end,
        .set_params = r_set_params};
}

static void fit_arrays(struct tpu_keras_fit *f, const struct tpu_dataset *ds, uint32_t batch,
                       const struct tpu_callback *cb)
{
    tpu_keras_fit_default(f);
    f->data.arrays = ds;
    f->batch_size = batch;
    f->shuffle = false;
    f->verbose = 0;
    f->callbacks = cb;
    f->n_callbacks = cb ? 1 : 0;
}

static void do_fit(struct env *e, const struct tpu_keras_fit *f, struct tpu_history *h)
{
    struct tpu_diag d = {0};
    ok(tpu_keras_fit(e->m, f, h, &d), &d);
}

/* ---- executions ------------------------------------------------------------------------------ */

static void run_epoch_tokens(struct env *e, uint64_t spe, const char *want)
{
    compile_spe(e, spe, false);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb); /* 10 batches */
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_string_equal(r.log, want);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 10);
    assert_int_equal(h.n_epochs, 1);
    assert_int_equal(r.n_params, 1);
    assert_int_equal(r.params.epochs, 1);
    assert_int_equal(r.params.steps, 10);
    tpu_history_free(&h);
}

static void test_executions_of_4(void **state)
{
    run_epoch_tokens(*state, 4, "tb eb0 bb0 be3 bb4 be7 bb8 be9 ee0 te ");
}

static void test_execution_cut_to_the_epoch(void **state)
{
    run_epoch_tokens(*state, 20, "tb eb0 bb0 be9 ee0 te ");
}

static void test_executions_of_1(void **state)
{
    run_epoch_tokens(*state, 1, "tb eb0 bb0 be0 bb1 be1 bb2 be2 bb3 be3 bb4 be4 bb5 be5 bb6 be6 "
                                "bb7 be7 bb8 be8 bb9 be9 ee0 te ");
}

/* the running logs: at an execution's end, the mean loss over the epoch's batches so far,
 * each weighted by its rows (all full here: the plain mean of the steps' losses) */
static void test_running_logs_are_epoch_means(void **state)
{
    struct env *e = *state;
    compile_spe(e, 2, true);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 24);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb); /* 6 batches, executions 0-1, 2-3, 4-5 */
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_int_equal(r.n_batch_end, 3);
    for (uint32_t i = 0; i < 3; i++) {
        double loss = tpu_logs_get(&r.batch_end[i], "loss");
        double acc = tpu_logs_get(&r.batch_end[i], "accuracy");
        assert_true(isfinite(loss) && loss > 0);
        /* accuracy: correct answers over 8, 16, 24 examples */
        double k = acc * 8.0 * (i + 1);
        assert_true(fabs(k - round(k)) < 1e-9);
    }
    /* the epoch's logs are the last running logs */
    assert_true(tpu_logs_get(&h.epochs[0], "loss") == tpu_logs_get(&r.batch_end[2], "loss"));
    assert_string_equal(h.epochs[0].name[0], "loss");
    assert_string_equal(h.epochs[0].name[1], "accuracy");
    tpu_history_free(&h);
}

static void test_epochs_initial_epoch_steps_per_epoch(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, false);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 3;
    f.initial_epoch = 1;
    f.steps_per_epoch = 3;
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_string_equal(r.log, "tb eb1 bb0 be2 ee1 eb2 bb0 be2 ee2 te ");
    assert_int_equal(h.n_epochs, 2);
    assert_int_equal(h.first_epoch, 1);
    assert_string_equal(h.warning, "");
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 6);
    assert_int_equal(r.params.epochs, 3);
    assert_int_equal(r.params.steps, 3);
    tpu_history_free(&h);

    /* initial_epoch >= epochs runs nothing, as Keras's range(initial_epoch, epochs) */
    struct rec r2;
    struct tpu_callback cb2 = recorder(&r2);
    f.callbacks = &cb2;
    f.initial_epoch = 3;
    do_fit(e, &f, &h);
    assert_string_equal(r2.log, "tb te ");
    assert_int_equal(h.n_epochs, 0);
    tpu_history_free(&h);
}

/* a callback's stop_training ends fit after that epoch's end hooks */
static void test_stop_training(void **state)
{
    struct env *e = *state;
    compile_spe(e, 5, false);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    r.stop_at_epoch = 1;
    struct tpu_dataset v = view(e, 0, 20);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 5;
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_string_equal(r.log, "tb eb0 bb0 be4 ee0 eb1 bb0 be4 ee1 te ");
    assert_int_equal(h.n_epochs, 2);
    assert_true(tpu_keras_stop_training_requested(e->m));
    tpu_history_free(&h);
}


/* stop_training at a batch end leaves the epoch's batches there (Keras breaks its step
 * loop), runs the epoch's end hooks and ends fit; the model goes on working */
static void test_stop_training_at_a_batch(void **state)
{
    struct env *e = *state;
    compile_spe(e, 2, false);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    r.stop_at_batch = 3;
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 3;
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_string_equal(r.log, "tb eb0 bb0 be1 bb2 be3 ee0 te ");
    assert_int_equal(h.n_epochs, 1);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 4);
    tpu_history_free(&h);
    /* a later fit starts with stop_training cleared, and trains */
    struct rec r2;
    struct tpu_callback cb2 = recorder(&r2);
    f.callbacks = &cb2;
    f.epochs = 1;
    do_fit(e, &f, &h);
    assert_string_equal(r2.log, "tb eb0 bb0 be1 bb2 be3 bb4 be5 bb6 be7 bb8 be9 ee0 te ");
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 14);
    tpu_history_free(&h);
}

/* steps_per_execution 'auto': the Keras tuner sizes the executions; they still cover the
 * epoch's batches in order, each begin one past the previous end, the last ending at the
 * epoch's last batch */
static void test_steps_per_execution_auto(void **state)
{
    struct env *e = *state;
    struct tpu_keras_compile c;
    compile_default(&c);
    c.steps_per_execution_auto = true;
    compile_with(e, &c);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 2;
    struct tpu_history h;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 20);
    const char *p = r.log;
    for (int epoch = 0; epoch < 2; epoch++) {
        char want[16];
        snprintf(want, sizeof want, "eb%d ", epoch);
        p = strstr(p, want);
        assert_non_null(p);
        p += strlen(want);
        long next = 0, begin, end;
        int used;
        while (sscanf(p, "bb%ld be%ld %n", &begin, &end, &used) == 2) {
            assert_int_equal(begin, next);
            assert_true(end >= begin);
            next = end + 1;
            p += used;
        }
        assert_int_equal(next, 10);
    }
    assert_non_null(tpu_estimator_tuner(tpu_keras_model_estimator(e->m), TPU_MODE_TRAIN));
}

/* the host schedule: the rate is read and set between executions; at rate 0 a step leaves
 * the weights as they were (SGD: var -= 0 * accum), bit for bit */
static void test_host_learning_rate(void **state)
{
    struct env *e = *state;
    struct tpu_keras_compile c;
    compile_default(&c);
    c.optimizer.schedule = TPU_SCHEDULE_HOST;
    compile_with(e, &c);
    float lr = 0;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_keras_get_learning_rate(e->m, &lr), 0);
    assert_true(lr == 0.05f);
    struct tpu_dataset b = view(e, 0, 8);
    struct tpu_logs logs;
    ok(tpu_keras_train_on_batch(e->m, &b, NULL, &logs, &d), &d); /* loads the params */
    float before[FEATURES * 12], after[FEATURES * 12];
    ok(tpu_estimator_read_param(tpu_keras_model_estimator(e->m), "dense.kernel", before,
                                sizeof before, &d), &d);
    ok(tpu_keras_set_learning_rate(e->m, 0.0f, &d), &d);
    assert_int_equal(tpu_keras_get_learning_rate(e->m, &lr), 0);
    assert_true(lr == 0.0f);
    ok(tpu_keras_train_on_batch(e->m, &b, NULL, &logs, &d), &d);
    ok(tpu_estimator_read_param(tpu_keras_model_estimator(e->m), "dense.kernel", after,
                                sizeof after, &d), &d);
    assert_memory_equal(before, after, sizeof before);
    ok(tpu_keras_set_learning_rate(e->m, 0.05f, &d), &d);
    ok(tpu_keras_train_on_batch(e->m, &b, NULL, &logs, &d), &d);
    ok(tpu_estimator_read_param(tpu_keras_model_estimator(e->m), "dense.kernel", after,
                                sizeof after, &d), &d);
    assert_true(memcmp(before, after, sizeof before) != 0);
    assert_int_equal(tpu_keras_set_learning_rate(e->m, NAN, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "learning rate nan is not a finite rate >= 0; give the rate "
                        "the next execution uses");
}

/* a regression model: mse is the loss, mae comes from the predictions */
static void test_regression_metrics(void **state)
{
    struct env *e = *state;
    struct tpu_net *net = NULL;
    struct tpu_diag d = {0};
    uint32_t h, o;
    ok(tpu_net_create("keras_reg", 1, 1, FEATURES, &net, &d), &d);
    ok(tpu_net_dense(net, NULL, 0, 6, TPU_ACT_RELU, &h, &d), &d);
    ok(tpu_net_dense(net, NULL, h, 2, TPU_ACT_NONE, &o, &d), &d);
    ok(tpu_net_set_output(net, o, TPU_LOSS_MSE, &d), &d);
    struct tpu_dataset ds = e->ds;
    ds.n_examples = 14;
    ds.y = NULL;
    ds.n_classes = 0;
    ds.n_targets = 2;
    float t[14 * 2];
    for (int i = 0; i < 28; i++)
        t[i] = 0.1f * (float)(i % 7) - 0.2f;
    ds.targets = t;
    struct tpu_keras_compile c;
    compile_default(&c);
    c.loss = TPU_LOSS_MSE;
    c.n_metrics = 2;
    c.metrics[0] = TPU_METRIC_MAE;
    c.metrics[1] = TPU_METRIC_MSE;
    struct tpu_keras_model *m = NULL;
    ok(tpu_keras_model_compile(e->dev, net, &c, &m, &d), &d);
    struct tpu_keras_fit f;
    fit_arrays(&f, &ds, 4, NULL); /* 3 full batches and one of 2 */
    struct tpu_history hist;
    ok(tpu_keras_fit(m, &f, &hist, &d), &d);
    assert_string_equal(hist.epochs[0].name[0], "loss");
    assert_string_equal(hist.epochs[0].name[1], "mse");
    assert_true(tpu_logs_get(&hist.epochs[0], "mse") == tpu_logs_get(&hist.epochs[0], "loss"));
    tpu_history_free(&hist);
    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.arrays = &ds;
    ev.batch_size = 4;
    struct tpu_logs logs;
    ok(tpu_keras_evaluate(m, &ev, &logs, &d), &d);
    assert_string_equal(logs.name[0], "loss");
    assert_string_equal(logs.name[1], "mae");
    assert_string_equal(logs.name[2], "mse");
    float *rows = NULL;
    uint64_t n = 0;
    uint32_t cols = 0;
    ok(tpu_keras_predict(m, &ev, &rows, &n, &cols, &d), &d);
    assert_int_equal(n, 14);
    assert_int_equal(cols, 2);
    double abs_sum = 0, sq_sum = 0;
    for (int i = 0; i < 28; i++) {
        abs_sum += fabs((double)rows[i] - (double)t[i]);
        sq_sum += ((double)rows[i] - (double)t[i]) * ((double)rows[i] - (double)t[i]);
    }
    assert_true(tpu_logs_get(&logs, "mae") == abs_sum / 28.0);
    /* the device's loss sums in f32 per step: equal to the host's mean squared error up
     * to f32 rounding of sums of 8 values (a relative 1e-5 is ample) */
    assert_true(fabs(tpu_logs_get(&logs, "loss") - sq_sum / 28.0) <= 1e-5 * sq_sum / 28.0);
    free(rows);
    tpu_keras_model_destroy(&m);
    tpu_net_destroy(&net);
}


/* a callback that adds an entry to the epoch's logs, as Keras's LearningRateScheduler adds
 * "lr" */
static int add_entry(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                     struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)ctx, (void)m, (void)d;
    return tpu_logs_set(logs, "extra", (double)epoch + 0.5);
}

/* verbose 2 with an out: fit adds the progress bar after the user's callbacks; the History
 * holds what the user's callbacks left in the epoch's logs */
static void test_verbose_adds_the_bar_and_history_keeps_the_callbacks_logs(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, true);
    struct tpu_dataset v = view(e, 0, 16);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    struct tpu_callback cb = {.on_epoch_end = add_entry};
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 2;
    f.verbose = 2;
    f.out = out;
    struct tpu_history h;
    do_fit(e, &f, &h);
    fclose(out);
    assert_int_equal(h.n_epochs, 2);
    assert_true(tpu_logs_get(&h.epochs[1], "extra") == 1.5);
    /* Keras's verbose-2 lines: "Epoch k/n", then "4/4 - ... - loss: ..." per epoch */
    assert_non_null(strstr(text, "Epoch 1/2\n4/4 - "));
    assert_non_null(strstr(text, "Epoch 2/2\n4/4 - "));
    assert_non_null(strstr(text, " - extra: 1.5000"));
    free(text);
    tpu_history_free(&h);
}

/* ---- validation -------------------------------------------------------------------------------- */

static void test_validation_split_takes_the_last_examples(void **state)
{
    struct env *e = *state;
    compile_spe(e, 3, true);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.shuffle = true;
    f.validation_split = 0.25; /* 30 training examples (7 full batches and one of 2), 10 held
                                  out: examples 30..39 */
    f.epochs = 2;
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 16);
    assert_string_equal(r.log, "tb eb0 bb0 be2 bb3 be5 bb6 be7 vb tbb0 tbe2 ve ee0v "
                               "eb1 bb0 be2 bb3 be5 bb6 be7 vb tbb0 tbe2 ve ee1v te ");
    /* the last epoch's val_ logs are an evaluation of examples 30..39 with the final params */
    struct tpu_dataset last = view(e, 30, 10);
    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.arrays = &last;
    ev.batch_size = 4;
    struct tpu_logs logs;
    struct tpu_diag d = {0};
    ok(tpu_keras_evaluate(e->m, &ev, &logs, &d), &d);
    assert_true(tpu_logs_get(&h.epochs[1], "val_loss") == tpu_logs_get(&logs, "loss"));
    assert_true(tpu_logs_get(&h.epochs[1], "val_accuracy") == tpu_logs_get(&logs, "accuracy"));
    double k = tpu_logs_get(&logs, "accuracy") * 10.0;
    assert_true(fabs(k - round(k)) < 1e-9);
    assert_string_equal(h.epochs[1].name[2], "val_loss");
    assert_string_equal(h.epochs[1].name[3], "val_accuracy");
    tpu_history_free(&h);
}

static void test_validation_freq(void **state)
{
    struct env *e = *state;
    compile_spe(e, 8, false);
    struct tpu_dataset v = view(e, 0, 16);
    struct tpu_dataset val = view(e, 16, 8);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 8, &cb);
    f.validation_data.arrays = &val;
    f.epochs = 4;
    f.n_validation_freq = 1;
    f.validation_freq[0] = 2; /* every second epoch: 2 and 4 (1-based) */
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_string_equal(r.log, "tb eb0 bb0 be1 ee0 eb1 bb0 be1 vb tbb0 tbe0 ve ee1v "
                               "eb2 bb0 be1 ee2 eb3 bb0 be1 vb tbb0 tbe0 ve ee3v te ");
    assert_true(isnan(tpu_logs_get(&h.epochs[0], "val_loss")));
    assert_true(isfinite(tpu_logs_get(&h.epochs[1], "val_loss")));
    tpu_history_free(&h);

    struct rec r2;
    struct tpu_callback cb2 = recorder(&r2);
    f.callbacks = &cb2;
    f.n_validation_freq = 2; /* the list [1, 4] */
    f.validation_freq[0] = 1;
    f.validation_freq[1] = 4;
    do_fit(e, &f, &h);
    assert_string_equal(r2.log, "tb eb0 bb0 be1 vb tbb0 tbe0 ve ee0v eb1 bb0 be1 ee1 "
                                "eb2 bb0 be1 ee2 eb3 bb0 be1 vb tbb0 tbe0 ve ee3v te ");
    tpu_history_free(&h);

    /* the list [3] (validation_freq_is_list): epoch 3 only, where the integer 3 would be
     * epochs 3 and 6; and a list in any order with a repeat, [4, 1, 4] */
    f.epochs = 6;
    f.n_validation_freq = 1;
    f.validation_freq[0] = 3;
    f.validation_freq_is_list = true;
    f.callbacks = NULL;
    f.n_callbacks = 0;
    do_fit(e, &f, &h);
    assert_int_equal(h.n_epochs, 6);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(!!isfinite(tpu_logs_get(&h.epochs[i], "val_loss")), i == 2);
    tpu_history_free(&h);
    f.n_validation_freq = 3;
    f.validation_freq[0] = 4;
    f.validation_freq[1] = 1;
    f.validation_freq[2] = 4;
    do_fit(e, &f, &h);
    for (uint32_t i = 0; i < 6; i++)
        assert_int_equal(!!isfinite(tpu_logs_get(&h.epochs[i], "val_loss")), i == 0 || i == 3);
    tpu_history_free(&h);
}

/* ---- weights: fit against a direct estimator run with the row weights of Keras's formula --- */

/* An ordered input function written apart from host/keras/arrays.c: epochs of the rows in
 * order, one after another; step s of an epoch holds rows [s*G, min(s*G + G, n)), its calls
 * (G / batch of them, in turn) a batch of them each; with weights, w_i = weight_i / (real rows
 * of the global step), 0 for padding. */
struct ordered {
    const struct tpu_dataset *ds;
    const float *weight; /* [n] or NULL: 1 */
    bool weighted;
    uint32_t global;
    uint64_t step, slot; /* in the epoch */
};

static int ord_start(void *ctx, enum tpu_mode mode, uint64_t global_step, uint32_t global,
                     struct tpu_diag *d)
{
    struct ordered *o = ctx;
    (void)mode, (void)d;
    if (global_step != 0)
        fail_msg("the ordered input starts at global step 0 only (got %llu)",
                 (unsigned long long)global_step);
    o->global = global;
    o->step = o->slot = 0;
    return 0;
}

static int ord_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                    void *const *t, uint32_t *n_real, struct tpu_diag *d)
{
    struct ordered *o = ctx;
    (void)mode, (void)shard, (void)d;
    const uint64_t n = o->ds->n_examples, g = o->global;
    const uint64_t step_first = o->step * g;
    const uint64_t step_end = step_first + g < n ? step_first + g : n;
    const uint64_t first = step_first + o->slot * batch;
    float *x = t[0], *w = o->weighted ? t[2] : NULL;
    int32_t *y = t[1];
    uint32_t real = 0;
    for (uint32_t k = 0; k < batch; k++) {
        const uint64_t row = first + k;
        const bool in = row < step_end;
        for (uint32_t j = 0; j < FEATURES; j++)
            x[k * FEATURES + j] = in ? o->ds->x[row * FEATURES + j] : 0.0f;
        y[k] = in ? o->ds->y[row] : -1;
        if (w)
            w[k] = in ? (float)((o->weight ? (double)o->weight[row] : 1.0) /
                                (double)(step_end - step_first))
                      : 0.0f;
        real += in;
    }
    if (++o->slot * batch >= g) {
        o->slot = 0;
        if (++o->step * g >= n)
            o->step = 0; /* the next epoch */
    }
    *n_real = real;
    return 1;
}

/* Trains `steps` steps of global batch `global` on ds in order through an estimator of its
 * own (a device of its own), and reads its params into out[4]. */
static void direct_run(struct env *e, const struct tpu_dataset *ds, const float *weight,
                       bool weighted, uint32_t global, uint64_t ipl, uint64_t steps,
                       float *out[4])
{
    struct tpu_keras_compile c;
    compile_default(&c);
    struct tpu_device *dev = open_tiny();
    struct tpu_model model;
    struct tpu_diag d = {0};
    ok(tpu_net_model(&model, e->net, &c.optimizer, &d), &d);
    struct tpu_run_config cfg = c.run;
    cfg.train_batch_size = global;
    cfg.iterations_per_loop = ipl;
    cfg.sample_weights = weighted;
    struct tpu_estimator *est = NULL;
    ok(tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d), &d);
    struct ordered o = {.ds = ds, .weight = weight, .weighted = weighted};
    struct tpu_input in = {.ctx = &o, .next = ord_next, .start = ord_start};
    ok(tpu_estimator_train(est, &in, steps, 0, &d), &d);
    assert_int_equal(tpu_estimator_global_step(est), steps);
    for (int i = 0; i < 4; i++) {
        out[i] = malloc(param_floats[i] * sizeof(float));
        ok(tpu_estimator_read_param(est, param_names[i], out[i],
                                    param_floats[i] * sizeof(float), &d), &d);
    }
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
}

/* 0 when the fit model's params equal want[] bit for bit; frees want[] */
static int same_params(struct env *e, float *want[4])
{
    int diff = 0;
    struct tpu_diag d = {0};
    for (int i = 0; i < 4; i++) {
        float *got = malloc(param_floats[i] * sizeof(float));
        ok(tpu_estimator_read_param(tpu_keras_model_estimator(e->m), param_names[i], got,
                                    param_floats[i] * sizeof(float), &d), &d);
        if (memcmp(got, want[i], param_floats[i] * sizeof(float)) != 0) {
            for (size_t k = 0; k < param_floats[i]; k++)
                if (memcmp(&got[k], &want[i][k], sizeof(float)) != 0) {
                    print_message("%s[%zu]: fit %.9g, direct %.9g\n", param_names[i], k,
                                  (double)got[k], (double)want[i][k]);
                    break;
                }
            diff = 1;
        }
        free(got);
        free(want[i]);
    }
    return diff;
}

/* the bit-identity of spec14 C: the same net, data, order and steps */
static void test_fit_is_the_estimator_bit_for_bit(void **state)
{
    struct env *e = *state;
    compile_spe(e, 3, true);
    struct tpu_dataset v = view(e, 0, 32);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 8, NULL); /* 4 batches per epoch */
    f.epochs = 2;
    struct tpu_history h;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    float *want[4];
    direct_run(e, &v, NULL, false, 8, 3, 8, want);
    assert_int_equal(same_params(e, want), 0);
}

/* the params now, for same_params (which frees them) */
static void snapshot_params(struct env *e, float *out[4])
{
    struct tpu_diag d = {0};
    for (int i = 0; i < 4; i++) {
        out[i] = malloc(param_floats[i] * sizeof(float));
        assert_non_null(out[i]);
        ok(tpu_estimator_read_param(tpu_keras_model_estimator(e->m), param_names[i], out[i],
                                    param_floats[i] * sizeof(float), &d), &d);
    }
}

/* fit on arrays is one stream over the epochs (Keras's repeat(epochs) of the batched
 * arrays): an epoch of steps_per_epoch steps continues where the last one stopped, each
 * pass with its own shuffle and its own partial last batch, so 2 epochs of 5 steps are 1
 * epoch of 10 steps bit for bit, and 3 epochs of 2 steps are 2 epochs of 3 */
static void test_epochs_continue_one_stream(void **state)
{
    struct env *e = *state;
    struct tpu_history h;
    struct tpu_keras_fit f;
    float *want[4];

    /* 40 rows, batches of 4: 10 batches per pass, shuffled */
    struct tpu_dataset v = view(e, 0, 40);
    compile_spe(e, 2, false);
    fit_arrays(&f, &v, 4, NULL);
    f.shuffle = true;
    f.steps_per_epoch = 10;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    snapshot_params(e, want);
    compile_spe(e, 2, false);
    f.epochs = 2;
    f.steps_per_epoch = 5;
    do_fit(e, &f, &h);
    assert_string_equal(h.warning, "");
    tpu_history_free(&h);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 10);
    assert_int_equal(same_params(e, want), 0);

    /* 18 rows, batches of 8: 8, 8 and 2 rows per pass; passes cross epochs */
    v = view(e, 0, 18);
    compile_spe(e, 2, false);
    fit_arrays(&f, &v, 8, NULL);
    f.shuffle = true;
    f.epochs = 2;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    snapshot_params(e, want);
    compile_spe(e, 2, false);
    f.epochs = 3;
    f.steps_per_epoch = 2;
    do_fit(e, &f, &h);
    assert_string_equal(h.warning, "");
    assert_int_equal(h.n_epochs, 3);
    tpu_history_free(&h);
    assert_int_equal(same_params(e, want), 0);
}

/* steps_per_epoch above a pass's batches runs into the next pass; the stream holds
 * `epochs` passes (40 rows, batches of 4: 20 batches for 2 epochs), so epochs of 15 steps
 * train 15, then 5, then Keras's ran-out warning */
static void test_epoch_longer_than_a_pass(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, false);
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_dataset v = view(e, 0, 40);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, &cb);
    f.epochs = 2;
    f.steps_per_epoch = 15;
    struct tpu_history h;
    do_fit(e, &f, &h);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 20);
    assert_int_equal(h.n_epochs, 2);
    assert_non_null(strstr(h.warning, "Your input ran out of data; interrupting training."));
    assert_non_null(strstr(h.warning, "(in this case, 30 batches)"));
    tpu_history_free(&h);
}

/* validation and evaluate that run short warn as Keras's evaluate does (steps * 1) */
static void test_validation_running_short_warns(void **state)
{
    struct env *e = *state;
    compile_spe(e, 1, false);
    struct tpu_dataset v = view(e, 0, 16);
    struct tpu_dataset val = view(e, 16, 8); /* one batch of 8 */
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 8, NULL);
    f.validation_data.arrays = &val;
    f.validation_steps = 100;
    struct tpu_history h;
    struct tpu_diag d = {0};
    ok(tpu_keras_fit(e->m, &f, &h, &d), &d);
    assert_string_equal(h.warning, "Your input ran out of data; interrupting training. Make "
                                   "sure that your dataset or generator can generate at least "
                                   "`steps_per_epoch * epochs` batches (in this case, 100 "
                                   "batches). You may need to use the repeat() function when "
                                   "building your dataset.");
    assert_true(isfinite(tpu_logs_get(&h.epochs[0], "val_loss")));
    tpu_history_free(&h);
    /* exactly the batches there are: no warning */
    f.validation_steps = 1;
    ok(tpu_keras_fit(e->m, &f, &h, &d), &d);
    assert_string_equal(h.warning, "");
    tpu_history_free(&h);

    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.arrays = &val;
    ev.batch_size = 8;
    ev.verbose = 0;
    ev.steps = 3;
    struct tpu_logs lg;
    tpu_diag_clear(&d);
    ok(tpu_keras_evaluate(e->m, &ev, &lg, &d), &d);
    assert_non_null(strstr(d.msg, "warning: Your input ran out of data; interrupting "
                                  "training."));
    assert_non_null(strstr(d.msg, "(in this case, 3 batches)"));
    ev.steps = 1;
    ok(tpu_keras_evaluate(e->m, &ev, &lg, &d), &d);
    assert_string_equal(d.msg, "");
}

static void test_partial_last_batch_is_trained(void **state)
{
    struct env *e = *state;
    compile_spe(e, 2, false);
    struct tpu_dataset v = view(e, 0, 18); /* batches of 8: 8, 8 and 2 rows */
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 8, NULL);
    struct tpu_history h;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 3);
    float *want[4];
    direct_run(e, &v, NULL, true, 8, 2, 3, want);
    assert_int_equal(same_params(e, want), 0);
    /* and the partial step changed the params: two steps alone give others */
    float *two[4];
    direct_run(e, &v, NULL, true, 8, 2, 2, two);
    assert_int_equal(same_params(e, two), 1);
}

static void test_sample_weight(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, false);
    struct tpu_dataset v = view(e, 0, 16);
    float sw[16];
    for (int i = 0; i < 16; i++)
        sw[i] = 0.25f + 0.125f * (float)(i % 5);
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 8, NULL);
    f.data.sample_weight = sw;
    f.epochs = 2;
    struct tpu_history h;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    float *want[4];
    direct_run(e, &v, sw, true, 8, 4, 4, want);
    assert_int_equal(same_params(e, want), 0);
    /* the weights matter: the unweighted run differs */
    float *plain[4];
    direct_run(e, &v, NULL, false, 8, 4, 4, plain);
    assert_int_equal(same_params(e, plain), 1);
}

static void test_class_weight_is_a_sample_weight_per_class(void **state)
{
    struct env *e = *state;
    compile_spe(e, 1, false);
    struct tpu_dataset v = view(e, 0, 16);
    const float cw[CLASSES] = {1.0f, 2.0f, 0.5f, 3.0f};
    float sw[16];
    for (int i = 0; i < 16; i++)
        sw[i] = cw[e->ds.y[i]];
    struct tpu_keras_fit f;
    fit_arrays(&f, &v, 4, NULL);
    f.class_weight = cw;
    f.n_class_weight = CLASSES;
    struct tpu_history h;
    do_fit(e, &f, &h);
    tpu_history_free(&h);
    float *want[4];
    direct_run(e, &v, sw, true, 4, 1, 4, want);
    assert_int_equal(same_params(e, want), 0);
}

/* ---- input functions ------------------------------------------------------------------------- */

/* an input of `batches` batches of 4 rows in all (over every epoch), then the end */
struct finite {
    const struct tpu_dataset *ds;
    uint64_t calls, max_calls;
};

static int fin_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                    void *const *t, uint32_t *n_real, struct tpu_diag *d)
{
    struct finite *s = ctx;
    (void)mode, (void)shard, (void)d;
    if (s->calls >= s->max_calls)
        return 0;
    uint64_t first = (s->calls * batch) % s->ds->n_examples;
    *n_real = tpu_dataset_gather(s->ds, NULL, first, batch, t[0], t[1]);
    s->calls++;
    return 1;
}

static void test_input_running_out_mid_epoch(void **state)
{
    struct env *e = *state;
    compile_spe(e, 2, false);
    struct tpu_dataset v = view(e, 0, 40);
    struct finite s = {.ds = &v, .max_calls = 5 * 2}; /* 5 steps of 2 calls (2 replicas) */
    struct tpu_input in = {.ctx = &s, .next = fin_next};
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_keras_fit f;
    tpu_keras_fit_default(&f);
    f.data.input = &in;
    f.batch_size = 4;
    f.steps_per_epoch = 3;
    f.epochs = 3;
    f.callbacks = &cb;
    f.n_callbacks = 1;
    struct tpu_history h;
    struct tpu_diag d = {0};
    ok(tpu_keras_fit(e->m, &f, &h, &d), &d);
    /* the second epoch's second execution begins (batch 2) and finds no data: Keras too
     * calls on_train_batch_begin and no end for it */
    assert_string_equal(r.log, "tb eb0 bb0 be1 bb2 be2 ee0 eb1 bb0 be1 bb2 ee1 te ");
    assert_int_equal(h.n_epochs, 2);
    assert_string_equal(h.warning,
                        "Your input ran out of data; interrupting training. Make sure that "
                        "your dataset or generator can generate at least `steps_per_epoch * "
                        "epochs` batches (in this case, 9 batches). You may need to use the "
                        "repeat() function when building your dataset.");
    assert_non_null(strstr(d.msg, "Your input ran out of data"));
    tpu_history_free(&h);
}

static void test_unknown_size_with_executions_is_refused(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, false);
    struct tpu_dataset v = view(e, 0, 40);
    struct finite s = {.ds = &v, .max_calls = 100};
    struct tpu_input in = {.ctx = &s, .next = fin_next};
    struct tpu_keras_fit f;
    tpu_keras_fit_default(&f);
    f.data.input = &in;
    f.batch_size = 4;
    struct tpu_history h;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_keras_fit(e->m, &f, &h, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Could not infer the size of the data. With "
                               "`steps_per_execution > 1`, you must specify the number of "
                               "steps to run. (tpusim: steps_per_execution is 4 and fit's "
                               "data is an input function without steps_per_epoch: give "
                               "steps_per_epoch)");
    assert_int_equal(s.calls, 0);
    /* the same check for validation_data, evaluate and predict (Keras's DataHandler
     * validates each of them) */
    struct tpu_keras_fit fa;
    fit_arrays(&fa, &v, 4, NULL);
    fa.validation_data.input = &in;
    assert_int_equal(tpu_keras_fit(e->m, &fa, &h, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Could not infer the size of the data. With "
                               "`steps_per_execution > 1`, you must specify the number of "
                               "steps to run. (tpusim: steps_per_execution is 4 and "
                               "validation_data is an input function without "
                               "validation_steps: give validation_steps)");
    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.input = &in;
    ev.batch_size = 4;
    ev.verbose = 0;
    struct tpu_logs lg;
    assert_int_equal(tpu_keras_evaluate(e->m, &ev, &lg, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Could not infer the size of the data. With "
                               "`steps_per_execution > 1`, you must specify the number of "
                               "steps to run. (tpusim: steps_per_execution is 4 and evaluate's "
                               "data is an input function without steps: give steps)");
    float *rows = NULL;
    uint64_t n_rows = 0;
    uint32_t cols = 0;
    assert_int_equal(tpu_keras_predict(e->m, &ev, &rows, &n_rows, &cols, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "(tpusim: steps_per_execution is 4 and predict's data is "
                                  "an input function without steps: give steps)"));
    assert_null(rows);
    assert_int_equal(s.calls, 0);
    /* given steps, evaluate runs */
    ev.steps = 2;
    ok(tpu_keras_evaluate(e->m, &ev, &lg, &d), &d);
    assert_int_equal(s.calls, 4);
    s.calls = 0;
    /* with steps_per_execution 1 the first epoch runs until the input ends and sets the
     * epoch's size (Keras's inferred steps) */
    compile_spe(e, 1, false);
    s.max_calls = 6 * 2;
    f.epochs = 2;
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    f.callbacks = &cb;
    f.n_callbacks = 1;
    ok(tpu_keras_fit(e->m, &f, &h, &d), &d);
    assert_int_equal(h.n_epochs, 1);
    assert_non_null(strstr(h.warning, "(in this case, 12 batches)"));
    tpu_history_free(&h);
}

/* ---- argument errors ---------------------------------------------------------------------- */

static void expect_fit_error(struct env *e, const struct tpu_keras_fit *f, int code,
                             const char *msg)
{
    struct tpu_history h;
    struct tpu_diag d = {0};
    const uint64_t step = tpu_estimator_global_step(tpu_keras_model_estimator(e->m));
    const int rc = tpu_keras_fit(e->m, f, &h, &d);
    if (rc != code || strcmp(d.msg, msg) != 0)
        fail_msg("fit returned %d (want %d) with the message:\n  got  %s\n  want %s", rc,
                 code, d.msg, msg);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), step);
    tpu_history_free(&h);
}

static void test_fit_argument_errors(void **state)
{
    struct env *e = *state;
    compile_spe(e, 1, false);
    struct tpu_dataset v = view(e, 0, 20);
    struct tpu_keras_fit f;
    struct tpu_input in = {.next = fin_next};

    fit_arrays(&f, &v, 4, NULL);
    f.data.input = &in;
    expect_fit_error(e, &f, TPU_EINVAL, "fit needs its data as arrays or as an input function, "
                     "exactly one (both given); set data.arrays or data.input");
    fit_arrays(&f, NULL, 4, NULL);
    expect_fit_error(e, &f, TPU_EINVAL, "fit needs its data as arrays or as an input function, "
                     "exactly one (neither given); set data.arrays or data.input");
    fit_arrays(&f, &v, 3, NULL);
    expect_fit_error(e, &f, TPU_EINVAL, "batch_size 3 does not split over the 2 replicas the "
                     "global batch is divided among; give a multiple of 2 (e.g. 4)");
    fit_arrays(&f, &v, 4, NULL);
    f.verbose = 3;
    expect_fit_error(e, &f, TPU_EINVAL, "verbose 3 is not one of -1 ('auto'), 0 (silent), 1 "
                     "(a progress bar) or 2 (a line per epoch)");
    fit_arrays(&f, &v, 4, NULL);
    f.validation_split = 1.0;
    expect_fit_error(e, &f, TPU_EINVAL, "`validation_split` must be between 0 and 1 (the "
                     "fraction of the arrays held out); received 1");
    f.validation_split = 0.99; /* floor(20 * 0.01) = 0 training examples */
    expect_fit_error(e, &f, TPU_EINVAL, "Training data contains 20 samples, which is not "
                     "sufficient to split it into a validation and training set as specified "
                     "by `validation_split=0.99`. Either provide more data, or a different "
                     "value for the `validation_split` argument.");
    tpu_keras_fit_default(&f);
    f.data.input = &in;
    f.batch_size = 4;
    f.steps_per_epoch = 2;
    f.validation_split = 0.5;
    expect_fit_error(e, &f, TPU_EINVAL, "`validation_split` is only supported for arrays (it "
                     "takes the last examples of them); the data is an input function: give "
                     "validation_data instead");
    fit_arrays(&f, &v, 4, NULL);
    f.n_validation_freq = 1;
    f.validation_freq[0] = 0;
    expect_fit_error(e, &f, TPU_EINVAL, "`validation_freq` can not be less than 1 "
                     "(validation_freq[0] is 0): give a count of epochs between validations, "
                     "or the 1-based epochs to validate after");
    const float cw3[3] = {1, 1, 1};
    fit_arrays(&f, &v, 4, NULL);
    f.class_weight = cw3;
    f.n_class_weight = 3;
    expect_fit_error(e, &f, TPU_EINVAL, "Expected `class_weight` to have a weight for each "
                     "class from 0 to 3 (one less than the number of classes); found 3 "
                     "weights");
    const float cwneg[4] = {1, -1, 1, 1};
    f.class_weight = cwneg;
    f.n_class_weight = 4;
    expect_fit_error(e, &f, TPU_EINVAL, "class_weight[1] is -1; every class weight must be "
                     "finite and >= 0");
    float sw[20];
    for (int i = 0; i < 20; i++)
        sw[i] = 1.0f;
    sw[7] = NAN;
    fit_arrays(&f, &v, 4, NULL);
    f.data.sample_weight = sw;
    expect_fit_error(e, &f, TPU_EINVAL, "fit's sample_weight[7] is nan; every weight must be "
                     "finite and >= 0");
    fit_arrays(&f, &v, 4, NULL);
    f.validation_batch_size = 5;
    expect_fit_error(e, &f, TPU_EINVAL, "validation_batch_size 5 does not split over the 2 "
                     "replicas; give a multiple of 2 (or 0: batch_size)");
    fit_arrays(&f, &v, 4, NULL);
    f.n_callbacks = 2;
    expect_fit_error(e, &f, TPU_EINVAL, "n_callbacks is 2 but callbacks is NULL; give the "
                     "array of callbacks or 0");
    /* data that does not fit the model */
    struct tpu_dataset bad = v;
    bad.n_features = 6;
    bad.image_channels = 6;
    fit_arrays(&f, &bad, 4, NULL);
    struct tpu_history h;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_keras_fit(e->m, &f, &h, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "6"));
}

static void test_compile_errors(void **state)
{
    struct env *e = *state;
    struct tpu_keras_compile c;
    struct tpu_diag d = {0};
    struct tpu_keras_model *m = NULL;
    compile_default(&c);
    c.loss = TPU_LOSS_MSE;
    assert_int_equal(tpu_keras_model_compile(e->dev, e->net, &c, &m, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "compile's loss is mean_squared_error but the net 'keras_test' "
                        "was built for sparse_categorical_crossentropy (tpu_net_set_output "
                        "chose it); compile with loss sparse_categorical_crossentropy or set "
                        "the net's output with the loss you want");
    compile_default(&c);
    c.n_metrics = 1;
    c.metrics[0] = TPU_METRIC_MAE;
    assert_int_equal(tpu_keras_model_compile(e->dev, e->net, &c, &m, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "metric 'mae' compares outputs with regression targets (loss "
                        "mean_squared_error); this model's loss is "
                        "sparse_categorical_crossentropy: use accuracy or "
                        "sparse_categorical_crossentropy");
    c.n_metrics = 2;
    c.metrics[0] = TPU_METRIC_ACCURACY;
    c.metrics[1] = TPU_METRIC_ACCURACY;
    assert_int_equal(tpu_keras_model_compile(e->dev, e->net, &c, &m, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "compile's metrics list 'accuracy' twice (metrics[0] and [1]); "
                        "give each metric once");
    compile_default(&c);
    c.steps_per_execution = 0;
    assert_int_equal(tpu_keras_model_compile(e->dev, e->net, &c, &m, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "steps_per_execution is 0; it must be at least 1 (the batches "
                        "each execution runs on the chip), or 'auto' "
                        "(steps_per_execution_auto)");
    assert_null(m);
    enum tpu_keras_metric mt;
    assert_int_equal(tpu_keras_metric_parse("acc", &mt, &d), 0);
    assert_int_equal(mt, TPU_METRIC_ACCURACY);
    assert_int_equal(tpu_keras_metric_parse("acuracy", &mt, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "unknown metric 'acuracy' (did you mean 'accuracy'?); compile's "
                        "metrics are accuracy (acc), sparse_categorical_crossentropy, mse "
                        "(mean_squared_error) and mae (mean_absolute_error)");
    /* the learning rate is the host's only with the host schedule */
    compile_spe(e, 1, false);
    assert_int_equal(tpu_keras_set_learning_rate(e->m, 0.1f, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "TPU_SCHEDULE_HOST"));
}

/* ---- evaluate, predict, *_on_batch ----------------------------------------------------------- */

static void test_evaluate_and_predict_n_in_n_out(void **state)
{
    struct env *e = *state;
    compile_spe(e, 2, true);
    struct tpu_dataset v = view(e, 0, 22); /* batches of 4: five full and one of 2 */
    struct rec r;
    struct tpu_callback cb = recorder(&r);
    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.arrays = &v;
    ev.batch_size = 4;
    ev.callbacks = &cb;
    ev.n_callbacks = 1;
    struct tpu_logs a, b;
    struct tpu_diag d = {0};
    ok(tpu_keras_evaluate(e->m, &ev, &a, &d), &d);
    assert_string_equal(r.log, "vb tbb0 tbe1 tbb2 tbe3 tbb4 tbe5 ve ");
    assert_int_equal(r.params.steps, 6);
    /* the same 22 examples in one batch: the same accuracy exactly, the loss up to the
     * order of the per-step float sums (one step of 22 against six of 4) */
    ev.batch_size = 22;
    ev.callbacks = NULL;
    ev.n_callbacks = 0;
    ok(tpu_keras_evaluate(e->m, &ev, &b, &d), &d);
    assert_true(tpu_logs_get(&a, "accuracy") == tpu_logs_get(&b, "accuracy"));
    assert_true(fabs(tpu_logs_get(&a, "loss") - tpu_logs_get(&b, "loss")) <=
                1e-6 * fabs(tpu_logs_get(&b, "loss")));
    /* predict: 22 rows for 22 examples, each the row predict_on_batch gives for it alone;
     * its hooks fire once per execution of 2 batches, as evaluate's */
    ev.batch_size = 4;
    cb = recorder(&r);
    ev.callbacks = &cb;
    ev.n_callbacks = 1;
    float *rows = NULL;
    uint64_t n = 0;
    uint32_t cols = 0;
    ok(tpu_keras_predict(e->m, &ev, &rows, &n, &cols, &d), &d);
    assert_int_equal(n, 22);
    assert_int_equal(cols, CLASSES);
    assert_string_equal(r.log, "pb pbb0 pbe1 pbb2 pbe3 pbb4 pbe5 pe ");
    uint32_t correct = 0;
    for (uint32_t i = 0; i < 22; i++) {
        uint32_t best = 0;
        for (uint32_t k = 1; k < CLASSES; k++)
            if (rows[i * CLASSES + k] > rows[i * CLASSES + best])
                best = k;
        correct += (int32_t)best == v.y[i];
    }
    assert_true(tpu_logs_get(&a, "accuracy") == (double)correct / 22.0);
    struct tpu_dataset one = view(e, 21, 1);
    float *row = NULL;
    ok(tpu_keras_predict_on_batch(e->m, &one, &row, &cols, &d), &d);
    assert_memory_equal(row, rows + 21 * CLASSES, CLASSES * sizeof(float));
    free(row);
    free(rows);
}

static void test_on_batch(void **state)
{
    struct env *e = *state;
    compile_spe(e, 4, true);
    struct tpu_dataset b = view(e, 0, 6);
    struct tpu_logs before, tl, after;
    struct tpu_diag d = {0};
    ok(tpu_keras_test_on_batch(e->m, &b, &before, &d), &d);
    ok(tpu_keras_train_on_batch(e->m, &b, NULL, &tl, &d), &d);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 1);
    /* the step's loss is the loss of these rows before the update */
    assert_true(fabs(tpu_logs_get(&tl, "loss") - tpu_logs_get(&before, "loss")) <=
                1e-5 * tpu_logs_get(&before, "loss"));
    assert_true(tpu_logs_get(&tl, "accuracy") == tpu_logs_get(&before, "accuracy"));
    ok(tpu_keras_test_on_batch(e->m, &b, &after, &d), &d);
    assert_true(tpu_logs_get(&after, "loss") < tpu_logs_get(&before, "loss"));
    /* an odd batch (5 rows on 2 replicas: one padding row weighted 0) trains too */
    struct tpu_dataset odd = view(e, 6, 5);
    ok(tpu_keras_train_on_batch(e->m, &odd, NULL, &tl, &d), &d);
    assert_int_equal(tpu_estimator_global_step(tpu_keras_model_estimator(e->m)), 2);
    assert_true(isfinite(tpu_logs_get(&tl, "loss")));
    double k = tpu_logs_get(&tl, "accuracy") * 5.0;
    assert_true(fabs(k - round(k)) < 1e-9);
    float *rows = NULL;
    uint32_t cols = 0;
    ok(tpu_keras_predict_on_batch(e->m, &odd, &rows, &cols, &d), &d);
    assert_int_equal(cols, CLASSES);
    free(rows);
}

static void test_logs(void **state)
{
    (void)state;
    struct tpu_logs l = {0};
    assert_int_equal(tpu_logs_set(&l, "loss", 1.5), 0);
    assert_int_equal(tpu_logs_set(&l, "accuracy", 0.25), 0);
    assert_int_equal(tpu_logs_set(&l, "loss", 0.5), 0);
    assert_int_equal(l.n, 2);
    assert_true(tpu_logs_get(&l, "loss") == 0.5);
    assert_true(isnan(tpu_logs_get(&l, "val_loss")));
    for (int i = 2; i < TPU_LOGS_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        assert_int_equal(tpu_logs_set(&l, name, i), 0);
    }
    assert_int_equal(tpu_logs_set(&l, "one_more", 1), TPU_ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logs),
        cmocka_unit_test_setup_teardown(test_compile_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_executions_of_4, setup, teardown),
        cmocka_unit_test_setup_teardown(test_execution_cut_to_the_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_executions_of_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_running_logs_are_epoch_means, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epochs_initial_epoch_steps_per_epoch, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_training, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_training_at_a_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_verbose_adds_the_bar_and_history_keeps_the_callbacks_logs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_per_execution_auto, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_learning_rate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regression_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validation_split_takes_the_last_examples, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_validation_freq, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fit_is_the_estimator_bit_for_bit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial_last_batch_is_trained, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epochs_continue_one_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validation_running_short_warns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epoch_longer_than_a_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample_weight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_class_weight_is_a_sample_weight_per_class, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_input_running_out_mid_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_size_with_executions_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fit_argument_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evaluate_and_predict_n_in_n_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_on_batch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
