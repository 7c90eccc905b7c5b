/* The serial-fold schedule: SCALE-Sim v2's compute-cycle model in closed form.
 *
 * This file reproduces the compute columns of SCALE-Sim v2's COMPUTE_REPORT.csv ("Total
 * Cycles", "Overall Util %", "Mapping Efficiency %", "Compute Util %") for a GEMM on an R x C
 * array under its ws, os and is dataflows, in O(1) instead of SCALE-Sim's O(cycles) demand
 * matrices. It is not a memory model: SCALE-Sim's "Stall Cycles" come from its SRAM/DRAM
 * buffers (scalesim/memory/), and here memory is ideal, so stalls are 0. Nor is it the model
 * of tpusim's chip, which is tpusim/mxu.h; the header compares the two.
 *
 * ---------------------------------------------------------------------------------------
 * WHAT SCALE-Sim v2 DOES (repository scalesim-project/scale-sim-v2):
 *
 * Topology -> operand matrices.  scalesim/topology_utils.py, load_arrays_gemm(): a GEMM row
 * "name, M, N, K," becomes the convolution [ifmap h = M, ifmap w = K, filter 1 x K, 1
 * channel, N filters, stride 1]: ofmap M x 1, window K. scalesim/compute/operand_matrix.py
 * then builds the IFMAP matrix [ofmap pixels][window] = [M][K], the filter matrix
 * [window][filters] = [K][N] and the OFMAP matrix [M][N]. (A convolution row gives
 * M = ofmap pixels, K = Fh * Fw * C, N = filters; include/tpusim/topology_file.h does
 * that conversion.)
 *
 * Spatial and temporal dimensions.  systolic_compute_{ws,os,is}.py, set_params() (and
 * topology_utils.calc_spatio_temporal_params(), which agrees):
 *     ws: Sr = ifmap cols = K, Sc = filter cols = N, T = ifmap rows = M
 *     os: Sr = ifmap rows = M, Sc = filter cols = N, T = ifmap cols = K
 *     is: Sr = ifmap cols = K, Sc = ifmap rows  = M, T = filter cols = N
 *     row_fold = ceil(Sr / arr_row),  col_fold = ceil(Sc / arr_col)
 *
 * Demand matrices.  create_{ifmap,filter,ofmap}_demand_mat() emit one matrix row per cycle,
 * fold after fold (loop "for fc in col_fold: for fr in row_fold"); every fold is padded with
 * -1 ("null requests") to the full array width, so a partial fold takes as long as a full
 * one, and the folds are concatenated with no overlap. skew_matrix() turns an r x w matrix
 * into (r + w - 1) x w. Rows per fold (R = arr_row, C = arr_col):
 *   ws  ifmap:  R-row prefix (weight load) + T + (C - 1)-row suffix, width R, skewed
 *               -> R + T + C - 1 + R - 1 = 2R + C + T - 2
 *       filter: R rows (flipped) + (R + C + T - 2)-row suffix, not skewed -> 2R + C + T - 2
 *       ofmap:  (2R - 1)-row prefix + T, width C, skewed -> 2R + C + T - 2
 *   os  ifmap:  T + (C - 1), width R, skewed -> R + C + T - 2
 *       filter: T + (R - 1), width C, skewed -> R + C + T - 2
 *       ofmap:  (T - 1)-row prefix + R (flipped), width C, skewed -> R + C + T - 2
 *   is  ifmap:  R rows (flipped) + (R + C + T - 2)-row suffix, not skewed -> 2R + C + T - 2
 *       filter: R-row prefix + T + (C - 1), width R, skewed -> 2R + C + T - 2
 *       ofmap:  (2R - 1)-row prefix + T, width C, skewed -> 2R + C + T - 2
 * (create_demand_matrices() asserts that the three agree.) So ws and is take the
 * 2R + C + T - 2 per fold usually quoted from the SCALE-Sim papers, os takes R + C + T - 2
 * (no separate load phase: both operands stream), and no fold's load is hidden behind the
 * previous fold's stream.
 *
 * Total cycles.  scalesim/memory/double_buffered_scratchpad_mem.py,
 * service_memory_requests(): demand row i is issued at cycle i + stalls so far, and
 * total_cycles = int(ofmap_serviced_cycles[-1][0]), the cycle of the last OFMAP row. With no
 * stalls that is (number of rows) - 1:
 *     total_cycles = row_fold * col_fold * fold_cycles - 1
 * When SCALE-Sim's buffers cannot keep up (e.g. InterfaceBandwidth USER with a small
 * bandwidth) its stalls are added on top and reported as "Stall Cycles"; the reference
 * output test/golden_trace, checked below, has none.
 *
 * Report columns.  scalesim/single_layer_sim.py, calc_report_data():
 *     overall_util = num_compute * 100 / (total_cycles * arr_row * arr_col), with
 *         num_compute = ofmap pixels * window = M * N * K (get_layer_num_ofmap_px() counts
 *         pixels times filters);
 *     mapping_eff  = get_avg_mapping_efficiency() * 100: the mean over folds of
 *         row_used * col_used / (R * C), row_used = min(R, rows of this fold) and likewise
 *         for columns (later versions count the -1 entries of the padded fold instead,
 *         which is the same number for dense layers);
 *     compute_util = get_avg_compute_utilization() * 100: the mean over folds of
 *         row_used * col_used * T / (R * C * cycles_this_fold), where cycles_this_fold =
 *         shape[0] + shape[1] - 1 of the fold's demand matrix at the point it is measured:
 *         ws: the unskewed filter demand (2R + C + T - 2) x C  ->  2R + 2C + T - 3
 *         is: the unskewed ifmap demand  (2R + C + T - 2) x C  ->  2R + 2C + T - 3
 *         os: the ofmap demand before its skew (R + T - 1) x C  ->   R +  C + T - 2
 *     For ws and is that is C - 1 more than the fold really takes (the skew length is
 *     applied to a matrix whose suffix already holds it); reproduced as is.
 * The report writer is scalesim/simulator.py, generate_reports(): the header is
 * "LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %,
 * Compute Util %,".
 *
 * ---------------------------------------------------------------------------------------
 * CLOSED FORMS USED HERE.  row_used takes the values R (row_fold - 1 times) and
 * Sr - R(row_fold - 1) once, summing to Sr; likewise columns, summing to Sc; and every fold
 * has the same T and cycle counts. So the means over row_fold * col_fold folds are
 *     mapping_eff  = 100 * (Sr / (R * row_fold)) * (Sc / (C * col_fold))
 *     compute_util = mapping_eff * T / util_fold_cycles
 * SCALE-Sim adds the per-fold ratios one by one in double precision, so its percentages can
 * differ from these in the last bits (a few units in 1e-15 relative); the counts are exact.
 *
 * CHECKED AGAINST SCALE-Sim's OWN REFERENCE OUTPUTS (tests/test_scalesim.c):
 *   test/golden_trace/COMPUTE_REPORT.csv: AlexNet conv1 (topologies/conv_nets/
 *     alexnet_part.csv) on 32 x 32, ws: 112283 cycles, 0 stalls, 91.68309650614964,
 *     94.53125, 90.78000992063485 -- all reproduced.
 *   test/general/golden_trace_user_{ws,os,is}/COMPUTE_REPORT.csv: GEMM 256 x 128 x 256
 *     (topologies/GEMM_mnk/test_mnk_input.csv) on 32 x 32 with memory stalls: total minus
 *     stalls is 11199 (ws), 10175 (os), 14207 (is), and mapping and compute util match.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <strings.h>

#include "tpusim/scalesim.h"
#include "util.h"

static const char *const dataflow_names[] = {
    [TPU_DATAFLOW_WS] = "ws",
    [TPU_DATAFLOW_OS] = "os",
    [TPU_DATAFLOW_IS] = "is",
};

#define N_DATAFLOWS (sizeof dataflow_names / sizeof dataflow_names[0])

const char *tpu_dataflow_name(enum tpu_dataflow df)
{
    if ((unsigned)df >= N_DATAFLOWS)
        return "?";
    return dataflow_names[df];
}

int tpu_dataflow_parse(const char *text, enum tpu_dataflow *out)
{
    if (!text || !out)
        return TPU_EINVAL;
    for (size_t i = 0; i < N_DATAFLOWS; i++) {
        if (strcasecmp(text, dataflow_names[i]) == 0) {
            *out = (enum tpu_dataflow)i;
            return 0;
        }
    }
    return TPU_EINVAL;
}

/* a*b into *out; false on overflow. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

/* a+b into *out; false on overflow. */
static bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a)
        return false;
    *out = a + b;
    return true;
}

