/* The RTL matrix-unit provider: the native chip with every matrix-unit operation on the
 * Verilated array (rtl/mxu_rtl_provider.h through sim/chip/mxu_provider.c), against the
 * built-in matrix unit.
 *
 *   - A small MLP (70-13-5, 67 rows per replica, so M > 64 accumulator rows in the forward
 *     pass and in the weight gradient, and K, N that are not multiples of 8) trains for 3
 *     steps on the tiny chip (8x8 MXU, 2 cores, 1 MXU per core) with the same data and the
 *     same initial weights on both backends: every parameter and optimizer state on every
 *     core is equal bit for bit, the outfed losses are equal bit for bit, and every per-core
 *     counter is equal (total cycles, busy MXU cycles, stalls, bytes, MACs), and so are the
 *     per-op statistics (device.h, struct tpu_op_stats) of every op. The MXU busy
 *     cycles also equal the cycles the RTL arrays counted, unit by unit.
 *   - Hand-written matmuls cover what the MLP does not: accumulate (into values with NaN
 *     payloads and int32 wrap-around), int8, bf16 buffers, every transpose, edge values
 *     (NaN, Inf, subnormals, overflow), a 1x1x1 product, on the tiny chip and on a variant
 *     with 2 MXUs per core and 24 accumulator rows (units dealt round-robin, short chunks).
 *   - A waveform (VCD) of an array is written and holds the run; a waveform on a full
 *     disk (/dev/full) ends the run with the path and ENOSPC's message instead of hanging
 *     in Verilator's writer, and the next runs go on untraced.
 *   - The error paths: 3-pass matmuls, an array size the chip does not have, timing-only mode,
 *     too few units, a shape with no RTL model, a waveform that cannot be created. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxu_rtl.h"
#include "mxu_rtl_provider.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/program.h"
#include "device_helpers.h"
#include "rtl_helpers.h"

/* ---- helpers ----------------------------------------------------------------------------- */

struct rng {
    uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
    /* xorshift64* */
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi). */
static float rnd_float(struct rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((rnd(r) >> 40) * 0x1p-24);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Opens a device of one chip; with the RTL provider when p is not NULL. */
static struct tpu_device *open_dev(const struct tpu_chip_config *cfg,
                                   const struct tpu_mxu_rtl_provider *p)
{
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, cfg);
    s.n_threads = 2;
    s.op_stats = true;
    s.mxu = tpu_mxu_rtl_provider_get(p);
    return open_settings(&s);
}

static uint32_t bufid(const struct tpu_program *p, const char *name)
{
    uint32_t id = 0;
    assert_int_equal(tpu_program_find_buffer(p, name, &id), 0);
    return id;
}

static size_t buf_size(const struct tpu_program *p, uint32_t id)
{
    return (size_t)tpu_buffer_bytes(tpu_program_buffer(p, id));
}

/* Compares two blobs of 32-bit words; on a mismatch prints the first few with both bit
 * patterns (as floats too) and fails. */
static void assert_words_equal(const char *what, const void *native, const void *rtl,
                               size_t bytes)
{
    if (memcmp(native, rtl, bytes) == 0)
        return;
    const uint32_t *a = native, *b = rtl;
    size_t shown = 0, bad = 0;
    for (size_t i = 0; i < bytes / 4; i++) {
        if (a[i] == b[i])
            continue;
        bad++;
        if (shown++ < 8) {
            float fa, fb;
            memcpy(&fa, &a[i], 4);
            memcpy(&fb, &b[i], 4);
            print_error("%s[%zu]: native 0x%08" PRIx32 " (%g), rtl 0x%08" PRIx32 " (%g)\n", what,
                        i, a[i], (double)fa, b[i], (double)fb);
        }
    }
    fail_msg("%s: %zu of %zu words differ between the native and the RTL backend", what, bad,
             bytes / 4);
}

static void assert_counters_equal(uint32_t core, const struct tpu_core_counters *n,
                                  const struct tpu_core_counters *r)
{
    if (memcmp(n, r, sizeof *n) == 0)
        return;
    print_error("core %" PRIu32 ": cycles %" PRIu64 " / %" PRIu64 ", busy mxu %" PRIu64
                " / %" PRIu64 ", mac slots %" PRIu64 " / %" PRIu64 " (native / rtl)\n",
                core, n->cycles, r->cycles, n->busy[TPU_UNIT_MXU], r->busy[TPU_UNIT_MXU],
                n->mxu_mac_slots, r->mxu_mac_slots);
    fail_msg("core %" PRIu32 ": the counters differ between the native and the RTL backend",
             core);
}

