/* Matmuls on a matrix-unit provider (mxu_provider.h): the chip's half of an external
 * matrix unit such as the RTL array. It does the work the built-in matrix unit does in
 * ops.c, but hands every weight tile to the provider, one tile sequence per MXU, and keeps
 * only what lies outside the array: the operands' layout and the accumulators. It is not a
 * second GEMM kernel: it never multiplies.
 *
 * Cutting (the same as sim/kernels/gemm_plan.c, so the provider's cycles answer for the same work
 * that tpu__matmul_cycles times). y[M][N] = op(a)[M][K] * op(b)[K][N] on an R x C array with
 * `accumulator_rows` rows of accumulators per MXU:
 *   - op(b) becomes ceil(K/R) x ceil(N/C) weight tiles, zero-padded (tile (kt, nt) holds
 *     op(b)[kt*R + i][nt*C + j] in PE(i, j));
 *   - M becomes chunks of min(M, accumulator_rows) rows (the last may be shorter);
 *   - a unit of work is one (M chunk, N tile) pair, taken in order of M chunk then N tile;
 *     unit u goes to the core's MXU u % mxu_per_core; a unit's K tiles run back to back on
 *     its MXU, tile kt streaming the chunk's rows of op(a)'s K slice [kt*R, kt*R + R)
 *     (zero-padded) as R-wide input rows;
 *   - each MXU runs all its units' tiles as one sequence (weights prefetched across units),
 *     and the op's MXU time is the longest sequence's count.
 * Operands enter the array as bf16 (f32 rounded to nearest even, bf16 as it is) or int8,
 * which is what a one-pass matmul does (ops.c); 3 and 6 pass f32 matmuls are refused.
 *
 * Accumulation (mxu.h, NUMERICS): for each output, the column outputs t(kt) of its unit's
 * tiles are added in K order: acc = t(0), acc = acc + t(1), ... (fp32, nearest even), or
 * acc = y + t(0) + t(1) + ... with `accumulate`; a NaN result is stored as the canonical
 * NaN. int32 results add with wrap-around. K = 0 (no tiles) writes +0, or keeps y with its
 * NaNs made canonical. So the result equals tpu__op_compute's bit for bit.
 *
 * The conv2d ops run as their GEMM (provider_conv below): the patches im2col(x) are formed
 * here, outside the array, and the product is cut as a matmul's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mxu_provider.h"
#include "ops/ops_int.h"
#include "util.h"

int tpu__provider_check(const struct tpu_device_settings *s, struct tpu_diag *d)
{
    const struct tpu_mxu_provider *p = s->mxu;
    if (!p)
        return 0;
    const struct tpu_chip_config *cfg = &s->chip;
    const char *name = p->name ? p->name : "external";
    if (!p->run)
        return tpu__fail(d, TPU_EINVAL,
                         "the %s matrix-unit provider has no run function; set "
                         "tpu_mxu_provider.run",
                         name);
    if (p->rows != cfg->mxu_rows || p->cols != cfg->mxu_cols)
        return tpu__fail(d, TPU_EINVAL,
                         "the %s matrix-unit provider simulates a %ux%u array but chip '%s' "
                         "has %ux%u; use a chip whose MXU matches it",
                         name, p->rows, p->cols, cfg->name, cfg->mxu_rows, cfg->mxu_cols);
    if (s->timing_only)
        return tpu__fail(d, TPU_EINVAL,
                         "the %s matrix-unit provider computes values, so it cannot run in "
                         "timing-only mode; turn timing_only off, or use the built-in matrix "
                         "unit for timing-only runs (its cycle counts are the same)",
                         name);
    const uint64_t need = (uint64_t)s->n_chips * cfg->cores_per_chip * cfg->mxu_per_core;
    if (p->n_units < need)
        return tpu__fail(d, TPU_EINVAL,
                         "the %s matrix-unit provider simulates %u matrix units but the device "
                         "has %llu (%u chips x %u cores x %u MXUs); make the provider with "
                         "one unit per MXU",
                         name, p->n_units, (unsigned long long)need, s->n_chips,
                         cfg->cores_per_chip, cfg->mxu_per_core);
    return 0;
}

/* ---- operands ------------------------------------------------------------------------- */

