/* `tpusim train|evaluate|predict --model FILE`: what the commands need of a layer graph
 * (net.h) beside the --layers MLP. The model file is read before the data, so a bad model
 * fails before any data is loaded; the data is then checked against the net's input and loss
 * (tpu_dataset_check_model) before any device work, and the net's training spec is filled
 * from the same options as the MLP's (the optimizer's fields) plus AdamW's weight decay and
 * the learning-rate schedule. Running the commands stays cli_train.c's. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "tpusim/dataset.h"
#include "tpusim/checkpoint.h"
#include "tpusim/net.h"

int tpu__cli_train_load_net(const struct train_opts *o, struct tpu_net **net)
{
    struct tpu_diag d = {0};
    int rc = tpu_net_load_file(o->model_file, net, &d);
    if (rc == TPU_EIO && o->model_from_config)
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "--model: %s (paths in --config FILE are "
                              "relative to the current directory)", d.msg);
    if (rc)
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "--model: %s", d.msg);
    return 0;
}

uint32_t tpu__cli_net_outputs(const struct tpu_net *net, enum tpu_loss *loss)
{
    uint32_t tensor = 0;
    struct tpu_layer_info li;
    if (tpu_net_output(net, &tensor, loss) || tpu_net_layer(net, tensor, &li))
        return 0;
    return *loss == TPU_LOSS_SOFTMAX_XENT ? li.out.c : li.out.h * li.out.w * li.out.c;
}

int tpu__cli_train_fit_net(struct train_opts *o, const struct tpu_net *net,
                           bool need_train_data, const struct tpu_dataset *train,
                           const struct tpu_dataset *test)
{
    struct tpu_diag d = {0};
    struct tpu_layer_info in;
    enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
    const uint32_t outputs = tpu__cli_net_outputs(net, &loss);
    tpu_net_layer(net, 0, &in);
    const struct tpu_dataset *check[2] = {test, need_train_data ? train : NULL};
    for (int k = 0; k < 2; k++)
        if (check[k] && tpu_dataset_check_model(check[k], in.out, loss, outputs, &d))
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--model '%s' (net '%s') and the "
                                  "data: %s", o->model_file, tpu_net_name(net), d.msg);
    /* the MLP's optimizer options, as the table parsed them, into the net's spec */
    struct tpu_train_spec *t = &o->tspec;
    t->passes = o->spec.passes;
    t->optimizer = o->spec.optimizer;
    t->learning_rate = o->spec.learning_rate;
    t->momentum = o->spec.momentum;
    t->beta1 = o->spec.beta1;
    t->beta2 = o->spec.beta2;
    t->epsilon = o->spec.epsilon;
    t->l2 = o->spec.l2;
    t->seed = o->rc.seed; /* dropout masks: the run's seed */
    if (tpu_train_spec_check(t, &d))
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "--model '%s': the training options: %s",
                              o->model_file, d.msg);
    return 0;
}

void tpu__cli_train_describe(const struct train_opts *o, const struct tpu_net *net, char *buf,
                             size_t size)
{
    if (!net) {
        snprintf(buf, size, "MLP %u-%s-%u", o->spec.sizes[0], o->layers_text,
                 o->spec.sizes[o->spec.n_layers]);
        return;
    }
    uint64_t params = 0;
    struct tpu_layer_info li;
    const uint32_t n = tpu_net_n_layers(net);
    for (uint32_t i = 0; i < n; i++)
        if (!tpu_net_layer(net, i, &li))
            params += li.params;
    const char *file = strrchr(o->model_file, '/');
    char count[32];
    tpu__cli_group_digits(params, count, sizeof count);
    snprintf(buf, size, "model '%s' (%s: %u layer%s, %s params)", tpu_net_name(net),
             file ? file + 1 : o->model_file, n - 1, n == 2 ? "" : "s", count);
}

void tpu__cli_train_optimizer_text(const struct train_opts *o, bool net, char *buf,
                                   size_t size)
{
    const struct tpu_train_spec *t = &o->tspec;
    const enum tpu_optimizer opt = o->spec.optimizer;
    const char *name = opt == TPU_OPT_ADAM ? "Adam" : opt == TPU_OPT_ADAMW ? "AdamW"
                                                                           : "SGD with momentum";
    if (!net || t->schedule == TPU_SCHEDULE_CONSTANT)
        snprintf(buf, size, "%s", name);
    else if (t->schedule == TPU_SCHEDULE_STEP)
        snprintf(buf, size, "%s, step schedule (x %g every %u steps)", name,
                 (double)t->decay_rate, t->decay_steps);
    else
        snprintf(buf, size, "%s, cosine schedule (warm-up %u step%s, then %u steps down to "
                 "x %g)", name, t->warmup_steps, t->warmup_steps == 1 ? "" : "s",
                 t->decay_steps, (double)t->decay_rate);
}

/* tpusim's own warning (TPUEstimator would train on): a --model run whose every step has a
 * learning rate of 0, such as a resume past the end of a cosine schedule with --decay-rate 0. */
void tpu__cli_train_warn_zero_rate(const struct train_opts *o, uint64_t steps, uint64_t max_steps)
{
    const struct tpu_train_spec *t = &o->tspec;
    if (o->json || t->schedule == TPU_SCHEDULE_CONSTANT)
        return;
    uint64_t start = 0;
    struct tpu_diag d = {0};
    if (o->rc.model_dir[0] && tpu_checkpoint_latest(o->rc.model_dir, &start, NULL, 0, &d))
        start = 0;
    const uint64_t end = steps ? start + steps : max_steps;
    if (end <= start)
        return;
    const struct tpu_op_attrs a = {.alpha = t->learning_rate, .schedule = (int32_t)t->schedule,
                                   .warmup = t->warmup_steps, .decay_steps = t->decay_steps,
                                   .decay_rate = t->decay_rate};
    /* a rate of 0 comes only at a warm-up's first step or after a schedule's end, where it
       stays: the first million steps tell */
    for (uint64_t g = start + 1; g <= end && g <= start + 1000000; g++)
        if (tpu_lr_schedule_value(&a, (int64_t)g) != 0.0f)
            return;
    if (t->schedule == TPU_SCHEDULE_COSINE)
        fprintf(stderr, "tpusim train: warning: global step %llu is past the end of the cosine "
                "schedule (warm-up %u + %u decay steps) with --decay-rate 0: the learning rate "
                "is 0 for the steps of this run; give a larger --decay-steps or a --decay-rate "
                "above 0\n", (unsigned long long)start, (unsigned)t->warmup_steps,
                (unsigned)t->decay_steps);
    else
        fprintf(stderr, "tpusim train: warning: the learning rate is 0 for the steps of this run "
                "(global steps %llu to %llu); give a --decay-rate above 0\n",
                (unsigned long long)start + 1, (unsigned long long)end);
}
