/* `tpusim bench loops`: a loop-size sweep (tpusim/sweep.h) of a model (the --layers MLP or a
 * --model file) on a chip configuration, printed as a table, and as CSV (--csv FILE), JSON
 * (--json) and a gnuplot plot (--plot FILE.png|FILE.svg) of throughput and overhead shares
 * against the loop size, with the smallest loop size within 1 % of the best marked.
 *
 * The sweep trains on a synthetic batch of zeros of the model's input shape: the loop size's
 * trade-off is one of time, and time does not depend on the values (in --timing-only mode
 * there are none). The library measures; this file checks the options, builds the model and
 * prints. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "options.h"
#include "tpusim/config.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/sweep.h"

#define BENCH_PATH_MAX 4000
#define BENCH_BATCH_PER_REPLICA 64 /* the default global batch is this per replica */
#define BENCH_TOLERANCE 0.01       /* the knee: within 1 % of the best throughput */

struct bench_opts {
    char chip[BENCH_PATH_MAX + 1], model_file[BENCH_PATH_MAX + 1];
    char csv[BENCH_PATH_MAX + 1], plot[BENCH_PATH_MAX + 1];
    char layers[256], list[256];
    bool layers_given, max_given, list_given;
    uint32_t chips, hosts, cores_per_replica, threads, batch, loops;
    uint64_t max, extend_above, save_checkpoints_steps, log_step_count_steps;
    bool extend_given, full, timing_only, json;
    enum tpu_host_time host_time;
    double launch_us, hooks_us, checkpoint_us, input_us;
    bool launch_given, hooks_given, checkpoint_given, input_given;
};

#define B(f) TPU__CLI_FIELD(struct bench_opts, f)
#define G(f) TPU__CLI_GIVEN(struct bench_opts, f)

static const char *const host_time_words[] = {"modeled", "measured", NULL};
static const int host_time_values[] = {TPU_HOST_TIME_MODELED, TPU_HOST_TIME_MEASURED};

