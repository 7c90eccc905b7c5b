/* AVX2 + FMA kernels of the GEMM driver in gemm.c, for x86-64 CPUs without AVX-512: the same
 * packing (conversions, 8 x 8 register transposes), statistics and micro-kernel contract as
 * gemm_avx512.c (see gemm_int.h) with 256-bit vectors. bf16 micro-tile: 6 rows x 16 columns =
 * 12 ymm column sums, or 4 x 16 for short products (gemm.c's short_tiles_pay); int8: 4 x 16
 * with int16 pairs and VPMADDWD. The multiply + add kernel relies on the project-wide
 * -ffp-contract=off (AVX2 has no explicit-rounding intrinsics); the tests would see a fused
 * pair, as they compare it bit for bit on data where fusing changes results. */
#include "kernels/gemm_int.h"

#if TPU__GEMM_HAVE_X86
#include <immintrin.h>

#define TARGET_Y __attribute__((target("avx2,fma")))
#define INLINE_Y static inline __attribute__((always_inline, target("avx2,fma")))

enum { Y_MR = 6, Y_MR_SHORT = 4, Y_NR = 16, Y_MR_INT8 = 4 };

/* Exponent statistics on 8 packed values (fp32 bits holding bf16s), as in gemm_avx512.c:
 * the largest magnitude and the smallest of |v| - 1 (a zero wraps to the largest value). */
INLINE_Y void stats_y(__m256i v, __m256i *maxv, __m256i *minv)
{
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi32(0x7FFFFFFF));
    *maxv = _mm256_max_epu32(*maxv, mag);
    *minv = _mm256_min_epu32(*minv, _mm256_sub_epi32(mag, _mm256_set1_epi32(1)));
}

#define STATS_Y_INIT(maxv, minv)                                                               \
    __m256i maxv = _mm256_setzero_si256(), minv = _mm256_set1_epi32(-1)

TARGET_Y static void stats_y_finish(__m256i maxv, __m256i minv, struct tpu__exp_stats *st)
{
    uint32_t mx[8], mn[8];
    _mm256_storeu_si256((__m256i *)(void *)mx, maxv);
    _mm256_storeu_si256((__m256i *)(void *)mn, minv);
    uint32_t a = 0, b = UINT32_MAX;
    for (int i = 0; i < 8; i++) {
        a = mx[i] > a ? mx[i] : a;
        b = mn[i] < b ? mn[i] : b;
    }
    st->max_field = a >> 23;
    if (b == UINT32_MAX) {
        st->min_nonzero_field = 255;
    } else {
        unsigned f = (b + 1u) >> 23;
        st->min_nonzero_field = f == 0 ? 1u : f; /* subnormals count as 1 */
    }
}

/* fp32 bits -> the bits of the nearest bf16 (ties to even) as fp32 bits, bf16.h's rule. */
INLINE_Y __m256i round_bf16_y(__m256i u)
{
    __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7F800000)); /* mag >= 0 */
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    r = _mm256_blendv_epi8(r, q, nan);
    return _mm256_and_si256(r, _mm256_set1_epi32((int)0xFFFF0000u));
}

/* Up to 8 stored elements at p (only the first n <= 8 are read; the rest are +0) converted per
 * `conv` (a constant in every caller) to packed fp32 bits, as conv_z in gemm_avx512.c. */
INLINE_Y __m256i conv_y(const void *p, size_t n, const enum tpu__pack_conv conv)
{
    if (conv == TPU__PACK_ZERO)
        return _mm256_setzero_si256();
    if (conv == TPU__PACK_BF16) {
        __m128i h;
        if (n >= 8) {
            h = _mm_loadu_si128((const __m128i *)p);
        } else {
            uint16_t tmp[8] = {0};
            for (size_t i = 0; i < n; i++)
                tmp[i] = ((const uint16_t *)p)[i];
            __builtin_memcpy(&h, tmp, sizeof h);
        }
        return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    }
    __m256 x;
    if (n >= 8) {
        x = _mm256_loadu_ps(p);
    } else {
        __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes);
        x = _mm256_maskload_ps(p, m);
    }
    __m256i hi = round_bf16_y(_mm256_castps_si256(x));
    if (conv == TPU__PACK_F32_HI)
        return hi;
    __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
    __m256i not_finite = _mm256_cmpeq_epi32(_mm256_and_si256(hi, exp_mask), exp_mask);
    __m256 r1 = _mm256_sub_ps(x, _mm256_castsi256_ps(hi));
    __m256i mid = round_bf16_y(_mm256_castps_si256(r1));
    if (conv == TPU__PACK_F32_MID)
        return _mm256_andnot_si256(not_finite, mid);
    __m256 r2 = _mm256_sub_ps(r1, _mm256_castsi256_ps(mid));
    return _mm256_andnot_si256(not_finite, round_bf16_y(_mm256_castps_si256(r2)));
}

