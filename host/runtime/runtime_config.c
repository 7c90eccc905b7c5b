/* Run configuration: defaults, the input modes' names, the checks of a configuration against
 * the device (tpu_estimator_create's and tpu_estimator_reconfigure's), what reconfigure may
 * change, and the host memory this process can still allocate. The batch arithmetic of the
 * input modes is in shard/, the parsing and sizing of iterations_per_loop in tune/. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime_int.h"
#include "tune/tune_int.h"

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

const char *const tpu__input_mode_names[4] = {"PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2",
                                              "BROADCAST"};
const char *const tpu__eval_input_names[2] = {"PER_HOST_V1", "SLICED"};

int tpu_input_mode_parse(const char *text, enum tpu_input_mode *out)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(text, tpu__input_mode_names[i])) {
            *out = (enum tpu_input_mode)i;
            return 0;
        }
    return TPU_EINVAL;
}

/* ---- checks ------------------------------------------------------------------------------ */

int tpu__run_config_check(const struct tpu_run_config *c, const struct tpu_device *dev,
                          struct tpu_diag *d)
{
    /* a host group: the device is one host's part of the pod, and the checks below are the
     * pod's (its cores and replicas are every part's) */
    uint32_t parts;
    int prc = tpu__pod_check_config(c, dev, &parts, d);
    if (prc)
        return prc;
    const uint32_t cores = tpu_device_n_cores(dev) * parts, cpr = c->num_cores_per_replica;
    const uint32_t replicas = tpu_device_n_replicas(dev) * parts;
    if (cpr < 1 || cpr > 128 || (cpr & (cpr - 1)))
        return tpu__fail(d, TPU_EINVAL, "num_cores_per_replica %u must be a power of two from 1 "
                         "to 128", cpr);
    if (cpr != cores / replicas)
        return tpu__fail(d, TPU_EINVAL, "num_cores_per_replica %u differs from the device's %u; "
                         "open the device with cores_per_replica %u",
                         cpr, cores / replicas, cpr);
    if (c->num_shards && c->num_shards != replicas)
        return tpu__fail(d, TPU_EINVAL,
                         "num_shards %u does not match the %u replicas of this device (%u cores "
                         "/ %u cores per replica); set num_shards to %u or leave it 0",
                         c->num_shards, replicas, cores, cpr, replicas);
    if (c->iterations_per_loop_auto) {
        if (c->tuner.kind != TPU_TUNER_MODEL && c->tuner.kind != TPU_TUNER_KERAS)
            return tpu__fail(d, TPU_EINVAL, "iterations_per_loop auto takes the model or the "
                             "keras tuner, not tuner kind %d; set tuner.kind to "
                             "TPU_TUNER_MODEL or TPU_TUNER_KERAS (for a time per launch, give "
                             "iterations_per_loop a time such as 30s)", (int)c->tuner.kind);
        int trc = tpu_tuner_check_settings(&c->tuner, d);
        if (trc)
            return trc;
    } else if (c->iterations_per_loop_s == 0 && c->iterations_per_loop < 1)
        return tpu__fail(d, TPU_EINVAL, "iterations_per_loop is 0; use at least 1 (or a time "
                         "such as 30s)");
    if (c->iterations_per_loop_s < 0 || !isfinite(c->iterations_per_loop_s))
        return tpu__fail(d, TPU_EINVAL, "iterations_per_loop time %g s must be positive",
                         c->iterations_per_loop_s);
    if (c->iterations_per_loop_s > 86400)
        return tpu__fail(d, TPU_EINVAL, "iterations_per_loop time %g s is more than 24 hours "
                         "(86400 s) of simulated time per launch; use 1s to 24h, e.g. 30s",
                         c->iterations_per_loop_s);
    if (c->initial_infeed_sleep_secs < 0 || c->initial_infeed_sleep_secs > 3600)
        return tpu__fail(d, TPU_EINVAL, "initial_infeed_sleep_secs %g must be from 0 to 3600",
                         c->initial_infeed_sleep_secs);
    const uint32_t chips = cores / tpu_device_chip(dev)->cores_per_chip;
    if (c->num_hosts < 1 || c->num_hosts > chips || chips % c->num_hosts)
        return tpu__fail(d, TPU_EINVAL, "num_hosts %u does not divide the device's %u chips "
                         "evenly (every host drives the same number of chips); give a divisor "
                         "of %u, or open the device with num_hosts x chips per host chips",
                         c->num_hosts, chips, chips);
    if (c->n_input_partition_dims > 2)
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims has %u entries; it takes 1 "
                         "(the features) or 2 (the features, then the labels)",
                         c->n_input_partition_dims);
    if (c->save_checkpoints_steps && !c->model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "save_checkpoints_steps %llu needs a model_dir to write "
                         "checkpoints to", (unsigned long long)c->save_checkpoints_steps);
    if ((unsigned)c->per_host_input_for_training > TPU_BROADCAST)
        return tpu__fail(d, TPU_EINVAL, "per_host_input_for_training %d is not one of "
                         "PER_SHARD_V1, PER_HOST_V1, PER_HOST_V2, BROADCAST",
                         (int)c->per_host_input_for_training);
    if ((unsigned)c->eval_training_input_configuration > TPU_EVAL_SLICED)
        return tpu__fail(d, TPU_EINVAL, "eval_training_input_configuration %d is not PER_HOST_V1 "
                         "or SLICED", (int)c->eval_training_input_configuration);
    if (c->modeled_launch_us < 0 || c->modeled_hooks_us < 0 || c->modeled_checkpoint_us < 0 ||
        c->modeled_input_us_per_batch < 0)
        return tpu__fail(d, TPU_EINVAL, "modeled host costs must not be negative");
    /* each batch size is checked when its mode runs (tpu_estimator_check_mode): a mode that
     * never runs must not fail the run */
    if (!c->train_batch_size && !c->eval_batch_size && !c->predict_batch_size)
        return tpu__fail(d, TPU_EINVAL, "no batch size is set: give train_batch_size (and "
                         "eval_batch_size, predict_batch_size for those modes)");
    return 0;
}

