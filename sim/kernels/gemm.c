/* Whole GEMMs on the matrix unit's numerics: fast, multi-threaded, and bit-exact to the
 * array's accumulation order (include/tpusim/mxu.h, NUMERICS). This file holds the public
 * entry points, the internal tpu__gemm_ex (operands as stored: f32 or bf16, transposed or
 * not), argument checks, the blocking driver, the threads, the portable C kernels, the fp32
 * multi-pass GEMM and the scratch arenas (scratch.h); the x86 kernels are in gemm_avx512.c
 * and gemm_avx2.c. It computes values only: cycle counts are in mxu_timing.c, and the
 * per-tile definition the tests compare against is in mxu_tile.c.
 *
 * Packing. The packers convert each stored element to the bf16 value that enters the array
 * (as is, rounded from f32, or a part of the f32 split) on the way into the packed blocks,
 * reading transposed operands in place; the exponent statistics below are taken on those
 * bf16 values, so they are exactly the statistics of the matrices the array sees.
 *
 * Order. For every output (m, n) and every K-tile of R = tile_rows rows the kernels keep one
 * fp32 column sum t in a register: t = +0, then t = t + a[m][k] * w[k][n] for the tile's k in
 * increasing order, then acc = t (first tile, not accumulating) or acc = acc + t. That is a
 * BLAS micro-kernel (broadcast A, vector of B, one accumulator lane per output, sequential
 * in k) whose K loop is cut at tile boundaries, so the fast kernels follow the definition
 * operation for operation; blocking, packing and threads only choose which outputs are
 * computed when, never the order of the operations that make one output.
 *
 * FMA. The FMA kernel computes t = fma(a, w, t) = RN(t + a*w exactly), which equals the
 * definition RN(t + RN(a*w)) whenever RN(a*w) = a*w (IEEE gives an exact zero sum of fma the
 * sign that the same addition would have, so even the sign of zero agrees). Write a nonzero
 * finite bf16 as s * 2^(E-7) with an integer significand 1 <= s <= 255 and E = max(field, 1) -
 * 127 (so a subnormal has E = -126 and s < 128). A product is then P * 2^(Ea+Eb-14) with
 * P = sa*sb <= 65025 < 2^16. It is an fp32 value (exact) when
 *   - it is an integer multiple of 2^-149, the smallest subnormal: Ea + Eb - 14 >= -149, i.e.
 *     Ea + Eb >= -135 (P < 2^16 <= 2^24, so the significand always fits); and
 *   - it does not exceed FLT_MAX = (2^24-1) * 2^104: with Ea + Eb <= 126 the product is at
 *     most 65025 * 2^112 = 16646400 * 2^104 < (2^24-1) * 2^104. At Ea + Eb = 127 it can
 *     overflow (1.99 * 1.99 * 2^127).
 * Zero operands give exact zeros. Inf and NaN would also give equal results (IEEE rules are
 * the same for fma and mul+add, NaN payloads are canonicalised) but are sent to the
 * multiply + add kernel anyway, so the argument needs no case for them. The packers record,
 * per packed block, the largest exponent field (255 if a special is present) and the smallest
 * over nonzero values; a pair of blocks runs the FMA kernel only if
 *   maxA + maxB <= 126 + 254,  minA + minB >= -135 + 254,  and neither holds Inf or NaN
 * (in biased fields), and the multiply + add kernel otherwise. Both give the same bits.
 *
 * NaN. A NaN column sum makes acc NaN, and acc + x is NaN for every x, so once any step
 * produces a NaN the output is NaN whatever payloads were carried; Inf - Inf and 0 * Inf give
 * NaN in both kernels alike. Replacing NaNs by the canonical NaN once, when an output is
 * final (the micro-kernel's store after the last K chunk), therefore gives the same bits as
 * replacing them at every array and accumulator output.
 *
 * Edge cases. m == 0 or n == 0: nothing to do (pointers are not read). k == 0: there are no
 * tiles; Y becomes +0 (not accumulating) or keeps its values with NaNs made canonical, as
 * every value leaving the accumulators is. Threads: the output is split statically into
 * rectangles of whole micro-tiles, one per thread, so the result does not depend on the
 * thread count; at most n_threads threads run (fewer when the problem is small). On an error
 * after work has started (TPU_ETHREAD) Y is left partly written. */
#include <math.h>
#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mxu.h"
#include "gemm_int.h"
#include "util.h"

#if defined(FLT_EVAL_METHOD) && (FLT_EVAL_METHOD == 1 || FLT_EVAL_METHOD == 2)
#error "the portable kernels need float arithmetic evaluated in float (FLT_EVAL_METHOD 0)"
#endif

const char *tpu_gemm_dtype_name(enum tpu_dtype t)
{
    switch (t) {
    case TPU_BF16:
        return "bf16";
    case TPU_INT8:
        return "int8";
    case TPU_F32:
        return "fp32";
    case TPU_INT32:
        break;
    }
    return "unknown";
}

/* ---- blocking parameters --------------------------------------------------------------- */

/* K values per packed chunk for bf16: whole tiles adding up to at most this, or one tile if
 * a tile is longer (a tile's column sum lives in registers, so a chunk never splits a tile). */
#define GEMM_KC_BF16 384
/* K values per chunk for int8 (even: int16 pairs never straddle chunks). */
#define GEMM_KC_INT8 1024
/* Target sizes of the packed A block (L2) and B block (L2/L3), bytes. */
#define GEMM_A_BLOCK_BYTES (256u * 1024u)
#define GEMM_B_BLOCK_BYTES (1536u * 1024u)
/* At most this many threads are used, whatever n_threads asks for. */
#define GEMM_MAX_THREADS 256u
/* Thread planning costs, in multiply-adds: converting one element while packing, and
 * starting one thread. */
