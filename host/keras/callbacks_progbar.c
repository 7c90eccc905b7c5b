/* The progress bar (keras.h's tpu_callback_progbar): Keras 2.15's ProgbarLogger with
 * count_mode "steps" and its Progbar, line for line, with one change: time is the simulated
 * clock (tpu_keras_model_seconds), so ETAs, step times and epoch times are the chip's and the
 * modeled host's, and the output of a run is the same every time.
 *
 * States: a bar exists from on_epoch_begin (or on_test_begin outside fit, on_predict_begin)
 * to the matching end hook, which finalizes it (the last line, with "\n"). Inside fit the
 * validation's test hooks draw nothing (Keras's _called_in_fit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "util.h"

#define BAR_WIDTH 30
#define UPDATE_INTERVAL_S 0.05 /* Keras's Progbar interval (here simulated seconds) */

struct progbar {
    FILE *out;
    int verbose;
    bool dynamic; /* a terminal: rewrite the line in place */
    uint64_t epochs;
    uint64_t steps; /* the target; 0 unknown */
    bool called_in_fit;

    /* the current bar */
    bool active;
    uint64_t target; /* 0: unknown */
    uint64_t seen;
    double start_s, last_update_s, after_first_step_s;
    bool have_first_step;
    size_t total_width;
    struct tpu_logs values; /* each name's latest value, in first-seen order */
};

static double clock_s(struct tpu_keras_model *m)
{
    return m ? tpu_keras_model_seconds(m) : 0.0;
}

static void reset_bar(struct progbar *p, struct tpu_keras_model *m)
{
    p->active = true;
    p->target = p->steps;
    p->seen = 0;
    p->start_s = clock_s(m);
    p->last_update_s = -INFINITY;
    p->have_first_step = false;
    p->total_width = 0;
    memset(&p->values, 0, sizeof p->values);
}

static void set_value(struct tpu_logs *v, const char *name, double value)
{
    int i = tpu__logs_find(v, name);
    if (i < 0) {
        if (v->n >= TPU_LOGS_MAX)
            return;
        i = (int)v->n++;
        snprintf(v->name[i], sizeof v->name[i], "%s", name);
    }
    v->value[i] = value;
}

static unsigned n_digits(uint64_t x)
{
    unsigned n = 1;
    while (x >= 10) {
        x /= 10;
        n++;
    }
    return n;
}

/* Keras's _format_time: " 59ms/step". */
static void format_time(double t, const char *unit, char *buf, size_t n)
{
    if (t >= 1 || t == 0)
        snprintf(buf, n, " %.0fs/%s", t, unit);
    else if (t >= 1e-3)
        snprintf(buf, n, " %.0fms/%s", t * 1e3, unit);
    else
        snprintf(buf, n, " %.0fus/%s", t * 1e6, unit);
}

/* Keras's _estimate_step_duration. */
static double step_duration(struct progbar *p, uint64_t current, double now)
{
    if (!current)
        return 0;
    double t;
    if (p->have_first_step && current > 1)
        t = (now - p->after_first_step_s) / (double)(current - 1);
    else
        t = (now - p->start_s) / (double)current;
    if (current == 1) {
        p->after_first_step_s = now;
        p->have_first_step = true;
    }
    return t;
}

/* " - loss: 0.5123 - accuracy: 0.8125" */
static void append_values(const struct progbar *p, char *info, size_t cap)
{
    for (uint32_t k = 0; k < p->values.n; k++) {
        size_t o = strlen(info);
        double v = p->values.value[k];
        if (fabs(v) > 1e-3)
            snprintf(info + o, cap - o, " - %s: %.4f", p->values.name[k], v);
        else if (isnan(v))
            snprintf(info + o, cap - o, " - %s: nan", p->values.name[k]);
        else
            snprintf(info + o, cap - o, " - %s: %.4e", p->values.name[k], v);
    }
}

