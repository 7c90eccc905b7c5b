/* Checkpoints, reading: tpu_checkpoint_load and tpu_checkpoint_inspect, with every check
 * listed in include/tpusim/checkpoint.h (which also documents the format and tpusim's
 * checksum extension in __metadata__). Saving and the index are in checkpoint.c.
 *
 * This is not a general safetensors library: it reads the dtypes and 2-D shapes tpusim uses,
 * and only files tpusim wrote (they carry the checksums). It holds no state between calls.
 *
 * Reading is in three passes so that a caller's buffers are touched only by a file that
 * passed everything: ckpt_open parses and checks the header against the file's length,
 * the caller's expectations are checked against the header, then ckpt_read_data reads the
 * whole data section into scratch memory and checks every checksum; only then is anything
 * copied out. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "checkpoint_int.h"
#include "util.h"

/* ---- checks of the caller's tensors (for saving and loading) ------------------------- */

bool tpu__ckpt_utf8_valid(const char *s)
{
    json_t *j = json_string(s);
    if (!j)
        return false;
    json_decref(j);
    return true;
}

int tpu__ckpt_validate_tensors(const struct tpu_tensor *t, size_t n, const char *what,
                               struct tpu_diag *d)
{
    if (n > 0 && !t)
        return tpu__fail(d, TPU_EINVAL, "%s: %zu tensors given but the tensor array is NULL",
                         what, n);
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !name[0])
            return tpu__fail(d, TPU_EINVAL, "%s: tensor %zu has no name; every checkpoint "
                             "tensor needs a unique non-empty name", what, i);
        if (!strcmp(name, "__metadata__"))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor %zu is named '__metadata__', which "
                             "the safetensors format reserves; rename the tensor", what, i);
        if (!tpu__ckpt_utf8_valid(name))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor %zu's name is not valid UTF-8; "
                             "safetensors names are UTF-8 strings", what, i);
        if (!tpu__ckpt_dtype_valid(t[i].dtype))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' has dtype %d, which is not a "
                             "tpu_dtype (f32, bf16, int8, int32)", what, name,
                             (int)t[i].dtype);
        if (t[i].rows == 0 || t[i].cols == 0)
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' has shape [%" PRIu32 ", %" PRIu32
                             "]; both dimensions must be at least 1", what, name, t[i].rows,
                             t[i].cols);
        size_t count, bytes;
        if (!tpu__mul_size(t[i].rows, t[i].cols, &count) ||
            !tpu__mul_size(count, tpu_dtype_bytes(t[i].dtype), &bytes))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' of shape [%" PRIu32 ", %" PRIu32
                             "] is too large for this host's address space", what, name,
                             t[i].rows, t[i].cols);
        if (!t[i].data)
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' has no data (NULL)", what, name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(t[j].name, name))
                return tpu__fail(d, TPU_EINVAL, "%s: tensor name '%s' is given twice (tensors "
                                 "%zu and %zu); checkpoint tensor names must be unique", what,
                                 name, j, i);
    }
    return 0;
}

/* ---- reading a checkpoint ------------------------------------------------------------ */

struct entry {
    const char *name; /* points into the JSON tree */
    enum tpu_dtype dtype;
    uint32_t rows, cols;
    uint64_t begin, end; /* in the data section */
    uint32_t crc;
};

struct ckpt {
    const char *path;
    FILE *f;
    json_t *root;
    json_t *meta;
    struct entry *e; /* in header order */
    size_t n;
    uint64_t step;
    uint32_t data_crc;
    uint64_t data_bytes;
    unsigned char *data; /* the data section, after ckpt_read_data */
};

static void ckpt_close(struct ckpt *c)
{
    if (c->f)
        fclose(c->f);
    json_decref(c->root);
    free(c->e);
    free(c->data);
    *c = (struct ckpt){0};
}

static int bad(struct tpu_diag *d, const char *path, const char *fmt, ...) TPU__PRINTF(3, 4);

