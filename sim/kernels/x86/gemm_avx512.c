/* AVX-512 kernels of the GEMM driver in gemm.c: packing (with the exponent statistics that
 * decide whether FMA is exact) and register-blocked micro-kernels for bf16 -> fp32 and
 * int8 -> int32. Buffer layouts and the kernel contract are in gemm_int.h; why the FMA
 * kernel gives the definition's bits is in gemm.c. Compiled for x86-64 only; the functions
 * carry target attributes and run only after the driver has checked the CPU.
 *
 * bf16 packing: 16 elements per vector, converted with integer operations that are bf16.h's
 * rounding lane by lane (f32 -> bf16 -> fp32) or, for the split parts, tpu_f32_split_bf16's
 * operations in the same order. A is packed K-major per 12-row panel (so A stored row by row
 * and B stored transposed go through a 16 x 16 register transpose; A stored transposed is
 * already in that order). The statistics are taken on the converted values.
 *
 * bf16 micro-tile: 12 rows x 32 columns of C = 24 zmm column-sum registers; per k: two
 * vector loads of B, twelve broadcasts of A from one contiguous stream, 24 FMAs (or 24
 * multiplies and 24 adds). Each lane is one output's column sum, updated in k order, so the
 * vector code performs the definition's operations exactly. Final results of large GEMMs
 * may be stored non-temporally (TPU__MICRO_STREAM). */
#include "kernels/gemm_int.h"

#if TPU__GEMM_HAVE_X86
#include <immintrin.h>

#define TARGET_Z __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INLINE_Z static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl")))

enum { Z_MR = 12, Z_NR = 32, Z_MR_INT8 = 8 };

INLINE_Z __mmask32 mask32(size_t n)
{
    return n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u);
}

INLINE_Z __mmask16 mask16(size_t n)
{
    return n >= 16 ? (__mmask16)0xFFFFu : (__mmask16)((1u << n) - 1u);
}

/* ---- bf16 packing ------------------------------------------------------------------------ */

/* Exponent statistics on 16 packed values (fp32 bits holding bf16s). The largest magnitude
 * has the largest exponent field (255 for Inf and NaN); the smallest nonzero magnitude the
 * smallest nonzero field. |v| - 1 wraps a zero to the largest unsigned value, so the minimum
 * of |v| - 1 skips zeros (and padding lanes, which are zero). */
INLINE_Z void stats_z(__m512i v, __m512i *maxv, __m512i *minv)
{
    __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7FFFFFFF));
    *maxv = _mm512_max_epu32(*maxv, mag);
    *minv = _mm512_min_epu32(*minv, _mm512_sub_epi32(mag, _mm512_set1_epi32(1)));
}

#define STATS_Z_INIT(maxv, minv)                                                               \
    __m512i maxv = _mm512_setzero_si512(), minv = _mm512_set1_epi32(-1)

TARGET_Z static void stats_z_finish(__m512i maxv, __m512i minv, struct tpu__exp_stats *st)
{
    uint32_t mx = _mm512_reduce_max_epu32(maxv), mn = _mm512_reduce_min_epu32(minv);
    st->max_field = mx >> 23;
    if (mn == UINT32_MAX) {
        st->min_nonzero_field = 255;
    } else {
        unsigned f = (mn + 1u) >> 23;
        st->min_nonzero_field = f == 0 ? 1u : f; /* subnormals count as 1 */
    }
}

/* fp32 bits -> the bits of the bf16 nearest (ties to even), as fp32 bits: bf16.h's rule,
 * NaN kept quiet with its sign and top payload bits. */
INLINE_Z __m512i round_bf16_z(__m512i u)
{
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    return _mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u));
}

/* Up to 16 stored elements at p (lanes outside `m` read as +0, and are not touched in
 * memory) converted per `conv` (a constant in every caller) to the packed fp32 bits. The
 * split follows tpu_f32_split_bf16 operation for operation: hi = bf16(x), mid = bf16(x - hi),
 * lo = bf16((x - hi) - mid), each subtraction one fp32 operation; mid = lo = 0 where hi is
 * not finite. */