/* Keras's Progbar.update(current, values, finalize). */
static void update(struct progbar *p, struct tpu_keras_model *m, uint64_t current,
                   const struct tpu_logs *logs, bool finalize)
{
    for (uint32_t k = 0; logs && k < logs->n && k < TPU_LOGS_MAX; k++)
        set_value(&p->values, logs->name[k], logs->value[k]);
    const double now = clock_s(m);
    char info[2048];
    if (p->verbose == 1) {
        if (now - p->last_update_s < UPDATE_INTERVAL_S && !finalize)
            return;
        const size_t prev_width = p->total_width;
        if (p->dynamic) {
            for (size_t i = 0; i < prev_width; i++)
                fputc('\b', p->out);
            fputc('\r', p->out);
        } else {
            fputc('\n', p->out);
        }
        char bar[128];
        if (p->target) {
            unsigned nd = n_digits(p->target);
            int o = snprintf(bar, sizeof bar, "%*llu/%llu [", (int)nd,
                             (unsigned long long)current, (unsigned long long)p->target);
            double prog = (double)current / (double)p->target;
            int w = (int)(BAR_WIDTH * prog);
            if (w > BAR_WIDTH)
                w = BAR_WIDTH;
            for (int i = 0; i < w - 1; i++)
                bar[o++] = '=';
            if (w > 0)
                bar[o++] = current < p->target ? '>' : '=';
            for (int i = w; i < BAR_WIDTH; i++)
                bar[o++] = '.';
            bar[o++] = ']';
            bar[o] = 0;
        } else {
            snprintf(bar, sizeof bar, "%7llu/Unknown", (unsigned long long)current);
        }
        p->total_width = strlen(bar);
        fputs(bar, p->out);
        double tpu = step_duration(p, current, now);
        if (!p->target || finalize) {
            char t[64];
            snprintf(info, sizeof info, " - %.0fs", now - p->start_s);
            format_time(tpu, "step", t, sizeof t);
            strcat(info, t);
        } else {
            double eta = tpu * (double)(p->target - current);
            if (eta > 3600)
                snprintf(info, sizeof info, " - ETA: %lld:%02lld:%02lld",
                         (long long)(eta / 3600), (long long)fmod(eta, 3600) / 60,
                         (long long)fmod(eta, 60));
            else if (eta > 60)
                snprintf(info, sizeof info, " - ETA: %lld:%02lld", (long long)(eta / 60),
                         (long long)fmod(eta, 60));
            else
                snprintf(info, sizeof info, " - ETA: %llds", (long long)eta);
        }
        append_values(p, info, sizeof info);
        p->total_width += strlen(info);
        fputs(info, p->out);
        for (size_t i = p->total_width; i < prev_width; i++)
            fputc(' ', p->out);
        if (finalize)
            fputc('\n', p->out);
    } else if (p->verbose == 2 && finalize) {
        const uint64_t target = p->target ? p->target : current;
        unsigned nd = n_digits(target);
        snprintf(info, sizeof info, "%*llu/%llu - %.0fs", (int)nd, (unsigned long long)current,
                 (unsigned long long)target, now - p->start_s);
        append_values(p, info, sizeof info);
        char t[64];
        double per_epoch = now - p->start_s;
        format_time(per_epoch, "epoch", t, sizeof t);
        size_t o = strlen(info);
        snprintf(info + o, sizeof info - o, " -%s", t);
        format_time(target ? per_epoch / (double)target : 0, "step", t, sizeof t);
        o = strlen(info);
        snprintf(info + o, sizeof info - o, " -%s\n", t);
        fputs(info, p->out);
    }
    fflush(p->out);
    p->last_update_s = now;
}

static void batch_update(struct progbar *p, struct tpu_keras_model *m, uint64_t batch,
                         const struct tpu_logs *logs)
{
    if (!p->active)
        reset_bar(p, m);
    p->seen = batch + 1;
    if (p->verbose == 1)
        update(p, m, p->seen, logs, false);
}

static void finalize(struct progbar *p, struct tpu_keras_model *m, const struct tpu_logs *logs)
{
    if (!p->active)
        reset_bar(p, m);
    if (!p->target)
        p->target = p->seen;
    update(p, m, p->target, logs, true);
    p->active = false;
}

static void pb_set_params(void *ctx, const struct tpu_keras_params *prm)
{
    struct progbar *p = ctx;
    p->epochs = prm->epochs;
    p->steps = prm->steps;
}

