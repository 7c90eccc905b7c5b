/* The chip: programs running on cores through the device API. Timing is checked against
 * numbers worked out by hand from timing.c's formulas and the tiny preset (1 GHz, HBM 8 GB/s
 * shared by 2 cores, host link 1 GB/s + 1000 ns, vector unit 8 x 8 x 1, ring ICI 2 x 10 GB/s
 * + 500 ns, queues of 2); values against references computed here; and the things threads
 * could break: determinism for any worker count, stalls, cancellation, errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/mxu.h"
#include "tpusim/program.h"
#include "device_helpers.h"

static struct tpu_device *open_tiny(uint32_t n_chips, unsigned threads, bool timing_only,
                                    bool trace)
{
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.n_chips = n_chips;
    s.n_threads = threads;
    s.timing_only = timing_only;
    s.trace = trace;
    return open_settings(&s);
}

static inline uint32_t bufid(const struct tpu_program *p, const char *name)
{
    uint32_t id = 0;
    assert_int_equal(tpu_program_find_buffer(p, name, &id), 0);
    return id;
}

static uint32_t varid(const struct tpu_program *p, const char *name)
{
    uint32_t id = 0;
    assert_int_equal(tpu_program_find_var(p, name, &id), 0);
    return id;
}

static void run_ok(struct tpu_device *dev, uint64_t *end)
{
    struct tpu_diag d = {0};
    if (tpu_device_run(dev, 0, end, &d) != 0)
        fail_msg("run: %s", d.msg);
}

/* ---- exact timing ------------------------------------------------------------------------- */

static void test_vpu_op_timing(void **state)
{
    (void)state;
    /* relu over a 64x128 f32 param (32 KiB in HBM) into an on-chip temp:
     * DMA 32768 B at 4 GB/s (8 GB/s over 2 cores) at 1 GHz = 8192 cycles;
     * VPU 8192 elements / (8 x 8 x 1) = 128 cycles + 8 latency = 136; one chunk. */
    struct tpu_program *p = parse("program t\n"
                                  "param x: f32[64, 128]\n"
                                  "temp y: f32[64, 128]\n"
                                  "y = relu x\n");
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    load(dev, p);
    uint64_t end = 0;
    run_ok(dev, &end);
    struct tpu_core_counters c;
    assert_int_equal(tpu_device_counters(dev, 0, &c), 0);
    assert_int_equal(c.busy[TPU_UNIT_DMA], 8192);
    assert_int_equal(c.busy[TPU_UNIT_VPU], 136);
    assert_int_equal(c.stall[TPU_STALL_MEMORY], 8192);
    assert_int_equal(c.hbm_read_bytes, 32768);
    assert_int_equal(c.hbm_write_bytes, 0);
    assert_int_equal(c.cycles, 8192 + 136);
    assert_int_equal(end, 8192 + 136);
    tpu_device_close(&dev);
    assert_null(dev);
    tpu_program_destroy(&p);
}

