/* Post-training int8 quantization of the MLP (include/tpusim/quantize.h has the method):
 * per-channel weight scales, max-abs activation calibration through the fp32 model on the
 * host, and the quantized model as a runtime model whose programs tpu_mlp_build_int8 makes.
 * It does not run the chip: the estimator does, with this model's programs and params. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/builder.h"
#include "tpusim/checkpoint.h"
#include "tpusim/quantize.h"
#include "tpusim/runtime.h"
#include "util.h"

struct layer_store {
    struct tpu_int8_layer pub;
    int8_t *w;      /* [rows][cols] */
    float *w_scale; /* [cols] */
    float *dequant; /* [cols] */
    float *bias;    /* [cols] */
    float *w_f32;   /* [rows][cols] the fp32 weights, for the fp32 baseline */
};

struct tpu_int8_mlp {
    struct tpu_mlp_spec spec; /* n_layers, sizes; the runtime fills the batch fields */
    uint64_t global_step;
    struct layer_store layers[TPU_MLP_MAX_LAYERS];
    float in_alpha[TPU_MLP_MAX_LAYERS];
};

void tpu_int8_mlp_destroy(struct tpu_int8_mlp **pq)
{
    if (!pq || !*pq)
        return;
    struct tpu_int8_mlp *q = *pq;
    for (uint32_t l = 0; l < TPU_MLP_MAX_LAYERS; l++) {
        struct layer_store *s = &q->layers[l];
        free(s->w);
        free(s->w_scale);
        free(s->dequant);
        free(s->bias);
        free(s->w_f32);
    }
    free(q);
    *pq = NULL;
}

uint32_t tpu_int8_mlp_n_layers(const struct tpu_int8_mlp *q)
{
    return q ? q->spec.n_layers : 0;
}

const struct tpu_int8_layer *tpu_int8_mlp_layer(const struct tpu_int8_mlp *q, uint32_t l)
{
    return q && l < q->spec.n_layers ? &q->layers[l].pub : NULL;
}

uint64_t tpu_int8_mlp_global_step(const struct tpu_int8_mlp *q)
{
    return q ? q->global_step : 0;
}

/* ---- the fp32 model on the host --------------------------------------------------------- */

/* One dense layer for one example: out[j] = b[j] + sum_k in[k] W[k][j], ReLU unless last.
 * fp32, k outer so the inner loop runs along W's rows (and skips zero inputs: most pixels). */
static void dense_f32(const struct layer_store *s, const float *in, float *out, bool relu)
{
    const uint32_t K = s->pub.rows, N = s->pub.cols;
    memcpy(out, s->bias, N * sizeof *out);
    for (uint32_t k = 0; k < K; k++) {
        const float v = in[k];
        if (v == 0.0f)
            continue;
        const float *wr = s->w_f32 + (size_t)k * N; /* [N] */
        for (uint32_t j = 0; j < N; j++)
            out[j] += v * wr[j];
    }
    if (relu)
        for (uint32_t j = 0; j < N; j++)
            out[j] = out[j] > 0.0f ? out[j] : 0.0f;
}

static uint32_t widest(const struct tpu_mlp_spec *s)
{
    uint32_t w = 0;
    for (uint32_t l = 0; l <= s->n_layers; l++)
        w = s->sizes[l] > w ? s->sizes[l] : w;
    return w;
}

/* Runs example x ([sizes[0]]) through the fp32 model. With maxabs (n_layers entries), each
 * layer's input max-abs is folded in; the logits go to logits ([sizes[L]]) if not NULL.
 * a, b: scratch of widest() floats each. */
static void forward_f32(const struct tpu_int8_mlp *q, const float *x, float *maxabs,
                        float *logits, float *a, float *b)
{
    const uint32_t L = q->spec.n_layers;
    const float *in = x;
    for (uint32_t l = 0; l < L; l++) {
        if (maxabs)
            for (uint32_t k = 0; k < q->spec.sizes[l]; k++)
                maxabs[l] = fmaxf(maxabs[l], fabsf(in[k]));
        float *out = (l & 1) ? b : a;
        dense_f32(&q->layers[l], in, out, l + 1 < L);
        in = out;
    }
    if (logits)
        memcpy(logits, in, q->spec.sizes[L] * sizeof *logits);
}