/* ---- a whole training run ----------------------------------------------------------------- */

#define IN 70
#define HID 13
#define OUT 5
#define BATCH 67 /* per replica */
#define ITERS 3
#define MAX_CORES 2

struct feeder {
    struct tpu_device *dev;
    uint32_t replicas;
    int rc;
};

/* Each step, each replica: x [BATCH][IN] f32 then labels [BATCH][1] int32, the same on
 * every run. */
static void *feed(void *arg)
{
    struct feeder *f = arg;
    const size_t x_bytes = sizeof(float) * BATCH * IN;
    int32_t y[BATCH];
    float *xs = malloc(x_bytes);
    if (!xs) {
        f->rc = TPU_ENOMEM;
        return NULL;
    }
    struct rng r = {0x5EED};
    for (int it = 0; it < ITERS && !f->rc; it++)
        for (uint32_t rep = 0; rep < f->replicas && !f->rc; rep++) {
            for (size_t i = 0; i < (size_t)BATCH * IN; i++)
                xs[i] = rnd_float(&r, -1.0f, 1.0f);
            for (int i = 0; i < BATCH; i++)
                y[i] = (int32_t)(rnd(&r) % OUT);
            f->rc = tpu_device_infeed(f->dev, rep, xs, x_bytes, 0, NULL);
            if (!f->rc)
                f->rc = tpu_device_infeed(f->dev, rep, y, sizeof y, 0, NULL);
        }
    free(xs);
    return NULL;
}

struct popper {
    struct tpu_device *dev;
    uint32_t core;
    int rc;
    float loss[ITERS];
};

static void *pop(void *arg)
{
    struct popper *p = arg;
    for (int i = 0; i < ITERS && !p->rc; i++)
        p->rc = tpu_device_outfeed(p->dev, p->core, &p->loss[i], sizeof(float), 0, NULL, NULL);
    return NULL;
}

struct train_result {
    float loss[MAX_CORES][ITERS];
    unsigned char *params[MAX_CORES]; /* every param buffer of the core, one after another */
    size_t params_bytes;
    struct tpu_core_counters ctr[MAX_CORES];
    struct tpu_op_stats *ops[MAX_CORES]; /* [n_ops] per-op statistics */
    size_t n_ops;
    uint64_t end;
    double wall_s;
};

static void train(const struct tpu_mlp_program *m, struct tpu_mxu_rtl_provider *p,
                  struct train_result *out)
{
    const struct tpu_chip_config cfg = tiny();
    struct tpu_device *dev = open_dev(&cfg, p);
    const uint32_t n_cores = tpu_device_n_cores(dev);
    assert_int_equal(n_cores, MAX_CORES);
    struct tpu_diag d = {0};
    if (tpu_device_load(dev, m->prog, &d) != 0)
        fail_msg("load: %s", d.msg);

    /* the same initial weights on every core and backend */
    struct rng r = {42};
    float w0[IN * HID], w1[HID * OUT];
    for (size_t i = 0; i < IN * HID; i++)
        w0[i] = rnd_float(&r, -0.3f, 0.3f);
    for (size_t i = 0; i < HID * OUT; i++)
        w1[i] = rnd_float(&r, -0.5f, 0.5f);
    for (uint32_t c = 0; c < n_cores; c++) {
        assert_int_equal(tpu_device_write(dev, c, bufid(m->prog, "w0"), w0, sizeof w0, &d), 0);
        assert_int_equal(tpu_device_write(dev, c, bufid(m->prog, "w1"), w1, sizeof w1, &d), 0);
    }
    tpu_device_set_var(dev, m->var_iterations, ITERS);

