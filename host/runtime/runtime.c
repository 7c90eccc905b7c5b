/* The estimator: train, evaluate and predict on the simulated chip (runtime.h).
 *
 * This file holds the estimator's life cycle (create checks the run configuration), the
 * model's params (a host copy kept across program switches, the device's copy, replica 0's
 * read back), restoring and saving checkpoints, loading the program of each mode, and the
 * train, evaluate and predict entry points. What happens during one of those calls (the
 * infeed and outfeed threads, the loop of launches, host time, the metrics log) is in
 * runtime_pass.c, whose opening comment draws it.
 *
 * The params hold the whole training state (optimizer state too), by name: a fresh start
 * initializes them with the model's init_param, otherwise the latest checkpoint in model_dir
 * restores them. Training writes a checkpoint before its first step when model_dir holds
 * none, so there is always one to go back to. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "tpusim/checkpoint.h"
#include "util.h"

/* ---- the estimator -------------------------------------------------------------------------- */

int tpu_estimator_create(struct tpu_device *dev, const struct tpu_run_config *cfg,
                         const struct tpu_model *model, const struct tpu_hook *hooks,
                         size_t n_hooks, struct tpu_estimator **out, struct tpu_diag *d)
{
    int rc = tpu__run_config_check(cfg, dev, d);
    if (rc)
        return rc;
    if (!model || !model->build)
        return tpu__fail(d, TPU_EINVAL, "the model has no build function");
    struct tpu_estimator *e = calloc(1, sizeof *e);
    if (!e)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    e->dev = dev;
    e->cfg = *cfg;
    e->model = *model;
    /* with a host group, the estimator works in the pod's terms (runtime_pod.c): its cores
     * and replicas are every host's, of which this process holds its own */
    const uint32_t parts = cfg->host_group ? cfg->host_group->n : 1;
    e->local_cores = tpu_device_n_cores(dev);
    e->core0 = cfg->host_group ? cfg->host_group->rank * e->local_cores : 0;
    e->group = cfg->host_group;
    e->n_replicas = tpu_device_n_replicas(dev) * parts;
    e->n_cores = e->local_cores * parts;
    e->hz = tpu_device_chip(dev)->clock_mhz * 1e6;
    e->timing_only = tpu_device_timing_only(dev);
    atomic_init(&e->stop, 0);
    atomic_init(&e->group_aborted, 0);
    if (n_hooks) {
        e->hooks = calloc(n_hooks, sizeof *e->hooks);
        if (!e->hooks) {
            free(e);
            return tpu__fail(d, TPU_ENOMEM, "out of memory");
        }
        memcpy(e->hooks, hooks, n_hooks * sizeof *hooks);
        e->n_hooks = n_hooks;
    }
    e->hosts = cfg->num_hosts;
    e->chips_per_host = e->n_cores / tpu_device_chip(dev)->cores_per_chip / e->hosts;
    rc = tpu__run_config_check_plan(e, d);
    if (rc) {
        free(e->hooks);
        free(e);
        return rc;
    }
    e->wall_start = tpu__runtime_wall_s();
    *out = e;
    return 0;
}

static void free_params(struct tpu_estimator *e)
{
    for (size_t i = 0; i < e->n_params; i++)
        free(e->params[i].data);
    free(e->params);
    e->params = NULL;
    e->n_params = 0;
}

void tpu_estimator_destroy(struct tpu_estimator **pe)
{
    if (!pe || !*pe)
        return;
    struct tpu_estimator *e = *pe;
    tpu_program_destroy(&e->mp.prog);
    free_params(e);
    free(e->hooks);
    for (int m = 0; m < 3; m++)
        tpu_tuner_destroy(&e->tuners[m]);
    if (e->metrics)
        fclose(e->metrics);
    free(e);
    *pe = NULL;
}

const struct tpu_tuner *tpu_estimator_tuner(const struct tpu_estimator *e, enum tpu_mode mode)
{
    return (unsigned)mode <= TPU_MODE_PREDICT ? e->tuners[mode] : NULL;
}

void tpu_estimator_request_stop(struct tpu_estimator *e)
{
    atomic_store(&e->stop, 1);
}

static const char *const mode_word[] = {"training", "evaluation", "prediction"};

int tpu_estimator_check_mode(const struct tpu_estimator *e, enum tpu_mode mode,
                             struct tpu_diag *d)
{
    static const char *const field[] = {"train_batch_size", "eval_batch_size",
                                        "predict_batch_size"};
    if ((unsigned)mode > TPU_MODE_PREDICT)
        return tpu__fail(d, TPU_EINVAL, "mode %d is not train, eval or predict", (int)mode);
    const uint32_t g = mode == TPU_MODE_TRAIN  ? e->cfg.train_batch_size
                       : mode == TPU_MODE_EVAL ? e->cfg.eval_batch_size
                                               : e->cfg.predict_batch_size;
    if (!g)
        return tpu__fail(d, TPU_EINVAL, "%s is not set; %s needs the global batch size, a "
                         "multiple of the %u replicas", field[mode], mode_word[mode],
                         e->n_replicas);
    if (mode != TPU_MODE_TRAIN && e->timing_only)
        return tpu__fail(d, TPU_EUNSUPPORTED, "%s reports values (%s), which a timing-only "
                         "device does not compute; open the device without timing_only",
                         mode_word[mode], mode == TPU_MODE_EVAL ? "loss and accuracy"
                                                                : "the model's outputs");
    struct tpu_shard_spec s;
    struct tpu_shard_plan plan;
    int rc = tpu__runtime_plan(e, mode, &s, &plan, d);
    tpu_shard_plan_free(&plan);
    return rc;
}

/* A stop was requested: TPU_ECANCELED with a sentence, before any work of a call. A pod's
 * hosts decide it together at the pass's start (tpu__pod_agree), so that none starts alone. */
static int stopped_before(const struct tpu_estimator *e, enum tpu_mode mode, struct tpu_diag *d)
{
    if (e->group || !atomic_load(&e->stop))
        return 0;
    return tpu__fail(d, TPU_ECANCELED, "%s not started: a stop was requested (global step "
                     "%llu)", mode_word[mode], (unsigned long long)e->global_step);
}

