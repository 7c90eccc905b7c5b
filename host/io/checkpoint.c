/* Checkpoints, saving: safetensors files written atomically, the JSON index that names
 * them, and keep_max's deletion of what falls out of it (include/tpusim/checkpoint.h
 * documents the format, tpusim's checksum extension in __metadata__ and the crash-safety
 * protocol). Reading the index (latest, list) is here too, since saving starts from it;
 * loading and inspecting a checkpoint file, with every check on it, are in checkpoint_read.c.
 * Both files share a few helpers through checkpoint_int.h.
 *
 * This is not a general safetensors library: it writes the dtypes and 2-D shapes tpusim
 * uses. It holds no state between calls. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint_int.h"
#include "util.h"

#define INDEX_FORMAT "tpusim-checkpoint-index"
#define INDEX_VERSION 1
#define INDEX_NAME "checkpoint.json"
#define DAMAGED_SUFFIX ".damaged"
/* An index entry is under 100 bytes; a larger file is not an index tpusim wrote. */
#define MAX_INDEX_BYTES (64 << 20)

const struct tpu__ckpt_dtype tpu__ckpt_dtypes[] = {
    [TPU_F32] = {"F32"},
    [TPU_BF16] = {"BF16"},
    [TPU_INT8] = {"I8"},
    [TPU_INT32] = {"I32"},
};
const size_t tpu__ckpt_n_dtypes = sizeof tpu__ckpt_dtypes / sizeof tpu__ckpt_dtypes[0];

const char *tpu_checkpoint_dtype_name(enum tpu_dtype t)
{
    return tpu__ckpt_dtype_valid(t) ? tpu__ckpt_dtypes[t].name : "unknown";
}

/* Each stage's name, and what the save does right after the fault hook is asked at it (for
 * messages). */
static const struct {
    const char *name, *action;
} stages[] = {
    [TPU_CHECKPOINT_CREATE] = {"create", "create"},
    [TPU_CHECKPOINT_WRITE] = {"write", "write"},
    [TPU_CHECKPOINT_FSYNC] = {"fsync", "fsync"},
    [TPU_CHECKPOINT_RENAME] = {"rename", "rename into place"},
    [TPU_CHECKPOINT_FSYNC_DIR] = {"fsync_dir", "fsync the directory of"},
    [TPU_CHECKPOINT_DELETE] = {"delete", "delete"},
};
#define N_STAGES (sizeof stages / sizeof stages[0])

const char *tpu_checkpoint_stage_name(enum tpu_checkpoint_stage s)
{
    return (unsigned)s < N_STAGES ? stages[s].name : "unknown";
}

