/* The all-reduces over the replicas of a device that is one part of a pod (device.h,
 * settings.pod with parts > 1): the chain that makes a pod of parts sum bit for bit as one
 * device of the whole pod does, and the lane threads that make the link's calls.
 *
 * What one device of the whole pod does (chip_exec.c): the all_reduce of index k starts when
 * the last of its R x parts members arrives, sums their x in replica order,
 * ((x0 + x1) + x2) + ..., divides for a mean, writes every member's y, and takes the cycles
 * of that many members. A part holds R of them, pod replicas [index x R, index x R + R), so
 * its last local arriver's reduce becomes, on its lane:
 *
 *     start = max(local arrivals)          link->max_u64(k, &start): the pod's last arrival
 *     part 0:  acc = x of its member 0     part h > 0: link->recv_prev(k, acc)
 *     acc = acc + x of each further local member, in member order (f32, as verified)
 *     not the last part: link->send_next(k, acc); the last: acc = acc / (R x parts) (mean)
 *     link->bcast_last(k, acc)             every part now holds the pod's sum
 *     y = acc on the local members (or the leader only: replica sharing's leader-only
 *     reduces), then the booking of a collective of R x parts members from `start`
 *
 * which is the one-device sum term for term. A timing-only device makes only the max call.
 *
 * Why lanes. A link call blocks until the other parts make theirs. If a worker made it, a
 * part could have every worker waiting in the link for index k while the core that another
 * part's reduce of index k' needs from it has no worker to run it: the parts would wait for
 * each other forever. So the last local arriver hands the reduce to lane k's thread (one per
 * logical index, started for the run) and waits at the collective like the other members;
 * the workers go on running whatever cores can move. The calls of one k come in program
 * order on every part (the members of k wait until its reduce is done, so a lane has at most
 * one job), and different k run on different lanes at the same time, as the link allows.
 *
 * Failure. A link call that fails (a peer is gone, the pod was aborted) fails the run as a
 * core's error does: the first error is kept with the link's sentence, the run is canceled,
 * tpu_device_run returns it. The run's end waits for the lanes' calls under way: a canceled
 * part whose peers never make the matching call waits until the link fails. So a cancel
 * during a run and a core's error call the link's optional abort (tpu__pod_release), which
 * ends every part's calls; without it, the link's owner must (the host group's abort).
 *
 * Shape. Each lane's first reduce checks through the link that every part has this part's
 * replicas and cores per replica (same_shape): another count would give a wrong mean and
 * wrong cycles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip_int.h"
#include "util.h"

/* The pod's sum of x over group g's members into the lane's acc, then y. */
static int chain_values(struct pod_lane *ln, const struct coll_group *g,
                        const struct tpu_op *op, struct tpu_diag *d)
{
    struct chip_device *dev = ln->dev;
    const struct tpu_pod_link *link = dev->s.pod;
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, op->in[0]);
    const size_t count = (size_t)bd->rows * bd->cols;
    const size_t bytes = count * sizeof(float); /* all_reduce is f32 (verified) */
    if (bytes > ln->acc_cap) {
        void *a = realloc(ln->acc, bytes);
        if (!a)
            return tpu__fail(d, TPU_ENOMEM, "out of memory for the %zu-byte sum of an "
                             "all_reduce across the pod", bytes);
        ln->acc = a;
        ln->acc_cap = bytes;
    }
    const bool last = link->index + 1 == link->parts;
    const uint32_t n_pod = g->n * link->parts;
    const uint32_t x = op->in[0], y = op->out[0];
    uint32_t first = 0; /* the first local member added into acc */
    int rc;
    if (link->index == 0) {
        memcpy(ln->acc, dev->cores[g->members[0]].bufs[x].data, bytes);
        first = 1;
    } else if ((rc = link->recv_prev(link->ctx, ln->k, ln->acc, bytes, d)) != 0) {
        return rc;
    }
    float *acc = ln->acc; /* [count] */
    for (uint32_t r = first; r < g->n; r++) /* the one device's adds, NaN payloads and all */
        tpu__sum_into_f32(acc, dev->cores[g->members[r]].bufs[x].data, count);
    if (last && op->attrs.reduce == TPU_REDUCE_MEAN)
        tpu__mean_f32(acc, count, n_pod);
    if (!last && (rc = link->send_next(link->ctx, ln->k, ln->acc, bytes, d)) != 0)
        return rc;
    if ((rc = link->bcast_last(link->ctx, ln->k, ln->acc, bytes, d)) != 0)
        return rc;
    const uint32_t n_write = ln->leader_only ? 1 : g->n;
    for (uint32_t r = 0; r < n_write; r++)
        memcpy(dev->cores[g->members[r]].bufs[y].data, ln->acc, bytes);
    return 0;
}

/* The first reduce of each lane: every part must have this part's replica count and
 * cores per replica, or the sums' members, the mean's divisor and the cycles would be
 * wrong. Two max calls give the largest and (by the complement) the smallest over the pod,
 * so every part sees a mismatch and fails with the same figures. */
