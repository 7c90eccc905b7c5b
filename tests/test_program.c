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
#include "program/op_table.h"

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
        assert_memory_equal(&p->win, &q->win, sizeof p->win);
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

static uint32_t add_buf(struct tpu_program *p, const char *name, enum tpu_dtype t,
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
    const enum tpu_dtype F = TPU_F32;
    uint32_t iterations = add_var(p, "iterations"), step = add_var(p, "step");
    assert_int_equal(iterations, 0);
    assert_int_equal(step, 1);
    uint32_t w1 = add_buf(p, "w1", F, P, 784, 128), b1 = add_buf(p, "b1", F, P, 1, 128);
    uint32_t w2 = add_buf(p, "w2", F, P, 128, 10), b2 = add_buf(p, "b2", F, P, 1, 10);
    uint32_t v_w1 = add_buf(p, "v_w1", F, P, 784, 128), v_b1 = add_buf(p, "v_b1", F, P, 1, 128);
    uint32_t m_w2 = add_buf(p, "m_w2", F, P, 128, 10), s_w2 = add_buf(p, "s_w2", F, P, 128, 10);
    uint32_t m_b2 = add_buf(p, "m_b2", F, P, 1, 10), s_b2 = add_buf(p, "s_b2", F, P, 1, 10);
    uint32_t x = add_buf(p, "x", TPU_BF16, T, 32, 784);
    uint32_t labels = add_buf(p, "labels", TPU_INT32, T, 32, 1);
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

/* The op table's columns agree with each other (include/tpusim/program.h). */
static void test_op_table_columns(void **state)
{
    (void)state;
    for (unsigned i = 0; i < TPU_OP_COUNT; i++) {
        const struct tpu__op_info *info = tpu__op_info((enum tpu_opcode)i);
        assert_true(info->n_out <= TPU_OP_MAX_OUT && info->n_in <= TPU_OP_MAX_IN);
        /* the text must state only attributes the op reads */
        assert_int_equal(info->required & ~info->attrs, 0);
        /* in place: one output, which may be only an input the op has */
        if (info->alias) {
            assert_int_equal(info->n_out, 1);
            assert_int_equal(info->alias >> info->n_in, 0);
        }
        if (info->rmw)
            assert_true(info->n_out >= 1);
        /* ops written otherwise than "outputs = op inputs" have no buffers */
        if (info->syntax != TPU__SYNTAX_OPERANDS)
            assert_int_equal(info->n_out + info->n_in, 0);
    }
    assert_string_equal(tpu__op_info(TPU_OP_COUNT)->name, "unknown");
    assert_int_equal(tpu__op_info(TPU_OP_ADD)->alias, TPU__ALIAS_IN01);
    assert_int_equal(tpu__op_info(TPU_OP_MATMUL)->alias, TPU__ALIAS_NONE);
    assert_true(tpu__op_info(TPU_OP_ADAM)->rmw);
    assert_int_equal(tpu__op_info(TPU_OP_ADAM)->rule, TPU__RULE_ADAM);
    assert_int_equal(tpu__op_info(TPU_OP_VAR_ADD)->syntax, TPU__SYNTAX_VAR_IMM);
}

static void test_op_table(void **state)
{
    (void)state;
    assert_string_equal(tpu_opcode_name(TPU_OP_MATMUL), "matmul");
    assert_string_equal(tpu_opcode_name(TPU_OP_COLLECTIVE_PERMUTE), "collective_permute");
    assert_string_equal(tpu_opcode_name(TPU_OP_COUNT), "unknown");
    enum tpu_opcode c = TPU_OP_COUNT;
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

    assert_string_equal(tpu_dtype_name(TPU_BF16), "bf16");
    assert_string_equal(tpu_dtype_name((enum tpu_dtype)9), "unknown");
    enum tpu_dtype t = TPU_F32;
    assert_int_equal(tpu_dtype_parse("int32", &t), 0);
    assert_int_equal(t, TPU_INT32);
    assert_int_equal(tpu_dtype_parse("f16", &t), TPU_ENOTFOUND);
    assert_int_equal(tpu_dtype_bytes(TPU_F32), 4);
    assert_int_equal(tpu_dtype_bytes(TPU_BF16), 2);
    assert_int_equal(tpu_dtype_bytes(TPU_INT8), 1);
    assert_int_equal(tpu_dtype_bytes(TPU_INT32), 4);
    assert_int_equal(tpu_dtype_bytes((enum tpu_dtype)9), 0);
    assert_string_equal(tpu_buf_kind_name(TPU_BUF_PARAM), "param");
    assert_string_equal(tpu_buf_kind_name(TPU_BUF_TEMP), "temp");
    struct tpu_buffer_desc b = {.dtype = TPU_BF16, .rows = 1u << 31, .cols = 6};
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

/* ---- the builder ---------------------------------------------------------------------------- */

static void test_builder_basics(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("step.v2", &p), 0);
    assert_string_equal(tpu_program_name(p), "step.v2");
    assert_int_equal(tpu_program_n_buffers(p), 0);
    assert_int_equal(tpu_program_n_ops(p), 0);
    uint32_t a = add_buf(p, "a", TPU_F32, TPU_BUF_PARAM, 3, 5);
    uint32_t b = add_buf(p, "_b.1", TPU_INT8, TPU_BUF_TEMP, 1, 1);
    uint32_t n = add_var(p, "n");
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(n, 0);
    const struct tpu_buffer_desc *d = tpu_program_buffer(p, b);
    assert_string_equal(d->name, "_b.1");
    assert_int_equal(d->dtype, TPU_INT8);
    assert_int_equal(d->kind, TPU_BUF_TEMP);
    assert_int_equal(tpu_buffer_bytes(tpu_program_buffer(p, a)), 60);
    assert_null(tpu_program_buffer(p, 2));
    assert_string_equal(tpu_program_var_name(p, 0), "n");
    assert_null(tpu_program_var_name(p, 1));
    uint32_t id = 99;
    assert_int_equal(tpu_program_find_buffer(p, "_b.1", &id), 0);
    assert_int_equal(id, 1);
    assert_int_equal(tpu_program_find_buffer(p, "n", &id), TPU_ENOTFOUND);
    assert_int_equal(tpu_program_find_var(p, "n", &id), 0);
    assert_int_equal(id, 0);
    assert_int_equal(tpu_program_find_var(p, "a", &id), TPU_ENOTFOUND);
    assert_int_equal(tpu_program_find_buffer(p, "zz", &id), TPU_ENOTFOUND);

    /* add_op copies the op and stores unused slots as TPU_NO_BUF */
    struct tpu_op op = {0};
    op.code = TPU_OP_RELU;
    op.out[0] = a;
    op.out[1] = 7; /* not an operand of relu: ignored */
    op.in[0] = a;
    op.in[1] = 0;
    add(p, &op);
    op.out[0] = 42;
    const struct tpu_op *got = tpu_program_op(p, 0);
    assert_int_equal(got->out[0], a);
    assert_int_equal(got->out[1], N);
    assert_int_equal(got->out[2], N);
    assert_int_equal(got->in[0], a);
    assert_int_equal(got->in[1], N);
    assert_null(tpu_program_op(p, 1));
    assert_int_equal(tpu_program_unary(p, TPU_OP_EXP, a, a), 0);
    assert_int_equal(tpu_program_binary(p, TPU_OP_MAX, a, a, a), 0);
    assert_int_equal(tpu_program_matmul(p, a, a, a, true, true, 6, true), 0);
    got = tpu_program_op(p, 3);
    assert_int_equal(got->code, TPU_OP_MATMUL);
    assert_true(got->attrs.trans_a && got->attrs.trans_b && got->attrs.accumulate);
    assert_int_equal(got->attrs.passes, 6);
    assert_int_equal(tpu_program_n_ops(p), 4);

    tpu_program_destroy(&p);
    assert_null(p);
    tpu_program_destroy(&p); /* NULL is fine */
    tpu_program_destroy(NULL);
}

static void expect_diag(int rc, int want_rc, const struct tpu_diag *d, const char *want)
{
    if (rc != want_rc || !strstr(d->msg, want))
        fail_msg("got %s \"%s\", want %s with \"%s\"", tpu_err_name(rc), d->msg,
                 tpu_err_name(want_rc), want);
}

static void test_builder_errors(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("9lives", &p), TPU_EINVAL);
    assert_null(p);
    assert_int_equal(tpu_program_create("", &p), TPU_EINVAL);
    assert_int_equal(tpu_program_create(NULL, &p), TPU_EINVAL);
    assert_int_equal(tpu_program_create("ok", NULL), TPU_EINVAL);
    assert_int_equal(tpu_program_create("ok", &p), 0);
    struct tpu_diag d;
    uint32_t id;
    const enum tpu_dtype F = TPU_F32;
    const enum tpu_buf_kind T = TPU_BUF_TEMP;
    expect_diag(tpu_program_add_buffer(p, "", F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "buffer name is empty");
    expect_diag(tpu_program_add_buffer(p, "2x", F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "buffer name '2x' is not an identifier: a name starts with a letter or '_'");
    expect_diag(tpu_program_add_buffer(p, "a-b", F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "'a-b' is not an identifier");
    char long_name[60];
    memset(long_name, 'q', 48);
    long_name[48] = '\0';
    expect_diag(tpu_program_add_buffer(p, long_name, F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "has 48 characters; at most 47 are allowed");
    long_name[47] = '\0';
    assert_int_equal(tpu_program_add_buffer(p, long_name, F, T, 1, 1, &id, &d), 0);
    expect_diag(tpu_program_add_buffer(p, "z", F, T, 0, 4, &id, &d), TPU_EINVAL, &d,
                "buffer 'z' has shape [0, 4]; both dimensions must be at least 1");
    expect_diag(tpu_program_add_buffer(p, "z", (enum tpu_dtype)7, T, 1, 1, &id, &d),
                TPU_EINVAL, &d, "buffer 'z' has dtype 7; use f32, bf16, int8 or int32");
    expect_diag(tpu_program_add_buffer(p, "z", F, (enum tpu_buf_kind)5, 1, 1, &id, &d),
                TPU_EINVAL, &d, "buffer 'z' has kind 5; use param or temp");
    expect_diag(tpu_program_add_buffer(p, "z", F, T, UINT32_MAX, UINT32_MAX, &id, &d),
                TPU_ERANGE, &d, "is larger than 2^64 bytes");
    /* names are unique across buffers and variables */
    uint32_t x = add_buf(p, "x", F, T, 2, 2);
    expect_diag(tpu_program_add_buffer(p, "x", F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "name 'x' is already used by buffer 1; buffer and variable names must be unique");
    expect_diag(tpu_program_add_var(p, "x", &id, &d), TPU_EINVAL, &d,
                "already used by buffer 1");
    add_var(p, "n");
    expect_diag(tpu_program_add_buffer(p, "n", F, T, 1, 1, &id, &d), TPU_EINVAL, &d,
                "name 'n' is already used by variable 0");
    expect_diag(tpu_program_add_var(p, "n n", &id, &d), TPU_EINVAL, &d,
                "variable name 'n n' is not an identifier");
    assert_int_equal(tpu_program_n_buffers(p), 2);
    assert_int_equal(tpu_program_n_vars(p), 1);

    /* add_op: opcode and ids only */
    struct tpu_op op = mk((enum tpu_opcode)99, x, N, N, x, N);
    expect_diag(tpu_program_add_op(p, &op, &d), TPU_EINVAL, &d,
                "op 0 has opcode 99, which is not in the op table");
    op = mk(TPU_OP_MATMUL, x, N, N, x, 5);
    expect_diag(tpu_program_add_op(p, &op, &d), TPU_EINVAL, &d,
                "op 0 (matmul): input b is buffer id 5, but the program has 2 buffers");
    op = mk(TPU_OP_RELU, N, N, N, x, N);
    expect_diag(tpu_program_add_op(p, &op, &d), TPU_EINVAL, &d,
                "op 0 (relu): output y is buffer id TPU_NO_BUF = 4294967295");
    op = mk(TPU_OP_VAR_ADD, N, N, N, N, N);
    op.attrs.var = 1;
    expect_diag(tpu_program_add_op(p, &op, &d), TPU_EINVAL, &d,
                "op 0 (var_add): variable id 1, but the program has 1 variables");
    op = mk(TPU_OP_LOOP_BEGIN, N, N, N, N, N);
    op.attrs.var = 3;
    expect_diag(tpu_program_add_op(p, &op, &d), TPU_EINVAL, &d, "variable id 3");
    expect_diag(tpu_program_add_op(NULL, &op, &d), TPU_EINVAL, &d, "no program");
    assert_int_equal(tpu_program_n_ops(p), 0);

    /* the convenience builders take only their kind of op */
    assert_int_equal(tpu_program_binary(p, TPU_OP_RELU, x, x, x), TPU_EINVAL);
    assert_int_equal(tpu_program_binary(p, TPU_OP_MATMUL, x, x, x), TPU_EINVAL);
    assert_int_equal(tpu_program_unary(p, TPU_OP_ADD, x, x), TPU_EINVAL);
    assert_int_equal(tpu_program_unary(p, TPU_OP_INFEED, x, x), TPU_EINVAL);
    assert_int_equal(tpu_program_unary(p, TPU_OP_RELU, x, 9), TPU_EINVAL);
    assert_int_equal(tpu_program_matmul(p, x, x, x, false, false, 300, false), TPU_EINVAL);
    assert_int_equal(tpu_program_n_ops(p), 0);
    tpu_program_destroy(&p);
}

/* Thousands of names: ids in order, every one found by name (the index grows). */
static void test_builder_many_names(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("many", &p), 0);
    char name[32];
    for (uint32_t i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "b%u", i);
        assert_int_equal(add_buf(p, name, TPU_F32, TPU_BUF_TEMP, 1, i + 1), i);
        if (i % 5 == 0) {
            snprintf(name, sizeof name, "v%u", i);
            assert_int_equal(add_var(p, name), i / 5);
        }
    }
    for (uint32_t i = 0; i < 5000; i++) {
        uint32_t id = UINT32_MAX;
        snprintf(name, sizeof name, "b%u", i);
        assert_int_equal(tpu_program_find_buffer(p, name, &id), 0);
        assert_int_equal(id, i);
        assert_int_equal(tpu_program_buffer(p, id)->cols, i + 1);
        snprintf(name, sizeof name, "v%u", i);
        assert_int_equal(tpu_program_find_var(p, name, &id), i % 5 == 0 ? 0 : TPU_ENOTFOUND);
    }
    tpu_program_destroy(&p);
}

/* ---- the text form ---------------------------------------------------------------------- */

static void test_print_mlp(void **state)
{
    (void)state;
    struct tpu_program *p = build_mlp();
    char *text = assert_round_trip(p);
    assert_string_equal(text, mlp_text);
    /* print to a FILE gives the same bytes */
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(tpu_program_print(p, f), 0);
    long len = ftell(f);
    assert_int_equal(len, (long)strlen(mlp_text));
    rewind(f);
    char *back = calloc(1, (size_t)len + 1);
    assert_non_null(back);
    assert_int_equal(fread(back, 1, (size_t)len, f), (size_t)len);
    assert_string_equal(back, mlp_text);
    fclose(f);
    free(back);
    free(text);
    assert_int_equal(tpu_program_print(NULL, stdout), TPU_EINVAL);
    char *s = (char *)1;
    assert_int_equal(tpu_program_to_string(NULL, &s), TPU_EINVAL);
    assert_null(s);
    tpu_program_destroy(&p);
}

/* The hand-written file (comments, aligned columns, other indentation, eps=1e-7) is the
 * program built in code, and it verifies on the tiny chip. */
static void test_parse_data_file(void **state)
{
    (void)state;
    char *text = read_data("mlp_step.tpuprog");
    struct tpu_program *file = NULL, *built = build_mlp();
    struct tpu_diag d;
    int rc = tpu_program_parse(text, "mlp_step.tpuprog", &file, &d);
    if (rc)
        fail_msg("%s", d.msg);
    assert_programs_equal(built, file);
    assert_int_equal(tpu_program_n_ops(file), 28);
    assert_int_equal(tpu_program_op(file, 4)->code, TPU_OP_MATMUL);
    assert_int_equal(tpu_program_op(file, 11)->attrs.trans_a, true);
    assert_true(tpu_program_op(file, 23)->attrs.eps == 1e-7f);
    struct tpu_chip_config cfg = load_chip("tiny");
    rc = tpu_program_verify(file, &cfg, &d);
    if (rc)
        fail_msg("%s", d.msg);
    assert_int_equal(d.code, 0);
    assert_string_equal(d.msg, "");
    char *printed = assert_round_trip(file);
    assert_string_equal(printed, mlp_text);
    free(printed);
    free(text);
    tpu_program_destroy(&file);
    tpu_program_destroy(&built);
}

/* Every op, every attribute form, ops before and after the loop, odd floats. */
static void test_round_trip_every_op(void **state)
{
    (void)state;
    static const char text[] =
        "program all_ops\n"
        "\n"
        "var n\n"
        "var t\n"
        "\n"
        "param w: f32[4, 4]\n"
        "param m: f32[4, 4]\n"
        "param v: f32[4, 4]\n"
        "param q: int8[4, 4]\n"
        "temp  x: f32[4, 4]\n"
        "temp  y: f32[4, 4]\n"
        "temp  r: f32[1, 4]\n"
        "temp  c: f32[4, 1]\n"
        "temp  h: bf16[4, 4]\n"
        "temp  i: int32[4, 4]\n"
        "temp  lab: int32[4, 1]\n"
        "temp  s: f32[1, 1]\n"
        "temp  cnt: f32[1, 2]\n"
        "\n"
        "x = infeed\n"
        "loop n {\n"
        "  y = matmul x, w trans_a trans_b accumulate passes=6\n"
        "  i = matmul q, q\n"
        "  y = add x, r\n"
        "  y = sub y, s\n"
        "  y = mul y, x\n"
        "  y = max y, x\n"
        "  y = scale y alpha=-0 beta=1.5\n"
        "  y = relu y\n"
        "  y = relu_grad y, x\n"
        "  y = exp y\n"
        "  h = convert y\n"
        "  r = reduce_sum y axis=0\n"
        "  c = reduce_max y axis=1\n"
        "  s, y = softmax_xent x, lab alpha=nan\n"
        "  cnt = classify_count x, lab\n"
        "  w, m = sgd_momentum x alpha=inf beta=-inf gamma=nan:0xffc00000\n"
        "  w, m, v = adam x var=t alpha=1.4013e-45 beta=3.4028235e+38 gamma=nan:0x7f800001 "
        "delta=0.1 eps=1e-07\n"
        "  y = all_reduce y reduce=sum\n"
        "  y = collective_permute x shift=-3 group=replica_cores\n"
        "  y = collective_permute x shift=0 group=replicas\n"
        "  var_add t -9223372036854775808\n"
        "  outfeed y\n"
        "}\n"
        "outfeed s\n";
    struct tpu_program *p = parse_ok(text);
    char *printed = assert_round_trip(p);
    assert_string_equal(printed, text);
    const struct tpu_op *op = tpu_program_op(p, 2);
    assert_true(op->attrs.trans_a && op->attrs.trans_b && op->attrs.accumulate);
    assert_int_equal(op->attrs.passes, 6);
    assert_int_equal(fbits(tpu_program_op(p, 8)->attrs.alpha), 0x80000000u);
    assert_true(tpu_program_op(p, 8)->attrs.beta == 1.5f);
    assert_int_equal(fbits(tpu_program_op(p, 15)->attrs.alpha), 0x7fc00000u);
    op = tpu_program_op(p, 17);
    assert_true(isinf(op->attrs.alpha) && op->attrs.alpha > 0);
    assert_true(isinf(op->attrs.beta) && op->attrs.beta < 0);
    assert_int_equal(fbits(op->attrs.gamma), 0xffc00000u);
    op = tpu_program_op(p, 18);
    assert_int_equal(fbits(op->attrs.alpha), 1u); /* the smallest subnormal */
    assert_int_equal(fbits(op->attrs.beta), 0x7f7fffffu);
    assert_int_equal(fbits(op->attrs.gamma), 0x7f800001u); /* a signalling NaN, kept */
    assert_int_equal(op->attrs.var, 1);
    assert_int_equal(tpu_program_op(p, 19)->attrs.reduce, TPU_REDUCE_SUM);
    assert_int_equal(tpu_program_op(p, 20)->attrs.shift, -3);
    assert_int_equal(tpu_program_op(p, 20)->attrs.group, TPU_GROUP_REPLICA_CORES);
    assert_true(tpu_program_op(p, 22)->attrs.imm == INT64_MIN);
    free(printed);
    tpu_program_destroy(&p);
}

/* Free layout: tabs, CRLF, comments, no final newline, compact shapes, attributes in any
 * order, hex floats, integer spellings of reduce and group. Printing makes it canonical. */
static void test_parse_free_layout(void **state)
{
    (void)state;
    static const char text[] =
        "# leading comment\r\n"
        "\r\n"
        "   program\tfree   # the name\r\n"
        "param w:f32[2,3]\r\n"
        "temp\tx :  f32 [ 3 , 2 ]\n"
        "temp y: f32[2, 2]\n"
        "var n\n"
        "loop n{ # body\n"
        "\ty=matmul w,x passes = 3 trans_b\n"
        "y = scale y beta=0x1p-3 alpha=+2\n"
        "y=all_reduce y reduce=1\n"
        "y = collective_permute y shift=+1 group=1\n"
        "}  # done";
    static const char canonical[] =
        "program free\n"
        "\n"
        "var n\n"
        "\n"
        "param w: f32[2, 3]\n"
        "temp  x: f32[3, 2]\n"
        "temp  y: f32[2, 2]\n"
        "\n"
        "loop n {\n"
        "  y = matmul w, x trans_b passes=3\n"
        "  y = scale y alpha=2 beta=0.125\n"
        "  y = all_reduce y reduce=mean\n"
        "  y = collective_permute y shift=1 group=replica_cores\n"
        "}\n";
    struct tpu_program *p = parse_ok(text);
    char *printed = assert_round_trip(p);
    assert_string_equal(printed, canonical);
    free(printed);
    tpu_program_destroy(&p);
}

/* A buffer may be named like a keyword, an op or a flag: the syntax keeps them apart. */
static void test_names_like_keywords(void **state)
{
    (void)state;
    static const char text[] =
        "program program\n"
        "\n"
        "var loop\n"
        "\n"
        "param var: f32[2, 2]\n"
        "temp  temp: f32[2, 2]\n"
        "temp  trans_a: f32[2, 2]\n"
        "temp  relu: f32[2, 2]\n"
        "temp  param: f32[2, 2]\n"
        "\n"
        "loop loop {\n"
        "  temp = infeed\n"
        "  trans_a = matmul temp, var trans_a\n"
        "  relu = relu trans_a\n"
        "  param, relu = sgd_momentum relu alpha=1\n"
        "  var_add loop 1\n"
        "}\n";
    struct tpu_program *p = parse_ok(text);
    char *printed = assert_round_trip(p);
    assert_string_equal(printed, text);
    assert_int_equal(tpu_program_op(p, 2)->in[0], 1);
    assert_true(tpu_program_op(p, 2)->attrs.trans_a);
    free(printed);
    tpu_program_destroy(&p);
}

/* Random float bit patterns of every class survive print -> parse exactly. */
static void test_float_round_trip(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("floats", &p), 0);
    uint32_t x = add_buf(p, "x", TPU_F32, TPU_BUF_TEMP, 1, 1);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 4000; i++) {
        struct tpu_op op = mk(TPU_OP_SCALE, x, N, N, x, N);
        uint32_t bits[2];
        for (int k = 0; k < 2; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            bits[k] = (uint32_t)(s >> 17);
            switch (i % 8) { /* steer some into the rare classes */
            case 1: bits[k] &= 0x807fffffu; break;                /* zero or subnormal */
            case 2: bits[k] |= 0x7f800000u; break;                /* inf or NaN */
            case 3: bits[k] = (bits[k] & 0x80000000u) | 0x7f7fffffu; break; /* +-max */
            default: break;
            }
        }
        op.attrs.alpha = bitsf(bits[0]);
        op.attrs.beta = bitsf(bits[1]);
        add(p, &op);
    }
    char *text = assert_round_trip(p);
    free(text);
    tpu_program_destroy(&p);
}

/* A 10k-op program round-trips and verifies. */
static void test_large_program(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("deep", &p), 0);
    uint32_t n = add_var(p, "n");
    enum { N_LAYERS = 9996 };
    uint32_t first = add_buf(p, "t0", TPU_F32, TPU_BUF_TEMP, 8, 8);
    char name[32];
    for (int i = 1; i <= N_LAYERS; i++) {
        snprintf(name, sizeof name, "t%d", i);
        add_buf(p, name, TPU_F32, TPU_BUF_TEMP, 8, 8);
    }
    struct tpu_op op = mk(TPU_OP_LOOP_BEGIN, N, N, N, N, N);
    op.attrs.var = n;
    add(p, &op);
    add_simple(p, TPU_OP_INFEED, first, N, N);
    for (uint32_t i = 1; i <= N_LAYERS; i++)
        add_simple(p, i % 2 ? TPU_OP_RELU : TPU_OP_EXP, first + i, first + i - 1, N);
    add_simple(p, TPU_OP_OUTFEED, N, first + N_LAYERS, N);
    op = mk(TPU_OP_LOOP_END, N, N, N, N, N);
    add(p, &op);
    assert_int_equal(tpu_program_n_ops(p), 10000);
    struct tpu_diag d;
    assert_int_equal(tpu_program_verify(p, NULL, &d), 0);
    char *text = assert_round_trip(p);
    assert_non_null(strstr(text, "\n  t9996 = exp t9995\n  outfeed t9996\n}\n"));
    free(text);
    tpu_program_destroy(&p);
}

