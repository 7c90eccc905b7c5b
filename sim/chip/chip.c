/* The native chip, the device API's first backend (tpu_device_backend_native): opening a
 * chip set, loading a program, host access to buffers and variables, and the run scheduler
 * that spreads the cores over worker threads. The device API (sim/device/device.c) checks
 * every argument before it calls in here; the functions of the backend table are the static
 * chip_* ones below, and feed.c's and trace.c's tpu__chip_* ones.
 *
 * Scheduling. A run marks every core READY. Each worker repeatedly takes a READY core,
 * runs it (tpu__core_run) until it finishes or blocks (empty infeed, full outfeed, a
 * collective not everyone has reached), and puts it back. Whoever unblocks a core (a host
 * feed call, the last arriver of a collective, on a pod's part the lane that completes an
 * all-reduce across the parts: pod.c) makes it READY again. Because every timing
 * decision uses device cycles carried by the data, never the order in which threads ran,
 * the results are the same for any number of workers; tests check this.
 *
 * Memory placement (decided at load, the way XLA assigns memory spaces): params live in
 * HBM, and so does every infeed target (the host writes HBM). Other temps go to on-chip
 * memory when they fit in half of it (the other half is the streaming buffers of timing.h)
 * alongside the temps live at the same time: a temp is live from the op that first writes
 * it to the last op that reads it (to the end of the loop, if it is written before the loop
 * and read inside); temps are placed first-fit in buffer order.
 *
 * Replicas that cost little (share.c; settings.share_replicas, on by default). A param that
 * data-parallel replicas hold in common (written only by optimizer updates fed by an
 * all_reduce over the replicas, or only by the host) gets one value buffer per logical core
 * index at load, which the replicas' cores of that index point at; its updates are computed
 * once per index and a gradient all_reduce that only those updates read is summed into one
 * copy. Host writes copy on write (chip_write), so every core still looks as if it had its
 * own buffers, and each core's timing, counters and op statistics are booked exactly as
 * without sharing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chip_int.h"
#include "mxu_provider.h"
#include "program/liveness.h"
#include "util.h"

static void log_msg(const struct chip_device *dev, enum tpu_log_level level, const char *msg)
{
    if (dev->s.log)
        dev->s.log(dev->s.log_ctx, level, msg);
}

static void free_core_buffers(struct chip_device *dev)
{
    if (!dev->cores)
        return;
    size_t nb = dev->prog ? tpu_program_n_buffers(dev->prog) : 0;
    bool all_bufs = true;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        all_bufs = all_bufs && dev->cores[i].bufs;
    if (dev->shareable && all_bufs) /* value buffers the replicas may share: each once */
        for (size_t b = 0; b < nb; b++)
            if (dev->shareable[b])
                tpu__share_free_buffer(dev, (uint32_t)b);
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        if (c->bufs)
            for (size_t b = 0; b < nb; b++)
                if (!dev->shareable || !dev->shareable[b] || !all_bufs)
                    free(c->bufs[b].data);
        free(c->bufs);
        free(c->upd_runs);
        free(c->from_leader);
        c->upd_runs = NULL;
        c->from_leader = NULL;
        free(c->vars);
        free(c->buf_ready);
        free(c->buf_read_done);
        free(c->stats);
        c->stats = NULL;
        c->bufs = NULL;
        c->vars = NULL;
        c->buf_ready = c->buf_read_done = NULL;
    }
}

static void chip_close(void *impl);

/* The device API checked the configuration, n_chips and cores_per_replica. */
static int chip_open(void *ctx, const struct tpu_device_settings *s, void **out,
                     struct tpu_diag *d)
{
    (void)ctx;
    int rc = tpu__provider_check(s, d);
    if (rc)
        return rc;
    const struct tpu_chip_config *cfg = &s->chip;
    uint64_t n_cores = (uint64_t)s->n_chips * cfg->cores_per_chip;
    uint32_t cpr = s->cores_per_replica;

