/* expect_same: got equals want bit for bit, element by element; on failure prints the
 * count and the first mismatches. Include after <cmocka.h>. */
#ifndef TPUSIM_TESTS_EXPECT_SAME_BITS_H
#define TPUSIM_TESTS_EXPECT_SAME_BITS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static inline void expect_same(const float *got, const float *want, size_t count,
                               const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a != b && bad++ < 5)
            printf("  %s[%zu]: got %.9g want %.9g\n", what, i, (double)got[i],
                   (double)want[i]);
    }
    if (bad)
        fail_msg("%s: %zu of %zu elements differ", what, bad, count);
}

#endif
