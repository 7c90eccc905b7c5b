/* train_cnn: a small convolutional network defined with the C layer builder (tpusim/net.h),
 * trained on Fashion-MNIST on a simulated chip through the estimator API (tpusim/runtime.h),
 * then evaluated on the 10,000 test images. It is an example of the library's API, not a
 * second command line: `tpusim train` is the tool; this shows what a program of one's own
 * does to get the same.
 *
 * The steps, in order: load the data (tpu_dataset_fashion_mnist), build the net (tpu_net_*),
 * choose the optimizer and learning-rate schedule (struct tpu_train_spec), turn the net into a
 * runtime model (tpu_net_model), open a device on a chip preset (tpu_device_open), make an
 * estimator with a hook that reports each loop (tpu_estimator_create), train, evaluate.
 *
 *   examples/train_cnn [--model FILE] [--chip NAME] [--chips N] [--epochs E | --steps N]
 *                      [--batch N] [--optimizer sgd|adam|adamw] [--lr X] [--momentum X]
 *                      [--schedule constant|step|cosine] [--warmup N] [--decay-steps N]
 *                      [--decay-rate X] [--weight-decay X] [--passes 1|3|6] [--ipl N]
 *                      [--threads N] [--seed N] [--data DIR] [--eval-examples N] [--quiet]
 *
 * --model FILE trains a JSON model file (configs/models/) instead of the built-in CNN. The
 * last line printed is "test accuracy: A (loss L, N examples)"; the exit status is 0 on
 * success, 1 on a failure (with the library's message on stderr), 2 on a usage error. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

struct opts {
    const char *model_file, *chip, *data;
    uint32_t chips, batch, threads, passes, eval_examples;
    double epochs;
    uint64_t steps, ipl, seed;
    struct tpu_train_spec spec;
    bool quiet;
};

static double wall_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char usage_text[] =
    "usage: train_cnn [--model FILE] [--chip NAME] [--chips N] [--epochs E | --steps N]\n"
    "                 [--batch N] [--optimizer sgd|adam|adamw] [--lr X] [--momentum X]\n"
    "                 [--schedule constant|step|cosine] [--warmup N] [--decay-steps N]\n"
    "                 [--decay-rate X] [--weight-decay X] [--passes 1|3|6] [--ipl N]\n"
    "                 [--threads N] [--seed N] [--data DIR] [--eval-examples N] [--quiet]\n"
    "Trains a CNN (or the model of FILE) on Fashion-MNIST on a simulated chip and prints its\n"
    "test accuracy; examples/README.md says what each flag does.\n";

/* A usage error: the flag, its rule and what was given. */
static int usage(const char *flag, const char *rule, const char *value)
{
    fprintf(stderr, "train_cnn: %s %s; got '%s'; see train_cnn --help\n", flag, rule, value);
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

/* Reads the flags into *o; 0, 1 after printing the help, or 2 (usage) with the message
 * printed. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.chip = "tpu-v3", .chips = 1, .batch = 128, .epochs = 1.0,
                       .passes = 1, .ipl = 100, .seed = 1};
    tpu_train_spec_default(&o->spec); /* Adam, lr 0.001 */
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--quiet")) {
            o->quiet = true;
            continue;
        }
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage_text, stdout);
            return 1; /* main exits 0: help asked for */
        }
        if (i + 1 >= argc)
            return usage(f, "needs a value", "");
        const char *v = argv[++i];
        uint64_t u;
        double x;
        if (!strcmp(f, "--model"))
            o->model_file = v;
        else if (!strcmp(f, "--chip"))
            o->chip = v;
        else if (!strcmp(f, "--data"))
            o->data = v;
        else if (!strcmp(f, "--chips") || !strcmp(f, "--batch") || !strcmp(f, "--threads") ||
                 !strcmp(f, "--passes") || !strcmp(f, "--eval-examples") ||
                 !strcmp(f, "--warmup") || !strcmp(f, "--decay-steps")) {
            if (parse_u64(v, 0, UINT32_MAX, &u))
                return usage(f, "takes a whole number from 0 to 4294967295", v);
            if (!strcmp(f, "--chips")) o->chips = (uint32_t)u;
            else if (!strcmp(f, "--batch")) o->batch = (uint32_t)u;
            else if (!strcmp(f, "--threads")) o->threads = (uint32_t)u;
            else if (!strcmp(f, "--passes")) o->passes = (uint32_t)u;
            else if (!strcmp(f, "--eval-examples")) o->eval_examples = (uint32_t)u;
            else if (!strcmp(f, "--warmup")) o->spec.warmup_steps = (uint32_t)u;
            else o->spec.decay_steps = (uint32_t)u;
        } else if (!strcmp(f, "--steps") || !strcmp(f, "--ipl") || !strcmp(f, "--seed")) {
            if (parse_u64(v, !strcmp(f, "--seed") ? 0 : 1, UINT64_MAX / 2, &u))
                return usage(f, "takes a whole number of at least 1 (0 too for --seed)", v);
            if (!strcmp(f, "--steps")) o->steps = u;
            else if (!strcmp(f, "--ipl")) o->ipl = u;
            else o->seed = u;
        } else if (!strcmp(f, "--epochs")) {
            if (parse_double(v, 1e-6, 1e6, &x))
                return usage(f, "takes a number of epochs greater than 0", v);
            o->epochs = x;
        } else if (!strcmp(f, "--lr") || !strcmp(f, "--momentum") ||
                   !strcmp(f, "--decay-rate") || !strcmp(f, "--weight-decay")) {
            if (parse_double(v, 0.0, 1e6, &x))
                return usage(f, "takes a number of at least 0", v);
            if (!strcmp(f, "--lr")) o->spec.learning_rate = (float)x;
            else if (!strcmp(f, "--momentum")) o->spec.momentum = (float)x;
            else if (!strcmp(f, "--decay-rate")) o->spec.decay_rate = (float)x;
            else o->spec.weight_decay = (float)x;
        } else if (!strcmp(f, "--optimizer")) {
            if (!strcmp(v, "sgd")) o->spec.optimizer = TPU_OPT_SGD_MOMENTUM;
            else if (!strcmp(v, "adam")) o->spec.optimizer = TPU_OPT_ADAM;
            else if (!strcmp(v, "adamw")) o->spec.optimizer = TPU_OPT_ADAMW;
            else return usage(f, "takes sgd, adam or adamw", v);
        } else if (!strcmp(f, "--schedule")) {
            if (!strcmp(v, "constant")) o->spec.schedule = TPU_SCHEDULE_CONSTANT;
            else if (!strcmp(v, "step")) o->spec.schedule = TPU_SCHEDULE_STEP;
            else if (!strcmp(v, "cosine")) o->spec.schedule = TPU_SCHEDULE_COSINE;
            else return usage(f, "takes constant, step or cosine", v);
        } else {
            return usage(f, "is not a flag of train_cnn", f);
        }
    }
    o->spec.passes = o->passes;
    o->spec.seed = o->seed;
    return 0;
}

