/* The window ops (convolution by im2col, pooling and their gradients) and reshape, as one
 * core computes them. It is not their timing (sim/chip/timing.c) nor their verifier rule
 * (sim/program/program_verify_window.c).
 *
 * Geometry (struct tpu_window, program.h): the image is NHWC, N = elements(x) / (h*w*c)
 * examples, stored in any 2-D shape with N*h*w*c elements. Output position (n, oy, ox) and
 * window offset (ky, kx) read input row iy = oy*sh + ky - pt and column ix = ox*sw + kx - pl;
 * a position outside [0, h) x [0, w) is padding. Output rows are (n, oy, ox) row-major.
 * Every window holds at least one in-image position (the verifier's overlap rule, checked
 * again here), so no pooling window is empty.
 *
 * All arithmetic is fp32, one rounded operation at a time, in the orders below, which make
 * the results exact functions of the inputs (no dependence on threads or blocking):
 *   im2col         y[(n,oy,ox)][(ky,kx,ci)] = x[n][iy][ix][ci], +0 on padding: a copy.
 *   col2im         y = +0; then for each cols row in order, each column (ky, kx, ci) in
 *                  order: y[n][iy][ix][ci] += cols[row][col], padding entries dropped.
 *   max_pool       m = the first in-image element (ky, kx order), then for each later one
 *                  v: m = v if v > m, or v is NaN and m is not (NaN propagates; of equal
 *                  values the earlier is kept; padding never takes part).
 *   max_pool_grad  dx = +0; then for each output (n, oy, ox) in order, each channel in
 *                  order: dx[the position max_pool's m was taken from] += dy.
 *   avg_pool       s = the in-image elements added in (ky, kx) order starting from the
 *                  first; y = s / count (count = in-image positions; padding excluded, as
 *                  Keras).
 *   avg_pool_grad  dx = +0; then for each output in order, each channel in order: g = dy /
 *                  count, added to each in-image position of its window in (ky, kx) order.
 *   reshape        y = x element for element in row-major order (any dtype, the same for
 *                  both): a copy.
 *
 * Row partitioning (parts >= 2, program.h): the same loops over the core's output rows
 * oy = oy0 + oyl (oy0 = k*hoc, oyl < hoc) with the image rows read from the ext image, whose
 * row j is global row r0(k) + j: a window position's global row iy = oy*sh + ky - pt is at
 * ext row oyl*sh + ky. Positions whose global row is outside [0, h) are padding as above,
 * whatever the ext row holds; output rows oy >= ho are padding: the forward ops write 0
 * there and the backward ops skip them (their dy / cols rows are not read). One formula
 * serves both cases: the image row stored for iy + pt = oy*sh + ky is (oy*sh + ky) - sbase,
 * sbase = pt unpartitioned and oy0*sh partitioned (struct tpu__win_geom). */
#include <math.h>
#include <string.h>

#include "ops_int.h"
#include "util.h"

/* The first and one-past-last window offset along one axis that land in the image: output
 * index o, stride s, padding p, kernel k, image size len. */
static void in_image(size_t o, size_t s, size_t p, size_t k, size_t len, size_t *lo, size_t *hi)
{
    const size_t start = o * s; /* the window's first input index + p */
    *lo = start < p ? p - start : 0;
    *hi = start + k > len + p ? len + p - start : k;
}

