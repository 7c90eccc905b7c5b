/* The runtime on a pod whose hosts run in separate processes (runtime.h, struct
 * tpu_host_group): here the hosts are threads of this process (pod_threads.h, the in-process
 * twin of host/mpi), each with its own device of its host's chip (settings.pod) and its own
 * estimator (host_group). Every case compares them with one process simulating the same
 * hosts on one device of every chip (num_hosts N, no group), which is the truth: params,
 * every loop info field but wall_seconds, the evaluation, and every counter of every core
 * (and the device's end cycle), bit for bit, on every host.
 * Prediction: every host emits the one process's rows, in its order, bit for bit, with the
 * same count (BROADCAST and SLICED on 2 and 4 hosts, PER_HOST_V1 and V2 on a pod of one
 * host, a final partial batch, loops that do not divide the steps, a stop request, a
 * failing input).
 * Also: resuming from host 0's checkpoints, the agreement check at a pass's start, a host
 * whose input fails (every host ends promptly, the last checkpoint loads), the refusals at
 * create, and the dataset input's skip.
 *
 * The tiny chip (2 cores per chip), one chip per host, the MLP 16-12-4 with Adam on the toy
 * dataset, modeled host time (deterministic). No CMocka assertion runs on a host's thread:
 * each records its results, which the test's thread checks after joining them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pod_threads.h"
#include "tmp_fixture.h"
#include "toy_dataset.h"
#include "tpusim/checkpoint.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

#define MAX_HOSTS 4
#define MAX_LOOPS 32
#define MAX_PARAMS 32
#define MAX_PARAM_FLOATS 512
#define MAX_CORES 8
#define MAX_PRED_ROWS 128

/* ---- what one run (one process, or one host of a pod) gives -------------------------------- */

struct outcome {
    int rc_create, rc_train, rc_train2, rc_eval;
    char msg[TPU_DIAG_MAX];
    struct tpu_loop_info loops[MAX_LOOPS];
    uint32_t n_loops;
    struct tpu_eval_result eval;
    uint64_t global_step;
    size_t n_params;
    char names[MAX_PARAMS][48];
    float params[MAX_PARAMS][MAX_PARAM_FLOATS];
    uint32_t sizes[MAX_PARAMS];
    struct tpu_estimator *est;  /* while the run is on (the stop request's hook) */
    uint32_t stop_after_loops;  /* > 0: request a stop after this many loops */
    /* the device's cores at the end (a pod's host: its own), and its end: the latest core's
     * clock */
    uint32_t n_cores;
    struct tpu_core_counters counters[MAX_CORES];
    uint64_t end_cycle;
    /* prediction (scenario's predict_examples): what emit got, in its calls' order */
    int rc_pred;
    uint64_t n_pred;           /* predict's *n */
    uint64_t n_emitted;        /* emit's calls */
    float pred[MAX_PRED_ROWS][TOY_CLASSES];
    bool pred_bad_call;        /* an index out of order, or cols not TOY_CLASSES */
    bool emit_on_caller;       /* every emit ran on the thread that called predict */
    bool emit_off_caller;      /* some emit ran on another thread */
    pthread_t caller;
};

static int record_loop(void *ctx, const struct tpu_loop_info *info, struct tpu_diag *d)
{
    struct outcome *o = ctx;
    (void)d;
    if (o->n_loops < MAX_LOOPS)
        o->loops[o->n_loops++] = *info;
    if (o->stop_after_loops && o->n_loops == o->stop_after_loops)
        tpu_estimator_request_stop(o->est);
    return 0;
}

/* predict's emit: keeps the rows in the order of the calls, and checks the index and width. */
static void record_row(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct outcome *o = ctx;
    if (index != o->n_emitted || cols != TOY_CLASSES || index >= MAX_PRED_ROWS)
        o->pred_bad_call = true;
    else
        memcpy(o->pred[index], row, sizeof o->pred[index]);
    if (pthread_equal(pthread_self(), o->caller))
        o->emit_on_caller = true;
    else
        o->emit_off_caller = true;
    o->n_emitted++;
}

/* An input over the toy dataset that can fail at its `fail_at`-th call (next or skip,
 * counted from 1; 0: never), and that can go without skip (the runtime then calls next for
 * the other hosts' calls). */
struct test_input {
    struct tpu_input input;
    struct tpu_dataset_input ds_in;
    uint64_t calls, fail_at;
    uint32_t nan_shard;        /* > 0: this shard's batches start with a NaN feature */
};

static int ti_start(void *ctx, enum tpu_mode mode, uint64_t step, uint32_t global,
                    struct tpu_diag *d)
{
    struct test_input *t = ctx;
    return t->ds_in.input.start(t->ds_in.input.ctx, mode, step, global, d);
}

static int ti_fail(struct test_input *t, struct tpu_diag *d)
{
    if (!t->fail_at || ++t->calls != t->fail_at)
        return 0;
    snprintf(d->msg, sizeof d->msg, "the test's input failed at its call %llu",
             (unsigned long long)t->calls);
    d->code = TPU_EIO;
    return TPU_EIO;
}

static int ti_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                   void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct test_input *t = ctx;
    int rc = ti_fail(t, d);
    if (!rc)
        rc = t->ds_in.input.next(t->ds_in.input.ctx, mode, shard, batch, tensors, n_real, d);
    if (rc == 1 && t->nan_shard && shard == t->nan_shard)
        ((float *)tensors[0])[0] = NAN;
    return rc;
}

static int ti_skip(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                   uint32_t *n_real, struct tpu_diag *d)
{
    struct test_input *t = ctx;
    int rc = ti_fail(t, d);
    return rc ? rc : (t->ds_in.input.skip)(t->ds_in.input.ctx, mode, shard, batch, n_real, d);
}

static void ti_init(struct test_input *t, const struct tpu_dataset *ds, bool with_skip,
                    uint64_t fail_at)
{
    memset(t, 0, sizeof *t);
    tpu_dataset_input_init(&t->ds_in, ds, 3);
    t->fail_at = fail_at;
    t->input = (struct tpu_input){.ctx = t, .next = ti_next, .start = ti_start,
                                  .skip = with_skip ? ti_skip : NULL};
}

/* ---- a scenario: the configuration and what to run ------------------------------------------ */

struct scenario {
    uint32_t hosts;
    enum tpu_input_mode input;
    enum tpu_eval_input eval_input;
    bool with_skip;            /* the input has skip (else the runtime calls next) */
    uint64_t train_steps, train2_steps; /* train2: a second train call (0: none) */
    bool reopen;               /* the second train on fresh devices and estimators */
    bool evaluate;
    uint32_t eval_examples;
    char model_dir[128];
    uint64_t save_every;
    uint32_t batch_of_host1;   /* 0: the same global batch on every host */
    uint32_t hidden_of_host1;  /* 0: the same model on every host */
    uint64_t fail_at_host1;    /* host 1's input fails at this call (0: never) */
    uint32_t cores_per_replica; /* 0: 1 */
    struct tpu_partition_dims features_dims; /* input_partition_dims[0] (rank 0: none) */
    bool train_counts;
    bool cnn;                  /* the small CNN (a layer graph) instead of the MLP */
    uint64_t max_examples;     /* the training stream's length (0: endless) */
    uint32_t nan_shard;        /* > 0: every batch of this shard has a NaN feature */
    char model_dir_of_host1[128]; /* "": the same model_dir on every host */
    bool no_eval_batch;        /* eval_batch_size 0 (not set) */
    bool strict_input;
    uint32_t predict_examples; /* > 0: predict over this many examples after the rest */
    uint64_t pred_fail_at_host1; /* host 1's prediction input fails at this call (0: never) */
    uint64_t ipl;              /* iterations_per_loop (0: 3) */
};

struct host_run {
    const struct scenario *sc;
    struct pod_threads *pt;    /* NULL: one process of every host */
    uint32_t rank;
    const struct tpu_dataset *ds;
    struct outcome *out;
};

static void base_config(const struct scenario *sc, struct tpu_run_config *c)
{
    tpu_run_config_default(c);
    c->train_batch_size = 16;
    c->eval_batch_size = 16;
    c->predict_batch_size = 16;
    c->iterations_per_loop = sc->ipl ? sc->ipl : 3;
    c->seed = 7;
    c->num_hosts = sc->hosts;
    c->per_host_input_for_training = sc->input;
    c->eval_training_input_configuration = sc->eval_input;
    c->log_step_count_steps = 2;
    snprintf(c->model_dir, sizeof c->model_dir, "%s", sc->model_dir);
    c->save_checkpoints_steps = sc->save_every;
    c->num_cores_per_replica = sc->cores_per_replica ? sc->cores_per_replica : 1;
    if (sc->features_dims.rank) {
        c->n_input_partition_dims = 1;
        c->input_partition_dims[0] = sc->features_dims;
    }
    c->train_counts = sc->train_counts;
    c->eval_batch_size = sc->no_eval_batch ? 0 : 16;
    c->strict_input = sc->strict_input;
}

