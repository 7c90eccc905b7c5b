/* The data types' names and sizes (include/tpusim/dtype.h). */
#include "tpusim/dtype.h"

#include <string.h>

#include "tpusim/error.h"

static const struct {
    const char *name;
    size_t bytes;
} dtypes[TPU_DTYPE_COUNT] = {
    [TPU_F32] = {"f32", 4},
    [TPU_BF16] = {"bf16", 2},
    [TPU_INT8] = {"int8", 1},
    [TPU_INT32] = {"int32", 4},
};

const char *tpu_dtype_name(enum tpu_dtype t)
{
    return (unsigned)t < TPU_DTYPE_COUNT ? dtypes[t].name : "unknown";
}

int tpu_dtype_parse(const char *name, enum tpu_dtype *out)
{
    for (unsigned i = 0; name && i < TPU_DTYPE_COUNT; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (enum tpu_dtype)i;
            return 0;
        }
    }
    return TPU_ENOTFOUND;
}

size_t tpu_dtype_bytes(enum tpu_dtype t)
{
    return (unsigned)t < TPU_DTYPE_COUNT ? dtypes[t].bytes : 0;
}