int tpu_int8_mlp_fp32_accuracy(const struct tpu_int8_mlp *q, const float *x, const int32_t *y,
                               uint32_t n, double *accuracy, struct tpu_diag *d)
{
    if (!q || !x || !y || !accuracy)
        return tpu__fail(d, TPU_EINVAL, "tpu_int8_mlp_fp32_accuracy needs a model, examples, "
                         "labels and somewhere to put the accuracy");
    const uint32_t W = widest(&q->spec), C = q->spec.sizes[q->spec.n_layers];
    float *scratch = malloc(3 * (size_t)W * sizeof *scratch);
    if (!scratch)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the fp32 baseline");
    uint64_t correct = 0;
    for (uint32_t i = 0; i < n; i++) {
        float *logits = scratch + 2 * (size_t)W;
        forward_f32(q, x + (size_t)i * q->spec.sizes[0], NULL, logits, scratch, scratch + W);
        uint32_t best = 0;
        for (uint32_t j = 1; j < C; j++)
            if (logits[j] > logits[best])
                best = j;
        correct += (int32_t)best == y[i];
    }
    free(scratch);
    *accuracy = n ? (double)correct / n : 0;
    return 0;
}

/* ---- quantization --------------------------------------------------------------------------- */

/* Nearest integer, ties to even, saturated to [-127, 127] (v finite). */
static int8_t q8(float v)
{
    const float r = rintf(v); /* the default rounding mode: to nearest, ties to even */
    return (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
}

/* Copies layer l's fp32 weights and bias and quantizes the weights per output channel. */
static int quantize_weights(struct tpu_int8_mlp *q, uint32_t l, const float *w, const float *b,
                            struct tpu_diag *d)
{
    struct layer_store *s = &q->layers[l];
    const uint32_t K = q->spec.sizes[l], N = q->spec.sizes[l + 1];
    const size_t n = (size_t)K * N;
    s->w = malloc(n);
    s->w_f32 = malloc(n * sizeof *s->w_f32);
    s->w_scale = malloc(N * sizeof *s->w_scale);
    s->dequant = malloc(N * sizeof *s->dequant);
    s->bias = malloc(N * sizeof *s->bias);
    if (!s->w || !s->w_f32 || !s->w_scale || !s->dequant || !s->bias)
        return tpu__fail(d, TPU_ENOMEM, "out of memory quantizing layer %u ([%u, %u])", l, K, N);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return tpu__fail(d, TPU_EINVAL, "w%u[%zu][%zu] is %g; only finite weights can be "
                             "quantized (was the model trained to a NaN?)", l, i / N, i % N,
                             (double)w[i]);
    for (uint32_t j = 0; j < N; j++)
        if (!isfinite(b[j]))
            return tpu__fail(d, TPU_EINVAL, "b%u[%u] is %g; only finite biases can be used", l,
                             j, (double)b[j]);
    memcpy(s->w_f32, w, n * sizeof *w);
    memcpy(s->bias, b, N * sizeof *b);
    for (uint32_t j = 0; j < N; j++) {
        float m = 0.0f;
        for (uint32_t k = 0; k < K; k++)
            m = fmaxf(m, fabsf(w[(size_t)k * N + j]));
        s->w_scale[j] = m > 0.0f ? m / 127.0f : 1.0f;
    }
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t j = 0; j < N; j++)
            s->w[(size_t)k * N + j] = q8(w[(size_t)k * N + j] / s->w_scale[j]);
    s->pub = (struct tpu_int8_layer){.rows = K, .cols = N, .w = s->w, .w_scale = s->w_scale,
                                     .dequant = s->dequant, .bias = s->bias};
    return 0;
}

/* Max-abs calibration of every layer's input over the calibration examples, then the
 * activation scales and the dequantization factors. */
static int calibrate(struct tpu_int8_mlp *q, const float *calib_x, uint32_t n_calib,
                     struct tpu_diag *d)
{
    const uint32_t L = q->spec.n_layers, F = q->spec.sizes[0], W = widest(&q->spec);
    for (size_t i = 0; i < (size_t)n_calib * F; i++)
        if (!isfinite(calib_x[i]))
            return tpu__fail(d, TPU_EINVAL, "calibration example %zu, feature %zu is %g; the "
                             "calibration data must be finite", i / F, i % F,
                             (double)calib_x[i]);
    float maxabs[TPU_MLP_MAX_LAYERS] = {0};
    float *scratch = malloc(2 * (size_t)W * sizeof *scratch);
    if (!scratch)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for calibration");
    for (uint32_t i = 0; i < n_calib; i++)
        forward_f32(q, calib_x + (size_t)i * F, maxabs, NULL, scratch, scratch + W);
    free(scratch);
    for (uint32_t l = 0; l < L; l++) {
        struct layer_store *s = &q->layers[l];
        if (!isfinite(maxabs[l]))
            return tpu__fail(d, TPU_EINVAL, "layer %u's input reaches %g on the calibration "
                             "examples; the model overflows fp32 and cannot be quantized", l,
                             (double)maxabs[l]);
        const float scale = maxabs[l] > 0.0f ? maxabs[l] / 127.0f : 1.0f;
        s->pub.in_scale = scale;
        s->pub.in_alpha = 1.0f / scale;
        if (!isfinite(s->pub.in_alpha))
            return tpu__fail(d, TPU_EINVAL, "layer %u's input scale %g is too small to invert "
                             "in fp32; the calibration examples hardly reach it", l,
                             (double)scale);
        q->in_alpha[l] = s->pub.in_alpha;
        for (uint32_t j = 0; j < s->pub.cols; j++)
            s->dequant[j] = scale * s->w_scale[j];
    }
    return 0;
}

