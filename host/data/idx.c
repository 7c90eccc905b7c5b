/* Reading MNIST-format IDX files into a struct tpu_dataset (see tpusim/dataset.h for the
 * format and the contract of tpu_dataset_load_idx()).
 *
 * A file is plain or gzip-compressed; the gzip magic (1f 8b) decides, never the file name.
 * gzip data goes through zlib's inflate() directly rather than its gz* file interface: that
 * interface stops without a word when a file ends right after the deflate data (the trailer
 * cut off) and skips whatever follows the last gzip member, so a damaged download would load.
 * Here every member must end with its trailer, whose CRC-32 and length inflate() checks; a
 * further member may follow (as `cat a.gz b.gz` makes), anything else after the last one is
 * an error. Each file is read to its very end, even past the bytes its header announces:
 * that is how bytes after the data are found and how the last trailer gets checked. Buffers
 * grow with the data actually read, never with what a header claims, so a corrupt header
 * cannot make the reader allocate more than the file holds.
 *
 * This file does not shuffle, split or batch (dataset.c), and knows nothing of particular
 * datasets. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "tpusim/dataset.h"
#include "util.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_TYPE_UBYTE 0x08u
#define IDX_MAX_DIMS 3

/* The data buffer starts this large (or as large as the data, if smaller) and doubles. */
#define INITIAL_CAPACITY_BYTES ((size_t)16 << 20)
/* The raw (compressed) bytes are read in pieces of this size. */
#define INPUT_BUFFER_BYTES ((size_t)128 << 10)
/* inflate() takes an unsigned length: ask it for at most this much per call. */
#define INFLATE_MAX_BYTES ((size_t)1 << 30)

enum idx_kind {
    IDX_IMAGES,
    IDX_LABELS,
};

/* One open IDX file. Invariants: offset_bytes is the number of IDX bytes (after
 * decompression) handed out so far, so every message can say where it stopped; in[in_pos ..
 * in_len) are raw bytes read from fd and not consumed yet, raw_bytes counts all raw bytes
 * consumed. For gzip, zs is set up (zs_ready) and member_done says the current member ended
 * with a good trailer. */
struct idx_file {
    const char *path; /* quoted for messages (qpath) */
    char qpath[TPU__QUOTE_PATH_BYTES];
    enum idx_kind kind;
    int fd;                /* -1 once closed */
    bool gzip;             /* compressed (else read directly) */
    unsigned char *in;     /* [INPUT_BUFFER_BYTES] raw bytes */
    size_t in_pos, in_len;
    bool in_eof;           /* read() returned 0 */
    uint64_t raw_bytes;    /* raw bytes consumed */
    z_stream zs;
    bool zs_ready;
    bool member_done;
    uint64_t offset_bytes; /* IDX bytes read so far */
    uint32_t n_dims;
    uint32_t dims[IDX_MAX_DIMS]; /* count, then rows and columns for images */
    uint64_t header_bytes;       /* 4 + 4 * n_dims */
    uint64_t data_bytes;         /* the product of the dims (one byte per value) */
};

static uint32_t kind_magic(enum idx_kind k)
{
    return k == IDX_IMAGES ? IDX_MAGIC_IMAGES : IDX_MAGIC_LABELS;
}

static uint32_t kind_dims(enum idx_kind k)
{
    return k == IDX_IMAGES ? 3 : 1;
}

static const char *kind_noun(enum idx_kind k)
{
    return k == IDX_IMAGES ? "image" : "label";
}

static const char *dim_name(uint32_t i)
{
    static const char *const names[IDX_MAX_DIMS] = {"count", "rows", "columns"};
    return i < IDX_MAX_DIMS ? names[i] : "?";
}

/* The IDX data types (the third byte of the magic). */
static const char *type_name(unsigned t)
{
    switch (t) {
    case 0x08:
        return "unsigned byte";
    case 0x09:
        return "signed byte";
    case 0x0B:
        return "16-bit integer";
    case 0x0C:
        return "32-bit integer";
    case 0x0D:
        return "32-bit float";
    case 0x0E:
        return "64-bit float";
    }
    return "not an IDX type";
}

