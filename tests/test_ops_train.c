/* The training ops added for layer-graph models (rsqrt, mse, count_rows, dropout_mask, adamw)
 * and the optimizers' learning-rate schedules: their values against references written here
 * (in double, or re-deriving the documented hash), their verifier rules and messages, their
 * text form, and a schedule and a dropout mask inside programs run on a chip.
 *
 * Exactness: ops defined by IEEE operations alone (rsqrt, mse, count_rows, dropout_mask,
 * adamw) are compared bit for bit with their documented fp32 order, and against double
 * precision within bounds derived where they are asserted. Schedules are checked against
 * numbers worked out by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "ops/ops.h"
#include "chip/timing.h"
#include "xorshift.h"
#include "op_bufs.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static struct tpu_op mkop(enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t o2,
                          uint32_t i0, uint32_t i1, uint32_t i2)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = o0;
    op.out[1] = o1;
    op.out[2] = o2;
    op.in[0] = i0;
    op.in[1] = i1;
    op.in[2] = i2;
    return op;
}

#define X TPU_NO_BUF

static void run_ok(const struct tpu_op *op, struct bufs *s, int64_t *vars)
{
    struct tpu_diag d = {0, ""};
    int rc = tpu__op_compute(op, s->b, vars, 8, 1, NULL, &d);
    if (rc)
        fail_msg("unexpected error %d: %s", rc, d.msg);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* |got - want| <= ulps units in the last place of want (as f32). */
static void assert_near_ulps(float got, double want, double ulps, const char *what)
{
    double ulp = ldexp(1.0, ilogb((float)want) - 23);
    if (!(fabs((double)got - want) <= ulps * ulp))
        fail_msg("%s: got %.9g, want %.12g (within %g ulp)", what, (double)got, want, ulps);
}

/* ---- rsqrt ---------------------------------------------------------------------------------- */

static void test_rsqrt(void **state)
{
    (void)state;
    struct bufs s = {0};
    struct rng r = {0x1234};
    const uint32_t n = 257;
    float *x = bset(&s, 0, TPU_F32, 1, n), *y = bset(&s, 1, TPU_F32, 1, n);
    for (uint32_t i = 0; i < n; i++)
        x[i] = rnd_f32(&r, 0.0f, 100.0f);
    x[0] = -1e-3f; /* x + eps = 0: +Inf */
    x[1] = -1.0f;  /* negative: NaN */
    struct tpu_op op = mkop(TPU_OP_RSQRT, 1, X, X, 0, X, X);
    op.attrs.eps = 1e-3f;
    run_ok(&op, &s, NULL);
    assert_true(isinf(y[0]) && y[0] > 0);
    assert_true(isnan(y[1]));
    for (uint32_t i = 2; i < n; i++) {
        /* three roundings of at most half an ulp each: within 1.5 ulp of the exact value */
        assert_near_ulps(y[i], 1.0 / sqrt((double)x[i] + (double)1e-3f), 1.5, "rsqrt");
        float sum = x[i] + 1e-3f, root = sqrtf(sum);
        assert_int_equal(fbits(y[i]), fbits(1.0f / root));
    }
    /* in place (alias IN0) gives the same values */
    float *keep = malloc(n * sizeof *keep);
    memcpy(keep, y, n * sizeof *keep);
    op.out[0] = 0;
    run_ok(&op, &s, NULL);
    for (uint32_t i = 0; i < n; i++)
        assert_memory_equal(&x[i], &keep[i], 4);
    free(keep);
    bfree(&s);
}

/* ---- mse and count_rows ---------------------------------------------------------------------- */

