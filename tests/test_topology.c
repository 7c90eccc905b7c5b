/* Tests of the SCALE-Sim topology reader (host/io/topology.c): good GEMM and convolution files,
 * the files shipped in tests/data/topology/, and every error a user can meet, each checked
 * by the text of its message. Files are written to a fresh temporary directory that the
 * group teardown removes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpusim/topology_file.h"
#include "tpusim/scalesim.h"

#define MAX_TEMP_FILES 64

struct fixture {
    char dir[64];
    char *files[MAX_TEMP_FILES];
    int n_files;
};

static int group_setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/tpusim_topology_XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int group_teardown(void **state)
{
    struct fixture *fx = *state;
    for (int i = 0; i < fx->n_files; i++) {
        unlink(fx->files[i]);
        free(fx->files[i]);
    }
    int rc = rmdir(fx->dir);
    free(fx);
    return rc;
}

/* Writes `len` bytes to <tempdir>/<name>; returns the path (owned by the fixture). */
static const char *write_bytes(void **state, const char *name, const char *text, size_t len)
{
    struct fixture *fx = *state;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", fx->dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    for (int i = 0; i < fx->n_files; i++)
        if (strcmp(fx->files[i], path) == 0)
            return fx->files[i];
    assert_true(fx->n_files < MAX_TEMP_FILES);
    fx->files[fx->n_files] = strdup(path);
    assert_non_null(fx->files[fx->n_files]);
    return fx->files[fx->n_files++];
}

static const char *write_text(void **state, const char *name, const char *text)
{
    return write_bytes(state, name, text, strlen(text));
}

static struct tpu_topology_file read_ok(const char *path)
{
    struct tpu_topology_file t = {0};
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_topology_file_read(path, &t, &d);
    if (rc != 0)
        print_error("reading %s failed: %s\n", path, d.msg);
    assert_int_equal(rc, 0);
    return t;
}

static void check_layer(const struct tpu_topology_file *t, size_t i, const char *name, uint64_t m,
                        uint64_t n, uint64_t k, uint32_t line)
{
    assert_true(i < t->n_layers);
    assert_string_equal(t->layers[i].name, name);
    assert_int_equal(t->layers[i].m, m);
    assert_int_equal(t->layers[i].n, n);
    assert_int_equal(t->layers[i].k, k);
    assert_int_equal(t->layers[i].line, line);
}

/* Reads a file that must fail with `code` and a message containing `text`; checks that the
 * result struct is untouched. */
static void expect_read_fail(const char *path, int code, const char *text)
{
    struct tpu_topology_file t = {.format = TPU_TOPOLOGY_FILE_CONV, .n_layers = 7, .layers = NULL};
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_topology_file_read(path, &t, &d);
    if (rc != code || !strstr(d.msg, text))
        print_error("%s: got %d \"%s\", expected %d with \"%s\"\n", path, rc, d.msg, code, text);
    assert_int_equal(rc, code);
    assert_int_equal(d.code, code);
    assert_non_null(strstr(d.msg, text));
    assert_int_equal(t.format, TPU_TOPOLOGY_FILE_CONV);
    assert_int_equal(t.n_layers, 7);
    assert_null(t.layers);
    /* without a diag too */
    assert_int_equal(tpu_topology_file_read(path, &t, NULL), code);
}

/* "…/layers.csv:<line>: <text>" for a file whose body is `text` */
static void expect_text_fail(void **state, const char *body, int code, const char *message)
{
    const char *path = write_text(state, "layers.csv", body);
    expect_read_fail(path, code, message);
}

/* ---- good GEMM files --------------------------------------------------------------------- */

static void test_gemm_basic(void **state)
{
    const char *path = write_text(state, "gemm.csv",
                                  "Layer, M, N, K,\n"
                                  "fc1, 128, 256, 784,\n"
                                  "\n"
                                  "  fc2 ,\t64 , 10 ,256\n" /* no trailing comma, spaces, tab */
                                  "   \n"
                                  "# a comment line\n"
                                  "fc1, 1, 2, 3,,\n" /* a repeated name; two trailing commas */
                                  "attn, 4, 5, 6, # a trailing comment\n");
    struct tpu_topology_file t = read_ok(path);
    assert_int_equal(t.format, TPU_TOPOLOGY_FILE_GEMM);
    assert_int_equal(t.n_layers, 4);
    check_layer(&t, 0, "fc1", 128, 256, 784, 2);
    check_layer(&t, 1, "fc2", 64, 10, 256, 4);
    check_layer(&t, 2, "fc1", 1, 2, 3, 7);
    check_layer(&t, 3, "attn", 4, 5, 6, 8);
    assert_int_equal(t.layers[0].conv.ifmap_h, 0); /* no convolution for GEMM rows */
    tpu_topology_file_free(&t);
    assert_int_equal(t.n_layers, 0);
    assert_null(t.layers);
    tpu_topology_file_free(&t); /* twice is harmless */
    tpu_topology_file_free(NULL);
}

