/* Checkpoints: bit-exact round trips of every dtype, the index and keep_max, crash safety
 * (leftover temporary files, and a fault hook that fails or "crashes" each step of a save),
 * every kind of damage a load must detect with its message (and without touching the
 * caller's buffers), metadata, argument checks, and an outside reader (Python's standard
 * library) parsing what tpusim writes. Files are real files in a fresh temporary directory. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "tpusim/checkpoint.h"

/* ---- fixture and file helpers -------------------------------------------------------- */

struct fixture {
    char dir[64];
    char model_dir[128]; /* dir/run/model: created by the first save */
};

static void rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *dir = opendir(path);
        struct dirent *de;
        while (dir && (de = readdir(dir)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char child[512];
            snprintf(child, sizeof child, "%s/%s", path, de->d_name);
            rm_rf(child);
        }
        if (dir)
            closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/tpusim-ckpt-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->model_dir, sizeof f->model_dir, "%s/run/model", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    rm_rf(f->dir);
    free(f);
    return 0;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    fclose(fp);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Names in dir ending in `suffix`, counted. */
static int count_files(const char *dir, const char *suffix)
{
    DIR *dp = opendir(dir);
    assert_non_null(dp);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l >= s && !strcmp(de->d_name + l - s, suffix);
    }
    closedir(dp);
    return n;
}

static uint64_t get_u64le(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Writes a file of 8-byte length, `text` padded with spaces to 8, then `data`. */
static void write_raw(const char *path, const char *text, const void *data, size_t data_len)
{
    size_t len = strlen(text), padded = len + (8 - len % 8) % 8;
    unsigned char *buf = malloc(8 + padded + data_len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, text, len);
    memset(buf + 8 + len, ' ', padded - len);
    if (data_len)
        memcpy(buf + 8 + padded, data, data_len);
    spit(path, buf, 8 + padded + data_len);
    free(buf);
}

/* The header of a checkpoint as JSON, and a copy of its data section. */
static json_t *header_load(const char *path, unsigned char **data, size_t *data_len)
{
    size_t len;
    unsigned char *buf = slurp(path, &len);
    uint64_t n = get_u64le(buf);
    json_error_t err;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, 0, &err);
    assert_non_null(root);
    *data_len = len - 8 - (size_t)n;
    *data = malloc(*data_len + 1);
    assert_non_null(*data);
    memcpy(*data, buf + 8 + n, *data_len);
    free(buf);
    return root;
}

/* Rewrites the checkpoint with header `root` (consumed) and `data` (freed). */
static void header_store(const char *path, json_t *root, unsigned char *data, size_t data_len)
{
    char *text = json_dumps(root, JSON_COMPACT);
    assert_non_null(text);
    write_raw(path, text, data, data_len);
    free(text);
    json_decref(root);
    free(data);
}

/* ---- a model's tensors: every dtype, special bit patterns ---------------------------- */

struct model {
    uint32_t w[3 * 4]; /* F32 bits */
    uint32_t b[1 * 4]; /* F32 bits */
    uint16_t h[2 * 3]; /* BF16 bits */
    int8_t q[5 * 1];
    int32_t lab[1 * 3];
    struct tpu_tensor t[5];
};

/* Caller order w, h, q, b, lab; the file's data order is w, b, lab (4-byte), h, q. */
static void model_bind(struct model *m)
{
    m->t[0] = (struct tpu_tensor){"w", TPU_F32, 3, 4, m->w};
    m->t[1] = (struct tpu_tensor){"h", TPU_BF16, 2, 3, m->h};
    m->t[2] = (struct tpu_tensor){"q", TPU_INT8, 5, 1, m->q};
    m->t[3] = (struct tpu_tensor){"b", TPU_F32, 1, 4, m->b};
    m->t[4] = (struct tpu_tensor){"lab", TPU_INT32, 1, 3, m->lab};
}

static void model_init(struct model *m, uint32_t seed)
{
    static const uint32_t w[12] = {
        0x3fc00000u, /* 1.5 */
        0x80000000u, /* -0 */
        0x7fc12345u, /* quiet NaN with a payload */
        0x7f800001u, /* signalling NaN */
        0xffffffffu, /* negative NaN, all payload bits */
        0xff800000u, /* -inf */
        0x00000001u, /* smallest subnormal */
        0x807fffffu, /* largest negative subnormal */
        0x7f7fffffu, /* largest finite */
        0x00000000u, 0x3f800000u, 0xc0490fdbu,
    };
    static const uint16_t h[6] = {0x3f80u, 0x8000u, 0x7fc1u, 0xff81u, 0x0001u, 0x7f80u};
    static const int8_t q[5] = {-128, 127, 0, -1, 1};
    static const int32_t lab[3] = {INT32_MIN, INT32_MAX, 7};
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 12; i++)
        m->w[i] = w[i] ^ (i >= 9 ? seed : 0);
    for (int i = 0; i < 4; i++)
        m->b[i] = 0x3e000000u + seed * 16u + (uint32_t)i;
    memcpy(m->h, h, sizeof h);
    memcpy(m->q, q, sizeof q);
    memcpy(m->lab, lab, sizeof lab);
    m->lab[2] += (int32_t)seed;
    model_bind(m);
}

/* Same descriptors, every data byte `fill`. */
static void model_blank(struct model *m, unsigned char fill)
{
    memset(m, fill, sizeof *m);
    model_bind(m);
}

static void assert_blank(const struct model *m, unsigned char fill)
{
    const unsigned char *p = (const unsigned char *)m;
    size_t data_bytes = offsetof(struct model, t);
    for (size_t i = 0; i < data_bytes; i++)
        if (p[i] != fill)
            fail_msg("byte %zu of the caller's buffers changed to 0x%02x", i, p[i]);
}

static void assert_same_data(const struct model *a, const struct model *b)
{
    assert_memory_equal(a->w, b->w, sizeof a->w);
    assert_memory_equal(a->b, b->b, sizeof a->b);
    assert_memory_equal(a->h, b->h, sizeof a->h);
    assert_memory_equal(a->q, b->q, sizeof a->q);
    assert_memory_equal(a->lab, b->lab, sizeof a->lab);
}

static void save_model(const struct fixture *f, uint64_t step, uint32_t keep_max, char *path,
                       size_t cap)
{
    struct model m;
    model_init(&m, (uint32_t)step);
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.keep_max = keep_max;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_save(f->model_dir, step, m.t, 5, &o, path, cap, &d);
    if (rc)
        fail_msg("save failed: %s", d.msg);
}

/* Loads `path` and checks it holds the model saved at `step`. */
static void assert_loads(const char *path, uint64_t step)
{
    struct model want, got;
    model_init(&want, (uint32_t)step);
    model_blank(&got, 0x5a);
    uint64_t s = 0;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_load(path, got.t, 5, &s, &d);
    if (rc)
        fail_msg("load of %s failed: %s", path, d.msg);
    assert_int_equal(s, step);
    assert_same_data(&want, &got);
}

/* Loads `path` and checks its step (whatever the data). */
static void assert_loads_step(const char *path, uint64_t step)
{
    struct model got;
    model_blank(&got, 0);
    uint64_t s = 0;
    struct tpu_diag d = {0};
    if (tpu_checkpoint_load(path, got.t, 5, &s, &d))
        fail_msg("load of %s failed: %s", path, d.msg);
    assert_true(s == step);
}

static void assert_msg(const struct tpu_diag *d, const char *needle)
{
    if (!strstr(d->msg, needle))
        fail_msg("message \"%s\" lacks \"%s\"", d->msg, needle);
}

/* A load that must fail with `code` and the needles in its message, leaving the caller's
 * buffers and step untouched. */
