/* A pod slice as several devices (device.h, settings.pod; sim/chip/pod.c): N part devices
 * linked on N threads (pod_threads.h) against one device of all the chips, bit for bit.
 *
 * The same train program (built for the whole pod's replicas) runs on 4 tiny chips (8
 * cores) either as one device or as N = 2 or 4 parts of 4 / N chips. Every core gets the same
 * params and, at every step, the same infeed bytes in both setups (a function of its pod core
 * id, the step and the tensor). After each of several launches every pod core must hold the
 * same params and optimizer state (memcmp), have outfed the same bytes at the same cycles,
 * have the same counters and per-op statistics, and each launch must end at the same cycle
 * (the pod's: the latest part's). The models: an MLP with Adam, and a small CNN with dropout
 * (its masks depend on the pod replica) and SGD with momentum, and a cross-replica batch norm
 * (statistics all-reduced in the forward pass) with Adam; on replicas of 1 and of 2
 * cores (two logical indices: two all-reduces across the pod at once, and halo ops within a
 * replica); replica sharing on and off; values and timing only.
 *
 * Then the edges: open-time checks of a bad settings.pod (each message), a pod of one part
 * behaving exactly as no pod (and never calling its link), the refusal of a
 * collective_permute over the replicas, the SystemC backend's refusal, and a link entry that
 * fails: the run fails promptly with the link's sentence on that part, and the others end
 * with the host group's abort instead of waiting. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpusim/device.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"
#include "tpusim/systemc.h"
#include "device_helpers.h"
#include "net_build.h"
#include "pod_threads.h"
#include "rng.h" /* tpu__mix64 */

enum {
    CHIPS = 4,     /* tiny chips of the whole pod: 8 cores */
    BATCH = 4,     /* rows per replica per step */
    FEATURES = 16, /* a 4x4 image */
    CLASSES = 4,
    MAX_CORES = 8,
    MAX_FEEDS = 4, /* infeed or outfeed ops per step */
    LAUNCHES = 3,
};

enum model_kind { MLP, CNN, BN };

/* The program every device runs, with what the host needs to drive it. */
struct job {
    enum model_kind kind;
    uint32_t P;              /* cores per replica */
    bool share, timing;
    unsigned n_threads;      /* each device's workers */
    struct tpu_net *net;
    struct tpu_train_spec tspec;
    struct tpu_mlp_spec mspec;
    struct tpu_model model;
    struct tpu_model_program mp;
    uint32_t n_in, in_buf[MAX_FEEDS];   /* the loop body's infeed ops, in order */
    bool in_core0[MAX_FEEDS];
    uint32_t n_out, out_buf[MAX_FEEDS]; /* its outfeed ops */
    size_t out_bytes;                   /* a core's outfeed bytes per step */
};

/* The documented defaults for one tiny chip. */
static void tiny_settings(struct tpu_device_settings *st)
{
    const struct tpu_chip_config chip = tiny();
    tpu_device_default_settings(st, &chip);
}


static void job_build(struct job *j, enum model_kind kind, uint32_t P, bool share, bool timing)
{
    memset(j, 0, sizeof *j);
    j->kind = kind;
    j->P = P;
    j->share = share;
    j->timing = timing;
    j->n_threads = 2;
    struct tpu_diag d = {0};
    if (kind == MLP) {
        tpu_mlp_default_spec(&j->mspec);
        j->mspec.n_layers = 2;
        j->mspec.sizes[0] = FEATURES;
        j->mspec.sizes[1] = 12;
        j->mspec.sizes[2] = CLASSES;
        j->mspec.optimizer = TPU_OPT_ADAM;
        j->mspec.learning_rate = 0.01f;
        tpu_mlp_model(&j->model, &j->mspec);
    } else if (kind == BN) {
        /* cross-replica batch norm: the batch statistics are all-reduced in the forward
         * pass, values that no update reads alone */
        j->net = new_net(4, 4, 1);
        uint32_t x = conv(j->net, 0, 4, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_NONE, false);
        x = batch_norm(j->net, x, true);
        x = unary(j->net, TPU_LAYER_RELU, x);
        x = unary(j->net, TPU_LAYER_FLATTEN, x);
        x = dense(j->net, x, CLASSES, TPU_ACT_NONE);
        output(j->net, x, TPU_LOSS_SOFTMAX_XENT);
        tpu_train_spec_default(&j->tspec);
        j->tspec.optimizer = TPU_OPT_ADAM;
        j->tspec.learning_rate = 0.01f;
        j->tspec.seed = 7;
        ok(tpu_net_model(&j->model, j->net, &j->tspec, &d), &d);
    } else {
        j->net = new_net(4, 4, 1);
        uint32_t x = conv(j->net, 0, 6, 3, 3, 1, TPU_PADDING_SAME, TPU_ACT_RELU, true);
        x = pool(j->net, TPU_LAYER_MAX_POOL2D, x, 2, 2, 2, 2, TPU_PADDING_VALID);
        x = dropout(j->net, x, 0.25f);
        x = unary(j->net, TPU_LAYER_FLATTEN, x);
        x = dense(j->net, x, CLASSES, TPU_ACT_NONE);
        output(j->net, x, TPU_LOSS_SOFTMAX_XENT);
        tpu_train_spec_default(&j->tspec);
        j->tspec.optimizer = TPU_OPT_SGD_MOMENTUM;
        j->tspec.learning_rate = 0.05f;
        j->tspec.seed = 7;
        ok(tpu_net_model(&j->model, j->net, &j->tspec, &d), &d);
    }
    const uint32_t R = CHIPS * 2 / P;
    struct tpu_build_shape shape = {.batch_per_replica = BATCH, .global_batch = BATCH * R,
                                    .n_replicas = R, .cores_per_replica = P};
    ok(j->model.build(j->model.ctx, TPU_MODE_TRAIN, &shape, &j->mp, &d), &d);
    const struct tpu_program *p = j->mp.prog;
    bool in_loop = false;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_LOOP_BEGIN || op->code == TPU_OP_LOOP_END)
            in_loop = op->code == TPU_OP_LOOP_BEGIN;
        if (op->code != TPU_OP_INFEED && op->code != TPU_OP_OUTFEED)
            continue;
        assert_true(in_loop); /* the driver feeds per step */
        if (op->code == TPU_OP_INFEED) {
            assert_true(j->n_in < MAX_FEEDS);
            j->in_core0[j->n_in] = op->attrs.core0;
            j->in_buf[j->n_in++] = op->out[0];
        } else {
            assert_true(j->n_out < MAX_FEEDS);
            j->out_buf[j->n_out++] = op->in[0];
            j->out_bytes += tpu_buffer_bytes(tpu_program_buffer(p, op->in[0]));
        }
    }
    assert_true(j->n_in >= 2);
    assert_true(j->n_out >= 1);
}

static void job_free(struct job *j)
{
    tpu_program_destroy(&j->mp.prog);
    tpu_net_destroy(&j->net);
}

