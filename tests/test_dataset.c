/* Datasets: IDX reading (plain and gzip) with every way a file can be wrong, Fashion-MNIST
 * from the Debian package, the deterministic shuffle, the validation split and batch
 * gathering with padding.
 *
 * IDX files are real files in a fresh temporary directory, their bytes spelled out here from
 * the format's description (big-endian dimensions), compressed with zlib's gzwrite() where a
 * test wants gzip. Pinned reference values (Fashion-MNIST sums, shuffle orders) come from
 * tests/data/idx/reference.py, which computes them with Python alone. */
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
#include <zlib.h>

#include "tpusim/dataset.h"
#include "tmp_fixture.h"

static int setup(void **state)
{
    return tmp_fixture_setup(state, "/tmp/tpusim-dataset-XXXXXX");
}

/* ---- writing test files ---------------------------------------------------------------- */

static const char *in_dir(const struct fixture *f, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", f->dir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t len, bool gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        assert_non_null(gz);
        if (len > 0)
            assert_int_equal(gzwrite(gz, data, (unsigned)len), (int)len);
        assert_int_equal(gzclose(gz), Z_OK);
    } else {
        FILE *fp = fopen(path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(data, 1, len, fp), len);
        assert_int_equal(fclose(fp), 0);
    }
}

/* Reads a whole file's raw bytes (to corrupt a gzip file). */
static size_t read_raw(const char *path, unsigned char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(buf, 1, cap, fp);
    assert_true(n < cap);
    fclose(fp);
    return n;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Three 2x3 images and their labels, spelled out byte by byte. */
static const unsigned char tiny_images[] = {
    0x00, 0x00, 0x08, 0x03,  /* magic: unsigned bytes, 3 dimensions */
    0, 0, 0, 3,              /* 3 images */
    0, 0, 0, 2,              /* 2 rows */
    0, 0, 0, 3,              /* 3 columns */
    0, 1, 2, 127, 128, 255,  /* image 0 */
    255, 254, 3, 0, 0, 0,    /* image 1 */
    10, 20, 30, 40, 50, 60,  /* image 2 */
};
static const unsigned char tiny_labels[] = {
    0x00, 0x00, 0x08, 0x01, /* magic: unsigned bytes, 1 dimension */
    0, 0, 0, 3,             /* 3 labels */
    4, 0, 2,
};

/* Writes the tiny pair as "<stem>-images" and "<stem>-labels". */
static void write_tiny(const struct fixture *f, bool gzip, char *img, char *lab, size_t size)
{
    write_file(in_dir(f, gzip ? "tiny-images.gz" : "tiny-images", img, size), tiny_images,
               sizeof tiny_images, gzip);
    write_file(in_dir(f, gzip ? "tiny-labels.gz" : "tiny-labels", lab, size), tiny_labels,
               sizeof tiny_labels, gzip);
}

/* Loads and expects failure with `code` and `text` in the message; *out must stay as it
 * was (a byte pattern no load would write). */
static void expect_fail(const char *img, const char *lab, uint32_t n_classes, int code,
                        const char *text)
{
    struct tpu_dataset ds, before;
    memset(&ds, 0xA5, sizeof ds);
    memcpy(&before, &ds, sizeof ds);
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_dataset_load_idx(img, lab, n_classes, &ds, &d);
    if (rc != code || !strstr(d.msg, text))
        print_error("got %s \"%s\"\nwant %s with \"%s\"\n", tpu_err_name(rc), d.msg,
                    tpu_err_name(code), text);
    assert_int_equal(rc, code);
    assert_int_equal(d.code, code);
    assert_non_null(strstr(d.msg, text));
    assert_memory_equal(&ds, &before, sizeof ds);
}

/* Writes an image file whose header is magic + dims (n_dims of them), then `data_bytes`
 * bytes of pattern data. */
static void write_images(const char *path, uint32_t magic, const uint32_t *dims,
                         unsigned n_dims, size_t data_bytes, bool gzip)
{
    size_t len = 4 + 4 * (size_t)n_dims + data_bytes;
    unsigned char *buf = malloc(len);
    assert_non_null(buf);
    put_be32(buf, magic);
    for (unsigned i = 0; i < n_dims; i++)
        put_be32(buf + 4 + 4 * i, dims[i]);
    for (size_t i = 4 + 4 * (size_t)n_dims; i < len; i++)
        buf[i] = (unsigned char)(i * 7);
    write_file(path, buf, len, gzip);
    free(buf);
}

/* ---- loading good files ---------------------------------------------------------------- */

static void check_tiny(const struct tpu_dataset *ds, const char *img)
{
    assert_int_equal(ds->n_examples, 3);
    assert_int_equal(ds->n_features, 6);
    assert_int_equal(ds->image_rows, 2);
    assert_int_equal(ds->image_cols, 3);
    assert_int_equal(ds->n_classes, 5); /* inferred: largest label 4, plus one */
    assert_string_equal(ds->origin, img);
    for (int i = 0; i < 18; i++)
        assert_true(ds->x[i] == (float)tiny_images[16 + i] / 255.0f);
    assert_true(ds->x[0] == 0.0f);
    assert_true(ds->x[5] == 1.0f);
    assert_true(ds->x[6] == 1.0f);
    assert_true(ds->x[12] == (float)(10.0 / 255.0));
    assert_int_equal(ds->y[0], 4);
    assert_int_equal(ds->y[1], 0);
    assert_int_equal(ds->y[2], 2);
}

static void test_load_plain(void **state)
{
    char img[256], lab[256];
    write_tiny(*state, false, img, lab, sizeof img);
    struct tpu_dataset ds;
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 0, &ds, &d), 0);
    check_tiny(&ds, img);
    tpu_dataset_free(&ds);
    assert_null(ds.x);
    assert_int_equal(ds.n_examples, 0);
    tpu_dataset_free(&ds); /* a freed dataset may be freed again */
    tpu_dataset_free(NULL);
}