static void test_gemm_crlf_bom_and_sparsity(void **state)
{
    const char *path = write_text(state, "crlf.csv",
                                  "\xEF\xBB\xBF"
                                  "Layer Name, M, N, K, Sparsity,\r\n"
                                  "GEMM_1, 3, 5, 16, 1:1,\r\n"
                                  "GEMM_2, 7, 9, 11,\r\n"
                                  "GEMM_3, 2, 2, 2, 4:4\r\n");
    struct tpu_topology_file t = read_ok(path);
    assert_int_equal(t.n_layers, 3);
    check_layer(&t, 0, "GEMM_1", 3, 5, 16, 2);
    check_layer(&t, 1, "GEMM_2", 7, 9, 11, 3);
    check_layer(&t, 2, "GEMM_3", 2, 2, 2, 4);
    tpu_topology_file_free(&t);
}

static void test_parse_from_memory(void **state)
{
    (void)state;
    const char text[] = "Layer,M,N,K,\nx,1,2,3,"; /* no terminating NUL is read */
    struct tpu_topology_file t = {0};
    struct tpu_diag d;
    tpu_diag_clear(&d);
    assert_int_equal(tpu_topology_file_parse(text, sizeof text - 1, "inline", &t, &d), 0);
    assert_int_equal(t.n_layers, 1);
    check_layer(&t, 0, "x", 1, 2, 3, 2);
    tpu_topology_file_free(&t);

    assert_int_equal(tpu_topology_file_parse(NULL, 0, "inline", &t, &d), TPU_EPARSE);
    assert_non_null(strstr(d.msg, "inline: the file is empty"));
    assert_int_equal(tpu_topology_file_parse(NULL, 5, "inline", &t, &d), TPU_EINVAL);
    assert_int_equal(tpu_topology_file_parse(text, sizeof text - 1, "inline", NULL, &d), TPU_EINVAL);
    assert_int_equal(tpu_topology_file_read(NULL, &t, &d), TPU_EINVAL);
}

/* ---- good convolution files -------------------------------------------------------------- */

/* Ofmap sizes as SCALE-Sim's topo_calc_hyperparams(): ceil((I - F + S) / S). */
static void test_conv_two_strides_and_edges(void **state)
{
    const char *path = write_text(
        state, "conv.csv",
        /* the header SCALE-Sim's own write_topo_file() writes */
        "Layer name,IFMAP height,IFMAP width,Filter height,Filter width,Channels,Num filter,"
        "Stride height,Stride width,\n"
        "c1,10,20,3,3,4,8,1,2,\n"  /* Oh = 7 + 1 = 8, Ow = ceil(17/2) + 1 = 10 */
        "c2,5,5,5,5,2,3,2,2,\n"    /* the filter covers the IFMAP: 1 x 1 */
        "c3,7,7,2,2,1,1,3,3,\n");  /* ceil(5/3) + 1 = 3 (floor would give 2) */
    struct tpu_topology_file t = read_ok(path);
    assert_int_equal(t.format, TPU_TOPOLOGY_FILE_CONV);
    assert_int_equal(t.n_layers, 3);
    check_layer(&t, 0, "c1", 80, 8, 36, 2);
    const struct tpu_topology_file_conv *c = &t.layers[0].conv;
    assert_int_equal(c->ifmap_h, 10);
    assert_int_equal(c->ifmap_w, 20);
    assert_int_equal(c->filter_h, 3);
    assert_int_equal(c->filter_w, 3);
    assert_int_equal(c->channels, 4);
    assert_int_equal(c->num_filters, 8);
    assert_int_equal(c->stride_h, 1);
    assert_int_equal(c->stride_w, 2);
    assert_int_equal(c->ofmap_h, 8);
    assert_int_equal(c->ofmap_w, 10);
    check_layer(&t, 1, "c2", 1, 3, 50, 3);
    check_layer(&t, 2, "c3", 9, 1, 4, 4);
    tpu_topology_file_free(&t);
}