/* A device of the pod: the whole (base 0, all cores) or one part. */
struct side {
    const struct job *j;
    struct tpu_device *dev;
    uint32_t base, n_cores;   /* its cores are pod cores [base, base + n_cores) */
    uint64_t global_step;
    uint64_t start, end;      /* the launch's */
    uint64_t steps;
    int rc;
    struct tpu_diag d;
    unsigned char *out;       /* [steps][n_cores][out_bytes] the last launch's outfeed */
    uint64_t *out_ready;      /* [steps][n_cores][n_out] */
};

static void side_open(struct side *s, const struct job *j, uint32_t n_chips,
                      const struct tpu_pod_link *pod)
{
    memset(s, 0, sizeof *s);
    s->j = j;
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.n_chips = n_chips;
    st.cores_per_replica = j->P;
    st.n_threads = j->n_threads;
    st.op_stats = true;
    st.share_replicas = j->share;
    st.timing_only = j->timing;
    st.pod = pod;
    s->dev = open_settings(&st);
    s->n_cores = tpu_device_n_cores(s->dev);
    s->base = pod ? pod->index * s->n_cores : 0;
    load(s->dev, j->mp.prog);
    if (j->timing)
        return;
    /* the model's initial params, each core its part (runtime.h's split layout) */
    struct tpu_diag d = {0};
    for (uint32_t i = 0; i < j->mp.n_params; i++) {
        const uint32_t b = j->mp.params[i];
        const struct tpu_buffer_desc *bd = tpu_program_buffer(j->mp.prog, b);
        const enum tpu_param_split split = j->mp.param_split[i];
        const uint32_t rows = split == TPU_SPLIT_ROWS ? j->mp.param_full[i] : bd->rows;
        const uint32_t cols = split == TPU_SPLIT_COLS ? j->mp.param_full[i] : bd->cols;
        float *full = calloc((size_t)rows * cols, sizeof *full);
        float *part = calloc((size_t)bd->rows * bd->cols, sizeof *part);
        assert_non_null(full);
        assert_non_null(part);
        j->model.init_param(j->model.ctx, bd->name, rows, cols, full, 7);
        for (uint32_t c = 0; c < s->n_cores; c++) {
            const uint32_t k = (s->base + c) % j->P;
            for (uint32_t r = 0; r < bd->rows; r++)
                for (uint32_t q = 0; q < bd->cols; q++) {
                    uint64_t fr = r, fc = q;
                    if (split == TPU_SPLIT_ROWS)
                        fr += (uint64_t)k * bd->rows;
                    else if (split == TPU_SPLIT_COLS)
                        fc += (uint64_t)k * bd->cols;
                    part[(size_t)r * bd->cols + q] =
                        fr < rows && fc < cols ? full[fr * cols + fc] : 0.0f;
                }
            ok(tpu_device_write(s->dev, c, b, part, tpu_buffer_bytes(bd), &d), &d);
        }
        free(full);
        free(part);
    }
}

static void side_close(struct side *s)
{
    tpu_device_close(&s->dev);
    free(s->out);
    free(s->out_ready);
}

/* Pod core g's infeed tensor t at global step `step`: features in [-1, 1), labels classes. */
static void fill(const struct job *j, uint32_t t, uint32_t g, uint64_t step, void *data)
{
    const struct tpu_buffer_desc *bd = tpu_program_buffer(j->mp.prog, j->in_buf[t]);
    const size_t n = (size_t)bd->rows * bd->cols;
    for (size_t i = 0; i < n; i++) {
        const uint64_t h = tpu__mix64(((step * MAX_CORES + g) * MAX_FEEDS + t) * 100003u + i);
        if (bd->dtype == TPU_INT32)
            ((int32_t *)data)[i] = (int32_t)(h % CLASSES);
        else
            ((float *)data)[i] = (float)(h >> 40) / (float)(1u << 23) - 1.0f;
    }
}

static void *feeder(void *arg)
{
    struct side *s = arg;
    const struct job *j = s->j;
    unsigned char *buf = malloc(65536);
    assert_non_null(buf);
    for (uint64_t st = 0; st < s->steps; st++)
        for (uint32_t c = 0; c < s->n_cores; c++)
            for (uint32_t t = 0; t < j->n_in; t++) {
                const uint32_t g = s->base + c;
                if (j->in_core0[t] && g % j->P != 0)
                    continue;
                const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(j->mp.prog,
                                                                         j->in_buf[t]));
                assert_true(bytes <= 65536);
                if (!j->timing)
                    fill(j, t, g, s->global_step + st, buf);
                /* the host sends some cores' data later: they reach the all-reduces last,
                 * on one part or another (the pod's start is the latest arrival anywhere) */
                const uint64_t host_cycle = s->start + ((g * 7 + st) % 5) * 4000;
                struct tpu_diag d = {0};
                if (tpu_device_infeed(s->dev, c, j->timing ? NULL : buf, bytes, host_cycle,
                                      &d) != 0) {
                    free(buf);
                    return NULL; /* the run failed: its error is the run's */
                }
            }
    free(buf);
    return NULL;
}

static void *drainer(void *arg)
{
    struct side *s = arg;
    const struct job *j = s->j;
    for (uint64_t st = 0; st < s->steps; st++)
        for (uint32_t c = 0; c < s->n_cores; c++) {
            unsigned char *o = s->out + (st * s->n_cores + c) * j->out_bytes;
            for (uint32_t t = 0; t < j->n_out; t++) {
                const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(j->mp.prog,
                                                                         j->out_buf[t]));
                struct tpu_diag d = {0};
                if (tpu_device_outfeed(s->dev, c, o, bytes, 0,
                                       &s->out_ready[(st * s->n_cores + c) * j->n_out + t],
                                       &d) != 0)
                    return NULL;
                o += bytes;
            }
        }
    return NULL;
}

/* One launch of `steps` steps from s->start, fed and drained on two threads. */
static void *launch(void *arg)
{
    struct side *s = arg;
    const struct job *j = s->j;
    free(s->out);
    free(s->out_ready);
    s->out = calloc(s->steps * s->n_cores, j->out_bytes);
    s->out_ready = calloc(s->steps * s->n_cores * j->n_out, sizeof *s->out_ready);
    assert_non_null(s->out);
    assert_non_null(s->out_ready);
    assert_int_equal(tpu_device_set_var(s->dev, j->mp.var_iterations, (int64_t)s->steps), 0);
    assert_int_equal(tpu_device_set_var(s->dev, j->mp.var_step, (int64_t)s->global_step), 0);
    pthread_t tf, td;
    assert_int_equal(pthread_create(&tf, NULL, feeder, s), 0);
    assert_int_equal(pthread_create(&td, NULL, drainer, s), 0);
    memset(&s->d, 0, sizeof s->d);
    s->rc = tpu_device_run(s->dev, s->start, &s->end, &s->d);
    if (s->rc)
        tpu_device_cancel(s->dev); /* releases the feeder and the drainer */
    pthread_join(tf, NULL);
    pthread_join(td, NULL);
    if (s->rc)
        tpu_device_reset_cancel(s->dev);
    s->global_step += s->steps;
    return NULL;
}

