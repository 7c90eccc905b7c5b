/* Tests of the serial-fold schedule (SCALE-Sim v2's compute model, sim/mxu/scalesim.c).
 *
 * Three kinds of evidence: values worked out by hand from SCALE-Sim's demand-matrix
 * construction for small arrays; SCALE-Sim's own reference outputs (the COMPUTE_REPORT.csv
 * files its repository checks itself against); and a naive reference below that walks the
 * folds one by one exactly as scalesim/compute/systolic_compute_{ws,os,is}.py build them,
 * compared with the closed forms over a sweep of small shapes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim/mxu.h"
#include "tpusim/scalesim.h"

/* |got - want| <= tol, printing both on failure (cmocka's float assert works in float). */
#define assert_close(got, want, tol) check_close((got), (want), (tol), #got, __FILE__, __LINE__)

static void check_close(double got, double want, double tol, const char *what, const char *file,
                        int line)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("%s:%d: %s = %.17g, expected %.17g (difference %.3g, tolerance %.3g)\n", file,
                    line, what, got, want, got - want, tol);
        fail();
    }
}

static struct tpu_serial_result run_ok(uint32_t r, uint32_t c, enum tpu_dataflow df, uint64_t m,
                                       uint64_t n, uint64_t k)
{
    struct tpu_serial_result res;
    struct tpu_diag d;
    tpu_diag_clear(&d);
    memset(&res, 0, sizeof res);
    int rc = tpu_serial_gemm(r, c, df, m, n, k, &res, &d);
    if (rc != 0)
        print_error("tpu_serial_gemm failed: %s\n", d.msg);
    assert_int_equal(rc, 0);
    return res;
}

/* ---- names --------------------------------------------------------------------------- */

static void test_dataflow_names(void **state)
{
    (void)state;
    assert_string_equal(tpu_dataflow_name(TPU_DATAFLOW_WS), "ws");
    assert_string_equal(tpu_dataflow_name(TPU_DATAFLOW_OS), "os");
    assert_string_equal(tpu_dataflow_name(TPU_DATAFLOW_IS), "is");
    assert_string_equal(tpu_dataflow_name((enum tpu_dataflow)3), "?");

    enum tpu_dataflow df = TPU_DATAFLOW_WS;
    assert_int_equal(tpu_dataflow_parse("os", &df), 0);
    assert_int_equal(df, TPU_DATAFLOW_OS);
    assert_int_equal(tpu_dataflow_parse("IS", &df), 0);
    assert_int_equal(df, TPU_DATAFLOW_IS);
    assert_int_equal(tpu_dataflow_parse("Ws", &df), 0);
    assert_int_equal(df, TPU_DATAFLOW_WS);

    df = TPU_DATAFLOW_OS;
    assert_int_equal(tpu_dataflow_parse("rs", &df), TPU_EINVAL);
    assert_int_equal(tpu_dataflow_parse("", &df), TPU_EINVAL);
    assert_int_equal(tpu_dataflow_parse("ws ", &df), TPU_EINVAL);
    assert_int_equal(tpu_dataflow_parse("wss", &df), TPU_EINVAL);
    assert_int_equal(tpu_dataflow_parse(NULL, &df), TPU_EINVAL);
    assert_int_equal(tpu_dataflow_parse("ws", NULL), TPU_EINVAL);
    assert_int_equal(df, TPU_DATAFLOW_OS); /* untouched by the failures */
}

/* ---- hand-worked cases ------------------------------------------------------------------
 * 4 x 4 array, M = N = K = 4: one fold in every dataflow.
 *   ws: Sr=K=4 Sc=N=4 T=M=4. Fold: ifmap demand = 4 load rows + 4 + 3 drain rows = 11,
 *       skewed over 4 columns -> 14 rows. total = 14 - 1 = 13. Compute util divides by
 *       2R + 2C + T - 3 = 17: 100 * 16 * 4 / (16 * 17) = 400/17. Overall = 100 * 64 / (13 *
 *       16) = 400/13.
 *   os: Sr=M=4 Sc=N=4 T=K=4. ofmap demand = 3 + 4 = 7 rows, skewed -> 10. total 9. Compute
 *       util 100 * 4 / 10 = 40. Overall 100 * 64 / (9 * 16) = 400/9.
 *   is: Sr=K=4 Sc=M=4 T=N=4: the same counts as ws. */
