/* The naive double-precision reference of a layer graph (net_ref.h): straight loops from the
 * layer definitions in net.h, written without the lowering in view. This file builds the
 * reference, holds its params and runs the forward pass; the loss and the backward pass are
 * net_ref_backward.c's (net_ref_int.h). Test-only. */
#include "net_ref_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t shape_size(struct tpu_shape s)
{
    return (size_t)s.h * s.w * s.c;
}

void net_ref_window(uint32_t in, uint32_t k, uint32_t s, enum tpu_padding p, uint32_t *out,
                    uint32_t *pad_before)
{
    if (p == TPU_PADDING_SAME) {
        uint32_t o = (in + s - 1) / s;
        int64_t total = (int64_t)(o - 1) * s + k - in;
        if (total < 0)
            total = 0;
        *out = o;
        *pad_before = (uint32_t)(total / 2);
    } else {
        *out = in >= k ? (in - k) / s + 1 : 0;
        *pad_before = 0;
    }
}

static int add_param(struct net_ref *r, uint32_t layer, const char *suffix, size_t count,
                     bool trainable)
{
    struct ref_param *p = &r->params[r->n_params++];
    snprintf(p->name, sizeof p->name, "%s.%s", r->layers[layer].name, suffix);
    p->layer = layer;
    p->trainable = trainable;
    p->count = count;
    p->v = calloc(count, sizeof *p->v);
    p->g = calloc(count, sizeof *p->g);
    p->upd = calloc(count, sizeof *p->upd);
    return p->v && p->g && p->upd ? 0 : TPU_ENOMEM;
}

/* The output shape the reference expects of layer `l`, from its input and its description. */
static int expect_shape(struct ref_layer *L, const struct ref_layer *in1, struct tpu_shape *o,
                        struct tpu_diag *d)
{
    const struct tpu_layer_desc *ds = &L->info.desc;
    struct tpu_shape x = L->in_shape;
    switch (L->info.kind) {
    case TPU_LAYER_DENSE:
        *o = (struct tpu_shape){x.h, x.w, ds->units};
        return 0;
    case TPU_LAYER_CONV2D:
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        net_ref_window(x.h, ds->kh, ds->sh, ds->padding, &o->h, &L->pt);
        net_ref_window(x.w, ds->kw, ds->sw, ds->padding, &o->w, &L->pl);
        o->c = L->info.kind == TPU_LAYER_CONV2D ? ds->filters : x.c;
        return 0;
    case TPU_LAYER_GLOBAL_AVG_POOL2D:
        *o = (struct tpu_shape){1, 1, x.c};
        return 0;
    case TPU_LAYER_FLATTEN:
        *o = (struct tpu_shape){1, 1, x.h * x.w * x.c};
        return 0;
    case TPU_LAYER_RESHAPE:
        *o = ds->target;
        return shape_size(*o) == shape_size(x)
                   ? 0
                   : tpu__fail(d, TPU_ESHAPE, "reference: reshape '%s' changes the size", L->name);
    case TPU_LAYER_RELU:
    case TPU_LAYER_DROPOUT:
    case TPU_LAYER_BATCH_NORM:
        *o = x;
        return 0;
    case TPU_LAYER_ADD:
        if (!in1 || in1->info.out.h != x.h || in1->info.out.w != x.w || in1->info.out.c != x.c)
            return tpu__fail(d, TPU_ESHAPE, "reference: add '%s' of two shapes", L->name);
        *o = x;
        return 0;
    default:
        return tpu__fail(d, TPU_EINVAL, "reference: layer '%s' has kind %d, not one it knows",
                    L->name, (int)L->info.kind);
    }
}

