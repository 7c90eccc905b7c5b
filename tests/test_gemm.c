/* The fast GEMM kernels (sim/kernels/) against the matrix unit's numerics (mxu.h, NUMERICS).
 *
 * The reference here is written independently of sim/: a triple loop that follows the
 * definition literally (K cut into tiles of R rows with the padding rows included, +0 at the
 * top of each column, product and sum as separate rounded statements, NaNs made canonical at
 * every array and accumulator output). Every fast path (AVX-512, AVX2, portable C; FMA and
 * multiply + add kernels; 1, 2, 3 threads) must give its bits exactly; on a mismatch the
 * test prints the largest difference and the first mismatching outputs with both bit
 * patterns. The per-tile definition in sim/mxu/mxu_tile.c, composed into a GEMM, must agree too.
 * The fp32 multi-pass GEMM is checked against double precision with a derived error bound. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mxu.h"
#include "kernels/gemm_int.h"
#include "xorshift.h"
#include "ref_gemm.h"

/* ---- data ------------------------------------------------------------------------------ */

/* A normal bf16 with exponent in [-spread, spread] and a random sign and significand. */
static tpu_bf16 rnd_bf16(struct rng *r, int spread)
{
    unsigned sign = rnd_below(r, 2);
    int e = (int)rnd_below(r, (unsigned)(2 * spread + 1)) - spread;
    tpu_bf16 v = {(uint16_t)((sign << 15) | ((unsigned)(e + 127) << 7) | rnd_below(r, 128))};
    return v;
}

static tpu_bf16 *alloc_bf16(size_t count)
{
    tpu_bf16 *p = malloc((count ? count : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static float *alloc_f32(size_t count)
{
    float *p = malloc((count ? count : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

static void fill_bf16(struct rng *r, tpu_bf16 *p, size_t count, int spread)
{
    for (size_t i = 0; i < count; i++)
        p[i] = rnd_bf16(r, spread);
}

/* Values from every corner of bf16: zeros, subnormals, extremes, Inf, NaN (with payloads),
 * and ones whose products overflow (2^64 * 2^64) or fall below the subnormal range
 * (2^-70 * 2^-70), so the multiply + add kernel is needed and exercised. */
static const uint16_t edge_pool[] = {
    0x0000, 0x8000,         /* +-0 */
    0x0001, 0x807F, 0x0040, /* subnormals: smallest, largest negative, middle */
    0x0080, 0x8080,         /* smallest normals */
    0x7F7F, 0xFF7F,         /* largest finite */
    0x7F80, 0xFF80,         /* +-Inf */
    0x7FC1, 0xFFA0,         /* NaNs with payloads */
    0x3F80, 0xBF80, 0x3FC1, /* 1, -1, 1.5078125 */
    0x5F80, 0xDFC3,         /* 2^64, -1.52 * 2^64 (products overflow) */
    0x1C80, 0x9CC5,         /* 2^-70, -1.54 * 2^-70 (products underflow) */
    0x3C01, 0x2081,         /* 2^-7 * 1.0078, 2^-62 * 1.0078 */
};

static void fill_edge(struct rng *r, tpu_bf16 *p, size_t count)
{
    const unsigned n_pool = sizeof edge_pool / sizeof edge_pool[0];
    for (size_t i = 0; i < count; i++) {
        if (rnd_below(r, 3) == 0) {
            p[i].bits = edge_pool[rnd_below(r, n_pool)];
        } else {
            /* a random bit pattern: any exponent, subnormals, specials */
            p[i].bits = (uint16_t)rnd(r);
        }
    }
}

/* ---- the reference ----------------------------------------------------------------------- */

static int32_t ref_i32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}

static void ref_gemm_int8(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                          size_t n, size_t r, bool accumulate)
{
    size_t n_tiles = (k + r - 1) / r;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            uint32_t acc = accumulate ? (uint32_t)y[i * n + j] : 0u;
            for (size_t kt = 0; kt < n_tiles; kt++) {
                uint32_t t = 0;
                for (size_t row = 0; row < r && kt * r + row < k; row++) {
                    size_t kk = kt * r + row;
                    t += (uint32_t)((int32_t)a[i * k + kk] * (int32_t)b[kk * n + j]);
                }
                acc = kt == 0 && !accumulate ? t : acc + t;
            }
            y[i * n + j] = ref_i32(acc);
        }
}

/* ---- comparison ---------------------------------------------------------------------------- */

/* Bit-for-bit equality; on failure prints the largest difference and the first mismatches. */
static void expect_same_f32(const float *got, const float *want, size_t m, size_t n,
                            const char *what)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < m * n; i++) {
        uint32_t g = tpu_f32_bits(got[i]), w = tpu_f32_bits(want[i]);
        if (g == w)
            continue;
        double d = fabs((double)got[i] - (double)want[i]);
        if (isnan(d) || d > worst)
            worst = isnan(d) ? INFINITY : d;
        if (bad < 5)
            printf("  %s: y[%zu][%zu] got 0x%08X (%.9g) want 0x%08X (%.9g)\n", what, i / n,
                   i % n, (unsigned)g, (double)got[i], (unsigned)w, (double)want[i]);
        bad++;
    }
    if (bad) {
        printf("  %s: %zu of %zu outputs differ, largest difference %g\n", what, bad, m * n,
               worst);
        fail_msg("%s: results differ from the reference", what);
    }
}

static void expect_same_i32(const int32_t *got, const int32_t *want, size_t m, size_t n,
                            const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < m * n; i++) {
        if (got[i] == want[i])
            continue;
        if (bad < 5)
            printf("  %s: y[%zu][%zu] got %d (0x%08X) want %d (0x%08X)\n", what, i / n, i % n,
                   got[i], (unsigned)got[i], want[i], (unsigned)want[i]);
        bad++;
    }
    if (bad) {
        printf("  %s: %zu of %zu outputs differ\n", what, bad, m * n);
        fail_msg("%s: results differ from the reference", what);
    }
}

static size_t count_diff_f32(const float *x, const float *y, size_t count)
{
    size_t d = 0;
    for (size_t i = 0; i < count; i++)
        d += tpu_f32_bits(x[i]) != tpu_f32_bits(y[i]);
    return d;
}

static const enum tpu__gemm_isa all_isas[] = {TPU__GEMM_ISA_SCALAR, TPU__GEMM_ISA_AVX2,
                                              TPU__GEMM_ISA_AVX512};

static const char *isa_name(enum tpu__gemm_isa isa)
{
    switch (isa) {
    case TPU__GEMM_ISA_SCALAR:
        return "scalar";
    case TPU__GEMM_ISA_AVX2:
        return "avx2";
    case TPU__GEMM_ISA_AVX512:
        return "avx512";
    default:
        return "auto";
    }
}

/* Runs every supported instruction set, both bf16 kernels and 1..3 threads on one problem and
 * checks each against `want`. y_in: the prior Y when accumulating (or NULL). */
static void check_bf16_all_paths(const tpu_bf16 *a, const tpu_bf16 *b, const float *y_in,
                                 const float *want, size_t m, size_t k, size_t n, uint32_t r,
                                 const char *label)
{
    float *y = alloc_f32(m * n);
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        for (int fma = 0; fma < 2; fma++)
            for (unsigned threads = 1; threads <= 3; threads++) {
                struct tpu__gemm_opts o = {all_isas[ii],
                                           fma ? TPU__GEMM_FMA_NEVER : TPU__GEMM_FMA_AUTO, 0};
                char what[160];
                snprintf(what, sizeof what, "%s m=%zu k=%zu n=%zu R=%u %s %s threads=%u",
                         label, m, k, n, r, isa_name(all_isas[ii]),
                         fma ? "mul+add" : "auto-fma", threads);
                if (y_in)
                    memcpy(y, y_in, m * n * sizeof *y);
                assert_int_equal(tpu__gemm_bf16_impl(a, b, y, m, k, n, r, y_in != NULL,
                                                     threads, &o, NULL),
                                 0);
                expect_same_f32(y, want, m, n, what);
            }
    }
    free(y);
}

static void check_int8_all_paths(const int8_t *a, const int8_t *b, const int32_t *y_in,
                                 const int32_t *want, size_t m, size_t k, size_t n, uint32_t r,
                                 const char *label)
{
    int32_t *y = malloc((m * n != 0 ? m * n : 1) * sizeof *y);
    assert_non_null(y);
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        for (unsigned threads = 1; threads <= 3; threads++) {
            struct tpu__gemm_opts o = {all_isas[ii], TPU__GEMM_FMA_AUTO, 0};
            char what[160];
            snprintf(what, sizeof what, "%s m=%zu k=%zu n=%zu R=%u %s threads=%u", label, m, k,
                     n, r, isa_name(all_isas[ii]), threads);
            if (y_in)
                memcpy(y, y_in, m * n * sizeof *y);
            assert_int_equal(tpu__gemm_int8_impl(a, b, y, m, k, n, r, y_in != NULL, threads,
                                                 &o, NULL),
                             0);
            expect_same_i32(y, want, m, n, what);
        }
    }
    free(y);
}

