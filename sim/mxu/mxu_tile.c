/* One weight tile through the matrix unit, value by value: the definition of the array's
 * numerics (include/tpusim/mxu.h), written to be read rather than to be fast. The RTL
 * cosimulation compares against these functions; the fast GEMM kernels in gemm.c must give
 * the same bits. Each column output is the partial sum that leaves the bottom of the array:
 * it starts as +0 at the top and gains one rounded product per row, top to bottom. */
#include <math.h>

#include "tpusim/mxu.h"

static float canonical_nan(float x)
{
    return isnan(x) ? tpu_f32_from_bits(TPU_F32_CANONICAL_NAN_BITS) : x;
}

void tpu_mxu_tile_bf16(uint32_t rows, uint32_t cols, const tpu_bf16 *w, const tpu_bf16 *in,
                       uint64_t m_rows, float *out)
{
    for (uint64_t m = 0; m < m_rows; m++) {
        const tpu_bf16 *a = in + m * rows; /* [rows] */
        for (uint32_t j = 0; j < cols; j++) {
            float psum = 0.0f; /* +0 enters the top of every column */
            for (uint32_t i = 0; i < rows; i++) {
                /* two statements: the product is rounded to fp32 before the add */
                float p = tpu_bf16_to_f32(a[i]) * tpu_bf16_to_f32(w[(size_t)i * cols + j]);
                psum = psum + p;
            }
            out[m * cols + j] = canonical_nan(psum);
        }
    }
}

void tpu_mxu_tile_int8(uint32_t rows, uint32_t cols, const int8_t *w, const int8_t *in,
                       uint64_t m_rows, int32_t *out)
{
    for (uint64_t m = 0; m < m_rows; m++) {
        const int8_t *a = in + m * rows; /* [rows] */
        for (uint32_t j = 0; j < cols; j++) {
            uint32_t psum = 0; /* unsigned: two's-complement wrap-around without UB */
            for (uint32_t i = 0; i < rows; i++)
                psum += (uint32_t)((int32_t)a[i] * (int32_t)w[(size_t)i * cols + j]);
            out[m * cols + j] = (int32_t)psum;
        }
    }
}
