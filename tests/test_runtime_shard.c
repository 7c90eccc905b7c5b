/* The runtime's sharding: several simulated hosts in one process, each with its own infeed
 * thread and input clock; the input function called per host, per replica, per core or once
 * on host 0, with TPUEstimator's batches; BROADCAST and SLICED; partitioned infeed (each
 * logical core its slice, padded); and the rules' errors before any work.
 *
 * Two models: the MLP of models.h, and an "echo" model made here whose program adds every
 * features tensor it dequeues into a param `seen` on each core (and outfeeds its input in
 * prediction), so the test reads back exactly what each core received. Runs on the tiny chip
 * (1 chip per host, 2 cores per chip). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"
#include "tpusim/shard.h"

/* ---- a recording input function ------------------------------------------------------------ */

#define MAX_CALLS 512

struct call_rec {
    pthread_t thread;
    enum tpu_mode mode;
    uint32_t shard, batch;
};

/* Fills x [batch][features] with value = example index * 1000 + feature (example index: the
 * position in the stream) and labels [batch][1] with index % classes. Training is endless;
 * evaluation and prediction end after `n_examples`. No lock: the runtime makes one call at a
 * time (ThreadSanitizer checks it does). */
struct rec_input {
    struct tpu_input input;
    uint32_t features, classes;
    uint64_t pos, n_examples;
    struct call_rec calls[MAX_CALLS];
    uint32_t n;
    bool no_labels_in_predict;
};

static int rec_start(void *ctx, enum tpu_mode mode, uint64_t global_step, uint32_t global_batch,
                     struct tpu_diag *d)
{
    struct rec_input *r = ctx;
    (void)d;
    r->pos = mode == TPU_MODE_TRAIN ? global_step * global_batch : 0;
    return 0;
}

static int rec_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                    void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct rec_input *r = ctx;
    (void)d;
    if (r->n < MAX_CALLS)
        r->calls[r->n++] = (struct call_rec){pthread_self(), mode, shard, batch};
    uint32_t rows = batch;
    if (mode != TPU_MODE_TRAIN) {
        if (r->pos >= r->n_examples)
            return 0;
        if (r->n_examples - r->pos < rows)
            rows = (uint32_t)(r->n_examples - r->pos);
    }
    float *x = tensors[0];
    int32_t *y = mode == TPU_MODE_PREDICT ? NULL : tensors[1];
    for (uint32_t i = 0; i < rows; i++) {
        for (uint32_t f = 0; f < r->features; f++)
            x[(size_t)i * r->features + f] = (float)((r->pos + i) * 1000 + f);
        if (y)
            y[i] = (int32_t)((r->pos + i) % r->classes);
    }
    r->pos += rows;
    *n_real = rows;
    return 1;
}

static void rec_init(struct rec_input *r, uint32_t features, uint32_t classes)
{
    memset(r, 0, sizeof *r);
    r->features = features;
    r->classes = classes;
    r->n_examples = UINT64_MAX;
    r->input = (struct tpu_input){.ctx = r, .next = rec_next, .start = rec_start};
}

/* ---- the echo model ------------------------------------------------------------------------- */

/* features [h, w, c] per example, labels [1]; the program of every mode: dequeue x (the
 * core's part of the features, as the partition dims cut it) and the labels, add x into the
 * param `seen`, outfeed a zero loss (train), zero sums (eval), or x itself (predict). */
struct echo {
    uint32_t h, w, c;
    struct tpu_build_shape last;  /* what the last build was given */
    uint32_t seen_rows, seen_cols, seen_id;
};

/* ceil(n / p) (TPU infeed's largest part), n when p is 0 or 1 */
static uint64_t part(uint64_t n, uint32_t p)
{
    return p <= 1 ? n : n / p + (n % p != 0);
}

