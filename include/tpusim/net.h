/* Models as layer graphs (host/models/net*.c): a C builder for the layers real TPU workloads
 * are made of, their shapes checked as they are added, and their lowering to device programs
 * (training, evaluation and prediction steps) for the runtime (runtime.h). A JSON model file
 * (tpu_net_load_file) builds the same graph.
 *
 * Tensors. Every tensor is per example NHWC: h x w x c (a vector is 1 x 1 x c). On the device
 * a tensor of a batch of B examples is a buffer [B*h*w][c] (a row per pixel, so a per-channel
 * bias or normalization broadcasts over rows); the network's input is infed as f32
 * [B][h*w*c], the same bytes. A tensor is named by the layer that produced it; the input is
 * tensor 0, named "input".
 *
 * Layers (Keras's names and defaults, so a Keras model reads across):
 *   dense            y = x W + b on the last axis (W [c][units]); on an h x w x c input it
 *                    applies per pixel, as Keras's Dense does
 *   conv2d           NHWC, kernel kh x kw, strides sh x sw, padding valid or same (Keras's:
 *                    same pads (out-1)*s + k - in in all, the smaller half first), no dilation,
 *                    no groups; kernel HWIO as Keras ([kh*kw*c][filters] on the device)
 *   max_pool2d, avg_pool2d   pool kh x kw, strides (default: the pool size), valid or same;
 *                    avg excludes padding from the count (Keras)
 *   global_avg_pool2d        h x w x c -> 1 x 1 x c
 *   flatten          h x w x c -> 1 x 1 x (h*w*c)
 *   reshape          to a target h x w x c of the same size
 *   relu
 *   dropout          rate in [0, 1); training only; the mask is a function of the seed, the
 *                    global step and the element's index in the global batch (reproducible,
 *                    resumable, and the same on R replicas of batch B as on one of R*B)
 *   batch_norm       over the channel axis; training normalizes with the batch statistics
 *                    of the replica (or, cross_replica, of the global batch, as TPU's
 *                    cross-replica batch norm), and updates moving averages with `momentum`
 *                    that evaluation and prediction use
 *   add              elementwise sum of two tensors of one shape (residual connections)
 * dense and conv2d take a fused activation (none or relu), as Keras's `activation`.
 *
 * How a conv2d is computed, and what that costs (configs/models/README.md says more). It is
 * lowered to the matrix unit's convolution ops (program.h): conv2d forward, and in training
 * conv2d_grad_filter (the kernel gradient) and conv2d_grad_input (the input gradient); a
 * 1 x 1 conv with strides 1 is a matmul of x's rows of pixels. Like XLA's convolution on a
 * TPU, the ops form the patches (every kh x kw window of x) on chip, feeding the MXU from x
 * itself: no patch matrix is written to HBM. So a conv's cycles and MACs are those of its
 * equivalent GEMM (m = B*ho*wo, k = kh*kw*c, n = filters; the transposed shapes for the
 * gradients), and its HBM traffic is its real operands (x, the kernel, the output), each
 * moved once. Left out: the work of forming the patches and any re-reads of x's rows that
 * several windows share when they do not fit on chip.
 *
 * The output. tpu_net_set_output names the tensor the loss reads:
 *   softmax cross-entropy with integer labels: the output is 1 x 1 x K, K >= 2 classes,
 *     labels int32 in [0, K)
 *   mean squared error: any output shape; targets f32 of the output's size (per example);
 *     the loss is the mean over the output's elements, as Keras's MeanSquaredError
 *
 * Params, by name (checkpoints, tpu_estimator_read_param): <layer>.kernel, <layer>.bias,
 * <layer>.gamma, <layer>.beta, <layer>.moving_mean, <layer>.moving_variance; optimizer state
 * <param>.vel (SGD with momentum) or <param>.m and <param>.v (Adam, AdamW).
 *
 * Errors. Every call checks its arguments and the shapes before anything is added; a failure
 * names the layer, the shapes and the fix, and leaves the net as it was. */
#ifndef TPUSIM_NET_H
#define TPUSIM_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/models.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_NET_MAX_LAYERS 512
#define TPU_NET_NAME_MAX 31 /* layer names: identifiers of at most 31 characters */

