/* Users' datasets: any MNIST-format IDX set (every data type, 2 to 4 dimensions), NumPy sets
 * (every dtype, every shape, labels or regression targets), --data directories (which set,
 * and every way one can be missing, doubled or ambiguous), the checks against a model and of
 * a test set against its training set, and the infeed of a dataset of targets.
 *
 * Files are written here byte by byte in a fresh temporary directory: IDX big-endian, NumPy
 * little-endian (format 1.0). Values are compared exactly: each file holds numbers whose
 * float conversion is exact or given by the C rule (round to nearest), so no tolerance. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/npy.h"
#include "tmp_fixture.h"

static int setup(void **state)
{
    return tmp_fixture_setup(state, "/tmp/tpusim-userdata-XXXXXX");
}

static const char *at(const struct fixture *f, const char *name, char *buf)
{
    snprintf(buf, 256, "%s/%s", f->dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* An element of `size` bytes holding bits, in big- or little-endian order, at p. */
static void put(unsigned char *p, size_t size, uint64_t bits, bool big)
{
    for (size_t k = 0; k < size; k++)
        p[big ? size - 1 - k : k] = (unsigned char)(bits >> (8 * k));
}

/* The bits of v as an element of an IDX type / NumPy kind+size. */
static uint64_t bits_of(double v, bool is_float, size_t size)
{
    if (is_float && size == 4) {
        float fv = (float)v;
        uint32_t b;
        memcpy(&b, &fv, 4);
        return b;
    }
    if (is_float) {
        uint64_t b;
        memcpy(&b, &v, 8);
        return b;
    }
    return (uint64_t)(int64_t)v;
}

/* An IDX file: type byte, dims, values (converted to the type). */
static void write_idx(const char *path, unsigned type, const uint32_t *dims, unsigned n_dims,
                      const double *values, size_t n)
{
    const size_t size = type == 0x0B ? 2 : type == 0x0C || type == 0x0D ? 4 : type == 0x0E ? 8 : 1;
    size_t len = 4 + 4 * n_dims + n * size;
    unsigned char *b = calloc(1, len);
    assert_non_null(b);
    b[2] = (unsigned char)type;
    b[3] = (unsigned char)n_dims;
    for (unsigned i = 0; i < n_dims; i++)
        put(b + 4 + 4 * i, 4, dims[i], true);
    for (size_t i = 0; i < n; i++)
        put(b + 4 + 4 * n_dims + i * size, size,
            bits_of(values[i], type == 0x0D || type == 0x0E, size), true);
    write_bytes(path, b, len);
    free(b);
}

/* A .npy file (format 1.0, C order) of descr ("<f4", "|u1", ...), shape and values. */
static void write_npy(const char *path, const char *descr, const uint64_t *shape,
                      unsigned n_dims, const double *values, size_t n)
{
    char dict[256], dims[128] = "";
    size_t o = 0;
    for (unsigned i = 0; i < n_dims; i++)
        o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%llu", i ? ", " : "",
                              (unsigned long long)shape[i]);
    if (n_dims == 1)
        strcat(dims, ",");
    int hl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': "
                      "(%s), }", descr, dims);
    size_t hlen = (size_t)hl + 1;
    hlen += (64 - (10 + hlen) % 64) % 64;
    const size_t size = (size_t)(descr[2] - '0');
    const bool is_float = descr[1] == 'f';
    size_t len = 10 + hlen + n * size;
    unsigned char *b = calloc(1, len);
    assert_non_null(b);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)(hlen & 0xff);
    b[9] = (unsigned char)(hlen >> 8);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, dict, (size_t)hl);
    b[10 + hlen - 1] = '\n';
    for (size_t i = 0; i < n; i++)
        put(b + 10 + hlen + i * size, size, bits_of(values[i], is_float, size), false);
    write_bytes(path, b, len);
    free(b);
}

static void expect_msg(int rc, int code, const struct tpu_diag *d, const char *needle)
{
    if (rc != code || !strstr(d->msg, needle))
        fail_msg("rc %d (want %d), message:\n  %s\nwanted in it:\n  %s", rc, code, d->msg,
                 needle);
}

