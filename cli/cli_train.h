/* What the files of `tpusim train`, `tpusim evaluate` and `tpusim predict` share: the
 * options' values (struct train_opts) and the parsing that fills them. cli_train_options.c
 * holds the option table, the config file (--config) and the checks that join several
 * options; cli_train.c runs the commands and prints their summaries. Private to cli/. */
#ifndef TPUSIM_CLI_TRAIN_H
#define TPUSIM_CLI_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/dataset.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"

/* The longest value an option takes, in characters: a path (a file or directory the
 * command reads or writes), --model-dir (the runtime's model_dir field) and any other value. */
#define OPT_PATH_MAX 4000
#define OPT_MODEL_DIR_MAX (sizeof(((struct tpu_run_config *)0)->model_dir) - 1)
#define OPT_TEXT_MAX 255

/* What simulates the chip (--backend): the native C chip, the native chip with every matmul
 * on the Verilated RTL array (a matrix-unit provider, rtl/), or the SystemC/TLM-2.0 model
 * driven through TLM transactions (include/tpusim/systemc.h). */
enum train_backend { TRAIN_BACKEND_NATIVE, TRAIN_BACKEND_RTL, TRAIN_BACKEND_SYSTEMC };

/* The options' values. Strings are copies (never pointers into argv or a config file), so a
 * value outlives whatever it was read from; an empty string is an option not given. */
struct train_opts {
    const char *cmd;
    char chip[OPT_PATH_MAX + 1], data[OPT_PATH_MAX + 1], trace[OPT_PATH_MAX + 1];
    char output[OPT_PATH_MAX + 1];
    char vcd[OPT_PATH_MAX + 1]; /* --vcd: waveform of core 0's RTL array */
    enum train_backend backend; /* --backend */
    uint32_t chips, cores_per_replica, threads;
    bool no_share_replicas;     /* --no-share-replicas: settings.share_replicas off */
    uint64_t steps, max_steps;
    double epochs;
    char layers_text[OPT_TEXT_MAX + 1];
    bool layers_given;          /* --layers was given (it and --model exclude each other) */
    char model_file[OPT_PATH_MAX + 1]; /* --model: a JSON model file; "": the --layers MLP */
    /* The optimizer's options land in spec (the MLP's); a --model net's training spec takes
     * them from there and the AdamW and schedule options below (tpu__cli_train_fit_net). */
    struct tpu_mlp_spec spec;
    struct tpu_train_spec tspec;
    bool weight_decay_given, schedule_given, warmup_given, decay_steps_given, decay_rate_given;
    bool l2_given;
    bool tuner_given, target_overhead_given; /* --tuner, --tuner-target-overhead */
    struct tpu_run_config rc;
    unsigned verbose;
    bool json, reference, no_eval, timing_only;
    bool int8; /* --int8: evaluate/predict the checkpoint quantized to int8 */
    uint64_t limit;
    uint64_t check_equivalence; /* --check-equivalence N: steps to compare (0: no check) */
    bool equivalence_free_running; /* --equivalence-free-running */
    bool step_shares;           /* --step-shares */
    unsigned config_depth;   /* inside --config's file: 1 */
    bool length_from_config; /* --steps, --max-steps or --epochs came from the file */
    bool model_from_config;  /* --config's file named the --model file */
};

/* This process's part of a pod slice run as MPI ranks (`mpirun -np N tpusim train --hosts
 * N`, cli_ranks.c): rank h is host h. NULL where a process simulates every host. */
struct tpu_pod_link;
struct tpu_host_group;
#define TPU__CLI_ERROR_LINE_MAX 4096
struct tpu__cli_pod {
    uint32_t rank, size;
    void *mpi;                          /* host/mpi's struct tpu_mpi */
    const struct tpu_pod_link *link;    /* the device's settings.pod (set by the agreement) */
    const struct tpu_host_group *group; /* the estimator's host_group */
    bool agreed;                        /* every rank parsed the same options and took them:
                                           an error after this ends the whole job */
    bool shared_failure;                /* the ranks agreed on a failure every rank had: it
                                           was printed once, and every rank ends cleanly */
    char error_line[TPU__CLI_ERROR_LINE_MAX]; /* this rank's first error since the last
                                                 agreement (tpu__cli_set_error_capture) */
};

