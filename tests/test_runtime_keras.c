/* The runtime's hooks for the Keras-style API (include/tpusim/runtime.h): before_loop in
 * train, evaluate and predict; the loop sums of tpu_loop_info against the outfed values;
 * weighted training with partial steps (sample_weights); the train program's counts
 * (train_counts); tpu_estimator_reconfigure (each field it takes, each it refuses, with its
 * message); and the host learning rate (set, get, its errors).
 *
 * Most tests run a hand-built "probe" model on the tiny chip (2 cores, 2 replicas): its
 * programs compute values the host can compute exactly (small integers and quarters), so
 * every sum is checked for equality, not within a tolerance. Example i of its data stream
 * has 4 features, x[j] = 5 at j = (5 i) mod 4 and (i + j) mod 3 elsewhere, so its argmax is
 * unique; its label is that argmax when i mod 3 == 0 (a correct prediction), the next class
 * otherwise; its weight is 0.25 or 0.5. The train program outfeeds each step the replica's
 * loss sum over its rows of w_i (rowsum_i + 1) (w_i = 1 without weights: a padding row with
 * weight 0 adds nothing, one with a stale weight would), then, with train_counts, its
 * classify_count; the eval program the replica's sum of rowsum_i over its rows (padding rows
 * are zeros) and classify_count; the predict program x itself. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"

enum { FEATURES = 4 };

/* ---- the data stream --------------------------------------------------------------------- */

static uint32_t ex_argmax(uint64_t i)
{
    return (uint32_t)(i * 5 % 4);
}

static float ex_x(uint64_t i, uint32_t j)
{
    return j == ex_argmax(i) ? 5.0f : (float)((i + j) % 3);
}

static int32_t ex_label(uint64_t i)
{
    return (int32_t)(i % 3 == 0 ? ex_argmax(i) : (ex_argmax(i) + 1) % 4);
}

static float ex_weight(uint64_t i)
{
    return 0.25f * (float)(1 + i % 2);
}

static double ex_rowsum(uint64_t i)
{
    double s = 0;
    for (uint32_t j = 0; j < FEATURES; j++)
        s += ex_x(i, j);
    return s;
}

/* An input over examples [0, n) of the stream, in order, one call after another. Training
 * continues where the last call stopped; evaluation and prediction start at 0. */
struct stream {
    uint64_t n;
    uint64_t pos;
    bool weighted;     /* training fills the third tensor with the examples' weights */
    bool zero_rows;    /* at the end: one call returns 1 with 0 real rows, then 0 */
    bool zero_given;
    uint32_t rows_per_call; /* > 0: every call gives at most this many real rows */
    uint64_t calls;
};

static int stream_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                       void *const *t, uint32_t *n_real, struct tpu_diag *d)
{
    struct stream *s = ctx;
    (void)shard;
    (void)d;
    s->calls++;
    if (s->pos >= s->n) {
        if (s->zero_rows && !s->zero_given) {
            s->zero_given = true;
            *n_real = 0;
            return 1;
        }
        return 0;
    }
    uint32_t rows = s->n - s->pos < batch ? (uint32_t)(s->n - s->pos) : batch;
    if (s->rows_per_call && rows > s->rows_per_call)
        rows = s->rows_per_call;
    float *x = t[0];
    for (uint32_t r = 0; r < rows; r++) {
        const uint64_t i = s->pos + r;
        for (uint32_t j = 0; j < FEATURES; j++)
            x[r * FEATURES + j] = ex_x(i, j);
        if (mode != TPU_MODE_PREDICT)
            ((int32_t *)t[1])[r] = ex_label(i);
        if (mode == TPU_MODE_TRAIN && s->weighted)
            ((float *)t[2])[r] = ex_weight(i);
    }
    s->pos += rows;
    *n_real = rows;
    return 1;
}

static int stream_start(void *ctx, enum tpu_mode mode, uint64_t global_step,
                        uint32_t global_batch, struct tpu_diag *d)
{
    struct stream *s = ctx;
    (void)global_step;
    (void)global_batch;
    (void)d;
    if (mode != TPU_MODE_TRAIN) {
        s->pos = 0;
        s->zero_given = false;
    }
    return 0;
}

static struct tpu_input stream_input(struct stream *s)
{
    return (struct tpu_input){.ctx = s, .next = stream_next, .start = stream_start};
}

/* ---- the probe model ----------------------------------------------------------------------- */

struct probe_model {
    uint32_t builds[3];
    struct tpu_build_shape shape[3]; /* each mode's last build */
    int32_t schedule;  /* >= 0: the train program has an sgd_momentum on param p (grad 1,
                          momentum 0: p -= rate each step) with this schedule; 3 (host)
                          declares the variable learning_rate */
    bool no_lr_var;    /* host schedule without the variable (a broken model) */
    float alpha;
};

