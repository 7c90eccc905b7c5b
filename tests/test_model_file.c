/* JSON model files (tpu_net_load_file, tpu_net_parse_json; the format is in
 * configs/models/README.md): every shipped file loads with its layer and parameter counts,
 * the defaults and every key reach the builder, and every error a user can make gives its
 * exact message, with the file, line and column, the layer and the rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpusim/config.h"
#include "tpusim/net.h"

/* configs/models/, from TPUSIM_MODELS_DIR (set by tests/meson.build) */
static void model_path(const char *name, char *buf, size_t n)
{
    const char *dir = getenv("TPUSIM_MODELS_DIR");
    snprintf(buf, n, "%s/%s", dir ? dir : "configs/models", name);
}

static struct tpu_net *load(const char *name)
{
    char path[512];
    model_path(name, path, sizeof path);
    struct tpu_diag d;
    struct tpu_net *net = NULL;
    int rc = tpu_net_load_file(path, &net, &d);
    if (rc)
        fail_msg("%s: %s", path, d.msg);
    assert_non_null(net);
    assert_int_equal(d.code, 0);
    return net;
}

static struct tpu_net *parse_ok(const char *text)
{
    struct tpu_diag d;
    struct tpu_net *net = NULL;
    if (tpu_net_parse_json(text, strlen(text), "m.json", &net, &d))
        fail_msg("%s", d.msg);
    assert_non_null(net);
    return net;
}

/* Parses text as "m.json" and expects code and exactly msg; *out stays NULL. */
static void expect_error(const char *text, int code, const char *msg)
{
    struct tpu_diag d;
    struct tpu_net *net = (struct tpu_net *)&d; /* not NULL: the call must clear it */
    int rc = tpu_net_parse_json(text, strlen(text), "m.json", &net, &d);
    if (rc != code || strcmp(d.msg, msg))
        fail_msg("for\n%s\ngot %d (%s)\n  %s\nexpected %d (%s)\n  %s", text, rc,
                 tpu_err_name(rc), d.msg, code, tpu_err_name(code), msg);
    assert_null(net);
    assert_int_equal(d.code, code);
}

static void totals(const struct tpu_net *net, uint64_t *params, uint64_t *non_trainable)
{
    *params = *non_trainable = 0;
    for (uint32_t i = 0; i < tpu_net_n_layers(net); i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(net, i, &li), 0);
        *params += li.params;
        *non_trainable += li.non_trainable;
    }
}

static struct tpu_layer_info layer(const struct tpu_net *net, const char *name)
{
    uint32_t id;
    struct tpu_layer_info li;
    if (tpu_net_find(net, name, &id))
        fail_msg("no layer '%s'", name);
    assert_int_equal(tpu_net_layer(net, id, &li), 0);
    return li;
}

static void assert_shape(struct tpu_shape s, uint32_t h, uint32_t w, uint32_t c)
{
    if (s.h != h || s.w != w || s.c != c)
        fail_msg("shape %u x %u x %u, expected %u x %u x %u", s.h, s.w, s.c, h, w, c);
}

static void assert_output(const struct tpu_net *net, const char *name, enum tpu_loss loss)
{
    uint32_t out, id;
    enum tpu_loss l;
    assert_int_equal(tpu_net_output(net, &out, &l), 0);
    assert_int_equal(tpu_net_find(net, name, &id), 0);
    assert_int_equal(out, id);
    assert_int_equal(l, loss);
}

/* ---- the shipped files ------------------------------------------------------------------- */

/* Keras's classic MNIST CNN: its summary gives 320 + 18496 + 1179776 + 1290 = 1,199,882. */
static void test_cnn_file(void **state)
{
    (void)state;
    struct tpu_net *net = load("cnn.json");
    assert_string_equal(tpu_net_name(net), "cnn");
    assert_int_equal(tpu_net_n_layers(net), 9);
    static const char *const names[] = {"input", "conv2d", "conv2d_1", "max_pool2d",
                                        "dropout", "flatten", "dense", "dropout_1", "dense_1"};
    for (uint32_t i = 0; i < 9; i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(net, i, &li), 0);
        assert_string_equal(li.name, names[i]);
    }
    uint64_t p, nt;
    totals(net, &p, &nt);
    assert_int_equal(p, 1199882);
    assert_int_equal(nt, 0);
    assert_shape(layer(net, "max_pool2d").out, 12, 12, 64);
    assert_true(layer(net, "dropout").desc.rate == 0.25f);
    assert_true(layer(net, "dropout_1").desc.rate == 0.5f);
    assert_int_equal(layer(net, "dense").desc.activation, TPU_ACT_RELU);
    assert_int_equal(layer(net, "dense_1").desc.activation, TPU_ACT_NONE);
    assert_output(net, "dense_1", TPU_LOSS_SOFTMAX_XENT);
    tpu_net_destroy(&net);
}

/* 51 layers; params counted by hand: stem 144 + 32, stage 1 four 3x3 16->16 convs
 * (4 x 2304) and four batch norms (4 x 32), stage 2 4608 + 512 + 3 x 9216 (3x3) and five
 * batch norms of 32 (5 x 64), stage 3 18432 + 2048 + 3 x 36864 and five of 64 (5 x 128),
 * dense 650: 174,970 trainable; the moving statistics are as many as gamma and beta
 * (16 x 10 + 32 x 10 + 64 x 10 = 1,120). */
