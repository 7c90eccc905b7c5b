/* A whole GEMM on a chip's matrix units: how it is cut into weight tiles, spread over the
 * MXUs, and how many cycles the double-buffered weight-stationary schedule of mxu.h takes.
 *
 * This is the matrix units' time alone, with operands always ready (as if fed by an ideal
 * memory). The bytes the GEMM must move at least once and the time HBM needs for them are
 * reported beside it so a reader can see which bound applies; the chip model that overlaps
 * DMA with compute is a separate layer. */
#ifndef TPUSIM_GEMM_H
#define TPUSIM_GEMM_H

#include <stdint.h>

#include "tpusim/config.h"
#include "tpusim/error.h"
#include "tpusim/mxu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tpu_gemm_params {
    uint64_t m, k, n;       /* Y[M][N] = A[M][K] * B[K][N] */
    enum tpu_dtype dtype;
    unsigned passes;        /* fp32 only: 1, 3 or 6 bf16 passes; ignored otherwise */
};

struct tpu_gemm_timing {
    uint32_t rows, cols;         /* array size used */
    uint32_t n_mxu;              /* matrix units on the chip (cores x per core) */
    uint32_t n_mxu_busy;         /* those that got work */
    uint64_t k_tiles, n_tiles;   /* ceil(K/R), ceil(N/C) */
    uint64_t m_chunks;           /* ceil(M / accumulator_rows) */
    uint64_t m_chunk_rows;       /* rows per chunk (the last may be shorter) */
    uint64_t weight_tiles;       /* k_tiles * n_tiles * m_chunks * passes */
    uint64_t cycles;             /* until the last MXU finishes */
    uint64_t busiest_mxu_tiles;  /* tiles on the MXU that finishes last */
    uint64_t useful_macs;        /* M*K*N*passes */
    uint64_t mapped_pe_tiles;    /* sum over tiles of used rows x used columns */
    double utilization;          /* useful MACs / (cycles * R * C * n_mxu) */
    double mapping_efficiency;   /* mapped PEs / (weight tiles * R * C) */
    double seconds;              /* cycles at the chip clock */
    double achieved_flops_per_s; /* 2 * M*K*N / seconds (the model's FLOPs, not the passes') */
    double peak_flops_per_s;
    uint64_t min_hbm_bytes;      /* A, B read once, Y written once */
    double hbm_seconds;          /* min_hbm_bytes at the HBM bandwidth */
};

/* Times a GEMM on `cfg` (its MXU size and count, clock, accumulator rows, HBM bandwidth).
 * Rejects a dtype the chip's MXU lacks (fp32 needs bf16), zero sizes, passes other than
 * 1/3/6, and sizes whose cycle count would overflow, with a sentence in d. O(tiles per MXU)
 * at worst, O(1) per MXU when all tiles have equal row counts. */
int tpu_gemm_time(const struct tpu_chip_config *cfg, const struct tpu_gemm_params *p,
                  struct tpu_gemm_timing *out, struct tpu_diag *d);

/* The checks tpu_gemm_time starts with, on their own: sizes, passes, and whether the chip's
 * matrix unit has the dtype. For other schedules that time the same GEMM. */
int tpu_gemm_check(const struct tpu_chip_config *cfg, const struct tpu_gemm_params *p,
                   struct tpu_diag *d);


#ifdef __cplusplus
}
#endif
#endif
