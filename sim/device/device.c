/* The device API's front: struct tpu_device, which checks every call at the API boundary and
 * passes it to the backend that simulates the chip (device.h, "the backend seam").
 *
 * What lives here is what every backend would otherwise repeat: the checks of the settings
 * that give the device its shape (chip configuration, n_chips, cores_per_replica), the
 * checks a program must pass before any chip takes it (verified, collectives that can reach
 * their cores, matmul dtypes the chip has), the device's own copy of the loaded program
 * (lent to the backend), and the range and size checks of every host call. What is not here:
 * anything about how the chip is simulated (sim/chip/ for the native one). This file reads
 * only public headers and common/.
 *
 * Hot path. tpu_device_infeed and tpu_device_outfeed run once per tensor per core per step:
 * each is a couple of compares on fields that do not change during a run, then one indirect
 * call. No lock is taken here. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpusim/device.h"
#include "util.h"

struct tpu_device {
    const struct tpu_device_backend *be; /* settings.backend, or the native one */
    void *impl;                          /* the backend's state (be->open) */
    struct tpu_device_settings s;        /* a copy; s.chip is the chip; s.backend == be */
    uint32_t n_cores, n_replicas;
    struct tpu_program *prog;            /* the loaded program (ours; lent to the backend), or
                                            NULL. Changed by load only, never during a run */
    struct tpu_program_memory mem;       /* what prog takes of a core's HBM */
    atomic_bool running;                 /* a tpu_device_run is under way */
};

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
    s->share_replicas = true;
}

/* ---- open and close ------------------------------------------------------------------- */

/* The entries of struct tpu_device_backend, for the check that none is missing. */
static int check_backend(const struct tpu_device_backend *be, struct tpu_diag *d)
{
    if (!be->name || !be->name[0])
        return tpu__fail(d, TPU_EINVAL, "settings.backend has no name; set struct "
                         "tpu_device_backend's name (messages use it to say which backend)");
    const struct {
        const char *entry;
        bool set;
    } entries[] = {
        {"open", be->open != NULL},
        {"close", be->close != NULL},
        {"load", be->load != NULL},
        {"write", be->write != NULL},
        {"read", be->read != NULL},
        {"set_var", be->set_var != NULL},
        {"get_var", be->get_var != NULL},
        {"infeed", be->infeed != NULL},
        {"outfeed", be->outfeed != NULL},
        {"run", be->run != NULL},
        {"infeed_close", be->infeed_close != NULL},
        {"cancel", be->cancel != NULL},
        {"reset_cancel", be->reset_cancel != NULL},
        {"watch", be->watch != NULL},
        {"counters", be->counters != NULL},
        {"op_stats", be->op_stats != NULL},
        {"trace_host", be->trace_host != NULL},
        {"write_trace", be->write_trace != NULL},
    };
    char name[TPU__QUOTE_BYTES];
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (!entries[i].set)
            return tpu__fail(d, TPU_EINVAL, "device backend '%s' has no '%s' function; every "
                             "entry of struct tpu_device_backend is required (device.h): give "
                             "it one, returning TPU_EUNSUPPORTED if the backend cannot do it",
                             tpu__quote(be->name, name, sizeof name), entries[i].entry);
    return 0;
}

/* settings.pod: a part of a pod of 1 to 4096 parts with every entry of its link. The backend
 * decides whether it simulates a pod (the native chip does; another refuses it at open). */
static int check_pod(const struct tpu_pod_link *pod, struct tpu_diag *d)
{
    if (pod->parts < 1 || pod->parts > 4096)
        return tpu__fail(d, TPU_EINVAL, "settings.pod->parts is %u; a pod has 1 to 4096 parts "
                         "(one per host): set it to the number of hosts", pod->parts);
    if (pod->index >= pod->parts)
        return tpu__fail(d, TPU_EINVAL, "settings.pod->index is %u, but the pod has %u parts; "
                         "set it to this device's host, 0 to %u", pod->index, pod->parts,
                         pod->parts - 1);
    const char *missing = !pod->max_u64     ? "max_u64"
                          : !pod->recv_prev  ? "recv_prev"
                          : !pod->send_next  ? "send_next"
                          : !pod->bcast_last ? "bcast_last"
                                             : NULL;
    if (missing)
        return tpu__fail(d, TPU_EINVAL, "settings.pod->%s is NULL; a pod link needs all four "
                         "entries (max_u64, recv_prev, send_next, bcast_last): give it one",
                         missing);
    return 0;
}