enum tpu_layer_kind {
    TPU_LAYER_INPUT = 0,
    TPU_LAYER_DENSE,
    TPU_LAYER_CONV2D,
    TPU_LAYER_MAX_POOL2D,
    TPU_LAYER_AVG_POOL2D,
    TPU_LAYER_GLOBAL_AVG_POOL2D,
    TPU_LAYER_FLATTEN,
    TPU_LAYER_RESHAPE,
    TPU_LAYER_RELU,
    TPU_LAYER_DROPOUT,
    TPU_LAYER_BATCH_NORM,
    TPU_LAYER_ADD,
    TPU_LAYER_KIND_COUNT
};

/* "dense", "conv2d", "max_pool2d", ... (the JSON model file's "type"); NULL if out of range */
const char *tpu_layer_kind_name(enum tpu_layer_kind k);
/* 0 and the kind, or TPU_ENOTFOUND */
int tpu_layer_kind_parse(const char *name, enum tpu_layer_kind *out);

enum tpu_padding { TPU_PADDING_VALID = 0, TPU_PADDING_SAME };
enum tpu_activation { TPU_ACT_NONE = 0, TPU_ACT_RELU };
enum tpu_loss { TPU_LOSS_SOFTMAX_XENT = 0, TPU_LOSS_MSE };

struct tpu_shape {
    uint32_t h, w, c;
};

/* One layer's description: the fields its kind reads; the rest stay zero
 * (tpu_layer_desc_init sets Keras's defaults). */
struct tpu_layer_desc {
    enum tpu_layer_kind kind;
    char name[TPU_NET_NAME_MAX + 1]; /* "" gives Keras-style names: conv2d, conv2d_1, ... */
    uint32_t units;                  /* dense */
    uint32_t filters;                /* conv2d */
    uint32_t kh, kw;                 /* conv2d kernel; pools' pool size */
    uint32_t sh, sw;                 /* strides (default 1 for conv2d, the pool size for
                                        pools) */
    enum tpu_padding padding;        /* conv2d, pools (default valid) */
    bool use_bias;                   /* dense, conv2d (default true) */
    enum tpu_activation activation;  /* dense, conv2d (default none) */
    float rate;                      /* dropout */
    float momentum, epsilon;         /* batch_norm (default 0.99, 0.001 as Keras) */
    bool cross_replica;              /* batch_norm (default false: per-replica statistics) */
    struct tpu_shape target;         /* reshape */
};

/* Zeroes *l and sets the kind and its defaults (strides 0 = "the default", use_bias true,
 * momentum 0.99, epsilon 0.001). */
void tpu_layer_desc_init(struct tpu_layer_desc *l, enum tpu_layer_kind kind);

struct tpu_net;

/* Creates an empty net named `name` (an identifier) whose input is h x w x c. The input is
 * tensor 0. Free with tpu_net_destroy. */
int tpu_net_create(const char *name, uint32_t h, uint32_t w, uint32_t c, struct tpu_net **out,
                   struct tpu_diag *d);
void tpu_net_destroy(struct tpu_net **net);

/* Adds a layer reading `n_in` tensors (2 for add, else 1) and gives its output tensor's id.
 * Checks the description and the shapes; on an error nothing is added. */
int tpu_net_add(struct tpu_net *net, const struct tpu_layer_desc *l, const uint32_t *in,
                uint32_t n_in, uint32_t *out, struct tpu_diag *d);

/* Shorthands for tpu_net_add (name NULL or "" for the automatic name). */
int tpu_net_dense(struct tpu_net *net, const char *name, uint32_t x, uint32_t units,
                  enum tpu_activation act, uint32_t *out, struct tpu_diag *d);
int tpu_net_conv2d(struct tpu_net *net, const char *name, uint32_t x, uint32_t filters,
                   uint32_t kh, uint32_t kw, uint32_t stride, enum tpu_padding padding,
                   enum tpu_activation act, uint32_t *out, struct tpu_diag *d);
