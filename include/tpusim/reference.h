/* The fp32 reference trainer for the MLP (host/models/reference.c): the same model, data
 * order and optimizer as the chip, in fp32 on the host, for comparing accuracies. */
#ifndef TPUSIM_REFERENCE_H
#define TPUSIM_REFERENCE_H

#include <stdint.h>

#include "tpusim/dataset.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"

struct tpu_reference_result {
    uint64_t steps;
    double final_loss;     /* mean loss of the last step's batch */
    double test_accuracy;
};

/* Trains `spec` for `steps` steps of `global_batch` examples from `input` (started at step
 * 0), initialized like the estimator with `seed`, then measures accuracy on `test`. */
int tpu_reference_train(const struct tpu_mlp_spec *spec, const struct tpu_model *model,
                         struct tpu_input *input, const struct tpu_dataset *test,
                         uint64_t steps, uint32_t global_batch, uint64_t seed,
                         struct tpu_reference_result *out, struct tpu_diag *d);

#endif