static int probe_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *sh,
                       struct tpu_model_program *out, struct tpu_diag *d)
{
    struct probe_model *m = ctx;
    const uint32_t B = sh->batch_per_replica;
    char text[4096];
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(text + n, sizeof text - n, __VA_ARGS__)
    static const char *const name[] = {"probe_train", "probe_eval", "probe_predict"};
    PUT("program %s\nvar iterations\nvar step\n", name[mode]);
    const bool opt = mode == TPU_MODE_TRAIN && m->schedule >= 0;
    if (opt && m->schedule == TPU_SCHEDULE_HOST && !m->no_lr_var)
        PUT("var learning_rate\n");
    PUT("param w: f32[1, 1]\n");
    if (opt)
        PUT("param p: f32[1, 1]\nparam vel: f32[1, 1]\ntemp g: f32[1, 1]\n");
    PUT("temp x: f32[%u, %u]\n", B, FEATURES);
    if (mode != TPU_MODE_PREDICT)
        PUT("temp labels: int32[%u, 1]\ntemp rs: f32[%u, 1]\ntemp loss: f32[1, 1]\n", B, B);
    if (mode == TPU_MODE_TRAIN)
        PUT("temp rs1: f32[%u, 1]\n", B);
    if (sh->weighted)
        PUT("temp weights: f32[%u, 1]\n", B);
    if (mode == TPU_MODE_EVAL || sh->train_counts)
        PUT("temp counts: f32[1, 2]\n");
    PUT("loop iterations {\n x = infeed\n");
    if (mode != TPU_MODE_PREDICT)
        PUT(" labels = infeed\n");
    if (sh->weighted)
        PUT(" weights = infeed\n");
    if (mode == TPU_MODE_TRAIN) {
        PUT(" var_add step 1\n rs = reduce_sum x axis=1\n rs1 = scale rs alpha=1 beta=1\n");
        if (sh->weighted)
            PUT(" rs1 = mul rs1, weights\n");
        PUT(" loss = reduce_sum rs1 axis=0\n w = scale w alpha=1 beta=1\n");
        if (opt)
            PUT(" g = scale loss alpha=0 beta=1\n p, vel = sgd_momentum g alpha=%g beta=0 "
                "var=step schedule=%d\n", (double)m->alpha, (int)m->schedule);
        if (sh->train_counts)
            PUT(" counts = classify_count x, labels\n");
        PUT(" outfeed loss\n");
        if (sh->train_counts)
            PUT(" outfeed counts\n");
    } else if (mode == TPU_MODE_EVAL) {
        PUT(" rs = reduce_sum x axis=1\n loss = reduce_sum rs axis=0\n"
            " counts = classify_count x, labels\n outfeed loss\n outfeed counts\n");
    } else {
        PUT(" outfeed x\n");
    }
    PUT("}\n");
#undef PUT
    memset(out, 0, sizeof *out);
    int rc = tpu_program_parse(text, name[mode], &out->prog, d);
    if (rc)
        return rc;
    tpu_program_find_buffer(out->prog, "x", &out->infeed[out->n_infeed++]);
    if (mode != TPU_MODE_PREDICT)
        tpu_program_find_buffer(out->prog, "labels", &out->infeed[out->n_infeed++]);
    if (sh->weighted)
        tpu_program_find_buffer(out->prog, "weights", &out->infeed[out->n_infeed++]);
    tpu_program_find_buffer(out->prog, mode == TPU_MODE_PREDICT ? "x" : "loss",
                            &out->outfeed[out->n_outfeed++]);
    if (mode == TPU_MODE_EVAL || sh->train_counts)
        tpu_program_find_buffer(out->prog, "counts", &out->outfeed[out->n_outfeed++]);
    tpu_program_find_buffer(out->prog, "w", &out->params[out->n_params++]);
    if (opt) {
        tpu_program_find_buffer(out->prog, "p", &out->params[out->n_params++]);
        tpu_program_find_buffer(out->prog, "vel", &out->params[out->n_params++]);
    }
    tpu_program_find_var(out->prog, "iterations", &out->var_iterations);
    tpu_program_find_var(out->prog, "step", &out->var_step);
    m->builds[mode]++;
    m->shape[mode] = *sh;
    return 0;
}

/* w and vel start at 0, p at 10 */
static void probe_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                       uint64_t seed)
{
    (void)ctx;
    (void)seed;
    for (uint32_t i = 0; i < rows * cols; i++)
        data[i] = !strcmp(name, "p") ? 10.0f : 0.0f;
}

/* ---- hooks ----------------------------------------------------------------------------------- */

struct event {
    char kind; /* 'b' before_loop, 'a' after_loop */
    enum tpu_mode mode;
    uint64_t global_step, pass_step, steps;
    struct tpu_loop_info info; /* 'a' */
};

struct recorder {
    struct event ev[64];
    int n;
    int fail_before_at;          /* 1-based before_loop call that fails, 0: none */
    int before_calls;
    struct tpu_estimator *est;   /* reconfigure from after_loop when set */
    int reconf_rc;
    char reconf_msg[TPU_DIAG_MAX];
};

static int rec_before(void *ctx, enum tpu_mode mode, uint64_t global_step, uint64_t pass_step,
                      uint64_t steps, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    r->before_calls++;
    if (r->fail_before_at && r->before_calls == r->fail_before_at) {
        snprintf(d->msg, sizeof d->msg, "before_loop refused the loop at pass step %llu",
                 (unsigned long long)pass_step);
        return TPU_EIO;
    }
    if (r->n < 64)
        r->ev[r->n++] = (struct event){.kind = 'b', .mode = mode, .global_step = global_step,
                                       .pass_step = pass_step, .steps = steps};
    return 0;
}

