/* The device backend seam (device.h, struct tpu_device_backend): a second backend plugs in
 * without touching the host runtime. The backend here wraps the native one: it forwards
 * every call and counts it. A real training run of the MLP through the estimator on the
 * wrapper must give the native backend's results bit for bit (losses, params, per-core
 * counters, the timeline), and the runtime's calls must be seen arriving through the seam.
 * Also: a backend table that lacks an entry is refused at open with a message naming it;
 * the device API's checks come before the backend (a bad call never reaches it); and
 * opening and closing the wrapper, also when its open fails, leaves nothing allocated
 * (the ASan build's leak checker fails the test otherwise). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"
#include "backend_outcome.h"
#include "toy_dataset.h"

/* ---- the wrapper backend -------------------------------------------------------------------- */

/* The entries of struct tpu_device_backend, in its order. */
enum entry {
    E_OPEN, E_CLOSE, E_LOAD, E_WRITE, E_READ, E_SET_VAR, E_GET_VAR, E_INFEED, E_OUTFEED,
    E_RUN, E_INFEED_CLOSE, E_CANCEL, E_RESET_CANCEL, E_WATCH, E_COUNTERS, E_OP_STATS,
    E_TRACE_HOST, E_WRITE_TRACE, E_COUNT
};

static const char *const entry_name[E_COUNT] = {
    "open", "close", "load", "write", "read", "set_var", "get_var", "infeed", "outfeed",
    "run", "infeed_close", "cancel", "reset_cancel", "watch", "counters", "op_stats",
    "trace_host", "write_trace",
};

/* The wrapper's context (the table's ctx): calls counted per entry, from any thread. */
struct counts {
    atomic_uint_fast64_t n[E_COUNT];
};

/* The wrapper's impl: the native backend's impl and the counts. */
struct wrapper {
    const struct tpu_device_backend *inner;
    void *impl;
    struct counts *counts;
};

static void count(struct wrapper *w, enum entry e)
{
    atomic_fetch_add(&w->counts->n[e], 1);
}

static int w_open(void *ctx, const struct tpu_device_settings *s, void **impl,
                  struct tpu_diag *d)
{
    struct counts *counts = ctx;
    atomic_fetch_add(&counts->n[E_OPEN], 1);
    struct wrapper *w = calloc(1, sizeof *w);
    if (!w)
        return TPU_ENOMEM;
    w->inner = tpu_device_backend_native();
    w->counts = counts;
    int rc = w->inner->open(w->inner->ctx, s, &w->impl, d);
    if (rc) {
        free(w);
        return rc;
    }
    *impl = w;
    return 0;
}

static void w_close(void *impl)
{
    struct wrapper *w = impl;
    count(w, E_CLOSE);
    w->inner->close(w->impl);
    free(w);
}

static int w_load(void *impl, const struct tpu_program *prog, struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_LOAD);
    return w->inner->load(w->impl, prog, d);
}

static int w_write(void *impl, uint32_t core, uint32_t buf, const void *data, size_t bytes,
                   struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_WRITE);
    return w->inner->write(w->impl, core, buf, data, bytes, d);
}

static int w_read(void *impl, uint32_t core, uint32_t buf, void *data, size_t bytes,
                  struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_READ);
    return w->inner->read(w->impl, core, buf, data, bytes, d);
}

static void w_set_var(void *impl, uint32_t var, int64_t value)
{
    struct wrapper *w = impl;
    count(w, E_SET_VAR);
    w->inner->set_var(w->impl, var, value);
}

static int64_t w_get_var(void *impl, uint32_t core, uint32_t var)
{
    struct wrapper *w = impl;
    count(w, E_GET_VAR);
    return w->inner->get_var(w->impl, core, var);
}

static int w_infeed(void *impl, uint32_t core, const void *data, size_t bytes,
                    uint64_t host_cycle, struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_INFEED);
    return w->inner->infeed(w->impl, core, data, bytes, host_cycle, d);
}

static int w_outfeed(void *impl, uint32_t core, void *data, size_t bytes, uint64_t host_cycle,
                     uint64_t *ready_cycle, struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_OUTFEED);
    return w->inner->outfeed(w->impl, core, data, bytes, host_cycle, ready_cycle, d);
}

