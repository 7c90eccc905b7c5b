/* The lowering's shared state and helpers (net_lower.c builds the program around the
 * layers: params, loss, gradient reduction, optimizers, the loop; net_lower_layers.c lowers
 * each layer's forward and backward ops). Private to host/models/. */
#ifndef TPUSIM_HOST_MODELS_NET_LOWER_INT_H
#define TPUSIM_HOST_MODELS_NET_LOWER_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/builder.h"
#include "models/net_int.h"

#define N TPU_NO_BUF

/* Per layer (= per tensor) state of one lowering. */
struct lw {
    uint32_t y;             /* the tensor's buffer */
    uint32_t rows;          /* the input only: its [B*h*w][c] view */
    uint32_t dy;            /* its gradient (training) */
    bool dy_written;
    uint32_t n_contrib;
    bool live;              /* the loss depends on it */
    bool need_grad;         /* a param lies at or before it */
    uint32_t p[TPU__P_COUNT];    /* params (N where the layer has none) */
    uint32_t g[TPU__P_COUNT];    /* their gradients (trainable ones) */
    uint32_t st[TPU__P_COUNT][2]; /* their optimizer state */
    uint32_t mask, xhat, inv; /* forward values the backward reads */
};

struct lower {
    struct tpu__builder b;
    const struct tpu_net *net;
    const struct tpu_train_spec *spec;
    enum tpu_mode mode;
    bool train;
    uint32_t B, G;        /* examples per replica, the global batch */
    uint32_t R, P;        /* replicas, cores per replica */
    struct tpu_model_program *r;
    struct lw *lw;
    uint32_t labels, targets, mask; /* infeed besides x */
};

/* (net_lower_layers.c) Layer t's rows when batched: B*h*w. */
uint64_t tpu__nl_rows_of(const struct lower *s, uint32_t t);
/* A f32 temp "<layer>.<what>" [rows][cols]. */
uint32_t tpu__nl_tmp(struct lower *s, uint32_t t, const char *what, uint64_t rows,
                     uint32_t cols);
/* Appends an op with outputs o0, o1 and inputs i0, i1 (N for none); at may be NULL. */
void tpu__nl_op(struct lower *s, enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t i0,
                uint32_t i1, const struct tpu_op_attrs *at);
struct tpu_op_attrs tpu__nl_attrs0(void); /* every attribute zero */
/* y = all_reduce(y) in place, sum or mean over the replicas. */
void tpu__nl_all_reduce(struct lower *s, uint32_t y, enum tpu_reduce_kind k);
/* Tensor t's gradient buffer "<layer>.dy", declared on first use. */
uint32_t tpu__nl_dy_buf(struct lower *s, uint32_t t);
/* Whether a layer reads its input as an image in any 2-D shape (the window ops and
 * reshape), rather than as rows of pixels. */
bool tpu__nl_reads_image(const struct tpu__net_layer *L);
/* Layer i's forward ops, and (training) its backward ops: the formulas are in net_lower.c's
 * opening comment. */
void tpu__nl_forward(struct lower *s, uint32_t i);
void tpu__nl_backward(struct lower *s, uint32_t i);

#endif
