/* The verifier's rules for the training ops added with the layer-graph models: the mse loss,
 * count_rows, dropout_mask, and the learning-rate schedules of the optimizers. program_verify.c
 * runs the rest (structure, attributes A1-A3, dataflow, memory) and calls this file through
 * tpu__verify_train for the ops whose table rule is MSE, COUNT_ROWS or DROPOUT, and for the
 * optimizers once their own rules hold; it adds the op's index and text to the sentence.
 *
 * Rules
 *   T9  mse: pred and target f32 [B, K] of one shape; mask int32 [B, 1] (< 0 marks a padding
 *       row); loss f32 [1, 1]; dpred f32 [B, K]. mse_w also weights f32 [B, 1].
 *   T10 count_rows: labels int32 [B, 1]; y f32 [1, 2].
 *   T11 dropout_mask: mask f32 (any shape); the rate alpha in [0, 1); its step variable is
 *       not the loop's trip-count variable (the mask would repeat at every step). With a
 *       window (row partitioning), program_verify_part.c's rule for it too.
 *   A4  sgd_momentum, adam, adamw: schedule is constant (0), step (1) or cosine (2).
 *       constant reads none of warmup, decay_steps, decay_rate: they stay 0. step: decay_steps
 *       >= 1, decay_rate > 0, warmup 0 (step has no warm-up). cosine: decay_steps >= 1, 0 <=
 *       decay_rate <= 1 (the final fraction of the rate). A schedule other than constant
 *       reads the step variable `var`, which is not the loop's trip-count variable.
 *       host (3): reads lr_var (the rate's bits), which is neither the loop's trip-count
 *       variable nor adam's and adamw's step variable; warmup, decay_steps, decay_rate stay
 *       0. The other schedules leave lr_var 0. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "program_int.h"

static int say(char *msg, size_t size, int code, const char *fmt, ...) TPU__PRINTF(4, 5);

static int say(char *msg, size_t size, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, size, fmt, ap);
    va_end(ap);
    return code;
}

struct tcheck {
    const struct tpu_program *p;
    const struct tpu_op *op;
    const char *opname;
    char *msg;
    size_t size;
};

/* Operand `role` (buffer id) must be of dtype dt and [rows, cols] (UINT32_MAX: any). */
static int need(struct tcheck *t, const char *role, uint32_t id, enum tpu_dtype dt,
                uint32_t rows, uint32_t cols, const char *why)
{
    const struct tpu_buffer_desc *b = tpu_program_buffer(t->p, id);
    if (b->dtype != dt)
        return say(t->msg, t->size, TPU_ESHAPE, "%s %s '%s' is %s, but %s needs it %s (%s); "
                   "declare it %s", t->opname, role, b->name, tpu_dtype_name(b->dtype),
                   t->opname, tpu_dtype_name(dt), why, tpu_dtype_name(dt));
    if ((rows != UINT32_MAX && b->rows != rows) || (cols != UINT32_MAX && b->cols != cols))
        return say(t->msg, t->size, TPU_ESHAPE, "%s %s '%s' is [%" PRIu32 ", %" PRIu32 "] but "
                   "must be [%" PRIu32 ", %" PRIu32 "] (%s); declare it %s[%" PRIu32 ", %"
                   PRIu32 "]", t->opname, role, b->name, b->rows, b->cols,
                   rows == UINT32_MAX ? b->rows : rows, cols == UINT32_MAX ? b->cols : cols,
                   why, tpu_dtype_name(dt), rows == UINT32_MAX ? b->rows : rows,
                   cols == UINT32_MAX ? b->cols : cols);
    return 0;
}