static void expect_load_fails(const char *path, int code, const char *n1, const char *n2)
{
    struct model m;
    model_blank(&m, 0xa5);
    uint64_t step = 777;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_load(path, m.t, 5, &step, &d);
    if (rc != code)
        fail_msg("load returned %s (%s), expected %s", tpu_err_name(rc), d.msg,
                 tpu_err_name(code));
    assert_int_equal(d.code, code);
    assert_msg(&d, n1);
    if (n2)
        assert_msg(&d, n2);
    assert_blank(&m, 0xa5);
    assert_int_equal(step, 777);
}

static void ckpt_path(const struct fixture *f, uint64_t step, char *out, size_t cap)
{
    snprintf(out, cap, "%s/ckpt-%" PRIu64 ".safetensors", f->model_dir, step);
}

/* ---- round trips and layout ---------------------------------------------------------- */

static void test_round_trip_bit_exact(void **state)
{
    struct fixture *f = *state;
    char path[256], want[256];
    save_model(f, 42, 5, path, sizeof path);
    ckpt_path(f, 42, want, sizeof want);
    assert_string_equal(path, want);
    assert_loads(path, 42);

    /* NaN payloads, -0, subnormals: compare the bits, not the values */
    struct model got;
    model_blank(&got, 0);
    assert_int_equal(tpu_checkpoint_load(path, got.t, 5, NULL, NULL), 0);
    assert_int_equal(got.w[2], 0x7fc12345u);
    assert_int_equal(got.w[3], 0x7f800001u);
    assert_int_equal(got.w[1], 0x80000000u);
    assert_int_equal(got.w[6], 0x00000001u);
    assert_int_equal(got.h[1], 0x8000u);
    assert_int_equal(got.h[3], 0xff81u);
    assert_int_equal(got.q[0], -128);
    assert_int_equal(got.lab[0], INT32_MIN);

    /* the caller's order of expectations does not matter */
    struct model rev;
    model_blank(&rev, 0);
    struct tpu_tensor swapped[5] = {rev.t[4], rev.t[3], rev.t[2], rev.t[1], rev.t[0]};
    assert_int_equal(tpu_checkpoint_load(path, swapped, 5, NULL, NULL), 0);
    struct model ref;
    model_init(&ref, 42);
    assert_same_data(&ref, &rev);
}

static void test_file_layout(void **state)
{
    struct fixture *f = *state;
    char path[256];
    save_model(f, 7, 5, path, sizeof path);
    size_t len;
    unsigned char *buf = slurp(path, &len);
    uint64_t n = get_u64le(buf);
    assert_int_equal(n % 8, 0);
    assert_int_equal(buf[8], '{');
    /* JSON then spaces: the padding is at most 7 spaces */
    size_t end = 8 + (size_t)n;
    while (buf[end - 1] == ' ')
        end--;
    assert_true(8 + n - end < 8);
    assert_int_equal(buf[end - 1], '}');
    /* the data section: 48 + 16 + 12 bytes of 4-byte tensors, 12 of bf16, 5 of int8 */
    assert_int_equal(len, 8 + n + 48 + 16 + 12 + 12 + 5);

    unsigned char *data;
    size_t data_len;
    json_t *root = header_load(path, &data, &data_len);
    /* __metadata__ first; tensors in data order w, b, lab, h, q, each aligned */
    const char *expect_order[] = {"__metadata__", "w", "b", "lab", "h", "q"};
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        assert_true(i < 6);
        assert_string_equal(key, expect_order[i]);
        i++;
    }
    assert_int_equal(i, 6);
    json_t *h = json_object_get(root, "h");
    assert_string_equal(json_string_value(json_object_get(h, "dtype")), "BF16");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(h, "shape"), 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(h, "shape"), 1)), 3);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(h, "data_offsets"), 0)),
                     76);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(h, "data_offsets"), 1)),
                     88);
    json_t *meta = json_object_get(root, "__metadata__");
    assert_string_equal(json_string_value(json_object_get(meta, "tpusim.format")),
                        "tpusim-checkpoint-v1");
    assert_string_equal(json_string_value(json_object_get(meta, "tpusim.global_step")), "7");
    /* the checksum of tensor q is zlib's crc32 of its 5 bytes */
    char crc[9];
    const char *qcrc = json_string_value(json_object_get(meta, "tpusim.crc32.q"));
    assert_non_null(qcrc);
    assert_int_equal(strlen(qcrc), 8);
    /* CRC-32 of 80 7f 00 ff 01 (the int8 tensor), computed independently bit by bit */
    uint32_t c = 0xffffffffu;
    const unsigned char qb[5] = {0x80, 0x7f, 0x00, 0xff, 0x01};
    for (int k = 0; k < 5; k++) {
        c ^= qb[k];
        for (int bit = 0; bit < 8; bit++)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    snprintf(crc, sizeof crc, "%08" PRIx32, c ^ 0xffffffffu);
    assert_string_equal(qcrc, crc);
    json_decref(root);
    free(data);
    free(buf);
}

/* ---- the index and keep_max ---------------------------------------------------------- */

static void test_index_lists_latest(void **state)
{
    struct fixture *f = *state;
    save_model(f, 100, 0, NULL, 0);
    save_model(f, 200, 0, NULL, 0);
    save_model(f, 300, 0, NULL, 0);
    uint64_t step = 0;
    char path[256], want[256];
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 300);
    ckpt_path(f, 300, want, sizeof want);
    assert_string_equal(path, want);
    assert_loads(path, 300);

    struct tpu_checkpoint_entry *e = NULL;
    size_t n = 0;
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_int_equal(n, 3);
    assert_int_equal(e[0].global_step, 100);
    assert_int_equal(e[2].global_step, 300);
    ckpt_path(f, 100, want, sizeof want);
    assert_string_equal(e[0].path, want);
    tpu_checkpoint_list_free(e, n);

    /* the index file itself: relative names, latest = last entry */
    char ipath[256];
    snprintf(ipath, sizeof ipath, "%s/checkpoint.json", f->model_dir);
    json_error_t err;
    json_t *ix = json_load_file(ipath, 0, &err);
    assert_non_null(ix);
    assert_string_equal(json_string_value(json_object_get(ix, "format")),
                        "tpusim-checkpoint-index");
    json_t *latest = json_object_get(ix, "latest");
    assert_string_equal(json_string_value(json_object_get(latest, "path")),
                        "ckpt-300.safetensors");
    assert_int_equal(json_integer_value(json_object_get(latest, "global_step")), 300);
    assert_int_equal(json_array_size(json_object_get(ix, "checkpoints")), 3);
    json_decref(ix);

    /* saving a step again replaces it and makes it the latest; it is listed once */
    save_model(f, 200, 0, NULL, 0);
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, NULL, 0, NULL), 0);
    assert_int_equal(step, 200);
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_int_equal(n, 3);
    assert_int_equal(e[0].global_step, 100);
    assert_int_equal(e[1].global_step, 300);
    assert_int_equal(e[2].global_step, 200);
    tpu_checkpoint_list_free(e, n);
}

static void test_keep_max_two(void **state)
{
    struct fixture *f = *state;
    for (uint64_t step = 10; step <= 60; step += 10) {
        save_model(f, step, 2, NULL, 0);
        struct tpu_checkpoint_entry *e = NULL;
        size_t n = 0;
        assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
        size_t want = step >= 20 ? 2 : 1;
        assert_int_equal(n, want);
        assert_int_equal(e[n - 1].global_step, step);
        if (n == 2)
            assert_int_equal(e[0].global_step, step - 10);
        /* every file the index names exists, and no other checkpoint file does */
        for (size_t i = 0; i < n; i++)
            assert_true(exists(e[i].path));
        assert_int_equal(count_files(f->model_dir, ".safetensors"), (int)want);
        assert_int_equal(count_files(f->model_dir, ".tmp"), 0);
        tpu_checkpoint_list_free(e, n);
    }
    char old[256];
    ckpt_path(f, 40, old, sizeof old);
    assert_false(exists(old));
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, NULL), 0);
}

