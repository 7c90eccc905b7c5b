/* Loop sizing (host/tune/): how many steps each device launch runs. Today that is
 * iterations_per_loop as TPUEstimator has it: a fixed count, or a time per launch ("30s",
 * "5m", "2h") turned into a count from the measured step time of the loop before. The loop
 * size tuners (iterations_per_loop=auto) will live here too. Parsing the value is
 * tpu_run_config_set_ipl (runtime.h, loop_size.c). Private to host/. */
#ifndef TPUSIM_HOST_TUNE_INT_H
#define TPUSIM_HOST_TUNE_INT_H

#include <stdint.h>

#include "tpusim/runtime.h"

/* The loop size of one pass. */
struct tpu__loop_size {
    uint64_t steps;  /* steps per launch from now on */
    double target_s; /* > 0: simulated seconds per launch (iterations_per_loop_s) */
};

/* The first launch's size: the count, or 1 step (to measure the step time) for a time. */
void tpu__loop_size_init(struct tpu__loop_size *ls, const struct tpu_run_config *cfg);

/* Steps of the next launch when `remaining` steps are left: never more than those (the last
 * loop is shortened, never padded). */
uint64_t tpu__loop_size_next(const struct tpu__loop_size *ls, uint64_t remaining);

/* After a loop whose device time per step was step_time_s: a time per launch becomes the
 * whole number of such steps that fit in it (1 to 10^12). A count stays as it is. */
void tpu__loop_size_observe(struct tpu__loop_size *ls, double step_time_s);

#endif
