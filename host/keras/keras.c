/* The Keras-style model (include/tpusim/keras.h): logs, metric names, compile, the
 * estimator underneath and its hooks, which turn the estimator's loops into Keras's batch
 * callbacks (an execution's first batch at before_loop, its last at after_loop), and the
 * learning rate. fit.c, evaluate.c and arrays.c build on it; the built-in callbacks live in
 * callbacks*.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keras/keras_int.h"
#include "util.h"

/* ---- logs ------------------------------------------------------------------------------ */

int tpu_logs_set(struct tpu_logs *l, const char *name, double value)
{
    if (!l || !name || !name[0] || strlen(name) > TPU_LOG_NAME_MAX)
        return TPU_EINVAL;
    for (uint32_t i = 0; i < l->n; i++)
        if (strcmp(l->name[i], name) == 0) {
            l->value[i] = value;
            return 0;
        }
    if (l->n >= TPU_LOGS_MAX)
        return TPU_ERANGE;
    strcpy(l->name[l->n], name);
    l->value[l->n++] = value;
    return 0;
}

double tpu_logs_get(const struct tpu_logs *l, const char *name)
{
    if (l && name)
        for (uint32_t i = 0; i < l->n; i++)
            if (strcmp(l->name[i], name) == 0)
                return l->value[i];
    return NAN;
}

/* ---- metrics ----------------------------------------------------------------------------- */

static const char *const metric_names[TPU_METRIC_COUNT] = {
    "accuracy", "sparse_categorical_crossentropy", "mse", "mae"};

const char *tpu_keras_metric_name(enum tpu_keras_metric m)
{
    return (unsigned)m < TPU_METRIC_COUNT ? metric_names[m] : NULL;
}

int tpu_keras_metric_parse(const char *name, enum tpu_keras_metric *out, struct tpu_diag *d)
{
    static const struct {
        const char *name;
        enum tpu_keras_metric m;
    } names[] = {
        {"accuracy", TPU_METRIC_ACCURACY},
        {"acc", TPU_METRIC_ACCURACY},
        {"sparse_categorical_accuracy", TPU_METRIC_ACCURACY},
        {"sparse_categorical_crossentropy", TPU_METRIC_SPARSE_CATEGORICAL_CROSSENTROPY},
        {"mse", TPU_METRIC_MSE},
        {"mean_squared_error", TPU_METRIC_MSE},
        {"mae", TPU_METRIC_MAE},
        {"mean_absolute_error", TPU_METRIC_MAE},
    };
    if (!name)
        return tpu__fail(d, TPU_EINVAL, "metric name is NULL; give one of accuracy, "
                         "sparse_categorical_crossentropy, mse, mae");
    const char *best = NULL;
    size_t best_dist = SIZE_MAX;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            if (out)
                *out = names[i].m;
            return 0;
        }
        size_t dist = tpu__edit_distance(name, names[i].name);
        if (dist < best_dist) {
            best_dist = dist;
            best = names[i].name;
        }
    }
    char hint[96];
    tpu__did_you_mean(best_dist <= 3 ? best : NULL, hint, sizeof hint);
    return tpu__fail(d, TPU_EINVAL, "unknown metric '%s'%s; compile's metrics are accuracy "
                     "(acc), sparse_categorical_crossentropy, mse (mean_squared_error) and "
                     "mae (mean_absolute_error)", name, hint);
}

/* ---- compile ----------------------------------------------------------------------------- */

void tpu_keras_compile_default(struct tpu_keras_compile *c)
{
    memset(c, 0, sizeof *c);
    tpu_train_spec_default(&c->optimizer);
    c->loss = TPU_LOSS_SOFTMAX_XENT;
    c->steps_per_execution = 1;
    tpu_run_config_default(&c->run);
}

static const char *loss_name(enum tpu_loss l)
{
    return l == TPU_LOSS_MSE ? "mean_squared_error" : "sparse_categorical_crossentropy";
}