static const char *stage_action(enum tpu_checkpoint_stage s)
{
    return (unsigned)s < N_STAGES ? stages[s].action : "write";
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

FILE *tpu__ckpt_fopen_read(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    /* reads of a regular file ignore O_NONBLOCK; clear it all the same */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

char *tpu__ckpt_concat(const char *a, const char *b)
{
    size_t al = strlen(a), bl = strlen(b);
    char *p = malloc(al + bl + 1);
    if (p) {
        memcpy(p, a, al);
        memcpy(p + al, b, bl + 1);
    }
    return p;
}

static void crc_hex(uint32_t crc, char out[9])
{
    snprintf(out, 9, "%08" PRIx32, crc);
}

bool tpu__ckpt_u64_parse(const char *s, size_t len, uint64_t *out)
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

bool tpu__ckpt_name_parse(const char *name, bool tmp, uint64_t *step)
{
    if (!tpu__ckpt_starts_with(name, CKPT_PREFIX))
        return false;
    const char *digits = name + strlen(CKPT_PREFIX);
    const char *end = strchr(digits, '.');
    if (!end)
        return false;
    const char *want = tmp ? CKPT_SUFFIX TMP_SUFFIX : CKPT_SUFFIX;
    return strcmp(end, want) == 0 && tpu__ckpt_u64_parse(digits, (size_t)(end - digits), step);
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

int tpu_checkpoint_make_dir(const char *dir, struct tpu_diag *d)
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

/* ---- validation of the caller's metadata --------------------------------------------- */

static int validate_meta(const struct tpu_checkpoint_kv *m, size_t n, struct tpu_diag *d)
{
    if (n > 0 && !m)
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: %zu metadata entries given but the "
                         "array is NULL", n);
    for (size_t i = 0; i < n; i++) {
        if (!m[i].key || !m[i].key[0] || !m[i].value)
            return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata entry %zu needs a "
                             "non-empty key and a value (an empty string is fine)", i);
        if (tpu__ckpt_starts_with(m[i].key, RESERVED_PREFIX))
            return tpu__fail(d, TPU_EINVAL, "checkpoint save: metadata key '%s' starts with "
                             "'" RESERVED_PREFIX "', which tpusim reserves for its own entries; "
                             "choose another key", m[i].key);
        if (!tpu__ckpt_utf8_valid(m[i].key) || !tpu__ckpt_utf8_valid(m[i].value))
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
            size_t bytes = tpu__ckpt_tensor_bytes(c->body[i]);
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
 * durability is in doubt); on a simulated crash everything stays as it is. *renamed (if not
 * NULL) tells whether the file reached its final name. */
static int write_atomic(const char *dir, const char *final_path, const struct content *c,
                        const struct tpu_checkpoint_options *o, bool *renamed,
                        struct tpu_diag *d)
{
    char *tmp = tpu__ckpt_concat(final_path, TMP_SUFFIX);
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
    if (renamed)
        *renamed = s >= TPU_CHECKPOINT_FSYNC_DIR;
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
        const int e = injected ? EIO : err;
        const char *fix = "; the checkpoints saved before are intact";
        if (e == ENOSPC || e == EDQUOT)
            fix = "; the file system is full: free space there or choose another model_dir "
                  "(the checkpoints saved before are intact)";
        else if (e == EROFS || e == EACCES || e == EPERM)
            fix = "; model_dir must be writable: make it so (a read-only mount: remount it "
                  "read-write) or choose another model_dir (the checkpoints saved before are "
                  "intact)";
        rc = tpu__fail(d, TPU_EIO, "cannot %s '%s'%s%s%s: %s%s%s", stage_action(st),
                       final_path, st < TPU_CHECKPOINT_RENAME ? " (as '" : "",
                       st < TPU_CHECKPOINT_RENAME ? tmp : "",
                       st < TPU_CHECKPOINT_RENAME ? "')" : "", strerror(e), why, fix);
    }
    free(tmp);
    return rc;
}

/* ---- the index ----------------------------------------------------------------------- */

struct index_entry {
    uint64_t step;
    char *name; /* file name in model_dir */
};

/* An index: the kept checkpoints e[0..n) (oldest save first), and del[0..n_del), the files
 * that fell out of it and that its writer deletes right after writing it ("deleting" in the
 * file: a save that crashed or failed to delete them leaves them to the next save, which
 * can still account for them). */
struct index {
    struct index_entry *e;
    size_t n;
    struct index_entry *del;
    size_t n_del;
};

static void index_free(struct index *ix)
{
    for (size_t i = 0; i < ix->n; i++)
        free(ix->e[i].name);
    for (size_t i = 0; i < ix->n_del; i++)
        free(ix->del[i].name);
    free(ix->e);
    free(ix->del);
    *ix = (struct index){0};
}

static int index_bad(struct tpu_diag *d, const char *path, const char *what)
{
    return tpu__fail(d, TPU_EPARSE, "%s: is not a valid checkpoint index: %s; repair or remove "
                     "it (the checkpoint files beside it are not affected)", path, what);
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
    if (!tpu__ckpt_name_parse(name, false, &step)) {
        snprintf(msg, sizeof msg, "%s names '%.60s', not a file name of the form "
                 "ckpt-<step>" CKPT_SUFFIX, what, name);
        return index_bad(d, path, msg);
    }
    if (step > TPU_CHECKPOINT_MAX_STEP) {
        snprintf(msg, sizeof msg, "%s names step %" PRIu64 ", beyond %" PRIu64 " (2^53 - 1), "
                 "the largest global step tpusim accepts", what, step,
                 (uint64_t)TPU_CHECKPOINT_MAX_STEP);
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

/* Opens the index file at path and parses its JSON into *root (the caller's to decref), after
 * checking that it is a regular file of a sane size. No such file: 0 with *root NULL. */
static int index_load_json(const char *path, json_t **root, struct tpu_diag *d)
{
    *root = NULL;
    FILE *f = tpu__ckpt_fopen_read(path);
    if (!f && errno == EISDIR)
        return index_bad(d, path, "it is a directory, not a file");
    if (!f) {
        if (errno != ENOENT && errno != ENOTDIR)
            return tpu__fail(d, TPU_EIO, "cannot open checkpoint index '%s': %s", path,
                             strerror(errno));
        return 0;
    }
    /* the file's real size and kind before its bytes are trusted */
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int rc = tpu__fail(d, TPU_EIO, "cannot read checkpoint index '%s': %s", path,
                           strerror(errno));
        fclose(f);
        return rc;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_INDEX_BYTES) {
        char msg[160];
        if (S_ISDIR(st.st_mode))
            snprintf(msg, sizeof msg, "it is a directory, not a file");
        else if (!S_ISREG(st.st_mode))
            snprintf(msg, sizeof msg, "it is not a regular file");
        else
            snprintf(msg, sizeof msg, "it is %lld bytes, more than the %d bytes an index of "
                     "a million checkpoints takes", (long long)st.st_size, MAX_INDEX_BYTES);
        fclose(f);
        return index_bad(d, path, msg);
    }
    json_error_t jerr;
    *root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!*root)
        return tpu__fail(d, TPU_EPARSE, "%s: is not a valid checkpoint index: its JSON is "
                         "malformed at line %d, column %d: %s; repair or remove it (the "
                         "checkpoint files beside it are not affected)", path, jerr.line,
                         jerr.column, jerr.text);
    return 0;
}

/* The entries of an index array into out[0..n) (allocated here, at least one), counting
 * them in *n_out as they parse (so that index_free frees what was read); duplicate names
 * are refused when `unique`. */
static int index_parse_list(const char *path, json_t *list, const char *list_name, bool unique,
                            struct index_entry **out, size_t *n_out, struct tpu_diag *d)
{
    size_t n = json_array_size(list);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
    for (size_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "entry %zu of \"%s\"", i, list_name);
        int rc = index_parse_entry(path, json_array_get(list, i), what, &(*out)[i], d);
        if (rc)
            return rc;
        *n_out = i + 1;
        for (size_t j = 0; unique && j < i; j++) {
            if (!strcmp((*out)[j].name, (*out)[i].name)) {
                char msg[160];
                snprintf(msg, sizeof msg, "'%.60s' is listed twice in \"%s\"", (*out)[i].name,
                         list_name);
                return index_bad(d, path, msg);
            }
        }
    }
    return 0;
}

