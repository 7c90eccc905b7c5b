/* An input function over an in-memory dataset (host/data/dataset_input.c): shuffled,
 * endless and resumable for training, one ordered pass for evaluation and prediction. */
#ifndef TPUSIM_DATASET_INPUT_H
#define TPUSIM_DATASET_INPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/dataset.h"
#include "tpusim/runtime.h"

struct tpu_dataset_input {
    struct tpu_input input;      /* give &in->input to the estimator */
    const struct tpu_dataset *ds; /* borrowed: must outlive the input */
    uint64_t seed;
    uint64_t max_examples;       /* training stream length; 0: endless */
    uint64_t pos;                /* the next example of the stream */
    uint32_t *perm;              /* the current epoch's order */
    uint64_t perm_epoch;
};

/* x is the first infeed tensor; labels (train, eval) the second, or for a dataset of
 * targets the targets and a row mask (net.h's infeed order). */
void tpu_dataset_input_init(struct tpu_dataset_input *in, const struct tpu_dataset *ds,
                             uint64_t seed);
void tpu_dataset_input_free(struct tpu_dataset_input *in);

#endif
