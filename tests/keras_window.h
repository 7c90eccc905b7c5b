/* Keras's output size and leading padding along one axis of a window op: 'same' (out =
 * ceil(in / stride), the padding split with the smaller half before) or 'valid' (out =
 * (in - k) / stride + 1, no padding). */
#ifndef TPUSIM_TESTS_KERAS_WINDOW_H
#define TPUSIM_TESTS_KERAS_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

static inline void keras_axis(uint32_t in, uint32_t k, uint32_t stride, bool same, uint32_t *out,
                              uint32_t *pad_before)
{
    if (same) {
        *out = (in + stride - 1) / stride;
        int64_t pad = (int64_t)(*out - 1) * stride + k - in;
        *pad_before = pad > 0 ? (uint32_t)(pad / 2) : 0;
    } else {
        *out = (in - k) / stride + 1;
        *pad_before = 0;
    }
}

#endif
