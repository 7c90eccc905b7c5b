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
 * Two modes: the MNIST layout of unsigned bytes only (tpu_dataset_load_idx(), strict, with the
 * messages that name MNIST's magics), and any MNIST-format set (tpu_dataset_load_idx_set():
 * every IDX data type, images of 2 to 4 dimensions, integer labels).
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
#include <limits.h>
#include "tpusim/dataset.h"
#include "util.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_TYPE_UBYTE 0x08u
#define IDX_MAX_DIMS 4

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
    bool any;              /* any MNIST-format set (else unsigned bytes, MNIST's layout) */
    enum tpu__elem elem;   /* the data type's element */
    unsigned type_byte;    /* byte 2 of the magic */
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
    uint32_t dims[IDX_MAX_DIMS]; /* count, then rows, columns (and channels) for images */
    uint64_t header_bytes;       /* 4 + 4 * n_dims */
    uint64_t n_values;           /* the product of the dims */
    uint64_t data_bytes;         /* n_values times the element's size */
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
    static const char *const names[IDX_MAX_DIMS] = {"count", "rows", "columns", "channels"};
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

/* The IDX data types tpu_dataset_load_idx_set() reads, as elements; false if not one. */
static bool type_elem(unsigned t, enum tpu__elem *e)
{
    switch (t) {
    case 0x08:
        *e = TPU__ELEM_U8;
        return true;
    case 0x09:
        *e = TPU__ELEM_I8;
        return true;
    case 0x0B:
        *e = TPU__ELEM_I16;
        return true;
    case 0x0C:
        *e = TPU__ELEM_I32;
        return true;
    case 0x0D:
        *e = TPU__ELEM_F32;
        return true;
    case 0x0E:
        *e = TPU__ELEM_F64;
        return true;
    }
    return false;
}

/* "28x28" or "4x4x3": the dims after the count, joined by 'x'. */
static void example_dims(const struct idx_file *f, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 1; i < f->n_dims && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%u", i > 1 ? "x" : "",
                               (unsigned)f->dims[i]);
}

/* "60000 images of 28x28", "100 examples of 20 values" or "60000 labels", for messages
 * about the data's size. */
static void describe(const struct idx_file *f, char *buf, size_t size)
{
    char ex[48];
    example_dims(f, ex, sizeof ex);
    if (f->kind == IDX_LABELS)
        snprintf(buf, size, "%u labels", (unsigned)f->dims[0]);
    else if (f->n_dims == 2)
        snprintf(buf, size, "%u examples of %s values", (unsigned)f->dims[0], ex);
    else
        snprintf(buf, size, "%u images of %s", (unsigned)f->dims[0], ex);
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

/* tpu_dataset_load_idx_set(): any data type for images (2 to 4 dimensions), an integer
 * type for labels (1 dimension). Sets f->elem and f->n_dims. */
static int check_magic_any(struct idx_file *f, const unsigned char *b, struct tpu_diag *d)
{
    const uint32_t m = load_be32(b);
    const char *noun = kind_noun(f->kind);
    if (b[0] != 0 || b[1] != 0)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: bytes 0-3 are 0x%08x, which is not an IDX magic (two zero bytes, "
                         "a data type, a dimension count); an IDX %s file starts with 0x0000TT%s "
                         "(TT the data type)", f->path, (unsigned)m, noun,
                         f->kind == IDX_IMAGES ? "02 to 0x0000TT04" : "01");
    if (!type_elem(b[2], &f->elem))
        return tpu__fail(d, TPU_EPARSE,
                         "%s: byte 2 is 0x%02x, data type '%s'; IDX data types are 0x08 "
                         "(unsigned byte), 0x09 (signed byte), 0x0b (16-bit integer), 0x0c "
                         "(32-bit integer), 0x0d (32-bit float) and 0x0e (64-bit float)",
                         f->path, (unsigned)b[2], type_name(b[2]));
    if (f->kind == IDX_LABELS && tpu__elem_is_float(f->elem))
        return tpu__fail(d, TPU_EPARSE,
                         "%s: byte 2 is 0x%02x, data type '%s'; class labels are integers: "
                         "store them as unsigned bytes (0x08), signed bytes (0x09), 16-bit "
                         "(0x0b) or 32-bit integers (0x0c)", f->path, (unsigned)b[2],
                         type_name(b[2]));
    if (f->kind == IDX_IMAGES && (b[3] < 2 || b[3] > 4))
        return tpu__fail(d, TPU_EPARSE,
                         "%s: byte 3 is %u: the file has %u dimension%s; an IDX image file has "
                         "2 to 4 (count, then features; rows, columns; or rows, columns, "
                         "channels)%s", f->path, (unsigned)b[3], (unsigned)b[3],
                         b[3] == 1 ? "" : "s",
                         b[3] == 1 ? " (is it a label file? are the two swapped?)" : "");
    if (f->kind == IDX_LABELS && b[3] != 1)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: byte 3 is %u: the file has %u dimension%s; an IDX label file has "
                         "1 (count)%s", f->path, (unsigned)b[3], (unsigned)b[3],
                         b[3] == 1 ? "" : "s",
                         b[3] >= 2 && b[3] <= 4 ? " (is it an image file? are the two "
                                                  "swapped?)" : "");
    f->n_dims = b[3];
    return 0;
}

