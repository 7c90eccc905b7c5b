/* bench_resnet50: a ResNet-50 training step (configs/models/resnet50.json, 224x224x3, 1000
 * classes) in timing-only mode on one chip of a preset, with the per-layer profile from the
 * device's per-op statistics (tpu_device_op_stats, the op-to-layer map of tpu_net_build).
 *
 *   bench_resnet50 MODEL.json [--chip NAME] [--batch N] [--steps N] [--top N] [--threads N]
 *
 * --batch is the per-core batch; without it, the largest power of two up to 256 whose
 * training program fits one core's share of HBM (tpu_program_memory) is taken. The optimizer
 * is SGD with momentum (what MLPerf's reference uses, up to LARS's per-layer scaling, which
 * is elementwise work of the same kind), matmuls in bf16 (1 pass), as TPUs train ResNet-50.
 * Nothing here is tuned to a published figure: the chip preset and the lowering are what they
 * are for every model.
 *
 * It prints the step's simulated time, images/s per core and per chip, the MXU utilization,
 * the host's wall time per simulated step, the time by op kind, and the layers that take the
 * most time with their FLOPs, matrix-unit utilization and what bounds them (the unit the
 * layer's ops keep busiest: matrix unit, vector unit, HBM via DMA, or the interconnect). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"

static double wall_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Timing-only input: the device computes no values, so the batch's contents do not matter;
 * the tensors are left as the runtime gives them and every row is real. */
static int null_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                     void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    (void)ctx, (void)mode, (void)shard, (void)tensors, (void)d;
    *n_real = batch;
    return 1;
}

struct agg {
    uint64_t share, busy[TPU_UNIT_COUNT], hbm_bytes, macs, slots;
};

static void agg_add(struct agg *a, const struct tpu_op_stats *s)
{
    a->share += s->share_cycles;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        a->busy[u] += s->busy[u];
    a->hbm_bytes += s->hbm_read_bytes + s->hbm_write_bytes;
    a->macs += s->macs;
    a->slots += s->mxu_mac_slots;
}

/* The unit the ops keep busiest; DMA is HBM traffic. */
static const char *bound(const struct agg *a)
{
    static const enum tpu_unit units[] = {TPU_UNIT_MXU, TPU_UNIT_VPU, TPU_UNIT_DMA,
                                          TPU_UNIT_ICI};
    static const char *const names[] = {"matrix unit", "vector unit", "HBM", "interconnect"};
    size_t best = 0;
    for (size_t i = 1; i < sizeof units / sizeof units[0]; i++)
        if (a->busy[units[i]] > a->busy[units[best]])
            best = i;
    return a->busy[units[best]] ? names[best] : "-";
}

static int fail(const char *what, const struct tpu_diag *d)
{
    fprintf(stderr, "bench_resnet50: %s: %s\n", what, d->msg);
    return 1;
}

