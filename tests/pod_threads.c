/* A pod slice's hosts as threads of one process (pod_threads.h): the link's and the host
 * group's calls on one mutex and condition variable.
 *
 * A round (max_u64, bcast_last, allgather) has two phases, so that a fast caller's next
 * round cannot overwrite what a slow caller of this round has yet to read:
 *
 *     gathering --(n-th arrival)--> reading --(n-th departure)--> gathering
 *
 * In `gathering` each arrival deposits its part (the max so far, the last part's bytes, its
 * slot of the gather) and waits for `reading`; in `reading` each caller copies the result
 * out and leaves, and a caller of the next round waits until the last one has left.
 * Messages of send_next are queued per (group, receiving part), oldest first. */
#include "pod_threads.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum pt_kind { PT_NONE, PT_MAX, PT_BCAST, PT_GATHER };

static const char *const pt_kind_name[] = {"none", "max_u64", "bcast_last", "allgather"};

struct pt_round {
    enum pt_kind kind;  /* of the round under way (set by its first arrival) */
    size_t bytes;       /* its size (bcast: the payload, gather: one host's) */
    uint32_t arrived;   /* callers that deposited their part */
    uint32_t left;      /* callers that read the result (reading phase) */
    bool reading;
    uint64_t acc;       /* max_u64: the largest so far */
    unsigned char *buf; /* bcast: [bytes]; gather: [n][bytes]; grown as needed */
    size_t cap;
};

struct pt_msg {
    struct pt_msg *next;
    size_t bytes;
    unsigned char data[];
};

struct pt_group {
    uint32_t key;
    struct pt_round round;
    struct pt_msg **head; /* [n]: messages for part i from part i - 1, oldest first */
    struct pt_msg **tail; /* [n] */
};

struct pt_part {
    struct pod_threads *pt;
    uint32_t index;
};

struct pod_threads {
    uint32_t n;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* any change: a round's phase, a queued message, the failure */
    bool failed;
    char fail_msg[TPU_DIAG_MAX];
    struct pt_group **groups; /* [n_groups], made on first use of a key */
    uint32_t n_groups, cap_groups;
    struct pt_round gather; /* the host group's allgather */
    struct pt_part *parts;  /* [n]: the ctx of link i and group i */
    struct tpu_pod_link *links;
    struct tpu_host_group *hosts;
};

