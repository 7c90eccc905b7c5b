/* The host runtime: loop and global-step arithmetic, checkpoint cadence, bit-identical
 * resume, evaluation padding, finite input, error propagation from every thread, the input
 * modes, configuration errors, the host's phases on the timeline, and an end-to-end training
 * run that must learn. Runs on the
 * tiny chip (2 cores) with a small MLP and a synthetic dataset made here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tpusim/dataset_input.h"
#include "tpusim/checkpoint.h"
#include "tpusim/dataset.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"
#include "toy_dataset.h"

enum { FEATURES = TOY_FEATURES, CLASSES = TOY_CLASSES };


struct recorder {
    uint64_t boundaries[64];
    uint64_t loop_steps[64];
    double step_time[64];
    double device_s[64];
    double end_s[64];        /* the loop's device end on the timeline */
    double log_rate[64];     /* log_steps_per_s */
    bool log_due[64];
    int n;
    uint64_t host_calls[64];
    int n_calls;
    int fail_host_call_at; /* global step, 0: never */
};

static int rec_after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    (void)d;
    if (li->mode == TPU_MODE_TRAIN && r->n < 64) {
        r->loop_steps[r->n] = li->steps;
        r->step_time[r->n] = li->step_time_s;
        r->device_s[r->n] = li->device_seconds;
        r->end_s[r->n] = li->total_seconds - li->host_seconds;
        r->log_rate[r->n] = li->log_steps_per_s;
        r->log_due[r->n] = li->log_due;
        r->boundaries[r->n++] = li->global_step;
    }
    return 0;
}

static int rec_host_call(void *ctx, uint64_t step, float loss, struct tpu_diag *d)
{
    struct recorder *r = ctx;
    (void)loss;
    if (r->n_calls < 64)
        r->host_calls[r->n_calls++] = step;
    if (r->fail_host_call_at && (int)step == r->fail_host_call_at) {
        snprintf(d->msg, sizeof d->msg, "host call refused step %llu", (unsigned long long)step);
        return TPU_EIO;
    }
    return 0;
}

struct env {
    struct tpu_device *dev;
    struct tpu_estimator *est;
    struct tpu_mlp_spec spec;
    struct tpu_model model;
    struct tpu_run_config cfg;
    struct recorder rec;
    struct tpu_dataset ds;
    struct tpu_dataset_input in;
    bool trace; /* open the device with a timeline */
};

static void env_default_config(struct env *e)
{
    tpu_run_config_default(&e->cfg);
    e->cfg.train_batch_size = 16;
    e->cfg.eval_batch_size = 16;
    e->cfg.predict_batch_size = 16;
    e->cfg.iterations_per_loop = 4;
    e->cfg.seed = 7;
    tpu_mlp_default_spec(&e->spec);
    e->spec.n_layers = 2;
    e->spec.sizes[0] = FEATURES;
    e->spec.sizes[1] = 12;
    e->spec.sizes[2] = CLASSES;
    e->spec.optimizer = TPU_OPT_ADAM;
    e->spec.learning_rate = 0.01f;
}

/* Opens the tiny chip and an estimator with e->cfg; returns the create status. */
static int env_open(struct env *e, struct tpu_diag *d)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 2;
    s.trace = e->trace;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    tpu_mlp_model(&e->model, &e->spec);
    struct tpu_hook hook = {.ctx = &e->rec, .after_loop = rec_after_loop,
                            .host_call = rec_host_call};
    return tpu_estimator_create(e->dev, &e->cfg, &e->model, &hook, 1, &e->est, d);
}

static void env_close(struct env *e)
{
    tpu_estimator_destroy(&e->est);
    tpu_device_close(&e->dev);
    tpu_dataset_input_free(&e->in);
}

static struct env *env_new(void)
{
    struct env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    env_default_config(e);
    toy_dataset(&e->ds, 200, 1);
    tpu_dataset_input_init(&e->in, &e->ds, 3);
    return e;
}

static void env_free(struct env *e)
{
    env_close(e);
    tpu_dataset_free(&e->ds);
    free(e);
}

static void train_ok(struct env *e, uint64_t steps, uint64_t max_steps)
{
    struct tpu_diag d = {0};
    int rc = tpu_estimator_train(e->est, &e->in.input, steps, max_steps, &d);
    if (rc)
        fail_msg("train: %s", d.msg);
}

static char *temp_dir(void)
{
    char *p = strdup("/tmp/tpusim-rt-XXXXXX");
    assert_non_null(mkdtemp(p));
    return p;
}

static void remove_dir(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- loops -------------------------------------------------------------------------------- */

static void test_loop_boundaries(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.log_step_count_steps = 5;
    assert_int_equal(env_open(e, NULL), 0);
    /* ipl 4, 10 steps: loops end at 4, 8, 10 (the last shortened, not padded) */
    train_ok(e, 10, 0);
    /* TPUEstimator's step counter: the first boundary (4) starts the count; a line is due
     * at the first boundary at least 5 steps later: 10 (8 is only 4 later) */
    assert_false(e->rec.log_due[0]);
    assert_false(e->rec.log_due[1]);
    assert_true(e->rec.log_due[2]);
    assert_int_equal(e->rec.n, 3);
    assert_int_equal(e->rec.boundaries[0], 4);
    assert_int_equal(e->rec.boundaries[1], 8);
    assert_int_equal(e->rec.boundaries[2], 10);
    assert_int_equal(e->rec.loop_steps[2], 2);
    assert_int_equal(tpu_estimator_global_step(e->est), 10);
    /* max_steps is absolute: 10 -> 13 is one loop of 3; a new train call's first boundary
     * starts the count again (no line) */
    train_ok(e, 0, 13);
    assert_int_equal(e->rec.boundaries[3], 13);
    assert_false(e->rec.log_due[3]);
    train_ok(e, 0, 5); /* already past: nothing */
    assert_int_equal(e->rec.n, 4);
    env_free(e);

    /* resumed at 3: train(10) ends loops at 7, 11, 13 */
    e = env_new();
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 3, 0);
    assert_int_equal(e->rec.boundaries[0], 3);
    train_ok(e, 10, 0);
    assert_int_equal(e->rec.n, 4);
    assert_int_equal(e->rec.boundaries[1], 7);
    assert_int_equal(e->rec.boundaries[2], 11);
    assert_int_equal(e->rec.boundaries[3], 13);
    env_free(e);
}

/* log_step_count_steps on TPUEstimator's step counter cadence (StepCounterHook's
 * SecondOrStepTimer): not where a loop crosses a multiple of N, but at the first boundary at
 * least N steps after the last line, counted from the train call's first boundary. */
static void test_log_cadence(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.iterations_per_loop = 3;
    e->cfg.log_step_count_steps = 5;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 20, 0);
    /* boundaries 3 6 9 12 15 18 20: the count starts at 3; due at 9 (>= 8), 15 (>= 14),
     * 20 (>= 20). Crossing multiples of 5 would have given 6, 12, 15 and 20. */
    static const bool want[] = {false, false, true, false, true, false, true};
    assert_int_equal(e->rec.n, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(e->rec.log_due[i], want[i]);
    /* each line's rate is the steps since the last trigger over the simulated time between
     * the two loops' device ends (host phases included): 6 steps from 3 to 9, 6 from 9 to 15,
     * 5 from 15 to 20. The times here are rebuilt from rounded seconds (total less host):
     * equal to 1e-9 relative. */
    static const int line[][3] = {{2, 0, 6}, {4, 2, 6}, {6, 4, 5}};
    for (int k = 0; k < 3; k++) {
        int i = line[k][0], j = line[k][1];
        double want_rate = line[k][2] / (e->rec.end_s[i] - e->rec.end_s[j]);
        assert_true(fabs(e->rec.log_rate[i] - want_rate) <= 1e-9 * want_rate);
        /* the host's phases slow it below the device's own rate */
        assert_true(e->rec.log_rate[i] < 1 / e->rec.step_time[i]);
    }
    assert_true(e->rec.log_rate[1] == 0); /* no line: no rate */
    /* a loop longer than N: every boundary after the first is due */
    env_free(e);
    e = env_new();
    e->cfg.iterations_per_loop = 7;
    e->cfg.log_step_count_steps = 5;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 21, 0);
    assert_int_equal(e->rec.n, 3);
    assert_false(e->rec.log_due[0]);
    assert_true(e->rec.log_due[1]);
    assert_true(e->rec.log_due[2]);
    env_free(e);
}