/* ---- IDX sets ------------------------------------------------------------------------------- */

/* 3 examples of 2x2 with values that every type holds exactly (the float types: -1.5 too). */
static const double img_vals[12] = {0, 1, 2, 3, 100, 127, 5, 6, 7, 8, 9, 10};
static const double lab_vals[3] = {2, 0, 1};

static void test_idx_every_type(void **state)
{
    struct fixture *f = *state;
    static const unsigned types[6] = {0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E};
    static const char *const names[6] = {"unsigned byte", "signed byte", "16-bit integer",
                                         "32-bit integer", "32-bit float", "64-bit float"};
    static const unsigned label_types[4] = {0x08, 0x09, 0x0B, 0x0C};
    char img[256], lab[256];
    const uint32_t dims[3] = {3, 2, 2}, ldims[1] = {3};
    for (int t = 0; t < 6; t++) {
        write_idx(at(f, "images", img), types[t], dims, 3, img_vals, 12);
        write_idx(at(f, "labels", lab), label_types[t % 4], ldims, 1, lab_vals, 3);
        struct tpu_dataset ds;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_dataset_load_idx_set(img, lab, NULL, &ds, &d), 0);
        assert_int_equal(ds.n_examples, 3);
        assert_int_equal(ds.n_features, 4);
        assert_int_equal(ds.image_rows, 2);
        assert_int_equal(ds.image_cols, 2);
        assert_int_equal(ds.image_channels, 1);
        assert_int_equal(ds.n_classes, 3);
        assert_null(ds.targets);
        assert_string_equal(ds.x_type, names[t]);
        for (int i = 0; i < 12; i++) {
            /* unsigned bytes are pixels (/255, correctly rounded); the rest as they are */
            const float want = types[t] == 0x08 ? (float)img_vals[i] / 255.0f : (float)img_vals[i];
            assert_true(ds.x[i] == want);
        }
        for (int i = 0; i < 3; i++)
            assert_int_equal(ds.y[i], (int)lab_vals[i]);
        tpu_dataset_free(&ds);
    }
}

static void test_idx_dims_2_and_4(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    const uint32_t ldims[1] = {3};
    write_idx(at(f, "labels", lab), 0x08, ldims, 1, lab_vals, 3);
    const uint32_t flat[2] = {3, 4}, hwc[4] = {3, 1, 2, 2};
    struct tpu_dataset ds;
    struct tpu_diag d = {0};
    write_idx(at(f, "flat", img), 0x0D, flat, 2, img_vals, 12);
    assert_int_equal(tpu_dataset_load_idx_set(img, lab, NULL, &ds, &d), 0);
    struct tpu_shape s = tpu_dataset_shape(&ds);
    assert_int_equal(s.h, 1);
    assert_int_equal(s.w, 1);
    assert_int_equal(s.c, 4);
    tpu_dataset_free(&ds);
    write_idx(at(f, "hwc", img), 0x0B, hwc, 4, img_vals, 12);
    assert_int_equal(tpu_dataset_load_idx_set(img, lab, NULL, &ds, &d), 0);
    s = tpu_dataset_shape(&ds);
    assert_int_equal(s.h, 1);
    assert_int_equal(s.w, 2);
    assert_int_equal(s.c, 2);
    assert_true(ds.x[11] == 10.0f);
    tpu_dataset_free(&ds);
}

