/* The SystemC backend (include/tpusim/systemc.h): the device API's calls as TLM-2.0
 * transactions into the chip's TLM target. It must be the native chip seen through a bus:
 *  - a short training through the estimator, both ways from the same seed, gives the same
 *    losses, params (bytes), evaluation, loop times and every counter of every core;
 *  - the same script of device calls, misuse included (the device API's checks, and the
 *    failures only the chip sees: a label out of range, an infeed or an outfeed of the wrong
 *    size, a canceled run, infeed closed), gives the same codes and the same
 *    sentences on both;
 *  - the threading promises of device.h hold: feed calls from other threads during a run,
 *    cancel from another thread wakes every blocked call (never a hang), watch sees the
 *    same blocked cores;
 *  - one device at a time (TPU_EBUSY), the refusals at open (settings.trace, op_stats, a
 *    matrix-unit provider: TPU_EUNSUPPORTED naming the backend), and open / close again and
 *    again in one process (one SystemC elaboration, the chip re-powered each time), leaving
 *    nothing allocated (the ASan build's leak checker). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/runtime.h"
#include "tpusim/systemc.h"
#include "backend_outcome.h"
#include "toy_dataset.h"

static const struct tpu_device_backend *backend_of(int systemc)
{
    return systemc ? tpu_device_backend_systemc() : tpu_device_backend_native();
}

static const char *const which[2] = {"native", "systemc"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

static struct tpu_device *open_tiny(int systemc, unsigned threads)
{
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = threads;
    s.backend = backend_of(systemc);
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    if (tpu_device_open(&s, &dev, &d) != 0)
        fail_msg("open on %s: %s", which[systemc], d.msg);
    return dev;
}

static struct tpu_program *parse(const char *text)
{
    struct tpu_program *p = NULL;
    struct tpu_diag d = {0};
    if (tpu_program_parse(text, "test", &p, &d) != 0)
        fail_msg("parse: %s", d.msg);
    return p;
}

/* ---- a short training, both ways ------------------------------------------------------------ */

/* Trains on the native or the systemc backend (2 worker threads), as backend_outcome.h's
 * outcome_train does. */
static void train_on(int systemc, struct outcome *o)
{
    memset(o, 0, sizeof *o);
    struct tpu_device *dev = open_tiny(systemc, 2);
    outcome_train(dev, which[systemc], o);
    tpu_device_close(&dev);
    assert_null(dev);
}

static void test_training_is_the_same_both_ways(void **state)
{
    (void)state;
    struct outcome *nat = calloc(1, sizeof *nat), *sc = calloc(1, sizeof *sc);
    assert_non_null(nat);
    assert_non_null(sc);
    struct tpu_systemc_stats st0, st1;
    tpu_systemc_stats(&st0);
    train_on(0, nat);
    train_on(1, sc);
    tpu_systemc_stats(&st1);

    /* the run learned something, and it went through the bus */
    assert_int_equal(nat->n_host_calls, STEPS);
    assert_true(nat->step_loss[STEPS - 1] < nat->step_loss[0]);
    assert_true(st1.transactions > st0.transactions + 2 * 2 * (STEPS + 13));
    assert_true(st1.sc_time_ps > st0.sc_time_ps);

    assert_int_equal(sc->n_host_calls, nat->n_host_calls);
    assert_memory_equal(sc->host_call_steps, nat->host_call_steps, sizeof nat->host_call_steps);
    assert_same_floats("step loss", "systemc", nat->step_loss, sc->step_loss, STEPS);
    assert_int_equal(nat->n_loops, 3); /* 10 steps in loops of 4: 4, 8, 10 */
    assert_int_equal(sc->n_loops, nat->n_loops);
    assert_memory_equal(sc->loop_step, nat->loop_step, sizeof nat->loop_step);
    assert_same_floats("loop loss", "systemc", nat->loop_loss, sc->loop_loss, 3);
    assert_memory_equal(sc->loop_device_s, nat->loop_device_s, sizeof nat->loop_device_s);
    assert_same_floats("w0", "systemc", nat->w0, sc->w0, FEATURES * HIDDEN);
    assert_same_floats("b0", "systemc", nat->b0, sc->b0, HIDDEN);
    assert_same_floats("w1", "systemc", nat->w1, sc->w1, HIDDEN * CLASSES);
    assert_same_floats("b1", "systemc", nat->b1, sc->b1, CLASSES);
    assert_int_equal(sc->eval.examples, nat->eval.examples);
    assert_memory_equal(&sc->eval.loss, &nat->eval.loss, sizeof nat->eval.loss);
    assert_memory_equal(&sc->eval.accuracy, &nat->eval.accuracy, sizeof nat->eval.accuracy);
    assert_memory_equal(&sc->eval.device_seconds, &nat->eval.device_seconds,
                        sizeof nat->eval.device_seconds);
    assert_int_equal(nat->n_cores, 2);
    assert_int_equal(sc->n_cores, nat->n_cores);
    for (uint32_t c = 0; c < nat->n_cores; c++) {
        assert_true(nat->ctr[c].cycles > 0);
        assert_true(nat->ctr[c].macs > 0);
        assert_memory_equal(&sc->ctr[c], &nat->ctr[c], sizeof nat->ctr[c]);
    }
    free(nat);
    free(sc);
}

