/* The convolution ops on the matrix unit (conv2d, conv2d_grad_input, conv2d_grad_filter:
 * sim/ops/ops_conv.c, their timing in sim/chip/timing.c, their rule CONV in
 * sim/program/program_verify_window.c, their text form).
 *
 * Each op is run on a chip next to the program of its definition (program.h): conv2d next to
 * im2col then matmul, conv2d_grad_input next to matmul trans_b then col2im,
 * conv2d_grad_filter next to im2col then matmul trans_a (with and without accumulate). A bf16
 * image goes through convert (exact) to f32 for im2col and back to bf16 (exact) for the
 * matmul, so that the matmul sees the operand types the conv op sees. The outputs must be
 * equal bit for bit (tolerance 0: the ops are defined as these programs), and so must the
 * matrix unit's busy cycles and MACs (the conv op costs its equivalent GEMM); the conv op's
 * HBM traffic must be its operands' bytes, the patches costing none. Geometries: Keras's
 * 'same' and 'valid', strides 1 and 2, non-square kernels and images, N = 1 to 3, the image
 * in several 2-D shapes; passes 1 and 6; f32, bf16 and mixed inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/bf16.h"
#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/program.h"
#include "chip/timing.h"
#include "ops/ops.h"
#include "xorshift.h"
#include "expect_same_bits.h"
#include "keras_window.h"

/* ---- geometry ------------------------------------------------------------------------------ */

struct geo {
    uint32_t n, h, w, c, kh, kw, sh, sw, pt, pl, ho, wo, f;
    uint32_t img_rows; /* the image stored as [img_rows][n*h*w*c / img_rows] */
};

/* Keras's 'same' (ho = ceil(h / s), the padding split with the smaller half before) or
 * 'valid'; f filters; the image stored with img_rows rows. */
static struct geo make_geo(uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t kh,
                           uint32_t kw, uint32_t sh, uint32_t sw, bool same, uint32_t f,
                           uint32_t img_rows)
{
    struct geo g = {n, h, w, c, kh, kw, sh, sw, 0, 0, 0, 0, f, img_rows};
    keras_axis(h, kh, sh, same, &g.ho, &g.pt);
    keras_axis(w, kw, sw, same, &g.wo, &g.pl);
    return g;
}

static uint32_t img_elems(const struct geo *g)
{
    return g->n * g->h * g->w * g->c;
}

static uint32_t m_rows(const struct geo *g) /* N*ho*wo */
{
    return g->n * g->ho * g->wo;
}

static uint32_t k_cols(const struct geo *g) /* kh*kw*c */
{
    return g->kh * g->kw * g->c;
}

static void win_text(const struct geo *g, char *s, size_t size)
{
    snprintf(s, size, "h=%u w=%u c=%u kh=%u kw=%u sh=%u sw=%u pt=%u pl=%u ho=%u wo=%u", g->h,
             g->w, g->c, g->kh, g->kw, g->sh, g->sw, g->pt, g->pl, g->ho, g->wo);
}

/* ---- running programs ---------------------------------------------------------------------- */