static void test_load_gzip(void **state)
{
    char img[256], lab[256];
    write_tiny(*state, true, img, lab, sizeof img);
    struct tpu_dataset ds;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 0, &ds, NULL), 0);
    check_tiny(&ds, img);
    tpu_dataset_free(&ds);
}

/* The content decides, not the name: gzip data without .gz, plain data named .gz. */
static void test_load_detects_gzip_by_magic(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    write_file(in_dir(f, "images.idx", img, sizeof img), tiny_images, sizeof tiny_images, true);
    write_file(in_dir(f, "labels.gz", lab, sizeof lab), tiny_labels, sizeof tiny_labels, false);
    struct tpu_dataset ds;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 0, &ds, NULL), 0);
    check_tiny(&ds, img);
    tpu_dataset_free(&ds);
}

/* Every byte value maps to byte/255 correctly rounded, 0 to 0 and 255 to exactly 1. */
static void test_load_pixel_scale(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    unsigned char buf[16 + 256];
    uint32_t dims[3] = {1, 16, 16};
    put_be32(buf, 0x803);
    for (int i = 0; i < 3; i++)
        put_be32(buf + 4 + 4 * i, dims[i]);
    for (int v = 0; v < 256; v++)
        buf[16 + v] = (unsigned char)v;
    write_file(in_dir(f, "all.gz", img, sizeof img), buf, sizeof buf, true);
    const unsigned char labels[9] = {0, 0, 8, 1, 0, 0, 0, 1, 7};
    write_file(in_dir(f, "one-label", lab, sizeof lab), labels, sizeof labels, false);
    struct tpu_dataset ds;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 10, &ds, NULL), 0);
    assert_int_equal(ds.n_features, 256);
    assert_int_equal(ds.n_classes, 10); /* given, not inferred (8) */
    assert_int_equal(ds.y[0], 7);
    for (int v = 0; v < 256; v++)
        assert_true(ds.x[v] == (float)((double)v / 255.0));
    assert_true(ds.x[0] == 0.0f);
    assert_true(ds.x[255] == 1.0f);
    tpu_dataset_free(&ds);
}

/* More data than the reader's first buffer (16 MiB): the buffer grows and every value
 * arrives. */
static void test_load_large_gzip(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    const uint32_t n = 30000, rows = 28, cols = 28;
    const size_t data = (size_t)n * rows * cols; /* 23520000 bytes */
    unsigned char *buf = malloc(16 + data);
    assert_non_null(buf);
    put_be32(buf, 0x803);
    put_be32(buf + 4, n);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    for (size_t i = 0; i < data; i++)
        buf[16 + i] = (unsigned char)(i % 251);
    write_file(in_dir(f, "big.gz", img, sizeof img), buf, 16 + data, true);
    unsigned char *lbuf = malloc(8 + n);
    assert_non_null(lbuf);
    put_be32(lbuf, 0x801);
    put_be32(lbuf + 4, n);
    for (uint32_t i = 0; i < n; i++)
        lbuf[8 + i] = (unsigned char)(i % 10);
    write_file(in_dir(f, "big-labels.gz", lab, sizeof lab), lbuf, 8 + n, true);

    struct tpu_dataset ds;
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_dataset_load_idx(img, lab, 0, &ds, &d);
    if (rc)
        print_error("%s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(ds.n_examples, n);
    assert_int_equal(ds.n_classes, 10);
    size_t bad = 0;
    for (size_t i = 0; i < data; i++)
        bad += ds.x[i] != (float)(i % 251) / 255.0f;
    assert_int_equal(bad, 0);
    assert_int_equal(ds.y[n - 1], (n - 1) % 10);
    tpu_dataset_free(&ds);
    free(buf);
    free(lbuf);
}

/* ---- every way a file can be wrong ----------------------------------------------------- */

static void test_error_missing_files(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], nope[256];
    write_tiny(f, false, img, lab, sizeof img);
    in_dir(f, "nope", nope, sizeof nope);
    char want[512];
    snprintf(want, sizeof want, "cannot open the image file '%s': No such file or directory",
             nope);
    expect_fail(nope, lab, 0, TPU_EIO, want);
    snprintf(want, sizeof want, "cannot open the label file '%s': No such file or directory",
             nope);
    expect_fail(img, nope, 0, TPU_EIO, want);
    snprintf(want, sizeof want, "'%s' is a directory; expected an IDX image file", f->dir);
    expect_fail(f->dir, lab, 0, TPU_EIO, want);
    /* a name with a control character or a byte that is not UTF-8 is quoted */
    expect_fail("/nonexistent/a\nb\xfe", lab, 0, TPU_EIO,
                "cannot open the image file '/nonexistent/a\\x0Ab\\xFE': No such file");
    /* the label file's name in a later message too (labels 4, 0, 2 with 3 classes) */
    char odd[256];
    write_file(in_dir(f, "lab\x1b", odd, sizeof odd), tiny_labels, sizeof tiny_labels, false);
    expect_fail(img, odd, 3, TPU_ERANGE, "lab\\x1B: the label at byte offset 8 (example 0) "
                                         "is 4; with 3 classes a label must be 0 to 2");
}

static void test_error_empty_and_short_magic(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    write_file(in_dir(f, "empty", bad, sizeof bad), "", 0, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "empty: is empty; an IDX image file starts with the 4-byte magic 0x00000803");
    write_file(in_dir(f, "empty.gz", bad, sizeof bad), "", 0, true);
    expect_fail(img, bad, 0, TPU_EPARSE,
                "empty.gz: is empty after decompression; an IDX label file starts with the "
                "4-byte magic 0x00000801");
    write_file(in_dir(f, "short", bad, sizeof bad), "\0\0", 2, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "short: truncated at byte offset 2: the IDX magic needs 4 bytes, the file has "
                "2");
}

