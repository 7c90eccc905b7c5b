/* Cosimulation: the Verilog matrix unit (rtl/, Verilated) against the C model (sim/).
 *
 * Every run hands the RTL array a sequence of weight tiles and input streams through the
 * harness (rtl/mxu_rtl.h), which presents them as early as mxu.h's port rules allow and
 * collects the output rows from the array's own de-skewed output. Then, for every run:
 *   - every output equals tpu_mxu_tile_bf16 / tpu_mxu_tile_int8 (sim/mxu/mxu_tile.c) bit for bit;
 *   - the RTL's cycle count equals tpu_mxu_schedule() exactly, tile by tile the load and
 *     stream starts equal the recurrence's L_t and s_t, each tile's first output row is valid
 *     in cycle s_t + R + C - 1, and for tiles of equal row counts tpu_mxu_seq_cycles() agrees;
 *   - the RTL's hazard check (a row using a weight half while a load writes it) stays off.
 * The work: every tile shape 1x1 .. RxC (the used block of the weights, the rest zero),
 * streams of 1 .. 3R rows, sequences of 1 .. 6 tiles with row counts below, at and above R
 * (the load port or the input port the bottleneck) and mixed, random values of several kinds
 * and the edge cases of both number formats, on the 8x8 array and on 4x4, 4x8 and 8x4;
 * two arrays interleaved in one thread and two on parallel threads.
 * Forced schedules one cycle earlier than the recurrence allows make the hazard check fire,
 * which shows the recurrence's rules are tight in the RTL. On a mismatch the test prints the
 * tile, row, column and both bit patterns. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxu_rtl.h"
#include "tpusim/mxu.h"
#include "xorshift.h"

/* ---- random data ----------------------------------------------------------------------- */

/* bf16 values every format corner is made of. */
static const uint16_t bf16_edges[] = {
    0x0000, 0x8000,                 /* +0, -0 */
    0x3F80, 0xBF80, 0x4000, 0x3F00, /* 1, -1, 2, 0.5 */
    0x7F7F, 0xFF7F,                 /* largest finite */
    0x0080, 0x8080,                 /* smallest normal */
    0x0001, 0x8001, 0x007F, 0x0040, /* subnormals: smallest, largest, middle */
    0x7F80, 0xFF80,                 /* +Inf, -Inf */
    0x7FC0, 0xFFC1, 0x7F81,         /* NaNs: quiet, negative with payload, signalling */
    0x7F00, 0x5F80,                 /* 2^127, 2^64: products overflow */
    0x1F80, 0x2000, 0x0100,         /* 2^-64, 2^-63, 2^-125: products underflow */
    0x3F81, 0x3FFF, 0xBF81,         /* one ulp above 1, just under 2: rounding of sums */
};

/* Kinds of value a tile is filled with; each stresses a different part of the arithmetic. */
enum fill {
    FILL_MODERATE, /* normal values of moderate range: rounding of sums */
    FILL_BITS,     /* any bit pattern: NaN, Inf, subnormals, everything */
    FILL_EDGES,    /* half edge cases, half moderate */
    FILL_TINY,     /* products around the subnormal range: gradual underflow */
    FILL_HUGE,     /* products and sums around overflow: Inf, Inf - Inf = NaN */
    FILL_COUNT
};

static tpu_bf16 rnd_bf16(struct rng *r, enum fill f)
{
    tpu_bf16 v;
    unsigned sign = rnd_below(r, 2) << 15, frac = rnd_below(r, 128);
    switch (f) {
    case FILL_BITS:
        v.bits = (uint16_t)rnd(r);
        break;
    case FILL_EDGES:
        if (rnd_below(r, 2)) {
            v.bits = bf16_edges[rnd_below(r, sizeof bf16_edges / sizeof bf16_edges[0])];
            break;
        }
        /* fall through */
    case FILL_MODERATE:
    default:
        v.bits = (uint16_t)(sign | ((127u - 6u + rnd_below(r, 13)) << 7) | frac);
        break;
    case FILL_TINY: /* 2^-78 .. 2^-62: products 2^-156 .. 2^-124 */
        v.bits = (uint16_t)(sign | ((127u - 78u + rnd_below(r, 17)) << 7) | frac);
        break;
    case FILL_HUGE: /* 2^56 .. 2^72: products 2^112 .. 2^144 */
        v.bits = (uint16_t)(sign | ((127u + 56u + rnd_below(r, 17)) << 7) | frac);
        break;
    }
    return v;
}

