/* The timeline: events recorded per core while it runs, written as Chrome trace event JSON
 * (the format Perfetto and chrome://tracing open).
 *
 * Layout of the file: one process per chip ("chip 0"), one thread (track) per unit per
 * core ("core 1 mxu"), complete events ("ph":"X") with times in microseconds of device time
 * at the chip clock, counter events ("ph":"C") for each core's queue depths, and a "host"
 * process for the host's loop phases. Recording appends to growable arrays; an allocation
 * failure drops the event and counts it, never stops the simulation.
 *
 * An event names its op by an index into the device's op labels, which keep the label of
 * every op of every program loaded while tracing: a run that trains, then evaluates (another
 * program), writes one timeline of both, each op under its own program's name. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip_int.h"
#include "util.h"

void tpu__trace_event(struct trace_log *t, uint8_t unit, uint8_t kind, uint32_t op,
                      uint64_t start, uint64_t end)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        struct trace_event *e = realloc(t->events, cap * sizeof *e);
        if (!e)
            return;
        t->events = e;
        t->cap = cap;
    }
    t->events[t->n++] = (struct trace_event){.start = start, .end = end,
                                             .op = op == UINT32_MAX ? op : t->op_base + op,
                                             .unit = unit, .kind = kind};
}

/* The label of op i of p: its opcode and its first output (or input) buffer. */
static void program_op_label(const struct tpu_program *p, size_t i, char *buf, size_t n)
{
    const struct tpu_op *o = tpu_program_op(p, i);
    const char *first = "";
    uint32_t b = o->out[0] != TPU_NO_BUF ? o->out[0] : o->in[0];
    if (b != TPU_NO_BUF)
        first = tpu_program_buffer(p, b)->name;
    snprintf(buf, n, "%s%s%s", tpu_opcode_name(o->code), *first ? " " : "", first);
}

int tpu__trace_program(struct chip_device *dev, const struct tpu_program *prog,
                       struct tpu_diag *d)
{
    if (!dev->s.trace)
        return 0;
    const size_t n_ops = tpu_program_n_ops(prog);
    char label[TPU__TRACE_LABEL_MAX];
    /* the same program again (the runtime reloads a mode's program): reuse its labels */
    bool same = dev->n_op_labels > 0 && dev->last_labels_n == n_ops;
    for (size_t i = 0; same && i < n_ops; i++) {
        program_op_label(prog, i, label, sizeof label);
        same = !strcmp(label, dev->op_labels[dev->last_labels_base + i]);
    }
    if (!same) {
        if (dev->n_op_labels + n_ops > UINT32_MAX - 1)
            return tpu__fail(d, TPU_ENOMEM, "the trace holds %zu op labels, the most it can "
                             "hold; open the device again for a new trace", dev->n_op_labels);
        if (dev->n_op_labels + n_ops > dev->cap_op_labels) {
            size_t cap = dev->cap_op_labels ? dev->cap_op_labels : 64;
            while (cap < dev->n_op_labels + n_ops)
                cap *= 2;
            char(*l)[TPU__TRACE_LABEL_MAX] = realloc(dev->op_labels, cap * sizeof *l);
            if (!l)
                return tpu__fail(d, TPU_ENOMEM, "out of memory keeping the trace's op labels "
                                 "(%zu)", cap);
            dev->op_labels = l;
            dev->cap_op_labels = cap;
        }
        dev->last_labels_base = dev->n_op_labels;
        dev->last_labels_n = n_ops;
        for (size_t i = 0; i < n_ops; i++)
            program_op_label(prog, i, dev->op_labels[dev->n_op_labels++], TPU__TRACE_LABEL_MAX);
    }
    for (uint32_t ci = 0; ci < dev->n_cores; ci++)
        dev->cores[ci].trace.op_base = (uint32_t)dev->last_labels_base;
    return 0;
}

void tpu__trace_counter(struct trace_log *t, uint64_t cycle, uint32_t infeed_depth,
                        uint32_t outfeed_depth)
{
    if (t->n_counters == t->cap_counters) {
        size_t cap = t->cap_counters ? 2 * t->cap_counters : 256;
        struct trace_counter *c = realloc(t->counters, cap * sizeof *c);
        if (!c)
            return;
        t->counters = c;
        t->cap_counters = cap;
    }
    t->counters[t->n_counters++] = (struct trace_counter){cycle, infeed_depth, outfeed_depth};
}

void tpu__trace_free(struct trace_log *t)
{
    free(t->events);
    free(t->counters);
    memset(t, 0, sizeof *t);
}

/* Called only on a device that traces (the device API checks settings.trace). */
int tpu__chip_trace_host(void *impl, const char *name, uint64_t start_cycle,
                         uint64_t end_cycle)
{
    struct chip_device *dev = impl;
    size_t i;
    for (i = 0; i < dev->n_host_names; i++)
        if (!strncmp(dev->host_names[i], name, sizeof dev->host_names[i] - 1))
            break;
    if (i == dev->n_host_names) {
        if (i == dev->cap_host_names) {
            size_t cap = dev->cap_host_names ? 2 * dev->cap_host_names : 8;
            char(*n)[32] = realloc(dev->host_names, cap * sizeof *n);
            if (!n)
                return TPU_ENOMEM;
            dev->host_names = n;
            dev->cap_host_names = cap;
        }
        /* names are shown as JSON strings: keep identifier characters only */
        size_t k = 0;
        for (const char *p = name; *p && k + 1 < sizeof dev->host_names[i]; p++)
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                *p == '_' || *p == ' ' || *p == '-')
                dev->host_names[i][k++] = *p;
        dev->host_names[i][k] = '\0';
        dev->n_host_names++;
    }
    tpu__trace_event(&dev->host_trace, TPU_UNIT_CTRL, 0, (uint32_t)i, start_cycle, end_cycle);
    return 0;
}

