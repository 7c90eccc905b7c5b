/* Device programs: the static-shape programs a chip runs, built by the host, printed and
 * parsed as text, and verified before they run.
 *
 * A program is SPMD: every core (replica) runs the same program on its own copies of the
 * buffers. It is a list of buffers, device variables and ops. One `loop` over a device
 * variable may enclose the ops of a training step: at each launch the chip reads the
 * variable and runs the body that many times without the host (TPUEstimator's
 * iterations_per_loop). Ops before the loop run once per launch, ops after it once at the
 * end.
 *
 * Buffers are 2-D ([rows][cols], row-major; a scalar is [1][1]) and live in the core's HBM.
 *   param  persistent across launches, readable and writable by the host (weights, optimizer
 *          state); defined from the start
 *   temp   scratch for one pass through the ops; must be written before it is read
 * Device variables are int64 scalars (loop counts, the step counter), set by the host or by
 * `var_add`.
 *
 * The op set is one table (TPU_OP_TABLE below): every property of an op is in its row, and
 * the builder, printer, parser, verifier, executor and timing read it from there. What each
 * op computes, with its operand roles:
 *
 *   infeed   out y                        dequeue the next tensor of the core's infeed queue;
 *                                         with the flag core0 only logical core 0 of each
 *                                         replica dequeues, the other cores take nothing
 *                                         (no link time) and their y is zeros
 *   outfeed  in x                         enqueue x on the core's outfeed queue
 *   matmul   out y; in a, b               y = op(a) * op(b), op = transpose if trans_a/_b;
 *                                         passes 1 (inputs rounded to bf16: mixed precision),
 *                                         3 or 6 (fp32 in bf16 passes; needs an f32 input);
 *                                         f32/bf16 inputs give f32, int8 x int8 gives int32;
 *                                         accumulate: y += ...
 *   add, sub, mul, max   out y; in a, b   elementwise; b may be [1][cols] (broadcast over rows)
 *                                         or [1][1]
 *   scale    out y; in x                  y = alpha * x + beta
 *   relu     out y; in x                  y = max(x, 0)
 *   relu_grad out y; in dy, x             y = x > 0 ? dy : 0
 *   exp      out y; in x
 *   convert  out y; in x                  dtype conversion, same shape (f32 -> bf16 rounds
 *                                         to nearest even; sim/ops/ops_vector.c defines every
 *                                         pair); programs may not convert f32 or bf16 to int8
 *                                         or int32 (use quantize); same dtype: a copy
 *   quantize out y; in x                  f32 -> int8 with a scale: y = clamp(round(alpha *
 *                                         x), -127, 127), round to nearest even, NaN -> 0
 *                                         (alpha = 1 / the scale; symmetric: -128 unused)
 *   reduce_sum, reduce_max  out y; in x   over axis 0 (y is [1][cols]) or 1 (y is [rows][1])
 *   Window ops (conv and pooling; attribute group win, struct tpu_window): the image x is
 *   NHWC with N = elements(x) / (h*w*c) examples, in any 2-D shape of N*h*w*c elements (the
 *   net stores [N*h*w][c], the infeed gives [N][h*w*c]: the same bytes). Output position
 *   (n, oy, ox) reads the window offsets (ky, kx) at iy = oy*sh + ky - pt, ix = ox*sw + kx -
 *   pl; positions outside the image are padding.
 *   im2col   out y; in x                  y [N*ho*wo][kh*kw*c]: row (n, oy, ox), column
 *                                         (ky, kx, ci), both row-major, = x[n, iy, ix, ci],
 *                                         0 on padding (conv2d = im2col, then matmul by the
 *                                         HWIO kernel as [kh*kw*c][filters])
 *   col2im   out y; in cols               the adjoint of im2col: y (N*h*w*c elements, any
 *                                         2-D shape) starts at 0, then every cols entry, rows
 *                                         in order and columns in order, is added to the
 *                                         position it was read from (padding dropped)
 *   max_pool out y; in x                  y [N*ho*wo][c] = max over the window's in-image
 *                                         positions (padding never wins)
 *   max_pool_grad out dx; in dy, x        dx (x's shape) starts at 0; each dy [N*ho*wo][c],
 *                                         in order, is added at the FIRST (ky, kx order)
 *                                         in-image position holding its window's max
 *   avg_pool out y; in x                  y [N*ho*wo][c] = sum over the window's in-image
 *                                         positions (ky, kx order) / their count
 *   avg_pool_grad out dx; in dy           dx (N*h*w*c elements, any 2-D shape) starts at 0;
 *                                         each dy / count, in order, is added to its window's
 *                                         in-image positions
 *   reshape  out y; in x                  same element count and dtype, any shapes: a
 *                                         row-major copy
 *   Convolutions on the matrix unit (window group win, passes as matmul's; x the NHWC image
 *   as above, w the HWIO kernel as [kh*kw*c][f]; inputs f32 or bf16, outputs f32). The
 *   patches are formed on chip, never stored: each op's values are exactly those of its
 *   two-op form.
 *   conv2d   out y; in x, w               y [N*ho*wo][f] = matmul(im2col(x), w)
 *   conv2d_grad_input out dx; in dy, w    dx (N*h*w*c elements, any 2-D shape) =
 *                                         col2im(matmul(dy, w, trans_b)), dy [N*ho*wo][f]
 *   conv2d_grad_filter out dw; in x, dy   dw [kh*kw*c][f] = matmul(im2col(x), dy, trans_a);
 *                                         accumulate: dw += ...
 *   softmax_xent out loss, dlogits; in logits, labels
 *                                         labels int32 [rows][1]; a label < 0 marks a padding
 *                                         row that adds nothing. loss [1][1] = alpha * sum over
 *                                         rows of -log softmax(logits)[label];
 *                                         dlogits = alpha * (softmax - onehot), 0 on padding
 *   classify_count out y; in logits, labels   y [1][2] f32 = (rows whose argmax == label,
 *                                         rows with label >= 0)
 *   rsqrt    out y; in x                  y = 1 / sqrt(x + eps)
 *   mse      out loss, dpred; in pred, target, mask
 *                                         pred, target f32 [B][K], mask int32 [B][1] (a row
 *                                         with mask < 0 is padding and adds nothing); loss
 *                                         [1][1] = alpha * sum over real rows of the mean over
 *                                         k of (pred - target)^2; dpred = alpha * 2 * (pred -
 *                                         target) / K on real rows, 0 on padding
 *   count_rows out y; in labels           y [1][2] f32 = (0, rows with label >= 0): the
 *                                         evaluation counts of a regression model
 *   Weighted losses (training with per-row sample weights): the weights f32 [rows][1] take
 *   the place of alpha, row by row, and the ops have no attributes.
 *   softmax_xent_w out loss, dlogits; in logits, labels, weights
 *                                         loss [1][1] = sum over rows with label >= 0 of
 *                                         weights[i] * -log softmax(logits)[label]; dlogits
 *                                         row i = weights[i] * (softmax - onehot), 0 on
 *                                         padding. The product is the very float operation
 *                                         softmax_xent's alpha multiply is, so weights all
 *                                         equal to alpha give softmax_xent's dlogits bit for
 *                                         bit (the loss differs: alpha multiplies the sum)
 *   mse_w    out loss, dpred; in pred, target, mask, weights
 *                                         loss [1][1] = sum over real rows (mask >= 0) of
 *                                         weights[i] * the row's mean over k of (pred -
 *                                         target)^2; dpred row i = ((weights[i] * 2) / K) *
 *                                         (pred - target), 0 on padding: with weights all
 *                                         equal to alpha, mse's dpred bit for bit
 *   dropout_mask out mask (no inputs)     mask = 1 / (1 - alpha) where u >= alpha, else 0
 *                                         (alpha the rate, in [0, 1)); u in [0, 1) a hash of
 *                                         (imm = the seed, variable `var` = the step, the
 *                                         element's global index replica * elements +
 *                                         index): tpu_dropout_mask_value below
 *   sgd_momentum out param, velocity; in grad
 *                                         g = grad + gamma * param (L2); v = beta * v + g;
 *                                         param -= alpha * v      (alpha lr, beta momentum)
 *                                         TF1's MomentumOptimizer (TPUEstimator's), not
 *                                         Keras 2's SGD (v = beta * v - lr * g; param += v):
 *                                         the two agree at a constant rate, but with a
 *                                         schedule this op's new alpha scales the whole
 *                                         accumulated v, where Keras's v keeps each past
 *                                         step's own rate
 *   adam     out param, m, v; in grad     g = grad + gamma * param; step t from variable `var`
 *                                         (1-based); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *                                         param -= alpha * mhat / (sqrt(vhat) + eps)
 *                                         (alpha lr, beta b1, delta b2, eps): the Adam
 *                                         paper's Algorithm 1, eps added to sqrt(vhat).
 *                                         Keras and TF1's AdamOptimizer add eps to sqrt(v)
 *                                         before the bias correction, which is epsilon-hat
 *                                         = eps / sqrt(1 - b2^t) here: the same update once
 *                                         sqrt(vhat) >> eps, larger where vhat is tiny
 *                                         (early steps, or gradients near 0)
 *   adamw    out param, m, v; in grad     Adam with decoupled weight decay gamma (Keras
 *                                         AdamW): g = grad; m, v, mhat, vhat as adam;
 *                                         param -= lr * (mhat / (sqrt(vhat) + eps) +
 *                                         gamma * param) (eps as adam's)
 *   The optimizers' learning rate may follow a schedule (schedule, warmup, decay_steps,
 *   decay_rate: tpu_lr_schedule_value below) of the step variable `var`; sgd_momentum reads
 *   `var` only for schedule step or cosine. With schedule=host the rate is set by the host
 *   between launches: the f32 whose bits are the low 32 bits of variable `lr_var`, alpha
 *   while those bits are 0 (tpu_lr_host_value below; the net lowering names the variable
 *   "learning_rate").
 *   all_reduce  out y; in x               sum (reduce 0) or mean (reduce 1) of x over the
 *                                         group, in its order: group 0 (replicas) the cores
 *                                         with this core's logical index in every replica, in
 *                                         replica order; group 1 (replica_cores) the cores of
 *                                         this replica, in logical core order; y may be x
 *   collective_permute  out y; in x       y on core i = x from core (i - shift) mod group,
 *                                         group = all replicas (group 0) or the cores of one
 *                                         replica (group 1: halo exchange)
 *   var_add  (no buffers)                 variable `var` += imm
 *   loop_begin / loop_end                 the loop over variable `var`
 *   Row partitioning (the window's parts = P >= 2; "Row partitioning" below the window's
 *   struct defines hc, hoc, E, r0(k) and the local, ext and local-out buffers):
 *   halo     out y; in x                  a collective over the cores of one replica: x the
 *                                         local image, y the ext image: y[n][j] = global row
 *                                         g = r0(k) + j of the replica's image (core g / hc's
 *                                         row g % hc) if 0 <= g < h, else 0. f32 or bf16
 *   halo_grad out dx; in dy               the adjoint of halo, a collective over the cores
 *                                         of one replica: dy an ext image on every core, dx
 *                                         the local image: dx[n][i], global row g = k*hc + i
 *                                         < h, = the sum over cores k' = 0, 1, ... P-1 in
 *                                         that order of dy(k')[n][g - r0(k')] for those k'
 *                                         with 0 <= g - r0(k') < E (the first term starts the
 *                                         sum); rows g >= h get 0. f32
 *   row_mask out y (no inputs)            y f32, N*hc*w*c elements: 1 where the element's
 *                                         global row k*hc + i < h, else 0 (N from y's size;
 *                                         the window's h, w, c and parts are used, the
 *                                         lowering passes the identity window kh = kw = sh =
 *                                         sw = 1, pt = pl = 0, ho = h, wo = w)
 *   dropout_mask with a window of parts >= 2: the mask has N*hc*w*c elements; element
 *                                         (n, i, x, ci) takes global index replica * (N*h*w*c)
 *                                         + ((n*h + k*hc + i)*w + x)*c + ci (the unpartitioned
 *                                         mask's), and padding rows (k*hc + i >= h) get 0
 *
 * The vector unit computes in fp32: every op but infeed, outfeed, matmul, the conv2d ops,
 * convert, quantize, reshape and collective_permute takes and gives f32 (labels and mse's
 * mask are int32). An op may write a buffer it also reads (in place) only where that is safe
 * while streaming (the table's `alias` column): the elementwise ops (add, sub, mul, max,
 * scale, relu, relu_grad, exp, rsqrt) and all_reduce; the optimizers update their outputs in
 * place by definition (`rmw`). A temp holds one value per pass: it is written once by an op
 * that does not read it, then possibly updated in place (or by matmul or
 * conv2d_grad_filter accumulate).
 * tpu_program_verify enforces these and the rest; sim/program/program_verify.c lists every rule.
 *
 * Text form (sim/program/program_parse.c has the grammar):
 *     program mlp_step
 *     var iterations
 *     param w1: f32[784, 128]
 *     temp  x: f32[32, 784]
 *     loop iterations {
 *       x = infeed
 *       h = matmul x, w1 passes=3
 *       w1, v1 = sgd_momentum g1 alpha=0.1 beta=0.9
 *       var_add step 1
 *     }
 * Attributes are written name=value after the inputs with the names of the fields of
 * struct tpu_op_attrs (flags trans_a, trans_b, accumulate, core0 stand alone; reduce=sum|mean,
 * group=replicas|replica_cores, schedule=constant|step|cosine|host, lr_var=VARIABLE (with
 * schedule=host, and then required); the window by its own fields:
 * "h=28 w=28 c=1 kh=3 kw=3 sh=1 sw=1 pt=0 pl=0 ho=26 wo=26", all required where the op
 * requires the window, and "parts=4" optional); var_add's variable and imm are positional. */