static void test_host_calls_follow_the_global_step(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.host_call_every_n_steps = 3;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 10, 0);
    /* counted by global step across loops (ipl 4), not reset per loop */
    assert_int_equal(e->rec.n_calls, 3);
    assert_int_equal(e->rec.host_calls[0], 3);
    assert_int_equal(e->rec.host_calls[1], 6);
    assert_int_equal(e->rec.host_calls[2], 9);
    train_ok(e, 3, 0);
    assert_int_equal(e->rec.host_calls[3], 12);
    env_free(e);
}

static void test_time_based_loop_size(void **state)
{
    (void)state;
    struct env *e = env_new();
    assert_int_equal(env_open(e, NULL), 0);
    /* measure one step's simulated time, then ask for loops of 5 steps' worth */
    train_ok(e, 1, 0);
    double step = tpu_estimator_last_info(e->est)->step_time_s;
    assert_true(step > 0);
    env_free(e);
    e = env_new();
    e->cfg.iterations_per_loop_s = 5.5 * step;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 12, 0);
    /* TPUEstimator's rule (tune.h, TPU_TUNER_TIME): the first loop runs 1 step; each later
     * loop runs what the IterationCountEstimator gives after the loops before it, fed with
     * their device times. The same tuner, fed the recorded device times, gives the same
     * sizes (the last loop shortened to the steps left). */
    struct tpu_tuner_settings ts;
    tpu_tuner_default_settings(&ts, TPU_TUNER_TIME);
    ts.target_s = e->cfg.iterations_per_loop_s;
    struct tpu_tuner *t = NULL;
    assert_int_equal(tpu_tuner_create(&ts, &t, NULL), 0);
    tpu_tuner_start(t);
    assert_int_equal(e->rec.loop_steps[0], 1);
    uint64_t total = 0;
    for (int i = 0; i < e->rec.n; i++) {
        uint64_t want = tpu_tuner_steps_per_execution(t);
        if (want > 12 - total)
            want = 12 - total;
        assert_int_equal(e->rec.loop_steps[i], want);
        assert_int_equal(tpu_tuner_observe(t, want, e->rec.device_s[i], 0, NULL), 0);
        total += want;
    }
    tpu_tuner_destroy(&t);
    assert_int_equal(total, 12);
    assert_true(e->rec.n >= 3);
    /* 5.5 steps' worth per launch: after the first (longer) step, 5 or 6 steps */
    assert_true(e->rec.loop_steps[1] >= 4 && e->rec.loop_steps[1] <= 6);
    struct tpu_run_config c;
    tpu_run_config_default(&c);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_run_config_set_ipl(&c, "2m", &d), 0);
    assert_true(c.iterations_per_loop_s == 120);
    assert_int_equal(tpu_run_config_set_ipl(&c, "1h", &d), 0);
    assert_true(c.iterations_per_loop_s == 3600);
    assert_int_equal(tpu_run_config_set_ipl(&c, "7", &d), 0);
    assert_int_equal(c.iterations_per_loop, 7);
    assert_true(c.iterations_per_loop_s == 0);
    assert_int_equal(tpu_run_config_set_ipl(&c, "5x", &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "iterations_per_loop '5x' must match"));
    assert_int_equal(tpu_run_config_set_ipl(&c, "0", &d), TPU_EINVAL);
    assert_int_equal(tpu_run_config_set_ipl(&c, "2.5", &d), TPU_EINVAL);
    env_free(e);
}

/* Replays a train call's loops into a fresh tuner of `s` (the host time of every loop: the
 * modeled launch 100 us and hooks 500 us, whole cycles of the tiny chip's 1 GHz clock, so
 * the same double as the runtime's) and checks that each loop ran what the tuner said, the
 * last one shortened to the `steps` left. Returns the tuner's size after the last loop. */
static uint64_t replay_tuner(const struct env *e, const struct tpu_tuner_settings *s, int from,
                             uint64_t steps)
{
    struct tpu_tuner *t = NULL;
    assert_int_equal(tpu_tuner_create(s, &t, NULL), 0);
    tpu_tuner_start(t);
    uint64_t total = 0;
    for (int i = from; i < e->rec.n; i++) {
        uint64_t want = tpu_tuner_steps_per_execution(t);
        if (want > steps - total)
            want = steps - total;
        if (e->rec.loop_steps[i] != want)
            fail_msg("loop %d ran %llu steps; the tuner says %llu", i,
                     (unsigned long long)e->rec.loop_steps[i], (unsigned long long)want);
        assert_int_equal(tpu_tuner_observe(t, want, e->rec.device_s[i], 600e-6, NULL), 0);
        total += want;
    }
    assert_int_equal(total, steps);
    uint64_t spe = tpu_tuner_steps_per_execution(t);
    tpu_tuner_destroy(&t);
    return spe;
}

/* iterations_per_loop auto: the estimator's tuner sizes every launch from the launches before
 * (their device time on the timeline and their host time), the same tuner a user's loop gets
 * from tune.h; it lives as long as the estimator and restarts with every train call. */
static void test_auto_loop_size_model(void **state)
{
    (void)state;
    struct env *e = env_new();
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "auto", NULL), 0);
    assert_true(e->cfg.iterations_per_loop_auto);
    assert_int_equal(e->cfg.tuner.kind, TPU_TUNER_MODEL);
    e->cfg.log_step_count_steps = 0; /* no cadence */
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 3000, 0);
    struct tpu_tuner_settings s;
    tpu_tuner_default_settings(&s, TPU_TUNER_MODEL);
    assert_int_equal(e->rec.loop_steps[0], 1);
    uint64_t spe = replay_tuner(e, &s, 0, 3000);
    /* it grew past 1 within two loops, and its loops' host share is under the 2 % target */
    assert_true(e->rec.loop_steps[1] > 10);
    assert_true(spe > 100);
    int n1 = e->rec.n;
    print_message("auto (model): loops of %llu, %llu, ... then %llu steps\n",
                  (unsigned long long)e->rec.loop_steps[0],
                  (unsigned long long)e->rec.loop_steps[1], (unsigned long long)spe);
    const struct tpu_loop_info *li = tpu_estimator_last_info(e->est);
    assert_true(li->pass_host_overhead_share < 0.1);
    /* a second train call starts from the size the first ended with */
    train_ok(e, 2 * spe, 0);
    assert_int_equal(e->rec.loop_steps[n1], spe);
    env_free(e);

    /* with a log cadence of 64 steps: no loop is longer than 64 */
    e = env_new();
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "auto", NULL), 0);
    e->cfg.log_step_count_steps = 64;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 640, 0);
    for (int i = 0; i < e->rec.n; i++)
        if (e->rec.loop_steps[i] > 64)
            fail_msg("loop %d ran %llu steps, more than the cadence's 64", i,
                     (unsigned long long)e->rec.loop_steps[i]);
    s.cadence_steps = 64;
    assert_int_equal(replay_tuner(e, &s, 0, 640), 64);
    env_free(e);
}

static void test_auto_loop_size_keras(void **state)
{
    (void)state;
    struct env *e = env_new();
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "auto", NULL), 0);
    e->cfg.tuner.kind = TPU_TUNER_KERAS;
    e->cfg.tuner.interval = 0.002; /* simulated seconds: a few loops each */
    e->cfg.tuner.change_spe_interval = 2;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 300, 0);
    struct tpu_tuner_settings s = e->cfg.tuner;
    assert_int_equal(e->rec.loop_steps[0], 1);
    uint64_t spe = replay_tuner(e, &s, 0, 300);
    assert_true(spe > 1);
    env_free(e);
}

static void test_auto_loop_size_errors(void **state)
{
    (void)state;
    struct env *e = env_new();
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "auto", NULL), 0);
    e->cfg.tuner.kind = TPU_TUNER_TIME;
    struct tpu_diag d = {0};
    assert_int_equal(env_open(e, &d), TPU_EINVAL);
    tpu_device_close(&e->dev); /* no estimator: the next env_open opens a new device */
    assert_non_null(strstr(d.msg, "iterations_per_loop auto takes the model or the keras "
                                  "tuner, not tuner kind 2"));
    e->cfg.tuner.kind = TPU_TUNER_MODEL;
    e->cfg.tuner.target_overhead = 1.5;
    assert_int_equal(env_open(e, &d), TPU_EINVAL);
    tpu_device_close(&e->dev); /* no estimator: the next env_open opens a new device */
    assert_non_null(strstr(d.msg, "tuner target_overhead 1.5 must be above 0 and below 1"));
    /* a time per launch set directly is checked as the parser checks it */
    e->cfg.tuner.target_overhead = 0.02;
    e->cfg.iterations_per_loop_auto = false;
    e->cfg.iterations_per_loop_s = 90000;
    assert_int_equal(env_open(e, &d), TPU_EINVAL);
    tpu_device_close(&e->dev); /* no estimator: the next env_open opens a new device */
    assert_non_null(strstr(d.msg, "iterations_per_loop time 90000 s is more than 24 hours (86400 "
                                  "s) of simulated time per launch; use 1s to 24h, e.g. 30s"));
    e->cfg.iterations_per_loop_s = 0;
    /* a count or a time after auto replaces it */
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "8", NULL), 0);
    assert_false(e->cfg.iterations_per_loop_auto);
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "auto", NULL), 0);
    assert_int_equal(tpu_run_config_set_ipl(&e->cfg, "2m", NULL), 0);
    assert_false(e->cfg.iterations_per_loop_auto);
    static const char *const bad[] = {"Auto", "AUTO", "auto ", "autos", "0auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(tpu_run_config_set_ipl(&e->cfg, bad[i], &d), TPU_EINVAL);
        assert_non_null(strstr(d.msg, "or auto for a tuner's choice; e.g. 100 or 30s"));
    }
    env_free(e);
}