/* ---- the same script of device calls, misuse included ------------------------------------- */

/* What the calls of a script returned, in order: code and sentence. */
struct record {
    int n;
    int code[64];
    char msg[64][TPU_DIAG_MAX];
    int64_t value[64];
};

static void note(struct record *r, int code, const struct tpu_diag *d, int64_t value)
{
    assert_true(r->n < 64);
    r->code[r->n] = code;
    snprintf(r->msg[r->n], sizeof r->msg[r->n], "%s", code && d ? d->msg : "");
    r->value[r->n++] = value;
}

struct pusher {
    struct tpu_device *dev;
    uint32_t core;
    int n;
    const void *data;
    size_t bytes;
    int rc;
    struct tpu_diag d;
};

static void *push_thread(void *arg)
{
    struct pusher *p = arg;
    for (int i = 0; i < p->n && !p->rc; i++)
        p->rc = tpu_device_infeed(p->dev, p->core, p->data, p->bytes, 100 * (uint64_t)i, &p->d);
    return NULL;
}

struct canceler {
    struct tpu_device *dev;
    unsigned after_us;
};

static void *cancel_thread(void *arg)
{
    struct canceler *c = arg;
    sleep_us(c->after_us);
    tpu_device_cancel(c->dev);
    return NULL;
}