static int echo_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                      struct tpu_model_program *out, struct tpu_diag *d)
{
    struct echo *m = ctx;
    m->last = *shape;
    const uint32_t B = shape->batch_per_replica;
    uint64_t dims[4] = {B, m->h, m->w, m->c};
    const struct tpu_partition_dims *pd = shape->n_dims ? &shape->dims[0] : NULL;
    uint64_t product = 1;
    for (uint32_t i = 0; pd && i < pd->rank; i++)
        product *= pd->dims[i];
    if (pd && pd->rank == 4 && product > 1)
        for (int i = 0; i < 4; i++)
            dims[i] = part(dims[i], pd->dims[i]);
    /* dims of product 1: only logical core 0 dequeues the tensor (the infeed's core0 flag;
     * the others' x is zeros) */
    const bool x_core0 = pd && pd->rank && product == 1;
    uint64_t lproduct = 1;
    const struct tpu_partition_dims *ld = shape->n_dims > 1 ? &shape->dims[1] : NULL;
    for (uint32_t i = 0; ld && i < ld->rank; i++)
        lproduct *= ld->dims[i];
    const bool labels_core0 = ld && ld->rank && lproduct == 1;
    m->seen_rows = (uint32_t)(dims[0] * dims[1]);
    m->seen_cols = (uint32_t)(dims[2] * dims[3]);
    char labels[64] = "";
    if (mode != TPU_MODE_PREDICT)
        snprintf(labels, sizeof labels, "temp labels: int32[%u, 1]\n", B);
    char text[2048];
    int n = snprintf(text, sizeof text,
                     "program echo\nvar iterations\nvar step\n"
                     "temp x: f32[%u, %u]\nparam seen: f32[%u, %u]\n"
                     "param loss: f32[1, 1]\nparam counts: f32[1, 2]\n%s"
                     "loop iterations {\n  x = infeed%s\n%s  seen = add seen, x\n%s}\n",
                     m->seen_rows, m->seen_cols, m->seen_rows, m->seen_cols, labels,
                     x_core0 ? " core0" : "",
                     mode == TPU_MODE_PREDICT ? ""
                     : labels_core0           ? "  labels = infeed core0\n"
                                              : "  labels = infeed\n",
                     mode == TPU_MODE_TRAIN  ? "  var_add step 1\n  outfeed loss\n"
                     : mode == TPU_MODE_EVAL ? "  outfeed loss\n  outfeed counts\n"
                                             : "  outfeed x\n");
    assert_true(n > 0 && (size_t)n < sizeof text);
    struct tpu_program *p = NULL;
    int rc = tpu_program_parse(text, "echo", &p, d);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->prog = p;
    assert_int_equal(tpu_program_find_var(p, "iterations", &out->var_iterations), 0);
    assert_int_equal(tpu_program_find_var(p, "step", &out->var_step), 0);
    uint32_t id;
    assert_int_equal(tpu_program_find_buffer(p, "x", &id), 0);
    out->infeed[out->n_infeed++] = id;
    if (mode != TPU_MODE_PREDICT) {
        assert_int_equal(tpu_program_find_buffer(p, "labels", &id), 0);
        out->infeed[out->n_infeed++] = id;
    }
    assert_int_equal(tpu_program_find_buffer(p, "loss", &id), 0);
    if (mode == TPU_MODE_PREDICT) {
        assert_int_equal(tpu_program_find_buffer(p, "x", &id), 0);
        out->outfeed[out->n_outfeed++] = id;
    } else {
        out->outfeed[out->n_outfeed++] = id;
    }
    if (mode == TPU_MODE_EVAL) {
        assert_int_equal(tpu_program_find_buffer(p, "counts", &id), 0);
        out->outfeed[out->n_outfeed++] = id;
    }
    const char *params[] = {"seen", "loss", "counts"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tpu_program_find_buffer(p, params[i], &id), 0);
        out->params[out->n_params++] = id;
    }
    assert_int_equal(tpu_program_find_buffer(p, "seen", &m->seen_id), 0);
    out->no_accuracy = true;
    return 0;
}

static void echo_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                      uint64_t seed)
{
    (void)ctx;
    (void)name;
    (void)seed;
    memset(data, 0, (size_t)rows * cols * sizeof *data);
}

static int echo_shapes(void *ctx, enum tpu_mode mode, bool weighted, uint32_t *n,
                       struct tpu_infeed_shape out[4], struct tpu_diag *d)
{
    struct echo *m = ctx;
    (void)d;
    (void)weighted; /* echo_build builds no weighted program */
    out[0] = (struct tpu_infeed_shape){.name = "features", .rank = 3,
                                       .dims = {m->h, m->w, m->c}};
    out[1] = (struct tpu_infeed_shape){.name = "labels", .rank = 1, .dims = {1}};
    *n = mode == TPU_MODE_PREDICT ? 1 : 2;
    return 0;
}

static void echo_model(struct tpu_model *model, struct echo *m, uint32_t h, uint32_t w,
                       uint32_t c)
{
    memset(m, 0, sizeof *m);
    m->h = h;
    m->w = w;
    m->c = c;
    *model = (struct tpu_model){.ctx = m, .build = echo_build, .init_param = echo_init,
                                .infeed_shapes = echo_shapes};
}

/* ---- the device and the estimator ------------------------------------------------------------ */

struct env {
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct tpu_run_config cfg;
    struct tpu_model model;
    struct tpu_mlp_spec spec;
    struct echo echo;
    uint32_t chips, cores_per_replica;
    struct rec_input in;
};

/* tiny, `chips` chips (1 per host by default), the given cores per replica, a config whose
 * batches are 16 and whose host costs are modeled */
static void env_init(struct env *e, uint32_t chips, uint32_t cpr)
{
    memset(e, 0, sizeof *e);
    e->chips = chips;
    e->cores_per_replica = cpr;
    tpu_run_config_default(&e->cfg);
    e->cfg.train_batch_size = e->cfg.eval_batch_size = e->cfg.predict_batch_size = 16;
    e->cfg.iterations_per_loop = 2;
    e->cfg.num_cores_per_replica = cpr;
    e->cfg.num_hosts = chips;
    e->cfg.seed = 5;
}

