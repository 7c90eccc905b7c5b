/* The native device: opening a chip set, loading a program, host access to buffers and
 * variables, and the run scheduler that spreads the cores over worker threads.
 *
 * Scheduling. A run marks every core READY. Each worker repeatedly takes a READY core,
 * runs it (tpu__core_run) until it finishes or blocks (empty infeed, full outfeed, a
 * collective not everyone has reached), and puts it back. Whoever unblocks a core (a host
 * feed call, the last arriver of a collective) makes it READY again. Because every timing
 * decision uses device cycles carried by the data, never the order in which threads ran,
 * the results are the same for any number of workers; tests check this.
 *
 * Memory placement (decided at load, the way XLA assigns memory spaces): params live in
 * HBM, and so does every infeed target (the host writes HBM). Other temps go to on-chip
 * memory when they fit in half of it (the other half is the streaming buffers of timing.h)
 * alongside the temps live at the same time: a temp is live from the op that first writes
 * it to the last op that reads it (to the end of the loop, if it is written before the loop
 * and read inside); temps are placed first-fit in buffer order. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chip_int.h"
#include "mxu_provider.h"
#include "util.h"

const char *tpu_unit_name(enum tpu_unit u)
{
    switch (u) {
#define X(e, name)                                                                             \
    case TPU_UNIT_##e:                                                                         \
        return name;
        TPU_UNIT_TABLE(X)
#undef X
    default:
        return "?";
    }
}

const char *tpu_stall_name(enum tpu_stall s)
{
    switch (s) {
#define X(e, name)                                                                             \
    case TPU_STALL_##e:                                                                        \
        return name;
        TPU_STALL_TABLE(X)
#undef X
    default:
        return "?";
    }
}

void tpu_device_default_settings(struct tpu_device_settings *s,
                                 const struct tpu_chip_config *chip)
{
    memset(s, 0, sizeof *s);
    s->chip = *chip;
    s->n_chips = chip->chips_per_host;
    s->cores_per_replica = 1;
    s->n_threads = 0;
    s->kernel_threads = 1;
}

static void log_msg(const struct tpu_device *dev, enum tpu_log_level level, const char *msg)
{
    if (dev->s.log)
        dev->s.log(dev->s.log_ctx, level, msg);
}

static void free_core_buffers(struct tpu_device *dev)
{
    if (!dev->cores)
        return;
    size_t nb = dev->prog ? tpu_program_n_buffers(dev->prog) : 0;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        if (c->bufs)
            for (size_t b = 0; b < nb; b++)
                free(c->bufs[b].data);
        free(c->bufs);
        free(c->vars);
        free(c->buf_ready);
        free(c->buf_read_done);
        c->bufs = NULL;
        c->vars = NULL;
        c->buf_ready = c->buf_read_done = NULL;
    }
}

int tpu_device_open(const struct tpu_device_settings *s, struct tpu_device **out,
                    struct tpu_diag *d)
{
    int rc = tpu_config_validate(&s->chip, s->chip.name, d);
    if (rc)
        return rc;
    const struct tpu_chip_config *cfg = &s->chip;
    if (s->n_chips < 1 || s->n_chips > 4096)
        return tpu__fail(d, TPU_EINVAL, "n_chips %u is out of range; use 1 to 4096",
                         s->n_chips);
    uint64_t n_cores = (uint64_t)s->n_chips * cfg->cores_per_chip;
    uint32_t cpr = s->cores_per_replica;
    if (cpr < 1 || (cpr & (cpr - 1)) != 0 || cpr > 128 || n_cores % cpr != 0)
        return tpu__fail(d, TPU_EINVAL,
                         "cores_per_replica %u must be a power of two from 1 to 128 that "
                         "divides the %llu cores (%u chips x %u cores)",
                         cpr, (unsigned long long)n_cores, s->n_chips, cfg->cores_per_chip);
    if ((rc = tpu__provider_check(s, d)) != 0)
        return rc;

    struct tpu_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return tpu__fail(d, TPU_ENOMEM, "out of memory opening the device");
    dev->s = *s;
    dev->cfg = *cfg;
    dev->n_cores = (uint32_t)n_cores;
    dev->cores_per_replica = cpr;
    dev->n_replicas = dev->n_cores / cpr;
    dev->n_groups = cpr + dev->n_replicas;
    dev->cores = calloc(dev->n_cores, sizeof *dev->cores);
    dev->groups = calloc(dev->n_groups, sizeof *dev->groups);
    dev->workers = calloc(dev->n_cores, sizeof *dev->workers);
    if (!dev->cores || !dev->groups || !dev->workers)
        goto nomem;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        dev->workers[i].dev = dev;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->work_cv, NULL);
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->id = i;
        c->chip = i / cfg->cores_per_chip;
        c->replica = i / cpr;
        c->index_in_replica = i % cpr;
        c->state = CORE_DONE;
        pthread_cond_init(&c->host_cv, NULL);
        c->host_cv_ready = true;
        if (tpu__feed_init(&c->infeed, cfg->infeed_queue_depth) ||
            tpu__feed_init(&c->outfeed, cfg->outfeed_queue_depth))
            goto nomem;
    }
    /* groups: [0, cpr) the replicas sharing an index; [cpr, cpr + replicas) one replica */
    for (uint32_t g = 0; g < dev->n_groups; g++) {
        struct coll_group *grp = &dev->groups[g];
        grp->n = g < cpr ? dev->n_replicas : cpr;
        grp->members = calloc(grp->n, sizeof *grp->members);
        if (!grp->members)
            goto nomem;
        for (uint32_t k = 0; k < grp->n; k++)
            grp->members[k] = g < cpr ? k * cpr + g : (g - cpr) * cpr + k;
    }
    *out = dev;
    return 0;
