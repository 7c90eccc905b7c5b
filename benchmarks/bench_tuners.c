/* The loop-size tuners (tune.h) against the best fixed loop size, on three workloads with
 * different step times and host costs (issue #13): a small MLP with slow hooks, a large MLP,
 * and the CNN of configs/models/cnn.json. Everything is simulated in timing-only mode with
 * modeled host costs, so every figure is deterministic.
 *
 * For each workload:
 *   best fixed   a loop-size sweep (tpusim/sweep.h) over the powers of two up to the run's
 *                length and the run's length itself: each size's steady-state throughput (examples per second of
 *                simulated time, the host's launch and hooks included); the best of them.
 *   each tuner   a training run of the workload's length through the estimator with
 *                iterations_per_loop "auto" (model; keras with Keras's defaults; keras with
 *                a measurement interval suited to the workload's short simulated time) or
 *                "Ns" (TPUEstimator's time per launch); a hook records each loop's steps and
 *                its span on the simulated timeline (launch + device + boundary).
 *                reached      the throughput of the run's last quarter of loops (at least
 *                             one; a final loop shortened to the steps left is not counted)
 *                             as a share of the best fixed throughput
 *                loops to 5 % the first loop whose own throughput is within 5 % of the best
 *                             fixed ("never" when none is)
 *                whole run    the whole run's throughput, tuning included, as a share
 *                after 5      the throughput of the loops from the 6th on (a final loop
 *                             shortened to the steps left is not counted: the fixed sizes'
 *                             figures are steady states too) as a share; "-" when the run
 *                             has no 6th loop
 * The target (issue #13): model reaches at least 98 % of the best fixed throughput within 5
 * loops on every workload ("after 5" at least 98 %), and converges in fewer loops than keras. The program prints
 * whether each holds and exits 1 when one does not.
 *
 * usage: bench_tuners MODELS_DIR   (configs/models, for cnn.json) */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/config.h"
#include "tpusim/dataset_input.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/runtime.h"
#include "tpusim/sweep.h"
#include "tpusim/tune.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct workload {
    const char *name;
    const char *chip;
    uint32_t chips;
    const char *model_file;     /* in MODELS_DIR; NULL: an MLP of `hidden` */
    uint32_t hidden[3], n_hidden;
    uint32_t batch;             /* global */
    double hooks_us;            /* per loop boundary; launch 100 us, input 1 us per batch */
    uint64_t steps;             /* each tuner's run */
    double keras_interval_s;    /* the suited interval of the second keras run */
    uint32_t time_target_s;     /* iterations_per_loop "Ns" */
};

static const struct workload workloads[] = {
    {"small MLP, slow hooks", "tpu-v3", 1, NULL, {256}, 1, 256, 5000, 60000, 0.02, 1},
    {"large MLP", "tpu-v4", 1, NULL, {4096, 4096}, 2, 2048, 500, 1500, 0.05, 1},
    {"CNN (cnn.json)", "tpu-v3", 1, "cnn.json", {0}, 0, 256, 1000, 3000, 0.05, 1},
};

enum { TUNER_MODEL, TUNER_KERAS, TUNER_KERAS_SUITED, TUNER_TIME, N_TUNERS };

/* One loop of a tuner's run. */
struct loop {
    uint64_t steps;
    double span_s, examples;
};

struct recorder {
    const struct tpu_estimator *est;
    struct loop *loops;
    size_t n, cap;
    double last_total_s;
    bool failed;
};

/* The span of the last loop recorded, once the estimator knows its boundary's host time
 * (a hook runs before it: the next hook, or the end of the run, reads it). */
static void close_loop(struct recorder *r)
{
    if (!r->n)
        return;
    const struct tpu_loop_info *li = tpu_estimator_last_info(r->est);
    r->loops[r->n - 1].span_s = li->total_seconds - r->last_total_s;
    r->last_total_s = li->total_seconds;
}

static int record(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    (void)d;
    if (li->mode != TPU_MODE_TRAIN)
        return 0;
    close_loop(r);
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        struct loop *l = realloc(r->loops, cap * sizeof *l);
        if (!l) {
            r->failed = true;
            return TPU_ENOMEM;
        }
        r->loops = l;
        r->cap = cap;
    }
    r->loops[r->n++] = (struct loop){.steps = li->steps,
                                     .examples = li->examples_per_s * li->device_seconds};
    return 0;
}

struct result {
    double reached, whole, after5, wall_s; /* after5 < 0: no 6th loop */
    size_t loops, to_5pct; /* to_5pct 0: never */
    uint64_t final_size;
};

/* The workload's model, input and run configuration, shared by the sweep and the runs. */
struct setup {
    struct tpu_chip_config chip;
    struct tpu_device_settings dev;
    struct tpu_run_config run;
    struct tpu_mlp_spec spec;
    struct tpu_net *net;
    struct tpu_train_spec tspec;
    struct tpu_model model;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
};