/* Asserts that part p's cores hold what the whole device's cores [p.base, ...) hold. */
static void assert_part_same(const struct side *whole, const struct side *part,
                             const char *when)
{
    const struct job *j = whole->j;
    const struct tpu_program *prog = j->mp.prog;
    struct tpu_diag d = {0};
    for (uint32_t c = 0; c < part->n_cores; c++) {
        const uint32_t g = part->base + c;
        if (!j->timing) {
            for (uint32_t b = 0; b < tpu_program_n_buffers(prog); b++) {
                const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, b);
                if (bd->kind != TPU_BUF_PARAM)
                    continue;
                const size_t bytes = tpu_buffer_bytes(bd);
                unsigned char *x = malloc(bytes), *y = malloc(bytes);
                assert_non_null(x);
                assert_non_null(y);
                ok(tpu_device_read(whole->dev, g, b, x, bytes, &d), &d);
                ok(tpu_device_read(part->dev, c, b, y, bytes, &d), &d);
                if (memcmp(x, y, bytes) != 0) {
                    size_t i = 0;
                    while (x[i] == y[i])
                        i++;
                    fail_msg("%s: param '%s' of pod core %u differs first at byte %zu of %zu",
                             when, bd->name, g, i, bytes);
                }
                free(x);
                free(y);
            }
        }
        for (uint64_t st = 0; st < part->steps; st++) {
            const size_t ob = j->out_bytes;
            if (memcmp(whole->out + (st * whole->n_cores + g) * ob,
                       part->out + (st * part->n_cores + c) * ob, ob) != 0)
                fail_msg("%s: pod core %u's outfeed of step %llu differs", when, g,
                         (unsigned long long)st);
            for (uint32_t t = 0; t < j->n_out; t++) {
                const uint64_t a = whole->out_ready[(st * whole->n_cores + g) * j->n_out + t];
                const uint64_t b = part->out_ready[(st * part->n_cores + c) * j->n_out + t];
                if (a != b)
                    fail_msg("%s: pod core %u's outfeed %u of step %llu reached the host at "
                             "cycle %llu, on one device at %llu", when, g, t,
                             (unsigned long long)st, (unsigned long long)b,
                             (unsigned long long)a);
            }
        }
        struct tpu_core_counters ca, cb;
        assert_int_equal(tpu_device_counters(whole->dev, g, &ca), 0);
        assert_int_equal(tpu_device_counters(part->dev, c, &cb), 0);
        if (memcmp(&ca, &cb, sizeof ca) != 0)
            fail_msg("%s: pod core %u's counters differ (cycles %llu, one device %llu; SYNC "
                     "stall %llu, one device %llu; ici bytes %llu, one device %llu)", when, g,
                     (unsigned long long)cb.cycles, (unsigned long long)ca.cycles,
                     (unsigned long long)cb.stall[TPU_STALL_SYNC],
                     (unsigned long long)ca.stall[TPU_STALL_SYNC],
                     (unsigned long long)cb.ici_bytes, (unsigned long long)ca.ici_bytes);
        assert_true(ca.busy[TPU_UNIT_ICI] > 0); /* the all-reduces ran */
        const size_t n_ops = tpu_program_n_ops(prog);
        struct tpu_op_stats *sa = calloc(n_ops, sizeof *sa), *sb = calloc(n_ops, sizeof *sb);
        assert_non_null(sa);
        assert_non_null(sb);
        ok(tpu_device_op_stats(whole->dev, g, sa, n_ops, &d), &d);
        ok(tpu_device_op_stats(part->dev, c, sb, n_ops, &d), &d);
        for (size_t i = 0; i < n_ops; i++)
            if (memcmp(&sa[i], &sb[i], sizeof sa[i]) != 0)
                fail_msg("%s: pod core %u, op %zu: statistics differ", when, g, i);
        free(sa);
        free(sb);
    }
}

/* The job on one device and on n parts, launch by launch. */
static void same_as_one_device(enum model_kind kind, uint32_t P, uint32_t n, bool share,
                               bool timing, unsigned n_threads)
{
    struct job j;
    job_build(&j, kind, P, share, timing);
    j.n_threads = n_threads;
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(n, &pt), 0);
    struct side whole, parts[4];
    side_open(&whole, &j, CHIPS, NULL);
    void *args[4];
    for (uint32_t h = 0; h < n; h++) {
        side_open(&parts[h], &j, CHIPS / n, pod_threads_link(pt, h));
        assert_int_equal(tpu_device_n_cores(parts[h].dev), 2 * CHIPS / n);
        assert_int_equal(tpu_device_n_replicas(parts[h].dev), 2 * CHIPS / n / P);
        assert_ptr_equal(tpu_device_pod(parts[h].dev), pod_threads_link(pt, h));
        args[h] = &parts[h];
    }
    const uint64_t steps[LAUNCHES] = {1, 2, 3};
    for (int l = 0; l < LAUNCHES; l++) {
        whole.steps = steps[l];
        launch(&whole);
        if (whole.rc)
            fail_msg("one device, launch %d: %s", l, whole.d.msg);
        for (uint32_t h = 0; h < n; h++) {
            parts[h].steps = steps[l];
            parts[h].start = whole.start;
        }
        pod_threads_run(pt, launch, args);
        char when[128];
        snprintf(when, sizeof when, "%s, replicas of %u core%s, %u parts, sharing %s, %s, %u "
                 "worker%s, launch %d of %llu steps",
                 kind == MLP ? "MLP (Adam)" : kind == CNN ? "CNN (dropout)"
                                                          : "cross-replica batch norm", P, P > 1 ? "s" : "", n,
                 share ? "on" : "off", timing ? "timing only" : "values", n_threads,
                 n_threads > 1 ? "s" : "", l, (unsigned long long)steps[l]);
        uint64_t pod_end = 0;
        for (uint32_t h = 0; h < n; h++) {
            if (parts[h].rc)
                fail_msg("%s: part %u: %s", when, h, parts[h].d.msg);
            pod_end = parts[h].end > pod_end ? parts[h].end : pod_end;
            /* each part ends where its cores end on the one device */
            uint64_t mine = 0;
            for (uint32_t c = 0; c < parts[h].n_cores; c++) {
                struct tpu_core_counters k;
                tpu_device_counters(whole.dev, parts[h].base + c, &k);
                mine = k.cycles > mine ? k.cycles : mine;
            }
            assert_int_equal(parts[h].end, mine);
            assert_part_same(&whole, &parts[h], when);
        }
        assert_int_equal(pod_end, whole.end);
        assert_true(whole.end > whole.start);
        whole.start = whole.end;
    }
    for (uint32_t h = 0; h < n; h++)
        side_close(&parts[h]);
    side_close(&whole);
    pod_threads_destroy(pt);
    job_free(&j);
}

/* The cases: the model, cores per replica, parts, sharing, timing only, workers per device
 * (one: a worker never waits in the link, so two logical cores' reduces cannot starve
 * each other of workers, pod.c). */
