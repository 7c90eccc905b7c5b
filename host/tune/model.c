/* tpusim's own loop-size tuner (TPU_TUNER_MODEL, include/tpusim/tune.h).
 *
 * A launch of n steps takes, on the simulated timeline, F + n s: a fixed cost F (the host's
 * launch, hooks and logging, c, plus the device's fixed part of a launch, a: filling the
 * pipeline, waiting for the first infeed) and n step times s. Its host-overhead share is
 * F / (F + n s), which falls as n grows, so the smallest n whose share is at most the target t
 * is
 *     n* = ceil(F (1 - t) / (t s))
 * and any larger n gains less than t of throughput while making checkpoints, log lines and
 * error detection coarser. With a cadence K (the steps between checkpoints or log lines), n
 * is at most K: n* when n* <= K, else K (the cadence binds: the target is not reached, and
 * tpu_tuner_model_estimate says so). n need not divide K: TPUEstimator's checkpoints and log
 * lines fire at the first loop boundary at least K steps after the last, so loops of at
 * most K steps keep them within a loop of K.
 *
 * Estimates, from a window of the last 8 launches (steps n_i, device time d_i, host time h_i):
 *   c    = the median of h_i (a checkpoint's host time in one launch is not a per-launch cost)
 *   a, s = least squares d_i = a + s n_i when the window holds two sizes or more (a >= 0; a
 *          negative intercept or slope falls back to a = 0, s = sum d / sum n); with one size,
 *          s = (mean d - a) / n keeping the a known (0 at first).
 * The first launch runs the starting size, which gives s with a = 0; the second runs the n*
 * that implies, and from then on the fit has two sizes. A size grows at most 64-fold from one
 * launch to the next: the first launches can make the step time look shorter than it is (their
 * steps find the infeed queue filled ahead, where later ones wait for the input pipeline),
 * and a second launch of all the steps left would leave nothing to correct it with. Once there
 * is a fit over two sizes, a launch
 * whose device time is off the fit's prediction by more than drift_threshold (relative)
 * means the step time changed: the window restarts from that launch, keeping a. The size
 * moves when the new n* is more than 10 % away from the current one (measured host times
 * jitter; a launch's size does not need to follow every jitter). */
#include <math.h>
#include <string.h>

#include "tune_int.h"

void tpu__model_init(struct tpu_tuner *t)
{
    memset(&t->u.model, 0, sizeof t->u.model);
}

static double median_host(const struct tpu__model *m)
{
    double v[TPU__MODEL_WINDOW];
    uint32_t n = m->count;
    memcpy(v, m->host, n * sizeof *v);
    for (uint32_t i = 1; i < n; i++) /* insertion sort of at most 8 */
        for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* a and s from the window (see the file's comment) */
static void fit(struct tpu__model *m)
{
    const uint32_t n = m->count;
    double sn = 0, sd = 0;
    bool two_sizes = false;
    for (uint32_t i = 0; i < n; i++) {
        sn += (double)m->n[i];
        sd += m->dev[i];
        two_sizes |= m->n[i] != m->n[0];
    }
    if (two_sizes) {
        double mn = sn / n, md = sd / n, sxx = 0, sxy = 0;
        for (uint32_t i = 0; i < n; i++) {
            sxx += ((double)m->n[i] - mn) * ((double)m->n[i] - mn);
            sxy += ((double)m->n[i] - mn) * (m->dev[i] - md);
        }
        double b = sxy / sxx, a = md - b * mn;
        if (b > 0 && a >= 0) {
            m->a = a;
            m->b = b;
        } else {
            m->a = 0;
            m->b = sd / sn;
        }
        m->have_fit = true;
        return;
    }
    double b = (sd / n - m->a) / (double)m->n[0];
    if (b > 0) {
        m->b = b;
    } else {
        m->a = 0;
        m->b = sd / sn;
    }
}

/* n* under the cadence and max_steps */
static uint64_t choose(struct tpu_tuner *t)
{
    struct tpu__model *m = &t->u.model;
    const double target = t->s.target_overhead, fixed = m->a + m->c;
    double x = fixed * (1 - target) / (target * m->b);
    uint64_t want = !(x > 1) ? 1 : x >= (double)t->s.max_steps ? t->s.max_steps
                                                                 : (uint64_t)ceil(x);
    const uint64_t k = t->s.cadence_steps;
    m->cadence_bound = k && want > k;
    return m->cadence_bound ? k : want;
}

void tpu__model_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s)
{
    struct tpu__model *m = &t->u.model;
    if (steps == 0 || device_s <= 0)
        return;
    bool drift = false;
    if (m->have_fit) {
        double predicted = m->a + m->b * (double)steps;
        drift = fabs(device_s - predicted) > t->s.drift_threshold * predicted;
    }
    if (drift)
        m->count = 0; /* the step time changed: start the window again, keep a */
    if (m->count == TPU__MODEL_WINDOW) {
        memmove(m->n, m->n + 1, (TPU__MODEL_WINDOW - 1) * sizeof *m->n);
        memmove(m->dev, m->dev + 1, (TPU__MODEL_WINDOW - 1) * sizeof *m->dev);
        memmove(m->host, m->host + 1, (TPU__MODEL_WINDOW - 1) * sizeof *m->host);
        m->count--;
    }
    m->n[m->count] = steps;
    m->dev[m->count] = device_s;
    m->host[m->count] = host_s;
    m->count++;
    fit(m);
    m->c = median_host(m);
    m->have_estimate = true;
    uint64_t next = choose(t);
    if (next > t->spe * 64)
        next = t->spe * 64;
    /* a change of at most 10 % is jitter, unless the cadence needs the new size */
    double cur = (double)t->spe;
    bool small = fabs((double)next - cur) <= 0.1 * cur;
    bool cadence_ok = !t->s.cadence_steps || t->spe <= t->s.cadence_steps;
    if (!(small && cadence_ok))
        t->spe = next;
}
