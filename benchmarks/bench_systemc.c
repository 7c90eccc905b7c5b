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
 * A larger loop only dilutes that per-launch cost. One device on each backend is open at
 * once; after a warm-up step each (programs loaded, params written), the steps alternate
 * between them, one tpu_estimator_train call of one step each, the order swapped every pair,
 * so that the shared machine's load falls on both alike. The median of the pairs' ratios is
 * reported with its quartiles. Both backends must end with the same loss bits and core 0
 * counters (the benchmark fails otherwise).
 *
 * usage: bench_systemc [steps]    (default 60) */
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

enum { GLOBAL = 512, D0 = 784, D1 = 512, D2 = 256, D3 = 10, N_EXAMPLES = 4096 };

static const double LIMIT = 1.2;

/* CPU time of every thread of the process, seconds: what a step cost the machine, which the
 * other work on a shared machine disturbs less than the wall time. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

/* One backend's device and estimator, trained one step at a time. */
struct side {
    const struct tpu_device_backend *backend;
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct tpu_dataset_input in;
    struct tpu_mlp_spec spec; /* the model points to it */
    struct tpu_model model;
    float last_loss;
    uint64_t step;
    double cpu; /* the last step's CPU time */
};

static int side_open(struct side *sd, const struct tpu_device_backend *backend,
                     const struct tpu_dataset *ds)
{
    memset(sd, 0, sizeof *sd);
    sd->backend = backend;
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v3", &chip, &d)) {
        fprintf(stderr, "bench_systemc: %s\n", d.msg);
        return -1;
    }
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.backend = backend;
    if (tpu_device_open(&s, &sd->dev, &d)) {
        fprintf(stderr, "bench_systemc: open on %s: %s\n", backend->name, d.msg);
        return -1;
    }
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = GLOBAL;
    cfg.iterations_per_loop = 1;
    cfg.seed = 11;
    tpu_mlp_default_spec(&sd->spec);
    sd->spec.n_layers = 3;
    sd->spec.sizes[0] = D0;
    sd->spec.sizes[1] = D1;
    sd->spec.sizes[2] = D2;
    sd->spec.sizes[3] = D3;
    sd->spec.optimizer = TPU_OPT_ADAM;
    tpu_mlp_model(&sd->model, &sd->spec);
    struct tpu_hook hook = {.ctx = &sd->last_loss, .after_loop = on_loop};
    tpu_dataset_input_init(&sd->in, ds, 5);
    if (tpu_estimator_create(sd->dev, &cfg, &sd->model, &hook, 1, &sd->est, &d)) {
        fprintf(stderr, "bench_systemc: %s: %s\n", backend->name, d.msg);
        return -1;
    }
    return 0;
}

/* Trains one more step; returns its host time in seconds, or a negative value after
 * printing the error. */
static double side_step(struct side *sd)
{
    struct tpu_diag d = {0};
    double c0 = cpu_s(), t0 = now_s();
    if (tpu_estimator_train(sd->est, &sd->in.input, 1, 0, &d)) {
        fprintf(stderr, "bench_systemc: %s: %s\n", sd->backend->name, d.msg);
        return -1;
    }
    sd->step++;
    const double t = now_s() - t0;
    sd->cpu = cpu_s() - c0;
    return t;
}