static int8_t rnd_int8(struct rng *r, enum fill f)
{
    static const int8_t edges[] = {-128, 127, -127, 0, 1, -1, 126, -2};
    if (f == FILL_EDGES || f == FILL_HUGE)
        return edges[rnd_below(r, sizeof edges)];
    if (f == FILL_TINY)
        return (int8_t)((int)rnd_below(r, 7) - 3);
    return (int8_t)rnd(r);
}

/* ---- one run: tiles, both sides, comparison --------------------------------------------- */

#define MAX_TILES 8

struct work {
    uint32_t R, C;
    enum tpu_dtype dtype;
    size_t n_tiles;
    uint64_t m_rows[MAX_TILES];
    /* bf16 */
    tpu_bf16 *w_bf16[MAX_TILES];  /* [R][C] */
    tpu_bf16 *in_bf16[MAX_TILES]; /* [m_rows][R] */
    float *out_f32[MAX_TILES];    /* [m_rows][C], from the RTL */
    float *ref_f32[MAX_TILES];    /* [m_rows][C], from the C model */
    /* int8 */
    int8_t *w_int8[MAX_TILES];
    int8_t *in_int8[MAX_TILES];
    int32_t *out_i32[MAX_TILES];
    int32_t *ref_i32[MAX_TILES];
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

/* Allocates tile t with m rows; the used block is k_used x n_used (rows x columns of the
 * weights), the rest of the weights and the inputs to unused array rows are zero, as in a
 * padded GEMM tile. */
static void work_tile(struct work *wk, struct rng *r, size_t t, uint64_t m, uint32_t k_used,
                      uint32_t n_used, enum fill fw, enum fill fa)
{
    const uint32_t R = wk->R, C = wk->C;
    wk->m_rows[t] = m;
    if (wk->dtype == TPU_BF16) {
        wk->w_bf16[t] = xcalloc((size_t)R * C, sizeof(tpu_bf16));
        wk->in_bf16[t] = xcalloc((size_t)m * R, sizeof(tpu_bf16));
        wk->out_f32[t] = xcalloc((size_t)m * C, sizeof(float));
        wk->ref_f32[t] = xcalloc((size_t)m * C, sizeof(float));
        for (uint32_t i = 0; i < k_used; i++)
            for (uint32_t j = 0; j < n_used; j++)
                wk->w_bf16[t][(size_t)i * C + j] = rnd_bf16(r, fw);
        for (uint64_t row = 0; row < m; row++)
            for (uint32_t i = 0; i < k_used; i++)
                wk->in_bf16[t][row * R + i] = rnd_bf16(r, fa);
    } else {
        wk->w_int8[t] = xcalloc((size_t)R * C, 1);
        wk->in_int8[t] = xcalloc((size_t)m * R, 1);
        wk->out_i32[t] = xcalloc((size_t)m * C, sizeof(int32_t));
        wk->ref_i32[t] = xcalloc((size_t)m * C, sizeof(int32_t));
        for (uint32_t i = 0; i < k_used; i++)
            for (uint32_t j = 0; j < n_used; j++)
                wk->w_int8[t][(size_t)i * C + j] = rnd_int8(r, fw);
        for (uint64_t row = 0; row < m; row++)
            for (uint32_t i = 0; i < k_used; i++)
                wk->in_int8[t][row * R + i] = rnd_int8(r, fa);
    }
}

static void work_free(struct work *wk)
{
    for (size_t t = 0; t < MAX_TILES; t++) {
        free(wk->w_bf16[t]);
        free(wk->in_bf16[t]);
        free(wk->out_f32[t]);
        free(wk->ref_f32[t]);
        free(wk->w_int8[t]);
        free(wk->in_int8[t]);
        free(wk->out_i32[t]);
        free(wk->ref_i32[t]);
    }
    memset(wk, 0, sizeof *wk);
}

/* Runs the work on the RTL and the C model and checks every output bit, the cycle count and
 * every tile's timing; fails the test on any difference. `what` names the case in messages. */
static void cosim(struct tpu_mxu_rtl *rtl, struct work *wk, const char *what)
{
    const uint32_t R = wk->R, C = wk->C;
    const size_t T = wk->n_tiles;
    assert_int_equal(tpu_mxu_rtl_rows(rtl), R);
    assert_int_equal(tpu_mxu_rtl_cols(rtl), C);

    uint64_t load[MAX_TILES], stream[MAX_TILES], first[MAX_TILES];
    struct tpu_mxu_rtl_job job = {
        .dtype = wk->dtype,
        .n_tiles = T,
        .m_rows = wk->m_rows,
        .w_bf16 = (const tpu_bf16 *const *)wk->w_bf16,
        .in_bf16 = (const tpu_bf16 *const *)wk->in_bf16,
        .out_f32 = wk->out_f32,
        .w_int8 = (const int8_t *const *)wk->w_int8,
        .in_int8 = (const int8_t *const *)wk->in_int8,
        .out_i32 = wk->out_i32,
        .load_start = load,
        .stream_start = stream,
        .first_out_cycle = first,
    };
    struct tpu_diag d = {0};
    int rc = tpu_mxu_rtl_run(rtl, &job, &d);
    if (rc != 0)
        print_error("%s: tpu_mxu_rtl_run: %s\n", what, d.msg);
    assert_int_equal(rc, 0);
    assert_false(job.hazard);

    /* values */
    size_t bad = 0;
    for (size_t t = 0; t < T; t++) {
        const uint64_t m = wk->m_rows[t];
        if (wk->dtype == TPU_BF16)
            tpu_mxu_tile_bf16(R, C, wk->w_bf16[t], wk->in_bf16[t], m, wk->ref_f32[t]);
        else
            tpu_mxu_tile_int8(R, C, wk->w_int8[t], wk->in_int8[t], m, wk->ref_i32[t]);
        for (uint64_t row = 0; row < m; row++)
            for (uint32_t j = 0; j < C; j++) {
                uint32_t got, want;
                if (wk->dtype == TPU_BF16) {
                    got = tpu_f32_bits(wk->out_f32[t][row * C + j]);
                    want = tpu_f32_bits(wk->ref_f32[t][row * C + j]);
                } else {
                    got = (uint32_t)wk->out_i32[t][row * C + j];
                    want = (uint32_t)wk->ref_i32[t][row * C + j];
                }
                if (got != want && bad++ < 8)
                    print_error("%s (%ux%u, %s): tile %zu row %" PRIu64
                                " column %u: RTL 0x%08x, C model 0x%08x\n",
                                what, R, C, tpu_gemm_dtype_name(wk->dtype), t, row, j, got, want);
            }
    }
    if (bad)
        print_error("%s: %zu outputs differ\n", what, bad);
    assert_int_equal(bad, 0);

    /* cycles: the recurrence, tile by tile, and the total */
    uint64_t L[MAX_TILES], S[MAX_TILES];
    uint64_t total = tpu_mxu_schedule(R, C, wk->m_rows, T, L, S);
    if (job.cycles != total)
        print_error("%s (%ux%u): RTL took %" PRIu64 " cycles, tpu_mxu_schedule says %" PRIu64
                    "\n",
                    what, R, C, job.cycles, total);
    assert_int_equal(job.cycles, total);
    bool uniform = true;
    for (size_t t = 0; t < T; t++) {
        if (load[t] != L[t] || stream[t] != S[t] || first[t] != S[t] + R + C - 1)
            print_error("%s: tile %zu: RTL load %" PRIu64 " stream %" PRIu64
                        " first output %" PRIu64 "; model load %" PRIu64 " stream %" PRIu64
                        " first output %" PRIu64 "\n",
                        what, t, load[t], stream[t], first[t], L[t], S[t], S[t] + R + C - 1);
        assert_int_equal(load[t], L[t]);
        assert_int_equal(stream[t], S[t]);
        assert_int_equal(first[t], S[t] + R + C - 1);
        uniform = uniform && wk->m_rows[t] == wk->m_rows[0];
    }
    if (uniform)
        assert_int_equal(job.cycles, tpu_mxu_seq_cycles(R, C, T, wk->m_rows[0]));
    if (T == 1)
        assert_int_equal(job.cycles, tpu_mxu_tile_cycles(R, C, wk->m_rows[0]));
}

/* ---- fixtures: one array per test, made and destroyed around it ------------------------- */

static int setup_8x8(void **state)
{
    struct tpu_mxu_rtl *rtl = NULL;
    struct tpu_diag d = {0};
    if (tpu_mxu_rtl_create(8, 8, &rtl, &d) != 0) {
        print_error("tpu_mxu_rtl_create: %s\n", d.msg);
        return -1;
    }
    *state = rtl;
    return 0;
}

static int teardown_rtl(void **state)
{
    tpu_mxu_rtl_destroy(*state);
    *state = NULL;
    return 0;
}

/* ---- the cases -------------------------------------------------------------------------- */

/* Every used block k x n from 1x1 to 8x8, in both formats, as 1..3 tiles of one shape. */
static void test_every_tile_shape(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0001};
    for (int dt = 0; dt < 2; dt++)
        for (uint32_t k = 1; k <= 8; k++)
            for (uint32_t n = 1; n <= 8; n++) {
                struct work wk = {.R = 8, .C = 8,
                                  .dtype = dt ? TPU_INT8 : TPU_BF16};
                wk.n_tiles = 1 + (k + n) % 3;
                for (size_t t = 0; t < wk.n_tiles; t++)
                    work_tile(&wk, &r, t, 1 + rnd_below(&r, 24), k, n,
                              (enum fill)rnd_below(&r, FILL_COUNT),
                              (enum fill)rnd_below(&r, FILL_COUNT));
                char what[64];
                snprintf(what, sizeof what, "shape %ux%u", k, n);
                cosim(rtl, &wk, what);
                work_free(&wk);
            }
}

