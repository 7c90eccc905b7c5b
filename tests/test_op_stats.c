/* Per-op statistics of the device (settings.op_stats, tpu_device_op_stats, device.h) and what
 * the device reports of a program's HBM need (tpu_device_memory).
 *
 * The statistics must account for the core's time and work without gaps or double counts:
 * the ops' shares add up exactly to each core's busy span over several launches (infeed
 * waits, collectives and outfeed included), and every other field adds up exactly to the
 * change of the core's counters since the load. They say where time goes (a matmul-heavy
 * program's matmuls take nearly all of it), they do not depend on values (timing-only and
 * functional runs, one worker thread or two, give the same bytes), they start again at each
 * load, and asking for them on a device opened without them is refused with the fix. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/device.h"
#include "tpusim/program.h"
#include "device_helpers.h"

enum { STEPS = 2, MAX_OPS = 32 };

/* One training-like step per iteration on each of tiny's 2 cores (replicas): infeed x, a
 * forward matmul and relu, a gradient matmul, its mean over the replicas, a momentum update,
 * the activations out. */
static const char *const step_program =
    "program step\n"
    "var n\n"
    "param w: f32[8, 8]\n"
    "param vel: f32[8, 8]\n"
    "temp x: f32[16, 8]\n"
    "temp h: f32[16, 8]\n"
    "temp r: f32[16, 8]\n"
    "temp g: f32[8, 8]\n"
    "temp gs: f32[8, 8]\n"
    "loop n {\n"
    "  x = infeed\n"
    "  h = matmul x, w\n"
    "  r = relu h\n"
    "  g = matmul x, r trans_a\n"
    "  gs = all_reduce g reduce=mean\n"
    "  w, vel = sgd_momentum gs alpha=0.1 beta=0.9\n"
    "  outfeed r\n"
    "}\n";

static struct tpu_device *open_tiny(bool op_stats, bool timing_only, unsigned threads)
{
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.op_stats = op_stats;
    s.timing_only = timing_only;
    s.n_threads = threads;
    return open_settings(&s);
}

static void get_stats(const struct tpu_device *dev, uint32_t core, struct tpu_op_stats *out,
                      size_t n_ops)
{
    struct tpu_diag d = {0};
    if (tpu_device_op_stats(dev, core, out, n_ops, &d) != 0)
        fail_msg("op_stats: %s", d.msg);
}

/* One launch of step_program: STEPS steps, the infeed queued before (the queues hold 2) at
 * host_cycle, the outfeed drained after. */
static void launch(struct tpu_device *dev, uint64_t start, uint64_t host_cycle)
{
    static float x[16 * 8], r[16 * 8];
    for (int i = 0; i < 16 * 8; i++)
        x[i] = (float)(i % 7) * 0.25f - 0.5f;
    struct tpu_diag d = {0};
    for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++)
        for (int s = 0; s < STEPS; s++)
            if (tpu_device_infeed(dev, c, x, sizeof x, host_cycle, &d) != 0)
                fail_msg("infeed: %s", d.msg);
    assert_int_equal(tpu_device_set_var(dev, 0, STEPS), 0);
    if (tpu_device_run(dev, start, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++)
        for (int s = 0; s < STEPS; s++)
            if (tpu_device_outfeed(dev, c, r, sizeof r, 0, NULL, &d) != 0)
                fail_msg("outfeed: %s", d.msg);
}

/* ---- the shares add up ---------------------------------------------------------------------- */