static void env_mlp(struct env *e)
{
    tpu_mlp_default_spec(&e->spec);
    e->spec.n_layers = 2;
    e->spec.sizes[0] = 6;
    e->spec.sizes[1] = 4;
    e->spec.sizes[2] = 3;
    tpu_mlp_model(&e->model, &e->spec);
    rec_init(&e->in, 6, 3);
}

static void env_echo(struct env *e, uint32_t h, uint32_t w, uint32_t c)
{
    echo_model(&e->model, &e->echo, h, w, c);
    rec_init(&e->in, h * w * c, 3);
}

static int env_open(struct env *e, struct tpu_diag *d)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = e->chips;
    s.cores_per_replica = e->cores_per_replica;
    s.n_threads = 2;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    return tpu_estimator_create(e->dev, &e->cfg, &e->model, NULL, 0, &e->est, d);
}

static void env_close(struct env *e)
{
    tpu_estimator_destroy(&e->est);
    tpu_device_close(&e->dev);
}

static void open_ok(struct env *e)
{
    struct tpu_diag d = {0};
    if (env_open(e, &d))
        fail_msg("create: %s", d.msg);
}

static void train_ok(struct env *e, uint64_t steps)
{
    struct tpu_diag d = {0};
    if (tpu_estimator_train(e->est, &e->in.input, steps, 0, &d))
        fail_msg("train: %s", d.msg);
}

/* ---- the calls of each input mode ------------------------------------------------------------ */

struct expect_call {
    uint32_t host, shard, batch;
};

/* The calls of one step as TPUEstimator makes them, worked out here from the mode's rule
 * (not from the plan): hosts of 2 cores (tiny), one replica per core (cores per replica 1). */
static uint32_t expected_calls(enum tpu_input_mode m, uint32_t hosts, uint32_t global,
                               struct expect_call *out)
{
    const uint32_t replicas = 2 * hosts;
    uint32_t n = 0;
    switch (m) {
    case TPU_PER_SHARD_V1: /* per core, on its host */
    case TPU_PER_HOST_V2:  /* per replica, on its host */
        for (uint32_t r = 0; r < replicas; r++)
            out[n++] = (struct expect_call){r / 2, r, global / replicas};
        break;
    case TPU_PER_HOST_V1: /* per host, its share */
        for (uint32_t h = 0; h < hosts; h++)
            out[n++] = (struct expect_call){h, h, global / hosts};
        break;
    case TPU_BROADCAST: /* once on host 0, the global batch */
        out[n++] = (struct expect_call){0, 0, global};
        break;
    }
    return n;
}

/* Checks the recorded calls against `steps` repetitions of the expected ones, and that each
 * host's calls come from one thread of its own (not the caller's). */
static void check_calls(const struct rec_input *in, enum tpu_mode mode,
                        const struct expect_call *ex, uint32_t n_ex, uint64_t steps,
                        uint32_t hosts)
{
    if (in->n != n_ex * steps)
        fail_msg("%u calls, expected %u x %llu", in->n, n_ex, (unsigned long long)steps);
    pthread_t host_thread[8];
    bool have[8] = {false};
    for (uint32_t i = 0; i < in->n; i++) {
        const struct expect_call *x = &ex[i % n_ex];
        const struct call_rec *c = &in->calls[i];
        if (c->mode != mode || c->shard != x->shard || c->batch != x->batch)
            fail_msg("call %u: mode %d shard %u batch %u, expected shard %u batch %u (host %u)",
                     i, (int)c->mode, c->shard, c->batch, x->shard, x->batch, x->host);
        assert_false(pthread_equal(c->thread, pthread_self()));
        if (!have[x->host]) {
            host_thread[x->host] = c->thread;
            have[x->host] = true;
        }
        assert_true(pthread_equal(c->thread, host_thread[x->host]));
    }
    for (uint32_t a = 0; a < hosts; a++)
        for (uint32_t b = a + 1; b < hosts; b++)
            if (have[a] && have[b])
                assert_false(pthread_equal(host_thread[a], host_thread[b]));
}

static void test_training_calls_per_input_mode(void **state)
{
    (void)state;
    const enum tpu_input_mode modes[] = {TPU_PER_SHARD_V1, TPU_PER_HOST_V1, TPU_PER_HOST_V2,
                                         TPU_BROADCAST};
    const uint32_t hosts[] = {1, 2, 4};
    for (size_t h = 0; h < 3; h++)
        for (size_t m = 0; m < 4; m++) {
            struct env e;
            env_init(&e, hosts[h], 1);
            env_mlp(&e);
            e.cfg.per_host_input_for_training = modes[m];
            open_ok(&e);
            train_ok(&e, 3);
            struct expect_call ex[16];
            uint32_t n = expected_calls(modes[m], hosts[h], 16, ex);
            check_calls(&e.in, TPU_MODE_TRAIN, ex, n, 3, hosts[h]);
            assert_int_equal(tpu_estimator_global_step(e.est), 3);
            env_close(&e);
        }
}

