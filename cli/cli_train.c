/* `tpusim train`, `tpusim evaluate`, `tpusim predict`: a model (a layer graph from a JSON
 * model file, --model FILE, or the --layers MLP) on Fashion-MNIST (or a user's data: any
 * MNIST-format IDX set or a NumPy set, via --data DIR) on a simulated chip, through the
 * estimator (runtime.h).
 *
 * Options come from flags or from a JSON config file (--config FILE); both read one table,
 * which also makes --help, and every value is checked before any work: that is
 * cli_train_options.c's. This file runs the commands (the progress bar, SIGINT, setting up
 * the device and the estimator) and prints their summaries. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "options.h"
#include "tpusim/dataset_input.h"
#include "tpusim/npy.h"
#include "tpusim/reference.h"
#include "tpusim/checkpoint.h"
#include "tpusim/dataset.h"
#include "tpusim/equivalence.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/quantize.h"
#include "tpusim/runtime.h"
#include "tpusim/shard.h"
#include "util.h"
#ifdef TPUSIM_HAVE_RTL
#include "mxu_rtl_provider.h"
#endif
#ifdef TPUSIM_HAVE_SYSTEMC
#include "tpusim/systemc.h"
#endif

/* ---- progress ------------------------------------------------------------------------------- */

/* The training pass as the progress bar sees it. Where it began is learnt from its first
 * loop (the estimator restores the checkpoint inside train): steps and epochs count from
 * there, so a resumed run reports the steps it ran, not the checkpoint's. */
struct progress {
    const struct train_opts *o;
    uint64_t steps, max_steps;  /* what train was asked for (one of them is 0) */
    uint64_t total_steps, first_step, steps_per_epoch;
    bool started;
    double wall0;
    uint64_t last_epoch;
};

static int after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct progress *p = ctx;
    (void)d;
    if (li->mode != TPU_MODE_TRAIN)
        return 0;
    if (!p->started) {
        p->started = true;
        p->first_step = li->global_step - li->steps;
        p->total_steps = p->steps ? p->steps
                         : p->max_steps > p->first_step ? p->max_steps - p->first_step : 0;
        p->last_epoch = p->first_step / p->steps_per_epoch;
    }
    if (p->o->json)
        return 0;
    uint64_t done = li->global_step - p->first_step;
    double el = tpu__cli_now_s() - p->wall0;
    char loss[32] = "n/a"; /* timing-only: no values */
    if (isfinite(li->loss))
        snprintf(loss, sizeof loss, "%.4f", (double)li->loss);
    if (p->o->verbose == 1) {
        int width = 30, filled = p->total_steps ? (int)(width * done / p->total_steps) : width;
        double eta = done ? el * (double)(p->total_steps - done) / (double)done : 0;
        fprintf(stderr, "\r[%.*s%s%.*s] %llu/%llu steps  loss %s  ETA %.0fs ", filled,
                "==============================", filled < width ? ">" : "",
                width - filled - (filled < width), "                              ",
                (unsigned long long)done, (unsigned long long)p->total_steps, loss, eta);
        if (done >= p->total_steps)
            fputc('\n', stderr);
    } else if (p->o->verbose == 2 && li->log_due) {
        /* TPUEstimator's log_step_count_steps line (its StepCounterHook and
         * ExamplesPerSecondHook): the rate since the last line, in simulated time */
        fprintf(stderr, "global step %llu: loss %s, %.1f global_step/sec, %.0f examples/sec "
                "(simulated)\n", (unsigned long long)li->global_step, loss,
                li->log_steps_per_s, li->log_steps_per_s * p->o->rc.train_batch_size);
    }
    if (p->o->verbose == 2 && p->steps_per_epoch) {
        uint64_t epoch = li->global_step / p->steps_per_epoch;
        if (epoch != p->last_epoch)
            fprintf(stderr, "epoch %llu done by global step %llu: loss %s, %.0f simulated "
                    "examples/s, %.1f s wall\n", (unsigned long long)epoch,
                    (unsigned long long)li->global_step, loss, li->examples_per_s, el);
        else if (done >= p->total_steps) /* the end, inside an epoch */
            fprintf(stderr, "training ended at global step %llu (epoch %.2f): loss %s, %.0f "
                    "simulated examples/s, %.1f s wall\n", (unsigned long long)li->global_step,
                    (double)li->global_step / (double)p->steps_per_epoch, loss,
                    li->examples_per_s, el);
        p->last_epoch = epoch;
    }
    return 0;
}

/* ---- SIGINT ------------------------------------------------------------------------------- */

/* The estimator a Ctrl-C stops, and how many came: the only state a signal handler can
 * reach, so it is file-scope (written before the handler is installed, cleared after it is
 * removed). The first SIGINT asks the runtime to stop at the next step boundary (training
 * then writes a checkpoint); a second one aborts at once. */
static struct tpu_estimator *volatile sigint_est;
static volatile sig_atomic_t sigint_count;

static void on_sigint(int sig)
{
    (void)sig;
    if (sigint_count++ == 0 && sigint_est) {
        tpu_estimator_request_stop(sigint_est); /* async-signal-safe */
        static const char m[] = "\ntpusim: stopping at the next step boundary (Ctrl-C again "
                                "to abort at once)\n";
        ssize_t w = write(STDERR_FILENO, m, sizeof m - 1);
        (void)w;
        return;
    }
    static const char m[] = "\ntpusim: aborted; the last checkpoint is intact\n";
    ssize_t w = write(STDERR_FILENO, m, sizeof m - 1);
    (void)w;
    _exit(130);
}

static struct sigaction sigint_old;

static void sigint_install(struct tpu_estimator *est)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART; /* the other threads' writes and reads go on */
    sigemptyset(&sa.sa_mask);
    sigint_est = est;
    sigint_count = 0;
    sigaction(SIGINT, &sa, &sigint_old);
}

static void sigint_remove(void)
{
    if (!sigint_est)
        return;
    sigaction(SIGINT, &sigint_old, NULL);
    sigint_est = NULL;
}

/* A run the runtime stopped on request: says where it stopped, exits 130 as after SIGINT. */
static int stopped(const struct train_opts *o, const struct tpu_diag *d)
{
    /* after the progress bar's line, on a line of its own */
    fprintf(stderr, "%stpusim %s: %s\n", o->verbose == 1 && !o->json ? "\n" : "", o->cmd,
            d->msg);
    return 130;
}

/* ---- the commands --------------------------------------------------------------------------- */