static void mlp_spec(struct tpu_mlp_spec *s, uint32_t hidden)
{
    tpu_mlp_default_spec(s);
    s->n_layers = 2;
    s->sizes[0] = TOY_FEATURES;
    s->sizes[1] = hidden;
    s->sizes[2] = TOY_CLASSES;
    s->optimizer = TPU_OPT_ADAM;
    s->learning_rate = 0.01f;
}

/* conv2d 4 filters 3x3 same (relu) on the toy dataset's 4x4x1 images, flatten, dense to
 * the classes: a layer graph whose lowering partitions the image's rows over a replica's
 * cores (input_partition_dims [1, 2, 1, 1]). */
static int make_cnn(struct tpu_net **net, struct tpu_model *model, struct tpu_train_spec *ts,
                    struct tpu_diag *d)
{
    uint32_t t = 0;
    int rc = tpu_net_create("cnn", 4, 4, 1, net, d);
    if (!rc)
        rc = tpu_net_conv2d(*net, NULL, t, 4, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, &t, d);
    if (!rc)
        rc = tpu_net_unary(*net, NULL, TPU_LAYER_FLATTEN, t, &t, d);
    if (!rc)
        rc = tpu_net_dense(*net, NULL, t, TOY_CLASSES, TPU_ACT_NONE, &t, d);
    if (!rc)
        rc = tpu_net_set_output(*net, t, TPU_LOSS_SOFTMAX_XENT, d);
    tpu_train_spec_default(ts);
    ts->optimizer = TPU_OPT_ADAM;
    ts->learning_rate = 0.01f;
    ts->seed = 7;
    return rc ? rc : tpu_net_model(model, *net, ts, d);
}

/* Opens the device (a pod's part, or every chip) and the estimator. */
static int open_run(const struct host_run *r, struct tpu_mlp_spec *spec, struct tpu_model *model,
                    struct tpu_net **net, struct tpu_train_spec *ts, struct tpu_device **dev,
                    struct tpu_estimator **est, struct tpu_diag *d)
{
    const struct scenario *sc = r->sc;
    struct tpu_chip_config chip;
    int rc = tpu_config_load_preset("tiny", &chip, d);
    if (rc)
        return rc;
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = r->pt ? 1 : sc->hosts;
    s.n_threads = 2;
    s.cores_per_replica = sc->cores_per_replica ? sc->cores_per_replica : 1;
    s.pod = r->pt ? pod_threads_link(r->pt, r->rank) : NULL;
    if ((rc = tpu_device_open(&s, dev, d)))
        return rc;
    struct tpu_run_config cfg;
    base_config(sc, &cfg);
    cfg.host_group = r->pt ? pod_threads_group(r->pt, r->rank) : NULL;
    if (r->rank == 1 && sc->batch_of_host1)
        cfg.train_batch_size = sc->batch_of_host1;
    if (r->rank == 1 && sc->model_dir_of_host1[0])
        snprintf(cfg.model_dir, sizeof cfg.model_dir, "%s", sc->model_dir_of_host1);
    mlp_spec(spec, r->rank == 1 && sc->hidden_of_host1 ? sc->hidden_of_host1 : 12);
    tpu_mlp_model(model, spec);
    if (sc->cnn && !*net && (rc = make_cnn(net, model, ts, d)))
        return rc;
    struct tpu_hook hook = {.ctx = r->out, .after_loop = record_loop};
    return tpu_estimator_create(*dev, &cfg, model, &hook, 1, est, d);
}

static void read_params(struct tpu_estimator *est, struct outcome *o)
{
    o->n_params = tpu_estimator_n_params(est);
    for (size_t i = 0; i < o->n_params && i < MAX_PARAMS; i++) {
        const char *name;
        uint32_t rows, cols;
        if (tpu_estimator_param_info(est, i, &name, &rows, &cols, NULL) ||
            (size_t)rows * cols > MAX_PARAM_FLOATS) {
            o->n_params = 0;
            return;
        }
        snprintf(o->names[i], sizeof o->names[i], "%s", name);
        o->sizes[i] = rows * cols;
        if (tpu_estimator_read_param(est, name, o->params[i], o->sizes[i] * sizeof(float),
                                     NULL))
            o->n_params = 0;
    }
}

static void read_counters(struct tpu_device *dev, struct outcome *o)
{
    o->n_cores = tpu_device_n_cores(dev);
    o->end_cycle = 0;
    for (uint32_t c = 0; c < o->n_cores && c < MAX_CORES; c++) {
        tpu_device_counters(dev, c, &o->counters[c]);
        if (o->counters[c].cycles > o->end_cycle)
            o->end_cycle = o->counters[c].cycles;
    }
}

/* One run: train (twice, the second maybe on a fresh device and estimator), evaluate, read
 * the params. On a host's thread: no assertions, only the outcome. */
static void *host_main(void *arg)
{
    struct host_run *r = arg;
    const struct scenario *sc = r->sc;
    struct outcome *o = r->out;
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    struct tpu_net *net = NULL;
    struct tpu_train_spec ts;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    struct test_input in;
    ti_init(&in, r->ds, sc->with_skip, r->rank == 1 ? sc->fail_at_host1 : 0);
    in.ds_in.max_examples = sc->max_examples;
    in.nan_shard = sc->nan_shard;
    o->rc_train = o->rc_train2 = o->rc_eval = o->rc_pred = 1; /* not run */
    o->rc_create = open_run(r, &spec, &model, &net, &ts, &dev, &est, &d);
    if (o->rc_create)
        goto out;
    o->est = est;
    o->rc_train = tpu_estimator_train(est, &in.input, sc->train_steps, 0, &d);
    if (o->rc_train)
        goto out;
    if (sc->train2_steps) {
        if (sc->reopen) {
            tpu_estimator_destroy(&est);
            tpu_device_close(&dev);
            if ((o->rc_create = open_run(r, &spec, &model, &net, &ts, &dev, &est, &d)))
                goto out;
        }
        o->rc_train2 = tpu_estimator_train(est, &in.input, sc->train2_steps, 0, &d);
        if (o->rc_train2)
            goto out;
    }
    if (sc->evaluate) {
        struct test_input ein;
        struct tpu_dataset eds = *r->ds;
        eds.n_examples = sc->eval_examples;
        ti_init(&ein, &eds, sc->with_skip, 0);
        o->rc_eval = tpu_estimator_evaluate(est, &ein.input, 0, &o->eval, &d);
        tpu_dataset_input_free(&ein.ds_in);
        if (o->rc_eval)
            goto out;
    }
    if (sc->predict_examples) {
        struct test_input pin;
        struct tpu_dataset pds = *r->ds;
        pds.n_examples = sc->predict_examples;
        ti_init(&pin, &pds, sc->with_skip, r->rank == 1 ? sc->pred_fail_at_host1 : 0);
        o->caller = pthread_self();
        o->rc_pred = tpu_estimator_predict(est, &pin.input, record_row, o, &o->n_pred, &d);
        tpu_dataset_input_free(&pin.ds_in);
        if (o->rc_pred)
            goto out;
    }
    o->global_step = tpu_estimator_global_step(est);
    read_params(est, o);
    read_counters(dev, o);
out:
    snprintf(o->msg, sizeof o->msg, "%s", d.msg);
    if (est)
        o->global_step = tpu_estimator_global_step(est);
    o->est = NULL;
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    tpu_dataset_input_free(&in.ds_in);
    return NULL;
}

/* The whole pod on threads; fails the test if it takes more than `limit_s` of wall time
 * (a host that hangs: the pod never ends). */
struct pod_job {
    struct pod_threads *pt;
    void *args[MAX_HOSTS];
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool done;
};

