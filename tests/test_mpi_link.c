/* host/mpi (include/tpusim/mpi.h) on real MPI ranks: run under `mpirun -np N` (tests/
 * meson.build runs it with 2 and 4 ranks, oversubscribed). Every rank runs the same cases;
 * each checks what its rank must see:
 *   - max_u64 gives every rank the largest value;
 *   - the chain (recv_prev, add, send_next) then bcast_last gives every rank the sum in rank
 *     order, which is what the device's cross-host all-reduce does with gradients;
 *   - several logical indices reduce at the same time from threads of their own without
 *     their messages mixing (each index has its own communicator);
 *   - the host group's allgather puts rank h's bytes at h;
 *   - a link of 0 or 129 logical indices, and an index it was not made for, are refused
 *     with their messages.
 * A failed check fails that rank's CMocka run, which exits non-zero, and mpirun reports it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mpi.h"

static struct tpu_mpi *g_mpi; /* made in main before any case, finalized after them */

static void test_max(void **state)
{
    (void)state;
    const struct tpu_pod_link *l = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mpi_pod_link(g_mpi, 1, &l, &d), 0);
    assert_int_equal(l->parts, tpu_mpi_size(g_mpi));
    assert_int_equal(l->index, tpu_mpi_rank(g_mpi));
    /* rank r offers 1000 + 7 r, and 2^40 + r on a second call: the largest wins on every rank */
    uint64_t v = 1000 + 7 * (uint64_t)l->index;
    assert_int_equal(l->max_u64(l->ctx, 0, &v, &d), 0);
    assert_int_equal(v, 1000 + 7 * (uint64_t)(l->parts - 1));
    v = (UINT64_C(1) << 40) + l->index;
    assert_int_equal(l->max_u64(l->ctx, 0, &v, &d), 0);
    assert_int_equal(v, (UINT64_C(1) << 40) + l->parts - 1);
}

/* The chain of logical index k over n floats: rank r's x[i] = (r + 1) * (i + 1) + k / 8,
 * summed in rank order, then broadcast from the last rank. Returns the first wrong index or
 * -1. */
static long chain_sum(const struct tpu_pod_link *l, uint32_t k, size_t n, struct tpu_diag *d)
{
    float *acc = calloc(n, sizeof *acc), *x = calloc(n, sizeof *x);
    if (!acc || !x) {
        free(acc);
        free(x);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(l->index + 1) * (float)(i + 1) + (float)k / 8;
    long bad = -1;
    if (l->index > 0 && l->recv_prev(l->ctx, k, acc, n * sizeof *acc, d))
        bad = 0;
    for (size_t i = 0; bad < 0 && i < n; i++)
        acc[i] = l->index > 0 ? acc[i] + x[i] : x[i];
    if (bad < 0 && l->index + 1 < l->parts && l->send_next(l->ctx, k, acc, n * sizeof *acc, d))
        bad = 0;
    if (bad < 0 && l->bcast_last(l->ctx, k, acc, n * sizeof *acc, d))
        bad = 0;
    for (size_t i = 0; bad < 0 && i < n; i++) {
        float want = 0;
        for (uint32_t r = 0; r < l->parts; r++) /* the same order, the same float sums */
            want = r ? want + ((float)(r + 1) * (float)(i + 1) + (float)k / 8)
                     : (float)(i + 1) + (float)k / 8;
        if (memcmp(&want, &acc[i], sizeof want))
            bad = (long)i;
    }
    free(acc);
    free(x);
    return bad;
}

static void test_chain(void **state)
{
    (void)state;
    const struct tpu_pod_link *l = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mpi_pod_link(g_mpi, 1, &l, &d), 0);
    assert_int_equal(chain_sum(l, 0, 1, &d), -1);
    assert_int_equal(chain_sum(l, 0, 100003, &d), -1);
}

struct chain_job {
    const struct tpu_pod_link *l;
    uint32_t k;
    long bad;
    struct tpu_diag d;
};