/* op(x) of a stored [rows][cols] buffer: element [i][j] of the (maybe transposed) view. */
struct view {
    const struct tpu__bufmem *b;
    bool trans;
};

static size_t view_index(const struct view *v, size_t i, size_t j)
{
    return v->trans ? j * v->b->cols + i : i * v->b->cols + j;
}

/* The bf16 value entering the array: f32 rounded to nearest even, bf16 as it is. */
static tpu_bf16 view_bf16(const struct view *v, size_t i, size_t j)
{
    const size_t x = view_index(v, i, j);
    if (v->b->dtype == TPU_F32)
        return tpu_bf16_from_f32(((const float *)v->b->data)[x]);
    return ((const tpu_bf16 *)v->b->data)[x];
}

static int8_t view_int8(const struct view *v, size_t i, size_t j)
{
    return ((const int8_t *)v->b->data)[view_index(v, i, j)];
}

static bool is_float_dtype(enum tpu_dtype t)
{
    return t == TPU_F32 || t == TPU_BF16;
}

/* ---- the cut ---------------------------------------------------------------------------- */

struct plan {
    size_t R, C, m, k, n;
    size_t k_tiles, n_tiles, m_chunks, chunk_rows, units;
    size_t n_mxu;   /* MXUs of the core */
    size_t in_size; /* bytes of one operand element: 2 (bf16) or 1 (int8) */
    bool int8;
};

static size_t chunk_rows_of(const struct plan *pl, size_t mc)
{
    return mc + 1 < pl->m_chunks ? pl->chunk_rows : pl->m - mc * pl->chunk_rows;
}

/* Offsets, in elements, of the packed pieces in their regions. Chunks before mc are full. */
static size_t w_offset(const struct plan *pl, size_t kt, size_t nt)
{
    return (kt * pl->n_tiles + nt) * pl->R * pl->C;
}

static size_t in_offset(const struct plan *pl, size_t mc, size_t kt)
{
    return (mc * pl->chunk_rows * pl->k_tiles + kt * chunk_rows_of(pl, mc)) * pl->R;
}

static size_t out_offset(const struct plan *pl, size_t mc, size_t nt, size_t kt)
{
    return (mc * pl->chunk_rows * pl->n_tiles * pl->k_tiles +
            (nt * pl->k_tiles + kt) * chunk_rows_of(pl, mc)) *
           pl->C;
}

/* Working memory of one matmul, one allocation. */
struct work {
    void *mem;
    unsigned char *w, *in; /* packed weight tiles, packed input slices (bf16 or int8) */
    void *out;             /* column outputs: float or int32_t */
    uint64_t *m_rows;      /* [tiles]: the sequences, MXU after MXU */
    /* [tiles] each: the tiles' pieces, for the dtype in use (the other three are NULL) */
    const tpu_bf16 **w_bf16, **in_bf16;
    float **out_f32;
    const int8_t **w_int8, **in_int8;
    int32_t **out_i32;
    size_t *first, *count; /* [n_mxu]: each MXU's segment of the arrays above */
};

/* a * b * c into *out; false on overflow. */
static bool mul3(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    return tpu__mul_size(a, b, &ab) && tpu__mul_size(ab, c, out);
}

