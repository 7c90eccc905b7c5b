/* Speed of the functional GEMM kernels (sim/kernels/) beside OpenBLAS sgemm on the same
 * shapes, measured in the same run.
 *
 * For each shape M x K x N it times tpu_gemm_bf16 (tile_rows 128) with 1 and 2 threads,
 * cblas_sgemm with 1 thread on the same values (as fp32), the bf16 multiply + add kernel
 * forced on the same data (the kernel used where FMA would not be exact), int8 and the
 * 3-pass fp32 GEMM. Each figure is the best of several runs after a warm-up. It prints
 * GFLOP/s (2 M K N per run), the ratio of bf16 (1 thread) to sgemm (1 thread) with its
 * target of at least 0.5, and the 2-thread speedup. A last, small shape uses data whose
 * products are subnormal, where both libraries run at the speed of the CPU's microcode
 * assists. Usage: bench_gemm [seconds per measurement, default 0.5]. */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tpusim/mxu.h"
#include "kernels/gemm_int.h"

enum kind { K_BF16, K_BF16_PLAIN, K_BF16_TINY, K_INT8, K_F32_3PASS, K_SGEMM, K_SGEMM_TINY };

struct problem {
    size_t m, k, n;
    tpu_bf16 *a16, *b16, *a16_tiny, *b16_tiny;
    int8_t *a8, *b8;
    float *a32, *b32, *a32_tiny, *b32_tiny, *y;
    int32_t *y32;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One run; returns its wall time in seconds, or a negative value on error. */
static double run_once(const struct problem *p, enum kind kind, unsigned threads)
{
    double t0 = now_s();
    int rc = 0;
    switch (kind) {
    case K_BF16:
        rc = tpu_gemm_bf16(p->a16, p->b16, p->y, p->m, p->k, p->n, 128, false, threads);
        break;
    case K_BF16_PLAIN: {
        struct tpu__gemm_opts o = {TPU__GEMM_ISA_AUTO, TPU__GEMM_FMA_NEVER, 0};
        rc = tpu__gemm_bf16_impl(p->a16, p->b16, p->y, p->m, p->k, p->n, 128, false, threads,
                                 &o, NULL);
        break;
    }
    case K_BF16_TINY:
        rc = tpu_gemm_bf16(p->a16_tiny, p->b16_tiny, p->y, p->m, p->k, p->n, 128, false,
                           threads);
        break;
    case K_INT8:
        rc = tpu_gemm_int8(p->a8, p->b8, p->y32, p->m, p->k, p->n, 128, false, threads);
        break;
    case K_F32_3PASS:
        rc = tpu_gemm_f32(p->a32, p->b32, p->y, p->m, p->k, p->n, 128, 3, threads);
        break;
    case K_SGEMM:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->m, (int)p->n, (int)p->k,
                    1.0f, p->a32, (int)p->k, p->b32, (int)p->n, 0.0f, p->y, (int)p->n);
        break;
    case K_SGEMM_TINY:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->m, (int)p->n, (int)p->k,
                    1.0f, p->a32_tiny, (int)p->k, p->b32_tiny, (int)p->n, 0.0f, p->y,
                    (int)p->n);
        break;
    }
    double t = now_s() - t0;
    return rc == 0 ? t : -1.0;
}

/* Best GFLOP/s over runs lasting at least `budget_s` in total (at least 3 runs). */
static double gflops(const struct problem *p, enum kind kind, unsigned threads, double budget_s)
{
    double flops = 2.0 * (double)p->m * (double)p->k * (double)p->n;
    if (run_once(p, kind, threads) < 0) /* warm-up */
        return -1;
    double best = INFINITY, spent = 0;
    for (int runs = 0; runs < 3 || spent < budget_s; runs++) {
        double t = run_once(p, kind, threads);
        if (t < 0)
            return -1;
        spent += t;
        best = t < best ? t : best;
    }
    return flops / best * 1e-9;
}

