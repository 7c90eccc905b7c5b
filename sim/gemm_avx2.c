/* AVX2 + FMA kernels of the GEMM driver in gemm.c, for x86-64 CPUs without AVX-512: the
 * same packing, statistics and micro-kernel contract as gemm_avx512.c (see gemm_int.h) with
 * 256-bit vectors. bf16 micro-tile: 6 rows x 16 columns = 12 ymm column sums; int8: 4 x 16
 * with int16 pairs and VPMADDWD. The multiply + add kernel relies on the project-wide
 * -ffp-contract=off (AVX2 has no explicit-rounding intrinsics); the tests would see a fused
 * pair, as they compare it bit for bit on data where fusing changes results. */
#include "gemm_int.h"

#if TPU__GEMM_HAVE_X86
#include <immintrin.h>

#define TARGET_Y __attribute__((target("avx2,fma")))
#define INLINE_Y static inline __attribute__((always_inline, target("avx2,fma")))

enum { Y_MR = 6, Y_NR = 16, Y_MR_INT8 = 4 };

INLINE_Y void stats_y(__m256i v, __m256i *maxv, __m256i *minv)
{
    __m256i field = _mm256_and_si256(_mm256_srli_epi16(v, 7), _mm256_set1_epi16(0xFF));
    *maxv = _mm256_max_epu16(*maxv, field);
    /* zero values (all bits but the sign clear) count as 255 for the minimum */
    __m256i mag = _mm256_and_si256(v, _mm256_set1_epi16(0x7FFF));
    __m256i is_zero = _mm256_cmpeq_epi16(mag, _mm256_setzero_si256());
    __m256i g = _mm256_max_epu16(field, _mm256_set1_epi16(1));
    g = _mm256_or_si256(g, _mm256_and_si256(is_zero, _mm256_set1_epi16(255)));
    *minv = _mm256_min_epu16(*minv, g);
}

TARGET_Y static void stats_y_finish(__m256i maxv, __m256i minv, struct tpu__exp_stats *st)
{
    uint16_t mx[16], mn[16];
    _mm256_storeu_si256((__m256i *)(void *)mx, maxv);
    _mm256_storeu_si256((__m256i *)(void *)mn, minv);
    unsigned a = 0, b = 255;
    for (int i = 0; i < 16; i++) {
        a = mx[i] > a ? mx[i] : a;
        b = mn[i] < b ? mn[i] : b;
    }
    st->max_field = a;
    st->min_nonzero_field = b;
}

INLINE_Y void widen_y(__m256i v, __m256 *lo, __m256 *hi)
{
    __m256i l = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(v));
    __m256i h = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(l, 16));
    *hi = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

/* 16 bf16 from p, of which only the first n (< 16) exist; the rest read as 0. */
INLINE_Y __m256i load_partial_y(const uint16_t *p, size_t n)
{
    uint16_t tmp[16] = {0};
    for (size_t i = 0; i < n; i++)
        tmp[i] = p[i];
    __m256i v;
    __builtin_memcpy(&v, tmp, sizeof v);
    return v;
}

TARGET_Y static void pack_a_bf16_y(const void *src, size_t ld, size_t mc, size_t kc, void *dst,
                                   size_t lda, struct tpu__exp_stats *st)
{
    const uint16_t *a = src;
    float *ap = dst;
    __m256i maxv = _mm256_setzero_si256(), minv = _mm256_set1_epi16(255);
    for (size_t i = 0; i < mc; i++) {
        const uint16_t *row = a + i * ld;
        float *out = ap + i * lda;
        size_t k = 0;
        for (; k + 16 <= kc; k += 16) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + k));
            __m256 lo, hi;
            stats_y(v, &maxv, &minv);
            widen_y(v, &lo, &hi);
            _mm256_storeu_ps(out + k, lo);
            _mm256_storeu_ps(out + k + 8, hi);
        }
        if (k < kc) {
            __m256i v = load_partial_y(row + k, kc - k);
            __m256 w[2];
            stats_y(v, &maxv, &minv);
            widen_y(v, &w[0], &w[1]);
            float tmp[16];
            _mm256_storeu_ps(tmp, w[0]);
            _mm256_storeu_ps(tmp + 8, w[1]);
            for (size_t j = 0; j < kc - k; j++)
                out[k + j] = tmp[j];
        }
    }
    stats_y_finish(maxv, minv, st);
}

TARGET_Y static void pack_b_bf16_y(const void *src, size_t ld, size_t kc, size_t nc, void *dst,
                                   struct tpu__exp_stats *st)
{
    const uint16_t *b = src;
    float *bp = dst;
    __m256i maxv = _mm256_setzero_si256(), minv = _mm256_set1_epi16(255);
    for (size_t j0 = 0; j0 < nc; j0 += Y_NR) {
        size_t w = nc - j0;
        for (size_t k = 0; k < kc; k++) {
            const uint16_t *p = b + k * ld + j0;
            __m256i v = w >= Y_NR ? _mm256_loadu_si256((const __m256i *)(const void *)p)
                                  : load_partial_y(p, w);
            __m256 lo, hi;
            stats_y(v, &maxv, &minv);
            widen_y(v, &lo, &hi);
            _mm256_store_ps(bp, lo);
            _mm256_store_ps(bp + 8, hi);
            bp += Y_NR;
        }
    }
    stats_y_finish(maxv, minv, st);
}

INLINE_Y void micro_bf16_y_body(size_t kc, size_t tile, const float *ap, size_t lda,
                                const float *bp, float *c, size_t ldc, bool store_first,
                                const bool fma)
{
    for (size_t k0 = 0; k0 < kc; k0 += tile) {
        size_t len = kc - k0 < tile ? kc - k0 : tile;
        __m256 t0[Y_MR], t1[Y_MR];
#pragma GCC unroll 6
        for (int i = 0; i < Y_MR; i++) {
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
            for (int i = 0; i < Y_MR; i++) {
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
#pragma GCC unroll 6
        for (int i = 0; i < Y_MR; i++) {
            float *ci = c + (size_t)i * ldc;
            if (store_first && k0 == 0) {
                _mm256_storeu_ps(ci, t0[i]);
                _mm256_storeu_ps(ci + 8, t1[i]);
            } else {
                _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), t0[i]));
                _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), t1[i]));
            }
        }
    }
}

TARGET_Y static void micro_bf16_y_fma(size_t kc, size_t tile, const void *ap, size_t lda,
                                      const void *bp, void *c, size_t ldc, bool store_first)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, store_first, true);
}

TARGET_Y static void micro_bf16_y_plain(size_t kc, size_t tile, const void *ap, size_t lda,
                                        const void *bp, void *c, size_t ldc, bool store_first)
{
    micro_bf16_y_body(kc, tile, ap, lda, bp, c, ldc, store_first, false);
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

/* ---- int8 ---------------------------------------------------------------------------------- */

static void pack_a_int8_y(const void *src, size_t ld, size_t mc, size_t kc, void *dst,
                          size_t lda, struct tpu__exp_stats *st)
{
    const int8_t *a = src;
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

TARGET_Y static void pack_b_int8_y(const void *src, size_t ld, size_t kc, size_t nc, void *dst,
                                   struct tpu__exp_stats *st)
{
    const int8_t *b = src;
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
                                  const void *bp_, void *c_, size_t ldc, bool store_first)
{
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