static int check_mse(struct tcheck *t)
{
    const struct tpu_op *op = t->op;
    const struct tpu_buffer_desc *pred = tpu_program_buffer(t->p, op->in[0]);
    const uint32_t b = pred->rows, k = pred->cols;
    int rc = need(t, "input pred", op->in[0], TPU_F32, b, k, "the model's outputs");
    if (!rc)
        rc = need(t, "input target", op->in[1], TPU_F32, b, k, "one target per prediction");
    if (!rc)
        rc = need(t, "input mask", op->in[2], TPU_INT32, b, 1,
                  "one entry per row of pred, < 0 for a padding row");
    if (!rc)
        rc = need(t, "output loss", op->out[0], TPU_F32, 1, 1, "the loss is a scalar");
    if (!rc)
        rc = need(t, "output dpred", op->out[1], TPU_F32, b, k, "the shape of pred");
    if (!rc && op->code == TPU_OP_MSE_W)
        rc = need(t, "input weights", op->in[3], TPU_F32, b, 1, "one weight per row of pred");
    return rc;
}

static int check_count_rows(struct tcheck *t)
{
    int rc = need(t, "input labels", t->op->in[0], TPU_INT32, UINT32_MAX, 1,
                  "one label per row, < 0 for a padding row");
    if (!rc)
        rc = need(t, "output y", t->op->out[0], TPU_F32, 1, 2, "0, labelled rows");
    return rc;
}

static int check_dropout(struct tcheck *t, bool has_loop, uint32_t loop_var)
{
    const struct tpu_op_attrs *a = &t->op->attrs;
    int rc = need(t, "output mask", t->op->out[0], TPU_F32, UINT32_MAX, UINT32_MAX,
                  "the vector unit's type");
    if (rc)
        return rc;
    if (!(a->alpha >= 0.0f && a->alpha < 1.0f))
        return say(t->msg, t->size, TPU_EINVAL, "dropout_mask alpha=%g is the dropout rate, "
                   "which must lie in [0, 1) (the kept values are scaled by 1 / (1 - rate)); "
                   "use a rate such as 0.5", (double)a->alpha);
    if (has_loop && a->var == loop_var)
        return say(t->msg, t->size, TPU_EINVAL, "dropout_mask var=%s is the loop's trip-count "
                   "variable, which stays the same at every step, so every step would drop "
                   "the same elements; give it the step counter (a variable the loop "
                   "increments with var_add)", tpu_program_var_name(t->p, a->var));
    const struct tpu_window *w = &a->win;
    const bool has_window = w->h || w->w || w->c || w->kh || w->kw || w->sh || w->sw ||
                            w->pt || w->pl || w->ho || w->wo || w->parts;
    return has_window ? tpu__verify_part(t->p, t->op, t->msg, t->size) : 0;
}

/* schedule=host: the rate is in variable lr_var, which is neither the loop's trip count nor
 * adam's step counter; warmup, decay_steps and decay_rate are not read. */
static int check_host_schedule(struct tcheck *t, bool has_loop, uint32_t loop_var)
{
    const struct tpu_op_attrs *a = &t->op->attrs;
    const char *n = t->opname;
    const char *lr = tpu_program_var_name(t->p, a->lr_var);
    if (a->warmup || a->decay_steps || a->decay_rate != 0.0f)
        return say(t->msg, t->size, TPU_EINVAL, "%s schedule=host reads none of warmup, "
                   "decay_steps, decay_rate (the host sets the rate in lr_var), but warmup=%"
                   PRIu32 " decay_steps=%" PRIu32 " decay_rate=%g; remove them", n, a->warmup,
                   a->decay_steps, (double)a->decay_rate);
    if (has_loop && a->lr_var == loop_var)
        return say(t->msg, t->size, TPU_EINVAL, "%s schedule=host reads lr_var=%s, the loop's "
                   "trip-count variable, as the rate's bits; give it a variable of its own "
                   "(the net lowering's \"learning_rate\")", n, lr);
    if (t->op->code != TPU_OP_SGD_MOMENTUM && a->lr_var == a->var)
        return say(t->msg, t->size, TPU_EINVAL, "%s schedule=host reads lr_var=%s, which is "
                   "also its step counter (var); the rate needs a variable of its own (the "
                   "net lowering's \"learning_rate\")", n, lr);
    return 0;
}

