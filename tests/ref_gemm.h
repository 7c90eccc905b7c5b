/* The naive reference for the bf16 GEMM, shared by the tests of the kernels (test_gemm.c)
 * and of the ops that use them (test_ops.c). It follows include/tpusim/mxu.h's NUMERICS
 * literally and is written independently of sim/kernels/gemm.c. Test-only. */
#ifndef TPUSIM_TESTS_REF_GEMM_H
#define TPUSIM_TESTS_REF_GEMM_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "tpusim/bf16.h"

static inline float ref_canon(float x)
{
    return isnan(x) ? tpu_f32_from_bits(TPU_F32_CANONICAL_NAN_BITS) : x;
}

/* y[m][n] per mxu.h. `volatile` keeps each product and sum a separately rounded fp32 value
 * (and -ffp-contract=off keeps them unfused). */
static inline void ref_gemm_bf16(const tpu_bf16 *a, const tpu_bf16 *b, float *y, size_t m, size_t k,
                          size_t n, size_t r, bool accumulate)
{
    const tpu_bf16 zero = {0};
    size_t n_tiles = (k + r - 1) / r;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            volatile float acc = accumulate ? ref_canon(y[i * n + j]) : 0.0f;
            for (size_t kt = 0; kt < n_tiles; kt++) {
                volatile float t = 0.0f; /* +0 enters the top of the column */
                for (size_t row = 0; row < r; row++) {
                    size_t kk = kt * r + row; /* padding rows hold real zeros */
                    tpu_bf16 av = kk < k ? a[i * k + kk] : zero;
                    tpu_bf16 wv = kk < k ? b[kk * n + j] : zero;
                    volatile float p = tpu_bf16_to_f32(av) * tpu_bf16_to_f32(wv);
                    t = t + p;
                }
                t = ref_canon(t); /* the column output */
                if (kt == 0 && !accumulate)
                    acc = t;
                else
                    acc = acc + t;
                acc = ref_canon(acc); /* the accumulator output */
            }
            y[i * n + j] = acc;
        }
}

#endif
