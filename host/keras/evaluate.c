/* evaluate, predict and the *_on_batch calls (include/tpusim/keras.h) over the estimator:
 * evaluation is tpu_estimator_evaluate, prediction tpu_estimator_predict, both of which pad
 * the last partial batch and mask the padding, so N examples give metrics over exactly N
 * and N output rows. The *_on_batch calls run one step on exactly the rows given: the global
 * batch is the rows rounded up to what splits over the replicas, the padding masked (and,
 * in training, weighted 0 by the weighted program). mae is computed on the host from a
 * prediction pass over the same arrays (the device programs count no absolute errors). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "keras/keras_int.h"
#include "util.h"

void tpu_keras_evaluate_default(struct tpu_keras_evaluate *e)
{
    memset(e, 0, sizeof *e);
    e->batch_size = 32;
    e->verbose = -1;
}

static uint32_t round_up(uint32_t n, uint32_t unit)
{
    return (n + unit - 1) / unit * unit;
}

/* Prediction rows collected from the estimator's emit calls. */
struct rows {
    float *data; /* [n][cols] */
    uint64_t n, cap;
    uint32_t cols;
    bool oom;
};

static void emit_row(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct rows *r = ctx;
    if (r->oom)
        return;
    if (index >= r->cap) {
        uint64_t cap = r->cap ? r->cap * 2 : 256;
        while (cap <= index)
            cap *= 2;
        float *p = realloc(r->data, (size_t)cap * cols * sizeof *p);
        if (!p) {
            r->oom = true;
            return;
        }
        r->data = p;
        r->cap = cap;
    }
    r->cols = cols;
    memcpy(r->data + (size_t)index * cols, row, (size_t)cols * sizeof *row);
    if (index + 1 > r->n)
        r->n = index + 1;
}

/* A prediction pass over `input` with global batch `batch`, into *r (freed by the caller). */
static int predict_pass(struct tpu_keras_model *m, const struct tpu_input *input,
                        uint32_t batch, struct tpu__keras_run *run, struct rows *r,
                        struct tpu_diag *d)
{
    int rc = tpu__keras_configure(m, TPU_MODE_PREDICT, batch, m->cfg.sample_weights, 0, d);
    if (rc)
        return rc;
    uint64_t n = 0;
    struct tpu__keras_run *prev = m->run;
    m->run = run;
    rc = tpu_estimator_predict(m->est, input, emit_row, r, &n, d);
    m->run = prev;
    if (!rc && r->oom)
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory for the predictions (%llu rows so far)",
                       (unsigned long long)r->n);
    if (!rc)
        r->n = n;
    return rc;
}

/* mean |prediction - target| over every value of the arrays' examples */
static int mae_of(struct tpu_keras_model *m, const struct tpu_dataset *ds, uint32_t batch,
                  double *mae, struct tpu_diag *d)
{
    struct tpu__keras_arrays arr;
    tpu__keras_arrays_init(&arr, ds, NULL, NULL, 0, NULL);
    struct rows r = {0};
    int rc = predict_pass(m, &arr.input, batch, NULL, &r, d);
    if (!rc) {
        double sum = 0;
        const uint64_t values = (uint64_t)ds->n_examples * ds->n_targets;
        for (uint64_t i = 0; i < values; i++)
            sum += fabs((double)r.data[i] - (double)ds->targets[i]);
        *mae = values ? sum / (double)values : NAN;
    }
    free(r.data);
    return rc;
}

/* the batches of an evaluate or predict call: 0 when unknown (an input function without
 * steps) */
static uint64_t call_steps(const struct tpu_keras_data *data, uint32_t batch, uint64_t steps)
{
    if (!data->arrays)
        return steps;
    const uint64_t all = (data->arrays->n_examples + (uint64_t)batch - 1) / batch;
    return steps && steps < all ? steps : all;
}