nomem:
    tpu_device_close(&dev);
    return tpu__fail(d, TPU_ENOMEM, "out of memory opening a device of %llu cores",
                     (unsigned long long)n_cores);
}

void tpu_device_close(struct tpu_device **pdev)
{
    if (!pdev || !*pdev)
        return;
    struct tpu_device *dev = *pdev;
    free_core_buffers(dev);
    if (dev->cores) {
        for (uint32_t i = 0; i < dev->n_cores; i++) {
            if (dev->cores[i].host_cv_ready)
                pthread_cond_destroy(&dev->cores[i].host_cv);
            tpu__feed_free(&dev->cores[i].infeed);
            tpu__feed_free(&dev->cores[i].outfeed);
            tpu__trace_free(&dev->cores[i].trace);
        }
        pthread_mutex_destroy(&dev->lock);
        pthread_cond_destroy(&dev->work_cv);
    }
    if (dev->groups)
        for (uint32_t g = 0; g < dev->n_groups; g++)
            free(dev->groups[g].members);
    if (dev->workers)
        for (uint32_t i = 0; i < dev->n_cores; i++)
            tpu__scratch_free(&dev->workers[i].scratch);
    free(dev->workers);
    tpu__trace_free(&dev->host_trace);
    free(dev->host_names);
    free(dev->op_labels);
    free(dev->groups);
    free(dev->cores);
    free(dev->place);
    tpu_program_destroy(&dev->prog);
    free(dev);
    *pdev = NULL;
}

uint32_t tpu_device_n_cores(const struct tpu_device *dev)
{
    return dev->n_cores;
}

uint32_t tpu_device_n_replicas(const struct tpu_device *dev)
{
    return dev->n_replicas;
}

const struct tpu_chip_config *tpu_device_chip(const struct tpu_device *dev)
{
    return &dev->cfg;
}

