/* The naive layer-graph reference (net_ref.c) checked on its own: its values on small cases
 * worked out by hand (Keras's same padding, average pooling's count, batch norm), and for
 * every layer kind and both losses its analytic gradients (inputs and params) against central
 * finite differences of its own loss.
 *
 * Finite differences: fd = (L(p + h) - L(p - h)) / 2h with h = 1e-5, in double. The loss is
 * about 1 and is computed to a few 1e-16, so rounding puts ~1e-11 into fd; the truncation
 * error is h^2/6 |L'''| ~ 1e-11 for the O(1) third derivatives of these small nets. The check
 * allows |fd - g| <= 1e-7 + 1e-6 |g|: three orders of magnitude above both, and far below any
 * real mistake (a wrong term is O(|g|)). ReLU kinks and max-pool ties make L non-smooth: the
 * data keep every pre-activation and every pooled gap much farther than h from a kink (max
 * pools read a tie-free input, a permutation of distinct values; each check asserts that no
 * ReLU input lies within 1e-3 of 0). Every check also asserts that the gradient it compares
 * is not all zeros, so an unreached layer cannot pass for a checked one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net_build.h"
#include "net_ref.h"
#include "tpusim/net.h"
#include "xorshift.h"

#define FD_H 1e-5
#define FD_ABS 1e-7
#define FD_REL 1e-6
#define KINK_MARGIN 1e-3

static double uniform(struct rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(r) >> 11) / 9007199254740992.0;
}

/* ---- the finite-difference check ------------------------------------------------------------ */

/* A fixed dropout mask: element k of example e of layer l is dropped when a hash of the three
 * falls below the rate (rate 0.25, so the kept ones are scaled by 4/3). */
static double fixed_mask(void *ctx, uint32_t layer, uint32_t example, uint64_t element)
{
    (void)ctx;
    uint64_t z = (uint64_t)layer * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)example * 0xBF58476D1CE4E5B9ull ^ (element + 1) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    z *= 0xD6E8FEB86CA1B5A5ull;
    z ^= z >> 29;
    return (z >> 11) % 4 == 0 ? 0.0 : 4.0 / 3.0;
}

struct fd_case {
    uint32_t batch;
    struct net_ref_run run;
    bool tie_free_input; /* the input is a permutation of distinct values (max pools) */
    uint64_t seed;
};

struct fd_data {
    double *x;
    int32_t *labels;
    double *targets;
};

static double loss_of(struct net_ref *r, const struct fd_case *c, const struct fd_data *data)
{
    struct tpu_diag d = {0};
    double l;
    ok(net_ref_forward(r, &c->run, data->x, c->batch, &d), &d);
    ok(net_ref_loss(r, data->labels, data->targets, &l, NULL, &d), &d);
    return l;
}

/* Compares g[0..n) with central differences of the loss in v[0..n); prints the first
 * mismatches and fails on any, or when g is all zeros. */
static void compare(struct net_ref *r, const struct fd_case *c, const struct fd_data *data,
                    const char *what, double *v, const double *g, size_t n)
{
    double max_err = 0.0, max_g = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = v[i];
        v[i] = keep + FD_H;
        double lp = loss_of(r, c, data);
        v[i] = keep - FD_H;
        double lm = loss_of(r, c, data);
        v[i] = keep;
        double fd = (lp - lm) / (2 * FD_H);
        double err = fabs(fd - g[i]);
        if (err > max_err)
            max_err = err;
        if (fabs(g[i]) > max_g)
            max_g = fabs(g[i]);
        if (err > FD_ABS + FD_REL * fabs(g[i])) {
            if (bad < 5)
                print_message("  %s[%zu]: analytic %.12g, finite difference %.12g\n", what, i,
                              g[i], fd);
            bad++;
        }
    }
    print_message("  %-32s %4zu entries, largest |fd - g| %.2g (largest |g| %.2g)\n", what, n,
                  max_err, max_g);
    if (bad || max_g == 0.0)
        fail_msg("%s: %zu of %zu entries differ (largest difference %.3g), largest |g| %.3g",
                 what, bad, n, max_err, max_g);
}

/* No ReLU input (a relu layer's input, a fused relu's pre-activation) within KINK_MARGIN of 0:
 * a finite difference across a kink would measure a mix of both sides. */
