/* bf16 conversions: round to nearest even on every boundary, and the special values. The
 * reference here rounds with integer arithmetic written out case by case, independently of
 * the bit trick in bf16.h. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "tpusim/bf16.h"

static uint16_t b(float f)
{
    return tpu_bf16_from_f32(f).bits;
}

static uint16_t bu(uint32_t u)
{
    return tpu_bf16_from_f32(tpu_f32_from_bits(u)).bits;
}

/* Reference: keep the top 16 bits, then decide by the dropped 16 bits. */
static uint16_t ref_round(uint32_t u)
{
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu))
        return (uint16_t)((u >> 16) | 0x40u);
    uint32_t hi = u >> 16, lo = u & 0xFFFFu;
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u)))
        hi += 1; /* carries into the exponent, up to Inf, as IEEE rounding does */
    return (uint16_t)hi;
}

static void test_exact_values(void **state)
{
    (void)state;
    assert_int_equal(b(1.0f), 0x3F80);
    assert_int_equal(b(-2.0f), 0xC000);
    assert_int_equal(b(0.0f), 0x0000);
    assert_int_equal(b(-0.0f), 0x8000);
    assert_int_equal(b(INFINITY), 0x7F80);
    assert_int_equal(b(-INFINITY), 0xFF80);
    tpu_bf16 x = {0x3FC0};
    assert_true(tpu_bf16_to_f32(x) == 1.5f);
}

static void test_ties_to_even(void **state)
{
    (void)state;
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even 1.0 */
    assert_int_equal(bu(0x3F808000u), 0x3F80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: ties to the even above */
    assert_int_equal(bu(0x3F818000u), 0x3F82);
    /* just above and below halfway */
    assert_int_equal(bu(0x3F808001u), 0x3F81);
    assert_int_equal(bu(0x3F807FFFu), 0x3F80);
    /* negative values mirror */
    assert_int_equal(bu(0xBF808001u), 0xBF81);
}

static void test_overflow_and_subnormals(void **state)
{
    (void)state;
    /* the largest fp32 rounds up past the largest bf16 (0x7F7F) to Inf */
    assert_int_equal(bu(0x7F7FFFFFu), 0x7F80);
    assert_int_equal(bu(0xFF7FFFFFu), 0xFF80);
    /* just below the rounding point it stays finite */
    assert_int_equal(bu(0x7F7F7FFFu), 0x7F7F);
    /* subnormals round to bf16 subnormals, no flush */
    assert_int_equal(bu(0x00010000u), 0x0001);
    assert_int_equal(bu(0x00018000u), 0x0002); /* tie, odd below -> even above */
    assert_int_equal(bu(0x00000001u), 0x0000); /* the smallest fp32 subnormal -> +0 */
    assert_int_equal(bu(0x80000001u), 0x8000);
    /* the largest subnormal rounds up into the smallest normal */
    assert_int_equal(bu(0x007FFFFFu), 0x0080);
}

static void test_nan(void **state)
{
    (void)state;
    /* quiet NaN keeps sign and payload top */
    assert_int_equal(bu(0x7FC00000u), 0x7FC0);
    assert_int_equal(bu(0xFFC12345u), 0xFFC1);
    /* signalling NaN with payload only in the dropped bits stays NaN (made quiet), not Inf */
    assert_int_equal(bu(0x7F800001u), 0x7FC0);
    assert_true(isnan(tpu_bf16_to_f32((tpu_bf16){bu(0x7F800001u)})));
}

static void test_against_reference_everywhere(void **state)
{
    (void)state;
    /* every 16-bit top half with a spread of low halves, including all boundary cases */
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x1234};
    unsigned long mismatches = 0;
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
            uint32_t u = hi << 16 | lows[i];
            if (bu(u) != ref_round(u)) {
                if (mismatches++ < 5)
                    print_error("0x%08x: got 0x%04x want 0x%04x\n", u, bu(u), ref_round(u));
            }
        }
    assert_int_equal(mismatches, 0);
    /* widening is exact: every bf16 round-trips */
    for (uint32_t x = 0; x < 0x10000u; x++) {
        tpu_bf16 v = {(uint16_t)x};
        float f = tpu_bf16_to_f32(v);
        if (!isnan(f))
            assert_int_equal(b(f), x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_values),
        cmocka_unit_test(test_ties_to_even),
        cmocka_unit_test(test_overflow_and_subnormals),
        cmocka_unit_test(test_nan),
        cmocka_unit_test(test_against_reference_everywhere),
    };
    return cmocka_run_group_tests_name("bf16", tests, NULL, NULL);
}
