/* Cycle costs of the chip's units (timing.h). Every cost is a closed form of the chip's
 * configuration and the sizes involved; nothing here depends on values or on host time.
 *
 * Conventions. Bandwidths are converted to cycles at the core clock and rounded up: a
 * transfer of B bytes at W bytes/s takes ceil(B * f / W) cycles, f the clock in Hz. A chip's
 * HBM bandwidth is shared equally by its cores; its host link likewise carries both
 * directions at full rate (PCIe is full duplex) but one transfer at a time per direction.
 *
 * Figures that the published sources do not give are assumptions, named here:
 *   - vector-unit pipeline latency: TPU__VPU_LATENCY_CYCLES (8) per op;
 *   - ALU operations per element of each vector op (the op table's vpu_ops column, reasons
 *     below), counted as a compiler would lower them: one per add/mul/compare/select, four
 *     for exp and log (range reduction and a short polynomial), a divide or reciprocal
 *     square root counts four;
 *   - on-chip exchange between the cores of one chip runs at the chip's HBM bandwidth.
 */
#include <math.h>

#include "timing.h"
#include "tpusim/gemm.h"
#include "util.h"

static uint64_t bytes_to_cycles(const struct tpu_chip_config *cfg, double bytes,
                                double bytes_per_s)
{
    if (bytes <= 0)
        return 0;
    return (uint64_t)ceil(bytes * cfg->clock_mhz * 1e6 / bytes_per_s);
}

static uint64_t ns_to_cycles(const struct tpu_chip_config *cfg, double ns)
{
    return (uint64_t)ceil(ns * cfg->clock_mhz * 1e-3);
}

uint64_t tpu__dma_cycles(const struct tpu_chip_config *cfg, uint64_t bytes)
{
    double per_core = cfg->hbm_gbytes_per_s * 1e9 / cfg->cores_per_chip;
    return bytes_to_cycles(cfg, (double)bytes, per_core);
}

uint64_t tpu__host_link_share_cycles(const struct tpu_chip_config *cfg, uint64_t bytes)
{
    return ns_to_cycles(cfg, cfg->host_link_latency_ns) +
           bytes_to_cycles(cfg, (double)bytes,
                           cfg->host_link_gbytes_per_s * 1e9 / cfg->cores_per_chip);
}

/* The op table's `unit` and `vpu_ops` columns (include/tpusim/program.h). The vector unit's
 * counts are ALU operations per element as a compiler would lower the op: add, sub, mul,
 * max, relu, convert, reduce_sum, reduce_max 1; scale 2 (multiply, add); quantize 2
 * (multiply, round and saturate); relu_grad 2 (compare, select); classify_count 2
 * (compare-max, select index); exp 4; sgd_momentum 6 (g + gamma p (2), beta v + g (2),
 * p - alpha v (2)); softmax_xent 10 (max, sub, exp (4), sum, scale by 1/sum (mul), onehot
 * sub, alpha mul, plus the row's log, amortised); adam 22 (g (2), m (3), v (4), bias
 * corrections (2), sqrt (4), add eps, divide (4), mul alpha and subtract (2)); adamw 22 (m
 * (3), v (4), bias corrections (2), sqrt (4), add eps, divide (4), gamma * param and its add
 * (2), mul lr and subtract (2); a schedule's rate is computed once per op, not per element);
 * rsqrt 5 (add eps, reciprocal square root 4); mse 5 (sub, square, sum, scale the gradient,
 * select for padding rows; the row's divide by K amortised); count_rows 2 (compare, add);
 * softmax_xent_w 10 and mse_w 5, as their unweighted forms (the row's weight takes alpha's
 * place in the same multiply; the loss's one product per row is amortised);
 * dropout_mask 14 (xor of the key and the index, splitmix64's mix 9: add, then three
 * shift-xor pairs and two multiplies, each 64-bit operation counted as one; shift and
 * convert to float 2, compare with the rate, select). These ops sweep their largest
 * operand (mse: pred; count_rows: labels; dropout_mask: its mask).
 *
 * The window ops (program.h) count as follows. im2col, col2im and reshape sweep their
 * largest operand like the other vector ops, 1 op per element: im2col and reshape are copies
 * through the vector unit (a select for the padding), col2im one add per cols element. The
 * pooling ops sweep windows, not operands, so tpu__op_cost counts them itself over W =
 * N*ho*wo*c*kh*kw window elements (every window counted whole: the unit masks the padded
 * lanes rather than skipping them), with vpu_ops per window element and some per output or
 * per image element: max_pool W * 1 (a max); avg_pool W * 1 (an add) + 4 per output (the
 * divide by the count); max_pool_grad W * 2 (the max, then the compare that finds its first
 * position) + 1 per output (the add into dx) + 1 per dx element (clearing dx);
 * avg_pool_grad W * 1 (an add) + 4 per output (dy / count) + 1 per dx element.
 * A row-partitioned window op (parts >= 2) is counted the same way over its own buffers:
 * the local out's N*hoc*wo rows (padding rows included: the unit sweeps them) and the ext
 * image's elements; a partitioned conv2d op's GEMM likewise has M = N*hoc*wo rows.
 * row_mask sweeps its output (1 op per element: a compare-select). */