/* The built-in model: two 3x3 convolutions (32 and 64 filters, same padding, ReLU), each
 * followed by a 2x2 max pool, then dense 128 with ReLU, dropout 0.25 and dense 10 logits. */
static int build_cnn(struct tpu_net **out, struct tpu_diag *d)
{
    struct tpu_net *net = NULL;
    uint32_t t;
    int rc = tpu_net_create("cnn_example", 28, 28, 1, &net, d);
    if (!rc) rc = tpu_net_conv2d(net, "conv1", 0, 32, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU,
                                 &t, d);
    if (!rc) rc = tpu_net_pool2d(net, "pool1", TPU_LAYER_MAX_POOL2D, t, 2, 2,
                                 TPU_PADDING_VALID, &t, d);
    if (!rc) rc = tpu_net_conv2d(net, "conv2", t, 64, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU,
                                 &t, d);
    if (!rc) rc = tpu_net_pool2d(net, "pool2", TPU_LAYER_MAX_POOL2D, t, 2, 2,
                                 TPU_PADDING_VALID, &t, d);
    if (!rc) rc = tpu_net_unary(net, "flatten", TPU_LAYER_FLATTEN, t, &t, d);
    if (!rc) rc = tpu_net_dense(net, "dense1", t, 128, TPU_ACT_RELU, &t, d);
    if (!rc) rc = tpu_net_dropout(net, "dropout", t, 0.25f, &t, d);
    if (!rc) rc = tpu_net_dense(net, "logits", t, 10, TPU_ACT_NONE, &t, d);
    if (!rc) rc = tpu_net_set_output(net, t, TPU_LOSS_SOFTMAX_XENT, d);
    if (rc)
        tpu_net_destroy(&net);
    *out = net;
    return rc;
}

static void print_summary(const struct tpu_net *net)
{
    uint64_t params = 0, fixed = 0, flops = 0;
    printf("model %s:\n", tpu_net_name(net));
    for (uint32_t i = 0; i < tpu_net_n_layers(net); i++) {
        struct tpu_layer_info li;
        if (tpu_net_layer(net, i, &li))
            continue;
        params += li.params;
        fixed += li.non_trainable;
        flops += li.flops;
        printf("  %-24s %-18s %4u x %4u x %5u %10llu params\n", li.name,
               tpu_layer_kind_name(li.kind), li.out.h, li.out.w, li.out.c,
               (unsigned long long)li.params);
    }
    printf("  %llu trainable and %llu non-trainable params, %.2f MFLOPs per example "
           "forward\n", (unsigned long long)params, (unsigned long long)fixed, flops / 1e6);
}

struct report {
    bool quiet;
    uint64_t total_steps;
    double wall0;
    double device_s; /* simulated device time of the training loops so far */
};

/* After every loop: one line of progress. The loss is replica 0's at the loop's last step;
 * the host's time of this boundary is not known yet while the hooks run (they are part of
 * it), so the line gives the device's time and this loop's figures. */
