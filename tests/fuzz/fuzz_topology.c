/* Fuzz target: a SCALE-Sim topology CSV (`tpusim gemm --topology FILE`), read by
 * tpu_topology_file_read() from a file as the CLI does. A table that reads must hold at least one
 * layer, each with a GEMM of nonzero dimensions. */
#include "fuzz_util.h"
#include "tpusim/topology_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "layers.csv", data, size);
    struct tpu_topology_file t;
    struct tpu_diag d = {0};
    int rc = tpu_topology_file_read(path, &t, &d);
    fuzz_check_diag("tpu_topology_file_read", rc, &d);
    if (rc == 0) {
        if (t.n_layers == 0)
            fuzz_die("a topology with no layers from", path);
        for (size_t i = 0; i < t.n_layers; i++)
            if (!t.layers[i].name || !t.layers[i].m || !t.layers[i].n || !t.layers[i].k)
                fuzz_die("a layer with an empty GEMM or no name from", path);
        tpu_topology_file_free(&t);
    }
    fuzz_dir_close(&dir);
    return 0;
}
