/* One pass of the estimator (a train, evaluate or predict call, runtime.c) on the simulated
 * chip: the caller's loop of device launches, with the loop boundary's hooks, checkpoint and
 * metrics log; the infeed and outfeed threads it starts are in runtime_feed.c. It does not load
 * programs or restore params: runtime.c has done that before the pass starts.
 *
 * One pass is:
 *
 *   caller's thread            infeed thread                 outfeed thread
 *   ---------------            -------------                 --------------
 *   load the mode's program    input_fn -> pad -> per-core   per step, per core: pop the
 *   restore / init params      infeed queues, for every      outfeed tensors; keep
 *   loop: before_loop hooks,   step of the pass, running     replica 0's; host calls;
 *     set iterations (and      ahead across loop             NaN/Inf check; eval sums;
 *     the learning rate),      boundaries (no bubble); at    the step's sums (loss,
 *     run the device,          the end of the input: close   counts); predict rows
 *     wait for the outfeed     the device's infeed
 *     thread to catch up,
 *     the loop's sums, hooks,
 *     checkpoint, metrics log
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
 * batch" ("<mode> input batch host H" with several hosts: each host's infeed thread has a
 * clock of its own, so the hosts' input phases run side by side).
 *
 * Several hosts: one infeed thread per host that makes calls, each on its own clock; a step
 * is fed when every host has queued its part of it (fed is the least over the hosts); the
 * last infeed thread to end closes the device's infeed.
 *
 * A pod whose hosts are separate processes (run config's host_group, runtime_pod.c): this
 * process drives its own host's cores only; its one infeed thread walks every call of the
 * plan; after each launch the hosts exchange the launch's end, their counters and the
 * loop's outfed values, so every host computes the same loop figures as one process; at the
 * pass's start they check that they run the same thing.
 *
 * How many steps each launch runs is tune/'s (the loop size: a count, or the estimator's tuner
 * of the pass's mode, told of each launch's device and host time); which host makes each
 * input_fn call, with what batch, and which replicas and slices it feeds is shard/'s plan. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime_int.h"
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

uint64_t tpu__host_cost(const struct tpu_estimator *e, double modeled_us, double t0)
{
    if (e->cfg.host_time == TPU_HOST_TIME_MEASURED)
        return s_to_cycles(e, tpu__runtime_wall_s() - t0);
    return us_to_cycles(e, modeled_us);
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

/* Orders input phases by step, then by the call's place in the plan. */
static int phase_order(const void *a, const void *b)
{
    const struct tpu__host_phase *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->call < y->call ? -1 : x->call > y->call;
}

/* Moves the input phases of the pass's steps before `steps` to the timeline, by step and by
 * the call's place in the plan (the infeed threads of several hosts record them in any
 * order). Only the caller's thread calls it, at loop boundaries and once after the threads
 * are joined (steps UINT64_MAX), so the trace's order does not depend on how far the infeed
 * threads ran ahead. With several hosts each phase names its host ("train input batch host
 * 1"): their clocks run side by side. */
