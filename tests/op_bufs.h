/* The buffers the op-level tests hand tpu__op_compute: up to NB, indexed by id, each with
 * its own zeroed memory (one element more than rows * cols). Include after <cmocka.h> and
 * "ops/ops.h". */
#ifndef TPUSIM_TESTS_OP_BUFS_H
#define TPUSIM_TESTS_OP_BUFS_H

#include <stdint.h>
#include <stdlib.h>

#include "tpusim/dtype.h"

#define NB 8
struct bufs {
    struct tpu__bufmem b[NB];
};

/* Buffer id: rows x cols of dtype t, zeroed; returns its memory. */
static inline void *bset(struct bufs *s, uint32_t id, enum tpu_dtype t, uint32_t rows,
                         uint32_t cols)
{
    free(s->b[id].data);
    s->b[id].data = calloc((size_t)rows * cols + 1, tpu_dtype_bytes(t));
    assert_non_null(s->b[id].data);
    s->b[id].dtype = t;
    s->b[id].rows = rows;
    s->b[id].cols = cols;
    return s->b[id].data;
}

static inline void bfree(struct bufs *s)
{
    for (int i = 0; i < NB; i++) {
        free(s->b[i].data);
        s->b[i].data = NULL;
    }
}

#endif