/* One tile streaming 1 .. 3R rows, and 1 .. 6 tiles of equal rows around R: the closed
 * form of tpu_mxu_seq_cycles must hold, whichever port is the bottleneck. */
static void test_stream_lengths(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0002};
    for (uint64_t m = 1; m <= 24; m++) {
        struct work wk = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 1};
        work_tile(&wk, &r, 0, m, 8, 8, FILL_MODERATE, FILL_MODERATE);
        cosim(rtl, &wk, "one tile");
        work_free(&wk);
    }
    static const uint64_t ms[] = {1, 2, 7, 8, 9, 16, 24};
    for (size_t T = 1; T <= 6; T++)
        for (size_t q = 0; q < sizeof ms / sizeof ms[0]; q++) {
            struct work wk = {.R = 8, .C = 8, .n_tiles = T,
                              .dtype = (T + q) % 2 ? TPU_INT8 : TPU_BF16};
            for (size_t t = 0; t < T; t++)
                work_tile(&wk, &r, t, ms[q], 8, 8, FILL_MODERATE, FILL_MODERATE);
            cosim(rtl, &wk, "uniform sequence");
            work_free(&wk);
        }
}

/* Tiles of fewer rows than R: the load port paces them, L_t = t * R exactly. */
static void test_load_port_bound(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0003};
    for (int rep = 0; rep < 20; rep++) {
        struct work wk = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 6};
        for (size_t t = 0; t < 6; t++)
            work_tile(&wk, &r, t, 1 + rnd_below(&r, 7), 8, 8, FILL_MODERATE, FILL_EDGES);
        uint64_t L[6];
        tpu_mxu_schedule(8, 8, wk.m_rows, 6, L, NULL);
        for (size_t t = 0; t < 6; t++)
            assert_int_equal(L[t], 8 * t);
        cosim(rtl, &wk, "load-port bound");
        work_free(&wk);
    }
}

