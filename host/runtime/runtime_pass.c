/* One pass of the estimator (a train, evaluate or predict call, runtime.c) on the simulated
 * chip: the infeed and outfeed threads and the caller's loop of device launches, with the
 * loop boundary's hooks, checkpoint and metrics log. It does not load programs or restore
 * params: runtime.c has done that before the pass starts.
 *
 * One pass is:
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
 * input cost of each batch. Costs are modeled constants or measured wall time (config).
 * Each cost charged is also a host phase on the device's timeline (when it traces), at the
 * cycle and for the cycles charged: "launch", "hooks", "checkpoint save", "<mode> input
 * batch".
 *
 * How many steps each launch runs is tune/'s (the loop size); which replicas each input_fn
 * call feeds is shard/'s. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "io/checkpoint_int.h"
#include "runtime_int.h"
#include "shard/shard_int.h"
#include "tune/tune_int.h"
#include "tpusim/checkpoint.h"
#include "util.h"

/* ---- small helpers ------------------------------------------------------------------------ */

double tpu__runtime_wall_s(void)
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
        return s_to_cycles(e, tpu__runtime_wall_s() - t0);
    return us_to_cycles(e, modeled_us);
}

/* ---- the threads of a pass --------------------------------------------------------------- */

static void pass_fail(struct tpu__pass *p, int rc, const struct tpu_diag *d)
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

static bool pass_failed(struct tpu__pass *p)
{
    pthread_mutex_lock(&p->lock);
    bool f = p->error != 0;
    pthread_mutex_unlock(&p->lock);
    return f;
}