static const struct tpu__cli_opt loops_table[] = {
    {.name = "--chip", .kind = TPU__CLI_TEXT, B(chip), .max_chars = BENCH_PATH_MAX,
     .arg = "NAME|FILE", .group = "chip and model",
     .help = "chip preset or JSON file (default tpu-v3); its matrix\n"
             "unit must take bf16"},
    {.name = "--chips", .kind = TPU__CLI_U64, B(chips), .min = 1, .max = 4096, .arg = "N",
     .help = "chips on each host (default: the chip's chips_per_host)"},
    {.name = "--hosts", .kind = TPU__CLI_U64, B(hosts), .min = 1, .max = 1024, .arg = "N",
     .help = "hosts (default 1), each driving --chips chips with\n"
             "its own infeed thread and input clock, as tpusim train"},
    {.name = "--cores-per-replica", .kind = TPU__CLI_U64, B(cores_per_replica), .min = 1,
     .max = 128, .arg = "N", .help = "model parallelism (default 1)"},
    {.name = "--threads", .kind = TPU__CLI_U64, B(threads), .min = 1, .max = 1024, .arg = "N",
     .help = "host threads simulating the cores (default: all CPUs)"},
    {.name = "--model", .kind = TPU__CLI_TEXT, B(model_file), .max_chars = BENCH_PATH_MAX,
     .arg = "FILE.json", .help = "a model file (configs/models/, e.g. cnn.json)"},
    {.name = "--layers", .kind = TPU__CLI_TEXT, B(layers), G(layers_given), .arg = "512,256",
     .help = "or an MLP's hidden widths (default 512,256), on\n"
             "Fashion-MNIST's shape (784 inputs, 10 classes)"},
    {.name = "--batch", .kind = TPU__CLI_U64, B(batch), .min = 1, .max = 1u << 24, .arg = "N",
     .help = "global batch (default 64 per replica)"},
    {.name = "--timing-only", .kind = TPU__CLI_FLAG, B(timing_only),
     .help = "count cycles, compute no values: fast sweeps"},
    {.name = "--max", .kind = TPU__CLI_U64, B(max), G(max_given), .min = 1,
     .max = TPU_SWEEP_MAX_LOOP_SIZE,
     .arg = "N", .group = "loop sizes",
     .help = "sweep iterations_per_loop 1, 2, 4, ... up to N\n(default 1024)"},
    {.name = "--list", .kind = TPU__CLI_TEXT, B(list), G(list_given), .arg = "1,4,16",
     .help = "or these loop sizes (ascending, 1 to 1000000000)"},
    {.name = "--extend-above", .kind = TPU__CLI_U64, B(extend_above), G(extend_given), .min = 2,
     .max = 1u << 20, .arg = "N",
     .help = "simulate loops of up to N steps in full (a power of\n"
             "two, default 32); larger ones continue the per-step\n"
             "figures of N/2 and N (each row says which)"},
    {.name = "--full", .kind = TPU__CLI_FLAG, B(full),
     .help = "simulate every loop size in full (slower)"},
    {.name = "--loops", .kind = TPU__CLI_U64, B(loops), .min = 1, .max = 100, .arg = "N",
     .help = "loops measured per size after a warm-up (default 2)"},
    {.name = "--host-time", .kind = TPU__CLI_ENUM, B(host_time), .words = host_time_words,
     .values = host_time_values, .group = "host costs",
     .help = "modeled: the fixed costs below (default); measured:\n"
             "the wall time of the real host code (hooks, input);\n"
             "the launch is always modeled (no real launch to time)\n"
             "and checkpoints too (none written)"},
    {.name = "--launch-us", .kind = TPU__CLI_DOUBLE, B(launch_us), G(launch_given), .lo = 0,
     .hi = 1e9, .arg = "X", .help = "per launch (default 100; also with measured)"},
    {.name = "--hooks-us", .kind = TPU__CLI_DOUBLE, B(hooks_us), G(hooks_given), .lo = 0,
     .hi = 1e9, .arg = "X", .help = "hooks and logging per loop boundary (default 500)"},
    {.name = "--checkpoint-us", .kind = TPU__CLI_DOUBLE, B(checkpoint_us), G(checkpoint_given),
     .lo = 0, .hi = 1e9, .arg = "X", .help = "per checkpoint (default 20000)"},
    {.name = "--input-us", .kind = TPU__CLI_DOUBLE, B(input_us), G(input_given), .lo = 0,
     .hi = 1e9, .arg = "X", .help = "input pipeline per batch (default 50)"},
    {.name = "--save-checkpoints-steps", .kind = TPU__CLI_U64, B(save_checkpoints_steps),
     .min = 0, .max = UINT64_C(1000000000000), .arg = "N",
     .help = "charge a checkpoint (--checkpoint-us) at the first\n"
             "loop boundary at least N steps after the last (none\n"
             "is written; ckpt every: the time between them;\n"
             "default 0: none)"},
    {.name = "--log-step-count-steps", .kind = TPU__CLI_U64, B(log_step_count_steps),
     .min = 0, .max = UINT64_C(1000000000000), .arg = "N",
     .help = "log every: the time between progress lines, due at\n"
             "the first loop boundary at least N steps after the\n"
             "last (default 100; 0: none)"},
    {.name = "--json", .kind = TPU__CLI_FLAG, B(json), .group = "output",
     .help = "the sweep as one JSON object (instead of the table)"},
    {.name = "--csv", .kind = TPU__CLI_TEXT, B(csv), .max_chars = BENCH_PATH_MAX, .arg = "FILE",
     .help = "also write the points as CSV"},
    {.name = "--plot", .kind = TPU__CLI_TEXT, B(plot), .max_chars = BENCH_PATH_MAX,
     .arg = "FILE", .help = "also plot them with gnuplot: FILE.png or FILE.svg"},
};

const struct tpu__cli_opts tpu__cli_bench_loops_options = {
    .opts = loops_table,
    .n_opts = sizeof loops_table / sizeof loops_table[0],
    .usage =
        "usage: tpusim bench loops [options]\n"
        "Sweeps iterations_per_loop for a model on a chip configuration: each loop size\n"
        "trains on a fresh simulated device (on zeros of the model's input shape), and\n"
        "the table shows its simulated examples/s (host time included), the shares of\n"
        "the time that add up to 100 %: busy (the cores working: device time less every\n"
        "stall), stall (the cores waiting: for infeed, for a full outfeed, at a\n"
        "collective for the cores an input held back, for memory; --json and --csv\n"
        "also give the infeed part alone) and host (launch, hooks, checkpoints between\n"
        "loops), and how far apart loop boundaries (loop time), progress lines (log\n"
        "every) and checkpoints (ckpt every) are. '*' marks the smallest loop size\n"
        "within 1 % of the best throughput.\n"
        "\n",
    .help_column = 30,
    .text_max = 255,
};

