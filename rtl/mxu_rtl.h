/* The Verilog matrix unit (rtl/mxu_array.v), Verilated, behind a C API.
 *
 * This is the cosimulation side of the contract in include/tpusim/mxu.h: a run hands the
 * array a sequence of weight tiles and input streams, the harness drives them into the RTL
 * cycle by cycle and collects the output rows from the array's de-skewed, valid-flagged
 * output. Nothing here computes a value or a cycle count in C: values come from the RTL's
 * output port, the cycle count is the cycle in which the RTL's last output row was valid.
 *
 * What the harness decides is *when* to present each tile, and it does that as early as
 * mxu.h's cycle model allows, by the model's port rules applied cycle by cycle (one weight
 * row per cycle on the load port; a tile's load may begin once the buffer half it overwrites
 * has seen its last input row presented; a tile's stream may begin once its load is complete
 * and the previous stream has ended). tests/test_cosim.c checks that the resulting count
 * equals tpu_mxu_schedule() exactly and that every output equals tpu_mxu_tile_bf16/int8 bit
 * for bit. A job may instead force a schedule (tests use this to show the RTL's hazard check
 * firing when a load or a stream comes one cycle too early).
 *
 * Shapes: each R x C is a separate Verilated model fixed at build time (rtl/meson.build
 * lists them); tpu_mxu_rtl_create fails for any other shape. Instances are independent (each
 * owns its VerilatedContext): several may live in one process, each used by one thread at a
 * time. Available only when tpusim is built with -Drtl=enabled (TPUSIM_HAVE_RTL is defined
 * to 1 for code that links rtl_dep).
 */
#ifndef TPUSIM_MXU_RTL_H
#define TPUSIM_MXU_RTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/bf16.h"
#include "tpusim/error.h"
#include "tpusim/mxu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tpu_mxu_rtl;

/* Number of array shapes built into this binary, and the i-th of them (i < count). */
size_t tpu_mxu_rtl_shape_count(void);
void tpu_mxu_rtl_shape(size_t i, uint32_t *rows, uint32_t *cols);

/* Makes an instance of the rows x cols array. Returns 0 and sets *out (the caller owns it
 * and frees it with tpu_mxu_rtl_destroy), or TPU_EUNSUPPORTED when no model of that shape is
 * built (the message lists the built ones), TPU_EINVAL for a NULL out, TPU_ENOMEM. */
int tpu_mxu_rtl_create(uint32_t rows, uint32_t cols, struct tpu_mxu_rtl **out,
                       struct tpu_diag *d);

/* Closes any open trace and frees the instance. Accepts NULL. */
void tpu_mxu_rtl_destroy(struct tpu_mxu_rtl *rtl);

uint32_t tpu_mxu_rtl_rows(const struct tpu_mxu_rtl *rtl);
uint32_t tpu_mxu_rtl_cols(const struct tpu_mxu_rtl *rtl);

/* Starts writing a VCD waveform of every later run to vcd_path (one file; time advances by
 * 2 per clock cycle: the clock's low and high halves). Returns 0, TPU_EIO when the file
 * cannot be created (the message gives the path and the system's reason), TPU_EINVAL when a
 * trace is already open. A write that fails later (a full disk: ENOSPC, EIO) stops the
 * trace and makes the run in which it happened return TPU_EIO with the path and the reason;
 * the file keeps what was written before, and later runs go on untraced. */
int tpu_mxu_rtl_trace_open(struct tpu_mxu_rtl *rtl, const char *vcd_path, struct tpu_diag *d);

/* One run: n_tiles weight tiles, each streaming m_rows[t] input rows, back to back.
 * Buffers are caller-owned; the harness reads the inputs and writes the outputs only. */
struct tpu_mxu_rtl_job {
    enum tpu_dtype dtype; /* TPU_BF16 or TPU_INT8 */
    size_t n_tiles;
    const uint64_t *m_rows; /* [n_tiles], each >= 1 */

    /* dtype BF16: */
    const tpu_bf16 *const *w_bf16;  /* [n_tiles] -> [rows][cols], W[i][j] for PE(i, j) */
    const tpu_bf16 *const *in_bf16; /* [n_tiles] -> [m_rows[t]][rows] */
    float *const *out_f32;          /* [n_tiles] -> [m_rows[t]][cols] */
    /* dtype INT8: */
    const int8_t *const *w_int8;
    const int8_t *const *in_int8;
    int32_t *const *out_i32;

    /* NULL (both): present everything as early as the cycle model allows. Otherwise [n_tiles]
     * cycles in which each tile's load and stream begin, driven as given: loads must not
     * overlap on the load port, streams not on the input port, and no stream may begin before
     * its own load. */
    const uint64_t *force_load_start;
    const uint64_t *force_stream_start;

    /* Results. The arrays are optional (NULL) and [n_tiles]. */
    uint64_t *load_start;      /* cycle the tile's first weight row was presented */
    uint64_t *stream_start;    /* cycle its first input row was presented */
    uint64_t *first_out_cycle; /* cycle its first output row was valid */
    uint64_t cycles; /* cycles 0 .. the cycle the last output row was valid, inclusive */
    bool hazard;     /* the RTL saw a row use a weight half while a load wrote it */
};

/* Runs the job on a freshly reset array. Returns 0; TPU_EINVAL for a malformed job (the
 * message names the field); TPU_EBACKEND when the RTL misbehaves: an output row missing,
 * extra, or carrying the wrong buffer tag, or — when the schedule is not forced — a hazard,
 * which the cycle model excludes. With a forced schedule a hazard is reported in job->hazard
 * and the run still returns 0 with whatever the RTL produced. TPU_EIO when writing the
 * waveform failed during the run (see tpu_mxu_rtl_trace_open); the outputs are then
 * incomplete. */
int tpu_mxu_rtl_run(struct tpu_mxu_rtl *rtl, struct tpu_mxu_rtl_job *job, struct tpu_diag *d);

/* Shorthands: earliest schedule, cycles_out (may be NULL) gets the job's cycle count. */
int tpu_mxu_rtl_run_bf16(struct tpu_mxu_rtl *rtl, size_t n_tiles,
                         const tpu_bf16 *const *w_tiles, const tpu_bf16 *const *in,
                         const uint64_t *m_rows, float *const *out, uint64_t *cycles_out,
                         struct tpu_diag *d);
int tpu_mxu_rtl_run_int8(struct tpu_mxu_rtl *rtl, size_t n_tiles,
                         const int8_t *const *w_tiles, const int8_t *const *in,
                         const uint64_t *m_rows, int32_t *const *out, uint64_t *cycles_out,
                         struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
