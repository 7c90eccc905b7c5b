/* A long random cosimulation sweep of the Verilog matrix unit against the C model, and the
 * speed of each on the same work.
 *
 * Thousands of random tile sequences (1..6 tiles, 1..3R rows each, every kind of bf16 value:
 * moderate, any bit pattern, edge cases, near underflow, near overflow; then an int8 sweep)
 * run on the Verilated 8x8 array; every output must equal tpu_mxu_tile_bf16/int8 and
 * tpu_gemm_bf16 bit for bit, and every cycle count tpu_mxu_schedule(). Any mismatch is
 * printed (tile, row, column, both bit patterns) and the program exits 1.
 *
 * Then the rates, all measured in this run on the same tiles: the RTL's simulation rate in
 * PE-cycles per second (simulated cycles x R x C per wall second), and the C model's on the
 * same work (the same simulated cycles covered per wall second) for the per-tile definition
 * (sim/mxu/mxu_tile.c) and the fast GEMM (tpu_gemm_bf16, one thread, one call per tile), with the
 * ratio of each to the RTL. Usage: bench_cosim [sequences [seed]] (default 20000, 1). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mxu_rtl.h"
#include "tpusim/mxu.h"
#include "../tests/xorshift.h"

#define R 8u
#define C 8u
#define MAX_TILES 6

static const uint16_t edges[] = {0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x0080,
                                 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81,
                                 0x7F00, 0x1F80, 0x3F81, 0x3FFF};

static uint16_t rnd_bf16_bits(struct rng *r, unsigned kind)
{
    unsigned sign = rnd_below(r, 2) << 15, frac = rnd_below(r, 128);
    switch (kind) {
    case 0: return (uint16_t)(sign | ((121u + rnd_below(r, 13)) << 7) | frac);
    case 1: return (uint16_t)rnd(r);
    case 2: return rnd_below(r, 2) ? edges[rnd_below(r, sizeof edges / sizeof edges[0])]
                                   : (uint16_t)(sign | ((121u + rnd_below(r, 13)) << 7) | frac);
    case 3: return (uint16_t)(sign | ((49u + rnd_below(r, 17)) << 7) | frac);
    default: return (uint16_t)(sign | ((183u + rnd_below(r, 17)) << 7) | frac);
    }
}

/* One sequence of tiles, both formats' buffers (only one is used). */
struct seq {
    size_t n_tiles;
    uint64_t m[MAX_TILES];
    tpu_bf16 *w[MAX_TILES], *a[MAX_TILES];
    int8_t *w8[MAX_TILES], *a8[MAX_TILES];
    float *y_rtl[MAX_TILES], *y_tile[MAX_TILES], *y_gemm[MAX_TILES];
    int32_t *i_rtl[MAX_TILES], *i_tile[MAX_TILES];
    uint64_t rtl_cycles;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_cosim: out of memory\n");
        exit(2);
    }
    return p;
}

static void seq_make(struct seq *s, struct rng *r, bool int8)
{
    memset(s, 0, sizeof *s);
    s->n_tiles = 1 + rnd_below(r, MAX_TILES);
    for (size_t t = 0; t < s->n_tiles; t++) {
        const uint64_t m = 1 + rnd_below(r, 3 * R);
        const unsigned kw = rnd_below(r, 5), ka = rnd_below(r, 5);
        const uint32_t k_used = 1 + rnd_below(r, R), n_used = 1 + rnd_below(r, C);
        s->m[t] = m;
        if (!int8) {
            s->w[t] = xmalloc(R * C * sizeof(tpu_bf16));
            s->a[t] = xmalloc(m * R * sizeof(tpu_bf16));
            s->y_rtl[t] = xmalloc(m * C * sizeof(float));
            s->y_tile[t] = xmalloc(m * C * sizeof(float));
            s->y_gemm[t] = xmalloc(m * C * sizeof(float));
            for (uint32_t i = 0; i < R; i++)
                for (uint32_t j = 0; j < C; j++)
                    s->w[t][i * C + j].bits =
                        i < k_used && j < n_used ? rnd_bf16_bits(r, kw) : 0;
            for (uint64_t row = 0; row < m; row++)
                for (uint32_t i = 0; i < R; i++)
                    s->a[t][row * R + i].bits = i < k_used ? rnd_bf16_bits(r, ka) : 0;
        } else {
            s->w8[t] = xmalloc(R * C);
            s->a8[t] = xmalloc(m * R);
            s->i_rtl[t] = xmalloc(m * C * sizeof(int32_t));
            s->i_tile[t] = xmalloc(m * C * sizeof(int32_t));
            for (uint32_t k = 0; k < R * C; k++)
                s->w8[t][k] = (int8_t)(kw == 2 ? (rnd_below(r, 2) ? -128 : 127) : (int)rnd(r));
            for (uint64_t k = 0; k < m * R; k++)
                s->a8[t][k] = (int8_t)(ka == 2 ? (rnd_below(r, 2) ? -128 : 127) : (int)rnd(r));
        }
    }
}