static void test_mse(void **state)
{
    (void)state;
    struct bufs s = {0};
    struct rng r = {77};
    const uint32_t b = 6, k = 3;
    float *pred = bset(&s, 0, TPU_F32, b, k), *tgt = bset(&s, 1, TPU_F32, b, k);
    int32_t *mask = bset(&s, 2, TPU_INT32, b, 1);
    float *loss = bset(&s, 3, TPU_F32, 1, 1), *dp = bset(&s, 4, TPU_F32, b, k);
    for (uint32_t i = 0; i < b * k; i++) {
        pred[i] = rnd_f32(&r, -3.0f, 3.0f);
        tgt[i] = rnd_f32(&r, -3.0f, 3.0f);
        dp[i] = 99.0f; /* stale values the op must overwrite, padding rows included */
    }
    for (uint32_t i = 0; i < b; i++)
        mask[i] = (i == 1 || i == 4) ? -1 : 0;
    const float alpha = 1.0f / 6.0f;
    struct tpu_op op = mkop(TPU_OP_MSE, 3, 4, X, 0, 1, 2);
    op.attrs.alpha = alpha;
    run_ok(&op, &s, NULL);

    /* reference in double: loss = alpha * sum over real rows of mean_k (p - t)^2 */
    double ref = 0;
    for (uint32_t i = 0; i < b; i++) {
        if (mask[i] < 0)
            continue;
        double row = 0;
        for (uint32_t j = 0; j < k; j++) {
            double e = (double)pred[i * k + j] - tgt[i * k + j];
            row += e * e;
        }
        ref += row / k;
    }
    ref *= alpha;
    /* 4 real rows x 3 terms: about 20 fp32 roundings of at most 2^-24 relative each, all
     * terms positive, so the relative error stays below 20 * 2^-24 ~ 1.2e-6 */
    assert_true(fabs(*loss - ref) <= 1.2e-6 * ref);
    for (uint32_t i = 0; i < b; i++)
        for (uint32_t j = 0; j < k; j++) {
            float got = dp[i * k + j];
            if (mask[i] < 0) {
                assert_int_equal(fbits(got), 0u); /* +0 on padding */
                continue;
            }
            double e = (double)pred[i * k + j] - tgt[i * k + j];
            /* dL/dpred = alpha * 2 * e / K: within 2 ulp (e, the constant, the product) */
            assert_near_ulps(got, alpha * 2.0 * e / k, 2.0, "dpred");
            const float c = (alpha * 2.0f) / 3.0f;
            assert_int_equal(fbits(got), fbits(c * (pred[i * k + j] - tgt[i * k + j])));
        }
    /* the gradient is the loss's: a central difference of the double loss in one element */
    const double h = 1e-3;
    double up = 0, dn = 0;
    for (int sgn = 0; sgn < 2; sgn++) {
        double tot = 0;
        for (uint32_t i = 0; i < b; i++) {
            if (mask[i] < 0)
                continue;
            for (uint32_t j = 0; j < k; j++) {
                double p = pred[i * k + j] + (i == 2 && j == 1 ? (sgn ? -h : h) : 0);
                double e = p - tgt[i * k + j];
                tot += e * e / k;
            }
        }
        *(sgn ? &dn : &up) = alpha * tot;
    }
    assert_true(fabs((up - dn) / (2 * h) - dp[2 * k + 1]) < 1e-5);
    bfree(&s);
}

static void test_count_rows(void **state)
{
    (void)state;
    struct bufs s = {0};
    int32_t *lab = bset(&s, 0, TPU_INT32, 7, 1);
    float *y = bset(&s, 1, TPU_F32, 1, 2);
    const int32_t v[7] = {0, -1, 5, -7, 2, 0, -1};
    memcpy(lab, v, sizeof v);
    y[0] = y[1] = 42.0f;
    struct tpu_op op = mkop(TPU_OP_COUNT_ROWS, 1, X, X, 0, X, X);
    run_ok(&op, &s, NULL);
    assert_true(y[0] == 0.0f && !signbit(y[0]));
    assert_true(y[1] == 4.0f);
    bfree(&s);
}

/* ---- dropout_mask ---------------------------------------------------------------------------- */

/* The documented hash, written again from the header comment of sim/ops/ops_train_aux.c. */
static uint64_t ref_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static float ref_mask(uint64_t seed, int64_t step, uint64_t i, float rate)
{
    uint64_t key = ref_mix(ref_mix(seed) ^ (uint64_t)step);
    double u = (double)(ref_mix(key ^ i) >> 40) / 16777216.0;
    return u >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}

/* Runs dropout_mask into a [rows][cols] buffer on replica `replica` with `threads`. */
static float *mask_of(uint64_t seed, int64_t step, uint32_t replica, float rate, uint32_t rows,
                      uint32_t cols, unsigned threads)
{
    struct bufs s = {0};
    bset(&s, 0, TPU_F32, rows, cols);
    int64_t vars[2] = {0, step};
    struct tpu_op op = mkop(TPU_OP_DROPOUT_MASK, 0, X, X, X, X, X);
    op.attrs.var = 1;
    op.attrs.imm = (int64_t)seed;
    op.attrs.alpha = rate;
    struct tpu_diag d = {0, ""};
    if (tpu__op_compute_on(&op, s.b, vars, replica, 8, threads, NULL, &d) != 0)
        fail_msg("dropout_mask: %s", d.msg);
    return s.b[0].data; /* the caller frees it */
}

static size_t n_differ(const float *a, const float *b, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += fbits(a[i]) != fbits(b[i]);
    return c;
}