static void test_resnet_small_file(void **state)
{
    (void)state;
    struct tpu_net *net = load("resnet_small.json");
    assert_int_equal(tpu_net_n_layers(net), 52);
    uint64_t p, nt;
    totals(net, &p, &nt);
    assert_int_equal(p, 174970);
    assert_int_equal(nt, 1120);
    assert_shape(layer(net, "stage1_block2_out").out, 28, 28, 16);
    assert_shape(layer(net, "stage2_block1_0_bn").out, 14, 14, 32);
    assert_shape(layer(net, "stage3_block2_out").out, 7, 7, 64);
    struct tpu_layer_info add = layer(net, "stage2_block1_add");
    uint32_t a, b;
    assert_int_equal(tpu_net_find(net, "stage2_block1_2_bn", &a), 0);
    assert_int_equal(tpu_net_find(net, "stage2_block1_0_bn", &b), 0);
    assert_int_equal(add.n_in, 2);
    assert_int_equal(add.in[0], a);
    assert_int_equal(add.in[1], b);
    assert_false(layer(net, "stem_conv").desc.use_bias);
    assert_output(net, "predictions", TPU_LOSS_SOFTMAX_XENT);
    tpu_net_destroy(&net);
}

/* ResNet-50 v1.5: 174 layers and 25,557,032 trainable params, the published count of
 * ResNet-50 without conv biases (torchvision's resnet50, TensorFlow's official v1.5); 53,120
 * moving statistics. Keras's keras.applications.ResNet50 gives its convs biases: with
 * "use_bias": true its summary's 25,583,592 trainable and 53,120 non-trainable params. */
static void test_resnet50_file(void **state)
{
    (void)state;
    struct tpu_net *net = load("resnet50.json");
    assert_int_equal(tpu_net_n_layers(net), 175);
    uint64_t p, nt;
    totals(net, &p, &nt);
    assert_int_equal(p, 25557032);
    assert_int_equal(nt, 53120);
    assert_shape(layer(net, "conv1_conv").out, 112, 112, 64);
    assert_shape(layer(net, "pool1_pool").out, 56, 56, 64);
    assert_shape(layer(net, "conv3_block1_2_conv").out, 28, 28, 128); /* v1.5: 3x3 stride */
    assert_shape(layer(net, "conv3_block1_1_conv").out, 56, 56, 128);
    assert_shape(layer(net, "conv5_block3_out").out, 7, 7, 2048);
    assert_shape(layer(net, "predictions").out, 1, 1, 1000);
    assert_output(net, "predictions", TPU_LOSS_SOFTMAX_XENT);
    tpu_net_destroy(&net);

    /* the same text with every "use_bias": false turned true (same length, so still JSON) */
    char path[512];
    model_path("resnet50.json", path, sizeof path);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[1 << 17];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_true(len > 0 && len < sizeof text - 1);
    text[len] = '\0';
    int flips = 0;
    for (char *s = text; (s = strstr(s, "\"use_bias\": false"));) {
        memcpy(s, "\"use_bias\": true ", 17);
        flips++;
    }
    assert_int_equal(flips, 53); /* 49 convs in the main path and 4 projections */
    assert_int_equal(tpu_net_parse_json(text, len, "resnet50-bias", &net, NULL), 0);
    totals(net, &p, &nt);
    assert_int_equal(p, 25583592);
    assert_int_equal(nt, 53120);
    tpu_net_destroy(&net);
}

/* ResNet-50's training step at 128 examples per core fits a tpu-v3 core's 16 GiB of HBM
 * (params, optimizer state and the peak of live temps, tpu_program_memory): the convs run
 * as the conv2d ops, which form their patches on chip (net_lower_layers.c), so no im2col
 * columns take HBM. */
static void test_resnet50_memory(void **state)
{
    (void)state;
    struct tpu_net *net = load("resnet50.json");
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    struct tpu_diag d = {0};
    const struct tpu_build_shape shape = {.batch_per_replica = 128, .global_batch = 128 * 8,
                                          .n_replicas = 8, .cores_per_replica = 1};
    if (tpu_net_build(net, &spec, TPU_MODE_TRAIN, &shape, &mp, NULL, &d) != 0)
        fail_msg("build: %s", d.msg);
    struct tpu_program_memory m;
    assert_int_equal(tpu_program_memory(mp.prog, &m), 0);
    struct tpu_chip_config v3;
    if (tpu_config_load_preset("tpu-v3", &v3, &d) != 0)
        fail_msg("tpu-v3: %s", d.msg);
    const uint64_t share = v3.hbm_bytes / v3.cores_per_chip;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    print_message("resnet50 train, 128 per core: params %.2f GiB + temp peak %.2f GiB = %.2f "
                  "GiB of %.2f GiB per tpu-v3 core\n", (double)m.param_bytes / gib,
                  (double)m.temp_peak_bytes / gib, (double)m.hbm_bytes / gib,
                  (double)share / gib);
    assert_true(m.hbm_bytes <= share);
    if (tpu_program_verify(mp.prog, &v3, &d) != 0)
        fail_msg("verify on tpu-v3: %s", d.msg);
    tpu_program_destroy(&mp.prog);
    tpu_net_destroy(&net);
}

/* ---- what the keys set ------------------------------------------------------------------- */

