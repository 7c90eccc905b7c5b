/* The options of `tpusim train`, `tpusim evaluate` and `tpusim predict`: the one table
 * (train_opts_table, see options.h) that parses the flags and makes --help, the JSON config
 * file (--config FILE: its keys are the long option names with '_' for '-', its values
 * numbers, strings or booleans, and input_partition_dims also lists and null; flags given after --config override it), the defaults and the
 * rules that join several options. Every value is checked here, before any work; running the
 * commands is cli_train.c's. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_train.h"
#include "options.h"
#include "tpusim/shard.h"

/* ---- option parsing ------------------------------------------------------------------------ */

static int parse_layers(const char *cmd, struct train_opts *o, const char *v)
{
    struct tpu_mlp_spec *s = &o->spec;
    uint32_t n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long w = strtoul(p, &end, 10);
        if (end == p || errno || w < 1 || w > 65536 || n + 1 >= TPU_MLP_MAX_LAYERS ||
            (*end && *end != ','))
            return tpu__cli_error(cmd, TPU_CLI_USAGE,
                                  "--layers '%s' is not a comma-separated list of 1 to %d widths "
                                  "from 1 to 65536; e.g. --layers 512,256",
                                  v, TPU_MLP_MAX_LAYERS - 1);
        s->sizes[1 + n++] = (uint32_t)w;
        p = *end ? end + 1 : end;
    }
    s->n_layers = n + 1; /* the hidden layers plus the classifier */
    /* shown as the model's shape: "512-256" */
    snprintf(o->layers_text, sizeof o->layers_text, "%s", v);
    for (char *c = o->layers_text; *c; c++)
        if (*c == ',')
            *c = '-';
    return 0;
}

static int set_layers(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *v)
{
    (void)opt;
    struct train_opts *o = p->target;
    o->layers_given = true;
    return parse_layers(p->cmd, o, v);
}

static int set_ipl(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt, const char *v)
{
    struct train_opts *o = p->target;
    struct tpu_diag d = {0};
    (void)opt;
    if (tpu_run_config_set_ipl(&o->rc, v, &d))
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s", d.msg);
    return 0;
}

/* --input-partition-dims: TPUConfig's input_partition_dims as Python writes it. */
static int set_partition_dims(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                              const char *v)
{
    struct train_opts *o = p->target;
    struct tpu_diag d = {0};
    (void)opt;
    if (tpu_partition_dims_parse(v, o->rc.input_partition_dims, &o->rc.n_input_partition_dims,
                                 &d))
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "--input-partition-dims: %s", d.msg);
    return 0;
}

static int load_config(const struct tpu__cli_parse *p, const char *path);

static int set_config(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *v)
{
    (void)opt;
    return load_config(p, v);
}

/* How long to train: a flag after --config replaces the file's choice (say "epochs" in the
 * file, --steps on the command line), as any other flag after it does. */
static void training_length_given(void *target)
{
    struct train_opts *o = target;
    if (o->config_depth)
        o->length_from_config = true;
    else if (o->length_from_config) {
        o->steps = o->max_steps = 0;
        o->epochs = 0;
        o->length_from_config = false;
    }
}

/* The subcommands an option belongs to (no scope: all three). An option given to a
 * subcommand it does not belong to is an error, never silently ignored. The estimator's
 * constructor arguments (TPUConfig, RunConfig, batch sizes, the model's hyperparameters)
 * belong to every subcommand, as TPUEstimator takes them all whatever it is asked to do
 * next: one command line or config file serves train, evaluate and predict. Those that a
 * subcommand does not use are accepted and have no effect. */
enum { CMD_TRAIN = 1, CMD_EVALUATE = 2, CMD_PREDICT = 4 };
static const char *const train_scopes[] = {"train", "evaluate", "predict", NULL};

#define T(f) TPU__CLI_FIELD(struct train_opts, f)
#define PATH .max_chars = OPT_PATH_MAX
#define STEPS_MAX (UINT64_C(1) << 40)
#define BATCH_MAX (1u << 24)
static const char *const backend_words[] = {"native", "rtl", "systemc", NULL};
static const int backend_values[] = {TRAIN_BACKEND_NATIVE, TRAIN_BACKEND_RTL,
                                     TRAIN_BACKEND_SYSTEMC};
static const char *const optimizer_words[] = {"adam", "sgd", "adamw", NULL};
static const char *const tuner_words[] = {"model", "keras", NULL};
static const int tuner_values[] = {TPU_TUNER_MODEL, TPU_TUNER_KERAS};
static const int optimizer_values[] = {TPU_OPT_ADAM, TPU_OPT_SGD_MOMENTUM, TPU_OPT_ADAMW};
static const char *const schedule_words[] = {"constant", "step", "cosine", NULL};
static const int schedule_values[] = {TPU_SCHEDULE_CONSTANT, TPU_SCHEDULE_STEP,
                                      TPU_SCHEDULE_COSINE};