static void test_idx_set_errors(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    const uint32_t dims[3] = {3, 2, 2}, ldims[1] = {3}, five[5] = {3, 1, 1, 2, 2};
    write_idx(at(f, "images", img), 0x08, dims, 3, img_vals, 12);
    write_idx(at(f, "labels", lab), 0x08, ldims, 1, lab_vals, 3);
    struct tpu_dataset ds;
    struct tpu_diag d = {0};
    write_idx(at(f, "type0a", bad), 0x0A, dims, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_idx_set(bad, lab, NULL, &ds, &d), TPU_EPARSE, &d,
               "type0a: byte 2 is 0x0a, data type 'not an IDX type'; IDX data types are 0x08 "
               "(unsigned byte), 0x09 (signed byte), 0x0b (16-bit integer), 0x0c (32-bit "
               "integer), 0x0d (32-bit float) and 0x0e (64-bit float)");
    write_idx(at(f, "float-labels", bad), 0x0D, ldims, 1, lab_vals, 3);
    expect_msg(tpu_dataset_load_idx_set(img, bad, NULL, &ds, &d), TPU_EPARSE, &d,
               "float-labels: byte 2 is 0x0d, data type '32-bit float'; class labels are "
               "integers");
    write_idx(at(f, "five", bad), 0x08, five, 5, img_vals, 12);
    expect_msg(tpu_dataset_load_idx_set(bad, lab, NULL, &ds, &d), TPU_EPARSE, &d,
               "five: byte 3 is 5: the file has 5 dimensions; an IDX image file has 2 to 4");
    expect_msg(tpu_dataset_load_idx_set(lab, img, NULL, &ds, &d), TPU_EPARSE, &d,
               "byte 3 is 1: the file has 1 dimension; an IDX image file has 2 to 4 (count, "
               "then features; rows, columns; or rows, columns, channels) (is it a label file? "
               "are the two swapped?)");
    const double neg[3] = {1, -3, 0};
    write_idx(at(f, "neg", bad), 0x09, ldims, 1, neg, 3);
    expect_msg(tpu_dataset_load_idx_set(img, bad, NULL, &ds, &d), TPU_ERANGE, &d,
               "neg: the label at byte offset 9 (example 1) is -3; a label is a class index "
               "from 0 to 2147483646");
    double nan_vals[12];
    memcpy(nan_vals, img_vals, sizeof nan_vals);
    nan_vals[7] = NAN;
    write_idx(at(f, "nan", bad), 0x0D, dims, 3, nan_vals, 12);
    expect_msg(tpu_dataset_load_idx_set(bad, lab, NULL, &ds, &d), TPU_ERANGE, &d,
               "nan: the value at index 7 (in row-major order) is nan; features and targets "
               "must be finite numbers");
    nan_vals[7] = 1e300; /* beyond float32 */
    write_idx(at(f, "huge", bad), 0x0E, dims, 3, nan_vals, 12);
    expect_msg(tpu_dataset_load_idx_set(bad, lab, NULL, &ds, &d), TPU_ERANGE, &d,
               "huge: the value at index 7 (in row-major order) is 1e+300, beyond the float32 "
               "range");
    /* a test set of another shape than its training set, from the header */
    struct tpu_dataset like;
    assert_int_equal(tpu_dataset_load_idx_set(img, lab, NULL, &like, &d), 0);
    const uint32_t other[3] = {2, 3, 2};
    write_idx(at(f, "other", bad), 0x08, other, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_idx_set(bad, lab, &like, &ds, &d), TPU_ESHAPE, &d,
               "other: holds images of 3x2 pixels (bytes 8-15 of the header), but 2x2 images "
               "are needed (4 input features per example)");
    tpu_dataset_free(&like);
    /* the strict reader still refuses what it always did */
    write_idx(at(f, "float", bad), 0x0D, dims, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_idx(bad, lab, 0, &ds, &d), TPU_EPARSE, &d,
               "tpusim reads IDX files of unsigned bytes (type 0x08)");
}

/* ---- NumPy sets ----------------------------------------------------------------------------- */

