/* Users' datasets (see tpusim/dataset.h): NumPy sets (x_*.npy, y_*.npy), a directory holding
 * either an IDX set or a NumPy set, and the checks of a dataset against a model and of a
 * test set against its training set, made before any work.
 *
 * The IDX reader is idx.c, the element conversions values.c. Every message names the file,
 * what it holds, the rule and the fix. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/idx.h"
#include "tpusim/dataset.h"
#include "tpusim/npy.h"
#include "util.h"

#define PATH_BYTES 4096

struct tpu_shape tpu_dataset_shape(const struct tpu_dataset *ds)
{
    return (struct tpu_shape){ds->image_rows, ds->image_cols,
                              ds->image_channels ? ds->image_channels : 1};
}

/* "a.npy holds 28x28 examples (784 values)" or "... holds examples of 784 values" */
static void holds_text(const char *file, struct tpu_shape s, char *buf, size_t size)
{
    char st[48];
    tpu__shape_text(s, st, sizeof st);
    int n; /* a long path is cut short in the message: checked, not an error */
    if (s.h == 1 && s.w == 1)
        n = snprintf(buf, size, "%s holds examples of %s values", file, st);
    else
        n = snprintf(buf, size, "%s holds %s examples (%llu values)", file, st,
                     (unsigned long long)s.h * s.w * s.c);
    if (n < 0 && size > 0)
        buf[0] = '\0';
}

static bool same_shape(struct tpu_shape a, struct tpu_shape b)
{
    return a.h == b.h && a.w == b.w && a.c == b.c;
}

static enum tpu__elem npy_elem(const struct tpu_npy_array *a)
{
    if (a->kind == 'f')
        return a->item_bytes == 8 ? TPU__ELEM_F64 : TPU__ELEM_F32;
    if (a->kind == 'u')
        return TPU__ELEM_U8;
    return a->item_bytes == 1   ? TPU__ELEM_I8
           : a->item_bytes == 2 ? TPU__ELEM_I16
           : a->item_bytes == 4 ? TPU__ELEM_I32
                                : TPU__ELEM_I64;
}

/* x's example shape from its dims: (N, F), (N, h, w) or (N, h, w, c). */
static int x_shape(const char *qx, const struct tpu_npy_array *x, struct tpu_shape *s,
                   struct tpu_diag *d)
{
    if (x->n_dims < 2 || x->n_dims > 4)
        return tpu__fail(d, TPU_ESHAPE, "%s: has %u dimension%s; features are (N, h, w, c), "
                         "(N, h, w) or (N, features), one row per example (numpy: "
                         "x.reshape(len(x), -1))", qx, x->n_dims, x->n_dims == 1 ? "" : "s");
    uint64_t v[3] = {1, 1, 1};
    if (x->n_dims == 2)
        v[2] = x->dims[1];
    else
        for (unsigned k = 1; k < x->n_dims; k++)
            v[k - 1] = x->dims[k];
    if (x->dims[0] > UINT32_MAX || v[0] * v[1] > UINT32_MAX || v[0] * v[1] * v[2] > UINT32_MAX)
        return tpu__fail(d, TPU_ERANGE, "%s: holds %llu examples of %llu values; a tpusim "
                         "dataset holds at most 4294967295 examples of at most 4294967295 "
                         "features", qx, (unsigned long long)x->dims[0],
                         (unsigned long long)(v[0] * v[1] * v[2]));
    *s = (struct tpu_shape){(uint32_t)v[0], (uint32_t)v[1], (uint32_t)v[2]};
    return 0;
}

