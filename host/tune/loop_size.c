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
        return 0;
    }
    if (too_big || v > max_s / scale)
        return tpu__fail(d, TPU_ERANGE, "iterations_per_loop '%s' is more than 24 hours of "
                         "simulated time per launch; use a time from 1s to 24h (86400s), "
                         "e.g. iterations_per_loop 30s", text);
    c->iterations_per_loop_s = (double)(v * scale);
    return 0;
bad:
    return tpu__fail(d, TPU_EINVAL,
                     "iterations_per_loop '%s' must match ^[1-9][0-9]*[smh]?$ (as in "
                     "TPUEstimator): a whole number of steps from 1 to %llu, or a whole number "
                     "followed by s, m or h for a time of simulated seconds, minutes or hours "
                     "(no leading zeros, signs, spaces, fractions or exponents); e.g. 100 or 30s",
                     text ? text : "", (unsigned long long)max_count);
}

void tpu__loop_size_init(struct tpu__loop_size *ls, const struct tpu_run_config *cfg)
{
    ls->target_s = cfg->iterations_per_loop_s;
    ls->steps = cfg->iterations_per_loop_s > 0 ? 1 : cfg->iterations_per_loop;
}

uint64_t tpu__loop_size_next(const struct tpu__loop_size *ls, uint64_t remaining)
{
    return remaining < ls->steps ? remaining : ls->steps;
}

void tpu__loop_size_observe(struct tpu__loop_size *ls, double step_time_s)
{
    if (ls->target_s > 0 && step_time_s > 0) {
        double want = floor(ls->target_s / step_time_s);
        ls->steps = want < 1 ? 1 : want > 1e12 ? (uint64_t)1e12 : (uint64_t)want;
    }
}
