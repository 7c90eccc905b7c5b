/* `tpusim fit`: Keras's model.compile(...), model.fit(...) and model.evaluate(...) on the
 * simulated chip (keras.h), with the built-in callbacks the options ask for. The options are
 * parsed and checked in cli_fit_options.c; the model, the data, the chip and the sharding
 * are read and checked with train's own functions (cli_train_data.c, cli_train_net.c,
 * cli_train.c), so both commands take and refuse the same things with the same words. What
 * fit prints is the progress bar's (Keras's lines), the callbacks' messages and, at the
 * end, the test set's evaluation. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_fit.h"
#include "options.h"
#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/device.h"
#include "tpusim/keras.h"
#include "tpusim/net.h"

struct fit_run {
    struct fit_opts *o;
    struct tpu_chip_config chip;
    struct tpu_dataset train, test;
    struct tpu_net *net;
    struct tpu_device *dev;
    struct tpu_keras_model *model;
    struct tpu_keras_compile c;
    float class_weight[TPU__CLI_FIT_MAX_CLASSES];
    uint32_t n_class_weight;
    struct tpu_callback cbs[4];
    size_t n_cbs;
    struct tpu_history history;
};

/* --layers: the MLP as a net of dense layers named as Keras's Sequential names them
 * ("dense", "dense_1", ...): relu hidden layers, a linear classifier under softmax
 * cross-entropy. */