static int w_run(void *impl, uint64_t start_cycle, uint64_t *end_cycle, struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_RUN);
    return w->inner->run(w->impl, start_cycle, end_cycle, d);
}

static void w_infeed_close(void *impl)
{
    struct wrapper *w = impl;
    count(w, E_INFEED_CLOSE);
    w->inner->infeed_close(w->impl);
}

static void w_cancel(void *impl)
{
    struct wrapper *w = impl;
    count(w, E_CANCEL);
    w->inner->cancel(w->impl);
}

static void w_reset_cancel(void *impl)
{
    struct wrapper *w = impl;
    count(w, E_RESET_CANCEL);
    w->inner->reset_cancel(w->impl);
}

static void w_watch(void *impl, struct tpu_device_watch *wt)
{
    struct wrapper *w = impl;
    count(w, E_WATCH);
    w->inner->watch(w->impl, wt);
}

static void w_counters(void *impl, uint32_t core, struct tpu_core_counters *out)
{
    struct wrapper *w = impl;
    count(w, E_COUNTERS);
    w->inner->counters(w->impl, core, out);
}

static void w_op_stats(void *impl, uint32_t core, struct tpu_op_stats *out, size_t n_ops)
{
    struct wrapper *w = impl;
    count(w, E_OP_STATS);
    w->inner->op_stats(w->impl, core, out, n_ops);
}

static int w_trace_host(void *impl, const char *name, uint64_t start_cycle, uint64_t end_cycle)
{
    struct wrapper *w = impl;
    count(w, E_TRACE_HOST);
    return w->inner->trace_host(w->impl, name, start_cycle, end_cycle);
}

static int w_write_trace(void *impl, const char *path, struct tpu_diag *d)
{
    struct wrapper *w = impl;
    count(w, E_WRITE_TRACE);
    return w->inner->write_trace(w->impl, path, d);
}

static struct tpu_device_backend wrapper_backend(struct counts *counts)
{
    memset(counts, 0, sizeof *counts);
    for (int e = 0; e < E_COUNT; e++)
        atomic_init(&counts->n[e], 0);
    return (struct tpu_device_backend){
        .name = "counting wrapper",
        .ctx = counts,
        .open = w_open,
        .close = w_close,
        .load = w_load,
        .write = w_write,
        .read = w_read,
        .set_var = w_set_var,
        .get_var = w_get_var,
        .infeed = w_infeed,
        .outfeed = w_outfeed,
        .run = w_run,
        .infeed_close = w_infeed_close,
        .cancel = w_cancel,
        .reset_cancel = w_reset_cancel,
        .watch = w_watch,
        .counters = w_counters,
        .op_stats = w_op_stats,
        .trace_host = w_trace_host,
        .write_trace = w_write_trace,
    };
}

static uint64_t calls(struct counts *c, enum entry e)
{
    return atomic_load(&c->n[e]);
}

/* Sets one entry of a table to NULL. */
static void clear_entry(struct tpu_device_backend *b, enum entry e)
{
    switch (e) {
    case E_OPEN: b->open = NULL; break;
    case E_CLOSE: b->close = NULL; break;
    case E_LOAD: b->load = NULL; break;
    case E_WRITE: b->write = NULL; break;
    case E_READ: b->read = NULL; break;
    case E_SET_VAR: b->set_var = NULL; break;
    case E_GET_VAR: b->get_var = NULL; break;
    case E_INFEED: b->infeed = NULL; break;
    case E_OUTFEED: b->outfeed = NULL; break;
    case E_RUN: b->run = NULL; break;
    case E_INFEED_CLOSE: b->infeed_close = NULL; break;
    case E_CANCEL: b->cancel = NULL; break;
    case E_RESET_CANCEL: b->reset_cancel = NULL; break;
    case E_WATCH: b->watch = NULL; break;
    case E_COUNTERS: b->counters = NULL; break;
    case E_OP_STATS: b->op_stats = NULL; break;
    case E_TRACE_HOST: b->trace_host = NULL; break;
    case E_WRITE_TRACE: b->write_trace = NULL; break;
    default: fail_msg("entry %d", (int)e);
    }
}

