/* The values of the device program's local ops (sim/ops/ops.h, tpu__op_compute) against
 * references written here, independently of sim/.
 *
 * Exact where the definition allows: matmul against a naive loop that follows mxu.h's order
 * literally; add/sub/mul/max/scale/relu/relu_grad, convert, reductions (in their documented
 * order), sgd_momentum and adam (their documented fp32 order; adam uses only IEEE operations
 * and sqrtf) are compared bit for bit, NaNs as NaNs. Where an op uses the host's expf/logf
 * (exp, softmax_xent) values are checked against double precision with tolerances derived in
 * the test, and bit for bit against the documented order on this host's libm. softmax_xent's
 * gradient is checked against central differences of the loss in double; adam's bias
 * correction against double precision at t = 1 and t = 10. Error paths check the message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/bf16.h"
#include "tpusim/mxu.h"
#include "tpusim/program.h"
#include "ops/ops.h"
#include "chip/timing.h"
#include "xorshift.h"
#include "ref_gemm.h"
#include "op_bufs.h"

/* ---- data ------------------------------------------------------------------------------------ */

/* Mostly ordinary values, with -0, +-Inf, NaN, subnormals and extremes mixed in. */
static float rnd_edge(struct rng *r)
{
    static const uint32_t pool[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                    0x7FC00000u, 0xFFA00001u, 0x00000001u, 0x807FFFFFu,
                                    0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0x00800000u};
    if (rnd_below(r, 4) == 0)
        return tpu_f32_from_bits(pool[rnd_below(r, sizeof pool / sizeof pool[0])]);
    return rnd_f32(r, -8.0f, 8.0f);
}

static size_t dt_bytes(enum tpu_dtype t)
{
    return t == TPU_BF16 ? 2 : t == TPU_INT8 ? 1 : 4;
}

static struct tpu_op mkop(enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t o2,
                          uint32_t i0, uint32_t i1)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = o0;
    op.out[1] = o1;
    op.out[2] = o2;
    op.in[0] = i0;
    op.in[1] = i1;
    return op;
}

#define X TPU_NO_BUF

static int run(const struct tpu_op *op, struct bufs *s, int64_t *vars, struct tpu_diag *d)
{
    return tpu__op_compute(op, s->b, vars, 8, 1, NULL, d);
}

/* run_ok with a scratch arena (NULL: the op allocates its own working memory). */
static int run_ok_arena(const struct tpu_op *op, struct bufs *s, struct tpu__scratch *arena)
{
    struct tpu_diag d = {0, ""};
    int64_t vars[4] = {0};
    int rc = tpu__op_compute(op, s->b, vars, 8, 1, arena, &d);
    if (rc)
        printf("  unexpected error %d: %s\n", rc, d.msg);
    return rc;
}

static int run_ok(const struct tpu_op *op, struct bufs *s)
{
    return run_ok_arena(op, s, NULL);
}

/* Expects code and a message containing each of the (NULL-terminated) fragments. */
static void expect_error(int rc, const struct tpu_diag *d, int code, ...)
{
    if (rc != code)
        printf("  got %d, message: %s\n", rc, d->msg);
    assert_int_equal(rc, code);
    va_list ap;
    va_start(ap, code);
    for (const char *frag = va_arg(ap, const char *); frag; frag = va_arg(ap, const char *)) {
        if (!strstr(d->msg, frag))
            fail_msg("message \"%s\" lacks \"%s\"", d->msg, frag);
    }
    va_end(ap);
}

/* ---- comparison ------------------------------------------------------------------------------ */

static bool same_f32(float a, float b)
{
    return tpu_f32_bits(a) == tpu_f32_bits(b) || (isnan(a) && isnan(b));
}

/* Bit-for-bit (NaNs as NaNs); on failure prints the largest difference and first mismatches. */
static void expect_same(const float *got, const float *want, size_t count, const char *what)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        if (same_f32(got[i], want[i]))
            continue;
        double dd = fabs((double)got[i] - (double)want[i]);
        worst = isnan(dd) || dd > worst ? (isnan(dd) ? INFINITY : dd) : worst;
        if (bad < 5)
            printf("  %s: [%zu] got 0x%08X (%.9g) want 0x%08X (%.9g)\n", what, i,
                   (unsigned)tpu_f32_bits(got[i]), (double)got[i],
                   (unsigned)tpu_f32_bits(want[i]), (double)want[i]);
        bad++;
    }
    if (bad) {
        printf("  %s: %zu of %zu differ, largest difference %g\n", what, bad, count, worst);
        fail_msg("%s: results differ from the reference", what);
    }
}

/* |got - want| <= tol[i] for every i; prints the worst ratio and the first failures. */
static void expect_close(const float *got, const double *want, const double *tol, size_t count,
                         const char *what)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double err = fabs((double)got[i] - want[i]);
        double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0);
        if (ratio > worst || isnan(err))
            worst = isnan(err) ? INFINITY : ratio;
        if (err <= tol[i])
            continue;
        if (bad < 5)
            printf("  %s: [%zu] got %.9g want %.17g (error %.3g, tolerance %.3g)\n", what, i,
                   (double)got[i], want[i], err, tol[i]);
        bad++;
    }
    if (bad) {
        printf("  %s: %zu of %zu outside tolerance, worst error/tolerance %.3g\n", what, bad,
               count, worst);
        fail_msg("%s: results outside tolerance", what);
    }
}

/* ---- matmul reference ------------------------------------------------------------------------ */

/* op(s) as a row-major [R'][C'] array of bf16 (f32 rounded to nearest even), by plain
 * indexing. */
static tpu_bf16 *opnd_bf16(const struct tpu__bufmem *s, bool trans)
{
    size_t r = trans ? s->cols : s->rows, c = trans ? s->rows : s->cols;
    tpu_bf16 *o = malloc((r * c + 1) * sizeof *o);
    assert_non_null(o);
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < c; j++) {
            size_t src = trans ? j * s->cols + i : i * s->cols + j;
            if (s->dtype == TPU_BF16)
                o[i * c + j] = ((const tpu_bf16 *)s->data)[src];
            else
                o[i * c + j] = tpu_bf16_from_f32(((const float *)s->data)[src]);
        }
    return o;
}

static float *opnd_f32(const struct tpu__bufmem *s, bool trans)
{
    size_t r = trans ? s->cols : s->rows, c = trans ? s->rows : s->cols;
    float *o = malloc((r * c + 1) * sizeof *o);
    assert_non_null(o);
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < c; j++) {
            size_t src = trans ? j * s->cols + i : i * s->cols + j;
            o[i * c + j] = s->dtype == TPU_BF16
                               ? tpu_bf16_to_f32(((const tpu_bf16 *)s->data)[src])
                               : ((const float *)s->data)[src];
        }
    return o;
}

/* Fills buffer `id` with random values of its dtype. */
static void fill(struct rng *r, struct tpu__bufmem *b)
{
    size_t count = (size_t)b->rows * b->cols;
    for (size_t i = 0; i < count; i++) {
        if (b->dtype == TPU_F32)
            ((float *)b->data)[i] = rnd_f32(r, -2.0f, 2.0f);
        else if (b->dtype == TPU_BF16)
            ((tpu_bf16 *)b->data)[i] = tpu_bf16_from_f32(rnd_f32(r, -2.0f, 2.0f));
        else if (b->dtype == TPU_INT8)
            ((int8_t *)b->data)[i] = (int8_t)(rnd(r) >> 56);
        else
            ((int32_t *)b->data)[i] = (int32_t)(uint32_t)rnd(r);
    }
}

static const uint32_t M_ = 37, K_ = 150, N_ = 45;

/* Sets up a (0) = op(a) [M_][K_] and b (1) = op(b) [K_][N_] stored as the transposes ask, y (2)
 * [M_][N_] with random prior values. */
static void setup_matmul(struct bufs *s, struct rng *r, enum tpu_dtype ta_t,
                         enum tpu_dtype tb_t, bool ta, bool tb, enum tpu_dtype yt)
{
    bset(s, 0, ta_t, ta ? K_ : M_, ta ? M_ : K_);
    bset(s, 1, tb_t, tb ? N_ : K_, tb ? K_ : N_);
    bset(s, 2, yt, M_, N_);
    fill(r, &s->b[0]);
    fill(r, &s->b[1]);
    fill(r, &s->b[2]);
}

static struct tpu_op matmul_op(bool ta, bool tb, unsigned passes, bool acc)
{
    struct tpu_op op = mkop(TPU_OP_MATMUL, 2, X, X, 0, 1);
    op.attrs.trans_a = ta;
    op.attrs.trans_b = tb;
    op.attrs.passes = (uint8_t)passes;
    op.attrs.accumulate = acc;
    return op;
}

/* passes 1: f32 rounded to bf16, bf16 as is, mixed; every transpose; fresh and accumulating;
 * R = 8 (many tiles) and 128 (two tiles, one partial); 1 and 2 threads; working memory of
 * its own and from an arena reused by every case. */
