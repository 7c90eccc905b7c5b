/* `tpusim model show FILE [--chip NAME] [--batch N] [--json]`: a model file's layer table,
 * Keras's summary joined to a profile. Per layer: its name, type, output shape, parameters
 * and forward FLOPs per example (the net's own counts, tpu_net_layer), and for one training
 * step at the global batch on one chip, all its cores replicas, the layer's simulated time,
 * its share of the step, its matrix-unit utilisation and the unit that bounds it.
 *
 * How the profile is measured. The net's training program runs in timing-only mode on a
 * device with per-op statistics (device.h's tpu_device_op_stats) through the estimator, on a
 * synthetic batch of zeros (timing-only computes no values, so the data's values do not
 * matter, only its shape). It runs two steps, one per loop: the first also fills the infeed
 * pipeline, so the profile is the second, the difference of the statistics after each loop.
 * tpu_net_build's op_layer map gives every op's layer (forward, backward, all-reduce and
 * update of its params), the loss, or the step's own ops (infeed, the loop, outfeed, the step
 * counter). The figures are core 0's: every core runs the same program on its replica's
 * share of the batch.
 *   time        the ops' share_cycles over the core's clock: the shares add up exactly to
 *               the step's time (an op overlapped by others takes only what it outlasts them
 *               by), so the rows' shares sum to 100 %
 *   MXU util    MACs done over the matrix units' peak over the layer's time
 *               (share_cycles x R x C x MXUs per core)
 *   bound       of MXU, VPU and HBM (the DMA engine's transfers to and from HBM), the unit
 *               with the most busy cycles among the layer's ops; "-" when none has any
 * Only this file prints; errors are one line as everywhere (cli.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"

#define SHOW_PATH_MAX 4000
#define SHOW_BATCH_PER_CORE 64 /* the default global batch is this per core (replica) */

struct show_opts {
    const char *file; /* the operand */
    char chip[SHOW_PATH_MAX + 1];
    uint32_t batch; /* 0: SHOW_BATCH_PER_CORE per core */
    bool json;
};

static const struct tpu__cli_opt show_opts_table[] = {
    {.name = "--chip", .kind = TPU__CLI_TEXT, TPU__CLI_FIELD(struct show_opts, chip),
     .max_chars = SHOW_PATH_MAX, .arg = "NAME|FILE",
     .help = "chip preset or JSON file (default tpu-v3); one chip,\n"
             "every core a replica; its matrix unit must take bf16"},
    {.name = "--batch", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct show_opts, batch), .min = 1,
     .max = 1u << 24, .arg = "N",
     .help = "global batch of the training step (default 64 per\n"
             "core: 128 on tpu-v3); a multiple of the chip's cores"},
    {.name = "--json", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct show_opts, json),
     .help = "the table as a JSON object"},
};

const struct tpu__cli_opts tpu__cli_model_show_options = {
    .opts = show_opts_table,
    .n_opts = sizeof show_opts_table / sizeof show_opts_table[0],
    .usage =
        "usage: tpusim model show FILE.json [options]\n"
        "The layer table of a model file (configs/models/README.md): per layer its output\n"
        "shape, parameters and forward FLOPs per example, and for one training step (Adam,\n"
        "bf16 matmul inputs) at the global batch on one chip, all its cores replicas, the\n"
        "layer's simulated time (forward, backward, all-reduce and update of its params),\n"
        "its share of the step, its matrix-unit utilisation and what bounds it: MXU, VPU or\n"
        "HBM, the unit its ops keep busiest. Measured in timing-only mode on zeros.\n"
        "\n",
    .help_column = 22,
    .text_max = 255,
    .dash_is_operand = true,
};

/* What one row of the table sums: a layer's ops, the loss's, or the step's own. */
struct row {
    uint64_t cycles, macs, busy_mxu, busy_vpu, busy_hbm;
};

/* The statistics after each loop of the two-step run (the hook's context). */
struct probe {
    const struct tpu_device *dev;
    size_t n_ops;
    struct tpu_op_stats *snap[2]; /* after loop 1 and loop 2 */
    unsigned loops;
};