/* The index held by root (the JSON of the file at path) into ix. */
static int index_from_json(const char *path, json_t *root, struct index *ix, struct tpu_diag *d)
{
    json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
    json_t *list = json_object_get(root, "checkpoints"), *latest = json_object_get(root, "latest");
    if (!json_is_object(root) || !json_is_string(fmt) ||
        strcmp(json_string_value(fmt), INDEX_FORMAT) != 0)
        return index_bad(d, path, "it has no \"format\": \"" INDEX_FORMAT "\"");
    if (!json_is_integer(ver))
        return index_bad(d, path, "it has no integer \"version\"");
    if (json_integer_value(ver) != INDEX_VERSION)
        return tpu__fail(d, TPU_EUNSUPPORTED, "%s: is checkpoint index version %"
                         JSON_INTEGER_FORMAT "; this tpusim reads version %d", path,
                         json_integer_value(ver), INDEX_VERSION);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return index_bad(d, path, "\"checkpoints\" is not a non-empty array");
    int rc = index_parse_list(path, list, "checkpoints", true, &ix->e, &ix->n, d);
    if (rc)
        return rc;
    json_t *del = json_object_get(root, "deleting");
    if (del && !json_is_array(del))
        return index_bad(d, path, "\"deleting\" is not an array");
    if ((rc = index_parse_list(path, del, "deleting", false, &ix->del, &ix->n_del, d)))
        return rc;
    struct index_entry last = {0};
    rc = index_parse_entry(path, latest, "\"latest\"", &last, d);
    if (rc)
        return rc;
    bool same = !strcmp(last.name, ix->e[ix->n - 1].name);
    free(last.name);
    if (!same)
        return index_bad(d, path, "\"latest\" is not the last entry of \"checkpoints\"");
    return 0;
}