static struct tpu_chip_config preset(const char *name)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0, ""};
    if (tpu_config_load_preset(name, &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    return cfg;
}

/* A host operand: n values of dtype dt (f32 or bf16). */
struct operand {
    enum tpu_dtype dt;
    size_t n;
    void *data;
};

static struct operand make_operand(struct rng *r, enum tpu_dtype dt, size_t n)
{
    struct operand o = {dt, n, malloc(n * 4 + 4)};
    assert_non_null(o.data);
    for (size_t i = 0; i < n; i++) {
        /* in (-2, 2), with bits below bf16's precision (they matter for passes 6) */
        const float v = (float)((double)(rnd(r) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
        if (dt == TPU_BF16)
            ((tpu_bf16 *)o.data)[i] = tpu_bf16_from_f32(v);
        else
            ((float *)o.data)[i] = v;
    }
    return o;
}

static size_t operand_bytes(const struct operand *o)
{
    return o->n * tpu_dtype_bytes(o->dt);
}

/* What a run gave: the output (buffer 2) and core 0's counters. */
struct result {
    float *out;
    struct tpu_core_counters c;
};

/* Runs `text` (params in0, in1, out: buffer ids 0, 1, 2) on chip cfg with the inputs and
 * out's initial value (for accumulate; may be NULL), `threads` kernel threads. */
static struct result run_text(const struct tpu_chip_config *cfg, const char *text,
                              const struct operand *in0, const struct operand *in1,
                              const float *out0, size_t n_out, unsigned threads)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s\n%s", d.msg, text);
    if (tpu_program_verify(p, cfg, &d) != 0)
        fail_msg("verify: %s\n%s", d.msg, text);
    struct tpu_device_settings st;
    tpu_device_default_settings(&st, cfg);
    st.n_threads = 1;
    st.kernel_threads = threads;
    struct tpu_device *dev = NULL;
    if (tpu_device_open(&st, &dev, &d) != 0 || tpu_device_load(dev, p, &d) != 0)
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_device_write(dev, 0, 0, in0->data, operand_bytes(in0), &d), 0);
    assert_int_equal(tpu_device_write(dev, 0, 1, in1->data, operand_bytes(in1), &d), 0);
    if (out0)
        assert_int_equal(tpu_device_write(dev, 0, 2, out0, n_out * 4, &d), 0);
    if (tpu_device_run(dev, 0, NULL, &d) != 0)
        fail_msg("run: %s\n%s", d.msg, text);
    struct result r = {malloc(n_out * 4), {0}};
    assert_non_null(r.out);
    assert_int_equal(tpu_device_read(dev, 0, 2, r.out, n_out * 4, &d), 0);
    assert_int_equal(tpu_device_counters(dev, 0, &r.c), 0);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
    return r;
}

/* ---- the programs ------------------------------------------------------------------------- */

enum kind { CONV, GRAD_INPUT, GRAD_FILTER };

static const char *dtn(enum tpu_dtype t)
{
    return tpu_dtype_name(t);
}

/* The conv op's program and its definition's program (text into conv and ref) for kind k on
 * g, input dtypes t0, t1, passes, accumulate (grad_filter only). */
static void programs(enum kind k, const struct geo *g, enum tpu_dtype t0, enum tpu_dtype t1,
                     unsigned passes, bool acc, char *conv, char *ref, size_t size)
{
    char win[160], head[512], tail[64];
    win_text(g, win, sizeof win);
    snprintf(tail, sizeof tail, " passes=%u%s", passes, acc ? " accumulate" : "");
    const uint32_t M = m_rows(g), K = k_cols(g), F = g->f, ir = g->img_rows;
    const uint32_t ic = img_elems(g) / ir;
    /* the image through im2col: f32 as it is; bf16 converted to f32, the patches back */
    char patches[512];
    if (t0 == TPU_BF16)
        snprintf(patches, sizeof patches,
                 "temp xf: f32[%u, %u]\ntemp cols: f32[%u, %u]\ntemp cb: bf16[%u, %u]\n"
                 "xf = convert x\ncols = im2col xf %s\ncb = convert cols\n",
                 ir, ic, M, K, M, K, win);
    else
        snprintf(patches, sizeof patches, "temp cols: f32[%u, %u]\ncols = im2col x %s\n", M, K,
                 win);
    const char *pname = t0 == TPU_BF16 ? "cb" : "cols";
    switch (k) {
    case CONV:
        snprintf(head, sizeof head, "param x: %s[%u, %u]\nparam w: %s[%u, %u]\n"
                 "param y: f32[%u, %u]\n", dtn(t0), ir, ic, dtn(t1), K, F, M, F);
        snprintf(conv, size, "program conv\n%sy = conv2d x, w %s%s\n", head, win, tail);
        snprintf(ref, size, "program ref\n%s%sy = matmul %s, w%s\n", head, patches, pname,
                 tail);
        return;
    case GRAD_INPUT:
        snprintf(head, sizeof head, "param dy: %s[%u, %u]\nparam w: %s[%u, %u]\n"
                 "param dx: f32[%u, %u]\n", dtn(t0), M, F, dtn(t1), K, F, ir, ic);
        snprintf(conv, size, "program conv\n%sdx = conv2d_grad_input dy, w %s%s\n", head, win,
                 tail);
        snprintf(ref, size, "program ref\n%stemp dcols: f32[%u, %u]\n"
                 "dcols = matmul dy, w trans_b%s\ndx = col2im dcols %s\n", head, M, K, tail,
                 win);
        return;
    case GRAD_FILTER:
        snprintf(head, sizeof head, "param x: %s[%u, %u]\nparam dy: %s[%u, %u]\n"
                 "param dw: f32[%u, %u]\n", dtn(t0), ir, ic, dtn(t1), M, F, K, F);
        snprintf(conv, size, "program conv\n%sdw = conv2d_grad_filter x, dy %s%s\n", head, win,
                 tail);
        snprintf(ref, size, "program ref\n%s%sdw = matmul %s, dy trans_a%s\n", head, patches,
                 pname, tail);
        return;
    }
}

/* One case: the conv op against its definition on chip cfg; checks values, MXU cycles and
 * MACs, and the conv op's HBM bytes. */
static void check_case(const struct tpu_chip_config *cfg, enum kind k, const struct geo *g,
                       enum tpu_dtype t0, enum tpu_dtype t1, unsigned passes, bool acc,
                       struct rng *r)
{
    const size_t size = 4096;
    char *conv = malloc(size), *ref = malloc(size);
    assert_true(conv && ref);
    programs(k, g, t0, t1, passes, acc, conv, ref, size);
    const size_t M = m_rows(g), K = k_cols(g), F = g->f, I = img_elems(g);
    const size_t n0 = k == GRAD_INPUT ? M * F : I;
    const size_t n1 = k == GRAD_FILTER ? M * F : K * F;
    const size_t n_out = k == CONV ? M * F : k == GRAD_INPUT ? I : K * F;
    struct operand in0 = make_operand(r, t0, n0), in1 = make_operand(r, t1, n1);
    struct operand init = make_operand(r, TPU_F32, n_out);
    const float *out0 = acc ? init.data : NULL;
    struct result a = run_text(cfg, conv, &in0, &in1, out0, n_out, 1 + (unsigned)(n0 % 2));
    struct result b = run_text(cfg, ref, &in0, &in1, out0, n_out, 1);
    char what[96];
    snprintf(what, sizeof what, "kind %d, %ux%u k%ux%u s%u, %s/%s passes %u%s", (int)k, g->h,
             g->w, g->kh, g->kw, g->sh, dtn(t0), dtn(t1), passes, acc ? " acc" : "");
    expect_same(a.out, b.out, n_out, what);
    if (a.c.busy[TPU_UNIT_MXU] != b.c.busy[TPU_UNIT_MXU] || a.c.macs != b.c.macs ||
        a.c.mxu_mac_slots != b.c.mxu_mac_slots)
        fail_msg("%s: MXU %llu cycles, %llu MACs; its matmul %llu cycles, %llu MACs", what,
                 (unsigned long long)a.c.busy[TPU_UNIT_MXU], (unsigned long long)a.c.macs,
                 (unsigned long long)b.c.busy[TPU_UNIT_MXU], (unsigned long long)b.c.macs);
    assert_true(a.c.busy[TPU_UNIT_MXU] > 0);
    /* the conv op moves its operands only: both inputs (and dw with accumulate) in, the
     * output out; nothing on the vector unit */
    const uint64_t want_in = operand_bytes(&in0) + operand_bytes(&in1) + (acc ? n_out * 4 : 0);
    if (a.c.hbm_read_bytes != want_in || a.c.hbm_write_bytes != n_out * 4)
        fail_msg("%s: HBM read %llu written %llu, want %llu and %zu", what,
                 (unsigned long long)a.c.hbm_read_bytes,
                 (unsigned long long)a.c.hbm_write_bytes, (unsigned long long)want_in,
                 n_out * 4);
    assert_int_equal(a.c.busy[TPU_UNIT_VPU], 0);
    free(a.out);
    free(b.out);
    free(in0.data);
    free(in1.data);
    free(init.data);
    free(conv);
    free(ref);
}

static const struct geo *geometries(size_t *count)
{
    static struct geo gs[6];
    gs[0] = make_geo(2, 5, 5, 3, 3, 3, 1, 1, true, 4, 2);      /* 'same', x as [N][h*w*c] */
    gs[1] = make_geo(1, 7, 6, 2, 3, 2, 2, 2, true, 5, 42);     /* odd, non-square, stride 2 */
    gs[2] = make_geo(3, 6, 6, 4, 2, 2, 2, 2, false, 3, 108);   /* 'valid' 2x2/2, [N*h*w][c] */
    gs[3] = make_geo(1, 8, 8, 1, 5, 5, 1, 1, true, 2, 8);      /* a 5x5 kernel, padding 2 */
    gs[4] = make_geo(2, 9, 7, 3, 1, 3, 1, 2, false, 6, 1);     /* 1x3, one row of elements */
    gs[5] = make_geo(1, 6, 5, 16, 3, 3, 1, 1, true, 17, 30);   /* K = 144, f = 17: many tiles */
    *count = sizeof gs / sizeof gs[0];
    return gs;
}

/* Every op on every geometry: f32 inputs in 1 and 6 passes, bf16 inputs, and a bf16 image
 * or dy with f32 partner in 6 passes. */
static void test_conv_ops_match_definition(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = preset("tiny");
    struct rng r = {0x5eed};
    size_t n_geo;
    const struct geo *gs = geometries(&n_geo);
    static const struct {
        enum tpu_dtype t0, t1;
        unsigned passes;
    } modes[] = {{TPU_F32, TPU_F32, 1}, {TPU_F32, TPU_F32, 6}, {TPU_BF16, TPU_BF16, 1},
                 {TPU_BF16, TPU_F32, 6}};
    for (size_t gi = 0; gi < n_geo; gi++)
        for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++)
            for (int k = CONV; k <= GRAD_FILTER; k++)
                check_case(&cfg, (enum kind)k, &gs[gi], modes[mi].t0, modes[mi].t1,
                           modes[mi].passes, false, &r);
}

