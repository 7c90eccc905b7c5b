/* The device-program builder shared by the models (builder.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/builder.h"
#include "util.h"

uint32_t tpu__b_buf(struct tpu__builder *b, const char *name, enum tpu_dtype t,
                    enum tpu_buf_kind k, uint32_t rows, uint32_t cols)
{
    uint32_t id = TPU_NO_BUF;
    if (!b->rc)
        b->rc = tpu_program_add_buffer(b->p, name, t, k, rows, cols, &id, b->d);
    return id;
}

uint32_t tpu__b_bufi(struct tpu__builder *b, const char *prefix, int i, enum tpu_buf_kind k,
                     uint32_t rows, uint32_t cols)
{
    char name[48];
    snprintf(name, sizeof name, "%s%d", prefix, i);
    return tpu__b_buf(b, name, TPU_F32, k, rows, cols);
}

static void tag_op(struct tpu__builder *b)
{
    if (b->n_tags == b->cap_tags) {
        size_t cap = b->cap_tags ? 2 * b->cap_tags : 256;
        uint32_t *t = realloc(b->tags, cap * sizeof *t);
        if (!t) {
            b->rc = tpu__fail(b->d, TPU_ENOMEM, "out of memory building program '%s'",
                              tpu_program_name(b->p));
            return;
        }
        b->tags = t;
        b->cap_tags = cap;
    }
    b->tags[b->n_tags++] = b->tag;
}

void tpu__b_op(struct tpu__builder *b, enum tpu_opcode code, uint32_t o0, uint32_t o1,
               uint32_t o2, uint32_t i0, uint32_t i1, const struct tpu_op_attrs *attrs)
{
    if (b->rc)
        return;
    struct tpu_op o;
    tpu_op_init(&o, code);
    o.out[0] = o0;
    o.out[1] = o1;
    o.out[2] = o2;
    o.in[0] = i0;
    o.in[1] = i1;
    if (attrs) {
        uint8_t passes = o.attrs.passes;
        o.attrs = *attrs;
        if (code == TPU_OP_MATMUL && !attrs->passes)
            o.attrs.passes = passes;
    }
    tpu__b_add(b, &o);
}

void tpu__b_add(struct tpu__builder *b, const struct tpu_op *o)
{
    if (b->rc)
        return;
    b->rc = tpu_program_add_op(b->p, o, b->d);
    if (!b->rc && b->tagging)
        tag_op(b);
}

int tpu__b_start(struct tpu__builder *b, const char *name, uint32_t *var_iterations,
                 uint32_t *var_step)
{
    b->rc = tpu_program_create(name, &b->p);
    if (b->rc)
        return b->rc = tpu__fail(b->d, b->rc, "out of memory building program '%s'", name);
    b->rc = tpu_program_add_var(b->p, "iterations", var_iterations, b->d);
    if (!b->rc)
        b->rc = tpu_program_add_var(b->p, "step", var_step, b->d);
    if (b->rc)
        tpu_program_destroy(&b->p);
    return b->rc;
}

int tpu__b_finish(struct tpu__builder *b, uint32_t var_iterations, struct tpu_program **prog)
{
    struct tpu_op_attrs at;
    memset(&at, 0, sizeof at);
    at.var = var_iterations;
    tpu__b_op(b, TPU_OP_LOOP_END, TPU_NO_BUF, TPU_NO_BUF, TPU_NO_BUF, TPU_NO_BUF, TPU_NO_BUF,
              &at);
    if (b->rc) {
        tpu_program_destroy(&b->p);
        return b->rc;
    }
    *prog = b->p;
    b->p = NULL;
    return 0;
}