static void test_npy_every_dtype_and_shape(void **state)
{
    struct fixture *f = *state;
    char xp[256], yp[256];
    static const char *const descrs[7] = {"|u1", "|i1", "<i2", "<i4", "<i8", "<f4", "<f8"};
    static const char *const names[7] = {"uint8", "int8", "int16", "int32", "int64",
                                         "float32", "float64"};
    const uint64_t shapes[3][4] = {{3, 2, 2, 1}, {3, 2, 2, 0}, {3, 4, 0, 0}};
    const unsigned ranks[3] = {4, 3, 2};
    for (int t = 0; t < 7; t++) {
        for (int k = 0; k < 3; k++) {
            write_npy(at(f, "x.npy", xp), descrs[t], shapes[k], ranks[k], img_vals, 12);
            const uint64_t ys[2] = {3, 1};
            write_npy(at(f, "y.npy", yp), descrs[t % 5], ys, k == 1 ? 2 : 1, lab_vals, 3);
            struct tpu_dataset ds;
            struct tpu_diag d = {0};
            assert_int_equal(tpu_dataset_load_npy(xp, yp, NULL, &ds, &d), 0);
            const struct tpu_shape s = tpu_dataset_shape(&ds);
            assert_int_equal(s.h, k == 2 ? 1 : 2);
            assert_int_equal(s.w, k == 2 ? 1 : 2);
            assert_int_equal(s.c, k == 2 ? 4 : 1);
            assert_int_equal(ds.n_classes, 3);
            assert_string_equal(ds.x_type, names[t]);
            for (int i = 0; i < 12; i++)
                assert_true(ds.x[i] == (t == 0 ? (float)img_vals[i] / 255.0f
                                                : (float)img_vals[i]));
            for (int i = 0; i < 3; i++)
                assert_int_equal(ds.y[i], (int)lab_vals[i]);
            tpu_dataset_free(&ds);
        }
    }
}

static void test_npy_targets(void **state)
{
    struct fixture *f = *state;
    char xp[256], yp[256];
    const uint64_t xs[2] = {3, 4}, ys[2] = {3, 2};
    const double t[6] = {0.5, -1.25, 3, 4, 1e-3, 2.5};
    write_npy(at(f, "x.npy", xp), "<f4", xs, 2, img_vals, 12);
    write_npy(at(f, "y.npy", yp), "<f8", ys, 2, t, 6);
    struct tpu_dataset ds;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_dataset_load_npy(xp, yp, NULL, &ds, &d), 0);
    assert_null(ds.y);
    assert_int_equal(ds.n_targets, 2);
    assert_int_equal(ds.n_classes, 0);
    for (int i = 0; i < 6; i++)
        assert_true(ds.targets[i] == (float)t[i]);

    /* the infeed: x, targets [B][2] and the row mask; evaluation pads the last batch */
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &ds, 1);
    float x[2 * 4], tt[2 * 2];
    int32_t mask[2];
    void *tensors[3] = {x, tt, mask};
    uint32_t n_real = 0;
    assert_int_equal(in.input.start(in.input.ctx, TPU_MODE_EVAL, 0, 2, &d), 0);
    assert_int_equal(in.input.next(in.input.ctx, TPU_MODE_EVAL, 0, 2, tensors, &n_real, &d), 1);
    assert_int_equal(n_real, 2);
    assert_true(tt[0] == 0.5f && tt[3] == 4.0f && mask[0] == 0 && mask[1] == 0);
    assert_int_equal(in.input.next(in.input.ctx, TPU_MODE_EVAL, 0, 2, tensors, &n_real, &d), 1);
    assert_int_equal(n_real, 1);
    assert_true(tt[0] == 1e-3f && tt[1] == 2.5f && tt[2] == 0 && tt[3] == 0);
    assert_true(x[4] == 0 && x[0] == 7.0f); /* example 2, then a padded row */
    assert_int_equal(mask[0], 0);
    assert_int_equal(mask[1], -1);
    /* training: every row real, each example's targets beside its features */
    assert_int_equal(in.input.start(in.input.ctx, TPU_MODE_TRAIN, 0, 2, &d), 0);
    for (int step = 0; step < 3; step++) {
        assert_int_equal(in.input.next(in.input.ctx, TPU_MODE_TRAIN, 0, 2, tensors, &n_real, &d),
                         1);
        for (int r = 0; r < 2; r++) {
            /* which example: its first feature is 0, 100 or 7 (img_vals) */
            const int e = x[r * 4] == 0 ? 0 : x[r * 4] == 100 ? 1 : 2;
            assert_int_equal(mask[r], 0);
            assert_true(tt[r * 2] == (float)t[e * 2] && tt[r * 2 + 1] == (float)t[e * 2 + 1]);
        }
    }
    tpu_dataset_input_free(&in);

    /* a split keeps the targets with their examples */
    struct tpu_dataset tr, va;
    assert_int_equal(tpu_dataset_split(&ds, 1, 7, &tr, &va, &d), 0);
    assert_int_equal(tr.n_targets, 2);
    assert_null(tr.y);
    for (uint32_t k = 0; k < va.n_examples; k++)
        for (uint32_t i = 0; i < 3; i++)
            if (memcmp(va.x + k * 4, ds.x + i * 4, 16) == 0)
                assert_memory_equal(va.targets + k * 2, ds.targets + i * 2, 8);
    tpu_dataset_free(&tr);
    tpu_dataset_free(&va);
    tpu_dataset_free(&ds);
}