static void test_keep_all_and_latest_none(void **state)
{
    struct fixture *f = *state;
    struct tpu_diag d = {0};
    uint64_t step = 5;
    /* model_dir does not exist yet, then exists but is empty */
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, NULL, 0, &d), TPU_ENOTFOUND);
    assert_msg(&d, "holds no checkpoint");
    assert_int_equal(step, 5);
    struct tpu_checkpoint_entry *e = (void *)&step;
    size_t n = 9;
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_null(e);
    assert_int_equal(n, 0);
    assert_int_equal(tpu_checkpoint_latest(f->dir, &step, NULL, 0, &d), TPU_ENOTFOUND);

    for (uint64_t s = 1; s <= 7; s++)
        save_model(f, s, 0, NULL, 0);
    assert_int_equal(count_files(f->model_dir, ".safetensors"), 7);
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_int_equal(n, 7);
    tpu_checkpoint_list_free(e, n);
    /* default options keep 5 (TensorFlow's max_to_keep) */
    struct model m;
    model_init(&m, 8);
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 8, m.t, 5, NULL, NULL, 0, NULL), 0);
    assert_int_equal(count_files(f->model_dir, ".safetensors"), 5);
}

/* ---- crash safety -------------------------------------------------------------------- */

static void test_leftover_tmp_keeps_old(void **state)
{
    struct fixture *f = *state;
    char p100[256], tmp[300];
    save_model(f, 100, 2, p100, sizeof p100);
    /* a crash while writing step 200: a partial temporary file, never renamed */
    size_t len;
    unsigned char *buf = slurp(p100, &len);
    snprintf(tmp, sizeof tmp, "%s/ckpt-200.safetensors.tmp", f->model_dir);
    spit(tmp, buf, len / 2);
    free(buf);
    char ix_tmp[300];
    snprintf(ix_tmp, sizeof ix_tmp, "%s/checkpoint.json.tmp", f->model_dir);
    spit(ix_tmp, "{\"format\": ", 11);

    uint64_t step = 0;
    char path[256];
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 100);
    assert_string_equal(path, p100);
    assert_loads(path, 100);

    /* the next save succeeds and removes the leftovers */
    save_model(f, 200, 2, NULL, 0);
    assert_false(exists(tmp));
    assert_false(exists(ix_tmp));
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 200);
    assert_loads(path, 200);
}

struct fault_plan {
    enum tpu_checkpoint_stage stage;
    int action;
    const char *match; /* substring of the path the fault applies to */
    int hits;
};

static int fault_hook(void *ctx, enum tpu_checkpoint_stage stage, const char *path)
{
    struct fault_plan *p = ctx;
    if (stage == p->stage && strstr(path, p->match)) {
        p->hits++;
        return p->action;
    }
    return TPU_CHECKPOINT_PROCEED;
}

/* The index names `want` as the latest, that file loads, and every file it names exists. */
static void assert_consistent(const struct fixture *f, uint64_t want)
{
    uint64_t step = 0;
    char path[256];
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, &d);
    if (rc)
        fail_msg("latest failed: %s", d.msg);
    if (step != want)
        fail_msg("latest is step %" PRIu64 ", expected %" PRIu64, step, want);
    assert_loads(path, step);
    struct tpu_checkpoint_entry *e = NULL;
    size_t n = 0;
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    for (size_t i = 0; i < n; i++)
        assert_true(exists(e[i].path));
    tpu_checkpoint_list_free(e, n);
}

static void run_fault(struct fixture *f, enum tpu_checkpoint_stage stage, const char *match,
                      int action)
{
    rm_rf(f->model_dir);
    save_model(f, 100, 1, NULL, 0);
    struct model m;
    model_init(&m, 200);
    struct fault_plan plan = {stage, action, match, 0};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.keep_max = 1;
    o.fault = fault_hook;
    o.fault_ctx = &plan;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_save(f->model_dir, 200, m.t, 5, &o, NULL, 0, &d);
    assert_int_equal(plan.hits, 1);
    const char *sname = tpu_checkpoint_stage_name(stage);
    bool index = strstr(match, "checkpoint.json") != NULL;
    /* the index commits the save: before its rename the old checkpoint is the latest */
    bool before_commit = !index || stage <= TPU_CHECKPOINT_RENAME;
    /* a crash after the data file's rename and before the index's leaves ckpt-200 in place,
     * named by no index: no save may delete it (it cannot tell it from a user's file) */
    bool orphan = action == TPU_CHECKPOINT_CRASH && before_commit &&
                  (index || stage == TPU_CHECKPOINT_FSYNC_DIR);
    char p200[256];
    ckpt_path(f, 200, p200, sizeof p200);
    if (action == TPU_CHECKPOINT_FAIL) {
        assert_int_equal(rc, TPU_EIO);
        assert_msg(&d, "fault injected at stage");
        assert_msg(&d, sname);
        /* a failed save leaves no temporary file, and no file it did not commit */
        assert_int_equal(count_files(f->model_dir, ".tmp"), 0);
        if (exists(p200) != !before_commit)
            fail_msg("after a failure at stage %s of %s, ckpt-200 %s", sname, match,
                     before_commit ? "is left behind" : "is missing");
    } else {
        assert_int_equal(rc, TPU_ECANCELED);
        assert_msg(&d, "simulated a crash");
        assert_msg(&d, sname);
        /* a crash in the middle of a write leaves the temporary file behind */
        if (stage >= TPU_CHECKPOINT_WRITE && stage <= TPU_CHECKPOINT_RENAME)
            assert_int_equal(count_files(f->model_dir, ".tmp"), 1);
    }
    /* before the commit step 100 is the latest, after it 200 */
    assert_consistent(f, before_commit ? 100 : 200);

    /* the next save recovers: it succeeds, and only its checkpoint remains (keep_max 1),
     * with the crash's uncommitted file if there is one, intact */
    save_model(f, 300, 1, NULL, 0);
    assert_consistent(f, 300);
    assert_int_equal(count_files(f->model_dir, ".safetensors"), orphan ? 2 : 1);
    if (orphan)
        assert_loads(p200, 200);
    assert_int_equal(count_files(f->model_dir, ".tmp"), 0);
}

static void test_fault_each_stage(void **state)
{
    struct fixture *f = *state;
    const enum tpu_checkpoint_stage stages[] = {
        TPU_CHECKPOINT_CREATE, TPU_CHECKPOINT_WRITE, TPU_CHECKPOINT_FSYNC,
        TPU_CHECKPOINT_RENAME, TPU_CHECKPOINT_FSYNC_DIR,
    };
    const char *files[] = {"ckpt-200.safetensors", "checkpoint.json"};
    const int actions[] = {TPU_CHECKPOINT_FAIL, TPU_CHECKPOINT_CRASH};
    for (size_t a = 0; a < 2; a++)
        for (size_t fi = 0; fi < 2; fi++)
            for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++)
                run_fault(f, stages[s], files[fi], actions[a]);
}

