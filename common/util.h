/* Internal helpers shared by every layer (sim/, host/, rtl/, cli/): diagnostics, checked
 * arithmetic, the "did you mean" hints of error messages and writing a file atomically. Not
 * part of the public API. */
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

/* Writing a whole file atomically. tpu__atomic_open picks how from what path is:
 *  - missing or a regular file: a temporary "<path>.tmp<pid>" in the same directory, renamed
 *    over path by tpu__atomic_commit (so a reader sees the old file or the new one, never
 *    half of one); an existing file's permission bits are kept;
 *  - a symbolic link (or a chain of them): the same, on the file the link points to (the
 *    temporary goes in the target's directory); the link stays a link;
 *  - anything else that exists and is not a directory (a device such as /dev/null or
 *    /dev/stdout, a FIFO, a socket), or a link through /proc (/dev/stdout redirected to a
 *    file): opened and written directly, no temporary, no rename;
 *  - a directory: fails with "'<path>' is a directory; ...".
 * It returns 0 with *f open (fopen's `mode`) and *tmp the writer's state (new memory, opaque:
 * the temporary's name and the final path), or fails with a sentence and *f, *tmp NULL.
 * The caller writes to *f, then passes f and tmp (which it no longer owns) to
 * tpu__atomic_commit with `ok` false if a write failed: the file is flushed, fsynced, closed
 * and renamed into place, or on any failure (including a write error fprintf left in f)
 * removed, with "cannot write '<path>': <reason of the first failure>". (util.c) */
int tpu__atomic_open(const char *path, const char *mode, FILE **f, char **tmp,
                     struct tpu_diag *d);
int tpu__atomic_commit(FILE *f, char *tmp, const char *path, bool ok, struct tpu_diag *d);

/* A user's string made safe to put in a message: printable ASCII and well-formed UTF-8 stay
 * as they are; control characters (newline, tab, ESC, DEL, the C1 range) and bytes that are
 * not well-formed UTF-8 become \xNN, so a message stays one line of valid UTF-8 and shows
 * exactly which byte was wrong. (A backslash stays as it is: paths and JSON escapes read
 * naturally, at the price of "\x0A" typed literally looking like an escaped newline.) The result is
 * cut to fit buf[0..n) and then ends in "..." (never in the middle of an escape or a UTF-8
 * character). tpu__quote_n reads len bytes (NUL bytes included, as \x00). Both return buf;
 * n must be at least 8. A NULL s gives "(null)". (util.c) */
#define TPU__QUOTE_BYTES 96       /* a buf size for names and values */
#define TPU__QUOTE_PATH_BYTES 256 /* for paths: room for the rest of a TPU_DIAG_MAX message */
/* 64-bit FNV-1a over 8-byte words (the tail byte by byte), from h (TPU__FNV1A_BASIS to
 * start): a cheap fingerprint to tell two copies apart (the ranks' data sets, their
 * programs), not a guard against anyone. */
#define TPU__FNV1A_BASIS UINT64_C(0xcbf29ce484222325)
uint64_t tpu__fnv1a_words(uint64_t h, const void *data, size_t bytes);

const char *tpu__quote(const char *s, char *buf, size_t n);
const char *tpu__quote_n(const char *s, size_t len, char *buf, size_t n);

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