/* A feed thread is about to return: the watchdog counts the threads that can still act. */
static void feeder_exits(struct tpu__pass *p)
{
    pthread_mutex_lock(&p->lock);
    p->live_feeders--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
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

/* ---- the infeed thread --------------------------------------------------------------------- */

/* Training waits initial_infeed_sleep_secs before its first batch, in slices, so that a stop
 * request or a failure is seen within 50 ms. */
static void initial_infeed_sleep(struct tpu__pass *p)
{
    struct tpu_estimator *e = p->e;
    if (e->cfg.initial_infeed_sleep_secs <= 0 || p->mode != TPU_MODE_TRAIN)
        return;
    const double until = tpu__runtime_wall_s() + e->cfg.initial_infeed_sleep_secs;
    for (double now = tpu__runtime_wall_s(); now < until && !atomic_load(&e->stop) &&
                                             !pass_failed(p);
         now = tpu__runtime_wall_s()) {
        double s = until - now < 0.05 ? until - now : 0.05;
        struct timespec ts = {0, (long)(s * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* One input_fn call's tensors, [per_call][cols] each, in the program's infeed order. */
struct call_batch {
    void *bufs[4];
    size_t row_bytes[4];
    bool is_int[4];
};

static int call_batch_alloc(struct call_batch *cb, const struct tpu_model_program *mp,
                            uint32_t per_call)
{
    memset(cb, 0, sizeof *cb);
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        cb->row_bytes[t] = (size_t)b->cols * tpu_buf_dtype_bytes(b->dtype);
        cb->is_int[t] = b->dtype == TPU_BUF_INT32;
        cb->bufs[t] = malloc(cb->row_bytes[t] * per_call);
        if (!cb->bufs[t])
            return TPU_ENOMEM;
    }
    return 0;
}

static void call_batch_free(struct call_batch *cb)
{
    for (int t = 0; t < 4; t++)
        free(cb->bufs[t]);
}

/* Pads rows n_real .. per_call - 1 of every tensor: zeros, and -1 (a masked label) in
 * integer tensors. */
static void call_batch_pad(struct call_batch *cb, uint32_t n_tensors, uint32_t n_real,
                           uint32_t per_call)
{
    for (uint32_t t = 0; t < n_tensors; t++) {
        char *base = cb->bufs[t];
        size_t pad = (size_t)(per_call - n_real) * cb->row_bytes[t];
        if (cb->is_int[t])
            memset(base + n_real * cb->row_bytes[t], 0xff, pad); /* -1: a masked label */
        else
            memset(base + n_real * cb->row_bytes[t], 0, pad);
    }
}

/* Queues call `call`'s tensors on the infeed of every core of the replicas it feeds (shard/
 * says which, with which rows), ready at host cycle `clock`. Returns 0 or the device's
 * error (TPU_ECANCELED when the pass was canceled). */
static int call_batch_push(struct tpu__pass *p, const struct call_batch *cb, uint32_t call,
                           uint64_t clock, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu__shard_call plan;
    tpu__shard_call_plan(&e->cfg, p->mode, e->n_replicas, p->calls, p->per_call,
                         p->per_replica, call, &plan);
    const uint32_t cpr = e->n_cores / e->n_replicas;
    for (uint32_t r = 0; r < plan.n_replicas; r++) {
        uint32_t rep = plan.first_replica + r;
        uint32_t row0 = tpu__shard_call_row0(&plan, r);
        for (uint32_t k = 0; k < cpr; k++) {
            uint32_t core = rep * cpr + k;
            for (uint32_t t = 0; t < mp->n_infeed; t++) {
                int rc = tpu_device_infeed(e->dev, core,
                                           (char *)cb->bufs[t] + row0 * cb->row_bytes[t],
                                           plan.rows_each * cb->row_bytes[t], clock, d);
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
}

/* Keeps an input_fn call's host phase for the timeline (the caller's thread moves it there,
 * see flush_input_phases). An allocation failure drops it, as the device's own timeline
 * drops events: the trace never stops a run. */
static void record_input_phase(struct tpu__pass *p, uint64_t step, uint64_t start_cycle,
                               uint64_t cycles)
{
    pthread_mutex_lock(&p->lock);
    if (!grow((void **)&p->input_phases, &p->input_phases_cap, p->n_input_phases + 1,
              sizeof *p->input_phases))
        p->input_phases[p->n_input_phases++] =
            (struct tpu__host_phase){.step = step, .start_cycle = start_cycle, .cycles = cycles};
    pthread_mutex_unlock(&p->lock);
}

/* The input ended before the step the infeed thread was reading: no further step is fed. */
static void mark_input_ended(struct tpu__pass *p)
{
    pthread_mutex_lock(&p->lock);
    p->input_ended = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
}

/* A stop request seen before step s: training feeds no further step and the device stops at
 * the start of this one (a clean step boundary); evaluation and prediction end now, with an
 * error. */
static void infeed_stop(struct tpu__pass *p, uint64_t s)
{
    if (p->mode != TPU_MODE_TRAIN) {
        struct tpu_diag d = {0};
        pass_fail(p, tpu__fail(&d, TPU_ECANCELED, "%s stopped on request after %llu batches; no "
                               "result", p->mode == TPU_MODE_EVAL ? "evaluation" : "prediction",
                               (unsigned long long)s), &d);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stopped = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
}

static void *infeed_thread(void *arg)
{
    struct tpu__pass *p = arg;
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu_diag d = {0};
    initial_infeed_sleep(p);
    struct call_batch cb;
    if (call_batch_alloc(&cb, mp, p->per_call)) {
        pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the input batch"), &d);
        goto out;
    }
    uint64_t clock = e->host_cycle;
    bool last_step = false;
    for (uint64_t s = 0; s < p->steps && !last_step; s++) {
        if (atomic_load(&e->stop)) {
            infeed_stop(p, s);
            goto out;
        }
        uint32_t real_total = 0;
        for (uint32_t call = 0; call < p->calls; call++) {
            uint32_t n_real = 0;
            double t0 = tpu__runtime_wall_s();
            int rc = p->input->next(p->input->ctx, p->mode, call, p->per_call, cb.bufs, &n_real,
                                    &d);
            const uint64_t cost = host_cost(e, e->cfg.modeled_input_us_per_batch, t0);
            record_input_phase(p, s, clock, cost);
            clock += cost;
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
                    mark_input_ended(p);
                    goto out;
                }
                if (rc == 0)
                    n_real = 0;
                last_step = true;
            } else if (n_real < p->per_call) {
                last_step = true; /* a short batch: the input has nothing after it */
            }
            real_total += n_real;
            call_batch_pad(&cb, mp->n_infeed, n_real, p->per_call);
            if ((rc = call_batch_push(p, &cb, call, clock, &d))) {
                if (rc != TPU_ECANCELED)
                    pass_fail(p, rc, &d);
                goto out;
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
    call_batch_free(&cb);
    feeder_exits(p);
    return NULL;
}

/* ---- the outfeed thread -------------------------------------------------------------------- */

/* Training, replica 0's outfeed of pass step s: its loss (checked for NaN and Inf), kept per
 * step, and the host calls that are due. Returns 0, or non-zero after failing the pass. */
static int outfeed_train_step(struct tpu__pass *p, uint64_t s, const float *buf,
                              struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    /* the program's loss is sum / global batch; replica 0's mean is sum / its own rows */
    const double loss_scale = (double)e->n_replicas;
    /* timing-only: no values, so no loss (NaN) */
    float loss = e->timing_only ? NAN : (float)(buf[0] * loss_scale);
    uint64_t gstep = p->step0 + s + 1;
    if (!e->timing_only && !isfinite(loss)) {
        tpu__fail(d, TPU_ERANGE, "the training loss is %s at global step %llu; "
                  "training stopped (lower the learning rate, or check the "
                  "input for bad values); the last checkpoint is intact",
                  isnan(loss) ? "NaN" : "infinite", (unsigned long long)gstep);
        pass_fail(p, TPU_ERANGE, d);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    int gr = grow((void **)&p->losses, &p->loss_cap, s + 1, sizeof *p->losses);
    if (!gr)
        p->losses[s] = loss;
    pthread_mutex_unlock(&p->lock);
    if (gr) {
        pass_fail(p, tpu__fail(d, gr, "out of memory"), d);
        return -1;
    }
    if (e->cfg.host_call_every_n_steps && gstep % e->cfg.host_call_every_n_steps == 0)
        for (size_t h = 0; h < e->n_hooks; h++)
            if (e->hooks[h].host_call) {
                int hr = e->hooks[h].host_call(e->hooks[h].ctx, gstep, loss, d);
                if (hr) {
                    pass_fail(p, hr, d);
                    return -1;
                }
            }
    return 0;
}

/* Prediction, replica rep's output b of pass step s: its real rows, in global order. */
static void outfeed_predict_rows(struct tpu__pass *p, uint64_t s, uint32_t rep,
                                 const struct tpu_buffer_desc *b, const float *buf)
{
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

static void *outfeed_thread(void *arg)
{
    struct tpu__pass *p = arg;
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
        feeder_exits(p);
        return NULL;
    }
    const uint32_t cpr = e->n_cores / e->n_replicas;
    for (uint64_t s = 0; s < p->steps; s++) {
        /* Every core of a replica runs the replica's program and outfeeds; the first core's
         * tensors are the replica's, the others' are drained and dropped (a queue nobody
         * drains fills up and stops its core for good). */
        for (uint32_t c = 0; c < e->n_cores; c++) {
            const uint32_t rep = c / cpr;
            for (uint32_t t = 0; t < mp->n_outfeed; t++) {
                const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->outfeed[t]);
                size_t bytes = tpu_buffer_bytes(b);
                int rc = tpu_device_outfeed(e->dev, c, buf, bytes, 0, NULL, &d);
                if (rc) {
                    if (rc != TPU_ECANCELED)
                        pass_fail(p, rc, &d);
                    goto out;
                }
                if (c % cpr != 0)
                    continue;
                if (p->mode == TPU_MODE_TRAIN && rep == 0) {
                    if (outfeed_train_step(p, s, buf, &d))
                        goto out;
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
                    outfeed_predict_rows(p, s, rep, b, buf);
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
    feeder_exits(p);
    return NULL;
}

/* The watchdog: a run in which no core can move, every feed thread still running waits on
 * the device, and no tensor moved for DEADLOCK_S seconds of wall time can never finish (see
 * tpu_device_watch). It fails the pass with what each core waits for, which cancels the
 * device and releases every thread: an error, never a silent hang. Such a deadlock is a bug
 * (a program that outfeeds what the model does not declare, say), so the message says so. */
#define DEADLOCK_S 0.5

static void *watchdog_thread(void *arg)
{
    struct tpu__pass *p = arg;
    struct tpu_estimator *e = p->e;
    uint64_t last_moves = UINT64_MAX;
    double stuck_since = -1;
    pthread_mutex_lock(&p->lock);
    while (!p->finished && !p->error) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000 * 1000 * 1000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000 * 1000 * 1000;
        }
        pthread_cond_timedwait(&p->cv, &p->lock, &ts);
        if (p->finished || p->error)
            break;
        const uint32_t live = p->live_feeders; /* read first: it only falls */
        pthread_mutex_unlock(&p->lock);
        struct tpu_device_watch w;
        tpu_device_watch(e->dev, &w);
        const double now = tpu__runtime_wall_s();
        if (w.cores_blocked && w.host_calls_waiting >= live && w.moves == last_moves) {
            if (stuck_since < 0)
                stuck_since = now;
        } else {
            stuck_since = -1;
        }
        last_moves = w.moves;
        if (stuck_since >= 0 && now - stuck_since >= DEADLOCK_S) {
            struct tpu_diag d = {0};
            tpu__fail(&d, TPU_ETHREAD, "the %s run is deadlocked and was stopped: no core can "
                      "move (%s) and the host's feed threads all wait on the device; this is a "
                      "bug in tpusim or in the model's program (outfeed tensors that the model "
                      "does not declare, say): please report it",
                      p->mode == TPU_MODE_TRAIN ? "training" : p->mode == TPU_MODE_EVAL
                      ? "evaluation" : "prediction", w.why);
            pass_fail(p, TPU_ETHREAD, &d);
            return NULL;
        }
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Waits until the outfeed thread has processed `steps` steps (or something failed). */
static void wait_drained(struct tpu__pass *p, uint64_t steps)
{
    pthread_mutex_lock(&p->lock);
    while (p->drained < steps && !p->error)
        pthread_cond_wait(&p->cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* ---- host phases on the timeline ----------------------------------------------------------- */

/* The names of the host's phases in the trace (the "host" process in Perfetto): "launch" (the
 * host's cost to start a loop on the device), "hooks" (the loop boundary's hooks and
 * logging), "checkpoint save", and one "<mode> input batch" per input_fn call. Each is
 * exactly the cost charged to the simulated timeline (modeled or measured), at the cycle it
 * is charged: launch, hooks and checkpoint on the host's clock (their sum is the pass's host
 * time, tpu_loop_info.pass_host_seconds), input batches on the infeed thread's clock, which
 * runs ahead of the device. */
static const char *const input_phase_name[] = {"train input batch", "eval input batch",
                                               "predict input batch"};

static void trace_host_phase(struct tpu_estimator *e, const char *name, uint64_t start_cycle,
                             uint64_t cycles)
{
    tpu_device_trace_host(e->dev, name, start_cycle, start_cycle + cycles);
}

/* Moves the input phases of the pass's steps before `steps` to the timeline, in the order the
 * infeed thread read them. Only the caller's thread calls it, at loop boundaries and once
 * after the threads are joined (steps UINT64_MAX), so the trace's order does not depend on
 * how far the infeed thread ran ahead. */
static void flush_input_phases(struct tpu__pass *p, uint64_t steps)
{
    pthread_mutex_lock(&p->lock);
    uint64_t n = 0;
    while (n < p->n_input_phases && p->input_phases[n].step < steps)
        n++;
    for (uint64_t i = 0; i < n; i++)
        trace_host_phase(p->e, input_phase_name[p->mode], p->input_phases[i].start_cycle,
                         p->input_phases[i].cycles);
    if (n) {
        memmove(p->input_phases, p->input_phases + n,
                (p->n_input_phases - n) * sizeof *p->input_phases);
        p->n_input_phases -= n;
    }
    pthread_mutex_unlock(&p->lock);
}

/* ---- loops -------------------------------------------------------------------------------- */

static int write_metrics(struct tpu_estimator *e, const struct tpu_loop_info *li)
{
    if (!e->cfg.model_dir[0])
        return 0;
    if (!e->metrics) {
        char path[600];
        struct tpu_diag md = {0}; /* a failure shows at fopen */
        tpu__checkpoint_mkdir_p(e->cfg.model_dir, &md);
        snprintf(path, sizeof path, "%s/metrics.jsonl", e->cfg.model_dir);
        e->metrics = fopen(path, "a");
        if (!e->metrics)
            return TPU_EIO;
    }
    static const char *const mode_name[] = {"train", "eval", "predict"};
    char loss[32];
    if (isfinite(li->loss))
        snprintf(loss, sizeof loss, "%.9g", (double)li->loss);
    else
        snprintf(loss, sizeof loss, "null"); /* none: timing-only, or no step ran */
    fprintf(e->metrics,
            "{\"mode\": \"%s\", \"global_step\": %llu, \"steps\": %llu, \"loss\": %s, "
            "\"device_seconds\": %.9g, \"host_seconds\": %.9g, \"total_seconds\": %.9g, "
            "\"wall_seconds\": %.6f, \"examples_per_s\": %.6g, \"step_time_s\": %.9g, "
            "\"mxu_utilization\": %.6f, \"infeed_stall_share\": %.6f, "
            "\"host_overhead_share\": %.6f, \"host_time\": \"%s\"}\n",
            mode_name[li->mode], (unsigned long long)li->global_step,
            (unsigned long long)li->steps, loss, li->device_seconds,
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

/* The caller's loop of one pass, from launch to launch. */
struct pass_loop {
    uint64_t target_step;            /* training: the global step to reach */
    uint64_t done;                   /* steps of this pass completed on the device */
    uint64_t last_ckpt;              /* the global step of the newest checkpoint */
    bool ended;                      /* the input ended (the device stopped at a missing step) */
    bool stop;                       /* a stop was requested */
    struct tpu_core_counters before; /* the cores' counters at the start of the loop */
    /* the pass so far: device and host cycles, MACs and MAC capacity, infeed waits */
    double acc_dev, acc_host, acc_macs, acc_cap, acc_stall;
    struct tpu__loop_size size;      /* steps per launch (tune/) */
};

/* One launch: the steps it ran, and its device span [start, end] in cycles. */
struct launch {
    uint64_t start, end, ran;
};

static bool pass_loop_more(const struct tpu_estimator *e, const struct tpu__pass *p,
                           const struct pass_loop *L)
{
    return p->mode == TPU_MODE_TRAIN ? e->global_step < L->target_step : L->done < p->steps;
}

/* Launches the loop for n steps at the host's clock plus the launch cost and runs it to its
 * end; l->ran gets the steps that ran, L->ended is set when the input ended (TPU_EEND).
 * Returns 0, or the device's error (the pass has failed with it). */
static int launch_loop(struct tpu_estimator *e, struct tpu__pass *p, struct pass_loop *L,
                       uint64_t n, struct launch *l)
{
    const bool training = p->mode == TPU_MODE_TRAIN;
    tpu_device_set_var(e->dev, e->mp.var_iterations, (int64_t)n);
    l->start = e->host_cycle + host_cost(e, e->cfg.modeled_launch_us, tpu__runtime_wall_s());
    trace_host_phase(e, "launch", e->host_cycle, l->start - e->host_cycle);
    l->end = l->start;
    l->ran = n;
    struct tpu_diag rd = {0};
    int r = tpu_device_run(e->dev, l->start, &l->end, &rd);
    if (r == TPU_EEND) {
        /* the input ended: the device stopped at the start of the missing step */
        L->ended = true;
        int64_t dev_step = tpu_device_get_var(e->dev, 0, e->mp.var_step);
        l->ran = training ? (uint64_t)dev_step - e->global_step : 0;
        if (!training) {
            pthread_mutex_lock(&p->lock);
            l->ran = p->fed - L->done;
            pthread_mutex_unlock(&p->lock);
        }
        if (l->end < l->start) /* the device sets end at TPU_EEND too: the stopped clocks */
            l->end = l->start;
        return 0;
    }
    if (r) {
        pthread_mutex_lock(&p->lock);
        bool ours = p->error != 0;
        pthread_mutex_unlock(&p->lock);
        if (!ours)
            pass_fail(p, r, &rd);
    }
    return r;
}

/* The loop's device figures (loss, time, throughput, utilization, infeed stalls) into li,
 * and into the pass's sums; `now` becomes the next loop's starting counters. */
static void loop_device_figures(const struct tpu_estimator *e, struct tpu__pass *p,
                                struct pass_loop *L, const struct launch *l,
                                const struct tpu_core_counters *now, struct tpu_loop_info *li)
{
    const bool training = p->mode == TPU_MODE_TRAIN;
    const uint64_t start = l->start, end = l->end, ran = l->ran;
    const struct tpu_core_counters *before = &L->before;
    *li = (struct tpu_loop_info){.mode = p->mode, .global_step = e->global_step, .steps = ran};
    li->loss = NAN; /* none yet: no step ran, or no values (timing-only) */
    if (p->mode == TPU_MODE_EVAL) {
        pthread_mutex_lock(&p->lock);
        if (p->count > 0 && !e->timing_only)
            li->loss = (float)(p->loss_sum / p->count); /* mean per example so far */
        pthread_mutex_unlock(&p->lock);
    }
    if (training && ran && !e->timing_only) {
        pthread_mutex_lock(&p->lock);
        li->loss = p->losses[L->done - 1];
        pthread_mutex_unlock(&p->lock);
    }
    li->device_seconds = (double)(end - start) / e->hz;
    li->step_time_s = ran ? li->device_seconds / ran : 0;
    li->examples_per_s = li->device_seconds > 0
                             ? (double)ran * p->per_replica * e->n_replicas / li->device_seconds
                             : 0;
    double cap = (double)(end - start) * tpu_device_chip(e->dev)->mxu_rows *
                 tpu_device_chip(e->dev)->mxu_cols * tpu_device_chip(e->dev)->mxu_per_core *
                 e->n_cores;
    li->mxu_utilization = cap > 0 ? (double)(now->macs - before->macs) / cap : 0;
    if (e->cfg.log_step_count_steps && training)
        li->log_due = e->global_step / e->cfg.log_step_count_steps !=
                      (e->global_step - ran) / e->cfg.log_step_count_steps;
    /* the cores' mean share of the loop spent waiting for infeed */
    li->infeed_stall_share = end > start
                                 ? (double)(now->stall[TPU_STALL_INFEED_EMPTY] -
                                            before->stall[TPU_STALL_INFEED_EMPTY]) /
                                       ((double)(end - start) * e->n_cores)
                                 : 0;
    if (li->infeed_stall_share > 1)
        li->infeed_stall_share = 1;
    L->acc_dev += (double)(end - start);
    L->acc_macs += (double)(now->macs - before->macs);
    L->acc_cap += cap;
    L->acc_stall += (double)(now->stall[TPU_STALL_INFEED_EMPTY] -
                             before->stall[TPU_STALL_INFEED_EMPTY]);
    L->before = *now;
}

/* The checkpoint policy at a loop boundary: training with a model_dir saves when
 * save_checkpoints_steps steps passed since the last checkpoint, or at the final loop when
 * it ran a step since (a final loop that ran no step, a stop or an input that ended at the
 * boundary, has nothing new to save). The save's host cost goes to *cycles (0 when none),
 * on the timeline from host cycle `at`. Returns 0, or the save's error (the pass has failed
 * with it). */
static int boundary_checkpoint(struct tpu_estimator *e, struct tpu__pass *p,
                               struct pass_loop *L, uint64_t at, uint64_t *cycles,
                               struct tpu_diag *d)
{
    *cycles = 0;
    const bool training = p->mode == TPU_MODE_TRAIN;
    const bool final = L->ended || L->stop || !pass_loop_more(e, p, L);
    if (!(training && e->cfg.model_dir[0] && !e->timing_only &&
          ((final && e->global_step != L->last_ckpt) ||
           (e->cfg.save_checkpoints_steps &&
            e->global_step - L->last_ckpt >= e->cfg.save_checkpoints_steps))))
        return 0;
    double tc = tpu__runtime_wall_s();
    int rc = tpu__runtime_save_checkpoint(e, d);
    if (rc) {
        pass_fail(p, rc, d);
        return rc;
    }
    L->last_ckpt = e->global_step;
    *cycles = host_cost(e, e->cfg.modeled_checkpoint_us, tc);
    trace_host_phase(e, "checkpoint save", at, *cycles);
    return 0;
}

/* The loop's host figures into li, once the boundary's cost `host` is known: the host's clock
 * moves to the device's end plus that cost; the host's share counts the launch too. */
static void loop_host_figures(struct tpu_estimator *e, const struct tpu__pass *p,
                              struct pass_loop *L, const struct launch *l, uint64_t host,
                              struct tpu_loop_info *li)
{
    li->host_seconds = (double)host / e->hz;
    uint64_t prev_host = e->host_cycle;
    e->host_cycle = l->end + host;
    li->total_seconds = (double)e->host_cycle / e->hz;
    li->wall_seconds = tpu__runtime_wall_s() - e->wall_start;
    /* the host's share of this loop's span: boundary costs plus the launch */
    double launch_s = (double)(l->start - prev_host) / e->hz;
    double span = li->device_seconds + li->host_seconds + launch_s;
    li->host_overhead_share = span > 0 ? (li->host_seconds + launch_s) / span : 0;
    L->acc_host += (double)host + (double)(l->start - prev_host);
    li->pass_device_seconds = L->acc_dev / e->hz;
    li->pass_host_seconds = L->acc_host / e->hz;
    li->pass_mxu_utilization = L->acc_cap > 0 ? L->acc_macs / L->acc_cap : 0;
    li->pass_infeed_stall_share = L->acc_dev > 0 ? L->acc_stall / (L->acc_dev * e->n_cores) : 0;
    li->pass_host_overhead_share =
        L->acc_dev + L->acc_host > 0 ? L->acc_host / (L->acc_dev + L->acc_host) : 0;
    li->pass_examples_per_s = L->acc_dev > 0 ? (double)L->done * p->per_replica *
                                                   e->n_replicas / li->pass_device_seconds
                                             : 0;
}

/* The loop boundary after launch l: the loop's figures, the hooks, the checkpoint, the host's
 * clock, the metrics log. The hooks' cost is the modeled one or the wall time from here to
 * the end of the hooks. Returns 0, or the error of a hook or of the checkpoint (the pass has
 * failed with it). */
static int loop_boundary(struct tpu_estimator *e, struct tpu__pass *p, struct pass_loop *L,
                         const struct launch *l, struct tpu_diag *d)
{
    double t0 = tpu__runtime_wall_s();
    struct tpu_core_counters now;
    sum_counters(e, &now);
    struct tpu_loop_info li;
    loop_device_figures(e, p, L, l, &now, &li);
    int rc = 0;
    for (size_t h = 0; h < e->n_hooks && !rc; h++)
        if (e->hooks[h].after_loop)
            rc = e->hooks[h].after_loop(e->hooks[h].ctx, &li, d);
    if (rc) {
        pass_fail(p, rc, d);
        return rc;
    }
    uint64_t host = host_cost(e, e->cfg.modeled_hooks_us, t0);
    trace_host_phase(e, "hooks", l->end, host);
    L->stop = atomic_load(&e->stop) != 0;
    uint64_t ckpt;
    if ((rc = boundary_checkpoint(e, p, L, l->end + host, &ckpt, d)))
        return rc;
    host += ckpt;
    loop_host_figures(e, p, L, l, host, &li);
    e->last = li;
    write_metrics(e, &li);
    return 0;
}

/* The infeed, outfeed and watchdog threads of a pass. */
struct pass_threads {
    pthread_t in, out, wd;
};

static int start_threads(struct tpu__pass *p, struct pass_threads *t, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    tpu_device_reset_cancel(e->dev);
    p->live_feeders = 2;
    if (pthread_create(&t->in, NULL, infeed_thread, p) != 0)
        return tpu__fail(d, TPU_ETHREAD, "cannot start the infeed thread");
    if (pthread_create(&t->out, NULL, outfeed_thread, p) != 0) {
        tpu_device_cancel(e->dev);
        pthread_join(t->in, NULL);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the outfeed thread");
    }
    if (pthread_create(&t->wd, NULL, watchdog_thread, p) != 0) {
        tpu_device_cancel(e->dev);
        pthread_join(t->in, NULL);
        pthread_join(t->out, NULL);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the watchdog thread");
    }
    return 0;
}

/* Stops the helpers (they may wait for steps that will never run) and joins them. */
static void join_threads(struct tpu__pass *p, struct pass_threads *t)
{
    struct tpu_estimator *e = p->e;
    pthread_mutex_lock(&p->lock);
    p->finished = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
    pthread_join(t->wd, NULL);
    tpu_device_cancel(e->dev);
    pthread_join(t->in, NULL);
    pthread_join(t->out, NULL);
    tpu_device_reset_cancel(e->dev);
}

/* What the pass returns once its threads are joined: the first error of any thread, the
 * loop's own error rc, a stop request's or the input's end's sentence, or 0. */
static int pass_result(struct tpu_estimator *e, struct tpu__pass *p, const struct pass_loop *L,
                       int rc, struct tpu_diag *d)
{
    const bool training = p->mode == TPU_MODE_TRAIN;
    const uint64_t target_step = L->target_step;
    pthread_mutex_lock(&p->lock);
    int perr = p->error;
    struct tpu_diag pd = p->diag;
    bool input_ended = p->input_ended;
    bool stopped = p->stopped || L->stop;
    pthread_mutex_unlock(&p->lock);
    if (perr) {
        if (d)
            *d = pd;
        return perr;
    }
    if (rc)
        return rc;
    /* a stop that came after the last batch was read cost nothing: the result stands */
    if (!training && stopped && !input_ended && L->done < p->steps)
        return tpu__fail(d, TPU_ECANCELED, "%s stopped on request after %llu batches; no "
                         "result", p->mode == TPU_MODE_EVAL ? "evaluation" : "prediction",
                         (unsigned long long)L->done);
    if (training && stopped && e->global_step < target_step) {
        char path[1024] = "";
        uint64_t s = 0;
        struct tpu_diag ld = {0};
        if (e->cfg.model_dir[0] && !e->timing_only &&
            tpu_checkpoint_latest(e->cfg.model_dir, &s, path, sizeof path, &ld) == 0)
            return tpu__fail(d, TPU_ECANCELED, "training stopped on request at global step "
                             "%llu (of %llu); checkpoint %s holds it",
                             (unsigned long long)e->global_step,
                             (unsigned long long)target_step, path);
        return tpu__fail(d, TPU_ECANCELED, "training stopped on request at global step %llu "
                         "(of %llu); no checkpoint was written (%s)",
                         (unsigned long long)e->global_step, (unsigned long long)target_step,
                         e->timing_only ? "timing-only: no values" : "no model_dir");
    }
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

int tpu__pass_run(struct tpu_estimator *e, struct tpu__pass *p, uint64_t target_step,
                  struct tpu_diag *d)
{
    struct pass_threads threads;
    int rc = start_threads(p, &threads, d);
    if (rc)
        return rc;
    const bool training = p->mode == TPU_MODE_TRAIN;
    struct pass_loop L = {.target_step = target_step, .last_ckpt = e->global_step};
    tpu__loop_size_init(&L.size, &e->cfg);
    sum_counters(e, &L.before);
    while (!L.ended && !L.stop && pass_loop_more(e, p, &L)) {
        if (atomic_load(&e->stop)) {
            /* between launches: stop before the next one (the last boundary is saved) */
            L.stop = true;
            if (training && e->cfg.model_dir[0] && L.last_ckpt != e->global_step &&
                (rc = tpu__runtime_save_checkpoint(e, d)))
                pass_fail(p, rc, d);
            break;
        }
        uint64_t remaining = training ? target_step - e->global_step : p->steps - L.done;
        struct launch l;
        if ((rc = launch_loop(e, p, &L, tpu__loop_size_next(&L.size, remaining), &l)))
            break;
        L.done += l.ran;
        if (training)
            e->global_step += l.ran;
        wait_drained(p, L.done);
        if (pass_failed(p)) {
            rc = -1;
            break;
        }
        flush_input_phases(p, L.done);
        if ((rc = loop_boundary(e, p, &L, &l, d)))
            break;
        tpu__loop_size_observe(&L.size, e->last.step_time_s);
    }
    join_threads(p, &threads);
    flush_input_phases(p, UINT64_MAX);
    return pass_result(e, p, &L, rc, d);
}

void tpu__pass_init(struct tpu__pass *p, struct tpu_estimator *e, const struct tpu_input *in,
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

void tpu__pass_free(struct tpu__pass *p)
{
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cv);
    free(p->real_rows);
    free(p->losses);
    free(p->input_phases);
}