static int check_compile(const struct tpu_net *net, const struct tpu_keras_compile *c,
                         enum tpu_loss *net_loss, struct tpu_diag *d)
{
    uint32_t out_tensor;
    if (tpu_net_output(net, &out_tensor, net_loss))
        return tpu__fail(d, TPU_EINVAL, "the net '%s' has no output: call tpu_net_set_output "
                         "(or give the model file an output) before compile",
                         tpu_net_name(net));
    if ((unsigned)c->loss > TPU_LOSS_MSE)
        return tpu__fail(d, TPU_EINVAL, "compile's loss %d is not a loss; give "
                         "TPU_LOSS_SOFTMAX_XENT or TPU_LOSS_MSE", (int)c->loss);
    if (c->loss != *net_loss)
        return tpu__fail(d, TPU_EINVAL, "compile's loss is %s but the net '%s' was built for "
                         "%s (tpu_net_set_output chose it); compile with loss %s or set the "
                         "net's output with the loss you want", loss_name(c->loss),
                         tpu_net_name(net), loss_name(*net_loss), loss_name(*net_loss));
    int rc = tpu_train_spec_check(&c->optimizer, d);
    if (rc)
        return rc;
    if (c->n_metrics > TPU_KERAS_MAX_METRICS)
        return tpu__fail(d, TPU_EINVAL, "compile has n_metrics %u; at most %d metrics (each "
                         "metric once)", c->n_metrics, TPU_KERAS_MAX_METRICS);
    for (uint32_t i = 0; i < c->n_metrics; i++) {
        enum tpu_keras_metric mt = c->metrics[i];
        if ((unsigned)mt >= TPU_METRIC_COUNT)
            return tpu__fail(d, TPU_EINVAL, "compile's metrics[%u] is %d, not a metric; give "
                             "TPU_METRIC_ACCURACY, _SPARSE_CATEGORICAL_CROSSENTROPY, _MSE or "
                             "_MAE", i, (int)mt);
        for (uint32_t j = 0; j < i; j++)
            if (c->metrics[j] == mt)
                return tpu__fail(d, TPU_EINVAL, "compile's metrics list '%s' twice "
                                 "(metrics[%u] and [%u]); give each metric once",
                                 metric_names[mt], j, i);
        const bool classify = mt == TPU_METRIC_ACCURACY ||
                              mt == TPU_METRIC_SPARSE_CATEGORICAL_CROSSENTROPY;
        if (classify && c->loss != TPU_LOSS_SOFTMAX_XENT)
            return tpu__fail(d, TPU_EINVAL, "metric '%s' needs class labels and a softmax "
                             "output (loss sparse_categorical_crossentropy); this model's "
                             "loss is mean_squared_error: use mse or mae", metric_names[mt]);
        if (!classify && c->loss != TPU_LOSS_MSE)
            return tpu__fail(d, TPU_EINVAL, "metric '%s' compares outputs with regression "
                             "targets (loss mean_squared_error); this model's loss is "
                             "sparse_categorical_crossentropy: use accuracy or "
                             "sparse_categorical_crossentropy", metric_names[mt]);
    }
    if (!c->steps_per_execution_auto && c->steps_per_execution < 1)
        return tpu__fail(d, TPU_EINVAL, "steps_per_execution is 0; it must be at least 1 (the "
                         "batches each execution runs on the chip), or 'auto' "
                         "(steps_per_execution_auto)");
    if (!c->steps_per_execution_auto && c->steps_per_execution > TPU_TUNER_MAX_STEPS)
        return tpu__fail(d, TPU_EINVAL, "steps_per_execution %llu is above %llu, the largest "
                         "execution the runtime runs; give a smaller count or 'auto'",
                         (unsigned long long)c->steps_per_execution,
                         (unsigned long long)TPU_TUNER_MAX_STEPS);
    return 0;
}

static int hook_before_loop(void *ctx, enum tpu_mode mode, uint64_t global_step,
                            uint64_t pass_step, uint64_t steps, struct tpu_diag *d);
static int hook_after_loop(void *ctx, const struct tpu_loop_info *info, struct tpu_diag *d);