static void test_format_op(void **state)
{
    (void)state;
    struct tpu_program *p = build_mlp();
    char buf[128];
    assert_int_equal(tpu_program_format_op(p, 23, buf, sizeof buf), 0);
    assert_string_equal(buf, "w2, m_w2, s_w2 = adam g_w2 var=step alpha=0.001 beta=0.9 "
                             "delta=0.999 eps=1e-07");
    assert_int_equal(tpu_program_format_op(p, 0, buf, sizeof buf), 0);
    assert_string_equal(buf, "loop iterations {");
    assert_int_equal(tpu_program_format_op(p, 27, buf, sizeof buf), 0);
    assert_string_equal(buf, "}");
    char small[12];
    assert_int_equal(tpu_program_format_op(p, 4, small, sizeof small), 0);
    assert_string_equal(small, "z1 = mat...");
    assert_int_equal(tpu_program_format_op(p, 28, buf, sizeof buf), TPU_EINVAL);
    assert_string_equal(buf, "");
    assert_int_equal(tpu_program_format_op(p, 0, buf, 3), TPU_EINVAL);
    tpu_program_destroy(&p);
}

/* Attributes an op does not read are printed (nothing is hidden) but do not parse back;
 * the verifier rejects them too. */
static void test_print_stray_attribute(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    assert_int_equal(tpu_program_create("stray", &p), 0);
    uint32_t x = add_buf(p, "x", TPU_F32, TPU_BUF_PARAM, 2, 2);
    struct tpu_op op = mk(TPU_OP_RELU, x, N, N, x, N);
    op.attrs.alpha = 2.0f;
    op.attrs.passes = 3;
    add(p, &op);
    char *text = NULL;
    assert_int_equal(tpu_program_to_string(p, &text), 0);
    assert_non_null(strstr(text, "\nx = relu x passes=3 alpha=2\n"));
    struct tpu_program *q = NULL;
    struct tpu_diag d;
    expect_diag(tpu_program_parse(text, "s", &q, &d), TPU_EPARSE, &d,
                "s:5:12: relu takes no attributes, got 'passes'");
    assert_null(q);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 0 'x = relu x passes=3 alpha=2': relu does not read attribute passes, which "
                "is set; attributes an op does not read must stay zero: remove it");
    free(text);
    tpu_program_destroy(&p);
}

