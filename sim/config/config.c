/* Chip configurations: the JSON loader, the validator and the derived figures
 * (include/tpusim/config.h).
 *
 * This file turns a JSON document into a struct tpu_chip_config, or into one sentence saying
 * exactly what is wrong with it. It does not decide what a chip does with its figures (the
 * timing models do), and it never prints. The schema is one table (`top_fields` and the
 * member tables below): the parser, the range checks of tpu_config_validate() and the lists
 * of allowed fields in error messages all come from it, so they cannot disagree.
 *
 * THE FORMAT. One JSON object; every field is required unless marked optional. Sizes carry
 * their unit in the name; "gbytes" are 1e9 bytes; bandwidths are per direction.
 *
 *   name                    string, 1-63 letters, digits, '-', '_', '.'
 *   description             string, one line (optional)
 *   sources                 array of at most 8 strings: citations for the figures
 *   notes                   array of strings (optional): which figure came from where,
 *                           which were assumed and why. Checked, not stored.
 *   chips_per_host          whole number, chips one host drives
 *   cores_per_chip          whole number
 *   clock_mhz               number
 *   mxu {                   matrix units, per core
 *     per_core, rows, cols  whole numbers (rows: K dimension, cols: N dimension)
 *     dtypes                non-empty array of distinct names from "bf16", "int8"
 *     accumulator_rows      whole number, >= rows
 *   }
 *   vector_unit { sublanes, lanes, alus_per_lane }          whole numbers, per core
 *   memory { hbm_bytes, hbm_gbytes_per_s,                   off-chip memory, per chip
 *            vmem_bytes_per_core, dma_engines_per_core }
 *   host_link { gbytes_per_s, latency_ns }                  PCIe, per chip
 *   queues { infeed_entries_per_core, outfeed_entries_per_core }
 *   ici { topology ("none", "ring", "torus_2d", "torus_3d"), links_per_chip,
 *         gbytes_per_s_per_link, latency_ns }
 *
 * Whole numbers may be written 128 or 128.0 but not 128.5. The ranges of each field are in
 * the table; the rules that tie fields together are in check_consistency(). Nothing is
 * written to the caller's struct unless the whole document is valid. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "presets.h"
#include "tpusim/config.h"
#include "util.h"

/* A chip configuration is a few kilobytes; anything far larger is not one. */
#define CONFIG_FILE_MAX_BYTES (1u << 20)

/* ---- the schema ------------------------------------------------------------------------ */

enum field_kind {
    F_U32,      /* whole number stored as uint32_t */
    F_U64,      /* whole number stored as uint64_t */
    F_F64,      /* number stored as double */
    F_NAME,     /* the configuration's name */
    F_TEXT,     /* one string into a char[TPU_CONFIG_TEXT_MAX] */
    F_SOURCES,  /* array of strings into sources[] / n_sources */
    F_NOTES,    /* array of strings, checked and not stored */
    F_DTYPES,   /* array of dtype names into a TPU_DTYPE_BIT() set */
    F_TOPOLOGY, /* topology name into enum tpu_topology */
    F_OBJECT,   /* nested object described by `members` */
};

struct field {
    const char *key;
    enum field_kind kind;
    bool optional;
    double min, max;     /* numeric range, inclusive ... */
    bool min_exclusive;  /* ... except that the value must exceed `min` when set */
    size_t offset;       /* into struct tpu_chip_config (not for F_OBJECT, F_NOTES) */
    const char *meaning; /* a few words, used in messages */
    const struct field *members; /* F_OBJECT: table ending with a NULL key */
};

#define OFF(m) offsetof(struct tpu_chip_config, m)
#define U32(k, lo, hi, m, what) {k, F_U32, false, lo, hi, false, OFF(m), what, NULL}
#define U64(k, lo, hi, m, what) {k, F_U64, false, lo, hi, false, OFF(m), what, NULL}
#define F64(k, lo, hi, m, what) {k, F_F64, false, lo, hi, false, OFF(m), what, NULL}
#define F64_POS(k, hi, m, what) {k, F_F64, false, 0, hi, true, OFF(m), what, NULL}
#define OBJ(k, mem, what) {k, F_OBJECT, false, 0, 0, false, 0, what, mem}
#define END {NULL, F_U32, false, 0, 0, false, 0, NULL, NULL}

static const struct field mxu_fields[] = {
    U32("per_core", 1, 64, mxu_per_core, "matrix units per core"),
    U32("rows", 1, 4096, mxu_rows, "rows of each matrix unit, the K dimension of a tile"),
    U32("cols", 1, 4096, mxu_cols, "columns of each matrix unit, the N dimension of a tile"),
    {"dtypes", F_DTYPES, false, 0, 0, false, OFF(mxu_dtypes), "data types the matrix units "
     "multiply", NULL},
    U32("accumulator_rows", 1, 1048576, accumulator_rows,
        "rows of accumulators per matrix unit, the longest input stream per weight tile"),
    END,
};

