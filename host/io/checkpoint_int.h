/* Internal interface between the two files of the checkpoint module: host/io/checkpoint.c
 * (saving: atomic writes, the index, keep_max) and host/io/checkpoint_read.c (loading and
 * inspecting a file, with every check on it). include/tpusim/checkpoint.h documents the
 * format, tpusim's checksum extension in __metadata__ and the crash-safety protocol. What
 * both files need is here: the dtype table, concat and u64_parse are defined in checkpoint.c,
 * the checks of the caller's tensors in checkpoint_read.c. Not part of the public API. */
#ifndef TPUSIM_HOST_CHECKPOINT_INT_H
#define TPUSIM_HOST_CHECKPOINT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <zlib.h>

#include "tpusim/checkpoint.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "tensors are written in host byte order, and safetensors data is little-endian"
#endif

#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"
#define TMP_SUFFIX ".tmp"
#define FORMAT_ID "tpusim-checkpoint-v1"
#define FORMAT_PREFIX "tpusim-checkpoint-v"
#define RESERVED_PREFIX "tpusim."
#define KEY_FORMAT "tpusim.format"
#define KEY_STEP "tpusim.global_step"
#define KEY_DATA_CRC "tpusim.data_crc32"
#define KEY_CRC_PREFIX "tpusim.crc32."
/* The reference implementation refuses larger headers. */
#define MAX_HEADER_BYTES 100000000u

/* The safetensors names of the dtypes, indexed by enum tpu_dtype: tpu__ckpt_dtypes[0 ..
 * tpu__ckpt_n_dtypes). Their sizes are tpu_dtype_bytes (dtype.h). */
struct tpu__ckpt_dtype {
    const char *name; /* "F32", "BF16", "I8", "I32" */
};
extern const struct tpu__ckpt_dtype tpu__ckpt_dtypes[];
extern const size_t tpu__ckpt_n_dtypes;

static inline bool tpu__ckpt_dtype_valid(enum tpu_dtype t)
{
    return (unsigned)t < tpu__ckpt_n_dtypes;
}

/* Checks the caller's tensors: names unique, non-empty, UTF-8 and not "__metadata__"; known
 * dtypes; shapes of at least [1, 1] whose size fits this host; data not NULL. `what` starts
 * each message ("checkpoint save"). */
int tpu__ckpt_validate_tensors(const struct tpu_tensor *t, size_t n, const char *what,
                               struct tpu_diag *d);

/* Whether s is valid UTF-8 (safetensors names and metadata are UTF-8 strings). */
bool tpu__ckpt_utf8_valid(const char *s);

/* fopen(path, "rb") that never blocks: a FIFO or device named like a checkpoint or the index
 * opens at once (and fails the caller's regular-file check) instead of waiting for a
 * writer. NULL with errno set on failure. */
FILE *tpu__ckpt_fopen_read(const char *path);

/* a + b in new memory (the caller frees it), or NULL when out of memory. */
char *tpu__ckpt_concat(const char *a, const char *b);

/* s[0..len) as a decimal number without sign or leading zeros that fits in 64 bits. */
bool tpu__ckpt_u64_parse(const char *s, size_t len, uint64_t *out);

/* Whether the file name `name` (no directory) is "ckpt-<step>.safetensors" (tmp false) or
 * the same + ".tmp" (tmp true), with the step into *step. Any step that fits in 64 bits is
 * parsed; the caller checks it against TPU_CHECKPOINT_MAX_STEP. */
bool tpu__ckpt_name_parse(const char *name, bool tmp, uint64_t *step);

static inline bool tpu__ckpt_starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The size of a tensor that passed tpu__ckpt_validate_tensors. */
static inline size_t tpu__ckpt_tensor_bytes(const struct tpu_tensor *t)
{
    return (size_t)t->rows * t->cols * tpu_dtype_bytes(t->dtype);
}

/* zlib's CRC-32 of p[0..n) (the checksum of the format). */
static inline uint32_t tpu__ckpt_crc32(const void *p, size_t n)
{
    return (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), p, n);
}

#endif
