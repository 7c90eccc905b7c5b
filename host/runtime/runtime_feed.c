/* The threads of a pass (runtime_pass.c draws the whole pass): one infeed thread per host
 * that makes input_fn calls (shard/'s plan says which), which runs that host's calls ahead of
 * the device, one call at a time across the hosts in the plan's order (the "turn", below),
 * each charged to its host's own clock, and fills the infeed queues of the cores each call
 * feeds with their slices of each tensor; the outfeed
 * thread, which drains every core's outfeed, keeps replica 0's loss, runs the host calls,
 * sums evaluation and prediction outputs and keeps each step's sums (the global loss or the
 * loss sums, the correct counts) for the loop's sums; and the watchdog, which ends a
 * deadlocked run with an error. They share the pass (struct tpu__pass, runtime_int.h) under
 * its lock, and end the pass with the first error of any of them through tpu__pass_fail. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_int.h"
#include "shard/shard_int.h"
#include "util.h"

/* ---- the threads of a pass --------------------------------------------------------------- */

void tpu__pass_fail(struct tpu__pass *p, int rc, const struct tpu_diag *d)
{
    pthread_mutex_lock(&p->lock);
    const bool first = !p->error;
    if (first) {
        p->error = rc;
        if (d)
            p->diag = *d;
        else
            tpu__fail(&p->diag, rc, "%s", tpu_strerror(rc));
    }
    const struct tpu_diag why = p->diag;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
    /* the other hosts may wait in a collective this host will not join: the group ends
     * them first (host/mpi may end this process too) */
    if (first)
        tpu__pod_abort(p->e, rc, &why);
    tpu_device_cancel(p->e->dev);
}

bool tpu__pass_failed(struct tpu__pass *p)
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

