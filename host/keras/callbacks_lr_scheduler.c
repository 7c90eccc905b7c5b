/* LearningRateScheduler (keras.h's tpu_callback_lr_scheduler): at each epoch's begin the
 * schedule maps (epoch, the rate in force) to the epoch's rate, which the host-set rate of the
 * model's optimizer (TPU_SCHEDULE_HOST) takes; each epoch's logs get "lr", as Keras 2.15 adds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "util.h"

struct lr_scheduler {
    float (*schedule)(void *ctx, uint64_t epoch, float lr);
    void *schedule_ctx;
    FILE *verbose_out;
};

static int no_host_rate(uint64_t epoch, struct tpu_diag *d)
{
    return tpu__fail(d, TPU_EUNSUPPORTED, "LearningRateScheduler at epoch %llu: the model's "
                     "optimizer has no host-set learning rate; compile it with "
                     "optimizer.schedule TPU_SCHEDULE_HOST (the rate the scheduler sets "
                     "before each epoch)", (unsigned long long)epoch + 1);
}

static int lr_epoch_begin(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                          const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)logs;
    struct lr_scheduler *s = ctx;
    float lr;
    if (tpu_keras_get_learning_rate(m, &lr))
        return no_host_rate(epoch, d);
    lr = s->schedule(s->schedule_ctx, epoch, lr);
    if (!isfinite(lr))
        return tpu__fail(d, TPU_EINVAL, "LearningRateScheduler at epoch %llu: the schedule "
                         "returned %g, not a finite learning rate; make it return a number "
                         "such as 0.001", (unsigned long long)epoch + 1, (double)lr);
    int rc = tpu_keras_set_learning_rate(m, lr, d);
    if (rc)
        return rc;
    if (s->verbose_out) {
        char r[64];
        fprintf(s->verbose_out, "\nEpoch %llu: LearningRateScheduler setting learning rate to "
                "%s.\n", (unsigned long long)epoch + 1, tpu__py_repr(lr, true, r, sizeof r));
        fflush(s->verbose_out);
    }
    return 0;
}

static int lr_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)ctx;
    float lr;
    if (tpu_keras_get_learning_rate(m, &lr))
        return no_host_rate(epoch, d);
    if (!logs)
        return 0;
    int rc = tpu_logs_set(logs, "lr", (double)lr);
    if (rc)
        return tpu__fail(d, rc, "LearningRateScheduler at epoch %llu: the epoch's logs are "
                         "full (%d entries), no room for \"lr\"; compile fewer metrics",
                         (unsigned long long)epoch + 1, TPU_LOGS_MAX);
    return 0;
}

int tpu_callback_lr_scheduler(float (*schedule)(void *ctx, uint64_t epoch, float lr),
                              void *schedule_ctx, FILE *verbose_out, struct tpu_callback *cb,
                              struct tpu_diag *d)
{
    if (!cb)
        return tpu__fail(d, TPU_EINVAL, "LearningRateScheduler: no callback to fill (cb is "
                         "NULL)");
    memset(cb, 0, sizeof *cb);
    if (!schedule)
        return tpu__fail(d, TPU_EINVAL, "LearningRateScheduler: schedule is NULL; give a "
                         "function (ctx, epoch, lr) -> the epoch's learning rate");
    struct lr_scheduler *s = calloc(1, sizeof *s);
    if (!s)
        return tpu__fail(d, TPU_ENOMEM, "LearningRateScheduler: out of memory");
    s->schedule = schedule;
    s->schedule_ctx = schedule_ctx;
    s->verbose_out = verbose_out;
    *cb = (struct tpu_callback){
        .ctx = s,
        .on_epoch_begin = lr_epoch_begin,
        .on_epoch_end = lr_epoch_end,
        .destroy = free,
    };
    return 0;
}