int tpu_int8_mlp_quantize(const struct tpu_mlp_spec *spec, const float *const *w,
                          const float *const *b, const float *calib_x, uint32_t n_calib,
                          struct tpu_int8_mlp **out, struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_int8_mlp_quantize needs somewhere to put the model");
    *out = NULL;
    if (!spec || !w || !b || !calib_x)
        return tpu__fail(d, TPU_EINVAL, "tpu_int8_mlp_quantize needs a spec, weights, biases "
                         "and calibration examples");
    if (n_calib < 1)
        return tpu__fail(d, TPU_EINVAL, "no calibration examples; the activation scales need "
                         "at least 1 (e.g. %d training examples)", TPU_INT8_CALIBRATION_EXAMPLES);
    /* the spec's own checks, with a batch of 1 and an eval program that is thrown away */
    struct tpu_mlp_spec s = *spec;
    s.batch_per_replica = s.global_batch = 1;
    float ones[TPU_MLP_MAX_LAYERS];
    for (uint32_t l = 0; l < TPU_MLP_MAX_LAYERS; l++)
        ones[l] = 1.0f;
    struct tpu_mlp_program mp;
    int rc = tpu_mlp_build_int8(&s, TPU_MLP_EVAL, ones, &mp, d);
    if (rc)
        return rc;
    tpu_mlp_program_free(&mp);
    struct tpu_int8_mlp *q = calloc(1, sizeof *q);
    if (!q)
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    q->spec = *spec;
    for (uint32_t l = 0; l < spec->n_layers && !rc; l++)
        rc = quantize_weights(q, l, w[l], b[l], d);
    if (!rc)
        rc = calibrate(q, calib_x, n_calib, d);
    if (rc) {
        tpu_int8_mlp_destroy(&q);
        return rc;
    }
    *out = q;
    return 0;
}

int tpu_int8_mlp_from_checkpoint(const char *model_dir, const struct tpu_mlp_spec *spec,
                                 const float *calib_x, uint32_t n_calib,
                                 struct tpu_int8_mlp **out, struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_int8_mlp_from_checkpoint needs somewhere to put "
                         "the model");
    *out = NULL;
    if (!model_dir || !spec)
        return tpu__fail(d, TPU_EINVAL, "tpu_int8_mlp_from_checkpoint needs a model_dir and a "
                         "spec");
    char path[1024];
    uint64_t step = 0;
    int rc = tpu_checkpoint_latest(model_dir, &step, path, sizeof path, d);
    if (rc == TPU_ENOTFOUND)
        return tpu__fail(d, rc, "%s holds no checkpoint to quantize; train the model first "
                         "('tpusim train --model-dir %s')", model_dir, model_dir);
    if (rc)
        return rc;
    struct tpu_checkpoint_info info;
    if ((rc = tpu_checkpoint_inspect(path, &info, d)))
        return rc;
    /* load every tensor the file holds (optimizer state too: a load takes all or nothing) */
    struct tpu_tensor *t = calloc(info.n_tensors ? info.n_tensors : 1, sizeof *t);
    rc = t ? 0 : tpu__fail(d, TPU_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < info.n_tensors; i++) {
        t[i] = info.tensors[i];
        t[i].data = malloc((size_t)t[i].rows * t[i].cols * tpu_dtype_bytes(t[i].dtype));
        if (!t[i].data)
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading %s", path);
    }
    if (!rc)
        rc = tpu_checkpoint_load(path, t, info.n_tensors, &step, d);
    const float *w[TPU_MLP_MAX_LAYERS], *b[TPU_MLP_MAX_LAYERS];
    for (uint32_t l = 0; !rc && l < spec->n_layers; l++) {
        for (int k = 0; k < 2 && !rc; k++) {
            char name[32];
            snprintf(name, sizeof name, "%c%u", k ? 'b' : 'w', l);
            const uint32_t rows = k ? 1 : spec->sizes[l], cols = spec->sizes[l + 1];
            const struct tpu_tensor *found = NULL;
            for (size_t i = 0; i < info.n_tensors; i++)
                if (!strcmp(t[i].name, name))
                    found = &t[i];
            if (!found)
                rc = tpu__fail(d, TPU_ESHAPE, "%s has no tensor '%s'; it was not saved from "
                               "this MLP (give the --layers it was trained with)", path, name);
            else if (found->dtype != TPU_F32 || found->rows != rows || found->cols != cols)
                rc = tpu__fail(d, TPU_ESHAPE, "%s: tensor '%s' is %s[%u, %u] but the MLP "
                               "of these layer widths needs f32[%u, %u]; give the --layers it "
                               "was trained with", path, name,
                               tpu_dtype_name(found->dtype), found->rows, found->cols,
                               rows, cols);
            else if (k)
                b[l] = found->data;
            else
                w[l] = found->data;
        }
    }
    if (!rc)
        rc = tpu_int8_mlp_quantize(spec, w, b, calib_x, n_calib, out, d);
    if (!rc)
        (*out)->global_step = step;
    for (size_t i = 0; t && i < info.n_tensors; i++)
        free(t[i].data);
    free(t);
    tpu_checkpoint_info_free(&info);
    return rc;
}