/* The device's own copy of a program, rebuilt through the builder. */
static int clone_program(const struct tpu_program *p, struct tpu_program **out,
                         struct tpu_diag *d)
{
    struct tpu_program *q = NULL;
    int rc = tpu_program_create(tpu_program_name(p), &q);
    if (rc)
        return tpu__fail(d, rc, "out of memory copying the program");
    for (size_t i = 0; i < tpu_program_n_buffers(p) && !rc; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(p, (uint32_t)i);
        uint32_t id;
        rc = tpu_program_add_buffer(q, b->name, b->dtype, b->kind, b->rows, b->cols, &id, d);
    }
    for (size_t i = 0; i < tpu_program_n_vars(p) && !rc; i++) {
        uint32_t id;
        rc = tpu_program_add_var(q, tpu_program_var_name(p, (uint32_t)i), &id, d);
    }
    for (size_t i = 0; i < tpu_program_n_ops(p) && !rc; i++)
        rc = tpu_program_add_op(q, tpu_program_op(p, i), d);
    if (rc) {
        tpu_program_destroy(&q);
        return rc;
    }
    *out = q;
    return 0;
}

/* Decides dev->place for the loaded program (see the top of this file). */
static int place_buffers(struct tpu_device *dev, const struct tpu_program *p)
{
    const size_t nb = tpu_program_n_buffers(p), n_ops = tpu_program_n_ops(p);
    dev->place = calloc(nb ? nb : 1, sizeof *dev->place);
    size_t *first = malloc((nb ? nb : 1) * sizeof *first);
    size_t *last = malloc((nb ? nb : 1) * sizeof *last);
    bool *infed = calloc(nb ? nb : 1, sizeof *infed);
    uint64_t *usage = calloc(n_ops ? n_ops : 1, sizeof *usage);
    int rc = 0;
    if (!dev->place || !first || !last || !infed || !usage) {
        rc = TPU_ENOMEM;
        goto out;
    }
    size_t loop_begin = SIZE_MAX, loop_end = SIZE_MAX;
    for (size_t b = 0; b < nb; b++) {
        first[b] = SIZE_MAX;
        last[b] = 0;
    }
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_LOOP_BEGIN)
            loop_begin = i;
        if (op->code == TPU_OP_LOOP_END)
            loop_end = i;
        if (op->code == TPU_OP_INFEED)
            infed[op->out[0]] = true;
        for (int k = 0; k < TPU_OP_MAX_OUT; k++)
            if (op->out[k] != TPU_NO_BUF && first[op->out[k]] == SIZE_MAX)
                first[op->out[k]] = i;
        for (int k = 0; k < TPU_OP_MAX_IN; k++)
            if (op->in[k] != TPU_NO_BUF)
                last[op->in[k]] = i;
        for (int k = 0; k < TPU_OP_MAX_OUT; k++)
            if (op->out[k] != TPU_NO_BUF && last[op->out[k]] < i)
                last[op->out[k]] = i;
    }
    const uint64_t budget = dev->cfg.vmem_bytes / 2;
    for (size_t b = 0; b < nb; b++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, (uint32_t)b);
        dev->place[b] = IN_HBM;
        if (bd->kind != TPU_BUF_TEMP || infed[b] || first[b] == SIZE_MAX)
            continue;
        size_t lo = first[b], hi = last[b] < lo ? lo : last[b];
        if (loop_begin != SIZE_MAX && lo < loop_begin && hi > loop_begin && hi < loop_end)
            hi = loop_end;
        uint64_t bytes = tpu_buffer_bytes(bd), peak = 0;
        for (size_t i = lo; i <= hi; i++)
            peak = usage[i] > peak ? usage[i] : peak;
        if (peak + bytes > budget)
            continue;
        dev->place[b] = IN_VMEM;
        for (size_t i = lo; i <= hi; i++)
            usage[i] += bytes;
    }
out:
    free(first);
    free(last);
    free(infed);
    free(usage);
    return rc;
}