#define GEMM_PACK_COST 8.0
#define GEMM_THREAD_COST 2.0e6
#define GEMM_ALIGN_BYTES 64u
/* Results at least this large are written past the caches once final (TPU__MICRO_STREAM):
 * they would not stay in the per-core caches anyway, and writing them there first costs a
 * read of every line. */
#define GEMM_STREAM_BYTES (2u * 1024u * 1024u)
/* The cost of a row in the AVX2 kernel's 4-row micro-tiles, in sixths of a row of its 6-row
 * ones (short_tiles_pay): measured on M = 8 and M = 128 products of the MLP's shapes. */
#define GEMM_SHORT_ROW_COST 7u

/* ---- portable C kernels ------------------------------------------------------------------ */

enum { C_MR = 4, C_NR = 16 };

/* Adds one packed value (the bits of an fp32 holding a bf16) to the exponent statistics. */
static void stats_one(uint32_t u, unsigned *maxf, unsigned *minf)
{
    unsigned f = (u >> 23) & 0xFFu;
    if (f > *maxf)
        *maxf = f;
    if ((u & 0x7FFF0000u) != 0) {
        unsigned g = f == 0 ? 1u : f;
        if (g < *minf)
            *minf = g;
    }
}

/* Index of the block's element (r, c) in its source (gemm_int.h, struct tpu__pack_src). */
static size_t src_index(const struct tpu__pack_src *s, size_t r, size_t c)
{
    return s->trans ? c * s->ld + r : r * s->ld + c;
}

static void pack_a_bf16_c(const struct tpu__pack_src *s, size_t mc, size_t kc, void *dst,
                          size_t lda, struct tpu__exp_stats *st)
{
    float *ap = dst;
    unsigned maxf = 0, minf = 255;
    for (size_t i = 0; i < mc; i++)
        for (size_t k = 0; k < kc; k++) {
            uint32_t u = tpu__pack_conv_one(s->p, src_index(s, i, k), s->conv);
            stats_one(u, &maxf, &minf);
            ap[i * lda + k] = tpu_f32_from_bits(u);
        }
    st->max_field = maxf;
    st->min_nonzero_field = minf;
}

static void pack_b_bf16_c(const struct tpu__pack_src *s, size_t kc, size_t nc, void *dst,
                          struct tpu__exp_stats *st)
{
    float *bp = dst;
    unsigned maxf = 0, minf = 255;
    for (size_t j0 = 0; j0 < nc; j0 += C_NR) {
        size_t w = nc - j0 < C_NR ? nc - j0 : C_NR;
        for (size_t k = 0; k < kc; k++) {
            for (size_t j = 0; j < C_NR; j++) {
                uint32_t u = j < w ? tpu__pack_conv_one(s->p, src_index(s, k, j0 + j), s->conv)
                                   : 0u;
                stats_one(u, &maxf, &minf);
                bp[j] = tpu_f32_from_bits(u);
            }
            bp += C_NR;
        }
    }
    st->max_field = maxf;
    st->min_nonzero_field = minf;
}

/* Separate multiply and add: the definition itself (no FMA: -ffp-contract=off). */
static void micro_bf16_c(size_t kc, size_t tile, const void *ap_, size_t lda, const void *bp_,
                         void *c_, size_t ldc, unsigned flags)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    const bool canon = flags & TPU__MICRO_CANON_NAN;
    const float canon_nan = tpu_f32_from_bits(TPU_F32_CANONICAL_NAN_BITS);
    const float *ap = ap_;
    const float *bp = bp_;
    float *c = c_;
    for (size_t k0 = 0; k0 < kc; k0 += tile) {
        size_t len = kc - k0 < tile ? kc - k0 : tile;
        float t[C_MR][C_NR];
        for (int i = 0; i < C_MR; i++)
            for (int j = 0; j < C_NR; j++)
                t[i][j] = 0.0f;
        for (size_t k = k0; k < k0 + len; k++) {
            const float *brow = bp + k * C_NR;
            for (int i = 0; i < C_MR; i++) {
                float ai = ap[(size_t)i * lda + k];
                for (int j = 0; j < C_NR; j++) {
                    float p = ai * brow[j];
                    t[i][j] = t[i][j] + p;
                }
            }
        }
        for (int i = 0; i < C_MR; i++)
            for (int j = 0; j < C_NR; j++) {
                float *cij = &c[(size_t)i * ldc + (size_t)j];
                float v = store_first && k0 == 0 ? t[i][j] : *cij + t[i][j];
                *cij = canon && k0 + len == kc && isnan(v) ? canon_nan : v;
            }
    }
}

static const struct tpu__gemm_kernel gemm_bf16_c = {
    .mr = C_MR,
    .nr = C_NR,
    .k_per_word = 1,
    .pack_a = pack_a_bf16_c,
    .pack_b = pack_b_bf16_c,
    .micro = NULL, /* no FMA kernel in portable C (fmaf may be a slow library call) */
    .micro_plain = micro_bf16_c,
};

static void pack_a_int8_c(const struct tpu__pack_src *s, size_t mc, size_t kc, void *dst,
                          size_t lda, struct tpu__exp_stats *st)
{
    const int8_t *a = s->p;
    const size_t ld = s->ld;
    int32_t *ap = dst;
    (void)st;
    for (size_t i = 0; i < mc; i++)
        for (size_t k = 0; k < kc; k++)
            ap[i * lda + k] = a[i * ld + k];
}

static void pack_b_int8_c(const struct tpu__pack_src *s, size_t kc, size_t nc, void *dst,
                          struct tpu__exp_stats *st)
{
    const int8_t *b = s->p;
    const size_t ld = s->ld;
    int32_t *bp = dst;
    (void)st;
    for (size_t j0 = 0; j0 < nc; j0 += C_NR)
        for (size_t k = 0; k < kc; k++) {
            for (size_t j = 0; j < C_NR; j++)
                bp[j] = j0 + j < nc ? b[k * ld + j0 + j] : 0;
            bp += C_NR;
        }
}

