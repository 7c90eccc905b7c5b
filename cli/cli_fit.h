/* What the files of `tpusim fit` share: its options (struct fit_opts, which begins with the
 * train command's options so that the rows of train's table it takes over set the same
 * fields) and their parsing. cli_fit_options.c holds the table and the checks; cli_fit.c
 * runs the command. Private to cli/. */
#ifndef TPUSIM_CLI_FIT_H
#define TPUSIM_CLI_FIT_H

#include <stdbool.h>
#include <stdint.h>

#include "cli_train.h"
#include "tpusim/keras.h"

struct fit_opts {
    struct train_opts t; /* first: train's rows use offsets into it (model, data, chip,
                            sharding, optimizer) */
    uint64_t epochs, initial_epoch, steps_per_epoch, validation_steps;
    uint32_t batch_size, validation_batch_size;
    uint64_t steps_per_execution; /* 0: auto */
    double validation_split;
    uint32_t n_validation_freq;
    uint64_t validation_freq[64];
    bool validation_freq_is_list;
    bool no_shuffle;
    uint32_t verbose;
    bool verbose_given;
    char metrics[OPT_TEXT_MAX + 1];
    bool metrics_given;
    char class_weight[OPT_TEXT_MAX + 1];
    char checkpoint[OPT_PATH_MAX + 1];
    char checkpoint_monitor[OPT_TEXT_MAX + 1];
    bool checkpoint_best_only;
    int checkpoint_mode;          /* 0 auto, 1 min, 2 max */
    uint64_t checkpoint_freq;     /* 0: every epoch */
    bool checkpoint_opts_given;   /* a --checkpoint-* option */
    char early_stopping[OPT_TEXT_MAX + 1];
    struct tpu_early_stopping_args es; /* parsed from early_stopping */
    const char *es_mode;
    char es_monitor[TPU_LOG_NAME_MAX + 1];
    char csv_log[OPT_PATH_MAX + 1];
    bool csv_append;
    double lr_decay;              /* --lr-scheduler-decay: 0 none */
    uint64_t lr_decay_start;      /* --lr-scheduler-start */
    bool lr_start_given;
};

/* Fills o (o->t.cmd "fit") from the defaults and argv, with every check that needs no data.
 * Returns 0, TPU__CLI_HELP after printing the help, or an exit code after an error. */
int tpu__cli_fit_parse_args(int argc, char **argv, struct fit_opts *o);

/* The most classes --class-weight names (0 .. 65535). */
#define TPU__CLI_FIT_MAX_CLASSES 65536

/* Parses --class-weight text (C:W,...) against a classifier of `classes` classes: every class
 * from 0 to classes - 1 listed once, weights finite and not negative, into weights[class] and
 * *n (= classes). Returns 0, or an exit code after printing the error (*n = 0). Used by
 * cli_fit.c once the data gives the classes, and by tests/fuzz/fuzz_fit_options.c. */
int tpu__cli_fit_parse_class_weight(const char *cmd, const char *text, uint32_t classes,
                                    float weights[TPU__CLI_FIT_MAX_CLASSES], uint32_t *n);

/* The names of the mode words of --checkpoint-mode, by value. */
extern const char *const tpu__cli_fit_mode_words[];

#endif