/* Whether some collective of the program has participants on different chips. */
static bool has_cross_chip_collective(const struct tpu_device *dev, const struct tpu_program *p)
{
    const bool replicas_span = dev->s.n_chips > 1 && dev->n_replicas > 1;
    const bool replica_spans = dev->cores_per_replica > dev->cfg.cores_per_chip;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        bool within_replica = op->code == TPU_OP_COLLECTIVE_PERMUTE && op->attrs.group == 1;
        if (op->code == TPU_OP_ALL_REDUCE || op->code == TPU_OP_COLLECTIVE_PERMUTE) {
            if (within_replica ? replica_spans : replicas_span)
                return true;
        }
    }
    return false;
}

int tpu_device_load(struct tpu_device *dev, const struct tpu_program *prog, struct tpu_diag *d)
{
    int rc = tpu_program_verify(prog, &dev->cfg, d);
    if (rc)
        return rc;
    if (dev->cfg.ici_topology == TPU_TOPO_NONE && has_cross_chip_collective(dev, prog))
        return tpu__fail(d, TPU_EUNSUPPORTED,
                         "program '%s' has collectives across chips, but chip '%s' has no "
                         "interconnect (topology none); open the device with n_chips 1 or "
                         "use a chip with ICI",
                         tpu_program_name(prog), dev->cfg.name);
    /* matmul dtypes against the chip's MXU */
    for (size_t i = 0; i < tpu_program_n_ops(prog); i++) {
        const struct tpu_op *op = tpu_program_op(prog, i);
        if (op->code != TPU_OP_MATMUL)
            continue;
        enum tpu_dtype t = tpu_program_buffer(prog, op->in[0])->dtype;
        bool int8 = t == TPU_INT8;
        if (int8 && !(dev->cfg.mxu_dtypes & TPU_DTYPE_BIT(TPU_INT8)))
            return tpu__fail(d, TPU_EUNSUPPORTED, "op %zu is an int8 matmul but chip '%s' has "
                             "no int8 matrix unit; use bf16/f32 operands or a chip with int8",
                             i, dev->cfg.name);
        if (!int8 && !(dev->cfg.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)))
            return tpu__fail(d, TPU_EUNSUPPORTED, "op %zu is a bf16 matmul but chip '%s' has "
                             "no bf16 matrix unit; use int8 operands or a chip with bf16",
                             i, dev->cfg.name);
    }
    struct tpu_program *copy = NULL;
    rc = clone_program(prog, &copy, d);
    if (rc)
        return rc;
    if ((rc = tpu__trace_program(dev, copy, d))) {
        tpu_program_destroy(&copy);
        return rc;
    }
    free_core_buffers(dev);
    tpu_program_destroy(&dev->prog);
    free(dev->place);
    dev->place = NULL;
    dev->prog = copy;
    const size_t nb = tpu_program_n_buffers(copy), nv = tpu_program_n_vars(copy);
    rc = place_buffers(dev, copy);
    if (rc)
        goto nomem;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->bufs = calloc(nb ? nb : 1, sizeof *c->bufs);
        c->vars = calloc(nv ? nv : 1, sizeof *c->vars);
        c->buf_ready = calloc(nb ? nb : 1, sizeof *c->buf_ready);
        c->buf_read_done = calloc(nb ? nb : 1, sizeof *c->buf_read_done);
        if (!c->bufs || !c->vars || !c->buf_ready || !c->buf_read_done)
            goto nomem;
        for (size_t b = 0; b < nb; b++) {
            const struct tpu_buffer_desc *bd = tpu_program_buffer(copy, (uint32_t)b);
            c->bufs[b] = (struct tpu__bufmem){.dtype = bd->dtype, .rows = bd->rows,
                                              .cols = bd->cols};
            if (!dev->s.timing_only) {
                /* zeroed now, by writing: the pages are the process's before the first run
                 * (calloc's lazily mapped pages would fault inside the first step) */
                size_t bytes = (tpu_buffer_bytes(bd) + 63) / 64 * 64;
                if (bytes == 0)
                    bytes = 64;
                c->bufs[b].data = aligned_alloc(64, bytes); /* cache lines, for the kernels */
                if (!c->bufs[b].data)
                    goto nomem;
                memset(c->bufs[b].data, 0, bytes);
            }
        }
    }
    return 0;