static int after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct probe *p = ctx;
    if (li->mode != TPU_MODE_TRAIN || p->loops >= 2)
        return 0;
    return tpu_device_op_stats(p->dev, 0, p->snap[p->loops++], p->n_ops, d);
}

/* The second step's statistics per row: rows[0 .. n_layers) the layers (0 the input),
 * rows[n_layers] the loss, rows[n_layers + 1] the step's own ops. */
static void sum_rows(const struct probe *p, const uint32_t *op_layer, uint32_t n_layers,
                     struct row *rows)
{
    for (size_t i = 0; i < p->n_ops; i++) {
        const struct tpu_op_stats *a = &p->snap[0][i], *b = &p->snap[1][i];
        const uint32_t l = op_layer[i];
        struct row *r = l == TPU_NET_OP_LOSS ? &rows[n_layers]
                        : l < n_layers       ? &rows[l]
                                             : &rows[n_layers + 1];
        r->cycles += b->share_cycles - a->share_cycles;
        r->macs += b->macs - a->macs;
        r->busy_mxu += b->busy[TPU_UNIT_MXU] - a->busy[TPU_UNIT_MXU];
        r->busy_vpu += b->busy[TPU_UNIT_VPU] - a->busy[TPU_UNIT_VPU];
        r->busy_hbm += b->busy[TPU_UNIT_DMA] - a->busy[TPU_UNIT_DMA];
    }
}

static const char *bound_of(const struct row *r)
{
    if (!r->busy_mxu && !r->busy_vpu && !r->busy_hbm)
        return NULL;
    if (r->busy_mxu >= r->busy_vpu && r->busy_mxu >= r->busy_hbm)
        return "MXU";
    return r->busy_vpu >= r->busy_hbm ? "VPU" : "HBM";
}

/* The measurement: everything the table prints that is not the net's own. */
struct profile {
    struct tpu_chip_config chip;
    uint32_t cores, batch;
    struct row *rows; /* n_layers + 2 */
    uint64_t step_cycles;
};

/* A dataset of `n` zero examples of the net's input, labelled 0 (softmax cross-entropy) or
 * with zero targets (MSE): the shape is what a timing-only step reads. */
static int zero_dataset(const struct tpu_net *net, uint32_t n, struct tpu_dataset *ds)
{
    struct tpu_layer_info in, out;
    uint32_t tensor = 0;
    enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
    tpu_net_layer(net, 0, &in);
    tpu_net_output(net, &tensor, &loss);
    tpu_net_layer(net, tensor, &out);
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->image_rows = in.out.h;
    ds->image_cols = in.out.w;
    ds->image_channels = in.out.c;
    ds->n_features = in.out.h * in.out.w * in.out.c;
    ds->x = calloc((size_t)n * ds->n_features, sizeof(float));
    if (loss == TPU_LOSS_SOFTMAX_XENT) {
        ds->n_classes = out.out.c;
        ds->y = calloc(n, sizeof(int32_t));
    } else {
        ds->n_targets = out.out.h * out.out.w * out.out.c;
        ds->targets = calloc((size_t)n * ds->n_targets, sizeof(float));
    }
    snprintf(ds->origin, sizeof ds->origin, "zeros (%u examples)", n);
    return ds->x && (ds->y || ds->targets) ? 0 : TPU_ENOMEM;
}