static void test_matmul_bf16(void **state)
{
    (void)state;
    struct rng r = {0x1234};
    struct tpu__scratch arena = {{NULL}, {0}};
    const enum tpu_dtype kinds[3][2] = {
        {TPU_F32, TPU_F32}, {TPU_BF16, TPU_BF16}, {TPU_F32, TPU_BF16}};
    const size_t mn = (size_t)M_ * N_;
    for (int kd = 0; kd < 3; kd++)
        for (int tr = 0; tr < 4; tr++)
            for (int acc = 0; acc < 2; acc++)
                for (unsigned rows = 8; rows <= 128; rows *= 16) {
                    bool ta = tr & 1, tb = tr & 2;
                    struct bufs s = {0};
                    setup_matmul(&s, &r, kinds[kd][0], kinds[kd][1], ta, tb, TPU_F32);
                    tpu_bf16 *a = opnd_bf16(&s.b[0], ta), *b = opnd_bf16(&s.b[1], tb);
                    float *want = malloc(mn * sizeof *want), *y0 = malloc(mn * sizeof *y0);
                    assert_true(want && y0);
                    memcpy(want, s.b[2].data, mn * sizeof *want);
                    memcpy(y0, s.b[2].data, mn * sizeof *y0);
                    ref_gemm_bf16(a, b, want, M_, K_, N_, rows, acc);
                    struct tpu_op op = matmul_op(ta, tb, 1, acc);
                    for (unsigned th = 1; th <= 2; th++)
                        for (int use_arena = 0; use_arena < 2; use_arena++) {
                            char what[112];
                            snprintf(what, sizeof what, "matmul %s x %s ta=%d tb=%d acc=%d "
                                     "R=%u threads=%u arena=%d", kd == 1 ? "bf16" : "f32",
                                     kd == 0 ? "f32" : "bf16", ta, tb, acc, rows, th,
                                     use_arena);
                            memcpy(s.b[2].data, y0, mn * sizeof *y0);
                            struct tpu_diag d = {0, ""};
                            assert_int_equal(tpu__op_compute(&op, s.b, NULL, rows, th,
                                                             use_arena ? &arena : NULL, &d),
                                             0);
                            expect_same(s.b[2].data, want, mn, what);
                        }
                    free(a);
                    free(b);
                    free(want);
                    free(y0);
                    bfree(&s);
                }
    tpu__scratch_free(&arena);
}

static int32_t wrap_i32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}

static void test_matmul_int8(void **state)
{
    (void)state;
    struct rng r = {77};
    struct tpu__scratch arena = {{NULL}, {0}};
    const size_t mn = (size_t)M_ * N_;
    for (int tr = 0; tr < 4; tr++)
        for (int acc = 0; acc < 2; acc++) {
            bool ta = tr & 1, tb = tr & 2;
            struct bufs s = {0};
            setup_matmul(&s, &r, TPU_INT8, TPU_INT8, ta, tb, TPU_INT32);
            const int8_t *av = s.b[0].data, *bv = s.b[1].data;
            const int32_t *y = s.b[2].data;
            int32_t *want = malloc(mn * sizeof *want);
            assert_non_null(want);
            for (size_t i = 0; i < M_; i++)
                for (size_t j = 0; j < N_; j++) {
                    uint32_t t = acc ? (uint32_t)y[i * N_ + j] : 0u;
                    for (size_t k = 0; k < K_; k++) {
                        int32_t x = ta ? av[k * M_ + i] : av[i * K_ + k];
                        int32_t w = tb ? bv[j * K_ + k] : bv[k * N_ + j];
                        t += (uint32_t)(x * w);
                    }
                    want[i * N_ + j] = wrap_i32(t);
                }
            struct tpu_op op = matmul_op(ta, tb, 0, acc);
            int32_t *y0 = malloc(mn * sizeof *y0);
            assert_non_null(y0);
            memcpy(y0, y, mn * sizeof *y0);
            assert_int_equal(run_ok(&op, &s), 0);
            assert_memory_equal(s.b[2].data, want, mn * sizeof *want);
            memcpy(s.b[2].data, y0, mn * sizeof *y0);
            assert_int_equal(run_ok_arena(&op, &s, &arena), 0);
            assert_memory_equal(s.b[2].data, want, mn * sizeof *want);
            free(y0);
            free(want);
            bfree(&s);
        }
    tpu__scratch_free(&arena);
}

/* 3 and 6 passes. Fresh: exactly tpu_gemm_f32 on the transposed operands, and within a bound
 * of the double-precision product: the dropped terms (3 passes: mid*mid and the split's
 * remainders, below 3 * 2^-16 |a||b| per product; 6 passes: below 2^-22) plus fp32
 * accumulation over K = 150 products and the passes (at most (K + passes) * 2^-24 relative
 * to sum |a||b|, taken twice for safety). Accumulating: the same passes through the mxu.h
 * reference, each adding to y. */
