/* ModelCheckpoint (keras.h's tpu_callback_model_checkpoint): Keras 2.15's rules for when to
 * save (every epoch end, or every save_freq batches counted across executions of
 * steps_per_execution batches) and what is best (save_best_only, mode), writing a tpusim
 * checkpoint directory (checkpoint.h) of every param the estimator holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "tpusim/checkpoint.h"
#include "util.h"

#define PATH_CAP 4096

struct model_checkpoint {
    char *filepath, *monitor;
    bool save_best_only;
    bool greater;          /* the monitor's better side (np.greater), else np.less */
    double best;
    uint64_t save_freq;    /* 0: every epoch */
    FILE *verbose_out;
    /* Keras's _should_save_on_batch state */
    int64_t last_batch_seen;
    uint64_t batches_since_save;
    uint64_t current_epoch;
};

static void mc_destroy(void *ctx)
{
    struct model_checkpoint *c = ctx;
    free(c->filepath);
    free(c->monitor);
    free(c);
}

/* Writes the checkpoint directory `dir` of every param. */
static int write_checkpoint(struct tpu_keras_model *m, const char *dir, struct tpu_diag *d)
{
    struct tpu__param_set s;
    int rc = tpu__param_set_read(m, false, &s, d);
    if (rc)
        return rc;
    struct tpu_tensor *t = calloc(s.n ? s.n : 1, sizeof *t);
    if (!t) {
        tpu__param_set_free(&s);
        return tpu__fail(d, TPU_ENOMEM, "ModelCheckpoint: out of memory");
    }
    for (size_t i = 0; i < s.n; i++)
        t[i] = (struct tpu_tensor){.name = s.name[i], .dtype = TPU_F32, .rows = s.rows[i],
                                   .cols = s.cols[i], .data = s.data[i]};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.keep_max = 1; /* a path holds its latest save, as Keras overwrites the file */
    struct tpu_diag sub = {0};
    rc = tpu_checkpoint_save(dir, tpu_estimator_global_step(tpu_keras_model_estimator(m)), t,
                             s.n, &o, NULL, 0, &sub);
    free(t);
    tpu__param_set_free(&s);
    if (rc) {
        char q[TPU__QUOTE_PATH_BYTES];
        return tpu__fail(d, rc, "ModelCheckpoint: cannot save to '%s': %s",
                         tpu__quote(dir, q, sizeof q), sub.msg);
    }
    return 0;
}

/* Keras's _save_model; batch < 0 at an epoch end. */
static int save_model(struct model_checkpoint *c, struct tpu_keras_model *m, uint64_t epoch,
                      int64_t batch, const struct tpu_logs *logs, struct tpu_diag *d)
{
    char path[PATH_CAP];
    int rc = tpu__format_filepath(c->filepath, epoch, batch, logs, path, sizeof path, d);
    if (rc)
        return rc;
    if (!c->save_best_only) {
        if (c->verbose_out) {
            fprintf(c->verbose_out, "\nEpoch %llu: saving model to %s\n",
                    (unsigned long long)epoch + 1, path);
            fflush(c->verbose_out);
        }
        return write_checkpoint(m, path, d);
    }
    int i = tpu__logs_find(logs, c->monitor);
    if (i < 0) {
        /* Keras: logging.warning(...), and the save is skipped */
        tpu__fail(d, 0, "warning: ModelCheckpoint can save best model only with %s available, "
                  "skipping", c->monitor);
        return 0;
    }
    const double current = logs->value[i];
    const bool better = c->greater ? current > c->best : current < c->best;
    if (!better) {
        if (c->verbose_out) {
            fprintf(c->verbose_out, "\nEpoch %llu: %s did not improve from %.5f\n",
                    (unsigned long long)epoch + 1, c->monitor, c->best);
            fflush(c->verbose_out);
        }
        return 0;
    }
    if (c->verbose_out) {
        fprintf(c->verbose_out, "\nEpoch %llu: %s improved from %.5f to %.5f, saving model to "
                "%s\n", (unsigned long long)epoch + 1, c->monitor, c->best, current, path);
        fflush(c->verbose_out);
    }
    c->best = current;
    return write_checkpoint(m, path, d);
}