/* Sizes the pieces and allocates them; false when a size overflows or memory runs out. */
static bool work_alloc(const struct plan *pl, struct work *wk)
{
    /* k_tiles * n_tiles, R * C and R * in_size fit: k, n, R and C are below 2^32 */
    size_t sz[9], mk, tiles;
    if (!mul3(pl->k_tiles * pl->n_tiles, pl->R * pl->C, pl->in_size, &sz[0]) ||
        !mul3(pl->m, pl->k_tiles, pl->R * pl->in_size, &sz[1]) ||
        !mul3(pl->m, pl->k_tiles, pl->n_tiles, &mk) || !mul3(mk, pl->C, 4, &sz[2]) ||
        !tpu__mul_size(pl->units, pl->k_tiles, &tiles) ||
        !tpu__mul_size(tiles, sizeof *wk->m_rows, &sz[3]) ||
        !tpu__mul_size(tiles, sizeof(void *), &sz[4]))
        return false;
    sz[5] = sz[6] = sz[4];
    sz[7] = sz[8] = pl->n_mxu * sizeof(size_t);
    size_t off[sizeof sz / sizeof sz[0]], total = 0;
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        off[i] = total;
        size_t rounded = (sz[i] + 63) / 64 * 64;
        if (rounded < sz[i] || total > SIZE_MAX - rounded)
            return false;
        total += rounded;
    }
    unsigned char *mem = malloc(total ? total : 1);
    if (!mem)
        return false;
    wk->mem = mem;
    wk->w = mem + off[0];
    wk->in = mem + off[1];
    wk->out = mem + off[2];
    wk->m_rows = (uint64_t *)(void *)(mem + off[3]);
    if (pl->int8) {
        wk->w_int8 = (const int8_t **)(void *)(mem + off[4]);
        wk->in_int8 = (const int8_t **)(void *)(mem + off[5]);
        wk->out_i32 = (int32_t **)(void *)(mem + off[6]);
    } else {
        wk->w_bf16 = (const tpu_bf16 **)(void *)(mem + off[4]);
        wk->in_bf16 = (const tpu_bf16 **)(void *)(mem + off[5]);
        wk->out_f32 = (float **)(void *)(mem + off[6]);
    }
    wk->first = (size_t *)(void *)(mem + off[7]);
    wk->count = (size_t *)(void *)(mem + off[8]);
    return true;
}

/* Packs the weight tiles of op(b) and the input slices of op(a), zero-padded. */
static void pack(const struct plan *pl, const struct view *a, const struct view *b,
                 struct work *wk)
{
    const size_t R = pl->R, C = pl->C;
    for (size_t kt = 0; kt < pl->k_tiles; kt++)
        for (size_t nt = 0; nt < pl->n_tiles; nt++) {
            const size_t base = w_offset(pl, kt, nt);
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < C; j++) {
                    const size_t kk = kt * R + i, col = nt * C + j, x = base + i * C + j;
                    const bool in = kk < pl->k && col < pl->n;
                    if (pl->int8)
                        ((int8_t *)wk->w)[x] = in ? view_int8(b, kk, col) : 0;
                    else
                        ((tpu_bf16 *)(void *)wk->w)[x] =
                            in ? view_bf16(b, kk, col) : (tpu_bf16){0};
                }
        }
    for (size_t mc = 0; mc < pl->m_chunks; mc++)
        for (size_t kt = 0; kt < pl->k_tiles; kt++) {
            const size_t base = in_offset(pl, mc, kt), rows = chunk_rows_of(pl, mc);
            for (size_t r = 0; r < rows; r++)
                for (size_t i = 0; i < R; i++) {
                    const size_t row = mc * pl->chunk_rows + r, kk = kt * R + i;
                    const size_t x = base + r * R + i;
                    if (pl->int8)
                        ((int8_t *)wk->in)[x] = kk < pl->k ? view_int8(a, row, kk) : 0;
                    else
                        ((tpu_bf16 *)(void *)wk->in)[x] =
                            kk < pl->k ? view_bf16(a, row, kk) : (tpu_bf16){0};
                }
        }
}

/* Deals the units to the MXUs: MXU x's sequence is its units (u % n_mxu == x) in order,
 * each unit's K tiles in order. */
