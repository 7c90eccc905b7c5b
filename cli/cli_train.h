/* What the files of `tpusim train`, `tpusim evaluate` and `tpusim predict` share: the
 * options' values (struct train_opts) and the parsing that fills them. cli_train_options.c
 * holds the option table, the config file (--config) and the checks that join several
 * options; cli_train.c runs the commands and prints their summaries. Private to cli/. */
#ifndef TPUSIM_CLI_TRAIN_H
#define TPUSIM_CLI_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/dataset.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"

/* The longest value an option takes, in characters: a path (a file or directory the
 * command reads or writes), --model-dir (the runtime's model_dir field) and any other value. */
#define OPT_PATH_MAX 4000
#define OPT_MODEL_DIR_MAX (sizeof(((struct tpu_run_config *)0)->model_dir) - 1)
#define OPT_TEXT_MAX 255

/* The options' values. Strings are copies (never pointers into argv or a config file), so a
 * value outlives whatever it was read from; an empty string is an option not given. */
struct train_opts {
    const char *cmd;
    char chip[OPT_PATH_MAX + 1], data[OPT_PATH_MAX + 1], trace[OPT_PATH_MAX + 1];
    char output[OPT_PATH_MAX + 1];
    char vcd[OPT_PATH_MAX + 1]; /* --vcd: waveform of core 0's RTL array */
    bool rtl;                   /* --backend rtl */
    uint32_t chips, cores_per_replica, threads;
    uint64_t steps, max_steps;
    double epochs;
    char layers_text[OPT_TEXT_MAX + 1];
    struct tpu_mlp_spec spec;
    struct tpu_run_config rc;
    unsigned verbose;
    bool json, reference, no_eval, timing_only;
    bool int8; /* --int8: evaluate/predict the checkpoint quantized to int8 */
    uint64_t limit;
    unsigned config_depth;   /* inside --config's file: 1 */
    bool length_from_config; /* --steps, --max-steps or --epochs came from the file */
};

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

#endif
