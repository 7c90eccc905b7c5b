/* Checkpoints as safetensors files with a JSON index: writing them atomically, and reading
 * them back with every check listed in include/tpusim/checkpoint.h (which also documents the
 * format, tpusim's checksum extension in __metadata__, and the crash-safety protocol).
 *
 * This is not a general safetensors library: it reads the dtypes and 2-D shapes tpusim uses,
 * and only files tpusim wrote (they carry the checksums). It holds no state between calls.
 *
 * Reading is in three passes so that a caller's buffers are touched only by a file that
 * passed everything: ckpt_open parses and checks the header against the file's length,
 * the caller's expectations are checked against the header, then ckpt_read_data reads the
 * whole data section into scratch memory and checks every checksum; only then is anything
 * copied out. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "tpusim/checkpoint.h"
#include "util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "tensors are written in host byte order, and safetensors data is little-endian"
#endif

#define FORMAT_ID "tpusim-checkpoint-v1"
#define FORMAT_PREFIX "tpusim-checkpoint-v"
#define INDEX_FORMAT "tpusim-checkpoint-index"
#define INDEX_VERSION 1
#define INDEX_NAME "checkpoint.json"
#define RESERVED_PREFIX "tpusim."
#define KEY_FORMAT "tpusim.format"
#define KEY_STEP "tpusim.global_step"
#define KEY_DATA_CRC "tpusim.data_crc32"
#define KEY_CRC_PREFIX "tpusim.crc32."
#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"
#define TMP_SUFFIX ".tmp"
/* The reference implementation refuses larger headers. */
#define MAX_HEADER_BYTES 100000000u

static const struct {
    const char *name;
    size_t bytes;
} dtypes[] = {
    [TPU_BUF_F32] = {"F32", 4},
    [TPU_BUF_BF16] = {"BF16", 2},
    [TPU_BUF_INT8] = {"I8", 1},
    [TPU_BUF_INT32] = {"I32", 4},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

static bool dtype_valid(enum tpu_buf_dtype t)
{
    return (unsigned)t < N_DTYPES;
}

const char *tpu_checkpoint_dtype_name(enum tpu_buf_dtype t)
{
    return dtype_valid(t) ? dtypes[t].name : "unknown";
}

const char *tpu_checkpoint_stage_name(enum tpu_checkpoint_stage s)
{
    switch (s) {
    case TPU_CHECKPOINT_CREATE:
        return "create";
    case TPU_CHECKPOINT_WRITE:
        return "write";
    case TPU_CHECKPOINT_FSYNC:
        return "fsync";
    case TPU_CHECKPOINT_RENAME:
        return "rename";
    case TPU_CHECKPOINT_FSYNC_DIR:
        return "fsync_dir";
    case TPU_CHECKPOINT_DELETE:
        return "delete";
    }
    return "unknown";
}

void tpu_checkpoint_default_options(struct tpu_checkpoint_options *o)
{
    *o = (struct tpu_checkpoint_options){.keep_max = 5};
}

/* ---- small helpers ------------------------------------------------------------------- */

/* dir + "/" + name in new memory, or NULL when out of memory. */
static char *join(const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    bool slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + slash + nl + 1);
    if (p) {
        memcpy(p, dir, dl);
        if (slash)
            p[dl] = '/';
        memcpy(p + dl + slash, name, nl + 1);
    }
    return p;
}

static char *concat(const char *a, const char *b)
{
    size_t al = strlen(a), bl = strlen(b);
    char *p = malloc(al + bl + 1);
    if (p) {
        memcpy(p, a, al);
        memcpy(p + al, b, bl + 1);
    }
    return p;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool utf8_valid(const char *s)
{
    json_t *j = json_string(s);
    if (!j)
        return false;
    json_decref(j);
    return true;
}

static void crc_hex(uint32_t crc, char out[9])
{
    snprintf(out, 9, "%08" PRIx32, crc);
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

/* A decimal number without sign or leading zeros that fits in 64 bits. */
static bool u64_parse(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20 || (s[0] == '0' && len > 1))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned digit = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* "ckpt-<step>.safetensors" (tmp false) or the same + ".tmp" (tmp true). */
static bool ckpt_name_parse(const char *name, bool tmp, uint64_t *step)
{
    if (!starts_with(name, CKPT_PREFIX))
        return false;
    const char *digits = name + strlen(CKPT_PREFIX);
    const char *end = strchr(digits, '.');
    if (!end)
        return false;
    const char *want = tmp ? CKPT_SUFFIX TMP_SUFFIX : CKPT_SUFFIX;
    return strcmp(end, want) == 0 && u64_parse(digits, (size_t)(end - digits), step);
}

/* fsync a directory so that renames and unlinks in it are durable. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* mkdir -p, each new directory made durable in its parent. */
static int mkdir_p(const char *dir, struct tpu_diag *d)
{
    char *p = strdup(dir);
    if (!p)
        return tpu__fail(d, TPU_ENOMEM, "out of memory creating model_dir '%s'", dir);
    size_t len = strlen(p);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) == 0) {
            char *slash = strrchr(p, '/');
            if (slash == p) {
                fsync_dir("/");
            } else if (slash) {
                *slash = '\0';
                fsync_dir(p);
                *slash = '/';
            } else {
                fsync_dir(".");
            }
        } else if (errno != EEXIST) {
            int rc = tpu__fail(d, TPU_EIO, "cannot create directory '%s' for model_dir '%s': %s",
                               p, dir, strerror(errno));
            free(p);
            return rc;
        }
        p[i] = saved;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tpu__fail(d, TPU_EIO, "model_dir '%s' exists but is not a directory; choose "
                         "another model_dir", dir);
    return 0;
}