/* SCALE-Sim's load_arrays_conv(): 'DP' in the name splits the layer per channel. */
static void test_conv_depthwise_expansion(void **state)
{
    const char *path = write_text(state, "dp.csv",
                                  "Layer name, IFMAP Height, IFMAP Width, Filter Height, "
                                  "Filter Width, Channels, Num Filter, Strides,\n"
                                  "DPConv, 8, 8, 3, 3, 3, 1, 1,\n"
                                  "Conv_dw, 8, 8, 3, 3, 3, 1, 1,\n"); /* not 'DP': one layer */
    struct tpu_topology_file t = read_ok(path);
    assert_int_equal(t.n_layers, 4);
    check_layer(&t, 0, "DPConvChannel_0", 36, 1, 9, 2);
    check_layer(&t, 1, "DPConvChannel_1", 36, 1, 9, 2);
    check_layer(&t, 2, "DPConvChannel_2", 36, 1, 9, 2);
    assert_int_equal(t.layers[2].conv.channels, 1);
    check_layer(&t, 3, "Conv_dw", 36, 1, 27, 3);
    assert_int_equal(t.layers[3].conv.channels, 3);
    tpu_topology_file_free(&t);
}

/* ---- the shipped files ------------------------------------------------------------------- */

/* tests/data/topology, found from this source file's path (relative to the build directory
 * that meson compiles and runs the tests in) unless TPUSIM_TOPOLOGY_DATA names it. */
static void data_path(char *out, size_t size, const char *name)
{
    const char *dir = getenv("TPUSIM_TOPOLOGY_DATA");
    if (dir) {
        snprintf(out, size, "%s/%s", dir, name);
        return;
    }
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    int dir_len = slash ? (int)(slash - file) : 1;
    snprintf(out, size, "%.*s/data/topology/%s", dir_len, slash ? file : ".", name);
}

static struct tpu_topology_file read_data(const char *name)
{
    char path[512];
    data_path(path, sizeof path, name);
    return read_ok(path);
}

static void test_data_scalesim_gemm_test(void **state)
{
    (void)state;
    struct tpu_topology_file t = read_data("gemm_test_mnk_input.csv");
    assert_int_equal(t.format, TPU_TOPOLOGY_FILE_GEMM);
    assert_int_equal(t.n_layers, 1);
    check_layer(&t, 0, "Test 1", 256, 128, 256, 2);
    /* the compute cycles of SCALE-Sim's golden_trace_user_ws run (52447 - 41248 stalls) */
    struct tpu_serial_result r;
    assert_int_equal(tpu_serial_gemm(32, 32, TPU_DATAFLOW_WS, t.layers[0].m, t.layers[0].n,
                                     t.layers[0].k, &r, NULL),
                     0);
    assert_int_equal(r.total_cycles, 11199);
    tpu_topology_file_free(&t);
}

static void test_data_gpt2(void **state)
{
    (void)state;
    struct tpu_topology_file t = read_data("gemm_gpt2.csv");
    assert_int_equal(t.n_layers, 6);
    check_layer(&t, 0, "QKT", 1024, 1024, 64, 2);
    check_layer(&t, 1, "QKTV", 1024, 64, 1024, 3);
    check_layer(&t, 2, "Linear1", 1024, 4800, 1600, 4);
    check_layer(&t, 5, "PW-FF-L2", 1024, 1600, 3072, 7);
    tpu_topology_file_free(&t);
}

static void test_data_small(void **state)
{
    (void)state;
    struct tpu_topology_file t = read_data("gemm_small.csv");
    assert_int_equal(t.n_layers, 2);
    check_layer(&t, 0, "small_4x4x4", 4, 4, 4, 2);
    check_layer(&t, 1, "partial_10x12x20", 10, 12, 20, 3);
    tpu_topology_file_free(&t);
}

/* The layer of SCALE-Sim's test/golden_trace/COMPUTE_REPORT.csv, end to end: 224 x 224,
 * 11 x 11 x 3, 96 filters, stride 4 -> 55 x 55 ofmap; on 32 x 32 ws, 112283 cycles. */
