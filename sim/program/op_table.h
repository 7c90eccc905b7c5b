/* The op table (include/tpusim/program.h's TPU_OP_TABLE) as the sim layer reads it: one
 * struct per op with the columns that the program layer (builder, printer, parser,
 * verifier) and the chip's scoreboard need. program.c expands the table into these structs
 * once; sim/ops/ops.c reads the `sem` column and sim/chip/timing.c the `unit` and `vpu_ops`
 * columns themselves, since those name things of their own layers (functions, units).
 * Internal to sim/. */
#ifndef TPUSIM_SIM_PROGRAM_OP_TABLE_H
#define TPUSIM_SIM_PROGRAM_OP_TABLE_H

#include <stdbool.h>

#include "tpusim/program.h"

/* How the text form writes an op (the table's `syntax` column). */
enum tpu__op_syntax {
    TPU__SYNTAX_OPERANDS, /* outputs = name inputs attributes */
    TPU__SYNTAX_VAR_IMM,  /* var_add VAR INT */
    TPU__SYNTAX_LOOP,     /* loop VAR { */
    TPU__SYNTAX_LOOP_END, /* } */
};

/* Which inputs output 0 may be (the `alias` column): bit i for input i. */
enum tpu__op_alias {
    TPU__ALIAS_NONE = 0,
    TPU__ALIAS_IN0 = 1u << 0,
    TPU__ALIAS_IN01 = (1u << 0) | (1u << 1),
};

/* The verifier's shape and dtype rule for an op (the `rule` column; program_verify.c). */
enum tpu__op_rule {
    TPU__RULE_ANY,
    TPU__RULE_INFEED,
    TPU__RULE_MATMUL,
    TPU__RULE_BINARY,
    TPU__RULE_F32,
    TPU__RULE_CONVERT,
    TPU__RULE_QUANTIZE,
    TPU__RULE_REDUCE,
    TPU__RULE_WINDOW,
    TPU__RULE_CONV,       /* program_verify_conv.c */
    TPU__RULE_RESHAPE,
    TPU__RULE_SOFTMAX_XENT,
    TPU__RULE_CLASSIFY_COUNT,
    TPU__RULE_OPTIMIZER,
    TPU__RULE_ADAM,
    TPU__RULE_ALL_REDUCE,
    TPU__RULE_PERMUTE,
    TPU__RULE_MSE,        /* program_verify_train.c */
    TPU__RULE_COUNT_ROWS, /* program_verify_train.c */
    TPU__RULE_DROPOUT,    /* program_verify_train.c */
    TPU__RULE_HALO,       /* program_verify_part.c: halo, halo_grad */
    TPU__RULE_ROW_MASK,   /* program_verify_part.c */
};

struct tpu__op_info {
    const char *name;
    enum tpu__op_syntax syntax;
    unsigned n_out, n_in;
    const char *roles[TPU_OP_MAX_OUT + TPU_OP_MAX_IN]; /* outputs, then inputs */
    unsigned alias;    /* enum tpu__op_alias */
    bool rmw;          /* reads its outputs and writes them back */
    enum tpu__op_rule rule;
    unsigned attrs;    /* TPU_ATTR_* it reads */
    unsigned required; /* TPU_ATTR_* the text must state */
};

/* The row of `code`; a code outside the table gives a row named "unknown" with no operands,
 * no attributes and rule ANY. */
const struct tpu__op_info *tpu__op_info(enum tpu_opcode code);

#endif
