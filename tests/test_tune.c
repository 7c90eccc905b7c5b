/* The loop-size tuners (include/tpusim/tune.h) on fixed synthetic timings: each kind's exact
 * sequence of decisions, restart after stop, set/get, and every bad parameter's message.
 *
 * The synthetic "devices" below use dyadic times (1/16 s, 1/1024 s, ...), so every sum the
 * tuners make is exact and the decisions do not depend on the order of additions. The
 * expected sequences of TPU_TUNER_TIME and TPU_TUNER_KERAS come from a small Python script
 * that transcribes TPUEstimator's IterationCountEstimator and Keras 2.15's
 * StepsPerExecutionTuner (NumPy's mean and std as in-order sums, exact for these timings;
 * Keras's wall clock replaced by the same simulated clock as here: a measurement at each
 * start + j * interval, seeing the steps of the launches whose device time had ended) and
 * runs the same devices; its output is pasted below as (launch, new size) changes. The
 * model tuner's decisions are worked out by hand in the comments. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpusim/tune.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* A launch's times on a synthetic device: launch i of n steps. */
typedef double (*time_fn)(int i, uint64_t n);

struct change {
    int launch;   /* the size after this launch's observation ... */
    uint64_t spe; /* ... becomes this */
};

/* Runs `loops` launches of the tuner's current size and checks the size after each against
 * the changes (the size holds between them); prints the first mismatch. */
static void run_and_check(struct tpu_tuner *t, int first, int loops, time_fn dev, time_fn host,
                          const struct change *want, size_t n_want, uint64_t *spe_before)
{
    uint64_t expect = *spe_before;
    size_t c = 0;
    while (c < n_want && want[c].launch < first)
        expect = want[c++].spe;
    for (int i = first; i < first + loops; i++) {
        uint64_t n = tpu_tuner_steps_per_execution(t);
        assert_int_equal(tpu_tuner_observe(t, n, dev(i, n), host(i, n), NULL), 0);
        if (c < n_want && want[c].launch == i)
            expect = want[c++].spe;
        uint64_t got = tpu_tuner_steps_per_execution(t);
        if (got != expect)
            print_error("launch %d: steps_per_execution %llu, expected %llu\n", i,
                        (unsigned long long)got, (unsigned long long)expect);
        assert_int_equal(got, expect);
    }
    *spe_before = expect;
}

static struct tpu_tuner *make(const struct tpu_tuner_settings *s)
{
    struct tpu_tuner *t = NULL;
    struct tpu_diag d = {0};
    int rc = tpu_tuner_create(s, &t, &d);
    if (rc)
        print_error("%s\n", d.msg);
    assert_int_equal(rc, 0);
    assert_non_null(t);
    return t;
}

static double no_host(int i, uint64_t n)
{
    (void)i, (void)n;
    return 0;
}

/* ---- TPU_TUNER_TIME: TPUEstimator's IterationCountEstimator ------------------------------- */

/* A: 1 s per launch; 1/16 s per step for launches 0..24, then 1/8 s. */
static double ice_dev_a(int i, uint64_t n)
{
    return (double)n * (i < 25 ? 0.0625 : 0.125);
}

/* B: 4 s per launch; steps alternate 1/16 s and 1/4 s (a std of step times above 0.03 s). */
static double ice_dev_b(int i, uint64_t n)
{
    return (double)n * (i % 2 == 0 ? 0.0625 : 0.25);
}