static const char *const host_time_words[] = {"modeled", "measured", NULL};
static const int host_time_values[] = {TPU_HOST_TIME_MODELED, TPU_HOST_TIME_MEASURED};
static const uint64_t passes_only[] = {1, 3, 6};

static const struct tpu__cli_opt train_opts_table[] = {
    {.name = "--chip", .kind = TPU__CLI_TEXT, T(chip), PATH, .arg = "NAME|FILE",
     .group = "chip and device",
     .help = "chip preset or JSON file (default tpu-v3); training needs\n"
             "a bf16 matrix unit (tpu-v1's is int8 only)"},
    {.name = "--chips", .kind = TPU__CLI_U64, T(chips), .min = 1,
     .max = TPU__CLI_MAX_CHIPS_PER_HOST, .arg = "N",
     .help = "chips on each host (default: the chip's chips_per_host)"},
    {.name = "--hosts", .kind = TPU__CLI_U64, T(rc.num_hosts), .min = 1, .max = TPU__CLI_MAX_HOSTS,
     .arg = "N",
     .help = "hosts of the pod slice, simulated in this process\n"
             "(default 1), each driving --chips chips, with its own\n"
             "infeed thread and input clock: the device has hosts x\n"
             "chips chips; under mpirun, the number of ranks (each\n"
             "rank is one host: see the end of this help)"},
    {.name = "--cores-per-replica", .kind = TPU__CLI_U64, T(rc.num_cores_per_replica), .min = 1,
     .max = TPU__CLI_MAX_CORES_PER_REPLICA, .arg = "N",
     .help = "model parallelism (default 1): the model is split over N\n"
             "cores of each replica (configs/models/README.md); the\n"
             "--layers MLP is then lowered as a net of dense layers,\n"
             "pairs split by columns, then rows (same param names)"},
    {.name = "--threads", .kind = TPU__CLI_U64, T(threads), .min = 1, .max = 256, .arg = "N",
     .help = "host threads simulating the cores (default: all CPUs;\n"
             "on MPI ranks, the CPUs over the ranks on the machine,\n"
             "OMPI_COMM_WORLD_LOCAL_SIZE, at least 1)"},
    {.name = "--no-share-replicas", .kind = TPU__CLI_FLAG, T(no_share_replicas),
     .help = "every replica keeps and computes its own params and\n"
             "optimizer state (the same results; more host time and\n"
             "memory). Default: replicas share what they hold in common"},
    {.name = "--timing-only", .kind = TPU__CLI_FLAG, T(timing_only), .scope = CMD_TRAIN,
     .scope_why = "evaluating and predicting compute values",
     .help = "count cycles, compute no values (no evaluation)"},
    {.name = "--trace", .kind = TPU__CLI_TEXT, T(trace), PATH, .arg = "FILE",
     .help = "write the timeline (Chrome trace JSON, opens in Perfetto)"},
    {.name = "--backend", .kind = TPU__CLI_ENUM, T(backend), .words = backend_words,
     .values = backend_values,
     .help = "native: the chip in C (default); rtl: every matmul on\n"
             "the Verilated RTL array (small MXUs only, e.g. --chip\n"
             "tiny); systemc: the SystemC/TLM-2.0 model of the chip,\n"
             "driven by TLM transactions (same values and cycles)"},
    {.name = "--vcd", .kind = TPU__CLI_TEXT, T(vcd), PATH, .arg = "FILE",
     .help = "--backend rtl: waveform (VCD) of core 0's array; about\n"
             "12 KB per cycle of an 8x8 array: use a few --steps"},

    {.name = "--model", .kind = TPU__CLI_TEXT, T(model_file), PATH, .arg = "FILE.json",
     .group = "model and data",
     .help = "a model file: layers, shapes and loss (configs/models/,\n"
             "e.g. cnn.json); evaluate and predict take the same file"},
    {.name = "--layers", .kind = TPU__CLI_CUSTOM, .set = set_layers, .max_chars = OPT_TEXT_MAX,
     .arg = "512,256",
     .help = "or an MLP: hidden layer widths (default 512,256); input\n"
             "width and classes from the data (784, 10 for Fashion-MNIST)"},
    {.name = "--optimizer", .kind = TPU__CLI_ENUM, T(spec.optimizer), .words = optimizer_words,
     .values = optimizer_values,
     .help = "default adam (learning rate 0.001); sgd: momentum;\n"
             "adamw (--model): Adam with decoupled weight decay"},
    {.name = "--learning-rate", .kind = TPU__CLI_DOUBLE, T(spec.learning_rate), .lo = 1e-9,
     .hi = 1000, .arg = "X", .help = "step size (default 0.001; a schedule's initial rate)"},
    {.name = "--weight-decay", .kind = TPU__CLI_DOUBLE, T(tspec.weight_decay), .lo = 0,
     .hi = 0.999999, .arg = "X", TPU__CLI_GIVEN(struct train_opts, weight_decay_given),
     .help = "adamw's decoupled weight decay (default 0.004, Keras's)"},
    {.name = "--lr-schedule", .kind = TPU__CLI_ENUM, T(tspec.schedule), .words = schedule_words,
     .values = schedule_values, TPU__CLI_GIVEN(struct train_opts, schedule_given),
     .help = "--model: the learning rate by step (default constant);\n"
             "step: times --decay-rate every --decay-steps steps;\n"
             "cosine: linear warm-up over --warmup-steps, then a\n"
             "cosine down to rate x --decay-rate over --decay-steps;\n"
             "tpusim (not TPUEstimator) warns when every step of\n"
             "the run has a rate of 0"},
    {.name = "--warmup-steps", .kind = TPU__CLI_U64, T(tspec.warmup_steps), .min = 0,
     .max = UINT32_MAX, .arg = "N", TPU__CLI_GIVEN(struct train_opts, warmup_given),
     .help = "cosine's linear warm-up from 0 (default 0)"},
    {.name = "--decay-steps", .kind = TPU__CLI_U64, T(tspec.decay_steps), .min = 1,
     .max = UINT32_MAX, .arg = "N", TPU__CLI_GIVEN(struct train_opts, decay_steps_given),
     .help = "step: steps per decay; cosine: the cosine's length\n"
             "(required by both)"},
    {.name = "--decay-rate", .kind = TPU__CLI_DOUBLE, T(tspec.decay_rate), .lo = 0, .hi = 1,
     .arg = "X", TPU__CLI_GIVEN(struct train_opts, decay_rate_given),
     .help = "step: the factor per decay (required, above 0);\n"
             "cosine: the final rate's fraction (default 0)"},
    {.name = "--momentum", .kind = TPU__CLI_DOUBLE, T(spec.momentum), .lo = 0, .hi = 0.999999,
     .arg = "X", .help = "sgd's momentum (default 0.9)"},
    {.name = "--beta1", .kind = TPU__CLI_DOUBLE, T(spec.beta1), .lo = 0, .hi = 0.999999,
     .arg = "X", .help = "adam's first moment decay (default 0.9)"},
    {.name = "--beta2", .kind = TPU__CLI_DOUBLE, T(spec.beta2), .lo = 0, .hi = 0.999999,
     .arg = "X", .help = "adam's second moment decay (default 0.999)"},
    {.name = "--epsilon", .kind = TPU__CLI_DOUBLE, T(spec.epsilon), .lo = 1e-12, .hi = 1,
     .arg = "X", .help = "adam's epsilon (default 1e-7)"},
    {.name = "--l2", .kind = TPU__CLI_DOUBLE, T(spec.l2), .lo = 0, .hi = 10, .arg = "X",
     TPU__CLI_GIVEN(struct train_opts, l2_given),
     .help = "weight decay added to the gradients (default 0)"},
    {.name = "--passes", .kind = TPU__CLI_U64, T(spec.passes), .min = 1, .max = 6,
     .only = passes_only, .n_only = 3, .values_help = "(bf16, XLA HIGH, XLA HIGHEST)",
     .help = "matmul precision: bf16 inputs (default), or fp32 in passes"},
    {.name = "--data", .kind = TPU__CLI_TEXT, T(data), PATH, .arg = "DIR",
     .help = "a directory holding an IDX set (Fashion-MNIST's\n"
             "names, or train-images*, train-labels*, t10k-images*,\n"
             "t10k-labels*) or a NumPy set: x_train.npy, y_train.npy,\n"
             "x_test.npy, y_test.npy (Keras's load_data names);\n"
             "x (N,h,w,c), (N,h,w) or (N,features), y (N,) labels,\n"
             "or float targets (N,k) for mean_squared_error;\n"
             "uint8 scales by 1/255, other types are taken as they\n"
             "are (default: Fashion-MNIST, the Debian package's path)"},
    {.name = "--seed", .kind = TPU__CLI_U64, T(rc.seed), .min = 0, .max = UINT64_MAX, .arg = "N",
     .help = "initialization and shuffling (default 1)"},
    {.name = "--reference", .kind = TPU__CLI_FLAG, T(reference), .scope = CMD_TRAIN,
     .scope_why = "the host reference is trained beside the chip",
     .help = "also train the same model in fp32 on the host\nand compare"},
    {.name = "--no-eval", .kind = TPU__CLI_FLAG, T(no_eval), .scope = CMD_TRAIN,
     .scope_why = "it skips the evaluation after training",
     .help = "do not evaluate after training"},

    {.name = "--steps", .kind = TPU__CLI_U64, T(steps), .min = 1, .max = STEPS_MAX,
     .before = training_length_given, .scope = CMD_TRAIN | CMD_EVALUATE,
     .scope_why = "predict reads the whole test set (or --limit examples)", .arg = "N",
     .group = "TPUConfig / RunConfig",
     .help = "train N steps; evaluate N batches of\n"
             "--eval-batch-size (default: the whole test set)"},
    {.name = "--max-steps", .kind = TPU__CLI_U64, T(max_steps), .min = 1, .max = STEPS_MAX,
     .before = training_length_given, .scope = CMD_TRAIN,
     .scope_why = "evaluate takes --steps batches", .arg = "N",
     .help = "train up to global step N (or --epochs)"},
    {.name = "--epochs", .kind = TPU__CLI_DOUBLE, T(epochs), .lo = 1e-6, .hi = 1e6,
     .before = training_length_given, .scope = CMD_TRAIN,
     .scope_why = "evaluate takes --steps batches", .arg = "X",
     .help = "train X epochs (default 1)"},
    {.name = "--iterations-per-loop", .kind = TPU__CLI_CUSTOM, .set = set_ipl,
     .max_chars = OPT_TEXT_MAX, .arg = "N|Ns|Nm|Nh|auto",
     .help = "steps per launch (default 100); or a simulated time per\n"
             "launch, sized by TPUEstimator's rule (its\n"
             "IterationCountEstimator: the target over the mean step\n"
             "time of the last 20 launches, held when close and\n"
             "stable, at least 1); or auto: --tuner chooses"},
    {.name = "--tuner", .kind = TPU__CLI_ENUM, T(rc.tuner.kind), .words = tuner_words,
     .values = tuner_values, TPU__CLI_GIVEN(struct train_opts, tuner_given),
     .values_help = "(model: tpusim's own, keras: Keras 2.15's StepsPerExecutionTuner)",
     .help = "who chooses with --iterations-per-loop auto (default\n"
             "model): model, tpusim's own (the smallest loop whose host\n"
             "overhead share is under --tuner-target-overhead, at most\n"
             "--log-step-count-steps and --save-checkpoints-steps when\n"
             "checkpoints are written);\n"
             "keras, Keras 2.15's StepsPerExecutionTuner on simulated\n"
             "time (from 1 step, x1.5 or x0.5 every 10 measurements\n"
             "5 s apart)"},
    {.name = "--tuner-target-overhead", .kind = TPU__CLI_DOUBLE, T(rc.tuner.target_overhead),
     .lo = 1e-4, .hi = 0.5, .arg = "X",
     TPU__CLI_GIVEN(struct train_opts, target_overhead_given),
     .help = "the model tuner's host-overhead share (default 0.02)"},
    {.name = "--train-batch-size", .kind = TPU__CLI_U64, T(rc.train_batch_size), .min = 1,
     .max = BATCH_MAX, .arg = "N", .help = "global batch (default 512, as the next two)"},
    {.name = "--eval-batch-size", .kind = TPU__CLI_U64, T(rc.eval_batch_size), .min = 1,
     .max = BATCH_MAX, .arg = "N", .help = "global batch of evaluation"},
    {.name = "--predict-batch-size", .kind = TPU__CLI_U64, T(rc.predict_batch_size), .min = 1,
     .max = BATCH_MAX, .arg = "N", .help = "global batch of prediction"},
    {.name = "--per-host-input-for-training", .kind = TPU__CLI_ENUM,
     T(rc.per_host_input_for_training), .words = tpu__cli_input_mode_words,
     .values = tpu__cli_input_mode_values,
     .help = "how the global batch is split (default PER_HOST_V2)"},
    {.name = "--eval-training-input-configuration", .kind = TPU__CLI_ENUM,
     T(rc.eval_training_input_configuration), .words = tpu__cli_eval_input_words,
     .values = tpu__cli_eval_input_values,
     .help = "SLICED: evaluation and prediction read once, on host 0,\n"
             "sliced over the replicas; PER_HOST_V1 (default): as\n"
             "--per-host-input-for-training says"},
    {.name = "--input-partition-dims", .kind = TPU__CLI_CUSTOM, .set = set_partition_dims,
     .max_chars = OPT_TEXT_MAX, .arg = "DIMS",
     .help = "spatial partitioning of the input over a replica's\n"
             "cores, as in Python: '[[1, 2, 1, 1], None]' (features\n"
             "NHWC, then labels); None: every core gets all of it;\n"
             "product 1: logical core 0 only; otherwise the product\n"
             "is --cores-per-replica. PER_HOST_V2 only"},
    {.name = "--model-dir", .kind = TPU__CLI_TEXT, T(rc.model_dir),
     .max_chars = OPT_MODEL_DIR_MAX, .arg = "DIR",
     .help = "checkpoints (safetensors) and metrics.jsonl; at most\n511 characters"},
    {.name = "--save-checkpoints-steps", .kind = TPU__CLI_U64, T(rc.save_checkpoints_steps),
     .min = 1, .max = STEPS_MAX, .arg = "N",
     .help = "a checkpoint every N steps (default: at the start and\nthe end only)"},
    {.name = "--keep-checkpoint-max", .kind = TPU__CLI_U64, T(rc.keep_checkpoint_max), .min = 0,
     .max = 1000000, .arg = "N", .help = "checkpoints kept (default 5; 0: all)"},
    {.name = "--log-step-count-steps", .kind = TPU__CLI_U64, T(rc.log_step_count_steps),
     .min = 0, .max = STEPS_MAX, .arg = "N",
     .help = "a log line (--verbose 2) at the first loop boundary at\n"
             "least N steps after the last one, as TPUEstimator's step\n"
             "counter hook (default 100)"},
    {.name = "--host-call-every-n-steps", .kind = TPU__CLI_U64, T(rc.host_call_every_n_steps),
     .min = 0, .max = STEPS_MAX, .arg = "N", .help = "host calls every N steps (default 0: never)"},
    {.name = "--initial-infeed-sleep-secs", .kind = TPU__CLI_DOUBLE,
     T(rc.initial_infeed_sleep_secs), .lo = 0, .hi = 3600, .arg = "X",
     .help = "wait before the first infeed (default 0)"},
    {.name = "--strict-input", .kind = TPU__CLI_FLAG, T(rc.strict_input),
     .help = "a finite training input that ends early is an error"},
    {.name = "--host-time", .kind = TPU__CLI_ENUM, T(rc.host_time), .words = host_time_words,
     .values = host_time_values,
     .help = "how host phases are charged (default modeled);\n"
             "measured: the wall time of input, hooks and\n"
             "checkpoints, launches still modeled (--launch-us:\n"
             "there is no real launch to time)"},

    {.name = "--verbose", .kind = TPU__CLI_U64, T(verbose), .min = 0, .max = 2, .arg = "0|1|2",
     .group = "output", .help = "0 silent, 1 progress bar (default), 2 a line per epoch"},
    {.name = "--json", .kind = TPU__CLI_FLAG, T(json), .help = "machine-readable summary"},
    {.name = "--config", .kind = TPU__CLI_CUSTOM, .set = set_config, PATH, .arg = "FILE.json",
     .help = "options from a file: {\"steps\": 100, \"json\": true};\n"
             "the keys are these options' names with '_' for '-'"},
    {.name = "--limit", .kind = TPU__CLI_U64, T(limit), .min = 1, .max = STEPS_MAX,
     .scope = CMD_PREDICT, .scope_why = "evaluate takes --steps batches instead", .arg = "N",
     .help = "only the first N test examples"},
    {.name = "--output", .kind = TPU__CLI_TEXT, T(output), PATH, .scope = CMD_PREDICT,
     .scope_why = "only predict writes logits", .arg = "FILE.npy", .help = "write the logits"},
    {.name = "--step-shares", .kind = TPU__CLI_FLAG, T(step_shares), .scope = CMD_TRAIN,
     .scope_why = "it measures training steps",
     .help = "report the steady step time and the shares of it\n"
             "taken by all-reduce and halo exchange (the steps\n"
             "after the first loop; per-op statistics)"},
    {.name = "--check-equivalence", .kind = TPU__CLI_U64, T(check_equivalence), .min = 1,
     .max = 100000, .scope = CMD_TRAIN, .scope_why = "it trains the model twice", .arg = "N",
     .help = "train N steps sharded as configured and on one core\n"
             "(the same examples), compare loss and params after\n"
             "each step with the bound; exit 1 if outside it;\n"
             "each step starts both runs from the one-core params.\n"
             "It uses the model, data, optimizer, seed, train batch,\n"
             "chip and sharding options and --json; the loop size\n"
             "(one step per loop), checkpoint, logging, host-time,\n"
             "eval and predict batch, --no-eval and --verbose options\n"
             "do not apply to it (--step-shares, --tuner, --trace,\n"
             "--model-dir, --reference, --timing-only: refused)"},
    {.name = "--equivalence-free-running", .kind = TPU__CLI_FLAG,
     T(equivalence_free_running), .scope = CMD_TRAIN,
     .scope_why = "it is a mode of --check-equivalence",
     .help = "--check-equivalence: let each run go on from its own\n"
             "params (the differences accumulate)"},
    {.name = "--int8", .kind = TPU__CLI_FLAG, T(int8), .scope = CMD_EVALUATE | CMD_PREDICT,
     .scope_why = "it quantizes a trained checkpoint: train in bf16, then evaluate or predict "
                  "with --int8",
     .help = "int8 weights and activations\n"
             "quantized from the checkpoint (per-channel weights,\n"
             "activations calibrated on 1000 training examples), int8\n"
             "matmuls; chips with int8 MXUs (tpu-v1, tpu-v4, tiny)"},
};
#undef T
#undef PATH