/* Checks that the data fits the dataset's types and this machine's memory. */
static int check_size(struct idx_file *f, struct tpu_diag *d)
{
    uint64_t product = 1;
    char ex[48];
    example_dims(f, ex, sizeof ex);
    for (uint32_t i = 0; i < f->n_dims; i++) {
        if (product > UINT64_MAX / f->dims[i]) {
            return tpu__fail(d, TPU_ERANGE,
                             "%s: the dimensions %ux%s at bytes 4-%u multiply to more than "
                             "2^64 values; the header is corrupt",
                             f->path, (unsigned)f->dims[0], ex,
                             (unsigned)(3 + 4 * f->n_dims));
        }
        product *= f->dims[i];
    }
    const uint64_t per_example = f->dims[0] ? product / f->dims[0] : 0;
    if (f->kind == IDX_IMAGES && per_example > UINT32_MAX)
        return tpu__fail(d, TPU_ERANGE,
                         "%s: an %s of %s (bytes 8-%u) has %llu %s; a tpusim dataset "
                         "holds at most 4294967295 features per example",
                         f->path, f->n_dims == 3 ? "image" : "example", ex,
                         (unsigned)(3 + 4 * f->n_dims), (unsigned long long)per_example,
                         f->n_dims == 3 ? "pixels" : "values");
    /* each value becomes a 4-byte float or int32 in memory, and is read as it is stored */
    const size_t elem = tpu__elem_bytes(f->elem);
    if (product > SIZE_MAX / (elem > 4 ? elem : 4)) {
        char what[96];
        describe(f, what, sizeof what);
        return tpu__fail(d, TPU_ERANGE,
                         "%s: %s are %llu values; as 32-bit values in memory they need "
                         "more than this machine can address",
                         f->path, what, (unsigned long long)product);
    }
    f->n_values = product;
    f->data_bytes = product * elem;
    return 0;
}

/* Opens path and reads and checks its header. On failure the file is closed. */
static int idx_open(struct idx_file *f, const char *path, enum idx_kind kind, bool any,
                    struct tpu_diag *d)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->kind = kind;
    f->any = any;
    f->elem = TPU__ELEM_U8;
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
    f->type_byte = magic[2];
    if (any) {
        if ((rc = check_magic_any(f, magic, d)))
            goto fail;
    } else if (load_be32(magic) != kind_magic(kind)) {
        rc = magic_error(f, magic, d);
        goto fail;
    } else {
        f->n_dims = kind_dims(kind);
    }
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
                           "dimension must be at least 1", path, (unsigned)i,
                           f->n_dims == 2 && i == 1 ? "features" : dim_name(i),
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

/* The n labels read from lab, as int32 into y, against n_classes; n_classes 0 becomes the
 * largest label plus one. A negative label (a signed type) or one past INT32_MAX - 1 fails. */
static int check_labels(const struct idx_file *lab, const unsigned char *labels, uint32_t n,
                        uint32_t *n_classes, int32_t *y, struct tpu_diag *d)
{
    const size_t size = tpu__elem_bytes(lab->elem);
    uint32_t max_label = 0;
    for (uint32_t i = 0; i < n; i++) {
        const int64_t v = tpu__elem_int(labels, lab->elem, true, i);
        if (v < 0 || v >= INT32_MAX)
            return tpu__fail(d, TPU_ERANGE, "%s: the label at byte offset %llu (example %u) is "
                             "%lld; a label is a class index from 0 to 2147483646 (fix the "
                             "file: are these labels?)", lab->path,
                             (unsigned long long)(lab->header_bytes + i * size), (unsigned)i,
                             (long long)v);
        y[i] = (int32_t)v;
        if ((uint32_t)v > max_label)
            max_label = (uint32_t)v;
    }
    if (*n_classes == 0) {
        *n_classes = max_label + 1;
    } else if (max_label >= *n_classes) {
        uint32_t i = 0;
        while ((uint32_t)y[i] < *n_classes)
            i++;
        return tpu__fail(d, TPU_ERANGE, "%s: the label at byte offset %llu (example %u) is %u; "
                         "with %u classes a label must be 0 to %u", lab->path,
                         (unsigned long long)(lab->header_bytes + i * size), (unsigned)i,
                         (unsigned)y[i], (unsigned)*n_classes, (unsigned)(*n_classes - 1));
    }
    return 0;
}

