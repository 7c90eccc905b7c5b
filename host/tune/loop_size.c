/* iterations_per_loop (tune_int.h): parsing the value as TPUEstimator does (a count, or a
 * time Ns, Nm, Nh), and sizing each launch of a pass from it. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "tune_int.h"
#include "util.h"

int tpu_run_config_set_ipl(struct tpu_run_config *c, const char *text, struct tpu_diag *d)
{
    /* ^[1-9][0-9]*[smh]?$, read digit by digit so that no range can overflow */
    const uint64_t max_count = UINT64_C(1000000000000), max_s = 86400;
    const char *p = text ? text : "";
    if (!strcmp(p, "auto")) {
        c->iterations_per_loop_auto = true;
        c->iterations_per_loop_s = 0;
        return 0;
    }
    uint64_t v = 0;
    bool too_big = false;
    if (*p < '1' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > max_count)
            too_big = true;
        else
            v = v * 10 + (uint64_t)(*p - '0');
    }
    uint64_t scale = 0;
    if (*p == '\0')
        scale = 0;
    else if (!strcmp(p, "s"))
        scale = 1;
    else if (!strcmp(p, "m"))
        scale = 60;
    else if (!strcmp(p, "h"))
        scale = 3600;
    else
        goto bad;
    if (scale == 0) {
        if (too_big || v > max_count)
            return tpu__fail(d, TPU_ERANGE, "iterations_per_loop '%s' is more than %llu steps "
                             "per launch; use 1 to %llu, e.g. iterations_per_loop 100", text,
                             (unsigned long long)max_count, (unsigned long long)max_count);
        c->iterations_per_loop = v;
        c->iterations_per_loop_s = 0;
        c->iterations_per_loop_auto = false;
        return 0;
    }
    if (too_big || v > max_s / scale)
        return tpu__fail(d, TPU_ERANGE, "iterations_per_loop '%s' is more than 24 hours of "
                         "simulated time per launch; use a time from 1s to 24h (86400s), "
                         "e.g. iterations_per_loop 30s", text);
    c->iterations_per_loop_s = (double)(v * scale);
    c->iterations_per_loop_auto = false;
    return 0;
bad:
    return tpu__fail(d, TPU_EINVAL,
                     "iterations_per_loop '%s' must match ^[1-9][0-9]*[smh]?$ (as in "
                     "TPUEstimator): a whole number of steps from 1 to %llu, or a whole number "
                     "followed by s, m or h for a time of simulated seconds, minutes or hours "
                     "(no leading zeros, signs, spaces, fractions or exponents), or auto for a "
                     "tuner's choice; e.g. 100 or 30s (or auto)",
                     text ? text : "", (unsigned long long)max_count);
}

/* The smaller of two cadences, 0 standing for none. */
static uint64_t min_cadence(uint64_t a, uint64_t b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

bool tpu__loop_size_tuner_settings(const struct tpu_run_config *cfg, enum tpu_mode mode,
                                   bool writes_checkpoints, struct tpu_tuner_settings *out)
{
    if (cfg->iterations_per_loop_auto) {
        *out = cfg->tuner;
        if (out->kind == TPU_TUNER_MODEL && mode == TPU_MODE_TRAIN) {
            /* TPUEstimator's cadences fire at the first loop boundary at least N steps after
             * the last: a loop no longer than the smallest active one keeps every cadence
             * within a loop of its N, whatever the loop's size divides */
            uint64_t k = out->cadence_steps;
            if (writes_checkpoints && cfg->model_dir[0])
                k = min_cadence(k, cfg->save_checkpoints_steps);
            k = min_cadence(k, cfg->log_step_count_steps);
            out->cadence_steps = k;
        }
        return true;
    }
    if (cfg->iterations_per_loop_s > 0) {
        tpu_tuner_default_settings(out, TPU_TUNER_TIME);
        out->target_s = cfg->iterations_per_loop_s;
        return true;
    }
    return false;
}

void tpu__loop_size_init(struct tpu__loop_size *ls, const struct tpu_run_config *cfg,
                         struct tpu_tuner *tuner)
{
    ls->steps = cfg->iterations_per_loop;
    ls->tuner = tuner;
    if (tuner)
        tpu_tuner_start(tuner);
}

uint64_t tpu__loop_size_next(const struct tpu__loop_size *ls, uint64_t remaining)
{
    uint64_t n = ls->tuner ? tpu_tuner_steps_per_execution(ls->tuner) : ls->steps;
    return remaining < n ? remaining : n;
}

void tpu__loop_size_observe(struct tpu__loop_size *ls, uint64_t steps, double device_s,
                            double host_s)
{
    if (ls->tuner) /* the times come from the timeline: finite and non-negative */
        tpu_tuner_observe(ls->tuner, steps, device_s, host_s, NULL);
}

void tpu__loop_size_end(struct tpu__loop_size *ls)
{
    if (ls->tuner)
        tpu_tuner_stop(ls->tuner);
}