/* ---- parse errors ------------------------------------------------------------------------ */

/* Lines 1-6; the cases start at line 7. */
#define HEAD                                                                                   \
    "program t\n"                                                                              \
    "var n\n"                                                                                  \
    "var step\n"                                                                               \
    "param w: f32[4, 4]\n"                                                                     \
    "temp x: f32[4, 4]\n"                                                                      \
    "temp y: f32[4, 4]\n"

struct parse_case {
    const char *text;
    const char *want[2]; /* substrings of the message */
};

static const struct parse_case parse_cases[] = {
    /* unknown names, with suggestions */
    {HEAD "y = matmull x, w\n", {"t:7:5: unknown op 'matmull' (did you mean 'matmul'?)"}},
    {HEAD "y = softmax x, w\n", {"t:7:5: unknown op 'softmax' (did you mean 'softmax_xent'?)"}},
    {HEAD "y = frobnicate x\n", {"t:7:5: unknown op 'frobnicate'"}},
    {HEAD "y relu x\n", {"t:7:1: unknown op 'y'; an op line reads '<outputs> = <op> <inputs>' "
                         "(did you forget the '='?)"}},
    {HEAD "loop_begin n\n", {"t:7:1: 'loop_begin' is written as 'loop <variable> {'"}},
    {HEAD "loop n {\n  loop_end\n", {"t:8:3: 'loop_end' is written as '}'"}},
    {HEAD "y = relu xx\n", {"t:7:10: unknown buffer 'xx' (did you mean 'x'?); declare it with "
                            "'param' or 'temp' before the ops"}},
    {HEAD "z = relu x\n", {"t:7:1: unknown buffer 'z'"}},
    {HEAD "y, zz = softmax_xent x, w alpha=1\n", {"t:7:4: unknown buffer 'zz'"}},
    {HEAD "y = relu n\n", {"t:7:10: 'n' is a variable, not a buffer"}},
    {HEAD "loop w {\n", {"t:7:6: 'w' is a buffer, not a variable"}},
    {HEAD "var_add nn 1\n", {"t:7:9: unknown variable 'nn' (did you mean 'n'?)"}},
    {HEAD "w, x, y = adam x var=stp alpha=1 beta=0 delta=0 eps=1\n",
     {"t:7:22: unknown variable 'stp' (did you mean 'step'?)"}},
    /* attributes */
    {HEAD "y = matmul x, w trans\n",
     {"t:7:17: unknown attribute 'trans' for matmul (did you mean 'trans_a'?); matmul takes "
      "trans_a, trans_b, accumulate, passes=<1|3|6>"}},
    {HEAD "y = relu x alpha=1\n", {"t:7:12: relu takes no attributes, got 'alpha'"}},
    {HEAD "y = relu x parts=2\n", {"t:7:12: relu takes no attributes, got 'parts'"}},
    {HEAD "y = halo x parts=2\n", {"t:7:5: halo needs attribute h=<rows>"}},
    {HEAD "y = infeed core0=1\n", {"t:7:12: 'core0' is a flag: write 'core0' alone, without '='"}},
    {HEAD "y = all_reduce x group=cores\n",
     {"t:7:24: group=cores is not known; write group=replicas or group=replica_cores"}},
    {HEAD "y = max_pool x h=4 w=1 c=1 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=4 wo=1 parts=-1\n",
     {"t:7:74: parts=-1 is out of range (0 to 4294967295)"}},
    {HEAD "y = scale x alpha=1 axis=0\n",
     {"t:7:21: unknown attribute 'axis' for scale; scale takes alpha=<float>, beta=<float>"}},
    {HEAD "y = scale x\n", {"t:7:5: scale needs attribute alpha=<float>"}},
    {HEAD "w, x, y = adam x var=n alpha=1 beta=0 eps=1\n",
     {"t:7:11: adam needs attribute delta=<float>"}},
    {HEAD "y = reduce_sum x\n", {"t:7:5: reduce_sum needs attribute axis=<0|1>"}},
    {HEAD "y = matmul x, w passes=3 passes=3\n", {"t:7:26: attribute 'passes' given twice"}},
    {HEAD "y = matmul x, w trans_a=1\n",
     {"t:7:17: 'trans_a' is a flag: write 'trans_a' alone, without '='"}},
    {HEAD "y = matmul x, w passes\n",
     {"t:7:17: attribute 'passes' needs a value: passes=<1|3|6>"}},
    {HEAD "y = matmul x, w passes=\n",
     {"t:7:24: expected a value for 'passes' (passes=<1|3|6>), found the end of the line"}},
    {HEAD "y = matmul x, w passes=three\n",
     {"t:7:24: expected an integer for passes, found 'three'"}},
    {HEAD "y = matmul x, w passes=300\n", {"t:7:24: passes=300 is out of range (0 to 255)"}},
    {HEAD "y = reduce_max x axis=99999999999\n", {"axis=99999999999 is out of range"}},
    {HEAD "y = scale x alpha=fast\n", {"t:7:19: expected a number for alpha, found 'fast'"}},
    {HEAD "y = scale x alpha=1.5x\n", {"expected a number for alpha, found '1.5x'"}},
    {HEAD "y = scale x alpha=1e39\n",
     {"t:7:19: alpha=1e39 overflows f32 (the largest is 3.40282347e+38)"}},
    {HEAD "y = scale x alpha=1e-50\n", {"t:7:19: alpha=1e-50 underflows to zero in f32"}},
    {HEAD "y = scale x alpha=nan:0x3f800000\n",
     {"t:7:19: alpha=nan:0x3f800000 is not a NaN bit pattern"}},
    {HEAD "y = scale x alpha=nan:0x7fc0\n",
     {"t:7:19: expected 8 hex digits after 'nan:0x' for alpha, found 'nan:0x7fc0'"}},
    {HEAD "y = all_reduce x reduce=avg\n",
     {"t:7:25: reduce=avg is not known; write reduce=sum or reduce=mean"}},
    {HEAD "y = collective_permute x shift=1 group=all\n",
     {"t:7:40: group=all is not known; write group=replicas or group=replica_cores"}},
    {HEAD "y = relu x ]\n",
     {"t:7:12: expected an attribute or the end of the line after relu's operands, found ']'"}},
    /* operand counts */
    {HEAD "y = matmul x\n", {"t:7:5: matmul takes 2 inputs (a, b), got 1"}},
    {HEAD "y = matmul trans_a\n", {"t:7:5: matmul takes 2 inputs (a, b), got 0"}},
    {HEAD "y = matmul x w\n",
     {"t:7:14: 'w' is a buffer, not an attribute of matmul; separate inputs with ','"}},
    {HEAD "y = matmul x ww\n",
     {"t:7:14: 'ww' is not an attribute of matmul, and matmul takes 2 inputs (a, b) but got 1: "
      "separate inputs with ','"}},
    {HEAD "y = relu x, w\n", {"t:7:5: relu takes 1 input (x), got 2"}},
    {HEAD "y = softmax_xent x, w alpha=1\n",
     {"t:7:5: softmax_xent has 2 outputs (loss, dlogits), got 1"}},
    {HEAD "y = outfeed x\n", {"t:7:5: outfeed has no outputs, got 1 ('y'); write 'outfeed <inputs>'"}},
    {HEAD "y = infeed x\n", {"t:7:12: infeed takes no inputs, got 1"}},
    {HEAD "y = infeed alpha=1\n", {"t:7:12: unknown attribute 'alpha' for infeed; infeed takes core0"}},
    {HEAD "y = relu x alpha=1\n", {"t:7:12: relu takes no attributes, got 'alpha'"}},
    {HEAD "y = relu x parts=2\n", {"t:7:12: relu takes no attributes, got 'parts'"}},
    {HEAD "y = halo x parts=2\n", {"t:7:5: halo needs attribute h=<rows>"}},
    {HEAD "y = infeed core0=1\n", {"t:7:12: 'core0' is a flag: write 'core0' alone, without '='"}},
    {HEAD "y = all_reduce x group=cores\n",
     {"t:7:24: group=cores is not known; write group=replicas or group=replica_cores"}},
    {HEAD "y = max_pool x h=4 w=1 c=1 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=4 wo=1 parts=-1\n",
     {"t:7:74: parts=-1 is out of range (0 to 4294967295)"}},
    {HEAD "y = var_add n 1\n", {"t:7:5: var_add has no outputs, got 1 ('y')"}},
    {HEAD "var_add n\n", {"t:7:10: expected the integer to add after 'var_add n', found the end of the line"}},
    {HEAD "var_add n x\n", {"t:7:11: expected an integer for var_add's increment, found 'x'"}},
    {HEAD "var_add n 1 2\n", {"t:7:13: expected the end of the line after var_add's increment, found '2'"}},
    {HEAD "y = \n", {"t:7:5: expected an op name after '=', found the end of the line"}},
    {HEAD "y, = relu x\n", {"t:7:4: expected an output buffer after ',', found '='"}},
    {HEAD "y = relu x,\n", {"t:7:12: expected an input buffer after ',', found the end of the line"}},
    /* declarations */
    {HEAD "temp z: f16[4, 4]\n",
     {"t:7:9: expected a dtype (f32, bf16, int8 or int32) for buffer 'z', found 'f16'"}},
    {HEAD "temp z: f32[4]\n",
     {"t:7:14: buffer 'z' has one dimension; buffers are 2-D [rows, cols]: write [1, 4] for a "
      "row vector"}},
    {HEAD "temp z: f32[4, 4, 4]\n", {"t:7:17: buffer 'z' has more than two dimensions"}},
    {HEAD "temp z: f32[0, 4]\n", {"t:7:13: row count 0 of buffer 'z' is out of range; dimensions "
                                  "are 1 to 4294967295"}},
    {HEAD "temp z: f32[4, 4294967296]\n", {"t:7:16: column count 4294967296 of buffer 'z' is out of range"}},
    {HEAD "temp z: f32[4294967295, 4294967295]\n",
     {"t:7:6: buffer 'z' f32[4294967295, 4294967295] is larger than 2^64 bytes"}},
    {HEAD "temp z: f32[a, 4]\n",
     {"t:7:13: expected the row count of buffer 'z' (a positive integer), found 'a'"}},
    {HEAD "temp z: f32[4, 4\n", {"t:7:17: expected ']' after the two dimensions, found the end of the line"}},
    {HEAD "temp z f32[4, 4]\n", {"t:7:8: expected ':' after the buffer name (as in 'x: f32[8, 16]'), found 'f32'"}},
    {HEAD "temp z: f32 4, 4\n", {"t:7:13: expected '[' after the dtype"}},
    {HEAD "temp z: f32[4, 4] 9\n", {"t:7:19: expected the end of the line after the buffer's shape, found '9'"}},
    {HEAD "temp x: f32[1, 1]\n", {"t:7:6: duplicate name 'x': already declared as a buffer at line 5"}},
    {HEAD "var w\n", {"t:7:5: duplicate name 'w': already declared as a buffer at line 4"}},
    {HEAD "param n: f32[1, 1]\n", {"t:7:7: duplicate name 'n': already declared as a variable at line 2"}},
    {HEAD "temp aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: f32[1, 1]\n",
     {"t:7:6: name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' has 48 characters; at most 47 are "
      "allowed"}},
    {HEAD "temp\n", {"t:7:5: expected a buffer name after the buffer kind, found the end of the line"}},
    {HEAD "var\n", {"t:7:4: expected a variable name after 'var', found the end of the line"}},
    {HEAD "y = relu x\ntemp z: f32[1, 1]\n",
     {"t:8:1: 'temp' declaration after the first op (line 7); declare every variable and buffer "
      "before the ops"}},
    {HEAD "loop n {\n  var k\n", {"t:8:3: 'var' declaration inside the loop"}},
    /* structure */
    {HEAD "loop n {\n  y = relu x\n", {"t:9:1: missing '}': the loop opened at line 7 is not closed"}},
    {HEAD "}\n", {"t:7:1: stray '}': no loop is open"}},
    {HEAD "loop n {\n}\n}\n", {"t:9:1: stray '}'"}},
    {HEAD "loop n {\n  loop n {\n", {"t:8:3: nested loop: the loop opened at line 7 is still open"}},
    {HEAD "loop n\n", {"t:7:7: expected '{' after 'loop <variable>', found the end of the line"}},
    {HEAD "loop n { y = relu x\n",
     {"t:7:10: expected the end of the line after '{' (the loop's ops go on the following lines), "
      "found 'y'"}},
    {HEAD "loop n {\n} y\n", {"t:8:3: expected the end of the line after '}', found 'y'"}},
    {HEAD "@foo\n", {"t:7:1: expected a declaration, an op, 'loop' or '}', found '@'"}},
    {HEAD "program u\n", {"t:7:1: a second 'program' line; the text holds one program (its header "
                          "is at line 1)"}},
    {"var n\n", {"t:1:1: expected 'program <name>' as the first line, found 'var'"}},
    {"# nothing\n\n", {"t:3:1: expected 'program <name>' as the first line, found the end of the text"}},
    {"", {"t:1:1: expected 'program <name>' as the first line"}},
    {"program\n", {"t:1:8: expected the program's name after 'program', found the end of the line"}},
    {"program 1x\n", {"t:1:9: expected the program's name after 'program', found '1x'"}},
    {"program a b\n", {"t:1:11: expected the end of the line after the program's name, found 'b'"}},
    /* user bytes are quoted in messages: control characters and bytes that are not UTF-8 as
     * \xNN; a well-formed UTF-8 character as itself */
    {HEAD "\x1b[31m\n", {"t:7:1: expected a declaration, an op, 'loop' or '}', found '\\x1B'"}},
    {HEAD "\xff\n", {"t:7:1: expected a declaration, an op, 'loop' or '}', found '\\xFF'"}},
    {HEAD "\xc3\xa9\n", {"t:7:1: expected a declaration, an op, 'loop' or '}', found '\xc3\xa9'"}},
    {HEAD "y = scale x alpha=1\x07\n", {"t:7:19: expected a number for alpha, found '1\\x07'"}},
    /* an overlong number is not cut to a shorter valid one */
    {HEAD "y = scale x alpha=0.1000000000000000000000000000000000000000000000000000000000000000"
          "000000000000000001\n",
     {"t:7:19: expected a number for alpha, found '0.1000000000000000000000000000000000000000",
      "0000...'"}},
};