static void deal(const struct plan *pl, struct work *wk)
{
    size_t t = 0;
    for (size_t x = 0; x < pl->n_mxu; x++) {
        wk->first[x] = t;
        for (size_t u = x; u < pl->units; u += pl->n_mxu) {
            const size_t mc = u / pl->n_tiles, nt = u % pl->n_tiles;
            for (size_t kt = 0; kt < pl->k_tiles; kt++, t++) {
                wk->m_rows[t] = chunk_rows_of(pl, mc);
                if (pl->int8) {
                    wk->w_int8[t] = (const int8_t *)wk->w + w_offset(pl, kt, nt);
                    wk->in_int8[t] = (const int8_t *)wk->in + in_offset(pl, mc, kt);
                    wk->out_i32[t] = (int32_t *)wk->out + out_offset(pl, mc, nt, kt);
                } else {
                    wk->w_bf16[t] = (const tpu_bf16 *)(void *)wk->w + w_offset(pl, kt, nt);
                    wk->in_bf16[t] = (const tpu_bf16 *)(void *)wk->in + in_offset(pl, mc, kt);
                    wk->out_f32[t] = (float *)wk->out + out_offset(pl, mc, nt, kt);
                }
            }
        }
        wk->count[x] = t - wk->first[x];
    }
}

/* Adds the column outputs into y in K order (see the top of the file). */
static void accumulate_into(const struct plan *pl, const struct work *wk, void *y, bool acc_in)
{
    const float canon = tpu_f32_from_bits(TPU_F32_CANONICAL_NAN_BITS);
    for (size_t mc = 0; mc < pl->m_chunks; mc++)
        for (size_t nt = 0; nt < pl->n_tiles; nt++) {
            const size_t rows = chunk_rows_of(pl, mc);
            for (size_t r = 0; r < rows; r++)
                for (size_t j = 0; j < pl->C && nt * pl->C + j < pl->n; j++) {
                    const size_t yi = (mc * pl->chunk_rows + r) * pl->n + nt * pl->C + j;
                    const size_t oi = r * pl->C + j;
                    if (pl->int8) {
                        const int32_t *o = wk->out;
                        uint32_t s = acc_in ? (uint32_t)((int32_t *)y)[yi] : 0u;
                        for (size_t kt = 0; kt < pl->k_tiles; kt++)
                            s += (uint32_t)o[out_offset(pl, mc, nt, kt) + oi];
                        ((int32_t *)y)[yi] = (int32_t)s;
                    } else {
                        const float *o = wk->out;
                        float s = acc_in ? ((float *)y)[yi] : 0.0f;
                        for (size_t kt = 0; kt < pl->k_tiles; kt++) {
                            const float t = o[out_offset(pl, mc, nt, kt) + oi];
                            s = kt == 0 && !acc_in ? t : s + t;
                        }
                        ((float *)y)[yi] = isnan(s) ? canon : s;
                    }
                }
        }
}

/* The checks before a matmul on the provider: ops.c's operand checks with its messages,
 * then what the provider needs (one pass, a non-empty array, enough units for the core). */
