/* How fast the chip simulates training steps of models given as layer graphs (net.h) or the
 * MLP, for the benchmarks against PyTorch (benchmarks/cnn_vs_torch.py drives this program),
 * and ResNet-50's timing-only step against its one-second limit.
 *
 * A functional step runs every op of the model's training program with values (forward,
 * backward, all-reduce, optimizer update) on the device's worker threads, one per host CPU,
 * for every replica of the device; the host side of a step is the infeed of each replica's
 * share of the global batch and the outfeed of its loss, as in bench_step.c. The params start
 * at the model's own initial values (Glorot-uniform kernels), the data is a fixed synthetic
 * batch (values in [0, 1), labels cycling over the classes).
 *
 * usage:
 *   bench_net serve MODEL CHIPS BATCH
 *       MODEL: a model file (configs/models/cnn.json) or "mlp" (784-512-256-10, the main job's
 *       model); CHIPS: chips of tpu-v3 (0: the host's 4); BATCH: the global batch. Builds the
 *       step, runs one warm-up step, prints "ready <what>", then for each line "STEPS" read on
 *       stdin runs STEPS steps in one launch and prints the seconds per step; ends at EOF.
 *       Between rounds it waits on stdin, idle, so a peer can run alone (cnn_vs_torch.py).
 *   bench_net steps MODEL CHIPS BATCH STEPS
 *       the same, one launch of STEPS steps after the warm-up (for a profiler)
 *   bench_net resnet50 FILE [GLOBAL]
 *       ResNet-50's timing-only training step on tpu-v3's and on tpu-v4's host (8 replicas
 *       each), global batch GLOBAL (default 512: 64 per core; bench_resnet50 measures the
 *       simulated speed at 128 per core): the host time to build it (read the file, lower
 *       it, open the device, load) and to run it, against the limit of one second for both
 *       together; exits 1 over it. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One model's training step, built and loaded on a device. */
struct bench {
    struct tpu_chip_config chip;
    struct tpu_mlp_spec mlp;     /* the MLP's spec (the model keeps a pointer to it) */
    struct tpu_net *net;
    struct tpu_train_spec spec;
    struct tpu_model model;
    struct tpu_model_program mp;
    struct tpu_device *dev;
    uint32_t replicas, batch, global;
    void *in[4];                 /* each infeed tensor's bytes for one replica's step */
    size_t in_bytes[4];
    size_t out_bytes[4];
    char what[256];
};

struct feeder {
    struct bench *b;
    uint32_t core;               /* drain: the core whose outfeed it reads */
    int steps;
    int rc;
};

static void *feed(void *arg)
{
    struct feeder *f = arg;
    const struct tpu_model_program *mp = &f->b->mp;
    for (int s = 0; s < f->steps && !f->rc; s++)
        for (uint32_t c = 0; c < f->b->replicas && !f->rc; c++)
            for (uint32_t i = 0; i < mp->n_infeed && !f->rc; i++)
                f->rc = tpu_device_infeed(f->b->dev, c, f->b->in[i], f->b->in_bytes[i], 0,
                                          NULL);
    return NULL;
}

static void *drain(void *arg)
{
    struct feeder *f = arg;
    const struct tpu_model_program *mp = &f->b->mp;
    float buf[64];
    for (int s = 0; s < f->steps && !f->rc; s++)
        for (uint32_t i = 0; i < mp->n_outfeed && !f->rc; i++)
            f->rc = tpu_device_outfeed(f->b->dev, f->core, buf, f->b->out_bytes[i], 0, NULL,
                                       NULL);
    return NULL;
}

static void bench_free(struct bench *b)
{
    tpu_device_close(&b->dev);
    tpu_program_destroy(&b->mp.prog);
    tpu_net_destroy(&b->net);
    for (int i = 0; i < 4; i++)
        free(b->in[i]);
}

/* Builds the step of MODEL ("mlp" or a model file) for a global batch on `chips` chips of
 * `chip_name` (0: its host), opens the device (timing only or not) and loads the program
 * with the params' initial values. */
