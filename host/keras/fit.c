/* fit (include/tpusim/keras.h): Keras 2.15's Model.fit over the estimator. One training loop
 * underneath: each epoch is one tpu_estimator_train call of the epoch's steps, each
 * execution one of the estimator's loops (iterations_per_loop = steps_per_execution, or the
 * Keras tuner with 'auto'), so an execution never crosses an epoch boundary and the last one
 * of an epoch is cut to the batches left, as Keras's _truncate_execution_to_epoch does. The
 * batch callbacks come from the estimator's hooks (keras.c); validation is an evaluation
 * (evaluate.c) at the end of the epochs validation_freq selects.
 *
 * The arrays' input (arrays.c): validation_split takes the last fraction of the arrays
 * before any shuffling; the training data is one stream of (epochs - initial_epoch) passes,
 * as Keras's repeat(epochs), and an epoch continues it where the last one stopped; pass p's
 * order is tpu_dataset_shuffle(seed, initial_epoch + p) (identity without shuffle), so
 * without steps_per_epoch an epoch is a pass, epoch e in order e; a partial last batch is trained on its real rows, which takes the
 * weighted training program (the row weights carry 1 / real rows); so do sample_weight and
 * class_weight. Otherwise the unweighted program runs, the one an estimator-style run uses,
 * so fit and a direct estimator run of the same steps give the same params bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/keras_int.h"
#include "util.h"

#define RAN_OUT TPU__KERAS_RAN_OUT

/* An input function's training epoch of unknown size runs until the input ends. */
#define UNKNOWN_STEPS (UINT64_C(1) << 60)

void tpu_keras_fit_default(struct tpu_keras_fit *f)
{
    memset(f, 0, sizeof *f);
    f->batch_size = 32;
    f->epochs = 1;
    f->verbose = -1;
    f->shuffle = true;
}

static bool has_data(const struct tpu_keras_data *data)
{
    return data->arrays || data->input;
}

static int check_fit(const struct tpu_keras_model *m, const struct tpu_keras_fit *f,
                     uint32_t batch, struct tpu_diag *d)
{
    int rc = tpu__keras_check_data(m, &f->data, "fit", d);
    if (rc)
        return rc;
    const uint32_t unit = tpu__keras_batch_unit(m, TPU_MODE_TRAIN);
    if (batch % unit)
        return tpu__fail(d, TPU_EINVAL, "batch_size %u does not split over the %u replicas "
                         "the global batch is divided among; give a multiple of %u (e.g. %u)",
                         batch, unit, unit, (batch / unit + 1) * unit);
    if (f->verbose < -1 || f->verbose > 2)
        return tpu__fail(d, TPU_EINVAL, "verbose %d is not one of -1 ('auto'), 0 (silent), 1 "
                         "(a progress bar) or 2 (a line per epoch)", f->verbose);
    if (f->n_callbacks && !f->callbacks)
        return tpu__fail(d, TPU_EINVAL, "n_callbacks is %zu but callbacks is NULL; give the "
                         "array of callbacks or 0", f->n_callbacks);
    if (!(f->validation_split >= 0.0 && f->validation_split < 1.0))
        return tpu__fail(d, TPU_EINVAL, "`validation_split` must be between 0 and 1 (the "
                         "fraction of the arrays held out); received %g",
                         f->validation_split);
    if (f->validation_split > 0 && !f->data.arrays && !has_data(&f->validation_data))
        return tpu__fail(d, TPU_EINVAL, "`validation_split` is only supported for arrays (it "
                         "takes the last examples of them); the data is an input function: "
                         "give validation_data instead");
    if (has_data(&f->validation_data)) {
        if ((rc = tpu__keras_check_data(m, &f->validation_data, "validation_data", d)))
            return rc;
        if (f->validation_data.sample_weight)
            return tpu__fail(d, TPU_EINVAL, "validation_data.sample_weight is not supported: "
                             "validation reports the unweighted loss and metrics; drop it");
    }
    if (f->validation_batch_size % tpu__keras_batch_unit(m, TPU_MODE_EVAL))
        return tpu__fail(d, TPU_EINVAL, "validation_batch_size %u does not split over the %u "
                         "replicas; give a multiple of %u (or 0: batch_size)",
                         f->validation_batch_size, tpu__keras_batch_unit(m, TPU_MODE_EVAL),
                         tpu__keras_batch_unit(m, TPU_MODE_EVAL));
    if (f->n_validation_freq > 64)
        return tpu__fail(d, TPU_EINVAL, "n_validation_freq %u is above 64, the entries "
                         "validation_freq holds", f->n_validation_freq);
    for (uint32_t i = 0; i < f->n_validation_freq; i++)
        if (f->validation_freq[i] < 1)
            return tpu__fail(d, TPU_EINVAL, "`validation_freq` can not be less than 1 "
                             "(validation_freq[%u] is 0): give a count of epochs between "
                             "validations, or the 1-based epochs to validate after", i);
    if (f->class_weight) {
        if (m->loss != TPU_LOSS_SOFTMAX_XENT)
            return tpu__fail(d, TPU_EINVAL, "class_weight weighs the examples of each class; "
                             "this model's loss is mean_squared_error, which has no classes: "
                             "use sample_weight");
        if (!f->data.arrays)
            return tpu__fail(d, TPU_EINVAL, "class_weight needs the data as arrays (an input "
                             "function gives no weights); pass arrays or drop class_weight");
        if (f->n_class_weight != m->outputs)
            return tpu__fail(d, TPU_EINVAL, "Expected `class_weight` to have a weight for "
                             "each class from 0 to %u (one less than the number of classes); "
                             "found %u weights", m->outputs - 1, f->n_class_weight);
        for (uint32_t i = 0; i < f->n_class_weight; i++)
            if (!isfinite(f->class_weight[i]) || f->class_weight[i] < 0.0f)
                return tpu__fail(d, TPU_EINVAL, "class_weight[%u] is %g; every class weight "
                                 "must be finite and >= 0", i, (double)f->class_weight[i]);
    } else if (f->n_class_weight) {
        return tpu__fail(d, TPU_EINVAL, "n_class_weight is %u but class_weight is NULL; give "
                         "the weights or 0", f->n_class_weight);
    }
    if ((rc = tpu__keras_check_known_size(m, &f->data, f->steps_per_epoch, "fit's data",
                                          "steps_per_epoch", d)))
        return rc;
    return tpu__keras_check_known_size(m, &f->validation_data, f->validation_steps,
                                       "validation_data", "validation_steps", d);
}