    struct feeder fd = {dev, tpu_device_n_replicas(dev), 0};
    struct popper pp[MAX_CORES];
    pthread_t tf, tp[MAX_CORES];
    assert_int_equal(pthread_create(&tf, NULL, feed, &fd), 0);
    for (uint32_t c = 0; c < n_cores; c++) {
        pp[c] = (struct popper){.dev = dev, .core = c};
        assert_int_equal(pthread_create(&tp[c], NULL, pop, &pp[c]), 0);
    }
    double t0 = now_s();
    int rc = tpu_device_run(dev, 0, &out->end, &d);
    out->wall_s = now_s() - t0;
    pthread_join(tf, NULL);
    for (uint32_t c = 0; c < n_cores; c++)
        pthread_join(tp[c], NULL);
    if (rc)
        fail_msg("run: %s", d.msg);
    assert_int_equal(fd.rc, 0);

    out->params_bytes = 0;
    for (uint32_t i = 0; i < m->n_params; i++)
        out->params_bytes += buf_size(m->prog, m->params[i]);
    for (uint32_t c = 0; c < n_cores; c++) {
        assert_int_equal(pp[c].rc, 0);
        memcpy(out->loss[c], pp[c].loss, sizeof pp[c].loss);
        out->params[c] = malloc(out->params_bytes);
        assert_non_null(out->params[c]);
        size_t off = 0;
        for (uint32_t i = 0; i < m->n_params; i++) {
            size_t b = buf_size(m->prog, m->params[i]);
            assert_int_equal(tpu_device_read(dev, c, m->params[i], out->params[c] + off, b, &d),
                             0);
            off += b;
        }
        assert_int_equal(tpu_device_counters(dev, c, &out->ctr[c]), 0);
        out->n_ops = tpu_program_n_ops(m->prog);
        out->ops[c] = calloc(out->n_ops, sizeof *out->ops[c]);
        assert_non_null(out->ops[c]);
        if (tpu_device_op_stats(dev, c, out->ops[c], out->n_ops, &d) != 0)
            fail_msg("op_stats: %s", d.msg);
    }
    tpu_device_close(&dev);
}

static void test_training_matches_native(void **state)
{
    (void)state;
    struct tpu_mlp_spec s;
    tpu_mlp_default_spec(&s);
    s.n_layers = 2;
    s.sizes[0] = IN;
    s.sizes[1] = HID;
    s.sizes[2] = OUT;
    s.batch_per_replica = BATCH;
    s.global_batch = 2 * BATCH;
    s.learning_rate = 0.2f;
    struct tpu_mlp_program m;
    struct tpu_diag d = {0};
    if (tpu_mlp_build(&s, TPU_MLP_TRAIN, &m, &d) != 0)
        fail_msg("%s", d.msg);

    const struct tpu_chip_config cfg = tiny();
    struct tpu_mxu_rtl_provider *p = make_provider(&cfg);
    struct train_result nat, rtl;
    train(&m, NULL, &nat);
    train(&m, p, &rtl);
    print_message("3 training steps of a %d-%d-%d MLP, %d rows per replica, on 2 cores: "
                  "native %.3f s, RTL %.3f s of wall time\n",
                  IN, HID, OUT, BATCH, nat.wall_s, rtl.wall_s);

    /* the model learned something, and both backends agree on every bit */
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < ITERS; i++)
            assert_true(nat.loss[c][i] > 0.1f && nat.loss[c][i] < 10.0f);
        assert_words_equal("losses", nat.loss[c], rtl.loss[c], sizeof nat.loss[c]);
        assert_words_equal("params", nat.params[c], rtl.params[c], nat.params_bytes);
        assert_counters_equal(c, &nat.ctr[c], &rtl.ctr[c]);
        assert_int_equal(rtl.ctr[c].iterations, ITERS);
        /* the per-op statistics too: the timing is the chip's, whoever computes the tiles */
        uint64_t mxu_ops = 0;
        for (size_t i = 0; i < nat.n_ops; i++) {
            if (memcmp(&nat.ops[c][i], &rtl.ops[c][i], sizeof nat.ops[c][i]) != 0)
                fail_msg("core %" PRIu32 ", op %zu: the per-op statistics differ between the "
                         "native and the RTL backend", c, i);
            mxu_ops += nat.ops[c][i].busy[TPU_UNIT_MXU] > 0;
        }
        assert_int_equal(mxu_ops, 5);
        /* the MXU time charged is what the core's RTL array counted; 5 matmuls a step */
        struct tpu_mxu_rtl_unit_stats st;
        assert_int_equal(tpu_mxu_rtl_provider_stats(p, c, &st), 0);
        assert_int_equal(st.runs, 5 * ITERS);
        assert_true(st.cycles > 0);
        assert_int_equal(st.cycles, nat.ctr[c].busy[TPU_UNIT_MXU]);
        assert_int_equal(nat.ctr[c].mxu_mac_slots, st.cycles * 8 * 8);
        /* tiles per step, (M chunks x N tiles x K tiles): forward 2x2x9 (M 67 = 64 + 3,
         * K 70, N 13) and 2x1x2; weight gradients 2x2x9 (M 70 = 64 + 6, K 67) and 1x1x9
         * (M 13); the hidden layer's gradient 2x2x1 (K 5) */
        assert_int_equal(st.tiles, ITERS * (36 + 4 + 36 + 9 + 4));
    }
    assert_int_equal(nat.end, rtl.end);

    for (uint32_t c = 0; c < MAX_CORES; c++) {
        free(nat.params[c]);
        free(rtl.params[c]);
        free(nat.ops[c]);
        free(rtl.ops[c]);
    }
    tpu_mxu_rtl_provider_destroy(&p);
    assert_null(p);
    tpu_mlp_program_free(&m);
}