/* One random bf16 problem, fresh and accumulating, through every path. */
static void run_bf16_case(struct rng *rg, size_t m, size_t k, size_t n, uint32_t r, bool edge)
{
    tpu_bf16 *a = alloc_bf16(m * k), *b = alloc_bf16(k * n);
    float *want = alloc_f32(m * n), *y_in = alloc_f32(m * n);
    if (edge) {
        fill_edge(rg, a, m * k);
        fill_edge(rg, b, k * n);
    } else {
        fill_bf16(rg, a, m * k, 8);
        fill_bf16(rg, b, k * n, 8);
    }
    ref_gemm_bf16(a, b, want, m, k, n, r, false);
    check_bf16_all_paths(a, b, NULL, want, m, k, n, r, edge ? "bf16 edge" : "bf16");

    /* accumulating into prior values, some of them -0, Inf or NaN with a payload */
    for (size_t i = 0; i < m * n; i++) {
        unsigned c = rnd_below(rg, 16);
        y_in[i] = c == 0   ? -0.0f
                  : c == 1 ? -INFINITY
                  : c == 2 ? tpu_f32_from_bits(0x7FA00001u)
                           : tpu_bf16_to_f32(rnd_bf16(rg, 10));
    }
    memcpy(want, y_in, m * n * sizeof *want);
    ref_gemm_bf16(a, b, want, m, k, n, r, true);
    check_bf16_all_paths(a, b, y_in, want, m, k, n, r, edge ? "bf16 edge acc" : "bf16 acc");
    free(a);
    free(b);
    free(want);
    free(y_in);
}

static void run_int8_case(struct rng *rg, size_t m, size_t k, size_t n, uint32_t r)
{
    int8_t *a = malloc(m * k != 0 ? m * k : 1), *b = malloc(k * n != 0 ? k * n : 1);
    int32_t *want = malloc(m * n * sizeof *want), *y_in = malloc(m * n * sizeof *y_in);
    assert_true(a && b && want && y_in);
    for (size_t i = 0; i < m * k; i++)
        a[i] = (int8_t)(rnd(rg) >> 56);
    for (size_t i = 0; i < k * n; i++)
        b[i] = (int8_t)(rnd(rg) >> 56);
    ref_gemm_int8(a, b, want, m, k, n, r, false);
    check_int8_all_paths(a, b, NULL, want, m, k, n, r, "int8");
    for (size_t i = 0; i < m * n; i++)
        y_in[i] = (int32_t)(uint32_t)rnd(rg);
    memcpy(want, y_in, m * n * sizeof *want);
    ref_gemm_int8(a, b, want, m, k, n, r, true);
    check_int8_all_paths(a, b, y_in, want, m, k, n, r, "int8 acc");
    free(a);
    free(b);
    free(want);
    free(y_in);
}

/* ---- bf16 ---------------------------------------------------------------------------------- */

/* 8 and 20: whole and partial 4-row micro-tiles of the AVX2 kernel (and 6-row ones) */
static const size_t test_sizes[] = {1, 7, 8, 20, 127, 128, 129, 513};

/* Each size in each dimension with the other two moderate (M 37, K 150, N 45: not multiples
 * of any micro-tile, two tiles of 128). */
static void test_bf16_sizes(void **state)
{
    (void)state;
    struct rng rg = {0x9E3779B97F4A7C15ull};
    for (size_t s = 0; s < sizeof test_sizes / sizeof test_sizes[0]; s++) {
        size_t v = test_sizes[s];
        run_bf16_case(&rg, v, 150, 45, 128, false);
        run_bf16_case(&rg, 37, v, 45, 128, false);
        run_bf16_case(&rg, 37, 150, v, 128, false);
    }
}

/* A small array (R = 8): many short tiles, and tile counts that do not divide the chunks. */
static void test_bf16_small_array(void **state)
{
    (void)state;
    struct rng rg = {12345};
    run_bf16_case(&rg, 13, 61, 35, 8, false);
    run_bf16_case(&rg, 29, 8, 70, 8, false);
    run_bf16_case(&rg, 5, 400, 9, 8, false);
    run_bf16_case(&rg, 17, 100, 33, 3, false);     /* R = 3 */
    run_bf16_case(&rg, 16, 1000, 40, 1000, false); /* one tile longer than a chunk */
    run_bf16_case(&rg, 14, 777, 33, 500, false);   /* tiles longer than a chunk, partial */
    run_bf16_case(&rg, 3, 40, 5, 1, false);        /* R = 1: every product is its own tile */
}

/* Shapes past the driver's block sizes (A blocks of ~160 rows, B blocks of ~1000 columns,
 * K chunks of 384), so that every block loop runs more than once and ends partially. */
static void test_bf16_blocking(void **state)
{
    (void)state;
    struct rng rg = {2024};
    run_bf16_case(&rg, 9, 300, 1100, 128, false);
    run_bf16_case(&rg, 700, 40, 50, 128, false);
    run_bf16_case(&rg, 170, 1000, 70, 128, false);
}

/* Results of 2 MiB and more, 64-byte aligned, are written past the caches once final
 * (non-temporal stores, gemm.c); they must be the same bits as any other. One K chunk (two
 * tiles) with NaNs and infinities (canonical NaNs go through the streamed stores) against the
 * reference; then, fresh and accumulating, one chunk and two, against the same problem with
 * Y one float off the alignment (plain stores, which the other tests check against the
 * reference). Partial micro-tiles on both sides. The vector kernels only: the portable one
 * never streams. */
static void run_streamed(const tpu_bf16 *a, const tpu_bf16 *b, const float *y_in, float *y,
                         size_t m, size_t k, size_t n, enum tpu__gemm_isa isa, unsigned threads)
{
    struct tpu__gemm_opts o = {isa, TPU__GEMM_FMA_AUTO, 0};
    if (y_in)
        memcpy(y, y_in, m * n * sizeof *y);
    assert_int_equal(tpu__gemm_bf16_impl(a, b, y, m, k, n, 128, y_in != NULL, threads, &o, NULL),
                     0);
}

static void test_bf16_streamed_results(void **state)
{
    (void)state;
    struct rng rg = {0x5EED};
    const size_t m = 505, n = 1040; /* 505 x 1040 x 4 bytes > 2 MiB; 1040 = 16 x 65 */
    const size_t ks[] = {130, 390}; /* one K chunk of two tiles; two chunks */
    float *mem = aligned_alloc(64, (m * n + 16) * sizeof *mem);
    float *plain = alloc_f32(m * n), *y_in = alloc_f32(m * n);
    assert_non_null(mem);
    for (size_t i = 0; i < m * n; i++)
        y_in[i] = tpu_bf16_to_f32(rnd_bf16(&rg, 10));
    for (size_t ki = 0; ki < 2; ki++) {
        const size_t k = ks[ki];
        tpu_bf16 *a = alloc_bf16(m * k), *b = alloc_bf16(k * n);
        fill_bf16(&rg, a, m * k, 8);
        fill_bf16(&rg, b, k * n, 8);
        if (ki == 0) {
            /* NaNs with payloads, infinities and zeros of both signs here and there */
            static const uint16_t odd[] = {0x7FC1, 0xFFA0, 0x7F80, 0xFF80, 0x0000, 0x8000};
            for (size_t i = 0; i < m * k; i += 97)
                a[i].bits = odd[rnd_below(&rg, 6)];
            for (size_t i = 0; i < k * n; i += 89)
                b[i].bits = odd[rnd_below(&rg, 6)];
            ref_gemm_bf16(a, b, plain, m, k, n, 128, false);
            run_streamed(a, b, NULL, mem, m, k, n, TPU__GEMM_ISA_AUTO, 1);
            expect_same_f32(mem, plain, m, n, "streamed, edge values");
        }
        for (int acc = 0; acc < 2; acc++)
            for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
                if (all_isas[ii] == TPU__GEMM_ISA_SCALAR || !tpu__gemm_isa_supported(all_isas[ii]))
                    continue;
                for (unsigned threads = 1; threads <= 3; threads += 2) {
                    const float *in = acc ? y_in : NULL;
                    run_streamed(a, b, in, mem + 1, m, k, n, all_isas[ii], threads);
                    memcpy(plain, mem + 1, m * n * sizeof *plain);
                    run_streamed(a, b, in, mem, m, k, n, all_isas[ii], threads);
                    char what[96];
                    snprintf(what, sizeof what, "streamed k=%zu acc=%d %s threads=%u", k, acc,
                             isa_name(all_isas[ii]), threads);
                    expect_same_f32(mem, plain, m, n, what);
                }
            }
        free(a);
        free(b);
    }
    free(mem);
    free(plain);
    free(y_in);
}

/* Every corner of bf16, with the products that overflow and underflow. */
static void test_bf16_edge_values(void **state)
{
    (void)state;
    struct rng rg = {777};
    run_bf16_case(&rg, 25, 140, 70, 128, true);
    run_bf16_case(&rg, 13, 57, 33, 8, true);
    run_bf16_case(&rg, 1, 300, 1, 128, true);
}