/* ---- validation of the caller's tensors and metadata --------------------------------- */

static int validate_tensors(const struct tpu_tensor *t, size_t n, const char *what,
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
        if (!utf8_valid(name))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor %zu's name is not valid UTF-8; "
                             "safetensors names are UTF-8 strings", what, i);
        if (!dtype_valid(t[i].dtype))
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' has dtype %d, which is not a "
                             "tpu_buf_dtype (f32, bf16, int8, int32)", what, name,
                             (int)t[i].dtype);
        if (t[i].rows == 0 || t[i].cols == 0)
            return tpu__fail(d, TPU_EINVAL, "%s: tensor '%s' has shape [%" PRIu32 ", %" PRIu32
                             "]; both dimensions must be at least 1", what, name, t[i].rows,
                             t[i].cols);
        size_t count, bytes;
        if (!tpu__mul_size(t[i].rows, t[i].cols, &count) ||
            !tpu__mul_size(count, dtypes[t[i].dtype].bytes, &bytes))
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

static size_t tensor_bytes(const struct tpu_tensor *t)
{
    return (size_t)t->rows * t->cols * dtypes[t->dtype].bytes;
}

static int validate_meta(const struct tpu_checkpoint_kv *m, size_t n, struct tpu_diag *d)
{
    if (n > 0 && !m)
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: %zu metadata entries given but the "
                         "array is NULL", n);
    for (size_t i = 0; i < n; i++) {
        if (!m[i].key || !m[i].key[0] || !m[i].value)
            return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata entry %zu needs a "
                             "non-empty key and a value (an empty string is fine)", i);
        if (starts_with(m[i].key, RESERVED_PREFIX))
            return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata key '%s' starts with "
                             "'" RESERVED_PREFIX "', which tpusim reserves for its own entries; "
                             "choose another key", m[i].key);
        if (!utf8_valid(m[i].key) || !utf8_valid(m[i].value))
            return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata entry '%s' is not valid "
                             "UTF-8; safetensors metadata is UTF-8 strings", m[i].key);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(m[j].key, m[i].key))
                return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata key '%s' is given "
                                 "twice; keys must be unique", m[i].key);
    }
    return 0;
}

/* ---- atomic writes ------------------------------------------------------------------- */

/* What one atomic write puts in the file: `head` (flushed before the WRITE stage), then the
 * data of `body[0..n_body)` in that order. */
struct content {
    const void *head;
    size_t head_bytes;
    const struct tpu_tensor *const *body;
    size_t n_body;
};

static int fault_at(const struct tpu_checkpoint_options *o, enum tpu_checkpoint_stage s,
                    const char *path)
{
    return o->fault ? o->fault(o->fault_ctx, s, path) : TPU_CHECKPOINT_PROCEED;
}

static int crashed(struct tpu_diag *d, const char *path, enum tpu_checkpoint_stage s)
{
    return tpu__fail(d, TPU_ECANCELED, "saving '%s' stopped at stage %s: the fault hook "
                     "simulated a crash there", path, tpu_checkpoint_stage_name(s));
}

/* What the save does right after the fault hook is asked at each stage, for messages. */
static const char *stage_action(enum tpu_checkpoint_stage s)
{
    switch (s) {
    case TPU_CHECKPOINT_CREATE:
        return "create";
    case TPU_CHECKPOINT_WRITE:
        return "write";
    case TPU_CHECKPOINT_FSYNC:
        return "fsync";
    case TPU_CHECKPOINT_RENAME:
        return "rename into place";
    case TPU_CHECKPOINT_FSYNC_DIR:
        return "fsync the directory of";
    case TPU_CHECKPOINT_DELETE:
        return "delete";
    }
    return "write";
}