static void test_shares_sum_to_the_busy_span_exactly(void **state)
{
    (void)state;
    struct tpu_program *p = parse(step_program);
    const size_t n_ops = tpu_program_n_ops(p);
    assert_int_equal(n_ops, 9);
    struct tpu_device *dev = open_tiny(true, false, 2);
    load(dev, p);
    const uint32_t n_cores = tpu_device_n_cores(dev);
    assert_int_equal(n_cores, 2);
    struct tpu_core_counters at_load[2], before[2], after[2];
    uint64_t span[2] = {0, 0}, clock_before_last[2] = {0, 0};
    for (uint32_t c = 0; c < n_cores; c++)
        tpu_device_counters(dev, c, &at_load[c]);
    /* three launches: from cycle 0; after a gap (start later than the clocks); with infeed
     * the host sends late, so the first infeed op of each core waits for it */
    const uint64_t starts[3] = {0, 1000000, 0};
    const uint64_t host_cycles[3] = {0, 1000000, 3000000};
    for (int l = 0; l < 3; l++) {
        for (uint32_t c = 0; c < n_cores; c++)
            tpu_device_counters(dev, c, &before[c]);
        launch(dev, starts[l], host_cycles[l]);
        for (uint32_t c = 0; c < n_cores; c++) {
            tpu_device_counters(dev, c, &after[c]);
            uint64_t from = before[c].cycles > starts[l] ? before[c].cycles : starts[l];
            clock_before_last[c] = before[c].cycles;
            assert_true(after[c].cycles > from);
            span[c] += after[c].cycles - from;
        }
    }
    for (uint32_t c = 0; c < n_cores; c++) {
        struct tpu_op_stats st[MAX_OPS];
        get_stats(dev, c, st, n_ops);
        struct tpu_op_stats sum;
        memset(&sum, 0, sizeof sum);
        for (size_t i = 0; i < n_ops; i++) {
            sum.share_cycles += st[i].share_cycles;
            for (int u = 0; u < TPU_UNIT_COUNT; u++)
                sum.busy[u] += st[i].busy[u];
            for (int k = 0; k < TPU_STALL_COUNT; k++)
                sum.stall[k] += st[i].stall[k];
            sum.hbm_read_bytes += st[i].hbm_read_bytes;
            sum.hbm_write_bytes += st[i].hbm_write_bytes;
            sum.infeed_bytes += st[i].infeed_bytes;
            sum.outfeed_bytes += st[i].outfeed_bytes;
            sum.ici_bytes += st[i].ici_bytes;
            sum.mxu_mac_slots += st[i].mxu_mac_slots;
            sum.macs += st[i].macs;
        }
        const struct tpu_core_counters *a = &after[c], *z = &at_load[c];
        assert_int_equal(sum.share_cycles, span[c]);
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            if (u != TPU_UNIT_INFEED)
                assert_int_equal(sum.busy[u], a->busy[u] - z->busy[u]);
        for (int k = 0; k < TPU_STALL_COUNT; k++)
            assert_int_equal(sum.stall[k], a->stall[k] - z->stall[k]);
        assert_int_equal(sum.hbm_read_bytes, a->hbm_read_bytes - z->hbm_read_bytes);
        assert_int_equal(sum.hbm_write_bytes, a->hbm_write_bytes - z->hbm_write_bytes);
        assert_int_equal(sum.infeed_bytes, a->infeed_bytes - z->infeed_bytes);
        assert_int_equal(sum.outfeed_bytes, a->outfeed_bytes - z->outfeed_bytes);
        assert_int_equal(sum.ici_bytes, a->ici_bytes - z->ici_bytes);
        assert_int_equal(sum.mxu_mac_slots, a->mxu_mac_slots - z->mxu_mac_slots);
        assert_int_equal(sum.macs, a->macs - z->macs);

        /* runs: loop_begin once a launch, the body and loop_end once a step */
        assert_int_equal(st[0].runs, 3);
        for (size_t i = 1; i < n_ops; i++)
            assert_int_equal(st[i].runs, 3 * STEPS);
        assert_int_equal(st[0].share_cycles, 0);
        assert_int_equal(st[n_ops - 1].share_cycles, 0);
        /* the ops land on their units: op 1 infeed, 2 and 4 matmuls, 5 the all_reduce,
         * 7 the outfeed */
        assert_int_equal(st[1].infeed_bytes, 3 * STEPS * 512);
        /* 512 B over the core's half of a 1 GB/s link at 1 GHz: 1024 cycles a tensor */
        assert_int_equal(st[1].busy[TPU_UNIT_INFEED], 3 * STEPS * 1024);
        assert_int_equal(st[2].macs, 3 * STEPS * 16 * 8 * 8);
        assert_int_equal(st[4].macs, 3 * STEPS * 8 * 16 * 8);
        assert_true(st[2].busy[TPU_UNIT_MXU] > 0 && st[4].busy[TPU_UNIT_MXU] > 0);
        assert_int_equal(st[2].busy[TPU_UNIT_MXU] + st[4].busy[TPU_UNIT_MXU],
                         a->busy[TPU_UNIT_MXU] - z->busy[TPU_UNIT_MXU]);
        assert_int_equal(st[5].ici_bytes, 3 * STEPS * 256);
        assert_true(st[5].busy[TPU_UNIT_ICI] > 0);
        assert_int_equal(st[7].outfeed_bytes, 3 * STEPS * 512);
        /* the late infeed: the first infeed of the third launch waits until its data is in
         * HBM at 3000000 + 1000 (latency) + 1024; the core's frontier was its clock, so the
         * infeed op takes all of that wait as its share */
        assert_true(clock_before_last[c] < 3000000);
        assert_true(st[1].stall[TPU_STALL_INFEED_EMPTY] >= 3002024 - clock_before_last[c]);
        assert_true(st[1].share_cycles >= 3002024 - clock_before_last[c]);
    }
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* ---- where time goes ------------------------------------------------------------------------ */

static void test_matmul_heavy_program_is_its_matmuls(void **state)
{
    (void)state;
    /* two 128x128x128 matmuls on one 8x8 array (16 x 16 weight tiles, 128 rows through
     * each) and three element-wise ops over 16384 elements on the 8 x 8 x 1 vector unit,
     * 16384 / 64 + 8 = 264 cycles each on temps kept on chip: the matmuls are nearly all of
     * the time and bound by the matrix unit */
    struct tpu_program *p = parse("program heavy\n"
                                  "param x: f32[128, 128]\n"
                                  "param w1: f32[128, 128]\n"
                                  "param w2: f32[128, 128]\n"
                                  "temp h: f32[128, 128]\n"
                                  "temp r: f32[128, 128]\n"
                                  "temp y: f32[128, 128]\n"
                                  "temp z: f32[128, 128]\n"
                                  "h = matmul x, w1\n"
                                  "r = relu h\n"
                                  "y = matmul r, w2\n"
                                  "z = relu y\n"
                                  "z = add z, r\n");
    const size_t n_ops = tpu_program_n_ops(p);
    struct tpu_device *dev = open_tiny(true, true, 1);
    load(dev, p);
    uint64_t end = 0;
    struct tpu_diag d = {0};
    if (tpu_device_run(dev, 0, &end, &d) != 0)
        fail_msg("run: %s", d.msg);
    struct tpu_op_stats st[MAX_OPS];
    get_stats(dev, 0, st, n_ops);
    uint64_t total = 0;
    for (size_t i = 0; i < n_ops; i++)
        total += st[i].share_cycles;
    assert_int_equal(total, end);
    const uint64_t matmuls = st[0].share_cycles + st[2].share_cycles;
    const uint64_t vector = st[1].share_cycles + st[3].share_cycles + st[4].share_cycles;
    print_message("matmuls %llu cycles, vector ops %llu, span %llu\n",
                  (unsigned long long)matmuls, (unsigned long long)vector,
                  (unsigned long long)end);
    assert_true(matmuls * 100 >= 95 * end);
    assert_int_equal(st[1].share_cycles, 264);
    assert_int_equal(st[3].share_cycles, 264);
    assert_int_equal(st[4].share_cycles, 264);
    assert_int_equal(vector, 3 * 264);
    for (size_t i = 0; i < 3; i += 2) {
        /* bound by the matrix unit: it is the op's busiest unit */
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            assert_true(st[i].busy[TPU_UNIT_MXU] >= st[i].busy[u]);
        assert_int_equal(st[i].macs, 128 * 128 * 128);
        assert_true(st[i].mxu_mac_slots >= st[i].macs);
    }
    for (size_t i = 1; i < n_ops; i += 2)
        assert_int_equal(st[i].macs, 0);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* ---- values do not matter, threads do not matter, loads reset ------------------------------ */

static void stats_of_step(bool timing_only, unsigned threads, struct tpu_op_stats st[2][MAX_OPS])
{
    struct tpu_program *p = parse(step_program);
    struct tpu_device *dev = open_tiny(true, timing_only, threads);
    load(dev, p);
    launch(dev, 0, 0);
    launch(dev, 0, 50000);
    for (uint32_t c = 0; c < 2; c++)
        get_stats(dev, c, st[c], tpu_program_n_ops(p));
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_timing_only_and_functional_runs_agree(void **state)
{
    (void)state;
    static struct tpu_op_stats functional[2][MAX_OPS], timing[2][MAX_OPS], two[2][MAX_OPS];
    memset(functional, 0, sizeof functional);
    memset(timing, 0xa5, sizeof timing);
    memset(two, 0x5a, sizeof two);
    stats_of_step(false, 1, functional);
    stats_of_step(true, 1, timing);
    stats_of_step(false, 2, two);
    const size_t n_ops = 9;
    assert_true(functional[0][2].macs > 0);
    for (uint32_t c = 0; c < 2; c++) {
        assert_memory_equal(functional[c], timing[c], n_ops * sizeof functional[c][0]);
        assert_memory_equal(functional[c], two[c], n_ops * sizeof functional[c][0]);
    }
}

static void test_statistics_start_at_each_load(void **state)
{
    (void)state;
    struct tpu_program *p = parse(step_program);
    const size_t n_ops = tpu_program_n_ops(p);
    struct tpu_device *dev = open_tiny(true, true, 1);
    load(dev, p);
    struct tpu_op_stats st[MAX_OPS], zero[MAX_OPS];
    memset(zero, 0, sizeof zero);
    get_stats(dev, 0, st, n_ops);
    assert_memory_equal(st, zero, n_ops * sizeof st[0]);
    launch(dev, 0, 0);
    get_stats(dev, 1, st, n_ops);
    assert_int_equal(st[1].runs, STEPS);
    load(dev, p);
    get_stats(dev, 1, st, n_ops);
    assert_memory_equal(st, zero, n_ops * sizeof st[0]);
    launch(dev, 0, 0);
    get_stats(dev, 1, st, n_ops);
    assert_int_equal(st[1].runs, STEPS);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void expect_refusal(const struct tpu_device *dev, uint32_t core, size_t n_ops,
                           const char *want)
{
    struct tpu_op_stats st[MAX_OPS];
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_op_stats(dev, core, st, n_ops, &d), TPU_EINVAL);
    if (!strstr(d.msg, want))
        fail_msg("message '%s' lacks '%s'", d.msg, want);
}

struct runner {
    struct tpu_device *dev;
    int rc;
};

static void *run_thread(void *arg)
{
    struct runner *r = arg;
    r->rc = tpu_device_run(r->dev, 0, NULL, NULL);
    return NULL;
}

static void test_refusals_say_how_to_fix(void **state)
{
    (void)state;
    struct tpu_program *p = parse(step_program);
    struct tpu_device *off = open_tiny(false, true, 1);
    load(off, p);
    launch(off, 0, 0);
    expect_refusal(off, 0, 9, "tpu_device_op_stats: the device was opened without per-op "
                   "statistics; set settings.op_stats to true before tpu_device_open to "
                   "collect them");
    tpu_device_close(&off);

    struct tpu_device *on = open_tiny(true, true, 1);
    expect_refusal(on, 0, 9, "tpu_device_op_stats: no program is loaded; call tpu_device_load "
                   "first");
    load(on, p);
    expect_refusal(on, 2, 9, "tpu_device_op_stats: core 2 does not exist (the device has 2: 0 "
                   "to 1)");
    expect_refusal(on, 0, 8, "tpu_device_op_stats: n_ops is 8, but program 'step' has 9 ops; "
                   "pass an array of tpu_program_n_ops entries");
    /* during a run (here one waiting for infeed that never comes, then canceled) */
    assert_int_equal(tpu_device_set_var(on, 0, 1), 0);
    struct runner r = {.dev = on};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, run_thread, &r), 0);
    struct tpu_device_watch w;
    do {
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        tpu_device_watch(on, &w);
    } while (!w.cores_blocked);
    expect_refusal(on, 0, 9, "tpu_device_op_stats: not allowed while the device runs; read them "
                   "after tpu_device_run returns");
    tpu_device_cancel(on);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, TPU_ECANCELED);
    tpu_device_close(&on);
    tpu_program_destroy(&p);
}

