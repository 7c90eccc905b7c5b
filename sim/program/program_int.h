/* Internal interface of the device program's files: printing (program_print.c), parsing
 * (program_parse.c, whose opening comment holds the grammar, and program_parse_attr.c for the
 * attributes of an op line), the verifier (program_verify.c) and its memory rule
 * (program_memory.c). What they share is here: the table of attributes as the text writes
 * them and where each attribute lives in struct tpu_op_attrs (defined in program_print.c),
 * the parser's state and helpers that the two parsing files share, and the memory rule;
 * what the text writes for each op (its syntax, operands and the attributes it must state)
 * is the op table's (op_table.h). Not part of the public API. */
#ifndef TPUSIM_SIM_PROGRAM_INT_H
#define TPUSIM_SIM_PROGRAM_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op_table.h"
#include "tpusim/program.h"
#include "util.h" /* TPU__PRINTF */

/* How an attribute's value is written. */
enum tpu__text_attr_type {
    TPU__TA_FLAG,   /* the name alone */
    TPU__TA_PASSES, /* passes=<uint8> */
    TPU__TA_INT32,  /* name=<int32> */
    TPU__TA_REDUCE, /* reduce=<sum|mean|int32> */
    TPU__TA_GROUP,  /* group=<replicas|replica_cores|int32> */
    TPU__TA_VAR,    /* var=<variable> */
    TPU__TA_IMM,    /* imm=<int64> */
    TPU__TA_FLOAT,  /* name=<FLOAT> */
    TPU__TA_WINDOW, /* name=<uint32>: a field of the window group (TPU_ATTR_WINDOW) */
    TPU__TA_SCHEDULE, /* schedule=<constant|step|cosine|host|int32> */
    TPU__TA_UINT32,   /* name=<uint32> (warmup, decay_steps) */
    TPU__TA_LR_VAR,   /* lr_var=<variable> (the schedule group's; schedule=host) */
    TPU__TA_PARTS,    /* parts=<uint32>: the window group's optional field (TPU_ATTR_WINDOW;
                         never required, printed only when not 0) */
};

struct tpu__text_attr {
    unsigned bit; /* TPU_ATTR_* */
    const char *name;
    enum tpu__text_attr_type type;
    const char *hint; /* how to write it, for messages */
};

/* Every attribute, in printing order (the window group's fields share one bit,
 * TPU_ATTR_WINDOW, and have one entry each): tpu__text_attrs[0 .. tpu__text_n_attrs). */
extern const struct tpu__text_attr tpu__text_attrs[];
extern const size_t tpu__text_n_attrs;

/* The field of `a` that holds attribute `bit` of the type the name says: int32 (axis, reduce,
 * shift, group, schedule), flag (trans_a, trans_b, accumulate, core0) or float (alpha, beta, gamma,
 * delta, eps, decay_rate: the float of TPU_ATTR_SCHEDULE). A bit of another type gives the
 * last field of the list. Several text attributes share TPU_ATTR_SCHEDULE; the uint32 ones
 * (warmup, decay_steps) are told apart by the attribute's name. */
int32_t *tpu__text_attr_int32(struct tpu_op_attrs *a, unsigned bit);
uint32_t *tpu__text_attr_uint32(struct tpu_op_attrs *a, const struct tpu__text_attr *ad);
bool *tpu__text_attr_flag(struct tpu_op_attrs *a, unsigned bit);
float *tpu__text_attr_float(struct tpu_op_attrs *a, unsigned bit);
/* The field of a's window group that the WINDOW or PARTS attribute `ad` names (h, w, c, kh,
 * kw, sh, sw, pt, pl, ho, wo, parts); another attribute gives wo. */
uint32_t *tpu__text_attr_window(struct tpu_op_attrs *a, const struct tpu__text_attr *ad);

/* program_verify_window.c: rules T12 and T13 (the op table's rules WINDOW and RESHAPE) for
 * op, whose operand ids are valid. Returns 0, or TPU_EINVAL (window fields) or TPU_ESHAPE
 * (shapes and dtypes) with the sentence in msg (the verifier prefixes the op). */
int tpu__verify_window(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                       size_t size);

/* program_verify_window.c: the window's own fields (rule WINDOW's first part: fields >= 1,
 * pt < kh, pl < kw, every window overlaps the image, kh*kw*c < 2^32-1). 0 or TPU_EINVAL. */
int tpu__verify_window_fields(const struct tpu_op *op, char *msg, size_t size);

/* Which rows an image operand of a window has per example: with parts >= 2 the ext image's
 * E or the local image's hc; h when the window is not partitioned. */
enum tpu__image_kind { TPU__IMAGE_EXT, TPU__IMAGE_LOCAL };
/* program_verify_window.c: the image operand `role` (buffer b) of op holds N >= 1 images of
 * rows x w x c elements (rows as `kind` says); *n gets N. 0 or TPU_ESHAPE with the
 * sentence in msg. */