static void test_matmul_passes(void **state)
{
    (void)state;
    struct rng r = {4242};
    struct tpu__scratch arena = {{NULL}, {0}};
    const size_t mn = (size_t)M_ * N_;
    for (unsigned passes = 3; passes <= 6; passes += 3)
        for (int tr = 0; tr < 4; tr++) {
            bool ta = tr & 1, tb = tr & 2;
            struct bufs s = {0};
            setup_matmul(&s, &r, TPU_F32, TPU_F32, ta, tb, TPU_F32);
            float *a = opnd_f32(&s.b[0], ta), *b = opnd_f32(&s.b[1], tb);
            float *want = malloc(mn * sizeof *want), *y0 = malloc(mn * sizeof *y0);
            double *dref = malloc(mn * sizeof *dref), *tol = malloc(mn * sizeof *tol);
            assert_true(want && y0 && dref && tol);
            memcpy(y0, s.b[2].data, mn * sizeof *y0);

            /* fresh */
            struct tpu_op op = matmul_op(ta, tb, passes, false);
            assert_int_equal(run_ok(&op, &s), 0);
            assert_int_equal(tpu_gemm_f32(a, b, want, M_, K_, N_, 8, passes, 1), 0);
            expect_same(s.b[2].data, want, mn, passes == 3 ? "3 passes" : "6 passes");
            memcpy(s.b[2].data, y0, mn * sizeof *y0);
            assert_int_equal(run_ok_arena(&op, &s, &arena), 0);
            expect_same(s.b[2].data, want, mn, "passes with an arena");
            double dropped = passes == 3 ? 3.0 * ldexp(1, -16) : ldexp(1, -22);
            for (size_t i = 0; i < M_; i++)
                for (size_t j = 0; j < N_; j++) {
                    double sum = 0, mag = 0;
                    for (size_t k = 0; k < K_; k++) {
                        sum += (double)a[i * K_ + k] * b[k * N_ + j];
                        mag += fabs((double)a[i * K_ + k] * b[k * N_ + j]);
                    }
                    dref[i * N_ + j] = sum;
                    tol[i * N_ + j] = (dropped + 2.0 * (K_ + passes) * ldexp(1, -24)) * mag;
                }
            expect_close(s.b[2].data, dref, tol, mn, "passes vs double");

            /* accumulating, and accumulating into +0 equals fresh */
            tpu_bf16 *pa[3], *pb[3];
            for (int p = 0; p < 3; p++) {
                pa[p] = malloc((size_t)M_ * K_ * sizeof(tpu_bf16));
                pb[p] = malloc((size_t)K_ * N_ * sizeof(tpu_bf16));
                assert_true(pa[p] && pb[p]);
            }
            /* the 3 pass split is two parts: hi and mid (mxu.h's two-part "lo") */
            for (size_t i = 0; i < (size_t)M_ * K_; i++)
                tpu_f32_split_bf16(a[i], &pa[0][i], &pa[1][i], &pa[2][i]);
            for (size_t i = 0; i < (size_t)K_ * N_; i++)
                tpu_f32_split_bf16(b[i], &pb[0][i], &pb[1][i], &pb[2][i]);
            static const int o3[3][2] = {{1, 0}, {0, 1}, {0, 0}};
            static const int o6[6][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
            memcpy(want, y0, mn * sizeof *want);
            for (unsigned p = 0; p < passes; p++) {
                const int *o = passes == 3 ? o3[p] : o6[p];
                ref_gemm_bf16(pa[o[0]], pb[o[1]], want, M_, K_, N_, 8, true);
            }
            memcpy(s.b[2].data, y0, mn * sizeof *y0);
            op.attrs.accumulate = true;
            assert_int_equal(run_ok(&op, &s), 0);
            expect_same(s.b[2].data, want, mn, "passes accumulating");
            memcpy(s.b[2].data, y0, mn * sizeof *y0);
            assert_int_equal(run_ok_arena(&op, &s, &arena), 0);
            expect_same(s.b[2].data, want, mn, "passes accumulating with an arena");
            memset(s.b[2].data, 0, mn * sizeof(float));
            assert_int_equal(run_ok(&op, &s), 0);
            assert_int_equal(tpu_gemm_f32(a, b, want, M_, K_, N_, 8, passes, 1), 0);
            expect_same(s.b[2].data, want, mn, "accumulating into +0");
            for (int p = 0; p < 3; p++) {
                free(pa[p]);
                free(pb[p]);
            }
            free(a);
            free(b);
            free(want);
            free(y0);
            free(dref);
            free(tol);
            bfree(&s);
        }
    tpu__scratch_free(&arena);
}

/* An f32 operand with a bf16 one in 3 or 6 passes: the bf16 values split as hi = x,
 * mid = lo = 0, so the product is tpu_gemm_f32 of the widened operand. */
static void test_matmul_mixed_passes(void **state)
{
    (void)state;
    struct rng r = {31};
    for (unsigned passes = 3; passes <= 6; passes += 3) {
        struct bufs s = {0};
        setup_matmul(&s, &r, TPU_F32, TPU_BF16, false, true, TPU_F32);
        float *a = opnd_f32(&s.b[0], false), *b = opnd_f32(&s.b[1], true);
        float *want = malloc((size_t)M_ * N_ * sizeof *want);
        assert_non_null(want);
        assert_int_equal(tpu_gemm_f32(a, b, want, M_, K_, N_, 8, passes, 1), 0);
        struct tpu_op op = matmul_op(false, true, passes, false);
        assert_int_equal(run_ok(&op, &s), 0);
        expect_same(s.b[2].data, want, (size_t)M_ * N_, "f32 x bf16 in passes");
        free(a);
        free(b);
        free(want);
        bfree(&s);
    }
}

/* One arena through matmuls of changing shapes, dtypes and transposes (large, then small,
 * then large again): every result matches the reference, so stale contents of reused memory
 * never leak into a result; the arena only grows, and an op that fits reuses its blocks
 * without allocating. */
static void test_matmul_arena_reuse(void **state)
{
    (void)state;
    struct rng r = {555};
    struct tpu__scratch arena = {{NULL}, {0}};
    static const struct {
        uint32_t m, k, n;
        bool ta, tb;
        enum tpu_dtype at, bt;
    } cases[] = {
        {70, 300, 90, true, false, TPU_F32, TPU_F32},
        {5, 20, 7, false, true, TPU_BF16, TPU_F32},
        {33, 129, 40, true, true, TPU_INT8, TPU_INT8},
        {3, 1, 2, false, false, TPU_F32, TPU_BF16},
        {64, 257, 65, false, true, TPU_F32, TPU_F32},
        {12, 9, 50, true, true, TPU_INT8, TPU_INT8},
    };
    size_t prev_bytes[TPU__SCRATCH_SLOTS] = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t m = cases[c].m, k = cases[c].k, n = cases[c].n;
        const bool ta = cases[c].ta, tb = cases[c].tb, int8 = cases[c].at == TPU_INT8;
        struct bufs s = {0};
        bset(&s, 0, cases[c].at, ta ? k : m, ta ? m : k);
        bset(&s, 1, cases[c].bt, tb ? n : k, tb ? k : n);
        bset(&s, 2, int8 ? TPU_INT32 : TPU_F32, m, n);
        fill(&r, &s.b[0]);
        fill(&r, &s.b[1]);
        struct tpu_op op = matmul_op(ta, tb, 1, false);
        assert_int_equal(run_ok_arena(&op, &s, &arena), 0);
        const size_t mn = (size_t)m * n;
        if (int8) {
            const int8_t *av = s.b[0].data, *bv = s.b[1].data;
            int32_t *want = malloc(mn * sizeof *want);
            assert_non_null(want);
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++) {
                    uint32_t t = 0;
                    for (size_t kk = 0; kk < k; kk++)
                        t += (uint32_t)((int32_t)(ta ? av[kk * m + i] : av[i * k + kk]) *
                                        (int32_t)(tb ? bv[j * k + kk] : bv[kk * n + j]));
                    want[i * n + j] = wrap_i32(t);
                }
            assert_memory_equal(s.b[2].data, want, mn * sizeof *want);
            free(want);
        } else {
            tpu_bf16 *a = opnd_bf16(&s.b[0], ta), *b = opnd_bf16(&s.b[1], tb);
            float *want = malloc(mn * sizeof *want);
            assert_non_null(want);
            ref_gemm_bf16(a, b, want, m, k, n, 8, false);
            char what[48];
            snprintf(what, sizeof what, "arena case %zu", c);
            expect_same(s.b[2].data, want, mn, what);
            free(a);
            free(b);
            free(want);
        }
        for (int sl = 0; sl < TPU__SCRATCH_SLOTS; sl++) {
            assert_true(arena.bytes[sl] >= prev_bytes[sl]);
            prev_bytes[sl] = arena.bytes[sl];
        }
        /* the same op again: everything fits, nothing is allocated */
        void *mem[TPU__SCRATCH_SLOTS];
        memcpy(mem, arena.mem, sizeof mem);
        assert_int_equal(run_ok_arena(&op, &s, &arena), 0);
        assert_memory_equal(arena.mem, mem, sizeof mem);
        bfree(&s);
    }
    assert_non_null(arena.mem[TPU__SCRATCH_GEMM]);
    assert_non_null(arena.mem[TPU__SCRATCH_OPS]); /* the int8 transposed copies */
    tpu__scratch_free(&arena);
    for (int sl = 0; sl < TPU__SCRATCH_SLOTS; sl++) {
        assert_null(arena.mem[sl]);
        assert_int_equal(arena.bytes[sl], 0);
    }
}

