/* Batches and shards (host/shard/): how a global batch becomes per-replica batches and
 * input_fn calls for each input mode, as TPUEstimator computes them (tpu_per_replica_batch in
 * runtime.h), and which replicas and rows one input_fn call feeds. Spatial partitioning of
 * input tensors (input_partition_dims) will live here too. Private to host/. */
#ifndef TPUSIM_HOST_SHARD_INT_H
#define TPUSIM_HOST_SHARD_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/runtime.h"

/* Where the rows of one input_fn call go: replicas first_replica .. first_replica +
 * n_replicas - 1, replica first_replica + r taking rows_each rows from row
 * tpu__shard_call_row0(plan, r) of the call's batch. */
struct tpu__shard_call {
    uint32_t first_replica, n_replicas, rows_each;
    bool broadcast; /* BROADCAST training: every replica gets the call's whole batch */
};

/* The plan of call `call` of a step that makes `calls` calls of per_call rows each for a mode
 * whose per-replica batch is per_replica (the figures of tpu_per_replica_batch). */
void tpu__shard_call_plan(const struct tpu_run_config *cfg, enum tpu_mode mode,
                          uint32_t n_replicas, uint32_t calls, uint32_t per_call,
                          uint32_t per_replica, uint32_t call, struct tpu__shard_call *out);

/* The first row of the call's batch that the plan's r-th replica takes. */
static inline uint32_t tpu__shard_call_row0(const struct tpu__shard_call *plan, uint32_t r)
{
    return plan->broadcast ? 0 : r * plan->rows_each;
}

#endif
