/* Post-training int8 quantization of a trained MLP, for the int8 inference path the TPUv1
 * was built for: evaluate and predict with int8 weights and activations on a chip whose
 * matrix units multiply int8 x int8 into int32 (mxu.dtypes lists "int8": tpu-v1, tpu-v4,
 * tiny).
 *
 * The method, all of it computed on the host in fp32 from the fp32 checkpoint:
 *   weights      symmetric, per output channel: for column j of W_l ([in][out]),
 *                w_scale[j] = max_k |W[k][j]| / 127 and q[k][j] = round(W[k][j] / w_scale[j])
 *                (nearest, ties to even), in [-127, 127]. An all-zero column has scale 1.
 *   activations  symmetric, per tensor: each layer's input (the image for layer 0, the ReLU
 *                output of the layer before for the others) has in_scale = max |a| / 127,
 *                the max-abs over the calibration examples (e.g. the first 1000 training
 *                examples) run through the fp32 model on the host. On the chip a value v
 *                becomes clamp(round(v * in_alpha), -127, 127) with in_alpha = 1 / in_scale
 *                (program.h's quantize op); values above the calibrated range saturate.
 *                A layer whose calibration input is all zero has scale 1.
 *   dequantize   z[i][j] = (float)acc[i][j] * dequant[j] + bias[j] in fp32 on the vector
 *                unit, dequant[j] = in_scale * w_scale[j] (rounded to f32 once), acc the
 *                exact int32 sum of the int8 products; biases stay fp32.
 * Max-abs calibration keeps every calibration activation in range (no clipping), at the
 * price of resolution when a few activations are much larger than the rest; for the MLP on
 * Fashion-MNIST it loses well under a point of accuracy (tests/test_models.c states the
 * tolerance and why).
 *
 * The quantized model is a runtime model (runtime.h) like the fp32 one: its programs come
 * from tpu_mlp_build_int8 (models.h), its params from the quantized values (through
 * init_param: give the estimator no model_dir, since the params are not the checkpoint's). */
#ifndef TPUSIM_QUANTIZE_H
#define TPUSIM_QUANTIZE_H

#include <stdint.h>

#include "tpusim/config.h"
#include "tpusim/error.h"
#include "tpusim/models.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The number of calibration examples the command line uses (the first ones of the training
 * set). */
#define TPU_INT8_CALIBRATION_EXAMPLES 1000

/* One quantized dense layer. The arrays belong to the tpu_int8_mlp. */
struct tpu_int8_layer {
    uint32_t rows, cols;   /* the weight's shape [in][out] */
    const int8_t *w;       /* [rows][cols] the int8 weights */
    const float *w_scale;  /* [cols] per output channel */
    float in_scale;        /* the layer input's scale */
    float in_alpha;        /* 1 / in_scale in f32: what quantize multiplies the input by */
    const float *dequant;  /* [cols] in_scale * w_scale[j] in f32 */
    const float *bias;     /* [cols] fp32 */
};

struct tpu_int8_mlp;

/* Quantizes the MLP `spec` (n_layers and sizes are read) with fp32 weights w[l]
 * ([sizes[l]][sizes[l+1]] row-major) and biases b[l] ([sizes[l+1]]), calibrating the
 * activation scales on calib_x ([n_calib][sizes[0]] row-major, n_calib >= 1). Copies
 * everything it needs. Returns 0 and *out (the caller owns it: tpu_int8_mlp_destroy), or
 * TPU_EINVAL (a non-finite weight or calibration value, a bad spec) or TPU_ENOMEM. */
int tpu_int8_mlp_quantize(const struct tpu_mlp_spec *spec, const float *const *w,
                          const float *const *b, const float *calib_x, uint32_t n_calib,
                          struct tpu_int8_mlp **out, struct tpu_diag *d);

/* The same from the latest checkpoint in model_dir (tensors w0, b0, w1, b1, ... of the
 * shapes spec gives; the message names the checkpoint and the tensor when one is missing or
 * has another shape). The checkpoint's global step is kept (tpu_int8_mlp_global_step). */
int tpu_int8_mlp_from_checkpoint(const char *model_dir, const struct tpu_mlp_spec *spec,
                                 const float *calib_x, uint32_t n_calib,
                                 struct tpu_int8_mlp **out, struct tpu_diag *d);

/* Frees the model and sets *q to NULL. Accepts NULL and *q == NULL. */
void tpu_int8_mlp_destroy(struct tpu_int8_mlp **q);

/* The layer count, a layer (NULL past the end), and the checkpoint's global step (0 when
 * made by tpu_int8_mlp_quantize). */
uint32_t tpu_int8_mlp_n_layers(const struct tpu_int8_mlp *q);
const struct tpu_int8_layer *tpu_int8_mlp_layer(const struct tpu_int8_mlp *q, uint32_t l);
uint64_t tpu_int8_mlp_global_step(const struct tpu_int8_mlp *q);

/* The fp32 model the quantization started from, run on the host: the share of the n
 * examples x ([n][sizes[0]]) whose argmax logit is their label y[i]. The baseline the int8
 * accuracy is reported beside. */
int tpu_int8_mlp_fp32_accuracy(const struct tpu_int8_mlp *q, const float *x, const int32_t *y,
                               uint32_t n, double *accuracy, struct tpu_diag *d);

/* 0 when the chip's matrix units multiply int8; otherwise TPU_EUNSUPPORTED with a message
 * that names the chip, its data types and chips that have int8. */
int tpu_int8_check_chip(const struct tpu_chip_config *chip, struct tpu_diag *d);

/* The quantized MLP as a runtime model (runtime.h) for evaluate and predict; training it
 * fails with TPU_EUNSUPPORTED. `q` must outlive the model; the spec's batch fields are
 * the runtime's. */
struct tpu_model;
void tpu_int8_mlp_model(struct tpu_model *m, struct tpu_int8_mlp *q);

#ifdef __cplusplus
}
#endif
#endif