/* conv2d_grad_filter with accumulate adds into dw as matmul accumulate does. */
static void test_grad_filter_accumulate(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = preset("tiny");
    struct rng r = {77};
    size_t n_geo;
    const struct geo *gs = geometries(&n_geo);
    for (size_t gi = 0; gi < n_geo; gi++) {
        check_case(&cfg, GRAD_FILTER, &gs[gi], TPU_F32, TPU_F32, 1, true, &r);
        check_case(&cfg, GRAD_FILTER, &gs[gi], TPU_F32, TPU_F32, 6, true, &r);
    }
}

/* On tpu-v3 (128x128 arrays, two per core), a ResNet-50 3x3 conv of 56x56x64 images: the
 * op's cycles and MACs are its GEMM's through tpu__matmul_cycles, for each op, in 1 and 3
 * passes; the MAC count is m*k*n*passes. (timing only: tpu__op_cost on the program) */
static void test_conv_cost_is_gemm(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = preset("tpu-v3");
    const struct geo g = make_geo(8, 56, 56, 64, 3, 3, 1, 1, true, 64, 8 * 56 * 56);
    const uint64_t M = m_rows(&g), K = k_cols(&g), F = g.f;
    static const unsigned passes[] = {1, 3};
    for (size_t pi = 0; pi < 2; pi++)
        for (int k = CONV; k <= GRAD_FILTER; k++) {
            char conv[2048], ref[2048];
            programs((enum kind)k, &g, TPU_F32, TPU_F32, passes[pi], false, conv, ref,
                     sizeof conv);
            struct tpu_program *p = NULL;
            struct tpu_diag d = {0, ""};
            if (tpu_program_parse(conv, "test", &p, &d) != 0 || tpu_program_verify(p, &cfg, &d))
                fail_msg("%s", d.msg);
            uint64_t cycles = 0, slots = 0, macs = 0, want_slots = 0;
            assert_int_equal(tpu__op_cost(&cfg, p, tpu_program_op(p, 0), &cycles, &slots, &macs),
                             TPU_UNIT_MXU);
            const uint64_t m = k == CONV ? M : k == GRAD_INPUT ? M : K;
            const uint64_t kk = k == CONV ? K : k == GRAD_INPUT ? F : M;
            const uint64_t n = k == CONV ? F : k == GRAD_INPUT ? K : F;
            const uint64_t want = tpu__matmul_cycles(&cfg, m, kk, n, passes[pi], &want_slots);
            assert_true(want > 0);
            if (cycles != want || slots != want_slots || macs != m * kk * n * passes[pi])
                fail_msg("op %d passes %u: %llu cycles %llu MACs, want %llu and %llu", k,
                         passes[pi], (unsigned long long)cycles, (unsigned long long)macs,
                         (unsigned long long)want,
                         (unsigned long long)(m * kk * n * passes[pi]));
            tpu_program_destroy(&p);
        }
}

