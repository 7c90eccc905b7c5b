/* Tests of device programs (include/tpusim/program.h): the op table, the builder, the text
 * form (print, parse, and their round trips, including every float bit pattern class and a
 * 10k-op program), every parse error and every verifier rule, each checked by the text of its
 * message. The MLP training step is built in code and also read from
 * tests/data/program/mlp_step.tpuprog (found through TPUSIM_PROGRAM_DATA or next to this
 * source file); both must give the same program. */
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
#include "tpusim/program.h"

#define N TPU_NO_BUF

/* ---- helpers ------------------------------------------------------------------------------ */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Fails unless a and b are equal field by field (floats by their bits). */
static void assert_programs_equal(const struct tpu_program *a, const struct tpu_program *b)
{
    assert_string_equal(tpu_program_name(a), tpu_program_name(b));
    assert_int_equal(tpu_program_n_buffers(a), tpu_program_n_buffers(b));
    for (uint32_t id = 0; id < tpu_program_n_buffers(a); id++) {
        const struct tpu_buffer_desc *x = tpu_program_buffer(a, id), *y = tpu_program_buffer(b, id);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->rows, y->rows);
        assert_int_equal(x->cols, y->cols);
    }
    assert_int_equal(tpu_program_n_vars(a), tpu_program_n_vars(b));
    for (uint32_t v = 0; v < tpu_program_n_vars(a); v++)
        assert_string_equal(tpu_program_var_name(a, v), tpu_program_var_name(b, v));
    assert_int_equal(tpu_program_n_ops(a), tpu_program_n_ops(b));
    for (size_t i = 0; i < tpu_program_n_ops(a); i++) {
        const struct tpu_op *x = tpu_program_op(a, i), *y = tpu_program_op(b, i);
        if (x->code != y->code)
            fail_msg("op %zu: code %d vs %d", i, (int)x->code, (int)y->code);
        for (int k = 0; k < TPU_OP_MAX_OUT; k++)
            assert_int_equal(x->out[k], y->out[k]);
        for (int k = 0; k < TPU_OP_MAX_IN; k++)
            assert_int_equal(x->in[k], y->in[k]);
        const struct tpu_op_attrs *p = &x->attrs, *q = &y->attrs;
        assert_int_equal(p->trans_a, q->trans_a);
        assert_int_equal(p->trans_b, q->trans_b);
        assert_int_equal(p->accumulate, q->accumulate);
        assert_int_equal(p->passes, q->passes);
        assert_int_equal(p->axis, q->axis);
        assert_int_equal(p->reduce, q->reduce);
        assert_int_equal(p->shift, q->shift);
        assert_int_equal(p->group, q->group);
        assert_int_equal(p->var, q->var);
        assert_true(p->imm == q->imm);
        if (fbits(p->alpha) != fbits(q->alpha) || fbits(p->beta) != fbits(q->beta) ||
            fbits(p->gamma) != fbits(q->gamma) || fbits(p->delta) != fbits(q->delta) ||
            fbits(p->eps) != fbits(q->eps))
            fail_msg("op %zu: float attributes differ (alpha %08x vs %08x)", i,
                     (unsigned)fbits(p->alpha), (unsigned)fbits(q->alpha));
    }
}

/* print -> parse -> equal, and print again gives the same text. Returns the text (caller
 * frees). */
static char *assert_round_trip(const struct tpu_program *p)
{
    char *text = NULL, *again = NULL;
    assert_int_equal(tpu_program_to_string(p, &text), 0);
    struct tpu_program *q = NULL;
    struct tpu_diag d;
    int rc = tpu_program_parse(text, "printed", &q, &d);
    if (rc)
        fail_msg("parse of printed text failed: %s", d.msg);
    assert_programs_equal(p, q);
    assert_int_equal(tpu_program_to_string(q, &again), 0);
    assert_string_equal(text, again);
    free(again);
    tpu_program_destroy(&q);
    return text;
}

