/* What the files of host/data share and the public API does not show: the IDX reader's entry
 * point for callers that need images of one shape (the Fashion-MNIST loader in dataset.c),
 * and the decoding of typed array elements that the IDX and NumPy readers both use
 * (values.c). Not part of the public API. */
#ifndef TPUSIM_HOST_IDX_H
#define TPUSIM_HOST_IDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/dataset.h"

/* tpu_dataset_load_idx(), and if image_rows is not 0, the images must be image_rows x
 * image_cols: checked from the image file's header before any data is read, else
 * TPU_ESHAPE with a sentence naming the file, the shape found and the shape needed, then
 * "; <fix>" if fix is not NULL. Ownership as tpu_dataset_load_idx(). (idx.c) */
int tpu__dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                          uint32_t image_rows, uint32_t image_cols, const char *fix,
                          struct tpu_dataset *out, struct tpu_diag *d);

/* The same reading any MNIST-format set (tpu_dataset_load_idx_set()); `fix`, if not NULL,
 * ends the message of a shape that differs from like's. (idx.c) */
int tpu__dataset_load_idx_set(const char *images_path, const char *labels_path,
                              const struct tpu_dataset *like, const char *fix,
                              struct tpu_dataset *out, struct tpu_diag *d);

/* ---- typed elements (values.c) -------------------------------------------------------------- */

/* The element types of IDX files and of the NumPy arrays a dataset takes. */
enum tpu__elem {
    TPU__ELEM_U8,
    TPU__ELEM_I8,
    TPU__ELEM_I16,
    TPU__ELEM_I32,
    TPU__ELEM_I64,
    TPU__ELEM_F32,
    TPU__ELEM_F64,
};

size_t tpu__elem_bytes(enum tpu__elem e);
bool tpu__elem_is_float(enum tpu__elem e);

/* Converts n elements at src (big-endian if big, else little-endian) into dst[0 .. n):
 * unsigned bytes as byte/255.0f (correctly rounded), integers as the nearest float, float32
 * as it is, float64 rounded to the nearest float. Fails with TPU_ERANGE on the first value
 * that is not finite after conversion: "<file>: <what> <index> is <value>; ...". what names
 * an element ("value at index"). */
int tpu__elem_to_float(const unsigned char *src, enum tpu__elem e, bool big, size_t n,
                       float *dst, const char *file, struct tpu_diag *d);

/* Reads element i (an integer type) as int64. */
int64_t tpu__elem_int(const unsigned char *src, enum tpu__elem e, bool big, size_t i);

/* The shape h x w x c as text: "28x28" when c is 1 and h > 1 or w > 1, "28x28x3", or "784"
 * for a flat vector (1 x 1 x F). */
void tpu__shape_text(struct tpu_shape s, char *buf, size_t size);

#endif
