/* Datasets for the host runtime: labelled examples held in memory as fp32 features and
 * int32 labels, read from MNIST-format IDX files, plus the deterministic orders (shuffles,
 * validation splits) and the batch gathering that the input pipeline builds on.
 *
 * This layer reads files and arranges rows; it knows nothing of batches per replica,
 * sharding or infeed (the input pipeline does that with tpu_dataset_gather()), and it never
 * prints: failures return a negative TPU_E* code and one sentence in a struct tpu_diag.
 *
 * IDX (the format of MNIST and Fashion-MNIST, http://yann.lecun.com/exdb/mnist/): a 4-byte
 * magic (two zero bytes, a data-type byte, a dimension-count byte), one big-endian uint32 per
 * dimension, then the data in row-major order. tpusim reads unsigned-byte data (type 0x08):
 * images with magic 0x00000803 (count, rows, columns) and labels with magic 0x00000801
 * (count). A file may be plain or gzip-compressed; the gzip magic decides, not the name.
 * Byte offsets in messages count bytes of the IDX data, that is after decompression.
 *
 * All functions are reentrant; nothing here keeps global state. */
#ifndef TPUSIM_DATASET_H
#define TPUSIM_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the Debian package dataset-fashion-mnist installs its files. */
#define TPU_DATASET_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define TPU_DATASET_FASHION_MNIST_CLASSES 10u
#define TPU_DATASET_FASHION_MNIST_ROWS 28u /* every image is 28x28 */
#define TPU_DATASET_FASHION_MNIST_COLS 28u

#define TPU_DATASET_ORIGIN_MAX 512

/* A labelled dataset in memory. x and y are owned by the struct and released by
 * tpu_dataset_free(); the struct itself belongs to the caller (usually on the stack). */
struct tpu_dataset {
    uint32_t n_examples;             /* rows of x and y, >= 1 */
    uint32_t n_features;             /* image_rows * image_cols, e.g. 784 = 28*28 */
    uint32_t image_rows, image_cols; /* the IDX image shape */
    uint32_t n_classes;              /* every label is in [0, n_classes) */
    float *x;                        /* [n_examples][n_features] row-major; pixel/255.0f,
                                        correctly rounded, in [0, 1] */
    int32_t *y;                      /* [n_examples] class labels */
    char origin[TPU_DATASET_ORIGIN_MAX]; /* what was loaded, for logs and reports, e.g.
                                            "Fashion-MNIST train (60000 examples) from
                                            /usr/share/datasets/fashion-mnist" */
};

/* Reads an IDX image file (magic 0x00000803: unsigned bytes, 3 dimensions) and an IDX label
 * file (magic 0x00000801: unsigned bytes, 1 dimension) describing the same examples. Each may
 * be plain or gzip-compressed.
 *
 * n_classes: the number of classes if known (10 for MNIST and Fashion-MNIST); every label
 * must then be below it. 0 means infer it as the largest label plus one.
 *
 * Everything is validated, and a failure names the file, the byte offset and the reason:
 * a file that cannot be opened (TPU_EIO, with the system's reason); a wrong or foreign magic,
 * an unsupported data type, a wrong number of dimensions, a zero dimension, an empty or
 * truncated header, truncated data, bytes after the data, corrupt gzip data (with zlib's
 * message: a bad CRC-32 or length in a member's trailer), gzip data cut short (a missing
 * trailer included), bytes after the last gzip member that are not another member
 * (TPU_EPARSE); dimensions too large to hold in memory (TPU_ERANGE); image and
 * label counts that differ (TPU_ESHAPE); a label >= n_classes (TPU_ERANGE); no memory
 * (TPU_ENOMEM).
 *
 * On success fills *out, which the caller owns and releases with tpu_dataset_free(); origin
 * is the image file's path. On failure *out is untouched and nothing stays allocated. */
int tpu_dataset_load_idx(const char *images_path, const char *labels_path, uint32_t n_classes,
                         struct tpu_dataset *out, struct tpu_diag *d);