static uint32_t add_buf(struct tpu_program *p, const char *name, enum tpu_buf_dtype t,
                        enum tpu_buf_kind k, uint32_t rows, uint32_t cols)
{
    uint32_t id = 12345;
    struct tpu_diag d;
    int rc = tpu_program_add_buffer(p, name, t, k, rows, cols, &id, &d);
    if (rc)
        fail_msg("add_buffer %s: %s", name, d.msg);
    return id;
}

static uint32_t add_var(struct tpu_program *p, const char *name)
{
    uint32_t id = 12345;
    struct tpu_diag d;
    int rc = tpu_program_add_var(p, name, &id, &d);
    if (rc)
        fail_msg("add_var %s: %s", name, d.msg);
    return id;
}

static struct tpu_op mk(enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t o2, uint32_t i0,
                        uint32_t i1)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = o0;
    op.out[1] = o1;
    op.out[2] = o2;
    op.in[0] = i0;
    op.in[1] = i1;
    return op;
}

static void add(struct tpu_program *p, const struct tpu_op *op)
{
    struct tpu_diag d;
    int rc = tpu_program_add_op(p, op, &d);
    if (rc)
        fail_msg("add_op: %s", d.msg);
}

static void add_simple(struct tpu_program *p, enum tpu_opcode code, uint32_t o0, uint32_t i0,
                       uint32_t i1)
{
    struct tpu_op op = mk(code, o0, N, N, i0, i1);
    add(p, &op);
}

static struct tpu_program *parse_ok(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d;
    int rc = tpu_program_parse(text, "t", &p, &d);
    if (rc)
        fail_msg("parse failed: %s\n--- text:\n%s", d.msg, text);
    return p;
}

/* ---- the MLP training step, built in code ----------------------------------------------- */