static uint32_t load_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* "60000 images of 28x28" or "60000 labels", for messages about the data's size. */
static void describe(const struct idx_file *f, char *buf, size_t size)
{
    if (f->kind == IDX_IMAGES)
        snprintf(buf, size, "%u images of %ux%u", (unsigned)f->dims[0], (unsigned)f->dims[1],
                 (unsigned)f->dims[2]);
    else
        snprintf(buf, size, "%u labels", (unsigned)f->dims[0]);
}

static const char *decompressed(const struct idx_file *f)
{
    return f->gzip ? " after decompression" : "";
}

static void idx_close(struct idx_file *f)
{
    if (f->zs_ready) {
        inflateEnd(&f->zs);
        f->zs_ready = false;
    }
    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
    free(f->in);
    f->in = NULL;
}

/* Refills the raw input buffer (the unconsumed bytes move to its start). */
static int fill_input(struct idx_file *f, struct tpu_diag *d)
{
    if (f->in_pos > 0) {
        memmove(f->in, f->in + f->in_pos, f->in_len - f->in_pos);
        f->in_len -= f->in_pos;
        f->in_pos = 0;
    }
    while (!f->in_eof && f->in_len < INPUT_BUFFER_BYTES) {
        ssize_t n = read(f->fd, f->in + f->in_len, INPUT_BUFFER_BYTES - f->in_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return tpu__fail(d, TPU_EIO, "%s: read error at byte offset %llu of the file: %s",
                             f->path, (unsigned long long)(f->raw_bytes + f->in_len),
                             strerror(errno));
        if (n == 0)
            f->in_eof = true;
        f->in_len += (size_t)n;
        if (n > 0)
            break; /* enough to go on with */
    }
    return 0;
}

static int gzip_corrupt(const struct idx_file *f, const char *why, struct tpu_diag *d)
{
    return tpu__fail(d, TPU_EPARSE,
                     "%s: the gzip data is corrupt or cut short: decompression failed after "
                     "byte offset %llu of the data (zlib: %s); get the file again",
                     f->path, (unsigned long long)f->offset_bytes, why);
}

/* Decompresses up to len bytes into p; *got < len only at the end of the last member. */
static int gzip_read(struct idx_file *f, unsigned char *p, size_t len, size_t *got,
                     struct tpu_diag *d)
{
    size_t total = 0;
    int rc;
    while (total < len) {
        /* some input; after a member, two bytes if the file has them (another magic?) */
        while (!f->in_eof &&
               (f->in_pos == f->in_len || (f->member_done && f->in_len - f->in_pos < 2)))
            if ((rc = fill_input(f, d)))
                return rc;
        const size_t avail = f->in_len - f->in_pos;
        if (f->member_done) {
            if (avail == 0)
                break; /* the end of the last member, and of the file */
            if (avail < 2 || f->in[f->in_pos] != 0x1f || f->in[f->in_pos + 1] != 0x8b) {
                const uint64_t at = f->raw_bytes;
                uint64_t extra = 0;
                for (;;) { /* count the rest for the message */
                    extra += f->in_len - f->in_pos;
                    f->raw_bytes += f->in_len - f->in_pos;
                    f->in_pos = f->in_len;
                    if (f->in_eof)
                        break;
                    if ((rc = fill_input(f, d)))
                        return rc;
                }
                return tpu__fail(d, TPU_EPARSE,
                                 "%s: has %llu bytes after the end of the gzip data (at byte "
                                 "offset %llu of the file) that are not another gzip member; "
                                 "the file is damaged or was appended to: get it again",
                                 f->path, (unsigned long long)extra, (unsigned long long)at);
            }
            inflateReset(&f->zs); /* another member follows */
            f->member_done = false;
        }
        if (f->in_pos == f->in_len) /* f->in_eof: the data stops inside a member */
            return tpu__fail(d, TPU_EPARSE,
                             "%s: the gzip data is cut short: the file ends after %llu bytes, "
                             "inside the compressed stream or its trailer (CRC-32 and length), "
                             "after byte offset %llu of the data; get the file again",
                             f->path, (unsigned long long)f->raw_bytes,
                             (unsigned long long)f->offset_bytes);
        size_t want = len - total;
        if (want > INFLATE_MAX_BYTES)
            want = INFLATE_MAX_BYTES;
        f->zs.next_in = f->in + f->in_pos;
        f->zs.avail_in = (uInt)(f->in_len - f->in_pos);
        f->zs.next_out = p + total;
        f->zs.avail_out = (uInt)want;
        int ret = inflate(&f->zs, Z_NO_FLUSH);
        size_t used = (f->in_len - f->in_pos) - f->zs.avail_in;
        size_t made = want - f->zs.avail_out;
        f->in_pos += used;
        f->raw_bytes += used;
        total += made;
        f->offset_bytes += made;
        if (ret == Z_STREAM_END)
            f->member_done = true;
        else if (ret == Z_MEM_ERROR)
            return tpu__fail(d, TPU_ENOMEM, "%s: out of memory while decompressing", f->path);
        else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR)
            return gzip_corrupt(f, f->zs.msg ? f->zs.msg : "compressed data error", d);
        /* Z_OK or Z_BUF_ERROR: more input or more room; the loop provides either */
    }
    *got = total;
    return 0;
}

