/* Reading and writing NumPy .npy files (see npy.h). The header is a Python dict literal;
 * only the three keys NumPy writes are read, and the parse is strict about them. Two
 * readers share the parse: the 2-D matrices of `tpusim gemm` (tpu_npy_read) and the arrays
 * of 1 to 8 dimensions and more dtypes that datasets are made of (tpu_npy_read_array). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tpusim/npy.h"
#include "util.h"

/* Every descr either reader takes; matrix: tpu_npy_read takes it too (as dtype). */
static const struct {
    const char *descr;
    const char *name;
    char kind;
    unsigned bytes;
    bool matrix;
    enum tpu_dtype dtype;
} dtypes[] = {
    {"<f4", "float32", 'f', 4, true, TPU_F32},
    {"|i1", "int8", 'i', 1, true, TPU_INT8},
    {"<i1", "int8", 'i', 1, true, TPU_INT8},
    {"<i4", "int32", 'i', 4, true, TPU_INT32},
    {"|u1", "uint8", 'u', 1, false, TPU_F32},
    {"<u1", "uint8", 'u', 1, false, TPU_F32},
    {"<i2", "int16", 'i', 2, false, TPU_F32},
    {"<i8", "int64", 'i', 8, false, TPU_F32},
    {"<f8", "float64", 'f', 8, false, TPU_F32},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

/* What the header says: the dtypes[] entry, the rank and the dimensions. */
struct parsed {
    size_t dt;
    int n_dims;
    unsigned long long dims[TPU_NPY_MAX_DIMS];
};

/* "(5,)", "(2, 3)" or "(60000, 28, 28)": the shape as Python prints it. */
static void shape_text(const struct parsed *h, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < h->n_dims && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%llu", i ? ", " : "", h->dims[i]);
    if (at < size)
        snprintf(buf + at, size - at, "%s)", h->n_dims == 1 ? "," : "");
}

const char *tpu_npy_dtype_name(enum tpu_dtype t)
{
    switch (t) {
    case TPU_F32:
        return "float32";
    case TPU_INT8:
        return "int8";
    case TPU_INT32:
        return "int32";
    case TPU_BF16: /* NumPy has no bf16 */
        break;
    }
    return "?";
}

/* Finds the quoted key in the header dict and returns a pointer just past its colon. */
static const char *find_key(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

/* Parses the header dict. matrix: tpu_npy_read's rules (2-D, its three dtypes); else
 * tpu_npy_read_array's (1 to TPU_NPY_MAX_DIMS dimensions, every dtype of dtypes[]). */
static int parse_header(const char *path, const char *hdr, bool matrix, struct parsed *out,
                        struct tpu_diag *d)
{
    const char *p = find_key(hdr, "descr");
    if (!p || *p != '\'')
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header has no 'descr' entry", path);
    p++;
    const char *end = strchr(p, '\'');
    if (!end || end - p > 16)
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header's 'descr' is malformed", path);
    char descr[20], qd[TPU__QUOTE_BYTES];
    memcpy(descr, p, (size_t)(end - p));
    descr[end - p] = '\0';
    size_t i;
    for (i = 0; i < N_DTYPES; i++)
        if (!strcmp(descr, dtypes[i].descr) && (dtypes[i].matrix || !matrix))
            break;
    if (i == N_DTYPES && matrix)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: holds dtype '%s'; tpusim reads little-endian float32 ('<f4'), "
                         "int8 ('|i1') or int32 ('<i4') (numpy: a.astype('<f4'))",
                         path, tpu__quote(descr, qd, sizeof qd));
    if (i == N_DTYPES)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: holds dtype '%s'; tpusim reads little-endian uint8 ('|u1'), "
                         "int8 ('|i1'), int16 ('<i2'), int32 ('<i4'), int64 ('<i8'), float32 "
                         "('<f4') or float64 ('<f8') (numpy: a.astype('<f4'))",
                         path, tpu__quote(descr, qd, sizeof qd));
    out->dt = i;

    p = find_key(hdr, "fortran_order");
    if (!p)
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header has no 'fortran_order' entry",
                         path);
    if (!strncmp(p, "True", 4))
        return tpu__fail(d, TPU_EPARSE,
                         "%s: is stored in Fortran (column-major) order; save it in C order "
                         "(numpy: np.save(f, np.ascontiguousarray(a)))",
                         path);
    if (strncmp(p, "False", 5))
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header's 'fortran_order' is malformed",
                         path);

    p = find_key(hdr, "shape");
    if (!p || *p != '(')
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header has no 'shape' entry", path);
    p++;
    unsigned long long *dims = out->dims;
    const int max_dims = matrix ? 3 : TPU_NPY_MAX_DIMS;
    int n = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == ')')
            break;
        if (n == max_dims || *p < '0' || *p > '9')
            return n == max_dims && matrix
                       ? tpu__fail(d, TPU_ESHAPE,
                                   "%s: has more than 2 dimensions; tpusim needs a 2-D matrix",
                                   path)
                   : n == max_dims
                       ? tpu__fail(d, TPU_ESHAPE, "%s: has more than %d dimensions; a dataset "
                                   "array has at most 4 (N, h, w, c)", path, TPU_NPY_MAX_DIMS)
                       : tpu__fail(d, TPU_EPARSE, "%s: the .npy header's 'shape' is malformed",
                                   path);
        char *e;
        errno = 0;
        dims[n++] = strtoull(p, &e, 10);
        if (errno)
            return tpu__fail(d, TPU_EPARSE, "%s: a dimension in 'shape' is too large", path);
        p = e;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
    }
    out->n_dims = n;
    if (matrix && n != 2)
        return tpu__fail(d, TPU_ESHAPE,
                         "%s: has %d dimension%s; tpusim needs a 2-D matrix (numpy: "
                         "a.reshape(rows, cols))",
                         path, n, n == 1 ? "" : "s");
    if (matrix && (dims[0] == 0 || dims[1] == 0))
        return tpu__fail(d, TPU_ESHAPE, "%s: has shape (%llu, %llu); both dimensions must be "
                         "at least 1", path, dims[0], dims[1]);
    if (n == 0)
        return tpu__fail(d, TPU_ESHAPE, "%s: holds a single value (shape ()); a dataset array "
                         "has one row per example (numpy: a.reshape(-1))", path);
    for (int k = 0; k < n; k++) {
        char st[160];
        shape_text(out, st, sizeof st);
        if (dims[k] == 0)
            return tpu__fail(d, TPU_ESHAPE, "%s: has shape %s; every dimension must be at "
                             "least 1", path, st);
    }
    return 0;
}