static void test_keys_and_defaults(void **state)
{
    (void)state;
    struct tpu_net *net = parse_ok(
        "{\"input\": [8, 6, 2], \"layers\": [\n"
        " {\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": [3, 1], \"strides\": [2, 1],\n"
        "  \"padding\": \"same\", \"activation\": \"relu\", \"use_bias\": false},\n"
        " {\"type\": \"max_pool2d\"},\n"
        " {\"type\": \"avg_pool2d\", \"pool_size\": 2, \"strides\": 1, \"padding\": \"valid\"},\n"
        " {\"type\": \"batch_norm\", \"momentum\": 0.9, \"epsilon\": 1e-5, \"cross_replica\": "
        "true},\n"
        " {\"name\": \"r\", \"type\": \"reshape\", \"target_shape\": [1, 1, 8]},\n"
        " {\"type\": \"relu\", \"inputs\": [\"r\"]},\n"
        " {\"type\": \"dropout\", \"rate\": 0},\n"
        " {\"type\": \"dense\", \"units\": 8, \"activation\": \"linear\"},\n"
        " {\"type\": \"add\", \"inputs\": [\"dense\", \"r\"]},\n"
        " {\"type\": \"global_avg_pool2d\", \"inputs\": [\"batch_norm\"]},\n"
        " {\"type\": \"flatten\"}],\n"
        " \"output\": \"add\", \"loss\": \"mean_squared_error\"}");
    assert_string_equal(tpu_net_name(net), "model"); /* Keras's default */
    struct tpu_layer_info c = layer(net, "conv2d");
    assert_int_equal(c.desc.filters, 4);
    assert_int_equal(c.desc.kh, 3);
    assert_int_equal(c.desc.kw, 1);
    assert_int_equal(c.desc.sh, 2);
    assert_int_equal(c.desc.sw, 1);
    assert_int_equal(c.desc.padding, TPU_PADDING_SAME);
    assert_int_equal(c.desc.activation, TPU_ACT_RELU);
    assert_false(c.desc.use_bias);
    assert_shape(c.out, 4, 6, 4);
    struct tpu_layer_info mp = layer(net, "max_pool2d"); /* Keras: pool 2, strides = pool */
    assert_int_equal(mp.desc.kh, 2);
    assert_int_equal(mp.desc.kw, 2);
    assert_int_equal(mp.desc.sh, 2);
    assert_int_equal(mp.desc.padding, TPU_PADDING_VALID);
    assert_shape(mp.out, 2, 3, 4);
    struct tpu_layer_info ap = layer(net, "avg_pool2d");
    assert_int_equal(ap.desc.sh, 1);
    assert_shape(ap.out, 1, 2, 4);
    struct tpu_layer_info bn = layer(net, "batch_norm");
    assert_true(bn.desc.momentum == 0.9f);
    assert_true(bn.desc.epsilon == 1e-5f);
    assert_true(bn.desc.cross_replica);
    assert_shape(layer(net, "r").out, 1, 1, 8);
    assert_int_equal(layer(net, "dense").desc.activation, TPU_ACT_NONE);
    assert_true(layer(net, "dense").desc.use_bias);
    uint32_t r;
    assert_int_equal(tpu_net_find(net, "r", &r), 0);
    assert_int_equal(layer(net, "relu").in[0], r);
    assert_int_equal(layer(net, "dropout").desc.rate, 0);
    struct tpu_layer_info gap = layer(net, "global_avg_pool2d");
    assert_int_equal(gap.in[0], layer(net, "batch_norm").in[0] + 1);
    assert_shape(layer(net, "flatten").out, 1, 1, 4);
    assert_output(net, "add", TPU_LOSS_MSE);
    tpu_net_destroy(&net);
}

/* "input": [c] is 1 x 1 x c; the output defaults to the last layer; keys in any order, and
 * escapes in keys and names are read as JSON reads them. */
static void test_vector_input_and_escapes(void **state)
{
    (void)state;
    struct tpu_net *net = parse_ok("{\"loss\": \"softmax_cross_entropy\", \"name\": \"mlp\","
                                   " \"layers\": [{\"units\": 16, \"type\": \"dense\"},"
                                   " {\"type\": \"d\\u0065nse\", \"unit\\u0073\": 3,"
                                   " \"name\": \"o\\u0075t\"}], \"input\": [784]}");
    assert_shape(layer(net, "input").out, 1, 1, 784);
    assert_shape(layer(net, "out").out, 1, 1, 3);
    assert_output(net, "out", TPU_LOSS_SOFTMAX_XENT);
    assert_string_equal(tpu_net_name(net), "mlp");
    tpu_net_destroy(&net);
}

/* ---- errors ----------------------------------------------------------------------------- */

