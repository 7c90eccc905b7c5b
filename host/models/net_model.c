/* The layer graph as a runtime model (tpu_net_model in include/tpusim/net.h): its build
 * callback (tpu_net_build, net_lower.c) and its params' initial values, Keras's. Also the
 * params each layer has, which the lowering lists in the same order. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "models/net_int.h"
#include "rng.h"
#include "util.h"

const char *const tpu__net_param_suffix[TPU__P_COUNT] = {
    "kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance",
};

bool tpu__net_has_param(const struct tpu__net_layer *L, int k)
{
    switch (L->desc.kind) {
    case TPU_LAYER_DENSE:
    case TPU_LAYER_CONV2D:
        return k == TPU__P_KERNEL || (k == TPU__P_BIAS && L->desc.use_bias);
    case TPU_LAYER_BATCH_NORM:
        return k >= TPU__P_GAMMA;
    default:
        return false;
    }
}

bool tpu__net_trainable(int k)
{
    return k < TPU__P_MM;
}

static int model_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                       struct tpu_model_program *out, struct tpu_diag *d)
{
    const struct tpu__net_binding *bd = ctx;
    return tpu_net_build(bd->net, bd->spec, mode, shape, out, NULL, d);
}

/* The infeed tensors as the input function fills them (net.h's infeed order): x [h, w, c]
 * per example, then for training and evaluation the labels [1] (softmax cross-entropy), or
 * the targets [size] and the row mask [1] (MSE), and in weighted training the row weights
 * [1]; prediction infeeds x only. The runtime cuts them with input_partition_dims. */
static int model_infeed_shapes(void *ctx, enum tpu_mode mode, bool weighted, uint32_t *n,
                               struct tpu_infeed_shape out[4], struct tpu_diag *d)
{
    const struct tpu__net_binding *bd = ctx;
    const struct tpu_net *net = bd->net;
    (void)d;
    const struct tpu_shape in = net->layers[0].out;
    out[0] = (struct tpu_infeed_shape){.name = "features", .rank = 3,
                                       .dims = {in.h, in.w, in.c}};
    *n = 1;
    if (mode == TPU_MODE_PREDICT)
        return 0;
    if (net->loss == TPU_LOSS_MSE) {
        out[1] = (struct tpu_infeed_shape){.name = "targets", .rank = 1,
                                           .dims = {tpu__shape_size(net->layers[net->output].out)}};
        out[2] = (struct tpu_infeed_shape){.name = "mask", .rank = 1, .dims = {1}};
        *n = 3;
    } else {
        out[1] = (struct tpu_infeed_shape){.name = "labels", .rank = 1, .dims = {1}};
        *n = 2;
    }
    if (weighted && mode == TPU_MODE_TRAIN)
        out[(*n)++] = (struct tpu_infeed_shape){.name = "weights", .rank = 1, .dims = {1}};
    return 0;
}

/* FNV-1a of a param's name. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * UINT64_C(0x100000001b3);
    return h;
}

/* Initial values: Glorot-uniform kernels, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)),
 * fan_in = kh*kw*c and fan_out = kh*kw*filters for conv2d (Keras), c and units for dense;
 * gamma and moving_variance 1; biases, beta, moving_mean and optimizer state 0.
 *
 * The kernel's generator is seeded from the run's seed and the param's name, so adding a
 * layer leaves the others' values as they were. The runtime passes seed + i for the i-th
 * param of the program it loads first, and every mode lists the net's params first in layer
 * order (declare_params), so the run's seed is seed - (the param's index in that list). */
static void model_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                       uint64_t seed)
{
    const struct tpu__net_binding *bd = ctx;
    const struct tpu_net *net = bd->net;
    const size_t n = (size_t)rows * cols;
    float value = 0.0f;
    const char *dot = strchr(name, '.');
    const char *what = dot ? dot + 1 : "";
    if (!strchr(what, '.')) { /* optimizer state has a second dot: it starts at 0 */
        uint64_t index = 0;
        for (uint32_t i = 1; i < net->n_layers; i++) {
            const struct tpu__net_layer *L = &net->layers[i];
            size_t len = strlen(L->desc.name);
            for (int k = 0; k < TPU__P_COUNT; k++) {
                if (!tpu__net_has_param(L, k))
                    continue;
                if (dot && (size_t)(dot - name) == len && !strncmp(name, L->desc.name, len) &&
                    !strcmp(what, tpu__net_param_suffix[k])) {
                    if (k == TPU__P_KERNEL) {
                        struct tpu__rng r;
                        tpu__rng_seed(&r, tpu__mix64(seed - index) ^ name_hash(name));
                        uint64_t kk = L->desc.kind == TPU_LAYER_CONV2D
                                          ? (uint64_t)L->desc.kh * L->desc.kw : 1;
                        float a = sqrtf(6.0f / (float)(kk * L->in_shape.c + kk * L->out.c));
                        for (size_t e = 0; e < n; e++)
                            data[e] = (tpu__rng_uniform(&r) * 2.0f - 1.0f) * a;
                        return;
                    }
                    value = k == TPU__P_GAMMA || k == TPU__P_MV ? 1.0f : 0.0f;
                    goto fill;
                }
                index++;
            }
        }
    }
fill:
    for (size_t e = 0; e < n; e++)
        data[e] = value;
}

int tpu__net_check_ready(const struct tpu_net *net, const struct tpu_train_spec *spec,
                         struct tpu_diag *d)
{
    int rc = tpu_train_spec_check(spec, d);
    if (rc)
        return rc;
    if (!net->has_output)
        return tpu__fail(d, TPU_EINVAL, "net '%s' has no output; call tpu_net_set_output "
                         "with the tensor the loss reads", net->name);
    return 0;
}

int tpu_net_model(struct tpu_model *m, const struct tpu_net *net,
                  const struct tpu_train_spec *spec, struct tpu_diag *d)
{
    if (!m || !net || !spec)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_model needs a model, a net and a spec");
    int rc = tpu__net_check_ready(net, spec, d);
    if (rc)
        return rc;
    /* the binding lives in the net (the model's ctx points at it); the net is otherwise left
       as it is */
    struct tpu_net *mut = (struct tpu_net *)net;
    const struct tpu__net_binding *bd = NULL;
    for (uint32_t i = 0; i < mut->n_bind && !bd; i++)
        if (mut->bind[i].spec == spec)
            bd = &mut->bind[i];
    if (!bd) {
        if (mut->n_bind == TPU__NET_MAX_BINDINGS)
            return tpu__fail(d, TPU_ERANGE, "net '%s' already serves %d models with different "
                             "training specs, the most it can; reuse a spec or make a second "
                             "net", net->name, TPU__NET_MAX_BINDINGS);
        mut->bind[mut->n_bind] = (struct tpu__net_binding){net, spec};
        bd = &mut->bind[mut->n_bind++];
    }
    memset(m, 0, sizeof *m);
    m->ctx = (void *)bd;
    m->build = model_build;
    m->init_param = model_init;
    m->infeed_shapes = model_infeed_shapes;
    return 0;
}