static int parse_u32(const char *flag, const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < 1 || v > UINT32_MAX) {
        fprintf(stderr, "bench_resnet50: %s takes a whole number of at least 1; got '%s'\n",
                flag, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *chip_name = "tpu-v3";
    uint32_t batch = 0, steps = 2, top = 25, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (f[0] != '-') {
            path = f;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_resnet50: %s needs a value\n", f);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(f, "--chip"))
            chip_name = v;
        else if ((!strcmp(f, "--batch") && parse_u32(f, v, &batch)) ||
                 (!strcmp(f, "--steps") && parse_u32(f, v, &steps)) ||
                 (!strcmp(f, "--top") && parse_u32(f, v, &top)) ||
                 (!strcmp(f, "--threads") && parse_u32(f, v, &threads)))
            return 2;
        else if (strcmp(f, "--batch") && strcmp(f, "--steps") && strcmp(f, "--top") &&
                 strcmp(f, "--threads")) {
            fprintf(stderr, "bench_resnet50: unknown flag '%s'; the flags are --chip, "
                    "--batch, --steps, --top, --threads\n", f);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "bench_resnet50: give the model file, e.g. "
                "configs/models/resnet50.json\n");
        return 2;
    }
    struct tpu_diag d = {0};
    struct tpu_net *net = NULL;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_model_program mp = {0};
    uint32_t *op_layer = NULL;
    struct tpu_op_stats *st = NULL;
    int status = 1;
    struct tpu_chip_config chip;
    if (tpu_config_load(chip_name, &chip, &d)) {
        status = fail("chip", &d);
        goto out;
    }
    if (tpu_net_load_file(path, &net, &d)) {
        status = fail("model", &d);
        goto out;
    }
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    spec.optimizer = TPU_OPT_SGD_MOMENTUM;
    spec.learning_rate = 0.1f;
    spec.momentum = 0.9f;
    spec.passes = 1;
    const uint32_t cores = chip.cores_per_chip;
    const uint64_t hbm_per_core = chip.hbm_bytes / cores;

    /* the per-core batch: given, or the largest power of two whose program fits */
    struct tpu_program_memory mem = {0};
    for (uint32_t b = batch ? batch : 256; b >= 1; b /= 2) {
        tpu_program_destroy(&mp.prog);
        free(op_layer);
        op_layer = NULL;
        const struct tpu_build_shape shape = {.batch_per_replica = b, .global_batch = b * cores,
                                              .n_replicas = cores, .cores_per_replica = 1};
        if (tpu_net_build(net, &spec, TPU_MODE_TRAIN, &shape, &mp, &op_layer, &d)) {
            status = fail("build", &d);
            goto out;
        }
        if (tpu_program_memory(mp.prog, &mem)) {
            fprintf(stderr, "bench_resnet50: out of memory measuring the program\n");
            goto out;
        }
        if (batch || mem.hbm_bytes <= hbm_per_core) {
            batch = b;
            break;
        }
    }
    if (!batch) {
        fprintf(stderr, "bench_resnet50: not even a batch of 1 per core fits %s's %.2f GiB "
                "of HBM per core\n", chip.name, hbm_per_core / 1073741824.0);
        goto out;
    }
    const size_t n_ops = tpu_program_n_ops(mp.prog);

    struct tpu_model model;
    if (tpu_net_model(&model, net, &spec, &d)) {
        status = fail("model", &d);
        goto out;
    }
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 1;
    s.n_threads = threads;
    s.timing_only = true;
    s.op_stats = true;
    if (tpu_device_open(&s, &dev, &d)) {
        status = fail("device", &d);
        goto out;
    }
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = batch * cores;
    cfg.iterations_per_loop = steps;
    if (tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d)) {
        status = fail("estimator", &d);
        goto out;
    }
    struct tpu_input in = {.next = null_next};
    const double w0 = wall_now_s();
    if (tpu_estimator_train(est, &in, steps, 0, &d)) {
        status = fail("train", &d);
        goto out;
    }
    const double wall = wall_now_s() - w0;
    const struct tpu_loop_info *li = tpu_estimator_last_info(est);

    st = calloc(n_ops, sizeof *st);
    if (!st || tpu_device_op_stats(dev, 0, st, n_ops, &d)) {
        status = fail("op stats", &d);
        goto out;
    }
    const double hz = chip.clock_mhz * 1e6;
    const double step_s = li->pass_device_seconds / steps;
    const double slots_per_cycle = (double)chip.mxu_rows * chip.mxu_cols * chip.mxu_per_core;
    uint64_t flops = 0;
    const uint32_t n_layers = tpu_net_n_layers(net);
    for (uint32_t i = 0; i < n_layers; i++) {
        struct tpu_layer_info l;
        if (!tpu_net_layer(net, i, &l))
            flops += l.flops;
    }
    printf("%s, training step, timing-only: %s, 1 chip of %u cores, per-core batch %u "
           "(global %u), SGD with momentum, bf16 matmuls\n", tpu_net_name(net), chip.name,
           cores, batch, batch * cores);
    printf("HBM per core: %.2f GiB needed (params %.2f GiB + peak temps %.2f GiB) of %.2f GiB\n",
           mem.hbm_bytes / 1073741824.0, mem.param_bytes / 1073741824.0,
           mem.temp_peak_bytes / 1073741824.0, hbm_per_core / 1073741824.0);
    printf("step %.2f ms simulated; %.1f images/s per core, %.1f images/s per chip; "
           "MXU utilization %.1f %%; model FLOPs %.2f GFLOPs/image forward, %.1f %% of peak "
           "(3x forward per training image)\n", step_s * 1e3, batch / step_s,
           batch * cores / step_s, 100.0 * li->pass_mxu_utilization, flops / 1e9,
           100.0 * 3.0 * flops * batch / step_s / (slots_per_cycle * 2.0 * hz));
    printf("host wall time: %.2f s for %u simulated steps (%.2f s per step)\n", wall, steps,
           wall / steps);

    /* by op kind */
    struct agg kinds[TPU_OP_COUNT];
    memset(kinds, 0, sizeof kinds);
    struct agg total = {0};
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *op = tpu_program_op(mp.prog, i);
        agg_add(&kinds[op->code], &st[i]);
        agg_add(&total, &st[i]);
    }
    const double per = 1.0 / steps / hz * 1e3; /* cycles summed over the steps -> ms/step */
    printf("\nby op kind (core 0, per step):\n%-20s %9s %7s %9s %9s %9s %10s\n", "op", "ms",
           "share", "mxu ms", "vpu ms", "dma ms", "HBM GB");
    for (int k = 0; k < TPU_OP_COUNT; k++) {
        const struct agg *a = &kinds[k];
        if (!a->share && !a->busy[TPU_UNIT_MXU] && !a->busy[TPU_UNIT_VPU] && !a->hbm_bytes)
            continue;
        printf("%-20s %9.2f %6.1f%% %9.2f %9.2f %9.2f %10.3f\n",
               tpu_opcode_name((enum tpu_opcode)k), a->share * per,
               100.0 * a->share / total.share, a->busy[TPU_UNIT_MXU] * per,
               a->busy[TPU_UNIT_VPU] * per, a->busy[TPU_UNIT_DMA] * per,
               a->hbm_bytes / 1e9 / steps);
    }

    /* by layer: layer i's ops, then the loss and the step's own */
    struct agg *layers = calloc(n_layers + 2, sizeof *layers);
    uint32_t *order = calloc(n_layers + 2, sizeof *order);
    if (!layers || !order) {
        free(layers);
        free(order);
        fprintf(stderr, "bench_resnet50: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n_ops; i++) {
        uint32_t l = op_layer[i] == TPU_NET_OP_LOSS ? n_layers
                     : op_layer[i] == TPU_NET_OP_STEP ? n_layers + 1 : op_layer[i];
        agg_add(&layers[l], &st[i]);
    }
    for (uint32_t i = 0; i < n_layers + 2; i++)
        order[i] = i;
    for (uint32_t i = 1; i < n_layers + 2; i++) /* insertion sort by time, longest first */
        for (uint32_t j = i; j > 0 && layers[order[j]].share > layers[order[j - 1]].share; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    uint64_t kind_share[TPU_LAYER_KIND_COUNT] = {0};
    for (uint32_t i = 0; i < n_layers; i++) {
        struct tpu_layer_info l;
        if (!tpu_net_layer(net, i, &l))
            kind_share[l.kind] += layers[i].share;
    }
    printf("\nby layer type (core 0, share of the step):");
    for (int k = 0; k < TPU_LAYER_KIND_COUNT; k++)
        if (kind_share[k])
            printf(" %s %.1f%%", tpu_layer_kind_name((enum tpu_layer_kind)k),
                   100.0 * kind_share[k] / total.share);
    printf(", loss %.1f%%, step %.1f%%\n", 100.0 * layers[n_layers].share / total.share,
           100.0 * layers[n_layers + 1].share / total.share);
    printf("\nthe %u layers that take the most time (core 0, per step; forward, backward and "
           "update;\nGFLOP: the matmuls' 3 x forward FLOPs x the core's batch):\n"
           "%-24s %-10s %-16s %9s %7s %9s %6s %10s  %s\n", top, "layer", "type",
           "output", "ms", "share", "GFLOP", "MXU%", "HBM GB", "bound");
    for (uint32_t r = 0; r < top && r < n_layers + 2; r++) {
        uint32_t i = order[r];
        const struct agg *a = &layers[i];
        struct tpu_layer_info l = {0};
        char shape[32] = "-";
        const char *name = i == n_layers ? "(loss)" : i == n_layers + 1 ? "(step)" : "?";
        const char *kind = "-";
        double gflop = 0;
        if (i < n_layers && !tpu_net_layer(net, i, &l)) {
            name = l.name;
            kind = tpu_layer_kind_name(l.kind);
            snprintf(shape, sizeof shape, "%ux%ux%u", l.out.h, l.out.w, l.out.c);
            if (l.kind == TPU_LAYER_CONV2D || l.kind == TPU_LAYER_DENSE)
                gflop = 3.0 * l.flops * batch / 1e9; /* forward + two backward matmuls */
        }
        char gf[16] = "-";
        if (gflop > 0)
            snprintf(gf, sizeof gf, "%.2f", gflop);
        printf("%-24s %-10s %-16s %9.3f %6.1f%% %9s %6.1f %10.3f  %s\n", name, kind, shape,
               a->share * per, 100.0 * a->share / total.share, gf,
               a->share ? 100.0 * a->macs / (a->share * slots_per_cycle) : 0.0,
               a->hbm_bytes / 1e9 / steps, bound(a));
    }
    free(layers);
    free(order);
    status = 0;
out:
    free(st);
    free(op_layer);
    tpu_program_destroy(&mp.prog);
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_net_destroy(&net);
    return status;
}
