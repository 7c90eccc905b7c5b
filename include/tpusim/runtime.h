/* The host runtime: TPUEstimator's behaviour on the simulated chip.
 *
 * A run configuration mirrors TPUConfig and RunConfig; an estimator joins a device, a model
 * (which lowers itself to device programs) and an input function, and offers train,
 * evaluate and predict. Where TPUEstimator's behaviour is what users rely on, it is kept:
 * global batch sizes, the per-replica batch of each input mode and its divisibility rules,
 * iterations_per_loop, checkpoints at loop boundaries. Where it is known to hurt, this
 * runtime does better, and says so:
 *   - the next loop's infeed fills while the host hooks run (no bubble);
 *   - an error in any thread (input function, host call, NaN or Inf loss) ends the run
 *     promptly with that error, never a hang, and the last checkpoint stays intact;
 *   - evaluate and predict pad the last partial batch and mask the padding, so N examples
 *     give exactly N predictions and metrics over exactly N examples;
 *   - a finite training input ends training cleanly at the last full step (with a warning;
 *     strict_input makes it an error): no core starts the step the input ended part-way,
 *     so params and device time stop at that step's start; with sample_weights, after its
 *     last step, partial or not.
 *
 * Threads: the caller's thread runs the loops and hooks; an infeed thread per host (of
 * num_hosts) runs that host's input function calls and fills the infeed queues of the cores
 * they feed, each core its slice of each tensor (input_partition_dims: the whole tensor, its
 * part padded to the largest part, or nothing on logical cores after the first for dims of
 * product 1); an outfeed thread drains the outfeed queues and runs host calls. They hand
 * data to each other only through the device's queues and the estimator's lock-guarded
 * status.
 *
 * Time: device time is simulated. The host's own phases (input function, hooks and
 * checkpoints, launches) are charged to the same timeline either with their measured wall
 * time or with fixed modeled costs (deterministic, for tests and benchmarks); the
 * simulator's own run time is never charged. A launch is always modeled (modeled_launch_us):
 * the simulator has no real launch to measure. Reports say which. */
#ifndef TPUSIM_RUNTIME_H
#define TPUSIM_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/program.h"
#include "tpusim/tune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The input modes, as TPUEstimator's InputPipelineConfig (shard.h computes the plan of
 * calls; the runtime follows it). Each host of the pod slice (num_hosts, simulated in this
 * process) has its own infeed thread, which makes that host's input_fn calls and feeds the
 * cores the calls are for; each host's input time is charged on its own clock, so hosts
 * read their input in parallel. Training:
 *   PER_SHARD_V1  once per replica, on the replica's host, batch = global / replicas
 *                 (not with num_cores_per_replica > 1)
 *   PER_HOST_V1   once per host, batch = global / hosts, split over the host's replicas
 *   PER_HOST_V2   once per replica, on the replica's host, batch = global / replicas; the
 *                 only mode that takes input_partition_dims
 *   BROADCAST     once, on host 0, batch = global; every replica receives the whole global
 *                 batch (which need not divide by the replicas), and the model scales its
 *                 loss by 1 / (global x replicas) so that the summed gradients are the mean's
 * Where tpusim differs from TPUEstimator: one input function object serves every host, so
 * the calls of a step are made one at a time, in the plan's order (host 0's first), each on
 * its host's thread: an input function need not be thread-safe, and a run on several hosts
 * reads the same examples in the same order as on one (TPUEstimator runs one input_fn per
 * host process, which usually reads a shard of the files of its own). Host 0's thread also
 * feeds the other hosts' replicas in BROADCAST and SLICED (the network between hosts is not
 * modeled: each chip's data crosses its own host link). */
enum tpu_input_mode {
    TPU_PER_SHARD_V1 = 0, /* input_fn per replica, batch = global / replicas */
    TPU_PER_HOST_V1,      /* input_fn per host, batch = global / hosts, split to replicas */
    TPU_PER_HOST_V2,      /* input_fn per host with the per-replica batch, once per replica */
    TPU_BROADCAST,        /* input_fn once on host 0, the global batch to every replica */
};