static void test_data_alexnet_golden(void **state)
{
    (void)state;
    struct tpu_topology_file t = read_data("conv_alexnet_part.csv");
    assert_int_equal(t.format, TPU_TOPOLOGY_FILE_CONV);
    assert_int_equal(t.n_layers, 1);
    check_layer(&t, 0, "Conv1", 3025, 96, 363, 2);
    assert_int_equal(t.layers[0].conv.ofmap_h, 55);
    assert_int_equal(t.layers[0].conv.ofmap_w, 55);
    struct tpu_serial_result r;
    assert_int_equal(tpu_serial_gemm(32, 32, TPU_DATAFLOW_WS, t.layers[0].m, t.layers[0].n,
                                     t.layers[0].k, &r, NULL),
                     0);
    assert_int_equal(r.total_cycles, 112283);
    tpu_topology_file_free(&t);
}

static void test_data_mobilenet(void **state)
{
    (void)state;
    struct tpu_topology_file t = read_data("conv_mobilenet_part.csv");
    assert_int_equal(t.n_layers, 7);
    check_layer(&t, 0, "Conv1", 12544, 32, 27, 3);   /* ceil(221/2) + 1 = 112 */
    check_layer(&t, 1, "Conv2_dw", 12100, 1, 9, 4);  /* 110 x 110, '#dw' dropped */
    check_layer(&t, 2, "Conv3", 12544, 64, 32, 5);
    check_layer(&t, 3, "Conv4_dw", 3136, 1, 9, 6);   /* ceil(109/2) + 1 = 56 */
    check_layer(&t, 4, "Conv11", 784, 256, 256, 7);  /* no trailing comma */
    check_layer(&t, 5, "Conv15_0", 196, 512, 512, 8); /* tab-indented */
    check_layer(&t, 6, "FC", 1, 1000, 1024, 9);
    tpu_topology_file_free(&t);
}

/* ---- errors: the file -------------------------------------------------------------------- */

static void test_error_missing_file(void **state)
{
    struct fixture *fx = *state;
    char path[256];
    snprintf(path, sizeof path, "%s/no_such_layers.csv", fx->dir);
    char want[400];
    snprintf(want, sizeof want, "cannot open topology file '%s': No such file or directory",
             path);
    expect_read_fail(path, TPU_EIO, want);
}

static void test_error_directory(void **state)
{
    struct fixture *fx = *state;
    char want[400];
    snprintf(want, sizeof want, "'%s' is a directory; give a SCALE-Sim topology file (CSV, "
             "such as 'Layer, M, N, K,' then one row per layer)", fx->dir);
    expect_read_fail(fx->dir, TPU_EIO, want);
}

/* Fields with control characters or bytes that are not UTF-8 are quoted in messages. */
static void test_error_quoted_fields(void **state)
{
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 12\x1b[2J, 3, 4,\n", TPU_EPARSE,
                     "layers.csv:2: column 'M' is '12\\x1B[2J', not a whole number >= 1");
    expect_text_fail(state, "Layer, M\xff, N, K,\n", TPU_EPARSE,
                     "layers.csv:1: 'Layer, M\\xFF, N, K,' is not a SCALE-Sim topology header");
    expect_text_fail(state, "Layer, M, N, K,\nfc\r1, 4294967296, 4294967296, 4294967296,\n",
                     TPU_ERANGE, "layer 'fc\\x0D1' has M x N x K");
}

static void test_error_empty(void **state)
{
    expect_text_fail(state, "", TPU_EPARSE,
                     "layers.csv: the file is empty; a SCALE-Sim topology starts with a header "
                     "such as 'Layer, M, N, K,' and has one row per layer");
    expect_text_fail(state, "\n  \n\t\n", TPU_EPARSE, "layers.csv: the file is empty");
}

static void test_error_no_layers(void **state)
{
    expect_text_fail(state, "\nLayer, M, N, K,\n\n", TPU_EPARSE,
                     "layers.csv: no layers: the header on line 2 is followed by no layer rows; "
                     "add one row per layer, such as 'fc1, 128, 256, 784,'");
    expect_text_fail(state,
                     "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                     "Channels, Num Filter, Strides,\n",
                     TPU_EPARSE, "such as 'Conv1, 224, 224, 11, 11, 3, 96, 4,'");
}

static void test_error_too_large(void **state)
{
    const char *path = write_text(state, "huge.csv", "Layer, M, N, K,\n");
    assert_int_equal(truncate(path, (off_t)TPU_TOPOLOGY_FILE_MAX_BYTES + 1), 0);
    expect_read_fail(path, TPU_ERANGE, "huge.csv' is larger than 64 MiB");
    assert_int_equal(truncate(path, 0), 0);
}