/* Two's-complement int32 from its bit pattern, without implementation-defined conversion. */
static int32_t i32_from_u32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}

/* Integer sums wrap modulo 2^32 and do not depend on order: unsigned arithmetic. */
static void micro_int8_c(size_t kc, size_t tile, const void *ap_, size_t lda, const void *bp_,
                         void *c_, size_t ldc, unsigned flags)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    const int32_t *ap = ap_;
    const int32_t *bp = bp_;
    int32_t *c = c_;
    uint32_t t[C_MR][C_NR] = {{0}};
    (void)tile;
    for (size_t k = 0; k < kc; k++)
        for (int i = 0; i < C_MR; i++) {
            uint32_t ai = (uint32_t)ap[(size_t)i * lda + k];
            for (int j = 0; j < C_NR; j++)
                t[i][j] += ai * (uint32_t)bp[k * C_NR + (size_t)j];
        }
    for (int i = 0; i < C_MR; i++)
        for (int j = 0; j < C_NR; j++) {
            int32_t *cij = &c[(size_t)i * ldc + (size_t)j];
            *cij = i32_from_u32(store_first ? t[i][j] : (uint32_t)*cij + t[i][j]);
        }
}

static const struct tpu__gemm_kernel gemm_int8_c = {
    .mr = C_MR,
    .nr = C_NR,
    .k_per_word = 1,
    .pack_a = pack_a_int8_c,
    .pack_b = pack_b_int8_c,
    .micro = micro_int8_c,
    .micro_plain = NULL,
};

/* ---- instruction set selection ------------------------------------------------------------ */

bool tpu__gemm_isa_supported(enum tpu__gemm_isa isa)
{
    switch (isa) {
    case TPU__GEMM_ISA_AUTO:
    case TPU__GEMM_ISA_SCALAR:
        return true;
#if TPU__GEMM_HAVE_X86
    case TPU__GEMM_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TPU__GEMM_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#else
    case TPU__GEMM_ISA_AVX2:
    case TPU__GEMM_ISA_AVX512:
        return false;
#endif
    }
    return false;
}

static enum tpu__gemm_isa resolve_isa(enum tpu__gemm_isa want)
{
    if (want != TPU__GEMM_ISA_AUTO)
        return want;
    if (tpu__gemm_isa_supported(TPU__GEMM_ISA_AVX512))
        return TPU__GEMM_ISA_AVX512;
    if (tpu__gemm_isa_supported(TPU__GEMM_ISA_AVX2))
        return TPU__GEMM_ISA_AVX2;
    return TPU__GEMM_ISA_SCALAR;
}

static const struct tpu__gemm_kernel *kernel_for(enum tpu__gemm_isa isa, bool int8)
{
    switch (isa) {
#if TPU__GEMM_HAVE_X86
    case TPU__GEMM_ISA_AVX512:
        return int8 ? &tpu__gemm_int8_avx512 : &tpu__gemm_bf16_avx512;
    case TPU__GEMM_ISA_AVX2:
        return int8 ? &tpu__gemm_int8_avx2 : &tpu__gemm_bf16_avx2;
#endif
    default:
        return int8 ? &gemm_int8_c : &gemm_bf16_c;
    }
}

/* ---- the blocking driver ----------------------------------------------------------------- */

/* One operand as the driver reads it: the packers' source with the block offset still to be
 * added (block_src). */
struct gemm_operand_view {
    struct tpu__pack_src src; /* p: element (0, 0) of the whole operand */
    size_t elem_bytes;
};

/* Packed B blocks kept across GEMMs for a B operand the caller promised stable
 * (tpu__scratch_stable_b): a block is found by everything that fixes its packed words --
 * the operand's storage and generation, the kernel, the shape, the block's place. When a
 * promise names a storage with a new generation, that storage's blocks of other generations
 * are dropped (its values changed: they cannot be found again). At most BCACHE_MAX blocks
 * and BCACHE_BYTES bytes; when full it is emptied. Used by one thread (the arena's). */
enum { BCACHE_MAX = 64 };
#define BCACHE_BYTES ((size_t)16 << 20)
struct bcache_key {
    const void *data;
    uint64_t gen;
    const void *kern;
    size_t ld, elem_bytes, k, n, kc, pc, jc, kcur, ncur;
    int conv;
    bool trans;
};
struct bcache_entry {
    struct bcache_key key;
    struct tpu__exp_stats st;
    void *mem;
    size_t bytes;
};
struct bcache {
    const void *hint; /* the promised operand, or NULL */
    uint64_t hint_gen;
    size_t n, bytes;
    struct bcache_entry e[BCACHE_MAX];
};

/* One GEMM as the driver sees it. Read-only while the workers run. */
struct gemm_problem {
    const struct tpu__gemm_kernel *kern;
    struct gemm_operand_view a; /* element (i, k) of op(A) */
    struct gemm_operand_view b; /* element (k, j) of op(B) */
    unsigned char *y;       /* [m][n] 4-byte words */
    size_t m, k, n;
    size_t tile;  /* R; for int8 equal to kc (unused) */
    size_t kc;    /* K values per chunk */
    bool accumulate;
    bool is_bf16;
    enum tpu__gemm_fma fma;
    struct bcache *bc; /* B's blocks may come from / go to this cache, or NULL */
};

/* One thread's share: the output rectangle rows [m0, m1) x columns [n0, n1) and its own
 * packing buffers. Written only by its thread until joined. */
struct gemm_worker {
    const struct gemm_problem *p;
    size_t m0, m1, n0, n1;
    size_t mc, nc;     /* block sizes: rows of an A block, columns of a B block */
    size_t lda;        /* words per packed A row */
    void *abuf;        /* packed A block [round_up(mc, mr)][lda] */
    void *bbuf;        /* packed B block [round_up(nc, nr) / nr][kwords][nr] */
    void *ctmp;        /* [mr][nr] words: edge micro-tiles */
    size_t b_off, c_off, buf_bytes; /* the one block holding the three: offsets, size */
    uint64_t fma_blocks, plain_blocks;
    pthread_t thread;
    bool started;
};