enum tpu_eval_input {
    TPU_EVAL_PER_HOST_V1 = 0, /* eval input per host, split to replicas */
    TPU_EVAL_SLICED,          /* one eval input on host 0 with the global batch, sliced
                                 across the replicas */
};

enum tpu_host_time {
    TPU_HOST_TIME_MODELED = 0, /* fixed costs below: deterministic */
    TPU_HOST_TIME_MEASURED,    /* the host phases' wall time (input, hooks, checkpoints);
                                  launches stay modeled: there is no real one to time */
};

/* A tensor's partition over the logical cores of a replica (TPUConfig.input_partition_dims):
 * one count per dimension of the per-replica tensor, the batch dimension first. rank 0 is
 * None: the tensor is replicated to every core of the replica. A product of 1 sends it to
 * logical core 0 only. Otherwise the product equals num_cores_per_replica; the parts go to
 * logical cores in row-major order over the counts, and a dimension that does not divide
 * splits as TPU infeed splits it (include/tpusim/shard.h). */
#define TPU_PARTITION_MAX_RANK 8

struct tpu_partition_dims {
    uint32_t rank; /* 0: None */
    uint32_t dims[TPU_PARTITION_MAX_RANK];
};

/* The hosts of a pod slice when each runs in its own process (host/mpi: one MPI rank per
 * host; tests: one thread per host). Every process creates its estimator with the same run
 * configuration (num_hosts = n, host_group = its group) on a device that is its host's part of
 * the pod (device.h, settings.pod: parts n, index rank). The estimator then drives only its
 * host: it makes its host's input_fn calls and advances past the others' (struct tpu_input's
 * skip), feeds and drains its own cores, writes params to them; at each loop boundary the
 * hosts exchange what the loop's figures need (each replica's outfed values, the cores'
 * counters, the device's end cycle), so that every host computes the same loop info, the
 * same numbers as one process simulating all n hosts, bit for bit. Prediction exchanges the
 * loop's output rows too, and every host emits every real row of the pod (predict, below).
 * Checkpoints and metrics.jsonl are written by host 0 (which holds replica 0); every host
 * restores from them. At the start of each pass the hosts check that they run the same thing (chip,
 * cores, program, batch, steps, global step) and refuse with a message naming the field and
 * both values if not. */
struct tpu_host_group {
    void *ctx;
    uint32_t n;    /* hosts: the run configuration's num_hosts */
    uint32_t rank; /* this process's host: < n */
    /* Every host gives `bytes` at send; recv[h x bytes ..] gets host h's, for every h.
     * Called from the caller's thread only, at the same points on every host, with the same
     * bytes. Returns 0 or a negative TPU_E* code with a sentence in d. */
    int (*allgather)(void *ctx, const void *send, size_t bytes, void *recv,
                     struct tpu_diag *d);
    /* A failure of this host alone, with rc and d: a pass that failed here (the first error
     * of any of its threads, called from that thread: the input, a hook, the device, a
     * checkpoint write, the NaN check on the host of replica 0), or a check or load before
     * the pass that failed here but not on every host (a checkpoint that does not read on
     * this host, another configuration). The others may be blocked in a collective that
     * this host will never join: the group ends every host's run now (MPI: the error is
     * reported and the job aborted). May return (then the runtime unwinds as usual) or not.
     *
     * Not called for an outcome that every host reaches alike, which train, evaluate and
     * predict return on every host as one process returns it, the group still usable: a
     * check that every host fails before the pass (a batch size that does not split, a
     * missing batch size, no steps), a difference found by the agreement at a pass's start
     * (TPU_EINVAL, naming the host, the field and both values), a stop request
     * (TPU_ECANCELED), the training input's end under strict_input (TPU_EEND). A host whose
     * call fails because another host failed returns TPU_ECANCELED ("host H failed: ...")
     * without calling abort: that host's abort reports it. */
    void (*abort)(void *ctx, int rc, const struct tpu_diag *d);
};

