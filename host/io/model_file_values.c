/* The model-file reader's values (model_file_int.h): each check takes one JSON value, stores
 * it or fails with a message at the value's file, line and column that names the key, the
 * rule and what the file gave. model_file.c reads the document and its layers with these. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "io/json_loc.h"
#include "io/model_file_int.h"

/* "layer 3 'conv_2'", "layer 3 (conv2d)" for a layer without a name, or "layer 3": layers
 * are numbered from 1 in file order, the input being layer 0, as tpu_net_layer numbers
 * them. */
static void layer_label(const struct mf *m, size_t i, char *buf, size_t n)
{
    const json_t *l = json_array_get(m->layers, i);
    const json_t *name = json_object_get(l, "name");
    const json_t *type = json_object_get(l, "type");
    char q[TPU__QUOTE_BYTES];
    if (json_is_string(name))
        snprintf(buf, n, "layer %zu '%s'", i + 1, tpu__quote(json_string_value(name), q, sizeof q));
    else if (json_is_string(type))
        snprintf(buf, n, "layer %zu (%s)", i + 1, tpu__quote(json_string_value(type), q, sizeof q));
    else
        snprintf(buf, n, "layer %zu", i + 1);
}

/* "<origin>:<line>:<col>: [layer ...: ]<body>" */
int tpu__mf_fail(const struct mf *m, struct where w, int code, const char *fmt, ...)
{
    struct tpu__json_step path[4];
    size_t n = 0;
    if (w.layer >= 0) {
        path[n++] = (struct tpu__json_step){"layers", 0};
        path[n++] = (struct tpu__json_step){NULL, (size_t)w.layer};
    }
    if (w.key)
        path[n++] = (struct tpu__json_step){w.key, 0};
    if (w.elem >= 0)
        path[n++] = (struct tpu__json_step){NULL, (size_t)w.elem};
    int line, col;
    tpu__json_locate(m->text, m->len, path, n, w.at_key && w.elem < 0, &line, &col);

    char body[TPU_DIAG_MAX], label[TPU__QUOTE_BYTES + 32] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (w.layer >= 0 && !w.bare) {
        layer_label(m, (size_t)w.layer, label, sizeof label - 2);
        strcat(label, ": ");
    }
    return tpu__fail(m->d, code, "%s:%d:%d: %s%s", m->origin, line, col, label, body);
}

/* ---- values ----------------------------------------------------------------------------- */

/* A whole number in [lo, hi]. `what` is the rule's subject, e.g. "\"units\"". */
int tpu__mf_whole(const struct mf *m, struct where w, const json_t *v, const char *what,
                  uint32_t lo, uint32_t hi, uint32_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) >= (json_int_t)lo &&
        json_integer_value(v) <= (json_int_t)hi) {
        *out = (uint32_t)json_integer_value(v);
        return 0;
    }
    char got[TPU__QUOTE_BYTES + 32];
    tpu__json_describe(v, got, sizeof got);
    return tpu__mf_fail(m, w, json_is_integer(v) ? TPU_ERANGE : TPU_EPARSE,
                        "%s must be a whole number from %" PRIu32 " to %" PRIu32 "; got %s%s",
                        what, lo, hi, got,
                        json_is_string(v) ? " (write numbers without quotes)"
                        : json_is_real(v) ? " (write whole numbers without a decimal point)"
                                          : "");
}

/* A number x with lo <= x < hi (hi_open) or lo <= x <= hi; lo_open makes lo exclusive. The
 * model keeps 32-bit floats, so the rule is checked on the float the value becomes, not on the
 * double the file gives: 0.99999999 rounds to 1 and 1e-50 to 0, and each would pass a check
 * on the double only to break the rule once stored. The message quotes what the file wrote. */
static bool in_range(double x, double lo, bool lo_open, double hi, bool hi_open)
{
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

int tpu__mf_number(const struct mf *m, struct where w, const json_t *v, const char *what,
                   double lo, bool lo_open, double hi, bool hi_open, float *out)
{
    const double x = json_number_value(v);
    const bool number = json_is_number(v) && isfinite(x);
    /* beyond FLT_MAX the conversion would be undefined: such a value is out of every range */
    const float f = number && fabs(x) <= FLT_MAX ? (float)x : (float)INFINITY;
    if (number && isfinite(f) && in_range((double)f, lo, lo_open, hi, hi_open)) {
        *out = f;
        return 0;
    }
    char got[TPU__QUOTE_BYTES + 32], stored[64] = "";
    tpu__json_describe(v, got, sizeof got);
    if (number && in_range(x, lo, lo_open, hi, hi_open))
        snprintf(stored, sizeof stored, ", which is %.9g as the 32-bit float the model keeps",
                 (double)f);
    return tpu__mf_fail(m, w, json_is_number(v) ? TPU_ERANGE : TPU_EPARSE,
                        "%s must be a number %s %g and %s %g; got %s%s%s", what,
                        lo_open ? "greater than" : "at least", lo,
                        hi_open ? "less than" : "at most", hi, got, stored,
                        json_is_string(v) ? " (write numbers without quotes)" : "");
}

int tpu__mf_bool(const struct mf *m, struct where w, const json_t *v, const char *what,
                 bool *out)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    char got[TPU__QUOTE_BYTES + 32];
    return tpu__mf_fail(m, w, TPU_EPARSE, "%s must be true or false (without quotes); got %s", what,
                        tpu__json_describe(v, got, sizeof got));
}

