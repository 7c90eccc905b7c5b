/* The reference's internals, shared by net_ref.c (building, params, forward) and
 * net_ref_backward.c (loss and backward). Test-only. */
#ifndef TPUSIM_TESTS_NET_REF_INT_H
#define TPUSIM_TESTS_NET_REF_INT_H

#include <stdio.h>

#include "net_ref.h"
#include "util.h"

#define REF_MAX_LAYER_PARAMS 4

struct ref_param {
    char name[TPU_NET_NAME_MAX + 32];
    uint32_t layer;
    bool trainable;
    size_t count;
    double *v;   /* [count] values */
    double *g;   /* [count] gradient (0 for the moving statistics) */
    double *upd; /* moving statistics: the value a training forward writes */
    bool has_upd;
};

struct ref_layer {
    struct tpu_layer_info info;
    char name[TPU_NET_NAME_MAX + 1];
    struct tpu_shape in_shape;    /* of in[0] */
    uint32_t pt, pl;              /* conv2d and pools: padding before */
    uint32_t param0, n_param;     /* its params: r->params[param0 ..] */
    size_t size;                  /* h*w*c of the output, per example */
    double *y, *dy;               /* [batch][size] */
    double *mask;                 /* dropout: [batch][size] */
    double *pre;                  /* dense, conv2d with a fused relu: [batch][size] before it */
    double *xhat;                 /* batch norm: [batch][size] normalized input */
    double *rstd;                 /* batch norm: [groups][c] 1/sqrt(var+eps) (training) */
    uint32_t group;               /* batch norm: examples per statistics group */
};

struct net_ref {
    const struct tpu_net *net;
    uint32_t n_layers;
    struct ref_layer *layers;
    uint32_t n_params;
    struct ref_param *params;
    uint32_t out_tensor;
    enum tpu_loss loss;
    uint32_t batch;               /* of the last forward, 0 before */
    bool training;
};

/* messages: tpu__fail (util.h), whose printf format the compiler checks */

/* the layer's params: kernel, bias (dense, conv2d; bias NULL without use_bias) or gamma,
 * beta, moving_mean, moving_variance (batch norm) */
static inline struct ref_param *lp(const struct net_ref *r, const struct ref_layer *L, uint32_t k)
{
    return k < L->n_param ? &r->params[L->param0 + k] : NULL;
}

/* input index of window offset (ky, kx) of output (oy, ox), or -1 on padding */
static inline int64_t win_at(const struct ref_layer *L, uint32_t oy, uint32_t ox,
                             uint32_t ky, uint32_t kx)
{
    int64_t iy = (int64_t)oy * L->info.desc.sh + ky - L->pt;
    int64_t ix = (int64_t)ox * L->info.desc.sw + kx - L->pl;
    if (iy < 0 || ix < 0 || iy >= L->in_shape.h || ix >= L->in_shape.w)
        return -1;
    return iy * L->in_shape.w + ix;
}

#endif
