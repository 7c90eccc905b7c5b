/* Fuzz target: a run configuration file (`tpusim train|evaluate|predict --config FILE`),
 * checked by tpu__cli_train_check_config() exactly as the command line checks it, without
 * running anything. The subcommand comes from the first byte, the file from the rest.
 * Errors are printed (this is the CLI's code); the runner closes stdout and stderr for this
 * target (-close_fd_mask=3), which keeps libFuzzer's and the sanitizers' reports. */
#include "cli.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const cmds[] = {"train", "evaluate", "predict"};
    if (size < 1)
        return 0;
    const char *cmd = cmds[data[0] % 3];
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "run.json", data + 1, size - 1);
    int rc = tpu__cli_train_check_config(cmd, path);
    if (rc < 0 || rc > 125) {
        fprintf(stderr, "fuzz harness: tpu__cli_train_check_config returned %d, not an exit "
                "code\n", rc);
        abort();
    }
    fuzz_dir_close(&dir);
    return 0;
}