static void assert_off_kinks(const struct tpu_net *net, const struct net_ref *r)
{
    for (uint32_t i = 1; i < tpu_net_n_layers(net); i++) {
        struct tpu_layer_info li;
        assert_int_equal(tpu_net_layer(net, i, &li), 0);
        bool fused = (li.kind == TPU_LAYER_DENSE || li.kind == TPU_LAYER_CONV2D) &&
                     li.desc.activation == TPU_ACT_RELU;
        if (li.kind != TPU_LAYER_RELU && !fused)
            continue;
        size_t n;
        const double *x = fused ? net_ref_preactivation(r, i, &n) : net_ref_tensor(r, li.in[0], &n);
        for (size_t k = 0; k < n; k++)
            if (fabs(x[k]) < KINK_MARGIN)
                fail_msg("relu '%s': input %zu is %.3g, within %.0e of the kink: change the "
                         "test's seed", li.name, k, x[k], KINK_MARGIN);
    }
}

/* Random params (gamma in [0.5, 1.5], moving variance in [0.5, 2], the rest in [-1, 1]) and
 * inputs, then every input and every trainable param's gradient against finite differences. */
static void fd_check(struct tpu_net *net, const struct fd_case *c)
{
    struct tpu_diag d = {0};
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    struct rng g = {c->seed};
    for (uint32_t i = 0; i < net_ref_n_params(r); i++) {
        size_t n;
        double *v = net_ref_param_at(r, i, &n);
        const char *name = net_ref_param_name(r, i);
        bool gamma = strstr(name, ".gamma") != NULL, var = strstr(name, ".moving_variance");
        for (size_t k = 0; k < n; k++)
            v[k] = gamma ? uniform(&g, 0.5, 1.5) : var ? uniform(&g, 0.5, 2.0)
                                                        : uniform(&g, -1.0, 1.0);
    }
    struct tpu_layer_info in, out;
    assert_int_equal(tpu_net_layer(net, 0, &in), 0);
    uint32_t out_t;
    enum tpu_loss loss;
    assert_int_equal(tpu_net_output(net, &out_t, &loss), 0);
    assert_int_equal(tpu_net_layer(net, out_t, &out), 0);
    size_t nx = (size_t)c->batch * in.out.h * in.out.w * in.out.c;
    size_t ny = (size_t)out.out.h * out.out.w * out.out.c;
    struct fd_data data = {malloc(nx * sizeof(double)), malloc(c->batch * sizeof(int32_t)),
                           malloc(c->batch * ny * sizeof(double))};
    assert_non_null(data.x);
    if (c->tie_free_input) { /* distinct values 2/nx apart (>> FD_H), shuffled */
        for (size_t k = 0; k < nx; k++)
            data.x[k] = -1.0 + 2.0 * (double)k / (double)nx;
        for (size_t k = nx - 1; k > 0; k--) {
            size_t j = rnd_below(&g, (unsigned)k + 1);
            double t = data.x[k];
            data.x[k] = data.x[j];
            data.x[j] = t;
        }
    } else {
        for (size_t k = 0; k < nx; k++)
            data.x[k] = uniform(&g, -1.0, 1.0);
    }
    for (uint32_t e = 0; e < c->batch; e++)
        data.labels[e] = (int32_t)rnd_below(&g, (unsigned)ny);
    for (size_t k = 0; k < c->batch * ny; k++)
        data.targets[k] = uniform(&g, -1.0, 1.0);
    if (loss == TPU_LOSS_MSE) {
        free(data.labels);
        data.labels = NULL;
    } else {
        free(data.targets);
        data.targets = NULL;
    }

    double l0 = loss_of(r, c, &data);
    assert_true(isfinite(l0) && l0 > 0.0);
    assert_off_kinks(net, r);
    ok(net_ref_backward(r, &d), &d);
    size_t n;
    double *gx = malloc(nx * sizeof(double));
    memcpy(gx, net_ref_input_grad(r, &n), nx * sizeof(double));
    assert_int_equal(n, nx);
    uint32_t np = net_ref_n_params(r);
    double **gp = calloc(np, sizeof *gp);
    for (uint32_t i = 0; i < np; i++) {
        const double *gi = net_ref_grad(r, net_ref_param_name(r, i), &n);
        gp[i] = malloc(n * sizeof(double));
        memcpy(gp[i], gi, n * sizeof(double));
    }
    compare(r, c, &data, "input", data.x, gx, nx);
    for (uint32_t i = 0; i < np; i++) {
        if (!net_ref_param_trainable(r, i))
            continue;
        double *v = net_ref_param_at(r, i, &n);
        compare(r, c, &data, net_ref_param_name(r, i), v, gp[i], n);
    }
    for (uint32_t i = 0; i < np; i++)
        free(gp[i]);
    free(gp);
    free(gx);
    free(data.x);
    free(data.labels);
    free(data.targets);
    net_ref_destroy(&r);
}

