/* Running a core: each op's values (through ops.c, or here for the ops that involve the host
 * or other cores) and its place on the core's unit timelines.
 *
 * The scoreboard. Ops issue in program order: no op's compute starts before the previous
 * op's compute started. An op computes when its inputs are ready (buf_ready), the buffers it
 * writes are no longer being read or written (buf_read_done, buf_ready: WAR and WAW), and its
 * unit is free. A local op is cut into n chunks that stream through on-chip memory
 * (timing.h); its DMA and its compute form a pipeline on the core's DMA and compute-unit
 * timelines:
 *
 *     DMA:      in0  in1  out0  in2  out1 ... out(n-1)
 *     MXU/VPU:       c0   c1    c2   ...
 *
 *   in_i   HBM-resident inputs' chunk i (params are in HBM; temps in on-chip memory when
 *          they fit, see chip.c), once they are ready. The DMA engines run ahead of compute
 *          (double buffering across ops, like the TPU's weight FIFO): in_0 may start as
 *          soon as the last op that streamed inputs from HBM has started computing (it has
 *          taken its half of the streaming buffers), before this op issues. Later
 *          chunks wait until compute chunk i-1 is done with the buffer half they reuse;
 *   c_i    after in_i, the unit free, and the on-chip inputs ready; time waited only for
 *          in_i is a MEMORY stall;
 *   out_i  HBM-resident outputs' chunk i after c_i.
 * The op's compute time is spread evenly over its chunks.
 *
 * Infeed completes when its data is in HBM (feed.c); waiting for it is an INFEED_EMPTY
 * stall. An infeed with the flag core0 on a core other than its replica's logical core 0
 * takes nothing from the queue, zeroes its y and completes at issue (no link time).
 * Outfeed occupies the outfeed port for the transfer; waiting for a free slot is an
 * OUTFEED_FULL stall. A collective starts when the last participant arrives (waits are SYNC
 * stalls) and takes tpu__all_reduce_cycles / tpu__permute_cycles (the halo ops: their
 * slowest transfer, timing.c) on every participant's ICI unit; its values are summed in
 * replica (or logical core) order, so they do not depend on arrival order.
 *
 * Per-op statistics (settings.op_stats, device.h struct tpu_op_stats). Whatever an op adds to
 * its core's counters is also added to the op's statistics: the counters are copied before
 * the op and the difference is credited after it (for a collective, by the last arriver, on
 * every participant). finish_op counts the run and moves the core's finish frontier, crediting
 * the op with the cycles it pushed it. With op_stats off a core has no statistics and pays one
 * NULL test per op. */
#include <stdlib.h>
#include <string.h>

#include "chip_int.h"
#include "mxu_provider.h"
#include "program/op_table.h"
#include "timing.h"
#include "util.h"

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c)
{
    return tpu__max_u64(a, tpu__max_u64(b, c));
}

static uint64_t buf_bytes(const struct chip_device *dev, uint32_t b)
{
    return tpu_buffer_bytes(tpu_program_buffer(dev->prog, b));
}

/* Earliest start allowed by the op's operands (RAW) and results (WAR, WAW). */
static uint64_t operands_ready(const struct core *c, const struct tpu_op *op)
{
    uint64_t t = 0;
    for (int i = 0; i < TPU_OP_MAX_IN; i++)
        if (op->in[i] != TPU_NO_BUF)
            t = tpu__max_u64(t, c->buf_ready[op->in[i]]);
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] != TPU_NO_BUF)
            t = max3(t, c->buf_ready[op->out[i]], c->buf_read_done[op->out[i]]);
    return t;
}

/* Credits op pc of core c with what its counters gained since `before`. */
static void stats_add_delta(struct core *c, size_t pc, const struct tpu_core_counters *before)
{
    struct tpu_op_stats *st = &c->stats[pc];
    const struct tpu_core_counters *now = &c->ctr;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        st->busy[u] += now->busy[u] - before->busy[u];
    for (int k = 0; k < TPU_STALL_COUNT; k++)
        st->stall[k] += now->stall[k] - before->stall[k];
    st->hbm_read_bytes += now->hbm_read_bytes - before->hbm_read_bytes;
    st->hbm_write_bytes += now->hbm_write_bytes - before->hbm_write_bytes;
    st->infeed_bytes += now->infeed_bytes - before->infeed_bytes;
    st->outfeed_bytes += now->outfeed_bytes - before->outfeed_bytes;
    st->ici_bytes += now->ici_bytes - before->ici_bytes;
    st->mxu_mac_slots += now->mxu_mac_slots - before->mxu_mac_slots;
    st->macs += now->macs - before->macs;
}