nomem:
    free_core_buffers(dev);
    tpu_program_destroy(&dev->prog);
    return tpu__fail(d, TPU_ENOMEM, "out of memory giving %u cores their buffers",
                     dev->n_cores);
}

static int check_buffer_access(const struct tpu_device *dev, uint32_t core, uint32_t buf,
                               size_t bytes, const char *what, struct tpu_diag *d)
{
    if (!dev->prog)
        return tpu__fail(d, TPU_EINVAL, "%s: no program is loaded; call tpu_device_load first",
                         what);
    if (core >= dev->n_cores)
        return tpu__fail(d, TPU_EINVAL, "%s: core %u does not exist (the device has %u)", what,
                         core, dev->n_cores);
    if (buf >= tpu_program_n_buffers(dev->prog))
        return tpu__fail(d, TPU_EINVAL, "%s: buffer id %u does not exist (the program has %zu)",
                         what, buf, tpu_program_n_buffers(dev->prog));
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, buf);
    if (bytes != tpu_buffer_bytes(bd))
        return tpu__fail(d, TPU_ESHAPE, "%s: buffer '%s' is %s[%u, %u], %llu bytes, not %zu",
                         what, bd->name, tpu_dtype_name(bd->dtype), bd->rows, bd->cols,
                         (unsigned long long)tpu_buffer_bytes(bd), bytes);
    if (dev->s.timing_only)
        return tpu__fail(d, TPU_EUNSUPPORTED, "%s: a timing-only device holds no values", what);
    if (dev->running)
        return tpu__fail(d, TPU_EINVAL, "%s: not allowed while the device runs", what);
    return 0;
}

int tpu_device_write(struct tpu_device *dev, uint32_t core, uint32_t buf, const void *data,
                     size_t bytes, struct tpu_diag *d)
{
    int rc = check_buffer_access(dev, core, buf, bytes, "tpu_device_write", d);
    if (rc)
        return rc;
    memcpy(dev->cores[core].bufs[buf].data, data, bytes);
    return 0;
}

int tpu_device_read(const struct tpu_device *dev, uint32_t core, uint32_t buf, void *data,
                    size_t bytes, struct tpu_diag *d)
{
    int rc = check_buffer_access(dev, core, buf, bytes, "tpu_device_read", d);
    if (rc)
        return rc;
    memcpy(data, dev->cores[core].bufs[buf].data, bytes);
    return 0;
}

int tpu_device_set_var(struct tpu_device *dev, uint32_t var, int64_t value)
{
    if (!dev->prog || var >= tpu_program_n_vars(dev->prog))
        return TPU_EINVAL;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        dev->cores[i].vars[var] = value;
    return 0;
}

int64_t tpu_device_get_var(const struct tpu_device *dev, uint32_t core, uint32_t var)
{
    if (!dev->prog || core >= dev->n_cores || var >= tpu_program_n_vars(dev->prog))
        return 0;
    return dev->cores[core].vars[var];
}

int tpu_device_counters(const struct tpu_device *dev, uint32_t core,
                        struct tpu_core_counters *out)
{
    if (core >= dev->n_cores)
        return TPU_EINVAL;
    *out = dev->cores[core].ctr;
    return 0;
}

/* Under the lock: every host call blocked on a queue rechecks. */
static void wake_hosts(struct tpu_device *dev)
{
    for (uint32_t i = 0; i < dev->n_cores; i++)
        pthread_cond_broadcast(&dev->cores[i].host_cv);
}

void tpu_device_cancel(struct tpu_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    if (!dev->canceled) {
        dev->canceled = true;
        if (!dev->error)
            dev->error = TPU_ECANCELED;
    }
    pthread_cond_broadcast(&dev->work_cv);
    wake_hosts(dev);
    pthread_mutex_unlock(&dev->lock);
}

