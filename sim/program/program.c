/* Device programs: the op table (TPU_OP_TABLE expanded into op_table.h's structs) and its
 * queries, the program's storage and its builder.
 *
 * A program owns three growable arrays (buffers, variables, ops) and a hash index from name
 * to buffer or variable, so that the parser can resolve thousands of operand names quickly
 * and the builder can keep names unique across buffers and variables. The builder checks
 * only what it must to keep the program self-consistent (names, sizes, ids in range); the
 * semantic rules live in program_verify.c and the text form in program_print.c and
 * program_parse.c. */
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "tpusim/program.h"
#include "util.h"


/* One slot of the name index: an id into bufs or vars, or empty. */
struct name_slot {
    uint32_t id;
    uint8_t used;
    uint8_t is_var;
};

struct tpu_program {
    char name[TPU_PROGRAM_NAME_MAX + 1];
    struct tpu_buffer_desc *bufs;
    size_t n_bufs, cap_bufs;
    char (*vars)[TPU_PROGRAM_NAME_MAX + 1];
    size_t n_vars, cap_vars;
    struct tpu_op *ops;
    size_t n_ops, cap_ops;
    struct name_slot *index; /* open addressing, linear probing; n_index is a power of 2 */
    size_t n_index;
};

/* ---- the op table --------------------------------------------------------------------- */

#define TPU__ROLES(...) {__VA_ARGS__}

static const struct tpu__op_info op_infos[TPU_OP_COUNT] = {
#define TPU__OP_INFO(e, name_, syntax_, n_out_, n_in_, roles_, alias_, rmw_, rule_, attrs_,    \
                     required_, unit, vpu_ops, sem)                                            \
    [TPU_OP_##e] = {.name = name_,                                                             \
                    .syntax = TPU__SYNTAX_##syntax_,                                           \
                    .n_out = n_out_,                                                           \
                    .n_in = n_in_,                                                             \
                    .roles = TPU__ROLES roles_,                                                \
                    .alias = TPU__ALIAS_##alias_,                                              \
                    .rmw = rmw_,                                                               \
                    .rule = TPU__RULE_##rule_,                                                 \
                    .attrs = attrs_,                                                           \
                    .required = required_},
    TPU_OP_TABLE(TPU__OP_INFO)
#undef TPU__OP_INFO
};

static const struct tpu__op_info unknown_op = {.name = "unknown"};

static bool opcode_valid(enum tpu_opcode code)
{
    return (unsigned)code < TPU_OP_COUNT;
}

const struct tpu__op_info *tpu__op_info(enum tpu_opcode code)
{
    return opcode_valid(code) ? &op_infos[code] : &unknown_op;
}

const char *tpu_opcode_name(enum tpu_opcode code)
{
    return tpu__op_info(code)->name;
}

int tpu_opcode_parse(const char *name, enum tpu_opcode *out)
{
    for (unsigned i = 0; name && i < TPU_OP_COUNT; i++) {
        if (strcmp(name, op_infos[i].name) == 0) {
            *out = (enum tpu_opcode)i;
            return 0;
        }
    }
    return TPU_ENOTFOUND;
}

unsigned tpu_opcode_n_out(enum tpu_opcode code)
{
    return tpu__op_info(code)->n_out;
}

unsigned tpu_opcode_n_in(enum tpu_opcode code)
{
    return tpu__op_info(code)->n_in;
}

const char *tpu_opcode_operand_name(enum tpu_opcode code, bool is_output, unsigned i)
{
    const struct tpu__op_info *info = tpu__op_info(code);
    if (is_output)
        return i < info->n_out ? info->roles[i] : NULL;
    return i < info->n_in ? info->roles[info->n_out + i] : NULL;
}

unsigned tpu_opcode_attrs(enum tpu_opcode code)
{
    return tpu__op_info(code)->attrs;
}

/* the unit column, read as "is it the interconnect" (the units are device.h's business) */
#define TPU__ICI_MXU false
#define TPU__ICI_VPU false
#define TPU__ICI_INFEED false
#define TPU__ICI_OUTFEED false
#define TPU__ICI_ICI true
#define TPU__ICI_CTRL false

