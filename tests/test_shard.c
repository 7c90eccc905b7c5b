/* The shard plan (shard.h): TPU infeed's split arithmetic on TPU's own examples, the order
 * of the parts over logical cores, the input_fn calls of every input mode, every rule's
 * message, and the input_partition_dims parser. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "tpusim/shard.h"

/* A spec of hosts x chips x cores, cpr cores per replica, the input mode and a batch;
 * one tensor "x" of per-example shape {a} (1-D), no partition dims. */
static struct tpu_shard_spec spec(uint32_t hosts, uint32_t chips, uint32_t cores, uint32_t cpr,
                                  enum tpu_input_mode in, enum tpu_mode mode, uint32_t batch)
{
    struct tpu_shard_spec s;
    memset(&s, 0, sizeof s);
    s.hosts = hosts;
    s.chips_per_host = chips;
    s.cores_per_chip = cores;
    s.num_cores_per_replica = cpr;
    s.train_input = in;
    s.eval_input = TPU_EVAL_PER_HOST_V1;
    s.mode = mode;
    s.global_batch = batch;
    return s;
}

static void add_tensor(struct tpu_shard_spec *s, const char *name, uint32_t rank,
                       const uint64_t *shape, uint32_t dims_rank, const uint32_t *dims)
{
    struct tpu_shard_tensor *t = &s->tensors[s->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->dims.rank = dims_rank;
    for (uint32_t i = 0; i < dims_rank; i++)
        t->dims.dims[i] = dims[i];
}

/* The plan must fail with a message containing every one of the NULL-ended parts. */
static void expect_fail(const struct tpu_shard_spec *s, ...)
{
    struct tpu_shard_plan p;
    struct tpu_diag d = {0};
    int rc = tpu_shard_plan_make(s, &p, &d);
    if (rc == 0)
        fail_msg("the plan was made; an error was expected");
    assert_int_equal(rc, TPU_EINVAL);
    assert_null(p.calls);
    assert_int_equal(p.n_calls, 0);
    va_list ap;
    va_start(ap, s);
    for (const char *part; (part = va_arg(ap, const char *));)
        if (!strstr(d.msg, part))
            fail_msg("message \"%s\" lacks \"%s\"", d.msg, part);
    va_end(ap);
}

static void make(const struct tpu_shard_spec *s, struct tpu_shard_plan *p)
{
    struct tpu_diag d = {0};
    int rc = tpu_shard_plan_make(s, p, &d);
    if (rc)
        fail_msg("plan failed: %s", d.msg);
}

/* The parts of a dimension of size n over p cores: a 1-D example of n with dims [1, p]. */
static void parts_of(uint64_t n, uint32_t p, uint64_t *sizes, uint64_t *padded)
{
    struct tpu_shard_spec s = spec(1, 1, p, p, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 2);
    const uint32_t dims[2] = {1, p};
    add_tensor(&s, "x", 1, &n, 2, dims);
    struct tpu_shard_plan plan;
    make(&s, &plan);
    uint64_t at = 0;
    for (uint32_t k = 0; k < p; k++) {
        struct tpu_shard_slice sl;
        struct tpu_diag d = {0};
        assert_int_equal(tpu_shard_slice_of(&s, &plan, 0, k, &sl, &d), 0);
        assert_true(sl.receives);
        assert_int_equal(sl.rank, 2);
        /* the batch dimension is whole (2 rows per replica on 1 replica) */
        assert_int_equal(sl.begin[0], 0);
        assert_int_equal(sl.end[0], 2);
        /* parts are consecutive and cover [0, n) */
        assert_int_equal(sl.begin[1], at);
        assert_true(sl.end[1] >= sl.begin[1]);
        sizes[k] = sl.end[1] - sl.begin[1];
        at = sl.end[1];
        padded[k] = sl.padded[1];
    }
    assert_int_equal(at, n);
    tpu_shard_plan_free(&plan);
}

static void test_split_arithmetic(void **state)
{
    (void)state;
    static const struct {
        uint64_t n;
        uint32_t p;
        uint64_t want[8];
        uint64_t padded;
    } cases[] = {
        {5, 2, {3, 2}, 3},
        {14, 4, {4, 4, 4, 2}, 4},
        {10, 4, {3, 3, 3, 1}, 3},
        {9, 4, {3, 3, 3, 0}, 3},
        {28, 8, {4, 4, 4, 4, 4, 4, 4, 0}, 4},
        {8, 4, {2, 2, 2, 2}, 2},
        {2, 4, {1, 1, 0, 0}, 1},
        {1, 2, {1, 0}, 1},
        {7, 8, {1, 1, 1, 1, 1, 1, 1, 0}, 1},
        {17, 8, {3, 3, 3, 3, 3, 2, 0, 0}, 3},
        {28, 2, {14, 14}, 14},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t sizes[8], padded[8];
        parts_of(cases[c].n, cases[c].p, sizes, padded);
        for (uint32_t k = 0; k < cases[c].p; k++) {
            if (sizes[k] != cases[c].want[k])
                fail_msg("%llu over %u: part %u has %llu, want %llu",
                         (unsigned long long)cases[c].n, cases[c].p, k,
                         (unsigned long long)sizes[k], (unsigned long long)cases[c].want[k]);
            assert_int_equal(padded[k], cases[c].padded);
        }
    }
}

/* TPU's 2-D example: shape (5, 14) with dims (2, 4) is rows 3, 2 by columns 4, 4, 4, 2, and
 * the parts go to logical cores row-major (the columns' index fastest). */
static void test_two_dims_row_major(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(1, 2, 4, 8, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 5);
    const uint64_t shape[1] = {14};
    const uint32_t dims[2] = {2, 4};
    add_tensor(&s, "x", 1, shape, 2, dims);
    struct tpu_shard_plan p;
    make(&s, &p);
    assert_int_equal(p.n_replicas, 1);
    assert_int_equal(p.per_replica_batch, 5);
    static const uint64_t rb[8] = {0, 0, 0, 0, 3, 3, 3, 3}, re[8] = {3, 3, 3, 3, 5, 5, 5, 5};
    static const uint64_t cb[8] = {0, 4, 8, 12, 0, 4, 8, 12}, ce[8] = {4, 8, 12, 14, 4, 8, 12, 14};
    for (uint32_t k = 0; k < 8; k++) {
        struct tpu_shard_slice sl;
        assert_int_equal(tpu_shard_slice_of(&s, &p, 0, k, &sl, NULL), 0);
        assert_true(sl.receives);
        assert_int_equal(sl.begin[0], rb[k]);
        assert_int_equal(sl.end[0], re[k]);
        assert_int_equal(sl.begin[1], cb[k]);
        assert_int_equal(sl.end[1], ce[k]);
        assert_int_equal(sl.padded[0], 3);
        assert_int_equal(sl.padded[1], 4);
    }
    tpu_shard_plan_free(&p);
}

/* An image [B, 28, 28, 1] with [1, 2, 2, 1] over 4 cores: core k = (row part k / 2, column
 * part k % 2); None replicates; a product of 1 goes to logical core 0 only. */
static void test_image_none_and_core0(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(1, 1, 8, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 16);
    const uint64_t img[3] = {28, 28, 1}, lab[1] = {1};
    const uint32_t dims[4] = {1, 2, 2, 1}, one[2] = {1, 1};
    add_tensor(&s, "images", 3, img, 4, dims);
    add_tensor(&s, "labels", 1, lab, 0, NULL);
    add_tensor(&s, "mask", 1, lab, 2, one);
    struct tpu_shard_plan p;
    make(&s, &p);
    assert_int_equal(p.n_replicas, 2);
    assert_int_equal(p.per_replica_batch, 8);
    for (uint32_t k = 0; k < 4; k++) {
        struct tpu_shard_slice sl;
        assert_int_equal(tpu_shard_slice_of(&s, &p, 0, k, &sl, NULL), 0);
        assert_int_equal(sl.rank, 4);
        assert_int_equal(sl.begin[0], 0);
        assert_int_equal(sl.end[0], 8);
        assert_int_equal(sl.begin[1], 14 * (k / 2));
        assert_int_equal(sl.end[1], 14 * (k / 2) + 14);
        assert_int_equal(sl.begin[2], 14 * (k % 2));
        assert_int_equal(sl.end[2], 14 * (k % 2) + 14);
        assert_int_equal(sl.end[3], 1);
        /* None: the whole [8, 1] on every core */
        assert_int_equal(tpu_shard_slice_of(&s, &p, 1, k, &sl, NULL), 0);
        assert_true(sl.receives);
        assert_int_equal(sl.rank, 2);
        assert_int_equal(sl.end[0], 8);
        assert_int_equal(sl.padded[0], 8);
        assert_int_equal(sl.end[1], 1);
        /* product 1: core 0 only */
        assert_int_equal(tpu_shard_slice_of(&s, &p, 2, k, &sl, NULL), 0);
        assert_int_equal(sl.receives, k == 0);
        assert_int_equal(sl.end[0], k == 0 ? 8 : 0);
    }
    struct tpu_shard_slice sl;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_shard_slice_of(&s, &p, 3, 0, &sl, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "tensor 3 does not exist: the spec has 3 tensors"));
    assert_int_equal(tpu_shard_slice_of(&s, &p, 0, 4, &sl, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "logical core 4 does not exist: a replica has 4 cores"));
    tpu_shard_plan_free(&p);
    tpu_shard_plan_free(&p); /* twice, and NULL: harmless */
    tpu_shard_plan_free(NULL);
}