struct tpu_run_config {
    /* TPUConfig */
    uint64_t iterations_per_loop;     /* steps per launch (when iterations_per_loop_s is 0) */
    double iterations_per_loop_s;     /* > 0: a time per launch in simulated seconds ("30s"):
                                         each launch's size is TPUEstimator's
                                         IterationCountEstimator's (tune.h, TPU_TUNER_TIME) */
    bool iterations_per_loop_auto;    /* "auto": `tuner` chooses each launch's size */
    struct tpu_tuner_settings tuner;  /* auto's tuner: kind TPU_TUNER_MODEL (default) or
                                         TPU_TUNER_KERAS, and its parameters (tune.h) */
    uint32_t num_shards;              /* replicas; 0 = all cores / cores per replica */
    uint32_t num_cores_per_replica;   /* 1, 2, 4, ... 128 */
    enum tpu_input_mode per_host_input_for_training;
    enum tpu_eval_input eval_training_input_configuration;
    double initial_infeed_sleep_secs;
    uint64_t host_call_every_n_steps; /* 0: never */
    uint32_t num_hosts;               /* hosts of the pod slice, simulated in this process:
                                         the device's chips divide evenly over them, host h
                                         driving chips [h x n, h x n + n), n = chips / hosts */
    const struct tpu_host_group *host_group; /* NULL: every host in this process (above).
                                         Otherwise this process is host rank of n =
                                         num_hosts, on a device of its chips (settings.pod).
                                         Borrowed: it must outlive the estimator */
    /* input_partition_dims: 0 (None), 1 (features) or 2 (features, labels) entries */
    uint32_t n_input_partition_dims;
    struct tpu_partition_dims input_partition_dims[2];
    /* RunConfig / TPUEstimator */
    uint32_t train_batch_size, eval_batch_size, predict_batch_size; /* global */
    char model_dir[512];              /* empty: no checkpoints, no metrics log */
    uint64_t save_checkpoints_steps;  /* 0: only at the start and the end */
    uint32_t keep_checkpoint_max;     /* 0: keep all */
    uint64_t log_step_count_steps;    /* 0: no step logging */
    uint64_t seed;
    bool strict_input;
    /* Keras-style training (keras.h); both off for an estimator-style run */
    bool sample_weights;              /* the train program infeeds row weights and trains on
                                         partial batches (struct tpu_build_shape.weighted): a
                                         training input call may give fewer real rows than
                                         its batch, even 0, which is a step like any other
                                         (padded: zeros, labels -1, weights 0.0); only a call
                                         that returns 0 ends the input */
    bool train_counts;                /* the train program also outfeeds its counts
                                         (struct tpu_build_shape.train_counts) */
    /* host time */
    enum tpu_host_time host_time;
    double modeled_launch_us;         /* per launch */
    double modeled_hooks_us;          /* per loop boundary (hooks, logging) */
    double modeled_checkpoint_us;     /* per checkpoint */
    double modeled_input_us_per_batch;
};

/* Defaults: iterations_per_loop 100 (auto's tuner: model, tune.h's defaults), PER_HOST_V2,
 * batch sizes 0 (must be set), modeled host time (launch 100 us, hooks 500 us, checkpoint
 * 20 ms, input 50 us per batch). */
void tpu_run_config_default(struct tpu_run_config *c);

/* Parses iterations_per_loop as TPUEstimator does: exactly ^[1-9][0-9]*[smh]?$ (no leading
 * zeros, signs, spaces, fractions or exponents). A count of steps from 1 to 10^12 ("100"),
 * or a time of 1 s to 24 h of simulated time ("30s", "5m", "2h") into the config; or "auto"
 * (iterations_per_loop_auto: c->tuner chooses). */
int tpu_run_config_set_ipl(struct tpu_run_config *c, const char *text, struct tpu_diag *d);
int tpu_input_mode_parse(const char *text, enum tpu_input_mode *out);

enum tpu_mode { TPU_MODE_TRAIN = 0, TPU_MODE_EVAL, TPU_MODE_PREDICT };

