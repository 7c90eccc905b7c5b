/* keras_mlp: the Keras-style API (tpusim/keras.h) on Fashion-MNIST, the C counterpart of
 *
 *     model = keras.Sequential([Dense(128, activation="relu"), Dense(10)])
 *     model.compile(optimizer=Adam(0.001), loss=SparseCategoricalCrossentropy(from_logits=True),
 *                   metrics=["accuracy"], steps_per_execution="auto")
 *     model.fit(x_train, y_train, batch_size=128, epochs=1, validation_split=0.1)
 *     model.evaluate(x_test, y_test)
 *
 * on a simulated chip: build the net (tpu_net_*), open a device (tpu_device_open), compile
 * (tpu_keras_model_compile), fit with a callback that prints each epoch's logs, evaluate on
 * the 10,000 test images. It is an example of the library's API, not a second command line.
 *
 *   examples/keras_mlp [--chip NAME] [--hidden N] [--epochs N] [--batch N] [--lr X]
 *                      [--steps-per-execution N|auto] [--validation-split X] [--seed N]
 *                      [--threads N] [--data DIR] [--train-examples N] [--quiet]
 *                      [--estimator-style]
 *
 * --estimator-style trains the same net the TPUEstimator way instead (runtime.h: an
 * estimator over tpu_net_model, the dataset input over the same training rows, shuffled
 * with the same seed, for the same steps), for comparison: fit adds nothing to the model,
 * so when the training rows split into whole batches both print the same test line.
 *
 * The last line printed is "test accuracy: A (loss L, N examples)"; the exit status is 0 on
 * success, 1 on a failure (with the library's message on stderr), 2 on a usage error. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/keras.h"
#include "tpusim/net.h"

struct opts {
    const char *chip, *data;
    uint64_t hidden, epochs, batch, spe, seed, threads, train_examples;
    bool spe_auto, quiet, estimator_style;
    double lr, validation_split;
};

static const char usage_text[] =
    "usage: keras_mlp [--chip NAME] [--hidden N] [--epochs N] [--batch N] [--lr X]\n"
    "                 [--steps-per-execution N|auto] [--validation-split X] [--seed N]\n"
    "                 [--threads N] [--data DIR] [--train-examples N] [--quiet]\n"
    "                 [--estimator-style]\n"
    "Trains a 784-N-10 MLP on Fashion-MNIST with the Keras-style API (compile, fit with\n"
    "validation_split, evaluate) on a simulated chip and prints its test accuracy.\n";

static int usage(const char *flag, const char *rule, const char *value)
{
    fprintf(stderr, "keras_mlp: %s %s; got '%s'; see keras_mlp --help\n", flag, rule, value);
    return 2;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.chip = "tpu-v3", .hidden = 128, .epochs = 1, .batch = 128, .spe = 1,
                       .spe_auto = true, .seed = 1, .lr = 0.001, .validation_split = 0.1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage_text, stdout);
            return 1;
        }
        if (!strcmp(f, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(f, "--estimator-style")) {
            o->estimator_style = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage(f, "needs a value (or is not a flag keras_mlp knows)", "");
        const char *v = argv[++i];
        if (!strcmp(f, "--chip"))
            o->chip = v;
        else if (!strcmp(f, "--data"))
            o->data = v;
        else if (!strcmp(f, "--hidden")) {
            if (parse_u64(v, 1, 65536, &o->hidden))
                return usage(f, "takes a width from 1 to 65536", v);
        } else if (!strcmp(f, "--epochs")) {
            if (parse_u64(v, 1, 1000, &o->epochs))
                return usage(f, "takes a count from 1 to 1000", v);
        } else if (!strcmp(f, "--batch")) {
            if (parse_u64(v, 1, 65536, &o->batch))
                return usage(f, "takes a global batch from 1 to 65536", v);
        } else if (!strcmp(f, "--seed")) {
            if (parse_u64(v, 0, UINT64_MAX, &o->seed))
                return usage(f, "takes a non-negative integer", v);
        } else if (!strcmp(f, "--threads")) {
            if (parse_u64(v, 0, 1024, &o->threads))
                return usage(f, "takes a count from 0 (all CPUs) to 1024", v);
        } else if (!strcmp(f, "--train-examples")) {
            if (parse_u64(v, 2, 60000, &o->train_examples))
                return usage(f, "takes a count from 2 to 60000 (the first examples)", v);
        } else if (!strcmp(f, "--steps-per-execution")) {
            o->spe_auto = !strcmp(v, "auto");
            if (!o->spe_auto && parse_u64(v, 1, 1000000, &o->spe))
                return usage(f, "takes 'auto' or a count from 1 to 1000000", v);
        } else if (!strcmp(f, "--lr")) {
            if (parse_double(v, 1e-9, 10, &o->lr))
                return usage(f, "takes a rate from 1e-9 to 10", v);
        } else if (!strcmp(f, "--validation-split")) {
            if (parse_double(v, 0, 0.99, &o->validation_split))
                return usage(f, "takes a fraction in [0, 0.99]", v);
        } else {
            return usage(f, "is not a flag keras_mlp knows", f);
        }
    }
    return 0;
}

/* the callback: one line per epoch with its logs, as Keras's verbose=2 shows them */
static int print_epoch(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                       struct tpu_logs *logs, struct tpu_diag *d)
{
    const struct opts *o = ctx;
    (void)d;
    if (o->quiet)
        return 0;
    printf("epoch %llu/%llu", (unsigned long long)(epoch + 1), (unsigned long long)o->epochs);
    for (uint32_t i = 0; i < logs->n; i++)
        printf(" - %s: %.4f", logs->name[i], logs->value[i]);
    printf(" - %.3fs simulated\n", tpu_keras_model_seconds(m));
    return 0;
}