int tpu_net_pool2d(struct tpu_net *net, const char *name, enum tpu_layer_kind kind, uint32_t x,
                   uint32_t pool, uint32_t stride, enum tpu_padding padding, uint32_t *out,
                   struct tpu_diag *d);
int tpu_net_unary(struct tpu_net *net, const char *name, enum tpu_layer_kind kind, uint32_t x,
                  uint32_t *out, struct tpu_diag *d); /* global_avg_pool2d, flatten, relu */
int tpu_net_dropout(struct tpu_net *net, const char *name, uint32_t x, float rate,
                    uint32_t *out, struct tpu_diag *d);
int tpu_net_batch_norm(struct tpu_net *net, const char *name, uint32_t x, bool cross_replica,
                       uint32_t *out, struct tpu_diag *d);
int tpu_net_add2(struct tpu_net *net, const char *name, uint32_t a, uint32_t b, uint32_t *out,
                 struct tpu_diag *d);

/* Sets the tensor the loss reads and the loss (the message says why a shape does not fit,
 * e.g. softmax cross-entropy on a 7 x 7 x 10 output: add flatten or global_avg_pool2d). */
int tpu_net_set_output(struct tpu_net *net, uint32_t tensor, enum tpu_loss loss,
                       struct tpu_diag *d);

/* Looks a tensor (= its layer) up by name: 0 and the id, or TPU_ENOTFOUND. */
int tpu_net_find(const struct tpu_net *net, const char *name, uint32_t *id);

/* ---- what a net is ------------------------------------------------------------------------ */

struct tpu_layer_info {
    const char *name;
    enum tpu_layer_kind kind;
    struct tpu_layer_desc desc;      /* with the defaults resolved (strides, names) */
    uint32_t n_in, in[2];            /* input tensors */
    struct tpu_shape out;            /* per example */
    uint64_t params;                 /* trainable parameters */
    uint64_t non_trainable;          /* batch norm's moving statistics */
    uint64_t flops;                  /* forward FLOPs per example (a multiply-add is 2) */
};

const char *tpu_net_name(const struct tpu_net *net);
uint32_t tpu_net_n_layers(const struct tpu_net *net); /* the input included, as layer 0 */
/* Layer i (0 = the input); the pointers stay valid until the net changes or is freed. */
int tpu_net_layer(const struct tpu_net *net, uint32_t i, struct tpu_layer_info *out);
/* The output tensor and loss; TPU_EINVAL when tpu_net_set_output was not called. */
int tpu_net_output(const struct tpu_net *net, uint32_t *tensor, enum tpu_loss *loss);

/* ---- training, and lowering to programs ---------------------------------------------------- */

struct tpu_train_spec {
    unsigned passes;                 /* matmul precision: 1 (bf16 inputs), 3 or 6 */
    enum tpu_optimizer optimizer;    /* SGD with momentum, Adam, AdamW */
    float learning_rate;
    float momentum;                  /* SGD */
    float beta1, beta2, epsilon;     /* Adam, AdamW */
    float weight_decay;              /* AdamW's decoupled decay (Keras default 0.004) */
    float l2;                        /* SGD and Adam: decay added to the gradients */
    enum tpu_lr_schedule schedule;   /* program.h's: constant, step, cosine, or host: the
                                        train program declares variable "learning_rate"
                                        and its optimizers take their rate from it (the
                                        runtime's tpu_estimator_set_learning_rate;
                                        learning_rate until one is set) */
    uint32_t warmup_steps, decay_steps;
    float decay_rate;
    uint64_t seed;                   /* the dropout masks' seed, mixed with each dropout
                                        layer's index (set it to the run's seed; the
                                        program builder does not see the run config) */
};

