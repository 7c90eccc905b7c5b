/* Fuzz target: a checkpoint file (ckpt-<step>.safetensors, `tpusim evaluate --model-dir`),
 * read as the runtime restores one: tpu_checkpoint_inspect() describes it, then
 * tpu_checkpoint_load() reads it into buffers of exactly the shapes inspect reported, which
 * must succeed (the same checks passed) and give the same global step. */
#include "fuzz_util.h"
#include "tpusim/checkpoint.h"

static void load_back(const char *path, const struct tpu_checkpoint_info *info)
{
    struct tpu_tensor *t = calloc(info->n_tensors ? info->n_tensors : 1, sizeof *t);
    if (!t)
        fuzz_die("calloc for the tensors of", path);
    for (size_t i = 0; i < info->n_tensors; i++) {
        t[i] = info->tensors[i];
        size_t bytes = (size_t)t[i].rows * t[i].cols * tpu_dtype_bytes(t[i].dtype);
        t[i].data = malloc(bytes ? bytes : 1);
        if (!t[i].data)
            fuzz_die("malloc for a tensor of", path);
    }
    uint64_t step = 0;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_load(path, t, info->n_tensors, &step, &d);
    if (rc != 0 || step != info->global_step) {
        fprintf(stderr, "fuzz harness: inspect accepted the file but load gives %d (\"%s\") "
                "and step %llu (inspect: %llu)\n", rc, d.msg, (unsigned long long)step,
                (unsigned long long)info->global_step);
        abort();
    }
    for (size_t i = 0; i < info->n_tensors; i++)
        free(t[i].data);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "ckpt-1.safetensors", data, size);
    struct tpu_checkpoint_info info;
    struct tpu_diag d = {0};
    int rc = tpu_checkpoint_inspect(path, &info, &d);
    fuzz_check_diag("tpu_checkpoint_inspect", rc, &d);
    if (rc == 0) {
        load_back(path, &info);
        tpu_checkpoint_info_free(&info);
    }
    fuzz_dir_close(&dir);
    return 0;
}