static void test_fault_rename_keeps_old_file_bytes(void **state)
{
    struct fixture *f = *state;
    char p100[256];
    save_model(f, 100, 3, p100, sizeof p100);
    size_t len0, len1;
    unsigned char *before = slurp(p100, &len0);
    /* re-saving step 100 with other values fails at the rename: the old file is unchanged */
    struct model m;
    model_init(&m, 999);
    struct fault_plan plan = {TPU_CHECKPOINT_RENAME, TPU_CHECKPOINT_FAIL, "ckpt-100", 0};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.fault = fault_hook;
    o.fault_ctx = &plan;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 100, m.t, 5, &o, NULL, 0, &d), TPU_EIO);
    assert_msg(&d, "cannot rename");
    unsigned char *after = slurp(p100, &len1);
    assert_int_equal(len0, len1);
    assert_memory_equal(before, after, len0);
    free(before);
    free(after);
    assert_loads(p100, 100);
}

static void test_fault_delete(void **state)
{
    struct fixture *f = *state;
    char p100[256];
    save_model(f, 100, 1, p100, sizeof p100);
    struct model m;
    model_init(&m, 200);
    struct fault_plan plan = {TPU_CHECKPOINT_DELETE, TPU_CHECKPOINT_FAIL, "ckpt-100", 0};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.keep_max = 1;
    o.fault = fault_hook;
    o.fault_ctx = &plan;
    /* a file that cannot be deleted does not fail the save; it is out of the index */
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 200, m.t, 5, &o, NULL, 0, NULL), 0);
    assert_int_equal(plan.hits, 1);
    assert_true(exists(p100));
    struct tpu_checkpoint_entry *e = NULL;
    size_t n = 0;
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].global_step, 200);
    tpu_checkpoint_list_free(e, n);

    /* a crash before deleting: the save is committed (ECANCELED only reports the stop) */
    plan = (struct fault_plan){TPU_CHECKPOINT_DELETE, TPU_CHECKPOINT_CRASH, "ckpt-", 0};
    model_init(&m, 300);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 300, m.t, 5, &o, NULL, 0, &d),
                     TPU_ECANCELED);
    assert_msg(&d, "stage delete");
    uint64_t step;
    char path[256];
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, NULL), 0);
    assert_int_equal(step, 300);
    assert_loads(path, 300);
    /* the next save removes every file the index no longer names */
    save_model(f, 400, 1, NULL, 0);
    assert_false(exists(p100));
    assert_int_equal(count_files(f->model_dir, ".safetensors"), 1);
}

/* ---- damaged files ------------------------------------------------------------------- */

static void saved(struct fixture *f, char *path, size_t cap)
{
    save_model(f, 42, 5, path, cap);
}

static void test_bad_header_length(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    size_t len;
    unsigned char *buf = slurp(path, &len);

    spit(path, buf, 5);
    expect_load_fails(path, TPU_EPARSE, "is 5 bytes long", "8-byte header length");

    unsigned char *b2 = malloc(len);
    assert_non_null(b2);
    memcpy(b2, buf, len);
    b2[0] = 0, b2[1] = 0, b2[2] = 0, b2[3] = 0, b2[4] = 0x10; /* 2^36 */
    spit(path, b2, len);
    expect_load_fails(path, TPU_EPARSE, "header length field says 68719476736 bytes",
                      "2 to 100000000");

    memcpy(b2, buf, len);
    uint64_t n = len; /* more than the file holds after the length */
    for (int i = 0; i < 8; i++)
        b2[i] = (unsigned char)(n >> (8 * i));
    spit(path, b2, len);
    char want[96];
    snprintf(want, sizeof want, "says %zu bytes, but only %zu bytes follow", len, len - 8);
    expect_load_fails(path, TPU_EPARSE, want, NULL);

    memcpy(b2, buf, len);
    b2[8] = '[';
    spit(path, b2, len);
    expect_load_fails(path, TPU_EPARSE, "does not start with '{'", NULL);
    free(b2);
    free(buf);
}

static void test_json_syntax_line_column(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    /* a missing comma on line 3: jansson reports the column where the unexpected token
     * ("shape", columns 24 to 30) ends */
    const char *text = "{\n"
                       "  \"__metadata__\": {\"tpusim.format\": \"tpusim-checkpoint-v1\"},\n"
                       "  \"w\": {\"dtype\": \"F32\" \"shape\": [1, 1], \"data_offsets\": [0, 4]}\n"
                       "}";
    write_raw(path, text, "abcd", 4);
    expect_load_fails(path, TPU_EPARSE, "JSON header is malformed at line 3, column 30",
                      "'}' expected");

    /* duplicate keys are not allowed */
    write_raw(path, "{\"w\": {}, \"w\": {}}", NULL, 0);
    expect_load_fails(path, TPU_EPARSE, "duplicate object key", "line 1");
}

/* Loads the saved header, lets `edit` change it, writes it back. */
static void edit_header(const char *path, void (*edit)(json_t *root, unsigned char **data,
                                                       size_t *len))
{
    unsigned char *data;
    size_t len;
    json_t *root = header_load(path, &data, &len);
    edit(root, &data, &len);
    header_store(path, root, data, len);
}

static void set_offsets(json_t *root, const char *name, json_int_t b, json_int_t e)
{
    json_object_set_new(json_object_get(root, name), "data_offsets", json_pack("[I,I]", b, e));
}

static void edit_overlap(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    set_offsets(root, "b", 40, 56); /* w is [0, 48] */
}

static void edit_gap(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    set_offsets(root, "h", 77, 89); /* lab ends at 76 */
}

static void edit_past_end(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    /* q, the last tensor, claims 9 bytes where the file has 5 */
    json_object_set_new(json_object_get(root, "q"), "shape", json_pack("[i,i]", 9, 1));
    set_offsets(root, "q", 88, 97);
}

static void edit_size_mismatch(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "b"), "shape", json_pack("[i,i]", 2, 4));
}

static void edit_negative(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    set_offsets(root, "q", -5, 5);
}

static void edit_f16(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "h"), "dtype", json_string("F16"));
}

static void edit_3d(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "h"), "shape", json_pack("[i,i,i]", 1, 2, 3));
}

static void edit_extra_field(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "h"), "offsets", json_pack("[i,i]", 0, 1));
}

static void test_bad_structure(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    edit_header(path, edit_overlap);
    expect_load_fails(path, TPU_EPARSE, "tensors 'w' (data_offsets [0, 48]) and 'b' ([40, 56])",
                      "overlap");
    saved(f, path, sizeof path);
    edit_header(path, edit_gap);
    expect_load_fails(path, TPU_EPARSE, "bytes [76, 77) of the data section, between tensors "
                      "'lab' and 'h', belong to no tensor", NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_past_end);
    expect_load_fails(path, TPU_EPARSE, "tensor 'q' (data_offsets [88, 97]) reaches past its end",
                      NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_size_mismatch);
    expect_load_fails(path, TPU_EPARSE, "tensor 'b' is F32 [2, 4], which takes 32 bytes, but its "
                      "data_offsets [48, 64] span 16 bytes", NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_negative);
    expect_load_fails(path, TPU_EPARSE, "tensor 'q' has data_offsets that are not two "
                      "non-negative integers", NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_f16);
    expect_load_fails(path, TPU_EPARSE, "tensor 'h' has dtype 'F16'", NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_3d);
    expect_load_fails(path, TPU_EPARSE, "tensor 'h' has 3 dimensions", NULL);
    saved(f, path, sizeof path);
    edit_header(path, edit_extra_field);
    expect_load_fails(path, TPU_EPARSE, "tensor 'h' has an unknown field 'offsets'", NULL);
}

