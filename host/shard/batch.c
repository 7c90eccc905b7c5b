/* The batch arithmetic of the input modes (shard_int.h): a global batch per mode into a
 * per-replica batch, input_fn calls per step and rows per call, with messages at least as
 * precise as TPUEstimator's (the value, the rule, the fix); and the replicas each call
 * feeds. It computes sizes only: the infeed thread (runtime/runtime_pass.c) moves the data. */
#include <stdio.h>

#include "shard_int.h"
#include "util.h"

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

void tpu__shard_call_plan(const struct tpu_run_config *cfg, enum tpu_mode mode,
                          uint32_t n_replicas, uint32_t calls, uint32_t per_call,
                          uint32_t per_replica, uint32_t call, struct tpu__shard_call *out)
{
    out->first_replica = 0;
    out->n_replicas = 1;
    out->rows_each = per_call;
    out->broadcast = calls == 1 && cfg->per_host_input_for_training == TPU_BROADCAST &&
                     mode == TPU_MODE_TRAIN;
    if (out->broadcast) {
        out->n_replicas = n_replicas; /* the same batch to each */
    } else if (calls < n_replicas) {
        /* a per-host call: sliced across the host's replicas */
        out->n_replicas = n_replicas / calls;
        out->first_replica = call * out->n_replicas;
        out->rows_each = per_replica;
    } else {
        out->first_replica = call;
    }
}
