/* `tpusim train --step-shares`: where a training step's simulated time goes between the
 * cores' collectives, for scaling studies (benchmarks/scaling.py): the steady step time and
 * the shares of it taken by all-reduce (gradients over the replicas, and within a replica)
 * and by halo exchange (spatial partitioning).
 *
 * Measured with the device's per-op statistics (device.h's tpu_device_op_stats) of the
 * loaded training program: a snapshot after the first training loop (which also fills the
 * infeed pipeline), and the difference of every later loop's statistics from it. An op's
 * share_cycles is its share of its core's time (what it outlasts the ops it overlaps, its
 * waits included), and the shares of a core's ops add up to the core's busy span; so the
 * all-reduce share is the all_reduce ops' share_cycles over every op's, summed over the
 * cores (their mean, weighted by time). On MPI ranks each rank measures its own cores and
 * the ranks add their sums at each loop boundary (the host group's allgather), so the shares
 * are the pod's. Only this layer prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "tpusim/device.h"
#include "tpusim/program.h"
#include "tpusim/runtime.h"

enum share_kind { KIND_OTHER = 0, KIND_ALL_REDUCE, KIND_HALO };

/* What an op counts as: all_reduce, halo or halo_grad (by name: a program without halo ops
 * has none to count), or anything else. */
static enum share_kind kind_of(enum tpu_opcode code)
{
    const char *name = tpu_opcode_name(code);
    if (!name)
        return KIND_OTHER;
    if (!strcmp(name, "all_reduce"))
        return KIND_ALL_REDUCE;
    if (!strcmp(name, "halo") || !strcmp(name, "halo_grad"))
        return KIND_HALO;
    return KIND_OTHER;
}

/* Every core's statistics into out ([cores][n_ops]). */
static int snapshot(const struct step_shares *s, struct tpu_op_stats *out, struct tpu_diag *d)
{
    for (uint32_t c = 0; c < s->n_cores; c++) {
        int rc = tpu_device_op_stats(s->dev, c, out + (size_t)c * s->n_ops, s->n_ops, d);
        if (rc)
            return rc;
    }
    return 0;
}

int tpu__cli_step_shares_after_loop(void *ctx, const struct tpu_loop_info *li,
                                    struct tpu_diag *d)
{
    struct step_shares *s = ctx;
    if (li->mode != TPU_MODE_TRAIN || !li->steps)
        return 0;
    const struct tpu_program *prog = tpu_device_program(s->dev);
    if (!prog)
        return 0;
    if (!s->first) {
        s->n_ops = tpu_program_n_ops(prog);
        s->n_cores = tpu_device_n_cores(s->dev);
        s->first = calloc((size_t)s->n_cores * s->n_ops, sizeof *s->first);
        s->now = calloc((size_t)s->n_cores * s->n_ops, sizeof *s->now);
        if (!s->first || !s->now) {
            snprintf(d->msg, sizeof d->msg, "--step-shares: out of memory for the per-op "
                     "statistics of %u cores x %zu ops", s->n_cores, s->n_ops);
            return TPU_ENOMEM;
        }
        return snapshot(s, s->first, d);
    }
    int rc = snapshot(s, s->now, d);
    if (rc)
        return rc;
    s->steps += li->steps;
    s->device_s += li->device_seconds;
    uint64_t total = 0, by_kind[3] = {0, 0, 0};
    for (uint32_t c = 0; c < s->n_cores; c++)
        for (size_t i = 0; i < s->n_ops; i++) {
            const size_t k = (size_t)c * s->n_ops + i;
            const uint64_t cyc = s->now[k].share_cycles - s->first[k].share_cycles;
            total += cyc;
            by_kind[kind_of(tpu_program_op(prog, i)->code)] += cyc;
        }
    if (s->group) {
        /* on ranks: the pod's cores, every rank's sums added (integers: the order does not
         * matter, so the shares are those of one process holding the pod) */
        uint64_t sums[4] = {total, by_kind[0], by_kind[1], by_kind[2]};
        if ((rc = tpu__cli_group_sum_u64(s->group, sums, sums, 4, d)))
            return rc;
        total = sums[0];
        for (int k = 0; k < 3; k++)
            by_kind[k] = sums[1 + k];
    }
    s->measured = total > 0;
    s->all_reduce_share = total ? (double)by_kind[KIND_ALL_REDUCE] / (double)total : 0;
    s->halo_share = total ? (double)by_kind[KIND_HALO] / (double)total : 0;
    return 0;
}

void tpu__cli_step_shares_free(struct step_shares *s)
{
    free(s->first);
    free(s->now);
    s->first = s->now = NULL;
}
