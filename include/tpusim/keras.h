/* Keras-style training (host/keras/): compile / fit / evaluate / predict with
 * steps_per_execution, callbacks and validation, for C programs, on the estimator runtime
 * (runtime.h) and the device API: one training loop underneath. A Keras model here is a net
 * (net.h: the layer builder or a JSON model file) compiled for a device; fit drives the
 * estimator one epoch at a time, an execution being one of the estimator's loops.
 *
 * Keras 2.15 (tf.keras) is the reference; these are its rules, kept as it defines them:
 *   - steps_per_execution N: each execution runs N batches on the chip without returning to
 *     the host; batch callbacks fire once per execution, begin with the index of its first
 *     batch, end with the index of its last; an execution never crosses an epoch boundary
 *     (10 batches, N 4: 0-3, 4-7, 8-9); N larger than the epoch is cut to the epoch.
 *     "auto": the loop-size tuner of tune.h (TPU_TUNER_KERAS) chooses each execution's size.
 *   - fit on arrays: batch_size (default 32), the last batch of an epoch may be partial
 *     (it is trained on its real rows: a partial batch's loss is the mean over them, as
 *     Keras on TPU with dynamic batch sizes); validation_split takes the last fraction of
 *     the arrays before any shuffling; shuffle each epoch (from the seed and the epoch);
 *     class_weight and sample_weight weigh each example's loss (SUM_OVER_BATCH_SIZE: the sum
 *     of w_i * loss_i over the batch's real rows, divided by their count).
 *   - logs: "loss" and each metric are running means over the epoch so far (the loss
 *     weighted by each batch's real rows, as Keras's Mean with sample_weight=batch size);
 *     validation adds "val_" entries at epoch end.
 *   - an input that runs out mid-epoch ends fit with Keras's warning ("Your input ran out of
 *     data; interrupting training. ..."), in the result's warning text; an input of unknown
 *     size with steps_per_execution > 1 and no steps_per_epoch is refused with Keras's
 *     explanation.
 * Where tpusim differs, it says so: times in logs and the progress bar are simulated (the
 * chip's and the modeled host's), never the simulator's own wall time.
 *
 * Errors: every call checks its arguments before any work; a message names the value, the
 * rule and the fix (the Keras argument's name). No call prints: the progress bar is a
 * callback that writes to the FILE it is given. */
#ifndef TPUSIM_KERAS_H
#define TPUSIM_KERAS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/dataset.h"
#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logs ------------------------------------------------------------------------------ */

#define TPU_LOGS_MAX 16
#define TPU_LOG_NAME_MAX 31

/* Keras's `logs` dict: named values in insertion order ("loss", "accuracy", "val_loss", ...).
 * Batch logs hold the running means over the epoch so far; epoch logs the epoch's. */
struct tpu_logs {
    uint32_t n;
    char name[TPU_LOGS_MAX][TPU_LOG_NAME_MAX + 1];
    double value[TPU_LOGS_MAX];
};

/* Sets name to value (replacing an entry of that name, or appending). TPU_ERANGE when full. */
int tpu_logs_set(struct tpu_logs *l, const char *name, double value);
/* The value of name, or NaN when absent. */
double tpu_logs_get(const struct tpu_logs *l, const char *name);

/* ---- compile ----------------------------------------------------------------------------- */

enum tpu_keras_metric {
    TPU_METRIC_ACCURACY = 0,           /* "accuracy", "acc": sparse categorical accuracy */
    TPU_METRIC_SPARSE_CATEGORICAL_CROSSENTROPY, /* "sparse_categorical_crossentropy" */
    TPU_METRIC_MSE,                    /* "mse", "mean_squared_error" */
    TPU_METRIC_MAE,                    /* "mae", "mean_absolute_error" (evaluated on the
                                          host from predictions: see compile) */
    TPU_METRIC_COUNT
};

/* Keras's name of a metric ("accuracy", ...) and the parser of the names compile accepts. */
const char *tpu_keras_metric_name(enum tpu_keras_metric m);
int tpu_keras_metric_parse(const char *name, enum tpu_keras_metric *out, struct tpu_diag *d);

#define TPU_KERAS_MAX_METRICS 4

struct tpu_keras_compile {
    struct tpu_train_spec optimizer;   /* net.h: the optimizer, its rate and schedule */
    enum tpu_loss loss;                /* the net's loss must be this one (the model file or
                                          tpu_net_set_output chose it); checked */
    uint32_t n_metrics;
    enum tpu_keras_metric metrics[TPU_KERAS_MAX_METRICS];
    uint64_t steps_per_execution;      /* >= 1 (default 1) */
    bool steps_per_execution_auto;     /* 'auto': the Keras tuner (tune.h) sizes executions */
    struct tpu_run_config run;         /* the device side: input mode, cores per replica,
                                          host time, seed; batch sizes and
                                          iterations_per_loop are set by fit/evaluate/predict */
};

/* Keras's defaults: the net's loss, no metrics, steps_per_execution 1, the optimizer's
 * defaults (tpu_train_spec_default), tpu_run_config_default. */
void tpu_keras_compile_default(struct tpu_keras_compile *c);

