/* Row partitioning's rules (program.h's "Row partitioning"): the verifier's messages for
 * the halo ops, row_mask, dropout_mask's window, a window's parts and all_reduce's group
 * (sim/program/program_verify_part.c, program_verify_window.c), each checked for its key
 * words; tpu_device_load's check of parts against cores_per_replica; the text form of the
 * new ops and attributes (print -> parse -> print identical); and the halo ops' timing
 * against sim/chip/timing.c's model, worked out by hand for the tiny preset. The values of
 * the ops are test_partition_ops.c's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/device.h"
#include "tpusim/program.h"
#include "device_helpers.h"
#include "partition_helpers.h"

/* ---- verifier and load rules, text form --------------------------------------------- */


/* The verifier's message for a program of one op `line` over the buffers `decls`: the code
 * and every key word. */
static void expect_verify(const char *decls, const char *line, int code, const char *const *words)
{
    char text[1024];
    snprintf(text, sizeof text, "program v\nvar step\n%s%s\n", decls, line);
    struct tpu_program *p = parse(text);
    struct tpu_diag d = {0};
    const int rc = tpu_program_verify(p, NULL, &d);
    if (rc != code)
        fail_msg("'%s': got %s (%s), want %s", line, tpu_err_name(rc), d.msg,
                 tpu_err_name(code));
    for (size_t i = 0; words[i]; i++)
        if (!strstr(d.msg, words[i]))
            fail_msg("'%s': message \"%s\" lacks \"%s\"", line, d.msg, words[i]);
    tpu_program_destroy(&p);
}

