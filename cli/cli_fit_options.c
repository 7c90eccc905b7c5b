/* The options of `tpusim fit`: Keras's fit and compile arguments as flags, the built-in
 * callbacks' arguments, and, taken over row for row from train's table (cli_train_options.c,
 * found by name), the options of the model, the data, the chip, the sharding and the
 * optimizer, which set the same fields of struct train_opts at the start of struct fit_opts.
 * Every value is checked here before any work; what needs the data (class weights against
 * the classes, monitors against the logs) is checked by cli_fit.c once the data is read. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_fit.h"
#include "options.h"
#include "tpusim/tune.h"

#define F(f) TPU__CLI_FIELD(struct fit_opts, f)
#define STEPS_MAX (UINT64_C(1) << 40)
#define BATCH_MAX (1u << 24)

static int set_spe(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                   const char *v)
{
    struct fit_opts *o = p->target;
    if (!strcmp(v, "auto")) {
        o->steps_per_execution = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
    /* the bound compile keeps (keras.c): the largest execution the runtime runs */
    if (*v < '0' || *v > '9' || errno || *end || n < 1 || n > TPU_TUNER_MAX_STEPS)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%s' is neither a whole number of "
                              "batches from 1 to %llu nor 'auto'; give e.g. %s 32, or %s auto "
                              "(Keras's StepsPerExecutionTuner sizes each execution)",
                              opt->name, v, (unsigned long long)TPU_TUNER_MAX_STEPS,
                              opt->name, opt->name);
    o->steps_per_execution = n;
    return 0;
}

/* --validation-freq N (every N epochs) or a list of epochs "1,3,5", "[3]" or "3," (Keras:
 * an integer or a container of epochs, 1-based, tested with `epoch in validation_freq`, so
 * any order and repeats are fine). */
static int set_validation_freq(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                               const char *v)
{
    struct fit_opts *o = p->target;
    uint32_t n = 0;
    const size_t len = strlen(v);
    const bool bracketed = len >= 2 && v[0] == '[' && v[len - 1] == ']';
    const char *s = bracketed ? v + 1 : v;
    const char *stop = bracketed ? v + len - 1 : v + len;
    bool is_list = bracketed || strchr(v, ',') != NULL;
    bool bad = s == stop;
    while (!bad && s < stop) {
        char *end;
        errno = 0;
        unsigned long long e = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
        if (*s < '0' || *s > '9' || errno || e < 1 || e > 1000000 ||
            (end != stop && *end != ',') || n >= 64) {
            bad = true;
            break;
        }
        o->validation_freq[n++] = e;
        s = end != stop ? end + 1 : end; /* "3," ends after the comma: a list of one */
    }
    if (bad)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%s' is neither a whole number of "
                              "epochs from 1 to 1000000 nor a list of at most 64 epochs "
                              "(1-based); give e.g. %s 2 (every second epoch), %s 1,5,10 or, "
                              "for one epoch only, %s [3] (or 3,)", opt->name, v, opt->name,
                              opt->name, opt->name);
    o->n_validation_freq = n;
    o->validation_freq_is_list = is_list; /* else one entry: every n epochs (the integer) */
    return 0;
}

static int set_checkpoint_freq(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                               const char *v)
{
    struct fit_opts *o = p->target;
    o->checkpoint_opts_given = true;
    if (!strcmp(v, "epoch")) {
        o->checkpoint_freq = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = *v >= '0' && *v <= '9' ? strtoull(v, &end, 10) : 0;
    if (*v < '0' || *v > '9' || errno || *end || n < 1 || n > STEPS_MAX)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s '%s' is neither 'epoch' nor a whole "
                              "number of batches from 1 to %llu (Keras's save_freq); give "
                              "e.g. %s 100, or %s epoch", opt->name, v,
                              (unsigned long long)STEPS_MAX, opt->name, opt->name);
    o->checkpoint_freq = n;
    return 0;
}

static void checkpoint_option_given(void *target)
{
    ((struct fit_opts *)target)->checkpoint_opts_given = true;
}

static bool parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) {
        *out = true;
        return true;
    }
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) {
        *out = false;
        return true;
    }
    return false;
}