static void test_error_wrong_magic(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, true, img, lab, sizeof img);
    /* the two files swapped */
    expect_fail(lab, img, 0, TPU_EPARSE,
                "tiny-labels.gz: bytes 0-3 are 0x00000801, the magic of an IDX label file; an "
                "IDX image file starts with 0x00000803 (are the image and label files "
                "swapped?)");
    expect_fail(img, img, 0, TPU_EPARSE,
                "tiny-images.gz: bytes 0-3 are 0x00000803, the magic of an IDX image file; an "
                "IDX label file starts with 0x00000801");
    write_file(in_dir(f, "text", bad, sizeof bad), "hello world", 11, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "text: bytes 0-3 are 0x68656c6c, which is not an IDX magic (two zero bytes, a "
                "data type, a dimension count); an IDX image file starts with 0x00000803");
}

static void test_error_data_type_and_dims(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    const uint32_t dims[3] = {3, 2, 3};
    write_images(in_dir(f, "float", bad, sizeof bad), 0x00000D03, dims, 3, 72, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "float: byte 2 is 0x0d, data type '32-bit float'; tpusim reads IDX files of "
                "unsigned bytes (type 0x08)");
    write_images(bad, 0x00000A03, dims, 3, 18, false);
    expect_fail(bad, lab, 0, TPU_EPARSE, "float: byte 2 is 0x0a, data type 'not an IDX type'");
    write_images(in_dir(f, "two-dims", bad, sizeof bad), 0x00000802, dims, 2, 18, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "two-dims: byte 3 is 2: the file has 2 dimensions; an IDX image file has 3 "
                "(count, rows, columns)");
    write_images(in_dir(f, "labels-3d", bad, sizeof bad), 0x00000803, dims, 3, 18, false);
    /* a label file with 3 dimensions has an image magic: said so */
    expect_fail(img, bad, 0, TPU_EPARSE, "the magic of an IDX image file");
    write_images(in_dir(f, "labels-2d", bad, sizeof bad), 0x00000802, dims, 2, 6, false);
    expect_fail(img, bad, 0, TPU_EPARSE,
                "labels-2d: byte 3 is 2: the file has 2 dimensions; an IDX label file has 1 "
                "(count)");
}

static void test_error_header(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    /* the magic and one dimension of three */
    const uint32_t one[1] = {3};
    write_images(in_dir(f, "cut-header", bad, sizeof bad), 0x803, one, 1, 0, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "cut-header: truncated at byte offset 8: the header of an IDX image file is "
                "16 bytes (the magic and 3 dimensions), the file has 8");
    write_file(in_dir(f, "cut-labels", bad, sizeof bad), tiny_labels, 6, true);
    expect_fail(img, bad, 0, TPU_EPARSE,
                "cut-labels: truncated at byte offset 6: the header of an IDX label file is 8 "
                "bytes (the magic and 1 dimension), the file has 6 after decompression");

    const uint32_t zero_rows[3] = {3, 0, 3};
    write_images(in_dir(f, "zero-rows", bad, sizeof bad), 0x803, zero_rows, 3, 0, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "zero-rows: dimension 1 (rows) at bytes 8-11 is 0; every dimension must be at "
                "least 1");
    const unsigned char zero_labels[8] = {0, 0, 8, 1, 0, 0, 0, 0};
    write_file(in_dir(f, "zero-labels", bad, sizeof bad), zero_labels, 8, false);
    expect_fail(img, bad, 0, TPU_EPARSE, "zero-labels: dimension 0 (count) at bytes 4-7 is 0");
}

static void test_error_dims_too_large(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    const uint32_t huge[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
    write_images(in_dir(f, "huge", bad, sizeof bad), 0x803, huge, 3, 10, false);
    expect_fail(bad, lab, 0, TPU_ERANGE,
                "huge: the dimensions 4294967295x4294967295x4294967295 at bytes 4-15 multiply "
                "to more than 2^64 values; the header is corrupt");
    const uint32_t wide[3] = {1, 65536, 65536};
    write_images(in_dir(f, "wide", bad, sizeof bad), 0x803, wide, 3, 10, false);
    expect_fail(bad, lab, 0, TPU_ERANGE,
                "wide: an image of 65536x65536 (bytes 8-15) has 4294967296 pixels; a tpusim "
                "dataset holds at most 4294967295 features per example");
    /* fits in 64 bits, but not in memory as floats */
    const uint32_t many[3] = {UINT32_MAX, 65535, 65535};
    write_images(in_dir(f, "many", bad, sizeof bad), 0x803, many, 3, 10, false);
    expect_fail(bad, lab, 0, TPU_ERANGE,
                "many: 4294967295 images of 65535x65535 are 18446181123756261375 values; as "
                "32-bit values in memory they need more than this machine can address");
}

static void test_error_truncated_data(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    write_file(in_dir(f, "cut", bad, sizeof bad), tiny_images, 26, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "cut: truncated at byte offset 26: 3 images of 2x3 need 34 bytes, the file has "
                "26");
    write_file(in_dir(f, "cut-labels.gz", bad, sizeof bad), tiny_labels, 10, true);
    expect_fail(img, bad, 0, TPU_EPARSE,
                "cut-labels.gz: truncated at byte offset 10: 3 labels need 11 bytes, the file "
                "has 10 after decompression");

    /* a training set's header over a test set's worth of data */
    const uint32_t dims[3] = {60000, 28, 28};
    write_images(in_dir(f, "images.gz", bad, sizeof bad), 0x803, dims, 3, 7840000, true);
    unsigned char *lbuf = calloc(8 + 60000, 1);
    assert_non_null(lbuf);
    put_be32(lbuf, 0x801);
    put_be32(lbuf + 4, 60000);
    write_file(in_dir(f, "labels.gz", lab, sizeof lab), lbuf, 8 + 60000, true);
    free(lbuf);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "images.gz: truncated at byte offset 7840016: 60000 images of 28x28 need "
                "47040016 bytes, the file has 7840016 after decompression");
}