/* Loads Fashion-MNIST's training set (train = true: 60000 examples) or test set (false: 10000
 * examples), 28x28 images, 10 classes, from dir, or from TPU_DATASET_FASHION_MNIST_DIR when
 * dir is NULL. The files are the package's names: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; each may
 * also be present uncompressed, without the .gz.
 *
 * If a file is missing, fails with TPU_ENOTFOUND and a sentence saying how to install the
 * package or which files a --data directory must hold. Images that are not 28x28 fail with
 * TPU_ESHAPE (the models built for Fashion-MNIST take 784 inputs), found from the header
 * before any data is read, and labels outside 0-9 with TPU_ERANGE; other failures are those
 * of tpu_dataset_load_idx(). Ownership as there. */
int tpu_dataset_fashion_mnist(const char *dir, bool train, struct tpu_dataset *out,
                              struct tpu_diag *d);

/* The name of a Fashion-MNIST class ("T-shirt/top", "Trouser", ... "Ankle boot"), static
 * storage; "?" outside [0, 10). */
const char *tpu_dataset_fashion_mnist_class_name(int32_t label);

/* Frees x and y and zeroes the struct. Accepts NULL and an already freed (zeroed) struct. */
void tpu_dataset_free(struct tpu_dataset *ds);

/* Writes into perm[0 .. n) a permutation of 0 .. n-1 that depends only on (seed, epoch), the
 * same on every machine and compiler; perm's previous contents do not matter.
 *
 * The generator, so that others can reproduce it: SplitMix64 (Steele, Lea and Flood 2014;
 * state += 0x9E3779B97F4A7C15, output z = state; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
 * z = (z ^ z>>27) * 0x94D049BB133111EB; z ^= z>>31) whose state starts at
 * seed ^ splitmix64_first_output(epoch), where splitmix64_first_output(e) is the first output
 * of a SplitMix64 whose state starts at e. Starting from the identity, Fisher-Yates runs
 * i = n-1 down to 1: r = the next 64-bit output, drawn again while
 * r >= 2^64 - (2^64 mod (i+1)) (so every j is equally likely), j = r mod (i+1), and
 * perm[i] and perm[j] are swapped.
 *
 * Returns 0, or TPU_EINVAL if perm is NULL while n > 0. */
int tpu_dataset_shuffle(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch);

/* The epoch value tpu_dataset_split() shuffles with, kept apart from training epochs. */
#define TPU_DATASET_SPLIT_EPOCH UINT64_MAX

/* Splits ds into a training part and a validation part of n_validation examples, chosen
 * deterministically: the validation examples are those at perm[0 .. n_validation) of
 * tpu_dataset_shuffle(perm, n, seed, TPU_DATASET_SPLIT_EPOCH). Both parts keep the examples
 * in their original relative order, and the same shape and n_classes as ds.
 *
 * n_validation must be in [1, n_examples - 1] (TPU_EINVAL otherwise, with a sentence). On
 * success *train and *validation are new datasets owned by the caller (tpu_dataset_free()
 * each); ds is not changed and may be freed right away. On failure neither is touched and
 * nothing stays allocated. */
int tpu_dataset_split(const struct tpu_dataset *ds, uint32_t n_validation, uint64_t seed,
                      struct tpu_dataset *train, struct tpu_dataset *validation,
                      struct tpu_diag *d);

/* Copies count examples into a batch: batch row k (k in [0, count)) is example
 * perm[start + k] (or example start + k when perm is NULL) while start + k < n_examples;
 * past the end it is padding: a row of zeros and the label -1, the marker that evaluation
 * and prediction mask out.
 *
 * perm, if given, holds n_examples indices, each < n_examples (a tpu_dataset_shuffle()
 * result). x receives [count][n_features] floats and y [count] labels; either may be NULL to
 * skip it. The caller owns all buffers. Returns the number of real (unpadded) rows,
 * min(count, n_examples - start) or 0 when start >= n_examples. */
uint32_t tpu_dataset_gather(const struct tpu_dataset *ds, const uint32_t *perm, uint64_t start,
                            uint32_t count, float *x, int32_t *y);

#ifdef __cplusplus
}
#endif
#endif
