/* The training ops one core computes: softmax cross-entropy (loss and its gradient), the
 * correct-prediction count, and the SGD-with-momentum, Adam and AdamW updates. Not the
 * elementwise ops (ops_vector.c), not matmul (ops.c), not mse, count_rows, dropout_mask and
 * the learning-rate schedules (ops_train_aux.c), and not the timing of any of them.
 *
 * Everything is IEEE-754 binary32, round to nearest even, one rounding per operation as
 * written below, nothing fused (-ffp-contract=off), subnormals kept. Rows are processed in
 * index order. max() is the `max` op's: (a > b or a is NaN) ? a : b. The only library
 * functions are expf and logf (softmax_xent) of the host's C library: their results are
 * deterministic on one machine and libm version but may differ in the last bit between
 * libms (glibc's are within one ulp), so softmax_xent is reproducible bit for bit on one
 * host, not promised across hosts. sqrtf is IEEE's correctly rounded square root, the same
 * everywhere, so sgd_momentum, adam and adamw with the constant schedule are bit-exact on
 * any IEEE host (a cosine schedule's rate uses the C library's cos).
 *
 * Learning rate. lr = alpha for schedule=constant (the variable is not read); for
 * schedule=host lr = tpu_lr_host_value(attrs, vars[lr_var]) (the f32 in the variable's low
 * 32 bits, alpha while they are 0; not finite is TPU_ERANGE); otherwise
 * lr = tpu_lr_schedule_value(attrs, t), t = vars[var] (t < 1 is TPU_ERANGE), once per op.
 *
 * softmax_xent  out loss [1][1], dlogits [rows][cols]; in logits [rows][cols] (x),
 *               labels int32 [rows][1] (l). Every label must be < cols (TPU_ERANGE
 *               otherwise, checked for all rows before anything is written); a negative
 *               label marks a padding row. Per row with l >= 0:
 *                 m = x[0]; m = max(x[j], m) for j = 1 .. cols-1
 *                 d = x[l] - m
 *                 s = +0; for j = 0 .. cols-1: e[j] = expf(x[j] - m); s = s + e[j]
 *                 row_loss = logf(s) - d
 *                 p[j] = e[j] / s;  p[l] = p[l] - 1;  dlogits[j] = alpha * p[j]
 *               A padding row has dlogits = +0 and no row_loss. Then
 *                 total = +0; total = total + row_loss for each non-padding row in order
 *                 loss = alpha * total
 *               (alpha is usually 1 / global batch size for a mean.) dlogits may be the
 *               logits buffer: each row's x[l] and max are read before the row is written.
 * softmax_xent_w  as softmax_xent with a third input, weights f32 [rows][1] (w), whose
 *               w[i] takes alpha's place in row i: dlogits[j] = w[i] * p[j] (the same
 *               multiply, so w[i] == alpha gives softmax_xent's bits), and
 *                 total = total + w[i] * row_loss for each non-padding row in order
 *                 loss = total
 * classify_count  out y [1][2]; in logits [rows][cols], labels int32 [rows][1].
 *               y = (number of rows whose prediction equals their label, number of rows
 *               with label >= 0), as floats (exact up to 2^24 rows). The prediction is the
 *               index of the largest logit, the lowest such index on ties; NaN logits are
 *               skipped, and a row of only NaNs predicts nothing (never correct). Labels
 *               must be < cols as for softmax_xent.
 * sgd_momentum  out param, velocity; in grad; all f32 of one shape. Per element:
 *                 g = grad + gamma * param;  v = beta * v + g;  param = param - lr * v
 *               (each product rounded, then the sum; gamma 0 is computed all the same).
 * adam          out param, m, v; in grad; all f32 of one shape. t = vars[var] (the step
 *               count, 1 for the first step; t < 1 is TPU_ERANGE). beta (b1) and delta (b2)
 *               must lie in [0, 1). Once per op, in double precision:
 *                 b^t by binary exponentiation: r = 1, x = b; for each bit of t from the
 *                 lowest: if it is set, r = r * x; then x = x * x (while bits remain)
 *                 c1 = (float)(1 - b1^t),  c2 = (float)(1 - b2^t)   (one rounding each)
 *               and in fp32: o1 = 1 - b1, o2 = 1 - b2. Per element, in fp32:
 *                 g = grad + gamma * param
 *                 m = b1 * m + o1 * g
 *                 v = b2 * v + o2 * (g * g)
 *                 mhat = m / c1;  vhat = v / c2
 *                 param = param - (lr * mhat) / (sqrtf(vhat) + eps)
 *               The op does not advance t: the program does that with var_add.
 * adamw         as adam, with weight decay gamma decoupled from the gradient (Keras AdamW):
 *               g = grad (no gamma term), m, v, mhat, vhat as adam, then
 *                 param = param - lr * (mhat / (sqrtf(vhat) + eps) + gamma * param)
 *               (the quotient, then gamma * param with the old param, their sum, times lr,
 *               subtracted: each rounded once). */
