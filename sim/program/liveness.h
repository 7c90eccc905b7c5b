/* The life of each buffer of a program, the one rule that both the HBM check
 * (program_memory.c: params plus the peak of live temps) and the chip's on-chip placement of
 * temps (sim/chip/chip.c) use: a buffer lives from its first writer to its last reader or
 * writer; one written before the loop and read inside it lives to the loop's end (every
 * iteration reads it). Internal to sim/. */
#ifndef TPUSIM_SIM_PROGRAM_LIVENESS_H
#define TPUSIM_SIM_PROGRAM_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#include "tpusim/program.h"

/* lo[b] .. hi[b] (op indices) for every buffer b (arrays of tpu_program_n_buffers(p));
 * lo[b] is SIZE_MAX for a buffer no op writes. */
void tpu__program_live_ranges(const struct tpu_program *p, size_t *lo, size_t *hi);

#endif