/* Reads model_dir's index. No index: 0 with *found false. */
static int index_read(const char *model_dir, struct index *ix, bool *found, struct tpu_diag *d)
{
    *ix = (struct index){0};
    *found = false;
    char *path = join(model_dir, INDEX_NAME);
    if (!path)
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading the checkpoint index");
    json_t *root = NULL;
    int rc = index_load_json(path, &root, d);
    if (!rc && root) {
        rc = index_from_json(path, root, ix, d);
        *found = !rc;
    }
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
    if (ok && ix->n_del > 0) {
        json_t *del = json_array();
        ok = del && json_object_set_new(root, "deleting", del) == 0;
        for (size_t i = 0; ok && i < ix->n_del; i++)
            ok = json_array_append_new(del, index_entry_json(&ix->del[i])) == 0;
    }
    char *text = ok ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(list);
    json_decref(root);
    char *path = join(model_dir, INDEX_NAME);
    char *body = text ? tpu__ckpt_concat(text, "\n") : NULL;
    free(text);
    int rc;
    if (!path || !body) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory writing the checkpoint index");
    } else {
        struct content c = {.head = body, .head_bytes = strlen(body)};
        rc = write_atomic(model_dir, path, &c, o, NULL, d);
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
        size_t bytes = tpu__ckpt_tensor_bytes(t);
        data_crc = crc32_z(data_crc, t->data, bytes);
        crc_hex(tpu__ckpt_crc32(t->data, bytes), buf);
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
        json_t *e = json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", tpu__ckpt_dtypes[t->dtype].name,
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

/* Deletes model_dir/name (asking the fault hook first); sets *removed if it went. */
static int delete_file(const char *model_dir, const char *name,
                       const struct tpu_checkpoint_options *o, bool *removed,
                       struct tpu_diag *d)
{
    char *path = join(model_dir, name);
    if (!path)
        return 0; /* out of memory: the file stays, the next save tries again */
    int rc = 0, act = fault_at(o, TPU_CHECKPOINT_DELETE, path);
    if (act == TPU_CHECKPOINT_CRASH)
        rc = crashed(d, path, TPU_CHECKPOINT_DELETE);
    else if (act == TPU_CHECKPOINT_PROCEED && unlink(path) == 0)
        *removed = true;
    free(path);
    return rc;
}

static bool index_has(const struct index *ix, const char *name)
{
    for (size_t i = 0; i < ix->n; i++)
        if (!strcmp(ix->e[i].name, name))
            return true;
    return false;
}

/* After the new index `ix` is durable: deletes the files its "deleting" list names (which
 * came from a valid index), and leftover temporary files of checkpoints and of the index.
 * Nothing else: a checkpoint file no valid index named is not this save's to delete (see the
 * header). Failures to delete are not errors (the next save tries again). */
static int collect_garbage(const char *model_dir, const struct index *ix,
                           const struct tpu_checkpoint_options *o, struct tpu_diag *d)
{
    int rc = 0;
    bool removed = false;
    for (size_t i = 0; i < ix->n_del && rc == 0; i++)
        rc = delete_file(model_dir, ix->del[i].name, o, &removed, d);
    DIR *dir = rc == 0 ? opendir(model_dir) : NULL;
    if (dir) {
        struct dirent *de;
        while (rc == 0 && (de = readdir(dir)) != NULL) {
            uint64_t step;
            if (!strcmp(de->d_name, INDEX_NAME TMP_SUFFIX) ||
                tpu__ckpt_name_parse(de->d_name, true, &step))
                rc = delete_file(model_dir, de->d_name, o, &removed, d);
        }
        closedir(dir);
    }
    if (removed && rc == 0)
        fsync_dir(model_dir);
    return rc;
}

/* Whether model_dir's index (if it reads as valid) names `name`. */
static bool index_names(const char *model_dir, const char *name)
{
    struct index ix;
    bool found, named = false;
    if (index_read(model_dir, &ix, &found, NULL) == 0 && found)
        named = index_has(&ix, name);
    index_free(&ix);
    return named;
}

/* Renames a damaged index to checkpoint.json.damaged, so that nothing a user might want to
 * repair by hand is lost when the new index is written. */
static int move_damaged_index(const char *model_dir, char **moved_to, struct tpu_diag *d)
{
    char *from = join(model_dir, INDEX_NAME), *to = join(model_dir, INDEX_NAME DAMAGED_SUFFIX);
    int rc = 0;
    if (!from || !to) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory saving a checkpoint");
    } else if (rename(from, to) != 0) {
        rc = tpu__fail(d, TPU_EIO, "the checkpoint index '%s' is damaged and cannot be moved "
                       "aside to '%s': %s; move or remove it yourself", from, to,
                       strerror(errno));
    } else {
        fsync_dir(model_dir);
    }
    free(from);
    if (rc) {
        free(to);
        to = NULL;
    }
    *moved_to = to;
    return rc;
}

