/* Timing a whole GEMM on a chip's matrix units (include/tpusim/gemm.h).
 *
 * The GEMM is cut as the TPU compiler cuts it for a weight-stationary array: B into
 * ceil(K/R) x ceil(N/C) weight tiles, M into chunks that fit the accumulators. A unit of
 * work is one (M chunk, N tile) pair: its K tiles (times the bf16 passes for fp32) run back to
 * back on one MXU, accumulating into the same accumulator rows. Units are dealt round-robin to
 * the chip's MXUs, in order of M chunk then N tile; each MXU runs its tiles back to back with
 * double-buffered weights (mxu.h), and the GEMM ends when the last MXU does. */
#include <math.h>

#include "tpusim/gemm.h"
#include "util.h"

/* Cycles for one MXU that runs n_full tiles of full_rows then n_short of short_rows. */
static uint64_t mxu_cycles(uint32_t r, uint32_t c, uint64_t n_full, uint64_t full_rows,
                           uint64_t n_short, uint64_t short_rows)
{
    if (n_short == 0)
        return tpu_mxu_seq_cycles(r, c, n_full, full_rows);
    if (n_full == 0)
        return tpu_mxu_seq_cycles(r, c, n_short, short_rows);
    struct tpu_mxu_sched s;
    tpu_mxu_sched_init(&s, r, c);
    for (uint64_t t = 0; t < n_full; t++)
        tpu_mxu_sched_push(&s, full_rows, NULL, NULL);
    for (uint64_t t = 0; t < n_short; t++)
        tpu_mxu_sched_push(&s, short_rows, NULL, NULL);
    return tpu_mxu_sched_total(&s);
}