int tpu__keras_evaluate_data(struct tpu_keras_model *m, const struct tpu_keras_data *data,
                             uint32_t batch_size, uint64_t steps,
                             const struct tpu_callback *cbs, size_t n_cbs,
                             struct tpu_logs *logs, char *warning, size_t warning_size,
                             struct tpu_diag *d)
{
    memset(logs, 0, sizeof *logs);
    int rc = tpu__keras_configure(m, TPU_MODE_EVAL, batch_size, m->cfg.sample_weights, 0, d);
    if (rc)
        return rc;
    if ((rc = tpu__keras_callbacks(m, cbs, n_cbs, TPU__CB_TEST_BEGIN, 0, NULL, d)))
        return rc;
    struct tpu__keras_arrays arr;
    const struct tpu_input *input = data->input;
    if (data->arrays) {
        tpu__keras_arrays_init(&arr, data->arrays, NULL, NULL, 0, NULL);
        input = &arr.input;
    }
    struct tpu__keras_run run = {.mode = TPU_MODE_EVAL, .cbs = cbs, .n_cbs = n_cbs,
                                 .known_steps = call_steps(data, batch_size, steps)};
    struct tpu_eval_result res;
    struct tpu__keras_run *prev = m->run;
    m->run = &run;
    rc = tpu_estimator_evaluate(m->est, input, steps, &res, d);
    m->run = prev;
    if (rc)
        return rc;
    if (steps && res.steps < steps && warning && warning_size)
        snprintf(warning, warning_size, TPU__KERAS_RAN_OUT, (unsigned long long)steps);
    /* the pass's own figures: exactly the examples given */
    tpu_logs_set(logs, "loss", res.loss);
    bool want_mae = false;
    for (uint32_t i = 0; i < m->c.n_metrics; i++) {
        enum tpu_keras_metric mt = m->c.metrics[i];
        const char *name = tpu_keras_metric_name(mt);
        if (mt == TPU_METRIC_ACCURACY)
            tpu_logs_set(logs, name, res.accuracy);
        else if (mt == TPU_METRIC_MAE)
            want_mae = true;
        else
            tpu_logs_set(logs, name, res.loss);
    }
    if (want_mae) {
        double mae = NAN;
        if (data->arrays) {
            struct tpu_dataset part;
            const uint64_t rows = steps ? steps * (uint64_t)batch_size : UINT64_MAX;
            tpu__keras_dataset_view(data->arrays, 0,
                                    rows < data->arrays->n_examples
                                        ? (uint32_t)rows : data->arrays->n_examples, &part);
            if ((rc = mae_of(m, &part, batch_size, &mae, d)))
                return rc;
        }
        /* an input function's examples cannot be read again for the comparison: mae is NaN
         * (keras.h) */
        for (uint32_t i = 0; i < m->c.n_metrics; i++)
            if (m->c.metrics[i] == TPU_METRIC_MAE)
                tpu_logs_set(logs, "mae", mae);
    }
    /* the logs in compile order: loss first, then each metric */
    struct tpu_logs ordered = {0};
    tpu_logs_set(&ordered, "loss", tpu_logs_get(logs, "loss"));
    for (uint32_t i = 0; i < m->c.n_metrics; i++) {
        const char *name = tpu_keras_metric_name(m->c.metrics[i]);
        tpu_logs_set(&ordered, name, tpu_logs_get(logs, name));
    }
    *logs = ordered;
    return tpu__keras_callbacks(m, cbs, n_cbs, TPU__CB_TEST_END, 0, &ordered, d);
}


int tpu__keras_check_known_size(const struct tpu_keras_model *m,
                                const struct tpu_keras_data *data, uint64_t steps,
                                const char *what, const char *steps_arg, struct tpu_diag *d)
{
    /* an execution must be cut at the pass's end, which needs the pass's size */
    if (data->input && !steps && !m->c.steps_per_execution_auto &&
        m->c.steps_per_execution > 1)
        return tpu__fail(d, TPU_EINVAL, "Could not infer the size of the data. With "
                         "`steps_per_execution > 1`, you must specify the number of steps to "
                         "run. (tpusim: steps_per_execution is %llu and %s is an input "
                         "function without %s: give %s)",
                         (unsigned long long)m->c.steps_per_execution, what, steps_arg,
                         steps_arg);
    return 0;
}