static int pb_train_begin(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                          struct tpu_diag *d)
{
    (void)m, (void)logs, (void)d;
    ((struct progbar *)ctx)->called_in_fit = true;
    return 0;
}

static int pb_train_end(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                        struct tpu_diag *d)
{
    (void)m, (void)logs, (void)d;
    ((struct progbar *)ctx)->called_in_fit = false;
    return 0;
}

static int pb_epoch_begin(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                          const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)logs, (void)d;
    struct progbar *p = ctx;
    reset_bar(p, m);
    if (p->verbose && p->epochs > 1) {
        fprintf(p->out, "Epoch %llu/%llu\n", (unsigned long long)epoch + 1,
                (unsigned long long)p->epochs);
        fflush(p->out);
    }
    return 0;
}

static int pb_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)epoch, (void)d;
    finalize(ctx, m, logs);
    return 0;
}

static int pb_train_batch_end(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                              const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)d;
    batch_update(ctx, m, batch, logs);
    return 0;
}

static int pb_test_begin(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                         struct tpu_diag *d)
{
    (void)logs, (void)d;
    struct progbar *p = ctx;
    if (!p->called_in_fit)
        reset_bar(p, m);
    return 0;
}

static int pb_test_batch_end(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                             const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)d;
    struct progbar *p = ctx;
    if (!p->called_in_fit)
        batch_update(p, m, batch, logs);
    return 0;
}

static int pb_test_end(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                       struct tpu_diag *d)
{
    (void)d;
    struct progbar *p = ctx;
    if (!p->called_in_fit)
        finalize(p, m, logs);
    return 0;
}

static int pb_predict_begin(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                            struct tpu_diag *d)
{
    (void)logs, (void)d;
    reset_bar(ctx, m);
    return 0;
}

static int pb_predict_batch_end(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                                const struct tpu_logs *logs, struct tpu_diag *d)
{
    (void)logs, (void)d;
    batch_update(ctx, m, batch, NULL);
    return 0;
}

static int pb_predict_end(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                          struct tpu_diag *d)
{
    (void)d;
    finalize(ctx, m, logs);
    return 0;
}

int tpu_callback_progbar(FILE *out, int verbose, bool is_tty, struct tpu_callback *cb,
                         struct tpu_diag *d)
{
    if (!cb)
        return tpu__fail(d, TPU_EINVAL, "ProgbarLogger: no callback to fill (cb is NULL)");
    memset(cb, 0, sizeof *cb);
    if (verbose < 0 || verbose > 2)
        return tpu__fail(d, TPU_EINVAL, "ProgbarLogger: verbose %d is not a Keras verbosity; "
                         "give 0 (silent), 1 (a progress bar) or 2 (one line per epoch)",
                         verbose);
    if (!out && verbose)
        return tpu__fail(d, TPU_EINVAL, "ProgbarLogger: verbose %d needs a stream to write to "
                         "(out is NULL); give one, or verbose 0", verbose);
    if (verbose == 0)
        return 0; /* prints nothing: every hook NULL */
    struct progbar *p = calloc(1, sizeof *p);
    if (!p)
        return tpu__fail(d, TPU_ENOMEM, "ProgbarLogger: out of memory");
    p->out = out;
    p->verbose = verbose;
    p->dynamic = is_tty && verbose == 1;
    p->epochs = 1;
    *cb = (struct tpu_callback){
        .ctx = p,
        .on_train_begin = pb_train_begin,
        .on_train_end = pb_train_end,
        .on_epoch_begin = pb_epoch_begin,
        .on_epoch_end = pb_epoch_end,
        .on_train_batch_end = pb_train_batch_end,
        .on_test_begin = pb_test_begin,
        .on_test_batch_end = pb_test_batch_end,
        .on_test_end = pb_test_end,
        .on_predict_begin = pb_predict_begin,
        .on_predict_batch_end = pb_predict_batch_end,
        .on_predict_end = pb_predict_end,
        .set_params = pb_set_params,
        .destroy = free,
    };
    return 0;
}
