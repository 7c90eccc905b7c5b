/* Internal interface between the files of the Keras-style layer (include/tpusim/keras.h):
 * keras.c (the model, compile, logs, the estimator's hooks and the callback dispatch),
 * arrays.c (the input function over arrays), fit.c and evaluate.c. Not part of the public
 * API. */
#ifndef TPUSIM_HOST_KERAS_INT_H
#define TPUSIM_HOST_KERAS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/keras.h"

/* The input function over arrays (arrays.c), one pass (an epoch, an evaluation, a
 * prediction, one batch) at a time. Step s of the pass covers rows [s*G, min(s*G+G, n)) of
 * the order `perm` (NULL: the arrays' own order), G the mode's global batch (given to
 * start()); a call of the step gets its slice: the step's calls are made one at a time in
 * the shard plan's order, each of `batch` rows (G / batch calls per step), so call k of a
 * step takes rows [s*G + k*batch, +batch) of it. Training with `weighted` also fills the
 * row weights (the infeed tensor after the labels, or after the targets and mask):
 *   w_i = sample_weight_i * class_weight[y_i] / (real rows of the global step * scale)
 * (scale: the replicas in BROADCAST, where every replica sees the whole global batch and
 * the gradients are summed over them; else 1), 0 for padding rows. */
struct tpu__keras_arrays {
    struct tpu_input input;          /* ctx points here */
    const struct tpu_dataset *ds;    /* borrowed (possibly a view into a larger set) */
    const float *sample_weight;      /* [ds->n_examples] or NULL */
    const float *class_weight;       /* [n_class_weight] or NULL */
    uint32_t n_class_weight;
    const uint32_t *perm;            /* [ds->n_examples] or NULL */
    bool weighted;                   /* training infeeds row weights */
    uint32_t scale;                  /* >= 1 */
    uint32_t global_batch;           /* from start() */
    uint64_t calls;                  /* calls since start() */
    /* fit's stream (tpu__keras_arrays_stream): the steps of n_passes passes, one after
     * another across start() calls, as Keras's repeat(epochs) over the batched arrays;
     * stream_base is the stream's step at start() (fit sets it before each epoch). With
     * shuffle_perm, pass p's order is tpu_dataset_shuffle(shuffle_perm, n, seed,
     * first_epoch + p), made when a step of pass p is first read after another pass's. */
    uint64_t n_passes;               /* 1 unless streamed */
    uint64_t stream_base;
    uint32_t *shuffle_perm;          /* == perm, or NULL: no reshuffle */
    uint64_t seed, first_epoch;
    uint64_t perm_pass;              /* the pass perm holds (UINT64_MAX: none yet) */
};

/* Makes a a stream of n_passes passes (fit on arrays); perm, if not NULL, is reshuffled
 * per pass (see above) and stays owned by the caller. */
void tpu__keras_arrays_stream(struct tpu__keras_arrays *a, uint64_t n_passes, uint32_t *perm,
                              uint64_t seed, uint64_t first_epoch);

/* Makes perm hold pass `pass`'s order (a no-op without shuffle_perm). */
void tpu__keras_arrays_use_pass(struct tpu__keras_arrays *a, uint64_t pass);

void tpu__keras_arrays_init(struct tpu__keras_arrays *a, const struct tpu_dataset *ds,
                            const float *sample_weight, const float *class_weight,
                            uint32_t n_class_weight, const uint32_t *perm);

/* The weight of example i before the division by the step's rows: sample_weight_i times
 * class_weight[y_i] (1 for what is not given). */
double tpu__keras_example_weight(const struct tpu__keras_arrays *a, uint32_t i);

/* A view of rows [first, first + n) of ds: the same buffers, not owned (never free it). */
void tpu__keras_dataset_view(const struct tpu_dataset *ds, uint32_t first, uint32_t n,
                             struct tpu_dataset *view);

/* What a train, evaluate or predict call of the estimator reports to the callbacks through
 * the estimator's hooks (keras.c): the running sums over the pass's loops and the logs made
 * from them. */
struct tpu__keras_run {
    enum tpu_mode mode;
    const struct tpu_callback *cbs;
    size_t n_cbs;
    /* sums over the loops of the pass so far */
    uint64_t steps, real;
    double loss_sum, correct;
    /* the sum of the example weights of steps [0, s), s = 0 .. n_steps (NULL: no weights;
     * the loss-valued metrics are then the loss) */
    const double *wsum;
    uint64_t n_wsum;
    struct tpu_logs logs;           /* the running logs after the last loop */
    uint64_t known_steps;           /* the pass's batches when known (arrays, or steps
                                       given), else 0: a launch that the estimator makes
                                       only to find the input's end gets no batch begin */
    bool stop_at_batch;             /* stop_training was set at a batch end: the hook
                                       stopped the pass (not an error) */
};

struct tpu_keras_model {
    struct tpu_device *dev;         /* borrowed */
    const struct tpu_net *net;      /* borrowed */
    struct tpu_keras_compile c;     /* c.optimizer is the spec the net model reads */
    enum tpu_loss loss;
    uint32_t outputs;               /* classes (softmax) or values per example (MSE) */
    struct tpu_shape input;
    struct tpu_model model;
    struct tpu_estimator *est;
    struct tpu_run_config cfg;      /* the estimator's current configuration */
    uint32_t n_replicas;
    bool stop_training;
    double seconds;                 /* the simulated clock (tpu_keras_model_seconds) */
    struct tpu__keras_run *run;     /* the call in progress (NULL between calls) */
};