static void flush_input_phases(struct tpu__pass *p, uint64_t steps)
{
    pthread_mutex_lock(&p->lock);
    if (p->n_input_phases) /* none yet: the array may be NULL, which qsort must not get */
        qsort(p->input_phases, p->n_input_phases, sizeof *p->input_phases, phase_order);
    uint64_t n = 0;
    while (n < p->n_input_phases && p->input_phases[n].step < steps)
        n++;
    for (uint64_t i = 0; i < n; i++) {
        char name[32];
        if (p->e->hosts > 1)
            snprintf(name, sizeof name, "%s host %u", input_phase_name[p->mode],
                     p->input_phases[i].host);
        else
            snprintf(name, sizeof name, "%s", input_phase_name[p->mode]);
        trace_host_phase(p->e, name, p->input_phases[i].start_cycle,
                         p->input_phases[i].cycles);
    }
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
    if (!e->cfg.model_dir[0] || (e->group && e->group->rank != 0)) /* a pod: host 0 writes */
        return 0;
    if (!e->metrics) {
        char path[600];
        struct tpu_diag md = {0}; /* a failure shows at fopen */
        tpu_checkpoint_make_dir(e->cfg.model_dir, &md);
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

/* Counters summed over the device's cores (a pod's host: its own; runtime_pod.c sums the
 * hosts'). */
static void sum_counters(const struct tpu_estimator *e, struct tpu_core_counters *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t c = 0; c < e->local_cores; c++) {
        struct tpu_core_counters k;
        tpu_device_counters(e->dev, c, &k);
        out->mxu_mac_slots += k.mxu_mac_slots;
        out->macs += k.macs;
        for (int s = 0; s < TPU_STALL_COUNT; s++)
            out->stall[s] += k.stall[s];
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
    bool log_started;                /* the step counter's first trigger happened */
    uint64_t last_log_step;          /* the global step of its last trigger */
    uint64_t last_log_cycle;         /* and the device's end of that loop */
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
    /* the host's learning rate, once set, before every train loop: a program load starts
     * the variable at 0, which reads as the optimizer's alpha */
    if (training && e->lr_set && e->lr_info.known && e->lr_info.has_var)
        tpu_device_set_var(e->dev, e->lr_info.var, tpu_lr_host_bits(e->lr));
    /* the launch is always the modeled cost: the simulator has no real launch whose wall time
     * could be measured (tpu_device_run is the simulation itself, never charged) */
    l->start = e->host_cycle + us_to_cycles(e, e->cfg.modeled_launch_us);
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
            tpu__pass_fail(p, r, &rd);
    }
    return r;
}

/* The loop's sums into li (runtime.h, tpu_loop_info): over the steps [done - ran, done) of
 * the pass, every one drained. Real rows are what the input calls gave (a full training
 * step: the global batch); training's loss sum weighs each step's global loss by its real
 * rows, evaluation's adds the outfed loss sums; correct answers come from the outfed counts
 * (evaluation, training with train_counts), NaN where there are none (no counts, a
 * regression model, a timing-only device) and in prediction. */
static void loop_sums(const struct tpu_estimator *e, struct tpu__pass *p,
                      const struct pass_loop *L, uint64_t ran, struct tpu_loop_info *li)
{
    const bool training = p->mode == TPU_MODE_TRAIN;
    uint64_t real = 0;
    double loss = 0, correct = 0;
    pthread_mutex_lock(&p->lock);
    for (uint64_t s = L->done - ran; s < L->done; s++) {
        const uint32_t rows = s < p->real_cap ? p->real_rows[s] : 0;
        real += rows;
        if (s < p->sums_cap && p->mode != TPU_MODE_PREDICT) {
            loss += training ? p->sums[s].loss * rows : p->sums[s].loss;
            correct += p->sums[s].correct;
        }
    }
    pthread_mutex_unlock(&p->lock);
    const bool counts = p->mode == TPU_MODE_EVAL || (training && e->shape.train_counts);
    li->pass_steps = L->done;
    li->real_examples = real;
    li->loss_sum = p->mode == TPU_MODE_PREDICT || e->timing_only ? NAN : loss;
    li->correct = counts && !e->mp.no_accuracy && !e->timing_only ? correct : NAN;
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
    li->loss = li->global_loss = NAN; /* none yet: no step ran, or no values (timing-only) */
    if (p->mode == TPU_MODE_EVAL) {
        pthread_mutex_lock(&p->lock);
        if (p->count > 0 && !e->timing_only)
            li->loss = (float)(p->loss_sum / p->count); /* mean per example so far */
        pthread_mutex_unlock(&p->lock);
    }
    if (training && ran && !e->timing_only) {
        pthread_mutex_lock(&p->lock);
        li->loss = p->losses[L->done - 1];
        li->global_loss = p->global_losses[L->done - 1];
        pthread_mutex_unlock(&p->lock);
    }
    loop_sums(e, p, L, ran, li);
    li->device_seconds = (double)(end - start) / e->hz;
    li->step_time_s = ran ? li->device_seconds / ran : 0;
    li->examples_per_s = li->device_seconds > 0
                             ? (double)ran * p->global_batch / li->device_seconds
                             : 0;
    double cap = (double)(end - start) * tpu_device_chip(e->dev)->mxu_rows *
                 tpu_device_chip(e->dev)->mxu_cols * tpu_device_chip(e->dev)->mxu_per_core *
                 e->n_cores;
    li->mxu_utilization = cap > 0 ? (double)(now->macs - before->macs) / cap : 0;
    /* TPUEstimator's step counter hook (a SecondOrStepTimer of every_steps
     * log_step_count_steps, fresh for each train call): its first trigger, at the first loop
     * boundary, has no rate to log and only starts the count; then a line is due at the first
     * boundary at least log_step_count_steps steps after the last trigger */
    if (e->cfg.log_step_count_steps && training) {
        if (!L->log_started) {
            L->log_started = true;
            L->last_log_step = e->global_step;
            L->last_log_cycle = end;
        } else if (e->global_step >= L->last_log_step + e->cfg.log_step_count_steps) {
            li->log_due = true;
            if (end > L->last_log_cycle)
                li->log_steps_per_s = (double)(e->global_step - L->last_log_step) /
                                      ((double)(end - L->last_log_cycle) / e->hz);
            L->last_log_step = e->global_step;
            L->last_log_cycle = end;
        }
    }
    /* the cores' mean share of the loop spent waiting for infeed */
    li->infeed_stall_share = end > start
                                 ? (double)(now->stall[TPU_STALL_INFEED_EMPTY] -
                                            before->stall[TPU_STALL_INFEED_EMPTY]) /
                                       ((double)(end - start) * e->n_cores)
                                 : 0;
    if (li->infeed_stall_share > 1)
        li->infeed_stall_share = 1;
    /* and waiting for anything: every stall cause */
    uint64_t waited = 0;
    for (int s = 0; s < TPU_STALL_COUNT; s++)
        waited += now->stall[s] - before->stall[s];
    li->stall_share = end > start ? (double)waited / ((double)(end - start) * e->n_cores) : 0;
    if (li->stall_share > 1)
        li->stall_share = 1;
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
        tpu__pass_fail(p, rc, d);
        return rc;
    }
    L->last_ckpt = e->global_step;
    *cycles = tpu__host_cost(e, e->cfg.modeled_checkpoint_us, tc);
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
    li->pass_examples_per_s = L->acc_dev > 0 ? (double)L->done * p->global_batch /
                                                   li->pass_device_seconds
                                             : 0;
}