static int setup_open(const struct workload *w, const char *models_dir, struct setup *s,
                      struct tpu_diag *d)
{
    memset(s, 0, sizeof *s);
    if (tpu_config_load(w->chip, &s->chip, d))
        return -1;
    tpu_device_default_settings(&s->dev, &s->chip);
    s->dev.n_chips = w->chips;
    s->dev.timing_only = true;
    tpu_run_config_default(&s->run);
    s->run.train_batch_size = w->batch;
    s->run.seed = 1;
    s->run.modeled_launch_us = 100;
    s->run.modeled_hooks_us = w->hooks_us;
    s->run.modeled_input_us_per_batch = 1;
    s->run.log_step_count_steps = 0; /* no cadence for the model tuner to keep */
    uint32_t h = 28, wd = 28, c = 1, classes = 10;
    if (w->model_file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", models_dir, w->model_file);
        if (tpu_net_load_file(path, &s->net, d))
            return -1;
        tpu_train_spec_default(&s->tspec);
        if (tpu_net_model(&s->model, s->net, &s->tspec, d))
            return -1;
        struct tpu_layer_info in, out;
        uint32_t tensor = 0;
        enum tpu_loss loss;
        tpu_net_layer(s->net, 0, &in);
        tpu_net_output(s->net, &tensor, &loss);
        tpu_net_layer(s->net, tensor, &out);
        h = in.out.h;
        wd = in.out.w;
        c = in.out.c;
        classes = out.out.c;
    } else {
        tpu_mlp_default_spec(&s->spec);
        s->spec.optimizer = TPU_OPT_ADAM;
        s->spec.learning_rate = 0.001f;
        s->spec.sizes[0] = 784;
        for (uint32_t i = 0; i < w->n_hidden; i++)
            s->spec.sizes[1 + i] = w->hidden[i];
        s->spec.sizes[1 + w->n_hidden] = 10;
        s->spec.n_layers = w->n_hidden + 1;
        tpu_mlp_model(&s->model, &s->spec);
    }
    /* 64 examples of zeros: timing-only reads only the shape */
    s->ds.n_examples = 64;
    s->ds.image_rows = h;
    s->ds.image_cols = wd;
    s->ds.image_channels = c;
    s->ds.n_features = h * wd * c;
    s->ds.n_classes = classes;
    s->ds.x = calloc((size_t)64 * s->ds.n_features, sizeof(float));
    s->ds.y = calloc(64, sizeof(int32_t));
    if (!s->ds.x || !s->ds.y) {
        snprintf(d->msg, sizeof d->msg, "out of memory for the input");
        return -1;
    }
    tpu_dataset_input_init(&s->in, &s->ds, 1);
    return 0;
}

static void setup_close(struct setup *s)
{
    tpu_dataset_input_free(&s->in);
    free(s->ds.x);
    free(s->ds.y);
    tpu_net_destroy(&s->net);
}

/* The best fixed loop size: the sweep's powers of two up to the run's length. */
static int best_fixed(const struct workload *w, struct setup *s, uint64_t *size, double *thr,
                      struct tpu_diag *d)
{
    struct tpu_sweep_settings ss;
    tpu_sweep_default_settings(&ss, &s->chip);
    ss.device = s->dev;
    ss.run = s->run;
    ss.model = &s->model;
    ss.input = &s->in.input;
    uint64_t sizes[TPU_SWEEP_MAX_SIZES];
    size_t n = 0;
    for (uint64_t L = 1; L <= w->steps && n < TPU_SWEEP_MAX_SIZES; L *= 2)
        sizes[n++] = L;
    if (sizes[n - 1] != w->steps && n < TPU_SWEEP_MAX_SIZES)
        sizes[n++] = w->steps; /* the run's length: one loop for the whole run */
    ss.sizes = sizes;
    ss.n_sizes = n;
    struct tpu_sweep_point p[TPU_SWEEP_MAX_SIZES];
    if (tpu_sweep_run(&ss, p, d))
        return -1;
    size_t b = tpu_sweep_best(p, n);
    *size = p[b].iterations_per_loop;
    *thr = p[b].examples_per_s;
    return 0;
}

static const char *const tuner_label[N_TUNERS] = {"model", "keras (defaults)",
                                                   "keras (suited)", "time (Ns)"};