static const struct fd_case TRAIN4 = {.batch = 4, .run = {.training = true}, .seed = 11};

/* ---- gradients, layer by layer ------------------------------------------------------------ */

static void test_fd_dense_xent(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(1, 1, 5);
    uint32_t t = dense(net, 0, 4, TPU_ACT_RELU);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    fd_check(net, &TRAIN4);
    tpu_net_destroy(&net);
}

/* dense on an h x w x c input applies per pixel (as Keras's Dense), then flatten */
static void test_fd_dense_per_pixel_flatten(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(2, 3, 2);
    uint32_t t = dense(net, 0, 3, TPU_ACT_NONE);
    t = unary(net, TPU_LAYER_FLATTEN, t);
    t = dense(net, t, 4, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.seed = 12;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

static void test_fd_conv2d_valid_same_strides(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(6, 5, 2);
    uint32_t t = conv(net, 0, 3, 3, 2, 1, TPU_PADDING_VALID, TPU_ACT_NONE, true); /* 4x4x3 */
    t = conv(net, t, 2, 3, 3, 2, TPU_PADDING_SAME, TPU_ACT_NONE, false);          /* 2x2x2 */
    t = unary(net, TPU_LAYER_FLATTEN, t);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.batch = 3;
    c.seed = 13;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

/* a fused relu, an odd input with stride 2 valid and a 4-wide same kernel (padding 1 before,
 * 2 after), MSE on a 3-D output */
static void test_fd_conv2d_relu_mse(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(5, 5, 1);
    uint32_t t = conv(net, 0, 2, 3, 3, 2, TPU_PADDING_VALID, TPU_ACT_RELU, true); /* 2x2x2 */
    t = conv(net, t, 2, 4, 4, 1, TPU_PADDING_SAME, TPU_ACT_NONE, true);           /* 2x2x2 */
    output(net, t, TPU_LOSS_MSE);
    struct fd_case c = TRAIN4;
    c.seed = 14;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

static void test_fd_max_pool(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(5, 6, 2);
    uint32_t a = pool(net, TPU_LAYER_MAX_POOL2D, 0, 2, 2, 2, 2, TPU_PADDING_VALID); /* 2x3x2 */
    a = unary(net, TPU_LAYER_FLATTEN, a);
    uint32_t b = pool(net, TPU_LAYER_MAX_POOL2D, 0, 3, 3, 2, 2, TPU_PADDING_SAME); /* 3x3x2 */
    b = unary(net, TPU_LAYER_FLATTEN, b);
    a = dense(net, a, 3, TPU_ACT_NONE);
    b = dense(net, b, 3, TPU_ACT_NONE);
    uint32_t t = add(net, a, b);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.tie_free_input = true;
    c.seed = 15;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

static void test_fd_avg_pools(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(5, 4, 2);
    uint32_t a = pool(net, TPU_LAYER_AVG_POOL2D, 0, 3, 3, 2, 2, TPU_PADDING_SAME); /* 3x2x2 */
    a = pool(net, TPU_LAYER_AVG_POOL2D, a, 2, 1, 1, 1, TPU_PADDING_VALID);          /* 2x2x2 */
    a = unary(net, TPU_LAYER_GLOBAL_AVG_POOL2D, a);                                 /* 1x1x2 */
    uint32_t b = unary(net, TPU_LAYER_GLOBAL_AVG_POOL2D, 0);
    uint32_t t = add(net, a, b);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.seed = 16;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

static void test_fd_reshape_relu(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(2, 2, 3);
    uint32_t t = reshape(net, 0, 3, 1, 4);
    t = conv(net, t, 2, 2, 1, 1, TPU_PADDING_VALID, TPU_ACT_NONE, true); /* 2x1x2 */
    t = unary(net, TPU_LAYER_RELU, t);
    t = reshape(net, t, 1, 1, 4);
    output(net, t, TPU_LOSS_MSE);
    struct fd_case c = TRAIN4;
    c.seed = 17;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

static void test_fd_dropout(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(1, 1, 6);
    uint32_t t = dense(net, 0, 8, TPU_ACT_NONE);
    t = dropout(net, t, 0.25f);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.run.mask = fixed_mask;
    c.seed = 18;
    fd_check(net, &c);
    /* and in inference dropout is the identity */
    c.run.training = false;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

/* batch norm: training with the statistics of the whole batch, of groups of 2 (the
 * per-replica statistics of 2 replicas) and cross-replica (whole batch whatever the group),
 * and inference with the moving statistics */
static void test_fd_batch_norm(void **state)
{
    (void)state;
    for (int mode = 0; mode < 4; mode++) {
        struct tpu_net *net = new_net(2, 2, 3);
        uint32_t t = batch_norm(net, 0, mode == 2);
        t = conv(net, t, 2, 2, 2, 1, TPU_PADDING_VALID, TPU_ACT_NONE, true); /* 1x1x2 */
        t = unary(net, TPU_LAYER_FLATTEN, t);
        t = batch_norm(net, t, false);
        output(net, t, TPU_LOSS_MSE);
        struct fd_case c = TRAIN4;
        c.seed = 19 + (uint64_t)mode;
        c.run.bn_group = mode == 1 || mode == 2 ? 2 : 0; /* mode 2: only the second layer */
        c.run.training = mode != 3;
        fd_check(net, &c);
        tpu_net_destroy(&net);
    }
}

/* a residual block: conv same -> batch norm -> relu, added to its input, then pooled */
static void test_fd_residual_add(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(3, 3, 2);
    uint32_t t = conv(net, 0, 2, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, false);
    t = batch_norm(net, t, false);
    t = unary(net, TPU_LAYER_RELU, t);
    t = add(net, t, 0);
    t = unary(net, TPU_LAYER_GLOBAL_AVG_POOL2D, t);
    t = dense(net, t, 3, TPU_ACT_NONE);
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct fd_case c = TRAIN4;
    c.seed = 23;
    fd_check(net, &c);
    tpu_net_destroy(&net);
}

/* ---- values worked out by hand -------------------------------------------------------------- */

static void forward(struct net_ref *r, const double *x, uint32_t batch, bool training)
{
    struct tpu_diag d = {0};
    struct net_ref_run run = {.training = training};
    ok(net_ref_forward(r, &run, x, batch, &d), &d);
}

/* Keras's same padding puts the smaller half first: in 4, kernel 3, stride 2 pads 0 before and
 * 1 after; in 5, kernel 4, stride 1 pads 1 before and 2 after; valid drops what is left. */
static void test_window_padding(void **state)
{
    (void)state;
    uint32_t o, p;
    net_ref_window(4, 3, 2, TPU_PADDING_SAME, &o, &p);
    assert_int_equal(o, 2);
    assert_int_equal(p, 0);
    net_ref_window(5, 4, 1, TPU_PADDING_SAME, &o, &p);
    assert_int_equal(o, 5);
    assert_int_equal(p, 1);
    net_ref_window(5, 3, 1, TPU_PADDING_SAME, &o, &p);
    assert_int_equal(o, 5);
    assert_int_equal(p, 1);
    net_ref_window(7, 3, 2, TPU_PADDING_VALID, &o, &p);
    assert_int_equal(o, 3);
    assert_int_equal(p, 0);
    net_ref_window(2, 3, 1, TPU_PADDING_SAME, &o, &p); /* a window larger than the image */
    assert_int_equal(o, 2);
    assert_int_equal(p, 1);
}

/* x = 1..16 on a 4x4 image, a 3x3 kernel of ones, stride 2, same: each output sums its
 * window's in-image pixels, the padding (one row below, one column right) adds nothing. */
static void test_conv2d_same_values(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(4, 4, 1);
    uint32_t t = conv(net, 0, 1, 3, 3, 2, TPU_PADDING_SAME, TPU_ACT_NONE, true);
    output(net, unary(net, TPU_LAYER_FLATTEN, t), TPU_LOSS_MSE);
    struct tpu_diag d = {0};
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    size_t n;
    double *k = net_ref_param(r, "conv2d.kernel", &n);
    assert_non_null(k);
    assert_int_equal(n, 9);
    for (size_t i = 0; i < n; i++)
        k[i] = 1.0;
    net_ref_param(r, "conv2d.bias", &n)[0] = 0.5;
    double x[16];
    for (int i = 0; i < 16; i++)
        x[i] = i + 1;
    forward(r, x, 1, true);
    const double *y = net_ref_tensor(r, t, &n);
    assert_int_equal(n, 4);
    const double want[4] = {54.5, 45.5, 72.5, 54.5};
    for (int i = 0; i < 4; i++)
        assert_true(y[i] == want[i]);
    net_ref_destroy(&r);
    tpu_net_destroy(&net);
}

/* A 2-channel HWIO kernel: y = sum over ky, kx, ci of x[iy][ix][ci] * K[ky][kx][ci][f]. */
static void test_conv2d_hwio_values(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(2, 2, 2);
    uint32_t t = conv(net, 0, 2, 2, 2, 1, TPU_PADDING_VALID, TPU_ACT_NONE, false);
    output(net, unary(net, TPU_LAYER_FLATTEN, t), TPU_LOSS_MSE);
    struct tpu_diag d = {0};
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    size_t n;
    double *k = net_ref_param(r, "conv2d.kernel", &n); /* [2][2][2][2] */
    assert_int_equal(n, 16);
    for (size_t i = 0; i < n; i++)
        k[i] = (double)i;
    const double x[8] = {1, 10, 2, 20, 3, 30, 4, 40}; /* [iy][ix][ci] */
    forward(r, x, 1, true);
    const double *y = net_ref_tensor(r, t, &n);
    /* f = 0 reads the even kernel entries 0, 2, ..., 14 in (ky, kx, ci) order */
    double y0 = 1 * 0 + 10 * 2 + 2 * 4 + 20 * 6 + 3 * 8 + 30 * 10 + 4 * 12 + 40 * 14;
    assert_true(y[0] == y0);
    assert_true(y[1] == y0 + (1 + 10 + 2 + 20 + 3 + 30 + 4 + 40));
    net_ref_destroy(&r);
    tpu_net_destroy(&net);
}

/* A 3x3 same average pool with stride 1 on a 2x2 image: every window holds the 4 pixels, the
 * 5 padded positions excluded from the count (Keras), so each output is their mean; max pool
 * likewise ignores the padding even when every pixel is negative. */
static void test_pools_exclude_padding(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(2, 2, 1);
    uint32_t a = pool(net, TPU_LAYER_AVG_POOL2D, 0, 3, 3, 1, 1, TPU_PADDING_SAME);
    uint32_t m = pool(net, TPU_LAYER_MAX_POOL2D, 0, 3, 3, 1, 1, TPU_PADDING_SAME);
    uint32_t g = unary(net, TPU_LAYER_GLOBAL_AVG_POOL2D, 0);
    output(net, unary(net, TPU_LAYER_FLATTEN, a), TPU_LOSS_MSE);
    struct tpu_diag d = {0};
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    const double x[4] = {-1, -2, -3, -6};
    forward(r, x, 1, true);
    size_t n;
    const double *ya = net_ref_tensor(r, a, &n), *ym = net_ref_tensor(r, m, NULL),
                 *yg = net_ref_tensor(r, g, NULL);
    assert_int_equal(n, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(ya[i] == -3.0);
        assert_true(ym[i] == -1.0);
    }
    assert_true(yg[0] == -3.0);
    net_ref_destroy(&r);
    tpu_net_destroy(&net);
}

/* Batch norm over (n, h, w) per channel with the biased variance; the moving averages move
 * by (1 - momentum) toward the batch's; inference uses the moving statistics. */
static void test_batch_norm_values(void **state)
{
    (void)state;
    struct tpu_net *net = new_net(1, 2, 1);
    uint32_t t = batch_norm(net, 0, false);
    output(net, t, TPU_LOSS_MSE);
    struct tpu_diag d = {0};
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    net_ref_param(r, "batch_norm.gamma", NULL)[0] = 2.0;
    net_ref_param(r, "batch_norm.beta", NULL)[0] = 1.0;
    net_ref_param(r, "batch_norm.moving_mean", NULL)[0] = 1.0;
    net_ref_param(r, "batch_norm.moving_variance", NULL)[0] = 3.0;
    const double x[4] = {1, 3, 5, 7}; /* mean 4, biased variance 5 */
    forward(r, x, 2, true);
    struct tpu_layer_info li;
    assert_int_equal(tpu_net_layer(net, t, &li), 0);
    double eps = (double)li.desc.epsilon, mom = (double)li.desc.momentum;
    assert_true(fabs(mom - 0.99) < 1e-7 && fabs(eps - 0.001) < 1e-10); /* Keras's defaults */
    const double *y = net_ref_tensor(r, t, NULL);
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], 2.0 * (x[i] - 4.0) / sqrt(5.0 + eps) + 1.0, 1e-15);
    assert_float_equal(net_ref_moving_update(r, "batch_norm.moving_mean", NULL)[0],
                       1.0 * mom + 4.0 * (1 - mom), 1e-15);
    assert_float_equal(net_ref_moving_update(r, "batch_norm.moving_variance", NULL)[0],
                       3.0 * mom + 5.0 * (1 - mom), 1e-15);
    assert_null(net_ref_moving_update(r, "batch_norm.gamma", NULL));
    forward(r, x, 2, false);
    y = net_ref_tensor(r, t, NULL);
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], 2.0 * (x[i] - 1.0) / sqrt(3.0 + eps) + 1.0, 1e-15);
    assert_null(net_ref_moving_update(r, "batch_norm.moving_mean", NULL));
    /* per-replica groups of one example, {1, 3} and {5, 7}: each normalizes with its own
     * statistics (means 2 and 6, variances 1); the moving averages take the groups' mean
     * (mean 4, variance 1), as the replicas' all_reduce mean does on the chip */
    struct net_ref_run grouped = {.training = true, .bn_group = 1};
    ok(net_ref_forward(r, &grouped, x, 2, &d), &d);
    y = net_ref_tensor(r, t, NULL);
    for (int i = 0; i < 4; i++)
        assert_float_equal(y[i], 2.0 * (x[i] - (i < 2 ? 2.0 : 6.0)) / sqrt(1.0 + eps) + 1.0,
                           1e-15);
    assert_float_equal(net_ref_moving_update(r, "batch_norm.moving_mean", NULL)[0],
                       1.0 * mom + 4.0 * (1 - mom), 1e-15);
    assert_float_equal(net_ref_moving_update(r, "batch_norm.moving_variance", NULL)[0],
                       3.0 * mom + 1.0 * (1 - mom), 1e-15);
    net_ref_destroy(&r);
    tpu_net_destroy(&net);
}

/* Softmax cross-entropy of logits (0, ln 3) with label 1 is ln(1 + 3) - ln 3; MSE is the
 * mean over the elements then over the batch. */
static void test_loss_values(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    struct tpu_net *net = new_net(1, 1, 2);
    uint32_t t = unary(net, TPU_LAYER_FLATTEN, 0); /* the identity on a vector */
    output(net, t, TPU_LOSS_SOFTMAX_XENT);
    struct net_ref *r = NULL;
    ok(net_ref_create(net, &r, &d), &d);
    const double x[4] = {0, log(3.0), 1, 1};
    const int32_t labels[2] = {1, 0};
    double loss, per[2];
    forward(r, x, 2, true);
    ok(net_ref_loss(r, labels, NULL, &loss, per, &d), &d);
    assert_float_equal(per[0], log(4.0) - log(3.0), 1e-15);
    assert_float_equal(per[1], log(2.0), 1e-15);
    assert_float_equal(loss, (per[0] + per[1]) / 2, 1e-15);
    const int32_t bad[2] = {2, 0};
    assert_int_equal(net_ref_loss(r, bad, NULL, &loss, NULL, &d), TPU_ERANGE);
    net_ref_destroy(&r);
    tpu_net_destroy(&net);

    net = new_net(1, 1, 2);
    output(net, unary(net, TPU_LAYER_FLATTEN, 0), TPU_LOSS_MSE);
    ok(net_ref_create(net, &r, &d), &d);
    const double tg[4] = {1, 1, 1, 4};
    forward(r, x, 2, true);
    ok(net_ref_loss(r, NULL, tg, &loss, per, &d), &d);
    assert_float_equal(per[0], (1.0 + (log(3.0) - 1) * (log(3.0) - 1)) / 2, 1e-15);
    assert_float_equal(per[1], 9.0 / 2, 1e-15);
    net_ref_destroy(&r);
    tpu_net_destroy(&net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_padding),
        cmocka_unit_test(test_conv2d_same_values),
        cmocka_unit_test(test_conv2d_hwio_values),
        cmocka_unit_test(test_pools_exclude_padding),
        cmocka_unit_test(test_batch_norm_values),
        cmocka_unit_test(test_loss_values),
        cmocka_unit_test(test_fd_dense_xent),
        cmocka_unit_test(test_fd_dense_per_pixel_flatten),
        cmocka_unit_test(test_fd_conv2d_valid_same_strides),
        cmocka_unit_test(test_fd_conv2d_relu_mse),
        cmocka_unit_test(test_fd_max_pool),
        cmocka_unit_test(test_fd_avg_pools),
        cmocka_unit_test(test_fd_reshape_relu),
        cmocka_unit_test(test_fd_dropout),
        cmocka_unit_test(test_fd_batch_norm),
        cmocka_unit_test(test_fd_residual_add),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