/* The step that follows stage s: false with errno set on failure. *f is the open file. */
static bool do_stage(enum tpu_checkpoint_stage s, const char *dir, const char *final_path,
                     const char *tmp, const struct content *c, FILE **f)
{
    switch (s) {
    case TPU_CHECKPOINT_CREATE:
        *f = fopen(tmp, "wb");
        return *f && fwrite(c->head, 1, c->head_bytes, *f) == c->head_bytes && fflush(*f) == 0;
    case TPU_CHECKPOINT_WRITE:
        for (size_t i = 0; i < c->n_body; i++) {
            size_t bytes = tensor_bytes(c->body[i]);
            if (fwrite(c->body[i]->data, 1, bytes, *f) != bytes)
                return false;
        }
        return fflush(*f) == 0;
    case TPU_CHECKPOINT_FSYNC: {
        if (fsync(fileno(*f)) != 0)
            return false;
        int closed = fclose(*f);
        *f = NULL;
        return closed == 0;
    }
    case TPU_CHECKPOINT_RENAME:
        return rename(tmp, final_path) == 0;
    case TPU_CHECKPOINT_FSYNC_DIR:
        return fsync_dir(dir) == 0;
    case TPU_CHECKPOINT_DELETE:
        break;
    }
    return true;
}

/* Writes `c` to <final_path>.tmp, fsyncs it, renames it to `final_path`, fsyncs `dir`,
 * asking the fault hook before each stage. On a failure before the rename the temporary
 * file is removed (after it, the file is complete under its final name and only its
 * durability is in doubt); on a simulated crash everything stays as it is. */
static int write_atomic(const char *dir, const char *final_path, const struct content *c,
                        const struct tpu_checkpoint_options *o, struct tpu_diag *d)
{
    char *tmp = concat(final_path, TMP_SUFFIX);
    if (!tmp)
        return tpu__fail(d, TPU_ENOMEM, "out of memory writing '%s'", final_path);
    FILE *f = NULL;
    int rc = 0, act = TPU_CHECKPOINT_PROCEED, err = 0;
    int s;
    for (s = TPU_CHECKPOINT_CREATE; s <= TPU_CHECKPOINT_FSYNC_DIR; s++) {
        act = fault_at(o, (enum tpu_checkpoint_stage)s, final_path);
        if (act != TPU_CHECKPOINT_PROCEED)
            break;
        if (!do_stage((enum tpu_checkpoint_stage)s, dir, final_path, tmp, c, &f)) {
            err = errno;
            break;
        }
    }
    if (f)
        fclose(f); /* what was written before a stage was flushed before it */
    if (s > TPU_CHECKPOINT_FSYNC_DIR) {
        rc = 0;
    } else if (act == TPU_CHECKPOINT_CRASH) {
        rc = crashed(d, final_path, (enum tpu_checkpoint_stage)s);
    } else {
        if (s < TPU_CHECKPOINT_FSYNC_DIR)
            unlink(tmp);
        enum tpu_checkpoint_stage st = (enum tpu_checkpoint_stage)s;
        bool injected = act != TPU_CHECKPOINT_PROCEED;
        char why[64] = "";
        if (injected)
            snprintf(why, sizeof why, " (fault injected at stage %s)",
                     tpu_checkpoint_stage_name(st));
        rc = tpu__fail(d, TPU_EIO, "cannot %s '%s'%s%s%s: %s%s", stage_action(st), final_path,
                       st < TPU_CHECKPOINT_RENAME ? " (as '" : "",
                       st < TPU_CHECKPOINT_RENAME ? tmp : "",
                       st < TPU_CHECKPOINT_RENAME ? "')" : "", strerror(injected ? EIO : err),
                       why);
    }
    free(tmp);
    return rc;
}

/* ---- the index ----------------------------------------------------------------------- */

struct index_entry {
    uint64_t step;
    char *name; /* file name in model_dir */
};

struct index {
    struct index_entry *e;
    size_t n;
};

static void index_free(struct index *ix)
{
    for (size_t i = 0; i < ix->n; i++)
        free(ix->e[i].name);
    free(ix->e);
    *ix = (struct index){0};
}

static int index_bad(struct tpu_diag *d, const char *path, const char *what)
{
    return tpu__fail(d, TPU_EPARSE, "%s: is not a valid checkpoint index: %s; repair it (the "
                     "checkpoint files beside it are not affected)", path, what);
}