/* ---- the model --------------------------------------------------------------------------- */

/* A dataset of n zero examples of the net's input (or the MLP's 784 features), labelled 0 or
 * with zero targets: a timing run reads only its shape. */
static int zero_dataset(const struct tpu_net *net, uint32_t n, struct tpu_dataset *ds)
{
    memset(ds, 0, sizeof *ds);
    ds->n_examples = n;
    ds->image_rows = ds->image_cols = 28;
    ds->image_channels = 1;
    ds->n_classes = 10;
    enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
    if (net) {
        struct tpu_layer_info in, out;
        uint32_t tensor = 0;
        tpu_net_layer(net, 0, &in);
        tpu_net_output(net, &tensor, &loss);
        tpu_net_layer(net, tensor, &out);
        ds->image_rows = in.out.h;
        ds->image_cols = in.out.w;
        ds->image_channels = in.out.c;
        ds->n_classes = loss == TPU_LOSS_SOFTMAX_XENT ? out.out.c : 0;
        ds->n_targets = loss == TPU_LOSS_SOFTMAX_XENT ? 0 : out.out.h * out.out.w * out.out.c;
    }
    ds->n_features = ds->image_rows * ds->image_cols * ds->image_channels;
    ds->x = calloc((size_t)n * ds->n_features, sizeof(float));
    if (loss == TPU_LOSS_SOFTMAX_XENT)
        ds->y = calloc(n, sizeof(int32_t));
    else
        ds->targets = calloc((size_t)n * ds->n_targets, sizeof(float));
    snprintf(ds->origin, sizeof ds->origin, "zeros (%u examples)", n);
    return ds->x && (ds->y || ds->targets) ? 0 : TPU_ENOMEM;
}

/* --layers: the MLP's spec (Adam, learning rate 0.001, as tpusim train). */
static int mlp_spec(const struct bench_opts *o, struct tpu_mlp_spec *s, char *name,
                    size_t name_size)
{
    tpu_mlp_default_spec(s);
    s->optimizer = TPU_OPT_ADAM;
    s->learning_rate = 0.001f;
    const char *text = o->layers_given ? o->layers : "512,256";
    uint32_t n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        unsigned long w = strtoul(p, &end, 10);
        if (end == p || errno || w < 1 || w > 65536 || n + 1 >= TPU_MLP_MAX_LAYERS ||
            (*end && *end != ',') || (*end == ',' && !end[1]))
            return tpu__cli_error("bench loops", TPU_CLI_USAGE, "--layers '%s' is not a "
                                  "comma-separated list of 1 to %d widths from 1 to 65536; "
                                  "e.g. --layers 512,256", text, TPU_MLP_MAX_LAYERS - 1);
        s->sizes[1 + n++] = (uint32_t)w;
        p = *end ? end + 1 : end;
    }
    if (!n)
        return tpu__cli_error("bench loops", TPU_CLI_USAGE, "--layers '' is empty; give the "
                              "hidden widths, e.g. --layers 512,256");
    s->sizes[0] = 784;
    s->sizes[n + 1] = 10;
    s->n_layers = n + 1;
    int k = snprintf(name, name_size, "MLP 784");
    for (uint32_t i = 1; i <= n + 1 && k > 0 && (size_t)k < name_size; i++)
        k += snprintf(name + k, name_size - (size_t)k, "-%u", s->sizes[i]);
    return 0;
}

/* --list: ascending loop sizes from 1 to TPU_SWEEP_MAX_LOOP_SIZE, at most TPU_SWEEP_MAX_SIZES
 * of them (cli.h). */
