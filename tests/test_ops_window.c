/* The window ops (im2col, col2im, max_pool, max_pool_grad, avg_pool, avg_pool_grad) and
 * reshape (sim/ops/ops_window.c, through tpu__op_compute) against naive loops written here,
 * and their timing (sim/chip/timing.c) against counts worked out by hand.
 *
 * Every comparison is exact (bit for bit): the ops round only in avg_pool's division, the
 * sums of col2im and avg_pool, and the adds of the gradients, whose orders program.h fixes and
 * the references below repeat. conv2d = im2col + matmul is compared with a direct
 * convolution: matmul rounds its inputs to bf16 unless passes=6, so the test uses passes=6
 * and small integer values, for which every product and sum is exact in fp32 (|sum| < 2^24)
 * and the result must equal the direct convolution exactly (tolerance 0). Geometries are
 * Keras's 'same' and 'valid' with odd sizes, strides 1 and 2 and N = 1 or 2. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/program.h"
#include "chip/timing.h"
#include "ops/ops.h"
#include "xorshift.h"
#include "op_bufs.h"
#include "expect_same_bits.h"
#include "keras_window.h"

#define X TPU_NO_BUF

/* ---- geometry and buffers ----------------------------------------------------------------- */

struct geo {
    uint32_t n, h, w, c, kh, kw, sh, sw, pt, pl, ho, wo;
};

/* Keras's 'same' (ho = ceil(h / s), the padding split with the smaller half before) or
 * 'valid' (ho = (h - k) / s + 1, no padding). */
static struct geo make_geo(uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t kh,
                           uint32_t kw, uint32_t sh, uint32_t sw, bool same)
{
    struct geo g = {n, h, w, c, kh, kw, sh, sw, 0, 0, 0, 0};
    keras_axis(h, kh, sh, same, &g.ho, &g.pt);
    keras_axis(w, kw, sw, same, &g.wo, &g.pl);
    return g;
}

static struct tpu_window win_of(const struct geo *g)
{
    return (struct tpu_window){g->h, g->w, g->c, g->kh, g->kw, g->sh, g->sw,
                               g->pt, g->pl, g->ho, g->wo, 0};
}

static size_t img_elems(const struct geo *g)
{
    return (size_t)g->n * g->h * g->w * g->c;
}

static size_t win_rows(const struct geo *g)
{
    return (size_t)g->n * g->ho * g->wo;
}

/* The image index of (n, iy, ix, ci), or -1 on padding. */
static long pix(const struct geo *g, uint32_t n, long iy, long ix, uint32_t ci)
{
    if (iy < 0 || ix < 0 || iy >= (long)g->h || ix >= (long)g->w)
        return -1;
    return (((long)n * g->h + iy) * g->w + ix) * g->c + ci;
}

/* The image index read by output (n, oy, ox) at window offset (ky, kx), channel ci. */
static long at(const struct geo *g, uint32_t n, uint32_t oy, uint32_t ox, uint32_t ky,
               uint32_t kx, uint32_t ci)
{
    return pix(g, n, (long)oy * g->sh + ky - g->pt, (long)ox * g->sw + kx - g->pl, ci);
}

static struct tpu_op mkop(enum tpu_opcode code, uint32_t out, uint32_t in0, uint32_t in1,
                          const struct geo *g)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = out;
    op.in[0] = in0;
    op.in[1] = in1;
    if (g)
        op.attrs.win = win_of(g);
    return op;
}

static int run(const struct tpu_op *op, struct bufs *s, struct tpu_diag *d)
{
    int64_t vars[1] = {0};
    return tpu__op_compute(op, s->b, vars, 8, 1, NULL, d);
}

static void run_ok(const struct tpu_op *op, struct bufs *s)
{
    struct tpu_diag d = {0, ""};
    if (run(op, s, &d) != 0)
        fail_msg("%s: %s", tpu_opcode_name(op->code), d.msg);
}

static void expect_error(int rc, const struct tpu_diag *d, int code, const char *frag1,
                         const char *frag2)
{
    if (rc != code)
        fail_msg("got %d (want %d): %s", rc, code, d->msg);
    if (!strstr(d->msg, frag1) || (frag2 && !strstr(d->msg, frag2)))
        fail_msg("message \"%s\" lacks \"%s\" or \"%s\"", d->msg, frag1, frag2 ? frag2 : "");
}