int tpu__win_geom_get(const struct tpu_op *op, uint32_t part, const char *role, size_t elems,
                      struct tpu__win_geom *g, struct tpu_diag *d)
{
    const struct tpu_window *wn = &op->attrs.win;
    const char *name = tpu_opcode_name(op->code);
    *g = (struct tpu__win_geom){.h = wn->h, .w = wn->w, .c = wn->c, .kh = wn->kh,
                                .kw = wn->kw, .sh = wn->sh, .sw = wn->sw, .pt = wn->pt,
                                .pl = wn->pl, .ho = wn->ho, .wo = wn->wo};
    g->parts = wn->parts > 1 ? wn->parts : 1;
    g->part = 0;
    g->hs = g->h, g->hos = g->ho, g->oy0 = 0, g->sbase = g->pt;
    /* all fields are below 2^32, so the products of two and the sums below fit 64 bits */
    size_t per = 0, k_cols = 0;
    if (!g->h || !g->w || !g->c || !g->kh || !g->kw || !g->sh || !g->sw || !g->ho || !g->wo ||
        g->pt >= g->kh || g->pl >= g->kw || (g->ho - 1) * g->sh > g->h - 1 + g->pt ||
        (g->wo - 1) * g->sw > g->w - 1 + g->pl)
        return tpu__fail(d, TPU_EINVAL,
                         "%s: window h=%zu w=%zu c=%zu kh=%zu kw=%zu sh=%zu sw=%zu pt=%zu "
                         "pl=%zu ho=%zu wo=%zu breaks the WINDOW rule (fields >= 1, pt < kh, "
                         "pl < kw, every window overlaps the image); verify the program",
                         name, g->h, g->w, g->c, g->kh, g->kw, g->sh, g->sw, g->pt, g->pl,
                         g->ho, g->wo);
    if (!tpu__mul_size(g->kh * g->kw, g->c, &k_cols) || k_cols >= TPU__OPS_ANY)
        return tpu__fail(d, TPU_EINVAL,
                         "%s: window kh*kw*c = %zu*%zu*%zu is 2^32-1 elements or more, but the "
                         "WINDOW rule wants fewer (the ops index a window in 32 bits): lower "
                         "kh, kw or c, and verify the program",
                         name, g->kh, g->kw, g->c);
    if (g->parts > 1) {
        if (part >= g->parts)
            return tpu__fail(d, TPU_EINVAL,
                             "%s: this core is logical core %u of its replica, but the "
                             "window is split over parts=%zu cores; load the program on a "
                             "device whose cores_per_replica is %zu",
                             name, (unsigned)part, g->parts, g->parts);
        struct tpu_window_part wp;
        tpu_window_part(wn, &wp);
        g->part = part;
        g->hos = (size_t)wp.hoc;
        g->oy0 = (size_t)part * g->hos;
        g->sbase = g->oy0 * g->sh;
        g->hs = (size_t)wp.ext;
    }
    if (!tpu__mul_size(g->hs * g->w, g->c, &per))
        return tpu__fail(d, TPU_EINVAL,
                         "%s: image rows*w*c = %zu*%zu*%zu elements overflows memory sizes; "
                         "lower h, w or c", name, g->hs, g->w, g->c);
    if (elems == 0 || elems % per != 0)
        return tpu__fail(d, TPU_ESHAPE,
                         "%s: operand %s has %zu elements, not a multiple N >= 1 of "
                         "%s*w*c = %zu",
                         name, role, elems, g->parts > 1 ? "E" : "h", per);
    g->n = elems / per;
    return 0;
}

uint32_t tpu__win_out_rows(const struct tpu__win_geom *g)
{
    size_t r;
    if (!tpu__mul_size(g->n, g->hos * g->wo, &r) || r >= TPU__OPS_ANY)
        return TPU__OPS_ANY - 1;
    return (uint32_t)r;
}

static int check_f32_elems(struct tpu_diag *d, const struct tpu_op *op, const char *role,
                           const struct tpu__bufmem *b, size_t elems)
{
    int rc = tpu__ops_check_buf(d, op, role, b, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc && tpu__ops_count(b) != elems)
        rc = tpu__fail(d, TPU_ESHAPE, "%s: operand %s has %zu elements but must have %zu "
                       "(N*h*w*c)", tpu_opcode_name(op->code), role, tpu__ops_count(b), elems);
    return rc;
}

void tpu__win_im2col(const struct tpu__win_geom *g, const void *x_, size_t esize, void *y_)
{
    const size_t k_cols = g->kh * g->kw * g->c;
    const unsigned char *x = x_;
    unsigned char *y = y_;
    for (size_t n = 0, r = 0; n < g->n; n++)
        for (size_t oy = g->oy0; oy < g->oy0 + g->hos; oy++)
            for (size_t ox = 0; ox < g->wo; ox++, r++) {
                unsigned char *row = y + r * k_cols * esize; /* [kh][kw][c] */
                if (oy >= g->ho) { /* a padding output row (partitioned) */
                    memset(row, 0, k_cols * esize);
                    continue;
                }
                for (size_t ky = 0; ky < g->kh; ky++)
                    for (size_t kx = 0; kx < g->kw; kx++) {
                        unsigned char *dst = row + (ky * g->kw + kx) * g->c * esize;
                        const size_t iy = oy * g->sh + ky, ix = ox * g->sw + kx; /* + pad */
                        if (iy < g->pt || iy - g->pt >= g->h || ix < g->pl ||
                            ix - g->pl >= g->w) {
                            memset(dst, 0, g->c * esize); /* +0 in f32 and in bf16 */
                            continue;
                        }
                        const unsigned char *src =
                            x + ((n * g->hs + iy - g->sbase) * g->w + ix - g->pl) * g->c * esize;
                        memcpy(dst, src, g->c * esize);
                    }
            }
}