int tpu__cli_bench_parse_list(const char *text, uint64_t *sizes, size_t *n)
{
    const char *cmd = "bench loops";
    *n = 0;
    for (const char *p = text;;) {
        char *end;
        errno = 0;
        unsigned long long v = *p >= '1' && *p <= '9' ? strtoull(p, &end, 10) : 0;
        if (!v || errno || v > TPU_SWEEP_MAX_LOOP_SIZE || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--list '%s' is not a comma-separated "
                                  "list of loop sizes from 1 to %llu; e.g. --list 1,4,16,64",
                                  text, (unsigned long long)TPU_SWEEP_MAX_LOOP_SIZE);
        if (*n == TPU_SWEEP_MAX_SIZES)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--list '%s' has more than %d loop "
                                  "sizes; give at most %d", text, TPU_SWEEP_MAX_SIZES,
                                  TPU_SWEEP_MAX_SIZES);
        if (*n && v <= sizes[*n - 1])
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--list '%s': %llu follows %llu; give "
                                  "the loop sizes in ascending order without repeats", text,
                                  v, (unsigned long long)sizes[*n - 1]);
        sizes[(*n)++] = v;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

/* ---- output ------------------------------------------------------------------------------ */

struct sweep_out {
    const struct bench_opts *o;
    const struct tpu_sweep_settings *s;
    const char *model;
    uint32_t replicas;
    struct tpu_sweep_point *p;
    size_t n, best, knee;
    double wall_s;
};

static const char *method_name(enum tpu_sweep_method m)
{
    return m == TPU_SWEEP_SIMULATED ? "simulated" : "extended";
}

static void host_costs_text(const struct sweep_out *w, char *buf, size_t size)
{
    const struct tpu_run_config *c = &w->s->run;
    if (c->host_time == TPU_HOST_TIME_MEASURED)
        snprintf(buf, size, "measured (wall time of hooks and input); launch modeled %g us "
                 "(no real launch to time), checkpoint modeled %g us", c->modeled_launch_us,
                 c->modeled_checkpoint_us);
    else
        snprintf(buf, size, "modeled: launch %g us, hooks %g us, input %g us per batch, "
                 "checkpoint %g us", c->modeled_launch_us, c->modeled_hooks_us,
                 c->modeled_input_us_per_batch, c->modeled_checkpoint_us);
}

/* Seconds as the table shows them: "1.25 ms", "-" for NaN. */
static void time_text(double s, char *buf, size_t size)
{
    if (isnan(s))
        snprintf(buf, size, "-");
    else if (s < 1e-3)
        snprintf(buf, size, "%.1f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, size, "%.2f ms", s * 1e3);
    else
        snprintf(buf, size, "%.3f s", s);
}

static void print_table(const struct sweep_out *w)
{
    const struct bench_opts *o = w->o;
    char costs[300];
    host_costs_text(w, costs, sizeof costs);
    char hosts[40] = "";
    if (w->s->run.num_hosts > 1)
        snprintf(hosts, sizeof hosts, " on %u hosts", w->s->run.num_hosts);
    printf("tpusim bench loops: %s on %s x %u chip%s%s (%u replica%s), global batch %u, %s\n",
           w->model, w->s->device.chip.name, w->s->device.n_chips,
           w->s->device.n_chips == 1 ? "" : "s", hosts, w->replicas, w->replicas == 1 ? "" : "s",
           w->s->run.train_batch_size, o->timing_only ? "timing-only" : "values computed");
    printf("host time %s\n", costs);
    printf("  %12s %14s %8s %8s %8s %11s %11s %11s %10s\n", "loop size", "examples/s",
           "busy", "stall", "host", "loop time", "log every", "ckpt every", "how");
    for (size_t i = 0; i < w->n; i++) {
        const struct tpu_sweep_point *p = &w->p[i];
        char lt[32], rt[32], ct[32];
        time_text(p->loop_seconds, lt, sizeof lt);
        time_text(p->report_seconds, rt, sizeof rt);
        time_text(p->checkpoint_seconds, ct, sizeof ct);
        printf("%c %12llu %14.1f %7.2f%% %7.2f%% %7.2f%% %11s %11s %11s %10s\n",
               i == w->knee ? '*' : ' ', (unsigned long long)p->iterations_per_loop,
               p->examples_per_s, 100 * p->device_busy_share, 100 * p->stall_share,
               100 * p->host_overhead_share, lt, rt, ct, method_name(p->method));
    }
    printf("best: %.1f examples/s at loop size %llu; * smallest loop size within 1 %% of it: "
           "%llu (%.2f %% of the best)\n", w->p[w->best].examples_per_s,
           (unsigned long long)w->p[w->best].iterations_per_loop,
           (unsigned long long)w->p[w->knee].iterations_per_loop,
           100 * w->p[w->knee].examples_per_s / w->p[w->best].examples_per_s);
    if (w->s->full_steps && w->p[w->n - 1].iterations_per_loop > w->s->full_steps)
        printf("extended: loop sizes above %llu continue the per-step figures of %llu and %llu "
               "(--full simulates them)\n", (unsigned long long)w->s->full_steps,
               (unsigned long long)w->s->full_steps / 2, (unsigned long long)w->s->full_steps);
    printf("the sweep took %.2f s of wall time\n", w->wall_s);
}

static void json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fprintf(f, "null");
}