bool tpu_opcode_is_collective(enum tpu_opcode code)
{
    static const bool ici[TPU_OP_COUNT] = {
#define TPU__OP_ICI(e, name, syntax, n_out, n_in, roles, alias, rmw, rule, attrs, required, unit, \
                    vpu_ops, sem)                                                                \
    [TPU_OP_##e] = TPU__ICI_##unit,
        TPU_OP_TABLE(TPU__OP_ICI)
#undef TPU__OP_ICI
    };
    return (unsigned)code < TPU_OP_COUNT && ici[code];
}

void tpu_window_part(const struct tpu_window *w, struct tpu_window_part *out)
{
    const uint32_t p = w->parts > 1 ? w->parts : 1;
    out->parts = p;
    if (p == 1) {
        out->hc = w->h, out->hoc = w->ho, out->ext = w->h;
        return;
    }
    out->hc = ((uint64_t)w->h + p - 1) / p;
    out->hoc = ((uint64_t)w->ho + p - 1) / p;
    out->ext = (out->hoc ? out->hoc - 1 : 0) * w->sh + w->kh; /* < 2^64 */
}

int64_t tpu_window_ext_row0(const struct tpu_window *w, uint32_t k)
{
    struct tpu_window_part wp;
    tpu_window_part(w, &wp);
    if (wp.parts == 1)
        return 0; /* the image itself */
    return (int64_t)((uint64_t)k * wp.hoc * w->sh) - (int64_t)w->pt;
}

void tpu_op_init(struct tpu_op *op, enum tpu_opcode code)
{
    memset(op, 0, sizeof *op);
    op->code = code;
    for (unsigned i = 0; i < TPU_OP_MAX_OUT; i++)
        op->out[i] = TPU_NO_BUF;
    for (unsigned i = 0; i < TPU_OP_MAX_IN; i++)
        op->in[i] = TPU_NO_BUF;
    if (tpu_opcode_attrs(code) & TPU_ATTR_PASSES)
        op->attrs.passes = 1; /* one pass unless told otherwise */
}

const char *tpu_buf_kind_name(enum tpu_buf_kind k)
{
    switch (k) {
    case TPU_BUF_TEMP:
        return "temp";
    case TPU_BUF_PARAM:
        return "param";
    }
    return "unknown";
}

uint64_t tpu_buffer_bytes(const struct tpu_buffer_desc *b)
{
    return (uint64_t)b->rows * b->cols * tpu_dtype_bytes(b->dtype);
}

/* ---- the name index ---------------------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211u;
    }
    return h;
}

static const char *slot_name(const struct tpu_program *p, const struct name_slot *s)
{
    return s->is_var ? p->vars[s->id] : p->bufs[s->id].name;
}

/* The slot holding `name`, or the empty slot where it would go. */
static struct name_slot *index_slot(const struct tpu_program *p, const char *name)
{
    size_t mask = p->n_index - 1;
    for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask) {
        struct name_slot *s = &p->index[i];
        if (!s->used || strcmp(slot_name(p, s), name) == 0)
            return s;
    }
}

/* Makes room for one more name (keeps the load at most one half). */
static int index_reserve(struct tpu_program *p)
{
    size_t n_names = p->n_bufs + p->n_vars;
    if ((n_names + 1) * 2 <= p->n_index)
        return 0;
    size_t n_new = p->n_index ? p->n_index * 2 : 64;
    struct name_slot *old = p->index;
    size_t n_old = p->n_index;
    p->index = calloc(n_new, sizeof *p->index);
    if (!p->index) {
        p->index = old;
        return TPU_ENOMEM;
    }
    p->n_index = n_new;
    for (size_t i = 0; i < n_old; i++)
        if (old[i].used)
            *index_slot(p, slot_name(p, &old[i])) = old[i];
    free(old);
    return 0;
}

/* ---- building ---------------------------------------------------------------------------- */

