/* bfloat16: the matrix unit's input type.
 *
 * A bf16 is the top 16 bits of an IEEE-754 binary32: sign, 8 exponent bits, 7 fraction bits.
 * It is its own type so that a raw uint16_t is never mistaken for one.
 *
 * Conversion from fp32 rounds to nearest, ties to even, on the 16 dropped bits:
 *   - finite values round normally; a value that rounds past the largest finite bf16
 *     (0x7F7F, 3.3895e38) becomes +-Inf;
 *   - subnormal fp32 values round to bf16 subnormals (bf16 has fp32's exponent range, so
 *     there is no flush to zero); the smallest fp32 subnormals round to +-0;
 *   - +-Inf stay +-Inf;
 *   - NaN stays NaN with its sign and the top 7 fraction bits, and is made quiet (the
 *     fraction's top bit is set), so a NaN never turns into Inf.
 * Conversion to fp32 is exact (append 16 zero bits). */
#ifndef TPUSIM_BF16_H
#define TPUSIM_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_bf16 {
    uint16_t bits;
} tpu_bf16;

static inline uint32_t tpu_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tpu_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline tpu_bf16 tpu_bf16_from_f32(float f)
{
    uint32_t u = tpu_f32_bits(f);
    tpu_bf16 r;
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
        r.bits = (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign and payload top, quiet */
        return r;
    }
    /* round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate */
    u += 0x7FFFu + ((u >> 16) & 1u);
    r.bits = (uint16_t)(u >> 16);
    return r;
}

static inline float tpu_bf16_to_f32(tpu_bf16 b)
{
    return tpu_f32_from_bits((uint32_t)b.bits << 16);
}

/* The canonical NaN every matrix-unit result NaN is replaced by (see mxu.h). */
#define TPU_F32_CANONICAL_NAN_BITS 0x7FC00000u

#ifdef __cplusplus
}
#endif
#endif
