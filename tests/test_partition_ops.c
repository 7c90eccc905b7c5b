/* Row partitioning's ops (program.h's "Row partitioning"), their values: the partitioned
 * window and conv ops, halo (f32 and bf16), halo_grad, row_mask, dropout_mask with a window,
 * all_reduce over the cores of a replica (values, order, timing), infeed core0. Their
 * verifier and load rules, text form and the halo's timing are test_partition_rules.c's.
 *
 * The partitioned forms run on a device with P cores per replica (the tiny preset, P / 2
 * chips): halo, then the op, then for the adjoints halo_grad. They are compared with the
 * unpartitioned op computed on one core (tpu__op_compute, the chip's own op function):
 *   - forward outputs (im2col, conv2d, max_pool, avg_pool): bit for bit on every real
 *     output row, +0 on the padding rows (oy >= ho), whatever the padding rows of the local
 *     images hold (the tests fill them with NaN);
 *   - halo: bit for bit against this file's own reference (ref_halo), from the definition;
 *   - halo_grad: bit for bit against ref_halo_grad, applied to the ext gradients the device
 *     computed;
 *   - adjoint chains (col2im, conv2d_grad_input, max_pool_grad, avg_pool_grad, then
 *     halo_grad): on a row that the ext windows of one core only cover, bit for bit (the
 *     core adds the same terms in the same order as the unpartitioned op, and halo_grad's
 *     first term starts its sum). On a row two cores cover, the terms are the same but
 *     grouped by core: core 0's partial sum plus core 1's instead of one running sum, so the
 *     bound is that of two recursive summations of at most T = kh*kw terms per element:
 *     |got - want| <= 2 * T * FLT_EPSILON * S, with S the sum of the terms' magnitudes
 *     (the unpartitioned adjoint of |dy| (and |w|), times 1.01 for its own rounding);
 *   - conv2d_grad_filter, all-reduced over the replica's cores: the same terms summed over
 *     the M = N*ho*wo windows in a different grouping: |got - want| <= 2 * M * FLT_EPSILON
 *     * S, S the GEMM of |patches| and |dy| computed here in double (times 1.01: bf16
 *     rounding of the inputs, passes=1, changes each product by less than 2^-7);
 *   - backward ops never read dy rows >= ho (NaN there would show). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/device.h"
#include "tpusim/program.h"
#include "ops/ops.h"
#include "device_helpers.h"
#include "partition_helpers.h"
#include "expect_same_bits.h"
#include "keras_window.h"
#include "xorshift.h"

/* ---- geometry ------------------------------------------------------------------------- */

struct case_ {
    struct tpu_window win; /* with parts = P */
    uint32_t n, f;         /* examples, filters */
    uint64_t hc, hoc, ext;
};

static struct case_ make_case(uint32_t h, uint32_t w, uint32_t c, uint32_t k, uint32_t s,
                              bool same, uint32_t parts)
{
    struct case_ t = {.n = 2, .f = 3};
    struct tpu_window *wn = &t.win;
    wn->h = h, wn->w = w, wn->c = c, wn->kh = k, wn->kw = k, wn->sh = s, wn->sw = s;
    keras_axis(h, k, s, same, &wn->ho, &wn->pt);
    keras_axis(w, k, s, same, &wn->wo, &wn->pl);
    wn->parts = parts;
    struct tpu_window_part wp;
    tpu_window_part(wn, &wp);
    t.hc = wp.hc, t.hoc = wp.hoc, t.ext = wp.ext;
    return t;
}

static void win_text(const struct tpu_window *w, uint32_t parts, char *buf, size_t size)
{
    snprintf(buf, size, "h=%u w=%u c=%u kh=%u kw=%u sh=%u sw=%u pt=%u pl=%u ho=%u wo=%u "
             "parts=%u", w->h, w->w, w->c, w->kh, w->kw, w->sh, w->sw, w->pt, w->pl, w->ho,
             w->wo, parts);
}

static float *random_f(struct rng *r, size_t n)
{
    float *p = alloc_f(n);
    for (size_t i = 0; i < n; i++)
        p[i] = rnd_f32(r, -1.0f, 1.0f);
    return p;
}

/* Core k's slice of `full` ([n][rows][row] elements): its `per` rows from k*per, the rows
 * at or past `rows` filled with NaN (padding the ops must not read). */
