/* The hosts of a pod slice as MPI ranks (include/tpusim/mpi.h): the pod link and the host
 * group over Open MPI.
 *
 * This file is the only one that includes <mpi.h>. It knows nothing of what the link's
 * bytes mean (the device's chain sums them, device.h) nor of what the group gathers (the
 * runtime's loop figures, runtime.h): it moves bytes, in the order the callers call, on
 * communicators that keep unrelated calls apart:
 *
 *   link_comm[k]  one per logical index k of the pod link (MPI_Comm_dup of the world). A
 *                 device's lane threads reduce different k at the same time; on one
 *                 communicator their point-to-point messages (same source, same tag) could
 *                 match each other's, so each k has its own. For one k the calls come in
 *                 program order on every rank (device.h), which is MPI's matching order.
 *   group_comm    the host group's allgather, called from the estimator's caller thread.
 *
 * Every communicator returns errors (MPI_ERRORS_RETURN) instead of aborting, so that a
 * failed call becomes a TPU_EIO with MPI's sentence and the run fails through the usual
 * path (which calls the group's abort). A part whose run stops inside the device (a core's
 * error, a cancel) calls the link's abort, the same function as the group's. A rank that
 * dies outright (SIGKILL) is seen by mpirun, which ends the job's other processes: no rank
 * waits forever.
 *
 * Messages larger than MPI's int count are sent in chunks of at most TPU_MPI_CHUNK bytes. */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/mpi.h"

#define TPU_MPI_CHUNK ((size_t)1 << 30)

struct tpu_mpi {
    uint32_t rank, size;
    /* link_comm[0 .. n_link_comms): created by tpu_mpi_pod_link on main's thread, before
     * any run; read-only while the device runs */
    MPI_Comm link_comm[TPU_MPI_MAX_GROUPS];
    uint32_t n_link_comms;
    MPI_Comm group_comm;
    struct tpu_pod_link link;
    struct tpu_host_group group;
    void (*on_abort)(void *ctx, int rc, const struct tpu_diag *d);
    void *on_abort_ctx;
};

static void set_diag(struct tpu_diag *d, int code, const char *what, int mpi_rc)
{
    if (!d)
        return;
    char err[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(mpi_rc, err, &len) != MPI_SUCCESS)
        snprintf(err, sizeof err, "MPI error %d", mpi_rc);
    d->code = code;
    snprintf(d->msg, sizeof d->msg, "%s failed: %s (a rank of the job failed or is gone: see "
             "the other ranks' errors)", what, err);
}

/* ---- the pod link ----------------------------------------------------------------------- */

/* The communicator of logical index `group`; NULL with a message when it was not made. */
static MPI_Comm *link_comm(struct tpu_mpi *m, uint32_t group, struct tpu_diag *d)
{
    if (group < m->n_link_comms)
        return &m->link_comm[group];
    if (d) {
        d->code = TPU_EINVAL;
        snprintf(d->msg, sizeof d->msg, "the pod link's logical index %u is not below the %u "
                 "it was made for (tpu_mpi_pod_link's groups): make it with the device's "
                 "cores per replica", group, m->n_link_comms);
    }
    return NULL;
}

static int link_max_u64(void *ctx, uint32_t group, uint64_t *value, struct tpu_diag *d)
{
    struct tpu_mpi *m = ctx;
    MPI_Comm *c = link_comm(m, group, d);
    if (!c)
        return TPU_EINVAL;
    uint64_t in = *value;
    int rc = MPI_Allreduce(&in, value, 1, MPI_UINT64_T, MPI_MAX, *c);
    if (rc != MPI_SUCCESS) {
        set_diag(d, TPU_EIO, "the pod's all-reduce start (MPI_Allreduce)", rc);
        return TPU_EIO;
    }
    return 0;
}

/* The chain's point-to-point step on logical index `group`: receives from the previous rank
 * (send false) or sends to the next (send true), in chunks of at most TPU_MPI_CHUNK bytes
 * (one empty message for 0 bytes, so that the two sides still pair up). */
