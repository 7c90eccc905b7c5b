/* What a device program takes of a core's HBM (tpu_program_memory, program.h) and the
 * verifier's memory rule M1 built on it (tpu__verify_memory, program_verify.c's last check).
 *
 * The model is a compiler's buffer assignment without placement details: params live for the
 * whole program; a temp lives over an interval of op indices, from its first writer to its
 * last reader (or writer), and two temps whose intervals overlap need memory at once. The
 * device program has at most one loop and the verifier's dataflow rules (D2-D4) make every
 * temp's life fit in program order:
 *   - a temp the body writes is read only later in the same iteration (D3), so its interval
 *     inside the body is its whole life;
 *   - a temp written before the loop and read inside it is read by every iteration: its
 *     interval is stretched to the loop's end;
 *   - a temp written before the loop and read after it already spans the loop;
 *   - a matmul with accumulate reads its output: the op is one of the output's readers.
 * The need is params + the largest sum of live temps at any op (the peak). This file does
 * not decide where a temp sits (the native chip may keep small ones on chip, sim/chip/chip.c);
 * every live temp is counted in HBM, so a program that passes can be sure to fit.
 *
 * Cost: one pass over the ops and one over the buffers, O(ops + buffers) memory. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "liveness.h"
#include "program_int.h"
#include "util.h"

#define NONE SIZE_MAX

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

static bool is_loop_marker(const struct tpu_op *op)
{
    return op->code == TPU_OP_LOOP_BEGIN || op->code == TPU_OP_LOOP_END;
}

/* liveness.h; here only temps' lives are used */
void tpu__program_live_ranges(const struct tpu_program *p, size_t *lo, size_t *hi)
{
    const size_t nb = tpu_program_n_buffers(p), n_ops = tpu_program_n_ops(p);
    size_t lb = NONE, le = NONE;
    for (size_t b = 0; b < nb; b++) {
        lo[b] = NONE;
        hi[b] = 0;
    }
    for (size_t i = 0; i < n_ops; i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_LOOP_BEGIN && lb == NONE)
            lb = i;
        else if (op->code == TPU_OP_LOOP_END && lb != NONE && le == NONE)
            le = i;
        for (unsigned k = 0; k < tpu_opcode_n_out(op->code); k++) {
            uint32_t b = op->out[k];
            if (b >= nb)
                continue;
            if (lo[b] == NONE)
                lo[b] = i;
            hi[b] = i; /* ops run in order: i is the latest so far */
        }
        for (unsigned k = 0; k < tpu_opcode_n_in(op->code); k++)
            if (op->in[k] < nb)
                hi[op->in[k]] = i;
    }
    if (lb == NONE || le == NONE)
        return;
    for (size_t b = 0; b < nb; b++)
        if (lo[b] != NONE && lo[b] < lb && hi[b] > lb && hi[b] < le)
            hi[b] = le; /* read by every iteration */
}

/* Fills *m; with peak_live non-NULL, also the ids of the temps live at the peak op
 * (peak_live[b] true). */
static int measure(const struct tpu_program *p, struct tpu_program_memory *m, bool *peak_live)
{
    const size_t nb = tpu_program_n_buffers(p), n_ops = tpu_program_n_ops(p);
    memset(m, 0, sizeof *m);
    m->peak_op = NONE;
    size_t *lo = malloc((2 * nb + 1) * sizeof *lo);
    uint64_t *delta = calloc(n_ops + 1, sizeof *delta); /* bytes starting minus ending at i */
    uint64_t *ending = calloc(n_ops + 1, sizeof *ending);
    if (!lo || !delta || !ending) {
        free(lo);
        free(delta);
        free(ending);
        return TPU_ENOMEM;
    }
    size_t *hi = lo + nb;
    tpu__program_live_ranges(p, lo, hi);
    for (size_t b = 0; b < nb; b++) {
        const struct tpu_buffer_desc *bd = tpu_program_buffer(p, (uint32_t)b);
        const uint64_t bytes = tpu_buffer_bytes(bd);
        if (bd->kind != TPU_BUF_TEMP) {
            m->param_bytes = add_sat(m->param_bytes, bytes);
            continue;
        }
        m->temp_bytes = add_sat(m->temp_bytes, bytes);
        if (lo[b] == NONE)
            continue; /* never written: takes nothing */
        delta[lo[b]] = add_sat(delta[lo[b]], bytes);
        ending[hi[b] + 1] = add_sat(ending[hi[b] + 1], bytes);
    }
    /* live(i) = sum of starts at or before i minus ends before i; kept exact while no sum
     * saturates, which needs more than 16 EiB of temps */
    uint64_t live = 0;
    for (size_t i = 0; i < n_ops; i++) {
        live = add_sat(live > ending[i] ? live - ending[i] : 0, delta[i]);
        if (live > m->temp_peak_bytes && !is_loop_marker(tpu_program_op(p, i))) {
            m->temp_peak_bytes = live;
            m->peak_op = i;
        }
    }
    m->hbm_bytes = add_sat(m->param_bytes, m->temp_peak_bytes);
    if (peak_live)
        for (size_t b = 0; b < nb; b++)
            peak_live[b] = m->peak_op != NONE && lo[b] != NONE && lo[b] <= m->peak_op &&
                           m->peak_op <= hi[b] &&
                           tpu_program_buffer(p, (uint32_t)b)->kind == TPU_BUF_TEMP;
    free(lo);
    free(delta);
    free(ending);
    return 0;
}