static void test_truncated_and_appended(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    size_t len;
    unsigned char *buf = slurp(path, &len);
    spit(path, buf, len - 3);
    char want[160];
    snprintf(want, sizeof want, "is truncated: its header describes 93 bytes of tensor data (a "
             "file of %zu bytes) but the file is %zu bytes; tensor 'q'", len, len - 3);
    expect_load_fails(path, TPU_EPARSE, want, NULL);

    /* cut inside the header */
    spit(path, buf, 40);
    expect_load_fails(path, TPU_EPARSE, "only 32 bytes follow it", NULL);

    unsigned char *longer = malloc(len + 2);
    assert_non_null(longer);
    memcpy(longer, buf, len);
    longer[len] = 0, longer[len + 1] = 0;
    spit(path, longer, len + 2);
    snprintf(want, sizeof want, "has 2 bytes after the tensor data its header describes (the "
             "file should be %zu bytes, it is %zu)", len, len + 2);
    expect_load_fails(path, TPU_EPARSE, want, NULL);
    free(longer);
    free(buf);
}

static void test_bit_flips(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    size_t len;
    unsigned char *buf = slurp(path, &len);
    size_t data = len - 93;
    /* one bit in each tensor: w [0,48), b [48,64), lab [64,76), h [76,88), q [88,93) */
    const struct {
        size_t at;
        const char *name;
    } flips[] = {{5, "'w'"}, {50, "'b'"}, {75, "'lab'"}, {80, "'h'"}, {92, "'q'"}};
    for (size_t i = 0; i < 5; i++) {
        buf[data + flips[i].at] ^= 0x10;
        spit(path, buf, len);
        char want[64];
        snprintf(want, sizeof want, "tensor %s fails its checksum", flips[i].name);
        expect_load_fails(path, TPU_EPARSE, want, "the data is damaged");
        buf[data + flips[i].at] ^= 0x10;
    }
    spit(path, buf, len);
    assert_loads(path, 42);
    free(buf);
}

static void edit_data_crc(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.data_crc32",
                        json_string("00000000"));
}

static void edit_drop_crc(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_del(json_object_get(root, "__metadata__"), "tpusim.crc32.lab");
}

static void edit_stray_crc(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.crc32.w9",
                        json_string("00000000"));
}

static void edit_bad_crc_text(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.crc32.w",
                        json_string("12345G78"));
}

static void edit_no_meta(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_del(root, "__metadata__");
}

static void edit_foreign(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
}

static void edit_meta_number(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "epoch", json_integer(3));
}

static void edit_future(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.format",
                        json_string("tpusim-checkpoint-v2"));
}

static void edit_bad_step(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.global_step",
                        json_string("42x"));
}

static void test_bad_metadata(void **state)
{
    struct fixture *f = *state;
    char path[256];
    const struct {
        void (*edit)(json_t *, unsigned char **, size_t *);
        int code;
        const char *n1, *n2;
    } cases[] = {
        {edit_data_crc, TPU_EPARSE, "its data section fails its checksum",
         "tpusim.data_crc32 records 00000000"},
        {edit_drop_crc, TPU_EPARSE, "has no checksum for tensor 'lab' (tpusim.crc32.lab",
         NULL},
        {edit_stray_crc, TPU_EPARSE, "has a checksum (tpusim.crc32.w9) for tensor 'w9', which "
         "the file does not hold", NULL},
        {edit_bad_crc_text, TPU_EPARSE, "the checksum of tensor 'w' is '12345G78'", NULL},
        {edit_no_meta, TPU_EPARSE, "has no __metadata__, so it was not written by tpusim",
         NULL},
        {edit_foreign, TPU_EPARSE, "has no tpusim.format in __metadata__", NULL},
        {edit_meta_number, TPU_EPARSE, "__metadata__ entry 'epoch' is not a string", NULL},
        {edit_future, TPU_EUNSUPPORTED, "is checkpoint format 'tpusim-checkpoint-v2'",
         "this tpusim reads tpusim-checkpoint-v1"},
        {edit_bad_step, TPU_EPARSE, "tpusim.global_step is '42x', not a decimal step number",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        saved(f, path, sizeof path);
        edit_header(path, cases[i].edit);
        expect_load_fails(path, cases[i].code, cases[i].n1, cases[i].n2);
    }
}

static void test_expectation_mismatch(void **state)
{
    struct fixture *f = *state;
    char path[256];
    saved(f, path, sizeof path);
    struct model m;
    struct tpu_diag d = {0};

    /* the caller expects a tensor the file lacks */
    model_blank(&m, 0xa5);
    m.t[2].name = "q2";
    assert_int_equal(tpu_checkpoint_load(path, m.t, 5, NULL, &d), TPU_ESHAPE);
    assert_msg(&d, "has no tensor 'q2', which the caller expects (the file holds 5: 'w', 'b', "
               "'lab', 'h', 'q')");
    assert_blank(&m, 0xa5);

    /* the file holds a tensor the caller does not expect */
    model_blank(&m, 0xa5);
    assert_int_equal(tpu_checkpoint_load(path, m.t, 4, NULL, &d), TPU_ESHAPE);
    assert_msg(&d, "holds tensor 'lab', which the caller does not expect (the file holds 5 "
               "tensors, the caller expects 4)");
    assert_blank(&m, 0xa5);

    /* wrong dtype: both named */
    model_blank(&m, 0xa5);
    m.t[1].dtype = TPU_F32;
    m.t[1].cols = 1; /* 2 x 1 x 4 bytes fit in h's 12 */
    assert_int_equal(tpu_checkpoint_load(path, m.t, 5, NULL, &d), TPU_ESHAPE);
    assert_msg(&d, "tensor 'h' is BF16 in the file but the caller expects F32");
    assert_blank(&m, 0xa5);

    /* wrong shape: both named */
    model_blank(&m, 0xa5);
    m.t[0].rows = 4;
    m.t[0].cols = 3;
    assert_int_equal(tpu_checkpoint_load(path, m.t, 5, NULL, &d), TPU_ESHAPE);
    assert_msg(&d, "tensor 'w' has shape [3, 4] in the file but the caller expects [4, 3]");
    assert_blank(&m, 0xa5);

    /* a missing file */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/ckpt-1.safetensors", f->model_dir);
    assert_int_equal(tpu_checkpoint_load(missing, m.t, 5, NULL, &d), TPU_ENOTFOUND);
    assert_msg(&d, "cannot open checkpoint");
}

/* ---- the index damaged --------------------------------------------------------------- */

/* Checks that latest returns 0 with `want` and a warning holding the needles. */
static void expect_latest_warns(const struct fixture *f, uint64_t want, const char *n1,
                                const char *n2)
{
    struct tpu_diag d = {0};
    uint64_t step = 0;
    char path[256], want_path[256];
    int rc = tpu_checkpoint_latest(f->model_dir, &step, path, sizeof path, &d);
    if (rc)
        fail_msg("latest failed: %s", d.msg);
    assert_int_equal(d.code, 0);
    if (strncmp(d.msg, "warning: ", 9) != 0)
        fail_msg("expected a warning, got \"%s\"", d.msg);
    assert_msg(&d, n1);
    if (n2)
        assert_msg(&d, n2);
    assert_int_equal(step, want);
    ckpt_path(f, want, want_path, sizeof want_path);
    assert_string_equal(path, want_path);
}

static void test_damaged_index(void **state)
{
    struct fixture *f = *state;
    save_model(f, 100, 2, NULL, 0);
    char ipath[256], dpath[300];
    snprintf(ipath, sizeof ipath, "%s/checkpoint.json", f->model_dir);
    snprintf(dpath, sizeof dpath, "%s/checkpoint.json.damaged", f->model_dir);
    size_t len;
    unsigned char *good = slurp(ipath, &len);
    struct tpu_diag d = {0};

    /* a damaged index is a warning: the latest comes from the files */
    const char *syntax = "{\n  \"format\": \"tpusim-checkpoint-index\",\n  \"version\" 1\n}\n";
    spit(ipath, syntax, strlen(syntax));
    expect_latest_warns(f, 100, "its JSON is malformed at line 3, column",
                        "using ckpt-100.safetensors (global step 100), the checkpoint file of "
                        "the highest step");
    /* a save moves it aside (kept for repair by hand), writes a new index naming only the new
     * checkpoint, and warns; the files the damaged index named stay */
    struct model m;
    model_init(&m, 200);
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 200, m.t, 5, NULL, NULL, 0, &d), 0);
    assert_int_equal(d.code, 0);
    assert_msg(&d, "warning: ");
    assert_msg(&d, "is not a valid checkpoint index");
    assert_msg(&d, "it was moved to '");
    size_t dlen;
    unsigned char *moved = slurp(dpath, &dlen);
    assert_int_equal(dlen, strlen(syntax));
    assert_memory_equal(moved, syntax, dlen);
    free(moved);
    struct tpu_checkpoint_entry *e = NULL;
    size_t n = 0;
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, NULL), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].global_step, 200);
    tpu_checkpoint_list_free(e, n);
    /* keep_max 1 deletes what the new index named (200), never 100, which no valid index
     * this save read names */
    save_model(f, 300, 1, NULL, 0);
    char p100[256], p200[256];
    ckpt_path(f, 100, p100, sizeof p100);
    ckpt_path(f, 200, p200, sizeof p200);
    assert_false(exists(p200));
    assert_loads(p100, 100);
    assert_consistent(f, 300);

    rm_rf(f->model_dir);
    save_model(f, 100, 2, NULL, 0);
    const char *bad_entry = "{\"format\": \"tpusim-checkpoint-index\", \"version\": 1, "
                            "\"latest\": {\"path\": \"ckpt-100.safetensors\", "
                            "\"global_step\": 100}, "
                            "\"checkpoints\": [{\"path\": \"../ckpt-100.safetensors\", "
                            "\"global_step\": 100}]}";
    spit(ipath, bad_entry, strlen(bad_entry));
    expect_latest_warns(f, 100, "entry 0 of \"checkpoints\" names '../ckpt-100.safetensors'",
                        NULL);

    const char *wrong_step = "{\"format\": \"tpusim-checkpoint-index\", \"version\": 1, "
                             "\"latest\": {\"path\": \"ckpt-100.safetensors\", "
                             "\"global_step\": 100}, "
                             "\"checkpoints\": [{\"path\": \"ckpt-100.safetensors\", "
                             "\"global_step\": 10}]}";
    spit(ipath, wrong_step, strlen(wrong_step));
    expect_latest_warns(f, 100, "gives global_step 10 for 'ckpt-100.safetensors'", NULL);
    assert_int_equal(tpu_checkpoint_list(f->model_dir, &e, &n, &d), TPU_EPARSE);

    /* a later version is refused, by latest and by save, which writes nothing */
    const char *future = "{\"format\": \"tpusim-checkpoint-index\", \"version\": 2}";
    spit(ipath, future, strlen(future));
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, &d), TPU_EUNSUPPORTED);
    assert_msg(&d, "is checkpoint index version 2");
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 200, m.t, 5, NULL, NULL, 0, &d),
                     TPU_EUNSUPPORTED);
    assert_false(exists(p200));

    /* a damaged index with no checkpoint file beside it: nothing to resume from, an error */
    spit(ipath, syntax, strlen(syntax));
    assert_int_equal(unlink(p100), 0);
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, &d), TPU_EPARSE);
    assert_msg(&d, "its JSON is malformed");
    assert_msg(&d, "nothing to resume from");

    /* the index names a file that is gone: an error, never a silent fallback, never "no
     * checkpoint" (which would start again at step 0) */
    rm_rf(f->model_dir);
    save_model(f, 100, 0, NULL, 0);
    save_model(f, 200, 0, NULL, 0);
    assert_int_equal(unlink(p200), 0);
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, &d), TPU_EIO);
    assert_msg(&d, "the latest checkpoint in '");
    assert_msg(&d, "', ckpt-200.safetensors, does not verify: cannot open checkpoint");
    assert_msg(&d, "No such file or directory");
    assert_msg(&d, "remove the checkpoint.json that names it");
    /* which is what the fix says: without the index, the highest step that is there */
    assert_int_equal(unlink(ipath), 0);
    expect_latest_warns(f, 100, "has no checkpoint.json index", NULL);
    free(good);
}