/* --early-stopping KEY=VALUE,...: EarlyStopping's arguments by their Keras names. */
static int set_early_stopping(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                              const char *v)
{
    struct fit_opts *o = p->target;
    struct tpu_early_stopping_args *a = &o->es;
    snprintf(o->early_stopping, sizeof o->early_stopping, "%s", v);
    memset(a, 0, sizeof *a);
    a->baseline = NAN;
    snprintf(o->es_monitor, sizeof o->es_monitor, "val_loss");
    o->es_mode = "auto";
    char buf[OPT_TEXT_MAX + 1];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        const char *key = kv, *val = eq ? eq + 1 : "";
        if (eq)
            *eq = '\0';
        char *end = NULL;
        errno = 0;
        bool ok = true;
        if (!strcmp(key, "monitor")) {
            ok = *val && strlen(val) <= TPU_LOG_NAME_MAX;
            if (ok)
                snprintf(o->es_monitor, sizeof o->es_monitor, "%s", val);
        } else if (!strcmp(key, "min_delta")) {
            a->min_delta = strtod(val, &end);
            ok = *val && !*end && !errno && isfinite(a->min_delta);
        } else if (!strcmp(key, "patience") || !strcmp(key, "start_from_epoch")) {
            unsigned long long n = *val >= '0' && *val <= '9' ? strtoull(val, &end, 10) : 0;
            ok = *val >= '0' && *val <= '9' && !*end && !errno && n <= 1000000;
            if (!strcmp(key, "patience"))
                a->patience = n;
            else
                a->start_from_epoch = n;
        } else if (!strcmp(key, "mode")) {
            ok = !strcmp(val, "auto") || !strcmp(val, "min") || !strcmp(val, "max");
            o->es_mode = !strcmp(val, "min") ? "min" : !strcmp(val, "max") ? "max" : "auto";
        } else if (!strcmp(key, "baseline")) {
            a->baseline = strtod(val, &end);
            ok = *val && !*end && !errno && isfinite(a->baseline);
        } else if (!strcmp(key, "restore_best_weights")) {
            ok = eq ? parse_bool(val, &a->restore_best_weights)
                    : (a->restore_best_weights = true);
        } else {
            return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s: '%s' is not an argument of "
                                  "EarlyStopping; give KEY=VALUE pairs of monitor, min_delta, "
                                  "patience, mode, baseline, restore_best_weights, "
                                  "start_from_epoch (e.g. %s monitor=val_loss,patience=2)",
                                  opt->name, key, opt->name);
        }
        if (!ok || (!eq && strcmp(key, "restore_best_weights")))
            return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "%s: %s '%s' is not valid: monitor "
                                  "is a log's name (at most %d characters), min_delta and "
                                  "baseline finite numbers, patience and start_from_epoch "
                                  "whole numbers up to 1000000, mode auto, min or max, "
                                  "restore_best_weights true or false; e.g. %s "
                                  "monitor=val_accuracy,patience=3,restore_best_weights=true",
                                  opt->name, key, val, TPU_LOG_NAME_MAX, opt->name);
    }
    a->monitor = o->es_monitor;
    a->mode = o->es_mode;
    return 0;
}

const char *const tpu__cli_fit_mode_words[] = {"auto", "min", "max", NULL};
static const int mode_values[] = {0, 1, 2};