int tpu_dataset_load_npy(const char *x_path, const char *y_path,
                         const struct tpu_dataset *like, struct tpu_dataset *out,
                         struct tpu_diag *d)
{
    if (!x_path || !y_path || !out)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_load_npy: x_path, y_path and out must not "
                         "be NULL");
    char qx[TPU__QUOTE_PATH_BYTES], qy[TPU__QUOTE_PATH_BYTES];
    tpu__quote(x_path, qx, sizeof qx);
    tpu__quote(y_path, qy, sizeof qy);
    struct tpu_npy_array x = {0}, y = {0};
    struct tpu_dataset ds;
    memset(&ds, 0, sizeof ds);
    struct tpu_shape s;
    int rc;
    /* y first: it is small, and its kind decides what x must be checked against */
    if ((rc = tpu_npy_read_array(y_path, &y, d)))
        return rc;
    const bool targets = y.kind == 'f';
    if (y.n_dims > 2 || (!targets && y.n_dims == 2 && y.dims[1] != 1)) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s: has %u dimensions (%llu x %llu%s) of %s; labels are "
                       "(N,) or (N, 1) of an integer dtype, regression targets (N, K) of "
                       "float32 or float64%s", qy, y.n_dims, (unsigned long long)y.dims[0],
                       (unsigned long long)y.dims[1], y.n_dims > 2 ? " x ..." : "",
                       y.dtype_name, targets ? "" : " (one-hot labels? numpy: y.argmax(1))");
        goto fail;
    }
    if (y.dims[0] > UINT32_MAX) {
        rc = tpu__fail(d, TPU_ERANGE, "%s: holds %llu rows; a tpusim dataset holds at most "
                       "4294967295 examples", qy, (unsigned long long)y.dims[0]);
        goto fail;
    }
    if (like && (like->n_targets > 0) != targets) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s holds %s (%s) but %s holds %s (%s); a training and a "
                       "test set hold the same kind of y", qy,
                       targets ? "regression targets" : "class labels", y.dtype_name,
                       like->y_file, like->n_targets ? "regression targets" : "class labels",
                       like->y_type);
        goto fail;
    }
    if ((rc = tpu_npy_read_array(x_path, &x, d)) || (rc = x_shape(qx, &x, &s, d)))
        goto fail;
    if (like && !same_shape(s, tpu_dataset_shape(like))) {
        char a[160], b[160];
        holds_text(qx, s, a, sizeof a);
        holds_text(like->x_file, tpu_dataset_shape(like), b, sizeof b);
        rc = tpu__fail(d, TPU_ESHAPE, "%s, but %s; a training and a test set hold examples "
                       "of one shape: reshape one of them (numpy: x.reshape(len(x), ...))", a,
                       b);
        goto fail;
    }
    const uint32_t n = (uint32_t)y.dims[0];
    if (x.dims[0] != n) {
        rc = tpu__fail(d, TPU_ESHAPE, "%s holds %llu examples but %s holds %u rows; x and y "
                       "must describe the same examples, one row each", qx,
                       (unsigned long long)x.dims[0], qy, (unsigned)n);
        goto fail;
    }
    const size_t n_features = (size_t)s.h * s.w * s.c, k = targets && y.n_dims == 2
                                                              ? (size_t)y.dims[1] : 1;
    ds.x = malloc((size_t)n * n_features * sizeof *ds.x);
    if (targets)
        ds.targets = malloc((size_t)n * k * sizeof *ds.targets);
    else
        ds.y = malloc((size_t)n * sizeof *ds.y);
    if (!ds.x || (!ds.y && !ds.targets)) {
        rc = tpu__fail(d, TPU_ENOMEM, "%s: out of memory for %u examples of %zu values", qx,
                       (unsigned)n, n_features);
        goto fail;
    }
    if ((rc = tpu__elem_to_float(x.data, npy_elem(&x), false, (size_t)n * n_features, ds.x,
                                 qx, d)))
        goto fail;
    if (targets &&
        (rc = tpu__elem_to_float(y.data, npy_elem(&y), false, (size_t)n * k, ds.targets, qy,
                                 d)))
        goto fail;
    uint32_t max_label = 0;
    for (uint32_t i = 0; !targets && i < n; i++) {
        int64_t v = tpu__elem_int(y.data, npy_elem(&y), false, i);
        if (v < 0 || v >= INT32_MAX) {
            rc = tpu__fail(d, TPU_ERANGE, "%s: the label at index %u is %lld; a label is a "
                           "class index from 0 to 2147483646 (are these labels? regression "
                           "targets are float: numpy y.astype('float32'))", qy, (unsigned)i,
                           (long long)v);
            goto fail;
        }
        ds.y[i] = (int32_t)v;
        if ((uint32_t)v > max_label)
            max_label = (uint32_t)v;
    }
    ds.n_examples = n;
    ds.n_features = (uint32_t)n_features;
    ds.image_rows = s.h;
    ds.image_cols = s.w;
    ds.image_channels = s.c;
    ds.n_classes = targets ? 0 : max_label + 1;
    ds.n_targets = targets ? (uint32_t)k : 0;
    snprintf(ds.origin, sizeof ds.origin, "%s", qx);
    snprintf(ds.x_file, sizeof ds.x_file, "%s", qx);
    snprintf(ds.y_file, sizeof ds.y_file, "%s", qy);
    snprintf(ds.x_type, sizeof ds.x_type, "%s", x.dtype_name);
    snprintf(ds.y_type, sizeof ds.y_type, "%s", y.dtype_name);
    tpu_npy_array_free(&x);
    tpu_npy_array_free(&y);
    *out = ds;
    return 0;