/* A model lowered to device programs. The program of each mode must declare variables
 * "iterations" (its loop's count) and "step" (the global step, advanced by training), infeed
 * the tensors in `infeed` order each step, and outfeed the tensors in `outfeed` order each
 * step (train: a [1][1] loss scaled by 1 / (B * R), struct tpu_build_shape; eval: a [1][1]
 * loss sum and [1][2] counts (correct, real examples); predict: [batch][classes] outputs).
 * The program is one core's: every core of the device runs it, a replica's cores with the
 * logical index k = core % cores_per_replica. */
#define TPU_MODEL_MAX_PARAMS 4096

/* What a model's program is built for. The training loss is scaled by 1 / (B * R): that is
 * 1 / global batch, except in BROADCAST, where every replica sees the whole global batch (B
 * = global) and the sum all-reduce of the gradients over the R replicas must still give the
 * mean loss's gradient. */
struct tpu_build_shape {
    uint32_t batch_per_replica;  /* B: rows each replica computes on per step */
    uint32_t global_batch;       /* the global batch (BROADCAST: B = global) */
    uint32_t n_replicas;         /* R */
    uint32_t cores_per_replica;  /* P */
    uint32_t n_dims;             /* entries of dims: 0, 1 (features) or 2 (features, labels) */
    struct tpu_partition_dims dims[2]; /* input_partition_dims: dims[0] the features (x),
                                          dims[1] the labels (labels, or an mse model's
                                          targets and mask) */
    /* Training only (run config's sample_weights): after the labels (or an MSE model's
     * targets and mask) the program infeeds row weights f32 [B][1]. The loss is the sum over
     * the replica's rows of w_i * loss_i, the gradient of row i is w_i times its unscaled
     * gradient, with no 1 / (B * R) factor: the input function's weights carry the scale
     * (Keras: w_i = sample_weight_i / real rows of the global batch), and padding rows weigh
     * 0, so a partial batch trains on its real rows. With every w_i = 1 / (B * R) the
     * params after a step are bit-identical to the unweighted program's. */
    bool weighted;
    /* Training only (run config's train_counts): the program also outfeeds [1][2] counts
     * (correct, real rows), after the loss, as evaluation does (an MSE model: (0, real)). */
    bool train_counts;
};

/* How a param is cut over the cores of a replica (model parallelism). */
enum tpu_param_split { TPU_SPLIT_NONE = 0, TPU_SPLIT_ROWS = 1, TPU_SPLIT_COLS = 2 };

struct tpu_model_program {
    struct tpu_program *prog;       /* owned by the runtime after build returns */
    uint32_t var_iterations, var_step;
    uint32_t n_infeed, infeed[4];
    uint32_t n_outfeed, outfeed[4];
    uint32_t n_params, params[TPU_MODEL_MAX_PARAMS]; /* checkpointed state, in a fixed order */
    /* Per param (parallel to params[]): how it is cut over a replica's cores, and the full
     * size of the cut dimension. A split param's device buffer on logical core k holds rows
     * (TPU_SPLIT_ROWS) or columns (TPU_SPLIT_COLS) [k*c, k*c + c) of the full param, c =
     * ceil(full / P), zero past the end; the buffer's other dimension is the full one. The
     * runtime keeps the full param on the host (init_param gets the full shape, checkpoints
     * store it, so a checkpoint does not depend on the sharding), writes each core its slice
     * and reads replica 0's cores back into the full param. TPU_SPLIT_NONE (0, what a zeroed
     * program has): every core holds the whole param. */
    uint8_t param_split[TPU_MODEL_MAX_PARAMS];
    uint32_t param_full[TPU_MODEL_MAX_PARAMS];
    bool no_accuracy;                /* eval's counts hold no correct answers (a regression
                                        loss): the accuracy is NaN */
};

/* One infeed tensor as the input function fills it: [batch, dims...] row-major, e.g. an
 * image model's x [batch, h, w, c] (dims h, w, c) and its labels [batch, 1]. */