void tpu__win_col2im(const struct tpu__win_geom *g, const float *cols, float *y)
{
    const size_t k_cols = g->kh * g->kw * g->c;
    memset(y, 0, g->n * g->hs * g->w * g->c * sizeof *y);
    for (size_t n = 0, r = 0; n < g->n; n++)
        for (size_t oy = g->oy0; oy < g->oy0 + g->hos; oy++)
            for (size_t ox = 0; ox < g->wo; ox++, r++) {
                const float *row = cols + r * k_cols;
                if (oy >= g->ho)
                    continue; /* a padding output row: not read */
                for (size_t ky = 0; ky < g->kh; ky++)
                    for (size_t kx = 0; kx < g->kw; kx++) {
                        const size_t iy = oy * g->sh + ky, ix = ox * g->sw + kx;
                        if (iy < g->pt || iy - g->pt >= g->h || ix < g->pl ||
                            ix - g->pl >= g->w)
                            continue;
                        float *dst =
                            y + ((n * g->hs + iy - g->sbase) * g->w + ix - g->pl) * g->c;
                        const float *src = row + (ky * g->kw + kx) * g->c;
                        for (size_t ci = 0; ci < g->c; ci++)
                            dst[ci] += src[ci];
                    }
            }
}

/* One pooling window's in-image rectangle: offsets [ky0, ky1) x [kx0, kx1) and the index
 * of its (ky0, kx0) element in the image at channel 0. */
struct win_pos {
    size_t ky0, ky1, kx0, kx1, base;
};

static void window_at(const struct tpu__win_geom *g, size_t n, size_t oy, size_t ox,
                      struct win_pos *p)
{
    in_image(oy, g->sh, g->pt, g->kh, g->h, &p->ky0, &p->ky1);
    in_image(ox, g->sw, g->pl, g->kw, g->w, &p->kx0, &p->kx1);
    const size_t iy = oy * g->sh + p->ky0 - g->sbase, ix = ox * g->sw + p->kx0 - g->pl;
    p->base = ((n * g->hs + iy) * g->w + ix) * g->c; /* iy: the stored row */
}

/* The image index of the first max of the window p at channel ci (max_pool's rule). */
static size_t argmax(const struct tpu__win_geom *g, const struct win_pos *p, size_t ci,
                     const float *x)
{
    size_t best = p->base + ci;
    float m = x[best];
    for (size_t ky = p->ky0; ky < p->ky1; ky++)
        for (size_t kx = p->kx0; kx < p->kx1; kx++) {
            const size_t at = p->base + ((ky - p->ky0) * g->w + (kx - p->kx0)) * g->c + ci;
            const float v = x[at];
            if (v > m || (isnan(v) && !isnan(m))) {
                m = v;
                best = at;
            }
        }
    return best;
}

/* max_pool, max_pool_grad, avg_pool, avg_pool_grad: x the image (NULL for avg_pool_grad),
 * dy the output gradient (NULL for the forward ops), out y or dx. */
static void pool(enum tpu_opcode code, const struct tpu__win_geom *g, const float *x,
                 const float *dy, float *out)
{
    const bool grad = code == TPU_OP_MAX_POOL_GRAD || code == TPU_OP_AVG_POOL_GRAD;
    if (grad)
        memset(out, 0, g->n * g->hs * g->w * g->c * sizeof *out);
    for (size_t n = 0, r = 0; n < g->n; n++)
        for (size_t oy = g->oy0; oy < g->oy0 + g->hos; oy++)
            for (size_t ox = 0; ox < g->wo; ox++, r++) {
                if (oy >= g->ho) { /* a padding output row (partitioned) */
                    if (!grad)
                        memset(out + r * g->c, 0, g->c * sizeof *out);
                    continue;
                }
                struct win_pos p;
                window_at(g, n, oy, ox, &p);
                const float count = (float)((p.ky1 - p.ky0) * (p.kx1 - p.kx0));
                for (size_t ci = 0; ci < g->c; ci++) {
                    const size_t o = r * g->c + ci; /* y, dy [N*ho*wo][c] */
                    if (code == TPU_OP_MAX_POOL) {
                        out[o] = x[argmax(g, &p, ci, x)];
                        continue;
                    }
                    if (code == TPU_OP_MAX_POOL_GRAD) {
                        out[argmax(g, &p, ci, x)] += dy[o];
                        continue;
                    }
                    const float share = grad ? dy[o] / count : 0.0f;
                    float s = 0.0f;
                    bool first = true;
                    for (size_t ky = p.ky0; ky < p.ky1; ky++)
                        for (size_t kx = p.kx0; kx < p.kx1; kx++) {
                            const size_t at =
                                p.base + ((ky - p.ky0) * g->w + (kx - p.kx0)) * g->c + ci;
                            if (grad)
                                out[at] += share;
                            else
                                s = first ? x[at] : s + x[at];
                            first = false;
                        }
                    if (!grad)
                        out[o] = s / count;
                }
            }
}