/* The order of the tensors' data in the file: 4-byte dtypes, then 2-byte, then 1-byte, so
 * that each tensor is aligned; order has room for n pointers into tensors. */
static void data_order(const struct tpu_tensor *tensors, size_t n,
                       const struct tpu_tensor **order)
{
    size_t k = 0;
    for (size_t size = 4; size >= 1; size /= 2)
        for (size_t i = 0; i < n; i++)
            if (tpu_dtype_bytes(tensors[i].dtype) == size)
                order[k++] = &tensors[i];
}

/* The index after saving fname (global_step): the old one without fname, then fname; the
 * oldest go first, and *first of them are those keep_max drops. Its deletion list: what
 * keep_max drops, and what the old index still had to delete (if it is there); never fname.
 * fresh borrows its names from old and fname: the caller frees its two arrays only. */
static int index_after_save(const char *model_dir, const struct index *old, char *fname,
                            uint64_t global_step, const struct tpu_checkpoint_options *o,
                            struct index *fresh, size_t *first, struct tpu_diag *d)
{
    fresh->e = calloc(old->n + 1, sizeof *fresh->e);
    if (!fresh->e)
        return tpu__fail(d, TPU_ENOMEM, "out of memory saving a checkpoint");
    for (size_t i = 0; i < old->n; i++)
        if (strcmp(old->e[i].name, fname) != 0)
            fresh->e[fresh->n++] = old->e[i];
    fresh->e[fresh->n++] = (struct index_entry){.step = global_step, .name = fname};
    *first = o->keep_max > 0 && fresh->n > o->keep_max ? fresh->n - o->keep_max : 0;
    fresh->del = calloc(*first + old->n_del + 1, sizeof *fresh->del);
    if (!fresh->del)
        return tpu__fail(d, TPU_ENOMEM, "out of memory saving a checkpoint");
    for (size_t i = 0; i < *first; i++)
        fresh->del[fresh->n_del++] = fresh->e[i];
    for (size_t i = 0; i < old->n_del; i++) {
        if (!strcmp(old->del[i].name, fname))
            continue;
        char *old_path = join(model_dir, old->del[i].name);
        struct stat st;
        if (old_path && lstat(old_path, &st) == 0)
            fresh->del[fresh->n_del++] = old->del[i];
        free(old_path);
    }
    return 0;
}