struct run {
    struct train_opts o;
    struct tpu_chip_config chip;
    struct tpu_device *dev;
#ifdef TPUSIM_HAVE_RTL
    struct tpu_mxu_rtl_provider *rtl; /* --backend rtl: one RTL array per MXU */
#endif
    struct tpu_estimator *est;
    struct tpu_dataset train, test;
    struct tpu_net *net;    /* --model: the layer graph (NULL: the --layers MLP) */
    struct tpu_model model;
    struct tpu_int8_mlp *q; /* --int8: the quantized checkpoint */
    struct progress prog;
    struct step_shares shares; /* --step-shares */
    bool cores_redundant; /* --cores-per-replica > 1 and nothing of the model split over them */
    struct tpu__cli_pod *pod; /* on MPI ranks: this rank's host of the pod (cli_ranks.c) */
    char trace_path[OPT_PATH_MAX + 16]; /* --trace's file on this rank: FILE, or on rank h > 0
                                           FILE.rank<h> (each rank traces its own cores) */
};

/* The replicas of the run: the device's, or on ranks the whole pod's (every rank holds as
 * many). */
static uint32_t run_replicas(const struct run *r)
{
    return tpu_device_n_replicas(r->dev) * (r->pod ? r->pod->size : 1);
}

/* --backend rtl: an RTL array for every MXU of the device, and --vcd on core 0's first. */
static int setup_rtl(struct run *r, struct tpu_device_settings *s)
{
#ifdef TPUSIM_HAVE_RTL
    struct tpu_diag d = {0};
    const struct tpu_chip_config *c = &r->chip;
    const uint64_t units = (uint64_t)s->n_chips * c->cores_per_chip * c->mxu_per_core;
    if (units > 4096)
        return tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "--backend rtl: the device has %llu "
                              "matrix units; the RTL backend simulates at most 4096 (use fewer "
                              "--chips)", (unsigned long long)units);
    if (tpu_mxu_rtl_provider_create(c->mxu_rows, c->mxu_cols, (uint32_t)units, &r->rtl, &d))
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "--backend rtl: chip '%s' has %ux%u "
                              "matrix units: %s; choose a chip whose MXU has one of those "
                              "shapes (e.g. --chip tiny)", c->name, c->mxu_rows, c->mxu_cols,
                              d.msg);
    /* on ranks the pod's core 0 is rank 0's */
    if (r->o.vcd[0] && (!r->pod || r->pod->rank == 0) &&
        tpu_mxu_rtl_provider_trace_open(r->rtl, 0, r->o.vcd, &d))
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "--vcd: %s", d.msg);
    s->mxu = tpu_mxu_rtl_provider_get(r->rtl);
    return 0;
#else
    (void)s;
    return tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "--backend rtl: this tpusim was built "
                          "without the RTL matrix unit");
#endif
}

/* --backend's word, for the summary. */
static const char *backend_name(enum train_backend b)
{
    switch (b) {
    case TRAIN_BACKEND_RTL: return "rtl";
    case TRAIN_BACKEND_SYSTEMC: return "systemc";
    case TRAIN_BACKEND_NATIVE: break;
    }
    return "native";
}

/* The RTL arrays' work, for the summary: units used, tiles and cycles over all units. On
 * ranks, the pod's: every rank adds its arrays' through the host group, so every rank
 * calls this at the same point (the summary, printed or not). */
static void rtl_totals(const struct run *r, uint32_t *units, uint64_t *tiles, uint64_t *cycles)
{
    *units = 0;
    *tiles = *cycles = 0;
#ifdef TPUSIM_HAVE_RTL
    struct tpu_mxu_rtl_unit_stats st;
    for (uint32_t u = 0; r->rtl && tpu_mxu_rtl_provider_stats(r->rtl, u, &st) == 0; u++) {
        ++*units;
        *tiles += st.tiles;
        *cycles += st.cycles;
    }
    if (r->pod) {
        uint64_t sums[3] = {*units, *tiles, *cycles};
        struct tpu_diag d = {0};
        if (tpu__cli_group_sum_u64(r->pod->group, sums, sums, 3, &d))
            return; /* the figures stay this rank's; the group failed */
        *units = (uint32_t)sums[0];
        *tiles = sums[1];
        *cycles = sums[2];
    }
#else
    (void)r;
#endif
}

/* Before any work: --int8 needs a chip that multiplies int8; without --int8, evaluate and
 * predict on a chip that multiplies int8 only (tpu-v1) are pointed to it. */
static int check_int8(const struct run *r)
{
    struct tpu_diag d = {0};
    if (r->o.int8 && tpu_int8_check_chip(&r->chip, &d))
        return tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "--int8: %s", d.msg);
    if (!r->o.int8 && strcmp(r->o.cmd, "train") && !(r->chip.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "chip '%s' multiplies int8 only (its "
                              "mxu.dtypes); %s", r->chip.name, r->o.model_file[0]
                              ? "a --model net runs bf16 matmuls: give a chip whose matrix unit "
                                "takes bf16 (tpu-v2 and later, or tiny)"
                              : "run the checkpoint in int8 with --int8");
    return 0;
}

int tpu__cli_train_check_plan(const struct train_opts *o, const struct tpu_chip_config *chip,
                              bool eval_too, bool equivalence)
{
    /* fit trains, then validates and evaluates with the eval batch */
    const bool fit = !strcmp(o->cmd, "fit");
    const bool train = !strcmp(o->cmd, "train") || fit;
    const enum tpu_mode modes[2] = {
        train ? TPU_MODE_TRAIN : !strcmp(o->cmd, "evaluate") ? TPU_MODE_EVAL : TPU_MODE_PREDICT,
        TPU_MODE_EVAL};
    const int n_modes = train && eval_too ? 2 : 1;
    /* a model file that does not load is reported where it is read (tpu__cli_train_load_net,
     * with its hints): the plan is then checked without its tensors */
    const char *model = o->model_file;
    if (model[0]) {
        struct tpu_net *net = NULL;
        struct tpu_diag quiet = {0};
        if (tpu_net_load_file(model, &net, &quiet))
            model = NULL;
        tpu_net_destroy(&net);
    }
    for (int m = 0; m < n_modes; m++) {
        struct tpu_shard_spec s;
        memset(&s, 0, sizeof s);
        int rc = tpu__cli_shard_spec(o->cmd, chip, o->chips, &o->rc, modes[m], model, &s);
        if (rc)
            return rc;
        /* the runtime names a net's input tensor 'features' (net_model.c), as its messages
         * will; `tpusim shard --model` calls it x */
        if (s.n_tensors)
            snprintf(s.tensors[0].name, sizeof s.tensors[0].name, "features");
        struct tpu_diag d = {0};
        struct tpu_shard_plan plan;
        if (tpu_shard_plan_make(&s, &plan, &d)) {
            /* the check refuses BROADCAST (it is not comparable with one core): the batch
             * rule's suggestion of it does not apply there */
            char *broadcast = equivalence ? strstr(d.msg, ", or per_host_input_for_training "
                                                          "BROADCAST") : NULL;
            if (broadcast)
                *broadcast = '\0';
            return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "%s%s", d.msg,
                                  !m ? "" : fit ? " (fit's validation and its evaluation of "
                                  "the test set run in evaluation mode)"
                                                : " (or give --no-eval)");
        }
        tpu_shard_plan_free(&plan);
    }
    return 0;
}

