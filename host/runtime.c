/* The estimator: train, evaluate and predict on the simulated chip (runtime.h).
 *
 * One pass (a train, evaluate or predict call) is:
 *
 *   caller's thread            infeed thread                 outfeed thread
 *   ---------------            -------------                 --------------
 *   load the mode's program    input_fn -> pad -> per-core   per step, per core: pop the
 *   restore / init params      infeed queues, for every      outfeed tensors; keep
 *   loop: set iterations,      step of the pass, running     replica 0's; host calls;
 *     run the device,          ahead across loop             NaN/Inf check; eval sums;
 *     wait for the outfeed     boundaries (no bubble); at    predict rows
 *     thread to catch up,      the end of the input: close
 *     hooks, checkpoint,       the device's infeed
 *     metrics log
 *
 * Any thread that fails records the first error (under `lock`) and cancels the device, which
 * releases every blocked call; the caller's thread then joins the threads and returns that
 * error. The last checkpoint is never touched by a failing pass: checkpoints are only written
 * at loop boundaries after a successful loop, atomically.
 *
 * Host time (in device cycles, `host_cycle`): a launch starts at the host's clock plus the
 * launch cost; after the loop the host's clock is the device's end plus the boundary's
 * costs (hooks, logging, checkpoint); the infeed thread keeps its own clock, advanced by the
 * input cost of each batch. Costs are modeled constants or measured wall time (config). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tpusim/checkpoint.h"
#include "tpusim/runtime.h"
#include "util.h"

/* A param's host copy, kept across program switches (train -> eval keeps the weights). */
struct host_param {
    char name[48];
    uint32_t rows, cols;
    float *data;
};

struct tpu_estimator {
    struct tpu_device *dev;
    struct tpu_run_config cfg;
    struct tpu_model model;
    struct tpu_hook *hooks;
    size_t n_hooks;
    uint32_t n_replicas, n_cores;
    double hz;

    /* the loaded program */
    bool loaded;
    enum tpu_mode mode;
    uint32_t batch_per_replica;
    struct tpu_model_program mp;

    struct host_param *params; /* the model's state, by name */
    size_t n_params;
    bool have_params;          /* params hold real values (restored or initialized) */
    bool params_on_device;     /* the device's copy is newer than or equal to params */