static int rec_after(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    (void)d;
    if (r->n < 64)
        r->ev[r->n++] = (struct event){.kind = 'a', .mode = li->mode,
                                       .global_step = li->global_step, .steps = li->steps,
                                       .info = *li};
    if (r->est) {
        struct tpu_run_config c;
        tpu_run_config_default(&c);
        struct tpu_diag rd = {0};
        r->reconf_rc = tpu_estimator_reconfigure(r->est, &c, &rd);
        snprintf(r->reconf_msg, sizeof r->reconf_msg, "%s", rd.msg);
    }
    return 0;
}

/* ---- the environment --------------------------------------------------------------------- */

struct env {
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct probe_model pm;
    struct tpu_model model;
    struct tpu_run_config cfg;
    struct recorder rec;
    struct stream in;
    struct tpu_input input;
};

static struct env *env_new(void)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    alarm(120); /* a hang fails the test (env_free disarms it) */
    tpu_run_config_default(&e->cfg);
    e->cfg.train_batch_size = 8; /* 4 rows per replica on the tiny chip's 2 cores */
    e->cfg.eval_batch_size = 8;
    e->cfg.predict_batch_size = 8;
    e->cfg.iterations_per_loop = 4;
    e->cfg.log_step_count_steps = 0;
    e->pm.schedule = -1;
    e->pm.alpha = 0.5f;
    e->model = (struct tpu_model){.ctx = &e->pm, .build = probe_build, .init_param = probe_init};
    e->in.n = UINT64_MAX;
    e->input = stream_input(&e->in);
    return e;
}

static void env_open(struct env *e)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 2;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    struct tpu_hook hook = {.ctx = &e->rec, .before_loop = rec_before, .after_loop = rec_after};
    struct tpu_diag d = {0};
    if (tpu_estimator_create(e->dev, &e->cfg, &e->model, &hook, 1, &e->est, &d))
        fail_msg("create: %s", d.msg);
}

static void env_free(struct env *e)
{
    tpu_estimator_destroy(&e->est);
    tpu_device_close(&e->dev);
    free(e);
    alarm(0);
}

static void train_ok(struct env *e, uint64_t steps)
{
    struct tpu_diag d = {0};
    if (tpu_estimator_train(e->est, &e->input, steps, 0, &d))
        fail_msg("train: %s", d.msg);
}

static float read_param(struct env *e, const char *name)
{
    float v = NAN;
    struct tpu_diag d = {0};
    if (tpu_estimator_read_param(e->est, name, &v, sizeof v, &d))
        fail_msg("read_param %s: %s", name, d.msg);
    return v;
}

static void expect_before(const struct event *ev, enum tpu_mode mode, uint64_t gs, uint64_t ps,
                          uint64_t steps)
{
    if (ev->kind != 'b' || ev->mode != mode || ev->global_step != gs || ev->pass_step != ps ||
        ev->steps != steps)
        fail_msg("expected before_loop(mode %d, global step %llu, pass step %llu, %llu steps), "
                 "got %c(mode %d, %llu, %llu, %llu)", (int)mode, (unsigned long long)gs,
                 (unsigned long long)ps, (unsigned long long)steps, ev->kind, (int)ev->mode,
                 (unsigned long long)ev->global_step, (unsigned long long)ev->pass_step,
                 (unsigned long long)ev->steps);
}

/* The host's sums of training steps [s0, s1) (runtime.h, tpu_loop_info): real rows, the
 * loss sum (each step's global loss times its real rows) and the correct answers, from the
 * very calls the runtime makes (a copy of the input, from its start: each step's calls in
 * replica order, R = 2 replicas of B rows), computed here in double; `last_loss` is step
 * s1 - 1's global loss. Padding rows weigh 0 (weighted) and hold zeros. */
struct sums {
    uint64_t real;
    double loss, correct, last_loss;
};

static struct sums host_sums(const struct stream *in, uint64_t s0, uint64_t s1, uint32_t B,
                             bool weighted)
{
    struct stream s = *in;
    s.pos = 0;
    s.zero_given = false;
    struct sums out = {0};
    float *x = calloc((size_t)B * FEATURES, sizeof *x), *w = calloc(B, sizeof *w);
    int32_t *labels = calloc(B, sizeof *labels);
    assert_true(x && w && labels);
    void *const t[3] = {x, labels, w};
    for (uint64_t step = 0; step < s1; step++) {
        double global = 0, correct = 0;
        uint64_t real = 0;
        for (uint32_t r = 0; r < 2; r++) {
            uint32_t n_real = 0;
            struct tpu_diag d = {0};
            if (stream_next(&s, TPU_MODE_TRAIN, r, B, t, &n_real, &d) != 1)
                n_real = 0;
            for (uint32_t k = 0; k < B; k++) {
                if (k >= n_real) {
                    global += weighted ? 0.0 : 1.0;
                    continue;
                }
                double rowsum = 0;
                uint32_t best = 0;
                for (uint32_t j = 0; j < FEATURES; j++) {
                    rowsum += x[k * FEATURES + j];
                    best = x[k * FEATURES + j] > x[k * FEATURES + best] ? j : best;
                }
                global += (weighted ? w[k] : 1.0) * (rowsum + 1);
                correct += (int32_t)best == labels[k];
            }
            real += n_real;
        }
        if (step >= s0) {
            out.real += real;
            out.loss += global * (double)real;
            out.correct += correct;
            out.last_loss = global;
        }
    }
    free(x);
    free(w);
    free(labels);
    return out;
}