/* ---- a training run ------------------------------------------------------------------------ */



static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts the lines of a trace (a string) in place, leaving out the queue-depth samples. */
static void sort_events(char *text)
{
    size_t n = 0, len = strlen(text);
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    char **lines = calloc(n + 1, sizeof *lines);
    char *copy = malloc(len + 1);
    assert_non_null(lines);
    assert_non_null(copy);
    memcpy(copy, text, len + 1);
    size_t k = 0;
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (!strstr(l, "\"ph\": \"C\""))
            lines[k++] = l;
    qsort(lines, k, sizeof *lines, cmp_str);
    char *out = text;
    for (size_t i = 0; i < k; i++)
        out += sprintf(out, "%s\n", lines[i]);
    free(lines);
    free(copy);
}

/* The file's bytes as a string (the caller frees it). */
static char *slurp(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *bytes = (size_t)n;
    return buf;
}

/* Trains on the tiny chip (2 cores, 2 worker threads, tracing) on `backend` (NULL: the
 * default, native), as backend_outcome.h's outcome_train does, and keeps its timeline. */
static void train_on(const struct tpu_device_backend *backend, struct outcome *o)
{
    memset(o, 0, sizeof *o);
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 2;
    s.trace = true;
    s.backend = backend;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    if (tpu_device_open(&s, &dev, &d) != 0)
        fail_msg("open: %s", d.msg);
    outcome_train(dev, backend ? "the wrapper" : "native", o);
    assert_int_equal(tpu_device_trace_host(dev, "checked by the test", 100, 200), 0);
    char path[] = "/tmp/tpusim-backend-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    if (tpu_device_write_trace(dev, path, &d) != 0)
        fail_msg("write_trace: %s", d.msg);
    o->trace = slurp(path, &o->trace_bytes);
    unlink(path);
    tpu_device_close(&dev);
    assert_null(dev);
}