/* tiny: only the subnormal-product comparison */
static int bench_shape(size_t m, size_t k, size_t n, double budget_s, bool tiny)
{
    struct problem p = {.m = m, .k = k, .n = n};
    p.a16 = malloc(m * k * sizeof *p.a16);
    p.b16 = malloc(k * n * sizeof *p.b16);
    p.a16_tiny = malloc(m * k * sizeof *p.a16_tiny);
    p.b16_tiny = malloc(k * n * sizeof *p.b16_tiny);
    p.a8 = malloc(m * k);
    p.b8 = malloc(k * n);
    p.a32 = malloc(m * k * sizeof *p.a32);
    p.b32 = malloc(k * n * sizeof *p.b32);
    p.a32_tiny = malloc(m * k * sizeof *p.a32_tiny);
    p.b32_tiny = malloc(k * n * sizeof *p.b32_tiny);
    p.y = malloc(m * n * sizeof *p.y);
    p.y32 = malloc(m * n * sizeof *p.y32);
    int rc = 1;
    if (!p.a16 || !p.b16 || !p.a16_tiny || !p.b16_tiny || !p.a8 || !p.b8 || !p.a32 || !p.b32 ||
        !p.a32_tiny || !p.b32_tiny || !p.y || !p.y32) {
        fprintf(stderr, "bench_gemm: error: out of memory for a %zux%zux%zu GEMM\n", m, k, n);
        goto out;
    }
    uint64_t s = 0x243F6A8885A308D3ull;
    /* values in [-1, 1) rounded to bf16; the fp32 operands of sgemm are the same values */
    for (size_t i = 0; i < m * k; i++) {
        p.a16[i] = tpu_bf16_from_f32((float)((double)(next(&s) >> 11) * 0x1p-52 - 1.0));
        p.a32[i] = tpu_bf16_to_f32(p.a16[i]);
        p.a16_tiny[i] = tpu_bf16_from_f32(p.a32[i] * 0x1p-70f);
        p.a32_tiny[i] = tpu_bf16_to_f32(p.a16_tiny[i]);
        p.a8[i] = (int8_t)(next(&s) >> 56);
    }
    for (size_t i = 0; i < k * n; i++) {
        p.b16[i] = tpu_bf16_from_f32((float)((double)(next(&s) >> 11) * 0x1p-52 - 1.0));
        p.b32[i] = tpu_bf16_to_f32(p.b16[i]);
        p.b16_tiny[i] = tpu_bf16_from_f32(p.b32[i] * 0x1p-70f);
        p.b32_tiny[i] = tpu_bf16_to_f32(p.b16_tiny[i]);
        p.b8[i] = (int8_t)(next(&s) >> 56);
    }

    printf("shape M x K x N = %zu x %zu x %zu (tile_rows 128)%s\n", m, k, n,
           tiny ? ", operands scaled by 2^-70: subnormal products" : "");
    if (tiny) {
        double st = gflops(&p, K_SGEMM_TINY, 1, budget_s);
        double bt = gflops(&p, K_BF16_TINY, 1, budget_s);
        if (st < 0 || bt < 0)
            goto failed;
        printf("  openblas sgemm, 1 thread        %8.2f GFLOP/s\n", st);
        printf("  tpu_gemm_bf16, 1 thread         %8.2f GFLOP/s (multiply + add kernel)\n", bt);
        rc = 0;
        goto out;
    }
    double sg = gflops(&p, K_SGEMM, 1, budget_s);
    double b1 = gflops(&p, K_BF16, 1, budget_s);
    double b2 = gflops(&p, K_BF16, 2, budget_s);
    double pl = gflops(&p, K_BF16_PLAIN, 1, budget_s);
    double i1 = gflops(&p, K_INT8, 1, budget_s);
    double f3 = gflops(&p, K_F32_3PASS, 1, budget_s);
    if (sg < 0 || b1 < 0 || b2 < 0 || pl < 0 || i1 < 0 || f3 < 0)
        goto failed;
    printf("  openblas sgemm, 1 thread        %8.1f GFLOP/s\n", sg);
    printf("  tpu_gemm_bf16, 1 thread         %8.1f GFLOP/s (FMA kernel)\n", b1);
    printf("  tpu_gemm_bf16, 2 threads        %8.1f GFLOP/s (FMA kernel)\n", b2);
    printf("  tpu_gemm_bf16, 1 thread         %8.1f GFLOP/s (multiply + add kernel forced)\n",
           pl);
    printf("  tpu_gemm_int8, 1 thread         %8.1f GOP/s\n", i1);
    printf("  tpu_gemm_f32 3 passes, 1 thread %8.1f GFLOP/s (fp32 FLOPs)\n", f3);
    printf("  ratio bf16/sgemm(1 thread) = %.2f (target >= 0.5)\n", b1 / sg);
    printf("  bf16 speedup 2 threads / 1 thread = %.2f\n", b2 / b1);
    rc = 0;
    goto out;
failed:
    fprintf(stderr, "bench_gemm: error: a GEMM call failed on %zux%zux%zu\n", m, k, n);
out:
    free(p.a32_tiny);
    free(p.b32_tiny);
    free(p.a16);
    free(p.b16);
    free(p.a16_tiny);
    free(p.b16_tiny);
    free(p.a8);
    free(p.b8);
    free(p.a32);
    free(p.b32);
    free(p.y);
    free(p.y32);
    return rc;
}

int main(int argc, char **argv)
{
    double budget_s = argc > 1 ? atof(argv[1]) : 0.5;
    if (!(budget_s >= 0)) {
        fprintf(stderr, "bench_gemm: error: the time per measurement must be a number of "
                        "seconds >= 0, not '%s'\n",
                argv[1]);
        return 2;
    }
    openblas_set_num_threads(1);
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS %s, core %s, OPENBLAS_CORETYPE=%s\n", openblas_get_config(),
           openblas_get_corename(), core ? core : "(unset)");
    int rc = bench_shape(1024, 1024, 1024, budget_s, false);
    if (rc == 0)
        rc = bench_shape(1024, 784, 1024, budget_s, false);
    if (rc == 0)
        rc = bench_shape(128, 128, 128, budget_s, true);
    return rc;
}