/* Defaults: Adam, lr 0.001, betas 0.9/0.999, epsilon 1e-7, momentum 0.9, weight decay 0.004,
 * passes 1, constant schedule, seed 0.
 *
 * The optimizers' exact forms (program.h's sgd_momentum, adam and adamw ops), where they
 * differ from Keras:
 *   SGD with momentum is TF1's MomentumOptimizer, as TPUEstimator used it: accum = momentum *
 *     accum + g; var -= lr * accum. At a constant rate it equals Keras's SGD(momentum); with a
 *     schedule, each step's new lr scales the whole accumulator, while Keras 2's SGD
 *     (velocity = momentum * velocity - lr * g) keeps every past step at its own rate.
 *   Adam and AdamW add epsilon to sqrt(vhat), the bias-corrected second moment (the paper's
 *     Algorithm 1). Keras and TF1 add it to sqrt(v) before the correction, an epsilon-hat of
 *     about epsilon / sqrt(1 - beta2^t): the updates agree once sqrt(vhat) is well above
 *     epsilon and differ in the first steps and for parameters whose gradients stay near 0.
 */
void tpu_train_spec_default(struct tpu_train_spec *s);
/* Checks a spec (names the field, the rule and the fix). */
int tpu_train_spec_check(const struct tpu_train_spec *s, struct tpu_diag *d);

/* Builds the program of `mode` for `shape` (runtime.h: the per-replica batch B, the global
 * batch, the replicas R, the cores per replica P and the input partition dims; the training
 * loss is scaled by 1 / (B * R)). Infeed: x f32
 * [B][h*w*c], then for softmax cross-entropy labels int32 [B][1] (-1: padding), for MSE
 * targets f32 [B][size] and a row mask int32 [B][1] (0 real, -1 padding); predict infeeds x
 * only. Outfeed as runtime.h says (eval of an MSE model: counts (0, real rows), and
 * out->no_accuracy is set). Training with shape->weighted also infeeds row weights f32 [B][1]
 * last, and the loss is softmax_xent_w or mse_w (program.h: row i scaled by its weight
 * instead of 1 / (B * R)); with shape->train_counts it computes the counts as evaluation
 * does (classify_count, or count_rows for MSE) and outfeeds them after the loss. Both flags
 * are ignored outside training, and with both off the programs are what they were. If op_layer is not NULL, *op_layer gets a malloc'd array of the
 * program's op count: the layer index each op belongs to (forward, backward, all-reduce and
 * update of its params; 0, the input, for the input's reshape to rows of pixels), or
 * TPU_NET_OP_LOSS for the loss (and the output's reshape to [B][size]), TPU_NET_OP_STEP for
 * the step's own ops (loop, infeed, outfeed, the step counter). The caller frees it. A layer
 * the loss does not depend on gets no ops (its params keep their initial values); dropout
 * gets none outside training. host/models/net_lower.c's opening comment lists the ops of
 * each layer (conv2d: its convolution ops, above). */
#define TPU_NET_OP_LOSS UINT32_MAX
#define TPU_NET_OP_STEP (UINT32_MAX - 1)
int tpu_net_build(const struct tpu_net *net, const struct tpu_train_spec *spec,
                  enum tpu_mode mode, const struct tpu_build_shape *shape,
                  struct tpu_model_program *out, uint32_t **op_layer, struct tpu_diag *d);

/* The net as a runtime model: builds its programs from `net` and `spec` (both must outlive
 * the model; the net must have its output set), and initializes the params: kernels
 * Glorot-uniform from the seed and the param's name (Keras's default), biases and beta 0,
 * gamma and moving_variance 1, moving_mean and optimizer state 0. A kernel's values depend
 * on the run's seed and the param's name only (adding a layer leaves the others' as they
 * were). The model's ctx points into the net, which serves at most 16 models with distinct
 * specs (TPU_ERANGE past that); the net is otherwise unchanged. */
int tpu_net_model(struct tpu_model *m, const struct tpu_net *net,
                  const struct tpu_train_spec *spec, struct tpu_diag *d);

/* ---- model files ------------------------------------------------------------------------ */

/* Reads a JSON model file (host/io/model_file.c; the format is in configs/models/README.md):
 * a list of layers, or a graph of named layers with "inputs". Every error names the file,
 * the line and column, the layer and the rule. */
int tpu_net_load_file(const char *path, struct tpu_net **out, struct tpu_diag *d);
/* The same from text in memory; `origin` names it in messages. */
int tpu_net_parse_json(const char *text, size_t len, const char *origin, struct tpu_net **out,
                       struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