static const struct field vector_fields[] = {
    U32("sublanes", 1, 1024, vector_sublanes, "sublanes of the vector unit"),
    U32("lanes", 1, 4096, vector_lanes, "lanes of the vector unit"),
    U32("alus_per_lane", 1, 64, vector_alus_per_lane, "ALUs in each vector lane"),
    END,
};

static const struct field memory_fields[] = {
    U64("hbm_bytes", 1, 17592186044416.0 /* 16 TiB */, hbm_bytes,
        "off-chip memory per chip, in bytes"),
    F64_POS("hbm_gbytes_per_s", 100000, hbm_gbytes_per_s,
            "off-chip memory bandwidth per chip, in 1e9 bytes per second"),
    U64("vmem_bytes_per_core", 1, 17179869184.0 /* 16 GiB */, vmem_bytes,
        "on-chip memory per core, in bytes"),
    U32("dma_engines_per_core", 1, 64, dma_engines, "DMA engines per core"),
    END,
};

static const struct field host_link_fields[] = {
    F64_POS("gbytes_per_s", 10000, host_link_gbytes_per_s,
            "host link bandwidth each way, in 1e9 bytes per second"),
    F64("latency_ns", 0, 1e9, host_link_latency_ns, "host link latency in nanoseconds"),
    END,
};

static const struct field queue_fields[] = {
    U32("infeed_entries_per_core", 1, 65536, infeed_queue_depth,
        "infeed queue depth per core, in entries"),
    U32("outfeed_entries_per_core", 1, 65536, outfeed_queue_depth,
        "outfeed queue depth per core, in entries"),
    END,
};

static const struct field ici_fields[] = {
    {"topology", F_TOPOLOGY, false, 0, 0, false, OFF(ici_topology), "how chips are joined",
     NULL},
    U32("links_per_chip", 0, 64, ici_links_per_chip, "interconnect links per chip"),
    F64("gbytes_per_s_per_link", 0, 10000, ici_gbytes_per_s_per_link,
        "bandwidth of one link each way, in 1e9 bytes per second"),
    F64("latency_ns", 0, 1e9, ici_latency_ns, "latency of one hop in nanoseconds"),
    END,
};

static const struct field top_fields[] = {
    {"name", F_NAME, false, 0, 0, false, OFF(name), "the configuration's name", NULL},
    {"description", F_TEXT, true, 0, 0, false, OFF(description), "a one-line description",
     NULL},
    {"sources", F_SOURCES, false, 0, 0, false, OFF(sources), "citations for the figures",
     NULL},
    {"notes", F_NOTES, true, 0, 0, false, 0, "where each figure came from", NULL},
    U32("chips_per_host", 1, 1024, chips_per_host, "chips one host drives"),
    U32("cores_per_chip", 1, 256, cores_per_chip, "cores per chip"),
    F64("clock_mhz", 1, 10000, clock_mhz, "core clock in MHz"),
    OBJ("mxu", mxu_fields, "the matrix units"),
    OBJ("vector_unit", vector_fields, "the vector unit"),
    OBJ("memory", memory_fields, "the memories"),
    OBJ("host_link", host_link_fields, "the host link"),
    OBJ("queues", queue_fields, "the infeed and outfeed queues"),
    OBJ("ici", ici_fields, "the inter-chip interconnect"),
    END,
};

static const struct {
    const char *name;
    uint32_t bit;
    enum tpu_dtype dtype;
} dtypes[] = {
    {"bf16", TPU_DTYPE_BIT(TPU_BF16), TPU_BF16},
    {"int8", TPU_DTYPE_BIT(TPU_INT8), TPU_INT8},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

static const struct {
    const char *name;
    enum tpu_topology topology;
    uint32_t links_needed; /* links per chip the topology needs at least */
    const char *why;
} topologies[] = {
    {"none", TPU_TOPO_NONE, 0, "no links"},
    {"ring", TPU_TOPO_RING, 2, "one to each neighbour"},
    {"torus_2d", TPU_TOPO_TORUS_2D, 4, "two per dimension, X and Y"},
    {"torus_3d", TPU_TOPO_TORUS_3D, 6, "two per dimension, X, Y and Z"},
};
#define N_TOPOLOGIES (sizeof topologies / sizeof topologies[0])

const char *tpu_topology_name(enum tpu_topology t)
{
    for (size_t i = 0; i < N_TOPOLOGIES; i++)
        if (topologies[i].topology == t)
            return topologies[i].name;
    return "?";
}

/* ---- small helpers for messages --------------------------------------------------------- */

/* "mxu.rows" from prefix "mxu" and key "rows"; "rows" when prefix is empty. */
static void join_path(char *buf, size_t n, const char *prefix, const char *key)
{
    if (prefix[0])
        snprintf(buf, n, "%s.%s", prefix, key);
    else
        snprintf(buf, n, "%s", key);
}

/* What a JSON value is, for "got ..." in messages. */
static void describe_value(const json_t *v, char *buf, size_t n)
{
    switch (json_typeof(v)) {
    case JSON_INTEGER:
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        snprintf(buf, n, "%.15g", json_real_value(v));
        break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t len = strlen(s);
        if (len > 40)
            snprintf(buf, n, "the string \"%.37s...\"", s);
        else
            snprintf(buf, n, "the string \"%s\"", s);
        break;
    }
    case JSON_TRUE:
        snprintf(buf, n, "true");
        break;
    case JSON_FALSE:
        snprintf(buf, n, "false");
        break;
    case JSON_NULL:
        snprintf(buf, n, "null");
        break;
    case JSON_ARRAY:
        snprintf(buf, n, "an array");
        break;
    case JSON_OBJECT:
        snprintf(buf, n, "an object");
        break;
    }
}