/* fit's own rows */
static const struct tpu__cli_opt fit_rows[] = {
    {.name = "--epochs", .kind = TPU__CLI_U64, F(epochs), .min = 1, .max = 1000000, .arg = "N",
     .group = "fit (Keras's Model.fit and compile arguments)",
     .help = "epochs to train (default 1)"},
    {.name = "--batch-size", .kind = TPU__CLI_U64, F(batch_size), .min = 1, .max = BATCH_MAX,
     .arg = "N", .help = "the global batch (default 32, Keras's); an epoch's last\n"
                         "batch may be partial: it trains on its real rows"},
    {.name = "--steps-per-execution", .kind = TPU__CLI_CUSTOM, .set = set_spe,
     .max_chars = OPT_TEXT_MAX, .arg = "N|auto",
     .help = "batches per execution on the chip (default 1); batch\n"
             "callbacks fire once per execution; auto: Keras 2.15's\n"
             "StepsPerExecutionTuner, on simulated time"},
    {.name = "--steps-per-epoch", .kind = TPU__CLI_U64, F(steps_per_epoch), .min = 1,
     .max = STEPS_MAX, .arg = "N", .help = "batches per epoch (default: the whole data)"},
    {.name = "--initial-epoch", .kind = TPU__CLI_U64, F(initial_epoch), .min = 0,
     .max = 1000000, .arg = "N",
     .help = "the epoch to start at (0-based, below --epochs)"},
    {.name = "--no-shuffle", .kind = TPU__CLI_FLAG, F(no_shuffle),
     .help = "keep the examples' order (default: shuffled each epoch\nfrom --seed)"},
    {.name = "--class-weight", .kind = TPU__CLI_TEXT, F(class_weight), .arg = "C:W,...",
     .help = "each class's loss weight, every class from 0 listed:\n"
             "0:1,1:2.5,... (Keras's class_weight dict)"},
    {.name = "--metrics", .kind = TPU__CLI_TEXT, F(metrics), .arg = "NAME,...",
     TPU__CLI_GIVEN(struct fit_opts, metrics_given),
     .help = "compiled metrics: accuracy, sparse_categorical_crossentropy,\n"
             "mse, mae (default accuracy for a classifier, none for\n"
             "mean_squared_error)"},
    {.name = "--verbose", .kind = TPU__CLI_U64, F(verbose), .min = 0, .max = 2,
     TPU__CLI_GIVEN(struct fit_opts, verbose_given), .arg = "0|1|2",
     .help = "0 silent, 1 a progress bar, 2 a line per epoch (default:\n"
             "1 on a terminal, else 2, Keras's 'auto')"},

    {.name = "--validation-split", .kind = TPU__CLI_DOUBLE, F(validation_split), .lo = 0,
     .hi = 0.999999, .arg = "X", .group = "validation",
     .help = "the last fraction X of the training arrays, taken before\n"
             "shuffling, validates at each epoch's end (val_ logs)"},
    {.name = "--validation-freq", .kind = TPU__CLI_CUSTOM, .set = set_validation_freq,
     .max_chars = OPT_TEXT_MAX, .arg = "N|E,E,...",
     .help = "validate every N epochs (default 1), or at the listed\n"
             "epochs (1-based, any order); one epoch only: [E] or E,"},
    {.name = "--validation-batch-size", .kind = TPU__CLI_U64, F(validation_batch_size),
     .min = 1, .max = BATCH_MAX, .arg = "N",
     .help = "the validation's (and the test evaluation's) global\nbatch (default --batch-size)"},
    {.name = "--validation-steps", .kind = TPU__CLI_U64, F(validation_steps), .min = 1,
     .max = STEPS_MAX, .arg = "N", .help = "validation batches (default: all of them)"},

    {.name = "--checkpoint", .kind = TPU__CLI_TEXT, F(checkpoint), .max_chars = OPT_PATH_MAX,
     .arg = "PATH", .group = "callbacks",
     .help = "ModelCheckpoint: save to PATH, formatted as Keras does\n"
             "('ckpt/{epoch:02d}-{val_loss:.2f}'); tpusim writes a\n"
             "checkpoint directory (evaluate --model-dir reads it)"},
    {.name = "--checkpoint-monitor", .kind = TPU__CLI_TEXT, F(checkpoint_monitor),
     .before = checkpoint_option_given, .arg = "LOG",
     .help = "the log --checkpoint-best-only compares (default val_loss)"},
    {.name = "--checkpoint-best-only", .kind = TPU__CLI_FLAG, F(checkpoint_best_only),
     .before = checkpoint_option_given,
     .help = "save only when the monitor improves (save_best_only)"},
    {.name = "--checkpoint-mode", .kind = TPU__CLI_ENUM, F(checkpoint_mode),
     .words = tpu__cli_fit_mode_words, .values = mode_values, .before = checkpoint_option_given,
     .help = "better is smaller (min) or larger (max); auto: max for\n"
             "a monitor holding 'acc' (default auto)"},
    {.name = "--checkpoint-freq", .kind = TPU__CLI_CUSTOM, .set = set_checkpoint_freq,
     .max_chars = OPT_TEXT_MAX, .arg = "epoch|N",
     .help = "save each epoch (default) or every N batches, counted\n"
             "across executions as Keras counts them"},
    {.name = "--early-stopping", .kind = TPU__CLI_CUSTOM, .set = set_early_stopping,
     .max_chars = OPT_TEXT_MAX, .arg = "K=V,...",
     .help = "EarlyStopping(monitor, min_delta, patience, mode,\n"
             "baseline, restore_best_weights, start_from_epoch) as\n"
             "KEY=VALUE pairs: monitor=val_loss,patience=2"},
    {.name = "--csv-log", .kind = TPU__CLI_TEXT, F(csv_log), .max_chars = OPT_PATH_MAX,
     .arg = "FILE", .help = "CSVLogger: a row of logs per epoch"},
    {.name = "--csv-append", .kind = TPU__CLI_FLAG, F(csv_append),
     .help = "CSVLogger's append=True: add rows to FILE"},
    {.name = "--lr-scheduler-decay", .kind = TPU__CLI_DOUBLE, F(lr_decay), .lo = 1e-6, .hi = 1e6,
     .arg = "X",
     .help = "LearningRateScheduler: lr = lr * X at each epoch from\n"
             "--lr-scheduler-start on (the rate is set by the host)"},
    {.name = "--lr-scheduler-start", .kind = TPU__CLI_U64, F(lr_decay_start), .min = 0,
     .max = 1000000, TPU__CLI_GIVEN(struct fit_opts, lr_start_given), .arg = "E",
     .help = "the first epoch (0-based) the decay applies to\n(default 1)"},
};

