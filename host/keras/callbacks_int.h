/* Internal interface of the built-in Keras callbacks (host/keras/callbacks_*.c): the
 * helpers they share. Not part of the public API; keras.h documents the callbacks. */
#ifndef TPUSIM_KERAS_CALLBACKS_INT_H
#define TPUSIM_KERAS_CALLBACKS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/keras.h"

/* The index of `name` in the logs, or -1 (a NaN value is present; tpu_logs_get cannot tell). */
int tpu__logs_find(const struct tpu_logs *l, const char *name);

/* Python's repr of a float into buf (the shortest digits that read back as the same double;
 * fixed notation for 1e-4 <= |v| < 1e16, else "1e-05" style; "inf", "-inf", "nan"). With
 * as_f32, the shortest digits that read back as the same f32 (numpy's float32 str). */
const char *tpu__py_repr(double v, bool as_f32, char *buf, size_t n);

/* Formats a ModelCheckpoint filepath as Python's str.format(epoch=epoch + 1, batch=batch + 1,
 * **logs) does for the fields keras.h lists (batch < 0: no batch field, as at an epoch end).
 * Fails with Keras's "Failed to format this callback filepath" sentence and the fix. With
 * logs NULL it only checks the syntax (any field name accepted). */
int tpu__format_filepath(const char *fmt, uint64_t epoch, int64_t batch,
                         const struct tpu_logs *logs, char *out, size_t cap, struct tpu_diag *d);

/* A copy of the params of a Keras model's estimator, on the host: every param (a checkpoint)
 * or the weights only (Keras's get_weights: no optimizer state). */
struct tpu__param_set {
    size_t n;
    char (*name)[48];
    uint32_t *rows, *cols;
    float **data;
};
int tpu__param_set_read(struct tpu_keras_model *m, bool weights_only, struct tpu__param_set *out,
                        struct tpu_diag *d);
/* Writes every param of the set back (set_weights). */
int tpu__param_set_write(struct tpu_keras_model *m, const struct tpu__param_set *s,
                         struct tpu_diag *d);
void tpu__param_set_free(struct tpu__param_set *s);
/* Whether a param name is optimizer state (<param>.vel, <param>.m, <param>.v: net.h). */
bool tpu__param_is_slot(const char *name);

#endif
