/* The out-of-line helpers of common/util.h: the edit distance behind every "did you mean" hint
 * (chip configuration keys and presets, the program text's names) and the hint's wording, the
 * quoting of user strings in messages, and the temporary-file-then-rename protocol of the files
 * the simulator and the host write whole (timelines, .npy arrays). Which candidate counts as
 * close enough for a hint is each caller's own rule; this file only measures and words. The
 * diagnostics (tpu__fail) are in error.c. Checkpoints have their own protocol, with a fault
 * hook at each stage (host/io/checkpoint.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Where and how an atomic write goes: the state behind tpu__atomic_open's *tmp, one
 * allocation holding two strings, "<temporary>\0<final path>\0"; the temporary is empty for
 * a direct write (a device or a FIFO). */
static char *make_state(const char *tmp_name, const char *final_path)
{
    size_t lt = strlen(tmp_name), lf = strlen(final_path);
    char *st = malloc(lt + lf + 2);
    if (st) {
        memcpy(st, tmp_name, lt + 1);
        memcpy(st + lt + 1, final_path, lf + 1);
    }
    return st;
}

/* The file a symbolic link finally names, into *out (new memory), following a chain of
 * links; the last one may be dangling (the file is then created there). *direct is set when
 * the chain goes through /proc (/dev/stdout -> /proc/self/fd/1 -> a file the shell
 * opened): that file is written in place, as a redirection would, not replaced. */
static int resolve_link(const char *path, char **out, bool *direct, struct tpu_diag *d)
{
    *direct = false;
    char *cur = strdup(path);
    if (!cur)
        return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
    for (int hops = 0; hops < 40; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
            *out = cur; /* a file, or nothing yet: write there */
            return 0;
        }
        char target[4096];
        ssize_t n = readlink(cur, target, sizeof target - 1);
        if (n < 0 || (size_t)n >= sizeof target - 1) {
            char qp[TPU__QUOTE_PATH_BYTES], qc[TPU__QUOTE_PATH_BYTES];
            int rc = tpu__fail(d, TPU_EIO, "cannot write '%s': cannot read the symbolic link "
                               "'%s': %s", tpu__quote(path, qp, sizeof qp),
                               tpu__quote(cur, qc, sizeof qc),
                               n < 0 ? strerror(errno) : "its target is too long");
            free(cur);
            return rc;
        }
        target[n] = '\0';
        if (!strncmp(target, "/proc/", 6)) {
            *direct = true;
            *out = cur;
            return 0;
        }
        char *next;
        const char *slash = strrchr(cur, '/');
        if (target[0] == '/' || !slash) {
            next = strdup(target);
        } else { /* relative to the link's own directory */
            size_t dir = (size_t)(slash - cur) + 1;
            next = malloc(dir + (size_t)n + 1);
            if (next) {
                memcpy(next, cur, dir);
                memcpy(next + dir, target, (size_t)n + 1);
            }
        }
        free(cur);
        if (!next)
            return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
        cur = next;
    }
    free(cur);
    char qp[TPU__QUOTE_PATH_BYTES];
    return tpu__fail(d, TPU_EIO, "cannot write '%s': %s", tpu__quote(path, qp, sizeof qp),
                     strerror(ELOOP));
}