uint64_t tpu_estimator_global_step(const struct tpu_estimator *e)
{
    return e->global_step;
}

const struct tpu_loop_info *tpu_estimator_last_info(const struct tpu_estimator *e)
{
    return &e->last;
}

/* ---- params: host copy, device copy, checkpoints ------------------------------------------ */

static struct tpu__host_param *find_param(struct tpu_estimator *e, const char *name)
{
    for (size_t i = 0; i < e->n_params; i++)
        if (!strcmp(e->params[i].name, name))
            return &e->params[i];
    return NULL;
}

/* Param i of the loaded program as the host holds it: the full shape (a split param's
 * device buffer holds one core's part of it, runtime.h). */
static void host_shape(const struct tpu_model_program *mp, uint32_t i, uint32_t *rows,
                       uint32_t *cols)
{
    const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
    *rows = mp->param_split[i] == TPU_SPLIT_ROWS ? mp->param_full[i] : b->rows;
    *cols = mp->param_split[i] == TPU_SPLIT_COLS ? mp->param_full[i] : b->cols;
}

/* Copies between a full param [rows][cols] (the host's) and logical core k's part of it (the
 * device buffer [brows][bcols], runtime.h's layout): to_part 1 fills the part (zero past the
 * end of the full param), 0 puts the part back into the full param. */
static void copy_part(enum tpu_param_split split, uint32_t k, float *full, uint32_t rows,
                      uint32_t cols, float *part, uint32_t brows, uint32_t bcols, bool to_part)
{
    for (uint32_t r = 0; r < brows; r++)
        for (uint32_t c = 0; c < bcols; c++) {
            uint64_t fr = r, fc = c;
            if (split == TPU_SPLIT_ROWS)
                fr += (uint64_t)k * brows;
            else
                fc += (uint64_t)k * bcols;
            const bool inside = fr < rows && fc < cols;
            float *pv = &part[(size_t)r * bcols + c];
            if (to_part)
                *pv = inside ? full[fr * cols + fc] : 0.0f;
            else if (inside)
                full[fr * cols + fc] = *pv;
        }
}

/* Checks the split of every param of a freshly built program against its buffers: the cut
 * dimension holds ceil(full / P) of the full param's. A model that breaks it is refused. */
static int check_splits(const struct tpu_estimator *e, const struct tpu_model_program *mp,
                        struct tpu_diag *d)
{
    const uint32_t P = e->n_cores / e->n_replicas;
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
        const uint8_t split = mp->param_split[i];
        if (split == TPU_SPLIT_NONE)
            continue;
        const uint32_t part = split == TPU_SPLIT_ROWS ? b->rows : b->cols;
        const uint32_t full = mp->param_full[i];
        if (split > TPU_SPLIT_COLS || full < 1 || part != (full + P - 1) / P)
            return tpu__fail(d, TPU_ESHAPE, "the %s program '%s' splits param '%s' (split %u) "
                             "with a full size of %u over %u cores per replica, but its buffer "
                             "is [%u, %u]; a split param's cut dimension must be ceil(full / "
                             "cores per replica) = %u (a bug in the model's build)",
                             mode_word[e->mode_loading], tpu_program_name(mp->prog), b->name,
                             split, full, P, b->rows, b->cols, full ? (full + P - 1) / P : 0);
    }
    return 0;
}

/* Grows *buf (*cap bytes) to hold `bytes`: the scratch for a split param's slices. */
static int part_buffer(float **buf, size_t *cap, size_t bytes, const char *name,
                       struct tpu_diag *d)
{
    if (bytes <= *cap)
        return 0;
    float *np = realloc(*buf, bytes);
    if (!np)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for param '%s'", name);
    *buf = np;
    *cap = bytes;
    return 0;
}

/* Every core gets its params: the whole param, or (a split param) its logical core's part. */
static int params_to_device(struct tpu_estimator *e, struct tpu_diag *d)
{
    const uint32_t P = e->n_cores / e->n_replicas;
    float *part = NULL;
    size_t part_cap = 0;
    int rc = 0;
    for (uint32_t i = 0; i < e->mp.n_params && !e->timing_only && !rc; i++) {
        uint32_t id = e->mp.params[i];
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, id);
        struct tpu__host_param *hp = find_param(e, b->name);
        const enum tpu_param_split split = (enum tpu_param_split)e->mp.param_split[i];
        const size_t bytes = (size_t)b->rows * b->cols * sizeof(float);
        if (split != TPU_SPLIT_NONE && (rc = part_buffer(&part, &part_cap, bytes, b->name, d)))
            break;
        for (uint32_t c = 0; c < e->n_cores && !rc; c++) {
            uint32_t core;
            if (!tpu__own_core(e, c, &core))
                continue; /* another host's process writes its cores */
            const float *src = hp->data;
            if (split != TPU_SPLIT_NONE) {
                copy_part(split, c % P, hp->data, hp->rows, hp->cols, part, b->rows, b->cols,
                          true);
                src = part;
            }
            rc = tpu_device_write(e->dev, core, id, src, bytes, d);
        }
    }
    free(part);
    if (rc)
        return rc;
    tpu_device_set_var(e->dev, e->mp.var_step, (int64_t)e->global_step);
    e->params_on_device = true;
    return 0;
}

/* Replica 0's params into the host copy: a whole param from core 0, a split one from each of
 * replica 0's cores (logical core k is core k). A pod's host reads its own first replica
 * (device cores 0 ..): every replica holds the same params after each step. */
static int params_from_device(struct tpu_estimator *e, struct tpu_diag *d)
{
    if (!e->loaded || !e->params_on_device || e->timing_only)
        return 0;
    const uint32_t P = e->n_cores / e->n_replicas;
    float *part = NULL;
    size_t part_cap = 0;
    int rc = 0;
    for (uint32_t i = 0; i < e->mp.n_params && !rc; i++) {
        uint32_t id = e->mp.params[i];
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, id);
        struct tpu__host_param *hp = find_param(e, b->name);
        const enum tpu_param_split split = (enum tpu_param_split)e->mp.param_split[i];
        const size_t bytes = (size_t)b->rows * b->cols * sizeof(float);
        if (split == TPU_SPLIT_NONE) {
            rc = tpu_device_read(e->dev, 0, id, hp->data, bytes, d);
            continue;
        }
        if ((rc = part_buffer(&part, &part_cap, bytes, b->name, d)))
            break;
        for (uint32_t k = 0; k < P && !rc; k++) {
            rc = tpu_device_read(e->dev, k, id, part, bytes, d);
            if (!rc)
                copy_part(split, k, hp->data, hp->rows, hp->cols, part, b->rows, b->cols,
                          false);
        }
    }
    free(part);
    return rc;
}