static void test_training_through_a_wrapper_is_bit_identical(void **state)
{
    (void)state;
    struct outcome *native = calloc(1, sizeof *native), *wrapped = calloc(1, sizeof *wrapped);
    assert_non_null(native);
    assert_non_null(wrapped);
    assert_string_equal(tpu_device_backend_native()->name, "native");
    train_on(NULL, native);

    struct counts counts;
    struct tpu_device_backend wrapper = wrapper_backend(&counts);
    train_on(&wrapper, wrapped);

    /* the run learned something, and the wrapper changed none of it */
    assert_int_equal(native->n_host_calls, STEPS);
    assert_true(native->step_loss[STEPS - 1] < native->step_loss[0]);
    assert_int_equal(wrapped->n_host_calls, native->n_host_calls);
    assert_memory_equal(wrapped->host_call_steps, native->host_call_steps,
                        sizeof native->host_call_steps);
    assert_same_floats("step loss", "wrapper", native->step_loss, wrapped->step_loss, STEPS);
    assert_int_equal(native->n_loops, 3); /* 10 steps in loops of 4: 4, 8, 10 */
    assert_int_equal(wrapped->n_loops, native->n_loops);
    assert_memory_equal(wrapped->loop_step, native->loop_step, sizeof native->loop_step);
    assert_same_floats("loop loss", "wrapper", native->loop_loss, wrapped->loop_loss, 3);
    assert_memory_equal(wrapped->loop_device_s, native->loop_device_s,
                        sizeof native->loop_device_s);
    assert_same_floats("w0", "wrapper", native->w0, wrapped->w0, FEATURES * HIDDEN);
    assert_same_floats("b0", "wrapper", native->b0, wrapped->b0, HIDDEN);
    assert_same_floats("w1", "wrapper", native->w1, wrapped->w1, HIDDEN * CLASSES);
    assert_same_floats("b1", "wrapper", native->b1, wrapped->b1, CLASSES);
    assert_int_equal(wrapped->eval.examples, native->eval.examples);
    assert_memory_equal(&wrapped->eval.loss, &native->eval.loss, sizeof native->eval.loss);
    assert_memory_equal(&wrapped->eval.accuracy, &native->eval.accuracy,
                        sizeof native->eval.accuracy);
    assert_memory_equal(&wrapped->eval.device_seconds, &native->eval.device_seconds,
                        sizeof native->eval.device_seconds);
    assert_int_equal(native->n_cores, 2);
    assert_int_equal(wrapped->n_cores, native->n_cores);
    for (uint32_t c = 0; c < native->n_cores; c++) {
        assert_true(native->ctr[c].cycles > 0);
        assert_memory_equal(&wrapped->ctr[c], &native->ctr[c], sizeof native->ctr[c]);
    }
    /* the timeline holds the same events. Two native runs differ in two ways that the
     * threads decide: a core's log interleaves the host's transfers and the core's own
     * events in the order the threads came, and a queue-depth sample shows what the queue
     * held in real time when it was taken. So: the unit events, sorted, are equal */
    assert_int_equal(wrapped->trace_bytes, native->trace_bytes);
    sort_events(native->trace);
    sort_events(wrapped->trace);
    assert_string_equal(wrapped->trace, native->trace);

    /* the runtime's calls came through the seam: the device was opened and closed once; two
     * programs (train, evaluate) loaded; one run per loop: 3 training loops (4, 4, 2 steps),
     * and 4 evaluation loops (200 examples in batches of 16: 13 steps, the last padded);
     * every step fed x and labels to each of the 2 cores and drained each core's outputs
     * (train: the loss; evaluate: the loss sum and the counts) */
    for (int e = 0; e < E_COUNT; e++)
        print_message("  %-13s %llu\n", entry_name[e], (unsigned long long)calls(&counts, e));
    assert_int_equal(calls(&counts, E_OPEN), 1);
    assert_int_equal(calls(&counts, E_CLOSE), 1);
    assert_int_equal(calls(&counts, E_LOAD), 2);
    assert_true(calls(&counts, E_WRITE) > 0);     /* the initial params */
    assert_true(calls(&counts, E_READ) >= 4);     /* w0, b0, w1, b1 at least */
    assert_true(calls(&counts, E_SET_VAR) > 0);   /* iterations and step */
    assert_int_equal(calls(&counts, E_RUN), 3 + 4);
    assert_int_equal(calls(&counts, E_INFEED), 2 * 2 * (STEPS + 13));
    assert_true(calls(&counts, E_OUTFEED) >= 2 * STEPS + 2 * 2 * 13);
    assert_true(calls(&counts, E_RESET_CANCEL) > 0);
    assert_true(calls(&counts, E_COUNTERS) >= 2);
    /* one pass each for train and evaluate: its infeed closed and its run canceled at the
     * end */
    assert_int_equal(calls(&counts, E_INFEED_CLOSE), 2);
    assert_int_equal(calls(&counts, E_CANCEL), 2);
    /* the host phases: a launch and the hooks per loop (7 loops), an input batch per
     * input_fn call (PER_HOST_V2, as TPUEstimator, in training and evaluation alike: one per
     * replica and step, 2 x 10 and 2 x 13), and the test's own event */
    assert_int_equal(calls(&counts, E_TRACE_HOST), 2 * 7 + 2 * STEPS + 2 * 13 + 1);
    assert_int_equal(calls(&counts, E_WRITE_TRACE), 1);
    assert_non_null(strstr(wrapped->trace, "\"name\": \"checked by the test\""));

    free(native->trace);
    free(wrapped->trace);
    free(native);
    free(wrapped);
}

/* ---- refusals and checks ------------------------------------------------------------------- */

static struct tpu_device_settings tiny_settings(void)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 1;
    return s;
}

