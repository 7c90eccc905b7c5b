/* What the SystemC backend costs: the host time of one training step through the estimator on
 * the SystemC/TLM-2.0 model (include/tpusim/systemc.h) against the same step on the native
 * chip, measured in the same run. Issue #15's limit: at most 1.2x native with the default
 * quantum.
 *
 * The step: the main job's MLP 784-512-256-10, global batch 512, bf16 matmul inputs, Adam, on
 * tpu-v3's host (4 chips x 2 cores = 8 replicas of 64 rows), random data, modeled host time.
 * The estimator runs it with iterations_per_loop 1, so every step is its own launch: every
 * step pays the backend's whole path (the loop variable, START_CYCLE and LAUNCH, driving the
 * SystemC kernel to the interrupt, RUN_STATUS and END_CYCLE; x and labels into every core's
 * infeed window and the loss out of its outfeed window, from the runtime's feed threads).
 * A larger loop only dilutes that per-launch cost. Each round opens a device on one backend,
 * trains one step (warm-up: programs loaded, params written), then times `steps` more; five
 * rounds of each backend alternate, and the median of the per-round ratios is reported with
 * their spread. Both backends must end with the same loss bits (the benchmark checks it).
 *
 * usage: bench_systemc [steps]    (default 20) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"
#include "tpusim/systemc.h"

enum { GLOBAL = 512, D0 = 784, D1 = 512, D2 = 256, D3 = 10, ROUNDS = 5, N_EXAMPLES = 4096 };

static const double LIMIT = 1.2;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int on_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    (void)d;
    if (li->mode == TPU_MODE_TRAIN)
        *(float *)ctx = li->loss;
    return 0;
}

/* One round: `steps` timed steps after a warm-up step. Returns seconds per step, or a
 * negative value after printing the error. */
static double round_on(const struct tpu_device_backend *backend, const struct tpu_dataset *ds,
                       uint64_t steps, float *last_loss, uint64_t *cycles)
{
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v3", &chip, &d)) {
        fprintf(stderr, "bench_systemc: %s\n", d.msg);
        return -1;
    }
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.backend = backend;
    struct tpu_device *dev = NULL;
    if (tpu_device_open(&s, &dev, &d)) {
        fprintf(stderr, "bench_systemc: open: %s\n", d.msg);
        return -1;
    }
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = GLOBAL;
    cfg.iterations_per_loop = 1;
    cfg.seed = 11;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = D0;
    spec.sizes[1] = D1;
    spec.sizes[2] = D2;
    spec.sizes[3] = D3;
    spec.optimizer = TPU_OPT_ADAM;
    struct tpu_model model;
    tpu_mlp_model(&model, &spec);
    struct tpu_hook hook = {.ctx = last_loss, .after_loop = on_loop};
    struct tpu_estimator *est = NULL;
    double per_step = -1;
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, ds, 5);
    if (tpu_estimator_create(dev, &cfg, &model, &hook, 1, &est, &d) ||
        tpu_estimator_train(est, &in.input, 1, 0, &d)) {
        fprintf(stderr, "bench_systemc: %s: %s\n", backend->name, d.msg);
        goto out;
    }
    double t0 = now_s();
    if (tpu_estimator_train(est, &in.input, steps, 0, &d)) {
        fprintf(stderr, "bench_systemc: %s: %s\n", backend->name, d.msg);
        goto out;
    }
    per_step = (now_s() - t0) / (double)steps;
    struct tpu_core_counters k;
    tpu_device_counters(dev, 0, &k);
    *cycles = k.cycles;
out:
    tpu_estimator_destroy(&est);
    tpu_dataset_input_free(&in);
    tpu_device_close(&dev);
    return per_step;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 20;
    if (steps == 0) {
        fprintf(stderr, "usage: bench_systemc [steps >= 1]\n");
        return 2;
    }
    /* random data: pixels in [0, 1), labels 0..9 */
    struct tpu_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n_examples = N_EXAMPLES;
    ds.n_features = D0;
    ds.image_rows = 28;
    ds.image_cols = 28;
    ds.n_classes = D3;
    ds.x = malloc((size_t)N_EXAMPLES * D0 * sizeof *ds.x);
    ds.y = malloc((size_t)N_EXAMPLES * sizeof *ds.y);
    if (!ds.x || !ds.y)
        return 1;
    uint32_t r = 12345;
    for (size_t i = 0; i < (size_t)N_EXAMPLES * D0; i++) {
        r = r * 1103515245u + 12345u;
        ds.x[i] = (float)(r >> 8) / 16777216.0f;
    }
    for (uint32_t i = 0; i < N_EXAMPLES; i++)
        ds.y[i] = (int32_t)(i % D3);

    double nat[ROUNDS], sc[ROUNDS], ratio[ROUNDS];
    float loss_nat = 0, loss_sc = 0;
    uint64_t cyc_nat = 0, cyc_sc = 0;
    struct tpu_systemc_stats st0, st1;
    for (int i = 0; i < ROUNDS; i++) {
        nat[i] = round_on(tpu_device_backend_native(), &ds, steps, &loss_nat, &cyc_nat);
        tpu_systemc_stats(&st0);
        sc[i] = round_on(tpu_device_backend_systemc(), &ds, steps, &loss_sc, &cyc_sc);
        tpu_systemc_stats(&st1);
        if (nat[i] < 0 || sc[i] < 0)
            return 1;
        ratio[i] = sc[i] / nat[i];
    }
    if (memcmp(&loss_nat, &loss_sc, sizeof loss_nat) != 0 || cyc_nat != cyc_sc) {
        fprintf(stderr, "bench_systemc: the backends disagree: loss %.9g / %.9g, core 0 "
                "cycles %llu / %llu\n", (double)loss_nat, (double)loss_sc,
                (unsigned long long)cyc_nat, (unsigned long long)cyc_sc);
        return 1;
    }
    double sorted[ROUNDS];
    memcpy(sorted, ratio, sizeof ratio);
    qsort(sorted, ROUNDS, sizeof *sorted, cmp_double);
    qsort(nat, ROUNDS, sizeof *nat, cmp_double);
    qsort(sc, ROUNDS, sizeof *sc, cmp_double);
    const double median = sorted[ROUNDS / 2];
    printf("MLP %d-%d-%d-%d, global batch %d on tpu-v3 (8 replicas), Adam, iterations_per_loop "
           "1, %llu steps a round\n", D0, D1, D2, D3, GLOBAL, (unsigned long long)steps);
    printf("  native step (host time)      %8.3f ms  (median of %d rounds)\n",
           1e3 * nat[ROUNDS / 2], ROUNDS);
    printf("  systemc step (host time)     %8.3f ms  (median of %d rounds)\n",
           1e3 * sc[ROUNDS / 2], ROUNDS);
    printf("  TLM transactions a step      %8.1f  (last round, warm-up step included)\n",
           (double)(st1.transactions - st0.transactions) / (double)(steps + 1));
    printf("  global quantum               %8.0f ns\n", (double)st1.quantum_ps * 1e-3);
    printf("  same loss bits and core 0 cycles on both: %.9g, %llu cycles\n", (double)loss_nat,
           (unsigned long long)cyc_nat);
    printf("  ratio systemc / native = %.3f (limit %.1f; median of %d alternating rounds, "
           "per-round ratios %.3f to %.3f)\n", median, LIMIT, ROUNDS, sorted[0],
           sorted[ROUNDS - 1]);
    tpu_dataset_free(&ds);
    return median <= LIMIT ? 0 : 1;
}
