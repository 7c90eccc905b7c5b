/* Layer graphs (tpusim/net.h): the builder's shapes, names, parameter and FLOP counts and
 * every error it gives; the training spec's defaults and checks; the lowering to programs
 * (every mode verifies on tiny and tpu-v3, op_layer covers every op) and training through
 * the estimator (a small CNN and a small residual net with batch norm and dropout learn the
 * toy dataset; the same seed gives the same params bit for bit, on 1 and 2 threads). The
 * values and gradients of each layer against a naive double reference are in
 * test_net_ref.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"
#include "toy_dataset.h"

/* The build shape of R = global / per_replica replicas (at least one) of one core each. */
#define DATA_SHAPE(per_replica, global)                                                       \
    (&(struct tpu_build_shape){.batch_per_replica = (per_replica), .global_batch = (global), \
                               .n_replicas = (global) >= (per_replica)                     \
                                                 ? (global) / (per_replica) : 1,           \
                               .cores_per_replica = 1})

/* Asserts that msg contains every one of the NULL-terminated strings. */
static void assert_has(const char *msg, ...)
{
    va_list ap;
    va_start(ap, msg);
    for (const char *s; (s = va_arg(ap, const char *));) {
        if (!strstr(msg, s))
            fail_msg("message lacks \"%s\": %s", s, msg);
    }
    va_end(ap);
}

static struct tpu_shape shape_of(const struct tpu_net *n, uint32_t id)
{
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(n, id, &li), 0);
    return li.out;
}

static void assert_shape(const struct tpu_net *n, uint32_t id, uint32_t h, uint32_t w,
                         uint32_t c)
{
    struct tpu_shape s = shape_of(n, id);
    if (s.h != h || s.w != w || s.c != c)
        fail_msg("tensor %u is %u x %u x %u, expected %u x %u x %u", id, s.h, s.w, s.c, h, w, c);
}

/* The classic Keras MNIST CNN: Keras's summary gives 320, 18496, 0, 0, 1179776, 1290
 * params (1,199,882 in all). */
static void test_keras_cnn_counts(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_net *n;
    uint32_t t[8];
    assert_int_equal(tpu_net_create("cnn", 28, 28, 1, &n, &d), 0);
    assert_int_equal(tpu_net_conv2d(n, NULL, 0, 32, 3, 3, 1, TPU_PADDING_VALID, TPU_ACT_RELU,
                                    &t[1], &d), 0);
    assert_int_equal(tpu_net_conv2d(n, "", t[1], 64, 3, 3, 1, TPU_PADDING_VALID, TPU_ACT_RELU,
                                    &t[2], &d), 0);
    assert_int_equal(tpu_net_pool2d(n, NULL, TPU_LAYER_MAX_POOL2D, t[2], 2, 0,
                                    TPU_PADDING_VALID, &t[3], &d), 0);
    assert_int_equal(tpu_net_unary(n, NULL, TPU_LAYER_FLATTEN, t[3], &t[4], &d), 0);
    assert_int_equal(tpu_net_dense(n, NULL, t[4], 128, TPU_ACT_RELU, &t[5], &d), 0);
    assert_int_equal(tpu_net_dense(n, NULL, t[5], 10, TPU_ACT_NONE, &t[6], &d), 0);
    assert_int_equal(tpu_net_set_output(n, t[6], TPU_LOSS_SOFTMAX_XENT, &d), 0);

    assert_int_equal(tpu_net_n_layers(n), 7);
    static const char *names[] = {"input", "conv2d", "conv2d_1", "max_pool2d", "flatten",
                                  "dense", "dense_1"};
    static const uint64_t params[] = {0, 320, 18496, 0, 0, 1179776, 1290};
    uint64_t total = 0;
    for (uint32_t i = 0; i < 7; i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(n, i, &li), 0);
        assert_string_equal(li.name, names[i]);
        assert_int_equal(li.params, params[i]);
        assert_int_equal(li.non_trainable, 0);
        total += li.params;
    }
    assert_int_equal(total, 1199882);
    assert_shape(n, 1, 26, 26, 32);
    assert_shape(n, 2, 24, 24, 64);
    assert_shape(n, 3, 12, 12, 64);
    assert_shape(n, 4, 1, 1, 9216);
    assert_shape(n, 6, 1, 1, 10);

    /* FLOPs: 2 per MAC and one add per output for the bias */
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(n, 1, &li), 0);
    assert_int_equal(li.flops, 2ull * 26 * 26 * 9 * 32 + 26 * 26 * 32);
    assert_int_equal(tpu_net_layer(n, 5, &li), 0);
    assert_int_equal(li.flops, 2ull * 9216 * 128 + 128);
    assert_int_equal(tpu_net_layer(n, 3, &li), 0); /* max pool: one per window element */
    assert_int_equal(li.flops, 12ull * 12 * 64 * 4);
    assert_int_equal(li.desc.sh, 2); /* the pool's default stride: its size */
    assert_int_equal(tpu_net_layer(n, 4, &li), 0);
    assert_int_equal(li.flops, 0);
    assert_int_equal(li.n_in, 1);
    assert_int_equal(li.in[0], 3);

    uint32_t out;
    enum tpu_loss loss;
    assert_int_equal(tpu_net_output(n, &out, &loss), 0);
    assert_int_equal(out, 6);
    assert_int_equal(loss, TPU_LOSS_SOFTMAX_XENT);
    uint32_t id;
    assert_int_equal(tpu_net_find(n, "conv2d_1", &id), 0);
    assert_int_equal(id, 2);
    assert_int_equal(tpu_net_find(n, "input", &id), 0);
    assert_int_equal(id, 0);
    assert_int_equal(tpu_net_find(n, "conv2d_2", &id), TPU_ENOTFOUND);
    assert_string_equal(tpu_net_name(n), "cnn");
    assert_int_equal(tpu_net_layer(n, 7, &li), TPU_EINVAL);
    tpu_net_destroy(&n);
    assert_null(n);
    tpu_net_destroy(&n); /* NULL is fine */
}