/* Sets the estimator's batch sizes, loop size, sample_weights and train_counts for the next
 * call (tpu_estimator_reconfigure when anything changed). spe 0: steps_per_execution as
 * compiled (a count, or auto). */
int tpu__keras_configure(struct tpu_keras_model *m, enum tpu_mode mode, uint32_t global_batch,
                         bool sample_weights, uint64_t spe, struct tpu_diag *d);

/* The global batch `want` rounded up to what the mode's input splits over (the replicas, or
 * the hosts for per-host evaluation); BROADCAST training takes any batch. */
uint32_t tpu__keras_batch_unit(const struct tpu_keras_model *m, enum tpu_mode mode);

/* Fills run->logs from its sums: "loss" and each compiled metric the sums give (mae comes
 * from predictions: evaluate.c adds it). */
void tpu__keras_run_logs(const struct tpu_keras_model *m, struct tpu__keras_run *run);

/* Callback dispatch: each callback's hook of that kind, in order; the first failure stops
 * with its code (and its message in d, or a sentence naming the hook). */
enum tpu__keras_hook {
    TPU__CB_TRAIN_BEGIN, TPU__CB_TRAIN_END, TPU__CB_EPOCH_BEGIN, TPU__CB_EPOCH_END,
    TPU__CB_TRAIN_BATCH_BEGIN, TPU__CB_TRAIN_BATCH_END, TPU__CB_TEST_BEGIN, TPU__CB_TEST_END,
    TPU__CB_TEST_BATCH_BEGIN, TPU__CB_TEST_BATCH_END, TPU__CB_PREDICT_BEGIN,
    TPU__CB_PREDICT_END, TPU__CB_PREDICT_BATCH_BEGIN, TPU__CB_PREDICT_BATCH_END
};
int tpu__keras_callbacks(struct tpu_keras_model *m, const struct tpu_callback *cbs, size_t n,
                         enum tpu__keras_hook hook, uint64_t index, struct tpu_logs *logs,
                         struct tpu_diag *d);
/* The callbacks of a fit, evaluate or predict call: the user's, then the progress bar the
 * call adds by itself for verbose 1 and 2 with an `out` (Keras appends its ProgbarLogger
 * after the user's callbacks). all[0 .. n_user) are the user's. */
struct tpu__keras_cbs {
    struct tpu_callback *all;       /* [n], malloc'd */
    size_t n, n_user;
    struct tpu_callback bar;        /* all[n_user] when has_bar */
    bool has_bar;
};
int tpu__keras_cbs_make(const struct tpu_callback *user, size_t n_user, int verbose,
                        FILE *out, bool is_tty, struct tpu__keras_cbs *l, struct tpu_diag *d);
void tpu__keras_cbs_free(struct tpu__keras_cbs *l);

/* Keras's set_params on each callback (those that have one). */
void tpu__keras_set_params(const struct tpu_callback *cbs, size_t n, int verbose,
                           uint64_t epochs, uint64_t steps);
/* verbose -1 ('auto'): 1 on a terminal, else 2 */
int tpu__keras_verbose(int verbose, bool is_tty);

/* Checks a struct tpu_keras_data for `what` ("fit", "evaluate", "validation_data"): exactly
 * one of arrays and input, the arrays' shape and kind against the model. */
int tpu__keras_check_data(const struct tpu_keras_model *m, const struct tpu_keras_data *data,
                          const char *what, struct tpu_diag *d);

/* Keras's DataHandler._validate_data_handler, for fit, its validation, evaluate and
 * predict: with steps_per_execution > 1 (not 'auto'), an input function of unknown size
 * needs its steps (`steps_arg`, named in the message; `what` names the data). evaluate.c. */
int tpu__keras_check_known_size(const struct tpu_keras_model *m,
                                const struct tpu_keras_data *data, uint64_t steps,
                                const char *what, const char *steps_arg, struct tpu_diag *d);

/* Keras 2.15's warning (data_adapter.py, DataHandler.catch_stop_iteration), for training
 * (steps_per_epoch * epochs batches) and evaluation (steps * 1); one %llu: the batches. */
#define TPU__KERAS_RAN_OUT                                                                    \
    "Your input ran out of data; interrupting training. Make sure that your dataset or "     \
    "generator can generate at least `steps_per_epoch * epochs` batches (in this case, %llu " \
    "batches). You may need to use the repeat() function when building your dataset."

/* An evaluation over `data` (arrays or an input) with batch_size and steps, reporting to
 * the callbacks' test hooks (evaluate, and validation inside fit): fills *logs with "loss"
 * and the metrics (mae from a prediction pass over arrays). With steps given and less
 * data, it runs what there is and writes Keras's ran-out warning (TPU__KERAS_RAN_OUT with
 * steps) into warning[warning_size], if warning is not NULL; else it leaves it as it is.
 * evaluate.c. */
int tpu__keras_evaluate_data(struct tpu_keras_model *m, const struct tpu_keras_data *data,
                             uint32_t batch_size, uint64_t steps,
                             const struct tpu_callback *cbs, size_t n_cbs,
                             struct tpu_logs *logs, char *warning, size_t warning_size,
                             struct tpu_diag *d);

#endif