static int run_tuner(const struct workload *w, struct setup *s, int tuner, double best,
                     struct result *res, struct tpu_diag *d)
{
    struct tpu_run_config cfg = s->run;
    char ipl[32];
    if (tuner == TUNER_TIME) {
        snprintf(ipl, sizeof ipl, "%us", w->time_target_s);
    } else {
        snprintf(ipl, sizeof ipl, "auto");
        tpu_tuner_default_settings(&cfg.tuner,
                                   tuner == TUNER_MODEL ? TPU_TUNER_MODEL : TPU_TUNER_KERAS);
        if (tuner == TUNER_KERAS_SUITED)
            cfg.tuner.interval = w->keras_interval_s;
    }
    if (tpu_run_config_set_ipl(&cfg, ipl, d))
        return -1;
    struct recorder rec = {0};
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_hook hook = {.ctx = &rec, .after_loop = record};
    const double w0 = now_s();
    int rc = tpu_device_open(&s->dev, &dev, d);
    if (!rc)
        rc = tpu_estimator_create(dev, &cfg, &s->model, &hook, 1, &est, d);
    rec.est = est;
    if (!rc)
        rc = tpu_estimator_train(est, &s->in.input, w->steps, 0, d);
    if (!rc)
        close_loop(&rec);
    res->wall_s = now_s() - w0;
    tpu_estimator_destroy(&est);
    tpu_device_close(&dev);
    if (rc || rec.failed || !rec.n) {
        free(rec.loops);
        return -1;
    }
    memset(res, 0, sizeof *res);
    res->wall_s = now_s() - w0;
    res->loops = rec.n;
    double ex = 0, t = 0;
    for (size_t i = 0; i < rec.n; i++) {
        ex += rec.loops[i].examples;
        t += rec.loops[i].span_s;
        if (!res->to_5pct && rec.loops[i].span_s > 0 &&
            rec.loops[i].examples / rec.loops[i].span_s >= 0.95 * best)
            res->to_5pct = i + 1;
    }
    res->whole = t > 0 ? ex / t / best : 0;
    /* the last quarter of the loops, without a final loop shortened to the steps left */
    size_t end = rec.n;
    if (end > 1 && rec.loops[end - 1].steps < rec.loops[end - 2].steps)
        end--;
    size_t first = end - (end / 4 ? end / 4 : 1);
    ex = t = 0;
    for (size_t i = first; i < end; i++) {
        ex += rec.loops[i].examples;
        t += rec.loops[i].span_s;
    }
    res->reached = t > 0 ? ex / t / best : 0;
    /* the loops after the first 5 */
    ex = t = 0;
    for (size_t i = 5; i < end; i++) {
        ex += rec.loops[i].examples;
        t += rec.loops[i].span_s;
    }
    res->after5 = end > 5 && t > 0 ? ex / t / best : -1;
    res->final_size = rec.loops[end - 1].steps;
    free(rec.loops);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_tuners MODELS_DIR (configs/models)\n");
        return 2;
    }
    bool all_met = true;
    printf("%-22s %-17s %10s %9s %12s %9s %9s %8s %8s\n", "workload", "tuner", "final size",
           "reached", "loops to 5%", "whole run", "after 5", "loops", "wall s");
    for (size_t wi = 0; wi < sizeof workloads / sizeof workloads[0]; wi++) {
        const struct workload *w = &workloads[wi];
        struct setup s;
        struct tpu_diag d = {0};
        uint64_t best_size = 0;
        double best = 0;
        if (setup_open(w, argv[1], &s, &d) || best_fixed(w, &s, &best_size, &best, &d)) {
            fprintf(stderr, "bench_tuners: %s: %s\n", w->name, d.msg);
            setup_close(&s);
            return 1;
        }
        printf("%s: %s x %u, global batch %u, hooks %g us, launch 100 us, input 1 us per "
               "batch; %llu steps per run; best fixed loop size %llu: %.1f examples/s\n",
               w->name, w->chip, w->chips, w->batch, w->hooks_us,
               (unsigned long long)w->steps, (unsigned long long)best_size, best);
        struct result r[N_TUNERS];
        for (int t = 0; t < N_TUNERS; t++) {
            if (run_tuner(w, &s, t, best, &r[t], &d)) {
                fprintf(stderr, "bench_tuners: %s, %s: %s\n", w->name, tuner_label[t], d.msg);
                setup_close(&s);
                return 1;
            }
            char to5[24];
            if (r[t].to_5pct)
                snprintf(to5, sizeof to5, "%zu", r[t].to_5pct);
            else
                snprintf(to5, sizeof to5, "never");
            char after5[24];
            if (r[t].after5 >= 0)
                snprintf(after5, sizeof after5, "%.2f%%", 100 * r[t].after5);
            else
                snprintf(after5, sizeof after5, "-");
            printf("%-22s %-17s %10llu %8.2f%% %12s %8.2f%% %9s %8zu %8.2f\n", "",
                   tuner_label[t], (unsigned long long)r[t].final_size, 100 * r[t].reached,
                   to5, 100 * r[t].whole, after5, r[t].loops, r[t].wall_s);
        }
        const struct result *m = &r[TUNER_MODEL];
        const bool target = m->after5 >= 0.98;
        bool faster = m->to_5pct != 0;
        for (int t = TUNER_KERAS; t <= TUNER_KERAS_SUITED; t++)
            faster = faster && (!r[t].to_5pct || m->to_5pct < r[t].to_5pct);
        char when[48];
        if (m->to_5pct)
            snprintf(when, sizeof when, "within 5 %% from loop %zu", m->to_5pct);
        else
            snprintf(when, sizeof when, "never within 5 %%");
        char a5[48];
        if (m->after5 >= 0)
            snprintf(a5, sizeof a5, "%.2f %%", 100 * m->after5);
        else
            snprintf(a5, sizeof a5, "- (no 6th loop)");
        printf("  model: %s of the best fixed from loop 6 on (target: >= 98 %%): %s; %s; "
               "fewer loops to 5 %% than keras: %s\n", a5, target ? "met" : "NOT met", when,
               faster ? "yes" : "NO");
        all_met = all_met && target && faster;
        setup_close(&s);
    }
    return all_met ? 0 : 1;
}