static void test_matmul_errors(void **state)
{
    (void)state;
    struct bufs s = {0};
    struct tpu_diag d = {0, ""};
    bset(&s, 0, TPU_F32, 2, 3);
    bset(&s, 1, TPU_INT8, 3, 4);
    bset(&s, 2, TPU_F32, 2, 4);
    struct tpu_op op = matmul_op(false, false, 1, false);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE, "operands a (f32) and b (int8)", NULL);
    bset(&s, 1, TPU_F32, 4, 3);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE, "op(a) is [2][3] and op(b) is [4][3]",
                 NULL);
    op.attrs.trans_b = true; /* op(b) [3][4] */
    op.attrs.passes = 2;
    expect_error(run(&op, &s, NULL, &d), &d, TPU_EINVAL, "passes is 2", NULL);
    op.attrs.passes = 3;
    bset(&s, 2, TPU_F32, 4, 2);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE, "operand y is [4][2] but must be [2][4]",
                 NULL);
    bset(&s, 2, TPU_F32, 2, 4);
    assert_int_equal(tpu__op_compute(&op, s.b, NULL, 0, 1, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tile_rows 0"));
    assert_int_equal(run(&op, &s, NULL, &d), 0);
    bfree(&s);
}

/* ---- elementwise ----------------------------------------------------------------------------- */

static float ref_binary(enum tpu_opcode code, float a, float b)
{
    volatile float y;
    switch (code) {
    case TPU_OP_ADD:
        y = a + b;
        break;
    case TPU_OP_SUB:
        y = a - b;
        break;
    case TPU_OP_MUL:
        y = a * b;
        break;
    default:
        y = isnan(a) ? a : isnan(b) ? b : a > b ? a : b;
        break;
    }
    return y;
}

static void test_binary_broadcast(void **state)
{
    (void)state;
    static const enum tpu_opcode codes[] = {TPU_OP_ADD, TPU_OP_SUB, TPU_OP_MUL, TPU_OP_MAX};
    static const uint32_t brows[] = {19, 1, 1}, bcols[] = {33, 33, 1};
    struct rng r = {99};
    const uint32_t rows = 19, cols = 33;
    for (size_t c = 0; c < 4; c++)
        for (int bc = 0; bc < 3; bc++)
            for (int inplace = 0; inplace < 2; inplace++) {
                struct bufs s = {0};
                float *a = bset(&s, 1, TPU_F32, rows, cols);
                float *b = bset(&s, 2, TPU_F32, brows[bc], bcols[bc]);
                bset(&s, 0, TPU_F32, rows, cols);
                for (size_t i = 0; i < (size_t)rows * cols; i++)
                    a[i] = rnd_edge(&r);
                for (size_t i = 0; i < (size_t)brows[bc] * bcols[bc]; i++)
                    b[i] = rnd_edge(&r);
                float want[19 * 33];
                for (size_t i = 0; i < rows; i++)
                    for (size_t j = 0; j < cols; j++) {
                        float bv = bc == 0 ? b[i * cols + j] : bc == 1 ? b[j] : b[0];
                        want[i * cols + j] = ref_binary(codes[c], a[i * cols + j], bv);
                    }
                struct tpu_op op = mkop(codes[c], inplace ? 1 : 0, X, X, 1, 2);
                assert_int_equal(run_ok(&op, &s), 0);
                char what[64];
                snprintf(what, sizeof what, "op %d broadcast %d in place %d", (int)codes[c], bc,
                         inplace);
                expect_same(s.b[inplace ? 1 : 0].data, want, (size_t)rows * cols, what);
                bfree(&s);
            }
}

static void test_max_and_relu_by_hand(void **state)
{
    (void)state;
    struct bufs s = {0};
    float *a = bset(&s, 1, TPU_F32, 1, 6);
    float *b = bset(&s, 2, TPU_F32, 1, 6);
    const float nan = NAN;
    float av[6] = {nan, 1.0f, 0.0f, -0.0f, -3.0f, 2.0f};
    float bv[6] = {1.0f, nan, -0.0f, 0.0f, -2.0f, 2.0f};
    memcpy(a, av, sizeof av);
    memcpy(b, bv, sizeof bv);
    float *y = bset(&s, 0, TPU_F32, 1, 6);
    struct tpu_op op = mkop(TPU_OP_MAX, 0, X, X, 1, 2);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(isnan(y[0]) && isnan(y[1]));
    assert_int_equal(tpu_f32_bits(y[2]), 0x80000000u); /* equal values give b */
    assert_int_equal(tpu_f32_bits(y[3]), 0x00000000u);
    assert_true(y[4] == -2.0f && y[5] == 2.0f);

    /* relu: -0 -> +0, NaN stays NaN, negatives -> +0 */
    op = mkop(TPU_OP_RELU, 0, X, X, 1, X);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(isnan(y[0]));
    assert_true(y[1] == 1.0f);
    assert_int_equal(tpu_f32_bits(y[2]), 0);
    assert_int_equal(tpu_f32_bits(y[3]), 0);
    assert_int_equal(tpu_f32_bits(y[4]), 0);
    assert_true(y[5] == 2.0f);

    /* relu_grad(dy = b, x = a): x > 0 passes dy, else +0 (NaN x gives +0) */
    op = mkop(TPU_OP_RELU_GRAD, 0, X, X, 2, 1);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_int_equal(tpu_f32_bits(y[0]), 0);
    assert_true(isnan(y[1]));
    assert_int_equal(tpu_f32_bits(y[2]), 0);
    assert_int_equal(tpu_f32_bits(y[3]), 0);
    assert_int_equal(tpu_f32_bits(y[4]), 0);
    assert_true(y[5] == 2.0f);
    bfree(&s);
}

static void test_unary(void **state)
{
    (void)state;
    struct rng r = {5};
    const size_t n = 7 * 41;
    struct bufs s = {0};
    float *x = bset(&s, 1, TPU_F32, 7, 41);
    bset(&s, 0, TPU_F32, 7, 41);
    float *dy = bset(&s, 2, TPU_F32, 7, 41);
    for (size_t i = 0; i < n; i++) {
        x[i] = rnd_edge(&r);
        dy[i] = rnd_edge(&r);
    }
    float *want = malloc(n * sizeof *want);
    assert_non_null(want);

    struct tpu_op op = mkop(TPU_OP_SCALE, 0, X, X, 1, X);
    op.attrs.alpha = -0.3f;
    op.attrs.beta = 1.7f;
    for (size_t i = 0; i < n; i++) {
        volatile float t = -0.3f * x[i];
        want[i] = t + 1.7f;
    }
    assert_int_equal(run_ok(&op, &s), 0);
    expect_same(s.b[0].data, want, n, "scale");

    op = mkop(TPU_OP_RELU, 0, X, X, 1, X);
    for (size_t i = 0; i < n; i++)
        want[i] = isnan(x[i]) ? x[i] : x[i] > 0 ? x[i] : 0.0f;
    assert_int_equal(run_ok(&op, &s), 0);
    expect_same(s.b[0].data, want, n, "relu");

    op = mkop(TPU_OP_RELU_GRAD, 0, X, X, 2, 1);
    for (size_t i = 0; i < n; i++)
        want[i] = x[i] > 0 ? dy[i] : 0.0f;
    assert_int_equal(run_ok(&op, &s), 0);
    expect_same(s.b[0].data, want, n, "relu_grad");

    /* in place: y is x */
    op = mkop(TPU_OP_SCALE, 1, X, X, 1, X);
    op.attrs.alpha = 2.0f;
    for (size_t i = 0; i < n; i++) {
        volatile float t = 2.0f * x[i];
        want[i] = t + 0.0f; /* beta 0 is added all the same: -0 becomes +0 */
    }
    assert_int_equal(run_ok(&op, &s), 0);
    expect_same(x, want, n, "scale in place");
    free(want);
    bfree(&s);
}

/* exp: the host's expf exactly, and within 2^-23 relative of double exp (one ulp of the
 * result; glibc documents expf below one ulp). Special values exactly. */
static void test_exp(void **state)
{
    (void)state;
    struct rng r = {6};
    const size_t n = 1000;
    struct bufs s = {0};
    float *x = bset(&s, 1, TPU_F32, 1, (uint32_t)n);
    float *y = bset(&s, 0, TPU_F32, 1, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        x[i] = rnd_f32(&r, -87.0f, 88.0f);
    float *host = malloc(n * sizeof *host);
    double *want = malloc(n * sizeof *want), *tol = malloc(n * sizeof *tol);
    assert_true(host && want && tol);
    for (size_t i = 0; i < n; i++) {
        host[i] = expf(x[i]);
        want[i] = exp((double)x[i]);
        tol[i] = ldexp(want[i], -23);
    }
    struct tpu_op op = mkop(TPU_OP_EXP, 0, X, X, 1, X);
    assert_int_equal(run_ok(&op, &s), 0);
    expect_same(y, host, n, "exp vs host expf");
    expect_close(y, want, tol, n, "exp vs double");

    const float sp[6] = {0.0f, -0.0f, -INFINITY, INFINITY, 89.0f, NAN};
    memcpy(x, sp, sizeof sp);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(y[0] == 1.0f && y[1] == 1.0f);
    assert_int_equal(tpu_f32_bits(y[2]), 0);
    assert_true(isinf(y[3]) && y[3] > 0 && isinf(y[4]));
    assert_true(isnan(y[5]));
    free(host);
    free(want);
    free(tol);
    bfree(&s);
}

static void test_vector_errors(void **state)
{
    (void)state;
    struct bufs s = {0};
    struct tpu_diag d = {0, ""};
    bset(&s, 0, TPU_F32, 4, 5);
    bset(&s, 1, TPU_F32, 4, 5);
    bset(&s, 2, TPU_F32, 4, 1);
    struct tpu_op op = mkop(TPU_OP_ADD, 0, X, X, 1, 2);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE, "add: operand b is [4][1]",
                 "[1][5] (broadcast over rows) or [1][1]", NULL);
    bset(&s, 2, TPU_INT32, 4, 5);
    op.code = TPU_OP_MUL;
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE, "mul: operand b is int32 but must be f32",
                 NULL);
    bset(&s, 0, TPU_F32, 5, 4);
    op = mkop(TPU_OP_EXP, 0, X, X, 1, X);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE,
                 "exp: operand y is [5][4] but must be [4][5]", NULL);
    bfree(&s);
}

/* ---- convert --------------------------------------------------------------------------------- */

/* int32 -> bf16 reference: one rounding in double (|v| * 2^-shift is exact, nearbyint rounds
 * to nearest even in the default mode). */
static float ref_bf16_from_i32(int32_t v)
{
    double a = fabs((double)v);
    if (a < 256)
        return (float)v;
    int e = (int)floor(log2(a)); /* a in [2^e, 2^(e+1)) */
    while (ldexp(1, e) > a)
        e--;
    while (ldexp(1, e + 1) <= a)
        e++;
    double q = nearbyint(ldexp(a, 7 - e));
    double rr = ldexp(q, e - 7);
    return (float)(v < 0 ? -rr : rr);
}

static void run_convert(struct bufs *s, enum tpu_dtype from, enum tpu_dtype to,
                        const void *src, size_t n)
{
    void *x = bset(s, 1, from, 1, (uint32_t)n);
    memcpy(x, src, n * dt_bytes(from));
    bset(s, 0, to, 1, (uint32_t)n);
    struct tpu_op op = mkop(TPU_OP_CONVERT, 0, X, X, 1, X);
    assert_int_equal(run_ok(&op, s), 0);
}