#define POD_CASE(name, kind, P, n, share, timing, threads)                                    \
    static void test_##name(void **state)                                                     \
    {                                                                                         \
        (void)state;                                                                          \
        same_as_one_device(kind, P, n, share, timing, threads);                               \
    }
POD_CASE(mlp_p1_2parts, MLP, 1, 2, true, false, 2)
POD_CASE(mlp_p1_4parts, MLP, 1, 4, true, false, 2)
POD_CASE(mlp_p1_4parts_apart, MLP, 1, 4, false, false, 2)
POD_CASE(mlp_p2_2parts, MLP, 2, 2, true, false, 2)
POD_CASE(mlp_p2_4parts, MLP, 2, 4, true, false, 2)
POD_CASE(mlp_p2_4parts_apart, MLP, 2, 4, false, false, 2)
POD_CASE(mlp_p1_4parts_timing, MLP, 1, 4, true, true, 2)
POD_CASE(mlp_p2_2parts_timing, MLP, 2, 2, false, true, 2)
POD_CASE(cnn_p1_2parts, CNN, 1, 2, true, false, 2)
POD_CASE(cnn_p1_4parts, CNN, 1, 4, true, false, 2)
POD_CASE(cnn_p1_4parts_apart, CNN, 1, 4, false, false, 2)
POD_CASE(cnn_p2_4parts, CNN, 2, 4, true, false, 2)
POD_CASE(cnn_p2_2parts_apart, CNN, 2, 2, false, false, 2)
POD_CASE(bn_p1_4parts, BN, 1, 4, true, false, 2)
POD_CASE(bn_p1_2parts_apart, BN, 1, 2, false, false, 2)
POD_CASE(mlp_p2_4parts_1worker, MLP, 2, 4, true, false, 1)
POD_CASE(cnn_p2_2parts_1worker, CNN, 2, 2, false, false, 1)

/* ---- the sums themselves ------------------------------------------------------------------- */

enum { SPECIAL_AT = 250 }; /* elements [250, 256) of the sums below */

/* Infinities and NaNs in pod core g's x: Inf + -Inf at 250, two NaN payloads of either sign
 * at 251, a NaN meeting an infinity at 252; and -0.0 at 249 on every core (its sum and mean
 * stay -0.0). */
static void special(float *x, uint32_t g)
{
    x[SPECIAL_AT - 1] = -0.0f;
    const uint32_t bits[4] = {0x7fc00001u, 0xffc00002u, 0x7f800000u, 0xff800000u};
    float v[4];
    memcpy(v, bits, sizeof v);
    if (g == 1)
        x[SPECIAL_AT] = v[2];
    if (g == 2)
        x[SPECIAL_AT] = v[3];
    if (g == 3)
        x[SPECIAL_AT + 1] = v[0];
    if (g == 5)
        x[SPECIAL_AT + 1] = v[1];
    if (g == 4)
        x[SPECIAL_AT + 2] = v[2];
    if (g == 6)
        x[SPECIAL_AT + 2] = v[1];
}

struct bare {
    struct tpu_device *dev;
    uint64_t end;
    int rc;
    struct tpu_diag d;
};

static void *bare_run(void *arg)
{
    struct bare *b = arg;
    b->rc = tpu_device_run(b->dev, 0, &b->end, &b->d);
    return NULL;
}

/* Sums and means over the replicas, exactly as one device computes them:
 * ((x0 + x1) + x2) + ... in pod replica order, then / n for a mean, on every pod core; the
 * same cycles, SYNC stalls and ICI figures. The values are chosen so that the order of the
 * float additions matters; the last elements hold infinities and NaNs (Inf + -Inf makes one,
 * and NaNs of different payloads and signs meet), whose bits must also be one device's. */
static void test_all_reduce_exact(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program sums\nparam x: f32[1, 256]\ntemp y: f32[1, 256]\n"
                                  "y = all_reduce x reduce=sum\n"
                                  "x = all_reduce y reduce=mean\n");
    const uint32_t x = 0;
    const uint32_t parts_of[2] = {2, 4};
    for (int v = 0; v < 2; v++) {
        const uint32_t parts = parts_of[v];
        struct pod_threads *pt = NULL;
        assert_int_equal(pod_threads_create(parts, &pt), 0);
        struct tpu_device_settings st;
        tiny_settings(&st);
        st.n_chips = CHIPS;
        struct bare whole = {.dev = open_settings(&st)}, part[4];
        void *args[4];
        st.n_chips = CHIPS / parts;
        for (uint32_t h = 0; h < parts; h++) {
            st.pod = pod_threads_link(pt, h);
            part[h] = (struct bare){.dev = open_settings(&st)};
            args[h] = &part[h];
            load(part[h].dev, p);
        }
        load(whole.dev, p);
        const uint32_t per = 2 * CHIPS / parts;
        for (uint32_t g = 0; g < 2 * CHIPS; g++) {
            float xf[256];
            for (int i = 0; i < 256; i++)
                xf[i] = (g % 2 ? 1e8f : 1.0f) * ((float)(g + 1) * 0.37f + (float)i * 1e-3f);
            special(xf, g);
            struct tpu_device *pd = part[g / per].dev;
            assert_int_equal(tpu_device_write(whole.dev, g, x, xf, sizeof xf, NULL), 0);
            assert_int_equal(tpu_device_write(pd, g % per, x, xf, sizeof xf, NULL), 0);
        }
        bare_run(&whole);
        assert_int_equal(whole.rc, 0);
        pod_threads_run(pt, bare_run, args);
        uint64_t pod_end = 0;
        for (uint32_t h = 0; h < parts; h++) {
            if (part[h].rc)
                fail_msg("part %u: %s", h, part[h].d.msg);
            pod_end = part[h].end > pod_end ? part[h].end : pod_end;
        }
        assert_int_equal(pod_end, whole.end);
        /* the one device's sum, by hand: the float order matters with these values */
        float want[256];
        for (int i = 0; i < 256; i++) {
            float sum = 0;
            for (uint32_t g = 0; g < 2 * CHIPS; g++) {
                float xg = (g % 2 ? 1e8f : 1.0f) * ((float)(g + 1) * 0.37f + (float)i * 1e-3f);
                if (i == SPECIAL_AT - 1)
                    xg = -0.0f;
                sum = g == 0 ? xg : sum + xg;
            }
            float mean = sum;
            for (uint32_t g = 1; g < 2 * CHIPS; g++)
                mean = mean + sum;
            want[i] = mean / (float)(2 * CHIPS);
        }
        for (uint32_t g = 0; g < 2 * CHIPS; g++) {
            float a[256], b[256];
            struct tpu_device *pd = part[g / per].dev;
            assert_int_equal(tpu_device_read(whole.dev, g, x, a, sizeof a, NULL), 0);
            assert_int_equal(tpu_device_read(pd, g % per, x, b, sizeof b, NULL), 0);
            assert_memory_equal(a, want, SPECIAL_AT * sizeof *a);
            assert_memory_equal(b, a, sizeof a); /* the specials too, bit for bit */
            assert_true(isnan(b[SPECIAL_AT]) && isnan(b[SPECIAL_AT + 1]));
            uint32_t neg_zero;
            memcpy(&neg_zero, &b[SPECIAL_AT - 1], 4);
            assert_int_equal(neg_zero, 0x80000000u); /* -0.0, as one device gives */
            struct tpu_core_counters ca, cb;
            tpu_device_counters(whole.dev, g, &ca);
            tpu_device_counters(pd, g % per, &cb);
            assert_memory_equal(&ca, &cb, sizeof ca);
            assert_int_equal(cb.ici_bytes, 2 * 1024);
            assert_true(cb.busy[TPU_UNIT_ICI] > 0);
        }
        for (uint32_t h = 0; h < parts; h++)
            tpu_device_close(&part[h].dev);
        tpu_device_close(&whole.dev);
        pod_threads_destroy(pt);
    }
    tpu_program_destroy(&p);
}