static void test_4x4_one_fold(void **state)
{
    (void)state;
    const enum tpu_dataflow dfs[3] = {TPU_DATAFLOW_WS, TPU_DATAFLOW_OS, TPU_DATAFLOW_IS};
    const uint64_t fold[3] = {14, 10, 14}, util_fold[3] = {17, 10, 17};
    const double cu[3] = {400.0 / 17.0, 40.0, 400.0 / 17.0};
    const double ou[3] = {400.0 / 13.0, 400.0 / 9.0, 400.0 / 13.0};
    for (int i = 0; i < 3; i++) {
        struct tpu_serial_result r = run_ok(4, 4, dfs[i], 4, 4, 4);
        assert_int_equal(r.dataflow, dfs[i]);
        assert_int_equal(r.rows, 4);
        assert_int_equal(r.cols, 4);
        assert_int_equal(r.row_folds, 1);
        assert_int_equal(r.col_folds, 1);
        assert_int_equal(r.folds, 1);
        assert_int_equal(r.fold_cycles, fold[i]);
        assert_int_equal(r.util_fold_cycles, util_fold[i]);
        assert_int_equal(r.busy_cycles, fold[i]);
        assert_int_equal(r.total_cycles, fold[i] - 1);
        assert_int_equal(r.stall_cycles, 0);
        assert_int_equal(r.macs, 64);
        assert_close(r.mapping_efficiency_pct, 100.0, 0.0);
        assert_close(r.compute_util_pct, cu[i], 1e-12);
        assert_close(r.overall_util_pct, ou[i], 1e-12);
    }
}

/* 8 x 8 array, M = 10, N = 12, K = 20: partial folds on both sides.
 *   ws: Sr=K=20 -> folds of 8, 8, 4 rows; Sc=N=12 -> 8, 4 columns; T=M=10.
 *       6 folds of 2*8 + 8 + 10 - 2 = 32 cycles: 192, total 191.
 *       mapping = (8+8+4)(8+4) / (64 * 6) = 240/384 = 62.5 %.
 *       compute = 62.5 * 10 / (16 + 16 + 10 - 3 = 39) = 625/39 %.
 *       overall = 100 * 2400 / (191 * 64).
 *   os: Sr=M=10 -> 8, 2; Sc=N=12 -> 8, 4; T=K=20. 4 folds of 8 + 8 + 20 - 2 = 34: 136,
 *       total 135. mapping = 10*12 / (64*4) = 46.875 %. compute = 46.875 * 20 / 34.
 *       overall = 100 * 2400 / (135 * 64) = 250/9.
 *   is: Sr=K=20 -> 8, 8, 4; Sc=M=10 -> 8, 2; T=N=12. 6 folds of 16 + 8 + 12 - 2 = 34: 204,
 *       total 203. mapping = 20*10 / (64*6) = 625/12 %. compute = 625/12 * 12 / 41.
 *       overall = 100 * 2400 / (203 * 64). */
static void test_8x8_partial_folds(void **state)
{
    (void)state;
    struct tpu_serial_result r = run_ok(8, 8, TPU_DATAFLOW_WS, 10, 12, 20);
    assert_int_equal(r.sr, 20);
    assert_int_equal(r.sc, 12);
    assert_int_equal(r.t, 10);
    assert_int_equal(r.row_folds, 3);
    assert_int_equal(r.col_folds, 2);
    assert_int_equal(r.folds, 6);
    assert_int_equal(r.fold_cycles, 32);
    assert_int_equal(r.util_fold_cycles, 39);
    assert_int_equal(r.busy_cycles, 192);
    assert_int_equal(r.total_cycles, 191);
    assert_int_equal(r.macs, 2400);
    assert_close(r.mapping_efficiency_pct, 62.5, 0.0);
    assert_close(r.compute_util_pct, 625.0 / 39.0, 1e-12);
    assert_close(r.overall_util_pct, 240000.0 / (191.0 * 64.0), 1e-12);

    r = run_ok(8, 8, TPU_DATAFLOW_OS, 10, 12, 20);
    assert_int_equal(r.sr, 10);
    assert_int_equal(r.sc, 12);
    assert_int_equal(r.t, 20);
    assert_int_equal(r.row_folds, 2);
    assert_int_equal(r.col_folds, 2);
    assert_int_equal(r.fold_cycles, 34);
    assert_int_equal(r.util_fold_cycles, 34);
    assert_int_equal(r.busy_cycles, 136);
    assert_int_equal(r.total_cycles, 135);
    assert_close(r.mapping_efficiency_pct, 46.875, 0.0);
    assert_close(r.compute_util_pct, 46.875 * 20.0 / 34.0, 1e-12);
    assert_close(r.overall_util_pct, 250.0 / 9.0, 1e-12);

    r = run_ok(8, 8, TPU_DATAFLOW_IS, 10, 12, 20);
    assert_int_equal(r.sr, 20);
    assert_int_equal(r.sc, 10);
    assert_int_equal(r.t, 12);
    assert_int_equal(r.row_folds, 3);
    assert_int_equal(r.col_folds, 2);
    assert_int_equal(r.fold_cycles, 34);
    assert_int_equal(r.util_fold_cycles, 41);
    assert_int_equal(r.busy_cycles, 204);
    assert_int_equal(r.total_cycles, 203);
    assert_close(r.mapping_efficiency_pct, 625.0 / 12.0, 1e-12);
    assert_close(r.compute_util_pct, 625.0 / 41.0, 1e-12);
    assert_close(r.overall_util_pct, 240000.0 / (203.0 * 64.0), 1e-12);
}

