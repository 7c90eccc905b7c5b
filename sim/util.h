/* Internal helpers shared by the files of sim/ (and host/): diagnostics and checked
 * arithmetic. Not part of the public API. */
#ifndef TPUSIM_SIM_UTIL_H
#define TPUSIM_SIM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"

#if defined(__GNUC__)
#define TPU__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TPU__PRINTF(f, a)
#endif

/* Writes the sentence into d (if not NULL) and returns code. */
int tpu__fail(struct tpu_diag *d, int code, const char *fmt, ...) TPU__PRINTF(3, 4);

/* a*b into *out; false on overflow. */
static inline bool tpu__mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *out = a * b;
    return true;
}

static inline uint64_t tpu__ceil_div_u64(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static inline uint64_t tpu__max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

#endif