/* One {"path": ..., "global_step": ...} object; the name is checked against the step. */
static int index_parse_entry(const char *path, json_t *j, const char *what,
                             struct index_entry *out, struct tpu_diag *d)
{
    char msg[200];
    json_t *p = json_object_get(j, "path"), *s = json_object_get(j, "global_step");
    if (!json_is_object(j) || !json_is_string(p) || !json_is_integer(s)) {
        snprintf(msg, sizeof msg, "%s is not an object with a string \"path\" and an integer "
                 "\"global_step\"", what);
        return index_bad(d, path, msg);
    }
    const char *name = json_string_value(p);
    uint64_t step;
    if (!ckpt_name_parse(name, false, &step)) {
        snprintf(msg, sizeof msg, "%s names '%.60s', not a file name of the form "
                 "ckpt-<step>" CKPT_SUFFIX, what, name);
        return index_bad(d, path, msg);
    }
    if (json_integer_value(s) < 0 || (uint64_t)json_integer_value(s) != step) {
        snprintf(msg, sizeof msg, "%s gives global_step %" JSON_INTEGER_FORMAT " for '%.60s'",
                 what, json_integer_value(s), name);
        return index_bad(d, path, msg);
    }
    out->step = step;
    out->name = strdup(name);
    return out->name ? 0 : tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
}

/* Reads model_dir's index. No index: 0 with *found false. */
static int index_read(const char *model_dir, struct index *ix, bool *found, struct tpu_diag *d)
{
    *ix = (struct index){0};
    *found = false;
    char *path = join(model_dir, INDEX_NAME);
    if (!path)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading the checkpoint index");
    int rc = 0;
    json_t *root = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno != ENOENT && errno != ENOTDIR)
            rc = tpu__fail(d, TPU_EIO, "cannot open checkpoint index '%s': %s", path,
                           strerror(errno));
        goto out;
    }
    json_error_t jerr;
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root) {
        rc = tpu__fail(d, TPU_EPARSE, "%s: is not a valid checkpoint index: its JSON is "
                       "malformed at line %d, column %d: %s; repair it (the checkpoint files "
                       "beside it are not affected)", path, jerr.line, jerr.column, jerr.text);
        goto out;
    }
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *list = json_object_get(root, "checkpoints"), *latest = json_object_get(root, "latest");
    if (!json_is_object(root) || !json_is_string(fmt) ||
        strcmp(json_string_value(fmt), INDEX_FORMAT) != 0) {
        rc = index_bad(d, path, "it has no \"format\": \"" INDEX_FORMAT "\"");
        goto out;
    }
    if (!json_is_integer(ver)) {
        rc = index_bad(d, path, "it has no integer \"version\"");
        goto out;
    }
    if (json_integer_value(ver) != INDEX_VERSION) {
        rc = tpu__fail(d, TPU_EUNSUPPORTED, "%s: is checkpoint index version %"
                       JSON_INTEGER_FORMAT "; this tpusim reads version %d", path,
                       json_integer_value(ver), INDEX_VERSION);
        goto out;
    }
    if (!json_is_array(list) || json_array_size(list) == 0) {
        rc = index_bad(d, path, "\"checkpoints\" is not a non-empty array");
        goto out;
    }
    size_t n = json_array_size(list);
    ix->e = calloc(n, sizeof *ix->e);
    if (!ix->e) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "entry %zu of \"checkpoints\"", i);
        rc = index_parse_entry(path, json_array_get(list, i), what, &ix->e[i], d);
        if (rc)
            goto out;
        ix->n = i + 1;
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(ix->e[j].name, ix->e[i].name)) {
                char msg[160];
                snprintf(msg, sizeof msg, "'%.60s' is listed twice in \"checkpoints\"",
                         ix->e[i].name);
                rc = index_bad(d, path, msg);
                goto out;
            }
        }
    }
    struct index_entry last = {0};
    rc = index_parse_entry(path, latest, "\"latest\"", &last, d);
    if (rc)
        goto out;
    bool same = !strcmp(last.name, ix->e[n - 1].name);
    free(last.name);
    if (!same) {
        rc = index_bad(d, path, "\"latest\" is not the last entry of \"checkpoints\"");
        goto out;
    }
    *found = true;
out:
    if (rc)
        index_free(ix);
    json_decref(root);
    free(path);
    return rc;
}

static json_t *index_entry_json(const struct index_entry *e)
{
    return json_pack("{s:s, s:I}", "path", e->name, "global_step", (json_int_t)e->step);
}

