/* Keras 2.15's StepsPerExecutionTuner (keras/utils/steps_per_execution_tuning.py) on the
 * simulated timeline. Keras runs a thread that wakes every `interval` seconds of wall time and
 * calls _measure_and_tune; here the same calls happen at the same instants of simulated time:
 * start() makes one at once, then one every `interval` seconds, each seeing the step counter
 * (optimizer.iterations) as the launches that had ended on the device by then left it. They are
 * made when tpu_tuner_observe learns of the launch that covers their instant, so a decision
 * taken during a launch applies to the next one, as Keras's does.
 *
 *   _measure_and_tune at time now, step counter it:
 *     measurement_count += 1
 *     rgsps += (it - last_iteration) / (now - last_time)     (0 when no time passed)
 *     keep the last change_spe_interval of rgsps
 *     if it == 0: return                                     (nothing ran yet)
 *     last_iteration, last_time = it, now
 *     if measurement_count % change_spe_interval == 0 and rgsps[-1] != 0: _tune
 *   _tune:
 *     avg = mean(rgsps)
 *     (repeat, opposite) = (1.5, 0.5) if the last action added, else (0.5, 1.5)
 *     avg > (1 + change_threshold) * prev_avg: spe *= repeat
 *     avg < (1 - change_threshold) * prev_avg: spe *= opposite, and the last action flips
 *     otherwise spe stays; a spe at the limit (max_steps / 1.5) stays
 *     spe = round(spe) (half to even), prev_avg = avg
 *
 * Not kept from Keras: its stop event is never cleared, so after stop() a start() starts a
 * thread that ends at once and never tunes again; here start() after stop() tunes. And
 * round(1 * 0.5) is 0 in Keras (a launch of no steps until the next tuning puts init_spe
 * back); here the smallest size is 1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune_int.h"

int tpu__keras_init(struct tpu_tuner *t)
{
    t->u.keras.rgsps = calloc(t->s.change_spe_interval, sizeof *t->u.keras.rgsps);
    return t->u.keras.rgsps ? 0 : -1;
}

void tpu__keras_free(struct tpu_tuner *t)
{
    free(t->u.keras.rgsps);
    t->u.keras.rgsps = NULL;
}

int tpu__keras_resize(struct tpu_tuner *t, uint32_t change_spe_interval)
{
    struct tpu__keras *k = &t->u.keras;
    double *r = calloc(change_spe_interval, sizeof *r);
    if (!r)
        return -1;
    /* keep the newest measurements that fit */
    uint32_t keep = k->n_rgsps < change_spe_interval ? k->n_rgsps : change_spe_interval;
    memcpy(r, k->rgsps + (k->n_rgsps - keep), keep * sizeof *r);
    free(k->rgsps);
    k->rgsps = r;
    k->n_rgsps = keep;
    return 0;
}

/* _begin_tuning, and the thread's first call at once */
void tpu__keras_start(struct tpu_tuner *t)
{
    struct tpu__keras *k = &t->u.keras;
    k->init_spe = t->spe;
    k->last_iteration = k->iterations;
    k->last_time = k->now_s;
    k->n_rgsps = 0;
    k->avg_rgsps = k->prev_avg_rgsps = 0;
    k->last_action_add = true;
    k->measurement_count = 0;
    k->tick_origin_s = k->now_s;
    k->next_tick = 0;
}

/* The setter of the steps_per_execution attribute: also the size to return to. */
void tpu__keras_set(struct tpu_tuner *t, uint64_t steps)
{
    t->u.keras.init_spe = steps;
}

static void tune(struct tpu_tuner *t)
{
    struct tpu__keras *k = &t->u.keras;
    double sum = 0;
    for (uint32_t i = 0; i < k->n_rgsps; i++)
        sum += k->rgsps[i];
    k->avg_rgsps = sum / k->n_rgsps;
    double fast = (1 + t->s.change_threshold) * k->prev_avg_rgsps;
    double slow = (1 - t->s.change_threshold) * k->prev_avg_rgsps;
    double repeat = k->last_action_add ? 1.5 : 0.5;
    double opposite = k->last_action_add ? 0.5 : 1.5;
    double cur = (double)t->spe, next = cur;
    if (k->avg_rgsps > fast) {
        next = cur * repeat;
    } else if (k->avg_rgsps < slow) {
        next = cur * opposite;
        k->last_action_add = !k->last_action_add;
    }
    if (cur >= (double)t->s.max_steps / 1.5)
        next = cur;
    t->spe = tpu__tune_round_even(next, t->s.max_steps);
    k->prev_avg_rgsps = k->avg_rgsps;
}

static void measure_and_tune(struct tpu_tuner *t, double now, uint64_t it)
{
    struct tpu__keras *k = &t->u.keras;
    const uint32_t cap = t->s.change_spe_interval;
    k->measurement_count++;
    double dt = now - k->last_time;
    double gsps = dt > 0 ? (double)(it - k->last_iteration) / dt : 0;
    if (k->n_rgsps == cap) {
        memmove(k->rgsps, k->rgsps + 1, (cap - 1) * sizeof *k->rgsps);
        k->n_rgsps--;
    }
    k->rgsps[k->n_rgsps++] = gsps;
    if (it == 0)
        return;
    k->last_iteration = it;
    k->last_time = now;
    if (k->measurement_count % cap == 0 && k->rgsps[k->n_rgsps - 1] != 0)
        tune(t);
}

static double tick_time(const struct tpu_tuner *t, uint64_t j)
{
    return t->u.keras.tick_origin_s + (double)j * t->s.interval;
}

/* The last tick j >= first that is before `end` (strictly, or up to it when `inclusive`); first
 * itself must be. */
static uint64_t last_tick_before(const struct tpu_tuner *t, uint64_t first, double end,
                                 bool inclusive)
{
    double q = floor((end - t->u.keras.tick_origin_s) / t->s.interval);
    uint64_t j = q > (double)first ? (uint64_t)q : first;
    /* the division may be off by one either way: settle it with tick_time itself */
    while (j > first && (inclusive ? tick_time(t, j) > end : tick_time(t, j) >= end))
        j--;
    while (inclusive ? tick_time(t, j + 1) <= end : tick_time(t, j + 1) < end)
        j++;
    return j;
}

void tpu__keras_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s)
{
    struct tpu__keras *k = &t->u.keras;
    const double dev_end = k->now_s + device_s, end = dev_end + host_s;
    const uint32_t cap = t->s.change_spe_interval;
    while (t->running && tick_time(t, k->next_tick) <= end) {
        /* the counter moves when the launch's device time ends */
        bool after = tick_time(t, k->next_tick) >= dev_end;
        uint64_t it = k->iterations + (after ? steps : 0);
        if (it == k->last_iteration) {
            /* measurements that see no new step add a 0 each and cannot tune; past the
             * last `cap` of this stretch, only their count matters */
            uint64_t last = last_tick_before(t, k->next_tick, after ? end : dev_end, after);
            uint64_t m = last - k->next_tick + 1;
            if (m > cap) {
                k->measurement_count += m - cap;
                k->next_tick += m - cap;
            }
        }
        measure_and_tune(t, tick_time(t, k->next_tick), it);
        k->next_tick++;
    }
    k->iterations += steps;
    k->now_s = end;
}