/* ---- checkpoints and resume ------------------------------------------------------------ */

static void read_all_params(struct env *e, float *out, size_t cap)
{
    const char *names[] = {"w0", "b0", "w1", "b1", "w0.m", "w0.v", "b1.v"};
    size_t sizes[] = {FEATURES * 12, 12, 12 * CLASSES, CLASSES, FEATURES * 12, FEATURES * 12,
                      CLASSES};
    size_t off = 0;
    for (int i = 0; i < 7; i++) {
        assert_true(off + sizes[i] <= cap);
        assert_int_equal(tpu_estimator_read_param(e->est, names[i], out + off,
                                                  sizes[i] * sizeof(float), NULL),
                         0);
        off += sizes[i];
    }
}

static void test_checkpoint_cadence(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    e->cfg.iterations_per_loop = 2;
    e->cfg.save_checkpoints_steps = 5;
    e->cfg.keep_checkpoint_max = 0;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 12, 0);
    /* at the start (0), at the first boundary at or past 5 steps since the last save (6),
     * again (12, which is also the end) */
    struct tpu_checkpoint_entry *list = NULL;
    size_t n = 0;
    assert_int_equal(tpu_checkpoint_list(dir, &list, &n, NULL), 0);
    assert_int_equal(n, 3);
    assert_int_equal(list[0].global_step, 0);
    assert_int_equal(list[1].global_step, 6);
    assert_int_equal(list[2].global_step, 12);
    tpu_checkpoint_list_free(list, n);
    /* the metrics log has one line per loop */
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int lines = 0;
    char buf[2048];
    while (fgets(buf, sizeof buf, f))
        lines += strstr(buf, "\"mode\": \"train\"") != NULL;
    fclose(f);
    assert_int_equal(lines, 6);
    env_free(e);
    remove_dir(dir);
    free(dir);
}

/* ---- host phases on the timeline ------------------------------------------------------------ */

/* The host's phases in a written trace, by name: how many, and their durations in cycles. */
struct host_phases {
    int launch, hooks, checkpoint, train_input, eval_input, other;
    uint64_t launch_cycles, hooks_cycles, checkpoint_cycles, train_input_cycles;
    uint64_t train_input_end; /* cycle at which the last training input batch ends */
    bool train_input_back_to_back;
    /* the caller's thread's phases (launch, hooks, checkpoint save) as the trace has them */
    struct main_phase {
        char kind; /* 'L', 'H', 'C' */
        uint64_t start, end;
    } seq[32];
    size_t n_seq;
};

static void add_main_phase(struct host_phases *h, char kind, uint64_t start, uint64_t cycles)
{
    assert_true(h->n_seq < sizeof h->seq / sizeof h->seq[0]);
    h->seq[h->n_seq++] = (struct main_phase){kind, start, start + cycles};
}

static int by_start(const void *a, const void *b)
{
    const struct main_phase *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The caller's thread's phases of the first `n` entries (one training pass) in time order:
 * launch, the loop's device time, hooks, and a checkpoint save right after the hooks when
 * one is due; the first launch at cycle 0; the gaps between a launch and its hooks add up
 * to the pass's device time, and the last phase ends with the pass. Returns the kinds in
 * order ("LHLHC..."). */
static void check_main_phase_order(const struct host_phases *h, size_t n, uint64_t device_cycles,
                                   uint64_t end_cycle, char *kinds)
{
    struct main_phase s[32];
    memcpy(s, h->seq, n * sizeof s[0]);
    qsort(s, n, sizeof s[0], by_start);
    assert_true(n > 0);
    assert_int_equal(s[0].start, 0);
    uint64_t gaps = 0;
    for (size_t i = 0; i < n; i++) {
        kinds[i] = s[i].kind;
        if (i == 0)
            continue;
        assert_true(s[i].start >= s[i - 1].end); /* no overlap */
        if (s[i].kind == 'H') {
            assert_int_equal(s[i - 1].kind, 'L'); /* hooks follow their loop's launch */
            gaps += s[i].start - s[i - 1].end;
        } else {
            /* a launch or a checkpoint starts where the hooks (or the checkpoint) ended */
            assert_int_equal(s[i].start, s[i - 1].end);
        }
        if (s[i].kind == 'C')
            assert_int_equal(s[i - 1].kind, 'H');
    }
    kinds[n] = '\0';
    assert_int_equal(gaps, device_cycles);
    assert_int_equal(s[n - 1].end, end_cycle);
}

static void read_host_phases(struct env *e, const char *dir, struct host_phases *h)
{
    char path[600];
    snprintf(path, sizeof path, "%s/t.json", dir);
    struct tpu_diag d = {0};
    if (tpu_device_write_trace(e->dev, path, &d))
        fail_msg("write_trace: %s", d.msg);
    const double mhz = tpu_device_chip(e->dev)->clock_mhz;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        fail_msg("trace is not JSON: %s at %d:%d", je.text, je.line, je.column);
    json_t *ev = json_object_get(root, "traceEvents"), *x;
    size_t i;
    json_int_t host_pid = -1;
    json_array_foreach(ev, i, x)
    {
        json_t *args = json_object_get(x, "args");
        if (!strcmp(json_string_value(json_object_get(x, "ph")), "M") &&
            !strcmp(json_string_value(json_object_get(x, "name")), "process_name") &&
            !strcmp(json_string_value(json_object_get(args, "name")), "host"))
            host_pid = json_integer_value(json_object_get(x, "pid"));
    }
    assert_true(host_pid >= 0);
    memset(h, 0, sizeof *h);
    h->train_input_back_to_back = true;
    json_array_foreach(ev, i, x)
    {
        if (strcmp(json_string_value(json_object_get(x, "ph")), "X") ||
            json_integer_value(json_object_get(x, "pid")) != host_pid)
            continue;
        const char *name = json_string_value(json_object_get(x, "name"));
        const uint64_t start = (uint64_t)llround(json_real_value(json_object_get(x, "ts")) * mhz);
        const uint64_t cycles =
            (uint64_t)llround(json_real_value(json_object_get(x, "dur")) * mhz);
        if (!strcmp(name, "launch")) {
            h->launch++;
            h->launch_cycles += cycles;
            add_main_phase(h, 'L', start, cycles);
        } else if (!strcmp(name, "hooks")) {
            h->hooks++;
            h->hooks_cycles += cycles;
            add_main_phase(h, 'H', start, cycles);
        } else if (!strcmp(name, "checkpoint save")) {
            h->checkpoint++;
            h->checkpoint_cycles += cycles;
            add_main_phase(h, 'C', start, cycles);
        } else if (!strcmp(name, "train input batch")) {
            if (h->train_input && start != h->train_input_end)
                h->train_input_back_to_back = false;
            h->train_input++;
            h->train_input_cycles += cycles;
            h->train_input_end = start + cycles;
        } else if (!strcmp(name, "eval input batch")) {
            h->eval_input++;
        } else {
            h->other++;
        }
    }
    json_decref(root);
}

static void test_host_phases_on_the_timeline(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    e->trace = true;
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    e->cfg.iterations_per_loop = 3;
    e->cfg.save_checkpoints_steps = 4;
    e->cfg.keep_checkpoint_max = 0;
    assert_int_equal(env_open(e, NULL), 0);
    const double hz = tpu_device_chip(e->dev)->clock_mhz * 1e6;
    /* loops of 3, 3, 3, 1 steps; checkpoints at 0 (before the first step: not charged to
     * the timeline), 6 (4 steps since the last) and 10 (the end) */
    train_ok(e, 10, 0);
    struct host_phases h;
    read_host_phases(e, dir, &h);
    assert_int_equal(h.launch, 4);
    assert_int_equal(h.hooks, 4);
    assert_int_equal(h.checkpoint, 2);
    /* PER_HOST_V2 on 2 replicas: 2 input_fn calls per step */
    assert_int_equal(h.train_input, 10 * 2);
    assert_int_equal(h.eval_input, 0);
    assert_int_equal(h.other, 0);
    /* each is the modeled cost: launch 100 us, hooks 500 us, checkpoint 20 ms, input 50 us */
    assert_int_equal(h.launch_cycles, 4 * llround(100e-6 * hz));
    assert_int_equal(h.hooks_cycles, 4 * llround(500e-6 * hz));
    assert_int_equal(h.checkpoint_cycles, 2 * llround(20e-3 * hz));
    assert_int_equal(h.train_input_cycles, 20 * llround(50e-6 * hz));
    /* the input pipeline runs on its own clock, batch after batch from the pass's start */
    assert_true(h.train_input_back_to_back);
    assert_int_equal(h.train_input_end, 20 * llround(50e-6 * hz));
    /* launch, hooks and checkpoints are the host time the runtime reports, cycle for cycle */
    const struct tpu_loop_info *li = tpu_estimator_last_info(e->est);
    assert_int_equal(h.launch_cycles + h.hooks_cycles + h.checkpoint_cycles,
                     llround(li->pass_host_seconds * hz));
    assert_int_equal(h.launch_cycles + h.hooks_cycles + h.checkpoint_cycles +
                         llround(li->pass_device_seconds * hz),
                     llround(li->total_seconds * hz));
    /* where they sit: launch, device, hooks per loop, the checkpoints of steps 6 and 10
     * right after the hooks of the loops that reach them (steps 3, 6, 9, 10) */
    char kinds[33];
    check_main_phase_order(&h, h.n_seq, (uint64_t)llround(li->pass_device_seconds * hz),
                           (uint64_t)llround(li->total_seconds * hz), kinds);
    assert_string_equal(kinds, "LHLHCLHLHC");

    /* evaluation adds its own launches and hooks and its input batches: 200 examples in
     * batches of 16 are 13 steps (the last padded), run in loops of 3, 3, 3, 3, 1; under
     * PER_HOST_V2 evaluation too calls the input function once per replica (TPUEstimator's
     * rule: eval_training_input_configuration only matters for PER_HOST_V1), 2 per step */
    struct tpu_eval_result r;
    struct tpu_diag d = {0};
    if (tpu_estimator_evaluate(e->est, &e->in.input, 0, &r, &d))
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(r.steps, 13);
    read_host_phases(e, dir, &h);
    assert_int_equal(h.launch, 4 + 5);
    assert_int_equal(h.hooks, 4 + 5);
    assert_int_equal(h.checkpoint, 2);
    assert_int_equal(h.train_input, 20);
    assert_int_equal(h.eval_input, 13 * 2);
    assert_int_equal(h.other, 0);
    env_free(e);
    remove_dir(dir);
    free(dir);
}

static void test_resume_is_bit_identical(void **state)
{
    (void)state;
    static float a[2048], b[2048];
    char *da = temp_dir(), *db = temp_dir();
    /* uninterrupted: 11 steps */
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", da);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 11, 0);
    read_all_params(e, a, 2048);
    env_free(e);
    /* interrupted after 5, resumed in a new device and estimator up to 11 */
    e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", db);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 5, 0);
    env_free(e);
    e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", db);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 0, 11);
    assert_int_equal(tpu_estimator_global_step(e->est), 11);
    assert_int_equal(e->rec.boundaries[0], 9); /* resumed at 5, ipl 4 */
    read_all_params(e, b, 2048);
    env_free(e);
    assert_memory_equal(a, b, sizeof a);
    remove_dir(da);
    remove_dir(db);
    free(da);
    free(db);
}

static void test_corrupt_checkpoint_is_refused(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 4, 0);
    env_free(e);
    char path[1024];
    uint64_t step;
    assert_int_equal(tpu_checkpoint_latest(dir, &step, path, sizeof path, NULL), 0);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    fputc(0x5a, f);
    fclose(f);
    e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    assert_int_equal(env_open(e, NULL), 0);
    struct tpu_diag d = {0};
    assert_int_not_equal(tpu_estimator_train(e->est, &e->in.input, 4, 0, &d), 0);
    assert_non_null(strstr(d.msg, "ckpt-4"));
    env_free(e);
    remove_dir(dir);
    free(dir);
}

