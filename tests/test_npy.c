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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tpusim/npy.h"
#include "util.h"

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
    assert_int_equal(tpu_npy_write(f->path, TPU_F32, 2, 3, x, NULL), 0);
    /* the header is padded so data starts at a multiple of 64 */
    FILE *fp = fopen(f->path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    assert_int_equal(ftell(fp), 128 + 24);
    fclose(fp);
    struct tpu_npy a = {0};
    assert_int_equal(tpu_npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU_F32);
    assert_int_equal(a.rows, 2);
    assert_int_equal(a.cols, 3);
    assert_memory_equal(a.data, x, sizeof x);
    tpu_npy_free(&a);
    assert_null(a.data);

    int8_t y[4] = {-128, 127, 0, -1};
    assert_int_equal(tpu_npy_write(f->path, TPU_INT8, 4, 1, y, NULL), 0);
    assert_int_equal(tpu_npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU_INT8);
    assert_memory_equal(a.data, y, sizeof y);
    tpu_npy_free(&a);
    tpu_npy_free(NULL);
}

static void test_versions_and_spacing(void **state)
{
    struct fixture *f = *state;
    struct tpu_npy a = {0};
    /* NumPy 2 writes format 2 for big headers; the dict may be spaced differently */
    write_raw(f->path, 2, "{'descr':'<i4','fortran_order':False,'shape':(2,2)}", 16);
    assert_int_equal(tpu_npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU_INT32);
    assert_int_equal(a.rows, 2);
    tpu_npy_free(&a);
    write_raw(f->path, 1, "{'descr': '<i1', 'fortran_order': False, 'shape': (3, 1), }", 3);
    assert_int_equal(tpu_npy_read(f->path, &a, NULL), 0);
    assert_int_equal(a.dtype, TPU_INT8);
    tpu_npy_free(&a);
}

static void expect_error(const char *path, int code, const char *needle)
{
    struct tpu_npy a = {.rows = 77};
    struct tpu_diag d = {0};
    assert_int_equal(tpu_npy_read(path, &a, &d), code);
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

    fp = fopen(f->path, "wb");
    fclose(fp);
    expect_error(f->path, TPU_EPARSE, "a.npy: is empty; a NumPy .npy file starts with \\x93NUMPY");

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
    assert_int_equal(tpu_npy_write("/nonexistent/dir/y.npy", TPU_F32, 1, 1, &x, &d),
                     TPU_EIO);
    assert_non_null(strstr(d.msg, "cannot create '/nonexistent/dir/y.npy.tmp"));
}


/* A header that declares a huge shape in a file of a few bytes fails on the file's size,
 * before anything is allocated for the data (it asked for 8 TiB before). */
static void test_huge_shape_checked_against_file(void **state)
{
    struct fixture *f = *state;
    write_raw(f->path, 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 2097152), }", 16);
    expect_error(f->path, TPU_EPARSE, "is truncated: shape (1048576, 2097152) of float32 needs "
                                      "8796093022208 data bytes after the 82-byte header, the "
                                      "file has 16");
    /* rows x cols x 4 wraps around 2^64 */
    write_raw(f->path, 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
              16);
    expect_error(f->path, TPU_ESHAPE, "shape (4294967296, 4294967296) of float32 is more than "
                                      "2^64 bytes");
    /* a header length beyond the file */
    FILE *fp = fopen(f->path, "wb");
    fwrite("\x93NUMPY\x01\x00\xff\x7f{'descr'", 1, 18, fp);
    fclose(fp);
    expect_error(f->path, TPU_EPARSE, "the .npy header is truncated: it claims 32767 bytes");
}

static void test_directory_and_odd_names(void **state)
{
    struct fixture *f = *state;
    char msg[160];
    snprintf(msg, sizeof msg, "'%s' is a directory; give a NumPy .npy file", f->dir);
    expect_error(f->dir, TPU_EIO, msg);
    /* a name with a newline and a byte that is not UTF-8 is quoted, not echoed raw */
    expect_error("/nonexistent/a\nb\xff.npy", TPU_EIO,
                 "cannot open '/nonexistent/a\\x0Ab\\xFF.npy': No such file");
    write_raw(f->path, 1, "{'descr': '<f\n\x1b', 'fortran_order': False, 'shape': (2, 2), }",
              16);
    expect_error(f->path, TPU_EPARSE, "holds dtype '<f\\x0A\\x1B'");
}

/* The atomic writer: a regular file is replaced by rename (keeping its mode); a symbolic link
 * stays a link and its target gets the data; a device or a FIFO is written through. */