static int bench_open(struct bench *b, const char *model, const char *chip_name, uint32_t chips,
                      uint32_t global, bool timing_only)
{
    struct tpu_diag d = {0};
    memset(b, 0, sizeof *b);
    if (tpu_config_load_preset(chip_name, &b->chip, &d))
        goto fail;
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &b->chip);
    if (chips)
        s.n_chips = chips;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    s.n_threads = cpus > 0 ? (unsigned)cpus : 1;
    s.timing_only = timing_only;
    if (tpu_device_open(&s, &b->dev, &d))
        goto fail;
    b->replicas = tpu_device_n_replicas(b->dev);
    if (global % b->replicas) {
        fprintf(stderr, "bench_net: a global batch of %u does not split over %u replicas; "
                "give a multiple of %u\n", global, b->replicas, b->replicas);
        bench_free(b);
        return 1;
    }
    b->global = global;
    b->batch = global / b->replicas;
    if (!strcmp(model, "mlp")) {
        /* the main job's model (cli/demo.sh): 784-512-256-10, Adam 0.001, bf16 */
        tpu_mlp_default_spec(&b->mlp);
        b->mlp.n_layers = 3;
        b->mlp.sizes[0] = 784;
        b->mlp.sizes[1] = 512;
        b->mlp.sizes[2] = 256;
        b->mlp.sizes[3] = 10;
        b->mlp.optimizer = TPU_OPT_ADAM;
        b->mlp.learning_rate = 0.001f;
        tpu_mlp_model(&b->model, &b->mlp);
    } else {
        if (tpu_net_load_file(model, &b->net, &d))
            goto fail;
        tpu_train_spec_default(&b->spec); /* Adam 0.001, bf16 (1 pass) */
        b->spec.seed = 1;
        if (tpu_net_model(&b->model, b->net, &b->spec, &d))
            goto fail;
    }
    const struct tpu_build_shape shape = {.batch_per_replica = b->batch, .global_batch = global,
                                          .n_replicas = b->replicas, .cores_per_replica = 1};
    if (b->model.build(b->model.ctx, TPU_MODE_TRAIN, &shape, &b->mp, &d) ||
        tpu_device_load(b->dev, b->mp.prog, &d))
        goto fail;
    const struct tpu_program *p = b->mp.prog;
    if (!timing_only)
        for (uint32_t i = 0; i < b->mp.n_params; i++) {
            const struct tpu_buffer_desc *bd = tpu_program_buffer(p, b->mp.params[i]);
            float *v = malloc(tpu_buffer_bytes(bd));
            if (!v) {
                fprintf(stderr, "bench_net: out of memory\n");
                bench_free(b);
                return 1;
            }
            b->model.init_param(b->model.ctx, bd->name, bd->rows, bd->cols, v, 1);
            for (uint32_t c = 0; c < tpu_device_n_cores(b->dev) && !d.code; c++)
                tpu_device_write(b->dev, c, b->mp.params[i], v, tpu_buffer_bytes(bd), &d);
            free(v);
            if (d.code)
                goto fail;
        }
    uint32_t classes = 10;
    for (uint32_t i = 0; i < b->mp.n_outfeed; i++) {
        b->out_bytes[i] = tpu_buffer_bytes(tpu_program_buffer(p, b->mp.outfeed[i]));
        if (b->out_bytes[i] > 64 * sizeof(float)) {
            fprintf(stderr, "bench_net: outfeed %u of %zu bytes is larger than expected\n", i,
                    b->out_bytes[i]);
            bench_free(b);
            return 1;
        }
    }
    if (b->net) {
        uint32_t out_t;
        enum tpu_loss loss;
        struct tpu_layer_info li;
        tpu_net_output(b->net, &out_t, &loss);
        tpu_net_layer(b->net, out_t, &li);
        classes = li.out.c;
    }
    for (uint32_t i = 0; i < b->mp.n_infeed; i++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, b->mp.infeed[i]);
        b->in_bytes[i] = tpu_buffer_bytes(bd);
        if (timing_only)
            continue; /* a timing-only device takes NULL data */
        b->in[i] = malloc(b->in_bytes[i]);
        if (!b->in[i]) {
            fprintf(stderr, "bench_net: out of memory\n");
            bench_free(b);
            return 1;
        }
        size_t n = b->in_bytes[i] / 4;
        if (bd->dtype == TPU_INT32) { /* labels */
            int32_t *y = b->in[i];
            for (size_t k = 0; k < n; k++)
                y[k] = (int32_t)(k % classes);
        } else {
            float *x = b->in[i];
            for (size_t k = 0; k < n; k++)
                x[k] = (float)((k * 2654435761u) % 1000) / 1000.0f;
        }
    }
    snprintf(b->what, sizeof b->what,
             "%s, global batch %u on %s x %u chips (%u replicas of %u), bf16, Adam, %u host "
             "threads%s", b->net ? tpu_net_name(b->net) : "MLP 784-512-256-10", global,
             b->chip.name, s.n_chips ? s.n_chips : b->chip.chips_per_host, b->replicas,
             b->batch, s.n_threads, timing_only ? ", timing only" : "");
    return 0;
fail:
    fprintf(stderr, "bench_net: %s\n", d.msg);
    bench_free(b);
    return 1;
}