/* Evaluation: PER_HOST_V2 once per replica, BROADCAST once on host 0 (every replica all of
 * it), SLICED once on host 0 with the global batch; 40 examples in batches of 16 are 3 steps,
 * the last padded, and each example counts once. */
static void test_evaluation_calls(void **state)
{
    (void)state;
    const uint32_t hosts[] = {1, 2, 4};
    for (size_t h = 0; h < 3; h++)
        for (int mode = 0; mode < 3; mode++) {
            struct env e;
            env_init(&e, hosts[h], 1);
            env_mlp(&e);
            e.in.n_examples = 40;
            struct expect_call ex[16];
            uint32_t n;
            if (mode == 0) {
                n = expected_calls(TPU_PER_HOST_V2, hosts[h], 16, ex);
            } else if (mode == 1) {
                e.cfg.per_host_input_for_training = TPU_BROADCAST;
                n = expected_calls(TPU_BROADCAST, hosts[h], 16, ex);
            } else {
                e.cfg.eval_training_input_configuration = TPU_EVAL_SLICED;
                n = expected_calls(TPU_BROADCAST, hosts[h], 16, ex);
            }
            open_ok(&e);
            struct tpu_eval_result r;
            struct tpu_diag d = {0};
            if (tpu_estimator_evaluate(e.est, &e.in.input, 0, &r, &d))
                fail_msg("evaluate: %s", d.msg);
            /* 3 steps of calls; the input ended within the last one */
            check_calls(&e.in, TPU_MODE_EVAL, ex, n, 3, hosts[h]);
            assert_int_equal(r.steps, 3);
            assert_int_equal(r.examples, 40);
            env_close(&e);
        }
}

/* PER_HOST_V1 evaluation on several hosts is refused (TPUEstimator's rule), before any
 * call; one host is fine */
static void test_per_host_v1_evaluation_on_hosts(void **state)
{
    (void)state;
    struct env e;
    env_init(&e, 2, 1);
    env_mlp(&e);
    e.cfg.per_host_input_for_training = TPU_PER_HOST_V1;
    open_ok(&e);
    struct tpu_eval_result r;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_evaluate(e.est, &e.in.input, 0, &r, &d), TPU_EINVAL);
    if (!strstr(d.msg, "evaluation on 2 hosts is only supported with"))
        fail_msg("%s", d.msg);
    assert_int_equal(e.in.n, 0);
    env_close(&e);
}

/* ---- what each core receives ------------------------------------------------------------------- */

/* Reads core's `seen` ([rows][cols] f32). */
static void read_seen(struct env *e, uint32_t core, float *out)
{
    struct tpu_diag d = {0};
    size_t bytes = (size_t)e->echo.seen_rows * e->echo.seen_cols * sizeof(float);
    if (tpu_device_read(e->dev, core, e->echo.seen_id, out, bytes, &d))
        fail_msg("read seen of core %u: %s", core, d.msg);
}

/* BROADCAST training: one call on host 0 with the global batch, every replica all of it; a
 * global batch of 3 over 4 replicas is fine; the model is built with B = global, R = 4. */
static void test_broadcast_gives_every_replica_the_whole_batch(void **state)
{
    (void)state;
    struct env e;
    env_init(&e, 2, 1);
    env_echo(&e, 1, 2, 1);
    e.cfg.per_host_input_for_training = TPU_BROADCAST;
    e.cfg.train_batch_size = 3;
    open_ok(&e);
    train_ok(&e, 1);
    assert_int_equal(e.in.n, 1);
    assert_int_equal(e.in.calls[0].batch, 3);
    assert_int_equal(e.echo.last.batch_per_replica, 3);
    assert_int_equal(e.echo.last.global_batch, 3);
    assert_int_equal(e.echo.last.n_replicas, 4);
    float seen[6];
    for (uint32_t core = 0; core < 4; core++) {
        read_seen(&e, core, seen);
        for (uint32_t i = 0; i < 3; i++)
            for (uint32_t f = 0; f < 2; f++)
                assert_true(seen[i * 2 + f] == (float)(i * 1000 + f));
    }
    env_close(&e);
}

/* SLICED evaluation: once on host 0 with the global batch, replica r takes rows
 * [r * B, r * B + B); with 10 examples and a global batch of 8 over 4 replicas the second
 * step has 2 real rows (replica 0) and padding. */
