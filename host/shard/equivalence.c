/* The equivalence check (include/tpusim/equivalence.h): a sharded training run against the
 * same model on one core, step by step.
 *
 * Two devices, two estimators, one input. Each step the input function is read once with the
 * global batch; the one-core run takes that batch whole and the sharded run's input_fn calls
 * take their rows of it (a call for shard s of `batch` rows takes rows [s * batch, (s + 1) *
 * batch): replica s in PER_SHARD_V1 and PER_HOST_V2, host s in PER_HOST_V1, the replicas
 * taking the global batch in order, as the dropout masks and the one-core batch assume).
 * Both train one step per call; then every param of both is read back and compared, and the
 * loss of the global batch (the runtime's global_loss: every replica's share, summed). In
 * lockstep (the default) the sharded run then takes the one-core run's params, so that each
 * step starts from the same state.
 *
 * The bound of data parallelism, and why. With R replicas of B = G / R rows, every value of
 * the forward and backward pass of one example is computed by the same operations in the same
 * order on both runs: a row's matmuls, activations, softmax and its dropout mask (keyed by
 * the example's index in the global batch) do not depend on the other rows. What differs is
 * the order of the sums over the batch, and nothing else:
 *   - a weight's gradient, the sum over the G examples of x^T dy: one core sums the G products
 *     in the matrix unit's order (down each column within a tile of tile_rows examples, tile
 *     by tile into the accumulator); a replica sums its B, and the all-reduce adds the R
 *     partial sums in replica order ((g0 + g1) + g2) + ... (sim/chip/chip_exec.c);
 *   - a bias gradient and the loss, sums over the rows on the vector unit, cut the same way.
 * Each is a recursive sum of the same G terms (a product of bf16 inputs is exact in fp32), so
 * each order is within gamma(G - 1) * sum|terms| of the exact sum, gamma(n) = n u / (1 - n u),
 * u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms, section 4.2), and the two
 * within 2 gamma(G - 1) * sum|terms| of each other. The loss terms (cross-entropy, a squared
 * error) are never negative, so sum|terms| = |loss|: with the scaling by 1 / G and the sum of
 * the replicas' shares (in double, rounded once) a step's loss is within a relative
 * 2 gamma(G + 1) of the one-core loss when both start from the same params. That is a
 * theorem, and lockstep makes it hold at every step.
 * The params move by the optimizer's update of those gradients, whose terms may cancel
 * (sum|terms| much larger than the sum), and Adam divides a gradient element g by its own
 * root mean square: an element whose two sums differ by dg moves by up to
 * learning_rate * |dg| / (|g| + epsilon) more, most where g is about epsilon. So the params'
 * bound is a budget, not a theorem: 2^-10 of the param's largest value, about 2^14 times the
 * rounding of one fp32 operation and 200 times what the tests measure (Fashion-MNIST, the MLP
 * and the CNN, 1 to 8 replicas: at most 5e-6), and far below what a sharding error makes (a
 * row fed twice, a gradient left out of the all-reduce, a wrong dropout mask move the loss and
 * the weights by percent).
 * Free-running, the runs start each step from params that differ by that rounding; with
 * one-pass bf16 matmuls a difference sooner or later flips the bf16 rounding of a weight or
 * the sign of a ReLU input, and from that step on the runs drift apart by more than rounding
 * (measured: the MLP at batch 128 on 8 replicas, step 12) with no error in the sharding; the
 * later steps' loss is budgeted at 2^-12 there, and the lockstep check is the proof.
 * With one replica of one core the two runs are the same operations: bit for bit.
 *
 * Model parallelism (P cores a replica, host/models/net_lower_part.c): forward values that no
 * sum over the cut crosses are bit for bit the one-core values; what adds partial sums (a
 * dense layer split by rows, so the logits and the loss; the kernel and bias gradients of a
 * layer on rows cut by spatial partitioning) adds the same terms in another order. The loss
 * terms themselves then differ by rounding, so the loss is held to the partitioned lowering's
 * bound, TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL (5e-5 relative, equivalence.h; the bound
 * tests/test_net_partition.c holds the lowering to, over 100 times the 3e-7 it measures), and the params to the same 2^-10 budget as data parallelism: with Adam the
 * first step moves a weight whose gradient is near epsilon by up to learning_rate times its
 * gradient's relative rounding over epsilon (measured: 7e-5 of the MLP's first bias on 2
 * replicas of 2 cores, more than the 5e-5 the lowering's SGD test allows).
 *
 * What the bound assumes: a forward pass that computes each example on its own (dense,
 * convolution, pooling, dropout, activations: the MLP and the CNN of issue #12). Batch norm
 * reads the batch's statistics. Per replica it is another model than one core on the global
 * batch, and the check shows it (percent). Cross-replica, the statistics carry the sums'
 * rounding into every example's forward values, and one-pass bf16 matmuls may then round a
 * value to another bf16 within the step: such a model can fall outside the bound with no
 * sharding error (with fp32 matmuls, 6 passes, it stays at rounding: 2e-5 of the params'
 * largest values in the tests). And a param whose exact gradient is 0 (a bias before batch
 * norm) moves under Adam by the sign of its rounding alone: give such a layer no bias. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/equivalence.h"
#include "util.h"

#define U32_ROUNDING (1.0 / 16777216.0) /* u = 2^-24, fp32's unit roundoff */

