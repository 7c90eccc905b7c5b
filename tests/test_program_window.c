/* The window ops and reshape in device programs (include/tpusim/program.h): their text form
 * (the window group's eleven fields, print -> parse -> print identical), their parse errors,
 * and every verifier error of rules T12 and T13 (sim/program/program_verify_window.c), each
 * checked by the text of its message: it names the op, the field or operand, and the rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/program.h"

static struct tpu_program *parse_ok(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d;
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

/* ---- text form ------------------------------------------------------------------------------ */

static const char every_window_op[] =
    "program convnet\n"
    "\n"
    "param x: f32[2, 50]\n"
    "param cols: f32[18, 18]\n"
    "param h: f32[50, 2]\n"
    "param y: f32[18, 2]\n"
    "param dx: f32[2, 50]\n"
    "param r: f32[9, 4]\n"
    "param q: int8[3, 4]\n"
    "param s: int8[12, 1]\n"
    "\n"
    "cols = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "h = col2im cols h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "y = max_pool x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "dx = max_pool_grad y, x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n"
    "y = avg_pool h h=5 w=5 c=2 kh=2 kw=2 sh=2 sw=2 pt=0 pl=0 ho=3 wo=3\n"
    "dx = avg_pool_grad y h=5 w=5 c=2 kh=2 kw=2 sh=2 sw=2 pt=0 pl=0 ho=3 wo=3\n"
    "r = reshape y\n"
    "s = reshape q\n";

static void test_window_round_trip(void **state)
{
    (void)state;
    struct tpu_program *p = parse_ok(every_window_op);
    char *text = NULL, *again = NULL;
    assert_int_equal(tpu_program_to_string(p, &text), 0);
    assert_string_equal(text, every_window_op);
    struct tpu_program *q = parse_ok(text);
    assert_int_equal(tpu_program_to_string(q, &again), 0);
    assert_string_equal(again, text);
    assert_int_equal(tpu_program_n_ops(q), 8);
    for (size_t i = 0; i < tpu_program_n_ops(p); i++)
        assert_memory_equal(&tpu_program_op(p, i)->attrs, &tpu_program_op(q, i)->attrs,
                            sizeof(struct tpu_op_attrs));
    const struct tpu_window *w = &tpu_program_op(p, 0)->attrs.win;
    assert_true(w->h == 5 && w->w == 5 && w->c == 2 && w->kh == 3 && w->kw == 3 && w->sh == 2 &&
                w->sw == 2 && w->pt == 1 && w->pl == 1 && w->ho == 3 && w->wo == 3);
    assert_int_equal(tpu_program_op(p, 4)->attrs.win.kh, 2);
    assert_int_equal(tpu_program_op(p, 3)->in[1], 0); /* max_pool_grad's x */
    assert_int_equal(tpu_opcode_attrs(TPU_OP_IM2COL), TPU_ATTR_WINDOW);
    assert_int_equal(tpu_opcode_attrs(TPU_OP_RESHAPE), 0);
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_MAX_POOL_GRAD, false, 1), "x");
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_COL2IM, false, 0), "cols");
    /* the whole program verifies, with the chip's memory check */
    struct tpu_chip_config cfg;
    struct tpu_diag d;
    assert_int_equal(tpu_config_load_preset("tiny", &cfg, &d), 0);
    if (tpu_program_verify(p, &cfg, &d) != 0)
        fail_msg("verify: %s", d.msg);
    free(text);
    free(again);
    tpu_program_destroy(&q);
    tpu_program_destroy(&p);
}

/* A window field set on an op that does not read the window is printed (nothing hidden) and
 * refused by the verifier (A1), naming the field. */
static void test_stray_window_field(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    struct tpu_diag d;
    uint32_t x, y;
    assert_int_equal(tpu_program_create("t", &p), 0);
    assert_int_equal(tpu_program_add_buffer(p, "x", TPU_F32, TPU_BUF_PARAM, 2, 2, &x, &d), 0);
    assert_int_equal(tpu_program_add_buffer(p, "y", TPU_F32, TPU_BUF_PARAM, 2, 2, &y, &d), 0);
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_RELU);
    op.out[0] = y;
    op.in[0] = x;
    op.attrs.win.kw = 3;
    assert_int_equal(tpu_program_add_op(p, &op, &d), 0);
    char line[128];
    assert_int_equal(tpu_program_format_op(p, 0, line, sizeof line), 0);
    assert_string_equal(line, "y = relu x kw=3");
    assert_int_equal(tpu_program_verify(p, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "relu does not read attribute kw, which is set"));
    tpu_program_destroy(&p);
}

