/* The RTL matrix unit of the native chip: a matrix-unit provider (device.h, struct
 * tpu_mxu_provider) whose every matrix unit is a Verilated array (mxu_rtl.h).
 *
 * A provider holds one RTL instance per simulated MXU, so the cores, which the device runs
 * on several threads, never share an array: unit u is used only by the core that owns it,
 * and a core runs on one thread at a time. Each matmul's tile sequence for a unit is one
 * harness run (mxu_rtl.h: a freshly reset array, tiles presented as early as mxu.h's port
 * rules allow), and the cycle count the device charges is the cycle in which the RTL's last
 * output row was valid. Nothing here computes a value: the device's side (sim/chip/mxu_provider.c)
 * cuts the matmul into tiles and accumulates the array's column outputs.
 *
 * Use: tpu_mxu_rtl_provider_create for the chip's MXU shape with one unit per MXU of the
 * device (cores x mxu_per_core), set settings.mxu = tpu_mxu_rtl_provider_get(p), open the
 * device; destroy the provider after the device is closed. Available only when tpusim is
 * built with -Drtl=enabled (TPUSIM_HAVE_RTL is defined to 1 for code that links rtl_dep). */
#ifndef TPUSIM_MXU_RTL_PROVIDER_H
#define TPUSIM_MXU_RTL_PROVIDER_H

#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tpu_mxu_rtl_provider;

/* Makes a provider of n_units (>= 1) RTL arrays of rows x cols. Returns 0 and sets *out
 * (the caller owns it: tpu_mxu_rtl_provider_destroy), TPU_EUNSUPPORTED when no RTL model of
 * that shape is built (the message lists the built ones), TPU_EINVAL, TPU_ENOMEM. */
int tpu_mxu_rtl_provider_create(uint32_t rows, uint32_t cols, uint32_t n_units,
                                struct tpu_mxu_rtl_provider **out, struct tpu_diag *d);

/* Frees the arrays (closing any waveform) and NULLs *p. Accepts NULL and *p == NULL. The
 * device that uses it must be closed first. */
void tpu_mxu_rtl_provider_destroy(struct tpu_mxu_rtl_provider **p);

/* The provider for tpu_device_settings.mxu; it belongs to p and lives as long as p. */
const struct tpu_mxu_provider *tpu_mxu_rtl_provider_get(const struct tpu_mxu_rtl_provider *p);

/* Writes a VCD waveform of every later run of `unit`'s array to vcd_path (the unit of core
 * c's i-th MXU is c * mxu_per_core + i). One waveform per unit. Returns 0, TPU_EINVAL (no
 * such unit, or a waveform already open), TPU_EIO (the file cannot be created). */
int tpu_mxu_rtl_provider_trace_open(struct tpu_mxu_rtl_provider *p, uint32_t unit,
                                    const char *vcd_path, struct tpu_diag *d);

/* What one unit's array has done. */
struct tpu_mxu_rtl_unit_stats {
    uint64_t runs;   /* tile sequences (one per matmul that gave the unit work) */
    uint64_t tiles;  /* weight tiles */
    uint64_t cycles; /* RTL clock cycles of those runs, summed */
};

/* Reads unit's counters (not while a device run uses the provider). Returns 0 or
 * TPU_EINVAL for a unit out of range. */
int tpu_mxu_rtl_provider_stats(const struct tpu_mxu_rtl_provider *p, uint32_t unit,
                               struct tpu_mxu_rtl_unit_stats *out);

#ifdef __cplusplus
}
#endif
#endif
