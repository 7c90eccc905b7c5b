/* Every option table of the command line in one list, for the tests that walk them (each
 * option in --help, the shared wordings for every subcommand). The tables themselves live
 * beside their subcommands. */
#include "cli.h"
#include "options.h"

const struct tpu__cli_table_ref *tpu__cli_tables(size_t *n)
{
    static const struct tpu__cli_table_ref tables[] = {
        {{"gemm", NULL}, "gemm", 0, &tpu__cli_gemm_options},
        {{"train", NULL}, "train", 1, &tpu__cli_train_options},
        {{"evaluate", NULL}, "evaluate", 2, &tpu__cli_train_options},
        {{"predict", NULL}, "predict", 4, &tpu__cli_train_options},
        {{"program", "check"}, "program", 1, &tpu__cli_program_options},
        {{"program", "run"}, "program", 2, &tpu__cli_program_options},
        {{"config", "list"}, "config list", 0, &tpu__cli_config_list_options},
        {{"config", "show"}, "config show", 0, &tpu__cli_config_show_options},
        {{"config", "check"}, "config check", 0, &tpu__cli_config_check_options},
        {{"model", "show"}, "model show", 0, &tpu__cli_model_show_options},
        {{"shard", NULL}, "shard", 0, &tpu__cli_shard_options},
        {{"bench", "loops"}, "bench loops", 0, &tpu__cli_bench_loops_options},
    };
    *n = sizeof tables / sizeof tables[0];
    return tables;
}