/* Exactness of FMA at the bounds derived in gemm.c. Products with Ea + Eb = -135 and = 126
 * are exact: the FMA kernel must run and agree with the reference. One step past either bound
 * (-136, 127) the driver must switch to multiply + add; forcing FMA there must change results
 * (which shows the data can tell the kernels apart). */
static void fma_bound_case(int ea, int eb, bool inside)
{
    struct rng rg = {(uint64_t)(1000 + ea * 7 + eb)};
    const size_t m = 24, k = 64, n = 64;
    tpu_bf16 *a = alloc_bf16(m * k), *b = alloc_bf16(k * n);
    float *want = alloc_f32(m * n), *y = alloc_f32(m * n);
    /* Odd significands: every product bit matters. Outside the bounds half of A is one
     * step inside them, so that column sums take odd multiples of the last bit and a fused
     * rounding can differ from the separate one (with only products below 2^-149, every sum
     * would stay a multiple of 2^-148 and both roundings would agree by parity). */
    int step = inside ? 0 : ea < 0 ? 1 : -1;
    for (size_t i = 0; i < m * k; i++) {
        int e = ea + step * (int)rnd_below(&rg, 2);
        a[i].bits = (uint16_t)((rnd_below(&rg, 2) << 15) | ((unsigned)(e + 127) << 7) |
                               (2 * rnd_below(&rg, 64) + 1));
    }
    for (size_t i = 0; i < k * n; i++)
        b[i].bits = (uint16_t)((rnd_below(&rg, 2) << 15) | ((unsigned)(eb + 127) << 7) |
                               (2 * rnd_below(&rg, 64) + 1));
    ref_gemm_bf16(a, b, want, m, k, n, 128, false);
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        enum tpu__gemm_isa isa = all_isas[ii];
        if (isa == TPU__GEMM_ISA_SCALAR || !tpu__gemm_isa_supported(isa))
            continue;
        struct tpu__gemm_opts o = {isa, TPU__GEMM_FMA_AUTO, 0};
        struct tpu__gemm_report rep;
        char what[96];
        snprintf(what, sizeof what, "Ea=%d Eb=%d %s", ea, eb, isa_name(isa));
        assert_int_equal(tpu__gemm_bf16_impl(a, b, y, m, k, n, 128, false, 1, &o, &rep), 0);
        expect_same_f32(y, want, m, n, what);
        if (inside) {
            assert_true(rep.fma_blocks > 0);
            assert_int_equal(rep.plain_blocks, 0);
        } else {
            assert_int_equal(rep.fma_blocks, 0);
            assert_true(rep.plain_blocks > 0);
            o.fma = TPU__GEMM_FMA_ALWAYS;
            assert_int_equal(tpu__gemm_bf16_impl(a, b, y, m, k, n, 128, false, 1, &o, NULL), 0);
            size_t d = count_diff_f32(y, want, m * n);
            printf("  %s: forced FMA differs in %zu of %zu outputs\n", what, d, m * n);
            assert_true(d > 0);
        }
    }
    free(a);
    free(b);
    free(want);
    free(y);
}

static void test_bf16_fma_bounds(void **state)
{
    (void)state;
    fma_bound_case(-68, -67, true);   /* -135: the smallest exact exponent sum */
    fma_bound_case(-68, -68, false);  /* -136: products lose bits as subnormals */
    fma_bound_case(-126, -9, true);   /* subnormal range reached from the normal side */
    fma_bound_case(63, 63, true);     /* 126 */
    fma_bound_case(63, 64, false);    /* 127: products overflow */
}

/* The multiply + add kernel on an overflow that FMA would hide: t = -1.5 * 2^127 first, then
 * a product of 2.25 * 2^127 (beyond FLT_MAX): mul + add gives +Inf, fma a finite value. */
static void test_bf16_overflow_by_hand(void **state)
{
    (void)state;
    /* a = [1.5 * 2^63, 1.5 * 2^63], b = [-2^64, 1.5 * 2^64] */
    tpu_bf16 a[2] = {{0x5F40}, {0x5F40}}, b[2] = {{0xDF80}, {0x5FC0}};
    float y = 0;
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        struct tpu__gemm_opts o = {all_isas[ii], TPU__GEMM_FMA_AUTO, 0};
        assert_int_equal(tpu__gemm_bf16_impl(a, b, &y, 1, 2, 1, 128, false, 1, &o, NULL), 0);
        assert_true(isinf(y) && y > 0);
        if (all_isas[ii] != TPU__GEMM_ISA_SCALAR) {
            o.fma = TPU__GEMM_FMA_ALWAYS;
            assert_int_equal(tpu__gemm_bf16_impl(a, b, &y, 1, 2, 1, 128, false, 1, &o, NULL),
                             0);
            assert_true(y == 0x1.8p126f); /* 0.75 * 2^127: what a fused kernel would give */
        }
    }
}

/* Values written by hand: one tile's sum order and the accumulator order are visible. With
 * R = 2, y = (1 + 2^-24 + 2^-24) rounds differently per grouping:
 *   tile 0: t = +0 + 1 = 1; t = 1 + 2^-24 = 1 (tie to even);      acc = 1
 *   tile 1: t = +0 + 2^-24 = 2^-24; t = 2^-24 + 2^-24 = 2^-23;   acc = 1 + 2^-23 */
static void test_bf16_order_by_hand(void **state)
{
    (void)state;
    tpu_bf16 a[4] = {{0x3F80}, {0x3F80}, {0x3F80}, {0x3F80}};
    tpu_bf16 b[4] = {{0x3F80}, {0x3380}, {0x3380}, {0x3380}}; /* 1, 2^-24, 2^-24, 2^-24 */
    float y;
    assert_int_equal(tpu_gemm_bf16(a, b, &y, 1, 4, 1, 2, false, 1), 0);
    assert_true(y == 1.0f + 0x1p-23f);
    /* R = 4: one tile, sequential: 1 + 2^-24 = 1 three times */
    assert_int_equal(tpu_gemm_bf16(a, b, &y, 1, 4, 1, 4, false, 1), 0);
    assert_true(y == 1.0f);
    /* NaN results are canonical: Inf * 0 */
    tpu_bf16 inf = {0x7F80}, zero = {0x0000};
    assert_int_equal(tpu_gemm_bf16(&inf, &zero, &y, 1, 1, 1, 128, false, 1), 0);
    assert_int_equal(tpu_f32_bits(y), TPU_F32_CANONICAL_NAN_BITS);
    /* never -0: (-1) * (+0) = -0 is added to the +0 at the top of the column */
    tpu_bf16 neg1 = {0xBF80};
    assert_int_equal(tpu_gemm_bf16(&neg1, &zero, &y, 1, 1, 1, 128, false, 1), 0);
    assert_int_equal(tpu_f32_bits(y), 0x00000000u);
}

/* The same bits for any thread count, and the threads are really used on a big problem. */
static void test_bf16_threads(void **state)
{
    (void)state;
    struct rng rg = {4242};
    const size_t m = 200, k = 300, n = 190;
    tpu_bf16 *a = alloc_bf16(m * k), *b = alloc_bf16(k * n);
    float *y1 = alloc_f32(m * n), *y = alloc_f32(m * n);
    fill_bf16(&rg, a, m * k, 8);
    fill_bf16(&rg, b, k * n, 8);
    struct tpu__gemm_report rep;
    assert_int_equal(tpu__gemm_bf16_impl(a, b, y1, m, k, n, 128, false, 1, NULL, &rep), 0);
    assert_int_equal(rep.threads_used, 1);
    const unsigned counts[] = {2, 3, 4, 7, 64, 1000};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        assert_int_equal(
            tpu__gemm_bf16_impl(a, b, y, m, k, n, 128, false, counts[i], NULL, &rep), 0);
        assert_true(rep.threads_used >= 2 && rep.threads_used <= counts[i]);
        char what[64];
        snprintf(what, sizeof what, "threads=%u", counts[i]);
        expect_same_f32(y, y1, m, n, what);
    }
    /* a tiny problem is not worth a thread */
    assert_int_equal(tpu__gemm_bf16_impl(a, b, y, 2, 2, 2, 128, false, 8, NULL, &rep), 0);
    assert_int_equal(rep.threads_used, 1);
    free(a);
    free(b);
    free(y1);
    free(y);
}

/* The whole GEMM built from the per-tile definition (sim/mxu/mxu_tile.c): weight tiles of R x C
 * from B (zero padded), input rows from the matching K-slice of A, column outputs added into
 * the accumulators tile by tile. */