fail:
    tpu_npy_array_free(&x);
    tpu_npy_array_free(&y);
    tpu_dataset_free(&ds);
    return rc;
}

/* ---- a directory ----------------------------------------------------------------------- */

/* Whether dir/name exists (anything but ENOENT counts: the reader says what is wrong). */
static bool exists(const char *dir, const char *name)
{
    char path[PATH_BYTES];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 || (errno != ENOENT && errno != ENOTDIR);
}

/* The file of dir for an IDX pattern: Fashion-MNIST's name (.gz first), else the one entry
 * starting with prefix. Returns 1 and the name, 0 if none, 2 if several (names in `many`). */
static int find_idx(const char *dir, const char *prefix, const char *fashion, char *name,
                    size_t size, char *many, size_t many_size)
{
    char gz[96];
    snprintf(gz, sizeof gz, "%s.gz", fashion);
    if (exists(dir, gz) || exists(dir, fashion)) {
        snprintf(name, size, "%s", exists(dir, gz) ? gz : fashion);
        return 1;
    }
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int found = 0;
    size_t at = 0;
    many[0] = '\0';
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        if (found++ == 0)
            snprintf(name, size, "%s", e->d_name);
        if (at < many_size)
            at += (size_t)snprintf(many + at, many_size - at, "%s%s", at ? ", " : "",
                                   e->d_name);
    }
    closedir(dp);
    return found > 1 ? 2 : found;
}

static const char looked_for[] =
    "an IDX set (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
    "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz], or any files named "
    "train-images*, train-labels*, t10k-images*, t10k-labels*) or a NumPy set (x_train.npy, "
    "y_train.npy, x_test.npy, y_test.npy)";