int tpu_program_memory(const struct tpu_program *p, struct tpu_program_memory *out)
{
    return measure(p, out, NULL);
}

/* ---- rule M1 ------------------------------------------------------------------------------ */

static void human_bytes(uint64_t n, char out[32])
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = (double)n;
    int u = 0;
    while (x >= 1024.0 && u < 6) {
        x /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, 32, "%" PRIu64 " B", n);
    else
        snprintf(out, 32, "%.1f %s", x, units[u]);
}

/* "8.0 MiB (8388608 bytes)" */
static const char *both_forms(uint64_t n, char out[64])
{
    char h[32];
    human_bytes(n, h);
    snprintf(out, 64, "%s (%" PRIu64 " bytes)", h, n);
    return out;
}

/* The three largest of the buffers that count at the peak (params, and the temps live
 * there), largest first, ties in buffer order: "'w' f32[1024, 1024] 4.0 MiB, ...". */
static void largest(const struct tpu_program *p, const bool *peak_live, char *list, size_t cap)
{
    const size_t nb = tpu_program_n_buffers(p);
    uint32_t top[3] = {TPU_NO_BUF, TPU_NO_BUF, TPU_NO_BUF};
    for (uint32_t id = 0; id < nb; id++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(p, id);
        if (b->kind == TPU_BUF_TEMP && !peak_live[id])
            continue;
        uint64_t bytes = tpu_buffer_bytes(b);
        for (int k = 0; k < 3; k++) {
            if (top[k] == TPU_NO_BUF || bytes > tpu_buffer_bytes(tpu_program_buffer(p, top[k]))) {
                for (int j = 2; j > k; j--)
                    top[j] = top[j - 1];
                top[k] = id;
                break;
            }
        }
    }
    size_t len = 0;
    list[0] = '\0';
    for (int k = 0; k < 3 && top[k] != TPU_NO_BUF && len < cap; k++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(p, top[k]);
        char h[32];
        human_bytes(tpu_buffer_bytes(b), h);
        len += (size_t)snprintf(list + len, cap - len, "%s'%s' %s[%" PRIu32 ", %" PRIu32 "] %s",
                                k ? ", " : "", b->name, tpu_dtype_name(b->dtype), b->rows,
                                b->cols, h);
    }
}

int tpu__verify_memory(const struct tpu_program *p, const struct tpu_chip_config *cfg,
                       struct tpu_diag *d)
{
    const size_t nb = tpu_program_n_buffers(p);
    bool *peak_live = calloc(nb + 1, sizeof *peak_live);
    struct tpu_program_memory m;
    if (!peak_live || measure(p, &m, peak_live) != 0) {
        free(peak_live);
        return tpu__fail(d, TPU_ENOMEM, "out of memory measuring program '%s' (%zu buffers)",
                         tpu_program_name(p), nb);
    }
    const uint32_t cores = cfg->cores_per_chip ? cfg->cores_per_chip : 1;
    const uint64_t limit = cfg->hbm_bytes / cores;
    if (m.hbm_bytes <= limit) {
        free(peak_live);
        return 0;
    }
    char need[64], params[64], temps[64], all[32], lim[32], list[400], at[240];
    char line[160];
    if (m.peak_op != NONE) {
        tpu_program_format_op(p, m.peak_op, line, sizeof line);
        snprintf(at, sizeof at, " live at once at op %zu '%s'", m.peak_op, line);
    } else {
        snprintf(at, sizeof at, " live at once (no temp is live at any op)");
    }
    human_bytes(m.temp_bytes, all);
    human_bytes(limit, lim);
    largest(p, peak_live, list, sizeof list);
    free(peak_live);
    return tpu__fail(d, TPU_ERANGE, "program '%s' needs %s of HBM: %s of params and %s of "
                     "temps%s (all temps together are %s; temps whose lives do not overlap "
                     "share memory), but one core of chip '%s' has %s (%" PRIu64 " bytes: "
                     "hbm_bytes %" PRIu64 " / cores_per_chip %" PRIu32 "); the largest of them "
                     "are %s; shrink them (smaller batch or layers) or split the model over "
                     "more cores",
                     tpu_program_name(p), both_forms(m.hbm_bytes, need),
                     both_forms(m.param_bytes, params), both_forms(m.temp_peak_bytes, temps),
                     at, all, cfg->name, lim, limit, cfg->hbm_bytes, cores, list);
}
