/* Models lowered to device programs: the MLP's backward pass (the gradients its training
 * program all-reduces) against central finite differences of the loss its evaluation
 * program computes, both run on the chip; and the spec's error messages.
 *
 * Tolerance: the programs use 6 bf16 passes (fp32-accurate matmuls), so the loss (about 1)
 * is accurate to a few fp32 ulps; with h = 1e-3 that noise is ~1e-4 in the difference
 * quotient, the truncation error O(h^2) is far below it, and a ReLU kink inside [w-h, w+h]
 * would make it first order. The check allows |fd - g| <= 1e-3 + 1e-2 |g| everywhere and
 * requires 90 % of the entries within 1e-4 + 1e-3 |g| (all of them agree so here).
 *
 * The int8 inference path (tpusim/quantize.h, tpu_mlp_build_int8):
 *   - a 3-layer MLP quantized and run through the estimator on the tiny chip (2 replicas,
 *     int8 8x8 MXUs, a last batch padded) gives logits bit-identical to a naive int8
 *     reference written here: int8 x int8 products summed exactly in int32, then the same
 *     fp32 dequantization, bias and ReLU; values outside the calibrated range saturate;
 *   - a model trained by the estimator and quantized from its checkpoint keeps its accuracy
 *     within 1 point of the fp32 model (see test_int8_accuracy_near_fp32 for why);
 *   - the quantize op's rounding and saturation, its verifier rules, and every error. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/dataset_input.h"
#include "tpusim/checkpoint.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/quantize.h"
#include "tpusim/runtime.h"

enum { IN = 6, HID = 5, OUT = 3, PER = 4, REPLICAS = 2, GLOBAL = PER * REPLICAS };

static float xs[GLOBAL][IN];
static int32_t ys[GLOBAL];
static float w0[IN * HID], b0[HID], w1[HID * OUT], b1[OUT];

static void make_data(void)
{
    uint32_t r = 12345;
    for (int i = 0; i < GLOBAL; i++) {
        for (int j = 0; j < IN; j++) {
            r = r * 1103515245u + 12345u;
            xs[i][j] = (float)((r >> 16) % 2001) / 1000.0f - 1.0f;
        }
        ys[i] = i % OUT;
    }
    for (int i = 0; i < IN * HID; i++)
        w0[i] = (float)((i * 37) % 23 - 11) / 20.0f;
    for (int i = 0; i < HID; i++)
        b0[i] = 0.05f * (float)(i - 2);
    for (int i = 0; i < HID * OUT; i++)
        w1[i] = (float)((i * 17) % 13 - 6) / 10.0f;
    for (int i = 0; i < OUT; i++)
        b1[i] = 0.1f * (float)i;
}

struct dev {
    struct tpu_device *dev;
    struct tpu_mlp_program mp;
};

static void open_dev(struct dev *d, enum tpu_mlp_kind kind)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 1;
    assert_int_equal(tpu_device_open(&s, &d->dev, NULL), 0);
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 2;
    spec.sizes[0] = IN;
    spec.sizes[1] = HID;
    spec.sizes[2] = OUT;
    spec.batch_per_replica = PER;
    spec.global_batch = GLOBAL;
    spec.passes = 6;
    spec.momentum = 0;
    spec.learning_rate = 1e-30f; /* the update leaves the params as they are */
    struct tpu_diag dg = {0};
    if (tpu_mlp_build(&spec, kind, &d->mp, &dg))
        fail_msg("%s", dg.msg);
    if (tpu_device_load(d->dev, d->mp.prog, &dg))
        fail_msg("%s", dg.msg);
}

static uint32_t id(const struct dev *d, const char *name)
{
    uint32_t b = 0;
    assert_int_equal(tpu_program_find_buffer(d->mp.prog, name, &b), 0);
    return b;
}