static const struct {
    uint8_t unit; /* enum tpu_unit */
    uint8_t vpu_ops;
} op_timing[TPU_OP_COUNT] = {
#define TPU__OP_TIMING(e, name, syntax, n_out, n_in, roles, alias, rmw, rule, attrs, required, \
                       unit_, vpu_ops_, sem)                                                   \
    [TPU_OP_##e] = {TPU_UNIT_##unit_, vpu_ops_},
    TPU_OP_TABLE(TPU__OP_TIMING)
#undef TPU__OP_TIMING
};

enum tpu_unit tpu__op_unit(enum tpu_opcode code)
{
    if ((unsigned)code >= TPU_OP_COUNT)
        return TPU_UNIT_CTRL;
    return (enum tpu_unit)op_timing[code].unit;
}

unsigned tpu__vpu_ops_per_element(enum tpu_opcode code)
{
    return (unsigned)code < TPU_OP_COUNT ? op_timing[code].vpu_ops : 0;
}

uint64_t tpu__vpu_cycles(const struct tpu_chip_config *cfg, enum tpu_opcode code,
                         uint64_t elements)
{
    /* cycles = ceil(elements * ops / (sublanes * lanes * alus)) + latency */
    uint64_t width = (uint64_t)cfg->vector_sublanes * cfg->vector_lanes *
                     cfg->vector_alus_per_lane;
    uint64_t ops = elements * tpu__vpu_ops_per_element(code);
    return tpu__ceil_div_u64(ops, width) + TPU__VPU_LATENCY_CYCLES;
}

uint64_t tpu__matmul_cycles(const struct tpu_chip_config *cfg, uint64_t m, uint64_t k,
                            uint64_t n, unsigned passes, uint64_t *mac_slots)
{
    /* The core's MXUs share the GEMM as gemm.h deals it over a chip's, with one core. */
    struct tpu_chip_config one = *cfg;
    one.cores_per_chip = 1;
    /* the verifier checked the dtype against the chip */
    one.mxu_dtypes = TPU_DTYPE_BIT(TPU_BF16) | TPU_DTYPE_BIT(TPU_INT8);
    struct tpu_gemm_params p = {.m = m, .k = k, .n = n,
                                .dtype = passes > 1 ? TPU_F32 : TPU_BF16,
                                .passes = passes};
    struct tpu_gemm_timing t;
    if (tpu_gemm_time(&one, &p, &t, NULL) != 0) {
        *mac_slots = 0;
        return 0;
    }
    *mac_slots = t.cycles * (uint64_t)cfg->mxu_rows * cfg->mxu_cols * cfg->mxu_per_core;
    return t.cycles;
}

static bool window_pool(enum tpu_opcode code)
{
    return code == TPU_OP_MAX_POOL || code == TPU_OP_AVG_POOL || code == TPU_OP_MAX_POOL_GRAD ||
           code == TPU_OP_AVG_POOL_GRAD;
}