/* The host copy of param `name`, which a caller reads or writes with `bytes` bytes. */
static int host_param_of_size(struct tpu_estimator *e, const char *name, size_t bytes,
                              struct tpu__host_param **out, struct tpu_diag *d)
{
    struct tpu__host_param *hp = find_param(e, name);
    if (!hp)
        return tpu__fail(d, TPU_ENOTFOUND, "the model has no param '%s'", name);
    if (bytes != (size_t)hp->rows * hp->cols * sizeof(float))
        return tpu__fail(d, TPU_ESHAPE, "param '%s' is [%u, %u] f32: %zu bytes, not %zu", name,
                         hp->rows, hp->cols, (size_t)hp->rows * hp->cols * sizeof(float), bytes);
    *out = hp;
    return 0;
}

int tpu_estimator_read_param(const struct tpu_estimator *e, const char *name, float *data,
                             size_t bytes, struct tpu_diag *d)
{
    struct tpu_estimator *m = (struct tpu_estimator *)e;
    if (e->timing_only)
        return tpu__fail(d, TPU_EUNSUPPORTED, "param '%s': a timing-only device computes no "
                         "values", name);
    int rc = params_from_device(m, d);
    if (rc)
        return rc;
    struct tpu__host_param *hp;
    if ((rc = host_param_of_size(m, name, bytes, &hp, d)))
        return rc;
    memcpy(data, hp->data, bytes);
    return 0;
}

int tpu_estimator_read_param_replica(const struct tpu_estimator *e, const char *name,
                                     uint32_t replica, float *data, size_t bytes,
                                     struct tpu_diag *d)
{
    if (replica >= e->n_replicas)
        return tpu__fail(d, TPU_EINVAL, "param '%s' of replica %u: the device has %u "
                         "replica%s (0 to %u); give one of those", name, replica, e->n_replicas,
                         e->n_replicas == 1 ? "" : "s", e->n_replicas - 1);
    const uint32_t P = e->n_cores / e->n_replicas;
    uint32_t core0;
    if (!tpu__own_core(e, replica * P, &core0))
        return tpu__fail(d, TPU_EINVAL, "param '%s' of replica %u: host %u's process holds "
                         "it; this one (host %u) holds replicas %u to %u; read it there",
                         name, replica, replica * P / e->local_cores, e->group->rank,
                         e->core0 / P, (e->core0 + e->local_cores) / P - 1);
    /* the host copy: replica 0's, or every replica's while the device is not newer */
    int rc = tpu_estimator_read_param(e, name, data, bytes, d);
    if (rc || core0 == 0 || !e->loaded || !e->params_on_device)
        return rc;
    for (uint32_t i = 0; i < e->mp.n_params; i++) {
        const uint32_t id = e->mp.params[i];
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, id);
        if (strcmp(b->name, name))
            continue;
        const enum tpu_param_split split = (enum tpu_param_split)e->mp.param_split[i];
        const size_t part_bytes = (size_t)b->rows * b->cols * sizeof(float);
        if (split == TPU_SPLIT_NONE)
            return tpu_device_read(e->dev, core0, id, data, part_bytes, d);
        float *part = malloc(part_bytes);
        if (!part)
            return tpu__fail(d, TPU_ENOMEM, "out of memory for param '%s'", name);
        const struct tpu__host_param *hp = find_param((struct tpu_estimator *)e, name);
        for (uint32_t k = 0; k < P && !rc; k++) {
            rc = tpu_device_read(e->dev, core0 + k, id, part, part_bytes, d);
            if (!rc)
                copy_part(split, k, data, hp->rows, hp->cols, part, b->rows, b->cols, false);
        }
        free(part);
        return rc;
    }
    return 0; /* a host-only param: the host copy is every replica's */
}

int tpu_estimator_write_param(struct tpu_estimator *e, const char *name, const float *data,
                              size_t bytes, struct tpu_diag *d)
{
    if (e->timing_only)
        return tpu__fail(d, TPU_EUNSUPPORTED, "param '%s': a timing-only device computes no "
                         "values", name);
    if (!e->loaded || !e->have_params)
        return tpu__fail(d, TPU_EINVAL, "param '%s': the estimator has no params yet; train, "
                         "evaluate or predict first (they initialize or restore them)", name);
    int rc = params_from_device(e, d); /* the other params: the device's newer values */
    if (rc)
        return rc;
    struct tpu__host_param *hp;
    if ((rc = host_param_of_size(e, name, bytes, &hp, d)))
        return rc;
    memcpy(hp->data, data, bytes);
    e->params_on_device = false; /* the host copy is newer: the next launch writes it */
    return 0;
}

int tpu__runtime_save_checkpoint(struct tpu_estimator *e, struct tpu_diag *d)
{
    /* a pod: host 0 writes (it holds replica 0); every host restores from it */
    if (!e->cfg.model_dir[0] || e->timing_only || (e->group && e->group->rank != 0))
        return 0;
    int rc = params_from_device(e, d);
    if (rc)
        return rc;
    struct tpu_tensor *t = calloc(e->n_params ? e->n_params : 1, sizeof *t);
    if (!t)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    for (size_t i = 0; i < e->n_params; i++)
        t[i] = (struct tpu_tensor){.name = e->params[i].name, .dtype = TPU_F32,
                                   .rows = e->params[i].rows, .cols = e->params[i].cols,
                                   .data = e->params[i].data};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.keep_max = e->cfg.keep_checkpoint_max;
    rc = tpu_checkpoint_save(e->cfg.model_dir, e->global_step, t, e->n_params, &o, NULL, 0, d);
    free(t);
    return rc;
}

