/* Loop sizing (host/tune/): how many steps each device launch runs. iterations_per_loop as
 * TPUEstimator has it (a fixed count, or a time per launch "30s", "5m", "2h" sized by
 * TPUEstimator's IterationCountEstimator) or "auto" (a tuner: tpusim's model, or Keras's
 * StepsPerExecutionTuner). The tuners are public objects (include/tpusim/tune.h, tuner.c and
 * one file per kind); the runtime sizes its launches through tpu__loop_size below, which uses
 * those same objects. Parsing the value is tpu_run_config_set_ipl (runtime.h, loop_size.c).
 * Private to host/. */
#ifndef TPUSIM_HOST_TUNE_INT_H
#define TPUSIM_HOST_TUNE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/runtime.h"
#include "tpusim/tune.h"

/* ---- the tuner object (tuner.c) ------------------------------------------------------------ */

/* TPUEstimator's IterationCountEstimator (iteration_count.c): a ring of the last `capacity`
 * launches. */
struct tpu__ice_sample {
    double runtime_s, steps, step_time_s;
};

struct tpu__ice {
    struct tpu__ice_sample *ring; /* [capacity], oldest at head */
    uint32_t head, n;
    uint64_t sample_count;        /* launches seen since the last reset */
    double last_iterations;       /* the previous estimate, unrounded (at least 1) */
};

/* Keras's StepsPerExecutionTuner (keras.c), on a simulated clock. */
struct tpu__keras {
    double now_s;                 /* the tuner's clock: the sum of observed device + host time */
    uint64_t iterations;          /* steps observed since creation (optimizer.iterations) */
    double tick_origin_s;         /* measurement j is at tick_origin_s + j * interval */
    uint64_t next_tick;           /* j of the next measurement (start() makes j = 0 at once) */
    uint64_t last_iteration;      /* spe_last_logged */
    double last_time;
    double *rgsps;                /* [change_spe_interval]: the last measurements, in order */
    uint32_t n_rgsps;
    double avg_rgsps, prev_avg_rgsps;
    bool last_action_add;
    uint64_t measurement_count;
    uint64_t init_spe;
};

/* tpusim's model (model.c). */
#define TPU__MODEL_WINDOW 8

struct tpu__model {
    uint64_t n[TPU__MODEL_WINDOW];     /* the window of recent launches, oldest first */
    double dev[TPU__MODEL_WINDOW], host[TPU__MODEL_WINDOW];
    uint32_t count;
    bool have_estimate, have_fit;      /* one launch seen; a fit over two sizes made */
    double a, b, c;                    /* device fixed part, step time, host per launch (s) */
    bool cadence_bound;
};

struct tpu_tuner {
    struct tpu_tuner_settings s;
    bool running;
    uint64_t spe;                      /* steps per execution */
    union {
        struct tpu__ice ice;
        struct tpu__keras keras;
        struct tpu__model model;
    } u;
};

/* The kinds' parts of the object: allocate what the settings ask for, and react to start,
 * observe (only while running) and set. */
int tpu__ice_init(struct tpu_tuner *t);
void tpu__ice_free(struct tpu_tuner *t);
void tpu__ice_start(struct tpu_tuner *t);
void tpu__ice_observe(struct tpu_tuner *t, uint64_t steps, double device_s);
void tpu__ice_set(struct tpu_tuner *t, uint64_t steps);

int tpu__keras_init(struct tpu_tuner *t);
void tpu__keras_free(struct tpu_tuner *t);
void tpu__keras_start(struct tpu_tuner *t);
void tpu__keras_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s);
void tpu__keras_set(struct tpu_tuner *t, uint64_t steps);
int tpu__keras_resize(struct tpu_tuner *t, uint32_t change_spe_interval);

void tpu__model_init(struct tpu_tuner *t);
void tpu__model_observe(struct tpu_tuner *t, uint64_t steps, double device_s, double host_s);

/* NumPy's round of a non-negative x (half to even), then clamped to [1, max]. */
uint64_t tpu__tune_round_even(double x, uint64_t max);

/* ---- the runtime's loop size (loop_size.c) -------------------------------------------------- */

/* The loop size of one pass: a fixed count, or a tuner (auto, or a time per launch). */
struct tpu__loop_size {
    uint64_t steps;            /* a fixed count (tuner NULL) */
    struct tpu_tuner *tuner;   /* not owned: the estimator's tuner of the pass's mode */
};

/* The settings of the tuner iterations_per_loop needs in `mode`, or false for a fixed count:
 * auto gives cfg->tuner, for training with its cadence_steps capped at (the smallest of)
 * save_checkpoints_steps (when checkpoints are written: `writes_checkpoints`, a device that
 * computes values, and a model_dir) and log_step_count_steps; a time gives TPUEstimator's
 * estimator. */
bool tpu__loop_size_tuner_settings(const struct tpu_run_config *cfg, enum tpu_mode mode,
                                   bool writes_checkpoints, struct tpu_tuner_settings *out);

/* The pass's loop size: the count, or `tuner` (started here; may be NULL for a count). */
void tpu__loop_size_init(struct tpu__loop_size *ls, const struct tpu_run_config *cfg,
                         struct tpu_tuner *tuner);

/* Steps of the next launch when `remaining` steps are left: never more than those (the last
 * loop is shortened, never padded). */
uint64_t tpu__loop_size_next(const struct tpu__loop_size *ls, uint64_t remaining);

/* After a launch: its steps, device time and host time (launch plus boundary). */
void tpu__loop_size_observe(struct tpu__loop_size *ls, uint64_t steps, double device_s,
                            double host_s);

/* The pass ended: the tuner stops (the next pass restarts it). */
void tpu__loop_size_end(struct tpu__loop_size *ls);

#endif