/* Issue #9: a model_dir whose index was lost. Training must resume from the files, and no
 * save may delete checkpoints it cannot account for. */
static void test_missing_index_recovers_and_keeps_files(void **state)
{
    struct fixture *f = *state;
    save_model(f, 3, 5, NULL, 0);
    save_model(f, 500, 5, NULL, 0);
    char ipath[256], p3[256], p500[256], p501[256];
    snprintf(ipath, sizeof ipath, "%s/checkpoint.json", f->model_dir);
    ckpt_path(f, 3, p3, sizeof p3);
    ckpt_path(f, 500, p500, sizeof p500);
    ckpt_path(f, 501, p501, sizeof p501);
    assert_int_equal(unlink(ipath), 0);

    expect_latest_warns(f, 500, "has no checkpoint.json index",
                        "using ckpt-500.safetensors (global step 500)");
    /* saves with keep_max 1 delete what their own index named, not the older files */
    save_model(f, 501, 1, NULL, 0);
    save_model(f, 502, 1, NULL, 0);
    assert_false(exists(p501));
    assert_loads(p3, 3);
    assert_loads(p500, 500);
    assert_consistent(f, 502);

    /* no index and the newest file damaged: an error that names it and the one before it */
    assert_int_equal(unlink(ipath), 0);
    char p502[256];
    ckpt_path(f, 502, p502, sizeof p502);
    size_t len;
    unsigned char *buf = slurp(p502, &len);
    buf[len - 1] ^= 0x01;
    spit(p502, buf, len);
    free(buf);
    struct tpu_diag d = {0};
    uint64_t step = 7;
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, NULL, 0, &d), TPU_EPARSE);
    assert_msg(&d, "ckpt-502.safetensors, does not verify");
    assert_msg(&d, "fails its checksum");
    assert_msg(&d, "move it out of model_dir to resume from the checkpoint file of the highest "
               "step (ckpt-500.safetensors)");
    assert_int_equal(step, 7);
    /* done as it says: 500 */
    char moved[300];
    snprintf(moved, sizeof moved, "%s/damaged-502", f->dir);
    assert_int_equal(rename(p502, moved), 0);
    expect_latest_warns(f, 500, "has no checkpoint.json index", NULL);
    /* a leftover temporary file is no checkpoint */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/ckpt-900.safetensors.tmp", f->model_dir);
    spit(tmp, "x", 1);
    expect_latest_warns(f, 500, "has no checkpoint.json index", NULL);
}

/* Issue #9: the step in a file is checked against its name, the index and a sane range. */
static void edit_huge_step(json_t *root, unsigned char **data, size_t *len)
{
    (void)data, (void)len;
    json_object_set_new(json_object_get(root, "__metadata__"), "tpusim.global_step",
                        json_string("9223372036854775806"));
}