/* "a whole number from 1 to 4096", "a number greater than 0 and at most 10000". */
static void describe_rule(const struct field *f, char *buf, size_t n)
{
    if (f->kind == F_U32 || f->kind == F_U64)
        snprintf(buf, n, "a whole number from %" PRIu64 " to %" PRIu64, (uint64_t)f->min,
                 (uint64_t)f->max);
    else if (f->min_exclusive)
        snprintf(buf, n, "a number greater than %.15g and at most %.15g", f->min, f->max);
    else
        snprintf(buf, n, "a number from %.15g to %.15g", f->min, f->max);
}

/* "per_core, rows, cols, dtypes, accumulator_rows" */
static void list_keys(const struct field *fields, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const struct field *f = fields; f->key; f++) {
        int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", f->key);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
}

/* The one candidate within 2 edits of `word` that is closer than all others, or NULL (none
 * is close, or several are equally close: "tpu-v5" is as near tpu-v1 as tpu-v4, and a
 * guess would mislead). */
static const char *closest(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;
    bool tie = false;
    for (size_t i = 0; i < n; i++) {
        size_t dist = tpu__edit_distance(word, candidates[i]);
        if (dist < best_d) {
            best_d = dist;
            best = candidates[i];
            tie = false;
        } else if (dist == best_d) {
            tie = true;
        }
    }
    return tie ? NULL : best;
}

static bool name_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
}

static bool bounded_strlen(const char *s, size_t cap, size_t *len)
{
    const char *nul = memchr(s, '\0', cap);
    if (!nul)
        return false;
    *len = (size_t)(nul - s);
    return true;
}

/* ---- parsing ---------------------------------------------------------------------------- */

struct parse_ctx {
    const char *origin;
    struct tpu_diag *d;
    struct tpu_chip_config *cfg;
};

static void *field_ptr(struct tpu_chip_config *cfg, const struct field *f)
{
    return (char *)cfg + f->offset;
}

static const void *field_cptr(const struct tpu_chip_config *cfg, const struct field *f)
{
    return (const char *)cfg + f->offset;
}

/* A string value of at most max_len bytes. (The parser already rejects "\u0000", so the
 * string has no embedded NUL.) */
static int get_string(struct parse_ctx *c, const json_t *v, const char *path, size_t max_len,
                      const char **out)
{
    char got[96];
    if (!json_is_string(v)) {
        describe_value(v, got, sizeof got);
        return tpu__fail(c->d, TPU_ECONFIG, "%s: field '%s' must be a string, got %s",
                         c->origin, path, got);
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (len > max_len)
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' is %zu bytes long, more than the %zu that fit; "
                         "shorten it",
                         c->origin, path, len, max_len);
    *out = s;
    return 0;
}

static int parse_number(struct parse_ctx *c, const struct field *f, const json_t *v,
                        const char *path)
{
    char got[96], rule[96];
    describe_rule(f, rule, sizeof rule);
    describe_value(v, got, sizeof got);
    const bool whole = f->kind == F_U32 || f->kind == F_U64;
    bool ok = json_is_number(v);
    double x = ok ? json_number_value(v) : 0.0;
    if (ok && whole && json_is_integer(v)) {
        /* compare as integers: large values are not exact in a double */
        json_int_t i = json_integer_value(v);
        ok = i >= (json_int_t)f->min && (double)i <= f->max;
    } else if (ok) {
        ok = !(whole && x != floor(x)) && (f->min_exclusive ? x > f->min : x >= f->min) &&
             x <= f->max;
    }
    if (!ok)
        return tpu__fail(c->d, TPU_ECONFIG, "%s: field '%s' (%s) must be %s, got %s%s",
                         c->origin, path, f->meaning, rule, got,
                         json_is_string(v) ? "; write numbers without quotes" : "");
    void *p = field_ptr(c->cfg, f);
    if (f->kind == F_U32)
        *(uint32_t *)p = json_is_integer(v) ? (uint32_t)json_integer_value(v) : (uint32_t)x;
    else if (f->kind == F_U64)
        *(uint64_t *)p = json_is_integer(v) ? (uint64_t)json_integer_value(v) : (uint64_t)x;
    else
        *(double *)p = x;
    return 0;
}