static void test_bf16_matches_tile_definition(void **state)
{
    (void)state;
    struct rng rg = {99};
    const size_t m = 19, k = 300, n = 40;
    const uint32_t r = 128, c = 16;
    tpu_bf16 *a = alloc_bf16(m * k), *b = alloc_bf16(k * n);
    tpu_bf16 *wt = alloc_bf16((size_t)r * c), *in = alloc_bf16(m * r);
    float *want = alloc_f32(m * n), *got = alloc_f32(m * n), *out = alloc_f32(m * c);
    fill_edge(&rg, a, m * k);
    fill_edge(&rg, b, k * n);
    const tpu_bf16 zero = {0};
    for (size_t n0 = 0; n0 < n; n0 += c)
        for (size_t k0 = 0; k0 < k; k0 += r) {
            for (size_t i = 0; i < r; i++)
                for (size_t j = 0; j < c; j++)
                    wt[i * c + j] = k0 + i < k && n0 + j < n ? b[(k0 + i) * n + n0 + j] : zero;
            for (size_t mm = 0; mm < m; mm++)
                for (size_t i = 0; i < r; i++)
                    in[mm * r + i] = k0 + i < k ? a[mm * k + k0 + i] : zero;
            tpu_mxu_tile_bf16(r, c, wt, in, m, out);
            for (size_t mm = 0; mm < m; mm++)
                for (size_t j = 0; j < c && n0 + j < n; j++) {
                    float *acc = &want[mm * n + n0 + j];
                    float t = out[mm * c + j];
                    *acc = k0 == 0 ? t : ref_canon(*acc + t);
                }
        }
    assert_int_equal(tpu_gemm_bf16(a, b, got, m, k, n, r, false, 2), 0);
    expect_same_f32(got, want, m, n, "tile definition");
    free(a);
    free(b);
    free(wt);
    free(in);
    free(want);
    free(got);
    free(out);
}

/* ---- int8 ---------------------------------------------------------------------------------- */

static void test_int8_sizes(void **state)
{
    (void)state;
    struct rng rg = {31337};
    for (size_t s = 0; s < sizeof test_sizes / sizeof test_sizes[0]; s++) {
        size_t v = test_sizes[s];
        run_int8_case(&rg, v, 150, 45, 128);
        run_int8_case(&rg, 37, v, 45, 128);
        run_int8_case(&rg, 37, 150, v, 128);
    }
    run_int8_case(&rg, 13, 61, 35, 8);
    run_int8_case(&rg, 13, 2049, 35, 8); /* odd K across int8 chunks */
    run_int8_case(&rg, 5, 1100, 900, 128); /* more than one B block */
    run_int8_case(&rg, 400, 33, 20, 128);  /* more than one A block */
}

/* -128 * -128 * K wraps past INT32_MAX: 16384 * 140000 = 2293760000 = 2^31 + 146276352. */
static void test_int8_wraps(void **state)
{
    (void)state;
    const size_t m = 3, k = 140000, n = 33;
    int8_t *a = malloc(m * k), *b = malloc(k * n);
    int32_t *y = malloc(m * n * sizeof *y), *want = malloc(m * n * sizeof *want);
    assert_true(a && b && y && want);
    memset(a, 0x80, m * k);
    memset(b, 0x80, k * n);
    a[k] = 127; /* row 1 starts with 127 * -128 */
    ref_gemm_int8(a, b, want, m, k, n, 128, false);
    assert_int_equal(want[0], (int32_t)(2293760000ll - 4294967296ll));
    check_int8_all_paths(a, b, NULL, want, m, k, n, 128, "int8 wrap");
    /* accumulating onto INT32_MAX wraps too */
    for (size_t i = 0; i < m * n; i++)
        y[i] = INT32_MAX;
    assert_int_equal(tpu_gemm_int8(a, b, y, m, k, n, 128, true, 2), 0);
    assert_int_equal(y[0], (int32_t)(2293760000ll + INT32_MAX - 4294967296ll));
    free(a);
    free(b);
    free(y);
    free(want);
}

static void test_int8_matches_tile_definition(void **state)
{
    (void)state;
    struct rng rg = {5};
    const size_t m = 9, k = 200, n = 20;
    const uint32_t r = 64, c = 8;
    int8_t *a = malloc(m * k), *b = malloc(k * n), *wt = malloc(r * c), *in = malloc(m * r);
    int32_t *want = malloc(m * n * 4), *got = malloc(m * n * 4), *out = malloc(m * c * 4);
    assert_true(a && b && wt && in && want && got && out);
    for (size_t i = 0; i < m * k; i++)
        a[i] = (int8_t)(rnd(&rg) >> 56);
    for (size_t i = 0; i < k * n; i++)
        b[i] = (int8_t)(rnd(&rg) >> 56);
    for (size_t n0 = 0; n0 < n; n0 += c)
        for (size_t k0 = 0; k0 < k; k0 += r) {
            for (size_t i = 0; i < r; i++)
                for (size_t j = 0; j < c; j++)
                    wt[i * c + j] = k0 + i < k && n0 + j < n ? b[(k0 + i) * n + n0 + j] : 0;
            for (size_t mm = 0; mm < m; mm++)
                for (size_t i = 0; i < r; i++)
                    in[mm * r + i] = k0 + i < k ? a[mm * k + k0 + i] : 0;
            tpu_mxu_tile_int8(r, c, wt, in, m, out);
            for (size_t mm = 0; mm < m; mm++)
                for (size_t j = 0; j < c && n0 + j < n; j++) {
                    int32_t *acc = &want[mm * n + n0 + j];
                    *acc = k0 == 0 ? out[mm * c + j]
                                   : ref_i32((uint32_t)*acc + (uint32_t)out[mm * c + j]);
                }
        }
    assert_int_equal(tpu_gemm_int8(a, b, got, m, k, n, r, false, 3), 0);
    expect_same_i32(got, want, m, n, "int8 tile definition");
    free(a);
    free(b);
    free(wt);
    free(in);
    free(want);
    free(got);
    free(out);
}

/* ---- fp32 in bf16 passes ------------------------------------------------------------------- */

static void test_f32_split(void **state)
{
    (void)state;
    tpu_bf16 h, md, l;
    /* 1 + 2^-9 + 2^-18 + 2^-23: hi = 1, mid = 2^-9 (2^-18 + 2^-23 is below half of mid's
     * ulp 2^-16), lo = 2^-18 + 2^-23 */
    float x = 1.0f + 0x1p-9f + 0x1p-18f + 0x1p-23f;
    tpu_f32_split_bf16(x, &h, &md, &l);
    assert_true(tpu_bf16_to_f32(h) == 1.0f);
    assert_true(tpu_bf16_to_f32(md) == 0x1p-9f);
    assert_true(tpu_bf16_to_f32(l) == 0x1p-18f + 0x1p-23f);
    /* rounding up in hi gives a negative remainder: 1 + 255 * 2^-15 -> hi = 1 + 2^-7 */
    x = 1.0f + 255 * 0x1p-15f;
    tpu_f32_split_bf16(x, &h, &md, &l);
    assert_true(tpu_bf16_to_f32(h) == 1.0f + 0x1p-7f);
    assert_true(tpu_bf16_to_f32(md) == -0x1p-15f);
    assert_true(tpu_bf16_to_f32(h) + tpu_bf16_to_f32(md) + tpu_bf16_to_f32(l) == x);
    /* non-finite: hi is the value, the rest 0; so is a finite x whose hi rounds to Inf */
    tpu_f32_split_bf16(INFINITY, &h, &md, &l);
    assert_int_equal(h.bits, 0x7F80);
    assert_int_equal(md.bits, 0);
    assert_int_equal(l.bits, 0);
    tpu_f32_split_bf16(FLT_MAX, &h, &md, &l);
    assert_int_equal(h.bits, 0x7F80);
    assert_int_equal(md.bits, 0);
    assert_int_equal(l.bits, 0);
    tpu_f32_split_bf16(NAN, &h, &md, &l);
    assert_true(isnan(tpu_bf16_to_f32(h)));
    assert_int_equal(md.bits, 0);
    /* every part of a random normal value: x == hi + mid + lo exactly (24 = 8 + 8 + 8 bits) */
    struct rng rg = {8};
    for (int i = 0; i < 10000; i++) {
        float v = tpu_f32_from_bits(((uint32_t)(rnd(&rg) >> 32) & 0xBFFFFFFFu) | 0x20000000u);
        tpu_f32_split_bf16(v, &h, &md, &l);
        double sum = (double)tpu_bf16_to_f32(h) + tpu_bf16_to_f32(md) + tpu_bf16_to_f32(l);
        assert_true(sum == (double)v);
    }
}

/* fp32 data with exponents in [-20, 20]: all parts and part products stay normal. */
static void fill_f32(struct rng *r, float *p, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float mant = 1.0f + (float)(rnd(r) >> 41) * 0x1p-23f;
        int e = (int)rnd_below(r, 41) - 20;
        p[i] = (rnd_below(r, 2) ? -1.0f : 1.0f) * ldexpf(mant, e);
    }
}

