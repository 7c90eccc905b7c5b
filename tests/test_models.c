/* Models lowered to device programs: the MLP's backward pass (the gradients its training
 * program all-reduces) against central finite differences of the loss its evaluation
 * program computes, both run on the chip; and the spec's error messages.
 *
 * Tolerance: the programs use 6 bf16 passes (fp32-accurate matmuls), so the loss (about 1)
 * is accurate to a few fp32 ulps; with h = 1e-3 that noise is ~1e-4 in the difference
 * quotient, the truncation error O(h^2) is far below it, and a ReLU kink inside [w-h, w+h]
 * would make it first order. The check allows |fd - g| <= 1e-3 + 1e-2 |g| everywhere and
 * requires 90 % of the entries within 1e-4 + 1e-3 |g| (all of them agree so here). */
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

#include "tpusim/device.h"
#include "tpusim/models.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_spec_errors),
    };
    return cmocka_run_group_tests_name("models", tests, NULL, NULL);
}