/* ---- single matmuls of every kind ---------------------------------------------------------- */

static const char *const ops_program =
    "program ops\n"
    "var n\n"
    "param a1: f32[70, 19]\n"
    "param b1: f32[19, 11]\n"
    "param y1: f32[70, 11]\n"
    "param a2: bf16[9, 33]\n"
    "param b2: f32[13, 9]\n"
    "param y2: f32[33, 13]\n"
    "param a3: f32[20, 5]\n"
    "param b3: bf16[5, 17]\n"
    "param y3: f32[20, 17]\n"
    "param a4: int8[66, 10]\n"
    "param b4: int8[10, 9]\n"
    "param y4: int32[66, 9]\n"
    "param a5: int8[7, 17]\n"
    "param b5: int8[3, 17]\n"
    "param y5: int32[7, 3]\n"
    "param a6: f32[1, 1]\n"
    "param b6: f32[1, 1]\n"
    "param y6: f32[1, 1]\n"
    "param a7: f32[40, 30]\n"
    "param y7: f32[30, 30]\n"
    "loop n {\n"
    "  y1 = matmul a1, b1\n"
    "  y2 = matmul a2, b2 trans_a trans_b\n"
    "  y3 = matmul a3, b3 accumulate\n"
    "  y4 = matmul a4, b4\n"
    "  y5 = matmul a5, b5 trans_b accumulate\n"
    "  y6 = matmul a6, b6\n"
    "  y7 = matmul a7, a7 trans_a\n"
    "}\n";

/* f32 values of every kind: moderate, tiny (subnormal products), huge (overflowing
 * products), and now and then a special. */
static float edge_f32(struct rng *r)
{
    static const uint32_t specials[] = {
        0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFA00001u, /* +-Inf, NaNs with payloads */
        0x00000001u, 0x80400000u, 0x00800000u,              /* subnormals, smallest normal */
        0x00000000u, 0x80000000u,                           /* +-0 */
        0x3F808000u, 0x3F818000u,                           /* ties of the bf16 rounding */
        0x7F7FFFFFu, 0x5F800000u, 0x1F800000u,              /* largest, 2^64, 2^-64 */
    };
    uint64_t k = rnd(r) % 32;
    float f;
    if (k == 0) {
        uint32_t u = specials[rnd(r) % (sizeof specials / sizeof specials[0])];
        memcpy(&f, &u, 4);
    } else if (k == 1) {
        f = rnd_float(r, 1.0f, 2.0f) * 0x1p-70f;
    } else if (k == 2) {
        f = rnd_float(r, -2.0f, -1.0f) * 0x1p62f;
    } else {
        f = rnd_float(r, -4.0f, 4.0f);
    }
    return f;
}

