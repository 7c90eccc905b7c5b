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
 * chip's and the modeled host's), never the simulator's own wall time. And:
 *   - batch_size (and validation_batch_size, evaluate's and predict's) is the global batch
 *     and must split over the replicas (a multiple of them; any size in BROADCAST
 *     training), as on a TPU; the *_on_batch calls take any row count (padded and masked);
 *   - weights (sample_weight, class_weight) need arrays, and train only: the loss and the
 *     loss-valued metrics of the training logs are weighted as Keras weighs them (the loss
 *     sum_i w_i l_i / rows, the metric sum_i w_i l_i / sum_i w_i), "accuracy" counts the
 *     correct answers unweighted, and validation and evaluate report unweighted figures;
 *   - an input function fills unweighted full batches: one that gives a partial batch in
 *     training ends the epoch there (the runtime's rule for estimator inputs); an input
 *     that ends at the start of an epoch after the first ends fit with the warning, without
 *     end hooks for that empty epoch (Keras hands them the previous epoch's logs);
 *   - arrays with steps_per_epoch above their batches run out in the first epoch (Keras
 *     repeats arrays over the epochs): the warning above;
 *   - "mae" is computed on the host from a prediction pass over the same arrays after an
 *     evaluation (evaluate, test_on_batch, validation): it is absent from the training
 *     logs and NaN for an input function's data.
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
#define TPU_LOG_NAME_MAX 63 /* "val_sparse_categorical_crossentropy" (35) fits */

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

/* Keras's callback.params: what fit, evaluate and predict tell each callback (set_params)
 * before their first hook (fit: before on_train_begin; evaluate: before on_test_begin, unless
 * it runs inside fit; predict: before on_predict_begin). */
struct tpu_keras_params {
    int verbose;             /* the call's verbose (0, 1 or 2; "auto" resolved) */
    uint64_t epochs;         /* fit: the epochs argument; evaluate and predict: 1 */
    uint64_t steps;          /* batches per epoch (fit) or of the call; 0: unknown */
};

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
    /* The epoch's logs are the callbacks' to change, as Keras's logs dict (a
     * LearningRateScheduler adds "lr"): fit calls the callbacks in order, each seeing what
     * the ones before it did, and the History records the logs after the user's callbacks
     * (before the progress bar, which comes last, as Keras adds it). */
    int (*on_epoch_end)(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                        struct tpu_logs *logs, struct tpu_diag *d);
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
    /* Keras's set_params (may be NULL): the call's params, before its first hook. */
    void (*set_params)(void *ctx, const struct tpu_keras_params *p);
    /* Frees ctx; called by tpu_callback_free (NULL: nothing to free). */
    void (*destroy)(void *ctx);
};

/* Keras's model.stop_training = True: fit ends after the current epoch's end hooks. */
void tpu_keras_stop_training(struct tpu_keras_model *m);
/* Keras's model.stop_training as a callback reads it: true once a callback asked for a stop
 * during this fit (fit clears it when it begins). */
bool tpu_keras_stop_training_requested(const struct tpu_keras_model *m);
/* The simulated clock the progress bar reads (tpusim's replacement for Keras's time.time()):
 * seconds of device and host time the runtime charged since the model was compiled, up to
 * the end of the last execution (inside a batch-end hook, that batch's execution included).
 * Never decreases. */
double tpu_keras_model_seconds(const struct tpu_keras_model *m);
/* Keras's optimizer.learning_rate: the rate the next execution uses (net.h's schedule
 * TPU_SCHEDULE_HOST, which compile selects when a LearningRateScheduler is given; on any
 * other schedule setting it is TPU_EUNSUPPORTED with the fix). */
int tpu_keras_get_learning_rate(const struct tpu_keras_model *m, float *lr);
int tpu_keras_set_learning_rate(struct tpu_keras_model *m, float lr, struct tpu_diag *d);

/* The built-in callbacks (host/keras/callbacks*.c). Each fills *cb; free with
 * tpu_callback_free. Arguments as Keras's, checked (name, rule, fix). */
void tpu_callback_free(struct tpu_callback *cb);

/* ProgbarLogger(count_mode="steps"), as fit adds it by itself for verbose 1 and 2, with
 * Keras 2.15's Progbar lines:
 *   verbose 1: a bar per epoch, "  4/10 [===========>..................] - ETA: 0s - loss:
 *     0.5123 - accuracy: 0.8125" at each batch end, ending "10/10 [==============================]
 *     - 1s 59ms/step - loss: ... - val_loss: ...". On a terminal (is_tty) each update
 *     rewrites the line in place ('\b's then '\r'); otherwise each update is a new line
 *     (starting with '\n', at most one per 0.05 simulated seconds, the epoch's last always).
 *   verbose 2: one line per epoch, "10/10 - 1s - loss: ... - val_loss: ... - 1s/epoch -
 *     59ms/step".
 *   "Epoch k/n" before each epoch when n > 1 (Keras prints none for a single epoch).
 * Values: a log's latest value (loss and metrics are running means already), "%.4f" when
 * |v| > 1e-3, else "%.4e". Evaluate (outside fit) and predict get a bar of their own.
 * Where tpusim differs: times are simulated (tpu_keras_model_seconds), never wall time.
 * verbose 0 gives a callback that prints nothing. out is borrowed (must outlive cb). */
int tpu_callback_progbar(FILE *out, int verbose, bool is_tty, struct tpu_callback *cb,
                         struct tpu_diag *d);

/* ModelCheckpoint(filepath, monitor, verbose, save_best_only, save_weights_only=True, mode,
 * save_freq). filepath is formatted as Keras formats it at each save: {epoch} (1-based),
 * {batch} (1-based; batch-level saves only), a log's value {<name>}, each with an optional
 * format spec of Python's kinds "0Nd" / "Nd" for epoch and batch and ".Nf" / ".Ne" / ".Ng"
 * for values ("ckpt/{epoch:02d}-{val_loss:.2f}"); "{{" and "}}" are braces; a name that is
 * neither epoch, batch nor in the logs fails the save as Keras's KeyError does ("Failed to
 * format this callback filepath"). mode "auto" (max when the monitor's name holds "acc",
 * else min, Keras's rule), "min", "max"; save_freq 0 = "epoch", else every save_freq
 * batches, counted as Keras counts them with steps_per_execution > 1 (each batch-end hook
 * adds the batches since the last one; a save when the count reaches save_freq, which then
 * restarts from 0, so saves fall at execution ends). save_best_only saves only when the
 * monitor improves on the best so far (strictly: Keras's np.less / np.greater; a missing
 * monitor skips the save, as Keras warns and skips).
 * Where tpusim differs: the formatted path is a checkpoint directory (checkpoint.h's
 * model_dir) that receives ckpt-<global step>.safetensors and its index, keeping one save
 * (a later save to the same path replaces it, as Keras overwrites the file). It holds every
 * param the estimator has, optimizer state included (tpu_estimator_param_info), so that
 * `tpusim evaluate --model-dir` and a later run's model_dir take it as it is. */
struct tpu_model_checkpoint_args {
    const char *filepath;
    const char *monitor;     /* default "val_loss" */
    bool save_best_only;
    const char *mode;        /* default "auto" */
    uint64_t save_freq;      /* 0: "epoch" */
    FILE *verbose_out;       /* Keras's verbose=1 messages ("\nEpoch 1: saving model to
                                ...") go here; NULL: verbose 0 */
};
int tpu_callback_model_checkpoint(const struct tpu_model_checkpoint_args *a,
                                  struct tpu_callback *cb, struct tpu_diag *d);

/* EarlyStopping(monitor, min_delta, patience, verbose, mode, baseline, restore_best_weights,
 * start_from_epoch), Keras 2.15's rules: at each epoch end from start_from_epoch on (earlier
 * epochs, and epochs whose logs lack the monitor, are not counted), wait grows by one; an
 * improvement (current - min_delta beats the best: less, or greater in max mode, min_delta
 * taken as |min_delta| toward the better side) makes it the best and resets wait to 0 when
 * it also beats the baseline (or there is none); otherwise, once wait >= patience and the
 * epoch is not the first (index 0), fit is stopped (tpu_keras_stop_training) and, with
 * restore_best_weights, the weights of the best epoch (or of the first counted epoch when
 * none improved) are written back. mode "auto": max when the monitor ends in "acc",
 * "accuracy" or "auc", else min. The weights it keeps and restores are the layers' params
 * (Keras's model.get_weights(): no optimizer state), held on the host. */
struct tpu_early_stopping_args {
    const char *monitor;     /* default "val_loss" */
    double min_delta;
    uint64_t patience;
    const char *mode;        /* default "auto" */
    double baseline;         /* NaN: none */
    bool restore_best_weights;
    uint64_t start_from_epoch;
    FILE *verbose_out;       /* Keras's verbose=1 messages ("Epoch 5: early stopping");
                                NULL: verbose 0 */
};
int tpu_callback_early_stopping(const struct tpu_early_stopping_args *a,
                                struct tpu_callback *cb, struct tpu_diag *d);

/* CSVLogger(filename, separator=',', append=False), as Keras 2.15 writes it with Python's
 * csv module (excel dialect: "\r\n" line ends, a field quoted when it holds the separator,
 * a quote or a line end): at the first epoch end the columns are "epoch" then the log names
 * sorted (byte order), followed, when none starts with "val_", by "val_<name>" for each; the
 * header is written unless appending to a file that already has a first line; each row is
 * the epoch (0-based) and each column's value (Python's repr of a float: the shortest
 * digits that read back exactly, "inf", "nan"), "NA" where the logs lack it. The file is
 * opened at on_train_begin (truncated, or appended to) and closed at on_train_end;
 * each row is flushed. */
int tpu_callback_csv_logger(const char *filename, char separator, bool append,
                            struct tpu_callback *cb, struct tpu_diag *d);

/* LearningRateScheduler(schedule, verbose): at each epoch's begin, lr = schedule(epoch, lr)
 * (the Keras signature: the epoch index and the rate in force) set with
 * tpu_keras_set_learning_rate; with verbose_out, Keras's "\nEpoch 3: LearningRateScheduler
 * setting learning rate to 0.0005." (the rate as the shortest decimal that reads back as the
 * same f32). At each epoch end it adds "lr" (the rate in force) to the logs, as Keras does.
 * A schedule returning a rate that is not finite fails the epoch with the epoch and
 * the value. The model must be compiled with the host schedule (compile's
 * optimizer.schedule TPU_SCHEDULE_HOST). */
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
    /* 0, 1, 2; -1 "auto": 1 when out_is_tty, else 2. This differs from Keras 2.15, whose
     * 'auto' is 1 (unless absl logging or a ParameterServerStrategy): a progress bar's
     * carriage-return updates written into a pipe or a file are unreadable, so off a
     * terminal tpusim prints a line per epoch. */
    int verbose;
    FILE *out;                          /* where verbose writes (NULL: nothing) */
    bool out_is_tty;
    const struct tpu_callback *callbacks;
    size_t n_callbacks;
    double validation_split;            /* [0, 1): the last fraction of the arrays */
    struct tpu_keras_data validation_data; /* or arrays/input of its own (overrides split) */
    bool shuffle;                       /* default true */
    const float *class_weight;          /* [n_classes] (one per class) or NULL */
    uint32_t n_class_weight;
    uint64_t initial_epoch;
    uint64_t steps_per_epoch;           /* 0: the whole arrays (ceil(n / batch)), or until the
                                           input ends */
    uint64_t validation_steps;          /* 0: the whole validation data */
    uint32_t validation_batch_size;     /* 0: batch_size */
    uint32_t n_validation_freq;         /* 0 or 1 entry (and not validation_freq_is_list):
                                           every validation_freq[0] epochs (default 1);
                                           else the epochs (1-based) listed, in any order,
                                           repeats allowed (Keras: epoch in the container) */
    uint64_t validation_freq[64];
    bool validation_freq_is_list;       /* Keras's list form even for one entry: [3] is
                                           epoch 3 only, where the integer 3 is every third */
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
 * last partial batch padded and masked). steps above the data's batches evaluates what
 * there is and returns 0 with Keras's warning in d->msg ("warning: Your input ran out of
 * data; ..."), as fit reports its own (tpu_history.warning). */
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