#include <math.h>

#include "ops_int.h"
#include "util.h"

static inline float max_f32(float a, float b)
{
    return ((a > b) | (a != a)) ? a : b;
}

/* Checks every label is below n_classes; the message names the first bad row. */
static int check_labels(const struct tpu_op *op, const int32_t *labels, size_t rows,
                        uint32_t n_classes, struct tpu_diag *d)
{
    for (size_t i = 0; i < rows; i++)
        if (labels[i] >= 0 && (uint32_t)labels[i] >= n_classes)
            return tpu__fail(d, TPU_ERANGE,
                             "%s: row %zu has label %d but there are %u classes; a label "
                             "must be in [0, %u), or negative to mark a padding row",
                             tpu_opcode_name(op->code), i, (int)labels[i],
                             (unsigned)n_classes, (unsigned)n_classes);
    return 0;
}

static int check_logits_labels(const struct tpu_op *op, const struct tpu__bufmem *x,
                               const struct tpu__bufmem *lab, struct tpu_diag *d)
{
    int rc = tpu__ops_check_buf(d, op, "logits", x, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "labels", lab, TPU_INT32, x->rows, 1);
    if (!rc)
        rc = check_labels(op, lab->data, x->rows, x->cols, d);
    return rc;
}

int tpu__ops_softmax_xent(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                          struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *loss = &bufs[op->out[0]], *dl = &bufs[op->out[1]];
    const struct tpu__bufmem *x = &bufs[op->in[0]], *lab = &bufs[op->in[1]];
    const bool weighted = op->code == TPU_OP_SOFTMAX_XENT_W;
    int rc = tpu__ops_check_buf(d, op, "loss", loss, TPU_F32, 1, 1);
    if (!rc)
        rc = tpu__ops_check_buf(d, op, "dlogits", dl, TPU_F32, x->rows, x->cols);
    if (!rc)
        rc = check_logits_labels(op, x, lab, d);
    if (!rc && weighted)
        rc = tpu__ops_check_buf(d, op, "weights", &bufs[op->in[2]], TPU_F32, x->rows, 1);
    if (rc)
        return rc;
    const size_t rows = x->rows, cols = x->cols;
    const float *wv = weighted ? bufs[op->in[2]].data : NULL; /* [rows][1] */
    const float *xv = x->data;       /* [rows][cols] */
    const int32_t *lv = lab->data;   /* [rows][1] */
    float *gv = dl->data;            /* [rows][cols] */
    float total = 0.0f;
    for (size_t i = 0; i < rows; i++) {
        const float *xr = xv + i * cols;
        float *g = gv + i * cols;
        if (lv[i] < 0) {
            for (size_t j = 0; j < cols; j++)
                g[j] = 0.0f;
            continue;
        }
        const size_t l = (size_t)lv[i];
        float m = xr[0];
        for (size_t j = 1; j < cols; j++)
            m = max_f32(xr[j], m);
        const float dlab = xr[l] - m;
        float s = 0.0f;
        for (size_t j = 0; j < cols; j++) {
            float e = expf(xr[j] - m);
            g[j] = e; /* e[j], kept in the output row */
            s = s + e;
        }
        /* the row's scale: alpha, or (softmax_xent_w) the row's weight */
        const float alpha = wv ? wv[i] : op->attrs.alpha;
        const float row_loss = logf(s) - dlab;
        total = total + (wv ? alpha * row_loss : row_loss);
        for (size_t j = 0; j < cols; j++)
            g[j] = g[j] / s;
        g[l] = g[l] - 1.0f;
        for (size_t j = 0; j < cols; j++)
            g[j] = alpha * g[j];
    }
    *(float *)loss->data = wv ? total : op->attrs.alpha * total;
    return 0;
}

