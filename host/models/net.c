/* The layer graph's builder (include/tpusim/net.h): layers added one by one, each checked
 * against its input's shape before it is added, Keras-style automatic names, and what a net
 * is (each layer's output shape, parameter count and forward FLOPs), plus the training
 * spec's defaults and checks. The lowering to device programs is in net_lower.c.
 *
 * Output sizes follow Keras (and TensorFlow): with padding valid a window of k with stride s
 * over n positions gives floor((n - k) / s) + 1 outputs (k <= n); with padding same it gives
 * ceil(n / s), padded by max((out - 1) * s + k - n, 0) in all, the smaller half before.
 *
 * FLOPs per example, forward (a multiply-add is 2): dense and conv2d 2 x MACs plus one add
 * per output for the bias; pools one per window element read; global_avg_pool2d, relu,
 * dropout and add one per element; batch_norm (inference form: subtract, scale by gamma
 * over the deviation, add beta) 4 per element; flatten and reshape 0. */
#include <stdlib.h>
#include <string.h>

#include "models/net_int.h"
#include "util.h"

static const char *const kind_names[TPU_LAYER_KIND_COUNT] = {
    "input",      "dense",  "conv2d",  "max_pool2d", "avg_pool2d", "global_avg_pool2d",
    "flatten",    "reshape", "relu",   "dropout",    "batch_norm", "add",
};

const char *tpu_layer_kind_name(enum tpu_layer_kind k)
{
    return (unsigned)k < TPU_LAYER_KIND_COUNT ? kind_names[k] : NULL;
}

int tpu_layer_kind_parse(const char *name, enum tpu_layer_kind *out)
{
    for (unsigned k = 0; name && k < TPU_LAYER_KIND_COUNT; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (enum tpu_layer_kind)k;
            return 0;
        }
    return TPU_ENOTFOUND;
}

void tpu_layer_desc_init(struct tpu_layer_desc *l, enum tpu_layer_kind kind)
{
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->use_bias = true;
    l->momentum = 0.99f;
    l->epsilon = 0.001f;
}