/* The data section into a new buffer (*out, owned by the caller) of exactly `bytes` bytes;
 * *got is how many the file had (fewer means truncated). The buffer grows with the bytes
 * actually read, never ahead of them, so a header that declares a huge shape costs nothing
 * before the file is seen to be too short (a FIFO or a device has no size to check first). */
static int read_data(FILE *f, const char *path, size_t bytes, void **out, size_t *got,
                     struct tpu_diag *d)
{
    const size_t first = (size_t)16 << 20;
    size_t cap = bytes < first ? bytes : first, have = 0;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return tpu__fail(d, TPU_ENOMEM, "out of memory: '%s' needs %zu bytes", path, cap);
    for (;;) {
        size_t n = fread(buf + have, 1, cap - have, f);
        have += n;
        if (have < cap || have == bytes)
            break;
        size_t next = cap <= bytes / 2 ? cap * 2 : bytes;
        unsigned char *grown = realloc(buf, next);
        if (!grown) {
            free(buf);
            return tpu__fail(d, TPU_ENOMEM, "out of memory: '%s' needs %zu bytes", path, next);
        }
        buf = grown;
        cap = next;
    }
    *out = buf;
    *got = have;
    return 0;
}

/* The preamble (magic, version, header length) and the header of an .npy file open at f,
 * into *hdr (NUL-terminated, the caller frees it); *hlen is its length and *hstart the
 * preamble's. file_bytes is the file's length (UINT64_MAX: not known, a FIFO say). path is
 * the quoted path, for messages. */