static void fill(struct rng *r, float *v, size_t count, bool integers)
{
    for (size_t i = 0; i < count; i++)
        v[i] = integers ? (float)((int)rnd_below(r, 9) - 4)
                        : (float)((double)(rnd(r) >> 40) / (double)(1u << 21) - 4.0);
}

/* ---- naive references ------------------------------------------------------------------------ */

static void ref_im2col(const struct geo *g, const float *x, float *y)
{
    const size_t k_cols = (size_t)g->kh * g->kw * g->c;
    for (uint32_t n = 0; n < g->n; n++)
        for (uint32_t oy = 0; oy < g->ho; oy++)
            for (uint32_t ox = 0; ox < g->wo; ox++)
                for (uint32_t ky = 0; ky < g->kh; ky++)
                    for (uint32_t kx = 0; kx < g->kw; kx++)
                        for (uint32_t ci = 0; ci < g->c; ci++) {
                            size_t row = ((size_t)n * g->ho + oy) * g->wo + ox;
                            size_t col = ((size_t)ky * g->kw + kx) * g->c + ci;
                            long i = at(g, n, oy, ox, ky, kx, ci);
                            y[row * k_cols + col] = i < 0 ? 0.0f : x[i];
                        }
}

/* y = 0, then cols rows in order, columns in order */
static void ref_col2im(const struct geo *g, const float *cols, float *y)
{
    const size_t k_cols = (size_t)g->kh * g->kw * g->c;
    for (size_t i = 0; i < img_elems(g); i++)
        y[i] = 0.0f;
    for (size_t row = 0; row < win_rows(g); row++)
        for (size_t col = 0; col < k_cols; col++) {
            uint32_t n = (uint32_t)(row / ((size_t)g->ho * g->wo));
            uint32_t oy = (uint32_t)(row / g->wo % g->ho), ox = (uint32_t)(row % g->wo);
            uint32_t ky = (uint32_t)(col / ((size_t)g->kw * g->c));
            uint32_t kx = (uint32_t)(col / g->c % g->kw), ci = (uint32_t)(col % g->c);
            long i = at(g, n, oy, ox, ky, kx, ci);
            if (i >= 0)
                y[i] += cols[row * k_cols + col];
        }
}

/* The first (ky, kx) in-image index holding the window's max (no NaNs in the tests' data). */
static long ref_argmax(const struct geo *g, const float *x, uint32_t n, uint32_t oy,
                       uint32_t ox, uint32_t ci)
{
    long best = -1;
    for (uint32_t ky = 0; ky < g->kh; ky++)
        for (uint32_t kx = 0; kx < g->kw; kx++) {
            long i = at(g, n, oy, ox, ky, kx, ci);
            if (i >= 0 && (best < 0 || x[i] > x[best]))
                best = i;
        }
    assert_true(best >= 0); /* every window overlaps the image */
    return best;
}

/* Pooling references: code says which; dy is NULL for the forward ops. */
static void ref_pool(enum tpu_opcode code, const struct geo *g, const float *x, const float *dy,
                     float *out)
{
    const bool grad = code == TPU_OP_MAX_POOL_GRAD || code == TPU_OP_AVG_POOL_GRAD;
    if (grad)
        for (size_t i = 0; i < img_elems(g); i++)
            out[i] = 0.0f;
    size_t o = 0;
    for (uint32_t n = 0; n < g->n; n++)
        for (uint32_t oy = 0; oy < g->ho; oy++)
            for (uint32_t ox = 0; ox < g->wo; ox++)
                for (uint32_t ci = 0; ci < g->c; ci++, o++) {
                    if (code == TPU_OP_MAX_POOL) {
                        out[o] = x[ref_argmax(g, x, n, oy, ox, ci)];
                        continue;
                    }
                    if (code == TPU_OP_MAX_POOL_GRAD) {
                        out[ref_argmax(g, x, n, oy, ox, ci)] += dy[o];
                        continue;
                    }
                    unsigned count = 0;
                    for (uint32_t ky = 0; ky < g->kh; ky++)
                        for (uint32_t kx = 0; kx < g->kw; kx++)
                            count += at(g, n, oy, ox, ky, kx, ci) >= 0;
                    float s = 0.0f;
                    unsigned seen = 0;
                    for (uint32_t ky = 0; ky < g->kh; ky++)
                        for (uint32_t kx = 0; kx < g->kw; kx++) {
                            long i = at(g, n, oy, ox, ky, kx, ci);
                            if (i < 0)
                                continue;
                            if (grad)
                                out[i] += dy[o] / (float)count;
                            else
                                s = seen++ ? s + x[i] : x[i];
                        }
                    if (!grad)
                        out[o] = s / (float)count;
                }
}