/* The op at pc ran from start to end: hazards, in-order issue, and (with statistics) its run
 * and its share of the core's time. */
static void finish_op(struct core *c, size_t pc, const struct tpu_op *op, uint64_t start,
                      uint64_t end)
{
    if (c->stats) {
        struct tpu_op_stats *st = &c->stats[pc];
        st->runs++;
        if (end > c->frontier) {
            st->share_cycles += end - c->frontier;
            c->frontier = end;
        }
    }
    c->last_issue = tpu__max_u64(c->last_issue, start);
    for (int i = 0; i < TPU_OP_MAX_IN; i++)
        if (op->in[i] != TPU_NO_BUF)
            c->buf_read_done[op->in[i]] = tpu__max_u64(c->buf_read_done[op->in[i]], end);
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] != TPU_NO_BUF) {
            c->buf_ready[op->out[i]] = end;
            if (c->from_leader) /* the core wrote it: its own value again (share.c) */
                c->from_leader[op->out[i]] = false;
        }
    c->ctr.ops++;
}

static void trace(struct chip_device *dev, struct core *c, enum tpu_unit u, uint8_t kind,
                  size_t op, uint64_t start, uint64_t end)
{
    if (dev->s.trace && end > start) {
        /* the host's infeed and outfeed calls record into this core's log too (under the
         * lock, feed.c): the log is shared, so it is written under the lock everywhere */
        pthread_mutex_lock(&dev->lock);
        tpu__trace_event(&c->trace, (uint8_t)u, kind, (uint32_t)op, start, end);
        pthread_mutex_unlock(&dev->lock);
    }
}

/* The bytes a local op moves from and to HBM, and when its operands are ready: those in
 * HBM gate its input DMA (*hbm_ready), those on chip and the WAR/WAW hazards on its results
 * gate its compute (*vmem_ready). */
static void hbm_traffic(const struct chip_device *dev, const struct core *c,
                        const struct tpu_op *op, uint64_t *in_bytes, uint64_t *out_bytes,
                        uint64_t *hbm_ready, uint64_t *vmem_ready)
{
    /* an accumulating matmul or an in-place update (the op table's rmw) reads its results */
    const bool reads_outputs = op->attrs.accumulate || tpu__op_info(op->code)->rmw;
    *in_bytes = *out_bytes = *hbm_ready = *vmem_ready = 0;
    for (int i = 0; i < TPU_OP_MAX_IN; i++) {
        uint32_t b = op->in[i];
        if (b == TPU_NO_BUF)
            continue;
        if (dev->place[b] == IN_HBM) {
            *in_bytes += buf_bytes(dev, b);
            *hbm_ready = tpu__max_u64(*hbm_ready, c->buf_ready[b]);
        } else {
            *vmem_ready = tpu__max_u64(*vmem_ready, c->buf_ready[b]);
        }
    }
    for (int i = 0; i < TPU_OP_MAX_OUT; i++) {
        uint32_t b = op->out[i];
        if (b == TPU_NO_BUF)
            continue;
        uint64_t war = tpu__max_u64(c->buf_ready[b], c->buf_read_done[b]);
        *vmem_ready = tpu__max_u64(*vmem_ready, war);
        if (dev->place[b] == IN_HBM) {
            *out_bytes += buf_bytes(dev, b);
            if (reads_outputs)
                *in_bytes += buf_bytes(dev, b);
        }
    }
}