static void test_error_nul_byte(void **state)
{
    const char body[] = "Layer, M, N, K,\nfc1, 1,\0 2, 3,\n";
    const char *path = write_bytes(state, "layers.csv", body, sizeof body - 1);
    expect_read_fail(path, TPU_EPARSE,
                     "layers.csv:2: the line holds a NUL byte; a topology file is plain text");
}

/* ---- errors: the header ------------------------------------------------------------------ */

static void test_error_headers(void **state)
{
    expect_text_fail(state, "Test 1, 256, 128, 256,\nTest 2, 1, 2, 3,\n", TPU_EPARSE,
                     "layers.csv:1: the first line is a layer ('Test 1, 256, 128, 256,'), not a "
                     "header; SCALE-Sim skips the first line unread, so add a header: "
                     "'Layer, M, N, K,' for a GEMM topology");
    expect_text_fail(state, "name, rows, cols\nx, 1, 2\n", TPU_EPARSE,
                     "layers.csv:1: 'name, rows, cols' is not a SCALE-Sim topology header; "
                     "expected 'Layer, M, N, K,' (GEMM) or 'Layer name, IFMAP Height, IFMAP "
                     "Width, Filter Height, Filter Width, Channels, Num Filter, Strides,' "
                     "(convolution)");
    expect_text_fail(state, "Layer, M, N, K, Notes,\nx, 1, 2, 3, y,\n", TPU_EPARSE,
                     "is not a SCALE-Sim topology header");
    expect_text_fail(state,
                     "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                     "Channels, Num Filter,\nc, 1, 1, 1, 1, 1, 1,\n",
                     TPU_EPARSE,
                     "layers.csv:1: the convolution header has 7 columns; SCALE-Sim's has 8 "
                     "(Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                     "Channels, Num Filter, Strides) or 9");
}

/* ---- errors: GEMM rows ------------------------------------------------------------------- */

static void test_error_columns(void **state)
{
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, 2, 3,\nfc2, 4, 5,\n", TPU_EPARSE,
                     "layers.csv:3: the row has 3 columns, but a GEMM row needs 4: "
                     "Layer, M, N, K");
    expect_text_fail(state, "Layer, M, N, K,\nfc1,\n", TPU_EPARSE,
                     "layers.csv:2: the row has 1 column, but a GEMM row needs 4");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, 2, 3, 1:1, 7,\n", TPU_EPARSE,
                     "layers.csv:2: the row has 6 columns, but a GEMM row has 4 (Layer, M, N, "
                     "K) and may end with an N:M sparsity ratio such as 1:1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, 2, 3, 4,\n", TPU_EPARSE,
                     "layers.csv:2: column 5 is '4': a GEMM row has 4 columns (Layer, M, N, K) "
                     "and may end with an N:M sparsity ratio such as 1:1");
    expect_text_fail(state, "Layer, M, N, K,\n, 1, 2, 3,\n", TPU_EPARSE,
                     "layers.csv:2: the layer name (column 1) is empty; give every layer a "
                     "name");
}

static void test_error_sparse(void **state)
{
    expect_text_fail(state, "Layer Name, M, N, K, Sparsity,\nGEMM_1, 3, 5, 16, 2:4,\n",
                     TPU_EUNSUPPORTED,
                     "layers.csv:2: column 'Sparsity' is '2:4': tpusim times dense layers "
                     "only; use 1:1 or leave the column out");
    expect_text_fail(state, "Layer Name, M, N, K, Sparsity,\nGEMM_1, 3, 5, 16, 0:0,\n",
                     TPU_EUNSUPPORTED, "column 'Sparsity' is '0:0'");
    expect_text_fail(state, "Layer Name, M, N, K, Sparsity,\nGEMM_1, 3, 5, 16, a:b,\n",
                     TPU_EPARSE, "layers.csv:2: column 5 is 'a:b'");
}