/* In-register transpose of 8 x 8 words. */
INLINE_Y void transpose8_y(__m256i r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m256 x = _mm256_castsi256_ps(r[2 * i]), y = _mm256_castsi256_ps(r[2 * i + 1]);
        t[2 * i] = _mm256_unpacklo_ps(x, y);
        t[2 * i + 1] = _mm256_unpackhi_ps(x, y);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* u[4g + c] holds columns c and c + 4 of rows 4g .. 4g + 3 */
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        r[4 + c] = _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}

/* Stores the first n (<= 8) words of v at p. */
INLINE_Y void store_partial_y(float *p, __m256i v, size_t n)
{
    if (n >= 8) {
        _mm256_storeu_si256((__m256i *)(void *)p, v);
        return;
    }
    uint32_t tmp[8];
    _mm256_storeu_si256((__m256i *)(void *)tmp, v);
    __builtin_memcpy(p, tmp, n * 4);
}

INLINE_Y void pack_a_rows_y(const struct tpu__pack_src *s, size_t es, size_t mc, size_t kc,
                            float *ap, size_t lda, __m256i *maxv, __m256i *minv,
                            const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t i = 0; i < mc; i++) {
        const unsigned char *row = p + i * s->ld * es;
        float *out = ap + i * lda;
        for (size_t k = 0; k < kc; k += 8) {
            size_t n = kc - k < 8 ? kc - k : 8;
            __m256i v = conv_y(row + k * es, n, conv);
            stats_y(v, maxv, minv);
            store_partial_y(out + k, v, n);
        }
    }
}

INLINE_Y void pack_a_trans_y(const struct tpu__pack_src *s, size_t es, size_t mc, size_t kc,
                             float *ap, size_t lda, __m256i *maxv, __m256i *minv,
                             const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t i0 = 0; i0 < mc; i0 += 8) {
        const size_t ni = mc - i0 < 8 ? mc - i0 : 8;
        for (size_t k0 = 0; k0 < kc; k0 += 8) {
            const size_t nk = kc - k0 < 8 ? kc - k0 : 8;
            __m256i r[8];
            for (size_t kk = 0; kk < 8; kk++) {
                if (kk < nk) {
                    r[kk] = conv_y(p + ((k0 + kk) * s->ld + i0) * es, ni, conv);
                    stats_y(r[kk], maxv, minv);
                } else {
                    r[kk] = _mm256_setzero_si256();
                }
            }
            transpose8_y(r); /* r[c]: row i0 + c, K values k0 .. k0 + 7 */
            for (size_t c = 0; c < ni; c++)
                store_partial_y(ap + (i0 + c) * lda + k0, r[c], nk);
        }
    }
}

INLINE_Y void pack_b_rows_y(const struct tpu__pack_src *s, size_t es, size_t kc, size_t nc,
                            float *bp, __m256i *maxv, __m256i *minv,
                            const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t k = 0; k < kc; k++) { /* row by row, as pack_b_rows_z */
        const unsigned char *row = p + k * s->ld * es;
        float *out = bp + k * Y_NR;
        for (size_t j0 = 0; j0 < nc; j0 += Y_NR, out += kc * Y_NR) {
            const size_t w = nc - j0;
            const size_t n0 = w < 8 ? w : 8, n1 = w > 8 ? (w - 8 < 8 ? w - 8 : 8) : 0;
            __m256i v0 = conv_y(row + j0 * es, n0, conv);
            __m256i v1 = n1 ? conv_y(row + (j0 + 8) * es, n1, conv) : _mm256_setzero_si256();
            stats_y(v0, maxv, minv);
            stats_y(v1, maxv, minv);
            _mm256_store_si256((__m256i *)(void *)out, v0);
            _mm256_store_si256((__m256i *)(void *)(out + 8), v1);
        }
    }
}

INLINE_Y void pack_b_trans_y(const struct tpu__pack_src *s, size_t es, size_t kc, size_t nc,
                             float *bp, __m256i *maxv, __m256i *minv,
                             const enum tpu__pack_conv conv)
{
    const unsigned char *p = s->p;
    for (size_t j0 = 0; j0 < nc; j0 += Y_NR) {
        float *panel = bp + (j0 / Y_NR) * kc * Y_NR;
        for (size_t k0 = 0; k0 < kc; k0 += 8) {
            const size_t nk = kc - k0 < 8 ? kc - k0 : 8;
            for (size_t h = 0; h < Y_NR; h += 8) {
                const size_t jh = j0 + h, nj = jh < nc ? (nc - jh < 8 ? nc - jh : 8) : 0;
                __m256i r[8];
                for (size_t jj = 0; jj < 8; jj++) {
                    if (jj < nj) {
                        r[jj] = conv_y(p + ((jh + jj) * s->ld + k0) * es, nk, conv);
                        stats_y(r[jj], maxv, minv);
                    } else {
                        r[jj] = _mm256_setzero_si256();
                    }
                }
                transpose8_y(r); /* r[c]: K row k0 + c, columns jh .. jh + 7 */
                for (size_t c = 0; c < nk; c++)
                    _mm256_store_si256((__m256i *)(void *)(panel + (k0 + c) * Y_NR + h), r[c]);
            }
        }
    }
}

