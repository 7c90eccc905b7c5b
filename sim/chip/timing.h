/* Cycle costs of the chip's units, as pure functions of a configuration and sizes. The
 * scoreboard in chip_exec.c places these costs on each core's unit timelines; this file only
 * says how long things take (every formula is documented in timing.c). Internal to sim/. */
#ifndef TPUSIM_SIM_TIMING_H
#define TPUSIM_SIM_TIMING_H

#include <stdbool.h>
#include <stdint.h>

#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/program.h"

/* Pipeline latency of the vector unit, cycles (an assumption; see timing.c). */
#define TPU__VPU_LATENCY_CYCLES 8

/* Cycles to move `bytes` between one core's HBM share and its on-chip memory. */
uint64_t tpu__dma_cycles(const struct tpu_chip_config *cfg, uint64_t bytes);

/* Cycles for `bytes` over one core's share of the chip's host link (bandwidth /
 * cores_per_chip), latency included. */
uint64_t tpu__host_link_share_cycles(const struct tpu_chip_config *cfg, uint64_t bytes);

/* The unit that runs the op (the op table's `unit` column); CTRL for a code outside it. */
enum tpu_unit tpu__op_unit(enum tpu_opcode code);

/* The compute cost of a local op (one whose unit is MXU, VPU or CTRL) of program `prog`:
 * its unit (returned), its cycles on that unit, and for the MXU the MAC slots it occupies
 * and the MACs it does (both 0 elsewhere). MXU: tpu__matmul_cycles; CTRL: 1 cycle; VPU:
 * tpu__vpu_cycles over the element count of its largest operand, except the pooling ops,
 * which count their window elements (timing.c). */
enum tpu_unit tpu__op_cost(const struct tpu_chip_config *cfg, const struct tpu_program *prog,
                           const struct tpu_op *op, uint64_t *cycles, uint64_t *mac_slots,
                           uint64_t *macs);

/* Vector-unit cycles for an op over `elements` elements (latency included). */
uint64_t tpu__vpu_cycles(const struct tpu_chip_config *cfg, enum tpu_opcode code,
                         uint64_t elements);

/* ALU operations per element the vector unit spends on an op (0 for non-VPU ops). */
unsigned tpu__vpu_ops_per_element(enum tpu_opcode code);

/* Matrix-unit cycles for y[m][n] = a[m][k] * b[k][n] on one core's MXUs, with `passes` bf16
 * passes; *mac_slots gets busy cycles x R x C x MXUs. */
uint64_t tpu__matmul_cycles(const struct tpu_chip_config *cfg, uint64_t m, uint64_t k,
                            uint64_t n, unsigned passes, uint64_t *mac_slots);

/* The placement of cores on chips and chips on the interconnect, for collectives. */
struct tpu__torus_dims {
    uint32_t n_chips;
    uint32_t dims[3]; /* chips along each torus dimension (1 where unused) */
    uint32_t n_dims;
};
void tpu__ici_dims(const struct tpu_chip_config *cfg, uint32_t n_chips,
                   struct tpu__torus_dims *out);

/* Cycles for an all-reduce of `bytes` per participant over `n_part` cores that are spread
 * `per_chip` to a chip (per_chip * chips used == n_part). */
uint64_t tpu__all_reduce_cycles(const struct tpu_chip_config *cfg, uint32_t n_part,
                                uint32_t per_chip, uint64_t bytes);

/* Cycles for a collective permute moving `bytes` to a neighbour; `cross_chip` if any pair
 * crosses chips. */
uint64_t tpu__permute_cycles(const struct tpu_chip_config *cfg, uint64_t bytes,
                             int cross_chip);

/* Cycles of one halo transfer (halo, halo_grad: timing.c gives the model): `bytes` from one
 * core to another, on the same chip or, `other_chip`, over the interconnect; 0 for 0 bytes.
 * The halo op takes the largest over every (receiver, sender) pair of its replica. */
uint64_t tpu__halo_transfer_cycles(const struct tpu_chip_config *cfg, uint64_t bytes,
                                   bool other_chip);

/* Cycles of the collective op `code` (all_reduce or collective_permute) over `n_part`
 * cores, `per_chip` to a chip, moving `bytes` per participant; `cross_chip` if any pair of
 * participants is on different chips. */
uint64_t tpu__collective_cycles(const struct tpu_chip_config *cfg, enum tpu_opcode code,
                                uint32_t n_part, uint32_t per_chip, bool cross_chip,
                                uint64_t bytes);

/* The chunking of a streamed op: how many pieces it is cut into so that its operands
 * stream through on-chip memory (a quarter of it per piece: double-buffered in and out). */
uint64_t tpu__stream_chunks(const struct tpu_chip_config *cfg, uint64_t bytes);

#endif