int tpu_device_open(const struct tpu_device_settings *s, struct tpu_device **out,
                    struct tpu_diag *d)
{
    const struct tpu_device_backend *be = s->backend ? s->backend : tpu_device_backend_native();
    int rc = check_backend(be, d);
    if (rc)
        return rc;
    if ((rc = tpu_config_validate(&s->chip, s->chip.name, d)) != 0)
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

    if (s->pod && (rc = check_pod(s->pod, d)) != 0)
        return rc;

    struct tpu_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return tpu__fail(d, TPU_ENOMEM, "out of memory opening the device");
    dev->be = be;
    dev->s = *s;
    dev->s.backend = be;
    dev->n_cores = (uint32_t)n_cores;
    dev->n_replicas = dev->n_cores / cpr;
    atomic_init(&dev->running, false);
    if ((rc = be->open(be->ctx, &dev->s, &dev->impl, d)) != 0) {
        free(dev);
        return rc;
    }
    *out = dev;
    return 0;
}

void tpu_device_close(struct tpu_device **pdev)
{
    if (!pdev || !*pdev)
        return;
    struct tpu_device *dev = *pdev;
    dev->be->close(dev->impl); /* first: the backend may hold the program */
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

const struct tpu_pod_link *tpu_device_pod(const struct tpu_device *dev)
{
    return dev->s.pod;
}

const struct tpu_chip_config *tpu_device_chip(const struct tpu_device *dev)
{
    return &dev->s.chip;
}

bool tpu_device_timing_only(const struct tpu_device *dev)
{
    return dev->s.timing_only;
}

/* ---- load ------------------------------------------------------------------------------ */

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

/* Whether some collective of the program has participants on different chips. */
static bool has_cross_chip_collective(const struct tpu_device *dev, const struct tpu_program *p)
{
    /* a pod's other parts are other chips: a collective over the replicas reaches them */
    const bool pod = dev->s.pod && dev->s.pod->parts > 1;
    const bool replicas_span = (dev->s.n_chips > 1 && dev->n_replicas > 1) || pod;
    const bool replica_spans = dev->s.cores_per_replica > dev->s.chip.cores_per_chip;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        bool within_replica = op->code == TPU_OP_HALO || op->code == TPU_OP_HALO_GRAD ||
                              ((tpu_opcode_attrs(op->code) & TPU_ATTR_GROUP) &&
                               op->attrs.group == TPU_GROUP_REPLICA_CORES);
        if (tpu_opcode_is_collective(op->code)) {
            if (within_replica ? replica_spans : replicas_span)
                return true;
        }
    }
    return false;
}

/* What the device must offer a program beyond tpu_program_verify (which checks the ops
 * against the chip, the matrix unit's dtypes among them): an interconnect for collectives
 * across chips, and replicas of as many cores as its row-partitioned windows have parts. */
static int check_program_fits(const struct tpu_device *dev, const struct tpu_program *prog,
                              struct tpu_diag *d)
{
    const struct tpu_chip_config *cfg = &dev->s.chip;
    const uint32_t cpr = dev->s.cores_per_replica;
    for (size_t i = 0; i < tpu_program_n_ops(prog); i++) {
        const struct tpu_op *op = tpu_program_op(prog, i);
        const uint32_t parts = op->attrs.win.parts;
        if (!(tpu_opcode_attrs(op->code) & TPU_ATTR_WINDOW) || parts <= 1 || parts == cpr)
            continue;
        char line[160];
        tpu_program_format_op(prog, i, line, sizeof line);
        char fix[64];
        if (cpr == 1)
            snprintf(fix, sizeof fix, "without row partitioning (no parts)");
        else
            snprintf(fix, sizeof fix, "for %u parts", (unsigned)cpr);
        return tpu__fail(d, TPU_EINVAL,
                         "program '%s', op %zu '%s': its window is split over parts=%u cores, "
                         "but the device has %u core%s per replica; a row-partitioned op runs "
                         "over the cores of one replica, so parts must equal cores_per_replica: "
                         "open the device with cores_per_replica %u or build the program %s",
                         tpu_program_name(prog), i, line, (unsigned)parts, (unsigned)cpr,
                         cpr == 1 ? "" : "s", (unsigned)parts, fix);
    }
    const struct tpu_pod_link *pod = dev->s.pod;
    for (size_t i = 0; pod && pod->parts > 1 && i < tpu_program_n_ops(prog); i++) {
        const struct tpu_op *op = tpu_program_op(prog, i);
        if (op->code != TPU_OP_COLLECTIVE_PERMUTE || op->attrs.group == TPU_GROUP_REPLICA_CORES)
            continue;
        char line[160];
        tpu_program_format_op(prog, i, line, sizeof line);
        return tpu__fail(d, TPU_EUNSUPPORTED,
                         "program '%s', op %zu '%s': a collective_permute over the replicas "
                         "moves data between replicas of different parts of the pod, which "
                         "the pod link does not carry (this device is part %u of %u); permute "
                         "within a replica (group=replica_cores), or run the program on one "
                         "device of the whole pod (settings.pod NULL)",
                         tpu_program_name(prog), i, line, pod->index, pod->parts);
    }
    if (cfg->ici_topology == TPU_TOPO_NONE && has_cross_chip_collective(dev, prog))
        return tpu__fail(d, TPU_EUNSUPPORTED,
                         "program '%s' has collectives across chips, but chip '%s' has no "
                         "interconnect (topology none); open the device with n_chips 1 or "
                         "use a chip with ICI",
                         tpu_program_name(prog), cfg->name);
    return 0;
}

