/* The model-file reader's shared parts: model_file.c reads the document and its layers;
 * model_file_values.c checks one value at a time (whole numbers, numbers, booleans, choices,
 * names, window pairs, shapes) and writes every message at the file, line and column of the
 * value at fault. Private to host/io/. */
#ifndef TPUSIM_HOST_IO_MODEL_FILE_INT_H
#define TPUSIM_HOST_IO_MODEL_FILE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tpusim/net.h"
#include "util.h"

/* Ranges a file may give (the builder checks the shapes and anything else beyond these). */
#define MF_MAX_SIZE 1048576u  /* units, filters, input and target dimensions */
#define MF_MAX_WINDOW 4096u   /* kernel_size, pool_size, strides */

/* The file being read. */
struct mf {
    const char *origin; /* quoted, for messages */
    const char *text;
    size_t len;
    const json_t *layers; /* the "layers" array */
    struct tpu_diag *d;
};

/* What a message is about: a top-level key (layer < 0), a layer, or a key of a layer; and
 * within an array value, one element (elem >= 0). */
struct where {
    long layer;
    const char *key;
    long elem;
    bool at_key; /* point at the key itself (unknown keys) rather than its value */
    bool bare;   /* no "layer i 'name': " (the builder's messages name the layer) */
};

static inline struct where top_key(const char *key)
{
    return (struct where){-1, key, -1, false, false};
}

static inline struct where layer_key(size_t layer, const char *key)
{
    return (struct where){(long)layer, key, -1, false, false};
}

/* Fails with code and "<origin>:<line>:<col>: [layer ...: ]<body>", the place found from w. */
int tpu__mf_fail(const struct mf *m, struct where w, int code, const char *fmt, ...)
    TPU__PRINTF(4, 5);

/* Each checks v against its rule and stores it in *out, or fails at w with a message that
 * names `what` (the rule's subject, such as "\"units\""), the rule and what the file gave. */
/* A whole number in [lo, hi]. */
int tpu__mf_whole(const struct mf *m, struct where w, const json_t *v, const char *what,
                  uint32_t lo, uint32_t hi, uint32_t *out);
/* A number x with lo <= x < hi (hi_open) or lo <= x <= hi; lo_open makes lo exclusive; the
 * rule holds for the float stored, not only for the double the file gives. */
int tpu__mf_number(const struct mf *m, struct where w, const json_t *v, const char *what,
                   double lo, bool lo_open, double hi, bool hi_open, float *out);
int tpu__mf_bool(const struct mf *m, struct where w, const json_t *v, const char *what, bool *out);
/* One of `choices` (n of them); the index into *out. */
int tpu__mf_choice(const struct mf *m, struct where w, const json_t *v, const char *what,
                   const char *const *choices, size_t n, unsigned *out);
/* A layer or model name (an identifier of at most TPU_NET_NAME_MAX characters); *out points
 * into v. */
int tpu__mf_name(const struct mf *m, struct where w, const json_t *v, const char *what,
                 const char **out);
/* A window or stride: a whole number n (n x n) or [h, w]; `key` is the JSON key. */
int tpu__mf_pair(const struct mf *m, struct where w, const json_t *v, const char *key,
                 uint32_t *h, uint32_t *wd);
/* A shape [h, w, c], or [c] for 1 x 1 x c. */
int tpu__mf_shape(const struct mf *m, struct where w, const json_t *v, const char *key,
                  struct tpu_shape *out);

#endif
