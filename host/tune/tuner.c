/* The loop-size tuner object (include/tpusim/tune.h): settings, their checks, the life cycle
 * (create, start, stop, destroy) and the steps per execution, shared by the three kinds; each
 * kind's algorithm is in its own file (model.c, keras.c, iteration_count.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune_int.h"
#include "util.h"

static const char *const kind_names[] = {"model", "keras", "time"};

const char *tpu_tuner_kind_name(enum tpu_tuner_kind kind)
{
    return (unsigned)kind <= TPU_TUNER_TIME ? kind_names[kind] : NULL;
}

int tpu_tuner_kind_parse(const char *text, enum tpu_tuner_kind *out, struct tpu_diag *d)
{
    for (int i = 0; i <= TPU_TUNER_TIME; i++)
        if (text && !strcmp(text, kind_names[i])) {
            *out = (enum tpu_tuner_kind)i;
            return 0;
        }
    return tpu__fail(d, TPU_EINVAL, "tuner '%s' is not one of model, keras, time; e.g. model "
                     "(tpusim's own), keras (Keras's StepsPerExecutionTuner)",
                     text ? text : "");
}

void tpu_tuner_default_settings(struct tpu_tuner_settings *s, enum tpu_tuner_kind kind)
{
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->initial_steps = 1;
    s->max_steps = TPU_TUNER_MAX_STEPS;
    s->interval = 5;
    s->change_spe_interval = 10;
    s->change_threshold = 0.1;
    s->target_overhead = 0.02;
    s->drift_threshold = 0.1;
    s->capacity = 20;
}

int tpu_tuner_check_settings(const struct tpu_tuner_settings *s, struct tpu_diag *d)
{
    if (!s)
        return tpu__fail(d, TPU_EINVAL, "no tuner settings; fill them with "
                         "tpu_tuner_default_settings first");
    if ((unsigned)s->kind > TPU_TUNER_TIME)
        return tpu__fail(d, TPU_EINVAL, "tuner kind %d is not one of TPU_TUNER_MODEL, "
                         "TPU_TUNER_KERAS, TPU_TUNER_TIME", (int)s->kind);
    if (s->max_steps < 1 || s->max_steps > TPU_TUNER_MAX_STEPS)
        return tpu__fail(d, TPU_EINVAL, "tuner max_steps %llu must be from 1 to %llu, e.g. "
                         "%llu (the default)", (unsigned long long)s->max_steps,
                         (unsigned long long)TPU_TUNER_MAX_STEPS,
                         (unsigned long long)TPU_TUNER_MAX_STEPS);
    if (s->initial_steps < 1 || s->initial_steps > s->max_steps)
        return tpu__fail(d, TPU_EINVAL, "tuner initial_steps %llu must be from 1 to max_steps "
                         "(%llu); e.g. 1, as Keras starts", (unsigned long long)s->initial_steps,
                         (unsigned long long)s->max_steps);
    switch (s->kind) {
    case TPU_TUNER_KERAS:
        if (!(s->interval >= 1e-6 && s->interval <= 86400))
            return tpu__fail(d, TPU_EINVAL, "tuner interval %g s must be from 0.000001 (a "
                             "microsecond) to 86400 (a day) of simulated time; e.g. 5, Keras's "
                             "default", s->interval);
        if (s->change_spe_interval < 1 || s->change_spe_interval > 1000000)
            return tpu__fail(d, TPU_EINVAL, "tuner change_spe_interval %u must be from 1 to "
                             "1000000 measurements; e.g. 10, Keras's default",
                             (unsigned)s->change_spe_interval);
        if (!(s->change_threshold >= 0 && s->change_threshold <= 1))
            return tpu__fail(d, TPU_EINVAL, "tuner change_threshold %g must be from 0 to 1 (a "
                             "share of the throughput); e.g. 0.1, Keras's default",
                             s->change_threshold);
        break;
    case TPU_TUNER_MODEL:
        if (!(s->target_overhead > 0 && s->target_overhead < 1))
            return tpu__fail(d, TPU_EINVAL, "tuner target_overhead %g must be above 0 and below "
                             "1 (a share of the loop's time); e.g. 0.02 for 2 %%",
                             s->target_overhead);
        if (!(s->drift_threshold > 0 && s->drift_threshold <= 10))
            return tpu__fail(d, TPU_EINVAL, "tuner drift_threshold %g must be above 0 and at "
                             "most 10 (a relative error of the device time); e.g. 0.1",
                             s->drift_threshold);
        if (s->cadence_steps > TPU_TUNER_MAX_STEPS)
            return tpu__fail(d, TPU_EINVAL, "tuner cadence_steps %llu is more than %llu; use 0 "
                             "(none) or the steps between checkpoints or log lines, e.g. 1000",
                             (unsigned long long)s->cadence_steps,
                             (unsigned long long)TPU_TUNER_MAX_STEPS);
        break;
    case TPU_TUNER_TIME:
        if (!(s->target_s > 0 && s->target_s <= 86400))
            return tpu__fail(d, TPU_EINVAL, "tuner target_s %g must be above 0 and at most 86400 "
                             "(24 hours) of simulated time per launch; e.g. 30", s->target_s);
        if (s->capacity < 1 || s->capacity > 1000000)
            return tpu__fail(d, TPU_EINVAL, "tuner capacity %u must be from 1 to 1000000 "
                             "launches; e.g. 20, TPUEstimator's", (unsigned)s->capacity);
        break;
    }
    return 0;
}

int tpu_tuner_create(const struct tpu_tuner_settings *s, struct tpu_tuner **out,
                     struct tpu_diag *d)
{
    *out = NULL;
    int rc = tpu_tuner_check_settings(s, d);
    if (rc)
        return rc;
    struct tpu_tuner *t = calloc(1, sizeof *t);
    if (!t)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for a tuner");
    t->s = *s;
    t->spe = s->initial_steps;
    switch (s->kind) {
    case TPU_TUNER_TIME:
        rc = tpu__ice_init(t);
        break;
    case TPU_TUNER_KERAS:
        rc = tpu__keras_init(t);
        break;
    case TPU_TUNER_MODEL:
        tpu__model_init(t);
        break;
    }
    if (rc) {
        free(t);
        return tpu__fail(d, TPU_ENOMEM, "out of memory for a tuner's window");
    }
    *out = t;
    return 0;
}

void tpu_tuner_destroy(struct tpu_tuner **t)
{
    if (!t || !*t)
        return;
    if ((*t)->s.kind == TPU_TUNER_TIME)
        tpu__ice_free(*t);
    else if ((*t)->s.kind == TPU_TUNER_KERAS)
        tpu__keras_free(*t);
    free(*t);
    *t = NULL;
}

void tpu_tuner_start(struct tpu_tuner *t)
{
    if (t->running)
        return;
    t->running = true;
    if (t->s.kind == TPU_TUNER_TIME)
        tpu__ice_start(t);
    else if (t->s.kind == TPU_TUNER_KERAS)
        tpu__keras_start(t);
}

void tpu_tuner_stop(struct tpu_tuner *t)
{
    t->running = false;
}

bool tpu_tuner_running(const struct tpu_tuner *t)
{
    return t->running;
}

int tpu_tuner_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s,
                      struct tpu_diag *d)
{
    if (!(device_s >= 0 && isfinite(device_s)) || !(host_s >= 0 && isfinite(host_s)))
        return tpu__fail(d, TPU_EINVAL, "a launch of %g s device time and %g s host time: both "
                         "must be finite and at least 0 (seconds)", device_s, host_s);
    switch (t->s.kind) {
    case TPU_TUNER_KERAS:
        /* its clock and step counter run even when stopped, as time and optimizer.iterations
         * do for Keras's tuner */
        tpu__keras_observe(t, steps, device_s, host_s);
        break;
    case TPU_TUNER_TIME:
        if (t->running)
            tpu__ice_observe(t, steps, device_s);
        break;
    case TPU_TUNER_MODEL:
        if (t->running)
            tpu__model_observe(t, steps, device_s, host_s);
        break;
    }
    return 0;
}