const struct tpu__cli_opts tpu__cli_train_options = {
    .opts = train_opts_table,
    .n_opts = sizeof train_opts_table / sizeof train_opts_table[0],
    .usage =
        "usage: tpusim train    [options]   train a model (--model FILE, or an MLP) on the\n"
        "                                   simulated chip, then evaluate it\n"
        "       tpusim evaluate [options]   evaluate the latest checkpoint in --model-dir\n"
        "       tpusim predict  [options]   predict with it; --output writes the logits (.npy)\n"
        "Options marked [train], [train, evaluate] or [predict] belong to those subcommands only;\n"
        "the others to all three (as TPUEstimator's constructor arguments do: those a subcommand\n"
        "does not use have no effect). evaluate and predict need --model-dir with a checkpoint.\n"
        "Input modes follow TPUEstimator (input_fn per replica, per host, or once on host 0 with\n"
        "the global batch for BROADCAST, every replica seeing all of it). Where tpusim differs:\n"
        "--hosts are simulated in one process and share one input (the data set), so the calls\n"
        "of a step are made one at a time in host order, each on its host's infeed thread, and\n"
        "several hosts read the same examples as one; evaluation and prediction pad the last\n"
        "batch and count every example once (also under BROADCAST). With --cores-per-replica\n"
        "above 1 and no --input-partition-dims, every core of a replica receives the whole\n"
        "batch (TPUEstimator feeds logical core 0 only).\n"
        "\n",
    .footer =
        "Paths take at most 4000 characters, other values 255. Output paths are checked before\n"
        "any work: their directory must exist and be writable.\n"
        "\n"
        "Hosts as MPI ranks (a tpusim built with -Dmpi=enabled):\n"
        "    mpirun -np N tpusim train --hosts N [options]\n"
        "runs host h of the pod slice as rank h: its chips (--chips), its own input pipeline\n"
        "and infeed thread; the gradients cross MPI, and the simulated interconnect's time is\n"
        "charged. The params, losses and cycles are those of one process\n"
        "with --hosts N, bit for bit. Every rank takes the same command line (checked at start);\n"
        "rank 0 prints and writes the checkpoints and metrics, the others print only their\n"
        "errors (\"rank h: ...\"); an error every rank has is printed once, an error on some\n"
        "ranks ends every rank. Every rank must read the same --data (checked). --trace FILE:\n"
        "rank h > 0 writes FILE.rank<h> (its own cores). `mpirun ... tpusim evaluate --hosts N`\n"
        "evaluates the same way, and `mpirun ... tpusim predict --hosts N` predicts: every\n"
        "rank gets every example's row, the rows of one process, and rank 0 writes --output.\n"
        "Not on ranks: the other commands (fit, gemm, ...), --check-equivalence, --backend\n"
        "systemc, --host-time measured, a replica's cores on several hosts\n"
        "(--cores-per-replica above --chips x the chip's cores per chip).\n",
    .help_column = 32,
    .text_max = OPT_TEXT_MAX,
    .scope_names = train_scopes,
};

