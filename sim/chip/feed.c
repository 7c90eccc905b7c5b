/* Infeed and outfeed: the bounded queues between the host and each core.
 *
 * Each queue is a ring of `depth` slots (the chip's infeed/outfeed queue depth). Two
 * parties use it at two speeds: in real time, a host thread and the worker thread running
 * the core block each other when the ring is full or empty; in device time, every slot
 * carries the cycle at which its data is where it needs to be, so the simulated timing does
 * not depend on which thread got there first.
 *
 *   infeed (host -> core)
 *        host: tpu_device_infeed            core: infeed op (chip_exec.c)
 *     full? wait host_cv                  empty? state = WAIT_INFEED, worker moves on
 *     start = max(host_cycle,             take the head slot; the op completes at
 *                 link_in_free,              max(issue, ready_cycle) (the wait is an
 *                 slot_free_cycle[tail])     INFEED_EMPTY stall); that cycle frees the slot
 *     ready = start + bytes/bandwidth        (slot_free_cycle)
 *             + latency
 *     link_in_free = start + bytes/bw
 *     wake the core if it waits
 *
 *   outfeed (core -> host)
 *        core: outfeed op                   host: tpu_device_outfeed
 *     full? state = WAIT_OUTFEED          empty? wait host_cv
 *     start = max(x ready, issue,         take the head slot; the host has it at
 *                 link_out_free,             max(host_cycle, ready_cycle), which frees
 *                 slot_free_cycle[tail])     the slot; wake the core if it waits
 *     (waiting past issue for the slot is an OUTFEED_FULL stall)
 *     ready = start + bytes/bw + latency
 *
 * The chip's host link is shared evenly by its cores: each core's queues see 1/cores of its
 * bandwidth in each direction, on a timeline of their own (link_in_free, link_out_free). A
 * shared first-come timeline would make device time depend on which thread pushed first.
 *
 * Invariants (assert_feed): 0 <= count <= depth; head < depth; only the slots in
 * [head, head + count) hold queued tensors (the others keep their buffers for reuse).
 * Everything here runs under dev->lock, the copies in and out of slots included. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "chip_int.h"
#include "timing.h"
#include "util.h"

static void assert_feed(const struct feed *f)
{
    assert(f->count <= f->depth);
    assert(f->depth == 0 || f->head < f->depth);
    (void)f;
}

void tpu__feed_clear(struct feed *f)
{
    f->head = 0;
    f->count = 0;
}

int tpu__feed_init(struct feed *f, uint32_t depth)
{
    memset(f, 0, sizeof *f);
    f->slots = calloc(depth, sizeof *f->slots);
    f->slot_free_cycle = calloc(depth, sizeof *f->slot_free_cycle);
    if (!f->slots || !f->slot_free_cycle) {
        tpu__feed_free(f);
        return TPU_ENOMEM;
    }
    f->depth = depth;
    return 0;
}

void tpu__feed_free(struct feed *f)
{
    for (uint32_t i = 0; f->slots && i < f->depth; i++)
        free(f->slots[i].data);
    free(f->slots);
    free(f->slot_free_cycle);
    memset(f, 0, sizeof *f);
}

/* Copies a tensor into a slot's buffer, growing it if needed (data NULL: no values). */
static int slot_store(struct feed_slot *s, const void *data, size_t bytes)
{
    s->bytes = bytes;
    s->has_data = data != NULL;
    if (!data)
        return 0;
    if (s->cap < bytes) {
        void *p = realloc(s->data, bytes);
        if (!p)
            return TPU_ENOMEM;
        s->data = p;
        s->cap = bytes;
    }
    memcpy(s->data, data, bytes);
    return 0;
}

static uint32_t tail_index(const struct feed *f)
{
    return (f->head + f->count) % f->depth;
}

void tpu__wake_core(struct chip_device *dev, struct core *c, enum core_state state)
{
    if (c->state == state) {
        c->state = CORE_READY;
        pthread_cond_broadcast(&dev->work_cv);
    }
}

static void record_depths(struct chip_device *dev, struct core *c, uint64_t cycle)
{
    if (dev->s.trace)
        tpu__trace_counter(&c->trace, cycle, c->infeed.count, c->outfeed.count);
}

/* The device API checked core and data (device.h: the backend seam). */
int tpu__chip_infeed(void *impl, uint32_t core, const void *data, size_t bytes,
                     uint64_t host_cycle, struct tpu_diag *d)
{
    struct chip_device *dev = impl;
    struct core *c = &dev->cores[core];
    pthread_mutex_lock(&dev->lock);
    struct feed *f = &c->infeed;
    while (f->count == f->depth && !dev->canceled) {
        c->infeed_waiters++;
        pthread_cond_wait(&c->host_cv, &dev->lock);
        c->infeed_waiters--;
    }
    if (dev->canceled) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ECANCELED, "infeed to core %u: the run was canceled", core);
    }
    uint32_t t = tail_index(f);
    if (slot_store(&f->slots[t], dev->s.timing_only ? NULL : data, bytes)) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ENOMEM, "out of memory queuing %zu infeed bytes", bytes);
    }
    uint64_t start = tpu__max_u64(host_cycle, c->link_in_free);
    start = tpu__max_u64(start, f->slot_free_cycle[t]);
    uint64_t occupy = tpu__host_link_share_cycles(&dev->cfg, bytes) -
                      tpu__host_link_share_cycles(&dev->cfg, 0); /* bytes / bandwidth */
    c->link_in_free = start + occupy;
    f->slots[t].ready_cycle = start + tpu__host_link_share_cycles(&dev->cfg, bytes);
    f->slots[t].link_cycles = occupy;
    f->count++;
    f->pushes++;
    if (dev->s.trace)
        tpu__trace_event(&c->trace, TPU_UNIT_INFEED, 1, UINT32_MAX, start, start + occupy);
    record_depths(dev, c, start);
    assert_feed(f);
    tpu__wake_core(dev, c, CORE_WAIT_INFEED);
    pthread_mutex_unlock(&dev->lock);
    return 0;
}