static void test_npy_errors(void **state)
{
    struct fixture *f = *state;
    char xp[256], yp[256], bad[256];
    const uint64_t xs[3] = {3, 2, 2}, ys[1] = {3};
    write_npy(at(f, "x.npy", xp), "|u1", xs, 3, img_vals, 12);
    write_npy(at(f, "y.npy", yp), "<i4", ys, 1, lab_vals, 3);
    struct tpu_dataset ds, like;
    struct tpu_diag d = {0};
    const uint64_t onehot[2] = {3, 3};
    const double oh[9] = {0, 0, 1, 1, 0, 0, 0, 1, 0};
    write_npy(at(f, "onehot.npy", bad), "|u1", onehot, 2, oh, 9);
    expect_msg(tpu_dataset_load_npy(xp, bad, NULL, &ds, &d), TPU_ESHAPE, &d,
               "onehot.npy: has 2 dimensions (3 x 3) of uint8; labels are (N,) or (N, 1) of an "
               "integer dtype, regression targets (N, K) of float32 or float64 (one-hot "
               "labels? numpy: y.argmax(1))");
    const uint64_t flat1[1] = {12}, five[5] = {3, 1, 1, 2, 2};
    write_npy(at(f, "x1.npy", bad), "<f4", flat1, 1, img_vals, 12);
    expect_msg(tpu_dataset_load_npy(bad, yp, NULL, &ds, &d), TPU_ESHAPE, &d,
               "x1.npy: has 1 dimension; features are (N, h, w, c), (N, h, w) or (N, features)");
    write_npy(at(f, "x5.npy", bad), "<f4", five, 5, img_vals, 12);
    expect_msg(tpu_dataset_load_npy(bad, yp, NULL, &ds, &d), TPU_ESHAPE, &d,
               "x5.npy: has 5 dimensions");
    const uint64_t two[1] = {2};
    write_npy(at(f, "y2.npy", bad), "<i4", two, 1, lab_vals, 2);
    expect_msg(tpu_dataset_load_npy(xp, bad, NULL, &ds, &d), TPU_ESHAPE, &d,
               "x.npy holds 3 examples but");
    expect_msg(tpu_dataset_load_npy(xp, bad, NULL, &ds, &d), TPU_ESHAPE, &d,
               "y2.npy holds 2 rows; x and y must describe the same examples, one row each");
    write_npy(at(f, "u2.npy", bad), "<u2", ys, 1, lab_vals, 3);
    expect_msg(tpu_dataset_load_npy(xp, bad, NULL, &ds, &d), TPU_EPARSE, &d,
               "u2.npy: holds dtype '<u2'; tpusim reads little-endian uint8 ('|u1'), int8 "
               "('|i1'), int16 ('<i2'), int32 ('<i4'), int64 ('<i8'), float32 ('<f4') or "
               "float64 ('<f8')");
    const double neg[3] = {0, 1, -1};
    write_npy(at(f, "neg.npy", bad), "<i8", ys, 1, neg, 3);
    expect_msg(tpu_dataset_load_npy(xp, bad, NULL, &ds, &d), TPU_ERANGE, &d,
               "neg.npy: the label at index 2 is -1; a label is a class index");
    double inf_vals[12];
    memcpy(inf_vals, img_vals, sizeof inf_vals);
    inf_vals[5] = INFINITY;
    write_npy(at(f, "inf.npy", bad), "<f8", xs, 3, inf_vals, 12);
    expect_msg(tpu_dataset_load_npy(bad, yp, NULL, &ds, &d), TPU_ERANGE, &d,
               "inf.npy: the value at index 5 (in row-major order) is inf");
    /* a test set against its training set: shape, then kind */
    assert_int_equal(tpu_dataset_load_npy(xp, yp, NULL, &like, &d), 0);
    const uint64_t other[2] = {3, 4};
    write_npy(at(f, "xo.npy", bad), "|u1", other, 2, img_vals, 12);
    expect_msg(tpu_dataset_load_npy(bad, yp, &like, &ds, &d), TPU_ESHAPE, &d,
               "xo.npy holds examples of 4 values, but ");
    expect_msg(tpu_dataset_load_npy(bad, yp, &like, &ds, &d), TPU_ESHAPE, &d,
               "x.npy holds 2x2 examples (4 values); a training and a test set hold examples "
               "of one shape");
    const uint64_t tshape[2] = {3, 2};
    write_npy(at(f, "t.npy", bad), "<f4", tshape, 2, img_vals, 6);
    expect_msg(tpu_dataset_load_npy(xp, bad, &like, &ds, &d), TPU_ESHAPE, &d,
               "t.npy holds regression targets (float32) but ");
    tpu_dataset_free(&like);
}