static int index_write(const char *model_dir, const struct index *ix,
                       const struct tpu_checkpoint_options *o, struct tpu_diag *d)
{
    json_t *list = json_array();
    json_t *root = json_pack("{s:s, s:i, s:o, s:O}", "format", INDEX_FORMAT, "version",
                             INDEX_VERSION, "latest", index_entry_json(&ix->e[ix->n - 1]),
                             "checkpoints", list);
    bool ok = list && root;
    for (size_t i = 0; ok && i < ix->n; i++)
        ok = json_array_append_new(list, index_entry_json(&ix->e[i])) == 0;
    char *text = ok ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(list);
    json_decref(root);
    char *path = join(model_dir, INDEX_NAME);
    char *body = text ? concat(text, "\n") : NULL;
    free(text);
    int rc;
    if (!path || !body) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory writing the checkpoint index");
    } else {
        struct content c = {.head = body, .head_bytes = strlen(body)};
        rc = write_atomic(model_dir, path, &c, o, d);
    }
    free(body);
    free(path);
    return rc;
}

/* ---- saving -------------------------------------------------------------------------- */

/* The 8-byte length and the padded JSON header for tensors in data order `order`. */
static int build_header(const struct tpu_tensor *const *order, size_t n, uint64_t step,
                        const struct tpu_checkpoint_options *o, unsigned char **out,
                        size_t *out_bytes, struct tpu_diag *d)
{
    json_t *root = json_object(), *meta = json_object();
    bool ok = root && meta && json_object_set(root, "__metadata__", meta) == 0;
    char buf[32], key_buf[256];
    uLong data_crc = crc32_z(0L, Z_NULL, 0);
    uint64_t offset = 0;
    ok = ok && json_object_set_new(meta, KEY_FORMAT, json_string(FORMAT_ID)) == 0;
    snprintf(buf, sizeof buf, "%" PRIu64, step);
    ok = ok && json_object_set_new(meta, KEY_STEP, json_string(buf)) == 0;
    for (size_t i = 0; ok && i < n; i++) {
        const struct tpu_tensor *t = order[i];
        size_t bytes = tensor_bytes(t);
        uLong crc = crc32_z(crc32_z(0L, Z_NULL, 0), t->data, bytes);
        data_crc = crc32_z(data_crc, t->data, bytes);
        crc_hex((uint32_t)crc, buf);
        /* key "tpusim.crc32.<name>": the name may be long, so size the key to fit */
        size_t klen = strlen(KEY_CRC_PREFIX) + strlen(t->name) + 1;
        char *key = klen <= sizeof key_buf ? key_buf : malloc(klen);
        ok = key != NULL;
        if (ok) {
            snprintf(key, klen, "%s%s", KEY_CRC_PREFIX, t->name);
            ok = json_object_set_new(meta, key, json_string(buf)) == 0;
            if (key != key_buf)
                free(key);
        }
        json_t *e = json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", dtypes[t->dtype].name,
                              "shape", (json_int_t)t->rows, (json_int_t)t->cols,
                              "data_offsets", (json_int_t)offset,
                              (json_int_t)(offset + bytes));
        ok = ok && json_object_set_new(root, t->name, e) == 0;
        offset += bytes;
    }
    crc_hex((uint32_t)data_crc, buf);
    ok = ok && json_object_set_new(meta, KEY_DATA_CRC, json_string(buf)) == 0;
    for (size_t i = 0; ok && i < o->n_meta; i++)
        ok = json_object_set_new(meta, o->meta[i].key, json_string(o->meta[i].value)) == 0;
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(meta);
    json_decref(root);
    if (!text)
        return tpu__fail(d, TPU_ENOMEM, "out of memory building a checkpoint header");
    size_t len = strlen(text);
    size_t padded = len + (8 - len % 8) % 8;
    if (padded > MAX_HEADER_BYTES) {
        free(text);
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: the header would be %zu bytes, more "
                         "than the %u that safetensors readers accept; use fewer tensors or "
                         "shorter names and metadata", padded, MAX_HEADER_BYTES);
    }
    unsigned char *h = malloc(8 + padded);
    if (!h) {
        free(text);
        return tpu__fail(d, TPU_ENOMEM, "out of memory building a checkpoint header");
    }
    for (int i = 0; i < 8; i++)
        h[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(h + 8, text, len);
    memset(h + 8 + len, ' ', padded - len);
    free(text);
    *out = h;
    *out_bytes = 8 + padded;
    return 0;
}

/* After the new index is durable: removes leftover temporary files and, with keep_max > 0,
 * every checkpoint file the index does not name. Failures to delete are not errors (the file
 * is out of the index; the next save tries again). */