static void test_parse_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        const struct parse_case *c = &parse_cases[i];
        struct tpu_program *p = (struct tpu_program *)&p; /* must be reset to NULL */
        struct tpu_diag d;
        int rc = tpu_program_parse(c->text, "t", &p, &d);
        bool ok = rc == TPU_EPARSE && d.code == TPU_EPARSE && p == NULL;
        for (int k = 0; k < 2 && c->want[k]; k++)
            ok = ok && strstr(d.msg, c->want[k]) != NULL;
        /* nothing is close to "frobnicate": no suggestion */
        if (ok && strstr(c->want[0], "unknown op 'frobnicate'"))
            ok = strstr(d.msg, "did you mean") == NULL;
        if (!ok)
            fail_msg("case %zu: got %s \"%s\"\nwant TPU_EPARSE with \"%s\"", i, tpu_err_name(rc),
                     d.msg, c->want[0]);
    }
    struct tpu_program *p = NULL;
    struct tpu_diag d;
    expect_diag(tpu_program_parse(NULL, "t", &p, &d), TPU_EINVAL, &d, "t: no text to parse");
    expect_diag(tpu_program_parse("program x\n", "t", NULL, &d), TPU_EINVAL, &d,
                "no place to store");
    /* origin defaults */
    expect_diag(tpu_program_parse("oops", NULL, &p, &d), TPU_EPARSE, &d, "<text>:1:1: ");
}