static int bad(struct tpu_diag *d, const char *path, const char *fmt, ...)
{
    char msg[TPU_DIAG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tpu__fail(d, TPU_EPARSE, "%s: %s", path, msg);
}

/* A JSON integer in [lo, hi]. */
static bool int_in(json_t *j, json_int_t lo, json_int_t hi, json_int_t *out)
{
    if (!json_is_integer(j))
        return false;
    json_int_t v = json_integer_value(j);
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Exactly 8 lowercase hex digits. */
static bool crc_parse(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        unsigned digit;
        if (c >= '0' && c <= '9')
            digit = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            digit = (unsigned)(c - 'a' + 10);
        else
            return false;
        v = v << 4 | digit;
    }
    if (s[8] != '\0')
        return false;
    *out = v;
    return true;
}

static int parse_tensor(struct ckpt *c, const char *name, json_t *j, struct entry *e,
                        struct tpu_diag *d)
{
    const char *p = c->path;
    if (!json_is_object(j))
        return bad(d, p, "the header entry of tensor '%s' is not an object with dtype, shape "
                   "and data_offsets", name);
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return bad(d, p, "tensor '%s' has an unknown field '%s' (safetensors tensors have "
                       "dtype, shape and data_offsets)", name, key);
    }
    json_t *dt = json_object_get(j, "dtype"), *shape = json_object_get(j, "shape");
    json_t *offs = json_object_get(j, "data_offsets");
    if (!json_is_string(dt))
        return bad(d, p, "tensor '%s' has no dtype string", name);
    unsigned t;
    for (t = 0; t < tpu__ckpt_n_dtypes; t++)
        if (!strcmp(json_string_value(dt), tpu__ckpt_dtypes[t].name))
            break;
    if (t == tpu__ckpt_n_dtypes)
        return bad(d, p, "tensor '%s' has dtype '%s'; tpusim checkpoints hold F32, BF16, I8 or "
                   "I32", name, json_string_value(dt));
    if (!json_is_array(shape))
        return bad(d, p, "tensor '%s' has no shape array", name);
    if (json_array_size(shape) != 2)
        return bad(d, p, "tensor '%s' has %zu dimensions; tpusim checkpoints hold 2-D tensors "
                   "[rows, cols]", name, json_array_size(shape));
    json_int_t rows, cols, begin, end;
    if (!int_in(json_array_get(shape, 0), 1, UINT32_MAX, &rows) ||
        !int_in(json_array_get(shape, 1), 1, UINT32_MAX, &cols))
        return bad(d, p, "tensor '%s' has a shape whose dimensions are not integers from 1 to "
                   "%" PRIu32, name, UINT32_MAX);
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !int_in(json_array_get(offs, 0), 0, INT64_MAX, &begin) ||
        !int_in(json_array_get(offs, 1), 0, INT64_MAX, &end))
        return bad(d, p, "tensor '%s' has data_offsets that are not two non-negative integers "
                   "[begin, end]", name);
    if (end < begin)
        return bad(d, p, "tensor '%s' has data_offsets [%" JSON_INTEGER_FORMAT ", %"
                   JSON_INTEGER_FORMAT "] that end before they begin", name, begin, end);
    /* rows * cols < 2^64; times the element size, checked */
    uint64_t count = (uint64_t)rows * (uint64_t)cols, bytes = count * tpu_dtype_bytes(t);
    if (count > UINT64_MAX / tpu_dtype_bytes(t) || bytes != (uint64_t)(end - begin))
        return bad(d, p, "tensor '%s' is %s [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                   "], which takes %" PRIu64 " bytes, but its data_offsets [%"
                   JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT "] span %" PRIu64 " bytes",
                   name, tpu__ckpt_dtypes[t].name, rows, cols, bytes, begin, end,
                   (uint64_t)(end - begin));
    *e = (struct entry){.name = name, .dtype = (enum tpu_dtype)t, .rows = (uint32_t)rows,
                        .cols = (uint32_t)cols, .begin = (uint64_t)begin,
                        .end = (uint64_t)end};
    return 0;
}