/* Output sizes of 'same' and 'valid' for odd sizes and stride 2, as Keras computes them. */
static void test_window_sizes(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_net *n;
    uint32_t t;
    assert_int_equal(tpu_net_create("w", 7, 8, 3, &n, &d), 0);
    /* valid: floor((n - k) / s) + 1 */
    assert_int_equal(tpu_net_conv2d(n, "v", 0, 4, 3, 3, 2, TPU_PADDING_VALID, TPU_ACT_NONE,
                                    &t, &d), 0);
    assert_shape(n, t, 3, 3, 4);
    /* same: ceil(n / s) */
    assert_int_equal(tpu_net_conv2d(n, "s", 0, 4, 3, 3, 2, TPU_PADDING_SAME, TPU_ACT_NONE,
                                    &t, &d), 0);
    assert_shape(n, t, 4, 4, 4);
    assert_int_equal(tpu_net_conv2d(n, "s1", 0, 5, 5, 5, 1, TPU_PADDING_SAME, TPU_ACT_NONE,
                                    &t, &d), 0);
    assert_shape(n, t, 7, 8, 5);
    assert_int_equal(tpu_net_pool2d(n, "mp", TPU_LAYER_MAX_POOL2D, 0, 2, 0, TPU_PADDING_VALID,
                                    &t, &d), 0);
    assert_shape(n, t, 3, 4, 3);
    assert_int_equal(tpu_net_pool2d(n, "ap", TPU_LAYER_AVG_POOL2D, 0, 2, 0, TPU_PADDING_SAME,
                                    &t, &d), 0);
    assert_shape(n, t, 4, 4, 3);
    assert_int_equal(tpu_net_pool2d(n, "mp3", TPU_LAYER_MAX_POOL2D, 0, 3, 2, TPU_PADDING_SAME,
                                    &t, &d), 0);
    assert_shape(n, t, 4, 4, 3);
    assert_int_equal(tpu_net_unary(n, "gap", TPU_LAYER_GLOBAL_AVG_POOL2D, t, &t, &d), 0);
    assert_shape(n, t, 1, 1, 3);

    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_CONV2D); /* asymmetric kernel and strides */
    l.filters = 2;
    l.kh = 1;
    l.kw = 4;
    l.sh = 3;
    l.sw = 1;
    uint32_t in = 0;
    assert_int_equal(tpu_net_add(n, &l, &in, 1, &t, &d), 0);
    assert_shape(n, t, 3, 5, 2);
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(n, t, &li), 0);
    assert_string_equal(li.name, "conv2d");
    assert_int_equal(li.params, 1 * 4 * 3 * 2 + 2);
    l.use_bias = false;
    assert_int_equal(tpu_net_add(n, &l, &in, 1, &t, &d), 0);
    assert_int_equal(tpu_net_layer(n, t, &li), 0);
    assert_string_equal(li.name, "conv2d_1");
    assert_int_equal(li.params, 1 * 4 * 3 * 2);

    /* dense on an image applies per pixel; reshape, batch norm's counts, add */
    assert_int_equal(tpu_net_dense(n, "pix", 0, 6, TPU_ACT_RELU, &t, &d), 0);
    assert_shape(n, t, 7, 8, 6);
    assert_int_equal(tpu_net_layer(n, t, &li), 0);
    assert_int_equal(li.params, 3 * 6 + 6);
    assert_int_equal(li.flops, 2ull * 56 * 3 * 6 + 56 * 6);
    tpu_layer_desc_init(&l, TPU_LAYER_RESHAPE);
    l.target = (struct tpu_shape){14, 4, 6};
    assert_int_equal(tpu_net_add(n, &l, &t, 1, &t, &d), 0);
    assert_shape(n, t, 14, 4, 6);
    uint32_t bn;
    assert_int_equal(tpu_net_batch_norm(n, NULL, t, true, &bn, &d), 0);
    assert_int_equal(tpu_net_layer(n, bn, &li), 0);
    assert_string_equal(li.name, "batch_norm");
    assert_int_equal(li.params, 12);
    assert_int_equal(li.non_trainable, 12);
    assert_true(li.desc.cross_replica);
    assert_true(li.desc.momentum == 0.99f);
    assert_true(li.desc.epsilon == 0.001f);
    uint32_t sum;
    assert_int_equal(tpu_net_add2(n, NULL, t, bn, &sum, &d), 0);
    assert_int_equal(tpu_net_layer(n, sum, &li), 0);
    assert_string_equal(li.name, "add");
    assert_int_equal(li.n_in, 2);
    assert_int_equal(li.in[0], t);
    assert_int_equal(li.in[1], bn);
    assert_int_equal(tpu_net_set_output(n, sum, TPU_LOSS_MSE, &d), 0);
    tpu_net_destroy(&n);
}

/* An automatic name skips one a user took; layer kind names round-trip. */
static void test_names(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_net *n;
    uint32_t a, b, c;
    assert_int_equal(tpu_net_create("names", 1, 1, 4, &n, &d), 0);
    assert_int_equal(tpu_net_dense(n, "dense_1", 0, 3, TPU_ACT_NONE, &a, &d), 0);
    assert_int_equal(tpu_net_dense(n, NULL, a, 3, TPU_ACT_NONE, &b, &d), 0);
    assert_int_equal(tpu_net_dense(n, NULL, b, 3, TPU_ACT_NONE, &c, &d), 0);
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(n, b, &li), 0);
    assert_string_equal(li.name, "dense");
    assert_int_equal(tpu_net_layer(n, c, &li), 0);
    assert_string_equal(li.name, "dense_2");
    assert_int_equal(tpu_net_dropout(n, NULL, c, 0.25f, &c, &d), 0);
    assert_int_equal(tpu_net_layer(n, c, &li), 0);
    assert_string_equal(li.name, "dropout");
    assert_true(li.desc.rate == 0.25f);
    for (int k = 0; k < TPU_LAYER_KIND_COUNT; k++) {
        enum tpu_layer_kind got;
        assert_int_equal(tpu_layer_kind_parse(tpu_layer_kind_name((enum tpu_layer_kind)k),
                                              &got), 0);
        assert_int_equal(got, k);
    }
    assert_null(tpu_layer_kind_name(TPU_LAYER_KIND_COUNT));
    enum tpu_layer_kind got;
    assert_int_equal(tpu_layer_kind_parse("conv3d", &got), TPU_ENOTFOUND);
    assert_string_equal(tpu_layer_kind_name(TPU_LAYER_GLOBAL_AVG_POOL2D), "global_avg_pool2d");
    tpu_net_destroy(&n);
}

