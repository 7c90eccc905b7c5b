/* tpusim error codes and diagnostics.
 *
 * Every fallible function returns an int status: 0 on success, a negative TPU_E* code on
 * failure. Functions whose failures reach a user also take a `struct tpu_diag *` (may be
 * NULL) and write one sentence into it naming what was wrong, with the value, and what would
 * be right. The error enum, tpu_err_name() and tpu_strerror() come from the one table below,
 * so they cannot disagree. */
#ifndef TPUSIM_ERROR_H
#define TPUSIM_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, generic message) */
#define TPU_ERROR_TABLE(X)                                                                    \
    X(INVAL, -1, "invalid argument")                                                          \
    X(NOMEM, -2, "out of memory")                                                             \
    X(IO, -3, "input/output error")                                                           \
    X(PARSE, -4, "malformed input file")                                                      \
    X(CONFIG, -5, "invalid chip configuration")                                               \
    X(SHAPE, -6, "shape mismatch")                                                            \
    X(RANGE, -7, "value out of range")                                                        \
    X(UNSUPPORTED, -8, "operation not supported by this configuration")                       \
    X(NOTFOUND, -9, "not found")                                                              \
    X(THREAD, -10, "thread error")                                                            \
    X(BACKEND, -11, "backend error")                                                          \
    X(CANCELED, -12, "the run was canceled")                                                  \
    X(TIMEOUT, -13, "timed out")                                                              \
    X(END, -14, "the input ended")                                                            \
    X(BUSY, -15, "the resource is in use")

enum tpu_error {
    TPU_OK = 0,
#define TPU__ERR_ENUM(name, value, msg) TPU_E##name = (value),
    TPU_ERROR_TABLE(TPU__ERR_ENUM)
#undef TPU__ERR_ENUM
};

/* "TPU_EINVAL" for TPU_EINVAL, "TPU_OK" for 0, "TPU_E?" for an unknown code. Static
 * storage. */
const char *tpu_err_name(int code);
/* The generic one-line message for a code. Static storage. */
const char *tpu_strerror(int code);

#define TPU_DIAG_MAX 1024

/* A caller-owned buffer that receives the sentence describing a failure. */
struct tpu_diag {
    int code;               /* the code the failing call returned */
    char msg[TPU_DIAG_MAX]; /* NUL-terminated sentence; empty when code is 0 */
};

/* Clears a diagnostic. Accepts NULL. */
void tpu_diag_clear(struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