/* train's rows that fit takes, by name, with the heading to print before each group */
static const struct {
    const char *name, *group;
} train_rows[] = {
    {"--model", "model and data"}, {"--layers", NULL}, {"--data", NULL}, {"--seed", NULL},
    {"--optimizer", "optimizer"}, {"--learning-rate", NULL}, {"--weight-decay", NULL},
    {"--lr-schedule", NULL}, {"--warmup-steps", NULL}, {"--decay-steps", NULL},
    {"--decay-rate", NULL}, {"--momentum", NULL}, {"--beta1", NULL}, {"--beta2", NULL},
    {"--epsilon", NULL}, {"--l2", NULL}, {"--passes", NULL},
    {"--chip", "chip and sharding"}, {"--chips", NULL}, {"--hosts", NULL},
    {"--cores-per-replica", NULL}, {"--threads", NULL}, {"--per-host-input-for-training", NULL},
    {"--eval-training-input-configuration", NULL}, {"--input-partition-dims", NULL},
    {"--host-time", NULL},
};

#define N_TRAIN_ROWS (sizeof train_rows / sizeof train_rows[0])
#define N_FIT_ROWS (sizeof fit_rows / sizeof fit_rows[0])

static const char fit_usage[] =
    "usage: tpusim fit [options]   train a model (--model FILE, or an MLP) as Keras's\n"
    "                              model.compile(...) and model.fit(...) do, then evaluate it\n"
    "                              on the test set (model.evaluate)\n"
    "It prints Keras 2.15's lines: \"Epoch 1/5\", then the progress bar (--verbose 1) or one\n"
    "line per epoch (--verbose 2): \"1688/1688 - 2s - loss: 0.5123 - accuracy: 0.8190 -\n"
    "val_loss: ... - 2s/epoch - 1ms/step\". One training loop underneath: each epoch is one\n"
    "estimator train call whose launches are the executions (--steps-per-execution).\n"
    "Where tpusim differs from Keras:\n"
    "  - times are simulated (the chip's and the modeled host's), never wall time, so a run\n"
    "    prints the same lines every time; ETAs and ms/step are those of the simulated chip;\n"
    "  - a monitor (--early-stopping monitor=, --checkpoint-monitor) that no log of the run\n"
    "    will hold is an error before any work (Keras warns at every epoch);\n"
    "  - --checkpoint PATH is a tpusim checkpoint directory (safetensors and an index) of\n"
    "    every param, optimizer state included, not an HDF5 file;\n"
    "  - the MLP of --layers is a net of dense layers (relu) and a softmax classifier,\n"
    "    initialized as Keras initializes Dense layers (Glorot uniform, zero biases);\n"
    "  - the callbacks print their messages (Keras's verbose=1) unless --verbose 0;\n"
    "  - without --verbose (Keras's verbose='auto', which is 1 unless absl logging is on)\n"
    "    the progress bar is shown on a terminal only: into a pipe or a file fit prints a\n"
    "    line per epoch (verbose 2) instead of the bar's carriage-return updates;\n"
    "  - LearningRateScheduler's message prints the rate as the float32 the chip uses\n"
    "    (0.0005), where Keras prints the double of that float32 (0.0005000000237487257).\n"
    "\n";

static const char fit_footer[] =
    "Paths take at most 4000 characters, other values 255. Output paths are checked before\n"
    "any work: their directory must exist and be writable.\n";

