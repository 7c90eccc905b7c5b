/* Loop-size sweeps (tpusim/sweep.h): each loop size trained through the estimator on a fresh
 * device, its loops observed by a hook, and the figures a user chooses a loop size by. What
 * is simulated and what is extended from the simulation is sweep.h's comment; this file
 * prints nothing and writes no files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/sweep.h"
#include "util.h"

void tpu_sweep_default_settings(struct tpu_sweep_settings *s, const struct tpu_chip_config *chip)
{
    memset(s, 0, sizeof *s);
    tpu_device_default_settings(&s->device, chip);
    tpu_run_config_default(&s->run);
    s->full_steps = 32;
    s->measured_loops = 2;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- one simulated loop size ----------------------------------------------------------- */

/* What the hook saw of one training loop. */
struct loop_rec {
    uint64_t steps;
    double device_s, stall_s, wait_s, hooks_s, launch_s, examples;
};

struct recorder {
    const struct tpu_estimator *est;
    struct loop_rec *loops;
    uint32_t n, cap;
    double last_total_s; /* the simulated time at the end of the previous loop */
};

/* The host's side of the last loop recorded, from the estimator's complete figures of its
 * last loop (a hook runs before the boundary's host costs are known: they are the boundary's
 * own, so the next hook, or the end of training, reads them). */
static void record_host(struct recorder *r)
{
    if (!r->n)
        return;
    const struct tpu_loop_info *li = tpu_estimator_last_info(r->est);
    struct loop_rec *l = &r->loops[r->n - 1];
    l->hooks_s = li->host_seconds;
    /* the launch is the rest of the loop's span on the host's clock (from the end of the
     * last boundary to the device's start) */
    l->launch_s = li->total_seconds - r->last_total_s - li->device_seconds - li->host_seconds;
    if (l->launch_s < 0)
        l->launch_s = 0;
    r->last_total_s = li->total_seconds;
}

static int record_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    (void)d;
    if (li->mode != TPU_MODE_TRAIN || r->n == r->cap)
        return 0;
    record_host(r);
    struct loop_rec *l = &r->loops[r->n++];
    l->steps = li->steps;
    l->device_s = li->device_seconds;
    l->stall_s = li->infeed_stall_share * li->device_seconds;
    l->wait_s = li->stall_share * li->device_seconds;
    l->examples = li->examples_per_s * li->device_seconds;
    return 0;
}

/* A simulated loop size's figures: means over the measured loops. */
struct measured {
    uint64_t size;
    double device_s, stall_s, wait_s, hooks_s, launch_s, examples, wall_s;
    uint32_t loops;
};

static int simulate(const struct tpu_sweep_settings *s, uint64_t size, struct measured *m,
                    struct tpu_diag *d)
{
    const uint32_t n_loops = 1 + s->measured_loops;
    struct recorder rec = {.cap = n_loops};
    rec.loops = calloc(n_loops, sizeof *rec.loops);
    if (!rec.loops)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the sweep's loop records");
    struct tpu_device_settings ds = s->device;
    ds.trace = false;
    struct tpu_run_config cfg = s->run;
    cfg.iterations_per_loop = size;
    cfg.iterations_per_loop_s = 0;
    cfg.iterations_per_loop_auto = false;
    cfg.model_dir[0] = '\0';
    cfg.save_checkpoints_steps = 0; /* charged by make_point: a sweep writes none */
    cfg.num_cores_per_replica = ds.cores_per_replica ? ds.cores_per_replica : 1;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_hook hook = {.ctx = &rec, .after_loop = record_loop};
    struct tpu_diag ed = {0};
    const double w0 = wall_s();
    int rc = tpu_device_open(&ds, &dev, &ed);
    if (!rc)
        rc = tpu_estimator_create(dev, &cfg, s->model, &hook, 1, &est, &ed);
    rec.est = est;
    if (!rc)
        rc = tpu_estimator_train(est, s->input, size * n_loops, 0, &ed);
    if (!rc)
        record_host(&rec);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    if (!rc && rec.n != n_loops)
        rc = tpu__fail(&ed, TPU_EINVAL, "the run made %u loops of the %u it needs (a warm-up "
                       "and %u measured); the training input may have ended: give an endless "
                       "input", rec.n, n_loops, s->measured_loops);
    for (uint32_t i = 0; !rc && i < n_loops; i++)
        if (rec.loops[i].steps != size)
            rc = tpu__fail(&ed, TPU_EINVAL, "loop %u ran %llu steps, not %llu", i + 1,
                           (unsigned long long)rec.loops[i].steps, (unsigned long long)size);
    if (rc) {
        free(rec.loops);
        return tpu__fail(d, rc, "loop size %llu: %s", (unsigned long long)size, ed.msg);
    }
    memset(m, 0, sizeof *m);
    m->size = size;
    m->loops = s->measured_loops;
    for (uint32_t i = 1; i < n_loops; i++) {
        const struct loop_rec *l = &rec.loops[i];
        m->device_s += l->device_s / s->measured_loops;
        m->stall_s += l->stall_s / s->measured_loops;
        m->wait_s += l->wait_s / s->measured_loops;
        m->hooks_s += l->hooks_s / s->measured_loops;
        m->launch_s += l->launch_s / s->measured_loops;
        m->examples += l->examples / s->measured_loops;
    }
    m->wall_s = wall_s() - w0;
    free(rec.loops);
    return 0;
}

