/* The weighted losses softmax_xent_w and mse_w (program.h): their values against a naive
 * double-precision reference and, bit for bit, against their unweighted forms (each row's
 * weight takes alpha's place in the very same multiply), padding rows, the run-time shape
 * check, the verifier's refusals with their messages, the text form, and the vector unit's
 * cost.
 *
 * Exactness. Row by row the weighted gradient must equal the unweighted op's gradient run
 * with alpha = that row's weight, bit for bit (no tolerance: the two are one multiply). The
 * loss is checked bit for bit against its documented order (sum over rows of w_i * row
 * loss, the row loss being the unweighted op's loss at alpha 1, itself exact), and against
 * double precision with the bound stated at the check. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/program.h"
#include "ops/ops.h"
#include "chip/timing.h"
#include "expect_same_bits.h"
#include "op_bufs.h"
#include "xorshift.h"

#define X TPU_NO_BUF
#define ROWS 9
#define COLS 5

static struct tpu_op mkop(enum tpu_opcode code, uint32_t o0, uint32_t o1, uint32_t i0,
                          uint32_t i1, uint32_t i2, uint32_t i3)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = o0;
    op.out[1] = o1;
    op.in[0] = i0;
    op.in[1] = i1;
    op.in[2] = i2;
    op.in[3] = i3;
    return op;
}

static void run_ok(const struct tpu_op *op, struct bufs *s)
{
    struct tpu_diag d = {0, ""};
    int rc = tpu__op_compute(op, s->b, NULL, 8, 1, NULL, &d);
    if (rc)
        fail_msg("unexpected error %d: %s", rc, d.msg);
}

/* ---- softmax_xent_w --------------------------------------------------------------------- */

/* Buffers: 0 loss, 1 dlogits, 2 logits, 3 labels, 4 weights (rows 2 and 6 are padding). */
static void setup_xent(struct bufs *s, struct rng *r)
{
    float *x = bset(s, 2, TPU_F32, ROWS, COLS), *w = bset(s, 4, TPU_F32, ROWS, 1);
    int32_t *lab = bset(s, 3, TPU_INT32, ROWS, 1);
    bset(s, 0, TPU_F32, 1, 1);
    float *g = bset(s, 1, TPU_F32, ROWS, COLS);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) {
        x[i] = rnd_f32(r, -4.0f, 4.0f);
        g[i] = 99.0f; /* stale: the op overwrites every row, padding included */
    }
    for (size_t i = 0; i < ROWS; i++) {
        lab[i] = (i == 2 || i == 6) ? -1 : (int32_t)rnd_below(r, COLS);
        w[i] = rnd_f32(r, 0.0f, 0.5f);
    }
    w[4] = 0.0f; /* a real row of weight 0 */
    w[7] = 3.0f;
}

static void test_softmax_xent_w_rows_match_unweighted(void **state)
{
    (void)state;
    struct rng r = {31};
    struct bufs s = {0};
    setup_xent(&s, &r);
    struct tpu_op op = mkop(TPU_OP_SOFTMAX_XENT_W, 0, 1, 2, 3, 4, X);
    run_ok(&op, &s);
    const float loss = *(float *)s.b[0].data;
    float g[ROWS * COLS];
    memcpy(g, s.b[1].data, sizeof g);
    const float *w = s.b[4].data;
    const int32_t *lab = s.b[3].data;

    /* each row against softmax_xent with alpha = the row's weight; the row loss from
     * softmax_xent at alpha 1 (exact: 1 * total), on a one-row copy */
    float want_loss = 0.0f;
    for (size_t i = 0; i < ROWS; i++) {
        struct bufs one = {0};
        memcpy(bset(&one, 2, TPU_F32, 1, COLS), (float *)s.b[2].data + i * COLS,
               COLS * sizeof(float));
        *(int32_t *)bset(&one, 3, TPU_INT32, 1, 1) = lab[i];
        bset(&one, 0, TPU_F32, 1, 1);
        bset(&one, 1, TPU_F32, 1, COLS);
        struct tpu_op u = mkop(TPU_OP_SOFTMAX_XENT, 0, 1, 2, 3, X, X);
        u.attrs.alpha = w[i];
        run_ok(&u, &one);
        char what[48];
        snprintf(what, sizeof what, "dlogits row %zu", i);
        expect_same(g + i * COLS, one.b[1].data, COLS, what);
        if (lab[i] < 0) {
            for (size_t j = 0; j < COLS; j++)
                assert_int_equal(((uint32_t *)g)[i * COLS + j], 0u); /* +0 exactly */
        } else {
            u.attrs.alpha = 1.0f;
            run_ok(&u, &one);
            const float row_loss = *(float *)one.b[0].data;
            want_loss = want_loss + w[i] * row_loss;
        }
        bfree(&one);
    }
    expect_same(&loss, &want_loss, 1, "loss, documented order");
    bfree(&s);
}

