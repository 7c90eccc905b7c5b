/* TPUEstimator's IterationCountEstimator (tensorflow_estimator, tpu/iteration_count_estimator.py)
 * for iterations_per_loop "Ns": the loop size that makes a launch take a target time, from a
 * window of the last `capacity` launches. Step for step as TPUEstimator has it:
 *
 *   update(runtime, count): ignored unless both are positive; the oldest sample leaves a full
 *     window; the sample is (runtime, count, runtime / count); sample_count += 1.
 *   get(target): 1 while the window is empty. Otherwise
 *     projected = target / mean(step times)
 *     delta     = projected - last_iterations
 *     delta     = 0 when (|target - last runtime| / target <= 10 % or
 *                         |target - mean runtime| / target <= 5 %)
 *                   and std(step times) < 0.03 (seconds) and sample_count > capacity
 *     last_iterations = max(last_iterations + delta, 1)
 *     return int(last_iterations + 0.5)
 *   with NumPy's mean and population standard deviation over the window.
 *
 * TPUEstimator feeds each launch's wall time (session.run) and the count it asked for; here
 * the launch's time is its device time on the simulated timeline, and the count is the steps
 * that ran (the same number unless the input ended). The hook that owns the estimator is made
 * for every train call, so start() empties the window. */
#include <math.h>
#include <stdlib.h>

#include "tune_int.h"

int tpu__ice_init(struct tpu_tuner *t)
{
    t->u.ice.ring = calloc(t->s.capacity, sizeof *t->u.ice.ring);
    if (!t->u.ice.ring)
        return -1;
    tpu__ice_start(t);
    return 0;
}

void tpu__ice_free(struct tpu_tuner *t)
{
    free(t->u.ice.ring);
    t->u.ice.ring = NULL;
}

/* _reset: an empty window, last_iterations = min_iterations = 1; get() gives 1. */
void tpu__ice_start(struct tpu_tuner *t)
{
    struct tpu__ice *e = &t->u.ice;
    e->head = e->n = 0;
    e->sample_count = 0;
    e->last_iterations = 1;
    t->spe = 1;
}

static const struct tpu__ice_sample *sample(const struct tpu__ice *e, uint32_t cap, uint32_t i)
{
    return &e->ring[(e->head + i) % cap];
}

/* np.mean over axis 0 of the window's rows: a sum in order, over n */
static double mean_of(const struct tpu__ice *e, uint32_t cap, int field)
{
    double sum = 0;
    for (uint32_t i = 0; i < e->n; i++) {
        const struct tpu__ice_sample *x = sample(e, cap, i);
        sum += field == 0 ? x->runtime_s : x->step_time_s;
    }
    return sum / e->n;
}

/* np.std (ddof 0) of the step times: sqrt(mean(|x - mean(x)|^2)) */
static double std_step_time(const struct tpu__ice *e, uint32_t cap)
{
    double m = mean_of(e, cap, 1), sum = 0;
    for (uint32_t i = 0; i < e->n; i++) {
        double dx = sample(e, cap, i)->step_time_s - m;
        sum += dx * dx;
    }
    return sqrt(sum / e->n);
}

/* _diff_less_than_percentage(actual, target, percentage) */
static bool within(double actual, double target, double percentage)
{
    return fabs(target - actual) / target <= percentage * 0.01;
}

static uint64_t get(struct tpu_tuner *t)
{
    struct tpu__ice *e = &t->u.ice;
    const uint32_t cap = t->s.capacity;
    const double total = t->s.target_s;
    if (e->n == 0)
        return 1;
    double mean_runtime = mean_of(e, cap, 0);
    double mean_step = mean_of(e, cap, 1);
    double std_step = std_step_time(e, cap);
    double projected = total / mean_step;
    double last_runtime = sample(e, cap, e->n - 1)->runtime_s;
    double delta = projected - e->last_iterations;
    bool stable = std_step < 0.03 && e->sample_count > cap;
    if ((within(last_runtime, total, 10) || within(mean_runtime, total, 5)) && stable)
        delta = 0;
    e->last_iterations += delta;
    if (e->last_iterations < 1)
        e->last_iterations = 1;
    /* beyond TPUEstimator: no more than max_steps (and so never infinite, for a launch timed
     * at next to nothing) */
    if (!(e->last_iterations <= (double)t->s.max_steps))
        e->last_iterations = (double)t->s.max_steps;
    double r = floor(e->last_iterations + 0.5); /* int(x + 0.5) of a positive x */
    return r >= (double)t->s.max_steps ? t->s.max_steps : (uint64_t)r;
}

void tpu__ice_observe(struct tpu_tuner *t, uint64_t steps, double device_s)
{
    struct tpu__ice *e = &t->u.ice;
    const uint32_t cap = t->s.capacity;
    if (device_s <= 0 || steps == 0)
        return;
    if (e->n >= cap) { /* popleft */
        e->head = (e->head + 1) % cap;
        e->n--;
    }
    struct tpu__ice_sample *x = &e->ring[(e->head + e->n) % cap];
    x->runtime_s = device_s;
    x->steps = (double)steps;
    x->step_time_s = device_s / (double)steps;
    e->n++;
    e->sample_count++;
    t->spe = get(t);
}

/* No setter in TPUEstimator: the value set becomes the previous estimate the next get() moves
 * from (or holds). */
void tpu__ice_set(struct tpu_tuner *t, uint64_t steps)
{
    t->u.ice.last_iterations = (double)steps;
}