static void expect_sums(const struct tpu_loop_info *li, const struct sums *x, bool counts,
                        const char *what)
{
    if (li->real_examples != x->real || li->loss_sum != x->loss ||
        (counts ? li->correct != x->correct : !isnan(li->correct)) ||
        li->global_loss != (float)x->last_loss)
        fail_msg("%s: real %llu loss_sum %.17g correct %.17g global_loss %.9g; the host's %llu, "
                 "%.17g, %.17g%s, %.9g", what, (unsigned long long)li->real_examples,
                 li->loss_sum, li->correct, (double)li->global_loss,
                 (unsigned long long)x->real, x->loss, x->correct, counts ? "" : " (NaN: none)",
                 x->last_loss);
}

/* ---- before_loop ------------------------------------------------------------------------- */

static void test_before_loop_train(void **state)
{
    (void)state;
    struct env *e = env_new();
    env_open(e);
    /* ipl 4, 10 steps: loops at pass steps 0, 4, 8 of 4, 4, 2 steps, each before_loop before
     * its launch and its after_loop after */
    train_ok(e, 10);
    assert_int_equal(e->rec.n, 6);
    expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 0, 0, 4);
    assert_int_equal(e->rec.ev[1].kind, 'a');
    assert_int_equal(e->rec.ev[1].info.pass_steps, 4);
    expect_before(&e->rec.ev[2], TPU_MODE_TRAIN, 4, 4, 4);
    assert_int_equal(e->rec.ev[3].info.pass_steps, 8);
    expect_before(&e->rec.ev[4], TPU_MODE_TRAIN, 8, 8, 2);
    assert_int_equal(e->rec.ev[5].kind, 'a');
    assert_int_equal(e->rec.ev[5].info.steps, 2);
    assert_int_equal(e->rec.ev[5].info.pass_steps, 10);
    assert_int_equal(e->rec.ev[5].info.global_step, 10);
    /* a new call is a new pass: its steps count from 0 again */
    e->rec.n = 0;
    train_ok(e, 5);
    assert_int_equal(e->rec.n, 4);
    expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 10, 0, 4);
    expect_before(&e->rec.ev[2], TPU_MODE_TRAIN, 14, 4, 1);
    assert_int_equal(e->rec.ev[3].info.pass_steps, 5);
    assert_int_equal(tpu_estimator_last_info(e->est)->pass_steps, 5);
    env_free(e);
}

static void predict_emit(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    uint64_t *count = ctx;
    assert_int_equal(cols, FEATURES);
    for (uint32_t j = 0; j < cols; j++)
        assert_true(row[j] == ex_x(index, j));
    (*count)++;
}