/* tpusim's own __metadata__ entries: format, step, checksums. */
static int parse_meta(struct ckpt *c, struct tpu_diag *d)
{
    const char *p = c->path;
    if (!c->meta)
        return bad(d, p, "has no __metadata__, so it was not written by tpusim (tpusim loads "
                   "the checkpoints it wrote, which carry checksums)");
    const char *key;
    json_t *v;
    json_object_foreach(c->meta, key, v) {
        if (!json_is_string(v))
            return bad(d, p, "__metadata__ entry '%s' is not a string (safetensors metadata "
                       "maps strings to strings)", key);
    }
    json_t *fmt = json_object_get(c->meta, KEY_FORMAT);
    if (!fmt)
        return bad(d, p, "has no " KEY_FORMAT " in __metadata__, so it was not written by "
                   "tpusim (tpusim loads the checkpoints it wrote, which carry checksums)");
    const char *f = json_string_value(fmt);
    if (strcmp(f, FORMAT_ID) != 0) {
        if (tpu__ckpt_starts_with(f, FORMAT_PREFIX))
            return tpu__fail(d, TPU_EUNSUPPORTED, "%s: is checkpoint format '%s'; this tpusim "
                             "reads " FORMAT_ID " (a newer tpusim wrote the file)", p, f);
        return bad(d, p, KEY_FORMAT " is '%s', not a tpusim checkpoint format", f);
    }
    json_t *step = json_object_get(c->meta, KEY_STEP);
    if (!step || !tpu__ckpt_u64_parse(json_string_value(step), strlen(json_string_value(step)),
                                      &c->step))
        return bad(d, p, KEY_STEP " is %s%s%s, not a decimal step number",
                   step ? "'" : "", step ? json_string_value(step) : "missing", step ? "'" : "");
    if (c->step > TPU_CHECKPOINT_MAX_STEP)
        return bad(d, p, KEY_STEP " is %" PRIu64 ", beyond %" PRIu64 " (2^53 - 1), the largest "
                   "global step tpusim accepts; the file is damaged or was not written by tpusim",
                   c->step, (uint64_t)TPU_CHECKPOINT_MAX_STEP);
    json_t *dc = json_object_get(c->meta, KEY_DATA_CRC);
    if (!dc || !crc_parse(json_string_value(dc), &c->data_crc))
        return bad(d, p, KEY_DATA_CRC " is %s%s%s, not 8 lowercase hex digits",
                   dc ? "'" : "", dc ? json_string_value(dc) : "missing", dc ? "'" : "");
    for (size_t i = 0; i < c->n; i++) {
        char *k = tpu__ckpt_concat(KEY_CRC_PREFIX, c->e[i].name);
        if (!k)
            return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", p);
        json_t *cj = json_object_get(c->meta, k);
        free(k);
        if (!cj)
            return bad(d, p, "has no checksum for tensor '%s' (" KEY_CRC_PREFIX "%s in "
                       "__metadata__)", c->e[i].name, c->e[i].name);
        if (!crc_parse(json_string_value(cj), &c->e[i].crc))
            return bad(d, p, "the checksum of tensor '%s' is '%s', not 8 lowercase hex digits",
                       c->e[i].name, json_string_value(cj));
    }
    json_object_foreach(c->meta, key, v) {
        if (!tpu__ckpt_starts_with(key, KEY_CRC_PREFIX))
            continue;
        const char *tname = key + strlen(KEY_CRC_PREFIX);
        bool known = false;
        for (size_t i = 0; i < c->n && !known; i++)
            known = !strcmp(c->e[i].name, tname);
        if (!known)
            return bad(d, p, "has a checksum (%s) for tensor '%s', which the file does not "
                       "hold", key, tname);
    }
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile [0, data_bytes) exactly. */
static int check_layout(struct ckpt *c, uint64_t header_bytes, uint64_t file_bytes,
                        struct tpu_diag *d)
{
    const char *p = c->path;
    const struct entry **s = malloc((c->n ? c->n : 1) * sizeof *s);
    if (!s)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", p);
    for (size_t i = 0; i < c->n; i++)
        s[i] = &c->e[i];
    qsort(s, c->n, sizeof *s, cmp_begin);
    int rc = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < c->n && rc == 0; i++) {
        if (s[i]->begin < at)
            rc = bad(d, p, "tensors '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]) and '%s' "
                     "([%" PRIu64 ", %" PRIu64 "]) overlap", s[i - 1]->name, s[i - 1]->begin,
                     s[i - 1]->end, s[i]->name, s[i]->begin, s[i]->end);
        else if (s[i]->begin > at && i == 0)
            rc = bad(d, p, "bytes [0, %" PRIu64 ") of the data section belong to no tensor "
                     "(the first, '%s', starts at %" PRIu64 "); safetensors leaves no gaps",
                     s[i]->begin, s[i]->name, s[i]->begin);
        else if (s[i]->begin > at)
            rc = bad(d, p, "bytes [%" PRIu64 ", %" PRIu64 ") of the data section, between "
                     "tensors '%s' and '%s', belong to no tensor; safetensors leaves no gaps",
                     at, s[i]->begin, s[i - 1]->name, s[i]->name);
        at = s[i]->end;
    }
    uint64_t expect = 8 + header_bytes + at;
    if (rc == 0 && at > c->data_bytes) {
        size_t i = 0;
        while (s[i]->end <= c->data_bytes)
            i++;
        rc = bad(d, p, "is truncated: its header describes %" PRIu64 " bytes of tensor data (a "
                 "file of %" PRIu64 " bytes) but the file is %" PRIu64 " bytes; tensor '%s' "
                 "(data_offsets [%" PRIu64 ", %" PRIu64 "]) reaches past its end", at, expect,
                 file_bytes, s[i]->name, s[i]->begin, s[i]->end);
    } else if (rc == 0 && at < c->data_bytes) {
        rc = bad(d, p, "has %" PRIu64 " bytes after the tensor data its header describes (the "
                 "file should be %" PRIu64 " bytes, it is %" PRIu64 "); it is damaged or was "
                 "appended to", c->data_bytes - at, expect, file_bytes);
    }
    free(s);
    return rc;
}

