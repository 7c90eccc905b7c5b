/* Internal interface between the files that compute the device program's local ops:
 * sim/ops/ops.c (the dispatcher, operand checks and matmul), sim/ops/ops_vector.c
 * (elementwise ops, convert, reductions), sim/ops/ops_window.c (im2col, col2im, pooling,
 * reshape), sim/ops/ops_train.c (loss, accuracy count, optimizers) and
 * sim/ops/ops_train_aux.c (mse, count_rows, dropout_mask, the schedules). The public entry
 * point is tpu__op_compute_on in sim/ops/ops.h; the values each op computes are defined in
 * the opening comments of those files. Not part of the public API. */
#ifndef TPUSIM_SIM_OPS_INT_H
#define TPUSIM_SIM_OPS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

/* "any size" for tpu__ops_check_buf */
#define TPU__OPS_ANY UINT32_MAX

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

/* b^t in double by binary exponentiation (ops_train.c's header gives the order); 1 for t 0. */
double tpu__ops_pow_steps(double b, uint64_t t);

/* The window of a window op (struct tpu_window) with its image's example count N, in size_t
 * for indexing (ops_window.c; the conv ops of ops_conv.c and the matrix-unit provider use it
 * too). */
struct tpu__win_geom {
    size_t n, h, w, c, kh, kw, sh, sw, pt, pl, ho, wo;
    /* Row partitioning (program.h): the window split over `parts` cores, this core being
     * logical core `part` (parts 1: not partitioned, part 0). */
    size_t parts, part;
    size_t hs;    /* image rows stored per example: h, or E (the ext image) */
    size_t hos;   /* output rows stored per example: ho, or hoc (the local out) */
    size_t oy0;   /* the global output row of stored output row 0: 0, or part*hoc */
    size_t sbase; /* input position iy + pt = oy*sh + ky is stored image row (oy*sh + ky) -
                     sbase: sbase = pt, or oy0*sh */
};

/* Checks op's window attributes and the element count `elems` of its image operand `role`
 * (the ext image when the window is partitioned), and fills g for logical core `part` of
 * the replica (N = elems / (hs*w*c)). The verifier's WINDOW rule checks the same; repeated
 * so that an unverified program fails with TPU_EINVAL or TPU_ESHAPE instead of reading out
 * of bounds. part >= parts (a device whose replicas are not the window's parts) gives
 * TPU_EINVAL. */
int tpu__win_geom_get(const struct tpu_op *op, uint32_t part, const char *role, size_t elems,
                      struct tpu__win_geom *g, struct tpu_diag *d);
/* N*hos*wo, the rows of the window side, or a value no buffer has if it does not fit. */
uint32_t tpu__win_out_rows(const struct tpu__win_geom *g);
/* im2col (ops_window.c's definition) of the image x into y [N*ho*wo][kh*kw*c], for elements
 * of `esize` bytes (4: f32, 2: bf16; a copy, +0 on padding). */
void tpu__win_im2col(const struct tpu__win_geom *g, const void *x, size_t esize, void *y);
/* col2im (ops_window.c's definition, summation order included): y (N*h*w*c f32) = the
 * adjoint of im2col applied to cols [N*ho*wo][kh*kw*c] f32. */
void tpu__win_col2im(const struct tpu__win_geom *g, const float *cols, float *y);

/* A conv2d op's GEMM (ops_conv.c): its window, the patch matrix [m][kc] (m = N*ho*wo
 * windows, kc = kh*kw*c), f filters, and the patch buffer's element size (x's type for
 * conv2d and conv2d_grad_filter, f32 for conv2d_grad_input's product) and bytes. */
struct tpu__conv_gemm {
    struct tpu__win_geom g;
    size_t m, kc, f, esize, bytes;
};

/* The operand checks of a conv2d op (ops_conv.c's, with its messages) on logical core `part`
 * of its replica, filling *cg. Returns 0, TPU_ESHAPE, TPU_EINVAL or TPU_ENOMEM (patch size
 * overflows). */
int tpu__ops_conv_check(const struct tpu_op *op, uint32_t part, const struct tpu__bufmem *bufs,
                        struct tpu__conv_gemm *cg, struct tpu_diag *d);