/* Keras's _should_save_on_batch: the batch-end hooks' indices (an execution's last batch)
 * add the batches since the previous hook; a new epoch restarts the indices. */
static bool should_save_on_batch(struct model_checkpoint *c, uint64_t batch)
{
    if (!c->save_freq)
        return false;
    uint64_t add = (int64_t)batch <= c->last_batch_seen ? batch + 1
                                                          : batch - (uint64_t)c->last_batch_seen;
    c->batches_since_save += add;
    c->last_batch_seen = (int64_t)batch;
    if (c->batches_since_save >= c->save_freq) {
        c->batches_since_save = 0;
        return true;
    }
    return false;
}

static int mc_epoch_begin(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                          const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)m, (void)logs, (void)d;
    ((struct model_checkpoint *)ctx)->current_epoch = epoch;
    return 0;
}

static int mc_batch_end(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                        const struct tpu_logs *logs, struct tpu_diag *d)
{
    struct model_checkpoint *c = ctx;
    if (!should_save_on_batch(c, batch))
        return 0;
    return save_model(c, m, c->current_epoch, (int64_t)batch, logs, d);
}

static int mc_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        struct tpu_logs *logs, struct tpu_diag *d)
{
    struct model_checkpoint *c = ctx;
    if (c->save_freq)
        return 0;
    return save_model(c, m, epoch, -1, logs, d);
}

int tpu_callback_model_checkpoint(const struct tpu_model_checkpoint_args *a,
                                  struct tpu_callback *cb, struct tpu_diag *d)
{
    if (!cb)
        return tpu__fail(d, TPU_EINVAL, "ModelCheckpoint: no callback to fill (cb is NULL)");
    memset(cb, 0, sizeof *cb);
    if (!a || !a->filepath || !a->filepath[0])
        return tpu__fail(d, TPU_EINVAL, "ModelCheckpoint: filepath is empty; give the "
                         "checkpoint directory to write, e.g. \"ckpt/{epoch:02d}\"");
    int rc = tpu__format_filepath(a->filepath, 0, 0, NULL, (char[PATH_CAP]){0}, PATH_CAP, d);
    if (rc)
        return rc;
    const char *monitor = a->monitor && a->monitor[0] ? a->monitor : "val_loss";
    if (strlen(monitor) > TPU_LOG_NAME_MAX)
        return tpu__fail(d, TPU_EINVAL, "ModelCheckpoint: monitor '%.40s...' is longer than a "
                         "log name can be (%d bytes); give a log's name such as val_loss",
                         monitor, TPU_LOG_NAME_MAX);
    const char *mode = a->mode && a->mode[0] ? a->mode : "auto";
    bool greater;
    if (!strcmp(mode, "min"))
        greater = false;
    else if (!strcmp(mode, "max"))
        greater = true;
    else if (!strcmp(mode, "auto"))
        greater = strstr(monitor, "acc") || !strncmp(monitor, "fmeasure", 8);
    else {
        char q[TPU__QUOTE_BYTES];
        return tpu__fail(d, TPU_EINVAL, "ModelCheckpoint: mode '%s' is unknown; give 'auto' "
                         "(max for a monitor holding \"acc\", else min), 'min' or 'max'",
                         tpu__quote(mode, q, sizeof q));
    }
    struct model_checkpoint *c = calloc(1, sizeof *c);
    if (!c || !(c->filepath = strdup(a->filepath)) || !(c->monitor = strdup(monitor))) {
        if (c)
            mc_destroy(c);
        return tpu__fail(d, TPU_ENOMEM, "ModelCheckpoint: out of memory");
    }
    c->save_best_only = a->save_best_only;
    c->greater = greater;
    c->best = greater ? -INFINITY : INFINITY;
    c->save_freq = a->save_freq;
    c->verbose_out = a->verbose_out;
    c->last_batch_seen = -1;
    *cb = (struct tpu_callback){
        .ctx = c,
        .on_epoch_begin = mc_epoch_begin,
        .on_epoch_end = mc_epoch_end,
        .on_train_batch_end = a->save_freq ? mc_batch_end : NULL,
        .destroy = mc_destroy,
    };
    return 0;
}