static int reshape(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    struct tpu__bufmem *y = &cx->bufs[op->out[0]];
    const struct tpu__bufmem *x = &cx->bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "x", x, -1, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, (int)x->dtype, TPU__OPS_ANY, TPU__OPS_ANY);
    if (rc)
        return rc;
    if (tpu__ops_count(x) != tpu__ops_count(y))
        return tpu__fail(d, TPU_ESHAPE, "reshape: y [%u][%u] has %zu elements but x [%u][%u] "
                         "has %zu; a reshape keeps the element count",
                         (unsigned)y->rows, (unsigned)y->cols, tpu__ops_count(y),
                         (unsigned)x->rows, (unsigned)x->cols, tpu__ops_count(x));
    if (tpu__ops_count(x))
        memmove(y->data, x->data, tpu__ops_count(x) * tpu_dtype_bytes(x->dtype));
    return 0;
}

int tpu__ops_window(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    if (op->code == TPU_OP_RESHAPE)
        return reshape(op, cx, d);
    struct tpu__bufmem *out = &cx->bufs[op->out[0]];
    const struct tpu__bufmem *in0 = &cx->bufs[op->in[0]];
    const char *out_role = tpu_opcode_operand_name(op->code, true, 0);
    const char *in_role = tpu_opcode_operand_name(op->code, false, 0);
    struct tpu__win_geom g;
    int rc;
    switch (op->code) {
    case TPU_OP_IM2COL:
    case TPU_OP_MAX_POOL:
    case TPU_OP_AVG_POOL: /* in0 is the image */
        rc = tpu__win_geom_get(op, cx->part, in_role, tpu__ops_count(in0), &g, d);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, in_role, in0, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, out_role, out, TPU_F32, tpu__win_out_rows(&g),
                                    (uint32_t)(op->code == TPU_OP_IM2COL ? g.kh * g.kw * g.c
                                                                         : g.c));
        if (rc)
            return rc;
        if (op->code == TPU_OP_IM2COL)
            tpu__win_im2col(&g, in0->data, sizeof(float), out->data);
        else
            pool(op->code, &g, in0->data, NULL, out->data);
        return 0;
    case TPU_OP_COL2IM:
    case TPU_OP_AVG_POOL_GRAD:
    case TPU_OP_MAX_POOL_GRAD: { /* the output is the image */
        rc = tpu__win_geom_get(op, cx->part, out_role, tpu__ops_count(out), &g, d);
        const bool cols = op->code == TPU_OP_COL2IM;
        const struct tpu__bufmem *x =
            op->code == TPU_OP_MAX_POOL_GRAD ? &cx->bufs[op->in[1]] : NULL;
        if (!rc)
            rc = check_f32_elems(d, op, out_role, out, g.n * g.hs * g.w * g.c);
        if (!rc && x)
            rc = check_f32_elems(d, op, "x", x, g.n * g.hs * g.w * g.c);
        if (!rc)
            rc = tpu__ops_check_buf(d, op, in_role, in0, TPU_F32, tpu__win_out_rows(&g),
                                    (uint32_t)(cols ? g.kh * g.kw * g.c : g.c));
        if (rc)
            return rc;
        if (cols)
            tpu__win_col2im(&g, in0->data, out->data);
        else
            pool(op->code, &g, x ? x->data : NULL, in0->data, out->data);
        return 0;
    }
    default:
        return tpu__fail(d, TPU_EINVAL, "%s is not a window op",
                         tpu_opcode_name(op->code));
    }
}