void tpu__cli_train_device_settings(const struct train_opts *o,
                                    const struct tpu_chip_config *chip,
                                    struct tpu_device_settings *s)
{
    tpu_device_default_settings(s, chip);
    /* --hosts: each host drives --chips chips (default the chip's chips_per_host); the
     * product is checked with the plan (tpu__cli_shard_spec) */
    const uint64_t per_host = o->chips ? o->chips : chip->chips_per_host;
    const uint64_t hosts = o->rc.num_hosts ? o->rc.num_hosts : 1;
    s->n_chips = (uint32_t)(per_host * hosts);
    s->cores_per_replica = o->rc.num_cores_per_replica;
    s->n_threads = o->threads;
    s->share_replicas = !o->no_share_replicas;
}

/* What can be known before any work: the chip can run the subcommand, every output path
 * can be written, and evaluate and predict have a checkpoint to read (TPUEstimator's rule:
 * no evaluating or predicting with the untrained initial weights). */
static int preflight(struct run *r)
{
    const struct train_opts *o = &r->o;
    const char *cmd = o->cmd;
    struct tpu_diag d = {0};
    int rc;
    if (tpu_config_load(o->chip, &r->chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    const bool train = !strcmp(cmd, "train");
    if (train && !(r->chip.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "chip '%s' cannot train: its matrix unit "
                              "multiplies int8 only (an inference chip), and training needs a "
                              "chip whose matrix unit takes bf16 (tpu-v2 and later, or tiny); "
                              "train on one of those (e.g. --chip tpu-v2), then evaluate or "
                              "predict its checkpoint on %s with --int8", r->chip.name,
                              r->chip.name);
    if ((rc = check_int8(r)))
        return rc;
    if (r->pod && r->pod->rank > 0)
        snprintf(r->trace_path, sizeof r->trace_path, "%s.rank%u", o->trace, r->pod->rank);
    else
        snprintf(r->trace_path, sizeof r->trace_path, "%s", o->trace);
    if ((o->trace[0] && (rc = tpu__cli_check_output_file(cmd, "--trace", r->trace_path))) ||
        (o->output[0] && (rc = tpu__cli_check_output_file(cmd, "--output", o->output))) ||
        (o->vcd[0] && (rc = tpu__cli_check_output_file(cmd, "--vcd", o->vcd))))
        return rc;
    if ((rc = tpu__cli_train_check_plan(o, &r->chip, !o->no_eval && !o->timing_only, false)))
        return rc;
    const char *md = o->rc.model_dir;
    if (train)
        return md[0] ? tpu__cli_check_output_dir(cmd, "--model-dir", md) : 0;
    struct stat st;
    if (stat(md, &st) == 0 && !S_ISDIR(st.st_mode))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--model-dir '%s' is a file, not a directory; "
                              "give the directory a 'tpusim train --model-dir DIR' wrote", md);
    rc = tpu_checkpoint_latest(md, NULL, NULL, 0, &d);
    if (rc == TPU_ENOTFOUND)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "could not find a trained model in model_dir "
                              "'%s' (%s); 'tpusim %s' reads the latest checkpoint that 'tpusim "
                              "train --model-dir %s' writes: train first, or give the model_dir "
                              "of a trained model", md, stat(md, &st) != 0 ? "no such directory"
                              : "no checkpoint in it", cmd, md);
    if (rc)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--model-dir '%s': %s", md, d.msg);
    return 0;
}

/* --int8: the latest checkpoint, quantized; its activation scales are calibrated on the first
 * training examples. */
static int setup_int8(struct run *r)
{
    struct tpu_diag d = {0};
    uint32_t n_calib = r->train.n_examples < TPU_INT8_CALIBRATION_EXAMPLES
                           ? r->train.n_examples : TPU_INT8_CALIBRATION_EXAMPLES;
    if (tpu_int8_mlp_from_checkpoint(r->o.rc.model_dir, &r->o.spec, r->train.x, n_calib, &r->q,
                                     &d))
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "--int8: %s", d.msg);
    if (d.msg[0] && !r->o.json)
        fprintf(stderr, "tpusim %s: %s\n", r->o.cmd, d.msg); /* a warning (an index lost) */
    return 0;
}

/* --threads' default on a rank: the CPUs shared out among the ranks on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE), at least one; all CPUs on each would start ranks x CPUs
 * workers. */
static uint32_t rank_threads(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    unsigned long local = v ? strtoul(v, NULL, 10) : 1;
    if (cpus < 1)
        cpus = 1;
    if (local < 1)
        local = 1;
    const unsigned long n = (unsigned long)cpus / local;
    return n < 1 ? 1 : n > 256 ? 256 : (uint32_t)n;
}

/* The ranks' agreement on the outcome so far (cli_ranks.c); rc itself in one process. */
static int agree(struct run *r, int rc)
{
    return r->pod ? tpu__cli_ranks_outcome(r->pod, rc) : rc;
}

/* What the ranks compare of a data set: its shape and a hash of its arrays. */
struct data_print {
    uint64_t rows, features, targets, hash;
};

static struct data_print data_print(const struct tpu_dataset *ds)
{
    struct data_print p = {.rows = ds->n_examples, .features = ds->n_features,
                           .targets = ds->n_targets, .hash = TPU__FNV1A_BASIS};
    const size_t n = ds->n_examples;
    if (ds->x)
        p.hash = tpu__fnv1a_words(p.hash, ds->x, n * ds->n_features * sizeof *ds->x);
    if (ds->y)
        p.hash = tpu__fnv1a_words(p.hash, ds->y, n * sizeof *ds->y);
    if (ds->targets)
        p.hash = tpu__fnv1a_words(p.hash, ds->targets, n * ds->n_targets * sizeof *ds->targets);
    return p;
}

/* On ranks: every rank must have read the same data (each feeds its own replicas from its
 * copy, so a rank whose --data differs would train on other rows without any error). Every
 * rank compares every rank's against rank 0's, so every rank finds the same difference. */