int tpu_keras_model_compile(struct tpu_device *dev, const struct tpu_net *net,
                            const struct tpu_keras_compile *c, struct tpu_keras_model **out,
                            struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!dev || !net || !c || !out)
        return tpu__fail(d, TPU_EINVAL, "compile needs a device, a net, the compile settings "
                         "and where to put the model (one of them is NULL)");
    enum tpu_loss net_loss;
    int rc = check_compile(net, c, &net_loss, d);
    if (rc)
        return rc;
    struct tpu_keras_model *m = calloc(1, sizeof *m);
    if (!m)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the model");
    m->dev = dev;
    m->net = net;
    m->c = *c;
    m->loss = net_loss;
    struct tpu_layer_info in_info, out_info;
    uint32_t out_tensor;
    tpu_net_output(net, &out_tensor, &net_loss);
    tpu_net_layer(net, 0, &in_info);
    tpu_net_layer(net, out_tensor, &out_info);
    m->input = in_info.out;
    m->outputs = out_info.out.h * out_info.out.w * out_info.out.c;
    m->n_replicas = tpu_device_n_replicas(dev);
    rc = tpu_net_model(&m->model, net, &m->c.optimizer, d);
    if (rc) {
        free(m);
        return rc;
    }
    /* the batch sizes and the loop size are fit's, evaluate's and predict's: any valid
     * ones until then */
    m->cfg = c->run;
    uint32_t unit = tpu__keras_batch_unit(m, TPU_MODE_TRAIN);
    m->cfg.train_batch_size = m->cfg.eval_batch_size = m->cfg.predict_batch_size = unit;
    m->cfg.iterations_per_loop_s = 0;
    m->cfg.iterations_per_loop_auto = c->steps_per_execution_auto;
    m->cfg.iterations_per_loop = c->steps_per_execution_auto ? 1 : c->steps_per_execution;
    if (c->steps_per_execution_auto)
        tpu_tuner_default_settings(&m->cfg.tuner, TPU_TUNER_KERAS);
    m->cfg.sample_weights = false;
    m->cfg.train_counts = false;
    struct tpu_hook hook = {.ctx = m, .before_loop = hook_before_loop,
                            .after_loop = hook_after_loop};
    rc = tpu_estimator_create(dev, &m->cfg, &m->model, &hook, 1, &m->est, d);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void tpu_keras_model_destroy(struct tpu_keras_model **pm)
{
    if (!pm || !*pm)
        return;
    tpu_estimator_destroy(&(*pm)->est);
    free(*pm);
    *pm = NULL;
}

struct tpu_estimator *tpu_keras_model_estimator(struct tpu_keras_model *m)
{
    return m ? m->est : NULL;
}

void tpu_keras_stop_training(struct tpu_keras_model *m)
{
    if (m)
        m->stop_training = true;
}

bool tpu_keras_stop_training_requested(const struct tpu_keras_model *m)
{
    return m && m->stop_training;
}

double tpu_keras_model_seconds(const struct tpu_keras_model *m)
{
    if (!m)
        return 0.0;
    const struct tpu_loop_info *li = tpu_estimator_last_info(m->est);
    return li && li->total_seconds > m->seconds ? li->total_seconds : m->seconds;
}

int tpu_keras_get_learning_rate(const struct tpu_keras_model *m, float *lr)
{
    struct tpu_diag d = {0};
    if (!m || !lr)
        return TPU_EINVAL;
    return tpu_estimator_get_learning_rate(m->est, lr, &d);
}

int tpu_keras_set_learning_rate(struct tpu_keras_model *m, float lr, struct tpu_diag *d)
{
    if (!m)
        return tpu__fail(d, TPU_EINVAL, "set_learning_rate needs a model (got NULL)");
    if (!isfinite(lr) || lr < 0.0f)
        return tpu__fail(d, TPU_EINVAL, "learning rate %g is not a finite rate >= 0; give "
                         "the rate the next execution uses", (double)lr);
    if (m->c.optimizer.schedule != TPU_SCHEDULE_HOST)
        return tpu__fail(d, TPU_EUNSUPPORTED, "the model's learning rate is fixed by its "
                         "schedule (optimizer.schedule %d); to set it from the host (a "
                         "LearningRateScheduler), compile with optimizer.schedule = "
                         "TPU_SCHEDULE_HOST", (int)m->c.optimizer.schedule);
    return tpu_estimator_set_learning_rate(m->est, lr, d);
}