struct tpu_infeed_shape {
    char name[32];                              /* for messages: "features", "labels" */
    uint32_t rank;                              /* dims per example: 1 .. 7 */
    uint64_t dims[TPU_PARTITION_MAX_RANK - 1];
};

struct tpu_model {
    void *ctx;
    /* Builds the program for `mode` and `shape`, filling all of *out. */
    int (*build)(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                 struct tpu_model_program *out, struct tpu_diag *d);
    /* Fills a param's initial value ([rows][cols] f32, the full param). */
    void (*init_param)(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                       uint64_t seed);
    /* Optional (may be NULL): the infeed tensors of `mode` as the input function fills them,
     * in infeed order, into out[0 .. *n) (at most 4): each one's name and shape per example.
     * The runtime needs it for input_partition_dims (dims[0] applies to out[0], the
     * features; dims[1] to the others, the labels, or the targets and mask of an MSE
     * model), to check the dims' ranks against the tensors' and to cut each tensor into the
     * slices of a replica's logical cores. Without it a run takes no input_partition_dims.
     * `weighted` says the program is built with struct tpu_build_shape.weighted (training
     * with sample_weights): the model then lists its row weights too, after the labels
     * (or the targets and mask), "weights" of rank 1, dims [1]; dims[1] applies to them. */
    int (*infeed_shapes)(void *ctx, enum tpu_mode mode, bool weighted, uint32_t *n,
                         struct tpu_infeed_shape out[4], struct tpu_diag *d);
};

/* An input function: fills `batch` rows of each infeed tensor (x as f32 [batch][features],
 * labels as int32 [batch][1], in the model's infeed order) for `mode`, and returns the number
 * of real rows (<= batch) through *n_real. Returns 1 with a batch, 0 at the end of the input
 * (nothing filled), or a negative error with a sentence in d. The runtime pads rows past
 * *n_real: zeros, and -1 in int32 tensors (the mask for labels). `shard` is what the call
 * is for (struct tpu_shard_call): the replica (PER_SHARD_V1, PER_HOST_V2), the host
 * (PER_HOST_V1, per-host evaluation and prediction) or 0 (BROADCAST, SLICED). Called from the
 * infeed thread of the call's host, one call at a time in the plan's order (see the input
 * modes above): with one host the calls of a step are shard 0, 1, ... in turn. */
struct tpu_input {
    void *ctx;
    int (*next)(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                void *const *tensors, uint32_t *n_real, struct tpu_diag *d);
    /* Positions the input before the first call of a pass (may be NULL): training that
     * resumes at `global_step` continues the data stream where an uninterrupted run would
     * be (so resuming reproduces it bit for bit); evaluate and predict start at 0. */
    int (*start)(void *ctx, enum tpu_mode mode, uint64_t global_step, uint32_t global_batch,
                 struct tpu_diag *d);
    /* Optional (may be NULL): advances past what next would give for the same arguments, as
     * next does, returning what next would return and the real rows through *n_real, but
     * filling nothing. With host_group set, a host calls it for the other hosts' calls, so
     * that its own calls read what they would read in one process (NULL: it calls next into
     * a scratch batch and drops it). */
    int (*skip)(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                uint32_t *n_real, struct tpu_diag *d);
};