/* ---- NaN sums under any split ------------------------------------------------------------- */

enum { NAN_COUNT = 65538, NAN_REPLICAS = 4 }; /* 65536 and more: reduce_range splits the work */

/* Where the test puts NaNs and infinities: the ends of the 4-wide loop, its 2- and 1-element
 * tails, of the whole buffer, of reduce_range's 2048-element blocks and of its two workers'
 * halves (split at 32769), so that each lands in the vector body of one call and in a tail of
 * another. */
static const uint32_t nan_at[] = {0,     1,     2,     3,     5,     6,     2046,  2047,
                                  2048,  2049,  32764, 32766, 32767, 32768, 32769, 32770,
                                  32771, 65532, 65533, 65534, 65535, 65536, 65537};

/* Replica r's x: finite values, and at nan_at[e] a pattern that depends on e and r: NaNs
 * of different payloads, signs and quietness, or infinities of opposite signs. */
static void nan_values(float *x, uint32_t r)
{
    for (uint32_t i = 0; i < NAN_COUNT; i++)
        x[i] = (float)(tpu__mix64(i * 8u + r) % 1000u) * 0.125f - 60.0f;
    for (uint32_t e = 0; e < sizeof nan_at / sizeof *nan_at; e++) {
        uint32_t u = 0;
        switch ((e + r) % 6) {
        case 0: u = 0x7fc00000u | (e * 16u + r + 1u); break; /* quiet, + */
        case 1: u = 0xffc00000u | (e * 16u + r + 1u); break; /* quiet, - */
        case 2: u = 0x7f800000u | (e * 16u + r + 1u); break; /* signalling */
        case 3: u = 0x7f800000u; break;                        /* +Inf */
        case 4: u = 0xff800000u; break;                        /* -Inf */
        default: continue;                                     /* finite */
        }
        memcpy(&x[nan_at[e]], &u, 4);
    }
}

/* The rule every all-reduce add follows (tpu__sum_into_f32), computed here on the bits:
 * the left operand's NaN, quieted, wins; else the right one's, quieted; else the sum (the
 * machine's default NaN for Inf + -Inf). */
static float rule_add(float a, float b)
{
    uint32_t u;
    if (a != a)
        memcpy(&u, &a, 4);
    else if (b != b)
        memcpy(&u, &b, 4);
    else
        return a + b;
    u |= 0x00400000u;
    memcpy(&a, &u, 4);
    return a;
}

/* y = all_reduce x over 4 replicas of 65538 elements with NaNs where the adds' calls split:
 * one device with 1 and 2 workers, sharing on and off, and a pod of 2 parts, all give the
 * rule's bits ((x0 + x1) + x2) + x3 on every core. Before the rule, 1 and 2 workers gave
 * different payloads (the vector loop and its tails keep different operands' NaNs). */
static void test_nan_sum_any_split(void **state)
{
    (void)state;
    char text[256];
    snprintf(text, sizeof text, "program nans\nparam x: f32[1, %u]\nparam y: f32[1, %u]\n"
             "y = all_reduce x reduce=sum\n", NAN_COUNT, NAN_COUNT);
    struct tpu_program *p = parse(text);
    uint32_t x, y;
    assert_int_equal(tpu_program_find_buffer(p, "x", &x), 0);
    assert_int_equal(tpu_program_find_buffer(p, "y", &y), 0);
    const size_t bytes = NAN_COUNT * sizeof(float);
    float *xs[NAN_REPLICAS], *want = malloc(bytes), *got = malloc(bytes);
    assert_non_null(want);
    assert_non_null(got);
    for (uint32_t r = 0; r < NAN_REPLICAS; r++) {
        assert_non_null(xs[r] = malloc(bytes));
        nan_values(xs[r], r);
    }
    for (uint32_t i = 0; i < NAN_COUNT; i++) {
        float acc = xs[0][i];
        for (uint32_t r = 1; r < NAN_REPLICAS; r++)
            acc = rule_add(acc, xs[r][i]);
        want[i] = acc;
    }
    size_t n_nan = 0;
    for (uint32_t i = 0; i < NAN_COUNT; i++)
        n_nan += want[i] != want[i];
    assert_true(n_nan >= 15); /* the cases are there */
    struct tpu_device_settings st;
    tiny_settings(&st); /* 2 cores a chip */
    for (int v = 0; v < 5; v++) {
        const uint32_t parts = v == 4 ? 2 : 1;
        struct pod_threads *pt = NULL;
        assert_int_equal(pod_threads_create(parts, &pt), 0);
        st.n_threads = v % 2 ? 2 : 1;
        st.share_replicas = v / 2 % 2 == 0;
        st.n_chips = NAN_REPLICAS / 2 / parts;
        struct bare part[2];
        void *args[2];
        for (uint32_t h = 0; h < parts; h++) {
            st.pod = parts > 1 ? pod_threads_link(pt, h) : NULL;
            part[h] = (struct bare){.dev = open_settings(&st)};
            args[h] = &part[h];
            load(part[h].dev, p);
        }
        const uint32_t per = NAN_REPLICAS / parts;
        for (uint32_t r = 0; r < NAN_REPLICAS; r++)
            assert_int_equal(tpu_device_write(part[r / per].dev, r % per, x, xs[r], bytes,
                                              NULL), 0);
        pod_threads_run(pt, bare_run, args);
        for (uint32_t h = 0; h < parts; h++)
            if (part[h].rc)
                fail_msg("part %u: %s", h, part[h].d.msg);
        for (uint32_t r = 0; r < NAN_REPLICAS; r++) {
            assert_int_equal(tpu_device_read(part[r / per].dev, r % per, y, got, bytes, NULL),
                             0);
            for (uint32_t i = 0; i < NAN_COUNT; i++) {
                uint32_t a, b;
                memcpy(&a, &got[i], 4);
                memcpy(&b, &want[i], 4);
                if (a != b)
                    fail_msg("%u worker(s), sharing %s, %u part(s): replica %u's y[%u] is "
                             "0x%08x, the rule gives 0x%08x", st.n_threads,
                             st.share_replicas ? "on" : "off", parts, r, i, a, b);
            }
        }
        for (uint32_t h = 0; h < parts; h++)
            tpu_device_close(&part[h].dev);
        pod_threads_destroy(pt);
    }
    for (uint32_t r = 0; r < NAN_REPLICAS; r++)
        free(xs[r]);
    free(want);
    free(got);
    tpu_program_destroy(&p);
}

