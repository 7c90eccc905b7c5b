/* A small device-program builder shared by the models that lower themselves to programs
 * (mlp.c, net_lower.c): buffers and ops appended with the first error kept, so a lowering
 * reads as a list of ops and checks once at the end. Optionally each op is tagged with a
 * caller-chosen number (the net's layer index, for tpu_net_build's op_layer). Not part of
 * the public API. */
#ifndef TPUSIM_HOST_MODELS_BUILDER_H
#define TPUSIM_HOST_MODELS_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/program.h"

/* Program-building state: the first error sticks, later calls do nothing. */
struct tpu__builder {
    struct tpu_program *p;
    int rc;
    struct tpu_diag *d;
    /* tags: when `tagging`, tags[i] is `tag` at the time op i was added (malloc'd, grown by
       tpu__b_op; the caller frees it) */
    bool tagging;
    uint32_t tag;
    uint32_t *tags;
    size_t n_tags, cap_tags;
};

/* Adds a buffer and gives its id (TPU_NO_BUF after an error). */
uint32_t tpu__b_buf(struct tpu__builder *b, const char *name, enum tpu_dtype t,
                    enum tpu_buf_kind k, uint32_t rows, uint32_t cols);
/* A float buffer named prefix + i ("w3"). */
uint32_t tpu__b_bufi(struct tpu__builder *b, const char *prefix, int i, enum tpu_buf_kind k,
                     uint32_t rows, uint32_t cols);
/* Appends an op with outputs o0..o2 and inputs i0, i1 (TPU_NO_BUF where unused) and the
 * attributes (NULL: none; a matmul's passes 0 means the default, 1). */
void tpu__b_op(struct tpu__builder *b, enum tpu_opcode code, uint32_t o0, uint32_t o1,
               uint32_t o2, uint32_t i0, uint32_t i1, const struct tpu_op_attrs *attrs);
/* Appends a filled op (copied), for ops the short form above cannot state. */
void tpu__b_add(struct tpu__builder *b, const struct tpu_op *o);
/* Opens program `name` with its loop variables "iterations" and "step". A nonzero return
 * (b->rc) means nothing is left to free. */
int tpu__b_start(struct tpu__builder *b, const char *name, uint32_t *var_iterations,
                 uint32_t *var_step);
/* Closes the loop over var_iterations and hands the program over through *prog, which
 * owns it; on an error the program is freed and b->rc returned. */
int tpu__b_finish(struct tpu__builder *b, uint32_t var_iterations, struct tpu_program **prog);

/* For the MLP programs of mlp.c and quantize.c, which run every core of a replica on the
 * whole replica batch: refuses input partition dims other than None (or, on one core per
 * replica, a product of 1: the whole tensor), and a batch of 2^32 examples or more. The
 * layer graphs (tpu_net_model, and the MLP's own on several cores per replica) partition.
 * `model` names the model in the message. */
struct tpu_build_shape;
int tpu__mlp_check_shape(const struct tpu_build_shape *shape, const char *model,
                         struct tpu_diag *d);

#endif
