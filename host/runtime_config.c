/* Run configuration: defaults, parsing, and the batch arithmetic of the input modes, with
 * messages at least as precise as TPUEstimator's (the value, the rule, the fix). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

const char *tpu_input_mode_name(enum tpu_input_mode m)
{
    return (unsigned)m < 4 ? mode_names[m] : "?";
}

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
    char *end = NULL;
    if (!text || !*text || *text == '-' || *text == '+')
        goto bad;
    double v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v))
        goto bad;
    if (*end == '\0') {
        if (v != floor(v) || v > 1e12)
            goto bad;
        c->iterations_per_loop = (uint64_t)v;
        c->iterations_per_loop_s = 0;
        return 0;
    }
    double scale = 0;
    if (!strcmp(end, "s"))
        scale = 1;
    else if (!strcmp(end, "m"))
        scale = 60;
    else if (!strcmp(end, "h"))
        scale = 3600;
    if (scale == 0)
        goto bad;
    c->iterations_per_loop_s = v * scale;
    return 0;
bad:
    return tpu__fail(d, TPU_EINVAL,
                     "iterations_per_loop '%s' is neither a whole number of steps (>= 1) nor a "
                     "time such as 30s, 5m or 1h; e.g. iterations_per_loop 100",
                     text ? text : "");
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
        uint32_t lo = global / n_replicas * n_replicas, hi = lo + n_replicas;
        return tpu__fail(d, TPU_EINVAL,
                         "%s %u must be divisible by the number of replicas (num_shards) %u, "
                         "since each replica takes the same share of the global batch; use %u "
                         "or %u",
                         field[mode], global, n_replicas, lo ? lo : hi, hi);
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