/* ---- points ---------------------------------------------------------------------------- */

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* A point from one loop's means (simulated or extended): the loop's span adds the host's
 * costs, checkpoints spread over the loops between them. */
static void make_point(const struct tpu_sweep_settings *s, const struct measured *m,
                       enum tpu_sweep_method method, struct tpu_sweep_point *p)
{
    const uint64_t size = m->size;
    const uint64_t ckpt_every = s->run.save_checkpoints_steps;
    const uint64_t log_every = s->run.log_step_count_steps;
    memset(p, 0, sizeof *p);
    p->iterations_per_loop = size;
    p->method = method;
    p->loops = method == TPU_SWEEP_SIMULATED ? m->loops : 0;
    p->launch_s = m->launch_s;
    p->hooks_s = m->hooks_s;
    p->checkpoint_s = ckpt_every ? s->run.modeled_checkpoint_us * 1e-6 /
                                       (double)ceil_div(ckpt_every, size)
                                 : 0;
    const double host = p->launch_s + p->hooks_s + p->checkpoint_s;
    p->loop_seconds = m->device_s + host;
    p->step_time_s = m->device_s / (double)size;
    if (p->loop_seconds > 0) {
        p->examples_per_s = m->examples / p->loop_seconds;
        p->infeed_stall_share = m->stall_s / p->loop_seconds;
        p->host_overhead_share = host / p->loop_seconds;
        p->stall_share = m->wait_s / p->loop_seconds;
        p->device_busy_share = (m->device_s - m->wait_s) / p->loop_seconds;
    }
    p->report_seconds = log_every ? (double)ceil_div(log_every, size) * p->loop_seconds : NAN;
    p->checkpoint_seconds = ckpt_every ? (double)ceil_div(ckpt_every, size) * p->loop_seconds
                                       : NAN;
    p->wall_seconds = method == TPU_SWEEP_SIMULATED ? m->wall_s : 0;
}

/* Loop size `size` continued from the simulated sizes a (smaller) and b (larger, below size):
 * device time, infeed wait and examples grow by their slope per step between a and b. */
static void extend(const struct measured *a, const struct measured *b, uint64_t size,
                   struct measured *out)
{
    const double span = (double)(b->size - a->size), more = (double)(size - b->size);
    *out = *b;
    out->size = size;
    out->device_s = b->device_s + more * (b->device_s - a->device_s) / span;
    out->stall_s = b->stall_s + more * (b->stall_s - a->stall_s) / span;
    if (out->stall_s < 0)
        out->stall_s = 0;
    if (out->stall_s > out->device_s)
        out->stall_s = out->device_s;
    out->wait_s = b->wait_s + more * (b->wait_s - a->wait_s) / span;
    if (out->wait_s < out->stall_s)
        out->wait_s = out->stall_s;
    if (out->wait_s > out->device_s)
        out->wait_s = out->device_s;
    out->examples = b->examples + more * (b->examples - a->examples) / span;
    out->wall_s = 0;
}

