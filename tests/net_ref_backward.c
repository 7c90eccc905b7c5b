/* The reference's loss and backward pass (net_ref.h): straight loops from the layer
 * definitions in net.h, as net_ref.c's forward. Test-only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "net_ref_int.h"

/* ---- loss --------------------------------------------------------------------------------- */

int net_ref_loss(struct net_ref *r, const int32_t *labels, const double *targets, double *loss,
                 double *per_example, struct tpu_diag *d)
{
    if (!r->batch)
        return tpu__fail(d, TPU_EINVAL, "reference: the loss before a forward pass");
    struct ref_layer *O = &r->layers[r->out_tensor];
    uint32_t B = r->batch;
    for (uint32_t i = 0; i < r->n_layers; i++)
        memset(r->layers[i].dy, 0, r->layers[i].size * B * sizeof *r->layers[i].dy);
    double total = 0.0;
    size_t S = O->size;
    for (uint32_t n = 0; n < B; n++) {
        const double *z = O->y + (size_t)n * S;
        double *dz = O->dy + (size_t)n * S;
        double l = 0.0;
        if (r->loss == TPU_LOSS_SOFTMAX_XENT) {
            if (!labels || labels[n] < 0 || (size_t)labels[n] >= S)
                return tpu__fail(d, TPU_ERANGE, "reference: label %d of example %u not in [0, %zu)",
                            labels ? labels[n] : -1, n, S);
            double zmax = z[0];
            for (size_t k = 1; k < S; k++)
                zmax = z[k] > zmax ? z[k] : zmax;
            double se = 0.0;
            for (size_t k = 0; k < S; k++)
                se += exp(z[k] - zmax);
            l = zmax + log(se) - z[labels[n]];
            for (size_t k = 0; k < S; k++)
                dz[k] = (exp(z[k] - zmax) / se - (k == (size_t)labels[n])) / B;
        } else {
            if (!targets)
                return tpu__fail(d, TPU_EINVAL, "reference: mean squared error needs targets");
            const double *t = targets + (size_t)n * S;
            for (size_t k = 0; k < S; k++) {
                l += (z[k] - t[k]) * (z[k] - t[k]);
                dz[k] = 2.0 * (z[k] - t[k]) / ((double)S * B);
            }
            l /= (double)S;
        }
        if (per_example)
            per_example[n] = l;
        total += l;
    }
    *loss = total / B;
    return 0;
}

/* ---- backward ----------------------------------------------------------------------------- */

static void bwd_dense(struct net_ref *r, struct ref_layer *L, const double *x, double *dx,
                      const double *dy, uint32_t B)
{
    size_t rows = (size_t)B * L->in_shape.h * L->in_shape.w;
    uint32_t cin = L->in_shape.c, units = L->info.out.c;
    struct ref_param *W = lp(r, L, 0);
    struct ref_param *b = L->info.desc.use_bias ? lp(r, L, 1) : NULL;
    for (size_t p = 0; p < rows; p++)
        for (uint32_t u = 0; u < units; u++) {
            double g = dy[p * units + u];
            if (b)
                b->g[u] += g;
            for (uint32_t ci = 0; ci < cin; ci++) {
                W->g[(size_t)ci * units + u] += x[p * cin + ci] * g;
                dx[p * cin + ci] += W->v[(size_t)ci * units + u] * g;
            }
        }
}

static void bwd_conv(struct net_ref *r, struct ref_layer *L, const double *x, double *dx,
                     const double *dy, uint32_t B)
{
    const struct tpu_layer_desc *ds = &L->info.desc;
    struct tpu_shape in = L->in_shape, o = L->info.out;
    struct ref_param *K = lp(r, L, 0);
    struct ref_param *b = ds->use_bias ? lp(r, L, 1) : NULL;
    for (uint32_t n = 0; n < B; n++)
        for (uint32_t oy = 0; oy < o.h; oy++)
            for (uint32_t ox = 0; ox < o.w; ox++)
                for (uint32_t f = 0; f < o.c; f++) {
                    double g = dy[(((size_t)n * o.h + oy) * o.w + ox) * o.c + f];
                    if (b)
                        b->g[f] += g;
                    for (uint32_t ky = 0; ky < ds->kh; ky++)
                        for (uint32_t kx = 0; kx < ds->kw; kx++) {
                            int64_t pix = win_at(L, oy, ox, ky, kx);
                            if (pix < 0)
                                continue;
                            for (uint32_t ci = 0; ci < in.c; ci++) {
                                size_t xi = ((size_t)n * in.h * in.w + (size_t)pix) * in.c + ci;
                                size_t ki = (((size_t)ky * ds->kw + kx) * in.c + ci) * o.c + f;
                                K->g[ki] += x[xi] * g;
                                dx[xi] += K->v[ki] * g;
                            }
                        }
                }
}