/* Reads up to len bytes into buf; *got_bytes < len only at the end of the data. A read or
 * decompression error fails with the reason and the offset where it happened. */
static int idx_read(struct idx_file *f, void *buf, size_t len, size_t *got_bytes,
                    struct tpu_diag *d)
{
    if (f->gzip)
        return gzip_read(f, buf, len, got_bytes, d);
    unsigned char *p = buf;
    size_t total = 0;
    while (total < len) {
        if (f->in_pos == f->in_len) {
            if (f->in_eof)
                break;
            int rc = fill_input(f, d);
            if (rc)
                return rc;
            continue;
        }
        size_t n = f->in_len - f->in_pos;
        if (n > len - total)
            n = len - total;
        memcpy(p + total, f->in + f->in_pos, n);
        f->in_pos += n;
        f->raw_bytes += n;
        total += n;
        f->offset_bytes += n;
    }
    *got_bytes = total;
    return 0;
}

/* Explains a magic that is not the expected one. */
static int magic_error(const struct idx_file *f, const unsigned char *b, struct tpu_diag *d)
{
    uint32_t m = load_be32(b);
    uint32_t want = kind_magic(f->kind);
    enum idx_kind other = f->kind == IDX_IMAGES ? IDX_LABELS : IDX_IMAGES;
    if (m == kind_magic(other))
        return tpu__fail(d, TPU_EPARSE,
                         "%s: bytes 0-3 are 0x%08x, the magic of an IDX %s file; an IDX %s "
                         "file starts with 0x%08x (are the image and label files swapped?)",
                         f->path, (unsigned)m, kind_noun(other), kind_noun(f->kind),
                         (unsigned)want);
    if (b[0] != 0 || b[1] != 0)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: bytes 0-3 are 0x%08x, which is not an IDX magic (two zero bytes, "
                         "a data type, a dimension count); an IDX %s file starts with 0x%08x",
                         f->path, (unsigned)m, kind_noun(f->kind), (unsigned)want);
    if (b[2] != IDX_TYPE_UBYTE)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: byte 2 is 0x%02x, data type '%s'; tpusim reads IDX files of "
                         "unsigned bytes (type 0x08), as MNIST and Fashion-MNIST are stored",
                         f->path, (unsigned)b[2], type_name(b[2]));
    return tpu__fail(d, TPU_EPARSE,
                     "%s: byte 3 is %u: the file has %u dimension%s; an IDX %s file has %u (%s)",
                     f->path, (unsigned)b[3], (unsigned)b[3], b[3] == 1 ? "" : "s",
                     kind_noun(f->kind), (unsigned)kind_dims(f->kind),
                     f->kind == IDX_IMAGES ? "count, rows, columns" : "count");
}