static size_t round_up(size_t x, size_t to)
{
    return (x + to - 1) / to * to;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* The source of the block whose element (0, 0) is the operand's element (r0, c0). */
static struct tpu__pack_src block_src(const struct gemm_operand_view *v, size_t r0, size_t c0)
{
    struct tpu__pack_src s = v->src;
    if (s.conv != TPU__PACK_ZERO)
        s.p = (const unsigned char *)s.p +
              (s.trans ? c0 * s.ld + r0 : r0 * s.ld + c0) * v->elem_bytes;
    return s;
}

/* Exactness of the FMA kernel for a pair of blocks: see the file comment. */
static bool fma_exact(const struct tpu__exp_stats *sa, const struct tpu__exp_stats *sb)
{
    if (sa->max_field == 255 || sb->max_field == 255)
        return false;
    if (sa->max_field + sb->max_field > 126 + 254)
        return false;
    return sa->min_nonzero_field + sb->min_nonzero_field >= 254 - 135;
}

static void canonicalise_nans(float *y, size_t ldy, size_t rows, size_t cols)
{
    const float canon = tpu_f32_from_bits(TPU_F32_CANONICAL_NAN_BITS);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            float *v = &y[i * ldy + j];
            if (isnan(*v))
                *v = canon;
        }
}

static void bcache_clear(struct bcache *bc)
{
    for (size_t i = 0; i < bc->n; i++)
        free(bc->e[i].mem);
    bc->n = 0;
    bc->bytes = 0;
}

/* Drops the blocks of the storage at `data` packed from a generation other than `gen`: the
 * values there changed, so no GEMM will look them up again. */
static void bcache_drop_stale(struct bcache *bc, const void *data, uint64_t gen)
{
    size_t kept = 0;
    for (size_t i = 0; i < bc->n; i++) {
        if (bc->e[i].key.data == data && bc->e[i].key.gen != gen) {
            free(bc->e[i].mem);
            bc->bytes -= bc->e[i].bytes;
        } else {
            bc->e[kept++] = bc->e[i];
        }
    }
    bc->n = kept;
}

static struct bcache_key bcache_key_of(const struct gemm_problem *p, size_t pc, size_t jc,
                                       size_t kcur, size_t ncur)
{
    struct bcache_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: the padding too */
    k.data = p->b.src.p;
    k.gen = p->bc->hint_gen;
    k.kern = p->kern;
    k.ld = p->b.src.ld;
    k.elem_bytes = p->b.elem_bytes;
    k.k = p->k;
    k.n = p->n;
    k.kc = p->kc;
    k.pc = pc;
    k.jc = jc;
    k.kcur = kcur;
    k.ncur = ncur;
    k.conv = (int)p->b.src.conv;
    k.trans = p->b.src.trans;
    return k;
}

static const struct bcache_entry *bcache_find(const struct bcache *bc,
                                              const struct bcache_key *k)
{
    for (size_t i = 0; i < bc->n; i++)
        if (memcmp(&bc->e[i].key, k, sizeof *k) == 0)
            return &bc->e[i];
    return NULL;
}

/* Keeps a copy of a packed block (nothing when out of memory: it is only a cache). */
static void bcache_put(struct bcache *bc, const struct bcache_key *k, const void *packed,
                       size_t bytes, const struct tpu__exp_stats *st)
{
    if (bytes > BCACHE_BYTES / 4)
        return;
    if (bc->n == BCACHE_MAX || bc->bytes + bytes > BCACHE_BYTES)
        bcache_clear(bc);
    void *mem = aligned_alloc(GEMM_ALIGN_BYTES, round_up(bytes ? bytes : 1, GEMM_ALIGN_BYTES));
    if (!mem)
        return;
    memcpy(mem, packed, bytes);
    bc->e[bc->n++] = (struct bcache_entry){.key = *k, .st = *st, .mem = mem, .bytes = bytes};
    bc->bytes += bytes;
}

