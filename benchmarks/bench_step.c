/* How fast the chip simulates a training step, against OpenBLAS doing the same matmuls.
 *
 * The step: an MLP 784-1024-1024-10, global batch 1024, bf16 matmul inputs, SGD with
 * momentum, on tpu-v3's host (4 chips x 2 cores = 8 replicas of 128 rows). One functional
 * step runs every op of the program with values (forward, backward, all-reduce, update) on
 * the device's worker threads (one per host CPU). The peer is OpenBLAS sgemm doing exactly
 * the step's matmuls (same shapes and transposes, all 8 replicas) with as many threads, in
 * the same run, alternating five rounds of each (the median ratio is reported, with the
 * spread). The limit: at most 1.5x the peer. Timing-only, the same step must
 * take under 1 ms of host time.
 *
 * usage: bench_step [steps]          (default 10)
 *        bench_step --sim-only [steps]  the simulator's functional steps alone, no peer and
 *                                       no verdict (for a profiler) */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpusim/device.h"
#include "tpusim/models.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { GLOBAL = 1024, D0 = 784, D1 = 1024, D2 = 1024, D3 = 10 };

struct io {
    struct tpu_device *dev;
    uint32_t core;
    int steps;
    size_t x_bytes, y_bytes;
    const float *x;
    const int32_t *y;
    int rc;
};

static void *feed(void *arg)
{
    struct io *io = arg;
    uint32_t n = tpu_device_n_cores(io->dev);
    for (int s = 0; s < io->steps && !io->rc; s++)
        for (uint32_t c = 0; c < n && !io->rc; c++) {
            io->rc = tpu_device_infeed(io->dev, c, io->x, io->x_bytes, 0, NULL);
            if (!io->rc)
                io->rc = tpu_device_infeed(io->dev, c, io->y, io->y_bytes, 0, NULL);
        }
    return NULL;
}

static void *drain(void *arg)
{
    struct io *io = arg;
    float loss;
    for (int s = 0; s < io->steps && !io->rc; s++)
        io->rc = tpu_device_outfeed(io->dev, io->core, &loss, sizeof loss, 0, NULL, NULL);
    return NULL;
}

/* Runs `steps` steps; returns seconds per step, or a negative number on failure. */
static double run_steps(const struct tpu_chip_config *cfg, bool timing_only, int steps,
                        unsigned threads, struct tpu_core_counters *ctr)
{
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, cfg);
    s.timing_only = timing_only;
    s.n_threads = threads;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    if (tpu_device_open(&s, &dev, &d)) {
        fprintf(stderr, "bench_step: %s\n", d.msg);
        return -1;
    }
    const uint32_t R = tpu_device_n_replicas(dev), B = GLOBAL / R;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = D0;
    spec.sizes[1] = D1;
    spec.sizes[2] = D2;
    spec.sizes[3] = D3;
    spec.batch_per_replica = B;
    spec.global_batch = GLOBAL;
    spec.learning_rate = 0.01f;
    struct tpu_mlp_program m;
    if (tpu_mlp_build(&spec, TPU_MLP_TRAIN, &m, &d) || tpu_device_load(dev, m.prog, &d)) {
        fprintf(stderr, "bench_step: %s\n", d.msg);
        tpu_device_close(&dev);
        return -1;
    }
    float *x = malloc((size_t)B * D0 * sizeof *x);
    int32_t *y = malloc((size_t)B * sizeof *y);
    float *w = malloc((size_t)D1 * D2 * sizeof *w);
    for (size_t i = 0; i < (size_t)B * D0; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
    for (uint32_t i = 0; i < B; i++)
        y[i] = (int32_t)(i % D3);
    if (!timing_only) {
        /* small weights so the step's values stay finite */
        uint32_t shapes[3][2] = {{D0, D1}, {D1, D2}, {D2, D3}};
        for (int l = 0; l < 3; l++) {
            size_t n = (size_t)shapes[l][0] * shapes[l][1];
            for (size_t i = 0; i < n; i++)
                w[i] = ((float)((i * 40503u) % 2001) - 1000.0f) * 1e-5f;
            char name[8];
            snprintf(name, sizeof name, "w%d", l);
            uint32_t id;
            tpu_program_find_buffer(m.prog, name, &id);
            for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++)
                tpu_device_write(dev, c, id, w, n * sizeof *w, NULL);
        }
    }
    tpu_device_set_var(dev, m.var_iterations, steps);
    struct io fio = {.dev = dev, .steps = steps, .x_bytes = (size_t)B * D0 * 4,
                     .y_bytes = (size_t)B * 4, .x = timing_only ? NULL : x,
                     .y = timing_only ? NULL : y};
    struct io *dio = calloc(R, sizeof *dio);
    pthread_t ft, *dt = calloc(R, sizeof *dt);
    double t0 = now_s();
    pthread_create(&ft, NULL, feed, &fio);
    for (uint32_t c = 0; c < R; c++) {
        dio[c] = (struct io){.dev = dev, .core = c, .steps = steps};
        pthread_create(&dt[c], NULL, drain, &dio[c]);
    }
    int rc = tpu_device_run(dev, 0, NULL, &d);
    pthread_join(ft, NULL);
    for (uint32_t c = 0; c < R; c++)
        pthread_join(dt[c], NULL);
    double el = now_s() - t0;
    if (rc)
        fprintf(stderr, "bench_step: %s\n", d.msg);
    if (ctr)
        tpu_device_counters(dev, 0, ctr);
    free(dio);
    free(dt);
    free(x);
    free(y);
    free(w);
    tpu_mlp_program_free(&m);
    tpu_device_close(&dev);
    return rc ? -1 : el / steps;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The step's matmuls, for all replicas, with OpenBLAS. */