/* Adds a host param of the given shape, or checks the shape of the one there. */
static int host_param(struct tpu_estimator *e, const char *name, uint32_t rows, uint32_t cols,
                      const char *what, struct tpu_diag *d)
{
    struct tpu__host_param *hp = find_param(e, name);
    if (hp) {
        if (hp->rows != rows || hp->cols != cols)
            return tpu__fail(d, TPU_ESHAPE, "param '%s' is [%u, %u] in %s but [%u, %u] in the "
                             "model; it was saved from a model of another shape", name, rows,
                             cols, what, hp->rows, hp->cols);
        return 0;
    }
    struct tpu__host_param *np = realloc(e->params, (e->n_params + 1) * sizeof *np);
    if (!np)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    e->params = np;
    hp = &e->params[e->n_params];
    memset(hp, 0, sizeof *hp);
    snprintf(hp->name, sizeof hp->name, "%s", name);
    hp->rows = rows;
    hp->cols = cols;
    hp->data = calloc((size_t)rows * cols, sizeof(float));
    if (!hp->data)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for param '%s'", name);
    e->n_params++;
    return 0;
}

/* Makes sure every param of the loaded program has a host copy (new ones: zero). */
static int ensure_host_params(struct tpu_estimator *e, struct tpu_diag *d)
{
    for (uint32_t i = 0; i < e->mp.n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, e->mp.params[i]);
        uint32_t rows, cols;
        host_shape(&e->mp, i, &rows, &cols);
        int rc = host_param(e, b->name, rows, cols, tpu_program_name(e->mp.prog), d);
        if (rc)
            return rc;
    }
    return 0;
}

/* Restores the latest checkpoint into the host copy: 1 restored, 0 none, < 0 error. The
 * checkpoint holds the whole training state (optimizer state too); every tensor of it
 * becomes a host param, and every param of the loaded program must be among them. */
static int restore_checkpoint(struct tpu_estimator *e, struct tpu_diag *d)
{
    if (!e->cfg.model_dir[0])
        return 0;
    char path[1024];
    uint64_t step = 0;
    int rc = tpu_checkpoint_latest(e->cfg.model_dir, &step, path, sizeof path, d);
    if (rc == TPU_ENOTFOUND) {
        tpu_diag_clear(d);
        return 0;
    }
    if (rc)
        return rc;
    struct tpu_checkpoint_info info;
    if ((rc = tpu_checkpoint_inspect(path, &info, d)))
        return rc;
    for (size_t i = 0; i < info.n_tensors && !rc; i++) {
        const struct tpu_tensor *t = &info.tensors[i];
        if (t->dtype != TPU_F32)
            rc = tpu__fail(d, TPU_ESHAPE, "%s: tensor '%s' is not f32; it was not written by "
                           "this runtime", path, t->name);
        else
            rc = host_param(e, t->name, t->rows, t->cols, path, d);
    }
    for (uint32_t i = 0; i < e->mp.n_params && !rc; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, e->mp.params[i]);
        bool found = false;
        for (size_t k = 0; k < info.n_tensors; k++)
            found = found || !strcmp(info.tensors[k].name, b->name);
        if (!found)
            rc = tpu__fail(d, TPU_ESHAPE, "%s has no param '%s' that the %s program needs; it "
                           "was saved from a different model; use an empty model_dir, or the "
                           "model and optimizer it was saved with", path, b->name,
                           tpu_program_name(e->mp.prog));
    }
    struct tpu_tensor *t = NULL;
    if (!rc) {
        t = calloc(info.n_tensors ? info.n_tensors : 1, sizeof *t);
        if (!t)
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    for (size_t i = 0; !rc && i < info.n_tensors; i++) {
        struct tpu__host_param *hp = find_param(e, info.tensors[i].name);
        t[i] = (struct tpu_tensor){.name = hp->name, .dtype = TPU_F32, .rows = hp->rows,
                                   .cols = hp->cols, .data = hp->data};
    }
    uint64_t got_step = 0;
    if (!rc)
        rc = tpu_checkpoint_load(path, t, info.n_tensors, &got_step, d);
    free(t);
    tpu_checkpoint_info_free(&info);
    if (rc)
        return rc;
    e->global_step = got_step;
    return 1;
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* What one core's buffers of a program take (tpu_device_load aligns each to 64 bytes). */
static uint64_t program_core_bytes(const struct tpu_program *p)
{
    uint64_t bytes = 0;
    for (size_t b = 0; b < tpu_program_n_buffers(p); b++)
        bytes += (tpu_buffer_bytes(tpu_program_buffer(p, (uint32_t)b)) + 63) / 64 * 64;
    return bytes;
}

/* The input batches a pass's infeed threads hold (mode_shape, feed_need_of): their rows,
 * summed over the batches, and the infeed threads. */
struct feed_need {
    uint64_t rows;
    uint32_t feeders;
};

/* Refuses, before anything is allocated, a program whose host memory would not fit in what
 * the process can still allocate. What it counts (what tpu_device_load and a pass allocate):
 * every core's copy of every buffer (64-byte aligned), the slots of every core's infeed and
 * outfeed queues holding one step's tensors each, the host copies of params not yet held, and
 * the infeed threads' batches (each thread's call batch, unweighted training's held batches
 * of a step, a scratch slice when a tensor is partitioned), less the buffers of the program
 * it replaces (freed first). It
 * leaves out what is small or bounded (program copies, thread
 * stacks, per-step bookkeeping) and what is already allocated (datasets, the device's
 * structures: those already reduce what is available). A timing-only device holds no values:
 * only its host copies count. */
static int check_host_memory(struct tpu_estimator *e, const struct tpu_model_program *mp,
                             const struct tpu_shard_spec *spec, const struct feed_need *feed,
                             struct tpu_diag *d)
{
    const struct tpu_chip_config *chip = tpu_device_chip(e->dev);
    uint64_t core_bytes = program_core_bytes(mp->prog), params = 0, batch = 0, scratch = 0;
    uint64_t in_step = 0, out_step = 0;
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        in_step += tpu_buffer_bytes(b);
        /* the call's tensors are whole (a partitioned one is cut as it is queued) */
        uint64_t row = (uint64_t)b->cols * tpu_dtype_bytes(b->dtype);
        if (t < spec->n_tensors) {
            row = tpu_dtype_bytes(b->dtype);
            for (uint32_t i = 0; i < spec->tensors[t].rank; i++)
                row *= spec->tensors[t].shape[i];
            /* a partitioned tensor is cut into a scratch slice: at most a core's buffer */
            if (spec->tensors[t].dims.rank > 0 && tpu_buffer_bytes(b) > scratch)
                scratch = tpu_buffer_bytes(b);
        }
        /* the rows of every batch the infeed threads hold (feed_need) */
        batch += feed->rows * row;
    }
    batch += scratch * feed->feeders;
    for (uint32_t t = 0; t < mp->n_outfeed; t++)
        out_step += tpu_buffer_bytes(tpu_program_buffer(mp->prog, mp->outfeed[t]));
    for (uint32_t i = 0; i < mp->n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->params[i]);
        uint32_t rows, cols;
        host_shape(mp, i, &rows, &cols);
        if (!find_param(e, b->name))
            params += (uint64_t)rows * cols * sizeof(float);
    }
    uint64_t queues = in_step * chip->infeed_queue_depth + out_step * chip->outfeed_queue_depth;
    /* this process's cores (a pod's host holds its own) */
    const uint64_t device = e->timing_only ? 0 : e->local_cores * (core_bytes + queues);
    const double need = (double)device + (double)params + (double)batch;
    uint64_t avail;
    char what[96];
    if (tpu__host_memory_available(&avail, what, sizeof what))
        return 0;
    /* the loaded program's buffers are freed before the new ones are allocated */
    const uint64_t freed = e->loaded && !e->timing_only ? program_core_bytes(e->mp.prog) : 0;
    if (need <= (double)avail + (double)freed * e->local_cores)
        return 0;
    avail += freed * e->local_cores;
    return tpu__fail(d, TPU_ENOMEM,
                     "the %s program '%s' needs about %.1f MiB of host memory (%u cores x "
                     "%.1f MiB of buffers and %.1f MiB of feed queues, %.1f MiB of host param "
                     "copies, %.1f MiB of input batches), but only %.1f MiB can be allocated "
                     "(%s); use fewer chips or cores, a smaller model or batch, or a "
                     "timing-only device (it holds no values)",
                     mode_word[e->mode_loading], tpu_program_name(mp->prog), need / 1048576.0,
                     e->local_cores, mib(core_bytes), mib(queues), mib(params), mib(batch),
                     mib(avail), what);
}