int tpu__verify_image(const struct tpu_op *op, const char *role,
                      const struct tpu_buffer_desc *b, enum tpu__image_kind kind, uint64_t *n,
                      char *msg, size_t size);

/* program_verify_part.c: rules T15 (HALO: halo, halo_grad) and T16 (ROW_MASK), and
 * dropout_mask's optional window, for op whose operand ids are valid. 0, TPU_EINVAL or
 * TPU_ESHAPE with the sentence in msg. */
int tpu__verify_part(const struct tpu_program *p, const struct tpu_op *op, char *msg,
                     size_t size);

/* program_verify_window.c: rule T14 (the op table's rule CONV) for the conv2d ops; cfg may be
 * NULL (no check of the chip's matrix unit). Returns 0, or TPU_EINVAL (window fields,
 * passes), TPU_ESHAPE (shapes and dtypes) or TPU_EUNSUPPORTED (no bf16 matrix unit) with the
 * sentence in msg. */
int tpu__verify_conv(const struct tpu_program *p, const struct tpu_op *op,
                     const struct tpu_chip_config *cfg, char *msg, size_t size);

/* program_verify_train.c: the rules of the training ops (mse, count_rows, dropout_mask) and
 * of the optimizers' schedules, for op `op` of `p` whose other rules hold; has_loop and
 * loop_var give the program's loop. Returns 0, or a TPU_E code with the sentence in msg
 * (without the op's prefix: the verifier adds it). */
int tpu__verify_train(const struct tpu_program *p, const struct tpu_op *op, bool has_loop,
                      uint32_t loop_var, char *msg, size_t size);

/* ---- parsing: program_parse.c and program_parse_attr.c --------------------------------------- */

/* The longest NAME of the text form, in characters: program.h's limit. */
#define TPU__TEXT_NAME_MAX_CHARS TPU_PROGRAM_NAME_MAX

/* The parser's state while it reads one text (tpu_program_parse). */
struct tpu__parser {
    const char *origin;
    const char *line_start, *line_end, *cur; /* the current line and the cursor in it */
    size_t line;                             /* 1-based */
    struct tpu_program *p;
    struct tpu_diag *d;
    size_t *buf_line, *var_line; /* the line each buffer and variable was declared on */
    size_t cap_buf_line, cap_var_line;
    size_t header_line;
    size_t first_op_line; /* 0 until an op is seen */
    size_t loop_line;     /* the open loop's line, 0 when none is open */
};

/* What parse_op (program_parse.c) has read of an op line so far. */
struct tpu__op_line {
    uint32_t outs[TPU_OP_MAX_OUT + 1];
    unsigned n_outs;
    char first_out[TPU__TEXT_NAME_MAX_CHARS + 1];
    char opname[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *op_at; /* where the op name starts */
    unsigned n_ins;
    const char *ins_at; /* where the inputs start */
    struct tpu_op op;
};

/* program_parse.c: the error at `at` (a position in the current line) as "origin:line:col:
 * message", TPU_EPARSE; the cursor and the names (each as its definition says). */
int tpu__parse_verror(struct tpu__parser *ps, const char *at, const char *fmt, va_list ap)
    TPU__PRINTF(3, 0);
bool tpu__parse_is_ident_start(char c);
void tpu__parse_skip_ws(struct tpu__parser *ps);
bool tpu__parse_at_eol(struct tpu__parser *ps);
void tpu__parse_describe(struct tpu__parser *ps, char out[64]);
int tpu__parse_expect_eol(struct tpu__parser *ps, const char *after);
int tpu__parse_read_name(struct tpu__parser *ps, char out[TPU__TEXT_NAME_MAX_CHARS + 1],
                         const char *what);
bool tpu__parse_next_is_name(struct tpu__parser *ps);
const char *tpu__parse_read_token(struct tpu__parser *ps, char out[64]);
void tpu__parse_consider(const char *word, const char *cand, const char **best,
                         size_t *best_d);
int tpu__parse_lookup_var(struct tpu__parser *ps, const char *at, const char *name,
                          uint32_t *id);

/* program_parse_attr.c: the attributes of an op line and var_add's operands. */
void tpu__parse_role_list(enum tpu_opcode code, bool out, char buf[96]);
const struct tpu__text_attr *tpu__parse_find_attr(const char *name);
int tpu__parse_attrs(struct tpu__parser *ps, struct tpu__op_line *ol);
int tpu__parse_var_add(struct tpu__parser *ps, struct tpu_op *op);

/* program_memory.c: the verifier's rule M1 (program_verify.c): the program's params plus the
 * peak of its live temps fit in one core's share of cfg's HBM; TPU_ERANGE with the message
 * otherwise (or TPU_ENOMEM). */
int tpu__verify_memory(const struct tpu_program *p, const struct tpu_chip_config *cfg,
                       struct tpu_diag *d);

#endif