#ifndef TPUSIM_PROGRAM_H
#define TPUSIM_PROGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tpusim/config.h"
#include "tpusim/dtype.h"
#include "tpusim/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tpu_buf_kind {
    TPU_BUF_TEMP = 0,
    TPU_BUF_PARAM,
};

/* The op table: one row per op holding every property of the op. The enum below, the text
 * form's names, the operand counts and roles, the attributes, the verifier's rules, the unit
 * that runs the op, its vector-unit cost and the function that computes its values all come
 * from this one table, so that they cannot disagree (the ISA table of an instruction-set
 * simulator, as in Spike).
 *
 * X(ENUM, "name", syntax, n_out, n_in, (roles), alias, rmw, rule, attrs, required, unit,
 *   vpu_ops, sem)
 *   ENUM      TPU_OP_<ENUM>
 *   "name"    the op's name in the text form and in messages
 *   syntax    how the text form writes it (sim/program/program_parse.c has the grammar):
 *             OPERANDS  "outputs = name inputs attributes"; VAR_IMM "var_add VAR INT";
 *             LOOP "loop VAR {"; LOOP_END "}"
 *   n_out, n_in, (roles)
 *             the numbers of outputs and inputs (buffers), and their role names, outputs
 *             first, in operand order ("y", "a", "b"; (NULL) for an op without buffers)
 *   alias     which inputs output 0 may be (in place, safe while streaming): NONE, IN0
 *             (input 0), IN01 (input 0 or 1). Outputs are always distinct buffers.
 *   rmw       1 if the op reads its outputs and writes them back (the optimizers update
 *             their param and state buffers in place), else 0
 *   rule      the verifier's shape and dtype rule for the op (sim/program/program_verify*.c,
 *             rules T1-T16): ANY (no rule), INFEED, MATMUL, BINARY (f32, b
 *             broadcasts), F32 (every operand f32, one shape), CONVERT, QUANTIZE, REDUCE,
 *             WINDOW, CONV, RESHAPE, SOFTMAX_XENT, CLASSIFY_COUNT, OPTIMIZER, ADAM, ALL_REDUCE,
 *             PERMUTE, MSE, COUNT_ROWS, DROPOUT, HALO, ROW_MASK
 *   attrs     the attributes it reads (TPU_ATTR_* bits; the others must stay zero)
 *   required  the attributes the text form must state (a forgotten one would silently be 0)
 *   unit      the unit that runs it (device.h's enum tpu_unit): MXU, VPU, INFEED, OUTFEED,
 *             ICI, CTRL. The ops of MXU, VPU and CTRL are local to a core and stream their
 *             HBM operands through the core's DMA engines; the chip runs the others itself.
 *   vpu_ops   VPU ops: ALU operations per element (the vector unit's cost, sim/chip/timing.c
 *             gives the formula and the reasons for each count); 0 for the other units
 *   sem       the function that computes its values on one core: tpu__ops_<sem> in sim/ops/
 *             (ops_int.h); `chip` for the ops the chip runs itself (sim/chip/chip_exec.c)
 *
 * Adding an op touches: its row here; its semantics in sim/ops/ (a case in the function its
 * `sem` names, or a new tpu__ops_<sem>); its timing in sim/chip/timing.c only if the default
 * for its unit does not fit (VPU: vpu_ops per element of its largest operand); a verifier
 * rule in program_verify.c only if none of the rules above fits; and its tests
 * (tests/test_ops.c, tests/test_program.c). An op on the MXU other than matmul also needs
 * its cycle count in tpu__op_cost (sim/chip/timing.c, which times matmul's and the conv2d
 * ops' m x k x n) and,
 * to run on a matrix-unit provider such as the RTL array, its cut into weight tiles in
 * sim/chip/mxu_provider.c (which refuses other ops); a new attribute needs its field in
 * struct tpu_op_attrs, its TPU_ATTR_ bit, and its line in the text's attribute table
 * (sim/program/program_print.c). */