static void test_step_checks(void **state)
{
    struct fixture *f = *state;
    char p500[256], p600[256], other[256], big[300];
    save_model(f, 500, 5, p500, sizeof p500);
    ckpt_path(f, 600, p600, sizeof p600);
    /* a file renamed to another step */
    assert_int_equal(rename(p500, p600), 0);
    expect_load_fails(p600, TPU_EPARSE, "its header says global step 500 but its name says "
                      "step 600", "rename it to ckpt-500.safetensors");
    /* under a name without a step it loads (the name is the caller's) */
    snprintf(other, sizeof other, "%s/best.safetensors", f->model_dir);
    assert_int_equal(rename(p600, other), 0);
    assert_loads(other, 500);
    /* the step of the issue, in a file of that name: out of range */
    snprintf(big, sizeof big, "%s/ckpt-9223372036854775806.safetensors", f->model_dir);
    assert_int_equal(rename(other, big), 0);
    edit_header(big, edit_huge_step);
    expect_load_fails(big, TPU_EPARSE, "tpusim.global_step is 9223372036854775806, beyond "
                      "9007199254740991 (2^53 - 1)", NULL);
    /* and as the latest an index names: an error, never a resume at that step */
    char ipath[256];
    snprintf(ipath, sizeof ipath, "%s/checkpoint.json", f->model_dir);
    const char *ix = "{\"format\": \"tpusim-checkpoint-index\", \"version\": 1, "
                     "\"latest\": {\"path\": \"ckpt-9223372036854775806.safetensors\", "
                     "\"global_step\": 9223372036854775806}, \"checkpoints\": [{\"path\": "
                     "\"ckpt-9223372036854775806.safetensors\", \"global_step\": "
                     "9223372036854775806}]}";
    spit(ipath, ix, strlen(ix));
    struct tpu_diag d = {0};
    uint64_t step = 7;
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, &step, NULL, 0, &d), TPU_EPARSE);
    assert_msg(&d, "names step 9223372036854775806, beyond 9007199254740991");
    assert_msg(&d, "ckpt-9223372036854775806.safetensors, does not verify");
    assert_msg(&d, "tpusim.global_step is 9223372036854775806");
    assert_int_equal(step, 7);
}

/* Issue #9: a directory where a checkpoint file or the index belongs, or a model_dir that is
 * a file, says so; sizes are checked against the file's real size. */
static void test_directories_and_sizes(void **state)
{
    struct fixture *f = *state;
    struct tpu_diag d = {0};
    struct tpu_checkpoint_info info;
    expect_load_fails(f->dir, TPU_EINVAL, "is a directory, not a checkpoint file", NULL);
    assert_int_equal(tpu_checkpoint_inspect(f->dir, &info, &d), TPU_EINVAL);
    assert_msg(&d, "is a directory");

    save_model(f, 100, 5, NULL, 0);
    char ipath[256], p200[256];
    snprintf(ipath, sizeof ipath, "%s/checkpoint.json", f->model_dir);
    assert_int_equal(unlink(ipath), 0);
    assert_int_equal(mkdir(ipath, 0777), 0);
    expect_latest_warns(f, 100, "checkpoint.json: is not a valid checkpoint index: it is a "
                        "directory", NULL);
    assert_int_equal(rmdir(ipath), 0);
    /* without an index, a directory named like the latest checkpoint is refused */
    ckpt_path(f, 200, p200, sizeof p200);
    assert_int_equal(mkdir(p200, 0777), 0);
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "ckpt-200.safetensors, does not verify");
    assert_msg(&d, "is a directory, not a checkpoint file");
    assert_int_equal(rmdir(p200), 0);
    /* an index larger than any index (sparse: no disk used) is not read */
    FILE *fp = fopen(ipath, "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(truncate(ipath, (off_t)65 << 20), 0);
    expect_latest_warns(f, 100, "it is 68157440 bytes, more than", NULL);
    assert_int_equal(unlink(ipath), 0);

    /* a FIFO named like the index or a checkpoint is refused at once, not waited on */
    assert_int_equal(mkfifo(ipath, 0600), 0);
    expect_latest_warns(f, 100, "checkpoint.json: is not a valid checkpoint index: it is not a "
                        "regular file", NULL);
    assert_int_equal(unlink(ipath), 0);
    assert_int_equal(mkfifo(p200, 0600), 0);
    assert_int_equal(tpu_checkpoint_latest(f->model_dir, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "ckpt-200.safetensors' is not a regular file (a device, pipe or socket)");
    assert_int_equal(unlink(p200), 0);

    /* model_dir is a file */
    char file[256];
    snprintf(file, sizeof file, "%s/not-a-dir", f->dir);
    spit(file, "x", 1);
    assert_int_equal(tpu_checkpoint_latest(file, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "model_dir '");
    assert_msg(&d, "' is not a directory");
}

/* ---- metadata and inspection --------------------------------------------------------- */

static void test_inspect_and_metadata(void **state)
{
    struct fixture *f = *state;
    struct model m;
    model_init(&m, 9);
    const struct tpu_checkpoint_kv meta[] = {{"config_fingerprint", "c0ffee12"},
                                             {"model", "mlp 784-128-10"},
                                             {"note", ""}};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.meta = meta;
    o.n_meta = 3;
    char path[256];
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 9, m.t, 5, &o, path, sizeof path, NULL),
                     0);
    struct tpu_checkpoint_info info;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_checkpoint_inspect(path, &info, &d), 0);
    assert_int_equal(info.global_step, 9);
    assert_int_equal(info.n_tensors, 5);
    const char *names[] = {"w", "b", "lab", "h", "q"};
    const enum tpu_dtype types[] = {TPU_F32, TPU_F32, TPU_INT32, TPU_BF16,
                                        TPU_INT8};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(info.tensors[i].name, names[i]);
        assert_int_equal(info.tensors[i].dtype, types[i]);
        assert_null(info.tensors[i].data);
    }
    assert_int_equal(info.tensors[0].rows, 3);
    assert_int_equal(info.tensors[0].cols, 4);
    assert_int_equal(info.n_meta, 3);
    assert_string_equal(tpu_checkpoint_info_meta(&info, "config_fingerprint"), "c0ffee12");
    assert_string_equal(tpu_checkpoint_info_meta(&info, "model"), "mlp 784-128-10");
    assert_string_equal(tpu_checkpoint_info_meta(&info, "note"), "");
    assert_null(tpu_checkpoint_info_meta(&info, "tpusim.global_step"));
    assert_null(tpu_checkpoint_info_meta(&info, "absent"));
    tpu_checkpoint_info_free(&info);
    assert_null(info.storage_);
    tpu_checkpoint_info_free(NULL);

    /* inspect verifies the checksums too; on failure *out is untouched */
    size_t len;
    unsigned char *buf = slurp(path, &len);
    buf[len - 1] ^= 1;
    spit(path, buf, len);
    free(buf);
    memset(&info, 0x11, sizeof info);
    assert_int_equal(tpu_checkpoint_inspect(path, &info, &d), TPU_EPARSE);
    assert_msg(&d, "tensor 'q' fails its checksum");
    assert_int_equal(info.global_step, 0x1111111111111111ull);
}

static void test_empty_checkpoint(void **state)
{
    struct fixture *f = *state;
    /* no tensors: a header with metadata only and an empty data section */
    const struct tpu_checkpoint_kv meta[] = {{"phase", "warmup"}};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.meta = meta;
    o.n_meta = 1;
    char path[256];
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 0, NULL, 0, &o, path, sizeof path, NULL),
                     0);
    size_t len;
    unsigned char *buf = slurp(path, &len);
    assert_int_equal(len, 8 + get_u64le(buf));
    free(buf);
    uint64_t step = 5;
    assert_int_equal(tpu_checkpoint_load(path, NULL, 0, &step, NULL), 0);
    assert_int_equal(step, 0);
    struct tpu_checkpoint_info info;
    assert_int_equal(tpu_checkpoint_inspect(path, &info, NULL), 0);
    assert_int_equal(info.n_tensors, 0);
    assert_null(info.tensors);
    assert_string_equal(tpu_checkpoint_info_meta(&info, "phase"), "warmup");
    tpu_checkpoint_info_free(&info);
    expect_load_fails(path, TPU_ESHAPE, "has no tensor 'w', which the caller expects (the file "
                      "holds 0: none)", NULL);
}