/* ---- evaluation and prediction --------------------------------------------------------- */

struct collected {
    float rows[256][CLASSES];
    uint64_t n;
};

static void collect(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    struct collected *c = ctx;
    assert_int_equal(cols, CLASSES);
    assert_int_equal(index, c->n); /* in input order */
    memcpy(c->rows[index], row, sizeof c->rows[index]);
    c->n++;
}

static void test_eval_and_predict_count_every_example_once(void **state)
{
    (void)state;
    struct env *e = env_new();
    tpu_dataset_free(&e->ds);
    toy_dataset(&e->ds, 203, 2); /* 12 full batches of 16 and one of 11 */
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 40, 0);
    struct tpu_eval_result ev;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 0, &ev, &d), 0);
    assert_int_equal(ev.examples, 203);
    assert_int_equal(ev.steps, 13);
    struct collected *c = calloc(1, sizeof *c);
    uint64_t n = 0;
    assert_int_equal(tpu_estimator_predict(e->est, &e->in.input, collect, c, &n, &d), 0);
    assert_int_equal(n, 203);
    assert_int_equal(c->n, 203);
    /* the evaluation's accuracy is the predictions' accuracy over exactly 203 examples */
    uint32_t correct = 0;
    for (uint32_t i = 0; i < 203; i++) {
        uint32_t best = 0;
        for (uint32_t j = 1; j < CLASSES; j++)
            if (c->rows[i][j] > c->rows[i][best])
                best = j;
        correct += (int32_t)best == e->ds.y[i];
    }
    assert_true(fabs(ev.accuracy - correct / 203.0) < 1e-12);
    assert_true(ev.accuracy > 0.9); /* it learned */
    /* evaluate with a step limit */
    assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 2, &ev, &d), 0);
    assert_int_equal(ev.examples, 32);
    free(c);
    env_free(e);
}

/* ---- finite input and errors ----------------------------------------------------------- */

static void test_finite_input_ends_cleanly(void **state)
{
    (void)state;
    struct env *e = env_new();
    assert_int_equal(env_open(e, NULL), 0);
    e->in.max_examples = 100; /* 6 full steps of 16, then a partial one */
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 20, 0, &d), 0);
    assert_int_equal(tpu_estimator_global_step(e->est), 6);
    assert_non_null(strstr(d.msg, "warning: the training input ended at global step 6"));
    env_free(e);

    e = env_new();
    e->cfg.strict_input = true;
    assert_int_equal(env_open(e, NULL), 0);
    e->in.max_examples = 100;
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 20, 0, &d), TPU_EEND);
    assert_non_null(strstr(d.msg, "ended after global step 6"));
    assert_non_null(strstr(d.msg, "strict input"));
    env_free(e);
}

/* An input that fails, or poisons its data, at a given call. */
struct bad_input {
    struct tpu_dataset_input *base;
    int fail_at, nan_at, calls;
};

static int bad_next(void *ctx, enum tpu_mode mode, uint32_t shard, uint32_t batch,
                    void *const *tensors, uint32_t *n_real, struct tpu_diag *d)
{
    struct bad_input *b = ctx;
    int call = ++b->calls;
    if (call == b->fail_at) {
        snprintf(d->msg, sizeof d->msg, "disk on fire");
        return TPU_EIO;
    }
    int rc = b->base->input.next(b->base, mode, shard, batch, tensors, n_real, d);
    if (call == b->nan_at)
        ((float *)tensors[0])[0] = NAN;
    return rc;
}