/* Random sequences of 1..6 tiles with row counts below, at and above R, random used blocks
 * and every kind of value, in both formats. */
static void test_random_sequences(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0004};
    for (int rep = 0; rep < 1000; rep++) {
        struct work wk = {.R = 8, .C = 8, .n_tiles = 1 + rnd_below(&r, 6),
                          .dtype = rnd_below(&r, 3) ? TPU_BF16 : TPU_INT8};
        for (size_t t = 0; t < wk.n_tiles; t++) {
            uint64_t m;
            switch (rnd_below(&r, 3)) {
            case 0: m = 1 + rnd_below(&r, 7); break;  /* below R */
            case 1: m = 8 + rnd_below(&r, 2); break;  /* at R */
            default: m = 1 + rnd_below(&r, 24); break; /* anything up to 3R */
            }
            work_tile(&wk, &r, t, m, 1 + rnd_below(&r, 8), 1 + rnd_below(&r, 8),
                      (enum fill)rnd_below(&r, FILL_COUNT), (enum fill)rnd_below(&r, FILL_COUNT));
        }
        char what[64];
        snprintf(what, sizeof what, "random sequence %d", rep);
        cosim(rtl, &wk, what);
        work_free(&wk);
    }
}

/* Hand-made corner cases whose answers are known, checked against the C model and, where
 * the value is obvious, against that value too. */