static void test_convert(void **state)
{
    (void)state;
    struct bufs s = {0};
    /* f32 -> bf16: nearest even (ties 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6) */
    const float f[8] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -2.5f, 3.4e38f, NAN, -0.0f, 1e-40f,
                        127.99f};
    run_convert(&s, TPU_F32, TPU_BF16, f, 8);
    const tpu_bf16 *ob = s.b[0].data;
    assert_int_equal(ob[0].bits, 0x3F80);
    assert_int_equal(ob[1].bits, 0x3F82);
    assert_int_equal(ob[2].bits, 0xC020);
    assert_int_equal(ob[3].bits, 0x7F80); /* rounds past the largest bf16 */
    assert_int_equal(ob[4].bits & 0x7FC0, 0x7FC0);
    assert_int_equal(ob[5].bits, 0x8000);
    assert_int_equal(ob[6].bits, tpu_bf16_from_f32(1e-40f).bits);
    assert_int_equal(ob[7].bits, 0x4300); /* 127.99 -> 128 */
    /* bf16 -> f32 exact */
    const tpu_bf16 b[3] = {{0x3F81}, {0xFF80}, {0x0001}};
    run_convert(&s, TPU_BF16, TPU_F32, b, 3);
    const float *of = s.b[0].data;
    assert_int_equal(tpu_f32_bits(of[0]), 0x3F810000u);
    assert_int_equal(tpu_f32_bits(of[1]), 0xFF800000u);
    assert_int_equal(tpu_f32_bits(of[2]), 0x00010000u);
    /* f32 -> int32: truncation toward zero, saturation, NaN -> 0 */
    const float fi[9] = {-2.7f, 2.7f, 3e9f, -3e9f, NAN, 2147483648.0f, -2147483648.0f, -0.5f,
                         INFINITY};
    run_convert(&s, TPU_F32, TPU_INT32, fi, 9);
    const int32_t wi[9] = {-2, 2, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 0, INT32_MAX};
    assert_memory_equal(s.b[0].data, wi, sizeof wi);
    /* f32 -> int8 */
    const float f8[7] = {127.9f, 128.0f, -128.9f, -129.0f, NAN, -INFINITY, 5.5f};
    run_convert(&s, TPU_F32, TPU_INT8, f8, 7);
    const int8_t w8[7] = {127, 127, -128, -128, 0, -128, 5};
    assert_memory_equal(s.b[0].data, w8, sizeof w8);
    /* bf16 -> int8 / int32 through the exact f32 value */
    const tpu_bf16 b8[2] = {{0xC2F7}, {0x4B80}}; /* -123.5, 2^24 */
    run_convert(&s, TPU_BF16, TPU_INT8, b8, 2);
    assert_int_equal(((int8_t *)s.b[0].data)[0], -123);
    assert_int_equal(((int8_t *)s.b[0].data)[1], 127);
    run_convert(&s, TPU_BF16, TPU_INT32, b8, 2);
    assert_int_equal(((int32_t *)s.b[0].data)[0], -123);
    assert_int_equal(((int32_t *)s.b[0].data)[1], 16777216);
    /* int32 -> int8 saturates; int8 -> int32, f32, bf16 exact */
    const int32_t i32[4] = {300, -300, -128, 127};
    run_convert(&s, TPU_INT32, TPU_INT8, i32, 4);
    const int8_t w8b[4] = {127, -128, -128, 127};
    assert_memory_equal(s.b[0].data, w8b, sizeof w8b);
    const int8_t i8[3] = {-128, 127, -1};
    run_convert(&s, TPU_INT8, TPU_INT32, i8, 3);
    assert_int_equal(((int32_t *)s.b[0].data)[0], -128);
    assert_int_equal(((int32_t *)s.b[0].data)[2], -1);
    run_convert(&s, TPU_INT8, TPU_F32, i8, 3);
    assert_true(((float *)s.b[0].data)[0] == -128.0f && ((float *)s.b[0].data)[1] == 127.0f);
    run_convert(&s, TPU_INT8, TPU_BF16, i8, 3);
    assert_int_equal(((tpu_bf16 *)s.b[0].data)[1].bits, tpu_bf16_from_f32(127.0f).bits);
    assert_int_equal(((tpu_bf16 *)s.b[0].data)[0].bits, 0xC300);
    /* int32 -> f32 rounds to nearest even */
    const int32_t big[3] = {16777217, 16777219, INT32_MAX};
    run_convert(&s, TPU_INT32, TPU_F32, big, 3);
    assert_true(((float *)s.b[0].data)[0] == 16777216.0f);
    assert_true(((float *)s.b[0].data)[1] == 16777220.0f);
    assert_true(((float *)s.b[0].data)[2] == 2147483648.0f);
    /* int32 -> bf16 rounds once: 2^25 + 2^17 + 1 is above the halfway point 2^25 + 2^17
     * (-> 2^25 + 2^18), though via f32 it would become the tie 2^25 + 2^17 (-> 2^25) */
    struct rng r = {8};
    int32_t vals[400];
    vals[0] = (1 << 25) + (1 << 17) + 1;
    vals[1] = INT32_MIN;
    vals[2] = INT32_MAX;
    vals[3] = -((1 << 25) + (1 << 17));
    for (int i = 4; i < 400; i++) {
        int32_t mag = (int32_t)((uint32_t)rnd(&r) >> (1 + rnd_below(&r, 31)));
        vals[i] = rnd_below(&r, 2) ? -mag : mag;
    }
    run_convert(&s, TPU_INT32, TPU_BF16, vals, 400);
    const tpu_bf16 *o2 = s.b[0].data;
    assert_true(tpu_bf16_to_f32(o2[0]) == 33816576.0f); /* 2^25 + 2^18 */
    assert_true(tpu_bf16_to_f32(o2[3]) == -33554432.0f); /* tie, to even: -2^25 */
    for (int i = 0; i < 400; i++)
        if (tpu_bf16_to_f32(o2[i]) != ref_bf16_from_i32(vals[i]))
            fail_msg("int32 %d -> bf16 gave %.9g, want %.9g", vals[i],
                     (double)tpu_bf16_to_f32(o2[i]), (double)ref_bf16_from_i32(vals[i]));
    /* same dtype copies, also in place */
    const float cp[2] = {1.5f, -0.0f};
    run_convert(&s, TPU_F32, TPU_F32, cp, 2);
    assert_memory_equal(s.b[0].data, cp, sizeof cp);
    struct tpu_op op = mkop(TPU_OP_CONVERT, 1, X, X, 1, X);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_memory_equal(s.b[1].data, cp, sizeof cp);
    bfree(&s);
}

/* ---- reductions ------------------------------------------------------------------------------ */

static void test_reduce(void **state)
{
    (void)state;
    struct rng r = {9};
    const uint32_t rows = 23, cols = 17;
    struct bufs s = {0};
    float *x = bset(&s, 1, TPU_F32, rows, cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        x[i] = rnd_below(&r, 20) == 0 ? rnd_edge(&r) : rnd_f32(&r, -1e4f, 1e4f);
    for (int is_max = 0; is_max < 2; is_max++)
        for (int axis = 0; axis < 2; axis++) {
            size_t n_out = axis == 0 ? cols : rows, n_in = axis == 0 ? rows : cols;
            bset(&s, 0, TPU_F32, axis == 0 ? 1 : rows, axis == 0 ? cols : 1);
            float want[32];
            for (size_t o = 0; o < n_out; o++) {
                volatile float acc = axis == 0 ? x[o] : x[o * cols];
                for (size_t k = 1; k < n_in; k++) {
                    float v = axis == 0 ? x[k * cols + o] : x[o * cols + k];
                    if (is_max)
                        acc = isnan(acc) ? acc : (isnan(v) || v > acc) ? v : acc;
                    else
                        acc = acc + v;
                }
                want[o] = acc;
            }
            struct tpu_op op = mkop(is_max ? TPU_OP_REDUCE_MAX : TPU_OP_REDUCE_SUM, 0, X, X, 1, X);
            op.attrs.axis = axis;
            assert_int_equal(run_ok(&op, &s), 0);
            expect_same(s.b[0].data, want, n_out, is_max ? "reduce_max" : "reduce_sum");
        }
    /* the order is visible: (1e8 + 1) - 1e8 = 0 in fp32, 1 in another order */
    x = bset(&s, 1, TPU_F32, 3, 2);
    const float v[6] = {1e8f, -0.0f, 1.0f, -0.0f, -1e8f, -0.0f};
    memcpy(x, v, sizeof v);
    float *y = bset(&s, 0, TPU_F32, 1, 2);
    struct tpu_op op = mkop(TPU_OP_REDUCE_SUM, 0, X, X, 1, X);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(y[0] == 0.0f);
    assert_int_equal(tpu_f32_bits(y[1]), 0x80000000u); /* a sum of -0s is -0 */
    y = bset(&s, 0, TPU_F32, 3, 1);
    op.attrs.axis = 1;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(y[0] == 1e8f && y[1] == 1.0f);
    assert_int_equal(tpu_f32_bits(y[2]), tpu_f32_bits(-1e8f)); /* -1e8 + -0 */
    x[5] = -0.0f;
    x[4] = -0.0f;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_int_equal(tpu_f32_bits(y[2]), 0x80000000u);
    /* max keeps the earlier of equal values: +0 then -0 gives +0 */
    const float z[2] = {0.0f, -0.0f};
    x = bset(&s, 1, TPU_F32, 1, 2);
    memcpy(x, z, sizeof z);
    y = bset(&s, 0, TPU_F32, 1, 1);
    op = mkop(TPU_OP_REDUCE_MAX, 0, X, X, 1, X);
    op.attrs.axis = 1;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_int_equal(tpu_f32_bits(y[0]), 0);
    /* errors */
    struct tpu_diag d = {0, ""};
    op.attrs.axis = 2;
    expect_error(run(&op, &s, NULL, &d), &d, TPU_EINVAL, "reduce_max: axis is 2", NULL);
    op.attrs.axis = 0;
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE,
                 "reduce_max: operand y is [1][1] but must be [1][2]", NULL);
    bfree(&s);
}

