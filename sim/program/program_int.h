/* Internal interface of the device program's files: printing (program_print.c), parsing
 * (program_parse.c; its opening comment holds the grammar) and the verifier
 * (program_verify.c). What they share is here: the table of attributes as the text writes
 * them and where each attribute lives in struct tpu_op_attrs; what the text writes for each
 * op (its syntax, operands and the attributes it must state) is the op table's
 * (op_table.h). The definitions are in program_print.c. Not part of the public API. */
#ifndef TPUSIM_SIM_PROGRAM_INT_H
#define TPUSIM_SIM_PROGRAM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op_table.h"
#include "tpusim/program.h"

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
};

struct tpu__text_attr {
    unsigned bit; /* TPU_ATTR_* */
    const char *name;
    enum tpu__text_attr_type type;
    const char *hint; /* how to write it, for messages */
};

/* Every attribute, in printing order: tpu__text_attrs[0 .. tpu__text_n_attrs). */
extern const struct tpu__text_attr tpu__text_attrs[];
extern const size_t tpu__text_n_attrs;

/* The field of `a` that holds attribute `bit` of the type the name says: int32 (axis, reduce,
 * shift, group), flag (trans_a, trans_b, accumulate) or float (alpha, beta, gamma, delta,
 * eps). A bit of another type gives the last field of the list. */
int32_t *tpu__text_attr_int32(struct tpu_op_attrs *a, unsigned bit);
bool *tpu__text_attr_flag(struct tpu_op_attrs *a, unsigned bit);
float *tpu__text_attr_float(struct tpu_op_attrs *a, unsigned bit);

#endif