/* A valid prefix: line 1 the input, line 2 opens the layers; layers start on line 3. */
#define HEAD "{\"input\": [28, 28, 1], \"loss\": \"softmax_cross_entropy\",\n\"layers\": [\n"
#define TAIL "\n]}"
#define FLAT_DENSE "{\"type\": \"flatten\"},\n{\"type\": \"dense\", \"units\": 10}"

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_error(HEAD "{\"type\": \"flatten\"},\n]}", TPU_EPARSE,
                 "m.json:4:1: syntax error: unexpected token near ']'; a model file is strict "
                 "JSON (no comments, no trailing commas)");
    expect_error(" \n", TPU_EPARSE,
                 "m.json is empty; a model file is a JSON object such as "
                 "configs/models/cnn.json");
    expect_error("{\"input\": [1], \"input\": [2]}", TPU_EPARSE,
                 "m.json:1:22: syntax error: duplicate object key near '\"input\"'; a model "
                 "file is strict JSON (no comments, no trailing commas)");
    expect_error("[1, 2]", TPU_EPARSE,
                 "m.json:1:1: a model file is a JSON object such as {\"input\": [28, 28, 1], "
                 "\"layers\": [...], \"loss\": \"softmax_cross_entropy\"}; got an array of 2");
    /* a column counts characters, as jansson's does: the same place as a syntax error */
    expect_error("{\"name\": \"caf\xc3\xa9\", \"nme\": 1}", TPU_EPARSE,
                 "m.json:1:18: unknown key \"nme\" (did you mean 'name'?); the keys of a model "
                 "file are \"name\", \"description\", \"input\", \"layers\", \"output\", "
                 "\"loss\"");
    expect_error("{\"name\": \"caf\xc3\xa9\", \"nme\" 1}", TPU_EPARSE,
                 "m.json:1:24: syntax error: ':' expected near '1'; a model file is strict JSON "
                 "(no comments, no trailing commas)");
}

/* The place of a value past CRLF line ends, escaped keys, and strings holding brackets,
 * commas and escaped quotes (the expected columns counted independently). */
static void test_locations(void **state)
{
    (void)state;
    expect_error("{\"input\": [1],\r\n \"layers\": [{\"type\": \"dense\", \"units\": 0}],\r\n"
                 " \"loss\": \"mean_squared_error\"}", TPU_ERANGE,
                 "m.json:2:40: layer 1 (dense): \"units\" must be a whole number from 1 to "
                 "1048576; got 0");
    expect_error("{\"input\": [1], \"layers\": [{\"type\": \"dense\", \"unit\\u0073\": 0}],"
                 " \"loss\": \"mean_squared_error\"}", TPU_ERANGE,
                 "m.json:1:59: layer 1 (dense): \"units\" must be a whole number from 1 to "
                 "1048576; got 0");
    expect_error("{\"description\": \"a [tricky] {string}, \\\"with\\\" quotes: \\\\\", "
                 "\"input\": [1],\n \"layers\": [{\"type\": \"relu\"}, {\"type\": \"relu\", "
                 "\"name\": \"x y\"}], \"loss\": \"mean_squared_error\"}", TPU_ERANGE,
                 "m.json:2:56: layer 2 'x y': \"name\" must be a name of 1 to 31 letters, digits "
                 "and '_', not starting with a digit (such as \"conv_1\"); got the string "
                 "\"x y\"");
}

static void test_unknown_keys(void **state)
{
    (void)state;
    expect_error("{\"input\": [28, 28, 1], \"layer\": []}", TPU_EPARSE,
                 "m.json:1:24: unknown key \"layer\" (did you mean 'layers'?); the keys of a "
                 "model file are \"name\", \"description\", \"input\", \"layers\", \"output\", "
                 "\"loss\"");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filter\": 8, \"kernel_size\": 3}" TAIL,
                 TPU_EPARSE,
                 "m.json:3:20: layer 1 (conv2d): unknown key \"filter\" (did you mean "
                 "'filters'?); the keys of a conv2d layer are \"type\", \"name\", \"inputs\", "
                 "\"filters\", \"kernel_size\", \"strides\", \"padding\", \"activation\", "
                 "\"use_bias\"");
    expect_error(HEAD FLAT_DENSE ",\n{\"type\": \"dense\", \"units\": 10, \"filters\": 3}" TAIL,
                 TPU_EPARSE,
                 "m.json:5:32: layer 3 (dense): \"filters\" is not a key of a dense layer (it "
                 "is one of conv2d); the keys of a dense layer are \"type\", \"name\", "
                 "\"inputs\", \"units\", \"activation\", \"use_bias\"");
    expect_error(HEAD "{\"type\": \"flatten\", \"rate\": 0.5}" TAIL, TPU_EPARSE,
                 "m.json:3:21: layer 1 (flatten): \"rate\" is not a key of a flatten layer (it "
                 "is one of dropout); the keys of a flatten layer are \"type\", \"name\", "
                 "\"inputs\"");
}