static void *pod_job_main(void *arg)
{
    struct pod_job *j = arg;
    pod_threads_run(j->pt, host_main, j->args);
    pthread_mutex_lock(&j->lock);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

static void run_pod(const struct scenario *sc, const struct tpu_dataset *ds,
                    struct outcome *outs, double limit_s)
{
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(sc->hosts, &pt), 0);
    struct host_run runs[MAX_HOSTS];
    struct pod_job job = {.pt = pt};
    pthread_mutex_init(&job.lock, NULL);
    pthread_cond_init(&job.cv, NULL);
    for (uint32_t h = 0; h < sc->hosts; h++) {
        runs[h] = (struct host_run){.sc = sc, .pt = pt, .rank = h, .ds = ds, .out = &outs[h]};
        job.args[h] = &runs[h];
    }
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pod_job_main, &job), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)limit_s;
    pthread_mutex_lock(&job.lock);
    while (!job.done)
        if (pthread_cond_timedwait(&job.cv, &job.lock, &until))
            break;
    const bool done = job.done;
    pthread_mutex_unlock(&job.lock);
    if (!done)
        fail_msg("the pod of %u hosts did not end within %g s (a host hangs)", sc->hosts,
                 limit_s);
    pthread_join(t, NULL);
    pthread_mutex_destroy(&job.lock);
    pthread_cond_destroy(&job.cv);
    pod_threads_destroy(pt);
}

static void run_one_process(const struct scenario *sc, const struct tpu_dataset *ds,
                            struct outcome *out)
{
    struct host_run r = {.sc = sc, .pt = NULL, .rank = 0, .ds = ds, .out = out};
    host_main(&r);
}

/* ---- comparisons ------------------------------------------------------------------------ */

#define SAME_BITS(a, b, field, what, h, i)                                                     \
    do {                                                                                       \
        if (memcmp(&(a).field, &(b).field, sizeof (a).field))                                 \
            fail_msg("host %u, %s %u: %s differs from one process's (%.9g vs %.9g)", h, what,  \
                     i, #field, (double)(a).field, (double)(b).field);                         \
    } while (0)

static void same_loop(const struct tpu_loop_info *a, const struct tpu_loop_info *b, uint32_t h,
                      uint32_t i)
{
    SAME_BITS(*a, *b, mode, "loop", h, i);
    SAME_BITS(*a, *b, global_step, "loop", h, i);
    SAME_BITS(*a, *b, steps, "loop", h, i);
    SAME_BITS(*a, *b, loss, "loop", h, i);
    SAME_BITS(*a, *b, global_loss, "loop", h, i);
    SAME_BITS(*a, *b, device_seconds, "loop", h, i);
    SAME_BITS(*a, *b, host_seconds, "loop", h, i);
    SAME_BITS(*a, *b, total_seconds, "loop", h, i);
    SAME_BITS(*a, *b, examples_per_s, "loop", h, i);
    SAME_BITS(*a, *b, step_time_s, "loop", h, i);
    SAME_BITS(*a, *b, mxu_utilization, "loop", h, i);
    SAME_BITS(*a, *b, infeed_stall_share, "loop", h, i);
    SAME_BITS(*a, *b, stall_share, "loop", h, i);
    SAME_BITS(*a, *b, host_overhead_share, "loop", h, i);
    SAME_BITS(*a, *b, pass_device_seconds, "loop", h, i);
    SAME_BITS(*a, *b, pass_host_seconds, "loop", h, i);
    SAME_BITS(*a, *b, pass_examples_per_s, "loop", h, i);
    SAME_BITS(*a, *b, pass_mxu_utilization, "loop", h, i);
    SAME_BITS(*a, *b, pass_infeed_stall_share, "loop", h, i);
    SAME_BITS(*a, *b, pass_host_overhead_share, "loop", h, i);
    SAME_BITS(*a, *b, log_due, "loop", h, i);
    SAME_BITS(*a, *b, log_steps_per_s, "loop", h, i);
    SAME_BITS(*a, *b, pass_steps, "loop", h, i);
    SAME_BITS(*a, *b, real_examples, "loop", h, i);
    SAME_BITS(*a, *b, loss_sum, "loop", h, i);
    SAME_BITS(*a, *b, correct, "loop", h, i);
}

static void expect_ok(const struct outcome *o, uint32_t h, const struct scenario *sc)
{
    if (o->rc_create || o->rc_train || (sc->train2_steps && o->rc_train2) ||
        (sc->evaluate && o->rc_eval) || (sc->predict_examples && o->rc_pred))
        fail_msg("host %u: create %d, train %d, train2 %d, evaluate %d, predict %d: %s", h,
                 o->rc_create, o->rc_train, o->rc_train2, o->rc_eval, o->rc_pred, o->msg);
}

/* Host h's device cores against the one process's cores h x C .. h x C + C - 1 (C the cores
 * of a host): every counter, bit for bit; and the pod's end (the latest of the hosts' ends)
 * is the one device's end. */
static void same_counters(const struct scenario *sc, const struct outcome *one,
                          const struct outcome *o, uint32_t h)
{
    assert_int_equal(one->n_cores, o->n_cores * sc->hosts);
    assert_true(one->n_cores <= MAX_CORES);
    static const char *const fields[] = {"cycles", "busy", "stall", "hbm bytes",
                                         "feed bytes", "ici_bytes", "mxu_mac_slots", "macs",
                                         "ops and iterations"};
    for (uint32_t c = 0; c < o->n_cores; c++) {
        const struct tpu_core_counters *a = &o->counters[c];
        const struct tpu_core_counters *b = &one->counters[h * o->n_cores + c];
        const bool same[] = {
            a->cycles == b->cycles, !memcmp(a->busy, b->busy, sizeof a->busy),
            !memcmp(a->stall, b->stall, sizeof a->stall),
            a->hbm_read_bytes == b->hbm_read_bytes && a->hbm_write_bytes == b->hbm_write_bytes,
            a->infeed_bytes == b->infeed_bytes && a->outfeed_bytes == b->outfeed_bytes,
            a->ici_bytes == b->ici_bytes, a->mxu_mac_slots == b->mxu_mac_slots,
            a->macs == b->macs, a->ops == b->ops && a->iterations == b->iterations};
        for (size_t f = 0; f < sizeof same / sizeof same[0]; f++)
            if (!same[f])
                fail_msg("host %u, core %u (one process's core %u): %s differ (cycles %llu vs "
                         "%llu)", h, c, h * o->n_cores + c, fields[f],
                         (unsigned long long)a->cycles, (unsigned long long)b->cycles);
        assert_memory_equal(a, b, sizeof *a); /* and nothing else differs */
    }
}

/* The pod's end cycle (the latest of the hosts') is the one device's. */
static void same_end(const struct scenario *sc, const struct outcome *one,
                     const struct outcome *hosts)
{
    uint64_t end = 0;
    for (uint32_t h = 0; h < sc->hosts; h++)
        end = hosts[h].end_cycle > end ? hosts[h].end_cycle : end;
    assert_true(one->end_cycle > 0);
    assert_int_equal(end, one->end_cycle);
}

/* Every host's outcome equals the one process's: the loops, the evaluation, the global step,
 * its cores' counters and the pod's end cycle, and every param (host 0 reads replica 0; host h its own first replica, which holds the
 * same values). */
static void expect_same(const struct scenario *sc, const struct outcome *one,
                        const struct outcome *hosts)
{
    expect_ok(one, 0, sc);
    assert_true(one->n_loops > 0);
    assert_true(one->n_params > 0);
    for (uint32_t h = 0; h < sc->hosts; h++) {
        const struct outcome *o = &hosts[h];
        expect_ok(o, h, sc);
        assert_int_equal(o->n_loops, one->n_loops);
        for (uint32_t i = 0; i < one->n_loops; i++)
            same_loop(&o->loops[i], &one->loops[i], h, i);
        assert_int_equal(o->global_step, one->global_step);
        if (sc->evaluate) {
            SAME_BITS(o->eval, one->eval, examples, "eval", h, 0);
            SAME_BITS(o->eval, one->eval, loss, "eval", h, 0);
            SAME_BITS(o->eval, one->eval, accuracy, "eval", h, 0);
            SAME_BITS(o->eval, one->eval, steps, "eval", h, 0);
            SAME_BITS(o->eval, one->eval, device_seconds, "eval", h, 0);
        }
        same_counters(sc, one, o, h);
        assert_int_equal(o->n_params, one->n_params);
        for (size_t i = 0; i < one->n_params; i++) {
            assert_string_equal(o->names[i], one->names[i]);
            for (uint32_t k = 0; k < one->sizes[i]; k++)
                if (memcmp(&o->params[i][k], &one->params[i][k], sizeof(float)))
                    fail_msg("host %u: param '%s'[%u] is %.9g, one process's %.9g", h,
                             one->names[i], k, (double)o->params[i][k],
                             (double)one->params[i][k]);
        }
    }
    same_end(sc, one, hosts);
}

/* ---- cases ------------------------------------------------------------------------------ */

struct state {
    struct tpu_dataset ds;
    struct fixture *fx;
};

static int setup(void **state)
{
    struct state *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    toy_dataset(&s->ds, 200, 1);
    void *fx = NULL;
    if (tmp_fixture_setup(&fx, "/tmp/tpusim-pod-XXXXXX")) {
        tpu_dataset_free(&s->ds);
        free(s);
        return -1;
    }
    s->fx = fx;
    *state = s;
    return 0;
}

static int teardown_state(void **state)
{
    struct state *s = *state;
    void *fx = s->fx;
    teardown(&fx);
    tpu_dataset_free(&s->ds);
    free(s);
    return 0;
}

static void compare_modes(void **state, uint32_t hosts, enum tpu_input_mode mode,
                          enum tpu_eval_input eval, bool with_skip)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = hosts, .input = mode, .eval_input = eval,
                          .with_skip = with_skip, .train_steps = 7, .evaluate = true,
                          .eval_examples = 45};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(hosts, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 120);
    expect_same(&sc, one, pod);
    /* training: loops of 3, 3 and 1 steps; the evaluation: its 3 batches (16, 16, 13 rows),
     * then a loop that finds the input's end (0 steps) */
    const uint64_t steps[] = {3, 3, 1, 3, 0};
    assert_int_equal(one->n_loops, 5);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(one->loops[i].steps, steps[i]);
    assert_int_equal(one->eval.examples, 45);
    free(one);
    free(pod);
}