/* Runs two timing-only training steps of `net` and fills p->rows from the second. */
static int measure(const struct tpu_net *net, struct profile *p)
{
    struct tpu_diag d = {0};
    const char *cmd = "model show";
    const uint32_t n_layers = tpu_net_n_layers(net);
    struct tpu_train_spec spec;
    tpu_train_spec_default(&spec);
    struct tpu_model_program mp;
    memset(&mp, 0, sizeof mp);
    uint32_t *op_layer = NULL;
    const struct tpu_build_shape shape = {.batch_per_replica = p->batch / p->cores,
                                          .global_batch = p->batch, .n_replicas = p->cores,
                                          .cores_per_replica = 1};
    if (tpu_net_build(net, &spec, TPU_MODE_TRAIN, &shape, &mp, &op_layer, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    struct probe pr = {.n_ops = tpu_program_n_ops(mp.prog)};
    tpu_program_destroy(&mp.prog);

    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &p->chip);
    s.n_chips = 1;
    s.timing_only = true;
    s.op_stats = true;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_model model;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    int rc = TPU_CLI_FAIL;
    memset(&in, 0, sizeof in);
    pr.snap[0] = calloc(pr.n_ops, sizeof(struct tpu_op_stats));
    pr.snap[1] = calloc(pr.n_ops, sizeof(struct tpu_op_stats));
    p->rows = calloc(n_layers + 2, sizeof *p->rows);
    if (zero_dataset(net, p->batch, &ds) || !pr.snap[0] || !pr.snap[1] || !p->rows) {
        tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory for a batch of %u examples; give a "
                       "smaller --batch", p->batch);
        goto out;
    }
    if (tpu_device_open(&s, &dev, &d) || tpu_net_model(&model, net, &spec, &d)) {
        tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
        goto out;
    }
    pr.dev = dev;
    struct tpu_run_config rcfg;
    tpu_run_config_default(&rcfg);
    rcfg.iterations_per_loop = 1;
    rcfg.train_batch_size = rcfg.eval_batch_size = rcfg.predict_batch_size = p->batch;
    rcfg.seed = 1;
    rcfg.log_step_count_steps = 0;
    struct tpu_hook hook = {.ctx = &pr, .after_loop = after_loop};
    tpu_dataset_input_init(&in, &ds, 1);
    if (tpu_estimator_create(dev, &rcfg, &model, &hook, 1, &est, &d) ||
        tpu_estimator_train(est, &in.input, 2, 0, &d)) {
        /* the likely failure: the step does not fit the core's HBM at this batch */
        tpu__cli_error(cmd, TPU_CLI_FAIL, "--batch %u on %s: %s", p->batch, p->chip.name,
                       d.msg);
        goto out;
    }
    if (pr.loops != 2) {
        tpu__cli_error(cmd, TPU_CLI_FAIL, "the profile needs two training steps, one per loop; "
                       "the run made %u loops", pr.loops);
        goto out;
    }
    sum_rows(&pr, op_layer, n_layers, p->rows);
    p->step_cycles = 0;
    for (uint32_t i = 0; i < n_layers + 2; i++)
        p->step_cycles += p->rows[i].cycles;
    rc = 0;
out:
    tpu_estimator_destroy(&est);
    tpu_dataset_input_free(&in);
    tpu_device_close(&dev);
    tpu_dataset_free(&ds);
    free(pr.snap[0]);
    free(pr.snap[1]);
    free(op_layer);
    return rc;
}

/* ---- printing ------------------------------------------------------------------------------ */

static void shape_text(struct tpu_shape s, char *buf, size_t size)
{
    if (s.h == 1 && s.w == 1)
        snprintf(buf, size, "%u", s.c);
    else
        snprintf(buf, size, "%ux%ux%u", s.h, s.w, s.c);
}

static double seconds(const struct profile *p, uint64_t cycles)
{
    return (double)cycles / (p->chip.clock_mhz * 1e6);
}

static double mxu_util(const struct profile *p, const struct row *r)
{
    const double peak = (double)r->cycles * p->chip.mxu_rows * p->chip.mxu_cols *
                        p->chip.mxu_per_core;
    return peak > 0 ? (double)r->macs / peak : 0;
}

/* The row's name and type: a layer, the loss, or the step's own ops. */
static void row_names(const struct tpu_net *net, uint32_t i, const char **name,
                      const char **type, struct tpu_layer_info *li)
{
    const uint32_t n_layers = tpu_net_n_layers(net);
    memset(li, 0, sizeof *li);
    if (i < n_layers) {
        tpu_net_layer(net, i, li);
        *name = li->name;
        *type = i == 0 ? "input" : tpu_layer_kind_name(li->kind);
    } else if (i == n_layers) {
        uint32_t t;
        enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
        tpu_net_output(net, &t, &loss);
        *name = "(loss)";
        *type = loss == TPU_LOSS_SOFTMAX_XENT ? "softmax_xent" : "mse";
    } else {
        *name = "(step)";
        *type = "infeed, loop";
    }
}