static void test_dropout_mask(void **state)
{
    (void)state;
    const uint32_t rows = 250, cols = 400;
    const size_t n = (size_t)rows * cols;
    const float rate = 0.3f, keep = 1.0f / (1.0f - rate);
    float *m = mask_of(12345, 7, 1, rate, rows, cols, 1);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(m[i] == 0.0f || m[i] == keep);
        kept += m[i] != 0.0f;
        /* replica 1: global index n + i */
        assert_int_equal(fbits(m[i]), fbits(ref_mask(12345, 7, n + i, rate)));
        assert_int_equal(fbits(m[i]), fbits(tpu_dropout_mask_value(12345, 7, n + i, rate)));
    }
    /* The kept count is Binomial(n = 100000, p = 0.7) if the hash is uniform: standard
     * deviation sqrt(n p (1 - p)) = 145 elements = 0.00145 of n. A bound of 0.01 is 6.9
     * standard deviations (a uniform hash misses it with probability below 1e-11); the mask
     * is deterministic, so the test's outcome never changes from run to run. */
    double frac = (double)kept / (double)n;
    printf("  dropout rate 0.3: kept fraction %.5f of %zu\n", frac, n);
    assert_true(fabs(frac - 0.7) < 0.01);

    /* the same (seed, step, replica) gives the same mask, with 1 or 2 host threads; changing
     * any of them changes about 2 p (1 - p) = 42% of the elements (at least 30% asserted) */
    float *same = mask_of(12345, 7, 1, rate, rows, cols, 2);
    assert_int_equal(n_differ(m, same, n), 0);
    float *other[3] = {mask_of(12346, 7, 1, rate, rows, cols, 1),
                       mask_of(12345, 8, 1, rate, rows, cols, 1),
                       mask_of(12345, 7, 0, rate, rows, cols, 1)};
    for (int k = 0; k < 3; k++) {
        assert_true(n_differ(m, other[k], n) > n * 3 / 10);
        free(other[k]);
    }
    free(same);
    free(m);

    /* rate 0 keeps everything at scale 1; a negative seed is its uint64 bits */
    m = mask_of((uint64_t)-5, 1, 0, 0.0f, 3, 5, 1);
    for (size_t i = 0; i < 15; i++)
        assert_true(m[i] == 1.0f);
    free(m);
    assert_int_equal(fbits(tpu_dropout_mask_value((uint64_t)-5, 3, 9, 0.5f)),
                     fbits(ref_mask((uint64_t)-5, 3, 9, 0.5f)));

    /* Sharding leaves the masks alone: one replica of 2B rows draws what replicas 0 and 1 of
     * B rows each draw, laid end to end (the global batch split in order). */
    const uint32_t B = 6, C = 7;
    float *whole = mask_of(2024, 5, 0, 0.5f, 2 * B, C, 1);
    float *half[2] = {mask_of(2024, 5, 0, 0.5f, B, C, 1), mask_of(2024, 5, 1, 0.5f, B, C, 2)};
    assert_int_equal(n_differ(whole, half[0], (size_t)B * C), 0);
    assert_int_equal(n_differ(whole + (size_t)B * C, half[1], (size_t)B * C), 0);
    assert_true(n_differ(half[0], half[1], (size_t)B * C) > 0);
    free(half[0]);
    free(half[1]);
    free(whole);

    /* an unverified program with a rate of 1 fails cleanly */
    struct bufs s = {0};
    bset(&s, 0, TPU_F32, 2, 2);
    int64_t vars[1] = {1};
    struct tpu_op op = mkop(TPU_OP_DROPOUT_MASK, 0, X, X, X, X, X);
    op.attrs.alpha = 1.0f;
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu__op_compute(&op, s.b, vars, 8, 1, NULL, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "dropout_mask: the rate (alpha) is 1 but must lie in [0, 1)"));
    bfree(&s);
}

/* ---- adamw and schedules --------------------------------------------------------------------- */

static void test_adamw(void **state)
{
    (void)state;
    struct bufs s = {0};
    float *p = bset(&s, 0, TPU_F32, 1, 2), *m = bset(&s, 1, TPU_F32, 1, 2);
    float *v = bset(&s, 2, TPU_F32, 1, 2), *g = bset(&s, 3, TPU_F32, 1, 2);
    p[0] = 1.0f;
    p[1] = -2.0f;
    g[0] = 0.5f;
    g[1] = 0.25f;
    struct tpu_op op = mkop(TPU_OP_ADAMW, 0, 1, 2, 3, X, X);
    op.attrs = (struct tpu_op_attrs){.var = 0, .alpha = 0.01f, .beta = 0.9f, .gamma = 0.1f,
                                     .delta = 0.999f, .eps = 1e-7f};
    int64_t vars[1] = {1};
    run_ok(&op, &s, vars);
    /* By hand, t = 1, element 0: m = (1 - b1) * 0.5 = 0.05, v = (1 - b2) * 0.25 = 0.00025
     * (b1, b2 the f32 values of 0.9 and 0.999: 1 - b1 = 0.10000002384),
     * mhat = m / (1 - b1) = 0.5, vhat = v / (1 - b2) = 0.25, sqrt = 0.5,
     * update = 0.01 * (0.5 / (0.5 + 1e-7) + 0.1 * 1) = 0.01 * 1.0999998 = 0.010999998,
     * p = 0.989000002. Element 1: mhat = 0.25, vhat = 0.0625, sqrt 0.25, quotient
     * 0.9999996, decay 0.1 * -2 = -0.2: p = -2 - 0.01 * 0.7999996 = -2.007999996.
     * The fp32 steps round each value; 4 ulp covers the dozen roundings. */
    assert_near_ulps(p[0], 0.989000002, 4, "adamw p[0] t=1");
    assert_near_ulps(p[1], -2.007999996, 4, "adamw p[1] t=1");
    assert_near_ulps(m[0], (1.0 - (double)0.9f) * 0.5, 1, "adamw m");
    assert_near_ulps(v[0], (1.0 - (double)0.999f) * 0.25, 2, "adamw v");
    /* the documented fp32 order, bit for bit, for a second step */
    float pr[2], mr[2], vr[2];
    memcpy(pr, p, 8);
    memcpy(mr, m, 8);
    memcpy(vr, v, 8);
    vars[0] = 2;
    run_ok(&op, &s, vars);
    const float c1 = (float)(1.0 - 0.9f * (double)0.9f); /* 1 - b1^2 in double, once */
    const float c2 = (float)(1.0 - 0.999f * (double)0.999f);
    for (int i = 0; i < 2; i++) {
        mr[i] = 0.9f * mr[i] + (1.0f - 0.9f) * g[i];
        vr[i] = 0.999f * vr[i] + (1.0f - 0.999f) * (g[i] * g[i]);
        float mh = mr[i] / c1, vh = vr[i] / c2;
        pr[i] = pr[i] - 0.01f * (mh / (sqrtf(vh) + 1e-7f) + 0.1f * pr[i]);
        assert_int_equal(fbits(p[i]), fbits(pr[i]));
        assert_int_equal(fbits(m[i]), fbits(mr[i]));
        assert_int_equal(fbits(v[i]), fbits(vr[i]));
    }
    bfree(&s);
}