    struct chip_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return tpu__fail(d, TPU_ENOMEM, "out of memory opening the device");
    dev->s = *s;
    dev->cfg = *cfg;
    dev->n_cores = (uint32_t)n_cores;
    dev->cores_per_replica = cpr;
    dev->n_replicas = dev->n_cores / cpr;
    dev->n_groups = cpr + dev->n_replicas;
    dev->pod_parts = s->pod ? s->pod->parts : 1;
    dev->cores = calloc(dev->n_cores, sizeof *dev->cores);
    dev->groups = calloc(dev->n_groups, sizeof *dev->groups);
    dev->workers = calloc(dev->n_cores, sizeof *dev->workers);
    if (!dev->cores || !dev->groups || !dev->workers)
        goto nomem;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        dev->workers[i].dev = dev;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->work_cv, NULL);
    pthread_cond_init(&dev->share_cv, NULL);
    pthread_cond_init(&dev->pod_cv, NULL);
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->id = i;
        c->chip = i / cfg->cores_per_chip;
        c->replica = i / cpr;
        c->index_in_replica = i % cpr;
        c->pod_replica = (s->pod ? s->pod->index : 0) * dev->n_replicas + c->replica;
        c->state = CORE_DONE;
        pthread_cond_init(&c->host_cv, NULL);
        c->host_cv_ready = true;
        if (tpu__feed_init(&c->infeed, cfg->infeed_queue_depth) ||
            tpu__feed_init(&c->outfeed, cfg->outfeed_queue_depth))
            goto nomem;
    }
    if (dev->pod_parts > 1) { /* one lane per logical index (pod.c) */
        dev->lanes = calloc(cpr, sizeof *dev->lanes);
        if (!dev->lanes)
            goto nomem;
        for (uint32_t k = 0; k < cpr; k++)
            dev->lanes[k] = (struct pod_lane){.dev = dev, .k = k};
    }
    /* groups: [0, cpr) the replicas sharing an index; [cpr, cpr + replicas) one replica */
    for (uint32_t g = 0; g < dev->n_groups; g++) {
        struct coll_group *grp = &dev->groups[g];
        grp->n = g < cpr ? dev->n_replicas : cpr;
        grp->members = calloc(grp->n, sizeof *grp->members);
        grp->ready = calloc(grp->n, sizeof *grp->ready);
        if (!grp->members || !grp->ready)
            goto nomem;
        for (uint32_t k = 0; k < grp->n; k++)
            grp->members[k] = g < cpr ? k * cpr + g : (g - cpr) * cpr + k;
    }
    *out = dev;
    return 0;
nomem:
    chip_close(dev);
    return tpu__fail(d, TPU_ENOMEM, "out of memory opening a device of %llu cores",
                     (unsigned long long)n_cores);
}

static void chip_close(void *impl)
{
    struct chip_device *dev = impl;
    free_core_buffers(dev);
    tpu__share_free(dev);
    if (dev->cores) {
        for (uint32_t i = 0; i < dev->n_cores; i++) {
            if (dev->cores[i].host_cv_ready)
                pthread_cond_destroy(&dev->cores[i].host_cv);
            tpu__feed_free(&dev->cores[i].infeed);
            tpu__feed_free(&dev->cores[i].outfeed);
            tpu__trace_free(&dev->cores[i].trace);
        }
        pthread_mutex_destroy(&dev->lock);
        pthread_cond_destroy(&dev->work_cv);
        pthread_cond_destroy(&dev->share_cv);
        pthread_cond_destroy(&dev->pod_cv);
    }
    if (dev->lanes)
        for (uint32_t k = 0; k < dev->cores_per_replica; k++)
            free(dev->lanes[k].acc);
    free(dev->lanes);
    if (dev->groups)
        for (uint32_t g = 0; g < dev->n_groups; g++)
        {
            free(dev->groups[g].members);
            free(dev->groups[g].ready);
        }
    if (dev->workers)
        for (uint32_t i = 0; i < dev->n_cores; i++)
            tpu__scratch_free(&dev->workers[i].scratch);
    free(dev->workers);
    tpu__trace_free(&dev->host_trace);
    tpu__trace_free(&dev->run_trace);
    free(dev->host_names);
    free(dev->op_labels);
    free(dev->groups);
    free(dev->cores);
    free(dev->place);
    free(dev); /* the program is the device API's */
}

