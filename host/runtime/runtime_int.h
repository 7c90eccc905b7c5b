/* Internal interface between the files of the estimator (include/tpusim/runtime.h):
 * host/runtime/runtime.c (creating it, the model's params, checkpoints, and the train, evaluate
 * and predict entry points), host/runtime/runtime_pass.c (one pass: the loop of device
 * launches and its boundaries) and host/runtime/runtime_feed.c (the threads of a pass). Not
 * part of the public API. */
#ifndef TPUSIM_HOST_RUNTIME_INT_H
#define TPUSIM_HOST_RUNTIME_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/runtime.h"

/* A param's host copy, kept across program switches (train -> eval keeps the weights). */
struct tpu__host_param {
    char name[48];
    uint32_t rows, cols;
    float *data;
};

/* The estimator (opaque in runtime.h). Only the caller's thread changes it; during a pass the
 * feed threads read its configuration, device and program, and write to the pass. */
struct tpu_estimator {
    struct tpu_device *dev;
    struct tpu_run_config cfg;
    struct tpu_model model;
    struct tpu_hook *hooks;
    size_t n_hooks;
    uint32_t n_replicas, n_cores;
    double hz;
    bool timing_only;      /* the device computes no values: no params, checkpoints or loss */
    atomic_int stop;       /* tpu_estimator_request_stop was called (any thread, or a signal
                              handler: a lock-free atomic is async-signal-safe) */

    /* the loaded program */
    bool loaded;
    enum tpu_mode mode;
    enum tpu_mode mode_loading; /* the mode load_mode is loading (for messages) */
    uint32_t batch_per_replica;
    struct tpu_model_program mp;

    struct tpu__host_param *params; /* the model's state, by name */
    size_t n_params;
    bool have_params;      /* params hold real values (restored or initialized) */
    bool params_on_device; /* the device's copy is newer than or equal to params */

    uint64_t global_step;
    uint64_t host_cycle;
    double wall_start;
    struct tpu_loop_info last;
    FILE *metrics;
    /* iterations_per_loop auto or a time: each mode's tuner (tune.h), made at the mode's
     * first pass and started and stopped around each pass */
    struct tpu_tuner *tuners[3];
};

/* A host phase charged to the simulated timeline, kept until it goes to the device's trace:
 * step of the pass it belongs to, its start cycle on the host clock that charged it, and its
 * cost in cycles. */
struct tpu__host_phase {
    uint64_t step, start_cycle, cycles;
};

/* One train, evaluate or predict call: what the caller's thread and the two feed threads
 * share. The fields marked [lock] are guarded by `lock`; `cv` wakes the threads that wait
 * for fed, drained or error to change. */
struct tpu__pass {
    struct tpu_estimator *e;
    const struct tpu_input *input;
    enum tpu_mode mode;
    uint64_t steps;               /* steps to feed (UINT64_MAX: until the input ends) */
    uint32_t per_replica, calls, per_call;

    pthread_mutex_t lock;
    pthread_cond_t cv;
    int error;                    /* [lock] first error of any thread */
    struct tpu_diag diag;         /* [lock] */
    bool input_ended;             /* [lock] */
    uint64_t fed;                 /* [lock] complete steps queued */
    uint64_t drained;             /* [lock] steps whose outfeed was processed */
    uint32_t *real_rows;          /* [lock] real rows per step (eval/predict), grows */
    uint64_t real_cap;
    float *losses;                /* [lock] replica 0's loss per step, grows */
    uint64_t loss_cap;
    /* eval sums [lock] */
    double loss_sum, correct, count;
    /* predict */
    void (*emit)(void *ctx, uint64_t index, const float *row, uint32_t cols);
    void *emit_ctx;
    uint64_t emitted;
    uint64_t step0;               /* global step at the start of the pass */
    bool stopped;                 /* [lock] the infeed thread stopped feeding on a stop request */
    uint32_t live_feeders;        /* [lock] the infeed and outfeed threads still running */
    bool finished;                /* [lock] the caller's loop is over: the watchdog ends */
    /* [lock] the input phases (one per input_fn call) that the infeed thread charged and the
     * caller's thread has not yet put on the timeline, in step order */
    struct tpu__host_phase *input_phases;
    uint64_t n_input_phases, input_phases_cap;
};

/* Wall-clock seconds (CLOCK_MONOTONIC), for measured host costs and wall_seconds. */
double tpu__runtime_wall_s(void);

/* The cycles a host phase is charged: the modeled cost, or the wall time since t0
 * (run_config.host_time). (runtime_pass.c) */
uint64_t tpu__host_cost(const struct tpu_estimator *e, double modeled_us, double t0);

/* The threads of a pass, started by tpu__pass_run with the pass as their argument
 * (runtime_feed.c). */
void *tpu__pass_infeed_thread(void *pass);
void *tpu__pass_outfeed_thread(void *pass);
void *tpu__pass_watchdog_thread(void *pass);

/* Records the first error of any thread of the pass (d NULL: the code's own sentence),
 * wakes every waiter and cancels the device, which releases every blocked call. */
void tpu__pass_fail(struct tpu__pass *p, int rc, const struct tpu_diag *d);
/* Whether the pass has failed. */
bool tpu__pass_failed(struct tpu__pass *p);

/* Saves the params (replica 0's, read back from the device) as a checkpoint of the current
 * global step in model_dir; nothing without a model_dir, or on a timing-only device (it holds
 * no values to save). (runtime.c) */
int tpu__runtime_save_checkpoint(struct tpu_estimator *e, struct tpu_diag *d);

/* A pass of `mode` over `in` from the current global step; the caller then sets steps,
 * per_replica, calls, per_call (and emit for predict). tpu__pass_free releases it after
 * tpu__pass_run. */
void tpu__pass_init(struct tpu__pass *p, struct tpu_estimator *e, const struct tpu_input *in,
                    enum tpu_mode mode);
void tpu__pass_free(struct tpu__pass *p);

/* Runs the pass: training up to global step target_step, evaluation and prediction for
 * p->steps steps or until the input ends. Returns 0 (possibly with a warning in d), or the
 * first error of any thread with its sentence in d. */
int tpu__pass_run(struct tpu_estimator *e, struct tpu__pass *p, uint64_t target_step,
                  struct tpu_diag *d);

/* The host memory this process can still allocate: the smallest of MemAvailable
 * (/proc/meminfo), the cgroup's memory limit minus its usage, and RLIMIT_AS minus the
 * address space in use; `what` names which one it was. Returns 0, or TPU_ENOTFOUND when
 * none of them can be read (then *bytes is UINT64_MAX). (runtime_config.c) */
int tpu__host_memory_available(uint64_t *bytes, char *what, size_t what_size);

#endif