static void write_params(struct dev *d)
{
    for (uint32_t c = 0; c < REPLICAS; c++) {
        assert_int_equal(tpu_device_write(d->dev, c, id(d, "w0"), w0, sizeof w0, NULL), 0);
        assert_int_equal(tpu_device_write(d->dev, c, id(d, "b0"), b0, sizeof b0, NULL), 0);
        assert_int_equal(tpu_device_write(d->dev, c, id(d, "w1"), w1, sizeof w1, NULL), 0);
        assert_int_equal(tpu_device_write(d->dev, c, id(d, "b1"), b1, sizeof b1, NULL), 0);
    }
}

/* One step: infeed each replica's rows (queues hold 2: x and labels fit), run, drain the
 * outfeed; returns the sum of the replicas' first outfeed values. */
static double step(struct dev *d)
{
    tpu_device_set_var(d->dev, d->mp.var_iterations, 1);
    for (uint32_t c = 0; c < REPLICAS; c++) {
        assert_int_equal(tpu_device_infeed(d->dev, c, xs[c * PER], sizeof(float) * PER * IN, 0,
                                           NULL), 0);
        assert_int_equal(tpu_device_infeed(d->dev, c, &ys[c * PER], sizeof(int32_t) * PER, 0,
                                           NULL), 0);
    }
    struct tpu_diag dg = {0};
    if (tpu_device_run(d->dev, 0, NULL, &dg))
        fail_msg("%s", dg.msg);
    double total = 0;
    for (uint32_t c = 0; c < REPLICAS; c++) {
        float v[2];
        assert_int_equal(tpu_device_outfeed(d->dev, c, v, 4, 0, NULL, NULL), 0);
        total += v[0];
        if (d->mp.buf_labels != TPU_NO_BUF && d->mp.buf_out != TPU_NO_BUF &&
            tpu_program_buffer(d->mp.prog, d->mp.buf_out)->cols == 2)
            assert_int_equal(tpu_device_outfeed(d->dev, c, v, 8, 0, NULL, NULL), 0);
    }
    return total;
}

static void test_gradients_match_finite_differences(void **state)
{
    (void)state;
    make_data();
    struct dev tr, ev;
    open_dev(&tr, TPU_MLP_TRAIN);
    open_dev(&ev, TPU_MLP_EVAL);
    write_params(&tr);
    step(&tr);
    /* the all-reduced gradients of the mean loss over the global batch */
    float g[4][IN * HID];
    const char *gname[4] = {"gw0", "gb0", "gw1", "gb1"};
    float *param[4] = {w0, b0, w1, b1};
    const size_t n[4] = {IN * HID, HID, HID * OUT, OUT};
    for (int t = 0; t < 4; t++)
        assert_int_equal(tpu_device_read(tr.dev, 1, id(&tr, gname[t]), g[t], n[t] * 4, NULL), 0);
    const float h = 1e-3f;
    int checked = 0, close = 0;
    double worst = 0;
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < n[t]; i++) {
            float keep = param[t][i];
            param[t][i] = keep + h;
            write_params(&ev);
            double lp = step(&ev);
            param[t][i] = keep - h;
            write_params(&ev);
            double lm = step(&ev);
            param[t][i] = keep;
            double fd = (lp - lm) / (2.0 * h) / GLOBAL; /* eval gives the loss sum */
            double err = fabs(fd - g[t][i]);
            if (err > 1e-3 + 1e-2 * fabs(g[t][i]))
                fail_msg("%s[%zu]: program gradient %.7g, finite difference %.7g", gname[t], i,
                         (double)g[t][i], fd);
            close += err <= 1e-4 + 1e-3 * fabs(g[t][i]);
            worst = err > worst ? err : worst;
            checked++;
        }
    print_message("checked %d gradient entries; %d within 1e-4 + 1e-3|g|; worst error %.3g\n",
                  checked, close, worst);
    assert_true(close >= checked * 9 / 10);
    tpu_device_close(&tr.dev);
    tpu_device_close(&ev.dev);
    tpu_mlp_program_free(&tr.mp);
    tpu_mlp_program_free(&ev.mp);
}