static unsigned cmd_bit(const char *cmd)
{
    return !strcmp(cmd, "train") ? CMD_TRAIN : !strcmp(cmd, "evaluate") ? CMD_EVALUATE
                                                                         : CMD_PREDICT;
}

/* "input_partition_dims": [[1, 2, 1, 1], null] (JSON's natural form; the command line's
 * Python text is taken as a string too): the same text the command line gives, checked here
 * so that an error names the file and its key; null alone is None (no partition dims). */
static int config_partition_dims(const struct tpu__cli_parse *p, const char *path,
                                 const char *key, const struct tpu__cli_opt *opt, json_t *val)
{
    const char *cmd = p->cmd;
    if (json_is_null(val))
        return 0;
    char *text = json_dumps(val, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory");
    struct tpu_partition_dims dims[2];
    uint32_t n = 0;
    struct tpu_diag d = {0};
    int rc = 0;
    if (strlen(text) > OPT_TEXT_MAX)
        rc = tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' is %zu characters as text; at most "
                            "%d: give at most two lists of at most %d counts", path, key,
                            strlen(text), OPT_TEXT_MAX, TPU_PARTITION_MAX_RANK);
    else if (tpu_partition_dims_parse(text, dims, &n, &d))
        rc = tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' %s: %s", path, key, text, d.msg);
    else
        rc = tpu__cli_opts_set(p, opt, text, true);
    free(text);
    return rc;
}