/* One of `choices` (n of them); the index into *out. */
int tpu__mf_choice(const struct mf *m, struct where w, const json_t *v, const char *what,
                   const char *const *choices, size_t n, unsigned *out)
{
    char got[TPU__QUOTE_BYTES + 32], list[256] = "", hint[TPU__QUOTE_BYTES + 32] = "";
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        const char *best = NULL;
        size_t best_d = 3;
        for (size_t i = 0; i < n; i++) {
            if (!strcmp(s, choices[i])) {
                *out = (unsigned)i;
                return 0;
            }
            size_t dist = tpu__edit_distance(s, choices[i]);
            if (dist < best_d) {
                best_d = dist;
                best = choices[i];
            }
        }
        tpu__did_you_mean(best, hint, sizeof hint);
    }
    for (size_t i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                 i == 0 ? "" : i + 1 == n ? " or " : ", ", choices[i]);
    return tpu__mf_fail(m, w, TPU_EPARSE, "%s must be %s; got %s%s", what, list,
                        tpu__json_describe(v, got, sizeof got), hint);
}

/* An identifier of at most TPU_NET_NAME_MAX characters: a letter or '_', then letters,
 * digits and '_'. */
static bool is_identifier(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > TPU_NET_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

int tpu__mf_name(const struct mf *m, struct where w, const json_t *v, const char *what,
                 const char **out)
{
    if (json_is_string(v) && is_identifier(json_string_value(v))) {
        *out = json_string_value(v);
        return 0;
    }
    char got[TPU__QUOTE_BYTES + 32];
    return tpu__mf_fail(m, w, json_is_string(v) ? TPU_ERANGE : TPU_EPARSE,
                        "%s must be a name of 1 to %d letters, digits and '_', not starting with a "
                        "digit (such as \"conv_1\"); got %s",
                        what, TPU_NET_NAME_MAX, tpu__json_describe(v, got, sizeof got));
}

/* A window or stride: a whole number n (n x n) or [h, w]. */
int tpu__mf_pair(const struct mf *m, struct where w, const json_t *v, const char *key,
                 uint32_t *h, uint32_t *wd)
{
    char what[64];
    snprintf(what, sizeof what, "\"%s\"", key);
    if (json_is_array(v)) {
        if (json_array_size(v) != 2) {
            char got[64];
            return tpu__mf_fail(m, w, TPU_EPARSE,
                                "\"%s\" must be a whole number n (for n x n) or a pair [h, w]; got "
                                "%s",
                                key, tpu__json_describe(v, got, sizeof got));
        }
        struct where e0 = w, e1 = w;
        e0.elem = 0;
        e1.elem = 1;
        snprintf(what, sizeof what, "\"%s\"'s h", key);
        int rc = tpu__mf_whole(m, e0, json_array_get(v, 0), what, 1, MF_MAX_WINDOW, h);
        snprintf(what, sizeof what, "\"%s\"'s w", key);
        return rc ? rc : tpu__mf_whole(m, e1, json_array_get(v, 1), what, 1, MF_MAX_WINDOW, wd);
    }
    if (!json_is_integer(v)) {
        char got[TPU__QUOTE_BYTES + 32];
        return tpu__mf_fail(m, w, TPU_EPARSE,
                            "\"%s\" must be a whole number n (for n x n) or a pair [h, w]; got %s",
                            key, tpu__json_describe(v, got, sizeof got));
    }
    int rc = tpu__mf_whole(m, w, v, what, 1, MF_MAX_WINDOW, h);
    *wd = *h;
    return rc;
}

/* A shape [h, w, c], or [c] for 1 x 1 x c. */
int tpu__mf_shape(const struct mf *m, struct where w, const json_t *v, const char *key,
                  struct tpu_shape *out)
{
    size_t n = json_array_size(v);
    if (!json_is_array(v) || (n != 1 && n != 3)) {
        char got[TPU__QUOTE_BYTES + 32];
        return tpu__mf_fail(m, w, TPU_EPARSE,
                            "\"%s\" must be a shape [h, w, c] (or [c] for a vector); got %s", key,
                            tpu__json_describe(v, got, sizeof got));
    }
    uint32_t dims[3] = {1, 1, 1};
    static const char *const axes[3] = {"h", "w", "c"};
    for (size_t i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "\"%s\"'s %s", key, axes[n == 1 ? 2 : i]);
        struct where e = w;
        e.elem = (long)i;
        int rc = tpu__mf_whole(m, e, json_array_get(v, i), what, 1, MF_MAX_SIZE,
                               &dims[n == 1 ? 2 : i]);
        if (rc)
            return rc;
    }
    *out = (struct tpu_shape){dims[0], dims[1], dims[2]};
    return 0;
}