static void print_json(const struct sweep_out *w)
{
    const struct tpu_run_config *c = &w->s->run;
    printf("{\"chip\": ");
    tpu__cli_json_string(stdout, w->s->device.chip.name);
    printf(", \"chips\": %u, \"hosts\": %u, \"replicas\": %u, \"model\": ", w->s->device.n_chips,
           w->s->run.num_hosts ? w->s->run.num_hosts : 1, w->replicas);
    tpu__cli_json_string(stdout, w->model);
    printf(", \"global_batch\": %u, \"timing_only\": %s, \"host_time\": \"%s\", "
           "\"host_costs_us\": {\"launch\": %.9g, \"hooks\": %.9g, \"checkpoint\": %.9g, "
           "\"input_per_batch\": %.9g}, \"save_checkpoints_steps\": %llu, "
           "\"log_step_count_steps\": %llu, \"extend_above\": %llu, \"points\": [",
           c->train_batch_size, w->o->timing_only ? "true" : "false",
           c->host_time == TPU_HOST_TIME_MEASURED ? "measured" : "modeled",
           c->modeled_launch_us, c->modeled_hooks_us, c->modeled_checkpoint_us,
           c->modeled_input_us_per_batch, (unsigned long long)c->save_checkpoints_steps,
           (unsigned long long)c->log_step_count_steps,
           (unsigned long long)w->s->full_steps);
    for (size_t i = 0; i < w->n; i++) {
        const struct tpu_sweep_point *p = &w->p[i];
        printf("%s{\"iterations_per_loop\": %llu, \"method\": \"%s\", \"examples_per_s\": ",
               i ? ", " : "", (unsigned long long)p->iterations_per_loop,
               method_name(p->method));
        const double v[] = {p->examples_per_s, p->step_time_s, p->device_busy_share,
                            p->stall_share, p->infeed_stall_share, p->host_overhead_share,
                            p->loop_seconds, p->report_seconds, p->checkpoint_seconds,
                            p->launch_s, p->hooks_s, p->checkpoint_s, p->wall_seconds};
        static const char *const k[] = {NULL, "step_time_s", "device_busy_share",
                                        "stall_share", "infeed_stall_share",
                                        "host_overhead_share", "loop_seconds", "report_seconds",
                                        "checkpoint_seconds", "launch_s", "hooks_s",
                                        "checkpoint_s", "wall_seconds"};
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            if (k[j])
                printf(", \"%s\": ", k[j]);
            json_number(stdout, v[j]);
        }
        printf("}");
    }
    printf("], \"best\": %llu, \"knee\": %llu, \"tolerance\": %g, \"wall_seconds\": %.3f}\n",
           (unsigned long long)w->p[w->best].iterations_per_loop,
           (unsigned long long)w->p[w->knee].iterations_per_loop, BENCH_TOLERANCE, w->wall_s);
}

static int write_csv(const struct sweep_out *w)
{
    const char *cmd = "bench loops";
    FILE *f = fopen(w->o->csv, "w");
    if (!f)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--csv '%s': cannot write it (%s); give a "
                              "path in a writable directory", w->o->csv, strerror(errno));
    fprintf(f, "iterations_per_loop,method,examples_per_s,device_busy_share,stall_share,"
               "infeed_stall_share,"
               "host_overhead_share,step_time_s,loop_seconds,report_seconds,"
               "checkpoint_seconds,launch_s,hooks_s,checkpoint_s,wall_seconds,knee\n");
    for (size_t i = 0; i < w->n; i++) {
        const struct tpu_sweep_point *p = &w->p[i];
        fprintf(f, "%llu,%s", (unsigned long long)p->iterations_per_loop,
                method_name(p->method));
        const double v[] = {p->examples_per_s, p->device_busy_share, p->stall_share,
                            p->infeed_stall_share, p->host_overhead_share, p->step_time_s, p->loop_seconds,
                            p->report_seconds, p->checkpoint_seconds, p->launch_s, p->hooks_s,
                            p->checkpoint_s, p->wall_seconds};
        for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
            if (isfinite(v[j]))
                fprintf(f, ",%.9g", v[j]);
            else
                fprintf(f, ",");
        }
        fprintf(f, ",%d\n", i == w->knee);
    }
    if (fclose(f))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--csv '%s': the write failed (%s)",
                              w->o->csv, strerror(errno));
    return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