static int link_chain(struct tpu_mpi *m, uint32_t group, bool send, void *data, size_t bytes,
                      struct tpu_diag *d)
{
    MPI_Comm *c = link_comm(m, group, d);
    if (!c)
        return TPU_EINVAL;
    if (send ? m->rank + 1 >= m->size : m->rank == 0) {
        if (d) {
            d->code = TPU_EINVAL;
            if (send)
                snprintf(d->msg, sizeof d->msg, "send_next on rank %u: the last part of the "
                         "pod sends to no one", m->rank);
            else
                snprintf(d->msg, sizeof d->msg, "recv_prev on rank 0: the first part of the "
                         "pod receives from no one");
        }
        return TPU_EINVAL;
    }
    size_t off = 0;
    do {
        const size_t n = bytes - off < TPU_MPI_CHUNK ? bytes - off : TPU_MPI_CHUNK;
        char *at = (char *)data + off;
        int rc = send ? MPI_Send(at, (int)n, MPI_BYTE, (int)m->rank + 1, 0, *c)
                      : MPI_Recv(at, (int)n, MPI_BYTE, (int)m->rank - 1, 0, *c,
                                 MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            set_diag(d, TPU_EIO, send ? "the pod's all-reduce chain (MPI_Send to the next "
                                        "rank)"
                                      : "the pod's all-reduce chain (MPI_Recv from the "
                                        "previous rank)", rc);
            return TPU_EIO;
        }
        off += n;
    } while (off < bytes);
    return 0;
}

static int link_recv_prev(void *ctx, uint32_t group, void *data, size_t bytes,
                          struct tpu_diag *d)
{
    return link_chain(ctx, group, false, data, bytes, d);
}

static int link_send_next(void *ctx, uint32_t group, const void *data, size_t bytes,
                          struct tpu_diag *d)
{
    /* MPI_Send reads only: the cast drops const for the shared loop */
    return link_chain(ctx, group, true, (void *)(uintptr_t)data, bytes, d);
}

static int link_bcast_last(void *ctx, uint32_t group, void *data, size_t bytes,
                           struct tpu_diag *d)
{
    struct tpu_mpi *m = ctx;
    MPI_Comm *c = link_comm(m, group, d);
    if (!c)
        return TPU_EINVAL;
    for (size_t off = 0; off < bytes; off += TPU_MPI_CHUNK) {
        const size_t n = bytes - off < TPU_MPI_CHUNK ? bytes - off : TPU_MPI_CHUNK;
        int rc = MPI_Bcast((char *)data + off, (int)n, MPI_BYTE, (int)m->size - 1, *c);
        if (rc != MPI_SUCCESS) {
            set_diag(d, TPU_EIO, "the pod's all-reduce result (MPI_Bcast from the last rank)",
                     rc);
            return TPU_EIO;
        }
    }
    return 0;
}

/* ---- the host group --------------------------------------------------------------------- */

static int group_allgather(void *ctx, const void *send, size_t bytes, void *recv,
                           struct tpu_diag *d)
{
    struct tpu_mpi *m = ctx;
    if (bytes > INT_MAX) {
        if (d) {
            d->code = TPU_ERANGE;
            snprintf(d->msg, sizeof d->msg, "the host group's allgather of %zu bytes per rank "
                     "is more than MPI's count of %d bytes: gather less at once", bytes,
                     INT_MAX);
        }
        return TPU_ERANGE;
    }
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                           m->group_comm);
    if (rc != MPI_SUCCESS) {
        set_diag(d, TPU_EIO, "the host group's exchange (MPI_Allgather)", rc);
        return TPU_EIO;
    }
    return 0;
}

static void group_abort(void *ctx, int rc, const struct tpu_diag *d)
{
    struct tpu_mpi *m = ctx;
    if (m->on_abort)
        m->on_abort(m->on_abort_ctx, rc, d);
    tpu_mpi_abort(m, 1);
}

/* ---- life cycle ------------------------------------------------------------------------- */

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown level";
    }
}