static int check_schedule(struct tcheck *t, bool has_loop, uint32_t loop_var)
{
    const struct tpu_op_attrs *a = &t->op->attrs;
    const char *n = t->opname;
    if (a->schedule == TPU_SCHEDULE_HOST)
        return check_host_schedule(t, has_loop, loop_var);
    if (a->lr_var)
        return say(t->msg, t->size, TPU_EINVAL, "%s has lr_var=%s but schedule=%" PRId32 "; "
                   "only schedule=host reads lr_var: remove it or set schedule=host", n,
                   tpu_program_var_name(t->p, a->lr_var), a->schedule);
    switch (a->schedule) {
    case TPU_SCHEDULE_CONSTANT:
        if (a->warmup || a->decay_steps || a->decay_rate != 0.0f)
            return say(t->msg, t->size, TPU_EINVAL, "%s schedule=constant reads none of "
                       "warmup, decay_steps, decay_rate, but warmup=%" PRIu32 " decay_steps=%"
                       PRIu32 " decay_rate=%g; remove them or choose schedule=step or cosine",
                       n, a->warmup, a->decay_steps, (double)a->decay_rate);
        return 0;
    case TPU_SCHEDULE_STEP:
        if (a->warmup)
            return say(t->msg, t->size, TPU_EINVAL, "%s schedule=step has warmup=%" PRIu32
                       ", but the step schedule has no warm-up (only cosine has); remove "
                       "warmup or use schedule=cosine", n, a->warmup);
        if (!(a->decay_rate > 0.0f))
            return say(t->msg, t->size, TPU_EINVAL, "%s schedule=step has decay_rate=%g; the "
                       "rate is multiplied by decay_rate every decay_steps steps, so it must "
                       "be above 0 (0.5 halves it)", n, (double)a->decay_rate);
        break;
    case TPU_SCHEDULE_COSINE:
        if (!(a->decay_rate >= 0.0f && a->decay_rate <= 1.0f))
            return say(t->msg, t->size, TPU_EINVAL, "%s schedule=cosine has decay_rate=%g; "
                       "it is the fraction of the rate left at the end of the decay and must "
                       "lie in [0, 1]", n, (double)a->decay_rate);
        break;
    default:
        return say(t->msg, t->size, TPU_EINVAL, "%s schedule=%" PRId32 " is not a schedule; "
                   "write schedule=constant (0), step (1) or cosine (2), or host (3) with "
                   "lr_var", n, a->schedule);
    }
    if (a->decay_steps < 1)
        return say(t->msg, t->size, TPU_EINVAL, "%s schedule=%s has decay_steps=0; the decay "
                   "runs over decay_steps steps, at least 1: give decay_steps=<steps>", n,
                   a->schedule == TPU_SCHEDULE_STEP ? "step" : "cosine");
    if (has_loop && a->var == loop_var)
        return say(t->msg, t->size, TPU_EINVAL, "%s's schedule reads var=%s, the loop's "
                   "trip-count variable; give it the step counter (a variable the loop "
                   "increments with var_add)", n, tpu_program_var_name(t->p, a->var));
    return 0;
}

int tpu__verify_train(const struct tpu_program *p, const struct tpu_op *op, bool has_loop,
                      uint32_t loop_var, char *msg, size_t size)
{
    struct tcheck t = {.p = p, .op = op, .opname = tpu_opcode_name(op->code), .msg = msg,
                       .size = size};
    switch (tpu__op_info(op->code)->rule) {
    case TPU__RULE_MSE:
        return check_mse(&t);
    case TPU__RULE_COUNT_ROWS:
        return check_count_rows(&t);
    case TPU__RULE_DROPOUT:
        return check_dropout(&t, has_loop, loop_var);
    case TPU__RULE_OPTIMIZER:
    case TPU__RULE_ADAM:
        return check_schedule(&t, has_loop, loop_var);
    default:
        return 0;
    }
}