int net_ref_create(const struct tpu_net *net, struct net_ref **out, struct tpu_diag *d)
{
    *out = NULL;
    struct net_ref *r = calloc(1, sizeof *r);
    if (!r)
        return TPU_ENOMEM;
    r->net = net;
    r->n_layers = tpu_net_n_layers(net);
    r->layers = calloc(r->n_layers, sizeof *r->layers);
    r->params = calloc((size_t)r->n_layers * REF_MAX_LAYER_PARAMS, sizeof *r->params);
    int rc = r->layers && r->params ? 0 : TPU_ENOMEM;
    if (!rc && tpu_net_output(net, &r->out_tensor, &r->loss))
        rc = tpu__fail(d, TPU_EINVAL, "reference: the net has no output (tpu_net_set_output)");
    for (uint32_t i = 0; !rc && i < r->n_layers; i++) {
        struct ref_layer *L = &r->layers[i];
        rc = tpu_net_layer(net, i, &L->info);
        if (rc) {
            tpu__fail(d, rc, "reference: tpu_net_layer(%u) failed", i);
            break;
        }
        snprintf(L->name, sizeof L->name, "%s", L->info.name);
        L->info.name = L->name;
        L->size = shape_size(L->info.out);
        if (i == 0)
            continue;
        if (L->info.n_in < 1 || L->info.n_in > 2 || L->info.in[0] >= i ||
            (L->info.n_in == 2 && L->info.in[1] >= i)) {
            rc = tpu__fail(d, TPU_EINVAL, "reference: layer '%s' reads a later tensor", L->name);
            break;
        }
        L->in_shape = r->layers[L->info.in[0]].info.out;
        struct tpu_shape o = {0, 0, 0};
        rc = expect_shape(L, L->info.n_in == 2 ? &r->layers[L->info.in[1]] : NULL, &o, d);
        if (rc)
            break;
        if (o.h != L->info.out.h || o.w != L->info.out.w || o.c != L->info.out.c) {
            rc = tpu__fail(d, TPU_ESHAPE,
                      "reference: layer '%s' (%s) outputs %ux%ux%u by the net but %ux%ux%u by "
                      "the reference",
                      L->name, tpu_layer_kind_name(L->info.kind), L->info.out.h,
                      L->info.out.w, L->info.out.c, o.h, o.w, o.c);
            break;
        }
        const struct tpu_layer_desc *ds = &L->info.desc;
        uint32_t cin = L->in_shape.c;
        L->param0 = r->n_params;
        if (L->info.kind == TPU_LAYER_DENSE || L->info.kind == TPU_LAYER_CONV2D) {
            size_t k = L->info.kind == TPU_LAYER_DENSE
                           ? (size_t)cin * ds->units
                           : (size_t)ds->kh * ds->kw * cin * ds->filters;
            rc = add_param(r, i, "kernel", k, true);
            if (!rc && ds->use_bias)
                rc = add_param(r, i, "bias", L->info.out.c, true);
        } else if (L->info.kind == TPU_LAYER_BATCH_NORM) {
            rc = add_param(r, i, "gamma", cin, true);
            if (!rc)
                rc = add_param(r, i, "beta", cin, true);
            if (!rc)
                rc = add_param(r, i, "moving_mean", cin, false);
            if (!rc)
                rc = add_param(r, i, "moving_variance", cin, false);
        }
        L->n_param = r->n_params - L->param0;
    }
    if (rc) {
        net_ref_destroy(&r);
        return rc;
    }
    *out = r;
    return 0;
}

static void free_activations(struct net_ref *r)
{
    for (uint32_t i = 0; i < r->n_layers; i++) {
        struct ref_layer *L = &r->layers[i];
        free(L->y);
        free(L->dy);
        free(L->mask);
        free(L->xhat);
        free(L->rstd);
        free(L->pre);
        L->y = L->dy = L->mask = L->xhat = L->rstd = L->pre = NULL;
    }
    r->batch = 0;
}

void net_ref_destroy(struct net_ref **rp)
{
    if (!rp || !*rp)
        return;
    struct net_ref *r = *rp;
    if (r->layers)
        free_activations(r);
    for (uint32_t i = 0; r->params && i < r->n_params; i++) {
        free(r->params[i].v);
        free(r->params[i].g);
        free(r->params[i].upd);
    }
    free(r->params);
    free(r->layers);
    free(r);
    *rp = NULL;
}

uint32_t net_ref_n_params(const struct net_ref *r)
{
    return r->n_params;
}

const char *net_ref_param_name(const struct net_ref *r, uint32_t i)
{
    return i < r->n_params ? r->params[i].name : NULL;
}

bool net_ref_param_trainable(const struct net_ref *r, uint32_t i)
{
    return i < r->n_params && r->params[i].trainable;
}