static void test_error_numbers(void **state)
{
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, 2, 3,\nfc2, 4, 5, abc,\n", TPU_EPARSE,
                     "layers.csv:3: column 'K' is 'abc', not a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 0, 2, 3,\n", TPU_EPARSE,
                     "layers.csv:2: column 'M' is '0', not a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, -5, 3,\n", TPU_EPARSE,
                     "layers.csv:2: column 'N' is '-5', not a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1.5, 2, 3,\n", TPU_EPARSE,
                     "column 'M' is '1.5', not a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1, , 3,\n", TPU_EPARSE,
                     "layers.csv:2: column 'N' is empty; it needs a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 1 2, 2, 3,\n", TPU_EPARSE,
                     "column 'M' is '1 2', not a whole number >= 1");
    expect_text_fail(state, "Layer, M, N, K,\nfc1, 18446744073709551616, 2, 3,\n", TPU_ERANGE,
                     "layers.csv:2: column 'M' is '18446744073709551616', larger than the "
                     "largest value taken, 18446744073709551615");
    expect_text_fail(state, "Layer, M, N, K,\nbig, 4294967296, 4294967296, 2,\n", TPU_ERANGE,
                     "layers.csv:2: layer 'big' has M x N x K = 4294967296 x 4294967296 x 2 "
                     "multiply-accumulates, more than fit in 64 bits");
    /* the largest value itself is taken */
    const char *path = write_text(state, "max.csv",
                                  "Layer, M, N, K,\nmax, 18446744073709551615, 1, 1,\n");
    struct tpu_topology_file t = read_ok(path);
    assert_int_equal(t.layers[0].m, UINT64_MAX);
    tpu_topology_file_free(&t);
}

/* ---- errors: convolution rows ------------------------------------------------------------ */

#define CONV_HDR                                                                               \
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, " \
    "Strides,\n"

static void test_error_conv_rows(void **state)
{
    expect_text_fail(state, CONV_HDR "c1, 3, 8, 5, 3, 1, 1, 1,\n", TPU_EPARSE,
                     "layers.csv:2: the filter height 5 is larger than the IFMAP height 3; "
                     "SCALE-Sim pads nothing, so the filter must fit in the IFMAP");
    expect_text_fail(state, CONV_HDR "c1, 8, 2, 3, 3, 1, 1, 1,\n", TPU_EPARSE,
                     "layers.csv:2: the filter width 3 is larger than the IFMAP width 2");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 1, 1, x,\n", TPU_EPARSE,
                     "layers.csv:2: column 'Strides' is 'x', not a whole number >= 1");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 1, 1, 0,\n", TPU_EPARSE,
                     "column 'Strides' is '0', not a whole number >= 1");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 1, 1,\n", TPU_EPARSE,
                     "layers.csv:2: the row has 7 columns, but a convolution row needs 8: "
                     "Layer name, IFMAP Height");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 1, 1, 1, 2,\n", TPU_EPARSE,
                     "layers.csv:2: column 9 is '2': a convolution row has 8 columns");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 1, 1, 1, 1:2,\n", TPU_EUNSUPPORTED,
                     "column 'Sparsity' is '1:2'");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 4294967296, 4294967296, 1,\n", TPU_ERANGE,
                     "layer 'c1' has M x N x K = 36 x 4294967296 x 38654705664 "
                     "multiply-accumulates, more than fit in 64 bits");
    expect_text_fail(state, CONV_HDR "c1, 8, 8, 3, 3, 4294967296, 4294967296, 1,\n", TPU_ERANGE,
                     "layers.csv:2:");
    expect_text_fail(state, CONV_HDR "DPc, 8, 8, 3, 3, 2000000, 1, 1,\n", TPU_ERANGE,
                     "layers.csv:2: depth-wise layer 'DPc' (its name contains 'DP') expands "
                     "into 2000000 layers, one per channel, more than the 1048576 one topology "
                     "may hold");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_basic),
        cmocka_unit_test(test_gemm_crlf_bom_and_sparsity),
        cmocka_unit_test(test_parse_from_memory),
        cmocka_unit_test(test_conv_two_strides_and_edges),
        cmocka_unit_test(test_conv_depthwise_expansion),
        cmocka_unit_test(test_data_scalesim_gemm_test),
        cmocka_unit_test(test_data_gpt2),
        cmocka_unit_test(test_data_small),
        cmocka_unit_test(test_data_alexnet_golden),
        cmocka_unit_test(test_data_mobilenet),
        cmocka_unit_test(test_error_missing_file),
        cmocka_unit_test(test_error_directory),
        cmocka_unit_test(test_error_quoted_fields),
        cmocka_unit_test(test_error_empty),
        cmocka_unit_test(test_error_no_layers),
        cmocka_unit_test(test_error_too_large),
        cmocka_unit_test(test_error_nul_byte),
        cmocka_unit_test(test_error_headers),
        cmocka_unit_test(test_error_columns),
        cmocka_unit_test(test_error_sparse),
        cmocka_unit_test(test_error_numbers),
        cmocka_unit_test(test_error_conv_rows),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