static void test_error_trailing_bytes(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    unsigned char buf[sizeof tiny_images + 5];
    memcpy(buf, tiny_images, sizeof tiny_images);
    memset(buf + sizeof tiny_images, 9, 5);
    write_file(in_dir(f, "long", bad, sizeof bad), buf, sizeof buf, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "long: has 5 bytes after the end of the data at byte offset 34: 3 images of "
                "2x3 take exactly 34 bytes; the header's dimensions do not match the data");
    unsigned char lbuf[sizeof tiny_labels + 1];
    memcpy(lbuf, tiny_labels, sizeof tiny_labels);
    lbuf[sizeof tiny_labels] = 1;
    write_file(in_dir(f, "long-labels.gz", bad, sizeof bad), lbuf, sizeof lbuf, true);
    expect_fail(img, bad, 0, TPU_EPARSE,
                "long-labels.gz: has 1 bytes after the end of the data at byte offset 11 after "
                "decompression: 3 labels take exactly 11 bytes");
}

static void test_error_corrupt_gzip(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    write_tiny(f, true, img, lab, sizeof img);
    unsigned char good[256], buf[256];
    size_t len = read_raw(img, good, sizeof good);
    char bad[256];
    in_dir(f, "bad.gz", bad, sizeof bad);

    /* the CRC in the trailer (the last 8 bytes: CRC-32, then the length) does not match.
     * zlib checks it when it reaches the end of the stream, after all 34 bytes came out */
    memcpy(buf, good, len);
    buf[len - 8] ^= 0xFF;
    write_file(bad, buf, len, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "bad.gz: the gzip data is corrupt or cut short: decompression failed after byte "
                "offset 34 of the data (zlib: incorrect data check); get the file again");

    /* the first deflate block (after the 10-byte gzip header) has the reserved type 3 */
    memcpy(buf, good, len);
    buf[10] = 0x07;
    write_file(bad, buf, len, false);
    expect_fail(bad, lab, 0, TPU_EPARSE,
                "decompression failed after byte offset 0 of the data (zlib: invalid block "
                "type)");

    /* cut off inside the trailer: all 34 bytes of data come out, the stream's end does not */
    write_file(bad, good, len - 4, false);
    char want[256];
    snprintf(want, sizeof want, "bad.gz: the gzip data is cut short: the file ends after %zu "
             "bytes, inside the compressed stream or its trailer (CRC-32 and length), after "
             "byte offset 34 of the data; get the file again", len - 4);
    expect_fail(bad, lab, 0, TPU_EPARSE, want);
}

/* A bad length at the end of a file larger than the reader's buffers: every byte of the
 * data comes out, then the trailer's check fails the load. */
static void test_error_corrupt_gzip_large(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256];
    const uint32_t dims[3] = {2000, 28, 28}; /* 1568016 bytes */
    write_images(in_dir(f, "images.gz", img, sizeof img), 0x803, dims, 3, 2000 * 784, true);
    unsigned char lbuf[8 + 2000] = {0, 0, 8, 1};
    put_be32(lbuf + 4, 2000);
    write_file(in_dir(f, "labels", lab, sizeof lab), lbuf, sizeof lbuf, false);
    struct tpu_dataset ds;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 0, &ds, NULL), 0);
    tpu_dataset_free(&ds);

    unsigned char *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t len = read_raw(img, buf, 1 << 20);
    buf[len - 4] ^= 0x01; /* the trailer's length, modulo 2^32, is its last 4 bytes */
    write_file(img, buf, len, false);
    free(buf);
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 0, &ds, &d), TPU_EPARSE);
    unsigned long long offset = 0;
    const char *p = strstr(d.msg, "decompression failed after byte offset ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "decompression failed after byte offset %llu", &offset), 1);
    if (offset != 1568016)
        print_error("%s\n", d.msg);
    assert_int_equal(offset, 1568016);
    assert_non_null(strstr(d.msg, "of the data (zlib: incorrect length check)"));
}

/* The trailer of a file larger than the reader's buffers cut off: the deflate data ends
 * exactly where the IDX data does, so only the missing trailer tells (zlib's gzread()
 * accepted this file). With a flipped bit as well, the load must not hand over the changed
 * pixels. Bytes after the last member fail; a second member is data. */