INLINE_Z __m512i conv_z(const void *p, __mmask16 m, const enum tpu__pack_conv conv)
{
    if (conv == TPU__PACK_ZERO)
        return _mm512_setzero_si512();
    if (conv == TPU__PACK_BF16)
        return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16);
    __m512 x = _mm512_maskz_loadu_ps(m, p);
    __m512i hi = round_bf16_z(_mm512_castps_si512(x));
    if (conv == TPU__PACK_F32_HI)
        return hi;
    __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
    __mmask16 finite =
        _mm512_cmpneq_epu32_mask(_mm512_and_si512(hi, exp_mask), exp_mask);
    __m512 r1 = _mm512_sub_ps(x, _mm512_castsi512_ps(hi));
    __m512i mid = round_bf16_z(_mm512_castps_si512(r1));
    if (conv == TPU__PACK_F32_MID)
        return _mm512_maskz_mov_epi32(finite, mid);
    __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(mid));
    return _mm512_maskz_mov_epi32(finite, round_bf16_z(_mm512_castps_si512(r2)));
}

/* In-register transpose of 16 x 16 words: r[i] lane j <-> r[j] lane i. */
INLINE_Z void transpose16_z(__m512i r[16])
{
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4g + c] holds columns c, c + 4, c + 8, c + 12 of rows 4g .. 4g + 3 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);      /* col c, c+8; rows 0-7 */
        t[4 + c] = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);  /* col c+4, c+12 */
        t[8 + c] = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88); /* rows 8-15 */
        t[12 + c] = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xDD);
    }
}

/* The packed A block is K-major within each Z_MR-row micro-panel (gemm_int.h): element
 * (i, k) of panel q at ap + q * Z_MR * lda + k * Z_MR + i % Z_MR. */

/* A block, each A row contiguous in memory: per panel, 16 x 16 squares (Z_MR rows and four
 * zero ones) through the register transpose, Z_MR lanes stored per K. */
INLINE_Z void pack_a_rows_z(const struct tpu__pack_src *s, size_t es, size_t mc, size_t kc,
                            float *ap, size_t lda, __m512i *maxv, __m512i *minv,
                            const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t i0 = 0; i0 < mc; i0 += Z_MR) {
        const size_t ni = mc - i0 < Z_MR ? mc - i0 : Z_MR;
        float *panel = ap + i0 * lda;
        for (size_t k0 = 0; k0 < kc; k0 += 16) {
            const size_t nk = kc - k0 < 16 ? kc - k0 : 16;
            const __mmask16 mk = mask16(nk);
            __m512i r[16];
            for (size_t ii = 0; ii < 16; ii++) {
                if (ii < ni) {
                    r[ii] = conv_z(p + ((i0 + ii) * s->ld + k0) * es, mk, conv);
                    stats_z(r[ii], maxv, minv);
                } else {
                    r[ii] = _mm512_setzero_si512();
                }
            }
            transpose16_z(r); /* r[c]: K value k0 + c of rows i0 .. i0 + 15 */
            const __mmask16 mi = mask16(ni);
            for (size_t c = 0; c < nk; c++)
                _mm512_mask_storeu_epi32(panel + (k0 + c) * Z_MR, mi, r[c]);
        }
    }
}

/* A block stored transposed: element (i, k) at p[k * ld + i], so a panel's Z_MR values of
 * one K are contiguous: one masked load and one store each, row by row of the source. */
INLINE_Z void pack_a_trans_z(const struct tpu__pack_src *s, size_t es, size_t mc, size_t kc,
                             float *ap, size_t lda, __m512i *maxv, __m512i *minv,
                             const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t k = 0; k < kc; k++) {
        const unsigned char *row = p + k * s->ld * es;
        for (size_t i0 = 0; i0 < mc; i0 += Z_MR) {
            const __mmask16 mi = mask16(mc - i0 < Z_MR ? mc - i0 : Z_MR);
            __m512i v = conv_z(row + i0 * es, mi, conv);
            stats_z(v, maxv, minv);
            _mm512_mask_storeu_epi32(ap + i0 * lda + k * Z_MR, mi, v);
        }
    }
}

/* B block, each K row contiguous in memory: read row by row (sequential reads, whatever the
 * row length), two vectors per panel row written into each panel in turn. */