/* The arguments of a save, checked before anything is touched. */
static int check_save_args(const char *model_dir, uint64_t global_step,
                           const struct tpu_tensor *tensors, size_t n_tensors,
                           const struct tpu_checkpoint_options *o, struct tpu_diag *d)
{
    if (!model_dir || !model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: model_dir is empty; give the "
                         "directory that holds the run's checkpoints");
    if (global_step > TPU_CHECKPOINT_MAX_STEP)
        return tpu__fail(d, TPU_EINVAL, "checkpoint save: global_step %" PRIu64 " is larger "
                         "than %" PRIu64 " (2^53 - 1), the largest step a checkpoint holds",
                         global_step, (uint64_t)TPU_CHECKPOINT_MAX_STEP);
    int rc = tpu__ckpt_validate_tensors(tensors, n_tensors, "checkpoint save", d);
    if (rc)
        return rc;
    return validate_meta(o->meta, o->n_meta, d);
}

int tpu_checkpoint_save(const char *model_dir, uint64_t global_step,
                        const struct tpu_tensor *tensors, size_t n_tensors,
                        const struct tpu_checkpoint_options *opts, char *path_out,
                        size_t path_cap, struct tpu_diag *d)
{
    struct tpu_checkpoint_options defaults;
    tpu_checkpoint_default_options(&defaults);
    const struct tpu_checkpoint_options *o = opts ? opts : &defaults;
    int rc = check_save_args(model_dir, global_step, tensors, n_tensors, o, d);
    if (rc)
        return rc;

    char fname[64];
    snprintf(fname, sizeof fname, CKPT_PREFIX "%" PRIu64 CKPT_SUFFIX, global_step);
    char *path = join(model_dir, fname), *moved_to = NULL;
    const struct tpu_tensor **order = malloc((n_tensors ? n_tensors : 1) * sizeof *order);
    struct index old = {0}, fresh = {0};
    unsigned char *head = NULL;
    size_t head_bytes = 0;
    struct tpu_diag idiag = {0};
    bool damaged = false;
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
    rc = index_read(model_dir, &old, &found, &idiag);
    if (rc == TPU_EPARSE) {
        /* a damaged index: it is moved aside before the new one is written, and what it
         * named is not this save's to delete (old stays empty) */
        damaged = true;
        rc = 0;
    } else if (rc) {
        if (d)
            *d = idiag;
        goto out;
    }
    rc = tpu_checkpoint_make_dir(model_dir, d);
    if (rc)
        goto out;

    data_order(tensors, n_tensors, order);
    rc = build_header(order, n_tensors, global_step, o, &head, &head_bytes, d);
    if (rc)
        goto out;
    struct content c = {.head = head, .head_bytes = head_bytes, .body = order,
                        .n_body = n_tensors};
    bool renamed = false;
    rc = write_atomic(model_dir, path, &c, o, &renamed, d);
    if (rc) {
        /* renamed but its directory not fsynced: the file is not committed, and goes */
        if (rc != TPU_ECANCELED && renamed && !index_has(&old, fname))
            unlink(path);
        goto out;
    }

    size_t first = 0;
    if ((rc = index_after_save(model_dir, &old, fname, global_step, o, &fresh, &first, d)))
        goto out;
    struct index kept = {.e = fresh.e + first, .n = fresh.n - first, .del = fresh.del,
                         .n_del = fresh.n_del};
    if (damaged && (rc = move_damaged_index(model_dir, &moved_to, d)))
        goto out;
    rc = index_write(model_dir, &kept, o, d);
    if (rc) {
        /* the file was never committed: it goes, unless an index names it (an older save
         * of this step, or this index if only its directory's fsync failed). A simulated
         * crash leaves everything as a killed process would. */
        if (rc != TPU_ECANCELED && !index_has(&old, fname) && !index_names(model_dir, fname))
            unlink(path);
        goto out;
    }
    rc = collect_garbage(model_dir, &kept, o, d);
    if (rc)
        goto out;
    if (path_out)
        memcpy(path_out, path, strlen(path) + 1);
    if (damaged)
        tpu__fail(d, 0, "warning: %s; it was moved to '%s' and a new index lists the "
                  "checkpoints saved from now on (the checkpoint files it named stay, and "
                  "keep_max never deletes them)", idiag.msg, moved_to);
out:
    free(fresh.e); /* its names are borrowed from `old` and fname */
    free(fresh.del);
    index_free(&old);
    free(moved_to);
    free(head);
    free(order);
    free(path);
    return rc;
}