static int parse_name(struct parse_ctx *c, const json_t *v, const char *path)
{
    const char *s = NULL;
    int rc = get_string(c, v, path, TPU_CONFIG_NAME_MAX - 1, &s);
    if (rc)
        return rc;
    for (const char *p = s; *p; p++)
        if (!name_char_ok(*p)) {
            char qs[TPU__QUOTE_BYTES], qc[8];
            return tpu__fail(c->d, TPU_ECONFIG,
                             "%s: field '%s' is \"%s\", which contains '%s'; a chip name is "
                             "1 to %d letters, digits, '-', '_' or '.' (it appears in file "
                             "names of reports)",
                             c->origin, path, tpu__quote(s, qs, sizeof qs),
                             tpu__quote_n(p, 1, qc, sizeof qc), TPU_CONFIG_NAME_MAX - 1);
        }
    if (!s[0])
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' is empty; give the chip a name such as \"my-chip\"",
                         c->origin, path);
    memcpy(c->cfg->name, s, strlen(s) + 1);
    return 0;
}

static int parse_sources(struct parse_ctx *c, const json_t *v, const char *path, bool store)
{
    char got[96], item[288];
    if (!json_is_array(v)) {
        describe_value(v, got, sizeof got);
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' must be an array of strings, got %s", c->origin,
                         path, got);
    }
    size_t n = json_array_size(v);
    if (store && n > TPU_CONFIG_MAX_SOURCES)
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' has %zu entries, more than the %d that fit; merge "
                         "some, or move details to 'notes'",
                         c->origin, path, n, TPU_CONFIG_MAX_SOURCES);
    for (size_t i = 0; i < n; i++) {
        const char *s = NULL;
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        int rc = get_string(c, json_array_get(v, i), item,
                            store ? TPU_CONFIG_TEXT_MAX - 1 : SIZE_MAX, &s);
        if (rc)
            return rc;
        if (store)
            memcpy(c->cfg->sources[i], s, strlen(s) + 1);
    }
    if (store)
        c->cfg->n_sources = (uint32_t)n;
    return 0;
}

static int parse_dtypes(struct parse_ctx *c, const json_t *v, const char *path)
{
    char got[96], item[288];
    if (!json_is_array(v)) {
        describe_value(v, got, sizeof got);
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' must be an array of data type names such as "
                         "[\"bf16\", \"int8\"], got %s",
                         c->origin, path, got);
    }
    if (json_array_size(v) == 0)
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: field '%s' is empty; a matrix unit multiplies at least one "
                         "data type: give [\"bf16\"], [\"int8\"] or both",
                         c->origin, path);
    uint32_t bits = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const char *s = NULL;
        snprintf(item, sizeof item, "%s[%zu]", path, i);
        int rc = get_string(c, json_array_get(v, i), item, 64, &s);
        if (rc)
            return rc;
        size_t k = 0;
        while (k < N_DTYPES && strcmp(s, dtypes[k].name) != 0)
            k++;
        char qs[TPU__QUOTE_BYTES];
        if (k == N_DTYPES)
            return tpu__fail(c->d, TPU_ECONFIG,
                             "%s: field '%s' is \"%s\", which is not a matrix-unit data "
                             "type; allowed: bf16, int8",
                             c->origin, item, tpu__quote(s, qs, sizeof qs));
        if (bits & dtypes[k].bit)
            return tpu__fail(c->d, TPU_ECONFIG,
                             "%s: field '%s' lists \"%s\" twice; list each data type once",
                             c->origin, path, s);
        bits |= dtypes[k].bit;
    }
    c->cfg->mxu_dtypes = bits;
    return 0;
}

static int parse_topology(struct parse_ctx *c, const json_t *v, const char *path)
{
    const char *s = NULL;
    int rc = get_string(c, v, path, 64, &s);
    if (rc)
        return rc;
    for (size_t i = 0; i < N_TOPOLOGIES; i++)
        if (!strcmp(s, topologies[i].name)) {
            c->cfg->ici_topology = topologies[i].topology;
            return 0;
        }
    char qs[TPU__QUOTE_BYTES];
    return tpu__fail(c->d, TPU_ECONFIG,
                     "%s: field '%s' is \"%s\", which is not a topology; allowed: none, "
                     "ring, torus_2d, torus_3d",
                     c->origin, path, tpu__quote(s, qs, sizeof qs));
}

static int parse_object(struct parse_ctx *c, const json_t *obj, const struct field *fields,
                        const char *prefix);

static int parse_field(struct parse_ctx *c, const struct field *f, const json_t *v,
                       const char *path)
{
    switch (f->kind) {
    case F_U32:
    case F_U64:
    case F_F64:
        return parse_number(c, f, v, path);
    case F_NAME:
        return parse_name(c, v, path);
    case F_TEXT: {
        const char *s = NULL;
        int rc = get_string(c, v, path, TPU_CONFIG_TEXT_MAX - 1, &s);
        if (!rc)
            memcpy(field_ptr(c->cfg, f), s, strlen(s) + 1);
        return rc;
    }
    case F_SOURCES:
        return parse_sources(c, v, path, true);
    case F_NOTES:
        return parse_sources(c, v, path, false);
    case F_DTYPES:
        return parse_dtypes(c, v, path);
    case F_TOPOLOGY:
        return parse_topology(c, v, path);
    case F_OBJECT:
        return parse_object(c, v, f->members, path);
    }
    return tpu__fail(c->d, TPU_EINVAL, "internal error: unknown field kind");
}