#define TPU_OP_TABLE(X)                                                                            \
    X(INFEED, "infeed", OPERANDS, 1, 0, ("y"), NONE, 0, INFEED, TPU_ATTR_CORE0, 0, INFEED, 0,      \
      chip)                                                                                        \
    X(OUTFEED, "outfeed", OPERANDS, 0, 1, ("x"), NONE, 0, ANY, 0, 0, OUTFEED, 0, chip)             \
    X(MATMUL, "matmul", OPERANDS, 1, 2, ("y", "a", "b"), NONE, 0, MATMUL,                          \
      TPU_ATTR_TRANS_A | TPU_ATTR_TRANS_B | TPU_ATTR_ACCUMULATE | TPU_ATTR_PASSES, 0, MXU, 0,      \
      matmul)                                                                                      \
    X(ADD, "add", OPERANDS, 1, 2, ("y", "a", "b"), IN01, 0, BINARY, 0, 0, VPU, 1, binary)          \
    X(SUB, "sub", OPERANDS, 1, 2, ("y", "a", "b"), IN01, 0, BINARY, 0, 0, VPU, 1, binary)          \
    X(MUL, "mul", OPERANDS, 1, 2, ("y", "a", "b"), IN01, 0, BINARY, 0, 0, VPU, 1, binary)          \
    X(MAX, "max", OPERANDS, 1, 2, ("y", "a", "b"), IN01, 0, BINARY, 0, 0, VPU, 1, binary)          \
    X(SCALE, "scale", OPERANDS, 1, 1, ("y", "x"), IN0, 0, F32, TPU_ATTR_ALPHA | TPU_ATTR_BETA,     \
      TPU_ATTR_ALPHA, VPU, 2, unary)                                                               \
    X(RELU, "relu", OPERANDS, 1, 1, ("y", "x"), IN0, 0, F32, 0, 0, VPU, 1, unary)                  \
    X(RELU_GRAD, "relu_grad", OPERANDS, 1, 2, ("y", "dy", "x"), IN01, 0, F32, 0, 0, VPU, 2,        \
      relu_grad)                                                                                   \
    X(EXP, "exp", OPERANDS, 1, 1, ("y", "x"), IN0, 0, F32, 0, 0, VPU, 4, unary)                    \
    X(CONVERT, "convert", OPERANDS, 1, 1, ("y", "x"), NONE, 0, CONVERT, 0, 0, VPU, 1, convert)     \
    X(QUANTIZE, "quantize", OPERANDS, 1, 1, ("y", "x"), NONE, 0, QUANTIZE, TPU_ATTR_ALPHA, 0,      \
      VPU, 2, quantize)                                                                            \
    X(REDUCE_SUM, "reduce_sum", OPERANDS, 1, 1, ("y", "x"), NONE, 0, REDUCE, TPU_ATTR_AXIS,        \
      TPU_ATTR_AXIS, VPU, 1, reduce)                                                               \
    X(REDUCE_MAX, "reduce_max", OPERANDS, 1, 1, ("y", "x"), NONE, 0, REDUCE, TPU_ATTR_AXIS,        \
      TPU_ATTR_AXIS, VPU, 1, reduce)                                                               \
    X(IM2COL, "im2col", OPERANDS, 1, 1, ("y", "x"), NONE, 0, WINDOW, TPU_ATTR_WINDOW,              \
      TPU_ATTR_WINDOW, VPU, 1, window)                                                             \
    X(COL2IM, "col2im", OPERANDS, 1, 1, ("y", "cols"), NONE, 0, WINDOW, TPU_ATTR_WINDOW,           \
      TPU_ATTR_WINDOW, VPU, 1, window)                                                             \
    X(MAX_POOL, "max_pool", OPERANDS, 1, 1, ("y", "x"), NONE, 0, WINDOW, TPU_ATTR_WINDOW,          \
      TPU_ATTR_WINDOW, VPU, 1, window)                                                             \
    X(MAX_POOL_GRAD, "max_pool_grad", OPERANDS, 1, 2, ("dx", "dy", "x"), NONE, 0, WINDOW,          \
      TPU_ATTR_WINDOW, TPU_ATTR_WINDOW, VPU, 2, window)                                            \
    X(AVG_POOL, "avg_pool", OPERANDS, 1, 1, ("y", "x"), NONE, 0, WINDOW, TPU_ATTR_WINDOW,          \
      TPU_ATTR_WINDOW, VPU, 1, window)                                                             \
    X(AVG_POOL_GRAD, "avg_pool_grad", OPERANDS, 1, 1, ("dx", "dy"), NONE, 0, WINDOW,               \
      TPU_ATTR_WINDOW, TPU_ATTR_WINDOW, VPU, 1, window)                                            \
    X(RESHAPE, "reshape", OPERANDS, 1, 1, ("y", "x"), NONE, 0, RESHAPE, 0, 0, VPU, 1, window)      \
    X(CONV2D, "conv2d", OPERANDS, 1, 2, ("y", "x", "w"), NONE, 0, CONV,                           \
      TPU_ATTR_WINDOW | TPU_ATTR_PASSES, TPU_ATTR_WINDOW, MXU, 0, conv)                            \
    X(CONV2D_GRAD_INPUT, "conv2d_grad_input", OPERANDS, 1, 2, ("dx", "dy", "w"), NONE, 0, CONV,    \
      TPU_ATTR_WINDOW | TPU_ATTR_PASSES, TPU_ATTR_WINDOW, MXU, 0, conv)                            \
    X(CONV2D_GRAD_FILTER, "conv2d_grad_filter", OPERANDS, 1, 2, ("dw", "x", "dy"), NONE, 0, CONV,  \
      TPU_ATTR_WINDOW | TPU_ATTR_PASSES | TPU_ATTR_ACCUMULATE, TPU_ATTR_WINDOW, MXU, 0, conv)      \
    X(SOFTMAX_XENT, "softmax_xent", OPERANDS, 2, 2, ("loss", "dlogits", "logits", "labels"),       \
      NONE, 0, SOFTMAX_XENT, TPU_ATTR_ALPHA, TPU_ATTR_ALPHA, VPU, 10, softmax_xent)                \
    X(CLASSIFY_COUNT, "classify_count", OPERANDS, 1, 2, ("y", "logits", "labels"), NONE, 0,        \
      CLASSIFY_COUNT, 0, 0, VPU, 2, classify_count)                                                \
    X(RSQRT, "rsqrt", OPERANDS, 1, 1, ("y", "x"), IN0, 0, F32, TPU_ATTR_EPS, TPU_ATTR_EPS, VPU, 5, \
      unary)                                                                                       \
    X(MSE, "mse", OPERANDS, 2, 3, ("loss", "dpred", "pred", "target", "mask"), NONE, 0, MSE,       \
      TPU_ATTR_ALPHA, TPU_ATTR_ALPHA, VPU, 5, mse)                                                 \
    X(COUNT_ROWS, "count_rows", OPERANDS, 1, 1, ("y", "labels"), NONE, 0, COUNT_ROWS, 0, 0, VPU,   \
      2, count_rows)                                                                               \
    X(DROPOUT_MASK, "dropout_mask", OPERANDS, 1, 0, ("mask"), NONE, 0, DROPOUT,                    \
      TPU_ATTR_VAR | TPU_ATTR_IMM | TPU_ATTR_ALPHA | TPU_ATTR_WINDOW,                              \
      TPU_ATTR_VAR | TPU_ATTR_IMM | TPU_ATTR_ALPHA, VPU, 14, dropout_mask)                         \
    X(SGD_MOMENTUM, "sgd_momentum", OPERANDS, 2, 1, ("param", "velocity", "grad"), NONE, 1,        \
      OPTIMIZER,                                                                                   \
      TPU_ATTR_VAR | TPU_ATTR_ALPHA | TPU_ATTR_BETA | TPU_ATTR_GAMMA | TPU_ATTR_SCHEDULE,          \
      TPU_ATTR_ALPHA, VPU, 6, sgd_momentum)                                                        \
    X(ADAM, "adam", OPERANDS, 3, 1, ("param", "m", "v", "grad"), NONE, 1, ADAM,                    \
      TPU_ATTR_VAR | TPU_ATTR_ALPHA | TPU_ATTR_BETA | TPU_ATTR_GAMMA | TPU_ATTR_DELTA |            \
          TPU_ATTR_EPS | TPU_ATTR_SCHEDULE,                                                        \
      TPU_ATTR_VAR | TPU_ATTR_ALPHA | TPU_ATTR_BETA | TPU_ATTR_DELTA | TPU_ATTR_EPS, VPU, 22,      \
      adam)                                                                                        \
    X(ADAMW, "adamw", OPERANDS, 3, 1, ("param", "m", "v", "grad"), NONE, 1, ADAM,                  \
      TPU_ATTR_VAR | TPU_ATTR_ALPHA | TPU_ATTR_BETA | TPU_ATTR_GAMMA | TPU_ATTR_DELTA |            \
          TPU_ATTR_EPS | TPU_ATTR_SCHEDULE,                                                        \
      TPU_ATTR_VAR | TPU_ATTR_ALPHA | TPU_ATTR_BETA | TPU_ATTR_DELTA | TPU_ATTR_EPS, VPU, 22,      \
      adam)                                                                                        \
    X(ALL_REDUCE, "all_reduce", OPERANDS, 1, 1, ("y", "x"), IN0, 0, ALL_REDUCE,                    \
      TPU_ATTR_REDUCE | TPU_ATTR_GROUP, TPU_ATTR_REDUCE, ICI, 0, chip)                             \
    X(COLLECTIVE_PERMUTE, "collective_permute", OPERANDS, 1, 1, ("y", "x"), NONE, 0, PERMUTE,      \
      TPU_ATTR_SHIFT | TPU_ATTR_GROUP, TPU_ATTR_SHIFT | TPU_ATTR_GROUP, ICI, 0, chip)              \
    X(VAR_ADD, "var_add", VAR_IMM, 0, 0, (NULL), NONE, 0, ANY, TPU_ATTR_VAR | TPU_ATTR_IMM, 0,     \
      CTRL, 0, var_add)                                                                            \
    X(LOOP_BEGIN, "loop_begin", LOOP, 0, 0, (NULL), NONE, 0, ANY, TPU_ATTR_VAR, 0, CTRL, 0,        \
      chip)                                                                                        \
    X(LOOP_END, "loop_end", LOOP_END, 0, 0, (NULL), NONE, 0, ANY, 0, 0, CTRL, 0, chip)             \
    X(HALO, "halo", OPERANDS, 1, 1, ("y", "x"), NONE, 0, HALO, TPU_ATTR_WINDOW, TPU_ATTR_WINDOW,   \
      ICI, 0, chip)                                                                                \
    X(HALO_GRAD, "halo_grad", OPERANDS, 1, 1, ("dx", "dy"), NONE, 0, HALO, TPU_ATTR_WINDOW,        \
      TPU_ATTR_WINDOW, ICI, 0, chip)                                                               \
    X(ROW_MASK, "row_mask", OPERANDS, 1, 0, ("y"), NONE, 0, ROW_MASK, TPU_ATTR_WINDOW,             \
      TPU_ATTR_WINDOW, VPU, 1, row_mask)                                                           \
    X(SOFTMAX_XENT_W, "softmax_xent_w", OPERANDS, 2, 3,                                            \
      ("loss", "dlogits", "logits", "labels", "weights"), NONE, 0, SOFTMAX_XENT, 0, 0, VPU, 10,    \
      softmax_xent)                                                                                \
    X(MSE_W, "mse_w", OPERANDS, 2, 4, ("loss", "dpred", "pred", "target", "mask", "weights"),      \
      NONE, 0, MSE, 0, 0, VPU, 5, mse)

