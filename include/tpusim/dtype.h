/* Data types: the one enumeration of the element types tpusim knows, and their sizes.
 *
 * Device buffers hold f32, bf16, int8 or int32 elements; the matrix unit multiplies bf16 x
 * bf16 or int8 x int8 (and f32 as 1, 3 or 6 bf16 passes); .npy files and checkpoints store
 * f32, int8 and int32 (and bf16 for checkpoints). Every part of the project uses this enum and
 * tpu_dtype_bytes. Text forms differ by format and stay each format's own: the program text
 * says "f32" (tpu_dtype_name), `tpusim gemm` and chip configurations "fp32"
 * (tpu_gemm_dtype_name, mxu.h), NumPy "float32" (npy.h), safetensors "F32" (checkpoint.h). */
#ifndef TPUSIM_DTYPE_H
#define TPUSIM_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tpu_dtype {
    TPU_F32 = 0,
    TPU_BF16,
    TPU_INT8,
    TPU_INT32,
};

#define TPU_DTYPE_COUNT 4

/* A set of data types as bits (a chip's matrix-unit types, config.h). */
#define TPU_DTYPE_BIT(t) (1u << (unsigned)(t))

/* "f32", "bf16", "int8", "int32" (the device program's text); "unknown" out of range. */
const char *tpu_dtype_name(enum tpu_dtype t);

/* The inverse of tpu_dtype_name. Returns 0, or TPU_ENOTFOUND (error.h) for another name. */
int tpu_dtype_parse(const char *name, enum tpu_dtype *out);

/* Bytes per element: 4, 2, 1, 4; 0 out of range. */
size_t tpu_dtype_bytes(enum tpu_dtype t);

#ifdef __cplusplus
}
#endif
#endif