/* ---- SCALE-Sim's own reference outputs ------------------------------------------------ */

/* scalesim-project/scale-sim-v2, test/golden_trace/COMPUTE_REPORT.csv, checked by
 * test/scripts/function_test.sh: topologies/conv_nets/alexnet_part.csv
 * ("Conv1, 224, 224, 11, 11, 3, 96, 4,") on configs/scale.cfg's 32 x 32 array, ws:
 *     LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, Compute Util %,
 *     0, 112283, 0, 91.68309650614964, 94.53125, 90.78000992063485,
 * The layer's GEMM: ofmap 55 x 55 = 3025 pixels (M), window 11 * 11 * 3 = 363 (K), 96
 * filters (N). */
static void test_golden_alexnet_conv1_ws(void **state)
{
    (void)state;
    struct tpu_serial_result r = run_ok(32, 32, TPU_DATAFLOW_WS, 3025, 96, 363);
    assert_int_equal(r.row_folds, 12);
    assert_int_equal(r.col_folds, 3);
    assert_int_equal(r.total_cycles, 112283);
    assert_int_equal(r.stall_cycles, 0);
    /* both operands of the division are exact, as in Python: the same bits */
    assert_close(r.overall_util_pct, 91.68309650614964, 0.0);
    assert_close(r.mapping_efficiency_pct, 94.53125, 0.0);
    assert_close(r.compute_util_pct, 90.78000992063485, 1e-12);
}

/* scalesim-project/scale-sim-v2, test/general/golden_trace_user_{ws,os,is}/COMPUTE_REPORT.csv,
 * checked by test/general/scripts/diff_user_{ws,os,is}.sh: the GEMM topology
 * topologies/GEMM_mnk/test_mnk_input.csv ("Test 1, 256, 128, 256,") on 32 x 32 with the
 * USER interface bandwidth, so SCALE-Sim's memory adds stalls:
 *     ws: 52447, 41248, 15.619577859553454, 100.0, 67.19160104986877
 *     os: 52447, 42272, 15.619577859553454, 100.0, 80.50314465408806
 *     is: 19984,  5777, 40.99279423538831,  100.0, 50.59288537549407
 * Total minus stalls is the compute-only count this model gives; the overall util there is
 * M*N*K over SCALE-Sim's stall-inclusive total, which checks that macs is its num_compute. */
static void test_golden_gemm_256x128x256(void **state)
{
    (void)state;
    const enum tpu_dataflow dfs[3] = {TPU_DATAFLOW_WS, TPU_DATAFLOW_OS, TPU_DATAFLOW_IS};
    const uint64_t golden_total[3] = {52447, 52447, 19984};
    const uint64_t golden_stall[3] = {41248, 42272, 5777};
    const double golden_overall[3] = {15.619577859553454, 15.619577859553454, 40.99279423538831};
    const double golden_compute[3] = {67.19160104986877, 80.50314465408806, 50.59288537549407};
    for (int i = 0; i < 3; i++) {
        struct tpu_serial_result r = run_ok(32, 32, dfs[i], 256, 128, 256);
        assert_int_equal(r.total_cycles, golden_total[i] - golden_stall[i]);
        assert_close(r.mapping_efficiency_pct, 100.0, 0.0);
        assert_close(r.compute_util_pct, golden_compute[i], 1e-12);
        double with_stalls = (double)(r.macs * 100) / (double)(golden_total[i] * 32 * 32);
        assert_close(with_stalls, golden_overall[i], 1e-12);
    }
    /* and the ideal-memory overall util: 100 * 256*128*256 / (11199 * 1024) for ws */
    struct tpu_serial_result r = run_ok(32, 32, TPU_DATAFLOW_WS, 256, 128, 256);
    assert_close(r.overall_util_pct, 838860800.0 / (11199.0 * 1024.0), 0.0);
}