static void test_matmul_timing(void **state)
{
    (void)state;
    /* y[16][8] = x[16][8] w[8][8], both params: 768 B in at 4 B/cycle = 192 cycles; one 8x8
     * tile of 16 rows: 2R + M + C - 1 = 16 + 16 + 7 = 39 MXU cycles */
    struct tpu_program *p = parse("program t\n"
                                  "param x: f32[16, 8]\n"
                                  "param w: f32[8, 8]\n"
                                  "temp y: f32[16, 8]\n"
                                  "y = matmul x, w\n");
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    load(dev, p);
    uint64_t end = 0;
    run_ok(dev, &end);
    struct tpu_core_counters c;
    tpu_device_counters(dev, 1, &c);
    assert_int_equal(c.busy[TPU_UNIT_DMA], 192);
    assert_int_equal(c.busy[TPU_UNIT_MXU], 39);
    assert_int_equal(tpu_mxu_tile_cycles(8, 8, 16), 39);
    assert_int_equal(c.macs, 16 * 8 * 8);
    assert_int_equal(c.mxu_mac_slots, 39 * 64);
    assert_int_equal(end, 192 + 39);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* Pushes `n` infeed tensors of `bytes` to every core (or to the first `cores`) at host_cycle
 * `at`, from a thread. */
struct pusher {
    struct tpu_device *dev;
    int n;
    size_t bytes;
    uint64_t at;
    const void *data;
    uint32_t cores; /* 0: all */
    int rc;
};

static void *push_thread(void *arg)
{
    struct pusher *p = arg;
    const uint32_t n_cores = p->cores ? p->cores : tpu_device_n_cores(p->dev);
    for (int i = 0; i < p->n && !p->rc; i++)
        for (uint32_t c = 0; c < n_cores && !p->rc; c++)
            p->rc = tpu_device_infeed(p->dev, c, p->data, p->bytes, p->at, NULL);
    return NULL;
}

static void test_infeed_stall(void **state)
{
    (void)state;
    /* x is 16x16 f32 = 1024 B. Each of the 2 cores has half of the 1 GB/s host link: 2048
     * cycles per tensor plus 1000 latency. Pushed at host cycle 5000, core 0's tensors take
     * the link [5000, 7048) and [7048, 9096), ready at 8048 and 10096. relu reads x from HBM
     * (infeed targets live there): 1024 B at 4 B/cycle = 256 DMA cycles, then
     * 256 / 64 + 8 = 12 VPU cycles, so core 0 is done reading x at 8048 + 268 = 8316 and asks
     * for the second tensor then: it waits 10096 - 8316 = 1780.
     * INFEED_EMPTY = 8048 + 1780 on each core (core 1's share is its own). */
    struct tpu_program *p = parse("program t\n"
                                  "var iterations\n"
                                  "temp x: f32[16, 16]\n"
                                  "temp y: f32[16, 16]\n"
                                  "loop iterations {\n"
                                  "  x = infeed\n"
                                  "  y = relu x\n"
                                  "}\n");
    struct tpu_device *dev = open_tiny(1, 2, true, false);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "iterations"), 2);
    struct pusher pu = {.dev = dev, .n = 2, .bytes = 1024, .at = 5000};
    pthread_t th;
    pthread_create(&th, NULL, push_thread, &pu);
    run_ok(dev, NULL);
    pthread_join(th, NULL);
    assert_int_equal(pu.rc, 0);
    struct tpu_core_counters c;
    tpu_device_counters(dev, 0, &c);
    assert_int_equal(c.stall[TPU_STALL_INFEED_EMPTY], 8048 + 1780);
    assert_int_equal(c.iterations, 2);
    assert_int_equal(c.infeed_bytes, 2048);
    tpu_device_counters(dev, 1, &c);
    assert_int_equal(c.stall[TPU_STALL_INFEED_EMPTY], 8048 + 1780);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}


/* ---- outfeed, cancel, errors -------------------------------------------------------------- */

static void sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

struct popper {
    struct tpu_device *dev;
    uint32_t core;
    int n;
    uint64_t at;
    unsigned delay_us;
    int rc;
    float got[8];
};

static void *pop_thread(void *arg)
{
    struct popper *p = arg;
    for (int i = 0; i < p->n && !p->rc; i++) {
        sleep_us(p->delay_us);
        p->rc = tpu_device_outfeed(p->dev, p->core, &p->got[i], 4, p->at, NULL, NULL);
    }
    return NULL;
}

/* Runs 4 iterations that each outfeed one float; the host takes them at host cycle 100000,
 * after a real-time delay. Returns core 0's counters. */
static struct tpu_core_counters outfeed_run(unsigned delay, float *got)
{
    struct tpu_program *p = parse("program t\n"
                                  "var iterations\n"
                                  "param x: f32[1, 1]\n"
                                  "temp y: f32[1, 1]\n"
                                  "loop iterations {\n"
                                  "  y = scale x alpha=2 beta=1\n"
                                  "  outfeed y\n"
                                  "}\n");
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    load(dev, p);
    float one = 1.5f;
    for (uint32_t c = 0; c < 2; c++)
        assert_int_equal(tpu_device_write(dev, c, bufid(p, "x"), &one, 4, NULL), 0);
    tpu_device_set_var(dev, varid(p, "iterations"), 4);
    struct popper pp[2] = {{.dev = dev, .core = 0, .n = 4, .at = 100000, .delay_us = delay},
                           {.dev = dev, .core = 1, .n = 4, .at = 100000, .delay_us = delay}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, pop_thread, &pp[i]);
    run_ok(dev, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(pp[i].rc, 0);
    }
    memcpy(got, pp[0].got, 4 * sizeof *got);
    struct tpu_core_counters c;
    tpu_device_counters(dev, 0, &c);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
    return c;
}