static int bad_start(void *ctx, enum tpu_mode mode, uint64_t step, uint32_t batch,
                     struct tpu_diag *d)
{
    struct bad_input *b = ctx;
    return b->base->input.start(b->base, mode, step, batch, d);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void count_emit(void *ctx, uint64_t index, const float *row, uint32_t cols)
{
    (void)ctx;
    (void)index;
    (void)row;
    (void)cols;
}

static void test_errors_stop_the_run(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    e->cfg.keep_checkpoint_max = 0;
    e->cfg.save_checkpoints_steps = 4;
    assert_int_equal(env_open(e, NULL), 0);
    /* input function fails at its 15th call: step 7 (2 calls per step, PER_HOST_V2) */
    struct bad_input bi = {.base = &e->in, .fail_at = 15};
    struct tpu_input in = {.ctx = &bi, .next = bad_next, .start = bad_start};
    struct tpu_diag d = {0};
    double t0 = now_s();
    assert_int_equal(tpu_estimator_train(e->est, &in, 20, 0, &d), TPU_EIO);
    assert_true(now_s() - t0 < 10);
    assert_non_null(strstr(d.msg, "the input function failed at step 7: disk on fire"));
    /* the checkpoints written before (start, and boundary 4) are intact and loadable */
    uint64_t step;
    char path[1024];
    assert_int_equal(tpu_checkpoint_latest(dir, &step, path, sizeof path, &d), 0);
    assert_int_equal(step, 4);
    env_free(e);

    /* NaN in the data at step 3: the loss is NaN at global step 3 */
    e = env_new();
    assert_int_equal(env_open(e, NULL), 0);
    bi = (struct bad_input){.base = &e->in, .nan_at = 5};
    t0 = now_s();
    assert_int_equal(tpu_estimator_train(e->est, &in, 20, 0, &d), TPU_ERANGE);
    assert_true(now_s() - t0 < 10);
    assert_non_null(strstr(d.msg, "the training loss is NaN at global step 3"));
    env_free(e);

    /* evaluation and prediction do not advance the global step: a failing input names the
     * pass's own batch, not global step + batch (two input calls a batch here: one per
     * replica, as the training's step 7 above) */
    e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 3, 0);
    struct tpu_eval_result ev;
    bi = (struct bad_input){.base = &e->in, .fail_at = 5};
    assert_int_equal(tpu_estimator_evaluate(e->est, &in, 0, &ev, &d), TPU_EIO);
    assert_string_equal(d.msg, "the input function failed at the evaluation's batch 3: disk on "
                               "fire");
    bi = (struct bad_input){.base = &e->in, .fail_at = 4};
    uint64_t n = 0;
    assert_int_equal(tpu_estimator_predict(e->est, &in, count_emit, NULL, &n, &d), TPU_EIO);
    assert_string_equal(d.msg, "the input function failed at the prediction's batch 2: disk "
                               "on fire");
    env_free(e);

    /* a host call that fails */
    e = env_new();
    e->cfg.host_call_every_n_steps = 2;
    e->rec.fail_host_call_at = 6;
    assert_int_equal(env_open(e, NULL), 0);
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 20, 0, &d), TPU_EIO);
    assert_non_null(strstr(d.msg, "host call refused step 6"));
    env_free(e);
    remove_dir(dir);
    free(dir);
}

static void test_initial_infeed_sleep(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.initial_infeed_sleep_secs = 0.3;
    assert_int_equal(env_open(e, NULL), 0);
    double t0 = now_s();
    train_ok(e, 2, 0);
    assert_true(now_s() - t0 >= 0.3);
    env_free(e);
}

/* ---- input modes and configuration ---------------------------------------------------- */

static void test_input_modes(void **state)
{
    (void)state;
    /* Each mode's calls and batches are the shard plan's (tests/test_shard.c checks them
     * all). The same stream of batches: PER_SHARD_V1, PER_HOST_V1 and PER_HOST_V2 train the
     * same model (each replica gets the same rows in each). */
    const enum tpu_input_mode modes[] = {TPU_PER_SHARD_V1, TPU_PER_HOST_V1, TPU_PER_HOST_V2};
    static float p[3][2048];
    for (int i = 0; i < 3; i++) {
        struct env *e = env_new();
        e->cfg.per_host_input_for_training = modes[i];
        assert_int_equal(env_open(e, NULL), 0);
        train_ok(e, 6, 0);
        read_all_params(e, p[i], 2048);
        env_free(e);
    }
    assert_memory_equal(p[0], p[1], sizeof p[0]);
    assert_memory_equal(p[0], p[2], sizeof p[0]);
    /* BROADCAST sends the whole global batch to both replicas */
    struct env *e = env_new();
    e->cfg.per_host_input_for_training = TPU_BROADCAST;
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 6, 0);
    env_free(e);
}

static void expect_create_error(struct env *e, const char *needle)
{
    struct tpu_diag d = {0};
    assert_int_not_equal(env_open(e, &d), 0);
    if (!strstr(d.msg, needle))
        fail_msg("'%s' lacks '%s'", d.msg, needle);
    assert_null(e->est);
}

static void test_config_errors(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.num_shards = 4;
    expect_create_error(e, "num_shards 4 does not match the 2 replicas");
    env_close(e);
    env_default_config(e);
    e->cfg.num_cores_per_replica = 2;
    expect_create_error(e, "num_cores_per_replica 2 differs from the device's 1");
    env_close(e);
    env_default_config(e);
    e->cfg.num_cores_per_replica = 3;
    expect_create_error(e, "num_cores_per_replica 3 must be a power of two");
    env_close(e);
    env_default_config(e);
    e->cfg.iterations_per_loop = 0;
    expect_create_error(e, "iterations_per_loop is 0");
    env_close(e);
    env_default_config(e);
    e->cfg.save_checkpoints_steps = 10;
    expect_create_error(e, "save_checkpoints_steps 10 needs a model_dir");
    env_close(e);
    env_default_config(e);
    e->cfg.num_hosts = 2;
    expect_create_error(e, "num_hosts 2");
    env_close(e);
    env_default_config(e);
    e->cfg.train_batch_size = e->cfg.eval_batch_size = e->cfg.predict_batch_size = 0;
    expect_create_error(e, "no batch size is set");
    env_close(e);
    env_default_config(e);
    e->cfg.initial_infeed_sleep_secs = -1;
    expect_create_error(e, "initial_infeed_sleep_secs -1");
    env_close(e);
    /* train without steps */
    env_default_config(e);
    assert_int_equal(env_open(e, NULL), 0);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 0, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "give steps"));
    /* a model spec the runtime cannot build */
    e->spec.learning_rate = -1;
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 1, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "learning rate -1"));
    env_free(e);
}

/* ---- issue #9: timing-only, model parallelism, deadlocks, batches, skips, stops ---------- */

/* Like env_open, on a device with these settings. */
static int env_open_with(struct env *e, bool timing_only, uint32_t cores_per_replica,
                         struct tpu_diag *d)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 2;
    s.timing_only = timing_only;
    s.cores_per_replica = cores_per_replica;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    tpu_mlp_model(&e->model, &e->spec);
    struct tpu_hook hook = {.ctx = &e->rec, .after_loop = rec_after_loop,
                            .host_call = rec_host_call};
    return tpu_estimator_create(e->dev, &e->cfg, &e->model, &hook, 1, &e->est, d);
}

static void test_timing_only_training_runs(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    assert_int_equal(env_open_with(e, true, 1, NULL), 0);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 6, 0, &d), 0);
    assert_non_null(strstr(d.msg, "timing-only: no checkpoints are written"));
    assert_int_equal(tpu_estimator_global_step(e->est), 6);
    const struct tpu_loop_info *li = tpu_estimator_last_info(e->est);
    assert_true(li->device_seconds > 0);  /* cycles were counted */
    assert_true(isnan(li->loss));         /* no loss was invented */
    uint64_t step;
    char path[1024];
    assert_int_equal(tpu_checkpoint_latest(dir, &step, path, sizeof path, &d), TPU_ENOTFOUND);
    struct tpu_eval_result ev;
    assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 0, &ev, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "timing-only device does not compute"));
    float w[4];
    assert_int_equal(tpu_estimator_read_param(e->est, "w0", w, sizeof w, &d), TPU_EUNSUPPORTED);
    char metrics[1100];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    FILE *f = fopen(metrics, "r");
    assert_non_null(f);
    char line[1024];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "\"loss\": null"));
    env_free(e);
    remove_dir(dir);
    free(dir);
}

/* Every core of a replica outfeeds: with 2 cores per replica the second core's outfeed must
 * be drained too, or its queue fills and the run hangs (issue #9). */
static void test_model_parallel_eval_and_predict_finish(void **state)
{
    (void)state;
    alarm(120); /* a hang fails the test instead of blocking it */
    struct env *e = env_new();
    e->cfg.num_cores_per_replica = 2;
    assert_int_equal(env_open_with(e, false, 2, NULL), 0);
    assert_int_equal(tpu_device_n_replicas(e->dev), 1);
    train_ok(e, 9, 0); /* more steps than the outfeed queue holds */
    struct tpu_diag d = {0};
    struct tpu_eval_result ev;
    struct tpu_dataset_input tin;
    tpu_dataset_input_init(&tin, &e->ds, 3);
    int rc = tpu_estimator_evaluate(e->est, &tin.input, 0, &ev, &d);
    if (rc)
        fail_msg("evaluate: %s", d.msg);
    assert_int_equal(ev.examples, 200);
    tpu_dataset_input_free(&tin);
    tpu_dataset_input_init(&tin, &e->ds, 3);
    uint64_t n = 0;
    rc = tpu_estimator_predict(e->est, &tin.input, count_emit, NULL, &n, &d);
    if (rc)
        fail_msg("predict: %s", d.msg);
    assert_int_equal(n, 200);
    tpu_dataset_input_free(&tin);
    alarm(0);
    env_free(e);
}

