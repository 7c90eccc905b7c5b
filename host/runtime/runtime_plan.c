/* The estimator's view of sharding: the shard spec of a mode (the pod slice the device
 * stands for, the run configuration's input modes and partition dims, the mode's global
 * batch and the model's infeed tensors), and the plan shard/ makes of it, which says who
 * calls the input function with what batch each step and which slice of each tensor each
 * logical core receives. This file only gathers the facts; the rules and their messages are
 * shard/'s (include/tpusim/shard.h), the data movement runtime_feed.c's. */
#include <stdio.h>
#include <string.h>

#include "runtime_int.h"
#include "util.h"

int tpu__runtime_shard_spec(const struct tpu_estimator *e, enum tpu_mode mode,
                            struct tpu_shard_spec *s, struct tpu_diag *d)
{
    const struct tpu_run_config *c = &e->cfg;
    memset(s, 0, sizeof *s);
    tpu_shard_spec_set_config(s, c, e->hosts, e->chips_per_host,
                              tpu_device_chip(e->dev)->cores_per_chip, mode);
    if (!e->model.infeed_shapes) {
        if (c->n_input_partition_dims)
            return tpu__fail(d, TPU_EUNSUPPORTED, "input_partition_dims are given, but the "
                             "model does not describe its input tensors' shapes (its "
                             "infeed_shapes is NULL), so they cannot be cut into slices; "
                             "use a model that does (the layer-graph models of net.h do), "
                             "or leave input_partition_dims out");
        return 0;
    }
    struct tpu_infeed_shape sh[4];
    memset(sh, 0, sizeof sh);
    uint32_t n = 0;
    const bool weighted = mode == TPU_MODE_TRAIN && c->sample_weights;
    int rc = e->model.infeed_shapes(e->model.ctx, mode, weighted, &n, sh, d);
    if (rc)
        return rc;
    if (n > TPU_SHARD_MAX_TENSORS || n > 4)
        return tpu__fail(d, TPU_EINVAL, "the model describes %u infeed tensors; at most %d",
                         n, TPU_SHARD_MAX_TENSORS);
    s->n_tensors = n;
    for (uint32_t t = 0; t < n; t++) {
        struct tpu_shard_tensor *st = &s->tensors[t];
        if (sh[t].rank < 1 || sh[t].rank > TPU_PARTITION_MAX_RANK - 1)
            return tpu__fail(d, TPU_EINVAL, "the model's infeed tensor %u ('%.31s') has rank "
                             "%u per example; 1 to %d are possible", t, sh[t].name,
                             sh[t].rank, TPU_PARTITION_MAX_RANK - 1);
        memcpy(st->name, sh[t].name, sizeof st->name);
        st->name[sizeof st->name - 1] = '\0';
        st->rank = sh[t].rank;
        memcpy(st->shape, sh[t].dims, sizeof st->shape);
    }
    tpu_shard_spec_set_dims(s, c);
    return 0;
}

int tpu__runtime_plan(const struct tpu_estimator *e, enum tpu_mode mode,
                      struct tpu_shard_spec *s, struct tpu_shard_plan *plan, struct tpu_diag *d)
{
    memset(plan, 0, sizeof *plan);
    int rc = tpu__runtime_shard_spec(e, mode, s, d);
    if (rc)
        return rc;
    return tpu_shard_plan_make(s, plan, d);
}

size_t tpu__runtime_row_bytes(const struct tpu_estimator *e, const struct tpu_shard_spec *s,
                              uint32_t t)
{
    const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, e->mp.infeed[t]);
    const size_t esize = tpu_dtype_bytes(b->dtype);
    if (t >= s->n_tensors)
        return (size_t)b->cols * esize;
    size_t n = 1;
    for (uint32_t i = 0; i < s->tensors[t].rank; i++)
        n *= (size_t)s->tensors[t].shape[i];
    return n * esize;
}