static void test_per_host_v2_2(void **state)
{
    compare_modes(state, 2, TPU_PER_HOST_V2, TPU_EVAL_PER_HOST_V1, true);
}

static void test_per_host_v2_4(void **state)
{
    compare_modes(state, 4, TPU_PER_HOST_V2, TPU_EVAL_PER_HOST_V1, true);
}

static void test_per_host_v1_2(void **state)
{
    compare_modes(state, 2, TPU_PER_HOST_V1, TPU_EVAL_SLICED, true);
}

static void test_per_host_v1_4(void **state)
{
    compare_modes(state, 4, TPU_PER_HOST_V1, TPU_EVAL_SLICED, true);
}

/* without skip: the runtime calls next for the other hosts' calls and drops the rows */
static void test_per_shard_v1_2_no_skip(void **state)
{
    compare_modes(state, 2, TPU_PER_SHARD_V1, TPU_EVAL_SLICED, false);
}

static void test_per_shard_v1_4(void **state)
{
    compare_modes(state, 4, TPU_PER_SHARD_V1, TPU_EVAL_SLICED, true);
}

static void test_broadcast_2(void **state)
{
    compare_modes(state, 2, TPU_BROADCAST, TPU_EVAL_PER_HOST_V1, true);
}

static void test_broadcast_4(void **state)
{
    compare_modes(state, 4, TPU_BROADCAST, TPU_EVAL_PER_HOST_V1, true);
}

/* Spatial partitioning: 2 cores per replica (one replica per host), the image's rows split
 * over them (input_partition_dims [1, 2, 1, 1]), the training counts outfed. */
static void test_cores_per_replica_2(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 7, .evaluate = true, .eval_examples = 45,
                          .cores_per_replica = 2, .train_counts = true, .cnn = true,
                          .features_dims = {.rank = 4, .dims = {1, 2, 1, 1}}};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 120);
    expect_same(&sc, one, pod);
    assert_true(isfinite(one->loops[0].correct));
    free(one);
    free(pod);
}

/* A finite training input that ends inside a step (host 1's first call of step 5 finds the
 * end after host 0's calls of that step came full): every host stops cleanly after step 5
 * with the one process's params and loops, the last one's device time included (no host, in
 * one process or on a pod, queues a part of a step that is not whole: runtime_feed.c,
 * held_call). */
static void test_input_ends_mid_step(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 10, .max_examples = 16 * 5 + 8};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 120);
    expect_ok(one, 0, &sc);
    assert_int_equal(one->global_step, 5);
    assert_non_null(strstr(one->msg, "the training input ended at global step 5"));
    for (uint32_t h = 0; h < 2; h++) {
        expect_ok(&pod[h], h, &sc);
        assert_int_equal(pod[h].global_step, 5);
        assert_non_null(strstr(pod[h].msg, "the training input ended at global step 5"));
        assert_int_equal(pod[h].n_params, one->n_params);
        for (size_t i = 0; i < one->n_params; i++)
            assert_memory_equal(pod[h].params[i], one->params[i],
                                one->sizes[i] * sizeof(float));
        assert_int_equal(pod[h].n_loops, one->n_loops);
        for (uint32_t i = 0; i < one->n_loops; i++)
            same_loop(&pod[h].loops[i], &one->loops[i], h, i);
        same_counters(&sc, one, &pod[h], h);
    }
    same_end(&sc, one, pod);
    free(one);
    free(pod);
}

/* Host 0 writes the checkpoints; a second train on fresh devices and estimators resumes from
 * them on every host and ends where an uninterrupted one-process run ends. */
static void test_resume(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 4, .train2_steps = 5, .reopen = true,
                          .save_every = 2};
    snprintf(sc.model_dir, sizeof sc.model_dir, "%s/pod", s->fx->dir);
    struct outcome *pod = calloc(2, sizeof *pod);
    struct outcome *one = calloc(1, sizeof *one);
    assert_non_null(pod);
    assert_non_null(one);
    run_pod(&sc, &s->ds, pod, 120);
    /* the truth: 9 steps in one go, in one process */
    struct scenario ref = sc;
    ref.train_steps = 9;
    ref.train2_steps = 0;
    ref.reopen = false;
    snprintf(ref.model_dir, sizeof ref.model_dir, "%s/one", s->fx->dir);
    run_one_process(&ref, &s->ds, one);
    expect_ok(one, 0, &ref);
    for (uint32_t h = 0; h < 2; h++) {
        expect_ok(&pod[h], h, &sc);
        assert_int_equal(pod[h].global_step, 9);
        assert_int_equal(pod[h].n_params, one->n_params);
        for (size_t i = 0; i < one->n_params; i++)
            assert_memory_equal(pod[h].params[i], one->params[i],
                                one->sizes[i] * sizeof(float));
        /* the last loop's losses: step 9's, as the uninterrupted run's */
        const struct tpu_loop_info *a = &pod[h].loops[pod[h].n_loops - 1],
                                   *b = &one->loops[one->n_loops - 1];
        assert_int_equal(a->global_step, 9);
        SAME_BITS(*a, *b, loss, "last loop", h, 0);
        SAME_BITS(*a, *b, global_loss, "last loop", h, 0);
    }
    /* host 0 alone wrote: the checkpoint of step 9 is there and loads */
    char path[1024];
    uint64_t step = 0;
    assert_int_equal(tpu_checkpoint_latest(sc.model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 9);
    free(pod);
    free(one);
}

/* A host that runs another global batch, or another program: every host's pass fails with
 * the field and both values. */
static void test_mismatch(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 3, .batch_of_host1 = 32};
    struct outcome pod[2];
    memset(pod, 0, sizeof pod);
    run_pod(&sc, &s->ds, pod, 60);
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_create, 0);
        assert_int_equal(pod[h].rc_train, TPU_EINVAL);
        assert_non_null(strstr(pod[h].msg, "host 1's global batch 32 differs from host 0's "
                                           "16: run every rank with the same options"));
    }
    sc.batch_of_host1 = 0;
    sc.hidden_of_host1 = 8;
    memset(pod, 0, sizeof pod);
    run_pod(&sc, &s->ds, pod, 60);
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_train, TPU_EINVAL);
        assert_non_null(strstr(pod[h].msg, "host 1's program (hash of its text) "));
        assert_non_null(strstr(pod[h].msg, "differs from host 0's "));
    }
    /* a model_dir that host 1 does not see (not a shared file system): host 0 restores step
     * 3, host 1 starts afresh; the message says what the model_dir must be */
    sc.hidden_of_host1 = 0;
    snprintf(sc.model_dir, sizeof sc.model_dir, "%s/seen-by-host0", s->fx->dir);
    snprintf(sc.model_dir_of_host1, sizeof sc.model_dir_of_host1, "%s/host1-own", s->fx->dir);
    struct outcome *first = calloc(1, sizeof *first);
    assert_non_null(first);
    run_one_process(&sc, &s->ds, first); /* 3 steps into host 0's model_dir */
    expect_ok(first, 0, &sc);
    free(first);
    memset(pod, 0, sizeof pod);
    run_pod(&sc, &s->ds, pod, 60);
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_train, TPU_EINVAL);
        assert_non_null(strstr(pod[h].msg, "host 1's global step 0 differs from host 0's 3: "
                                           "host 0 writes the checkpoints and every host "
                                           "restores them, so the model_dir must be a "
                                           "directory every host reads (a shared file "
                                           "system)"));
    }
}