void tpu_device_infeed_close(struct tpu_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    dev->infeed_closed = true;
    pthread_cond_broadcast(&dev->work_cv);
    pthread_mutex_unlock(&dev->lock);
}

void tpu_device_reset_cancel(struct tpu_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    dev->canceled = false;
    dev->infeed_closed = false;
    dev->error = 0;
    pthread_mutex_unlock(&dev->lock);
}

bool tpu_device_timing_only(const struct tpu_device *dev)
{
    return dev->s.timing_only;
}

static const char *state_text(enum core_state st)
{
    switch (st) {
    case CORE_READY: return "is ready to run";
    case CORE_RUNNING: return "is running";
    case CORE_WAIT_INFEED: return "waits for infeed";
    case CORE_WAIT_OUTFEED: return "waits for the host to drain its full outfeed queue";
    case CORE_WAIT_COLL: return "waits at a collective";
    default: return "is done";
    }
}

void tpu_device_watch(const struct tpu_device *cdev, struct tpu_device_watch *w)
{
    struct tpu_device *dev = (struct tpu_device *)cdev; /* the lock only */
    memset(w, 0, sizeof *w);
    pthread_mutex_lock(&dev->lock);
    w->running = dev->running;
    w->host_calls_waiting = dev->host_waiting;
    /* blocked: some core waits and none can move; all cores done is the normal end of a
     * launch (the run is about to return), never a deadlock */
    bool blocked = dev->running && !dev->canceled, waiting = false;
    size_t len = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        const struct core *c = &dev->cores[i];
        w->moves += c->infeed.pushes + c->infeed.pops + c->outfeed.pushes + c->outfeed.pops;
        if (c->state == CORE_READY || c->state == CORE_RUNNING)
            blocked = false;
        else if (c->state != CORE_DONE)
            waiting = true;
        if (c->state != CORE_DONE && len + 1 < sizeof w->why) {
            int n = snprintf(w->why + len, sizeof w->why - len, "%score %u %s", len ? "; " : "",
                             i, state_text(c->state));
            len += n > 0 ? (size_t)n : 0;
        }
    }
    w->cores_blocked = blocked && waiting;
    pthread_mutex_unlock(&dev->lock);
}

/* ---- the run --------------------------------------------------------------------------- */

/* Under the lock: no core can make progress without more infeed. */
static bool starved(const struct tpu_device *dev)
{
    bool waits_infeed = false;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        enum core_state st = dev->cores[i].state;
        if (st == CORE_READY || st == CORE_RUNNING || st == CORE_WAIT_OUTFEED)
            return false;
        waits_infeed = waits_infeed || st == CORE_WAIT_INFEED;
    }
    return waits_infeed;
}