static void script(int systemc, struct record *r)
{
    memset(r, 0, sizeof *r);
    struct tpu_device *dev = open_tiny(systemc, 2);
    struct tpu_diag d = {0};
    float x[16] = {0};
    int64_t none = 0;

    /* the device API's checks */
    note(r, tpu_device_run(dev, 0, NULL, &d), &d, none);
    note(r, tpu_device_write(dev, 0, 0, x, sizeof x, &d), &d, none);
    note(r, tpu_device_infeed(dev, 2, x, sizeof x, 0, &d), &d, none);
    note(r, tpu_device_outfeed(dev, 5, x, sizeof x, 0, NULL, &d), &d, none);
    note(r, tpu_device_write_trace(dev, "/nonexistent/t.json", &d), &d, none);
    struct tpu_program *big = parse("program t\nparam w: f32[2560, 4096]\n");
    note(r, tpu_device_load(dev, big, &d), &d, none);
    tpu_program_destroy(&big);

    /* a program, its params, its variables */
    struct tpu_program *p = parse("program t\nparam w: f32[2, 2]\nparam b: f32[1, 3]\nvar n\n"
                                  "var m\n");
    note(r, tpu_device_load(dev, p, &d), &d, none);
    const float w[4] = {1.5f, -2, 3, 4e-3f};
    float back[4] = {0};
    note(r, tpu_device_write(dev, 1, 0, w, sizeof w, &d), &d, none);
    note(r, tpu_device_read(dev, 1, 0, back, sizeof back, &d), &d, none);
    assert_memory_equal(back, w, sizeof w);
    note(r, tpu_device_read(dev, 0, 0, back, sizeof back, &d), &d, none);
    assert_true(back[0] == 0 && back[3] == 0); /* core 0's copy is its own, zeroed */
    note(r, tpu_device_write(dev, 0, 0, x, 4, &d), &d, none);
    note(r, tpu_device_read(dev, 0, 2, x, 4, &d), &d, none);
    note(r, tpu_device_set_var(dev, 1, -1234567890123), NULL, none);
    note(r, 0, NULL, tpu_device_get_var(dev, 0, 1));
    note(r, 0, NULL, tpu_device_get_var(dev, 1, 1));
    note(r, tpu_device_set_var(dev, 2, 1), NULL, none);
    tpu_program_destroy(&p);

    /* a core fails (label 7 of 4 classes): the run returns its sentence, and a host thread
     * blocked on core 0's full infeed queue is released */
    p = parse("program t\nvar n\n"
              "temp logits: f32[2, 4]\ntemp labels: int32[2, 1]\n"
              "temp loss: f32[1, 1]\ntemp g: f32[2, 4]\n"
              "loop n {\n"
              "  logits = infeed\n  labels = infeed\n"
              "  loss, g = softmax_xent logits, labels alpha=1\n"
              "}\n");
    note(r, tpu_device_load(dev, p, &d), &d, none);
    note(r, tpu_device_set_var(dev, 0, 100), NULL, none);
    float logits[8] = {0};
    int32_t labels[2] = {1, 7};
    note(r, tpu_device_infeed(dev, 0, logits, sizeof logits, 0, &d), &d, none);
    note(r, tpu_device_infeed(dev, 0, labels, sizeof labels, 0, &d), &d, none);
    struct pusher pu = {.dev = dev, .core = 0, .n = 50, .data = logits, .bytes = sizeof logits};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, push_thread, &pu), 0);
    double t0 = now_s();
    uint64_t end = 0;
    int rc = tpu_device_run(dev, 0, &end, &d);
    note(r, rc, &d, (int64_t)end);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(now_s() - t0 < 10.0);
    note(r, pu.rc, &pu.d, none);
    tpu_program_destroy(&p);
    /* the queues keep what the stopped run left: a fresh device for the rest */
    tpu_device_close(&dev);
    dev = open_tiny(systemc, 2);

    /* an infeed of the wrong size */
    p = parse("program t\nvar n\ntemp x: f32[4, 4]\nloop n {\n  x = infeed\n}\n");
    note(r, tpu_device_load(dev, p, &d), &d, none);
    note(r, tpu_device_set_var(dev, 0, 1), NULL, none);
    /* core 0 only: with both wrong, which core's error comes first would be a race */
    note(r, tpu_device_infeed(dev, 0, x, 12, 0, &d), &d, none);
    note(r, tpu_device_infeed(dev, 1, x, sizeof x, 0, &d), &d, none);
    note(r, tpu_device_run(dev, 0, NULL, &d), &d, none);
    /* what the stopped run left queued: a fresh device for the rest */
    tpu_device_close(&dev);
    dev = open_tiny(systemc, 2);
    note(r, tpu_device_load(dev, p, &d), &d, none);

    /* nobody feeds the cores: cancel from another thread ends the run; then feed calls answer
     * at once, and a new run needs the cancel cleared */
    note(r, tpu_device_set_var(dev, 0, 3), NULL, none);
    struct canceler cn = {dev, 50000};
    assert_int_equal(pthread_create(&th, NULL, cancel_thread, &cn), 0);
    t0 = now_s();
    note(r, tpu_device_run(dev, 1000, NULL, &d), &d, none);
    assert_true(now_s() - t0 < 10.0);
    assert_int_equal(pthread_join(th, NULL), 0);
    note(r, tpu_device_infeed(dev, 0, x, sizeof x, 0, &d), &d, none);
    note(r, tpu_device_run(dev, 0, NULL, &d), &d, none);
    tpu_device_reset_cancel(dev);

    /* infeed closed: the run ends with TPU_EEND where the data stopped */
    note(r, tpu_device_set_var(dev, 0, 3), NULL, none);
    for (uint32_t c = 0; c < 2; c++)
        note(r, tpu_device_infeed(dev, c, x, sizeof x, 10, &d), &d, none);
    tpu_device_infeed_close(dev);
    end = 0;
    rc = tpu_device_run(dev, 0, &end, &d);
    note(r, rc, &d, (int64_t)end);
    struct tpu_core_counters k;
    rc = tpu_device_counters(dev, 0, &k);
    note(r, rc, NULL, (int64_t)k.iterations);
    tpu_device_reset_cancel(dev);
    tpu_program_destroy(&p);

    /* outfeed: values and ready cycles; after the run, nothing more comes */
    p = parse("program t\nvar n\nparam x: f32[1, 1]\ntemp y: f32[1, 1]\n"
              "loop n {\n  y = scale x alpha=2 beta=1\n  outfeed y\n}\n");
    note(r, tpu_device_load(dev, p, &d), &d, none);
    const float one = 1.5f;
    for (uint32_t c = 0; c < 2; c++)
        note(r, tpu_device_write(dev, c, 0, &one, 4, &d), &d, none);
    note(r, tpu_device_set_var(dev, 0, 2), NULL, none);
    end = 0;
    rc = tpu_device_run(dev, 500, &end, &d);
    note(r, rc, &d, (int64_t)end);
    double wrong[1];
    note(r, tpu_device_outfeed(dev, 1, wrong, sizeof wrong, 0, NULL, &d), &d, none);
    for (uint32_t c = 0; c < 2; c++)
        for (int i = 0; i < 2; i++) {
            float y = 0;
            uint64_t ready = 0;
            const int got = tpu_device_outfeed(dev, c, &y, 4, 5000, &ready, &d);
            note(r, got, &d, (int64_t)ready);
            assert_true(y == 4.0f);
        }
    tpu_device_cancel(dev); /* an empty queue no longer blocks */
    float y = 0;
    note(r, tpu_device_outfeed(dev, 0, &y, 4, 0, NULL, &d), &d, none);
    rc = tpu_device_counters(dev, 1, &k);
    note(r, rc, NULL, (int64_t)k.cycles);
    tpu_program_destroy(&p);
    tpu_device_close(&dev);
}