static void test_wrong_types(void **state)
{
    (void)state;
    expect_error(HEAD "{\"type\": \"flatten\"},\n{\"type\": \"dense\", \"units\": \"10\"}" TAIL,
                 TPU_EPARSE,
                 "m.json:4:28: layer 2 (dense): \"units\" must be a whole number from 1 to "
                 "1048576; got the string \"10\" (write numbers without quotes)");
    expect_error(HEAD "{\"type\": \"flatten\"},\n{\"type\": \"dense\", \"units\": 10.0}" TAIL,
                 TPU_EPARSE,
                 "m.json:4:28: layer 2 (dense): \"units\" must be a whole number from 1 to "
                 "1048576; got 10.0 (write whole numbers without a decimal point)");
    expect_error(HEAD "{\"type\": \"dense\", \"units\": 4, \"use_bias\": \"no\"}" TAIL,
                 TPU_EPARSE,
                 "m.json:3:43: layer 1 (dense): \"use_bias\" must be true or false (without "
                 "quotes); got the string \"no\"");
    expect_error(HEAD "{\"type\": \"dense\", \"units\": 4, \"activation\": \"softmax\"}" TAIL,
                 TPU_EPARSE,
                 "m.json:3:45: layer 1 (dense): \"activation\" must be \"linear\" or \"relu\"; "
                 "got the string \"softmax\"");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": [3]}" TAIL,
                 TPU_EPARSE,
                 "m.json:3:49: layer 1 (conv2d): \"kernel_size\" must be a whole number n (for "
                 "n x n) or a pair [h, w]; got an array of 1");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": [3, \"3\"]}" TAIL,
                 TPU_EPARSE,
                 "m.json:3:53: layer 1 (conv2d): \"kernel_size\"'s w must be a whole number "
                 "from 1 to 4096; got the string \"3\" (write numbers without quotes)");
    expect_error(HEAD "{\"type\": \"max_pool2d\", \"padding\": \"SAME\"}" TAIL, TPU_EPARSE,
                 "m.json:3:35: layer 1 (max_pool2d): \"padding\" must be \"valid\" or \"same\"; "
                 "got the string \"SAME\"");
    expect_error(HEAD "{\"type\": \"relu\", \"inputs\": \"input\"}" TAIL, TPU_EINVAL,
                 "m.json:3:28: layer 1 (relu): \"inputs\" of a relu layer must list the one "
                 "layer it reads, such as [\"conv_1\"] (leave it out to read the layer before); "
                 "got the string \"input\"");
    expect_error(HEAD "{\"type\": \"relu\", \"inputs\": [3]}" TAIL, TPU_EPARSE,
                 "m.json:3:29: layer 1 (relu): \"inputs\"[0] must be the name of a layer above "
                 "(a string) or \"input\"; got 3");
    expect_error(HEAD "[\"flatten\"]" TAIL, TPU_EPARSE,
                 "m.json:3:1: layer 1: a layer must be an object such as {\"type\": \"dense\", "
                 "\"units\": 10}; got an array of 1");
    expect_error("{\"input\": [28, 28], \"layers\": [], \"loss\": \"x\"}", TPU_EPARSE,
                 "m.json:1:11: \"input\" must be a shape [h, w, c] (or [c] for a vector); got "
                 "an array of 2");
    expect_error("{\"input\": [1], \"layers\": {}, \"loss\": \"mean_squared_error\"}",
                 TPU_EPARSE,
                 "m.json:1:26: \"layers\" must be a list of 1 to 511 layers; got an object");
    expect_error("{\"input\": [1], \"layers\": [{\"type\": \"relu\"}], \"loss\": 1}",
                 TPU_EPARSE,
                 "m.json:1:54: \"loss\" must be \"softmax_cross_entropy\" or "
                 "\"mean_squared_error\"; got 1");
    expect_error("{\"input\": [1], \"layers\": [{\"type\": \"relu\"}], \"output\": 2, "
                 "\"loss\": \"mean_squared_error\"}",
                 TPU_EPARSE,
                 "m.json:1:56: \"output\" must be the name of the layer the loss reads (a "
                 "string); got 2");
    expect_error("{\"name\": 5, \"input\": [1]}", TPU_EPARSE,
                 "m.json:1:10: \"name\" must be a name of 1 to 31 letters, digits and '_', not "
                 "starting with a digit (such as \"conv_1\"); got 5");
    expect_error("{\"description\": [], \"input\": [1]}", TPU_EPARSE,
                 "m.json:1:17: \"description\" must be a string (it is not read); got an array "
                 "of 0");
    expect_error(HEAD "{\"type\": \"batch_norm\", \"cross_replica\": 1}" TAIL, TPU_EPARSE,
                 "m.json:3:41: layer 1 (batch_norm): \"cross_replica\" must be true or false "
                 "(without quotes); got 1");
    expect_error(HEAD "{\"type\": \"dropout\", \"rate\": \"0.5\"}" TAIL, TPU_EPARSE,
                 "m.json:3:29: layer 1 (dropout): \"rate\" must be a number at least 0 and less "
                 "than 1; got the string \"0.5\" (write numbers without quotes)");
}

