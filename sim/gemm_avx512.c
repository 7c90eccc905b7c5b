/* AVX-512 kernels of the GEMM driver in gemm.c: packing (with the exponent statistics that
 * decide whether FMA is exact) and register-blocked micro-kernels for bf16 -> fp32 and
 * int8 -> int32. Buffer layouts and the kernel contract are in gemm_int.h; why the FMA
 * kernel gives the definition's bits is in gemm.c. Compiled for x86-64 only; the functions
 * carry target attributes and run only after the driver has checked the CPU.
 *
 * bf16 micro-tile: 12 rows x 32 columns of C = 24 zmm column-sum registers; per k: two
 * vector loads of B, twelve broadcasts of A (fused into the FMA or multiply as memory
 * operands), 24 FMAs (or 24 multiplies and 24 adds). Each lane is one output's column sum,
 * updated in k order, so the vector code performs the definition's operations exactly. */
#include "gemm_int.h"

#if TPU__GEMM_HAVE_X86
#include <immintrin.h>

#define TARGET_Z __attribute__((target("avx512f,avx512bw,avx512vl")))
#define INLINE_Z static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vl")))

enum { Z_MR = 12, Z_NR = 32, Z_MR_INT8 = 8 };

/* ---- exponent statistics on 32 bf16 in one zmm --------------------------------------- */

INLINE_Z void stats_z(__m512i v, __m512i *maxv, __m512i *minv)
{
    __m512i field = _mm512_and_si512(_mm512_srli_epi16(v, 7), _mm512_set1_epi16(0xFF));
    *maxv = _mm512_max_epu16(*maxv, field);
    __mmask32 nz = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
    __m512i g = _mm512_max_epu16(field, _mm512_set1_epi16(1));
    *minv = _mm512_mask_min_epu16(*minv, nz, *minv, g);
}

TARGET_Z static void stats_z_finish(__m512i maxv, __m512i minv, struct tpu__exp_stats *st)
{
    uint16_t mx[32], mn[32];
    _mm512_storeu_si512(mx, maxv);
    _mm512_storeu_si512(mn, minv);
    unsigned a = 0, b = 255;
    for (int i = 0; i < 32; i++) {
        a = mx[i] > a ? mx[i] : a;
        b = mn[i] < b ? mn[i] : b;
    }
    st->max_field = a;
    st->min_nonzero_field = b;
}

/* 32 bf16 -> two fp32 vectors (append 16 zero bits). */
INLINE_Z void widen_z(__m512i v, __m512 *lo, __m512 *hi)
{
    __m512i l = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
    __m512i h = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
    *lo = _mm512_castsi512_ps(_mm512_slli_epi32(l, 16));
    *hi = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

INLINE_Z __mmask32 mask32(size_t n)
{
    return n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u);
}

/* ---- bf16 packing ------------------------------------------------------------------------ */

TARGET_Z static void pack_a_bf16_z(const void *src, size_t ld, size_t mc, size_t kc, void *dst,
                                   size_t lda, struct tpu__exp_stats *st)
{
    const uint16_t *a = src;
    float *ap = dst;
    __m512i maxv = _mm512_setzero_si512(), minv = _mm512_set1_epi16(255);
    for (size_t i = 0; i < mc; i++) {
        const uint16_t *row = a + i * ld;
        float *out = ap + i * lda;
        size_t k = 0;
        for (; k + 32 <= kc; k += 32) {
            __m512i v = _mm512_loadu_si512(row + k);
            __m512 lo, hi;
            stats_z(v, &maxv, &minv);
            widen_z(v, &lo, &hi);
            _mm512_storeu_ps(out + k, lo);
            _mm512_storeu_ps(out + k + 16, hi);
        }
        if (k < kc) {
            size_t rem = kc - k;
            __m512i v = _mm512_maskz_loadu_epi16(mask32(rem), row + k);
            __m512 lo, hi;
            stats_z(v, &maxv, &minv);
            widen_z(v, &lo, &hi);
            _mm512_mask_storeu_ps(out + k, (__mmask16)mask32(rem), lo);
            if (rem > 16)
                _mm512_mask_storeu_ps(out + k + 16, (__mmask16)mask32(rem - 16), hi);
        }
    }
    stats_z_finish(maxv, minv, st);
}