static double gamma_n(double n)
{
    return n * U32_ROUNDING / (1.0 - n * U32_ROUNDING);
}


void tpu_equivalence_bound_of(uint32_t n_replicas, uint32_t cores_per_replica,
                              uint32_t global_batch, bool free_running,
                              struct tpu_equivalence_bound *out)
{
    memset(out, 0, sizeof *out);
    const uint32_t R = n_replicas ? n_replicas : 1, P = cores_per_replica ? cores_per_replica : 1;
    if (R == 1 && P == 1) {
        out->exact = true;
        snprintf(out->why, sizeof out->why, "one replica of one core: the same operations in "
                 "the same order as the one-core run, so bit for bit");
        return;
    }
    const double dp_loss = 2.0 * gamma_n((double)global_batch + 1);
    out->loss_rel = P > 1 && TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL > dp_loss ? TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL : dp_loss;
    out->loss_rel_later = free_running ? 1.0 / 4096 : out->loss_rel;
    out->param_rel = 1.0 / 1024;
    const uint32_t B = global_batch / R;
    int n;
    if (P == 1)
        n = snprintf(out->why, sizeof out->why,
                     "data parallelism over %u replicas: only the order of the sums over the "
                     "batch differs (a replica sums its %u examples and the all-reduce adds the "
                     "%u partial sums in replica order; one core sums all %u), so a step from "
                     "the same params gives a loss within 2 gamma(%u) = %.3g (a sum of "
                     "non-negative terms in two orders) and params within rounding carried "
                     "through the optimizer, budgeted at 2^-10 of each param's largest value",
                     R, B, R, global_batch, global_batch + 1, out->loss_rel);
    else
        n = snprintf(out->why, sizeof out->why,
                     "model parallelism over %u cores a replica (%u replica%s): besides the "
                     "sums over the batch, every sum that crosses the cut of a replica's cores "
                     "(a dense layer split by rows and so the logits and the loss, the "
                     "gradients of layers on cut rows: partial sums, then an all-reduce within "
                     "the replica) adds the same terms in another order, within fp32 rounding "
                     "of the one-core value; the loss within %.3g (the partitioned lowering's "
                     "bound, which tests/test_net_partition.c holds it to), the params within "
                     "2^-10 of their "
                     "largest value (rounding carried through the optimizer)",
                     P, R, R == 1 ? "" : "s", out->loss_rel);
    if (free_running && n > 0 && (size_t)n < sizeof out->why)
        snprintf(out->why + n, sizeof out->why - (size_t)n, "; free-running, the later "
                 "steps' loss is budgeted at 2^-12 (with one-pass bf16 matmuls a rounding "
                 "difference flips a bf16 rounding or a ReLU sooner or later, and the runs "
                 "then drift apart with no sharding error: the lockstep check is the proof)");
}

int tpu_model_splits_over_cores(const struct tpu_model *m, const struct tpu_run_config *run,
                                uint32_t n_replicas, uint32_t cores_per_replica, bool *splits,
                                struct tpu_diag *d)
{
    *splits = true;
    if (cores_per_replica <= 1)
        return 0;
    for (uint32_t i = 0; i < run->n_input_partition_dims && i < 2; i++) {
        uint64_t product = 1;
        for (uint32_t a = 0; a < run->input_partition_dims[i].rank; a++)
            product *= run->input_partition_dims[i].dims[a];
        if (product > 1)
            return 0;
    }
    const uint32_t R = n_replicas ? n_replicas : 1;
    const uint32_t G = run->train_batch_size >= R ? run->train_batch_size : R;
    struct tpu_build_shape sh = {.batch_per_replica = G / R, .global_batch = G, .n_replicas = R,
                                 .cores_per_replica = cores_per_replica,
                                 .n_dims = run->n_input_partition_dims};
    memcpy(sh.dims, run->input_partition_dims, sizeof sh.dims);
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    int rc = m->build(m->ctx, TPU_MODE_TRAIN, &sh, &mp, d);
    if (rc)
        return rc;
    *splits = false;
    for (uint32_t i = 0; i < mp.n_params; i++)
        if (mp.param_split[i] != TPU_SPLIT_NONE)
            *splits = true;
    tpu_program_destroy(&mp.prog);
    return 0;
}