static int check_matmul(const struct tpu_mxu_provider *p, const struct tpu_chip_config *cfg,
                        uint32_t core, const struct tpu_op *op, const struct tpu__bufmem *bufs,
                        const struct plan *pl, struct tpu_diag *d)
{
    const char *name = p->name ? p->name : "external";
    const struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *a = &bufs[op->in[0]], *b = &bufs[op->in[1]];
    const bool int8 = pl->int8;
    const size_t kb = op->attrs.trans_b ? b->cols : b->rows;
    /* the operand checks of ops.c, with its messages */
    if (!int8 && !(is_float_dtype(a->dtype) && is_float_dtype(b->dtype)))
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: operands a (%s) and b (%s) do not go together; use int8 "
                         "with int8 (int32 result) or f32/bf16 with f32/bf16 (f32 result)",
                         tpu_dtype_name(a->dtype), tpu_dtype_name(b->dtype));
    if (pl->k != kb)
        return tpu__fail(d, TPU_ESHAPE,
                         "matmul: op(a) is [%zu][%zu] and op(b) is [%zu][%zu]; the inner "
                         "dimensions must agree",
                         pl->m, pl->k, kb, pl->n);
    int rc = tpu__ops_check_buf(d, op, "y", y, int8 ? TPU_INT32 : TPU_F32,
                                (uint32_t)pl->m, (uint32_t)pl->n);
    if (rc)
        return rc;
    if ((a->data == NULL && pl->m * pl->k != 0) || (b->data == NULL && pl->k * pl->n != 0))
        return tpu__fail(d, TPU_EINVAL, "matmul: an input operand has no memory");
    if (!int8 && (a->dtype == TPU_F32 || b->dtype == TPU_F32)) {
        const unsigned passes = op->attrs.passes;
        if (passes != 1 && passes != 3 && passes != 6)
            return tpu__fail(d, TPU_EINVAL,
                             "matmul: passes is %u; an f32 matmul runs in 1 (bf16 inputs), "
                             "3 or 6 bf16 passes",
                             passes);
        if (passes != 1)
            return tpu__fail(d, TPU_EUNSUPPORTED,
                             "matmul: the %s matrix unit runs one-pass matmuls only (bf16 "
                             "inputs), but this f32 matmul asks for %u bf16 passes; use passes "
                             "1 (e.g. --passes 1) or the native backend",
                             name, passes);
    }
    if (pl->R == 0 || pl->C == 0 || pl->n_mxu == 0 || cfg->accumulator_rows == 0)
        return tpu__fail(d, TPU_EINVAL,
                         "matmul: the %s matrix unit is %zux%zu with %zu per core and %u "
                         "accumulator rows; every one must be at least 1",
                         name, pl->R, pl->C, pl->n_mxu, cfg->accumulator_rows);
    const uint64_t first_unit = (uint64_t)core * pl->n_mxu;
    if (first_unit + pl->n_mxu > p->n_units)
        return tpu__fail(d, TPU_EINVAL,
                         "matmul: core %u uses matrix units %llu to %llu but the %s provider "
                         "simulates %u; make it with one unit per MXU of the device",
                         core, (unsigned long long)first_unit,
                         (unsigned long long)(first_unit + pl->n_mxu - 1), name, p->n_units);
    return 0;
}

/* Runs each matrix unit's share of the tiles (deal) on the provider; *longest gets the
 * cycles of the busiest unit. */
static int run_units(const struct tpu_mxu_provider *p, const struct plan *pl,
                     const struct work *wk, uint64_t first_unit, uint64_t *longest,
                     struct tpu_diag *d)
{
    const bool int8 = pl->int8;
    int rc = 0;
    *longest = 0;
    for (size_t x = 0; x < pl->n_mxu && rc == 0; x++) {
        if (wk->count[x] == 0)
            continue;
        const size_t f = wk->first[x];
        struct tpu_mxu_seq seq = {
            .dtype = int8 ? TPU_INT8 : TPU_BF16,
            .n_tiles = wk->count[x],
            .m_rows = wk->m_rows + f,
        };
        if (int8) {
            seq.w_int8 = wk->w_int8 + f;
            seq.in_int8 = wk->in_int8 + f;
            seq.out_i32 = wk->out_i32 + f;
        } else {
            seq.w_bf16 = wk->w_bf16 + f;
            seq.in_bf16 = wk->in_bf16 + f;
            seq.out_f32 = wk->out_f32 + f;
        }
        uint64_t cyc = 0;
        rc = p->run(p->ctx, (uint32_t)(first_unit + x), &seq, &cyc, d);
        *longest = tpu__max_u64(*longest, cyc);
    }
    return rc;
}

/* ---- the op ----------------------------------------------------------------------------- */