static void test_outfeed_full_stall_is_deterministic(void **state)
{
    (void)state;
    float got[4];
    struct tpu_core_counters a = outfeed_run(0, got);
    for (int i = 0; i < 4; i++)
        assert_true(got[i] == 4.0f); /* 2 * 1.5 + 1 */
    /* the queue holds 2: the third outfeed waits for the host's first take at 100000 */
    assert_true(a.stall[TPU_STALL_OUTFEED_FULL] > 90000);
    assert_true(a.cycles > 100000);
    /* the same device time when the host thread is slow in real time */
    struct tpu_core_counters b = outfeed_run(20000, got);
    assert_memory_equal(&a, &b, sizeof a);
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A program load empties the feed queues: tensors a stopped run (or a host that fed more
 * than the run took) left queued were for the earlier program, and the new one must not take
 * them as its own. */
static void test_load_empties_the_queues(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program t\nvar n\ntemp x: f32[1, 4]\ntemp y: f32[1, 4]\n"
                                  "loop n {\n  x = infeed\n  y = relu x\n  outfeed y\n}\n");
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    load(dev, p);
    const float stale[4] = {9, 9, 9, 9}, fresh[4] = {1, 2, 3, 4};
    struct tpu_diag d = {0};
    /* one run takes one tensor and leaves the second queued; its outfeed stays queued too */
    for (uint32_t c = 0; c < 2; c++)
        for (int i = 0; i < 2; i++)
            assert_int_equal(tpu_device_infeed(dev, c, stale, sizeof stale, 0, &d), 0);
    tpu_device_set_var(dev, varid(p, "n"), 1);
    run_ok(dev, NULL);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 1);
    for (uint32_t c = 0; c < 2; c++)
        assert_int_equal(tpu_device_infeed(dev, c, fresh, sizeof fresh, 0, &d), 0);
    run_ok(dev, NULL);
    for (uint32_t c = 0; c < 2; c++) {
        float got[4];
        assert_int_equal(tpu_device_outfeed(dev, c, got, sizeof got, 0, NULL, &d), 0);
        assert_memory_equal(got, fresh, sizeof got); /* not the earlier run's 9s */
    }
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_cancel_ends_a_blocked_run(void **state)
{
    (void)state;
    /* nobody feeds the cores: without cancel this run would wait forever */
    struct tpu_program *p = parse("program t\nvar n\ntemp x: f32[4, 4]\ntemp y: f32[4, 4]\n"
                                  "loop n {\n  x = infeed\n  y = relu x\n}\n");
    struct tpu_device *dev = open_tiny(1, 2, false, false);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 3);
    struct canceler cn = {dev, 50000};
    pthread_t th;
    pthread_create(&th, NULL, cancel_thread, &cn);
    double t0 = now_s();
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_ECANCELED);
    assert_true(now_s() - t0 < 5.0);
    pthread_join(th, NULL);
    /* feed calls answer at once while canceled; a new run needs the cancel cleared */
    float x[16] = {0};
    assert_int_equal(tpu_device_infeed(dev, 0, x, sizeof x, 0, &d), TPU_ECANCELED);
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_ECANCELED);
    assert_non_null(strstr(d.msg, "tpu_device_reset_cancel"));
    tpu_device_reset_cancel(dev);
    tpu_device_set_var(dev, varid(p, "n"), 0); /* a zero-trip loop needs no infeed */
    run_ok(dev, NULL);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* A host call whose wait is over is not blocked, even before it runs again: tpu_device_watch
 * counted a thread woken by a freed infeed slot among host_calls_waiting until it retook the
 * device's lock, and under load that can take longer than the runtime watchdog's 0.5 s while
 * the cores wait for that very thread, which then stopped a run as deadlocked. A signal whose
 * handler sleeps 1 s keeps the woken thread off the CPU here. */
static void stall_handler(int sig)
{
    (void)sig;
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
}

struct runner {
    struct tpu_device *dev;
    int rc;
};

static void *run_thread(void *arg)
{
    struct runner *r = arg;
    r->rc = tpu_device_run(r->dev, 0, NULL, NULL);
    return NULL;
}

