/* The estimator on a pod whose hosts run in separate processes (runtime.h, struct
 * tpu_host_group): the checks of a host group against the run configuration and the device's
 * pod link, what the hosts exchange and when, and how every host fills the pass's figures
 * from what they exchanged. It is not the transport (host/mpi, or the tests' threads are)
 * and not the threads of a pass (runtime_feed.c), which only keep their own host's values
 * for it (tpu__pod_keep).
 *
 * The rule is bit-identity with one process simulating every host: every host makes the
 * same input calls (its own, the others' skipped), so every host knows each step's real
 * rows; the outfed values of a step live on the hosts that hold the replicas, and at each
 * loop boundary every host gathers every host's values of the loop's steps and sums them
 * exactly as one process's outfeed thread does: steps in order, pod replicas in order, the
 * same types (a float share added to a double). The device's end of a launch is the latest
 * over the hosts (one device's end is its latest core's), the counters the pod's sum.
 *
 * Exchanges (all from the caller's thread, at the same points on every host, with the same
 * bytes on every host):
 *   pass start   the agreement record (tpu__pod_agree: with each host's outcome of the
 *                call's checks so far, so that every host comes to it), then the counters
 *                and any stop request (from == to)
 *   boundary     a head per host (the launch's end cycle, the steps, the counters), then
 *                the outfed values of the loop's steps (prediction: their output rows, from
 *                which every host emits every real row, in one process's order), then,
 *                after the hooks, a stop word
 *                (tpu__pod_stop_exchange: a stop a hook asked for at this boundary stops
 *                every host at it, as it stops one process there)
 *   call end     a word per host (tpu__pod_end_pass): no host returns while another still
 *                writes the checkpoint it may restore next
 * A failure of one host goes to the group's abort (tpu__pod_abort), which ends every host's
 * blocked exchange: no host waits for one that will never come. An outcome every host
 * reaches alike (a mismatch found in the agreement, the input's end under strict_input, a
 * stop, a check every host fails before the agreement) is returned on every host without
 * an abort: the caller may handle it and go on (runtime.c, pod_call_end). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "util.h"

/* ---- checks at create ------------------------------------------------------------------- */

int tpu__pod_check_config(const struct tpu_run_config *c, const struct tpu_device *dev,
                          uint32_t *parts, struct tpu_diag *d)
{
    const struct tpu_host_group *g = c->host_group;
    const struct tpu_pod_link *link = tpu_device_pod(dev);
    *parts = 1;
    if (!g) {
        if (link)
            return tpu__fail(d, TPU_EINVAL, "the device is part %u of a pod of %u devices "
                             "(settings.pod), but the run configuration has no host_group, so "
                             "the estimator would drive only this part; give host_group (this "
                             "process's host of num_hosts %u), or open the device without "
                             "settings.pod", link->index, link->parts, link->parts);
        return 0;
    }
    if (!g->allgather || !g->abort)
        return tpu__fail(d, TPU_EINVAL, "host_group has no %s function; a host group needs "
                         "both allgather and abort (host/mpi makes one)",
                         !g->allgather ? "allgather" : "abort");
    if (g->n != c->num_hosts)
        return tpu__fail(d, TPU_EINVAL, "host_group has %u hosts, but num_hosts is %u; every "
                         "host of the group runs the same configuration with num_hosts %u",
                         g->n, c->num_hosts, g->n);
    if (g->rank >= g->n)
        return tpu__fail(d, TPU_EINVAL, "host_group's rank %u is not a host of its %u (0 to "
                         "%u); give this process's host index", g->rank, g->n, g->n - 1);
    if (!link)
        return tpu__fail(d, TPU_EINVAL, "host_group makes this process host %u of %u, but the "
                         "device has no pod link (settings.pod is NULL), so its collectives "
                         "would not reach the other hosts; open the device with settings.pod "
                         "(parts %u, index %u)", g->rank, g->n, g->n, g->rank);
    if (link->parts != g->n || link->index != g->rank)
        return tpu__fail(d, TPU_EINVAL, "the device is part %u of %u (settings.pod), but "
                         "host_group makes this process host %u of %u; open the device with "
                         "settings.pod parts %u, index %u", link->index, link->parts, g->rank,
                         g->n, g->n, g->rank);
    if (c->host_time == TPU_HOST_TIME_MEASURED &&
        (c->iterations_per_loop_auto || c->iterations_per_loop_s > 0))
        return tpu__fail(d, TPU_EUNSUPPORTED, "iterations_per_loop %s sizes each launch from "
                         "the host time, and measured host time differs between the hosts of "
                         "a pod, so they would run launches of different sizes; use a count "
                         "of steps, or modeled host time", c->iterations_per_loop_auto
                         ? "auto" : "as a time");
    *parts = g->n;
    return 0;
}