enum tpu_opcode {
#define TPU__OP_ENUM(e, name, syntax, n_out, n_in, roles, alias, rmw, rule, attrs, required,       \
                     unit, vpu_ops, sem)                                                           \
    TPU_OP_##e,
    TPU_OP_TABLE(TPU__OP_ENUM)
#undef TPU__OP_ENUM
        TPU_OP_COUNT
};

#define TPU_OP_MAX_OUT 3
#define TPU_OP_MAX_IN 4
#define TPU_NO_BUF UINT32_MAX

enum tpu_reduce_kind {
    TPU_REDUCE_SUM = 0,
    TPU_REDUCE_MEAN = 1,
};

/* The cores a collective_permute or an all_reduce runs over. */
enum tpu_permute_group {
    TPU_GROUP_REPLICAS = 0,      /* the cores with the same logical index in every replica,
                                    in replica order: cross-replica */
    TPU_GROUP_REPLICA_CORES = 1, /* the cores of one replica, in logical core order */
};

/* An NHWC image and a sliding window over it: the window ops' attribute group (one bit,
 * TPU_ATTR_WINDOW, for all its fields; the text form states every field). Output position
 * (n, oy, ox) and window offset (ky, kx) read input row iy = oy*sh + ky - pt and column
 * ix = ox*sw + kx - pl; positions outside [0, h) x [0, w) are padding. A window holds
 * kh*kw*c < 2^32-1 elements (the verifier's rule WINDOW; the ops index them in 32 bits). */