/* A matmul op on the provider (the cut at the top of the file). */
static int provider_gemm(const struct tpu_mxu_provider *p, const struct tpu_chip_config *cfg,
                         uint32_t core, const struct tpu_op *op, struct tpu__bufmem *bufs,
                         uint64_t *cycles, struct tpu_diag *d)
{
    const char *name = p->name ? p->name : "external";
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *a = &bufs[op->in[0]], *b = &bufs[op->in[1]];
    const struct view va = {a, op->attrs.trans_a}, vb = {b, op->attrs.trans_b};
    const bool int8 = a->dtype == TPU_INT8 && b->dtype == TPU_INT8;
    struct plan pl = {
        .R = p->rows,
        .C = p->cols,
        .m = va.trans ? a->cols : a->rows,
        .k = va.trans ? a->rows : a->cols,
        .n = vb.trans ? b->rows : b->cols,
        .n_mxu = cfg->mxu_per_core,
        .in_size = int8 ? 1 : 2,
        .int8 = int8,
    };

    int rc = check_matmul(p, cfg, core, op, bufs, &pl, d);
    if (rc)
        return rc;
    const uint64_t first_unit = (uint64_t)core * pl.n_mxu;
    if (pl.m == 0 || pl.n == 0)
        return 0;

    pl.k_tiles = (size_t)tpu__ceil_div_u64(pl.k, pl.R);
    pl.n_tiles = (size_t)tpu__ceil_div_u64(pl.n, pl.C);
    pl.m_chunks = (size_t)tpu__ceil_div_u64(pl.m, cfg->accumulator_rows);
    pl.chunk_rows = pl.m < cfg->accumulator_rows ? pl.m : cfg->accumulator_rows;
    pl.units = pl.m_chunks * pl.n_tiles;

    struct work wk = {0};
    if (!work_alloc(&pl, &wk))
        return tpu__fail(d, TPU_ENOMEM,
                         "matmul: out of memory for the tiles of a [%zu][%zu] x [%zu][%zu] "
                         "product on the %s matrix unit",
                         pl.m, pl.k, pl.k, pl.n, name);
    pack(&pl, &va, &vb, &wk);
    deal(&pl, &wk);

    uint64_t longest = 0;
    rc = run_units(p, &pl, &wk, first_unit, &longest, d);
    if (rc == 0) {
        accumulate_into(&pl, &wk, y->data, op->attrs.accumulate);
        *cycles = longest;
    }
    free(wk.mem);
    return rc;
}

/* A conv2d op on the provider: its GEMM (ops_conv.c, sim/chip/timing.c's conv_gemm) as a
 * matmul on the provider, with the patches im2col(x) formed before it (conv2d,
 * conv2d_grad_filter) or the product's col2im after it (conv2d_grad_input), in memory of its
 * own. The values are the native op's bit for bit: the same patches, the same one-pass
 * product (a bf16 GEMM is exact to mxu.h's order), the same col2im. A row-partitioned
 * window (parts > 1) runs as ops_conv.c runs it on logical core `part` of the replica: the
 * partitioned patches, conv2d's padding output rows set to 0 after the GEMM, and
 * conv2d_grad_filter's dy copied with its padding rows 0. */
