/* The RTL matrix-unit provider (mxu_rtl_provider.h): one Verilated array per
 * simulated MXU behind device.h's struct tpu_mxu_provider. It only translates a tile
 * sequence into a harness job (mxu_rtl.h) and keeps per-unit counters; the harness drives
 * the RTL, and the chip (sim/chip/mxu_provider.c) cuts matmuls and accumulates. No locks: a unit
 * (its array and its counters) is touched only by the thread running the core that owns it,
 * and the device runs a core on one thread at a time. */
#include <stdlib.h>

#include "mxu_rtl.h"
#include "mxu_rtl_provider.h"
#include "util.h"

struct rtl_unit {
    struct tpu_mxu_rtl *rtl;
    struct tpu_mxu_rtl_unit_stats stats;
};

struct tpu_mxu_rtl_provider {
    struct tpu_mxu_provider vt; /* what the device sees; vt.ctx points back here */
    struct rtl_unit *units;     /* [vt.n_units] */
};

static int run_seq(void *ctx, uint32_t unit, const struct tpu_mxu_seq *seq, uint64_t *cycles,
                   struct tpu_diag *d)
{
    struct tpu_mxu_rtl_provider *p = ctx;
    *cycles = 0;
    if (unit >= p->vt.n_units)
        return tpu__fail(d, TPU_EINVAL, "the RTL provider has %u matrix units; unit %u does not "
                         "exist", p->vt.n_units, unit);
    struct rtl_unit *u = &p->units[unit];
    struct tpu_mxu_rtl_job job = {
        .dtype = seq->dtype,
        .n_tiles = seq->n_tiles,
        .m_rows = seq->m_rows,
        .w_bf16 = seq->w_bf16,
        .in_bf16 = seq->in_bf16,
        .out_f32 = seq->out_f32,
        .w_int8 = seq->w_int8,
        .in_int8 = seq->in_int8,
        .out_i32 = seq->out_i32,
    };
    int rc = tpu_mxu_rtl_run(u->rtl, &job, d);
    if (rc)
        return rc;
    u->stats.runs++;
    u->stats.tiles += seq->n_tiles;
    u->stats.cycles += job.cycles;
    *cycles = job.cycles;
    return 0;
}

int tpu_mxu_rtl_provider_create(uint32_t rows, uint32_t cols, uint32_t n_units,
                                struct tpu_mxu_rtl_provider **out, struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_mxu_rtl_provider_create needs somewhere to put "
                         "the provider");
    *out = NULL;
    if (n_units < 1)
        return tpu__fail(d, TPU_EINVAL, "an RTL provider needs at least one matrix unit (got "
                         "n_units 0)");
    struct tpu_mxu_rtl_provider *p = calloc(1, sizeof *p);
    if (!p || !(p->units = calloc(n_units, sizeof *p->units))) {
        free(p);
        return tpu__fail(d, TPU_ENOMEM, "out of memory making an RTL provider of %u units",
                         n_units);
    }
    p->vt.ctx = p;
    p->vt.name = "rtl";
    p->vt.rows = rows;
    p->vt.cols = cols;
    p->vt.n_units = n_units;
    p->vt.run = run_seq;
    for (uint32_t i = 0; i < n_units; i++) {
        int rc = tpu_mxu_rtl_create(rows, cols, &p->units[i].rtl, d);
        if (rc) {
            tpu_mxu_rtl_provider_destroy(&p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

void tpu_mxu_rtl_provider_destroy(struct tpu_mxu_rtl_provider **pp)
{
    if (!pp || !*pp)
        return;
    struct tpu_mxu_rtl_provider *p = *pp;
    for (uint32_t i = 0; i < p->vt.n_units; i++)
        tpu_mxu_rtl_destroy(p->units[i].rtl);
    free(p->units);
    free(p);
    *pp = NULL;
}

const struct tpu_mxu_provider *tpu_mxu_rtl_provider_get(const struct tpu_mxu_rtl_provider *p)
{
    return p ? &p->vt : NULL;
}

int tpu_mxu_rtl_provider_trace_open(struct tpu_mxu_rtl_provider *p, uint32_t unit,
                                    const char *vcd_path, struct tpu_diag *d)
{
    if (!p || unit >= p->vt.n_units)
        return tpu__fail(d, TPU_EINVAL, "no matrix unit %u to trace: the RTL provider has %u",
                         unit, p ? p->vt.n_units : 0);
    return tpu_mxu_rtl_trace_open(p->units[unit].rtl, vcd_path, d);
}

int tpu_mxu_rtl_provider_stats(const struct tpu_mxu_rtl_provider *p, uint32_t unit,
                               struct tpu_mxu_rtl_unit_stats *out)
{
    if (!p || !out || unit >= p->vt.n_units)
        return TPU_EINVAL;
    *out = p->units[unit].stats;
    return 0;
}
