/* An input function over an in-memory dataset (runtime.h's struct tpu_input).
 *
 * Training reads an endless stream: epoch e is the dataset in the order of
 * tpu_dataset_shuffle(seed, e), the epochs one after another, batches taken in turn from the
 * stream (a batch may straddle two epochs). Where training resumes at global step g, the
 * stream resumes at example g x global batch, so a resumed run sees exactly the batches an
 * uninterrupted run would. If `max_examples` is set the stream ends there (a finite input).
 * Evaluation and prediction read the dataset once, in order; the last batch is short and
 * the runtime pads it.
 *
 * The infeed tensors, in net.h's order: x f32 [B][n_features], then for a labelled dataset
 * labels int32 [B][1], or for a dataset of targets the targets f32 [B][n_targets] and the
 * row mask int32 [B][1] (0 for a real row); predict infeeds x only. skip advances the stream
 * as next would, in O(1), without gathering a row. */
#include <stdlib.h>
#include <string.h>

#include "tpusim/dataset_input.h"
#include "util.h"

static int refresh_perm(struct tpu_dataset_input *in, uint64_t epoch, struct tpu_diag *d)
{
    if (in->perm_epoch == epoch && in->perm)
        return 0;
    if (!in->perm) {
        in->perm = malloc((size_t)in->ds->n_examples * sizeof *in->perm);
        if (!in->perm)
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the shuffle");
    }
    tpu_dataset_shuffle(in->perm, in->ds->n_examples, in->seed, epoch);
    in->perm_epoch = epoch;
    return 0;
}

static int start(void *ctx, enum tpu_mode mode, uint64_t global_step, uint32_t global_batch,
                 struct tpu_diag *d)
{
    struct tpu_dataset_input *in = ctx;
    (void)d;
    in->pos = mode == TPU_MODE_TRAIN ? global_step * global_batch : 0;
    return 0;
}

static int next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct tpu_dataset_input *in = ctx;
    const struct tpu_dataset *ds = in->ds;
    const uint32_t n = ds->n_examples;
    float *x = tensors[0];
    const bool with_y = mode != TPU_MODE_PREDICT; /* predict infeeds x only */
    int32_t *y = with_y && ds->y ? tensors[1] : NULL;
    float *t = with_y && !ds->y ? tensors[1] : NULL;
    int32_t *mask = with_y && !ds->y ? tensors[2] : NULL;
    (void)shard;
    if (mode != TPU_MODE_TRAIN) {
        if (in->pos >= n)
            return 0;
        *n_real = t ? tpu_dataset_gather_targets(ds, NULL, in->pos, batch, x, t, mask)
                    : tpu_dataset_gather(ds, NULL, in->pos, batch, x, y);
        in->pos += *n_real;
        return 1;
    }
    if (in->max_examples && in->pos >= in->max_examples)
        return 0;
    uint32_t filled = 0;
    while (filled < batch) {
        if (in->max_examples && in->pos >= in->max_examples)
            break;
        uint64_t epoch = in->pos / n, off = in->pos % n;
        int rc = refresh_perm(in, epoch, d);
        if (rc)
            return rc;
        uint64_t take = batch - filled;
        if (take > n - off)
            take = n - off;
        if (in->max_examples && take > in->max_examples - in->pos)
            take = in->max_examples - in->pos;
        float *xr = x + (size_t)filled * ds->n_features;
        if (t)
            tpu_dataset_gather_targets(ds, in->perm, off, (uint32_t)take, xr,
                                       t + (size_t)filled * ds->n_targets, mask + filled);
        else
            tpu_dataset_gather(ds, in->perm, off, (uint32_t)take, xr, y ? y + filled : NULL);
        filled += (uint32_t)take;
        in->pos += take;
    }
    *n_real = filled;
    return 1;
}

/* Moves pos exactly as next would for the same call, in O(1), filling nothing: the other
 * hosts' calls on a pod's rank (runtime.h, struct tpu_input's skip). */
static int skip(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                uint32_t *n_real, struct tpu_diag *d)
{
    struct tpu_dataset_input *in = ctx;
    const uint64_t n = in->ds->n_examples;
    (void)shard;
    (void)d;
    uint64_t take = batch;
    if (mode != TPU_MODE_TRAIN) {
        if (in->pos >= n)
            return 0;
        if (take > n - in->pos)
            take = n - in->pos;
    } else if (in->max_examples) {
        if (in->pos >= in->max_examples)
            return 0;
        if (take > in->max_examples - in->pos)
            take = in->max_examples - in->pos;
    }
    in->pos += take;
    *n_real = (uint32_t)take;
    return 1;
}

void tpu_dataset_input_init(struct tpu_dataset_input *in, const struct tpu_dataset *ds,
                             uint64_t seed)
{
    memset(in, 0, sizeof *in);
    in->ds = ds;
    in->seed = seed;
    in->perm_epoch = UINT64_MAX;
    in->input.ctx = in;
    in->input.next = next;
    in->input.start = start;
    in->input.skip = skip;
}

void tpu_dataset_input_free(struct tpu_dataset_input *in)
{
    if (in) {
        free(in->perm);
        in->perm = NULL;
    }
}