/* Host 1's input fails at pass step 5, at its own first call of the step (PER_HOST_V2 on 2
 * hosts of 2 replicas: 4 calls a step, each of which host 1 makes or skips, so its call
 * 5 x 4 + 3): the group's abort ends every host promptly with an error, and the last
 * checkpoint (step 3: loops of 3 steps, checkpoints every 2 steps) loads. */
static void test_input_fails_on_host1(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 12, .save_every = 2, .fail_at_host1 = 5 * 4 + 3};
    snprintf(sc.model_dir, sizeof sc.model_dir, "%s/fault", s->fx->dir);
    struct outcome pod[2];
    memset(pod, 0, sizeof pod);
    run_pod(&sc, &s->ds, pod, 60);
    assert_int_equal(pod[1].rc_train, TPU_EIO);
    assert_non_null(strstr(pod[1].msg, "the input function failed at step 5: the test's input "
                                       "failed at its call 23"));
    assert_true(pod[0].rc_train < 0);
    assert_non_null(strstr(pod[0].msg, "host 1 failed"));
    char path[1024];
    uint64_t step = 0;
    assert_int_equal(tpu_checkpoint_latest(sc.model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 3);
    struct tpu_checkpoint_info info;
    assert_int_equal(tpu_checkpoint_inspect(path, &info, NULL), 0);
    assert_true(info.n_tensors > 0);
    tpu_checkpoint_info_free(&info);
}

/* Replica 2's rows (host 1's) carry a NaN: the all-reduce spreads it, replica 0's loss is NaN
 * at step 2, and host 0, which checks replica 0's loss as one process does, fails with one
 * process's error; host 1 ends with host 0's failure. */
static void test_nan_on_host1(void **state)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 6, .nan_shard = 2};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 60);
    const char *want = "the training loss is NaN at global step 2; training stopped";
    assert_int_equal(one->rc_train, TPU_ERANGE);
    assert_non_null(strstr(one->msg, want));
    assert_int_equal(pod[0].rc_train, TPU_ERANGE);
    assert_non_null(strstr(pod[0].msg, want));
    assert_true(pod[1].rc_train < 0);
    assert_non_null(strstr(pod[1].msg, "host 0 failed: "));
    assert_non_null(strstr(pod[1].msg, want));
    free(one);
    free(pod);
}

/* A stop requested from an after_loop hook after the first loop (of 3 steps), on every host
 * (a hook that runs alike everywhere: early stopping) or on host 1 alone (a hook, or a
 * signal, on one host): every host stops at that boundary, global step 3, where one process
 * stops when its hook asks there (one process has one estimator: one request there, from
 * whichever hook, stops it at that boundary). Same loops, params, counters and message as
 * the one process, and host 0's checkpoint of step 3. */
static void stop_case(void **state, bool every_host)
{
    struct state *s = *state;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .train_steps = 12};
    snprintf(sc.model_dir, sizeof sc.model_dir, "%s/stop-pod", s->fx->dir);
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    pod[1].stop_after_loops = 1;
    if (every_host)
        pod[0].stop_after_loops = 1;
    run_pod(&sc, &s->ds, pod, 60);
    struct scenario ref = sc;
    snprintf(ref.model_dir, sizeof ref.model_dir, "%s/stop-one", s->fx->dir);
    one->stop_after_loops = 1;
    run_one_process(&ref, &s->ds, one);
    assert_int_equal(one->rc_train, TPU_ECANCELED);
    assert_int_equal(one->global_step, 3);
    assert_non_null(strstr(one->msg, "training stopped on request at global step 3 (of 12); "
                                     "checkpoint "));
    assert_int_equal(one->n_loops, 1);
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_train, TPU_ECANCELED);
        assert_non_null(strstr(pod[h].msg, "training stopped on request at global step 3 (of "
                                           "12); checkpoint "));
        assert_int_equal(pod[h].global_step, one->global_step);
        assert_int_equal(pod[h].n_loops, one->n_loops);
        for (uint32_t i = 0; i < one->n_loops; i++)
            same_loop(&pod[h].loops[i], &one->loops[i], h, i);
    }
    uint64_t step = 0;
    char path[1024];
    assert_int_equal(tpu_checkpoint_latest(sc.model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 3);
    assert_int_equal(tpu_checkpoint_latest(ref.model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 3);
    free(one);
    free(pod);
}

static void test_stop_on_every_host(void **state)
{
    stop_case(state, true);
}

static void test_stop_on_one_host(void **state)
{
    stop_case(state, false);
}

/* ---- prediction ---------------------------------------------------------------------------- */

/* Host h emitted the one process's rows: as many, in the same order, bit for bit. */
static void same_rows(const struct outcome *one, const struct outcome *o, uint32_t h)
{
    if (o->pred_bad_call)
        fail_msg("host %u: emit got an index out of order, past %d rows, or a row of other "
                 "than %d values", h, MAX_PRED_ROWS, TOY_CLASSES);
    assert_int_equal(o->n_emitted, one->n_emitted);
    for (uint64_t i = 0; i < one->n_emitted; i++)
        if (memcmp(o->pred[i], one->pred[i], sizeof o->pred[i]))
            fail_msg("host %u: row %llu is (%.9g %.9g %.9g %.9g), one process's (%.9g %.9g %.9g "
                     "%.9g)", h, (unsigned long long)i, (double)o->pred[i][0],
                     (double)o->pred[i][1], (double)o->pred[i][2], (double)o->pred[i][3],
                     (double)one->pred[i][0], (double)one->pred[i][1],
                     (double)one->pred[i][2], (double)one->pred[i][3]);
}

/* Training of 4 steps, then a prediction over `examples` examples in global batches of 16
 * (the last one partial unless 16 divides them) with loops of `ipl` steps, on `hosts` hosts
 * as threads and in one process of them all: every host emits the one process's rows, in
 * its order, bit for bit, and returns its *n; the loops (training's and prediction's: steps,
 * real examples, device time, ...), params and counters are the one process's too. One
 * process emits from its outfeed thread, a pod's host from the thread that called predict.
 * The prediction's loops have the steps `want` (n_want of them: the last one finds the
 * input's end). */
static void compare_predict(void **state, const struct scenario *sc, const uint64_t *want,
                            uint32_t n_want)
{
    struct state *s = *state;
    const uint32_t hosts = sc->hosts;
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(hosts, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(sc, &s->ds, one);
    run_pod(sc, &s->ds, pod, 120);
    expect_same(sc, one, pod);
    assert_false(one->pred_bad_call);
    assert_int_equal(one->n_pred, sc->predict_examples);
    assert_int_equal(one->n_emitted, sc->predict_examples);
    assert_true(one->emit_off_caller && !one->emit_on_caller);
    bool nonzero = false;
    for (uint64_t i = 0; i < one->n_emitted; i++)
        for (int j = 0; j < TOY_CLASSES; j++) {
            assert_true(isfinite(one->pred[i][j]));
            nonzero = nonzero || one->pred[i][j] != 0;
        }
    assert_true(nonzero);
    for (uint32_t h = 0; h < hosts; h++) {
        assert_int_equal(pod[h].n_pred, one->n_pred);
        same_rows(one, &pod[h], h);
        if (!pod[h].emit_on_caller || pod[h].emit_off_caller)
            fail_msg("host %u: emit ran on another thread than the caller's", h);
    }
    /* the prediction's loops: the last n_want, over every example once */
    assert_true(one->n_loops >= n_want);
    uint64_t real = 0;
    for (uint32_t i = 0; i < n_want; i++) {
        const struct tpu_loop_info *li = &one->loops[one->n_loops - n_want + i];
        assert_int_equal(li->mode, TPU_MODE_PREDICT);
        assert_int_equal(li->steps, want[i]);
        real += li->real_examples;
    }
    assert_int_equal(real, sc->predict_examples);
    free(one);
    free(pod);
}

/* SLICED: one input call a step on host 0, sliced over the replicas; the last batch of 77
 * (13 of 16 real rows) leaves replica 3 (host 1's) with one real row; loops of 3 steps over
 * 5 (3, then 2 and the input's end). */
static void test_predict_sliced_2(void **state)
{
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = true,
                                .train_steps = 4, .predict_examples = 77};
    compare_predict(state, &sc, (const uint64_t[]){3, 2}, 2);
}

/* 8 replicas of 2 rows: the last batch's 13 real rows end in replica 6 (host 3's), replica 7
 * is all padding; loops of 2 over 5 steps. */
static void test_predict_sliced_4(void **state)
{
    const struct scenario sc = {.hosts = 4, .input = TPU_PER_HOST_V1,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = true,
                                .train_steps = 4, .predict_examples = 77, .ipl = 2};
    compare_predict(state, &sc, (const uint64_t[]){2, 2, 1}, 3);
}

/* Without skip (the runtime calls next for the calls of other hosts); loops of 4 over 4 steps
 * (4, then one that finds the end at once). */
static void test_predict_sliced_2_no_skip(void **state)
{
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_SHARD_V1,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = false,
                                .train_steps = 4, .predict_examples = 61, .ipl = 4};
    compare_predict(state, &sc, (const uint64_t[]){4, 0}, 2);
}