void tpu_history_free(struct tpu_history *h)
{
    if (!h)
        return;
    free(h->epochs);
    memset(h, 0, sizeof *h);
}

/* ---- the estimator's configuration for a call --------------------------------------------- */

uint32_t tpu__keras_batch_unit(const struct tpu_keras_model *m, enum tpu_mode mode)
{
    const uint32_t hosts = m->cfg.num_hosts ? m->cfg.num_hosts : 1;
    if (mode == TPU_MODE_TRAIN) {
        if (m->cfg.per_host_input_for_training == TPU_BROADCAST)
            return 1;
        return m->n_replicas * hosts;
    }
    return m->n_replicas * hosts;
}

int tpu__keras_configure(struct tpu_keras_model *m, enum tpu_mode mode, uint32_t global_batch,
                         bool sample_weights, uint64_t spe, struct tpu_diag *d)
{
    struct tpu_run_config cfg = m->cfg;
    if (mode == TPU_MODE_TRAIN)
        cfg.train_batch_size = global_batch;
    else if (mode == TPU_MODE_EVAL)
        cfg.eval_batch_size = global_batch;
    else
        cfg.predict_batch_size = global_batch;
    cfg.sample_weights = sample_weights;
    bool counts = false;
    for (uint32_t i = 0; i < m->c.n_metrics; i++)
        counts |= m->c.metrics[i] == TPU_METRIC_ACCURACY;
    cfg.train_counts = counts;
    if (spe) {
        cfg.iterations_per_loop_auto = false;
        cfg.iterations_per_loop = spe;
    } else {
        cfg.iterations_per_loop_auto = m->c.steps_per_execution_auto;
        cfg.iterations_per_loop = m->c.steps_per_execution_auto ? 1 : m->c.steps_per_execution;
    }
    if (memcmp(&cfg, &m->cfg, sizeof cfg) == 0)
        return 0;
    int rc = tpu_estimator_reconfigure(m->est, &cfg, d);
    if (rc)
        return rc;
    m->cfg = cfg;
    return 0;
}

/* ---- logs from the loops' sums ------------------------------------------------------------- */

void tpu__keras_run_logs(const struct tpu_keras_model *m, struct tpu__keras_run *run)
{
    memset(&run->logs, 0, sizeof run->logs);
    if (run->mode == TPU_MODE_PREDICT || run->real == 0)
        return;
    const double loss = run->loss_sum / (double)run->real;
    tpu_logs_set(&run->logs, "loss", loss);
    for (uint32_t i = 0; i < m->c.n_metrics; i++) {
        enum tpu_keras_metric mt = m->c.metrics[i];
        double v;
        switch (mt) {
        case TPU_METRIC_ACCURACY:
            v = run->correct / (double)run->real;
            break;
        case TPU_METRIC_SPARSE_CATEGORICAL_CROSSENTROPY:
        case TPU_METRIC_MSE: {
            /* the loss with the examples' weights as the metric's sample_weight: the
             * weighted sum over the weights' sum (Keras's Mean metrics); without weights
             * that is the loss */
            const uint64_t s = run->steps < run->n_wsum ? run->steps : run->n_wsum;
            v = run->wsum && run->wsum[s] > 0 ? run->loss_sum / run->wsum[s] : loss;
            break;
        }
        default:
            continue; /* mae: from predictions (evaluate.c) */
        }
        tpu_logs_set(&run->logs, metric_names[mt], v);
    }
}

/* ---- callbacks ----------------------------------------------------------------------------- */

static const char *const hook_names[] = {
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_train_batch_begin",
    "on_train_batch_end", "on_test_begin", "on_test_end", "on_test_batch_begin",
    "on_test_batch_end", "on_predict_begin", "on_predict_end", "on_predict_batch_begin",
    "on_predict_batch_end"};

