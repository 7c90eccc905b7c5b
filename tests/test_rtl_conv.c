/* The conv2d ops on the RTL matrix-unit provider (sim/chip/mxu_provider.c runs each as its
 * GEMM on the Verilated arrays, the patches im2col(x) formed before it, or the product's
 * col2im after it) against the built-in matrix unit, on the tiny chip (8x8 arrays, 2 cores):
 *   - a program of the three ops with f32, bf16 and mixed inputs, 'same' padding at stride 2,
 *     accumulate into dw, and 80 windows (more than the 64 accumulator rows), its operands
 *     holding edge values (NaN with payloads, Inf, subnormals, overflow): every output on
 *     every core equal bit for bit, every per-core counter equal, and each array ran each op;
 *     once with one MXU per core, once with two and 24 accumulator rows;
 *   - an f32 convolution in 6 bf16 passes is refused with the op's name and the fix;
 *   - row-partitioned convolutions (parts 2) equal the native backend's on each core, their
 *     padding rows included.
 * (tests/test_rtl_backend.c covers matmuls and a whole MLP training.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu_rtl_provider.h"
#include "tpusim/device.h"
#include "tpusim/program.h"
#include "device_helpers.h"
#include "rtl_helpers.h"

#define MAX_CORES 2

struct rng {
    uint64_t s;
};

static uint64_t rnd(struct rng *r) /* xorshift64* */
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* A device of one chip; with the RTL provider when p is not NULL. */
static struct tpu_device *open_dev(const struct tpu_chip_config *cfg,
                                   const struct tpu_mxu_rtl_provider *p)
{
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, cfg);
    s.n_threads = 2;
    s.mxu = p ? tpu_mxu_rtl_provider_get(p) : NULL;
    return open_settings(&s);
}

/* f32 values of every kind: mostly moderate, now and then tiny (subnormal products), huge
 * (overflowing products) or special (+-Inf, NaNs with payloads, +-0, bf16 rounding ties). */
static uint32_t edge_bits(struct rng *r)
{
    static const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFA00001u,
                                        0x00000001u, 0x80400000u, 0x00000000u, 0x80000000u,
                                        0x3F808000u, 0x3F818000u, 0x7F7FFFFFu};
    const uint64_t k = rnd(r) % 40;
    float f = (float)((double)(rnd(r) >> 40) * 0x1p-24 * 8.0 - 4.0);
    if (k == 0) {
        return specials[rnd(r) % (sizeof specials / sizeof specials[0])];
    } else if (k == 1) {
        f *= 0x1p-70f;
    } else if (k == 2) {
        f *= 0x1p62f;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Fills param b on every core: f32 edge values, bf16 random bits. */
static void fill_param(struct tpu_device *dev, const struct tpu_program *prog, uint32_t b,
                       struct rng *r)
{
    const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, b);
    const size_t count = (size_t)bd->rows * bd->cols, bytes = tpu_buffer_bytes(bd);
    void *data = malloc(bytes);
    assert_non_null(data);
    for (size_t i = 0; i < count; i++) {
        if (bd->dtype == TPU_BF16)
            ((uint16_t *)data)[i] = (uint16_t)rnd(r);
        else
            ((uint32_t *)data)[i] = edge_bits(r);
    }
    for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++)
        assert_int_equal(tpu_device_write(dev, c, b, data, bytes, NULL), 0);
    free(data);
}

static const char *const conv_program =
    "program convs\n"
    "var n\n"
    "param x1: f32[2, 75]\n"
    "param w1: f32[27, 11]\n"
    "param y1: f32[18, 11]\n"
    "param dy2: bf16[18, 11]\n"
    "param w2: f32[27, 11]\n"
    "param dx2: f32[50, 3]\n"
    "param x3: f32[10, 15]\n"
    "param dy3: f32[18, 11]\n"
    "param dw3: f32[27, 11]\n"
    "param x4: bf16[80, 4]\n"
    "param w4: bf16[36, 9]\n"
    "param y4: f32[80, 9]\n"
    "loop n {\n"
    "  y1 = conv2d x1, w1 h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "  dx2 = conv2d_grad_input dy2, w2 h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "  dw3 = conv2d_grad_filter x3, dy3 h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 "
    "accumulate\n"
    "  y4 = conv2d x4, w4 h=10 w=8 c=4 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=10 wo=8\n"
    "}\n";

#define CONV_OUTPUTS 4

struct conv_result {
    void *y[MAX_CORES][CONV_OUTPUTS];
    struct tpu_core_counters ctr[MAX_CORES];
};