static void test_a_missing_entry_is_refused_at_open(void **state)
{
    (void)state;
    struct tpu_device_settings s = tiny_settings();
    for (int e = 0; e < E_COUNT; e++) {
        struct tpu_device_backend b = *tpu_device_backend_native();
        b.name = "half-done";
        clear_entry(&b, (enum entry)e);
        s.backend = &b;
        struct tpu_device *dev = NULL;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
        assert_null(dev);
        char want[128];
        snprintf(want, sizeof want, "device backend 'half-done' has no '%s' function; every "
                 "entry of struct tpu_device_backend is required", entry_name[e]);
        if (!strstr(d.msg, want))
            fail_msg("entry %s: got \"%s\"", entry_name[e], d.msg);
        assert_non_null(strstr(d.msg, "TPU_EUNSUPPORTED"));
    }
    struct tpu_device_backend b = *tpu_device_backend_native();
    b.name = NULL;
    s.backend = &b;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
    assert_null(dev);
    assert_non_null(strstr(d.msg, "settings.backend has no name"));
}

/* A call the device API refuses never reaches the backend, and the message is the API's,
 * the same whatever the backend. */
static void test_checks_come_before_the_backend(void **state)
{
    (void)state;
    struct counts counts;
    struct tpu_device_backend wrapper = wrapper_backend(&counts);
    struct tpu_device_settings s = tiny_settings();
    s.backend = &wrapper;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    /* an invalid shape is refused before the backend is asked to open */
    s.n_chips = 0;
    assert_int_equal(tpu_device_open(&s, &dev, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "n_chips 0 is out of range"));
    assert_int_equal(calls(&counts, E_OPEN), 0);
    s.n_chips = 1;
    if (tpu_device_open(&s, &dev, &d) != 0)
        fail_msg("open: %s", d.msg);
    assert_int_equal(calls(&counts, E_OPEN), 1);

    float x[4] = {0};
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tpu_device_run: no program is loaded"));
    assert_int_equal(tpu_device_write(dev, 0, 0, x, sizeof x, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tpu_device_write: no program is loaded"));
    assert_int_equal(tpu_device_infeed(dev, 2, x, sizeof x, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "infeed to core 2, but the device has 2 cores (0 to 1)"));
    assert_int_equal(tpu_device_infeed(dev, 0, NULL, sizeof x, 0, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "infeed data is NULL"));
    assert_int_equal(tpu_device_outfeed(dev, 5, x, sizeof x, 0, NULL, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "outfeed from core 5, but the device has 2 cores"));
    struct tpu_core_counters k;
    assert_int_equal(tpu_device_counters(dev, 2, &k), TPU_EINVAL);
    assert_int_equal(tpu_device_set_var(dev, 0, 1), TPU_EINVAL);
    assert_int_equal(tpu_device_get_var(dev, 0, 0), 0);
    assert_int_equal(tpu_device_write_trace(dev, "/nonexistent/t.json", &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "opened without tracing"));
    assert_int_equal(tpu_device_trace_host(dev, "hooks", 0, 10), 0);

    struct tpu_program *p = NULL;
    if (tpu_program_parse("program t\nparam w: f32[2, 2]\nvar n\n", "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    if (tpu_device_load(dev, p, &d) != 0)
        fail_msg("load: %s", d.msg);
    assert_int_equal(tpu_device_write(dev, 0, 0, x, 4, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "buffer 'w' is f32[2, 2], 16 bytes, not 4"));
    assert_int_equal(tpu_device_write(dev, 0, 0, NULL, sizeof x, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tpu_device_write: no data given (NULL)"));
    assert_int_equal(tpu_device_read(dev, 0, 0, NULL, sizeof x, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tpu_device_read: no data given (NULL)"));
    assert_int_equal(tpu_device_read(dev, 0, 1, x, sizeof x, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tpu_device_read: buffer id 1 does not exist"));
    assert_int_equal(tpu_device_read(dev, 3, 0, x, sizeof x, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "core 3 does not exist (the device has 2)"));
    assert_int_equal(tpu_device_set_var(dev, 1, 1), TPU_EINVAL);
    assert_int_equal(tpu_device_get_var(dev, 2, 0), 0);

    /* none of those reached the wrapper; the good calls do */
    for (int e = E_WRITE; e < E_COUNT; e++)
        if (calls(&counts, e) != 0)
            fail_msg("%s reached the backend %llu times", entry_name[e],
                     (unsigned long long)calls(&counts, e));
    assert_int_equal(calls(&counts, E_LOAD), 1);
    float w[4] = {1, 2, 3, 4}, back[4] = {0};
    assert_int_equal(tpu_device_write(dev, 1, 0, w, sizeof w, &d), 0);
    assert_int_equal(tpu_device_read(dev, 1, 0, back, sizeof back, &d), 0);
    assert_memory_equal(back, w, sizeof w);
    assert_int_equal(tpu_device_set_var(dev, 0, 42), 0);
    assert_int_equal(tpu_device_get_var(dev, 1, 0), 42);
    assert_int_equal(calls(&counts, E_WRITE), 1);
    assert_int_equal(calls(&counts, E_READ), 1);
    assert_int_equal(calls(&counts, E_SET_VAR), 1);
    assert_int_equal(calls(&counts, E_GET_VAR), 1);
    tpu_program_destroy(&p);
    tpu_device_close(&dev);
    assert_null(dev);
    assert_int_equal(calls(&counts, E_CLOSE), 1);
    tpu_device_close(&dev); /* NULL: nothing */
    tpu_device_close(NULL);
}

/* A provider the native chip refuses: its open fails inside the wrapper's. */
static int never_run(void *ctx, uint32_t unit, const struct tpu_mxu_seq *seq, uint64_t *cycles,
                     struct tpu_diag *d)
{
    (void)ctx;
    (void)unit;
    (void)seq;
    (void)cycles;
    (void)d;
    return TPU_EUNSUPPORTED;
}

/* Open and close with the wrapper, after a load and a run, and an open that fails inside:
 * nothing stays allocated (the ASan build's leak checker sees to it). */
static void test_open_and_close_leave_nothing(void **state)
{
    (void)state;
    struct counts counts;
    struct tpu_device_backend wrapper = wrapper_backend(&counts);
    struct tpu_device_settings s = tiny_settings();
    s.backend = &wrapper;
    struct tpu_diag d = {0};
    struct tpu_program *p = NULL;
    if (tpu_program_parse("program t\n"
                          "param x: f32[4, 4]\n"
                          "temp y: f32[4, 4]\n"
                          "var n\n"
                          "loop n {\n  y = relu x\n}\n", "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    for (int round = 0; round < 3; round++) {
        struct tpu_device *dev = NULL;
        if (tpu_device_open(&s, &dev, &d) != 0)
            fail_msg("open: %s", d.msg);
        if (round > 0) {
            if (tpu_device_load(dev, p, &d) != 0 || tpu_device_load(dev, p, &d) != 0)
                fail_msg("load: %s", d.msg);
            assert_int_equal(tpu_device_set_var(dev, 0, 2), 0);
            uint64_t end = 0;
            if (tpu_device_run(dev, 0, &end, &d) != 0)
                fail_msg("run: %s", d.msg);
            assert_true(end > 0);
        }
        tpu_device_close(&dev);
        assert_null(dev);
    }
    assert_int_equal(calls(&counts, E_OPEN), 3);
    assert_int_equal(calls(&counts, E_CLOSE), 3);
    assert_int_equal(calls(&counts, E_LOAD), 4);
    assert_int_equal(calls(&counts, E_RUN), 2);

    /* the native chip refuses a provider of another array size: the wrapper's open fails,
     * the device is not made, the wrapper's state is freed */
    struct tpu_mxu_provider bad = {.name = "odd", .rows = s.chip.mxu_rows + 1,
                                   .cols = s.chip.mxu_cols, .n_units = 64, .run = never_run};
    s.mxu = &bad;
    struct tpu_device *dev = NULL;
    assert_true(tpu_device_open(&s, &dev, &d) < 0);
    assert_null(dev);
    assert_non_null(strstr(d.msg, "the odd matrix-unit provider simulates a 9x8 array"));
    assert_int_equal(calls(&counts, E_OPEN), 4);
    assert_int_equal(calls(&counts, E_CLOSE), 3);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_through_a_wrapper_is_bit_identical),
        cmocka_unit_test(test_a_missing_entry_is_refused_at_open),
        cmocka_unit_test(test_checks_come_before_the_backend),
        cmocka_unit_test(test_open_and_close_leave_nothing),
    };
    return cmocka_run_group_tests_name("device_backend", tests, NULL, NULL);
}