/* What the runtime reports at each loop boundary (and at the end). */
struct tpu_loop_info {
    enum tpu_mode mode;
    uint64_t global_step;          /* after this loop */
    uint64_t steps;                /* steps this loop ran */
    float loss;                    /* train: replica 0's mean loss at the loop's last step;
                                      NaN when there is none (timing-only, no step ran) */
    float global_loss;             /* train: the mean loss over the whole global batch at
                                      the loop's last step (every replica's share, summed in
                                      replica order); NaN when there is none */
    double device_seconds;         /* simulated device time of this loop */
    double host_seconds;           /* host time charged at this boundary */
    double total_seconds;          /* simulated time since the run began */
    double wall_seconds;           /* the simulator's own wall time so far (not charged) */
    double examples_per_s;         /* simulated */
    double step_time_s;            /* simulated device time per step */
    double mxu_utilization;        /* useful MACs / MXU MAC slots over the loop's time */
    double infeed_stall_share;     /* the cores' mean share of device time waiting for infeed */
    double stall_share;            /* ... waiting for anything (tpu_stall: infeed, outfeed,
                                      collectives, memory), infeed_stall_share included */
    double host_overhead_share;    /* host time / total time */
    /* the same figures over the whole pass (this train/evaluate/predict call) so far */
    double pass_device_seconds, pass_host_seconds, pass_examples_per_s;
    double pass_mxu_utilization, pass_infeed_stall_share, pass_host_overhead_share;
    bool log_due;                  /* time for a global_step/sec log line, on TPUEstimator's
                                      step counter cadence: the train call's first boundary
                                      starts the count (no line), then a line is due at the
                                      first boundary at least log_step_count_steps steps
                                      after the last one */
    double log_steps_per_s;        /* when log_due: the global steps since the last line over
                                      the simulated time since (host phases included), the
                                      rate TPUEstimator's line shows */
    /* Sums over this loop's steps, in every mode (Keras's running metrics are their sums
     * over the loops of a pass). NaN where the mode has none (predict: real_examples only;
     * a timing-only device: no loss_sum or correct). */
    uint64_t pass_steps;           /* steps of this pass so far, this loop's included */
    uint64_t real_examples;        /* real rows: the rows the input calls of the loop's steps
                                      gave (a full training step: the global batch; a partial
                                      step, or evaluation's last batch: its real rows) */
    double loss_sum;               /* train: each step's global loss (global_loss's sum, in
                                      double) times its real rows; with sample weights of
                                      sample_weight / real rows that is the sum of the real
                                      rows' weighted losses; eval: the outfed loss sums */
    double correct;                /* train with train_counts, eval: the outfed correct
                                      counts, summed over the replicas (NaN without counts,
                                      or for a model with no_accuracy: an MSE model) */
};

struct tpu_hook {
    void *ctx;
    /* Optional (may be NULL): before every loop's launch (the caller's thread), in every
     * mode: the global step before the loop, the index in this pass (this train, evaluate or
     * predict call) of the loop's first step, and the steps the loop will run: at most, when
     * the input ends first (an evaluation or prediction over the whole input, whose length
     * the runtime does not know, asks for iterations_per_loop steps each loop; after_loop's
     * info says how many ran). It may set the learning rate for this loop. Non-zero stops
     * the run with that error (nothing of the loop runs). Its cost is part of the loop
     * boundary's modeled hooks cost; measured, its wall time is charged before the launch. */
    int (*before_loop)(void *ctx, enum tpu_mode mode, uint64_t global_step,
                       uint64_t pass_step, uint64_t steps, struct tpu_diag *d);
    /* After every loop (the caller's thread). Non-zero stops the run with that error. */
    int (*after_loop)(void *ctx, const struct tpu_loop_info *info, struct tpu_diag *d);
    /* Every host_call_every_n_steps global steps, with replica 0's loss at that step (the
     * outfeed thread). Non-zero stops the run with that error. */
    int (*host_call)(void *ctx, uint64_t global_step, float loss, struct tpu_diag *d);
};

struct tpu_estimator;

/* Validates the configuration against the device and the model before any work, with the
 * value, the rule and the fix in the message; builds nothing yet. The batch size of each mode
 * is checked when that mode runs (train, evaluate, predict check theirs first thing, before
 * any work), or up front with tpu_estimator_check_mode, so that a batch size of a mode that
 * never runs cannot fail a run. The estimator copies the config and the model/hook structs;
 * the device must outlive it.
 *
 * Timing-only devices (tpu_device_timing_only): training runs and reports cycles, but there
 * are no values: no params are initialized, restored or checkpointed (model_dir gets only
 * metrics.jsonl), the loss is NaN (null in metrics.jsonl), and evaluate, predict and
 * read_param fail with TPU_EUNSUPPORTED.
 *
 * Host memory: before a mode's program goes to the device, the host memory it will take (every
 * core's buffers, the feed queues' slots, the host copies of the params and the input batch)
 * is compared with what the process can still allocate (the smallest of MemAvailable, the
 * cgroup's memory limit less its usage, and RLIMIT_AS less the address space in use);
 * a run that would not fit fails with TPU_ENOMEM and both figures, before allocating. */