    uint64_t global_step;
    uint64_t host_cycle;
    double wall_start;
    struct tpu_loop_info last;
    FILE *metrics;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t us_to_cycles(const struct tpu_estimator *e, double us)
{
    return (uint64_t)llround(us * 1e-6 * e->hz);
}

static uint64_t s_to_cycles(const struct tpu_estimator *e, double s)
{
    return (uint64_t)llround(s * e->hz);
}

/* Charges a host phase: the modeled cost, or the wall time since t0. */
static uint64_t host_cost(const struct tpu_estimator *e, double modeled_us, double t0)
{
    if (e->cfg.host_time == TPU_HOST_TIME_MEASURED)
        return s_to_cycles(e, wall_s() - t0);
    return us_to_cycles(e, modeled_us);
}

static int check_config(const struct tpu_run_config *c, const struct tpu_device *dev,
                        struct tpu_diag *d)
{
    const uint32_t cores = tpu_device_n_cores(dev), cpr = c->num_cores_per_replica;
    if (cpr < 1 || cpr > 128 || (cpr & (cpr - 1)))
        return tpu__fail(d, TPU_EINVAL, "num_cores_per_replica %u must be a power of two from 1 "
                         "to 128", cpr);
    if (cpr != tpu_device_n_cores(dev) / tpu_device_n_replicas(dev))
        return tpu__fail(d, TPU_EINVAL, "num_cores_per_replica %u differs from the device's %u; "
                         "open the device with cores_per_replica %u",
                         cpr, tpu_device_n_cores(dev) / tpu_device_n_replicas(dev), cpr);
    if (c->num_shards && c->num_shards != tpu_device_n_replicas(dev))
        return tpu__fail(d, TPU_EINVAL,
                         "num_shards %u does not match the %u replicas of this device (%u cores "
                         "/ %u cores per replica); set num_shards to %u or leave it 0",
                         c->num_shards, tpu_device_n_replicas(dev), cores, cpr,
                         tpu_device_n_replicas(dev));
    if (c->iterations_per_loop_s == 0 && c->iterations_per_loop < 1)
        return tpu__fail(d, TPU_EINVAL, "iterations_per_loop is 0; use at least 1 (or a time "
                         "such as 30s)");
    if (c->iterations_per_loop_s < 0 || !isfinite(c->iterations_per_loop_s))
        return tpu__fail(d, TPU_EINVAL, "iterations_per_loop time %g s must be positive",
                         c->iterations_per_loop_s);
    if (c->initial_infeed_sleep_secs < 0 || c->initial_infeed_sleep_secs > 3600)
        return tpu__fail(d, TPU_EINVAL, "initial_infeed_sleep_secs %g must be from 0 to 3600",
                         c->initial_infeed_sleep_secs);
    if (c->num_hosts != 1)
        return tpu__fail(d, TPU_EUNSUPPORTED, "num_hosts %u: one process simulates one host; "
                         "run several hosts as several processes", c->num_hosts);
    if (c->save_checkpoints_steps && !c->model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "save_checkpoints_steps %llu needs a model_dir to write "
                         "checkpoints to", (unsigned long long)c->save_checkpoints_steps);
    if ((unsigned)c->per_host_input_for_training > TPU_BROADCAST)
        return tpu__fail(d, TPU_EINVAL, "per_host_input_for_training %d is not one of "
                         "PER_SHARD_V1, PER_HOST_V1, PER_HOST_V2, BROADCAST",
                         (int)c->per_host_input_for_training);
    if ((unsigned)c->eval_training_input_configuration > TPU_EVAL_SLICED)
        return tpu__fail(d, TPU_EINVAL, "eval_training_input_configuration %d is not PER_HOST_V1 "
                         "or SLICED", (int)c->eval_training_input_configuration);
    if (c->modeled_launch_us < 0 || c->modeled_hooks_us < 0 || c->modeled_checkpoint_us < 0 ||
        c->modeled_input_us_per_batch < 0)
        return tpu__fail(d, TPU_EINVAL, "modeled host costs must not be negative");
    /* every batch size that is set must split over the replicas */
    for (int m = 0; m < 3; m++) {
        uint32_t g = m == 0 ? c->train_batch_size : m == 1 ? c->eval_batch_size
                                                           : c->predict_batch_size;
        if (!g)
            continue;
        uint32_t pr, calls, per_call;
        int rc = tpu_per_replica_batch(c, (enum tpu_mode)m, tpu_device_n_replicas(dev), &pr,
                                       &calls, &per_call, d);
        if (rc)
            return rc;
    }
    if (!c->train_batch_size && !c->eval_batch_size && !c->predict_batch_size)
        return tpu__fail(d, TPU_EINVAL, "no batch size is set: give train_batch_size (and "
                         "eval_batch_size, predict_batch_size for those modes)");
    return 0;
}

int tpu_estimator_create(struct tpu_device *dev, const struct tpu_run_config *cfg,
                         const struct tpu_model *model, const struct tpu_hook *hooks,
                         size_t n_hooks, struct tpu_estimator **out, struct tpu_diag *d)
{
    int rc = check_config(cfg, dev, d);
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
    e->n_replicas = tpu_device_n_replicas(dev);
    e->n_cores = tpu_device_n_cores(dev);
    e->hz = tpu_device_chip(dev)->clock_mhz * 1e6;
    if (n_hooks) {
        e->hooks = calloc(n_hooks, sizeof *e->hooks);
        if (!e->hooks) {
            free(e);
            return tpu__fail(d, TPU_ENOMEM, "out of memory");
        }
        memcpy(e->hooks, hooks, n_hooks * sizeof *hooks);
        e->n_hooks = n_hooks;
    }
    e->wall_start = wall_s();
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
    if (e->metrics)
        fclose(e->metrics);
    free(e);
    *pe = NULL;
}

uint64_t tpu_estimator_global_step(const struct tpu_estimator *e)
{
    return e->global_step;
}

const struct tpu_loop_info *tpu_estimator_last_info(const struct tpu_estimator *e)
{
    return &e->last;
}

/* ---- params: host copy, device copy, checkpoints --------------------------------------------- */

static struct host_param *find_param(struct tpu_estimator *e, const char *name)
{
    for (size_t i = 0; i < e->n_params; i++)
        if (!strcmp(e->params[i].name, name))
            return &e->params[i];
    return NULL;
}

static int params_to_device(struct tpu_estimator *e, struct tpu_diag *d)
{
    for (uint32_t i = 0; i < e->mp.n_params; i++) {
        uint32_t id = e->mp.params[i];
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, id);
        struct host_param *hp = find_param(e, b->name);
        for (uint32_t c = 0; c < e->n_cores; c++) {
            int rc = tpu_device_write(e->dev, c, id, hp->data,
                                      (size_t)hp->rows * hp->cols * sizeof(float), d);
            if (rc)
                return rc;
        }
    }
    tpu_device_set_var(e->dev, e->mp.var_step, (int64_t)e->global_step);
    e->params_on_device = true;
    return 0;
}

/* Replica 0's params into the host copy. */
static int params_from_device(struct tpu_estimator *e, struct tpu_diag *d)
{
    if (!e->loaded || !e->params_on_device)
        return 0;
    for (uint32_t i = 0; i < e->mp.n_params; i++) {
        uint32_t id = e->mp.params[i];
        const struct tpu_buffer_desc *b = tpu_program_buffer(e->mp.prog, id);
        struct host_param *hp = find_param(e, b->name);
        int rc = tpu_device_read(e->dev, 0, id, hp->data,
                                 (size_t)hp->rows * hp->cols * sizeof(float), d);
        if (rc)
            return rc;
    }
    return 0;
}