INLINE_Z void pack_b_rows_z(const struct tpu__pack_src *s, size_t es, size_t kc, size_t nc,
                            float *bp, __m512i *maxv, __m512i *minv,
                            const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t k = 0; k < kc; k++) {
        const unsigned char *row = p + k * s->ld * es;
        float *out = bp + k * Z_NR;
        for (size_t j0 = 0; j0 < nc; j0 += Z_NR, out += kc * Z_NR) {
            const size_t w = nc - j0;
            const __mmask16 m0 = mask16(w), m1 = w > 16 ? mask16(w - 16) : 0;
            __m512i v0 = conv_z(row + j0 * es, m0, conv);
            __m512i v1 = m1 ? conv_z(row + (j0 + 16) * es, m1, conv) : _mm512_setzero_si512();
            stats_z(v0, maxv, minv);
            stats_z(v1, maxv, minv);
            _mm512_store_si512(out, v0);
            _mm512_store_si512(out + 16, v1);
        }
    }
}

/* B block stored transposed: element (k, j) at p[j * ld + k]. */
INLINE_Z void pack_b_trans_z(const struct tpu__pack_src *s, size_t es, size_t kc, size_t nc,
                             float *bp, __m512i *maxv, __m512i *minv,
                             const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t j0 = 0; j0 < nc; j0 += Z_NR) {
        float *panel = bp + (j0 / Z_NR) * kc * Z_NR;
        for (size_t k0 = 0; k0 < kc; k0 += 16) {
            const size_t nk = kc - k0 < 16 ? kc - k0 : 16;
            const __mmask16 mk = mask16(nk);
            for (size_t h = 0; h < Z_NR; h += 16) {
                const size_t jh = j0 + h, nj = jh < nc ? (nc - jh < 16 ? nc - jh : 16) : 0;
                __m512i r[16];
                for (size_t jj = 0; jj < 16; jj++) {
                    if (jj < nj) {
                        r[jj] = conv_z(p + ((jh + jj) * s->ld + k0) * es, mk, conv);
                        stats_z(r[jj], maxv, minv);
                    } else {
                        r[jj] = _mm512_setzero_si512();
                    }
                }
                transpose16_z(r); /* r[c]: K row k0 + c, columns jh .. jh + 15 */
                for (size_t c = 0; c < nk; c++)
                    _mm512_store_si512(panel + (k0 + c) * Z_NR + h, r[c]);
            }
        }
    }
}

TARGET_Z static void pack_a_bf16_z(const struct tpu__pack_src *s, size_t mc, size_t kc,
                                   void *dst, size_t lda, struct tpu__exp_stats *st)
{
    STATS_Z_INIT(maxv, minv);
    if (s->trans && s->conv != TPU__PACK_ZERO) {
        TPU__PACK_DISPATCH(pack_a_trans_z, s, mc, kc, dst, lda, &maxv, &minv)
    } else {
        TPU__PACK_DISPATCH(pack_a_rows_z, s, mc, kc, dst, lda, &maxv, &minv)
    }
    stats_z_finish(maxv, minv, st);
}

TARGET_Z static void pack_b_bf16_z(const struct tpu__pack_src *s, size_t kc, size_t nc,
                                   void *dst, struct tpu__exp_stats *st)
{
    STATS_Z_INIT(maxv, minv);
    if (s->trans && s->conv != TPU__PACK_ZERO) {
        TPU__PACK_DISPATCH(pack_b_trans_z, s, kc, nc, dst, &maxv, &minv)
    } else {
        TPU__PACK_DISPATCH(pack_b_rows_z, s, kc, nc, dst, &maxv, &minv)
    }
    stats_z_finish(maxv, minv, st);
}

/* ---- bf16 micro-kernels ------------------------------------------------------------------ */

/* `fma` is a compile-time constant in each caller. The multiply + add form uses the
 * explicit-rounding intrinsics so that no compiler setting could fuse the pair. */