/* 100 * macs / (total_cycles * pes), as SCALE-Sim computes it: Python divides the exact
 * integers num_compute * 100 and total_cycles * num_mac_unit, one correctly rounded division.
 * When both are below 2^53 they are exact doubles and one IEEE division gives the same bits;
 * beyond that the result is within rounding of it. 0 when total_cycles is 0. */
static double overall_util_pct(uint64_t macs, uint64_t total_cycles, uint64_t pes)
{
    const uint64_t exact_limit = (uint64_t)1 << 53;
    uint64_t num, den;
    if (total_cycles == 0)
        return 0.0;
    if (mul_u64(macs, 100, &num) && mul_u64(total_cycles, pes, &den) && num <= exact_limit &&
        den <= exact_limit)
        return (double)num / (double)den;
    return (double)macs * 100.0 / ((double)total_cycles * (double)pes);
}

int tpu_serial_gemm(uint32_t rows, uint32_t cols, enum tpu_dataflow df, uint64_t m, uint64_t n,
                    uint64_t k, struct tpu_serial_result *out, struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "no result struct was given to tpu_serial_gemm; pass "
                                        "a pointer to a struct tpu_serial_result");
    if (rows == 0 || cols == 0)
        return tpu__fail(d, TPU_EINVAL,
                         "the array is %" PRIu32 " x %" PRIu32 "; a systolic array needs at "
                         "least 1 row and 1 column",
                         rows, cols);
    if ((unsigned)df >= N_DATAFLOWS)
        return tpu__fail(d, TPU_EINVAL, "dataflow %d is not one of ws, os, is", (int)df);
    const uint64_t dims[3] = {m, n, k};
    const char *const dim_names = "MNK";
    for (int i = 0; i < 3; i++) {
        if (dims[i] == 0)
            return tpu__fail(d, TPU_EINVAL,
                             "GEMM dimension %c is 0; M, N and K must each be at least 1 "
                             "(Y[M][N] = A[M][K] * B[K][N])",
                             dim_names[i]);
    }

    uint64_t macs, mn;
    if (!mul_u64(m, n, &mn) || !mul_u64(mn, k, &macs))
        return tpu__fail(d, TPU_ERANGE,
                         "M x N x K = %" PRIu64 " x %" PRIu64 " x %" PRIu64 " multiply-"
                         "accumulates do not fit in 64 bits; split the GEMM into smaller ones",
                         m, n, k);

    uint64_t sr, sc, t;
    switch (df) {
    case TPU_DATAFLOW_WS:
        sr = k, sc = n, t = m;
        break;
    case TPU_DATAFLOW_OS:
        sr = m, sc = n, t = k;
        break;
    case TPU_DATAFLOW_IS:
    default:
        sr = k, sc = m, t = n;
        break;
    }

    const uint64_t r = rows, c = cols;
    uint64_t row_folds = tpu__ceil_div_u64(sr, r);
    uint64_t col_folds = tpu__ceil_div_u64(sc, c);

    /* Fold lengths; the constant parts are below 2^35, so only T can overflow them. ws and
     * is: 2R + C + T - 2 and 2R + 2C + T - 3; os: R + C + T - 2 for both. */
    uint64_t fold_cycles = 0, util_fold_cycles = 0;
    bool ok;
    if (df == TPU_DATAFLOW_OS) {
        ok = add_u64(r + c - 2, t, &fold_cycles);
        util_fold_cycles = fold_cycles;
    } else {
        ok = add_u64(2 * r + c - 2, t, &fold_cycles) &&
             add_u64(2 * r + 2 * c - 3, t, &util_fold_cycles);
    }
    uint64_t folds = 0, busy_cycles = 0;
    ok = ok && mul_u64(row_folds, col_folds, &folds) && mul_u64(folds, fold_cycles, &busy_cycles);
    if (!ok)
        return tpu__fail(d, TPU_ERANGE,
                         "the %s schedule of M=%" PRIu64 " N=%" PRIu64 " K=%" PRIu64 " on a "
                         "%" PRIu32 " x %" PRIu32 " array takes more than 2^64 - 1 cycles; "
                         "split the GEMM into smaller ones",
                         tpu_dataflow_name(df), m, n, k, rows, cols);

    struct tpu_serial_result res = {
        .dataflow = df,
        .rows = rows,
        .cols = cols,
        .m = m,
        .n = n,
        .k = k,
        .sr = sr,
        .sc = sc,
        .t = t,
        .row_folds = row_folds,
        .col_folds = col_folds,
        .folds = folds,
        .fold_cycles = fold_cycles,
        .util_fold_cycles = util_fold_cycles,
        .busy_cycles = busy_cycles,
        .total_cycles = busy_cycles - 1, /* busy_cycles >= 1: fold_cycles >= R + C - 1 >= 1 */
        .stall_cycles = 0,
        .macs = macs,
    };

    /* The mean of row_used * col_used / (R * C) over the folds factors into a row part and a
     * column part (see the top of the file). */
    double mapping = ((double)sr / ((double)r * (double)row_folds)) *
                     ((double)sc / ((double)c * (double)col_folds));
    res.mapping_efficiency_pct = mapping * 100.0;
    res.compute_util_pct = mapping * (double)t / (double)util_fold_cycles * 100.0;
    res.overall_util_pct = overall_util_pct(macs, res.total_cycles, r * c);
    *out = res;
    return 0;
}
