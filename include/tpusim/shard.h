/* Sharding: how a global batch and each input tensor split over the hosts, replicas and
 * logical cores of a pod slice, as TPUEstimator splits them, with its rules and errors.
 *
 * A pod slice has `hosts` hosts, each driving `chips_per_host` chips of `cores_per_chip`
 * cores. Cores are numbered host by host, chip by chip. A replica is num_cores_per_replica
 * consecutive cores; replica r's logical core k is core r * num_cores_per_replica + k, and a
 * core's host is core / (chips_per_host * cores_per_chip).
 *
 * The plan says, for one mode (train, eval, predict), who calls the input function and with
 * what batch each step, which replicas each call feeds, and which slice of each input
 * tensor each logical core of a replica receives. The runtime feeds the device from it and
 * `tpusim shard` prints it; both take its errors, which name the value, the rule and the fix.
 *
 * Input functions per step (TPUEstimator's _InputPipeline; the mode's input is
 * per_host_input_for_training, except that evaluation and prediction with
 * eval_training_input_configuration SLICED are SLICED, and PER_SHARD_V1 is per core in
 * training only):
 *   PER_SHARD_V1   training: once per replica (= core), on its host, batch = global / replicas
 *   PER_HOST_V1    once per host, batch = global / hosts, split over the host's replicas
 *                  (evaluation and prediction with PER_SHARD_V1 too)
 *   PER_HOST_V2    once per replica, on the host of its logical core 0, batch = global /
 *                  replicas (every mode; the only mode with input_partition_dims). TPUEstimator
 *                  calls input_fn once per host here and takes one batch per replica from
 *                  the dataset it returns; a "call" of the plan is one such batch.
 *   BROADCAST      once, on host 0, batch = global; every replica receives all of it (every
 *                  mode: TPUEstimator's model_fn batch is then the global batch)
 *   SLICED         evaluation, prediction: once on host 0 with the global batch, sliced over
 *                  the replicas
 * The rules (plan.c has the list with where each comes from): num_cores_per_replica 1, 2,
 * 4, ... 128 and at most the cores; num_shards, if set, cores / num_cores_per_replica; a
 * replica within one host's cores outside PER_HOST_V2; no PER_SHARD_V1 with model
 * parallelism; the batch divides by the replicas except under BROADCAST; evaluation on
 * several hosts needs BROADCAST, SLICED or PER_HOST_V2, prediction BROADCAST, SLICED or
 * PER_HOST_V2 with one replica; input_partition_dims only with PER_HOST_V2 and
 * num_cores_per_replica > 1, not with SLICED, each product 1 or num_cores_per_replica and,
 * when not 1, the rank of the tensor.
 * Tensor slices (input_partition_dims, PER_HOST_V2 only): see struct tpu_partition_dims in
 * runtime.h. Along a dimension of size n cut into p parts, when p divides n every part has
 * n / p; otherwise parts of ceil(n / p) come first, then one part of what is left, then
 * empty parts (TPU infeed's greedy split: 10 over 4 is 3, 3, 3, 1; 9 over 4 is 3, 3, 3, 0).
 * A core's infeed buffer has the largest part's size along every dimension; its slice
 * fills the start of it and the rest is zeros. */
#ifndef TPUSIM_SHARD_H
#define TPUSIM_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_SHARD_MAX_TENSORS 4

/* One input tensor: its name (for messages), its shape per example (the batch dimension
 * left out), and its partition dims (rank 0: None; else rank = shape rank + 1, the batch
 * dimension first). */
struct tpu_shard_tensor {
    char name[32];
    uint32_t rank;                            /* per-example rank, 0 .. TPU_PARTITION_MAX_RANK - 1 */
    uint64_t shape[TPU_PARTITION_MAX_RANK - 1];
    struct tpu_partition_dims dims;
};