int tpu__run_config_check_plan(const struct tpu_estimator *e, struct tpu_diag *d)
{
    /* the rules that do not depend on a batch size, now (each mode's batch is checked when
     * the mode runs): the plan of training with its batch when that splits over the replicas
     * and the hosts (so messages show the run's shapes), else with one that does */
    const struct tpu_run_config *cfg = &e->cfg;
    struct tpu_shard_spec s;
    struct tpu_shard_plan plan;
    int rc = tpu__runtime_shard_spec(e, TPU_MODE_TRAIN, &s, d);
    if (!rc) {
        const uint32_t g = cfg->train_batch_size, unit = e->n_replicas * e->hosts;
        s.global_batch = g && (g % unit == 0 || cfg->per_host_input_for_training ==
                                                    TPU_BROADCAST) ? g : unit;
        memset(&plan, 0, sizeof plan);
        rc = tpu_shard_plan_make(&s, &plan, d);
        tpu_shard_plan_free(&plan);
    }
    return rc;
}

/* ---- reconfigure --------------------------------------------------------------------------- */

/* The fields of a run configuration that tpu_estimator_reconfigure may not change, with how
 * to show their values. The others (the batch sizes, iterations_per_loop and its tuner,
 * sample_weights, train_counts, log_step_count_steps, save_checkpoints_steps,
 * host_call_every_n_steps) may change: they shape the programs and the loops, not what the
 * estimator was made of (the device's layout, the input pipeline, the checkpoints, the
 * clock's costs). input_partition_dims and model_dir are compared on their own. */
enum fixed_kind { FIXED_U32, FIXED_U64, FIXED_F64, FIXED_BOOL, FIXED_INPUT_MODE,
                  FIXED_EVAL_INPUT, FIXED_HOST_TIME };

