/* The matrix unit's cycle model (mxu.h) and the GEMM timing built on it (gemm.h).
 *
 * The recurrence is checked against the PE-level rules it was derived from: a separate
 * checker here places every weight load and every input row on an explicit timeline, verifies
 * that each processing element never has its buffer half overwritten while a row still uses
 * it, never uses weights before they arrive, and that no tile could start a cycle earlier.
 * The closed form is checked against the recurrence; the RTL checks both (test_cosim). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/gemm.h"
#include "tpusim/mxu.h"

static void test_tile_cycles_by_hand(void **state)
{
    (void)state;
    /* 2R + M + C - 1: R load, M rows, R + C - 1 fill and drain */
    assert_int_equal(tpu_mxu_tile_cycles(8, 8, 1), 8 + 1 + 8 + 8 - 1);
    assert_int_equal(tpu_mxu_tile_cycles(128, 128, 1024), 128 + 1024 + 128 + 128 - 1);
    assert_int_equal(tpu_mxu_tile_cycles(4, 8, 3), 4 + 3 + 4 + 8 - 1);
    assert_int_equal(tpu_mxu_seq_cycles(8, 8, 0, 5), 0);
}

static void test_sequence_by_hand(void **state)
{
    (void)state;
    /* R = C = 4, three tiles of 2 rows: the load port paces them every R = 4 cycles.
     * L = 0, 4, 8; s = 4, 8, 12; total = 12 + 2 + 4 + 4 - 1 = 21 */
    uint64_t m[3] = {2, 2, 2}, l[3], s[3];
    assert_int_equal(tpu_mxu_schedule(4, 4, m, 3, l, s), 21);
    assert_int_equal(l[0], 0);
    assert_int_equal(l[1], 4);
    assert_int_equal(l[2], 8);
    assert_int_equal(s[0], 4);
    assert_int_equal(s[1], 8);
    assert_int_equal(s[2], 12);
    assert_int_equal(tpu_mxu_seq_cycles(4, 4, 3, 2), 21);
    /* three tiles of 10 rows: streaming paces them, loads hide behind the stream.
     * s = 4, 14, 24; L2 = max(L1 + 4, s0 + 10 = 14) = 14; total = 24 + 10 + 7 = 41 */
    uint64_t m2[3] = {10, 10, 10};
    assert_int_equal(tpu_mxu_schedule(4, 4, m2, 3, l, s), 41);
    assert_int_equal(l[2], 14);
    assert_int_equal(s[1], 14);
    assert_int_equal(tpu_mxu_seq_cycles(4, 4, 3, 10), 41);
}

/* ---- independent check of the schedule against the PE-level rules ------------------- */

/* True if tile t of the schedule obeys every rule of mxu.h's cycle model against the tiles
 * before it, checked PE by PE. */
static int schedule_legal(uint32_t R, uint32_t C, const uint64_t *m, const int64_t *L,
                          const int64_t *s, size_t t)
{
    if (L[t] < 0 || s[t] < 0)
        return 0;
    if (t >= 1 && L[t] < L[t - 1] + (int64_t)R) /* one weight-load port */
        return 0;
    if (t >= 1 && s[t] < s[t - 1] + (int64_t)m[t - 1]) /* one input port */
        return 0;
    for (uint32_t i = 0; i < R; i++)
        for (uint32_t j = 0; j < C; j++) {
            /* the load writes PE(i,j)'s shadow half from L+i+j (first row passing) to
             * L+R-1+j (final value); tile t's rows use it from s+i+j */
            int64_t write_first = L[t] + i + j, write_last = L[t] + (int64_t)R - 1 + j;
            if (s[t] + i + j <= write_last)
                return 0; /* used before its weights arrived */
            if (t >= 2) {
                int64_t prev_last_use = s[t - 2] + (int64_t)m[t - 2] - 1 + i + j;
                if (write_first <= prev_last_use)
                    return 0; /* overwrote weights tile t-2 still uses */
            }
        }
    return 1;
}