static void test_watch_counts_only_calls_still_blocked(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stall_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    struct tpu_program *p = parse("program t\nvar n\ntemp x: f32[4, 4]\ntemp y: f32[4, 4]\n"
                                  "loop n {\n  x = infeed\n  y = relu x\n}\n");
    struct tpu_device *dev = open_tiny(1, 2, true, false);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 3);
    float x[16] = {0};
    /* queues of 2: both full before the run */
    for (uint32_t c = 0; c < 2; c++)
        for (int i = 0; i < 2; i++)
            assert_int_equal(tpu_device_infeed(dev, c, x, sizeof x, 0, NULL), 0);
    /* core 0's third tensor: its thread blocks on the full queue */
    struct pusher pu = {.dev = dev, .n = 1, .bytes = sizeof x, .data = x, .cores = 1};
    pthread_t th;
    pthread_create(&th, NULL, push_thread, &pu);
    struct tpu_device_watch w;
    double t0 = now_s();
    do {
        memset(&w, 0, sizeof w);
        tpu_device_watch(dev, &w);
    } while (w.host_calls_waiting != 1 && now_s() - t0 < 10);
    assert_int_equal(w.host_calls_waiting, 1);
    pthread_kill(th, SIGUSR1); /* it sleeps 1 s in the handler, still in its wait */
    struct runner rn = {.dev = dev};
    pthread_t rt;
    pthread_create(&rt, NULL, run_thread, &rn);
    /* the cores take their 2 tensors each (a slot of core 0 frees: the thread's wait is
     * over) and wait for the third: 4 pushes + 4 pops, all blocked */
    t0 = now_s();
    do {
        memset(&w, 0, sizeof w);
        tpu_device_watch(dev, &w);
    } while (!(w.cores_blocked && w.moves == 8) && w.moves < 9 && now_s() - t0 < 10);
    if (w.moves == 8) /* else the thread already ran: its push made 9 (a loaded machine) */
        assert_int_equal(w.host_calls_waiting, 0);
    assert_int_equal(tpu_device_infeed(dev, 1, x, sizeof x, 0, NULL), 0);
    pthread_join(th, NULL);
    pthread_join(rt, NULL);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
    assert_int_equal(pu.rc, 0);
    assert_int_equal(rn.rc, 0);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_core_error_stops_the_run(void **state)
{
    (void)state;
    /* label 7 with 4 classes: the core fails, the run returns its message, and a host thread
     * blocked on a full infeed queue is released */
    struct tpu_program *p = parse("program t\nvar n\n"
                                  "temp logits: f32[2, 4]\ntemp labels: int32[2, 1]\n"
                                  "temp loss: f32[1, 1]\ntemp g: f32[2, 4]\n"
                                  "loop n {\n"
                                  "  logits = infeed\n  labels = infeed\n"
                                  "  loss, g = softmax_xent logits, labels alpha=1\n"
                                  "}\n");
    struct tpu_device *dev = open_tiny(1, 2, false, false);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 100);
    float logits[8] = {0};
    int32_t labels[2] = {1, 7};
    struct tpu_diag d = {0};
    /* feed core 1 nothing; core 0 gets a bad batch, then the host blocks on the full queue */
    assert_int_equal(tpu_device_infeed(dev, 0, logits, sizeof logits, 0, &d), 0);
    assert_int_equal(tpu_device_infeed(dev, 0, labels, sizeof labels, 0, &d), 0);
    /* to core 0 only: core 1 would fail too (a 32-byte tensor where labels take 8), and
     * which core's error comes first would be a race */
    struct pusher pu = {.dev = dev, .n = 50, .bytes = sizeof logits, .data = logits,
                        .cores = 1};
    pthread_t th;
    pthread_create(&th, NULL, push_thread, &pu);
    double t0 = now_s();
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_ERANGE);
    assert_non_null(strstr(d.msg, "core 0, op 3"));
    assert_non_null(strstr(d.msg, "label 7"));
    pthread_join(th, NULL);
    assert_int_equal(pu.rc, TPU_ECANCELED);
    assert_true(now_s() - t0 < 5.0);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_infeed_size_mismatch(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program t\nvar n\ntemp x: f32[4, 4]\n"
                                  "loop n {\n  x = infeed\n}\n");
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 1);
    float x[3] = {0};
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_infeed(dev, 0, x, sizeof x, 0, &d), 0);
    assert_int_equal(tpu_device_infeed(dev, 1, x, sizeof x, 0, &d), 0);
    assert_int_equal(tpu_device_run(dev, 0, NULL, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "expects 64 bytes (f32[4, 4]) but the host queued 12"));
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_load_and_access_errors(void **state)
{
    (void)state;
    struct tpu_device *dev = open_tiny(1, 1, false, false);
    struct tpu_diag d = {0};
    /* 64 MiB of HBM over 2 cores: a 40 MiB param does not fit one core's share */
    struct tpu_program *big = parse("program t\nparam w: f32[2560, 4096]\n");
    assert_int_not_equal(tpu_device_load(dev, big, &d), 0);
    assert_non_null(strstr(d.msg, "w"));
    float v = 0;
    assert_int_equal(tpu_device_write(dev, 0, 0, &v, 4, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "no program is loaded"));
    struct tpu_program *p = parse("program t\nparam w: f32[2, 2]\n");
    load(dev, p);
    assert_int_equal(tpu_device_write(dev, 2, 0, &v, 16, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "core 2 does not exist"));
    assert_int_equal(tpu_device_write(dev, 0, 0, &v, 4, &d), TPU_ESHAPE);
    assert_non_null(strstr(d.msg, "buffer 'w' is f32[2, 2], 16 bytes, not 4"));
    /* tpu-v1 has no ICI: an all_reduce across its 4 chips is refused at load */
    struct tpu_chip_config v1;
    assert_int_equal(tpu_config_load_preset("tpu-v1", &v1, &d), 0);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &v1);
    struct tpu_device *dv1 = NULL;
    assert_int_equal(tpu_device_open(&s, &dv1, &d), 0);
    struct tpu_program *ar = parse("program t\nparam g: f32[4, 4]\ng = all_reduce g reduce=sum\n");
    assert_int_equal(tpu_device_load(dv1, ar, &d), TPU_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "no interconnect"));
    tpu_device_close(&dv1);
    /* settings */
    struct tpu_chip_config cfg = tiny();
    tpu_device_default_settings(&s, &cfg);
    s.cores_per_replica = 3;
    assert_int_equal(tpu_device_open(&s, &dv1, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "cores_per_replica 3 must be a power of two"));
    s.cores_per_replica = 1;
    s.n_chips = 0;
    assert_int_equal(tpu_device_open(&s, &dv1, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "n_chips 0"));
    tpu_device_close(&dev);
    tpu_device_close(&dv1); /* NULL is fine */
    tpu_program_destroy(&ar);
    tpu_program_destroy(&p);
    tpu_program_destroy(&big);
}

