/* Internal interface between the files of the estimator (include/tpusim/runtime.h):
 * host/runtime/runtime.c (creating it, the model's params, checkpoints, and the train, evaluate
 * and predict entry points), host/runtime/runtime_pass.c (one pass: the loop of device
 * launches and its boundaries), host/runtime/runtime_feed.c (the threads of a pass) and
 * host/runtime/runtime_pod.c (a pod whose hosts are separate processes). Not part of the
 * public API. */
#ifndef TPUSIM_HOST_RUNTIME_INT_H
#define TPUSIM_HOST_RUNTIME_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/runtime.h"
#include "tpusim/shard.h"

/* A param's host copy, kept across program switches (train -> eval keeps the weights). */
struct tpu__host_param {
    char name[48];
    uint32_t rows, cols;
    float *data;
};

/* The host learning rate of a train program (TPU_SCHEDULE_HOST, runtime.h
 * tpu_estimator_set_learning_rate): what the program's ops say of it. */
struct tpu__lr_info {
    bool known;            /* filled from a train program (loaded, or built to look at it) */
    int32_t schedule;      /* the first optimizer op's schedule, -1 when it has none */
    bool has_var;          /* its host-scheduled optimizer ops read one variable, var */
    uint32_t var, var2;    /* the variable of the first (and, not has_var, of another) */
    char var_name[48], var2_name[48];
    float alpha;           /* the host-scheduled optimizer's alpha: the rate while none is set */
    char program[48];      /* the program's name, for messages */
};

/* The estimator (opaque in runtime.h). Only the caller's thread changes it; during a pass the
 * feed threads read its configuration, device and program, and write to the pass. */
struct tpu_estimator {
    struct tpu_device *dev;
    struct tpu_run_config cfg;
    struct tpu_model model;
    struct tpu_hook *hooks;
    size_t n_hooks;
    uint32_t n_replicas, n_cores;     /* the pod slice's (with a host group: every host's) */
    uint32_t hosts, chips_per_host;   /* the pod slice: cfg.num_hosts, the device's chips each */
    /* The cores this process holds: pod cores [core0, core0 + local_cores), device core
     * c - core0 each (tpu__own_core). Without a host group: every core, core0 0. */
    uint32_t core0, local_cores;
    const struct tpu_host_group *group; /* cfg.host_group (runtime_pod.c), or NULL */
    atomic_int group_aborted;   /* the group's abort was called (once: any thread) */
    /* How the current train, evaluate or predict call ends on a pod's host when it fails
     * (runtime.c's pod_call_end; the caller's thread sets it where the call's error is
     * known): TPU__POD_END_ABORT, a failure of this host alone: the group's abort tells the
     * others (the default); TPU__POD_END_AGREED, an outcome every host reached alike (from
     * exchanged data, or a check every host made before any exchange): returned as it is;
     * TPU__POD_END_GROUP, another host's failure, which that host's abort reports. */
    enum { TPU__POD_END_ABORT, TPU__POD_END_AGREED, TPU__POD_END_GROUP } pod_end;
    double hz;
    bool timing_only;      /* the device computes no values: no params, checkpoints or loss */
    atomic_int stop;       /* tpu_estimator_request_stop was called (any thread, or a signal
                              handler: a lock-free atomic is async-signal-safe) */

    /* the loaded program */
    bool loaded;
    enum tpu_mode mode;
    enum tpu_mode mode_loading; /* the mode load_mode is loading (for messages) */
    uint32_t batch_per_replica;
    struct tpu_build_shape shape; /* what the loaded program was built for */
    struct tpu_model_program mp;
    bool busy;             /* a train, evaluate or predict call is running (its hooks may
                              call back: reconfigure refuses then) */