int tpu__grow(void **arr, uint64_t *cap, uint64_t need, size_t elem)
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
                                             !tpu__pass_failed(p);
         now = tpu__runtime_wall_s()) {
        double s = until - now < 0.05 ? until - now : 0.05;
        struct timespec ts = {0, (long)(s * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* One input_fn call's tensors, [batch][row] each, in the program's infeed order, as the input
 * function fills them (a partitioned tensor whole: the slices are cut when it is queued). */
struct call_batch {
    void *bufs[4];
    size_t row_bytes[4];
    bool is_int[4];
};

/* The tensors of a call of `batch` rows; with `values` false (a timing-only device's held
 * batches) their shapes only, no buffers: such a batch is queued without data. */
static int call_batch_alloc(struct call_batch *cb, const struct tpu__pass *p, uint32_t batch,
                            bool values)
{
    const struct tpu_model_program *mp = &p->e->mp;
    memset(cb, 0, sizeof *cb);
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        cb->row_bytes[t] = tpu__runtime_row_bytes(p->e, &p->spec, t);
        cb->is_int[t] = b->dtype == TPU_INT32;
        if (!values)
            continue;
        cb->bufs[t] = malloc(cb->row_bytes[t] * (batch ? batch : 1));
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

/* Pads rows n_real .. batch - 1 of every tensor: zeros, and -1 (a masked label) in integer
 * tensors. */
static void call_batch_pad(struct call_batch *cb, uint32_t n_tensors, uint32_t n_real,
                           uint32_t batch)
{
    for (uint32_t t = 0; t < n_tensors; t++) {
        char *base = cb->bufs[t];
        size_t pad = (size_t)(batch - n_real) * cb->row_bytes[t];
        if (cb->is_int[t])
            memset(base + n_real * cb->row_bytes[t], 0xff, pad); /* -1: a masked label */
        else
            memset(base + n_real * cb->row_bytes[t], 0, pad);
    }
}

/* Copies the slice [begin, end) of a row-major tensor of dims full[0 .. rank) at src into the
 * start of a row-major buffer of dims sl->padded at dst, zeros elsewhere (TPU infeed pads a
 * short part to the largest part's size). */
static void gather_slice(char *dst, const char *src, size_t esize, const uint64_t *full,
                         const struct tpu_shard_slice *sl)
{
    const uint32_t rank = sl->rank;
    size_t dst_bytes = esize;
    for (uint32_t i = 0; i < rank; i++)
        dst_bytes *= (size_t)sl->padded[i];
    memset(dst, 0, dst_bytes);
    for (uint32_t i = 0; i < rank; i++)
        if (sl->end[i] <= sl->begin[i])
            return; /* an empty part: all padding */
    /* strides of both, in elements */
    uint64_t sstride[TPU_PARTITION_MAX_RANK], dstride[TPU_PARTITION_MAX_RANK];
    sstride[rank - 1] = dstride[rank - 1] = 1;
    for (uint32_t i = rank - 1; i > 0; i--) {
        sstride[i - 1] = sstride[i] * full[i];
        dstride[i - 1] = dstride[i] * sl->padded[i];
    }
    const size_t run = (size_t)(sl->end[rank - 1] - sl->begin[rank - 1]) * esize;
    uint64_t idx[TPU_PARTITION_MAX_RANK] = {0}; /* offsets within the slice, but the last */
    for (;;) {
        uint64_t so = sl->begin[rank - 1], doff = 0;
        for (uint32_t i = 0; i + 1 < rank; i++) {
            so += (sl->begin[i] + idx[i]) * sstride[i];
            doff += idx[i] * dstride[i];
        }
        memcpy(dst + doff * esize, src + so * esize, run);
        int i = (int)rank - 2;
        for (; i >= 0; i--) {
            if (++idx[i] < sl->end[i] - sl->begin[i])
                break;
            idx[i] = 0;
        }
        if (i < 0)
            return;
    }
}

/* Queues call `call`'s tensors on the infeed of every core of the replicas it feeds, ready at
 * host cycle `clock`: each replica takes its rows of the call's batch (or all of them, when
 * broadcast), and each logical core of the replica its slice of each tensor as the plan
 * says: the whole tensor (no partition dims), nothing (dims of product 1, on logical cores
 * after the first), or its part, padded. `scratch` holds the largest part. Returns 0 or the
 * device's error (TPU_ECANCELED when the pass was canceled). */
static int call_batch_push(struct tpu__pass *p, const struct call_batch *cb,
                           const struct tpu_shard_call *call, char *scratch, uint64_t clock,
                           struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    const uint32_t cpr = p->plan.cores_per_replica;
    for (uint32_t r = 0; r < call->n_replicas; r++) {
        const uint32_t rep = call->first_replica + r;
        const uint32_t row0 = call->broadcast ? 0 : r * call->rows_each;
        for (uint32_t k = 0; k < cpr; k++) {
            uint32_t core;
            if (!tpu__own_core(e, rep * cpr + k, &core))
                continue; /* another host's process feeds it */
            for (uint32_t t = 0; t < mp->n_infeed; t++) {
                /* no buffers: a timing-only device's held batch, queued without data */
                const char *rows =
                    cb->bufs[t] ? (const char *)cb->bufs[t] + row0 * cb->row_bytes[t] : NULL;
                const void *data = rows;
                size_t bytes = (size_t)p->per_replica * cb->row_bytes[t];
                if (p->slices) {
                    const struct tpu__slice *sl = &p->slices[t * cpr + k];
                    if (!sl->s.receives)
                        continue;
                    if (!sl->whole) {
                        if (rows)
                            gather_slice(scratch, rows, sl->esize, sl->full, &sl->s);
                        data = rows ? scratch : NULL;
                        bytes = sl->bytes;
                    }
                }
                int rc = tpu_device_infeed(e->dev, core, data, bytes, clock, d);
                if (rc)
                    return rc;
            }
        }
    }
    return 0;
}

/* Whether call feeds a replica whose cores this process holds (without a host group, every
 * call does). */
static bool call_is_own(const struct tpu__pass *p, const struct tpu_shard_call *call)
{
    const struct tpu_estimator *e = p->e;
    const uint32_t cpr = p->plan.cores_per_replica;
    const uint32_t first = e->core0 / cpr, end = first + e->local_cores / cpr;
    return call->first_replica < end && call->first_replica + call->n_replicas > first;
}

/* Keeps an input_fn call's host phase for the timeline (the caller's thread moves it there,
 * see flush_input_phases). An allocation failure drops it, as the device's own timeline
 * drops events: the trace never stops a run. */
static void record_input_phase(struct tpu__pass *p, uint64_t step, uint32_t call,
                               uint32_t host, uint64_t start_cycle, uint64_t cycles)
{
    pthread_mutex_lock(&p->lock);
    if (!tpu__grow((void **)&p->input_phases, &p->input_phases_cap, p->n_input_phases + 1,
              sizeof *p->input_phases))
        p->input_phases[p->n_input_phases++] =
            (struct tpu__host_phase){.step = step, .start_cycle = start_cycle, .cycles = cycles,
                                     .call = call, .host = host};
    pthread_mutex_unlock(&p->lock);
}

/* Waits until call `ci` of step s is the next input_fn call of the pass (the calls are made
 * one at a time in the plan's order, so that the input function need not be thread-safe and
 * the data stream does not depend on the hosts). False when the thread is to stop instead:
 * the input ended or feeding stopped before step s, or the pass failed. */
static bool wait_turn(struct tpu__feeder *f, uint64_t s, uint32_t ci)
{
    struct tpu__pass *p = f->p;
    const uint64_t mine = s * p->plan.n_calls + ci;
    pthread_mutex_lock(&p->lock);
    f->waits_turn = mine;
    while (p->turn != mine && !p->error && !p->finished && s < p->end_step)
        pthread_cond_wait(&p->cv, &p->lock);
    f->waits_turn = UINT64_MAX;
    const bool go = p->turn == mine && !p->error && !p->finished && s < p->end_step;
    pthread_mutex_unlock(&p->lock);
    return go;
}

/* Waits until every call of step s is made (unweighted training's held batches, above). False
 * when they are not to be queued: a call of step s found the input's end, feeding stopped, or
 * the pass failed. Waiting, the thread counts as waiting for another thread's turn (the
 * watchdog's idle_turn_waiters). */
static bool wait_step_whole(struct tpu__feeder *f, uint64_t s)
{
    struct tpu__pass *p = f->p;
    const uint64_t next = (s + 1) * p->plan.n_calls;
    pthread_mutex_lock(&p->lock);
    f->waits_turn = next;
    while (p->turn < next && !p->error && !p->finished && s < p->end_step)
        pthread_cond_wait(&p->cv, &p->lock);
    f->waits_turn = UINT64_MAX;
    const bool go = p->turn >= next && !p->error && !p->finished && s < p->end_step;
    pthread_mutex_unlock(&p->lock);
    return go;
}

/* The call of the turn is made: the next one may go. `end_step` (UINT64_MAX: none) is the
 * first step no host is to feed, when this call found the input's end; `ended` marks the
 * input ended. */
static void pass_turn(struct tpu__pass *p, uint64_t end_step, bool ended)
{
    pthread_mutex_lock(&p->lock);
    p->turn++;
    if (end_step < p->end_step)
        p->end_step = end_step;
    p->input_ended = p->input_ended || ended;
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
        tpu__pass_fail(p, tpu__fail(&d, TPU_ECANCELED,
                                    "%s stopped on request after %llu batches; no result",
                                    p->mode == TPU_MODE_EVAL ? "evaluation" : "prediction",
                                    (unsigned long long)s),
                       &d);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stopped = true;
    if (s < p->end_step)
        p->end_step = s;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
}

/* A host queued all its calls of step s: the pass's fed count is the least over the hosts,
 * and the step's real rows (counted as the calls were made) are complete once every host
 * has fed it. */
static void feeder_fed(struct tpu__feeder *f, uint64_t s)
{
    struct tpu__pass *p = f->p;
    pthread_mutex_lock(&p->lock);
    f->fed = s + 1;
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; i < p->n_feeders; i++)
        least = p->feeders[i].fed < least ? p->feeders[i].fed : least;
    p->fed = least;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
}

/* Adds a call's real rows to its step's count. */
static int count_real_rows(struct tpu__pass *p, uint64_t s, uint32_t n_real)
{
    pthread_mutex_lock(&p->lock);
    uint64_t old = p->real_cap;
    int rc = tpu__grow((void **)&p->real_rows, &p->real_cap, s + 1, sizeof *p->real_rows);
    if (!rc) {
        if (p->real_cap > old)
            memset(p->real_rows + old, 0, (p->real_cap - old) * sizeof *p->real_rows);
        p->real_rows[s] += n_real;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* Unweighted training holds the batches of a host's calls of a step until the step's last
 * call (of any host) has come back full, then queues them (wait_step_whole): no core starts
 * a step that the input ended part-way, so a run that ends for want of input stops every
 * core at the start of that step, and its device time is the same in one process and on a
 * pod's hosts (a pod's part cannot tell a core waiting at an all-reduce for a step that
 * never comes from a slower host). The batches are queued at the host cycles their calls
 * ended, so device time is as if each were queued at once. [n_calls] of the feeder; bufs
 * allocated for its own calls only. */
struct held_call {
    struct call_batch cb;
    uint64_t clock;
    bool own;
};

static void held_free(struct held_call *held, uint32_t n)
{
    for (uint32_t i = 0; held && i < n; i++)
        call_batch_free(&held[i].cb);
    free(held);
}

static struct held_call *held_alloc(const struct tpu__pass *p, const struct tpu__feeder *f)
{
    struct held_call *held = calloc(f->n_calls, sizeof *held);
    for (uint32_t i = 0; held && i < f->n_calls; i++) {
        const struct tpu_shard_call *call = &p->plan.calls[f->calls[i]];
        held[i].own = call_is_own(p, call);
        /* a timing-only device takes no values: the calls fill the one scratch batch */
        if (held[i].own && call_batch_alloc(&held[i].cb, p, call->batch, !p->e->timing_only)) {
            held_free(held, i + 1);
            return NULL;
        }
    }
    return held;
}

/* A host's infeed thread: its calls of each step, each when its turn comes, on its own host
 * clock (the input cost of each call is charged to it, so hosts read in parallel), then the
 * call's tensors onto the infeed queues of the cores it feeds. The last infeed thread to end
 * closes the device's infeed.
 *
 * With a host group (runtime_pod.c) the process's one infeed thread walks every call of the
 * plan: a call that feeds this host's cores is made with next and queued on them; another
 * host's call is passed over with the input's skip (or next into the batch, dropped, when
 * the input has no skip), so that this host's calls read what they read in one process, and
 * every host sees the same real rows and the same end of the input. It keeps every host's
 * clock, each call's cost charged to its host's, as the hosts' threads do in one process. */
void *tpu__pass_infeed_thread(void *arg)
{
    struct tpu__feeder *f = arg;
    struct tpu__pass *p = f->p;
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    struct tpu_diag d = {0};
    initial_infeed_sleep(p);
    struct call_batch cb;
    uint64_t *clocks = NULL; /* the clock of each host (one process: this thread's host's) */
    struct held_call *held = NULL; /* a pod's unweighted training (held_alloc) */
    char *scratch = p->scratch_bytes ? malloc(p->scratch_bytes) : NULL;
    if (call_batch_alloc(&cb, p, p->plan.calls[0].batch, true) ||
        (p->scratch_bytes && !scratch)) {
        tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the input batch"), &d);
        goto out;
    }
    /* Training trains on full steps only, unless the program weighs its rows (sample
     * weights): then a call may return a partial batch, even of 0 real rows, which is a real
     * step whose padding rows weigh 0, and only a call that returns 0 ends the input. */
    const bool full_steps_only = p->mode == TPU_MODE_TRAIN && !e->shape.weighted;
    if (full_steps_only && !(held = held_alloc(p, f))) {
        tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the input batches"),
                       &d);
        goto out;
    }
    clocks = malloc((p->plan.hosts ? p->plan.hosts : 1) * sizeof *clocks);
    if (!clocks) {
        tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory for the host clocks"), &d);
        goto out;
    }
    for (uint32_t h = 0; h < p->plan.hosts; h++)
        clocks[h] = e->host_cycle;
    for (uint64_t s = 0; s < p->steps; s++) {
        for (uint32_t i = 0; i < f->n_calls; i++) {
            const uint32_t ci = f->calls[i];
            const struct tpu_shard_call *call = &p->plan.calls[ci];
            uint64_t *const clock = &clocks[call->host];
            const bool own = call_is_own(p, call);
            if (!wait_turn(f, s, ci))
                goto out;
            if (ci == 0 && !e->group && atomic_load(&e->stop)) {
                /* seen at the first call of a step: no host feeds this step (a pod's hosts
                 * agree on a stop at a loop boundary instead: runtime_pod.c) */
                infeed_stop(p, s);
                pass_turn(p, UINT64_MAX, false);
                goto out;
            }
            uint32_t n_real = 0;
            struct call_batch *const into = held && own && held[i].cb.bufs[0] ? &held[i].cb : &cb;
            double t0 = tpu__runtime_wall_s();
            int rc = !own && p->input->skip
                         ? p->input->skip(p->input->ctx, p->mode, call->shard, call->batch,
                                          &n_real, &d)
                         : p->input->next(p->input->ctx, p->mode, call->shard, call->batch,
                                          into->bufs, &n_real, &d);
            const uint64_t cost = tpu__host_cost(e, e->cfg.modeled_input_us_per_batch, t0);
            if (call->host == f->host)
                record_input_phase(p, s, ci, f->host, *clock, cost);
            *clock += cost;
            if (rc < 0) {
                struct tpu_diag why = d;
                why.msg[TPU_DIAG_MAX - 80] = '\0'; /* room for the prefix */
                /* training names the global step; evaluation and prediction, which do
                 * not advance it, their own batch (the first is 1) */
                if (p->mode == TPU_MODE_TRAIN)
                    tpu__fail(&d, rc, "the input function failed at step %llu: %s",
                              (unsigned long long)(p->step0 + s), why.msg);
                else
                    tpu__fail(&d, rc, "the input function failed at the %s's batch %llu: %s",
                              p->mode == TPU_MODE_EVAL ? "evaluation" : "prediction",
                              (unsigned long long)s + 1, why.msg);
                tpu__pass_fail(p, rc, &d);
                goto out;
            }
            if (n_real > call->batch)
                n_real = call->batch;
            bool last_step = false;
            if (rc == 0 || (full_steps_only && n_real < call->batch)) {
                /* the input ended. Unweighted training never uses a partial step: the pass
                 * ends before step s. Otherwise a first call that finds the end ends the
                 * pass before step s, and a later call's end pads the rest of the step,
                 * which is the last. */
                if (full_steps_only || (ci == 0 && rc == 0)) {
                    pass_turn(p, s, true);
                    goto out;
                }
                if (rc == 0)
                    n_real = 0;
                last_step = true;
            } else if (n_real < call->batch && p->mode != TPU_MODE_TRAIN) {
                last_step = true; /* a short batch: the input has nothing after it */
            }
            pass_turn(p, last_step ? s + 1 : UINT64_MAX, last_step);
            if ((rc = count_real_rows(p, s, n_real))) {
                tpu__pass_fail(p, tpu__fail(&d, rc, "out of memory"), &d);
                goto out;
            }
            if (!own)
                continue; /* another host's call: its process queues it */
            call_batch_pad(into, mp->n_infeed, n_real, call->batch);
            if (held) {
                held[i].clock = *clock; /* queued once the step is whole, below */
                continue;
            }
            if ((rc = call_batch_push(p, &cb, call, scratch, *clock, &d))) {
                if (rc != TPU_ECANCELED)
                    tpu__pass_fail(p, rc, &d);
                goto out;
            }
        }
        if (held && !wait_step_whole(f, s))
            goto out;
        for (uint32_t i = 0; held && i < f->n_calls; i++) {
            int rc;
            if (held[i].own && (rc = call_batch_push(p, &held[i].cb, &p->plan.calls[f->calls[i]],
                                                     scratch, held[i].clock, &d))) {
                if (rc != TPU_ECANCELED)
                    tpu__pass_fail(p, rc, &d);
                goto out;
            }
        }
        feeder_fed(f, s);
    }
out:
    pthread_mutex_lock(&p->lock);
    const bool last_out = --p->feeding == 0;
    pthread_mutex_unlock(&p->lock);
    if (last_out)
        tpu_device_infeed_close(e->dev);
    call_batch_free(&cb);
    held_free(held, f->n_calls);
    free(scratch);
    free(clocks);
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
        tpu__pass_fail(p, TPU_ERANGE, d);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    int gr = tpu__grow((void **)&p->losses, &p->loss_cap, s + 1, sizeof *p->losses);
    if (!gr)
        p->losses[s] = loss;
    pthread_mutex_unlock(&p->lock);
    if (gr) {
        tpu__pass_fail(p, tpu__fail(d, gr, "out of memory"), d);
        return -1;
    }
    if (e->cfg.host_call_every_n_steps && gstep % e->cfg.host_call_every_n_steps == 0)
        for (size_t h = 0; h < e->n_hooks; h++)
            if (e->hooks[h].host_call) {
                int hr = e->hooks[h].host_call(e->hooks[h].ctx, gstep, loss, d);
                if (hr) {
                    tpu__pass_fail(p, hr, d);
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

void *tpu__pass_outfeed_thread(void *arg)
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
        tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory"), &d);
        feeder_exits(p);
        return NULL;
    }
    const uint32_t cpr = e->n_cores / e->n_replicas;
    const bool broadcast = tpu__pass_broadcast(p);
    const bool train_counts = p->mode == TPU_MODE_TRAIN && e->shape.train_counts;
    for (uint64_t s = 0; s < p->steps; s++) {
        double global_loss = 0; /* training: the replicas' shares, in replica order */
        double step_loss = 0, step_correct = 0; /* the step's sums over the replicas */
        /* Every core of a replica runs the replica's program and outfeeds; the first core's
         * tensors are the replica's, the others' are drained and dropped (a queue nobody
         * drains fills up and stops its core for good). */
        /* this process's cores (pod cores; without a host group, every core) */
        for (uint32_t c = e->core0; c < e->core0 + e->local_cores; c++) {
            const uint32_t rep = c / cpr;
            for (uint32_t t = 0; t < mp->n_outfeed; t++) {
                const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->outfeed[t]);
                size_t bytes = tpu_buffer_bytes(b);
                int rc = tpu_device_outfeed(e->dev, c - e->core0, buf, bytes, 0, NULL, &d);
                if (rc) {
                    if (rc != TPU_ECANCELED)
                        tpu__pass_fail(p, rc, &d);
                    goto out;
                }
                if (c % cpr != 0)
                    continue;
                if (e->group) {
                    /* a pod: the sums need every host's replicas, and come at the loop
                     * boundary (runtime_pod.c); replica 0's checks and host calls run here,
                     * on the host that holds it, as in one process. Prediction's rows are
                     * kept for the boundary too, where every host emits every host's. */
                    if (p->mode == TPU_MODE_TRAIN && t == 0 && rep == 0 &&
                        outfeed_train_step(p, s, buf, &d))
                        goto out;
                    if (tpu__pod_keep(p, s, rep, t, buf)) {
                        tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory"), &d);
                        goto out;
                    }
                    continue;
                }
                /* every replica's share of the loss (in BROADCAST too: each replica's loss is
                 * scaled by 1 / (B * R), so the R shares add up to the mean) */
                if (p->mode == TPU_MODE_TRAIN && t == 0)
                    global_loss += buf[0];
                /* a broadcast input gives every replica the same examples: evaluation and
                 * prediction count replica 0's, so that each example counts once */
                if (broadcast && rep != 0)
                    continue;
                if (p->mode == TPU_MODE_TRAIN) {
                    /* the loss, then (train_counts) the counts (correct, real rows) */
                    if (t == 0 && rep == 0 && outfeed_train_step(p, s, buf, &d))
                        goto out;
                    if (t == 1 && train_counts)
                        step_correct += buf[0];
                } else if (p->mode == TPU_MODE_EVAL) {
                    pthread_mutex_lock(&p->lock);
                    if (t == 0)
                        p->loss_sum += buf[0];
                    else {
                        p->correct += buf[0];
                        p->count += buf[1];
                    }
                    pthread_mutex_unlock(&p->lock);
                    if (t == 0)
                        step_loss += buf[0];
                    else
                        step_correct += buf[0];
                } else if (p->mode == TPU_MODE_PREDICT) {
                    outfeed_predict_rows(p, s, rep, b, buf);
                }
            }
        }
        pthread_mutex_lock(&p->lock);
        if (e->group) { /* the step's sums come at the loop boundary */
            p->drained = s + 1;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->lock);
            continue;
        }
        if (p->mode == TPU_MODE_TRAIN) {
            if (tpu__grow((void **)&p->global_losses, &p->global_loss_cap, s + 1,
                     sizeof *p->global_losses)) {
                pthread_mutex_unlock(&p->lock);
                tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory"), &d);
                goto out;
            }
            p->global_losses[s] = e->timing_only ? NAN : (float)global_loss;
            step_loss = global_loss;
        }
        if (tpu__grow((void **)&p->sums, &p->sums_cap, s + 1, sizeof *p->sums)) {
            pthread_mutex_unlock(&p->lock);
            tpu__pass_fail(p, tpu__fail(&d, TPU_ENOMEM, "out of memory"), &d);
            goto out;
        }
        p->sums[s] = (struct tpu__step_sums){.loss = step_loss, .correct = step_correct};
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

/* Under the lock: the infeed threads that wait in wait_turn for a turn that another
 * thread's call must come first, and so cannot act before that thread does. A thread whose
 * wait is over (its turn came, or the input ended before its step) can act even while it
 * is still in wait_turn: woken, it must retake the lock after every other thread that the
 * same broadcast woke, which under load can take longer than DEADLOCK_S. Counting it idle
 * made the watchdog stop a run that was only waiting for that thread to be scheduled. */
static uint32_t idle_turn_waiters(const struct tpu__pass *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n_feeders; i++) {
        const uint64_t t = p->feeders[i].waits_turn;
        n += t != UINT64_MAX && t != p->turn && t / p->plan.n_calls < p->end_step;
    }
    return n;
}

void *tpu__pass_watchdog_thread(void *arg)
{
    struct tpu__pass *p = arg;
    struct tpu_estimator *e = p->e;
    /* A pod's host cannot tell a deadlock from a slower host: its cores wait in the
     * collectives for the others, which a group's abort ends when a host fails. */
    if (e->group)
        return NULL;
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
        /* the feed threads that could act: all but those only waiting their turn */
        const uint32_t live = p->live_feeders - idle_turn_waiters(p);
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
            tpu__pass_fail(p, TPU_ETHREAD, &d);
            return NULL;
        }
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}