/* A model whose program outfeeds a tensor it does not declare: nobody drains it, the cores
 * stop, and the feed threads wait on the device. The watchdog must end the run with an
 * error promptly. */
static int undeclared_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *shape,
                            struct tpu_model_program *out, struct tpu_diag *d)
{
    const struct tpu_model *inner = ctx;
    int rc = inner->build(inner->ctx, mode, shape, out, d);
    out->n_outfeed = 0;
    return rc;
}

static void test_deadlock_ends_the_run(void **state)
{
    (void)state;
    alarm(120);
    struct env *e = env_new();
    e->cfg.iterations_per_loop = 20;
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    tpu_mlp_model(&e->model, &e->spec);
    struct tpu_model wrap = {.ctx = &e->model, .build = undeclared_build,
                             .init_param = e->model.init_param};
    assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &wrap, NULL, 0, &e->est, NULL), 0);
    /* wrap.ctx points at e->model, which outlives the estimator */
    struct tpu_diag d = {0};
    time_t t0 = time(NULL);
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 20, 0, &d), TPU_ETHREAD);
    assert_true(time(NULL) - t0 < 30);
    if (!strstr(d.msg, "run is deadlocked") ||
        !strstr(d.msg, "waits for the host to drain its full outfeed queue"))
        fail_msg("%s", d.msg);
    alarm(0);
    env_free(e);
}

static void test_batch_checked_when_its_mode_runs(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.eval_batch_size = 9;    /* 2 replicas: does not split */
    e->cfg.predict_batch_size = 1; /* below the replicas */
    assert_int_equal(env_open(e, NULL), 0); /* no mode runs yet: nothing to refuse */
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_check_mode(e->est, TPU_MODE_EVAL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "eval_batch_size 9 must be divisible by the number of "
                                  "replicas (num_shards) 2"));
    assert_non_null(strstr(d.msg, "use 8 or 10"));
    assert_int_equal(tpu_estimator_check_mode(e->est, TPU_MODE_PREDICT, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "use at least 2 (one example per replica)"));
    assert_null(strstr(d.msg, "use 2 or 2"));
    train_ok(e, 4, 0); /* training needs neither */
    struct tpu_eval_result ev;
    assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 0, &ev, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "eval_batch_size 9"));
    env_close(e);
    /* a train batch that does not split fails train, before any step */
    env_default_config(e);
    memset(&e->rec, 0, sizeof e->rec);
    e->cfg.train_batch_size = 15;
    assert_int_equal(env_open(e, NULL), 0);
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 4, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "train_batch_size 15 must be divisible by the number of "
                                  "replicas (num_shards) 2, since each replica takes the same "
                                  "share of the global batch; use 14 or 16"));
    assert_int_equal(e->rec.n, 0);
    env_free(e);
}

static void test_training_at_max_steps_says_so(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    assert_int_equal(env_open(e, NULL), 0);
    train_ok(e, 4, 0);
    env_close(e);
    tpu_dataset_input_init(&e->in, &e->ds, 3);
    assert_int_equal(env_open(e, NULL), 0);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 0, 4, &d), 0);
    if (!strstr(d.msg, "training skipped: the checkpoint in") ||
        !strstr(d.msg, "is already at global step 4, at or past max_steps 4"))
        fail_msg("%s", d.msg);
    const struct tpu_loop_info *li = tpu_estimator_last_info(e->est);
    assert_int_equal(li->steps, 0);
    assert_int_equal(li->global_step, 4);
    assert_true(isnan(li->loss));
    /* the evaluation launch that ends with the input logs its real device time */
    struct tpu_eval_result ev;
    assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 0, &ev, &d), 0);
    li = tpu_estimator_last_info(e->est);
    assert_true(li->device_seconds > 0);
    assert_true(li->examples_per_s > 0);
    assert_true(ev.device_seconds > 0);
    env_free(e);
    remove_dir(dir);
    free(dir);
}

/* A stop request from a hook at the first loop boundary, and one from inside a long loop
 * (the host call at step 2, on the outfeed thread): both stop at a step boundary, save a
 * checkpoint of that step and return TPU_ECANCELED saying where. */
struct stopper {
    struct tpu_estimator *est;
    uint64_t at;
};

static int stop_after_loop(void *ctx, const struct tpu_loop_info *li, struct tpu_diag *d)
{
    struct stopper *s = ctx;
    (void)d;
    if (li->global_step >= s->at)
        tpu_estimator_request_stop(s->est);
    return 0;
}

static int stop_host_call(void *ctx, uint64_t step, float loss, struct tpu_diag *d)
{
    struct stopper *s = ctx;
    (void)loss;
    (void)d;
    if (step >= s->at)
        tpu_estimator_request_stop(s->est);
    return 0;
}

static void test_stop_request(void **state)
{
    (void)state;
    for (int inside = 0; inside < 2; inside++) {
        char *dir = temp_dir();
        struct env *e = env_new();
        snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
        e->cfg.iterations_per_loop = inside ? 1000 : 4;
        e->cfg.host_call_every_n_steps = 1;
        struct tpu_chip_config chip;
        assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
        struct tpu_device_settings s;
        tpu_device_default_settings(&s, &chip);
        assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
        tpu_mlp_model(&e->model, &e->spec);
        struct stopper st = {.at = inside ? 2 : 4};
        struct tpu_hook hook = {.ctx = &st};
        if (inside)
            hook.host_call = stop_host_call;
        else
            hook.after_loop = stop_after_loop;
        assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &e->model, &hook, 1, &e->est,
                                              NULL), 0);
        st.est = e->est;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 1000, 0, &d), TPU_ECANCELED);
        uint64_t g = tpu_estimator_global_step(e->est);
        if (inside)
            assert_true(g >= 2 && g < 12); /* the steps already queued, no more */
        else
            assert_int_equal(g, 4);
        char want[96];
        snprintf(want, sizeof want, "training stopped on request at global step %llu (of 1000)",
                 (unsigned long long)g);
        if (!strstr(d.msg, want) || !strstr(d.msg, "checkpoint"))
            fail_msg("'%s' lacks '%s'", d.msg, want);
        uint64_t step;
        char path[1024];
        assert_int_equal(tpu_checkpoint_latest(dir, &step, path, sizeof path, &d), 0);
        assert_int_equal(step, g);
        /* the request stays: a later call stops at once */
        struct tpu_eval_result ev;
        assert_int_equal(tpu_estimator_evaluate(e->est, &e->in.input, 0, &ev, &d),
                         TPU_ECANCELED);
        env_free(e);
        remove_dir(dir);
        free(dir);
    }
}

static void *stop_soon(void *arg)
{
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    tpu_estimator_request_stop(arg);
    return NULL;
}

/* A stop request during initial_infeed_sleep_secs is seen at once, not after the sleep. */
static void test_stop_during_initial_infeed_sleep(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.initial_infeed_sleep_secs = 60;
    assert_int_equal(env_open(e, NULL), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stop_soon, e->est), 0);
    struct tpu_diag d = {0};
    time_t t0 = time(NULL);
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 10, 0, &d), TPU_ECANCELED);
    assert_true(time(NULL) - t0 < 20);
    pthread_join(th, NULL);
    assert_int_equal(tpu_estimator_global_step(e->est), 0);
    assert_non_null(strstr(d.msg, "training stopped on request at global step 0 (of 10); no "
                                  "checkpoint was written (no model_dir)"));
    env_free(e);
}