/* Checks that the data fits the dataset's types and this machine's memory. */
static int check_size(struct idx_file *f, struct tpu_diag *d)
{
    uint64_t product = 1;
    for (uint32_t i = 0; i < f->n_dims; i++) {
        if (product > UINT64_MAX / f->dims[i]) {
            return tpu__fail(d, TPU_ERANGE,
                             "%s: the dimensions %ux%ux%u at bytes 4-15 multiply to more than "
                             "2^64 values; the header is corrupt",
                             f->path, (unsigned)f->dims[0], (unsigned)f->dims[1],
                             (unsigned)f->dims[2]);
        }
        product *= f->dims[i];
    }
    if (f->kind == IDX_IMAGES && (uint64_t)f->dims[1] * f->dims[2] > UINT32_MAX)
        return tpu__fail(d, TPU_ERANGE,
                         "%s: an image of %ux%u (bytes 8-15) has %llu pixels; a tpusim dataset "
                         "holds at most 4294967295 features per example",
                         f->path, (unsigned)f->dims[1], (unsigned)f->dims[2],
                         (unsigned long long)f->dims[1] * f->dims[2]);
    /* each byte becomes a 4-byte float or int32 in memory */
    if (product > SIZE_MAX / 4) {
        char what[96];
        describe(f, what, sizeof what);
        return tpu__fail(d, TPU_ERANGE,
                         "%s: %s are %llu values; as 32-bit values in memory they need "
                         "more than this machine can address",
                         f->path, what, (unsigned long long)product);
    }
    f->data_bytes = product;
    return 0;
}

/* Opens path and reads and checks its header. On failure the file is closed. */
static int idx_open(struct idx_file *f, const char *path, enum idx_kind kind,
                    struct tpu_diag *d)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->kind = kind;
    f->path = tpu__quote(path, f->qpath, sizeof f->qpath);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    path = f->path; /* messages name the quoted path from here on */
    if (f->fd < 0)
        return tpu__fail(d, TPU_EIO, "cannot open the %s file '%s': %s", kind_noun(kind), path,
                         strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        idx_close(f);
        return tpu__fail(d, TPU_EIO, "'%s' is a directory; expected an IDX %s file", path,
                         kind_noun(kind));
    }
    int rc;
    f->in = malloc(INPUT_BUFFER_BYTES);
    if (!f->in) {
        rc = tpu__fail(d, TPU_ENOMEM, "cannot read '%s': out of memory", path);
        goto fail;
    }
    while (!f->in_eof && f->in_len < 2) /* enough to see the gzip magic */
        if ((rc = fill_input(f, d)))
            goto fail;
    f->gzip = f->in_len >= 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
    if (f->gzip) {
        /* 15 + 16: a gzip wrapper (header, then the CRC-32 and length trailer, both checked)
         * around a deflate stream with a window of up to 32 KiB */
        int zrc = inflateInit2(&f->zs, 15 + 16);
        if (zrc != Z_OK) {
            rc = tpu__fail(d, TPU_ENOMEM, "cannot read '%s': out of memory", path);
            goto fail;
        }
        f->zs_ready = true;
    }

    unsigned char magic[4];
    size_t got;
    if ((rc = idx_read(f, magic, sizeof magic, &got, d)))
        goto fail;
    if (got == 0) {
        rc = tpu__fail(d, TPU_EPARSE, "%s: is empty%s; an IDX %s file starts with the 4-byte "
                       "magic 0x%08x", path, decompressed(f), kind_noun(kind),
                       (unsigned)kind_magic(kind));
        goto fail;
    }
    if (got < sizeof magic) {
        rc = tpu__fail(d, TPU_EPARSE, "%s: truncated at byte offset %zu: the IDX magic needs 4 "
                       "bytes, the file has %zu%s", path, got, got, decompressed(f));
        goto fail;
    }
    if (load_be32(magic) != kind_magic(kind)) {
        rc = magic_error(f, magic, d);
        goto fail;
    }

    f->n_dims = kind_dims(kind);
    f->header_bytes = 4 + 4 * (uint64_t)f->n_dims;
    unsigned char dims[4 * IDX_MAX_DIMS];
    if ((rc = idx_read(f, dims, 4 * f->n_dims, &got, d)))
        goto fail;
    if (got < 4 * f->n_dims) {
        rc = tpu__fail(d, TPU_EPARSE, "%s: truncated at byte offset %llu: the header of an IDX "
                       "%s file is %llu bytes (the magic and %u dimension%s), the file has "
                       "%llu%s", path, (unsigned long long)f->offset_bytes, kind_noun(kind),
                       (unsigned long long)f->header_bytes, (unsigned)f->n_dims,
                       f->n_dims == 1 ? "" : "s", (unsigned long long)f->offset_bytes,
                       decompressed(f));
        goto fail;
    }
    for (uint32_t i = 0; i < f->n_dims; i++) {
        f->dims[i] = load_be32(dims + 4 * i);
        if (f->dims[i] == 0) {
            rc = tpu__fail(d, TPU_EPARSE, "%s: dimension %u (%s) at bytes %u-%u is 0; every "
                           "dimension must be at least 1", path, (unsigned)i, dim_name(i),
                           (unsigned)(4 + 4 * i), (unsigned)(7 + 4 * i));
            goto fail;
        }
    }
    if ((rc = check_size(f, d)))
        goto fail;
    return 0;