static void test_spec_errors(void **state)
{
    (void)state;
    struct tpu_mlp_spec s;
    struct tpu_mlp_program mp;
    struct tpu_diag d = {0};
    tpu_mlp_default_spec(&s);
    s.n_layers = 0;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "the MLP has 0 layers"));
    s.n_layers = 1;
    s.sizes[0] = 4;
    s.sizes[1] = 1;
    s.batch_per_replica = s.global_batch = 2;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "at least 2 classes"));
    s.sizes[1] = 3;
    s.global_batch = 1;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "global_batch 1 is smaller than batch_per_replica 2"));
    s.global_batch = 2;
    s.passes = 2;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "passes 2"));
    s.passes = 1;
    s.momentum = 1.5f;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "momentum 1.5"));
    s.momentum = 0.9f;
    s.optimizer = TPU_OPT_ADAM;
    s.epsilon = 0;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "Adam needs"));
    s.epsilon = 1e-7f;
    assert_int_equal(tpu_mlp_build(&s, TPU_MLP_TRAIN, &mp, &d), 0);
    /* the program it builds verifies and prints */
    assert_int_equal(tpu_program_verify(mp.prog, NULL, &d), 0);
    char *text = NULL;
    assert_int_equal(tpu_program_to_string(mp.prog, &text), 0);
    assert_non_null(strstr(text, "adam"));
    assert_non_null(strstr(text, "all_reduce"));
    free(text);
    tpu_mlp_program_free(&mp);
}

/* ---- the int8 inference path -------------------------------------------------------------- */

static float urand(uint32_t *r, float lo, float hi)
{
    *r = *r * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*r >> 8) * 0x1p-24f;
}

/* The int8 reference, written from quantize.h's definitions, not from the simulator:
 * q = clamp(nearest-even(alpha * v), -127, 127); acc = exact int32 sum of q_x * q_w;
 * z = (float)acc * dequant + bias in fp32, one rounding each; ReLU between layers. */
static int8_t ref_q8(float alpha, float v)
{
    float p = alpha * v;
    float r = rintf(p);
    return (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}

static void ref_int8_logits(const struct tpu_int8_mlp *q, const float *x, float *logits)
{
    float a[64], z[64];
    uint32_t n_in = tpu_int8_mlp_layer(q, 0)->rows;
    memcpy(a, x, n_in * sizeof *a);
    const uint32_t L = tpu_int8_mlp_n_layers(q);
    for (uint32_t l = 0; l < L; l++) {
        const struct tpu_int8_layer *ly = tpu_int8_mlp_layer(q, l);
        int8_t xq[64];
        for (uint32_t k = 0; k < ly->rows; k++)
            xq[k] = ref_q8(ly->in_alpha, a[k]);
        for (uint32_t j = 0; j < ly->cols; j++) {
            int32_t acc = 0;
            for (uint32_t k = 0; k < ly->rows; k++)
                acc += (int32_t)xq[k] * (int32_t)ly->w[(size_t)k * ly->cols + j];
            float v = (float)acc * ly->dequant[j];
            v = v + ly->bias[j];
            z[j] = (l + 1 < L && !(v > 0.0f)) ? 0.0f : v;
        }
        memcpy(a, z, ly->cols * sizeof *a);
    }
    memcpy(logits, a, tpu_int8_mlp_layer(q, L - 1)->cols * sizeof *logits);
}

struct logits_sink {
    float *out; /* [n][cols] */
    uint32_t cols;
    uint64_t n;
};

static void collect(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct logits_sink *s = ctx;
    assert_int_equal(cols, s->cols);
    memcpy(s->out + index * cols, row, cols * sizeof *row);
    s->n++;
}

static struct tpu_device *open_tiny(void)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 1;
    struct tpu_device *dev = NULL;
    assert_int_equal(tpu_device_open(&s, &dev, NULL), 0);
    return dev;
}