static void seq_free(struct seq *s)
{
    for (size_t t = 0; t < MAX_TILES; t++) {
        free(s->w[t]);
        free(s->a[t]);
        free(s->w8[t]);
        free(s->a8[t]);
        free(s->y_rtl[t]);
        free(s->y_tile[t]);
        free(s->y_gemm[t]);
        free(s->i_rtl[t]);
        free(s->i_tile[t]);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mismatches;

static void compare(const char *against, size_t q, size_t t, uint64_t row, uint32_t j,
                    uint32_t got, uint32_t want)
{
    if (got != want && mismatches++ < 20)
        printf("MISMATCH vs %s: sequence %zu tile %zu row %" PRIu64 " column %u: RTL 0x%08x, "
               "%s 0x%08x\n",
               against, q, t, row, j, got, against, want);
}

int main(int argc, char **argv)
{
    const long n_seq = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    struct rng r = {argc > 2 ? strtoull(argv[2], NULL, 10) : 1};
    if (n_seq < 1 || r.s == 0) {
        fprintf(stderr, "bench_cosim: error: usage: bench_cosim [sequences >= 1 [seed != 0]]\n");
        return 2;
    }
    struct tpu_mxu_rtl *rtl = NULL;
    struct tpu_diag d = {0};
    if (tpu_mxu_rtl_create(R, C, &rtl, &d) != 0) {
        fprintf(stderr, "bench_cosim: error: %s\n", d.msg);
        return 2;
    }

    for (int pass = 0; pass < 2; pass++) {
        const bool int8 = pass == 1;
        const size_t n = (size_t)(int8 ? (n_seq + 3) / 4 : n_seq);
        struct seq *seqs = xmalloc(n * sizeof *seqs);
        uint64_t tiles = 0, rows = 0, cycles = 0, cycle_bad = 0;
        for (size_t q = 0; q < n; q++) {
            seq_make(&seqs[q], &r, int8);
            tiles += seqs[q].n_tiles;
            for (size_t t = 0; t < seqs[q].n_tiles; t++)
                rows += seqs[q].m[t];
            cycles += tpu_mxu_schedule(R, C, seqs[q].m, seqs[q].n_tiles, NULL, NULL);
        }

        /* the RTL */
        double t0 = now_s();
        for (size_t q = 0; q < n; q++) {
            struct seq *s = &seqs[q];
            int rc = int8 ? tpu_mxu_rtl_run_int8(rtl, s->n_tiles, (const int8_t *const *)s->w8,
                                                 (const int8_t *const *)s->a8, s->m, s->i_rtl,
                                                 &s->rtl_cycles, &d)
                          : tpu_mxu_rtl_run_bf16(rtl, s->n_tiles,
                                                 (const tpu_bf16 *const *)s->w,
                                                 (const tpu_bf16 *const *)s->a, s->m, s->y_rtl,
                                                 &s->rtl_cycles, &d);
            if (rc != 0) {
                fprintf(stderr, "bench_cosim: error: sequence %zu: %s\n", q, d.msg);
                return 1;
            }
        }
        const double t_rtl = now_s() - t0;

        /* the per-tile definition */
        t0 = now_s();
        for (size_t q = 0; q < n; q++)
            for (size_t t = 0; t < seqs[q].n_tiles; t++) {
                if (int8)
                    tpu_mxu_tile_int8(R, C, seqs[q].w8[t], seqs[q].a8[t], seqs[q].m[t],
                                      seqs[q].i_tile[t]);
                else
                    tpu_mxu_tile_bf16(R, C, seqs[q].w[t], seqs[q].a[t], seqs[q].m[t],
                                      seqs[q].y_tile[t]);
            }
        const double t_tile = now_s() - t0;

        /* the fast GEMM, one call per tile: Y[M][C] = A[M][R] * W[R][C] */
        double t_gemm = 0;
        if (!int8) {
            t0 = now_s();
            for (size_t q = 0; q < n; q++)
                for (size_t t = 0; t < seqs[q].n_tiles; t++)
                    if (tpu_gemm_bf16(seqs[q].a[t], seqs[q].w[t], seqs[q].y_gemm[t],
                                      seqs[q].m[t], R, C, R, false, 1) != 0) {
                        fprintf(stderr, "bench_cosim: error: tpu_gemm_bf16 failed\n");
                        return 1;
                    }
            t_gemm = now_s() - t0;
        }

        /* every bit and every cycle count */
        for (size_t q = 0; q < n; q++) {
            struct seq *s = &seqs[q];
            uint64_t want = tpu_mxu_schedule(R, C, s->m, s->n_tiles, NULL, NULL);
            if (s->rtl_cycles != want && cycle_bad++ < 20)
                printf("MISMATCH: sequence %zu: RTL %" PRIu64 " cycles, tpu_mxu_schedule %" PRIu64
                       "\n", q, s->rtl_cycles, want);
            for (size_t t = 0; t < s->n_tiles; t++)
                for (uint64_t row = 0; row < s->m[t]; row++)
                    for (uint32_t j = 0; j < C; j++) {
                        const size_t k = row * C + j;
                        if (int8) {
                            compare("tpu_mxu_tile_int8", q, t, row, j, (uint32_t)s->i_rtl[t][k],
                                    (uint32_t)s->i_tile[t][k]);
                        } else {
                            compare("tpu_mxu_tile_bf16", q, t, row, j,
                                    tpu_f32_bits(s->y_rtl[t][k]), tpu_f32_bits(s->y_tile[t][k]));
                            compare("tpu_gemm_bf16", q, t, row, j, tpu_f32_bits(s->y_rtl[t][k]),
                                    tpu_f32_bits(s->y_gemm[t][k]));
                        }
                    }
        }
        mismatches += cycle_bad;

        const double pe_cycles = (double)cycles * R * C;
        printf("%s sweep on the %ux%u array: %zu sequences, %" PRIu64 " tiles, %" PRIu64
               " rows, %" PRIu64 " simulated cycles (%.3g PE-cycles, %.3g MACs)\n",
               int8 ? "int8" : "bf16", R, C, n, tiles, rows, cycles, pe_cycles,
               (double)rows * R * C);
        printf("  mismatches so far: %" PRIu64 " (values and cycle counts)\n", mismatches);
        printf("  %-34s %8.3f s  %10.3g PE-cycles/s\n", "RTL (Verilator, tpu_mxu_rtl_run)",
               t_rtl, pe_cycles / t_rtl);
        printf("  %-34s %8.3f s  %10.3g PE-cycles/s  %8.0fx the RTL\n",
               int8 ? "C model (tpu_mxu_tile_int8)" : "C model (tpu_mxu_tile_bf16)", t_tile,
               pe_cycles / t_tile, t_rtl / t_tile);
        if (!int8)
            printf("  %-34s %8.3f s  %10.3g PE-cycles/s  %8.0fx the RTL\n",
                   "C GEMM (tpu_gemm_bf16, 1 thread)", t_gemm, pe_cycles / t_gemm,
                   t_rtl / t_gemm);
        for (size_t q = 0; q < n; q++)
            seq_free(&seqs[q]);
        free(seqs);
    }
    tpu_mxu_rtl_destroy(rtl);
    printf("%s\n", mismatches ? "FAILED: the RTL and the C model disagree"
                              : "RTL and C model agree on every value and every cycle count");
    return mismatches ? 1 : 0;
}