/* The example shape the image file's header declares. */
static struct tpu_shape file_shape(const struct idx_file *f)
{
    if (f->n_dims == 2)
        return (struct tpu_shape){1, 1, f->dims[1]};
    return (struct tpu_shape){f->dims[1], f->dims[2], f->n_dims == 4 ? f->dims[3] : 1};
}

/* Both entry points: strict (any false: unsigned bytes, and rows x cols if rows is not 0)
 * or any MNIST-format set (any true: of like's shape if like is not NULL). */
static int load(const char *images_path, const char *labels_path, uint32_t n_classes,
                bool any, struct tpu_shape need, const char *fix, struct tpu_dataset *out,
                struct tpu_diag *d)
{
    if (!images_path || !labels_path || !out)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_load_idx: images_path, labels_path and "
                         "out must not be NULL");
    struct idx_file img, lab;
    unsigned char *pixels = NULL, *labels = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    int rc = idx_open(&img, images_path, IDX_IMAGES, any, d);
    if (rc)
        return rc;
    /* the shape the caller's model needs, from the header alone: before any data is read */
    const struct tpu_shape have = file_shape(&img);
    if (need.h && (have.h != need.h || have.w != need.w || have.c != need.c)) {
        char ex[48], want[48];
        example_dims(&img, ex, sizeof ex);
        tpu__shape_text(need, want, sizeof want);
        rc = tpu__fail(d, TPU_ESHAPE, "%s: holds %s of %s%s (bytes 8-%u of the header), but "
                       "%s %s are needed (%llu input features per example)%s%s", img.path,
                       img.n_dims == 3 ? "images" : "examples", ex,
                       img.n_dims == 3 ? " pixels" : img.n_dims == 2 ? " values" : "",
                       (unsigned)(3 + 4 * img.n_dims), want,
                       need.h == 1 && need.w == 1 ? "-value examples" : "images",
                       (unsigned long long)need.h * need.w * need.c, fix ? "; " : "",
                       fix ? fix : "");
        idx_close(&img);
        return rc;
    }
    if ((rc = idx_open(&lab, labels_path, IDX_LABELS, any, d))) {
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
    y = malloc((size_t)n * sizeof *y);
    if (!y) {
        rc = tpu__fail(d, TPU_ENOMEM, "%s: cannot allocate %zu bytes for %u labels", lab.path,
                       (size_t)n * sizeof *y, (unsigned)n);
        goto done;
    }
    if ((rc = idx_read_data(&lab, &labels, d)))
        goto done;
    if ((rc = check_labels(&lab, labels, n, &n_classes, y, d)))
        goto done;

    if ((rc = idx_read_data(&img, &pixels, d)))
        goto done;
    const size_t n_values = (size_t)img.n_values;
    x = malloc(n_values * sizeof *x);
    if (!x) {
        rc = tpu__fail(d, TPU_ENOMEM, "%s: cannot allocate %zu bytes for %u examples",
                       img.path, n_values * sizeof *x + (size_t)n * sizeof *y,
                       (unsigned)n);
        goto done;
    }
    if ((rc = tpu__elem_to_float(pixels, img.elem, true, n_values, x, img.path, d)))
        goto done;

    memset(out, 0, sizeof *out);
    out->n_examples = n;
    out->n_features = have.h * have.w * have.c; /* fits: check_size() */
    out->image_rows = have.h;
    out->image_cols = have.w;
    out->image_channels = have.c;
    out->n_classes = n_classes;
    out->x = x;
    out->y = y;
    tpu__quote(images_path, out->origin, sizeof out->origin); /* "..." if cut */
    tpu__quote(images_path, out->x_file, sizeof out->x_file);
    tpu__quote(labels_path, out->y_file, sizeof out->y_file);
    snprintf(out->x_type, sizeof out->x_type, "%s", type_name(img.type_byte));
    snprintf(out->y_type, sizeof out->y_type, "%s", type_name(lab.type_byte));
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

int tpu__dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                          uint32_t image_rows, uint32_t image_cols, const char *fix,
                          struct tpu_dataset *out, struct tpu_diag *d)
{
    const struct tpu_shape need = {image_rows, image_cols, image_rows ? 1 : 0};
    return load(images_path, labels_path, n_classes, false, need, fix, out, d);
}

int tpu__dataset_load_idx_set(const char *images_path, const char *labels_path,
                              const struct tpu_dataset *like, const char *fix,
                              struct tpu_dataset *out, struct tpu_diag *d)
{
    const struct tpu_shape need = like ? tpu_dataset_shape(like) : (struct tpu_shape){0, 0, 0};
    return load(images_path, labels_path, 0, true, need, fix, out, d);
}

int tpu_dataset_load_idx_set(const char *images_path, const char *labels_path,
                             const struct tpu_dataset *like, struct tpu_dataset *out,
                             struct tpu_diag *d)
{
    return tpu__dataset_load_idx_set(images_path, labels_path, like, NULL, out, d);
}
