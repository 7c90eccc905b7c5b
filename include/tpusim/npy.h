/* NumPy .npy files: the 2-D arrays `tpusim gemm` reads operands from and dumps results to,
 * and the arrays of any rank that datasets are made of (tpu_npy_read_array).
 *
 * Reads format versions 1.0, 2.0 and 3.0 with C order and dtypes float32 ('<f4'), int8
 * ('|i1' or '<i1') and int32 ('<i4'); writes version 1.0. Anything else (Fortran order,
 * big-endian, other dtypes, not 2-D, a truncated or overlong data section) is rejected with
 * a sentence naming the file, what it holds and what would be accepted. The size a header
 * declares is checked against the file's before anything is allocated for the data (a pipe,
 * which has no size, is read into a buffer that grows with the bytes that arrive). */
#ifndef TPUSIM_NPY_H
#define TPUSIM_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/dtype.h"
#include "tpusim/error.h"


struct tpu_npy {
    enum tpu_dtype dtype;
    size_t rows, cols;
    void *data; /* [rows][cols] row-major; owned by the struct, freed by tpu_npy_free */
};

const char *tpu_npy_dtype_name(enum tpu_dtype t);

/* Reads a 2-D array. On failure *out is untouched and nothing stays allocated. */
int tpu_npy_read(const char *path, struct tpu_npy *out, struct tpu_diag *d);

/* Writes [rows][cols] from data atomically (temporary file, fsync, rename; a device or a
 * FIFO is written directly and a symbolic link's target replaced: tpu__atomic_open). */
int tpu_npy_write(const char *path, enum tpu_dtype dtype, size_t rows, size_t cols,
                   const void *data, struct tpu_diag *d);

/* Frees the data and zeroes the struct. Accepts NULL. */
void tpu_npy_free(struct tpu_npy *a);

/* An array of 1 to TPU_NPY_MAX_DIMS dimensions, read as it is stored. */
#define TPU_NPY_MAX_DIMS 8
struct tpu_npy_array {
    char kind;              /* 'u' unsigned integer, 'i' signed integer, 'f' float */
    unsigned item_bytes;    /* 1, 2, 4 or 8 */
    const char *dtype_name; /* NumPy's name: "uint8", "float32", ... (static storage) */
    unsigned n_dims;
    uint64_t dims[TPU_NPY_MAX_DIMS];
    void *data; /* little-endian, C order; owned by the struct, freed by tpu_npy_array_free */
};

/* Reads an array of any rank from 1 to 8 with dtype uint8 ('|u1'), int8, int16, int32,
 * int64, float32 or float64, little-endian, C order; the same checks and messages as
 * tpu_npy_read otherwise (a zero dimension or a 0-d array fails with TPU_ESHAPE). On
 * failure *out is untouched and nothing stays allocated. */
int tpu_npy_read_array(const char *path, struct tpu_npy_array *out, struct tpu_diag *d);

/* Frees the data and zeroes the struct. Accepts NULL. */
void tpu_npy_array_free(struct tpu_npy_array *a);

#endif