/* Runs `steps` steps in one launch; returns the seconds per step, or -1. */
static double bench_run(struct bench *b, int steps)
{
    struct tpu_diag d = {0};
    tpu_device_set_var(b->dev, b->mp.var_iterations, steps);
    struct feeder fin = {.b = b, .steps = steps};
    struct feeder *fout = calloc(b->replicas, sizeof *fout);
    pthread_t ft, *dt = calloc(b->replicas, sizeof *dt);
    if (!fout || !dt) {
        free(fout);
        free(dt);
        return -1;
    }
    double t0 = now_s();
    pthread_create(&ft, NULL, feed, &fin);
    for (uint32_t c = 0; c < b->replicas; c++) {
        fout[c] = (struct feeder){.b = b, .core = c, .steps = steps};
        pthread_create(&dt[c], NULL, drain, &fout[c]);
    }
    int rc = tpu_device_run(b->dev, 0, NULL, &d);
    pthread_join(ft, NULL);
    for (uint32_t c = 0; c < b->replicas; c++) {
        pthread_join(dt[c], NULL);
        rc = rc ? rc : fout[c].rc;
    }
    double el = now_s() - t0;
    rc = rc ? rc : fin.rc;
    if (rc)
        fprintf(stderr, "bench_net: %s\n", d.msg[0] ? d.msg : "infeed or outfeed failed");
    free(fout);
    free(dt);
    return rc ? -1 : el / steps;
}

static int serve(const char *model, uint32_t chips, uint32_t global, int steps_once)
{
    struct bench b;
    if (bench_open(&b, model, "tpu-v3", chips, global, false))
        return 1;
    if (bench_run(&b, 1) < 0) { /* warm-up: first touch of every buffer */
        bench_free(&b);
        return 1;
    }
    if (steps_once > 0) {
        double t = bench_run(&b, steps_once);
        if (t >= 0)
            printf("%s\nfunctional step (simulator) %.3f ms, %d steps\n", b.what, t * 1e3,
                   steps_once);
        bench_free(&b);
        return t < 0;
    }
    printf("ready %s\n", b.what);
    fflush(stdout);
    char line[64];
    int rc = 0;
    while (fgets(line, sizeof line, stdin)) {
        int steps = atoi(line);
        line[strcspn(line, "\n")] = '\0';
        if (steps < 1) {
            fprintf(stderr, "bench_net: a round needs a step count of at least 1; got '%s'\n",
                    line);
            rc = 1;
            break;
        }
        double t = bench_run(&b, steps);
        if (t < 0) {
            rc = 1;
            break;
        }
        printf("%.9f\n", t);
        fflush(stdout);
    }
    bench_free(&b);
    return rc;
}

/* ResNet-50's timing-only step on `chip`'s host: the host time of the build and of the run.
 * Returns 0 within the limit, 1 over it, -1 on an error. */
static int resnet50(const char *file, const char *chip, uint32_t global)
{
    double t0 = now_s();
    struct bench b;
    if (bench_open(&b, file, chip, 0, global, true))
        return -1;
    double t1 = now_s();
    double step = bench_run(&b, 1);
    double t2 = now_s();
    if (step < 0) {
        bench_free(&b);
        return -1;
    }
    struct tpu_core_counters ctr;
    tpu_device_counters(b.dev, 0, &ctr);
    struct tpu_program_memory mem;
    tpu_program_memory(b.mp.prog, &mem);
    double total = t2 - t0, sim_s = (double)ctr.cycles / (b.chip.clock_mhz * 1e6);
    printf("%s\n", b.what);
    printf("  %zu ops per replica's step, HBM per core %.1f GiB\n",
           tpu_program_n_ops(b.mp.prog),
           (double)mem.hbm_bytes / (1u << 30));
    printf("  build (read the file, lower, open the device, load) %8.1f ms\n", (t1 - t0) * 1e3);
    printf("  run one step (timing only)                          %8.1f ms\n", (t2 - t1) * 1e3);
    printf("  both                                                %8.1f ms  (limit 1000 ms; "
           "ratio to limit %.3f)\n", total * 1e3, total);
    printf("  simulated step %.2f ms (core 0: %llu cycles): %.0f images/s per chip\n",
           sim_s * 1e3, (unsigned long long)ctr.cycles,
           global / sim_s / (b.replicas / b.chip.cores_per_chip));
    bench_free(&b);
    return total < 1.0 ? 0 : 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_net serve MODEL CHIPS BATCH\n"
                    "       bench_net steps MODEL CHIPS BATCH STEPS\n"
                    "       bench_net resnet50 FILE [GLOBAL]\n"
                    "MODEL is a model file or 'mlp'; CHIPS 0 is the tpu-v3 host's 4\n");
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "serve"))
        return serve(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]), 0);
    if (argc >= 6 && !strcmp(argv[1], "steps"))
        return serve(argv[2], (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4]),
                     atoi(argv[5]) > 0 ? atoi(argv[5]) : 10);
    if (argc >= 3 && !strcmp(argv[1], "resnet50")) {
        const uint32_t global = argc > 3 ? (uint32_t)atoi(argv[3]) : 512;
        int over = 0;
        for (int i = 0; i < 2; i++) {
            int rc = resnet50(argv[2], i ? "tpu-v4" : "tpu-v3", global);
            if (rc < 0)
                return 1;
            over |= rc;
        }
        return over;
    }
    usage();
    return 2;
}