struct want_call {
    uint32_t host, shard, batch, first, n, rows;
    bool broadcast;
};

static void expect_calls(const struct tpu_shard_spec *s, uint32_t per_replica, uint32_t n,
                         const struct want_call *w)
{
    struct tpu_shard_plan p;
    make(s, &p);
    assert_int_equal(p.per_replica_batch, per_replica);
    assert_int_equal(p.n_calls, n);
    for (uint32_t i = 0; i < n; i++) {
        const struct tpu_shard_call *c = &p.calls[i];
        if (c->host != w[i].host || c->shard != w[i].shard || c->batch != w[i].batch ||
            c->first_replica != w[i].first || c->n_replicas != w[i].n ||
            c->rows_each != w[i].rows || c->broadcast != w[i].broadcast)
            fail_msg("call %u: host %u shard %u batch %u replicas %u+%u rows %u broadcast %d; "
                     "want host %u shard %u batch %u replicas %u+%u rows %u broadcast %d", i,
                     c->host, c->shard, c->batch, c->first_replica, c->n_replicas, c->rows_each,
                     c->broadcast, w[i].host, w[i].shard, w[i].batch, w[i].first, w[i].n,
                     w[i].rows, w[i].broadcast);
    }
    tpu_shard_plan_free(&p);
}