/* gnuplot, found on PATH: the plot's tool. */
static bool have_gnuplot(void)
{
    const char *path = getenv("PATH");
    char dir[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n && n < sizeof dir - 9) {
            snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)n, path);
            if (access(dir, X_OK) == 0)
                return true;
        }
        path += n + (path[n] == ':');
    }
    return false;
}

/* Text inside a single-quoted gnuplot string, where '' stands for ' and nothing else is
 * special. */
static void gp_text(FILE *g, const char *s)
{
    for (; *s; s++)
        fprintf(g, *s == '\'' ? "''" : "%c", *s);
}

/* Throughput (left axis) and the three shares (right axis) against the loop size (log 2),
 * the knee marked by a dashed line. The data goes inline (a gnuplot datablock). */
static int write_plot(const struct sweep_out *w)
{
    const char *cmd = "bench loops";
    /* gnuplot's own messages, if any, go to stderr: stdout may be --json's */
    FILE *g = popen("gnuplot 1>&2", "w");
    if (!g)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--plot: cannot run gnuplot (%s)",
                              strerror(errno));
    const bool svg = ends_with(w->o->plot, ".svg");
    fprintf(g, "set terminal %s size 900,560\n", svg ? "svg" : "pngcairo");
    fprintf(g, "set output '");
    gp_text(g, w->o->plot);
    fprintf(g, "'\n$d << EOD\n");
    for (size_t i = 0; i < w->n; i++)
        fprintf(g, "%llu %.9g %.9g %.9g %.9g\n",
                (unsigned long long)w->p[i].iterations_per_loop, w->p[i].examples_per_s,
                100 * w->p[i].host_overhead_share, 100 * w->p[i].stall_share,
                100 * w->p[i].device_busy_share);
    fprintf(g, "EOD\n");
    fprintf(g, "set title '");
    gp_text(g, w->model);
    fprintf(g, " on ");
    gp_text(g, w->s->device.chip.name);
    fprintf(g, " x %u, global batch %u (simulated; host time %s)' noenhanced\n",
            w->s->device.n_chips, w->s->run.train_batch_size,
            w->s->run.host_time == TPU_HOST_TIME_MEASURED ? "measured" : "modeled");
    fprintf(g, "set xlabel 'iterations\\_per\\_loop (steps per launch)'\n"
               "set ylabel 'examples/s'\nset y2label 'share of time (%%)'\n"
               "set logscale x 2\nset yrange [0:*]\nset y2range [0:100]\nset ytics nomirror\n"
               "set y2tics\nset grid\nset key outside bottom center horizontal\n");
    const struct tpu_sweep_point *k = &w->p[w->knee];
    fprintf(g, "set arrow from %llu, graph 0 to %llu, graph 1 nohead dt 2 lw 2 lc rgb 'black'\n",
            (unsigned long long)k->iterations_per_loop,
            (unsigned long long)k->iterations_per_loop);
    fprintf(g, "set label 'within 1%% of best: %llu' at %llu, graph 0.95 offset 1,0\n",
            (unsigned long long)k->iterations_per_loop,
            (unsigned long long)k->iterations_per_loop);
    fprintf(g, "plot $d using 1:2 axes x1y1 with linespoints lw 2 pt 7 title 'examples/s', "
               "$d using 1:3 axes x1y2 with linespoints dt 3 pt 5 title 'host overhead %%', "
               "$d using 1:4 axes x1y2 with linespoints dt 4 pt 9 title 'stall %%', "
               "$d using 1:5 axes x1y2 with linespoints dt 5 pt 13 title 'device busy %%'\n");
    int st = pclose(g);
    if (st != 0)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--plot '%s': gnuplot failed (status %d); "
                              "check that its directory is writable", w->o->plot, st);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------- */