TARGET_Y static void pack_a_bf16_y(const struct tpu__pack_src *s, size_t mc, size_t kc,
                                   void *dst, size_t lda, struct tpu__exp_stats *st)
{
    STATS_Y_INIT(maxv, minv);
    if (s->trans && s->conv != TPU__PACK_ZERO) {
        TPU__PACK_DISPATCH(pack_a_trans_y, s, mc, kc, dst, lda, &maxv, &minv)
    } else {
        TPU__PACK_DISPATCH(pack_a_rows_y, s, mc, kc, dst, lda, &maxv, &minv)
    }
    stats_y_finish(maxv, minv, st);
}

TARGET_Y static void pack_b_bf16_y(const struct tpu__pack_src *s, size_t kc, size_t nc,
                                   void *dst, struct tpu__exp_stats *st)
{
    STATS_Y_INIT(maxv, minv);
    if (s->trans && s->conv != TPU__PACK_ZERO) {
        TPU__PACK_DISPATCH(pack_b_trans_y, s, kc, nc, dst, &maxv, &minv)
    } else {
        TPU__PACK_DISPATCH(pack_b_rows_y, s, kc, nc, dst, &maxv, &minv)
    }
    stats_y_finish(maxv, minv, st);
}

INLINE_Y void micro_bf16_y_body(size_t kc, size_t tile, const float *ap, size_t lda,
                                const float *bp, float *c, size_t ldc, unsigned flags,
                                const bool fma, const int mr)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    const __m256 canon_nan =
        _mm256_castsi256_ps(_mm256_set1_epi32((int)TPU_F32_CANONICAL_NAN_BITS));
    for (size_t k0 = 0; k0 < kc; k0 += tile) {
        size_t len = kc - k0 < tile ? kc - k0 : tile;
        __m256 t0[Y_MR], t1[Y_MR];
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            t0[i] = _mm256_setzero_ps();
            t1[i] = _mm256_setzero_ps();
        }
        const float *a = ap + k0;
        const float *b = bp + k0 * Y_NR;
        for (size_t k = 0; k < len; k++) {
            __m256 b0 = _mm256_load_ps(b);
            __m256 b1 = _mm256_load_ps(b + 8);
            b += Y_NR;
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) {
                __m256 ai = _mm256_broadcast_ss(&a[(size_t)i * lda + k]);
                if (fma) {
                    t0[i] = _mm256_fmadd_ps(ai, b0, t0[i]);
                    t1[i] = _mm256_fmadd_ps(ai, b1, t1[i]);
                } else {
                    t0[i] = _mm256_add_ps(t0[i], _mm256_mul_ps(ai, b0));
                    t1[i] = _mm256_add_ps(t1[i], _mm256_mul_ps(ai, b1));
                }
            }
        }
        const bool canon = (flags & TPU__MICRO_CANON_NAN) && k0 + len == kc;
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            float *ci = c + (size_t)i * ldc;
            __m256 v0 = t0[i], v1 = t1[i];
            if (!(store_first && k0 == 0)) {
                v0 = _mm256_add_ps(_mm256_loadu_ps(ci), v0);
                v1 = _mm256_add_ps(_mm256_loadu_ps(ci + 8), v1);
            }
            if (canon) {
                v0 = _mm256_blendv_ps(v0, canon_nan, _mm256_cmp_ps(v0, v0, _CMP_UNORD_Q));
                v1 = _mm256_blendv_ps(v1, canon_nan, _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q));
            }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        }
    }
}

TARGET_Y static void micro_bf16_y_fma(size_t kc, size_t tile, const void *ap, size_t lda,
                                      const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, flags, true, Y_MR);
}

TARGET_Y static void micro_bf16_y_plain(size_t kc, size_t tile, const void *ap, size_t lda,
                                        const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, flags, false, Y_MR);
}

TARGET_Y static void micro_bf16_y4_fma(size_t kc, size_t tile, const void *ap, size_t lda,
                                       const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, flags, true, Y_MR_SHORT);
}

TARGET_Y static void micro_bf16_y4_plain(size_t kc, size_t tile, const void *ap, size_t lda,
                                         const void *bp, void *c, size_t ldc, unsigned flags)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, flags, false, Y_MR_SHORT);
}