static int parse_object(struct parse_ctx *c, const json_t *obj, const struct field *fields,
                        const char *prefix)
{
    char keys[512], path[256], got[96];
    list_keys(fields, keys, sizeof keys);
    if (!json_is_object(obj)) {
        describe_value(obj, got, sizeof got);
        if (prefix[0])
            return tpu__fail(c->d, TPU_ECONFIG,
                             "%s: field '%s' must be an object with the fields %s; got %s",
                             c->origin, prefix, keys, got);
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: a chip configuration is a JSON object ({...}) with the fields "
                         "%s; got %s",
                         c->origin, keys, got);
    }
    /* unknown keys first, in document order: a misspelt key also shows up as missing */
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value)
    {
        const struct field *f = fields;
        while (f->key && strcmp(f->key, key) != 0)
            f++;
        if (f->key)
            continue;
        const char *cands[16];
        size_t n = 0;
        for (const struct field *g = fields; g->key && n < 16; g++)
            cands[n++] = g->key;
        const char *hint = closest(key, cands, n);
        char qkey[TPU__QUOTE_BYTES];
        join_path(path, sizeof path, prefix, tpu__quote(key, qkey, sizeof qkey));
        char hint_text[96];
        tpu__did_you_mean(hint, hint_text, sizeof hint_text);
        return tpu__fail(c->d, TPU_ECONFIG,
                         "%s: unknown field '%s'%s; the fields of %s%s%s are: %s",
                         c->origin, path, hint_text, prefix[0] ? "'" : "",
                         prefix[0] ? prefix : "the top level", prefix[0] ? "'" : "", keys);
    }
    for (const struct field *f = fields; f->key; f++) {
        join_path(path, sizeof path, prefix, f->key);
        const json_t *v = json_object_get(obj, f->key);
        if (!v) {
            if (f->optional)
                continue;
            char rule[96] = "";
            if (f->kind == F_U32 || f->kind == F_U64 || f->kind == F_F64) {
                char r[80];
                describe_rule(f, r, sizeof r);
                snprintf(rule, sizeof rule, ": %s", r);
            }
            return tpu__fail(c->d, TPU_ECONFIG,
                             "%s: required field '%s' is missing (%s%s); every field except "
                             "'description' and 'notes' must be given",
                             c->origin, path, f->meaning, rule);
        }
        int rc = parse_field(c, f, v, path);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- validation of a filled struct ------------------------------------------------------ */

/* Ranges of every numeric field, from the table. */
static int check_ranges(const struct tpu_chip_config *cfg, const struct field *fields,
                        const char *prefix, const char *origin, struct tpu_diag *d)
{
    char path[256], rule[96], got[64];
    for (const struct field *f = fields; f->key; f++) {
        join_path(path, sizeof path, prefix, f->key);
        if (f->kind == F_OBJECT) {
            int rc = check_ranges(cfg, f->members, path, origin, d);
            if (rc)
                return rc;
            continue;
        }
        double x;
        if (f->kind == F_U32) {
            uint32_t v = *(const uint32_t *)field_cptr(cfg, f);
            x = v;
            snprintf(got, sizeof got, "%" PRIu32, v);
        } else if (f->kind == F_U64) {
            uint64_t v = *(const uint64_t *)field_cptr(cfg, f);
            x = (double)v;
            snprintf(got, sizeof got, "%" PRIu64, v);
        } else if (f->kind == F_F64) {
            x = *(const double *)field_cptr(cfg, f);
            snprintf(got, sizeof got, "%.15g", x);
        } else {
            continue;
        }
        bool ok = (f->min_exclusive ? x > f->min : x >= f->min) && x <= f->max;
        if (!ok) { /* also catches NaN */
            describe_rule(f, rule, sizeof rule);
            return tpu__fail(d, TPU_ECONFIG, "%s: field '%s' (%s) must be %s, got %s", origin,
                             path, f->meaning, rule, got);
        }
    }
    return 0;
}

static int check_strings(const struct tpu_chip_config *cfg, const char *origin,
                         struct tpu_diag *d)
{
    size_t len;
    if (!bounded_strlen(cfg->name, sizeof cfg->name, &len) || len == 0)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'name' must be 1 to %d characters; give the chip a name",
                         origin, TPU_CONFIG_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++)
        if (!name_char_ok(cfg->name[i])) {
            char qs[TPU__QUOTE_BYTES], qc[8];
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'name' is \"%s\", which contains '%s'; a chip name is "
                             "letters, digits, '-', '_' or '.'",
                             origin, tpu__quote(cfg->name, qs, sizeof qs),
                             tpu__quote_n(cfg->name + i, 1, qc, sizeof qc));
        }
    if (!bounded_strlen(cfg->description, sizeof cfg->description, &len))
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'description' is not NUL-terminated within %d bytes",
                         origin, TPU_CONFIG_TEXT_MAX);
    if (cfg->n_sources > TPU_CONFIG_MAX_SOURCES)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'sources' has %" PRIu32 " entries, more than the %d that "
                         "fit",
                         origin, cfg->n_sources, TPU_CONFIG_MAX_SOURCES);
    for (uint32_t i = 0; i < cfg->n_sources; i++)
        if (!bounded_strlen(cfg->sources[i], sizeof cfg->sources[i], &len))
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'sources[%" PRIu32 "]' is not NUL-terminated within "
                             "%d bytes",
                             origin, i, TPU_CONFIG_TEXT_MAX);
    return 0;
}