/* ---- the geometries -------------------------------------------------------------------------- */

struct geo_case {
    uint32_t n, h, w, c, kh, kw, sh, sw;
    bool same;
};

static const struct geo_case cases[] = {
    {1, 5, 5, 1, 3, 3, 1, 1, true},   {2, 7, 6, 3, 3, 3, 2, 2, true},
    {2, 7, 5, 2, 3, 3, 2, 2, false},  {1, 9, 7, 2, 5, 3, 2, 1, true},
    {2, 6, 6, 3, 2, 2, 2, 2, false},  {1, 5, 7, 1, 1, 1, 2, 2, true},
    {1, 7, 7, 2, 3, 2, 3, 3, false},  {2, 3, 3, 4, 3, 3, 1, 1, true},
    {1, 8, 9, 1, 4, 4, 2, 2, true},   {1, 5, 5, 2, 2, 2, 3, 3, true},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static struct geo case_geo(size_t i)
{
    const struct geo_case *k = &cases[i];
    return make_geo(k->n, k->h, k->w, k->c, k->kh, k->kw, k->sh, k->sw, k->same);
}

/* ---- values ------------------------------------------------------------------------------- */

static void test_im2col_col2im(void **state)
{
    (void)state;
    struct rng r = {11};
    for (size_t t = 0; t < N_CASES; t++) {
        const struct geo g = case_geo(t);
        const size_t k_cols = (size_t)g.kh * g.kw * g.c;
        struct bufs s = {0};
        /* the image as [N*h*w][c] and, the same bytes, as [N][h*w*c]: one result */
        for (int shape = 0; shape < 2; shape++) {
            float *x = shape ? bset(&s, 0, TPU_F32, g.n, (size_t)g.h * g.w * g.c)
                             : bset(&s, 0, TPU_F32, (size_t)g.n * g.h * g.w, g.c);
            struct rng same_values = {101 + t};
            fill(&same_values, x, img_elems(&g), false);
            float *y = bset(&s, 1, TPU_F32, win_rows(&g), k_cols);
            float *want = calloc(win_rows(&g) * k_cols, sizeof *want);
            assert_non_null(want);
            ref_im2col(&g, x, want);
            struct tpu_op op = mkop(TPU_OP_IM2COL, 1, 0, X, &g);
            run_ok(&op, &s);
            expect_same(y, want, win_rows(&g) * k_cols, "im2col");
            free(want);
        }
        /* col2im of random non-integers: the documented summation order, bit for bit */
        float *cols = bset(&s, 0, TPU_F32, win_rows(&g), k_cols);
        fill(&r, cols, win_rows(&g) * k_cols, false);
        float *y = bset(&s, 1, TPU_F32, (size_t)g.n * g.h, (size_t)g.w * g.c);
        float *want = calloc(img_elems(&g), sizeof *want);
        assert_non_null(want);
        ref_col2im(&g, cols, want);
        struct tpu_op op = mkop(TPU_OP_COL2IM, 1, 0, X, &g);
        run_ok(&op, &s);
        expect_same(y, want, img_elems(&g), "col2im");
        free(want);
        bfree(&s);
    }
}

/* col2im is the adjoint of im2col: <im2col(x), c> == <x, col2im(c)>, exactly for integers. */
static void test_col2im_adjoint(void **state)
{
    (void)state;
    struct rng r = {12};
    for (size_t t = 0; t < N_CASES; t++) {
        const struct geo g = case_geo(t);
        const size_t k_cols = (size_t)g.kh * g.kw * g.c, nc = win_rows(&g) * k_cols;
        struct bufs s = {0};
        float *x = bset(&s, 0, TPU_F32, img_elems(&g), 1);
        float *cx = bset(&s, 1, TPU_F32, win_rows(&g), k_cols);
        float *c = bset(&s, 2, TPU_F32, win_rows(&g), k_cols);
        float *xc = bset(&s, 3, TPU_F32, img_elems(&g), 1);
        fill(&r, x, img_elems(&g), true);
        fill(&r, c, nc, true);
        struct tpu_op fwd = mkop(TPU_OP_IM2COL, 1, 0, X, &g);
        struct tpu_op adj = mkop(TPU_OP_COL2IM, 3, 2, X, &g);
        run_ok(&fwd, &s);
        run_ok(&adj, &s);
        long long lhs = 0, rhs = 0, norm = 0;
        for (size_t i = 0; i < nc; i++)
            lhs += (long long)cx[i] * (long long)c[i];
        for (size_t i = 0; i < img_elems(&g); i++) {
            rhs += (long long)x[i] * (long long)xc[i];
            norm += (long long)(x[i] * x[i]);
        }
        if (lhs != rhs)
            fail_msg("case %zu: <im2col(x), c> = %lld but <x, col2im(c)> = %lld", t, lhs, rhs);
        assert_true(norm > 0); /* not a vacuous 0 == 0 */
        bfree(&s);
    }
}

/* conv2d = im2col, then matmul by the HWIO kernel as [kh*kw*c][f], against a direct
 * convolution; integers and passes=6 make it exact (see the opening comment). */
static void test_conv_by_im2col_matmul(void **state)
{
    (void)state;
    struct rng r = {13};
    const uint32_t f = 4;
    for (size_t t = 0; t < N_CASES; t++) {
        const struct geo g = case_geo(t);
        const size_t k_cols = (size_t)g.kh * g.kw * g.c;
        struct bufs s = {0};
        float *x = bset(&s, 0, TPU_F32, (size_t)g.n * g.h * g.w, g.c);
        bset(&s, 1, TPU_F32, win_rows(&g), k_cols);
        float *k = bset(&s, 2, TPU_F32, k_cols, f); /* HWIO: [kh][kw][c][f] */
        float *y = bset(&s, 3, TPU_F32, win_rows(&g), f);
        fill(&r, x, img_elems(&g), true);
        fill(&r, k, k_cols * f, true);
        struct tpu_op op = mkop(TPU_OP_IM2COL, 1, 0, X, &g);
        run_ok(&op, &s);
        struct tpu_op mm = mkop(TPU_OP_MATMUL, 3, 1, 2, NULL);
        mm.attrs.passes = 6;
        run_ok(&mm, &s);
        for (uint32_t n = 0; n < g.n; n++)
            for (uint32_t oy = 0; oy < g.ho; oy++)
                for (uint32_t ox = 0; ox < g.wo; ox++)
                    for (uint32_t fo = 0; fo < f; fo++) {
                        long sum = 0;
                        for (uint32_t ky = 0; ky < g.kh; ky++)
                            for (uint32_t kx = 0; kx < g.kw; kx++)
                                for (uint32_t ci = 0; ci < g.c; ci++) {
                                    long i = at(&g, n, oy, ox, ky, kx, ci);
                                    size_t ki = (((size_t)ky * g.kw + kx) * g.c + ci) * f + fo;
                                    sum += i < 0 ? 0 : (long)x[i] * (long)k[ki];
                                }
                        size_t o = (((size_t)n * g.ho + oy) * g.wo + ox) * f + fo;
                        if (y[o] != (float)sum)
                            fail_msg("case %zu: conv at (%u, %u, %u, %u) is %g, want %ld", t,
                                     n, oy, ox, fo, (double)y[o], sum);
                    }
        bfree(&s);
    }
}

static void test_pooling(void **state)
{
    (void)state;
    struct rng r = {14};
    static const enum tpu_opcode codes[] = {TPU_OP_MAX_POOL, TPU_OP_AVG_POOL,
                                            TPU_OP_MAX_POOL_GRAD, TPU_OP_AVG_POOL_GRAD};
    for (size_t t = 0; t < N_CASES; t++)
        for (size_t k = 0; k < 4; k++) {
            const struct geo g = case_geo(t);
            const enum tpu_opcode code = codes[k];
            const bool grad = k >= 2;
            struct bufs s = {0};
            float *x = bset(&s, 1, TPU_F32, (size_t)g.n * g.h * g.w, g.c);
            float *dy = bset(&s, 2, TPU_F32, win_rows(&g), g.c);
            /* integers in [-4, 4] give max ties; non-integers exercise the sums' order */
            fill(&r, x, img_elems(&g), t % 2 == 0);
            fill(&r, dy, win_rows(&g) * g.c, false);
            size_t count = grad ? img_elems(&g) : win_rows(&g) * g.c;
            float *out = grad ? bset(&s, 0, TPU_F32, g.n, (size_t)g.h * g.w * g.c)
                              : bset(&s, 0, TPU_F32, win_rows(&g), g.c);
            float *want = calloc(count, sizeof *want);
            assert_non_null(want);
            ref_pool(code, &g, x, dy, want);
            struct tpu_op op = code == TPU_OP_MAX_POOL_GRAD ? mkop(code, 0, 2, 1, &g)
                               : code == TPU_OP_AVG_POOL_GRAD ? mkop(code, 0, 2, X, &g)
                                                              : mkop(code, 0, 1, X, &g);
            if (code == TPU_OP_MAX_POOL_GRAD) /* dx has x's shape */
                out = bset(&s, 0, TPU_F32, (size_t)g.n * g.h * g.w, g.c);
            run_ok(&op, &s);
            expect_same(out, want, count, tpu_opcode_name(code));
            free(want);
            bfree(&s);
        }
}

/* Cases worked by hand: ties go to the first position, overlapping windows add, padding
 * never wins a max, and the mean's count excludes padding. */
static void test_pooling_by_hand(void **state)
{
    (void)state;
    struct bufs s = {0};
    /* one 2x2 window over four equal values: the gradient goes to the first */
    struct geo g = make_geo(1, 2, 2, 1, 2, 2, 1, 1, false);
    float *x = bset(&s, 1, TPU_F32, 2, 2), *dy = bset(&s, 2, TPU_F32, 1, 1);
    float *dx = bset(&s, 0, TPU_F32, 2, 2);
    for (int i = 0; i < 4; i++)
        x[i] = 5.0f;
    dy[0] = 7.0f;
    struct tpu_op op = mkop(TPU_OP_MAX_POOL_GRAD, 0, 2, 1, &g);
    run_ok(&op, &s);
    expect_same(dx, (const float[]){7, 0, 0, 0}, 4, "tie");
    /* 2x2 windows at stride 1 over a 3x3 image: all equal, each window's first is its own
     * top-left; one peak in the middle, all four windows add into it */
    g = make_geo(1, 3, 3, 1, 2, 2, 1, 1, false);
    x = bset(&s, 1, TPU_F32, 9, 1);
    dy = bset(&s, 2, TPU_F32, 4, 1);
    dx = bset(&s, 0, TPU_F32, 9, 1);
    for (int i = 0; i < 9; i++)
        x[i] = 1.0f;
    for (int i = 0; i < 4; i++)
        dy[i] = (float)(i + 1);
    op = mkop(TPU_OP_MAX_POOL_GRAD, 0, 2, 1, &g);
    run_ok(&op, &s);
    expect_same(dx, (const float[]){1, 2, 0, 3, 4, 0, 0, 0, 0}, 9, "ties, overlapping");
    x[4] = 9.0f;
    run_ok(&op, &s);
    expect_same(dx, (const float[]){0, 0, 0, 0, 10, 0, 0, 0, 0}, 9, "overlapping add");
    /* 'same' 3x3 stride 1 over 3x3: padding never wins over -5, and the mean of the corner
     * window is over its 4 in-image values: (1+2+4+5)/4 = 3; the middle 45/9 = 5 */
    g = make_geo(1, 3, 3, 1, 3, 3, 1, 1, true);
    assert_int_equal(g.pt, 1);
    x = bset(&s, 1, TPU_F32, 3, 3);
    float *y = bset(&s, 0, TPU_F32, 9, 1);
    for (int i = 0; i < 9; i++)
        x[i] = -5.0f;
    op = mkop(TPU_OP_MAX_POOL, 0, 1, X, &g);
    run_ok(&op, &s);
    for (int i = 0; i < 9; i++)
        assert_true(y[i] == -5.0f);
    for (int i = 0; i < 9; i++)
        x[i] = (float)(i + 1);
    op = mkop(TPU_OP_AVG_POOL, 0, 1, X, &g);
    run_ok(&op, &s);
    expect_same(y, (const float[]){3, 3.5f, 4, 4.5f, 5, 5.5f, 6, 6.5f, 7}, 9, "avg same");
    /* avg_pool_grad: dy = 12 at the corner (count 4) gives 3 to each of its 4 positions */
    dy = bset(&s, 2, TPU_F32, 9, 1);
    dx = bset(&s, 0, TPU_F32, 3, 3);
    dy[0] = 12.0f;
    op = mkop(TPU_OP_AVG_POOL_GRAD, 0, 2, X, &g);
    run_ok(&op, &s);
    expect_same(dx, (const float[]){3, 3, 0, 3, 3, 0, 0, 0, 0}, 9, "avg grad corner");
    /* a NaN in a window propagates to its max, and its gradient goes to the first NaN */
    g = make_geo(1, 2, 2, 1, 2, 2, 1, 1, false);
    x = bset(&s, 1, TPU_F32, 2, 2);
    y = bset(&s, 0, TPU_F32, 1, 1);
    x[0] = 1.0f;
    x[1] = NAN;
    x[2] = 3.0f;
    x[3] = NAN;
    op = mkop(TPU_OP_MAX_POOL, 0, 1, X, &g);
    run_ok(&op, &s);
    assert_true(isnan(y[0]));
    dy = bset(&s, 2, TPU_F32, 1, 1);
    dx = bset(&s, 0, TPU_F32, 2, 2);
    dy[0] = 2.0f;
    op = mkop(TPU_OP_MAX_POOL_GRAD, 0, 2, 1, &g);
    run_ok(&op, &s);
    expect_same(dx, (const float[]){0, 2, 0, 0}, 4, "NaN max grad");
    bfree(&s);
}

static void test_reshape(void **state)
{
    (void)state;
    struct bufs s = {0};
    float *x = bset(&s, 0, TPU_F32, 2, 6), *y = bset(&s, 1, TPU_F32, 4, 3);
    for (int i = 0; i < 12; i++)
        x[i] = (float)i - 5.5f;
    struct tpu_op op = mkop(TPU_OP_RESHAPE, 1, 0, X, NULL);
    run_ok(&op, &s);
    expect_same(y, x, 12, "reshape");
    int8_t *q = (int8_t *)bset(&s, 2, TPU_INT8, 3, 1);
    int8_t *p = (int8_t *)bset(&s, 3, TPU_INT8, 1, 3);
    q[0] = -128;
    q[1] = 7;
    q[2] = 127;
    op = mkop(TPU_OP_RESHAPE, 3, 2, X, NULL);
    run_ok(&op, &s);
    assert_memory_equal(p, q, 3);
    struct tpu_diag d = {0, ""};
    bset(&s, 1, TPU_F32, 5, 3);
    op = mkop(TPU_OP_RESHAPE, 1, 0, X, NULL);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "15 elements but x [2][6] has 12",
                 "keeps the element count");
    op = mkop(TPU_OP_RESHAPE, 3, 0, X, NULL);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand y is int8 but must be f32", NULL);
    bfree(&s);
}