static int collect_garbage(const char *model_dir, const struct index *ix,
                           const struct tpu_checkpoint_options *o, struct tpu_diag *d)
{
    DIR *dir = opendir(model_dir);
    if (!dir)
        return 0;
    int rc = 0;
    bool removed = false;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        uint64_t step;
        bool victim = false;
        if (!strcmp(de->d_name, INDEX_NAME TMP_SUFFIX) ||
            ckpt_name_parse(de->d_name, true, &step)) {
            victim = true;
        } else if (o->keep_max > 0 && ckpt_name_parse(de->d_name, false, &step)) {
            victim = true;
            for (size_t i = 0; i < ix->n; i++)
                if (!strcmp(ix->e[i].name, de->d_name))
                    victim = false;
        }
        if (!victim)
            continue;
        char *path = join(model_dir, de->d_name);
        if (!path)
            break;
        int act = fault_at(o, TPU_CHECKPOINT_DELETE, path);
        if (act == TPU_CHECKPOINT_CRASH) {
            rc = crashed(d, path, TPU_CHECKPOINT_DELETE);
            free(path);
            break;
        }
        if (act == TPU_CHECKPOINT_PROCEED && unlink(path) == 0)
            removed = true;
        free(path);
    }
    closedir(dir);
    if (removed && rc == 0)
        fsync_dir(model_dir);
    return rc;
}

int tpu_checkpoint_save(const char *model_dir, uint64_t global_step,
                        const struct tpu_tensor *tensors, size_t n_tensors,
                        const struct tpu_checkpoint_options *opts, char *path_out,
                        size_t path_cap, struct tpu_diag *d)
{
    struct tpu_checkpoint_options defaults;
    tpu_checkpoint_default_options(&defaults);
    const struct tpu_checkpoint_options *o = opts ? opts : &defaults;
    if (!model_dir || !model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: model_dir is empty; give the "
                         "directory that holds the run's checkpoints");
    if (global_step > (uint64_t)INT64_MAX)
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: global_step %" PRIu64 " is larger "
                         "than 2^63 - 1, the largest step the index records", global_step);
    int rc = validate_tensors(tensors, n_tensors, "checkpoint save", d);
    if (rc)
        return rc;
    rc = validate_meta(o->meta, o->n_meta, d);
    if (rc)
        return rc;

    char fname[64];
    snprintf(fname, sizeof fname, CKPT_PREFIX "%" PRIu64 CKPT_SUFFIX, global_step);
    char *path = join(model_dir, fname);
    const struct tpu_tensor **order = malloc((n_tensors ? n_tensors : 1) * sizeof *order);
    struct index old = {0}, fresh = {0};
    unsigned char *head = NULL;
    size_t head_bytes = 0;
    if (!path || !order) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory saving a checkpoint");
        goto out;
    }
    if (path_out && strlen(path) + 1 > path_cap) {
        rc = tpu__fail(d, TPU_ERANGE, "checkpoint save: the path '%s' needs %zu bytes but "
                       "path_out holds %zu; nothing was written", path, strlen(path) + 1,
                       path_cap);
        goto out;
    }
    bool found;
    rc = index_read(model_dir, &old, &found, d);
    if (rc)
        goto out;
    rc = mkdir_p(model_dir, d);
    if (rc)
        goto out;

    /* data order: 4-byte dtypes, then 2-byte, then 1-byte, so each tensor is aligned */
    size_t k = 0;
    for (size_t size = 4; size >= 1; size /= 2)
        for (size_t i = 0; i < n_tensors; i++)
            if (dtypes[tensors[i].dtype].bytes == size)
                order[k++] = &tensors[i];
    rc = build_header(order, n_tensors, global_step, o, &head, &head_bytes, d);
    if (rc)
        goto out;
    struct content c = {.head = head, .head_bytes = head_bytes, .body = order,
                        .n_body = n_tensors};
    rc = write_atomic(model_dir, path, &c, o, d);
    if (rc)
        goto out;

    /* the new index: the old one without this file, then this file; the oldest go first */
    fresh.e = calloc(old.n + 1, sizeof *fresh.e);
    if (!fresh.e) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory saving a checkpoint");
        goto out;
    }
    for (size_t i = 0; i < old.n; i++)
        if (strcmp(old.e[i].name, fname) != 0)
            fresh.e[fresh.n++] = old.e[i];
    fresh.e[fresh.n++] = (struct index_entry){.step = global_step, .name = fname};
    size_t first = o->keep_max > 0 && fresh.n > o->keep_max ? fresh.n - o->keep_max : 0;
    struct index kept = {.e = fresh.e + first, .n = fresh.n - first};
    rc = index_write(model_dir, &kept, o, d);
    if (rc)
        goto out;
    rc = collect_garbage(model_dir, &kept, o, d);
    if (rc)
        goto out;
    if (path_out)
        memcpy(path_out, path, strlen(path) + 1);