static void test_edge_values(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0005};
    struct work wk = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 1};
    work_tile(&wk, &r, 0, 6, 0, 0, FILL_MODERATE, FILL_MODERATE); /* all zero */
    tpu_bf16 *w = wk.w_bf16[0], *a = wk.in_bf16[0];
    const tpu_bf16 one = {0x3F80}, neg_zero = {0x8000}, max = {0x7F7F}, two = {0x4000};
    const tpu_bf16 inf = {0x7F80}, ninf = {0xFF80}, nan_payload = {0xFFC1}, sub = {0x0001};
    for (uint32_t i = 0; i < 8; i++)
        for (uint32_t j = 0; j < 8; j++)
            w[i * 8 + j] = one;
    /* row 0: every product -0 (a = -0, w = 1): the column starts at +0 and stays +0 */
    for (uint32_t i = 0; i < 8; i++)
        a[0 * 8 + i] = neg_zero;
    /* row 1: max * 1 + max * 1 overflows to +Inf */
    a[1 * 8 + 0] = max;
    a[1 * 8 + 1] = max;
    /* row 2: Inf then -Inf in the same column: NaN, canonical at the output */
    a[2 * 8 + 0] = inf;
    a[2 * 8 + 5] = ninf;
    /* row 3: a NaN with a payload and the sign set comes out as 0x7FC00000 */
    a[3 * 8 + 3] = nan_payload;
    /* row 4: the smallest bf16 subnormal (2^-133), eight times: 2^-130, still subnormal in
     * fp32 and exact (gradual underflow) */
    for (uint32_t i = 0; i < 8; i++)
        a[4 * 8 + i] = sub;
    /* row 5: max * 2 overflows in the product already */
    a[5 * 8 + 7] = max;
    w[7 * 8 + 2] = two;
    cosim(rtl, &wk, "edge values");
    const float *y = wk.out_f32[0];
    assert_int_equal(tpu_f32_bits(y[0 * 8 + 4]), 0x00000000u);
    assert_int_equal(tpu_f32_bits(y[1 * 8 + 0]), 0x7F800000u);
    assert_int_equal(tpu_f32_bits(y[2 * 8 + 6]), 0x7FC00000u);
    assert_int_equal(tpu_f32_bits(y[3 * 8 + 1]), 0x7FC00000u);
    assert_int_equal(tpu_f32_bits(y[4 * 8 + 3]), 0x00080000u);
    assert_int_equal(tpu_f32_bits(y[5 * 8 + 2]), 0x7F800000u);
    assert_int_equal(tpu_f32_bits(y[5 * 8 + 3]), 0x7F7F0000u); /* w = 1 elsewhere in row 7 */
    work_free(&wk);

    /* int8: the extremes, -128 * -128 in every PE of a column: 8 * 16384 */
    wk = (struct work){.R = 8, .C = 8, .dtype = TPU_INT8, .n_tiles = 2};
    work_tile(&wk, &r, 0, 3, 8, 8, FILL_EDGES, FILL_EDGES);
    work_tile(&wk, &r, 1, 2, 8, 8, FILL_EDGES, FILL_EDGES);
    memset(wk.w_int8[0], -128, 64);
    memset(wk.in_int8[0], -128, 8);      /* row 0 */
    memset(wk.in_int8[0] + 8, 127, 8);   /* row 1: 127 * -128 * 8 */
    cosim(rtl, &wk, "int8 extremes");
    assert_int_equal(wk.out_i32[0][0], 8 * 16384);
    assert_int_equal(wk.out_i32[0][8 + 5], 8 * 127 * -128);
    work_free(&wk);

    /* many runs of edge values only */
    for (int rep = 0; rep < 60; rep++) {
        wk = (struct work){.R = 8, .C = 8, .n_tiles = 1 + rnd_below(&r, 3),
                           .dtype = rep % 4 == 3 ? TPU_INT8 : TPU_BF16};
        for (size_t t = 0; t < wk.n_tiles; t++)
            work_tile(&wk, &r, t, 1 + rnd_below(&r, 16), 8, 8, FILL_EDGES, FILL_EDGES);
        cosim(rtl, &wk, "edge mix");
        work_free(&wk);
    }
}

/* The other built shapes, square and not: 4x4, 4x8 (wider than tall), 8x4. */
static void test_other_shapes(void **state)
{
    (void)state;
    static const uint32_t shapes[][2] = {{4, 4}, {4, 8}, {8, 4}};
    struct rng r = {0x5EED0006};
    for (size_t s = 0; s < 3; s++) {
        const uint32_t R = shapes[s][0], C = shapes[s][1];
        struct tpu_mxu_rtl *rtl = NULL;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_mxu_rtl_create(R, C, &rtl, &d), 0);
        for (int rep = 0; rep < 100; rep++) {
            struct work wk = {.R = R, .C = C, .n_tiles = 1 + rnd_below(&r, 6),
                              .dtype = rep % 3 ? TPU_BF16 : TPU_INT8};
            for (size_t t = 0; t < wk.n_tiles; t++)
                work_tile(&wk, &r, t, 1 + rnd_below(&r, 3 * R), 1 + rnd_below(&r, R),
                          1 + rnd_below(&r, C), (enum fill)rnd_below(&r, FILL_COUNT),
                          (enum fill)rnd_below(&r, FILL_COUNT));
            char what[64];
            snprintf(what, sizeof what, "%ux%u sequence %d", R, C, rep);
            cosim(rtl, &wk, what);
            work_free(&wk);
        }
        tpu_mxu_rtl_destroy(rtl);
    }
}