/* ---- collectives ---------------------------------------------------------------------------- */

static void test_all_reduce_values_and_time(void **state)
{
    (void)state;
    /* 2 chips x 2 cores = 4 replicas on a ring; 1 KiB per core.
     * on chip: 2 (2-1)/2 * 1024 B at 8 GB/s = 128 ns; across the 2 chips: one ring
     * dimension of 2 links at 10 GB/s: 2 (2-1)/2 * 1024 / 20e9 = 51.2 ns, plus
     * 2 (2-1) * 500 ns latency: ceil(179.2) + 1000 = 1180 cycles. */
    struct tpu_program *p = parse("program t\nparam x: f32[1, 256]\ntemp y: f32[1, 256]\n"
                                  "y = all_reduce x reduce=sum\n"
                                  "x = all_reduce y reduce=mean\n");
    struct tpu_device *dev = open_tiny(2, 3, false, false);
    assert_int_equal(tpu_device_n_replicas(dev), 4);
    load(dev, p);
    float x[256];
    for (uint32_t c = 0; c < 4; c++) {
        for (int i = 0; i < 256; i++)
            x[i] = (float)(c + 1) * 0.1f + (float)i;
        assert_int_equal(tpu_device_write(dev, c, bufid(p, "x"), x, sizeof x, NULL), 0);
    }
    run_ok(dev, NULL);
    for (uint32_t c = 0; c < 4; c++) {
        float y[256];
        assert_int_equal(tpu_device_read(dev, c, bufid(p, "x"), y, sizeof y, NULL), 0);
        for (int i = 0; i < 256; i++) {
            /* y = ((x0 + x1) + x2) + x3 in replica order on every core; then x = the same
             * sum of the four (equal) y, divided by 4 */
            float f1 = 1.0f * 0.1f + (float)i, f2 = 2.0f * 0.1f + (float)i;
            float f3 = 3.0f * 0.1f + (float)i, f4 = 4.0f * 0.1f + (float)i;
            float sum = ((f1 + f2) + f3) + f4;
            float want = (((sum + sum) + sum) + sum) / 4.0f;
            assert_true(y[i] == want);
        }
        struct tpu_core_counters k;
        tpu_device_counters(dev, c, &k);
        assert_int_equal(k.busy[TPU_UNIT_ICI], 2 * 1180);
        assert_int_equal(k.cycles, 2 * 1180);
    }
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

/* ---- whole training steps ------------------------------------------------------------------- */

struct mlp_run {
    float loss[8];
    float w0[16 * 8];
    struct tpu_core_counters ctr[4];
    uint64_t end;
};

struct feeder {
    struct tpu_device *dev;
    uint32_t R, B;
    int iters, rc;
};

/* For each step and replica: x rows then labels of a fixed global batch of 8. */
static void *feed_mlp(void *arg)
{
    struct feeder *f = arg;
    for (int it = 0; it < f->iters && !f->rc; it++)
        for (uint32_t r = 0; r < f->R && !f->rc; r++) {
            float x[8 * 16];
            int32_t y[8];
            for (uint32_t i = 0; i < f->B; i++) {
                uint32_t row = r * f->B + i;
                for (uint32_t j = 0; j < 16; j++)
                    x[i * 16 + j] = (float)((row * 16 + j) % 7) / 7.0f - 0.4f;
                y[i] = (int32_t)(row % 4);
            }
            f->rc = tpu_device_infeed(f->dev, r, x, f->B * 16 * sizeof(float), 0, NULL);
            if (!f->rc)
                f->rc = tpu_device_infeed(f->dev, r, y, f->B * sizeof(int32_t), 0, NULL);
        }
    return NULL;
}

/* Trains a 16-8-4 MLP for `iters` steps on `chips` tiny chips (2 replicas each), global
 * batch 8 split evenly, deterministic data; returns losses, w0 of core 0 and counters. */
static void mlp_run(uint32_t chips, unsigned threads, bool timing_only, int iters,
                    struct mlp_run *out)
{
    struct tpu_device *dev = open_tiny(chips, threads, timing_only, false);
    const uint32_t R = tpu_device_n_replicas(dev), G = 8, B = G / R;
    struct tpu_mlp_spec s;
    tpu_mlp_default_spec(&s);
    s.n_layers = 2;
    s.sizes[0] = 16;
    s.sizes[1] = 8;
    s.sizes[2] = 4;
    s.batch_per_replica = B;
    s.global_batch = G;
    s.learning_rate = 0.5f;
    struct tpu_mlp_program m;
    struct tpu_diag d = {0};
    if (tpu_mlp_build(&s, TPU_MLP_TRAIN, &m, &d) != 0)
        fail_msg("%s", d.msg);
    load(dev, m.prog);
    if (!timing_only) {
        float w0[16 * 8], w1[8 * 4];
        for (int i = 0; i < 16 * 8; i++)
            w0[i] = (float)((i * 37) % 17 - 8) / 32.0f;
        for (int i = 0; i < 8 * 4; i++)
            w1[i] = (float)((i * 11) % 9 - 4) / 16.0f;
        for (uint32_t c = 0; c < tpu_device_n_cores(dev); c++) {
            assert_int_equal(tpu_device_write(dev, c, bufid(m.prog, "w0"), w0, sizeof w0, &d), 0);
            assert_int_equal(tpu_device_write(dev, c, bufid(m.prog, "w1"), w1, sizeof w1, &d), 0);
        }
    }
    tpu_device_set_var(dev, m.var_iterations, iters);
    struct feeder fd = {dev, R, B, iters, 0};
    pthread_t th;
    pthread_create(&th, NULL, feed_mlp, &fd);
    /* every replica outfeeds the all-reduced loss each step: drain them all */
    struct popper pp[4];
    pthread_t pt[4];
    for (uint32_t c = 0; c < R; c++) {
        pp[c] = (struct popper){.dev = dev, .core = c, .n = iters, .at = 0};
        pthread_create(&pt[c], NULL, pop_thread, &pp[c]);
    }
    run_ok(dev, &out->end);
    pthread_join(th, NULL);
    assert_int_equal(fd.rc, 0);
    for (uint32_t c = 0; c < R; c++) {
        pthread_join(pt[c], NULL);
        assert_int_equal(pp[c].rc, 0);
        for (int i = 0; i < iters; i++)
            assert_true(isfinite(pp[c].got[i]));
    }
    /* each replica's loss is its rows' sum / global batch: their sum is the global mean */
    memset(out->loss, 0, sizeof out->loss);
    for (int i = 0; i < iters; i++) {
        out->loss[i] = 0;
        for (uint32_t c = 0; c < R; c++)
            out->loss[i] += pp[c].got[i];
    }
    if (!timing_only)
        assert_int_equal(tpu_device_read(dev, 0, bufid(m.prog, "w0"), out->w0, sizeof out->w0, &d), 0);
    for (uint32_t c = 0; c < R && c < 4; c++)
        tpu_device_counters(dev, c, &out->ctr[c]);
    tpu_device_close(&dev);
    tpu_mlp_program_free(&m);
}

static void test_mlp_training_learns(void **state)
{
    (void)state;
    struct mlp_run r;
    mlp_run(1, 2, false, 8, &r);
    for (int i = 0; i < 8; i++)
        assert_true(isfinite(r.loss[i]));
    assert_true(r.loss[7] < 0.7f * r.loss[0]);
    /* one replica per core, 2 cores: the first loss is the mean over all 8 examples; check
     * it against a plain host computation of the same forward pass (bf16 matmul inputs) */
    float w0[16 * 8], w1[8 * 4];
    for (int i = 0; i < 16 * 8; i++)
        w0[i] = (float)((i * 37) % 17 - 8) / 32.0f;
    for (int i = 0; i < 8 * 4; i++)
        w1[i] = (float)((i * 11) % 9 - 4) / 16.0f;
    double total = 0;
    for (uint32_t row = 0; row < 8; row++) {
        double hdn[8], logit[4];
        for (int j = 0; j < 8; j++) {
            double acc = 0;
            for (int k = 0; k < 16; k++) {
                float x = (float)((row * 16 + (uint32_t)k) % 7) / 7.0f - 0.4f;
                acc += (double)tpu_bf16_to_f32(tpu_bf16_from_f32(x)) *
                       tpu_bf16_to_f32(tpu_bf16_from_f32(w0[k * 8 + j]));
            }
            hdn[j] = acc > 0 ? acc : 0;
        }
        double mx = -1e30, se = 0;
        for (int j = 0; j < 4; j++) {
            double acc = 0;
            for (int k = 0; k < 8; k++)
                acc += (double)tpu_bf16_to_f32(tpu_bf16_from_f32((float)hdn[k])) *
                       tpu_bf16_to_f32(tpu_bf16_from_f32(w1[k * 4 + j]));
            logit[j] = acc;
            mx = acc > mx ? acc : mx;
        }
        for (int j = 0; j < 4; j++)
            se += exp(logit[j] - mx);
        total += log(se) + mx - logit[row % 4];
    }
    /* tolerance: fp32 sums of a few terms against double, well under 1e-5 relative */
    assert_true(fabs(r.loss[0] - total / 8) < 1e-5 * fabs(total / 8) + 1e-6);
}

static void test_results_do_not_depend_on_threads(void **state)
{
    (void)state;
    struct mlp_run a, b, c;
    mlp_run(2, 1, false, 5, &a);
    mlp_run(2, 2, false, 5, &b);
    mlp_run(2, 4, false, 5, &c);
    assert_memory_equal(a.loss, b.loss, sizeof a.loss);
    assert_memory_equal(a.loss, c.loss, sizeof a.loss);
    assert_memory_equal(a.w0, b.w0, sizeof a.w0);
    assert_memory_equal(a.w0, c.w0, sizeof a.w0);
    assert_memory_equal(a.ctr, b.ctr, sizeof a.ctr);
    assert_memory_equal(a.ctr, c.ctr, sizeof a.ctr);
    assert_int_equal(a.end, c.end);
    /* timing-only mode counts the same cycles */
    struct mlp_run t;
    mlp_run(2, 2, true, 5, &t);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t.ctr[i].cycles, a.ctr[i].cycles);
        assert_memory_equal(t.ctr[i].busy, a.ctr[i].busy, sizeof a.ctr[i].busy);
        assert_memory_equal(t.ctr[i].stall, a.ctr[i].stall, sizeof a.ctr[i].stall);
    }
    /* and the replicas split the global batch: 4 replicas x 2 rows give the same losses as
     * 2 replicas x 4 rows up to the order of the gradient sums */
    struct mlp_run one;
    mlp_run(1, 2, false, 5, &one);
    for (int i = 0; i < 5; i++)
        assert_true(fabsf(one.loss[i] - a.loss[i]) < 1e-4f * fabsf(one.loss[i]));
}

