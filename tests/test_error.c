/* The error table: every code has a distinct name and a message, and diagnostics fill. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "tpusim/error.h"
#include "util.h"

static void test_names_and_messages(void **state)
{
    (void)state;
    assert_string_equal(tpu_err_name(TPU_OK), "TPU_OK");
    assert_string_equal(tpu_strerror(TPU_OK), "success");
    assert_string_equal(tpu_err_name(TPU_EINVAL), "TPU_EINVAL");
    assert_string_equal(tpu_err_name(TPU_ECONFIG), "TPU_ECONFIG");
    assert_string_equal(tpu_strerror(TPU_ENOMEM), "out of memory");
    assert_string_equal(tpu_err_name(-999), "TPU_E?");
    assert_string_equal(tpu_strerror(-999), "unknown error");
}

static void test_codes_distinct(void **state)
{
    (void)state;
    static const int codes[] = {
#define X(name, value, msg) value,
        TPU_ERROR_TABLE(X)
#undef X
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        assert_true(codes[i] < 0);
        assert_string_not_equal(tpu_strerror(codes[i]), "unknown error");
        for (size_t j = i + 1; j < n; j++)
            assert_int_not_equal(codes[i], codes[j]);
    }
}

static void test_diag(void **state)
{
    (void)state;
    struct tpu_diag d;
    tpu_diag_clear(&d);
    assert_int_equal(d.code, 0);
    assert_string_equal(d.msg, "");
    assert_int_equal(tpu__fail(&d, TPU_ERANGE, "value %d is too big; use at most %d", 9, 4),
                     TPU_ERANGE);
    assert_int_equal(d.code, TPU_ERANGE);
    assert_string_equal(d.msg, "value 9 is too big; use at most 4");
    assert_int_equal(tpu__fail(NULL, TPU_EIO, "ignored"), TPU_EIO); /* NULL diag is allowed */
    tpu_diag_clear(NULL);
    /* an overlong sentence is cut, never overrun */
    char big[2 * TPU_DIAG_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tpu__fail(&d, TPU_EINVAL, "%s", big);
    assert_int_equal(strlen(d.msg), TPU_DIAG_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_messages),
        cmocka_unit_test(test_codes_distinct),
        cmocka_unit_test(test_diag),
    };
    return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