static int provider_conv(const struct tpu_mxu_provider *p, const struct tpu_chip_config *cfg,
                         uint32_t core, uint32_t part, const struct tpu_op *op,
                         struct tpu__bufmem *bufs, uint64_t *cycles, struct tpu_diag *d)
{
    const char *name = p->name ? p->name : "external";
    const char *opname = tpu_opcode_name(op->code);
    struct tpu__conv_gemm cg;
    int rc = tpu__ops_conv_check(op, part, bufs, &cg, d);
    if (rc)
        return rc;
    struct tpu__bufmem *out = &bufs[op->out[0]];
    const struct tpu__bufmem *in0 = &bufs[op->in[0]], *in1 = &bufs[op->in[1]];
    if ((in0->dtype == TPU_F32 || in1->dtype == TPU_F32) && op->attrs.passes != 1)
        return tpu__fail(d, TPU_EUNSUPPORTED,
                         "%s: the %s matrix unit runs one-pass products only (bf16 inputs), "
                         "but this f32 convolution asks for %u bf16 passes; use passes 1 "
                         "(e.g. --passes 1) or the native backend",
                         opname, name, (unsigned)op->attrs.passes);
    /* a row-partitioned grad_filter multiplies a copy of dy whose padding rows are 0, as
     * ops_conv.c does; after the patches */
    const bool pad_rows = cg.g.parts > 1 && cg.g.oy0 + cg.g.hos > cg.g.ho;
    const bool dy_copy = pad_rows && op->code == TPU_OP_CONV2D_GRAD_FILTER;
    const size_t dy_at = (cg.bytes + 15) / 16 * 16;
    const size_t dy_row = cg.f * tpu_dtype_bytes(in1->dtype);
    size_t total = cg.bytes + 1;
    if (dy_copy && (!tpu__mul_size(cg.m, dy_row, &total) || (total += dy_at) < dy_at))
        return tpu__fail(d, TPU_ENOMEM, "%s: the copy of dy [%zu][%zu] does not fit in memory",
                         opname, cg.m, cg.f);
    void *cols = malloc(total);
    if (!cols)
        return tpu__fail(d, TPU_ENOMEM, "%s: out of memory for the [%zu][%zu] patch matrix "
                         "on the %s matrix unit", opname, cg.m, cg.kc, name);
    /* the GEMM as a matmul over three buffers: y = a * b */
    struct tpu__bufmem gb[3];
    struct tpu_op mm;
    tpu_op_init(&mm, TPU_OP_MATMUL);
    mm.out[0] = 0, mm.in[0] = 1, mm.in[1] = 2;
    const struct tpu__bufmem patches = {cols, in0->dtype, (uint32_t)cg.m, (uint32_t)cg.kc};
    switch (op->code) {
    case TPU_OP_CONV2D: /* y = patches * w */
        tpu__win_im2col(&cg.g, in0->data, cg.esize, cols);
        gb[0] = *out, gb[1] = patches, gb[2] = *in1;
        break;
    case TPU_OP_CONV2D_GRAD_INPUT: /* dcols = dy * w^T, then dx = col2im(dcols) */
        gb[0] = (struct tpu__bufmem){cols, TPU_F32, (uint32_t)cg.m, (uint32_t)cg.kc};
        gb[1] = *in0, gb[2] = *in1;
        mm.attrs.trans_b = true;
        break;
    default: /* conv2d_grad_filter: dw = patches^T * dy (or dw += ...) */
        tpu__win_im2col(&cg.g, in0->data, cg.esize, cols);
        gb[0] = *out, gb[1] = patches, gb[2] = *in1;
        if (dy_copy) {
            tpu__conv_copy_real_rows(&cg.g, in1->data, dy_row, (unsigned char *)cols + dy_at);
            gb[2].data = (unsigned char *)cols + dy_at;
        }
        mm.attrs.trans_a = true;
        mm.attrs.accumulate = op->attrs.accumulate;
        break;
    }
    rc = provider_gemm(p, cfg, core, &mm, gb, cycles, d);
    if (rc == 0 && op->code == TPU_OP_CONV2D_GRAD_INPUT)
        tpu__win_col2im(&cg.g, cols, out->data);
    if (rc == 0 && op->code == TPU_OP_CONV2D && pad_rows)
        tpu__conv_zero_pad_rows(&cg.g, out->data, cg.f);
    free(cols);
    return rc;
}

int tpu__provider_matmul(const struct tpu_mxu_provider *p, const struct tpu_chip_config *cfg,
                         uint32_t core, uint32_t part, const struct tpu_op *op,
                         struct tpu__bufmem *bufs, uint64_t *cycles, struct tpu_diag *d)
{
    *cycles = 0;
    const char *name = p->name ? p->name : "external";
    switch (op->code) {
    case TPU_OP_MATMUL:
        return provider_gemm(p, cfg, core, op, bufs, cycles, d);
    case TPU_OP_CONV2D:
    case TPU_OP_CONV2D_GRAD_INPUT:
    case TPU_OP_CONV2D_GRAD_FILTER:
        return provider_conv(p, cfg, core, part, op, bufs, cycles, d);
    default: /* a provider runs weight tiles of the matrix unit's products only */
        return tpu__fail(d, TPU_EUNSUPPORTED, "%s matrix unit: %s runs on the built-in matrix "
                         "unit only; open the device without settings.mxu",
                         name, tpu_opcode_name(op->code));
    }
}