static void time_local_op(struct chip_device *dev, struct core *c, size_t pc,
                          const struct tpu_op *op)
{
    uint64_t cycles, mac_slots, macs;
    enum tpu_unit u = tpu__op_cost(&dev->cfg, dev->prog, op, &cycles, &mac_slots, &macs);
    if (u == TPU_UNIT_MXU && dev->s.mxu) { /* the provider's own count (mxu_provider.h) */
        cycles = c->provider_mxu_cycles;
        mac_slots = cycles * dev->cfg.mxu_rows * dev->cfg.mxu_cols * dev->cfg.mxu_per_core;
    }
    uint64_t in_bytes, out_bytes, hbm_ready, vmem_ready;
    hbm_traffic(dev, c, op, &in_bytes, &out_bytes, &hbm_ready, &vmem_ready);
    const uint64_t n = tpu__stream_chunks(&dev->cfg, tpu__max_u64(in_bytes, out_bytes));
    const uint64_t issue = c->last_issue;
    const uint64_t prefetch_from = c->prefetch_from; /* one op of lookahead for DMA */
    uint64_t dma = c->unit_free[TPU_UNIT_DMA];
    uint64_t unit = c->unit_free[u];
    uint64_t op_start = UINT64_MAX, c_end_prev = 0;
    uint64_t in_end_next = 0;
    /* in_0 */
    {
        uint64_t din = tpu__dma_cycles(&dev->cfg, in_bytes / n + (in_bytes % n != 0));
        uint64_t s = max3(dma, prefetch_from, hbm_ready);
        in_end_next = s + din;
        if (din) {
            trace(dev, c, TPU_UNIT_DMA, 1, pc, s, in_end_next);
            dma = in_end_next;
        } else {
            in_end_next = s;
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t in_end = in_end_next;
        uint64_t cc = cycles / n + (i < cycles % n);
        uint64_t gate = max3(unit, vmem_ready, issue);
        uint64_t cs = tpu__max_u64(gate, in_end);
        if (cs > gate)
            c->ctr.stall[TPU_STALL_MEMORY] += cs - gate;
        uint64_t ce = cs + cc;
        if (op_start > cs)
            op_start = cs;
        trace(dev, c, u, 0, pc, cs, ce);
        unit = ce;
        c->ctr.busy[u] += cc;
        /* prefetch in_{i+1}: the buffer half compute i-1 used must be free */
        if (i + 1 < n) {
            uint64_t din = tpu__dma_cycles(&dev->cfg, in_bytes / n);
            uint64_t s = max3(dma, hbm_ready, tpu__max_u64(prefetch_from, c_end_prev));
            in_end_next = s + din;
            if (din) {
                trace(dev, c, TPU_UNIT_DMA, 1, pc, s, in_end_next);
                dma = in_end_next;
            }
        }
        uint64_t dout =
            tpu__dma_cycles(&dev->cfg, out_bytes / n + (i + 1 == n ? out_bytes % n : 0));
        if (dout) {
            uint64_t s = tpu__max_u64(dma, ce);
            trace(dev, c, TPU_UNIT_DMA, 2, pc, s, s + dout);
            dma = s + dout;
        }
        c_end_prev = ce;
    }
    uint64_t end = tpu__max_u64(unit, dma);
    c->ctr.busy[TPU_UNIT_DMA] += dma > c->unit_free[TPU_UNIT_DMA]
                                     ? tpu__dma_cycles(&dev->cfg, in_bytes) +
                                           tpu__dma_cycles(&dev->cfg, out_bytes)
                                     : 0;
    c->unit_free[TPU_UNIT_DMA] = dma;
    c->unit_free[u] = unit;
    c->ctr.hbm_read_bytes += in_bytes;
    c->ctr.hbm_write_bytes += out_bytes;
    c->ctr.mxu_mac_slots += mac_slots;
    c->ctr.macs += macs;
    if (op_start == UINT64_MAX)
        op_start = issue;
    if (in_bytes) /* its buffer half is being consumed: the next op's input DMA may start */
        c->prefetch_from = op_start;
    finish_op(c, pc, op, op_start, end);
}

/* ---- collectives ------------------------------------------------------------------------ */

/* Whether op runs over the cores of one replica (the halo ops; collective_permute and
 * all_reduce with group=replica_cores) rather than over the replicas. */
static bool within_replica(const struct tpu_op *op)
{
    return op->code == TPU_OP_HALO || op->code == TPU_OP_HALO_GRAD ||
           op->attrs.group == TPU_GROUP_REPLICA_CORES;
}

static struct coll_group *group_of(struct chip_device *dev, const struct core *c,
                                   const struct tpu_op *op)
{
    if (within_replica(op))
        return &dev->groups[dev->cores_per_replica + c->replica];
    return &dev->groups[c->index_in_replica];
}

/* The all-reduce of elements [lo, hi): blocks small enough to stay in cache are summed in
 * replica order, ((x0 + x1) + x2) + ..., (then divided by n for a mean) and written to
 * every member's y. A block is read completely before it is written, so y may be x. */
struct reduce_job {
    const struct chip_device *dev;
    const struct coll_group *g;
    const struct tpu_op *op;
    size_t lo, hi;
    uint32_t n_write; /* members whose y gets the sum: all, or the leader (share.c) */
    bool is_float;
};

static void *reduce_range(void *arg)
{
    const struct reduce_job *j = arg;
    enum { BLOCK = 2048 };
    union {
        float f[BLOCK];
        uint32_t u[BLOCK];
    } acc;
    const uint32_t n = j->g->n;
    const struct core *cores = j->dev->cores;
    const uint32_t x = j->op->in[0], y = j->op->out[0];
    const bool mean = j->op->attrs.reduce == TPU_REDUCE_MEAN;
    for (size_t lo = j->lo; lo < j->hi; lo += BLOCK) {
        size_t len = j->hi - lo < BLOCK ? j->hi - lo : BLOCK;
        if (j->is_float) {
            memcpy(acc.f, (const float *)cores[j->g->members[0]].bufs[x].data + lo, len * 4);
            for (uint32_t r = 1; r < n; r++) /* share.c's adds: the same NaN payloads */
                tpu__sum_into_f32(acc.f, (const float *)cores[j->g->members[r]].bufs[x].data + lo,
                                  len);
            if (mean)
                tpu__mean_f32(acc.f, len, n);
        } else { /* int32, wrapping */
            memcpy(acc.u, (const uint32_t *)cores[j->g->members[0]].bufs[x].data + lo, len * 4);
            for (uint32_t r = 1; r < n; r++) {
                const uint32_t *v = (const uint32_t *)cores[j->g->members[r]].bufs[x].data + lo;
                for (size_t i = 0; i < len; i++)
                    acc.u[i] += v[i];
            }
            if (mean)
                for (size_t i = 0; i < len; i++)
                    acc.u[i] = (uint32_t)((int32_t)acc.u[i] / (int32_t)n);
        }
        for (uint32_t r = 0; r < j->n_write; r++)
            memcpy((char *)cores[j->g->members[r]].bufs[y].data + lo * 4, acc.u, len * 4);
    }
    return NULL;
}

/* The halo ops' values over the group's cores (logical core order), ops_part.c's. */
static int halo_values(struct chip_device *dev, const struct coll_group *g,
                       const struct tpu_op *op, struct tpu_diag *d)
{
    enum { MAX_PARTS = 128 };
    const struct tpu_window *w = &op->attrs.win;
    if (g->n != w->parts || g->n > MAX_PARTS)
        return tpu__fail(d, TPU_EINVAL, "%s: the window has parts=%u but the replica has %u "
                         "cores; load the program on a device whose cores_per_replica is %u",
                         tpu_opcode_name(op->code), (unsigned)w->parts, (unsigned)g->n,
                         (unsigned)w->parts);
    const void *src[MAX_PARTS];
    void *dst[MAX_PARTS];
    for (uint32_t k = 0; k < g->n; k++) {
        const struct core *m = &dev->cores[g->members[k]];
        src[k] = m->bufs[op->in[0]].data;
        dst[k] = m->bufs[op->out[0]].data;
    }
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, op->in[0]);
    const uint64_t per = (op->code == TPU_OP_HALO ? wp.hc : wp.ext) * w->w * w->c;
    const size_t n = (size_t)(((uint64_t)bd->rows * bd->cols) / per); /* verified: exact */
    if (op->code == TPU_OP_HALO)
        tpu__halo(w, n, tpu_dtype_bytes(bd->dtype), src, dst);
    else
        tpu__halo_grad(w, n, (const float *const *)src, (float *const *)dst);
    return 0;
}