/* The rules that tie fields together: what a hardware engineer would call a contradiction. */
static int check_consistency(const struct tpu_chip_config *cfg, const char *origin,
                             struct tpu_diag *d)
{
    const uint32_t known_bits = TPU_DTYPE_BIT(TPU_BF16) | TPU_DTYPE_BIT(TPU_INT8);
    if (cfg->mxu_dtypes == 0 || (cfg->mxu_dtypes & ~known_bits))
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'mxu.dtypes' holds the bit set 0x%" PRIx32 "; it must "
                         "name at least one of bf16, int8 and nothing else",
                         origin, cfg->mxu_dtypes);

    size_t t = 0;
    while (t < N_TOPOLOGIES && topologies[t].topology != cfg->ici_topology)
        t++;
    if (t == N_TOPOLOGIES)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'ici.topology' holds %d, which is not a topology; "
                         "allowed: none, ring, torus_2d, torus_3d",
                         origin, (int)cfg->ici_topology);

    /* Streaming a tile's M rows hides the next tile's R-cycle weight load only if M can
     * reach R (include/tpusim/mxu.h); fewer accumulator rows would leave the array waiting
     * on every tile. */
    if (cfg->accumulator_rows < cfg->mxu_rows)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'mxu.accumulator_rows' is %" PRIu32 " but 'mxu.rows' is "
                         "%" PRIu32 "; with fewer accumulator rows than array rows a tile's "
                         "input stream can never hide the next tile's %" PRIu32 "-cycle "
                         "weight load: raise accumulator_rows to at least %" PRIu32,
                         origin, cfg->accumulator_rows, cfg->mxu_rows, cfg->mxu_rows,
                         cfg->mxu_rows);

    /* On-chip memory is a staging area for off-chip memory. */
    const uint64_t onchip_bytes = cfg->vmem_bytes * (uint64_t)cfg->cores_per_chip;
    if (onchip_bytes > cfg->hbm_bytes)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: on-chip memory exceeds off-chip memory: 'memory.vmem_bytes_per_"
                         "core' %" PRIu64 " x 'cores_per_chip' %" PRIu32 " = %" PRIu64
                         " bytes, but 'memory.hbm_bytes' is %" PRIu64 "; check that both are "
                         "in bytes",
                         origin, cfg->vmem_bytes, cfg->cores_per_chip, onchip_bytes,
                         cfg->hbm_bytes);

    /* A matrix unit is fed from on-chip memory: it must hold at least one weight tile of
     * the widest data type the unit takes. */
    uint32_t widest_bytes = 0;
    const char *widest = "";
    for (size_t i = 0; i < N_DTYPES; i++)
        if ((cfg->mxu_dtypes & dtypes[i].bit) && tpu_dtype_bytes(dtypes[i].dtype) > widest_bytes) {
            widest_bytes = tpu_dtype_bytes(dtypes[i].dtype);
            widest = dtypes[i].name;
        }
    const uint64_t tile_bytes = (uint64_t)cfg->mxu_rows * cfg->mxu_cols * widest_bytes;
    if (cfg->vmem_bytes < tile_bytes)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'memory.vmem_bytes_per_core' is %" PRIu64 " bytes, less "
                         "than one %" PRIu32 "x%" PRIu32 " %s weight tile (%" PRIu64
                         " bytes); on-chip memory that cannot hold one tile cannot feed the "
                         "matrix unit: give at least %" PRIu64 " bytes",
                         origin, cfg->vmem_bytes, cfg->mxu_rows, cfg->mxu_cols, widest,
                         tile_bytes, tile_bytes);

    /* The interconnect: a topology and its links go together. */
    const char *topo = topologies[t].name;
    if (cfg->ici_topology == TPU_TOPO_NONE) {
        if (cfg->ici_links_per_chip != 0)
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'ici.links_per_chip' is %" PRIu32 " but "
                             "'ici.topology' is \"none\"; a chip without an interconnect "
                             "has no links: set links_per_chip to 0, or choose a topology "
                             "(ring, torus_2d, torus_3d)",
                             origin, cfg->ici_links_per_chip);
        if (cfg->ici_gbytes_per_s_per_link != 0.0)
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'ici.gbytes_per_s_per_link' is %.15g but "
                             "'ici.topology' is \"none\"; set it to 0, or choose a topology "
                             "(ring, torus_2d, torus_3d)",
                             origin, cfg->ici_gbytes_per_s_per_link);
        if (cfg->ici_latency_ns != 0.0)
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'ici.latency_ns' is %.15g but 'ici.topology' is "
                             "\"none\"; set it to 0, or choose a topology (ring, torus_2d, "
                             "torus_3d)",
                             origin, cfg->ici_latency_ns);
    } else {
        if (cfg->ici_links_per_chip < topologies[t].links_needed)
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'ici.links_per_chip' is %" PRIu32 " but a %s "
                             "topology needs at least %" PRIu32 " links per chip (%s): "
                             "raise links_per_chip, or choose another topology",
                             origin, cfg->ici_links_per_chip, topo,
                             topologies[t].links_needed, topologies[t].why);
        if (!(cfg->ici_gbytes_per_s_per_link > 0.0))
            return tpu__fail(d, TPU_ECONFIG,
                             "%s: field 'ici.gbytes_per_s_per_link' is %.15g but "
                             "'ici.topology' is \"%s\"; links that carry no data join no "
                             "chips: give the per-link bandwidth, or set topology to \"none\"",
                             origin, cfg->ici_gbytes_per_s_per_link, topo);
    }
    return 0;
}

