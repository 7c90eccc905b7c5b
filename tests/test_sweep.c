/* Loop-size sweeps (tpusim/sweep.h): the accounting of each point against the modeled host
 * costs, determinism, the extension of large loop sizes against their full simulation, the
 * knee, and the settings a sweep refuses. A small MLP on the tiny chip (2 replicas) in
 * timing-only mode on zeros. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpusim/dataset_input.h"
#include "tpusim/models.h"
#include "tpusim/sweep.h"

#define BATCH 16

struct env {
    struct tpu_chip_config chip;
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    struct tpu_sweep_settings s;
};

static struct env *env_new(void)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_config_load("tiny", &e->chip, &d), 0);
    tpu_mlp_default_spec(&e->spec);
    e->spec.n_layers = 2;
    e->spec.sizes[0] = 64;
    e->spec.sizes[1] = 32;
    e->spec.sizes[2] = 10;
    tpu_mlp_model(&e->model, &e->spec);
    e->ds.n_examples = BATCH;
    e->ds.n_features = 64;
    e->ds.image_rows = 8;
    e->ds.image_cols = 8;
    e->ds.image_channels = 1;
    e->ds.n_classes = 10;
    e->ds.x = calloc(BATCH * 64, sizeof(float));
    e->ds.y = calloc(BATCH, sizeof(int32_t));
    assert_non_null(e->ds.x);
    assert_non_null(e->ds.y);
    tpu_dataset_input_init(&e->in, &e->ds, 1);
    tpu_sweep_default_settings(&e->s, &e->chip);
    e->s.device.timing_only = true;
    e->s.device.n_threads = 1;
    e->s.run.train_batch_size = BATCH;
    e->s.run.seed = 1;
    e->s.model = &e->model;
    e->s.input = &e->in.input;
    return e;
}

static void env_free(struct env *e)
{
    tpu_dataset_input_free(&e->in);
    free(e->ds.x);
    free(e->ds.y);
    free(e);
}

static void sweep_ok(struct env *e, const uint64_t *sizes, size_t n, struct tpu_sweep_point *p)
{
    struct tpu_diag d = {0};
    e->s.sizes = sizes;
    e->s.n_sizes = n;
    if (tpu_sweep_run(&e->s, p, &d))
        fail_msg("tpu_sweep_run: %s", d.msg);
}

/* Relative difference, for figures that are sums and differences of doubles. */
static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(a), fabs(b));
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* Each point's figures are the modeled host costs and the simulated device time, joined as
 * sweep.h says: the loop's span, the shares, the cadences. The tolerance 1e-12 (relative) is
 * for the doubles the figures go through (seconds from cycles, differences of totals); the
 * costs themselves are whole cycles. */
static void test_modeled_accounting(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->s.full_steps = 0;
    e->s.run.save_checkpoints_steps = 3;
    e->s.run.log_step_count_steps = 5;
    e->s.run.modeled_launch_us = 100;
    e->s.run.modeled_hooks_us = 400;
    e->s.run.modeled_checkpoint_us = 3000;
    const uint64_t sizes[] = {1, 2, 4, 8};
    struct tpu_sweep_point p[4];
    sweep_ok(e, sizes, 4, p);
    const double hz = e->chip.clock_mhz * 1e6;
    const double launch = llround(100e-6 * hz) / hz, hooks = llround(400e-6 * hz) / hz;
    for (int i = 0; i < 4; i++) {
        const uint64_t L = sizes[i];
        assert_int_equal(p[i].iterations_per_loop, L);
        assert_int_equal(p[i].method, TPU_SWEEP_SIMULATED);
        assert_int_equal(p[i].loops, 2);
        assert_true(rel(p[i].launch_s, launch) < 1e-12);
        assert_true(rel(p[i].hooks_s, hooks) < 1e-12);
        /* a checkpoint every ceil(3 / L) loops: 3, 2, 1, 1 */
        assert_true(rel(p[i].checkpoint_s, 3e-3 / (double)ceil_div(3, L)) < 1e-12);
        const double host = p[i].launch_s + p[i].hooks_s + p[i].checkpoint_s;
        assert_true(rel(p[i].loop_seconds, p[i].step_time_s * (double)L + host) < 1e-12);
        assert_true(rel(p[i].examples_per_s, (double)(L * BATCH) / p[i].loop_seconds) < 1e-12);
        assert_true(rel(p[i].host_overhead_share, host / p[i].loop_seconds) < 1e-12);
        assert_true(fabs(p[i].device_busy_share + p[i].stall_share +
                         p[i].host_overhead_share - 1) < 1e-12);
        assert_true(p[i].infeed_stall_share >= 0 && p[i].device_busy_share > 0);
        assert_true(p[i].infeed_stall_share <= p[i].stall_share + 1e-12);
        assert_true(rel(p[i].report_seconds, (double)ceil_div(5, L) * p[i].loop_seconds) <
                    1e-12);
        assert_true(rel(p[i].checkpoint_seconds, (double)ceil_div(3, L) * p[i].loop_seconds) <
                    1e-12);
        assert_true(p[i].wall_seconds > 0);
    }
    /* fewer boundaries per step: the host's share falls with the loop size */
    for (int i = 1; i < 4; i++)
        assert_true(p[i].host_overhead_share < p[i - 1].host_overhead_share);
    /* no checkpoints or logging: no cadence, no checkpoint cost */
    e->s.run.save_checkpoints_steps = 0;
    e->s.run.log_step_count_steps = 0;
    sweep_ok(e, sizes, 1, p);
    assert_true(isnan(p[0].report_seconds) && isnan(p[0].checkpoint_seconds));
    assert_true(p[0].checkpoint_s == 0);
    env_free(e);
}