struct tpu_shard_spec {
    uint32_t hosts, chips_per_host, cores_per_chip;
    uint32_t num_cores_per_replica;           /* 1, 2, 4, ... 128; 0: unset (one) */
    uint32_t num_shards;                      /* replicas; 0: cores / num_cores_per_replica */
    enum tpu_input_mode train_input;          /* per_host_input_for_training */
    enum tpu_eval_input eval_input;           /* eval_training_input_configuration */
    enum tpu_mode mode;                       /* the batch of this mode */
    uint32_t global_batch;
    uint32_t n_tensors;                       /* features first, then labels */
    struct tpu_shard_tensor tensors[TPU_SHARD_MAX_TENSORS];
};

/* One input_fn call of a step. */
struct tpu_shard_call {
    uint32_t host;          /* the host that makes it */
    uint32_t shard;         /* what the call is for: the replica (PER_SHARD_V1, PER_HOST_V2),
                               the host (PER_HOST_V1, per-host eval/predict), 0 (BROADCAST,
                               SLICED) */
    uint32_t batch;         /* rows it returns */
    uint32_t first_replica, n_replicas; /* the replicas it feeds */
    uint32_t rows_each;     /* rows each takes: replica first_replica + i takes rows
                               [i * rows_each, (i + 1) * rows_each), or all of them when
                               broadcast */
    bool broadcast;
};

struct tpu_shard_plan {
    uint32_t n_cores, n_replicas, cores_per_replica, cores_per_host, hosts;
    uint32_t per_replica_batch; /* rows each replica computes on per step (BROADCAST: global) */
    uint32_t n_calls;           /* input_fn calls per step, in host order */
    struct tpu_shard_call *calls; /* [n_calls], owned: tpu_shard_plan_free */
};

/* Fills the spec's pod slice (hosts, chips per host and cores per chip; hosts 0 is 1), its
 * cores per replica (0 is 1), num_shards, input modes, mode and the mode's global batch from
 * a run configuration; the tensors are left as they are. */
void tpu_shard_spec_set_config(struct tpu_shard_spec *s, const struct tpu_run_config *c,
                               uint32_t hosts, uint32_t chips_per_host, uint32_t cores_per_chip,
                               enum tpu_mode mode);
/* Gives the spec's tensors the run configuration's input_partition_dims: entry 0 to the
 * features (the first tensor), entry 1 to every later one (the labels). */
void tpu_shard_spec_set_dims(struct tpu_shard_spec *s, const struct tpu_run_config *c);

/* Checks the spec against every rule and makes the plan; on an error nothing is allocated
 * and d names the value, the rule and the fix. */
int tpu_shard_plan_make(const struct tpu_shard_spec *s, struct tpu_shard_plan *out,
                        struct tpu_diag *d);
void tpu_shard_plan_free(struct tpu_shard_plan *p);

/* What logical core `lcore` of a replica receives of tensor t (the per-replica tensor
 * [per_replica_batch, shape...]). */
struct tpu_shard_slice {
    bool receives;                             /* false: nothing (dims of product 1, lcore > 0) */
    uint32_t rank;                             /* per-replica rank: shape rank + 1 */
    uint64_t begin[TPU_PARTITION_MAX_RANK];    /* index ranges [begin, end) per dimension; */
    uint64_t end[TPU_PARTITION_MAX_RANK];      /* an empty part has begin == end */
    uint64_t padded[TPU_PARTITION_MAX_RANK];   /* the core's buffer: the largest part */
};
int tpu_shard_slice_of(const struct tpu_shard_spec *s, const struct tpu_shard_plan *p,
                       uint32_t tensor, uint32_t lcore, struct tpu_shard_slice *out,
                       struct tpu_diag *d);

/* Parses input_partition_dims as written in Python, e.g. "[[1, 2, 2, 1], None]" or
 * "[[1, 4, 1, 1]]": a list of one (features) or two (features, labels) entries, each None
 * (also null, none) or a list of positive counts. Up to TPU_PARTITION_MAX_RANK counts each.
 * Fills out[0 .. *n) (max 2). */
int tpu_partition_dims_parse(const char *text, struct tpu_partition_dims out[2], uint32_t *n,
                             struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