/* Grows *arr (of *cap elements of `size` bytes) to hold at least n + 1. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t cap_new = *cap ? *cap * 2 : 16;
    size_t bytes;
    if (cap_new <= n || !tpu__mul_size(cap_new, size, &bytes))
        return TPU_ENOMEM;
    void *a = realloc(*arr, bytes);
    if (!a)
        return TPU_ENOMEM;
    *arr = a;
    *cap = cap_new;
    return 0;
}

static bool is_ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

/* Checks the identifier rules for a `what` name ("buffer", "variable", "program"). */
static int check_name(const char *name, const char *what, struct tpu_diag *d)
{
    if (!name || !*name)
        return tpu__fail(d, TPU_EINVAL, "%s name is empty; give it an identifier such as "
                         "'x' or 'w1'", what);
    size_t len = strlen(name);
    if (len > TPU_PROGRAM_NAME_MAX)
        return tpu__fail(d, TPU_EINVAL, "%s name '%.60s%s' has %zu characters; at most %d "
                         "are allowed", what, name, len > 60 ? "..." : "", len,
                         TPU_PROGRAM_NAME_MAX);
    bool ok = is_ident_start(name[0]);
    for (size_t i = 1; ok && i < len; i++)
        ok = is_ident_char(name[i]);
    if (!ok)
        return tpu__fail(d, TPU_EINVAL, "%s name '%s' is not an identifier: a name starts "
                         "with a letter or '_' and goes on with letters, digits, '_' or '.'",
                         what, name);
    return 0;
}

/* Checks that `name` is free for a new buffer or variable. */
static int check_unique(const struct tpu_program *p, const char *name, struct tpu_diag *d)
{
    if (p->n_index == 0)
        return 0;
    const struct name_slot *s = index_slot(p, name);
    if (!s->used)
        return 0;
    return tpu__fail(d, TPU_EINVAL, "name '%s' is already used by %s %u; buffer and variable "
                     "names must be unique", name, s->is_var ? "variable" : "buffer", s->id);
}

int tpu_program_create(const char *name, struct tpu_program **out)
{
    if (!out)
        return TPU_EINVAL;
    *out = NULL;
    int rc = check_name(name, "program", NULL);
    if (rc)
        return rc;
    struct tpu_program *p = calloc(1, sizeof *p);
    if (!p)
        return TPU_ENOMEM;
    memcpy(p->name, name, strlen(name) + 1);
    *out = p;
    return 0;
}

void tpu_program_destroy(struct tpu_program **p)
{
    if (!p || !*p)
        return;
    free((*p)->bufs);
    free((*p)->vars);
    free((*p)->ops);
    free((*p)->index);
    free(*p);
    *p = NULL;
}

int tpu_program_add_buffer(struct tpu_program *p, const char *name, enum tpu_dtype dtype,
                           enum tpu_buf_kind kind, uint32_t rows, uint32_t cols, uint32_t *id,
                           struct tpu_diag *d)
{
    if (!p)
        return tpu__fail(d, TPU_EINVAL, "no program given to add buffer to");
    int rc = check_name(name, "buffer", d);
    if (rc)
        return rc;
    if ((unsigned)dtype >= TPU_DTYPE_COUNT)
        return tpu__fail(d, TPU_EINVAL, "buffer '%s' has dtype %d; use f32, bf16, int8 or "
                         "int32", name, (int)dtype);
    if (kind != TPU_BUF_TEMP && kind != TPU_BUF_PARAM)
        return tpu__fail(d, TPU_EINVAL, "buffer '%s' has kind %d; use param or temp", name,
                         (int)kind);
    if (rows == 0 || cols == 0)
        return tpu__fail(d, TPU_EINVAL, "buffer '%s' has shape [%u, %u]; both dimensions "
                         "must be at least 1 (a scalar is [1, 1])", name, rows, cols);
    uint64_t elems = (uint64_t)rows * cols; /* fits: both are 32-bit */
    if (elems > UINT64_MAX / tpu_dtype_bytes(dtype))
        return tpu__fail(d, TPU_ERANGE, "buffer '%s' %s[%u, %u] is larger than 2^64 bytes; "
                         "make it smaller", name, tpu_dtype_name(dtype), rows, cols);
    if (p->n_bufs >= TPU_NO_BUF)
        return tpu__fail(d, TPU_ERANGE, "program '%s' already has %zu buffers, the most ids "
                         "can name", p->name, p->n_bufs);
    rc = check_unique(p, name, d);
    if (rc)
        return rc;
    if (grow((void **)&p->bufs, &p->cap_bufs, p->n_bufs, sizeof *p->bufs) ||
        index_reserve(p))
        return tpu__fail(d, TPU_ENOMEM, "out of memory adding buffer '%s'", name);
    struct tpu_buffer_desc *b = &p->bufs[p->n_bufs];
    memset(b, 0, sizeof *b);
    memcpy(b->name, name, strlen(name) + 1);
    b->dtype = dtype;
    b->kind = kind;
    b->rows = rows;
    b->cols = cols;
    struct name_slot *s = index_slot(p, name);
    *s = (struct name_slot){.id = (uint32_t)p->n_bufs, .used = 1, .is_var = 0};
    if (id)
        *id = (uint32_t)p->n_bufs;
    p->n_bufs++;
    return 0;
}