struct tpu_window {
    uint32_t h, w, c;  /* the input image per example */
    uint32_t kh, kw;   /* window (kernel or pool) size */
    uint32_t sh, sw;   /* strides */
    uint32_t pt, pl;   /* padding before the first row / column */
    uint32_t ho, wo;   /* output positions */
    uint32_t parts;    /* row partitioning: the image's rows are split over this many cores
                          of a replica (P = the device's cores_per_replica); 0 or 1: not
                          partitioned (the text form prints it only when > 1, and the
                          builder stores 1 as 0). See "Row partitioning" below. */
};

/* Row partitioning (a window with parts = P >= 2). An image of h rows is split over the P
 * logical cores of a replica: core k holds global rows [k*hc, k*hc + hc), hc = ceil(h / P),
 * its rows >= h being padding that hold 0 (the "local image", N*hc*w*c elements). It
 * computes the global output rows [k*hoc, k*hoc + hoc), hoc = ceil(ho / P), rows >= ho being
 * padding (the "local out", N*hoc*wo rows). To do so it reads the "ext image" of
 * E = (hoc - 1)*sh + kh rows, ext row j holding global row r0(k) + j, r0(k) = k*hoc*sh - pt
 * (negative for k = 0 when pt > 0), N*E*w*c elements; the `halo` op makes it from the local
 * images and `halo_grad` sums an ext-image gradient back into local images.
 *
 * The window ops with parts >= 2 take the ext image where the unpartitioned op takes the
 * image (im2col's, max_pool's, avg_pool's, max_pool_grad's and conv2d_grad_filter's x;
 * col2im's y, avg_pool_grad's and max_pool_grad's dx, conv2d_grad_input's dx) and the local
 * out where it takes the window side (y, dy, cols). Each computes what the unpartitioned op
 * computes for the core's global output rows < ho, in the same order (forward values are
 * those rows of the unpartitioned op bit for bit); a position whose global row is outside
 * [0, h) is padding as before, whatever the ext row holds. Forward ops write 0 to output
 * rows >= ho; the backward ops ignore dy (cols) rows >= ho; the adjoints write 0 to ext rows
 * outside [0, h). conv2d_grad_filter's dw is the core's partial sum (all-reduce it over the
 * replica's cores, all_reduce group=replica_cores). tpu_window_part gives the sizes. */