/* Values of a collective, done by the last arriver while the others wait. A large
 * all-reduce is split over the device's worker count (the others are idle meanwhile); the
 * split does not change a value, since every element is summed in the same order. */
static int collective_values(struct chip_device *dev, const struct coll_group *g,
                             const struct tpu_op *op, bool leader_only, struct tpu_diag *d)
{
    if (dev->s.timing_only)
        return 0;
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, op->in[0]);
    const size_t count = (size_t)bd->rows * bd->cols;
    const size_t bytes = count * tpu_dtype_bytes(bd->dtype);
    if (op->code == TPU_OP_HALO || op->code == TPU_OP_HALO_GRAD)
        return halo_values(dev, g, op, d);
    if (op->code == TPU_OP_ALL_REDUCE) {
        enum { MAX_SPLIT = 16 };
        unsigned parts = dev->n_workers ? dev->n_workers : 1;
        if (parts > MAX_SPLIT)
            parts = MAX_SPLIT;
        if (count < ((size_t)1 << 16))
            parts = 1; /* not worth a thread */
        struct reduce_job jobs[MAX_SPLIT];
        pthread_t th[MAX_SPLIT];
        bool started[MAX_SPLIT] = {false};
        for (unsigned k = 0; k < parts; k++) {
            jobs[k] = (struct reduce_job){.dev = dev, .g = g, .op = op,
                                          .lo = count * k / parts, .hi = count * (k + 1) / parts,
                                          .n_write = leader_only ? 1 : g->n,
                                          .is_float = bd->dtype == TPU_F32};
            if (k > 0)
                started[k] = pthread_create(&th[k], NULL, reduce_range, &jobs[k]) == 0;
        }
        reduce_range(&jobs[0]);
        for (unsigned k = 1; k < parts; k++) {
            if (started[k])
                pthread_join(th[k], NULL);
            else
                reduce_range(&jobs[k]); /* no thread: do it here */
        }
        return 0;
    }
    /* collective_permute: y on member i = x from member (i - shift) mod n */
    void *all = malloc(bytes * g->n + 1);
    if (!all)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for a collective_permute");
    for (uint32_t r = 0; r < g->n; r++)
        memcpy((char *)all + r * bytes, dev->cores[g->members[r]].bufs[op->in[0]].data, bytes);
    int64_t n = g->n;
    for (uint32_t r = 0; r < g->n; r++) {
        int64_t src = (((int64_t)r - op->attrs.shift) % n + n) % n;
        memcpy(dev->cores[g->members[r]].bufs[op->out[0]].data, (char *)all + src * bytes, bytes);
    }
    free(all);
    return 0;
}