static void run_convs(const struct tpu_chip_config *cfg, struct tpu_mxu_rtl_provider *p,
                      struct conv_result *out)
{
    static const char *const in_names[] = {"x1", "w1", "dy2", "w2", "x3", "dy3", "dw3", "x4",
                                           "w4"};
    static const char *const y_names[CONV_OUTPUTS] = {"y1", "dx2", "dw3", "y4"};
    struct tpu_program *prog = parse(conv_program);
    struct tpu_device *dev = open_dev(cfg, p);
    struct tpu_diag d = {0};
    if (tpu_program_verify(prog, cfg, &d) != 0 || tpu_device_load(dev, prog, &d) != 0)
        fail_msg("load: %s", d.msg);
    struct rng r = {11};
    uint32_t id = 0;
    for (size_t i = 0; i < sizeof in_names / sizeof in_names[0]; i++) {
        assert_int_equal(tpu_program_find_buffer(prog, in_names[i], &id), 0);
        fill_param(dev, prog, id, &r);
    }
    assert_int_equal(tpu_program_find_var(prog, "n", &id), 0);
    tpu_device_set_var(dev, id, 2); /* twice: dw3 accumulates twice */
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < CONV_OUTPUTS; i++) {
            assert_int_equal(tpu_program_find_buffer(prog, y_names[i], &id), 0);
            const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(prog, id));
            out->y[c][i] = malloc(bytes);
            assert_non_null(out->y[c][i]);
            assert_int_equal(tpu_device_read(dev, c, id, out->y[c][i], bytes, &d), 0);
        }
        assert_int_equal(tpu_device_counters(dev, c, &out->ctr[c]), 0);
    }
    tpu_device_close(&dev);
    tpu_program_destroy(&prog);
}

static void check_convs(const struct tpu_chip_config *cfg)
{
    static const size_t y_words[CONV_OUTPUTS] = {18 * 11, 50 * 3, 27 * 11, 80 * 9};
    struct tpu_mxu_rtl_provider *p = make_provider(cfg);
    struct conv_result nat, rtl;
    run_convs(cfg, NULL, &nat);
    run_convs(cfg, p, &rtl);
    size_t nans = 0;
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < CONV_OUTPUTS; i++) {
            const uint32_t *a = nat.y[c][i], *b = rtl.y[c][i];
            size_t bad = 0;
            for (size_t j = 0; j < y_words[i]; j++) {
                nans += a[j] == 0x7FC00000u;
                if (a[j] != b[j] && bad++ < 5)
                    print_error("core %u output %d [%zu]: native 0x%08" PRIx32 ", rtl 0x%08"
                                PRIx32 "\n", c, i, j, a[j], b[j]);
            }
            if (bad)
                fail_msg("core %u, %d MXUs per core: %zu of %zu words of conv output %d "
                         "differ between the native and the RTL backend", c, cfg->mxu_per_core,
                         bad, y_words[i], i);
            free(nat.y[c][i]);
            free(rtl.y[c][i]);
        }
        if (memcmp(&nat.ctr[c], &rtl.ctr[c], sizeof nat.ctr[c]) != 0)
            fail_msg("core %u: the counters differ (cycles %" PRIu64 " / %" PRIu64 ", busy mxu "
                     "%" PRIu64 " / %" PRIu64 ", native / rtl)", c, nat.ctr[c].cycles,
                     rtl.ctr[c].cycles, nat.ctr[c].busy[TPU_UNIT_MXU],
                     rtl.ctr[c].busy[TPU_UNIT_MXU]);
        assert_true(nat.ctr[c].busy[TPU_UNIT_MXU] > 0);
        /* every op gives each array of the core work (at least two units each), twice */
        for (uint32_t x = 0; x < cfg->mxu_per_core; x++) {
            struct tpu_mxu_rtl_unit_stats st;
            assert_int_equal(tpu_mxu_rtl_provider_stats(p, c * cfg->mxu_per_core + x, &st), 0);
            assert_int_equal(st.runs, 2 * 4);
        }
    }
    assert_true(nans > 0); /* the edge values reached the outputs */
    tpu_mxu_rtl_provider_destroy(&p);
}

static void test_convs_match_native(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = tiny();
    check_convs(&cfg);
    cfg.mxu_per_core = 2; /* two arrays per core sharing each op, short accumulator chunks */
    cfg.accumulator_rows = 24;
    check_convs(&cfg);
}

static void test_conv_passes_refused(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = tiny();
    struct tpu_mxu_rtl_provider *p = make_provider(&cfg);
    struct tpu_program *prog = parse("program t\n"
                                     "param x: f32[16, 8]\n"
                                     "param w: f32[72, 8]\n"
                                     "param y: f32[16, 8]\n"
                                     "y = conv2d x, w h=4 w=4 c=8 kh=3 kw=3 sh=1 sw=1 pt=1 "
                                     "pl=1 ho=4 wo=4 passes=6\n");
    struct tpu_device *dev = open_dev(&cfg, p);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_load(dev, prog, &d), 0);
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_EUNSUPPORTED);
    if (!strstr(d.msg, ", op 0: conv2d: the rtl matrix unit runs one-pass products only (bf16 "
                       "inputs), but this f32 convolution asks for 6 bf16 passes; use passes "
                       "1 (e.g. --passes 1) or the native backend"))
        fail_msg("message: %s", d.msg);
    tpu_device_close(&dev);
    tpu_program_destroy(&prog);
    tpu_mxu_rtl_provider_destroy(&p);
}

