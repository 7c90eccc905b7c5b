/* The layer graph's private state, shared by net.c (the builder, shapes and counts) and
 * net_lower.c (the programs and the runtime model). Not part of the public API. */
#ifndef TPUSIM_HOST_NET_INT_H
#define TPUSIM_HOST_NET_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/net.h"

/* One layer with everything resolved: the defaults filled in (strides, names), and for
 * conv2d and the pools the window's padding and output size. */
struct tpu__net_layer {
    struct tpu_layer_desc desc; /* desc.name is the layer's (and its tensor's) name */
    uint32_t n_in, in[2];
    struct tpu_shape in_shape;  /* the shape of in[0] */
    struct tpu_shape out;
    uint32_t pt, pl;            /* conv2d and pools: padding before the first row, column */
};

/* What a runtime model built by tpu_net_model points at (its ctx). */
struct tpu__net_binding {
    const struct tpu_net *net;
    const struct tpu_train_spec *spec;
};

#define TPU__NET_MAX_BINDINGS 16

/* A net: layers[0] is the input (tensor 0); layer i produces tensor i. The layers array has
 * room for TPU_NET_MAX_LAYERS. */
struct tpu_net {
    char name[TPU_NET_NAME_MAX + 1];
    uint32_t n_layers;
    struct tpu__net_layer *layers;
    uint32_t auto_name[TPU_LAYER_KIND_COUNT]; /* the next automatic name's suffix per kind */
    bool has_output;
    uint32_t output;
    /* the MLP of models.h lowered as a net (several cores per replica, mlp.c): dense layer l's
       params are named as the MLP's, w<l> and b<l> (and w<l>.vel, w<l>.m, ...) */
    bool mlp_names;
    enum tpu_loss loss;
    /* the (net, spec) pairs of the runtime models made from this net (tpu_net_model): the
       models' ctx points here, so they need no memory of their own */
    struct tpu__net_binding bind[TPU__NET_MAX_BINDINGS];
    uint32_t n_bind;
};

static inline uint64_t tpu__shape_size(struct tpu_shape s)
{
    return (uint64_t)s.h * s.w * s.c;
}

/* The trainable and non-trainable parameter counts and forward FLOPs of a layer. */
void tpu__net_layer_counts(const struct tpu__net_layer *l, uint64_t *params,
                           uint64_t *non_trainable, uint64_t *flops);

/* A layer's params, in the order the programs list them (<layer>.<suffix>). */
enum {
    TPU__P_KERNEL,
    TPU__P_BIAS,
    TPU__P_GAMMA,
    TPU__P_BETA,
    TPU__P_MM, /* moving_mean */
    TPU__P_MV, /* moving_variance */
    TPU__P_COUNT
};
extern const char *const tpu__net_param_suffix[TPU__P_COUNT];

/* Whether layer L has param k (enum above), and whether param k is trained (the moving
 * statistics are not). (net_model.c) */
bool tpu__net_has_param(const struct tpu__net_layer *L, int k);
bool tpu__net_trainable(int k);

/* Whether spec passes tpu_train_spec_check and net has an output, as building or modelling
 * net needs; net and spec are not NULL. (net_model.c) */
int tpu__net_check_ready(const struct tpu_net *net, const struct tpu_train_spec *spec,
                         struct tpu_diag *d);

#endif