/* ---- the verifier ---------------------------------------------------------------------------- */

/* Declarations shared by the verifier cases; their ops are numbered from 0. */
#define VHEAD                                                                                  \
    "program v\n"                                                                              \
    "var n\n"                                                                                  \
    "var step\n"                                                                               \
    "param w: f32[8, 4]\n"                                                                     \
    "param wt: f32[4, 8]\n"                                                                    \
    "param wb: bf16[8, 4]\n"                                                                   \
    "param q8: int8[8, 4]\n"                                                                   \
    "param b: f32[1, 4]\n"                                                                     \
    "param vel: f32[8, 4]\n"                                                                   \
    "param m: f32[8, 4]\n"                                                                     \
    "param s: f32[8, 4]\n"                                                                     \
    "param sq: f32[4, 4]\n"                                                                    \
    "param pi32: int32[8, 4]\n"                                                                \
    "temp x: f32[2, 8]\n"                                                                      \
    "temp xb: bf16[2, 8]\n"                                                                    \
    "temp x8: int8[2, 8]\n"                                                                    \
    "temp y: f32[2, 4]\n"                                                                      \
    "temp yb: bf16[2, 4]\n"                                                                    \
    "temp y32: int32[2, 4]\n"                                                                  \
    "temp g: f32[8, 4]\n"                                                                      \
    "temp g2: f32[8, 4]\n"                                                                     \
    "temp t: f32[2, 4]\n"                                                                      \
    "temp lab: int32[2, 1]\n"                                                                  \
    "temp labf: f32[2, 1]\n"                                                                   \
    "temp loss: f32[1, 1]\n"                                                                   \
    "temp dl: f32[2, 4]\n"                                                                     \
    "temp r0: f32[1, 4]\n"                                                                     \
    "temp r1: f32[2, 1]\n"

#define ADAM_ATTRS "alpha=0.001 beta=0.9 delta=0.999 eps=1e-07"

struct verify_case {
    const char *rule;
    const char *body; /* ops after VHEAD, or a whole program if it starts with "program" */
    const char *chip; /* NULL: no config */
    int rc;
    const char *want[2];
};