static int read_header(FILE *f, const char *path, uint64_t file_bytes, char **hdr,
                       size_t *hlen, size_t *hstart, struct tpu_diag *d)
{
    unsigned char pre[12];
    size_t got = fread(pre, 1, 10, f);
    if (got == 0)
        return tpu__fail(d, TPU_EPARSE, "%s: is empty; a NumPy .npy file starts with \\x93NUMPY "
                         "and a header (save the array with numpy.save)", path);
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return tpu__fail(d, TPU_EPARSE, "%s: is not a NumPy .npy file (it does not start with "
                         "\\x93NUMPY); save the array with numpy.save", path);
    unsigned major = pre[6];
    if (major == 1) {
        *hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        *hstart = 10;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2)
            return tpu__fail(d, TPU_EPARSE, "%s: the .npy header is truncated", path);
        *hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
                (size_t)pre[11] << 24;
        *hstart = 12;
    } else {
        return tpu__fail(d, TPU_EPARSE, "%s: is .npy format version %u; tpusim reads 1, 2 and "
                         "3", path, major);
    }
    if (*hlen > (1u << 20))
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header claims %zu bytes, more than 1 MiB",
                         path, *hlen);
    if (file_bytes != UINT64_MAX && file_bytes < *hstart + *hlen)
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header is truncated: it claims %zu bytes "
                         "after the %zu-byte preamble, the file has %lld bytes in all", path,
                         *hlen, *hstart, (long long)file_bytes);
    *hdr = malloc(*hlen + 1);
    if (!*hdr)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
    if (fread(*hdr, 1, *hlen, f) != *hlen)
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header is truncated", path);
    (*hdr)[*hlen] = '\0';
    const char *nul = memchr(*hdr, '\0', *hlen);
    if (nul)
        return tpu__fail(d, TPU_EPARSE, "%s: the .npy header holds a NUL byte at byte offset "
                         "%zu; a header is ASCII text", path, *hstart + (size_t)(nul - *hdr));
    return 0;
}

/* Reads the file at path (header, data, nothing after it) under parse_header's rules; on
 * success *data is the data section (owned by the caller) and *h what the header said. */
static int read_npy(const char *path, bool matrix, struct parsed *h, void **data_out,
                    struct tpu_diag *d)
{
    char qp[TPU__QUOTE_PATH_BYTES];
    tpu__quote(path, qp, sizeof qp);
    FILE *f = fopen(path, "rb");
    if (!f)
        return tpu__fail(d, TPU_EIO, "cannot open '%s': %s", qp, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return tpu__fail(d, TPU_EIO, "cannot read '%s': %s", qp, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        return tpu__fail(d, TPU_EIO, "'%s' is a directory; give a NumPy .npy file (written "
                         "by numpy.save)", qp);
    }
    const bool sized = S_ISREG(st.st_mode); /* st_size is the file's length */
    path = qp;
    int rc = 0;
    char *hdr = NULL;
    void *data = NULL;
    size_t hlen = 0, hstart = 0, got = 0;
    if ((rc = read_header(f, path, sized ? (uint64_t)st.st_size : UINT64_MAX, &hdr, &hlen,
                          &hstart, d)))
        goto out;
    rc = parse_header(path, hdr, matrix, h, d);
    if (rc)
        goto out;
    char shape[200];
    shape_text(h, shape, sizeof shape);
    const char *name = dtypes[h->dt].name;
    size_t bytes = dtypes[h->dt].bytes;
    bool fits = true;
    for (int k = 0; k < h->n_dims; k++)
        fits = fits && h->dims[k] <= SIZE_MAX && tpu__mul_size(bytes, (size_t)h->dims[k], &bytes);
    if (!fits) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s: shape %s of %s is more than 2^64 bytes; "
                       "the header is corrupt", path, shape, name);
        goto out;
    }
    /* the declared size against the real one, before allocating anything for it */
    if (sized && (uint64_t)st.st_size - (hstart + hlen) < bytes) {
        rc = tpu__fail(d, TPU_EPARSE,
                       "%s: is truncated: shape %s of %s needs %zu data bytes after "
                       "the %zu-byte header, the file has %llu",
                       path, shape, name, bytes, hstart + hlen,
                       (unsigned long long)((uint64_t)st.st_size - (hstart + hlen)));
        goto out;
    }
    if ((rc = read_data(f, path, bytes, &data, &got, d)))
        goto out;
    if (got != bytes) {
        rc = tpu__fail(d, TPU_EPARSE,
                       "%s: is truncated: shape %s of %s needs %zu data bytes after "
                       "the %zu-byte header, the file has %zu",
                       path, shape, name, bytes, hstart + hlen, got);
        goto out;
    }
    if (fgetc(f) != EOF) {
        rc = tpu__fail(d, TPU_EPARSE,
                       "%s: has bytes after the data that shape %s of %s accounts for; "
                       "the file is damaged or not a single array",
                       path, shape, name);
        goto out;
    }
    *data_out = data;
    data = NULL;