/* One member of a config file: "learning_rate": 0.1 means --learning-rate 0.1, "json": true
 * means --json (false: off). String values are copied into o before the JSON is freed. */
static int config_member(const struct tpu__cli_parse *p, const char *path, const char *key,
                         json_t *val)
{
    const char *cmd = p->cmd;
    char name[96], text[64];
    if (strlen(key) > 60 || !strcmp(key, "help"))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: unknown option '%.60s'; the keys are the "
                              "long options of 'tpusim %s --help' with '_' for '-'", path, key,
                              cmd);
    snprintf(name, sizeof name, "--%s", key);
    for (char *c = name + 2; *c; c++)
        if (*c == '_')
            *c = '-';
    if (!strcmp(name, "--config"))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: 'config': a config file cannot name "
                              "another; put the options of both in one file", path);
    const struct tpu__cli_opt *opt = tpu__cli_opts_find(p->table, name);
    if (json_is_boolean(val)) {
        if (!opt || opt->kind != TPU__CLI_FLAG)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' is not a true/false option; "
                                  "give it the value it takes on the command line (see "
                                  "'tpusim %s --help')", path, key, cmd);
        return tpu__cli_opts_set(p, opt, NULL, json_is_true(val));
    }
    const char *v = text;
    if (!strcmp(name, "--input-partition-dims") && (json_is_array(val) || json_is_null(val)))
        return config_partition_dims(p, path, key, opt, val);
    if (json_is_integer(val))
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(val));
    else if (json_is_real(val))
        snprintf(text, sizeof text, "%.17g", json_real_value(val));
    else if (json_is_string(val))
        v = json_string_value(val); /* whole: jansson rejects \u0000 by default */
    else if (!strcmp(name, "--input-partition-dims"))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' must be a list of one or two "
                              "entries, each a list of counts or null, e.g. [[1, 2, 1, 1], "
                              "null], or the same as a string in Python's form", path, key);
    else
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' must be a number, a string, true "
                              "or false", path, key);
    if (opt && opt->kind == TPU__CLI_FLAG)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: '%s' is a true/false option: give it "
                              "true or false", path, key);
    if (!opt)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s: unknown option '%s'; the keys are the "
                              "long options of 'tpusim %s --help' with '_' for '-'", path, key,
                              cmd);
    int rc = tpu__cli_opts_set(p, opt, v, true);
    if (!rc && !strcmp(name, "--model"))
        ((struct train_opts *)p->target)->model_from_config = true;
    return rc;
}