static int is_a_directory(struct tpu_diag *d, const char *path)
{
    return tpu__fail(d, TPU_EINVAL, "checkpoint '%s' is a directory, not a checkpoint file; "
                     "give the path of a ckpt-<step>" CKPT_SUFFIX " file", path);
}

/* The step in the header against the step in the file's name, when the name has one. */
static int check_step_name(const struct ckpt *c, struct tpu_diag *d)
{
    const char *slash = strrchr(c->path, '/');
    const char *base = slash ? slash + 1 : c->path;
    uint64_t named;
    if (!tpu__ckpt_name_parse(base, false, &named) || named == c->step)
        return 0;
    return bad(d, c->path, "its header says global step %" PRIu64 " but its name says step %"
               PRIu64 "; a checkpoint's name and step must agree (rename it to "
               CKPT_PREFIX "%" PRIu64 CKPT_SUFFIX ", or restore the original file)", c->step,
               named, c->step);
}

/* Reads the header of the open file c->f (after checking that it is a regular file): its
 * length field, then the header itself into *hdr (the caller frees it), which must start
 * with '{'. *file_bytes gets the file's length. */
static int ckpt_read_header(struct ckpt *c, char **hdr, uint64_t *hdr_bytes,
                            uint64_t *file_bytes, struct tpu_diag *d)
{
    const char *path = c->path;
    struct stat st;
    if (fstat(fileno(c->f), &st) != 0)
        return tpu__fail(d, TPU_EIO, "cannot read checkpoint '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return is_a_directory(d, path);
    if (!S_ISREG(st.st_mode))
        return tpu__fail(d, TPU_EINVAL, "checkpoint '%s' is not a regular file (a device, pipe "
                         "or socket); give the path of a ckpt-<step>" CKPT_SUFFIX " file", path);
    *file_bytes = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (*file_bytes < 8 || fread(len8, 1, 8, c->f) != 8)
        return bad(d, path, "is %" PRIu64 " bytes long, shorter than the 8-byte header length "
                   "that starts a safetensors file (the file is truncated or not a checkpoint)",
                   *file_bytes);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n < 2 || n > MAX_HEADER_BYTES)
        return bad(d, path, "its header length field says %" PRIu64 " bytes; a safetensors "
                   "header is 2 to %u bytes (the file is damaged or not a safetensors file)", n,
                   MAX_HEADER_BYTES);
    if (n > *file_bytes - 8)
        return bad(d, path, "its header length field says %" PRIu64 " bytes, but only %" PRIu64
                   " bytes follow it (the file is truncated or its first 8 bytes are damaged)",
                   n, *file_bytes - 8);
    *hdr_bytes = n;
    *hdr = malloc(n);
    if (!*hdr)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading the header of '%s'", path);
    if (fread(*hdr, 1, n, c->f) != n)
        return tpu__fail(d, TPU_EIO, "cannot read the header of '%s': %s", path,
                         ferror(c->f) ? strerror(errno) : "the file shrank while being read");
    if ((*hdr)[0] != '{')
        return bad(d, path, "its JSON header does not start with '{' (the file is damaged or "
                   "not a safetensors file)");
    return 0;
}