static struct tpu_program *build_mlp(void)
{
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("mlp_step", &p), 0);
    const enum tpu_buf_kind P = TPU_BUF_PARAM, T = TPU_BUF_TEMP;
    const enum tpu_buf_dtype F = TPU_BUF_F32;
    uint32_t iterations = add_var(p, "iterations"), step = add_var(p, "step");
    assert_int_equal(iterations, 0);
    assert_int_equal(step, 1);
    uint32_t w1 = add_buf(p, "w1", F, P, 784, 128), b1 = add_buf(p, "b1", F, P, 1, 128);
    uint32_t w2 = add_buf(p, "w2", F, P, 128, 10), b2 = add_buf(p, "b2", F, P, 1, 10);
    uint32_t v_w1 = add_buf(p, "v_w1", F, P, 784, 128), v_b1 = add_buf(p, "v_b1", F, P, 1, 128);
    uint32_t m_w2 = add_buf(p, "m_w2", F, P, 128, 10), s_w2 = add_buf(p, "s_w2", F, P, 128, 10);
    uint32_t m_b2 = add_buf(p, "m_b2", F, P, 1, 10), s_b2 = add_buf(p, "s_b2", F, P, 1, 10);
    uint32_t x = add_buf(p, "x", TPU_BUF_BF16, T, 32, 784);
    uint32_t labels = add_buf(p, "labels", TPU_BUF_INT32, T, 32, 1);
    uint32_t z1 = add_buf(p, "z1", F, T, 32, 128), h1 = add_buf(p, "h1", F, T, 32, 128);
    uint32_t logits = add_buf(p, "logits", F, T, 32, 10), loss = add_buf(p, "loss", F, T, 1, 1);
    uint32_t dlogits = add_buf(p, "dlogits", F, T, 32, 10);
    uint32_t counts = add_buf(p, "counts", F, T, 1, 2);
    uint32_t g_w2 = add_buf(p, "g_w2", F, T, 128, 10), g_b2 = add_buf(p, "g_b2", F, T, 1, 10);
    uint32_t dh1 = add_buf(p, "dh1", F, T, 32, 128), dz1 = add_buf(p, "dz1", F, T, 32, 128);
    uint32_t g_w1 = add_buf(p, "g_w1", F, T, 784, 128), g_b1 = add_buf(p, "g_b1", F, T, 1, 128);
    assert_int_equal(w1, 0);
    assert_int_equal(g_b1, 23);

    struct tpu_op op = mk(TPU_OP_LOOP_BEGIN, N, N, N, N, N);
    op.attrs.var = iterations;
    add(p, &op);
    add_simple(p, TPU_OP_INFEED, x, N, N);
    add_simple(p, TPU_OP_INFEED, labels, N, N);
    op = mk(TPU_OP_VAR_ADD, N, N, N, N, N);
    op.attrs.var = step;
    op.attrs.imm = 1;
    add(p, &op);
    assert_int_equal(tpu_program_matmul(p, z1, x, w1, false, false, 1, false), 0);
    assert_int_equal(tpu_program_binary(p, TPU_OP_ADD, z1, z1, b1), 0);
    assert_int_equal(tpu_program_unary(p, TPU_OP_RELU, h1, z1), 0);
    assert_int_equal(tpu_program_matmul(p, logits, h1, w2, false, false, 3, false), 0);
    assert_int_equal(tpu_program_binary(p, TPU_OP_ADD, logits, logits, b2), 0);
    op = mk(TPU_OP_SOFTMAX_XENT, loss, dlogits, N, logits, labels);
    op.attrs.alpha = 1.0f / 32;
    add(p, &op);
    assert_int_equal(tpu_program_binary(p, TPU_OP_CLASSIFY_COUNT, counts, logits, labels), 0);
    assert_int_equal(tpu_program_matmul(p, g_w2, h1, dlogits, true, false, 3, false), 0);
    assert_int_equal(tpu_program_unary(p, TPU_OP_REDUCE_SUM, g_b2, dlogits), 0);
    assert_int_equal(tpu_program_matmul(p, dh1, dlogits, w2, false, true, 3, false), 0);
    assert_int_equal(tpu_program_binary(p, TPU_OP_RELU_GRAD, dz1, dh1, z1), 0);
    assert_int_equal(tpu_program_matmul(p, g_w1, x, dz1, true, false, 1, false), 0);
    assert_int_equal(tpu_program_unary(p, TPU_OP_REDUCE_SUM, g_b1, dz1), 0);
    const uint32_t grads[4] = {g_w1, g_b1, g_w2, g_b2};
    for (int k = 0; k < 4; k++) {
        op = mk(TPU_OP_ALL_REDUCE, grads[k], N, N, grads[k], N);
        op.attrs.reduce = TPU_REDUCE_MEAN;
        add(p, &op);
    }
    op = mk(TPU_OP_SGD_MOMENTUM, w1, v_w1, N, g_w1, N);
    op.attrs.alpha = 0.1f;
    op.attrs.beta = 0.9f;
    add(p, &op);
    op.out[0] = b1;
    op.out[1] = v_b1;
    op.in[0] = g_b1;
    add(p, &op);
    op = mk(TPU_OP_ADAM, w2, m_w2, s_w2, g_w2, N);
    op.attrs.var = step;
    op.attrs.alpha = 0.001f;
    op.attrs.beta = 0.9f;
    op.attrs.delta = 0.999f;
    op.attrs.eps = 1e-7f;
    add(p, &op);
    op.out[0] = b2;
    op.out[1] = m_b2;
    op.out[2] = s_b2;
    op.in[0] = g_b2;
    add(p, &op);
    add_simple(p, TPU_OP_OUTFEED, N, loss, N);
    add_simple(p, TPU_OP_OUTFEED, N, counts, N);
    op = mk(TPU_OP_LOOP_END, N, N, N, N, N);
    add(p, &op);
    return p;
}