static struct ref_param *find_param(const struct net_ref *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_params; i++)
        if (strcmp(r->params[i].name, name) == 0)
            return &r->params[i];
    return NULL;
}

double *net_ref_param(struct net_ref *r, const char *name, size_t *count)
{
    struct ref_param *p = find_param(r, name);
    if (count)
        *count = p ? p->count : 0;
    return p ? p->v : NULL;
}

double *net_ref_param_at(struct net_ref *r, uint32_t i, size_t *count)
{
    if (count)
        *count = i < r->n_params ? r->params[i].count : 0;
    return i < r->n_params ? r->params[i].v : NULL;
}

const double *net_ref_grad(const struct net_ref *r, const char *name, size_t *count)
{
    const struct ref_param *p = find_param(r, name);
    if (count)
        *count = p ? p->count : 0;
    return p ? p->g : NULL;
}

const double *net_ref_moving_update(const struct net_ref *r, const char *name, size_t *count)
{
    const struct ref_param *p = find_param(r, name);
    if (count)
        *count = p && p->has_upd ? p->count : 0;
    return p && p->has_upd ? p->upd : NULL;
}

const double *net_ref_tensor(const struct net_ref *r, uint32_t t, size_t *count)
{
    if (t >= r->n_layers || !r->batch) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (count)
        *count = r->layers[t].size * r->batch;
    return r->layers[t].y;
}

const double *net_ref_preactivation(const struct net_ref *r, uint32_t t, size_t *count)
{
    const double *y = net_ref_tensor(r, t, count);
    return y && r->layers[t].pre ? r->layers[t].pre : y;
}

const double *net_ref_input_grad(const struct net_ref *r, size_t *count)
{
    if (!net_ref_tensor(r, 0, count))
        return NULL;
    return r->layers[0].dy;
}

/* ---- forward ------------------------------------------------------------------------------ */

static void fwd_dense(const struct net_ref *r, struct ref_layer *L, const double *x, uint32_t B)
{
    size_t rows = (size_t)B * L->in_shape.h * L->in_shape.w;
    uint32_t cin = L->in_shape.c, units = L->info.out.c;
    const double *W = lp(r, L, 0)->v;
    const double *b = L->info.desc.use_bias ? lp(r, L, 1)->v : NULL;
    for (size_t p = 0; p < rows; p++)
        for (uint32_t u = 0; u < units; u++) {
            double acc = b ? b[u] : 0.0;
            for (uint32_t ci = 0; ci < cin; ci++)
                acc += x[p * cin + ci] * W[(size_t)ci * units + u];
            L->y[p * units + u] = acc;
        }
}

static void fwd_conv(const struct net_ref *r, struct ref_layer *L, const double *x, uint32_t B)
{
    const struct tpu_layer_desc *ds = &L->info.desc;
    struct tpu_shape in = L->in_shape, o = L->info.out;
    const double *K = lp(r, L, 0)->v; /* [kh][kw][cin][f] */
    const double *b = ds->use_bias ? lp(r, L, 1)->v : NULL;
    for (uint32_t n = 0; n < B; n++)
        for (uint32_t oy = 0; oy < o.h; oy++)
            for (uint32_t ox = 0; ox < o.w; ox++)
                for (uint32_t f = 0; f < o.c; f++) {
                    double acc = b ? b[f] : 0.0;
                    for (uint32_t ky = 0; ky < ds->kh; ky++)
                        for (uint32_t kx = 0; kx < ds->kw; kx++) {
                            int64_t pix = win_at(L, oy, ox, ky, kx);
                            if (pix < 0)
                                continue;
                            for (uint32_t ci = 0; ci < in.c; ci++)
                                acc += x[((size_t)n * in.h * in.w + (size_t)pix) * in.c + ci] *
                                       K[(((size_t)ky * ds->kw + kx) * in.c + ci) * o.c + f];
                        }
                    L->y[(((size_t)n * o.h + oy) * o.w + ox) * o.c + f] = acc;
                }
}