/* An unverified program fails cleanly: bad geometry, wrong counts and shapes, wrong dtype. */
static void test_window_errors(void **state)
{
    (void)state;
    struct bufs s = {0};
    struct tpu_diag d = {0, ""};
    struct geo g = make_geo(1, 5, 5, 2, 3, 3, 2, 2, true); /* ho = wo = 3, pt = pl = 1 */
    bset(&s, 0, TPU_F32, 25, 2);
    bset(&s, 1, TPU_F32, 9, 18);
    struct tpu_op op = mkop(TPU_OP_IM2COL, 1, 0, X, &g);
    run_ok(&op, &s);
    op.attrs.win.kh = 0;
    expect_error(run(&op, &s, &d), &d, TPU_EINVAL, "im2col: window", "WINDOW rule");
    op.attrs.win = win_of(&g);
    op.attrs.win.pt = 3; /* a window wholly in the padding */
    expect_error(run(&op, &s, &d), &d, TPU_EINVAL, "pt=3", "every window overlaps");
    op.attrs.win = win_of(&g);
    op.attrs.win.ho = 4; /* the last window starts below the image */
    expect_error(run(&op, &s, &d), &d, TPU_EINVAL, "ho=4", NULL);
    op.attrs.win = win_of(&g);
    /* a window of 2^32 elements: 64 x 64 over 2^20 channels (a 'same' pool of 64 on 1 x 1) */
    struct tpu_op big = mkop(TPU_OP_MAX_POOL, 1, 0, X, NULL);
    big.attrs.win = (struct tpu_window){.h = 1, .w = 1, .c = 1u << 20, .kh = 64, .kw = 64,
                                        .sh = 64, .sw = 64, .pt = 31, .pl = 31, .ho = 1,
                                        .wo = 1};
    expect_error(run(&big, &s, &d), &d, TPU_EINVAL, "max_pool: window kh*kw*c = 64*64*1048576",
                 "lower kh, kw or c");
    bset(&s, 0, TPU_F32, 7, 7);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand x has 49 elements",
                 "multiple N >= 1 of h*w*c = 50");
    bset(&s, 0, TPU_F32, 2, 50); /* N = 2 needs 18 rows */
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand y is [9][18] but must be [18][18]",
                 NULL);
    bset(&s, 0, TPU_BF16, 25, 2);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand x is bf16 but must be f32", NULL);
    bset(&s, 0, TPU_F32, 25, 2); /* max_pool_grad: x must match dx's count */
    bset(&s, 1, TPU_F32, 9, 2);
    bset(&s, 2, TPU_F32, 24, 2);
    op = mkop(TPU_OP_MAX_POOL_GRAD, 0, 1, 2, &g);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand x has 48 elements but must have 50",
                 NULL);
    op = mkop(TPU_OP_AVG_POOL_GRAD, 0, 2, X, &g);
    expect_error(run(&op, &s, &d), &d, TPU_ESHAPE, "operand dy is [24][2] but must be [9][2]",
                 NULL);
    bfree(&s);
}