static void test_before_loop_eval_and_predict(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->in.n = 44; /* 6 batches of 8, the last with 4 real rows */
    env_open(e);
    train_ok(e, 3);
    e->rec.n = 0;
    /* the whole input (steps 0): a loop's size is iterations_per_loop, at most; the input
     * ends in the second loop, after 2 of its 4 steps */
    struct tpu_eval_result r;
    struct tpu_diag d = {0};
    if (tpu_estimator_evaluate(e->est, &e->input, 0, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(r.steps, 6);
    assert_int_equal(e->rec.n, 4);
    expect_before(&e->rec.ev[0], TPU_MODE_EVAL, 3, 0, 4);
    expect_before(&e->rec.ev[2], TPU_MODE_EVAL, 3, 4, 4);
    assert_int_equal(e->rec.ev[3].info.steps, 2);
    assert_int_equal(e->rec.ev[3].info.pass_steps, 6);
    /* given steps: the last loop is cut to what remains */
    e->rec.n = 0;
    if (tpu_estimator_evaluate(e->est, &e->input, 6, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(e->rec.n, 4);
    expect_before(&e->rec.ev[0], TPU_MODE_EVAL, 3, 0, 4);
    expect_before(&e->rec.ev[2], TPU_MODE_EVAL, 3, 4, 2);
    /* predict: like evaluate over the whole input */
    e->rec.n = 0;
    uint64_t n = 0, count = 0;
    if (tpu_estimator_predict(e->est, &e->input, predict_emit, &count, &n, &d))
        fail_msg("predict: %s", d.msg);
    assert_int_equal(n, 44);
    assert_int_equal(e->rec.n, 4);
    expect_before(&e->rec.ev[0], TPU_MODE_PREDICT, 3, 0, 4);
    expect_before(&e->rec.ev[2], TPU_MODE_PREDICT, 3, 4, 4);
    assert_int_equal(e->rec.ev[3].info.pass_steps, 6);
    env_free(e);
}

static void test_before_loop_error_stops_the_run(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->rec.fail_before_at = 2;
    env_open(e);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->input, 10, 0, &d), TPU_EIO);
    if (!strstr(d.msg, "before_loop refused the loop at pass step 4"))
        fail_msg("%s", d.msg);
    /* the first loop ran, the second never launched */
    assert_int_equal(tpu_estimator_global_step(e->est), 4);
    env_free(e);
}

/* ---- the loop sums --------------------------------------------------------------------- */

static void test_loop_sums_train(void **state)
{
    (void)state;
    for (int counts = 0; counts <= 1; counts++) {
        struct env *e = env_new();
        e->cfg.train_counts = counts;
        env_open(e);
        train_ok(e, 10);
        assert_int_equal(e->pm.shape[TPU_MODE_TRAIN].train_counts, counts);
        assert_false(e->pm.shape[TPU_MODE_TRAIN].weighted);
        const uint64_t first[] = {0, 4, 8}, len[] = {4, 4, 2};
        for (int k = 0; k < 3; k++) {
            const struct tpu_loop_info *li = &e->rec.ev[2 * k + 1].info;
            struct sums x = host_sums(&e->in, first[k], first[k] + len[k], 4, false);
            assert_int_equal(li->real_examples, len[k] * 8); /* full steps: the global batch */
            expect_sums(li, &x, counts, counts ? "train_counts" : "no counts");
        }
        /* the last info is the last loop's */
        const struct tpu_loop_info *last = tpu_estimator_last_info(e->est);
        assert_int_equal(last->real_examples, 16);
        assert_int_equal(last->pass_steps, 10);
        env_free(e);
    }
}

static void test_loop_sums_eval_and_predict(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->in.n = 44;
    env_open(e);
    struct tpu_eval_result r;
    struct tpu_diag d = {0};
    train_ok(e, 1);
    e->rec.n = 0;
    if (tpu_estimator_evaluate(e->est, &e->input, 0, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(r.examples, 44);
    /* loops of batches 0-3 (examples 0-31) and 4-5 (32-43) */
    const uint64_t lo[] = {0, 32}, hi[] = {32, 44};
    double all_loss = 0, all_correct = 0;
    for (int k = 0; k < 2; k++) {
        const struct tpu_loop_info *li = &e->rec.ev[2 * k + 1].info;
        double loss = 0, correct = 0;
        for (uint64_t i = lo[k]; i < hi[k]; i++) {
            loss += ex_rowsum(i);
            correct += i % 3 == 0;
        }
        assert_int_equal(li->real_examples, hi[k] - lo[k]);
        if (li->loss_sum != loss || li->correct != correct)
            fail_msg("eval loop %d: loss_sum %.17g correct %.17g, the host's %.17g and %.17g", k,
                     li->loss_sum, li->correct, loss, correct);
        all_loss += li->loss_sum;
        all_correct += li->correct;
    }
    /* the loops add up to the result */
    assert_true(r.loss == all_loss / 44);
    assert_true(r.accuracy == all_correct / 44);
    /* predict: real rows only */
    e->rec.n = 0;
    uint64_t n = 0, count = 0;
    if (tpu_estimator_predict(e->est, &e->input, predict_emit, &count, &n, &d))
        fail_msg("predict: %s", d.msg);
    assert_int_equal(n, 44);
    assert_int_equal(count, 44);
    assert_int_equal(e->rec.ev[1].info.real_examples, 32);
    assert_int_equal(e->rec.ev[3].info.real_examples, 12);
    assert_true(isnan(e->rec.ev[1].info.loss_sum));
    assert_true(isnan(e->rec.ev[1].info.correct));
    env_free(e);
}

/* ---- sample weights: partial steps --------------------------------------------------------- */

static void test_partial_steps_train_on_real_rows(void **state)
{
    (void)state;
    /* global batch 8 over 2 replicas (calls of 4 rows):
     *   0: 20 examples: steps of 8, 8 and 4 real rows; the last step's second call finds
     *      the end, and is padded (its rows weigh 0); the input ended after it
     *   1: 24 examples, then a call of 0 real rows (rc 1): a fourth step of 0 real rows,
     *      whose second call finds the end
     *   2: 2 real rows per call, endlessly: every step is partial (4 real rows), and none
     *      ends the input: all 5 steps asked for run */
    const uint64_t n[] = {20, 24, UINT64_MAX}, want_steps[] = {3, 4, 5};
    const uint64_t want_real[] = {20, 24, 20};
    for (int v = 0; v < 3; v++) {
        struct env *e = env_new();
        e->cfg.sample_weights = true;
        e->cfg.train_counts = true;
        e->cfg.iterations_per_loop = 8;
        e->in.n = n[v];
        e->in.weighted = true;
        e->in.zero_rows = v == 1;
        e->in.rows_per_call = v == 2 ? 2 : 0;
        env_open(e);
        struct tpu_diag d = {0};
        assert_int_equal(tpu_estimator_train(e->est, &e->input, 5, 0, &d), 0);
        assert_true(e->pm.shape[TPU_MODE_TRAIN].weighted);
        if (v < 2 && !strstr(d.msg, "warning: the training input ended at global step"))
            fail_msg("variant %d: %s", v, d.msg);
        if (v == 2 && d.msg[0])
            fail_msg("variant %d: %s", v, d.msg);
        assert_int_equal(tpu_estimator_global_step(e->est), want_steps[v]);
        assert_true(read_param(e, "w") == (float)want_steps[v]);
        /* one loop: before_loop said 5 (what was asked); it ran the steps there were */
        assert_int_equal(e->rec.n, 2);
        expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 0, 0, 5);
        const struct tpu_loop_info *li = &e->rec.ev[1].info;
        assert_int_equal(li->steps, want_steps[v]);
        assert_int_equal(li->real_examples, want_real[v]);
        struct sums x = host_sums(&e->in, 0, want_steps[v], 4, true);
        expect_sums(li, &x, true, v == 0 ? "20 examples" : v == 1 ? "a step of 0 rows"
                                                                   : "2 rows per call");
        if (v == 1) /* the step of 0 real rows: padding only, which weighs nothing */
            assert_true(li->global_loss == 0.0f);
        env_free(e);
    }
}

static void test_partial_batch_ends_unweighted_training(void **state)
{
    (void)state;
    /* sample_weights off: as before, a partial batch ends training before its step (18
     * examples: step 2's first call finds 2 of its 4 rows) */
    struct env *e = env_new();
    e->in.n = 18;
    env_open(e);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->input, 10, 0, &d), 0);
    assert_int_equal(tpu_estimator_global_step(e->est), 2);
    assert_int_equal(e->rec.ev[1].info.real_examples, 16);
    env_free(e);
}

static int unweighted_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *sh,
                            struct tpu_model_program *out, struct tpu_diag *d)
{
    struct tpu_build_shape plain = *sh;
    plain.weighted = plain.train_counts = false; /* a model that ignores the flags */
    return probe_build(ctx, mode, &plain, out, d);
}

