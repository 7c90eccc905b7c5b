/* Datasets beyond file reading (see tpusim/dataset.h): Fashion-MNIST from the Debian
 * package, freeing, the deterministic shuffle, the validation split and batch gathering.
 *
 * The IDX reader itself is idx.c. Nothing here does I/O except looking up which
 * Fashion-MNIST files exist; the shuffle is integer arithmetic only, so a (seed, epoch) gives
 * the same order on every machine. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/idx.h"
#include "rng.h"
#include "tpusim/dataset.h"
#include "util.h"

#define PATH_BYTES 4096

static const char fashion_files[] = "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
                                    "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz";

/* Finds "<dir>/<name>.gz" or else "<dir>/<name>" and writes it to path. Returns 1 if one
 * exists (or cannot be checked for another reason than its absence: the reader will then
 * say why it cannot be opened), 0 if neither exists, TPU_EINVAL if the path is too long. */
static int find_file(const char *dir, const char *name, char *path, struct tpu_diag *d)
{
    struct stat st;
    int len = snprintf(path, PATH_BYTES, "%s/%s.gz", dir, name);
    if (len < 0 || len >= PATH_BYTES)
        return tpu__fail(d, TPU_EINVAL, "the Fashion-MNIST directory name '%.200s...' is too "
                         "long (%d bytes with the file name; at most %d)", dir, len,
                         PATH_BYTES - 1);
    if (stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR))
        return 1;
    snprintf(path, PATH_BYTES, "%s/%s", dir, name);
    if (stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR))
        return 1;
    snprintf(path, PATH_BYTES, "%s/%s.gz", dir, name); /* the name to report */
    return 0;
}

int tpu_dataset_fashion_mnist(const char *dir, bool train, struct tpu_dataset *out,
                              struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_fashion_mnist: out must not be NULL");
    const bool is_default = !dir || !strcmp(dir, TPU_DATASET_FASHION_MNIST_DIR);
    if (!dir)
        dir = TPU_DATASET_FASHION_MNIST_DIR;
    const char *set = train ? "train" : "t10k";
    char name[64];
    char *images = malloc(PATH_BYTES), *labels = malloc(PATH_BYTES);
    if (!images || !labels) {
        free(images);
        free(labels);
        return tpu__fail(d, TPU_ENOMEM, "out of memory");
    }
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", set);
    int have_images = find_file(dir, name, images, d);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", set);
    int have_labels = have_images < 0 ? 0 : find_file(dir, name, labels, d);
    int rc = 0;
    if (have_images < 0 || have_labels < 0) {
        rc = have_images < 0 ? have_images : have_labels;
        goto done;
    }
    if (!have_images || !have_labels) {
        /* what is missing: the directory itself, or which of the two files */
        char missing[160];
        struct stat st;
        const char *img_name = strrchr(images, '/') + 1, *lab_name = strrchr(labels, '/') + 1;
        if (stat(dir, &st) != 0)
            snprintf(missing, sizeof missing, "no such directory");
        else if (!S_ISDIR(st.st_mode))
            snprintf(missing, sizeof missing, "not a directory");
        else if (!have_images && !have_labels)
            snprintf(missing, sizeof missing, "no %s and no %s", img_name, lab_name);
        else
            snprintf(missing, sizeof missing, "no %s", have_images ? lab_name : img_name);
        if (is_default)
            rc = tpu__fail(d, TPU_ENOTFOUND, "Fashion-MNIST is not installed at %s (%s): "
                           "install it with 'apt-get install dataset-fashion-mnist' (as "
                           "root), or pass --data DIR holding %s", dir, missing,
                           fashion_files);
        else
            rc = tpu__fail(d, TPU_ENOTFOUND, "Fashion-MNIST is not in %s (%s): pass --data "
                           "DIR holding %s (or the same names without .gz), or install it "
                           "with 'apt-get install dataset-fashion-mnist' (as root) and leave "
                           "out --data to read %s", dir, missing, fashion_files,
                           TPU_DATASET_FASHION_MNIST_DIR);
        goto done;
    }
    /* the models take 28x28 = 784 inputs and 10 classes: other shapes fail here, up front */
    if ((rc = tpu__dataset_load_idx(images, labels, TPU_DATASET_FASHION_MNIST_CLASSES,
                                    TPU_DATASET_FASHION_MNIST_ROWS,
                                    TPU_DATASET_FASHION_MNIST_COLS,
                                    "Fashion-MNIST's images are 28x28: is this directory "
                                    "Fashion-MNIST's (or MNIST's)?", out, d)))
        goto done;
    char qdir[TPU_DATASET_ORIGIN_MAX - 64]; /* a longer name ends in "...", visibly */
    snprintf(out->origin, sizeof out->origin, "Fashion-MNIST %s (%u examples) from %s",
             train ? "train" : "test", (unsigned)out->n_examples,
             tpu__quote(dir, qdir, sizeof qdir));
done:
    free(images);
    free(labels);
    return rc;
}