static void worker_run(struct gemm_worker *w)
{
    const struct gemm_problem *p = w->p;
    const struct tpu__gemm_kernel *kern = p->kern;
    const size_t mr = kern->mr, nr = kern->nr;
    struct tpu__exp_stats sa = {0, 255}, sb = {0, 255};

    /* The buffers are reused memory: give the lanes that only feed discarded outputs (the
     * edge tile's unused part) defined values. Padding rows of A are zeroed per block. */
    memset(w->ctmp, 0, mr * nr * 4);
    const bool can_stream = p->m * p->n * 4 >= GEMM_STREAM_BYTES &&
                            (uintptr_t)p->y % GEMM_ALIGN_BYTES == 0 && p->n % 16 == 0;
    for (size_t jc = w->n0; jc < w->n1; jc += w->nc) {
        size_t ncur = min_size(w->nc, w->n1 - jc);
        for (size_t pc = 0; pc < p->k; pc += p->kc) {
            size_t kcur = min_size(p->kc, p->k - pc);
            size_t kwords = (kcur + kern->k_per_word - 1) / kern->k_per_word;
            bool store_first = !p->accumulate && pc == 0;
            const bool last = pc + kcur == p->k;
            unsigned flags = (store_first ? TPU__MICRO_STORE_FIRST : 0u) |
                             (p->is_bf16 && last ? TPU__MICRO_CANON_NAN : 0u);
            const bool stream = can_stream && last;
            struct tpu__pack_src src = block_src(&p->b, pc, jc);
            const void *bblock = w->bbuf;
            if (p->bc) { /* a stable B: its packed block may be known already */
                const struct bcache_key key = bcache_key_of(p, pc, jc, kcur, ncur);
                const struct bcache_entry *hit = bcache_find(p->bc, &key);
                if (hit) {
                    bblock = hit->mem;
                    sb = hit->st;
                } else {
                    kern->pack_b(&src, kcur, ncur, w->bbuf, &sb);
                    bcache_put(p->bc, &key, w->bbuf, round_up(ncur, nr) / nr * kwords * nr * 4,
                               &sb);
                }
            } else {
                kern->pack_b(&src, kcur, ncur, w->bbuf, &sb);
            }
            for (size_t ic = w->m0; ic < w->m1; ic += w->mc) {
                size_t mcur = min_size(w->mc, w->m1 - ic);
                src = block_src(&p->a, ic, pc);
                if (mcur % mr != 0) /* its padding rows, in either panel layout */
                    memset((unsigned char *)w->abuf + (mcur - mcur % mr) * w->lda * 4, 0,
                           mr * w->lda * 4);
                kern->pack_a(&src, mcur, kcur, w->abuf, w->lda, &sa);
                void (*micro)(size_t, size_t, const void *, size_t, const void *, void *,
                              size_t, unsigned) = kern->micro;
                if (p->is_bf16) {
                    bool use_fma = kern->micro != NULL &&
                                   (p->fma == TPU__GEMM_FMA_ALWAYS ||
                                    (p->fma == TPU__GEMM_FMA_AUTO && fma_exact(&sa, &sb)));
                    micro = use_fma ? kern->micro : kern->micro_plain;
                    if (use_fma)
                        w->fma_blocks++;
                    else
                        w->plain_blocks++;
                }
                for (size_t jr = 0; jr < ncur; jr += nr) {
                    const unsigned char *bp =
                        (const unsigned char *)bblock + (jr / nr) * kwords * nr * 4;
                    size_t nw = min_size(nr, ncur - jr);
                    for (size_t ir = 0; ir < mcur; ir += mr) {
                        const unsigned char *ap =
                            (const unsigned char *)w->abuf + ir * w->lda * 4;
                        unsigned char *c = p->y + ((ic + ir) * p->n + jc + jr) * 4;
                        size_t mh = min_size(mr, mcur - ir);
                        /* the next micro-tile's C rows, unless streamed: fetched (for
                         * writing) while this one computes, so that its stores -- to memory
                         * not yet cached, often -- do not wait on memory */
                        if (!stream && ir + mr < mcur) {
                            size_t mn = min_size(mr, mcur - ir - mr);
                            for (size_t i = 0; i < mn; i++)
                                for (size_t off = 0; off < nw * 4; off += 64)
                                    __builtin_prefetch(c + (mr + i) * p->n * 4 + off, 1, 3);
                        }
                        if (mh == mr && nw == nr) {
                            micro(kcur, p->tile, ap, w->lda, bp, c, p->n,
                                  flags | (stream ? TPU__MICRO_STREAM : 0u));
                            continue;
                        }
                        /* edge micro-tile: run it on a full-size copy */
                        unsigned char *t = w->ctmp;
                        if (!store_first)
                            for (size_t i = 0; i < mh; i++)
                                memcpy(t + i * nr * 4, c + i * p->n * 4, nw * 4);
                        micro(kcur, p->tile, ap, w->lda, bp, t, nr, flags);
                        for (size_t i = 0; i < mh; i++)
                            memcpy(c + i * p->n * 4, t + i * nr * 4, nw * 4);
                    }
                }
            }
        }
    }
}

static void *worker_main(void *arg)
{
    worker_run(arg);
    return NULL;
}

/* Chooses a grid of tm x tn output rectangles (tm * tn <= max_threads) that minimises the
 * modelled time of the slowest thread: its multiply-adds, its packing (each thread packs the
 * A rows and B columns of its rectangle), and the cost of starting threads. */
static void plan_grid(const struct gemm_problem *p, unsigned max_threads, size_t *tm_out,
                      size_t *tn_out)
{
    size_t mb = (p->m + p->kern->mr - 1) / p->kern->mr;
    size_t nb = (p->n + p->kern->nr - 1) / p->kern->nr;
    size_t cap = max_threads < GEMM_MAX_THREADS ? max_threads : GEMM_MAX_THREADS;
    double best = 0;
    *tm_out = *tn_out = 1;
    for (size_t tm = 1; tm <= cap && tm <= mb; tm++)
        for (size_t tn = 1; tm * tn <= cap && tn <= nb; tn++) {
            double rows = (double)((mb + tm - 1) / tm * p->kern->mr);
            double cols = (double)((nb + tn - 1) / tn * p->kern->nr);
            double kk = (double)p->k;
            double cost = rows * cols * kk + (rows + cols) * kk * GEMM_PACK_COST +
                          (double)(tm * tn - 1) * GEMM_THREAD_COST;
            if ((tm == 1 && tn == 1) || cost < best) {
                best = cost;
                *tm_out = tm;
                *tn_out = tn;
            }
        }
}