static void test_flags_need_a_model_that_lowers_them(void **state)
{
    (void)state;
    for (int which = 0; which < 2; which++) {
        struct env *e = env_new();
        e->model.build = unweighted_build;
        if (which == 0)
            e->cfg.sample_weights = true;
        else
            e->cfg.train_counts = true;
        env_open(e);
        struct tpu_diag d = {0};
        assert_int_equal(tpu_estimator_train(e->est, &e->input, 2, 0, &d), TPU_EUNSUPPORTED);
        const char *want = which == 0
                               ? "sample_weights is on, but the train program 'probe_train' "
                                 "does not infeed the row weights f32 [batch, 1] after its "
                                 "other inputs (its last infeed is 'labels'); use a model that "
                                 "lowers weighted training"
                               : "train_counts is on, but the train program 'probe_train' "
                                 "outfeeds 1 tensor, not the loss then the counts f32 [1, 2] "
                                 "(correct, real rows); use a model that lowers the counts";
        if (!strstr(d.msg, want))
            fail_msg("%s", d.msg);
        env_free(e);
    }
}

/* ---- reconfigure ------------------------------------------------------------------------- */

static void test_reconfigure_takes_its_fields(void **state)
{
    (void)state;
    char dir[] = "/tmp/tpusim-rtk-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    env_open(e);
    train_ok(e, 3);
    assert_int_equal(e->pm.builds[TPU_MODE_TRAIN], 1);
    assert_true(read_param(e, "w") == 3.0f);
    /* every field it takes, at once */
    struct tpu_run_config c = e->cfg;
    c.train_batch_size = 16;
    c.eval_batch_size = 4;
    c.predict_batch_size = 2;
    c.iterations_per_loop = 2;
    c.sample_weights = true;
    c.train_counts = true;
    c.log_step_count_steps = 3;
    c.save_checkpoints_steps = 2;
    c.host_call_every_n_steps = 5;
    struct tpu_diag d = {0};
    if (tpu_estimator_reconfigure(e->est, &c, &d))
        fail_msg("reconfigure: %s", d.msg);
    e->in.weighted = true;
    e->rec.n = 0;
    train_ok(e, 3);
    /* rebuilt with the new shape, the params carried over */
    assert_int_equal(e->pm.builds[TPU_MODE_TRAIN], 2);
    assert_int_equal(e->pm.shape[TPU_MODE_TRAIN].global_batch, 16);
    assert_int_equal(e->pm.shape[TPU_MODE_TRAIN].batch_per_replica, 8);
    assert_true(e->pm.shape[TPU_MODE_TRAIN].weighted);
    assert_true(e->pm.shape[TPU_MODE_TRAIN].train_counts);
    assert_true(read_param(e, "w") == 6.0f);
    /* loops of 2 now: 3 steps are 2 + 1 */
    expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 3, 0, 2);
    expect_before(&e->rec.ev[2], TPU_MODE_TRAIN, 5, 2, 1);
    assert_int_equal(e->rec.ev[1].info.real_examples, 32);
    /* the same configuration again: nothing is rebuilt */
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), 0);
    train_ok(e, 1);
    assert_int_equal(e->pm.builds[TPU_MODE_TRAIN], 2);
    /* evaluation's batch changed: built with it */
    struct tpu_eval_result r;
    e->in.n = 10;
    if (tpu_estimator_evaluate(e->est, &e->input, 0, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(e->pm.shape[TPU_MODE_EVAL].global_batch, 4);
    assert_false(e->pm.shape[TPU_MODE_EVAL].weighted); /* the flags are training's */
    assert_int_equal(r.examples, 10);
    env_free(e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_reconfigure_refuses_other_fields(void **state)
{
    (void)state;
    struct env *e = env_new();
    env_open(e);
    const char *const rule = "tpu_estimator_reconfigure changes only the batch sizes, "
                             "iterations_per_loop (and its tuner), sample_weights, train_counts, "
                             "log_step_count_steps, save_checkpoints_steps and "
                             "host_call_every_n_steps";
    int n = 0;
#define CASE(body, text)                                                                           \
    do {                                                                                           \
        struct tpu_run_config c = e->cfg;                                                          \
        body;                                                                                      \
        struct tpu_diag d = {0};                                                                   \
        assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), TPU_EINVAL);                   \
        if (!strstr(d.msg, text) || !strstr(d.msg, rule))                                          \
            fail_msg("expected \"%s\", got: %s", text, d.msg);                                     \
        n++;                                                                                       \
    } while (0)
    CASE(c.num_shards = 1, "num_shards is 0, and the new configuration gives 1; ");
    CASE(c.num_cores_per_replica = 2, "num_cores_per_replica is 1, and the new configuration "
                                      "gives 2; ");
    CASE(c.per_host_input_for_training = TPU_BROADCAST,
         "per_host_input_for_training is PER_HOST_V2, and the new configuration gives "
         "BROADCAST; ");
    CASE(c.eval_training_input_configuration = TPU_EVAL_SLICED,
         "eval_training_input_configuration is PER_HOST_V1, and the new configuration gives "
         "SLICED; ");
    CASE(c.initial_infeed_sleep_secs = 0.5, "initial_infeed_sleep_secs is 0, and the new "
                                            "configuration gives 0.5; ");
    CASE(c.num_hosts = 2, "num_hosts is 1, and the new configuration gives 2; ");
    CASE(c.keep_checkpoint_max = 2, "keep_checkpoint_max is 5, and the new configuration "
                                    "gives 2; ");
    CASE(c.seed = 9, "seed is 0, and the new configuration gives 9; ");
    CASE(c.strict_input = true, "strict_input is false, and the new configuration gives true; ");
    CASE(c.host_time = TPU_HOST_TIME_MEASURED, "host_time is modeled, and the new "
                                               "configuration gives measured; ");
    CASE(c.modeled_launch_us = 1, "modeled_launch_us is 100, and the new configuration gives "
                                  "1; ");
    CASE(c.modeled_hooks_us = 1, "modeled_hooks_us is 500, and the new configuration gives 1; ");
    CASE(c.modeled_checkpoint_us = 1, "modeled_checkpoint_us is 20000, and the new "
                                      "configuration gives 1; ");
    CASE(c.modeled_input_us_per_batch = 1, "modeled_input_us_per_batch is 50, and the new "
                                           "configuration gives 1; ");
    CASE(snprintf(c.model_dir, sizeof c.model_dir, "/tmp/elsewhere"),
         "model_dir is '', and the new configuration gives '/tmp/elsewhere'; ");
    CASE((c.n_input_partition_dims = 1, c.input_partition_dims[0].rank = 2,
          c.input_partition_dims[0].dims[0] = 1, c.input_partition_dims[0].dims[1] = 1),
         "input_partition_dims are none, and the new configuration gives [1,1]; ");
#undef CASE
    assert_int_equal(n, 16);
    /* the fix is in the message too */
    struct tpu_run_config c = e->cfg;
    c.seed = 9;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), TPU_EINVAL);
    if (!strstr(d.msg, "keep seed 0, or create a new estimator for seed 9"))
        fail_msg("%s", d.msg);
    /* a field it takes, with a value create would refuse: create's message */
    c = e->cfg;
    c.iterations_per_loop = 0;
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), TPU_EINVAL);
    if (!strstr(d.msg, "iterations_per_loop is 0; use at least 1"))
        fail_msg("%s", d.msg);
    c = e->cfg;
    c.save_checkpoints_steps = 10;
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), TPU_EINVAL);
    if (!strstr(d.msg, "save_checkpoints_steps 10 needs a model_dir"))
        fail_msg("%s", d.msg);
    c = e->cfg;
    c.train_batch_size = c.eval_batch_size = c.predict_batch_size = 0;
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), TPU_EINVAL);
    if (!strstr(d.msg, "no batch size is set"))
        fail_msg("%s", d.msg);
    /* nothing refused changed anything: training runs as configured at create */
    train_ok(e, 5);
    expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 0, 0, 4);
    assert_int_equal(e->rec.ev[1].info.real_examples, 32);
    assert_false(e->pm.shape[TPU_MODE_TRAIN].weighted);
    env_free(e);
}