struct tpu_window_part {
    uint32_t parts; /* P: 1 when the window is not partitioned */
    uint64_t hc;    /* image rows per core: ceil(h / P) (h when P = 1) */
    uint64_t hoc;   /* output rows per core: ceil(ho / P) (ho when P = 1) */
    uint64_t ext;   /* rows of the ext image: (hoc - 1)*sh + kh (h when P = 1: the image) */
};
/* Fills *out for window w (any values: fields are computed in 64 bits, a zero ho or sh
 * gives ext = kh). */
void tpu_window_part(const struct tpu_window *w, struct tpu_window_part *out);
/* r0(k) = k*hoc*sh - pt: the global row of ext row 0 on logical core k (0 when P = 1: the
 * ext image is the image). */
int64_t tpu_window_ext_row0(const struct tpu_window *w, uint32_t k);

/* The optimizers' learning-rate schedules (tpu_lr_schedule_value gives the formulas); net.h's
 * tpu_train_spec uses them too. */
enum tpu_lr_schedule {
    TPU_SCHEDULE_CONSTANT = 0,
    TPU_SCHEDULE_STEP = 1,   /* lr * decay_rate^floor(step / decay_steps): Keras
                                ExponentialDecay with staircase=True */
    TPU_SCHEDULE_COSINE = 2, /* linear warm-up from 0 over warmup steps, then cosine from lr
                                down to lr * decay_rate over decay_steps (Keras CosineDecay
                                with warmup, alpha = decay_rate) */
    TPU_SCHEDULE_HOST = 3,   /* the rate the host sets between loops (Keras's
                                optimizer.learning_rate, LearningRateScheduler): the f32 whose
                                bits are the low 32 bits of the program variable lr_var (a
                                fresh load's 0 reads as alpha: tpu_lr_host_value); runtime.h
                                tpu_estimator_set_learning_rate */
};

/* Attributes; each op reads the ones its description above names (tpu_opcode_attrs), the
 * rest stay zero. */
struct tpu_op_attrs {
    bool trans_a, trans_b;  /* matmul */
    bool accumulate;        /* matmul, conv2d_grad_filter */
    uint8_t passes;         /* matmul and the conv2d ops with f32 inputs: 1, 3, 6 */
    int32_t axis;           /* reduce_*: 0 or 1 */
    int32_t reduce;         /* all_reduce: enum tpu_reduce_kind */
    int32_t shift;          /* collective_permute */
    int32_t group;          /* collective_permute, all_reduce: enum tpu_permute_group */
    bool core0;             /* infeed: only logical core 0 of each replica dequeues */
    uint32_t var;           /* var_add, adam, adamw, loop_begin, dropout_mask, a scheduled
                               sgd_momentum: a variable id */
    int64_t imm;            /* var_add; dropout_mask: the seed */
    struct tpu_window win;  /* the window ops: im2col ... avg_pool_grad, the conv2d ops, halo,
                               halo_grad, row_mask; dropout_mask (optional) */
    float alpha, beta, gamma, delta, eps;
    /* the learning-rate schedule of sgd_momentum, adam, adamw (one bit, TPU_ATTR_SCHEDULE,
     * for the five): enum tpu_lr_schedule, the warm-up and decay lengths in steps, and the
     * decay rate (step: the factor per decay_steps; cosine: the final fraction of alpha);
     * schedule=host reads none of those three but lr_var, the variable whose low 32 bits
     * are the rate's f32 bits (0 everywhere else) */
    int32_t schedule;
    uint32_t warmup, decay_steps;
    float decay_rate;
    uint32_t lr_var;
};

