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
 * dimension, then the data in row-major order. tpu_dataset_load_idx() reads the MNIST layout
 * of unsigned bytes (type 0x08): images with magic 0x00000803 (count, rows, columns) and
 * labels with magic 0x00000801 (count). tpu_dataset_load_idx_set() reads any MNIST-format
 * set: every IDX data type (0x08 unsigned byte, 0x09 signed byte, 0x0B int16, 0x0C int32,
 * 0x0D float32, 0x0E float64, all big-endian), images of 2 to 4 dimensions ([N][features],
 * [N][h][w], [N][h][w][c]) and labels of one dimension of an integer type. A file may be
 * plain or gzip-compressed; the gzip magic decides, not the name. Byte offsets in messages
 * count bytes of the IDX data, that is after decompression.
 *
 * NumPy (tpu_dataset_load_npy()): features x of shape (N, h, w, c), (N, h, w) or
 * (N, features) and dtype uint8, int8, int16, int32, int64, float32 or float64; labels y of
 * shape (N,) or (N, 1) and an integer dtype (class labels), or targets y of shape (N, K) and
 * dtype float32 or float64 (regression). Keras's load_data() names a set's files x_train.npy,
 * y_train.npy, x_test.npy and y_test.npy; tpu_dataset_load_dir() looks for those.
 *
 * Values. Unsigned bytes (IDX type 0x08, NumPy uint8) are pixels: x = byte / 255.0f,
 * correctly rounded, in [0, 1], as MNIST is always fed. Every other type is taken as it is,
 * converted to the nearest float (int32 and int64 values past 2^24 round, float64 values
 * round); a feature or target that is not finite (NaN, infinity, or a float64 beyond the
 * float range) is refused, naming the file and the index.
 *
 * All functions are reentrant; nothing here keeps global state. */
#ifndef TPUSIM_DATASET_H
#define TPUSIM_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/error.h"
#include "tpusim/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the Debian package dataset-fashion-mnist installs its files. */
#define TPU_DATASET_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define TPU_DATASET_FASHION_MNIST_CLASSES 10u
#define TPU_DATASET_FASHION_MNIST_ROWS 28u /* every image is 28x28 */
#define TPU_DATASET_FASHION_MNIST_COLS 28u

#define TPU_DATASET_ORIGIN_MAX 512

#define TPU_DATASET_NAME_MAX 256

/* A dataset in memory: features x and, per example, either a class label (y) or regression
 * targets (targets). x, y and targets are owned by the struct and released by
 * tpu_dataset_free(); the struct itself belongs to the caller (usually on the stack).
 *
 * The example shape is image_rows x image_cols x image_channels (h x w x c, NHWC as net.h's
 * tensors; a flat vector of F features is 1 x 1 x F). image_channels 0 reads as 1, so a
 * struct filled by code that knows only rows and columns keeps its meaning
 * (tpu_dataset_shape() resolves it). */
struct tpu_dataset {
    uint32_t n_examples;             /* rows of x and y, >= 1 */
    uint32_t n_features;             /* h * w * c, e.g. 784 = 28*28*1 */
    uint32_t image_rows, image_cols; /* h and w of the example shape */
    uint32_t n_classes;              /* labels: every label is in [0, n_classes); 0 with
                                        targets */
    float *x;                        /* [n_examples][n_features] row-major, HWC per example;
                                        unsigned bytes as pixel/255.0f, correctly rounded,
                                        in [0, 1]; other types as they are */
    int32_t *y;                      /* [n_examples] class labels; NULL with targets */
    char origin[TPU_DATASET_ORIGIN_MAX]; /* what was loaded, for logs and reports, e.g.
                                            "Fashion-MNIST train (60000 examples) from
                                            /usr/share/datasets/fashion-mnist" */
    uint32_t image_channels;         /* c of the example shape; 0 reads as 1 */
    uint32_t n_targets;              /* regression: values per example; 0 with labels */
    float *targets;                  /* [n_examples][n_targets] f32; NULL with labels */
    /* for messages: the files x and y came from ("" when not loaded from files) and their
     * element types as the format names them ("unsigned byte", "float32", ...) */
    char x_file[TPU_DATASET_NAME_MAX], y_file[TPU_DATASET_NAME_MAX];
    char x_type[24], y_type[24];
};

/* The example shape h x w x c of ds (image_channels 0 read as 1). */
struct tpu_shape tpu_dataset_shape(const struct tpu_dataset *ds);

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

/* Reads any MNIST-format IDX set (see the top of this file): images of any IDX data type
 * with 2 to 4 dimensions ([N][features] is 1 x 1 x features per example, [N][h][w] is
 * h x w x 1, [N][h][w][c] is h x w x c) and labels of one dimension and an integer type
 * (unsigned or signed byte, int16, int32), each >= 0; n_classes is the largest label plus
 * one. Unsigned-byte images scale by 1/255; other types are taken as they are.
 *
 * Errors are tpu_dataset_load_idx()'s, and: a data type that is not an IDX type, a number of
 * dimensions out of range, a label file of a float type, a negative label (naming the byte
 * offset and the example), a feature that is not finite (TPU_EPARSE or TPU_ERANGE). If
 * like is not NULL, the images must have like's example shape: checked from the header
 * before any data is read, else TPU_ESHAPE naming both files' shapes (a test set that does
 * not match its training set). Ownership as tpu_dataset_load_idx(); origin is the image
 * file's path. */