static int build_mlp_net(struct fit_run *r)
{
    const struct tpu_mlp_spec *s = &r->o->t.spec;
    const char *cmd = r->o->t.cmd;
    struct tpu_diag d = {0};
    if (tpu_net_create("mlp", 1, 1, s->sizes[0], &r->net, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--layers: %s", d.msg);
    uint32_t x = 0;
    for (uint32_t i = 1; i <= s->n_layers; i++) {
        char name[32];
        if (i == 1)
            snprintf(name, sizeof name, "dense");
        else
            snprintf(name, sizeof name, "dense_%u", i - 1);
        const bool last = i == s->n_layers;
        if (tpu_net_dense(r->net, name, x, s->sizes[i], last ? TPU_ACT_NONE : TPU_ACT_RELU, &x,
                          &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--layers: %s", d.msg);
    }
    if (tpu_net_set_output(r->net, x, TPU_LOSS_SOFTMAX_XENT, &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--layers: %s", d.msg);
    return 0;
}

/* --metrics into the compile arguments (default: accuracy for a classifier). */
static int parse_metrics(struct fit_run *r, enum tpu_loss loss)
{
    struct fit_opts *o = r->o;
    const char *cmd = o->t.cmd;
    r->c.n_metrics = 0;
    if (!o->metrics_given) {
        if (loss == TPU_LOSS_SOFTMAX_XENT)
            r->c.metrics[r->c.n_metrics++] = TPU_METRIC_ACCURACY;
        return 0;
    }
    char buf[OPT_TEXT_MAX + 1];
    snprintf(buf, sizeof buf, "%s", o->metrics);
    char *save = NULL;
    for (char *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        struct tpu_diag d = {0};
        enum tpu_keras_metric m;
        if (tpu_keras_metric_parse(name, &m, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--metrics: %s", d.msg);
        for (uint32_t k = 0; k < r->c.n_metrics; k++)
            if (r->c.metrics[k] == m)
                return tpu__cli_error(cmd, TPU_CLI_USAGE, "--metrics '%s' names %s twice; "
                                      "give each metric once", o->metrics,
                                      tpu_keras_metric_name(m));
        if (r->c.n_metrics == TPU_KERAS_MAX_METRICS)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--metrics '%s' names more than %d "
                                  "metrics; give at most %d", o->metrics,
                                  TPU_KERAS_MAX_METRICS, TPU_KERAS_MAX_METRICS);
        r->c.metrics[r->c.n_metrics++] = m;
    }
    return 0;
}

/* --class-weight C:W,...: every class from 0 to K-1 listed once (Keras's rule for the
 * class_weight dict), weights finite and not negative. */
int tpu__cli_fit_parse_class_weight(const char *cmd, const char *text, uint32_t classes,
                                    float weights[TPU__CLI_FIT_MAX_CLASSES], uint32_t *n_out)
{
    bool seen[TPU__CLI_FIT_MAX_CLASSES] = {false};
    uint32_t n = 0, max_class = 0;
    const char *s = text;
    *n_out = 0;
    while (*s) {
        char *end;
        unsigned long c = *s >= '0' && *s <= '9' ? strtoul(s, &end, 10) : 0;
        if (*s < '0' || *s > '9' || *end != ':' || c >= TPU__CLI_FIT_MAX_CLASSES)
            goto bad;
        const char *w_text = end + 1;
        double w = strtod(w_text, &end);
        /* the weights are float32 on the chip: a finite double above FLT_MAX would be inf */
        if (end == w_text || (*end && *end != ',') || !isfinite(w) || w < 0 || w > FLT_MAX)
            goto bad;
        if (seen[c])
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--class-weight '%s' gives class %lu "
                                  "twice; give each class once", text, c);
        seen[c] = true;
        weights[c] = (float)w;
        n++;
        if (c > max_class)
            max_class = (uint32_t)c;
        s = *end ? end + 1 : end;
    }
    if (n != max_class + 1 || n != classes)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--class-weight '%s': expected class_weight "
                              "to have keys from 0 to one less than the number of classes "
                              "(%u: 0 to %u), found %u key%s up to %u; give a weight for "
                              "every class", text, classes, classes - 1, n,
                              n == 1 ? "" : "s", max_class);
    *n_out = n;
    return 0;
bad:
    return tpu__cli_error(cmd, TPU_CLI_USAGE, "--class-weight '%s' is not a list of CLASS:WEIGHT "
                          "pairs (a class from 0, a weight from 0 to 3.4e38, the largest float32); "
                          "give e.g. --class-weight 0:1,1:2.5", text);
}

static int parse_class_weight(struct fit_run *r, uint32_t classes)
{
    struct fit_opts *o = r->o;
    if (!o->class_weight[0])
        return 0;
    return tpu__cli_fit_parse_class_weight(o->t.cmd, o->class_weight, classes, r->class_weight,
                                           &r->n_class_weight);
}

/* A monitor must be a log the run writes: tpusim checks it before any work. */
static int check_monitor(struct fit_run *r, const char *opt, const char *monitor)
{
    const struct fit_opts *o = r->o;
    const bool validation = o->validation_split > 0;
    char names[512];
    size_t n = 0;
    const char *base[1 + TPU_KERAS_MAX_METRICS + 1];
    size_t nb = 0;
    base[nb++] = "loss";
    for (uint32_t k = 0; k < r->c.n_metrics; k++)
        base[nb++] = tpu_keras_metric_name(r->c.metrics[k]);
    bool found = false;
    names[0] = '\0';
    for (int val = 0; val <= (validation ? 1 : 0); val++)
        for (size_t k = 0; k < nb; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", val ? "val_" : "", base[k]);
            found = found || !strcmp(name, monitor);
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", name);
        }
    if (o->lr_decay > 0) {
        found = found || !strcmp(monitor, "lr");
        snprintf(names + n, sizeof names - n, ", lr");
    }
    if (found)
        return 0;
    return tpu__cli_error(o->t.cmd, TPU_CLI_USAGE, "%s '%s' is not a log this fit writes (%s)%s; "
                          "give one of those", opt, monitor, names,
                          !validation && !strncmp(monitor, "val_", 4)
                              ? ": the val_ logs need --validation-split"
                              : "");
}

/* LearningRateScheduler(lambda epoch, lr: lr if epoch < start else lr * decay) */
static float decay_schedule(void *ctx, uint64_t epoch, float lr)
{
    const struct fit_opts *o = ctx;
    return epoch < o->lr_decay_start ? lr : (float)((double)lr * o->lr_decay);
}

static int add_callbacks(struct fit_run *r, FILE *msgs)
{
    struct fit_opts *o = r->o;
    const char *cmd = o->t.cmd;
    struct tpu_diag d = {0};
    if (o->lr_decay > 0 &&
        tpu_callback_lr_scheduler(decay_schedule, o, msgs, &r->cbs[r->n_cbs++], &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-scheduler-decay: %s", d.msg);
    if (o->checkpoint[0]) {
        const struct tpu_model_checkpoint_args a = {
            .filepath = o->checkpoint,
            .monitor = o->checkpoint_monitor[0] ? o->checkpoint_monitor : "val_loss",
            .save_best_only = o->checkpoint_best_only,
            .mode = tpu__cli_fit_mode_words[o->checkpoint_mode],
            .save_freq = o->checkpoint_freq,
            .verbose_out = msgs};
        if (tpu_callback_model_checkpoint(&a, &r->cbs[r->n_cbs++], &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--checkpoint: %s", d.msg);
    }
    if (o->early_stopping[0]) {
        struct tpu_early_stopping_args a = o->es;
        a.monitor = o->es_monitor;
        a.mode = o->es_mode;
        a.verbose_out = msgs;
        if (tpu_callback_early_stopping(&a, &r->cbs[r->n_cbs++], &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--early-stopping: %s", d.msg);
    }
    if (o->csv_log[0] &&
        tpu_callback_csv_logger(o->csv_log, ',', o->csv_append, &r->cbs[r->n_cbs++], &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--csv-log: %s", d.msg);
    return 0;
}

/* Everything that needs no device: the chip, the sharding plan, the model and the data, the
 * compile arguments, the monitors. */
static int prepare(struct fit_run *r)
{
    struct fit_opts *o = r->o;
    struct train_opts *t = &o->t;
    const char *cmd = t->cmd;
    struct tpu_diag d = {0};
    int rc;
    if (tpu_config_load(t->chip, &r->chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!(r->chip.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "chip '%s' cannot train: its matrix unit "
                              "multiplies int8 only (an inference chip), and training needs a "
                              "chip whose matrix unit takes bf16 (tpu-v2 and later, or tiny); "
                              "give one of those (e.g. --chip tpu-v2)", r->chip.name);
    /* the batch sizes the plan checks: training's, and validation's and the test's */
    t->rc.train_batch_size = o->batch_size;
    t->rc.eval_batch_size = t->rc.predict_batch_size =
        o->validation_batch_size ? o->validation_batch_size : o->batch_size;
    if ((rc = tpu__cli_train_check_plan(t, &r->chip, true, false)))
        return rc;
    if (t->model_file[0] && (rc = tpu__cli_train_load_net(t, &r->net)))
        return rc;
    if ((rc = tpu__cli_train_load_data(t, true, &r->train, &r->test)))
        return rc;
    if (!r->net && ((rc = tpu__cli_train_fit_mlp(t, true, &r->train, &r->test)) ||
                    (rc = build_mlp_net(r))))
        return rc;
    if ((rc = tpu__cli_train_fit_net(t, r->net, true, &r->train, &r->test)))
        return rc;
    enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
    const uint32_t outputs = tpu__cli_net_outputs(r->net, &loss);
    if (o->class_weight[0] && loss != TPU_LOSS_SOFTMAX_XENT)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--class-weight weighs the examples of each "
                              "class, and the model's loss is mean_squared_error (no classes); "
                              "leave --class-weight out");
    tpu_keras_compile_default(&r->c);
    r->c.optimizer = t->tspec;
    if (o->lr_decay > 0)
        r->c.optimizer.schedule = TPU_SCHEDULE_HOST;
    r->c.loss = loss;
    r->c.steps_per_execution = o->steps_per_execution ? o->steps_per_execution : 1;
    r->c.steps_per_execution_auto = o->steps_per_execution == 0;
    r->c.run = t->rc;
    if ((rc = parse_metrics(r, loss)) || (rc = parse_class_weight(r, outputs)))
        return rc;
    if (o->early_stopping[0] && (rc = check_monitor(r, "--early-stopping monitor",
                                                    o->es_monitor)))
        return rc;
    if (o->checkpoint[0] && o->checkpoint_best_only &&
        (rc = check_monitor(r, "--checkpoint-monitor",
                            o->checkpoint_monitor[0] ? o->checkpoint_monitor : "val_loss")))
        return rc;
    return 0;
}

static void print_logs(const char *what, const struct tpu_logs *l)
{
    printf("%s:", what);
    for (uint32_t k = 0; k < l->n; k++)
        printf("%s %s %.4f", k ? " -" : "", l->name[k], l->value[k]);
    printf("\n");
}

static int run(struct fit_run *r)
{
    struct fit_opts *o = r->o;
    struct train_opts *t = &o->t;
    const char *cmd = t->cmd;
    struct tpu_diag d = {0};
    int rc = prepare(r);
    if (rc)
        return rc;
    struct tpu_device_settings s;
    tpu__cli_train_device_settings(t, &r->chip, &s);
    if (tpu_device_open(&s, &r->dev, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (tpu_keras_model_compile(r->dev, r->net, &r->c, &r->model, &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "compile: %s", d.msg);
    const bool tty = isatty(STDOUT_FILENO) != 0;
    const int verbose = o->verbose_given ? (int)o->verbose : tty ? 1 : 2;
    FILE *msgs = verbose ? stdout : NULL;
    if ((rc = add_callbacks(r, msgs)))
        return rc;

    struct tpu_keras_fit f;
    tpu_keras_fit_default(&f);
    f.data.arrays = &r->train;
    f.batch_size = o->batch_size;
    f.epochs = o->epochs;
    f.verbose = verbose;
    f.out = stdout;
    f.out_is_tty = tty;
    f.callbacks = r->cbs;
    f.n_callbacks = r->n_cbs;
    f.validation_split = o->validation_split;
    f.shuffle = !o->no_shuffle;
    f.class_weight = r->n_class_weight ? r->class_weight : NULL;
    f.n_class_weight = r->n_class_weight;
    f.initial_epoch = o->initial_epoch;
    f.steps_per_epoch = o->steps_per_epoch;
    f.validation_steps = o->validation_steps;
    f.validation_batch_size = o->validation_batch_size;
    f.n_validation_freq = o->n_validation_freq;
    memcpy(f.validation_freq, o->validation_freq, sizeof f.validation_freq);
    f.validation_freq_is_list = o->validation_freq_is_list;
    if (tpu_keras_fit(r->model, &f, &r->history, &d)) {
        fflush(stdout);
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    }
    fflush(stdout);
    if (r->history.warning[0])
        fprintf(stderr, "tpusim %s: warning: %s\n", cmd, r->history.warning);

    /* model.evaluate(x_test, y_test) */
    struct tpu_keras_evaluate e;
    tpu_keras_evaluate_default(&e);
    e.data.arrays = &r->test;
    e.batch_size = o->validation_batch_size ? o->validation_batch_size : o->batch_size;
    e.verbose = verbose;
    e.out = stdout;
    e.out_is_tty = tty;
    struct tpu_logs logs;
    memset(&logs, 0, sizeof logs);
    if (tpu_keras_evaluate(r->model, &e, &logs, &d)) {
        fflush(stdout);
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "evaluate: %s", d.msg);
    }
    char what[64];
    char count[32];
    tpu__cli_group_digits(r->test.n_examples, count, sizeof count);
    snprintf(what, sizeof what, "test (%s examples)", count);
    print_logs(what, &logs);
    return 0;
}

int tpu__cli_fit(int argc, char **argv)
{
    struct fit_run *r = calloc(1, sizeof *r);
    struct fit_opts *o = calloc(1, sizeof *o);
    if (!r || !o) {
        free(r);
        free(o);
        return tpu__cli_error("fit", TPU_CLI_FAIL, "out of memory");
    }
    r->o = o;
    o->t.cmd = argv[0];
    int rc = tpu__cli_fit_parse_args(argc, argv, o);
    if (rc == TPU__CLI_HELP)
        rc = TPU_CLI_OK;
    else if (!rc)
        rc = run(r);
    for (size_t i = 0; i < r->n_cbs; i++)
        tpu_callback_free(&r->cbs[i]);
    tpu_history_free(&r->history);
    tpu_keras_model_destroy(&r->model);
    tpu_device_close(&r->dev);
    tpu_net_destroy(&r->net);
    tpu_dataset_free(&r->train);
    tpu_dataset_free(&r->test);
    free(r);
    free(o);
    return rc;
}
