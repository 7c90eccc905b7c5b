/* JSON model files: tpu_net_load_file and tpu_net_parse_json (include/tpusim/net.h). The
 * format, Keras-like and strict, is documented in configs/models/README.md: a name, an input
 * shape, a list of layers (each may name itself and the layers it reads), an output and a
 * loss. The file is parsed with jansson and the net is built through net.h's public builder
 * only, layer by layer in file order, so a model file can make nothing the C API cannot, and
 * every shape rule is the builder's.
 *
 * This is not a Keras model reader: it takes tpusim's own format (no "class_name"/"config"
 * nesting, no weights). It holds no state between calls.
 *
 * Locations. Every message starts with the file, line and column of the value at fault (or
 * of the key, for a key that is not allowed), found by tpu__json_locate (io/json_loc.c)
 * from the path the reader followed: "layers", the layer's index, the key, the element.
 * This file reads the document, its keys and its layers; checking one value against its rule
 * and writing the located message is model_file_values.c's (model_file_int.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "io/json_loc.h"
#include "io/model_file_int.h"

/* A model file is JSON text of at most 511 layers; ResNet-50's is 15 KB. */
#define MODEL_FILE_MAX_BYTES (16u << 20)

/* ---- keys ------------------------------------------------------------------------------- */

/* The keys of a layer, beyond the common "type", "name" and "inputs", by kind. */
static const char *const *kind_keys(enum tpu_layer_kind k)
{
    static const char *const dense[] = {"units", "activation", "use_bias", NULL};
    static const char *const conv[] = {"filters", "kernel_size", "strides", "padding",
                                       "activation", "use_bias", NULL};
    static const char *const pool[] = {"pool_size", "strides", "padding", NULL};
    static const char *const reshape[] = {"target_shape", NULL};
    static const char *const dropout[] = {"rate", NULL};
    static const char *const bn[] = {"momentum", "epsilon", "cross_replica", NULL};
    static const char *const none[] = {NULL};
    switch (k) {
    case TPU_LAYER_DENSE:
        return dense;
    case TPU_LAYER_CONV2D:
        return conv;
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        return pool;
    case TPU_LAYER_RESHAPE:
        return reshape;
    case TPU_LAYER_DROPOUT:
        return dropout;
    case TPU_LAYER_BATCH_NORM:
        return bn;
    default:
        return none;
    }
}

static bool in_list(const char *const *list, const char *key)
{
    for (; *list; list++)
        if (!strcmp(*list, key))
            return true;
    return false;
}

static void join_keys(const char *const *list, char *buf, size_t n)
{
    for (; *list; list++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s\"%s\"", buf[0] ? ", " : "", *list);
}

/* An unknown key: the keys allowed, the closest one, and the layer types that take it. */
static int unknown_key(const struct mf *m, struct where w, const char *key,
                       const char *const *allowed, const char *whose)
{
    char q[TPU__QUOTE_BYTES], list[512] = "", hint[TPU__QUOTE_BYTES + 32] = "";
    char owners[256] = "";
    const char *best = NULL;
    size_t best_d = 3;
    for (const char *const *k = allowed; *k; k++) {
        size_t dist = tpu__edit_distance(key, *k);
        if (dist < best_d) {
            best_d = dist;
            best = *k;
        }
    }
    join_keys(allowed, list, sizeof list);
    if (w.layer >= 0)
        for (int k = TPU_LAYER_INPUT + 1; k < TPU_LAYER_KIND_COUNT; k++)
            if (in_list(kind_keys((enum tpu_layer_kind)k), key))
                snprintf(owners + strlen(owners), sizeof owners - strlen(owners), "%s%s",
                         owners[0] ? ", " : "", tpu_layer_kind_name((enum tpu_layer_kind)k));
    w.key = key;
    w.at_key = true;
    tpu__quote(key, q, sizeof q);
    if (owners[0]) /* a key of other layers: no guess at a near spelling */
        return tpu__mf_fail(m, w, TPU_EPARSE, "\"%s\" is not a key of %s (it is one of %s); the "
                            "keys of %s are %s", q, whose, owners, whose, list);
    tpu__did_you_mean(best, hint, sizeof hint);
    return tpu__mf_fail(m, w, TPU_EPARSE, "unknown key \"%s\"%s; the keys of %s are %s", q, hint,
                        whose, list);
}

/* ---- layers ----------------------------------------------------------------------------- */