const char *tpu_dataset_fashion_mnist_class_name(int32_t label)
{
    /* the dataset's own names (its README) */
    static const char *const names[TPU_DATASET_FASHION_MNIST_CLASSES] = {
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
        "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
    };
    if (label < 0 || label >= (int32_t)TPU_DATASET_FASHION_MNIST_CLASSES)
        return "?";
    return names[label];
}

void tpu_dataset_free(struct tpu_dataset *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->y);
    free(ds->targets);
    memset(ds, 0, sizeof *ds);
}

int tpu_dataset_shuffle(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch)
{
    if (!perm && n > 0)
        return TPU_EINVAL;
    struct tpu__rng r;
    tpu__rng_seed(&r, epoch);
    tpu__rng_seed(&r, seed ^ tpu__rng_next(&r));
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n > 0 ? n - 1 : 0; i > 0; i--) {
        const uint64_t bound = (uint64_t)i + 1;
        /* 2^64 mod bound: outputs at or above 2^64 minus this would favour small j */
        const uint64_t excess = (UINT64_MAX % bound + 1) % bound;
        uint64_t v;
        do
            v = tpu__rng_next(&r);
        while (excess != 0 && v > UINT64_MAX - excess);
        const uint32_t j = (uint32_t)(v % bound);
        const uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return 0;
}

/* Allocates an empty dataset of n examples with src's shape. */
static int alloc_like(const struct tpu_dataset *src, uint32_t n, struct tpu_dataset *ds)
{
    memset(ds, 0, sizeof *ds);
    ds->x = malloc((size_t)n * src->n_features * sizeof *ds->x);
    if (src->y)
        ds->y = malloc((size_t)n * sizeof *ds->y);
    else
        ds->targets = malloc((size_t)n * src->n_targets * sizeof *ds->targets);
    if (!ds->x || (!ds->y && !ds->targets)) {
        tpu_dataset_free(ds);
        return TPU_ENOMEM;
    }
    ds->n_examples = n;
    ds->n_features = src->n_features;
    ds->image_rows = src->image_rows;
    ds->image_cols = src->image_cols;
    ds->image_channels = src->image_channels;
    ds->n_classes = src->n_classes;
    ds->n_targets = src->n_targets;
    memcpy(ds->x_file, src->x_file, sizeof ds->x_file);
    memcpy(ds->y_file, src->y_file, sizeof ds->y_file);
    memcpy(ds->x_type, src->x_type, sizeof ds->x_type);
    memcpy(ds->y_type, src->y_type, sizeof ds->y_type);
    return 0;
}