static bool should_validate(const struct tpu_keras_fit *f, uint64_t epoch)
{
    const uint64_t e1 = epoch + 1; /* Keras's one-indexed epoch */
    if (f->n_validation_freq <= 1 && !f->validation_freq_is_list)
        return e1 % (f->n_validation_freq ? f->validation_freq[0] : 1) == 0;
    for (uint32_t i = 0; i < f->n_validation_freq; i++)
        if (f->validation_freq[i] == e1)
            return true;
    return false;
}

/* The state of one fit call. */
struct fit_state {
    struct tpu_dataset train_view, val_view;
    const struct tpu_dataset *train;       /* the training arrays (a view) or NULL */
    struct tpu_keras_data val;             /* the validation data, or none */
    uint32_t *perm;                        /* [n] with shuffle */
    double *wsum;                          /* [n_wsum + 1] with weights */
    uint64_t n_wsum;                       /* an epoch's steps, at most the stream's */
    uint64_t n_batches;                    /* the arrays' batches per pass */
};

int tpu_keras_fit(struct tpu_keras_model *m, const struct tpu_keras_fit *f,
                  struct tpu_history *history, struct tpu_diag *d)
{
    tpu_diag_clear(d);
    if (!m || !f || !history)
        return tpu__fail(d, TPU_EINVAL, "fit needs a model, its arguments and a history to "
                         "fill (one of them is NULL)");
    memset(history, 0, sizeof *history);
    const uint32_t batch = f->batch_size ? f->batch_size : 32;
    int rc = check_fit(m, f, batch, d);
    if (rc)
        return rc;

    struct fit_state s;
    memset(&s, 0, sizeof s);
    /* validation_split: the last examples, before any shuffling (Keras's
     * train_validation_split: split_at = floor(n * (1 - split))) */
    if (f->data.arrays) {
        const uint32_t n = f->data.arrays->n_examples;
        uint32_t n_train = n;
        if (f->validation_split > 0 && !has_data(&f->validation_data)) {
            n_train = (uint32_t)floor((double)n * (1.0 - f->validation_split));
            if (n_train == 0 || n_train == n)
                return tpu__fail(d, TPU_EINVAL, "Training data contains %u samples, which is "
                                 "not sufficient to split it into a validation and training "
                                 "set as specified by `validation_split=%g`. Either provide "
                                 "more data, or a different value for the `validation_split` "
                                 "argument.", n, f->validation_split);
            tpu__keras_dataset_view(f->data.arrays, n_train, n - n_train, &s.val_view);
            s.val.arrays = &s.val_view;
        }
        tpu__keras_dataset_view(f->data.arrays, 0, n_train, &s.train_view);
        s.train = &s.train_view;
        s.n_batches = (n_train + (uint64_t)batch - 1) / batch;
    }
    if (has_data(&f->validation_data))
        s.val = f->validation_data;
    const bool validate = has_data(&s.val);
    const uint32_t val_batch = f->validation_batch_size ? f->validation_batch_size : batch;
    if (validate && val_batch % tpu__keras_batch_unit(m, TPU_MODE_EVAL))
        return tpu__fail(d, TPU_EINVAL, "the validation batch (batch_size %u) does not split "
                         "over the %u replicas; give validation_batch_size, a multiple of %u",
                         val_batch, tpu__keras_batch_unit(m, TPU_MODE_EVAL),
                         tpu__keras_batch_unit(m, TPU_MODE_EVAL));