static const char *const activations[] = {"linear", "relu"}; /* = enum tpu_activation */
static const char *const paddings[] = {"valid", "same"};     /* = enum tpu_padding */
static const char *const losses[] = {"softmax_cross_entropy", "mean_squared_error"};

/* The index of the first layer after `after` named `name` in the file, or -1. */
static long named_later(const struct mf *m, size_t after, const char *name)
{
    for (size_t j = after; j < json_array_size(m->layers); j++) {
        const json_t *nm = json_object_get(json_array_get(m->layers, j), "name");
        if (json_is_string(nm) && !strcmp(json_string_value(nm), name))
            return (long)j;
    }
    return -1;
}

/* The tensor named `name` (a layer added so far, or "input"). Otherwise an error that says
 * whether the name comes later in the file (a forward reference, or the layer itself: a
 * cycle) or nowhere, with the closest name that exists. */
static int resolve(const struct mf *m, const struct tpu_net *net, struct where w, size_t layer,
                   const char *what, const char *name, uint32_t *id)
{
    if (tpu_net_find(net, name, id) == 0)
        return 0;
    char q[TPU__QUOTE_BYTES];
    tpu__quote(name, q, sizeof q);
    long later = named_later(m, layer, name);
    if (later == (long)layer && w.layer >= 0)
        return tpu__mf_fail(m, w, TPU_EINVAL,
                            "%s names the layer itself ('%s'): a model is an acyclic graph; read "
                            "an earlier layer, such as the one before it",
                            what, q);
    if (later >= 0)
        return tpu__mf_fail(m, w, TPU_EINVAL,
                            "%s names '%s', which is layer %ld, further down the file: a layer can "
                            "read only layers above it (so no cycle can be written); move layer "
                            "%ld above this one",
                            what, q, later + 1, later + 1);
    const char *best = NULL;
    size_t best_d = 3;
    char names[400] = "";
    struct tpu_layer_info info;
    uint32_t n = tpu_net_n_layers(net);
    for (uint32_t i = 0; i < n; i++) {
        if (tpu_net_layer(net, i, &info) != 0)
            continue;
        size_t dist = tpu__edit_distance(name, info.name);
        if (dist < best_d) {
            best_d = dist;
            best = info.name;
        }
        if (i < 12 || i + 1 == n)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'",
                     i == 0 ? "" : i == 12 && n > 13 ? ", ..., " : ", ", info.name);
    }
    char hint[TPU__QUOTE_BYTES + 32] = "";
    tpu__did_you_mean(best, hint, sizeof hint);
    return tpu__mf_fail(m, w, TPU_ENOTFOUND,
                        "%s names '%s', which no layer is called%s; the names defined so far are "
                        "%s",
                        what, q, hint, names);
}

/* The layer's input tensors: "inputs" or, without it, the previous layer's output. */
static int layer_inputs(const struct mf *m, const struct tpu_net *net, size_t i,
                        enum tpu_layer_kind kind, uint32_t prev, uint32_t in[2], uint32_t *n_in)
{
    const json_t *l = json_array_get(m->layers, i);
    const json_t *v = json_object_get(l, "inputs");
    uint32_t want = kind == TPU_LAYER_ADD ? 2 : 1;
    if (!v) {
        if (kind == TPU_LAYER_ADD)
            return tpu__mf_fail(m, layer_key(i, NULL), TPU_EINVAL,
                                "an add layer needs \"inputs\": the names of the two layers it "
                                "sums, such as [\"conv_2\", \"input\"]");
        in[0] = prev;
        *n_in = 1;
        return 0;
    }
    size_t n = json_array_size(v);
    if (!json_is_array(v) || n != want) {
        char got[TPU__QUOTE_BYTES + 32];
        tpu__json_describe(v, got, sizeof got);
        if (kind == TPU_LAYER_ADD)
            return tpu__mf_fail(m, layer_key(i, "inputs"), TPU_EINVAL,
                                "\"inputs\" of an add layer must list the two layers it sums, "
                                "such as [\"conv_2\", \"input\"]; got %s",
                                got);
        return tpu__mf_fail(m, layer_key(i, "inputs"), TPU_EINVAL,
                            "\"inputs\" of a %s layer must list the one layer it reads, such as "
                            "[\"conv_1\"] (leave it out to read the layer before); got %s",
                            tpu_layer_kind_name(kind), got);
    }
    for (size_t k = 0; k < n; k++) {
        struct where e = layer_key(i, "inputs");
        e.elem = (long)k;
        char what[48];
        snprintf(what, sizeof what, "\"inputs\"[%zu]", k);
        const char *name;
        const json_t *s = json_array_get(v, k);
        if (!json_is_string(s)) {
            char got[TPU__QUOTE_BYTES + 32];
            return tpu__mf_fail(m, e, TPU_EPARSE,
                                "%s must be the name of a layer above (a string) or \"input\"; "
                                "got %s",
                                what, tpu__json_describe(s, got, sizeof got));
        }
        name = json_string_value(s);
        int rc = resolve(m, net, e, i, what, name, &in[k]);
        if (rc)
            return rc;
    }
    *n_in = want;
    return 0;
}

