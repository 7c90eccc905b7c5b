/* Batches and shards (host/shard/): the shard plan of include/tpusim/shard.h (plan.c: the
 * rules and the input_fn calls; slice.c: each logical core's part of a tensor;
 * partition_dims.c: the input_partition_dims parser). Private to host/ (and the CLI's
 * `tpusim shard`, which prints a plan). */
#ifndef TPUSIM_HOST_SHARD_INT_H
#define TPUSIM_HOST_SHARD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/runtime.h"
#include "tpusim/shard.h"

/* How the mode's input reaches the replicas (shard.h's table of input functions). */
enum tpu__shard_feed {
    TPU__FEED_PER_REPLICA_V1 = 0, /* training PER_SHARD_V1: per replica (= core) */
    TPU__FEED_PER_HOST,           /* PER_HOST_V1 (and eval/predict PER_SHARD_V1): per host */
    TPU__FEED_PER_REPLICA,        /* PER_HOST_V2: per replica, any mode */
    TPU__FEED_BROADCAST,          /* BROADCAST: once, every replica all of it */
    TPU__FEED_SLICED,             /* eval/predict SLICED: once, sliced over the replicas */
};
enum tpu__shard_feed tpu__shard_feed_of(const struct tpu_shard_spec *s);
/* "PER_HOST_V2 (per replica)", ... */
const char *tpu__shard_feed_name(enum tpu__shard_feed f);
/* "PER_SHARD_V1" ... "BROADCAST" */
const char *tpu__shard_input_name(enum tpu_input_mode m);

/* Part i of a dimension of size n cut into p parts as TPU infeed cuts it (slice.c):
 * [*begin, *end), and *largest the largest part's size (the padded buffer's). p <= 1: the
 * whole dimension. */
void tpu__shard_part(uint64_t n, uint32_t p, uint32_t i, uint64_t *begin, uint64_t *end,
                     uint64_t *largest);

/* "[1, 2, 2, 1]" or "None"; a tensor's per-replica shape "[8, 28, 28, 1]" (batch first). */
void tpu__shard_dims_text(const struct tpu_partition_dims *dims, char *buf, size_t n);
void tpu__shard_shape_text(uint64_t batch, const struct tpu_shard_tensor *t, char *buf,
                           size_t n);

#endif