static void test_npy_read_array_ranks(void **state)
{
    struct fixture *f = *state;
    char p[256];
    const uint64_t eight[8] = {1, 1, 1, 1, 1, 1, 2, 2}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 2, 2};
    struct tpu_npy_array a;
    struct tpu_diag d = {0};
    write_npy(at(f, "a.npy", p), "<i2", eight, 8, img_vals, 4);
    assert_int_equal(tpu_npy_read_array(p, &a, &d), 0);
    assert_int_equal(a.n_dims, 8);
    assert_int_equal(a.kind, 'i');
    assert_int_equal(a.item_bytes, 2);
    assert_string_equal(a.dtype_name, "int16");
    assert_int_equal(((const int16_t *)a.data)[3], 3);
    tpu_npy_array_free(&a);
    write_npy(p, "<i2", nine, 9, img_vals, 4);
    expect_msg(tpu_npy_read_array(p, &a, &d), TPU_ESHAPE, &d, "has more than 8 dimensions");
    write_npy(p, "<i2", nine, 0, img_vals, 1);
    expect_msg(tpu_npy_read_array(p, &a, &d), TPU_ESHAPE, &d,
               "holds a single value (shape ()); a dataset array has one row per example");
    const uint64_t zero[2] = {3, 0};
    write_npy(p, "<f4", zero, 2, img_vals, 0);
    expect_msg(tpu_npy_read_array(p, &a, &d), TPU_ESHAPE, &d,
               "has shape (3, 0); every dimension must be at least 1");
    /* the 2-D reader of `tpusim gemm` is as it was */
    write_npy(p, "<f8", zero, 2, img_vals, 0);
    struct tpu_npy m;
    expect_msg(tpu_npy_read(p, &m, &d), TPU_EPARSE, &d,
               "holds dtype '<f8'; tpusim reads little-endian float32 ('<f4'), int8 ('|i1') or "
               "int32 ('<i4')");
}

/* ---- directories ---------------------------------------------------------------------------- */

