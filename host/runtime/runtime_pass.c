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
 * input cost of each batch. Costs are modeled constants or measured wall time (config). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "io/checkpoint_int.h"
#include "runtime_int.h"
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

static void *infeed_thread(void *arg)
{
    struct tpu__pass *p = arg;
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu_diag d = {0};
    if (e->cfg.initial_infeed_sleep_secs > 0 && p->mode == TPU_MODE_TRAIN) {
        /* in slices, so that a stop request or a failure is seen within 50 ms */
        const double until = tpu__runtime_wall_s() + e->cfg.initial_infeed_sleep_secs;
        for (double now = tpu__runtime_wall_s(); now < until && !atomic_load(&e->stop) &&
                                                 !pass_failed(p);
             now = tpu__runtime_wall_s()) {
            double s = until - now < 0.05 ? until - now : 0.05;
            struct timespec ts = {0, (long)(s * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    /* one call's tensors, [per_call][cols] each */
    void *bufs[4] = {0};
    size_t row_bytes[4] = {0};
    bool is_int[4] = {0};
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        row_bytes[t] = (size_t)b->cols * tpu_dtype_bytes(b->dtype);
        is_int[t] = b->dtype == TPU_INT32;
        bufs[t] = malloc(row_bytes[t] * p->per_call);
        if (!bufs[t]) {
            pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the input batch"), &d);
            goto out;
        }
    }
    uint64_t clock = e->host_cycle;
    bool last_step = false;
    for (uint64_t s = 0; s < p->steps && !last_step; s++) {
        if (atomic_load(&e->stop)) {
            /* a stop request: training feeds no further step and the device stops at the
             * start of this one (a clean step boundary); evaluation and prediction end now */
            if (p->mode != TPU_MODE_TRAIN) {
                pass_fail(p, tpu__fail(&d, TPU_ECANCELED, "%s stopped on request after %llu "
                                       "batches; no result", p->mode == TPU_MODE_EVAL
                                       ? "evaluation" : "prediction", (unsigned long long)s),
                          &d);
                goto out;
            }
            pthread_mutex_lock(&p->lock);
            p->stopped = true;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->lock);
            goto out;
        }
        uint32_t real_total = 0;
        for (uint32_t call = 0; call < p->calls; call++) {
            uint32_t n_real = 0;
            double t0 = tpu__runtime_wall_s();
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
    feeder_exits(p);
    return NULL;
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
    /* the program's loss is sum / global batch; replica 0's mean is sum / its own rows */
    const double loss_scale = (double)e->n_replicas;
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
                    /* timing-only: no values, so no loss (NaN) */
                    float loss = e->timing_only ? NAN : (float)(buf[0] * loss_scale);
                    uint64_t gstep = p->step0 + s + 1;
                    if (!e->timing_only && !isfinite(loss)) {
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
                    if (e->cfg.host_call_every_n_steps &&
                        gstep % e->cfg.host_call_every_n_steps == 0)
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

int tpu__pass_run(struct tpu_estimator *e, struct tpu__pass *p, uint64_t target_step,
                  struct tpu_diag *d)
{
    pthread_t in_th, out_th, wd_th;
    int rc = 0;
    tpu_device_reset_cancel(e->dev);
    p->live_feeders = 2;
    if (pthread_create(&in_th, NULL, infeed_thread, p) != 0)
        return tpu__fail(d, TPU_ETHREAD, "cannot start the infeed thread");
    if (pthread_create(&out_th, NULL, outfeed_thread, p) != 0) {
        tpu_device_cancel(e->dev);
        pthread_join(in_th, NULL);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the outfeed thread");
    }
    if (pthread_create(&wd_th, NULL, watchdog_thread, p) != 0) {
        tpu_device_cancel(e->dev);
        pthread_join(in_th, NULL);
        pthread_join(out_th, NULL);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the watchdog thread");
    }
    const bool training = p->mode == TPU_MODE_TRAIN;
    uint64_t done = 0;               /* steps of this pass completed on the device */
    uint64_t ipl = e->cfg.iterations_per_loop_s > 0 ? 1 : e->cfg.iterations_per_loop;
    bool ended = false;
    uint64_t last_ckpt = e->global_step;
    struct tpu_core_counters before;
    sum_counters(e, &before);
    /* the pass so far: device and host cycles, MACs and MAC capacity, infeed waits */
    double acc_dev = 0, acc_host = 0, acc_macs = 0, acc_cap = 0, acc_stall = 0;
    bool stop = false;
    while (!ended && !stop && (training ? e->global_step < target_step : done < p->steps)) {
        if (atomic_load(&e->stop)) {
            /* between launches: stop before the next one (the last boundary is saved) */
            stop = true;
            if (training && e->cfg.model_dir[0] && last_ckpt != e->global_step &&
                (rc = tpu__runtime_save_checkpoint(e, d)))
                pass_fail(p, rc, d);
            break;
        }
        uint64_t remaining = training ? target_step - e->global_step : p->steps - done;
        uint64_t n = remaining < ipl ? remaining : ipl;
        tpu_device_set_var(e->dev, e->mp.var_iterations, (int64_t)n);
        uint64_t start =
            e->host_cycle + host_cost(e, e->cfg.modeled_launch_us, tpu__runtime_wall_s());
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
            if (end < start) /* the device sets end at TPU_EEND too: the stopped clocks */
                end = start;
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
        double t0 = tpu__runtime_wall_s();
        struct tpu_core_counters now;
        sum_counters(e, &now);
        struct tpu_loop_info li = {.mode = p->mode, .global_step = e->global_step, .steps = ran};
        li.loss = NAN; /* none yet: no step ran, or no values (timing-only) */
        if (p->mode == TPU_MODE_EVAL) {
            pthread_mutex_lock(&p->lock);
            if (p->count > 0 && !e->timing_only)
                li.loss = (float)(p->loss_sum / p->count); /* mean per example so far */
            pthread_mutex_unlock(&p->lock);
        }
        if (training && ran && !e->timing_only) {
            pthread_mutex_lock(&p->lock);
            li.loss = p->losses[done - 1];
            pthread_mutex_unlock(&p->lock);
        }
        li.device_seconds = (double)(end - start) / e->hz;
        li.step_time_s = ran ? li.device_seconds / ran : 0;
        li.examples_per_s = li.device_seconds > 0
                                ? (double)ran * p->per_replica * e->n_replicas / li.device_seconds
                                : 0;
        double cap = (double)(end - start) * tpu_device_chip(e->dev)->mxu_rows *
                     tpu_device_chip(e->dev)->mxu_cols * tpu_device_chip(e->dev)->mxu_per_core *
                     e->n_cores;
        li.mxu_utilization = cap > 0 ? (double)(now.macs - before.macs) / cap : 0;
        if (e->cfg.log_step_count_steps && training)
            li.log_due = e->global_step / e->cfg.log_step_count_steps !=
                         (e->global_step - ran) / e->cfg.log_step_count_steps;
        /* the cores' mean share of the loop spent waiting for infeed */
        li.infeed_stall_share = end > start
                                    ? (double)(now.stall[TPU_STALL_INFEED_EMPTY] -
                                               before.stall[TPU_STALL_INFEED_EMPTY]) /
                                          ((double)(end - start) * e->n_cores)
                                    : 0;
        if (li.infeed_stall_share > 1)
            li.infeed_stall_share = 1;
        acc_dev += (double)(end - start);
        acc_macs += (double)(now.macs - before.macs);
        acc_cap += cap;
        acc_stall += (double)(now.stall[TPU_STALL_INFEED_EMPTY] -
                              before.stall[TPU_STALL_INFEED_EMPTY]);
        before = now;
        for (size_t h = 0; h < e->n_hooks && !rc; h++)
            if (e->hooks[h].after_loop)
                rc = e->hooks[h].after_loop(e->hooks[h].ctx, &li, d);
        if (rc) {
            pass_fail(p, rc, d);
            break;
        }
        uint64_t host = host_cost(e, e->cfg.modeled_hooks_us, t0);
        stop = atomic_load(&e->stop) != 0;
        bool final = ended || stop ||
                     (training ? e->global_step >= target_step : done >= p->steps);
        /* (a final loop that ran no step, a stop or an input that ended at the boundary,
         * has nothing new to save) */
        if (training && e->cfg.model_dir[0] && !e->timing_only &&
            ((final && e->global_step != last_ckpt) || (e->cfg.save_checkpoints_steps &&
                       e->global_step - last_ckpt >= e->cfg.save_checkpoints_steps))) {
            double tc = tpu__runtime_wall_s();
            if ((rc = tpu__runtime_save_checkpoint(e, d))) {
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
        li.wall_seconds = tpu__runtime_wall_s() - e->wall_start;
        /* the host's share of this loop's span: boundary costs plus the launch */
        double launch_s = (double)(start - prev_host) / e->hz;
        double span = li.device_seconds + li.host_seconds + launch_s;
        li.host_overhead_share = span > 0 ? (li.host_seconds + launch_s) / span : 0;
        acc_host += (double)host + (double)(start - prev_host);
        li.pass_device_seconds = acc_dev / e->hz;
        li.pass_host_seconds = acc_host / e->hz;
        li.pass_mxu_utilization = acc_cap > 0 ? acc_macs / acc_cap : 0;
        li.pass_infeed_stall_share = acc_dev > 0 ? acc_stall / (acc_dev * e->n_cores) : 0;
        li.pass_host_overhead_share = acc_dev + acc_host > 0 ? acc_host / (acc_dev + acc_host) : 0;
        li.pass_examples_per_s = acc_dev > 0 ? (double)done * p->per_replica * e->n_replicas /
                                                   li.pass_device_seconds
                                             : 0;
        e->last = li;
        write_metrics(e, &li);
        if (e->cfg.iterations_per_loop_s > 0 && li.step_time_s > 0) {
            double want = floor(e->cfg.iterations_per_loop_s / li.step_time_s);
            ipl = want < 1 ? 1 : want > 1e12 ? (uint64_t)1e12 : (uint64_t)want;
        }
    }
    /* stop the helpers: they may wait for steps that will never run */
    pthread_mutex_lock(&p->lock);
    p->finished = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
    pthread_join(wd_th, NULL);
    tpu_device_cancel(e->dev);
    pthread_join(in_th, NULL);
    pthread_join(out_th, NULL);
    tpu_device_reset_cancel(e->dev);
    pthread_mutex_lock(&p->lock);
    int perr = p->error;
    struct tpu_diag pd = p->diag;
    bool input_ended = p->input_ended;
    bool stopped = p->stopped || stop;
    pthread_mutex_unlock(&p->lock);
    if (perr) {
        if (d)
            *d = pd;
        return perr;
    }
    if (rc)
        return rc;
    /* a stop that came after the last batch was read cost nothing: the result stands */
    if (!training && stopped && !input_ended && done < p->steps)
        return tpu__fail(d, TPU_ECANCELED, "%s stopped on request after %llu batches; no "
                         "result", p->mode == TPU_MODE_EVAL ? "evaluation" : "prediction",
                         (unsigned long long)done);
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
}