    /* the host learning rate: set by tpu_estimator_set_learning_rate, written to the train
     * program's variable before every launch of a train loop once set */
    bool lr_set;
    float lr;
    struct tpu__lr_info lr_info; /* the train program's (known = false: not looked at yet, or
                                    the shape changed since) */

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
 * step of the pass it belongs to, the input_fn call of the step (its index in the plan), its
 * start cycle on the host clock that charged it (the clock of the call's host), and its
 * cost in cycles. */
struct tpu__host_phase {
    uint64_t step, start_cycle, cycles;
    uint32_t call, host;
};

/* What logical core k of a replica receives of one infeed tensor (the plan's slice), and
 * what cutting it takes: the per-replica tensor's dims (full), its element size, and the
 * bytes queued (the padded part). `whole`: the slice is the whole tensor (no partition dims
 * or a single part), queued as it is. */
struct tpu__slice {
    struct tpu_shard_slice s;
    bool whole;
    size_t esize, bytes;
    uint64_t full[TPU_PARTITION_MAX_RANK];
};

/* One host's infeed thread of a pass: the host, its calls of each step (indices into the
 * plan's calls, in plan order), and the complete steps it has queued. */
struct tpu__feeder {
    struct tpu__pass *p;
    pthread_t thread;
    uint32_t host;
    uint32_t n_calls, *calls;   /* owned */
    uint64_t fed;               /* [p->lock] */
    uint64_t waits_turn;        /* [p->lock] the turn it waits for in wait_turn, UINT64_MAX
                                   when it does not wait */
    bool started;
};

/* One train, evaluate or predict call: what the caller's thread and the two feed threads
 * share. The fields marked [lock] are guarded by `lock`; `cv` wakes the threads that wait
 * for fed, drained or error to change. */
struct tpu__pass {
    struct tpu_estimator *e;
    const struct tpu_input *input;
    enum tpu_mode mode;
    uint64_t steps;               /* steps to feed (UINT64_MAX: until the input ends) */
    uint32_t per_replica;         /* rows each replica computes on per step */
    uint32_t global_batch;        /* the mode's global batch: the examples of a step */
    struct tpu_shard_spec spec;   /* the mode's shard spec and plan (owned: the calls) */
    struct tpu_shard_plan plan;
    /* the slices of each infeed tensor for each logical core, [tensor][lcore]; NULL when
     * no tensor is partitioned (every core receives each tensor whole) */
    struct tpu__slice *slices;
    size_t scratch_bytes;         /* the largest cut slice (each infeed thread's buffer) */
    /* the infeed threads, one per host that makes calls [n_feeders] */
    struct tpu__feeder *feeders;
    uint32_t n_feeders;
    /* with a host group (runtime_pod.c): [lock] per step of the pass, per replica this host
     * holds, the outfed values the loop's sums need (filled by the outfeed thread, exchanged
     * at each loop boundary) */
    struct tpu__pod_value {
        float loss, correct, count;
    } *pod_values;
    uint64_t pod_values_cap;      /* steps */
    /* with a host group, prediction (runtime_pod.c): [lock] the output rows of this host's
     * replicas for the steps of the current loop, [step - pod_rows_from][slot][tensor]
     * [rows][cols] f32 (tpu__pod_keep: a slot per replica this host holds, one under
     * BROADCAST), padding rows included; the caller's thread gathers them at the loop's
     * boundary, emits every host's real rows and starts the next loop's at its first step */
    float *pod_rows;
    uint64_t pod_rows_from;       /* the pass step of pod_rows' first step */
    uint64_t pod_rows_cap;        /* steps pod_rows has room for */
    bool pod_stop;                /* a stop request on any host, as of the last exchange */
    uint64_t turn;                /* [lock] the next input_fn call, step * calls + call: the
                                     calls are made one at a time, in the plan's order */
    uint64_t end_step;            /* [lock] no host feeds step end_step or later (the input
                                     ended); UINT64_MAX until then */
    uint32_t feeding;             /* [lock] infeed threads still running: the last one out
                                     closes the device's infeed */

    pthread_mutex_t lock;
    pthread_cond_t cv;
    int error;                    /* [lock] first error of any thread */
    struct tpu_diag diag;         /* [lock] */
    bool input_ended;             /* [lock] */
    uint64_t fed;                 /* [lock] complete steps queued (on every host) */
    uint64_t drained;             /* [lock] steps whose outfeed was processed */
    uint32_t *real_rows;          /* [lock] real rows per step (eval/predict), summed over
                                     the step's calls, grows */
    uint64_t real_cap;
    float *losses;                /* [lock] replica 0's loss per step, grows */
    float *global_losses;         /* [lock] the global batch's loss per step (every replica's
                                     share), grows */
    uint64_t global_loss_cap;
    uint64_t loss_cap;
    /* eval sums [lock] */
    double loss_sum, correct, count;
    /* [lock] per step, once drained: train, the global loss (the replicas' shares summed in
     * replica order); eval, the outfed loss sums; and the outfed correct counts (train with
     * train_counts, eval), summed over the replicas. The loop sums of tpu_loop_info come
     * from them. */
    struct tpu__step_sums {
        double loss, correct;
    } *sums;
    uint64_t sums_cap;
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

/* The pass's input is BROADCAST: every replica computes the whole global batch, and only
 * replica 0's outfeed counts. */
static inline bool tpu__pass_broadcast(const struct tpu__pass *p)
{
    return p->plan.n_calls && p->plan.calls[0].broadcast;
}

/* Grows *arr (of *cap elements of elem bytes, doubling from 64) to hold at least need;
 * 0 or TPU_ENOMEM (*arr and *cap unchanged). (runtime_feed.c) */
int tpu__grow(void **arr, uint64_t *cap, uint64_t need, size_t elem);

/* Wall-clock seconds (CLOCK_MONOTONIC), for measured host costs and wall_seconds. */
double tpu__runtime_wall_s(void);

/* The cycles a host phase is charged: the modeled cost, or the wall time since t0
 * (run_config.host_time). (runtime_pass.c) */
uint64_t tpu__host_cost(const struct tpu_estimator *e, double modeled_us, double t0);

/* The threads of a pass, started by tpu__pass_run: one infeed thread per feeder (its
 * argument a struct tpu__feeder), the outfeed thread and the watchdog (the pass)
 * (runtime_feed.c). */
void *tpu__pass_infeed_thread(void *feeder);
void *tpu__pass_outfeed_thread(void *pass);
void *tpu__pass_watchdog_thread(void *pass);

/* Pod core c's core on this process's device: true and *dev_core, or false when another
 * host's process holds it (a host group). Without one every core is the device's own. */
static inline bool tpu__own_core(const struct tpu_estimator *e, uint32_t c, uint32_t *dev_core)
{
    if (c < e->core0 || c - e->core0 >= e->local_cores)
        return false;
    *dev_core = c - e->core0;
    return true;
}

/* Whether the caller's loop is to stop (tpu_estimator_request_stop): at once in one process;
 * on a pod's host, when any host's request was known at the last exchange (the pass's
 * start, or the stop word after a boundary's hooks, tpu__pod_stop_exchange), so that every
 * host stops at the same loop boundary, the one where one process stops. */
static inline bool tpu__stop_requested(struct tpu__pass *p)
{
    return p->e->group ? p->pod_stop : atomic_load(&p->e->stop) != 0;
}

/* Records the first error of any thread of the pass (d NULL: the code's own sentence),
 * tells the host group (if any) that this host failed, wakes every waiter and cancels the
 * device, which releases every blocked call. */
void tpu__pass_fail(struct tpu__pass *p, int rc, const struct tpu_diag *d);
/* Whether the pass has failed. */
bool tpu__pass_failed(struct tpu__pass *p);

/* Saves the params (replica 0's, read back from the device) as a checkpoint of the current
 * global step in model_dir; nothing without a model_dir, or on a timing-only device (it holds
 * no values to save). (runtime.c) */
int tpu__runtime_save_checkpoint(struct tpu_estimator *e, struct tpu_diag *d);

/* A pass of `mode` over `in` from the current global step: its plan (the mode's batch
 * must have been checked) and one feeder per host that makes calls; the caller then sets
 * steps (and emit for predict). tpu__pass_free releases it after tpu__pass_run (also after
 * a failed init). */
int tpu__pass_init(struct tpu__pass *p, struct tpu_estimator *e, const struct tpu_input *in,
                   enum tpu_mode mode, struct tpu_diag *d);
void tpu__pass_free(struct tpu__pass *p);

/* Runs the pass: training up to global step target_step, evaluation and prediction for
 * p->steps steps or until the input ends. Returns 0 (possibly with a warning in d), or the
 * first error of any thread with its sentence in d. */
int tpu__pass_run(struct tpu_estimator *e, struct tpu__pass *p, uint64_t target_step,
                  struct tpu_diag *d);

/* The input modes' names, by enum tpu_input_mode and enum tpu_eval_input (runtime_config.c). */
extern const char *const tpu__input_mode_names[4];
extern const char *const tpu__eval_input_names[2];

/* Checks a run configuration against the device, before any work (runtime_config.c). */
int tpu__run_config_check(const struct tpu_run_config *c, const struct tpu_device *dev,
                          struct tpu_diag *d);
/* Checks the rules of e->cfg that do not depend on a batch size: the plan of training with
 * its batch if that splits, else with one that does (runtime_config.c). */
int tpu__run_config_check_plan(const struct tpu_estimator *e, struct tpu_diag *d);

/* ---- a pod of hosts in several processes (runtime_pod.c) ---------------------------------- */

/* With cfg.host_group: the group's and the device's pod link's agreement with the run
 * configuration (n = num_hosts, parts = n, index = rank), and the things a pod cannot do
 * yet; *parts gets n (1 without a host group). TPU_EINVAL or TPU_EUNSUPPORTED with the
 * field, the rule and the fix. */
int tpu__pod_check_config(const struct tpu_run_config *c, const struct tpu_device *dev,
                          uint32_t *parts, struct tpu_diag *d);
/* At the start of a pass (the caller's thread, on every host): what every host must agree
 * on (the chip, the cores, the mode, the batch, the steps, the loop size, the input modes,
 * the global step, the program, the seed) is gathered, and any difference with host 0's is
 * refused on every host, naming the host, the field and both values. `steps` is the pass's
 * steps, or training's target step. `status` is this host's outcome of the call's checks
 * and loading so far (0, or its error with the sentence in d): every host comes here even
 * when they failed, so that no host waits for one that returned; when every host failed,
 * each returns its own error (agreed); when some did, they return theirs (to be aborted)
 * and the others "host H failed: ..." (e->pod_end says which). Without a host group:
 * status. */
int tpu__pod_agree(struct tpu_estimator *e, enum tpu_mode mode, uint64_t steps,
                   int status, struct tpu_diag *d);
/* At a pass's start (from == to) and at each loop boundary: every host's end cycle of the
 * launch (*end_cycle becomes the latest), counters of its own cores (*counters becomes the
 * pod's sum) and outfed values of the steps [from, to) of the pass, from which every host
 * fills the pass's per-step arrays and sums exactly as one process fills them. Prediction
 * gathers the steps' output rows instead and calls the pass's emit (on the caller's thread)
 * for every real row of those steps, in the order and with the index one process gives. */
int tpu__pod_loop_exchange(struct tpu__pass *p, uint64_t from, uint64_t to,
                           uint64_t *end_cycle, struct tpu_core_counters *counters,
                           struct tpu_diag *d);
/* The outfeed thread's share of a pod pass: keeps replica rep's tensor t of step s (a
 * replica this host holds) for the loop boundary's exchange: its figures, or in prediction
 * all its rows, padding included (p->pod_rows), from which every host emits every host's
 * real rows. Returns 0 or TPU_ENOMEM. */
int tpu__pod_keep(struct tpu__pass *p, uint64_t s, uint32_t rep, uint32_t t, const float *buf);
/* After a boundary's hooks: every host's stop word (tpu_estimator_request_stop on any
 * host, from a hook or any thread), so that every host stops at this boundary, as one
 * process stops at the boundary whose hook asked. */
int tpu__pod_stop_exchange(struct tpu__pass *p, struct tpu_diag *d);
/* After a call that ended alike on every host (it succeeded, or returns an agreed error:
 * e->pod_end): waits for every host's end of the call (so that no host restores a
 * checkpoint host 0 is still writing); an error when another host failed. */
int tpu__pod_end_pass(struct tpu_estimator *e, struct tpu_diag *d);
/* The pass, or the call before its pass, failed with rc on this host alone: tells the
 * group once. */
void tpu__pod_abort(struct tpu_estimator *e, int rc, const struct tpu_diag *d);

/* The host memory this process can still allocate: the smallest of MemAvailable
 * (/proc/meminfo), the cgroup's memory limit minus its usage, and RLIMIT_AS minus the
 * address space in use; `what` names which one it was. Returns 0, or TPU_ENOTFOUND when
 * none of them can be read (then *bytes is UINT64_MAX). (runtime_config.c) */
int tpu__host_memory_available(uint64_t *bytes, char *what, size_t what_size);

/* The shard spec of `mode` (runtime_plan.c): the device's hosts, chips and cores, the
 * configuration's input modes and partition dims, the mode's global batch, and the model's
 * infeed tensors (when the model describes them) with the dims that apply to each. */
int tpu__runtime_shard_spec(const struct tpu_estimator *e, enum tpu_mode mode,
                            struct tpu_shard_spec *s, struct tpu_diag *d);
/* The plan of `mode` (every rule checked; messages from shard/): the caller frees it with
 * tpu_shard_plan_free. */
int tpu__runtime_plan(const struct tpu_estimator *e, enum tpu_mode mode,
                      struct tpu_shard_spec *s, struct tpu_shard_plan *plan, struct tpu_diag *d);
/* The bytes of one row of infeed tensor t as the input function fills it: the tensor's
 * size per example (from the spec's shape when the model describes it, else the program's
 * infeed buffer's columns) times its element size. */
size_t tpu__runtime_row_bytes(const struct tpu_estimator *e, const struct tpu_shard_spec *s,
                              uint32_t t);

#endif
