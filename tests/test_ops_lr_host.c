/* The optimizers' host-set learning rate (schedule=host, program.h): the value functions
 * tpu_lr_host_value and tpu_lr_host_bits, sgd_momentum, adam and adamw reading the rate from
 * their variable lr_var (bit for bit the constant-rate update at that rate, alpha while the
 * variable's low 32 bits are 0), a rate that is not finite, the builder's and the verifier's
 * refusals with their messages, and the text form. */
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
#include "op_bufs.h"
#include "xorshift.h"

#define X TPU_NO_BUF
#define N 37

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_value_functions(void **state)
{
    (void)state;
    struct tpu_op_attrs a = {.alpha = 0.125f, .schedule = TPU_SCHEDULE_HOST};
    assert_true(tpu_lr_host_value(&a, 0) == 0.125f); /* nothing set: alpha */
    assert_int_equal(tpu_lr_host_bits(0.03f), (int64_t)fbits(0.03f));
    assert_true(tpu_lr_host_value(&a, tpu_lr_host_bits(0.03f)) == 0.03f);
    /* only the low 32 bits count */
    assert_true(tpu_lr_host_value(&a, tpu_lr_host_bits(0.03f) | INT64_C(0x700000000)) == 0.03f);
    assert_true(tpu_lr_host_value(&a, INT64_C(0x100000000)) == 0.125f);
    /* a rate of 0 is written as -0 (bits 0 would read as alpha) */
    assert_int_equal(tpu_lr_host_bits(0.0f), INT64_C(0x80000000));
    const float z = tpu_lr_host_value(&a, tpu_lr_host_bits(0.0f));
    assert_true(z == 0.0f && signbit(z));
    /* the step-schedule function gives alpha for host (its rate is not a function of the
     * step) */
    a.decay_steps = 3;
    assert_true(tpu_lr_schedule_value(&a, 100) == 0.125f);
}

/* Buffers 0 param, 1 m (velocity), 2 v, 3 grad; vars: 0 step, 1 lr. */
static void fill(struct bufs *s, uint64_t seed)
{
    struct rng r = {seed};
    float *p = bset(s, 0, TPU_F32, 1, N), *m = bset(s, 1, TPU_F32, 1, N);
    float *v = bset(s, 2, TPU_F32, 1, N), *g = bset(s, 3, TPU_F32, 1, N);
    for (int i = 0; i < N; i++) {
        p[i] = rnd_f32(&r, -1.0f, 1.0f);
        m[i] = rnd_f32(&r, -0.1f, 0.1f);
        v[i] = rnd_f32(&r, 0.0f, 0.01f);
        g[i] = rnd_f32(&r, -1.0f, 1.0f);
    }
}

static struct tpu_op opt_op(enum tpu_opcode code, int32_t schedule, float alpha)
{
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = 0;
    op.out[1] = 1;
    if (code != TPU_OP_SGD_MOMENTUM) {
        op.out[2] = 2;
        op.attrs.var = 0;
        op.attrs.beta = 0.9f;
        op.attrs.delta = 0.999f;
        op.attrs.eps = 1e-7f;
    } else {
        op.attrs.beta = 0.9f;
    }
    op.attrs.gamma = 0.01f;
    op.in[0] = 3;
    op.attrs.alpha = alpha;
    op.attrs.schedule = schedule;
    if (schedule == TPU_SCHEDULE_HOST)
        op.attrs.lr_var = 1;
    return op;
}

/* The host op with rate r in its variable (or none set: alpha) updates exactly as the
 * constant op with alpha = r. */
static void test_ops_read_the_variable(void **state)
{
    (void)state;
    const enum tpu_opcode codes[] = {TPU_OP_SGD_MOMENTUM, TPU_OP_ADAM, TPU_OP_ADAMW};
    for (size_t c = 0; c < 3; c++)
        for (int set = 0; set < 2; set++) {
            const float alpha = 0.05f, rate = set ? 0.0078125f : alpha;
            struct bufs host = {0}, cons = {0};
            fill(&host, 11 + c);
            fill(&cons, 11 + c);
            int64_t vars_h[2] = {3, set ? tpu_lr_host_bits(rate) : 0}, vars_c[2] = {3, 0};
            struct tpu_op h = opt_op(codes[c], TPU_SCHEDULE_HOST, alpha);
            struct tpu_op k = opt_op(codes[c], TPU_SCHEDULE_CONSTANT, rate);
            struct tpu_diag d = {0, ""};
            if (tpu__op_compute(&h, host.b, vars_h, 8, 1, NULL, &d) ||
                tpu__op_compute(&k, cons.b, vars_c, 8, 1, NULL, &d))
                fail_msg("%s", d.msg);
            for (int b = 0; b < 3; b++)
                assert_memory_equal(host.b[b].data, cons.b[b].data, N * sizeof(float));
            /* and the update moved the param by a rate-sized step: a different rate differs */
            struct bufs other = {0};
            fill(&other, 11 + c);
            struct tpu_op o = opt_op(codes[c], TPU_SCHEDULE_CONSTANT, rate * 2.0f);
            assert_int_equal(tpu__op_compute(&o, other.b, vars_c, 8, 1, NULL, &d), 0);
            assert_memory_not_equal(other.b[0].data, host.b[0].data, N * sizeof(float));
            bfree(&host);
            bfree(&cons);
            bfree(&other);
        }
}