static double blas_step(int steps, uint32_t R)
{
    const int B = GLOBAL / (int)R;
    const int sizes[4] = {D0, D1, D2, D3};
    size_t big = (size_t)D1 * D2 > (size_t)B * D0 ? (size_t)D1 * D2 : (size_t)B * D0;
    float *a = calloc(big, sizeof *a), *b = calloc(big, sizeof *b), *c = calloc(big, sizeof *c);
    for (size_t i = 0; i < big; i++)
        a[i] = b[i] = (float)(i % 13) * 0.01f;
    double t0 = now_s();
    for (int s = 0; s < steps; s++)
        for (uint32_t r = 0; r < R; r++) {
            for (int l = 0; l < 3; l++) /* forward: h[B][in] w[in][out] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, sizes[l + 1], sizes[l],
                            1.0f, a, sizes[l], b, sizes[l + 1], 0.0f, c, sizes[l + 1]);
            for (int l = 2; l >= 0; l--) {
                /* gw = h^T g: [in][B] x [B][out] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sizes[l], sizes[l + 1], B,
                            1.0f, a, sizes[l], b, sizes[l + 1], 0.0f, c, sizes[l + 1]);
                if (l > 0) /* dh = g w^T: [B][out] x [out][in] */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, sizes[l],
                                sizes[l + 1], 1.0f, a, sizes[l + 1], b, sizes[l + 1], 0.0f, c,
                                sizes[l]);
            }
        }
    double el = now_s() - t0;
    free(a);
    free(b);
    free(c);
    return el / steps;
}

int main(int argc, char **argv)
{
    const bool sim_only = argc > 1 && strcmp(argv[1], "--sim-only") == 0;
    if (sim_only) {
        argc--;
        argv++;
    }
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    if (steps < 1)
        steps = 10;
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v3", &cfg, &d)) {
        fprintf(stderr, "bench_step: %s\n", d.msg);
        return 1;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = cpus > 0 ? (unsigned)cpus : 1;
    const uint32_t R = cfg.chips_per_host * cfg.cores_per_chip;
    if (sim_only) {
        double t = run_steps(&cfg, false, steps, threads, NULL);
        if (t < 0)
            return 1;
        printf("functional step (simulator) %.3f ms, %d steps, %u threads\n", t * 1e3, steps,
               threads);
        return 0;
    }
    openblas_set_num_threads((int)threads);
    /* warm up both, then measure */
    run_steps(&cfg, false, 1, threads, NULL);
    blas_step(1, R);
    /* the machine is shared: alternate the two ROUNDS times and compare the medians */
    enum { ROUNDS = 5 };
    struct tpu_core_counters ctr;
    double o[ROUNDS], b[ROUNDS], r[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        o[i] = run_steps(&cfg, false, steps, threads, &ctr);
        b[i] = blas_step(steps, R);
        if (o[i] < 0)
            return 1;
        r[i] = o[i] / b[i];
    }
    qsort(o, ROUNDS, sizeof o[0], cmp_double);
    qsort(b, ROUNDS, sizeof b[0], cmp_double);
    qsort(r, ROUNDS, sizeof r[0], cmp_double);
    const double ours = o[ROUNDS / 2], peer = b[ROUNDS / 2];
    double timing = run_steps(&cfg, true, 200, threads, NULL);
    if (timing < 0)
        return 1;
    double flops = 0;
    {
        const double B = GLOBAL / R;
        const double sz[4] = {D0, D1, D2, D3};
        for (int l = 0; l < 3; l++)
            flops += 2 * B * sz[l] * sz[l + 1] * (l > 0 ? 3 : 2);
        flops *= R;
    }
    printf("MLP 784-1024-1024-10, global batch %d on %s (%u replicas), %u host threads\n",
           GLOBAL, cfg.name, R, threads);
    printf("  functional step (simulator)   %8.3f ms  (%.1f GFLOP/s of matmul work)\n",
           ours * 1e3, flops / ours * 1e-9);
    printf("  OpenBLAS sgemm, same matmuls  %8.3f ms  (%.1f GFLOP/s, %u threads)\n", peer * 1e3,
           flops / peer * 1e-9, threads);
    printf("  ratio simulator / OpenBLAS = %.2f (limit 1.5; median of %d alternating rounds, "
           "per-round ratios %.2f to %.2f)\n", r[ROUNDS / 2], ROUNDS, r[0], r[ROUNDS - 1]);
    printf("  timing-only step              %8.3f ms  (limit 1 ms; ratio to limit %.3f)\n",
           timing * 1e3, timing / 1e-3);
    printf("  simulated step on the chip    %8.1f us  (core 0: %llu cycles for %d steps)\n",
           (double)ctr.cycles / steps / cfg.clock_mhz, (unsigned long long)ctr.cycles, steps);
    return r[ROUNDS / 2] <= 1.5 && timing < 1e-3 ? 0 : 1;
}