static void test_error_gzip_trailer_and_members(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256], want[512];
    const uint32_t dims[3] = {3000, 28, 28}; /* 2352016 bytes, more than one buffer */
    write_images(in_dir(f, "images.gz", img, sizeof img), 0x803, dims, 3, 3000 * 784, true);
    unsigned char lbuf[8 + 3000] = {0, 0, 8, 1};
    put_be32(lbuf + 4, 3000);
    write_file(in_dir(f, "labels", lab, sizeof lab), lbuf, sizeof lbuf, false);
    in_dir(f, "bad.gz", bad, sizeof bad);
    unsigned char *buf = malloc(4 << 20);
    assert_non_null(buf);
    size_t len = read_raw(img, buf, 4 << 20);

    /* no trailer at all */
    write_file(bad, buf, len - 8, false);
    snprintf(want, sizeof want, "bad.gz: the gzip data is cut short: the file ends after %zu "
             "bytes, inside the compressed stream or its trailer (CRC-32 and length), after "
             "byte offset 2352016 of the data; get the file again", len - 8);
    expect_fail(bad, lab, 0, TPU_EPARSE, want);

    /* a flipped bit in the deflate data and no trailer */
    buf[len / 2] ^= 0x10;
    write_file(bad, buf, len - 8, false);
    struct tpu_dataset ds;
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_load_idx(bad, lab, 0, &ds, &d), TPU_EPARSE);
    assert_non_null(strstr(d.msg, "bad.gz: the gzip data is"));
    buf[len / 2] ^= 0x10;

    /* garbage after the trailer */
    memcpy(buf + len, "garbage!", 8);
    write_file(bad, buf, len + 8, false);
    snprintf(want, sizeof want, "bad.gz: has 8 bytes after the end of the gzip data (at byte "
             "offset %zu of the file) that are not another gzip member; the file is damaged "
             "or was appended to: get it again", len);
    expect_fail(bad, lab, 0, TPU_EPARSE, want);
    /* one stray byte too */
    buf[len] = 0;
    write_file(bad, buf, len + 1, false);
    expect_fail(bad, lab, 0, TPU_EPARSE, "bad.gz: has 1 bytes after the end of the gzip data");

    /* two members (cat a.gz b.gz) are one file: the label file split in two */
    char a_gz[256], b_gz[256];
    write_file(in_dir(f, "a.gz", a_gz, sizeof a_gz), lbuf, 1000, true);
    write_file(in_dir(f, "b.gz", b_gz, sizeof b_gz), lbuf + 1000, sizeof lbuf - 1000, true);
    size_t la = read_raw(a_gz, buf, 4 << 20);
    size_t lb = read_raw(b_gz, buf + la, (4 << 20) - la);
    write_file(bad, buf, la + lb, false);
    assert_int_equal(tpu_dataset_load_idx(img, bad, 0, &ds, &d), 0);
    assert_int_equal(ds.n_examples, 3000);
    tpu_dataset_free(&ds);
    free(buf);
}

static void test_error_count_mismatch(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    const unsigned char two[10] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 1};
    write_file(in_dir(f, "two-labels", bad, sizeof bad), two, sizeof two, false);
    char want[600];
    snprintf(want, sizeof want, "%s holds 3 images but %s holds 2 labels; the two files must "
             "describe the same examples", img, bad);
    expect_fail(img, bad, 0, TPU_ESHAPE, want);
}

static void test_error_label_range(void **state)
{
    struct fixture *f = *state;
    char img[256], lab[256], bad[256];
    write_tiny(f, false, img, lab, sizeof img);
    const unsigned char labels[11] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 12, 3};
    write_file(in_dir(f, "labels-12", bad, sizeof bad), labels, sizeof labels, false);
    expect_fail(img, bad, 10, TPU_ERANGE,
                "labels-12: the label at byte offset 9 (example 1) is 12; with 10 classes a "
                "label must be 0 to 9");
    /* the tiny labels go up to 4: 4 classes are too few, 5 enough */
    expect_fail(img, lab, 4, TPU_ERANGE,
                "the label at byte offset 8 (example 0) is 4; with 4 classes a label must be 0 "
                "to 3");
    struct tpu_dataset ds;
    assert_int_equal(tpu_dataset_load_idx(img, lab, 5, &ds, NULL), 0);
    assert_int_equal(ds.n_classes, 5);
    tpu_dataset_free(&ds);
}

static void test_error_null_arguments(void **state)
{
    (void)state;
    struct tpu_dataset ds;
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_load_idx(NULL, "x", 0, &ds, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "must not be NULL"));
    assert_int_equal(tpu_dataset_load_idx("x", "y", 0, NULL, NULL), TPU_EINVAL);
    assert_int_equal(tpu_dataset_fashion_mnist(NULL, true, NULL, &d), TPU_EINVAL);
}

/* ---- Fashion-MNIST --------------------------------------------------------------------- */

/* Sum of the bytes behind x (x * 255 is within rounding of the byte). */
static uint64_t byte_sum(const float *x, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += (uint64_t)lroundf(x[i] * 255.0f);
    return s;
}

/* The Debian package's files. Expected values from tests/data/idx/reference.py (Python's
 * gzip module over the same files): train starts with labels 9 0 0 3 0 2 7 2 5 5, image 0's
 * bytes sum to 76247, all images' to 3431114169, the labels to 270000; t10k starts with
 * 9 2 1 1 6 1 4 6 5 7, image 0 sums to 33456, all images to 573469082, labels to 45000. */
static void test_fashion_mnist_installed(void **state)
{
    (void)state;
    struct stat st;
    struct tpu_diag d;
    struct tpu_dataset ds;
    if (stat(TPU_DATASET_FASHION_MNIST_DIR, &st) != 0) {
        /* not installed: at least the message must say how to install it */
        assert_int_equal(tpu_dataset_fashion_mnist(NULL, true, &ds, &d), TPU_ENOTFOUND);
        assert_non_null(strstr(d.msg, "Fashion-MNIST is not installed at "
                                      "/usr/share/datasets/fashion-mnist (no such directory): "
                                      "install it with 'apt-get install dataset-fashion-mnist' "
                                      "(as root), or pass --data DIR holding "
                                      "train-images-idx3-ubyte.gz, "));
        skip();
    }
    tpu_diag_clear(&d);
    int rc = tpu_dataset_fashion_mnist(NULL, true, &ds, &d);
    if (rc)
        print_error("%s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(ds.n_examples, 60000);
    assert_int_equal(ds.n_features, 784);
    assert_int_equal(ds.image_rows, 28);
    assert_int_equal(ds.image_cols, 28);
    assert_int_equal(ds.n_classes, 10);
    assert_string_equal(ds.origin,
                        "Fashion-MNIST train (60000 examples) from /usr/share/datasets/"
                        "fashion-mnist");
    const int32_t first_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    for (int i = 0; i < 10; i++)
        assert_int_equal(ds.y[i], first_train[i]);
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(ds.y[0]), "Ankle boot");
    assert_int_equal(byte_sum(ds.x, 784), 76247);
    assert_int_equal(byte_sum(ds.x, (size_t)60000 * 784), UINT64_C(3431114169));
    int64_t label_sum = 0;
    for (uint32_t i = 0; i < ds.n_examples; i++)
        label_sum += ds.y[i];
    assert_int_equal(label_sum, 270000);
    tpu_dataset_free(&ds);

    assert_int_equal(tpu_dataset_fashion_mnist(TPU_DATASET_FASHION_MNIST_DIR, false, &ds, &d), 0);
    assert_int_equal(ds.n_examples, 10000);
    assert_int_equal(ds.n_features, 784);
    assert_int_equal(ds.n_classes, 10);
    const int32_t first_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    for (int i = 0; i < 10; i++)
        assert_int_equal(ds.y[i], first_test[i]);
    assert_int_equal(byte_sum(ds.x, 784), 33456);
    assert_int_equal(byte_sum(ds.x, (size_t)10000 * 784), UINT64_C(573469082));
    assert_non_null(strstr(ds.origin, "Fashion-MNIST test (10000 examples) from "));
    tpu_dataset_free(&ds);
}

