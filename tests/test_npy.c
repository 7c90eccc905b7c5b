/* NumPy .npy reading and writing: round trips, the header variants NumPy writes, and every
 * way a file can be wrong. Files are real temporary files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

struct fixture {
    char dir[64];
    char path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/tpusim-npy-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/a.npy", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Writes a raw .npy: version 1 header from `dict`, then `data_bytes` bytes of data. */
static void write_raw(const char *path, unsigned major, const char *dict, size_t data_bytes)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    size_t hlen = strlen(dict) + 1;
    fwrite("\x93NUMPY", 1, 6, fp);
    fputc((int)major, fp);
    fputc(0, fp);
    fputc((int)(hlen & 0xff), fp);
    fputc((int)(hlen >> 8), fp);
    if (major >= 2) {
        fputc(0, fp);
        fputc(0, fp);
    }
    fwrite(dict, 1, strlen(dict), fp);
    fputc('\n', fp);
    for (size_t i = 0; i < data_bytes; i++)
        fputc((int)i, fp);
    fclose(fp);
}

static void test_round_trip(void **state)
{
    struct fixture *f = *state;
    float x[6] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-30f, -7.0f};
    assert_int_equal(tpu__npy_write(f->path, TPU__NPY_F32, 2, 3, x, NULL), 0);
    /* the header is padded so data starts at a multiple of 64 */
    FILE *fp = fopen(f->path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    assert_int_equal(ftell(fp), 128 + 24);
    fclose(fp);
    struct tpu__npy a = {0};
    assert_int_equal(tpu__npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU__NPY_F32);
    assert_int_equal(a.rows, 2);
    assert_int_equal(a.cols, 3);
    assert_memory_equal(a.data, x, sizeof x);
    tpu__npy_free(&a);
    assert_null(a.data);

    int8_t y[4] = {-128, 127, 0, -1};
    assert_int_equal(tpu__npy_write(f->path, TPU__NPY_I8, 4, 1, y, NULL), 0);
    assert_int_equal(tpu__npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU__NPY_I8);
    assert_memory_equal(a.data, y, sizeof y);
    tpu__npy_free(&a);
    tpu__npy_free(NULL);
}

static void test_versions_and_spacing(void **state)
{
    struct fixture *f = *state;
    struct tpu__npy a = {0};
    /* NumPy 2 writes format 2 for big headers; the dict may be spaced differently */
    write_raw(f->path, 2, "{'descr':'<i4','fortran_order':False,'shape':(2,2)}", 16);
    assert_int_equal(tpu__npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU__NPY_I32);
    assert_int_equal(a.rows, 2);
    tpu__npy_free(&a);
    write_raw(f->path, 1, "{'descr': '<i1', 'fortran_order': False, 'shape': (3, 1), }", 3);
    assert_int_equal(tpu__npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU__NPY_I8);
    tpu__npy_free(&a);
}

static void expect_error(const char *path, int code, const char *needle)
{
    struct tpu__npy a = {.rows = 77};
    struct tpu_diag d = {0};
    assert_int_equal(tpu__npy_read(path, &a, &d), code);
    if (!strstr(d.msg, needle))
        fail_msg("message '%s' lacks '%s'", d.msg, needle);
    assert_int_equal(a.rows, 77); /* untouched */
    assert_null(a.data);
}

static void test_errors(void **state)
{
    struct fixture *f = *state;
    expect_error("/nonexistent/x.npy", TPU_EIO, "cannot open '/nonexistent/x.npy'");

    FILE *fp = fopen(f->path, "wb");
    fputs("hello, this is text", fp);
    fclose(fp);
    expect_error(f->path, TPU_EPARSE, "is not a NumPy .npy file");

    write_raw(f->path, 9, "{}", 0);
    expect_error(f->path, TPU_EPARSE, "format version 9");

    write_raw(f->path, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16);
    expect_error(f->path, TPU_EPARSE, "holds dtype '>f4'");

    write_raw(f->path, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", 32);
    expect_error(f->path, TPU_EPARSE, "holds dtype '<f8'");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
    expect_error(f->path, TPU_EPARSE, "Fortran (column-major) order");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16);
    expect_error(f->path, TPU_ESHAPE, "has 1 dimension; tpusim needs a 2-D matrix");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }",
              32);
    expect_error(f->path, TPU_ESHAPE, "has 3 dimensions");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }", 0);
    expect_error(f->path, TPU_ESHAPE, "both dimensions must be at least 1");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 15);
    expect_error(f->path, TPU_EPARSE, "is truncated: shape (2, 2) of float32 needs 16 data "
                                      "bytes");

    write_raw(f->path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 17);
    expect_error(f->path, TPU_EPARSE, "has bytes after the data");

    write_raw(f->path, 1, "{'fortran_order': False, 'shape': (2, 2), }", 16);
    expect_error(f->path, TPU_EPARSE, "no 'descr' entry");
}

static void test_write_error_keeps_nothing(void **state)
{
    (void)state;
    float x = 1;
    struct tpu_diag d = {0};
    assert_int_equal(tpu__npy_write("/nonexistent/dir/y.npy", TPU__NPY_F32, 1, 1, &x, &d),
                     TPU_EIO);
    assert_non_null(strstr(d.msg, "cannot create '/nonexistent/dir/y.npy.tmp"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_versions_and_spacing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_write_error_keeps_nothing),
    };
    return cmocka_run_group_tests_name("npy", tests, NULL, NULL);
}