static const struct verify_case verify_cases[] = {
    /* S1: loops */
    {"S1 second loop", "loop n {\n  x = infeed\n}\nloop n {\n  y = infeed\n}\n", NULL, TPU_EINVAL,
     {"op 3 'loop n {': a second loop: the program already has a loop (ops 0 to 2); a program "
      "has at most one loop: merge their bodies"}},
    {"S1 empty body", "loop n {\n}\n", NULL, TPU_EINVAL,
     {"op 1 '}': the loop opened at op 0 has an empty body; put the step's ops inside it or "
      "remove the loop"}},
    /* S2 */
    {"S2 var_add of the trip count", "loop n {\n  var_add n 1\n}\n", NULL, TPU_EINVAL,
     {"op 1 'var_add n 1': changes the loop's trip-count variable 'n' inside the loop"}},
    {"S2 adam on the trip count",
     "loop n {\n  g = infeed\n  w, m, s = adam g var=n " ADAM_ATTRS "\n}\n", NULL, TPU_EINVAL,
     {"op 2 'w, m, s = adam g var=n alpha=0.001 beta=0.9 delta=0.999 eps=1e-07': adam's step "
      "variable 'n' is the loop's trip-count variable"}},
    /* A2, A3: attribute values */
    {"A2 non-finite", "y = infeed\nt = scale y alpha=inf\n", NULL, TPU_EINVAL,
     {"op 1 't = scale y alpha=inf': alpha=inf is not finite; scale's attributes must be finite"}},
    {"A2 NaN", "g = infeed\nw, vel = sgd_momentum g alpha=0.1 gamma=nan\n", NULL, TPU_EINVAL,
     {"gamma=nan is not finite"}},
    {"A3 passes", "x = infeed\ny = matmul x, w passes=2\n", NULL, TPU_EINVAL,
     {"op 1 'y = matmul x, w passes=2': passes=2; matmul runs in 1 pass (bf16 inputs: mixed "
      "precision), or 3 or 6 bf16 passes (f32 precision)"}},
    {"A3 passes 0", "x = infeed\ny = matmul x, w passes=0\n", NULL, TPU_EINVAL, {"passes=0;"}},
    {"A3 passes need f32", "xb = infeed\ny = matmul xb, wb passes=3\n", NULL, TPU_EINVAL,
     {"passes=3 needs an f32 input (it splits f32 values into bf16 parts; bf16 inputs are exact "
      "in one pass), but a is 'xb' bf16[2, 8] and b is 'wb' bf16[8, 4]; use passes=1"}},
    {"A3 passes int8", "x8 = infeed\ny32 = matmul x8, q8 passes=6\n", NULL, TPU_EINVAL,
     {"passes=6 needs an f32 input", "int8 inputs are exact in one pass), but a is 'x8' "
      "int8[2, 8]"}},
    {"A3 axis", "y = infeed\nr0 = reduce_sum y axis=2\n", NULL, TPU_EINVAL,
     {"op 1 'r0 = reduce_sum y axis=2': axis=2; reduce_sum reduces over axis 0 (the rows: y is "
      "[1, cols]) or 1 (the columns: y is [rows, 1])"}},
    {"A3 reduce", "y = infeed\ny = all_reduce y reduce=5\n", NULL, TPU_EINVAL,
     {"reduce=5; all_reduce takes reduce=sum (0) or reduce=mean (1)"}},
    {"A3 group", "y = infeed\nt = collective_permute y shift=1 group=3\n", NULL, TPU_EINVAL,
     {"group=3; collective_permute takes group=replicas (0) or group=replica_cores (1)"}},
    {"A3 adam beta", "g = infeed\nw, m, s = adam g var=step alpha=0.001 beta=1 delta=0.999 "
     "eps=1e-07\n", NULL, TPU_EINVAL,
     {"beta=1, delta=0.999; adam's decay rates b1 (beta) and b2 (delta) must lie in [0, 1)"}},
    {"A3 adam delta", "g = infeed\nw, m, s = adam g var=step alpha=0.001 beta=0.9 delta=-0.5 "
     "eps=1e-07\n", NULL, TPU_EINVAL, {"beta=0.9, delta=-0.5; adam's decay rates"}},
    {"A3 adam eps", "g = infeed\nw, m, s = adam g var=step alpha=0.001 beta=0.9 delta=0.999 "
     "eps=0\n", NULL, TPU_EINVAL, {"eps=0; adam's eps must be positive"}},
    /* T1: matmul */
    {"T1 int32 input", "y = matmul pi32, wt\n", NULL, TPU_ESHAPE,
     {"op 0 'y = matmul pi32, wt': input a 'pi32' int32[8, 4] is int32; the matrix unit "
      "multiplies f32, bf16 or int8: convert it first"}},
    {"T1 mixed int8", "x8 = infeed\ny32 = matmul x8, w\n", NULL, TPU_ESHAPE,
     {"mixes int8 and floating point: a is 'x8' int8[2, 8], b is 'w' f32[8, 4]; both must be "
      "int8 (int32 result) or both f32/bf16 (f32 result)"}},
    {"T1 inner", "x = infeed\ny = matmul x, wt\n", NULL, TPU_ESHAPE,
     {"op 1 'y = matmul x, wt': inner dimensions differ: a is 'x' f32[2, 8] (K = 8), b is 'wt' "
      "f32[4, 8] (K = 4); matmul needs a's columns (rows if trans_a) to equal b's rows (cols "
      "if trans_b)"}},
    {"T1 inner transposed", "x = infeed\ny = matmul x, w trans_b\n", NULL, TPU_ESHAPE,
     {"b is 'w' f32[8, 4] transposed (K = 4)"}},
    {"T1 inner trans_a", "y = infeed\nt = matmul y, w trans_a\n", NULL, TPU_ESHAPE,
     {"a is 'y' f32[2, 4] transposed (K = 2), b is 'w' f32[8, 4] (K = 8)"}},
    {"T1 output dtype", "x = infeed\nyb = matmul x, w\n", NULL, TPU_ESHAPE,
     {"output y 'yb' bf16[2, 4] must be f32: matmul of floating-point inputs gives f32 (the "
      "accumulators' type)"}},
    {"T1 int8 output", "x8 = infeed\ny = matmul x8, q8\n", NULL, TPU_ESHAPE,
     {"output y 'y' f32[2, 4] must be int32: matmul of int8 inputs gives int32"}},
    {"T1 output shape", "x = infeed\ng = matmul x, w\n", NULL, TPU_ESHAPE,
     {"op 1 'g = matmul x, w': output y 'g' f32[8, 4] must be [2, 4] (a gives M = 2 rows, b "
      "gives N = 4 columns); declare it f32[2, 4]"}},
    {"T1 chip without int8", "x8 = infeed\ny32 = matmul x8, q8\n", "tpu-v3", TPU_EUNSUPPORTED,
     {"chip 'tpu-v3' has no int8 matrix unit (it multiplies bf16 only); convert the inputs to "
      "bf16 or f32"}},
    {"T1 chip without bf16", "x = infeed\ny = matmul x, w\n", "tpu-v1", TPU_EUNSUPPORTED,
     {"chip 'tpu-v1' has no bf16 matrix unit (it multiplies int8 only); use int8 inputs"}},
    /* T2: vector ops */
    {"T2 bf16 operand", "y = infeed\nyb = infeed\nt = add y, yb\n", NULL, TPU_ESHAPE,
     {"op 2 't = add y, yb': input b 'yb' bf16[2, 4] is bf16, but add computes in f32 (the "
      "vector unit's type); convert 'yb' to f32 first or declare it f32"}},
    {"T2 broadcast", "y = infeed\nr1 = infeed\nt = mul y, r1\n", NULL, TPU_ESHAPE,
     {"b 'r1' f32[2, 1] does not fit a 'y' f32[2, 4]; b must have a's shape, [1, 4] (one row, "
      "broadcast over the rows) or [1, 1]"}},
    {"T2 output shape", "y = infeed\ng = sub y, b\n", NULL, TPU_ESHAPE,
     {"output y 'g' f32[8, 4] must be [2, 4] (the shape of a); declare it f32[2, 4]"}},
    {"T2 unary shape", "y = infeed\ng = relu y\n", NULL, TPU_ESHAPE,
     {"output y 'g' f32[8, 4] and input x 'y' f32[2, 4] differ in shape; relu needs one shape "
      "for all its operands"}},
    {"T2 relu_grad dtype", "y = infeed\nyb = infeed\nt = relu_grad y, yb\n", NULL, TPU_ESHAPE,
     {"input x 'yb' bf16[2, 4] is bf16, but relu_grad computes in f32"}},
    {"T2 exp output", "y = infeed\nyb = exp y\n", NULL, TPU_ESHAPE,
     {"output y 'yb' bf16[2, 4] is bf16, but exp computes in f32"}},
    {"T2 max int32", "y32 = infeed\nt = max y32, b\n", NULL, TPU_ESHAPE,
     {"input a 'y32' int32[2, 4] is int32, but max computes in f32"}},
    /* T3: convert */
    {"T3 to int8", "x = infeed\nx8 = convert x\n", NULL, TPU_ESHAPE,
     {"op 1 'x8 = convert x': convert from f32 to int8 (x 'x' f32[2, 8], y 'x8' int8[2, 8]) "
      "would truncate and saturate, which is not a quantization; use quantize with a scale "
      "(alpha), or keep the values in floating point"}},
    {"T3 bf16 to int32", "yb = infeed\ny32 = convert yb\n", NULL, TPU_ESHAPE,
     {"convert from bf16 to int32 (x 'yb' bf16[2, 4], y 'y32' int32[2, 4]) would truncate"}},
    {"T3 shape", "y = infeed\nxb = convert y\n", NULL, TPU_ESHAPE,
     {"output y 'xb' bf16[2, 8] must be [2, 4] (the shape of x)"}},
    /* T4: reductions */
    {"T4 axis 0", "y = infeed\nr1 = reduce_sum y axis=0\n", NULL, TPU_ESHAPE,
     {"output y 'r1' f32[2, 1] must be [1, 4] (axis 0 reduces the rows)"}},
    {"T4 axis 1", "y = infeed\nr0 = reduce_max y axis=1\n", NULL, TPU_ESHAPE,
     {"output y 'r0' f32[1, 4] must be [2, 1] (axis 1 reduces the columns)"}},
    {"T4 dtype", "yb = infeed\nr0 = reduce_sum yb axis=0\n", NULL, TPU_ESHAPE,
     {"input x 'yb' bf16[2, 4] is bf16, but reduce_sum computes in f32"}},
    /* T5: loss and accuracy */
    {"T5 labels dtype", "y = infeed\nlabf = infeed\nloss, dl = softmax_xent y, labf alpha=0.5\n",
     NULL, TPU_ESHAPE,
     {"labels 'labf' f32[2, 1] must be int32 (one class index per row, < 0 for padding)"}},
    {"T5 labels shape", "y = infeed\ny32 = infeed\nloss, dl = softmax_xent y, y32 alpha=0.5\n",
     NULL, TPU_ESHAPE, {"input labels 'y32' int32[2, 4] must be [2, 1] (one label per row of "
                        "logits)"}},
    {"T5 loss shape", "y = infeed\nlab = infeed\nr0, dl = softmax_xent y, lab alpha=0.5\n", NULL,
     TPU_ESHAPE, {"output loss 'r0' f32[1, 4] must be [1, 1] (the loss is a scalar)"}},
    {"T5 dlogits shape", "y = infeed\nlab = infeed\nloss, g = softmax_xent y, lab alpha=0.5\n",
     NULL, TPU_ESHAPE, {"output dlogits 'g' f32[8, 4] must be [2, 4] (the shape of logits)"}},
    {"T5 logits dtype", "yb = infeed\nlab = infeed\nloss, dl = softmax_xent yb, lab alpha=1\n",
     NULL, TPU_ESHAPE, {"input logits 'yb' bf16[2, 4] is bf16"}},
    {"T5 classify_count", "y = infeed\nlab = infeed\nloss = classify_count y, lab\n", NULL,
     TPU_ESHAPE, {"output y 'loss' f32[1, 1] must be [1, 2] (correct rows, labelled rows)"}},
    {"T5 classify_count labels", "y = infeed\nlabf = infeed\nr0 = classify_count y, labf\n", NULL,
     TPU_ESHAPE, {"labels 'labf' f32[2, 1] must be int32"}},
    /* T6: optimizers */
    {"T6 state is a temp", "g = infeed\nw, g2 = sgd_momentum g alpha=0.1\n", NULL, TPU_EINVAL,
     {"op 1 'w, g2 = sgd_momentum g alpha=0.1': velocity 'g2' f32[8, 4] is a temp, but "
      "sgd_momentum updates it in place across steps; declare it 'param'"}},
    {"T6 adam state is a temp", "g = infeed\nw, m, g2 = adam g var=step " ADAM_ATTRS "\n", NULL,
     TPU_EINVAL, {"v 'g2' f32[8, 4] is a temp, but adam updates it"}},
    {"T6 shapes", "y = infeed\nw, vel = sgd_momentum y alpha=0.1\n", NULL, TPU_ESHAPE,
     {"output param 'w' f32[8, 4] and input grad 'y' f32[2, 4] differ in shape; sgd_momentum "
      "needs one shape for all its operands"}},
    {"T6 dtype", "g = infeed\nwb, vel = sgd_momentum g alpha=0.1\n", NULL, TPU_ESHAPE,
     {"output param 'wb' bf16[8, 4] is bf16, but sgd_momentum computes in f32"}},
    /* T7: collectives */
    {"T7 all_reduce shape", "y = infeed\ng = all_reduce y reduce=sum\n", NULL, TPU_ESHAPE,
     {"output y 'g' f32[8, 4] and input x 'y' f32[2, 4] differ in shape; all_reduce needs one "
      "shape"}},
    {"T7 all_reduce dtype", "yb = infeed\nyb = all_reduce yb reduce=sum\n", NULL, TPU_ESHAPE,
     {"is bf16, but all_reduce computes in f32"}},
    {"T7 permute", "y = infeed\nyb = collective_permute y shift=1 group=replicas\n", NULL,
     TPU_ESHAPE,
     {"x 'y' f32[2, 4] and y 'yb' bf16[2, 4] differ; collective_permute moves x into y "
      "unchanged, so they need one shape and dtype"}},
    /* T8 */
    {"T8 infeed into a param", "w = infeed\n", NULL, TPU_EINVAL,
     {"op 0 'w = infeed': infeed writes y 'w' f32[8, 4], a param; infeed fills a temp"}},
    /* D1: aliasing */
    {"D1 same outputs", "g = infeed\nw, w = sgd_momentum g alpha=0.1\n", NULL, TPU_EINVAL,
     {"outputs param and velocity are both 'w'; an op's outputs must be distinct buffers"}},
    {"D1 matmul in place", "sq = matmul sq, sq\n", NULL, TPU_EINVAL,
     {"op 0 'sq = matmul sq, sq': output y and input a are both 'sq'; matmul cannot write a "
      "buffer it reads (the array reads a and b while y drains): use another buffer"}},
    {"D1 permute in place", "y = infeed\ny = collective_permute y shift=1 group=replicas\n", NULL,
     TPU_EINVAL, {"output y and input x are both 'y'; collective_permute cannot write a buffer "
                  "it reads: use another buffer"}},
    {"D1 optimizer grad", "w, vel = sgd_momentum w alpha=0.1\n", NULL, TPU_EINVAL,
     {"output param and input grad are both 'w'; sgd_momentum cannot write a buffer it reads"}},
    {"D1 convert in place", "y = infeed\ny = convert y\n", NULL, TPU_EINVAL,
     {"output y and input x are both 'y'; convert cannot write a buffer it reads"}},
    /* D2: defined before read */
    {"D2 read before write", "t = relu y\n", NULL, TPU_EINVAL,
     {"op 0 't = relu y': reads temp 'y' before any op writes it; a temp is undefined until "
      "written in the same pass: write it earlier, or declare it 'param' if the host sets it"}},
    {"D2 accumulate", "x = infeed\ny = matmul x, w accumulate\n", NULL, TPU_EINVAL,
     {"op 1 'y = matmul x, w accumulate': accumulate adds into temp 'y', which no earlier op "
      "writes; write it first (a matmul without accumulate) or drop accumulate"}},
    {"D2 after the loop", "loop n {\n  y = infeed\n}\noutfeed y\n", NULL, TPU_EINVAL,
     {"op 3 'outfeed y': reads temp 'y' after the loop, but only the loop body writes it (op 1) "
      "and the loop may run zero times"}},
    /* D3: loop-carried temps */
    {"D3 loop-carried", "y = infeed\nloop n {\n  outfeed y\n  y = infeed\n}\n", NULL, TPU_EINVAL,
     {"op 2 'outfeed y': reads temp 'y' in the loop body before the body writes it (op 3): from "
      "the second iteration on it would see the previous iteration's value"}},
    {"D3 accumulate across iterations",
     "x = infeed\ny = matmul x, w\nloop n {\n  x = infeed\n  y = matmul x, w accumulate\n}\n", NULL,
     TPU_EINVAL, {"op 4 'y = matmul x, w accumulate': reads temp 'y' in the loop body before the "
                  "body writes it (op 4)"}},
    /* D4: one definition per pass */
    {"D4 reused outside the loop", "y = infeed\ny = infeed\n", NULL, TPU_EINVAL,
     {"op 1 'y = infeed': writes temp 'y' again: op 0 already wrote it in this launch; a temp "
      "holds one value per pass: write a new temp, or update it in place"}},
    {"D4 reused in the body", "loop n {\n  y = infeed\n  x = infeed\n  y = matmul x, w\n}\n", NULL,
     TPU_EINVAL, {"op 3 'y = matmul x, w': writes temp 'y' again: op 1 already wrote it in this "
                  "iteration"}},
    {"D4 after the loop", "y = infeed\nloop n {\n  outfeed y\n}\ny = infeed\n", NULL, TPU_EINVAL,
     {"op 4 'y = infeed': writes temp 'y' again: op 0 already wrote it in this launch"}},
    /* D5 */
    {"D5 two optimizer steps",
     "g = infeed\nloop n {\n  w, vel = sgd_momentum g alpha=0.1\n  w, m, s = adam g var=step "
     ADAM_ATTRS "\n}\n", NULL, TPU_EINVAL,
     {"op 3 'w, m, s = adam g var=step alpha=0.001 beta=0.9 delta=0.999 eps=1e-07': updates "
      "param 'w', which op 2 already updated in this iteration; a param takes one optimizer "
      "step per pass"}},
    /* M1: params plus the temps live at once (both temps here, at op 1) */
    {"M1 memory",
     "program mem\nparam w: f32[1024, 1024]\ntemp big: f32[4096, 2048]\ntemp x: int8[100, 10]\n"
     "param w2: f32[1024, 1024]\nbig = infeed\nx = infeed\noutfeed x\noutfeed big\n", "tiny",
     TPU_ERANGE,
     {"program 'mem' needs 40.0 MiB (41944040 bytes) of HBM: 8.0 MiB (8388608 bytes) of params "
      "and 32.0 MiB (33555432 bytes) of temps live at once at op 1 'x = infeed' (all temps "
      "together are 32.0 MiB; temps whose lives do not overlap share memory), but one core of "
      "chip 'tiny' has 32.0 MiB (33554432 bytes: hbm_bytes 67108864 / cores_per_chip 2); the "
      "largest of them are 'big' f32[4096, 2048] 32.0 MiB, 'w' f32[1024, 1024] 4.0 MiB, 'w2' "
      "f32[1024, 1024] 4.0 MiB; shrink them"}},
};

