/* Run configuration: defaults, parsing, and the batch arithmetic of the input modes, with
 * messages at least as precise as TPUEstimator's (the value, the rule, the fix). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime_int.h"

#include "tpusim/runtime.h"
#include "util.h"

void tpu_run_config_default(struct tpu_run_config *c)
{
    memset(c, 0, sizeof *c);
    c->iterations_per_loop = 100;
    c->num_cores_per_replica = 1;
    c->per_host_input_for_training = TPU_PER_HOST_V2;
    c->eval_training_input_configuration = TPU_EVAL_PER_HOST_V1;
    c->num_hosts = 1;
    c->keep_checkpoint_max = 5;
    c->log_step_count_steps = 100;
    c->host_time = TPU_HOST_TIME_MODELED;
    c->modeled_launch_us = 100;
    c->modeled_hooks_us = 500;
    c->modeled_checkpoint_us = 20000;
    c->modeled_input_us_per_batch = 50;
}

static const char *const mode_names[] = {"PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2",
                                         "BROADCAST"};

int tpu_input_mode_parse(const char *text, enum tpu_input_mode *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(text, mode_names[i])) {
            *out = (enum tpu_input_mode)i;
            return 0;
        }
    return TPU_EINVAL;
}

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

/* ---- host memory ------------------------------------------------------------------------- */

/* The first number after `key` in a text file (0 if absent), scaled by `unit`. */
static bool read_number(const char *path, const char *key, uint64_t unit, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    size_t kl = strlen(key);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl))
            continue;
        char *end;
        unsigned long long v = strtoull(line + kl, &end, 10);
        if (end != line + kl) {
            *out = (uint64_t)v * unit;
            found = true;
        }
    }
    fclose(f);
    return found;
}

static void consider(uint64_t *best, char *what, size_t what_size, uint64_t v, const char *name)
{
    if (v < *best) {
        *best = v;
        snprintf(what, what_size, "%s", name);
    }
}

int tpu__host_memory_available(uint64_t *bytes, char *what, size_t what_size)
{
    uint64_t best = UINT64_MAX, v, used;
    snprintf(what, what_size, "unknown");
    if (read_number("/proc/meminfo", "MemAvailable:", 1024, &v))
        consider(&best, what, what_size, v, "MemAvailable in /proc/meminfo");
    /* cgroup v2: this process's group, from /proc/self/cgroup ("0::/path") */
    char group[512] = "", path[700];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "0::", 3)) {
                snprintf(group, sizeof group, "%s", line + 3);
                group[strcspn(group, "\n")] = '\0';
            }
        fclose(f);
    }
    if (!strcmp(group, "/"))
        group[0] = '\0';
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", group);
    uint64_t limit;
    if (read_number(path, "", 1, &limit)) { /* "max" reads as no number: no limit */
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", group);
        if (read_number(path, "", 1, &used))
            consider(&best, what, what_size, limit > used ? limit - used : 0,
                     "the cgroup's memory.max less its memory.current");
    } else if (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", "", 1, &limit) &&
               limit < (UINT64_C(1) << 62) &&
               read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", "", 1, &used)) {
        consider(&best, what, what_size, limit > used ? limit - used : 0,
                 "the cgroup's memory limit less its usage");
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t pages = 0;
        long page = sysconf(_SC_PAGESIZE);
        if (read_number("/proc/self/statm", "", page > 0 ? (uint64_t)page : 4096, &pages)) {
            uint64_t lim = (uint64_t)rl.rlim_cur;
            consider(&best, what, what_size, lim > pages ? lim - pages : 0,
                     "RLIMIT_AS less the address space in use");
        }
    }
    *bytes = best;
    return best == UINT64_MAX ? TPU_ENOTFOUND : 0;
}

int tpu_per_replica_batch(const struct tpu_run_config *cfg, enum tpu_mode mode,
                          uint32_t n_replicas, uint32_t *per_replica, uint32_t *calls_per_step,
                          uint32_t *batch_per_call, struct tpu_diag *d)
{
    static const char *const field[] = {"train_batch_size", "eval_batch_size",
                                        "predict_batch_size"};
    const uint32_t global = mode == TPU_MODE_TRAIN  ? cfg->train_batch_size
                            : mode == TPU_MODE_EVAL ? cfg->eval_batch_size
                                                    : cfg->predict_batch_size;
    const uint32_t hosts = cfg->num_hosts ? cfg->num_hosts : 1;
    if (global == 0)
        return tpu__fail(d, TPU_EINVAL, "%s is not set; give the global batch size, a multiple "
                         "of the %u replicas", field[mode], n_replicas);
    if (n_replicas % hosts != 0)
        return tpu__fail(d, TPU_EINVAL, "%u replicas cannot be spread evenly over %u hosts",
                         n_replicas, hosts);
    const uint32_t per_host_replicas = n_replicas / hosts;
    if (global % n_replicas != 0) {
        /* the nearest multiples below and above; only the one above when none is below */
        uint64_t lo = (uint64_t)global / n_replicas * n_replicas, hi = lo + n_replicas;
        char fix[96];
        if (lo)
            snprintf(fix, sizeof fix, "use %llu or %llu", (unsigned long long)lo,
                     (unsigned long long)hi);
        else
            snprintf(fix, sizeof fix, "use at least %llu (one example per replica)",
                     (unsigned long long)hi);
        return tpu__fail(d, TPU_EINVAL,
                         "%s %u must be divisible by the number of replicas (num_shards) %u, "
                         "since each replica takes the same share of the global batch; %s",
                         field[mode], global, n_replicas, fix);
    }
    *per_replica = global / n_replicas;
    if (mode != TPU_MODE_TRAIN) {
        /* evaluation and prediction: one call per host, sliced across its replicas */
        *calls_per_step = hosts;
        *batch_per_call = global / hosts;
        return 0;
    }
    switch (cfg->per_host_input_for_training) {
    case TPU_PER_SHARD_V1:
        *calls_per_step = n_replicas;
        *batch_per_call = *per_replica;
        break;
    case TPU_PER_HOST_V1:
        if (global % hosts != 0)
            return tpu__fail(d, TPU_EINVAL, "train_batch_size %u must be divisible by the %u "
                             "hosts for PER_HOST_V1", global, hosts);
        *calls_per_step = hosts;
        *batch_per_call = global / hosts;
        break;
    case TPU_PER_HOST_V2:
        *calls_per_step = hosts * per_host_replicas;
        *batch_per_call = *per_replica;
        break;
    case TPU_BROADCAST:
        *calls_per_step = 1;
        *batch_per_call = *per_replica;
        break;
    default:
        return tpu__fail(d, TPU_EINVAL, "unknown per_host_input_for_training %d",
                         (int)cfg->per_host_input_for_training);
    }
    return 0;
}
