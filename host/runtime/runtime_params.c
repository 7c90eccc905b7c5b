/* The list of the params an estimator holds (runtime.h's tpu_estimator_n_params and
 * tpu_estimator_param_info): what a caller that saves or restores the whole state itself
 * (the Keras-style ModelCheckpoint and EarlyStopping) walks with read_param and write_param.
 * It reads the host copies' names and shapes only, never their values. */
#include <stddef.h>
#include <stdint.h>

#include "runtime_int.h"
#include "util.h"
#include "tpusim/runtime.h"

size_t tpu_estimator_n_params(const struct tpu_estimator *e)
{
    return e->have_params && !e->timing_only ? e->n_params : 0;
}

int tpu_estimator_param_info(const struct tpu_estimator *e, size_t i, const char **name,
                             uint32_t *rows, uint32_t *cols, struct tpu_diag *d)
{
    const size_t n = tpu_estimator_n_params(e);
    if (i >= n)
        return tpu__fail(d, TPU_ERANGE, "param index %zu: the estimator holds %zu param%s "
                         "(0 to %zu)%s", i, n, n == 1 ? "" : "s", n ? n - 1 : 0,
                         n ? "; give one of those"
                           : "; train, evaluate or predict first (they initialize or restore "
                             "them)");
    if (name)
        *name = e->params[i].name;
    if (rows)
        *rows = e->params[i].rows;
    if (cols)
        *cols = e->params[i].cols;
    return 0;
}
