/* EarlyStopping (keras.h's tpu_callback_early_stopping): Keras 2.15's rules, step for step
 * (on_train_begin resets, on_epoch_end counts, improves, stops and restores), with the best
 * weights kept as a host copy of the layers' params. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "util.h"

struct early_stopping {
    char *monitor;
    double min_delta;      /* signed: positive in max mode, negative in min mode */
    uint64_t patience;
    bool greater;
    double baseline;       /* NaN: none */
    bool restore_best_weights;
    uint64_t start_from_epoch;
    FILE *verbose_out;
    /* per fit (on_train_begin) */
    uint64_t wait, stopped_epoch, best_epoch;
    double best;
    bool have_best_weights;
    struct tpu__param_set best_weights;
};

static void es_destroy(void *ctx)
{
    struct early_stopping *e = ctx;
    tpu__param_set_free(&e->best_weights);
    free(e->monitor);
    free(e);
}

static bool is_improvement(const struct early_stopping *e, double value, double reference)
{
    return e->greater ? value - e->min_delta > reference : value - e->min_delta < reference;
}

static int es_train_begin(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                          struct tpu_diag *d)
{
    (void)m, (void)logs, (void)d;
    struct early_stopping *e = ctx;
    e->wait = 0;
    e->stopped_epoch = 0;
    e->best = e->greater ? -INFINITY : INFINITY;
    tpu__param_set_free(&e->best_weights);
    e->have_best_weights = false;
    e->best_epoch = 0;
    return 0;
}

static int keep_weights(struct early_stopping *e, struct tpu_keras_model *m, struct tpu_diag *d)
{
    tpu__param_set_free(&e->best_weights);
    e->have_best_weights = false;
    int rc = tpu__param_set_read(m, true, &e->best_weights, d);
    if (!rc)
        e->have_best_weights = true;
    return rc;
}

static int es_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        struct tpu_logs *logs, struct tpu_diag *d)
{
    struct early_stopping *e = ctx;
    int i = tpu__logs_find(logs, e->monitor);
    if (i < 0) {
        char names[400] = "";
        for (uint32_t k = 0; logs && k < logs->n && strlen(names) < sizeof names - 40; k++) {
            strcat(names, k ? "," : "");
            strcat(names, logs->name[k]);
        }
        tpu__fail(d, 0, "warning: Early stopping conditioned on metric `%s` which is not "
                  "available. Available metrics are: %s", e->monitor, names);
        return 0;
    }
    if (epoch < e->start_from_epoch)
        return 0; /* still in the warm-up */
    const double current = logs->value[i];
    int rc;
    if (e->restore_best_weights && !e->have_best_weights &&
        (rc = keep_weights(e, m, d))) /* the first counted epoch's, if none ever improves */
        return rc;
    e->wait++;
    if (is_improvement(e, current, e->best)) {
        e->best = current;
        e->best_epoch = epoch;
        if (e->restore_best_weights && (rc = keep_weights(e, m, d)))
            return rc;
        /* wait restarts only when the value beats the baseline too */
        if (isnan(e->baseline) || is_improvement(e, current, e->baseline))
            e->wait = 0;
        return 0;
    }
    if (e->wait >= e->patience && epoch > 0) {
        e->stopped_epoch = epoch;
        tpu_keras_stop_training(m);
        if (e->restore_best_weights && e->have_best_weights) {
            if (e->verbose_out) {
                fprintf(e->verbose_out, "Restoring model weights from the end of the best "
                        "epoch: %llu.\n", (unsigned long long)e->best_epoch + 1);
                fflush(e->verbose_out);
            }
            return tpu__param_set_write(m, &e->best_weights, d);
        }
    }
    return 0;
}

static int es_train_end(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                        struct tpu_diag *d)
{
    (void)m, (void)logs, (void)d;
    struct early_stopping *e = ctx;
    if (e->stopped_epoch > 0 && e->verbose_out) {
        fprintf(e->verbose_out, "Epoch %llu: early stopping\n",
                (unsigned long long)e->stopped_epoch + 1);
        fflush(e->verbose_out);
    }
    tpu__param_set_free(&e->best_weights); /* the host copy is no longer needed */
    e->have_best_weights = false;
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int tpu_callback_early_stopping(const struct tpu_early_stopping_args *a,
                                struct tpu_callback *cb, struct tpu_diag *d)
{
    if (!cb)
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: no callback to fill (cb is NULL)");
    memset(cb, 0, sizeof *cb);
    if (!a)
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: no arguments (a is NULL); give a "
                         "struct tpu_early_stopping_args");
    const char *monitor = a->monitor && a->monitor[0] ? a->monitor : "val_loss";
    if (strlen(monitor) > TPU_LOG_NAME_MAX)
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: monitor '%.40s...' is longer than a "
                         "log name can be (%d bytes); give a log's name such as val_loss",
                         monitor, TPU_LOG_NAME_MAX);
    if (!isfinite(a->min_delta))
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: min_delta %g is not a finite number; "
                         "give the smallest change that counts as an improvement, e.g. 0.001",
                         a->min_delta);
    if (isinf(a->baseline))
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: baseline %g is infinite; give a "
                         "finite value the monitor must beat, or NaN for none", a->baseline);
    const char *mode = a->mode && a->mode[0] ? a->mode : "auto";
    bool greater;
    if (!strcmp(mode, "min"))
        greater = false;
    else if (!strcmp(mode, "max"))
        greater = true;
    else if (!strcmp(mode, "auto"))
        greater = ends_with(monitor, "acc") || ends_with(monitor, "accuracy") ||
                  ends_with(monitor, "auc");
    else {
        char q[TPU__QUOTE_BYTES];
        return tpu__fail(d, TPU_EINVAL, "EarlyStopping: mode '%s' is unknown; give 'auto' "
                         "(max for a monitor ending in acc, accuracy or auc, else min), 'min' "
                         "or 'max'", tpu__quote(mode, q, sizeof q));
    }
    struct early_stopping *e = calloc(1, sizeof *e);
    if (!e || !(e->monitor = strdup(monitor))) {
        free(e);
        return tpu__fail(d, TPU_ENOMEM, "EarlyStopping: out of memory");
    }
    e->greater = greater;
    e->min_delta = greater ? fabs(a->min_delta) : -fabs(a->min_delta);
    e->patience = a->patience;
    e->baseline = a->baseline;
    e->restore_best_weights = a->restore_best_weights;
    e->start_from_epoch = a->start_from_epoch;
    e->verbose_out = a->verbose_out;
    e->best = greater ? -INFINITY : INFINITY;
    *cb = (struct tpu_callback){
        .ctx = e,
        .on_train_begin = es_train_begin,
        .on_train_end = es_train_end,
        .on_epoch_end = es_epoch_end,
        .destroy = es_destroy,
    };
    return 0;
}
