/* How long timing-only simulation takes on the host. The limit: a 4096^3 GEMM on
 * tpu-v4 in under 10 ms. The table shows that the cost follows the number of weight tiles an
 * MXU must schedule one by one (ragged M chunks), not the number of simulated cycles. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "tpusim/config.h"
#include "tpusim/gemm.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median-free and simple: the best of several batches, per call. */
static double time_call(const struct tpu_chip_config *cfg, const struct tpu_gemm_params *p,
                        struct tpu_gemm_timing *t)
{
    double best = 1e30;
    for (int batch = 0; batch < 5; batch++) {
        int reps = 0;
        double t0 = now_s(), el;
        do {
            if (tpu_gemm_time(cfg, p, t, NULL) != 0)
                return -1;
            reps++;
            el = now_s() - t0;
        } while (el < 0.02);
        if (el / reps < best)
            best = el / reps;
    }
    return best;
}

int main(void)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v4", &cfg, &d) != 0) {
        fprintf(stderr, "bench_mxu_timing: %s\n", d.msg);
        return 1;
    }
    static const struct {
        uint64_t m, k, n;
    } shapes[] = {
        {4096, 4096, 4096}, {4096, 128, 128},    {1 << 20, 128, 128},
        {5000, 4096, 4096}, {100000, 4096, 4096}, {1000000, 4096, 4096},
    };
    printf("timing-only GEMM on %s (%u MXUs of %ux%u, %u accumulator rows)\n", cfg.name,
           cfg.cores_per_chip * cfg.mxu_per_core, cfg.mxu_rows, cfg.mxu_cols,
           cfg.accumulator_rows);
    printf("%9s %6s %6s %12s %16s %12s %12s\n", "M", "K", "N", "weight tiles", "cycles",
           "host us", "ns/tile");
    double t4096 = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        struct tpu_gemm_params p = {.m = shapes[i].m, .k = shapes[i].k, .n = shapes[i].n,
                                    .dtype = TPU_BF16};
        struct tpu_gemm_timing t;
        double s = time_call(&cfg, &p, &t);
        if (s < 0)
            return 1;
        if (i == 0)
            t4096 = s;
        printf("%9" PRIu64 " %6" PRIu64 " %6" PRIu64 " %12" PRIu64 " %16" PRIu64
               " %12.3f %12.3f\n",
               p.m, p.k, p.n, t.weight_tiles, t.cycles, s * 1e6, s * 1e9 / t.weight_tiles);
    }
    printf("4096^3 on tpu-v4: %.3f us of host time; limit 10 ms; ratio to limit %.2e\n",
           t4096 * 1e6, t4096 / 10e-3);
    return t4096 < 10e-3 ? 0 : 1;
}