static struct tpu_op_attrs sched(int32_t kind, float alpha, uint32_t warmup, uint32_t steps,
                                 float rate)
{
    return (struct tpu_op_attrs){.alpha = alpha, .schedule = kind, .warmup = warmup,
                                 .decay_steps = steps, .decay_rate = rate};
}

static void test_schedule_values(void **state)
{
    (void)state;
    struct tpu_op_attrs a = sched(TPU_SCHEDULE_CONSTANT, 0.1f, 0, 0, 0);
    assert_true(tpu_lr_schedule_value(&a, 1) == 0.1f);
    assert_true(tpu_lr_schedule_value(&a, 1000000) == 0.1f);
    /* step: 0.1 * 0.5^floor(s / 10), s = step - 1 (powers of two scale exactly) */
    a = sched(TPU_SCHEDULE_STEP, 0.1f, 0, 10, 0.5f);
    assert_true(tpu_lr_schedule_value(&a, 1) == 0.1f);   /* s = 0 */
    assert_true(tpu_lr_schedule_value(&a, 10) == 0.1f);  /* s = 9 */
    assert_true(tpu_lr_schedule_value(&a, 11) == 0.05f); /* s = 10 */
    assert_true(tpu_lr_schedule_value(&a, 31) == 0.0125f);
    a = sched(TPU_SCHEDULE_STEP, 1.0f, 0, 3, 0.1f); /* 0.1^2 = 0.01 at s = 6, with 0.1's f32 */
    assert_near_ulps(tpu_lr_schedule_value(&a, 7), (double)0.1f * (double)0.1f, 0.5,
                     "step 0.1^2");
    /* cosine, lr 1, warm-up 4, decay over 8 to 0.1 */
    a = sched(TPU_SCHEDULE_COSINE, 1.0f, 4, 8, 0.1f);
    assert_true(tpu_lr_schedule_value(&a, 1) == 0.0f);  /* warm-up's first step: s = 0 */
    assert_true(tpu_lr_schedule_value(&a, 2) == 0.25f); /* 1 * 1 / 4 */
    assert_true(tpu_lr_schedule_value(&a, 4) == 0.75f);
    assert_true(tpu_lr_schedule_value(&a, 5) == 1.0f);  /* s = 4: cos 0 = 1 */
    assert_true(tpu_lr_schedule_value(&a, 9) == 0.55f); /* halfway: 0.1 + 0.9 * 0.5 */
    /* s - warmup = 2: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 4)) = 0.1 + 0.45 * 1.70710678 */
    assert_near_ulps(tpu_lr_schedule_value(&a, 7), 0.868198052, 0.5, "cosine pi/4");
    assert_true(tpu_lr_schedule_value(&a, 13) == 0.1f); /* the end: s - warmup = 8 */
    assert_true(tpu_lr_schedule_value(&a, 500) == 0.1f); /* and after it */
    a = sched(TPU_SCHEDULE_COSINE, 0.5f, 0, 4, 0.0f);   /* no warm-up, down to 0 */
    assert_true(tpu_lr_schedule_value(&a, 1) == 0.5f);
    assert_true(tpu_lr_schedule_value(&a, 5) == 0.0f);

    /* the optimizers use it: sgd_momentum at step 11 of the step schedule uses lr 0.05 */
    struct bufs s = {0};
    float *p = bset(&s, 0, TPU_F32, 1, 1), *vel = bset(&s, 1, TPU_F32, 1, 1);
    float *g = bset(&s, 2, TPU_F32, 1, 1);
    *p = 1.0f;
    *g = 2.0f;
    struct tpu_op op = mkop(TPU_OP_SGD_MOMENTUM, 0, 1, X, 2, X, X);
    op.attrs = sched(TPU_SCHEDULE_STEP, 0.1f, 0, 10, 0.5f);
    op.attrs.var = 1;
    int64_t vars[2] = {0, 11};
    run_ok(&op, &s, vars);
    assert_true(*vel == 2.0f && *p == 1.0f - 0.05f * 2.0f);
    /* adam and adamw at step 11 of that schedule equal their constant-rate update with
     * alpha 0.05, bit for bit (the rate is the only thing the schedule changes) */
    float *m = bset(&s, 3, TPU_F32, 1, 1), *v = bset(&s, 4, TPU_F32, 1, 1);
    for (int code = TPU_OP_ADAM; code <= TPU_OP_ADAMW; code++) {
        float after[2];
        for (int k = 0; k < 2; k++) {
            *p = 1.0f;
            *m = *v = 0.0f;
            struct tpu_op ad = mkop((enum tpu_opcode)code, 0, 3, 4, 2, X, X);
            ad.attrs = k ? sched(TPU_SCHEDULE_STEP, 0.1f, 0, 10, 0.5f)
                         : sched(TPU_SCHEDULE_CONSTANT, 0.05f, 0, 0, 0);
            ad.attrs.var = 1;
            ad.attrs.beta = 0.9f;
            ad.attrs.delta = 0.999f;
            ad.attrs.eps = 1e-7f;
            ad.attrs.gamma = 0.01f;
            vars[1] = 11;
            run_ok(&ad, &s, vars);
            after[k] = *p;
        }
        assert_int_equal(fbits(after[0]), fbits(after[1]));
        assert_true(after[0] < 1.0f);
    }
    vars[1] = 0; /* a scheduled update before the first var_add fails cleanly */
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu__op_compute(&op, s.b, vars, 8, 1, NULL, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "sgd_momentum: the learning-rate schedule reads step "
                                  "variable 1, which holds 0 but must be at least 1"));
    bfree(&s);
}

