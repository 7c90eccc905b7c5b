/* The built-in Keras callbacks (host/keras/callbacks_*.c), each driven hook by hook as fit
 * drives it, on a compiled model of the tiny chip whose params a short fit initialized:
 *   - the progress bar: Keras 2.15's lines for verbose 1 (a terminal and not) and 2, the
 *     "Epoch k/n" line only when n > 1, an unknown number of steps, evaluate outside fit and
 *     silence for validation inside it. The model's clock does not move between the hooks
 *     here (no execution runs), so every time is 0 and the lines are known exactly;
 *   - ModelCheckpoint: save_freq counted in batches across executions of
 *     steps_per_execution batches (Keras's _should_save_on_batch), save_best_only in min and
 *     max mode with Keras's messages, the filepath's fields, the saved checkpoint's tensors
 *     equal to the model's params, every argument error;
 *   - EarlyStopping: patience, min_delta, baseline (an improvement that does not beat it
 *     neither resets the wait nor stops), start_from_epoch, the mode, restore_best_weights
 *     writing back the best epoch's weights, Keras's messages;
 *   - CSVLogger: the header and rows byte for byte (sorted keys, the val_ columns, "NA",
 *     Python's float repr, "\r\n"), append, a separator, quoting, its errors;
 *   - LearningRateScheduler: the rate set before each epoch and read back, its message,
 *     "lr" in the epoch's logs, a model without the host schedule refused.
 * Every check is exact. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpusim/checkpoint.h"
#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/device.h"
#include "tpusim/keras.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

#define FEATURES 4u
#define CLASSES 3u
#define N_EXAMPLES 16u

static void ok(int rc, const struct tpu_diag *d)
{
    if (rc)
        fail_msg("error %d: %s", rc, d->msg);
}

struct env {
    struct tpu_device *dev;
    struct tpu_net *net;
    struct tpu_dataset ds;
    struct tpu_keras_model *m;
    char dir[64]; /* a scratch directory */
};

static void make_data(struct tpu_dataset *ds)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = N_EXAMPLES;
    ds->n_features = FEATURES;
    ds->image_rows = ds->image_cols = 1;
    ds->image_channels = FEATURES;
    ds->n_classes = CLASSES;
    ds->x = malloc(N_EXAMPLES * FEATURES * sizeof *ds->x);
    ds->y = malloc(N_EXAMPLES * sizeof *ds->y);
    assert_non_null(ds->x);
    assert_non_null(ds->y);
    for (uint32_t i = 0; i < N_EXAMPLES; i++) {
        ds->y[i] = (int32_t)(i % CLASSES);
        for (uint32_t j = 0; j < FEATURES; j++)
            ds->x[i * FEATURES + j] = (float)((i * 3 + j * 5) % 7) / 7.0f;
    }
}

/* Compiles the model (host-set learning rate when host_lr) and runs one epoch so that the
 * estimator holds params. */