/* Fills *desc from layer i's keys (its kind and name already set). */
static int layer_fields(const struct mf *m, size_t i, struct tpu_layer_desc *desc)
{
    const json_t *l = json_array_get(m->layers, i);
    const json_t *v;
    unsigned choice;
    int rc = 0;
#define KEY(k) ((v = json_object_get(l, (k))) != NULL)
#define AT(k) layer_key(i, (k))
    switch (desc->kind) {
    case TPU_LAYER_DENSE:
        if (!KEY("units"))
            return tpu__mf_fail(m, AT(NULL), TPU_EINVAL,
                                "a dense layer needs \"units\": its output size, a whole number "
                                "from 1 to %u",
                                MF_MAX_SIZE);
        rc = tpu__mf_whole(m, AT("units"), v, "\"units\"", 1, MF_MAX_SIZE, &desc->units);
        break;
    case TPU_LAYER_CONV2D:
        if (!KEY("filters"))
            return tpu__mf_fail(m, AT(NULL), TPU_EINVAL,
                                "a conv2d layer needs \"filters\": its output channels, a whole "
                                "number from 1 to %u",
                                MF_MAX_SIZE);
        rc = tpu__mf_whole(m, AT("filters"), v, "\"filters\"", 1, MF_MAX_SIZE, &desc->filters);
        if (!rc && !KEY("kernel_size"))
            return tpu__mf_fail(m, AT(NULL), TPU_EINVAL,
                                "a conv2d layer needs \"kernel_size\": a whole number n (for an n "
                                "x n kernel) or [h, w]");
        if (!rc)
            rc = tpu__mf_pair(m, AT("kernel_size"), v, "kernel_size", &desc->kh, &desc->kw);
        break;
    case TPU_LAYER_MAX_POOL2D:
    case TPU_LAYER_AVG_POOL2D:
        desc->kh = desc->kw = 2; /* Keras's pool_size=(2, 2) */
        if (KEY("pool_size"))
            rc = tpu__mf_pair(m, AT("pool_size"), v, "pool_size", &desc->kh, &desc->kw);
        break;
    case TPU_LAYER_RESHAPE:
        if (!KEY("target_shape"))
            return tpu__mf_fail(m, AT(NULL), TPU_EINVAL,
                                "a reshape layer needs \"target_shape\": [h, w, c] of the same "
                                "size as its input");
        rc = tpu__mf_shape(m, AT("target_shape"), v, "target_shape", &desc->target);
        break;
    case TPU_LAYER_DROPOUT:
        if (!KEY("rate"))
            return tpu__mf_fail(m, AT(NULL), TPU_EINVAL,
                                "a dropout layer needs \"rate\": the fraction of elements dropped "
                                "in training, a number at least 0 and less than 1");
        rc = tpu__mf_number(m, AT("rate"), v, "\"rate\"", 0, false, 1, true, &desc->rate);
        break;
    case TPU_LAYER_BATCH_NORM:
        if (KEY("momentum"))
            rc = tpu__mf_number(m, AT("momentum"), v, "\"momentum\"", 0, false, 1, false,
                                &desc->momentum);
        if (!rc && KEY("epsilon"))
            rc = tpu__mf_number(m, AT("epsilon"), v, "\"epsilon\"", 0, true, 1, false,
                                &desc->epsilon);
        if (!rc && KEY("cross_replica"))
            rc = tpu__mf_bool(m, AT("cross_replica"), v, "\"cross_replica\"",
                              &desc->cross_replica);
        break;
    default:
        break;
    }
    if (!rc && KEY("strides"))
        rc = tpu__mf_pair(m, AT("strides"), v, "strides", &desc->sh, &desc->sw);
    if (!rc && KEY("padding")) {
        rc = tpu__mf_choice(m, AT("padding"), v, "\"padding\"", paddings, 2, &choice);
        desc->padding = (enum tpu_padding)choice;
    }
    if (!rc && KEY("activation")) {
        rc = tpu__mf_choice(m, AT("activation"), v, "\"activation\"", activations, 2, &choice);
        desc->activation = (enum tpu_activation)choice;
    }
    if (!rc && KEY("use_bias"))
        rc = tpu__mf_bool(m, AT("use_bias"), v, "\"use_bias\"", &desc->use_bias);
#undef KEY
#undef AT
    return rc;
}