static void *chain_thread(void *arg)
{
    struct chain_job *j = arg;
    /* several rounds, so that the indices' messages interleave */
    for (int round = 0; round < 20 && j->bad < 0; round++)
        j->bad = chain_sum(j->l, j->k, 4096 + 17 * j->k, &j->d);
    return NULL;
}

static void test_concurrent_groups(void **state)
{
    (void)state;
    enum { K = 8 };
    const struct tpu_pod_link *l = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mpi_pod_link(g_mpi, K, &l, &d), 0);
    struct chain_job jobs[K];
    pthread_t th[K];
    for (uint32_t k = 0; k < K; k++) {
        jobs[k] = (struct chain_job){.l = l, .k = k, .bad = -1};
        assert_int_equal(pthread_create(&th[k], NULL, chain_thread, &jobs[k]), 0);
    }
    for (uint32_t k = 0; k < K; k++)
        pthread_join(th[k], NULL);
    for (uint32_t k = 0; k < K; k++) {
        if (jobs[k].bad != -1)
            print_error("logical index %u: first wrong element %ld (%s)\n", k, jobs[k].bad,
                        jobs[k].d.msg);
        assert_int_equal(jobs[k].bad, -1);
    }
}

static void test_allgather(void **state)
{
    (void)state;
    const struct tpu_host_group *g = tpu_mpi_host_group(g_mpi);
    assert_int_equal(g->n, tpu_mpi_size(g_mpi));
    assert_int_equal(g->rank, tpu_mpi_rank(g_mpi));
    struct {
        uint32_t rank;
        char text[16];
    } mine = {.rank = g->rank}, *all = calloc(g->n, sizeof mine);
    assert_non_null(all);
    snprintf(mine.text, sizeof mine.text, "host %u", g->rank);
    struct tpu_diag d = {0};
    assert_int_equal(g->allgather(g->ctx, &mine, sizeof mine, all, &d), 0);
    for (uint32_t h = 0; h < g->n; h++) {
        char want[16];
        snprintf(want, sizeof want, "host %u", h);
        assert_int_equal(all[h].rank, h);
        assert_string_equal(all[h].text, want);
    }
    free(all);
}

static void test_refusals(void **state)
{
    (void)state;
    const struct tpu_pod_link *l = NULL;
    struct tpu_diag d = {0};
    assert_int_equal(tpu_mpi_pod_link(g_mpi, 0, &l, &d), TPU_EINVAL);
    assert_null(l);
    assert_non_null(strstr(d.msg, "a pod link of 0 logical indices: it takes 1 to 128"));
    assert_int_equal(tpu_mpi_pod_link(g_mpi, 129, &l, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "a pod link of 129 logical indices"));
    assert_int_equal(tpu_mpi_pod_link(g_mpi, 2, &l, &d), 0);
    /* earlier cases made 8; index 8 was never made, on any rank: refused without MPI */
    uint64_t v = 1;
    assert_int_equal(l->max_u64(l->ctx, 8, &v, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "the pod link's logical index 8 is not below the 8"));
    if (l->index == 0) {
        assert_int_equal(l->recv_prev(l->ctx, 0, &v, sizeof v, &d), TPU_EINVAL);
        assert_non_null(strstr(d.msg, "rank 0: the first part of the pod receives from no one"));
    }
    if (l->index + 1 == l->parts) {
        assert_int_equal(l->send_next(l->ctx, 0, &v, sizeof v, &d), TPU_EINVAL);
        assert_non_null(strstr(d.msg, "the last part of the pod sends to no one"));
    }
}

int main(int argc, char **argv)
{
    struct tpu_diag d = {0};
    if (tpu_mpi_init(&argc, &argv, &g_mpi, &d)) {
        fprintf(stderr, "test_mpi_link: %s\n", d.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max),
        cmocka_unit_test(test_chain),
        cmocka_unit_test(test_concurrent_groups),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_refusals),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed)
        tpu_mpi_abort(g_mpi, 1); /* the other ranks may wait in a case this one left */
    if (tpu_mpi_finalize(&g_mpi, &d)) {
        fprintf(stderr, "test_mpi_link: %s\n", d.msg);
        return 1;
    }
    return 0;
}