static void test_verify_rules(void **state)
{
    (void)state;
    /* 8 rows over 2 cores: hc = 4, hoc = 4, E = 3*1 + 3 = 6; N = 1 */
    const char *bufs = "param xl: f32[4, 8]\nparam xe: f32[6, 8]\nparam bad: f32[5, 8]\n"
                       "param xh: bf16[4, 8]\nparam yl: f32[16, 2]\nparam m: f32[4, 8]\n"
                       "param yb: f32[32, 2]\n";
    expect_verify(bufs, "xe = halo xl " WIN8, TPU_EINVAL,
                  (const char *const[]){"parts=0", "halo", "parts >= 2", "cores_per_replica",
                                        NULL});
    expect_verify(bufs, "xe = halo xl " WIN8 " parts=2", 0, (const char *const[]){NULL});
    expect_verify(bufs, "bad = halo xl " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'bad'", "ext image", "E = (hoc-1)*sh + kh", "N*E*w*c",
                                        NULL});
    expect_verify(bufs, "xe = halo bad " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'bad'", "local image", "hc = ceil(h/parts)", NULL});
    expect_verify(bufs, "xe = halo xh " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"dtype", "one dtype", NULL});
    expect_verify(bufs, "xl = halo_grad xe " WIN8 " parts=2", 0, (const char *const[]){NULL});
    expect_verify(bufs, "xl = halo_grad xh " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'xh'", "bf16", "f32", NULL});
    expect_verify(bufs, "yl = max_pool xe " WIN8 " parts=2", 0, (const char *const[]){NULL});
    expect_verify(bufs, "yb = max_pool xe " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'yb'", "local out", "N*hoc*wo", "[16, 2]", NULL});
    expect_verify(bufs, "xl = max_pool bad " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'bad'", "ext image", NULL});
    expect_verify(bufs, "m = row_mask " WIN8, TPU_EINVAL,
                  (const char *const[]){"row_mask", "parts >= 2", NULL});
    expect_verify(bufs, "bad = row_mask " WIN8 " parts=2", TPU_ESHAPE,
                  (const char *const[]){"'bad'", "local image", NULL});
    expect_verify(bufs, "m = dropout_mask var=step imm=1 alpha=0.5 h=8 w=4 c=2", TPU_EINVAL,
                  (const char *const[]){"dropout_mask", "parts=0", "parts >= 2", NULL});
    expect_verify(bufs, "m = dropout_mask var=step imm=1 alpha=0.5 h=8 w=4 c=2 parts=2", 0,
                  (const char *const[]){NULL});
    expect_verify(bufs, "xl = all_reduce xl reduce=sum group=3", TPU_EINVAL,
                  (const char *const[]){"group=3", "replica_cores", NULL});
}

static void test_load_parts_vs_replica(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program l\nparam xl: f32[4, 8]\nparam xe: f32[6, 8]\n"
                                  "xe = halo xl " WIN8 " parts=2\n");
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.n_chips = 2;
    s.cores_per_replica = 4;
    struct tpu_device *dev = open_settings(&s);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_load(dev, p, &d), TPU_EINVAL);
    static const char *const words[] = {"op 0", "halo", "parts=2", "4 cores per replica",
                                        "cores_per_replica 2", "4 parts", NULL};
    for (size_t i = 0; words[i]; i++)
        if (!strstr(d.msg, words[i]))
            fail_msg("message \"%s\" lacks \"%s\"", d.msg, words[i]);
    tpu_device_close(&dev);
    /* one core per replica: the fix is a program without partitioning */
    s.n_chips = 1;
    s.cores_per_replica = 1;
    dev = open_settings(&s);
    assert_int_equal(tpu_device_load(dev, p, &d), TPU_EINVAL);
    if (!strstr(d.msg, "has 1 core per replica") || !strstr(d.msg, "without row partitioning"))
        fail_msg("message \"%s\"", d.msg);
    tpu_device_close(&dev);
    s.cores_per_replica = 2;
    dev = open_settings(&s);
    load(dev, p);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_text_round_trip(void **state)
{
    (void)state;
    const char *text =
        "program t\n"
        "\n"
        "var step\n"
        "\n"
        "param xl: f32[4, 8]\n"
        "param xe: f32[6, 8]\n"
        "param y: f32[16, 2]\n"
        "temp  x: f32[4, 8]\n"
        "\n"
        "x = infeed core0\n"
        "xe = halo xl " WIN8 " parts=2\n"
        "y = max_pool xe " WIN8 " parts=2\n"
        "xl = halo_grad xe " WIN8 " parts=2\n"
        "xl = row_mask " WIN8 " parts=2\n"
        "xl = dropout_mask var=step imm=3 alpha=0.25 h=8 w=4 c=2 parts=2\n"
        "xl = all_reduce x reduce=mean group=replica_cores\n"
        "y = max_pool xe " WIN8 "\n";
    struct tpu_program *p = parse(text);
    char *out = NULL;
    assert_int_equal(tpu_program_to_string(p, &out), 0);
    assert_string_equal(out, text);
    free(out);
    assert_true(tpu_program_op(p, 0)->attrs.core0);
    assert_int_equal(tpu_program_op(p, 1)->attrs.win.parts, 2);
    assert_int_equal(tpu_program_op(p, 6)->attrs.group, TPU_GROUP_REPLICA_CORES);
    /* parts=1 means unpartitioned: stored as 0, printed as nothing */
    struct tpu_op op = *tpu_program_op(p, 7);
    op.attrs.win.parts = 1;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_program_add_op(p, &op, &d), 0);
    assert_int_equal(tpu_program_op(p, 8)->attrs.win.parts, 0);
    tpu_program_destroy(&p);
    struct tpu_program *q = parse("program t\nparam x: f32[6, 8]\nparam y: f32[6, 8]\n"
                                  "y = max_pool x " WIN8 " parts=1\n");
    assert_int_equal(tpu_program_op(q, 0)->attrs.win.parts, 0);
    tpu_program_destroy(&q);
}

/* ---- timing of the halo ops ---------------------------------------------------------- */