static void test_write_through_links_and_devices(void **state)
{
    struct fixture *f = *state;
    float x[2] = {1.0f, 2.0f};
    struct tpu_npy a = {0};
    struct stat st;
    char target[160], link[160], fifo[160];
    snprintf(target, sizeof target, "%s/target.npy", f->dir);
    snprintf(link, sizeof link, "%s/link.npy", f->dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", f->dir);

    /* regular file: replaced, mode kept */
    assert_int_equal(tpu_npy_write(target, TPU_F32, 1, 2, x, NULL), 0);
    assert_int_equal(chmod(target, 0640), 0);
    ino_t before = (stat(target, &st), st.st_ino);
    assert_int_equal(tpu_npy_write(target, TPU_F32, 2, 1, x, NULL), 0);
    assert_int_equal(stat(target, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0640);
    assert_int_not_equal(st.st_ino, before); /* a new file, renamed into place */

    /* symbolic link (relative): the link stays, the target is replaced */
    assert_int_equal(symlink("target.npy", link), 0);
    x[0] = 42.0f;
    assert_int_equal(tpu_npy_write(link, TPU_F32, 1, 2, x, NULL), 0);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(tpu_npy_read(target, &a, NULL), 0);
    assert_int_equal(a.rows, 1);
    assert_true(((float *)a.data)[0] == 42.0f);
    tpu_npy_free(&a);
    unlink(link);
    unlink(target);

    /* a dangling link: the file is created where it points */
    assert_int_equal(symlink("target.npy", link), 0);
    assert_int_equal(tpu_npy_write(link, TPU_F32, 1, 2, x, NULL), 0);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(stat(target, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    unlink(link);
    unlink(target);

    /* a device: written through, still a device */
    assert_int_equal(tpu_npy_write("/dev/null", TPU_F32, 1, 2, x, NULL), 0);
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));

    /* a FIFO: written through, a reader gets the whole file */
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        _exit(tpu_npy_write(fifo, TPU_F32, 1, 2, x, NULL) == 0 ? 0 : 1);
    }
    FILE *fp = fopen(fifo, "rb");
    assert_non_null(fp);
    unsigned char buf[256];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(n, 128 + 8);
    assert_memory_equal(buf + 128, x, 8);
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(fifo);

    /* a directory is refused with a sentence */
    struct tpu_diag d = {0};
    assert_int_equal(tpu_npy_write(f->dir, TPU_F32, 1, 2, x, &d), TPU_EIO);
    assert_non_null(strstr(d.msg, "it is a directory; give a file name"));
}

/* tpu__quote: what stays, what is escaped, and where a long string is cut. */
static void test_quote(void **state)
{
    (void)state;
    char b[TPU__QUOTE_BYTES];
    assert_string_equal(tpu__quote("tpu-v4_x.json", b, sizeof b), "tpu-v4_x.json");
    assert_string_equal(tpu__quote("a\nb\tc\x1b\x7f", b, sizeof b), "a\\x0Ab\\x09c\\x1B\\x7F");
    assert_string_equal(tpu__quote("caf\xc3\xa9 \xe2\x9c\x93", b, sizeof b),
                        "caf\xc3\xa9 \xe2\x9c\x93"); /* well-formed UTF-8 stays */
    assert_string_equal(tpu__quote("\xff\xc3(\xc2\x85\xed\xa0\x80", b, sizeof b),
                        "\\xFF\\xC3(\\xC2\\x85\\xED\\xA0\\x80"); /* invalid, C1, surrogate */
    assert_string_equal(tpu__quote("a\\b", b, sizeof b), "a\\b"); /* stays */
    assert_string_equal(tpu__quote_n("a\0b", 3, b, sizeof b), "a\\x00b");
    assert_string_equal(tpu__quote(NULL, b, sizeof b), "(null)");
    char small[10];
    assert_string_equal(tpu__quote("abcdefghi", small, sizeof small), "abcdefghi");
    assert_string_equal(tpu__quote("abcdefghij", small, sizeof small), "abcdef...");
    assert_string_equal(tpu__quote("abcde\n\n", small, sizeof small), "abcde...");
    assert_string_equal(tpu__quote("ab\xe2\x9c\x93\xe2\x9c\x93\xe2\x9c\x93", small, sizeof small),
                        "ab\xe2\x9c\x93...");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_versions_and_spacing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_write_error_keeps_nothing),
        cmocka_unit_test_setup_teardown(test_huge_shape_checked_against_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_and_odd_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_through_links_and_devices, setup, teardown),
        cmocka_unit_test(test_quote),
    };
    return cmocka_run_group_tests_name("npy", tests, NULL, NULL);
}