static void test_out_of_range(void **state)
{
    (void)state;
    expect_error(HEAD FLAT_DENSE ",\n{\"type\": \"dense\", \"name\": \"dense_9\", \"units\": 0}"
                 TAIL, TPU_ERANGE,
                 "m.json:5:47: layer 3 'dense_9': \"units\" must be a whole number from 1 to "
                 "1048576; got 0");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 1048577, \"kernel_size\": 3}" TAIL,
                 TPU_ERANGE,
                 "m.json:3:31: layer 1 (conv2d): \"filters\" must be a whole number from 1 to "
                 "1048576; got 1048577");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 0}" TAIL,
                 TPU_ERANGE,
                 "m.json:3:49: layer 1 (conv2d): \"kernel_size\" must be a whole number from 1 "
                 "to 4096; got 0");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 8, \"kernel_size\": 3,\n"
                 " \"strides\": [1, 4097]}" TAIL, TPU_ERANGE,
                 "m.json:4:17: layer 1 (conv2d): \"strides\"'s w must be a whole number from 1 "
                 "to 4096; got 4097");
    expect_error(HEAD "{\"type\": \"dropout\", \"rate\": 1}" TAIL, TPU_ERANGE,
                 "m.json:3:29: layer 1 (dropout): \"rate\" must be a number at least 0 and less "
                 "than 1; got 1");
    /* a window the ops cannot index (kh*kw*c = 2^32), named by the builder */
    expect_error("{\"input\": [1, 1, 1048576], \"layers\": [{\"type\": \"max_pool2d\", "
                 "\"pool_size\": 64, \"padding\": \"same\"}, {\"type\": \"dense\", \"units\": "
                 "1}], \"loss\": \"mean_squared_error\"}", TPU_ESHAPE,
                 "m.json:1:39: layer 'max_pool2d' (max_pool2d): a 64 x 64 pool over 1048576 "
                 "channels holds "
                 "4294967296 elements (kh*kw*c), but the window ops take fewer than 2^32-1; use "
                 "a smaller pool or fewer channels in the layer before");
    /* the rule holds for the float the model keeps: these pass as doubles, not as floats */
    expect_error(HEAD "{\"type\": \"dropout\", \"rate\": 0.99999999}" TAIL, TPU_ERANGE,
                 "m.json:3:29: layer 1 (dropout): \"rate\" must be a number at least 0 and less "
                 "than 1; got 0.99999999, which is 1 as the 32-bit float the model keeps");
    expect_error(HEAD "{\"type\": \"batch_norm\", \"epsilon\": 1e-50}" TAIL, TPU_ERANGE,
                 "m.json:3:35: layer 1 (batch_norm): \"epsilon\" must be a number greater than "
                 "0 and at most 1; got 1e-50, which is 0 as the 32-bit float the model keeps");
    expect_error(HEAD "{\"type\": \"batch_norm\", \"epsilon\": 1e300}" TAIL, TPU_ERANGE,
                 "m.json:3:35: layer 1 (batch_norm): \"epsilon\" must be a number greater than "
                 "0 and at most 1; got 1e+300");
    expect_error(HEAD "{\"type\": \"batch_norm\", \"momentum\": 1.5}" TAIL, TPU_ERANGE,
                 "m.json:3:36: layer 1 (batch_norm): \"momentum\" must be a number at least 0 and "
                 "at most 1; got 1.5");
    expect_error(HEAD "{\"type\": \"batch_norm\", \"epsilon\": 0}" TAIL, TPU_ERANGE,
                 "m.json:3:35: layer 1 (batch_norm): \"epsilon\" must be a number greater than "
                 "0 and at most 1; got 0");
    expect_error(HEAD "{\"type\": \"reshape\", \"target_shape\": [0, 1, 784]}" TAIL, TPU_ERANGE,
                 "m.json:3:38: layer 1 (reshape): \"target_shape\"'s h must be a whole number "
                 "from 1 to 1048576; got 0");
    expect_error("{\"input\": [0, 28, 1]}", TPU_ERANGE,
                 "m.json:1:12: \"input\"'s h must be a whole number from 1 to 1048576; got 0");
    expect_error("{\"input\": [1], \"layers\": [], \"loss\": \"mean_squared_error\"}",
                 TPU_ERANGE,
                 "m.json:1:26: \"layers\" must be a list of 1 to 511 layers; got an array of 0");
    /* past the builder's own limit (2^30 elements), which names the fix */
    expect_error("{\"input\": [1048576, 1048576, 1], \"layers\": [{\"type\": \"relu\"}],"
                 " \"loss\": \"mean_squared_error\"}", TPU_EINVAL,
                 "m.json:1:11: net 'model': the input shape 1048576 x 1048576 x 1 is out of "
                 "range; each dimension must be at least 1 and the input at most 2^30 elements");
}

static void test_types_and_missing_keys(void **state)
{
    (void)state;
    expect_error(HEAD "{\"type\": \"Dense\", \"units\": 10}" TAIL, TPU_EPARSE,
                 "m.json:3:10: layer 1 (Dense): \"type\" must be \"dense\", \"conv2d\", "
                 "\"max_pool2d\", \"avg_pool2d\", \"global_avg_pool2d\", \"flatten\", "
                 "\"reshape\", \"relu\", \"dropout\", \"batch_norm\" or \"add\"; got the string "
                 "\"Dense\" (did you mean 'dense'?)");
    expect_error(HEAD "{\"type\": \"input\"}" TAIL, TPU_EPARSE,
                 "m.json:3:10: layer 1 (input): \"type\" \"input\" is not a layer: the input is "
                 "the model's \"input\" shape, and layers read it by the name \"input\"; remove "
                 "this layer");
    expect_error(HEAD "{\"units\": 10}" TAIL, TPU_EINVAL,
                 "m.json:3:1: layer 1: the layer has no \"type\"; give one of \"dense\", "
                 "\"conv2d\", \"max_pool2d\", \"avg_pool2d\", \"global_avg_pool2d\", "
                 "\"flatten\", \"reshape\", \"relu\", \"dropout\", \"batch_norm\", \"add\"");
    expect_error(HEAD "{\"type\": \"flatten\"},\n{\"type\": \"dense\"}" TAIL, TPU_EINVAL,
                 "m.json:4:1: layer 2 (dense): a dense layer needs \"units\": its output size, "
                 "a whole number from 1 to 1048576");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 8}" TAIL, TPU_EINVAL,
                 "m.json:3:1: layer 1 (conv2d): a conv2d layer needs \"kernel_size\": a whole "
                 "number n (for an n x n kernel) or [h, w]");
    expect_error(HEAD "{\"type\": \"conv2d\", \"kernel_size\": 3}" TAIL, TPU_EINVAL,
                 "m.json:3:1: layer 1 (conv2d): a conv2d layer needs \"filters\": its output "
                 "channels, a whole number from 1 to 1048576");
    expect_error(HEAD "{\"type\": \"dropout\"}" TAIL, TPU_EINVAL,
                 "m.json:3:1: layer 1 (dropout): a dropout layer needs \"rate\": the fraction "
                 "of elements dropped in training, a number at least 0 and less than 1");
    expect_error(HEAD "{\"type\": \"reshape\"}" TAIL, TPU_EINVAL,
                 "m.json:3:1: layer 1 (reshape): a reshape layer needs \"target_shape\": [h, w, "
                 "c] of the same size as its input");
    expect_error("{\"layers\": []}", TPU_EINVAL,
                 "m.json:1:1: the model has no \"input\"; give the shape of one example as [h, "
                 "w, c], such as \"input\": [28, 28, 1] (or [c] for a vector)");
    expect_error("{\"input\": [1], \"loss\": \"mean_squared_error\"}", TPU_EINVAL,
                 "m.json:1:1: the model has no \"layers\"; give a list of layers such as "
                 "\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]");
    expect_error("{\"input\": [1], \"layers\": [{\"type\": \"relu\"}]}", TPU_EINVAL,
                 "m.json:1:1: the model has no \"loss\"; add \"loss\": "
                 "\"softmax_cross_entropy\" (integer class labels) or \"mean_squared_error\" "
                 "(real targets)");
}