/* The loop boundary after launch l: the loop's figures, the hooks, the checkpoint, the host's
 * clock, the metrics log. The hooks' cost is the modeled one or the wall time of the hooks
 * alone (measured). Returns 0, or the error of a hook or of the checkpoint (the pass has
 * failed with it). */
static int loop_boundary(struct tpu_estimator *e, struct tpu__pass *p, struct pass_loop *L,
                         const struct launch *l, const struct tpu_core_counters *now,
                         struct tpu_diag *d)
{
    struct tpu_loop_info li;
    loop_device_figures(e, p, L, l, now, &li);
    /* measured: the hooks' wall time, from here (the simulator's bookkeeping above is its
     * own, never charged) */
    double t0 = tpu__runtime_wall_s();
    int rc = 0;
    for (size_t h = 0; h < e->n_hooks && !rc; h++)
        if (e->hooks[h].after_loop)
            rc = e->hooks[h].after_loop(e->hooks[h].ctx, &li, d);
    if (rc) {
        tpu__pass_fail(p, rc, d);
        return rc;
    }
    uint64_t host = tpu__host_cost(e, e->cfg.modeled_hooks_us, t0);
    trace_host_phase(e, "hooks", l->end, host);
    /* a pod's hosts: a stop asked for on any host up to here (a hook above, alike on every
     * host or on some) stops every host at this boundary, as it stops one process here */
    if (e->group && (rc = tpu__pod_stop_exchange(p, d))) {
        tpu__pass_fail(p, rc, d);
        return rc;
    }
    L->stop = tpu__stop_requested(p);
    uint64_t ckpt;
    if ((rc = boundary_checkpoint(e, p, L, l->end + host, &ckpt, d)))
        return rc;
    host += ckpt;
    loop_host_figures(e, p, L, l, host, &li);
    e->last = li;
    write_metrics(e, &li);
    return 0;
}