/* ---- the input both runs read ------------------------------------------------------------ */

/* The current step's global batch, read once from the caller's input, served whole to the
 * one-core run and by rows to the sharded run's calls (which may come from several infeed
 * threads at once: `lock` guards served and the error). */
struct feed {
    const struct tpu_input *user;
    uint32_t global_batch, n_tensors;
    size_t row_bytes[4];
    void *batch[4];          /* [global_batch][row] each */
    bool ended;              /* the input ended before a full global batch */
    pthread_mutex_t lock;
    uint64_t served;         /* rows served since the step's batch was read */
    bool misuse;             /* a call outside the batch (a bug: the message says so) */
    char misuse_msg[200];
};

static int feed_start(void *ctx, enum tpu_mode mode, uint64_t global_step,
                      uint32_t global_batch, struct tpu_diag *d)
{
    (void)ctx, (void)mode, (void)global_step, (void)global_batch, (void)d;
    return 0; /* the check reads the caller's input itself, once per step */
}

static int feed_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                     void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct feed *f = ctx;
    (void)mode;
    if (f->ended)
        return 0;
    const uint64_t row0 = (uint64_t)shard * batch;
    if (row0 + batch > f->global_batch) {
        pthread_mutex_lock(&f->lock);
        f->misuse = true;
        snprintf(f->misuse_msg, sizeof f->misuse_msg, "an input_fn call for shard %u of %u "
                 "rows reaches past the global batch of %u rows", shard, batch,
                 f->global_batch);
        pthread_mutex_unlock(&f->lock);
        return tpu__fail(d, TPU_EINVAL, "equivalence check: %s", f->misuse_msg);
    }
    for (uint32_t t = 0; t < f->n_tensors; t++)
        memcpy(tensors[t], (const char *)f->batch[t] + row0 * f->row_bytes[t],
               (size_t)batch * f->row_bytes[t]);
    *n_real = batch;
    pthread_mutex_lock(&f->lock);
    f->served += batch;
    pthread_mutex_unlock(&f->lock);
    return 1;
}

/* Reads the next global batch from the caller's input; f->ended when there is none. */
static int feed_read(struct feed *f, struct tpu_diag *d)
{
    uint32_t n_real = 0;
    int rc = f->user->next(f->user->ctx, TPU_MODE_TRAIN, 0, f->global_batch, f->batch, &n_real,
                           d);
    if (rc < 0)
        return rc;
    f->ended = rc == 0 || n_real < f->global_batch;
    f->served = 0;
    return 0;
}

/* ---- the check ------------------------------------------------------------------------------ */

/* What the one-core program says of the model: its infeed tensors and its params. */
struct model_shape {
    uint32_t n_infeed;
    size_t row_bytes[4];
    uint32_t n_params;
    char (*names)[TPU_PROGRAM_NAME_MAX + 1];
    uint64_t *counts;        /* elements of each param */
    uint64_t max_count, total;
};

static int model_shape_of(const struct tpu_model *m, uint32_t global_batch,
                          struct model_shape *out, struct tpu_diag *d)
{
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    const struct tpu_build_shape one = {.batch_per_replica = global_batch,
                                        .global_batch = global_batch, .n_replicas = 1,
                                        .cores_per_replica = 1};
    int rc = m->build(m->ctx, TPU_MODE_TRAIN, &one, &mp, d);
    if (rc)
        return rc;
    out->n_infeed = mp.n_infeed;
    for (uint32_t t = 0; t < mp.n_infeed && t < 4; t++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp.prog, mp.infeed[t]);
        out->row_bytes[t] = (size_t)(tpu_buffer_bytes(b) / (b->rows ? b->rows : 1));
    }
    out->n_params = mp.n_params;
    out->names = calloc(mp.n_params ? mp.n_params : 1, sizeof *out->names);
    out->counts = calloc(mp.n_params ? mp.n_params : 1, sizeof *out->counts);
    if (!out->names || !out->counts) {
        tpu_program_destroy(&mp.prog);
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < mp.n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp.prog, mp.params[i]);
        snprintf(out->names[i], sizeof out->names[i], "%s", b->name);
        out->counts[i] = (uint64_t)b->rows * b->cols;
        out->total += out->counts[i];
        if (out->counts[i] > out->max_count)
            out->max_count = out->counts[i];
    }
    tpu_program_destroy(&mp.prog);
    return 0;
}