/* The ICI cycles and ici_bytes of each core for one halo op (sim/chip/timing.c's model). */
static void halo_timing(uint32_t parts, uint32_t n_chips, uint32_t h, bool grad,
                        uint64_t want_cycles, const uint64_t *want_bytes)
{
    /* w = 16, c = 4: 256 bytes per f32 row; 3x3 'same' window of stride 1 */
    char text[512];
    const uint32_t hc = (h + parts - 1) / parts, e = hc + 2;
    snprintf(text, sizeof text, "program h\nparam xl: f32[%u, 64]\nparam xe: f32[%u, 64]\n"
             "%s h=%u w=16 c=4 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=%u wo=16 parts=%u\n", hc, e,
             grad ? "xl = halo_grad xe" : "xe = halo xl", h, h, parts);
    struct part_run r = run_start(text, parts, n_chips);
    go(&r);
    for (uint32_t k = 0; k < parts; k++) {
        struct tpu_core_counters c;
        assert_int_equal(tpu_device_counters(r.dev, k, &c), 0);
        assert_int_equal(c.busy[TPU_UNIT_ICI], want_cycles);
        assert_int_equal(c.ici_bytes, want_bytes[k]);
        /* the op's statistics hold what the counters gained */
        struct tpu_op_stats st;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_device_op_stats(r.dev, k, &st, 1, &d), 0);
        assert_int_equal(st.runs, 1);
        assert_int_equal(st.busy[TPU_UNIT_ICI], want_cycles);
        assert_int_equal(st.ici_bytes, want_bytes[k]);
        assert_int_equal(c.cycles, want_cycles); /* the halo is the whole program */
    }
    run_end(&r);
}

static void test_halo_timing(void **state)
{
    (void)state;
    /* tiny preset: 1 GHz, HBM 8 GB/s per chip, ICI links 10 GB/s, 500 ns per hop.
     * 8 rows over 2 cores of one chip: hc = hoc = 4, E = 6, r0 = -1, 3. Core 0 needs row 4
     * (core 1's), core 1 needs row 3 (core 0's): 256 bytes each way, on chip: 256 B at
     * 8 GB/s = 32 cycles. halo_grad moves the same rows back. */
    const uint64_t one_chip[2] = {256, 256};
    halo_timing(2, 1, 8, false, 32, one_chip);
    halo_timing(2, 1, 8, true, 32, one_chip);
    /* 16 rows over 4 cores on 2 chips (cores 0, 1 on chip 0; 2, 3 on chip 1): r0 = 4k - 1.
     * Core 1 needs row 3 (core 0, same chip: 32 cycles) and row 8 (core 2, other chip:
     * 500 + ceil(256 B / 10 GB/s) = 500 + 26 = 526 cycles); core 2 needs row 7 from core 1
     * (526) and row 12 from core 3 (32). The op ends when the slowest pair is done: 526 on
     * every core. Bytes received: cores 0 and 3 one row, cores 1 and 2 two. */
    const uint64_t two_chips[4] = {256, 512, 512, 256};
    halo_timing(4, 2, 16, false, 526, two_chips);
    halo_timing(4, 2, 16, true, 526, two_chips);
    /* a 1x1 window of stride 1 on an even split needs no row of another core: no time */
    struct part_run r = run_start("program h\nparam xl: f32[2, 8]\nparam xe: f32[2, 8]\n"
                                  "xe = halo xl h=4 w=4 c=2 kh=1 kw=1 sh=1 sw=1 pt=0 pl=0 "
                                  "ho=4 wo=4 parts=2\n", 2, 1);
    go(&r);
    struct tpu_core_counters c;
    assert_int_equal(tpu_device_counters(r.dev, 0, &c), 0);
    assert_int_equal(c.busy[TPU_UNIT_ICI], 0);
    assert_int_equal(c.ici_bytes, 0);
    run_end(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_rules),
        cmocka_unit_test(test_load_parts_vs_replica),
        cmocka_unit_test(test_text_round_trip),
        cmocka_unit_test(test_halo_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
