/* The TPUv1 paper's roofline, reproduced on the simulated tpu-v1 (timing only).
 *
 * Part 1: a stack of 256-wide int8 dense layers (one 256x256 weight tile each, weights
 * streamed from the 34 GB/s weight memory every time, activations kept on chip), swept
 * over the batch. Each layer does batch x 65536 MACs on 64 KiB of weights, so the batch is
 * the operational intensity in MACs per weight byte: throughput should rise with it until
 * the ridge (the chip's peak over its weight bandwidth, ~1350 MACs per byte), then level.
 *
 * Part 2: a model shaped like the paper's MLP0 (5 fully connected layers, 20M int8 weights:
 * 2000 x 2000 each; batch 200), reported beside the paper's measured 12.3 TOPS and 12.7 %
 * matrix-unit-active cycles. Nothing here is tuned to hit those numbers.
 *
 * usage: bench_v1 [table.tsv]   writes the sweep as TSV too (for the plot). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/device.h"
#include "tpusim/program.h"

struct result {
    uint64_t cycles, mxu_busy, dma_busy;
    double tops, mxu_active;
};

/* Builds the stack: x[B][w] int8 infeed, then `layers` times y = x W_l (int32), x' = int8(y). */
static int stack(const struct tpu_chip_config *cfg, uint32_t batch, uint32_t width,
                 uint32_t layers, struct result *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return -1;
    fprintf(f, "program stack\nvar n\ntemp x: int8[%u, %u]\n", batch, width);
    for (uint32_t l = 0; l < layers; l++)
        fprintf(f, "param w%u: int8[%u, %u]\ntemp y%u: int32[%u, %u]\ntemp h%u: int8[%u, %u]\n", l,
                width, width, l, batch, width, l, batch, width);
    fprintf(f, "loop n {\n  x = infeed\n");
    for (uint32_t l = 0; l < layers; l++) {
        if (l == 0)
            fprintf(f, "  y0 = matmul x, w0\n");
        else
            fprintf(f, "  y%u = matmul h%u, w%u\n", l, l - 1, l);
        fprintf(f, "  h%u = convert y%u\n", l, l);
    }
    fprintf(f, "}\n");
    fclose(f);
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    int rc = tpu_program_parse(text, "stack", &p, &d);
    free(text);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, cfg);
    s.n_chips = 1;
    s.timing_only = true;
    struct tpu_device *dev = NULL;
    if (!rc)
        rc = tpu_device_open(&s, &dev, &d);
    if (!rc)
        rc = tpu_device_load(dev, p, &d);
    if (!rc) {
        tpu_device_set_var(dev, 0, 1);
        rc = tpu_device_infeed(dev, 0, NULL, (size_t)batch * width, 0, &d);
    }
    uint64_t end = 0;
    if (!rc)
        rc = tpu_device_run(dev, 0, &end, &d);
    if (rc) {
        fprintf(stderr, "bench_v1: %s\n", d.msg);
        tpu_device_close(&dev);
        tpu_program_destroy(&p);
        return rc;
    }
    struct tpu_core_counters c;
    tpu_device_counters(dev, 0, &c);
    /* the model's work starts when the input is on chip: count from the first infeed */
    uint64_t start = c.stall[TPU_STALL_INFEED_EMPTY];
    r->cycles = c.cycles - start;
    r->mxu_busy = c.busy[TPU_UNIT_MXU];
    r->dma_busy = c.busy[TPU_UNIT_DMA];
    double secs = (double)r->cycles / (cfg->clock_mhz * 1e6);
    r->tops = 2.0 * batch * (double)width * width * layers / secs * 1e-12;
    r->mxu_active = (double)r->mxu_busy / (double)r->cycles;
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
    return 0;
}

int main(int argc, char **argv)
{
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v1", &cfg, &d)) {
        fprintf(stderr, "bench_v1: %s\n", d.msg);
        return 1;
    }
    struct tpu_chip_derived der;
    tpu_config_derive(&cfg, &der);
    FILE *tsv = argc > 1 ? fopen(argv[1], "w") : NULL;
    if (tsv)
        fprintf(tsv, "batch\tmacs_per_weight_byte\ttops\troofline_tops\tmxu_active\n");
    printf("tpu-v1: peak %.1f TOPS, weight memory %.0f GB/s, ridge %.0f MACs per byte\n\n",
           der.peak_flops_per_s * 1e-12, cfg.hbm_gbytes_per_s, der.ridge_macs_per_byte);
    printf("8 layers of 256x256 int8, weights streamed from weight memory each layer\n");
    printf("%6s %14s %10s %14s %12s %10s\n", "batch", "MACs/w-byte", "TOPS", "roofline TOPS",
           "cycles", "MXU act%");
    for (uint32_t b = 8; b <= 8192; b *= 2) {
        struct result r;
        if (stack(&cfg, b, 256, 8, &r))
            return 1;
        double roof = b * cfg.hbm_gbytes_per_s * 1e9 * 2 * 1e-12; /* 2 ops per MAC */
        if (roof > der.peak_flops_per_s * 1e-12)
            roof = der.peak_flops_per_s * 1e-12;
        printf("%6u %14u %10.2f %14.2f %12" PRIu64 " %10.1f\n", b, b, r.tops, roof, r.cycles,
               100 * r.mxu_active);
        if (tsv)
            fprintf(tsv, "%u\t%u\t%.4f\t%.4f\t%.4f\n", b, b, r.tops, roof, r.mxu_active);
    }
    if (tsv)
        fclose(tsv);
    struct result r;
    if (stack(&cfg, 200, 2000, 5, &r))
        return 1;
    printf("\nMLP0-shaped: 5 x 2000x2000 int8 (20M weights), batch 200\n");
    printf("  simulated: %.2f TOPS, matrix unit active %.1f %% of %" PRIu64 " cycles\n", r.tops,
           100 * r.mxu_active, r.cycles);
    printf("  paper (Jouppi et al. 2017, measured): 12.3 TOPS, 12.7 %% active\n");
    printf("  ratio simulated/paper TOPS = %.2f\n", r.tops / 12.3);
    return 0;
}