static const char mlp_text[] =
    "program mlp_step\n"
    "\n"
    "var iterations\n"
    "var step\n"
    "\n"
    "param w1: f32[784, 128]\n"
    "param b1: f32[1, 128]\n"
    "param w2: f32[128, 10]\n"
    "param b2: f32[1, 10]\n"
    "param v_w1: f32[784, 128]\n"
    "param v_b1: f32[1, 128]\n"
    "param m_w2: f32[128, 10]\n"
    "param s_w2: f32[128, 10]\n"
    "param m_b2: f32[1, 10]\n"
    "param s_b2: f32[1, 10]\n"
    "temp  x: bf16[32, 784]\n"
    "temp  labels: int32[32, 1]\n"
    "temp  z1: f32[32, 128]\n"
    "temp  h1: f32[32, 128]\n"
    "temp  logits: f32[32, 10]\n"
    "temp  loss: f32[1, 1]\n"
    "temp  dlogits: f32[32, 10]\n"
    "temp  counts: f32[1, 2]\n"
    "temp  g_w2: f32[128, 10]\n"
    "temp  g_b2: f32[1, 10]\n"
    "temp  dh1: f32[32, 128]\n"
    "temp  dz1: f32[32, 128]\n"
    "temp  g_w1: f32[784, 128]\n"
    "temp  g_b1: f32[1, 128]\n"
    "\n"
    "loop iterations {\n"
    "  x = infeed\n"
    "  labels = infeed\n"
    "  var_add step 1\n"
    "  z1 = matmul x, w1\n"
    "  z1 = add z1, b1\n"
    "  h1 = relu z1\n"
    "  logits = matmul h1, w2 passes=3\n"
    "  logits = add logits, b2\n"
    "  loss, dlogits = softmax_xent logits, labels alpha=0.03125\n"
    "  counts = classify_count logits, labels\n"
    "  g_w2 = matmul h1, dlogits trans_a passes=3\n"
    "  g_b2 = reduce_sum dlogits axis=0\n"
    "  dh1 = matmul dlogits, w2 trans_b passes=3\n"
    "  dz1 = relu_grad dh1, z1\n"
    "  g_w1 = matmul x, dz1 trans_a\n"
    "  g_b1 = reduce_sum dz1 axis=0\n"
    "  g_w1 = all_reduce g_w1 reduce=mean\n"
    "  g_b1 = all_reduce g_b1 reduce=mean\n"
    "  g_w2 = all_reduce g_w2 reduce=mean\n"
    "  g_b2 = all_reduce g_b2 reduce=mean\n"
    "  w1, v_w1 = sgd_momentum g_w1 alpha=0.1 beta=0.9\n"
    "  b1, v_b1 = sgd_momentum g_b1 alpha=0.1 beta=0.9\n"
    "  w2, m_w2, s_w2 = adam g_w2 var=step alpha=0.001 beta=0.9 delta=0.999 eps=1e-07\n"
    "  b2, m_b2, s_b2 = adam g_b2 var=step alpha=0.001 beta=0.9 delta=0.999 eps=1e-07\n"
    "  outfeed loss\n"
    "  outfeed counts\n"
    "}\n";

/* Reads tests/data/program/<name> (TPUSIM_PROGRAM_DATA overrides the directory, which is
 * otherwise found next to this source file); the caller frees the text. */
static char *read_data(const char *name)
{
    char path[512];
    const char *dir = getenv("TPUSIM_PROGRAM_DATA");
    if (dir) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
    } else {
        const char *file = __FILE__;
        const char *slash = strrchr(file, '/');
        int dir_len = slash ? (int)(slash - file) : 1;
        snprintf(path, sizeof path, "%.*s/data/program/%s", dir_len, slash ? file : ".", name);
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (set TPUSIM_PROGRAM_DATA to tests/data/program)", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    char *text = malloc((size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

static struct tpu_chip_config load_chip(const char *name)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d;
    int rc = tpu_config_load_preset(name, &cfg, &d);
    if (rc)
        fail_msg("preset %s: %s", name, d.msg);
    return cfg;
}

/* ---- the op table ----------------------------------------------------------------------- */