/* Fills a param with values of its dtype (random bits for bf16, any int8 / int32). */
static void fill_param(struct tpu_device *dev, const struct tpu_program *prog, uint32_t b,
                       struct rng *r)
{
    const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, b);
    size_t bytes = buf_size(prog, b), count = (size_t)bd->rows * bd->cols;
    void *data = malloc(bytes);
    assert_non_null(data);
    for (size_t i = 0; i < count; i++) {
        switch (bd->dtype) {
        case TPU_F32:
            ((float *)data)[i] = edge_f32(r);
            break;
        case TPU_BF16:
            ((uint16_t *)data)[i] = (uint16_t)rnd(r);
            break;
        case TPU_INT8:
            ((int8_t *)data)[i] = (int8_t)rnd(r);
            break;
        case TPU_INT32:
            ((int32_t *)data)[i] = i % 5 == 0 ? INT32_MAX : (int32_t)rnd(r);
            break;
        }
    }
    for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++)
        assert_int_equal(tpu_device_write(dev, c, b, data, bytes, NULL), 0);
    free(data);
}

#define OPS_OUTPUTS 7

struct ops_result {
    void *y[MAX_CORES][OPS_OUTPUTS];
    struct tpu_core_counters ctr[MAX_CORES];
    struct tpu_op_stats *ops[MAX_CORES]; /* [n_ops] per-op statistics */
    size_t n_ops;
};

static void run_ops(const struct tpu_chip_config *cfg, struct tpu_mxu_rtl_provider *p,
                    struct ops_result *out)
{
    static const char *const in_names[] = {"a1", "b1", "a2", "b2", "a3", "b3", "y3", "a4",
                                           "b4", "a5", "b5", "y5", "a6", "b6", "a7"};
    static const char *const y_names[OPS_OUTPUTS] = {"y1", "y2", "y3", "y4", "y5", "y6", "y7"};
    struct tpu_program *prog = parse(ops_program);
    struct tpu_device *dev = open_dev(cfg, p);
    struct tpu_diag d = {0};
    if (tpu_device_load(dev, prog, &d) != 0)
        fail_msg("load: %s", d.msg);
    struct rng r = {7};
    for (size_t i = 0; i < sizeof in_names / sizeof in_names[0]; i++)
        fill_param(dev, prog, bufid(prog, in_names[i]), &r);
    uint32_t var_n = 0;
    assert_int_equal(tpu_program_find_var(prog, "n", &var_n), 0);
    tpu_device_set_var(dev, var_n, 2); /* twice: the accumulating ones add twice */
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < OPS_OUTPUTS; i++) {
            uint32_t b = bufid(prog, y_names[i]);
            out->y[c][i] = malloc(buf_size(prog, b));
            assert_non_null(out->y[c][i]);
            assert_int_equal(tpu_device_read(dev, c, b, out->y[c][i], buf_size(prog, b), &d), 0);
        }
        assert_int_equal(tpu_device_counters(dev, c, &out->ctr[c]), 0);
        out->n_ops = tpu_program_n_ops(prog);
        out->ops[c] = calloc(out->n_ops, sizeof *out->ops[c]);
        assert_non_null(out->ops[c]);
        if (tpu_device_op_stats(dev, c, out->ops[c], out->n_ops, &d) != 0)
            fail_msg("op_stats: %s", d.msg);
    }
    tpu_device_close(&dev);
    tpu_program_destroy(&prog);
}