/* a * b and a + b, or UINT64_MAX where they overflow */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A pooling op's cycles (the counts and their reasons are in the comment on op_timing). */
static uint64_t pool_cycles(const struct tpu_chip_config *cfg, const struct tpu_program *prog,
                            const struct tpu_op *op)
{
    const struct tpu_window *w = &op->attrs.win;
    /* the output y (forward) or the input dy (gradients) is [N*ho*wo][c] */
    const bool grad = op->code == TPU_OP_MAX_POOL_GRAD || op->code == TPU_OP_AVG_POOL_GRAD;
    const struct tpu_buffer_desc *o = tpu_program_buffer(prog, grad ? op->in[0] : op->out[0]);
    /* saturating: an unverified program's window (kh = kw = 2^31) must not wrap to 0 cycles */
    const uint64_t outputs = (uint64_t)o->rows * o->cols;
    const uint64_t window = mul_sat(mul_sat(outputs, w->kh), w->kw);
    uint64_t ops = mul_sat(window, tpu__vpu_ops_per_element(op->code));
    if (op->code == TPU_OP_AVG_POOL || op->code == TPU_OP_AVG_POOL_GRAD)
        ops = add_sat(ops, mul_sat(4, outputs));
    if (op->code == TPU_OP_MAX_POOL_GRAD)
        ops = add_sat(ops, outputs);
    if (grad) {
        const struct tpu_buffer_desc *dx = tpu_program_buffer(prog, op->out[0]);
        ops = add_sat(ops, (uint64_t)dx->rows * dx->cols);
    }
    uint64_t width = (uint64_t)cfg->vector_sublanes * cfg->vector_lanes *
                     cfg->vector_alus_per_lane;
    return add_sat(tpu__ceil_div_u64(ops, width), TPU__VPU_LATENCY_CYCLES);
}

/* The GEMM a conv2d op does on the array (program.h: its values are those of this GEMM with
 * the patches im2col(x) as an operand), m x k x n with M = N*ho*wo windows, K = kh*kw*c
 * window elements and f filters:
 *   conv2d              y = patches * w           m = M, k = K, n = f
 *   conv2d_grad_input   dcols = dy * w^T          m = M, k = f, n = K (then col2im)
 *   conv2d_grad_filter  dw = patches^T * dy       m = K, k = M, n = f
 * Input 0 (x, dy, x) is the GEMM's left operand in each, so its dtype decides the passes as
 * for matmul's a. The cycles and MACs are that GEMM's (tpu__matmul_cycles); no cycles are
 * added for forming the patches or for grad_input's col2im. What this models: XLA's
 * convolution emitter forms the patches on chip from the streamed input, so a convolution
 * costs its GEMM on the MXU, and its HBM traffic is its real operands (x, w, y; dy, w, dx;
 * x, dy, dw) each moved once, as chip_exec.c streams any op's operands, the patches costing
 * no HBM bytes. What it leaves out: the patch formation's own work (address generation and
 * the shifts that feed the array), re-reads of input rows that several windows share when
 * they do not fit on chip, and col2im's adds (done in the accumulators' drain). */
static void conv_gemm(const struct tpu_program *prog, const struct tpu_op *op, uint64_t *m,
                      uint64_t *k, uint64_t *n)
{
    const struct tpu_window *w = &op->attrs.win;
    const uint64_t kk = (uint64_t)w->kh * w->kw * w->c;
    const struct tpu_buffer_desc *o = tpu_program_buffer(prog, op->out[0]);
    const struct tpu_buffer_desc *b = tpu_program_buffer(prog, op->in[1]);
    const struct tpu_buffer_desc *a = tpu_program_buffer(prog, op->in[0]);
    switch (op->code) {
    case TPU_OP_CONV2D: /* y [M][f] */
        *m = o->rows, *k = kk, *n = o->cols;
        return;
    case TPU_OP_CONV2D_GRAD_INPUT: /* dy [M][f] */
        *m = a->rows, *k = a->cols, *n = kk;
        return;
    default: /* conv2d_grad_filter: dy [M][f] */
        *m = kk, *k = b->rows, *n = b->cols;
        return;
    }
}