/* BROADCAST: every replica computes the whole batch, replica 0's rows (host 0's) are emitted;
 * loops of 2 over 3 steps. */
static void test_predict_broadcast_2(void **state)
{
    const struct scenario sc = {.hosts = 2, .input = TPU_BROADCAST,
                                .eval_input = TPU_EVAL_PER_HOST_V1, .with_skip = true,
                                .train_steps = 4, .predict_examples = 45, .ipl = 2};
    compare_predict(state, &sc, (const uint64_t[]){2, 1}, 2);
}

/* 48 examples: three full batches, loops of 3 (3, then one that finds the end at once). */
static void test_predict_broadcast_4(void **state)
{
    const struct scenario sc = {.hosts = 4, .input = TPU_BROADCAST,
                                .eval_input = TPU_EVAL_PER_HOST_V1, .with_skip = true,
                                .train_steps = 4, .predict_examples = 48};
    compare_predict(state, &sc, (const uint64_t[]){3, 0}, 2);
}

/* Two cores per replica (one replica per host): the replica's first core's rows are its
 * rows, the second's are drained and dropped. */
static void test_predict_cores_per_replica_2(void **state)
{
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = true,
                                .train_steps = 4, .predict_examples = 77, .cnn = true,
                                .cores_per_replica = 2};
    compare_predict(state, &sc, (const uint64_t[]){3, 2}, 2);
}

/* A pod of one host takes every input mode: PER_HOST_V2 (an input call per replica) and
 * PER_HOST_V1 (one call, split over the host's 2 replicas), with a partial last batch. */
static void test_predict_one_host_per_host_v2(void **state)
{
    const struct scenario sc = {.hosts = 1, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_PER_HOST_V1, .with_skip = true,
                                .train_steps = 4, .predict_examples = 45, .ipl = 2};
    compare_predict(state, &sc, (const uint64_t[]){2, 1}, 2);
}

static void test_predict_one_host_per_host_v1(void **state)
{
    const struct scenario sc = {.hosts = 1, .input = TPU_PER_HOST_V1,
                                .eval_input = TPU_EVAL_PER_HOST_V1, .with_skip = true,
                                .train_steps = 4, .predict_examples = 45};
    compare_predict(state, &sc, (const uint64_t[]){3, 0}, 2);
}

/* PER_HOST_V2 prediction with several replicas on several hosts is TPUEstimator's refusal:
 * every host returns the one process's error (agreed: no host fails the others). */
static void test_predict_refused_input_mode(void **state)
{
    struct state *s = *state;
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_PER_HOST_V1, .with_skip = true,
                                .train_steps = 4, .predict_examples = 45};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 60);
    assert_int_equal(one->rc_pred, TPU_EINVAL);
    assert_non_null(strstr(one->msg, "prediction on 2 hosts is only supported with "
                                     "per_host_input_for_training BROADCAST"));
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_train, 0);
        assert_int_equal(pod[h].rc_pred, TPU_EINVAL);
        assert_string_equal(pod[h].msg, one->msg);
        assert_int_equal(pod[h].n_emitted, 0);
    }
    free(one);
    free(pod);
}

/* A stop requested by host 1's after_loop hook after the prediction's first loop (3 of 5
 * steps; training took one loop): every host stops at that boundary with TPU_ECANCELED and
 * "no result", having emitted the rows of those 3 steps, the rows one process emitted when
 * its hook asked there. The one process's infeed thread may have read the whole input by
 * then: the stop still ends it with TPU_ECANCELED, since steps it read never ran. */
static void test_predict_stop_on_one_host(void **state)
{
    struct state *s = *state;
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = true,
                                .train_steps = 3, .predict_examples = 77};
    struct outcome *one = calloc(1, sizeof *one), *pod = calloc(2, sizeof *pod);
    assert_non_null(one);
    assert_non_null(pod);
    one->stop_after_loops = 2;
    pod[1].stop_after_loops = 2;
    run_one_process(&sc, &s->ds, one);
    run_pod(&sc, &s->ds, pod, 60);
    assert_int_equal(one->rc_pred, TPU_ECANCELED);
    assert_non_null(strstr(one->msg, "prediction stopped on request after "));
    assert_int_equal(one->n_emitted, 48);
    assert_int_equal(one->n_loops, 2);
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(pod[h].rc_pred, TPU_ECANCELED);
        assert_non_null(strstr(pod[h].msg, "prediction stopped on request after 3 batches; "
                                           "no result"));
        same_rows(one, &pod[h], h);
        assert_int_equal(pod[h].n_loops, one->n_loops);
        for (uint32_t i = 0; i < one->n_loops; i++)
            same_loop(&pod[h].loops[i], &one->loops[i], h, i);
    }
    free(one);
    free(pod);
}

/* Host 1's prediction input fails at its third call (step 2 of 5): host 1 returns that
 * error, host 0 (waiting for host 1's rows at the boundary, or in its run) "host 1
 * failed", both promptly. */
static void test_predict_input_fails_on_host1(void **state)
{
    struct state *s = *state;
    const struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2,
                                .eval_input = TPU_EVAL_SLICED, .with_skip = true,
                                .train_steps = 3, .predict_examples = 77,
                                .pred_fail_at_host1 = 3};
    struct outcome *pod = calloc(2, sizeof *pod);
    assert_non_null(pod);
    run_pod(&sc, &s->ds, pod, 60);
    assert_int_equal(pod[1].rc_pred, TPU_EIO);
    /* SLICED: one input call a batch (host 0's; host 1 skips it), so its call 3 is batch 3 */
    assert_string_equal(pod[1].msg, "the input function failed at the prediction's batch 3: the "
                                    "test's input failed at its call 3");
    assert_true(pod[0].rc_pred < 0);
    assert_non_null(strstr(pod[0].msg, "host 1 failed: "));
    free(pod);
}

/* ---- errors every host reaches alike -------------------------------------------------------- */

/* What a run of agreed_main gives: each call's result, in order. */
#define AGREED_CALLS 5
struct agreed_run {
    struct pod_threads *pt;    /* NULL: one process of both hosts */
    uint32_t rank;
    const struct tpu_dataset *ds;
    int rc[AGREED_CALLS];
    char msg[AGREED_CALLS][TPU_DIAG_MAX];
    uint64_t step[AGREED_CALLS];
    struct tpu_eval_result eval;
};

/* Calls whose errors every host reaches alike, then calls that must work (the group was not
 * aborted): 0 an evaluate without eval_batch_size (every host's check fails before any
 * exchange); 1 a train whose global batch differs on host 1 (the agreement's mismatch; in
 * one process: not run); 2 after a reconfigure that gives every host the same batches, a
 * train of 3 steps; 3 a train of 100 steps on an input that ends at global step 5 under
 * strict_input (TPU_EEND); 4 an evaluate. */