static void bwd_pool(struct ref_layer *L, const double *x, double *dx, const double *dy,
                     uint32_t B)
{
    const struct tpu_layer_desc *ds = &L->info.desc;
    struct tpu_shape in = L->in_shape, o = L->info.out;
    bool is_max = L->info.kind == TPU_LAYER_MAX_POOL2D;
    for (uint32_t n = 0; n < B; n++)
        for (uint32_t oy = 0; oy < o.h; oy++)
            for (uint32_t ox = 0; ox < o.w; ox++)
                for (uint32_t c = 0; c < o.c; c++) {
                    double g = dy[(((size_t)n * o.h + oy) * o.w + ox) * o.c + c];
                    double best = -INFINITY;
                    size_t best_at = 0;
                    uint32_t count = 0;
                    for (uint32_t ky = 0; ky < ds->kh; ky++)
                        for (uint32_t kx = 0; kx < ds->kw; kx++) {
                            int64_t pix = win_at(L, oy, ox, ky, kx);
                            if (pix < 0)
                                continue;
                            size_t xi = ((size_t)n * in.h * in.w + (size_t)pix) * in.c + c;
                            if (x[xi] > best) { /* the first position of the max wins */
                                best = x[xi];
                                best_at = xi;
                            }
                            count++;
                        }
                    if (is_max) {
                        dx[best_at] += g;
                        continue;
                    }
                    for (uint32_t ky = 0; ky < ds->kh; ky++)
                        for (uint32_t kx = 0; kx < ds->kw; kx++) {
                            int64_t pix = win_at(L, oy, ox, ky, kx);
                            if (pix >= 0)
                                dx[((size_t)n * in.h * in.w + (size_t)pix) * in.c + c] +=
                                    g / count;
                        }
                }
}

static void bwd_batch_norm(struct net_ref *r, struct ref_layer *L, double *dx, const double *dy,
                           uint32_t B)
{
    uint32_t C = L->in_shape.c, G = L->group;
    size_t hw = (size_t)L->in_shape.h * L->in_shape.w;
    struct ref_param *gamma = lp(r, L, 0), *beta = lp(r, L, 1);
    for (uint32_t n0 = 0; n0 < B; n0 += G)
        for (uint32_t c = 0; c < C; c++) {
            double sdy = 0.0, sdyx = 0.0, m = (double)G * hw;
            double rstd = L->rstd[(size_t)(n0 / G) * C + c];
            for (uint32_t n = n0; n < n0 + G; n++)
                for (size_t p = 0; p < hw; p++) {
                    size_t i = ((size_t)n * hw + p) * C + c;
                    sdy += dy[i];
                    sdyx += dy[i] * L->xhat[i];
                }
            gamma->g[c] += sdyx;
            beta->g[c] += sdy;
            for (uint32_t n = n0; n < n0 + G; n++)
                for (size_t p = 0; p < hw; p++) {
                    size_t i = ((size_t)n * hw + p) * C + c;
                    if (r->training) /* the statistics depend on x too */
                        dx[i] += gamma->v[c] * rstd * (dy[i] - sdy / m - L->xhat[i] * sdyx / m);
                    else
                        dx[i] += gamma->v[c] * rstd * dy[i];
                }
        }
}

int net_ref_backward(struct net_ref *r, struct tpu_diag *d)
{
    if (!r->batch)
        return tpu__fail(d, TPU_EINVAL, "reference: the backward pass before a forward pass");
    uint32_t B = r->batch;
    for (uint32_t i = 0; i < r->n_params; i++)
        memset(r->params[i].g, 0, r->params[i].count * sizeof *r->params[i].g);
    for (uint32_t i = 0; i < r->out_tensor; i++) /* everything but the loss's seed */
        memset(r->layers[i].dy, 0, r->layers[i].size * B * sizeof *r->layers[i].dy);
    for (uint32_t i = r->n_layers - 1; i >= 1; i--) {
        struct ref_layer *L = &r->layers[i];
        struct ref_layer *X = &r->layers[L->info.in[0]];
        size_t n = L->size * B;
        double *dy = L->dy;
        double *masked = NULL;
        if ((L->info.kind == TPU_LAYER_DENSE || L->info.kind == TPU_LAYER_CONV2D) &&
            L->info.desc.activation == TPU_ACT_RELU) {
            masked = malloc(n * sizeof *masked);
            if (!masked)
                return TPU_ENOMEM;
            for (size_t k = 0; k < n; k++)
                masked[k] = L->y[k] > 0.0 ? dy[k] : 0.0;
            dy = masked;
        }
        switch (L->info.kind) {
        case TPU_LAYER_DENSE:
            bwd_dense(r, L, X->y, X->dy, dy, B);
            break;
        case TPU_LAYER_CONV2D:
            bwd_conv(r, L, X->y, X->dy, dy, B);
            break;
        case TPU_LAYER_MAX_POOL2D:
        case TPU_LAYER_AVG_POOL2D:
            bwd_pool(L, X->y, X->dy, dy, B);
            break;
        case TPU_LAYER_GLOBAL_AVG_POOL2D: {
            size_t hw = (size_t)L->in_shape.h * L->in_shape.w;
            uint32_t C = L->in_shape.c;
            for (uint32_t e = 0; e < B; e++)
                for (size_t p = 0; p < hw; p++)
                    for (uint32_t c = 0; c < C; c++)
                        X->dy[((size_t)e * hw + p) * C + c] += dy[(size_t)e * C + c] / (double)hw;
            break;
        }
        case TPU_LAYER_FLATTEN:
        case TPU_LAYER_RESHAPE:
            for (size_t k = 0; k < n; k++)
                X->dy[k] += dy[k];
            break;
        case TPU_LAYER_RELU:
            for (size_t k = 0; k < n; k++)
                X->dy[k] += X->y[k] > 0.0 ? dy[k] : 0.0;
            break;
        case TPU_LAYER_DROPOUT:
            for (size_t k = 0; k < n; k++)
                X->dy[k] += r->training ? dy[k] * L->mask[k] : dy[k];
            break;
        case TPU_LAYER_BATCH_NORM:
            bwd_batch_norm(r, L, X->dy, dy, B);
            break;
        case TPU_LAYER_ADD: {
            double *db = r->layers[L->info.in[1]].dy;
            for (size_t k = 0; k < n; k++) {
                X->dy[k] += dy[k];
                db[k] += dy[k];
            }
            break;
        }
        default:
            break;
        }
        free(masked);
    }
    return 0;
}