struct text_case {
    const char *line; /* an op line after the declarations below */
    const char *want; /* in the message */
};

#define DECLS                                                                                      \
    "program t\nparam x: f32[25, 2]\nparam y: f32[9, 18]\nparam h: f32[2, 2]\n"
#define WIN "h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3"

static const struct text_case parse_cases[] = {
    {"y = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3\n",
     "im2col needs attribute wo=<cols>"},
    {"y = im2col x\n", "im2col needs attribute h=<rows>"},
    {"y = im2col x " WIN " h=5\n", "attribute 'h' given twice"},
    {"y = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=-1 pl=1 ho=3 wo=3\n",
     "pt=-1 is out of range (0 to 4294967295)"},
    {"y = im2col x h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3.5\n",
     "expected an integer for wo, found '3.5'"},
    {"y = im2col x h=5 w=5 c=2 kx=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n",
     "unknown attribute 'kx' for im2col"},
    {"y = im2col x, h " WIN "\n", "im2col takes 1 input (x), got 2"},
    {"y = relu x h\n", "'h' is a buffer, not an attribute of relu"},
    {"y = relu x kh=3\n", "relu takes no attributes, got 'kh'"},
    {"y = reshape x kh=3\n", "reshape takes no attributes, got 'kh'"},
    {"y = max_pool_grad x " WIN "\n", "max_pool_grad takes 2 inputs (dy, x), got 1"},
};

static void test_window_parse_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", DECLS, parse_cases[i].line);
        struct tpu_program *p = NULL;
        struct tpu_diag d;
        int rc = tpu_program_parse(text, "w", &p, &d);
        if (rc != TPU_EPARSE || !strstr(d.msg, parse_cases[i].want))
            fail_msg("line %s: got %d \"%s\", want \"%s\"", parse_cases[i].line, rc, d.msg,
                     parse_cases[i].want);
        assert_null(p);
    }
}

/* ---- the verifier ---------------------------------------------------------------------------- */

struct verify_case {
    const char *body; /* declarations and ops after "program t\n" */
    int rc;
    const char *want[2];
};

#define IM2COL(win) "param x: f32[25, 2]\nparam y: f32[9, 18]\ny = im2col x " win "\n"