out:
    free(fresh.e); /* its names are borrowed from `old` and fname */
    index_free(&old);
    free(head);
    free(order);
    free(path);
    return rc;
}

/* ---- reading the index --------------------------------------------------------------- */

int tpu_checkpoint_latest(const char *model_dir, uint64_t *step, char *path, size_t cap,
                          struct tpu_diag *d)
{
    if (!model_dir || !model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint latest: model_dir is empty");
    struct index ix;
    bool found;
    int rc = index_read(model_dir, &ix, &found, d);
    if (rc)
        return rc;
    if (!found)
        return tpu__fail(d, TPU_ENOTFOUND, "'%s' holds no checkpoint (it has no %s index); "
                         "training starts from step 0", model_dir, INDEX_NAME);
    const struct index_entry *last = &ix.e[ix.n - 1];
    char *full = join(model_dir, last->name);
    struct stat st;
    if (!full) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading the checkpoint index");
    } else if (stat(full, &st) != 0) {
        rc = tpu__fail(d, TPU_EIO, "%s/%s names '%s' as the latest checkpoint, but it cannot "
                       "be read: %s; restore the file or repair the index", model_dir,
                       INDEX_NAME, last->name, strerror(errno));
    } else if (path && strlen(full) + 1 > cap) {
        rc = tpu__fail(d, TPU_ERANGE, "checkpoint latest: the path '%s' needs %zu bytes but "
                       "the buffer holds %zu", full, strlen(full) + 1, cap);
    } else {
        if (path)
            memcpy(path, full, strlen(full) + 1);
        if (step)
            *step = last->step;
    }
    free(full);
    index_free(&ix);
    return rc;
}