static float *slice_rows(const float *full, uint32_t n, uint64_t rows, uint64_t per, size_t row,
                         uint32_t k)
{
    float *p = alloc_f(n * per * row);
    for (uint32_t e = 0; e < n; e++)
        for (uint64_t i = 0; i < per; i++) {
            const uint64_t g = k * per + i;
            float *dst = p + (e * per + i) * row;
            for (size_t t = 0; t < row; t++)
                dst[t] = g < rows ? full[(e * rows + g) * row + t] : NAN;
        }
    return p;
}

/* ---- this file's reference of the halo ops (from program.h's definitions) ------------- */

static void ref_halo(const struct case_ *t, const float *full, uint32_t k, float *ext)
{
    const struct tpu_window *w = &t->win;
    const size_t row = (size_t)w->w * w->c;
    const int64_t r0 = (int64_t)k * (int64_t)t->hoc * w->sh - w->pt;
    for (uint32_t e = 0; e < t->n; e++)
        for (uint64_t j = 0; j < t->ext; j++) {
            const int64_t g = r0 + (int64_t)j;
            for (size_t q = 0; q < row; q++)
                ext[(e * t->ext + j) * row + q] =
                    g >= 0 && g < w->h ? full[(e * w->h + (uint64_t)g) * row + q] : 0.0f;
        }
}

static void ref_halo_grad(const struct case_ *t, float *const *dy, uint32_t k, float *dx)
{
    const struct tpu_window *w = &t->win;
    const size_t row = (size_t)w->w * w->c;
    for (uint32_t e = 0; e < t->n; e++)
        for (uint64_t i = 0; i < t->hc; i++)
            for (size_t q = 0; q < row; q++) {
                const int64_t g = (int64_t)(k * t->hc + i);
                float s = 0.0f;
                bool first = true;
                for (uint32_t p = 0; p < w->parts && g < w->h; p++) {
                    const int64_t j = g - ((int64_t)p * (int64_t)t->hoc * w->sh - w->pt);
                    if (j < 0 || j >= (int64_t)t->ext)
                        continue;
                    const float v = dy[p][(e * t->ext + (uint64_t)j) * row + q];
                    s = first ? v : s + v;
                    first = false;
                }
                dx[(e * t->hc + i) * row + q] = s;
            }
}

/* How many cores' ext windows cover global row g. */
static unsigned covering(const struct case_ *t, int64_t g)
{
    unsigned n = 0;
    for (uint32_t p = 0; p < t->win.parts; p++) {
        const int64_t j = g - ((int64_t)p * (int64_t)t->hoc * t->win.sh - t->win.pt);
        n += j >= 0 && j < (int64_t)t->ext;
    }
    return n;
}

/* ---- the unpartitioned op on one core ------------------------------------------------- */

/* out = op(in0, in1) with the case's window unpartitioned; buffers as 1-row matrices of
 * their element counts except the ones whose shape the op checks ([rows][cols] given). */
static void one_core(enum tpu_opcode code, const struct case_ *t, float *out, uint32_t out_r,
                     uint32_t out_c, const float *in0, uint32_t in0_r, uint32_t in0_c,
                     const float *in1, uint32_t in1_r, uint32_t in1_c)
{
    struct tpu__bufmem b[3] = {{out, TPU_F32, out_r, out_c},
                               {(void *)(uintptr_t)in0, TPU_F32, in0_r, in0_c},
                               {(void *)(uintptr_t)in1, TPU_F32, in1_r, in1_c}};
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = 0, op.in[0] = 1;
    if (tpu_opcode_n_in(code) > 1)
        op.in[1] = 2;
    op.attrs.win = t->win;
    op.attrs.win.parts = 0;
    struct tpu_diag d = {0};
    if (tpu__op_compute(&op, b, NULL, tiny().mxu_rows, 1, NULL, &d) != 0)
        fail_msg("%s on one core: %s", tpu_opcode_name(code), d.msg);
}

/* Core k's local out `got` ([n][hoc][wo][cols]) against the unpartitioned `want`
 * ([n][ho][wo][cols]): bit for bit on real rows, +0 on padding rows. */