static void test_verify_rules(void **state)
{
    (void)state;
    size_t n_cases = sizeof verify_cases / sizeof verify_cases[0];
    for (size_t i = 0; i < n_cases; i++) {
        const struct verify_case *c = &verify_cases[i];
        char text[4096];
        bool whole = strncmp(c->body, "program", 7) == 0;
        snprintf(text, sizeof text, "%s%s", whole ? "" : VHEAD, c->body);
        struct tpu_program *p = NULL;
        struct tpu_diag d;
        int rc = tpu_program_parse(text, c->rule, &p, &d);
        if (rc)
            fail_msg("case '%s' does not parse: %s", c->rule, d.msg);
        struct tpu_chip_config cfg;
        if (c->chip)
            cfg = load_chip(c->chip);
        rc = tpu_program_verify(p, c->chip ? &cfg : NULL, &d);
        bool ok = rc == c->rc && d.code == c->rc;
        for (int k = 0; k < 2 && c->want[k]; k++)
            ok = ok && strstr(d.msg, c->want[k]) != NULL;
        if (!ok)
            fail_msg("case '%s': got %s \"%s\"\nwant %s with \"%s\"", c->rule, tpu_err_name(rc),
                     d.msg, tpu_err_name(c->rc), c->want[0]);
        tpu_program_destroy(&p);
    }
}