/* tpu__op_compute without an arena (the patches in memory of the op's own) gives the chip's
 * bits. */
static void test_conv_without_arena(void **state)
{
    (void)state;
    const struct tpu_chip_config cfg = preset("tiny");
    const struct geo g = make_geo(2, 5, 5, 3, 3, 3, 2, 2, true, 4, 2);
    struct rng r = {9};
    char conv[2048], ref[2048];
    programs(CONV, &g, TPU_F32, TPU_F32, 1, false, conv, ref, sizeof conv);
    struct operand x = make_operand(&r, TPU_F32, img_elems(&g));
    struct operand w = make_operand(&r, TPU_F32, (size_t)k_cols(&g) * g.f);
    const size_t n_out = (size_t)m_rows(&g) * g.f;
    struct result a = run_text(&cfg, conv, &x, &w, NULL, n_out, 1);
    float *y = malloc(n_out * 4);
    assert_non_null(y);
    struct tpu__bufmem bufs[3] = {{x.data, TPU_F32, 2, img_elems(&g) / 2},
                                  {w.data, TPU_F32, k_cols(&g), g.f},
                                  {y, TPU_F32, m_rows(&g), g.f}};
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_CONV2D);
    op.out[0] = 2, op.in[0] = 0, op.in[1] = 1;
    op.attrs.win = (struct tpu_window){g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw,
                                       g.pt, g.pl, g.ho, g.wo, 0};
    struct tpu_diag d = {0, ""};
    if (tpu__op_compute(&op, bufs, NULL, cfg.mxu_rows, 1, NULL, &d) != 0)
        fail_msg("%s", d.msg);
    expect_same(y, a.out, n_out, "conv2d without an arena");
    /* an unverified op with a wrong shape or dtype fails cleanly, naming the operand */
    bufs[2].rows = 7;
    assert_int_equal(tpu__op_compute(&op, bufs, NULL, cfg.mxu_rows, 1, NULL, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "conv2d: operand y is [7][4] but must be [18][4]"));
    bufs[2].rows = m_rows(&g);
    bufs[1].dtype = TPU_INT8;
    assert_int_equal(tpu__op_compute(&op, bufs, NULL, cfg.mxu_rows, 1, NULL, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "conv2d: operand w is int8 but must be f32 or bf16"));
    free(y);
    free(a.out);
    free(x.data);
    free(w.data);
}