static int same_shape(struct pod_lane *ln, struct tpu_diag *d)
{
    const struct chip_device *dev = ln->dev;
    const struct tpu_pod_link *link = dev->s.pod;
    const uint64_t mine = (uint64_t)dev->n_replicas << 32 | dev->cores_per_replica;
    uint64_t hi = mine, lo = ~mine;
    int rc = link->max_u64(link->ctx, ln->k, &hi, d);
    if (!rc)
        rc = link->max_u64(link->ctx, ln->k, &lo, d);
    if (rc)
        return rc;
    lo = ~lo;
    if (hi == lo)
        return 0;
    return tpu__fail(d, TPU_EINVAL, "this part has %u replicas of %u cores, but the pod's "
                     "parts range from %u replicas of %u cores to %u of %u: every part of a pod "
                     "has the same replicas; open each with the same n_chips and "
                     "cores_per_replica", dev->n_replicas, dev->cores_per_replica,
                     (unsigned)(lo >> 32), (unsigned)(uint32_t)lo, (unsigned)(hi >> 32),
                     (unsigned)(uint32_t)hi);
}

/* Lane ln's reduce: the op at ln->pc over group ln->k, every member waiting. */
static int lane_reduce(struct pod_lane *ln, struct tpu_diag *d)
{
    struct chip_device *dev = ln->dev;
    const struct tpu_pod_link *link = dev->s.pod;
    const struct coll_group *g = &dev->groups[ln->k];
    const struct tpu_op *op = tpu_program_op(dev->prog, ln->pc);
    int rc = ln->checked ? 0 : same_shape(ln, d);
    if (rc)
        return rc;
    ln->checked = true;
    uint64_t start = tpu__coll_start(dev, g);
    rc = link->max_u64(link->ctx, ln->k, &start, d);
    if (!rc && !dev->s.timing_only)
        rc = chain_values(ln, g, op, d);
    if (rc)
        return rc;
    tpu__collective_book(dev, g, NULL, ln->pc, op, start, g->n * link->parts, ln->leader_only);
    return 0;
}

static void *lane_main(void *arg)
{
    struct pod_lane *ln = arg;
    struct chip_device *dev = ln->dev;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        while (!ln->has_job && !ln->quit)
            pthread_cond_wait(&dev->pod_cv, &dev->lock);
        if (!ln->has_job)
            break; /* quit */
        ln->has_job = false;
        pthread_mutex_unlock(&dev->lock);
        struct tpu_diag d = {0};
        int rc = lane_reduce(ln, &d);
        pthread_mutex_lock(&dev->lock);
        if (rc) {
            char msg[TPU_DIAG_MAX];
            snprintf(msg, sizeof msg, "op %zu, the all_reduce of logical core %u across the "
                     "pod's %u parts (this is part %u): %.900s", ln->pc, ln->k,
                     dev->s.pod->parts, dev->s.pod->index, d.msg[0] ? d.msg : tpu_strerror(rc));
            snprintf(d.msg, sizeof d.msg, "%s", msg);
            tpu__fail_run_locked(dev, rc, &d);
        }
        dev->pod_busy--;
        pthread_cond_broadcast(&dev->pod_cv);
        pthread_cond_broadcast(&dev->work_cv); /* a worker may wait to see the cores starved */
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

int tpu__pod_start(struct chip_device *dev, struct tpu_diag *d)
{
    const uint32_t cpr = dev->cores_per_replica;
    for (uint32_t k = 0; k < cpr; k++) {
        struct pod_lane *ln = &dev->lanes[k];
        ln->has_job = false;
        ln->quit = false;
        ln->started = pthread_create(&ln->th, NULL, lane_main, ln) == 0;
        if (!ln->started) {
            tpu__pod_stop(dev);
            return tpu__fail(d, TPU_ETHREAD, "cannot start the thread that makes the pod "
                             "link's calls for logical core %u (%u are needed, one per core "
                             "of a replica): the process is out of threads", k, cpr);
        }
    }
    return 0;
}

void tpu__pod_stop(struct chip_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    while (dev->pod_busy)
        pthread_cond_wait(&dev->pod_cv, &dev->lock);
    for (uint32_t k = 0; k < dev->cores_per_replica; k++)
        dev->lanes[k].quit = true;
    pthread_cond_broadcast(&dev->pod_cv);
    pthread_mutex_unlock(&dev->lock);
    for (uint32_t k = 0; k < dev->cores_per_replica; k++) {
        struct pod_lane *ln = &dev->lanes[k];
        if (ln->started)
            pthread_join(ln->th, NULL);
        ln->started = false;
    }
}

void tpu__pod_release(struct chip_device *dev, int rc, const struct tpu_diag *why)
{
    const struct tpu_pod_link *link = dev->s.pod;
    if (dev->pod_parts < 2 || !link->abort)
        return;
    struct tpu_diag d = {0};
    tpu__fail(&d, rc, "part %u of the pod stopped its run: %.900s", link->index,
              why && why->msg[0] ? why->msg : tpu_strerror(rc));
    link->abort(link->ctx, rc, &d);
}

int tpu__pod_reduce(struct chip_device *dev, struct core *c, size_t pc, bool leader_only)
{
    struct pod_lane *ln = &dev->lanes[c->index_in_replica];
    pthread_mutex_lock(&dev->lock);
    c->state = CORE_WAIT_COLL;
    ln->pc = pc;
    ln->leader_only = leader_only;
    ln->has_job = true;
    dev->pod_busy++;
    pthread_cond_broadcast(&dev->pod_cv);
    pthread_mutex_unlock(&dev->lock);
    return 0;
}