enum tpu_unit tpu__op_cost(const struct tpu_chip_config *cfg, const struct tpu_program *prog,
                           const struct tpu_op *op, uint64_t *cycles, uint64_t *mac_slots,
                           uint64_t *macs)
{
    *mac_slots = *macs = 0;
    const enum tpu_unit unit = tpu__op_unit(op->code);
    switch (unit) {
    case TPU_UNIT_MXU: { /* matmul: y[m][n] = op(a)[m][k] * op(b)[k][n]; the conv2d ops:
                          * their equivalent GEMM (conv_gemm) */
        const struct tpu_buffer_desc *a = tpu_program_buffer(prog, op->in[0]);
        const struct tpu_buffer_desc *b = tpu_program_buffer(prog, op->in[1]);
        uint64_t m = op->attrs.trans_a ? a->cols : a->rows;
        uint64_t k = op->attrs.trans_a ? a->rows : a->cols;
        uint64_t n = op->attrs.trans_b ? b->rows : b->cols;
        if (op->code != TPU_OP_MATMUL)
            conv_gemm(prog, op, &m, &k, &n);
        unsigned passes = a->dtype == TPU_F32 && op->attrs.passes > 1 ? op->attrs.passes : 1;
        *cycles = tpu__matmul_cycles(cfg, m, k, n, passes, mac_slots);
        *macs = m * k * n * passes;
        return unit;
    }
    case TPU_UNIT_CTRL: /* var_add */
        *cycles = 1;
        return unit;
    default:
        break;
    }
    if (window_pool(op->code)) {
        *cycles = pool_cycles(cfg, prog, op);
        return TPU_UNIT_VPU;
    }
    /* vector ops: the largest operand is the element count they sweep */
    uint64_t elements = 0;
    for (int i = 0; i < TPU_OP_MAX_IN; i++)
        if (op->in[i] != TPU_NO_BUF) {
            const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, op->in[i]);
            elements = tpu__max_u64(elements, (uint64_t)bd->rows * bd->cols);
        }
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] != TPU_NO_BUF) {
            const struct tpu_buffer_desc *bd = tpu_program_buffer(prog, op->out[i]);
            elements = tpu__max_u64(elements, (uint64_t)bd->rows * bd->cols);
        }
    *cycles = tpu__vpu_cycles(cfg, op->code, elements);
    return TPU_UNIT_VPU;
}

/* Factors n into `k` near-equal factors, smallest first (n = 8, k = 2: 2 x 4). */
static void factor(uint32_t n, uint32_t k, uint32_t *out)
{
    for (uint32_t i = 0; i < 3; i++)
        out[i] = 1;
    uint32_t rest = n;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t left = k - i;
        /* the largest divisor of rest not above rest^(1/left), so later factors stay >= */
        uint32_t target = (uint32_t)floor(pow((double)rest, 1.0 / left) + 1e-9);
        uint32_t f = 1;
        for (uint32_t c = target; c >= 1; c--)
            if (rest % c == 0) {
                f = c;
                break;
            }
        if (left == 1)
            f = rest;
        out[i] = f;
        rest /= f;
    }
}

void tpu__ici_dims(const struct tpu_chip_config *cfg, uint32_t n_chips,
                   struct tpu__torus_dims *out)
{
    out->n_chips = n_chips;
    out->dims[0] = out->dims[1] = out->dims[2] = 1;
    switch (cfg->ici_topology) {
    case TPU_TOPO_NONE:
        out->n_dims = 0;
        break;
    case TPU_TOPO_RING:
        out->n_dims = 1;
        out->dims[0] = n_chips;
        break;
    case TPU_TOPO_TORUS_2D:
        out->n_dims = 2;
        factor(n_chips, 2, out->dims);
        break;
    case TPU_TOPO_TORUS_3D:
        out->n_dims = 3;
        factor(n_chips, 3, out->dims);
        break;
    }
}

