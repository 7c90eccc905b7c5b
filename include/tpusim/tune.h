/* Loop-size tuners: how many steps each device launch runs (iterations_per_loop,
 * steps_per_execution), chosen from what the previous launches took.
 *
 * A tuner is an object a training loop asks for the next launch's size and tells what each
 * launch took: its steps, its device time and the host time charged around it (the launch,
 * the hooks, a checkpoint). The runtime uses these objects for iterations_per_loop "auto" and
 * "Ns"; a user's own training loop can use them the same way:
 *
 *     struct tpu_tuner_settings s;
 *     tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
 *     struct tpu_tuner *t;
 *     if (tpu_tuner_create(&s, &t, &d)) ...          // d says which setting and why
 *     tpu_tuner_start(t);
 *     while (more) {
 *         uint64_t n = tpu_tuner_steps_per_execution(t);    // at least 1
 *         ... run n steps (or fewer: the last launch), time them ...
 *         tpu_tuner_observe(t, ran, device_s, host_s);
 *     }
 *     tpu_tuner_stop(t);                               // start() again resumes tuning
 *     tpu_tuner_destroy(&t);
 *
 * Three kinds, each deterministic (the same observations give the same decisions):
 *
 *   TPU_TUNER_MODEL  tpusim's own. A launch costs a fixed time F (the host's per-loop cost
 *                    plus the device's fixed part of a launch) plus n times the step time s.
 *                    It fits F and s to the launches it has seen (least squares over the
 *                    last 8, the host part as their median so that a checkpoint's spike does
 *                    not count as a per-loop cost) and picks the smallest n whose host-overhead
 *                    share F / (F + n s) is at most target_overhead (2 %). Loops never exceed
 *                    cadence_steps, so checkpoints and log lines (due at the first loop
 *                    boundary at least their N steps after the last, as in TPUEstimator)
 *                    come within a loop of the cadence asked for; loops need not divide it. The first launch runs the starting size, the second the size
 *                    the first implies (at most 64 times the size before: a size grows at
 *                    most 64-fold per launch); from the third on the fit uses two sizes. When a
 *                    launch's device time strays from the fit by more than drift_threshold,
 *                    the step time is re-estimated from that launch on.
 *   TPU_TUNER_KERAS  Keras 2.15's StepsPerExecutionTuner: every `interval` seconds (here of
 *                    simulated time, measured from start()) it measures global steps per
 *                    second since the last measurement; every change_spe_interval
 *                    measurements it compares the mean of the last change_spe_interval
 *                    measurements with the mean at the previous tuning: more than
 *                    change_threshold faster repeats the last change (x1.5 after an increase,
 *                    x0.5 after a decrease), more than change_threshold slower does the
 *                    opposite, otherwise it holds; sizes are rounded half to even (NumPy's
 *                    round). The step counter a measurement sees counts the steps of the
 *                    launches whose device time ended by then. Two of Keras's defects are not
 *                    kept: stop() does not prevent a later start() (Keras never clears its stop
 *                    event, so a second fit() does not tune), and a size never rounds down to 0
 *                    (Keras's 1 x 0.5 rounds to 0): the smallest size is 1.
 *   TPU_TUNER_TIME   TPUEstimator's rule for a time per launch (iterations_per_loop "30s"),
 *                    its IterationCountEstimator: a window of the last `capacity` (20)
 *                    launches, each with its device time and steps; the next size is the
 *                    target time over the window's mean step time, held at the previous size
 *                    when the last launch took within 10 % of the target or the window's mean
 *                    within 5 %, and the step time is stable (the window's standard deviation
 *                    of step times below 0.03 s, after more than `capacity` launches); at
 *                    least 1, rounded half up. With no launch seen yet it is 1. start() empties
 *                    the window (TPUEstimator makes a new estimator for every train call).
 *
 * A tuner is not thread-safe: one thread uses it at a time. */
#ifndef TPUSIM_TUNE_H
#define TPUSIM_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tpu_tuner_kind {
    TPU_TUNER_MODEL = 0, /* tpusim's own: fixed cost and step time, overhead share target */
    TPU_TUNER_KERAS,     /* Keras 2.15's StepsPerExecutionTuner */
    TPU_TUNER_TIME,      /* TPUEstimator's IterationCountEstimator (iterations_per_loop "Ns") */
};

/* A tuner (opaque). */
struct tpu_tuner;

/* The largest steps per execution a tuner chooses (iterations_per_loop's own limit). */
#define TPU_TUNER_MAX_STEPS UINT64_C(1000000000000)