/* Decides dev->place for the loaded program (see the top of this file). */
static int place_buffers(struct chip_device *dev, const struct tpu_program *p)
{
    const size_t nb = tpu_program_n_buffers(p), n_ops = tpu_program_n_ops(p);
    dev->place = calloc(nb ? nb : 1, sizeof *dev->place);
    size_t *first = malloc((nb ? nb : 1) * sizeof *first);
    size_t *last = malloc((nb ? nb : 1) * sizeof *last);
    bool *infed = calloc(nb ? nb : 1, sizeof *infed);
    uint64_t *usage = calloc(n_ops ? n_ops : 1, sizeof *usage);
    int rc = 0;
    if (!dev->place || !first || !last || !infed || !usage) {
        rc = TPU_ENOMEM;
        goto out;
    }
    tpu__program_live_ranges(p, first, last); /* the HBM check's rule, the loop's too */
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_INFEED)
            infed[op->out[0]] = true;
    }
    const uint64_t budget = dev->cfg.vmem_bytes / 2;
    for (size_t b = 0; b < nb; b++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, (uint32_t)b);
        dev->place[b] = IN_HBM;
        if (bd->kind != TPU_BUF_TEMP || infed[b] || first[b] == SIZE_MAX)
            continue;
        size_t lo = first[b], hi = last[b] < lo ? lo : last[b];
        uint64_t bytes = tpu_buffer_bytes(bd), peak = 0;
        for (size_t i = lo; i <= hi; i++)
            peak = usage[i] > peak ? usage[i] : peak;
        if (peak + bytes > budget)
            continue;
        dev->place[b] = IN_VMEM;
        for (size_t i = lo; i <= hi; i++)
            usage[i] += bytes;
    }
out:
    free(first);
    free(last);
    free(infed);
    free(usage);
    return rc;
}

/* Lets the program go: the core buffers, their placement, the pointer. */
static void drop_program(struct chip_device *dev)
{
    free_core_buffers(dev);
    tpu__share_free(dev);
    free(dev->place);
    dev->place = NULL;
    dev->prog = NULL;
}

/* prog is verified against the chip and lent by the device API; dev->prog, the earlier one,
 * is still valid here. On failure no program is left (as the backend table asks). */