fail:
    idx_close(f);
    return rc;
}

/* Reads the data section into a new buffer of exactly data_bytes bytes (*out, owned by the
 * caller), then reads on to the end to find extra bytes and let zlib check the trailer. */
static int idx_read_data(struct idx_file *f, unsigned char **out, struct tpu_diag *d)
{
    char what[96];
    size_t want = (size_t)f->data_bytes;
    size_t cap = want < INITIAL_CAPACITY_BYTES ? want : INITIAL_CAPACITY_BYTES;
    size_t have = 0;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return tpu__fail(d, TPU_ENOMEM, "%s: cannot allocate %zu bytes", f->path, cap);
    int rc;
    while (have < want) {
        if (have == cap) {
            size_t next = cap <= want / 2 ? cap * 2 : want;
            unsigned char *grown = realloc(buf, next);
            if (!grown) {
                rc = tpu__fail(d, TPU_ENOMEM, "%s: cannot allocate %zu bytes", f->path, next);
                goto fail;
            }
            buf = grown;
            cap = next;
        }
        size_t got;
        if ((rc = idx_read(f, buf + have, cap - have, &got, d)))
            goto fail;
        bool at_end = got < cap - have;
        have += got;
        if (at_end)
            break;
    }
    if (have < want) {
        describe(f, what, sizeof what);
        rc = tpu__fail(d, TPU_EPARSE, "%s: truncated at byte offset %llu: %s need %llu bytes, "
                       "the file has %llu%s", f->path, (unsigned long long)f->offset_bytes,
                       what, (unsigned long long)(f->header_bytes + f->data_bytes),
                       (unsigned long long)f->offset_bytes, decompressed(f));
        goto fail;
    }

    uint64_t end = f->offset_bytes;
    unsigned char scratch[4096];
    size_t got;
    do {
        if ((rc = idx_read(f, scratch, sizeof scratch, &got, d)))
            goto fail;
    } while (got == sizeof scratch);
    if (f->offset_bytes > end) {
        describe(f, what, sizeof what);
        rc = tpu__fail(d, TPU_EPARSE, "%s: has %llu bytes after the end of the data at byte "
                       "offset %llu%s: %s take exactly %llu bytes; the header's dimensions do "
                       "not match the data", f->path,
                       (unsigned long long)(f->offset_bytes - end), (unsigned long long)end,
                       decompressed(f), what, (unsigned long long)end);
        goto fail;
    }
    *out = buf;
    return 0;

fail:
    free(buf);
    return rc;
}

int tpu_dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                         struct tpu_dataset *out, struct tpu_diag *d)
{
    return tpu__dataset_load_idx(images_path, labels_path, n_classes, 0, 0, NULL, out, d);
}

