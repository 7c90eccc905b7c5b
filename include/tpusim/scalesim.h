/* The serial-fold schedule: SCALE-Sim v2's compute-cycle model, for lining tpusim's results
 * up with papers that used SCALE-Sim.
 *
 * This is the second matrix-unit schedule of tpusim. The first, in tpusim/mxu.h, is the
 * chip's own: a weight-stationary array with double-buffered weights, whose cycle counts the
 * Verilog array in rtl/ reproduces cycle for cycle. This one is not a model of any hardware
 * tpusim simulates; it reproduces, number for number, the "Total Cycles", "Overall Util %",
 * "Mapping Efficiency %" and "Compute Util %" columns of SCALE-Sim v2's COMPUTE_REPORT.csv
 * for its three dataflows, with ideal memory ("Stall Cycles" 0). sim/mxu/scalesim.c derives every
 * formula below from SCALE-Sim's source and names the files it comes from.
 *
 * ---------------------------------------------------------------------------------------
 * THE GEMM AND THE THREE DATAFLOWS.  Y[M][N] = A[M][K] * B[K][N], as in tpusim/mxu.h. In
 * SCALE-Sim's words A is the IFMAP operand matrix (M output pixels x K window elements), B
 * the filter matrix (K x N filters), Y the OFMAP matrix. Each dataflow puts two of the three
 * dimensions on the array (Sr on its R rows, Sc on its C columns) and streams the third in
 * time (T):
 *     ws (weight stationary)  Sr = K   Sc = N   T = M
 *     os (output stationary)  Sr = M   Sc = N   T = K
 *     is (input stationary)   Sr = K   Sc = M   T = N
 * The Sr x Sc plane is cut into  row_folds = ceil(Sr / R)  by  col_folds = ceil(Sc / C)
 * folds. Every fold, partial or not, occupies the whole array for the same number of cycles
 * and the folds run strictly one after another (no overlap, no prefetch of the next fold's
 * stationary operand):
 *     fold_cycles = 2R + C + T - 2     (ws, is: R cycles to load the stationary operand,
 *                                       T to stream, R - 1 + C - 1 of fill and drain)
 *     fold_cycles =  R + C + T - 2     (os: no load phase; T to stream, R + C - 2 fill
 *                                       and drain)
 *     total_cycles = row_folds * col_folds * fold_cycles - 1
 * The "- 1" is SCALE-Sim's: it reports the index of the cycle in which the last output is
 * written (cycles count from 0), not the number of cycles. busy_cycles below is the count.
 *
 * UTILISATION, as SCALE-Sim defines it (percent):
 *     mapping efficiency  = mean over folds of  used_rows * used_cols / (R * C)
 *                         = 100 * Sr * Sc / (R * C * row_folds * col_folds)
 *     compute util        = mean over folds of  used_rows * used_cols * T / (R * C * u)
 *                         = mapping efficiency * T / u
 *         with u = 2R + 2C + T - 3 for ws and is (C - 1 more than fold_cycles: SCALE-Sim
 *         applies its skew length to a demand matrix that is not skewed; reproduced so the
 *         numbers match) and u = R + C + T - 2 = fold_cycles for os
 *     overall util        = 100 * M * N * K / (total_cycles * R * C)
 *
 * ---------------------------------------------------------------------------------------
 * HOW THIS DIFFERS FROM tpusim's OWN SCHEDULE (tpusim/mxu.h, tpu_mxu_seq_cycles). Both cut a
 * GEMM on an R x C weight-stationary array into the same tiles: ceil(K/R) x ceil(N/C) weight
 * tiles, each streaming the M rows of A; the ws fold count here equals tpusim's tile count.
 * They differ in what overlaps:
 *   serial folds (this file):  each fold loads its weights (R cycles), streams M rows,
 *       fills and drains, and only then does the next fold start:
 *           busy_cycles = F * (2R + C + M - 2)                      F folds
 *   double-buffered (mxu.h):  the next tile's weights load into the shadow buffer while the
 *       current tile streams, and the fill/drain of one tile overlaps the next's stream:
 *           total = R + (F - 1) * max(M, R) + M + R + C - 1
 * For one tile the two agree but for one cycle: tpusim counts the cycle of the output
 * register (2R + C + M - 1), SCALE-Sim's fold has 2R + C + M - 2 cycles and it reports
 * 2R + C + M - 3. Each further tile costs 2R + C + M - 2 cycles in the serial schedule (its
 * own load, stream, fill and drain) but only max(M, R) in the double-buffered one (its
 * stream hides its load, or, when M < R, the weight-load port sets the pace). Use this
 * schedule to compare with published SCALE-Sim numbers; use tpusim/mxu.h for what the
 * simulated chip does.
 */