/* Two arrays in one process, runs interleaved: each keeps its own state. */
static void test_two_instances(void **state)
{
    struct tpu_mxu_rtl *a = *state, *b = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mxu_rtl_create(8, 8, &b, &d), 0);
    struct rng r = {0x5EED0007};
    for (int rep = 0; rep < 10; rep++) {
        struct work wa = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 3};
        struct work wb = {.R = 8, .C = 8, .dtype = TPU_INT8, .n_tiles = 2};
        for (size_t t = 0; t < 3; t++)
            work_tile(&wa, &r, t, 5 + t, 8, 8, FILL_MODERATE, FILL_BITS);
        for (size_t t = 0; t < 2; t++)
            work_tile(&wb, &r, t, 11, 8, 8, FILL_BITS, FILL_BITS);
        cosim(rep % 2 ? a : b, &wa, "instance a");
        cosim(rep % 2 ? b : a, &wb, "instance b");
        work_free(&wa);
        work_free(&wb);
    }
    tpu_mxu_rtl_destroy(b);
}

/* Arrays on parallel threads, one each: every run's values and cycles still match. The work
 * is made on the main thread (the CMocka assertions are not thread-safe); each thread only
 * runs and counts differences, which the main thread asserts. */
#define THREAD_RUNS 12

struct thread_job {
    struct work wk[THREAD_RUNS];
    int rc;            /* first failing return code, or 0 */
    size_t bad_values; /* outputs that differ from the C model */
    size_t bad_cycles; /* runs whose count differs from tpu_mxu_schedule */
};

static void *thread_main(void *arg)
{
    struct thread_job *tj = arg;
    struct tpu_mxu_rtl *rtl = NULL;
    tj->rc = tpu_mxu_rtl_create(8, 8, &rtl, NULL);
    for (int k = 0; k < THREAD_RUNS && tj->rc == 0; k++) {
        struct work *wk = &tj->wk[k];
        uint64_t cycles = 0;
        tj->rc = tpu_mxu_rtl_run_bf16(rtl, wk->n_tiles, (const tpu_bf16 *const *)wk->w_bf16,
                                      (const tpu_bf16 *const *)wk->in_bf16, wk->m_rows,
                                      wk->out_f32, &cycles, NULL);
        tj->bad_cycles += cycles != tpu_mxu_schedule(8, 8, wk->m_rows, wk->n_tiles, NULL, NULL);
        for (size_t t = 0; t < wk->n_tiles; t++) {
            tpu_mxu_tile_bf16(8, 8, wk->w_bf16[t], wk->in_bf16[t], wk->m_rows[t],
                              wk->ref_f32[t]);
            for (uint64_t i = 0; i < wk->m_rows[t] * 8; i++)
                tj->bad_values +=
                    tpu_f32_bits(wk->out_f32[t][i]) != tpu_f32_bits(wk->ref_f32[t][i]);
        }
    }
    tpu_mxu_rtl_destroy(rtl);
    return NULL;
}

static void test_parallel_threads(void **state)
{
    (void)state;
    struct rng r = {0x5EED000B};
    static struct thread_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int th = 0; th < 2; th++)
        for (int k = 0; k < THREAD_RUNS; k++) {
            struct work *wk = &jobs[th].wk[k];
            *wk = (struct work){.R = 8, .C = 8, .dtype = TPU_BF16,
                                .n_tiles = 1 + rnd_below(&r, 6)};
            for (size_t t = 0; t < wk->n_tiles; t++)
                work_tile(wk, &r, t, 1 + rnd_below(&r, 24), 8, 8,
                          (enum fill)rnd_below(&r, FILL_COUNT),
                          (enum fill)rnd_below(&r, FILL_COUNT));
        }
    pthread_t tid[2];
    for (int th = 0; th < 2; th++)
        assert_int_equal(pthread_create(&tid[th], NULL, thread_main, &jobs[th]), 0);
    for (int th = 0; th < 2; th++)
        assert_int_equal(pthread_join(tid[th], NULL), 0);
    for (int th = 0; th < 2; th++) {
        assert_int_equal(jobs[th].rc, 0);
        assert_int_equal(jobs[th].bad_values, 0);
        assert_int_equal(jobs[th].bad_cycles, 0);
        for (int k = 0; k < THREAD_RUNS; k++)
            work_free(&jobs[th].wk[k]);
    }
}