static void test_the_same_script_gives_the_same_results(void **state)
{
    (void)state;
    struct record *nat = calloc(1, sizeof *nat), *sc = calloc(1, sizeof *sc);
    assert_non_null(nat);
    assert_non_null(sc);
    script(0, nat);
    script(1, sc);
    assert_int_equal(sc->n, nat->n);
    int errors = 0;
    for (int i = 0; i < nat->n; i++) {
        if (nat->code[i] || i < 6)
            errors += nat->code[i] != 0;
        if (sc->code[i] != nat->code[i] || strcmp(sc->msg[i], nat->msg[i]) ||
            sc->value[i] != nat->value[i])
            fail_msg("call %d: native %s %lld \"%s\"; systemc %s %lld \"%s\"", i,
                     tpu_err_name(nat->code[i]), (long long)nat->value[i], nat->msg[i],
                     tpu_err_name(sc->code[i]), (long long)sc->value[i], sc->msg[i]);
    }
    /* the script's failures are the ones it was written to make */
    static const int want[] = {TPU_EINVAL, TPU_EINVAL, TPU_EINVAL, TPU_EINVAL, TPU_EINVAL,
                               TPU_ERANGE};
    for (int i = 0; i < 6; i++)
        if (nat->code[i] != want[i])
            fail_msg("call %d: %s, expected %s (%s)", i, tpu_err_name(nat->code[i]),
                     tpu_err_name(want[i]), nat->msg[i]);
    int n_code[16] = {0};
    for (int i = 0; i < nat->n; i++)
        if (nat->code[i] < 0 && nat->code[i] > -16)
            n_code[-nat->code[i]]++;
    /* a write of 4 bytes, the run of a 12-byte infeed, an outfeed of the wrong size */
    assert_int_equal(n_code[-TPU_ESHAPE], 3);
    /* the blocked pusher; the canceled run, an infeed and a run while canceled; an outfeed
     * after a cancel */
    assert_int_equal(n_code[-TPU_ECANCELED], 5);
    /* the runs' end cycles and the outfeeds' ready cycles were compared above: they moved */
    int64_t max_value = 0;
    for (int i = 0; i < nat->n; i++)
        max_value = nat->value[i] > max_value ? nat->value[i] : max_value;
    assert_true(max_value > 1000);
    assert_int_equal(n_code[-TPU_EEND], 1); /* the run after infeed_close */
    print_message("  %d calls, %d failures, the same on both backends\n", nat->n, errors);
    free(nat);
    free(sc);
}

