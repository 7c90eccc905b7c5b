/* The IDX reader's entry point for the files of host/ that need images of one shape (the
 * Fashion-MNIST loader in dataset.c). Not part of the public API. */
#ifndef TPUSIM_HOST_IDX_H
#define TPUSIM_HOST_IDX_H

#include <stdint.h>

#include "tpusim/dataset.h"

/* tpu_dataset_load_idx(), and if image_rows is not 0, the images must be image_rows x
 * image_cols: checked from the image file's header before any data is read, else
 * TPU_ESHAPE with a sentence naming the file, the shape found and the shape needed, then
 * "; <fix>" if fix is not NULL. Ownership as tpu_dataset_load_idx(). (idx.c) */
int tpu__dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                          uint32_t image_rows, uint32_t image_cols, const char *fix,
                          struct tpu_dataset *out, struct tpu_diag *d);

#endif