int tpu_gemm_check(const struct tpu_chip_config *cfg, const struct tpu_gemm_params *p,
                   struct tpu_diag *d)
{
    if (p->m == 0 || p->k == 0 || p->n == 0)
        return tpu__fail(d, TPU_EINVAL,
                         "GEMM size M=%llu K=%llu N=%llu has a zero dimension; every one of "
                         "M, K and N must be at least 1",
                         (unsigned long long)p->m, (unsigned long long)p->k,
                         (unsigned long long)p->n);
    if (p->dtype == TPU_INT8) {
        if (!(cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_INT8)))
            return tpu__fail(d, TPU_EUNSUPPORTED,
                             "chip '%s' has no int8 matrix unit; use dtype bf16 or fp32, or a "
                             "chip with int8 (tpu-v1, tpu-v4)",
                             cfg->name);
    } else if (p->dtype == TPU_BF16 || p->dtype == TPU_F32) {
        if (p->dtype == TPU_F32) {
            if (p->passes != 1 && p->passes != 3 && p->passes != 6)
                return tpu__fail(d, TPU_EINVAL,
                                 "fp32 passes %u is not supported; use 1 (bf16), 3 (XLA HIGH) "
                                 "or 6 (XLA HIGHEST)",
                                 p->passes);
        }
        if (!(cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
            return tpu__fail(d, TPU_EUNSUPPORTED,
                             "chip '%s' has no bf16 matrix unit, so dtype %s cannot run on it; "
                             "use dtype int8, or a chip with bf16 (tpu-v2 and later)",
                             cfg->name, tpu_gemm_dtype_name(p->dtype));
    } else {
        return tpu__fail(d, TPU_EINVAL, "unknown dtype %d", (int)p->dtype);
    }
    return 0;
}

int tpu_gemm_time(const struct tpu_chip_config *cfg, const struct tpu_gemm_params *p,
                  struct tpu_gemm_timing *out, struct tpu_diag *d)
{
    int rc = tpu_gemm_check(cfg, p, d);
    if (rc)
        return rc;
    const uint32_t r = cfg->mxu_rows, c = cfg->mxu_cols;
    /* the fp32 passes run one after another on the bf16 array */
    const unsigned passes = p->dtype == TPU_F32 ? p->passes : 1;
    /* Keep every count well inside 64 bits: cycles <= tiles * (M + 2R + C) < 2^62. */
    const double tiles_d = ceil((double)p->k / r) * ceil((double)p->n / c) *
                           ceil((double)p->m / cfg->accumulator_rows) * passes;
    const double work_d = tiles_d * ((double)cfg->accumulator_rows + 2.0 * r + c);
    if (work_d > 0x1p60 || (double)p->m * (double)p->k * (double)p->n * passes > 0x1p62)
        return tpu__fail(d, TPU_ERANGE,
                         "GEMM M=%llu K=%llu N=%llu is too large to time in 64-bit cycle "
                         "counts; split it into smaller GEMMs",
                         (unsigned long long)p->m, (unsigned long long)p->k,
                         (unsigned long long)p->n);

    struct tpu_gemm_timing t = {0};
    t.rows = r;
    t.cols = c;
    t.n_mxu = cfg->cores_per_chip * cfg->mxu_per_core;
    t.k_tiles = tpu__ceil_div_u64(p->k, r);
    t.n_tiles = tpu__ceil_div_u64(p->n, c);
    t.m_chunks = tpu__ceil_div_u64(p->m, cfg->accumulator_rows);
    t.m_chunk_rows = p->m < cfg->accumulator_rows ? p->m : cfg->accumulator_rows;
    const uint64_t last_rows = p->m - (t.m_chunks - 1) * t.m_chunk_rows;
    const uint64_t tiles_per_unit = t.k_tiles * passes;
    const uint64_t units = t.m_chunks * t.n_tiles;
    const uint64_t short_units = last_rows == t.m_chunk_rows ? 0 : t.n_tiles; /* last chunk */
    t.weight_tiles = units * tiles_per_unit;
    t.n_mxu_busy = units < t.n_mxu ? (uint32_t)units : t.n_mxu;

    /* Unit u goes to MXU u % n_mxu; the short units are the last n_tiles indices. */
    for (uint32_t x = 0; x < t.n_mxu_busy; x++) {
        uint64_t mine = units / t.n_mxu + (x < units % t.n_mxu);
        uint64_t first_short = units - short_units;
        /* units of mine with index >= first_short: indices x, x+n, ... */
        uint64_t mine_short = 0;
        if (short_units) {
            uint64_t before = first_short / t.n_mxu + (x < first_short % t.n_mxu);
            mine_short = mine - before;
        }
        uint64_t cyc = mxu_cycles(r, c, (mine - mine_short) * tiles_per_unit, t.m_chunk_rows,
                                  mine_short * tiles_per_unit, last_rows);
        if (cyc > t.cycles) {
            t.cycles = cyc;
            t.busiest_mxu_tiles = mine * tiles_per_unit;
        }
    }

    t.useful_macs = p->m * p->k * p->n * passes;
    t.mapped_pe_tiles = p->k * p->n * t.m_chunks * passes;
    t.utilization = (double)t.useful_macs / ((double)t.cycles * r * c * t.n_mxu);
    t.mapping_efficiency =
        (double)(p->k * p->n) / ((double)t.k_tiles * r * (double)t.n_tiles * c);
    t.seconds = (double)t.cycles / (cfg->clock_mhz * 1e6);
    t.achieved_flops_per_s = 2.0 * (double)p->m * (double)p->k * (double)p->n / t.seconds;
    t.peak_flops_per_s = 2.0 * r * c * (double)t.n_mxu * cfg->clock_mhz * 1e6;
    const unsigned in_bytes = tpu_dtype_bytes(p->dtype);
    t.min_hbm_bytes = (p->m * p->k + p->k * p->n) * in_bytes + p->m * p->n * 4;
    t.hbm_seconds = (double)t.min_hbm_bytes / (cfg->hbm_gbytes_per_s * 1e9);
    *out = t;
    return 0;
}