static void test_reconfigure_from_a_hook_is_refused(void **state)
{
    (void)state;
    struct env *e = env_new();
    env_open(e);
    e->rec.est = e->est;
    train_ok(e, 2);
    assert_int_equal(e->rec.reconf_rc, TPU_EINVAL);
    if (!strstr(e->rec.reconf_msg, "tpu_estimator_reconfigure was called during a train, "
                                   "evaluate or predict call (from one of its hooks); call it "
                                   "between those calls"))
        fail_msg("%s", e->rec.reconf_msg);
    env_free(e);
}

static void test_reconfigure_keeps_or_drops_the_tuner(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.iterations_per_loop_auto = true;
    tpu_tuner_default_settings(&e->cfg.tuner, TPU_TUNER_KERAS);
    env_open(e);
    train_ok(e, 6);
    const struct tpu_tuner *t = tpu_estimator_tuner(e->est, TPU_MODE_TRAIN);
    assert_non_null(t);
    /* the batch size changes, the loop sizing does not: the same tuner goes on */
    struct tpu_run_config c = e->cfg;
    c.train_batch_size = 16;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), 0);
    assert_ptr_equal(tpu_estimator_tuner(e->est, TPU_MODE_TRAIN), t);
    /* a count: no tuner */
    c.iterations_per_loop_auto = false;
    c.iterations_per_loop = 3;
    assert_int_equal(tpu_estimator_reconfigure(e->est, &c, &d), 0);
    assert_null(tpu_estimator_tuner(e->est, TPU_MODE_TRAIN));
    e->rec.n = 0;
    train_ok(e, 4);
    expect_before(&e->rec.ev[0], TPU_MODE_TRAIN, 6, 0, 3);
    expect_before(&e->rec.ev[2], TPU_MODE_TRAIN, 9, 3, 1);
    env_free(e);
}