/* A halo op's cycles over group g (sim/chip/timing.c, tpu__halo_cycles, defines them), and
 * into received[k] the bytes logical core k receives from the other cores. */
static uint64_t halo_cycles(const struct chip_device *dev, const struct coll_group *g,
                            const struct tpu_op *op, uint64_t *received)
{
    const struct tpu_window *w = &op->attrs.win;
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const bool grad = op->code == TPU_OP_HALO_GRAD;
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, op->in[0]);
    const uint64_t per = (grad ? wp.ext : wp.hc) * w->w * w->c;
    const uint64_t n = per ? ((uint64_t)bd->rows * bd->cols) / per : 0;
    const uint64_t row_bytes = (uint64_t)w->w * w->c * tpu_dtype_bytes(bd->dtype);
    uint64_t dur = 0;
    for (uint32_t k = 0; k < g->n && k < w->parts; k++) {
        received[k] = 0;
        for (uint32_t q = 0; q < g->n && q < w->parts; q++) {
            if (q == k)
                continue;
            /* halo: k's ext rows held by q; halo_grad: q's ext rows that are k's rows */
            const uint64_t rows = grad ? tpu__halo_rows(w, q, k) : tpu__halo_rows(w, k, q);
            const uint64_t b = rows * n * row_bytes;
            const bool other_chip =
                dev->cores[g->members[k]].chip != dev->cores[g->members[q]].chip;
            received[k] += b;
            dur = tpu__max_u64(dur, tpu__halo_transfer_cycles(&dev->cfg, b, other_chip));
        }
    }
    for (uint32_t k = w->parts; k < g->n; k++)
        received[k] = 0; /* a malformed program: halo_values refuses it */
    return dur;
}

/* Arrives at a collective. Returns 1 if this core is the last and has completed it for
 * everyone, 0 if it waits, negative on error. */