/* One bit per field of struct tpu_op_attrs, for tpu_opcode_attrs. */
enum tpu_op_attr_bits {
    TPU_ATTR_TRANS_A = 1u << 0,
    TPU_ATTR_TRANS_B = 1u << 1,
    TPU_ATTR_ACCUMULATE = 1u << 2,
    TPU_ATTR_PASSES = 1u << 3,
    TPU_ATTR_AXIS = 1u << 4,
    TPU_ATTR_REDUCE = 1u << 5,
    TPU_ATTR_SHIFT = 1u << 6,
    TPU_ATTR_GROUP = 1u << 7,
    TPU_ATTR_VAR = 1u << 8,
    TPU_ATTR_IMM = 1u << 9,
    TPU_ATTR_ALPHA = 1u << 10,
    TPU_ATTR_BETA = 1u << 11,
    TPU_ATTR_GAMMA = 1u << 12,
    TPU_ATTR_DELTA = 1u << 13,
    TPU_ATTR_EPS = 1u << 14,
    TPU_ATTR_WINDOW = 1u << 15, /* the whole of win */
    TPU_ATTR_SCHEDULE = 1u << 16, /* schedule, warmup, decay_steps, decay_rate, lr_var */
    TPU_ATTR_CORE0 = 1u << 17,
};

struct tpu_op {
    enum tpu_opcode code;
    uint32_t out[TPU_OP_MAX_OUT]; /* buffer ids, TPU_NO_BUF where unused */
    uint32_t in[TPU_OP_MAX_IN];
    struct tpu_op_attrs attrs;
};

/* The longest name of a program, buffer or variable, in characters (a NUL follows). */
#define TPU_PROGRAM_NAME_MAX 47

struct tpu_buffer_desc {
    char name[TPU_PROGRAM_NAME_MAX + 1];
    enum tpu_dtype dtype;
    enum tpu_buf_kind kind;
    uint32_t rows, cols;
};

struct tpu_program;

/* Creates an empty program named `name` (an identifier, as for buffers). The caller owns it;
 * free with tpu_program_destroy. Returns 0, TPU_EINVAL (bad name) or TPU_ENOMEM. */
int tpu_program_create(const char *name, struct tpu_program **out);
/* Frees the program and sets *p to NULL. Accepts NULL and *p == NULL. */
void tpu_program_destroy(struct tpu_program **p);

/* Adds a buffer; its id (0, 1, ...) goes to *id (may be NULL). Names are identifiers
 * ([A-Za-z_][A-Za-z0-9_.]*, at most 47 characters), unique across buffers and variables.
 * rows and cols are at least 1. Returns 0, TPU_EINVAL (name, dtype, kind, zero size),
 * TPU_ERANGE (byte size overflows 64 bits) or TPU_ENOMEM. The program copies the name. */
int tpu_program_add_buffer(struct tpu_program *p, const char *name, enum tpu_dtype dtype,
                           enum tpu_buf_kind kind, uint32_t rows, uint32_t cols, uint32_t *id,
                           struct tpu_diag *d);
/* Adds a device variable (int64, initially 0); name rules as for buffers. */
int tpu_program_add_var(struct tpu_program *p, const char *name, uint32_t *id,
                        struct tpu_diag *d);
/* Appends an op (copied). Checks only that the opcode exists and that the buffer ids of the
 * operands the op has (tpu_opcode_n_out/_n_in) and its variable (if it reads `var`) exist;
 * the unused slots of out[] and in[] are stored as TPU_NO_BUF whatever they held, and a
 * window's parts = 1 as 0 (both mean unpartitioned). Everything
 * else is checked by tpu_program_verify. Returns 0, TPU_EINVAL or TPU_ENOMEM. */
int tpu_program_add_op(struct tpu_program *p, const struct tpu_op *op, struct tpu_diag *d);

/* Fills *op for `code`: every buffer id TPU_NO_BUF, every attribute zero except passes = 1
 * for matmul. */
void tpu_op_init(struct tpu_op *op, enum tpu_opcode code);

/* Convenience builders for the common ops (all append; return 0 or a TPU_E code).
 * tpu_program_binary takes any op with one output and two inputs and no attributes it must
 * set (add, sub, mul, max, relu_grad, classify_count); tpu_program_unary any op with one
 * output and one input (attributes zero: set them with tpu_program_add_op instead where they
 * matter). Other codes give TPU_EINVAL. */
int tpu_program_matmul(struct tpu_program *p, uint32_t y, uint32_t a, uint32_t b, bool trans_a,
                       bool trans_b, unsigned passes, bool accumulate);
int tpu_program_binary(struct tpu_program *p, enum tpu_opcode code, uint32_t y, uint32_t a,
                       uint32_t b);
int tpu_program_unary(struct tpu_program *p, enum tpu_opcode code, uint32_t y, uint32_t x);

/* Accessors. Pointers stay valid until the program is changed or destroyed; an id or index
 * out of range gives NULL. */
const char *tpu_program_name(const struct tpu_program *p);
size_t tpu_program_n_buffers(const struct tpu_program *p);
const struct tpu_buffer_desc *tpu_program_buffer(const struct tpu_program *p, uint32_t id);
size_t tpu_program_n_vars(const struct tpu_program *p);
const char *tpu_program_var_name(const struct tpu_program *p, uint32_t id);
size_t tpu_program_n_ops(const struct tpu_program *p);
const struct tpu_op *tpu_program_op(const struct tpu_program *p, size_t i);
/* Looks up a buffer or variable by name: 0 and the id, or TPU_ENOTFOUND. */
int tpu_program_find_buffer(const struct tpu_program *p, const char *name, uint32_t *id);
int tpu_program_find_var(const struct tpu_program *p, const char *name, uint32_t *id);

/* What a program takes of a core's HBM when temps share memory as a compiler's buffer
 * assignment lets them: params live throughout; a temp lives from the op that first writes
 * it to the last op that reads (or writes) it, in program order, within one pass of the loop
 * body (the verifier's D3 forbids reading a body temp across iterations); a temp written
 * before the loop and read inside it lives to the loop's end (every iteration reads it); a
 * matmul with accumulate reads its output, so it keeps it live; a temp no op writes takes
 * nothing. Temps live at the same op cannot share memory; temps whose lives do not overlap
 * can. The bytes live at op i are the params plus the temps whose lives contain i; the
 * program needs the most of that over its ops. Every live temp is counted in HBM, also one
 * the native chip keeps in on-chip memory for speed (a timing matter, device.h), so the
 * figure is what the program can be sure to fit in. */