    /* the epoch's steps: the arrays' batches (or steps_per_epoch), or an input function's
     * steps_per_epoch, else until it ends (its first epoch tells the size, as Keras infers
     * it) */
    uint64_t epoch_steps = f->steps_per_epoch ? f->steps_per_epoch
                           : s.train            ? s.n_batches
                                                : 0;
    bool weighted = false;
    if (s.train)
        weighted = f->data.sample_weight || f->class_weight ||
                   s.train->n_examples % batch != 0;
    const bool use_weights_sum = s.train && (f->data.sample_weight || f->class_weight);
    if (s.train && f->shuffle) {
        s.perm = malloc((size_t)s.train->n_examples * sizeof *s.perm);
        if (!s.perm)
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the shuffle of %u examples",
                             s.train->n_examples);
    }
    const uint64_t n_epochs = f->epochs > f->initial_epoch ? f->epochs - f->initial_epoch : 0;
    if (use_weights_sum) {
        /* an epoch runs at most the stream's n_epochs passes */
        s.n_wsum = epoch_steps;
        if (n_epochs && s.n_wsum / n_epochs >= s.n_batches)
            s.n_wsum = n_epochs * s.n_batches;
        if (s.n_wsum > (SIZE_MAX / sizeof *s.wsum) - 1) {
            free(s.perm);
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the weights' sums of %llu "
                             "steps", (unsigned long long)s.n_wsum);
        }
        s.wsum = malloc((size_t)(s.n_wsum + 1) * sizeof *s.wsum);
        if (!s.wsum) {
            free(s.perm);
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the weights' sums");
        }
    }
    if (n_epochs) {
        history->epochs = calloc(n_epochs, sizeof *history->epochs);
        if (!history->epochs) {
            free(s.perm);
            free(s.wsum);
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the history");
        }
    }
    history->first_epoch = f->initial_epoch;

    struct tpu__keras_cbs cbs;
    if ((rc = tpu__keras_cbs_make(f->callbacks, f->n_callbacks, f->verbose, f->out,
                                  f->out_is_tty, &cbs, d))) {
        free(s.perm);
        free(s.wsum);
        return rc;
    }
    m->stop_training = false;
    /* the arrays' one stream of n_epochs passes (arrays.c) and its position */
    struct tpu__keras_arrays arr;
    uint64_t stream_pos = 0;
    if (s.train) {
        tpu__keras_arrays_init(&arr, s.train, f->data.sample_weight, f->class_weight,
                               f->n_class_weight, s.perm);
        tpu__keras_arrays_stream(&arr, n_epochs, s.perm, m->cfg.seed, f->initial_epoch);
        arr.weighted = weighted;
        arr.scale = m->cfg.per_host_input_for_training == TPU_BROADCAST ? m->n_replicas : 1;
    }
    struct tpu_logs last_logs = {0};
    bool insufficient = false;
    uint64_t inferred = epoch_steps; /* 0: not known yet */
    tpu__keras_set_params(cbs.all, cbs.n, tpu__keras_verbose(f->verbose, f->out_is_tty),
                          f->epochs, epoch_steps);
    rc = tpu__keras_callbacks(m, cbs.all, cbs.n, TPU__CB_TRAIN_BEGIN, 0, NULL, d);
    for (uint64_t epoch = f->initial_epoch; !rc && epoch < f->epochs && !insufficient;
         epoch++) {
        if ((rc = tpu__keras_callbacks(m, cbs.all, cbs.n, TPU__CB_EPOCH_BEGIN,
                                       epoch, NULL, d)))
            break;
        if ((rc = tpu__keras_configure(m, TPU_MODE_TRAIN, batch, weighted, 0, d)))
            break;
        const struct tpu_input *input = f->data.input;
        struct tpu__keras_run run = {.mode = TPU_MODE_TRAIN, .cbs = cbs.all, .n_cbs = cbs.n};
        if (s.train) {
            arr.stream_base = stream_pos;
            input = &arr.input;
            if (s.wsum) {
                /* the weights' sums of this epoch's steps, which may cross passes */
                const uint64_t total = n_epochs * s.n_batches;
                uint64_t k = total - stream_pos < inferred ? total - stream_pos : inferred;
                k = k < s.n_wsum ? k : s.n_wsum;
                s.wsum[0] = 0;
                for (uint64_t st = 0; st < k; st++) {
                    const uint64_t ss = stream_pos + st, step = ss % s.n_batches;
                    tpu__keras_arrays_use_pass(&arr, ss / s.n_batches);
                    double sum = 0;
                    uint64_t end = (step + 1) * batch < s.train->n_examples
                                       ? (step + 1) * batch : s.train->n_examples;
                    for (uint64_t r = step * batch; r < end; r++)
                        sum += tpu__keras_example_weight(&arr, s.perm ? s.perm[r]
                                                                      : (uint32_t)r);
                    s.wsum[st + 1] = s.wsum[st] + sum;
                }
                run.wsum = s.wsum;
                run.n_wsum = k;
            }
        }
        const uint64_t want = inferred ? inferred : UNKNOWN_STEPS;
        const uint64_t before = tpu_estimator_global_step(m->est);
        struct tpu_diag td = {0};
        m->run = &run;
        rc = tpu_estimator_train(m->est, input, want, 0, &td);
        m->run = NULL;
        if (rc == TPU_ECANCELED && run.stop_at_batch)
            rc = 0;
        if (rc) {
            tpu__fail(d, rc, "%s", td.msg);
            break;
        }
        const uint64_t ran = tpu_estimator_global_step(m->est) - before;
        stream_pos += ran;
        if (ran == 0 && inferred && history->n_epochs) {
            /* the input ended at an epoch's start: the warning, and no end hooks for an
             * epoch without a batch (Keras would hand them the previous epoch's logs) */
            insufficient = true;
            snprintf(history->warning, sizeof history->warning, RAN_OUT,
                     (unsigned long long)(n_epochs * inferred));
            break;
        }
        if (ran == 0) {
            rc = tpu__fail(d, TPU_EINVAL, "the input gave no batch in epoch %llu, so there "
                           "are no logs (Keras: Unexpected result of `train_function` (Empty "
                           "logs)); give an input with at least one batch per epoch",
                           (unsigned long long)(epoch + 1));
            break;
        }
        if (!inferred) {
            inferred = ran; /* the first epoch of an input of unknown size sets its size */
        } else if (ran < want && !run.stop_at_batch) {
            insufficient = true;
            snprintf(history->warning, sizeof history->warning, RAN_OUT,
                     (unsigned long long)(n_epochs * inferred));
        }
        struct tpu_logs logs = run.logs;
        if (validate && should_validate(f, epoch)) {
            struct tpu_logs vlogs;
            /* validation that runs out warns as Keras's evaluate does (steps * 1), unless
             * the history holds a warning already */
            char vwarn[sizeof history->warning] = "";
            rc = tpu__keras_evaluate_data(m, &s.val, val_batch, f->validation_steps,
                                          cbs.all, cbs.n, &vlogs, vwarn, sizeof vwarn, d);
            if (!rc && vwarn[0] && !history->warning[0])
                memcpy(history->warning, vwarn, sizeof vwarn);
            if (rc)
                break;
            for (uint32_t i = 0; i < vlogs.n; i++) {
                /* cut to TPU_LOG_NAME_MAX characters (tpu_logs_set's limit) */
                char name[TPU_LOG_NAME_MAX + 5];
                snprintf(name, sizeof name, "val_%s", vlogs.name[i]);
                name[TPU_LOG_NAME_MAX] = '\0';
                tpu_logs_set(&logs, name, vlogs.value[i]);
            }
        }
        /* the user's callbacks may add to the epoch's logs (a LearningRateScheduler's
         * "lr"); the History records them as they leave them, then the progress bar shows
         * them (Keras's order: the user's callbacks, History, ProgbarLogger) */
        if ((rc = tpu__keras_callbacks(m, cbs.all, cbs.n_user, TPU__CB_EPOCH_END, epoch, &logs,
                                       d)))
            break;
        history->epochs[history->n_epochs++] = logs;
        last_logs = logs;
        if ((rc = tpu__keras_callbacks(m, cbs.all + cbs.n_user, cbs.n - cbs.n_user,
                                       TPU__CB_EPOCH_END, epoch, &logs, d)))
            break;
        if (m->stop_training)
            break;
    }
    if (!rc)
        rc = tpu__keras_callbacks(m, cbs.all, cbs.n, TPU__CB_TRAIN_END, 0, &last_logs, d);
    tpu__keras_cbs_free(&cbs);
    free(s.perm);
    free(s.wsum);
    if (!rc && history->warning[0])
        tpu__fail(d, 0, "warning: %s", history->warning);
    return rc;
}