/* ---- a naive reference: SCALE-Sim's fold loop, one fold at a time --------------------------
 * For every fold (fc outer, fr inner, as SCALE-Sim loops) it counts the rows of the three
 * demand matrices from the pieces SCALE-Sim concatenates (prefix, body, suffix, skew), checks
 * that they agree as create_demand_matrices() asserts, and adds up the per-fold ratios in
 * order in double precision as Python's sum() does. */
struct naive_result {
    uint64_t total_cycles;
    double mapping_pct, compute_pct, overall_pct;
};

/* rows after skew_matrix(): an r x w matrix becomes (r + w - 1) x w */
static uint64_t skewed_rows(uint64_t r, uint64_t w)
{
    return r + w - 1;
}

static struct naive_result naive(uint64_t R, uint64_t C, enum tpu_dataflow df, uint64_t m,
                                 uint64_t n, uint64_t k)
{
    /* operand matrices: ifmap [m][k], filter [k][n], ofmap [m][n] */
    uint64_t ifmap_rows = m, ifmap_cols = k, filter_cols = n;
    uint64_t sr, sc, t;
    if (df == TPU_DATAFLOW_WS)
        sr = ifmap_cols, sc = filter_cols, t = ifmap_rows;
    else if (df == TPU_DATAFLOW_OS)
        sr = ifmap_rows, sc = filter_cols, t = ifmap_cols;
    else
        sr = ifmap_cols, sc = ifmap_rows, t = filter_cols;

    uint64_t rows = 0, n_folds = 0;
    double map_sum = 0.0, cu_sum = 0.0;
    for (uint64_t col0 = 0; col0 < sc; col0 += C) {
        for (uint64_t row0 = 0; row0 < sr; row0 += R) {
            uint64_t row_used = sr - row0 < R ? sr - row0 : R;
            uint64_t col_used = sc - col0 < C ? sc - col0 : C;
            uint64_t a = 0, b = 0, o = 0, util_cycles = 0;
            switch (df) {
            case TPU_DATAFLOW_WS:
                a = skewed_rows(R + t + (C - 1), R); /* load prefix, stream, drain */
                b = R + (R + C + t - 2);             /* flipped weights + suffix, unskewed */
                o = skewed_rows((2 * R - 1) + t, C);
                util_cycles = b + C - 1; /* shape[0] + shape[1] - 1 of the filter demand */
                break;
            case TPU_DATAFLOW_OS:
                a = skewed_rows(t + (C - 1), R);
                b = skewed_rows(t + (R - 1), C);
                o = skewed_rows((t - 1) + R, C);
                util_cycles = (t - 1) + R + C - 1; /* measured before the skew */
                break;
            case TPU_DATAFLOW_IS:
                a = R + (R + C + t - 2); /* flipped inputs + suffix, unskewed */
                util_cycles = a + C - 1;
                b = skewed_rows(R + t + (C - 1), R);
                o = skewed_rows((2 * R - 1) + t, C);
                break;
            }
            assert_int_equal(a, b);
            assert_int_equal(a, o);
            rows += o;
            n_folds++;
            uint64_t mac_used = row_used * col_used;
            map_sum += (double)mac_used / (double)(R * C);
            cu_sum += (double)(mac_used * t) / (double)(R * C * util_cycles);
        }
    }
    struct naive_result res;
    res.total_cycles = rows - 1;
    res.mapping_pct = map_sum / (double)n_folds * 100.0;
    res.compute_pct = cu_sum / (double)n_folds * 100.0;
    res.overall_pct = res.total_cycles
                          ? (double)(m * n * k * 100) / (double)(res.total_cycles * R * C)
                          : 0.0;
    return res;
}