static int chip_load(void *impl, const struct tpu_program *prog, struct tpu_diag *d)
{
    struct chip_device *dev = impl;
    int rc = tpu__trace_program(dev, prog, d);
    drop_program(dev);
    if (rc)
        return rc;
    dev->prog = prog;
    const size_t nb = tpu_program_n_buffers(prog), nv = tpu_program_n_vars(prog);
    rc = place_buffers(dev, prog);
    if (rc || (rc = tpu__share_plan(dev, prog)))
        goto nomem;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->bufs = calloc(nb ? nb : 1, sizeof *c->bufs);
        c->vars = calloc(nv ? nv : 1, sizeof *c->vars);
        c->buf_ready = calloc(nb ? nb : 1, sizeof *c->buf_ready);
        c->buf_read_done = calloc(nb ? nb : 1, sizeof *c->buf_read_done);
        if (!c->bufs || !c->vars || !c->buf_ready || !c->buf_read_done)
            goto nomem;
        if (dev->role) {
            c->upd_runs = calloc(tpu_program_n_ops(prog) + 1, sizeof *c->upd_runs);
            c->from_leader = calloc(nb ? nb : 1, sizeof *c->from_leader);
            if (!c->upd_runs || !c->from_leader)
                goto nomem;
        }
        if (dev->s.op_stats) { /* zero: statistics start at the load */
            const size_t n_ops = tpu_program_n_ops(prog);
            c->stats = calloc(n_ops ? n_ops : 1, sizeof *c->stats);
            if (!c->stats)
                goto nomem;
        }
        for (size_t b = 0; b < nb; b++) {
            const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, (uint32_t)b);
            c->bufs[b] = (struct tpu__bufmem){.dtype = bd->dtype, .rows = bd->rows,
                                              .cols = bd->cols};
            /* a shareable param gets its value buffers below; a temp that streamed reduces
             * let go gets one when a core first writes it (share.c) */
            if (!dev->s.timing_only && !(dev->shareable && dev->shareable[b]) &&
                !(dev->lazy && dev->lazy[b])) {
                /* zeroed now, by writing: the pages are the process's before the first run
                 * (calloc's lazily mapped pages would fault inside the first step) */
                size_t bytes = (tpu_buffer_bytes(bd) + 63) / 64 * 64;
                if (bytes == 0)
                    bytes = 64;
                c->bufs[b].data = aligned_alloc(64, bytes); /* cache lines, for the kernels */
                if (!c->bufs[b].data)
                    goto nomem;
                memset(c->bufs[b].data, 0, bytes);
            }
        }
    }
    /* a run that was stopped may have left tensors in the queues: they were for the program
     * of that run, never for this one */
    pthread_mutex_lock(&dev->lock);
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        tpu__feed_clear(&dev->cores[i].infeed);
        tpu__feed_clear(&dev->cores[i].outfeed);
    }
    pthread_mutex_unlock(&dev->lock);
    for (size_t b = 0; dev->shareable && b < nb; b++) /* one zeroed copy per index */
        if (dev->shareable[b] &&
            tpu__share_alloc(dev, (uint32_t)b, tpu_buffer_bytes(tpu_program_buffer(prog,
                                                                                  (uint32_t)b))))
            goto nomem;
    return 0;
nomem:
    drop_program(dev);
    return tpu__fail(d, TPU_ENOMEM, "out of memory giving %u cores their buffers",
                     dev->n_cores);
}

/* The device API checked core, buf and bytes, that values are kept and no run is on. */
static int chip_write(void *impl, uint32_t core, uint32_t buf, const void *data, size_t bytes,
                      struct tpu_diag *d)
{
    struct chip_device *dev = impl;
    struct core *c = &dev->cores[core];
    if (c->from_leader)
        c->from_leader[buf] = false;
    if (!c->bufs[buf].data) { /* a streamed reduce let it go: the core's own again */
        int rc = tpu__share_acquire_buf(dev, c, buf, d);
        if (rc)
            return rc;
    }
    if (dev->shareable && dev->shareable[buf]) {
        if (tpu__share_write(dev, core, buf, data, bytes))
            return tpu__fail(d, TPU_ENOMEM, "out of memory giving core %u its own copy of "
                             "'%s' (its replicas shared one)", core,
                             tpu_program_buffer(dev->prog, buf)->name);
        return 0;
    }
    memcpy(c->bufs[buf].data, data, bytes);
    return 0;
}

static int chip_read(void *impl, uint32_t core, uint32_t buf, void *data, size_t bytes,
                     struct tpu_diag *d)
{
    const struct chip_device *dev = impl;
    (void)d;
    const struct core *c = &dev->cores[core];
    if ((c->from_leader && c->from_leader[buf]) || !c->bufs[buf].data)
        c = &dev->cores[core % dev->cores_per_replica]; /* a shared reduce left its sum there */
    if (c->bufs[buf].data)
        memcpy(data, c->bufs[buf].data, bytes);
    else /* a temp no op has written yet */
        memset(data, 0, bytes);
    return 0;
}

static void chip_set_var(void *impl, uint32_t var, int64_t value)
{
    struct chip_device *dev = impl;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        dev->cores[i].vars[var] = value;
}

static int64_t chip_get_var(void *impl, uint32_t core, uint32_t var)
{
    const struct chip_device *dev = impl;
    return dev->cores[core].vars[var];
}

static void chip_counters(void *impl, uint32_t core, struct tpu_core_counters *out)
{
    const struct chip_device *dev = impl;
    *out = dev->cores[core].ctr;
}