/* Row-partitioned convolutions (parts = 2 on a device of 2 cores per replica) on the RTL
 * provider equal the native backend's bit for bit on each core, padding rows included:
 * 5 rows over 2 cores (hc = 3, hoc = 3, E = 5); core 1's last output row is padding, and
 * its dy rows there hold NaN, which neither backend may read. */
static void run_parts(const struct tpu_chip_config *cfg, struct tpu_mxu_rtl_provider *p,
                      uint32_t out[2][3][240])
{
    const char *win = "h=5 w=4 c=3 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=5 wo=4 parts=2";
    char text[1024];
    snprintf(text, sizeof text,
             "program parts\nparam xe: f32[10, 12]\nparam w: f32[27, 5]\nparam dy: f32[24, 5]\n"
             "param y: f32[24, 5]\nparam dx: f32[10, 12]\nparam dw: f32[27, 5]\n"
             "y = conv2d xe, w %s\ndx = conv2d_grad_input dy, w %s\n"
             "dw = conv2d_grad_filter xe, dy %s\n", win, win, win);
    struct tpu_program *prog = parse(text);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, cfg);
    s.cores_per_replica = 2;
    s.mxu = p ? tpu_mxu_rtl_provider_get(p) : NULL;
    struct tpu_device *dev = open_settings(&s);
    struct tpu_diag d = {0};
    if (tpu_device_load(dev, prog, &d) != 0)
        fail_msg("load: %s", d.msg);
    struct rng r = {5};
    for (uint32_t c = 0; c < 2; c++) {
        float xe[120], w[135], dy[120];
        for (int i = 0; i < 120; i++)
            xe[i] = (float)((double)(rnd(&r) >> 40) * 0x1p-23 - 1.0);
        for (int i = 0; i < 135; i++)
            w[i] = (float)((double)(rnd(&r) >> 40) * 0x1p-23 - 1.0);
        for (int i = 0; i < 120; i++) /* row i / 5 = (n, oyl, ox): oyl = (i / 20) % 3 */
            dy[i] = c == 1 && (i / 20) % 3 == 2 ? NAN : (float)(rnd(&r) % 7) - 3.0f;
        assert_int_equal(tpu_device_write(dev, c, 0, xe, sizeof xe, &d), 0);
        assert_int_equal(tpu_device_write(dev, c, 1, w, sizeof w, &d), 0);
        assert_int_equal(tpu_device_write(dev, c, 2, dy, sizeof dy, &d), 0);
    }
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    static const size_t bytes[3] = {120 * 4, 120 * 4, 135 * 4};
    for (uint32_t c = 0; c < 2; c++)
        for (uint32_t i = 0; i < 3; i++)
            assert_int_equal(tpu_device_read(dev, c, 3 + i, out[c][i], bytes[i], &d), 0);
    tpu_device_close(&dev);
    tpu_program_destroy(&prog);
}

static void test_conv_parts_match_native(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = tiny();
    struct tpu_mxu_rtl_provider *p = make_provider(&cfg);
    static uint32_t nat[2][3][240], rtl[2][3][240];
    run_parts(&cfg, NULL, nat);
    run_parts(&cfg, p, rtl);
    static const size_t words[3] = {120, 120, 135};
    for (uint32_t c = 0; c < 2; c++)
        for (uint32_t i = 0; i < 3; i++)
            for (size_t j = 0; j < words[i]; j++) {
                if (nat[c][i][j] != rtl[c][i][j])
                    fail_msg("core %u output %u [%zu]: native 0x%08" PRIx32 ", rtl 0x%08" PRIx32,
                             c, i, j, nat[c][i][j], rtl[c][i][j]);
                if ((nat[c][i][j] & 0x7F800000u) == 0x7F800000u)
                    fail_msg("core %u output %u [%zu] is not finite: a NaN of dy's padding "
                             "rows was read", c, i, j);
            }
    for (size_t j = 40; j < 60; j++) /* core 1, example 0, output row 5: padding, +0 */
        assert_int_equal(nat[1][0][j], 0);
    tpu_mxu_rtl_provider_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convs_match_native),
        cmocka_unit_test(test_conv_passes_refused),
        cmocka_unit_test(test_conv_parts_match_native),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