int tpu_device_load(struct tpu_device *dev, const struct tpu_program *prog, struct tpu_diag *d)
{
    if (atomic_load(&dev->running)) /* the cores read the loaded program */
        return tpu__fail(d, TPU_EINVAL, "tpu_device_load: not allowed while the device runs; "
                         "load after tpu_device_run returns");
    int rc = tpu_program_verify(prog, &dev->s.chip, d);
    if (rc || (rc = check_program_fits(dev, prog, d)) != 0)
        return rc;
    struct tpu_program_memory mem;
    if (tpu_program_memory(prog, &mem) != 0)
        return tpu__fail(d, TPU_ENOMEM, "out of memory measuring program '%s'",
                         tpu_program_name(prog));
    struct tpu_program *copy = NULL;
    if ((rc = clone_program(prog, &copy, d)) != 0)
        return rc;
    /* the earlier program stays valid while the backend lets it go */
    rc = dev->be->load(dev->impl, copy, d);
    tpu_program_destroy(&dev->prog);
    if (rc) {
        tpu_program_destroy(&copy); /* the backend holds no program now */
        return rc;
    }
    dev->prog = copy;
    dev->mem = mem;
    return 0;
}

int tpu_device_memory(const struct tpu_device *dev, struct tpu_program_memory *out)
{
    if (!dev->prog)
        return TPU_EINVAL;
    *out = dev->mem;
    return 0;
}

const struct tpu_program *tpu_device_program(const struct tpu_device *dev)
{
    return dev->prog;
}

/* ---- host access ------------------------------------------------------------------------ */

static int check_buffer_access(const struct tpu_device *dev, uint32_t core, uint32_t buf,
                               const void *data, size_t bytes, const char *what,
                               struct tpu_diag *d)
{
    if (!data)
        return tpu__fail(d, TPU_EINVAL, "%s: no data given (NULL)", what);
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
    if (atomic_load(&dev->running))
        return tpu__fail(d, TPU_EINVAL, "%s: not allowed while the device runs", what);
    return 0;
}

int tpu_device_write(struct tpu_device *dev, uint32_t core, uint32_t buf, const void *data,
                     size_t bytes, struct tpu_diag *d)
{
    int rc = check_buffer_access(dev, core, buf, data, bytes, "tpu_device_write", d);
    if (rc)
        return rc;
    return dev->be->write(dev->impl, core, buf, data, bytes, d);
}

int tpu_device_read(const struct tpu_device *dev, uint32_t core, uint32_t buf, void *data,
                    size_t bytes, struct tpu_diag *d)
{
    int rc = check_buffer_access(dev, core, buf, data, bytes, "tpu_device_read", d);
    if (rc)
        return rc;
    return dev->be->read(dev->impl, core, buf, data, bytes, d);
}

int tpu_device_set_var(struct tpu_device *dev, uint32_t var, int64_t value)
{
    if (!dev->prog || var >= tpu_program_n_vars(dev->prog) || atomic_load(&dev->running))
        return TPU_EINVAL;
    dev->be->set_var(dev->impl, var, value);
    return 0;
}

int64_t tpu_device_get_var(const struct tpu_device *dev, uint32_t core, uint32_t var)
{
    if (!dev->prog || core >= dev->n_cores || var >= tpu_program_n_vars(dev->prog))
        return 0;
    return dev->be->get_var(dev->impl, core, var);
}