static void expect_local_out(const struct case_ *t, uint32_t k, const float *got,
                             const float *want, size_t cols, const char *what)
{
    const size_t row = t->win.wo * cols;
    for (uint32_t e = 0; e < t->n; e++)
        for (uint64_t i = 0; i < t->hoc; i++) {
            const uint64_t oy = k * t->hoc + i;
            const float *g = got + (e * t->hoc + i) * row;
            if (oy < t->win.ho) {
                expect_same(g, want + (e * t->win.ho + oy) * row, row, what);
                continue;
            }
            for (size_t q = 0; q < row; q++)
                if (g[q] != 0.0f || signbit(g[q]))
                    fail_msg("%s: core %u padding output row %llu holds %g, not +0", what, k,
                             (unsigned long long)oy, (double)g[q]);
        }
}

/* Core k's local image gradient `got` against the unpartitioned `want` ([n][h][w*c]):
 * exact on rows one core covers, within 2*T*eps*S elsewhere; +0 on padding rows. */
static void expect_local_grad(const struct case_ *t, uint32_t k, const float *got,
                              const float *want, const float *abs_want, const char *what)
{
    const size_t row = (size_t)t->win.w * t->win.c;
    const double tol = 2.0 * t->win.kh * t->win.kw * FLT_EPSILON * 1.01;
    double worst = 0;
    for (uint32_t e = 0; e < t->n; e++)
        for (uint64_t i = 0; i < t->hc; i++) {
            const uint64_t gr = k * t->hc + i;
            const float *g = got + (e * t->hc + i) * row;
            if (gr >= t->win.h) {
                for (size_t q = 0; q < row; q++)
                    if (g[q] != 0.0f || signbit(g[q]))
                        fail_msg("%s: core %u padding row %llu holds %g", what, k,
                                 (unsigned long long)gr, (double)g[q]);
                continue;
            }
            const float *w = want + (e * t->win.h + gr) * row;
            const float *a = abs_want + (e * t->win.h + gr) * row;
            if (covering(t, (int64_t)gr) <= 1) {
                expect_same(g, w, row, what);
                continue;
            }
            for (size_t q = 0; q < row; q++) {
                const double diff = fabs((double)g[q] - (double)w[q]);
                if (diff > tol * a[q])
                    fail_msg("%s: core %u row %llu [%zu]: got %.9g want %.9g, |diff| %.3g > "
                             "bound %.3g", what, k, (unsigned long long)gr, q, (double)g[q],
                             (double)w[q], diff, tol * a[q]);
                if (diff > worst)
                    worst = diff;
            }
        }
    (void)worst;
}

/* Checks the halo output `xe` of every core against ref_halo, and the halo_grad output
 * `dxname` against ref_halo_grad of the ext gradients `dxe` the cores computed. */
static void check_halos(struct part_run *r, const struct case_ *t, const float *x_full,
                        const char *dxe, const char *dxname)
{
    const uint32_t P = t->win.parts;
    const size_t row = (size_t)t->win.w * t->win.c;
    float *ext_g[8], *ref = alloc_f(t->n * t->ext * row), *dref = alloc_f(t->n * t->hc * row);
    for (uint32_t k = 0; k < P; k++) {
        float *xe = get(r, k, "xe");
        ref_halo(t, x_full, k, ref);
        expect_same(xe, ref, t->n * t->ext * row, "halo");
        free(xe);
        ext_g[k] = get(r, k, dxe);
    }
    for (uint32_t k = 0; k < P; k++) {
        float *dx = get(r, k, dxname);
        ref_halo_grad(t, ext_g, k, dref);
        expect_same(dx, dref, t->n * t->hc * row, "halo_grad");
        free(dx);
    }
    for (uint32_t k = 0; k < P; k++)
        free(ext_g[k]);
    free(ref);
    free(dref);
}

static float *abs_copy(const float *v, size_t n)
{
    float *a = alloc_f(n);
    for (size_t i = 0; i < n; i++)
        a[i] = fabsf(v[i]);
    return a;
}