static void check_ops(const struct tpu_chip_config *cfg)
{
    static const size_t y_bytes[OPS_OUTPUTS] = {70 * 11 * 4, 33 * 13 * 4, 20 * 17 * 4,
                                                66 * 9 * 4,  7 * 3 * 4,   4,
                                                30 * 30 * 4};
    struct tpu_mxu_rtl_provider *p = make_provider(cfg);
    struct ops_result nat, rtl;
    run_ops(cfg, NULL, &nat);
    run_ops(cfg, p, &rtl);
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < OPS_OUTPUTS; i++) {
            char what[32];
            snprintf(what, sizeof what, "core %u y%d", c, i + 1);
            assert_words_equal(what, nat.y[c][i], rtl.y[c][i], y_bytes[i]);
        }
        assert_counters_equal(c, &nat.ctr[c], &rtl.ctr[c]);
        assert_int_equal(nat.n_ops, rtl.n_ops);
        for (size_t i = 0; i < nat.n_ops; i++)
            if (memcmp(&nat.ops[c][i], &rtl.ops[c][i], sizeof nat.ops[c][i]) != 0)
                fail_msg("core %" PRIu32 ", op %zu: the per-op statistics differ between the "
                         "native and the RTL backend", c, i);
        /* each MXU ran the matmuls that had work for it, twice: the first MXU all 7; with
         * 2 MXUs the second all but y5 and y6, which are one unit of work each */
        for (uint32_t x = 0; x < cfg->mxu_per_core; x++) {
            struct tpu_mxu_rtl_unit_stats st;
            assert_int_equal(tpu_mxu_rtl_provider_stats(p, c * cfg->mxu_per_core + x, &st), 0);
            assert_int_equal(st.runs, 2 * (x == 0 ? 7 : 5));
        }
    }
    /* the data held NaNs: some outputs are the canonical NaN, bit for bit on both */
    uint32_t nan_bits = 0x7FC00000u;
    int nans = 0;
    for (size_t i = 0; i < 70 * 11; i++)
        nans += memcmp((const float *)nat.y[0][0] + i, &nan_bits, 4) == 0;
    assert_true(nans > 0);
    for (uint32_t c = 0; c < MAX_CORES; c++) {
        for (int i = 0; i < OPS_OUTPUTS; i++) {
            free(nat.y[c][i]);
            free(rtl.y[c][i]);
        }
        free(nat.ops[c]);
        free(rtl.ops[c]);
    }
    tpu_mxu_rtl_provider_destroy(&p);
}

static void test_matmuls_match_native(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = tiny();
    check_ops(&cfg);
    /* two MXUs per core sharing each matmul, and short accumulator chunks */
    cfg.mxu_per_core = 2;
    cfg.accumulator_rows = 24;
    check_ops(&cfg);
}

/* ---- waveform ------------------------------------------------------------------------------- */

static void test_vcd(void **state)
{
    (void)state;
    char path[] = "/tmp/tpusim_rtl_backend_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const struct tpu_chip_config cfg = tiny();
    struct tpu_mxu_rtl_provider *p = make_provider(&cfg);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mxu_rtl_provider_trace_open(p, 0, path, &d), 0);
    /* a second waveform on the same unit is refused */
    assert_int_equal(tpu_mxu_rtl_provider_trace_open(p, 0, path, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "already open"));

    /* one 8x8 tile streaming 16 rows on each core: 2R + M + C - 1 = 39 cycles */
    struct tpu_program *prog = parse("program t\n"
                                     "param x: f32[16, 8]\n"
                                     "param w: f32[8, 8]\n"
                                     "param y: f32[16, 8]\n"
                                     "y = matmul x, w\n");
    struct tpu_device *dev = open_dev(&cfg, p);
    if (tpu_device_load(dev, prog, &d) != 0)
        fail_msg("load: %s", d.msg);
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    struct tpu_core_counters c;
    assert_int_equal(tpu_device_counters(dev, 0, &c), 0);
    tpu_device_close(&dev);
    tpu_mxu_rtl_provider_destroy(&p); /* closes the waveform */
    tpu_program_destroy(&prog);

    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    bool defs = false, clk = false;
    unsigned long long last_time = 0;
    while (fgets(line, sizeof line, f)) {
        defs = defs || strstr(line, "$enddefinitions") != NULL;
        clk = clk || (strstr(line, "$var") && strstr(line, " clk "));
        if (line[0] == '#')
            last_time = strtoull(line + 1, NULL, 10);
    }
    fclose(f);
    unlink(path);
    assert_int_equal(c.busy[TPU_UNIT_MXU], 39);
    assert_true(defs);
    assert_true(clk);
    /* a reset cycle and the 39 cycles of the run, two time steps per cycle */
    assert_true(last_time >= 2 * 39);
}

/* A waveform whose writes fail (/dev/full: every write is ENOSPC). Verilator's own writer
 * would hang here (its fatal-error path re-locks a mutex it holds); the harness's checked
 * file makes the run return TPU_EIO with the path and the reason, and stops the trace. */