int tpu_device_counters(const struct tpu_device *dev, uint32_t core,
                        struct tpu_core_counters *out)
{
    if (core >= dev->n_cores)
        return TPU_EINVAL;
    dev->be->counters(dev->impl, core, out);
    return 0;
}

int tpu_device_op_stats(const struct tpu_device *dev, uint32_t core, struct tpu_op_stats *out,
                        size_t n_ops, struct tpu_diag *d)
{
    if (!dev->s.op_stats)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: the device was opened without "
                         "per-op statistics; set settings.op_stats to true before "
                         "tpu_device_open to collect them");
    if (!dev->prog)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: no program is loaded; call "
                         "tpu_device_load first");
    if (core >= dev->n_cores)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: core %u does not exist (the "
                         "device has %u: 0 to %u)", core, dev->n_cores, dev->n_cores - 1);
    const size_t want = tpu_program_n_ops(dev->prog);
    if (n_ops != want)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: n_ops is %zu, but program '%s' "
                         "has %zu ops; pass an array of tpu_program_n_ops entries", n_ops,
                         tpu_program_name(dev->prog), want);
    if (!out && n_ops)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: out is NULL; pass an array of "
                         "%zu entries", n_ops);
    if (atomic_load(&dev->running))
        return tpu__fail(d, TPU_EINVAL, "tpu_device_op_stats: not allowed while the device "
                         "runs; read them after tpu_device_run returns");
    dev->be->op_stats(dev->impl, core, out, n_ops);
    return 0;
}

/* ---- the queues and the run --------------------------------------------------------------- */

int tpu_device_infeed(struct tpu_device *dev, uint32_t core, const void *data, size_t bytes,
                      uint64_t host_cycle, struct tpu_diag *d)
{
    if (core >= dev->n_cores)
        return tpu__fail(d, TPU_EINVAL, "infeed to core %u, but the device has %u cores (0 to %u)",
                         core, dev->n_cores, dev->n_cores - 1);
    if (!data && !dev->s.timing_only)
        return tpu__fail(d, TPU_EINVAL, "infeed data is NULL; only a timing-only device takes "
                         "infeed without data");
    return dev->be->infeed(dev->impl, core, data, bytes, host_cycle, d);
}

int tpu_device_outfeed(struct tpu_device *dev, uint32_t core, void *data, size_t bytes,
                       uint64_t host_cycle, uint64_t *ready_cycle, struct tpu_diag *d)
{
    if (core >= dev->n_cores)
        return tpu__fail(d, TPU_EINVAL, "outfeed from core %u, but the device has %u cores "
                         "(0 to %u)", core, dev->n_cores, dev->n_cores - 1);
    return dev->be->outfeed(dev->impl, core, data, bytes, host_cycle, ready_cycle, d);
}

int tpu_device_run(struct tpu_device *dev, uint64_t start_cycle, uint64_t *end_cycle,
                   struct tpu_diag *d)
{
    if (!dev->prog)
        return tpu__fail(d, TPU_EINVAL, "tpu_device_run: no program is loaded");
    if (atomic_exchange(&dev->running, true))
        return tpu__fail(d, TPU_EINVAL, "tpu_device_run: the device is already running");
    int rc = dev->be->run(dev->impl, start_cycle, end_cycle, d);
    atomic_store(&dev->running, false);
    return rc;
}

void tpu_device_infeed_close(struct tpu_device *dev)
{
    dev->be->infeed_close(dev->impl);
}

void tpu_device_cancel(struct tpu_device *dev)
{
    dev->be->cancel(dev->impl);
}

void tpu_device_reset_cancel(struct tpu_device *dev)
{
    dev->be->reset_cancel(dev->impl);
}

void tpu_device_watch(const struct tpu_device *dev, struct tpu_device_watch *w)
{
    memset(w, 0, sizeof *w);
    dev->be->watch(dev->impl, w);
}

/* ---- the timeline ------------------------------------------------------------------------- */

int tpu_device_trace_host(struct tpu_device *dev, const char *name, uint64_t start_cycle,
                          uint64_t end_cycle)
{
    if (!dev->s.trace)
        return 0;
    return dev->be->trace_host(dev->impl, name, start_cycle, end_cycle);
}

int tpu_device_write_trace(const struct tpu_device *dev, const char *path, struct tpu_diag *d)
{
    if (!dev->s.trace)
        return tpu__fail(d, TPU_EINVAL, "the device was opened without tracing; set "
                         "settings.trace to record a timeline");
    return dev->be->write_trace(dev->impl, path, d);
}