/* Against double precision. Bound: each row loss is within (COLS + 8) u of its magnitude
 * plus 2u (|log s| + |d|) (test_ops.c derives it for softmax_xent); the weight's product
 * adds u relative, the sum over ROWS rows ROWS u of the sum of the terms' magnitudes:
 * |error| <= u * (COLS + 12 + ROWS) * sum_i |w_i| (|row_i| + |log s_i| + |d_i| + 1), doubled.
 * dlogits: |error| <= |w| u ((COLS + 8 + |x_j - m|) p_j + 2), doubled. */
static void test_softmax_xent_w_reference(void **state)
{
    (void)state;
    struct rng r = {5};
    for (int trial = 0; trial < 4; trial++) {
        struct bufs s = {0};
        setup_xent(&s, &r);
        struct tpu_op op = mkop(TPU_OP_SOFTMAX_XENT_W, 0, 1, 2, 3, 4, X);
        run_ok(&op, &s);
        const float *x = s.b[2].data, *g = s.b[1].data, *w = s.b[4].data;
        const int32_t *lab = s.b[3].data;
        const double u = ldexp(1, -24);
        double loss = 0, loss_tol = 0;
        for (size_t i = 0; i < ROWS; i++) {
            if (lab[i] < 0)
                continue;
            double m = x[i * COLS], sum = 0;
            for (size_t j = 1; j < COLS; j++)
                m = fmax(m, x[i * COLS + j]);
            for (size_t j = 0; j < COLS; j++)
                sum += exp((double)x[i * COLS + j] - m);
            const double d = (double)x[i * COLS + (size_t)lab[i]] - m;
            const double row = log(sum) - d;
            loss += (double)w[i] * row;
            loss_tol += fabs(w[i]) * (fabs(row) + fabs(log(sum)) + fabs(d) + 1.0);
            for (size_t j = 0; j < COLS; j++) {
                const double p = exp((double)x[i * COLS + j] - m) / sum;
                const double want = (double)w[i] * (p - ((int32_t)j == lab[i] ? 1.0 : 0.0));
                const double tol = 2.0 * fabs(w[i]) * u *
                                   ((COLS + 8 + fabs((double)x[i * COLS + j] - m)) * p + 2.0);
                if (!(fabs((double)g[i * COLS + j] - want) <= tol))
                    fail_msg("dlogits[%zu][%zu] = %.9g, want %.12g within %.3g", i, j,
                             (double)g[i * COLS + j], want, tol);
            }
        }
        loss_tol *= 2.0 * u * (COLS + 12 + ROWS);
        const double got = *(float *)s.b[0].data;
        if (!(fabs(got - loss) <= loss_tol))
            fail_msg("loss = %.9g, want %.12g within %.3g", got, loss, loss_tol);
        bfree(&s);
    }
}

/* ---- mse_w ------------------------------------------------------------------------------- */

/* Buffers: 0 pred, 1 target, 2 mask, 3 weights, 4 loss, 5 dpred (rows 1 and 5 padding). */
static void setup_mse(struct bufs *s, struct rng *r)
{
    float *p = bset(s, 0, TPU_F32, ROWS, COLS), *t = bset(s, 1, TPU_F32, ROWS, COLS);
    int32_t *mask = bset(s, 2, TPU_INT32, ROWS, 1);
    float *w = bset(s, 3, TPU_F32, ROWS, 1);
    bset(s, 4, TPU_F32, 1, 1);
    float *g = bset(s, 5, TPU_F32, ROWS, COLS);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) {
        p[i] = rnd_f32(r, -3.0f, 3.0f);
        t[i] = rnd_f32(r, -3.0f, 3.0f);
        g[i] = 99.0f;
    }
    for (size_t i = 0; i < ROWS; i++) {
        mask[i] = (i == 1 || i == 5) ? -1 : 0;
        w[i] = rnd_f32(r, 0.0f, 0.5f);
    }
    w[3] = 0.0f;
    w[8] = 2.5f;
}