/* Sizes one worker's blocks and buffers; false if a size overflows. */
static bool size_worker(struct gemm_worker *w)
{
    const struct gemm_problem *p = w->p;
    const size_t mr = p->kern->mr, nr = p->kern->nr, kpw = p->kern->k_per_word;
    size_t kwords = (p->kc + kpw - 1) / kpw;
    size_t rows = w->m1 - w->m0, cols = w->n1 - w->n0;
    /* pad rows to 16 words (64 bytes) plus 16 more so that rows do not alias in the cache */
    w->lda = round_up(kwords, 16) + 16;
    size_t row_bytes = w->lda * 4, panel_bytes = kwords * nr * 4;
    w->mc = GEMM_A_BLOCK_BYTES / row_bytes / mr * mr;
    if (w->mc < mr)
        w->mc = mr;
    if (w->mc > round_up(rows, mr))
        w->mc = round_up(rows, mr);
    w->nc = GEMM_B_BLOCK_BYTES / panel_bytes * nr;
    if (w->nc < nr)
        w->nc = nr;
    if (w->nc > round_up(cols, nr))
        w->nc = round_up(cols, nr);
    size_t a_bytes, b_bytes;
    if (!tpu__mul_size(w->mc, row_bytes, &a_bytes) ||
        !tpu__mul_size(w->nc / nr, panel_bytes, &b_bytes))
        return false;
    size_t c_bytes = mr * nr * 4;
    a_bytes = round_up(a_bytes, GEMM_ALIGN_BYTES);
    b_bytes = round_up(b_bytes, GEMM_ALIGN_BYTES);
    if (a_bytes > SIZE_MAX - b_bytes - c_bytes - GEMM_ALIGN_BYTES)
        return false;
    w->b_off = a_bytes;
    w->c_off = a_bytes + b_bytes;
    w->buf_bytes = round_up(a_bytes + b_bytes + c_bytes, GEMM_ALIGN_BYTES);
    return true;
}

static const struct tpu__gemm_opts default_opts = {TPU__GEMM_ISA_AUTO, TPU__GEMM_FMA_AUTO, 0};

/* Checks shared by the public GEMMs; 0 or TPU_EINVAL / TPU_EUNSUPPORTED. */
static int check_args(const void *a, const void *b, const void *y, size_t m, size_t k, size_t n,
                      uint32_t tile_rows, unsigned n_threads, const struct tpu__gemm_opts *o)
{
    size_t prod;
    if (tile_rows == 0 || n_threads == 0)
        return TPU_EINVAL;
    if (!tpu__mul_size(m, k, &prod) || !tpu__mul_size(k, n, &prod) ||
        !tpu__mul_size(m, n, &prod) || !tpu__mul_size(prod, 4, &prod))
        return TPU_EINVAL;
    if (m != 0 && n != 0 && (!y || (k != 0 && (!a || !b))))
        return TPU_EINVAL;
    if (!tpu__gemm_isa_supported(o->isa))
        return TPU_EUNSUPPORTED;
    return 0;
}

/* Splits the output among workers, gives them memory (from `scratch` when there is one) and
 * runs them. */
static int run_gemm(struct gemm_problem *p, unsigned n_threads, struct tpu__scratch *scratch,
                    const struct tpu__gemm_opts *o, struct tpu__gemm_report *report)
{
    size_t tm, tn;
    plan_grid(p, n_threads, &tm, &tn);
    const size_t nw = tm * tn;
    struct gemm_worker ws_local[4];
    struct gemm_worker *ws = ws_local;
    if (nw > sizeof ws_local / sizeof ws_local[0]) {
        ws = calloc(nw, sizeof *ws);
        if (!ws)
            return TPU_ENOMEM;
    } else {
        memset(ws_local, 0, sizeof ws_local);
    }
    size_t mb = (p->m + p->kern->mr - 1) / p->kern->mr;
    size_t nb = (p->n + p->kern->nr - 1) / p->kern->nr;
    size_t total_bytes = 0;
    int rc = 0;
    for (size_t i = 0; i < tm; i++)
        for (size_t j = 0; j < tn; j++) {
            struct gemm_worker *w = &ws[i * tn + j];
            w->p = p;
            w->m0 = min_size(mb * i / tm * p->kern->mr, p->m);
            w->m1 = min_size(mb * (i + 1) / tm * p->kern->mr, p->m);
            w->n0 = min_size(nb * j / tn * p->kern->nr, p->n);
            w->n1 = min_size(nb * (j + 1) / tn * p->kern->nr, p->n);
            if (!size_worker(w) || w->buf_bytes > SIZE_MAX - total_bytes) {
                rc = TPU_ENOMEM;
                continue;
            }
            total_bytes += w->buf_bytes;
        }
    if (rc == 0 && o->max_alloc_bytes != 0 && total_bytes > o->max_alloc_bytes)
        rc = TPU_ENOMEM;
    unsigned char *mem = NULL, *owned = NULL;
    if (rc == 0) {
        mem = scratch ? tpu__scratch_get(scratch, TPU__SCRATCH_GEMM, total_bytes)
                      : (owned = aligned_alloc(GEMM_ALIGN_BYTES, total_bytes));
        if (!mem)
            rc = TPU_ENOMEM;
    }
    /* one worker (the arena's thread alone) may use the arena's cache of packed B blocks */
    struct bcache *bc = scratch ? scratch->mem[TPU__SCRATCH_BCACHE] : NULL;
    p->bc = nw == 1 && p->is_bf16 && bc && bc->hint && bc->hint == p->b.src.p ? bc : NULL;
    if (rc == 0) {
        size_t off = 0;
        for (size_t i = 0; i < nw; i++) {
            ws[i].abuf = mem + off;
            ws[i].bbuf = mem + off + ws[i].b_off;
            ws[i].ctmp = mem + off + ws[i].c_off;
            off += ws[i].buf_bytes;
        }
        for (size_t i = 1; i < nw; i++) {
            if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) != 0) {
                rc = TPU_ETHREAD;
                break;
            }
            ws[i].started = true;
        }
        if (rc == 0)
            worker_run(&ws[0]);
        for (size_t i = 1; i < nw; i++)
            if (ws[i].started)
                pthread_join(ws[i].thread, NULL);
    }
    if (report) {
        report->threads_used = (unsigned)nw;
        report->fma_blocks = report->plain_blocks = 0;
        for (size_t i = 0; i < nw; i++) {
            report->fma_blocks += ws[i].fma_blocks;
            report->plain_blocks += ws[i].plain_blocks;
        }
    }
    free(owned);
    if (ws != ws_local)
        free(ws);
    return rc;
}

/* The view of an operand stored with `elem_bytes` per element, of `cols` elements per stored
 * row. */
