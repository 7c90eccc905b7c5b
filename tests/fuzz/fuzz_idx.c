/* Fuzz target: the IDX image and label files of a dataset (`tpusim train --data DIR`), plain
 * or gzip-compressed, read from a directory by tpu_dataset_fashion_mnist() (the strict MNIST
 * reader of unsigned bytes) and by tpu_dataset_load_dir() as the CLI does (any MNIST-format
 * set: every IDX data type, 2 to 4 dimensions).
 *
 * Input layout: 2 bytes L (little-endian), then L bytes of the label file
 * (t10k-labels-idx1-ubyte.gz), then the image file (t10k-images-idx3-ubyte.gz). The names
 * end in .gz whatever the bytes are: the reader decides by the gzip magic, never the name.
 * tests/fuzz/make_seeds.py writes seeds in this layout. */
#include <math.h>

#include "fuzz_util.h"
#include "tpusim/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t n_labels = (size_t)data[0] | (size_t)data[1] << 8;
    if (n_labels > size - 2)
        n_labels = size - 2;
    struct fuzz_dir dir;
    fuzz_dir_open(&dir);
    fuzz_dir_write(&dir, "t10k-labels-idx1-ubyte.gz", data + 2, n_labels);
    fuzz_dir_write(&dir, "t10k-images-idx3-ubyte.gz", data + 2 + n_labels,
                   size - 2 - n_labels);
    struct tpu_dataset ds;
    struct tpu_diag d = {0};
    int rc = tpu_dataset_fashion_mnist(dir.path, false, &ds, &d);
    fuzz_check_diag("tpu_dataset_fashion_mnist", rc, &d);
    if (rc == 0) {
        if (ds.n_examples == 0 || ds.n_features != ds.image_rows * ds.image_cols)
            fuzz_die("an empty or misshapen dataset from", dir.path);
        for (uint32_t i = 0; i < ds.n_examples; i++)
            if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.n_classes)
                fuzz_die("a label out of range from", dir.path);
        const volatile float *x = ds.x;
        for (size_t i = 0; i < (size_t)ds.n_examples * ds.n_features; i++)
            if (!(x[i] >= 0.0f && x[i] <= 1.0f))
                fuzz_die("a pixel outside [0, 1] from", dir.path);
        tpu_dataset_free(&ds);
    }
    rc = tpu_dataset_load_dir(dir.path, false, NULL, &ds, &d);
    fuzz_check_diag("tpu_dataset_load_dir", rc, &d);
    if (rc == 0) {
        const struct tpu_shape s = tpu_dataset_shape(&ds);
        if (ds.n_examples == 0 || ds.n_features != s.h * s.w * s.c || !ds.y || ds.targets)
            fuzz_die("an empty or misshapen IDX set from", dir.path);
        for (uint32_t i = 0; i < ds.n_examples; i++)
            if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.n_classes)
                fuzz_die("a label out of range from", dir.path);
        const volatile float *x = ds.x;
        for (size_t i = 0; i < (size_t)ds.n_examples * ds.n_features; i++)
            if (!isfinite(x[i]))
                fuzz_die("a feature that is not finite from", dir.path);
        tpu_dataset_free(&ds);
    }
    fuzz_dir_close(&dir);
    return 0;
}