/* The hooks' before_loop, before the launch of a loop of n steps (at most: evaluation and
 * prediction stop early when the input ends): the global step, the pass's step index of the
 * loop's first step and n. Their cost is part of the boundary's modeled hooks cost
 * (modeled_hooks_us, charged after the loop); measured, their wall time is charged here, as
 * a "hooks" phase before the launch. Returns 0, or a hook's error (the pass has failed with
 * it). */
static int before_loop(struct tpu_estimator *e, struct tpu__pass *p, struct pass_loop *L,
                       uint64_t n, struct tpu_diag *d)
{
    const double t0 = tpu__runtime_wall_s();
    bool any = false;
    for (size_t h = 0; h < e->n_hooks; h++) {
        if (!e->hooks[h].before_loop)
            continue;
        any = true;
        int rc = e->hooks[h].before_loop(e->hooks[h].ctx, p->mode, e->global_step, L->done, n,
                                         d);
        if (rc) {
            tpu__pass_fail(p, rc, d);
            return rc;
        }
    }
    if (any && e->cfg.host_time == TPU_HOST_TIME_MEASURED) {
        const uint64_t cost = tpu__host_cost(e, 0, t0);
        trace_host_phase(e, "hooks", e->host_cycle, cost);
        e->host_cycle += cost;
        L->acc_host += (double)cost;
    }
    return 0;
}

/* The outfeed and watchdog threads of a pass (the infeed threads are the pass's feeders). */
struct pass_threads {
    pthread_t out, wd;
};

/* Joins the feeders that were started. */
static void join_feeders(struct tpu__pass *p)
{
    for (uint32_t i = 0; i < p->n_feeders; i++)
        if (p->feeders[i].started) {
            pthread_join(p->feeders[i].thread, NULL);
            p->feeders[i].started = false;
        }
}