static const struct fixed_field {
    const char *name;
    size_t offset;
    enum fixed_kind kind;
} fixed_fields[] = {
    {"num_shards", offsetof(struct tpu_run_config, num_shards), FIXED_U32},
    {"num_cores_per_replica", offsetof(struct tpu_run_config, num_cores_per_replica), FIXED_U32},
    {"per_host_input_for_training", offsetof(struct tpu_run_config, per_host_input_for_training),
     FIXED_INPUT_MODE},
    {"eval_training_input_configuration",
     offsetof(struct tpu_run_config, eval_training_input_configuration), FIXED_EVAL_INPUT},
    {"initial_infeed_sleep_secs", offsetof(struct tpu_run_config, initial_infeed_sleep_secs),
     FIXED_F64},
    {"num_hosts", offsetof(struct tpu_run_config, num_hosts), FIXED_U32},
    {"keep_checkpoint_max", offsetof(struct tpu_run_config, keep_checkpoint_max), FIXED_U32},
    {"seed", offsetof(struct tpu_run_config, seed), FIXED_U64},
    {"strict_input", offsetof(struct tpu_run_config, strict_input), FIXED_BOOL},
    {"host_time", offsetof(struct tpu_run_config, host_time), FIXED_HOST_TIME},
    {"modeled_launch_us", offsetof(struct tpu_run_config, modeled_launch_us), FIXED_F64},
    {"modeled_hooks_us", offsetof(struct tpu_run_config, modeled_hooks_us), FIXED_F64},
    {"modeled_checkpoint_us", offsetof(struct tpu_run_config, modeled_checkpoint_us), FIXED_F64},
    {"modeled_input_us_per_batch", offsetof(struct tpu_run_config, modeled_input_us_per_batch),
     FIXED_F64},
};

/* A fixed field's value as text; whether it differs between a and b. */
static bool fixed_value(const struct fixed_field *f, const struct tpu_run_config *a,
                        const struct tpu_run_config *b, char *va, char *vb, size_t size)
{
    const char *pa = (const char *)a + f->offset, *pb = (const char *)b + f->offset;
    static const char *const time_names[] = {"modeled", "measured"};
    const char *out_a = NULL, *out_b = NULL;
    bool differs = false;
    switch (f->kind) {
    case FIXED_U32: {
        uint32_t x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        snprintf(va, size, "%u", x);
        snprintf(vb, size, "%u", y);
        return x != y;
    }
    case FIXED_U64: {
        uint64_t x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        snprintf(va, size, "%llu", (unsigned long long)x);
        snprintf(vb, size, "%llu", (unsigned long long)y);
        return x != y;
    }
    case FIXED_F64: {
        double x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        snprintf(va, size, "%g", x);
        snprintf(vb, size, "%g", y);
        return memcmp(&x, &y, sizeof x) != 0;
    }
    case FIXED_BOOL: {
        bool x, y;
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        snprintf(va, size, "%s", x ? "true" : "false");
        snprintf(vb, size, "%s", y ? "true" : "false");
        return x != y;
    }
    case FIXED_INPUT_MODE:
    case FIXED_EVAL_INPUT:
    case FIXED_HOST_TIME: {
        int x, y; /* the enums' values (an enum's size is int's here) */
        memcpy(&x, pa, sizeof x);
        memcpy(&y, pb, sizeof y);
        const char *const *names = f->kind == FIXED_INPUT_MODE  ? tpu__input_mode_names
                                   : f->kind == FIXED_EVAL_INPUT ? tpu__eval_input_names
                                                                 : time_names;
        const int n = f->kind == FIXED_INPUT_MODE ? 4 : 2;
        out_a = x >= 0 && x < n ? names[x] : NULL;
        out_b = y >= 0 && y < n ? names[y] : NULL;
        differs = x != y;
        if (out_a)
            snprintf(va, size, "%s", out_a);
        else
            snprintf(va, size, "%d", x);
        if (out_b)
            snprintf(vb, size, "%s", out_b);
        else
            snprintf(vb, size, "%d", y);
        return differs;
    }
    }
    return false;
}

/* input_partition_dims as the CLI writes them: "none", or each entry's counts ("1,2 1"). */
static void dims_text(const struct tpu_run_config *c, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    if (!c->n_input_partition_dims) {
        snprintf(out, size, "none");
        return;
    }
    for (uint32_t i = 0; i < c->n_input_partition_dims && i < 2; i++) {
        const struct tpu_partition_dims *pd = &c->input_partition_dims[i];
        n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s[", i ? " " : "");
        for (uint32_t k = 0; k < pd->rank && k < TPU_PARTITION_MAX_RANK; k++)
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%u", k ? "," : "",
                                  pd->dims[k]);
        n += (size_t)snprintf(out + n, n < size ? size - n : 0, "]");
    }
}