/* ---- the edges ------------------------------------------------------------------------------ */

static int no_max(void *ctx, uint32_t group, uint64_t *value, struct tpu_diag *d)
{
    (void)group;
    (void)value;
    (void)d;
    ++*(int *)ctx;
    return TPU_EIO;
}

static int no_data(void *ctx, uint32_t group, void *data, size_t bytes, struct tpu_diag *d)
{
    (void)group;
    (void)data;
    (void)bytes;
    (void)d;
    ++*(int *)ctx;
    return TPU_EIO;
}

static int no_send(void *ctx, uint32_t group, const void *data, size_t bytes,
                   struct tpu_diag *d)
{
    return no_data(ctx, group, (void *)(uintptr_t)data, bytes, d);
}

/* A link whose every entry counts its call and fails. */
static struct tpu_pod_link counting_link(int *calls, uint32_t parts, uint32_t index)
{
    return (struct tpu_pod_link){.ctx = calls, .parts = parts, .index = index,
                                 .max_u64 = no_max, .recv_prev = no_data,
                                 .send_next = no_send, .bcast_last = no_data};
}

static void expect_open_refused(const struct tpu_pod_link *pod, const char *what)
{
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.pod = pod;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_open(&st, &dev, &d), TPU_EINVAL);
    assert_null(dev);
    if (!strstr(d.msg, what))
        fail_msg("expected \"%s\" in: %s", what, d.msg);
}

static void test_bad_pods(void **state)
{
    (void)state;
    int calls = 0;
    struct tpu_pod_link l = counting_link(&calls, 0, 0);
    expect_open_refused(&l, "settings.pod->parts is 0; a pod has 1 to 4096 parts (one per "
                            "host): set it to the number of hosts");
    l = counting_link(&calls, 4097, 0);
    expect_open_refused(&l, "settings.pod->parts is 4097; a pod has 1 to 4096 parts");
    l = counting_link(&calls, 2, 2);
    expect_open_refused(&l, "settings.pod->index is 2, but the pod has 2 parts; set it to "
                            "this device's host, 0 to 1");
    const char *names[4] = {"max_u64", "recv_prev", "send_next", "bcast_last"};
    for (int i = 0; i < 4; i++) {
        l = counting_link(&calls, 2, 1);
        if (i == 0)
            l.max_u64 = NULL;
        else if (i == 1)
            l.recv_prev = NULL;
        else if (i == 2)
            l.send_next = NULL;
        else
            l.bcast_last = NULL;
        char want[128];
        snprintf(want, sizeof want, "settings.pod->%s is NULL; a pod link needs all four "
                 "entries (max_u64, recv_prev, send_next, bcast_last): give it one", names[i]);
        expect_open_refused(&l, want);
    }
    assert_int_equal(calls, 0);
    /* the largest pod is fine */
    l = counting_link(&calls, 4096, 4095);
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.pod = &l;
    struct tpu_device *dev = open_settings(&st);
    assert_ptr_equal(tpu_device_pod(dev), &l);
    assert_int_equal(tpu_device_n_cores(dev), 2); /* its own cores only */
    assert_int_equal(tpu_device_n_replicas(dev), 2);
    tpu_device_close(&dev);
}

/* A pod of one part is the whole pod: the same bytes, counters and cycles as no pod, and the
 * link (whose entries would fail) is never called. */
static void test_one_part_is_no_pod(void **state)
{
    (void)state;
    const bool timing[2] = {false, true};
    for (int t = 0; t < 2; t++) {
        struct job j;
        job_build(&j, MLP, 2, true, timing[t]);
        int calls = 0;
        struct tpu_pod_link l = counting_link(&calls, 1, 0);
        struct side whole, one;
        side_open(&whole, &j, CHIPS, NULL);
        side_open(&one, &j, CHIPS, &l);
        for (int launches = 0; launches < 2; launches++) {
            whole.steps = one.steps = 2;
            one.start = whole.start;
            launch(&whole);
            launch(&one);
            if (whole.rc || one.rc)
                fail_msg("%s / %s", whole.d.msg, one.d.msg);
            assert_part_same(&whole, &one, timing[t] ? "one part, timing only" : "one part");
            assert_int_equal(one.end, whole.end);
            whole.start = whole.end;
        }
        assert_int_equal(calls, 0);
        side_close(&whole);
        side_close(&one);
        job_free(&j);
    }
}

static void test_permute_over_replicas_refused(void **state)
{
    (void)state;
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.cores_per_replica = 2;
    st.pod = pod_threads_link(pt, 1);
    struct tpu_device *dev = open_settings(&st);
    struct tpu_program *ok_prog = parse("program fine\nparam x: f32[1, 8]\ntemp y: f32[1, 8]\n"
                                        "y = collective_permute x shift=1 group=replica_cores\n"
                                        "x = all_reduce y reduce=sum\n");
    struct tpu_program *bad = parse("program across\nparam x: f32[1, 8]\ntemp y: f32[1, 8]\n"
                                    "y = collective_permute x shift=1 group=replicas\n");
    load(dev, ok_prog); /* within a replica, and an all_reduce across the pod: fine */
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_load(dev, bad, &d), TPU_EUNSUPPORTED);
    const char *want = "program 'across', op 0 'y = collective_permute x shift=1 group=replicas': "
                       "a collective_permute over the replicas moves data between replicas of "
                       "different parts of the pod, which the pod link does not carry (this "
                       "device is part 1 of 2); permute within a replica "
                       "(group=replica_cores), or run the program on one device of the whole "
                       "pod (settings.pod NULL)";
    if (strcmp(d.msg, want) != 0)
        fail_msg("got: %s", d.msg);
    /* refused at load: the earlier program stays */
    assert_non_null(tpu_device_program(dev));
    assert_string_equal(tpu_program_name(tpu_device_program(dev)), "fine");
    tpu_device_close(&dev);
    /* a pod of one part has nothing to cross */
    int calls = 0;
    struct tpu_pod_link one = counting_link(&calls, 1, 0);
    st.pod = &one;
    dev = open_settings(&st);
    load(dev, bad);
    tpu_device_close(&dev);
    tpu_program_destroy(&ok_prog);
    tpu_program_destroy(&bad);
    pod_threads_destroy(pt);
}

static void test_systemc_refuses_a_pod(void **state)
{
    (void)state;
#ifdef TPUSIM_TEST_SYSTEMC
    int calls = 0;
    struct tpu_pod_link l = counting_link(&calls, 2, 1);
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.backend = tpu_device_backend_systemc();
    st.pod = &l;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_device_open(&st, &dev, &d), TPU_EUNSUPPORTED);
    assert_null(dev);
    assert_string_equal(d.msg, "the systemc backend simulates one whole device: it cannot be "
                               "part 1 of a pod of 2 devices (settings.pod), whose all-reduces "
                               "cross to the other parts; leave settings.pod NULL, or open the "
                               "part on the native backend");
    /* and it opens without the pod */
    st.pod = NULL;
    dev = open_settings(&st);
    tpu_device_close(&dev);