int tpu_dataset_load_dir(const char *dir, bool train, const struct tpu_dataset *like,
                         struct tpu_dataset *out, struct tpu_diag *d)
{
    if (!dir || !out)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_load_dir: dir and out must not be NULL");
    char qd[TPU__QUOTE_PATH_BYTES];
    tpu__quote(dir, qd, sizeof qd);
    if (strlen(dir) > PATH_BYTES - 64)
        return tpu__fail(d, TPU_EINVAL, "the data directory name '%.200s...' is too long "
                         "(%zu bytes; at most %d)", qd, strlen(dir), PATH_BYTES - 64);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return tpu__fail(d, TPU_ENOTFOUND, "--data '%s': %s; give a directory holding %s", qd,
                         stat(dir, &st) != 0 ? strerror(errno) : "not a directory",
                         looked_for);
    static const char *const idx_prefix[4] = {"train-images", "train-labels", "t10k-images",
                                              "t10k-labels"};
    static const char *const fashion[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    static const char *const npy[4] = {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"};
    char idx_name[4][256], many[4][256];
    int idx_found[4], n_idx = 0, n_npy = 0;
    for (int k = 0; k < 4; k++) {
        idx_found[k] = find_idx(dir, idx_prefix[k], fashion[k], idx_name[k], sizeof idx_name[k],
                                many[k], sizeof many[k]);
        n_idx += idx_found[k] != 0;
        n_npy += exists(dir, npy[k]);
    }
    if (n_idx && n_npy)
        return tpu__fail(d, TPU_EINVAL, "--data '%s' holds both an IDX set (%s...) and a NumPy "
                         "set (x_train.npy...); give a directory with one of them", qd,
                         idx_name[idx_found[0] ? 0 : idx_found[1] ? 1 : idx_found[2] ? 2 : 3]);
    if (!n_idx && !n_npy)
        return tpu__fail(d, TPU_ENOTFOUND, "--data '%s' holds no dataset: looked for %s", qd,
                         looked_for);
    const int a = train ? 0 : 2, b = train ? 1 : 3;
    char px[PATH_BYTES], py[PATH_BYTES];
    if (n_npy) {
        for (int k = a; k <= b; k++)
            if (!exists(dir, npy[k]))
                return tpu__fail(d, TPU_ENOTFOUND, "--data '%s' holds a NumPy set without %s; "
                                 "a NumPy set is x_train.npy, y_train.npy, x_test.npy and "
                                 "y_test.npy (Keras's load_data names): add it", qd, npy[k]);
        snprintf(px, sizeof px, "%s/%s", dir, npy[a]);
        snprintf(py, sizeof py, "%s/%s", dir, npy[b]);
        return tpu_dataset_load_npy(px, py, like, out, d);
    }
    for (int k = a; k <= b; k++) {
        if (idx_found[k] == 0)
            return tpu__fail(d, TPU_ENOTFOUND, "--data '%s' holds an IDX set without %s "
                             "(no %s[.gz], no file named %s*); an IDX set has train-images, "
                             "train-labels, t10k-images and t10k-labels files: add it", qd,
                             idx_prefix[k], fashion[k], idx_prefix[k]);
        if (idx_found[k] == 2)
            return tpu__fail(d, TPU_EINVAL, "--data '%s': several files are named %s* (%s); "
                             "keep one", qd, idx_prefix[k], many[k]);
    }
    snprintf(px, sizeof px, "%s/%s", dir, idx_name[a]);
    snprintf(py, sizeof py, "%s/%s", dir, idx_name[b]);
    /* a test set of another shape than its training set: say which, from the header */
    char fix[TPU_DATASET_NAME_MAX + 192];
    if (like) {
        char ls[48];
        tpu__shape_text(tpu_dataset_shape(like), ls, sizeof ls);
        const bool fm = !strncmp(idx_name[a], fashion[a], strlen(fashion[a])) &&
                        !strcmp(ls, "28x28");
        snprintf(fix, sizeof fix, "%s%s holds %s images: the training and test images must "
                 "have one shape", fm ? "Fashion-MNIST's images are 28x28, and " : "",
                 like->x_file, ls);
    }
    return tpu__dataset_load_idx_set(px, py, like, like ? fix : NULL, out, d);
}

/* ---- checks against a model -------------------------------------------------------------- */

static const char *x_name(const struct tpu_dataset *ds)
{
    return ds->x_file[0] ? ds->x_file : "the dataset";
}

static const char *y_name(const struct tpu_dataset *ds)
{
    return ds->y_file[0] ? ds->y_file : "the dataset's labels";
}

int tpu_dataset_check_model(const struct tpu_dataset *ds, struct tpu_shape input,
                            enum tpu_loss loss, uint32_t outputs, struct tpu_diag *d)
{
    if (!ds || (!ds->y && !ds->targets))
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_check_model: needs a loaded dataset");
    const struct tpu_shape s = tpu_dataset_shape(ds);
    const uint64_t have = (uint64_t)s.h * s.w * s.c, want = (uint64_t)input.h * input.w * input.c;
    const bool flat = (s.h == 1 && s.w == 1) || (input.h == 1 && input.w == 1);
    if (!same_shape(s, input) && !(flat && have == want)) {
        char a[320], st[48];
        holds_text(x_name(ds), s, a, sizeof a);
        tpu__shape_text(input, st, sizeof st);
        char in_text[96];
        if (input.h == 1 && input.w == 1)
            snprintf(in_text, sizeof in_text, "%s values", st);
        else
            snprintf(in_text, sizeof in_text, "%s (%llu)", st, (unsigned long long)want);
        return tpu__fail(d, TPU_ESHAPE, "%s; the model's input is %s: give data of the "
                         "model's input shape, or a model whose input is the data's", a,
                         in_text);
    }
    if (loss == TPU_LOSS_SOFTMAX_XENT && !ds->y)
        return tpu__fail(d, TPU_ESHAPE, "%s holds regression targets (%s, %u per example); "
                         "the model's loss is softmax cross-entropy, which needs integer class "
                         "labels (N,): give labels, or a model with the mse loss", y_name(ds),
                         ds->y_type[0] ? ds->y_type : "float", (unsigned)ds->n_targets);
    if (loss == TPU_LOSS_MSE && !ds->targets)
        return tpu__fail(d, TPU_ESHAPE, "%s holds integer class labels (%s); the model's loss "
                         "is mean squared error, which needs float targets (N, %u) of the "
                         "output's size: give float targets (numpy: y.astype('float32')), or a "
                         "model with softmax cross-entropy", y_name(ds),
                         ds->y_type[0] ? ds->y_type : "int32", (unsigned)outputs);
    if (loss == TPU_LOSS_MSE && ds->n_targets != outputs)
        return tpu__fail(d, TPU_ESHAPE, "%s holds %u target values per example; the model's "
                         "output has %u: give targets (N, %u), or a model whose output has %u "
                         "values", y_name(ds), (unsigned)ds->n_targets, (unsigned)outputs,
                         (unsigned)outputs, (unsigned)ds->n_targets);
    for (uint32_t i = 0; loss == TPU_LOSS_SOFTMAX_XENT && i < ds->n_examples; i++)
        if (ds->y[i] < 0 || (uint32_t)ds->y[i] >= outputs)
            return tpu__fail(d, TPU_ERANGE, "%s: the label of example %u is %d; the model has "
                             "%u classes (labels 0 to %u): give a model with at least %d "
                             "outputs, or fix the label", y_name(ds), (unsigned)i,
                             (int)ds->y[i], (unsigned)outputs,
                             (unsigned)(outputs ? outputs - 1 : 0), (int)ds->y[i] + 1);
    return 0;
}

int tpu_dataset_check_pair(const struct tpu_dataset *train, const struct tpu_dataset *test,
                           struct tpu_diag *d)
{
    if (!train || !test)
        return tpu__fail(d, TPU_EINVAL, "tpu_dataset_check_pair: needs two datasets");
    const struct tpu_shape a = tpu_dataset_shape(train), b = tpu_dataset_shape(test);
    if (!same_shape(a, b)) {
        char ta[320], tb[320];
        holds_text(x_name(train), a, ta, sizeof ta);
        holds_text(x_name(test), b, tb, sizeof tb);
        return tpu__fail(d, TPU_ESHAPE, "%s, but %s; a training and a test set hold examples "
                         "of one shape: reshape one of them", ta, tb);
    }
    if (!train->y != !test->y || train->n_targets != test->n_targets) {
        char ka[64] = "class labels", kb[64] = "class labels";
        if (!train->y)
            snprintf(ka, sizeof ka, "regression targets of %u values", (unsigned)train->n_targets);
        if (!test->y)
            snprintf(kb, sizeof kb, "regression targets of %u values", (unsigned)test->n_targets);
        return tpu__fail(d, TPU_ESHAPE, "%s holds %s but %s holds %s; a training and a test "
                         "set hold the same kind of y (class labels, or targets of one size)",
                         y_name(train), ka, y_name(test), kb);
    }
    return 0;
}
