/* Internal interface between the files that compute the device program's local ops:
 * sim/ops/ops.c (the dispatcher, operand checks and matmul), sim/ops/ops_vector.c (elementwise ops,
 * convert, reductions) and sim/ops/ops_train.c (loss, accuracy count, optimizers). The public
 * entry point is tpu__op_compute in sim/ops/ops.h; the values each op computes are defined in the
 * opening comments of those three files. Not part of the public API. */
#ifndef TPUSIM_SIM_OPS_INT_H
#define TPUSIM_SIM_OPS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

/* "any size" for tpu__ops_check_buf */
#define TPU__OPS_ANY UINT32_MAX

/* The op's text name ("matmul"), or "unknown" for a code outside the table. */
const char *tpu__ops_op_name(enum tpu_opcode code);
/* Number of elements of a buffer (rows * cols; both are 32-bit, the product fits size_t on
 * the 64-bit hosts the simulator supports and is checked anyway). */
size_t tpu__ops_count(const struct tpu__bufmem *b);

/* Checks that buffer `b`, the op's operand `role`, has dtype `dtype` (or any dtype if dtype
 * is negative) and the shape [rows][cols] (TPU__OPS_ANY matches any size). Returns 0, or
 * TPU_ESHAPE (wrong dtype or shape, the code the verifier uses) or TPU_EINVAL (no memory)
 * with a sentence naming the op, the operand, what it is and what it must be. These checks
 * repeat part of what tpu_program_verify enforces, so that a program that reaches a core
 * unverified fails cleanly instead of reading past a buffer. */
int tpu__ops_check_buf(struct tpu_diag *d, const struct tpu_op *op, const char *role,
                       const struct tpu__bufmem *b, int dtype, uint32_t rows, uint32_t cols);

/* The op families; each assumes tpu__op_compute has checked the opcode belongs to it. */
int tpu__ops_matmul(const struct tpu_op *op, struct tpu__bufmem *bufs, uint32_t tile_rows,
                    unsigned n_threads, struct tpu__scratch *scratch, struct tpu_diag *d);
int tpu__ops_vector(const struct tpu_op *op, struct tpu__bufmem *bufs, struct tpu_diag *d);
int tpu__ops_train(const struct tpu_op *op, struct tpu__bufmem *bufs, const int64_t *vars,
                   struct tpu_diag *d);

#endif