static int start_threads(struct tpu__pass *p, struct pass_threads *t, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    tpu_device_reset_cancel(e->dev);
    p->live_feeders = p->n_feeders + 1;
    p->feeding = p->n_feeders;
    for (uint32_t i = 0; i < p->n_feeders; i++) {
        if (pthread_create(&p->feeders[i].thread, NULL, tpu__pass_infeed_thread,
                           &p->feeders[i]) != 0) {
            /* the threads started so far wait for turns that will not come: end them */
            pthread_mutex_lock(&p->lock);
            p->finished = true;
            p->feeding -= p->n_feeders - i;
            p->live_feeders -= p->n_feeders - i;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->lock);
            tpu_device_cancel(e->dev);
            join_feeders(p);
            return tpu__fail(d, TPU_ETHREAD, "cannot start the infeed thread of host %u",
                             p->feeders[i].host);
        }
        p->feeders[i].started = true;
    }
    if (pthread_create(&t->out, NULL, tpu__pass_outfeed_thread, p) != 0) {
        pthread_mutex_lock(&p->lock);
        p->finished = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        tpu_device_cancel(e->dev);
        join_feeders(p);
        return tpu__fail(d, TPU_ETHREAD, "cannot start the outfeed thread");
    }
    if (pthread_create(&t->wd, NULL, tpu__pass_watchdog_thread, p) != 0) {
        pthread_mutex_lock(&p->lock);
        p->finished = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        tpu_device_cancel(e->dev);
        join_feeders(p);
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
    join_feeders(p);
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
    const uint64_t fed = p->fed;
    pthread_mutex_unlock(&p->lock);
    if (perr) {
        if (d)
            *d = pd;
        return perr;
    }
    if (rc)
        return rc;
    /* from here on, every host of a pod returns the same (a stop and the input's end are
     * known to all alike): no abort (runtime.c, pod_call_end) */
    e->pod_end = TPU__POD_END_AGREED;
    /* a stop that came once every batch of the input had run cost nothing: the result
     * stands. In one process: the input ended and every step it fed ran (a stop between
     * launches after the infeed thread read the last batch, but before the device ran it,
     * has emitted or counted only part of the input). On a pod's host: the device found the
     * input's end, which every host finds at the same launch (each host's infeed thread
     * runs ahead by its own amount, so its view of the end is not the others') */
    const bool all_ran = e->group ? L->ended : input_ended && L->done >= fed;
    if (!training && stopped && !all_ran && L->done < p->steps)
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
    struct tpu_tuner_settings ts;
    int rc;
    if (!e->tuners[p->mode] && tpu__loop_size_tuner_settings(&e->cfg, p->mode, !e->timing_only, &ts) &&
        (rc = tpu_tuner_create(&ts, &e->tuners[p->mode], d)))
        return rc;
    rc = start_threads(p, &threads, d);
    if (rc)
        return rc;
    const bool training = p->mode == TPU_MODE_TRAIN;
    struct pass_loop L = {.target_step = target_step, .last_ckpt = e->global_step};
    tpu__loop_size_init(&L.size, &e->cfg, e->tuners[p->mode]);
    sum_counters(e, &L.before);
    uint64_t no_end = 0;
    if (e->group && (rc = tpu__pod_loop_exchange(p, 0, 0, &no_end, &L.before, d)))
        tpu__pass_fail(p, rc, d);
    while (!rc && !L.ended && !L.stop && pass_loop_more(e, p, &L)) {
        if (tpu__stop_requested(p)) {
            /* between launches: stop before the next one (the last boundary is saved) */
            L.stop = true;
            if (training && e->cfg.model_dir[0] && L.last_ckpt != e->global_step &&
                (rc = tpu__runtime_save_checkpoint(e, d)))
                tpu__pass_fail(p, rc, d);
            break;
        }
        uint64_t remaining = training ? target_step - e->global_step : p->steps - L.done;
        const uint64_t host_before = e->host_cycle;
        const uint64_t n = tpu__loop_size_next(&L.size, remaining);
        if ((rc = before_loop(e, p, &L, n, d)))
            break;
        struct launch l;
        if ((rc = launch_loop(e, p, &L, n, &l)))
            break;
        L.done += l.ran;
        if (training)
            e->global_step += l.ran;
        wait_drained(p, L.done);
        if (tpu__pass_failed(p)) {
            rc = -1;
            break;
        }
        /* the cores' counters now; a pod's hosts exchange theirs, the launch's end and the
         * loop's outfed values (runtime_pod.c) */
        struct tpu_core_counters now;
        sum_counters(e, &now);
        if (e->group && (rc = tpu__pod_loop_exchange(p, L.done - l.ran, L.done, &l.end, &now,
                                                     d))) {
            tpu__pass_fail(p, rc, d);
            break;
        }
        flush_input_phases(p, L.done);
        if ((rc = loop_boundary(e, p, &L, &l, &now, d)))
            break;
        /* the tuner sees the launch's device time and the host time around it: the launch
         * and the boundary (hooks, logging, checkpoint) */
        tpu__loop_size_observe(&L.size, l.ran, (double)(l.end - l.start) / e->hz,
                               (double)((l.start - host_before) + (e->host_cycle - l.end)) /
                                   e->hz);
    }
    tpu__loop_size_end(&L.size);
    join_threads(p, &threads);
    flush_input_phases(p, UINT64_MAX);
    return pass_result(e, p, &L, rc, d);
}

/* The slices of each infeed tensor for each logical core, when a tensor is partitioned:
 * what each core receives and the bytes it takes, checked against the program's infeed
 * buffer (the model lowered the same dims, so its buffer is the padded part). */