static int collective(struct chip_device *dev, struct core *c, size_t pc, const struct tpu_op *op,
                      struct tpu_diag *d)
{
    struct coll_group *g = group_of(dev, c, op);
    c->coll_arrival = max3(c->last_issue, operands_ready(c, op), c->unit_free[TPU_UNIT_ICI]);
    const bool leader_only = op->code == TPU_OP_ALL_REDUCE && !within_replica(op) &&
                             tpu__share_reduce_leader_only(dev, pc, c->index_in_replica);
    const bool streamed = leader_only && tpu__share_streamed(dev, op);
    if (streamed) /* its x joins the leader's sum as soon as it is its turn */
        tpu__share_stream_add(dev, g, c, op);
    pthread_mutex_lock(&dev->lock);
    if (++g->arrived < g->n) {
        c->state = CORE_WAIT_COLL;
        pthread_mutex_unlock(&dev->lock);
        return 0;
    }
    g->arrived = 0;
    pthread_mutex_unlock(&dev->lock);

    /* over the replicas of a pod's parts: the part's lane completes it with the others
     * (pod.c; a collective_permute over the replicas was refused at load) */
    if (dev->pod_parts > 1 && !within_replica(op))
        return tpu__pod_reduce(dev, c, pc, leader_only);
    /* everyone else waits in CORE_WAIT_COLL: their state is ours to change */
    if (streamed) {
        int rc = tpu__share_stream_finish(dev, g, op, d);
        if (rc)
            return rc;
    } else {
        int rc = collective_values(dev, g, op, leader_only, d);
        if (rc)
            return rc;
    }
    tpu__collective_book(dev, g, c, pc, op, tpu__coll_start(dev, g), g->n, leader_only);
    return 1;
}

uint64_t tpu__coll_start(const struct chip_device *dev, const struct coll_group *g)
{
    uint64_t start = 0;
    for (uint32_t r = 0; r < g->n; r++)
        start = tpu__max_u64(start, dev->cores[g->members[r]].coll_arrival);
    return start;
}

void tpu__collective_book(struct chip_device *dev, const struct coll_group *g,
                          const struct core *c, size_t pc, const struct tpu_op *op,
                          uint64_t start, uint32_t n_coll, bool leader_only)
{
    /* a pod's other parts are other chips (only a permute's cycles ask) */
    bool cross_chip = n_coll > g->n;
    for (uint32_t r = 1; r < g->n; r++)
        cross_chip = cross_chip || dev->cores[g->members[r]].chip !=
                                       dev->cores[g->members[0]].chip;
    const uint64_t bytes = buf_bytes(dev, op->in[0]);
    uint32_t per_chip = 1;
    for (uint32_t r = 1; r < g->n; r++)
        per_chip += dev->cores[g->members[r]].chip == dev->cores[g->members[0]].chip;
    const bool halo = op->code == TPU_OP_HALO || op->code == TPU_OP_HALO_GRAD;
    enum { MAX_HALO = 128 };
    uint64_t received[MAX_HALO]; /* halo ops: the bytes each member receives */
    const uint64_t dur =
        halo ? halo_cycles(dev, g, op, received)
             : tpu__collective_cycles(&dev->cfg, op->code, n_coll, per_chip, cross_chip, bytes);
    for (uint32_t r = 0; r < g->n; r++) {
        struct core *m = &dev->cores[g->members[r]];
        const struct tpu_core_counters before = m->ctr;
        m->ctr.stall[TPU_STALL_SYNC] += start - m->coll_arrival;
        m->ctr.busy[TPU_UNIT_ICI] += dur;
        m->ctr.ici_bytes += halo ? received[r] : n_coll > 1 ? bytes : 0;
        m->unit_free[TPU_UNIT_ICI] = start + dur;
        trace(dev, m, TPU_UNIT_ICI, 0, pc, start, start + dur);
        if (m->stats)
            stats_add_delta(m, pc, &before);
        finish_op(m, pc, op, start, start + dur);
        if (leader_only && r > 0 && !dev->s.timing_only)
            m->from_leader[op->out[0]] = true;
        if (m != c)
            m->pc++;
    }
    pthread_mutex_lock(&dev->lock);
    for (uint32_t r = 0; r < g->n; r++) {
        struct core *m = &dev->cores[g->members[r]];
        if (m != c)
            tpu__wake_core(dev, m, CORE_WAIT_COLL);
    }
    pthread_mutex_unlock(&dev->lock);
}