static const struct verify_case verify_cases[] = {
    /* the window's fields */
    {IM2COL("h=5 w=5 c=2 kh=0 kw=3 sh=2 sw=2 pt=0 pl=1 ho=3 wo=3"), TPU_EINVAL,
     {"op 0 'y = im2col x h=5 w=5 c=2 kh=0", "window field kh=0; rule WINDOW: im2col's h, w, "
                                             "c, kh, kw, sh, sw, ho and wo are at least 1"}},
    {IM2COL("h=5 w=5 c=2 kh=3 kw=3 sh=0 sw=2 pt=1 pl=1 ho=3 wo=3"), TPU_EINVAL,
     {"window field sh=0", "set sh"}},
    {IM2COL("h=5 w=5 c=0 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3"), TPU_EINVAL,
     {"window field c=0", "rule WINDOW"}},
    {IM2COL("h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=3 pl=1 ho=3 wo=3"), TPU_EINVAL,
     {"window field pt=3 is not below kh=3; rule WINDOW", "lower pt"}},
    {IM2COL("h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=4 ho=3 wo=3"), TPU_EINVAL,
     {"window field pl=4 is not below kw=3", "first columns"}},
    {IM2COL("h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=4 wo=3"), TPU_EINVAL,
     {"window field ho=4 is too large: the last window starts at (ho-1)*sh - pt = 5, past "
      "the image's last row h-1 = 4", "rule WINDOW: every window overlaps the image: set ho "
                                      "to at most 3"}},
    {IM2COL("h=5 w=5 c=2 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=9"), TPU_EINVAL,
     {"window field wo=9 is too large", "set wo to at most 3"}},
    {"param x: f32[1, 1048576]\nparam y: f32[1, 1048576]\ny = max_pool x h=1 w=1 c=1048576 "
     "kh=64 kw=64 sh=64 sw=64 pt=31 pl=31 ho=1 wo=1\n", TPU_EINVAL,
     {"op 0 'y = max_pool x", "window kh*kw*c = 64*64*1048576 = 4294967296 elements; rule "
      "WINDOW: a window holds fewer than 2^32-1 = 4294967295 elements (the ops index them in "
      "32 bits): lower kh, kw or c"}},
    {"param x: f32[65535, 65537]\nparam y: f32[1, 65537]\ny = max_pool x h=255 w=257 "
     "c=65537 kh=255 kw=257 sh=1 sw=1 pt=0 pl=0 ho=1 wo=1\n", TPU_EINVAL,
     {"window kh*kw*c = 255*257*65537 = 4294967295 elements", "fewer than 2^32-1"}},
    /* dtypes and shapes */
    {"param x: bf16[25, 2]\nparam y: f32[9, 18]\ny = im2col x " WIN "\n", TPU_ESHAPE,
     {"input x 'x' bf16[25, 2] is bf16, but im2col computes in f32 (rule WINDOW)", NULL}},
    {"param x: f32[7, 7]\nparam y: f32[9, 18]\ny = im2col x " WIN "\n", TPU_ESHAPE,
     {"input x 'x' f32[7, 7] has 49 elements, not a multiple of h*w*c = 5*5*2 (rule WINDOW",
      "declare it with N*h*w*c elements"}},
    {"param x: f32[2, 50]\nparam y: f32[9, 18]\ny = im2col x " WIN "\n", TPU_ESHAPE,
     {"output y 'y' f32[9, 18] must be [18, 18] (rule WINDOW: N*ho*wo = 2*3*3 rows",
      "declare it f32[18, 18]"}},
    {"param x: f32[25, 2]\nparam y: f32[9, 17]\ny = im2col x " WIN "\n", TPU_ESHAPE,
     {"must be [9, 18]", "kh*kw*c columns"}},
    {"param c: f32[9, 18]\nparam y: f32[5, 9]\ny = col2im c " WIN "\n", TPU_ESHAPE,
     {"output y 'y' f32[5, 9] has 45 elements, not a multiple of h*w*c", NULL}},
    {"param c: f32[9, 9]\nparam y: f32[5, 10]\ny = col2im c " WIN "\n", TPU_ESHAPE,
     {"input cols 'c' f32[9, 9] must be [9, 18]", NULL}},
    {"param x: f32[25, 2]\nparam y: f32[9, 1]\ny = max_pool x " WIN "\n", TPU_ESHAPE,
     {"output y 'y' f32[9, 1] must be [9, 2]", "c columns"}},
    {"param x: f32[25, 2]\nparam y: f32[3, 2]\ny = avg_pool x " WIN "\n", TPU_ESHAPE,
     {"op 0 'y = avg_pool x", "output y 'y' f32[3, 2] must be [9, 2]"}},
    {"param x: f32[25, 2]\nparam dy: f32[9, 2]\nparam dx: f32[5, 10]\n"
     "dx = max_pool_grad dy, x " WIN "\n", TPU_ESHAPE,
     {"output dx 'dx' f32[5, 10] must have input x's shape 'x' f32[25, 2]",
      "declare it f32[25, 2]"}},
    {"param x: f32[25, 2]\nparam dy: f32[9, 3]\nparam dx: f32[25, 2]\n"
     "dx = max_pool_grad dy, x " WIN "\n", TPU_ESHAPE,
     {"input dy 'dy' f32[9, 3] must be [9, 2]", NULL}},
    {"param x: f32[25, 2]\nparam dy: f32[9, 2]\nparam dx: f32[25, 2]\n"
     "dx = max_pool_grad dy, x h=5 w=5 c=3 kh=3 kw=3 sh=2 sw=2 pt=1 pl=1 ho=3 wo=3\n",
     TPU_ESHAPE, {"input x 'x' f32[25, 2] has 50 elements, not a multiple of h*w*c = 5*5*3",
                  NULL}},
    {"param dy: f32[9, 2]\nparam dx: f32[5, 9]\ndx = avg_pool_grad dy " WIN "\n", TPU_ESHAPE,
     {"output dx 'dx' f32[5, 9] has 45 elements", NULL}},
    {"param dy: f32[9, 2]\nparam dx: f32[2, 50]\ndx = avg_pool_grad dy " WIN "\n", TPU_ESHAPE,
     {"input dy 'dy' f32[9, 2] must be [18, 2]", NULL}},
    {"param dy: f32[9, 2]\nparam dx: int32[5, 10]\ndx = avg_pool_grad dy " WIN "\n",
     TPU_ESHAPE, {"output dx 'dx' int32[5, 10] is int32, but avg_pool_grad computes in f32",
                  NULL}},
    /* row partitioning (parts >= 2): the image is the ext image of E = (hoc-1)*sh + kh
     * rows, the window side the local out of hoc = ceil(ho/parts) rows; here parts=4:
     * hc = 2, hoc = 1, E = 3 */
    {"param x: f32[3, 10]\nparam w: f32[18, 4]\nparam y: f32[3, 4]\ny = conv2d x, w " WIN
     " parts=4\n", TPU_OK, {NULL, NULL}},
    {"param x: f32[5, 10]\nparam w: f32[18, 4]\nparam y: f32[3, 4]\ny = conv2d x, w " WIN
     " parts=4\n", TPU_ESHAPE,
     {"input x 'x' f32[5, 10] has 50 elements, not a multiple of E*w*c = 3*5*2", "ext image"}},
    {"param x: f32[3, 10]\nparam w: f32[18, 4]\nparam y: f32[9, 4]\ny = conv2d x, w " WIN
     " parts=4\n", TPU_ESHAPE,
     {"output y 'y' f32[9, 4] must be [3, 4]", "local out, hoc = ceil(ho/parts)"}},
    {"param dy: f32[3, 2]\nparam dx: f32[2, 15]\ndx = avg_pool_grad dy " WIN " parts=4\n",
     TPU_OK, {NULL, NULL}},
    {"param dy: f32[9, 2]\nparam dx: f32[2, 15]\ndx = avg_pool_grad dy " WIN " parts=4\n",
     TPU_ESHAPE, {"input dy 'dy' f32[9, 2] must be [3, 2]", "parts=4: the core's local out"}},
    /* reshape */
    {"param x: f32[4, 3]\nparam y: bf16[2, 6]\ny = reshape x\n", TPU_ESHAPE,
     {"output y 'y' bf16[2, 6] and input x 'x' f32[4, 3] differ in dtype; reshape copies x's "
      "elements in row-major order (rule RESHAPE)", "dtype and element count (12)"}},
    {"param x: f32[4, 3]\nparam y: f32[5, 3]\ny = reshape x\n", TPU_ESHAPE,
     {"differ in element count", NULL}},
    /* in place (D1): none of these may write a buffer it reads */
    {"param x: f32[4, 3]\nx = reshape x\n", TPU_EINVAL,
     {"output y and input x are both 'x'; reshape cannot write a buffer it reads", NULL}},
    {"param x: f32[9, 2]\nx = avg_pool_grad x h=3 w=3 c=2 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 ho=3 "
     "wo=3\n", TPU_EINVAL, {"output dx and input dy are both 'x'", NULL}},
    /* a temp is written before it is read (D2), as for every op */
    {"temp x: f32[25, 2]\nparam y: f32[9, 18]\ny = im2col x " WIN "\n", TPU_EINVAL,
     {"reads temp 'x' before any op writes it", NULL}},
};

static void test_window_verify(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof verify_cases / sizeof verify_cases[0]; i++) {
        const struct verify_case *c = &verify_cases[i];
        char text[2048];
        snprintf(text, sizeof text, "program t\n%s", c->body);
        struct tpu_program *p = parse_ok(text);
        struct tpu_diag d;
        int rc = tpu_program_verify(p, NULL, &d);
        bool ok = rc == c->rc;
        for (int k = 0; k < 2 && c->want[k]; k++)
            ok = ok && strstr(d.msg, c->want[k]) != NULL;
        if (!ok)
            fail_msg("case %zu: got %s \"%s\"\nwant %s with \"%s\" and \"%s\"", i,
                     tpu_err_name(rc), d.msg, tpu_err_name(c->rc), c->want[0],
                     c->want[1] ? c->want[1] : "");
        tpu_program_destroy(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_round_trip),
        cmocka_unit_test(test_stray_window_field),
        cmocka_unit_test(test_window_parse_errors),
        cmocka_unit_test(test_window_verify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
