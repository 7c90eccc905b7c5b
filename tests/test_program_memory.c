/* What a device program takes of a core's HBM (tpu_program_memory, program.h) and the
 * verifier's rule M1 built on it: params plus the peak of live temps, temps whose lives do
 * not overlap sharing memory. The lives are checked on small programs worked out by hand (a
 * temp carried into the loop lives to its end, accumulate keeps a matmul's output live, an
 * unused temp takes nothing); then on the tiny chip (32 MiB of HBM per core) a program
 * whose temps sum past HBM but whose peak fits exactly is accepted by the verifier and the
 * device, which reports the same figure, and one byte more is refused with a message that
 * gives both parts of the need and the op at the peak. */
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

static struct tpu_program *parse(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    if (tpu_program_verify(p, NULL, &d) != 0)
        fail_msg("verify: %s", d.msg);
    return p;
}

static struct tpu_chip_config tiny(void)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tiny", &cfg, &d) != 0)
        fail_msg("%s", d.msg);
    return cfg;
}

static void check_memory(const char *text, uint64_t params, uint64_t temps, uint64_t peak,
                          size_t peak_op)
{
    struct tpu_program *p = parse(text);
    struct tpu_program_memory m;
    memset(&m, 0xa5, sizeof m);
    assert_int_equal(tpu_program_memory(p, &m), 0);
    assert_int_equal(m.param_bytes, params);
    assert_int_equal(m.temp_bytes, temps);
    assert_int_equal(m.temp_peak_bytes, peak);
    assert_int_equal(m.peak_op, peak_op);
    assert_int_equal(m.hbm_bytes, params + peak);
    tpu_program_destroy(&p);
}

/* ---- lives ----------------------------------------------------------------------------------- */

static void test_temps_that_do_not_overlap_share_memory(void **state)
{
    (void)state;
    /* three 4 KiB temps one after another: one is live at a time */
    check_memory("program seq\nparam w: f32[4, 4]\n"
                  "temp a: f32[32, 32]\ntemp b: f32[32, 32]\ntemp c: f32[32, 32]\n"
                  "a = infeed\noutfeed a\nb = infeed\noutfeed b\nc = infeed\noutfeed c\n",
                  64, 3 * 4096, 4096, 0);
    /* b = relu a needs both at once: the peak is there, not at c */
    check_memory("program pair\n"
                  "temp a: f32[32, 32]\ntemp b: f32[32, 32]\ntemp c: f32[32, 64]\n"
                  "a = infeed\nb = relu a\noutfeed b\nc = infeed\noutfeed c\n",
                  0, 4096 + 4096 + 8192, 8192, 1);
    /* a program without temps, and one without ops */
    check_memory("program none\nparam w: f32[2, 2]\nw = relu w\n", 16, 0, 0, SIZE_MAX);
    check_memory("program empty\n", 0, 0, 0, SIZE_MAX);
}

static void test_a_temp_carried_into_the_loop_lives_to_its_end(void **state)
{
    (void)state;
    /* a is written before the loop and read at op 3 by every iteration, so it lives to the
     * loop_end (op 7): it is live with e (ops 5-6), and the peak is a + e at op 5 (without
     * the stretch it would be e alone, 2048) */
    check_memory("program carried\nvar n\n"
                  "temp a: f32[1, 64]\ntemp b: f32[1, 64]\ntemp c: f32[1, 64]\n"
                  "temp e: f32[8, 64]\n"
                  "a = infeed\n"
                  "loop n {\n"
                  "  b = infeed\n"
                  "  c = add b, a\n"
                  "  outfeed c\n"
                  "  e = infeed\n"
                  "  outfeed e\n"
                  "}\n",
                  0, 3 * 256 + 2048, 256 + 2048, 5);
    /* a body temp lives within its iteration only: b and e never meet */
    check_memory("program body\nvar n\n"
                  "temp b: f32[8, 64]\ntemp e: f32[8, 64]\n"
                  "loop n {\n"
                  "  b = infeed\n"
                  "  outfeed b\n"
                  "  e = infeed\n"
                  "  outfeed e\n"
                  "}\n",
                  0, 2 * 2048, 2048, 1);
}

static void test_accumulate_keeps_the_output_live(void **state)
{
    (void)state;
    /* y is written at op 0 and accumulated into at op 3: it is live while t is (ops 1-2) */
    check_memory("program acc\nparam x: f32[16, 8]\nparam w: f32[8, 8]\n"
                  "temp y: f32[16, 8]\ntemp t: f32[32, 32]\n"
                  "y = matmul x, w\n"
                  "t = infeed\n"
                  "outfeed t\n"
                  "y = matmul x, w accumulate\n",
                  512 + 256, 512 + 4096, 512 + 4096, 1);
}

static void test_an_unused_temp_takes_nothing(void **state)
{
    (void)state;
    check_memory("program unused\ntemp big: f32[1024, 1024]\ntemp a: f32[1, 4]\n"
                  "a = infeed\noutfeed a\n",
                  0, 4u << 20 | 16, 16, 0);
}

/* ---- the rule M1 on the tiny chip (32 MiB per core) ------------------------------------------ */