static void test_rate_not_finite(void **state)
{
    (void)state;
    struct bufs s = {0};
    fill(&s, 5);
    int64_t vars[2] = {1, tpu_lr_host_bits(INFINITY)};
    struct tpu_op op = opt_op(TPU_OP_ADAM, TPU_SCHEDULE_HOST, 0.1f);
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu__op_compute(&op, s.b, vars, 8, 1, NULL, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "adam: the learning rate in variable 1 (schedule=host) is "
                                  "inf; it must be a finite number"));
    vars[1] = (int64_t)0x7fc00000; /* NaN */
    op = opt_op(TPU_OP_SGD_MOMENTUM, TPU_SCHEDULE_HOST, 0.1f);
    assert_int_equal(tpu__op_compute(&op, s.b, vars, 8, 1, NULL, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "sgd_momentum: the learning rate in variable 1"));
    bfree(&s);
}

/* ---- builder, verifier, text -------------------------------------------------------------- */

#define HEAD                                                                                      \
    "program p\nvar n\nvar step\nvar learning_rate\nparam w: f32[4, 3]\nparam m: f32[4, 3]\n"     \
    "param v: f32[4, 3]\ntemp x: f32[4, 3]\nx = infeed\n"

static struct tpu_program *parse_ok(const char *body)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s", HEAD, body);
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