/* Runs `wk` with a forced schedule; returns the hazard flag, and in *bad the number of
 * outputs that differ from the C model. */
static bool forced_run(struct tpu_mxu_rtl *rtl, struct work *wk, const uint64_t *L,
                       const uint64_t *S, size_t *bad)
{
    struct tpu_mxu_rtl_job job = {
        .dtype = TPU_BF16,
        .n_tiles = wk->n_tiles,
        .m_rows = wk->m_rows,
        .w_bf16 = (const tpu_bf16 *const *)wk->w_bf16,
        .in_bf16 = (const tpu_bf16 *const *)wk->in_bf16,
        .out_f32 = wk->out_f32,
        .force_load_start = L,
        .force_stream_start = S,
    };
    struct tpu_diag d = {0};
    int rc = tpu_mxu_rtl_run(rtl, &job, &d);
    if (rc != 0)
        print_error("forced run: %s\n", d.msg);
    assert_int_equal(rc, 0);
    *bad = 0;
    for (size_t t = 0; t < wk->n_tiles; t++) {
        tpu_mxu_tile_bf16(wk->R, wk->C, wk->w_bf16[t], wk->in_bf16[t], wk->m_rows[t],
                          wk->ref_f32[t]);
        for (uint64_t k = 0; k < wk->m_rows[t] * wk->C; k++)
            *bad += tpu_f32_bits(wk->out_f32[t][k]) != tpu_f32_bits(wk->ref_f32[t][k]);
    }
    return job.hazard;
}

/* The recurrence's rules are tight in the RTL: the schedule it gives runs clean; a load of
 * tile t one cycle before tile t-2's last row is presented, or a stream one cycle before its
 * load is complete, makes the RTL's hazard check fire; two cycles early corrupts values. */
static void test_schedule_is_tight(void **state)
{
    struct tpu_mxu_rtl *rtl = *state;
    struct rng r = {0x5EED0008};
    struct work wk = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 3};
    for (size_t t = 0; t < 3; t++)
        work_tile(&wk, &r, t, 12, 8, 8, FILL_MODERATE, FILL_MODERATE);
    uint64_t L[3], S[3];
    tpu_mxu_schedule(8, 8, wk.m_rows, 3, L, S);
    /* M = 12 >= R: L2 = s0 + M0 (the buffer-free rule binds), s_t = L_t + R for t = 0 */
    assert_int_equal(L[2], S[0] + 12);
    size_t bad;
    assert_false(forced_run(rtl, &wk, L, S, &bad));
    assert_int_equal(bad, 0);

    uint64_t L1[3] = {L[0], L[1], L[2] - 1}, S1[3] = {S[0], S[1], S[2]};
    assert_true(forced_run(rtl, &wk, L1, S1, &bad)); /* load one cycle early */
    assert_int_equal(bad, 0); /* the write lands after the last read: values still right */

    uint64_t L2[3] = {L[0], L[1], L[2] - 2};
    assert_true(forced_run(rtl, &wk, L2, S1, &bad)); /* two cycles early */
    assert_true(bad > 0); /* tile 0's last row used tile 2's weights in some PE */

    uint64_t S3[3] = {S[0] - 1, S[1] - 1, S[2] - 1}; /* stream before its weights are in */
    assert_int_equal(S3[0], L[0] + 8 - 1);
    assert_true(forced_run(rtl, &wk, L, S3, &bad));
    assert_true(bad > 0);
    work_free(&wk);
}

/* A waveform can be written; its header names the array's ports. */
static void test_trace(void **state)
{
    (void)state;
    struct tpu_mxu_rtl *rtl = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mxu_rtl_create(4, 4, &rtl, &d), 0);
    char path[] = "/tmp/tpusim_cosim_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tpu_mxu_rtl_trace_open(rtl, path, &d), 0);
    assert_int_equal(tpu_mxu_rtl_trace_open(rtl, path, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "already open"));
    struct rng r = {0x5EED0009};
    struct work wk = {.R = 4, .C = 4, .dtype = TPU_BF16, .n_tiles = 2};
    for (size_t t = 0; t < 2; t++)
        work_tile(&wk, &r, t, 3, 4, 4, FILL_MODERATE, FILL_MODERATE);
    cosim(rtl, &wk, "traced");
    work_free(&wk);
    tpu_mxu_rtl_destroy(rtl); /* closes the file */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    remove(path);
    assert_non_null(strstr(buf, "$enddefinitions"));
    assert_non_null(strstr(buf, " out_valid "));
    assert_non_null(strstr(buf, " hazard "));
}