struct tpu_tuner_settings {
    enum tpu_tuner_kind kind;
    uint64_t initial_steps;      /* steps_per_execution at creation: 1 (1 to max_steps) */
    uint64_t max_steps;          /* the largest size chosen: TPU_TUNER_MAX_STEPS */
    /* TPU_TUNER_KERAS (Keras's names and defaults) */
    double interval;             /* seconds (simulated) between measurements: 5 (1e-6 to
                                    86400) */
    uint32_t change_spe_interval; /* measurements per tuning decision: 10 */
    double change_threshold;     /* relative throughput change that acts: 0.1 (0 to 1) */
    /* TPU_TUNER_MODEL */
    double target_overhead;      /* host-overhead share to stay under: 0.02 (above 0, below 1) */
    double drift_threshold;      /* relative device-time error that re-estimates: 0.1 */
    uint64_t cadence_steps;      /* 0: none; else loops never exceed it */
    /* TPU_TUNER_TIME */
    double target_s;             /* device seconds per launch (> 0; no default: 0) */
    uint32_t capacity;           /* launches in the window: 20 */
};

/* Every setting's default for `kind` (the values in the comments above). */
void tpu_tuner_default_settings(struct tpu_tuner_settings *s, enum tpu_tuner_kind kind);

/* Checks the settings of s->kind (the other kinds' fields are ignored): 0, or TPU_EINVAL with
 * the setting, its value, the rule and a valid example in d. */
int tpu_tuner_check_settings(const struct tpu_tuner_settings *s, struct tpu_diag *d);

/* Makes a stopped tuner whose steps per execution is s->initial_steps. The caller owns *out
 * and frees it with tpu_tuner_destroy. Fails as tpu_tuner_check_settings does, or with
 * TPU_ENOMEM. */
int tpu_tuner_create(const struct tpu_tuner_settings *s, struct tpu_tuner **out,
                     struct tpu_diag *d);

/* Frees the tuner and sets *t to NULL; accepts NULL and a pointer to NULL. */
void tpu_tuner_destroy(struct tpu_tuner **t);

/* Starts (or restarts after stop) tuning from the current steps per execution. MODEL keeps
 * what it has learnt; KERAS begins a new series of measurements, as Keras's start() does
 * (its clock and step counter keep running); TIME empties its window and starts again from 1.
 * Starting a running tuner does nothing. */
void tpu_tuner_start(struct tpu_tuner *t);

/* Stops tuning: observations still count steps and time, but the size no longer changes. */
void tpu_tuner_stop(struct tpu_tuner *t);

bool tpu_tuner_running(const struct tpu_tuner *t);

/* One launch: `steps` steps ran in device_s seconds of device time, and host_s seconds of
 * host time were charged around it (launch and loop boundary). Updates the size when the
 * tuner runs. Returns 0, or TPU_EINVAL (nothing changed) when a time is negative or not
 * finite. A launch of 0 steps or 0 device time (the input ended at a boundary) counts its
 * time but teaches nothing. */
int tpu_tuner_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s,
                      struct tpu_diag *d);

/* The steps the next launch should run (1 to max_steps). */
uint64_t tpu_tuner_steps_per_execution(const struct tpu_tuner *t);

/* Sets the steps per execution (1 to max_steps, else TPU_EINVAL), as Keras's settable
 * attribute: KERAS also takes it as the size to return to, TIME as its previous size, MODEL as
 * its current size (it still moves it when the fit says so). */
int tpu_tuner_set_steps_per_execution(struct tpu_tuner *t, uint64_t steps, struct tpu_diag *d);

/* The settings the tuner was made with (with any later set_keras). */
void tpu_tuner_get_settings(const struct tpu_tuner *t, struct tpu_tuner_settings *out);

/* Keras's three parameters (KERAS only; TPU_EINVAL on another kind or a bad value, with the
 * tuner unchanged). They apply from the next measurement on. */
int tpu_tuner_set_keras(struct tpu_tuner *t, double interval, uint32_t change_spe_interval,
                        double change_threshold, struct tpu_diag *d);

/* What MODEL believes after its last observation: the fixed cost of a launch (host part plus
 * the device's fixed part) and the step time, both in seconds, and whether the cadence limited
 * the size below what the overhead target wanted. Returns false (outputs untouched) for
 * another kind or before the first observation. Any output may be NULL. */
bool tpu_tuner_model_estimate(const struct tpu_tuner *t, double *fixed_s, double *step_s,
                              bool *cadence_bound);

/* "model", "keras", "time"; NULL for a value out of the enum. */
const char *tpu_tuner_kind_name(enum tpu_tuner_kind kind);

/* Parses "model" or "keras" (the kinds of iterations_per_loop "auto") and "time": 0, or
 * TPU_EINVAL with the word and the choices in d. */
int tpu_tuner_kind_parse(const char *text, enum tpu_tuner_kind *out, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