static void test_sliced_evaluation_slices_over_replicas(void **state)
{
    (void)state;
    struct env e;
    env_init(&e, 2, 1);
    env_echo(&e, 1, 1, 1);
    e.cfg.eval_training_input_configuration = TPU_EVAL_SLICED;
    e.cfg.eval_batch_size = 8;
    e.in.n_examples = 10;
    open_ok(&e);
    struct tpu_eval_result r;
    struct tpu_diag d = {0};
    if (tpu_estimator_evaluate(e.est, &e.in.input, 0, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(e.in.n, 2);
    assert_int_equal(e.in.calls[0].batch, 8);
    /* seen sums both steps: replica r's rows of step 0 (examples 2r, 2r + 1) and of step 1
     * (examples 8 + 2r, 9 + 2r when real, padding 0 otherwise) */
    float seen[2];
    for (uint32_t core = 0; core < 4; core++) {
        read_seen(&e, core, seen);
        for (uint32_t i = 0; i < 2; i++) {
            const uint32_t a = 2 * core + i, b = 8 + 2 * core + i;
            const float want = (float)(a * 1000) + (b < 10 ? (float)(b * 1000) : 0.0f);
            if (seen[i] != want)
                fail_msg("core %u row %u: %g, expected %g", core, i, (double)seen[i],
                         (double)want);
        }
    }
    env_close(&e);
}

/* The slice [begin, end) of a per-replica features tensor [B, h, w, c] that logical core k
 * gets under dims (counts per dimension), cut as TPU infeed cuts (ceil parts first), laid
 * out in a buffer of the largest part, zeros elsewhere: computed here element by element. */
static void expected_part(const uint64_t full[4], const uint32_t dims[4], uint32_t k,
                          const float *src, float *dst, uint64_t padded[4])
{
    uint64_t begin[4], end[4];
    uint32_t rest = k;
    for (int a = 3; a >= 0; a--) {
        const uint32_t i = rest % dims[a];
        rest /= dims[a];
        const uint64_t c = part(full[a], dims[a]);
        padded[a] = c;
        begin[a] = i * c < full[a] ? i * c : full[a];
        end[a] = (i + 1) * c < full[a] ? (i + 1) * c : full[a];
    }
    for (uint64_t n = 0; n < padded[0]; n++)
        for (uint64_t y = 0; y < padded[1]; y++)
            for (uint64_t x = 0; x < padded[2]; x++)
                for (uint64_t ch = 0; ch < padded[3]; ch++) {
                    const uint64_t g[4] = {begin[0] + n, begin[1] + y, begin[2] + x,
                                           begin[3] + ch};
                    const bool in = g[0] < end[0] && g[1] < end[1] && g[2] < end[2] &&
                                    g[3] < end[3];
                    dst[((n * padded[1] + y) * padded[2] + x) * padded[3] + ch] =
                        in ? src[((g[0] * full[1] + g[1]) * full[2] + g[2]) * full[3] + g[3]]
                           : 0.0f;
                }
}

/* PER_HOST_V2 with input_partition_dims on the features: each logical core of each replica
 * holds its part of its replica's rows, padded to the largest part; uneven splits (5 rows
 * over 2 cores: 3 and 2), every dimension, and hosts 1 and 2. */
static void test_partitioned_infeed_reaches_each_core(void **state)
{
    (void)state;
    const uint32_t cases[][4] = {
        {1, 2, 1, 1}, /* rows: 5 over 2 is 3, 2 (the second padded) */
        {1, 1, 2, 1}, /* columns: 3 over 2 is 2, 1 */
        {2, 1, 1, 1}, /* the batch: 2 over 2 */
        {1, 1, 1, 2}, /* channels: 2 over 2 */
    };
    const uint32_t H = 5, W = 3, C = 2;
    for (uint32_t hosts = 1; hosts <= 2; hosts++)
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
            struct env e;
            env_init(&e, hosts, 2);
            env_echo(&e, H, W, C);
            e.cfg.train_batch_size = 2 * hosts; /* B = 2 per replica */
            e.cfg.n_input_partition_dims = 2;
            e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {0}};
            memcpy(e.cfg.input_partition_dims[0].dims, cases[t], sizeof cases[t]);
            open_ok(&e);
            train_ok(&e, 1);
            assert_int_equal(e.in.n, hosts); /* one call per replica */
            assert_int_equal(e.echo.last.cores_per_replica, 2);
            assert_int_equal(e.echo.last.n_dims, 2);
            const uint64_t full[4] = {2, H, W, C};
            float src[2 * 5 * 3 * 2], want[64], got[64];
            for (uint32_t rep = 0; rep < hosts; rep++) {
                /* replica rep's rows: examples 2 rep, 2 rep + 1 */
                for (uint32_t i = 0; i < 2; i++)
                    for (uint32_t f = 0; f < H * W * C; f++)
                        src[i * H * W * C + f] = (float)((2 * rep + i) * 1000 + f);
                for (uint32_t k = 0; k < 2; k++) {
                    uint64_t padded[4];
                    expected_part(full, cases[t], k, src, want, padded);
                    const uint64_t n = padded[0] * padded[1] * padded[2] * padded[3];
                    assert_int_equal(n, (uint64_t)e.echo.seen_rows * e.echo.seen_cols);
                    read_seen(&e, rep * 2 + k, got);
                    for (uint64_t i = 0; i < n; i++)
                        if (got[i] != want[i])
                            fail_msg("dims [%u, %u, %u, %u], replica %u, logical core %u, "
                                     "element %llu: %g, expected %g", cases[t][0], cases[t][1],
                                     cases[t][2], cases[t][3], rep, k, (unsigned long long)i,
                                     (double)got[i], (double)want[i]);
                }
            }
            env_close(&e);
        }
}