/* Programs that break the loop structure or set stray attributes cannot be written in the
 * text form; build them. */
static void test_verify_built(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    struct tpu_diag d;
    assert_int_equal(tpu_program_create("b", &p), 0);
    uint32_t n = add_var(p, "n");
    uint32_t x = add_buf(p, "x", TPU_F32, TPU_BUF_TEMP, 2, 2);
    struct tpu_op lb = mk(TPU_OP_LOOP_BEGIN, N, N, N, N, N), le = mk(TPU_OP_LOOP_END, N, N, N, N, N);
    lb.attrs.var = n;
    add(p, &lb);
    add(p, &lb);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 1 'loop n {': nested loop: it opens inside the loop opened at op 0; a program "
                "has one loop level");
    tpu_program_destroy(&p);

    assert_int_equal(tpu_program_create("b", &p), 0);
    add_var(p, "n");
    add_buf(p, "x", TPU_F32, TPU_BUF_TEMP, 2, 2);
    add_simple(p, TPU_OP_INFEED, x, N, N);
    add(p, &le);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 1 '}': closes a loop, but no loop is open");
    tpu_program_destroy(&p);

    assert_int_equal(tpu_program_create("b", &p), 0);
    add_var(p, "n");
    add_buf(p, "x", TPU_F32, TPU_BUF_TEMP, 2, 2);
    add(p, &lb);
    add_simple(p, TPU_OP_INFEED, x, N, N);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 0 'loop n {': the loop it opens is never closed; add a loop_end after the "
                "body's last op");
    add(p, &le);
    add(p, &le);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 3 '}': closes a loop, but no loop is open");
    tpu_program_destroy(&p);

    /* A1: attributes the op does not read */
    assert_int_equal(tpu_program_create("b", &p), 0);
    add_var(p, "n");
    add_var(p, "k");
    add_buf(p, "x", TPU_F32, TPU_BUF_PARAM, 2, 2);
    struct tpu_op op = mk(TPU_OP_ADD, x, N, N, x, x);
    op.attrs.trans_a = true;
    add(p, &op);
    expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d,
                "op 0 'x = add x, x trans_a': add does not read attribute trans_a");
    tpu_program_destroy(&p);

    static const struct {
        enum tpu_opcode code;
        const char *want;
    } strays[] = {
        {TPU_OP_EXP, "exp does not read attribute var"},
        {TPU_OP_MATMUL, "matmul does not read attribute imm"},
        {TPU_OP_SCALE, "scale does not read attribute eps"},
        {TPU_OP_RELU, "relu does not read attribute group"},
        {TPU_OP_SOFTMAX_XENT, "softmax_xent does not read attribute axis"},
    };
    for (size_t k = 0; k < sizeof strays / sizeof strays[0]; k++) {
        assert_int_equal(tpu_program_create("b", &p), 0);
        add_var(p, "n");
        add_var(p, "k");
        add_buf(p, "x", TPU_F32, TPU_BUF_PARAM, 2, 2);
        add_buf(p, "l", TPU_F32, TPU_BUF_PARAM, 1, 1);
        op = mk(strays[k].code, x, 1, N, x, x);
        op.attrs.var = k == 0;
        op.attrs.imm = k == 1 ? -1 : 0;
        op.attrs.eps = k == 2 ? -0.0f : 0.0f;
        op.attrs.group = k == 3;
        op.attrs.axis = k == 4;
        add(p, &op);
        expect_diag(tpu_program_verify(p, NULL, &d), TPU_EINVAL, &d, strays[k].want);
        tpu_program_destroy(&p);
    }
    expect_diag(tpu_program_verify(NULL, NULL, &d), TPU_EINVAL, &d, "no program to verify");
}

/* Programs that keep every rule: each allowance the rules make is used once. */
static void test_verify_ok(void **state)
{
    (void)state;
    static const char body[] =
        "var_add step 0\n"                               /* var_add outside the loop */
        "x = infeed\n"                                   /* a temp defined before the loop */
        "pi32c = convert pi32\n"                         /* a copy (same dtype) */
        "loop n {\n"
        "  var_add step 1\n"
        "  y = matmul x, w\n"                           /* reads x from before the loop */
        "  y = matmul x, w accumulate\n"                /* update in place */
        "  t = matmul y, sq trans_b passes=6\n"
        "  g = matmul x, y trans_a passes=3\n"          /* [8, 2] x [2, 4] */
        "  g2 = matmul wt, sq trans_a trans_b\n"        /* [8, 4] x [4, 4] */
        "  t = add t, b\n"                              /* in place, broadcast row */
        "  t = sub t, loss2\n"                          /* broadcast scalar */
        "  t = relu t\n"
        "  t = scale t alpha=2 beta=-1\n"
        "  t = all_reduce t reduce=mean\n"
        "  dl = collective_permute t shift=-1 group=replica_cores\n"
        "  lab = infeed\n"
        "  loss, yy = softmax_xent t, lab alpha=0.5\n"
        "  cnt = classify_count t, lab\n"
        "  r0 = reduce_max t axis=0\n"
        "  r1 = reduce_sum t axis=1\n"
        "  x8 = infeed\n"
        "  y32 = matmul x8, q8\n"
        "  t32 = convert y32\n"
        "  xb = convert x8\n"                           /* int8 -> bf16 */
        "  t2 = matmul xb, wb\n"                        /* bf16 x bf16, one pass */
        "  t2 = matmul xb, w accumulate passes=3\n"     /* bf16 x f32 in 3 passes */
        "  yb = convert y32\n"                          /* int32 -> bf16 */
        "  w, vel = sgd_momentum g alpha=0.1 beta=0.9 gamma=0.0001\n"
        "  wt2, m, s = adam g2 var=step alpha=0.001 beta=0 delta=0 eps=1e-07\n"
        "  outfeed loss\n"
        "}\n"
        "wb = convert w\n"                               /* a param written after the loop */
        "outfeed x\n";                                   /* a pre-loop temp after the loop */
    char text[4096];
    snprintf(text, sizeof text, "%s%s%s", VHEAD,
             "param loss2: f32[1, 1]\nparam wt2: f32[8, 4]\ntemp yy: f32[2, 4]\n"
             "temp cnt: f32[1, 2]\ntemp t32: f32[2, 4]\nparam pi32c: int32[8, 4]\n"
             "temp t2: f32[2, 4]\n",
             body);
    struct tpu_program *p = parse_ok(text);
    struct tpu_diag d;
    struct tpu_chip_config tiny = load_chip("tiny"), v4 = load_chip("tpu-v4");
    int rc = tpu_program_verify(p, &tiny, &d);
    if (rc)
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_program_verify(p, &v4, &d), 0);
    assert_int_equal(tpu_program_verify(p, NULL, &d), 0);
    tpu_program_destroy(&p);

    /* a program without ops */
    p = parse_ok("program empty\nparam w: f32[2, 2]\n");
    assert_int_equal(tpu_program_verify(p, &tiny, &d), 0);
    tpu_program_destroy(&p);
    /* exactly one core's share of HBM fits */
    p = parse_ok("program full\nparam w: f32[4096, 2048]\n");
    assert_int_equal(tpu_program_verify(p, &tiny, &d), 0);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_op_table_columns),
        cmocka_unit_test(test_builder_basics),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_builder_many_names),
        cmocka_unit_test(test_print_mlp),
        cmocka_unit_test(test_parse_data_file),
        cmocka_unit_test(test_round_trip_every_op),
        cmocka_unit_test(test_parse_free_layout),
        cmocka_unit_test(test_names_like_keywords),
        cmocka_unit_test(test_float_round_trip),
        cmocka_unit_test(test_large_program),
        cmocka_unit_test(test_format_op),
        cmocka_unit_test(test_print_stray_attribute),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_verify_rules),
        cmocka_unit_test(test_verify_built),
        cmocka_unit_test(test_verify_ok),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
