/* Fuzz target: a chip configuration file (like configs/tpu-v4.json, `tpusim config check FILE`,
 * `--chip FILE`), read by tpu_config_load() from a file as the CLI does. A valid one must
 * also give finite derived figures. */
#include <math.h>

#include "fuzz_util.h"
#include "tpusim/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "chip.json", data, size);
    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    int rc = tpu_config_load(path, &cfg, &d);
    fuzz_check_diag("tpu_config_load", rc, &d);
    if (rc == 0) {
        struct tpu_chip_derived der;
        tpu_config_derive(&cfg, &der);
        if (!isfinite(der.peak_macs_per_s) || !isfinite(der.ridge_macs_per_byte) ||
            der.total_mxus == 0) {
            fprintf(stderr, "fuzz harness: a valid config derives peak %g MAC/s, ridge %g, "
                    "%u MXUs\n", der.peak_macs_per_s, der.ridge_macs_per_byte,
                    (unsigned)der.total_mxus);
            abort();
        }
    }
    fuzz_dir_close(&dir);
    return 0;
}