/* ---- finding the latest checkpoint ---------------------------------------------------- */

static int cmp_step_desc(const void *a, const void *b)
{
    const struct index_entry *x = a, *y = b;
    return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* Every ckpt-<step>.safetensors entry of model_dir that ix does not name, highest step
 * first, into *out (new memory). */
static int scan_files(const char *model_dir, const struct index *ix, struct index *out,
                      struct tpu_diag *d)
{
    *out = (struct index){0};
    DIR *dir = opendir(model_dir);
    if (!dir)
        return tpu__fail(d, TPU_EIO, "cannot list model_dir '%s': %s", model_dir,
                         strerror(errno));
    size_t cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        uint64_t step;
        if (!tpu__ckpt_name_parse(de->d_name, false, &step) || index_has(ix, de->d_name))
            continue;
        if (out->n == cap) {
            cap = cap ? 2 * cap : 16;
            struct index_entry *ne = realloc(out->e, cap * sizeof *ne);
            if (!ne) {
                rc = tpu__fail(d, TPU_ENOMEM, "out of memory listing '%s'", model_dir);
                break;
            }
            out->e = ne;
        }
        out->e[out->n].step = step;
        out->e[out->n].name = strdup(de->d_name);
        if (!out->e[out->n].name) {
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory listing '%s'", model_dir);
            break;
        }
        out->n++;
    }
    closedir(dir);
    if (rc)
        index_free(out);
    else if (out->n > 1)
        qsort(out->e, out->n, sizeof *out->e, cmp_step_desc);
    return rc;
}

/* The latest checkpoint failed to verify (vrc, why): an error that says what to do, never
 * TPU_ENOTFOUND (that would let a caller start again from step 0). next is the checkpoint of
 * the highest step among the others (NULL: none); found, whether a valid index named it;
 * index_why, why the index was not valid (NULL: it was, or there was none). */
static int latest_does_not_verify(const char *model_dir, const struct index_entry *latest,
                                  const struct index_entry *next, bool found,
                                  const char *index_why, int vrc, const char *why,
                                  struct tpu_diag *d)
{
    char fix[300];
    if (vrc == TPU_ENOTFOUND)
        snprintf(fix, sizeof fix, "restore it, or remove the " INDEX_NAME " that names it "
                 "to resume from the checkpoint file of the highest step");
    else if (next)
        snprintf(fix, sizeof fix, "restore a good copy, or move it%s out of model_dir to "
                 "resume from the checkpoint file of the highest step (%s)",
                 found ? " and " INDEX_NAME : "", next->name);
    else
        snprintf(fix, sizeof fix, "restore a good copy, or move it%s out of model_dir to "
                 "start again from step 0", found ? " and " INDEX_NAME : "");
    return tpu__fail(d, vrc == TPU_ENOTFOUND ? TPU_EIO : vrc, "%s%sthe latest checkpoint in "
                     "'%s', %s, does not verify: %s; tpusim does not fall back to an older "
                     "checkpoint on its own: %s", index_why ? index_why : "",
                     index_why ? "; " : "", model_dir, latest->name, why, fix);
}