/* Parses the JSON header hdr [n] into c: its __metadata__ object and its tensor entries. */
static int ckpt_parse_header(struct ckpt *c, const char *hdr, uint64_t n, struct tpu_diag *d)
{
    const char *path = c->path;
    json_error_t jerr;
    c->root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!c->root)
        return bad(d, path, "its JSON header is malformed at line %d, column %d: %s", jerr.line,
                   jerr.column, jerr.text);
    const char *key;
    json_t *v;
    size_t count = 0;
    json_object_foreach(c->root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v))
                return bad(d, path, "its __metadata__ is not an object of strings");
            c->meta = v;
        } else {
            count++;
        }
    }
    c->e = calloc(count ? count : 1, sizeof *c->e);
    if (!c->e)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
    json_object_foreach(c->root, key, v) {
        if (strcmp(key, "__metadata__") != 0) {
            int rc = parse_tensor(c, key, v, &c->e[c->n], d);
            if (rc)
                return rc;
            c->n++;
        }
    }
    return 0;
}

/* Opens `path` and checks everything but the data: header length, JSON, structure, layout
 * against the file's length, tpusim's metadata. Leaves c->f at the data section. */
static int ckpt_open(const char *path, struct ckpt *c, struct tpu_diag *d)
{
    *c = (struct ckpt){.path = path};
    char *hdr = NULL;
    c->f = tpu__ckpt_fopen_read(path);
    if (!c->f && errno == EISDIR)
        return is_a_directory(d, path);
    if (!c->f)
        return tpu__fail(d, errno == ENOENT ? TPU_ENOTFOUND : TPU_EIO,
                         "cannot open checkpoint '%s': %s", path, strerror(errno));
    uint64_t n = 0, file_bytes = 0;
    int rc = ckpt_read_header(c, &hdr, &n, &file_bytes, d);
    if (!rc)
        rc = ckpt_parse_header(c, hdr, n, d);
    if (!rc)
        rc = parse_meta(c, d);
    if (!rc)
        rc = check_step_name(c, d);
    if (!rc) {
        c->data_bytes = file_bytes - 8 - n;
        rc = check_layout(c, n, file_bytes, d);
    }
    free(hdr);
    if (rc)
        ckpt_close(c);
    return rc;
}