/* The input batches the infeed threads of a pass of `plan` allocate (runtime_feed.c), for
 * the host memory check: each feeder (one per host that makes calls; a pod's host has one,
 * its own) holds a call batch of the plan's first call's rows, and in unweighted training
 * one held batch per call it makes for this process's cores, of the call's rows (held_alloc;
 * a timing-only device's held batches have no buffers). */
static void feed_need_of(const struct tpu_estimator *e, const struct tpu_shard_plan *plan,
                         bool held, struct feed_need *f)
{
    memset(f, 0, sizeof *f);
    const uint32_t cpr = plan->cores_per_replica ? plan->cores_per_replica : 1;
    const uint32_t first = e->core0 / cpr, end = first + e->local_cores / cpr;
    for (uint32_t h = 0; h < plan->hosts; h++) {
        if (e->group && h != e->group->rank)
            continue;
        bool any = false;
        for (uint32_t c = 0; c < plan->n_calls; c++) {
            const struct tpu_shard_call *call = &plan->calls[c];
            if (call->host != h && !e->group)
                continue;
            any = true;
            if (held && call->first_replica < end && call->first_replica + call->n_replicas > first)
                f->rows += call->batch;
        }
        if (any) {
            f->feeders++;
            f->rows += plan->calls[0].batch;
        }
    }
}

/* The shape the program of `mode` is built for under the current configuration, its shard
 * spec, and the input batches a pass holds (for the host memory check). */
static int mode_shape(const struct tpu_estimator *e, enum tpu_mode mode,
                      struct tpu_shard_spec *spec, struct tpu_build_shape *shape,
                      struct feed_need *feed, struct tpu_diag *d)
{
    struct tpu_shard_plan plan;
    int rc = tpu__runtime_plan(e, mode, spec, &plan, d);
    const uint32_t per_replica = plan.per_replica_batch;
    if (!rc)
        feed_need_of(e, &plan,
                     mode == TPU_MODE_TRAIN && !e->cfg.sample_weights && !e->timing_only, feed);
    tpu_shard_plan_free(&plan);
    if (rc)
        return rc;
    memset(shape, 0, sizeof *shape);
    shape->batch_per_replica = per_replica;
    shape->global_batch = spec->global_batch; /* BROADCAST: the per-replica batch */
    shape->n_replicas = e->n_replicas;
    shape->cores_per_replica = e->n_cores / e->n_replicas;
    shape->n_dims = e->cfg.n_input_partition_dims;
    memcpy(shape->dims, e->cfg.input_partition_dims, sizeof shape->dims);
    /* the Keras-style flags change the train program only */
    shape->weighted = mode == TPU_MODE_TRAIN && e->cfg.sample_weights;
    shape->train_counts = mode == TPU_MODE_TRAIN && e->cfg.train_counts;
    return 0;
}

