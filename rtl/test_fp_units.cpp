// Checks the matrix unit's fp32 arithmetic (mxu_bf16_mul.v, mxu_fp32_add.v) against the host's
// IEEE-754 binary32 arithmetic, value by value.
//
// The host (x86-64 SSE, or any IEEE machine without flush-to-zero) rounds to nearest even with
// gradual underflow, which is exactly the numerics of include/tpusim/mxu.h, so every result
// must agree bit for bit, except that the RTL gives the canonical NaN 0x7FC00000 where the
// host gives some NaN. The multiplier is checked for every bf16 a against a set of b covering
// every exponent (zeros, subnormals, normals, Inf, NaN); the adder on random operand pairs
// drawn to hit what adders get wrong: cancellation, exponent differences around the guard
// bits, subnormal results, overflow, ties, signed zeros, Inf and NaN.
//
// This is a test-only program, not part of the library. Usage: test_fp_units [scale [all]]
// (scale multiplies the number of random adder cases, default 1; "all" checks the multiplier
// on all 2^32 operand pairs, about a minute).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "verilated.h"

#include "Vmxu_fp32_add.h"
#include "Vmxu_bf16_mul.h"

namespace {

uint32_t f32_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float f32_from_bits(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

bool is_nan_bits(uint32_t u)
{
    return (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
}

// What the RTL must give for a host result: the host's bits, with NaN made canonical.
uint32_t expect_bits(float host)
{
    const uint32_t u = f32_bits(host);
    return is_nan_bits(u) ? 0x7FC00000u : u;
}

struct rng {
    uint64_t s;
    uint32_t next()
    {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return static_cast<uint32_t>(s >> 16);
    }
};

// Host multiply and add, kept apart so no compiler may fuse or reorder them.
__attribute__((noinline)) float host_mul(float a, float b)
{
    return a * b;
}

__attribute__((noinline)) float host_add(float a, float b)
{
    return a + b;
}

struct counts {
    uint64_t cases = 0, bad = 0;
};

int check_mul(counts &c, bool exhaustive)
{
    std::unique_ptr<VerilatedContext> ctx(new VerilatedContext);
    std::unique_ptr<Vmxu_bf16_mul> m(new Vmxu_bf16_mul(ctx.get(), "mul"));
    // b: every exponent with fractions 0, 1, 0x40, 0x7F and one more, both signs
    uint16_t bs[256 * 5 * 2];
    size_t nb = 0;
    rng r{0x9E3779B97F4A7C15ull};
    for (uint32_t e = 0; e < 256; e++) {
        const uint32_t fr[5] = {0, 1, 0x40, 0x7F, r.next() & 0x7Fu};
        for (uint32_t k = 0; k < 5; k++)
            for (uint32_t s = 0; s < 2; s++)
                bs[nb++] = static_cast<uint16_t>((s << 15) | (e << 7) | fr[k]);
    }
    if (exhaustive)
        nb = 65536;
    for (uint32_t a = 0; a < 65536; a++) {
        for (size_t k = 0; k < nb; k++) {
            const uint16_t b = exhaustive ? static_cast<uint16_t>(k) : bs[k];
            m->a = static_cast<uint16_t>(a);
            m->b = b;
            m->eval();
            const uint32_t got = m->p;
            const uint32_t want =
                expect_bits(host_mul(f32_from_bits(a << 16), f32_from_bits(uint32_t(b) << 16)));
            c.cases++;
            if (got != want && c.bad++ < 10)
                std::printf("mul: a = 0x%04x, b = 0x%04x: RTL 0x%08x, IEEE 0x%08x\n", a, b, got,
                            want);
        }
    }
    m->final();
    return 0;
}

// A random fp32 operand of a chosen kind.
uint32_t draw(rng &r, uint32_t kind)
{
    const uint32_t sign = (r.next() & 1u) << 31;
    switch (kind) {
    case 0: // any bit pattern
        return r.next() ^ (r.next() << 16);
    case 1: // normal, moderate exponent
        return sign | ((100u + r.next() % 56u) << 23) | (r.next() & 0x7FFFFFu);
    case 2: // subnormal or zero
        return sign | (r.next() % 4 == 0 ? 0u : ((r.next() ^ (r.next() << 16)) & 0x7FFFFFu));
    case 3: // near the bottom of the normal range
        return sign | ((1u + r.next() % 4u) << 23) | (r.next() & 0x7FFFFFu);
    case 4: // near the top
        return sign | ((250u + r.next() % 5u) << 23) | (r.next() & 0x7FFFFFu);
    case 5: { // special
        const uint32_t sp[6] = {0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x00000000u,
                                0x7F7FFFFFu, 0x00800000u};
        return sign | sp[r.next() % 6];
    }
    default: // few fraction bits set: ties and exact cancellations are likely
        return sign | ((120u + r.next() % 16u) << 23) | ((r.next() & 0x7u) << (r.next() % 21));
    }
}

int check_add(counts &c, uint64_t n)
{
    std::unique_ptr<VerilatedContext> ctx(new VerilatedContext);
    std::unique_ptr<Vmxu_fp32_add> m(new Vmxu_fp32_add(ctx.get(), "add"));
    rng r{0xD1B54A32D192ED03ull};
    for (uint64_t i = 0; i < n; i++) {
        uint32_t x = draw(r, r.next() % 7);
        uint32_t y;
        switch (r.next() % 4) {
        case 0: // y independent
            y = draw(r, r.next() % 7);
            break;
        case 1: { // exponent within 0..30 of x, either sign: alignment, guard and sticky bits
            const uint32_t ex = (x >> 23) & 0xFFu;
            const uint32_t d = r.next() % 31u;
            const uint32_t ey = ex > d ? ex - d : 0u;
            y = ((r.next() & 1u) << 31) | (ey << 23) | (r.next() & 0x7FFFFFu);
            if (ey == 0xFFu)
                y &= ~(0xFFu << 23);
            break;
        }
        case 2: // opposite sign, close magnitude: cancellation
            y = (x ^ 0x80000000u) + (r.next() % 9u) - 4u;
            break;
        default: // exact negation and zeros
            y = (r.next() & 1u) ? (x ^ 0x80000000u) : ((r.next() & 1u) << 31);
            break;
        }
        if (r.next() & 1u) {
            const uint32_t t = x;
            x = y;
            y = t;
        }
        m->x = x;
        m->y = y;
        m->eval();
        const uint32_t got = m->s;
        const uint32_t want = expect_bits(host_add(f32_from_bits(x), f32_from_bits(y)));
        c.cases++;
        if (got != want && c.bad++ < 10)
            std::printf("add: x = 0x%08x, y = 0x%08x: RTL 0x%08x, IEEE 0x%08x\n", x, y, got,
                        want);
    }
    m->final();
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    const long scale = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 1;
    if (scale < 1) {
        std::fprintf(stderr, "test_fp_units: error: scale must be a positive integer\n");
        return 2;
    }
    // The host must not flush subnormals, or it is no reference at all.
    if (host_mul(f32_from_bits(0x00800000u), 0.5f) == 0.0f) {
        std::fprintf(stderr, "test_fp_units: error: the host flushes subnormals to zero\n");
        return 2;
    }
    counts mul, add;
    check_mul(mul, argc > 2 && std::strcmp(argv[2], "all") == 0);
    check_add(add, 4000000ull * static_cast<uint64_t>(scale));
    std::printf("bf16 multiplier: %llu cases, %llu differ from IEEE\n",
                static_cast<unsigned long long>(mul.cases),
                static_cast<unsigned long long>(mul.bad));
    std::printf("fp32 adder:      %llu cases, %llu differ from IEEE\n",
                static_cast<unsigned long long>(add.cases),
                static_cast<unsigned long long>(add.bad));
    const int failed = (mul.bad != 0) + (add.bad != 0);
    std::printf("%d passed, %d failed\n", 2 - failed, failed);
    return failed ? 1 : 0;
}
