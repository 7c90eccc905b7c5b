/* A small deterministic random generator (SplitMix64) for operands and shuffles: the same
 * seed gives the same stream on every machine. Each user owns its state; there is no global
 * generator. */
#ifndef TPUSIM_HOST_RNG_H
#define TPUSIM_HOST_RNG_H

#include <stdint.h>

struct tpu__rng {
    uint64_t state;
};

static inline void tpu__rng_seed(struct tpu__rng *r, uint64_t seed)
{
    r->state = seed;
}

static inline uint64_t tpu__rng_next(struct tpu__rng *r)
{
    uint64_t z = (r->state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float tpu__rng_uniform(struct tpu__rng *r)
{
    return (float)(tpu__rng_next(r) >> 40) * 0x1p-24f;
}

#endif