static void test_mse_w_rows_match_unweighted(void **state)
{
    (void)state;
    struct rng r = {77};
    struct bufs s = {0};
    setup_mse(&s, &r);
    struct tpu_op op = mkop(TPU_OP_MSE_W, 4, 5, 0, 1, 2, 3);
    run_ok(&op, &s);
    const float *w = s.b[3].data, *g = s.b[5].data;
    const int32_t *mask = s.b[2].data;
    float want_loss = 0.0f;
    for (size_t i = 0; i < ROWS; i++) {
        struct bufs one = {0};
        memcpy(bset(&one, 0, TPU_F32, 1, COLS), (float *)s.b[0].data + i * COLS,
               COLS * sizeof(float));
        memcpy(bset(&one, 1, TPU_F32, 1, COLS), (float *)s.b[1].data + i * COLS,
               COLS * sizeof(float));
        *(int32_t *)bset(&one, 2, TPU_INT32, 1, 1) = mask[i];
        bset(&one, 4, TPU_F32, 1, 1);
        bset(&one, 5, TPU_F32, 1, COLS);
        struct tpu_op u = mkop(TPU_OP_MSE, 4, 5, 0, 1, 2, X);
        u.attrs.alpha = w[i];
        run_ok(&u, &one);
        char what[48];
        snprintf(what, sizeof what, "dpred row %zu", i);
        expect_same(g + i * COLS, one.b[5].data, COLS, what);
        if (mask[i] < 0) {
            for (size_t j = 0; j < COLS; j++)
                assert_int_equal(((const uint32_t *)g)[i * COLS + j], 0u);
        } else {
            u.attrs.alpha = 1.0f;
            run_ok(&u, &one);
            want_loss = want_loss + w[i] * *(float *)one.b[4].data;
        }
        bfree(&one);
    }
    expect_same(s.b[4].data, &want_loss, 1, "loss, documented order");

    /* double precision: each row's mean within (COLS + 3) u of the sum of its squares / K,
     * the weight's product u more, the sum over rows ROWS u of the terms: doubled */
    const float *p = s.b[0].data, *t = s.b[1].data;
    const double u = ldexp(1, -24);
    double loss = 0, tol = 0;
    for (size_t i = 0; i < ROWS; i++) {
        if (mask[i] < 0)
            continue;
        double row = 0;
        for (size_t j = 0; j < COLS; j++) {
            const double e = (double)p[i * COLS + j] - t[i * COLS + j];
            row += e * e;
            const double want = (double)w[i] * 2.0 * e / COLS;
            /* c = (w * 2) / K one rounding, e one, c * e one: 3u relative, doubled */
            if (!(fabs((double)g[i * COLS + j] - want) <= 6.0 * u * fabs(want)))
                fail_msg("dpred[%zu][%zu] = %.9g, want %.12g", i, j,
                         (double)g[i * COLS + j], want);
        }
        loss += (double)w[i] * row / COLS;
        tol += fabs((double)w[i]) * row / COLS;
    }
    tol *= 2.0 * u * (COLS + 4 + ROWS);
    const double got = *(float *)s.b[4].data;
    if (!(fabs(got - loss) <= tol))
        fail_msg("mse_w loss = %.9g, want %.12g within %.3g", got, loss, tol);
    bfree(&s);
}

/* ---- run-time shape check ---------------------------------------------------------------- */

