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

/* How a tensor lies over the P cores of a replica (net_lower_part.c's opening comment). With
 * one core per replica every tensor is NL_WHOLE. */
enum nl_part {
    NL_WHOLE = 0, /* every core holds all of it (and computes it alike) */
    NL_ROWS,      /* an image cut by rows: core k holds rows [k*hl, k*hl + hl), zero past h */
    NL_FLAT,      /* the flatten of an NL_ROWS image: core k holds its rows' elements [B][cl] */
    NL_COLS       /* a dense layer's output cut by columns: core k holds [k*cl, k*cl + cl) */
};

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
    /* partitioning (net_lower_part.c) */
    uint8_t part;           /* enum nl_part of the tensor */
    uint32_t hl;            /* NL_ROWS: local image rows ceil(h / P); else the tensor's h */
    uint32_t cl;            /* NL_FLAT, NL_COLS: local columns; else the tensor's c */
    struct tpu_shape img;   /* NL_FLAT: the image it flattens (for dropout's window) */
    uint8_t split;          /* dense: enum tpu_param_split of its kernel (NONE, COLS: its
                               bias too, ROWS: its output is all-reduced) */
    uint32_t ext;           /* window layers on NL_ROWS: the input's extended slice */
    bool g1[TPU__P_COUNT];  /* the param's gradient is this core's part of a sum over the
                               replica's cores: all-reduced over them before the replicas */
};

#define NL_MAX_MASKS 64

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
    uint32_t weights;               /* training with shape.weighted: row weights f32 [B][1] */
    bool weighted, train_counts;    /* the build shape's flags, in training (else false) */
    uint32_t var_lr;                /* training with schedule host: "learning_rate" */
    /* partitioning: whether the features and the labels come to logical core 0 only (dims of
       product 1), and the row masks made so far, by image shape */
    bool x_core0, labels_core0;
    char dims_text[96];             /* the features' dims as given, for messages */
    uint32_t n_masks;
    struct {
        struct tpu_shape shape;
        uint32_t buf;
    } masks[NL_MAX_MASKS];
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
/* (net_lower_part.c) How each tensor lies over the cores of a replica and how each dense
 * layer's params split, from the input partition dims; refuses, before any op is added, a
 * net it cannot partition (naming the layer, the dims and what is supported). Sets lw[].part,
 * hl, cl, img, split and x_core0, labels_core0. With one core per replica: all NL_WHOLE. */
int tpu__nl_plan(struct lower *s, const struct tpu_build_shape *shape, struct tpu_diag *d);
/* The window of layer i's op (conv2d, pools; global_avg_pool2d's is the whole image), with
 * parts = P when its input is cut by rows. */
struct tpu_window tpu__nl_window(const struct lower *s, uint32_t i);
/* The extended slice of layer i's input for its window op (halo), kept in lw[i].ext. */
uint32_t tpu__nl_halo(struct lower *s, uint32_t i);
/* A temp for layer i's input gradient as an extended slice; tpu__nl_halo_grad sums it into
 * the input's rows (dst, a local image). */
uint32_t tpu__nl_ext_tmp(struct lower *s, uint32_t i, const char *what);
void tpu__nl_halo_grad(struct lower *s, uint32_t i, uint32_t dst, uint32_t ext);
/* y *= the row mask of tensor t (an NL_ROWS image): its padding rows become 0. */
void tpu__nl_mask_rows(struct lower *s, uint32_t t, uint32_t y);
/* Labels on logical core 0 only (dims of product 1): y [rows][cols], computed from them,
 * becomes core 0's value on every core of the replica (the others' are zeroed by a core-0
 * indicator, a row_mask of one row, then all_reduce over the cores sums them). */
void tpu__nl_core0_share(struct lower *s, uint32_t y, uint32_t rows, uint32_t cols);
/* y = all_reduce(y) in place over the cores of one replica (group 1), sum. */
void tpu__nl_all_reduce_cores(struct lower *s, uint32_t y);

/* Layer i's forward ops, and (training) its backward ops: the formulas are in net_lower.c's
 * opening comment. */
void tpu__nl_forward(struct lower *s, uint32_t i);
void tpu__nl_backward(struct lower *s, uint32_t i);

#endif