static int check_evaluate(const struct tpu_keras_model *m, const struct tpu_keras_evaluate *e,
                          const char *what, enum tpu_mode mode, uint32_t batch,
                          struct tpu_diag *d)
{
    int rc = tpu__keras_check_data(m, &e->data, what, d);
    if (rc)
        return rc;
    if (e->data.sample_weight)
        return tpu__fail(d, TPU_EINVAL, "%s takes no sample_weight: it reports the unweighted "
                         "loss and metrics; drop it", what);
    const uint32_t unit = tpu__keras_batch_unit(m, mode);
    if (batch % unit)
        return tpu__fail(d, TPU_EINVAL, "%s's batch_size %u does not split over the %u "
                         "replicas; give a multiple of %u", what, batch, unit, unit);
    if (e->verbose < -1 || e->verbose > 2)
        return tpu__fail(d, TPU_EINVAL, "verbose %d is not one of -1 ('auto'), 0, 1 or 2",
                         e->verbose);
    if (e->n_callbacks && !e->callbacks)
        return tpu__fail(d, TPU_EINVAL, "n_callbacks is %zu but callbacks is NULL; give the "
                         "array of callbacks or 0", e->n_callbacks);
    char data_name[64];
    snprintf(data_name, sizeof data_name, "%s's data", what);
    return tpu__keras_check_known_size(m, &e->data, e->steps, data_name, "steps", d);
}

int tpu_keras_evaluate(struct tpu_keras_model *m, const struct tpu_keras_evaluate *e,
                       struct tpu_logs *logs, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!m || !e || !logs)
        return tpu__fail(d, TPU_EINVAL, "evaluate needs a model, its arguments and logs to "
                         "fill (one of them is NULL)");
    const uint32_t batch = e->batch_size ? e->batch_size : 32;
    int rc = check_evaluate(m, e, "evaluate", TPU_MODE_EVAL, batch, d);
    if (rc)
        return rc;
    struct tpu__keras_cbs cbs;
    if ((rc = tpu__keras_cbs_make(e->callbacks, e->n_callbacks, e->verbose, e->out,
                                  e->out_is_tty, &cbs, d)))
        return rc;
    tpu__keras_set_params(cbs.all, cbs.n, tpu__keras_verbose(e->verbose, e->out_is_tty), 1,
                          call_steps(&e->data, batch, e->steps));
    char warning[512] = "";
    rc = tpu__keras_evaluate_data(m, &e->data, batch, e->steps, cbs.all, cbs.n, logs,
                                  warning, sizeof warning, d);
    tpu__keras_cbs_free(&cbs);
    if (!rc && warning[0])
        tpu__fail(d, 0, "warning: %s", warning);
    return rc;
}

int tpu_keras_predict(struct tpu_keras_model *m, const struct tpu_keras_evaluate *e,
                      float **out, uint64_t *n_out, uint32_t *cols, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!m || !e || !out || !n_out || !cols)
        return tpu__fail(d, TPU_EINVAL, "predict needs a model, its arguments and where to "
                         "put the rows, their count and width (one of them is NULL)");
    const uint32_t batch = e->batch_size ? e->batch_size : 32;
    int rc = check_evaluate(m, e, "predict", TPU_MODE_PREDICT, batch, d);
    if (rc)
        return rc;
    struct tpu__keras_arrays arr;
    const struct tpu_input *input = e->data.input;
    if (e->data.arrays) {
        struct tpu_dataset part;
        const struct tpu_dataset *ds = e->data.arrays;
        if (e->steps && e->steps * (uint64_t)batch < ds->n_examples) {
            tpu__keras_dataset_view(ds, 0, (uint32_t)(e->steps * batch), &part);
            ds = &part;
        }
        tpu__keras_arrays_init(&arr, ds, NULL, NULL, 0, NULL);
        input = &arr.input;
    }
    struct tpu__keras_cbs cbs;
    if ((rc = tpu__keras_cbs_make(e->callbacks, e->n_callbacks, e->verbose, e->out,
                                  e->out_is_tty, &cbs, d)))
        return rc;
    struct rows r = {0};
    struct tpu__keras_run run = {.mode = TPU_MODE_PREDICT, .cbs = cbs.all, .n_cbs = cbs.n,
                                 .known_steps = call_steps(&e->data, batch, e->steps)};
    tpu__keras_set_params(cbs.all, cbs.n, tpu__keras_verbose(e->verbose, e->out_is_tty), 1,
                          call_steps(&e->data, batch, e->steps));
    rc = tpu__keras_callbacks(m, cbs.all, cbs.n, TPU__CB_PREDICT_BEGIN, 0, NULL, d);
    if (!rc)
        rc = predict_pass(m, input, batch, &run, &r, d);
    if (!rc)
        rc = tpu__keras_callbacks(m, cbs.all, cbs.n, TPU__CB_PREDICT_END, 0, NULL, d);
    tpu__keras_cbs_free(&cbs);
    if (rc) {
        free(r.data);
        return rc;
    }
    *out = r.data;
    *n_out = r.n;
    *cols = r.n ? r.cols : m->outputs;
    return 0;
}