uint64_t tpu_tuner_steps_per_execution(const struct tpu_tuner *t)
{
    return t->spe;
}

int tpu_tuner_set_steps_per_execution(struct tpu_tuner *t, uint64_t steps, struct tpu_diag *d)
{
    if (steps < 1 || steps > t->s.max_steps)
        return tpu__fail(d, TPU_EINVAL, "steps_per_execution %llu must be from 1 to the tuner's "
                         "max_steps %llu", (unsigned long long)steps,
                         (unsigned long long)t->s.max_steps);
    t->spe = steps;
    if (t->s.kind == TPU_TUNER_KERAS)
        tpu__keras_set(t, steps);
    else if (t->s.kind == TPU_TUNER_TIME)
        tpu__ice_set(t, steps);
    return 0;
}

void tpu_tuner_get_settings(const struct tpu_tuner *t, struct tpu_tuner_settings *out)
{
    *out = t->s;
}

int tpu_tuner_set_keras(struct tpu_tuner *t, double interval, uint32_t change_spe_interval,
                        double change_threshold, struct tpu_diag *d)
{
    if (t->s.kind != TPU_TUNER_KERAS)
        return tpu__fail(d, TPU_EINVAL, "interval, change_spe_interval and change_threshold "
                         "are the keras tuner's; this tuner is '%s'",
                         tpu_tuner_kind_name(t->s.kind));
    struct tpu_tuner_settings s = t->s;
    s.interval = interval;
    s.change_spe_interval = change_spe_interval;
    s.change_threshold = change_threshold;
    int rc = tpu_tuner_check_settings(&s, d);
    if (rc)
        return rc;
    if (tpu__keras_resize(t, change_spe_interval))
        return tpu__fail(d, TPU_ENOMEM, "out of memory for %u measurements",
                         (unsigned)change_spe_interval);
    /* the measurements go on from the last one at the new interval */
    struct tpu__keras *k = &t->u.keras;
    if (k->next_tick > 0) {
        k->tick_origin_s += (double)(k->next_tick - 1) * t->s.interval;
        k->next_tick = 1;
    }
    t->s = s;
    return 0;
}

bool tpu_tuner_model_estimate(const struct tpu_tuner *t, double *fixed_s, double *step_s,
                              bool *cadence_bound)
{
    if (t->s.kind != TPU_TUNER_MODEL || !t->u.model.have_estimate)
        return false;
    if (fixed_s)
        *fixed_s = t->u.model.a + t->u.model.c;
    if (step_s)
        *step_s = t->u.model.b;
    if (cadence_bound)
        *cadence_bound = t->u.model.cadence_bound;
    return true;
}

uint64_t tpu__tune_round_even(double x, uint64_t max)
{
    if (!(x >= 1)) /* also NaN */
        return 1;
    if (x >= (double)max)
        return max;
    double f = floor(x), r = x - f;
    uint64_t n = (uint64_t)f;
    if (r > 0.5 || (r == 0.5 && (n & 1)))
        n++;
    return n < 1 ? 1 : n > max ? max : n;
}
