/* Internal helpers shared by the files of sim/ (and host/): diagnostics, checked arithmetic,
 * the "did you mean" hints of error messages and writing a file atomically. Not part of the
 * public API. */
#ifndef TPUSIM_SIM_UTIL_H
#define TPUSIM_SIM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/error.h"

#if defined(__GNUC__)
#define TPU__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TPU__PRINTF(f, a)
#endif

/* Writes the sentence into d (if not NULL) and returns code. */
int tpu__fail(struct tpu_diag *d, int code, const char *fmt, ...) TPU__PRINTF(3, 4);

/* Edit distance (insertions, deletions, substitutions) between two strings, for "did you
 * mean" hints. A string longer than 63 characters is never close: SIZE_MAX. (util.c) */
size_t tpu__edit_distance(const char *a, const char *b);

/* Writes " (did you mean 'best'?)" into buf[0..n), or "" when best is NULL. (util.c) */
void tpu__did_you_mean(const char *best, char *buf, size_t n);

/* Writing a whole file atomically. tpu__atomic_open creates "<path>.tmp<pid>" with fopen's
 * `mode` and returns 0 with *f open on it and *tmp its name (new memory), or fails with
 * "cannot create '<tmp>': <reason>" and *f, *tmp NULL. The caller writes to *f, then passes
 * f and tmp (which it no longer owns) to tpu__atomic_commit with `ok` false if a write
 * failed: the file is flushed, fsynced, closed and renamed over path, or on any failure
 * removed, with "cannot write '<path>': <reason of the first failure>". (util.c) */
int tpu__atomic_open(const char *path, const char *mode, FILE **f, char **tmp,
                     struct tpu_diag *d);
int tpu__atomic_commit(FILE *f, char *tmp, const char *path, bool ok, struct tpu_diag *d);

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