/* The first field that tpu_estimator_reconfigure may not change and `b` changes, or 0. */
static int fixed_fields_differ(const struct tpu_run_config *a, const struct tpu_run_config *b,
                               struct tpu_diag *d)
{
    static const char rule[] = "tpu_estimator_reconfigure changes only the batch sizes, "
                               "iterations_per_loop (and its tuner), sample_weights, "
                               "train_counts, log_step_count_steps, save_checkpoints_steps and "
                               "host_call_every_n_steps";
    char va[256], vb[256];
    for (size_t i = 0; i < sizeof fixed_fields / sizeof fixed_fields[0]; i++)
        if (fixed_value(&fixed_fields[i], a, b, va, vb, sizeof va))
            return tpu__fail(d, TPU_EINVAL, "%s is %s, and the new configuration gives %s; %s; "
                             "keep %s %s, or create a new estimator for %s %s",
                             fixed_fields[i].name, va, vb, rule, fixed_fields[i].name, va,
                             fixed_fields[i].name, vb);
    if (strncmp(a->model_dir, b->model_dir, sizeof a->model_dir))
        return tpu__fail(d, TPU_EINVAL, "model_dir is '%.200s', and the new configuration "
                         "gives '%.200s'; %s; keep the model_dir, or create a new estimator "
                         "for the other one", a->model_dir, b->model_dir, rule);
    bool same = a->n_input_partition_dims == b->n_input_partition_dims;
    for (uint32_t i = 0; same && i < a->n_input_partition_dims && i < 2; i++) {
        const struct tpu_partition_dims *x = &a->input_partition_dims[i],
                                        *y = &b->input_partition_dims[i];
        same = x->rank == y->rank;
        for (uint32_t k = 0; same && k < x->rank && k < TPU_PARTITION_MAX_RANK; k++)
            same = x->dims[k] == y->dims[k];
    }
    if (!same) {
        dims_text(a, va, sizeof va);
        dims_text(b, vb, sizeof vb);
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims are %s, and the new "
                         "configuration gives %s; %s; keep the partition dims, or create a new "
                         "estimator for the others", va, vb, rule);
    }
    return 0;
}

static bool same_tuner(const struct tpu_tuner_settings *a, const struct tpu_tuner_settings *b)
{
    return a->kind == b->kind && a->initial_steps == b->initial_steps &&
           a->max_steps == b->max_steps && a->interval == b->interval &&
           a->change_spe_interval == b->change_spe_interval &&
           a->change_threshold == b->change_threshold &&
           a->target_overhead == b->target_overhead &&
           a->drift_threshold == b->drift_threshold && a->cadence_steps == b->cadence_steps &&
           a->target_s == b->target_s && a->capacity == b->capacity;
}

int tpu_estimator_reconfigure(struct tpu_estimator *e, const struct tpu_run_config *cfg,
                              struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (e->busy)
        return tpu__fail(d, TPU_EINVAL, "tpu_estimator_reconfigure was called during a train, "
                         "evaluate or predict call (from one of its hooks); call it between "
                         "those calls");
    int rc = fixed_fields_differ(&e->cfg, cfg, d);
    if (rc || (rc = tpu__run_config_check(cfg, e->dev, d)))
        return rc;
    if (cfg->host_group != e->cfg.host_group)
        return tpu__fail(d, TPU_EINVAL, "the new configuration gives another host_group; "
                         "tpu_estimator_reconfigure keeps the estimator's hosts: keep the "
                         "host_group, or create a new estimator for the other one");
    const struct tpu_run_config old = e->cfg;
    e->cfg = *cfg;
    if ((rc = tpu__run_config_check_plan(e, d))) {
        e->cfg = old;
        return rc;
    }
    /* a mode whose loop sizing changed gets a fresh tuner at its next pass (one whose
     * sizing did not keeps its tuner, and so where it got to: fit's epochs continue it) */
    const bool ckpt = !e->timing_only;
    for (int m = 0; m < 3; m++) {
        struct tpu_tuner_settings a, b;
        const bool ha = tpu__loop_size_tuner_settings(&old, (enum tpu_mode)m, ckpt, &a);
        const bool hb = tpu__loop_size_tuner_settings(cfg, (enum tpu_mode)m, ckpt, &b);
        if (ha != hb || (ha && !same_tuner(&a, &b)))
            tpu_tuner_destroy(&e->tuners[m]);
    }
    /* the train program's learning-rate facts hold while it stays loaded (a changed shape
     * rebuilds it, and the load looks again); otherwise look again when asked */
    if (!(e->loaded && e->mode == TPU_MODE_TRAIN))
        e->lr_info.known = false;
    return 0;
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
