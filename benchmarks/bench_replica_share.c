/* Replicas that cost little (issue #16, item 4; device.h settings.share_replicas): one
 * functional training run of the MLP 784-512-256-10 on Fashion-MNIST, global batch 1024, 50
 * steps, Adam (learning rate 0.001: the CLI's default optimizer, the workload) or SGD
 * with momentum, on a tpu-v2 host of `cores` cores (cores / 2 chips, one replica per core), with
 * replica sharing on or off. It prints one line of figures for benchmarks/replica_share.py,
 * which runs it once per configuration (peak memory is a process's own) and gives the ratios:
 *
 *   cores=C share=0|1 opt=adam|sgd wall_s=... cpu_s=... train_wall_s=... train_cpu_s=... peak_rss_kb=...
 *   params_fnv=... loss=...
 *
 * wall_s / cpu_s: the whole process (loading the data set included) up to the end of
 * training; train_*: the training call alone. params_fnv: an FNV-1a hash of every param
 * buffer of every core as tpu_device_read gives it, so that two runs can be compared for
 * identical values.
 *
 * usage: bench_replica_share CORES SHARE [STEPS [adam|sgd]] (default 50 steps, adam) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int fail(const char *what, const struct tpu_diag *d)
{
    fprintf(stderr, "bench_replica_share: %s: %s\n", what, d->msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_replica_share CORES SHARE [STEPS [adam|sgd]]\n");
        return 2;
    }
    const double wall0 = wall_s();
    const uint32_t cores = (uint32_t)strtoul(argv[1], NULL, 10);
    const bool share = strtoul(argv[2], NULL, 10) != 0;
    const uint64_t steps = argc > 3 ? strtoull(argv[3], NULL, 10) : 50;
    const char *opt = argc > 4 ? argv[4] : "adam";
    if (strcmp(opt, "adam") && strcmp(opt, "sgd")) {
        fprintf(stderr, "bench_replica_share: optimizer '%s' is not one this benchmark runs: "
                "give adam or sgd\n", opt);
        return 2;
    }
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    if (tpu_config_load_preset("tpu-v2", &chip, &d))
        return fail("chip", &d);
    if (cores == 0 || cores % chip.cores_per_chip) {
        fprintf(stderr, "bench_replica_share: CORES %u must be a multiple of tpu-v2's %u "
                "cores a chip\n", cores, chip.cores_per_chip);
        return 2;
    }
    struct tpu_dataset ds;
    if (tpu_dataset_fashion_mnist(NULL, true, &ds, &d))
        return fail("Fashion-MNIST", &d);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &ds, 1);

    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = cores / chip.cores_per_chip;
    s.share_replicas = share;
    struct tpu_device *dev = NULL;
    if (tpu_device_open(&s, &dev, &d))
        return fail("device", &d);
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = 784;
    spec.sizes[1] = 512;
    spec.sizes[2] = 256;
    spec.sizes[3] = 10;
    if (!strcmp(opt, "adam")) {
        spec.optimizer = TPU_OPT_ADAM; /* the CLI's default: Keras's Adam, lr 0.001 */
        spec.learning_rate = 0.001f;
    }
    struct tpu_model model;
    tpu_mlp_model(&model, &spec);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = 1024;
    cfg.seed = 1;
    struct tpu_estimator *est = NULL;
    if (tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d))
        return fail("estimator", &d);

    const double tw0 = wall_s(), tc0 = cpu_s();
    if (tpu_estimator_train(est, &in.input, steps, 0, &d))
        return fail("train", &d);
    const double tw1 = wall_s(), tc1 = cpu_s();

    /* every core's params, as the host reads them */
    uint64_t h = 1469598103934665603ull;
    const struct tpu_program *p = tpu_device_program(dev);
    for (uint32_t b = 0; p && b < tpu_program_n_buffers(p); b++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, b);
        if (bd->kind != TPU_BUF_PARAM)
            continue;
        const size_t bytes = tpu_buffer_bytes(bd);
        unsigned char *v = malloc(bytes);
        if (!v)
            return 1;
        for (uint32_t c = 0; c < cores; c++) {
            if (tpu_device_read(dev, c, b, v, bytes, &d))
                return fail("read", &d);
            for (size_t i = 0; i < bytes; i++)
                h = (h ^ v[i]) * 1099511628211ull;
        }
        free(v);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cores=%u share=%d opt=%s wall_s=%.3f cpu_s=%.3f train_wall_s=%.3f train_cpu_s=%.3f "
           "peak_rss_kb=%ld params_fnv=%016llx loss=%.6f\n",
           cores, share ? 1 : 0, opt, tw1 - wall0, tc1, tw1 - tw0, tc1 - tc0, ru.ru_maxrss,
           (unsigned long long)h, (double)tpu_estimator_last_info(est)->loss);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_dataset_input_free(&in);
    tpu_dataset_free(&ds);
    return 0;
}