/* ---- timing ---------------------------------------------------------------------------------- */

static struct tpu_chip_config tiny(void)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0, ""};
    if (tpu_config_load_preset("tiny", &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    return cfg;
}

/* The pooling ops' cycles on the tiny chip's 8 x 8 x 1 vector unit (64 ops per cycle, 8
 * cycles of latency), counted as timing.c says: an 8x8x8 image, 'same' windows of k x k at
 * stride 2 (ho = wo = 4: 128 outputs, W = 128 k^2 window elements, 512 dx elements):
 *   max_pool       ceil(128 k^2 / 64) + 8                     = 2 k^2 + 8
 *   avg_pool       ceil((128 k^2 + 4*128) / 64) + 8            = 2 k^2 + 16
 *   max_pool_grad  ceil((2*128 k^2 + 128 + 512) / 64) + 8      = 4 k^2 + 18
 *   avg_pool_grad  ceil((128 k^2 + 4*128 + 512) / 64) + 8      = 2 k^2 + 24 */
static void test_pool_timing(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = tiny();
    static const enum tpu_opcode codes[] = {TPU_OP_MAX_POOL, TPU_OP_AVG_POOL,
                                            TPU_OP_MAX_POOL_GRAD, TPU_OP_AVG_POOL_GRAD};
    static const uint64_t per_k2[] = {2, 2, 4, 2}, base[] = {8, 16, 18, 24};
    for (uint32_t k = 1; k <= 3; k++) {
        const struct geo g = make_geo(1, 8, 8, 8, k, k, 2, 2, true);
        assert_int_equal(g.ho, 4);
        struct tpu_program *p = NULL;
        struct tpu_diag d = {0, ""};
        uint32_t x, y;
        assert_int_equal(tpu_program_create("t", &p), 0);
        assert_int_equal(tpu_program_add_buffer(p, "x", TPU_F32, TPU_BUF_PARAM, 64, 8, &x, &d), 0);
        assert_int_equal(tpu_program_add_buffer(p, "y", TPU_F32, TPU_BUF_PARAM, 16, 8, &y, &d), 0);
        for (size_t i = 0; i < 4; i++) {
            const bool grad = i >= 2;
            struct tpu_op op = grad ? mkop(codes[i], x, y, i == 2 ? x : X, &g)
                                    : mkop(codes[i], y, x, X, &g);
            if (i == 2) { /* max_pool_grad's dx must be another buffer than x */
                uint32_t dx;
                char name[8];
                snprintf(name, sizeof name, "dx%u", (unsigned)k);
                if (tpu_program_find_buffer(p, name, &dx) != 0)
                    assert_int_equal(tpu_program_add_buffer(p, name, TPU_F32, TPU_BUF_PARAM,
                                                            64, 8, &dx, &d), 0);
                op.out[0] = dx;
            }
            uint64_t cycles = 0, slots = 1, macs = 1;
            assert_int_equal(tpu__op_cost(&cfg, p, &op, &cycles, &slots, &macs), TPU_UNIT_VPU);
            if (cycles != per_k2[i] * k * k + base[i])
                fail_msg("%s with k = %u: %llu cycles, want %llu", tpu_opcode_name(codes[i]), k,
                         (unsigned long long)cycles,
                         (unsigned long long)(per_k2[i] * k * k + base[i]));
            assert_true(slots == 0 && macs == 0);
        }
        tpu_program_destroy(&p);
    }
    /* an unverified window of kh = kw = 2^31 saturates instead of wrapping to 0 cycles */
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    uint32_t x, y;
    assert_int_equal(tpu_program_create("t", &p), 0);
    assert_int_equal(tpu_program_add_buffer(p, "x", TPU_F32, TPU_BUF_PARAM, 64, 8, &x, &d), 0);
    assert_int_equal(tpu_program_add_buffer(p, "y", TPU_F32, TPU_BUF_PARAM, 16, 8, &y, &d), 0);
    struct tpu_op op = mkop(TPU_OP_MAX_POOL, y, x, X, NULL);
    op.attrs.win.kh = op.attrs.win.kw = UINT32_C(1) << 31;
    uint64_t cycles = 0, slots = 1, macs = 1;
    assert_int_equal(tpu__op_cost(&cfg, p, &op, &cycles, &slots, &macs), TPU_UNIT_VPU);
    if (cycles < UINT64_MAX / 64)
        fail_msg("max_pool with kh = kw = 2^31: %llu cycles, want saturation (>= 2^58)",
                 (unsigned long long)cycles);
    tpu_program_destroy(&p);
}

/* im2col on a chip: its DMA moves x in and y out (params, in HBM) at 4 bytes per cycle on the
 * tiny chip (8 GB/s over 2 cores at 1 GHz); the vector unit copies y's 162 elements in
 * ceil(162 / 64) + 8 = 11 cycles; and y holds the reference's values. */
static void test_im2col_on_chip(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = tiny();
    static const char text[] = "program conv\n"
                               "param x: f32[25, 2]\n"
                               "param y: f32[9, 18]\n"
                               "y = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 "
                               "wo=3\n";
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    struct tpu_device_settings st;
    tpu_device_default_settings(&st, &cfg);
    st.n_threads = 1;
    struct tpu_device *dev = NULL;
    if (tpu_device_open(&st, &dev, &d) != 0 || tpu_device_load(dev, p, &d) != 0)
        fail_msg("%s", d.msg);
    const struct geo g = make_geo(1, 5, 5, 2, 3, 3, 2, 2, true);
    float x[50], y[162], want[162];
    struct rng r = {15};
    fill(&r, x, 50, false);
    ref_im2col(&g, x, want);
    assert_int_equal(tpu_device_write(dev, 0, 0, x, sizeof x, &d), 0);
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
    assert_int_equal(tpu_device_read(dev, 0, 1, y, sizeof y, &d), 0);
    expect_same(y, want, 162, "im2col on chip");
    struct tpu_core_counters c;
    assert_int_equal(tpu_device_counters(dev, 0, &c), 0);
    assert_int_equal(c.hbm_read_bytes, 200);
    assert_int_equal(c.hbm_write_bytes, 648);
    assert_int_equal(c.busy[TPU_UNIT_DMA], 50 + 162);
    assert_int_equal(c.busy[TPU_UNIT_VPU], 11);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_im2col_col2im),   cmocka_unit_test(test_col2im_adjoint),
        cmocka_unit_test(test_conv_by_im2col_matmul), cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_pooling_by_hand), cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_window_errors),   cmocka_unit_test(test_pool_timing),
        cmocka_unit_test(test_im2col_on_chip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