/* ---- text form and verifier ---------------------------------------------------------------- */

static const char every_conv_op[] =
    "program convs\n"
    "param x: f32[2, 75]\n"
    "param w: bf16[27, 4]\n"
    "param y: f32[18, 4]\n"
    "param dx: f32[50, 3]\n"
    "param dw: f32[27, 4]\n"
    "y = conv2d x, w h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 passes=6\n"
    "dx = conv2d_grad_input y, w h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "dw = conv2d_grad_filter x, y h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 "
    "accumulate passes=3\n";

/* Print, parse, print again: the same text, and the ops' attributes survive. */
static void test_conv_text_round_trip(void **state)
{
    (void)state;
    struct tpu_program *p = NULL, *q = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(every_conv_op, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    const struct tpu_chip_config cfg = preset("tiny");
    if (tpu_program_verify(p, &cfg, &d) != 0)
        fail_msg("verify: %s", d.msg);
    char *t1 = NULL, *t2 = NULL;
    assert_int_equal(tpu_program_to_string(p, &t1), 0);
    if (tpu_program_parse(t1, "printed", &q, &d) != 0)
        fail_msg("parse of the printed text: %s\n%s", d.msg, t1);
    assert_int_equal(tpu_program_to_string(q, &t2), 0);
    assert_string_equal(t1, t2);
    assert_int_equal(tpu_program_n_ops(q), 3);
    const struct tpu_op *a = tpu_program_op(q, 0), *b = tpu_program_op(q, 1),
                        *c = tpu_program_op(q, 2);
    assert_int_equal(a->code, TPU_OP_CONV2D);
    assert_int_equal(a->attrs.passes, 6);
    assert_int_equal(b->code, TPU_OP_CONV2D_GRAD_INPUT);
    assert_int_equal(b->attrs.passes, 1); /* absent: one pass */
    assert_int_equal(c->code, TPU_OP_CONV2D_GRAD_FILTER);
    assert_true(c->attrs.accumulate);
    assert_int_equal(c->attrs.passes, 3);
    const struct tpu_window want = {5, 5, 3, 3, 3, 2, 2, 1, 1, 3, 3, 0};
    for (size_t i = 0; i < 3; i++)
        assert_memory_equal(&tpu_program_op(q, i)->attrs.win, &want, sizeof want);
    char line[256];
    assert_int_equal(tpu_program_format_op(q, 2, line, sizeof line), 0);
    assert_string_equal(line, "dw = conv2d_grad_filter x, y accumulate passes=3 h=5 w=5 c=3 "
                              "kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3");
    free(t1);
    free(t2);
    tpu_program_destroy(&p);
    tpu_program_destroy(&q);
}

static void expect_text_bad(const char *text, const char *chip, int code, const char *frag1,
                            const char *frag2);

/* every_conv_op with `from` replaced by `to` (once) fails verification (or parsing) with
 * `code` and a message holding frag1 and frag2; chip `chip` (NULL: no chip). */
static void expect_bad(const char *from, const char *to, const char *chip, int code,
                       const char *frag1, const char *frag2)
{
    char text[2048];
    const char *at = strstr(every_conv_op, from);
    if (!at)
        fail_msg("'%s' not in the program", from);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - every_conv_op), every_conv_op, to,
             at + strlen(from));
    expect_text_bad(text, chip, code, frag1, frag2);
}