static void test_vcd_full_disk(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0) {
        skip();
        return;
    }
    const struct tpu_chip_config cfg = tiny();
    struct tpu_mxu_rtl_provider *p = make_provider(&cfg);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mxu_rtl_provider_trace_open(p, 0, "/dev/full", &d), 0);
    struct tpu_program *prog = parse("program t\n"
                                     "param x: f32[16, 8]\n"
                                     "param w: f32[8, 8]\n"
                                     "param y: f32[16, 8]\n"
                                     "y = matmul x, w\n");
    struct tpu_device *dev = open_dev(&cfg, p);
    if (tpu_device_load(dev, prog, &d) != 0)
        fail_msg("load: %s", d.msg);
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_EIO);
    assert_non_null(strstr(d.msg, "writing the waveform file '/dev/full' failed: No space left "
                                  "on device; the trace stopped there"));
    /* the trace is off now: the same program runs again, untraced, and succeeds */
    tpu_device_reset_cancel(dev);
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("second run: %s", d.msg);
    tpu_device_close(&dev);
    tpu_mxu_rtl_provider_destroy(&p);
    tpu_program_destroy(&prog);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    struct tpu_diag d = {0};
    const struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    struct tpu_device *dev = NULL;

    /* no RTL model of that shape */
    struct tpu_mxu_rtl_provider *p = NULL;
    assert_int_equal(tpu_mxu_rtl_provider_create(16, 16, 2, &p, &d), TPU_EUNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(d.msg, "no RTL array of 16 rows x 16 columns"));
    assert_non_null(strstr(d.msg, "8x8"));
    assert_int_equal(tpu_mxu_rtl_provider_create(8, 8, 0, &p, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "at least one matrix unit"));

    /* an array the chip does not have */
    assert_int_equal(tpu_mxu_rtl_provider_create(4, 8, 2, &p, &d), 0);
    tpu_device_default_settings(&s, &cfg);
    s.mxu = tpu_mxu_rtl_provider_get(p);
    assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
    assert_null(dev);
    assert_non_null(strstr(d.msg, "simulates a 4x8 array but chip 'tiny' has 8x8"));
    tpu_mxu_rtl_provider_destroy(&p);

    /* too few units for the device's 2 MXUs */
    assert_int_equal(tpu_mxu_rtl_provider_create(8, 8, 1, &p, &d), 0);
    s.mxu = tpu_mxu_rtl_provider_get(p);
    assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "simulates 1 matrix units but the device has 2"));
    tpu_mxu_rtl_provider_destroy(&p);

    /* timing-only mode computes no values, which is what a provider is for */
    p = make_provider(&cfg);
    s.mxu = tpu_mxu_rtl_provider_get(p);
    s.timing_only = true;
    assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "cannot run in timing-only mode"));
    s.timing_only = false;

    /* an f32 matmul in 3 bf16 passes */
    struct tpu_program *prog = parse("program t\n"
                                     "param x: f32[16, 8]\n"
                                     "param w: f32[8, 8]\n"
                                     "param y: f32[16, 8]\n"
                                     "y = matmul x, w passes=3\n");
    assert_int_equal(tpu_device_open(&s, &dev, &d), 0);
    assert_int_equal(tpu_device_load(dev, prog, &d), 0);
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, ", op 0: matmul: the rtl matrix unit runs one-pass matmuls "
                                  "only"));
    assert_non_null(strstr(d.msg, "asks for 3 bf16 passes"));
    tpu_device_close(&dev);
    tpu_program_destroy(&prog);

    /* waveforms: a unit that does not exist, a file that cannot be created */
    assert_int_equal(tpu_mxu_rtl_provider_trace_open(p, 2, "/tmp/x.vcd", &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "no matrix unit 2 to trace: the RTL provider has 2"));
    assert_int_equal(tpu_mxu_rtl_provider_trace_open(p, 0, "/nonexistent-dir/a.vcd", &d),
                     TPU_EIO);
    assert_non_null(strstr(d.msg, "cannot create the waveform file '/nonexistent-dir/a.vcd': "
                                  "No such file or directory"));
    struct tpu_mxu_rtl_unit_stats st;
    assert_int_equal(tpu_mxu_rtl_provider_stats(p, 2, &st), TPU_EINVAL);
    tpu_mxu_rtl_provider_destroy(&p);
    tpu_mxu_rtl_provider_destroy(&p); /* NULL is fine */
    tpu_mxu_rtl_provider_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_matches_native),
        cmocka_unit_test(test_matmuls_match_native),
        cmocka_unit_test(test_vcd),
        cmocka_unit_test(test_vcd_full_disk),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