int tpu_estimator_create(struct tpu_device *dev, const struct tpu_run_config *cfg,
                         const struct tpu_model *model, const struct tpu_hook *hooks,
                         size_t n_hooks, struct tpu_estimator **out, struct tpu_diag *d);
void tpu_estimator_destroy(struct tpu_estimator **est);

/* Trains: `steps` more steps (relative), or up to `max_steps` (absolute) if steps is 0.
 * Resumes from the latest checkpoint in model_dir if there is one. When the global step is
 * already at or past max_steps, nothing runs: it returns 0 with a warning in d saying so, and
 * the last info has steps 0 and a NaN loss (no loss was computed). */
int tpu_estimator_train(struct tpu_estimator *est, const struct tpu_input *input, uint64_t steps,
                        uint64_t max_steps, struct tpu_diag *d);

struct tpu_eval_result {
    uint64_t examples;   /* exactly the examples the input gave */
    double loss;         /* mean per-example loss */
    double accuracy;     /* NaN for a model without one (no_accuracy: a regression loss) */
    uint64_t steps;
    double device_seconds;
};

/* Evaluates over the whole input (steps 0) or `steps` batches. */
int tpu_estimator_evaluate(struct tpu_estimator *est, const struct tpu_input *input,
                           uint64_t steps, struct tpu_eval_result *out, struct tpu_diag *d);

/* Predicts: calls `emit` once per real example, in input order, with the model's output
 * row (padding rows of a final partial batch are never emitted; index counts from 0).
 * Returns the number of examples through *n. One process calls emit from the pass's outfeed
 * thread, as the rows come off the device. A pod's host (host_group) calls it from the
 * caller's thread, at each loop boundary before the after_loop hooks, for the loop's steps:
 * the hosts gather the loop's output rows (only one loop's are held at a time), and every
 * host emits every real example of the pod, the same rows in the same order as one process
 * simulating all the hosts, bit for bit, with the same *n. A stop request ends prediction
 * with TPU_ECANCELED ("no result"): the rows of the steps that ran were emitted, and on a
 * pod every host stops at the same loop boundary. */
int tpu_estimator_predict(struct tpu_estimator *est, const struct tpu_input *input,
                          void (*emit)(void *ctx, uint64_t index, const float *row,
                                       uint32_t cols),
                          void *emit_ctx, uint64_t *n, struct tpu_diag *d);

/* Checks, before any work, that `mode` can run: its global batch size is set and splits over
 * the replicas as the input mode requires, and the device computes values if the mode needs
 * them. Train, evaluate and predict check their own mode first thing; call this to check a
 * later mode up front (a train that an evaluation follows). */
int tpu_estimator_check_mode(const struct tpu_estimator *est, enum tpu_mode mode,
                             struct tpu_diag *d);

/* Asks the running (or next) train, evaluate or predict call to stop. Async-signal-safe (a
 * lock-free atomic store): a SIGINT handler may call it; so may any thread.
 * Training stops cleanly at the next step boundary: the infeed thread feeds no further step,
 * the device finishes the steps already queued (at most the infeed queue's depth) and stops
 * at the start of the first step that was not fed, which leaves params and variables as
 * they are after the last complete step; the runtime then writes a checkpoint of that global
 * step (with a model_dir) and tpu_estimator_train returns TPU_ECANCELED with the step and
 * the checkpoint in the message. Between launches, the request is seen before the next one.
 * Evaluation and prediction stop at once with TPU_ECANCELED (they have no state to save).
 * The request stays: later calls return TPU_ECANCELED at once. */
void tpu_estimator_request_stop(struct tpu_estimator *est);

uint64_t tpu_estimator_global_step(const struct tpu_estimator *est);