/* ---- failures ---------------------------------------------------------------------------- */

void tpu__pod_abort(struct tpu_estimator *e, int rc, const struct tpu_diag *d)
{
    if (!e->group || rc >= 0 || atomic_exchange(&e->group_aborted, 1))
        return;
    struct tpu_diag why = {0};
    if (d && d->msg[0])
        why = *d;
    else
        tpu__fail(&why, rc, "%s", tpu_strerror(rc));
    e->group->abort(e->group->ctx, rc, &why);
}

/* ---- the agreement at a pass's start ----------------------------------------------------- */

enum agree_kind { AGREE_U64, AGREE_F64, AGREE_BOOL, AGREE_MODE, AGREE_INPUT, AGREE_EVAL,
                  AGREE_HASH };

enum {
    /* compared in this order, the first difference reported: the global step before the
     * steps (a training target differs when the global steps do) */
    A_CORES_PER_CHIP, A_CHIPS, A_CPR, A_HOSTS, A_MODE, A_BATCH, A_STEP, A_STEPS, A_IPL,
    A_IPL_S, A_IPL_AUTO, A_INPUT, A_EVAL_INPUT, A_PROGRAM, A_SEED, A_COUNT
};

static const struct {
    const char *name;
    enum agree_kind kind;
} agree_fields[A_COUNT] = {
    [A_CORES_PER_CHIP] = {"cores per chip", AGREE_U64},
    [A_CHIPS] = {"chips per host", AGREE_U64},
    [A_CPR] = {"num_cores_per_replica", AGREE_U64},
    [A_HOSTS] = {"num_hosts", AGREE_U64},
    [A_MODE] = {"mode", AGREE_MODE},
    [A_BATCH] = {"global batch", AGREE_U64},
    [A_STEPS] = {"steps (or target step)", AGREE_U64},
    [A_IPL] = {"iterations_per_loop", AGREE_U64},
    [A_IPL_S] = {"iterations_per_loop time (s)", AGREE_F64},
    [A_IPL_AUTO] = {"iterations_per_loop auto", AGREE_BOOL},
    [A_INPUT] = {"per_host_input_for_training", AGREE_INPUT},
    [A_EVAL_INPUT] = {"eval_training_input_configuration", AGREE_EVAL},
    [A_STEP] = {"global step", AGREE_U64},
    [A_PROGRAM] = {"program (hash of its text)", AGREE_HASH},
    [A_SEED] = {"seed", AGREE_U64},
};

/* What one host runs, as it goes to the others: fixed size, no padding left undefined. */
struct agree_rec {
    char chip[TPU_CONFIG_NAME_MAX];
    uint64_t v[A_COUNT];
    uint64_t stop; /* a stop was requested on this host (not compared: any host's counts) */
    int64_t status; /* the host's checks and loading before the agreement: 0 or its error */
    char msg[TPU_DIAG_MAX]; /* and its sentence */
};

/* A fingerprint of the loaded program's printed text: two hosts that built different
 * programs (another model, another shape) differ here. */
static uint64_t program_hash(const struct tpu_program *prog)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return 0;
    tpu_program_print(prog, f);
    fclose(f);
    const uint64_t h = tpu__fnv1a_words(TPU__FNV1A_BASIS, text, len);
    free(text);
    return h;
}

static void agree_value(enum agree_kind k, uint64_t v, char *out, size_t size)
{
    static const char *const modes[] = {"train", "eval", "predict"};
    double x;
    switch (k) {
    case AGREE_F64:
        memcpy(&x, &v, sizeof x);
        snprintf(out, size, "%g", x);
        return;
    case AGREE_BOOL:
        snprintf(out, size, "%s", v ? "true" : "false");
        return;
    case AGREE_MODE:
        snprintf(out, size, "%s", v < 3 ? modes[v] : "?");
        return;
    case AGREE_INPUT:
        snprintf(out, size, "%s", v < 4 ? tpu__input_mode_names[v] : "?");
        return;
    case AGREE_EVAL:
        snprintf(out, size, "%s", v < 2 ? tpu__eval_input_names[v] : "?");
        return;
    case AGREE_HASH:
        snprintf(out, size, "%016llx", (unsigned long long)v);
        return;
    case AGREE_U64:
        break;
    }
    snprintf(out, size, "%llu", (unsigned long long)v);
}