static void test_op_table(void **state)
{
    (void)state;
    assert_string_equal(tpu_opcode_name(TPU_OP_MATMUL), "matmul");
    assert_string_equal(tpu_opcode_name(TPU_OP_COLLECTIVE_PERMUTE), "collective_permute");
    assert_string_equal(tpu_opcode_name(TPU_OP_COUNT), "unknown");
    enum tpu_opcode c;
    for (unsigned i = 0; i < TPU_OP_COUNT; i++) {
        assert_int_equal(tpu_opcode_parse(tpu_opcode_name((enum tpu_opcode)i), &c), 0);
        assert_int_equal(c, i);
        /* every operand has a role name, and none past the counts */
        for (unsigned k = 0; k < tpu_opcode_n_out(c); k++)
            assert_non_null(tpu_opcode_operand_name(c, true, k));
        for (unsigned k = 0; k < tpu_opcode_n_in(c); k++)
            assert_non_null(tpu_opcode_operand_name(c, false, k));
        assert_null(tpu_opcode_operand_name(c, true, tpu_opcode_n_out(c)));
        assert_null(tpu_opcode_operand_name(c, false, tpu_opcode_n_in(c)));
    }
    assert_int_equal(tpu_opcode_parse("matmull", &c), TPU_ENOTFOUND);
    assert_int_equal(tpu_opcode_n_out(TPU_OP_ADAM), 3);
    assert_int_equal(tpu_opcode_n_in(TPU_OP_ADAM), 1);
    assert_int_equal(tpu_opcode_n_out(TPU_OP_SOFTMAX_XENT), 2);
    assert_int_equal(tpu_opcode_n_in(TPU_OP_VAR_ADD), 0);
    assert_int_equal(tpu_opcode_n_out(TPU_OP_COUNT), 0);
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_SOFTMAX_XENT, true, 1), "dlogits");
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_SOFTMAX_XENT, false, 1), "labels");
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_RELU_GRAD, false, 0), "dy");
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_ADAM, true, 2), "v");
    assert_null(tpu_opcode_operand_name(TPU_OP_COUNT, true, 0));
    assert_int_equal(tpu_opcode_attrs(TPU_OP_MATMUL), TPU_ATTR_TRANS_A | TPU_ATTR_TRANS_B |
                                                          TPU_ATTR_ACCUMULATE | TPU_ATTR_PASSES);
    assert_int_equal(tpu_opcode_attrs(TPU_OP_RELU), 0);
    assert_int_equal(tpu_opcode_attrs(TPU_OP_VAR_ADD), TPU_ATTR_VAR | TPU_ATTR_IMM);
    assert_true(tpu_opcode_attrs(TPU_OP_ADAM) & TPU_ATTR_EPS);

    assert_string_equal(tpu_buf_dtype_name(TPU_BUF_BF16), "bf16");
    assert_string_equal(tpu_buf_dtype_name((enum tpu_buf_dtype)9), "unknown");
    enum tpu_buf_dtype t;
    assert_int_equal(tpu_buf_dtype_parse("int32", &t), 0);
    assert_int_equal(t, TPU_BUF_INT32);
    assert_int_equal(tpu_buf_dtype_parse("f16", &t), TPU_ENOTFOUND);
    assert_int_equal(tpu_buf_dtype_bytes(TPU_BUF_F32), 4);
    assert_int_equal(tpu_buf_dtype_bytes(TPU_BUF_BF16), 2);
    assert_int_equal(tpu_buf_dtype_bytes(TPU_BUF_INT8), 1);
    assert_int_equal(tpu_buf_dtype_bytes(TPU_BUF_INT32), 4);
    assert_int_equal(tpu_buf_dtype_bytes((enum tpu_buf_dtype)9), 0);
    assert_string_equal(tpu_buf_kind_name(TPU_BUF_PARAM), "param");
    assert_string_equal(tpu_buf_kind_name(TPU_BUF_TEMP), "temp");
    struct tpu_buffer_desc b = {.dtype = TPU_BUF_BF16, .rows = 1u << 31, .cols = 6};
    assert_true(tpu_buffer_bytes(&b) == (uint64_t)12 << 31);

    struct tpu_op op;
    memset(&op, 0x5a, sizeof op);
    tpu_op_init(&op, TPU_OP_MATMUL);
    assert_int_equal(op.code, TPU_OP_MATMUL);
    assert_int_equal(op.attrs.passes, 1);
    assert_int_equal(op.out[0], N);
    assert_int_equal(op.in[1], N);
    assert_false(op.attrs.trans_a);
    assert_true(op.attrs.alpha == 0.0f && op.attrs.imm == 0 && op.attrs.var == 0);
    tpu_op_init(&op, TPU_OP_RELU);
    assert_int_equal(op.attrs.passes, 0);
}