/* Modeled host time: the same sweep gives the same figures, bit for bit. */
static void test_deterministic(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->s.full_steps = 2;
    const uint64_t sizes[] = {1, 3, 16};
    struct tpu_sweep_point a[3], b[3];
    sweep_ok(e, sizes, 3, a);
    sweep_ok(e, sizes, 3, b);
    for (int i = 0; i < 3; i++) {
        a[i].wall_seconds = b[i].wall_seconds = 0; /* the simulator's own time */
        assert_memory_equal(&a[i], &b[i], sizeof a[i]);
    }
    assert_int_equal(a[0].method, TPU_SWEEP_SIMULATED);
    assert_int_equal(a[1].method, TPU_SWEEP_EXTENDED);
    assert_int_equal(a[2].method, TPU_SWEEP_EXTENDED);
    env_free(e);
}

/* Loop sizes above full_steps continued from full_steps / 2 and full_steps, against the same
 * sizes simulated in full: device-bound (the input costs nothing) and input-bound (an input
 * call slower than a step, so the infeed queue drains within each loop). On this chip every
 * step after a launch's first few takes the same cycles, and the anchors at 8 and 16 steps
 * already hold those first steps, so the extension equals the full simulation up to the
 * rounding of the doubles it goes through (seen: at most 3e-16 relative; held to 1e-9).
 * The figures are printed. */
static void check_extension(struct env *e)
{
    const uint64_t sizes[] = {1, 2, 4, 8, 16, 32, 64, 128};
    struct tpu_sweep_point full[8], ext[8];
    e->s.full_steps = 0;
    sweep_ok(e, sizes, 8, full);
    e->s.full_steps = 16;
    sweep_ok(e, sizes, 8, ext);
    for (int i = 0; i < 8; i++) {
        const bool extended = sizes[i] > 16;
        assert_int_equal(ext[i].method, extended ? TPU_SWEEP_EXTENDED : TPU_SWEEP_SIMULATED);
        const double d_thr = rel(ext[i].examples_per_s, full[i].examples_per_s);
        const double d_stall = fabs(ext[i].infeed_stall_share - full[i].infeed_stall_share);
        const double d_host = fabs(ext[i].host_overhead_share - full[i].host_overhead_share);
        print_message("loop %3llu: examples/s %.1f full, %.1f %s (rel. diff %.2e); stall "
                      "share diff %.2e, host share diff %.2e\n",
                      (unsigned long long)sizes[i], full[i].examples_per_s,
                      ext[i].examples_per_s, extended ? "extended" : "simulated", d_thr,
                      d_stall, d_host);
        if (!extended)
            assert_true(d_thr == 0 && d_stall == 0 && d_host == 0); /* the same simulation */
        assert_true(d_thr < 1e-9);
        assert_true(d_stall < 1e-9);
        assert_true(d_host < 1e-9);
    }
}