/* ---- softmax cross-entropy ------------------------------------------------------------------ */

enum { XR = 13, XC = 10 };

/* The loss in double: alpha * sum over rows with label >= 0 of logsumexp(x) - x[label]. */
static double loss_double(const double *x, const int32_t *lab, size_t rows, size_t cols,
                          double alpha)
{
    double total = 0;
    for (size_t i = 0; i < rows; i++) {
        if (lab[i] < 0)
            continue;
        double m = x[i * cols];
        for (size_t j = 1; j < cols; j++)
            m = fmax(m, x[i * cols + j]);
        double s = 0;
        for (size_t j = 0; j < cols; j++)
            s += exp(x[i * cols + j] - m);
        total += m + log(s) - x[i * cols + (size_t)lab[i]];
    }
    return alpha * total;
}

static void setup_xent(struct bufs *s, struct rng *r, float spread)
{
    float *x = bset(s, 2, TPU_F32, XR, XC);
    int32_t *lab = bset(s, 3, TPU_INT32, XR, 1);
    bset(s, 0, TPU_F32, 1, 1);
    bset(s, 1, TPU_F32, XR, XC);
    for (size_t i = 0; i < (size_t)XR * XC; i++)
        x[i] = rnd_f32(r, -spread, spread);
    for (size_t i = 0; i < XR; i++)
        lab[i] = i % 5 == 3 ? -1 : (int32_t)rnd_below(r, XC); /* rows 3 and 8 are padding */
}

static struct tpu_op xent_op(float alpha)
{
    struct tpu_op op = mkop(TPU_OP_SOFTMAX_XENT, 0, 1, X, 2, 3);
    op.attrs.alpha = alpha;
    return op;
}

/* Values: bit for bit against the documented order (with this host's expf/logf), and
 * against double precision. Tolerances (u = 2^-24, each fp32 operation within u relative,
 * expf/logf within 1 ulp = 2u): per row, s carries at most (cols + 2) u relative error, so
 * logf(s) is within (cols + 4) u absolute (plus 2u |log s|); d = x[l] - m within u |d|; the
 * row loss then within (cols + 4) u + 2u (|log s| + |d|) + u |row loss|; the fp32 sum over
 * rows adds rows * u * sum |row loss|; alpha one more u. Doubled for safety.
 * dlogits: e[j] is within (2 + |x[j] - m|) u relative (the rounding of x[j] - m becomes a
 * relative error after exp), p[j] within (cols + 6 + |x[j] - m|) u relative, the -1 and
 * alpha within u more, so |error| <= |alpha| u ((cols + 8 + |x[j] - m|) p + 2), doubled. */
static void test_softmax_xent_values(void **state)
{
    (void)state;
    struct rng r = {10};
    for (int trial = 0; trial < 3; trial++) {
        struct bufs s = {0};
        float spread = trial == 0 ? 3.0f : trial == 1 ? 30.0f : 300.0f; /* 300: exp overflows
                                                                            without the max */
        setup_xent(&s, &r, spread);
        const float alpha = 1.0f / 11.0f;
        struct tpu_op op = xent_op(alpha);
        assert_int_equal(run_ok(&op, &s), 0);
        const float *x = s.b[2].data, *g = s.b[1].data;
        const int32_t *lab = s.b[3].data;
        float loss = *(float *)s.b[0].data;

        /* the documented order, literally */
        float want_g[XR * XC];
        volatile float total = 0.0f;
        for (size_t i = 0; i < XR; i++) {
            const float *xr = x + i * XC;
            if (lab[i] < 0) {
                for (size_t j = 0; j < XC; j++)
                    want_g[i * XC + j] = 0.0f;
                continue;
            }
            volatile float m = xr[0], sum = 0.0f;
            for (size_t j = 1; j < XC; j++)
                m = xr[j] > m ? xr[j] : m;
            volatile float dl = xr[lab[i]] - m;
            float e[XC];
            for (size_t j = 0; j < XC; j++) {
                e[j] = expf(xr[j] - m);
                sum = sum + e[j];
            }
            volatile float rl = logf(sum) - dl;
            total = total + rl;
            for (size_t j = 0; j < XC; j++) {
                volatile float p = e[j] / sum;
                if ((int32_t)j == lab[i])
                    p = p - 1.0f;
                want_g[i * XC + j] = alpha * p;
            }
        }
        const float want_loss = alpha * total;
        expect_same(&loss, &want_loss, 1, "softmax_xent loss, documented order");
        expect_same(g, want_g, (size_t)XR * XC, "softmax_xent dlogits, documented order");

        /* double precision */
        const double u = ldexp(1, -24);
        double xd[XR * XC], gd[XR * XC], tol[XR * XC], loss_tol = 0, abs_rows = 0;
        for (size_t i = 0; i < (size_t)XR * XC; i++)
            xd[i] = x[i];
        for (size_t i = 0; i < XR; i++) {
            if (lab[i] < 0) {
                for (size_t j = 0; j < XC; j++) {
                    gd[i * XC + j] = 0;
                    tol[i * XC + j] = 0;
                }
                continue;
            }
            double m = xd[i * XC], sum = 0;
            for (size_t j = 1; j < XC; j++)
                m = fmax(m, xd[i * XC + j]);
            for (size_t j = 0; j < XC; j++)
                sum += exp(xd[i * XC + j] - m);
            double dlab = xd[i * XC + (size_t)lab[i]] - m, rl = log(sum) - dlab;
            abs_rows += fabs(rl);
            loss_tol += (XC + 4) * u + 2 * u * (fabs(log(sum)) + fabs(dlab)) + u * fabs(rl);
            for (size_t j = 0; j < XC; j++) {
                double p = exp(xd[i * XC + j] - m) / sum;
                gd[i * XC + j] = alpha * (p - ((int32_t)j == lab[i]));
                tol[i * XC + j] =
                    2 * alpha * u * ((XC + 8 + fabs(xd[i * XC + j] - m)) * p + 2);
            }
        }
        double want_d = loss_double(xd, lab, XR, XC, alpha);
        loss_tol = 2 * alpha * (loss_tol + (XR + 1) * u * abs_rows);
        expect_close(&loss, &want_d, &loss_tol, 1, "softmax_xent loss vs double");
        expect_close(g, gd, tol, (size_t)XR * XC, "softmax_xent dlogits vs double");
        /* padding rows are exactly +0 */
        for (size_t j = 0; j < XC; j++) {
            assert_int_equal(tpu_f32_bits(g[3 * XC + j]), 0);
            assert_int_equal(tpu_f32_bits(g[8 * XC + j]), 0);
        }
        assert_true(isfinite(loss));
        bfree(&s);
    }
}

/* dlogits against central differences of the double loss: h = 2^-10 gives a truncation
 * error h^2/6 |L'''| below 1e-7 alpha (softmax derivatives are bounded by small constants)
 * and a cancellation error near 1e-16 / h; dlogits itself is fp32 (above: a few 1e-6 alpha
 * at most here). Tolerance 2e-5 * alpha. */
static void test_softmax_xent_gradient(void **state)
{
    (void)state;
    struct rng r = {11};
    struct bufs s = {0};
    setup_xent(&s, &r, 4.0f);
    const float alpha = 0.25f;
    struct tpu_op op = xent_op(alpha);
    assert_int_equal(run_ok(&op, &s), 0);
    const float *x = s.b[2].data, *g = s.b[1].data;
    const int32_t *lab = s.b[3].data;
    double xd[XR * XC], fd[XR * XC], tol[XR * XC];
    for (size_t i = 0; i < (size_t)XR * XC; i++)
        xd[i] = x[i];
    const double h = ldexp(1, -10);
    for (size_t i = 0; i < (size_t)XR * XC; i++) {
        double keep = xd[i];
        xd[i] = keep + h;
        double up = loss_double(xd, lab, XR, XC, alpha);
        xd[i] = keep - h;
        double down = loss_double(xd, lab, XR, XC, alpha);
        xd[i] = keep;
        fd[i] = (up - down) / (2 * h);
        tol[i] = 2e-5 * alpha;
    }
    expect_close(g, fd, tol, (size_t)XR * XC, "dlogits vs finite differences");
    bfree(&s);
}