/* Under the lock: every host call blocked on a queue rechecks. */
void tpu__wake_hosts(struct chip_device *dev)
{
    for (uint32_t i = 0; i < dev->n_cores; i++)
        pthread_cond_broadcast(&dev->cores[i].host_cv);
}

static void chip_cancel(void *impl)
{
    struct chip_device *dev = impl;
    pthread_mutex_lock(&dev->lock);
    /* a pod's part canceled during a run will not join its peers' next reduces */
    const bool release = dev->running && !dev->canceled;
    if (!dev->canceled) {
        dev->canceled = true;
        if (!dev->error)
            dev->error = TPU_ECANCELED;
    }
    pthread_cond_broadcast(&dev->work_cv);
    tpu__wake_hosts(dev);
    pthread_mutex_unlock(&dev->lock);
    if (release)
        tpu__pod_release(dev, TPU_ECANCELED, NULL);
}

void tpu__fail_run_locked(struct chip_device *dev, int rc, const struct tpu_diag *d)
{
    if (!dev->error || (dev->error == TPU_ECANCELED && rc != TPU_ECANCELED)) {
        dev->error = rc;
        dev->error_diag = *d;
        dev->error_diag.code = rc;
    }
    dev->canceled = true;
    pthread_cond_broadcast(&dev->work_cv);
    tpu__wake_hosts(dev);
}

static void chip_infeed_close(void *impl)
{
    struct chip_device *dev = impl;
    pthread_mutex_lock(&dev->lock);
    dev->infeed_closed = true;
    pthread_cond_broadcast(&dev->work_cv);
    pthread_mutex_unlock(&dev->lock);
}

static void chip_reset_cancel(void *impl)
{
    struct chip_device *dev = impl;
    pthread_mutex_lock(&dev->lock);
    dev->canceled = false;
    dev->infeed_closed = false;
    dev->error = 0;
    pthread_mutex_unlock(&dev->lock);
}

static const char *state_text(enum core_state st)
{
    switch (st) {
    case CORE_READY: return "is ready to run";
    case CORE_RUNNING: return "is running";
    case CORE_WAIT_INFEED: return "waits for infeed";
    case CORE_WAIT_OUTFEED: return "waits for the host to drain its full outfeed queue";
    case CORE_WAIT_COLL: return "waits at a collective";
    default: return "is done";
    }
}

/* *w comes zeroed (the device API). */
static void chip_watch(void *impl, struct tpu_device_watch *w)
{
    struct chip_device *dev = impl;
    pthread_mutex_lock(&dev->lock);
    w->running = dev->running;
    /* blocked: some core waits and none can move; all cores done is the normal end of a
     * launch (the run is about to return), never a deadlock */
    bool blocked = dev->running && !dev->canceled && !dev->pod_busy, waiting = false;
    size_t len = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        const struct core *c = &dev->cores[i];
        w->moves += c->infeed.pushes + c->infeed.pops + c->outfeed.pushes + c->outfeed.pops;
        /* a host call whose wait is over (a slot freed, a tensor came) is not blocked, even
         * while, woken, it has not yet retaken the lock: under load that can take longer
         * than a watchdog's patience, with nothing else moving */
        if (c->infeed.count == c->infeed.depth)
            w->host_calls_waiting += c->infeed_waiters;
        if (c->outfeed.count == 0)
            w->host_calls_waiting += c->outfeed_waiters;
        if (c->state == CORE_READY || c->state == CORE_RUNNING)
            blocked = false;
        else if (c->state != CORE_DONE)
            waiting = true;
        if (c->state != CORE_DONE && len + 1 < sizeof w->why) {
            int n = snprintf(w->why + len, sizeof w->why - len, "%score %u %s", len ? "; " : "",
                             i, state_text(c->state));
            len += n > 0 ? (size_t)n : 0;
        }
    }
    w->cores_blocked = blocked && waiting;
    pthread_mutex_unlock(&dev->lock);
}