static void test_dir_sets(void **state)
{
    struct fixture *f = *state;
    char p[256], q[256];
    const uint32_t dims[3] = {3, 2, 2}, ldims[1] = {3};
    struct tpu_dataset tr, te;
    struct tpu_diag d = {0};
    expect_msg(tpu_dataset_load_dir(f->dir, true, NULL, &tr, &d), TPU_ENOTFOUND, &d,
               "holds no dataset: looked for an IDX set (train-images-idx3-ubyte[.gz], "
               "train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], "
               "t10k-labels-idx1-ubyte[.gz], or any files named train-images*, train-labels*, "
               "t10k-images*, t10k-labels*) or a NumPy set (x_train.npy, y_train.npy, "
               "x_test.npy, y_test.npy)");
    expect_msg(tpu_dataset_load_dir(at(f, "none", p), true, NULL, &tr, &d), TPU_ENOTFOUND, &d,
               "none': No such file or directory; give a directory holding an IDX set");
    /* an IDX set under other names than Fashion-MNIST's (EMNIST's style) */
    write_idx(at(f, "train-images.idx3", p), 0x0C, dims, 3, img_vals, 12);
    write_idx(at(f, "train-labels.idx1", q), 0x08, ldims, 1, lab_vals, 3);
    write_idx(at(f, "t10k-images.idx3", p), 0x0C, dims, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_dir(f->dir, false, NULL, &te, &d), TPU_ENOTFOUND, &d,
               "holds an IDX set without t10k-labels (no t10k-labels-idx1-ubyte[.gz], no file "
               "named t10k-labels*)");
    write_idx(at(f, "t10k-labels.idx1", q), 0x08, ldims, 1, lab_vals, 3);
    assert_int_equal(tpu_dataset_load_dir(f->dir, false, NULL, &te, &d), 0);
    assert_int_equal(tpu_dataset_load_dir(f->dir, true, &te, &tr, &d), 0);
    assert_int_equal(tpu_dataset_check_pair(&tr, &te, &d), 0);
    assert_non_null(strstr(tr.x_file, "train-images.idx3"));
    assert_true(tr.x[5] == 127.0f); /* int32 pixels are taken as they are */
    tpu_dataset_free(&tr);
    /* two files for one pattern */
    write_idx(at(f, "train-images.idx3.bak", p), 0x0C, dims, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_dir(f->dir, true, NULL, &tr, &d), TPU_EINVAL, &d,
               "several files are named train-images* (");
    unlink(p);
    /* Fashion-MNIST's names win over the pattern */
    write_idx(at(f, "train-images-idx3-ubyte", p), 0x08, dims, 3, img_vals, 12);
    assert_int_equal(tpu_dataset_load_dir(f->dir, true, NULL, &tr, &d), 0);
    assert_true(tr.x[5] == 127.0f / 255.0f);
    tpu_dataset_free(&tr);
    /* and a NumPy set beside it: both */
    const uint64_t xs[3] = {3, 2, 2}, ys[1] = {3};
    write_npy(at(f, "x_train.npy", p), "|u1", xs, 3, img_vals, 12);
    expect_msg(tpu_dataset_load_dir(f->dir, true, NULL, &tr, &d), TPU_EINVAL, &d,
               "holds both an IDX set (train-images-idx3-ubyte...) and a NumPy set "
               "(x_train.npy...); give a directory with one of them");
    DIR *dp = opendir(f->dir);
    struct dirent *e;
    while ((e = readdir(dp)))
        if (strstr(e->d_name, "idx") || strstr(e->d_name, ".idx"))
            unlinkat(dirfd(dp), e->d_name, 0);
    closedir(dp);
    expect_msg(tpu_dataset_load_dir(f->dir, true, NULL, &tr, &d), TPU_ENOTFOUND, &d,
               "holds a NumPy set without y_train.npy; a NumPy set is x_train.npy, "
               "y_train.npy, x_test.npy and y_test.npy (Keras's load_data names): add it");
    write_npy(at(f, "y_train.npy", p), "|u1", ys, 1, lab_vals, 3);
    assert_int_equal(tpu_dataset_load_dir(f->dir, true, &te, &tr, &d), 0);
    assert_int_equal(tr.n_classes, 3);
    tpu_dataset_free(&tr);
    tpu_dataset_free(&te);
}

/* ---- checks against a model ----------------------------------------------------------------- */

/* A dataset of n examples of shape s, labels i % classes, named like a NumPy set. */
static void fake(struct tpu_dataset *ds, uint32_t n, struct tpu_shape s, uint32_t classes,
                 uint32_t n_targets)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->image_rows = s.h;
    ds->image_cols = s.w;
    ds->image_channels = s.c;
    ds->n_features = s.h * s.w * s.c;
    ds->x = calloc((size_t)n * ds->n_features, sizeof *ds->x);
    assert_non_null(ds->x);
    if (n_targets) {
        ds->n_targets = n_targets;
        ds->targets = calloc((size_t)n * n_targets, sizeof *ds->targets);
        assert_non_null(ds->targets);
        strcpy(ds->y_type, "float32");
    } else {
        ds->n_classes = classes;
        ds->y = malloc(n * sizeof *ds->y);
        assert_non_null(ds->y);
        for (uint32_t i = 0; i < n; i++)
            ds->y[i] = (int32_t)(i % classes);
        strcpy(ds->y_type, "int64");
    }
    strcpy(ds->x_file, "x_train.npy");
    strcpy(ds->y_file, "y_train.npy");
}