/* Every shape error names the layer, the shapes and the fix, and adds nothing. */
static void test_shape_errors(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_net *n;
    uint32_t t, x;
    assert_int_equal(tpu_net_create("errs", 5, 5, 2, &n, &d), 0);

    assert_int_equal(tpu_net_conv2d(n, "big", 0, 4, 7, 3, 1, TPU_PADDING_VALID, TPU_ACT_NONE,
                                    &t, &d), TPU_ESHAPE);
    assert_has(d.msg, "'big'", "conv2d", "7 x 3 kernel", "5 x 5 x 2 input", "padding same",
               "at most 5 x 5", NULL);
    assert_int_equal(tpu_net_pool2d(n, NULL, TPU_LAYER_MAX_POOL2D, 0, 6, 0, TPU_PADDING_VALID,
                                    &t, &d), TPU_ESHAPE);
    assert_has(d.msg, "'max_pool2d'", "6 x 6 pool", "5 x 5 x 2", "padding same", NULL);
    assert_int_equal(tpu_net_n_layers(n), 1);

    /* the failed automatic name is not used up */
    assert_int_equal(tpu_net_pool2d(n, NULL, TPU_LAYER_MAX_POOL2D, 0, 2, 0, TPU_PADDING_SAME,
                                    &x, &d), 0);
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(n, x, &li), 0);
    assert_string_equal(li.name, "max_pool2d");
    assert_shape(n, x, 3, 3, 2);

    assert_int_equal(tpu_net_add2(n, "res", 0, x, &t, &d), TPU_ESHAPE);
    assert_has(d.msg, "'res' (add)", "'input' (5 x 5 x 2)", "'max_pool2d' (3 x 3 x 2)",
               "1 x 1 conv2d", NULL);

    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_RESHAPE);
    strcpy(l.name, "rs");
    l.target = (struct tpu_shape){4, 4, 3};
    assert_int_equal(tpu_net_add(n, &l, &x, 1, &t, &d), TPU_ESHAPE);
    assert_has(d.msg, "'rs' (reshape)", "4 x 4 x 3 (48 elements)", "3 x 3 x 2 input (18",
               "h*w*c = 18", NULL);

    uint32_t flat, dense;
    assert_int_equal(tpu_net_dense(n, "pix", x, 10, TPU_ACT_NONE, &dense, &d), 0);
    assert_int_equal(tpu_net_set_output(n, dense, TPU_LOSS_SOFTMAX_XENT, &d), TPU_ESHAPE);
    assert_has(d.msg, "'pix' is 3 x 3 x 10", "1 x 1 x K", "add flatten or global_avg_pool2d",
               NULL);
    assert_int_equal(tpu_net_output(n, &t, NULL), TPU_EINVAL);
    assert_int_equal(tpu_net_unary(n, NULL, TPU_LAYER_FLATTEN, x, &flat, &d), 0);
    assert_int_equal(tpu_net_dense(n, "one", flat, 1, TPU_ACT_NONE, &dense, &d), 0);
    assert_int_equal(tpu_net_set_output(n, dense, TPU_LOSS_SOFTMAX_XENT, &d), TPU_ESHAPE);
    assert_has(d.msg, "at least 2 classes", "'one' is 1 x 1 x 1",
               "mean_squared_error (TPU_LOSS_MSE)", NULL);
    assert_int_equal(tpu_net_set_output(n, dense, TPU_LOSS_MSE, &d), 0);
    assert_int_equal(tpu_net_set_output(n, 0, TPU_LOSS_MSE, &d), TPU_EINVAL);
    assert_has(d.msg, "the output is the input", NULL);
    assert_int_equal(tpu_net_set_output(n, 99, TPU_LOSS_MSE, &d), TPU_EINVAL);
    assert_has(d.msg, "tensor 99 does not exist", NULL);

    /* arguments */
    uint32_t before = tpu_net_n_layers(n);
    assert_int_equal(tpu_net_dense(n, "pix", x, 3, TPU_ACT_NONE, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "'pix' is taken", "another name", NULL);
    assert_int_equal(tpu_net_dense(n, "input", x, 3, TPU_ACT_NONE, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "taken by the input", NULL);
    assert_int_equal(tpu_net_dense(n, "9lives", x, 3, TPU_ACT_NONE, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "'9lives' is not an identifier", NULL);
    assert_int_equal(tpu_net_dense(n, "a_name_of_thirty_two_characters_", x, 3, TPU_ACT_NONE,
                                   &t, &d), TPU_EINVAL);
    assert_has(d.msg, "not NUL-terminated within 31", NULL);
    assert_int_equal(tpu_net_dense(n, NULL, 42, 3, TPU_ACT_NONE, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "input tensor 42 does not exist", "tensors 0 to", NULL);
    assert_int_equal(tpu_net_dense(n, NULL, x, 0, TPU_ACT_NONE, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "(dense): units 0 is out of range", "use 1 to", NULL);
    assert_int_equal(tpu_net_dense(n, NULL, x, 3, (enum tpu_activation)7, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "activation 7", "none nor relu", NULL);
    assert_int_equal(tpu_net_conv2d(n, "c", x, 0, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, &t,
                                    &d), TPU_EINVAL);
    assert_has(d.msg, "'c' (conv2d): filters 0", NULL);
    assert_int_equal(tpu_net_conv2d(n, "c", x, 2, 0, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, &t,
                                    &d), TPU_EINVAL);
    assert_has(d.msg, "'c' (conv2d): kernel size 0 x 3", NULL);
    assert_int_equal(tpu_net_conv2d(n, "c", x, 2, 3, 3, 1, (enum tpu_padding)5, TPU_ACT_NONE,
                                    &t, &d), TPU_EINVAL);
    assert_has(d.msg, "padding 5 is neither valid nor same", NULL);
    assert_int_equal(tpu_net_dropout(n, "dr", x, 1.0f, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "'dr' (dropout): rate 1 is outside [0, 1)", NULL);
    assert_int_equal(tpu_net_dropout(n, "dr", x, NAN, &t, &d), TPU_EINVAL);
    tpu_layer_desc_init(&l, TPU_LAYER_BATCH_NORM);
    l.epsilon = 0;
    assert_int_equal(tpu_net_add(n, &l, &x, 1, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "'batch_norm' (batch_norm): epsilon 0 must be above 0", NULL);
    tpu_layer_desc_init(&l, TPU_LAYER_BATCH_NORM);
    l.momentum = 1.5f;
    assert_int_equal(tpu_net_add(n, &l, &x, 1, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "momentum 1.5 is outside [0, 1]", NULL);
    tpu_layer_desc_init(&l, TPU_LAYER_ADD);
    assert_int_equal(tpu_net_add(n, &l, &x, 1, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "'add' (add) reads 2 input tensors, not 1", NULL);
    tpu_layer_desc_init(&l, TPU_LAYER_INPUT);
    assert_int_equal(tpu_net_add(n, &l, &x, 1, &t, &d), TPU_EINVAL);
    assert_has(d.msg, "cannot be added", NULL);
    assert_int_equal(tpu_net_unary(n, NULL, TPU_LAYER_DENSE, x, &t, &d), TPU_EINVAL);
    assert_int_equal(tpu_net_pool2d(n, NULL, TPU_LAYER_RELU, x, 2, 2, TPU_PADDING_SAME, &t, &d),
                     TPU_EINVAL);
    assert_int_equal(tpu_net_n_layers(n), before);
    tpu_net_destroy(&n);

    assert_int_equal(tpu_net_create("1x", 1, 1, 1, &n, &d), TPU_EINVAL);
    assert_has(d.msg, "net name '1x' is not an identifier", NULL);
    assert_null(n);
    assert_int_equal(tpu_net_create("z", 0, 1, 1, &n, &d), TPU_EINVAL);
    assert_has(d.msg, "input shape 0 x 1 x 1 is out of range", NULL);

    /* the layer limit */
    assert_int_equal(tpu_net_create("deep", 1, 1, 2, &n, &d), 0);
    t = 0;
    for (int i = 1; i < TPU_NET_MAX_LAYERS; i++)
        assert_int_equal(tpu_net_unary(n, NULL, TPU_LAYER_RELU, t, &t, &d), 0);
    assert_int_equal(tpu_net_unary(n, NULL, TPU_LAYER_RELU, t, &t, &d), TPU_ERANGE);
    assert_has(d.msg, "already has 512 layers", NULL);
    tpu_net_destroy(&n);
}

static void test_train_spec(void **state)
{
    (void)state;
    struct tpu_diag d;
    struct tpu_train_spec s, t;
    tpu_train_spec_default(&s);
    assert_int_equal(s.optimizer, TPU_OPT_ADAM);
    assert_true(s.learning_rate == 0.001f && s.beta1 == 0.9f && s.beta2 == 0.999f);
    assert_true(s.epsilon == 1e-7f && s.momentum == 0.9f && s.weight_decay == 0.004f);
    assert_int_equal(s.passes, 1);
    assert_int_equal(s.schedule, TPU_SCHEDULE_CONSTANT);
    assert_int_equal(tpu_train_spec_check(&s, &d), 0);

#define BAD(field, value, ...)                                                                 \
    do {                                                                                       \
        t = s;                                                                                 \
        t.field = value;                                                                       \
        assert_int_equal(tpu_train_spec_check(&t, &d), TPU_EINVAL);                            \
        assert_has(d.msg, __VA_ARGS__, NULL);                                                  \
    } while (0)
    BAD(passes, 2, "passes 2", "use 1", NULL);
    BAD(optimizer, (enum tpu_optimizer)9, "optimizer 9", "adamw", NULL);
    BAD(learning_rate, 0.0f, "learning rate 0 must be above 0", NULL);
    BAD(beta1, 1.0f, "beta1 1", "[0, 1)", NULL);
    BAD(epsilon, 0.0f, "epsilon 0", NULL);
    BAD(l2, -1.0f, "l2 -1", NULL);
    BAD(schedule, TPU_SCHEDULE_STEP, "step schedule needs decay_steps >= 1", NULL);
    BAD(schedule, (enum tpu_lr_schedule)4, "schedule 4", "cosine", NULL);
    BAD(warmup_steps, 10, "warmup_steps 10 needs the cosine schedule", NULL);
    s.optimizer = TPU_OPT_SGD_MOMENTUM;
    BAD(momentum, 1.0f, "momentum 1 must be in [0, 1)", NULL);
    s.optimizer = TPU_OPT_ADAMW;
    BAD(weight_decay, -0.5f, "weight decay -0.5", NULL);
    BAD(l2, 0.1f, "l2 0.1 with adamw", "weight_decay", NULL);
    s.schedule = TPU_SCHEDULE_COSINE;
    s.decay_steps = 100;
    s.warmup_steps = 10;
    assert_int_equal(tpu_train_spec_check(&s, &d), 0);
    BAD(decay_rate, 2.0f, "cosine schedule's decay_rate 2", NULL);
    s.schedule = TPU_SCHEDULE_STEP;
    s.warmup_steps = 0;
    s.decay_rate = 0.5f;
    assert_int_equal(tpu_train_spec_check(&s, &d), 0);
    BAD(decay_rate, 0.0f, "step schedule's decay_rate 0", NULL);
#undef BAD
    /* the enum's numbers are the op attribute's (ops11.md) */
    assert_int_equal(TPU_SCHEDULE_CONSTANT, 0);
    assert_int_equal(TPU_SCHEDULE_STEP, 1);
    assert_int_equal(TPU_SCHEDULE_COSINE, 2);
}

/* ---- lowering -------------------------------------------------------------------------- */

#define OK(call)                                                                               \
    do {                                                                                       \
        struct tpu_diag d_ = {0};                                                              \
        int rc_ = (call);                                                                      \
        if (rc_)                                                                               \
            fail_msg("%s: %s (%s)", #call, d_.msg, tpu_err_name(rc_));                         \
    } while (0)
#define D (&d_)

/* A small CNN for the toy dataset (4 x 4 x 1 images, 4 classes). */
static struct tpu_net *toy_cnn(void)
{
    struct tpu_net *n = NULL;
    uint32_t t;
    OK(tpu_net_create("toy_cnn", 4, 4, 1, &n, D));
    OK(tpu_net_conv2d(n, NULL, 0, 8, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, &t, D));
    OK(tpu_net_pool2d(n, NULL, TPU_LAYER_MAX_POOL2D, t, 2, 0, TPU_PADDING_VALID, &t, D));
    OK(tpu_net_unary(n, NULL, TPU_LAYER_FLATTEN, t, &t, D));
    OK(tpu_net_dense(n, NULL, t, 4, TPU_ACT_NONE, &t, D));
    OK(tpu_net_set_output(n, t, TPU_LOSS_SOFTMAX_XENT, D));
    return n;
}

/* A residual block with batch norm (the second one cross-replica), a shortcut read twice,
 * average pooling, a 1 x 1 convolution, dropout and global average pooling. Batch norm's
 * momentum is 0.9 so that the moving statistics settle within the tests' few steps. */
static struct tpu_net *toy_resnet(float rate)
{
    struct tpu_net *n = NULL;
    uint32_t c1, b1, r1, c2, b2, a, t;
    OK(tpu_net_create("toy_resnet", 4, 4, 1, &n, D));
    OK(tpu_net_conv2d(n, NULL, 0, 8, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, &c1, D));
    struct tpu_layer_desc l;
    tpu_layer_desc_init(&l, TPU_LAYER_BATCH_NORM);
    l.momentum = 0.9f;
    OK(tpu_net_add(n, &l, &c1, 1, &b1, D));
    OK(tpu_net_unary(n, NULL, TPU_LAYER_RELU, b1, &r1, D));
    OK(tpu_net_conv2d(n, NULL, r1, 8, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, &c2, D));
    l.cross_replica = true;
    OK(tpu_net_add(n, &l, &c2, 1, &b2, D));
    OK(tpu_net_add2(n, NULL, r1, b2, &a, D));
    OK(tpu_net_unary(n, NULL, TPU_LAYER_RELU, a, &t, D));
    OK(tpu_net_pool2d(n, NULL, TPU_LAYER_AVG_POOL2D, t, 2, 0, TPU_PADDING_VALID, &t, D));
    OK(tpu_net_conv2d(n, NULL, t, 8, 1, 1, 1, TPU_PADDING_VALID, TPU_ACT_RELU, &t, D));
    OK(tpu_net_dropout(n, NULL, t, rate, &t, D));
    OK(tpu_net_unary(n, NULL, TPU_LAYER_GLOBAL_AVG_POOL2D, t, &t, D));
    OK(tpu_net_dense(n, NULL, t, 4, TPU_ACT_NONE, &t, D));
    OK(tpu_net_set_output(n, t, TPU_LOSS_SOFTMAX_XENT, D));
    return n;
}

/* A regression net with an image output: the input read by a strided conv2d (conv2d) and a
 * per-pixel dense layer (rows), a reshape, a dead branch the loss does not read. */
static struct tpu_net *toy_mse(void)
{
    struct tpu_net *n = NULL;
    uint32_t a, b, t;
    struct tpu_layer_desc l;
    OK(tpu_net_create("toy_mse", 4, 4, 1, &n, D));
    OK(tpu_net_conv2d(n, NULL, 0, 2, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, &a, D));
    OK(tpu_net_dense(n, NULL, 0, 2, TPU_ACT_NONE, &b, D));
    OK(tpu_net_add2(n, NULL, a, b, &t, D));
    OK(tpu_net_dense(n, "dead", t, 3, TPU_ACT_NONE, NULL, D));
    tpu_layer_desc_init(&l, TPU_LAYER_RESHAPE);
    l.target = (struct tpu_shape){4, 4, 2}; /* a copy: the same shape */
    OK(tpu_net_add(n, &l, &t, 1, &t, D));
    OK(tpu_net_conv2d(n, "head", t, 1, 2, 2, 2, TPU_PADDING_VALID, TPU_ACT_NONE, &t, D));
    OK(tpu_net_set_output(n, t, TPU_LOSS_MSE, D));
    return n;
}

static void check_op_layer(const struct tpu_net *n, enum tpu_mode mode,
                           const struct tpu_program *p, const uint32_t *op_layer)
{
    const size_t n_ops = tpu_program_n_ops(p);
    const uint32_t L = tpu_net_n_layers(n);
    uint32_t *per = calloc(L, sizeof *per);
    assert_non_null(per);
    size_t n_loss = 0;
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *o = tpu_program_op(p, i);
        uint32_t t = op_layer[i];
        switch (o->code) {
        case TPU_OP_LOOP_BEGIN:
        case TPU_OP_LOOP_END:
        case TPU_OP_INFEED:
        case TPU_OP_OUTFEED:
        case TPU_OP_VAR_ADD:
            assert_int_equal(t, TPU_NET_OP_STEP);
            break;
        case TPU_OP_SOFTMAX_XENT:
        case TPU_OP_MSE:
        case TPU_OP_CLASSIFY_COUNT:
        case TPU_OP_COUNT_ROWS:
            assert_int_equal(t, TPU_NET_OP_LOSS);
            break;
        case TPU_OP_MATMUL:
        case TPU_OP_CONV2D:
        case TPU_OP_CONV2D_GRAD_INPUT:
        case TPU_OP_CONV2D_GRAD_FILTER:
        case TPU_OP_IM2COL:
        case TPU_OP_COL2IM:
        case TPU_OP_SGD_MOMENTUM:
        case TPU_OP_ADAM:
        case TPU_OP_ADAMW:
        case TPU_OP_ALL_REDUCE:
        case TPU_OP_RSQRT:
        case TPU_OP_DROPOUT_MASK:
            if (t >= L)
                fail_msg("op %zu (%s) has layer %u", i, tpu_opcode_name(o->code), t);
            break;
        default:
            break;
        }
        if (t == TPU_NET_OP_LOSS)
            n_loss++;
        else if (t != TPU_NET_OP_STEP && t >= L)
            fail_msg("op %zu (%s) has layer %u of %u", i, tpu_opcode_name(o->code), t, L);
        else if (t < L)
            per[t]++;
    }
    assert_true(n_loss >= (mode == TPU_MODE_PREDICT ? 0u : 1u));
    /* every layer the loss reads has ops, but dropout outside training */
    for (uint32_t i = 1; i < L; i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(n, i, &li), 0);
        bool dead = !strcmp(li.name, "dead");
        bool none = dead || (li.kind == TPU_LAYER_DROPOUT && mode != TPU_MODE_TRAIN);
        if (none ? per[i] != 0 : per[i] == 0)
            fail_msg("layer %u '%s' has %u ops in mode %d", i, li.name, per[i], (int)mode);
    }
    free(per);
}

/* Every mode's program of each toy net verifies on tiny and tpu-v3 and reads back from its
 * text form; op_layer has an entry per op that names a layer or the loss or the step. */
static void test_programs_verify(void **state)
{
    (void)state;
    struct tpu_net *nets[3] = {toy_cnn(), toy_resnet(0.25f), toy_mse()};
    const char *chips[2] = {"tiny", "tpu-v3"};
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    for (int c = 0; c < 2; c++) {
        struct tpu_chip_config chip;
        assert_int_equal(tpu_config_load_preset(chips[c], &chip, NULL), 0);
        for (int k = 0; k < 3; k++)
            for (int m = 0; m < 3; m++) {
                spec.optimizer = (enum tpu_optimizer)((k + m) % 3);
                spec.schedule = (enum tpu_lr_schedule)m;
                spec.decay_steps = m ? 10 : 0;
                spec.decay_rate = m ? 0.5f : 0.0f;
                spec.passes = m == 2 ? 3 : 1;
                struct tpu_model_program mp;
                uint32_t *op_layer = NULL;
                OK(tpu_net_build(nets[k], &spec, (enum tpu_mode)m, DATA_SHAPE(4, 8), &mp,
                                 &op_layer, D));
                struct tpu_diag d = {0};
                if (tpu_program_verify(mp.prog, &chip, &d)) {
                    char *text = NULL;
                    tpu_program_to_string(mp.prog, &text);
                    fail_msg("%s %s mode %d: %s\n%s", chips[c], tpu_net_name(nets[k]), m,
                             d.msg, text ? text : "");
                }
                if (c == 0) { /* the text form gives the program back */
                    char *text = NULL, *again = NULL;
                    struct tpu_program *back = NULL;
                    assert_int_equal(tpu_program_to_string(mp.prog, &text), 0);
                    if (tpu_program_parse(text, "net", &back, &d))
                        fail_msg("%s\n%s", d.msg, text);
                    assert_int_equal(tpu_program_to_string(back, &again), 0);
                    assert_string_equal(text, again);
                    free(text);
                    free(again);
                    tpu_program_destroy(&back);
                }
                assert_non_null(op_layer);
                check_op_layer(nets[k], (enum tpu_mode)m, mp.prog, op_layer);
                assert_int_equal(mp.n_infeed, m == TPU_MODE_PREDICT ? 1 : k == 2 ? 3 : 2);
                assert_int_equal(mp.n_outfeed, m == TPU_MODE_EVAL ? 2 : 1);
                assert_int_equal(mp.no_accuracy, k == 2 && m == TPU_MODE_EVAL);
                const struct tpu_buffer_desc *x = tpu_program_buffer(mp.prog, mp.infeed[0]);
                assert_int_equal(x->rows, 4);
                assert_int_equal(x->cols, 16);
                if (m == TPU_MODE_PREDICT) { /* the output as [B][size] */
                    const struct tpu_buffer_desc *o = tpu_program_buffer(mp.prog,
                                                                         mp.outfeed[0]);
                    assert_int_equal(o->rows, 4);
                    assert_int_equal(o->cols, k == 2 ? 4 : 4);
                }
                /* the params: the net's in layer order, then the optimizer state */
                const struct tpu_buffer_desc *p0 = tpu_program_buffer(mp.prog, mp.params[0]);
                assert_string_equal(p0->name, k == 2 ? "conv2d.kernel" : "conv2d.kernel");
                free(op_layer);
                tpu_program_destroy(&mp.prog);
            }
    }
    /* without op_layer; and the errors */
    struct tpu_model_program mp;
    OK(tpu_net_build(nets[0], &spec, TPU_MODE_TRAIN, DATA_SHAPE(2, 2), &mp, NULL, D));
    tpu_program_destroy(&mp.prog);
    struct tpu_diag d;
    assert_int_equal(tpu_net_build(nets[0], &spec, TPU_MODE_TRAIN, DATA_SHAPE(4, 2), &mp, NULL,
                                   &d),
                     TPU_EINVAL);
    assert_has(d.msg, "batch_per_replica 4 and global batch 2", NULL);
    spec.passes = 2;
    assert_int_equal(tpu_net_build(nets[0], &spec, TPU_MODE_TRAIN, DATA_SHAPE(4, 8), &mp, NULL,
                                   &d),
                     TPU_EINVAL);
    assert_has(d.msg, "passes 2", NULL);
    struct tpu_net *bare;
    OK(tpu_net_create("bare", 2, 2, 1, &bare, D));
    tpu_train_spec_default(&spec);
    assert_int_equal(tpu_net_build(bare, &spec, TPU_MODE_EVAL, DATA_SHAPE(4, 8), &mp, NULL,
                                   &d),
                     TPU_EINVAL);
    assert_has(d.msg, "net 'bare' has no output", "tpu_net_set_output", NULL);
    struct tpu_model model;
    assert_int_equal(tpu_net_model(&model, bare, &spec, &d), TPU_EINVAL);
    tpu_net_destroy(&bare);
    for (int k = 0; k < 3; k++)
        tpu_net_destroy(&nets[k]);
}

/* The ops of each layer kind in the training program of the residual net. */
static void test_lowering_ops(void **state)
{
    (void)state;
    struct tpu_net *n = toy_resnet(0.25f);
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.optimizer = TPU_OPT_SGD_MOMENTUM;
    struct tpu_model_program mp;
    uint32_t *op_layer = NULL;
    OK(tpu_net_build(n, &spec, TPU_MODE_TRAIN, DATA_SHAPE(4, 8), &mp, &op_layer, D));
    unsigned count[TPU_OP_COUNT] = {0};
    unsigned all_reduce_mean = 0;
    for (size_t i = 0; i < tpu_program_n_ops(mp.prog); i++) {
        const struct tpu_op *o = tpu_program_op(mp.prog, i);
        count[o->code]++;
        if (o->code == TPU_OP_ALL_REDUCE && o->attrs.reduce == TPU_REDUCE_MEAN)
            all_reduce_mean++;
    }
    /* two 3 x 3 convolutions on the matrix unit (the 1 x 1 one multiplies its input): conv2d
     * and conv2d_grad_filter each, conv2d_grad_input for the second only (the first one's
     * input is the input); no patches in memory */
    assert_int_equal(count[TPU_OP_CONV2D], 2);
    assert_int_equal(count[TPU_OP_CONV2D_GRAD_FILTER], 2);
    assert_int_equal(count[TPU_OP_CONV2D_GRAD_INPUT], 1);
    assert_int_equal(count[TPU_OP_IM2COL], 0);
    assert_int_equal(count[TPU_OP_COL2IM], 0);
    /* the 1 x 1 conv and the dense layer: forward 2, kernel gradients 2, input gradients 2 */
    assert_int_equal(count[TPU_OP_MATMUL], 2 + 2 + 2);
    assert_int_equal(count[TPU_OP_RSQRT], 2);
    assert_int_equal(count[TPU_OP_DROPOUT_MASK], 1);
    assert_int_equal(count[TPU_OP_AVG_POOL], 2); /* avg_pool2d and global_avg_pool2d */
    assert_int_equal(count[TPU_OP_AVG_POOL_GRAD], 2);
    /* cross-replica batch norm: the mean and variance forward, two means backward; the
     * per-replica one: the replicas' mean of its mean and variance for the moving averages */
    assert_int_equal(all_reduce_mean, 4 + 2);
    /* a param each: 3 kernels + 3 biases + 1 dense kernel and bias + 2 x (gamma, beta) */
    assert_int_equal(count[TPU_OP_SGD_MOMENTUM], 12);
    assert_int_equal(count[TPU_OP_ALL_REDUCE], 12 + 4 + 2);
    assert_int_equal(count[TPU_OP_SOFTMAX_XENT], 1);
    assert_int_equal(mp.n_params, 12 + 4 + 12); /* params, moving stats, velocities */
    uint32_t id;
    assert_int_equal(tpu_program_find_buffer(mp.prog, "batch_norm_1.moving_variance", &id), 0);
    assert_int_equal(tpu_program_find_buffer(mp.prog, "conv2d_2.kernel.vel", &id), 0);
    assert_int_equal(tpu_program_buffer(mp.prog, id)->rows, 8);
    assert_int_equal(tpu_program_find_buffer(mp.prog, "batch_norm.moving_mean.vel", &id),
                     TPU_ENOTFOUND);
    free(op_layer);
    tpu_program_destroy(&mp.prog);
    tpu_net_destroy(&n);
}

/* ---- training through the estimator ----------------------------------------------------- */

struct losses {
    unsigned n;
    float loss[64];
};

static int after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct losses *r = ctx;
    (void)d;
    if (li->mode == TPU_MODE_TRAIN && r->n < 64)
        r->loss[r->n++] = li->loss;
    return 0;
}

struct run {
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct tpu_model model;
    struct tpu_run_config cfg;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    struct losses losses;
};

static void run_open(struct run *r, const struct tpu_net *n, const struct tpu_train_spec *spec,
                     unsigned threads, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = threads;
    assert_int_equal(tpu_device_open(&s, &r->dev, NULL), 0);
    tpu_run_config_default(&r->cfg);
    r->cfg.train_batch_size = 16;
    r->cfg.eval_batch_size = 16;
    r->cfg.iterations_per_loop = 10;
    r->cfg.seed = seed;
    OK(tpu_net_model(&r->model, n, spec, D));
    toy_dataset(&r->ds, 256, 1);
    tpu_dataset_input_init(&r->in, &r->ds, 3);
    struct tpu_hook hook = {.ctx = &r->losses, .after_loop = after_loop};
    OK(tpu_estimator_create(r->dev, &r->cfg, &r->model, &hook, 1, &r->est, D));
}

static void run_close(struct run *r)
{
    tpu_estimator_destroy(&r->est);
    tpu_device_close(&r->dev);
    tpu_dataset_input_free(&r->in);
    tpu_dataset_free(&r->ds);
}

/* Trains `steps` steps and evaluates on the training set; checks that the loss fell. */
static double train_and_eval(const struct tpu_net *n, const struct tpu_train_spec *spec,
                             uint64_t steps)
{
    struct run r;
    run_open(&r, n, spec, 2, 7);
    OK(tpu_estimator_train(r.est, &r.in.input, steps, 0, D));
    assert_int_equal(tpu_estimator_global_step(r.est), steps);
    struct tpu_eval_result ev;
    OK(tpu_estimator_evaluate(r.est, &r.in.input, 0, &ev, D));
    assert_int_equal(ev.examples, 256);
    const float first = r.losses.loss[0], last = r.losses.loss[r.losses.n - 1];
    printf("    %s: loss %.4f after %u steps -> %.4f after %llu; eval loss %.4f, accuracy "
           "%.3f\n", tpu_net_name(n), (double)first, (unsigned)r.cfg.iterations_per_loop,
           (double)last, (unsigned long long)steps, ev.loss, ev.accuracy);
    if (!(last < 0.5f * first))
        fail_msg("%s: the loss went from %g to %g", tpu_net_name(n), (double)first,
                 (double)last);
    run_close(&r);
    return ev.accuracy;
}

/* The toy classes are linearly separable (feature j % 4 is the class); after 60 steps of
 * Adam at 0.01 both nets classify nearly all of the training set. */
static void test_train_cnn(void **state)
{
    (void)state;
    struct tpu_net *n = toy_cnn();
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.learning_rate = 0.01f;
    assert_true(train_and_eval(n, &spec, 60) >= 0.9);
    tpu_net_destroy(&n);
}

static void test_train_resnet(void **state)
{
    (void)state;
    struct tpu_net *n = toy_resnet(0.2f);
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.learning_rate = 0.01f;
    spec.seed = 11;
    assert_true(train_and_eval(n, &spec, 60) >= 0.9);
    /* SGD with momentum and a cosine schedule, AdamW with a step schedule */
    spec.optimizer = TPU_OPT_SGD_MOMENTUM;
    spec.learning_rate = 0.1f;
    spec.schedule = TPU_SCHEDULE_COSINE;
    spec.warmup_steps = 5;
    spec.decay_steps = 55;
    assert_true(train_and_eval(n, &spec, 60) >= 0.9);
    spec.optimizer = TPU_OPT_ADAMW;
    spec.learning_rate = 0.01f;
    spec.schedule = TPU_SCHEDULE_STEP;
    spec.warmup_steps = 0;
    spec.decay_steps = 30;
    spec.decay_rate = 0.5f;
    assert_true(train_and_eval(n, &spec, 60) >= 0.9);
    tpu_net_destroy(&n);
}

/* Reads every param of the training program (the net's and the optimizer state) into one
 * malloc'd array. */
static float *read_params(const struct run *r, const struct tpu_net *n,
                          const struct tpu_train_spec *spec, size_t *count)
{
    struct tpu_model_program mp;
    OK(tpu_net_build(n, spec, TPU_MODE_TRAIN, DATA_SHAPE(8, 16), &mp, NULL, D));
    size_t total = 0;
    for (uint32_t i = 0; i < mp.n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp.prog, mp.params[i]);
        total += (size_t)b->rows * b->cols;
    }
    float *all = malloc(total * sizeof *all);
    assert_non_null(all);
    size_t at = 0;
    for (uint32_t i = 0; i < mp.n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp.prog, mp.params[i]);
        size_t k = (size_t)b->rows * b->cols;
        OK(tpu_estimator_read_param(r->est, b->name, all + at, k * sizeof *all, D));
        at += k;
    }
    tpu_program_destroy(&mp.prog);
    *count = total;
    return all;
}

/* The same seed gives the same params bit for bit, on 1 thread and on 2; another seed
 * does not. */
static void test_determinism(void **state)
{
    (void)state;
    struct tpu_net *n = toy_resnet(0.3f);
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.learning_rate = 0.01f;
    spec.seed = 5;
    float *p[3];
    size_t count[3];
    const unsigned threads[3] = {1, 2, 2};
    const uint64_t seeds[3] = {7, 7, 8};
    for (int k = 0; k < 3; k++) {
        struct run r;
        run_open(&r, n, &spec, threads[k], seeds[k]);
        OK(tpu_estimator_train(r.est, &r.in.input, 20, 0, D));
        p[k] = read_params(&r, n, &spec, &count[k]);
        run_close(&r);
    }
    assert_int_equal(count[0], count[1]);
    size_t diff = 0;
    for (size_t i = 0; i < count[0]; i++)
        if (memcmp(&p[0][i], &p[1][i], sizeof(float)))
            if (diff++ < 5)
                printf("    param element %zu: %a (1 thread) vs %a (2 threads)\n", i,
                       (double)p[0][i], (double)p[1][i]);
    assert_int_equal(diff, 0);
    assert_true(memcmp(p[0], p[2], count[0] * sizeof(float)) != 0);
    for (int k = 0; k < 3; k++)
        free(p[k]);
    tpu_net_destroy(&n);
}

/* Initial values: Glorot-uniform kernels with Keras's fans, ones and zeros elsewhere; a
 * kernel's values depend on the run's seed and its name, not on the layers before it. */
static void init_all(const struct tpu_net *n, const struct tpu_train_spec *spec,
                     uint64_t seed, const char *want, float *out, uint32_t *rows,
                     uint32_t *cols)
{
    struct tpu_model m;
    OK(tpu_net_model(&m, n, spec, D));
    struct tpu_model_program mp;
    OK(m.build(m.ctx, TPU_MODE_TRAIN, DATA_SHAPE(2, 4), &mp, D));
    bool found = false;
    for (uint32_t i = 0; i < mp.n_params; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(mp.prog, mp.params[i]);
        float *v = malloc((size_t)b->rows * b->cols * sizeof *v);
        assert_non_null(v);
        m.init_param(m.ctx, b->name, b->rows, b->cols, v, seed + i); /* as the runtime */
        const char *what = strchr(b->name, '.') + 1;
        size_t k = (size_t)b->rows * b->cols;
        float lo = 0, hi = 0;
        for (size_t e = 0; e < k; e++) {
            lo = e ? fminf(lo, v[e]) : v[e];
            hi = e ? fmaxf(hi, v[e]) : v[e];
        }
        if (!strcmp(what, "gamma") || !strcmp(what, "moving_variance"))
            assert_true(lo == 1.0f && hi == 1.0f);
        else if (strcmp(what, "kernel"))
            assert_true(lo == 0.0f && hi == 0.0f);
        if (!strcmp(b->name, want)) {
            memcpy(out, v, k * sizeof *v);
            *rows = b->rows;
            *cols = b->cols;
            found = true;
        }
        free(v);
    }
    assert_true(found);
    tpu_program_destroy(&mp.prog);
}

static void test_init(void **state)
{
    (void)state;
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    struct tpu_net *a, *b;
    uint32_t t;
    OK(tpu_net_create("a", 6, 6, 3, &a, D));
    OK(tpu_net_conv2d(a, "c1", 0, 5, 3, 3, 1, TPU_PADDING_VALID, TPU_ACT_RELU, &t, D));
    OK(tpu_net_unary(a, NULL, TPU_LAYER_FLATTEN, t, &t, D));
    OK(tpu_net_dense(a, "out", t, 3, TPU_ACT_NONE, &t, D));
    OK(tpu_net_set_output(a, t, TPU_LOSS_SOFTMAX_XENT, D));
    /* b: a per-pixel dense layer and a batch norm before c1 (three more params) */
    OK(tpu_net_create("b", 6, 6, 3, &b, D));
    OK(tpu_net_dense(b, NULL, 0, 3, TPU_ACT_NONE, &t, D));
    OK(tpu_net_batch_norm(b, NULL, t, false, &t, D));
    OK(tpu_net_conv2d(b, "c1", t, 5, 3, 3, 1, TPU_PADDING_VALID, TPU_ACT_RELU, &t, D));
    OK(tpu_net_unary(b, NULL, TPU_LAYER_FLATTEN, t, &t, D));
    OK(tpu_net_dense(b, "out", t, 3, TPU_ACT_NONE, &t, D));
    OK(tpu_net_set_output(b, t, TPU_LOSS_SOFTMAX_XENT, D));

    static float ka[27 * 5], kb[27 * 5], kc[27 * 5];
    uint32_t rows, cols;
    init_all(a, &spec, 42, "c1.kernel", ka, &rows, &cols);
    assert_int_equal(rows, 27);
    assert_int_equal(cols, 5);
    init_all(b, &spec, 42, "c1.kernel", kb, &rows, &cols);
    assert_memory_equal(ka, kb, sizeof ka);
    init_all(a, &spec, 43, "c1.kernel", kc, &rows, &cols);
    assert_true(memcmp(ka, kc, sizeof ka) != 0);
    /* U(-a, a), a = sqrt(6 / (fan_in + fan_out)) = sqrt(6 / (27 + 45)) */
    const float lim = sqrtf(6.0f / (27.0f + 45.0f));
    float amax = 0, sum = 0;
    for (size_t i = 0; i < 27 * 5; i++) {
        amax = fmaxf(amax, fabsf(ka[i]));
        sum += ka[i];
    }
    assert_true(amax <= lim);
    assert_true(amax > 0.8f * lim); /* 135 draws: the largest is near the bound */
    assert_true(fabsf(sum / 135.0f) < 0.1f * lim);
    tpu_net_destroy(&a);
    tpu_net_destroy(&b);
}

/* A regression input for toy_mse: the target is a fixed smooth function of the image (a
 * 2 x 2 mean of the input, per 2 x 2 block), so a net with a 2 x 2 stride-2 head fits it. */
struct mse_input {
    struct tpu_input input;
    const struct tpu_dataset *ds;
    uint64_t pos;
};

static int mse_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                    void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct mse_input *in = ctx;
    (void)shard;
    (void)d;
    uint32_t n = batch;
    if (mode != TPU_MODE_TRAIN) {
        if (in->pos >= in->ds->n_examples)
            return 0;
        if (in->pos + n > in->ds->n_examples)
            n = (uint32_t)(in->ds->n_examples - in->pos);
    }
    float *x = tensors[0], *y = tensors[1];
    int32_t *mask = tensors[2];
    for (uint32_t r = 0; r < n; r++) {
        const float *src = in->ds->x + (in->pos++ % in->ds->n_examples) * TOY_FEATURES;
        memcpy(x + (size_t)r * 16, src, 16 * sizeof *x);
        for (uint32_t by = 0; by < 2; by++)
            for (uint32_t bx = 0; bx < 2; bx++) {
                float s = 0;
                for (uint32_t k = 0; k < 4; k++)
                    s += src[(2 * by + k / 2) * 4 + 2 * bx + k % 2];
                y[r * 4 + by * 2 + bx] = 0.25f * s;
            }
        mask[r] = 0;
    }
    *n_real = n;
    return 1;
}

static int mse_start(void *ctx, enum tpu_mode mode, uint64_t step, uint32_t global_batch,
                     struct tpu_diag *d)
{
    struct mse_input *in = ctx;
    (void)d;
    in->pos = mode == TPU_MODE_TRAIN ? step * global_batch : 0;
    return 0;
}

/* A regression net trains (the loss falls) and evaluates with no accuracy (NaN), every
 * example counted once (100 examples: the last batch padded and masked). */
static void test_train_mse(void **state)
{
    (void)state;
    struct tpu_net *n = toy_mse();
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.learning_rate = 0.02f;
    struct run r;
    run_open(&r, n, &spec, 2, 3);
    r.ds.n_examples = 100;
    struct mse_input in = {{&in, mse_next, mse_start, NULL}, &r.ds, 0};
    OK(tpu_estimator_train(r.est, &in.input, 100, 0, D));
    struct tpu_eval_result ev;
    OK(tpu_estimator_evaluate(r.est, &in.input, 0, &ev, D));
    const float first = r.losses.loss[0], last = r.losses.loss[r.losses.n - 1];
    printf("    toy_mse: loss %.4f -> %.4f; eval loss %.4f over %llu examples\n",
           (double)first, (double)last, ev.loss, (unsigned long long)ev.examples);
    assert_true(last < 0.5f * first);
    assert_int_equal(ev.examples, 100);
    assert_true(isnan(ev.accuracy));
    assert_true(ev.loss >= 0 && ev.loss < (double)first);
    run_close(&r);
    tpu_net_destroy(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras_cnn_counts),
        cmocka_unit_test(test_window_sizes),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_train_spec),
        cmocka_unit_test(test_programs_verify),
        cmocka_unit_test(test_lowering_ops),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_train_cnn),
        cmocka_unit_test(test_train_resnet),
        cmocka_unit_test(test_train_mse),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