static int check_same_data(struct run *r)
{
    if (!r->pod)
        return 0;
    const struct tpu_host_group *g = r->pod->group;
    struct data_print mine[2] = {data_print(&r->train), data_print(&r->test)};
    struct data_print *all = calloc((size_t)g->n * 2, sizeof *all);
    struct tpu_diag d = {0};
    if (!all) {
        snprintf(d.msg, sizeof d.msg, "out of memory for %u ranks' data fingerprints", g->n);
        g->abort(g->ctx, TPU_ENOMEM, &d); /* the others are in the allgather */
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg);
    }
    if (g->allgather(g->ctx, mine, sizeof mine, all, &d)) {
        free(all);
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg);
    }
    static const char *const names[2] = {"training set", "test set"};
    int rc = 0;
    for (uint32_t h = 1; h < g->n && !rc; h++)
        for (int k = 0; k < 2 && !rc; k++) {
            const struct data_print *a = &all[2 * h + k], *z = &all[k];
            if (a->rows != z->rows || a->features != z->features || a->targets != z->targets)
                rc = tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "rank %u's %s has %llu rows of "
                                    "%llu values where rank 0's has %llu rows of %llu: every "
                                    "rank is one host of the same pod slice and must read the "
                                    "same data; give every rank the same --data (the same "
                                    "files on every machine)", h, names[k],
                                    (unsigned long long)a->rows,
                                    (unsigned long long)a->features,
                                    (unsigned long long)z->rows,
                                    (unsigned long long)z->features);
            else if (a->hash != z->hash)
                rc = tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "rank %u's %s differs from rank "
                                    "0's in its contents (%llu rows of the same shape, hash "
                                    "%016llx where rank 0's is %016llx): every rank is one "
                                    "host of the same pod slice and must read the same data; "
                                    "give every rank the same --data (the same files on every "
                                    "machine)", h, names[k], (unsigned long long)a->rows,
                                    (unsigned long long)a->hash,
                                    (unsigned long long)z->hash);
        }
    free(all);
    return rc;
}

/* The model file (--model) first, then the data, checked against the net (cli_train_net.c)
 * or giving the MLP its input width and classes (cli_train_data.c). */
static int load_data(struct run *r, bool need_train_data)
{
    int rc = r->o.model_file[0] ? tpu__cli_train_load_net(&r->o, &r->net) : 0;
    if (rc || (rc = tpu__cli_train_load_data(&r->o, need_train_data, &r->train, &r->test)))
        return rc;
    return r->net ? tpu__cli_train_fit_net(&r->o, r->net, need_train_data, &r->train, &r->test)
                  : tpu__cli_train_fit_mlp(&r->o, need_train_data, &r->train, &r->test);
}