static void test_fashion_mnist_missing(void **state)
{
    struct fixture *f = *state;
    struct tpu_dataset ds, before;
    memset(&ds, 0x5A, sizeof ds);
    memcpy(&before, &ds, sizeof ds);
    struct tpu_diag d;
    char want[1024];

    /* an empty directory */
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, true, &ds, &d), TPU_ENOTFOUND);
    assert_int_equal(d.code, TPU_ENOTFOUND);
    snprintf(want, sizeof want,
             "Fashion-MNIST is not in %s (no train-images-idx3-ubyte.gz and no "
             "train-labels-idx1-ubyte.gz): pass --data DIR holding train-images-idx3-ubyte.gz, "
             "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
             "t10k-labels-idx1-ubyte.gz (or the same names without .gz), or install it with "
             "'apt-get install dataset-fashion-mnist' (as root) and leave out --data to read "
             "/usr/share/datasets/fashion-mnist",
             f->dir);
    assert_string_equal(d.msg, want);
    assert_memory_equal(&ds, &before, sizeof ds);

    /* only the labels are missing */
    char path[256];
    write_file(in_dir(f, "t10k-images-idx3-ubyte.gz", path, sizeof path), tiny_images,
               sizeof tiny_images, true);
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, false, &ds, &d), TPU_ENOTFOUND);
    snprintf(want, sizeof want, "Fashion-MNIST is not in %s (no t10k-labels-idx1-ubyte.gz): ",
             f->dir);
    assert_non_null(strstr(d.msg, want));

    /* a directory that does not exist */
    in_dir(f, "absent", path, sizeof path);
    assert_int_equal(tpu_dataset_fashion_mnist(path, true, &ds, &d), TPU_ENOTFOUND);
    snprintf(want, sizeof want, "Fashion-MNIST is not in %s (no such directory): ", path);
    assert_non_null(strstr(d.msg, want));
    assert_memory_equal(&ds, &before, sizeof ds);
}

/* A --data directory may hold the files uncompressed; images that are not 28x28 are rejected
 * from the header (they overflowed the model's 784-input batches, or trained on wrong data);
 * labels above 9 are rejected. */
static void test_fashion_mnist_from_dir(void **state)
{
    struct fixture *f = *state;
    char path[256], want[512];
    write_file(in_dir(f, "t10k-images-idx3-ubyte", path, sizeof path), tiny_images,
               sizeof tiny_images, false);
    write_file(in_dir(f, "t10k-labels-idx1-ubyte", path, sizeof path), tiny_labels,
               sizeof tiny_labels, false);
    struct tpu_dataset ds, before;
    struct tpu_diag d;
    memset(&ds, 0xA5, sizeof ds);
    memcpy(&before, &ds, sizeof ds);
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, false, &ds, &d), TPU_ESHAPE);
    snprintf(want, sizeof want, "%s/t10k-images-idx3-ubyte: holds images of 2x3 pixels (bytes "
             "8-15 of the header), but 28x28 images are needed (784 input features per "
             "example); Fashion-MNIST's images are 28x28: is this directory Fashion-MNIST's "
             "(or MNIST's)?", f->dir);
    assert_string_equal(d.msg, want);
    assert_memory_equal(&ds, &before, sizeof ds);
    /* larger images too (29x28 would overrun each 784-float row) */
    const uint32_t big[3] = {3, 29, 28};
    write_images(in_dir(f, "t10k-images-idx3-ubyte", path, sizeof path), 0x803, big, 3,
                 3 * 29 * 28, false);
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, false, &ds, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "t10k-images-idx3-ubyte: holds images of 29x28 pixels"));

    const uint32_t dims[3] = {3, 28, 28};
    write_images(in_dir(f, "t10k-images-idx3-ubyte", path, sizeof path), 0x803, dims, 3,
                 3 * 784, false);
    write_file(in_dir(f, "t10k-labels-idx1-ubyte", path, sizeof path), tiny_labels,
               sizeof tiny_labels, false);
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, false, &ds, &d), 0);
    assert_int_equal(ds.n_features, 784);
    assert_int_equal(ds.n_examples, 3);
    assert_int_equal(ds.n_classes, 10);
    snprintf(want, sizeof want, "Fashion-MNIST test (3 examples) from %s", f->dir);
    assert_string_equal(ds.origin, want);
    tpu_dataset_free(&ds);

    const unsigned char labels[11] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 10};
    write_file(in_dir(f, "t10k-labels-idx1-ubyte.gz", path, sizeof path), labels,
               sizeof labels, true);
    assert_int_equal(tpu_dataset_fashion_mnist(f->dir, false, &ds, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "t10k-labels-idx1-ubyte.gz: the label at byte offset 10 "
                                  "(example 2) is 10; with 10 classes a label must be 0 to 9"));
}