void tpu__keras_set_params(const struct tpu_callback *cbs, size_t n, int verbose,
                           uint64_t epochs, uint64_t steps)
{
    const struct tpu_keras_params p = {.verbose = verbose, .epochs = epochs, .steps = steps};
    for (size_t i = 0; i < n; i++)
        if (cbs[i].set_params)
            cbs[i].set_params(cbs[i].ctx, &p);
}

int tpu__keras_cbs_make(const struct tpu_callback *user, size_t n_user, int verbose,
                        FILE *out, bool is_tty, struct tpu__keras_cbs *l, struct tpu_diag *d)
{
    memset(l, 0, sizeof *l);
    verbose = tpu__keras_verbose(verbose, is_tty);
    if (verbose > 0 && out) {
        int rc = tpu_callback_progbar(out, verbose, is_tty, &l->bar, d);
        if (rc)
            return rc;
        l->has_bar = true;
    }
    l->all = calloc(n_user + 1, sizeof *l->all);
    if (!l->all) {
        tpu_callback_free(&l->bar);
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the callbacks");
    }
    if (n_user)
        memcpy(l->all, user, n_user * sizeof *user);
    l->n_user = n_user;
    l->n = n_user;
    if (l->has_bar)
        l->all[l->n++] = l->bar;
    return 0;
}

void tpu__keras_cbs_free(struct tpu__keras_cbs *l)
{
    if (!l)
        return;
    if (l->has_bar)
        tpu_callback_free(&l->bar);
    free(l->all);
    memset(l, 0, sizeof *l);
}

int tpu__keras_verbose(int verbose, bool is_tty)
{
    return verbose == -1 ? (is_tty ? 1 : 2) : verbose;
}

int tpu__keras_callbacks(struct tpu_keras_model *m, const struct tpu_callback *cbs, size_t n,
                         enum tpu__keras_hook hook, uint64_t index, struct tpu_logs *logs,
                         struct tpu_diag *d)
{
    struct tpu_logs empty = {0};
    if (!logs)
        logs = &empty;
    for (size_t i = 0; i < n; i++) {
        const struct tpu_callback *cb = &cbs[i];
        struct tpu_diag cd = {0};
        int rc = 0;
        switch (hook) {
#define CALL0(field) if (cb->field) rc = cb->field(cb->ctx, m, logs, &cd); break
#define CALL1(field) if (cb->field) rc = cb->field(cb->ctx, m, index, logs, &cd); break
        case TPU__CB_TRAIN_BEGIN: CALL0(on_train_begin);
        case TPU__CB_TRAIN_END: CALL0(on_train_end);
        case TPU__CB_EPOCH_BEGIN: CALL1(on_epoch_begin);
        case TPU__CB_EPOCH_END: CALL1(on_epoch_end);
        case TPU__CB_TRAIN_BATCH_BEGIN: CALL1(on_train_batch_begin);
        case TPU__CB_TRAIN_BATCH_END: CALL1(on_train_batch_end);
        case TPU__CB_TEST_BEGIN: CALL0(on_test_begin);
        case TPU__CB_TEST_END: CALL0(on_test_end);
        case TPU__CB_TEST_BATCH_BEGIN: CALL1(on_test_batch_begin);
        case TPU__CB_TEST_BATCH_END: CALL1(on_test_batch_end);
        case TPU__CB_PREDICT_BEGIN: CALL0(on_predict_begin);
        case TPU__CB_PREDICT_END: CALL0(on_predict_end);
        case TPU__CB_PREDICT_BATCH_BEGIN: CALL1(on_predict_batch_begin);
        case TPU__CB_PREDICT_BATCH_END: CALL1(on_predict_batch_end);
#undef CALL0
#undef CALL1
        }
        if (rc) {
            if (cd.msg[0])
                return tpu__fail(d, rc, "%s", cd.msg);
            return tpu__fail(d, rc, "callback %zu's %s failed with %s and no message", i,
                             hook_names[hook], tpu_err_name(rc));
        }
    }
    return 0;
}