static int setup(struct run *r, bool need_train_data)
{
    struct tpu_diag d = {0};
    const char *cmd = r->o.cmd;
    int rc = preflight(r);
    if (rc)
        return rc;
    need_train_data = need_train_data || r->o.int8; /* int8 calibrates on training data */
    if ((rc = load_data(r, need_train_data)))
        return rc;
    struct tpu_device_settings s;
    tpu__cli_train_device_settings(&r->o, &r->chip, &s);
    if (r->pod) {
        /* this rank's host only: its chips, linked to the other ranks' */
        s.n_chips = r->o.chips ? r->o.chips : r->chip.chips_per_host;
        s.pod = r->pod->link;
        if (!r->o.threads)
            s.n_threads = rank_threads();
    }
    s.timing_only = r->o.timing_only;
    s.trace = r->o.trace[0] != '\0';
    s.op_stats = r->o.step_shares;
    if (r->o.int8 && (rc = setup_int8(r)))
        return rc;
    if (r->o.backend == TRAIN_BACKEND_RTL && (rc = setup_rtl(r, &s)))
        return rc;
#ifdef TPUSIM_HAVE_SYSTEMC
    if (r->o.backend == TRAIN_BACKEND_SYSTEMC)
        s.backend = tpu_device_backend_systemc();
#endif
    if (tpu_device_open(&s, &r->dev, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!r->net) {
        /* the spec's batch fields are the runtime's business; check the rest now (a net's
         * spec was checked with the data) */
        struct tpu_mlp_spec check = r->o.spec;
        check.batch_per_replica = check.global_batch = 1;
        struct tpu_mlp_program mp;
        if (tpu_mlp_build(&check, TPU_MLP_TRAIN, &mp, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s", d.msg);
        tpu_mlp_program_free(&mp);
    }
    struct tpu_run_config cfg = r->o.rc;
    if (r->pod)
        cfg.host_group = r->pod->group;
    if (r->net) {
        if (tpu_net_model(&r->model, r->net, &r->o.tspec, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--model '%s': %s", r->o.model_file,
                                  d.msg);
    } else if (r->q) {
        /* the params are the quantized checkpoint's, not a checkpoint to restore */
        tpu_int8_mlp_model(&r->model, r->q);
        cfg.model_dir[0] = '\0';
    } else {
        tpu_mlp_model(&r->model, &r->o.spec);
    }
    bool splits = true;
    if (!strcmp(cmd, "train") &&
        tpu_model_splits_over_cores(&r->model, &cfg, run_replicas(r),
                                    cfg.num_cores_per_replica, &splits, &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s", d.msg);
    r->cores_redundant = !splits;
    r->prog.o = &r->o;
    r->prog.wall0 = tpu__cli_now_s();
    r->shares.dev = r->dev;
    r->shares.group = r->pod ? r->pod->group : NULL;
    const struct tpu_hook hooks[2] = {
        {.ctx = &r->prog, .after_loop = after_loop},
        {.ctx = &r->shares, .after_loop = tpu__cli_step_shares_after_loop}};
    if (tpu_estimator_create(r->dev, &cfg, &r->model, hooks, r->o.step_shares ? 2 : 1, &r->est,
                             &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s", d.msg);
    /* on ranks, Ctrl-C reaches every rank through mpirun, which ends the job (each rank
     * stopping at a step boundary of its own would leave the others waiting) */
    if (!r->pod)
        sigint_install(r->est);
    return 0;
}

static void teardown(struct run *r)
{
    sigint_remove();
    tpu_estimator_destroy(&r->est);
    tpu_int8_mlp_destroy(&r->q);
    tpu_net_destroy(&r->net); /* after the estimator, whose model points into it */
    tpu_device_close(&r->dev);
    tpu__cli_step_shares_free(&r->shares);
#ifdef TPUSIM_HAVE_RTL
    tpu_mxu_rtl_provider_destroy(&r->rtl); /* after the device that used it */
#endif
    tpu_dataset_free(&r->train);
    tpu_dataset_free(&r->test);
}

static int write_trace(struct run *r)
{
    struct tpu_diag d = {0};
    if (r->o.trace[0] && tpu_device_write_trace(r->dev, r->trace_path, &d))
        return tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg);
    return 0;
}

/* What training, the evaluation after it and the host reference produced, for the summary. */
struct train_result {
    struct tpu_loop_info last; /* the training pass's last loop */
    uint64_t gstep;
    double train_wall;         /* wall seconds the simulation of training took */
    struct tpu_eval_result ev;
    bool evaluated;
    struct tpu_reference_result ref; /* --reference */
    double ref_wall;
};

/* Trains (--steps, --max-steps, or --epochs of the training set, default 1), then evaluates
 * unless --no-eval or --timing-only. The training input `in` is the caller's. */
static int train_then_evaluate(struct run *r, struct tpu_dataset_input *in,
                               struct train_result *t)
{
    struct train_opts *o = &r->o;
    struct tpu_diag d = {0};
    uint64_t per_epoch = r->train.n_examples / o->rc.train_batch_size;
    uint64_t steps = o->steps, max_steps = o->max_steps;
    if (!steps && !max_steps)
        steps = (uint64_t)floor((o->epochs > 0 ? o->epochs : 1.0) * per_epoch);
    if (!steps && !max_steps)
        steps = 1;
    r->prog.steps = steps;
    r->prog.max_steps = max_steps;
    r->prog.steps_per_epoch = per_epoch ? per_epoch : 1;
    /* training, and the evaluation that follows, must be able to run: check before any work */
    const bool eval_follows = !o->no_eval && !o->timing_only;
    const bool train_bad = tpu_estimator_check_mode(r->est, TPU_MODE_TRAIN, &d) != 0;
    if (train_bad || (eval_follows && tpu_estimator_check_mode(r->est, TPU_MODE_EVAL, &d)))
        return tpu__cli_error(o->cmd, TPU_CLI_USAGE, "%s%s", d.msg,
                              train_bad ? "" : " (or give --no-eval)");
    if (r->net)
        tpu__cli_train_warn_zero_rate(o, steps, max_steps);
    double w0 = tpu__cli_now_s();
    int rc = tpu_estimator_train(r->est, &in->input, steps, max_steps, &d);
    t->train_wall = tpu__cli_now_s() - w0;
    if (rc) {
        if (rc == TPU_ECANCELED && sigint_count)
            return stopped(o, &d);
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg);
    }
    if (d.msg[0] && !o->json)
        fprintf(stderr, "tpusim train: %s\n", d.msg); /* a warning */
    t->last = *tpu_estimator_last_info(r->est);
    t->gstep = tpu_estimator_global_step(r->est);
    if (!eval_follows)
        return 0;
    struct tpu_dataset_input tin;
    tpu_dataset_input_init(&tin, &r->test, o->rc.seed);
    rc = tpu_estimator_evaluate(r->est, &tin.input, 0, &t->ev, &d);
    tpu_dataset_input_free(&tin);
    if (rc) {
        if (rc == TPU_ECANCELED && sigint_count)
            return stopped(o, &d);
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "evaluation failed: %s", d.msg);
    }
    t->evaluated = true;
    return 0;
}

/* --reference: the same model trained in fp32 on the host for as many steps. */
static int train_reference(struct run *r, struct train_result *t)
{
    struct train_opts *o = &r->o;
    struct tpu_diag d = {0};
    struct tpu_dataset_input rin;
    tpu_dataset_input_init(&rin, &r->train, o->rc.seed);
    double t0 = tpu__cli_now_s();
    int rc = tpu_reference_train(&o->spec, &r->model, &rin.input, &r->test, t->gstep,
                                 o->rc.train_batch_size, o->rc.seed, &t->ref, &d);
    t->ref_wall = tpu__cli_now_s() - t0;
    tpu_dataset_input_free(&rin);
    if (rc)
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg);
    return 0;
}

/* Simulated seconds per training step the pass ran (0 when it ran none). */
static double step_seconds(const struct run *r, const struct train_result *t)
{
    const uint64_t ran = r->prog.started ? t->gstep - r->prog.first_step : 0;
    return ran ? t->last.pass_device_seconds / (double)ran : 0;
}

static void print_train_json(const struct run *r, const struct train_result *t)
{
    const struct train_opts *o = &r->o;
    const double step_s = step_seconds(r, t);
    /* no loss when no step ran or the device computed no values: say so, invent none */
    char loss_text[32];
    const bool skipped = t->last.steps == 0; /* the runtime said why (a warning above) */
    if (isfinite(t->last.loss) && !skipped)
        snprintf(loss_text, sizeof loss_text, "%.6g", (double)t->last.loss);
    else
        snprintf(loss_text, sizeof loss_text, "null");
    /* a pass that ran no step measured nothing: its figures are null, not 0 */
    char fig[5][32];
    const double figs[5] = {step_s, t->last.pass_examples_per_s, t->last.pass_mxu_utilization,
                            t->last.pass_infeed_stall_share, t->last.pass_host_overhead_share};
    for (int k = 0; k < 5; k++)
        snprintf(fig[k], sizeof fig[k], skipped ? "null" : "%.9g", figs[k]);
    printf("{\"chip\": ");
    tpu__cli_json_string(stdout, r->chip.name);
    printf(", \"replicas\": %u", run_replicas(r));
    if (r->o.rc.num_hosts > 1) /* --hosts: only then, so one host's summary keeps its keys */
        printf(", \"hosts\": %u", r->o.rc.num_hosts);
    if (r->o.rc.num_cores_per_replica > 1) /* the same */
        printf(", \"cores_per_replica\": %u", r->o.rc.num_cores_per_replica);
    if (r->cores_redundant) /* only then: every core runs the whole model */
        printf(", \"cores_redundant\": true");
    if (r->net) {
        printf(", \"model\": ");
        tpu__cli_json_string(stdout, tpu_net_name(r->net));
        printf(", \"model_file\": ");
        tpu__cli_json_string(stdout, o->model_file);
    } else {
        printf(", \"layers\": \"%u-%s-%u\"", o->spec.sizes[0], o->layers_text,
               o->spec.sizes[o->spec.n_layers]);
    }
    printf(", \"global_step\": "
           "%llu, \"train_batch_size\": %u, \"loss\": %s, \"step_time_s\": %s, "
           "\"examples_per_s\": %s, \"mxu_utilization\": %s, \"infeed_stall_share\": "
           "%s, \"host_overhead_share\": %s, \"simulated_seconds\": %.9g, "
           "\"host_time\": \"%s\", \"wall_seconds\": %.3f", (unsigned long long)t->gstep,
           o->rc.train_batch_size, loss_text, fig[0], fig[1], fig[2], fig[3], fig[4],
           t->last.total_seconds,
           o->rc.host_time == TPU_HOST_TIME_MEASURED ? "measured" : "modeled", t->train_wall);
    if (t->evaluated && isnan(t->ev.accuracy)) /* a regression loss: no accuracy */
        printf(", \"test_accuracy\": null, \"test_loss\": %.6f, \"test_examples\": %llu",
               t->ev.loss, (unsigned long long)t->ev.examples);
    else if (t->evaluated)
        printf(", \"test_accuracy\": %.6f, \"test_loss\": %.6f, \"test_examples\": %llu",
               t->ev.accuracy, t->ev.loss, (unsigned long long)t->ev.examples);
    if (o->reference)
        printf(", \"reference_test_accuracy\": %.6f, \"reference_wall_seconds\": %.3f",
               t->ref.test_accuracy, t->ref_wall);
    if (o->step_shares && r->shares.measured)
        printf(", \"steady_step_time_s\": %.9g, \"all_reduce_share\": %.6f, \"halo_share\": "
               "%.6f", r->shares.device_s / (double)r->shares.steps,
               r->shares.all_reduce_share, r->shares.halo_share);
    else if (o->step_shares)
        printf(", \"steady_step_time_s\": null, \"all_reduce_share\": null, \"halo_share\": "
               "null");
    printf(", \"backend\": \"%s\"", backend_name(o->backend));
    if (o->backend == TRAIN_BACKEND_RTL) {
        uint32_t units;
        uint64_t tiles, cycles;
        rtl_totals(r, &units, &tiles, &cycles);
        printf(", \"rtl_units\": %u, \"rtl_tiles\": %llu, \"rtl_cycles\": %llu", units,
               (unsigned long long)tiles, (unsigned long long)cycles);
    }
#ifdef TPUSIM_HAVE_SYSTEMC
    if (o->backend == TRAIN_BACKEND_SYSTEMC) {
        struct tpu_systemc_stats st;
        tpu_systemc_stats(&st);
        printf(", \"systemc_transactions\": %llu, \"systemc_time_s\": %.9g",
               (unsigned long long)st.transactions, (double)st.sc_time_ps * 1e-12);
    }
#endif
    printf("}\n");
}

/* Where a tuned loop size ended (iterations_per_loop auto or a time), and what held it. */
static void print_loop_size(const struct run *r)
{
    const struct tpu_tuner *tn = tpu_estimator_tuner(r->est, TPU_MODE_TRAIN);
    if (!tn)
        return;
    struct tpu_tuner_settings s;
    tpu_tuner_get_settings(tn, &s);
    const unsigned long long spe = tpu_tuner_steps_per_execution(tn);
    if (s.kind == TPU_TUNER_TIME) {
        printf("  loop size          %g s per launch (TPUEstimator's rule): %llu step%s at the "
               "end\n", s.target_s, spe, spe == 1 ? "" : "s");
        return;
    }
    double fixed, step;
    bool bound = false;
    if (!tpu_tuner_model_estimate(tn, &fixed, &step, &bound) || !bound) {
        printf("  loop size          auto (%s): %llu step%s at the end\n",
               tpu_tuner_kind_name(s.kind), spe, spe == 1 ? "" : "s");
        return;
    }
    /* the model tuner wanted longer loops than the log and checkpoint cadence allow */
    double want = ceil(fixed * (1 - s.target_overhead) / (s.target_overhead * step));
    printf("  loop size          auto (model): %llu step%s at the end, held by the cadence of "
           "--log-step-count-steps and --save-checkpoints-steps (%llu); the %g %% overhead "
           "target wants %.0f\n", spe, spe == 1 ? "" : "s", (unsigned long long)s.cadence_steps,
           100 * s.target_overhead, want);
}

static void print_train_text(const struct run *r, const struct train_result *t)
{
    const struct train_opts *o = &r->o;
    const double step_s = step_seconds(r, t);
    const bool skipped = t->last.steps == 0; /* the runtime said why (a warning above) */
    char model[400], optimizer[160];
    tpu__cli_train_describe(o, r->net, model, sizeof model);
    tpu__cli_train_optimizer_text(o, r->net != NULL, optimizer, sizeof optimizer);
    /* the layout past one core per replica and one host only, so that such a run's summary
     * keeps its bytes */
    char layout[96] = "", hosts[32] = "";
    if (o->rc.num_cores_per_replica > 1)
        snprintf(layout, sizeof layout, " of %u cores%s", o->rc.num_cores_per_replica,
                 o->rc.n_input_partition_dims && o->rc.input_partition_dims[0].rank
                     ? " (features partitioned)"
                     : "");
    if (o->rc.num_hosts > 1)
        snprintf(hosts, sizeof hosts, " (%u hosts)", o->rc.num_hosts);
    printf("tpusim train: %s on %s, %u replica%s%s%s, %s matmul inputs, %s\n", model,
           r->chip.name, run_replicas(r), run_replicas(r) == 1 ? "" : "s", layout, hosts,
           o->spec.passes == 1 ? "bf16" : "fp32 (bf16 passes)", optimizer);
    if (r->cores_redundant)
        printf("  warning            the model's lowering splits nothing over a replica's %u "
               "cores (no dense pair, no\n                     --input-partition-dims): every "
               "core runs the whole model, redundantly\n", o->rc.num_cores_per_replica);
    printf("  global step        %llu (global batch %u)\n", (unsigned long long)t->gstep,
           o->rc.train_batch_size);
    if (skipped)
        printf("  training loss      none (no step ran: training was skipped)\n");
    else if (o->timing_only)
        printf("  training loss      none (timing-only: no values computed)\n");
    else
        printf("  training loss      %.4f (replica 0, last step)\n", (double)t->last.loss);
    if (t->evaluated && isnan(t->ev.accuracy))
        printf("  test loss          %.4f on %llu examples (no accuracy: regression)\n",
               t->ev.loss, (unsigned long long)t->ev.examples);
    else if (t->evaluated)
        printf("  test accuracy      %.2f %% on %llu examples (loss %.4f)\n",
               100 * t->ev.accuracy, (unsigned long long)t->ev.examples, t->ev.loss);
    if (o->reference && t->evaluated)
        printf("  fp32 host reference %.2f %% (%+.2f points on the chip), %.1f s\n",
               100 * t->ref.test_accuracy, 100 * (t->ev.accuracy - t->ref.test_accuracy),
               t->ref_wall);
    else if (o->reference) /* --no-eval: nothing on the chip to compare with */
        printf("  fp32 host reference %.2f %%, %.1f s\n", 100 * t->ref.test_accuracy,
               t->ref_wall);
    if (skipped) {
        printf("  simulated          nothing: no training step ran\n");
    } else {
        printf("  simulated          step %.1f us, %.0f examples/s, %.3f s in all (host time "
               "%s)\n", step_s * 1e6, t->last.pass_examples_per_s, t->last.total_seconds,
               o->rc.host_time == TPU_HOST_TIME_MEASURED ? "measured" : "modeled");
        printf("  matrix units       %.1f %% utilized\n", 100 * t->last.pass_mxu_utilization);
        printf("  infeed stall       %.1f %% of device time;  host overhead %.1f %% of time\n",
               100 * t->last.pass_infeed_stall_share, 100 * t->last.pass_host_overhead_share);
    }
    if (o->step_shares && r->shares.measured)
        printf("  step shares        %.1f us a step after the first loop: all-reduce %.1f %%, "
               "halo exchange %.1f %%\n", 1e6 * r->shares.device_s / (double)r->shares.steps,
               100 * r->shares.all_reduce_share, 100 * r->shares.halo_share);
    else if (o->step_shares)
        printf("  step shares        none: one training loop ran (give --steps above "
               "--iterations-per-loop)\n");
    print_loop_size(r);
    printf("  simulation         %.1f s of wall time for training\n", t->train_wall);
    if (o->backend == TRAIN_BACKEND_RTL) {
        uint32_t units;
        uint64_t tiles, cycles;
        rtl_totals(r, &units, &tiles, &cycles);
        printf("  RTL backend        %u Verilated %ux%u arrays ran %llu weight tiles in %llu "
               "clock cycles%s%s\n", units, r->chip.mxu_rows, r->chip.mxu_cols,
               (unsigned long long)tiles, (unsigned long long)cycles,
               o->vcd[0] ? "; waveform of core 0's array in " : "", o->vcd);
    }
#ifdef TPUSIM_HAVE_SYSTEMC
    if (o->backend == TRAIN_BACKEND_SYSTEMC) {
        struct tpu_systemc_stats st;
        tpu_systemc_stats(&st);
        printf("  SystemC backend    %llu TLM transactions; SystemC time %.6f s (global quantum "
               "%.0f ns)\n", (unsigned long long)st.transactions, (double)st.sc_time_ps * 1e-12,
               (double)st.quantum_ps * 1e-3);
    }
#endif
}

static int cmd_train(struct run *r)
{
    int rc = agree(r, setup(r, true));
    if (rc || (rc = agree(r, check_same_data(r))))
        return rc;
    struct train_result t;
    memset(&t, 0, sizeof t);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &r->train, r->o.rc.seed);
    rc = train_then_evaluate(r, &in, &t);
    if (!rc) {
        /* the chip's work is done and checkpointed: from here (the host reference, the
         * summary) Ctrl-C ends the process at once, as it does for any command */
        sigint_remove();
        if (r->o.reference && (!r->pod || r->pod->rank == 0)) /* only rank 0 prints it */
            rc = train_reference(r, &t);
    }
    tpu_dataset_input_free(&in);
    if (!rc)
        rc = write_trace(r);
    if ((rc = agree(r, rc)))
        return rc;
    if (r->o.json)
        print_train_json(r, &t);
    else
        print_train_text(r, &t);
    return 0;
}

static int cmd_evaluate(struct run *r)
{
    int rc = agree(r, setup(r, false));
    if (rc || (rc = agree(r, check_same_data(r))))
        return rc;
    struct tpu_diag d = {0};
    if (tpu_estimator_check_mode(r->est, TPU_MODE_EVAL, &d))
        return agree(r, tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "%s", d.msg));
    struct tpu_dataset_input tin;
    tpu_dataset_input_init(&tin, &r->test, r->o.rc.seed);
    struct tpu_eval_result ev;
    /* TPUEstimator's steps: that many batches of eval_batch_size (0: the whole test set) */
    rc = tpu_estimator_evaluate(r->est, &tin.input, r->o.steps, &ev, &d);
    tpu_dataset_input_free(&tin);
    if (rc == TPU_ECANCELED && sigint_count)
        return stopped(&r->o, &d);
    if (rc)
        return agree(r, tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg));
    if (d.msg[0] && !r->o.json)
        fprintf(stderr, "tpusim %s: %s\n", r->o.cmd, d.msg); /* a warning */
    double fp32 = 0;
    /* over the same examples: evaluation reads the test set in order, --steps batches */
    if (r->q && tpu_int8_mlp_fp32_accuracy(r->q, r->test.x, r->test.y, (uint32_t)ev.examples,
                                           &fp32, &d))
        rc = tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg);
    if (!rc)
        rc = write_trace(r);
    if ((rc = agree(r, rc)))
        return rc;
    if (r->q) {
        const unsigned long long step = (unsigned long long)tpu_int8_mlp_global_step(r->q);
        if (r->o.json)
            printf("{\"global_step\": %llu, \"int8\": true, \"accuracy\": %.6f, \"loss\": "
                   "%.6f, \"examples\": %llu, \"fp32_accuracy\": %.6f}\n", step, ev.accuracy,
                   ev.loss, (unsigned long long)ev.examples, fp32);
        else
            printf("tpusim evaluate: global step %llu: accuracy %.2f %%, loss %.4f over %llu "
                   "examples, int8 on %s (fp32 on the host: %.2f %%, %+.2f points in int8)\n",
                   step, 100 * ev.accuracy, ev.loss, (unsigned long long)ev.examples,
                   r->chip.name, 100 * fp32, 100 * (ev.accuracy - fp32));
        return 0;
    }
    if (r->o.json && isnan(ev.accuracy)) /* a regression loss: no accuracy */
        printf("{\"global_step\": %llu, \"accuracy\": null, \"loss\": %.6f, \"examples\": "
               "%llu}\n", (unsigned long long)tpu_estimator_global_step(r->est), ev.loss,
               (unsigned long long)ev.examples);
    else if (r->o.json)
        printf("{\"global_step\": %llu, \"accuracy\": %.6f, \"loss\": %.6f, \"examples\": %llu}\n",
               (unsigned long long)tpu_estimator_global_step(r->est), ev.accuracy, ev.loss,
               (unsigned long long)ev.examples);
    else if (isnan(ev.accuracy))
        printf("tpusim evaluate: global step %llu: loss %.4f over %llu examples (no accuracy: "
               "regression)\n", (unsigned long long)tpu_estimator_global_step(r->est), ev.loss,
               (unsigned long long)ev.examples);
    else
        printf("tpusim evaluate: global step %llu: accuracy %.2f %%, loss %.4f over %llu "
               "examples\n", (unsigned long long)tpu_estimator_global_step(r->est),
               100 * ev.accuracy, ev.loss, (unsigned long long)ev.examples);
    return 0;
}