static void test_weights_shape_at_run_time(void **state)
{
    (void)state;
    struct rng r = {3};
    struct bufs s = {0};
    setup_xent(&s, &r);
    bset(&s, 4, TPU_F32, ROWS, 2); /* two columns */
    struct tpu_op op = mkop(TPU_OP_SOFTMAX_XENT_W, 0, 1, 2, 3, 4, X);
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu__op_compute(&op, s.b, NULL, 8, 1, NULL, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "weights"));
    bfree(&s);

    setup_mse(&s, &r);
    bset(&s, 3, TPU_INT32, ROWS, 1); /* int32 weights */
    op = mkop(TPU_OP_MSE_W, 4, 5, 0, 1, 2, 3);
    assert_int_equal(tpu__op_compute(&op, s.b, NULL, 8, 1, NULL, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "weights"));
    bfree(&s);
}

/* ---- verifier ------------------------------------------------------------------------------ */

static void expect_verify(const char *text, int code, const char *needle)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    int rc = tpu_program_verify(p, NULL, &d);
    tpu_program_destroy(&p);
    if (rc != code || (needle && !strstr(d.msg, needle)))
        fail_msg("verify gave %d '%s'; want %d with '%s'", rc, d.msg, code,
                 needle ? needle : "");
}

#define XENT_DECLS                                                                                \
    "program p\n"                                                                                 \
    "temp logits: f32[4, 3]\n"                                                                    \
    "temp labels: int32[4, 1]\n"                                                                    \
    "temp loss: f32[1, 1]\n"                                                                      \
    "temp dl: f32[4, 3]\n"

static void test_verifier(void **state)
{
    (void)state;
    expect_verify(XENT_DECLS "temp w: f32[4, 1]\n"
                  "logits = infeed\nlabels = infeed\nw = infeed\n"
                  "loss, dl = softmax_xent_w logits, labels, w\n",
                  0, NULL);
    expect_verify(XENT_DECLS "temp w: int32[4, 1]\n"
                  "logits = infeed\nlabels = infeed\nw = infeed\n"
                  "loss, dl = softmax_xent_w logits, labels, w\n",
                  TPU_ESHAPE, "input weights 'w' int32[4, 1] is int32, but softmax_xent_w computes in f32");
    expect_verify(XENT_DECLS "temp w: f32[1, 4]\n"
                  "logits = infeed\nlabels = infeed\nw = infeed\n"
                  "loss, dl = softmax_xent_w logits, labels, w\n",
                  TPU_ESHAPE, "one weight per row of logits");
    /* the weights take alpha's place: setting alpha is refused (A1) */
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(XENT_DECLS "temp w: f32[4, 1]\n"
                          "logits = infeed\nlabels = infeed\nw = infeed\n"
                          "loss, dl = softmax_xent_w logits, labels, w\n", "t", &p, &d))
        fail_msg("%s", d.msg);
    struct tpu_op op = *tpu_program_op(p, 3);
    op.attrs.alpha = 0.5f;
    struct tpu_program *q = NULL;
    assert_int_equal(tpu_program_create("q", &q), 0);
    for (uint32_t b = 0; b < tpu_program_n_buffers(p); b++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, b);
        assert_int_equal(tpu_program_add_buffer(q, bd->name, bd->dtype, bd->kind, bd->rows,
                                                bd->cols, NULL, &d), 0);
    }
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(tpu_program_add_op(q, tpu_program_op(p, i), &d), 0);
    assert_int_equal(tpu_program_add_op(q, &op, &d), 0);
    assert_int_equal(tpu_program_verify(q, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "softmax_xent_w does not read attribute alpha"));
    tpu_program_destroy(&p);
    tpu_program_destroy(&q);

#define MSE_DECLS                                                                                 \
    "program p\n"                                                                                 \
    "temp pred: f32[4, 3]\n"                                                                      \
    "temp tgt: f32[4, 3]\n"                                                                       \
    "temp mask: int32[4, 1]\n"                                                                      \
    "temp loss: f32[1, 1]\n"                                                                      \
    "temp dp: f32[4, 3]\n"
    expect_verify(MSE_DECLS "temp w: f32[4, 1]\n"
                  "pred = infeed\ntgt = infeed\nmask = infeed\nw = infeed\n"
                  "loss, dp = mse_w pred, tgt, mask, w\n",
                  0, NULL);
    expect_verify(MSE_DECLS "temp w: f32[3, 1]\n"
                  "pred = infeed\ntgt = infeed\nmask = infeed\nw = infeed\n"
                  "loss, dp = mse_w pred, tgt, mask, w\n",
                  TPU_ESHAPE, "input weights 'w' is [3, 1] but must be [4, 1]");
    expect_verify(MSE_DECLS "temp w: int32[4, 1]\n"
                  "pred = infeed\ntgt = infeed\nmask = infeed\nw = infeed\n"
                  "loss, dp = mse_w pred, tgt, mask, w\n",
                  TPU_ESHAPE, "declare it f32");
}