/* --config FILE: the options of a JSON object, through the same table as the command line. */
static int load_config(const struct tpu__cli_parse *p, const char *path)
{
    struct train_opts *o = p->target;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "--config '%s' is a directory; give a JSON "
                              "file of options, e.g. {\"steps\": 100, \"chip\": \"tiny\"}", path);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s:%d:%d: %s", path, je.line, je.column,
                              je.text);
    int rc = 0;
    o->config_depth++;
    if (!json_is_object(root)) {
        rc = tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s: the config must be a JSON object of "
                            "options, e.g. {\"learning_rate\": 0.1}", path);
    } else {
        const char *key;
        json_t *val;
        json_object_foreach(root, key, val)
        {
            if ((rc = config_member(p, path, key, val)))
                break;
        }
    }
    o->config_depth--;
    json_decref(root);
    return rc;
}

/* The defaults, as --help states them. */
static void default_options(struct train_opts *o)
{
    snprintf(o->chip, sizeof o->chip, "tpu-v3");
    o->verbose = 1;
    tpu_mlp_default_spec(&o->spec);
    o->spec.optimizer = TPU_OPT_ADAM; /* Keras's defaults: Adam, learning rate 0.001 */
    o->spec.learning_rate = 0.001f;
    tpu_train_spec_default(&o->tspec); /* AdamW's weight decay; the schedule's fields */
    tpu_run_config_default(&o->rc);
    o->rc.seed = 1;
    o->rc.train_batch_size = o->rc.eval_batch_size = o->rc.predict_batch_size = 512;
    parse_layers(o->cmd, o, "512,256");
}