static void fit_defaults(struct fit_opts *o)
{
    tpu__cli_train_default_options(&o->t);
    o->epochs = 1;
    o->batch_size = 32;
    o->steps_per_execution = 1;
    o->lr_decay_start = 1;
    o->es.baseline = NAN;
}

/* Rules that join several options. */
static int check_combinations(struct fit_opts *o)
{
    const char *cmd = o->t.cmd;
    int rc = tpu__cli_train_check_model_options(&o->t);
    if (rc)
        return rc;
    if (o->initial_epoch >= o->epochs)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--initial-epoch %llu is not below --epochs "
                              "%llu: fit trains epochs initial_epoch to epochs - 1, so there "
                              "would be none; give a larger --epochs or a smaller "
                              "--initial-epoch", (unsigned long long)o->initial_epoch,
                              (unsigned long long)o->epochs);
    const bool validation = o->validation_split > 0;
    const char *val_opt = o->n_validation_freq ? "--validation-freq"
                          : o->validation_steps ? "--validation-steps" : NULL;
    if (val_opt && !validation)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s applies to validation, and there is "
                              "none: give --validation-split X (e.g. 0.1) with it, or leave "
                              "it out", val_opt);
    if (o->lr_start_given && o->lr_decay == 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-scheduler-start is the epoch the "
                              "scheduler's decay starts at: give --lr-scheduler-decay X with "
                              "it, or leave it out");
    if (o->lr_decay > 0 && o->t.schedule_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--lr-scheduler-decay sets the rate from the "
                              "host at each epoch (a LearningRateScheduler), and --lr-schedule "
                              "%s sets it by step on the chip: give one of the two",
                              o->t.tspec.schedule == TPU_SCHEDULE_STEP     ? "step"
                              : o->t.tspec.schedule == TPU_SCHEDULE_COSINE ? "cosine"
                                                                           : "constant");
    if (o->checkpoint_opts_given && !o->checkpoint[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "the --checkpoint-* options shape "
                              "ModelCheckpoint, and no --checkpoint PATH was given: give one, "
                              "or leave them out");
    if (o->csv_append && !o->csv_log[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--csv-append goes with --csv-log FILE: give "
                              "the file, or leave --csv-append out");
    struct tpu_diag d = {0};
    if (o->checkpoint[0]) {
        /* the filepath's syntax and the mode, checked by the callback itself */
        struct tpu_callback cb;
        struct tpu_model_checkpoint_args a = {.filepath = o->checkpoint,
                                              .mode = tpu__cli_fit_mode_words[o->checkpoint_mode]};
        if (tpu_callback_model_checkpoint(&a, &cb, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--checkpoint: %s", d.msg);
        tpu_callback_free(&cb);
    }
    if (o->csv_log[0] && (rc = tpu__cli_check_output_file(cmd, "--csv-log", o->csv_log)))
        return rc;
    return 0;
}

int tpu__cli_fit_parse_args(int argc, char **argv, struct fit_opts *o)
{
    fit_defaults(o);
    struct tpu__cli_opt rows[N_TRAIN_ROWS + N_FIT_ROWS];
    size_t n = 0;
    for (size_t i = 0; i < N_FIT_ROWS; i++)
        rows[n++] = fit_rows[i];
    for (size_t i = 0; i < N_TRAIN_ROWS; i++) {
        const struct tpu__cli_opt *r = tpu__cli_opts_find(&tpu__cli_train_options,
                                                          train_rows[i].name);
        if (!r) /* the two tables are built together: a missing row is a bug here */
            return tpu__cli_error(o->t.cmd, TPU_CLI_FAIL, "internal error: train's option "
                                  "table has no %s", train_rows[i].name);
        rows[n] = *r;
        rows[n].scope = 0; /* all of train's rows fit takes apply to it */
        rows[n].scope_why = NULL;
        rows[n].group = train_rows[i].group;
        n++;
    }
    const struct tpu__cli_opts table = {
        .opts = rows,
        .n_opts = n,
        .usage = fit_usage,
        .footer = fit_footer,
        .help_column = 32,
        .text_max = OPT_TEXT_MAX,
    };
    const struct tpu__cli_parse p = {.table = &table, .cmd = o->t.cmd, .target = o};
    int rc = tpu__cli_opts_parse(&p, argc, argv, 1, NULL);
    return rc ? rc : check_combinations(o);
}