int tpu_checkpoint_latest(const char *model_dir, uint64_t *step, char *path, size_t cap,
                          struct tpu_diag *d)
{
    if (!model_dir || !model_dir[0])
        return tpu__fail(d, TPU_EINVAL, "checkpoint latest: model_dir is empty");
    struct stat st;
    if (stat(model_dir, &st) != 0) {
        if (errno == ENOENT)
            return tpu__fail(d, TPU_ENOTFOUND, "'%s' holds no checkpoint (the directory does "
                             "not exist); training starts from step 0", model_dir);
        return tpu__fail(d, TPU_EIO, "cannot read model_dir '%s': %s", model_dir,
                         strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return tpu__fail(d, TPU_EINVAL, "model_dir '%s' is not a directory; give the directory "
                         "that holds the run's checkpoints (" INDEX_NAME " and "
                         CKPT_PREFIX "<step>" CKPT_SUFFIX " files)", model_dir);
    struct index ix, files = {0};
    bool found;
    struct tpu_diag idiag = {0};
    int irc = index_read(model_dir, &ix, &found, &idiag);
    if (irc && irc != TPU_EPARSE) {
        if (d)
            *d = idiag;
        return irc;
    }
    int rc = scan_files(model_dir, &ix, &files, d);
    if (rc) {
        index_free(&ix);
        return rc;
    }
    if (ix.n + files.n == 0) {
        if (irc)
            return tpu__fail(d, TPU_EPARSE, "%s; no " CKPT_PREFIX "<step>" CKPT_SUFFIX " file "
                             "is beside it, so there is nothing to resume from: repair the "
                             "index or remove it", idiag.msg);
        return tpu__fail(d, TPU_ENOTFOUND, "'%s' holds no checkpoint (no " INDEX_NAME " index "
                         "and no " CKPT_PREFIX "<step>" CKPT_SUFFIX " file); training starts "
                         "from step 0", model_dir);
    }

    /* the latest: the index's last entry, or without a valid index the highest step among
     * the files; `next`, the highest step of the others, is only named in messages */
    const struct index_entry *latest = ix.n ? &ix.e[ix.n - 1] : &files.e[0], *next = NULL;
    for (size_t k = 0; k < ix.n + files.n; k++) {
        const struct index_entry *e = k < ix.n ? &ix.e[k] : &files.e[k - ix.n];
        if (e != latest && (!next || e->step > next->step))
            next = e;
    }
    char *full = join(model_dir, latest->name);
    struct tpu_checkpoint_info info;
    struct tpu_diag vd = {0};
    int vrc = full ? tpu_checkpoint_inspect(full, &info, &vd) : TPU_ENOMEM;
    if (!full) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory finding the latest checkpoint");
    } else if (vrc == TPU_ENOMEM) {
        if (d)
            *d = vd;
        rc = vrc;
    } else if (vrc) {
        rc = latest_does_not_verify(model_dir, latest, next, found, irc ? idiag.msg : NULL,
                                    vrc, vd.msg, d);
    } else {
        tpu_checkpoint_info_free(&info);
        if (path && strlen(full) + 1 > cap) {
            rc = tpu__fail(d, TPU_ERANGE, "checkpoint latest: the path '%s' needs %zu bytes "
                           "but the buffer holds %zu", full, strlen(full) + 1, cap);
        } else {
            if (path)
                memcpy(path, full, strlen(full) + 1);
            if (step)
                *step = latest->step;
            if (irc)
                tpu__fail(d, 0, "warning: %s; using %s (global step %" PRIu64 "), the "
                          "checkpoint file of the highest step", idiag.msg, latest->name,
                          latest->step);
            else if (!found)
                tpu__fail(d, 0, "warning: '%s' has no " INDEX_NAME " index; using %s (global "
                          "step %" PRIu64 "), the checkpoint file of the highest step; the next "
                          "save writes a new index (and never deletes files no index names)",
                          model_dir,
                          latest->name, latest->step);
        }
    }
    free(full);
    index_free(&files);
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