static void test_extension_matches_full_simulation(void **state)
{
    (void)state;
    struct env *e = env_new();
    /* device-bound: the input costs nothing */
    e->s.run.modeled_input_us_per_batch = 0;
    check_extension(e);
    /* input-bound: 2 input_fn calls per step (PER_HOST_V2, 2 replicas) of 2 ms each */
    e->s.run.modeled_input_us_per_batch = 2000;
    check_extension(e);
    struct tpu_sweep_point p;
    const uint64_t one = 64;
    sweep_ok(e, &one, 1, &p);
    assert_true(p.infeed_stall_share > 0.5); /* it is input-bound */
    env_free(e);
}

/* Busy is the cores' work: device time less every wait. A step's work does not depend on how
 * long the input takes, so the busy time per step is the same input-bound (the cores wait for
 * infeed, and at the all-reduce for the core whose input came later) as device-bound. */
static void test_busy_is_the_work_whatever_the_input(void **state)
{
    (void)state;
    struct env *e = env_new();
    const uint64_t size = 16;
    struct tpu_sweep_point fast, slow;
    e->s.run.modeled_input_us_per_batch = 0;
    sweep_ok(e, &size, 1, &fast);
    e->s.run.modeled_input_us_per_batch = 2000;
    sweep_ok(e, &size, 1, &slow);
    const double busy_fast = fast.device_busy_share * fast.loop_seconds;
    const double busy_slow = slow.device_busy_share * slow.loop_seconds;
    print_message("busy per loop: %.3e s device-bound, %.3e s input-bound; stall %.4f "
                  "(infeed %.4f)\n", busy_fast, busy_slow, slow.stall_share,
                  slow.infeed_stall_share);
    assert_true(slow.infeed_stall_share > 0.5);
    assert_true(fabs(slow.device_busy_share + slow.stall_share + slow.host_overhead_share - 1) <
                1e-12);
    /* within 5 %: when each step's input arrives changes which ops overlap (3.5 % here);
     * counting the all-reduce's waits as busy, as infeed-only accounting did, makes the
     * input-bound figure over 20 times the device-bound one */
    assert_true(rel(busy_slow, busy_fast) < 0.05);
    env_free(e);
}

static void test_best_and_knee(void **state)
{
    (void)state;
    struct tpu_sweep_point p[5];
    memset(p, 0, sizeof p);
    const double thr[5] = {50, 90, 99.0, 100, 99.5};
    for (int i = 0; i < 5; i++) {
        p[i].iterations_per_loop = 1ull << i;
        p[i].examples_per_s = thr[i];
    }
    assert_int_equal(tpu_sweep_best(p, 5), 3);
    assert_int_equal(tpu_sweep_knee(p, 5, 0.01), 2);  /* 99.0 >= 0.99 x 100 */
    assert_int_equal(tpu_sweep_knee(p, 5, 0.001), 3); /* 99.5 is not within 0.1 % */
    assert_int_equal(tpu_sweep_knee(p, 5, 0.6), 0);
    assert_int_equal(tpu_sweep_knee(p, 1, 0.01), 0);
}

static void expect_refusal(struct env *e, const uint64_t *sizes, size_t n, const char *needle)
{
    struct tpu_sweep_point p[4];
    struct tpu_diag d = {0};
    e->s.sizes = sizes;
    e->s.n_sizes = n;
    assert_true(tpu_sweep_run(&e->s, p, &d) < 0);
    if (!strstr(d.msg, needle))
        fail_msg("'%s' not in '%s'", needle, d.msg);
}

static void test_refusals(void **state)
{
    (void)state;
    struct env *e = env_new();
    const uint64_t down[] = {4, 2}, zero[] = {0}, ok[] = {1};
    expect_refusal(e, down, 2, "loop sizes must be strictly ascending: 2 follows 4");
    expect_refusal(e, zero, 1, "loop size 0 is out of range; give 1 to 1000000000");
    expect_refusal(e, ok, 0, "a sweep takes 1 to 64 loop sizes, not 0");
    e->s.full_steps = 24;
    expect_refusal(e, ok, 1, "full_steps 24 is not a power of two from 2 to 1048576");
    e->s.full_steps = 32;
    e->s.measured_loops = 0;
    expect_refusal(e, ok, 1, "measured_loops 0 is not from 1 to 100");
    e->s.measured_loops = 2;
    /* the runtime's own refusals name the loop size they came at */
    e->s.run.train_batch_size = 3;
    expect_refusal(e, ok, 1, "loop size 1: ");
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modeled_accounting),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_extension_matches_full_simulation),
        cmocka_unit_test(test_busy_is_the_work_whatever_the_input),
        cmocka_unit_test(test_best_and_knee),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests_name("sweep", tests, NULL, NULL);
}