int tpu__ops_classify_count(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                            struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    struct tpu__bufmem *y = &bufs[op->out[0]];
    const struct tpu__bufmem *x = &bufs[op->in[0]], *lab = &bufs[op->in[1]];
    int rc = tpu__ops_check_buf(d, op, "y", y, TPU_F32, 1, 2);
    if (!rc)
        rc = check_logits_labels(op, x, lab, d);
    if (rc)
        return rc;
    const size_t rows = x->rows, cols = x->cols;
    const float *xv = x->data;     /* [rows][cols] */
    const int32_t *lv = lab->data; /* [rows][1] */
    uint64_t correct = 0, valid = 0;
    for (size_t i = 0; i < rows; i++) {
        if (lv[i] < 0)
            continue;
        const float *xr = xv + i * cols;
        int64_t best = -1;
        float m = 0.0f;
        for (size_t j = 0; j < cols; j++)
            if (xr[j] == xr[j] && (best < 0 || xr[j] > m)) {
                best = (int64_t)j;
                m = xr[j];
            }
        valid++;
        correct += best == (int64_t)lv[i];
    }
    float *yv = y->data; /* [1][2] */
    yv[0] = (float)correct;
    yv[1] = (float)valid;
    return 0;
}

/* Checks that every state operand is f32 with grad's shape. */
static int check_state(const struct tpu_op *op, struct tpu__bufmem *bufs, unsigned n_out,
                       const char *const *names, struct tpu_diag *d)
{
    const struct tpu__bufmem *grad = &bufs[op->in[0]];
    int rc = tpu__ops_check_buf(d, op, "grad", grad, TPU_F32, TPU__OPS_ANY, TPU__OPS_ANY);
    for (unsigned k = 0; k < n_out && !rc; k++)
        rc = tpu__ops_check_buf(d, op, names[k], &bufs[op->out[k]], TPU_F32, grad->rows,
                                grad->cols);
    return rc;
}

/* The op's learning rate (the header comment): alpha, the host's rate in lr_var, or the
 * schedule's value at the step variable, which must be at least 1. */
static int learning_rate(const struct tpu_op *op, const int64_t *vars, float *lr,
                         struct tpu_diag *d)
{
    if (op->attrs.schedule == TPU_SCHEDULE_CONSTANT) {
        *lr = op->attrs.alpha;
        return 0;
    }
    if (op->attrs.schedule == TPU_SCHEDULE_HOST) {
        *lr = tpu_lr_host_value(&op->attrs, vars[op->attrs.lr_var]);
        if (!isfinite(*lr))
            return tpu__fail(d, TPU_ERANGE,
                             "%s: the learning rate in variable %u (schedule=host) is %g; it "
                             "must be a finite number: set it with tpu_lr_host_bits of the "
                             "rate",
                             tpu_opcode_name(op->code), (unsigned)op->attrs.lr_var,
                             (double)*lr);
        return 0;
    }
    const int64_t t = vars[op->attrs.var];
    if (t < 1)
        return tpu__fail(d, TPU_ERANGE,
                         "%s: the learning-rate schedule reads step variable %u, which holds "
                         "%lld but must be at least 1; increment it (var_add) before the "
                         "first update",
                         tpu_opcode_name(op->code), (unsigned)op->attrs.var, (long long)t);
    *lr = tpu_lr_schedule_value(&op->attrs, t);
    return 0;
}