static void test_iterations_per_loop_grammar(void **state)
{
    (void)state;
    struct tpu_run_config c;
    tpu_run_config_default(&c);
    struct tpu_diag d = {0};
    static const char *const bad[] = {"01", "001", "1e3", "0x10", " 5", "5 ", "1.5s", "+5",
                                      "-5", "0", "0s", "5ms", "s", "", "1e308h", "5S"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(tpu_run_config_set_ipl(&c, bad[i], &d), TPU_EINVAL);
        char want[64];
        snprintf(want, sizeof want, "iterations_per_loop '%s' must match", bad[i]);
        if (!strstr(d.msg, want) || !strstr(d.msg, "^[1-9][0-9]*[smh]?$") ||
            !strstr(d.msg, "e.g. 100 or 30s"))
            fail_msg("'%s': %s", bad[i], d.msg);
    }
    assert_int_equal(tpu_run_config_set_ipl(&c, "25h", &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "'25h' is more than 24 hours"));
    assert_int_equal(tpu_run_config_set_ipl(&c, "99999999999999999999999s", &d), TPU_ERANGE);
    assert_int_equal(tpu_run_config_set_ipl(&c, "1000000000001", &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "more than 1000000000000 steps"));
    assert_int_equal(tpu_run_config_set_ipl(&c, "1000000000000", &d), 0);
    assert_int_equal(c.iterations_per_loop, 1000000000000ull);
    assert_int_equal(tpu_run_config_set_ipl(&c, "250", &d), 0);
    assert_int_equal(c.iterations_per_loop, 250);
    assert_true(c.iterations_per_loop_s == 0);
    assert_int_equal(tpu_run_config_set_ipl(&c, "24h", &d), 0);
    assert_true(c.iterations_per_loop_s == 86400);
    assert_int_equal(tpu_run_config_set_ipl(&c, "5m", &d), 0);
    assert_true(c.iterations_per_loop_s == 300);
    assert_int_equal(tpu_run_config_set_ipl(&c, "30s", &d), 0);
    assert_true(c.iterations_per_loop_s == 30);
}

/* A model that needs more host memory than the process may allocate is refused before
 * anything is allocated, with both figures and which limit it was. In a child process under
 * RLIMIT_AS (the parent's limits stay as they are). */
static int memory_child(void)
{
    struct tpu_mlp_spec spec;
    tpu_mlp_default_spec(&spec);
    spec.n_layers = 3;
    spec.sizes[0] = FEATURES;
    spec.sizes[1] = spec.sizes[2] = 4096; /* a 64 MiB weight, 3 copies with Adam, per core */
    spec.sizes[3] = CLASSES;
    spec.optimizer = TPU_OPT_ADAM;
    struct tpu_chip_config chip;
    struct tpu_device *dev = NULL;
    struct tpu_estimator *est = NULL;
    struct tpu_model model;
    struct tpu_run_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load_preset("tpu-v2", &chip, &d))
        return 2;
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 1;
    s.n_threads = 1;
    if (tpu_device_open(&s, &dev, &d))
        return 3;
    tpu_mlp_model(&model, &spec);
    tpu_run_config_default(&cfg);
    cfg.train_batch_size = 16;
    if (tpu_estimator_create(dev, &cfg, &model, NULL, 0, &est, &d))
        return 4;
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1)
        return 5;
    fclose(f);
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)128 << 20);
    if (setrlimit(RLIMIT_AS, &rl))
        return 6;
    struct tpu_dataset ds;
    toy_dataset(&ds, 64, 1);
    struct tpu_dataset_input in;
    tpu_dataset_input_init(&in, &ds, 3);
    int rc = tpu_estimator_train(est, &in.input, 1, 0, &d);
    fprintf(stderr, "child: %d %s\n", rc, d.msg);
    if (rc != TPU_ENOMEM || !strstr(d.msg, "the training program 'mlp_train' needs about") ||
        !strstr(d.msg, "(2 cores x ") ||
        !strstr(d.msg, "can be allocated (RLIMIT_AS less the address space in use)"))
        return 7;
    return 0;
}

static void test_host_memory_is_checked_before_allocating(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(memory_child());
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- issue #12: split params (model parallelism's layout on the host and the device) ------ */

/* A model of three params whose step only scales them, so the values show where each part
 * went: "a" full [5][4] split by rows over the replica's cores, "b" full [2][3] split by
 * columns, "c" [1][1] whole (its value is the loss). Its input is the MLP's (x, labels). */
struct split_model {
    uint32_t builds;      /* build calls */
    uint32_t last_cores;  /* the cores per replica of the last build */
};

static int split_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *sh,
                       struct tpu_model_program *out, struct tpu_diag *d)
{
    struct split_model *m = ctx;
    (void)mode; /* the tests only train it */
    const uint32_t P = sh->cores_per_replica, ar = (5 + P - 1) / P, bc = (3 + P - 1) / P;
    char text[1024];
    snprintf(text, sizeof text,
             "program split\nvar iterations\nvar step\n"
             "param a: f32[%u, 4]\nparam b: f32[2, %u]\nparam c: f32[1, 1]\n"
             "temp x: f32[%u, %u]\ntemp labels: int32[%u, 1]\ntemp loss: f32[1, 1]\n"
             "loop iterations {\n x = infeed\n labels = infeed\n var_add step 1\n"
             " a = scale a alpha=2\n b = scale b alpha=3\n loss = scale c alpha=1\n"
             " outfeed loss\n}\n",
             ar, bc, sh->batch_per_replica, FEATURES, sh->batch_per_replica);
    memset(out, 0, sizeof *out);
    int rc = tpu_program_parse(text, "split", &out->prog, d);
    if (rc)
        return rc;
    const char *const in[] = {"x", "labels"}, *const params[] = {"a", "b", "c"};
    for (int k = 0; k < 2; k++)
        tpu_program_find_buffer(out->prog, in[k], &out->infeed[out->n_infeed++]);
    tpu_program_find_buffer(out->prog, "loss", &out->outfeed[out->n_outfeed++]);
    for (int k = 0; k < 3; k++)
        tpu_program_find_buffer(out->prog, params[k], &out->params[out->n_params++]);
    tpu_program_find_var(out->prog, "iterations", &out->var_iterations);
    tpu_program_find_var(out->prog, "step", &out->var_step);
    if (P > 1) {
        out->param_split[0] = TPU_SPLIT_ROWS;
        out->param_full[0] = 5;
        out->param_split[1] = TPU_SPLIT_COLS;
        out->param_full[1] = 3;
    }
    m->builds++;
    m->last_cores = P;
    return 0;
}

/* a[r][c] = 10 r + c + 1, b[r][c] = 100 + 10 r + c, c = 0.5: each value tells its place. */
static void split_init(void *ctx, const char *name, uint32_t rows, uint32_t cols, float *data,
                       uint64_t seed)
{
    (void)ctx;
    (void)seed;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++)
            data[r * cols + c] = name[0] == 'a'   ? (float)(10 * r + c + 1)
                                 : name[0] == 'b' ? (float)(100 + 10 * r + c)
                                                  : 0.5f;
}

static void test_split_params_slice_and_gather(void **state)
{
    (void)state;
    char *dir = temp_dir();
    struct env *e = env_new();
    snprintf(e->cfg.model_dir, sizeof e->cfg.model_dir, "%s", dir);
    e->cfg.num_cores_per_replica = 2;
    e->cfg.iterations_per_loop = 2;
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.cores_per_replica = 2;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    struct split_model sm = {0};
    struct tpu_model model = {.ctx = &sm, .build = split_build, .init_param = split_init};
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &model, NULL, 0, &e->est, &d), 0);
    train_ok(e, 2, 0);
    assert_int_equal(sm.last_cores, 2);
    /* the host holds the full params, each value scaled by 2 (a) or 3 (b) per step */
    float a[5 * 4], b[2 * 3], c;
    assert_int_equal(tpu_estimator_read_param(e->est, "a", a, sizeof a, &d), 0);
    assert_int_equal(tpu_estimator_read_param(e->est, "b", b, sizeof b, &d), 0);
    assert_int_equal(tpu_estimator_read_param(e->est, "c", &c, sizeof c, &d), 0);
    for (uint32_t r = 0; r < 5; r++)
        for (uint32_t k = 0; k < 4; k++)
            assert_float_equal(a[r * 4 + k], 4.0f * (float)(10 * r + k + 1), 0);
    for (uint32_t r = 0; r < 2; r++)
        for (uint32_t k = 0; k < 3; k++)
            assert_float_equal(b[r * 3 + k], 9.0f * (float)(100 + 10 * r + k), 0);
    assert_float_equal(c, 0.5f, 0);
    /* the device: logical core 1 holds rows 3..4 of a and a zero row past the end, and
     * column 2 of b and a zero column */
    uint32_t ida = 0, idb = 0;
    float a1[3 * 4], b1[2 * 2];
    struct tpu_program *p = NULL;
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    assert_int_equal(split_build(&sm, TPU_MODE_TRAIN,
                                 &(struct tpu_build_shape){.batch_per_replica = 16,
                                                           .global_batch = 16,
                                                           .n_replicas = 1,
                                                           .cores_per_replica = 2},
                                 mp, &d), 0);
    p = mp->prog;
    assert_int_equal(tpu_program_find_buffer(p, "a", &ida), 0);
    assert_int_equal(tpu_program_find_buffer(p, "b", &idb), 0);
    tpu_program_destroy(&mp->prog);
    free(mp);
    assert_int_equal(tpu_device_read(e->dev, 1, ida, a1, sizeof a1, &d), 0);
    assert_int_equal(tpu_device_read(e->dev, 1, idb, b1, sizeof b1, &d), 0);
    for (uint32_t r = 0; r < 3; r++)
        for (uint32_t k = 0; k < 4; k++)
            assert_float_equal(a1[r * 4 + k], r + 3 < 5 ? 4.0f * (float)(10 * (r + 3) + k + 1)
                                                         : 0.0f, 0);
    for (uint32_t r = 0; r < 2; r++) {
        assert_float_equal(b1[r * 2], 9.0f * (float)(100 + 10 * r + 2), 0);
        assert_float_equal(b1[r * 2 + 1], 0.0f, 0);
    }
    /* the checkpoint of the last step holds the full params: a one-core run resumes */
    uint64_t step = 0;
    char path[1024];
    assert_int_equal(tpu_checkpoint_latest(dir, &step, path, sizeof path, &d), 0);
    assert_int_equal(step, 2);
    struct tpu_checkpoint_info info;
    assert_int_equal(tpu_checkpoint_inspect(path, &info, &d), 0);
    for (size_t i = 0; i < info.n_tensors; i++) {
        if (!strcmp(info.tensors[i].name, "a")) {
            assert_int_equal(info.tensors[i].rows, 5);
            assert_int_equal(info.tensors[i].cols, 4);
        }
        if (!strcmp(info.tensors[i].name, "b")) {
            assert_int_equal(info.tensors[i].rows, 2);
            assert_int_equal(info.tensors[i].cols, 3);
        }
    }
    tpu_checkpoint_info_free(&info);
    env_close(e);
    tpu_dataset_input_init(&e->in, &e->ds, 3);
    e->cfg.num_cores_per_replica = 1;
    s.cores_per_replica = 1;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &model, NULL, 0, &e->est, &d), 0);
    train_ok(e, 1, 0);
    assert_int_equal(sm.last_cores, 1);
    assert_int_equal(tpu_estimator_read_param(e->est, "a", a, sizeof a, &d), 0);
    for (uint32_t r = 0; r < 5; r++)
        for (uint32_t k = 0; k < 4; k++)
            assert_float_equal(a[r * 4 + k], 8.0f * (float)(10 * r + k + 1), 0);
    env_free(e);
    remove_dir(dir);
    free(dir);
}

