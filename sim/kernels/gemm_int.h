/* Internal interface of the GEMM kernels (sim/kernels/): the blocking driver in gemm.c and
 * the per-instruction-set packing routines and micro-kernels in x86/gemm_avx512.c and
 * x86/gemm_avx2.c.
 * Not part of the public API; sim/ops/ops.c uses tpu__gemm_ex (operands as they sit in device
 * buffers), and the tests and the benchmark use it to force an instruction set, a kernel
 * variant or an allocation failure. The numerics are defined in include/tpusim/mxu.h.
 *
 * Buffers (all 32-bit words: fp32 for bf16 GEMMs, int32 for int8 GEMMs):
 *   packed A block  [mc rounded up to mr][lda]: mr-row micro-panels of mr * lda words each,
 *                   holding the block's K-slice of A as fp32 holding a bf16 value or, for
 *                   int8, as pairs of int16 (k, k+1) in one word. Within a panel, row-major
 *                   (word (i, p) at i * lda + p) or K-major (word (i, p) at p * mr + i: one
 *                   contiguous stream for the micro-kernel), as each kernel's packer and
 *                   micro-kernel agree (the AVX-512 bf16 kernel: K-major).
 *                   Words past the K-slice are not read; the driver zeroes the last panel
 *                   before packing a block that ends inside it, so rows past mc are zero.
 *   packed B block  [nc rounded up to nr / nr][kwords][nr]  column panels of nr columns; within
 *                   a panel, word (p, j) holds B[k0 + p][j] (fp32 holding a bf16 value) or, for
 *                   int8, the int16 pair (B[k0 + 2p][j], B[k0 + 2p + 1][j]); columns past nc
 *                   are zero.
 *   C               the caller's Y, row-major with row stride ldc words.
 * A bf16 packer reads its source as the GEMM's operand stores it (tpu_bf16, or float rounded
 * or split to bf16 on the way: struct tpu__pack_src) and gathers the exponent statistics of
 * the bf16 values it writes. */
#ifndef TPUSIM_SIM_GEMM_INT_H
#define TPUSIM_SIM_GEMM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/mxu.h"
#include "scratch.h"

/* Instruction sets a GEMM can run on. AUTO picks the best the CPU supports. */
enum tpu__gemm_isa {
    TPU__GEMM_ISA_AUTO = 0,
    TPU__GEMM_ISA_SCALAR = 1, /* portable C, any CPU */
    TPU__GEMM_ISA_AVX2 = 2,   /* x86-64 AVX2 + FMA */
    TPU__GEMM_ISA_AVX512 = 3, /* x86-64 AVX-512F (+ BW for int8) */
};

/* Which bf16 micro-kernel runs a block. */
enum tpu__gemm_fma {
    TPU__GEMM_FMA_AUTO = 0,   /* FMA where the exponent ranges prove it exact (the default) */
    TPU__GEMM_FMA_NEVER = 1,  /* always the separate multiply + add kernel */
    TPU__GEMM_FMA_ALWAYS = 2, /* always FMA, even where it is not exact: tests only, to show
                               * that their data tells the two apart */
};

/* Options of the internal entry points. Zero-initialised means the public behaviour. */
struct tpu__gemm_opts {
    enum tpu__gemm_isa isa;
    enum tpu__gemm_fma fma;
    size_t max_alloc_bytes; /* 0: no limit; else fail with TPU_ENOMEM above it (tests) */
};

/* What a run did (for tests). */
struct tpu__gemm_report {
    enum tpu__gemm_isa isa;   /* the instruction set that ran */
    unsigned threads_used;    /* threads that had work, caller's included */
    uint64_t fma_blocks;      /* bf16: (A block, B block) pairs run with the FMA kernel */
    uint64_t plain_blocks;    /* bf16: ... with the multiply + add kernel */
};

/* One operand of tpu__gemm_ex as it is stored: dense row-major, op(A) = A [m][k] or, when
 * `trans`, stored as its transpose [k][m]; op(B) = B [k][n] or, when `trans`, stored [n][k].
 * The values that enter the array are bf16:
 *   - tpu_bf16 data (f32 false): part 0 is the value as it is; parts 1 and 2 are zero (and
 *     the data is not read for them);
 *   - float data (f32 true): part 0 is the value rounded to bf16 (nearest even, bf16.h) --
 *     hi of tpu_f32_split_bf16 --, part 1 its mid and part 2 its lo (mxu.h's split).
 * So one call with parts 0 is the mixed-precision (1 pass) GEMM of f32 data, and a sequence
 * of calls with the parts of mxu.h's pass order is the 3 or 6 pass fp32 GEMM. */
struct tpu__gemm_operand {
    const void *data;
    bool f32;
    bool trans;
    unsigned part; /* 0, 1 or 2 */
};