/* Error bounds of the multi-pass GEMM, with u = 2^-8 (bf16 rounding, 8 significant bits),
 * S = sum_k |a_k||b_k| and gamma_n = n 2^-24 / (1 - n 2^-24):
 *   Split: a = hi + e1, |e1| <= u|a|;  a = hi + mid + e2, |e2| <= u^2|a|;
 *          a = hi + mid + lo + e3, |e3| <= u^3|a|;  |hi| <= (1+u)|a|, |mid| <= (1+u)u|a|,
 *          |lo| <= (1+u)u^2|a|  (each part is the rounding of a remainder).
 *   1 pass: ab - hi*hi' = e1 b + a e1' - e1 e1'      -> truncation <= (2u + u^2) S.
 *   3 passes (hh, hm, mh): with a2 = hi + mid, ab - a2 b2 <= (2u^2 + u^4) S and the missing
 *     mid*mid' <= (1+u)^2 u^2 S           -> truncation <= u^2 (3 + 2u + 2u^2) S.
 *   6 passes (hh, hm, mh, hl, lh, mm): ab - a3 b3 <= (2u^3 + u^6) S, missing mid*lo', lo*mid'
 *     <= (1+u)^2 u^3 S each and lo*lo' <= (1+u)^2 u^4 S
 *                                          -> truncation <= u^3 (2 + 2(1+u)^2 + u(1+u)^2 + u^3) S.
 *   Products of bf16 parts are exact in fp32 (no underflow here), so the only other error is
 *   the fp32 summation of P*K terms (P passes) in any tree: <= gamma_{PK} * sum |terms|, with
 *   sum |terms| <= (1+u)^2 (1 + 2u + 3u^2) S (6 passes), (1+u)^2 (1 + 2u) S (3), (1+u)^2 S (1).
 * The reference is the product in double (each fp32 product exact, sum error <= K 2^-53 S). */
static double pass_bound(unsigned passes, size_t k, double s)
{
    const double u = 0x1p-8;
    double n = (double)(passes * k), gamma = n * 0x1p-24 / (1 - n * 0x1p-24);
    double trunc, terms;
    if (passes == 1) {
        trunc = 2 * u + u * u;
        terms = (1 + u) * (1 + u);
    } else if (passes == 3) {
        trunc = u * u * (3 + 2 * u + 2 * u * u);
        terms = (1 + u) * (1 + u) * (1 + 2 * u);
    } else {
        trunc = u * u * u * (2 + 2 * (1 + u) * (1 + u) + u * (1 + u) * (1 + u) + u * u * u);
        terms = (1 + u) * (1 + u) * (1 + 2 * u + 3 * u * u);
    }
    return (trunc + gamma * terms + (double)k * 0x1p-53) * s;
}

static void test_f32_passes_error_bound(void **state)
{
    (void)state;
    struct rng rg = {2718};
    const size_t m = 30, k = 500, n = 41;
    float *a = alloc_f32(m * k), *b = alloc_f32(k * n), *y = alloc_f32(m * n);
    fill_f32(&rg, a, m * k);
    fill_f32(&rg, b, k * n);
    const unsigned passes[] = {1, 3, 6};
    double prev_err = INFINITY;
    for (size_t pi = 0; pi < 3; pi++) {
        assert_int_equal(tpu_gemm_f32(a, b, y, m, k, n, 128, passes[pi], 2), 0);
        double worst_ratio = 0, worst_rel = 0;
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double exact = 0, s = 0;
                for (size_t kk = 0; kk < k; kk++) {
                    exact += (double)a[i * k + kk] * (double)b[kk * n + j];
                    s += fabs((double)a[i * k + kk] * (double)b[kk * n + j]);
                }
                double err = fabs((double)y[i * n + j] - exact);
                double ratio = err / pass_bound(passes[pi], k, s);
                worst_ratio = ratio > worst_ratio ? ratio : worst_ratio;
                worst_rel = err / s > worst_rel ? err / s : worst_rel;
            }
        printf("  fp32 %u pass(es): worst |y - exact| / bound = %.3g, worst |y - exact| / "
               "sum|a||b| = %.3g\n",
               passes[pi], worst_ratio, worst_rel);
        assert_true(worst_ratio <= 1.0);
        assert_true(worst_rel < prev_err); /* more passes, more accuracy */
        prev_err = worst_rel;
    }
    free(a);
    free(b);
    free(y);
}

/* The passes are bf16 GEMMs in the stated order into the same accumulators: rebuild them
 * from tpu_gemm_bf16 and compare bit for bit (1 pass: plain bf16 of the rounded inputs). */
static void test_f32_passes_are_bf16_gemms(void **state)
{
    (void)state;
    struct rng rg = {161};
    const size_t m = 21, k = 290, n = 35;
    float *a = alloc_f32(m * k), *b = alloc_f32(k * n), *y = alloc_f32(m * n),
          *want = alloc_f32(m * n);
    tpu_bf16 *ap[3], *bp[3];
    fill_f32(&rg, a, m * k);
    fill_f32(&rg, b, k * n);
    a[5] = INFINITY;
    b[7] = NAN;
    b[100] = FLT_MAX;
    for (int p = 0; p < 3; p++) {
        ap[p] = alloc_bf16(m * k);
        bp[p] = alloc_bf16(k * n);
    }
    for (size_t i = 0; i < m * k; i++)
        tpu_f32_split_bf16(a[i], &ap[0][i], &ap[1][i], &ap[2][i]);
    for (size_t i = 0; i < k * n; i++)
        tpu_f32_split_bf16(b[i], &bp[0][i], &bp[1][i], &bp[2][i]);
    static const int o1[][2] = {{0, 0}};
    static const int o3[][2] = {{1, 0}, {0, 1}, {0, 0}};
    static const int o6[][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
    const int(*orders[3])[2] = {o1, o3, o6};
    const unsigned passes[3] = {1, 3, 6};
    for (int pi = 0; pi < 3; pi++) {
        for (unsigned i = 0; i < passes[pi]; i++)
            assert_int_equal(tpu_gemm_bf16(ap[orders[pi][i][0]], bp[orders[pi][i][1]], want, m,
                                           k, n, 8, i > 0, 1),
                             0);
        for (unsigned threads = 1; threads <= 3; threads++) {
            assert_int_equal(tpu_gemm_f32(a, b, y, m, k, n, 8, passes[pi], threads), 0);
            char what[48];
            snprintf(what, sizeof what, "fp32 %u passes threads=%u", passes[pi], threads);
            expect_same_f32(y, want, m, n, what);
        }
    }
    for (int p = 0; p < 3; p++) {
        free(ap[p]);
        free(bp[p]);
    }
    free(a);
    free(b);
    free(y);
    free(want);
}

/* ---- operands as stored: tpu__gemm_ex --------------------------------------------------- */

/* fp32 values from every corner: zeros, Infs, NaNs (quiet and signalling, with payloads),
 * values that round past the largest bf16, exact rounding ties (to even, up and down),
 * subnormals (ties among them too), ordinary values whose mid and lo parts are nonzero, and
 * random bit patterns (any exponent, so mid and lo reach the subnormal range). */
static float rnd_f32_edge(struct rng *r)
{
    static const uint32_t pool[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, /* +-0, +-Inf */
        0x7FC00001u, 0xFF800001u, 0x7FBFFFFFu,              /* NaNs: quiet, signalling */
        0x7F7FFFFFu, 0xFF7F8000u, 0x7F7F7FFFu,              /* FLT_MAX, ties near it */
        0x3F808000u, 0x3F818000u, 0xBF808001u,              /* ties to even, just above */
        0x00000001u, 0x00008000u, 0x80018000u, 0x007FFFFFu, /* subnormals */
        0x00800000u, 0x3F800000u, 0x4B800001u,
    };
    unsigned c = rnd_below(r, 4);
    if (c == 0)
        return tpu_f32_from_bits(pool[rnd_below(r, sizeof pool / sizeof pool[0])]);
    if (c == 1)
        return tpu_f32_from_bits((uint32_t)(rnd(r) >> 32));
    /* ordinary: exponent in [-10, 10], all 24 significand bits random */
    float mant = 1.0f + (float)(rnd(r) >> 41) * 0x1p-23f;
    return (rnd_below(r, 2) ? -1.0f : 1.0f) * ldexpf(mant, (int)rnd_below(r, 21) - 10);
}

/* A stored operand: `rows` x `cols` as stored (the transpose of op(X) when trans). */
struct ex_operand {
    struct tpu__gemm_operand op;
    void *mem;
    size_t rows, cols;
};

static void ex_fill(struct rng *r, struct ex_operand *x, bool f32, bool trans, size_t op_rows,
                    size_t op_cols, bool edge)
{
    x->rows = trans ? op_cols : op_rows;
    x->cols = trans ? op_rows : op_cols;
    size_t count = x->rows * x->cols;
    if (f32) {
        float *v = alloc_f32(count);
        for (size_t i = 0; i < count; i++) {
            if (edge) {
                v[i] = rnd_f32_edge(r);
            } else {
                float mant = 1.0f + (float)(rnd(r) >> 41) * 0x1p-23f;
                v[i] = (rnd_below(r, 2) ? -1.0f : 1.0f) * ldexpf(mant, (int)rnd_below(r, 9) - 4);
            }
        }
        x->mem = v;
    } else {
        tpu_bf16 *v = alloc_bf16(count);
        if (edge)
            fill_edge(r, v, count);
        else
            fill_bf16(r, v, count, 4);
        x->mem = v;
    }
    x->op.data = x->mem;
    x->op.f32 = f32;
    x->op.trans = trans;
    x->op.part = 0;
}

/* op(X) as the row-major bf16 matrix the array sees, by the definition: the stored element
 * at plain indices, split by tpu_f32_split_bf16 (f32) or taken as is (bf16; its mid and lo
 * are zero). */
static tpu_bf16 *ex_bf16(const struct ex_operand *x)
{
    size_t r = x->op.trans ? x->cols : x->rows, c = x->op.trans ? x->rows : x->cols;
    tpu_bf16 *o = alloc_bf16(r * c);
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < c; j++) {
            size_t src = x->op.trans ? j * x->cols + i : i * x->cols + j;
            tpu_bf16 part[3] = {{0}, {0}, {0}};
            if (x->op.f32)
                tpu_f32_split_bf16(((const float *)x->mem)[src], &part[0], &part[1], &part[2]);
            else
                part[0] = ((const tpu_bf16 *)x->mem)[src];
            o[i * c + j] = part[x->op.part];
        }
    return o;
}