static void test_graph_errors(void **state)
{
    (void)state;
    /* unknown name, with the closest one */
    expect_error(HEAD "{\"name\": \"conv_a\", \"type\": \"conv2d\", \"filters\": 4, "
                 "\"kernel_size\": 3},\n{\"type\": \"relu\", \"inputs\": [\"conv_b\"]}" TAIL,
                 TPU_ENOTFOUND,
                 "m.json:4:29: layer 2 (relu): \"inputs\"[0] names 'conv_b', which no layer is "
                 "called (did you mean 'conv_a'?); the names defined so far are 'input', "
                 "'conv_a'");
    /* duplicate names, and the input's */
    expect_error(HEAD "{\"name\": \"a\", \"type\": \"relu\"},\n{\"name\": \"a\", \"type\": "
                 "\"relu\"}" TAIL, TPU_EINVAL,
                 "m.json:4:10: layer 2 'a': the name 'a' is taken by layer 1; give each layer "
                 "its own name");
    expect_error(HEAD "{\"name\": \"input\", \"type\": \"relu\"}" TAIL, TPU_EINVAL,
                 "m.json:3:10: layer 1 'input': the name 'input' is the input's; give the layer "
                 "another name");
    expect_error(HEAD "{\"type\": \"relu\"},\n{\"name\": \"relu\", \"type\": \"relu\"}" TAIL,
                 TPU_EINVAL,
                 "m.json:4:10: layer 2 'relu': the name 'relu' is taken by layer 1; give each "
                 "layer its own name");
    expect_error(HEAD "{\"name\": \"1st\", \"type\": \"relu\"}" TAIL, TPU_ERANGE,
                 "m.json:3:10: layer 1 '1st': \"name\" must be a name of 1 to 31 letters, "
                 "digits and '_', not starting with a digit (such as \"conv_1\"); got the "
                 "string \"1st\"");
    expect_error(HEAD "{\"name\": \"a_name_of_thirty_two_characters_\", \"type\": \"relu\"}"
                 TAIL, TPU_ERANGE,
                 "m.json:3:10: layer 1 'a_name_of_thirty_two_characters_': \"name\" must be a "
                 "name of 1 to 31 letters, digits and '_', not starting with a digit (such as "
                 "\"conv_1\"); got the string \"a_name_of_thirty_two_characters_\"");
    /* a cycle: a layer reading itself, or two reading each other (a forward reference) */
    expect_error(HEAD "{\"name\": \"a\", \"type\": \"relu\", \"inputs\": [\"a\"]}" TAIL,
                 TPU_EINVAL,
                 "m.json:3:42: layer 1 'a': \"inputs\"[0] names the layer itself ('a'): a model "
                 "is an acyclic graph; read an earlier layer, such as the one before it");
    expect_error(HEAD "{\"name\": \"a\", \"type\": \"relu\", \"inputs\": [\"b\"]},\n"
                 "{\"name\": \"b\", \"type\": \"relu\", \"inputs\": [\"a\"]}" TAIL,
                 TPU_EINVAL,
                 "m.json:3:42: layer 1 'a': \"inputs\"[0] names 'b', which is layer 2, further "
                 "down the file: a layer can read only layers above it (so no cycle can be "
                 "written); move layer 2 above this one");
    /* add: two inputs, no fewer; the others one */
    expect_error(HEAD "{\"type\": \"relu\"},\n{\"type\": \"add\", \"inputs\": [\"relu\"]}" TAIL,
                 TPU_EINVAL,
                 "m.json:4:27: layer 2 (add): \"inputs\" of an add layer must list the two "
                 "layers it sums, such as [\"conv_2\", \"input\"]; got an array of 1");
    expect_error(HEAD "{\"type\": \"relu\"},\n{\"type\": \"add\"}" TAIL, TPU_EINVAL,
                 "m.json:4:1: layer 2 (add): an add layer needs \"inputs\": the names of the "
                 "two layers it sums, such as [\"conv_2\", \"input\"]");
    expect_error(HEAD "{\"type\": \"relu\"},\n{\"type\": \"relu\", \"inputs\": [\"relu\", "
                 "\"input\"]}" TAIL, TPU_EINVAL,
                 "m.json:4:28: layer 2 (relu): \"inputs\" of a relu layer must list the one "
                 "layer it reads, such as [\"conv_1\"] (leave it out to read the layer before); "
                 "got an array of 2");
    /* the output: unknown, or the input itself */
    expect_error("{\"input\": [4], \"layers\": [{\"type\": \"relu\"}], \"output\": \"relu_1\","
                 "\n \"loss\": \"mean_squared_error\"}", TPU_ENOTFOUND,
                 "m.json:1:56: \"output\" names 'relu_1', which no layer is called (did you "
                 "mean 'relu'?); the names defined so far are 'input', 'relu'");
    expect_error("{\"input\": [4], \"layers\": [{\"type\": \"relu\"}], \"output\": \"input\","
                 "\n \"loss\": \"mean_squared_error\"}", TPU_EINVAL,
                 "m.json:1:56: net 'model': the output is the input itself; add layers and name "
                 "the last one the output");
}