/* ---- watch from another thread ------------------------------------------------------------- */

struct runner {
    struct tpu_device *dev;
    int rc;
    struct tpu_diag d;
};

static void *run_thread(void *arg)
{
    struct runner *r = arg;
    r->rc = tpu_device_run(r->dev, 0, NULL, &r->d);
    return NULL;
}

/* A host thread draining core 1's outfeed, which this program never fills: it blocks until
 * the cancel. */
struct drainer {
    struct tpu_device *dev;
    int rc;
    struct tpu_diag d;
};

static void *drain_thread(void *arg)
{
    struct drainer *r = arg;
    float y[16];
    r->rc = tpu_device_outfeed(r->dev, 1, y, sizeof y, 0, NULL, &r->d);
    return NULL;
}

/* Core 0 gets two of its three tensors, core 1 none: both cores end up waiting for infeed,
 * and a host thread waits on core 1's empty outfeed. The watch (from this thread, during the
 * run) sees the run blocked the same way on both backends; then a cancel from this thread
 * ends the run and wakes the blocked outfeed call. */
static void watch_blocked(int systemc, struct tpu_device_watch *out)
{
    struct tpu_device *dev = open_tiny(systemc, 2);
    struct tpu_program *p = parse("program t\nvar n\ntemp x: f32[4, 4]\ntemp y: f32[4, 4]\n"
                                  "loop n {\n  x = infeed\n  y = relu x\n}\n");
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_load(dev, p, &d), 0);
    assert_int_equal(tpu_device_set_var(dev, 0, 3), 0);
    float x[16] = {0};
    for (int i = 0; i < 2; i++)
        assert_int_equal(tpu_device_infeed(dev, 0, x, sizeof x, 0, &d), 0);
    struct runner rn = {.dev = dev};
    struct drainer dr = {.dev = dev};
    pthread_t rt, dt;
    assert_int_equal(pthread_create(&rt, NULL, run_thread, &rn), 0);
    assert_int_equal(pthread_create(&dt, NULL, drain_thread, &dr), 0);
    struct tpu_device_watch w;
    double t0 = now_s();
    do {
        memset(&w, 0, sizeof w);
        tpu_device_watch(dev, &w);
        sleep_us(1000);
    } while (!(w.cores_blocked && w.moves == 4 && w.host_calls_waiting == 1) &&
             now_s() - t0 < 10);
    *out = w;
    t0 = now_s();
    tpu_device_cancel(dev);
    assert_int_equal(pthread_join(rt, NULL), 0);
    assert_int_equal(pthread_join(dt, NULL), 0);
    assert_true(now_s() - t0 < 5.0);
    assert_int_equal(rn.rc, TPU_ECANCELED);
    assert_int_equal(dr.rc, TPU_ECANCELED);
    assert_string_equal(dr.d.msg, "outfeed from core 1: the run was canceled");
    memset(&w, 0, sizeof w);
    tpu_device_watch(dev, &w);
    assert_false(w.running);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_watch_sees_the_same_blocked_run(void **state)
{
    (void)state;
    struct tpu_device_watch nat, sc;
    watch_blocked(0, &nat);
    watch_blocked(1, &sc);
    assert_true(nat.running);
    assert_true(nat.cores_blocked);
    assert_int_equal(nat.moves, 4);
    assert_int_equal(nat.host_calls_waiting, 1); /* the outfeed call */
    assert_true(sc.running);
    assert_true(sc.cores_blocked);
    assert_int_equal(sc.moves, nat.moves);
    assert_int_equal(sc.host_calls_waiting, nat.host_calls_waiting);
    assert_string_equal(sc.why, nat.why);
}