static void test_time_tuner_decisions(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_TIME);
    assert_int_equal(s.capacity, 20);
    s.target_s = 1;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    /* no launch seen: 1 step */
    assert_int_equal(tpu_tuner_steps_per_execution(t), 1);
    /* The Python run: [16] x 25, 15, 15, 14, 13, 13, 12, 12, 11, 11, 11, 10, 10, 10, 9, 9.
     * 1 s / (1/16 s) = 16 at once. Launch 25 takes 2 s, yet the window's mean runtime is
     * 21/20 = 1.05 s: the 5 % hold rule is just missed (1.05 is 1.0500000000000000444 in
     * binary), so the mean step time (1/16 * 19 + 1/8) / 20 gives 15.24 -> 15; the mean
     * then follows the window, one launch at a time, towards 8. */
    static const struct change a[] = {{0, 16},  {25, 15}, {27, 14}, {28, 13}, {30, 12},
                                      {32, 11}, {35, 10}, {38, 9}};
    uint64_t spe = 1;
    run_and_check(t, 0, 40, ice_dev_a, no_host, a, sizeof a / sizeof *a, &spe);
    tpu_tuner_destroy(&t);
    assert_null(t);

    /* B: 64, then 26/32 and 26/29, ... as the window's mean step time swings; never held,
     * since the step times' std (about 0.09 s) is above 0.03 s. Python: [64, 26, 32, 26, 29,
     * 26, 28, 26, 27, 26, 27, 26, 27, 26, 27, 26, 27, 26, 26, 26, ...] */
    s.target_s = 4;
    t = make(&s);
    tpu_tuner_start(t);
    static const struct change b[] = {{0, 64},  {1, 26},  {2, 32},  {3, 26},  {4, 29},
                                      {5, 26},  {6, 28},  {7, 26},  {8, 27},  {9, 26},
                                      {10, 27}, {11, 26}, {12, 27}, {13, 26}, {14, 27},
                                      {15, 26}, {16, 27}, {17, 26}};
    spe = 1;
    run_and_check(t, 0, 30, ice_dev_b, no_host, b, sizeof b / sizeof *b, &spe);
    tpu_tuner_destroy(&t);
}

/* The hold rule on its own: a stable step time, more than `capacity` launches, and the last
 * launch within 10 % of the target hold the previous size even when the step time moved. */