struct tpu_keras_model;

/* Compiles `net` (borrowed: must outlive the model; its output set) for `dev` (borrowed).
 * Checks everything that does not need data: the spec, the loss against the net's, each
 * metric against the loss (accuracy needs softmax cross-entropy), steps_per_execution, the
 * run configuration against the device. Params are initialized from the run's seed. */
int tpu_keras_model_compile(struct tpu_device *dev, const struct tpu_net *net,
                            const struct tpu_keras_compile *c, struct tpu_keras_model **out,
                            struct tpu_diag *d);
void tpu_keras_model_destroy(struct tpu_keras_model **m);

/* The estimator underneath (for read_param, checkpoints and the equivalence tests). */
struct tpu_estimator *tpu_keras_model_estimator(struct tpu_keras_model *m);

/* ---- callbacks --------------------------------------------------------------------------- */

/* Every Keras hook. Any entry may be NULL. Batch hooks get the batch index (with
 * steps_per_execution N: begin the execution's first, end its last) and the logs; epoch
 * hooks the epoch index (initial_epoch based). A non-zero return stops the call with that
 * error (message in d). A callback may ask fit to stop after the current epoch with
 * tpu_keras_stop_training (Keras's model.stop_training = True). */
struct tpu_callback {
    void *ctx;
    int (*on_train_begin)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                          struct tpu_diag *d);
    int (*on_train_end)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                        struct tpu_diag *d);
    int (*on_epoch_begin)(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                          const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_epoch_end)(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_train_batch_begin)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                                const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_train_batch_end)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                              const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_test_begin)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                         struct tpu_diag *d);
    int (*on_test_end)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                       struct tpu_diag *d);
    int (*on_test_batch_begin)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                               const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_test_batch_end)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                             const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_predict_begin)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                            struct tpu_diag *d);
    int (*on_predict_end)(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                          struct tpu_diag *d);
    int (*on_predict_batch_begin)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                                  const struct tpu_logs *logs, struct tpu_diag *d);
    int (*on_predict_batch_end)(void *ctx, struct tpu_keras_model *m, uint64_t batch,
                                const struct tpu_logs *logs, struct tpu_diag *d);
    /* Frees ctx; called by tpu_callback_free (NULL: nothing to free). */
    void (*destroy)(void *ctx);
};

/* Keras's model.stop_training = True: fit ends after the current epoch's end hooks. */
void tpu_keras_stop_training(struct tpu_keras_model *m);
/* Keras's optimizer.learning_rate: the rate the next execution uses (net.h's schedule
 * TPU_SCHEDULE_HOST, which compile selects when a LearningRateScheduler is given; on any
 * other schedule setting it is TPU_EUNSUPPORTED with the fix). */
int tpu_keras_get_learning_rate(const struct tpu_keras_model *m, float *lr);
int tpu_keras_set_learning_rate(struct tpu_keras_model *m, float lr, struct tpu_diag *d);

/* The built-in callbacks (host/keras/callbacks*.c). Each fills *cb; free with
 * tpu_callback_free. Arguments as Keras's, checked (name, rule, fix). */
void tpu_callback_free(struct tpu_callback *cb);

/* ProgbarLogger: verbose 1, a progress bar per epoch ("  64/1688 [>...] - ETA: ... - loss:
 * 0.5123 - accuracy: 0.8125"), rewritten in place with '\r' on a terminal and one line per
 * epoch end otherwise; verbose 2, one line per epoch ("1688/1688 - 1s - loss: ... - 1s/epoch
 * - 590us/step"), as Keras prints them, with "Epoch k/n" before each epoch. Times are
 * simulated. fit adds it by itself for verbose 1 and 2. */
int tpu_callback_progbar(FILE *out, int verbose, bool is_tty, struct tpu_callback *cb,
                         struct tpu_diag *d);

/* ModelCheckpoint(filepath, monitor, save_best_only, save_weights_only=True, mode,
 * save_freq): filepath may hold "{epoch:02d}" and "{batch}"-free Keras formats ({epoch},
 * {epoch:0Nd}, and "{<log name>:.Nf}"); mode "auto", "min", "max"; save_freq 0 = "epoch",
 * else every save_freq batches, counted as Keras counts them with steps_per_execution > 1
 * (the batches since the last save reach save_freq at an execution's end). Writes a tpusim
 * checkpoint (checkpoint.h) of the params. */
struct tpu_model_checkpoint_args {
    const char *filepath;
    const char *monitor;     /* default "val_loss" */
    bool save_best_only;
    const char *mode;        /* default "auto" */
    uint64_t save_freq;      /* 0: "epoch" */
};
int tpu_callback_model_checkpoint(const struct tpu_model_checkpoint_args *a,
                                  struct tpu_callback *cb, struct tpu_diag *d);

/* EarlyStopping(monitor, min_delta, patience, mode, baseline, restore_best_weights,
 * start_from_epoch), Keras's rules (restoring the best weights when it stops). */