static void print_text(const struct show_opts *o, const struct tpu_net *net,
                       const struct profile *p)
{
    const uint32_t n_layers = tpu_net_n_layers(net);
    uint64_t trainable = 0, fixed = 0, flops = 0, macs = 0;
    printf("model '%s' (%s): one training step at global batch %u on %s (%u cores, %u per "
           "replica), Adam, bf16 matmul inputs\n", tpu_net_name(net), o->file, p->batch,
           p->chip.name, p->cores, p->batch / p->cores);
    printf("%-24s %-17s %-12s %12s %15s %11s %7s %8s  %s\n", "layer", "type", "output",
           "params", "FLOPs/example", "time (us)", "share", "MXU util", "bound");
    for (uint32_t i = 0; i < n_layers + 2; i++) {
        const char *name, *type;
        struct tpu_layer_info li;
        row_names(net, i, &name, &type, &li);
        const struct row *r = &p->rows[i];
        char shape[48] = "", params[32] = "", fl[32] = "";
        if (i < n_layers) {
            shape_text(li.out, shape, sizeof shape);
            tpu__cli_group_digits(li.params + li.non_trainable, params, sizeof params);
            tpu__cli_group_digits(li.flops, fl, sizeof fl);
            trainable += li.params;
            fixed += li.non_trainable;
            flops += li.flops;
        }
        macs += r->macs;
        const char *bound = bound_of(r);
        printf("%-24s %-17s %-12s %12s %15s %11.1f %6.1f%% %7.1f%%  %s\n", name, type, shape,
               params, fl, seconds(p, r->cycles) * 1e6,
               p->step_cycles ? 100.0 * (double)r->cycles / (double)p->step_cycles : 0,
               100 * mxu_util(p, r), bound ? bound : "-");
    }
    const double step_s = seconds(p, p->step_cycles);
    char t[32], f[32], all[32], fl[32];
    tpu__cli_group_digits(trainable, t, sizeof t);
    tpu__cli_group_digits(fixed, f, sizeof f);
    tpu__cli_group_digits(trainable + fixed, all, sizeof all);
    tpu__cli_group_digits(flops, fl, sizeof fl);
    const struct row total = {.cycles = p->step_cycles, .macs = macs};
    printf("total params: %s (trainable %s, non-trainable %s)\n", all, t, f);
    printf("forward FLOPs per example: %s\n", fl);
    printf("training step: %.1f us simulated, %.0f images/s per chip, matrix units %.1f %% "
           "utilized\n", step_s * 1e6, step_s > 0 ? p->batch / step_s : 0,
           100 * mxu_util(p, &total));
}

