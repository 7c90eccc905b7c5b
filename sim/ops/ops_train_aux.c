/* The training ops of regression models and regularization that one core computes: the
 * mean-squared-error loss and its gradient (also with row weights), the labelled-row count, and the dropout mask;
 * and the public value functions the ops and the host share: the learning-rate schedule
 * (tpu_lr_schedule_value), the host-set rate's variable (tpu_lr_host_value and
 * tpu_lr_host_bits) and one element of a dropout mask (tpu_dropout_mask_value). Not
 * softmax_xent, classify_count or the optimizers themselves (ops_train.c), and not timing.
 *
 * Arithmetic is IEEE-754 binary32, round to nearest even, one rounding per operation as
 * written, nothing fused, rows in index order, as in ops_train.c.
 *
 * mse           out loss [1][1], dpred [B][K]; in pred [B][K], target [B][K] f32, mask int32
 *               [B][1]. A row with mask < 0 is padding. Once: c = (alpha * 2) / (float)K.
 *               Per real row:
 *                 s = +0; for k = 0 .. K-1: e[k] = pred[k] - target[k]; s = s + e[k] * e[k]
 *                 row = s / (float)K;  dpred[k] = c * e[k]
 *               a padding row has dpred = +0. total = +0; total = total + row over the real
 *               rows in order; loss = alpha * total. (K as float is exact up to 2^24.)
 * mse_w         as mse with a fourth input, weights f32 [B][1] (w), taking alpha's place
 *               row by row: for real row i, c = (w[i] * 2) / (float)K (so w[i] == alpha gives
 *               mse's dpred bits), dpred[k] = c * e[k], total = total + w[i] * row, and
 *               loss = total.
 * count_rows    out y [1][2]; in labels int32 [B][1]: y = (0, rows with label >= 0) as
 *               floats (exact up to 2^24 rows). The first count is 0 since a regression
 *               model has no correct-class count; the pair matches classify_count's.
 * dropout_mask  out mask [r][c] f32; no inputs. rate = alpha in [0, 1) (else TPU_ERANGE),
 *               seed = imm as uint64, step = vars[var], r = the core's replica, n = the
 *               mask's element count. Element i (row-major) = tpu_dropout_mask_value(seed,
 *               step, r * n + i, rate): the element's index in the global batch when the
 *               replicas take the global batch in order (replica r rows r*B .. r*B+B-1, as
 *               a per-host input does, host/shard/plan.c), so a run on R replicas of batch
 *               B draws the masks of a run on one replica of batch R*B.
 *
 * The mask's hash. mix(z) is splitmix64's step and output function (tpu__mix64 in
 * common/rng.h):
 *     z = z + 0x9e3779b97f4a7c15; z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
 *     z = (z ^ (z >> 27)) * 0x94d049bb133111eb; mix = z ^ (z >> 31)     (uint64, wrapping)
 * key = mix(mix(seed) ^ (uint64)step); h = mix(key ^ index);
 * u = (h >> 40) * 2^-24 (exact in f32, in [0, 1)); value = u >= rate ? 1 / (1 - rate) : +0
 * with 1 / (1 - rate) in f32 (two roundings). It is counter-based: each element's value
 * depends only on its arguments, so it is the same for any thread count, order or resume
 * point, and the kept fraction is 1 - rate to within 2^-24 in expectation. */
#include <math.h>
#include <string.h>

#include "ops_int.h"
#include "rng.h"
#include "util.h"

/* ---- the public value functions ----------------------------------------------------------- */

float tpu_lr_schedule_value(const struct tpu_op_attrs *a, int64_t step_var)
{
    if (a->schedule == TPU_SCHEDULE_CONSTANT || a->decay_steps == 0 ||
        (a->schedule != TPU_SCHEDULE_STEP && a->schedule != TPU_SCHEDULE_COSINE))
        return a->alpha;
    const uint64_t s = step_var > 1 ? (uint64_t)step_var - 1 : 0;
    const double alpha = a->alpha, rate = a->decay_rate, n = a->decay_steps;
    if (a->schedule == TPU_SCHEDULE_STEP)
        return (float)(alpha * tpu__ops_pow_steps(rate, s / a->decay_steps));
    if (s < a->warmup)
        return (float)(alpha * (double)s / (double)a->warmup);
    const uint64_t past = s - a->warmup;
    const double x = past < a->decay_steps ? (double)past : n;
    const double pi = 3.14159265358979323846;
    const double c = 0.5 * (1.0 + cos(pi * x / n));
    return (float)(alpha * (rate + (1.0 - rate) * c));
}

float tpu_lr_host_value(const struct tpu_op_attrs *a, int64_t lr_var_value)
{
    const uint32_t bits = (uint32_t)((uint64_t)lr_var_value & 0xffffffffu);
    if (bits == 0)
        return a->alpha;
    float lr;
    memcpy(&lr, &bits, sizeof lr);
    return lr;
}

int64_t tpu_lr_host_bits(float lr)
{
    uint32_t bits;
    memcpy(&bits, &lr, sizeof bits);
    /* +0's bits would read as "no rate set": -0 is the same rate (p - -0 * v = p - 0) */
    return (int64_t)(bits ? bits : 0x80000000u);
}

float tpu_dropout_mask_value(uint64_t seed, int64_t step, uint64_t index, float rate)
{
    const uint64_t key = tpu__mix64(tpu__mix64(seed) ^ (uint64_t)step);
    const uint64_t h = tpu__mix64(key ^ index);
    const float u = (float)(h >> 40) * 0x1p-24f;
    return u >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}

/* ---- the ops --------------------------------------------------------------------------------- */