static void check_schedule(uint32_t R, uint32_t C, const uint64_t *m, size_t n)
{
    uint64_t *l = calloc(n, sizeof *l), *s = calloc(n, sizeof *s);
    int64_t *L = calloc(n, sizeof *L), *S = calloc(n, sizeof *S);
    assert_non_null(l);
    assert_non_null(s);
    assert_non_null(L);
    assert_non_null(S);
    uint64_t total = tpu_mxu_schedule(R, C, m, n, l, s);
    for (size_t t = 0; t < n; t++) {
        L[t] = (int64_t)l[t];
        S[t] = (int64_t)s[t];
    }
    for (size_t t = 0; t < n; t++) {
        assert_true(schedule_legal(R, C, m, L, S, t));
        /* as early as possible: one cycle earlier breaks a rule (the load first, since the
         * stream cannot move before it) */
        L[t]--;
        S[t]--;
        assert_false(schedule_legal(R, C, m, L, S, t));
        L[t]++; /* now the stream alone one cycle earlier */
        int legal_stream_earlier = schedule_legal(R, C, m, L, S, t);
        S[t]++;
        assert_false(legal_stream_earlier);
        if (t > 0 && l[t] > 0) {
            L[t]--;
            int ok_load_earlier = schedule_legal(R, C, m, L, S, t);
            L[t]++;
            /* an earlier load is either illegal or would not let the stream start earlier */
            if (ok_load_earlier) {
                S[t]--;
                L[t]--;
                assert_false(schedule_legal(R, C, m, L, S, t));
                S[t]++;
                L[t]++;
            }
        }
    }
    /* the last row of the last tile leaves after the fill and drain latency */
    assert_int_equal(total, s[n - 1] + m[n - 1] + R + C - 1);
    free(l);
    free(s);
    free(L);
    free(S);
}

static void test_schedule_obeys_pe_rules(void **state)
{
    (void)state;
    static const uint32_t dims[][2] = {{1, 1}, {2, 3}, {4, 4}, {8, 8}, {8, 3}, {3, 8}};
    uint64_t m[7];
    unsigned seed = 7;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        uint32_t R = dims[d][0], C = dims[d][1];
        for (int trial = 0; trial < 40; trial++) {
            size_t n = 1 + (size_t)(trial % 7);
            for (size_t t = 0; t < n; t++) {
                seed = seed * 1103515245u + 12345u;
                m[t] = 1 + (seed >> 16) % (3 * R + 2);
            }
            check_schedule(R, C, m, n);
        }
    }
}

static void test_closed_form_equals_recurrence(void **state)
{
    (void)state;
    static const uint32_t dims[] = {1, 2, 3, 7, 8, 16, 128, 256};
    uint64_t m[9];
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++)
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++) {
            uint32_t R = dims[a], C = dims[b];
            for (uint64_t rows = 1; rows <= 3u * R + 3; rows += (R > 16 ? 13 : 1))
                for (size_t n = 1; n <= 9; n++) {
                    for (size_t t = 0; t < n; t++)
                        m[t] = rows;
                    uint64_t rec = tpu_mxu_schedule(R, C, m, n, NULL, NULL);
                    uint64_t closed = tpu_mxu_seq_cycles(R, C, n, rows);
                    if (rec != closed)
                        fail_msg("R=%u C=%u M=%llu T=%zu: recurrence %llu, closed form %llu",
                                 R, C, (unsigned long long)rows, n, (unsigned long long)rec,
                                 (unsigned long long)closed);
                }
        }
}

static void test_incremental_equals_batch(void **state)
{
    (void)state;
    uint64_t m[] = {5, 1, 9, 9, 2, 30, 8, 8};
    struct tpu_mxu_sched s;
    tpu_mxu_sched_init(&s, 8, 4);
    assert_int_equal(tpu_mxu_sched_total(&s), 0);
    uint64_t l, st, L[8], S[8];
    uint64_t total = tpu_mxu_schedule(8, 4, m, 8, L, S);
    for (size_t t = 0; t < 8; t++) {
        tpu_mxu_sched_push(&s, m[t], &l, &st);
        assert_int_equal(l, L[t]);
        assert_int_equal(st, S[t]);
    }
    assert_int_equal(tpu_mxu_sched_total(&s), total);
}

/* ---- whole GEMMs on a chip ------------------------------------------------------------- */

static struct tpu_chip_config chip(uint32_t cores, uint32_t mxus, uint32_t r, uint32_t c,
                                   uint32_t acc_rows)
{
    struct tpu_chip_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.name, "test-chip");
    cfg.cores_per_chip = cores;
    cfg.mxu_per_core = mxus;
    cfg.mxu_rows = r;
    cfg.mxu_cols = c;
    cfg.accumulator_rows = acc_rows;
    cfg.mxu_dtypes = TPU_DTYPE_BIT(TPU_BF16);
    cfg.clock_mhz = 1000;
    cfg.hbm_gbytes_per_s = 1000;
    return cfg;
}

static void test_gemm_one_tile(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = chip(1, 1, 128, 128, 4096);
    struct tpu_gemm_params p = {.m = 128, .k = 128, .n = 128, .dtype = TPU_BF16};
    struct tpu_gemm_timing t;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, NULL), 0);
    assert_int_equal(t.weight_tiles, 1);
    assert_int_equal(t.cycles, 2 * 128 + 128 + 128 - 1);
    assert_true(fabs(t.utilization - 128.0 / 511.0) < 1e-12);
    assert_true(fabs(t.mapping_efficiency - 1.0) < 1e-12);
    assert_true(fabs(t.seconds - 511e-9) < 1e-15);
    assert_int_equal(t.min_hbm_bytes, 128 * 128 * 2 * 2 + 128 * 128 * 4);
}