static void test_time_tuner_hold_rule(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_TIME);
    s.target_s = 1;
    s.capacity = 4;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    /* 5 launches of 1/16 s steps: 16 each (1 s) */
    for (int i = 0; i < 5; i++)
        assert_int_equal(tpu_tuner_observe(t, tpu_tuner_steps_per_execution(t),
                                           tpu_tuner_steps_per_execution(t) * 0.0625, 0, NULL),
                         0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 16);
    /* 16 steps of 1/16 + 1/256 s: 1.0625 s, within 10 % of 1 s; the std of the window's step
     * times is 0.0017 s (< 0.03) and 6 launches > 4: held at 16, although 1 / the mean step
     * time (0.0634765625) would be 15.75 -> 16 only by chance of rounding; the size held is
     * the previous estimate itself (Python: 16, then 13, 4, 3, 1 below) */
    assert_int_equal(tpu_tuner_observe(t, 16, 16 * (0.0625 + 0.00390625), 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 16);
    /* 16 steps of 1/8 s: 2 s, 100 % off; the window's mean runtime (1 + 1 + 1.0625 + 2) / 4
     * = 1.265625 is 26 % off: it moves to 1 / ((1/16 * 2 + (1/16 + 1/256) + 1/8) / 4)
     * = 1 / 0.0791015625 = 12.64 -> 13 */
    assert_int_equal(tpu_tuner_observe(t, 16, 2, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 13);
    /* launches of 0 steps or 0 s teach nothing */
    assert_int_equal(tpu_tuner_observe(t, 0, 0, 0, NULL), 0);
    assert_int_equal(tpu_tuner_observe(t, 5, 0, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 13);
    /* start() after stop() empties the window (TPUEstimator's new estimator per train call) */
    tpu_tuner_stop(t);
    assert_int_equal(tpu_tuner_observe(t, 13, 0.5, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 13);
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 1);
    assert_int_equal(tpu_tuner_observe(t, 1, 0.25, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 4);
    /* half up: 1 / 0.4 = 2.5 -> 3 (int(2.5 + 0.5)); NumPy's round would give 2 */
    tpu_tuner_start(t); /* running: nothing happens */
    tpu_tuner_stop(t);
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_observe(t, 1, 0.4, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 3);
    /* at most max_steps, even for a launch timed at next to nothing */
    tpu_tuner_stop(t);
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_observe(t, 1, 1e-300, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), TPU_TUNER_MAX_STEPS);
    assert_int_equal(tpu_tuner_observe(t, 1, 1e-300, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), TPU_TUNER_MAX_STEPS);
    /* at least 1: a step longer than the target */
    tpu_tuner_stop(t);
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_observe(t, 1, 3, 0, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 1);
    tpu_tuner_destroy(&t);
}

/* ---- TPU_TUNER_KERAS: Keras 2.15's StepsPerExecutionTuner --------------------------------- */

/* A: 1/1024 s per step, 1/64 s of host time per launch */
static double keras_dev_a(int i, uint64_t n)
{
    (void)i;
    return (double)n / 1024;
}

static double keras_host_a(int i, uint64_t n)
{
    (void)i, (void)n;
    return 1.0 / 64;
}

/* Python, interval 1/8 s, change_spe_interval 10, change_threshold 0.1, 3000 launches */
static const struct change keras_a[] = {{67, 2},   {138, 3},  {206, 4},  {270, 6},  {328, 9},
                                        {379, 14}, {422, 21}, {457, 32}, {484, 48}, {504, 72},
                                        {519, 108}, {539, 162}, {575, 243}};

static void test_keras_tuner_decisions(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    /* Keras's defaults */
    assert_true(s.interval == 5);
    assert_int_equal(s.change_spe_interval, 10);
    assert_true(s.change_threshold == 0.1);
    assert_int_equal(s.initial_steps, 1);
    s.interval = 0.125;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    /* x1.5 each time throughput rose by more than 10 %, rounded half to even (4.5 -> 4,
     * 13.5 -> 14, 31.5 -> 32); at 243 the gain falls under 10 % and the size holds */
    uint64_t spe = 1;
    run_and_check(t, 0, 3000, keras_dev_a, keras_host_a, keras_a,
                  sizeof keras_a / sizeof *keras_a, &spe);
    assert_int_equal(spe, 243);
    tpu_tuner_destroy(&t);
}

/* B: 1/8 s per step; from launch 8 on 1/2 s, from launch 20 on 1/32 s again */
static double keras_dev_b(int i, uint64_t n)
{
    return (double)n * (i < 8 ? 0.125 : i < 20 ? 0.5 : 0.03125);
}

static void test_keras_tuner_never_rounds_to_zero(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.interval = 1;
    s.change_spe_interval = 2;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    /* 1 -> 2 (the first tuning always adds), slower -> 2 x 0.5 = 1 and the last action is
     * now a decrease; at launch 51, faster: repeat the decrease, 1 x 0.5. Keras rounds 0.5 to
     * 0 (Python: [(0, 1), (7, 2), (9, 1), (51, 0)]); here it stays 1. */
    static const struct change b[] = {{7, 2}, {9, 1}};
    uint64_t spe = 1;
    run_and_check(t, 0, 120, keras_dev_b, no_host, b, sizeof b / sizeof *b, &spe);
    assert_int_equal(spe, 1);
    tpu_tuner_destroy(&t);
}

static void test_keras_tuner_restarts(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.interval = 0.125;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    assert_true(tpu_tuner_running(t));
    /* Python: 300 launches tuning, 100 stopped, start(), 300 more:
     * [(0, 1), (67, 2), (138, 3), (206, 4), (270, 6), (452, 9), (503, 14), (546, 21),
     *  (581, 32), (607, 48), (627, 72)]. Keras itself would stay at 6 after the restart:
     * its stop event is never cleared, so the new thread ends at once. */
    static const struct change r[] = {{67, 2},   {138, 3},  {206, 4},  {270, 6},
                                      {452, 9},  {503, 14}, {546, 21}, {581, 32},
                                      {607, 48}, {627, 72}};
    const size_t n = sizeof r / sizeof *r;
    uint64_t spe = 1;
    run_and_check(t, 0, 300, keras_dev_a, keras_host_a, r, n, &spe);
    tpu_tuner_stop(t);
    assert_false(tpu_tuner_running(t));
    run_and_check(t, 300, 100, keras_dev_a, keras_host_a, r, n, &spe);
    assert_int_equal(spe, 6);
    tpu_tuner_start(t);
    run_and_check(t, 400, 300, keras_dev_a, keras_host_a, r, n, &spe);
    assert_int_equal(spe, 72);
    tpu_tuner_destroy(&t);
}

/* C: launches much longer than the interval (1/64 s): 1/16 s per step, 1/8 s more on every
 * third launch, 1/8 s of host time. Most measurements see no new step (0 steps/s) and cannot
 * tune; the tuner skips long runs of them by count, which must not change a decision. */
static double keras_dev_c(int i, uint64_t n)
{
    return (double)n / 16 + (i % 3 == 0 ? 0.125 : 0);
}

static double keras_host_c(int i, uint64_t n)
{
    (void)i, (void)n;
    return 0.125;
}

static void test_keras_tuner_many_measurements_per_launch(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.interval = 1.0 / 64;
    s.change_spe_interval = 5;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    /* Python (9621 measurements): */
    static const struct change c[] = {{1, 2},   {3, 3},   {4, 4},   {7, 6},
                                      {14, 9},  {17, 14}, {20, 21}, {21, 32},
                                      {32, 48}, {45, 72}, {56, 108}};
    uint64_t spe = 1;
    run_and_check(t, 0, 60, keras_dev_c, keras_host_c, c, sizeof c / sizeof *c, &spe);
    tpu_tuner_destroy(&t);
}

static void test_keras_tuner_set_and_parameters(void **state)
{
    (void)state;
    struct tpu_tuner_settings s, got;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    struct tpu_tuner *t = make(&s);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_tuner_set_steps_per_execution(t, 40, &d), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 40);
    assert_int_equal(tpu_tuner_set_keras(t, 2, 3, 0.25, &d), 0);
    tpu_tuner_get_settings(t, &got);
    assert_true(got.interval == 2);
    assert_int_equal(got.change_spe_interval, 3);
    assert_true(got.change_threshold == 0.25);
    /* a bad value leaves the tuner as it was */
    assert_int_equal(tpu_tuner_set_keras(t, 0, 3, 0.25, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tuner interval 0 s must be from 0.000001"));
    assert_int_equal(tpu_tuner_set_keras(t, 2, 0, 0.25, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "change_spe_interval 0 must be from 1"));
    assert_int_equal(tpu_tuner_set_keras(t, 2, 3, 1.5, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "change_threshold 1.5 must be from 0 to 1"));
    tpu_tuner_get_settings(t, &got);
    assert_true(got.interval == 2);
    /* 40 steps of 1/16 s, 3 measurements 2 s apart, a tuning at the third: x1.5 = 60 */
    tpu_tuner_start(t);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tpu_tuner_observe(t, tpu_tuner_steps_per_execution(t), 2.5, 0, &d), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 60);
    tpu_tuner_destroy(&t);
}

/* ---- TPU_TUNER_MODEL: tpusim's own -------------------------------------------------------- */

/* A device with a fixed part of 4/1024 s per launch and 1/1024 s per step, and 0.01 s of
 * host time per launch. The _drift device's step takes 2/1024 s from launch 6 on; the _ckpt
 * host has a checkpoint (0.03 s) at launch 4. */
static double model_dev(int i, uint64_t n)
{
    (void)i;
    return 4.0 / 1024 + (double)n / 1024;
}

static double model_dev_drift(int i, uint64_t n)
{
    return 4.0 / 1024 + (double)n * (i >= 6 ? 2.0 : 1.0) / 1024;
}

static double model_host_ckpt(int i, uint64_t n)
{
    (void)n;
    return i == 4 ? 0.03 : 0.01;
}

static void test_model_tuner_decisions(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    assert_true(s.target_overhead == 0.02);
    struct tpu_tuner *t = make(&s);
    assert_false(tpu_tuner_model_estimate(t, NULL, NULL, NULL));
    tpu_tuner_start(t);
    /* launch 0, 1 step, 5/1024 s: step time 5/1024 s with no fixed device part yet, host
     * 0.01 s: n* = ceil(0.01 x 0.98 / (0.02 x 5/1024)) = ceil(100.35) = 101, more than 64
     * times 1: 64.
     * launch 1, 64 steps, 68/1024 s: two sizes fit a = 4/1024, s = 1/1024; F = a + 0.01
     * = 0.01390625: n* = ceil(0.01390625 x 0.98 / (0.02 / 1024)) = ceil(697.76) = 698,
     * whose overhead share is 0.01390625 / (0.01390625 + 698/1024) = 1.9997 %.
     * launches 2, 3: on the fit: held. launch 4 has a checkpoint (0.03 s host): the median
     * host time stays 0.01 s: held. launch 6: the step time doubles, 1400/1024 s instead of
     * the 702/1024 predicted: the window restarts there, a = 4/1024 kept, s = 2/1024:
     * n* = ceil(348.88) = 349; held from then on. */
    static const struct change m[] = {{0, 64}, {1, 698}, {6, 349}};
    uint64_t spe = 1;
    run_and_check(t, 0, 12, model_dev_drift, model_host_ckpt, m, sizeof m / sizeof *m, &spe);
    double fixed, step;
    bool bound = true;
    assert_true(tpu_tuner_model_estimate(t, &fixed, &step, &bound));
    assert_true(fabs(fixed - (4.0 / 1024 + 0.01)) < 1e-12); /* a least-squares fit: 1e-12 s */
    assert_true(fabs(step - 2.0 / 1024) < 1e-12);
    assert_false(bound);
    /* stopped, it learns nothing: a step time 4 times longer does not move it */
    tpu_tuner_stop(t);
    assert_int_equal(tpu_tuner_observe(t, 349, 4 * 349.0 / 1024, 0.01, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 349);
    /* restarted, it keeps what it learnt and goes on */
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_observe(t, 349, 4.0 / 1024 + 349 * 2.0 / 1024, 0.01, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 349);
    tpu_tuner_destroy(&t);
}

static void test_model_tuner_cadence_and_target(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    /* the same device: n* = 698 as above */
    static const struct {
        uint64_t cadence, want;
        bool bound;
    } cases[] = {
        {500, 500, true},   /* n* > the cadence: the cadence */
        {1000, 698, false}, /* n* under the cadence: n*, whether or not it divides it */
        {699, 698, false},
        {698, 698, false},
        {697, 697, true},   /* one step short: the cadence binds */
        {0, 698, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        s.cadence_steps = cases[i].cadence;
        struct tpu_tuner *t = make(&s);
        tpu_tuner_start(t);
        for (int k = 0; k < 4; k++) {
            uint64_t n = tpu_tuner_steps_per_execution(t);
            assert_int_equal(tpu_tuner_observe(t, n, model_dev(k, n), 0.01, NULL), 0);
        }
        assert_int_equal(tpu_tuner_steps_per_execution(t), cases[i].want);
        bool bound = !cases[i].bound;
        assert_true(tpu_tuner_model_estimate(t, NULL, NULL, &bound));
        assert_int_equal(bound, cases[i].bound);
        tpu_tuner_destroy(&t);
    }
    /* growing at most 64-fold: with a cadence of 1000, the first launch's n* (101) is cut to
     * 64; the fit over 1 and 64 steps then gives n* = 698 (under 64 x 64) */
    s.cadence_steps = 1000;
    struct tpu_tuner *c = make(&s);
    tpu_tuner_start(c);
    assert_int_equal(tpu_tuner_observe(c, 1, model_dev(0, 1), 0.01, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(c), 64);
    assert_int_equal(tpu_tuner_observe(c, 64, model_dev(1, 64), 0.01, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(c), 698);
    tpu_tuner_destroy(&c);
    /* coprime cadences (a log line every 100 steps, a checkpoint every 101: the runtime passes
     * the smaller, 100) cap the loop at 100, not at their gcd 1 */
    s.cadence_steps = 100;
    c = make(&s);
    tpu_tuner_start(c);
    for (int k = 0; k < 3; k++) {
        uint64_t n = tpu_tuner_steps_per_execution(c);
        assert_int_equal(tpu_tuner_observe(c, n, model_dev(k, n), 0.01, NULL), 0);
    }
    assert_int_equal(tpu_tuner_steps_per_execution(c), 100);
    tpu_tuner_destroy(&c);
    s.cadence_steps = 1000;
    /* a cadence above max_steps: max_steps caps n* (698 -> 600) */
    s.max_steps = 600;
    c = make(&s);
    tpu_tuner_start(c);
    for (int k = 0; k < 3; k++) {
        uint64_t n = tpu_tuner_steps_per_execution(c);
        assert_int_equal(tpu_tuner_observe(c, n, model_dev(k, n), 0.01, NULL), 0);
    }
    assert_int_equal(tpu_tuner_steps_per_execution(c), 600);
    tpu_tuner_destroy(&c);
    s.max_steps = TPU_TUNER_MAX_STEPS;
    /* a 10 % target: ceil(0.01390625 x 0.9 / (0.1 / 1024)) = ceil(128.16) = 129 */
    s.cadence_steps = 0;
    s.target_overhead = 0.1;
    struct tpu_tuner *t = make(&s);
    tpu_tuner_start(t);
    for (int k = 0; k < 4; k++) {
        uint64_t n = tpu_tuner_steps_per_execution(t);
        assert_int_equal(tpu_tuner_observe(t, n, model_dev(k, n), 0.01, NULL), 0);
    }
    assert_int_equal(tpu_tuner_steps_per_execution(t), 129);
    /* host times that jitter by 5 % keep the size (n* moves by less than 10 %) */
    for (int k = 0; k < 8; k++) {
        assert_int_equal(tpu_tuner_observe(t, 129, model_dev(k, 129), k % 2 ? 0.0105 : 0.0095,
                                           NULL), 0);
        assert_int_equal(tpu_tuner_steps_per_execution(t), 129);
    }
    /* a size set by hand is where it moves from: 7 is far from n*, which the window's last 8
     * host times (0.0105 x 4, 0.0095 x 3, 0.01) now put at a median of 0.01025 s:
     * ceil((4/1024 + 0.01025) x 0.9 / (0.1 / 1024)) = ceil(130.46) = 131 */
    assert_int_equal(tpu_tuner_set_steps_per_execution(t, 7, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 7);
    assert_int_equal(tpu_tuner_observe(t, 7, model_dev(0, 7), 0.01, NULL), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 131);
    tpu_tuner_destroy(&t);
}

/* ---- settings and the object ------------------------------------------------------------- */

static void expect_bad(const struct tpu_tuner_settings *s, const char *text)
{
    struct tpu_diag d = {0};
    struct tpu_tuner *t = (struct tpu_tuner *)&d; /* must become NULL */
    assert_int_equal(tpu_tuner_create(s, &t, &d), TPU_EINVAL);
    assert_null(t);
    if (!strstr(d.msg, text))
        print_error("message '%s' lacks '%s'\n", d.msg, text);
    assert_non_null(strstr(d.msg, text));
}

static void test_bad_settings(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.interval = 0;
    expect_bad(&s, "tuner interval 0 s must be from 0.000001 (a microsecond) to 86400 (a day) "
               "of simulated time; e.g. 5");
    s.interval = 5e-7;
    expect_bad(&s, "tuner interval 5e-07 s must be from 0.000001");
    s.interval = NAN;
    expect_bad(&s, "tuner interval nan s");
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.change_spe_interval = 0;
    expect_bad(&s, "tuner change_spe_interval 0 must be from 1 to 1000000 measurements; "
               "e.g. 10");
    tpu_tuner_default_settings(&s, TPU_TUNER_KERAS);
    s.change_threshold = -0.1;
    expect_bad(&s, "tuner change_threshold -0.1 must be from 0 to 1");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.target_overhead = 0;
    expect_bad(&s, "tuner target_overhead 0 must be above 0 and below 1");
    s.target_overhead = 1;
    expect_bad(&s, "tuner target_overhead 1 must be above 0 and below 1");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.drift_threshold = 0;
    expect_bad(&s, "tuner drift_threshold 0 must be above 0");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.cadence_steps = TPU_TUNER_MAX_STEPS + 1;
    expect_bad(&s, "tuner cadence_steps 1000000000001 is more than 1000000000000");
    tpu_tuner_default_settings(&s, TPU_TUNER_TIME);
    expect_bad(&s, "tuner target_s 0 must be above 0 and at most 86400");
    s.target_s = 30;
    s.capacity = 0;
    expect_bad(&s, "tuner capacity 0 must be from 1 to 1000000 launches; e.g. 20");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.initial_steps = 0;
    expect_bad(&s, "tuner initial_steps 0 must be from 1 to max_steps (1000000000000)");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.max_steps = 0;
    expect_bad(&s, "tuner max_steps 0 must be from 1 to 1000000000000");
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.kind = (enum tpu_tuner_kind)7;
    expect_bad(&s, "tuner kind 7 is not one of TPU_TUNER_MODEL, TPU_TUNER_KERAS, "
               "TPU_TUNER_TIME");
    /* another kind's fields are not checked */
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.interval = -1;
    s.target_s = -1;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_tuner_check_settings(&s, &d), 0);
}

static void test_object(void **state)
{
    (void)state;
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    s.initial_steps = 5;
    s.max_steps = 100;
    struct tpu_tuner *t = make(&s);
    struct tpu_diag d = {0};
    assert_false(tpu_tuner_running(t));
    assert_int_equal(tpu_tuner_steps_per_execution(t), 5);
    assert_int_equal(tpu_tuner_set_steps_per_execution(t, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "steps_per_execution 0 must be from 1 to the tuner's "
                            "max_steps 100"));
    assert_int_equal(tpu_tuner_set_steps_per_execution(t, 101, &d), TPU_EINVAL);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 5);
    assert_int_equal(tpu_tuner_set_steps_per_execution(t, 100, &d), 0);
    assert_int_equal(tpu_tuner_observe(t, 1, -1, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "a launch of -1 s device time and 0 s host time: both must "
                            "be finite and at least 0"));
    assert_int_equal(tpu_tuner_observe(t, 1, 1, INFINITY, &d), TPU_EINVAL);
    assert_int_equal(tpu_tuner_set_keras(t, 5, 10, 0.1, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "are the keras tuner's; this tuner is 'model'"));
    /* max_steps bounds the model's choice: 0.01 s of host time and 1 us steps want 490000 */
    tpu_tuner_start(t);
    assert_int_equal(tpu_tuner_observe(t, 100, 100e-6, 0.01, &d), 0);
    assert_int_equal(tpu_tuner_steps_per_execution(t), 100);
    tpu_tuner_destroy(&t);
    assert_null(t);
    tpu_tuner_destroy(&t);
    tpu_tuner_destroy(NULL);

    enum tpu_tuner_kind k;
    assert_int_equal(tpu_tuner_kind_parse("keras", &k, &d), 0);
    assert_int_equal(k, TPU_TUNER_KERAS);
    assert_int_equal(tpu_tuner_kind_parse("model", &k, &d), 0);
    assert_int_equal(k, TPU_TUNER_MODEL);
    assert_int_equal(tpu_tuner_kind_parse("Keras", &k, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tuner 'Keras' is not one of model, keras, time"));
    assert_string_equal(tpu_tuner_kind_name(TPU_TUNER_TIME), "time");
    assert_null(tpu_tuner_kind_name((enum tpu_tuner_kind)3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_tuner_decisions),
        cmocka_unit_test(test_time_tuner_hold_rule),
        cmocka_unit_test(test_keras_tuner_decisions),
        cmocka_unit_test(test_keras_tuner_never_rounds_to_zero),
        cmocka_unit_test(test_keras_tuner_restarts),
        cmocka_unit_test(test_keras_tuner_many_measurements_per_launch),
        cmocka_unit_test(test_keras_tuner_set_and_parameters),
        cmocka_unit_test(test_model_tuner_decisions),
        cmocka_unit_test(test_model_tuner_cadence_and_target),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_object),
    };
    return cmocka_run_group_tests_name("tune", tests, NULL, NULL);
}