/* Core side: takes the head infeed tensor into dst (1), or marks the core waiting (0). */
int tpu__core_infeed_take(struct chip_device *dev, struct core *c, uint64_t issue, void *dst,
                          size_t dst_bytes, size_t *got_bytes, uint64_t *done_cycle,
                          uint64_t *link_cycles)
{
    pthread_mutex_lock(&dev->lock);
    struct feed *f = &c->infeed;
    if (f->count == 0) {
        c->state = CORE_WAIT_INFEED;
        pthread_mutex_unlock(&dev->lock);
        return 0;
    }
    struct feed_slot *s = &f->slots[f->head];
    *got_bytes = s->bytes;
    if (dst && s->has_data && s->bytes == dst_bytes)
        memcpy(dst, s->data, dst_bytes);
    uint64_t done = tpu__max_u64(issue, s->ready_cycle);
    f->slot_free_cycle[f->head] = done;
    f->head = (f->head + 1) % f->depth;
    f->count--;
    f->pops++;
    *done_cycle = done;
    *link_cycles = s->link_cycles;
    record_depths(dev, c, done);
    assert_feed(f);
    pthread_cond_broadcast(&c->host_cv);
    pthread_mutex_unlock(&dev->lock);
    return 1;
}

/* Core side: queues `bytes` of `data` (copied) for the host, no earlier than `earliest`.
 * Returns 1 and the cycle the transfer starts and ends, or 0 (core waiting: queue full). */
int tpu__core_outfeed_put(struct chip_device *dev, struct core *c, const void *data,
                          size_t bytes, uint64_t earliest, uint64_t *start_cycle,
                          uint64_t *end_cycle, int *err)
{
    *err = 0;
    pthread_mutex_lock(&dev->lock);
    struct feed *f = &c->outfeed;
    if (f->count == f->depth) {
        c->state = CORE_WAIT_OUTFEED;
        pthread_mutex_unlock(&dev->lock);
        return 0;
    }
    uint32_t t = tail_index(f);
    if (slot_store(&f->slots[t], data, bytes)) {
        pthread_mutex_unlock(&dev->lock);
        *err = TPU_ENOMEM;
        return 0;
    }
    uint64_t start = tpu__max_u64(earliest, c->link_out_free);
    start = tpu__max_u64(start, f->slot_free_cycle[t]);
    uint64_t occupy = tpu__host_link_share_cycles(&dev->cfg, bytes) -
                      tpu__host_link_share_cycles(&dev->cfg, 0);
    c->link_out_free = start + occupy;
    uint64_t ready = start + tpu__host_link_share_cycles(&dev->cfg, bytes);
    f->slots[t].ready_cycle = ready;
    f->count++;
    f->pushes++;
    *start_cycle = start;
    *end_cycle = start + occupy;
    record_depths(dev, c, start);
    assert_feed(f);
    pthread_cond_broadcast(&c->host_cv);
    pthread_mutex_unlock(&dev->lock);
    return 1;
}

/* The device API checked core. */
int tpu__chip_outfeed(void *impl, uint32_t core, void *data, size_t bytes, uint64_t host_cycle,
                      uint64_t *ready_cycle, struct tpu_diag *d)
{
    struct chip_device *dev = impl;
    struct core *c = &dev->cores[core];
    pthread_mutex_lock(&dev->lock);
    struct feed *f = &c->outfeed;
    while (f->count == 0 && !dev->canceled) {
        c->outfeed_waiters++;
        pthread_cond_wait(&c->host_cv, &dev->lock);
        c->outfeed_waiters--;
    }
    if (f->count == 0) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ECANCELED, "outfeed from core %u: the run was canceled", core);
    }
    struct feed_slot *s = &f->slots[f->head];
    if (s->bytes != bytes) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ESHAPE, "outfeed from core %u holds %zu bytes, but %zu were "
                         "asked for; read it into a buffer of its size", core, s->bytes, bytes);
    }
    if (data && s->has_data)
        memcpy(data, s->data, bytes);
    else if (data)
        memset(data, 0, bytes); /* timing-only: no values */
    uint64_t ready = s->ready_cycle;
    uint64_t got = tpu__max_u64(host_cycle, ready);
    f->slot_free_cycle[f->head] = got;
    f->head = (f->head + 1) % f->depth;
    f->count--;
    f->pops++;
    record_depths(dev, c, got);
    assert_feed(f);
    tpu__wake_core(dev, c, CORE_WAIT_OUTFEED);
    pthread_mutex_unlock(&dev->lock);
    if (ready_cycle)
        *ready_cycle = ready;
    return 0;
}