static void test_gemm_spread_over_mxus(void **state)
{
    (void)state;
    /* 4096^3 on 2 cores x 4 MXUs of 128x128: 32 N tiles dealt to 8 MXUs, 4 each, with 32 K
     * tiles apiece: 128 tiles of 4096 rows per MXU */
    struct tpu_chip_config cfg = chip(2, 4, 128, 128, 4096);
    struct tpu_gemm_params p = {.m = 4096, .k = 4096, .n = 4096, .dtype = TPU_BF16};
    struct tpu_gemm_timing t;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, NULL), 0);
    assert_int_equal(t.weight_tiles, 1024);
    assert_int_equal(t.busiest_mxu_tiles, 128);
    assert_int_equal(t.cycles, tpu_mxu_seq_cycles(128, 128, 128, 4096));
    assert_int_equal(t.cycles, 128 + 127 * 4096 + 4096 + 255);
    assert_int_equal(t.n_mxu_busy, 8);
    /* fp32 in 3 passes triples the tiles on each MXU */
    p.dtype = TPU_F32;
    p.passes = 3;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, NULL), 0);
    assert_int_equal(t.weight_tiles, 3072);
    assert_int_equal(t.cycles, tpu_mxu_seq_cycles(128, 128, 384, 4096));
}

static void test_gemm_ragged_chunks(void **state)
{
    (void)state;
    /* M = 5000 with 4096 accumulator rows: chunks of 4096 and 904; 1 MXU runs the full
     * chunk's 2x3 tiles, then the short chunk's */
    struct tpu_chip_config cfg = chip(1, 1, 128, 128, 4096);
    struct tpu_gemm_params p = {.m = 5000, .k = 256, .n = 300, .dtype = TPU_BF16};
    struct tpu_gemm_timing t;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, NULL), 0);
    assert_int_equal(t.k_tiles, 2);
    assert_int_equal(t.n_tiles, 3);
    assert_int_equal(t.m_chunks, 2);
    uint64_t m[12];
    for (int i = 0; i < 12; i++)
        m[i] = i < 6 ? 4096 : 904;
    assert_int_equal(t.cycles, tpu_mxu_schedule(128, 128, m, 12, NULL, NULL));
    /* mapping: 256 x 300 of 2 x 3 tiles of 128 x 128 */
    assert_true(fabs(t.mapping_efficiency - (256.0 * 300) / (256.0 * 384)) < 1e-12);
    /* two MXUs: units (chunk, ntile) 0..5 dealt round-robin; MXU 0 gets units 0,2,4 (full
     * chunk: 0, 2; short chunk: 4) */
    cfg.mxu_per_core = 2;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, NULL), 0);
    uint64_t m0[6] = {4096, 4096, 4096, 4096, 904, 904};
    uint64_t m1[6] = {4096, 4096, 904, 904, 904, 904};
    uint64_t c0 = tpu_mxu_schedule(128, 128, m0, 6, NULL, NULL);
    uint64_t c1 = tpu_mxu_schedule(128, 128, m1, 6, NULL, NULL);
    assert_int_equal(t.cycles, c0 > c1 ? c0 : c1);
}

static void test_gemm_errors(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = chip(1, 1, 8, 8, 64);
    struct tpu_gemm_params p = {.m = 8, .k = 0, .n = 8, .dtype = TPU_BF16};
    struct tpu_gemm_timing t;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "K=0"));
    p.k = 8;
    p.dtype = TPU_INT8;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "no int8 matrix unit"));
    p.dtype = TPU_F32;
    p.passes = 2;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "passes 2"));
    cfg.mxu_dtypes = TPU_DTYPE_BIT(TPU_INT8);
    p.passes = 3;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "no bf16 matrix unit"));
    cfg.mxu_dtypes = TPU_DTYPE_BIT(TPU_BF16);
    p.dtype = TPU_BF16;
    p.m = p.k = p.n = UINT64_C(1) << 40;
    assert_int_equal(tpu_gemm_time(&cfg, &p, &t, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "too large"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_cycles_by_hand),
        cmocka_unit_test(test_sequence_by_hand),
        cmocka_unit_test(test_schedule_obeys_pe_rules),
        cmocka_unit_test(test_closed_form_equals_recurrence),
        cmocka_unit_test(test_incremental_equals_batch),
        cmocka_unit_test(test_gemm_one_tile),
        cmocka_unit_test(test_gemm_spread_over_mxus),
        cmocka_unit_test(test_gemm_ragged_chunks),
        cmocka_unit_test(test_gemm_errors),
    };
    return cmocka_run_group_tests_name("mxu", tests, NULL, NULL);
}