static bool same_dims(const struct tpu_partition_dims *a, const struct tpu_partition_dims *b)
{
    if (a->rank != b->rank)
        return false;
    for (uint32_t i = 0; i < a->rank && i < TPU_PARTITION_MAX_RANK; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

static bool same_shape(const struct tpu_build_shape *a, const struct tpu_build_shape *b)
{
    if (a->batch_per_replica != b->batch_per_replica || a->global_batch != b->global_batch ||
        a->n_replicas != b->n_replicas || a->cores_per_replica != b->cores_per_replica ||
        a->n_dims != b->n_dims || a->weighted != b->weighted ||
        a->train_counts != b->train_counts)
        return false;
    for (uint32_t i = 0; i < a->n_dims && i < 2; i++)
        if (!same_dims(&a->dims[i], &b->dims[i]))
            return false;
    return true;
}

/* A train program built with the Keras-style flags must have what they ask for: the row
 * weights f32 [B][1] as its last infeed (weighted), the counts f32 [1][2] after the loss
 * (train_counts). A model that ignores the flags is refused here, before anything runs. */
static int check_keras_shape(const struct tpu_build_shape *sh, const struct tpu_model_program *mp,
                             struct tpu_diag *d)
{
    const char *name = tpu_program_name(mp->prog);
    if (sh->weighted) {
        const struct tpu_buffer_desc *b =
            mp->n_infeed ? tpu_program_buffer(mp->prog, mp->infeed[mp->n_infeed - 1]) : NULL;
        if (!b || b->dtype != TPU_F32 || b->cols != 1)
            return tpu__fail(d, TPU_EUNSUPPORTED, "sample_weights is on, but the train program "
                             "'%s' does not infeed the row weights f32 [batch, 1] after its "
                             "other inputs (its last infeed is %s%s%s); use a model that lowers "
                             "weighted training (struct tpu_build_shape.weighted: net.h's "
                             "nets do), or turn sample_weights off", name,
                             b ? "'" : "none", b ? b->name : "", b ? "'" : "");
    }
    if (sh->train_counts) {
        const struct tpu_buffer_desc *b =
            mp->n_outfeed == 2 ? tpu_program_buffer(mp->prog, mp->outfeed[1]) : NULL;
        if (!b || b->dtype != TPU_F32 || b->rows != 1 || b->cols != 2)
            return tpu__fail(d, TPU_EUNSUPPORTED, "train_counts is on, but the train program "
                             "'%s' outfeeds %u tensor%s, not the loss then the counts f32 "
                             "[1, 2] (correct, real rows); use a model that lowers the counts "
                             "(struct tpu_build_shape.train_counts: net.h's nets do), or turn "
                             "train_counts off", name, mp->n_outfeed,
                             mp->n_outfeed == 1 ? "" : "s");
    }
    return 0;
}

/* ---- the host learning rate ----------------------------------------------------------------- */

static bool is_optimizer(enum tpu_opcode c)
{
    return c == TPU_OP_SGD_MOMENTUM || c == TPU_OP_ADAM || c == TPU_OP_ADAMW;
}

/* What a train program says of its learning rate: its optimizer ops' schedule (the first
 * host-scheduled one's, else the first one's) and alpha, and the variable the host-scheduled
 * ops read (their lr_var: the net lowering's "learning_rate"), which must be one for all. */
static void lr_info_of(const struct tpu_program *prog, struct tpu__lr_info *li)
{
    memset(li, 0, sizeof *li);
    li->known = true;
    li->schedule = -1;
    snprintf(li->program, sizeof li->program, "%s", tpu_program_name(prog));
    bool one_var = true;
    for (size_t i = 0; i < tpu_program_n_ops(prog); i++) {
        const struct tpu_op *op = tpu_program_op(prog, i);
        if (!is_optimizer(op->code))
            continue;
        if (op->attrs.schedule != TPU_SCHEDULE_HOST) {
            if (li->schedule < 0) {
                li->schedule = op->attrs.schedule;
                li->alpha = op->attrs.alpha;
            }
            continue;
        }
        if (li->schedule != TPU_SCHEDULE_HOST) {
            li->schedule = TPU_SCHEDULE_HOST;
            li->alpha = op->attrs.alpha;
            li->var = op->attrs.lr_var;
        } else if (op->attrs.lr_var != li->var) {
            one_var = false;
            li->var2 = op->attrs.lr_var;
        }
    }
    li->has_var = li->schedule == TPU_SCHEDULE_HOST && one_var &&
                  li->var < tpu_program_n_vars(prog);
    if (li->schedule == TPU_SCHEDULE_HOST) {
        snprintf(li->var_name, sizeof li->var_name, "%s", tpu_program_var_name(prog, li->var));
        snprintf(li->var2_name, sizeof li->var2_name, "%s",
                 one_var ? "" : tpu_program_var_name(prog, li->var2));
    }
}

/* The train program's learning-rate facts: from the loaded train program, or (none loaded)
 * from one built to look at and destroyed (the train batch size must be set). */
static int lr_info_get(struct tpu_estimator *e, struct tpu_diag *d)
{
    if (e->lr_info.known)
        return 0;
    if (e->loaded && e->mode == TPU_MODE_TRAIN) {
        lr_info_of(e->mp.prog, &e->lr_info);
        return 0;
    }
    int rc = tpu_estimator_check_mode(e, TPU_MODE_TRAIN, d);
    struct tpu_shard_spec spec;
    struct tpu_build_shape shape;
    struct feed_need feed;
    if (rc || (rc = mode_shape(e, TPU_MODE_TRAIN, &spec, &shape, &feed, d)))
        return rc;
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    if (!mp)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    rc = e->model.build(e->model.ctx, TPU_MODE_TRAIN, &shape, mp, d);
    if (!rc)
        lr_info_of(mp->prog, &e->lr_info);
    tpu_program_destroy(&mp->prog);
    free(mp);
    return rc;
}

/* Whether the train program takes a host learning rate: the message says why not and what
 * to do. */
static int lr_check(const struct tpu__lr_info *li, struct tpu_diag *d)
{
    static const char *const schedule_name[] = {"constant", "step", "cosine"};
    if (li->schedule == TPU_SCHEDULE_HOST && li->has_var)
        return 0;
    if (li->schedule < 0)
        return tpu__fail(d, TPU_EUNSUPPORTED, "the train program '%s' has no optimizer op "
                         "(sgd_momentum, adam or adamw), so it has no learning rate to set; "
                         "use a model that trains with one, built with the host schedule "
                         "(net.h tpu_train_spec.schedule = TPU_SCHEDULE_HOST)", li->program);
    if (li->schedule == TPU_SCHEDULE_HOST)
        return tpu__fail(d, TPU_EINVAL, "the train program '%s' has optimizers with the host "
                         "schedule that read their rate from different variables ('%s' and "
                         "'%s'); the host sets one rate for all, so they must read one "
                         "variable (\"learning_rate\"): a bug in the model's build",
                         li->program, li->var_name, li->var2_name);
    return tpu__fail(d, TPU_EUNSUPPORTED, "the train program '%s' takes its learning rate from "
                     "its optimizer's %s schedule, which the host cannot set; build the model "
                     "with the host schedule (net.h tpu_train_spec.schedule = "
                     "TPU_SCHEDULE_HOST; Keras: compile with it) to set the rate between loops",
                     li->program,
                     li->schedule <= TPU_SCHEDULE_COSINE ? schedule_name[li->schedule] : "unknown");
}

int tpu_estimator_set_learning_rate(struct tpu_estimator *e, float lr, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!isfinite(lr) || lr < 0)
        return tpu__fail(d, TPU_EINVAL, "learning rate %g is not a finite number >= 0; give a "
                         "rate such as 0.001", (double)lr);
    int rc = lr_info_get(e, d);
    if (rc || (rc = lr_check(&e->lr_info, d)))
        return rc;
    e->lr = lr;
    e->lr_set = true;
    return 0;
}

int tpu_estimator_get_learning_rate(const struct tpu_estimator *e, float *lr, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    struct tpu_estimator *m = (struct tpu_estimator *)e; /* may look at the train program */
    int rc = lr_info_get(m, d);
    if (rc || (rc = lr_check(&m->lr_info, d)))
        return rc;
    *lr = e->lr_set ? e->lr : e->lr_info.alpha;
    return 0;
}

/* ---- loading a mode's program ------------------------------------------------------------ */

/* Loads the program of `mode` (if another is loaded, or the configuration changed the shape
 * it is built for) and puts the params on the device. */
static int load_mode(struct tpu_estimator *e, enum tpu_mode mode, struct tpu_diag *d)
{
    struct tpu_shard_spec spec;
    struct tpu_build_shape shape;
    struct feed_need feed;
    int rc = mode_shape(e, mode, &spec, &shape, &feed, d);
    if (rc)
        return rc;
    if (e->loaded && e->mode == mode && same_shape(&e->shape, &shape))
        return e->params_on_device ? 0 : params_to_device(e, d); /* written by write_param */
    e->mode_loading = mode;
    if ((rc = params_from_device(e, d)))
        return rc;
    struct tpu_model_program *mp = calloc(1, sizeof *mp); /* ~50 KB: not on the stack */
    if (!mp)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    rc = e->model.build(e->model.ctx, mode, &shape, mp, d);
    if (!rc && ((rc = check_splits(e, mp, d)) || (rc = check_keras_shape(&shape, mp, d)) ||
                (rc = tpu_program_verify(mp->prog, tpu_device_chip(e->dev), d)) ||
                (rc = check_host_memory(e, mp, &spec, &feed, d)) ||
                (rc = tpu_device_load(e->dev, mp->prog, d))))
        tpu_program_destroy(&mp->prog);
    if (rc) {
        free(mp);
        return rc;
    }
    tpu_program_destroy(&e->mp.prog);
    e->mp = *mp;
    free(mp);
    e->loaded = true;
    e->mode = mode;
    e->batch_per_replica = shape.batch_per_replica;
    e->shape = shape;
    e->params_on_device = false;
    if (mode == TPU_MODE_TRAIN)
        lr_info_of(e->mp.prog, &e->lr_info);
    if ((rc = ensure_host_params(e, d)))
        return rc;
    if (!e->have_params && e->timing_only) {
        e->have_params = true; /* no values: nothing to restore or initialize */
    } else if (!e->have_params) {
        rc = restore_checkpoint(e, d);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            /* fresh start: the model initializes its params (optimizer state starts at 0) */
            for (size_t i = 0; i < e->n_params; i++)
                if (e->model.init_param)
                    e->model.init_param(e->model.ctx, e->params[i].name, e->params[i].rows,
                                        e->params[i].cols, e->params[i].data,
                                        e->cfg.seed + i);
        }
        e->have_params = true;
    }
    return params_to_device(e, d);
}