uint64_t tpu__all_reduce_cycles(const struct tpu_chip_config *cfg, uint32_t n_part,
                                uint32_t per_chip, uint64_t bytes)
{
    /* Two levels. On a chip, `per_chip` cores reduce-scatter and later all-gather through
     * on-chip memory: 2 (p-1)/p B at the chip's HBM bandwidth. Across chips, each dimension
     * of the torus (or the ring) runs a bidirectional ring all-reduce over the shard left
     * by the dimensions before it (B_i = B / (d_1 ... d_{i-1})), on the chip's links of that
     * dimension (links_per_chip / n_dims of them, both directions used):
     *     2 (d_i - 1) / d_i * B_i / (links_i * link bandwidth) + 2 (d_i - 1) * latency. */
    if (n_part <= 1 || bytes == 0)
        return 0;
    double b = (double)bytes;
    double t_s = 0;
    if (per_chip > 1)
        t_s += 2.0 * (per_chip - 1) / per_chip * b / (cfg->hbm_gbytes_per_s * 1e9);
    uint32_t chips_used = n_part / per_chip;
    uint64_t lat_cycles = 0;
    if (chips_used > 1 && cfg->ici_topology != TPU_TOPO_NONE) {
        struct tpu__torus_dims td;
        tpu__ici_dims(cfg, chips_used, &td);
        double links = (double)cfg->ici_links_per_chip / td.n_dims;
        double shard = b;
        for (uint32_t i = 0; i < td.n_dims; i++) {
            uint32_t dd = td.dims[i];
            if (dd <= 1)
                continue;
            t_s += 2.0 * (dd - 1) / dd * shard / (links * cfg->ici_gbytes_per_s_per_link * 1e9);
            lat_cycles += 2u * (dd - 1) * ns_to_cycles(cfg, cfg->ici_latency_ns);
            shard /= dd;
        }
    }
    return (uint64_t)ceil(t_s * cfg->clock_mhz * 1e6) + lat_cycles;
}

uint64_t tpu__permute_cycles(const struct tpu_chip_config *cfg, uint64_t bytes, int cross_chip)
{
    if (!cross_chip)
        return bytes_to_cycles(cfg, (double)bytes, cfg->hbm_gbytes_per_s * 1e9);
    return ns_to_cycles(cfg, cfg->ici_latency_ns) +
           bytes_to_cycles(cfg, (double)bytes, cfg->ici_gbytes_per_s_per_link * 1e9);
}

/* The halo ops (halo, halo_grad: the rows of a row-partitioned image that a core's windows
 * need from its neighbours, and their gradients back). Every core of the replica receives,
 * from each other core q, the rows of q it needs (halo: its ext rows that q holds; halo_grad:
 * q's ext-image gradient rows that are its own rows), B bytes per (receiver, sender) pair.
 * Each pair's transfer takes the path between the two cores, as collective_permute's does:
 * on one chip an on-chip copy at the chip's HBM bandwidth, B / HBM; across chips one ICI
 * hop, the link latency + B / (one link's bandwidth). A core's transfers from different
 * senders (its neighbours above and below) run at the same time on different links or
 * directions, and the op ends for every core of the replica when the slowest pair is done:
 *     cycles = max over pairs (receiver, sender != receiver, B > 0) of the pair's cycles,
 * 0 when nothing moves (P = 1, or 1x1 windows of stride 1 on an even split). The rows a core
 * holds itself are copied into its ext image at no cost (the copy overlaps the transfers).
 * Each core's ici_bytes counts the bytes it receives from the other cores, over either
 * path, as an all-reduce counts its bytes on every participant. An all_reduce over the
 * cores of one replica (group=replica_cores) keeps the all-reduce formula above with that
 * group's placement: per_chip and the chips used are the replica's. */
uint64_t tpu__halo_transfer_cycles(const struct tpu_chip_config *cfg, uint64_t bytes,
                                   bool other_chip)
{
    return bytes ? tpu__permute_cycles(cfg, bytes, other_chip) : 0;
}

uint64_t tpu__collective_cycles(const struct tpu_chip_config *cfg, enum tpu_opcode code,
                                uint32_t n_part, uint32_t per_chip, bool cross_chip,
                                uint64_t bytes)
{
    if (code == TPU_OP_ALL_REDUCE)
        return tpu__all_reduce_cycles(cfg, n_part, per_chip, bytes);
    return n_part > 1 ? tpu__permute_cycles(cfg, bytes, cross_chip) : 0; /* permute */
}

uint64_t tpu__stream_chunks(const struct tpu_chip_config *cfg, uint64_t bytes)
{
    uint64_t piece = cfg->vmem_bytes / 4;
    if (piece == 0)
        piece = 1;
    uint64_t n = tpu__ceil_div_u64(bytes, piece);
    if (n < 1)
        n = 1;
    return n > 256 ? 256 : n;
}
