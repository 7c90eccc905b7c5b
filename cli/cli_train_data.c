/* The data of `tpusim train`, `evaluate` and `predict`: Fashion-MNIST from the Debian
 * package, or a user's set through --data DIR (tpu_dataset_load_dir: an IDX set or a NumPy
 * set), the test set read first so that the training set is checked against its shape from
 * the header; then the --layers MLP's input width and class count, from the data (train) or
 * from the checkpoint (evaluate, predict), with the data checked against them before any
 * work. Every failure is printed here (tpu__cli_error) and returned as an exit code. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "tpusim/checkpoint.h"
#include "tpusim/dataset.h"

/* evaluate and predict: the input width and class count of the MLP that the latest
 * checkpoint in model_dir holds (w0's rows, the last layer's columns), if it has those
 * tensors; 0 and 0 otherwise (restoring it then says what does not match). */
static void checkpoint_mlp_shape(const struct train_opts *o, uint32_t *inputs,
                                 uint32_t *classes)
{
    struct tpu_diag d = {0};
    char path[OPT_PATH_MAX + 64], last[16];
    struct tpu_checkpoint_info info;
    *inputs = *classes = 0;
    if (tpu_checkpoint_latest(o->rc.model_dir, NULL, path, sizeof path, &d) ||
        tpu_checkpoint_inspect(path, &info, &d))
        return;
    snprintf(last, sizeof last, "w%u", (unsigned)(o->spec.n_layers - 1));
    uint32_t in = 0, out = 0;
    for (size_t i = 0; i < info.n_tensors; i++) {
        if (!strcmp(info.tensors[i].name, "w0"))
            in = info.tensors[i].rows;
        if (!strcmp(info.tensors[i].name, last))
            out = info.tensors[i].cols;
    }
    if (in && out) {
        *inputs = in;
        *classes = out;
    }
    tpu_checkpoint_info_free(&info);
}

int tpu__cli_train_load_data(const struct train_opts *o, bool need_train_data,
                             struct tpu_dataset *train, struct tpu_dataset *test)
{
    struct tpu_diag d = {0};
    const char *data = o->data[0] ? o->data : NULL; /* NULL: the Debian package's path */
    if (!data) {
        if ((need_train_data && tpu_dataset_fashion_mnist(NULL, true, train, &d)) ||
            tpu_dataset_fashion_mnist(NULL, false, test, &d))
            return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg);
    } else if (tpu_dataset_load_dir(data, false, NULL, test, &d) ||
               (need_train_data && tpu_dataset_load_dir(data, true, test, train, &d)) ||
               (need_train_data && tpu_dataset_check_pair(train, test, &d))) {
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg);
    }
    return 0;
}

int tpu__cli_train_fit_mlp(struct train_opts *o, bool need_train_data,
                           const struct tpu_dataset *train, const struct tpu_dataset *test)
{
    struct tpu_diag d = {0};
    const char *cmd = o->cmd;
    const char *data = o->data;
    const struct tpu_dataset *ds = need_train_data ? train : test;
    if (ds->targets)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--data '%s': %s holds regression targets "
                              "(%s, %u per example); the --layers MLP trains softmax "
                              "cross-entropy on integer class labels: give labels of shape (N,)",
                              data, ds->y_file, ds->y_type, (unsigned)ds->n_targets);
    uint32_t inputs = ds->n_features;
    uint32_t classes = train->n_classes > test->n_classes ? train->n_classes : test->n_classes;
    const char *from = "the data";
    if (!need_train_data || o->int8) {
        uint32_t ck_in, ck_classes;
        checkpoint_mlp_shape(o, &ck_in, &ck_classes);
        if (ck_in) {
            inputs = ck_in;
            classes = ck_classes;
            from = "the checkpoint";
        }
    }
    if (classes < 2)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--data '%s': %s holds only the label 0; "
                              "softmax cross-entropy needs at least 2 classes: give labels "
                              "of 2 or more classes", data, ds->y_file);
    if (classes > 65536)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--data '%s': %s holds labels up to %u; the "
                              "--layers MLP has at most 65536 classes: are these class labels?",
                              data, ds->y_file, (unsigned)(classes - 1));
    const struct tpu_shape flat = {1, 1, inputs};
    const struct tpu_dataset *check[2] = {test, need_train_data ? train : NULL};
    for (int k = 0; k < 2; k++)
        if (check[k] &&
            tpu_dataset_check_model(check[k], flat, TPU_LOSS_SOFTMAX_XENT, classes, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s (the MLP's input width and classes "
                                  "come from %s%s)", d.msg, from,
                                  !strcmp(from, "the data") ? ""
                                  : ": evaluate and predict on data like the training data");
    o->spec.sizes[0] = inputs;
    o->spec.sizes[o->spec.n_layers] = classes;
    return 0;
}
