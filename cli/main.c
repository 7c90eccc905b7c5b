/* tpusim: the command-line tool. Subcommands in the style of git. Under mpirun each process
 * is one rank, one host of a pod slice (cli_ranks.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", tpu__cli_train, "train a model (a model file, or an MLP) on the simulated chip"},
    {"evaluate", tpu__cli_train, "evaluate a trained model's checkpoint"},
    {"predict", tpu__cli_train, "predict with a trained model's checkpoint"},
    {"fit", tpu__cli_fit,
     "train a model as Keras's compile and fit do (callbacks, validation), then evaluate"},
    {"program", tpu__cli_program, "check or run a device program written in its text form"},
    {"config", tpu__cli_config, "print or check a chip configuration"},
    {"gemm", tpu__cli_gemm,
     "simulate a matrix multiply (or a SCALE-Sim layer table) on the matrix unit"},
    {"model", tpu__cli_model, "show a model file's layers and where a training step's time goes"},
    {"shard", tpu__cli_shard,
     "show how a batch and its tensors split over hosts, replicas and cores"},
    {"bench", tpu__cli_bench, "sweep iterations_per_loop: throughput and host overhead by loop size"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tpusim <command> [options]   (tpusim <command> --help for each)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

/* The command of argv[1] (argv as main's). */
static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return TPU_CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return TPU_CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    const char *names[sizeof commands / sizeof commands[0] + 1] = {NULL};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        names[i] = commands[i].name;
    return tpu__cli_unknown_command(NULL, argv[1], names);
}

int main(int argc, char **argv)
{
    /* started by another launcher as one of several: each would run the whole job */
    int rc = tpu__cli_other_launcher(argc, argv);
    if (rc)
        return rc;
    /* started by mpirun: each process is one rank (a host of a pod slice) */
    if (tpu__cli_mpirun_world_size())
        return tpu__cli_main_ranks(argc, argv, dispatch);
    return dispatch(argc, argv);
}