out:
    free(data);
    free(hdr);
    fclose(f);
    return rc;
}

int tpu_npy_read(const char *path, struct tpu_npy *out, struct tpu_diag *d)
{
    struct parsed h;
    void *data = NULL;
    int rc = read_npy(path, true, &h, &data, d);
    if (rc)
        return rc;
    out->dtype = dtypes[h.dt].dtype;
    out->rows = (size_t)h.dims[0];
    out->cols = (size_t)h.dims[1];
    out->data = data;
    return 0;
}

int tpu_npy_read_array(const char *path, struct tpu_npy_array *out, struct tpu_diag *d)
{
    struct parsed h;
    void *data = NULL;
    int rc = read_npy(path, false, &h, &data, d);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->kind = dtypes[h.dt].kind;
    out->item_bytes = dtypes[h.dt].bytes;
    out->dtype_name = dtypes[h.dt].name;
    out->n_dims = (unsigned)h.n_dims;
    for (int k = 0; k < h.n_dims; k++)
        out->dims[k] = h.dims[k];
    out->data = data;
    return 0;
}

void tpu_npy_array_free(struct tpu_npy_array *a)
{
    if (a) {
        free(a->data);
        memset(a, 0, sizeof *a);
    }
}

int tpu_npy_write(const char *path, enum tpu_dtype dtype, size_t rows, size_t cols,
                   const void *data, struct tpu_diag *d)
{
    if (dtype != TPU_F32 && dtype != TPU_INT8 && dtype != TPU_INT32)
        return tpu__fail(d, TPU_EINVAL, "cannot write %s to '%s': .npy files hold f32, int8 "
                         "or int32 (convert the array first)", tpu_dtype_name(dtype), path);
    const char *descr = dtype == TPU_F32 ? "<f4" : dtype == TPU_INT8 ? "|i1" : "<i4";
    char dict[160];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (%zu, %zu), }", descr,
                     rows, cols);
    /* total header (10-byte preamble + dict + padding + '\n') is a multiple of 64 */
    size_t hlen = (size_t)n + 1;
    hlen += (64 - (10 + hlen) % 64) % 64;
    size_t count, bytes;
    if (!tpu__mul_size(rows, cols, &count) || !tpu__mul_size(count, tpu_dtype_bytes(dtype), &bytes))
        return tpu__fail(d, TPU_EINVAL, "array (%zu, %zu) is too large to write", rows, cols);

    FILE *f;
    char *tmp;
    int rc = tpu__atomic_open(path, "wb", &f, &tmp, d);
    if (rc)
        return rc;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = (size_t)n; ok && i + 1 < hlen; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(data, 1, bytes, f) == bytes;
    return tpu__atomic_commit(f, tmp, path, ok, d);
}

void tpu_npy_free(struct tpu_npy *a)
{
    if (a) {
        free(a->data);
        *a = (struct tpu_npy){0};
    }
}