static void *agreed_main(void *arg)
{
    struct agreed_run *a = arg;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .no_eval_batch = true, .strict_input = true,
                          .batch_of_host1 = a->pt ? 32 : 0};
    struct outcome *o = calloc(1, sizeof *o);
    struct host_run r = {.sc = &sc, .pt = a->pt, .rank = a->rank, .ds = a->ds, .out = o};
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    struct tpu_net *net = NULL;
    struct tpu_train_spec ts;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    struct test_input in, ein;
    struct tpu_dataset eds = *a->ds;
    eds.n_examples = 45;
    ti_init(&in, a->ds, true, 0);
    in.ds_in.max_examples = 16 * 5 + 8;
    ti_init(&ein, &eds, true, 0);
    for (int i = 0; i < AGREED_CALLS; i++)
        a->rc[i] = 1; /* not run */
    if (!o || open_run(&r, &spec, &model, &net, &ts, &dev, &est, &d))
        goto out;
    a->rc[0] = tpu_estimator_evaluate(est, &ein.input, 0, &a->eval, &d);
    snprintf(a->msg[0], sizeof a->msg[0], "%s", d.msg);
    if (a->pt) {
        a->rc[1] = tpu_estimator_train(est, &in.input, 3, 0, &d);
        snprintf(a->msg[1], sizeof a->msg[1], "%s", d.msg);
    }
    struct tpu_run_config cfg;
    base_config(&sc, &cfg);
    cfg.host_group = a->pt ? pod_threads_group(a->pt, a->rank) : NULL;
    cfg.eval_batch_size = 16;
    if (tpu_estimator_reconfigure(est, &cfg, &d))
        goto out;
    a->rc[2] = tpu_estimator_train(est, &in.input, 3, 0, &d);
    snprintf(a->msg[2], sizeof a->msg[2], "%s", d.msg);
    a->step[2] = tpu_estimator_global_step(est);
    a->rc[3] = tpu_estimator_train(est, &in.input, 100, 0, &d);
    snprintf(a->msg[3], sizeof a->msg[3], "%s", d.msg);
    a->step[3] = tpu_estimator_global_step(est);
    a->rc[4] = tpu_estimator_evaluate(est, &ein.input, 0, &a->eval, &d);
    snprintf(a->msg[4], sizeof a->msg[4], "%s", d.msg);
out:
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    tpu_dataset_input_free(&in.ds_in);
    tpu_dataset_input_free(&ein.ds_in);
    free(o);
    return NULL;
}

/* An error that every host reaches alike is returned on every host as one process returns
 * it, and the group is not aborted: the calls after it work, with one process's results. */
static void test_agreed_errors_do_not_abort(void **state)
{
    struct state *s = *state;
    struct agreed_run one = {.ds = &s->ds}, pod[2];
    agreed_main(&one);
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    void *args[2];
    for (uint32_t h = 0; h < 2; h++) {
        pod[h] = (struct agreed_run){.pt = pt, .rank = h, .ds = &s->ds};
        args[h] = &pod[h];
    }
    pod_threads_run(pt, agreed_main, args);
    pod_threads_destroy(pt);
    /* the one process: the evaluate refused, the train, the strict end, the evaluate */
    assert_int_equal(one.rc[0], TPU_EINVAL);
    assert_non_null(strstr(one.msg[0], "eval_batch_size is not set"));
    assert_int_equal(one.rc[2], 0);
    assert_int_equal(one.step[2], 3);
    assert_int_equal(one.rc[3], TPU_EEND);
    assert_non_null(strstr(one.msg[3], "the training input ended after global step 5"));
    assert_int_equal(one.step[3], 5);
    assert_int_equal(one.rc[4], 0);
    assert_int_equal(one.eval.examples, 45);
    for (uint32_t h = 0; h < 2; h++) {
        for (int i = 0; i < AGREED_CALLS; i++) {
            if (i == 1)
                continue;
            if (pod[h].rc[i] != one.rc[i] || strcmp(pod[h].msg[i], one.msg[i]))
                fail_msg("host %u, call %d: %d '%s', one process: %d '%s'", h, i, pod[h].rc[i],
                         pod[h].msg[i], one.rc[i], one.msg[i]);
        }
        assert_int_equal(pod[h].rc[1], TPU_EINVAL);
        assert_non_null(strstr(pod[h].msg[1], "host 1's global batch 32 differs from host "
                                              "0's 16: run every rank with the same options"));
        assert_int_equal(pod[h].step[2], one.step[2]);
        assert_int_equal(pod[h].step[3], one.step[3]);
        SAME_BITS(pod[h].eval, one.eval, examples, "eval", h, 0);
        SAME_BITS(pod[h].eval, one.eval, loss, "eval", h, 0);
        SAME_BITS(pod[h].eval, one.eval, accuracy, "eval", h, 0);
        SAME_BITS(pod[h].eval, one.eval, device_seconds, "eval", h, 0);
    }
}

/* A check that fails on host 1 alone before the pass (its eval_batch_size is not set): host
 * 1 returns its error and aborts the group; host 0, which passed its checks, returns "host 1
 * failed: ..." from the agreement at once (it does not wait for a host that returned). */
static void *one_host_fails_main(void *arg)
{
    struct agreed_run *a = arg;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2, .with_skip = true,
                          .no_eval_batch = a->rank == 1};
    struct outcome *o = calloc(1, sizeof *o);
    struct host_run r = {.sc = &sc, .pt = a->pt, .rank = a->rank, .ds = a->ds, .out = o};
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    struct tpu_net *net = NULL;
    struct tpu_train_spec ts;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    struct test_input ein;
    struct tpu_dataset eds = *a->ds;
    eds.n_examples = 45;
    ti_init(&ein, &eds, true, 0);
    a->rc[0] = a->rc[1] = 1;
    if (o && !open_run(&r, &spec, &model, &net, &ts, &dev, &est, &d)) {
        a->rc[0] = tpu_estimator_evaluate(est, &ein.input, 0, &a->eval, &d);
        snprintf(a->msg[0], sizeof a->msg[0], "%s", d.msg);
        /* the group was aborted: a later call fails at once */
        a->rc[1] = tpu_estimator_evaluate(est, &ein.input, 0, &a->eval, &d);
        snprintf(a->msg[1], sizeof a->msg[1], "%s", d.msg);
    }
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    tpu_dataset_input_free(&ein.ds_in);
    free(o);
    return NULL;
}

static void test_check_fails_on_one_host(void **state)
{
    struct state *s = *state;
    struct agreed_run pod[2];
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    void *args[2];
    for (uint32_t h = 0; h < 2; h++) {
        pod[h] = (struct agreed_run){.pt = pt, .rank = h, .ds = &s->ds};
        args[h] = &pod[h];
    }
    pod_threads_run(pt, one_host_fails_main, args);
    pod_threads_destroy(pt);
    assert_int_equal(pod[1].rc[0], TPU_EINVAL);
    assert_non_null(strstr(pod[1].msg[0], "eval_batch_size is not set"));
    assert_int_equal(pod[0].rc[0], TPU_ECANCELED);
    assert_non_null(strstr(pod[0].msg[0], "host 1 failed: eval_batch_size is not set"));
    /* the group stays failed: host 0's next call ends at once with host 1's failure, host
     * 1's with its own error again */
    assert_int_equal(pod[0].rc[1], TPU_ECANCELED);
    assert_non_null(strstr(pod[0].msg[1], "host 1 failed: eval_batch_size is not set"));
    assert_int_equal(pod[1].rc[1], TPU_EINVAL);
    assert_non_null(strstr(pod[1].msg[1], "eval_batch_size is not set"));
}

/* ---- the host memory check counts the input batches a pass holds ---------------------------- */

/* A host of the memory check: the MLP 4096-8-4 with a global batch of 4096 (PER_HOST_V2 on 2
 * hosts of 2 replicas: 4 calls of 1024 rows a step), unweighted training, so every infeed
 * thread holds its call batch (1024 rows) and a held batch per call it makes for its own
 * cores. A row is 4096 floats and an int32 label: 16388 bytes. */
struct memory_host {
    struct pod_threads *pt;    /* NULL: one process of both hosts */
    uint32_t rank;
    const struct tpu_dataset *ds;
    int rc;
    char msg[TPU_DIAG_MAX];
};

static void *memory_host_main(void *arg)
{
    struct memory_host *m = arg;
    struct tpu_chip_config chip;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    m->rc = 1;
    if (tpu_config_load_preset("tiny", &chip, &d))
        return NULL;
    struct tpu_device_settings ds;
    tpu_device_default_settings(&ds, &chip);
    ds.n_chips = m->pt ? 1 : 2;
    ds.n_threads = 1;
    ds.pod = m->pt ? pod_threads_link(m->pt, m->rank) : NULL;
    if (tpu_device_open(&ds, &dev, &d))
        return NULL;
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2};
    struct tpu_run_config cfg;
    base_config(&sc, &cfg);
    cfg.train_batch_size = 4096;
    cfg.host_group = m->pt ? pod_threads_group(m->pt, m->rank) : NULL;
    struct tpu_mlp_spec spec;
    mlp_spec(&spec, 8);
    spec.sizes[0] = 4096;
    struct tpu_model model;
    tpu_mlp_model(&model, &spec);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, m->ds, 3);
    if (!tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d))
        m->rc = tpu_estimator_train(est, &in.input, 1, 0, &d);
    snprintf(m->msg, sizeof m->msg, "%s", d.msg);
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    return NULL;
}