int tpu__atomic_open(const char *path, const char *mode, FILE **f, char **tmp,
                     struct tpu_diag *d)
{
    *f = NULL;
    *tmp = NULL;
    char qp[TPU__QUOTE_PATH_BYTES];
    const char *raw_path = path;
    path = tpu__quote(raw_path, qp, sizeof qp); /* for messages */
    struct stat st;
    if (stat(raw_path, &st) == 0 && S_ISDIR(st.st_mode))
        return tpu__fail(d, TPU_EIO, "cannot write '%s': it is a directory; give a file name "
                         "(such as '%s/out')", path, path);
    char *final_path = NULL;
    bool direct = false;
    if (stat(raw_path, &st) == 0 && !S_ISREG(st.st_mode))
        direct = true; /* a device, FIFO or socket: a rename would replace it with a file */
    else {
        int rc = resolve_link(raw_path, &final_path, &direct, d);
        if (rc)
            return rc;
        if (direct) {
            free(final_path);
            final_path = NULL;
        }
    }
    if (direct) {
        *tmp = make_state("", raw_path);
        if (!*tmp)
            return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
        *f = fopen(raw_path, mode);
        if (!*f) {
            int rc = tpu__fail(d, TPU_EIO, "cannot open '%s' for writing: %s", path,
                               strerror(errno));
            free(*tmp);
            *tmp = NULL;
            return rc;
        }
        return 0;
    }
    bool exists = stat(final_path, &st) == 0;
    size_t cap = strlen(final_path) + 32;
    char *tmp_name = malloc(cap);
    if (!tmp_name) {
        free(final_path);
        return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
    }
    snprintf(tmp_name, cap, "%s.tmp%ld", final_path, (long)getpid());
    *tmp = make_state(tmp_name, final_path);
    free(final_path);
    if (!*tmp) {
        free(tmp_name);
        return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", path);
    }
    *f = fopen(tmp_name, mode);
    if (!*f) {
        char qt[TPU__QUOTE_PATH_BYTES];
        int rc = tpu__fail(d, TPU_EIO, "cannot create '%s': %s",
                           tpu__quote(tmp_name, qt, sizeof qt), strerror(errno));
        free(tmp_name);
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    if (exists) /* keep the permissions of the file being replaced; best effort */
        (void)fchmod(fileno(*f), st.st_mode & 07777);
    free(tmp_name);
    return 0;
}

int tpu__atomic_commit(FILE *f, char *tmp, const char *path, bool ok, struct tpu_diag *d)
{
    const bool direct = tmp[0] == '\0';
    const char *final_path = tmp + strlen(tmp) + 1;
    int err = ok ? 0 : errno; /* of the first failure, a write's if `ok` came in false */
    if (ok && ferror(f)) {
        ok = false;
        err = EIO;
    }
    if (ok && fflush(f) != 0) {
        ok = false;
        err = errno;
    }
    /* a terminal or a pipe cannot be synced (EINVAL): nothing to make durable there */
    if (ok && fsync(fileno(f)) != 0 && !(direct && (errno == EINVAL || errno == EROFS ||
                                                    errno == ENOTSUP))) {
        ok = false;
        err = errno;
    }
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && !direct && rename(tmp, final_path) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok && !direct)
        unlink(tmp);
    free(tmp);
    char qp[TPU__QUOTE_PATH_BYTES];
    if (!ok)
        return tpu__fail(d, TPU_EIO, "cannot write '%s': %s", tpu__quote(path, qp, sizeof qp),
                         strerror(err ? err : EIO));
    return 0;
}

/* The length of the well-formed UTF-8 character at p (at most len bytes), or 0 if the bytes
 * there are not one (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_char_bytes(const unsigned char *p, size_t len)
{
    unsigned char c = p[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else
        return 0;
    if (len < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    if (n == 2 && c == 0xC2 && p[1] <= 0x9F)
        return 0; /* U+0080-U+009F, the C1 control characters */
    return n;
}

/* The escaped form of the character at p[0..len) into piece (at most 7 bytes and a NUL);
 * returns how many input bytes it covers. */
static size_t quote_piece(const unsigned char *p, size_t len, char piece[8])
{
    size_t u = p[0] >= 0x80 ? utf8_char_bytes(p, len) : 0;
    if (u) {
        memcpy(piece, p, u);
        piece[u] = '\0';
        return u;
    }
    if (p[0] < 0x20 || p[0] >= 0x7F)
        snprintf(piece, 8, "\\x%02X", (unsigned)p[0]);
    else
        snprintf(piece, 8, "%c", (char)p[0]);
    return 1;
}

const char *tpu__quote_n(const char *s, size_t len, char *buf, size_t n)
{
    if (!s) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    const unsigned char *p = (const unsigned char *)s;
    char piece[8];
    size_t total = 0;
    for (size_t i = 0; i < len && total < n;) {
        i += quote_piece(p + i, len - i, piece);
        total += strlen(piece);
    }
    const size_t room = total < n ? n - 1 : n - 4; /* bytes before "..." if it is cut */
    size_t used = 0;
    for (size_t i = 0; i < len;) {
        size_t k = quote_piece(p + i, len - i, piece);
        size_t w = strlen(piece);
        if (used + w > room)
            break;
        memcpy(buf + used, piece, w);
        used += w;
        i += k;
    }
    if (total < n)
        buf[used] = '\0';
    else
        memcpy(buf + used, "...", 4);
    return buf;
}

const char *tpu__quote(const char *s, char *buf, size_t n)
{
    return tpu__quote_n(s, s ? strlen(s) : 0, buf, n);
}

uint64_t tpu__fnv1a_words(uint64_t h, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        h = (h ^ w) * UINT64_C(0x100000001b3);
    }
    for (; i < bytes; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}