/* ---- every entry goes through the bus ------------------------------------------------------ */

static uint64_t transactions_now(void)
{
    struct tpu_systemc_stats st;
    tpu_systemc_stats(&st);
    return st.transactions;
}

/* Each entry of the backend but open and close (the chip's power, a side-band platform call:
 * systemc.h) makes at least one transaction of the initiator, counted entry by entry. */
#define EXPECT_TRANSACTION(what, call)                                                         \
    do {                                                                                       \
        uint64_t before_ = transactions_now();                                                 \
        call;                                                                                  \
        if (transactions_now() <= before_)                                                     \
            fail_msg("%s made no TLM transaction", what);                                      \
    } while (0)

static void test_every_entry_makes_a_transaction(void **state)
{
    (void)state;
    struct tpu_device *dev = open_tiny(1, 2);
    struct tpu_program *p = parse("program t\nvar n\nparam b: f32[4, 4]\ntemp x: f32[4, 4]\n"
                                  "temp y: f32[4, 4]\nloop n {\n  x = infeed\n"
                                  "  y = add x, b\n  outfeed y\n}\n");
    struct tpu_diag d = {0};
    float b[16] = {0}, x[16] = {0}, y[16];
    struct tpu_core_counters c;
    struct tpu_device_watch w;
    EXPECT_TRANSACTION("load", assert_int_equal(tpu_device_load(dev, p, &d), 0));
    EXPECT_TRANSACTION("write", assert_int_equal(tpu_device_write(dev, 0, 0, b, sizeof b, &d), 0));
    EXPECT_TRANSACTION("read", assert_int_equal(tpu_device_read(dev, 0, 0, b, sizeof b, &d), 0));
    EXPECT_TRANSACTION("set_var", assert_int_equal(tpu_device_set_var(dev, 0, 1), 0));
    EXPECT_TRANSACTION("get_var", assert_int_equal(tpu_device_get_var(dev, 1, 0), 1));
    for (uint32_t k = 0; k < 2; k++)
        EXPECT_TRANSACTION("infeed",
                           assert_int_equal(tpu_device_infeed(dev, k, x, sizeof x, 0, &d), 0));
    EXPECT_TRANSACTION("run", assert_int_equal(tpu_device_run(dev, 0, NULL, &d), 0));
    for (uint32_t k = 0; k < 2; k++)
        EXPECT_TRANSACTION("outfeed", assert_int_equal(
                                          tpu_device_outfeed(dev, k, y, sizeof y, 0, NULL, &d), 0));
    EXPECT_TRANSACTION("counters", assert_int_equal(tpu_device_counters(dev, 0, &c), 0));
    EXPECT_TRANSACTION("watch", tpu_device_watch(dev, &w));
    assert_false(w.running);
    assert_int_equal(w.moves, 8); /* 2 infeeds and 2 outfeeds, each pushed and popped */
    EXPECT_TRANSACTION("infeed_close", tpu_device_infeed_close(dev));
    EXPECT_TRANSACTION("cancel", tpu_device_cancel(dev));
    EXPECT_TRANSACTION("reset_cancel", tpu_device_reset_cancel(dev));
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* ---- one device at a time, refusals, open and close again ---------------------------------- */

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

static void test_one_device_at_a_time_and_refusals(void **state)
{
    (void)state;
    struct tpu_chip_config chip;
    assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    s.n_threads = 1;
    s.backend = tpu_device_backend_systemc();
    assert_string_equal(s.backend->name, "systemc");
    struct tpu_diag d = {0};
    struct tpu_device *a = NULL, *b = NULL;
    assert_int_equal(tpu_device_open(&s, &a, &d), 0);
    assert_int_equal(tpu_device_open(&s, &b, &d), TPU_EBUSY);
    assert_null(b);
    assert_non_null(strstr(d.msg, "the systemc backend drives one device at a time"));
    assert_non_null(strstr(d.msg, "close the open device first"));
    /* a native device beside it is fine */
    struct tpu_device_settings ns = s;
    ns.backend = NULL;
    assert_int_equal(tpu_device_open(&ns, &b, &d), 0);
    tpu_device_close(&b);
    tpu_device_close(&a);
    assert_null(a);

    struct tpu_device_settings t = s;
    t.trace = true;
    assert_int_equal(tpu_device_open(&t, &a, &d), TPU_EUNSUPPORTED);
    assert_null(a);
    assert_non_null(strstr(d.msg, "the systemc backend records no timeline"));
    t = s;
    t.op_stats = true;
    assert_int_equal(tpu_device_open(&t, &a, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "the systemc backend keeps no per-op statistics"));
    struct tpu_mxu_provider rtl = {.name = "rtl", .rows = chip.mxu_rows, .cols = chip.mxu_cols,
                                   .n_units = 64, .run = never_run};
    t = s;
    t.mxu = &rtl;
    assert_int_equal(tpu_device_open(&t, &a, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "the 'rtl' matrix-unit provider plugs into the native chip"));
    /* a refused open leaves the backend free */
    assert_int_equal(tpu_device_open(&s, &a, &d), 0);
    tpu_device_close(&a);
}

/* Opens and closes the device again and again with other shapes, runs a program each time:
 * one elaboration, the chip re-powered; each open sees its own settings. */
static void test_open_and_close_again(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program t\nparam x: f32[4, 4]\ntemp y: f32[4, 4]\nvar n\n"
                                  "loop n {\n  y = relu x\n}\n");
    uint64_t ends[2][4];
    for (int systemc = 0; systemc < 2; systemc++)
        for (int round = 0; round < 4; round++) {
            struct tpu_chip_config chip;
            assert_int_equal(tpu_config_load_preset("tiny", &chip, NULL), 0);
            struct tpu_device_settings s;
            tpu_device_default_settings(&s, &chip);
            s.n_threads = 1;
            s.n_chips = 1 + (uint32_t)(round % 2);
            s.timing_only = round == 3;
            s.backend = backend_of(systemc);
            struct tpu_device *dev = NULL;
            struct tpu_diag d = {0};
            if (tpu_device_open(&s, &dev, &d) != 0)
                fail_msg("round %d on %s: %s", round, which[systemc], d.msg);
            assert_int_equal(tpu_device_n_cores(dev), 2 * s.n_chips);
            if (tpu_device_load(dev, p, &d) != 0)
                fail_msg("load: %s", d.msg);
            assert_int_equal(tpu_device_set_var(dev, 0, round + 1), 0);
            ends[systemc][round] = 0;
            if (tpu_device_run(dev, 100 * (uint64_t)round, &ends[systemc][round], &d) != 0)
                fail_msg("run: %s", d.msg);
            assert_true(ends[systemc][round] > 100 * (uint64_t)round);
            struct tpu_core_counters k;
            assert_int_equal(tpu_device_counters(dev, 2 * s.n_chips - 1, &k), 0);
            assert_int_equal(k.iterations, (uint64_t)round + 1);
            tpu_device_close(&dev);
            assert_null(dev);
        }
    assert_memory_equal(ends[1], ends[0], sizeof ends[0]);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_is_the_same_both_ways),
        cmocka_unit_test(test_the_same_script_gives_the_same_results),
        cmocka_unit_test(test_watch_sees_the_same_blocked_run),
        cmocka_unit_test(test_every_entry_makes_a_transaction),
        cmocka_unit_test(test_one_device_at_a_time_and_refusals),
        cmocka_unit_test(test_open_and_close_again),
    };
    return cmocka_run_group_tests_name("systemc_backend", tests, NULL, NULL);
}
