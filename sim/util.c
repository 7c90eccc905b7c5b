/* The out-of-line helpers of sim/util.h: the edit distance behind every "did you mean" hint
 * (chip configuration keys and presets, the program text's names) and the hint's wording,
 * and the temporary-file-then-rename protocol of the files the simulator and the host write
 * whole (timelines, .npy arrays). Which candidate counts as close enough for a hint is each
 * caller's own rule; this file only measures and words. The diagnostics (tpu__fail) are in
 * error.c. Checkpoints have their own protocol, with a fault hook at each stage
 * (host/checkpoint.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

size_t tpu__edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64]; /* row[j]: distance between a[0..i) and b[0..j) */
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void tpu__did_you_mean(const char *best, char *buf, size_t n)
{
    if (best)
        snprintf(buf, n, " (did you mean '%s'?)", best);
    else if (n)
        buf[0] = '\0';
}

int tpu__atomic_open(const char *path, const char *mode, FILE **f, char **tmp,
                     struct tpu_diag *d)
{
    *f = NULL;
    size_t cap = strlen(path) + 32;
    *tmp = malloc(cap);
    if (!*tmp)
        return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
    snprintf(*tmp, cap, "%s.tmp%ld", path, (long)getpid());
    *f = fopen(*tmp, mode);
    if (!*f) {
        int rc = tpu__fail(d, TPU_EIO, "cannot create '%s': %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    return 0;
}

int tpu__atomic_commit(FILE *f, char *tmp, const char *path, bool ok, struct tpu_diag *d)
{
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno; /* of the first failure, a write's if `ok` came in false */
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        if (ok)
            err = errno;
        unlink(tmp);
        free(tmp);
        return tpu__fail(d, TPU_EIO, "cannot write '%s': %s", path, strerror(err));
    }
    free(tmp);
    return 0;
}
