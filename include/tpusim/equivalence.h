/* The equivalence check: proof, step by step, that a sharded training run computes the same
 * model as the unsharded one.
 *
 * It trains the same model twice from the same initial params (the run's seed): once on the
 * device as configured (replicas, cores per replica, hosts, input partition dims) and once on
 * a device of one core (one replica, the whole global batch), feeding both the same examples
 * in the same order: the input function is read once per step with the global batch, and
 * each input_fn call of the sharded run gets its rows of that batch (the rows TPUEstimator's
 * call would take: the replicas take the global batch in order). After every step it reads
 * every param of both runs (weights and optimizer state, replica 0's, whole) and the loss of
 * the whole global batch, and reports the largest differences and a verdict against the bound
 * that holds for the configuration (struct tpu_equivalence_bound says which and why).
 *
 * The library prints nothing: each step's result goes to a callback, and the summary to the
 * caller's struct. BROADCAST training is refused: every replica sees the whole global batch,
 * so the sharded run trains on R copies of each example and is not the unsharded run.
 *
 * The bound assumes a model whose forward pass computes each example on its own; batch norm
 * does not (host/shard/equivalence.c says what to expect of it). */
#ifndef TPUSIM_EQUIVALENCE_H
#define TPUSIM_EQUIVALENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the sharded run may differ by, per step, and why. Both figures are relative:
 *   loss:   |loss_sharded - loss_single| <= loss_rel * |loss_single| (loss_rel_later from
 *           the second step on)
 *   params: for every param, max_i |a_i - b_i| <= param_rel * max_i |b_i| (b: one core's),
 *           the largest difference measured against the param's largest magnitude, so a
 *           weight that is nearly 0 is not held to a relative bound it cannot meet.
 * 0 means bit for bit. */
struct tpu_equivalence_bound {
    double loss_rel;         /* the first step's (both runs start from the same params) */
    double loss_rel_later;   /* the later steps' */
    double param_rel;
    bool exact;              /* both 0: the two runs make the same operations in the same order */
    char why[1000];           /* the reason, in a sentence or two */
};

/* One step's comparison. */
struct tpu_equivalence_step {
    uint64_t step;                   /* the global step after it (1, 2, ...) */
    float loss_sharded, loss_single; /* the mean loss over the global batch at this step */
    double loss_abs, loss_rel;       /* |difference| and |difference| / |loss_single| */
    double param_abs;                /* the largest |difference| of any element of any param */
    double param_rel;                /* the largest over params of max|difference| / max|b| */
    char worst_param[48];            /* the param of param_rel ("" when all are equal) */
    uint64_t worst_index;            /* its element with the largest difference (row-major) */
    uint32_t worst_replica;          /* the sharded run's replica whose copy differs most (every
                                        replica's copy of every param is compared) */
    float worst_sharded, worst_single; /* that element's values */
    double step_seconds_sharded, step_seconds_single; /* simulated device time of the step */
    bool within;                     /* both relative figures within the bound */
};

struct tpu_equivalence_report; /* below */

struct tpu_equivalence_settings {
    /* The device as configured (chip, chips, cores per replica, backend, ...). The one-core
     * device is made from it: the same chip with one core, one chip, one replica. */
    struct tpu_device_settings device;
    /* The run as configured. model_dir must be empty (both runs start from the seed's
     * initial params and write nothing), the device must compute values, and the training
     * input mode must not be BROADCAST. iterations_per_loop is taken as 1 (a step per launch,
     * so that both runs can be read after every step; a time or "auto" too). */
    struct tpu_run_config run;
    struct tpu_model model;          /* copied; its ctx serves both runs */
    const struct tpu_input *input;   /* the training input, read once per step with the global
                                        batch (borrowed; not used from two threads at once) */
    uint64_t steps;                  /* steps to train and compare, >= 1 */
    /* false (lockstep): after each step's comparison the sharded run takes the one-core run's
     * params (all of them, optimizer state too), so every step starts from the same state and
     * its differences are its own: the bound holds for any number of steps. true: each run
     * goes on from its own params and the differences accumulate (with one-pass bf16 matmuls
     * a rounding difference flips a bf16 rounding or a ReLU sooner or later, and from there
     * the runs drift apart by more than rounding without any sharding error). */
    bool free_running;
    /* Called after each step on the caller's thread (may be NULL), with the report so far
     * (its bound and shape are set from the first call on). Non-zero stops the check with
     * that error. */
    int (*on_step)(void *ctx, const struct tpu_equivalence_report *so_far,
                   const struct tpu_equivalence_step *step, struct tpu_diag *d);
    void *ctx;
};

struct tpu_equivalence_report {
    struct tpu_equivalence_bound bound;
    uint32_t n_replicas, cores_per_replica, n_cores, n_params;
    uint64_t n_param_values;         /* elements compared per step, over all params */
    uint64_t steps;                  /* steps compared */
    uint64_t steps_outside;          /* steps outside the bound */
    struct tpu_equivalence_step worst; /* the step with the largest param_rel (the first such) */
    double max_loss_rel;             /* the largest loss_rel over the steps */
    bool cores_redundant;            /* cores per replica > 1 and the model's lowering splits
                                        nothing over them (tpu_model_splits_over_cores): the
                                        bound is data parallelism's */
};

/* Whether the model, built for training on n_replicas replicas of cores_per_replica cores
 * with run's train batch and input_partition_dims, splits anything over a replica's cores: a
 * param cut by rows or columns, or input partition dims whose product is more than 1. When it
 * does not (a conv net without partition dims and without a dense pair, say), every core of
 * a replica runs the whole model on the replica's whole batch: the same work, redundantly.
 * *splits is true for one core per replica (nothing to split, nothing redundant). */
int tpu_model_splits_over_cores(const struct tpu_model *model, const struct tpu_run_config *run,
                                uint32_t n_replicas, uint32_t cores_per_replica, bool *splits,
                                struct tpu_diag *d);

/* Model parallelism's bound on the loss, relative: the partitioned lowering's (its test,
 * tests/test_net_partition.c, trains nets partitioned over 2 and 4 cores against one core and
 * holds the loss and the params to it: measured 3e-7 on the loss, 7.6e-6 on the params;
 * configs/models/README.md). The equivalence check and that test use this one constant. */
#define TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL 5e-5

/* The bound of a configuration: the sharded device's replicas and cores per replica, the
 * global batch, and whether the runs are free-running. Data parallelism (cores per replica
 * 1): bit for bit with one replica; else the loss of a step from the same params within
 * 2 gamma(G + 1) (gamma(n) = n u / (1 - n u), u = 2^-24) and the params within 2^-10 of
 * their largest value. Model parallelism (cores per replica > 1): the loss within
 * TPU_EQUIVALENCE_MODEL_PARALLEL_LOSS_REL (5e-5, the partitioned lowering's bound), the params
 * within 2^-10. Free-running, the loss after the
 * first step within 2^-12. host/shard/equivalence.c derives them. */
void tpu_equivalence_bound_of(uint32_t n_replicas, uint32_t cores_per_replica,
                              uint32_t global_batch, bool free_running,
                              struct tpu_equivalence_bound *out);

/* Runs the check: opens both devices, trains `steps` steps on each, compares after every
 * step, closes both. Returns 0 when every step ran (whether or not it was within the bound:
 * the report and the callback say), or an error with its sentence in d (a configuration that
 * cannot be checked, a run that failed, the input ending before `steps` steps). The report is
 * filled as far as the check went. */
int tpu_equivalence_check(const struct tpu_equivalence_settings *s,
                          struct tpu_equivalence_report *out, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
