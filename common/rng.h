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

/* SplitMix64's step and output function on x: mix(x) = f(x + 0x9e3779b97f4a7c15) with
 *     z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
 *     f = z ^ (z >> 31)                                                 (uint64, wrapping)
 * The generator below returns mix(state) and advances state by the constant; the dropout
 * masks (sim/ops/ops_train_aux.c) and the initial weights' seeds (host/models/) hash their
 * keys with it. This is the one definition: its values are part of saved results. */
static inline uint64_t tpu__mix64(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static inline uint64_t tpu__rng_next(struct tpu__rng *r)
{
    const uint64_t z = tpu__mix64(r->state);
    r->state += UINT64_C(0x9E3779B97F4A7C15);
    return z;
}

/* Uniform in [0, 1) with 24 random bits (exact in float). */
static inline float tpu__rng_uniform(struct tpu__rng *r)
{
    return (float)(tpu__rng_next(r) >> 40) * 0x1p-24f;
}

#endif