/* tpu_estimator_read_param_replica reads a replica's own copy from its cores (gathered when
 * split): two replicas of two cores on two tiny chips; replica 1's first core is changed
 * behind the estimator's back, and only replica 1's read shows it. */
static void test_read_param_of_each_replica(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.num_cores_per_replica = 2;
    e->cfg.iterations_per_loop = 1;
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_chips = 2;
    s.cores_per_replica = 2;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    struct split_model sm = {0};
    struct tpu_model model = {.ctx = &sm, .build = split_build, .init_param = split_init};
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &model, NULL, 0, &e->est, &d), 0);
    train_ok(e, 1, 0);
    float a0[5 * 4], a1[5 * 4], c0 = 0, c1 = 0;
    /* every replica holds the same values after a step */
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "a", 0, a0, sizeof a0, &d), 0);
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "a", 1, a1, sizeof a1, &d), 0);
    assert_memory_equal(a0, a1, sizeof a0);
    /* replica 1 is cores 2 and 3: change its logical core 0's part of a (rows 0..2) and c */
    uint32_t ida = 0, idc = 0;
    struct tpu_model_program *mp = calloc(1, sizeof *mp);
    assert_non_null(mp);
    assert_int_equal(split_build(&sm, TPU_MODE_TRAIN,
                                 &(struct tpu_build_shape){.batch_per_replica = 8,
                                                           .global_batch = 16,
                                                           .n_replicas = 2,
                                                           .cores_per_replica = 2},
                                 mp, &d), 0);
    assert_int_equal(tpu_program_find_buffer(mp->prog, "a", &ida), 0);
    assert_int_equal(tpu_program_find_buffer(mp->prog, "c", &idc), 0);
    tpu_program_destroy(&mp->prog);
    free(mp);
    float part[3 * 4];
    assert_int_equal(tpu_device_read(e->dev, 2, ida, part, sizeof part, &d), 0);
    part[1 * 4 + 2] += 1000.0f;
    assert_int_equal(tpu_device_write(e->dev, 2, ida, part, sizeof part, &d), 0);
    const float seven = 7.0f;
    assert_int_equal(tpu_device_write(e->dev, 2, idc, &seven, sizeof seven, &d), 0);
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "a", 1, a1, sizeof a1, &d), 0);
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "a", 0, a0, sizeof a0, &d), 0);
    for (uint32_t i = 0; i < 5 * 4; i++)
        assert_float_equal(a1[i], i == 1 * 4 + 2 ? a0[i] + 1000.0f : a0[i], 0);
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "c", 1, &c1, sizeof c1, &d), 0);
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "c", 0, &c0, sizeof c0, &d), 0);
    assert_float_equal(c1, 7.0f, 0);
    assert_float_equal(c0, 0.5f, 0);
    /* replica 0 is read_param's */
    float r0[5 * 4];
    assert_int_equal(tpu_estimator_read_param(e->est, "a", r0, sizeof r0, &d), 0);
    assert_memory_equal(r0, a0, sizeof r0);
    /* a replica the device does not have */
    assert_int_equal(tpu_estimator_read_param_replica(e->est, "a", 2, a1, sizeof a1, &d),
                     TPU_EINVAL);
    assert_non_null(strstr(d.msg, "param 'a' of replica 2: the device has 2 replicas"));
    env_free(e);
}

/* A model whose split does not match its buffer is refused, naming the param. */
static int bad_split_build(void *ctx, enum tpu_mode mode, const struct tpu_build_shape *sh,
                           struct tpu_model_program *out, struct tpu_diag *d)
{
    int rc = split_build(ctx, mode, sh, out, d);
    if (!rc)
        out->param_full[0] = 7; /* the buffer has ceil(5 / 2) = 3 rows, not ceil(7 / 2) */
    return rc;
}

static void test_split_params_mismatch_is_refused(void **state)
{
    (void)state;
    struct env *e = env_new();
    e->cfg.num_cores_per_replica = 2;
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.cores_per_replica = 2;
    assert_int_equal(tpu_device_open(&s, &e->dev, NULL), 0);
    struct split_model sm = {0};
    struct tpu_model model = {.ctx = &sm, .build = bad_split_build, .init_param = split_init};
    struct tpu_diag d = {0};
    assert_int_equal(tpu_estimator_create(e->dev, &e->cfg, &model, NULL, 0, &e->est, &d), 0);
    assert_int_equal(tpu_estimator_train(e->est, &e->in.input, 1, 0, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "splits param 'a' (split 1) with a full size of 7 over 2 "
                                  "cores per replica, but its buffer is [3, 4]"));
    assert_non_null(strstr(d.msg, "ceil(full / cores per replica) = 4"));
    env_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loop_boundaries),
        cmocka_unit_test(test_log_cadence),
        cmocka_unit_test(test_auto_loop_size_model),
        cmocka_unit_test(test_auto_loop_size_keras),
        cmocka_unit_test(test_auto_loop_size_errors),
        cmocka_unit_test(test_host_calls_follow_the_global_step),
        cmocka_unit_test(test_time_based_loop_size),
        cmocka_unit_test(test_checkpoint_cadence),
        cmocka_unit_test(test_host_phases_on_the_timeline),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_corrupt_checkpoint_is_refused),
        cmocka_unit_test(test_eval_and_predict_count_every_example_once),
        cmocka_unit_test(test_finite_input_ends_cleanly),
        cmocka_unit_test(test_errors_stop_the_run),
        cmocka_unit_test(test_initial_infeed_sleep),
        cmocka_unit_test(test_input_modes),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_timing_only_training_runs),
        cmocka_unit_test(test_model_parallel_eval_and_predict_finish),
        cmocka_unit_test(test_deadlock_ends_the_run),
        cmocka_unit_test(test_batch_checked_when_its_mode_runs),
        cmocka_unit_test(test_training_at_max_steps_says_so),
        cmocka_unit_test(test_stop_request),
        cmocka_unit_test(test_stop_during_initial_infeed_sleep),
        cmocka_unit_test(test_iterations_per_loop_grammar),
        cmocka_unit_test(test_host_memory_is_checked_before_allocating),
        cmocka_unit_test(test_split_params_slice_and_gather),
        cmocka_unit_test(test_read_param_of_each_replica),
        cmocka_unit_test(test_split_params_mismatch_is_refused),
    };
    return cmocka_run_group_tests_name("runtime", tests, NULL, NULL);
}