static void test_softmax_xent_padding_and_range(void **state)
{
    (void)state;
    struct rng r = {12};
    struct bufs s = {0};
    setup_xent(&s, &r, 2.0f);
    struct tpu_op op = xent_op(1.0f);
    assert_int_equal(run_ok(&op, &s), 0);
    float before = *(float *)s.b[0].data;
    /* changing a padding row's logits changes nothing */
    float *x = s.b[2].data;
    for (size_t j = 0; j < XC; j++)
        x[3 * XC + j] = 1000.0f * (float)j;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_int_equal(tpu_f32_bits(*(float *)s.b[0].data), tpu_f32_bits(before));
    /* all padding: loss +0 */
    int32_t *lab = s.b[3].data;
    for (size_t i = 0; i < XR; i++)
        lab[i] = -7;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_int_equal(tpu_f32_bits(*(float *)s.b[0].data), 0);

    /* a label >= the number of classes: TPU_ERANGE naming row, label and classes; nothing
     * is written */
    lab[2] = XC;
    lab[5] = 3;
    float *g = s.b[1].data;
    for (size_t i = 0; i < (size_t)XR * XC; i++)
        g[i] = 42.0f;
    *(float *)s.b[0].data = 42.0f;
    struct tpu_diag d = {0, ""};
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ERANGE, "softmax_xent", "row 2",
                 "label 10", "10 classes", NULL);
    assert_true(*(float *)s.b[0].data == 42.0f && g[0] == 42.0f && g[5 * XC] == 42.0f);
    /* wrong label dtype */
    bset(&s, 3, TPU_F32, XR, 1);
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ESHAPE,
                 "softmax_xent: operand labels is f32 but must be int32", NULL);
    bfree(&s);
}

/* ---- classify_count -------------------------------------------------------------------------- */

static void test_classify_count(void **state)
{
    (void)state;
    struct bufs s = {0};
    float *x = bset(&s, 1, TPU_F32, 6, 3);
    int32_t *lab = bset(&s, 2, TPU_INT32, 6, 1);
    float *y = bset(&s, 0, TPU_F32, 1, 2);
    const float nan = NAN;
    const float xv[18] = {
        0.1f, 0.9f, 0.2f, /* argmax 1, label 1: correct */
        0.5f, 0.5f, 0.1f, /* tie: lowest index 0, label 1: wrong */
        0.5f, 0.5f, 0.5f, /* tie: 0, label 0: correct */
        nan,  0.2f, 0.1f, /* NaN skipped: 1, label 1: correct */
        9.0f, 0.0f, 0.0f, /* padding */
        nan,  nan,  nan,  /* no prediction, label 0: wrong */
    };
    const int32_t lv[6] = {1, 1, 0, 1, -1, 0};
    memcpy(x, xv, sizeof xv);
    memcpy(lab, lv, sizeof lv);
    struct tpu_op op = mkop(TPU_OP_CLASSIFY_COUNT, 0, X, X, 1, 2);
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(y[0] == 3.0f);
    assert_true(y[1] == 5.0f);

    /* random, against a reference */
    struct rng r = {13};
    x = bset(&s, 1, TPU_F32, 300, 7);
    lab = bset(&s, 2, TPU_INT32, 300, 1);
    unsigned correct = 0, valid = 0;
    for (size_t i = 0; i < 300; i++) {
        for (size_t j = 0; j < 7; j++)
            x[i * 7 + j] = (float)rnd_below(&r, 4); /* many ties */
        lab[i] = (int32_t)rnd_below(&r, 8) - 1;
        if (lab[i] < 0)
            continue;
        size_t best = 0;
        for (size_t j = 1; j < 7; j++)
            if (x[i * 7 + j] > x[i * 7 + best])
                best = j;
        valid++;
        correct += best == (size_t)lab[i];
    }
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(y[0] == (float)correct);
    assert_true(y[1] == (float)valid);

    struct tpu_diag d = {0, ""};
    lab[17] = 7;
    expect_error(run(&op, &s, NULL, &d), &d, TPU_ERANGE, "classify_count: row 17 has label 7",
                 "7 classes", NULL);
    bfree(&s);
}

/* ---- optimizers ------------------------------------------------------------------------------ */

static void test_sgd_momentum(void **state)
{
    (void)state;
    struct rng r = {14};
    const size_t n = 5 * 29;
    struct bufs s = {0};
    float *p = bset(&s, 0, TPU_F32, 5, 29);
    float *v = bset(&s, 1, TPU_F32, 5, 29);
    float *g = bset(&s, 2, TPU_F32, 5, 29);
    float wp[5 * 29], wv[5 * 29];
    for (size_t i = 0; i < n; i++) {
        p[i] = wp[i] = rnd_f32(&r, -1, 1);
        v[i] = wv[i] = 0.0f;
    }
    struct tpu_op op = mkop(TPU_OP_SGD_MOMENTUM, 0, 1, X, 2, X);
    op.attrs.alpha = 0.05f;
    op.attrs.beta = 0.9f;
    op.attrs.gamma = 1e-4f;
    for (int step = 0; step < 5; step++) {
        for (size_t i = 0; i < n; i++)
            g[i] = rnd_f32(&r, -1, 1);
        for (size_t i = 0; i < n; i++) {
            volatile float t1 = 1e-4f * wp[i];
            volatile float gg = g[i] + t1;
            volatile float t2 = 0.9f * wv[i];
            wv[i] = t2 + gg;
            volatile float t3 = 0.05f * wv[i];
            wp[i] = wp[i] - t3;
        }
        assert_int_equal(run_ok(&op, &s), 0);
        expect_same(v, wv, n, "sgd velocity");
        expect_same(p, wp, n, "sgd param");
    }
    /* by hand: p 1, v 0.5, grad 0.25, gamma 0, beta 0.5, alpha 0.5: v = 0.5, p = 0.75 */
    p[0] = 1.0f;
    v[0] = 0.5f;
    g[0] = 0.25f;
    op.attrs.alpha = 0.5f;
    op.attrs.beta = 0.5f;
    op.attrs.gamma = 0.0f;
    assert_int_equal(run_ok(&op, &s), 0);
    assert_true(v[0] == 0.5f && p[0] == 0.75f);
    bfree(&s);
}

/* One Adam step in double for element i; returns the new param (m, v updated). */
static double adam_double(double p, double *m, double *v, double g, double lr, double b1,
                          double b2, double eps, double gamma, int t)
{
    g += gamma * p;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mhat = *m / (1 - pow(b1, t)), vhat = *v / (1 - pow(b2, t));
    return p - lr * mhat / (sqrt(vhat) + eps);
}

/* Adam at t = 1 (bias correction divides by 1 - b1 and 1 - b2) and t = 10, three ways:
 * bit for bit against the documented fp32 order; against double precision (tolerance: about
 * 14 roundings of 2^-24 relative along the update, on data where m and g have one sign so
 * nothing cancels: 2^-19 (|param| + |update|) covers it with margin); and, at t = 1 from
 * zero state, the textbook property update = -lr * g / (|g| + eps). */
