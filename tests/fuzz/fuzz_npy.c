/* Fuzz target: a NumPy .npy operand (`tpusim gemm --a FILE --b FILE`), read by
 * tpu_npy_read() from a file as the CLI does. Every element of an array that reads is
 * touched, so a data buffer shorter than rows x cols shows up under AddressSanitizer. */
#include "fuzz_util.h"
#include "tpusim/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    const char *path = fuzz_dir_write(&dir, "array.npy", data, size);
    struct tpu_npy a;
    struct tpu_diag d = {0};
    int rc = tpu_npy_read(path, &a, &d);
    fuzz_check_diag("tpu_npy_read", rc, &d);
    if (rc == 0) {
        size_t elem = a.dtype == TPU_INT8 ? 1 : 4;
        if (a.rows == 0 || a.cols == 0 || a.rows > size / a.cols / elem)
            fuzz_die("an empty array, or one larger than its file, from", path);
        const volatile unsigned char *bytes = a.data;
        for (size_t i = 0; i < a.rows * a.cols * elem; i++)
            (void)bytes[i];
        tpu_npy_free(&a);
    }
    fuzz_dir_close(&dir);
    return 0;
}