static void fwd_pool(struct ref_layer *L, const double *x, uint32_t B)
{
    const struct tpu_layer_desc *ds = &L->info.desc;
    struct tpu_shape in = L->in_shape, o = L->info.out;
    bool is_max = L->info.kind == TPU_LAYER_MAX_POOL2D;
    for (uint32_t n = 0; n < B; n++)
        for (uint32_t oy = 0; oy < o.h; oy++)
            for (uint32_t ox = 0; ox < o.w; ox++)
                for (uint32_t c = 0; c < o.c; c++) {
                    double acc = is_max ? -INFINITY : 0.0;
                    uint32_t count = 0;
                    for (uint32_t ky = 0; ky < ds->kh; ky++)
                        for (uint32_t kx = 0; kx < ds->kw; kx++) {
                            int64_t pix = win_at(L, oy, ox, ky, kx);
                            if (pix < 0)
                                continue;
                            double v = x[((size_t)n * in.h * in.w + (size_t)pix) * in.c + c];
                            acc = is_max ? (v > acc ? v : acc) : acc + v;
                            count++;
                        }
                    L->y[(((size_t)n * o.h + oy) * o.w + ox) * o.c + c] =
                        is_max ? acc : acc / count;
                }
}

static void fwd_global_avg(struct ref_layer *L, const double *x, uint32_t B)
{
    struct tpu_shape in = L->in_shape;
    size_t hw = (size_t)in.h * in.w;
    for (uint32_t n = 0; n < B; n++)
        for (uint32_t c = 0; c < in.c; c++) {
            double acc = 0.0;
            for (size_t p = 0; p < hw; p++)
                acc += x[((size_t)n * hw + p) * in.c + c];
            L->y[(size_t)n * in.c + c] = acc / (double)hw;
        }
}

/* batch norm over the channel axis; per group of `group` examples in training */
static void fwd_batch_norm(struct net_ref *r, struct ref_layer *L, const double *x, uint32_t B,
                           bool training)
{
    uint32_t C = L->in_shape.c;
    size_t hw = (size_t)L->in_shape.h * L->in_shape.w;
    double eps = (double)L->info.desc.epsilon, mom = (double)L->info.desc.momentum;
    struct ref_param *gamma = lp(r, L, 0), *beta = lp(r, L, 1), *mm = lp(r, L, 2),
                     *mv = lp(r, L, 3);
    uint32_t G = training ? L->group : B;
    const double groups = (double)(B / G); /* the moving averages take the groups' mean */
    for (uint32_t n0 = 0; n0 < B; n0 += G)
        for (uint32_t c = 0; c < C; c++) {
            double mean, var;
            if (training) {
                double m = (double)G * hw, s = 0.0, s2 = 0.0;
                for (uint32_t n = n0; n < n0 + G; n++)
                    for (size_t p = 0; p < hw; p++)
                        s += x[((size_t)n * hw + p) * C + c];
                mean = s / m;
                for (uint32_t n = n0; n < n0 + G; n++)
                    for (size_t p = 0; p < hw; p++) {
                        double dv = x[((size_t)n * hw + p) * C + c] - mean;
                        s2 += dv * dv;
                    }
                var = s2 / m;
                if (n0 == 0)
                    mm->upd[c] = mv->upd[c] = 0.0;
                mm->upd[c] += mean / groups;
                mv->upd[c] += var / groups;
            } else {
                mean = mm->v[c];
                var = mv->v[c];
            }
            double rstd = 1.0 / sqrt(var + eps);
            L->rstd[(size_t)(n0 / G) * C + c] = rstd;
            for (uint32_t n = n0; n < n0 + G; n++)
                for (size_t p = 0; p < hw; p++) {
                    size_t i = ((size_t)n * hw + p) * C + c;
                    L->xhat[i] = (x[i] - mean) * rstd;
                    L->y[i] = gamma->v[c] * L->xhat[i] + beta->v[c];
                }
        }
    if (training) /* moving * momentum + the groups' mean statistic * (1 - momentum) */
        for (uint32_t c = 0; c < C; c++) {
            mm->upd[c] = mm->v[c] * mom + mm->upd[c] * (1.0 - mom);
            mv->upd[c] = mv->v[c] * mom + mv->upd[c] * (1.0 - mom);
        }
    mm->has_upd = mv->has_upd = training;
}