static void test_adam(void **state)
{
    (void)state;
    struct rng r = {15};
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f, gamma = 1e-3f;
    enum { N = 200 };
    for (int t = 1; t <= 10; t += 9) {
        struct bufs s = {0};
        float *p = bset(&s, 0, TPU_F32, 4, N / 4);
        float *m = bset(&s, 1, TPU_F32, 4, N / 4);
        float *v = bset(&s, 2, TPU_F32, 4, N / 4);
        float *g = bset(&s, 3, TPU_F32, 4, N / 4);
        float p0[N], m0[N], v0[N], wp[N], wm[N], wv[N];
        double dp[N], tol[N];
        for (size_t i = 0; i < N; i++) {
            float sign = rnd_below(&r, 2) ? 1.0f : -1.0f;
            g[i] = sign * rnd_f32(&r, 0.01f, 1.0f);
            /* every 4th param is 0, so that param - update shows the update's last bit */
            p0[i] = p[i] = i % 4 == 0 ? 0.0f : sign * rnd_f32(&r, 0.0f, 0.5f);
            m0[i] = m[i] = t == 1 ? 0.0f : sign * rnd_f32(&r, 0.0f, 0.1f);
            v0[i] = v[i] = t == 1 ? 0.0f : rnd_f32(&r, 0.0f, 0.01f);
        }
        /* documented fp32 order; b^t by binary exponentiation in double */
        double pw1 = 1, pw2 = 1, x1 = b1, x2 = b2;
        for (unsigned e = (unsigned)t; e; e >>= 1) {
            if (e & 1u) {
                pw1 *= x1;
                pw2 *= x2;
            }
            x1 *= x1;
            x2 *= x2;
        }
        const float c1 = (float)(1.0 - pw1), c2 = (float)(1.0 - pw2);
        for (size_t i = 0; i < N; i++) {
            volatile float t1 = gamma * p0[i];
            volatile float gg = g[i] + t1;
            volatile float mm = b1 * m0[i];
            volatile float o1 = 1.0f - b1;
            volatile float q1 = o1 * gg;
            mm = mm + q1;
            volatile float vv = b2 * v0[i];
            volatile float o2 = 1.0f - b2;
            volatile float g2 = gg * gg;
            volatile float q2 = o2 * g2;
            vv = vv + q2;
            volatile float mhat = mm / c1, vhat = vv / c2;
            volatile float den = sqrtf(vhat);
            den = den + eps;
            volatile float num = lr * mhat;
            volatile float upd = num / den;
            wp[i] = p0[i] - upd;
            wm[i] = mm;
            wv[i] = vv;
            double md = m0[i], vd = v0[i];
            dp[i] = adam_double(p0[i], &md, &vd, g[i], lr, b1, b2, eps, gamma, t);
            tol[i] = ldexp(fabs(dp[i]) + fabs(dp[i] - p0[i]), -19);
        }
        int64_t vars[2] = {99, t};
        struct tpu_op op = mkop(TPU_OP_ADAM, 0, 1, 2, 3, X);
        op.attrs.var = 1;
        op.attrs.alpha = lr;
        op.attrs.beta = b1;
        op.attrs.delta = b2;
        op.attrs.eps = eps;
        op.attrs.gamma = gamma;
        struct tpu_diag d = {0, ""};
        assert_int_equal(run(&op, &s, vars, &d), 0);
        assert_int_equal(vars[1], t); /* the op does not advance t */
        expect_same(m, wm, N, "adam m, documented order");
        expect_same(v, wv, N, "adam v, documented order");
        expect_same(p, wp, N, t == 1 ? "adam t=1 documented order" : "adam t=10 documented order");
        expect_close(p, dp, tol, N, t == 1 ? "adam t=1 vs double" : "adam t=10 vs double");
        if (t == 1) {
            /* from zero state the first step is -lr * g' / (|g'| + eps), g' = g + gamma p */
            double want[N], tl[N];
            for (size_t i = 0; i < N; i++) {
                double gg = g[i] + (double)gamma * p0[i];
                want[i] = p0[i] - lr * gg / (fabs(gg) + eps);
                tl[i] = ldexp(fabs(want[i]) + lr, -19);
            }
            expect_close(p, want, tl, N, "adam first step");
        }
        bfree(&s);
    }
}

static void test_adam_errors(void **state)
{
    (void)state;
    struct bufs s = {0};
    for (uint32_t i = 0; i < 4; i++)
        bset(&s, i, TPU_F32, 2, 2);
    struct tpu_op op = mkop(TPU_OP_ADAM, 0, 1, 2, 3, X);
    op.attrs.var = 0;
    op.attrs.beta = 0.9f;
    op.attrs.delta = 0.999f;
    int64_t vars[1] = {0};
    struct tpu_diag d = {0, ""};
    expect_error(run(&op, &s, vars, &d), &d, TPU_ERANGE, "adam: the step count in variable 0 is 0",
                 "at least 1", NULL);
    vars[0] = -3;
    expect_error(run(&op, &s, vars, &d), &d, TPU_ERANGE, "is -3", NULL);
    vars[0] = 1;
    op.attrs.beta = 1.0f;
    expect_error(run(&op, &s, vars, &d), &d, TPU_ERANGE, "beta (b1) is 1", "[0, 1)", NULL);
    op.attrs.beta = 0.9f;
    bset(&s, 2, TPU_F32, 2, 3);
    expect_error(run(&op, &s, vars, &d), &d, TPU_ESHAPE, "adam: operand v is [2][3] but must be "
                 "[2][2]", NULL);
    bfree(&s);
}

/* ---- variables and non-local ops ------------------------------------------------------------ */

static void test_var_add(void **state)
{
    (void)state;
    int64_t vars[3] = {5, 0, INT64_MAX - 1};
    struct tpu_op op = mkop(TPU_OP_VAR_ADD, X, X, X, X, X);
    op.attrs.var = 0;
    op.attrs.imm = -7;
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu__op_compute(&op, NULL, vars, 8, 1, NULL, &d), 0);
    assert_int_equal(vars[0], -2);
    assert_int_equal(vars[1], 0);
    op.attrs.var = 2;
    op.attrs.imm = 1;
    assert_int_equal(tpu__op_compute(&op, NULL, vars, 8, 1, NULL, &d), 0);
    assert_true(vars[2] == INT64_MAX);
    expect_error(tpu__op_compute(&op, NULL, vars, 8, 1, NULL, &d), &d, TPU_ERANGE,
                 "var_add: variable 2 holds 9223372036854775807", "overflow", NULL);
    assert_true(vars[2] == INT64_MAX);
}

static void test_not_local(void **state)
{
    (void)state;
    static const enum tpu_opcode codes[] = {TPU_OP_INFEED,    TPU_OP_OUTFEED,
                                            TPU_OP_ALL_REDUCE, TPU_OP_COLLECTIVE_PERMUTE,
                                            TPU_OP_LOOP_BEGIN, TPU_OP_LOOP_END};
    static const char *const names[] = {"infeed",     "outfeed",    "all_reduce",
                                        "collective_permute", "loop_begin", "loop_end"};
    struct bufs s = {0};
    bset(&s, 0, TPU_F32, 2, 2);
    bset(&s, 1, TPU_F32, 2, 2);
    int64_t vars[1] = {3};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        struct tpu_op op = mkop(codes[i], 0, X, X, 1, X);
        struct tpu_diag d = {0, ""};
        char want[64];
        snprintf(want, sizeof want, "%s is not a local op", names[i]);
        expect_error(run(&op, &s, vars, &d), &d, TPU_EINVAL, want, NULL);
    }
    struct tpu_op op = mkop((enum tpu_opcode)TPU_OP_COUNT, X, X, X, X, X);
    struct tpu_diag d = {0, ""};
    expect_error(run(&op, &s, vars, &d), &d, TPU_EINVAL, "unknown opcode", NULL);
    assert_int_equal(vars[0], 3);
    bfree(&s);
}

/* The op table's `unit`, `vpu_ops` and `sem` columns agree: the ops the chip runs itself
 * (infeed, outfeed, collectives, loops) are not computed here, and every vector op has a
 * cost per element. */
static void test_op_table_units(void **state)
{
    (void)state;
    struct bufs s = {0};
    bset(&s, 0, TPU_F32, 2, 2);
    int64_t vars[1] = {0};
    for (unsigned i = 0; i < TPU_OP_COUNT; i++) {
        const enum tpu_opcode code = (enum tpu_opcode)i;
        const enum tpu_unit unit = tpu__op_unit(code);
        const bool chip_op = unit == TPU_UNIT_INFEED || unit == TPU_UNIT_OUTFEED ||
                             unit == TPU_UNIT_ICI || code == TPU_OP_LOOP_BEGIN ||
                             code == TPU_OP_LOOP_END;
        assert_true(unit != TPU_UNIT_DMA); /* DMA streams operands; it runs no op */
        /* the public question reads the same column */
        assert_int_equal(tpu_opcode_is_collective(code), unit == TPU_UNIT_ICI);
        if (unit == TPU_UNIT_VPU)
            assert_true(tpu__vpu_ops_per_element(code) >= 1);
        else
            assert_int_equal(tpu__vpu_ops_per_element(code), 0);
        if (chip_op) {
            struct tpu_op op = mkop(code, X, X, X, X, X);
            struct tpu_diag d = {0, ""};
            expect_error(run(&op, &s, vars, &d), &d, TPU_EINVAL, "is not a local op", NULL);
        }
    }
    assert_int_equal(tpu__op_unit(TPU_OP_MATMUL), TPU_UNIT_MXU);
    assert_true(tpu_opcode_is_collective(TPU_OP_ALL_REDUCE));
    assert_true(tpu_opcode_is_collective(TPU_OP_COLLECTIVE_PERMUTE));
    assert_false(tpu_opcode_is_collective(TPU_OP_MATMUL));
    assert_false(tpu_opcode_is_collective(TPU_OP_COUNT));
    assert_int_equal(tpu__op_unit(TPU_OP_VAR_ADD), TPU_UNIT_CTRL);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_ADAM), 22);
    bfree(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_matmul_int8),
        cmocka_unit_test(test_matmul_passes),
        cmocka_unit_test(test_matmul_mixed_passes),
        cmocka_unit_test(test_matmul_arena_reuse),
        cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_max_and_relu_by_hand),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_vector_errors),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_softmax_xent_values),
        cmocka_unit_test(test_softmax_xent_gradient),
        cmocka_unit_test(test_softmax_xent_padding_and_range),
        cmocka_unit_test(test_classify_count),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_errors),
        cmocka_unit_test(test_var_add),
        cmocka_unit_test(test_not_local),
        cmocka_unit_test(test_op_table_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