int tpu_program_add_var(struct tpu_program *p, const char *name, uint32_t *id,
                        struct tpu_diag *d)
{
    if (!p)
        return tpu__fail(d, TPU_EINVAL, "no program given to add variable to");
    int rc = check_name(name, "variable", d);
    if (rc)
        return rc;
    if (p->n_vars >= UINT32_MAX)
        return tpu__fail(d, TPU_ERANGE, "program '%s' already has %zu variables, the most "
                         "ids can name", p->name, p->n_vars);
    rc = check_unique(p, name, d);
    if (rc)
        return rc;
    if (grow((void **)&p->vars, &p->cap_vars, p->n_vars, sizeof *p->vars) ||
        index_reserve(p))
        return tpu__fail(d, TPU_ENOMEM, "out of memory adding variable '%s'", name);
    memcpy(p->vars[p->n_vars], name, strlen(name) + 1);
    struct name_slot *s = index_slot(p, name);
    *s = (struct name_slot){.id = (uint32_t)p->n_vars, .used = 1, .is_var = 1};
    if (id)
        *id = (uint32_t)p->n_vars;
    p->n_vars++;
    return 0;
}

int tpu_program_add_op(struct tpu_program *p, const struct tpu_op *op, struct tpu_diag *d)
{
    if (!p || !op)
        return tpu__fail(d, TPU_EINVAL, "no program or op given to add");
    if (!opcode_valid(op->code))
        return tpu__fail(d, TPU_EINVAL, "op %zu has opcode %d, which is not in the op table "
                         "(0 to %d)", p->n_ops, (int)op->code, TPU_OP_COUNT - 1);
    struct tpu_op c = *op;
    const char *name = op_infos[op->code].name;
    for (unsigned i = 0; i < TPU_OP_MAX_OUT + TPU_OP_MAX_IN; i++) {
        bool is_out = i < TPU_OP_MAX_OUT;
        unsigned k = is_out ? i : i - TPU_OP_MAX_OUT;
        uint32_t *slot = is_out ? &c.out[k] : &c.in[k];
        const char *role = tpu_opcode_operand_name(op->code, is_out, k);
        if (!role) {
            *slot = TPU_NO_BUF;
            continue;
        }
        if (*slot >= p->n_bufs)
            return tpu__fail(d, TPU_EINVAL, "op %zu (%s): %s %s is buffer id %s%u, but the "
                             "program has %zu buffers; add the buffer first", p->n_ops, name,
                             is_out ? "output" : "input", role,
                             *slot == TPU_NO_BUF ? "TPU_NO_BUF = " : "", *slot, p->n_bufs);
    }
    /* sgd_momentum reads its variable only for a step or cosine schedule; otherwise var 0 is
     * no variable */
    bool reads_var = (tpu_opcode_attrs(op->code) & TPU_ATTR_VAR) &&
                     (op->code != TPU_OP_SGD_MOMENTUM || c.attrs.var != 0 ||
                      (c.attrs.schedule != TPU_SCHEDULE_CONSTANT &&
                       c.attrs.schedule != TPU_SCHEDULE_HOST));
    if (reads_var && c.attrs.var >= p->n_vars)
        return tpu__fail(d, TPU_EINVAL, "op %zu (%s): variable id %u, but the program has %zu "
                         "variables; add the variable first", p->n_ops, name, c.attrs.var,
                         p->n_vars);
    /* schedule=host reads its rate from variable lr_var */
    const bool reads_lr = (tpu_opcode_attrs(op->code) & TPU_ATTR_SCHEDULE) &&
                          (c.attrs.lr_var != 0 || c.attrs.schedule == TPU_SCHEDULE_HOST);
    if (reads_lr && c.attrs.lr_var >= p->n_vars)
        return tpu__fail(d, TPU_EINVAL, "op %zu (%s): lr_var is variable id %u, but the "
                         "program has %zu variables; add the variable first", p->n_ops, name,
                         c.attrs.lr_var, p->n_vars);
    if (c.attrs.win.parts == 1 && (tpu_opcode_attrs(op->code) & TPU_ATTR_WINDOW))
        /* one part is no partitioning: one spelling of it */
        c.attrs.win.parts = 0;
    if (grow((void **)&p->ops, &p->cap_ops, p->n_ops, sizeof *p->ops))
        return tpu__fail(d, TPU_ENOMEM, "out of memory adding op %zu (%s)", p->n_ops, name);
    p->ops[p->n_ops++] = c;
    return 0;
}