/* Layer i: its keys checked, its inputs resolved, then added through the builder; *prev
 * becomes its output tensor. */
static int add_layer(const struct mf *m, struct tpu_net *net, size_t i, uint32_t *prev)
{
    const json_t *l = json_array_get(m->layers, i);
    char got[TPU__QUOTE_BYTES + 32];
    if (!json_is_object(l))
        return tpu__mf_fail(m, layer_key(i, NULL), TPU_EPARSE,
                            "a layer must be an object such as {\"type\": \"dense\", \"units\": "
                            "10}; got %s",
                            tpu__json_describe(l, got, sizeof got));
    const json_t *type = json_object_get(l, "type");
    if (!type)
        return tpu__mf_fail(m, layer_key(i, NULL), TPU_EINVAL,
                            "the layer has no \"type\"; give one of \"dense\", \"conv2d\", "
                            "\"max_pool2d\", \"avg_pool2d\", \"global_avg_pool2d\", \"flatten\", "
                            "\"reshape\", \"relu\", \"dropout\", \"batch_norm\", \"add\"");
    const char *kinds[TPU_LAYER_KIND_COUNT - 1];
    for (int k = TPU_LAYER_INPUT + 1; k < TPU_LAYER_KIND_COUNT; k++)
        kinds[k - 1] = tpu_layer_kind_name((enum tpu_layer_kind)k);
    unsigned choice = 0; /* set by get_choice (gcc -O3 cannot see it) */
    if (json_is_string(type) && !strcmp(json_string_value(type), "input"))
        return tpu__mf_fail(m, layer_key(i, "type"), TPU_EPARSE,
                            "\"type\" \"input\" is not a layer: the input is the model's "
                            "\"input\" shape, and layers read it by the name \"input\"; remove "
                            "this layer");
    int rc = tpu__mf_choice(m, layer_key(i, "type"), type, "\"type\"", kinds,
                            TPU_LAYER_KIND_COUNT - 1, &choice);
    if (rc)
        return rc;
    enum tpu_layer_kind kind = (enum tpu_layer_kind)(choice + 1);

    /* every key known to this kind */
    static const char *const common[] = {"type", "name", "inputs", NULL};
    const char *const *own = kind_keys(kind);
    const char *allowed[16];
    size_t n_allowed = 0;
    for (const char *const *k = common; *k; k++)
        allowed[n_allowed++] = *k;
    for (const char *const *k = own; *k; k++)
        allowed[n_allowed++] = *k;
    allowed[n_allowed] = NULL;
    const char *key;
    const json_t *value;
    char whose[48];
    snprintf(whose, sizeof whose, "a %s layer", tpu_layer_kind_name(kind));
    json_object_foreach((json_t *)l, key, value)
        if (!in_list(allowed, key))
            return unknown_key(m, layer_key(i, NULL), key, allowed, whose);

    struct tpu_layer_desc desc;
    tpu_layer_desc_init(&desc, kind);
    const json_t *name = json_object_get(l, "name");
    if (name) {
        const char *s;
        uint32_t other;
        rc = tpu__mf_name(m, layer_key(i, "name"), name, "\"name\"", &s);
        if (rc)
            return rc;
        if (tpu_net_find(net, s, &other) == 0)
            return tpu__mf_fail(m, layer_key(i, "name"), TPU_EINVAL,
                                other == 0 ? "the name '%s' is the input's; give the layer "
                                             "another name"
                                      : "the name '%s' is taken by layer %" PRIu32
                                             "; give each layer its own name",
                                s, other);
        snprintf(desc.name, sizeof desc.name, "%s", s);
    }
    rc = layer_fields(m, i, &desc);
    uint32_t in[2], n_in = 0, out;
    if (!rc)
        rc = layer_inputs(m, net, i, kind, *prev, in, &n_in);
    if (rc)
        return rc;
    struct tpu_diag bd;
    tpu_diag_clear(&bd);
    rc = tpu_net_add(net, &desc, in, n_in, &out, &bd);
    if (rc) {
        struct where w = layer_key(i, NULL);
        w.bare = true;
        return tpu__mf_fail(m, w, rc, "%s", bd.msg);
    }
    *prev = out;
    return 0;
}