int tpu_dataset_split(const struct tpu_dataset *ds, uint32_t n_validation, uint64_t seed,
                      struct tpu_dataset *train, struct tpu_dataset *validation,
                      struct tpu_diag *d)
{
    if (!ds || !train || !validation || !ds->x || (!ds->y && !ds->targets))
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_split: needs a loaded dataset and two "
                         "output structs");
    const uint32_t n = ds->n_examples;
    if (n_validation == 0 || n_validation >= n)
        return tpu__fail(d, TPU_EINVAL, "a validation split of %u examples from %u is not "
                         "possible: it must take at least 1 example and leave at least 1 for "
                         "training (1 to %u)", (unsigned)n_validation, (unsigned)n,
                         (unsigned)(n > 0 ? n - 1 : 0));
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    unsigned char *is_val = calloc(n, 1);
    struct tpu_dataset tr, va;
    memset(&tr, 0, sizeof tr);
    memset(&va, 0, sizeof va);
    int rc = 0;
    if (!perm || !is_val || (rc = alloc_like(ds, n - n_validation, &tr)) ||
        (rc = alloc_like(ds, n_validation, &va))) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory splitting %u examples", (unsigned)n);
        goto done;
    }
    tpu_dataset_shuffle(perm, n, seed, TPU_DATASET_SPLIT_EPOCH);
    for (uint32_t i = 0; i < n_validation; i++)
        is_val[perm[i]] = 1;
    const size_t row_bytes = (size_t)ds->n_features * sizeof *ds->x;
    uint32_t n_tr = 0, n_va = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct tpu_dataset *to = is_val[i] ? &va : &tr;
        uint32_t k = is_val[i] ? n_va++ : n_tr++;
        memcpy(to->x + (size_t)k * ds->n_features, ds->x + (size_t)i * ds->n_features,
               row_bytes);
        if (ds->y)
            to->y[k] = ds->y[i];
        else
            memcpy(to->targets + (size_t)k * ds->n_targets,
                   ds->targets + (size_t)i * ds->n_targets, ds->n_targets * sizeof(float));
    }
    snprintf(tr.origin, sizeof tr.origin, "%.400s, minus %u validation examples (seed %llu)",
             ds->origin, (unsigned)n_validation, (unsigned long long)seed);
    snprintf(va.origin, sizeof va.origin, "%.400s, %u validation examples (seed %llu)",
             ds->origin, (unsigned)n_validation, (unsigned long long)seed);
    *train = tr;
    *validation = va;
    memset(&tr, 0, sizeof tr);
    memset(&va, 0, sizeof va);
done:
    tpu_dataset_free(&tr);
    tpu_dataset_free(&va);
    free(perm);
    free(is_val);
    return rc;
}

uint32_t tpu_dataset_gather(const struct tpu_dataset *ds, const uint32_t *perm, uint64_t start,
                            uint32_t count, float *x, int32_t *y)
{
    const size_t nf = ds->n_features;
    const uint32_t n_real =
        start >= ds->n_examples ? 0
        : (uint64_t)count < ds->n_examples - start ? count
                                                   : (uint32_t)(ds->n_examples - start);
    for (uint32_t k = 0; k < n_real; k++) {
        const uint32_t i = perm ? perm[start + k] : (uint32_t)(start + k);
        assert(i < ds->n_examples); /* perm must hold indices of ds */
        assert(!y || ds->y);          /* a dataset of targets: tpu_dataset_gather_targets */
        if (x)
            memcpy(x + (size_t)k * nf, ds->x + (size_t)i * nf, nf * sizeof *x);
        if (y)
            y[k] = ds->y[i];
    }
    for (uint32_t k = n_real; k < count; k++) {
        if (x)
            memset(x + (size_t)k * nf, 0, nf * sizeof *x);
        if (y)
            y[k] = -1;
    }
    return n_real;
}

uint32_t tpu_dataset_gather_targets(const struct tpu_dataset *ds, const uint32_t *perm,
                                    uint64_t start, uint32_t count, float *x, float *t,
                                    int32_t *mask)
{
    const uint32_t n_real = tpu_dataset_gather(ds, perm, start, count, x, NULL);
    const size_t k = ds->n_targets;
    for (uint32_t r = 0; r < count; r++) {
        if (t && r < n_real)
            memcpy(t + (size_t)r * k,
                   ds->targets + (size_t)(perm ? perm[start + r] : start + r) * k,
                   k * sizeof *t);
        else if (t)
            memset(t + (size_t)r * k, 0, k * sizeof *t);
        if (mask)
            mask[r] = r < n_real ? 0 : -1;
    }
    return n_real;
}