INLINE_Z void micro_bf16_z_body(size_t kc, size_t tile, const float *ap, size_t lda,
                                const float *bp, float *c, size_t ldc, unsigned flags,
                                const bool fma)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    (void)lda; /* the panel is K-major: Z_MR values per K, contiguous */
    const __m512 canon_nan = _mm512_castsi512_ps(_mm512_set1_epi32((int)TPU_F32_CANONICAL_NAN_BITS));
    for (size_t k0 = 0; k0 < kc; k0 += tile) {
        size_t len = kc - k0 < tile ? kc - k0 : tile;
        __m512 t0[Z_MR], t1[Z_MR];
#pragma GCC unroll 12
        for (int i = 0; i < Z_MR; i++) {
            t0[i] = _mm512_setzero_ps();
            t1[i] = _mm512_setzero_ps();
        }
        const float *a = ap + k0 * Z_MR; /* K-major: Z_MR values per K */
        const float *b = bp + k0 * Z_NR;
        for (size_t k = 0; k < len; k++) {
            __m512 b0 = _mm512_load_ps(b);
            __m512 b1 = _mm512_load_ps(b + 16);
            b += Z_NR;
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                __m512 ai = _mm512_set1_ps(a[i]);
                if (fma) {
                    t0[i] = _mm512_fmadd_ps(ai, b0, t0[i]);
                    t1[i] = _mm512_fmadd_ps(ai, b1, t1[i]);
                } else {
                    t0[i] = _mm512_add_round_ps(
                        t0[i], _mm512_mul_round_ps(ai, b0, _MM_FROUND_CUR_DIRECTION),
                        _MM_FROUND_CUR_DIRECTION);
                    t1[i] = _mm512_add_round_ps(
                        t1[i], _mm512_mul_round_ps(ai, b1, _MM_FROUND_CUR_DIRECTION),
                        _MM_FROUND_CUR_DIRECTION);
                }
            }
            a += Z_MR;
        }
        if (!(store_first && k0 == 0)) {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                float *ci = c + (size_t)i * ldc;
                t0[i] = _mm512_add_ps(_mm512_loadu_ps(ci), t0[i]);
                t1[i] = _mm512_add_ps(_mm512_loadu_ps(ci + 16), t1[i]);
            }
        }
        if ((flags & TPU__MICRO_CANON_NAN) && k0 + len == kc) {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                t0[i] = _mm512_mask_mov_ps(t0[i], _mm512_cmp_ps_mask(t0[i], t0[i], _CMP_UNORD_Q),
                                           canon_nan);
                t1[i] = _mm512_mask_mov_ps(t1[i], _mm512_cmp_ps_mask(t1[i], t1[i], _CMP_UNORD_Q),
                                           canon_nan);
            }
        }
        if ((flags & TPU__MICRO_STREAM) && k0 + len == kc) {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                _mm512_stream_ps(c + (size_t)i * ldc, t0[i]);
                _mm512_stream_ps(c + (size_t)i * ldc + 16, t1[i]);
            }
            _mm_sfence(); /* ordered before any later store, like the plain ones */
        } else {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                _mm512_storeu_ps(c + (size_t)i * ldc, t0[i]);
                _mm512_storeu_ps(c + (size_t)i * ldc + 16, t1[i]);
            }
        }
    }
}

TARGET_Z static void micro_bf16_z_fma(size_t kc, size_t tile, const void *ap, size_t lda,
                                      const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_z_body(kc, tile, ap, lda, bp, c, ldc, flags, true);
}

TARGET_Z static void micro_bf16_z_plain(size_t kc, size_t tile, const void *ap, size_t lda,
                                        const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_z_body(kc, tile, ap, lda, bp, c, ldc, flags, false);
}

const struct tpu__gemm_kernel tpu__gemm_bf16_avx512 = {
    .mr = Z_MR,
    .nr = Z_NR,
    .k_per_word = 1,
    .pack_a = pack_a_bf16_z,
    .pack_b = pack_b_bf16_z,
    .micro = micro_bf16_z_fma,
    .micro_plain = micro_bf16_z_plain,
};

/* ---- int8: int16 pairs and VPMADDWD ------------------------------------------------------ */

/* Row i of the block: K values as int16, two per word (k even in the low half). A pair's
 * products a0*b0 + a1*b1 lie in [-32512, 32768], exact in int32; the sums then wrap. */
TARGET_Z static void pack_a_int8_z(const struct tpu__pack_src *s, size_t mc, size_t kc,
                                   void *dst, size_t lda, struct tpu__exp_stats *st)
{
    const int8_t *a = s->p;
    const size_t ld = s->ld;
    int16_t *ap = dst;
    (void)st;
    for (size_t i = 0; i < mc; i++) {
        const int8_t *row = a + i * ld;
        int16_t *out = ap + i * lda * 2;
        size_t k = 0;
        for (; k + 32 <= kc; k += 32)
            _mm512_storeu_si512(out + k, _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                                             (const __m256i *)(const void *)(row + k))));
        if (k < kc) {
            /* the odd tail's partner half is written as 0 */
            __m256i v = _mm256_maskz_loadu_epi8(mask32(kc - k), row + k);
            _mm512_mask_storeu_epi16(out + k, mask32(kc - k + 1), _mm512_cvtepi8_epi16(v));
        }
    }
}

