/* Fuzz target: a checkpoint index (model_dir/checkpoint.json), read as `tpusim evaluate
 * --model-dir DIR` and resuming training read it: tpu_checkpoint_latest() and
 * tpu_checkpoint_list(). The directory holds only the index, so an index that parses names
 * files that are missing, and latest must say so (TPU_EIO). */
#include "fuzz_util.h"
#include "tpusim/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    fuzz_dir_write(&dir, "checkpoint.json", data, size);
    char path[512];
    uint64_t step = 0;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_latest(dir.path, &step, path, sizeof path, &d);
    fuzz_check_diag("tpu_checkpoint_latest", rc, &d);
    if (rc == 0)
        fuzz_die("a latest checkpoint that does not exist, in", dir.path);
    struct tpu_checkpoint_entry *entries = NULL;
    size_t n = 0;
    struct tpu_diag d2 = {0};
    int rc2 = tpu_checkpoint_list(dir.path, &entries, &n, &d2);
    fuzz_check_diag("tpu_checkpoint_list", rc2, &d2);
    if (rc2 == 0) {
        for (size_t i = 0; i < n; i++)
            if (!entries[i].path || strncmp(entries[i].path, dir.path, strlen(dir.path)) != 0)
                fuzz_die("an entry outside the model directory from", dir.path);
        tpu_checkpoint_list_free(entries, n);
    }
    fuzz_dir_close(&dir);
    return 0;
}