/* ---- train, evaluate, predict ------------------------------------------------------------ */

/* Prepares pass p of `mode` for `steps` steps and tells the input that it starts (at global
 * step start_step). On failure p is already freed. */
static int begin_pass(struct tpu_estimator *e, struct tpu__pass *p, const struct tpu_input *input,
                      enum tpu_mode mode, uint64_t steps, uint64_t start_step,
                      struct tpu_diag *d)
{
    int rc = tpu__pass_init(p, e, input, mode, d);
    p->steps = steps;
    if (!rc && input->start)
        rc = input->start(input->ctx, mode, start_step, p->global_batch, d);
    if (rc)
        tpu__pass_free(p);
    return rc;
}

/* What train, evaluate and predict do before their pass after their own checks (rc: 0 or
 * their first error): a stop asked before the call, then the mode's program loaded (which
 * may restore the global step from a checkpoint). Then each comes to the pod's agreement
 * (tpu__pod_agree), failed or not, so that no host waits for one that returned. */
static int ready_for_pass(struct tpu_estimator *e, enum tpu_mode mode, int rc,
                          struct tpu_diag *d)
{
    if (!rc)
        rc = stopped_before(e, mode, d);
    if (!rc)
        rc = load_mode(e, mode, d);
    return rc;
}

static int train(struct tpu_estimator *e, const struct tpu_input *input, uint64_t steps,
                 uint64_t max_steps, struct tpu_diag *d)
{
    int rc = tpu_estimator_check_mode(e, TPU_MODE_TRAIN, d);
    if (!rc && steps == 0 && max_steps == 0)
        rc = tpu__fail(d, TPU_EINVAL, "give steps (more steps to train) or max_steps (the "
                       "global step to train up to)");
    rc = ready_for_pass(e, TPU_MODE_TRAIN, rc, d);
    const uint64_t target = steps ? e->global_step + steps : max_steps;
    /* a pod: every host runs the same thing from the same step (runtime_pod.c), checked
     * before host 0 writes anything */
    if ((rc = tpu__pod_agree(e, TPU_MODE_TRAIN, target, rc, d)))
        return rc;
    if (e->global_step >= target) {
        /* as TPUEstimator logs it; nothing ran, so there is no loss to report */
        memset(&e->last, 0, sizeof e->last);
        e->last.mode = TPU_MODE_TRAIN;
        e->last.global_step = e->global_step;
        e->last.loss = e->last.global_loss = NAN;
        e->last.loss_sum = e->last.correct = NAN;
        e->last.total_seconds = (double)e->host_cycle / e->hz;
        if (e->cfg.model_dir[0])
            tpu__fail(d, 0, "warning: training skipped: the checkpoint in %s is already at "
                      "global step %llu, at or past max_steps %llu; raise max_steps (or give "
                      "steps) to train more", e->cfg.model_dir,
                      (unsigned long long)e->global_step, (unsigned long long)target);
        else
            tpu__fail(d, 0, "warning: training skipped: the global step is already %llu, at "
                      "or past max_steps %llu", (unsigned long long)e->global_step,
                      (unsigned long long)target);
        return 0;
    }
    if (e->timing_only && e->cfg.model_dir[0])
        tpu__fail(d, 0, "warning: timing-only: no checkpoints are written to %s (the device "
                  "computes no values to save); metrics.jsonl is", e->cfg.model_dir);
    /* a checkpoint at the start, so there is always one to go back to */
    if (e->cfg.model_dir[0]) {
        char path[1024];
        uint64_t s;
        struct tpu_diag ld = {0};
        if (tpu_checkpoint_latest(e->cfg.model_dir, &s, path, sizeof path, &ld) != 0 &&
            (rc = tpu__runtime_save_checkpoint(e, d)))
            return rc;
    }
    struct tpu__pass p;
    rc = begin_pass(e, &p, input, TPU_MODE_TRAIN, target - e->global_step, e->global_step, d);
    if (rc)
        return rc;
    e->busy = true;
    rc = tpu__pass_run(e, &p, target, d);
    e->busy = false;
    tpu__pass_free(&p);
    return rc;
}