/* ---- feeds ------------------------------------------------------------------------------- */

static int do_infeed(struct chip_device *dev, struct core *c, size_t pc, const struct tpu_op *op,
                     struct tpu_diag *d)
{
    uint64_t issue = tpu__max_u64(c->last_issue, operands_ready(c, op));
    struct tpu__bufmem *b = &c->bufs[op->out[0]];
    const uint64_t want = buf_bytes(dev, op->out[0]);
    if (op->attrs.core0 && c->index_in_replica != 0) {
        /* only logical core 0 of the replica dequeues; this core's y is zeros */
        if (!dev->s.timing_only)
            memset(b->data, 0, want);
        finish_op(c, pc, op, issue, issue);
        return 1;
    }
    size_t got = 0;
    uint64_t done, link;
    if (!tpu__core_infeed_take(dev, c, issue, b->data, want, &got, &done, &link))
        return 0;
    if (got != want)
        return tpu__fail(d, TPU_ESHAPE,
                         "core %u: infeed op %zu into '%s' expects %llu bytes (%s[%u, %u]) but "
                         "the host queued %zu bytes; queue tensors of the buffer's size",
                         c->id, pc, tpu_program_buffer(dev->prog, op->out[0])->name,
                         (unsigned long long)want, tpu_dtype_name(b->dtype), b->rows,
                         b->cols, got);
    if (done > issue)
        c->ctr.stall[TPU_STALL_INFEED_EMPTY] += done - issue;
    c->ctr.infeed_bytes += got;
    c->unit_free[TPU_UNIT_INFEED] = tpu__max_u64(c->unit_free[TPU_UNIT_INFEED], done);
    if (c->stats) /* the link carried it before the op; the counters do not count it */
        c->stats[pc].busy[TPU_UNIT_INFEED] += link;
    finish_op(c, pc, op, done, done);
    return 1;
}

static int do_outfeed(struct chip_device *dev, struct core *c, size_t pc, const struct tpu_op *op,
                      struct tpu_diag *d)
{
    uint64_t earliest = max3(c->last_issue, operands_ready(c, op), c->unit_free[TPU_UNIT_OUTFEED]);
    uint64_t start, end;
    int err;
    const struct tpu__bufmem *b = &c->bufs[op->in[0]];
    size_t bytes = buf_bytes(dev, op->in[0]);
    if (!tpu__core_outfeed_put(dev, c, b->data, bytes, earliest, &start, &end, &err))
        return err ? tpu__fail(d, err, "out of memory queuing outfeed") : 0;
    /* a wait past `earliest` for the host to free a slot (or the link) */
    if (start > earliest)
        c->ctr.stall[TPU_STALL_OUTFEED_FULL] += start - earliest;
    c->ctr.outfeed_bytes += bytes;
    c->ctr.busy[TPU_UNIT_OUTFEED] += end - start;
    c->unit_free[TPU_UNIT_OUTFEED] = end;
    trace(dev, c, TPU_UNIT_OUTFEED, 0, pc, start, end);
    finish_op(c, pc, op, start, end);
    return 1;
}

/* ---- the core's run loop ----------------------------------------------------------------- */

static bool canceled(struct chip_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    bool x = dev->canceled;
    pthread_mutex_unlock(&dev->lock);
    return x;
}

/* Runs an op other than a loop on the unit the op table gives it: infeed, outfeed and
 * collectives are the chip's; the local ops (MXU, VPU, CTRL) compute their values (sim/ops/,
 * or the matrix unit's provider) and take their place on the core's timelines. Returns 1
 * when done, 0 when blocked, negative on error. */