static const char *const kind_name[] = {"", "dma in", "dma out", "stall"};

static void op_label(const struct chip_device *dev, const struct trace_event *e, char *buf,
                     size_t n)
{
    if (e->op == UINT32_MAX)
        snprintf(buf, n, "%s", e->unit == TPU_UNIT_INFEED ? "host to device" : "transfer");
    else
        snprintf(buf, n, "%s%s%s", e->op < dev->n_op_labels ? dev->op_labels[e->op] : "op",
                 e->kind ? " " : "", kind_name[e->kind & 3]);
}

/* Called only on a device that traces (the device API checks settings.trace). */
int tpu__chip_write_trace(void *impl, const char *path, struct tpu_diag *d)
{
    const struct chip_device *dev = impl;
    FILE *f;
    char *tmp;
    int rc = tpu__atomic_open(path, "w", &f, &tmp, d);
    if (rc)
        return rc;
    const double us_per_cycle = 1.0 / dev->cfg.clock_mhz;
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"chip\": \"%s\", \"clock_mhz\": "
               "%.6g}, \"traceEvents\": [\n", dev->cfg.name, dev->cfg.clock_mhz);
    const char *sep = "";
    uint32_t n_chips = dev->s.n_chips;
    for (uint32_t chip = 0; chip < n_chips; chip++) {
        fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %u, \"args\": "
                   "{\"name\": \"chip %u\"}}", sep, chip, chip);
        sep = ",\n";
    }
    fprintf(f, "%s{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %u, \"args\": "
               "{\"name\": \"host\"}}", sep, n_chips);
    for (uint32_t ci = 0; ci < dev->n_cores; ci++) {
        const struct core *c = &dev->cores[ci];
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %u, \"tid\": %u, "
                       "\"args\": {\"name\": \"core %u %s\"}}",
                    c->chip, ci * TPU_UNIT_COUNT + (uint32_t)u, ci,
                    tpu_unit_name((enum tpu_unit)u));
        char label[TPU__TRACE_LABEL_MAX + 16];
        for (size_t i = 0; i < c->trace.n; i++) {
            const struct trace_event *e = &c->trace.events[i];
            op_label(dev, e, label, sizeof label);
            fprintf(f, ",\n{\"ph\": \"X\", \"name\": ");
            /* labels are identifiers and fixed words: no escaping needed */
            fprintf(f, "\"%s\", \"pid\": %u, \"tid\": %u, \"ts\": %.6f, \"dur\": %.6f}", label,
                    c->chip, ci * TPU_UNIT_COUNT + e->unit, e->start * us_per_cycle,
                    (e->end - e->start) * us_per_cycle);
        }
        for (size_t i = 0; i < c->trace.n_counters; i++) {
            const struct trace_counter *q = &c->trace.counters[i];
            fprintf(f, ",\n{\"ph\": \"C\", \"name\": \"core %u queues\", \"pid\": %u, "
                       "\"ts\": %.6f, \"args\": {\"infeed\": %u, \"outfeed\": %u}}",
                    ci, c->chip, q->cycle * us_per_cycle, q->infeed_depth, q->outfeed_depth);
        }
    }
    for (size_t i = 0; i < dev->host_trace.n; i++) {
        const struct trace_event *e = &dev->host_trace.events[i];
        /* one track per phase name: phases of different host threads overlap in time, and
         * Perfetto drops events that overlap on one track without nesting */
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %u, \"tid\": %u, "
                   "\"ts\": %.6f, \"dur\": %.6f}",
                dev->host_names[e->op], n_chips, e->op, e->start * us_per_cycle,
                (e->end - e->start) * us_per_cycle);
    }
    /* the launches: each run's span, and the gap before it (the bubble between loops) */
    if (dev->run_trace.n)
        fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %u, \"args\": "
                   "{\"name\": \"loops\"}}", n_chips + 1);
    uint64_t idle_from = 0;
    for (size_t i = 0; i < dev->run_trace.n; i++) {
        const struct trace_event *e = &dev->run_trace.events[i];
        if (e->start > idle_from)
            fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"device idle\", \"pid\": %u, "
                       "\"tid\": 1, \"ts\": %.6f, \"dur\": %.6f}", n_chips + 1,
                    idle_from * us_per_cycle, (e->start - idle_from) * us_per_cycle);
        fprintf(f, ",\n{\"ph\": \"X\", \"name\": \"device loop\", \"pid\": %u, "
                   "\"tid\": 0, \"ts\": %.6f, \"dur\": %.6f}", n_chips + 1,
                e->start * us_per_cycle, (e->end - e->start) * us_per_cycle);
        idle_from = tpu__max_u64(idle_from, e->end);
    }
    fprintf(f, "\n]}\n");
    return tpu__atomic_commit(f, tmp, path, true, d);
}