/* ---- the document ----------------------------------------------------------------------- */

static int build(const struct mf *m, const json_t *doc, struct tpu_net **out)
{
    char got[TPU__QUOTE_BYTES + 32];
    static const char *const top[] = {"name", "description", "input", "layers", "output",
                                      "loss", NULL};
    if (!json_is_object(doc))
        return tpu__mf_fail(m, top_key(NULL), TPU_EPARSE,
                            "a model file is a JSON object such as {\"input\": [28, 28, 1], "
                            "\"layers\": [...], \"loss\": \"softmax_cross_entropy\"}; got %s",
                            tpu__json_describe(doc, got, sizeof got));
    const char *key;
    const json_t *value;
    json_object_foreach((json_t *)doc, key, value)
        if (!in_list(top, key))
            return unknown_key(m, top_key(NULL), key, top, "a model file");

    const char *name = "model"; /* Keras's default */
    const json_t *v = json_object_get(doc, "name");
    int rc = v ? tpu__mf_name(m, top_key("name"), v, "\"name\"", &name) : 0;
    v = json_object_get(doc, "description");
    if (!rc && v && !json_is_string(v))
        rc = tpu__mf_fail(m, top_key("description"), TPU_EPARSE,
                          "\"description\" must be a string (it is not read); got %s",
                          tpu__json_describe(v, got, sizeof got));
    if (rc)
        return rc;

    struct tpu_shape in;
    v = json_object_get(doc, "input");
    if (!v)
        return tpu__mf_fail(m, top_key(NULL), TPU_EINVAL,
                            "the model has no \"input\"; give the shape of one example as [h, w, "
                            "c], such as \"input\": [28, 28, 1] (or [c] for a vector)");
    rc = tpu__mf_shape(m, top_key("input"), v, "input", &in);
    if (rc)
        return rc;

    v = json_object_get(doc, "layers");
    size_t n = json_array_size(v);
    if (!v)
        return tpu__mf_fail(m, top_key(NULL), TPU_EINVAL,
                            "the model has no \"layers\"; give a list of layers such as "
                            "\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", "
                            "\"units\": 10}]");
    if (!json_is_array(v) || n == 0 || n > TPU_NET_MAX_LAYERS - 1)
        return tpu__mf_fail(m, top_key("layers"), json_is_array(v) ? TPU_ERANGE : TPU_EPARSE,
                            "\"layers\" must be a list of 1 to %d layers; got %s",
                            TPU_NET_MAX_LAYERS - 1, tpu__json_describe(v, got, sizeof got));
    const json_t *loss_v = json_object_get(doc, "loss");
    if (!loss_v)
        return tpu__mf_fail(m, top_key(NULL), TPU_EINVAL,
                            "the model has no \"loss\"; add \"loss\": \"softmax_cross_entropy\" "
                            "(integer class labels) or \"mean_squared_error\" (real targets)");
    unsigned loss;
    rc = tpu__mf_choice(m, top_key("loss"), loss_v, "\"loss\"", losses, 2, &loss);
    const json_t *out_v = json_object_get(doc, "output");
    if (!rc && out_v && !json_is_string(out_v))
        rc = tpu__mf_fail(m, top_key("output"), TPU_EPARSE,
                          "\"output\" must be the name of the layer the loss reads (a string); "
                          "got %s",
                          tpu__json_describe(out_v, got, sizeof got));
    if (rc)
        return rc;

    struct tpu_net *net = NULL;
    struct tpu_diag bd;
    tpu_diag_clear(&bd);
    rc = tpu_net_create(name, in.h, in.w, in.c, &net, &bd);
    if (rc)
        return tpu__mf_fail(m, top_key("input"), rc, "%s", bd.msg);
    struct mf ml = *m;
    ml.layers = v;
    uint32_t prev = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = add_layer(&ml, net, i, &prev);
    uint32_t out_id = prev;
    if (!rc && out_v)
        rc = resolve(&ml, net, top_key("output"), n, "\"output\"", json_string_value(out_v),
                     &out_id);
    if (!rc) {
        rc = tpu_net_set_output(net, out_id, (enum tpu_loss)loss, &bd);
        if (rc)
            rc = tpu__mf_fail(&ml, top_key(out_v ? "output" : "loss"), rc, "%s", bd.msg);
    }
    if (rc) {
        tpu_net_destroy(&net);
        return rc;
    }
    *out = net;
    return 0;
}