static void side_close(struct side *sd)
{
    tpu_estimator_destroy(&sd->est);
    tpu_dataset_input_free(&sd->in);
    tpu_device_close(&sd->dev);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 60;
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

    /* both devices open at once (one SystemC device, one native), the steps interleaved,
     * the order swapped every pair, so that the machine's load falls on both alike */
    struct side nat, sc;
    if (side_open(&nat, tpu_device_backend_native(), &ds) ||
        side_open(&sc, tpu_device_backend_systemc(), &ds))
        return 1;
    if (side_step(&nat) < 0 || side_step(&sc) < 0) /* warm-up: programs loaded, params set */
        return 1;
    double *t_nat = calloc(steps, sizeof *t_nat), *t_sc = calloc(steps, sizeof *t_sc);
    double *ratio = calloc(steps, sizeof *ratio), *cpu_ratio = calloc(steps, sizeof *cpu_ratio);
    if (!t_nat || !t_sc || !ratio || !cpu_ratio)
        return 1;
    struct tpu_systemc_stats st0, st1;
    tpu_systemc_stats(&st0);
    for (uint64_t i = 0; i < steps; i++) {
        if (i % 2 == 0) {
            t_nat[i] = side_step(&nat);
            t_sc[i] = side_step(&sc);
        } else {
            t_sc[i] = side_step(&sc);
            t_nat[i] = side_step(&nat);
        }
        if (t_nat[i] < 0 || t_sc[i] < 0)
            return 1;
        ratio[i] = t_sc[i] / t_nat[i];
        cpu_ratio[i] = sc.cpu / nat.cpu;
    }
    tpu_systemc_stats(&st1);
    struct tpu_core_counters kn, ks;
    tpu_device_counters(nat.dev, 0, &kn);
    tpu_device_counters(sc.dev, 0, &ks);
    if (memcmp(&nat.last_loss, &sc.last_loss, sizeof nat.last_loss) != 0 ||
        memcmp(&kn, &ks, sizeof kn) != 0) {
        fprintf(stderr, "bench_systemc: the backends disagree: loss %.9g / %.9g, core 0 "
                "cycles %llu / %llu\n", (double)nat.last_loss, (double)sc.last_loss,
                (unsigned long long)kn.cycles, (unsigned long long)ks.cycles);
        return 1;
    }
    qsort(t_nat, steps, sizeof *t_nat, cmp_double);
    qsort(t_sc, steps, sizeof *t_sc, cmp_double);
    qsort(ratio, steps, sizeof *ratio, cmp_double);
    qsort(cpu_ratio, steps, sizeof *cpu_ratio, cmp_double);
    const double median = ratio[steps / 2];
    printf("MLP %d-%d-%d-%d, global batch %d on tpu-v3 (8 replicas), Adam, iterations_per_loop "
           "1, %llu steps on each backend, interleaved\n", D0, D1, D2, D3, GLOBAL,
           (unsigned long long)steps);
    printf("  native step (host time)      %8.3f ms  (median; quartiles %.3f to %.3f)\n",
           1e3 * t_nat[steps / 2], 1e3 * t_nat[steps / 4], 1e3 * t_nat[3 * steps / 4]);
    printf("  systemc step (host time)     %8.3f ms  (median; quartiles %.3f to %.3f)\n",
           1e3 * t_sc[steps / 2], 1e3 * t_sc[steps / 4], 1e3 * t_sc[3 * steps / 4]);
    printf("  TLM transactions a step      %8.1f\n",
           (double)(st1.transactions - st0.transactions) / (double)steps);
    printf("  global quantum               %8.0f ns\n", (double)st1.quantum_ps * 1e-3);
    printf("  same loss bits and core 0 counters on both: %.9g, %llu cycles\n",
           (double)nat.last_loss, (unsigned long long)kn.cycles);
    printf("  CPU time ratio               %8.3f  (median of the pairs; quartiles %.3f to %.3f)\n",
           cpu_ratio[steps / 2], cpu_ratio[steps / 4], cpu_ratio[3 * steps / 4]);
    printf("  ratio systemc / native = %.3f (limit %.1f; median of the %llu step pairs, "
           "quartiles %.3f to %.3f)\n", median, LIMIT, (unsigned long long)steps,
           ratio[steps / 4], ratio[3 * steps / 4]);
    side_close(&nat);
    side_close(&sc);
    free(t_nat);
    free(t_sc);
    free(ratio);
    free(cpu_ratio);
    tpu_dataset_free(&ds);
    return median <= LIMIT ? 0 : 1;
}