int tpu_config_validate(const struct tpu_chip_config *cfg, const char *origin,
                        struct tpu_diag *d)
{
    if (!origin)
        origin = "configuration";
    if (!cfg)
        return tpu__fail(d, TPU_EINVAL, "%s: no configuration given (NULL)", origin);
    int rc = check_strings(cfg, origin, d);
    if (!rc)
        rc = check_ranges(cfg, top_fields, "", origin, d);
    if (!rc)
        rc = check_consistency(cfg, origin, d);
    return rc;
}

/* ---- loaders ---------------------------------------------------------------------------- */

/* Parses `len` bytes of JSON into *out; on failure *out is untouched. */
static int load_buffer(const char *text, size_t len, const char *origin,
                       struct tpu_chip_config *out, struct tpu_diag *d)
{
    json_error_t err;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!doc) {
        char qt[2 * JSON_ERROR_TEXT_LENGTH]; /* jansson quotes the text it stopped at */
        tpu__quote(err.text, qt, sizeof qt);
        if (err.line > 0)
            return tpu__fail(d, TPU_EPARSE, "%s:%d:%d: syntax error: %s", origin, err.line,
                             err.column, qt);
        return tpu__fail(d, TPU_EPARSE, "%s: syntax error: %s", origin, qt);
    }
    struct tpu_chip_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct parse_ctx c = {origin, d, &cfg};
    int rc = parse_object(&c, doc, top_fields, "");
    json_decref(doc);
    if (!rc)
        rc = tpu_config_validate(&cfg, origin, d);
    if (rc)
        return rc;
    *out = cfg;
    tpu_diag_clear(d);
    return 0;
}

int tpu_config_load_string(const char *json, const char *origin, struct tpu_chip_config *out,
                           struct tpu_diag *d)
{
    char qorigin[TPU__QUOTE_PATH_BYTES];
    origin = tpu__quote(origin ? origin : "<string>", qorigin, sizeof qorigin);
    if (!json || !out)
        return tpu__fail(d, TPU_EINVAL, "%s: tpu_config_load_string needs JSON text and an "
                         "output struct (got NULL)", origin);
    return load_buffer(json, strlen(json), origin, out, d);
}

static void errno_text(int err, char *buf, size_t n)
{
    if (strerror_r(err, buf, n) != 0)
        snprintf(buf, n, "error %d", err);
}

int tpu_config_load_file(const char *path, struct tpu_chip_config *out, struct tpu_diag *d)
{
    if (!path || !out)
        return tpu__fail(d, TPU_EINVAL,
                         "tpu_config_load_file needs a path and an output struct (got NULL)");
    char why[128], qpath[TPU__QUOTE_PATH_BYTES];
    const char *raw_path = path;
    path = tpu__quote(raw_path, qpath, sizeof qpath); /* for messages and as the origin */
    FILE *f = fopen(raw_path, "rb");
    if (!f) {
        errno_text(errno, why, sizeof why);
        return tpu__fail(d, TPU_EIO, "cannot open chip configuration file '%s': %s", path,
                         why);
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return tpu__fail(d, TPU_EIO, "'%s' is a directory; give a chip configuration JSON "
                         "file (such as configs/tpu-v4.json) or a preset name", path);
    }
    char *buf = malloc(CONFIG_FILE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
    }
    size_t len = fread(buf, 1, CONFIG_FILE_MAX_BYTES + 1, f);
    int rc = 0;
    if (ferror(f)) {
        errno_text(errno, why, sizeof why);
        rc = tpu__fail(d, TPU_EIO, "cannot read chip configuration file '%s': %s", path, why);
    } else if (len > CONFIG_FILE_MAX_BYTES) {
        rc = tpu__fail(d, TPU_EIO,
                       "chip configuration file '%s' is larger than %u bytes; a "
                       "configuration is a few kilobytes of JSON: is this the right file?",
                       path, CONFIG_FILE_MAX_BYTES);
    }
    fclose(f);
    if (!rc && len == 0)
        rc = tpu__fail(d, TPU_EPARSE, "chip configuration file '%s' is empty; a configuration "
                       "is a JSON object ({...}), such as the \"config\" member of 'tpusim config "
                       "show tpu-v4 --json'",
                       path);
    if (!rc)
        rc = load_buffer(buf, len, path, out, d);
    free(buf);
    return rc;
}

