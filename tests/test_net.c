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

#include "tpusim/net.h"

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
    assert_has(d.msg, "at least 2 classes", "'one' is 1 x 1 x 1", "mse", NULL);
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
    assert_int_equal(s.schedule, TPU_LR_CONSTANT);
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
    BAD(schedule, TPU_LR_STEP, "step schedule needs decay_steps >= 1", NULL);
    BAD(schedule, (enum tpu_lr_schedule_kind)3, "schedule 3", "cosine", NULL);
    BAD(warmup_steps, 10, "warmup_steps 10 needs the cosine schedule", NULL);
    s.optimizer = TPU_OPT_SGD_MOMENTUM;
    BAD(momentum, 1.0f, "momentum 1 must be in [0, 1)", NULL);
    s.optimizer = TPU_OPT_ADAMW;
    BAD(weight_decay, -0.5f, "weight decay -0.5", NULL);
    BAD(l2, 0.1f, "l2 0.1 with adamw", "weight_decay", NULL);
    s.schedule = TPU_LR_COSINE;
    s.decay_steps = 100;
    s.warmup_steps = 10;
    assert_int_equal(tpu_train_spec_check(&s, &d), 0);
    BAD(decay_rate, 2.0f, "cosine schedule's decay_rate 2", NULL);
    s.schedule = TPU_LR_STEP;
    s.warmup_steps = 0;
    s.decay_rate = 0.5f;
    assert_int_equal(tpu_train_spec_check(&s, &d), 0);
    BAD(decay_rate, 0.0f, "step schedule's decay_rate 0", NULL);
#undef BAD
    /* the enum's numbers are the op attribute's (ops11.md) */
    assert_int_equal(TPU_LR_CONSTANT, 0);
    assert_int_equal(TPU_LR_STEP, 1);
    assert_int_equal(TPU_LR_COSINE, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras_cnn_counts),
        cmocka_unit_test(test_window_sizes),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_train_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