/* The estimator's hooks: an execution's first batch index before its launch, its last
 * after it, with the running logs of the pass. */
static int hook_before_loop(void *ctx, enum tpu_mode mode, uint64_t global_step,
                            uint64_t pass_step, uint64_t steps, struct tpu_diag *d)
{
    struct tpu_keras_model *m = ctx;
    struct tpu__keras_run *run = m->run;
    (void)global_step;
    (void)steps;
    if (!run || run->mode != mode || (run->known_steps && pass_step >= run->known_steps))
        return 0;
    static const enum tpu__keras_hook begin[] = {TPU__CB_TRAIN_BATCH_BEGIN,
                                                 TPU__CB_TEST_BATCH_BEGIN,
                                                 TPU__CB_PREDICT_BATCH_BEGIN};
    return tpu__keras_callbacks(m, run->cbs, run->n_cbs, begin[mode], pass_step, NULL, d);
}

static int hook_after_loop(void *ctx, const struct tpu_loop_info *info, struct tpu_diag *d)
{
    struct tpu_keras_model *m = ctx;
    struct tpu__keras_run *run = m->run;
    if (info->total_seconds > m->seconds)
        m->seconds = info->total_seconds;
    if (!run || run->mode != info->mode || info->steps == 0)
        return 0;
    run->steps = info->pass_steps;
    run->real += info->real_examples;
    if (info->mode != TPU_MODE_PREDICT) {
        run->loss_sum += info->loss_sum;
        run->correct += info->correct;
    }
    tpu__keras_run_logs(m, run);
    static const enum tpu__keras_hook end[] = {TPU__CB_TRAIN_BATCH_END, TPU__CB_TEST_BATCH_END,
                                               TPU__CB_PREDICT_BATCH_END};
    struct tpu_logs logs = run->logs; /* the callbacks' copy */
    int rc = tpu__keras_callbacks(m, run->cbs, run->n_cbs, end[info->mode],
                                  info->pass_steps - 1, &logs, d);
    if (rc)
        return rc;
    if (info->mode == TPU_MODE_TRAIN && m->stop_training) {
        /* Keras leaves the epoch's steps at once: the pass stops here (fit tells this
         * stop from a failure) */
        run->stop_at_batch = true;
        return tpu__fail(d, TPU_ECANCELED, "stop_training was set at batch %llu",
                         (unsigned long long)(info->pass_steps - 1));
    }
    return 0;
}

/* ---- data ---------------------------------------------------------------------------------- */

int tpu__keras_check_data(const struct tpu_keras_model *m, const struct tpu_keras_data *data,
                          const char *what, struct tpu_diag *d)
{
    if (!data->arrays == !data->input)
        return tpu__fail(d, TPU_EINVAL, "%s needs its data as arrays or as an input function, "
                         "exactly one (%s given); set data.arrays or data.input", what,
                         data->arrays ? "both" : "neither");
    if (data->input && !data->input->next)
        return tpu__fail(d, TPU_EINVAL, "%s's input function has no next(); give the "
                         "function that fills each batch", what);
    if (data->input && data->sample_weight)
        return tpu__fail(d, TPU_EINVAL, "%s's sample_weight goes with arrays; an input "
                         "function gives its own batches, without weights: drop "
                         "sample_weight or pass the data as arrays", what);
    if (data->arrays) {
        if (data->arrays->n_examples == 0 || !data->arrays->x)
            return tpu__fail(d, TPU_EINVAL, "%s's arrays hold no examples; give at least one",
                             what);
        int rc = tpu_dataset_check_model(data->arrays, m->input, m->loss, m->outputs, d);
        if (rc)
            return rc;
        if (data->sample_weight)
            for (uint32_t i = 0; i < data->arrays->n_examples; i++)
                if (!isfinite(data->sample_weight[i]) || data->sample_weight[i] < 0.0f)
                    return tpu__fail(d, TPU_EINVAL, "%s's sample_weight[%u] is %g; every "
                                     "weight must be finite and >= 0", what, i,
                                     (double)data->sample_weight[i]);
    }
    return 0;
}