/* ---- *_on_batch ---------------------------------------------------------------------------- */

static int check_batch(const struct tpu_keras_model *m, const struct tpu_dataset *batch,
                       const char *what, struct tpu_diag *d)
{
    if (!m || !batch)
        return tpu__fail(d, TPU_EINVAL, "%s needs a model and a batch (one of them is NULL)",
                         what);
    struct tpu_keras_data data = {.arrays = batch};
    return tpu__keras_check_data(m, &data, what, d);
}

int tpu_keras_train_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                             const float *sample_weight, struct tpu_logs *logs,
                             struct tpu_diag *d)
{
    tpu_diag_clear(d);
    int rc = check_batch(m, batch, "train_on_batch", d);
    if (rc)
        return rc;
    if (!logs)
        return tpu__fail(d, TPU_EINVAL, "train_on_batch needs logs to fill (NULL given)");
    struct tpu_keras_data data = {.arrays = batch, .sample_weight = sample_weight};
    if ((rc = tpu__keras_check_data(m, &data, "train_on_batch", d)))
        return rc;
    const uint32_t n = batch->n_examples;
    const uint32_t g = round_up(n, tpu__keras_batch_unit(m, TPU_MODE_TRAIN));
    /* the padding rows of a batch that does not split over the replicas weigh 0 */
    const bool weighted = sample_weight || g != n;
    if ((rc = tpu__keras_configure(m, TPU_MODE_TRAIN, g, weighted, 1, d)))
        return rc;
    struct tpu__keras_arrays arr;
    tpu__keras_arrays_init(&arr, batch, sample_weight, NULL, 0, NULL);
    arr.weighted = weighted;
    arr.scale = m->cfg.per_host_input_for_training == TPU_BROADCAST ? m->n_replicas : 1;
    double wsum[2] = {0, 0};
    if (sample_weight)
        for (uint32_t i = 0; i < n; i++)
            wsum[1] += sample_weight[i];
    struct tpu__keras_run run = {.mode = TPU_MODE_TRAIN, .wsum = sample_weight ? wsum : NULL,
                                 .n_wsum = 1};
    m->run = &run;
    rc = tpu_estimator_train(m->est, &arr.input, 1, 0, d);
    m->run = NULL;
    if (rc)
        return rc;
    *logs = run.logs;
    return 0;
}

int tpu_keras_test_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                            struct tpu_logs *logs, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    int rc = check_batch(m, batch, "test_on_batch", d);
    if (rc)
        return rc;
    if (!logs)
        return tpu__fail(d, TPU_EINVAL, "test_on_batch needs logs to fill (NULL given)");
    struct tpu_keras_data data = {.arrays = batch};
    return tpu__keras_evaluate_data(
        m, &data, round_up(batch->n_examples, tpu__keras_batch_unit(m, TPU_MODE_EVAL)), 0,
        NULL, 0, logs, NULL, 0, d);
}

int tpu_keras_predict_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                               float **out, uint32_t *cols, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    int rc = check_batch(m, batch, "predict_on_batch", d);
    if (rc)
        return rc;
    if (!out || !cols)
        return tpu__fail(d, TPU_EINVAL, "predict_on_batch needs where to put the rows and "
                         "their width (NULL given)");
    struct tpu__keras_arrays arr;
    tpu__keras_arrays_init(&arr, batch, NULL, NULL, 0, NULL);
    struct rows r = {0};
    rc = predict_pass(m, &arr.input,
                      round_up(batch->n_examples, tpu__keras_batch_unit(m, TPU_MODE_PREDICT)),
                      NULL, &r, d);
    if (rc) {
        free(r.data);
        return rc;
    }
    *out = r.data;
    *cols = r.n ? r.cols : m->outputs;
    return 0;
}
