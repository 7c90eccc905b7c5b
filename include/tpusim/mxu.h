/* The matrix unit (MXU): a weight-stationary R x C systolic array, as in the TPU.
 *
 * This header is the contract that the C model, the naive reference in the tests and the
 * Verilog array in rtl/ all implement. It has two halves: the cycle model and the numerics.
 *
 * ---------------------------------------------------------------------------------------
 * GEOMETRY. The array has R rows and C columns of processing elements (PEs). A weight tile is
 * R x C: W[i][j] sits in PE(i, j). An input row is a vector of R values a[0..R-1]; a[i] enters
 * array row i from the left and moves right one PE per cycle. Partial sums move down one PE
 * per cycle. Column j computes  y[j] = sum_i a[i] * W[i][j]  (the K dimension runs down the
 * rows, the N dimension across the columns). A GEMM  Y[M][N] = A[M][K] * B[K][N]  is cut into
 * weight tiles of B (ceil(K/R) x ceil(N/C), partial tiles padded with zeros) and each tile
 * streams the M rows of the matching K-slice of A.
 *
 * ---------------------------------------------------------------------------------------
 * CYCLE MODEL (exactly what rtl/ does; tests/test_cosim.c checks it cycle for cycle).
 * Cycle 0 is the first cycle in which the array is given work. All times are cycles.
 *
 *   Weight load.  A tile's weights are presented one row per cycle for R cycles (the row for
 *   array row R-1 first: they shift down the columns). Column j sees them j cycles later than
 *   column 0 (the load moves as a diagonal wavefront, like the data), so a load presented at
 *   cycles [L, L+R) has written every PE of column j by cycle L+R-1+j. Weights go into the
 *   shadow half of a double buffer; each input row carries a tag naming the buffer half it
 *   uses, so the switch to new weights travels with the data and costs no cycle.
 *
 *   Stream.  Input row m of a tile is presented, unskewed, at cycle s+m (s: the tile's stream
 *   start); the array skews it (row i delayed i cycles) and de-skews the outputs, so the C
 *   outputs of row m are all valid at cycle  s + m + R + C - 1  (fill + drain latency
 *   R + C - 1: R - 1 for the input skew and the trip down the rows, C - 1 across, +1 for the
 *   output register, C - 1 de-skew folded in).
 *
 *   Constraints for tile t (L_t: its load start, s_t: its stream start, M_t: its rows):
 *     L_0 = 0
 *     L_t = max(L_{t-1} + R,             one weight-load port
 *               s_{t-2} + M_{t-2})       the buffer half tile t-2 used must be free: tile
 *                                        t-2's last row has left row i of column j exactly
 *                                        when the diagonal load reaches it
 *     s_t = max(L_t + R,                 its weights are in
 *               s_{t-1} + M_{t-1})       one input port
 *     total = s_{T-1} + M_{T-1} + R + C - 1    (cycles up to and including the cycle in
 *                                               which the last output row is valid)
 *   Every tile costs R load cycles and R + C - 1 fill/drain cycles regardless of how much of
 *   it is padding: a partial tile occupies the whole array.
 *
 *   Closed form for T tiles of M rows each (the recurrence solved; tests check both agree):
 *     s_t   = R + t * max(M, R)
 *     total = R + (T - 1) * max(M, R) + M + R + C - 1
 *   i.e. the first load is exposed, then each tile costs max(M, R) (streaming hides the next
 *   load when M >= R; otherwise the load port is the bottleneck), then one fill/drain.
 *
 * ---------------------------------------------------------------------------------------
 * NUMERICS (bit-exact; the fast kernel, the naive reference and the RTL agree bit for bit).
 *
 *   bf16 x bf16 -> fp32.  Each PE computes  p = fp32(a) * fp32(w)  rounded to fp32 (round to
 *   nearest even; the product of two bf16 is exact unless it overflows or falls below the
 *   normal range) and  psum_out = psum_in + p  rounded to fp32 (nearest even). Everything
 *   is IEEE-754 binary32 with gradual underflow: subnormal inputs, products and sums are
 *   kept, never flushed. The top of each column receives +0.0. So for tile kt of K-slice
 *   [k0, k0+R):
 *       t = +0.0;  for k = k0 .. k0+R-1 (padding rows contribute 0*0):  t = t + a[k]*w[k][n]
 *   and the column's output is t. Padded rows hold real zeros (a = w = 0, p = +0); since t
 *   starts at +0 and a round-to-nearest sum is -0 only when both addends are -0, t is never
 *   -0, and adding +0 never changes it: padding never changes a value.
 *   Accumulators (outside the array) take the tiles in K order:
 *       acc = t(tile 0);  acc = acc + t(tile 1);  ...           (fp32, nearest even)
 *   or, when accumulating into existing results, acc = acc_in + t(tile 0) + ...
 *   Inf and NaN follow IEEE (Inf*0 = NaN, Inf + -Inf = NaN). Every NaN that leaves the
 *   array (a column output) or the accumulators is replaced by the canonical quiet NaN
 *   0x7FC00000, so NaN results compare bit for bit whatever the payload rules of the host.
 *
 *   int8 x int8 -> int32.  p = a * w (exact in 16 bits), psum_out = psum_in + p in
 *   two's-complement int32 with wrap-around; accumulators likewise. Integer sums do not
 *   depend on order, but the array's order is kept anyway.
 *
 *   fp32 x fp32 in several bf16 passes (XLA's precision settings on TPU). Each fp32 x is
 *   split as  hi = bf16(x),  mid = bf16(x - hi),  lo = bf16(x - hi - mid)  (the subtractions
 *   are exact in fp32). A non-finite x, or a finite x that rounds past the largest bf16 (so
 *   hi = +-Inf), gives mid = lo = 0. The passes are bf16 GEMMs run one after another into the
 *   same accumulators, smallest terms first:
 *       3 passes (XLA HIGH, "bf16_3x"):   mid*hi, hi*mid, hi*hi
 *       6 passes (XLA HIGHEST, "bf16_6x"): lo*hi, mid*mid, hi*lo, mid*hi, hi*mid, hi*hi
 *   where "x*y" means A-part x times B-part y. 1 pass is plain bf16 (XLA DEFAULT).
 * ---------------------------------------------------------------------------------------
 */
