/* NumPy .npy files: the 2-D arrays `tpusim gemm` reads operands from and dumps results to.
 *
 * Reads format versions 1.0, 2.0 and 3.0 with C order and dtypes float32 ('<f4'), int8
 * ('|i1' or '<i1') and int32 ('<i4'); writes version 1.0. Anything else (Fortran order,
 * big-endian, other dtypes, not 2-D, a truncated or overlong data section) is rejected with
 * a sentence naming the file, what it holds and what would be accepted. The size a header
 * declares is checked against the file's before anything is allocated for the data (a pipe,
 * which has no size, is read into a buffer that grows with the bytes that arrive). */
#ifndef TPUSIM_NPY_H
#define TPUSIM_NPY_H

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

#endif