static int fail(const char *what, const struct tpu_diag *d)
{
    fprintf(stderr, "keras_mlp: %s: %s\n", what, d->msg);
    return 1;
}

/* The TPUEstimator way: an estimator with the run config and the model compile makes,
 * trained on the training rows fit trains on (the first n * (1 - validation_split)) through
 * the dataset input, whose epoch e is tpu_dataset_shuffle(seed, e) as fit's, for the steps
 * fit runs (epochs * ceil(rows / batch)), then evaluated on the test set. */
static int estimator_style(const struct opts *o, struct tpu_device *dev,
                           const struct tpu_net *net, const struct tpu_keras_compile *c,
                           const struct tpu_dataset *train, const struct tpu_dataset *test,
                           struct tpu_eval_result *res, struct tpu_diag *d)
{
    struct tpu_model model;
    int rc = tpu_net_model(&model, net, &c->optimizer, d);
    if (rc)
        return rc;
    struct tpu_run_config cfg = c->run;
    cfg.train_batch_size = (uint32_t)o->batch;
    cfg.eval_batch_size = (uint32_t)o->batch;
    cfg.iterations_per_loop = o->spe_auto ? 1 : o->spe;
    struct tpu_estimator *est = NULL;
    if ((rc = tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, d)))
        return rc;
    struct tpu_dataset rows = *train;
    if (o->validation_split > 0)
        rows.n_examples = (uint32_t)((double)train->n_examples * (1.0 - o->validation_split));
    struct tpu_dataset_input in, ev;
    tpu_dataset_input_init(&in, &rows, o->seed);
    tpu_dataset_input_init(&ev, test, o->seed);
    const uint64_t steps = o->epochs * ((rows.n_examples + o->batch - 1) / o->batch);
    rc = tpu_estimator_train(est, &in.input, steps, 0, d);
    if (!rc)
        rc = tpu_estimator_evaluate(est, &ev.input, 0, res, d);
    tpu_dataset_input_free(&in);
    tpu_dataset_input_free(&ev);
    tpu_estimator_destroy(&est);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    struct tpu_diag d = {0};
    struct tpu_dataset train = {0}, test = {0};
    struct tpu_net *net = NULL;
    struct tpu_device *dev = NULL;
    struct tpu_keras_model *m = NULL;
    struct tpu_history h = {0};
    int status = 1;

    if (tpu_dataset_fashion_mnist(o.data, true, &train, &d) ||
        tpu_dataset_fashion_mnist(o.data, false, &test, &d)) {
        status = fail("loading Fashion-MNIST", &d);
        goto out;
    }
    if (o.train_examples && o.train_examples < train.n_examples)
        train.n_examples = (uint32_t)o.train_examples; /* the first examples */

    /* the net: 784 inputs (a flat vector, the same bytes as a 28x28x1 image), Dense(hidden,
     * relu), Dense(10), softmax cross-entropy on the logits */
    uint32_t hid, logits;
    if (tpu_net_create("keras_mlp", 1, 1, train.n_features, &net, &d) ||
        tpu_net_dense(net, NULL, 0, (uint32_t)o.hidden, TPU_ACT_RELU, &hid, &d) ||
        tpu_net_dense(net, NULL, hid, TPU_DATASET_FASHION_MNIST_CLASSES, TPU_ACT_NONE,
                      &logits, &d) ||
        tpu_net_set_output(net, logits, TPU_LOSS_SOFTMAX_XENT, &d)) {
        status = fail("building the net", &d);
        goto out;
    }

    struct tpu_chip_config chip;
    if (tpu_config_load_preset(o.chip, &chip, &d) && tpu_config_load_file(o.chip, &chip, &d)) {
        status = fail("loading the chip", &d);
        goto out;
    }
    struct tpu_device_settings ds;
    tpu_device_default_settings(&ds, &chip);
    ds.n_threads = (unsigned)o.threads;
    if (tpu_device_open(&ds, &dev, &d)) {
        status = fail("opening the device", &d);
        goto out;
    }

    struct tpu_keras_compile c;
    tpu_keras_compile_default(&c);
    c.optimizer.optimizer = TPU_OPT_ADAM;
    c.optimizer.learning_rate = (float)o.lr;
    c.optimizer.seed = o.seed;
    c.n_metrics = 1;
    c.metrics[0] = TPU_METRIC_ACCURACY;
    c.steps_per_execution = o.spe;
    c.steps_per_execution_auto = o.spe_auto;
    c.run.seed = o.seed;
    if (o.estimator_style) {
        struct tpu_eval_result res;
        if (estimator_style(&o, dev, net, &c, &train, &test, &res, &d)) {
            status = fail("the estimator-style run", &d);
            goto out;
        }
        printf("test accuracy: %.4f (loss %.4f, %llu examples)\n", res.accuracy, res.loss,
               (unsigned long long)res.examples);
        status = 0;
        goto out;
    }
    if (tpu_keras_model_compile(dev, net, &c, &m, &d)) {
        status = fail("compile", &d);
        goto out;
    }

    struct tpu_callback cb = {.ctx = &o, .on_epoch_end = print_epoch};
    struct tpu_keras_fit f;
    tpu_keras_fit_default(&f);
    f.data.arrays = &train;
    f.batch_size = (uint32_t)o.batch;
    f.epochs = o.epochs;
    f.verbose = 0;
    f.validation_split = o.validation_split;
    f.callbacks = &cb;
    f.n_callbacks = 1;
    if (tpu_keras_fit(m, &f, &h, &d)) {
        status = fail("fit", &d);
        goto out;
    }
    if (h.warning[0])
        fprintf(stderr, "keras_mlp: %s\n", h.warning);

    struct tpu_keras_evaluate ev;
    tpu_keras_evaluate_default(&ev);
    ev.data.arrays = &test;
    ev.batch_size = (uint32_t)o.batch;
    struct tpu_logs logs;
    if (tpu_keras_evaluate(m, &ev, &logs, &d)) {
        status = fail("evaluate", &d);
        goto out;
    }
    printf("test accuracy: %.4f (loss %.4f, %u examples)\n", tpu_logs_get(&logs, "accuracy"),
           tpu_logs_get(&logs, "loss"), test.n_examples);
    status = 0;
out:
    tpu_history_free(&h);
    tpu_keras_model_destroy(&m);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    tpu_dataset_free(&train);
    tpu_dataset_free(&test);
    return status;
}