int tpu__ops_sgd_momentum(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                          struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    static const char *const names[] = {"param", "velocity"};
    int rc = check_state(op, bufs, 2, names, d);
    if (rc)
        return rc;
    const size_t n = tpu__ops_count(&bufs[op->in[0]]);
    float *p = bufs[op->out[0]].data, *v = bufs[op->out[1]].data; /* [rows][cols] */
    const float *grad = bufs[op->in[0]].data;                     /* [rows][cols] */
    const float beta = op->attrs.beta, gamma = op->attrs.gamma;
    float alpha = 0.0f; /* set by learning_rate (gcc -O3 cannot see it) */
    if ((rc = learning_rate(op, cx->vars, &alpha, d)) != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] + gamma * p[i];
        v[i] = beta * v[i] + g;
        p[i] = p[i] - alpha * v[i];
    }
    return 0;
}

/* b^t for t >= 0 by binary exponentiation in double (the order the header comment gives;
 * t = 0 gives 1). */
double tpu__ops_pow_steps(double b, uint64_t t)
{
    double r = 1.0, x = b;
    while (t) {
        if (t & 1u)
            r = r * x;
        t >>= 1;
        if (t)
            x = x * x;
    }
    return r;
}

int tpu__ops_adam(const struct tpu_op *op, const struct tpu__op_ctx *cx,
                  struct tpu_diag *d)
{
    struct tpu__bufmem *bufs = cx->bufs;
    const int64_t *vars = cx->vars;
    static const char *const names[] = {"param", "m", "v"};
    int rc = check_state(op, bufs, 3, names, d);
    if (rc)
        return rc;
    const int64_t t = vars[op->attrs.var];
    const float b1 = op->attrs.beta, b2 = op->attrs.delta;
    const float gamma = op->attrs.gamma, eps = op->attrs.eps;
    const char *name = tpu_opcode_name(op->code);
    if (t < 1)
        return tpu__fail(d, TPU_ERANGE,
                         "%s: the step count in variable %u is %lld but must be at least "
                         "1; increment it (var_add) before the first update",
                         name, (unsigned)op->attrs.var, (long long)t);
    if (!(b1 >= 0.0f && b1 < 1.0f) || !(b2 >= 0.0f && b2 < 1.0f))
        return tpu__fail(d, TPU_ERANGE,
                         "%s: beta (b1) is %g and delta (b2) is %g; both must be in [0, 1)",
                         name, (double)b1, (double)b2);
    float lr = 0.0f; /* set by learning_rate (gcc -O3 cannot see it) */
    if ((rc = learning_rate(op, vars, &lr, d)) != 0)
        return rc;
    const float c1 = (float)(1.0 - tpu__ops_pow_steps(b1, (uint64_t)t));
    const float c2 = (float)(1.0 - tpu__ops_pow_steps(b2, (uint64_t)t));
    const float o1 = 1.0f - b1, o2 = 1.0f - b2;
    const size_t n = tpu__ops_count(&bufs[op->in[0]]);
    float *p = bufs[op->out[0]].data, *m = bufs[op->out[1]].data; /* [rows][cols] */
    float *v = bufs[op->out[2]].data;                             /* [rows][cols] */
    const float *grad = bufs[op->in[0]].data;                     /* [rows][cols] */
    if (op->code == TPU_OP_ADAMW) {
        for (size_t i = 0; i < n; i++) {
            float g = grad[i];
            m[i] = b1 * m[i] + o1 * g;
            v[i] = b2 * v[i] + o2 * (g * g);
            float mhat = m[i] / c1, vhat = v[i] / c2;
            p[i] = p[i] - lr * (mhat / (sqrtf(vhat) + eps) + gamma * p[i]);
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] + gamma * p[i];
        m[i] = b1 * m[i] + o1 * g;
        v[i] = b2 * v[i] + o2 * (g * g);
        float mhat = m[i] / c1, vhat = v[i] / c2;
        p[i] = p[i] - (lr * mhat) / (sqrtf(vhat) + eps);
    }
    return 0;
}