/* tpu__gemm_ex on every instruction set, both bf16 kernel choices, 1..3 threads, with and
 * without an arena (the arena `ar` is shared by all calls), against `want`. */
static void check_ex_all_paths(const struct tpu__gemm_operand *a, const struct tpu__gemm_operand *b,
                               const float *y_in, const float *want, size_t m, size_t k, size_t n,
                               uint32_t r, struct tpu__scratch *ar, const char *label)
{
    float *y = alloc_f32(m * n);
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        for (int fma = 0; fma < 2; fma++)
            for (unsigned threads = 1; threads <= 3; threads++)
                for (int use_ar = 0; use_ar < 2; use_ar++) {
                    struct tpu__gemm_opts o = {all_isas[ii],
                                               fma ? TPU__GEMM_FMA_NEVER : TPU__GEMM_FMA_AUTO, 0};
                    char what[224];
                    snprintf(what, sizeof what,
                             "%s m=%zu k=%zu n=%zu R=%u %s %s threads=%u arena=%d", label, m, k,
                             n, r, isa_name(all_isas[ii]), fma ? "mul+add" : "auto-fma",
                             threads, use_ar);
                    if (y_in)
                        memcpy(y, y_in, m * n * sizeof *y);
                    else
                        for (size_t i = 0; i < m * n; i++)
                            y[i] = tpu_f32_from_bits(0x7FA00000u); /* must be overwritten */
                    assert_int_equal(tpu__gemm_ex(a, b, y, m, k, n, r, y_in != NULL, threads,
                                                  use_ar ? ar : NULL, &o, NULL),
                                     0);
                    expect_same_f32(y, want, m, n, what);
                }
    }
    free(y);
}

/* Every transpose combination, f32 and bf16 operands (and mixed), several parts of the split,
 * fresh and accumulating, R = 8 and 128, against the reference on the bf16 matrices. */
static void ex_case(struct rng *rg, size_t m, size_t k, size_t n, bool edge,
                    struct tpu__scratch *ar)
{
    static const unsigned parts[][2] = {{0, 0}, {1, 0}, {0, 2}, {2, 1}};
    for (int tr = 0; tr < 4; tr++)
        for (int dt = 0; dt < 4; dt++) {
            const bool ta = tr & 1, tb = tr & 2, fa = dt & 1, fb = dt & 2;
            struct ex_operand a, b;
            ex_fill(rg, &a, fa, ta, m, k, edge);
            ex_fill(rg, &b, fb, tb, k, n, edge);
            float *want = alloc_f32(m * n), *y_in = alloc_f32(m * n);
            for (size_t pi = 0; pi < sizeof parts / sizeof parts[0]; pi++) {
                a.op.part = parts[pi][0];
                b.op.part = parts[pi][1];
                if (!fa && !fb && pi > 1)
                    continue; /* bf16 parts 1 and 2 are both zero: seen at pi = 1 */
                tpu_bf16 *ab = ex_bf16(&a), *bb = ex_bf16(&b);
                for (uint32_t r = 8; r <= 128; r *= 16)
                    for (int acc = 0; acc < 2; acc++) {
                        char label[96];
                        snprintf(label, sizeof label, "ex %s%s x %s%s parts %u,%u%s%s",
                                 fa ? "f32" : "bf16", ta ? "^T" : "", fb ? "f32" : "bf16",
                                 tb ? "^T" : "", a.op.part, b.op.part, acc ? " acc" : "",
                                 edge ? " edge" : "");
                        if (acc) {
                            for (size_t i = 0; i < m * n; i++) {
                                unsigned c = rnd_below(rg, 16);
                                y_in[i] = c == 0   ? -0.0f
                                          : c == 1 ? INFINITY
                                          : c == 2 ? tpu_f32_from_bits(0xFFC00123u)
                                                   : tpu_bf16_to_f32(rnd_bf16(rg, 6));
                            }
                            memcpy(want, y_in, m * n * sizeof *want);
                        }
                        ref_gemm_bf16(ab, bb, want, m, k, n, r, acc);
                        check_ex_all_paths(&a.op, &b.op, acc ? y_in : NULL, want, m, k, n, r,
                                           ar, label);
                    }
                free(ab);
                free(bb);
            }
            free(a.mem);
            free(b.mem);
            free(want);
            free(y_in);
        }
}

static void test_ex_layouts(void **state)
{
    (void)state;
    struct rng rg = {0xC0FFEE};
    struct tpu__scratch ar = {{NULL}, {0}};
    ex_case(&rg, 37, 150, 45, false, &ar);  /* partial 16 x 16 squares everywhere */
    ex_case(&rg, 1, 7, 1, false, &ar);      /* less than one square, one micro-tile */
    ex_case(&rg, 33, 61, 17, true, &ar);    /* every corner value */
    ex_case(&rg, 16, 32, 64, false, &ar);   /* whole squares and panels only */
    tpu__scratch_free(&ar);
}

/* Past the driver's blocks: several K chunks, A blocks and B blocks, transposed. */
static void test_ex_blocking(void **state)
{
    (void)state;
    struct rng rg = {0xB10C};
    struct tpu__scratch ar = {{NULL}, {0}};
    const size_t shapes[][3] = {{9, 800, 1100}, {700, 40, 50}};
    for (size_t sh = 0; sh < 2; sh++) {
        const size_t m = shapes[sh][0], k = shapes[sh][1], n = shapes[sh][2];
        for (int tr = 0; tr < 4; tr++) {
            struct ex_operand a, b;
            ex_fill(&rg, &a, true, tr & 1, m, k, true);
            ex_fill(&rg, &b, sh == 0, tr & 2, k, n, true);
            tpu_bf16 *ab = ex_bf16(&a), *bb = ex_bf16(&b);
            float *want = alloc_f32(m * n), *y = alloc_f32(m * n);
            ref_gemm_bf16(ab, bb, want, m, k, n, 128, false);
            for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
                if (!tpu__gemm_isa_supported(all_isas[ii]))
                    continue;
                for (unsigned threads = 1; threads <= 3; threads += 2) {
                    struct tpu__gemm_opts o = {all_isas[ii], TPU__GEMM_FMA_AUTO, 0};
                    char what[96];
                    snprintf(what, sizeof what, "ex blocking ta=%d tb=%d %s threads=%u",
                             tr & 1, (tr & 2) != 0, isa_name(all_isas[ii]), threads);
                    assert_int_equal(tpu__gemm_ex(&a.op, &b.op, y, m, k, n, 128, false,
                                                  threads, &ar, &o, NULL),
                                     0);
                    expect_same_f32(y, want, m, n, what);
                }
            }
            free(ab);
            free(bb);
            free(a.mem);
            free(b.mem);
            free(want);
            free(y);
        }
    }
    tpu__scratch_free(&ar);
}

/* The FMA decision sees every element the packers write, in every layout: one element of A
 * or of B (at positions on both sides of the 8 and 16 wide squares, and in the partial ones)
 * is +Inf, or so large, or so small, that the FMA kernel would not be exact with the other
 * values; the one block pair must then run the multiply + add kernel. Without it, the FMA
 * kernel runs. */