/* Dims of product 1 send a tensor to logical core 0 of each replica only: the features with
 * [1, 1, 1, 1] reach core 0 whole and core 1 sees nothing (its x is zeros); labels with
 * [1, 1] go to core 0 only while the features are cut in two. Nothing waits for a tensor
 * that never comes (the run would end in the watchdog's deadlock error). */
static void test_product_one_dims_feed_logical_core_0(void **state)
{
    (void)state;
    struct env e;
    env_init(&e, 2, 2);
    env_echo(&e, 2, 1, 1);
    e.cfg.train_batch_size = 4; /* 2 replicas of 2 */
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, 1, 1, 1}};
    open_ok(&e);
    train_ok(&e, 1);
    float seen[4];
    for (uint32_t rep = 0; rep < 2; rep++) {
        read_seen(&e, rep * 2, seen);
        for (uint32_t i = 0; i < 2; i++)
            for (uint32_t f = 0; f < 2; f++)
                assert_true(seen[i * 2 + f] == (float)((2 * rep + i) * 1000 + f));
        read_seen(&e, rep * 2 + 1, seen);
        for (uint32_t i = 0; i < 4; i++)
            assert_true(seen[i] == 0.0f);
    }
    env_close(&e);
    /* labels to core 0, features by rows: 2 rows over 2 cores */
    env_init(&e, 1, 2);
    env_echo(&e, 2, 1, 1);
    e.cfg.train_batch_size = 2;
    e.cfg.n_input_partition_dims = 2;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, 2, 1, 1}};
    e.cfg.input_partition_dims[1] = (struct tpu_partition_dims){2, {1, 1}};
    open_ok(&e);
    train_ok(&e, 3);
    /* 3 steps summed: core k holds row k of examples 2s, 2s + 1 */
    for (uint32_t k = 0; k < 2; k++) {
        read_seen(&e, k, seen);
        for (uint32_t i = 0; i < 2; i++) {
            float want = 0;
            for (uint32_t st = 0; st < 3; st++)
                want += (float)((2 * st + i) * 1000 + k);
            assert_true(seen[i] == want);
        }
    }
    env_close(&e);
}

/* Prediction on several hosts (SLICED): the outputs come back in input order, each example
 * once, whatever host read it. */
static void emit_row(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    float *out = ctx;
    assert_int_equal(cols, 2);
    out[index * 2] = row[0];
    out[index * 2 + 1] = row[1];
}

static void test_prediction_on_hosts_in_order(void **state)
{
    (void)state;
    for (int sliced = 0; sliced < 2; sliced++) {
        struct env e;
        env_init(&e, 2, 1);
        env_echo(&e, 1, 2, 1);
        if (sliced)
            e.cfg.eval_training_input_configuration = TPU_EVAL_SLICED;
        else
            e.cfg.per_host_input_for_training = TPU_BROADCAST;
        e.cfg.predict_batch_size = 8;
        e.in.n_examples = 11;
        open_ok(&e);
        float out[2 * 16];
        uint64_t n = 0;
        struct tpu_diag d = {0};
        if (tpu_estimator_predict(e.est, &e.in.input, emit_row, out, &n, &d))
            fail_msg("predict: %s", d.msg);
        assert_int_equal(n, 11);
        for (uint32_t i = 0; i < 11; i++) {
            assert_true(out[i * 2] == (float)(i * 1000));
            assert_true(out[i * 2 + 1] == (float)(i * 1000 + 1));
        }
        env_close(&e);
    }
}

/* ---- hosts read in parallel ------------------------------------------------------------------- */

/* With an input function of 2 ms a call (modeled) the input bounds the step: one host making
 * 2 calls a step, two hosts making 2 each (4 replicas) and one host making 4 (4 replicas on 2
 * chips). The two hosts take what one host with half the calls takes; one host with all 4
 * calls twice that. Tolerance: the device's own time per step (microseconds on tiny, against
 * 4 ms of input) and the all-reduce's, which differ between 2 and 4 replicas: 2 % of the
 * total. */
static double run_input_bound(uint32_t hosts, uint32_t chips)
{
    struct env e;
    env_init(&e, chips, 1);
    env_mlp(&e);
    e.cfg.num_hosts = hosts;
    e.cfg.modeled_input_us_per_batch = 2000;
    e.cfg.iterations_per_loop = 10;
    e.cfg.train_batch_size = 8;
    open_ok(&e);
    train_ok(&e, 10);
    const double t = tpu_estimator_last_info(e.est)->total_seconds;
    env_close(&e);
    return t;
}