/* Rules that join options, checked before any work. */
static int check_options(const struct bench_opts *o)
{
    const char *cmd = "bench loops";
    int rc;
    if (o->model_file[0] && o->layers_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--model and --layers both give the model; "
                              "give one (--model FILE.json, or --layers for an MLP)");
    if (o->max_given && o->list_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--max and --list both give the loop sizes; "
                              "give one (--max N for 1, 2, 4, ... N, or --list 1,4,16)");
    if (o->full && o->extend_given)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--full simulates every loop size, and "
                              "--extend-above %llu extends those above it; give one",
                              (unsigned long long)o->extend_above);
    if (o->extend_given && (o->extend_above & (o->extend_above - 1)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--extend-above %llu is not a power of two; "
                              "give one from 2 to 1048576, e.g. --extend-above 32",
                              (unsigned long long)o->extend_above);
    if (o->host_time == TPU_HOST_TIME_MEASURED) {
        const char *fixed = o->hooks_given ? "--hooks-us" : o->input_given ? "--input-us"
                                                                           : NULL;
        if (fixed)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s fixes a host cost, and --host-time "
                                  "measured measures it; leave out one of them (only "
                                  "--launch-us and --checkpoint-us hold in both: there is no "
                                  "real launch to time, and a sweep writes no checkpoints)",
                                  fixed);
    }
    if (o->plot[0] && !ends_with(o->plot, ".png") && !ends_with(o->plot, ".svg"))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--plot '%s' names neither a .png nor a .svg "
                              "file; give e.g. --plot loops.png", o->plot);
    if (o->plot[0] && !have_gnuplot())
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--plot needs gnuplot, which is not on the "
                              "PATH; install it (Debian: apt-get install gnuplot-nox) or leave "
                              "out --plot");
    if ((o->csv[0] && (rc = tpu__cli_check_output_file(cmd, "--csv", o->csv))) ||
        (o->plot[0] && (rc = tpu__cli_check_output_file(cmd, "--plot", o->plot))))
        return rc;
    return 0;
}