static void pt_diag(struct tpu_diag *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pt_diag(struct tpu_diag *d, int code, const char *fmt, ...)
{
    if (!d)
        return;
    d->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
}

/* Marks the pod failed (the first failure's sentence stays). Called with mu held. */
static void pt_fail_locked(struct pod_threads *pt, const char *msg)
{
    if (!pt->failed) {
        pt->failed = true;
        snprintf(pt->fail_msg, sizeof pt->fail_msg, "%s", msg);
    }
    pthread_cond_broadcast(&pt->cv);
}

static int pt_canceled(const struct pod_threads *pt, struct tpu_diag *d)
{
    pt_diag(d, TPU_ECANCELED, "%s", pt->fail_msg);
    return TPU_ECANCELED;
}

/* The group of key, made on first use; NULL when out of memory. Called with mu held. */
static struct pt_group *pt_group_locked(struct pod_threads *pt, uint32_t key)
{
    for (uint32_t i = 0; i < pt->n_groups; i++)
        if (pt->groups[i]->key == key)
            return pt->groups[i];
    if (pt->n_groups == pt->cap_groups) {
        uint32_t cap = pt->cap_groups ? 2 * pt->cap_groups : 8;
        struct pt_group **g = realloc(pt->groups, cap * sizeof *g);
        if (!g)
            return NULL;
        pt->groups = g;
        pt->cap_groups = cap;
    }
    struct pt_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->head = calloc(pt->n, sizeof *g->head);
    g->tail = calloc(pt->n, sizeof *g->tail);
    if (!g->head || !g->tail) {
        free(g->head);
        free(g->tail);
        free(g);
        return NULL;
    }
    g->key = key;
    pt->groups[pt->n_groups++] = g;
    return g;
}

/* Joins a round as caller `index`: deposits, waits for every arrival, reads, leaves.
 * `data` is max's value (uint64_t), bcast's buffer, or gather's {send, recv}. Returns 0 or
 * a TPU_E* code with d. Called with mu held; waits on cv. */
static int pt_round_locked(struct pod_threads *pt, struct pt_round *r, enum pt_kind kind,
                           uint32_t index, const char *what, uint32_t group, size_t bytes,
                           const void *send, void *recv, struct tpu_diag *d)
{
    while (r->reading && !pt->failed)
        pthread_cond_wait(&pt->cv, &pt->mu);
    if (pt->failed)
        return pt_canceled(pt, d);
    if (r->arrived == 0) {
        size_t need = kind == PT_GATHER ? (size_t)pt->n * bytes : bytes;
        if (need > r->cap) {
            unsigned char *b = realloc(r->buf, need);
            if (!b) {
                pt_diag(d, TPU_ENOMEM, "the pod's %s of %zu bytes is out of memory",
                        pt_kind_name[kind], need);
                pt_fail_locked(pt, d ? d->msg : "out of memory");
                return TPU_ENOMEM;
            }
            r->buf = b;
            r->cap = need;
        }
        r->kind = kind;
        r->bytes = bytes;
        r->acc = 0;
    } else if (r->kind != kind || r->bytes != bytes) {
        char msg[TPU_DIAG_MAX];
        snprintf(msg, sizeof msg,
                 "%s %u's %s (group %u) of %zu bytes met another's %s of %zu bytes: every "
                 "part must make the same calls in the same order",
                 what, index, pt_kind_name[kind], group, bytes, pt_kind_name[r->kind],
                 r->bytes);
        pt_diag(d, TPU_EINVAL, "%s", msg);
        pt_fail_locked(pt, msg);
        return TPU_EINVAL;
    }
    switch (kind) {
    case PT_MAX: {
        uint64_t v = *(const uint64_t *)send;
        if (r->arrived == 0 || v > r->acc)
            r->acc = v;
        break;
    }
    case PT_BCAST:
        if (index == pt->n - 1)
            memcpy(r->buf, send, bytes);
        break;
    case PT_GATHER:
        memcpy(r->buf + (size_t)index * bytes, send, bytes);
        break;
    case PT_NONE:
        break;
    }
    if (++r->arrived == pt->n) {
        r->reading = true;
        r->left = 0;
        pthread_cond_broadcast(&pt->cv);
    }
    while (!r->reading && !pt->failed)
        pthread_cond_wait(&pt->cv, &pt->mu);
    if (!r->reading)
        return pt_canceled(pt, d);
    switch (kind) {
    case PT_MAX:
        *(uint64_t *)recv = r->acc;
        break;
    case PT_BCAST:
        if (index != pt->n - 1)
            memcpy(recv, r->buf, bytes);
        break;
    case PT_GATHER:
        memcpy(recv, r->buf, (size_t)pt->n * bytes);
        break;
    case PT_NONE:
        break;
    }
    if (++r->left == pt->n) {
        r->reading = false;
        r->arrived = 0;
        pthread_cond_broadcast(&pt->cv);
    }
    return 0;
}

static int pt_link_round(void *ctx, enum pt_kind kind, uint32_t group, size_t bytes,
                         const void *send, void *recv, struct tpu_diag *d)
{
    struct pt_part *p = ctx;
    struct pod_threads *pt = p->pt;
    pthread_mutex_lock(&pt->mu);
    int rc;
    struct pt_group *g = pt->failed ? NULL : pt_group_locked(pt, group);
    if (pt->failed) {
        rc = pt_canceled(pt, d);
    } else if (!g) {
        pt_diag(d, TPU_ENOMEM, "the pod link's group %u is out of memory", group);
        pt_fail_locked(pt, d ? d->msg : "out of memory");
        rc = TPU_ENOMEM;
    } else {
        rc = pt_round_locked(pt, &g->round, kind, p->index, "part", group, bytes, send, recv,
                             d);
    }
    pthread_mutex_unlock(&pt->mu);
    return rc;
}

static int pt_max_u64(void *ctx, uint32_t group, uint64_t *value, struct tpu_diag *d)
{
    uint64_t v = *value;
    return pt_link_round(ctx, PT_MAX, group, sizeof v, &v, value, d);
}

static int pt_bcast_last(void *ctx, uint32_t group, void *data, size_t bytes,
                         struct tpu_diag *d)
{
    return pt_link_round(ctx, PT_BCAST, group, bytes, data, data, d);
}

static int pt_send_next(void *ctx, uint32_t group, const void *data, size_t bytes,
                        struct tpu_diag *d)
{
    struct pt_part *p = ctx;
    struct pod_threads *pt = p->pt;
    if (p->index + 1 >= pt->n) {
        pt_diag(d, TPU_EINVAL, "part %u of %u called send_next: the last part has no next",
                p->index, pt->n);
        return TPU_EINVAL;
    }
    struct pt_msg *m = malloc(sizeof *m + bytes);
    pthread_mutex_lock(&pt->mu);
    int rc = 0;
    struct pt_group *g = pt->failed || !m ? NULL : pt_group_locked(pt, group);
    if (pt->failed) {
        rc = pt_canceled(pt, d);
    } else if (!g) {
        pt_diag(d, TPU_ENOMEM, "part %u's send_next of %zu bytes is out of memory", p->index,
                bytes);
        pt_fail_locked(pt, d ? d->msg : "out of memory");
        rc = TPU_ENOMEM;
    } else {
        uint32_t to = p->index + 1;
        m->next = NULL;
        m->bytes = bytes;
        memcpy(m->data, data, bytes);
        if (g->tail[to])
            g->tail[to]->next = m;
        else
            g->head[to] = m;
        g->tail[to] = m;
        m = NULL;
        pthread_cond_broadcast(&pt->cv);
    }
    pthread_mutex_unlock(&pt->mu);
    free(m);
    return rc;
}

static int pt_recv_prev(void *ctx, uint32_t group, void *data, size_t bytes,
                        struct tpu_diag *d)
{
    struct pt_part *p = ctx;
    struct pod_threads *pt = p->pt;
    if (p->index == 0) {
        pt_diag(d, TPU_EINVAL, "part 0 of %u called recv_prev: the first part has no previous",
                pt->n);
        return TPU_EINVAL;
    }
    pthread_mutex_lock(&pt->mu);
    int rc = 0;
    struct pt_msg *m = NULL;
    struct pt_group *g = pt->failed ? NULL : pt_group_locked(pt, group);
    if (!pt->failed && !g) {
        pt_diag(d, TPU_ENOMEM, "the pod link's group %u is out of memory", group);
        pt_fail_locked(pt, d ? d->msg : "out of memory");
        rc = TPU_ENOMEM;
    } else {
        while (!pt->failed && !g->head[p->index])
            pthread_cond_wait(&pt->cv, &pt->mu);
        if (pt->failed) {
            rc = pt_canceled(pt, d);
        } else {
            m = g->head[p->index];
            g->head[p->index] = m->next;
            if (!m->next)
                g->tail[p->index] = NULL;
            if (m->bytes != bytes) {
                char msg[TPU_DIAG_MAX];
                snprintf(msg, sizeof msg,
                         "part %u's recv_prev (group %u) of %zu bytes met a send_next of %zu "
                         "bytes: every part must make the same calls in the same order",
                         p->index, group, bytes, m->bytes);
                pt_diag(d, TPU_EINVAL, "%s", msg);
                pt_fail_locked(pt, msg);
                rc = TPU_EINVAL;
            } else {
                memcpy(data, m->data, bytes);
            }
        }
    }
    pthread_mutex_unlock(&pt->mu);
    free(m);
    return rc;
}

static int pt_allgather(void *ctx, const void *send, size_t bytes, void *recv,
                        struct tpu_diag *d)
{
    struct pt_part *p = ctx;
    struct pod_threads *pt = p->pt;
    pthread_mutex_lock(&pt->mu);
    int rc = pt_round_locked(pt, &pt->gather, PT_GATHER, p->index, "host", 0, bytes, send,
                             recv, d);
    pthread_mutex_unlock(&pt->mu);
    return rc;
}

static void pt_abort(void *ctx, int rc, const struct tpu_diag *d)
{
    struct pt_part *p = ctx;
    struct pod_threads *pt = p->pt;
    char msg[TPU_DIAG_MAX];
    if (d && d->msg[0])
        snprintf(msg, sizeof msg, "host %u failed: %.900s", p->index, d->msg);
    else
        snprintf(msg, sizeof msg, "host %u failed: %s", p->index, tpu_strerror(rc));
    pthread_mutex_lock(&pt->mu);
    pt_fail_locked(pt, msg);
    pthread_mutex_unlock(&pt->mu);
}

int pod_threads_create(uint32_t n, struct pod_threads **out)
{
    *out = NULL;
    if (n < 1 || n > 4096)
        return TPU_EINVAL;
    struct pod_threads *pt = calloc(1, sizeof *pt);
    if (!pt)
        return TPU_ENOMEM;
    pt->n = n;
    pt->parts = calloc(n, sizeof *pt->parts);
    pt->links = calloc(n, sizeof *pt->links);
    pt->hosts = calloc(n, sizeof *pt->hosts);
    if (!pt->parts || !pt->links || !pt->hosts) {
        free(pt->parts);
        free(pt->links);
        free(pt->hosts);
        free(pt);
        return TPU_ENOMEM;
    }
    pthread_mutex_init(&pt->mu, NULL);
    pthread_cond_init(&pt->cv, NULL);
    for (uint32_t i = 0; i < n; i++) {
        pt->parts[i] = (struct pt_part){.pt = pt, .index = i};
        pt->links[i] = (struct tpu_pod_link){
            .ctx = &pt->parts[i],
            .parts = n,
            .index = i,
            .max_u64 = pt_max_u64,
            .recv_prev = pt_recv_prev,
            .send_next = pt_send_next,
            .bcast_last = pt_bcast_last,
            .abort = pt_abort, /* a canceled part ends its peers' calls */
        };
        pt->hosts[i] = (struct tpu_host_group){
            .ctx = &pt->parts[i],
            .n = n,
            .rank = i,
            .allgather = pt_allgather,
            .abort = pt_abort,
        };
    }
    *out = pt;
    return 0;
}

void pod_threads_destroy(struct pod_threads *pt)
{
    if (!pt)
        return;
    for (uint32_t i = 0; i < pt->n_groups; i++) {
        struct pt_group *g = pt->groups[i];
        for (uint32_t p = 0; p < pt->n; p++) {
            while (g->head[p]) {
                struct pt_msg *m = g->head[p];
                g->head[p] = m->next;
                free(m);
            }
        }
        free(g->head);
        free(g->tail);
        free(g->round.buf);
        free(g);
    }
    free(pt->groups);
    free(pt->gather.buf);
    pthread_cond_destroy(&pt->cv);
    pthread_mutex_destroy(&pt->mu);
    free(pt->parts);
    free(pt->links);
    free(pt->hosts);
    free(pt);
}

const struct tpu_pod_link *pod_threads_link(struct pod_threads *pt, uint32_t index)
{
    return index < pt->n ? &pt->links[index] : NULL;
}

const struct tpu_host_group *pod_threads_group(struct pod_threads *pt, uint32_t rank)
{
    return rank < pt->n ? &pt->hosts[rank] : NULL;
}

void pod_threads_run(struct pod_threads *pt, void *(*fn)(void *), void *const *args)
{
    pthread_t *th = calloc(pt->n, sizeof *th);
    if (!th) {
        fprintf(stderr, "pod_threads_run: out of memory for %u threads\n", pt->n);
        abort();
    }
    for (uint32_t i = 0; i < pt->n; i++) {
        if (pthread_create(&th[i], NULL, fn, args[i]) != 0) {
            /* the threads already started may wait for this one forever: a test cannot go
             * on without its hosts */
            fprintf(stderr, "pod_threads_run: cannot start thread %u of %u\n", i, pt->n);
            abort();
        }
    }
    for (uint32_t i = 0; i < pt->n; i++)
        pthread_join(th[i], NULL);
    free(th);
}