int tpu_dataset_load_idx_set(const char *images_path, const char *labels_path,
                             const struct tpu_dataset *like, struct tpu_dataset *out,
                             struct tpu_diag *d);

/* Reads a NumPy set (see the top of this file): x_path the features, y_path the labels
 * (an integer dtype, shape (N,) or (N, 1), each >= 0; n_classes = the largest label + 1) or
 * the regression targets (float32 or float64, shape (N, K): n_targets = K, y NULL). Files of
 * NumPy format 1.0 to 3.0, C order, little-endian. If like is not NULL, x must have like's
 * example shape and y be of like's kind (labels or K targets): else TPU_ESHAPE naming both.
 *
 * Errors name the file, what it holds and what would be accepted: a file that cannot be
 * opened (TPU_EIO), a damaged file or an unsupported dtype (TPU_EPARSE), a shape of the
 * wrong rank, a zero dimension, or counts of x and y that differ (TPU_ESHAPE), a negative
 * label or a value that is not finite (TPU_ERANGE). Ownership as tpu_dataset_load_idx(). */
int tpu_dataset_load_npy(const char *x_path, const char *y_path,
                         const struct tpu_dataset *like, struct tpu_dataset *out,
                         struct tpu_diag *d);

/* Loads the training set (train = true) or the test set of the directory `dir`, which holds
 * one of:
 *   - an IDX set: Fashion-MNIST's file names (train-images-idx3-ubyte[.gz],
 *     train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])
 *     or, for any other MNIST-format set, one file each matching train-images*,
 *     train-labels*, t10k-images* and t10k-labels*; read with tpu_dataset_load_idx_set();
 *   - a NumPy set: x_train.npy, y_train.npy, x_test.npy, y_test.npy (Keras's names); read
 *     with tpu_dataset_load_npy().
 * When both sets or neither are there, or a set is incomplete or ambiguous (two files match
 * one pattern), fails with TPU_ENOTFOUND or TPU_EINVAL and a sentence listing what was
 * looked for and what was found. like as in the two readers (pass the training set when
 * loading the test set). Ownership as tpu_dataset_load_idx(). */
int tpu_dataset_load_dir(const char *dir, bool train, const struct tpu_dataset *like,
                         struct tpu_dataset *out, struct tpu_diag *d);

/* Checks, before any work, that ds fits a model whose input is `input` (h x w x c) and whose
 * loss is `loss` with `outputs` classes (softmax cross-entropy) or values per example (MSE):
 *   - the shape: equal, or the same number of values when either side is a flat vector
 *     (1 x 1 x F: the infeed bytes are the same); else TPU_ESHAPE, e.g. "x_train.npy holds
 *     28x28 examples (784 values); the model's input is 32x32x3 (3072): ...";
 *   - the kind: integer labels for softmax cross-entropy, float targets of `outputs` values
 *     for MSE (TPU_ESHAPE, naming the file and its dtype);
 *   - every label below `outputs` (TPU_ERANGE, naming the file, the example's index and the
 *     label).
 * Returns 0 or the error, with a sentence that names the value, the rule and the fix. */
int tpu_dataset_check_model(const struct tpu_dataset *ds, struct tpu_shape input,
                            enum tpu_loss loss, uint32_t outputs, struct tpu_diag *d);

/* Checks that a training and a test set agree: the same example shape, both labelled or both
 * with the same number of targets (TPU_ESHAPE naming both sets' files otherwise). Labels of
 * the test set above the training set's classes are left to tpu_dataset_check_model(). */
int tpu_dataset_check_pair(const struct tpu_dataset *train, const struct tpu_dataset *test,
                           struct tpu_diag *d);

/* The name of a Fashion-MNIST class ("T-shirt/top", "Trouser", ... "Ankle boot"), static
 * storage; "?" outside [0, 10). */
const char *tpu_dataset_fashion_mnist_class_name(int32_t label);

/* Frees x, y and targets and zeroes the struct. Accepts NULL and an already freed (zeroed)
 * struct. */
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
 * skip it (y must be NULL for a dataset of targets). The caller owns all buffers. Returns
 * the number of real (unpadded) rows, min(count, n_examples - start) or 0 when
 * start >= n_examples. */
uint32_t tpu_dataset_gather(const struct tpu_dataset *ds, const uint32_t *perm, uint64_t start,
                            uint32_t count, float *x, int32_t *y);

/* tpu_dataset_gather() for a dataset of targets: t receives [count][n_targets] floats (zeros
 * past the end) and mask [count] the row mask net.h's MSE programs read (0 for a real row,
 * -1 for padding); any of x, t and mask may be NULL. */
uint32_t tpu_dataset_gather_targets(const struct tpu_dataset *ds, const uint32_t *perm,
                                    uint64_t start, uint32_t count, float *x, float *t,
                                    int32_t *mask);

#ifdef __cplusplus
}
#endif
#endif