/* The builder's shape errors, prefixed with the place of the layer. */
static void test_shape_errors(void **state)
{
    (void)state;
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 29}" TAIL,
                 TPU_ESHAPE,
                 "m.json:3:1: layer 'conv2d' (conv2d): a 29 x 29 kernel does not fit its 28 x "
                 "28 x 1 input with padding valid; use padding same, or a kernel of at most 28 "
                 "x 28");
    expect_error(HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": "
                 "3},\n{\"type\": \"add\", \"inputs\": [\"c\", \"input\"]}" TAIL, TPU_ESHAPE,
                 "m.json:4:1: layer 'add' (add): its inputs 'c' (26 x 26 x 4) and 'input' (28 x "
                 "28 x 1) differ in shape; add needs two tensors of one shape (project the "
                 "shortcut with a 1 x 1 conv2d, or pool it, to match)");
    expect_error(HEAD "{\"type\": \"reshape\", \"target_shape\": [28, 28, 2]}" TAIL, TPU_ESHAPE,
                 "m.json:3:1: layer 'reshape' (reshape): target 28 x 28 x 2 (1568 elements) "
                 "does not hold the 28 x 28 x 1 input (784 elements); give a target with every "
                 "dimension at least 1 and h*w*c = 784");
    expect_error(HEAD "{\"type\": \"conv2d\", \"filters\": 10, \"kernel_size\": 3}" TAIL,
                 TPU_ESHAPE,
                 "m.json:1:32: net 'model': softmax cross-entropy reads one score per class, a "
                 "1 x 1 x K tensor, but output 'conv2d' is 26 x 26 x 10; add flatten or "
                 "global_avg_pool2d (then a dense layer with one unit per class) before the "
                 "output");
}

static void test_files(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_net *net = NULL;
    assert_int_equal(tpu_net_load_file("/nonexistent/m.json", &net, &d), TPU_EIO);
    assert_string_equal(d.msg, "cannot open model file '/nonexistent/m.json': No such file or "
                               "directory");
    assert_null(net);
    assert_int_equal(tpu_net_load_file("/", &net, &d), TPU_EIO);
    assert_string_equal(d.msg, "'/' is a directory; give a JSON model file such as "
                               "configs/models/cnn.json");

    char dir[] = "/tmp/tpusim-model-file-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/empty.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(tpu_net_load_file(path, &net, &d), TPU_EPARSE);
    assert_string_equal(d.msg + strlen(dir), "/empty.json is empty; a model file is a JSON "
                                             "object such as configs/models/cnn.json");
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(HEAD "{\"type\": \"conv2d\", \"filters\": 4, \"kernel_size\": 3, \"padding\": 1}"
          TAIL, f);
    fclose(f);
    assert_int_equal(tpu_net_load_file(path, &net, &d), TPU_EPARSE);
    assert_string_equal(d.msg + strlen(dir), "/empty.json:3:63: layer 1 (conv2d): \"padding\" "
                                             "must be \"valid\" or \"same\"; got 1");
    assert_null(net);
    /* one byte past the limit (a sparse file: its bytes are zeros) */
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (16 << 20) + 1), 0);
    fclose(f);
    assert_int_equal(tpu_net_load_file(path, &net, &d), TPU_EIO);
    assert_string_equal(d.msg + 12 + strlen(dir), "/empty.json' is larger than 16777216 bytes; a "
                        "model file is JSON of at most 511 layers (ResNet-50's is 15 KB): is "
                        "this the right file?");
    assert_memory_equal(d.msg, "model file '", 12);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);

    assert_int_equal(tpu_net_load_file(NULL, &net, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "tpu_net_load_file needs a path and an output pointer (got "
                               "NULL)");
    assert_int_equal(tpu_net_parse_json(NULL, 0, NULL, &net, &d), TPU_EINVAL);
    assert_string_equal(d.msg, "<string>: tpu_net_parse_json needs JSON text (got NULL)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cnn_file),
        cmocka_unit_test(test_resnet_small_file),
        cmocka_unit_test(test_resnet50_file),
        cmocka_unit_test(test_resnet50_memory),
        cmocka_unit_test(test_keys_and_defaults),
        cmocka_unit_test(test_vector_input_and_escapes),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_locations),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_types_and_missing_keys),
        cmocka_unit_test(test_graph_errors),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