struct pred {
    float *out;
    uint32_t cols;
    uint64_t n, correct, cap;
    double sq_err; /* a dataset of targets: the sum of the squared errors */
    const struct tpu_dataset *ds;
};

static void emit(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct pred *p = ctx;
    if (p->ds->targets) {
        const float *t = p->ds->targets + index * p->ds->n_targets;
        for (uint32_t j = 0; j < cols && j < p->ds->n_targets; j++)
            p->sq_err += ((double)row[j] - t[j]) * ((double)row[j] - t[j]);
    } else {
        uint32_t best = 0;
        for (uint32_t j = 1; j < cols; j++)
            if (row[j] > row[best])
                best = j;
        p->correct += (int32_t)best == p->ds->y[index];
    }
    if (p->out && index < p->cap)
        memcpy(p->out + index * cols, row, cols * sizeof *row);
    p->cols = cols;
    p->n = index + 1;
}

/* Predicts the test set (--limit examples). On ranks every rank emits every example's row
 * (the runtime gathers them at each loop boundary), so every rank has the same figures;
 * rank 0 alone keeps the rows and writes --output, as it alone writes checkpoints. */
static int cmd_predict(struct run *r)
{
    int rc = agree(r, setup(r, false));
    if (rc || (rc = agree(r, check_same_data(r))))
        return rc;
    struct tpu_diag d = {0};
    if (tpu_estimator_check_mode(r->est, TPU_MODE_PREDICT, &d))
        return agree(r, tpu__cli_error(r->o.cmd, TPU_CLI_USAGE, "%s", d.msg));
    if (r->o.limit && r->o.limit < r->test.n_examples)
        r->test.n_examples = (uint32_t)r->o.limit;
    struct pred p = {.ds = &r->test, .cap = r->test.n_examples};
    enum tpu_loss loss;
    const size_t classes = r->net ? tpu__cli_net_outputs(r->net, &loss)
                                  : r->o.spec.sizes[r->o.spec.n_layers];
    const bool writes = r->o.output[0] && (!r->pod || r->pod->rank == 0);
    p.out = writes ? malloc((size_t)r->test.n_examples * classes * sizeof(float)) : NULL;
    if (writes && !p.out)
        rc = tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "out of memory for %u examples' logits "
                            "(%zu bytes); give --limit", r->test.n_examples,
                            (size_t)r->test.n_examples * classes * sizeof(float));
    if ((rc = agree(r, rc))) {
        free(p.out);
        return rc;
    }
    struct tpu_dataset_input tin;
    tpu_dataset_input_init(&tin, &r->test, r->o.rc.seed);
    uint64_t n = 0;
    rc = tpu_estimator_predict(r->est, &tin.input, emit, &p, &n, &d);
    tpu_dataset_input_free(&tin);
    if (!rc && d.msg[0] && !r->o.json)
        fprintf(stderr, "tpusim %s: %s\n", r->o.cmd, d.msg); /* a warning */
    if (!rc && writes)
        rc = tpu_npy_write(r->o.output, TPU_F32, n, p.cols, p.out, &d);
    free(p.out);
    if (rc == TPU_ECANCELED && sigint_count)
        return stopped(&r->o, &d);
    double fp32 = 0;
    if (!rc && r->q)
        rc = tpu_int8_mlp_fp32_accuracy(r->q, r->test.x, r->test.y, r->test.n_examples, &fp32,
                                        &d);
    if (rc)
        return agree(r, tpu__cli_error(r->o.cmd, TPU_CLI_FAIL, "%s", d.msg));
    if ((rc = agree(r, write_trace(r))))
        return rc;
    if (r->q && r->o.json)
        printf("{\"predictions\": %llu, \"int8\": true, \"accuracy\": %.6f, "
               "\"fp32_accuracy\": %.6f}\n", (unsigned long long)n,
               n ? (double)p.correct / n : 0, fp32);
    else if (r->q)
        printf("tpusim predict: %llu int8 predictions on %s (one per example; accuracy %.2f %%, "
               "fp32 on the host %.2f %%)%s%s\n", (unsigned long long)n, r->chip.name,
               n ? 100.0 * p.correct / n : 0, 100 * fp32, r->o.output[0] ? ", logits in " : "",
               r->o.output);
    else if (r->test.targets && r->o.json) /* regression: the mean squared error */
        printf("{\"predictions\": %llu, \"accuracy\": null, \"mean_squared_error\": %.9g}\n",
               (unsigned long long)n, n && p.cols ? p.sq_err / ((double)n * p.cols) : 0);
    else if (r->test.targets)
        printf("tpusim predict: %llu predictions (one per example; mean squared error %.6g, no "
               "accuracy: regression)%s%s\n", (unsigned long long)n,
               n && p.cols ? p.sq_err / ((double)n * p.cols) : 0,
               r->o.output[0] ? ", outputs in " : "", r->o.output);
    else if (r->o.json)
        printf("{\"predictions\": %llu, \"accuracy\": %.6f}\n", (unsigned long long)n,
               n ? (double)p.correct / n : 0);
    else
        printf("tpusim predict: %llu predictions (one per example; accuracy %.2f %%)%s%s\n",
               (unsigned long long)n, n ? 100.0 * p.correct / n : 0,
               r->o.output[0] ? ", logits in " : "", r->o.output);
    return 0;
}

int tpu__cli_train(int argc, char **argv)
{
    return tpu__cli_train_on(argc, argv, NULL);
}

int tpu__cli_train_on(int argc, char **argv, struct tpu__cli_pod *pod)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.o.cmd = argv[0];
    r.pod = pod;
    int rc = tpu__cli_train_parse_args(argc, argv, &r.o);
    if (pod) /* every rank takes the options, or every rank stops (cli_ranks.c) */
        rc = tpu__cli_train_ranks_agree(&r.o, pod, rc);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    if (r.o.check_equivalence || r.o.equivalence_free_running)
        return tpu__cli_train_check_equivalence(&r.o);
    if (!strcmp(r.o.cmd, "train"))
        rc = cmd_train(&r);
    else if (!strcmp(r.o.cmd, "evaluate"))
        rc = cmd_evaluate(&r);
    else
        rc = cmd_predict(&r);
    teardown(&r);
    return rc;
}