static void test_check_model(void **state)
{
    (void)state;
    struct tpu_dataset ds, te;
    struct tpu_diag d = {0};
    const struct tpu_shape mnist = {28, 28, 1}, cifar = {32, 32, 3}, flat = {1, 1, 784};
    fake(&ds, 5, mnist, 10, 0);
    expect_msg(tpu_dataset_check_model(&ds, cifar, TPU_LOSS_SOFTMAX_XENT, 10, &d), TPU_ESHAPE,
               &d, "x_train.npy holds 28x28 examples (784 values); the model's input is 32x32x3 "
               "(3072): give data of the model's input shape, or a model whose input is the "
               "data's");
    assert_int_equal(tpu_dataset_check_model(&ds, mnist, TPU_LOSS_SOFTMAX_XENT, 10, &d), 0);
    /* a flat side takes the same bytes */
    assert_int_equal(tpu_dataset_check_model(&ds, flat, TPU_LOSS_SOFTMAX_XENT, 10, &d), 0);
    const struct tpu_shape wrong = {28, 14, 2};
    expect_msg(tpu_dataset_check_model(&ds, wrong, TPU_LOSS_SOFTMAX_XENT, 10, &d), TPU_ESHAPE,
               &d, "the model's input is 28x14x2 (784)");
    expect_msg(tpu_dataset_check_model(&ds, mnist, TPU_LOSS_SOFTMAX_XENT, 3, &d), TPU_ERANGE,
               &d, "y_train.npy: the label of example 3 is 3; the model has 3 classes (labels "
               "0 to 2): give a model with at least 4 outputs, or fix the label");
    expect_msg(tpu_dataset_check_model(&ds, mnist, TPU_LOSS_MSE, 10, &d), TPU_ESHAPE, &d,
               "y_train.npy holds integer class labels (int64); the model's loss is mean "
               "squared error, which needs float targets (N, 10) of the output's size");
    fake(&te, 4, mnist, 0, 3);
    expect_msg(tpu_dataset_check_model(&te, mnist, TPU_LOSS_SOFTMAX_XENT, 10, &d), TPU_ESHAPE,
               &d, "y_train.npy holds regression targets (float32, 3 per example); the model's "
               "loss is softmax cross-entropy, which needs integer class labels (N,)");
    expect_msg(tpu_dataset_check_model(&te, mnist, TPU_LOSS_MSE, 2, &d), TPU_ESHAPE, &d,
               "y_train.npy holds 3 target values per example; the model's output has 2: give "
               "targets (N, 2), or a model whose output has 3 values");
    assert_int_equal(tpu_dataset_check_model(&te, mnist, TPU_LOSS_MSE, 3, &d), 0);
    /* train against test */
    expect_msg(tpu_dataset_check_pair(&ds, &te, &d), TPU_ESHAPE, &d,
               "y_train.npy holds class labels but y_train.npy holds regression targets of 3 "
               "values");
    tpu_dataset_free(&te);
    fake(&te, 4, cifar, 10, 0);
    strcpy(te.x_file, "x_test.npy");
    expect_msg(tpu_dataset_check_pair(&ds, &te, &d), TPU_ESHAPE, &d,
               "x_train.npy holds 28x28 examples (784 values), but x_test.npy holds 32x32x3 "
               "examples (3072 values)");
    tpu_dataset_free(&te);
    tpu_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idx_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_dims_2_and_4, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_set_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_npy_every_dtype_and_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(test_npy_targets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_npy_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_npy_read_array_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_sets, setup, teardown),
        cmocka_unit_test(test_check_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
