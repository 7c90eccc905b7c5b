/* The input function over arrays of fit, evaluate, predict and the *_on_batch calls
 * (keras_int.h says which rows each call gets and how the row weights are made). It is a
 * runtime.h input function: the estimator calls it from its infeed threads, one call at a
 * time, and it keeps no state but its count of calls and, for fit, where its stream stands.
 * fit's training data is one stream of `epochs` passes over the batched arrays, as Keras's
 * TensorLikeDataAdapter repeats them: each pass ends with its own partial batch and has its
 * own order, and an epoch of steps_per_epoch steps continues where the previous one
 * stopped, into the next pass if it must (fit calls the estimator once per epoch and sets
 * stream_base, the stream's step, before each call). */
#include <string.h>

#include "keras/keras_int.h"

static int start(void *ctx, enum tpu_mode mode, uint64_t global_step, uint32_t global_batch,
                 struct tpu_diag *d)
{
    struct tpu__keras_arrays *a = ctx;
    (void)mode;
    (void)global_step;
    (void)d;
    a->global_batch = global_batch;
    a->calls = 0;
    return 0;
}

double tpu__keras_example_weight(const struct tpu__keras_arrays *a, uint32_t i)
{
    double w = a->sample_weight ? (double)a->sample_weight[i] : 1.0;
    if (a->class_weight && a->ds->y) {
        int32_t y = a->ds->y[i];
        w *= y >= 0 && (uint32_t)y < a->n_class_weight ? (double)a->class_weight[y] : 1.0;
    }
    return w;
}

static int next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct tpu__keras_arrays *a = ctx;
    const struct tpu_dataset *ds = a->ds;
    const uint64_t n = ds->n_examples;
    (void)shard;
    (void)d;
    const uint32_t g = a->global_batch && a->global_batch >= batch ? a->global_batch : batch;
    const uint64_t per_step = g / batch ? g / batch : 1;
    const uint64_t per_pass = (n + g - 1) / g;
    const uint64_t sstep = a->stream_base + a->calls / per_step, slot = a->calls % per_step;
    /* the end of the data: a step past the last pass's last, or (evaluation and
     * prediction, read as dataset_input.c reads them) a call past it */
    if (per_pass == 0 || sstep / per_pass >= a->n_passes)
        return 0;
    const uint64_t step = sstep % per_pass;
    const uint64_t step_first = step * g, first = step_first + slot * batch;
    if (mode != TPU_MODE_TRAIN && first >= n)
        return 0;
    tpu__keras_arrays_use_pass(a, sstep / per_pass);
    a->calls++;
    float *x = tensors[0];
    const bool with_y = mode != TPU_MODE_PREDICT;
    uint32_t real;
    if (with_y && !ds->y)
        real = tpu_dataset_gather_targets(ds, a->perm, first, batch, x, tensors[1],
                                          tensors[2]);
    else
        real = tpu_dataset_gather(ds, a->perm, first, batch, x,
                                  with_y ? (int32_t *)tensors[1] : NULL);
    if (mode == TPU_MODE_TRAIN && a->weighted) {
        float *w = tensors[ds->y ? 2 : 3]; /* [batch][1] */
        const uint64_t step_rows = n - step_first < g ? n - step_first : g;
        const double denom = (double)step_rows * (double)a->scale;
        for (uint32_t k = 0; k < batch; k++) {
            if (k < real) {
                uint32_t i = a->perm ? a->perm[first + k] : (uint32_t)(first + k);
                w[k] = (float)(tpu__keras_example_weight(a, i) / denom);
            } else {
                w[k] = 0.0f;
            }
        }
    }
    *n_real = real;
    return 1;
}

void tpu__keras_arrays_init(struct tpu__keras_arrays *a, const struct tpu_dataset *ds,
                            const float *sample_weight, const float *class_weight,
                            uint32_t n_class_weight, const uint32_t *perm)
{
    memset(a, 0, sizeof *a);
    a->ds = ds;
    a->sample_weight = sample_weight;
    a->class_weight = class_weight;
    a->n_class_weight = n_class_weight;
    a->perm = perm;
    a->scale = 1;
    a->n_passes = 1;
    a->perm_pass = UINT64_MAX;
    a->input.ctx = a;
    a->input.next = next;
    a->input.start = start;
}

void tpu__keras_arrays_stream(struct tpu__keras_arrays *a, uint64_t n_passes, uint32_t *perm,
                              uint64_t seed, uint64_t first_epoch)
{
    a->n_passes = n_passes;
    a->stream_base = 0;
    a->perm = perm;
    a->shuffle_perm = perm;
    a->seed = seed;
    a->first_epoch = first_epoch;
    a->perm_pass = UINT64_MAX;
}

void tpu__keras_arrays_use_pass(struct tpu__keras_arrays *a, uint64_t pass)
{
    if (!a->shuffle_perm || a->perm_pass == pass)
        return;
    (void)tpu_dataset_shuffle(a->shuffle_perm, a->ds->n_examples, a->seed,
                              a->first_epoch + pass);
    a->perm_pass = pass;
}

void tpu__keras_dataset_view(const struct tpu_dataset *ds, uint32_t first, uint32_t n,
                             struct tpu_dataset *view)
{
    *view = *ds;
    view->n_examples = n;
    view->x = ds->x + (size_t)first * ds->n_features;
    view->y = ds->y ? ds->y + first : NULL;
    view->targets = ds->targets ? ds->targets + (size_t)first * ds->n_targets : NULL;
}