/* The end of a call on a pod's host (runtime_pod.c): a call that failed here alone tells
 * the group (the others may wait for this host); one whose outcome every host reached
 * alike (success, or an agreed error: e->pod_end) waits for every host's end of it, which
 * fails when another host failed; one that failed because another host did returns as it
 * is (that host's abort reports it). Without a host group, rc as it is. */
static int pod_call_end(struct tpu_estimator *e, int rc, struct tpu_diag *d)
{
    if (!e->group)
        return rc;
    const int end = e->pod_end;
    e->pod_end = TPU__POD_END_ABORT;
    if (rc < 0 && end == TPU__POD_END_ABORT) {
        tpu__pod_abort(e, rc, d);
        return rc;
    }
    if (rc < 0 && end == TPU__POD_END_GROUP)
        return rc;
    struct tpu_diag ed = {0};
    const int erc = tpu__pod_end_pass(e, &ed);
    if (erc) {
        if (d)
            *d = ed;
        return erc;
    }
    return rc;
}

int tpu_estimator_train(struct tpu_estimator *e, const struct tpu_input *input, uint64_t steps,
                        uint64_t max_steps, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    e->pod_end = TPU__POD_END_ABORT;
    return pod_call_end(e, train(e, input, steps, max_steps, d), d);
}

static int evaluate(struct tpu_estimator *e, const struct tpu_input *input, uint64_t steps,
                    struct tpu_eval_result *out, struct tpu_diag *d)
{
    int rc = tpu_estimator_check_mode(e, TPU_MODE_EVAL, d);
    rc = ready_for_pass(e, TPU_MODE_EVAL, rc, d);
    if ((rc = tpu__pod_agree(e, TPU_MODE_EVAL, steps, rc, d)))
        return rc;
    struct tpu__pass p;
    rc = begin_pass(e, &p, input, TPU_MODE_EVAL, steps ? steps : UINT64_MAX, 0, d);
    if (rc)
        return rc;
    uint64_t cycle0 = e->host_cycle;
    e->busy = true;
    rc = tpu__pass_run(e, &p, 0, d);
    e->busy = false;
    if (!rc) {
        memset(out, 0, sizeof *out);
        out->examples = (uint64_t)llround(p.count);
        out->loss = p.count > 0 ? p.loss_sum / p.count : 0;
        /* a regression model's counts hold no correct answers: no accuracy */
        out->accuracy = e->mp.no_accuracy ? NAN : p.count > 0 ? p.correct / p.count : 0;
        out->steps = p.drained;
        out->device_seconds = (double)(e->host_cycle - cycle0) / e->hz;
    }
    tpu__pass_free(&p);
    return rc;
}

int tpu_estimator_evaluate(struct tpu_estimator *e, const struct tpu_input *input,
                           uint64_t steps, struct tpu_eval_result *out, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    e->pod_end = TPU__POD_END_ABORT;
    return pod_call_end(e, evaluate(e, input, steps, out, d), d);
}

static int predict(struct tpu_estimator *e, const struct tpu_input *input,
                   void (*emit)(void *ctx, uint64_t index, const float *row, uint32_t cols),
                   void *emit_ctx, uint64_t *n, struct tpu_diag *d)
{
    int rc = tpu_estimator_check_mode(e, TPU_MODE_PREDICT, d);
    rc = ready_for_pass(e, TPU_MODE_PREDICT, rc, d);
    if ((rc = tpu__pod_agree(e, TPU_MODE_PREDICT, 0, rc, d)))
        return rc;
    struct tpu__pass p;
    rc = begin_pass(e, &p, input, TPU_MODE_PREDICT, UINT64_MAX, 0, d);
    if (rc)
        return rc;
    p.emit = emit;
    p.emit_ctx = emit_ctx;
    e->busy = true;
    rc = tpu__pass_run(e, &p, 0, d);
    e->busy = false;
    if (!rc && n)
        *n = p.emitted;
    tpu__pass_free(&p);
    return rc;
}

int tpu_estimator_predict(struct tpu_estimator *e, const struct tpu_input *input,
                          void (*emit)(void *ctx, uint64_t index, const float *row,
                                       uint32_t cols),
                          void *emit_ctx, uint64_t *n, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    e->pod_end = TPU__POD_END_ABORT;
    return pod_call_end(e, predict(e, input, emit, emit_ctx, n, d), d);
}