/* Reads the data section into scratch memory and verifies every checksum. */
static int ckpt_read_data(struct ckpt *c, struct tpu_diag *d)
{
    const char *p = c->path;
    if (c->data_bytes > SIZE_MAX)
        return tpu__fail(d, TPU_ENOMEM, "%s: its %" PRIu64 " bytes of data do not fit in this "
                         "host's memory", p, c->data_bytes);
    size_t bytes = (size_t)c->data_bytes;
    c->data = malloc(bytes ? bytes : 1);
    if (!c->data)
        return tpu__fail(d, TPU_ENOMEM, "out of memory: '%s' needs %zu bytes of scratch memory",
                         p, bytes);
    if (fread(c->data, 1, bytes, c->f) != bytes)
        return tpu__fail(d, TPU_EIO, "cannot read the data of '%s': %s", p,
                         ferror(c->f) ? strerror(errno) : "the file shrank while being read");
    for (size_t i = 0; i < c->n; i++) {
        const struct entry *e = &c->e[i];
        uint32_t crc = tpu__ckpt_crc32(c->data + e->begin, (size_t)(e->end - e->begin));
        if (crc != e->crc)
            return bad(d, p, "tensor '%s' fails its checksum: its bytes have CRC-32 %08" PRIx32
                       " but __metadata__ records %08" PRIx32 " (the data is damaged)", e->name,
                       crc, e->crc);
    }
    uint32_t crc = tpu__ckpt_crc32(c->data, bytes);
    if (crc != c->data_crc)
        return bad(d, p, "its data section fails its checksum: CRC-32 %08" PRIx32 " but "
                   KEY_DATA_CRC " records %08" PRIx32 " (the file is damaged)", crc,
                   c->data_crc);
    return 0;
}

static const struct entry *find_entry(const struct ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].name, name))
            return &c->e[i];
    return NULL;
}

/* The caller's expectations against the header: same names, dtypes and shapes. */
static int check_expected(const struct ckpt *c, const struct tpu_tensor *t, size_t n,
                          struct tpu_diag *d)
{
    const char *p = c->path;
    for (size_t i = 0; i < n; i++) {
        const struct entry *e = find_entry(c, t[i].name);
        if (!e) {
            char names[400] = "";
            size_t used = 0;
            for (size_t j = 0; j < c->n && used + 1 < sizeof names; j++) {
                int w = snprintf(names + used, sizeof names - used, "%s'%s'", j ? ", " : "",
                                 c->e[j].name);
                used += w > 0 ? (size_t)w : 0;
            }
            return tpu__fail(d, TPU_ESHAPE, "%s: has no tensor '%s', which the caller expects "
                             "(the file holds %zu: %s); it was saved from a different model",
                             p, t[i].name, c->n, c->n ? names : "none");
        }
        if (e->dtype != t[i].dtype)
            return tpu__fail(d, TPU_ESHAPE, "%s: tensor '%s' is %s in the file but the caller "
                             "expects %s", p, e->name, tpu__ckpt_dtypes[e->dtype].name,
                             tpu__ckpt_dtypes[t[i].dtype].name);
        if (e->rows != t[i].rows || e->cols != t[i].cols)
            return tpu__fail(d, TPU_ESHAPE, "%s: tensor '%s' has shape [%" PRIu32 ", %" PRIu32
                             "] in the file but the caller expects [%" PRIu32 ", %" PRIu32 "]",
                             p, e->name, e->rows, e->cols, t[i].rows, t[i].cols);
    }
    for (size_t j = 0; j < c->n; j++) {
        bool expected = false;
        for (size_t i = 0; i < n && !expected; i++)
            expected = !strcmp(t[i].name, c->e[j].name);
        if (!expected)
            return tpu__fail(d, TPU_ESHAPE, "%s: holds tensor '%s', which the caller does not "
                             "expect (the file holds %zu tensors, the caller expects %zu); it "
                             "was saved from a different model", p, c->e[j].name, c->n, n);
    }
    return 0;
}