const struct tpu__gemm_kernel tpu__gemm_bf16_avx2 = {
    .mr = Y_MR,
    .nr = Y_NR,
    .k_per_word = 1,
    .pack_a = pack_a_bf16_y,
    .pack_b = pack_b_bf16_y,
    .micro = micro_bf16_y_fma,
    .micro_plain = micro_bf16_y_plain,
};

/* The same packing (A's rows are rows of lda words whatever mr is) with micro-tiles of 4
 * rows: for short products (the per-replica batch of many data-parallel replicas, M = 8)
 * that 6-row tiles would pad by half. */
const struct tpu__gemm_kernel tpu__gemm_bf16_avx2_short = {
    .mr = Y_MR_SHORT,
    .nr = Y_NR,
    .k_per_word = 1,
    .pack_a = pack_a_bf16_y,
    .pack_b = pack_b_bf16_y,
    .micro = micro_bf16_y4_fma,
    .micro_plain = micro_bf16_y4_plain,
};

/* ---- int8 ---------------------------------------------------------------------------------- */

static void pack_a_int8_y(const struct tpu__pack_src *s, size_t mc, size_t kc, void *dst,
                          size_t lda, struct tpu__exp_stats *st)
{
    const int8_t *a = s->p;
    const size_t ld = s->ld;
    int16_t *ap = dst;
    (void)st;
    for (size_t i = 0; i < mc; i++) {
        int16_t *out = ap + i * lda * 2;
        for (size_t k = 0; k < kc; k++)
            out[k] = a[i * ld + k];
        if (kc % 2)
            out[kc] = 0;
    }
}

TARGET_Y static void pack_b_int8_y(const struct tpu__pack_src *s, size_t kc, size_t nc,
                                   void *dst, struct tpu__exp_stats *st)
{
    const int8_t *b = s->p;
    const size_t ld = s->ld;
    int16_t *bp = dst;
    (void)st;
    for (size_t j0 = 0; j0 < nc; j0 += Y_NR)
        for (size_t k = 0; k < kc; k += 2) {
            for (size_t j = 0; j < Y_NR; j++) {
                bool in = j0 + j < nc;
                bp[2 * j] = in ? b[k * ld + j0 + j] : 0;
                bp[2 * j + 1] = in && k + 1 < kc ? b[(k + 1) * ld + j0 + j] : 0;
            }
            bp += 2 * Y_NR;
        }
}

TARGET_Y static void micro_int8_y(size_t kc, size_t tile, const void *ap_, size_t lda,
                                  const void *bp_, void *c_, size_t ldc, unsigned flags)
{
    const bool store_first = flags & TPU__MICRO_STORE_FIRST;
    const int16_t *ap = ap_; /* pairs: word p of row i at ap + 2 * (i * lda + p) */
    const int32_t *b = bp_;
    int32_t *c = c_;
    size_t kwords = (kc + 1) / 2;
    __m256i t0[Y_MR_INT8], t1[Y_MR_INT8];
    (void)tile;
#pragma GCC unroll 4
    for (int i = 0; i < Y_MR_INT8; i++) {
        t0[i] = _mm256_setzero_si256();
        t1[i] = _mm256_setzero_si256();
    }
    for (size_t p = 0; p < kwords; p++) {
        __m256i b0 = _mm256_load_si256((const __m256i *)(const void *)b);
        __m256i b1 = _mm256_load_si256((const __m256i *)(const void *)(b + 8));
        b += Y_NR;
#pragma GCC unroll 4
        for (int i = 0; i < Y_MR_INT8; i++) {
            __m256i ai = _mm256_broadcastd_epi32(_mm_loadu_si32(ap + 2 * ((size_t)i * lda + p)));
            t0[i] = _mm256_add_epi32(t0[i], _mm256_madd_epi16(ai, b0));
            t1[i] = _mm256_add_epi32(t1[i], _mm256_madd_epi16(ai, b1));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < Y_MR_INT8; i++) {
        __m256i *ci = (__m256i *)(void *)(c + (size_t)i * ldc);
        if (store_first) {
            _mm256_storeu_si256(ci, t0[i]);
            _mm256_storeu_si256(ci + 1, t1[i]);
        } else {
            _mm256_storeu_si256(ci, _mm256_add_epi32(_mm256_loadu_si256(ci), t0[i]));
            _mm256_storeu_si256(ci + 1, _mm256_add_epi32(_mm256_loadu_si256(ci + 1), t1[i]));
        }
    }
}

const struct tpu__gemm_kernel tpu__gemm_int8_avx2 = {
    .mr = Y_MR_INT8,
    .nr = Y_NR,
    .k_per_word = 2,
    .pack_a = pack_a_int8_y,
    .pack_b = pack_b_int8_y,
    .micro = micro_int8_y,
    .micro_plain = NULL,
};

#endif