/* The n labels read from lab against n_classes; n_classes 0 becomes the largest label + 1. */
static int check_labels(const struct idx_file *lab, const unsigned char *labels, uint32_t n,
                        uint32_t *n_classes, struct tpu_diag *d)
{
    uint32_t max_label = 0;
    for (uint32_t i = 0; i < n; i++)
        if (labels[i] > max_label)
            max_label = labels[i];
    if (*n_classes == 0) {
        *n_classes = max_label + 1;
    } else if (max_label >= *n_classes) {
        uint32_t i = 0;
        while (labels[i] < *n_classes)
            i++;
        return tpu__fail(d, TPU_ERANGE, "%s: the label at byte offset %llu (example %u) is %u; "
                         "with %u classes a label must be 0 to %u", lab->path,
                         (unsigned long long)(lab->header_bytes + i), (unsigned)i,
                         (unsigned)labels[i], (unsigned)*n_classes, (unsigned)(*n_classes - 1));
    }
    return 0;
}

int tpu__dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                          uint32_t image_rows, uint32_t image_cols, const char *fix,
                          struct tpu_dataset *out, struct tpu_diag *d)
{
    if (!images_path || !labels_path || !out)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_load_idx: images_path, labels_path and "
                         "out must not be NULL");
    struct idx_file img, lab;
    unsigned char *pixels = NULL, *labels = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    int rc = idx_open(&img, images_path, IDX_IMAGES, d);
    if (rc)
        return rc;
    /* the shape the caller's model needs, from the header alone: before any data is read */
    if (image_rows && (img.dims[1] != image_rows || img.dims[2] != image_cols)) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s: holds images of %ux%u pixels (bytes 8-15 of the "
                       "header), but %ux%u images are needed (%llu input features per "
                       "example)%s%s", img.path, (unsigned)img.dims[1], (unsigned)img.dims[2],
                       (unsigned)image_rows, (unsigned)image_cols,
                       (unsigned long long)image_rows * image_cols, fix ? "; " : "",
                       fix ? fix : "");
        idx_close(&img);
        return rc;
    }
    if ((rc = idx_open(&lab, labels_path, IDX_LABELS, d))) {
        idx_close(&img);
        return rc;
    }
    const uint32_t n = img.dims[0];
    if (lab.dims[0] != n) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s holds %u images but %s holds %u labels; the two "
                       "files must describe the same examples (one is from another set?)",
                       img.path, (unsigned)n, lab.path, (unsigned)lab.dims[0]);
        goto done;
    }

    /* the labels first: they are small, and a bad one fails before the big read */
    if ((rc = idx_read_data(&lab, &labels, d)))
        goto done;
    if ((rc = check_labels(&lab, labels, n, &n_classes, d)))
        goto done;

    if ((rc = idx_read_data(&img, &pixels, d)))
        goto done;
    const uint32_t n_features = img.dims[1] * img.dims[2]; /* fits: check_size() */
    const size_t n_values = (size_t)img.data_bytes;
    x = malloc(n_values * sizeof *x);
    y = malloc((size_t)n * sizeof *y);
    if (!x || !y) {
        rc = tpu__fail(d, TPU_ENOMEM, "%s: cannot allocate %zu bytes for %u examples",
                       img.path, n_values * sizeof *x + (size_t)n * sizeof *y,
                       (unsigned)n);
        goto done;
    }
    /* x = byte / 255.0f, one correctly rounded division per byte value */
    float scale[256];
    for (unsigned v = 0; v < 256; v++)
        scale[v] = (float)v / 255.0f;
    for (size_t i = 0; i < n_values; i++)
        x[i] = scale[pixels[i]];
    for (uint32_t i = 0; i < n; i++)
        y[i] = labels[i];

    memset(out, 0, sizeof *out);
    out->n_examples = n;
    out->n_features = n_features;
    out->image_rows = img.dims[1];
    out->image_cols = img.dims[2];
    out->n_classes = n_classes;
    out->x = x;
    out->y = y;
    tpu__quote(images_path, out->origin, sizeof out->origin); /* "..." if cut */
    x = NULL;
    y = NULL;

done:
    free(x);
    free(y);
    free(pixels);
    free(labels);
    idx_close(&img);
    idx_close(&lab);
    return rc;
}