/* ---- text form ------------------------------------------------------------------------------ */

static void test_text_round_trip(void **state)
{
    (void)state;
    const char *text = "program p\n"
                       "\n"
                       "temp  logits: f32[4, 3]\n"
                       "temp  labels: int32[4, 1]\n"
                       "temp  w: f32[4, 1]\n"
                       "temp  mask: int32[4, 1]\n"
                       "temp  loss: f32[1, 1]\n"
                       "temp  dl: f32[4, 3]\n"
                       "temp  loss2: f32[1, 1]\n"
                       "temp  dp: f32[4, 3]\n"
                       "\n"
                       "logits = infeed\n"
                       "labels = infeed\n"
                       "w = infeed\n"
                       "mask = infeed\n"
                       "loss, dl = softmax_xent_w logits, labels, w\n"
                       "loss2, dp = mse_w logits, logits, mask, w\n";
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "t", &p, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(tpu_program_op(p, 4)->code, TPU_OP_SOFTMAX_XENT_W);
    assert_int_equal(tpu_program_op(p, 4)->in[2], 2u);
    assert_int_equal(tpu_program_op(p, 5)->code, TPU_OP_MSE_W);
    assert_int_equal(tpu_program_op(p, 5)->in[3], 2u);
    char *out = NULL;
    assert_int_equal(tpu_program_to_string(p, &out), 0);
    assert_string_equal(out, text);
    free(out);
    assert_int_equal(tpu_program_verify(p, NULL, &d), 0);
    tpu_program_destroy(&p);

    /* a missing weights input, and an attribute the op does not take */
    const char *bad[][2] = {
        {"loss, dl = softmax_xent_w logits, labels\n",
         "softmax_xent_w takes 3 inputs (logits, labels, weights), got 2"},
        {"loss, dl = softmax_xent_w logits, labels, w alpha=1\n",
         "softmax_xent_w takes no attributes, got 'alpha'"},
        {"loss2, dp = mse_w logits, logits, mask\n",
         "mse_w takes 4 inputs (pred, target, mask, weights), got 3"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s%s", (int)(strstr(text, "loss, dl") - text), text,
                 bad[k][0]);
        p = NULL;
        assert_int_equal(tpu_program_parse(buf, "t", &p, &d), TPU_EPARSE);
        if (!strstr(d.msg, bad[k][1]))
            fail_msg("message '%s' lacks '%s'", d.msg, bad[k][1]);
        assert_null(p);
    }
}

static void test_table_and_cost(void **state)
{
    (void)state;
    assert_string_equal(tpu_opcode_name(TPU_OP_SOFTMAX_XENT_W), "softmax_xent_w");
    assert_string_equal(tpu_opcode_name(TPU_OP_MSE_W), "mse_w");
    assert_int_equal(tpu_opcode_n_in(TPU_OP_SOFTMAX_XENT_W), 3);
    assert_int_equal(tpu_opcode_n_in(TPU_OP_MSE_W), 4);
    assert_string_equal(tpu_opcode_operand_name(TPU_OP_MSE_W, false, 3), "weights");
    assert_int_equal(tpu_opcode_attrs(TPU_OP_SOFTMAX_XENT_W), 0u);
    assert_int_equal(tpu_opcode_attrs(TPU_OP_MSE_W), 0u);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_SOFTMAX_XENT_W), 10);
    assert_int_equal(tpu__vpu_ops_per_element(TPU_OP_MSE_W), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_xent_w_rows_match_unweighted),
        cmocka_unit_test(test_softmax_xent_w_reference),
        cmocka_unit_test(test_mse_w_rows_match_unweighted),
        cmocka_unit_test(test_weights_shape_at_run_time),
        cmocka_unit_test(test_verifier),
        cmocka_unit_test(test_text_round_trip),
        cmocka_unit_test(test_table_and_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