/* train, evaluate and predict on ranks (cli_ranks.c): the options that cannot work when
 * each host is a process of its own, refused with the reason and the fix; --hosts against
 * the world size. Then the ranks agree (tpu__cli_ranks_outcome). Makes the pod link for the
 * cores per replica. */
int tpu__cli_train_ranks_agree(const struct train_opts *o, struct tpu__cli_pod *pod, int rc);

/* The ranks' agreement on their outcomes, every rank at the same point of the command
 * (nothing of the pod runs between two agreements but the runtime's passes, whose failures
 * every rank shares or which end the job): rc is this rank's (0 or an exit code), its error
 * line kept in pod->error_line. When every rank has 0: 0. When every rank failed with the
 * same code and line: rank 0 prints it once, every rank returns the code and ends cleanly
 * (pod->shared_failure). Otherwise each failing rank prints its own line (after its rank);
 * then before the first agreement (pod->agreed false) every rank returns the first failing
 * rank's code, and after it the job is aborted. Without MPI (no pod): rc. */
int tpu__cli_ranks_outcome(struct tpu__cli_pod *pod, int rc);

/* The sums over the host group's ranks of n counters (mine[n] on this rank, sum[n] out; the
 * same n on every rank; sum may be mine), in integers (the order of the ranks does not
 * matter). Every rank must call it at the same point; it allocates before the collective,
 * and a rank out of memory aborts the job through the group (no rank waits forever). 0, or
 * the group's error (d says why). */
int tpu__cli_group_sum_u64(const struct tpu_host_group *g, const uint64_t *mine, uint64_t *sum,
                           uint32_t n, struct tpu_diag *d);

/* train, evaluate and predict as tpu__cli_train, on this rank's part of the pod (pod not
 * NULL: under mpirun) (cli_train.c). */
int tpu__cli_train_on(int argc, char **argv, struct tpu__cli_pod *pod);

/* The defaults of the options (train's; `tpusim fit` starts from them too). */
void tpu__cli_train_default_options(struct train_opts *o);
/* --model against --layers and the options only one of them has (AdamW, the schedules):
 * 0, or the exit code after printing the error. */
int tpu__cli_train_check_model_options(const struct train_opts *o);

/* Fills o (whose cmd is set: "train", "evaluate" or "predict") from the defaults and argv.
 * Returns 0, TPU__CLI_HELP after printing the help, or an exit code after an error (printed). */
int tpu__cli_train_parse_args(int argc, char **argv, struct train_opts *o);

/* Loads the data (--data DIR, else Fashion-MNIST from the Debian package): the test set, and
 * the training set too if need_train_data, checked against each other. The caller owns both
 * datasets (tpu_dataset_free). 0, or the exit code after printing the error. (cli_train_data.c) */
int tpu__cli_train_load_data(const struct train_opts *o, bool need_train_data,
                             struct tpu_dataset *train, struct tpu_dataset *test);

/* Sets the --layers MLP's input width and class count (o->spec.sizes) from the data, or for
 * evaluate and predict (and --int8) from the latest checkpoint in model_dir, and checks the
 * data against them. 0, or the exit code after printing the error. (cli_train_data.c) */
int tpu__cli_train_fit_mlp(struct train_opts *o, bool need_train_data,
                           const struct tpu_dataset *train, const struct tpu_dataset *test);

/* --model: reads the model file into *net (the caller frees it with tpu_net_destroy). 0, or
 * the exit code after printing the error. (cli_train_net.c) */
int tpu__cli_train_load_net(const struct train_opts *o, struct tpu_net **net);