#ifndef TPUSIM_MXU_H
#define TPUSIM_MXU_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#include "tpusim/bf16.h"
#include "tpusim/dtype.h"
#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The matrix unit's input types (dtype.h): TPU_BF16 (bf16 x bf16 -> fp32), TPU_INT8 (int8 x
 * int8 -> int32) and TPU_F32 (fp32 x fp32 as 1, 3 or 6 bf16 passes). Their names as `tpusim
 * gemm` and chip configurations spell them: "bf16", "int8", "fp32"; "unknown" otherwise. */
const char *tpu_gemm_dtype_name(enum tpu_dtype t);

/* ---- cycle model -------------------------------------------------------------------- */

/* Cycles for one tile streaming m_rows rows on an R x C array, weight load included:
 * 2R + M + C - 1. */
uint64_t tpu_mxu_tile_cycles(uint32_t rows, uint32_t cols, uint64_t m_rows);

/* Cycles for n_tiles tiles of m_rows rows each, back to back with double-buffered weights
 * (the closed form above). 0 for n_tiles == 0. */
uint64_t tpu_mxu_seq_cycles(uint32_t rows, uint32_t cols, uint64_t n_tiles, uint64_t m_rows);

/* The recurrence above for tiles of differing row counts: m_rows[t] rows for tile t.
 * Writes each tile's load start and stream start (either array may be NULL) and returns
 * the total. This is the schedule the RTL harness drives, cycle for cycle. */
uint64_t tpu_mxu_schedule(uint32_t rows, uint32_t cols, const uint64_t *m_rows, size_t n_tiles,
                          uint64_t *load_start, uint64_t *stream_start);

/* The same recurrence, fed one tile at a time (for long sequences built on the fly). */
struct tpu_mxu_sched {
    uint32_t rows, cols;
    uint64_t n;                       /* tiles pushed so far */
    uint64_t load_prev, stream_prev;  /* L_{t-1}, s_{t-1} */
    uint64_t stream_prev2;            /* s_{t-2} */
    uint64_t m_prev, m_prev2;         /* M_{t-1}, M_{t-2} */
};
void tpu_mxu_sched_init(struct tpu_mxu_sched *s, uint32_t rows, uint32_t cols);
/* Schedules the next tile of m_rows rows; writes its load and stream starts if not NULL. */
void tpu_mxu_sched_push(struct tpu_mxu_sched *s, uint64_t m_rows, uint64_t *load_start,
                        uint64_t *stream_start);
/* Total cycles of the tiles pushed so far (0 if none). */
uint64_t tpu_mxu_sched_total(const struct tpu_mxu_sched *s);

/* ---- numerics: one tile, as the array computes it ----------------------------------- */

/* One weight tile streaming m_rows input rows (bf16).
 *   w:   [rows][cols]   row-major, the tile as it sits in the array
 *   in:  [m_rows][rows] row-major, input row m is the vector entering the array rows
 *   out: [m_rows][cols] row-major fp32 column outputs (NaN canonical)
 * This is the definition, written for clarity, not speed. */
void tpu_mxu_tile_bf16(uint32_t rows, uint32_t cols, const tpu_bf16 *w, const tpu_bf16 *in,
                       uint64_t m_rows, float *out);

/* The same for int8 -> int32. */
void tpu_mxu_tile_int8(uint32_t rows, uint32_t cols, const int8_t *w, const int8_t *in,
                       uint64_t m_rows, int32_t *out);

/* ---- numerics: whole GEMMs, fast and order-exact ------------------------------------ */

/* Y[M][N] = A[M][K] * B[K][N], all row-major, with the array's accumulation order for an
 * array of `tile_rows` rows (R; the column count does not change values).
 * If `accumulate`, Y holds prior values and the tiles are added to them; otherwise Y is
 * overwritten. `n_threads` >= 1 worker threads (1: run on the caller's thread); results are
 * identical for any thread count. M or N = 0 does nothing; K = 0 writes +0 (or, when
 * accumulating, keeps Y with its NaNs made canonical). Returns 0, TPU_EINVAL (a zero R or
 * thread count, a NULL buffer, a size whose product overflows), TPU_ENOMEM or TPU_ETHREAD.
 * Caller owns all buffers. */
int tpu_gemm_bf16(const tpu_bf16 *a, const tpu_bf16 *b, float *y, size_t m, size_t k, size_t n,
                  uint32_t tile_rows, bool accumulate, unsigned n_threads);

int tpu_gemm_int8(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k, size_t n,
                  uint32_t tile_rows, bool accumulate, unsigned n_threads);

/* fp32 GEMM in `passes` (1, 3 or 6) bf16 passes as defined above. */
int tpu_gemm_f32(const float *a, const float *b, float *y, size_t m, size_t k, size_t n,
                 uint32_t tile_rows, unsigned passes, unsigned n_threads);

/* Splits an fp32 value into the bf16 parts used by the multi-pass GEMM. */
void tpu_f32_split_bf16(float x, tpu_bf16 *hi, tpu_bf16 *mid, tpu_bf16 *lo);

#ifdef __cplusplus
}
#endif
#endif