static void test_ex_fma_decision(void **state)
{
    (void)state;
    const size_t m = 37, k = 45, n = 33;
    /* (row, column) of the odd element in the operand op(A) [m][k] or op(B) [k][n] */
    const size_t spots[2][10][2] = {
        {{0, 0}, {36, 44}, {7, 8}, {8, 7}, {15, 16}, {16, 15}, {31, 33}, {33, 31}, {36, 0},
         {0, 44}},
        {{0, 0}, {44, 32}, {7, 8}, {8, 7}, {15, 16}, {16, 15}, {31, 32}, {32, 31}, {44, 0},
         {0, 32}},
    };
    /* every other value is `base` in both operands: 1.5 * 2^10 (products 2^20: FMA exact),
     * or 1.5 * 2^-20 for the small kind; the odd one is +Inf, 1.5 * 2^117 (its products
     * reach 2^127) or 1.5 * 2^-119 (products below 2^-135) */
    const uint16_t odd[3] = {0x7F80, 0x7A40, 0x0440};
    const uint16_t base[3] = {0x44C0, 0x44C0, 0x35C0};
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        enum tpu__gemm_isa isa = all_isas[ii];
        if (isa == TPU__GEMM_ISA_SCALAR || !tpu__gemm_isa_supported(isa))
            continue;
        for (int tr = 0; tr < 4; tr++)
            for (int dt = 0; dt < 2; dt++)
                for (int which = 0; which < 2; which++)
                    for (size_t sp = 0; sp <= 10; sp++)
                        for (int kind = 0; kind < 3; kind++) {
                            const bool ta = tr & 1, tb = tr & 2, f32 = dt, odd_one = sp < 10;
                            tpu_bf16 *a16 = alloc_bf16(m * k), *b16 = alloc_bf16(k * n);
                            float *a32 = alloc_f32(m * k), *b32 = alloc_f32(k * n);
                            float *y = alloc_f32(m * n);
                            for (size_t i = 0; i < m * k; i++)
                                a16[i].bits = base[kind];
                            for (size_t i = 0; i < k * n; i++)
                                b16[i].bits = base[kind];
                            if (odd_one) {
                                size_t r = spots[which][sp][0], c = spots[which][sp][1];
                                if (which == 0)
                                    a16[ta ? c * m + r : r * k + c].bits = odd[kind];
                                else
                                    b16[tb ? c * k + r : r * n + c].bits = odd[kind];
                            }
                            for (size_t i = 0; i < m * k; i++)
                                a32[i] = tpu_bf16_to_f32(a16[i]);
                            for (size_t i = 0; i < k * n; i++)
                                b32[i] = tpu_bf16_to_f32(b16[i]);
                            struct tpu__gemm_operand oa = {f32 ? (void *)a32 : (void *)a16, f32,
                                                           ta, 0};
                            struct tpu__gemm_operand ob = {f32 ? (void *)b32 : (void *)b16, f32,
                                                           tb, 0};
                            struct tpu__gemm_opts o = {isa, TPU__GEMM_FMA_AUTO, 0};
                            struct tpu__gemm_report rep;
                            assert_int_equal(tpu__gemm_ex(&oa, &ob, y, m, k, n, 128, false, 1,
                                                          NULL, &o, &rep),
                                             0);
                            if (rep.plain_blocks != (odd_one ? 1u : 0u) ||
                                rep.fma_blocks != (odd_one ? 0u : 1u))
                                fail_msg("%s ta=%d tb=%d f32=%d odd in %c at spot %zu, kind "
                                         "%d: %llu fma, %llu plain blocks",
                                         isa_name(isa), ta, tb, f32, which ? 'B' : 'A', sp,
                                         kind, (unsigned long long)rep.fma_blocks,
                                         (unsigned long long)rep.plain_blocks);
                            free(a16);
                            free(b16);
                            free(a32);
                            free(b32);
                            free(y);
                        }
    }
}

/* The vector conversions against tpu_f32_split_bf16 on many values at once: with K = 1 and
 * the other operand 1, output i is +0 + part(x_i) * 1, the converted element itself (a -0
 * part gives +0, a NaN the canonical NaN). Each part of each value must be the definition's
 * bf16, on every instruction set, through A and through B, stored plainly and transposed. */
static void test_ex_conversions(void **state)
{
    (void)state;
    struct rng rg = {31415};
    const size_t count = 4096;
    float *x = alloc_f32(count), *y = alloc_f32(count);
    for (size_t i = 0; i < count; i++)
        x[i] = rnd_f32_edge(&rg);
    const float one = 1.0f;
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        struct tpu__gemm_opts o = {all_isas[ii], TPU__GEMM_FMA_AUTO, 0};
        for (unsigned part = 0; part < 3; part++)
            for (int ta = 0; ta < 2; ta++) {
                /* y[i][0] = x[i] * 1 with m = count, k = 1, n = 1: A [count][1] (or its
                 * transpose [1][count], the same memory) */
                struct tpu__gemm_operand oa = {x, true, ta, part}, ob = {&one, true, false, 0};
                assert_int_equal(tpu__gemm_ex(&oa, &ob, y, count, 1, 1, 128, false, 2, NULL,
                                              &o, NULL),
                                 0);
                for (size_t i = 0; i < count; i++) {
                    tpu_bf16 p[3];
                    tpu_f32_split_bf16(x[i], &p[0], &p[1], &p[2]);
                    volatile float t = 0.0f + tpu_bf16_to_f32(p[part]);
                    float want = ref_canon(t);
                    if (tpu_f32_bits(y[i]) != tpu_f32_bits(want))
                        fail_msg("%s part %u ta=%d: x = 0x%08X gives 0x%08X, want 0x%08X",
                                 isa_name(all_isas[ii]), part, ta, (unsigned)tpu_f32_bits(x[i]),
                                 (unsigned)tpu_f32_bits(y[i]), (unsigned)tpu_f32_bits(want));
                }
                /* the same through B: y[0][j] = 1 * x[j] */
                struct tpu__gemm_operand ob2 = {x, true, ta, part}, oa2 = {&one, true, false, 0};
                assert_int_equal(tpu__gemm_ex(&oa2, &ob2, y, 1, 1, count, 128, false, 1, NULL,
                                              &o, NULL),
                                 0);
                for (size_t i = 0; i < count; i++) {
                    tpu_bf16 p[3];
                    tpu_f32_split_bf16(x[i], &p[0], &p[1], &p[2]);
                    volatile float t = 0.0f + tpu_bf16_to_f32(p[part]);
                    float want = ref_canon(t);
                    if (tpu_f32_bits(y[i]) != tpu_f32_bits(want))
                        fail_msg("%s part %u tb=%d: x = 0x%08X gives 0x%08X, want 0x%08X",
                                 isa_name(all_isas[ii]), part, ta, (unsigned)tpu_f32_bits(x[i]),
                                 (unsigned)tpu_f32_bits(y[i]), (unsigned)tpu_f32_bits(want));
                }
            }
    }
    free(x);
    free(y);
}

/* The fp32 multi-pass GEMM on every instruction set: the packers split the fp32 values. */
static void test_f32_passes_all_isas(void **state)
{
    (void)state;
    struct rng rg = {909};
    const size_t m = 19, k = 140, n = 37;
    float *a = alloc_f32(m * k), *b = alloc_f32(k * n), *y = alloc_f32(m * n),
          *want = alloc_f32(m * n);
    for (size_t i = 0; i < m * k; i++)
        a[i] = rnd_f32_edge(&rg);
    for (size_t i = 0; i < k * n; i++)
        b[i] = rnd_f32_edge(&rg);
    tpu_bf16 *ap[3], *bp[3];
    for (int p = 0; p < 3; p++) {
        ap[p] = alloc_bf16(m * k);
        bp[p] = alloc_bf16(k * n);
    }
    for (size_t i = 0; i < m * k; i++)
        tpu_f32_split_bf16(a[i], &ap[0][i], &ap[1][i], &ap[2][i]);
    for (size_t i = 0; i < k * n; i++)
        tpu_f32_split_bf16(b[i], &bp[0][i], &bp[1][i], &bp[2][i]);
    static const int o6[][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
    for (unsigned i = 0; i < 6; i++)
        ref_gemm_bf16(ap[o6[i][0]], bp[o6[i][1]], want, m, k, n, 8, i > 0);
    for (size_t ii = 0; ii < sizeof all_isas / sizeof all_isas[0]; ii++) {
        if (!tpu__gemm_isa_supported(all_isas[ii]))
            continue;
        struct tpu__gemm_opts o = {all_isas[ii], TPU__GEMM_FMA_AUTO, 0};
        assert_int_equal(tpu__gemm_f32_impl(a, b, y, m, k, n, 8, 6, 2, &o), 0);
        expect_same_f32(y, want, m, n, isa_name(all_isas[ii]));
    }
    for (int p = 0; p < 3; p++) {
        free(ap[p]);
        free(bp[p]);
    }
    free(a);
    free(b);
    free(y);
    free(want);
}

static void test_ex_arguments(void **state)
{
    (void)state;
    float x[4] = {1, 2, 3, 4}, y[4];
    struct tpu__gemm_operand a = {x, true, false, 0}, b = {x, true, true, 0};
    assert_int_equal(tpu__gemm_ex(NULL, &b, y, 2, 2, 2, 128, false, 1, NULL, NULL, NULL),
                     TPU_EINVAL);
    assert_int_equal(tpu__gemm_ex(&a, NULL, y, 2, 2, 2, 128, false, 1, NULL, NULL, NULL),
                     TPU_EINVAL);
    b.part = 3;
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 1, NULL, NULL, NULL),
                     TPU_EINVAL);
    b.part = 0;
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 0, false, 1, NULL, NULL, NULL),
                     TPU_EINVAL);
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 0, NULL, NULL, NULL),
                     TPU_EINVAL);
    a.data = NULL;
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 1, NULL, NULL, NULL),
                     TPU_EINVAL);
    /* k = 0: nothing is read */
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 0, 2, 128, false, 1, NULL, NULL, NULL), 0);
    assert_int_equal(tpu_f32_bits(y[3]), 0);
    /* y = [[1, 2], [3, 4]] * [[1, 2], [3, 4]]^T = [[5, 11], [11, 25]] */
    a.data = x;
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 1, NULL, NULL, NULL), 0);
    assert_true(y[0] == 5.0f && y[1] == 11.0f && y[2] == 11.0f && y[3] == 25.0f);
    /* an arena's allocation failure is reported like any other */
    struct tpu__scratch ar = {{NULL}, {0}};
    struct tpu__gemm_opts o = {TPU__GEMM_ISA_AUTO, TPU__GEMM_FMA_AUTO, 64};
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 1, &ar, &o, NULL),
                     TPU_ENOMEM);
    assert_null(ar.mem[TPU__SCRATCH_GEMM]);
    assert_int_equal(tpu__gemm_ex(&a, &b, y, 2, 2, 2, 128, false, 1, &ar, NULL, NULL), 0);
    assert_non_null(ar.mem[TPU__SCRATCH_GEMM]);
    tpu__scratch_free(&ar);
}