int tpu__ops_mse(const struct tpu_op *op, const struct tpu__op_ctx *cx, struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *loss = &bufs[op->out[0]], *dp = &bufs[op->out[1]];
    const struct tpu__bufmem *pred = &bufs[op->in[0]], *tgt = &bufs[op->in[1]];
    const struct tpu__bufmem *mask = &bufs[op->in[2]];
    const bool weighted = op->code == TPU_OP_MSE_W;
    int rc = tpu__ops_check_buf(d, op, "pred", pred, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "target", tgt, TPU_F32, pred->rows, pred->cols);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "mask", mask, TPU_INT32, pred->rows, 1);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "loss", loss, TPU_F32, 1, 1);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "dpred", dp, TPU_F32, pred->rows, pred->cols);
    if (!rc && weighted)
        rc = tpu__ops_check_buf(d, op, "weights", &bufs[op->in[3]], TPU_F32, pred->rows, 1);
    if (rc)
        return rc;
    const size_t rows = pred->rows, cols = pred->cols;
    const float alpha = op->attrs.alpha, kf = (float)cols;
    const float *wv = weighted ? bufs[op->in[3]].data : NULL; /* [rows][1] */
    const float c0 = (alpha * 2.0f) / kf;
    const float *pv = pred->data, *tv = tgt->data; /* [rows][cols] */
    const int32_t *mv = mask->data;                /* [rows][1] */
    float *gv = dp->data;                          /* [rows][cols] */
    float total = 0.0f;
    for (size_t i = 0; i < rows; i++) {
        const float *pr = pv + i * cols, *tr = tv + i * cols;
        float *g = gv + i * cols;
        if (mv[i] < 0) {
            for (size_t k = 0; k < cols; k++)
                g[k] = 0.0f;
            continue;
        }
        /* the row's gradient scale: mse's c, or mse_w's from the row's weight */
        const float c = wv ? (wv[i] * 2.0f) / kf : c0;
        float s = 0.0f;
        for (size_t k = 0; k < cols; k++) {
            const float e = pr[k] - tr[k];
            s = s + e * e;
            g[k] = c * e;
        }
        total = total + (wv ? wv[i] * (s / kf) : s / kf);
    }
    *(float *)loss->data = wv ? total : alpha * total;
    return 0;
}

int tpu__ops_count_rows(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                        struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *lab = &bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "labels", lab, TPU_INT32, TPU__OPS_ANY, 1);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, 1, 2);
    if (rc)
        return rc;
    const int32_t *lv = lab->data; /* [rows][1] */
    uint64_t valid = 0;
    for (size_t i = 0; i < lab->rows; i++)
        valid += lv[i] >= 0;
    float *yv = y->data; /* [1][2] */
    yv[0] = 0.0f;
    yv[1] = (float)valid;
    return 0;
}

/* dropout_mask with a partitioned window (program.h): logical core k's mask holds its rows
 * of the unpartitioned mask of N*h*w*c elements, padding rows 0. */
static int partitioned_mask(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                            uint64_t seed, int64_t step, float rate, struct tpu_diag *d)
{
    struct tpu__bufmem *m = &cx->bufs[op->out[0]];
    const struct tpu_window *w = &op->attrs.win;
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    const size_t row = (size_t)w->w * w->c, count = tpu__ops_count(m);
    size_t per = 0, full = 0;
    if (cx->part >= wp.parts || row == 0 || !tpu__mul_size((size_t)wp.hc, row, &per) ||
        per == 0 || count % per != 0 || !tpu__mul_size(count / per, (size_t)w->h * row, &full))
        return tpu__fail(d, TPU_ESHAPE,
                         "dropout_mask: mask has %zu elements, parts=%u, logical core %u: a "
                         "partitioned mask has N*hc*w*c elements (hc = ceil(h/parts) = %llu, "
                         "w = %u, c = %u) on a device with parts cores per replica; verify "
                         "the program",
                         count, (unsigned)w->parts, (unsigned)cx->part,
                         (unsigned long long)wp.hc, (unsigned)w->w, (unsigned)w->c);
    const size_t n = count / per;
    const uint64_t first = (uint64_t)cx->replica * full; /* the replica's first index */
    float *mv = m->data; /* [N][hc][w][c] */
    for (size_t e = 0; e < n; e++)
        for (size_t i = 0; i < wp.hc; i++) {
            const uint64_t g = (uint64_t)cx->part * wp.hc + i; /* the global row */
            float *r = mv + (e * wp.hc + i) * row;
            const uint64_t base = first + ((uint64_t)e * w->h + g) * row;
            for (size_t t = 0; t < row; t++)
                r[t] = g < w->h ? tpu_dropout_mask_value(seed, step, base + t, rate) : 0.0f;
        }
    return 0;
}

int tpu__ops_dropout_mask(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                          struct tpu_diag *d)
{
    struct tpu__bufmem *m = &cx->bufs[op->out[0]];
    int rc = tpu__ops_check_buf(d, op, "mask", m, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (rc)
        return rc;
    const float rate = op->attrs.alpha;
    if (!(rate >= 0.0f && rate < 1.0f))
        return tpu__fail(d, TPU_ERANGE,
                         "dropout_mask: the rate (alpha) is %g but must lie in [0, 1); use a "
                         "rate such as 0.5",
                         (double)rate);
    const uint64_t seed = (uint64_t)op->attrs.imm;
    const int64_t step = cx->vars[op->attrs.var];
    const size_t n = tpu__ops_count(m);
    float *mv = m->data; /* [rows][cols] */
    const struct tpu_window *w = &op->attrs.win;
    if (w->parts > 1)
        return partitioned_mask(op, cx, seed, step, rate, d);
    const uint64_t first = (uint64_t)cx->replica * n; /* this replica's first global index */
    for (size_t i = 0; i < n; i++)
        mv[i] = tpu_dropout_mask_value(seed, step, first + i, rate);
    return 0;
}