/* ---- programs: text, verifier, chip --------------------------------------------------------- */

static struct tpu_program *parse_ok(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

static const char round_trip_text[] =
    "program train_ops\n"
    "\n"
    "var n\n"
    "var step\n"
    "\n"
    "param w: f32[4, 3]\n"
    "param m: f32[4, 3]\n"
    "param v: f32[4, 3]\n"
    "param w2: f32[4, 3]\n"
    "param m2: f32[4, 3]\n"
    "param v2: f32[4, 3]\n"
    "temp  x: f32[4, 3]\n"
    "temp  t: f32[4, 3]\n"
    "temp  k: int32[4, 1]\n"
    "temp  s: f32[1, 1]\n"
    "temp  g: f32[4, 3]\n"
    "temp  c: f32[1, 2]\n"
    "temp  d: f32[4, 3]\n"
    "\n"
    "loop n {\n"
    "  var_add step 1\n"
    "  x = infeed\n"
    "  t = infeed\n"
    "  k = infeed\n"
    "  x = rsqrt x eps=0.001\n"
    "  s, g = mse x, t, k alpha=0.25\n"
    "  c = count_rows k\n"
    "  d = dropout_mask var=step imm=-42 alpha=0.5\n"
    "  w, m = sgd_momentum g var=step alpha=0.1 beta=0.9 schedule=step decay_steps=10 "
    "decay_rate=0.5\n"
    "  w2, m2, v2 = adamw g var=step alpha=0.001 beta=0.9 gamma=0.004 delta=0.999 eps=1e-07 "
    "schedule=cosine warmup=5 decay_steps=100 decay_rate=0.1\n"
    "  outfeed c\n"
    "  outfeed d\n"
    "}\n";

static void test_text_and_verify_ok(void **state)
{
    (void)state;
    struct tpu_program *p = parse_ok(round_trip_text);
    char *printed = NULL;
    assert_int_equal(tpu_program_to_string(p, &printed), 0);
    assert_string_equal(printed, round_trip_text);
    free(printed);
    const struct tpu_op *op = tpu_program_op(p, 5);
    assert_int_equal(op->code, TPU_OP_RSQRT);
    op = tpu_program_op(p, 6);
    assert_int_equal(op->in[2], 8); /* the third input: mask k */
    op = tpu_program_op(p, 8);
    assert_true(op->attrs.imm == -42 && op->attrs.var == 1 && op->attrs.alpha == 0.5f);
    op = tpu_program_op(p, 10);
    assert_int_equal(op->attrs.schedule, TPU_SCHEDULE_COSINE);
    assert_int_equal(op->attrs.warmup, 5);
    assert_int_equal(op->attrs.decay_steps, 100);
    assert_true(op->attrs.decay_rate == 0.1f);
    struct tpu_diag d = {0, ""};
    if (tpu_program_verify(p, NULL, &d) != 0)
        fail_msg("verify: %s", d.msg);
    tpu_program_destroy(&p);
    /* schedule is optional (absent = constant), and integers spell it too */
    p = parse_ok("program a\nvar t\nparam w: f32[1, 1]\nparam u: f32[1, 1]\n"
                 "w, u = sgd_momentum w alpha=1 schedule=2 var=t decay_steps=3\n");
    assert_int_equal(tpu_program_op(p, 0)->attrs.schedule, TPU_SCHEDULE_COSINE);
    tpu_program_destroy(&p);
}

/* The vector unit's cost: vpu_ops per element of the largest operand (timing.c's reasons). */
static void test_timing(void **state)
{
    (void)state;
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_RSQRT), 5);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_MSE), 5);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_COUNT_ROWS), 2);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_DROPOUT_MASK), 14);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_ADAMW), 22);
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0, ""};
    if (tpu_config_load_preset("tiny", &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    struct tpu_program *p = parse_ok(round_trip_text);
    uint64_t cycles, slots, macs;
    /* tiny: 8 x 8 lanes x 1 ALU = 64 operations a cycle, plus the pipeline's latency */
    const struct tpu_op *op = tpu_program_op(p, 6); /* mse over pred [4][3]: 12 x 5 ops */
    assert_int_equal(tpu__op_cost(&cfg, p, op, &cycles, &slots, &macs), TPU_UNIT_VPU);
    assert_int_equal(cycles, (12 * 5 + 63) / 64 + TPU__VPU_LATENCY_CYCLES);
    op = tpu_program_op(p, 8); /* dropout_mask [4][3]: 12 x 14 ops */
    assert_int_equal(tpu__op_cost(&cfg, p, op, &cycles, &slots, &macs), TPU_UNIT_VPU);
    assert_int_equal(cycles, (12 * 14 + 63) / 64 + TPU__VPU_LATENCY_CYCLES);
    tpu_program_destroy(&p);
}

struct bad {
    const char *body; /* after VHEAD */
    int rc;
    const char *want;
};

#define VHEAD                                                                                 \
    "program bad\nvar n\nvar step\nparam w: f32[4, 3]\nparam m: f32[4, 3]\n"                  \
    "param v: f32[4, 3]\ntemp x: f32[4, 3]\ntemp t: f32[4, 3]\ntemp k: int32[4, 1]\n"          \
    "temp f: f32[4, 1]\ntemp s: f32[1, 1]\ntemp g: f32[4, 3]\ntemp c: f32[1, 2]\n"             \
    "temp i: int32[4, 3]\nx = infeed\nt = infeed\nk = infeed\nf = infeed\n"

static const struct bad bad_cases[] = {
    {"s, g = mse x, t, f alpha=1\n", TPU_ESHAPE,
     "mse input mask 'f' is f32, but mse needs it int32"},
    {"s, g = mse x, f, k alpha=1\n", TPU_ESHAPE,
     "mse input target 'f' is [4, 1] but must be [4, 3] (one target per prediction)"},
    {"c, g = mse x, t, k alpha=1\n", TPU_ESHAPE,
     "mse output loss 'c' is [1, 2] but must be [1, 1] (the loss is a scalar)"},
    {"s, c = mse x, t, k alpha=1\n", TPU_ESHAPE, "mse output dpred 'c' is [1, 2] but must be"},
    {"c = count_rows f\n", TPU_ESHAPE, "count_rows input labels 'f' is f32, but count_rows "
     "needs it int32"},
    {"s = count_rows k\n", TPU_ESHAPE, "count_rows output y 's' is [1, 1] but must be [1, 2]"},
    {"g = dropout_mask var=step imm=1 alpha=1\n", TPU_EINVAL,
     "dropout_mask alpha=1 is the dropout rate, which must lie in [0, 1)"},
    {"i = dropout_mask var=step imm=1 alpha=0.5\n", TPU_ESHAPE,
     "dropout_mask output mask 'i' is int32, but dropout_mask needs it f32"},
    {"loop n {\ng = dropout_mask var=n imm=1 alpha=0.5\n}\n", TPU_EINVAL,
     "dropout_mask var=n is the loop's trip-count variable"},
    {"w, m = sgd_momentum x alpha=1 schedule=step var=step decay_rate=0.5\n", TPU_EINVAL,
     "sgd_momentum schedule=step has decay_steps=0"},
    {"w, m = sgd_momentum x alpha=1 schedule=step var=step warmup=2 decay_steps=3 "
     "decay_rate=0.5\n", TPU_EINVAL, "sgd_momentum schedule=step has warmup=2, but the step "
     "schedule has no warm-up"},
    {"w, m = sgd_momentum x alpha=1 schedule=step var=step decay_steps=3\n", TPU_EINVAL,
     "sgd_momentum schedule=step has decay_rate=0"},
    {"w, m, v = adamw x var=step alpha=1 beta=0.9 delta=0.9 eps=1 schedule=cosine "
     "decay_steps=3 decay_rate=1.5\n", TPU_EINVAL, "adamw schedule=cosine has decay_rate=1.5"},
    {"w, m, v = adam x var=step alpha=1 beta=0.9 delta=0.9 eps=1 decay_rate=0.5\n", TPU_EINVAL,
     "adam schedule=constant reads none of warmup, decay_steps, decay_rate"},
    {"w, m = sgd_momentum x alpha=1 schedule=7 var=step\n", TPU_EINVAL,
     "sgd_momentum schedule=7 is not a schedule"},
    {"loop n {\nw, m = sgd_momentum x alpha=1 schedule=cosine var=n decay_steps=2\n}\n",
     TPU_EINVAL, "sgd_momentum's schedule reads var=n, the loop's trip-count variable"},
    {"w, m, v = adamw x var=step alpha=1 beta=1 delta=0.9 eps=1\n", TPU_EINVAL,
     "adamw's decay rates b1 (beta) and b2 (delta) must lie in [0, 1)"},
    {"x = rsqrt t eps=nan\n", TPU_EINVAL, "eps=nan is not finite"},
    {"x = rsqrt i eps=1\n", TPU_ESHAPE, "input x 'i' int32[4, 3] is int32, but rsqrt computes "
     "in f32"},
    {"m, v = sgd_momentum x alpha=1 schedule=cosine var=step decay_steps=2 "
     "decay_rate=nan\n", TPU_EINVAL, "decay_rate=nan is not finite"},
};

static void test_verify_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", VHEAD, bad_cases[i].body);
        struct tpu_program *p = parse_ok(text);
        struct tpu_diag d = {0, ""};
        int rc = tpu_program_verify(p, NULL, &d);
        if (rc != bad_cases[i].rc || !strstr(d.msg, bad_cases[i].want))
            fail_msg("case %zu: got %s \"%s\"\nwant %s with \"%s\"", i, tpu_err_name(rc), d.msg,
                     tpu_err_name(bad_cases[i].rc), bad_cases[i].want);
        tpu_program_destroy(&p);
    }
    /* the text form: missing required attributes, a scheduled sgd_momentum without var */
    static const char *const parse_bad[][2] = {
        {"x = rsqrt t\n", "rsqrt needs attribute eps=<float>"},
        {"g = dropout_mask var=step alpha=0.5\n", "dropout_mask needs attribute imm=<int>"},
        {"g = dropout_mask imm=3\n", "dropout_mask needs attribute var=<variable>"},
        {"g = dropout_mask var=step imm=3\n", "dropout_mask needs attribute alpha=<float>"},
        {"w, m = sgd_momentum x alpha=1 schedule=step decay_steps=2 decay_rate=0.5\n",
         "sgd_momentum with a schedule other than constant needs attribute var=<variable>"},
        {"w, m = sgd_momentum x alpha=1 schedule=linear\n", "schedule=linear is not known; "
         "write schedule=constant, schedule=step or schedule=cosine"},
        {"w, m = sgd_momentum x alpha=1 warmup=1 warmup=2\n", "attribute 'warmup' given twice"},
        {"w, m = sgd_momentum x alpha=1 decay_steps=-1\n", "decay_steps=-1 is out of range"},
        {"x = rsqrt t eps=1 schedule=step\n", "unknown attribute 'schedule' for rsqrt"},
        {"s, g = mse x, t alpha=1\n", "mse takes 3 inputs (pred, target, mask), got 2"},
    };
    for (size_t i = 0; i < sizeof parse_bad / sizeof parse_bad[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", VHEAD, parse_bad[i][0]);
        struct tpu_program *p = NULL;
        struct tpu_diag d = {0, ""};
        int rc = tpu_program_parse(text, "t", &p, &d);
        if (rc != TPU_EPARSE || !strstr(d.msg, parse_bad[i][1]))
            fail_msg("parse case %zu: got %s \"%s\"\nwant \"%s\"", i, tpu_err_name(rc), d.msg,
                     parse_bad[i][1]);
    }
    /* built: a schedule on an op that does not read it */
    struct tpu_program *p = parse_ok(VHEAD);
    struct tpu_op op = mkop(TPU_OP_RSQRT, 6, X, X, 7, X, X);
    op.attrs.eps = 1.0f;
    op.attrs.warmup = 3;
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu_program_add_op(p, &op, &d), 0);
    assert_int_equal(tpu_program_verify(p, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "rsqrt does not read attribute warmup, which is set"));
    tpu_program_destroy(&p);
    /* sgd_momentum without a schedule needs no variable; with one it does */
    assert_int_equal(tpu_program_create("novar", &p), 0);
    assert_int_equal(tpu_program_add_buffer(p, "w", TPU_F32, TPU_BUF_PARAM, 1, 1, NULL, &d), 0);
    assert_int_equal(tpu_program_add_buffer(p, "u", TPU_F32, TPU_BUF_PARAM, 1, 1, NULL, &d), 0);
    op = mkop(TPU_OP_SGD_MOMENTUM, 0, 1, X, 0, X, X);
    op.attrs.alpha = 1.0f;
    assert_int_equal(tpu_program_add_op(p, &op, &d), 0);
    op.attrs.schedule = TPU_SCHEDULE_STEP;
    assert_int_equal(tpu_program_add_op(p, &op, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "variable id 0, but the program has 0 variables"));
    tpu_program_destroy(&p);
}

