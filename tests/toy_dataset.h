/* A small labelled dataset for the runtime's tests: 16 features as a 4x4 "image", 4
 * classes; feature j is about 1 when j % 4 is the class, about 0 otherwise (noise in
 * [-0.3, 0.3) from a generator seeded with `seed`), so a small MLP learns it in a few
 * steps. The caller frees it with tpu_dataset_free. */
#ifndef TPUSIM_TESTS_TOY_DATASET_H
#define TPUSIM_TESTS_TOY_DATASET_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/dataset.h"

enum { TOY_FEATURES = 16, TOY_CLASSES = 4 };

static inline void toy_dataset(struct tpu_dataset *ds, uint32_t n, uint32_t seed)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->n_features = TOY_FEATURES;
    ds->image_rows = 4;
    ds->image_cols = 4;
    ds->n_classes = TOY_CLASSES;
    ds->x = malloc((size_t)n * TOY_FEATURES * sizeof *ds->x);
    ds->y = malloc((size_t)n * sizeof *ds->y);
    assert_non_null(ds->x);
    assert_non_null(ds->y);
    uint32_t r = seed * 2654435761u + 1;
    for (uint32_t i = 0; i < n; i++) {
        ds->y[i] = (int32_t)(i * 7 % TOY_CLASSES);
        for (uint32_t j = 0; j < TOY_FEATURES; j++) {
            r = r * 1103515245u + 12345u;
            float noise = (float)((r >> 16) % 1000) / 1000.0f * 0.6f - 0.3f;
            ds->x[(size_t)i * TOY_FEATURES + j] = (j % TOY_CLASSES == (uint32_t)ds->y[i]) + noise;
        }
    }
}

#endif