static void test_save_rejects_bad_arguments(void **state)
{
    struct fixture *f = *state;
    struct model m;
    struct tpu_diag d = {0};
    model_init(&m, 1);

    m.t[2].name = "w";
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "tensor name 'w' is given twice (tensors 0 and 2)");
    m.t[2].name = "";
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "tensor 2 has no name");
    m.t[2].name = "__metadata__";
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "reserves");
    m.t[2].name = "\xff\xfe";
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "not valid UTF-8");
    model_init(&m, 1);
    m.t[3].rows = 0;
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "tensor 'b' has shape [0, 4]; both dimensions must be at least 1");
    model_init(&m, 1);
    m.t[4].data = NULL;
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "tensor 'lab' has no data");
    model_init(&m, 1);
    m.t[0].dtype = (enum tpu_dtype)9;
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "tensor 'w' has dtype 9");
    model_init(&m, 1);
    assert_int_equal(tpu_checkpoint_save(f->model_dir, UINT64_MAX, m.t, 5, NULL, NULL, 0, &d),
                     TPU_EINVAL);
    assert_msg(&d, "global_step 18446744073709551615 is larger than 9007199254740991 (2^53 - 1)");
    /* the largest step saves; one more does not */
    assert_int_equal(tpu_checkpoint_save(f->model_dir, TPU_CHECKPOINT_MAX_STEP + 1, m.t, 5, NULL,
                                         NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "global_step 9007199254740992 is larger");
    char pmax[256];
    assert_int_equal(tpu_checkpoint_save(f->model_dir, TPU_CHECKPOINT_MAX_STEP, m.t, 5, NULL,
                                         pmax, sizeof pmax, &d), 0);
    assert_loads_step(pmax, TPU_CHECKPOINT_MAX_STEP);
    rm_rf(f->model_dir);
    assert_int_equal(tpu_checkpoint_save("", 1, m.t, 5, NULL, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "model_dir is empty");

    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    const struct tpu_checkpoint_kv reserved[] = {{"tpusim.global_step", "5"}};
    o.meta = reserved;
    o.n_meta = 1;
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, &o, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "metadata key 'tpusim.global_step' starts with 'tpusim.'");
    const struct tpu_checkpoint_kv twice[] = {{"a", "1"}, {"a", "2"}};
    o.meta = twice;
    o.n_meta = 2;
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, &o, NULL, 0, &d), TPU_EINVAL);
    assert_msg(&d, "metadata key 'a' is given twice");

    /* path_out too small: refused before anything is written */
    char small[8];
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1, m.t, 5, NULL, small, sizeof small, &d),
                     TPU_ERANGE);
    assert_msg(&d, "nothing was written");
    assert_false(exists(f->model_dir));

    /* model_dir is a file */
    char file[256];
    snprintf(file, sizeof file, "%s/plain", f->dir);
    spit(file, "x", 1);
    assert_int_equal(tpu_checkpoint_save(file, 1, m.t, 5, NULL, NULL, 0, &d), TPU_EIO);
    assert_msg(&d, "is not a directory");

    /* load validates the caller's array too */
    assert_int_equal(tpu_checkpoint_load("x", NULL, 2, NULL, &d), TPU_EINVAL);
    assert_msg(&d, "the tensor array is NULL");
}

static void test_dtype_and_stage_names(void **state)
{
    (void)state;
    assert_string_equal(tpu_checkpoint_dtype_name(TPU_F32), "F32");
    assert_string_equal(tpu_checkpoint_dtype_name(TPU_BF16), "BF16");
    assert_string_equal(tpu_checkpoint_dtype_name(TPU_INT8), "I8");
    assert_string_equal(tpu_checkpoint_dtype_name(TPU_INT32), "I32");
    assert_string_equal(tpu_checkpoint_dtype_name((enum tpu_dtype)7), "unknown");
    assert_string_equal(tpu_checkpoint_stage_name(TPU_CHECKPOINT_FSYNC_DIR), "fsync_dir");
    assert_string_equal(tpu_checkpoint_stage_name(TPU_CHECKPOINT_DELETE), "delete");
}

/* ---- an outside reader --------------------------------------------------------------- */

/* tests/data/checkpoint: from TPUSIM_CHECKPOINT_DATA, else beside this source file (the
 * compiler's __FILE__ is relative to the build directory, where meson runs tests). */
static void data_dir(char *out, size_t cap)
{
    const char *env = getenv("TPUSIM_CHECKPOINT_DATA");
    if (env && env[0]) {
        snprintf(out, cap, "%s", env);
        return;
    }
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    int dl = slash ? (int)(slash - file) : 1;
    snprintf(out, cap, "%.*s/data/checkpoint", dl, slash ? file : ".");
}

static void test_python_reads_it(void **state)
{
    struct fixture *f = *state;
    if (system("python3 -c 'import json, struct, zlib' >/dev/null 2>&1") != 0) {
        print_message("python3 is not available: the outside-reader check is skipped\n");
        skip();
    }
    char script[512];
    data_dir(script, sizeof script - 32);
    strcat(script, "/read_safetensors.py");
    if (!exists(script))
        fail_msg("cannot find %s (set TPUSIM_CHECKPOINT_DATA to tests/data/checkpoint)", script);

    struct model m;
    model_init(&m, 0);
    const struct tpu_checkpoint_kv meta[] = {{"config_fingerprint", "c0ffee12"}};
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    o.meta = meta;
    o.n_meta = 1;
    char path[256];
    assert_int_equal(tpu_checkpoint_save(f->model_dir, 1234, m.t, 5, &o, path, sizeof path,
                                         NULL), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' 2>&1", script, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[2048];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    const char *want = "w F32 [3, 4] 1.5 -0.0 nan | 3fc00000 80000000 7fc12345\n"
                       "b F32 [1, 4] 0.125 0.1250000149011612 0.1250000298023224"
                       " | 3e000000 3e000001 3e000002\n"
                       "lab I32 [1, 3] -2147483648 2147483647 7\n"
                       "h BF16 [2, 3] 1.0 -0.0 nan | 3f80 8000 7fc1\n"
                       "q I8 [5, 1] -128 127 0\n"
                       "global_step 1234\n"
                       "meta config_fingerprint=c0ffee12\n"
                       "checksums ok\n";
    if (strcmp(out, want) != 0)
        fail_msg("read_safetensors.py printed:\n%s\nexpected:\n%s", out, want);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* and it sees a flipped bit through tpusim's checksums */
    size_t len;
    unsigned char *buf = slurp(path, &len);
    buf[len - 10] ^= 4;
    spit(path, buf, len);
    free(buf);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    assert_non_null(strstr(out, "checksums MISMATCH"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_bit_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_lists_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_max_two, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_all_and_latest_none, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leftover_tmp_keeps_old, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_each_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_rename_keeps_old_file_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_length, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_syntax_line_column, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_structure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_and_appended, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bit_flips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_metadata, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expectation_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_index_recovers_and_keeps_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_step_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directories_and_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inspect_and_metadata, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_rejects_bad_arguments, setup, teardown),
        cmocka_unit_test(test_dtype_and_stage_names),
        cmocka_unit_test_setup_teardown(test_python_reads_it, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