static int bench_loops(int argc, char **argv)
{
    const char *cmd = "bench loops";
    struct bench_opts o;
    memset(&o, 0, sizeof o);
    snprintf(o.chip, sizeof o.chip, "tpu-v3");
    o.cores_per_replica = 1;
    o.max = 1024;
    o.loops = 2;
    o.log_step_count_steps = 100;
    struct tpu_run_config defaults;
    tpu_run_config_default(&defaults);
    o.launch_us = defaults.modeled_launch_us;
    o.hooks_us = defaults.modeled_hooks_us;
    o.checkpoint_us = defaults.modeled_checkpoint_us;
    o.input_us = defaults.modeled_input_us_per_batch;
    const struct tpu__cli_parse ps = {.table = &tpu__cli_bench_loops_options, .cmd = cmd,
                                      .target = &o};
    int rc = tpu__cli_opts_parse(&ps, argc, argv, 1, NULL);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    if ((rc = check_options(&o)))
        return rc;
    uint64_t sizes[TPU_SWEEP_MAX_SIZES];
    size_t n = 0;
    if (o.list_given) {
        if ((rc = tpu__cli_bench_parse_list(o.list, sizes, &n)))
            return rc;
    } else {
        for (uint64_t v = 1; v <= o.max; v *= 2)
            sizes[n++] = v;
    }
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    if (tpu_config_load(o.chip, &chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!(chip.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "chip '%s' cannot train: its matrix unit "
                              "multiplies int8 only; give a chip whose matrix unit takes bf16 "
                              "(tpu-v2 and later, or tiny)", chip.name);
    struct tpu_sweep_settings s;
    tpu_sweep_default_settings(&s, &chip);
    /* --hosts: each host drives --chips chips (default the chip's chips_per_host), as in
     * tpusim train: every host feeds its own replicas */
    const uint64_t per_host = o.chips ? o.chips : chip.chips_per_host;
    const uint64_t hosts = o.hosts ? o.hosts : 1;
    if (per_host * hosts > 4096)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--hosts %llu x %llu chips per host is %llu "
                              "chips; tpusim simulates at most 4096 in one process: use fewer "
                              "--hosts or --chips", (unsigned long long)hosts,
                              (unsigned long long)per_host,
                              (unsigned long long)(per_host * hosts));
    s.device.n_chips = (uint32_t)(per_host * hosts);
    s.run.num_hosts = (uint32_t)hosts;
    s.device.cores_per_replica = o.cores_per_replica;
    s.device.n_threads = o.threads;
    s.device.timing_only = o.timing_only;
    const uint32_t cores = s.device.n_chips * chip.cores_per_chip;
    if (cores % o.cores_per_replica)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--cores-per-replica %u does not divide the "
                              "%u cores of %u %s chips; give a divisor of %u, e.g. 1",
                              o.cores_per_replica, cores, s.device.n_chips, chip.name, cores);
    const uint32_t replicas = cores / o.cores_per_replica;
    s.run.train_batch_size = o.batch ? o.batch : BENCH_BATCH_PER_REPLICA * replicas;
    s.run.seed = 1;
    s.run.host_time = o.host_time;
    s.run.modeled_launch_us = o.launch_us;
    s.run.modeled_hooks_us = o.hooks_us;
    s.run.modeled_checkpoint_us = o.checkpoint_us;
    s.run.modeled_input_us_per_batch = o.input_us;
    s.run.save_checkpoints_steps = o.save_checkpoints_steps;
    s.run.log_step_count_steps = o.log_step_count_steps;
    s.full_steps = o.full ? 0 : o.extend_given ? o.extend_above : 32;
    s.measured_loops = o.loops;
    s.sizes = sizes;
    s.n_sizes = n;

    struct tpu_net *net = NULL;
    struct tpu_mlp_spec spec;
    struct tpu_train_spec tspec;
    struct tpu_model model;
    char name[BENCH_PATH_MAX + 400];
    if (o.model_file[0]) {
        if (tpu_net_load_file(o.model_file, &net, &d))
            return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
        tpu_train_spec_default(&tspec);
        if (tpu_net_model(&model, net, &tspec, &d)) {
            tpu_net_destroy(&net);
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--model '%s': %s", o.model_file, d.msg);
        }
        const char *base = strrchr(o.model_file, '/');
        snprintf(name, sizeof name, "model '%s' (%s)", tpu_net_name(net),
                 base ? base + 1 : o.model_file);
    } else {
        if ((rc = mlp_spec(&o, &spec, name, sizeof name)))
            return rc;
        tpu_mlp_model(&model, &spec);
    }
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    memset(&in, 0, sizeof in);
    const uint32_t n_examples = s.run.train_batch_size < 64 ? s.run.train_batch_size : 64;
    struct tpu_sweep_point points[TPU_SWEEP_MAX_SIZES];
    if (zero_dataset(net, n_examples, &ds)) {
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory for %u examples of zeros",
                            n_examples);
        goto out;
    }
    tpu_dataset_input_init(&in, &ds, 1);
    s.model = &model;
    s.input = &in.input;
    const double w0 = tpu__cli_now_s();
    if (tpu_sweep_run(&s, points, &d)) {
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
        goto out;
    }
    struct sweep_out w = {.o = &o, .s = &s, .model = name, .replicas = replicas, .p = points,
                          .n = n, .wall_s = tpu__cli_now_s() - w0};
    w.best = tpu_sweep_best(points, n);
    w.knee = tpu_sweep_knee(points, n, BENCH_TOLERANCE);
    if (o.json)
        print_json(&w);
    else
        print_table(&w);
    if ((o.csv[0] && (rc = write_csv(&w))) || (o.plot[0] && (rc = write_plot(&w))))
        goto out;
    rc = 0;
out:
    tpu_dataset_input_free(&in);
    tpu_dataset_free(&ds);
    tpu_net_destroy(&net);
    return rc;
}

int tpu__cli_bench(int argc, char **argv)
{
    static const char *const names[] = {"loops", NULL};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tpu__cli_opts_help(&tpu__cli_bench_loops_options, argc < 2 ? stderr : stdout);
        return argc < 2 ? TPU_CLI_USAGE : TPU_CLI_OK;
    }
    if (!strcmp(argv[1], "loops"))
        return bench_loops(argc - 1, argv + 1);
    return tpu__cli_unknown_command("bench", argv[1], names);
}
