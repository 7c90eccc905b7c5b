/* The error table's functions and diagnostics. */
#include <stdarg.h>
#include <stdio.h>

#include "tpusim/error.h"
#include "util.h"

const char *tpu_err_name(int code)
{
    switch (code) {
    case TPU_OK:
        return "TPU_OK";
#define TPU__ERR_NAME(name, value, msg)                                                        \
    case (value):                                                                              \
        return "TPU_E" #name;
        TPU_ERROR_TABLE(TPU__ERR_NAME)
#undef TPU__ERR_NAME
    }
    return "TPU_E?";
}

const char *tpu_strerror(int code)
{
    switch (code) {
    case TPU_OK:
        return "success";
#define TPU__ERR_MSG(name, value, msg)                                                         \
    case (value):                                                                              \
        return msg;
        TPU_ERROR_TABLE(TPU__ERR_MSG)
#undef TPU__ERR_MSG
    }
    return "unknown error";
}

void tpu_diag_clear(struct tpu_diag *d)
{
    if (d) {
        d->code = 0;
        d->msg[0] = '\0';
    }
}

int tpu__fail(struct tpu_diag *d, int code, const char *fmt, ...)
{
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->msg, sizeof d->msg, fmt, ap);
        va_end(ap);
        d->code = code;
    }
    return code;
}