static int parse(const char *text, size_t len, const char *origin, struct tpu_net **out,
                 struct tpu_diag *d)
{
    size_t blank = 0;
    while (blank < len && strchr(" \t\r\n", text[blank]) && text[blank])
        blank++;
    if (blank == len)
        return tpu__fail(d, TPU_EPARSE, "%s is empty; a model file is a JSON object such as "
                         "configs/models/cnn.json", origin);
    json_error_t err;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!doc) {
        char qt[2 * JSON_ERROR_TEXT_LENGTH]; /* jansson quotes the text it stopped at */
        tpu__quote(err.text, qt, sizeof qt);
        if (err.line > 0)
            return tpu__fail(d, TPU_EPARSE, "%s:%d:%d: syntax error: %s; a model file is "
                             "strict JSON (no comments, no trailing commas)",
                             origin, err.line, err.column, qt);
        return tpu__fail(d, TPU_EPARSE, "%s: syntax error: %s", origin, qt);
    }
    struct mf m = {origin, text, len, NULL, d};
    int rc = build(&m, doc, out);
    json_decref(doc);
    if (!rc)
        tpu_diag_clear(d);
    return rc;
}

int tpu_net_parse_json(const char *text, size_t len, const char *origin, struct tpu_net **out,
                       struct tpu_diag *d)
{
    char qorigin[TPU__QUOTE_PATH_BYTES];
    origin = tpu__quote(origin ? origin : "<string>", qorigin, sizeof qorigin);
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "%s: tpu_net_parse_json needs an output pointer (got "
                         "NULL)", origin);
    *out = NULL;
    if (!text)
        return tpu__fail(d, TPU_EINVAL, "%s: tpu_net_parse_json needs JSON text (got NULL)",
                         origin);
    return parse(text, len, origin, out, d);
}

static void errno_text(int err, char *buf, size_t n)
{
    if (strerror_r(err, buf, n) != 0)
        snprintf(buf, n, "error %d", err);
}

int tpu_net_load_file(const char *path, struct tpu_net **out, struct tpu_diag *d)
{
    if (!path || !out)
        return tpu__fail(d, TPU_EINVAL,
                         "tpu_net_load_file needs a path and an output pointer (got NULL)");
    *out = NULL;
    char why[128], qpath[TPU__QUOTE_PATH_BYTES];
    const char *shown = tpu__quote(path, qpath, sizeof qpath);
    FILE *f = fopen(path, "rb");
    if (!f) {
        errno_text(errno, why, sizeof why);
        return tpu__fail(d, TPU_EIO, "cannot open model file '%s': %s", shown, why);
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return tpu__fail(d, TPU_EIO, "'%s' is a directory; give a JSON model file such as "
                         "configs/models/cnn.json", shown);
    }
    /* read in growing steps: a model file is small, the limit is large */
    size_t cap = 0, len = 0;
    char *buf = NULL;
    int rc = 0;
    while (!rc && len <= MODEL_FILE_MAX_BYTES) {
        if (len == cap) {
            size_t grown = cap ? 2 * cap : 64 * 1024;
            if (grown > MODEL_FILE_MAX_BYTES + 1)
                grown = MODEL_FILE_MAX_BYTES + 1;
            char *nb = realloc(buf, grown);
            if (!nb) {
                rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading model file '%s'", shown);
                break;
            }
            buf = nb;
            cap = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (!rc && ferror(f)) {
        errno_text(errno, why, sizeof why);
        rc = tpu__fail(d, TPU_EIO, "cannot read model file '%s': %s", shown, why);
    } else if (!rc && len > MODEL_FILE_MAX_BYTES) {
        rc = tpu__fail(d, TPU_EIO, "model file '%s' is larger than %u bytes; a model file is "
                       "JSON of at most %d layers (ResNet-50's is 15 KB): is this the right "
                       "file?",
                       shown, MODEL_FILE_MAX_BYTES, TPU_NET_MAX_LAYERS - 1);
    }
    fclose(f);
    if (!rc)
        rc = parse(buf, len, shown, out, d);
    free(buf);
    return rc;
}