TARGET_Z static void pack_b_bf16_z(const void *src, size_t ld, size_t kc, size_t nc, void *dst,
                                   struct tpu__exp_stats *st)
{
    const uint16_t *b = src;
    float *bp = dst;
    __m512i maxv = _mm512_setzero_si512(), minv = _mm512_set1_epi16(255);
    for (size_t j0 = 0; j0 < nc; j0 += Z_NR) {
        __mmask32 m = mask32(nc - j0);
        for (size_t k = 0; k < kc; k++) {
            __m512i v = _mm512_maskz_loadu_epi16(m, b + k * ld + j0);
            __m512 lo, hi;
            stats_z(v, &maxv, &minv);
            widen_z(v, &lo, &hi);
            _mm512_store_ps(bp, lo);
            _mm512_store_ps(bp + 16, hi);
            bp += Z_NR;
        }
    }
    stats_z_finish(maxv, minv, st);
}

/* ---- bf16 micro-kernels ------------------------------------------------------------------ */

/* `fma` is a compile-time constant in each caller. The multiply + add form uses the
 * explicit-rounding intrinsics so that no compiler setting could fuse the pair. */
INLINE_Z void micro_bf16_z_body(size_t kc, size_t tile, const float *ap, size_t lda,
                                const float *bp, float *c, size_t ldc, bool store_first,
                                const bool fma)
{
    for (size_t k0 = 0; k0 < kc; k0 += tile) {
        size_t len = kc - k0 < tile ? kc - k0 : tile;
        __m512 t0[Z_MR], t1[Z_MR];
#pragma GCC unroll 12
        for (int i = 0; i < Z_MR; i++) {
            t0[i] = _mm512_setzero_ps();
            t1[i] = _mm512_setzero_ps();
        }
        const float *a = ap + k0;
        const float *b = bp + k0 * Z_NR;
        for (size_t k = 0; k < len; k++) {
            __m512 b0 = _mm512_load_ps(b);
            __m512 b1 = _mm512_load_ps(b + 16);
            b += Z_NR;
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                __m512 ai = _mm512_set1_ps(a[(size_t)i * lda + k]);
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
        }
        if (store_first && k0 == 0) {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                _mm512_storeu_ps(c + (size_t)i * ldc, t0[i]);
                _mm512_storeu_ps(c + (size_t)i * ldc + 16, t1[i]);
            }
        } else {
#pragma GCC unroll 12
            for (int i = 0; i < Z_MR; i++) {
                float *ci = c + (size_t)i * ldc;
                _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), t0[i]));
                _mm512_storeu_ps(ci + 16, _mm512_add_ps(_mm512_loadu_ps(ci + 16), t1[i]));
            }
        }
    }
}

TARGET_Z static void micro_bf16_z_fma(size_t kc, size_t tile, const void *ap, size_t lda,
                                      const void *bp, void *c, size_t ldc, bool store_first)
{
    micro_bf16_z_body(kc, tile, ap, lda, bp, c, ldc, store_first, true);
}

TARGET_Z static void micro_bf16_z_plain(size_t kc, size_t tile, const void *ap, size_t lda,
                                        const void *bp, void *c, size_t ldc, bool store_first)
{
    micro_bf16_z_body(kc, tile, ap, lda, bp, c, ldc, store_first, false);
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
TARGET_Z static void pack_a_int8_z(const void *src, size_t ld, size_t mc, size_t kc, void *dst,
                                   size_t lda, struct tpu__exp_stats *st)
{
    const int8_t *a = src;
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

TARGET_Z static void pack_b_int8_z(const void *src, size_t ld, size_t kc, size_t nc, void *dst,
                                   struct tpu__exp_stats *st)
{
    const int8_t *b = src;
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
                                  const void *bp_, void *c_, size_t ldc, bool store_first)
{
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