static void model_shape_free(struct model_shape *m)
{
    free(m->names);
    free(m->counts);
    m->names = NULL;
    m->counts = NULL;
}

/* The settings' rules, before any work. */
static int check_settings(const struct tpu_equivalence_settings *s, struct tpu_diag *d)
{
    if (!s->model.build || !s->model.init_param)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: the model has no build or "
                         "init_param function");
    if (!s->input || !s->input->next)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: no training input (give an input "
                         "function)");
    if (s->steps < 1)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: steps is 0; check at least 1 step");
    if (s->device.timing_only)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: a timing-only device computes no "
                         "values to compare; check on a device with values (no timing_only)");
    if (s->run.model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "equivalence check: model_dir '%s' is set, but both "
                         "runs start from the seed's initial params and write no checkpoints "
                         "(a checkpoint there would be resumed by one run only); leave "
                         "model_dir empty", s->run.model_dir);
    if (s->run.per_host_input_for_training == TPU_BROADCAST)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: per_host_input_for_training "
                         "BROADCAST gives every replica the whole global batch, so the sharded "
                         "run trains on each example once per replica and is not comparable "
                         "with one core on the global batch; check with PER_HOST_V2 (or "
                         "PER_HOST_V1, PER_SHARD_V1)");
    if (!s->run.train_batch_size)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: train_batch_size is not set; give "
                         "the global batch size");
    return 0;
}

/* Both runs after one step: their loss and every param, compared into st. */
static int compare_step(struct tpu_estimator *sharded, struct tpu_estimator *single,
                        uint32_t n_replicas, const struct model_shape *ms, bool lockstep,
                        float *a, float *b,
                        struct tpu_equivalence_step *st, struct tpu_diag *d)
{
    const struct tpu_loop_info *ls = tpu_estimator_last_info(sharded);
    const struct tpu_loop_info *l1 = tpu_estimator_last_info(single);
    st->loss_sharded = ls->global_loss;
    st->loss_single = l1->global_loss;
    st->loss_abs = fabs((double)st->loss_sharded - (double)st->loss_single);
    st->loss_rel = st->loss_abs == 0 ? 0 : st->loss_abs / fabs((double)st->loss_single);
    if (!isfinite(st->loss_rel))
        st->loss_rel = INFINITY;
    st->step_seconds_sharded = ls->device_seconds;
    st->step_seconds_single = l1->device_seconds;
    for (uint32_t i = 0; i < ms->n_params; i++) {
        const size_t bytes = ms->counts[i] * sizeof(float);
        int rc = tpu_estimator_read_param(single, ms->names[i], b, bytes, d);
        if (rc)
            return rc;
        double big = 0, worst = 0;
        uint64_t at = 0;
        uint32_t at_replica = 0;
        float at_value = 0;
        for (uint64_t e = 0; e < ms->counts[i]; e++) {
            const double mag = fabs((double)b[e]);
            big = mag > big ? mag : big;
        }
        /* every replica's copy: a replica that drifted from the others is a sharding error
         * too (its share of the next step's gradient comes from other params) */
        for (uint32_t rep = 0; rep < n_replicas; rep++) {
            if ((rc = tpu_estimator_read_param_replica(sharded, ms->names[i], rep, a, bytes, d)))
                return rc;
            for (uint64_t e = 0; e < ms->counts[i]; e++) {
                const double diff = fabs((double)a[e] - (double)b[e]);
                /* a NaN on one side is the largest difference there is */
                if (diff > worst || (isnan(diff) && !isnan(worst))) {
                    worst = isnan(diff) ? INFINITY : diff;
                    at = e;
                    at_replica = rep;
                    at_value = a[e];
                }
            }
        }
        /* lockstep: the sharded run goes on from the one-core run's value */
        if (lockstep && worst != 0 &&
            (rc = tpu_estimator_write_param(sharded, ms->names[i], b, bytes, d)))
            return rc;
        const double rel = worst == 0 ? 0 : big > 0 ? worst / big : INFINITY;
        if (worst > st->param_abs)
            st->param_abs = worst;
        if (rel > st->param_rel || (rel > 0 && !st->worst_param[0])) {
            st->param_rel = rel;
            snprintf(st->worst_param, sizeof st->worst_param, "%s", ms->names[i]);
            st->worst_index = at;
            st->worst_replica = at_replica;
            st->worst_sharded = at_value;
            st->worst_single = b[at];
        }
    }
    return 0;
}