int net_ref_forward(struct net_ref *r, const struct net_ref_run *run, const double *x,
                    uint32_t batch, struct tpu_diag *d)
{
    free_activations(r);
    if (batch == 0)
        return tpu__fail(d, TPU_EINVAL, "reference: a batch of 0 examples");
    for (uint32_t i = 0; i < r->n_params; i++)
        r->params[i].has_upd = false;
    r->training = run->training;
    for (uint32_t i = 0; i < r->n_layers; i++) {
        struct ref_layer *L = &r->layers[i];
        size_t n = L->size * batch;
        L->y = calloc(n, sizeof *L->y);
        L->dy = calloc(n, sizeof *L->dy);
        if (!L->y || !L->dy) {
            free_activations(r);
            return TPU_ENOMEM;
        }
    }
    r->batch = batch;
    memcpy(r->layers[0].y, x, r->layers[0].size * batch * sizeof *x);
    for (uint32_t i = 1; i < r->n_layers; i++) {
        struct ref_layer *L = &r->layers[i];
        const double *in = r->layers[L->info.in[0]].y;
        size_t n = L->size * batch;
        switch (L->info.kind) {
        case TPU_LAYER_DENSE:
            fwd_dense(r, L, in, batch);
            break;
        case TPU_LAYER_CONV2D:
            fwd_conv(r, L, in, batch);
            break;
        case TPU_LAYER_MAX_POOL2D:
        case TPU_LAYER_AVG_POOL2D:
            fwd_pool(L, in, batch);
            break;
        case TPU_LAYER_GLOBAL_AVG_POOL2D:
            fwd_global_avg(L, in, batch);
            break;
        case TPU_LAYER_FLATTEN:
        case TPU_LAYER_RESHAPE:
            memcpy(L->y, in, n * sizeof *in); /* NHWC row-major: the same order */
            break;
        case TPU_LAYER_RELU:
            for (size_t k = 0; k < n; k++)
                L->y[k] = in[k] > 0.0 ? in[k] : 0.0;
            break;
        case TPU_LAYER_DROPOUT:
            if (!run->training) {
                memcpy(L->y, in, n * sizeof *in);
                break;
            }
            if (!run->mask) {
                free_activations(r);
                return tpu__fail(d, TPU_EINVAL,
                            "reference: dropout '%s' in training needs a mask function",
                            L->name);
            }
            L->mask = malloc(n * sizeof *L->mask);
            if (!L->mask) {
                free_activations(r);
                return TPU_ENOMEM;
            }
            for (uint32_t e = 0; e < batch; e++)
                for (size_t k = 0; k < L->size; k++) {
                    size_t at = (size_t)e * L->size + k;
                    L->mask[at] = run->mask(run->mask_ctx, i, e, k);
                    L->y[at] = in[at] * L->mask[at];
                }
            break;
        case TPU_LAYER_BATCH_NORM: {
            uint32_t g = batch;
            if (run->training && !L->info.desc.cross_replica && run->bn_group)
                g = run->bn_group;
            if (batch % g) {
                free_activations(r);
                return tpu__fail(d, TPU_EINVAL,
                            "reference: batch norm '%s': a batch of %u in groups of %u", L->name,
                            batch, g);
            }
            L->group = g;
            L->xhat = malloc(n * sizeof *L->xhat);
            L->rstd = malloc((size_t)(batch / g) * L->in_shape.c * sizeof *L->rstd);
            if (!L->xhat || !L->rstd) {
                free_activations(r);
                return TPU_ENOMEM;
            }
            fwd_batch_norm(r, L, in, batch, run->training);
            break;
        }
        case TPU_LAYER_ADD: {
            const double *b = r->layers[L->info.in[1]].y;
            for (size_t k = 0; k < n; k++)
                L->y[k] = in[k] + b[k];
            break;
        }
        default:
            break; /* net_ref_create refused other kinds */
        }
        if ((L->info.kind == TPU_LAYER_DENSE || L->info.kind == TPU_LAYER_CONV2D) &&
            L->info.desc.activation == TPU_ACT_RELU) {
            L->pre = malloc(n * sizeof *L->pre);
            if (!L->pre) {
                free_activations(r);
                return TPU_ENOMEM;
            }
            memcpy(L->pre, L->y, n * sizeof *L->pre);
            for (size_t k = 0; k < n; k++)
                L->y[k] = L->y[k] > 0.0 ? L->y[k] : 0.0;
        }
    }
    return 0;
}