/* ---- HBM ------------------------------------------------------------------------------------- */

static void test_device_reports_the_verifiers_hbm_figure(void **state)
{
    (void)state;
    struct tpu_program *p = parse(step_program);
    struct tpu_device *dev = open_tiny(false, true, 1);
    struct tpu_program_memory m, want;
    assert_int_equal(tpu_device_memory(dev, &m), TPU_EINVAL);
    load(dev, p);
    assert_int_equal(tpu_device_memory(dev, &m), 0);
    assert_int_equal(tpu_program_memory(p, &want), 0);
    assert_memory_equal(&m, &want, sizeof m);
    /* params w, vel: 2 x 256 B. Temps: x lives ops 1-4, h 2-3, r 3-7, g 4-5, gs 5-6; live
     * bytes by op: 512, 1024, 1536 (x, h, r), 1280, 1024, 768, 512: the peak is op 3 */
    assert_int_equal(m.param_bytes, 512);
    assert_int_equal(m.temp_bytes, 3 * 512 + 2 * 256);
    assert_int_equal(m.temp_peak_bytes, 1536);
    assert_int_equal(m.peak_op, 3);
    assert_int_equal(m.hbm_bytes, 512 + 1536);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shares_sum_to_the_busy_span_exactly),
        cmocka_unit_test(test_matmul_heavy_program_is_its_matmuls),
        cmocka_unit_test(test_timing_only_and_functional_runs_agree),
        cmocka_unit_test(test_statistics_start_at_each_load),
        cmocka_unit_test(test_refusals_say_how_to_fix),
        cmocka_unit_test(test_device_reports_the_verifiers_hbm_figure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