static void test_hosts_read_input_in_parallel(void **state)
{
    (void)state;
    const double one_host_2 = run_input_bound(1, 1);
    const double two_hosts_4 = run_input_bound(2, 2);
    const double one_host_4 = run_input_bound(1, 2);
    /* 10 steps x 2 calls x 2 ms = 40 ms of input on each host's clock */
    assert_true(one_host_2 >= 0.040 && one_host_2 < 0.040 * 1.02);
    if (fabs(two_hosts_4 - one_host_2) > 0.02 * one_host_2)
        fail_msg("2 hosts x 2 calls: %g s, 1 host x 2 calls: %g s", two_hosts_4, one_host_2);
    if (fabs(one_host_4 - 2 * one_host_2) > 0.02 * 2 * one_host_2)
        fail_msg("1 host x 4 calls: %g s, expected twice %g s", one_host_4, one_host_2);
}

/* ---- the watchdog and a thread whose turn came ------------------------------------------------ */

/* A host's infeed thread whose turn has come but that the system has not yet run (under load,
 * every waiter a broadcast woke retakes the pass's lock in turn) is no deadlock: the run waits
 * for it. The test keeps that thread off the CPU for 1 s, twice the watchdog's 0.5 s: a
 * signal whose handler sleeps, sent to host 1's thread while it waits for its turn, just
 * before host 0 gives it the turn (steps 1, 3 and 5). Meanwhile host 1's cores wait for its
 * infeed, host 0's wait at the all-reduce, the outfeed thread waits on the device, host 0's
 * thread waits for its next turn and nothing moves: the watchdog stopped this run as
 * deadlocked while it counted a thread whose turn had come among those "only waiting their
 * turn". Three stalls, because glibc's broadcast sometimes waits, holding the pass's lock,
 * for the sleeping waiter to leave its wait, and the watchdog then sees nothing; each stall
 * caught it about 6 times in 10 before the fix. */
static void stall_handler(int sig)
{
    (void)sig;
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
}

struct stall_input {
    struct rec_input rec; /* first: rec_start and rec_next take the struct as their ctx */
    pthread_t host1;
    bool have_host1;
    uint32_t calls;
};

static int stall_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                      void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct stall_input *si = ctx;
    if (shard == 1 && !si->have_host1) {
        si->host1 = pthread_self();
        si->have_host1 = true;
    }
    if (si->calls++ % 4 == 2 && si->have_host1) {
        /* steps 1, 3, 5, host 0's call: host 1 queues the step before (two tiny tensors on each of its two
         * cores) and waits for its turn, well within 200 ms even under load; the signal
         * then keeps it off the CPU past the turn */
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_kill(si->host1, SIGUSR1);
    }
    return rec_next(&si->rec, mode, shard, batch, tensors, n_real, d);
}

static void test_watchdog_waits_for_a_thread_whose_turn_came(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stall_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    struct env e;
    env_init(&e, 2, 1);
    env_mlp(&e);
    e.cfg.iterations_per_loop = 6; /* one launch: the device is running at each stall */
    e.cfg.per_host_input_for_training = TPU_PER_HOST_V1; /* one call per host: shard = host */
    open_ok(&e);
    struct stall_input si;
    memset(&si, 0, sizeof si);
    rec_init(&si.rec, 6, 3);
    si.rec.input.ctx = &si;
    si.rec.input.next = stall_next;
    struct tpu_diag d = {0};
    const int rc = tpu_estimator_train(e.est, &si.rec.input, 6, 0, &d);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
    if (rc)
        fail_msg("train: %s", d.msg);
    assert_true(si.have_host1);
    assert_int_equal(si.calls, 12); /* 6 steps x 2 hosts */
    assert_int_equal(tpu_estimator_global_step(e.est), 6);
    env_close(&e);
}

/* ---- the rules, before any work ---------------------------------------------------------------- */

static void expect_create_error(struct env *e, const char *what)
{
    struct tpu_diag d = {0};
    int rc = env_open(e, &d);
    if (rc == 0 || !strstr(d.msg, what))
        fail_msg("create gave %d '%s'; expected an error with '%s'", rc, d.msg, what);
    env_close(e);
}