/* Between calls: takes a new run configuration that may differ from the current one only in
 * the batch sizes, iterations_per_loop (a count, a time or auto, and the tuner),
 * sample_weights, train_counts, log_step_count_steps, save_checkpoints_steps and
 * host_call_every_n_steps; any other difference is TPU_EINVAL naming the field, both values
 * and the fix. Checked as tpu_estimator_create checks (before any work; a refused
 * configuration changes nothing); a mode whose program's shape changed is rebuilt at its
 * next call, with the params carried over. A mode whose loop sizing changed (its tuner's
 * settings, or a count for a tuner) starts a fresh tuner at its next call; otherwise its
 * tuner goes on where it got to. Called from a hook, during a call: TPU_EINVAL. */
int tpu_estimator_reconfigure(struct tpu_estimator *est, const struct tpu_run_config *cfg,
                              struct tpu_diag *d);

/* The learning rate of a train program built with the host schedule (net.h
 * TPU_SCHEDULE_HOST: its optimizer ops have schedule host and read their rate from one
 * variable, "learning_rate"): set between calls or from a hook (before_loop: that very loop);
 * the next train loop and every later one use it (the runtime writes the variable before
 * every launch of a train loop, so it survives program loads) until set again. The rate is
 * a finite number >= 0 (else TPU_EINVAL), written with tpu_lr_host_bits (program.h: 0 as
 * -0.0, since bits 0 read as the optimizer's alpha). TPU_EUNSUPPORTED, naming the schedule
 * and the fix, for a program without one. get gives the rate in force: the one set, or the
 * optimizer's alpha. Both look at the train program: the loaded one, or one built to look
 * at (so train_batch_size must be set). The rate is not part of checkpoints: a resumed run
 * starts from alpha until it is set again. */
int tpu_estimator_set_learning_rate(struct tpu_estimator *est, float lr, struct tpu_diag *d);
int tpu_estimator_get_learning_rate(const struct tpu_estimator *est, float *lr,
                                    struct tpu_diag *d);
/* The tuner that sized the launches of `mode` (iterations_per_loop auto, or a time per
 * launch), or NULL for a fixed count or a mode that has not run. The estimator owns it; read
 * it with tune.h's getters between calls (its size is where the next call starts). */
const struct tpu_tuner *tpu_estimator_tuner(const struct tpu_estimator *est, enum tpu_mode mode);

/* The summary of the last train/evaluate call. */
const struct tpu_loop_info *tpu_estimator_last_info(const struct tpu_estimator *est);
/* Reads a param of replica 0 by name after training. */
int tpu_estimator_read_param(const struct tpu_estimator *est, const char *name, float *data,
                             size_t bytes, struct tpu_diag *d);
/* Reads replica `replica`'s copy of a param (its whole value, gathered from the replica's
 * cores when split), as the device holds it: replicas hold the same values unless something
 * made them differ (what the equivalence check looks for). Replica 0 is read_param. */
int tpu_estimator_read_param_replica(const struct tpu_estimator *est, const char *name,
                                     uint32_t replica, float *data, size_t bytes,
                                     struct tpu_diag *d);
/* The params the estimator holds, as its checkpoints store them (every param of the modes
 * built so far: weights and optimizer state, in the order the programs list them): how many, and the i-th one's name and shape
 * ([rows][cols] f32, the full param). None before the first train, evaluate or predict call
 * (they initialize or restore them). *name points into the estimator, valid until its next
 * call. TPU_ERANGE for i past the count. */
size_t tpu_estimator_n_params(const struct tpu_estimator *est);
int tpu_estimator_param_info(const struct tpu_estimator *est, size_t i, const char **name,
                             uint32_t *rows, uint32_t *cols, struct tpu_diag *d);
/* Sets a param (its whole value, as read_param gives it) on every replica, after a train,
 * evaluate or predict call has loaded the params. The next call starts from it. */
int tpu_estimator_write_param(struct tpu_estimator *est, const char *name, const float *data,
                              size_t bytes, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
