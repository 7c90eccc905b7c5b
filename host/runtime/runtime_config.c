/* Run configuration: defaults, the input modes' names, and the host memory this process can
 * still allocate. The batch arithmetic of the input modes is in shard/, the parsing and
 * sizing of iterations_per_loop in tune/. */
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
    tpu_tuner_default_settings(&c->tuner, TPU_TUNER_MODEL);
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