int tpu_int8_check_chip(const struct tpu_chip_config *chip, struct tpu_diag *d)
{
    if (chip->mxu_dtypes & TPU_DTYPE_BIT(TPU_INT8))
        return 0;
    return tpu__fail(d, TPU_EUNSUPPORTED, "chip '%s' has no int8 matrix units (its "
                     "mxu.dtypes are %s); int8 inference needs a chip whose config lists "
                     "int8, e.g. --chip tpu-v1, tpu-v4 or tiny", chip->name,
                     (chip->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)) ? "bf16 only" : "not int8");
}

/* ---- the runtime model ---------------------------------------------------------------------- */

static int int8_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                      struct tpu_model_program *out, struct tpu_diag *d)
{
    const struct tpu_int8_mlp *q = ctx;
    if (mode == TPU_MODE_TRAIN)
        return tpu__fail(d, TPU_EUNSUPPORTED, "the int8 model is quantized from a trained "
                         "checkpoint for evaluate and predict; it cannot be trained (train the "
                         "fp32 model, then quantize its checkpoint again)");
    int rc = tpu__mlp_check_shape(shape, "int8 MLP model", d);
    if (rc)
        return rc;
    struct tpu_mlp_spec s = q->spec;
    s.batch_per_replica = shape->batch_per_replica;
    s.global_batch = shape->batch_per_replica * shape->n_replicas;
    struct tpu_mlp_program mp;
    rc = tpu_mlp_build_int8(&s, mode == TPU_MODE_EVAL ? TPU_MLP_EVAL : TPU_MLP_PREDICT,
                                q->in_alpha, &mp, d);
    if (rc)
        return rc;
    tpu_mlp_model_program(&mp, mode, out);
    return 0;
}

/* The params are the quantized values: w<l>.int8 (int8 weights as f32), w<l>.dequant, b<l>. */
static void int8_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                      uint64_t seed)
{
    (void)seed;
    const struct tpu_int8_mlp *q = ctx;
    const size_t n = (size_t)rows * cols;
    unsigned l = 0;
    char kind[16] = "";
    if ((sscanf(name, "w%u.%15s", &l, kind) == 2 || sscanf(name, "b%u", &l) == 1) &&
        l < q->spec.n_layers) {
        const struct layer_store *s = &q->layers[l];
        if (!strcmp(kind, "int8") && n == (size_t)s->pub.rows * s->pub.cols) {
            for (size_t i = 0; i < n; i++)
                data[i] = (float)s->w[i];
            return;
        }
        if (!strcmp(kind, "dequant") && n == s->pub.cols) {
            memcpy(data, s->dequant, n * sizeof *data);
            return;
        }
        if (!kind[0] && name[0] == 'b' && n == s->pub.cols) {
            memcpy(data, s->bias, n * sizeof *data);
            return;
        }
    }
    memset(data, 0, n * sizeof *data); /* not a param of the int8 programs */
}

void tpu_int8_mlp_model(struct tpu_model *m, struct tpu_int8_mlp *q)
{
    memset(m, 0, sizeof *m);
    m->ctx = q;
    m->build = int8_build;
    m->init_param = int8_init;
}