static void test_verifier(void **state)
{
    (void)state;
    static const char *const good[] = {
        "w, m = sgd_momentum x alpha=0.1 schedule=host lr_var=learning_rate\n",
        "loop n {\nvar_add step 1\nw, m, v = adam x var=step alpha=0.1 beta=0.9 delta=0.99 "
        "eps=1e-07 schedule=host lr_var=learning_rate\n}\n",
        "w, m, v = adamw x var=step alpha=0.1 beta=0.9 delta=0.99 eps=1e-07 schedule=host "
        "lr_var=learning_rate\n",
    };
    for (size_t i = 0; i < 3; i++) {
        struct tpu_program *p = parse_ok(good[i]);
        struct tpu_diag d = {0, ""};
        if (tpu_program_verify(p, NULL, &d))
            fail_msg("good case %zu: %s", i, d.msg);
        tpu_program_destroy(&p);
    }
    static const char *const bad[][2] = {
        {"w, m = sgd_momentum x alpha=0.1 schedule=host lr_var=learning_rate decay_steps=4\n",
         "sgd_momentum schedule=host reads none of warmup, decay_steps, decay_rate (the host "
         "sets the rate in lr_var), but warmup=0 decay_steps=4 decay_rate=0; remove them"},
        {"loop n {\nw, m = sgd_momentum x alpha=0.1 schedule=host lr_var=n\n}\n",
         "sgd_momentum schedule=host reads lr_var=n, the loop's trip-count variable, as the "
         "rate's bits; give it a variable of its own"},
        {"w, m, v = adam x var=step alpha=0.1 beta=0.9 delta=0.99 eps=1e-07 schedule=host "
         "lr_var=step\n",
         "adam schedule=host reads lr_var=step, which is also its step counter (var)"},
        {"w, m = sgd_momentum x alpha=0.1 schedule=step var=step decay_steps=2 "
         "decay_rate=0.5 lr_var=learning_rate\n",
         "sgd_momentum has lr_var=learning_rate but schedule=1; only schedule=host reads "
         "lr_var: remove it or set schedule=host"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tpu_program *p = parse_ok(bad[i][0]);
        struct tpu_diag d = {0, ""};
        int rc = tpu_program_verify(p, NULL, &d);
        if (rc != TPU_EINVAL || !strstr(d.msg, bad[i][1]))
            fail_msg("bad case %zu: got %d \"%s\"\nwant EINVAL with \"%s\"", i, rc, d.msg,
                     bad[i][1]);
        tpu_program_destroy(&p);
    }
}

static void test_text_form(void **state)
{
    (void)state;
    /* canonical text: schedule=host and lr_var printed (lr_var even when it is variable 0),
     * sgd_momentum without var */
    const char *text = "program p\n"
                       "\n"
                       "var learning_rate\n"
                       "var step\n"
                       "\n"
                       "param w: f32[4, 3]\n"
                       "param m: f32[4, 3]\n"
                       "param v: f32[4, 3]\n"
                       "param u: f32[4, 3]\n"
                       "param um: f32[4, 3]\n"
                       "temp  x: f32[4, 3]\n"
                       "\n"
                       "x = infeed\n"
                       "u, um = sgd_momentum x alpha=0.1 beta=0.9 schedule=host "
                       "lr_var=learning_rate\n"
                       "w, m, v = adam x var=step alpha=0.1 beta=0.9 delta=0.99 eps=1e-07 "
                       "schedule=host lr_var=learning_rate\n";
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    if (tpu_program_parse(text, "t", &p, &d))
        fail_msg("%s", d.msg);
    const struct tpu_op *op = tpu_program_op(p, 1);
    assert_int_equal(op->attrs.schedule, TPU_SCHEDULE_HOST);
    assert_int_equal(op->attrs.lr_var, 0);
    assert_int_equal(tpu_program_op(p, 2)->attrs.var, 1);
    char *out = NULL;
    assert_int_equal(tpu_program_to_string(p, &out), 0);
    assert_string_equal(out, text);
    free(out);
    if (tpu_program_verify(p, NULL, &d))
        fail_msg("%s", d.msg);
    tpu_program_destroy(&p);

    static const char *const bad[][2] = {
        {"w, m = sgd_momentum x alpha=0.1 schedule=host\n",
         "sgd_momentum with schedule=host needs attribute lr_var=<variable>: the variable "
         "whose low 32 bits hold the rate's f32 bits"},
        {"w, m = sgd_momentum x alpha=0.1 schedule=host lr_var=rate\n", "rate"},
        {"w, m = sgd_momentum x alpha=0.1 schedule=hots lr_var=learning_rate\n",
         "schedule=hots is not known; write schedule=constant, schedule=step or "
         "schedule=cosine (or schedule=host with lr_var=<variable>: a rate the host sets)"},
        {"x = rsqrt x eps=1 lr_var=learning_rate\n", "unknown attribute 'lr_var' for rsqrt"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[2048];
        snprintf(buf, sizeof buf, "%s%s", HEAD, bad[i][0]);
        p = NULL;
        assert_int_equal(tpu_program_parse(buf, "t", &p, &d), TPU_EPARSE);
        if (!strstr(d.msg, bad[i][1]))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, d.msg, bad[i][1]);
    }
}

/* tpu_program_add_op checks that lr_var names a variable. */
static void test_add_op(void **state)
{
    (void)state;
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0, ""};
    assert_int_equal(tpu_program_create("p", &p), 0);
    uint32_t w, m, x, lr;
    assert_int_equal(tpu_program_add_buffer(p, "w", TPU_F32, TPU_BUF_PARAM, 2, 2, &w, &d), 0);
    assert_int_equal(tpu_program_add_buffer(p, "m", TPU_F32, TPU_BUF_PARAM, 2, 2, &m, &d), 0);
    assert_int_equal(tpu_program_add_buffer(p, "x", TPU_F32, TPU_BUF_TEMP, 2, 2, &x, &d), 0);
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_SGD_MOMENTUM);
    op.out[0] = w;
    op.out[1] = m;
    op.in[0] = x;
    op.attrs.alpha = 0.1f;
    op.attrs.schedule = TPU_SCHEDULE_HOST;
    assert_int_equal(tpu_program_add_op(p, &op, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "op 0 (sgd_momentum): lr_var is variable id 0, but the "
                                  "program has 0 variables; add the variable first"));
    assert_int_equal(tpu_program_add_var(p, "learning_rate", &lr, &d), 0);
    op.attrs.lr_var = lr;
    assert_int_equal(tpu_program_add_op(p, &op, &d), 0);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_functions),
        cmocka_unit_test(test_ops_read_the_variable),
        cmocka_unit_test(test_rate_not_finite),
        cmocka_unit_test(test_verifier),
        cmocka_unit_test(test_text_form),
        cmocka_unit_test(test_add_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