/* The hosts' outcomes before the agreement (every host's status): 0 when every host got
 * there; else this host's return, with e->pod_end saying how the call ends (see
 * tpu__pod_agree in runtime_int.h). */
static int agree_status(struct tpu_estimator *e, const struct agree_rec *all, int status,
                        struct tpu_diag *d)
{
    const struct tpu_host_group *g = e->group;
    uint32_t failed = 0, first = g->n;
    for (uint32_t h = 0; h < g->n; h++)
        if (all[h].status) {
            failed++;
            first = first < g->n ? first : h;
        }
    if (!failed)
        return 0;
    if (failed == g->n) { /* every host failed before the pass: each returns its own error */
        e->pod_end = TPU__POD_END_AGREED;
        return status;
    }
    if (status) { /* this host alone (or with some): its abort tells the others */
        e->pod_end = TPU__POD_END_ABORT;
        return status;
    }
    e->pod_end = TPU__POD_END_GROUP;
    return tpu__fail(d, TPU_ECANCELED, "host %u failed: %.*s", first, TPU_DIAG_MAX - 64,
                     all[first].msg);
}

int tpu__pod_agree(struct tpu_estimator *e, enum tpu_mode mode, uint64_t steps, int status,
                   struct tpu_diag *d)
{
    const struct tpu_host_group *g = e->group;
    if (!g)
        return status;
    const struct tpu_run_config *c = &e->cfg;
    const struct tpu_chip_config *chip = tpu_device_chip(e->dev);
    struct agree_rec *mine = calloc(1, sizeof *mine);
    struct agree_rec *all = calloc(g->n, sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    snprintf(mine->chip, sizeof mine->chip, "%s", chip->name);
    const uint32_t global = mode == TPU_MODE_TRAIN  ? c->train_batch_size
                            : mode == TPU_MODE_EVAL ? c->eval_batch_size
                                                    : c->predict_batch_size;
    uint64_t ipl_s;
    memcpy(&ipl_s, &c->iterations_per_loop_s, sizeof ipl_s);
    mine->v[A_CORES_PER_CHIP] = chip->cores_per_chip;
    mine->v[A_CHIPS] = e->chips_per_host;
    mine->v[A_CPR] = e->n_cores / e->n_replicas;
    mine->v[A_HOSTS] = e->hosts;
    mine->v[A_MODE] = (uint64_t)mode;
    mine->v[A_BATCH] = global;
    mine->v[A_STEPS] = steps;
    mine->v[A_IPL] = c->iterations_per_loop;
    mine->v[A_IPL_S] = ipl_s;
    mine->v[A_IPL_AUTO] = c->iterations_per_loop_auto;
    mine->v[A_INPUT] = (uint64_t)c->per_host_input_for_training;
    mine->v[A_EVAL_INPUT] = (uint64_t)c->eval_training_input_configuration;
    mine->v[A_STEP] = e->global_step;
    mine->v[A_PROGRAM] = e->loaded && !status ? program_hash(e->mp.prog) : 0;
    mine->v[A_SEED] = c->seed;
    mine->stop = atomic_load(&e->stop) != 0;
    mine->status = status;
    if (status && d)
        snprintf(mine->msg, sizeof mine->msg, "%s", d->msg);
    struct tpu_diag gd = {0};
    int rc = g->allgather(g->ctx, mine, sizeof *mine, all, &gd);
    if (rc) {
        /* the group failed (another host's abort): it has reported that failure */
        e->pod_end = TPU__POD_END_GROUP;
        if (!status && d)
            *d = gd;
        free(mine);
        free(all);
        return status ? status : rc;
    }
    if ((rc = agree_status(e, all, status, d))) {
        free(mine);
        free(all);
        return rc;
    }
    for (uint32_t h = 1; h < g->n && !rc; h++) {
        if (strncmp(all[h].chip, all[0].chip, sizeof all[0].chip)) {
            rc = tpu__fail(d, TPU_EINVAL, "host %u's chip %.*s differs from host 0's %.*s: "
                           "run every rank with the same options", h,
                           (int)sizeof all[h].chip, all[h].chip, (int)sizeof all[0].chip,
                           all[0].chip);
            break;
        }
        for (int f = 0; f < A_COUNT; f++) {
            if (all[h].v[f] == all[0].v[f])
                continue;
            char a[48], b[48];
            agree_value(agree_fields[f].kind, all[h].v[f], a, sizeof a);
            agree_value(agree_fields[f].kind, all[0].v[f], b, sizeof b);
            if (f == A_STEP)
                /* the usual cause: a model_dir that some hosts do not see (host 0 writes
                 * the checkpoints, every host restores them) */
                rc = tpu__fail(d, TPU_EINVAL, "host %u's global step %s differs from host "
                               "0's %s: host 0 writes the checkpoints and every host restores "
                               "them, so the model_dir must be a directory every host reads "
                               "(a shared file system)", h, a, b);
            else
                rc = tpu__fail(d, TPU_EINVAL, "host %u's %s %s differs from host 0's %s: run "
                               "every rank with the same options", h, agree_fields[f].name, a,
                               b);
            break;
        }
    }
    /* a stop request on any host: no host starts (the request stays, as in one process) */
    for (uint32_t h = 0; h < g->n && !rc; h++)
        if (all[h].stop) {
            atomic_store(&e->stop, 1);
            static const char *const words[] = {"training", "evaluation", "prediction"};
            rc = tpu__fail(d, TPU_ECANCELED, "%s not started: a stop was requested (on host "
                           "%u; global step %llu)", words[mode], h,
                           (unsigned long long)e->global_step);
        }
    /* computed from what every host sent: every host returns the same */
    if (rc)
        e->pod_end = TPU__POD_END_AGREED;
    free(mine);
    free(all);
    return rc;
}

/* ---- prediction's rows -------------------------------------------------------------------- */

/* A step's rows in pod_rows: a slot per replica this host holds (BROADCAST: one, the first:
 * every replica computes the whole global batch and only replica 0's rows, host 0's first
 * slot, are emitted), each slot the outfeed tensors in program order, padding rows
 * included. The same on every host, so every host gives the same bytes to the gather. */
static uint32_t pod_row_slots(const struct tpu__pass *p)
{
    const struct tpu_estimator *e = p->e;
    return tpu__pass_broadcast(p) ? 1 : e->local_cores / (e->n_cores / e->n_replicas);
}

/* The bytes of the outfeed tensors before tensor `t` in a slot (t = n_outfeed: the slot's
 * size). */
static size_t pod_row_offset(const struct tpu__pass *p, uint32_t t)
{
    const struct tpu_model_program *mp = &p->e->mp;
    size_t off = 0;
    for (uint32_t i = 0; i < t && i < mp->n_outfeed; i++)
        off += tpu_buffer_bytes(tpu_program_buffer(mp->prog, mp->outfeed[i]));
    return off;
}

/* Prediction's share of tpu__pod_keep: replica rep's output tensor t of step s, all its rows,
 * padding included, into p->pod_rows until the loop's boundary. */
static int keep_rows(struct tpu__pass *p, uint64_t s, uint32_t rep, uint32_t t, const float *buf)
{
    struct tpu_estimator *e = p->e;
    const uint32_t cpr = e->n_cores / e->n_replicas, slots = pod_row_slots(p);
    const uint32_t j = rep - e->core0 / cpr;
    if (j >= slots)
        return 0; /* BROADCAST: another replica of the same rows */
    const size_t slot_bytes = pod_row_offset(p, e->mp.n_outfeed);
    const size_t step_bytes = (size_t)slots * slot_bytes;
    const size_t at = (size_t)j * slot_bytes + pod_row_offset(p, t);
    const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(e->mp.prog, e->mp.outfeed[t]));
    pthread_mutex_lock(&p->lock);
    /* the loop's k-th step; the room grows to the longest loop's steps, and no further:
     * the caller's thread starts the next loop's rows at its first step */
    const uint64_t k = s - p->pod_rows_from;
    if (k >= p->pod_rows_cap) {
        float *nr = k + 1 <= SIZE_MAX / step_bytes
                        ? realloc(p->pod_rows, (size_t)(k + 1) * step_bytes) : NULL;
        if (!nr) {
            pthread_mutex_unlock(&p->lock);
            return TPU_ENOMEM;
        }
        p->pod_rows = nr;
        p->pod_rows_cap = k + 1;
    }
    memcpy((char *)p->pod_rows + (size_t)k * step_bytes + at, buf, bytes);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* ---- the outfeed thread's values --------------------------------------------------------- */

int tpu__pod_keep(struct tpu__pass *p, uint64_t s, uint32_t rep, uint32_t t, const float *buf)
{
    if (p->mode == TPU_MODE_PREDICT)
        return keep_rows(p, s, rep, t, buf);
    struct tpu_estimator *e = p->e;
    const uint32_t cpr = e->n_cores / e->n_replicas;
    const uint32_t local = e->local_cores / cpr, j = rep - e->core0 / cpr;
    pthread_mutex_lock(&p->lock);
    if (s >= p->pod_values_cap) {
        uint64_t cap = p->pod_values_cap ? p->pod_values_cap : 64;
        while (cap <= s)
            cap *= 2;
        struct tpu__pod_value *nv = realloc(p->pod_values, cap * local * sizeof *nv);
        if (!nv) {
            pthread_mutex_unlock(&p->lock);
            return TPU_ENOMEM;
        }
        memset(nv + p->pod_values_cap * local, 0,
               (cap - p->pod_values_cap) * local * sizeof *nv);
        p->pod_values = nv;
        p->pod_values_cap = cap;
    }
    struct tpu__pod_value *v = &p->pod_values[s * local + j];
    if (t == 0)
        v->loss = buf[0];
    else if (t == 1) {
        v->correct = buf[0];
        v->count = p->mode == TPU_MODE_EVAL ? buf[1] : 0;
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Prediction at the boundary of the loop of steps [from, to): every host's rows of those
 * steps (the same bytes from every host: steps x slots x the outfeed tensors), then, on
 * every host, emit for every real row, as runtime_feed.c's outfeed thread emits them in
 * one process (outfeed_predict_rows): step by step, the replicas in pod order (BROADCAST:
 * replica 0's only), each replica's tensors, its rows while within the step's real rows
 * (row i of replica r is the step's example r x per_replica + i), with one running index.
 * The steps' real rows are every host's to know: its one infeed thread makes or skips
 * every call of the plan. */
static int pod_emit_rows(struct tpu__pass *p, uint64_t from, uint64_t to, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_host_group *g = e->group;
    const struct tpu_model_program *mp = &e->mp;
    const bool broadcast = tpu__pass_broadcast(p);
    const uint32_t cpr = e->n_cores / e->n_replicas, local = e->local_cores / cpr;
    const uint32_t slots = pod_row_slots(p);
    const size_t slot_bytes = pod_row_offset(p, mp->n_outfeed);
    const size_t step_bytes = (size_t)slots * slot_bytes;
    const uint64_t n = to - from;
    if (!step_bytes || n > SIZE_MAX / step_bytes / g->n)
        return tpu__fail(d, TPU_ENOMEM, "prediction on a pod: a loop of %llu steps holds more "
                         "output rows than this host can address (%zu bytes a step on each of "
                         "%u hosts); use a smaller iterations_per_loop",
                         (unsigned long long)n, step_bytes, g->n);
    const size_t bytes = (size_t)n * step_bytes;
    uint32_t *real = malloc((size_t)n * sizeof *real);
    char *all = malloc((size_t)g->n * bytes);
    if (!real || !all) {
        free(real);
        free(all);
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the output rows of a loop of %llu "
                         "prediction steps on %u hosts (%zu bytes); use a smaller "
                         "iterations_per_loop", (unsigned long long)n, g->n,
                         (size_t)g->n * bytes);
    }
    /* the steps' real rows are known once the infeed thread has passed every call of them
     * (the device may finish a step before the thread skipped the other hosts' calls) */
    pthread_mutex_lock(&p->lock);
    while (p->fed < to && !p->error)
        pthread_cond_wait(&p->cv, &p->lock);
    const int failed = p->error;
    if (!failed)
        memcpy(real, p->real_rows + from, (size_t)n * sizeof *real);
    /* every step of the loop is kept: the outfeed thread drained them, and it writes no more
     * before the next launch */
    const void *mine = p->pod_rows;
    pthread_mutex_unlock(&p->lock);
    int rc = failed ? failed : g->allgather(g->ctx, mine, bytes, all, d);
    for (uint64_t k = 0; k < n && !rc; k++) {
        for (uint32_t rep = 0; rep < (broadcast ? 1 : e->n_replicas); rep++) {
            const uint32_t h = rep / local, j = broadcast ? 0 : rep % local;
            const char *slot = all + (size_t)h * bytes + (size_t)k * step_bytes +
                               (size_t)j * slot_bytes;
            for (uint32_t t = 0; t < mp->n_outfeed; t++) {
                const struct tpu_buffer_desc *b = tpu_program_buffer(mp->prog, mp->outfeed[t]);
                const float *rows = (const float *)(const void *)(slot + pod_row_offset(p, t));
                for (uint32_t i = 0; i < b->rows; i++)
                    if ((uint64_t)rep * p->per_replica + i < real[k])
                        p->emit(p->emit_ctx, p->emitted++, rows + (size_t)i * b->cols, b->cols);
            }
        }
    }
    free(real);
    free(all);
    if (!rc) {
        pthread_mutex_lock(&p->lock);
        p->pod_rows_from = to; /* the next loop's rows start at its first step */
        pthread_mutex_unlock(&p->lock);
    }
    return rc;
}

/* ---- the loop boundary's exchange -------------------------------------------------------- */

struct pod_head {
    uint64_t end_cycle, from, to, stop;
    uint64_t mxu_mac_slots, macs, stall[TPU_STALL_COUNT];
};

/* Steps [from, to) of the pass from every host's values (all: [host][step][replica]), as
 * runtime_feed.c's outfeed thread fills them in one process: training keeps replica 0's
 * loss, the global loss (every replica's share, in replica order) and the step's sums;
 * evaluation the loss sums and counts, added to the pass's in step and replica order. Under
 * p->lock. */
static int fill_steps(struct tpu__pass *p, const struct tpu__pod_value *all, uint64_t from,
                      uint64_t to)
{
    struct tpu_estimator *e = p->e;
    const uint32_t cpr = e->n_cores / e->n_replicas, local = e->local_cores / cpr;
    const bool training = p->mode == TPU_MODE_TRAIN;
    const bool broadcast = tpu__pass_broadcast(p);
    const bool train_counts = training && e->shape.train_counts;
    const uint64_t n = to - from;
    if (tpu__grow((void **)&p->sums, &p->sums_cap, to, sizeof *p->sums) ||
        (training && (tpu__grow((void **)&p->losses, &p->loss_cap, to, sizeof *p->losses) ||
                      tpu__grow((void **)&p->global_losses, &p->global_loss_cap, to,
                                 sizeof *p->global_losses))))
        return TPU_ENOMEM;
    for (uint64_t s = from; s < to; s++) {
        double global_loss = 0, step_loss = 0, step_correct = 0;
        for (uint32_t rep = 0; rep < e->n_replicas; rep++) {
            const uint32_t h = rep / local, j = rep % local;
            const struct tpu__pod_value *v = &all[((uint64_t)h * n + (s - from)) * local + j];
            if (training)
                global_loss += v->loss;
            if (broadcast && rep != 0)
                continue;
            if (training) {
                if (rep == 0)
                    p->losses[s] = e->timing_only ? NAN
                                                  : (float)(v->loss * (double)e->n_replicas);
                if (train_counts)
                    step_correct += v->correct;
            } else if (p->mode == TPU_MODE_EVAL) {
                p->loss_sum += v->loss;
                p->correct += v->correct;
                p->count += v->count;
                step_loss += v->loss;
                step_correct += v->correct;
            }
        }
        if (training) {
            p->global_losses[s] = e->timing_only ? NAN : (float)global_loss;
            step_loss = global_loss;
        }
        p->sums[s] = (struct tpu__step_sums){.loss = step_loss, .correct = step_correct};
    }
    return 0;
}

int tpu__pod_loop_exchange(struct tpu__pass *p, uint64_t from, uint64_t to,
                           uint64_t *end_cycle, struct tpu_core_counters *counters,
                           struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_host_group *g = e->group;
    struct pod_head mine;
    memset(&mine, 0, sizeof mine);
    mine.end_cycle = *end_cycle;
    mine.from = from;
    mine.to = to;
    mine.stop = atomic_load(&e->stop) != 0;
    mine.mxu_mac_slots = counters->mxu_mac_slots;
    mine.macs = counters->macs;
    memcpy(mine.stall, counters->stall, sizeof mine.stall);
    struct pod_head *heads = calloc(g->n, sizeof *heads);
    if (!heads)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    int rc = g->allgather(g->ctx, &mine, sizeof mine, heads, d);
    for (uint32_t h = 1; h < g->n && !rc; h++)
        if (heads[h].from != heads[0].from || heads[h].to != heads[0].to)
            rc = tpu__fail(d, TPU_EINVAL, "host %u ran steps %llu to %llu of the pass and host "
                           "0 steps %llu to %llu: the hosts went apart (different inputs or "
                           "a stop request seen on some hosts only); run every rank with the "
                           "same input and options", h, (unsigned long long)heads[h].from,
                           (unsigned long long)heads[h].to, (unsigned long long)heads[0].from,
                           (unsigned long long)heads[0].to);
    if (rc) {
        free(heads);
        return rc;
    }
    memset(counters, 0, sizeof *counters);
    uint64_t end = 0;
    for (uint32_t h = 0; h < g->n; h++) {
        end = heads[h].end_cycle > end ? heads[h].end_cycle : end;
        /* a stop before the first launch; at a boundary, after its hooks (below) */
        if (from == to)
            p->pod_stop = p->pod_stop || heads[h].stop;
        counters->mxu_mac_slots += heads[h].mxu_mac_slots;
        counters->macs += heads[h].macs;
        for (int s = 0; s < TPU_STALL_COUNT; s++)
            counters->stall[s] += heads[h].stall[s];
    }
    free(heads);
    if (p->pod_stop)
        atomic_store(&e->stop, 1); /* the request stays on every host, as on the one asked */
    *end_cycle = end;
    if (to == from)
        return 0;
    if (p->mode == TPU_MODE_PREDICT)
        return pod_emit_rows(p, from, to, d);
    /* the outfed values of the loop's steps: this host's replicas, then everyone's */
    const uint32_t cpr = e->n_cores / e->n_replicas, local = e->local_cores / cpr;
    const size_t bytes = (size_t)(to - from) * local * sizeof(struct tpu__pod_value);
    struct tpu__pod_value *send = calloc(1, bytes);
    struct tpu__pod_value *all = calloc(g->n, bytes);
    if (!send || !all) {
        free(send);
        free(all);
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&p->lock);
    const uint64_t have = p->pod_values_cap < to ? p->pod_values_cap : to;
    if (have > from)
        memcpy(send, p->pod_values + from * local,
               (size_t)(have - from) * local * sizeof *send);
    pthread_mutex_unlock(&p->lock);
    rc = g->allgather(g->ctx, send, bytes, all, d);
    if (!rc) {
        pthread_mutex_lock(&p->lock);
        if (fill_steps(p, all, from, to))
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory");
        pthread_mutex_unlock(&p->lock);
    }
    free(send);
    free(all);
    return rc;
}

int tpu__pod_stop_exchange(struct tpu__pass *p, struct tpu_diag *d)
{
    struct tpu_estimator *e = p->e;
    const struct tpu_host_group *g = e->group;
    uint32_t *all = calloc(g->n, sizeof *all);
    if (!all)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    const uint32_t mine = atomic_load(&e->stop) != 0;
    int rc = g->allgather(g->ctx, &mine, sizeof mine, all, d);
    for (uint32_t h = 0; h < g->n && !rc; h++)
        p->pod_stop = p->pod_stop || all[h];
    free(all);
    if (!rc && p->pod_stop)
        atomic_store(&e->stop, 1); /* the request stays on every host, as on the one asked */
    return rc;
}

int tpu__pod_end_pass(struct tpu_estimator *e, struct tpu_diag *d)
{
    const struct tpu_host_group *g = e->group;
    if (!g)
        return 0;
    uint32_t *all = calloc(g->n, sizeof *all);
    if (!all)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    const uint32_t mine = g->rank;
    int rc = g->allgather(g->ctx, &mine, sizeof mine, all, d);
    free(all);
    return rc;
}