static struct tpu_device *open_tiny(unsigned threads, uint32_t n_chips, uint32_t cpr)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0, ""};
    if (tpu_config_load_preset("tiny", &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.n_chips = n_chips;
    s.n_threads = threads;
    s.cores_per_replica = cpr;
    struct tpu_device *dev = NULL;
    if (tpu_device_open(&s, &dev, &d) != 0)
        fail_msg("open: %s", d.msg);
    return dev;
}

static void load_run(struct tpu_device *dev, const struct tpu_program *p, bool load)
{
    struct tpu_diag d = {0, ""};
    if (load && tpu_device_load(dev, p, &d) != 0)
        fail_msg("load: %s", d.msg);
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
}

/* A step schedule inside the loop, over two launches: the rate follows the step counter. */
static void test_schedule_on_chip(void **state)
{
    (void)state;
    struct tpu_program *p = parse_ok(
        "program sched\nvar n\nvar step\nparam w: f32[1, 4]\nparam vel: f32[1, 4]\n"
        "param g: f32[1, 4]\nloop n {\n  var_add step 1\n"
        "  w, vel = sgd_momentum g var=step alpha=1 schedule=step decay_steps=2 "
        "decay_rate=0.5\n}\n");
    struct tpu_device *dev = open_tiny(1, 1, 1);
    load_run(dev, p, true); /* n = 0: loaded, nothing runs */
    const float ones[4] = {1, 1, 1, 1};
    struct tpu_diag d = {0, ""};
    for (uint32_t c = 0; c < 2; c++)
        assert_int_equal(tpu_device_write(dev, c, 2, ones, sizeof ones, &d), 0);
    tpu_device_set_var(dev, 0, 5);
    load_run(dev, p, false);
    /* rates at s = 0..4: 1, 1, 0.5, 0.5, 0.25 (beta 0: each step subtracts lr * 1) */
    float w[4];
    assert_int_equal(tpu_device_read(dev, 1, 0, w, sizeof w, &d), 0);
    for (int i = 0; i < 4; i++)
        assert_true(w[i] == -3.25f);
    tpu_device_set_var(dev, 0, 2); /* s = 5, 6: 0.25, 0.125 */
    load_run(dev, p, false);
    assert_int_equal(tpu_device_read(dev, 0, 0, w, sizeof w, &d), 0);
    assert_true(w[0] == -3.625f);
    assert_int_equal(tpu_device_get_var(dev, 0, 1), 7);
    /* the host's logging value agrees with what the chip applied at step 7 */
    assert_true(tpu_lr_schedule_value(&tpu_program_op(p, 2)->attrs, 7) == 0.125f);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* dropout_mask on 4 cores, 2 per replica: each replica's cores draw one mask, the replicas
 * differ (replica r's elements have global indices r * 128 + i), every value is
 * tpu_dropout_mask_value's, and host threads change nothing. */
static void test_dropout_on_chip(void **state)
{
    (void)state;
    struct tpu_program *p = parse_ok(
        "program drop\nvar n\nvar step\ntemp m: f32[8, 16]\nparam out: f32[8, 16]\n"
        "loop n {\n  var_add step 1\n  m = dropout_mask var=step imm=99 alpha=0.5\n"
        "  out = convert m\n}\n");
    float got[2][4][128];
    for (unsigned th = 1; th <= 2; th++) {
        struct tpu_device *dev = open_tiny(th, 2, 2);
        load_run(dev, p, true);
        tpu_device_set_var(dev, 0, 3);
        load_run(dev, p, false);
        struct tpu_diag d = {0, ""};
        for (uint32_t c = 0; c < 4; c++)
            assert_int_equal(tpu_device_read(dev, c, 1, got[th - 1][c], 512, &d), 0);
        tpu_device_close(&dev);
    }
    assert_memory_equal(got[0], got[1], sizeof got[0]);
    for (uint32_t c = 0; c < 4; c++)
        for (uint64_t i = 0; i < 128; i++)
            assert_int_equal(fbits(got[0][c][i]),
                             fbits(tpu_dropout_mask_value(99, 3, (c / 2) * 128 + i, 0.5f)));
    assert_memory_equal(got[0][0], got[0][1], 512);
    assert_true(n_differ(got[0][0], got[0][2], 128) > 128 * 3 / 10);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rsqrt),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_count_rows),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_schedule_values),
        cmocka_unit_test(test_text_and_verify_ok),
        cmocka_unit_test(test_verify_errors),
        cmocka_unit_test(test_timing),
        cmocka_unit_test(test_schedule_on_chip),
        cmocka_unit_test(test_dropout_on_chip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