static int pass_slices(struct tpu__pass *p, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_model_program *mp = &e->mp;
    const uint32_t cpr = p->plan.cores_per_replica;
    bool any = false;
    for (uint32_t t = 0; t < p->spec.n_tensors && t < mp->n_infeed; t++)
        any = any || p->spec.tensors[t].dims.rank > 0;
    if (!any)
        return 0;
    p->slices = calloc((size_t)mp->n_infeed * cpr, sizeof *p->slices);
    if (!p->slices)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    for (uint32_t t = 0; t < mp->n_infeed; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->infeed[t]);
        const size_t esize = tpu_dtype_bytes(b->dtype);
        const struct tpu_shard_tensor *st = t < p->spec.n_tensors ? &p->spec.tensors[t] : NULL;
        for (uint32_t k = 0; k < cpr; k++) {
            struct tpu__slice *sl = &p->slices[t * cpr + k];
            sl->esize = esize;
            sl->s.receives = true;
            if (!st || st->dims.rank == 0) {
                sl->whole = true;
                continue;
            }
            int rc = tpu_shard_slice_of(&p->spec, &p->plan, t, k, &sl->s, d);
            if (rc)
                return rc;
            sl->full[0] = p->per_replica;
            for (uint32_t i = 0; i < st->rank; i++)
                sl->full[i + 1] = st->shape[i];
            sl->bytes = esize;
            bool whole = true;
            for (uint32_t i = 0; i < sl->s.rank; i++) {
                sl->bytes *= (size_t)sl->s.padded[i];
                whole = whole && sl->s.begin[i] == 0 && sl->s.end[i] == sl->full[i] &&
                        sl->s.padded[i] == sl->full[i];
            }
            sl->whole = whole;
            if (!sl->s.receives)
                continue;
            if (sl->bytes != tpu_buffer_bytes(b))
                return tpu__fail(d, TPU_ESHAPE, "the %s program infeeds '%s' as a [%u, %u] %s "
                                 "buffer (%zu bytes) on each core, but input_partition_dims "
                                 "give logical core %u a part of %zu bytes; the model did not "
                                 "lower these partition dims (a bug in the model)",
                                 tpu_program_name(mp->prog), st->name, b->rows, b->cols,
                                 tpu_dtype_name(b->dtype), tpu_buffer_bytes(b), k, sl->bytes);
            if (!whole && sl->bytes > p->scratch_bytes)
                p->scratch_bytes = sl->bytes;
        }
    }
    return 0;
}

int tpu__pass_init(struct tpu__pass *p, struct tpu_estimator *e, const struct tpu_input *in,
                   enum tpu_mode mode, struct tpu_diag *d)
{
    memset(p, 0, sizeof *p);
    p->e = e;
    p->input = in;
    p->mode = mode;
    p->step0 = e->global_step;
    p->end_step = UINT64_MAX;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = tpu__runtime_plan(e, mode, &p->spec, &p->plan, d);
    if (rc)
        return rc;
    p->per_replica = p->plan.per_replica_batch;
    p->global_batch = p->spec.global_batch;
    if ((rc = pass_slices(p, d)))
        return rc;
    /* one feeder per host that makes calls, with its calls in plan order; a pod's host
     * (runtime_pod.c): one feeder, its own host's, which walks every call */
    p->feeders = calloc(p->plan.hosts ? p->plan.hosts : 1, sizeof *p->feeders);
    if (!p->feeders)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    for (uint32_t h = 0; h < p->plan.hosts; h++) {
        if (e->group && h != e->group->rank)
            continue;
        uint32_t n = 0;
        for (uint32_t c = 0; c < p->plan.n_calls; c++)
            n += p->plan.calls[c].host == h || e->group;
        if (!n)
            continue;
        struct tpu__feeder *f = &p->feeders[p->n_feeders++];
        f->p = p;
        f->host = h;
        f->waits_turn = UINT64_MAX;
        f->calls = malloc(n * sizeof *f->calls);
        if (!f->calls)
            return tpu__fail(d, TPU_ENOMEM, "out of memory");
        for (uint32_t c = 0; c < p->plan.n_calls; c++)
            if (p->plan.calls[c].host == h || e->group)
                f->calls[f->n_calls++] = c;
    }
    return 0;
}

void tpu__pass_free(struct tpu__pass *p)
{
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cv);
    free(p->real_rows);
    free(p->losses);
    free(p->global_losses);
    free(p->sums);
    free(p->input_phases);
    free(p->pod_values);
    free(p->pod_rows);
    free(p->slices);
    for (uint32_t i = 0; p->feeders && i < p->n_feeders; i++)
        free(p->feeders[i].calls);
    free(p->feeders);
    tpu_shard_plan_free(&p->plan);
}