static struct gemm_operand_view view(const void *data, size_t elem_bytes, size_t cols,
                                     bool trans, enum tpu__pack_conv conv)
{
    struct gemm_operand_view v = {{data, cols, trans, conv}, elem_bytes};
    return v;
}

/* Whether the AVX2 bf16 kernel's 4-row micro-tiles beat its 6-row ones on m rows: they
 * compute fewer padding rows (m = 8: 8 rows instead of 12, a third less work) but a row
 * costs a little more (8 accumulators instead of 12 hide less latency and amortise fewer
 * loads), GEMM_SHORT_ROW_COST sixths of one: so m = 1 to 4, 7, 8 and 20 take them; 6, 12
 * and 128 do not.
 * The choice changes no value: the tiles only decide which outputs are computed together. */
static bool short_tiles_pay(size_t m)
{
    return round_up(m, 4) * GEMM_SHORT_ROW_COST < round_up(m, 6) * 6;
}

/* Checks, then runs p (kern, a, b, y, sizes, accumulate, is_bf16 set) with the blocking of
 * its data type. */
static int gemm_common(struct gemm_problem *p, uint32_t tile_rows, unsigned n_threads,
                       struct tpu__scratch *scratch, const struct tpu__gemm_opts *o,
                       enum tpu__gemm_isa isa, struct tpu__gemm_report *report)
{
    if (report) {
        memset(report, 0, sizeof *report);
        report->isa = isa;
    }
    if (p->m == 0 || p->n == 0)
        return 0;
    if (p->k == 0) {
        if (!p->accumulate)
            memset(p->y, 0, p->m * p->n * 4); /* all-zero bits: +0.0f and int32 0 */
        else if (p->is_bf16)
            canonicalise_nans((float *)(void *)p->y, p->n, p->m, p->n);
        return 0;
    }
    p->kern = kernel_for(isa, !p->is_bf16);
#if TPU__GEMM_HAVE_X86
    if (p->kern == &tpu__gemm_bf16_avx2 && short_tiles_pay(p->m))
        p->kern = &tpu__gemm_bf16_avx2_short;
#endif
    p->fma = o->fma;
    if (p->is_bf16) {
        p->tile = tile_rows;
        p->kc = tile_rows <= GEMM_KC_BF16 ? GEMM_KC_BF16 / tile_rows * tile_rows : tile_rows;
    } else {
        p->kc = GEMM_KC_INT8;
        p->tile = p->kc;
    }
    if (p->kc > p->k)
        p->kc = p->k;
    return run_gemm(p, n_threads, scratch, o, report);
}

static enum tpu__pack_conv conv_of(const struct tpu__gemm_operand *x)
{
    if (!x->f32)
        return x->part == 0 ? TPU__PACK_BF16 : TPU__PACK_ZERO;
    return x->part == 0 ? TPU__PACK_F32_HI : x->part == 1 ? TPU__PACK_F32_MID : TPU__PACK_F32_LO;
}

int tpu__gemm_ex(const struct tpu__gemm_operand *a, const struct tpu__gemm_operand *b, float *y,
                 size_t m, size_t k, size_t n, uint32_t tile_rows, bool accumulate,
                 unsigned n_threads, struct tpu__scratch *scratch,
                 const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report)
{
    const struct tpu__gemm_opts *o = opts ? opts : &default_opts;
    if (!a || !b || a->part > 2 || b->part > 2)
        return TPU_EINVAL;
    int rc = check_args(a->data, b->data, y, m, k, n, tile_rows, n_threads, o);
    if (rc)
        return rc;
    const size_t ea = a->f32 ? 4 : 2, eb = b->f32 ? 4 : 2;
    struct gemm_problem p = {
        .a = view(a->data, ea, a->trans ? m : k, a->trans, conv_of(a)),
        .b = view(b->data, eb, b->trans ? k : n, b->trans, conv_of(b)),
        .y = (unsigned char *)y,
        .m = m,
        .k = k,
        .n = n,
        .accumulate = accumulate,
        .is_bf16 = true,
    };
    return gemm_common(&p, tile_rows, n_threads, scratch, o, resolve_isa(o->isa), report);
}

int tpu__gemm_bf16_impl(const tpu_bf16 *a, const tpu_bf16 *b, float *y, size_t m, size_t k,
                        size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                        const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report)
{
    const struct tpu__gemm_operand oa = {a, false, false, 0}, ob = {b, false, false, 0};
    return tpu__gemm_ex(&oa, &ob, y, m, k, n, tile_rows, accumulate, n_threads, NULL, opts,
                        report);
}

static int gemm_int8(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                     size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                     struct tpu__scratch *scratch, const struct tpu__gemm_opts *opts,
                     struct tpu__gemm_report *report)
{
    const struct tpu__gemm_opts *o = opts ? opts : &default_opts;
    int rc = check_args(a, b, y, m, k, n, tile_rows, n_threads, o);
    if (rc)
        return rc;
    struct gemm_problem p = {
        .a = view(a, 1, k, false, TPU__PACK_INT8),
        .b = view(b, 1, n, false, TPU__PACK_INT8),
        .y = (unsigned char *)y,
        .m = m,
        .k = k,
        .n = n,
        .accumulate = accumulate,
        .is_bf16 = false,
    };
    return gemm_common(&p, tile_rows, n_threads, scratch, o, resolve_isa(o->isa), report);
}

int tpu__gemm_int8_impl(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                        size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                        const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report)
{
    return gemm_int8(a, b, y, m, k, n, tile_rows, accumulate, n_threads, NULL, opts, report);
}

int tpu__gemm_int8_ex(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                      size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                      struct tpu__scratch *scratch)
{
    return gemm_int8(a, b, y, m, k, n, tile_rows, accumulate, n_threads, scratch, NULL, NULL);
}