static void print_json(const struct show_opts *o, const struct tpu_net *net,
                       const struct profile *p)
{
    const uint32_t n_layers = tpu_net_n_layers(net);
    uint64_t trainable = 0, fixed = 0, flops = 0, macs = 0;
    printf("{\"model\": ");
    tpu__cli_json_string(stdout, tpu_net_name(net));
    printf(", \"file\": ");
    tpu__cli_json_string(stdout, o->file);
    printf(", \"chip\": ");
    tpu__cli_json_string(stdout, p->chip.name);
    printf(", \"cores\": %u, \"global_batch\": %u, \"batch_per_replica\": %u, \"clock_mhz\": "
           "%.9g, \"layers\": [", p->cores, p->batch, p->batch / p->cores, p->chip.clock_mhz);
    for (uint32_t i = 0; i < n_layers + 2; i++) {
        const char *name, *type;
        struct tpu_layer_info li;
        row_names(net, i, &name, &type, &li);
        const struct row *r = &p->rows[i];
        printf("%s{\"name\": ", i ? ", " : "");
        tpu__cli_json_string(stdout, name);
        printf(", \"type\": \"%s\"", type);
        if (i < n_layers) {
            printf(", \"output_shape\": [%u, %u, %u], \"params\": %" PRIu64
                   ", \"non_trainable_params\": %" PRIu64 ", \"flops_per_example\": %" PRIu64,
                   li.out.h, li.out.w, li.out.c, li.params, li.non_trainable, li.flops);
            trainable += li.params;
            fixed += li.non_trainable;
            flops += li.flops;
        }
        macs += r->macs;
        const char *bound = bound_of(r);
        printf(", \"cycles\": %" PRIu64 ", \"time_s\": %.9g, \"share\": %.9g, "
               "\"mxu_utilization\": %.9g, \"macs\": %" PRIu64 ", \"busy_cycles\": {\"mxu\": %"
               PRIu64 ", \"vpu\": %" PRIu64 ", \"hbm\": %" PRIu64 "}, \"bound\": ",
               r->cycles, seconds(p, r->cycles),
               p->step_cycles ? (double)r->cycles / (double)p->step_cycles : 0,
               mxu_util(p, r), r->macs, r->busy_mxu, r->busy_vpu, r->busy_hbm);
        if (bound)
            printf("\"%s\"}", bound);
        else
            printf("null}");
    }
    const double step_s = seconds(p, p->step_cycles);
    const struct row total = {.cycles = p->step_cycles, .macs = macs};
    printf("], \"trainable_params\": %" PRIu64 ", \"non_trainable_params\": %" PRIu64
           ", \"total_params\": %" PRIu64 ", \"flops_per_example\": %" PRIu64
           ", \"step_cycles\": %" PRIu64 ", \"step_time_s\": %.9g, \"images_per_s\": %.9g, "
           "\"mxu_utilization\": %.9g}\n", trainable, fixed, trainable + fixed, flops,
           p->step_cycles, step_s, step_s > 0 ? p->batch / step_s : 0, mxu_util(p, &total));
}

/* ---- the command --------------------------------------------------------------------------- */

static int take_file(const struct tpu__cli_parse *p, const char *arg)
{
    struct show_opts *o = p->target;
    if (o->file)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "'%s': give one model file (already "
                              "'%s')", arg, o->file);
    o->file = arg;
    return 0;
}

static int model_show(int argc, char **argv)
{
    const char *cmd = "model show";
    struct show_opts o;
    memset(&o, 0, sizeof o);
    snprintf(o.chip, sizeof o.chip, "tpu-v3");
    const struct tpu__cli_parse ps = {.table = &tpu__cli_model_show_options, .cmd = cmd,
                                      .target = &o};
    int rc = tpu__cli_opts_parse(&ps, argc, argv, 1, take_file);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    if (!o.file)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "give a model file: tpusim model show "
                              "FILE.json (e.g. configs/models/cnn.json)");
    struct tpu_diag d = {0};
    struct profile p;
    memset(&p, 0, sizeof p);
    if (tpu_config_load(o.chip, &p.chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!(p.chip.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "chip '%s' cannot train: its matrix unit "
                              "multiplies int8 only; give a chip whose matrix unit takes bf16 "
                              "(tpu-v2 and later, or tiny)", p.chip.name);
    p.cores = p.chip.cores_per_chip;
    p.batch = o.batch ? o.batch : SHOW_BATCH_PER_CORE * p.cores;
    if (p.batch % p.cores)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--batch %u does not split over the %u cores "
                              "of %s (a replica each, the same batch on each): give a multiple "
                              "of %u, e.g. --batch %u", p.batch, p.cores, p.chip.name, p.cores,
                              (p.batch / p.cores + 1) * p.cores);
    struct tpu_net *net = NULL;
    if (tpu_net_load_file(o.file, &net, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    rc = measure(net, &p);
    if (!rc && o.json)
        print_json(&o, net, &p);
    else if (!rc)
        print_text(&o, net, &p);
    free(p.rows);
    tpu_net_destroy(&net);
    return rc;
}

int tpu__cli_model(int argc, char **argv)
{
    static const char *const names[] = {"show", NULL};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tpu__cli_opts_help(&tpu__cli_model_show_options, argc < 2 ? stderr : stdout);
        return argc < 2 ? TPU_CLI_USAGE : TPU_CLI_OK;
    }
    if (!strcmp(argv[1], "show"))
        return model_show(argc - 1, argv + 1);
    return tpu__cli_unknown_command("model", argv[1], names);
}