int tpu_estimator_read_param(const struct tpu_estimator *e, const char *name, float *data,
                             size_t bytes, struct tpu_diag *d)
{
    struct tpu_estimator *m = (struct tpu_estimator *)e;
    int rc = params_from_device(m, d);
    if (rc)
        return rc;
    struct host_param *hp = find_param(m, name);
    if (!hp)
        return tpu__fail(d, TPU_ENOTFOUND, "the model has no param '%s'", name);
    if (bytes != (size_t)hp->rows * hp->cols * sizeof(float))
        return tpu__fail(d, TPU_ESHAPE, "param '%s' is [%u, %u] f32: %zu bytes, not %zu", name,
                         hp->rows, hp->cols, (size_t)hp->rows * hp->cols * sizeof(float), bytes);
    memcpy(data, hp->data, bytes);
    return 0;
}

static int save_checkpoint(struct tpu_estimator *e, struct tpu_diag *d)
{
    if (!e->cfg.model_dir[0])
        return 0;
    int rc = params_from_device(e, d);
    if (rc)
        return rc;
    struct tpu_tensor *t = calloc(e->n_params ? e->n_params : 1, sizeof *t);
    if (!t)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    for (size_t i = 0; i < e->n_params; i++)
        t[i] = (struct tpu_tensor){.name = e->params[i].name, .dtype = TPU_BUF_F32,
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
    struct host_param *hp = find_param(e, name);
    if (hp) {
        if (hp->rows != rows || hp->cols != cols)
            return tpu__fail(d, TPU_ESHAPE, "param '%s' is [%u, %u] in %s but [%u, %u] in the "
                             "model; it was saved from a model of another shape", name, rows,
                             cols, what, hp->rows, hp->cols);
        return 0;
    }
    struct host_param *np = realloc(e->params, (e->n_params + 1) * sizeof *np);
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
        int rc = host_param(e, b->name, b->rows, b->cols, tpu_program_name(e->mp.prog), d);
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
        if (t->dtype != TPU_BUF_F32)
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
                           "was saved from a different model", path, b->name,
                           tpu_program_name(e->mp.prog));
    }
    struct tpu_tensor *t = NULL;
    if (!rc) {
        t = calloc(info.n_tensors ? info.n_tensors : 1, sizeof *t);
        if (!t)
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    for (size_t i = 0; !rc && i < info.n_tensors; i++) {
        struct host_param *hp = find_param(e, info.tensors[i].name);
        t[i] = (struct tpu_tensor){.name = hp->name, .dtype = TPU_BUF_F32, .rows = hp->rows,
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

/* Loads the program of `mode` (if another is loaded) and puts the params on the device. */
static int load_mode(struct tpu_estimator *e, enum tpu_mode mode, struct tpu_diag *d)
{
    uint32_t per_replica, calls, per_call;
    int rc = tpu_per_replica_batch(&e->cfg, mode, e->n_replicas, &per_replica, &calls,
                                   &per_call, d);
    if (rc)
        return rc;
    if (e->loaded && e->mode == mode && e->batch_per_replica == per_replica)
        return 0;
    if ((rc = params_from_device(e, d)))
        return rc;
    const uint32_t global = per_replica * e->n_replicas;
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    rc = e->model.build(e->model.ctx, mode, per_replica, global, &mp, d);
    if (rc)
        return rc;
    if ((rc = tpu_device_load(e->dev, mp.prog, d))) {
        tpu_program_destroy(&mp.prog);
        return rc;
    }
    tpu_program_destroy(&e->mp.prog);
    e->mp = mp;
    e->loaded = true;
    e->mode = mode;
    e->batch_per_replica = per_replica;
    e->params_on_device = false;
    if ((rc = ensure_host_params(e, d)))
        return rc;
    if (!e->have_params) {
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

/* ---- the threads of a pass --------------------------------------------------------------- */

struct pass {
    struct tpu_estimator *e;
    const struct tpu_input *input;
    enum tpu_mode mode;
    uint64_t steps;               /* steps to feed (UINT64_MAX: until the input ends) */
    uint32_t per_replica, calls, per_call;

    pthread_mutex_t lock;
    pthread_cond_t cv;
    int error;                    /* [lock] first error of any thread */
    struct tpu_diag diag;         /* [lock] */
    bool input_ended;             /* [lock] */
    uint64_t fed;                 /* [lock] complete steps queued */
    uint64_t drained;             /* [lock] steps whose outfeed was processed */
    uint32_t *real_rows;          /* [lock] real rows per step (eval/predict), grows */
    uint64_t real_cap;
    float *losses;                /* [lock] replica 0's loss per step, grows */
    uint64_t loss_cap;
    /* eval sums [lock] */
    double loss_sum, correct, count;
    /* predict */
    void (*emit)(void *ctx, uint64_t index, const float *row, uint32_t cols);
    void *emit_ctx;
    uint64_t emitted;
    uint64_t step0;               /* global step at the start of the pass */
};

static void pass_fail(struct pass *p, int rc, const struct tpu_diag *d)
{
    pthread_mutex_lock(&p->lock);
    if (!p->error) {
        p->error = rc;
        if (d)
            p->diag = *d;
        else
            tpu__fail(&p->diag, rc, "%s", tpu_strerror(rc));
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
    tpu_device_cancel(p->e->dev);
}

static bool pass_failed(struct pass *p)
{
    pthread_mutex_lock(&p->lock);
    bool f = p->error != 0;
    pthread_mutex_unlock(&p->lock);
    return f;
}

static int grow(void **arr, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *a = realloc(*arr, n * elem);
    if (!a)
        return TPU_ENOMEM;
    *arr = a;
    *cap = n;
    return 0;
}

static void *infeed_thread(void *arg)
{
    struct pass *p = arg;
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu_diag d = {0};
    if (e->cfg.initial_infeed_sleep_secs > 0 && p->mode == TPU_MODE_TRAIN) {
        double s = e->cfg.initial_infeed_sleep_secs;
        struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
        nanosleep(&ts, NULL);
    }
    /* one call's tensors, [per_call][cols] each */
    void *bufs[4] = {0};
    size_t row_bytes[4] = {0};
    bool is_int[4] = {0};
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        row_bytes[t] = (size_t)b->cols * tpu_buf_dtype_bytes(b->dtype);
        is_int[t] = b->dtype == TPU_BUF_INT32;
        bufs[t] = malloc(row_bytes[t] * p->per_call);
        if (!bufs[t]) {
            pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the input batch"), &d);
            goto out;
        }
    }
    uint64_t clock = e->host_cycle;
    bool last_step = false;
    for (uint64_t s = 0; s < p->steps && !last_step; s++) {
        uint32_t real_total = 0;
        for (uint32_t call = 0; call < p->calls; call++) {
            uint32_t n_real = 0;
            double t0 = wall_s();
            int rc = p->input->next(p->input->ctx, p->mode, call, p->per_call, bufs, &n_real, &d);
            clock += host_cost(e, e->cfg.modeled_input_us_per_batch, t0);
            if (rc < 0) {
                struct tpu_diag why = d;
                why.msg[TPU_DIAG_MAX - 80] = '\0'; /* room for the prefix */
                tpu__fail(&d, rc, "the input function failed at step %llu: %s",
                          (unsigned long long)(p->step0 + s), why.msg);
                pass_fail(p, rc, &d);
                goto out;
            }
            if (n_real > p->per_call)
                n_real = p->per_call;
            if (rc == 0 || (p->mode == TPU_MODE_TRAIN && n_real < p->per_call)) {
                /* the input ended. Training never uses a partial step: the pass ends before
                 * step s. Evaluation and prediction pad the rest of the step and end. */
                if (p->mode == TPU_MODE_TRAIN || (call == 0 && rc == 0)) {
                    pthread_mutex_lock(&p->lock);
                    p->input_ended = true;
                    pthread_cond_broadcast(&p->cv);
                    pthread_mutex_unlock(&p->lock);
                    goto out;
                }
                if (rc == 0)
                    n_real = 0;
                last_step = true;
            } else if (n_real < p->per_call) {
                last_step = true; /* a short batch: the input has nothing after it */
            }
            real_total += n_real;
            for (uint32_t t = 0; t < mp->n_infeed; t++) {
                char *base = bufs[t];
                size_t pad = (size_t)(p->per_call - n_real) * row_bytes[t];
                if (is_int[t])
                    memset(base + n_real * row_bytes[t], 0xff, pad); /* -1: a masked label */
                else
                    memset(base + n_real * row_bytes[t], 0, pad);
            }
            /* which replicas this call feeds, and with which rows */
            uint32_t first = 0, n_rep = 1, rows_each = p->per_call;
            if (p->calls == 1 && p->mode == TPU_MODE_TRAIN &&
                e->cfg.per_host_input_for_training == TPU_BROADCAST) {
                n_rep = e->n_replicas; /* the same batch to each */
            } else if (p->calls < e->n_replicas) {
                /* a per-host call: sliced across the host's replicas */
                n_rep = e->n_replicas / p->calls;
                first = call * n_rep;
                rows_each = p->per_replica;
            } else {
                first = call;
            }
            for (uint32_t r = 0; r < n_rep; r++) {
                uint32_t rep = first + r;
                uint32_t row0 = (p->calls == 1 && e->cfg.per_host_input_for_training ==
                                                      TPU_BROADCAST && p->mode == TPU_MODE_TRAIN)
                                    ? 0
                                    : r * rows_each;
                for (uint32_t k = 0; k < e->n_cores / e->n_replicas; k++) {
                    uint32_t core = rep * (e->n_cores / e->n_replicas) + k;
                    for (uint32_t t = 0; t < mp->n_infeed; t++) {
                        rc = tpu_device_infeed(e->dev, core,
                                               (char *)bufs[t] + row0 * row_bytes[t],
                                               rows_each * row_bytes[t], clock, &d);
                        if (rc) {
                            if (rc != TPU_ECANCELED)
                                pass_fail(p, rc, &d);
                            goto out;
                        }
                    }
                }
            }
        }
        pthread_mutex_lock(&p->lock);
        int rc = grow((void **)&p->real_rows, &p->real_cap, s + 1, sizeof *p->real_rows);
        if (!rc) {
            p->real_rows[s] = real_total;
            p->fed = s + 1;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        if (rc) {
            pass_fail(p, tpu__fail(&d, rc, "out of memory"), &d);
            goto out;
        }
    }
    pthread_mutex_lock(&p->lock);
    p->input_ended = p->input_ended || last_step;
    pthread_mutex_unlock(&p->lock);
out:
    tpu_device_infeed_close(e->dev);
    for (int t = 0; t < 4; t++)
        free(bufs[t]);
    return NULL;
}

static void *outfeed_thread(void *arg)
{
    struct pass *p = arg;
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu_diag d = {0};
    size_t max_bytes = 0;
    for (uint32_t t = 0; t < mp->n_outfeed; t++) {
        size_t b = tpu_buffer_bytes(tpu_program_buffer(mp->prog, mp->outfeed[t]));
        max_bytes = b > max_bytes ? b : max_bytes;
    }
    float *buf = malloc(max_bytes ? max_bytes : 4);
    if (!buf) {
        pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory"), &d);
        return NULL;
    }
    /* the program's loss is sum / global batch; replica 0's mean is sum / its own rows */
    const double loss_scale = (double)e->n_replicas;
    for (uint64_t s = 0; s < p->steps; s++) {
        for (uint32_t c = 0; c < e->n_cores; c += e->n_cores / e->n_replicas) {
            uint32_t rep = c / (e->n_cores / e->n_replicas);
            for (uint32_t t = 0; t < mp->n_outfeed; t++) {
                const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->outfeed[t]);
                size_t bytes = tpu_buffer_bytes(b);
                int rc = tpu_device_outfeed(e->dev, c, buf, bytes, 0, NULL, &d);
                if (rc) {
                    if (rc != TPU_ECANCELED)
                        pass_fail(p, rc, &d);
                    goto out;
                }
                if (p->mode == TPU_MODE_TRAIN && rep == 0) {
                    float loss = (float)(buf[0] * loss_scale);
                    uint64_t gstep = p->step0 + s + 1;
                    if (!isfinite(loss)) {
                        tpu__fail(&d, TPU_ERANGE, "the training loss is %s at global step %llu; "
                                  "training stopped (lower the learning rate, or check the "
                                  "input for bad values); the last checkpoint is intact",
                                  isnan(loss) ? "NaN" : "infinite", (unsigned long long)gstep);
                        pass_fail(p, TPU_ERANGE, &d);
                        goto out;
                    }
                    pthread_mutex_lock(&p->lock);
                    int gr = grow((void **)&p->losses, &p->loss_cap, s + 1, sizeof *p->losses);
                    if (!gr)
                        p->losses[s] = loss;
                    pthread_mutex_unlock(&p->lock);
                    if (gr) {
                        pass_fail(p, tpu__fail(&d, gr, "out of memory"), &d);
                        goto out;
                    }
                    if (e->cfg.host_call_every_n_steps && gstep % e->cfg.host_call_every_n_steps == 0)
                        for (size_t h = 0; h < e->n_hooks; h++)
                            if (e->hooks[h].host_call) {
                                int hr = e->hooks[h].host_call(e->hooks[h].ctx, gstep, loss, &d);
                                if (hr) {
                                    pass_fail(p, hr, &d);
                                    goto out;
                                }
                            }
                } else if (p->mode == TPU_MODE_EVAL) {
                    pthread_mutex_lock(&p->lock);
                    if (t == 0)
                        p->loss_sum += buf[0];
                    else {
                        p->correct += buf[0];
                        p->count += buf[1];
                    }
                    pthread_mutex_unlock(&p->lock);
                } else if (p->mode == TPU_MODE_PREDICT) {
                    /* rows of this replica, in global order; only the real ones */
                    pthread_mutex_lock(&p->lock);
                    while (p->fed <= s && !p->error)
                        pthread_cond_wait(&p->cv, &p->lock);
                    uint32_t real = p->fed > s ? p->real_rows[s] : 0;
                    pthread_mutex_unlock(&p->lock);
                    uint32_t cols = b->cols;
                    for (uint32_t i = 0; i < b->rows; i++) {
                        uint64_t within = (uint64_t)rep * p->per_replica + i;
                        if (within < real)
                            p->emit(p->emit_ctx, p->emitted++, buf + (size_t)i * cols, cols);
                    }
                }
            }
        }
        pthread_mutex_lock(&p->lock);
        p->drained = s + 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
    }
out:
    free(buf);
    return NULL;
}

/* Waits until the outfeed thread has processed `steps` steps (or something failed). */
static void wait_drained(struct pass *p, uint64_t steps)
{
    pthread_mutex_lock(&p->lock);
    while (p->drained < steps && !p->error)
        pthread_cond_wait(&p->cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* ---- loops -------------------------------------------------------------------------------- */

static int write_metrics(struct tpu_estimator *e, const struct tpu_loop_info *li)
{
    if (!e->cfg.model_dir[0])
        return 0;
    if (!e->metrics) {
        char path[600];
        mkdir(e->cfg.model_dir, 0777);
        snprintf(path, sizeof path, "%s/metrics.jsonl", e->cfg.model_dir);
        e->metrics = fopen(path, "a");
        if (!e->metrics)
            return TPU_EIO;
    }
    static const char *const mode_name[] = {"train", "eval", "predict"};
    fprintf(e->metrics,
            "{\"mode\": \"%s\", \"global_step\": %llu, \"steps\": %llu, \"loss\": %.9g, "
            "\"device_seconds\": %.9g, \"host_seconds\": %.9g, \"total_seconds\": %.9g, "
            "\"wall_seconds\": %.6f, \"examples_per_s\": %.6g, \"step_time_s\": %.9g, "
            "\"mxu_utilization\": %.6f, \"infeed_stall_share\": %.6f, "
            "\"host_overhead_share\": %.6f, \"host_time\": \"%s\"}\n",
            mode_name[li->mode], (unsigned long long)li->global_step,
            (unsigned long long)li->steps, (double)li->loss, li->device_seconds,
            li->host_seconds, li->total_seconds, li->wall_seconds, li->examples_per_s,
            li->step_time_s, li->mxu_utilization, li->infeed_stall_share,
            li->host_overhead_share,
            e->cfg.host_time == TPU_HOST_TIME_MEASURED ? "measured" : "modeled");
    fflush(e->metrics);
    return 0;
}

/* Counters summed over the device's cores. */
static void sum_counters(const struct tpu_estimator *e, struct tpu_core_counters *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t c = 0; c < e->n_cores; c++) {
        struct tpu_core_counters k;
        tpu_device_counters(e->dev, c, &k);
        out->mxu_mac_slots += k.mxu_mac_slots;
        out->macs += k.macs;
        out->stall[TPU_STALL_INFEED_EMPTY] += k.stall[TPU_STALL_INFEED_EMPTY];
    }
}

static int run_pass(struct tpu_estimator *e, struct pass *p, uint64_t target_step,
                    struct tpu_diag *d)
{
    pthread_t in_th, out_th;
    int rc = 0;
    tpu_device_reset_cancel(e->dev);
    if (pthread_create(&in_th, NULL, infeed_thread, p) != 0)
        return tpu__fail(d, TPU_ETHREAD, "cannot start the infeed thread");
    if (pthread_create(&out_th, NULL, outfeed_thread, p) != 0) {
        tpu_device_cancel(e->dev);
        pthread_join(in_th, NULL);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the outfeed thread");
    }
    const bool training = p->mode == TPU_MODE_TRAIN;
    uint64_t done = 0;               /* steps of this pass completed on the device */
    uint64_t ipl = e->cfg.iterations_per_loop_s > 0 ? 1 : e->cfg.iterations_per_loop;
    bool ended = false;
    uint64_t last_ckpt = e->global_step;
    struct tpu_core_counters before;
    sum_counters(e, &before);
    while (!ended && (training ? e->global_step < target_step : done < p->steps)) {
        uint64_t remaining = training ? target_step - e->global_step : p->steps - done;
        uint64_t n = remaining < ipl ? remaining : ipl;
        tpu_device_set_var(e->dev, e->mp.var_iterations, (int64_t)n);
        uint64_t start = e->host_cycle + host_cost(e, e->cfg.modeled_launch_us, wall_s());
        uint64_t end = start;
        struct tpu_diag rd = {0};
        int r = tpu_device_run(e->dev, start, &end, &rd);
        uint64_t ran = n;
        if (r == TPU_EEND) {
            /* the input ended: the device stopped at the start of the missing step */
            ended = true;
            int64_t dev_step = tpu_device_get_var(e->dev, 0, e->mp.var_step);
            ran = training ? (uint64_t)dev_step - e->global_step : 0;
            if (!training) {
                pthread_mutex_lock(&p->lock);
                ran = p->fed - done;
                pthread_mutex_unlock(&p->lock);
            }
            if (end < start) {
                end = start;
                for (uint32_t c = 0; c < e->n_cores; c++) {
                    struct tpu_core_counters k;
                    tpu_device_counters(e->dev, c, &k);
                    end = k.cycles > end ? k.cycles : end;
                }
            }
        } else if (r) {
            pthread_mutex_lock(&p->lock);
            bool ours = p->error != 0;
            pthread_mutex_unlock(&p->lock);
            if (!ours)
                pass_fail(p, r, &rd);
            rc = r;
            break;
        }
        done += ran;
        if (training)
            e->global_step += ran;
        wait_drained(p, done);
        if (pass_failed(p)) {
            rc = -1;
            break;
        }
        /* the loop boundary: hooks, logging, checkpoint */
        double t0 = wall_s();
        struct tpu_core_counters now;
        sum_counters(e, &now);
        struct tpu_loop_info li = {.mode = p->mode, .global_step = e->global_step, .steps = ran};
        if (training && ran) {
            pthread_mutex_lock(&p->lock);
            li.loss = p->losses[done - 1];
            pthread_mutex_unlock(&p->lock);
        }
        li.device_seconds = (double)(end - start) / e->hz;
        li.step_time_s = ran ? li.device_seconds / ran : 0;
        li.examples_per_s = li.device_seconds > 0
                                ? (double)ran * p->per_replica * e->n_replicas / li.device_seconds
                                : 0;
        uint64_t slots = now.mxu_mac_slots - before.mxu_mac_slots;
        double cap = (double)(end - start) * tpu_device_chip(e->dev)->mxu_rows *
                     tpu_device_chip(e->dev)->mxu_cols * tpu_device_chip(e->dev)->mxu_per_core *
                     e->n_cores;
        li.mxu_utilization = cap > 0 ? (double)(now.macs - before.macs) / cap : 0;
        (void)slots;
        /* the cores' mean share of the loop spent waiting for infeed */
        li.infeed_stall_share = end > start
                                    ? (double)(now.stall[TPU_STALL_INFEED_EMPTY] -
                                               before.stall[TPU_STALL_INFEED_EMPTY]) /
                                          ((double)(end - start) * e->n_cores)
                                    : 0;
        if (li.infeed_stall_share > 1)
            li.infeed_stall_share = 1;
        before = now;
        for (size_t h = 0; h < e->n_hooks && !rc; h++)
            if (e->hooks[h].after_loop)
                rc = e->hooks[h].after_loop(e->hooks[h].ctx, &li, d);
        if (rc) {
            pass_fail(p, rc, d);
            break;
        }
        uint64_t host = host_cost(e, e->cfg.modeled_hooks_us, t0);
        bool final = ended || (training ? e->global_step >= target_step : done >= p->steps);
        if (training && e->cfg.model_dir[0] &&
            (final || (e->cfg.save_checkpoints_steps &&
                       e->global_step - last_ckpt >= e->cfg.save_checkpoints_steps))) {
            double tc = wall_s();
            if ((rc = save_checkpoint(e, d))) {
                pass_fail(p, rc, d);
                break;
            }
            last_ckpt = e->global_step;
            host += host_cost(e, e->cfg.modeled_checkpoint_us, tc);
        }
        li.host_seconds = (double)host / e->hz;
        uint64_t prev_host = e->host_cycle;
        e->host_cycle = end + host;
        li.total_seconds = (double)e->host_cycle / e->hz;
        li.wall_seconds = wall_s() - e->wall_start;
        /* the host's share of this loop's span: boundary costs plus the launch */
        double launch_s = (double)(start - prev_host) / e->hz;
        double span = li.device_seconds + li.host_seconds + launch_s;
        li.host_overhead_share = span > 0 ? (li.host_seconds + launch_s) / span : 0;
        e->last = li;
        write_metrics(e, &li);
        if (e->cfg.iterations_per_loop_s > 0 && li.step_time_s > 0) {
            double want = floor(e->cfg.iterations_per_loop_s / li.step_time_s);
            ipl = want < 1 ? 1 : want > 1e12 ? (uint64_t)1e12 : (uint64_t)want;
        }
    }
    /* stop the helpers: they may wait for steps that will never run */
    tpu_device_cancel(e->dev);
    pthread_join(in_th, NULL);
    pthread_join(out_th, NULL);
    tpu_device_reset_cancel(e->dev);
    pthread_mutex_lock(&p->lock);
    int perr = p->error;
    struct tpu_diag pd = p->diag;
    bool input_ended = p->input_ended;
    pthread_mutex_unlock(&p->lock);
    if (perr) {
        if (d)
            *d = pd;
        return perr;
    }
    if (rc)
        return rc;
    if (training && input_ended && e->global_step < target_step) {
        if (e->cfg.strict_input)
            return tpu__fail(d, TPU_EEND, "the training input ended after global step %llu, "
                             "before the %llu steps asked for (strict input: an error); give "
                             "more data or fewer steps",
                             (unsigned long long)e->global_step,
                             (unsigned long long)target_step);
        tpu__fail(d, 0, "warning: the training input ended at global step %llu, before step "
                  "%llu; training stopped cleanly at the last full step",
                  (unsigned long long)e->global_step, (unsigned long long)target_step);
    }
    return 0;
}

static void pass_init(struct pass *p, struct tpu_estimator *e, const struct tpu_input *in,
                      enum tpu_mode mode)
{
    memset(p, 0, sizeof *p);
    p->e = e;
    p->input = in;
    p->mode = mode;
    p->step0 = e->global_step;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
}

static void pass_free(struct pass *p)
{
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cv);
    free(p->real_rows);
    free(p->losses);
}

int tpu_estimator_train(struct tpu_estimator *e, const struct tpu_input *input, uint64_t steps,
                        uint64_t max_steps, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!e->cfg.train_batch_size)
        return tpu__fail(d, TPU_EINVAL, "train_batch_size is not set; training needs the "
                         "global batch size");
    if (steps == 0 && max_steps == 0)
        return tpu__fail(d, TPU_EINVAL, "give steps (more steps to train) or max_steps (the "
                         "global step to train up to)");
    int rc = load_mode(e, TPU_MODE_TRAIN, d);
    if (rc)
        return rc;
    const uint64_t target = steps ? e->global_step + steps : max_steps;
    if (e->global_step >= target)
        return 0;
    /* a checkpoint at the start, so there is always one to go back to */
    if (e->cfg.model_dir[0]) {
        char path[1024];
        uint64_t s;
        struct tpu_diag ld = {0};
        if (tpu_checkpoint_latest(e->cfg.model_dir, &s, path, sizeof path, &ld) != 0 &&
            (rc = save_checkpoint(e, d)))
            return rc;
    }
    struct pass p;
    pass_init(&p, e, input, TPU_MODE_TRAIN);
    p.steps = target - e->global_step;
    tpu_per_replica_batch(&e->cfg, TPU_MODE_TRAIN, e->n_replicas, &p.per_replica, &p.calls,
                          &p.per_call, NULL);
    if (input->start &&
        (rc = input->start(input->ctx, TPU_MODE_TRAIN, e->global_step,
                           p.per_replica * e->n_replicas, d))) {
        pass_free(&p);
        return rc;
    }
    rc = run_pass(e, &p, target, d);
    pass_free(&p);
    return rc;
}

int tpu_estimator_evaluate(struct tpu_estimator *e, const struct tpu_input *input,
                           uint64_t steps, struct tpu_eval_result *out, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!e->cfg.eval_batch_size)
        return tpu__fail(d, TPU_EINVAL, "eval_batch_size is not set; evaluation needs the "
                         "global batch size");
    int rc = load_mode(e, TPU_MODE_EVAL, d);
    if (rc)
        return rc;
    struct pass p;
    pass_init(&p, e, input, TPU_MODE_EVAL);
    p.steps = steps ? steps : UINT64_MAX;
    tpu_per_replica_batch(&e->cfg, TPU_MODE_EVAL, e->n_replicas, &p.per_replica, &p.calls,
                          &p.per_call, NULL);
    if (input->start &&
        (rc = input->start(input->ctx, TPU_MODE_EVAL, 0, p.per_replica * e->n_replicas, d))) {
        pass_free(&p);
        return rc;
    }
    uint64_t cycle0 = e->host_cycle;
    rc = run_pass(e, &p, 0, d);
    if (!rc) {
        memset(out, 0, sizeof *out);
        out->examples = (uint64_t)llround(p.count);
        out->loss = p.count > 0 ? p.loss_sum / p.count : 0;
        out->accuracy = p.count > 0 ? p.correct / p.count : 0;
        out->steps = p.drained;
        out->device_seconds = (double)(e->host_cycle - cycle0) / e->hz;
    }
    pass_free(&p);
    return rc;
}

int tpu_estimator_predict(struct tpu_estimator *e, const struct tpu_input *input,
                          void (*emit)(void *ctx, uint64_t index, const float *row,
                                       uint32_t cols),
                          void *emit_ctx, uint64_t *n, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!e->cfg.predict_batch_size)
        return tpu__fail(d, TPU_EINVAL, "predict_batch_size is not set; prediction needs the "
                         "global batch size");
    int rc = load_mode(e, TPU_MODE_PREDICT, d);
    if (rc)
        return rc;
    struct pass p;
    pass_init(&p, e, input, TPU_MODE_PREDICT);
    p.steps = UINT64_MAX;
    p.emit = emit;
    p.emit_ctx = emit_ctx;
    tpu_per_replica_batch(&e->cfg, TPU_MODE_PREDICT, e->n_replicas, &p.per_replica, &p.calls,
                          &p.per_call, NULL);
    if (input->start &&
        (rc = input->start(input->ctx, TPU_MODE_PREDICT, 0, p.per_replica * e->n_replicas, d))) {
        pass_free(&p);
        return rc;
    }
    rc = run_pass(e, &p, 0, d);
    if (!rc && n)
        *n = p.emitted;
    pass_free(&p);
    return rc;
}