static void expect_text_bad(const char *text, const char *chip, int code, const char *frag1,
                            const char *frag2)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    int rc = tpu_program_parse(text, "test", &p, &d);
    if (rc == 0) {
        struct tpu_chip_config cfg;
        if (chip)
            cfg = preset(chip);
        rc = tpu_program_verify(p, chip ? &cfg : NULL, &d);
    }
    if (rc != code || !strstr(d.msg, frag1) || (frag2 && !strstr(d.msg, frag2)))
        fail_msg("got %d (want %d): %s\n%s", rc, code, d.msg, text);
    tpu_program_destroy(&p);
}

static void test_conv_verifier(void **state)
{
    (void)state;
    /* dtypes */
    expect_bad("param x: f32", "param x: int8", NULL, TPU_ESHAPE,
               "op 0 'y = conv2d x, w", "input x 'x' int8[2, 75] is int8, but conv2d "
               "multiplies f32 or bf16 on the matrix unit (rule CONV); convert 'x' to f32 or "
               "bf16 first");
    expect_bad("param y: f32", "param y: bf16", NULL, TPU_ESHAPE,
               "output y 'y' bf16[18, 4] must be f32", "(rule CONV); declare it f32");
    expect_bad("param dw: f32", "param dw: int32", NULL, TPU_ESHAPE,
               "output dw 'dw' int32[27, 4] must be f32", NULL);
    /* passes */
    expect_bad("param x: f32[2, 75]\nparam w: bf16", "param x: bf16[2, 75]\nparam w: bf16",
               NULL, TPU_EINVAL, "passes=6 needs an f32 input", "x is 'x' bf16[2, 75] and w "
               "is 'w' bf16[27, 4] (rule CONV); use passes=1");
    expect_bad("passes=6", "passes=2", NULL, TPU_EINVAL,
               "passes=2; conv2d runs in 1 pass", "set passes to 1, 3 or 6");
    /* shapes */
    expect_bad("param w: bf16[27, 4]", "param w: bf16[26, 4]", NULL, TPU_ESHAPE,
               "input w 'w' bf16[26, 4] must be [27, 4] (rule CONV: the kernel is "
               "[kh*kw*c, f]", "declare it bf16[27, 4] or fix the window of conv2d");
    expect_bad("param y: f32[18, 4]", "param y: f32[18, 5]", NULL, TPU_ESHAPE,
               "output y 'y' f32[18, 5] must be [18, 4] (rule CONV: N*ho*wo rows", NULL);
    expect_bad("param x: f32[2, 75]", "param x: f32[2, 74]", NULL, TPU_ESHAPE,
               "input x 'x' f32[2, 74] has 148 elements, not a multiple of h*w*c", NULL);
    expect_bad("param dx: f32[50, 3]", "param dx: f32[49, 3]", NULL, TPU_ESHAPE,
               "op 1 'dx = conv2d_grad_input", "output dx 'dx' f32[49, 3] has 147 elements");
    expect_bad("param dw: f32[27, 4]", "param dw: f32[27, 3]", NULL, TPU_ESHAPE,
               "op 2 'dw = conv2d_grad_filter", "output dw 'dw' f32[27, 3] must be [27, 4]");
    expect_bad("dx = conv2d_grad_input y, w", "dx = conv2d_grad_input dw, w", NULL,
               TPU_ESHAPE, "input dy 'dw' f32[27, 4] must be [18, 4]", NULL);
    expect_bad("dw = conv2d_grad_filter x, y", "dw = conv2d_grad_filter x, dx", NULL,
               TPU_ESHAPE, "input dy 'dx' f32[50, 3] must be [18, 3]", NULL);
    /* the window (rule WINDOW's fields) and the text */
    expect_bad("ho=3 wo=3 passes=6", "ho=4 wo=3 passes=6", NULL, TPU_EINVAL,
               "window field ho=4 is too large", "set ho to at most 3");
    expect_bad("kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3 passes=6",
               "kh=3 kw=3 sh=2 sw=2 pt=1 ho=3 wo=3 passes=6", NULL, TPU_EPARSE, "pl", NULL);
    expect_bad("y = conv2d x, w", "y = conv2d x, w trans_a", NULL, TPU_EPARSE, "trans_a",
               NULL);
    /* in place, and a chip without a bf16 matrix unit */
    expect_text_bad("program p\nparam x: f32[8, 3]\nparam w: f32[3, 3]\n"
                    "x = conv2d x, w h=2 w=4 c=3 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=2 wo=4\n",
                    NULL, TPU_EINVAL, "output y and input x are both 'x'; conv2d cannot write "
                    "a buffer it reads (the array reads its inputs while the output drains)",
                    NULL);
    expect_bad("program convs", "program convs", "tpu-v1", TPU_EUNSUPPORTED,
               "chip 'tpu-v1' has no bf16 matrix unit", "use a chip with a bf16 matrix unit");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_ops_match_definition),
        cmocka_unit_test(test_grad_filter_accumulate),
        cmocka_unit_test(test_conv_cost_is_gemm),
        cmocka_unit_test(test_conv_without_arena),
        cmocka_unit_test(test_conv_text_round_trip),
        cmocka_unit_test(test_conv_verifier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
