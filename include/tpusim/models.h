/* Models lowered to device programs: a multi-layer perceptron (dense + ReLU layers, softmax
 * cross-entropy), with its training step (forward, backward, cross-replica gradient sum,
 * optimizer update), its evaluation step and its prediction step.
 *
 * Every program is per replica: it infeeds the replica's share of a global batch, and the
 * training step scales the loss by 1/global_batch (the runtime passes B * R: the global batch
 * except in BROADCAST, runtime.h), so the all-reduced (summed) gradients are
 * the gradients of the mean loss over the global batch, whatever the number of replicas —
 * the sharded run computes the same model as the unsharded one. Mixed precision as on TPU:
 * fp32 master weights and vector math, matmul inputs rounded to bf16 (passes 1), or fp32
 * matmuls in 3 or 6 bf16 passes.
 *
 * Buffer names (for reading weights back, checkpoints): w0, b0, w1, b1, ... and optimizer
 * state w0.m / w0.v (Adam) or w0.vel (SGD with momentum); infeed x, labels; variables
 * iterations (the loop count) and step (the global step, advanced on the device). */
#ifndef TPUSIM_MODELS_H
#define TPUSIM_MODELS_H

#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/program.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MLP_MAX_LAYERS 16

enum tpu_optimizer {
    TPU_OPT_SGD_MOMENTUM = 0,
    TPU_OPT_ADAM = 1,
    TPU_OPT_ADAMW = 2, /* Adam with decoupled weight decay (layer graphs, net.h) */
};

struct tpu_mlp_spec {
    uint32_t n_layers;                       /* dense layers, >= 1 */
    uint32_t sizes[TPU_MLP_MAX_LAYERS + 1];  /* input width, then each layer's width */
    uint32_t batch_per_replica;              /* rows each replica infeeds per step */
    uint32_t global_batch;                   /* the loss is scaled by 1/global_batch */
    unsigned passes;                         /* matmul precision: 1, 3 or 6 */
    enum tpu_optimizer optimizer;
    float learning_rate;
    float momentum;                          /* SGD */
    float beta1, beta2, epsilon;             /* Adam */
    float l2;                                /* weight decay added to the gradients */
};

/* Fills a spec with defaults: SGD, momentum 0.9, lr 0.1, Adam betas 0.9/0.999, eps 1e-7,
 * passes 1, no L2. Sizes and batches are left for the caller. */
void tpu_mlp_default_spec(struct tpu_mlp_spec *s);

enum tpu_mlp_kind {
    TPU_MLP_TRAIN,   /* infeed x, labels; outfeed the replica's loss [1][1] each step:
                        the sum over its rows / global_batch */
    TPU_MLP_EVAL,    /* infeed x, labels (-1 = padding); outfeed the replica's loss sum
                        over its real examples [1][1], then its counts [1][2] (correct,
                        real examples); the host adds the replicas up */
    TPU_MLP_PREDICT, /* infeed x; outfeed the logits [batch][classes] */
};

struct tpu_mlp_program {
    struct tpu_program *prog;      /* owned; free with tpu_mlp_program_free */
    uint32_t var_iterations, var_step;
    uint32_t buf_x, buf_labels;    /* labels: TPU_NO_BUF for predict */
    uint32_t buf_out;              /* what each step outfeeds */
    uint32_t n_params;             /* weights and biases, then optimizer state */
    uint32_t params[4 * TPU_MLP_MAX_LAYERS * 2];
};

/* Validates the spec (names the field, the rule and the fix) and builds the program. */
int tpu_mlp_build(const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                  struct tpu_mlp_program *out, struct tpu_diag *d);
void tpu_mlp_program_free(struct tpu_mlp_program *p);

/* The int8 inference programs of the same MLP (kind EVAL or PREDICT; TRAIN is refused with
 * TPU_EUNSUPPORTED): every matmul int8 x int8 -> int32 on the matrix unit, dequantization,
 * bias and ReLU in fp32 on the vector unit, each layer's input quantized with `quantize`
 * (alpha = in_alpha[l], the reciprocal of that input's scale; n_layers entries). The params
 * are f32, as the runtime keeps them: w<l>.int8 [in][out] (the int8 weights as exact f32
 * integers, packed to an int8 buffer once per launch, before the loop), w<l>.dequant [1][out]
 * (input scale x the column's weight scale) and b<l> [1][out]; params[] lists them in that
 * order per layer. The infeed, outfeed and variables are those of the fp32 programs.
 * host/models/quantize.c makes the params and scales from a trained checkpoint
 * (tpusim/quantize.h). */
int tpu_mlp_build_int8(const struct tpu_mlp_spec *s, enum tpu_mlp_kind kind,
                       const float *in_alpha, struct tpu_mlp_program *out, struct tpu_diag *d);

/* The MLP as a runtime model (runtime.h): builds its programs for each mode from `spec`
 * (batch fields are filled in by the runtime) and initializes weights Glorot-uniform from
 * the seed, biases and optimizer state to zero. The spec must outlive the model. On several
 * cores per replica (struct tpu_build_shape) its programs are those of the same MLP as a
 * layer graph of dense layers (tpu_net_build), which splits consecutive dense layers over a
 * replica's cores (configs/models/README.md); the params keep their names and initial values,
 * so checkpoints move between one and several cores per replica. On one core per replica it
 * takes no input partition dims but None (or a product of 1). */
struct tpu_model;
void tpu_mlp_model(struct tpu_model *m, struct tpu_mlp_spec *spec);

/* What the runtime needs of a built MLP program for `mode` (a runtime.h enum tpu_mode): the
 * program, its loop variables, the buffers it infeeds and outfeeds, and its params. For a
 * tpu_model's build callback (the fp32 MLP here, the int8 one in quantize.c). The program
 * moves to `out`, which owns it afterwards. */
struct tpu_model_program;
void tpu_mlp_model_program(struct tpu_mlp_program *mp, int mode, struct tpu_model_program *out);

#ifdef __cplusplus
}
#endif
#endif