/* Y[m][n] = op(A) * op(B) (or Y += ... when `accumulate`) on the bf16 values the operands
 * name, with exactly tpu_gemm_bf16's numerics, order and edge cases (mxu.h; the result is the
 * bits tpu_gemm_bf16 gives for the bf16 matrices op(A) and op(B) written out). The packers
 * read the operands where they are: no converted or transposed copy is made. `scratch` (may be
 * NULL: then the call allocates and frees its own memory) holds the packed blocks in its
 * TPU__SCRATCH_GEMM slot; with one arena per calling thread no call allocates once the arena
 * has grown to the largest problem. `opts` and `report` may be NULL. Returns 0, TPU_EINVAL
 * (tpu_gemm_bf16's cases, a NULL operand, a part above 2), TPU_EUNSUPPORTED (a forced
 * instruction set this CPU lacks), TPU_ENOMEM or TPU_ETHREAD. */
int tpu__gemm_ex(const struct tpu__gemm_operand *a, const struct tpu__gemm_operand *b, float *y,
                 size_t m, size_t k, size_t n, uint32_t tile_rows, bool accumulate,
                 unsigned n_threads, struct tpu__scratch *scratch,
                 const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report);

/* tpu_gemm_int8 with its packed blocks in `scratch` (NULL: allocated and freed per call). */
int tpu__gemm_int8_ex(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                      size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                      struct tpu__scratch *scratch);

/* True if this CPU can run `isa` (SCALAR always). */
bool tpu__gemm_isa_supported(enum tpu__gemm_isa isa);

/* The public GEMMs with options; `opts` and `report` may be NULL. An unsupported forced
 * instruction set gives TPU_EUNSUPPORTED. */
int tpu__gemm_bf16_impl(const tpu_bf16 *a, const tpu_bf16 *b, float *y, size_t m, size_t k,
                        size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                        const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report);
int tpu__gemm_int8_impl(const int8_t *a, const int8_t *b, int32_t *y, size_t m, size_t k,
                        size_t n, uint32_t tile_rows, bool accumulate, unsigned n_threads,
                        const struct tpu__gemm_opts *opts, struct tpu__gemm_report *report);
int tpu__gemm_f32_impl(const float *a, const float *b, float *y, size_t m, size_t k, size_t n,
                       uint32_t tile_rows, unsigned passes, unsigned n_threads,
                       const struct tpu__gemm_opts *opts);

/* Exponent statistics of a block of bf16 values, gathered while packing it; they decide
 * whether the FMA kernel is exact for a pair of blocks (see gemm.c). Fields are biased
 * exponent fields (0..255) with subnormals counted as 1 (their scale is 2^-126). */
struct tpu__exp_stats {
    unsigned max_field;         /* over all values; 255 if any Inf or NaN; 0 if all zero */
    unsigned min_nonzero_field; /* over nonzero values; 255 if all are zero */
};

/* How a packer turns a stored element into the value it writes. */
enum tpu__pack_conv {
    TPU__PACK_BF16 = 0,   /* tpu_bf16, widened to fp32 (exact) */
    TPU__PACK_F32_HI = 1, /* float: tpu_f32_split_bf16's hi (the value rounded to bf16) */
    TPU__PACK_F32_MID = 2,/* float: its mid */
    TPU__PACK_F32_LO = 3, /* float: its lo */
    TPU__PACK_ZERO = 4,   /* +0 for every element; the source is not read */
    TPU__PACK_INT8 = 5,   /* int8_t (int8 GEMMs) */
};

/* Where a packer reads its block: element (r, c) of the block as the packer orders it
 * (A: r = row i, c = k; B: r = k, c = column j) is stored at p[r * ld + c], or at
 * p[c * ld + r] when `trans` (bf16 packers only). Element sizes: 2 (BF16), 4 (F32_*),
 * 1 (INT8). */
struct tpu__pack_src {
    const void *p;
    size_t ld; /* elements between stored rows */
    bool trans;
    enum tpu__pack_conv conv;
};

/* The bf16 part `conv` of stored element `idx` of `p`, as the bits of the fp32 value the
 * packers write (bf16 bits << 16), by the definition (tpu_f32_split_bf16). The portable
 * packers use it; the vector packers compute the same lane by lane (the tests compare). */
static inline uint32_t tpu__pack_conv_one(const void *p, size_t idx, enum tpu__pack_conv conv)
{
    tpu_bf16 part[3];
    switch (conv) {
    case TPU__PACK_BF16:
        return (uint32_t)((const tpu_bf16 *)p)[idx].bits << 16;
    case TPU__PACK_F32_HI:
    case TPU__PACK_F32_MID:
    case TPU__PACK_F32_LO:
        tpu_f32_split_bf16(((const float *)p)[idx], &part[0], &part[1], &part[2]);
        return (uint32_t)part[conv - TPU__PACK_F32_HI].bits << 16;
    default:
        return 0;
    }
}