/* --model against --layers, and the options that only one of them has: AdamW and the
 * learning-rate schedules are the layer graph's (net.h's tpu_train_spec), --int8 and
 * --reference the MLP's. */
static int check_model_options(const struct train_opts *o)
{
    const char *cmd = o->cmd;
    const struct tpu_train_spec *t = &o->tspec;
    if (o->model_file[0] && o->layers_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "give one of --model and --layers: --model "
                              "FILE reads a model file, --layers is the MLP's shorthand");
    if (o->weight_decay_given && o->spec.optimizer != TPU_OPT_ADAMW)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--weight-decay is AdamW's decoupled weight "
                              "decay: give --optimizer adamw with it (or --l2 for sgd and "
                              "adam)");
    if (o->spec.optimizer == TPU_OPT_ADAMW && o->l2_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--l2 with --optimizer adamw: AdamW decays "
                              "the weights itself; give --weight-decay instead of --l2");
    const char *sched_opt = o->warmup_given       ? "--warmup-steps"
                            : o->decay_steps_given ? "--decay-steps"
                            : o->decay_rate_given  ? "--decay-rate" : NULL;
    if (sched_opt && (!o->schedule_given || t->schedule == TPU_SCHEDULE_CONSTANT))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s shapes a learning-rate schedule, and "
                              "%s: give --lr-schedule step or cosine with it, or leave it "
                              "out", sched_opt, o->schedule_given ? "the schedule is constant"
                              : "no --lr-schedule was given");
    if (t->schedule == TPU_SCHEDULE_STEP && t->warmup_steps > 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--warmup-steps is the cosine schedule's "
                              "linear warm-up; the step schedule has none: give --lr-schedule "
                              "cosine, or leave --warmup-steps out");
    if (t->schedule != TPU_SCHEDULE_CONSTANT && !o->decay_steps_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-schedule %s needs --decay-steps N (%s)",
                              t->schedule == TPU_SCHEDULE_STEP ? "step" : "cosine",
                              t->schedule == TPU_SCHEDULE_STEP ? "the steps between two decays"
                              : "the steps of the cosine after the warm-up");
    if (t->schedule == TPU_SCHEDULE_STEP && !(o->decay_rate_given && t->decay_rate > 0))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-schedule step needs --decay-rate X "
                              "above 0 and at most 1 (the factor per decay, e.g. 0.5)%s",
                              o->decay_rate_given ? "; got 0" : "");
    if (!o->model_file[0]) {
        if (o->spec.optimizer == TPU_OPT_ADAMW)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--optimizer adamw trains a model of "
                                  "--model FILE; the --layers MLP takes adam or sgd");
        if (o->schedule_given)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-schedule trains a model of --model "
                                  "FILE; the --layers MLP trains at a constant --learning-rate: "
                                  "leave --lr-schedule out, or give --model");
        return 0;
    }
    if (o->int8)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--int8 quantizes the --layers MLP's "
                              "checkpoint; a --model net runs bf16 or fp32 matmuls (--passes): "
                              "leave --int8 out");
    if (o->reference)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--reference trains the --layers MLP in fp32 "
                              "on the host; a --model net has no host reference in tpusim "
                              "train: leave --reference out");
    return 0;
}