struct tpu_program_memory {
    uint64_t param_bytes;      /* every param */
    uint64_t temp_bytes;       /* every temp, summed (what no reuse at all would take) */
    uint64_t temp_peak_bytes;  /* the most temp bytes live at one op */
    size_t peak_op;            /* the first op where temp_peak_bytes are live (never a loop
                                  marker); SIZE_MAX when no temp is ever live */
    uint64_t hbm_bytes;        /* param_bytes + temp_peak_bytes (saturating): the need */
};
/* Fills *out for p (any program; one whose loops are not closed or nested is measured as if
 * every op ran once in order). Returns 0 or TPU_ENOMEM. */
int tpu_program_memory(const struct tpu_program *p, struct tpu_program_memory *out);

/* Checks that the program is well formed for a chip: ids valid, shapes and dtypes agree for
 * every op, temps written before read and written once per pass (matmul with accumulate
 * excepted), at most one loop and properly closed, and the program fits in one core's share
 * of HBM (tpu_program_memory's hbm_bytes). The message names the op by index and its text
 * form. cfg may be NULL (no memory check and no check of the matrix unit's data types).
 * Returns 0, TPU_EINVAL (structure, attribute, dataflow), TPU_ESHAPE (shapes and dtypes),
 * TPU_EUNSUPPORTED (a dtype the chip's matrix unit lacks) or TPU_ERANGE (memory). */
int tpu_program_verify(const struct tpu_program *p, const struct tpu_chip_config *cfg,
                       struct tpu_diag *d);

/* Text form: prints the program so that tpu_program_parse gives it back op for op (for any
 * program whose loops are closed and not nested, and whose ops set only the attributes they
 * read). Returns 0, TPU_EIO or TPU_ENOMEM. */
int tpu_program_print(const struct tpu_program *p, FILE *f);
/* Prints into a malloc'd string the caller frees (*out NULL on failure). */
int tpu_program_to_string(const struct tpu_program *p, char **out);
/* Parses the text form; `origin` names it in messages ("file:line:col: ..."; NULL gives
 * "<text>"). The caller owns *out (left NULL on failure). Parsing does not verify: call
 * tpu_program_verify. Returns 0, TPU_EPARSE or TPU_ENOMEM. */
int tpu_program_parse(const char *text, const char *origin, struct tpu_program **out,
                      struct tpu_diag *d);

/* One op's line of the text form, without indentation ("h = matmul x, w1 trans_b"), into
 * buf (always NUL-terminated; a line longer than size ends in "..."). Returns 0 or TPU_EINVAL
 * (i out of range, or size < 4). */
int tpu_program_format_op(const struct tpu_program *p, size_t i, char *buf, size_t size);

/* Op table queries. Names are static storage; an unknown code gives "unknown" and zeros. */
const char *tpu_opcode_name(enum tpu_opcode code);
/* 0 and the code, or TPU_ENOTFOUND. */
int tpu_opcode_parse(const char *name, enum tpu_opcode *out);
unsigned tpu_opcode_n_out(enum tpu_opcode code);
unsigned tpu_opcode_n_in(enum tpu_opcode code);
/* The role name of output (is_output) or input i, as in the list above ("a", "dlogits"), or
 * NULL if the op has no such operand. */
const char *tpu_opcode_operand_name(enum tpu_opcode code, bool is_output, unsigned i);
/* The attributes the op reads: TPU_ATTR_* bits. */
unsigned tpu_opcode_attrs(enum tpu_opcode code);
/* Whether the op is a collective: it occupies the interconnect (its table row's unit is ICI)
 * and involves other cores. */
bool tpu_opcode_is_collective(enum tpu_opcode code);

/* The learning rate an optimizer op with attributes `a` uses when its step variable holds
 * `step_var` (1 at the first update: the step's var_add runs before the updates). With
 * s = step_var - 1 (Keras's 0-based iteration; s < 0 counts as 0):
 *   constant  alpha
 *   step      alpha * decay_rate^floor(s / decay_steps)
 *   cosine    s < warmup: alpha * s / warmup; else alpha * (decay_rate + (1 - decay_rate) *
 *             0.5 * (1 + cos(pi * min(s - warmup, decay_steps) / decay_steps)))
 * computed in double (the power by binary exponentiation, cos from the C library) and
 * rounded once to float. decay_steps 0 (which the verifier rejects for step and cosine)
 * gives alpha, and so does schedule host (whose rate is in a variable: tpu_lr_host_value).
 * The ops use this function, and the host may call it to log the rate. */
float tpu_lr_schedule_value(const struct tpu_op_attrs *a, int64_t step_var);

/* The rate of an op with schedule=host when its variable lr_var holds `lr_var_value`: the
 * f32 whose bits are the value's low 32 bits, or alpha when those bits are 0 (a fresh
 * program's variables are 0). The ops use this function; the host writes the variable with
 * tpu_lr_host_bits. */
float tpu_lr_host_value(const struct tpu_op_attrs *a, int64_t lr_var_value);
/* The variable value that makes a schedule=host op use rate `lr`: its f32 bits in the low 32
 * bits, the high bits 0 (for tpu_device_set_var). A rate of +0 gives -0's bits (0x80000000),
 * the same rate, since bits 0 read as alpha. */
int64_t tpu_lr_host_bits(float lr);

/* One element of dropout_mask's mask: 1 / (1 - rate) if u >= rate, else 0, where u in
 * [0, 1) is the top 24 bits of a splitmix64 hash of (seed, step, index) over 2^24
 * (sim/ops/ops_train_aux.c gives the hash). `index` is the element's global index: on the
 * core of replica r with an n-element mask, element i has index r * n + i. No replica key
 * enters the hash, so when the replicas take the global batch in order (replica r the rows
 * r*B to r*B+B-1), R replicas of batch B draw the very masks one replica of batch R*B
 * draws. The same arguments give the same value on every host and thread count, so a host
 * can reproduce a mask exactly. */
float tpu_dropout_mask_value(uint64_t seed, int64_t step, uint64_t index, float rate);

/* "param", "temp"; "unknown" otherwise. */
const char *tpu_buf_kind_name(enum tpu_buf_kind k);
/* rows * cols * element size (the builder rejects buffers whose size would overflow). */
uint64_t tpu_buffer_bytes(const struct tpu_buffer_desc *b);

#ifdef __cplusplus
}
#endif
#endif
