/* An input function over an in-memory dataset: shuffled, endless and resumable for
 * training, one ordered pass for evaluation and prediction (dataset_input.c). */
#ifndef TPUSIM_HOST_DATASET_INPUT_H
#define TPUSIM_HOST_DATASET_INPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/dataset.h"
#include "tpusim/runtime.h"

struct tpu__dataset_input {
    struct tpu_input input;      /* give &in->input to the estimator */
    const struct tpu_dataset *ds; /* borrowed: must outlive the input */
    uint64_t seed;
    uint64_t max_examples;       /* training stream length; 0: endless */
    uint64_t pos;                /* the next example of the stream */
    uint32_t *perm;              /* the current epoch's order */
    uint64_t perm_epoch;
};

/* x is the first infeed tensor; labels (train, eval) the second. */
void tpu__dataset_input_init(struct tpu__dataset_input *in, const struct tpu_dataset *ds,
                             uint64_t seed);
void tpu__dataset_input_free(struct tpu__dataset_input *in);

#endif