static bool is_identifier(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n < 1 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

int tpu_net_create(const char *name, uint32_t h, uint32_t w, uint32_t c, struct tpu_net **out,
                   struct tpu_diag *d)
{
    char q[TPU__QUOTE_BYTES];
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_create needs an output pointer");
    *out = NULL;
    if (!name || !is_identifier(name, TPU_NET_NAME_MAX))
        return tpu__fail(d, TPU_EINVAL, "net name '%s' is not an identifier of 1 to %d "
                         "characters (letters, digits, _; not starting with a digit); "
                         "rename it", tpu__quote(name, q, sizeof q), TPU_NET_NAME_MAX);
    if (!h || !w || !c || (uint64_t)h * w * c > (1u << 30))
        return tpu__fail(d, TPU_EINVAL, "net '%s': the input shape %u x %u x %u is out of "
                         "range; each dimension must be at least 1 and the input at most "
                         "2^30 elements", name, h, w, c);
    struct tpu_net *n = calloc(1, sizeof *n);
    if (n)
        n->layers = calloc(TPU_NET_MAX_LAYERS, sizeof *n->layers);
    if (!n || !n->layers) {
        free(n);
        return tpu__fail(d, TPU_ENOMEM, "out of memory creating net '%s'", name);
    }
    strcpy(n->name, name);
    struct tpu__net_layer *in = &n->layers[0];
    tpu_layer_desc_init(&in->desc, TPU_LAYER_INPUT);
    strcpy(in->desc.name, "input");
    in->out = (struct tpu_shape){h, w, c};
    in->in_shape = in->out;
    n->n_layers = 1;
    *out = n;
    return 0;
}

void tpu_net_destroy(struct tpu_net **net)
{
    if (!net || !*net)
        return;
    free((*net)->layers);
    free(*net);
    *net = NULL;
}

static int find_name(const struct tpu_net *net, const char *name)
{
    for (uint32_t i = 0; i < net->n_layers; i++)
        if (!strcmp(net->layers[i].desc.name, name))
            return (int)i;
    return -1;
}

int tpu_net_find(const struct tpu_net *net, const char *name, uint32_t *id)
{
    int i = net && name ? find_name(net, name) : -1;
    if (i < 0)
        return TPU_ENOTFOUND;
    *id = (uint32_t)i;
    return 0;
}

/* Keras's automatic names: the kind's name, then kind_1, kind_2, ... skipping taken ones. */
static void auto_name(struct tpu_net *net, enum tpu_layer_kind k, char *name)
{
    for (;;) {
        uint32_t i = net->auto_name[k]++;
        if (i == 0)
            snprintf(name, TPU_NET_NAME_MAX + 1, "%s", kind_names[k]);
        else
            snprintf(name, TPU_NET_NAME_MAX + 1, "%s_%u", kind_names[k], i);
        if (find_name(net, name) < 0)
            return;
    }
}

#define SHAPE_FMT "%u x %u x %u"
#define SHAPE_ARGS(s) (s).h, (s).w, (s).c

/* One axis of a window: the output size and the padding before, or false (valid, k > n). */
static bool window_axis(uint32_t n, uint32_t k, uint32_t s, enum tpu_padding pad,
                        uint32_t *out, uint32_t *before)
{
    if (pad == TPU_PADDING_VALID) {
        if (k > n)
            return false;
        *out = (n - k) / s + 1;
        *before = 0;
        return true;
    }
    *out = (n + s - 1) / s;
    uint64_t need = (uint64_t)(*out - 1) * s + k;
    uint32_t total = need > n ? (uint32_t)(need - n) : 0;
    *before = total / 2;
    return true;
}

/* conv2d and the pools: checks the window and resolves strides, padding and the output. */
static int resolve_window(struct tpu__net_layer *L, const char *what, struct tpu_diag *d)
{
    struct tpu_layer_desc *l = &L->desc;
    const struct tpu_shape x = L->in_shape;
    bool pool = l->kind != TPU_LAYER_CONV2D;
    if (l->kh < 1 || l->kw < 1 || l->kh > 4096 || l->kw > 4096)
        return tpu__fail(d, TPU_EINVAL, "layer '%s' (%s): %s size %u x %u is out of range; "
                         "use 1 to 4096 on each axis", l->name, kind_names[l->kind], what,
                         l->kh, l->kw);
    /* the window ops index a window's kh*kw*c elements in 32 bits (program.h, rule WINDOW) */
    const uint64_t k_elems = (uint64_t)l->kh * l->kw * x.c;
    if (k_elems >= UINT32_MAX)
        return tpu__fail(d, TPU_ESHAPE, "layer '%s' (%s): a %u x %u %s over %u channels holds "
                         "%llu elements (kh*kw*c), but the window ops take fewer than 2^32-1; "
                         "use a smaller %s or fewer channels in the layer before",
                         l->name, kind_names[l->kind], l->kh, l->kw, what, x.c,
                         (unsigned long long)k_elems, what);
    if (!l->sh)
        l->sh = pool ? l->kh : 1;
    if (!l->sw)
        l->sw = pool ? l->kw : 1;
    if (l->sh > 4096 || l->sw > 4096)
        return tpu__fail(d, TPU_EINVAL, "layer '%s' (%s): strides %u x %u are out of range; "
                         "use 1 to 4096", l->name, kind_names[l->kind], l->sh, l->sw);
    if (l->padding != TPU_PADDING_VALID && l->padding != TPU_PADDING_SAME)
        return tpu__fail(d, TPU_EINVAL, "layer '%s' (%s): padding %d is neither valid nor "
                         "same", l->name, kind_names[l->kind], (int)l->padding);
    uint32_t ho, wo;
    if (!window_axis(x.h, l->kh, l->sh, l->padding, &ho, &L->pt) ||
        !window_axis(x.w, l->kw, l->sw, l->padding, &wo, &L->pl))
        return tpu__fail(d, TPU_ESHAPE, "layer '%s' (%s): a %u x %u %s does not fit its "
                         SHAPE_FMT " input with padding valid; use padding same, or a %s of "
                         "at most %u x %u", l->name, kind_names[l->kind], l->kh, l->kw, what,
                         SHAPE_ARGS(x), what, x.h, x.w);
    L->out = (struct tpu_shape){ho, wo, pool ? x.c : l->filters};
    return 0;
}

static int check_activation(const struct tpu_layer_desc *l, struct tpu_diag *d)
{
    if (l->activation != TPU_ACT_NONE && l->activation != TPU_ACT_RELU)
        return tpu__fail(d, TPU_EINVAL, "layer '%s' (%s): activation %d is neither none nor "
                         "relu", l->name, kind_names[l->kind], (int)l->activation);
    return 0;
}

/* Resolves L (desc, in_shape and inputs set) into its output shape, or fails naming it. */
static int resolve(const struct tpu_net *net, struct tpu__net_layer *L, struct tpu_diag *d)
{
    struct tpu_layer_desc *l = &L->desc;
    const struct tpu_shape x = L->in_shape;
    const char *nm = l->name, *kn = kind_names[l->kind];
    int rc;
    switch (l->kind) {
    case TPU_LAYER_DENSE:
        if (l->units < 1 || l->units > (1u << 20))
            return tpu__fail(d, TPU_EINVAL, "layer '%s' (dense): units %u is out of range; "
                             "use 1 to %u", nm, l->units, 1u << 20);
        if ((rc = check_activation(l, d)))
            return rc;
        L->out = (struct tpu_shape){x.h, x.w, l->units};
        break;
    case TPU_LAYER_CONV2D:
        if (l->filters < 1 || l->filters > (1u << 20))
            return tpu__fail(d, TPU_EINVAL, "layer '%s' (conv2d): filters %u is out of range; "
                             "use 1 to %u", nm, l->filters, 1u << 20);
        if ((rc = check_activation(l, d)) || (rc = resolve_window(L, "kernel", d)))
            return rc;
        break;
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        if ((rc = resolve_window(L, "pool", d)))
            return rc;
        break;
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
        L->out = (struct tpu_shape){1, 1, x.c};
        break;
    case TPU_LAYER_FLATTEN:
        L->out = (struct tpu_shape){1, 1, (uint32_t)tpu__shape_size(x)};
        break;
    case TPU_LAYER_RESHAPE:
        if (!l->target.h || !l->target.w || !l->target.c ||
            tpu__shape_size(l->target) != tpu__shape_size(x))
            return tpu__fail(d, TPU_ESHAPE, "layer '%s' (reshape): target " SHAPE_FMT " (%llu "
                             "elements) does not hold the " SHAPE_FMT " input (%llu elements); "
                             "give a target with every dimension at least 1 and h*w*c = %llu",
                             nm, SHAPE_ARGS(l->target),
                             (unsigned long long)tpu__shape_size(l->target), SHAPE_ARGS(x),
                             (unsigned long long)tpu__shape_size(x),
                             (unsigned long long)tpu__shape_size(x));
        L->out = l->target;
        break;
    case TPU_LAYER_RELU:
        L->out = x;
        break;
    case TPU_LAYER_DROPOUT:
        if (!(l->rate >= 0.0f && l->rate < 1.0f))
            return tpu__fail(d, TPU_EINVAL, "layer '%s' (dropout): rate %g is outside [0, 1); "
                             "give the fraction of inputs to drop, e.g. 0.5", nm,
                             (double)l->rate);
        L->out = x;
        break;
    case TPU_LAYER_BATCH_NORM:
        if (!(l->momentum >= 0.0f && l->momentum <= 1.0f))
            return tpu__fail(d, TPU_EINVAL, "layer '%s' (batch_norm): momentum %g is outside "
                             "[0, 1]; Keras's default is 0.99", nm, (double)l->momentum);
        if (!(l->epsilon > 0.0f && l->epsilon < 1e30f))
            return tpu__fail(d, TPU_EINVAL, "layer '%s' (batch_norm): epsilon %g must be above "
                             "0; Keras's default is 0.001", nm, (double)l->epsilon);
        L->out = x;
        break;
    case TPU_LAYER_ADD: {
        struct tpu_shape y = net->layers[L->in[1]].out;
        if (x.h != y.h || x.w != y.w || x.c != y.c)
            return tpu__fail(d, TPU_ESHAPE, "layer '%s' (add): its inputs '%s' (" SHAPE_FMT
                             ") and '%s' (" SHAPE_FMT ") differ in shape; add needs two tensors "
                             "of one shape (project the shortcut with a 1 x 1 conv2d, or pool "
                             "it, to match)", nm, net->layers[L->in[0]].desc.name,
                             SHAPE_ARGS(x), net->layers[L->in[1]].desc.name, SHAPE_ARGS(y));
        L->out = x;
        break;
    }
    default:
        return tpu__fail(d, TPU_EINVAL, "layer '%s': kind %d is not a layer that can be added",
                         nm, (int)l->kind);
    }
    (void)kn;
    if (tpu__shape_size(L->out) > (1u << 30))
        return tpu__fail(d, TPU_ERANGE, "layer '%s' (%s): its output " SHAPE_FMT " has more "
                         "than 2^30 elements per example; use a smaller layer", nm, kn,
                         SHAPE_ARGS(L->out));
    if (l->kind == TPU_LAYER_DENSE || l->kind == TPU_LAYER_CONV2D) {
        uint64_t p, nt, f;
        tpu__net_layer_counts(L, &p, &nt, &f);
        if (p > (1u << 30))
            return tpu__fail(d, TPU_ERANGE, "layer '%s' (%s): %llu parameters is more than "
                             "2^30; use fewer units or filters", nm, kn, (unsigned long long)p);
    }
    return 0;
}

int tpu_net_add(struct tpu_net *net, const struct tpu_layer_desc *l, const uint32_t *in,
                uint32_t n_in, uint32_t *out, struct tpu_diag *d)
{
    char q[TPU__QUOTE_BYTES];
    if (!net || !l)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_add needs a net and a layer description");
    const char *kn = tpu_layer_kind_name(l->kind);
    if (!kn || l->kind == TPU_LAYER_INPUT)
        return tpu__fail(d, TPU_EINVAL, "net '%s': layer kind %d cannot be added; use dense, "
                         "conv2d, max_pool2d, avg_pool2d, global_avg_pool2d, flatten, reshape, "
                         "relu, dropout, batch_norm or add", net->name, (int)l->kind);
    if (net->n_layers >= TPU_NET_MAX_LAYERS)
        return tpu__fail(d, TPU_ERANGE, "net '%s' already has %d layers (the input included), "
                         "the most a net can hold; make the model smaller", net->name,
                         TPU_NET_MAX_LAYERS);
    struct tpu__net_layer L;
    memset(&L, 0, sizeof L);
    L.desc = *l;
    uint32_t saved_auto = net->auto_name[l->kind];
    if (!memchr(l->name, 0, sizeof l->name))
        return tpu__fail(d, TPU_EINVAL, "net '%s': a %s layer's name is not NUL-terminated "
                         "within %d characters", net->name, kn, TPU_NET_NAME_MAX);
    if (l->name[0] == 0) {
        auto_name(net, l->kind, L.desc.name);
    } else if (!is_identifier(l->name, TPU_NET_NAME_MAX)) {
        return tpu__fail(d, TPU_EINVAL, "net '%s': layer name '%s' is not an identifier "
                         "(letters, digits and _, not starting with a digit); rename the %s "
                         "layer", net->name, tpu__quote(l->name, q, sizeof q), kn);
    } else if (find_name(net, l->name) >= 0) {
        return tpu__fail(d, TPU_EINVAL, "net '%s': layer name '%s' is taken%s; give the %s "
                         "layer another name (or none, for an automatic one)", net->name,
                         l->name, strcmp(l->name, "input") ? " by another layer" :
                         " by the input", kn);
    }
    int rc = 0;
    const uint32_t want = l->kind == TPU_LAYER_ADD ? 2 : 1;
    if (n_in != want || !in) {
        rc = tpu__fail(d, TPU_EINVAL, "layer '%s' (%s) reads %u input tensor%s, not %u", 
                       L.desc.name, kn, want, want > 1 ? "s" : "", in ? n_in : 0);
        goto fail;
    }
    for (uint32_t i = 0; i < n_in; i++)
        if (in[i] >= net->n_layers) {
            rc = tpu__fail(d, TPU_EINVAL, "layer '%s' (%s): input tensor %u does not exist; "
                           "the net has tensors 0 to %u so far (add layers in order: each "
                           "reads tensors added before it)", L.desc.name, kn, in[i],
                           net->n_layers - 1);
            goto fail;
        }
    L.n_in = n_in;
    L.in[0] = in[0];
    L.in[1] = n_in > 1 ? in[1] : 0;
    L.in_shape = net->layers[in[0]].out;
    if ((rc = resolve(net, &L, d)))
        goto fail;
    net->layers[net->n_layers] = L;
    if (out)
        *out = net->n_layers;
    net->n_layers++;
    return 0;
fail:
    net->auto_name[l->kind] = saved_auto;
    return rc;
}

static void desc_named(struct tpu_layer_desc *l, enum tpu_layer_kind kind, const char *name)
{
    tpu_layer_desc_init(l, kind);
    if (name) {
        size_t n = strnlen(name, sizeof l->name);
        /* a name too long stays unterminated, so tpu_net_add reports it */
        memcpy(l->name, name, n < sizeof l->name ? n + 1 : sizeof l->name);
    }
}

int tpu_net_dense(struct tpu_net *net, const char *name, uint32_t x, uint32_t units,
                  enum tpu_activation act, uint32_t *out, struct tpu_diag *d)
{
    struct tpu_layer_desc l;
    desc_named(&l, TPU_LAYER_DENSE, name);
    l.units = units;
    l.activation = act;
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_conv2d(struct tpu_net *net, const char *name, uint32_t x, uint32_t filters,
                   uint32_t kh, uint32_t kw, uint32_t stride, enum tpu_padding padding,
                   enum tpu_activation act, uint32_t *out, struct tpu_diag *d)
{
    struct tpu_layer_desc l;
    desc_named(&l, TPU_LAYER_CONV2D, name);
    l.filters = filters;
    l.kh = kh;
    l.kw = kw;
    l.sh = l.sw = stride;
    l.padding = padding;
    l.activation = act;
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_pool2d(struct tpu_net *net, const char *name, enum tpu_layer_kind kind, uint32_t x,
                   uint32_t pool, uint32_t stride, enum tpu_padding padding, uint32_t *out,
                   struct tpu_diag *d)
{
    if (kind != TPU_LAYER_MAX_POOL2D && kind != TPU_LAYER_AVG_POOL2D)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_pool2d makes max_pool2d or avg_pool2d, not "
                         "%s", tpu_layer_kind_name(kind) ? tpu_layer_kind_name(kind) : "?");
    struct tpu_layer_desc l;
    desc_named(&l, kind, name);
    l.kh = l.kw = pool;
    l.sh = l.sw = stride;
    l.padding = padding;
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_unary(struct tpu_net *net, const char *name, enum tpu_layer_kind kind, uint32_t x,
                  uint32_t *out, struct tpu_diag *d)
{
    if (kind != TPU_LAYER_GLOBAL_AVG_POOL2D && kind != TPU_LAYER_FLATTEN &&
        kind != TPU_LAYER_RELU)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_unary makes global_avg_pool2d, flatten or "
                         "relu, not %s; use tpu_net_add for layers with settings",
                         tpu_layer_kind_name(kind) ? tpu_layer_kind_name(kind) : "?");
    struct tpu_layer_desc l;
    desc_named(&l, kind, name);
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_dropout(struct tpu_net *net, const char *name, uint32_t x, float rate,
                    uint32_t *out, struct tpu_diag *d)
{
    struct tpu_layer_desc l;
    desc_named(&l, TPU_LAYER_DROPOUT, name);
    l.rate = rate;
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_batch_norm(struct tpu_net *net, const char *name, uint32_t x, bool cross_replica,
                       uint32_t *out, struct tpu_diag *d)
{
    struct tpu_layer_desc l;
    desc_named(&l, TPU_LAYER_BATCH_NORM, name);
    l.cross_replica = cross_replica;
    return tpu_net_add(net, &l, &x, 1, out, d);
}

int tpu_net_add2(struct tpu_net *net, const char *name, uint32_t a, uint32_t b, uint32_t *out,
                 struct tpu_diag *d)
{
    struct tpu_layer_desc l;
    desc_named(&l, TPU_LAYER_ADD, name);
    uint32_t in[2] = {a, b};
    return tpu_net_add(net, &l, in, 2, out, d);
}

int tpu_net_set_output(struct tpu_net *net, uint32_t tensor, enum tpu_loss loss,
                       struct tpu_diag *d)
{
    if (!net)
        return tpu__fail(d, TPU_EINVAL, "tpu_net_set_output needs a net");
    if (tensor >= net->n_layers)
        return tpu__fail(d, TPU_EINVAL, "net '%s': output tensor %u does not exist; the net "
                         "has tensors 0 to %u", net->name, tensor, net->n_layers - 1);
    const struct tpu__net_layer *L = &net->layers[tensor];
    if (loss == TPU_LOSS_SOFTMAX_XENT) {
        struct tpu_shape s = L->out;
        if (s.h != 1 || s.w != 1)
            return tpu__fail(d, TPU_ESHAPE, "net '%s': softmax cross-entropy reads one score "
                             "per class, a 1 x 1 x K tensor, but output '%s' is " SHAPE_FMT
                             "; add flatten or global_avg_pool2d (then a dense layer with one "
                             "unit per class) before the output", net->name, L->desc.name,
                             SHAPE_ARGS(s));
        if (s.c < 2)
            return tpu__fail(d, TPU_ESHAPE, "net '%s': softmax cross-entropy needs at least 2 "
                             "classes, but output '%s' is " SHAPE_FMT "; end with a dense "
                             "layer of one unit per class (or use the loss mean_squared_error "
                             "(TPU_LOSS_MSE) for one value)",
                             net->name, L->desc.name, SHAPE_ARGS(s));
    } else if (loss != TPU_LOSS_MSE) {
        return tpu__fail(d, TPU_EINVAL, "net '%s': loss %d is neither softmax cross-entropy "
                         "nor mse", net->name, (int)loss);
    }
    if (tensor == 0)
        return tpu__fail(d, TPU_EINVAL, "net '%s': the output is the input itself; add layers "
                         "and name the last one the output", net->name);
    net->has_output = true;
    net->output = tensor;
    net->loss = loss;
    return 0;
}

/* ---- what a net is ------------------------------------------------------------------------ */

void tpu__net_layer_counts(const struct tpu__net_layer *L, uint64_t *params,
                           uint64_t *non_trainable, uint64_t *flops)
{
    const struct tpu_layer_desc *l = &L->desc;
    const struct tpu_shape x = L->in_shape, y = L->out;
    const uint64_t ny = tpu__shape_size(y), nx = tpu__shape_size(x);
    uint64_t p = 0, nt = 0, f = 0;
    switch (l->kind) {
    case TPU_LAYER_DENSE:
        p = (uint64_t)x.c * l->units + (l->use_bias ? l->units : 0);
        f = 2 * (uint64_t)x.h * x.w * x.c * l->units + (l->use_bias ? ny : 0);
        break;
    case TPU_LAYER_CONV2D: {
        uint64_t k = (uint64_t)l->kh * l->kw * x.c;
        p = k * l->filters + (l->use_bias ? l->filters : 0);
        f = 2 * (uint64_t)y.h * y.w * k * l->filters + (l->use_bias ? ny : 0);
        break;
    }
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        f = ny * l->kh * l->kw;
        break;
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
    case TPU_LAYER_RELU:
    case TPU_LAYER_DROPOUT:
    case TPU_LAYER_ADD:
        f = nx;
        break;
    case TPU_LAYER_BATCH_NORM:
        p = 2 * (uint64_t)x.c;
        nt = 2 * (uint64_t)x.c;
        f = 4 * nx;
        break;
    default:
        break;
    }
    *params = p;
    *non_trainable = nt;
    *flops = f;
}

const char *tpu_net_name(const struct tpu_net *net)
{
    return net ? net->name : NULL;
}

uint32_t tpu_net_n_layers(const struct tpu_net *net)
{
    return net ? net->n_layers : 0;
}

int tpu_net_layer(const struct tpu_net *net, uint32_t i, struct tpu_layer_info *out)
{
    if (!net || !out || i >= net->n_layers)
        return TPU_EINVAL;
    const struct tpu__net_layer *L = &net->layers[i];
    memset(out, 0, sizeof *out);
    out->name = L->desc.name;
    out->kind = L->desc.kind;
    out->desc = L->desc;
    out->n_in = L->n_in;
    out->in[0] = L->in[0];
    out->in[1] = L->in[1];
    out->out = L->out;
    tpu__net_layer_counts(L, &out->params, &out->non_trainable, &out->flops);
    return 0;
}

int tpu_net_output(const struct tpu_net *net, uint32_t *tensor, enum tpu_loss *loss)
{
    if (!net || !net->has_output)
        return TPU_EINVAL;
    if (tensor)
        *tensor = net->output;
    if (loss)
        *loss = net->loss;
    return 0;
}

/* ---- the training spec -------------------------------------------------------------------- */

void tpu_train_spec_default(struct tpu_train_spec *s)
{
    memset(s, 0, sizeof *s);
    s->passes = 1;
    s->optimizer = TPU_OPT_ADAM;
    s->learning_rate = 0.001f;
    s->momentum = 0.9f;
    s->beta1 = 0.9f;
    s->beta2 = 0.999f;
    s->epsilon = 1e-7f;
    s->weight_decay = 0.004f;
    s->schedule = TPU_SCHEDULE_CONSTANT;
}

int tpu_train_spec_check(const struct tpu_train_spec *s, struct tpu_diag *d)
{
    if (!s)
        return tpu__fail(d, TPU_EINVAL, "no training spec given");
    if (s->passes != 1 && s->passes != 3 && s->passes != 6)
        return tpu__fail(d, TPU_EINVAL, "passes %u: use 1 (bf16 inputs), 3 or 6 (fp32 in bf16 "
                         "passes)", s->passes);
    if (s->optimizer != TPU_OPT_SGD_MOMENTUM && s->optimizer != TPU_OPT_ADAM &&
        s->optimizer != TPU_OPT_ADAMW)
        return tpu__fail(d, TPU_EINVAL, "optimizer %d: use sgd (SGD with momentum), adam or "
                         "adamw", (int)s->optimizer);
    if (!(s->learning_rate > 0) || s->learning_rate > 1e3f)
        return tpu__fail(d, TPU_EINVAL, "learning rate %g must be above 0 and at most 1000",
                         (double)s->learning_rate);
    if (s->optimizer == TPU_OPT_SGD_MOMENTUM && !(s->momentum >= 0 && s->momentum < 1))
        return tpu__fail(d, TPU_EINVAL, "momentum %g must be in [0, 1) (0.9 is usual)",
                         (double)s->momentum);
    if (s->optimizer != TPU_OPT_SGD_MOMENTUM) {
        if (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1))
            return tpu__fail(d, TPU_EINVAL, "beta1 %g and beta2 %g must be in [0, 1) (Keras: "
                             "0.9 and 0.999)", (double)s->beta1, (double)s->beta2);
        if (!(s->epsilon > 0) || s->epsilon > 1.0f)
            return tpu__fail(d, TPU_EINVAL, "epsilon %g must be above 0 and at most 1 (Keras: "
                             "1e-7)", (double)s->epsilon);
    }
    if (s->optimizer == TPU_OPT_ADAMW && !(s->weight_decay >= 0 && s->weight_decay < 1))
        return tpu__fail(d, TPU_EINVAL, "weight decay %g must be in [0, 1) (Keras's AdamW: "
                         "0.004)", (double)s->weight_decay);
    if (!(s->l2 >= 0) || s->l2 > 1.0f)
        return tpu__fail(d, TPU_EINVAL, "l2 %g must be in [0, 1]", (double)s->l2);
    if (s->optimizer == TPU_OPT_ADAMW && s->l2 > 0)
        return tpu__fail(d, TPU_EINVAL, "l2 %g with adamw: AdamW decays the weights itself "
                         "(weight_decay); set l2 to 0, or use adam or sgd", (double)s->l2);
    switch (s->schedule) {
    case TPU_SCHEDULE_CONSTANT:
    case TPU_SCHEDULE_HOST: /* learning_rate until the host sets another */
        break;
    case TPU_SCHEDULE_STEP:
        if (s->decay_steps < 1)
            return tpu__fail(d, TPU_EINVAL, "the step schedule needs decay_steps >= 1 (the "
                             "steps between decays); got 0");
        if (!(s->decay_rate > 0 && s->decay_rate <= 1))
            return tpu__fail(d, TPU_EINVAL, "the step schedule's decay_rate %g must be in "
                             "(0, 1] (e.g. 0.5 halves the rate every decay_steps)",
                             (double)s->decay_rate);
        break;
    case TPU_SCHEDULE_COSINE:
        if (s->decay_steps < 1)
            return tpu__fail(d, TPU_EINVAL, "the cosine schedule needs decay_steps >= 1 (the "
                             "steps of the cosine after the warm-up); got 0");
        if (!(s->decay_rate >= 0 && s->decay_rate <= 1))
            return tpu__fail(d, TPU_EINVAL, "the cosine schedule's decay_rate %g (the final "
                             "fraction of the rate, Keras's alpha) must be in [0, 1]",
                             (double)s->decay_rate);
        break;
    default:
        return tpu__fail(d, TPU_EINVAL, "schedule %d: use constant, step, cosine or host (a "
                         "rate the host sets between loops)", (int)s->schedule);
    }
    if (s->schedule != TPU_SCHEDULE_COSINE && s->warmup_steps)
        return tpu__fail(d, TPU_EINVAL, "warmup_steps %u needs the cosine schedule (only it "
                         "has a warm-up); set schedule cosine, or warmup_steps 0",
                         s->warmup_steps);
    return 0;
}