/* Opens both devices and estimators. */
struct pair {
    struct tpu_device *dev[2];     /* [0] sharded, [1] one core */
    struct tpu_estimator *est[2];
};

static void pair_close(struct pair *p)
{
    for (int k = 0; k < 2; k++) {
        tpu_estimator_destroy(&p->est[k]);
        tpu_device_close(&p->dev[k]);
    }
}

static int pair_open(const struct tpu_equivalence_settings *s, struct pair *p,
                     struct tpu_diag *d)
{
    struct tpu_device_settings one = s->device;
    one.chip.cores_per_chip = 1;
    one.n_chips = 1;
    one.cores_per_replica = 1;
    one.trace = false;
    one.op_stats = false;
    struct tpu_run_config rc[2] = {s->run, s->run};
    for (int k = 0; k < 2; k++) {
        rc[k].iterations_per_loop = 1; /* a step per launch: both are read after each */
        rc[k].iterations_per_loop_s = 0;
        rc[k].iterations_per_loop_auto = false;
        rc[k].host_call_every_n_steps = 0;
        rc[k].log_step_count_steps = 0;
        rc[k].save_checkpoints_steps = 0;
        rc[k].model_dir[0] = '\0';
        rc[k].strict_input = false;
    }
    rc[1].num_shards = 0;
    rc[1].num_cores_per_replica = 1;
    rc[1].num_hosts = 1;
    rc[1].n_input_partition_dims = 0;
    rc[1].per_host_input_for_training = TPU_PER_HOST_V2;
    const struct tpu_device_settings *ds[2] = {&s->device, &one};
    static const char *const what[2] = {"the sharded device", "the one-core device"};
    for (int k = 0; k < 2; k++) {
        struct tpu_diag e = {0};
        int r = tpu_device_open(ds[k], &p->dev[k], &e);
        if (!r)
            r = tpu_estimator_create(p->dev[k], &rc[k], &s->model, NULL, 0, &p->est[k], &e);
        if (!r)
            r = tpu_estimator_check_mode(p->est[k], TPU_MODE_TRAIN, &e);
        if (r) {
            pair_close(p);
            return tpu__fail(d, r, "equivalence check: %s: %s", what[k], e.msg);
        }
    }
    return 0;
}

static void report_step(struct tpu_equivalence_report *r, const struct tpu_equivalence_step *st)
{
    r->steps++;
    r->steps_outside += !st->within;
    if (r->steps == 1 || st->param_rel > r->worst.param_rel)
        r->worst = *st;
    if (st->loss_rel > r->max_loss_rel)
        r->max_loss_rel = st->loss_rel;
}

/* One step of one run: trains it and checks that it took the whole global batch. */
static int train_one(struct tpu_estimator *est, struct feed *f, const struct tpu_input *in,
                     uint64_t step, const char *what, struct tpu_diag *d)
{
    struct tpu_diag e = {0};
    f->served = 0;
    int rc = tpu_estimator_train(est, in, 1, 0, &e);
    if (rc)
        return tpu__fail(d, rc, "equivalence check: %s, step %llu: %s", what,
                         (unsigned long long)step, e.msg);
    if (f->misuse)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: %s, step %llu: %s", what,
                         (unsigned long long)step, f->misuse_msg);
    if (tpu_estimator_global_step(est) != step || f->served != f->global_batch)
        return tpu__fail(d, TPU_EINVAL, "equivalence check: %s, step %llu: the run took %llu "
                         "rows of the global batch of %u and reached global step %llu; a run "
                         "must take each row once per step", what, (unsigned long long)step,
                         (unsigned long long)f->served, f->global_batch,
                         (unsigned long long)tpu_estimator_global_step(est));
    return 0;
}