/* ---- presets ---------------------------------------------------------------------------- */

/* Built once from the generated table; read-only afterwards. */
#define MAX_PRESETS 64
static const char *preset_names[MAX_PRESETS + 1];
static pthread_once_t preset_names_once = PTHREAD_ONCE_INIT;

static void build_preset_names(void)
{
    size_t n = 0;
    for (const struct tpu__preset *p = tpu__presets; p->name && n < MAX_PRESETS; p++)
        preset_names[n++] = p->name;
    preset_names[n] = NULL;
}

const char *const *tpu_config_preset_names(void)
{
    pthread_once(&preset_names_once, build_preset_names);
    return preset_names;
}

const char *tpu_config_preset_json(const char *name)
{
    if (!name)
        return NULL;
    for (const struct tpu__preset *p = tpu__presets; p->name; p++)
        if (!strcmp(p->name, name))
            return p->json;
    return NULL;
}

/* "tiny, tpu-v1, tpu-v2, tpu-v3, tpu-v4" */
static void list_presets(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *p = tpu_config_preset_names(); *p; p++) {
        int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", *p);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
}

static void preset_hint(const char *name, char *buf, size_t n)
{
    const char *const *names = tpu_config_preset_names();
    size_t count = 0;
    while (names[count])
        count++;
    tpu__did_you_mean(closest(name, names, count), buf, n);
}

int tpu_config_load_preset(const char *name, struct tpu_chip_config *out, struct tpu_diag *d)
{
    if (!name || !out)
        return tpu__fail(d, TPU_EINVAL,
                         "tpu_config_load_preset needs a name and an output struct (got NULL)");
    const char *json = tpu_config_preset_json(name);
    if (!json) {
        char names[256], hint[96];
        list_presets(names, sizeof names);
        preset_hint(name, hint, sizeof hint);
        char qname[TPU__QUOTE_BYTES];
        return tpu__fail(d, TPU_ENOTFOUND,
                         "no built-in chip preset is named '%s'%s; the presets are: %s",
                         tpu__quote(name, qname, sizeof qname), hint, names);
    }
    char origin[TPU_CONFIG_NAME_MAX + 32];
    snprintf(origin, sizeof origin, "preset '%s'", name);
    struct tpu_chip_config cfg;
    int rc = tpu_config_load_string(json, origin, &cfg, d);
    if (rc)
        return rc;
    if (strcmp(cfg.name, name) != 0)
        return tpu__fail(d, TPU_ECONFIG,
                         "%s: field 'name' is \"%s\" but the preset's file is %s.json; make "
                         "them the same",
                         origin, cfg.name, name);
    *out = cfg;
    return 0;
}

int tpu_config_load(const char *name_or_path, struct tpu_chip_config *out, struct tpu_diag *d)
{
    if (!name_or_path || !out)
        return tpu__fail(d, TPU_EINVAL,
                         "tpu_config_load needs a name or path and an output struct (got "
                         "NULL)");
    if (tpu_config_preset_json(name_or_path))
        return tpu_config_load_preset(name_or_path, out, d);
    struct stat st;
    bool looks_like_path = strchr(name_or_path, '/') != NULL ||
                           strstr(name_or_path, ".json") != NULL;
    if (stat(name_or_path, &st) == 0 || looks_like_path) {
        int rc = tpu_config_load_file(name_or_path, out, d);
        if (rc == TPU_EIO && d) {
            /* the user may have meant a preset: say which exist */
            char names[256];
            list_presets(names, sizeof names);
            size_t used = strlen(d->msg);
            snprintf(d->msg + used, sizeof d->msg - used, " (built-in presets: %s)", names);
        }
        return rc;
    }
    char names[256], hint[96], qname[TPU__QUOTE_PATH_BYTES];
    list_presets(names, sizeof names);
    preset_hint(name_or_path, hint, sizeof hint);
    return tpu__fail(d, TPU_ENOTFOUND,
                     "'%s' is neither a built-in chip preset nor an existing file%s; the "
                     "presets are: %s; or give the path of a JSON configuration file",
                     tpu__quote(name_or_path, qname, sizeof qname), hint, names);
}

/* ---- derived figures -------------------------------------------------------------------- */

void tpu_config_derive(const struct tpu_chip_config *cfg, struct tpu_chip_derived *out)
{
    const double clock_hz = cfg->clock_mhz * 1e6;
    out->total_mxus = cfg->cores_per_chip * cfg->mxu_per_core;
    out->peak_macs_per_s =
        (double)out->total_mxus * (double)cfg->mxu_rows * (double)cfg->mxu_cols * clock_hz;
    out->peak_flops_per_s = 2.0 * out->peak_macs_per_s;
    out->hbm_bytes_per_s = cfg->hbm_gbytes_per_s * 1e9;
    out->ridge_macs_per_byte =
        out->hbm_bytes_per_s > 0 ? out->peak_macs_per_s / out->hbm_bytes_per_s : 0.0;
    out->host_link_bytes_per_s = cfg->host_link_gbytes_per_s * 1e9;
}