/* The host's infeed calls record into a core's timeline while the core records its own ops
 * into it: the log must be written under the device lock on both sides (a race here once
 * corrupted the heap in 'tpusim train --trace'; ThreadSanitizer reports it at once). Every
 * event must be there. */
static void test_trace_with_concurrent_infeed(void **state)
{
    (void)state;
    enum { STEPS = 300 };
    struct tpu_program *p = parse("program t\nvar n\nparam w: f32[8, 8]\n"
                                  "temp x: f32[16, 8]\ntemp y: f32[16, 8]\n"
                                  "loop n {\n  x = infeed\n  y = matmul x, w\n}\n");
    struct tpu_device *dev = open_tiny(1, 2, true, true);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), STEPS);
    struct pusher pu = {.dev = dev, .n = STEPS, .bytes = 16 * 8 * 4};
    pthread_t th;
    pthread_create(&th, NULL, push_thread, &pu);
    run_ok(dev, NULL);
    pthread_join(th, NULL);
    assert_int_equal(pu.rc, 0);
    char path[] = "/tmp/tpusim-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_write_trace(dev, path, &d), 0);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    unlink(path);
    if (!root)
        fail_msg("trace is not JSON: %s at %d:%d", je.text, je.line, je.column);
    int mxu = 0, infeed = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        mxu += !strcmp(ph, "X") && !strcmp(name, "matmul y");
        infeed += !strcmp(ph, "X") && !strcmp(name, "host to device");
    }
    uint32_t cores = tpu_device_n_cores(dev);
    assert_int_equal(mxu, STEPS * cores);
    assert_int_equal(infeed, STEPS * cores);
    json_decref(root);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