static int check_settings(const struct tpu_sweep_settings *s, struct tpu_diag *d)
{
    if (!s->model || !s->input)
        return tpu__fail(d, TPU_EINVAL, "a sweep needs a model and a training input (both "
                         "NULL-free)");
    if (s->n_sizes < 1 || s->n_sizes > TPU_SWEEP_MAX_SIZES || !s->sizes)
        return tpu__fail(d, TPU_EINVAL, "a sweep takes 1 to %d loop sizes, not %zu",
                         TPU_SWEEP_MAX_SIZES, s->n_sizes);
    for (size_t i = 0; i < s->n_sizes; i++) {
        if (s->sizes[i] < 1 || s->sizes[i] > TPU_SWEEP_MAX_LOOP_SIZE)
            return tpu__fail(d, TPU_ERANGE, "loop size %llu is out of range; give 1 to %llu "
                             "steps per loop", (unsigned long long)s->sizes[i],
                             (unsigned long long)TPU_SWEEP_MAX_LOOP_SIZE);
        if (i && s->sizes[i] <= s->sizes[i - 1])
            return tpu__fail(d, TPU_EINVAL, "loop sizes must be strictly ascending: %llu "
                             "follows %llu; sort them and drop repeats",
                             (unsigned long long)s->sizes[i],
                             (unsigned long long)s->sizes[i - 1]);
    }
    const uint64_t f = s->full_steps;
    if (f && (f < 2 || f > (1u << 20) || (f & (f - 1))))
        return tpu__fail(d, TPU_EINVAL, "full_steps %llu is not a power of two from 2 to "
                         "1048576 (or 0: simulate every loop size in full); e.g. 32",
                         (unsigned long long)f);
    if (s->measured_loops < 1 || s->measured_loops > 100)
        return tpu__fail(d, TPU_EINVAL, "measured_loops %u is not from 1 to 100; e.g. 2",
                         s->measured_loops);
    return 0;
}

int tpu_sweep_run(const struct tpu_sweep_settings *s, struct tpu_sweep_point *points,
                  struct tpu_diag *d)
{
    int rc = check_settings(s, d);
    if (rc)
        return rc;
    const uint64_t full = s->full_steps ? s->full_steps : UINT64_MAX;
    struct measured anchor[2]; /* full / 2 and full, once a size above full needs them */
    bool have_anchor[2] = {false, false};
    for (size_t i = 0; i < s->n_sizes; i++) {
        const uint64_t size = s->sizes[i];
        struct measured m;
        if (size <= full) {
            if ((rc = simulate(s, size, &m, d)))
                return rc;
            make_point(s, &m, TPU_SWEEP_SIMULATED, &points[i]);
            for (int k = 0; k < 2; k++)
                if (size == full >> (1 - k)) {
                    anchor[k] = m;
                    have_anchor[k] = true;
                }
            continue;
        }
        for (int k = 0; k < 2; k++)
            if (!have_anchor[k]) {
                if ((rc = simulate(s, full >> (1 - k), &anchor[k], d)))
                    return rc;
                have_anchor[k] = true;
            }
        extend(&anchor[0], &anchor[1], size, &m);
        make_point(s, &m, TPU_SWEEP_EXTENDED, &points[i]);
    }
    return 0;
}

size_t tpu_sweep_best(const struct tpu_sweep_point *points, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (points[i].examples_per_s > points[best].examples_per_s)
            best = i;
    return best;
}

size_t tpu_sweep_knee(const struct tpu_sweep_point *points, size_t n, double tolerance)
{
    const double enough = (1 - tolerance) * points[tpu_sweep_best(points, n)].examples_per_s;
    size_t knee = tpu_sweep_best(points, n);
    for (size_t i = 0; i < n; i++)
        if (points[i].examples_per_s >= enough &&
            points[i].iterations_per_loop < points[knee].iterations_per_loop)
            knee = i;
    return knee;
}