/* The rules that join several options, after each was parsed on its own. */
static int check_combinations(const struct train_opts *o)
{
    int given = (o->steps > 0) + (o->max_steps > 0) + (o->epochs > 0);
    if (given > 1)
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "give one of --steps, --max-steps and "
                              "--epochs");
    if (strcmp(o->cmd, "train") && !o->rc.model_dir[0])
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "give --model-dir: '%s' reads the "
                              "checkpoint a 'tpusim train --model-dir DIR' wrote", o->cmd);
    if (o->timing_only && o->reference)
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--timing-only computes no values: it "
                              "goes with 'tpusim train' without --reference");
    int rc = check_model_options(o);
    if (rc)
        return rc;
    if (o->tuner_given && !o->rc.iterations_per_loop_auto)
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--tuner chooses the loop size of "
                              "--iterations-per-loop auto; give --iterations-per-loop auto "
                              "with it, or leave --tuner out");
    if (o->target_overhead_given &&
        !(o->rc.iterations_per_loop_auto && o->rc.tuner.kind == TPU_TUNER_MODEL))
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--tuner-target-overhead is the model "
                              "tuner's: give --iterations-per-loop auto (and --tuner model, "
                              "the default) with it, or leave it out");
    if (o->vcd[0] && o->backend != TRAIN_BACKEND_RTL)
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--vcd is the waveform of the RTL array: "
                              "it goes with --backend rtl");
    if (o->backend == TRAIN_BACKEND_RTL) {
#ifndef TPUSIM_HAVE_RTL
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend rtl: this tpusim was built "
                              "without the RTL matrix unit; rebuild with 'meson configure "
                              "-Drtl=enabled' (needs verilator and a C++17 compiler)");
#endif
        if (o->timing_only)
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend rtl computes every matmul's "
                                  "values on the RTL array; it does not go with --timing-only "
                                  "(the native backend counts the same cycles)");
        if (o->spec.passes != 1)
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend rtl runs one-pass (bf16 "
                                  "input) matmuls only; --passes %u needs --backend native",
                                  o->spec.passes);
    }
    if (o->backend == TRAIN_BACKEND_SYSTEMC) {
#ifndef TPUSIM_HAVE_SYSTEMC
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend systemc: this tpusim was "
                              "built without the SystemC/TLM-2.0 model; rebuild with 'meson "
                              "configure -Dsystemc=enabled' (needs libsystemc-dev and a C++17 "
                              "compiler), or use --backend native (the same values and "
                              "cycles)");
#endif
        if (o->trace[0])
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend systemc records no "
                                  "timeline (the TLM model exposes registers and memory "
                                  "windows, not the chip's unit events): leave --trace out, or "
                                  "trace the same run with --backend native (the same cycles)");
        if (o->step_shares)
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--backend systemc keeps no per-op "
                                  "statistics (the TLM model exposes registers and memory "
                                  "windows, not the chip's ops): leave --step-shares out, or "
                                  "measure the same run with --backend native (the same "
                                  "cycles)");
    }
    return 0;
}

void tpu__cli_train_default_options(struct train_opts *o)
{
    default_options(o);
}

int tpu__cli_train_check_model_options(const struct train_opts *o)
{
    return check_model_options(o);
}

int tpu__cli_train_parse_args(int argc, char **argv, struct train_opts *o)
{
    default_options(o);
    const struct tpu__cli_parse p = {.table = &tpu__cli_train_options, .cmd = o->cmd,
                                     .scope = cmd_bit(o->cmd), .target = o};
    int rc = tpu__cli_opts_parse(&p, argc, argv, 1, NULL);
    return rc ? rc : check_combinations(o);
}

int tpu__cli_train_check_config(const char *cmd, const char *path)
{
    if (!cmd || (strcmp(cmd, "train") && strcmp(cmd, "evaluate") && strcmp(cmd, "predict")))
        return tpu__cli_error(cmd ? cmd : "train", TPU_CLI_USAGE, "'%s' is not train, evaluate "
                              "or predict", cmd ? cmd : "(null)");
    if (!path)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--config needs a file");
    struct train_opts o;
    memset(&o, 0, sizeof o);
    o.cmd = cmd;
    char *argv[] = {(char *)cmd, (char *)"--config", (char *)path};
    int rc = tpu__cli_train_parse_args(3, argv, &o);
    return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
}
