/* A program of the library's user on MPI ranks, for test_mpi.py's fault cases: each rank
 * trains a small MLP as one host of the pod (a device of its chips with host/mpi's link, an
 * estimator with its host group), on an input that fails on one rank at one of its calls,
 * as a reader whose file went away would. The pass must end on every rank promptly with
 * that rank's error: the runtime calls the group's abort, which prints it (below) and ends
 * the job (MPI_Abort), so the other ranks, blocked in the next all-reduce, do not wait.
 *
 *   mpirun -np N mpi_pod_prog FAIL_RANK FAIL_CALL STEPS
 *
 * FAIL_RANK's FAIL_CALL-th input call (counting from 1; 0: never) fails with TPU_EIO. Prints
 * "rank R: trained S steps" on success; on the failing path the abort prints
 * "rank R: pod run failed: <message>" on stderr. Exits 0 only when training completes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/mpi.h"
#include "tpusim/runtime.h"

enum { FEATURES = 16, CLASSES = 4, EXAMPLES = 512 };

/* The dataset input, whose next fails on fail_rank at its fail_call-th call. */
struct failing_input {
    struct tpu_input input;
    struct tpu_dataset_input inner;
    uint32_t rank, fail_rank;
    uint64_t calls, fail_call;
};

static int failing_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                        void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct failing_input *f = ctx;
    if (f->rank == f->fail_rank && ++f->calls == f->fail_call) {
        d->code = TPU_EIO;
        snprintf(d->msg, sizeof d->msg, "host %u's input failed at its call %llu (shard %u): "
                 "the reader's file went away", f->rank, (unsigned long long)f->calls, shard);
        return TPU_EIO;
    }
    return f->inner.input.next(f->inner.input.ctx, mode, shard, batch, tensors, n_real, d);
}

static int failing_start(void *ctx, enum tpu_mode mode, uint64_t global_step,
                         uint32_t global_batch, struct tpu_diag *d)
{
    struct failing_input *f = ctx;
    return f->inner.input.start ? f->inner.input.start(f->inner.input.ctx, mode, global_step,
                                                       global_batch, d)
                                : 0;
}

static int failing_skip(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                        uint32_t *n_real, struct tpu_diag *d)
{
    struct failing_input *f = ctx;
    return f->inner.input.skip(f->inner.input.ctx, mode, shard, batch, n_real, d);
}

static void on_abort(void *ctx, int rc, const struct tpu_diag *d)
{
    const uint32_t *rank = ctx;
    fprintf(stderr, "rank %u: pod run failed (%s): %s\n", *rank, tpu_err_name(rc), d->msg);
    fflush(stderr);
}

int main(int argc, char **argv)
{
    struct tpu_mpi *m = NULL;
    struct tpu_diag d = {0};
    if (tpu_mpi_init(&argc, &argv, &m, &d)) {
        fprintf(stderr, "mpi_pod_prog: %s\n", d.msg);
        return 1;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: mpirun -np N mpi_pod_prog FAIL_RANK FAIL_CALL STEPS\n");
        tpu_mpi_finalize(&m, &d);
        return 2;
    }
    uint32_t rank = tpu_mpi_rank(m), n = tpu_mpi_size(m);
    tpu_mpi_on_abort(m, on_abort, &rank);

    /* a dataset every rank makes alike: class c's examples have feature j near 1 when
     * j % CLASSES == c */
    struct tpu_dataset ds;
    memset(&ds, 0, sizeof ds);
    ds.n_examples = EXAMPLES;
    ds.n_features = FEATURES;
    ds.image_rows = ds.image_cols = 4;
    ds.n_classes = CLASSES;
    ds.x = malloc(sizeof(float) * EXAMPLES * FEATURES);
    ds.y = malloc(sizeof(int32_t) * EXAMPLES);
    if (!ds.x || !ds.y)
        tpu_mpi_abort(m, 1);
    uint32_t r = 12345;
    for (uint32_t i = 0; i < EXAMPLES; i++) {
        ds.y[i] = (int32_t)(i * 7 % CLASSES);
        for (uint32_t j = 0; j < FEATURES; j++) {
            r = r * 1103515245u + 12345u;
            ds.x[i * FEATURES + j] = (float)(j % CLASSES == (uint32_t)ds.y[i]) +
                                     (float)((r >> 16) % 1000) / 2000.0f;
        }
    }

    struct tpu_chip_config chip;
    struct tpu_device_settings s;
    const struct tpu_pod_link *link = NULL;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    if (tpu_config_load_preset("tiny", &chip, &d) || tpu_mpi_pod_link(m, 1, &link, &d)) {
        fprintf(stderr, "rank %u: %s\n", rank, d.msg);
        tpu_mpi_abort(m, 1);
    }
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 1;
    s.n_threads = 1;
    s.pod = link;
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 2;
    spec.sizes[0] = FEATURES;
    spec.sizes[1] = 8;
    spec.sizes[2] = CLASSES;
    struct tpu_model model;
    tpu_mlp_model(&model, &spec);
    struct tpu_run_config cfg;
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = cfg.eval_batch_size = cfg.predict_batch_size = 16;
    cfg.iterations_per_loop = 2;
    cfg.num_hosts = n;
    cfg.host_group = tpu_mpi_host_group(m);
    cfg.seed = 3;
    if (tpu_device_open(&s, &dev, &d) ||
        tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d)) {
        fprintf(stderr, "rank %u: %s\n", rank, d.msg);
        tpu_mpi_abort(m, 1);
    }
    struct failing_input in = {.rank = rank, .fail_rank = (uint32_t)atoi(argv[1]),
                               .fail_call = strtoull(argv[2], NULL, 10)};
    tpu_dataset_input_init(&in.inner, &ds, cfg.seed);
    in.input = (struct tpu_input){.ctx = &in, .next = failing_next, .start = failing_start,
                                  .skip = in.inner.input.skip ? failing_skip : NULL};
    const uint64_t steps = strtoull(argv[3], NULL, 10);
    int rc = tpu_estimator_train(est, &in.input, steps, 0, &d);
    if (rc) {
        /* the runtime's abort ended the job before this; a runtime that returned must too */
        fprintf(stderr, "rank %u: training returned %s: %s\n", rank, tpu_err_name(rc), d.msg);
        tpu_mpi_abort(m, 1);
    }
    printf("rank %u: trained %llu steps\n", rank,
           (unsigned long long)tpu_estimator_global_step(est));
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    tpu_dataset_input_free(&in.inner);
    tpu_dataset_free(&ds);
    return tpu_mpi_finalize(&m, &d) ? 1 : 0;
}