static void test_closed_form_matches_fold_walk(void **state)
{
    (void)state;
    const enum tpu_dataflow dfs[3] = {TPU_DATAFLOW_WS, TPU_DATAFLOW_OS, TPU_DATAFLOW_IS};
    const uint64_t sizes[] = {1, 2, 3, 5, 7, 8, 9, 16, 17, 31};
    const size_t n_sizes = sizeof sizes / sizeof sizes[0];
    const uint32_t arrays[][2] = {{1, 1}, {1, 4}, {4, 1}, {2, 3}, {4, 4}, {5, 3}, {8, 8}};
    unsigned checked = 0;
    for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
        for (int d = 0; d < 3; d++) {
            for (size_t i = 0; i < n_sizes; i++) {
                for (size_t j = 0; j < n_sizes; j++) {
                    for (size_t l = 0; l < n_sizes; l++) {
                        uint32_t R = arrays[a][0], C = arrays[a][1];
                        uint64_t m = sizes[i], n = sizes[j], k = sizes[l];
                        struct tpu_serial_result r = run_ok(R, C, dfs[d], m, n, k);
                        struct naive_result w = naive(R, C, dfs[d], m, n, k);
                        if (r.total_cycles != w.total_cycles)
                            print_error("%ux%u %s M=%lu N=%lu K=%lu\n", R, C,
                                        tpu_dataflow_name(dfs[d]), (unsigned long)m,
                                        (unsigned long)n, (unsigned long)k);
                        assert_int_equal(r.total_cycles, w.total_cycles);
                        assert_close(r.mapping_efficiency_pct, w.mapping_pct,
                                     1e-12 * w.mapping_pct);
                        assert_close(r.compute_util_pct, w.compute_pct, 1e-12 * w.compute_pct);
                        assert_close(r.overall_util_pct, w.overall_pct, 0.0);
                        checked++;
                    }
                }
            }
        }
    }
    assert_int_equal(checked, 7 * 3 * 1000);
}

/* The naive walk reproduces SCALE-Sim's reference numbers too, so the sweep above ties the
 * closed form to them through an independent route. */
static void test_fold_walk_matches_golden(void **state)
{
    (void)state;
    struct naive_result w = naive(32, 32, TPU_DATAFLOW_WS, 3025, 96, 363);
    assert_int_equal(w.total_cycles, 112283);
    assert_close(w.overall_pct, 91.68309650614964, 0.0);
    assert_close(w.mapping_pct, 94.53125, 0.0);
    assert_close(w.compute_pct, 90.78000992063485, 1e-12);
}

/* ---- edges ----------------------------------------------------------------------------- */

/* A 1 x 1 array doing one os MAC: one fold of R + C + T - 2 = 1 cycle; SCALE-Sim reports
 * total 0 and would divide by zero for the overall util; reported as 0 here. */
static void test_one_by_one_os(void **state)
{
    (void)state;
    struct tpu_serial_result r = run_ok(1, 1, TPU_DATAFLOW_OS, 1, 1, 1);
    assert_int_equal(r.busy_cycles, 1);
    assert_int_equal(r.total_cycles, 0);
    assert_close(r.overall_util_pct, 0.0, 0.0);
    assert_close(r.mapping_efficiency_pct, 100.0, 0.0);
    assert_close(r.compute_util_pct, 100.0, 0.0);
}

/* A TPU-sized case in O(1): 128 x 128, M = N = K = 2^20 under ws: 2^13 x 2^13 folds of
 * 256 + 128 + 2^20 - 2 cycles. */
static void test_large_gemm_closed_form(void **state)
{
    (void)state;
    const uint64_t s = (uint64_t)1 << 20;
    struct tpu_serial_result r = run_ok(128, 128, TPU_DATAFLOW_WS, s, s, s);
    assert_int_equal(r.folds, (uint64_t)1 << 26);
    assert_int_equal(r.fold_cycles, 256 + 128 + s - 2);
    assert_int_equal(r.total_cycles, ((uint64_t)1 << 26) * (256 + 128 + s - 2) - 1);
    assert_int_equal(r.macs, (uint64_t)1 << 60);
    assert_close(r.mapping_efficiency_pct, 100.0, 0.0);
    assert_close(r.compute_util_pct, 100.0 * (double)s / (double)(256 + 256 + s - 3), 1e-12);
}

/* How the serial folds line up with tpusim's double-buffered schedule (tpusim/mxu.h), as the
 * header documents: one tile differs by the output-register cycle; more tiles pay
 * 2R + C + M - 2 each instead of max(M, R). */