int tpu_mpi_init(int *argc, char ***argv, struct tpu_mpi **out, struct tpu_diag *d)
{
    *out = NULL;
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
        set_diag(d, TPU_EIO, "MPI_Init_thread", rc);
        return TPU_EIO;
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        if (d) {
            d->code = TPU_EUNSUPPORTED;
            snprintf(d->msg, sizeof d->msg, "this MPI library gives %s, and the simulator "
                     "needs MPI_THREAD_MULTIPLE (a device's worker threads move gradients at "
                     "the same time): use an Open MPI built with thread support (Debian's "
                     "libopenmpi-dev is)", thread_level_name(provided));
        }
        return TPU_EUNSUPPORTED;
    }
    struct tpu_mpi *m = calloc(1, sizeof *m);
    if (!m) {
        MPI_Finalize();
        if (d) {
            d->code = TPU_ENOMEM;
            snprintf(d->msg, sizeof d->msg, "out of memory for the MPI context");
        }
        return TPU_ENOMEM;
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    m->rank = (uint32_t)rank;
    m->size = (uint32_t)size;
    m->group_comm = MPI_COMM_NULL;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->group_comm)) != MPI_SUCCESS ||
        (rc = MPI_Comm_set_errhandler(m->group_comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        set_diag(d, TPU_EIO, "the host group's communicator (MPI_Comm_dup)", rc);
        if (m->group_comm != MPI_COMM_NULL)
            MPI_Comm_free(&m->group_comm);
        free(m);
        MPI_Finalize();
        return TPU_EIO;
    }
    m->group = (struct tpu_host_group){.ctx = m, .n = m->size, .rank = m->rank,
                                       .allgather = group_allgather, .abort = group_abort};
    m->link = (struct tpu_pod_link){.ctx = m, .parts = m->size, .index = m->rank,
                                    .max_u64 = link_max_u64, .recv_prev = link_recv_prev,
                                    .send_next = link_send_next, .bcast_last = link_bcast_last,
                                    /* a part that stops its run (a core's error, a cancel)
                                     * ends the job as the host group does: its peers may
                                     * wait in a reduce it will never join */
                                    .abort = group_abort};
    *out = m;
    return 0;
}

uint32_t tpu_mpi_rank(const struct tpu_mpi *m)
{
    return m->rank;
}

uint32_t tpu_mpi_size(const struct tpu_mpi *m)
{
    return m->size;
}

void tpu_mpi_on_abort(struct tpu_mpi *m, void (*fn)(void *ctx, int rc, const struct tpu_diag *d),
                      void *ctx)
{
    m->on_abort = fn;
    m->on_abort_ctx = ctx;
}

int tpu_mpi_pod_link(struct tpu_mpi *m, uint32_t groups, const struct tpu_pod_link **out,
                     struct tpu_diag *d)
{
    *out = NULL;
    if (groups < 1 || groups > TPU_MPI_MAX_GROUPS) {
        if (d) {
            d->code = TPU_EINVAL;
            snprintf(d->msg, sizeof d->msg, "a pod link of %u logical indices: it takes 1 to "
                     "%u (the device's cores per replica)", groups, TPU_MPI_MAX_GROUPS);
        }
        return TPU_EINVAL;
    }
    while (m->n_link_comms < groups) {
        MPI_Comm *c = &m->link_comm[m->n_link_comms];
        int rc = MPI_Comm_dup(MPI_COMM_WORLD, c);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
        if (rc != MPI_SUCCESS) {
            set_diag(d, TPU_EIO, "the pod link's communicator (MPI_Comm_dup)", rc);
            return TPU_EIO;
        }
        m->n_link_comms++;
    }
    *out = &m->link;
    return 0;
}

const struct tpu_host_group *tpu_mpi_host_group(struct tpu_mpi *m)
{
    return &m->group;
}

void tpu_mpi_abort(struct tpu_mpi *m, int code)
{
    (void)m;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    abort(); /* MPI_Abort does not return; if an MPI library's did, end this rank anyway */
}

int tpu_mpi_finalize(struct tpu_mpi **pm, struct tpu_diag *d)
{
    if (!pm || !*pm)
        return 0;
    struct tpu_mpi *m = *pm;
    for (uint32_t k = 0; k < m->n_link_comms; k++)
        MPI_Comm_free(&m->link_comm[k]);
    if (m->group_comm != MPI_COMM_NULL)
        MPI_Comm_free(&m->group_comm);
    free(m);
    *pm = NULL;
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) {
        set_diag(d, TPU_EIO, "MPI_Finalize", rc);
        return TPU_EIO;
    }
    return 0;
}