static void compile_model(struct env *e, bool host_lr)
{
    struct tpu_diag d = {0};
    struct tpu_keras_compile c;
    tpu_keras_model_destroy(&e->m);
    tpu_keras_compile_default(&c);
    c.optimizer.optimizer = TPU_OPT_SGD_MOMENTUM;
    c.optimizer.learning_rate = 0.05f;
    if (host_lr)
        c.optimizer.schedule = TPU_SCHEDULE_HOST;
    c.n_metrics = 1;
    c.metrics[0] = TPU_METRIC_ACCURACY;
    c.run.seed = 5;
    ok(tpu_keras_model_compile(e->dev, e->net, &c, &e->m, &d), &d);
    struct tpu_keras_fit f;
    tpu_keras_fit_default(&f);
    f.data.arrays = &e->ds;
    f.batch_size = 8;
    f.verbose = 0;
    f.shuffle = false;
    struct tpu_history h;
    memset(&h, 0, sizeof h);
    ok(tpu_keras_fit(e->m, &f, &h, &d), &d);
    tpu_history_free(&h);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 1;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    struct tpu_diag d = {0};
    uint32_t h, o;
    ok(tpu_net_create("cb_test", 1, 1, FEATURES, &e->net, &d), &d);
    ok(tpu_net_dense(e->net, NULL, 0, 6, TPU_ACT_RELU, &h, &d), &d);
    ok(tpu_net_dense(e->net, NULL, h, CLASSES, TPU_ACT_NONE, &o, &d), &d);
    ok(tpu_net_set_output(e->net, o, TPU_LOSS_SOFTMAX_XENT, &d), &d);
    make_data(&e->ds);
    snprintf(e->dir, sizeof e->dir, "/tmp/tpusim_cb_XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    compile_model(e, false);
    *state = e;
    return 0;
}

static void remove_tree(const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int teardown(void **state)
{
    struct env *e = *state;
    tpu_keras_model_destroy(&e->m);
    tpu_net_destroy(&e->net);
    tpu_device_close(&e->dev);
    tpu_dataset_free(&e->ds);
    remove_tree(e->dir);
    free(e);
    return 0;
}

static struct tpu_logs logs_of(int n, ...)
{
    struct tpu_logs l;
    memset(&l, 0, sizeof l);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *name = va_arg(ap, const char *);
        double v = va_arg(ap, double);
        assert_int_equal(tpu_logs_set(&l, name, v), 0);
    }
    va_end(ap);
    return l;
}

/* ---- output capture ------------------------------------------------------------------- */

struct capture {
    FILE *f;
    char *buf;
    size_t len;
};

static void cap_open(struct capture *c)
{
    memset(c, 0, sizeof *c);
    c->f = open_memstream(&c->buf, &c->len);
    assert_non_null(c->f);
}

static const char *cap_text(struct capture *c)
{
    fflush(c->f);
    return c->buf;
}

static void cap_close(struct capture *c)
{
    fclose(c->f);
    free(c->buf);
}

/* ---- the progress bar ------------------------------------------------------------------- */

static void progbar_epoch(struct tpu_callback *cb, struct tpu_keras_model *m, uint64_t epoch,
                          const uint64_t *batch_ends, size_t n, struct tpu_logs *end_logs)
{
    struct tpu_diag d = {0};
    ok(cb->on_epoch_begin(cb->ctx, m, epoch, NULL, &d), &d);
    for (size_t i = 0; i < n; i++) {
        struct tpu_logs l = logs_of(2, "loss", 0.5 + (double)i, "accuracy", 0.25);
        ok(cb->on_train_batch_end(cb->ctx, m, batch_ends[i], &l, &d), &d);
    }
    ok(cb->on_epoch_end(cb->ctx, m, epoch, end_logs, &d), &d);
}

static void test_progbar_verbose2(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    ok(tpu_callback_progbar(c.f, 2, false, &cb, &d), &d);
    const struct tpu_keras_params p = {.verbose = 2, .epochs = 3, .steps = 10};
    cb.set_params(cb.ctx, &p);
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    const uint64_t ends[] = {3, 7, 9}; /* steps_per_execution 4 */
    struct tpu_logs l = logs_of(3, "loss", 0.51234, "accuracy", 0.875, "val_loss", 0.0001);
    progbar_epoch(&cb, e->m, 0, ends, 3, &l);
    /* validation inside fit draws nothing */
    ok(cb.on_test_begin(cb.ctx, e->m, NULL, &d), &d);
    ok(cb.on_test_batch_end(cb.ctx, e->m, 0, &l, &d), &d);
    ok(cb.on_test_end(cb.ctx, e->m, &l, &d), &d);
    ok(cb.on_train_end(cb.ctx, e->m, NULL, &d), &d);
    assert_string_equal(cap_text(&c),
                        "Epoch 1/3\n"
                        "10/10 - 0s - loss: 0.5123 - accuracy: 0.8750 - val_loss: 1.0000e-04 "
                        "- 0s/epoch - 0s/step\n");
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_progbar_one_epoch_no_header(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    ok(tpu_callback_progbar(c.f, 2, false, &cb, &d), &d);
    const struct tpu_keras_params p = {.verbose = 2, .epochs = 1, .steps = 5};
    cb.set_params(cb.ctx, &p);
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    const uint64_t ends[] = {4};
    struct tpu_logs l = logs_of(1, "loss", -2.0);
    progbar_epoch(&cb, e->m, 0, ends, 1, &l);
    /* Keras prints "Epoch 1/1" never: only with more than one epoch */
    assert_string_equal(cap_text(&c), "5/5 - 0s - loss: -2.0000 - 0s/epoch - 0s/step\n");
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_progbar_verbose1(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    ok(tpu_callback_progbar(c.f, 1, false, &cb, &d), &d);
    const struct tpu_keras_params p = {.verbose = 1, .epochs = 2, .steps = 10};
    cb.set_params(cb.ctx, &p);
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    const uint64_t ends[] = {3, 7, 9};
    struct tpu_logs l = logs_of(2, "loss", 0.25, "accuracy", 0.5);
    progbar_epoch(&cb, e->m, 1, ends, 3, &l);
    /* not a terminal: each update a new line; the second update comes 0 simulated seconds
     * after the first (under Keras's 0.05 s interval): skipped; the epoch's end always */
    assert_string_equal(cap_text(&c),
                        "Epoch 2/2\n"
                        "\n 4/10 [===========>..................] - ETA: 0s - loss: 0.5000 - "
                        "accuracy: 0.2500"
                        "\n10/10 [==============================] - 0s 0s/step - loss: 0.2500 - "
                        "accuracy: 0.5000\n");
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_progbar_terminal(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    ok(tpu_callback_progbar(c.f, 1, true, &cb, &d), &d);
    const struct tpu_keras_params p = {.verbose = 1, .epochs = 1, .steps = 2};
    cb.set_params(cb.ctx, &p);
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    const uint64_t ends[] = {0};
    struct tpu_logs l = logs_of(1, "loss", 0.125);
    progbar_epoch(&cb, e->m, 0, ends, 1, &l);
    /* the first update: '\r' (nothing to erase); the last: a '\b' over each character of
     * the previous line, '\r', the line, spaces over what is left of the previous one, '\n'.
     * A value the epoch's logs lack (accuracy) keeps its last value, as Keras's Progbar. */
    char want[512];
    const char *first = "1/2 [==============>...............] - ETA: 0s - loss: 0.5000 - "
                        "accuracy: 0.2500";
    const char *last = "2/2 [==============================] - 0s 0s/step - loss: 0.1250 - "
                       "accuracy: 0.2500";
    size_t n = (size_t)snprintf(want, sizeof want, "\r%s", first);
    memset(want + n, '\b', strlen(first));
    n += strlen(first);
    snprintf(want + n, sizeof want - n, "\r%s%*s\n", last,
             (int)(strlen(first) > strlen(last) ? strlen(first) - strlen(last) : 0), "");
    assert_string_equal(cap_text(&c), want);
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_progbar_unknown_steps_and_evaluate(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    ok(tpu_callback_progbar(c.f, 1, false, &cb, &d), &d);
    /* evaluate outside fit, steps unknown: "%7d/Unknown", then the target is what was seen */
    const struct tpu_keras_params p = {.verbose = 1, .epochs = 1, .steps = 0};
    cb.set_params(cb.ctx, &p);
    ok(cb.on_test_begin(cb.ctx, e->m, NULL, &d), &d);
    struct tpu_logs l = logs_of(1, "loss", 0.0005);
    ok(cb.on_test_batch_end(cb.ctx, e->m, 2, &l, &d), &d);
    ok(cb.on_test_end(cb.ctx, e->m, &l, &d), &d);
    assert_string_equal(cap_text(&c),
                        "\n      3/Unknown - 0s 0s/step - loss: 5.0000e-04"
                        "\n3/3 [==============================] - 0s 0s/step - loss: "
                        "5.0000e-04\n");
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_progbar_errors(void **state)
{
    (void)state;
    struct tpu_callback cb;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_callback_progbar(stdout, 3, false, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "ProgbarLogger: verbose 3 is not a Keras verbosity; give 0 "
                               "(silent), 1 (a progress bar) or 2 (one line per epoch)");
    assert_int_equal(tpu_callback_progbar(NULL, 1, false, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "ProgbarLogger: verbose 1 needs a stream to write to (out is "
                               "NULL); give one, or verbose 0");
    /* verbose 0: no hooks, nothing to free */
    ok(tpu_callback_progbar(NULL, 0, false, &cb, &d), &d);
    assert_null(cb.ctx);
    assert_null(cb.on_epoch_end);
    tpu_callback_free(&cb);
    tpu_callback_free(NULL);
}

/* ---- ModelCheckpoint ------------------------------------------------------------------- */

/* The checkpoint in dir holds every param of the model, as read_param gives it. */
static void assert_checkpoint_is_model(struct env *e, const char *dir)
{
    struct tpu_diag d = {0};
    char path[512];
    uint64_t step = 0;
    ok(tpu_checkpoint_latest(dir, &step, path, sizeof path, &d), &d);
    struct tpu_estimator *est = tpu_keras_model_estimator(e->m);
    assert_int_equal(step, tpu_estimator_global_step(est));
    struct tpu_checkpoint_info info;
    ok(tpu_checkpoint_inspect(path, &info, &d), &d);
    const size_t n = tpu_estimator_n_params(est);
    assert_true(n >= 4);
    assert_int_equal(info.n_tensors, n);
    struct tpu_tensor *t = calloc(n, sizeof *t);
    float **data = calloc(n, sizeof *data);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        uint32_t rows, cols;
        ok(tpu_estimator_param_info(est, i, &name, &rows, &cols, &d), &d);
        data[i] = malloc((size_t)rows * cols * sizeof(float));
        t[i] = (struct tpu_tensor){.name = name, .dtype = TPU_F32, .rows = rows, .cols = cols,
                                   .data = data[i]};
    }
    ok(tpu_checkpoint_load(path, t, n, NULL, &d), &d);
    for (size_t i = 0; i < n; i++) {
        size_t bytes = (size_t)t[i].rows * t[i].cols * sizeof(float);
        float *want = malloc(bytes);
        ok(tpu_estimator_read_param(est, t[i].name, want, bytes, &d), &d);
        assert_memory_equal(data[i], want, bytes);
        free(want);
        free(data[i]);
    }
    free(data);
    free(t);
    tpu_checkpoint_info_free(&info);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_checkpoint_save_freq_with_executions(void **state)
{
    struct env *e = *state;
    struct tpu_diag d = {0};
    char fp[128];
    snprintf(fp, sizeof fp, "%s/e{epoch}-b{batch}", e->dir);
    struct tpu_model_checkpoint_args a = {.filepath = fp, .save_freq = 5};
    struct tpu_callback cb;
    ok(tpu_callback_model_checkpoint(&a, &cb, &d), &d);
    assert_null(cb.on_train_begin);
    /* 10 batches an epoch, steps_per_execution 4: batch ends 3, 7, 9. Keras counts 4, 8 (a
     * save at batch 7: the count restarts), 2; then 2 + 4 = 6 (a save at epoch 2's batch 3),
     * 4, 6 (a save at its batch 9). */
    const uint64_t ends[] = {3, 7, 9};
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        ok(cb.on_epoch_begin(cb.ctx, e->m, epoch, NULL, &d), &d);
        for (int i = 0; i < 3; i++) {
            struct tpu_logs l = logs_of(1, "loss", 1.0);
            ok(cb.on_train_batch_end(cb.ctx, e->m, ends[i], &l, &d), &d);
        }
        struct tpu_logs l = logs_of(1, "loss", 1.0);
        ok(cb.on_epoch_end(cb.ctx, e->m, epoch, &l, &d), &d); /* no save per epoch */
    }
    const char *saved[] = {"e1-b8", "e2-b4", "e2-b10"};
    const char *not_saved[] = {"e1-b4", "e1-b10", "e2-b8", "e1", "e2"};
    char path[256];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", e->dir, saved[i]);
        assert_true(exists(path));
        assert_checkpoint_is_model(e, path);
    }
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", e->dir, not_saved[i]);
        assert_false(exists(path));
    }
    tpu_callback_free(&cb);
}

static void test_checkpoint_best_only(void **state)
{
    struct env *e = *state;
    struct tpu_diag d = {0};
    struct capture c;
    cap_open(&c);
    char fp[128];
    snprintf(fp, sizeof fp, "%s/best", e->dir);
    struct tpu_model_checkpoint_args a = {.filepath = fp, .save_best_only = true,
                                          .verbose_out = c.f};
    struct tpu_callback cb;
    ok(tpu_callback_model_checkpoint(&a, &cb, &d), &d); /* monitor val_loss, mode auto: min */
    const double val[] = {0.5, 0.6, 0.4, 0.4};
    for (uint64_t epoch = 0; epoch < 4; epoch++) {
        struct tpu_logs l = logs_of(2, "loss", 1.0, "val_loss", val[epoch]);
        ok(cb.on_epoch_begin(cb.ctx, e->m, epoch, NULL, &d), &d);
        ok(cb.on_epoch_end(cb.ctx, e->m, epoch, &l, &d), &d);
    }
    char want[1024];
    snprintf(want, sizeof want,
             "\nEpoch 1: val_loss improved from inf to 0.50000, saving model to %s\n"
             "\nEpoch 2: val_loss did not improve from 0.50000\n"
             "\nEpoch 3: val_loss improved from 0.50000 to 0.40000, saving model to %s\n"
             "\nEpoch 4: val_loss did not improve from 0.40000\n", fp, fp);
    assert_string_equal(cap_text(&c), want);
    assert_checkpoint_is_model(e, fp);
    /* a missing monitor: Keras's warning, no save, no error */
    struct tpu_logs l = logs_of(1, "loss", 0.1);
    ok(cb.on_epoch_end(cb.ctx, e->m, 4, &l, &d), &d);
    assert_int_equal(d.code, 0);
    assert_string_equal(d.msg, "warning: ModelCheckpoint can save best model only with "
                               "val_loss available, skipping");
    tpu_callback_free(&cb);
    cap_close(&c);

    /* mode auto on an accuracy: larger is better */
    cap_open(&c);
    snprintf(fp, sizeof fp, "%s/acc", e->dir);
    a = (struct tpu_model_checkpoint_args){.filepath = fp, .monitor = "val_accuracy",
                                           .save_best_only = true, .verbose_out = c.f};
    ok(tpu_callback_model_checkpoint(&a, &cb, &d), &d);
    const double acc[] = {0.5, 0.7, 0.6};
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        struct tpu_logs la = logs_of(1, "val_accuracy", acc[epoch]);
        ok(cb.on_epoch_end(cb.ctx, e->m, epoch, &la, &d), &d);
    }
    snprintf(want, sizeof want,
             "\nEpoch 1: val_accuracy improved from -inf to 0.50000, saving model to %s\n"
             "\nEpoch 2: val_accuracy improved from 0.50000 to 0.70000, saving model to %s\n"
             "\nEpoch 3: val_accuracy did not improve from 0.70000\n", fp, fp);
    assert_string_equal(cap_text(&c), want);
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_checkpoint_filepath(void **state)
{
    struct env *e = *state;
    struct tpu_diag d = {0};
    char fp[128];
    snprintf(fp, sizeof fp, "%s/w.{epoch:02d}-{val_loss:.2f}-{{x}}", e->dir);
    struct tpu_model_checkpoint_args a = {.filepath = fp};
    struct tpu_callback cb;
    ok(tpu_callback_model_checkpoint(&a, &cb, &d), &d);
    struct tpu_logs l = logs_of(2, "loss", 0.3, "val_loss", 0.41449);
    ok(cb.on_epoch_end(cb.ctx, e->m, 2, &l, &d), &d);
    char path[256];
    snprintf(path, sizeof path, "%s/w.03-0.41-{x}", e->dir);
    assert_true(exists(path));
    /* a field the logs do not hold: Keras's KeyError sentence, with the fields there are */
    snprintf(fp, sizeof fp, "%s/{val_acc:.3f}", e->dir);
    tpu_callback_free(&cb);
    a.filepath = fp;
    ok(tpu_callback_model_checkpoint(&a, &cb, &d), &d);
    assert_int_equal(cb.on_epoch_end(cb.ctx, e->m, 0, &l, &d), TPU_EINVAL);
    char want[512];
    snprintf(want, sizeof want, "Failed to format this callback filepath: \"%s\". Reason: "
             "'val_acc' (the fields a save here can fill: epoch, loss, val_loss); name one of "
             "those", fp);
    assert_string_equal(d.msg, want);
    tpu_callback_free(&cb);
}

static void test_checkpoint_errors(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    struct tpu_callback cb;
    struct tpu_model_checkpoint_args a = {.filepath = ""};
    assert_int_equal(tpu_callback_model_checkpoint(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "ModelCheckpoint: filepath is empty; give the checkpoint "
                               "directory to write, e.g. \"ckpt/{epoch:02d}\"");
    a.filepath = "ckpt/{epoch";
    assert_int_equal(tpu_callback_model_checkpoint(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Failed to format this callback filepath: \"ckpt/{epoch\". "
                               "Reason: Single '{' encountered in format string; close the "
                               "field with '}' or write '{{' for a brace");
    a.filepath = "ckpt/}";
    assert_int_equal(tpu_callback_model_checkpoint(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Failed to format this callback filepath: \"ckpt/}\". Reason: "
                               "Single '}' encountered in format string; write '}}' for a "
                               "brace");
    a.filepath = "ckpt/{epoch:x}";
    assert_int_equal(tpu_callback_model_checkpoint(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "Failed to format this callback filepath: \"ckpt/{epoch:x}\". "
                               "Reason: the format spec 'x' of field 'epoch' is not one tpusim "
                               "formats; use [0][width]d for epoch and batch ({epoch:02d}) and "
                               "[.precision]f, e or g for values ({val_loss:.2f})");
    a.filepath = "ckpt";
    a.mode = "maximum";
    assert_int_equal(tpu_callback_model_checkpoint(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "ModelCheckpoint: mode 'maximum' is unknown; give 'auto' (max "
                               "for a monitor holding \"acc\", else min), 'min' or 'max'");
    assert_int_equal(tpu_callback_model_checkpoint(NULL, &cb, &d), TPU_EINVAL);
}

/* ---- EarlyStopping ---------------------------------------------------------------------- */

/* Runs the epoch ends of `vals` (monitor "loss") and returns the epoch fit stops after (the
 * index in vals), or -1. */
static int run_early_stopping(struct env *e, const struct tpu_early_stopping_args *a,
                              const double *vals, int n)
{
    struct tpu_diag d = {0};
    struct tpu_callback cb;
    ok(tpu_callback_early_stopping(a, &cb, &d), &d);
    compile_model(e, false); /* a fresh model: stop_training clear */
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    int stopped = -1;
    for (int i = 0; i < n && stopped < 0; i++) {
        struct tpu_logs l = logs_of(2, "loss", vals[i], "accuracy", 1.0 - vals[i]);
        ok(cb.on_epoch_end(cb.ctx, e->m, (uint64_t)i, &l, &d), &d);
        if (tpu_keras_stop_training_requested(e->m))
            stopped = i;
    }
    ok(cb.on_train_end(cb.ctx, e->m, NULL, &d), &d);
    tpu_callback_free(&cb);
    return stopped;
}

static void test_early_stopping_rules(void **state)
{
    struct env *e = *state;
    struct tpu_early_stopping_args a = {.monitor = "loss", .patience = 2, .baseline = NAN};
    const double v1[] = {1.0, 0.9, 0.95, 0.96, 0.5};
    /* improvements at 0 and 1; no improvement at 2 (wait 1) and 3 (wait 2 >= 2): stop */
    assert_int_equal(run_early_stopping(e, &a, v1, 5), 3);
    /* patience 0: the first epoch without improvement after epoch 0 */
    a.patience = 0;
    assert_int_equal(run_early_stopping(e, &a, v1, 5), 2);
    /* min_delta 0.2: 0.9 is not an improvement of more than 0.2 over 1.0 */
    a.patience = 1;
    a.min_delta = 0.2;
    assert_int_equal(run_early_stopping(e, &a, v1, 5), 1);
    a.min_delta = -0.2; /* taken as |min_delta|, as Keras does */
    assert_int_equal(run_early_stopping(e, &a, v1, 5), 1);
    /* baseline 0.5: improvements that do not beat it keep the wait growing, and an
     * improving epoch never stops (Keras returns after an improvement); the first epoch
     * without one stops */
    a.min_delta = 0;
    a.patience = 2;
    a.baseline = 0.5;
    const double v2[] = {0.9, 0.8, 0.7, 0.6, 0.65};
    assert_int_equal(run_early_stopping(e, &a, v2, 5), 4);
    const double v3[] = {0.9, 0.4, 0.45, 0.46, 0.47};
    assert_int_equal(run_early_stopping(e, &a, v3, 5), 3); /* 0.4 beat it: wait 0 at 1 */
    /* start_from_epoch 2: epochs 0 and 1 are not counted */
    a.baseline = NAN;
    a.patience = 1;
    a.start_from_epoch = 2;
    const double v4[] = {0.1, 0.2, 0.3, 0.4, 0.5};
    assert_int_equal(run_early_stopping(e, &a, v4, 5), 3);
    /* mode auto on an accuracy: larger is better ("accuracy" is 1 - loss here) */
    a.start_from_epoch = 0;
    a.monitor = "accuracy";
    const double v5[] = {0.5, 0.4, 0.3, 0.35, 0.36}; /* accuracy 0.5, 0.6, 0.7, 0.65, 0.64 */
    assert_int_equal(run_early_stopping(e, &a, v5, 5), 3);
    a.mode = "min";
    assert_int_equal(run_early_stopping(e, &a, v5, 5), 1);
    /* a monitor the logs lack: Keras's warning, never a stop */
    a.monitor = "val_loss";
    a.mode = NULL;
    assert_int_equal(run_early_stopping(e, &a, v1, 5), -1);
}

static void set_all_weights(struct env *e, float value)
{
    struct tpu_estimator *est = tpu_keras_model_estimator(e->m);
    struct tpu_diag d = {0};
    for (size_t i = 0; i < tpu_estimator_n_params(est); i++) {
        const char *name;
        uint32_t rows, cols;
        ok(tpu_estimator_param_info(est, i, &name, &rows, &cols, &d), &d);
        size_t n = (size_t)rows * cols;
        float *v = malloc(n * sizeof *v);
        for (size_t k = 0; k < n; k++)
            v[k] = value + (float)k;
        char copy[64];
        snprintf(copy, sizeof copy, "%s", name);
        ok(tpu_estimator_write_param(est, copy, v, n * sizeof *v, &d), &d);
        free(v);
    }
}

/* The first element of param `name`. */
static float first_of(struct env *e, const char *name)
{
    struct tpu_estimator *est = tpu_keras_model_estimator(e->m);
    struct tpu_diag d = {0};
    for (size_t i = 0; i < tpu_estimator_n_params(est); i++) {
        const char *pname;
        uint32_t rows, cols;
        ok(tpu_estimator_param_info(est, i, &pname, &rows, &cols, &d), &d);
        if (strcmp(pname, name))
            continue;
        float *v = malloc((size_t)rows * cols * sizeof *v);
        ok(tpu_estimator_read_param(est, name, v, (size_t)rows * cols * sizeof *v, &d), &d);
        float f = v[0];
        free(v);
        return f;
    }
    fail_msg("no param %s", name);
    return 0;
}

static void test_early_stopping_restore_best_weights(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_diag d = {0};
    struct tpu_early_stopping_args a = {.patience = 2, .baseline = NAN,
                                        .restore_best_weights = true, .verbose_out = c.f};
    struct tpu_callback cb;
    ok(tpu_callback_early_stopping(&a, &cb, &d), &d); /* monitor val_loss */
    compile_model(e, false);
    ok(cb.on_train_begin(cb.ctx, e->m, NULL, &d), &d);
    /* epoch k ends with weights k*100 + index; val_loss best at epoch 1 */
    const double val[] = {1.0, 0.5, 0.7, 0.8};
    int stopped = -1;
    for (int k = 0; k < 4 && stopped < 0; k++) {
        set_all_weights(e, 100.0f * (float)k);
        struct tpu_logs l = logs_of(2, "loss", 1.0, "val_loss", val[k]);
        ok(cb.on_epoch_end(cb.ctx, e->m, (uint64_t)k, &l, &d), &d);
        if (tpu_keras_stop_training_requested(e->m))
            stopped = k;
    }
    assert_int_equal(stopped, 3);
    ok(cb.on_train_end(cb.ctx, e->m, NULL, &d), &d);
    /* the weights are epoch 1's; the optimizer state is not a weight: it stays epoch 3's */
    assert_true(first_of(e, "dense.kernel") == 100.0f);
    assert_true(first_of(e, "dense_1.bias") == 100.0f);
    assert_true(first_of(e, "dense.kernel.vel") == 300.0f);
    assert_string_equal(cap_text(&c), "Restoring model weights from the end of the best "
                                      "epoch: 2.\nEpoch 4: early stopping\n");
    tpu_callback_free(&cb);
    cap_close(&c);
}

static void test_early_stopping_errors(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    struct tpu_callback cb;
    struct tpu_early_stopping_args a = {.mode = "bigger", .baseline = NAN};
    assert_int_equal(tpu_callback_early_stopping(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "EarlyStopping: mode 'bigger' is unknown; give 'auto' (max for "
                               "a monitor ending in acc, accuracy or auc, else min), 'min' or "
                               "'max'");
    a = (struct tpu_early_stopping_args){.min_delta = NAN, .baseline = NAN};
    assert_int_equal(tpu_callback_early_stopping(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "EarlyStopping: min_delta nan is not a finite number; give the "
                               "smallest change that counts as an improvement, e.g. 0.001");
    a = (struct tpu_early_stopping_args){.baseline = INFINITY};
    assert_int_equal(tpu_callback_early_stopping(&a, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "EarlyStopping: baseline inf is infinite; give a finite value "
                               "the monitor must beat, or NaN for none");
    assert_int_equal(tpu_callback_early_stopping(NULL, &cb, &d), TPU_EINVAL);
}

/* ---- CSVLogger -------------------------------------------------------------------------- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void csv_epochs(struct tpu_callback *cb, struct env *e, const struct tpu_logs *l, int n)
{
    struct tpu_diag d = {0};
    ok(cb->on_train_begin(cb->ctx, e->m, NULL, &d), &d);
    for (int i = 0; i < n; i++) {
        struct tpu_logs copy = l[i];
        ok(cb->on_epoch_end(cb->ctx, e->m, (uint64_t)i, &copy, &d), &d);
    }
    ok(cb->on_train_end(cb->ctx, e->m, NULL, &d), &d);
}

static void test_csv_logger(void **state)
{
    struct env *e = *state;
    struct tpu_diag d = {0};
    char path[128];
    snprintf(path, sizeof path, "%s/log.csv", e->dir);
    struct tpu_callback cb;
    ok(tpu_callback_csv_logger(path, ',', false, &cb, &d), &d);
    /* no val_ logs in the first epoch: Keras adds a val_ column for each key */
    struct tpu_logs l[3] = {logs_of(2, "loss", 0.5, "accuracy", 0.1),
                            logs_of(2, "loss", 1.0 / 3.0, "accuracy", 1e-05),
                            logs_of(2, "loss", 100.0, "accuracy", NAN)};
    csv_epochs(&cb, e, l, 3);
    assert_string_equal(read_file(path),
                        "epoch,accuracy,loss,val_accuracy,val_loss\r\n"
                        "0,0.1,0.5,NA,NA\r\n"
                        "1,1e-05,0.3333333333333333,NA,NA\r\n"
                        "2,nan,100.0,NA,NA\r\n");
    /* append: the header is not written again; a fresh writer takes the keys of its first
     * epoch, which hold val_ logs now (sorted: lr after accuracy) */
    tpu_callback_free(&cb);
    ok(tpu_callback_csv_logger(path, ',', true, &cb, &d), &d);
    struct tpu_logs l2[1] = {logs_of(4, "loss", 0.25, "accuracy", 0.75, "val_loss", 0.125,
                                     "lr", 0.001)};
    csv_epochs(&cb, e, l2, 1);
    assert_string_equal(read_file(path),
                        "epoch,accuracy,loss,val_accuracy,val_loss\r\n"
                        "0,0.1,0.5,NA,NA\r\n"
                        "1,1e-05,0.3333333333333333,NA,NA\r\n"
                        "2,nan,100.0,NA,NA\r\n"
                        "0,0.75,0.25,0.001,0.125\r\n");
    tpu_callback_free(&cb);
    /* another separator; a value missing in a later epoch is "NA"; quoting (excel dialect) */
    ok(tpu_callback_csv_logger(path, ';', false, &cb, &d), &d);
    struct tpu_logs l3[2] = {logs_of(2, "a;b", 2.5e16, "val_x", -0.0),
                             logs_of(1, "a;b", 1e-4)};
    csv_epochs(&cb, e, l3, 2);
    assert_string_equal(read_file(path),
                        "epoch;\"a;b\";val_x\r\n"
                        "0;2.5e+16;-0.0\r\n"
                        "1;0.0001;NA\r\n");
    tpu_callback_free(&cb);
}

static void test_csv_logger_errors(void **state)
{
    struct env *e = *state;
    struct tpu_diag d = {0};
    struct tpu_callback cb;
    assert_int_equal(tpu_callback_csv_logger("", ',', false, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "CSVLogger: filename is empty; give the CSV file to write, "
                               "e.g. \"training.log\"");
    assert_int_equal(tpu_callback_csv_logger("x.csv", '"', false, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "CSVLogger: separator 0x22 cannot separate CSV fields (it is "
                               "a quote, a line end or NUL); give ',' (the default), ';' or "
                               "'\\t'");
    char path[128];
    snprintf(path, sizeof path, "%s/no/such/dir/log.csv", e->dir);
    ok(tpu_callback_csv_logger(path, ',', false, &cb, &d), &d);
    assert_int_equal(cb.on_train_begin(cb.ctx, e->m, NULL, &d), TPU_EIO);
    char want[512];
    snprintf(want, sizeof want, "CSVLogger: cannot open '%s' for writing: No such file or "
             "directory; give a file in a directory that exists and that you may write to",
             path);
    assert_string_equal(d.msg, want);
    tpu_callback_free(&cb);
}

/* ---- LearningRateScheduler --------------------------------------------------------------- */

static float halve_from_1(void *ctx, uint64_t epoch, float lr)
{
    int *calls = ctx;
    (*calls)++;
    return epoch < 1 ? lr : lr * 0.5f;
}

static float not_finite(void *ctx, uint64_t epoch, float lr)
{
    (void)ctx, (void)epoch, (void)lr;
    return NAN;
}

static void test_lr_scheduler(void **state)
{
    struct env *e = *state;
    struct capture c;
    cap_open(&c);
    struct tpu_diag d = {0};
    struct tpu_callback cb;
    int calls = 0;
    ok(tpu_callback_lr_scheduler(halve_from_1, &calls, c.f, &cb, &d), &d);
    compile_model(e, true);
    float lr = 0;
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        ok(cb.on_epoch_begin(cb.ctx, e->m, epoch, NULL, &d), &d);
        assert_int_equal(tpu_keras_get_learning_rate(e->m, &lr), 0);
        struct tpu_logs l = logs_of(1, "loss", 1.0);
        ok(cb.on_epoch_end(cb.ctx, e->m, epoch, &l, &d), &d);
        assert_true(tpu_logs_get(&l, "lr") == (double)lr); /* the rate in force */
    }
    assert_int_equal(calls, 3);
    assert_true(lr == 0.0125f); /* 0.05, 0.025, 0.0125 */
    assert_string_equal(cap_text(&c),
                        "\nEpoch 1: LearningRateScheduler setting learning rate to 0.05.\n"
                        "\nEpoch 2: LearningRateScheduler setting learning rate to 0.025.\n"
                        "\nEpoch 3: LearningRateScheduler setting learning rate to 0.0125.\n");
    tpu_callback_free(&cb);
    cap_close(&c);
    /* a schedule's rate that is not a number */
    ok(tpu_callback_lr_scheduler(not_finite, NULL, NULL, &cb, &d), &d);
    assert_int_equal(cb.on_epoch_begin(cb.ctx, e->m, 4, NULL, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "LearningRateScheduler at epoch 5: the schedule returned nan, "
                               "not a finite learning rate; make it return a number such as "
                               "0.001");
    tpu_callback_free(&cb);
    /* a model without the host schedule */
    compile_model(e, false);
    ok(tpu_callback_lr_scheduler(halve_from_1, &calls, NULL, &cb, &d), &d);
    assert_int_equal(cb.on_epoch_begin(cb.ctx, e->m, 0, NULL, &d), TPU_EUNSUPPORTED);
    assert_string_equal(d.msg, "LearningRateScheduler at epoch 1: the model's optimizer has no "
                               "host-set learning rate; compile it with optimizer.schedule "
                               "TPU_SCHEDULE_HOST (the rate the scheduler sets before each "
                               "epoch)");
    tpu_callback_free(&cb);
    assert_int_equal(tpu_callback_lr_scheduler(NULL, NULL, NULL, &cb, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "LearningRateScheduler: schedule is NULL; give a function (ctx, "
                               "epoch, lr) -> the epoch's learning rate");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_progbar_verbose2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progbar_one_epoch_no_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progbar_verbose1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progbar_terminal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progbar_unknown_steps_and_evaluate, setup,
                                        teardown),
        cmocka_unit_test(test_progbar_errors),
        cmocka_unit_test_setup_teardown(test_checkpoint_save_freq_with_executions, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_best_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint_filepath, setup, teardown),
        cmocka_unit_test(test_checkpoint_errors),
        cmocka_unit_test_setup_teardown(test_early_stopping_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_stopping_restore_best_weights, setup,
                                        teardown),
        cmocka_unit_test(test_early_stopping_errors),
        cmocka_unit_test_setup_teardown(test_csv_logger, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_logger_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lr_scheduler, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