int tpu_checkpoint_load(const char *path, struct tpu_tensor *tensors, size_t n,
                        uint64_t *global_step, struct tpu_diag *d)
{
    if (!path || !path[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint load: the path is empty");
    int rc = tpu__ckpt_validate_tensors(tensors, n, "checkpoint load", d);
    if (rc)
        return rc;
    struct ckpt c;
    rc = ckpt_open(path, &c, d);
    if (rc)
        return rc;
    rc = check_expected(&c, tensors, n, d);
    if (rc == 0)
        rc = ckpt_read_data(&c, d);
    if (rc == 0) {
        /* verified: now, and only now, the caller's buffers change */
        for (size_t i = 0; i < n; i++) {
            const struct entry *e = find_entry(&c, tensors[i].name);
            memcpy(tensors[i].data, c.data + e->begin, tpu__ckpt_tensor_bytes(&tensors[i]));
        }
        if (global_step)
            *global_step = c.step;
    }
    ckpt_close(&c);
    return rc;
}

/* ---- inspecting ---------------------------------------------------------------------- */

int tpu_checkpoint_inspect(const char *path, struct tpu_checkpoint_info *out,
                           struct tpu_diag *d)
{
    if (!path || !path[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint inspect: the path is empty");
    struct ckpt c;
    int rc = ckpt_open(path, &c, d);
    if (rc)
        return rc;
    rc = ckpt_read_data(&c, d);
    if (rc) {
        ckpt_close(&c);
        return rc;
    }
    /* one block: tensors[], meta[], then the strings */
    size_t n_meta = 0, strings = 0;
    const char *key;
    json_t *v;
    json_object_foreach(c.meta, key, v) {
        if (!tpu__ckpt_starts_with(key, RESERVED_PREFIX)) {
            n_meta++;
            strings += strlen(key) + strlen(json_string_value(v)) + 2;
        }
    }
    for (size_t i = 0; i < c.n; i++)
        strings += strlen(c.e[i].name) + 1;
    size_t head = c.n * sizeof(struct tpu_tensor) + n_meta * sizeof(struct tpu_checkpoint_kv);
    unsigned char *block = malloc(head + strings + 1);
    if (!block) {
        ckpt_close(&c);
        return tpu__fail(d, TPU_ENOMEM, "out of memory describing '%s'", path);
    }
    struct tpu_tensor *t = (struct tpu_tensor *)(void *)block;
    struct tpu_checkpoint_kv *kv =
        (struct tpu_checkpoint_kv *)(void *)(block + c.n * sizeof(struct tpu_tensor));
    char *s = (char *)block + head;
    /* in data order */
    const struct entry **order = malloc((c.n ? c.n : 1) * sizeof *order);
    if (!order) {
        free(block);
        ckpt_close(&c);
        return tpu__fail(d, TPU_ENOMEM, "out of memory describing '%s'", path);
    }
    for (size_t i = 0; i < c.n; i++)
        order[i] = &c.e[i];
    qsort(order, c.n, sizeof *order, cmp_begin);
    for (size_t i = 0; i < c.n; i++) {
        size_t len = strlen(order[i]->name) + 1;
        memcpy(s, order[i]->name, len);
        t[i] = (struct tpu_tensor){.name = s, .dtype = order[i]->dtype, .rows = order[i]->rows,
                                   .cols = order[i]->cols};
        s += len;
    }
    free(order);
    size_t m = 0;
    json_object_foreach(c.meta, key, v) {
        if (tpu__ckpt_starts_with(key, RESERVED_PREFIX))
            continue;
        size_t kl = strlen(key) + 1, vl = strlen(json_string_value(v)) + 1;
        memcpy(s, key, kl);
        kv[m].key = s;
        s += kl;
        memcpy(s, json_string_value(v), vl);
        kv[m].value = s;
        s += vl;
        m++;
    }
    *out = (struct tpu_checkpoint_info){.global_step = c.step, .n_tensors = c.n,
                                        .tensors = c.n ? t : NULL, .n_meta = n_meta,
                                        .meta = n_meta ? kv : NULL, .storage_ = block};
    ckpt_close(&c);
    return 0;
}

const char *tpu_checkpoint_info_meta(const struct tpu_checkpoint_info *info, const char *key)
{
    for (size_t i = 0; info && key && i < info->n_meta; i++)
        if (!strcmp(info->meta[i].key, key))
            return info->meta[i].value;
    return NULL;
}

void tpu_checkpoint_info_free(struct tpu_checkpoint_info *info)
{
    if (info) {
        free(info->storage_);
        *info = (struct tpu_checkpoint_info){0};
    }
}