/* ---- the learning rate ------------------------------------------------------------------- */

static void test_learning_rate_errors(void **state)
{
    (void)state;
    /* a model whose train program has no optimizer */
    struct env *e = env_new();
    env_open(e);
    struct tpu_diag d = {0};
    float lr = -1;
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.1f, &d), TPU_EUNSUPPORTED);
    if (!strstr(d.msg, "the train program 'probe_train' has no optimizer op (sgd_momentum, adam "
                       "or adamw), so it has no learning rate to set; use a model that trains "
                       "with one, built with the host schedule"))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), TPU_EUNSUPPORTED);
    assert_true(lr == -1);
    /* the value */
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, NAN, &d), TPU_EINVAL);
    if (!strstr(d.msg, "learning rate nan is not a finite number >= 0; give a rate such as "
                       "0.001"))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, -0.5f, &d), TPU_EINVAL);
    if (!strstr(d.msg, "learning rate -0.5 is not a finite number >= 0"))
        fail_msg("%s", d.msg);
    env_free(e);

    /* an optimizer on another schedule: the constant one (an MLP), the cosine one (probe) */
    e = env_new();
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 1;
    spec.sizes[0] = FEATURES;
    spec.sizes[1] = 4;
    tpu_mlp_model(&e->model, &spec);
    env_open(e);
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.1f, &d), TPU_EUNSUPPORTED);
    if (!strstr(d.msg, "takes its learning rate from its optimizer's constant schedule, which "
                       "the host cannot set; build the model with the host schedule (net.h "
                       "tpu_train_spec.schedule = TPU_SCHEDULE_HOST"))
        fail_msg("%s", d.msg);
    /* after training too (the loaded program) */
    train_ok(e, 1);
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), TPU_EUNSUPPORTED);
    if (!strstr(d.msg, "constant schedule"))
        fail_msg("%s", d.msg);
    env_free(e);

    /* the host schedule without the variable: a broken model */
    e = env_new();
    e->pm.schedule = TPU_SCHEDULE_HOST;
    e->pm.no_lr_var = true;
    env_open(e);
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.1f, &d), TPU_EINVAL);
    if (!strstr(d.msg, "the train program 'probe_train' has an optimizer with the host schedule "
                       "but no variable named \"learning_rate\" for its rate; the model's "
                       "build must declare it (a bug in the model)"))
        fail_msg("%s", d.msg);
    env_free(e);

    /* no train batch size: there is no train program to ask */
    e = env_new();
    e->pm.schedule = TPU_SCHEDULE_HOST;
    e->cfg.train_batch_size = 0;
    env_open(e);
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.1f, &d), TPU_EINVAL);
    if (!strstr(d.msg, "train_batch_size is not set"))
        fail_msg("%s", d.msg);
    env_free(e);
}

static void test_learning_rate_set_and_get(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->pm.schedule = TPU_SCHEDULE_HOST;
    e->pm.alpha = 0.5f;
    env_open(e);
    struct tpu_diag d = {0};
    float lr = -1;
    /* before any call: the train program is built to look at it; none set: alpha */
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), 0);
    assert_true(lr == 0.5f);
    assert_int_equal(e->pm.builds[TPU_MODE_TRAIN], 1);
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.25f, &d), 0);
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), 0);
    assert_true(lr == 0.25f);
    /* 0 is a rate: get gives it back as set */
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.0f, &d), 0);
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), 0);
    assert_true(lr == 0.0f && !signbit(lr));
    assert_int_equal(tpu_estimator_set_learning_rate(e->est, 0.125f, &d), 0);
    assert_int_equal(tpu_estimator_get_learning_rate(e->est, &lr, &d), 0);
    assert_true(lr == 0.125f);
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_loop_train),
        cmocka_unit_test(test_before_loop_eval_and_predict),
        cmocka_unit_test(test_before_loop_error_stops_the_run),
        cmocka_unit_test(test_loop_sums_train),
        cmocka_unit_test(test_loop_sums_eval_and_predict),
        cmocka_unit_test(test_partial_steps_train_on_real_rows),
        cmocka_unit_test(test_partial_batch_ends_unweighted_training),
        cmocka_unit_test(test_flags_need_a_model_that_lowers_them),
        cmocka_unit_test(test_reconfigure_takes_its_fields),
        cmocka_unit_test(test_reconfigure_refuses_other_fields),
        cmocka_unit_test(test_reconfigure_from_a_hook_is_refused),
        cmocka_unit_test(test_reconfigure_keeps_or_drops_the_tuner),
        cmocka_unit_test(test_learning_rate_errors),
        cmocka_unit_test(test_learning_rate_set_and_get),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