/* Calls fn(s, element bytes, ..., conversion) with the conversion of `s` as a constant, so
 * that each (layout, conversion) pair of a vector packer is compiled on its own. */
#define TPU__PACK_DISPATCH(fn, s, ...)                                                         \
    switch ((s)->conv) {                                                                       \
    case TPU__PACK_BF16:                                                                       \
        fn(s, 2, __VA_ARGS__, TPU__PACK_BF16);                                                 \
        break;                                                                                 \
    case TPU__PACK_F32_HI:                                                                     \
        fn(s, 4, __VA_ARGS__, TPU__PACK_F32_HI);                                               \
        break;                                                                                 \
    case TPU__PACK_F32_MID:                                                                    \
        fn(s, 4, __VA_ARGS__, TPU__PACK_F32_MID);                                              \
        break;                                                                                 \
    case TPU__PACK_F32_LO:                                                                     \
        fn(s, 4, __VA_ARGS__, TPU__PACK_F32_LO);                                               \
        break;                                                                                 \
    default:                                                                                   \
        fn(s, 4, __VA_ARGS__, TPU__PACK_ZERO);                                                 \
        break;                                                                                 \
    }

/* Flags of the micro-kernels (struct tpu__gemm_kernel). */
#define TPU__MICRO_STORE_FIRST 1u
#define TPU__MICRO_CANON_NAN 2u
/* A hint: the values stored after the chunk's last tile are final and will not be read
 * soon, so they may bypass the caches (non-temporal stores). Given only when C is 64-byte
 * aligned and ldc a multiple of 16 words. */
#define TPU__MICRO_STREAM 4u

/* One instruction set's kernels for one data type. */
struct tpu__gemm_kernel {
    unsigned mr, nr;     /* micro-tile: mr rows x nr columns of C per micro-kernel call */
    unsigned k_per_word; /* K values per packed word: 1 (fp32) or 2 (int16 pairs) */
    /* Packs rows [0, mc) x K-slice [0, kc) of the source into the packed A layout with row
     * stride lda words (rows past mc are left alone); fills *st for bf16 (may be NULL for
     * int8). */
    void (*pack_a)(const struct tpu__pack_src *src, size_t mc, size_t kc, void *dst,
                   size_t lda, struct tpu__exp_stats *st);
    /* Packs K-slice [0, kc) x columns [0, nc) of the source into column panels of
     * kwords x nr words each, zero past nc. */
    void (*pack_b)(const struct tpu__pack_src *src, size_t kc, size_t nc, void *dst,
                   struct tpu__exp_stats *st);
    /* C[mr][nr] (row stride ldc words) combined with the product of an A micro-panel
     * (mr rows of stride lda words) and a B panel over a K-chunk of kc values.
     * bf16: the chunk is cut into tiles of `tile` rows (the last may be shorter); each tile's
     * column sums start at +0, then C = t for the chunk's first tile if `flags` has
     * TPU__MICRO_STORE_FIRST, else C = C + t; with TPU__MICRO_CANON_NAN, NaNs among the
     * values stored after the chunk's last tile are replaced by the canonical NaN (the driver
     * asks for it on the last chunk, when C is final). int8: C = sum (STORE_FIRST) or C + sum,
     * wrapping; `tile` and CANON_NAN are unused.
     * For bf16 this is the FMA kernel, exact only under the driver's exponent test (NULL if
     * the instruction set has none); for int8 the only kernel. */
    void (*micro)(size_t kc, size_t tile, const void *ap, size_t lda, const void *bp, void *c,
                  size_t ldc, unsigned flags);
    /* bf16 only: the same with separate multiply and add, exact for every input. NULL for
     * int8. */
    void (*micro_plain)(size_t kc, size_t tile, const void *ap, size_t lda, const void *bp,
                        void *c, size_t ldc, unsigned flags);
};

/* Tables of the x86 kernels (defined only where the compiler targets x86-64). */
#if defined(__x86_64__) && defined(__GNUC__)
#define TPU__GEMM_HAVE_X86 1
#else
#define TPU__GEMM_HAVE_X86 0
#endif
#if TPU__GEMM_HAVE_X86
extern const struct tpu__gemm_kernel tpu__gemm_bf16_avx512;
extern const struct tpu__gemm_kernel tpu__gemm_int8_avx512;
extern const struct tpu__gemm_kernel tpu__gemm_bf16_avx2;
extern const struct tpu__gemm_kernel tpu__gemm_bf16_avx2_short; /* 4-row micro-tiles */
extern const struct tpu__gemm_kernel tpu__gemm_int8_avx2;
#endif

#endif
