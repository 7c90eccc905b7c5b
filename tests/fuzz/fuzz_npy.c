/* Fuzz target: a NumPy .npy file, read as a `tpusim gemm` operand (tpu_npy_read), as an
 * array of any rank (tpu_npy_read_array) and as a dataset whose x and y are this one file
 * (tpu_dataset_load_npy: an (N, 1) integer array is both). Every element of an array that
 * reads is touched, so a data buffer shorter than its shape shows up under
 * AddressSanitizer. */
#include "fuzz_util.h"
#include "tpusim/dataset.h"
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
    struct tpu_npy_array arr;
    rc = tpu_npy_read_array(path, &arr, &d);
    fuzz_check_diag("tpu_npy_read_array", rc, &d);
    if (rc == 0) {
        size_t n = arr.item_bytes;
        for (unsigned k = 0; k < arr.n_dims; k++) {
            if (arr.dims[k] == 0 || arr.dims[k] > size)
                fuzz_die("a zero or oversized dimension from", path);
            n *= (size_t)arr.dims[k];
        }
        if (n > size)
            fuzz_die("an array larger than its file from", path);
        const volatile unsigned char *bytes = arr.data;
        for (size_t i = 0; i < n; i++)
            (void)bytes[i];
        tpu_npy_array_free(&arr);
    }
    struct tpu_dataset ds;
    rc = tpu_dataset_load_npy(path, path, NULL, &ds, &d);
    fuzz_check_diag("tpu_dataset_load_npy", rc, &d);
    if (rc == 0) {
        const struct tpu_shape s = tpu_dataset_shape(&ds);
        if (ds.n_examples == 0 || ds.n_features != s.h * s.w * s.c || !ds.y == !ds.targets)
            fuzz_die("an empty or misshapen dataset from", path);
        for (uint32_t i = 0; ds.y && i < ds.n_examples; i++)
            if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.n_classes)
                fuzz_die("a label out of range from", path);
        const volatile float *x = ds.x;
        for (size_t i = 0; i < (size_t)ds.n_examples * ds.n_features; i++)
            (void)x[i];
        tpu_dataset_free(&ds);
    }
    fuzz_dir_close(&dir);
    return 0;
}