#else
    skip(); /* a build without the SystemC model (-Dsystemc=disabled) */
#endif
}

/* A link whose max_u64 fails on part 1 after `ok_calls` good calls. */
struct flaky {
    struct tpu_pod_link link; /* the wrapped entries call `inner` */
    const struct tpu_pod_link *inner;
    atomic_int ok_calls; /* the lanes of different logical cores call at once */
};

static int flaky_max(void *ctx, uint32_t group, uint64_t *value, struct tpu_diag *d)
{
    struct flaky *f = ctx;
    if (atomic_fetch_sub(&f->ok_calls, 1) <= 0) {
        snprintf(d->msg, sizeof d->msg, "the test's link to part 0 is down");
        d->code = TPU_EIO;
        return TPU_EIO;
    }
    return f->inner->max_u64(f->inner->ctx, group, value, d);
}

static int flaky_recv(void *ctx, uint32_t group, void *data, size_t bytes, struct tpu_diag *d)
{
    struct flaky *f = ctx;
    return f->inner->recv_prev(f->inner->ctx, group, data, bytes, d);
}

static int flaky_send(void *ctx, uint32_t group, const void *data, size_t bytes,
                      struct tpu_diag *d)
{
    struct flaky *f = ctx;
    return f->inner->send_next(f->inner->ctx, group, data, bytes, d);
}

static int flaky_bcast(void *ctx, uint32_t group, void *data, size_t bytes, struct tpu_diag *d)
{
    struct flaky *f = ctx;
    return f->inner->bcast_last(f->inner->ctx, group, data, bytes, d);
}

struct failing_part {
    struct side s;
    const struct tpu_host_group *group;
};

/* A part's launch; a failure ends the pod (the runtime's pass failure does the same). */
static void *launch_or_abort(void *arg)
{
    struct failing_part *fp = arg;
    launch(&fp->s);
    if (fp->s.rc)
        fp->group->abort(fp->group->ctx, fp->s.rc, &fp->s.d);
    return NULL;
}

static void test_failing_link_fails_the_run(void **state)
{
    (void)state;
    const uint32_t P[2] = {1, 2};
    for (int v = 0; v < 2; v++) {
        struct job j;
        job_build(&j, MLP, P[v], true, false);
        struct pod_threads *pt = NULL;
        assert_int_equal(pod_threads_create(2, &pt), 0);
        struct flaky f = {.inner = pod_threads_link(pt, 1)};
        atomic_init(&f.ok_calls, 3);
        f.link = (struct tpu_pod_link){.ctx = &f, .parts = 2, .index = 1,
                                       .max_u64 = flaky_max, .recv_prev = flaky_recv,
                                       .send_next = flaky_send, .bcast_last = flaky_bcast};
        struct failing_part fp[2];
        side_open(&fp[0].s, &j, CHIPS / 2, pod_threads_link(pt, 0));
        side_open(&fp[1].s, &j, CHIPS / 2, &f.link);
        void *args[2];
        for (uint32_t h = 0; h < 2; h++) {
            fp[h].group = pod_threads_group(pt, h);
            fp[h].s.steps = 4;
            args[h] = &fp[h];
        }
        pod_threads_run(pt, launch_or_abort, args);
        assert_int_equal(fp[1].s.rc, TPU_EIO);
        if (!strstr(fp[1].s.d.msg, "across the pod's 2 parts (this is part 1): the test's link "
                                   "to part 0 is down"))
            fail_msg("part 1: %s", fp[1].s.d.msg);
        assert_int_equal(fp[0].s.rc, TPU_ECANCELED);
        if (!strstr(fp[0].s.d.msg, "host 1 failed: op ") ||
            !strstr(fp[0].s.d.msg, "the test's link to part 0 is down"))
            fail_msg("part 0: %s", fp[0].s.d.msg);
        side_close(&fp[0].s);
        side_close(&fp[1].s);
        pod_threads_destroy(pt);
        job_free(&j);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A part canceled while its lane waits in a link call (its peer never runs): the link's
 * abort entry ends the call, so the run returns promptly with TPU_ECANCELED, and the peer's
 * later run fails at once with the part's sentence instead of waiting. Without the entry the
 * cancel waited for the call forever. */
static void test_cancel_releases_the_pod(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program sums\nparam x: f32[1, 8]\nparam y: f32[1, 8]\n"
                                  "y = all_reduce x reduce=sum\n");
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    struct tpu_device_settings st;
    tiny_settings(&st);
    st.n_chips = 1;
    struct bare part[2];
    for (uint32_t h = 0; h < 2; h++) {
        st.pod = pod_threads_link(pt, h);
        part[h] = (struct bare){.dev = open_settings(&st)};
        load(part[h].dev, p);
    }
    pthread_t th;
    const double t0 = now_s();
    assert_int_equal(pthread_create(&th, NULL, bare_run, &part[0]), 0);
    /* until its lane is in the link (cores_blocked stays false: a lane is busy) */
    struct tpu_device_watch w;
    do {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
        memset(&w, 0, sizeof w);
        tpu_device_watch(part[0].dev, &w);
    } while (!strstr(w.why, "core 1 waits at a collective") && now_s() - t0 < 20.0);
    assert_false(w.cores_blocked);
    tpu_device_cancel(part[0].dev);
    pthread_join(th, NULL);
    assert_true(now_s() - t0 < 20.0);
    assert_int_equal(part[0].rc, TPU_ECANCELED);
    bare_run(&part[1]);
    assert_int_equal(part[1].rc, TPU_ECANCELED);
    if (!strstr(part[1].d.msg, "host 0 failed: part 0 of the pod stopped its run"))
        fail_msg("part 1: %s", part[1].d.msg);
    for (uint32_t h = 0; h < 2; h++)
        tpu_device_close(&part[h].dev);
    pod_threads_destroy(pt);
    tpu_program_destroy(&p);
}

/* Parts with different replica counts (2 and 4 of one core): the first reduce refuses it on
 * every part, naming both counts and the fix, instead of a wrong mean and wrong cycles. */
static void test_parts_differ(void **state)
{
    (void)state;
    struct tpu_program *p = parse("program sums\nparam x: f32[1, 8]\nparam y: f32[1, 8]\n"
                                  "y = all_reduce x reduce=mean\n");
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    struct tpu_device_settings st;
    tiny_settings(&st);
    struct bare part[2];
    void *args[2];
    for (uint32_t h = 0; h < 2; h++) {
        st.n_chips = h + 1;
        st.pod = pod_threads_link(pt, h);
        part[h] = (struct bare){.dev = open_settings(&st)};
        args[h] = &part[h];
        load(part[h].dev, p);
    }
    pod_threads_run(pt, bare_run, args);
    const char *want[2] = {"this part has 2 replicas of 1 cores, but the pod's parts range "
                           "from 2 replicas of 1 cores to 4 of 1: every part of a pod has the "
                           "same replicas; open each with the same n_chips and "
                           "cores_per_replica",
                           "this part has 4 replicas of 1 cores, but the pod's parts range "
                           "from 2 replicas of 1 cores to 4 of 1"};
    for (uint32_t h = 0; h < 2; h++) {
        assert_int_equal(part[h].rc, TPU_EINVAL);
        if (!strstr(part[h].d.msg, want[h]))
            fail_msg("part %u: expected \"%s\" in: %s", h, want[h], part[h].d.msg);
        tpu_device_close(&part[h].dev);
    }
    pod_threads_destroy(pt);
    tpu_program_destroy(&p);
}

/* pod_threads itself: rounds of different groups at once, the chain's order, a gather. */
struct pt_arg {
    struct pod_threads *pt;
    uint32_t h, n;
    int rc;
};

static void *pt_worker(void *arg)
{
    struct pt_arg *a = arg;
    const struct tpu_pod_link *l = pod_threads_link(a->pt, a->h);
    const struct tpu_host_group *g = pod_threads_group(a->pt, a->h);
    struct tpu_diag d = {0};
    for (uint32_t round = 0; round < 50 && !a->rc; round++) {
        for (uint32_t k = 0; k < 2 && !a->rc; k++) {
            uint64_t v = (a->h * 7 + round + k) % 5;
            a->rc = l->max_u64(l->ctx, k, &v, &d);
            uint64_t want = 0;
            for (uint32_t h = 0; h < a->n; h++)
                want = (h * 7 + round + k) % 5 > want ? (h * 7 + round + k) % 5 : want;
            if (!a->rc && v != want)
                a->rc = -100;
            /* the chain: each part appends its index */
            uint32_t seq[8] = {0};
            if (!a->rc && a->h > 0)
                a->rc = l->recv_prev(l->ctx, k, seq, sizeof seq, &d);
            seq[a->h] = a->h + 1 + round;
            if (!a->rc && a->h + 1 < a->n)
                a->rc = l->send_next(l->ctx, k, seq, sizeof seq, &d);
            if (!a->rc)
                a->rc = l->bcast_last(l->ctx, k, seq, sizeof seq, &d);
            for (uint32_t h = 0; h < a->n && !a->rc; h++)
                if (seq[h] != h + 1 + round)
                    a->rc = -101;
        }
        uint64_t mine = a->h * 1000 + round, all[8];
        if (!a->rc)
            a->rc = g->allgather(g->ctx, &mine, sizeof mine, all, &d);
        for (uint32_t h = 0; h < a->n && !a->rc; h++)
            if (all[h] != h * 1000 + round)
                a->rc = -102;
    }
    return NULL;
}

static void test_pod_threads_rounds(void **state)
{
    (void)state;
    for (uint32_t n = 1; n <= 4; n++) {
        struct pod_threads *pt = NULL;
        assert_int_equal(pod_threads_create(n, &pt), 0);
        struct pt_arg a[4];
        void *args[4];
        for (uint32_t h = 0; h < n; h++) {
            a[h] = (struct pt_arg){.pt = pt, .h = h, .n = n};
            args[h] = &a[h];
        }
        pod_threads_run(pt, pt_worker, args);
        for (uint32_t h = 0; h < n; h++)
            assert_int_equal(a[h].rc, 0);
        pod_threads_destroy(pt);
    }
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(0, &pt), TPU_EINVAL);
    assert_int_equal(pod_threads_create(4097, &pt), TPU_EINVAL);
}

