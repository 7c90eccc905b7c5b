/* A naive double-precision reference of a layer graph (include/tpusim/net.h), forward and
 * backward, for the tests: test_net_ref.c checks its gradients against finite differences of
 * its own loss, and the chip's programs are checked against it. It walks the net's layers with
 * tpu_net_layer and computes every layer from its definition in net.h (Keras's semantics) with
 * straight loops over NHWC arrays; it shares no code with the lowering (host/models/net*.c) and
 * computes its own output shapes and padding, and refuses a net whose shapes disagree.
 *
 * Layout: a batch of B examples of a tensor h x w x c is double [B][h][w][c] (the device's
 * [B*h*w][c]); params are double arrays in the device's layout: dense kernel [c][units],
 * conv2d kernel HWIO [kh][kw][c][filters], biases and batch-norm vectors [c].
 *
 * Batch norm in training normalizes with the biased variance (divide by the count) of the
 * statistics group: the whole batch for a cross_replica layer, else `bn_group` examples at a
 * time (the per-replica batch; 0 = the whole batch). The moving averages it would write are
 * moving * momentum + batch_stat * (1 - momentum) with batch_stat the mean over the groups of
 * each group's statistic (the replicas' all_reduce mean, as Keras on TPU aggregates them),
 * and the biased batch variance (as Keras 3's BatchNormalization). Dropout multiplies by
 * the mask the caller gives (training only). Test-only code. */
#ifndef TPUSIM_TESTS_NET_REF_H
#define TPUSIM_TESTS_NET_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/net.h"

struct net_ref;

struct net_ref_run {
    bool training;     /* batch norm: batch statistics; dropout: the mask */
    uint32_t bn_group; /* examples per statistics group of a per-replica batch norm; 0: all */
    /* the dropout mask value (0 or 1/(1-rate)) of layer `layer` for element `element`
     * (0 .. h*w*c-1, NHWC) of example `example` of the batch; training only */
    double (*mask)(void *ctx, uint32_t layer, uint32_t example, uint64_t element);
    void *mask_ctx;
};

/* Reads the net's layers (the net must outlive the reference) and allocates its params, all
 * 0 (set them with net_ref_param). Fails with the layer and the shapes if a layer's output
 * shape is not the one the reference computes. Free with net_ref_destroy. */
int net_ref_create(const struct tpu_net *net, struct net_ref **out, struct tpu_diag *d);
void net_ref_destroy(struct net_ref **r);

/* Params in layer order, each layer's in the order kernel, bias / gamma, beta, moving_mean,
 * moving_variance (those it has). Names as net.h: "<layer>.kernel", ... */
uint32_t net_ref_n_params(const struct net_ref *r);
const char *net_ref_param_name(const struct net_ref *r, uint32_t i);
bool net_ref_param_trainable(const struct net_ref *r, uint32_t i);
/* The param's values (writable, owned by the reference), or NULL for an unknown name. */
double *net_ref_param(struct net_ref *r, const char *name, size_t *count);
double *net_ref_param_at(struct net_ref *r, uint32_t i, size_t *count);
/* The gradient of the loss by a trainable param after net_ref_backward (0 for the moving
 * statistics), or NULL for an unknown name. */
const double *net_ref_grad(const struct net_ref *r, const char *name, size_t *count);
/* The value a training forward writes to a batch-norm moving statistic ("<bn>.moving_mean",
 * "<bn>.moving_variance"); NULL for other names or before a training forward. */
const double *net_ref_moving_update(const struct net_ref *r, const char *name, size_t *count);

/* The forward pass of `batch` examples x [batch][h*w*c] (the input's size); keeps every
 * tensor for the backward pass. */
int net_ref_forward(struct net_ref *r, const struct net_ref_run *run, const double *x,
                    uint32_t batch, struct tpu_diag *d);
/* Tensor `t` of the last forward ([batch][size]), NULL if out of range. */
const double *net_ref_tensor(const struct net_ref *r, uint32_t t, size_t *count);
/* Tensor `t` before its layer's fused activation (dense, conv2d with relu); the tensor itself
 * for every other layer. */
const double *net_ref_preactivation(const struct net_ref *r, uint32_t t, size_t *count);

/* The loss of the last forward over its batch, as the net's loss: softmax cross-entropy
 * with `labels` [batch] in [0, K), or mean squared error with `targets` [batch][size].
 * *loss is the mean over the batch; per_example (may be NULL) gets [batch] each example's
 * loss. Seeds the gradient of the output with d(mean loss)/d(output). */
int net_ref_loss(struct net_ref *r, const int32_t *labels, const double *targets, double *loss,
                 double *per_example, struct tpu_diag *d);
/* The backward pass from the loss: gradients of every trainable param and of the input. */
int net_ref_backward(struct net_ref *r, struct tpu_diag *d);
/* d loss / d x [batch][size] after net_ref_backward. */
const double *net_ref_input_grad(const struct net_ref *r, size_t *count);

/* Padding before the first row and column of a conv2d or pool layer (Keras's same: the
 * smaller half first), and its output size: for tests that build windows by hand. */
void net_ref_window(uint32_t in, uint32_t k, uint32_t s, enum tpu_padding p, uint32_t *out,
                    uint32_t *pad_before);

#endif