/* ---- arguments and degenerate shapes ------------------------------------------------------- */

static void test_arguments(void **state)
{
    (void)state;
    tpu_bf16 a[4] = {{0x3F80}, {0x3F80}, {0x3F80}, {0x3F80}};
    int8_t ai[4] = {1, 2, 3, 4};
    float y[4];
    int32_t yi[4];
    float af[4] = {1, 2, 3, 4};
    assert_int_equal(tpu_gemm_bf16(a, a, y, 2, 2, 2, 0, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_bf16(a, a, y, 2, 2, 2, 128, false, 0), TPU_EINVAL);
    assert_int_equal(tpu_gemm_int8(ai, ai, yi, 2, 2, 2, 0, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_int8(ai, ai, yi, 2, 2, 2, 128, false, 0), TPU_EINVAL);
    assert_int_equal(tpu_gemm_f32(af, af, y, 2, 2, 2, 0, 3, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_f32(af, af, y, 2, 2, 2, 128, 3, 0), TPU_EINVAL);
    assert_int_equal(tpu_gemm_f32(af, af, y, 2, 2, 2, 128, 2, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_f32(af, af, y, 2, 2, 2, 128, 0, 1), TPU_EINVAL);
    /* sizes whose products overflow size_t */
    size_t big = SIZE_MAX / 2 + 1;
    assert_int_equal(tpu_gemm_bf16(a, a, y, big, 2, 1, 128, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_bf16(a, a, y, 1, 2, big, 128, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_bf16(a, a, y, big, 0, 2, 128, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_int8(ai, ai, yi, 3, big, 1, 128, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_f32(af, af, y, SIZE_MAX / 4 + 1, 1, 4, 128, 1, 1), TPU_EINVAL);
    /* missing buffers */
    assert_int_equal(tpu_gemm_bf16(NULL, a, y, 2, 2, 2, 128, false, 1), TPU_EINVAL);
    assert_int_equal(tpu_gemm_bf16(a, a, NULL, 2, 2, 2, 128, false, 1), TPU_EINVAL);
}

static void test_degenerate_shapes(void **state)
{
    (void)state;
    tpu_bf16 a[4] = {{0x3F80}, {0x4000}, {0x4040}, {0x4080}};
    float y[6];
    int32_t yi[6] = {7, 7, 7, 7, 7, 7};
    /* m or n zero: nothing is read or written, NULL is fine */
    assert_int_equal(tpu_gemm_bf16(NULL, NULL, NULL, 0, 5, 3, 128, false, 1), 0);
    assert_int_equal(tpu_gemm_bf16(NULL, NULL, NULL, 3, 5, 0, 128, true, 2), 0);
    assert_int_equal(tpu_gemm_int8(NULL, NULL, NULL, 0, 0, 0, 128, false, 1), 0);
    assert_int_equal(tpu_gemm_f32(NULL, NULL, NULL, 0, 4, 4, 128, 6, 1), 0);
    /* k zero: +0 when not accumulating, Y kept (NaN canonical) when accumulating */
    for (int i = 0; i < 6; i++)
        y[i] = -1.0f;
    assert_int_equal(tpu_gemm_bf16(NULL, NULL, y, 2, 0, 3, 128, false, 1), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(tpu_f32_bits(y[i]), 0);
    y[0] = -0.0f;
    y[1] = tpu_f32_from_bits(0xFFA00001u);
    y[2] = 3.5f;
    assert_int_equal(tpu_gemm_bf16(NULL, NULL, y, 1, 0, 3, 128, true, 1), 0);
    assert_int_equal(tpu_f32_bits(y[0]), 0x80000000u);
    assert_int_equal(tpu_f32_bits(y[1]), TPU_F32_CANONICAL_NAN_BITS);
    assert_true(y[2] == 3.5f);
    assert_int_equal(tpu_gemm_int8(NULL, NULL, yi, 2, 0, 3, 128, true, 1), 0);
    assert_int_equal(yi[5], 7);
    assert_int_equal(tpu_gemm_int8(NULL, NULL, yi, 2, 0, 3, 128, false, 1), 0);
    assert_int_equal(yi[5], 0);
    y[0] = 5.0f;
    assert_int_equal(tpu_gemm_f32(NULL, NULL, y, 1, 0, 1, 128, 3, 1), 0);
    assert_int_equal(tpu_f32_bits(y[0]), 0);
    /* a tile longer than K, a huge R: one partial tile */
    assert_int_equal(tpu_gemm_bf16(a, a, y, 2, 2, 2, UINT32_MAX, false, 1), 0);
    assert_true(y[0] == 1.0f * 1.0f + 2.0f * 3.0f);
    assert_true(y[3] == 3.0f * 2.0f + 4.0f * 4.0f);
}

/* Allocation failure, injected through the internal size limit. */
static void test_out_of_memory(void **state)
{
    (void)state;
    struct rng rg = {3};
    tpu_bf16 *a = alloc_bf16(64 * 64);
    float *y = alloc_f32(64 * 64), *af = alloc_f32(64 * 64);
    int8_t ai[64 * 64] = {0};
    int32_t yi[64 * 64];
    fill_bf16(&rg, a, 64 * 64, 4);
    fill_f32(&rg, af, 64 * 64);
    struct tpu__gemm_opts o = {TPU__GEMM_ISA_AUTO, TPU__GEMM_FMA_AUTO, 1024};
    assert_int_equal(tpu__gemm_bf16_impl(a, a, y, 64, 64, 64, 128, false, 2, &o, NULL),
                     TPU_ENOMEM);
    assert_int_equal(tpu__gemm_int8_impl(ai, ai, yi, 64, 64, 64, 128, false, 1, &o, NULL),
                     TPU_ENOMEM);
    assert_int_equal(tpu__gemm_f32_impl(af, af, y, 64, 64, 64, 128, 3, 1, &o), TPU_ENOMEM);
    o.max_alloc_bytes = 0;
    assert_int_equal(tpu__gemm_bf16_impl(a, a, y, 64, 64, 64, 128, false, 2, &o, NULL), 0);
    free(a);
    free(y);
    free(af);
}

static void test_dtype_names(void **state)
{
    (void)state;
    assert_string_equal(tpu_gemm_dtype_name(TPU_BF16), "bf16");
    assert_string_equal(tpu_gemm_dtype_name(TPU_INT8), "int8");
    assert_string_equal(tpu_gemm_dtype_name(TPU_F32), "fp32");
    assert_string_equal(tpu_gemm_dtype_name((enum tpu_dtype)42), "unknown");
}

int main(void)
{
    for (size_t i = 0; i < sizeof all_isas / sizeof all_isas[0]; i++)
        printf("  instruction set %s: %s\n", isa_name(all_isas[i]),
               tpu__gemm_isa_supported(all_isas[i]) ? "tested" : "not supported by this CPU");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_order_by_hand),
        cmocka_unit_test(test_bf16_sizes),
        cmocka_unit_test(test_bf16_small_array),
        cmocka_unit_test(test_bf16_blocking),
        cmocka_unit_test(test_bf16_streamed_results),
        cmocka_unit_test(test_bf16_edge_values),
        cmocka_unit_test(test_bf16_fma_bounds),
        cmocka_unit_test(test_bf16_overflow_by_hand),
        cmocka_unit_test(test_bf16_threads),
        cmocka_unit_test(test_bf16_matches_tile_definition),
        cmocka_unit_test(test_int8_sizes),
        cmocka_unit_test(test_int8_wraps),
        cmocka_unit_test(test_int8_matches_tile_definition),
        cmocka_unit_test(test_f32_split),
        cmocka_unit_test(test_f32_passes_error_bound),
        cmocka_unit_test(test_f32_passes_are_bf16_gemms),
        cmocka_unit_test(test_f32_passes_all_isas),
        cmocka_unit_test(test_ex_layouts),
        cmocka_unit_test(test_ex_blocking),
        cmocka_unit_test(test_ex_fma_decision),
        cmocka_unit_test(test_ex_conversions),
        cmocka_unit_test(test_ex_arguments),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_degenerate_shapes),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_dtype_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