static void *worker(void *arg)
{
    struct worker *w = arg;
    struct tpu_device *dev = w->dev;
    uint32_t next = 0;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        if (dev->canceled || dev->n_done == dev->n_cores)
            break;
        struct core *c = NULL;
        for (uint32_t k = 0; k < dev->n_cores; k++) {
            struct core *x = &dev->cores[(next + k) % dev->n_cores];
            if (x->state == CORE_READY) {
                c = x;
                next = (x->id + 1) % dev->n_cores;
                break;
            }
        }
        if (!c) {
            if (dev->infeed_closed && starved(dev)) {
                /* the clocks of the cores that stopped: where their last op left them */
                for (uint32_t i = 0; i < dev->n_cores; i++) {
                    struct core *x = &dev->cores[i];
                    if (x->state == CORE_DONE)
                        continue;
                    uint64_t clk = x->last_issue;
                    for (int u = 0; u < TPU_UNIT_COUNT; u++)
                        clk = tpu__max_u64(clk, x->unit_free[u]);
                    x->ctr.cycles = tpu__max_u64(x->ctr.cycles, clk);
                }
                dev->error = TPU_EEND;
                tpu__fail(&dev->error_diag, TPU_EEND, "the input ended: the cores wait for "
                          "infeed that the host will not send");
                dev->canceled = true;
                pthread_cond_broadcast(&dev->work_cv);
                wake_hosts(dev);
                break;
            }
            pthread_cond_wait(&dev->work_cv, &dev->lock);
            continue;
        }
        c->state = CORE_RUNNING;
        pthread_mutex_unlock(&dev->lock);
        struct tpu_diag d = {0};
        int rc = tpu__core_run(dev, c, &w->scratch, &d);
        pthread_mutex_lock(&dev->lock);
        if (rc < 0) {
            /* keep the first real error; a cancel is only the echo of one */
            if (!dev->error || (dev->error == TPU_ECANCELED && rc != TPU_ECANCELED)) {
                dev->error = rc;
                dev->error_diag = d;
            }
            dev->canceled = true;
            pthread_cond_broadcast(&dev->work_cv);
            wake_hosts(dev);
            break;
        }
        if (rc == 1) {
            c->state = CORE_DONE;
            if (++dev->n_done == dev->n_cores)
                pthread_cond_broadcast(&dev->work_cv);
        }
        /* rc == 0: the core set its own waiting state (or was already woken to READY) */
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

int tpu_device_run(struct tpu_device *dev, uint64_t start_cycle, uint64_t *end_cycle,
                   struct tpu_diag *d)
{
    if (!dev->prog)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_run: no program is loaded");
    pthread_mutex_lock(&dev->lock);
    if (dev->running) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_EINVAL, "tpu_device_run: the device is already running");
    }
    if (dev->canceled) {
        pthread_mutex_unlock(&dev->lock);
        return tpu__fail(d, TPU_ECANCELED, "tpu_device_run: the device was canceled; call "
                         "tpu_device_reset_cancel first");
    }
    dev->running = true;
    dev->error = 0;
    dev->n_done = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        struct core *c = &dev->cores[i];
        c->state = CORE_READY;
        c->pc = 0;
        c->in_loop = false;
        /* the launch: nothing starts before start_cycle */
        c->last_issue = tpu__max_u64(c->last_issue, start_cycle);
        c->prefetch_from = tpu__max_u64(c->prefetch_from, start_cycle);
    }
    for (uint32_t g = 0; g < dev->n_groups; g++)
        dev->groups[g].arrived = 0;
    pthread_mutex_unlock(&dev->lock);

    unsigned n = dev->s.n_threads;
    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 0 ? (unsigned)cpus : 1;
    }
    if (n > dev->n_cores)
        n = dev->n_cores;
    dev->n_workers = n;
    pthread_t *th = calloc(n, sizeof *th);
    unsigned started = 0;
    if (th)
        for (; started + 1 < n; started++)
            if (pthread_create(&th[started], NULL, worker, &dev->workers[started + 1]) != 0)
                break;
    worker(&dev->workers[0]); /* the caller's thread is a worker too */
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);

    pthread_mutex_lock(&dev->lock);
    dev->running = false;
    int rc = dev->error;
    struct tpu_diag ed = dev->error_diag;
    pthread_mutex_unlock(&dev->lock);
    if (rc == TPU_EEND && end_cycle) {
        /* the cores stopped at a step boundary: their clocks are where they stopped */
        uint64_t end = 0;
        for (uint32_t i = 0; i < dev->n_cores; i++)
            end = tpu__max_u64(end, dev->cores[i].ctr.cycles);
        *end_cycle = end;
    }
    if (rc) {
        if (d) {
            *d = ed;
            if (!d->msg[0])
                tpu__fail(d, rc, "the run was canceled");
            d->code = rc;
        }
        log_msg(dev, TPU_LOG_ERROR, ed.msg);
        return rc;
    }
    uint64_t end = 0;
    for (uint32_t i = 0; i < dev->n_cores; i++)
        end = tpu__max_u64(end, dev->cores[i].ctr.cycles);
    if (end_cycle)
        *end_cycle = end;
    return 0;
}