/* im2col, conv2d, col2im, conv2d_grad_input, conv2d_grad_filter partitioned vs one core. */
static void conv_case(const struct case_ *t, uint64_t seed)
{
    const struct tpu_window *w = &t->win;
    const uint32_t P = w->parts, N = t->n, f = t->f, row = w->w * w->c;
    const uint32_t kc = w->kh * w->kw * w->c, M = N * w->ho * w->wo;
    const uint32_t Ml = (uint32_t)(N * t->hoc * w->wo);
    const size_t img = (size_t)N * w->h * row;
    char win[160], text[4096];
    win_text(w, P, win, sizeof win);
    snprintf(text, sizeof text,
             "program conv\n"
             "param xl: f32[%llu, %u]\nparam wk: f32[%u, %u]\nparam dyl: f32[%u, %u]\n"
             "param colsl: f32[%u, %u]\nparam xe: f32[%llu, %u]\nparam pim: f32[%u, %u]\n"
             "param yc: f32[%u, %u]\nparam dxe1: f32[%llu, %u]\nparam dx1: f32[%llu, %u]\n"
             "param dxe2: f32[%llu, %u]\nparam dx2: f32[%llu, %u]\nparam dw: f32[%u, %u]\n"
             "param dws: f32[%u, %u]\n"
             "xe = halo xl %s\npim = im2col xe %s\nyc = conv2d xe, wk %s\n"
             "dxe1 = col2im colsl %s\ndx1 = halo_grad dxe1 %s\n"
             "dxe2 = conv2d_grad_input dyl, wk %s\ndx2 = halo_grad dxe2 %s\n"
             "dw = conv2d_grad_filter xe, dyl %s\n"
             "dws = all_reduce dw reduce=sum group=replica_cores\n",
             (unsigned long long)(N * t->hc), row, kc, f, Ml, f, Ml, kc,
             (unsigned long long)(N * t->ext), row, Ml, kc, Ml, f,
             (unsigned long long)(N * t->ext), row, (unsigned long long)(N * t->hc), row,
             (unsigned long long)(N * t->ext), row, (unsigned long long)(N * t->hc), row, kc, f,
             kc, f, win, win, win, win, win, win, win, win);
    struct rng rg = {seed};
    float *x = random_f(&rg, img), *wk = random_f(&rg, (size_t)kc * f);
    float *dy = random_f(&rg, (size_t)M * f), *cols = random_f(&rg, (size_t)M * kc);
    /* one core */
    float *pim = alloc_f((size_t)M * kc), *yc = alloc_f((size_t)M * f), *dx1 = alloc_f(img);
    float *dx2 = alloc_f(img), *dw = alloc_f((size_t)kc * f), *adx1 = alloc_f(img);
    float *adx2 = alloc_f(img);
    float *acols = abs_copy(cols, (size_t)M * kc), *ady = abs_copy(dy, (size_t)M * f);
    float *awk = abs_copy(wk, (size_t)kc * f);
    one_core(TPU_OP_IM2COL, t, pim, M, kc, x, 1, (uint32_t)img, NULL, 0, 0);
    one_core(TPU_OP_CONV2D, t, yc, M, f, x, 1, (uint32_t)img, wk, kc, f);
    one_core(TPU_OP_COL2IM, t, dx1, 1, (uint32_t)img, cols, M, kc, NULL, 0, 0);
    one_core(TPU_OP_COL2IM, t, adx1, 1, (uint32_t)img, acols, M, kc, NULL, 0, 0);
    one_core(TPU_OP_CONV2D_GRAD_INPUT, t, dx2, 1, (uint32_t)img, dy, M, f, wk, kc, f);
    one_core(TPU_OP_CONV2D_GRAD_INPUT, t, adx2, 1, (uint32_t)img, ady, M, f, awk, kc, f);
    one_core(TPU_OP_CONV2D_GRAD_FILTER, t, dw, kc, f, x, 1, (uint32_t)img, dy, M, f);
    /* partitioned */
    struct part_run r = run_start(text, P, 0);
    for (uint32_t k = 0; k < P; k++) {
        float *xl = slice_rows(x, N, w->h, t->hc, row, k);
        float *dyl = slice_rows(dy, N, w->ho, t->hoc, (size_t)w->wo * f, k);
        float *cl = slice_rows(cols, N, w->ho, t->hoc, (size_t)w->wo * kc, k);
        put(&r, k, "xl", xl), put(&r, k, "wk", wk), put(&r, k, "dyl", dyl);
        put(&r, k, "colsl", cl);
        free(xl), free(dyl), free(cl);
    }
    go(&r);
    check_halos(&r, t, x, "dxe1", "dx1");
    check_halos(&r, t, x, "dxe2", "dx2");
    for (uint32_t k = 0; k < P; k++) {
        float *g;
        expect_local_out(t, k, g = get(&r, k, "pim"), pim, kc, "im2col"), free(g);
        expect_local_out(t, k, g = get(&r, k, "yc"), yc, f, "conv2d"), free(g);
        expect_local_grad(t, k, g = get(&r, k, "dx1"), dx1, adx1, "col2im"), free(g);
        expect_local_grad(t, k, g = get(&r, k, "dx2"), dx2, adx2, "conv2d_grad_input"), free(g);
    }
    /* dw: the all-reduced partial sums, the same on every core */
    float *dws = get(&r, 0, "dws");
    for (uint32_t k = 1; k < P; k++) {
        float *o = get(&r, k, "dws");
        expect_same(o, dws, (size_t)kc * f, "dw on every core");
        free(o);
    }
    for (uint32_t a = 0; a < kc; a++)
        for (uint32_t b = 0; b < f; b++) {
            double s = 0;
            for (uint32_t m = 0; m < M; m++)
                s += fabs((double)pim[(size_t)m * kc + a]) * fabs((double)dy[(size_t)m * f + b]);
            const double tol = 2.0 * M * FLT_EPSILON * s * 1.01;
            const double diff = fabs((double)dws[a * f + b] - (double)dw[a * f + b]);
            if (diff > tol)
                fail_msg("conv2d_grad_filter [%u][%u]: got %.9g want %.9g, |diff| %.3g > %.3g",
                         a, b, (double)dws[a * f + b], (double)dw[a * f + b], diff, tol);
        }
    free(dws);
    run_end(&r);
    float *all[] = {x, wk, dy, cols, pim, yc, dx1, dx2, dw, adx1, adx2, acols, ady, awk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void test_conv_ops_partitioned(void **state)
{
    (void)state;
    static const uint32_t parts[] = {2, 4, 8}, ks[] = {1, 2, 3, 5}, ss[] = {1, 2};
    uint64_t seed = 1;
    for (size_t p = 0; p < 3; p++)
        for (size_t k = 0; k < 4; k++)
            for (size_t s = 0; s < 2; s++)
                for (int same = 0; same < 2; same++) {
                    const struct case_ t = make_case(28, 5, 2, ks[k], ss[s], same, parts[p]);
                    conv_case(&t, ++seed);
                }
    /* uneven: 13 rows over 2, 4 and 8 cores (the last cores hold padding only) */
    for (size_t p = 0; p < 3; p++) {
        const struct case_ t = make_case(13, 4, 3, 3, 1, true, parts[p]);
        conv_case(&t, ++seed);
        const struct case_ u = make_case(13, 4, 3, 2, 2, false, parts[p]);
        conv_case(&u, ++seed);
    }
}

/* max_pool, avg_pool and their gradients partitioned vs one core. */
static void pool_case(const struct case_ *t, uint64_t seed)
{
    const struct tpu_window *w = &t->win;
    const uint32_t P = w->parts, N = t->n, c = w->c, row = w->w * w->c;
    const uint32_t M = N * w->ho * w->wo, Ml = (uint32_t)(N * t->hoc * w->wo);
    const size_t img = (size_t)N * w->h * row;
    char win[160], text[4096];
    win_text(w, P, win, sizeof win);
    const unsigned long long ext_rows = N * t->ext, hc_rows = N * t->hc;
    snprintf(text, sizeof text,
             "program pool\n"
             "param xl: f32[%llu, %u]\nparam dyl: f32[%u, %u]\nparam xe: f32[%llu, %u]\n"
             "param ym: f32[%u, %u]\nparam ya: f32[%u, %u]\n"
             "param dxe1: f32[%llu, %u]\nparam dx1: f32[%llu, %u]\n"
             "param dxe2: f32[%llu, %u]\nparam dx2: f32[%llu, %u]\n"
             "xe = halo xl %s\nym = max_pool xe %s\nya = avg_pool xe %s\n"
             "dxe1 = max_pool_grad dyl, xe %s\ndx1 = halo_grad dxe1 %s\n"
             "dxe2 = avg_pool_grad dyl %s\ndx2 = halo_grad dxe2 %s\n",
             hc_rows, row, Ml, c, ext_rows, row, Ml, c, Ml, c, ext_rows, row, hc_rows, row,
             ext_rows, row, hc_rows, row, win, win, win, win, win, win, win);
    struct rng rg = {seed};
    float *x = random_f(&rg, img), *dy = random_f(&rg, (size_t)M * c);
    float *ady = abs_copy(dy, (size_t)M * c);
    float *ym = alloc_f((size_t)M * c), *ya = alloc_f((size_t)M * c), *dx1 = alloc_f(img);
    float *dx2 = alloc_f(img), *adx1 = alloc_f(img), *adx2 = alloc_f(img);
    one_core(TPU_OP_MAX_POOL, t, ym, M, c, x, 1, (uint32_t)img, NULL, 0, 0);
    one_core(TPU_OP_AVG_POOL, t, ya, M, c, x, 1, (uint32_t)img, NULL, 0, 0);
    one_core(TPU_OP_MAX_POOL_GRAD, t, dx1, 1, (uint32_t)img, dy, M, c, x, 1, (uint32_t)img);
    one_core(TPU_OP_MAX_POOL_GRAD, t, adx1, 1, (uint32_t)img, ady, M, c, x, 1, (uint32_t)img);
    one_core(TPU_OP_AVG_POOL_GRAD, t, dx2, 1, (uint32_t)img, dy, M, c, NULL, 0, 0);
    one_core(TPU_OP_AVG_POOL_GRAD, t, adx2, 1, (uint32_t)img, ady, M, c, NULL, 0, 0);
    struct part_run r = run_start(text, P, 0);
    for (uint32_t k = 0; k < P; k++) {
        float *xl = slice_rows(x, N, w->h, t->hc, row, k);
        float *dyl = slice_rows(dy, N, w->ho, t->hoc, (size_t)w->wo * c, k);
        put(&r, k, "xl", xl), put(&r, k, "dyl", dyl);
        free(xl), free(dyl);
    }
    go(&r);
    check_halos(&r, t, x, "dxe1", "dx1");
    check_halos(&r, t, x, "dxe2", "dx2");
    for (uint32_t k = 0; k < P; k++) {
        float *g;
        expect_local_out(t, k, g = get(&r, k, "ym"), ym, c, "max_pool"), free(g);
        expect_local_out(t, k, g = get(&r, k, "ya"), ya, c, "avg_pool"), free(g);
        expect_local_grad(t, k, g = get(&r, k, "dx1"), dx1, adx1, "max_pool_grad"), free(g);
        expect_local_grad(t, k, g = get(&r, k, "dx2"), dx2, adx2, "avg_pool_grad"), free(g);
    }
    run_end(&r);
    float *all[] = {x, dy, ady, ym, ya, dx1, dx2, adx1, adx2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void test_pool_ops_partitioned(void **state)
{
    (void)state;
    static const uint32_t parts[] = {2, 4, 8};
    uint64_t seed = 100;
    for (size_t p = 0; p < 3; p++) {
        const uint32_t hs[] = {28, 13};
        for (size_t i = 0; i < 2; i++) {
            struct case_ t = make_case(hs[i], 6, 2, 2, 2, false, parts[p]); /* 2x2/2 */
            pool_case(&t, ++seed);
            t = make_case(hs[i], 6, 2, 3, 2, true, parts[p]); /* 3x3/2 same */
            pool_case(&t, ++seed);
            t = make_case(hs[i], 5, 3, 3, 1, true, parts[p]); /* 3x3/1 same */
            pool_case(&t, ++seed);
        }
    }
}

/* ---- row_mask, dropout_mask with a window ------------------------------------------- */

static void test_row_mask(void **state)
{
    (void)state;
    /* h = 13 over 4 cores: hc = 4; core 3 holds row 12 and three padding rows */
    struct part_run r = run_start("program m\nparam y: f32[8, 6]\n"
                                  "y = row_mask h=13 w=3 c=2 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 "
                                  "ho=13 wo=3 parts=4\n", 4, 0);
    go(&r);
    for (uint32_t k = 0; k < 4; k++) {
        float *y = get(&r, k, "y");
        for (uint32_t e = 0; e < 2; e++)
            for (uint32_t i = 0; i < 4; i++)
                for (uint32_t q = 0; q < 6; q++) {
                    const float want = k * 4 + i < 13 ? 1.0f : 0.0f;
                    if (y[(e * 4 + i) * 6 + q] != want)
                        fail_msg("row_mask core %u example %u row %u: %g, want %g", k, e, i,
                                 (double)y[(e * 4 + i) * 6 + q], (double)want);
                }
        free(y);
    }
    run_end(&r);
}

static void test_dropout_mask_parts(void **state)
{
    (void)state;
    /* 2 replicas of 2 cores, N = 3 images of h = 5 rows (hc = 3: core 1's last row is
     * padding), w = 2, c = 2; against the unpartitioned mask of 2 replicas of one core */
    const char *win = "h=5 w=2 c=2 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=5 wo=2";
    char text[512];
    snprintf(text, sizeof text, "program d\nvar step\nparam m: f32[9, 4]\n"
             "m = dropout_mask var=step imm=77 alpha=0.5 %s parts=2\n", win);
    struct part_run r = run_start(text, 2, 2);
    assert_int_equal(tpu_device_set_var(r.dev, 0, 41), 0);
    go(&r);
    struct part_run u = run_start("program d\nvar step\nparam m: f32[15, 4]\n"
                                  "m = dropout_mask var=step imm=77 alpha=0.5\n", 1, 1);
    assert_int_equal(tpu_device_set_var(u.dev, 0, 41), 0);
    go(&u);
    for (uint32_t rep = 0; rep < 2; rep++) {
        float *full = get(&u, rep, "m"); /* [3][5][2][2] */
        size_t zeros = 0;
        for (uint32_t k = 0; k < 2; k++) {
            float *m = get(&r, rep * 2 + k, "m"); /* [3][3][2][2] */
            for (uint32_t e = 0; e < 3; e++)
                for (uint32_t i = 0; i < 3; i++) {
                    const uint32_t g = k * 3 + i;
                    const float *got = m + (e * 3 + i) * 4;
                    if (g < 5) {
                        expect_same(got, full + (e * 5 + g) * 4, 4, "dropout_mask rows");
                        for (int q = 0; q < 4; q++)
                            zeros += got[q] == 0.0f;
                        continue;
                    }
                    for (int q = 0; q < 4; q++)
                        assert_true(got[q] == 0.0f);
                }
            free(m);
        }
        assert_true(zeros > 0 && zeros < 60); /* a real mask: some dropped, some kept */
        free(full);
    }
    run_end(&r);
    run_end(&u);
}

/* ---- all_reduce over a replica's cores, infeed core0 ------------------------------------ */

static void test_all_reduce_group(void **state)
{
    (void)state;
    /* 2 replicas of 4 cores (4 chips of the tiny preset). The values make the order show:
     * ((a + b) + c) + d with a = 1e8, b = 1, c = -1e8, d = 1 is 1 in f32 (1e8 + 1 rounds
     * to 1e8); other orders give 0 or 2. */
    struct part_run r = run_start("program a\nparam x: f32[1, 2]\nparam s: f32[1, 2]\n"
                                  "param m: f32[1, 2]\n"
                                  "param o: f32[1, 2]\n"
                                  "s = all_reduce x reduce=sum group=replica_cores\n"
                                  "m = all_reduce x reduce=mean group=replica_cores\n"
                                  "o = all_reduce x reduce=sum\n", 4, 4);
    const float vals[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    for (uint32_t c = 0; c < 8; c++) {
        const float x[2] = {vals[c % 4], (float)(c / 4 + 1) * (float)(c % 4)};
        put(&r, c, "x", x);
    }
    go(&r);
    for (uint32_t c = 0; c < 8; c++) {
        float *s = get(&r, c, "s"), *m = get(&r, c, "m");
        const float rep = (float)(c / 4 + 1);
        const float want0 = ((vals[0] + vals[1]) + vals[2]) + vals[3];
        const float want1 = ((0.0f + rep) + 2.0f * rep) + 3.0f * rep;
        assert_true(want0 == 1.0f);
        assert_true(s[0] == want0 && s[1] == want1);
        assert_true(m[0] == want0 / 4.0f && m[1] == want1 / 4.0f);
        free(s), free(m);
        /* timing: the all-reduce formula with each group's placement (timing.c), 8 bytes.
         * Over the replica's 4 cores, 2 on each of 2 chips: on chip 2*(2-1)/2 * 8 B at
         * 8 GB/s = 1 ns, across the 2-chip ring 2*(2-1)/2 * 8 B over 2 links of 10 GB/s =
         * 0.4 ns, plus 2*(2-1) hops of 500 ns: ceil(1.4) + 1000 = 1002 cycles. Over the 2
         * replicas (cores c and c+4, on chips 2 apart), one core per chip: ceil(0.4) + 1000
         * = 1001. */
        struct tpu_op_stats st[3];
        struct tpu_diag d = {0};
        assert_int_equal(tpu_device_op_stats(r.dev, c, st, 3, &d), 0);
        assert_int_equal(st[0].busy[TPU_UNIT_ICI], 1002);
        assert_int_equal(st[1].busy[TPU_UNIT_ICI], 1002);
        assert_int_equal(st[2].busy[TPU_UNIT_ICI], 1001);
    }
    run_end(&r);
}

static void test_infeed_core0(void **state)
{
    (void)state;
    /* 2 replicas of 2 cores: logical core 0 of each (cores 0 and 2) dequeues; cores 1 and
     * 3 take nothing (their queues keep what is on them) and their x is zeros. The lowering
     * then broadcasts with a sum over the replica's cores. */
    struct part_run r = run_start("program f\ntemp x: f32[2, 2]\nparam y: f32[2, 2]\n"
                                  "param b: f32[2, 2]\n"
                                  "x = infeed core0\ny = scale x alpha=1\n"
                                  "b = all_reduce x reduce=sum group=replica_cores\n", 2, 2);
    const float in0[4] = {1, 2, 3, 4}, in2[4] = {5, 6, 7, 8}, junk[4] = {9, 9, 9, 9};
    const float ones[4] = {1, 1, 1, 1};
    put(&r, 1, "y", ones), put(&r, 3, "y", ones);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_infeed(r.dev, 0, in0, sizeof in0, 0, &d), 0);
    assert_int_equal(tpu_device_infeed(r.dev, 2, in2, sizeof in2, 0, &d), 0);
    assert_int_equal(tpu_device_infeed(r.dev, 1, junk, sizeof junk, 0, &d), 0);
    go(&r);
    const float zero[4] = {0, 0, 0, 0};
    const float *want[4] = {in0, zero, in2, zero}, *bcast[4] = {in0, in0, in2, in2};
    for (uint32_t c = 0; c < 4; c++) {
        float *y = get(&r, c, "y"), *b = get(&r, c, "b");
        expect_same(y, want[c], 4, "infeed core0 y");
        expect_same(b, bcast[c], 4, "broadcast");
        free(y), free(b);
        struct tpu_core_counters ctr;
        assert_int_equal(tpu_device_counters(r.dev, c, &ctr), 0);
        assert_int_equal(ctr.infeed_bytes, c % 2 == 0 ? sizeof in0 : 0);
    }
    /* three pushes and two pops: core 1's tensor is still on its queue */
    struct tpu_device_watch w;
    tpu_device_watch(r.dev, &w);
    assert_int_equal(w.moves, 5);
    run_end(&r);
}

static void test_halo_bf16(void **state)
{
    (void)state;
    /* halo copies rows of any element size: bf16, 8 rows over 2 cores (WIN8: E = 6) */
    struct part_run r = run_start("program b\nparam xl: bf16[4, 8]\nparam xe: bf16[6, 8]\n"
                                  "xe = halo xl " WIN8 " parts=2\n", 2, 1);
    uint16_t full[8][8], loc[2][4][8];
    for (int g = 0; g < 8; g++)
        for (int q = 0; q < 8; q++)
            full[g][q] = (uint16_t)(0x3f80 + g * 8 + q), loc[g / 4][g % 4][q] = full[g][q];
    for (uint32_t k = 0; k < 2; k++) {
        struct tpu_diag d = {0};
        assert_int_equal(tpu_device_write(r.dev, k, 0, loc[k], sizeof loc[k], &d), 0);
    }
    go(&r);
    for (uint32_t k = 0; k < 2; k++) {
        uint16_t ext[6][8];
        struct tpu_diag d = {0};
        assert_int_equal(tpu_device_read(r.dev, k, 1, ext, sizeof ext, &d), 0);
        for (int j = 0; j < 6; j++) {
            const int g = (int)k * 4 - 1 + j; /* r0 = k*hoc*sh - pt */
            for (int q = 0; q < 8; q++)
                assert_int_equal(ext[j][q], g >= 0 && g < 8 ? full[g][q] : 0);
        }
    }
    run_end(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_ops_partitioned),
        cmocka_unit_test(test_pool_ops_partitioned),
        cmocka_unit_test(test_row_mask),
        cmocka_unit_test(test_dropout_mask_parts),
        cmocka_unit_test(test_all_reduce_group),
        cmocka_unit_test(test_infeed_core0),
        cmocka_unit_test(test_halo_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