int tpu_checkpoint_list(const char *model_dir, struct tpu_checkpoint_entry **entries,
                        size_t *n, struct tpu_diag *d)
{
    if (!model_dir || !model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint list: model_dir is empty");
    struct index ix;
    bool found;
    int rc = index_read(model_dir, &ix, &found, d);
    if (rc)
        return rc;
    struct tpu_checkpoint_entry *out = NULL;
    if (found) {
        out = calloc(ix.n, sizeof *out);
        for (size_t i = 0; out && i < ix.n; i++) {
            out[i].global_step = ix.e[i].step;
            out[i].path = join(model_dir, ix.e[i].name);
            if (!out[i].path) {
                tpu_checkpoint_list_free(out, i);
                out = NULL;
            }
        }
        if (!out) {
            index_free(&ix);
            return tpu__fail(d, TPU_ENOMEM, "out of memory listing checkpoints");
        }
    }
    *entries = out;
    *n = found ? ix.n : 0;
    index_free(&ix);
    return 0;
}

void tpu_checkpoint_list_free(struct tpu_checkpoint_entry *entries, size_t n)
{
    if (!entries)
        return;
    for (size_t i = 0; i < n; i++)
        free(entries[i].path);
    free(entries);
}

/* ---- reading a checkpoint ------------------------------------------------------------ */

struct entry {
    const char *name; /* points into the JSON tree */
    enum tpu_buf_dtype dtype;
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
    for (t = 0; t < N_DTYPES; t++)
        if (!strcmp(json_string_value(dt), dtypes[t].name))
            break;
    if (t == N_DTYPES)
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
    uint64_t count = (uint64_t)rows * (uint64_t)cols, bytes = count * dtypes[t].bytes;
    if (count > UINT64_MAX / dtypes[t].bytes || bytes != (uint64_t)(end - begin))
        return bad(d, p, "tensor '%s' is %s [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                   "], which takes %" PRIu64 " bytes, but its data_offsets [%"
                   JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT "] span %" PRIu64 " bytes",
                   name, dtypes[t].name, rows, cols, bytes, begin, end,
                   (uint64_t)(end - begin));
    *e = (struct entry){.name = name, .dtype = (enum tpu_buf_dtype)t, .rows = (uint32_t)rows,
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
        if (starts_with(f, FORMAT_PREFIX))
            return tpu__fail(d, TPU_EUNSUPPORTED, "%s: is checkpoint format '%s'; this tpusim "
                             "reads " FORMAT_ID " (a newer tpusim wrote the file)", p, f);
        return bad(d, p, KEY_FORMAT " is '%s', not a tpusim checkpoint format", f);
    }
    json_t *step = json_object_get(c->meta, KEY_STEP);
    if (!step || !u64_parse(json_string_value(step), strlen(json_string_value(step)), &c->step))
        return bad(d, p, KEY_STEP " is %s%s%s, not a decimal step number",
                   step ? "'" : "", step ? json_string_value(step) : "missing", step ? "'" : "");
    json_t *dc = json_object_get(c->meta, KEY_DATA_CRC);
    if (!dc || !crc_parse(json_string_value(dc), &c->data_crc))
        return bad(d, p, KEY_DATA_CRC " is %s%s%s, not 8 lowercase hex digits",
                   dc ? "'" : "", dc ? json_string_value(dc) : "missing", dc ? "'" : "");
    for (size_t i = 0; i < c->n; i++) {
        char *k = concat(KEY_CRC_PREFIX, c->e[i].name);
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
        if (!starts_with(key, KEY_CRC_PREFIX))
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

/* Opens `path` and checks everything but the data: header length, JSON, structure, layout
 * against the file's length, tpusim's metadata. Leaves c->f at the data section. */
static int ckpt_open(const char *path, struct ckpt *c, struct tpu_diag *d)
{
    *c = (struct ckpt){.path = path};
    int rc = 0;
    char *hdr = NULL;
    c->f = fopen(path, "rb");
    if (!c->f)
        return tpu__fail(d, errno == ENOENT ? TPU_ENOTFOUND : TPU_EIO,
                         "cannot open checkpoint '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(c->f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = tpu__fail(d, TPU_EIO, "checkpoint '%s' is not a regular file", path);
        goto out;
    }
    uint64_t file_bytes = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (file_bytes < 8 || fread(len8, 1, 8, c->f) != 8) {
        rc = bad(d, path, "is %" PRIu64 " bytes long, shorter than the 8-byte header length "
                 "that starts a safetensors file (the file is truncated or not a checkpoint)",
                 file_bytes);
        goto out;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n < 2 || n > MAX_HEADER_BYTES) {
        rc = bad(d, path, "its header length field says %" PRIu64 " bytes; a safetensors header "
                 "is 2 to %u bytes (the file is damaged or not a safetensors file)", n,
                 MAX_HEADER_BYTES);
        goto out;
    }
    if (n > file_bytes - 8) {
        rc = bad(d, path, "its header length field says %" PRIu64 " bytes, but only %" PRIu64
                 " bytes follow it (the file is truncated or its first 8 bytes are damaged)", n,
                 file_bytes - 8);
        goto out;
    }
    hdr = malloc(n);
    if (!hdr) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading the header of '%s'", path);
        goto out;
    }
    if (fread(hdr, 1, n, c->f) != n) {
        rc = tpu__fail(d, TPU_EIO, "cannot read the header of '%s': %s", path,
                       ferror(c->f) ? strerror(errno) : "the file shrank while being read");
        goto out;
    }
    if (hdr[0] != '{') {
        rc = bad(d, path, "its JSON header does not start with '{' (the file is damaged or not "
                 "a safetensors file)");
        goto out;
    }
    json_error_t jerr;
    c->root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!c->root) {
        rc = bad(d, path, "its JSON header is malformed at line %d, column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        goto out;
    }
    const char *key;
    json_t *v;
    size_t count = 0;
    json_object_foreach(c->root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = bad(d, path, "its __metadata__ is not an object of strings");
                goto out;
            }
            c->meta = v;
        } else {
            count++;
        }
    }
    c->e = calloc(count ? count : 1, sizeof *c->e);
    if (!c->e) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
        goto out;
    }
    json_object_foreach(c->root, key, v) {
        if (strcmp(key, "__metadata__") != 0) {
            rc = parse_tensor(c, key, v, &c->e[c->n], d);
            if (rc)
                goto out;
            c->n++;
        }
    }
    rc = parse_meta(c, d);
    if (rc)
        goto out;
    c->data_bytes = file_bytes - 8 - n;
    rc = check_layout(c, n, file_bytes, d);
out:
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
        uint32_t crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), c->data + e->begin,
                                         (size_t)(e->end - e->begin));
        if (crc != e->crc)
            return bad(d, p, "tensor '%s' fails its checksum: its bytes have CRC-32 %08" PRIx32
                       " but __metadata__ records %08" PRIx32 " (the data is damaged)", e->name,
                       crc, e->crc);
    }
    uint32_t crc = (uint32_t)crc32_z(crc32_z(0L, Z_NULL, 0), c->data, bytes);
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
                             "expects %s", p, e->name, dtypes[e->dtype].name,
                             dtypes[t[i].dtype].name);
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
    int rc = validate_tensors(tensors, n, "checkpoint load", d);
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
            memcpy(tensors[i].data, c.data + e->begin, tensor_bytes(&tensors[i]));
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
        if (!starts_with(key, RESERVED_PREFIX)) {
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
        if (starts_with(key, RESERVED_PREFIX))
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