int tpu_equivalence_check(const struct tpu_equivalence_settings *s,
                          struct tpu_equivalence_report *out, struct tpu_diag *d)
{
    memset(out, 0, sizeof *out);
    int rc = check_settings(s, d);
    if (rc)
        return rc;
    const uint32_t G = s->run.train_batch_size;
    struct pair p;
    memset(&p, 0, sizeof p);
    if ((rc = pair_open(s, &p, d)))
        return rc;
    out->n_cores = tpu_device_n_cores(p.dev[0]);
    out->n_replicas = tpu_device_n_replicas(p.dev[0]);
    out->cores_per_replica = out->n_cores / out->n_replicas;
    bool splits = true;
    if ((rc = tpu_model_splits_over_cores(&s->model, &s->run, out->n_replicas,
                                          out->cores_per_replica, &splits, d))) {
        pair_close(&p);
        return rc;
    }
    /* nothing split: a replica's cores each run the whole model, and only the replicas'
     * sums over the batch differ from one core's (data parallelism) */
    out->cores_redundant = !splits;
    tpu_equivalence_bound_of(out->n_replicas, splits ? out->cores_per_replica : 1, G,
                             s->free_running, &out->bound);
    if (!splits) {
        char why[sizeof out->bound.why];
        memcpy(why, out->bound.why, sizeof why);
        const int n = snprintf(out->bound.why, sizeof out->bound.why, "the lowering splits "
                               "nothing over a replica's %u cores (no param is cut, no input "
                               "partition dims): each core runs the whole model, so ",
                               out->cores_per_replica);
        if (n > 0 && (size_t)n < sizeof out->bound.why)
            memcpy(out->bound.why + n, why, strnlen(why, sizeof why - (size_t)n - 1) + 1);
        out->bound.why[sizeof out->bound.why - 1] = '\0';
    }

    struct model_shape ms;
    memset(&ms, 0, sizeof ms);
    struct feed f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.lock, NULL);
    float *a = NULL, *b = NULL;
    if ((rc = model_shape_of(&s->model, G, &ms, d)))
        goto done;
    out->n_params = ms.n_params;
    out->n_param_values = ms.total;
    f.user = s->input;
    f.global_batch = G;
    f.n_tensors = ms.n_infeed;
    for (uint32_t t = 0; t < ms.n_infeed && t < 4; t++) {
        f.row_bytes[t] = ms.row_bytes[t];
        if (!(f.batch[t] = calloc(G, ms.row_bytes[t] ? ms.row_bytes[t] : 1))) {
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory for the global batch");
            goto done;
        }
    }
    a = malloc((ms.max_count ? ms.max_count : 1) * sizeof *a);
    b = malloc((ms.max_count ? ms.max_count : 1) * sizeof *b);
    if (!a || !b) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory for the params");
        goto done;
    }
    const struct tpu_input in = {.ctx = &f, .next = feed_next, .start = feed_start};
    if (s->input->start && (rc = s->input->start(s->input->ctx, TPU_MODE_TRAIN, 0, G, d)))
        goto done;
    for (uint64_t step = 1; step <= s->steps; step++) {
        if ((rc = feed_read(&f, d)))
            goto done;
        if (f.ended) {
            rc = tpu__fail(d, TPU_ERANGE, "equivalence check: the training input ended after "
                           "%llu full global batches of %u, before the %llu steps asked; give "
                           "fewer steps or a longer input", (unsigned long long)step - 1, G,
                           (unsigned long long)s->steps);
            goto done;
        }
        if ((rc = train_one(p.est[1], &f, &in, step, "the one-core run", d)) ||
            (rc = train_one(p.est[0], &f, &in, step, "the sharded run", d)))
            goto done;
        struct tpu_equivalence_step st;
        memset(&st, 0, sizeof st);
        st.step = step;
        if ((rc = compare_step(p.est[0], p.est[1], out->n_replicas, &ms, !s->free_running, a,
                                b, &st, d)))
            goto done;
        const double loss_bound = step == 1 ? out->bound.loss_rel : out->bound.loss_rel_later;
        st.within = st.loss_rel <= loss_bound && st.param_rel <= out->bound.param_rel;
        report_step(out, &st);
        if (s->on_step && (rc = s->on_step(s->ctx, out, &st, d)))
            goto done;
    }
done:
    free(a);
    free(b);
    for (uint32_t t = 0; t < 4; t++)
        free(f.batch[t]);
    pthread_mutex_destroy(&f.lock);
    model_shape_free(&ms);
    pair_close(&p);
    return rc;
}
