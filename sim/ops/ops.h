/* The values of the device program's local ops (everything a core computes on its own:
 * matmul, vector ops, reductions, loss, optimizers, variables). Collectives, infeed and
 * outfeed, and loops are the chip's business (chip_exec.c) since they involve other cores or
 * the host. Which function computes an op is the op table's `sem` column (program.h).
 * Internal to sim/. */
#ifndef TPUSIM_SIM_OPS_H
#define TPUSIM_SIM_OPS_H

#include <stdint.h>

#include "kernels/scratch.h"
#include "tpusim/error.h"
#include "tpusim/program.h"

/* One buffer's memory on one core: [rows][cols] row-major of dtype. */
struct tpu__bufmem {
    void *data;
    enum tpu_dtype dtype;
    uint32_t rows, cols;
};

/* Computes one local op on one core. `bufs` is indexed by buffer id (the op's attrs and
 * buffer ids index into it); `vars` by variable id. `tile_rows` is the matrix unit's R (the
 * accumulation order of matmul). `n_threads` >= 1 host threads for the matmul kernel.
 * `scratch` is the core's arena for working memory (scratch.h), reused from op to op so
 * that ops do not allocate once it has grown; NULL makes each op allocate and free its own.
 * The program is verified, so shapes are right (they are checked again cheaply: TPU_ESHAPE).
 * Returns 0; TPU_ERANGE for bad data the verifier cannot see (a label out of range, Adam's
 * or a schedule's step below 1, a variable overflowing); TPU_ENOMEM; TPU_ETHREAD; or
 * TPU_EINVAL for an op that is not local (infeed, outfeed, collectives, loops). */
int tpu__op_compute(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                    uint32_t tile_rows, unsigned n_threads, struct tpu__scratch *scratch,
                    struct tpu_diag *d);
/* tpu__op_compute on the core of replica `replica` (dropout_mask offsets its elements'
 * indices by replica * their count; the chip passes the core's replica, so the cores of one
 * replica draw one mask).
 * tpu__op_compute is this with replica 0. */
int tpu__op_compute_on(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                       uint32_t replica, uint32_t tile_rows, unsigned n_threads,
                       struct tpu__scratch *scratch, struct tpu_diag *d);
/* tpu__op_compute_on on logical core `part` of the replica (the row-partitioned ops of
 * program.h: a window with parts >= 2, row_mask, dropout_mask with a window, compute that
 * core's rows); tpu__op_compute_on is this with part 0. */
int tpu__op_compute_core(const struct tpu_op *op, struct tpu__bufmem *bufs, int64_t *vars,
                         uint32_t replica, uint32_t part, uint32_t tile_rows,
                         unsigned n_threads, struct tpu__scratch *scratch, struct tpu_diag *d);

/* The halo exchange's values over the P = w->parts cores of one replica (ops_part.c;
 * program.h defines them): x[k] and y[k] the local and ext images of logical core k, of N
 * examples and `esize`-byte elements (halo), dy[k] and dx[k] the f32 ext and local images
 * (halo_grad). Every pointer is core k's own buffer; the sources are only read. */
void tpu__halo(const struct tpu_window *w, size_t n, size_t esize, const void *const *x,
               void *const *y);
void tpu__halo_grad(const struct tpu_window *w, size_t n, const float *const *dy,
                    float *const *dx);
/* The rows of logical core dst's ext image (per example) that logical core src holds:
 * global rows in [0, h) within both dst's ext window [r0(dst), r0(dst) + E) and src's rows
 * [src*hc, src*hc + hc). A halo moves this many rows from src to dst, a halo_grad as many
 * from dst to src. */
uint64_t tpu__halo_rows(const struct tpu_window *w, uint32_t dst, uint32_t src);

#endif