/* A 16 MiB param and three 16 MiB temps one after another (64 MiB in all), plus `extra`. */
static struct tpu_program *fits_exactly(const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "program peak\nparam w: f32[2048, 2048]\n%s"
             "temp a: f32[2048, 2048]\ntemp b: f32[2048, 2048]\ntemp c: f32[2048, 2048]\n"
             "a = infeed\noutfeed a\nb = infeed\noutfeed b\nc = infeed\noutfeed c\n",
             extra);
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

static struct tpu_device *open_tiny(void)
{
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.timing_only = true; /* no values: the 16 MiB buffers are never allocated */
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    if (tpu_device_open(&s, &dev, &d) != 0)
        fail_msg("open: %s", d.msg);
    return dev;
}

static void test_temps_past_hbm_with_a_peak_that_fits_are_accepted(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = tiny();
    const uint64_t limit = cfg.hbm_bytes / cfg.cores_per_chip;
    assert_int_equal(limit, 32u << 20);
    struct tpu_program *p = fits_exactly("");
    struct tpu_program_memory m;
    assert_int_equal(tpu_program_memory(p, &m), 0);
    assert_true(m.param_bytes + m.temp_bytes > limit); /* summing every buffer would refuse */
    assert_int_equal(m.hbm_bytes, limit);
    struct tpu_diag d = {0};
    if (tpu_program_verify(p, &cfg, &d) != 0)
        fail_msg("verify: %s", d.msg);
    /* the device takes it and reports the verifier's figure */
    struct tpu_device *dev = open_tiny();
    if (tpu_device_load(dev, p, &d) != 0)
        fail_msg("load: %s", d.msg);
    struct tpu_program_memory dm;
    assert_int_equal(tpu_device_memory(dev, &dm), 0);
    assert_memory_equal(&dm, &m, sizeof m);
    assert_int_equal(dm.hbm_bytes, limit);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static const char *const one_byte_over =
    "program 'peak' needs 32.0 MiB (33554433 bytes) of HBM: 16.0 MiB (16777217 bytes) of params "
    "and 16.0 MiB (16777216 bytes) of temps live at once at op 0 'a = infeed' (all temps "
    "together are 48.0 MiB; temps whose lives do not overlap share memory), but one core of "
    "chip 'tiny' has 32.0 MiB (33554432 bytes: hbm_bytes 67108864 / cores_per_chip 2); the "
    "largest of them are 'w' f32[2048, 2048] 16.0 MiB, 'a' f32[2048, 2048] 16.0 MiB, 'one' "
    "int8[1, 1] 1 B; shrink them (smaller batch or layers) or split the model over more cores";

static void test_a_peak_one_byte_over_is_refused(void **state)
{
    (void)state;
    struct tpu_chip_config cfg = tiny();
    struct tpu_program *p = fits_exactly("param one: int8[1, 1]\n");
    struct tpu_diag d = {0};
    assert_int_equal(tpu_program_verify(p, &cfg, &d), TPU_ERANGE);
    assert_string_equal(d.msg, one_byte_over);
    /* the device refuses it with the same sentence and keeps no program */
    struct tpu_device *dev = open_tiny();
    struct tpu_diag dd = {0};
    assert_int_equal(tpu_device_load(dev, p, &dd), TPU_ERANGE);
    assert_string_equal(dd.msg, one_byte_over);
    struct tpu_program_memory m;
    assert_int_equal(tpu_device_memory(dev, &m), TPU_EINVAL);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_overlapping_temps_are_refused_at_their_peak(void **state)
{
    (void)state;
    /* two 20 MiB temps live at once at op 1: 40 MiB of temps, though each alone fits */
    struct tpu_chip_config cfg = tiny();
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_program_parse("program two\n"
                                       "temp a: f32[2560, 2048]\ntemp b: f32[2560, 2048]\n"
                                       "a = infeed\nb = infeed\noutfeed a\noutfeed b\n",
                                       "test", &p, &d),
                     0);
    assert_int_equal(tpu_program_verify(p, &cfg, &d), TPU_ERANGE);
    assert_string_equal(d.msg,
                        "program 'two' needs 40.0 MiB (41943040 bytes) of HBM: 0 B (0 bytes) of "
                        "params and 40.0 MiB (41943040 bytes) of temps live at once at op 1 "
                        "'b = infeed' (all temps together are 40.0 MiB; temps whose lives do not "
                        "overlap share memory), but one core of chip 'tiny' has 32.0 MiB "
                        "(33554432 bytes: hbm_bytes 67108864 / cores_per_chip 2); the largest of "
                        "them are 'a' f32[2560, 2048] 20.0 MiB, 'b' f32[2560, 2048] 20.0 MiB; "
                        "shrink them (smaller batch or layers) or split the model over more "
                        "cores");
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_temps_that_do_not_overlap_share_memory),
        cmocka_unit_test(test_a_temp_carried_into_the_loop_lives_to_its_end),
        cmocka_unit_test(test_accumulate_keeps_the_output_live),
        cmocka_unit_test(test_an_unused_temp_takes_nothing),
        cmocka_unit_test(test_temps_past_hbm_with_a_peak_that_fits_are_accepted),
        cmocka_unit_test(test_a_peak_one_byte_over_is_refused),
        cmocka_unit_test(test_overlapping_temps_are_refused_at_their_peak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