static void test_against_double_buffered(void **state)
{
    (void)state;
    for (uint32_t R = 1; R <= 9; R += 4) {
        for (uint32_t C = 1; C <= 9; C += 4) {
            for (uint64_t m = 1; m <= 20; m += 3) {
                struct tpu_serial_result r = run_ok(R, C, TPU_DATAFLOW_WS, m, C, R);
                assert_int_equal(r.folds, 1);
                assert_int_equal(tpu_mxu_seq_cycles(R, C, 1, m), r.busy_cycles + 1);
            }
        }
    }
    /* 8 x 8, M = 10, N = 12, K = 20: 6 tiles. Serial: 6 * 32 = 192 busy cycles. Double
     * buffered: 8 + 5 * max(10, 8) + 10 + 8 + 8 - 1 = 83. */
    struct tpu_serial_result r = run_ok(8, 8, TPU_DATAFLOW_WS, 10, 12, 20);
    assert_int_equal(r.busy_cycles, 192);
    assert_int_equal(tpu_mxu_seq_cycles(8, 8, r.folds, 10), 83);
}

/* ---- errors ---------------------------------------------------------------------------- */

static void expect_fail(uint32_t R, uint32_t C, enum tpu_dataflow df, uint64_t m, uint64_t n,
                        uint64_t k, int code, const char *text)
{
    struct tpu_serial_result res;
    memset(&res, 0xA5, sizeof res);
    struct tpu_serial_result before = res;
    struct tpu_diag d;
    tpu_diag_clear(&d);
    assert_int_equal(tpu_serial_gemm(R, C, df, m, n, k, &res, &d), code);
    assert_int_equal(d.code, code);
    if (!strstr(d.msg, text))
        print_error("message \"%s\" lacks \"%s\"\n", d.msg, text);
    assert_non_null(strstr(d.msg, text));
    assert_memory_equal(&res, &before, sizeof res);
    /* and without a diag */
    assert_int_equal(tpu_serial_gemm(R, C, df, m, n, k, &res, NULL), code);
}

static void test_errors(void **state)
{
    (void)state;
    expect_fail(0, 8, TPU_DATAFLOW_WS, 1, 1, 1, TPU_EINVAL,
                "the array is 0 x 8; a systolic array needs at least 1 row and 1 column");
    expect_fail(8, 0, TPU_DATAFLOW_OS, 1, 1, 1, TPU_EINVAL, "the array is 8 x 0");
    expect_fail(8, 8, (enum tpu_dataflow)3, 1, 1, 1, TPU_EINVAL,
                "dataflow 3 is not one of ws, os, is");
    expect_fail(8, 8, TPU_DATAFLOW_WS, 0, 1, 1, TPU_EINVAL,
                "GEMM dimension M is 0; M, N and K must each be at least 1");
    expect_fail(8, 8, TPU_DATAFLOW_IS, 1, 0, 1, TPU_EINVAL, "GEMM dimension N is 0");
    expect_fail(8, 8, TPU_DATAFLOW_OS, 1, 1, 0, TPU_EINVAL, "GEMM dimension K is 0");
    /* 2^32 * 2^32 * 2 multiply-accumulates */
    expect_fail(8, 8, TPU_DATAFLOW_WS, (uint64_t)1 << 32, (uint64_t)1 << 32, 2, TPU_ERANGE,
                "M x N x K = 4294967296 x 4294967296 x 2 multiply-accumulates do not fit "
                "in 64 bits");
    /* ws on 1 x 1: T = M = 2^64 - 1 fits as MACs, but a fold takes T + 1 cycles */
    expect_fail(1, 1, TPU_DATAFLOW_WS, UINT64_MAX, 1, 1, TPU_ERANGE,
                "the ws schedule of M=18446744073709551615 N=1 K=1 on a 1 x 1 array takes "
                "more than 2^64 - 1 cycles");
    /* 2^63 folds of 2 cycles (MACs 2^63 fit) */
    expect_fail(1, 1, TPU_DATAFLOW_WS, 1, (uint64_t)1 << 31, (uint64_t)1 << 32, TPU_ERANGE,
                "takes more than 2^64 - 1 cycles");

    struct tpu_diag d;
    tpu_diag_clear(&d);
    assert_int_equal(tpu_serial_gemm(8, 8, TPU_DATAFLOW_WS, 1, 1, 1, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "no result struct was given"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataflow_names),
        cmocka_unit_test(test_4x4_one_fold),
        cmocka_unit_test(test_8x8_partial_folds),
        cmocka_unit_test(test_golden_alexnet_conv1_ws),
        cmocka_unit_test(test_golden_gemm_256x128x256),
        cmocka_unit_test(test_closed_form_matches_fold_walk),
        cmocka_unit_test(test_fold_walk_matches_golden),
        cmocka_unit_test(test_one_by_one_os),
        cmocka_unit_test(test_large_gemm_closed_form),
        cmocka_unit_test(test_against_double_buffered),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