#ifndef TPUSIM_SCALESIM_H
#define TPUSIM_SCALESIM_H

#include <stdint.h>

#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SCALE-Sim's dataflows, spelt in its configuration files as "ws", "os", "is". */
enum tpu_dataflow {
    TPU_DATAFLOW_WS = 0, /* weight stationary: K on rows, N on columns, M streams */
    TPU_DATAFLOW_OS = 1, /* output stationary: M on rows, N on columns, K streams */
    TPU_DATAFLOW_IS = 2, /* input stationary:  K on rows, M on columns, N streams */
};

/* "ws", "os" or "is"; "?" for a value outside the enum. Static storage. */
const char *tpu_dataflow_name(enum tpu_dataflow df);

/* Parses "ws", "os" or "is" (any case, as SCALE-Sim's "Dataflow :" setting) into *out.
 * Returns 0, or TPU_EINVAL (out untouched) for anything else or a NULL argument; the caller
 * words the message, naming the text and the three accepted spellings. */
int tpu_dataflow_parse(const char *text, enum tpu_dataflow *out);

/* One GEMM under the serial-fold schedule. All counts are exact integers; the three
 * utilisations are percentages (0..100) as in SCALE-Sim's COMPUTE_REPORT.csv. */
struct tpu_serial_result {
    enum tpu_dataflow dataflow;
    uint32_t rows, cols;       /* R, C of the array */
    uint64_t m, n, k;          /* the GEMM */
    uint64_t sr, sc, t;        /* spatial rows, spatial columns, temporal (see above) */
    uint64_t row_folds;        /* ceil(Sr / R) */
    uint64_t col_folds;        /* ceil(Sc / C) */
    uint64_t folds;            /* row_folds * col_folds */
    uint64_t fold_cycles;      /* cycles of one fold: 2R + C + T - 2 (ws, is), R + C + T - 2 (os) */
    uint64_t util_fold_cycles; /* the per-fold cycles SCALE-Sim's compute util divides by */
    uint64_t busy_cycles;      /* folds * fold_cycles: cycles the array is occupied */
    uint64_t total_cycles;     /* as COMPUTE_REPORT's "Total Cycles": busy_cycles - 1 */
    uint64_t stall_cycles;     /* always 0: memory is ideal (SCALE-Sim's stalls come from its
                                  SRAM/DRAM model, which tpusim does not reproduce) */
    uint64_t macs;             /* M * N * K: SCALE-Sim's num_compute */
    double overall_util_pct;       /* 100 * macs / (total_cycles * R * C); 0 when
                                      total_cycles is 0 (a 1x1 os GEMM, where SCALE-Sim
                                      would divide by zero) */
    double mapping_efficiency_pct; /* mean over folds of used PEs / all PEs */
    double compute_util_pct;       /* mean over folds of MACs / (PEs * util_fold_cycles) */
};

/* Times Y[M][N] = A[M][K] * B[K][N] on a rows x cols array with dataflow df, in O(1).
 * Fills *out and returns 0; or returns TPU_EINVAL (a zero array side or GEMM dimension, an
 * unknown dataflow, a NULL out) or TPU_ERANGE (M*N*K or the cycle count does not fit in 64
 * bits), with a sentence in d (may be NULL), and leaves *out untouched. */
int tpu_serial_gemm(uint32_t rows, uint32_t cols, enum tpu_dataflow df, uint64_t m, uint64_t n,
                    uint64_t k, struct tpu_serial_result *out, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