/* Writes 0 to the rows [N*hos*wo][f] of y whose output row is padding (oy >= ho: a
 * partitioned window's last cores), as the forward conv2d does after its GEMM. */
void tpu__conv_zero_pad_rows(const struct tpu__win_geom *g, float *y, size_t f);
/* Copies the window-side rows [N*hos*wo] of `row_bytes` bytes each from src to dst, writing
 * 0 in place of the padding rows (oy >= ho): conv2d_grad_filter's dy as it multiplies it, so
 * that dy's padding rows are never read. */
void tpu__conv_copy_real_rows(const struct tpu__win_geom *g, const void *src, size_t row_bytes,
                              void *dst);

struct tpu__op_ctx;

/* The float matmul of ops.c on operands where they are: y[m][n] = op(a) * op(b) (or += with
 * acc), a and b f32 or bf16 (a_f32, b_f32 say which), op = transpose where ta / tb; `passes`
 * (1, 3 or 6) as matmul reads it, ignored when neither operand is f32. Returns 0 or a
 * TPU_E code of the GEMM (no message). */
int tpu__ops_gemm_float(const void *a, bool a_f32, bool ta, const void *b, bool b_f32, bool tb,
                        float *y, size_t m, size_t k, size_t n, unsigned passes, bool acc,
                        const struct tpu__op_ctx *cx);

/* What an op's function may use besides the op: the core's buffers (indexed by buffer id)
 * and variables, the core's replica (dropout_mask) and its logical index in the replica
 * (`part`: the row-partitioned ops), and for matmul the array's rows, the host threads and
 * the scratch arena (the arguments of tpu__op_compute_core, ops.h). */
struct tpu__op_ctx {
    struct tpu__bufmem *bufs;
    int64_t *vars;
    uint32_t replica;
    uint32_t part;
    uint32_t tile_rows;
    unsigned n_threads;
    struct tpu__scratch *scratch;
};

/* The functions that compute the ops, one per value of the op table's `sem` column
 * (include/tpusim/program.h): tpu__op_compute calls tpu__ops_<sem> for the op. Each may
 * assume the op's code names it in the table; a function shared by several ops (binary:
 * add, sub, mul, max) tells them apart by op->code. tpu__ops_chip rejects the ops the chip
 * runs itself. */
typedef int tpu__op_fn(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d);
tpu__op_fn tpu__ops_matmul;         /* ops.c */
tpu__op_fn tpu__ops_var_add;        /* ops.c */
tpu__op_fn tpu__ops_chip;           /* ops.c */
tpu__op_fn tpu__ops_binary;         /* ops_vector.c: add, sub, mul, max */
tpu__op_fn tpu__ops_unary;          /* ops_vector.c: scale, relu, exp */
tpu__op_fn tpu__ops_relu_grad;      /* ops_vector.c */
tpu__op_fn tpu__ops_convert;        /* ops_vector.c */
tpu__op_fn tpu__ops_quantize;       /* ops_vector.c */
tpu__op_fn tpu__ops_reduce;         /* ops_vector.c: reduce_sum, reduce_max */
tpu__op_fn tpu__ops_window;         /* ops_window.c: im2col ... avg_pool_grad, reshape */
tpu__op_fn tpu__ops_conv;           /* ops_conv.c: conv2d and its two gradients */
tpu__op_fn tpu__ops_softmax_xent;   /* ops_train.c: softmax_xent, softmax_xent_w */
tpu__op_fn tpu__ops_classify_count; /* ops_train.c */
tpu__op_fn tpu__ops_sgd_momentum;   /* ops_train.c */
tpu__op_fn tpu__ops_adam;           /* ops_train.c: adam, adamw */
tpu__op_fn tpu__ops_mse;            /* ops_train_aux.c: mse, mse_w */
tpu__op_fn tpu__ops_count_rows;     /* ops_train_aux.c */
tpu__op_fn tpu__ops_dropout_mask;   /* ops_train_aux.c */
tpu__op_fn tpu__ops_row_mask;       /* ops_part.c */

#endif