/* Warns on stderr (tpusim's own warning) when every step of a --model run of `steps` (or up
 * to `max_steps`) from the model dir's latest checkpoint has a learning rate of 0.
 * (cli_train_net.c) */
void tpu__cli_train_warn_zero_rate(const struct train_opts *o, uint64_t steps,
                                   uint64_t max_steps);

/* --model: checks the data against the net's input and loss (before any work), and completes
 * o->tspec from the options (the optimizer's fields, the seed) and checks it. 0, or the exit
 * code after printing the error. (cli_train_net.c) */
int tpu__cli_train_fit_net(struct train_opts *o, const struct tpu_net *net,
                           bool need_train_data, const struct tpu_dataset *train,
                           const struct tpu_dataset *test);

/* The model as summaries name it: "MLP 784-512-256-10", or "model 'cnn' (cnn.json: 8
 * layers, 1,199,882 params)" for a net. (cli_train_net.c) */
void tpu__cli_train_describe(const struct train_opts *o, const struct tpu_net *net, char *buf,
                             size_t size);

/* The optimizer and its schedule as the summary names them: "Adam", "AdamW, cosine schedule
 * (warm-up 100 steps, decay over 1000)". (cli_train_net.c) */
void tpu__cli_train_optimizer_text(const struct train_opts *o, bool net, char *buf,
                                   size_t size);

/* --step-shares: the training steps after the first loop, from the device's per-op
 * statistics (cli_step_shares.c): their simulated device time and the shares of the cores'
 * time taken by all-reduce and by halo exchange. */
struct step_shares {
    struct tpu_device *dev;         /* set once the device is open */
    struct tpu_op_stats *first;     /* [cores][ops] after the first training loop */
    struct tpu_op_stats *now;       /* [cores][ops] after the latest */
    size_t n_ops;
    uint32_t n_cores;
    bool measured;                  /* a loop after the first ran */
    uint64_t steps;                 /* steps after the first loop */
    double device_s;                /* their simulated device time */
    double all_reduce_share, halo_share;
    const struct tpu_host_group *group; /* on ranks: the shares are the pod's (summed over
                                           every rank's cores); NULL: this device's */
};
/* The estimator's after_loop hook (ctx: the struct step_shares). */
int tpu__cli_step_shares_after_loop(void *ctx, const struct tpu_loop_info *li,
                                    struct tpu_diag *d);
void tpu__cli_step_shares_free(struct step_shares *s);

/* train --check-equivalence N: the sharded run against one core, a table or --json; the
 * exit code (1 when a step is outside the bound). (cli_equivalence.c) */
int tpu__cli_train_check_equivalence(struct train_opts *o);

/* TPUEstimator's sharding rules (shard.h) on the options, before the data is loaded and the
 * device opened, with the plan's own messages (exit 2): the mode of o->cmd, and for train
 * with eval_too evaluation's too; a --model file's infeed tensors are checked with the
 * partition dims (the --layers MLP's input width comes from the data: its dims are checked
 * when the runtime builds its plan). equivalence: for --check-equivalence, which refuses
 * BROADCAST, so a batch message does not suggest it. 0, or the exit code after printing the
 * error. (cli_train.c) */
struct tpu_chip_config;
struct tpu_device_settings;
int tpu__cli_train_check_plan(const struct train_opts *o, const struct tpu_chip_config *chip,
                              bool eval_too, bool equivalence);

/* The device of the options on `chip`: hosts x chips chips, --cores-per-replica, --threads,
 * --no-share-replicas;
 * the caller sets the rest (timing, trace, op statistics, the matrix unit). (cli_train.c) */
void tpu__cli_train_device_settings(const struct train_opts *o,
                                    const struct tpu_chip_config *chip,
                                    struct tpu_device_settings *s);

/* The values of a net's output per example: the classes (softmax cross-entropy) or the
 * targets' size (MSE). (cli_train_net.c) */
uint32_t tpu__cli_net_outputs(const struct tpu_net *net, enum tpu_loss *loss);

#endif
