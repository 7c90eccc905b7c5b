/* The random operands of the tests and benchmarks: xorshift64* (Vigna), so a seed gives the
 * same stream on every machine and a failing case can be rerun. Each test owns its state
 * (`struct rng r = {seed}`, seed not 0); there is no global generator. This is not
 * common/rng.h (SplitMix64), which makes the host's operands, initial weights and shuffles. */
#ifndef TPUSIM_TESTS_XORSHIFT_H
#define TPUSIM_TESTS_XORSHIFT_H

#include <stdint.h>

struct rng {
    uint64_t s;
};

static inline uint64_t rnd(struct rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* In [0, n), from the high bits (n much smaller than 2^31). */
static inline unsigned rnd_below(struct rng *r, unsigned n)
{
    return (unsigned)((rnd(r) >> 33) % n);
}

/* Uniform in [lo, hi), from the high 24 bits. */
static inline float rnd_f32(struct rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rnd(r) >> 40) / (double)(1ull << 24));
}

#endif