int tpu_gemm_bf16(const tpu_bf16 *a, const tpu_bf16 *b, float *y, size_t m, size_t k, size_t n,
                  uint32_t tile_rows, bool accumulate, unsigned n_threads)
{
    return tpu__gemm_bf16_impl(a, b, y, m, k, n, tile_rows, accumulate, n_threads, NULL, NULL);
}

int tpu_gemm_int8(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k, size_t n,
                  uint32_t tile_rows, bool accumulate, unsigned n_threads)
{
    return tpu__gemm_int8_impl(a, b, y, m, k, n, tile_rows, accumulate, n_threads, NULL, NULL);
}

/* ---- fp32 in several bf16 passes ------------------------------------------------------ */

/* x = hi + mid + lo (+ what lo cannot hold). x - hi is exact: hi is x rounded to 8
 * significant bits, so both are multiples of ulp(x) and |x - hi| <= 2^-8 * 2^(e+1), an
 * integer multiple of ulp(x) below 2^17 ulps; the same holds for r1 - mid. A non-finite hi
 * (x is Inf or NaN, or x rounds past the largest bf16) gives mid = lo = 0: x - hi would be
 * -+Inf or NaN there, not a remainder. */
void tpu_f32_split_bf16(float x, tpu_bf16 *hi, tpu_bf16 *mid, tpu_bf16 *lo)
{
    const tpu_bf16 zero = {0};
    tpu_bf16 h = tpu_bf16_from_f32(x), md = zero, l = zero;
    float hf = tpu_bf16_to_f32(h);
    if (isfinite(hf)) {
        float r1 = x - hf;
        md = tpu_bf16_from_f32(r1);
        float r2 = r1 - tpu_bf16_to_f32(md);
        l = tpu_bf16_from_f32(r2);
    }
    if (hi)
        *hi = h;
    if (mid)
        *mid = md;
    if (lo)
        *lo = l;
}

/* The passes are bf16 GEMMs whose operands are parts of the fp32 values (tpu__gemm_ex packs
 * each part straight from the fp32 data, so no split copies are made). */
int tpu__gemm_f32_impl(const float *a, const float *b, float *y, size_t m, size_t k, size_t n,
                       uint32_t tile_rows, unsigned passes, unsigned n_threads,
                       const struct tpu__gemm_opts *opts)
{
    const struct tpu__gemm_opts *o = opts ? opts : &default_opts;
    if (passes != 1 && passes != 3 && passes != 6)
        return TPU_EINVAL;
    int rc = check_args(a, b, y, m, k, n, tile_rows, n_threads, o);
    if (rc)
        return rc;
    if (m == 0 || n == 0)
        return 0;
    /* (A part, B part) per pass, smallest terms first. 3 passes use the two-part split
     * x = hi + mid (XLA's bf16_3x), 6 passes the three-part split (bf16_6x). */
    static const unsigned char order1[1][2] = {{0, 0}};
    static const unsigned char order3[3][2] = {{1, 0}, {0, 1}, {0, 0}};
    static const unsigned char order6[6][2] = {{2, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {0, 0}};
    const unsigned char(*order)[2] = passes == 1 ? order1 : passes == 3 ? order3 : order6;
    struct tpu__scratch scratch = {{NULL}, {0}};
    for (unsigned i = 0; i < passes && rc == 0; i++) {
        const struct tpu__gemm_operand oa = {a, true, false, order[i][0]};
        const struct tpu__gemm_operand ob = {b, true, false, order[i][1]};
        rc = tpu__gemm_ex(&oa, &ob, y, m, k, n, tile_rows, i > 0, n_threads, &scratch, o, NULL);
    }
    tpu__scratch_free(&scratch);
    return rc;
}

int tpu_gemm_f32(const float *a, const float *b, float *y, size_t m, size_t k, size_t n,
                 uint32_t tile_rows, unsigned passes, unsigned n_threads)
{
    return tpu__gemm_f32_impl(a, b, y, m, k, n, tile_rows, passes, n_threads, NULL);
}

/* ---- scratch arenas (scratch.h) ---------------------------------------------------------- */

int tpu__scratch_stable_b(struct tpu__scratch *s, const void *data, uint64_t gen)
{
    struct bcache *bc = s->mem[TPU__SCRATCH_BCACHE];
    if (!bc && data) {
        bc = calloc(1, sizeof *bc);
        if (!bc)
            return TPU_ENOMEM;
        s->mem[TPU__SCRATCH_BCACHE] = bc;
        s->bytes[TPU__SCRATCH_BCACHE] = sizeof *bc;
    }
    if (bc) {
        if (data && (data != bc->hint || gen != bc->hint_gen))
            bcache_drop_stale(bc, data, gen);
        bc->hint = data;
        bc->hint_gen = gen;
    }
    return 0;
}

void *tpu__scratch_get(struct tpu__scratch *s, enum tpu__scratch_slot slot, size_t bytes)
{
    if ((unsigned)slot >= TPU__SCRATCH_SLOTS || slot == TPU__SCRATCH_BCACHE)
        return NULL;
    if (s->mem[slot] && s->bytes[slot] >= bytes)
        return s->mem[slot];
    /* whole pages (aligned_alloc needs a multiple of the alignment) */
    if (bytes > SIZE_MAX - 4096)
        return NULL;
    size_t want = round_up(bytes ? bytes : 1, 4096);
    void *mem = aligned_alloc(GEMM_ALIGN_BYTES, want);
    if (!mem)
        return NULL;
    free(s->mem[slot]);
    s->mem[slot] = mem;
    s->bytes[slot] = want;
    return mem;
}

void tpu__scratch_free(struct tpu__scratch *s)
{
    if (s->mem[TPU__SCRATCH_BCACHE])
        bcache_clear(s->mem[TPU__SCRATCH_BCACHE]);
    for (int i = 0; i < TPU__SCRATCH_SLOTS; i++) {
        free(s->mem[i]);
        s->mem[i] = NULL;
        s->bytes[i] = 0;
    }
}