int tpu_program_matmul(struct tpu_program *p, uint32_t y, uint32_t a, uint32_t b, bool trans_a,
                       bool trans_b, unsigned passes, bool accumulate)
{
    if (passes > UINT8_MAX)
        return TPU_EINVAL;
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_MATMUL);
    op.out[0] = y;
    op.in[0] = a;
    op.in[1] = b;
    op.attrs.trans_a = trans_a;
    op.attrs.trans_b = trans_b;
    op.attrs.passes = (uint8_t)passes;
    op.attrs.accumulate = accumulate;
    return tpu_program_add_op(p, &op, NULL);
}

int tpu_program_binary(struct tpu_program *p, enum tpu_opcode code, uint32_t y, uint32_t a,
                       uint32_t b)
{
    if (tpu_opcode_n_out(code) != 1 || tpu_opcode_n_in(code) != 2 || code == TPU_OP_MATMUL)
        return TPU_EINVAL;
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = y;
    op.in[0] = a;
    op.in[1] = b;
    return tpu_program_add_op(p, &op, NULL);
}

int tpu_program_unary(struct tpu_program *p, enum tpu_opcode code, uint32_t y, uint32_t x)
{
    if (tpu_opcode_n_out(code) != 1 || tpu_opcode_n_in(code) != 1)
        return TPU_EINVAL;
    struct tpu_op op;
    tpu_op_init(&op, code);
    op.out[0] = y;
    op.in[0] = x;
    return tpu_program_add_op(p, &op, NULL);
}

/* ---- accessors --------------------------------------------------------------------------- */

const char *tpu_program_name(const struct tpu_program *p)
{
    return p ? p->name : NULL;
}

size_t tpu_program_n_buffers(const struct tpu_program *p)
{
    return p ? p->n_bufs : 0;
}

const struct tpu_buffer_desc *tpu_program_buffer(const struct tpu_program *p, uint32_t id)
{
    return p && id < p->n_bufs ? &p->bufs[id] : NULL;
}

size_t tpu_program_n_vars(const struct tpu_program *p)
{
    return p ? p->n_vars : 0;
}

const char *tpu_program_var_name(const struct tpu_program *p, uint32_t id)
{
    return p && id < p->n_vars ? p->vars[id] : NULL;
}

size_t tpu_program_n_ops(const struct tpu_program *p)
{
    return p ? p->n_ops : 0;
}

const struct tpu_op *tpu_program_op(const struct tpu_program *p, size_t i)
{
    return p && i < p->n_ops ? &p->ops[i] : NULL;
}

static int find_name(const struct tpu_program *p, const char *name, bool want_var, uint32_t *id)
{
    if (!p || !name || p->n_index == 0)
        return TPU_ENOTFOUND;
    const struct name_slot *s = index_slot(p, name);
    if (!s->used || (bool)s->is_var != want_var)
        return TPU_ENOTFOUND;
    if (id)
        *id = s->id;
    return 0;
}

int tpu_program_find_buffer(const struct tpu_program *p, const char *name, uint32_t *id)
{
    return find_name(p, name, false, id);
}

int tpu_program_find_var(const struct tpu_program *p, const char *name, uint32_t *id)
{
    return find_name(p, name, true, id);
}