struct tpu_early_stopping_args {
    const char *monitor;     /* default "val_loss" */
    double min_delta;
    uint64_t patience;
    const char *mode;        /* default "auto" */
    double baseline;         /* NaN: none */
    bool restore_best_weights;
    uint64_t start_from_epoch;
};
int tpu_callback_early_stopping(const struct tpu_early_stopping_args *a,
                                struct tpu_callback *cb, struct tpu_diag *d);

/* CSVLogger(filename, separator=',', append=False): a header "epoch,<log names...>" and a
 * row per epoch, as Keras writes it. */
int tpu_callback_csv_logger(const char *filename, char separator, bool append,
                            struct tpu_callback *cb, struct tpu_diag *d);

/* LearningRateScheduler(schedule, verbose): at each epoch's begin, lr = schedule(epoch, lr)
 * (the Keras signature) set with tpu_keras_set_learning_rate. The model must be compiled
 * with the host schedule (compile's optimizer.schedule TPU_SCHEDULE_HOST). */
int tpu_callback_lr_scheduler(float (*schedule)(void *ctx, uint64_t epoch, float lr),
                              void *schedule_ctx, FILE *verbose_out, struct tpu_callback *cb,
                              struct tpu_diag *d);

/* History: fit always records it; this is the result's per-epoch logs. */
struct tpu_history {
    uint64_t n_epochs;        /* epochs run */
    uint64_t first_epoch;     /* initial_epoch */
    struct tpu_logs *epochs;  /* [n_epochs], malloc'd */
    char warning[512];        /* "" or Keras's warning (the input ran out of data) */
};
void tpu_history_free(struct tpu_history *h);

/* ---- fit / evaluate / predict ------------------------------------------------------------ */

/* Data: arrays (a dataset in memory, dataset.h: x and labels or targets) or an input
 * function (runtime.h's tpu_input filling the model's infeed tensors; its size is unknown
 * unless steps are given). Exactly one of the two. */
struct tpu_keras_data {
    const struct tpu_dataset *arrays;
    const float *sample_weight;         /* [arrays->n_examples] or NULL (fit only) */
    const struct tpu_input *input;
};

struct tpu_keras_fit {
    struct tpu_keras_data data;
    uint32_t batch_size;                /* 0: 32 (arrays); the global batch */
    uint64_t epochs;                    /* default 1 */
    int verbose;                        /* 0, 1, 2; -1 "auto" (1 on a terminal, else 2) */
    FILE *out;                          /* where verbose writes (NULL: nothing) */
    bool out_is_tty;
    const struct tpu_callback *callbacks;
    size_t n_callbacks;
    double validation_split;            /* [0, 1): the last fraction of the arrays */
    struct tpu_keras_data validation_data; /* or arrays/input of its own (overrides split) */
    bool shuffle;                       /* default true */
    const float *class_weight;          /* [n_classes] or NULL */
    uint32_t n_class_weight;
    uint64_t initial_epoch;
    uint64_t steps_per_epoch;           /* 0: the whole arrays (ceil(n / batch)), or until the
                                           input ends */
    uint64_t validation_steps;          /* 0: the whole validation data */
    uint32_t validation_batch_size;     /* 0: batch_size */
    uint32_t n_validation_freq;         /* 0 or 1 entry: every validation_freq[0] epochs
                                           (default 1); more: the epochs (1-based) listed */
    uint64_t validation_freq[64];
};

void tpu_keras_fit_default(struct tpu_keras_fit *f);

int tpu_keras_fit(struct tpu_keras_model *m, const struct tpu_keras_fit *f,
                  struct tpu_history *history, struct tpu_diag *d);

struct tpu_keras_evaluate {
    struct tpu_keras_data data;
    uint32_t batch_size;                /* 0: 32 */
    uint64_t steps;                     /* 0: the whole data */
    int verbose;
    FILE *out;
    bool out_is_tty;
    const struct tpu_callback *callbacks;
    size_t n_callbacks;
};
void tpu_keras_evaluate_default(struct tpu_keras_evaluate *e);
/* Fills *logs with "loss" and the compiled metrics over exactly the examples given (the
 * last partial batch padded and masked). */
int tpu_keras_evaluate(struct tpu_keras_model *m, const struct tpu_keras_evaluate *e,
                       struct tpu_logs *logs, struct tpu_diag *d);

/* predict: N examples in, N rows out ([n][output size] f32, malloc'd into *out, *n_out N). */
int tpu_keras_predict(struct tpu_keras_model *m, const struct tpu_keras_evaluate *e,
                      float **out, uint64_t *n_out, uint32_t *cols, struct tpu_diag *d);

/* One step on one batch of n rows given as arrays (x [n][features], labels or targets),
 * Keras's *_on_batch: train_on_batch runs one training step on exactly these rows and
 * fills *logs with that batch's loss and metrics (reset_metrics=True); test_on_batch
 * evaluates them; predict_on_batch gives the n output rows. */
int tpu_keras_train_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                             const float *sample_weight, struct tpu_logs *logs,
                             struct tpu_diag *d);
int tpu_keras_test_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                            struct tpu_logs *logs, struct tpu_diag *d);
int tpu_keras_predict_on_batch(struct tpu_keras_model *m, const struct tpu_dataset *batch,
                               float **out, uint32_t *cols, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