/* In a child under RLIMIT_AS (the address space in use plus 64 MiB): the training program
 * is refused on every host, with `cores` and the input batches `want` (one process: 2 threads x (1024 +
 * 2048 held rows) = 6144 rows, 96.0 MiB; a pod's host: 1024 + its 2 calls' 2048 = 3072 rows,
 * 48.0 MiB; counting one batch per thread, as before, gave 32.0 and 16.0). */
static int memory_child(bool pod, const char *cores, const char *want)
{
    struct tpu_dataset ds;
    toy_dataset(&ds, 64, 1);
    struct pod_threads *pt = NULL;
    if (pod && pod_threads_create(2, &pt))
        return 2;
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1)
        return 3;
    fclose(f);
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
    if (setrlimit(RLIMIT_AS, &rl))
        return 4;
    struct memory_host hosts[2] = {{.pt = pt, .rank = 0, .ds = &ds},
                                   {.pt = pt, .rank = 1, .ds = &ds}};
    if (pod)
        pod_threads_run(pt, memory_host_main, (void *[]){&hosts[0], &hosts[1]});
    else
        memory_host_main(&hosts[0]);
    for (uint32_t h = 0; h < (pod ? 2u : 1u); h++) {
        fprintf(stderr, "child (%s), host %u: %d %s\n", pod ? "pod" : "one process", h,
                hosts[h].rc, hosts[h].msg);
        if (hosts[h].rc != TPU_ENOMEM ||
            !strstr(hosts[h].msg, "the training program 'mlp_train' needs about") ||
            !strstr(hosts[h].msg, cores) || !strstr(hosts[h].msg, want))
            return 5;
    }
    pod_threads_destroy(pt);
    tpu_dataset_free(&ds);
    return 0;
}

static void run_memory_child(bool pod, const char *cores, const char *want)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(memory_child(pod, cores, want));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_host_memory_counts_held_batches(void **state)
{
    (void)state;
    run_memory_child(false, "(4 cores x ", "96.0 MiB of input batches");
    /* every host fails the same check before the pass: each returns it (no abort) */
    run_memory_child(true, "(2 cores x ", "48.0 MiB of input batches");
}

/* ---- refusals at create -------------------------------------------------------------------- */

static void expect_create_refused(struct tpu_device *dev, const struct tpu_run_config *cfg,
                                  const char *want)
{
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    mlp_spec(&spec, 12);
    tpu_mlp_model(&model, &spec);
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_create(dev, cfg, &model, NULL, 0, &est, &d), TPU_EINVAL);
    assert_null(est);
    if (!strstr(d.msg, want))
        fail_msg("message '%s' lacks '%s'", d.msg, want);
}

static void test_create_refusals(void **state)
{
    (void)state;
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 1;
    s.n_threads = 1;
    struct tpu_device *plain = NULL, *part = NULL;
    assert_int_equal(tpu_device_open(&s, &plain, NULL), 0);
    s.pod = pod_threads_link(pt, 1);
    assert_int_equal(tpu_device_open(&s, &part, NULL), 0);
    struct scenario sc = {.hosts = 2, .input = TPU_PER_HOST_V2};
    struct tpu_run_config cfg;
    base_config(&sc, &cfg);
    /* num_hosts that differs from the group's */
    cfg.host_group = pod_threads_group(pt, 1);
    cfg.num_hosts = 1;
    expect_create_refused(part, &cfg, "host_group has 2 hosts, but num_hosts is 1; every host "
                                      "of the group runs the same configuration with "
                                      "num_hosts 2");
    /* a device without a pod link */
    cfg.num_hosts = 2;
    expect_create_refused(plain, &cfg, "host_group makes this process host 1 of 2, but the "
                                       "device has no pod link (settings.pod is NULL)");
    /* a device that is another part */
    cfg.host_group = pod_threads_group(pt, 0);
    expect_create_refused(part, &cfg, "the device is part 1 of 2 (settings.pod), but "
                                      "host_group makes this process host 0 of 2; open the "
                                      "device with settings.pod parts 2, index 0");
    /* a pod's part without a host group */
    cfg.host_group = NULL;
    cfg.num_hosts = 1;
    expect_create_refused(part, &cfg, "the device is part 1 of a pod of 2 devices "
                                      "(settings.pod), but the run configuration has no "
                                      "host_group");
    tpu_device_close(&part);
    tpu_device_close(&plain);
    pod_threads_destroy(pt);
}

/* ---- the dataset input's skip ---------------------------------------------------------------- */

/* skip then next reads what next then next reads, and skip gives next's real rows and end:
 * training (endless, and finite with max_examples), evaluation (its short last batch). */
static void test_dataset_skip(void **state)
{
    (void)state;
    struct tpu_dataset ds;
    toy_dataset(&ds, 37, 2);
    const enum tpu_mode modes[] = {TPU_MODE_TRAIN, TPU_MODE_TRAIN, TPU_MODE_EVAL};
    const uint64_t limits[] = {0, 50, 0};
    for (int m = 0; m < 3; m++) {
        struct tpu_dataset_input a, b;
        tpu_dataset_input_init(&a, &ds, 9);
        tpu_dataset_input_init(&b, &ds, 9);
        a.max_examples = b.max_examples = limits[m];
        assert_non_null(a.input.skip);
        assert_int_equal(a.input.start(&a, modes[m], 0, 16, NULL), 0);
        assert_int_equal(b.input.start(&b, modes[m], 0, 16, NULL), 0);
        float xa[16 * TOY_FEATURES], xb[16 * TOY_FEATURES];
        int32_t ya[16], yb[16];
        void *ta[2] = {xa, ya}, *tb[2] = {xb, yb};
        for (int call = 0; call < 8; call++) {
            uint32_t na = 0, nb = 0;
            /* a: next, b: skip; then both next, which must agree */
            int ra = a.input.next(&a, modes[m], 0, 16, ta, &na, NULL);
            int rb = (b.input.skip)(&b, modes[m], 0, 16, &nb, NULL);
            assert_int_equal(ra, rb);
            assert_int_equal(na, nb);
            assert_int_equal(a.pos, b.pos);
            ra = a.input.next(&a, modes[m], 0, 16, ta, &na, NULL);
            rb = b.input.next(&b, modes[m], 0, 16, tb, &nb, NULL);
            assert_int_equal(ra, rb);
            assert_int_equal(na, nb);
            if (ra == 1) {
                assert_memory_equal(xa, xb, na * TOY_FEATURES * sizeof(float));
                assert_memory_equal(ya, yb, na * sizeof(int32_t));
            }
        }
        /* the eval pass and the finite stream ended within 8 x 32 rows */
        if (m > 0)
            assert_int_equal((a.input.skip)(&a, modes[m], 0, 16, &(uint32_t){0}, NULL), 0);
        tpu_dataset_input_free(&a);
        tpu_dataset_input_free(&b);
    }
    tpu_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_skip),
        cmocka_unit_test(test_create_refusals),
        cmocka_unit_test_setup_teardown(test_per_host_v2_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_per_host_v2_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_per_host_v1_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_per_host_v1_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_per_shard_v1_2_no_skip, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_per_shard_v1_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_broadcast_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_broadcast_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_cores_per_replica_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_input_ends_mid_step, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_resume, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_mismatch, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_input_fails_on_host1, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_stop_on_every_host, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_stop_on_one_host, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_nan_on_host1, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_agreed_errors_do_not_abort, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_check_fails_on_one_host, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_sliced_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_sliced_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_sliced_2_no_skip, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_broadcast_2, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_broadcast_4, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_cores_per_replica_2, setup,
                                        teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_one_host_per_host_v2, setup,
                                        teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_one_host_per_host_v1, setup,
                                        teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_refused_input_mode, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_stop_on_one_host, setup, teardown_state),
        cmocka_unit_test_setup_teardown(test_predict_input_fails_on_host1, setup,
                                        teardown_state),
        cmocka_unit_test(test_host_memory_counts_held_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