/* The abort releases a part blocked in a round, and every later call fails at once. */
static void *pt_blocked(void *arg)
{
    struct pt_arg *a = arg;
    struct tpu_diag d = {0};
    if (a->h == 0) {
        const struct tpu_pod_link *l = pod_threads_link(a->pt, 0);
        uint64_t v = 1;
        a->rc = l->max_u64(l->ctx, 0, &v, &d); /* part 1 never comes */
        if (a->rc == TPU_ECANCELED && strcmp(d.msg, "host 1 failed: the test gave up") != 0)
            a->rc = -103;
        char buf[4];
        if (l->recv_prev(l->ctx, 0, buf, 4, &d) != TPU_EINVAL) /* part 0 has no previous */
            a->rc = -104;
    } else {
        const struct tpu_host_group *g = pod_threads_group(a->pt, 1);
        nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
        struct tpu_diag why = {.code = TPU_EIO};
        snprintf(why.msg, sizeof why.msg, "the test gave up");
        g->abort(g->ctx, TPU_EIO, &why);
        uint64_t x = 0;
        a->rc = g->allgather(g->ctx, &x, sizeof x, &x, &d);
    }
    return NULL;
}

static void test_pod_threads_abort(void **state)
{
    (void)state;
    struct pod_threads *pt = NULL;
    assert_int_equal(pod_threads_create(2, &pt), 0);
    struct pt_arg a[2] = {{.pt = pt, .h = 0, .n = 2}, {.pt = pt, .h = 1, .n = 2}};
    void *args[2] = {&a[0], &a[1]};
    pod_threads_run(pt, pt_blocked, args);
    assert_int_equal(a[0].rc, TPU_ECANCELED);
    assert_int_equal(a[1].rc, TPU_ECANCELED);
    pod_threads_destroy(pt);
    pod_threads_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_threads_rounds),
        cmocka_unit_test(test_pod_threads_abort),
        cmocka_unit_test(test_all_reduce_exact),
        cmocka_unit_test(test_nan_sum_any_split),
        cmocka_unit_test(test_bad_pods),
        cmocka_unit_test(test_one_part_is_no_pod),
        cmocka_unit_test(test_permute_over_replicas_refused),
        cmocka_unit_test(test_systemc_refuses_a_pod),
        cmocka_unit_test(test_failing_link_fails_the_run),
        cmocka_unit_test(test_cancel_releases_the_pod),
        cmocka_unit_test(test_parts_differ),
        cmocka_unit_test(test_mlp_p1_2parts),
        cmocka_unit_test(test_mlp_p1_4parts),
        cmocka_unit_test(test_mlp_p1_4parts_apart),
        cmocka_unit_test(test_mlp_p2_2parts),
        cmocka_unit_test(test_mlp_p2_4parts),
        cmocka_unit_test(test_mlp_p2_4parts_apart),
        cmocka_unit_test(test_mlp_p1_4parts_timing),
        cmocka_unit_test(test_mlp_p2_2parts_timing),
        cmocka_unit_test(test_cnn_p1_2parts),
        cmocka_unit_test(test_cnn_p1_4parts),
        cmocka_unit_test(test_cnn_p1_4parts_apart),
        cmocka_unit_test(test_cnn_p2_4parts),
        cmocka_unit_test(test_cnn_p2_2parts_apart),
        cmocka_unit_test(test_bn_p1_4parts),
        cmocka_unit_test(test_bn_p1_2parts_apart),
        cmocka_unit_test(test_mlp_p2_4parts_1worker),
        cmocka_unit_test(test_cnn_p2_2parts_1worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