TARGET_Z static void pack_b_int8_z(const struct tpu__pack_src *s, size_t kc, size_t nc,
                                   void *dst, struct tpu__exp_stats *st)
{
    const int8_t *b = s->p;
    const size_t ld = s->ld;
    int32_t *bp = dst;
    (void)st;
    for (size_t j0 = 0; j0 < nc; j0 += Z_NR)
        for (size_t k = 0; k < kc; k += 2)
            for (size_t h = 0; h < Z_NR; h += 16) {
                size_t cols = j0 + h < nc ? nc - j0 - h : 0;
                __mmask16 m = cols >= 16 ? 0xFFFFu : (__mmask16)((1u << cols) - 1u);
                __m128i r0 = _mm_maskz_loadu_epi8(m, b + k * ld + j0 + h);
                __m128i r1 = k + 1 < kc ? _mm_maskz_loadu_epi8(m, b + (k + 1) * ld + j0 + h)
                                        : _mm_setzero_si128();
                __m512i lo = _mm512_and_si512(_mm512_cvtepi8_epi32(r0), _mm512_set1_epi32(0xFFFF));
                __m512i hi = _mm512_slli_epi32(_mm512_cvtepi8_epi32(r1), 16);
                _mm512_store_si512(bp, _mm512_or_si512(lo, hi));
                bp += 16;
            }
}

TARGET_Z static void micro_int8_z(size_t kc, size_t tile, const void *ap_, size_t lda,
                                  const void *bp_, void *c_, size_t ldc, unsigned flags)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    const int16_t *ap = ap_; /* pairs: word p of row i at ap + 2 * (i * lda + p) */
    const int32_t *b = bp_;
    int32_t *c = c_;
    size_t kwords = (kc + 1) / 2;
    __m512i t0[Z_MR_INT8], t1[Z_MR_INT8];
    (void)tile;
#pragma GCC unroll 8
    for (int i = 0; i < Z_MR_INT8; i++) {
        t0[i] = _mm512_setzero_si512();
        t1[i] = _mm512_setzero_si512();
    }
    for (size_t p = 0; p < kwords; p++) {
        __m512i b0 = _mm512_load_si512(b);
        __m512i b1 = _mm512_load_si512(b + 16);
        b += Z_NR;
#pragma GCC unroll 8
        for (int i = 0; i < Z_MR_INT8; i++) {
            __m512i ai = _mm512_broadcastd_epi32(_mm_loadu_si32(ap + 2 * ((size_t)i * lda + p)));
            t0[i] = _mm512_add_epi32(t0[i], _mm512_madd_epi16(ai, b0));
            t1[i] = _mm512_add_epi32(t1[i], _mm512_madd_epi16(ai, b1));
        }
    }
    if (store_first) {
#pragma GCC unroll 8
        for (int i = 0; i < Z_MR_INT8; i++) {
            _mm512_storeu_si512(c + (size_t)i * ldc, t0[i]);
            _mm512_storeu_si512(c + (size_t)i * ldc + 16, t1[i]);
        }
    } else {
#pragma GCC unroll 8
        for (int i = 0; i < Z_MR_INT8; i++) {
            int32_t *ci = c + (size_t)i * ldc;
            _mm512_storeu_si512(ci, _mm512_add_epi32(_mm512_loadu_si512(ci), t0[i]));
            _mm512_storeu_si512(ci + 16, _mm512_add_epi32(_mm512_loadu_si512(ci + 16), t1[i]));
        }
    }
}

const struct tpu__gemm_kernel tpu__gemm_int8_avx512 = {
    .mr = Z_MR_INT8,
    .nr = Z_NR,
    .k_per_word = 2,
    .pack_a = pack_a_int8_z,
    .pack_b = pack_b_int8_z,
    .micro = micro_int8_z,
    .micro_plain = NULL,
};

#endif
