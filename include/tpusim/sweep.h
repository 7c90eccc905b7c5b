/* Loop-size sweeps: how iterations_per_loop trades the chip's time against the host's.
 *
 * Every return to the host costs a launch, the loop boundary's hooks, sometimes a checkpoint,
 * and a refill of the infeed; a small loop wastes the chip on them, a large loop makes
 * progress reports and checkpoints coarse. A sweep trains the same model with each loop size
 * of a list through the estimator (runtime.h), each on a fresh device, and reports for each
 * the simulated throughput and where the time went: the device busy, the device waiting (for
 * infeed, mostly, and at collectives for the cores the infeed held back), the host between
 * loops.
 *
 * How a loop size is measured. A loop size L up to `full_steps` is simulated in full: one
 * warm-up loop (it also fills the infeed pipeline), then `measured_loops` loops of L steps
 * whose figures are the point's. Above `full_steps`, simulating every step of every loop
 * would make a sweep of large loops on a large pod take minutes; such a point is *extended*
 * from the two largest simulated loop sizes K1 < K2 (full_steps / 2 and full_steps, simulated
 * for the purpose when the list lacks them): a loop's device time and infeed wait grow by
 * (and every wait) grow by their per-step slope between K1 and K2, (x(K2) - x(K1)) / (K2 - K1), for each step past K2,
 * and its host costs per loop are K2's. The device reaches a steady state within the first
 * steps of a launch (the infeed queue's depth), after which every step takes the same time,
 * so the extension is the simulation's own figure continued; tests compare it with full
 * simulation (test_sweep.c). Each point says which it is; full_steps 0 simulates all.
 *
 * Host time is the run configuration's: modeled (fixed costs, deterministic) or measured (the
 * wall time of the real host code: launch, hooks, input pipeline). A sweep writes no
 * checkpoints (it has no model_dir): each point charges save_checkpoints_steps' checkpoints
 * at modeled_checkpoint_us each, spread over the loops (a checkpoint every
 * ceil(save_checkpoints_steps / L) loops, at loop boundaries as the runtime saves them).
 *
 * The library prints nothing; the CLI's `tpusim bench loops` prints the table, CSV, JSON and
 * plot. */
#ifndef TPUSIM_SWEEP_H
#define TPUSIM_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_SWEEP_MAX_SIZES 64
#define TPU_SWEEP_MAX_LOOP_SIZE UINT64_C(1000000000) /* the largest loop size a sweep takes */

struct tpu_sweep_settings {
    /* The device of every point (trace is ignored: off). cores_per_replica is copied into
     * the run configuration's num_cores_per_replica. */
    struct tpu_device_settings device;
    /* The run configuration: train_batch_size (global), the host costs and host_time,
     * save_checkpoints_steps, log_step_count_steps, input mode. iterations_per_loop is the
     * swept value; model_dir is ignored (a sweep writes no files). */
    struct tpu_run_config run;
    const struct tpu_model *model; /* borrowed: it must outlive the call */
    const struct tpu_input *input; /* an endless training input; borrowed */
    const uint64_t *sizes;         /* loop sizes, strictly ascending, 1 to 10^9 */
    size_t n_sizes;                /* 1 to TPU_SWEEP_MAX_SIZES */
    uint64_t full_steps;           /* loop sizes up to this are simulated in full; 0: all.
                                      Default 32; otherwise a power of two from 2 to 2^20 */
    uint32_t measured_loops;       /* loops measured after the warm-up: 1 to 100, default 2 */
};

/* Defaults: the chip's default device settings, tpu_run_config_default (modeled host time),
 * full_steps 32, measured_loops 2. model, input, sizes and train_batch_size are the
 * caller's to set. */
void tpu_sweep_default_settings(struct tpu_sweep_settings *s, const struct tpu_chip_config *chip);

enum tpu_sweep_method {
    TPU_SWEEP_SIMULATED = 0, /* every step of the measured loops simulated */
    TPU_SWEEP_EXTENDED,      /* continued from the largest simulated loop sizes (above) */
};

/* One loop size's figures. The three shares divide the loops' simulated time: device busy +
 * stall + host overhead = 1 (infeed_stall_share is the part of stall_share spent waiting for
 * infeed). */
struct tpu_sweep_point {
    uint64_t iterations_per_loop;
    enum tpu_sweep_method method;
    uint32_t loops;                /* loops measured (after the warm-up); 0: extended */
    double examples_per_s;         /* simulated, host time included */
    double step_time_s;            /* device time per step */
    double device_busy_share;      /* the cores working: device time less every stall */
    double stall_share;            /* the cores waiting (their mean), for any cause (tpu_stall:
                                      infeed, a full outfeed, the other cores at a
                                      collective, memory) */
    double infeed_stall_share;     /* of which waiting for infeed */
    double host_overhead_share;    /* launch, hooks and checkpoints */
    double loop_seconds;           /* one loop from launch to launch: the time between loop
                                      boundaries (hooks, and so step-count progress) */
    double report_seconds;         /* between log_step_count_steps lines (a line at the first
                                      boundary at least that many steps after the last);
                                      NaN without logging */
    double checkpoint_seconds;     /* between checkpoints; NaN without save_checkpoints_steps */
    double launch_s, hooks_s, checkpoint_s; /* host costs per loop (checkpoint: spread) */
    double wall_seconds;           /* the simulator's own time for this point (0: extended) */
};

/* Runs the sweep: points[i] for sizes[i] (the caller's array of n_sizes). Returns 0, or an
 * error with a sentence in d that names the loop size it failed at. */
int tpu_sweep_run(const struct tpu_sweep_settings *s, struct tpu_sweep_point *points,
                  struct tpu_diag *d);

/* The index of the smallest loop size whose throughput is within `tolerance` (0.01: 1 %) of
 * the best of the n points, i.e. at least (1 - tolerance) x the best. n must be >= 1. */
size_t tpu_sweep_knee(const struct tpu_sweep_point *points, size_t n, double tolerance);

/* The index of the point with the highest throughput (the first of equals). n >= 1. */
size_t tpu_sweep_best(const struct tpu_sweep_point *points, size_t n);

#ifdef __cplusplus
}
#endif
#endif