/* ---- the run --------------------------------------------------------------------------- */

/* Under the lock: no core can make progress without more infeed. */
static bool starved(const struct chip_device *dev)
{
    if (dev->pod_busy) /* a reduce across the pod will wake its cores */
        return false;
    bool waits_infeed = false;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        enum core_state st = dev->cores[i].state;
        if (st == CORE_READY || st == CORE_RUNNING || st == CORE_WAIT_OUTFEED)
            return false;
        waits_infeed = waits_infeed || st == CORE_WAIT_INFEED;
    }
    return waits_infeed;
}

static void *worker(void *arg)
{
    struct worker *w = arg;
    struct chip_device *dev = w->dev;
    uint32_t next = 0;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        if (dev->canceled || dev->n_done == dev->n_cores)
            break;
        struct core *c = NULL;
        for (uint32_t k = 0; k < dev->n_cores; k++) {
            struct core *x = &dev->cores[(next + k) % dev->n_cores];
            if (x->state == CORE_READY) {
                c = x;
                /* round robin; with streamed reduces (share.c) the lowest ready core
                 * first, so the replicas reach them in order and their gradients can be
                 * let go as soon as they are summed */
                next = dev->streams ? 0 : (x->id + 1) % dev->n_cores;
                break;
            }
        }
        if (!c) {
            if (dev->infeed_closed && starved(dev)) {
                /* the clocks of the cores that stopped: where their last op left them */
                for (uint32_t i = 0; i < dev->n_cores; i++) {
                    struct core *x = &dev->cores[i];
                    if (x->state == CORE_DONE)
                        continue;
                    uint64_t clk = x->last_issue;
                    for (int u = 0; u < TPU_UNIT_COUNT; u++)
                        clk = tpu__max_u64(clk, x->unit_free[u]);
                    x->ctr.cycles = tpu__max_u64(x->ctr.cycles, clk);
                }
                dev->error = TPU_EEND;
                tpu__fail(&dev->error_diag, TPU_EEND, "the input ended: the cores wait for "
                          "infeed that the host will not send");
                dev->canceled = true;
                pthread_cond_broadcast(&dev->work_cv);
                tpu__wake_hosts(dev);
                break;
            }
            pthread_cond_wait(&dev->work_cv, &dev->lock);
            continue;
        }
        c->state = CORE_RUNNING;
        pthread_mutex_unlock(&dev->lock);
        struct tpu_diag d = {0};
        int rc = tpu__core_run(dev, c, &w->scratch, &d);
        pthread_mutex_lock(&dev->lock);
        if (rc < 0) {
            tpu__fail_run_locked(dev, rc, &d);
            if (rc != TPU_ECANCELED) { /* the peers would wait for this part's reduces */
                pthread_mutex_unlock(&dev->lock);
                tpu__pod_release(dev, rc, &d);
                pthread_mutex_lock(&dev->lock);
            }
            break;
        }
        if (rc == 1) {
            c->state = CORE_DONE;
            if (++dev->n_done == dev->n_cores)
                pthread_cond_broadcast(&dev->work_cv);
        }
        /* rc == 0: the core set its own waiting state (or was already woken to READY) */
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

/* The device API checked that a program is loaded and that no other run is under way. */
static int chip_run(void *impl, uint64_t start_cycle, uint64_t *end_cycle, struct tpu_diag *d)
{
    struct chip_device *dev = impl;
    pthread_mutex_lock(&dev->lock);
    if (dev->canceled) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ECANCELED, "tpu_device_run: the device was canceled; call "
                         "tpu_device_reset_cancel first");
    }
    dev->running = true;
    dev->error = 0;
    dev->n_done = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->state = CORE_READY;
        c->pc = 0;
        c->in_loop = false;
        /* the finish frontier (per-op statistics): the core's clock or the launch */
        uint64_t clk = c->last_issue;
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            clk = tpu__max_u64(clk, c->unit_free[u]);
        c->frontier = tpu__max_u64(clk, start_cycle);
        /* the launch: nothing starts before start_cycle */
        c->last_issue = tpu__max_u64(c->last_issue, start_cycle);
        c->prefetch_from = tpu__max_u64(c->prefetch_from, start_cycle);
    }
    for (uint32_t g = 0; g < dev->n_groups; g++)
        dev->groups[g].arrived = 0;
    int share_rc = tpu__share_begin_run(dev, d);
    if (share_rc) {
        for (uint32_t i = 0; i < dev->n_cores; i++)
            dev->cores[i].state = CORE_DONE;
        dev->running = false;
        pthread_mutex_unlock(&dev->lock);
        return share_rc;
    }
    pthread_mutex_unlock(&dev->lock);
    if (dev->pod_parts > 1 && (share_rc = tpu__pod_start(dev, d)) != 0) {
        pthread_mutex_lock(&dev->lock);
        for (uint32_t i = 0; i < dev->n_cores; i++)
            dev->cores[i].state = CORE_DONE;
        dev->running = false;
        pthread_mutex_unlock(&dev->lock);
        return share_rc;
    }

    unsigned n = dev->s.n_threads;
    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 0 ? (unsigned)cpus : 1;
    }
    if (n > dev->n_cores)
        n = dev->n_cores;
    dev->n_workers = n;
    pthread_t *th = calloc(n, sizeof *th);
    unsigned started = 0;
    if (th)
        for (; started + 1 < n; started++)
            if (pthread_create(&th[started], NULL, worker, &dev->workers[started + 1]) != 0)
                break;
    worker(&dev->workers[0]); /* the caller's thread is a worker too */
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    if (dev->pod_parts > 1) /* the reduces under way finish with the other parts */
        tpu__pod_stop(dev);

    pthread_mutex_lock(&dev->lock);
    dev->running = false;
    int rc = dev->error;
    struct tpu_diag ed = dev->error_diag;
    pthread_mutex_unlock(&dev->lock);
    if (rc == TPU_EEND && end_cycle) {
        /* the cores stopped at a step boundary: their clocks are where they stopped */
        uint64_t end = 0;
        for (uint32_t i = 0; i < dev->n_cores; i++)
            end = tpu__max_u64(end, dev->cores[i].ctr.cycles);
        *end_cycle = end;
    }
    if ((rc == 0 || rc == TPU_EEND) && dev->s.trace) {
        uint64_t end = start_cycle;
        for (uint32_t i = 0; i < dev->n_cores; i++)
            end = tpu__max_u64(end, dev->cores[i].ctr.cycles);
        tpu__trace_event(&dev->run_trace, TPU_UNIT_CTRL, 0, 0, start_cycle, end);
    }
    if (rc) {
        if (d) {
            *d = ed;
            if (!d->msg[0])
                tpu__fail(d, rc, "the run was canceled");
            d->code = rc;
        }
        log_msg(dev, TPU_LOG_ERROR, ed.msg);
        return rc;
    }
    uint64_t end = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        end = tpu__max_u64(end, dev->cores[i].ctr.cycles);
    if (end_cycle)
        *end_cycle = end;
    return 0;
}

/* ---- the backend table ------------------------------------------------------------------- */

static const struct tpu_device_backend native_backend = {
    .name = "native",
    .ctx = NULL,
    .open = chip_open,
    .close = chip_close,
    .load = chip_load,
    .write = chip_write,
    .read = chip_read,
    .set_var = chip_set_var,
    .get_var = chip_get_var,
    .infeed = tpu__chip_infeed,
    .outfeed = tpu__chip_outfeed,
    .run = chip_run,
    .infeed_close = chip_infeed_close,
    .cancel = chip_cancel,
    .reset_cancel = chip_reset_cancel,
    .watch = chip_watch,
    .counters = chip_counters,
    .op_stats = tpu__chip_op_stats,
    .trace_host = tpu__chip_trace_host,
    .write_trace = tpu__chip_write_trace,
};

const struct tpu_device_backend *tpu_device_backend_native(void)
{
    return &native_backend;
}
