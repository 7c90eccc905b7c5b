/* Tensor slices (shard.h): which part of a per-replica input tensor each logical core of a
 * replica receives under input_partition_dims, with TPU infeed's split arithmetic. Sizes and
 * index ranges only; the runtime copies the data.
 *
 * The split of one dimension of size n into p parts is TPUEstimator's
 * partition_or_replicate_on_host (tpu_feed.py): when p divides n every part has n / p;
 * otherwise the parts have ceil(n / p) = c each, as many as fit (n / c of them), then one
 * part of what is left (n % c, which may be 0), then empty parts up to p. That is the same
 * as part i = [min(i * c, n), min((i + 1) * c, n)) with c = ceil(n / p) in both cases, which
 * is how it is computed here. Examples (TPU's own): 5 over 2 is 3, 2; 14 over 4 is 4, 4, 4,
 * 2; 10 over 4 is 3, 3, 3, 1; 9 over 4 is 3, 3, 3, 0; 28 over 8 is 4 x 7, 0. The parts go to
 * logical cores in row-major order over the counts (the last dimension's part index varies
 * fastest), as the infeed's nest.flatten of the nested splits and the XLA tile assignment
 * np.arange(prod(dims)).reshape(dims) have it. */
#include <string.h>

#include "shard_int.h"
#include "tpusim/shard.h"
#include "util.h"

void tpu__shard_part(uint64_t n, uint32_t p, uint32_t i, uint64_t *begin, uint64_t *end,
                     uint64_t *largest)
{
    if (p <= 1) {
        *begin = 0;
        *end = n;
        *largest = n;
        return;
    }
    const uint64_t c = n / p + (n % p != 0);
    const uint64_t b = (uint64_t)i * c, e = b + c;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
    *largest = c;
}

int tpu_shard_slice_of(const struct tpu_shard_spec *s, const struct tpu_shard_plan *p,
                       uint32_t tensor, uint32_t lcore, struct tpu_shard_slice *out,
                       struct tpu_diag *d)
{
    memset(out, 0, sizeof *out);
    if (tensor >= s->n_tensors)
        return tpu__fail(d, TPU_EINVAL, "tensor %u does not exist: the spec has %u tensors "
                         "(0 .. %u)", tensor, s->n_tensors, s->n_tensors ? s->n_tensors - 1 : 0);
    if (lcore >= p->cores_per_replica)
        return tpu__fail(d, TPU_EINVAL, "logical core %u does not exist: a replica has %u "
                         "cores (0 .. %u)", lcore, p->cores_per_replica,
                         p->cores_per_replica - 1);
    const struct tpu_shard_tensor *t = &s->tensors[tensor];
    out->rank = t->rank + 1;
    uint64_t shape[TPU_PARTITION_MAX_RANK];
    shape[0] = p->per_replica_batch;
    for (uint32_t a = 0; a < t->rank; a++)
        shape[a + 1] = t->shape[a];
    uint64_t product = 1;
    for (uint32_t a = 0; a < t->dims.rank; a++)
        product = product > UINT32_MAX ? product : product * t->dims.dims[a];
    if (t->dims.rank == 0 || product == 1) {
        /* None: every core gets the whole tensor; product 1: logical core 0 only */
        out->receives = t->dims.rank == 0 || lcore == 0;
        for (uint32_t a = 0; a < out->rank; a++) {
            out->end[a] = out->receives ? shape[a] : 0;
            out->padded[a] = out->receives ? shape[a] : 0;
        }
        return 0;
    }
    /* the plan checked that the dims' rank is the tensor's and their product the replica's
     * cores; the part index of each dimension, the last varying fastest */
    out->receives = true;
    uint32_t rest = lcore;
    for (uint32_t a = out->rank; a-- > 0;) {
        const uint32_t parts = t->dims.dims[a];
        tpu__shard_part(shape[a], parts, rest % parts, &out->begin[a], &out->end[a],
                        &out->padded[a]);
        rest /= parts;
    }
    return 0;
}