static int after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct report *r = ctx;
    (void)d;
    if (li->mode != TPU_MODE_TRAIN)
        return 0;
    r->device_s += li->device_seconds;
    if (!r->quiet)
        printf("step %llu/%llu  loss %.4f  device %.3f s simulated  %.0f examples/s  "
               "MXU %.1f %%  wall %.1f s\n", (unsigned long long)li->global_step,
               (unsigned long long)r->total_steps, li->loss, r->device_s, li->examples_per_s,
               100.0 * li->mxu_utilization, wall_now_s() - r->wall0);
    fflush(stdout);
    return 0;
}

static int fail(const char *what, const struct tpu_diag *d)
{
    fprintf(stderr, "train_cnn: %s: %s\n", what, d->msg);
    return 1;
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
    struct tpu_estimator *est = NULL;
    struct tpu_dataset_input tin = {0}, ein = {0};
    int status = 1;

    /* the model first: a file with a mistake fails before the data is read */
    if (o.model_file ? tpu_net_load_file(o.model_file, &net, &d) : build_cnn(&net, &d)) {
        status = fail("model", &d);
        goto out;
    }
    if (tpu_dataset_fashion_mnist(o.data, true, &train, &d) ||
        tpu_dataset_fashion_mnist(o.data, false, &test, &d)) {
        status = fail("data", &d);
        goto out;
    }
    if (o.eval_examples && o.eval_examples < test.n_examples)
        test.n_examples = o.eval_examples; /* the first N test images */
    print_summary(net);

    struct tpu_model model;
    if (tpu_train_spec_check(&o.spec, &d) || tpu_net_model(&model, net, &o.spec, &d)) {
        status = fail("training spec", &d);
        goto out;
    }
    struct tpu_chip_config chip;
    if (tpu_config_load(o.chip, &chip, &d)) {
        status = fail("chip", &d);
        goto out;
    }
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = o.chips;
    s.n_threads = o.threads;
    if (tpu_device_open(&s, &dev, &d)) {
        status = fail("device", &d);
        goto out;
    }

    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = cfg.eval_batch_size = cfg.predict_batch_size = o.batch;
    cfg.iterations_per_loop = o.ipl;
    cfg.seed = o.seed;
    uint64_t steps = o.steps ? o.steps
                             : (uint64_t)ceil(o.epochs * train.n_examples / (double)o.batch);
    struct report rep = {.quiet = o.quiet, .total_steps = steps, .wall0 = wall_now_s()};
    struct tpu_hook hook = {.ctx = &rep, .after_loop = after_loop};
    if (tpu_estimator_create(dev, &cfg, &model, &hook, 1, &est, &d) ||
        tpu_estimator_check_mode(est, TPU_MODE_TRAIN, &d) ||
        tpu_estimator_check_mode(est, TPU_MODE_EVAL, &d)) {
        status = fail("estimator", &d);
        goto out;
    }
    printf("training on %s (%u chip(s), %u cores, %u replicas): %llu steps of a global batch "
           "of %u (%.2f epochs)\n", chip.name, o.chips, tpu_device_n_cores(dev),
           tpu_device_n_replicas(dev), (unsigned long long)steps, o.batch,
           (double)steps * o.batch / train.n_examples);
    fflush(stdout);

    tpu_dataset_input_init(&tin, &train, o.seed);
    if (tpu_estimator_train(est, &tin.input, steps, 0, &d)) {
        status = fail("train", &d);
        goto out;
    }
    const struct tpu_loop_info *li = tpu_estimator_last_info(est);
    const double train_wall = wall_now_s() - rep.wall0;
    printf("trained %llu steps: loss %.4f, simulated %.3f s (device %.3f s, host %.3f s), "
           "%.0f examples/s simulated, MXU utilization %.1f %%, wall %.1f s\n",
           (unsigned long long)tpu_estimator_global_step(est), li->loss,
           li->pass_device_seconds + li->pass_host_seconds, li->pass_device_seconds,
           li->pass_host_seconds, li->pass_examples_per_s, 100.0 * li->pass_mxu_utilization,
           train_wall);

    tpu_dataset_input_init(&ein, &test, o.seed);
    struct tpu_eval_result ev;
    const double eval0 = wall_now_s();
    if (tpu_estimator_evaluate(est, &ein.input, 0, &ev, &d)) {
        status = fail("evaluate", &d);
        goto out;
    }
    printf("evaluated %llu examples: simulated %.3f s, wall %.1f s\n",
           (unsigned long long)ev.examples, ev.device_seconds, wall_now_s() - eval0);
    printf("test accuracy: %.4f (loss %.4f, %llu examples)\n", ev.accuracy, ev.loss,
           (unsigned long long)ev.examples);
    status = 0;
out:
    tpu_dataset_input_free(&ein);
    tpu_dataset_input_free(&tin);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    tpu_dataset_free(&test);
    tpu_dataset_free(&train);
    return status;
}