static void test_int8_matches_reference(void **state)
{
    (void)state;
    enum { F = 40, H1 = 24, H2 = 13, C = 6, NCAL = 64, NX = 50 };
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = F;
    spec.sizes[1] = H1;
    spec.sizes[2] = H2;
    spec.sizes[3] = C;
    static float w[3][F * H1], b[3][H1];
    uint32_t r = 7;
    for (uint32_t l = 0; l < 3; l++) {
        float a = sqrtf(6.0f / (float)(spec.sizes[l] + spec.sizes[l + 1]));
        for (uint32_t i = 0; i < spec.sizes[l] * spec.sizes[l + 1]; i++)
            w[l][i] = urand(&r, -a, a);
        for (uint32_t j = 0; j < spec.sizes[l + 1]; j++)
            b[l][j] = urand(&r, -0.1f, 0.1f);
    }
    w[1][5] = 0.0f; /* a column can hold zeros; a whole zero column gets scale 1 */
    for (uint32_t k = 0; k < H1; k++)
        w[1][(size_t)k * H2 + 7] = 0.0f;
    static float cal[NCAL * F], x[NX * F];
    for (size_t i = 0; i < NCAL * F; i++)
        cal[i] = urand(&r, -1.0f, 1.0f);
    for (size_t i = 0; i < NX * F; i++) /* past the calibrated range: saturates */
        x[i] = urand(&r, -1.5f, 1.5f);
    const float *wp[3] = {w[0], w[1], w[2]}, *bp[3] = {b[0], b[1], b[2]};
    struct tpu_int8_mlp *q = NULL;
    struct tpu_diag d = {0};
    if (tpu_int8_mlp_quantize(&spec, wp, bp, cal, NCAL, &q, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_int8_mlp_n_layers(q), 3);
    assert_null(tpu_int8_mlp_layer(q, 3));

    /* per-channel weights: each nonzero column reaches +-127 and every weight is within
     * half a step of its quantized value */
    for (uint32_t l = 0; l < 3; l++) {
        const struct tpu_int8_layer *ly = tpu_int8_mlp_layer(q, l);
        assert_int_equal(ly->rows, spec.sizes[l]);
        assert_int_equal(ly->cols, spec.sizes[l + 1]);
        for (uint32_t j = 0; j < ly->cols; j++) {
            int peak = 0;
            for (uint32_t k = 0; k < ly->rows; k++) {
                const size_t i = (size_t)k * ly->cols + j;
                peak = abs(ly->w[i]) > peak ? abs(ly->w[i]) : peak;
                const float err = fabsf(w[l][i] - (float)ly->w[i] * ly->w_scale[j]);
                if (err > 0.5f * ly->w_scale[j] * 1.0001f)
                    fail_msg("w%u[%u][%u] = %g is %g from its int8 value %d x %g", l, k, j,
                             (double)w[l][i], (double)err, ly->w[i], (double)ly->w_scale[j]);
            }
            if (l == 1 && j == 7) {
                assert_int_equal(peak, 0);
                assert_true(ly->w_scale[j] == 1.0f);
            } else {
                assert_int_equal(peak, 127);
            }
            assert_true(ly->dequant[j] == ly->in_scale * ly->w_scale[j]);
        }
        assert_true(ly->in_alpha == 1.0f / ly->in_scale);
    }
    /* layer 0's input scale is the calibration data's max-abs / 127; the hidden layers'
     * are the max-abs of the fp32 model's ReLU outputs over the calibration examples / 127
     * (summed here in double, so allow a few fp32 ulps) */
    float m = 0;
    for (size_t i = 0; i < NCAL * F; i++)
        m = fmaxf(m, fabsf(cal[i]));
    assert_true(tpu_int8_mlp_layer(q, 0)->in_scale == m / 127.0f);
    double peak[3] = {0};
    for (int i = 0; i < NCAL; i++) {
        double a[F], z[F];
        for (int k = 0; k < F; k++)
            a[k] = cal[i * F + k];
        for (uint32_t l = 0; l < 2; l++) {
            for (uint32_t j = 0; j < spec.sizes[l + 1]; j++) {
                z[j] = b[l][j];
                for (uint32_t k = 0; k < spec.sizes[l]; k++)
                    z[j] += a[k] * w[l][(size_t)k * spec.sizes[l + 1] + j];
            }
            for (uint32_t j = 0; j < spec.sizes[l + 1]; j++) {
                a[j] = z[j] > 0 ? z[j] : 0;
                peak[l + 1] = fmax(peak[l + 1], a[j]);
            }
        }
    }
    for (uint32_t l = 1; l < 3; l++) {
        const double got = tpu_int8_mlp_layer(q, l)->in_scale * 127.0;
        if (fabs(got - peak[l]) > 1e-5 * peak[l])
            fail_msg("layer %u's input scale x 127 is %.9g; the calibration max-abs is %.9g", l,
                     got, peak[l]);
    }

    /* the chip, through the estimator: 2 replicas, global batch 16, so 50 examples are 3
     * full batches and one padded */
    struct tpu_device *dev = open_tiny();
    struct tpu_model model;
    tpu_int8_mlp_model(&model, q);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.predict_batch_size = cfg.eval_batch_size = cfg.train_batch_size = 16;
    cfg.iterations_per_loop = 2;
    struct tpu_estimator *est = NULL;
    if (tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d))
        fail_msg("%s", d.msg);
    struct tpu_dataset ds = {.n_examples = NX, .n_features = F, .image_rows = 1,
                             .image_cols = F, .n_classes = C, .x = x};
    int32_t y[NX];
    for (int i = 0; i < NX; i++)
        y[i] = i % C;
    ds.y = y;
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &ds, 1);
    static float got[NX * C], want[NX * C];
    struct logits_sink sink = {.out = got, .cols = C};
    uint64_t n = 0;
    if (tpu_estimator_predict(est, &in.input, collect, &sink, &n, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(n, NX);
    for (int i = 0; i < NX; i++)
        ref_int8_logits(q, x + (size_t)i * F, want + (size_t)i * C);
    int bad = 0;
    for (int i = 0; i < NX * C; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ < 5)
            print_message("logit [%d][%d]: chip %.9g, reference %.9g\n", i / C, i % C,
                          (double)got[i], (double)want[i]);
    if (bad)
        fail_msg("%d of %d int8 logits differ from the reference", bad, NX * C);

    /* evaluation counts the same argmaxes */
    int correct = 0;
    for (int i = 0; i < NX; i++) {
        int best = 0;
        for (int j = 1; j < C; j++)
            if (want[i * C + j] > want[i * C + best])
                best = j;
        correct += best == y[i];
    }
    struct tpu_eval_result ev;
    if (tpu_estimator_evaluate(est, &in.input, 0, &ev, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(ev.examples, NX);
    assert_true(fabs(ev.accuracy - (double)correct / NX) < 1e-12);
    /* training the quantized model is refused */
    assert_int_equal(tpu_estimator_train(est, &in.input, 1, 0, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "the int8 model is quantized from a trained checkpoint for "
                                  "evaluate and predict; it cannot be trained"));
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_int8_mlp_destroy(&q);
    tpu_int8_mlp_destroy(&q); /* NULL is fine */
}

/* Gaussian blobs: 10 classes in 32 dimensions, centres in [0, 1], noise 0.5 per feature
 * (Box-Muller), so that a small MLP gets most but not all of them right. */
static void blobs(uint32_t seed, uint32_t n, float *x, int32_t *y)
{
    enum { F = 32, K = 10 };
    float centre[K][F];
    uint32_t r = 99;
    for (int c = 0; c < K; c++)
        for (int f = 0; f < F; f++)
            centre[c][f] = urand(&r, 0.0f, 1.0f);
    r = seed;
    for (uint32_t i = 0; i < n; i++) {
        y[i] = (int32_t)(i % K);
        for (int f = 0; f < F; f++) {
            float u1 = urand(&r, 1e-7f, 1.0f), u2 = urand(&r, 0.0f, 1.0f);
            float g = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
            x[(size_t)i * F + f] = centre[y[i]][f] + 0.5f * g;
        }
    }
}

/* Tolerance: 1 point of accuracy. Quantization moves each weight by at most half a step,
 * 1/254 of its column's largest weight, and each activation by half a step of its layer's
 * range; over a dot product these errors are independent and mostly cancel, leaving a
 * relative logit error of a fraction of a percent. Only examples whose top two logits are
 * that close can change their argmax, which is well under 1 % of them for a trained model
 * (the measured change here is a few tenths of a point either way). A bug in scales,
 * rounding or layout costs tens of points. */
static void test_int8_accuracy_near_fp32(void **state)
{
    (void)state;
    enum { F = 32, NTRAIN = 2048, NTEST = 2000 };
    static float xtr[NTRAIN * F], xte[NTEST * F];
    static int32_t ytr[NTRAIN], yte[NTEST];
    blobs(1, NTRAIN, xtr, ytr);
    blobs(2, NTEST, xte, yte);
    struct tpu_dataset tr = {.n_examples = NTRAIN, .n_features = F, .image_rows = 1,
                             .image_cols = F, .n_classes = 10, .x = xtr, .y = ytr};
    struct tpu_dataset te = tr;
    te.n_examples = NTEST;
    te.x = xte;
    te.y = yte;

    char dir[] = "/tmp/tpusim_int8_XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 2;
    spec.sizes[0] = F;
    spec.sizes[1] = 24;
    spec.sizes[2] = 10;
    spec.optimizer = TPU_OPT_ADAM;
    spec.learning_rate = 0.01f;
    struct tpu_model fp32_model;
    tpu_mlp_model(&fp32_model, &spec);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = cfg.eval_batch_size = 64;
    cfg.iterations_per_loop = 100;
    snprintf(cfg.model_dir, sizeof cfg.model_dir, "%s", dir);
    struct tpu_device *dev = open_tiny();
    struct tpu_estimator *est = NULL;
    struct tpu_diag d = {0};
    if (tpu_estimator_create(dev, &cfg, &fp32_model, NULL, 0, &est, &d))
        fail_msg("%s", d.msg);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &tr, 1);
    if (tpu_estimator_train(est, &in.input, 300, 0, &d))
        fail_msg("train: %s", d.msg);
    tpu_dataset_input_free(&in);
    tpu_estimator_destroy(&est);

    struct tpu_int8_mlp *q = NULL;
    if (tpu_int8_mlp_from_checkpoint(dir, &spec, xtr, 1000, &q, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_int8_mlp_global_step(q), 300);
    double fp32 = 0;
    assert_int_equal(tpu_int8_mlp_fp32_accuracy(q, xte, yte, NTEST, &fp32, &d), 0);

    struct tpu_model model;
    tpu_int8_mlp_model(&model, q);
    cfg.model_dir[0] = '\0';
    if (tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d))
        fail_msg("%s", d.msg);
    tpu_dataset_input_init(&in, &te, 1);
    struct tpu_eval_result ev;
    if (tpu_estimator_evaluate(est, &in.input, 0, &ev, &d))
        fail_msg("evaluate: %s", d.msg);
    tpu_dataset_input_free(&in);
    print_message("fp32 (host) %.2f %%, int8 (chip) %.2f %% on %d examples\n", 100 * fp32,
                  100 * ev.accuracy, NTEST);
    assert_int_equal(ev.examples, NTEST);
    assert_true(fp32 > 0.80); /* a trained model, not chance (10 %) */
    assert_true(fp32 < 0.995); /* with examples near the boundaries, so the check bites */
    assert_true(fabs(ev.accuracy - fp32) <= 0.01);

    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_int8_mlp_destroy(&q);
    struct tpu_checkpoint_entry *ents = NULL;
    size_t n_ents = 0;
    assert_int_equal(tpu_checkpoint_list(dir, &ents, &n_ents, NULL), 0);
    for (size_t i = 0; i < n_ents; i++)
        remove(ents[i].path);
    tpu_checkpoint_list_free(ents, n_ents);
    char idx[600];
    snprintf(idx, sizeof idx, "%s/checkpoint.json", dir);
    remove(idx);
    snprintf(idx, sizeof idx, "%s/metrics.jsonl", dir);
    remove(idx);
    remove(dir);
}

/* The quantize op: rounding to nearest even, saturation at +-127, NaN to 0. */
static void test_quantize_op(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    struct tpu_program *p = NULL;
    if (tpu_program_parse("program q\n"
                          "param x: f32[1, 12]\n"
                          "param y: int8[1, 12]\n"
                          "y = quantize x alpha=2\n",
                          "test", &p, &d))
        fail_msg("%s", d.msg);
    struct tpu_device *dev = open_tiny();
    if (tpu_device_load(dev, p, &d))
        fail_msg("%s", d.msg);
    const float x[12] = {0.25f, 0.75f, -0.25f, -1.25f, 1.2f, -0.26f, 63.5f, 63.75f, 64.0f,
                         -1000.0f, NAN, INFINITY};
    const int8_t want[12] = {0, 2, 0, -2, 2, -1, 127, 127, 127, -127, 0, 127};
    for (uint32_t c = 0; c < 2; c++)
        assert_int_equal(tpu_device_write(dev, c, 0, x, sizeof x, NULL), 0);
    if (tpu_device_run(dev, 0, NULL, &d))
        fail_msg("%s", d.msg);
    int8_t got[12];
    assert_int_equal(tpu_device_read(dev, 0, 1, got, sizeof got, NULL), 0);
    for (int i = 0; i < 12; i++)
        if (got[i] != want[i])
            fail_msg("quantize(%g * 2) = %d, expected %d", (double)x[i], got[i], want[i]);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);

    /* the verifier's rules */
    const char *bad[][2] = {
        {"program q\nparam x: f32[1, 4]\nparam y: int32[1, 4]\ny = quantize x alpha=2\n",
         "quantize takes f32 to int8; x is 'x' f32[1, 4] and y is 'y' int32[1, 4]"},
        {"program q\nparam x: f32[1, 4]\nparam y: int8[1, 4]\ny = quantize x\n",
         "alpha=0; quantize multiplies by alpha = 1 / the scale, which must be above 0"},
        {"program q\nparam x: f32[1, 4]\nparam y: int8[1, 4]\ny = quantize x alpha=inf\n",
         "alpha=inf is not finite"},
        {"program q\nparam x: f32[1, 4]\nparam y: int8[2, 4]\ny = quantize x alpha=1\n",
         "output y"},
        {"program q\nparam x: f32[1, 4]\nparam y: int8[1, 4]\ny = convert x\n",
         "use quantize with a scale (alpha)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = NULL;
        if (tpu_program_parse(bad[i][0], "test", &p, &d))
            fail_msg("parse %zu: %s", i, d.msg);
        assert_int_not_equal(tpu_program_verify(p, NULL, &d), 0);
        if (!strstr(d.msg, bad[i][1]))
            fail_msg("case %zu: '%s' not in '%s'", i, bad[i][1], d.msg);
        tpu_program_destroy(&p);
    }
}

static void test_int8_errors(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tpu-v3", &chip, NULL), 0);
    assert_int_equal(tpu_int8_check_chip(&chip, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "chip 'tpu-v3' has no int8 matrix units (its mxu.dtypes are "
                                  "bf16 only)"));
    assert_non_null(strstr(d.msg, "tpu-v1, tpu-v4 or tiny"));
    const char *with_int8[] = {"tpu-v1", "tpu-v4", "tiny"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tpu_config_load_preset(with_int8[i], &chip, NULL), 0);
        assert_int_equal(tpu_int8_check_chip(&chip, &d), 0);
    }

    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 1;
    spec.sizes[0] = 4;
    spec.sizes[1] = 3;
    spec.batch_per_replica = spec.global_batch = 2;
    struct tpu_mlp_program mp;
    const float alpha[1] = {1.0f}, zero[1] = {0.0f};
    assert_int_equal(tpu_mlp_build_int8(&spec, TPU_MLP_TRAIN, alpha, &mp, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "the int8 MLP is an inference model"));
    assert_int_equal(tpu_mlp_build_int8(&spec, TPU_MLP_EVAL, zero, &mp, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "in_alpha[0] = 0"));
    /* the program verifies against a chip with int8 matrix units, not one without */
    assert_int_equal(tpu_mlp_build_int8(&spec, TPU_MLP_PREDICT, alpha, &mp, &d), 0);
    assert_int_equal(tpu_config_load_preset("tpu-v1", &chip, NULL), 0);
    if (tpu_program_verify(mp.prog, &chip, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_config_load_preset("tpu-v3", &chip, NULL), 0);
    assert_int_not_equal(tpu_program_verify(mp.prog, &chip, &d), 0);
    assert_non_null(strstr(d.msg, "int8"));
    tpu_mlp_program_free(&mp);

    /* quantizing: no calibration data, a NaN weight, no checkpoint, a checkpoint of
     * another shape */
    float w[12] = {0}, b[3] = {0}, cal[4] = {1, 2, 3, 4};
    const float *wp[1] = {w}, *bp[1] = {b};
    struct tpu_int8_mlp *q = NULL;
    assert_int_equal(tpu_int8_mlp_quantize(&spec, wp, bp, cal, 0, &q, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "no calibration examples"));
    w[5] = NAN;
    assert_int_equal(tpu_int8_mlp_quantize(&spec, wp, bp, cal, 1, &q, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "w0[1][2] is nan; only finite weights can be quantized"));
    assert_null(q);
    w[5] = 0;
    char dir[] = "/tmp/tpusim_int8e_XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(tpu_int8_mlp_from_checkpoint(dir, &spec, cal, 1, &q, &d), TPU_ENOTFOUND);
    assert_non_null(strstr(d.msg, "holds no checkpoint to quantize; train the model first"));
    struct tpu_tensor t[2] = {
        {.name = "w0", .dtype = TPU_F32, .rows = 4, .cols = 2, .data = w},
        {.name = "b0", .dtype = TPU_F32, .rows = 1, .cols = 2, .data = b},
    };
    struct tpu_checkpoint_options o;
    tpu_checkpoint_default_options(&o);
    char path[600];
    assert_int_equal(tpu_checkpoint_save(dir, 5, t, 2, &o, path, sizeof path, &d), 0);
    assert_int_equal(tpu_int8_mlp_from_checkpoint(dir, &spec, cal, 1, &q, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "tensor 'w0' is f32[4, 2] but the MLP of these layer widths "
                                  "needs f32[4, 3]"));
    assert_null(q);
    remove(path);
    char idx[600];
    snprintf(idx, sizeof idx, "%s/checkpoint.json", dir);
    remove(idx);
    remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_int8_matches_reference),
        cmocka_unit_test(test_int8_accuracy_near_fp32),
        cmocka_unit_test(test_quantize_op),
        cmocka_unit_test(test_int8_errors),
    };
    return cmocka_run_group_tests_name("models", tests, NULL, NULL);
}