static int run_op(struct chip_device *dev, struct core *c, size_t pc, const struct tpu_op *op,
                  struct tpu__scratch *scratch, struct tpu_diag *d)
{
    const enum tpu_unit unit = tpu__op_unit(op->code);
    switch (unit) {
    case TPU_UNIT_INFEED:
        return do_infeed(dev, c, pc, op, d);
    case TPU_UNIT_OUTFEED:
        return do_outfeed(dev, c, pc, op, d);
    case TPU_UNIT_ICI:
        return collective(dev, c, pc, op, d);
    default:
        break;
    }
    if (!dev->s.timing_only) {
        /* a temp a streamed reduce let go needs a buffer again; a shared update is
         * computed once for the replicas (share.c), or here (1) */
        int e = dev->lazy ? tpu__share_acquire(dev, c, op, d) : 0;
        if (!e)
            e = dev->role ? tpu__share_update(dev, c, pc, op, scratch, d) : 1;
        const bool hint = e == 1 && unit == TPU_UNIT_MXU && !dev->s.mxu && dev->uni;
        if (hint) /* a shared weight: the GEMM may keep its packed blocks */
            tpu__share_hint(dev, c, op, scratch);
        if (e == 1)
            e = unit == TPU_UNIT_MXU && dev->s.mxu
                    ? tpu__provider_matmul(dev->s.mxu, &dev->cfg, c->id, c->index_in_replica,
                                           op, c->bufs, &c->provider_mxu_cycles, d)
                    : tpu__op_compute_core(op, c->bufs, c->vars, c->pod_replica,
                                           c->index_in_replica, dev->cfg.mxu_rows,
                                           dev->s.kernel_threads ? dev->s.kernel_threads : 1,
                                           scratch, d);
        if (hint)
            tpu__share_hint(dev, c, NULL, scratch);
        if (e) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "core %u, op %zu: ", c->id, pc);
            if (d) {
                size_t pl = strlen(prefix), ml = strlen(d->msg);
                if (pl + ml < sizeof d->msg) {
                    memmove(d->msg + pl, d->msg, ml + 1);
                    memcpy(d->msg, prefix, pl);
                }
            }
            return e;
        }
    } else if (op->code == TPU_OP_VAR_ADD) {
        c->vars[op->attrs.var] += op->attrs.imm;
    }
    time_local_op(dev, c, pc, op);
    return 1;
}

int tpu__core_run(struct chip_device *dev, struct core *c, struct tpu__scratch *scratch,
                  struct tpu_diag *d)
{
    const size_t n_ops = tpu_program_n_ops(dev->prog);
    while (c->pc < n_ops) {
        if (canceled(dev))
            return TPU_ECANCELED;
        const size_t pc = c->pc;
        const struct tpu_op *op = tpu_program_op(dev->prog, pc);
        int rc = 1;
        switch (op->code) {
        case TPU_OP_LOOP_BEGIN:
            if (c->stats)
                c->stats[pc].runs++;
            c->loop_left = c->vars[op->attrs.var];
            c->in_loop = true;
            if (c->loop_left <= 0) { /* skip the body */
                size_t e = pc + 1;
                while (tpu_program_op(dev->prog, e)->code != TPU_OP_LOOP_END)
                    e++;
                c->pc = e + 1;
                c->in_loop = false;
                continue;
            }
            break;
        case TPU_OP_LOOP_END:
            if (c->stats)
                c->stats[pc].runs++;
            c->ctr.iterations++;
            if (--c->loop_left > 0) {
                size_t b = pc;
                while (tpu_program_op(dev->prog, b)->code != TPU_OP_LOOP_BEGIN)
                    b--;
                c->pc = b + 1;
                continue;
            }
            c->in_loop = false;
            break;
        default:
            if (c->stats && tpu__op_unit(op->code) != TPU_UNIT_ICI) {
                /* a collective credits every participant itself */
                const struct tpu_core_counters before = c->ctr;
                rc = run_op(dev, c, pc, op, scratch, d);
                if (rc == 1)
                    stats_add_delta(c, pc, &before);
            } else {
                rc = run_op(dev, c, pc, op, scratch, d);
            }
            break;
        }
        if (rc <= 0)
            return rc; /* blocked (0) or failed */
        c->pc++;
    }
    uint64_t end = 0;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        end = tpu__max_u64(end, c->unit_free[u]);
    c->ctr.cycles = tpu__max_u64(end, c->last_issue);
    return 1;
}

/* The device API checked that statistics are on, a program is loaded, n_ops is its op count
 * and no run is under way. */
void tpu__chip_op_stats(void *impl, uint32_t core, struct tpu_op_stats *out, size_t n_ops)
{
    const struct chip_device *dev = impl;
    if (n_ops)
        memcpy(out, dev->cores[core].stats, n_ops * sizeof *out);
}