static void test_trace_file(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program t\nvar n\nparam w: f32[8, 8]\n"
                                  "temp x: f32[16, 8]\ntemp y: f32[16, 8]\n"
                                  "loop n {\n  x = infeed\n  y = matmul x, w\n  outfeed y\n}\n");
    struct tpu_device *dev = open_tiny(1, 1, true, true);
    load(dev, p);
    tpu_device_set_var(dev, varid(p, "n"), 2);
    struct pusher pu = {.dev = dev, .n = 2, .bytes = 16 * 8 * 4};
    pthread_t th;
    pthread_create(&th, NULL, push_thread, &pu);
    struct tpu_diag d = {0};
    run_ok(dev, NULL);
    pthread_join(th, NULL);
    /* outfeeds stay queued (2 per core fit): the timeline still has them */
    tpu_device_trace_host(dev, "hooks", 100, 200);
    char path[] = "/tmp/tpusim-trace-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tpu_device_write_trace(dev, path, &d), 0);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        fail_msg("trace is not JSON: %s at %d:%d", je.text, je.line, je.column);
    json_t *ev = json_object_get(root, "traceEvents");
    assert_true(json_is_array(ev));
    int mxu = 0, infeed = 0, outfeed = 0, names = 0, counters = 0, host = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!strcmp(ph, "M") && !strcmp(name, "thread_name"))
            names++;
        if (!strcmp(ph, "C"))
            counters++;
        if (!strcmp(ph, "X") && !strcmp(name, "matmul y"))
            mxu++;
        if (!strcmp(ph, "X") && !strcmp(name, "host to device"))
            infeed++;
        if (!strcmp(ph, "X") && !strncmp(name, "outfeed", 7))
            outfeed++;
        if (!strcmp(ph, "X") && !strcmp(name, "hooks"))
            host++;
    }
    assert_int_equal(names, 2 * TPU_UNIT_COUNT);
    assert_int_equal(mxu, 4);
    assert_int_equal(infeed, 4);
    assert_int_equal(outfeed, 4);
    assert_int_equal(host, 1);
    assert_true(counters >= 8);
    json_decref(root);
    unlink(path);
    tpu_device_close(&dev);
    tpu_program_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vpu_op_timing),
        cmocka_unit_test(test_matmul_timing),
        cmocka_unit_test(test_infeed_stall),
        cmocka_unit_test(test_outfeed_full_stall_is_deterministic),
        cmocka_unit_test(test_load_empties_the_queues),
        cmocka_unit_test(test_cancel_ends_a_blocked_run),
        cmocka_unit_test(test_watch_counts_only_calls_still_blocked),
        cmocka_unit_test(test_core_error_stops_the_run),
        cmocka_unit_test(test_infeed_size_mismatch),
        cmocka_unit_test(test_load_and_access_errors),
        cmocka_unit_test(test_all_reduce_values_and_time),
        cmocka_unit_test(test_mlp_training_learns),
        cmocka_unit_test(test_results_do_not_depend_on_threads),
        cmocka_unit_test(test_trace_file),
        cmocka_unit_test(test_trace_with_concurrent_infeed),
    };
    return cmocka_run_group_tests_name("chip", tests, NULL, NULL);
}