/* 2 hosts x 1 chip x 4 cores, global batch 64. */
static void test_calls_per_mode(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(2, 1, 4, 1, TPU_PER_SHARD_V1, TPU_MODE_TRAIN, 64);
    struct want_call w[8];
    for (uint32_t r = 0; r < 8; r++)
        w[r] = (struct want_call){r / 4, r, 8, r, 1, 8, false};
    expect_calls(&s, 8, 8, w); /* PER_SHARD_V1: per replica (core) */
    s.train_input = TPU_PER_HOST_V2;
    expect_calls(&s, 8, 8, w); /* PER_HOST_V2: per replica */
    s.train_input = TPU_PER_HOST_V1;
    const struct want_call v1[2] = {{0, 0, 32, 0, 4, 8, false}, {1, 1, 32, 4, 4, 8, false}};
    expect_calls(&s, 8, 2, v1);
    s.train_input = TPU_BROADCAST;
    const struct want_call bc[1] = {{0, 0, 64, 0, 8, 64, true}};
    expect_calls(&s, 64, 1, bc);
    /* BROADCAST: the global batch need not divide by the replicas */
    s.global_batch = 60;
    const struct want_call bc60[1] = {{0, 0, 60, 0, 8, 60, true}};
    expect_calls(&s, 60, 1, bc60);
    /* PER_HOST_V2 with 2 cores per replica: 4 replicas, two on each host */
    s = spec(2, 1, 4, 2, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    const struct want_call v2[4] = {{0, 0, 16, 0, 1, 16, false}, {0, 1, 16, 1, 1, 16, false},
                                    {1, 2, 16, 2, 1, 16, false}, {1, 3, 16, 3, 1, 16, false}};
    expect_calls(&s, 16, 4, v2);
    /* a replica spanning hosts (PER_HOST_V2 only): 4 hosts x 2 cores, 4 per replica: the
     * host of each replica's logical core 0 calls */
    s = spec(4, 1, 2, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    const struct want_call span[2] = {{0, 0, 32, 0, 1, 32, false}, {2, 1, 32, 1, 1, 32, false}};
    expect_calls(&s, 32, 2, span);
}

static void test_calls_eval_predict(void **state)
{
    (void)state;
    /* one host of 8 cores: PER_HOST_V1 evaluation, once, split */
    struct tpu_shard_spec s = spec(1, 1, 8, 1, TPU_PER_HOST_V1, TPU_MODE_EVAL, 64);
    const struct want_call v1[1] = {{0, 0, 64, 0, 8, 8, false}};
    expect_calls(&s, 8, 1, v1);
    /* PER_SHARD_V1's evaluation is per host too (only training is per core) */
    s.train_input = TPU_PER_SHARD_V1;
    expect_calls(&s, 8, 1, v1);
    /* SLICED: once on host 0 with the global batch, sliced */
    s = spec(2, 1, 4, 1, TPU_PER_HOST_V1, TPU_MODE_EVAL, 64);
    s.eval_input = TPU_EVAL_SLICED;
    const struct want_call sl[1] = {{0, 0, 64, 0, 8, 8, false}};
    expect_calls(&s, 8, 1, sl);
    s.mode = TPU_MODE_PREDICT;
    expect_calls(&s, 8, 1, sl);
    /* BROADCAST evaluation: every replica the whole batch (its model_fn batch is global) */
    s = spec(2, 1, 4, 1, TPU_BROADCAST, TPU_MODE_EVAL, 60);
    const struct want_call bc[1] = {{0, 0, 60, 0, 8, 60, true}};
    expect_calls(&s, 60, 1, bc);
    /* PER_HOST_V2 evaluation: per replica, on 2 hosts */
    s = spec(2, 1, 4, 2, TPU_PER_HOST_V2, TPU_MODE_EVAL, 64);
    const struct want_call v2[4] = {{0, 0, 16, 0, 1, 16, false}, {0, 1, 16, 1, 1, 16, false},
                                    {1, 2, 16, 2, 1, 16, false}, {1, 3, 16, 3, 1, 16, false}};
    expect_calls(&s, 16, 4, v2);
    /* PER_HOST_V2 prediction on 2 hosts with one replica */
    s = spec(2, 1, 4, 8, TPU_PER_HOST_V2, TPU_MODE_PREDICT, 8);
    const struct want_call one[1] = {{0, 0, 8, 0, 1, 8, false}};
    expect_calls(&s, 8, 1, one);
}

static void test_rules_config(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(0, 1, 4, 1, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "0 hosts x 1 chips per host x 4 cores per chip has no cores", NULL);
    s = spec(1, 1, 8, 3, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64 or 128 (TPUConfig); "
                "got 3; use 2 or 4", NULL);
    s.num_cores_per_replica = 256;
    expect_fail(&s, "got 256; use 128", NULL);
    s.num_cores_per_replica = 12;
    expect_fail(&s, "got 12; use 8 or 16", NULL);
    /* PER_SHARD_V1 with model parallelism, in every mode */
    s = spec(1, 1, 8, 2, TPU_PER_SHARD_V1, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "model parallelism (num_cores_per_replica 2) only supports per host input "
                "for training, and per_host_input_for_training is PER_SHARD_V1", "use PER_HOST_V2",
                NULL);
    s.mode = TPU_MODE_EVAL;
    expect_fail(&s, "only supports per host input", NULL);
    /* no batch */
    s = spec(1, 1, 8, 1, TPU_PER_HOST_V2, TPU_MODE_EVAL, 0);
    expect_fail(&s, "eval_batch_size is not set; evaluation needs the global batch size, a "
                "multiple of the number of replicas", NULL);
    s.mode = TPU_MODE_TRAIN;
    s.train_input = TPU_BROADCAST;
    expect_fail(&s, "train_batch_size is not set", "BROADCAST: any size", NULL);
}

static void test_rules_system(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(1, 1, 2, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "num_cores_per_replica 4, is larger than the total num of TPU cores in the "
                "system, 2 (1 host x 1 chip x 2 cores); use num_cores_per_replica 2 or less",
                NULL);
    s = spec(1, 3, 1, 2, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "the 3 cores of the system (1 host x 3 chips x 1 core) do not divide into "
                "replicas of num_cores_per_replica 2", "use num_cores_per_replica 1 (the largest power "
                "of two that divides 3)", NULL);
    s = spec(1, 1, 8, 2, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    s.num_shards = 8;
    expect_fail(&s, "num_shards 8 is not set correctly: the system has 8 cores and "
                "num_cores_per_replica is 2, so num_replicas is 4", "set num_shards to 4", NULL);
    s.num_shards = 4;
    struct tpu_shard_plan p;
    make(&s, &p);
    assert_int_equal(p.n_replicas, 4);
    assert_int_equal(p.n_cores, 8);
    assert_int_equal(p.cores_per_replica, 2);
    assert_int_equal(p.cores_per_host, 8);
    assert_int_equal(p.hosts, 1);
    tpu_shard_plan_free(&p);
    /* a replica larger than a host outside PER_HOST_V2, in every other mode */
    const enum tpu_input_mode others[] = {TPU_PER_HOST_V1, TPU_BROADCAST};
    for (int i = 0; i < 2; i++) {
        s = spec(2, 1, 2, 4, others[i], TPU_MODE_TRAIN, 64);
        expect_fail(&s, "except in PER_HOST_V2 mode, a replica must fit on one host: "
                    "num_cores_per_replica 4 is more than the 2 cores per host (1 chip x 2 "
                    "cores)", others[i] == TPU_BROADCAST ? "is BROADCAST" : "is PER_HOST_V1",
                    "use PER_HOST_V2, or num_cores_per_replica 2 or less", NULL);
    }
    s = spec(2, 1, 2, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    make(&s, &p);
    tpu_shard_plan_free(&p);
    /* replicas that would straddle hosts */
    s = spec(2, 1, 6, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "a host's 6 cores (1 chip x 6 cores) do not hold a whole number of "
                "replicas of 4 cores", NULL);
    s = spec(4, 1, 3, 4, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "a replica of 4 cores spans hosts of 3 cores (1 chip x 3 cores) but not a "
                "whole number of them", NULL);
}

static void test_rules_batch(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(1, 1, 8, 1, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 100);
    expect_fail(&s, "train_batch_size 100 must be divisible by the number of replicas "
                "(num_shards) 8", "use 96 or 104", "or per_host_input_for_training BROADCAST",
                NULL);
    s.global_batch = 3;
    expect_fail(&s, "use at least 8 (one example per replica)", NULL);
    const enum tpu_input_mode ins[] = {TPU_PER_SHARD_V1, TPU_PER_HOST_V1};
    for (int i = 0; i < 2; i++) {
        s.train_input = ins[i];
        expect_fail(&s, "train_batch_size 3 must be divisible", NULL);
    }
    s = spec(1, 1, 8, 1, TPU_PER_HOST_V1, TPU_MODE_PREDICT, 20);
    expect_fail(&s, "predict_batch_size 20 must be divisible by the number of replicas "
                "(num_shards) 8", "use 16 or 24", NULL);
    s.eval_input = TPU_EVAL_SLICED;
    s.mode = TPU_MODE_EVAL;
    expect_fail(&s, "eval_batch_size 20 must be divisible", "SLICED: TPUEstimator would drop "
                "the rest silently", NULL);
    /* several hosts: evaluation needs BROADCAST, SLICED or PER_HOST_V2 */
    s = spec(2, 1, 4, 1, TPU_PER_HOST_V1, TPU_MODE_EVAL, 64);
    expect_fail(&s, "evaluation on 2 hosts is only supported with per_host_input_for_training "
                "BROADCAST or PER_HOST_V2, or eval_training_input_configuration SLICED", NULL);
    s.train_input = TPU_PER_SHARD_V1;
    expect_fail(&s, "and per_host_input_for_training is PER_SHARD_V1", NULL);
    /* prediction: BROADCAST, SLICED or PER_HOST_V2 with one replica */
    s = spec(2, 1, 4, 1, TPU_PER_HOST_V2, TPU_MODE_PREDICT, 64);
    expect_fail(&s, "prediction on 2 hosts is only supported with per_host_input_for_training "
                "BROADCAST, eval_training_input_configuration SLICED, or PER_HOST_V2 with one "
                "replica (TPUEstimator.predict), and it is PER_HOST_V2 with 8 replicas", NULL);
    s.train_input = TPU_PER_HOST_V1;
    expect_fail(&s, "and it is PER_HOST_V1 with 8 replicas", NULL);
}

static void test_rules_dims(void **state)
{
    (void)state;
    const uint64_t img[3] = {28, 28, 1}, lab[1] = {1};
    const uint32_t rows[4] = {1, 2, 1, 1};
    struct tpu_shard_spec s = spec(1, 1, 8, 2, TPU_PER_HOST_V1, TPU_MODE_TRAIN, 64);
    add_tensor(&s, "images", 3, img, 4, rows);
    expect_fail(&s, "input_partition_dims is only supported in PER_HOST_V2 mode (TPUConfig), "
                "and per_host_input_for_training is PER_HOST_V1", NULL);
    s.train_input = TPU_BROADCAST;
    expect_fail(&s, "per_host_input_for_training is BROADCAST", NULL);
    s.train_input = TPU_PER_HOST_V2;
    s.num_cores_per_replica = 1;
    expect_fail(&s, "input_partition_dims requires setting num_cores_per_replica (TPUConfig), "
                "and it is 1", NULL);
    s.num_cores_per_replica = 0; /* unset: TPUEstimator's None */
    expect_fail(&s, "input_partition_dims requires setting num_cores_per_replica (TPUConfig), "
                "and it is 0", NULL);
    s.num_cores_per_replica = 4;
    expect_fail(&s, "tensor 'images': the product of its input partition dims [1, 2, 1, 1] is "
                "2, and it should equal num_cores_per_replica 4", NULL);
    /* a product past 2^64 does not wrap round to a valid one */
    const uint32_t huge[4] = {65536, 65536, 65536, 65536};
    s.tensors[0].dims.rank = 4;
    memcpy(s.tensors[0].dims.dims, huge, sizeof huge);
    expect_fail(&s, "the product of its input partition dims [65536, 65536, 65536, 65536] is "
                "more than 4294967295, and it should equal num_cores_per_replica 4", NULL);
    const uint32_t bad_rank[3] = {1, 4, 1};
    s.tensors[0].dims.rank = 3;
    memcpy(s.tensors[0].dims.dims, bad_rank, sizeof bad_rank);
    expect_fail(&s, "tensor 'images' of shape [32, 28, 28, 1] has 4 dimensions (the batch "
                "first), and its input partition dims [1, 4, 1] have 3", NULL);
    /* a product of 1 is not checked further (TPUEstimator): any rank */
    const uint32_t ones[2] = {1, 1};
    s.tensors[0].dims.rank = 2;
    memcpy(s.tensors[0].dims.dims, ones, sizeof ones);
    struct tpu_shard_plan p;
    make(&s, &p);
    tpu_shard_plan_free(&p);
    /* a count of 0 */
    s.tensors[0].dims.dims[1] = 0;
    expect_fail(&s, "tensor 'images': partition dims [1, 0]: all input partition dims must be "
                ">= 1", NULL);
    /* labels partitioned, features None */
    s.tensors[0].dims.rank = 0;
    const uint32_t lab_dims[2] = {1, 1};
    add_tensor(&s, "labels", 1, lab, 2, lab_dims);
    expect_fail(&s, "input_partition_dims[0] (the features, tensor 'images') must not be None",
                NULL);
    /* SLICED evaluation with partition dims */
    s = spec(1, 1, 8, 2, TPU_PER_HOST_V2, TPU_MODE_EVAL, 64);
    add_tensor(&s, "images", 3, img, 4, rows);
    make(&s, &p); /* PER_HOST_V2 evaluation: partitioned, per replica */
    assert_int_equal(p.n_calls, 4);
    tpu_shard_plan_free(&p);
    s.eval_input = TPU_EVAL_SLICED;
    expect_fail(&s, "input_partition_dims with eval_training_input_configuration SLICED: "
                "evaluation input is broadcast from host 0", NULL);
    s.mode = TPU_MODE_TRAIN; /* SLICED is evaluation's and prediction's only */
    make(&s, &p);
    tpu_shard_plan_free(&p);
}

static void test_rules_form(void **state)
{
    (void)state;
    struct tpu_shard_spec s = spec(1, 1, 8, 1, TPU_PER_HOST_V2, TPU_MODE_TRAIN, 64);
    s.n_tensors = TPU_SHARD_MAX_TENSORS + 1;
    expect_fail(&s, "5 input tensors: at most 4", NULL);
    s.n_tensors = 0;
    const uint64_t zero[2] = {3, 0};
    add_tensor(&s, "x", 2, zero, 0, NULL);
    expect_fail(&s, "tensor 'x' has size 0 in dimension 2", NULL);
    s.tensors[0].rank = TPU_PARTITION_MAX_RANK;
    expect_fail(&s, "tensor 'x' has 8 dimensions per example; at most 7", NULL);
    s = spec(1, 1, 8, 1, (enum tpu_input_mode)7, TPU_MODE_TRAIN, 64);
    expect_fail(&s, "per_host_input_for_training 7 is not one of", NULL);
}

/* ---- the parser ------------------------------------------------------------------------- */

static void parse_ok(const char *text, uint32_t n, const char *want0, const char *want1)
{
    struct tpu_partition_dims out[2];
    uint32_t got = 99;
    struct tpu_diag d = {0};
    if (tpu_partition_dims_parse(text, out, &got, &d))
        fail_msg("'%s' failed: %s", text, d.msg);
    assert_int_equal(got, n);
    const char *want[2] = {want0, want1};
    for (uint32_t i = 0; i < 2; i++) {
        char buf[128] = "";
        if (i < n && out[i].rank) {
            size_t at = 0;
            for (uint32_t k = 0; k < out[i].rank; k++)
                at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%u", k ? "," : "",
                                       out[i].dims[k]);
        } else if (i < n) {
            snprintf(buf, sizeof buf, "None");
        } else {
            assert_int_equal(out[i].rank, 0);
            continue;
        }
        if (strcmp(buf, want[i]))
            fail_msg("'%s': entry %u is %s, want %s", text, i, buf, want[i]);
    }
}

static void parse_bad(const char *text, const char *part)
{
    struct tpu_partition_dims out[2];
    uint32_t n = 99;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_partition_dims_parse(text, out, &n, &d), TPU_EINVAL);
    assert_int_equal(n, 0);
    if (!strstr(d.msg, part))
        fail_msg("'%s': message \"%s\" lacks \"%s\"", text, d.msg, part);
}

static void test_parse(void **state)
{
    (void)state;
    parse_ok("[[1, 2, 2, 1], None]", 2, "1,2,2,1", "None");
    parse_ok("[[1,4,1,1]]", 1, "1,4,1,1", NULL);
    parse_ok("  ( [1, 2] , (2, 1), ) ", 2, "1,2", "2,1");
    parse_ok("[[1, 2], null]", 2, "1,2", "None");
    parse_ok("[[8], none]", 2, "8", "None");
    parse_ok("[[+2, 1]]", 1, "2,1", NULL);
    parse_ok("[[1,1,1,1,1,1,1,2]]", 1, "1,1,1,1,1,1,1,2", NULL);
    parse_bad("", "expected '[' opening the list of one (features) or two (features, labels) "
              "entries at column 1, found the end of the text");
    parse_bad("None", "expected '[' opening the list");
    parse_bad("[]", "input_partition_dims is an empty list; it must be a list with one or two "
              "elements");
    parse_bad("[[1, 2], [1, 2], [1]]", "input_partition_dims has a third entry (column 18); it "
              "must be a list with one or two elements");
    parse_bad("[None]", "input_partition_dims[0] (the features) must not be None");
    parse_bad("[None, [1, 2]]", "must not be None");
    parse_bad("[[1, 0, 1, 1]]", "the count 0 at column 6 is below 1; all input partition dims "
              "must be >= 1");
    parse_bad("[[1, -2]]", "the count -2 at column 6 is below 1");
    parse_bad("[[1, 99999999999]]", "the count at column 6 is larger than 2147483647");
    parse_bad("[[1, 2.5]]", "expected ',' or a closing bracket after a whole number at column "
              "7, found '.'");
    parse_bad("[[1, x]]", "expected a count (a whole number >= 1) at column 6, found 'x'");
    parse_bad("[[1, 2]", "expected ',' or ']' at column 8, found the end of the text");
    parse_bad("[[1, 2)]", "expected ',' or ']' at column 7, found ')'");
    parse_bad("[[1, 2]] x", "expected nothing after the closing bracket at column 10");
    parse_bad("[[]]", "entry 0 (column 2) is an empty list");
    parse_bad("[[1, 2], Nonesuch]", "expected None or a list of counts");
    parse_bad("[{'x': [1, 2]}]", "expected None or a list of counts such as [1, 2, 2, 1] at "
              "column 2, found '{'");
    parse_bad("[[1,1,1,1,1,1,1,1,2]]", "entry 0 (column 2) has more than 8 counts");
    parse_bad("[[1, 2]\n, 3]", "expected None or a list of counts");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_arithmetic),
        cmocka_unit_test(test_two_dims_row_major),
        cmocka_unit_test(test_image_none_and_core0),
        cmocka_unit_test(test_calls_per_mode),
        cmocka_unit_test(test_calls_eval_predict),
        cmocka_unit_test(test_rules_config),
        cmocka_unit_test(test_rules_system),
        cmocka_unit_test(test_rules_batch),
        cmocka_unit_test(test_rules_dims),
        cmocka_unit_test(test_rules_form),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