/* A directory name too long for the origin string ends in "...", visibly cut. */
static void test_fashion_mnist_long_dir(void **state)
{
    struct fixture *f = *state;
    char dir[700], path[800];
    int len = snprintf(dir, sizeof dir, "%s/", f->dir);
    memset(dir + len, 'a', 250);
    dir[len + 250] = '\0';
    assert_int_equal(mkdir(dir, 0700), 0);
    len += 250;
    dir[len++] = '/';
    memset(dir + len, 'b', 250);
    dir[len + 250] = '\0';
    assert_int_equal(mkdir(dir, 0700), 0);
    const uint32_t dims[3] = {3, 28, 28};
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    write_images(path, 0x803, dims, 3, 3 * 784, false);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", dir);
    write_file(path, tiny_labels, sizeof tiny_labels, false);
    struct tpu_dataset ds;
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_fashion_mnist(dir, false, &ds, &d), 0);
    size_t n = strlen(ds.origin);
    assert_true(n < sizeof ds.origin);
    assert_string_equal(ds.origin + n - 3, "...");
    assert_memory_equal(ds.origin, "Fashion-MNIST test (3 examples) from /tmp/", 42);
    tpu_dataset_free(&ds);
    /* remove_tree goes one level deep: take the inner directory away here */
    unlink(path);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    unlink(path);
    rmdir(dir);
}

static void test_fashion_mnist_class_names(void **state)
{
    (void)state;
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(0), "T-shirt/top");
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(6), "Shirt");
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(9), "Ankle boot");
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(10), "?");
    assert_string_equal(tpu_dataset_fashion_mnist_class_name(-1), "?");
}

/* ---- shuffling ------------------------------------------------------------------------- */

/* The documented generator, written out again from dataset.h's description. */
static uint64_t ref_splitmix64(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15u;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static void ref_shuffle(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch)
{
    uint64_t e = epoch;
    uint64_t s = seed ^ ref_splitmix64(&e);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; n > 1 && i >= 1; i--) {
        uint64_t bound = (uint64_t)i + 1;
        uint64_t two64_mod_bound = (UINT64_MAX - bound + 1) % bound; /* 2^64 mod bound */
        uint64_t r = ref_splitmix64(&s);
        while (two64_mod_bound && r >= 0 - two64_mod_bound) /* r >= 2^64 - (2^64 mod b) */
            r = ref_splitmix64(&s);
        uint32_t j = (uint32_t)(r % bound);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void assert_permutation(const uint32_t *perm, uint32_t n)
{
    unsigned char *seen = calloc(n, 1);
    assert_non_null(seen);
    for (uint32_t i = 0; i < n; i++) {
        assert_true(perm[i] < n);
        assert_int_equal(seen[perm[i]], 0);
        seen[perm[i]] = 1;
    }
    free(seen);
}

static void test_shuffle(void **state)
{
    (void)state;
    const uint32_t n = 60000;
    uint32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);

    memset(a, 0xFF, n * sizeof *a); /* the previous contents do not matter */
    assert_int_equal(tpu_dataset_shuffle(a, n, 42, 0), 0);
    assert_permutation(a, n);
    /* pinned from tests/data/idx/reference.py (Python, from the documented generator) */
    const uint32_t first[10] = {31861, 49494, 43666, 53784, 27625,
                                21639, 33668, 34675, 16307, 3981};
    for (int i = 0; i < 10; i++)
        assert_int_equal(a[i], first[i]);
    ref_shuffle(b, n, 42, 0);
    assert_memory_equal(a, b, n * sizeof *a);

    /* the same (seed, epoch) gives the same order */
    assert_int_equal(tpu_dataset_shuffle(b, n, 42, 0), 0);
    assert_memory_equal(a, b, n * sizeof *a);

    /* another epoch: another order (pinned the same way), still a permutation */
    assert_int_equal(tpu_dataset_shuffle(b, n, 42, 1), 0);
    assert_permutation(b, n);
    const uint32_t first_epoch1[10] = {19391, 34023, 28734, 14654, 48016,
                                       10398, 36121, 46160, 31971, 53050};
    for (int i = 0; i < 10; i++)
        assert_int_equal(b[i], first_epoch1[i]);
    uint32_t same = 0;
    for (uint32_t i = 0; i < n; i++)
        same += a[i] == b[i];
    assert_true(same < 10); /* about 1 fixed match is expected by chance */

    /* another seed, same epoch: another order */
    assert_int_equal(tpu_dataset_shuffle(b, n, 43, 0), 0);
    assert_permutation(b, n);
    assert_true(memcmp(a, b, n * sizeof *a) != 0);

    /* small n against the reference, across seeds and epochs */
    for (uint32_t m = 0; m <= 17; m++)
        for (uint64_t e = 0; e < 4; e++) {
            uint32_t p[17], q[17];
            assert_int_equal(tpu_dataset_shuffle(p, m, 1000 + m, e), 0);
            ref_shuffle(q, m, 1000 + m, e);
            assert_memory_equal(p, q, m * sizeof *p);
            assert_permutation(p, m);
        }
    uint32_t ten[10];
    assert_int_equal(tpu_dataset_shuffle(ten, 10, 42, 0), 0);
    const uint32_t ten_want[10] = {9, 4, 2, 8, 1, 3, 0, 6, 5, 7};
    assert_memory_equal(ten, ten_want, sizeof ten);

    assert_int_equal(tpu_dataset_shuffle(NULL, 5, 1, 1), TPU_EINVAL);
    assert_int_equal(tpu_dataset_shuffle(NULL, 0, 1, 1), 0);
    free(a);
    free(b);
}

/* ---- split and gather ------------------------------------------------------------------ */

/* n examples of 3 features; example i has features 10i, 10i+1, 10i+2 and label i % 4. The
 * arrays are malloc'ed so that tpu_dataset_free() releases them, as for a loaded set. */
static void make_dataset(struct tpu_dataset *ds, uint32_t n)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->n_features = 3;
    ds->image_rows = 1;
    ds->image_cols = 3;
    ds->n_classes = 4;
    ds->x = malloc((size_t)n * 3 * sizeof *ds->x);
    ds->y = malloc((size_t)n * sizeof *ds->y);
    assert_non_null(ds->x);
    assert_non_null(ds->y);
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < 3; k++)
            ds->x[i * 3 + k] = (float)(10 * i + k);
        ds->y[i] = (int32_t)(i % 4);
    }
    snprintf(ds->origin, sizeof ds->origin, "synthetic");
}

