/* Matmuls on a matrix-unit provider (device.h, struct tpu_mxu_provider): the chip's side of an
 * external matrix unit such as the RTL array. Cuts a matmul op into weight tiles and
 * accumulator chunks exactly as gemm.h deals it over one core's MXUs, runs each MXU's tile
 * sequence on the provider and accumulates the column outputs into the result as mxu.h's
 * numerics define, so the values equal the built-in matrix unit's (sim/ops/ops.c) bit for bit,
 * and the cycles are the provider's own count. Internal to sim/; implemented in mxu_provider.c. */
#ifndef TPUSIM_SIM_MXU_PROVIDER_H
#define TPUSIM_SIM_MXU_PROVIDER_H

#include <stdint.h>

#include "ops/ops.h"
#include "tpusim/config.h"
#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/program.h"

/* The checks the native chip makes of settings->mxu when it opens (0 when it is NULL): a
 * run function, the provider's array size equal to the chip's, enough units for every MXU of
 * the device, and values wanted (a provider computes values, so timing_only is rejected). */
int tpu__provider_check(const struct tpu_device_settings *s, struct tpu_diag *d);

/* Computes the matmul or conv2d op `op` (a conv2d op as its GEMM, the patches formed around
 * it; a row-partitioned one as logical core `part` of its replica) of core `core` on
 * provider p: reads op's operands from bufs and
 * writes (or, with accumulate, adds to) its result there, as tpu__op_compute would. Sets
 * *cycles to the matrix units' cycles: the longest of the core's MXU sequences. Returns 0;
 * TPU_EUNSUPPORTED for an f32 matmul or conv2d op in 3 or 6 passes, or another op;
 * TPU_ESHAPE / TPU_EINVAL for operands that do not fit the op (as ops.c and ops_conv.c);
 * TPU_ENOMEM; or the provider's own error. On an error
 * the result buffer may be partly written. */
int tpu__provider_matmul(const struct tpu_mxu_provider *p, const struct tpu_chip_config *cfg,
                         uint32_t core, uint32_t part, const struct tpu_op *op,
                         struct tpu__bufmem *bufs, uint64_t *cycles, struct tpu_diag *d);

#endif
