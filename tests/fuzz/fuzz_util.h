/* Helpers shared by the fuzz targets (one libFuzzer program per parser of user input; see
 * tests/fuzz/README.md).
 *
 * Most parsers are reached the way the CLI reaches them, through a path, so a target writes
 * its input into a file in a fresh directory made with mkdtemp, calls the parser, and
 * removes both again: nothing is left behind and nothing is shared between inputs. A failure
 * of the helpers themselves (a full disk) aborts with a message, so it cannot pass for a
 * finding in silence. */
#ifndef TPUSIM_FUZZ_UTIL_H
#define TPUSIM_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpusim/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A scratch directory and the files written into it (at most FUZZ_MAX_FILES). */
#define FUZZ_MAX_FILES 4
struct fuzz_dir {
    char path[256];
    char files[FUZZ_MAX_FILES][320];
    int n_files;
};

static inline void fuzz_die(const char *what, const char *path)
{
    fprintf(stderr, "fuzz harness: %s '%s' failed\n", what, path);
    abort();
}

/* Makes a fresh directory under $TMPDIR (or /tmp). */
static inline void fuzz_dir_open(struct fuzz_dir *dir)
{
    const char *tmp = getenv("TMPDIR");
    memset(dir, 0, sizeof *dir);
    snprintf(dir->path, sizeof dir->path, "%s/tpusim-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir->path))
        fuzz_die("mkdtemp", dir->path);
}

/* Writes data[0 .. size) into dir/name and returns its path (owned by dir). */
static inline const char *fuzz_dir_write(struct fuzz_dir *dir, const char *name,
                                         const uint8_t *data, size_t size)
{
    if (dir->n_files == FUZZ_MAX_FILES)
        fuzz_die("adding a file to", dir->path);
    char *path = dir->files[dir->n_files++];
    snprintf(path, sizeof dir->files[0], "%s/%s", dir->path, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        fuzz_die("creating", path);
    bool written = size == 0 || fwrite(data, 1, size, f) == size;
    if (fclose(f) != 0 || !written)
        fuzz_die("writing", path);
    return path;
}

/* Removes the files and the directory. */
static inline void fuzz_dir_close(struct fuzz_dir *dir)
{
    for (int i = 0; i < dir->n_files; i++)
        if (unlink(dir->files[i]) != 0)
            fuzz_die("removing", dir->files[i]);
    if (rmdir(dir->path) != 0)
        fuzz_die("removing the directory", dir->path);
}

/* The input as a NUL-terminated string (malloc'd; the caller frees it). Like the CLI, which
 * reads a whole file into a string, the text ends at the first NUL byte. */
static inline char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        fuzz_die("malloc for", "the input");
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Every failure that reaches a user must carry a negative code and a sentence; a parser that
 * fails without one is a finding like a crash. */
static inline void fuzz_check_diag(const char *call, int rc, const struct tpu_diag *d)
{
    if (rc > 0 || (rc < 0 && d->msg[0] == '\0')) {
        fprintf(stderr, "fuzz harness: %s returned %d with the message \"%s\"; a failure "
                "must be negative and explain itself\n", call, rc, d->msg);
        abort();
    }
}

#endif