/* Every error a caller can hit, with its message. */
static void test_errors(void **state)
{
    struct tpu_mxu_rtl *rtl = *state, *x = NULL;
    struct tpu_diag d = {0};

    assert_int_equal(tpu_mxu_rtl_create(16, 16, &x, &d), TPU_EUNSUPPORTED);
    assert_null(x);
    assert_non_null(strstr(d.msg, "16 rows x 16 columns"));
    assert_non_null(strstr(d.msg, "8x8"));
    assert_non_null(strstr(d.msg, "4x8"));
    assert_int_equal(tpu_mxu_rtl_create(8, 8, NULL, &d), TPU_EINVAL);
    assert_true(tpu_mxu_rtl_shape_count() >= 4);
    uint32_t r0, c0;
    tpu_mxu_rtl_shape(0, &r0, &c0);
    assert_true(r0 > 0 && c0 > 0);
    tpu_mxu_rtl_destroy(NULL);

    assert_int_equal(tpu_mxu_rtl_trace_open(rtl, "/nonexistent-dir/x.vcd", &d), TPU_EIO);
    assert_non_null(strstr(d.msg, "cannot create the waveform file '/nonexistent-dir/x.vcd'"));

    struct rng r = {0x5EED000A};
    struct work wk = {.R = 8, .C = 8, .dtype = TPU_BF16, .n_tiles = 2};
    work_tile(&wk, &r, 0, 4, 8, 8, FILL_MODERATE, FILL_MODERATE);
    work_tile(&wk, &r, 1, 4, 8, 8, FILL_MODERATE, FILL_MODERATE);
    struct tpu_mxu_rtl_job job = {
        .dtype = TPU_F32,
        .n_tiles = 2,
        .m_rows = wk.m_rows,
        .w_bf16 = (const tpu_bf16 *const *)wk.w_bf16,
        .in_bf16 = (const tpu_bf16 *const *)wk.in_bf16,
        .out_f32 = wk.out_f32,
    };
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "given dtype fp32; it takes bf16 or int8 only"));

    job.dtype = TPU_INT8; /* int8 arrays missing */
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "w_int8, in_int8, out_i32 must all be set"));

    job.dtype = TPU_BF16;
    wk.m_rows[1] = 0;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tile 1 streams 0 input rows"));
    wk.m_rows[1] = 4;

    uint64_t L[2] = {0, 7}, S[2] = {8, 16};
    job.force_load_start = L;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "needs both force_load_start and force_stream_start"));
    job.force_stream_start = S;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "forced load of tile 1 begins in cycle 7"));
    assert_non_null(strstr(d.msg, "may begin at 8 at the earliest"));
    L[1] = 8;
    S[1] = 11;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "forced stream of tile 1 begins in cycle 11"));
    S[1] = 7;
    S[0] = 3;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "before its own load"));

    /* a run after errors still works, and an empty run takes no cycles */
    job.force_load_start = job.force_stream_start = NULL;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), 0);
    job.n_tiles = 0;
    assert_int_equal(tpu_mxu_rtl_run(rtl, &job, &d), 0);
    assert_int_equal(job.cycles, 0);
    work_free(&wk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_tile_shape, setup_8x8, teardown_rtl),
        cmocka_unit_test_setup_teardown(test_stream_lengths, setup_8x8, teardown_rtl),
        cmocka_unit_test_setup_teardown(test_load_port_bound, setup_8x8, teardown_rtl),
        cmocka_unit_test_setup_teardown(test_random_sequences, setup_8x8, teardown_rtl),
        cmocka_unit_test_setup_teardown(test_edge_values, setup_8x8, teardown_rtl),
        cmocka_unit_test(test_other_shapes),
        cmocka_unit_test_setup_teardown(test_two_instances, setup_8x8, teardown_rtl),
        cmocka_unit_test(test_parallel_threads),
        cmocka_unit_test_setup_teardown(test_schedule_is_tight, setup_8x8, teardown_rtl),
        cmocka_unit_test(test_trace),
        cmocka_unit_test_setup_teardown(test_errors, setup_8x8, teardown_rtl),
    };
    return cmocka_run_group_tests_name("cosim", tests, NULL, NULL);
}