static void test_rules_refused_at_create(void **state)
{
    (void)state;
    struct env e;
    /* 3 hosts do not divide 4 chips */
    env_init(&e, 4, 1);
    env_mlp(&e);
    e.cfg.num_hosts = 3;
    expect_create_error(&e, "num_hosts 3 does not divide the device's 4 chips evenly");
    /* PER_SHARD_V1 with model parallelism */
    env_init(&e, 2, 2);
    env_mlp(&e);
    e.cfg.per_host_input_for_training = TPU_PER_SHARD_V1;
    expect_create_error(&e, "model parallelism (num_cores_per_replica 2) only supports per "
                            "host input for training, and per_host_input_for_training is "
                            "PER_SHARD_V1");
    /* a replica larger than a host outside PER_HOST_V2: 4 cores over hosts of 2 */
    env_init(&e, 2, 4);
    env_mlp(&e);
    e.cfg.per_host_input_for_training = TPU_PER_HOST_V1;
    expect_create_error(&e, "except in PER_HOST_V2 mode, a replica must fit on one host: "
                            "num_cores_per_replica 4 is more than the 2 cores per host");
    /* input_partition_dims outside PER_HOST_V2 */
    env_init(&e, 1, 2);
    env_echo(&e, 4, 2, 1);
    e.cfg.per_host_input_for_training = TPU_PER_HOST_V1;
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, 2, 1, 1}};
    expect_create_error(&e, "input_partition_dims is only supported in PER_HOST_V2 mode");
    /* without model parallelism */
    env_init(&e, 1, 1);
    env_echo(&e, 4, 2, 1);
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, 1, 1, 1}};
    expect_create_error(&e, "input_partition_dims requires setting num_cores_per_replica");
    /* a product neither 1 nor the cores per replica */
    env_init(&e, 1, 2);
    env_echo(&e, 4, 2, 1);
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){4, {1, 2, 2, 1}};
    expect_create_error(&e, "tensor 'features': the product of its input partition dims "
                            "[1, 2, 2, 1] is 4, and it should equal num_cores_per_replica 2");
    /* a rank that is not the tensor's */
    env_init(&e, 1, 2);
    env_echo(&e, 4, 2, 1);
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){3, {1, 2, 1}};
    expect_create_error(&e, "tensor 'features' of shape [16, 4, 2, 1] has 4 dimensions (the "
                        "batch first), and its input partition dims [1, 2, 1] have 3");
    /* more than 2 entries */
    env_init(&e, 1, 2);
    env_echo(&e, 4, 2, 1);
    e.cfg.n_input_partition_dims = 3;
    expect_create_error(&e, "input_partition_dims has 3 entries; it takes 1 (the features) or "
                            "2");
    /* a model that does not describe its tensors */
    env_init(&e, 1, 2);
    env_mlp(&e);
    e.cfg.n_input_partition_dims = 1;
    e.cfg.input_partition_dims[0] = (struct tpu_partition_dims){2, {1, 2}};
    expect_create_error(&e, "the model does not describe its input tensors' shapes");
}

/* The batch rules come when the mode runs, before the input function is called: a train
 * batch that does not divide by the replicas fails train with no call; under BROADCAST the
 * same batch is fine. */
static void test_batch_rules_before_any_call(void **state)
{
    (void)state;
    struct env e;
    env_init(&e, 2, 1);
    env_mlp(&e);
    e.cfg.train_batch_size = 6; /* 4 replicas */
    open_ok(&e);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e.est, &e.in.input, 2, 0, &d), TPU_EINVAL);
    if (!strstr(d.msg, "train_batch_size 6 must be divisible by the number of replicas "
                       "(num_shards) 4"))
        fail_msg("%s", d.msg);
    assert_int_equal(e.in.n, 0);
    assert_int_equal(tpu_estimator_global_step(e.est), 0);
    env_close(&e);
    env_init(&e, 2, 1);
    env_mlp(&e);
    e.cfg.train_batch_size = 6;
    e.cfg.per_host_input_for_training = TPU_BROADCAST;
    open_ok(&e);
    train_ok(&e, 2);
    assert_int_equal(e.in.n, 2);
    assert_int_equal(e.in.calls[1].batch, 6);
    env_close(&e);
    /* PER_HOST_V1 splits each host's call over its replicas: the replicas' rule holds */
    env_init(&e, 2, 1);
    env_mlp(&e);
    e.cfg.train_batch_size = 10;
    e.cfg.per_host_input_for_training = TPU_PER_HOST_V1;
    open_ok(&e);
    assert_int_equal(tpu_estimator_train(e.est, &e.in.input, 2, 0, &d), TPU_EINVAL);
    if (!strstr(d.msg, "train_batch_size 10 must be divisible by the number of replicas "
                       "(num_shards) 4"))
        fail_msg("%s", d.msg);
    assert_int_equal(e.in.n, 0);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_calls_per_input_mode),
        cmocka_unit_test(test_evaluation_calls),
        cmocka_unit_test(test_per_host_v1_evaluation_on_hosts),
        cmocka_unit_test(test_broadcast_gives_every_replica_the_whole_batch),
        cmocka_unit_test(test_sliced_evaluation_slices_over_replicas),
        cmocka_unit_test(test_partitioned_infeed_reaches_each_core),
        cmocka_unit_test(test_product_one_dims_feed_logical_core_0),
        cmocka_unit_test(test_prediction_on_hosts_in_order),
        cmocka_unit_test(test_hosts_read_input_in_parallel),
        cmocka_unit_test(test_watchdog_waits_for_a_thread_whose_turn_came),
        cmocka_unit_test(test_rules_refused_at_create),
        cmocka_unit_test(test_batch_rules_before_any_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