static void test_split(void **state)
{
    (void)state;
    struct tpu_dataset ds, tr, va;
    make_dataset(&ds, 10);
    struct tpu_diag d;
    assert_int_equal(tpu_dataset_split(&ds, 3, 7, &tr, &va, &d), 0);
    /* validation = the first 3 of shuffle(10, seed 7, TPU_DATASET_SPLIT_EPOCH), in their
     * original order: examples 3, 7, 9 (tests/data/idx/reference.py) */
    assert_int_equal(va.n_examples, 3);
    assert_int_equal(tr.n_examples, 7);
    const uint32_t val_ids[3] = {3, 7, 9};
    const uint32_t train_ids[7] = {0, 1, 2, 4, 5, 6, 8};
    for (uint32_t k = 0; k < 3; k++) {
        assert_true(va.x[k * 3 + 2] == (float)(10 * val_ids[k] + 2));
        assert_int_equal(va.y[k], val_ids[k] % 4);
    }
    for (uint32_t k = 0; k < 7; k++) {
        assert_true(tr.x[k * 3] == (float)(10 * train_ids[k]));
        assert_int_equal(tr.y[k], train_ids[k] % 4);
    }
    assert_int_equal(va.n_features, 3);
    assert_int_equal(tr.n_classes, 4);
    assert_string_equal(va.origin, "synthetic, 3 validation examples (seed 7)");
    assert_string_equal(tr.origin, "synthetic, minus 3 validation examples (seed 7)");
    /* the same as the documented rule computed through the public shuffle */
    uint32_t perm[10];
    tpu_dataset_shuffle(perm, 10, 7, TPU_DATASET_SPLIT_EPOCH);
    for (int i = 0; i < 3; i++)
        assert_true(perm[i] == 3 || perm[i] == 7 || perm[i] == 9);
    tpu_dataset_free(&tr);
    tpu_dataset_free(&va);

    /* impossible sizes */
    memset(&tr, 0x11, sizeof tr);
    struct tpu_dataset before = tr;
    assert_int_equal(tpu_dataset_split(&ds, 10, 7, &tr, &va, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "a validation split of 10 examples from 10 is not possible: "
                                  "it must take at least 1 example and leave at least 1 for "
                                  "training (1 to 9)"));
    assert_int_equal(tpu_dataset_split(&ds, 0, 7, &tr, &va, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "a validation split of 0 examples from 10"));
    assert_memory_equal(&tr, &before, sizeof tr);
    tpu_dataset_free(&ds);
}

static void test_gather(void **state)
{
    (void)state;
    struct tpu_dataset ds;
    make_dataset(&ds, 5);
    float x[4 * 3];
    int32_t y[4];

    /* identity order, a batch running 2 rows past the end */
    memset(x, 0x7F, sizeof x);
    assert_int_equal(tpu_dataset_gather(&ds, NULL, 3, 4, x, y), 2);
    const float want_x[12] = {30, 31, 32, 40, 41, 42, 0, 0, 0, 0, 0, 0};
    const int32_t want_y[4] = {3, 0, -1, -1};
    assert_memory_equal(x, want_x, sizeof x);
    assert_memory_equal(y, want_y, sizeof y);

    /* through a permutation */
    const uint32_t perm[5] = {4, 2, 0, 1, 3};
    assert_int_equal(tpu_dataset_gather(&ds, perm, 0, 3, x, y), 3);
    const float want_px[9] = {40, 41, 42, 20, 21, 22, 0, 1, 2};
    const int32_t want_py[3] = {0, 2, 0};
    assert_memory_equal(x, want_px, sizeof want_px);
    assert_memory_equal(y, want_py, sizeof want_py);
    assert_int_equal(tpu_dataset_gather(&ds, perm, 4, 2, x, y), 1);
    assert_true(x[0] == 30.0f && x[3] == 0.0f);
    assert_int_equal(y[0], 3);
    assert_int_equal(y[1], -1);

    /* entirely past the end: all padding; labels only; features only */
    memset(x, 0x7F, sizeof x);
    assert_int_equal(tpu_dataset_gather(&ds, perm, 5, 2, x, y), 0);
    for (int i = 0; i < 6; i++)
        assert_true(x[i] == 0.0f);
    assert_int_equal(y[0], -1);
    assert_int_equal(y[1], -1);
    assert_int_equal(tpu_dataset_gather(&ds, NULL, UINT64_MAX, 1, x, y), 0);
    assert_int_equal(tpu_dataset_gather(&ds, NULL, 1, 2, NULL, y), 2);
    assert_int_equal(y[0], 1);
    assert_int_equal(y[1], 2);
    assert_int_equal(tpu_dataset_gather(&ds, NULL, 0, 1, x, NULL), 1);
    assert_true(x[2] == 2.0f);
    tpu_dataset_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_plain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_detects_gzip_by_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_pixel_scale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_large_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_missing_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_empty_and_short_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_wrong_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_data_type_and_dims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_dims_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_truncated_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_trailing_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_corrupt_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_corrupt_gzip_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_gzip_trailer_and_members, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_count_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_label_range, setup, teardown),
        cmocka_unit_test(test_error_null_arguments),
        cmocka_unit_test(test_fashion_mnist_installed),
        cmocka_unit_test_setup_teardown(test_fashion_mnist_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fashion_mnist_from_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fashion_mnist_long_dir, setup, teardown),
        cmocka_unit_test(test_fashion_mnist_class_names),
        cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_gather),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
