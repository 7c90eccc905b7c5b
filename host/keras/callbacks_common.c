/* What the built-in callbacks share: tpu_callback_free, finding a log entry, Python's float
 * repr (CSVLogger's values, LearningRateScheduler's message), the ModelCheckpoint filepath
 * formatter (a small subset of Python's str.format), and copies of the model's params on the
 * host (checkpoints, EarlyStopping's best weights). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "util.h"

void tpu_callback_free(struct tpu_callback *cb)
{
    if (!cb)
        return;
    if (cb->destroy && cb->ctx)
        cb->destroy(cb->ctx);
    memset(cb, 0, sizeof *cb);
}

int tpu__logs_find(const struct tpu_logs *l, const char *name)
{
    if (!l)
        return -1;
    for (uint32_t i = 0; i < l->n && i < TPU_LOGS_MAX; i++)
        if (!strcmp(l->name[i], name))
            return (int)i;
    return -1;
}

/* ---- Python's float repr ---------------------------------------------------------------- */

const char *tpu__py_repr(double v, bool as_f32, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return buf;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-inf" : "inf");
        return buf;
    }
    /* the shortest %e form that reads back exactly */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (as_f32 ? strtof(e, NULL) == (float)v : strtod(e, NULL) == v)
            break;
    }
    /* e is "[-]d[.ddd]e[+-]XX": its digits and the decimal point's position */
    const char *s = e;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[24];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (isdigit((unsigned char)*s) && nd < sizeof digits - 1)
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp10 = *s == 'e' ? atoi(s + 1) : 0;
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    if (nd == 1 && digits[0] == '0')
        decpt = 1;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (decpt <= -4 || decpt > 16) { /* Python's 'r': exponent form */
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+',
                              abs(exp10));
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int z = 0; z < -decpt; z++)
            out[o++] = '0';
        memcpy(out + o, digits, nd);
        o += nd;
    } else if ((size_t)decpt >= nd) {
        memcpy(out + o, digits, nd);
        o += nd;
        for (size_t z = nd; z < (size_t)decpt; z++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, digits, (size_t)decpt);
        o += (size_t)decpt;
        out[o++] = '.';
        memcpy(out + o, digits + decpt, nd - (size_t)decpt);
        o += nd - (size_t)decpt;
    }
    out[o] = 0;
    snprintf(buf, n, "%s", out);
    return buf;
}

/* ---- ModelCheckpoint's filepath ---------------------------------------------------------- */

/* Appends text to out[*o..cap); false when it does not fit. */
static bool put(char *out, size_t cap, size_t *o, const char *text, size_t len)
{
    if (*o + len >= cap)
        return false;
    memcpy(out + *o, text, len);
    *o += len;
    out[*o] = 0;
    return true;
}

/* One "{name:spec}" field's value: an integer (epoch, batch) or a log's float. */
static int format_field(const char *fmt, const char *name, const char *spec, bool is_int,
                        long long iv, double fv, char *text, size_t cap, struct tpu_diag *d)
{
    char q[TPU__QUOTE_PATH_BYTES];
    /* spec: [0][width][.precision][type], Python's format mini-language's common part */
    const char *s = spec;
    bool zero = false;
    if (*s == '0') {
        zero = true;
        s++;
    }
    int width = 0, prec = -1;
    while (isdigit((unsigned char)*s) && width < 1000)
        width = width * 10 + (*s++ - '0');
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            goto bad;
        prec = 0;
        while (isdigit((unsigned char)*s) && prec < 100)
            prec = prec * 10 + (*s++ - '0');
    }
    char type = *s ? *s++ : 0;
    if (*s || width > 200 || prec > 60)
        goto bad;
    if (type == 'd') {
        if (!is_int || prec >= 0)
            return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: \"%s\". "
                             "Reason: Unknown format code 'd' for object of type 'float' (field "
                             "'%s'); use a float format such as {%s:.4f}",
                             tpu__quote(fmt, q, sizeof q), name, name);
        snprintf(text, cap, zero ? "%0*lld" : "%*lld", width, iv);
        return 0;
    }
    if (type == 'f' || type == 'e' || type == 'g' || (type == 0 && prec >= 0)) {
        double v = is_int ? (double)iv : fv;
        const int pr = prec < 0 ? 6 : prec;
        switch (type) {
        case 'f':
            snprintf(text, cap, zero ? "%0*.*f" : "%*.*f", width, pr, v);
            break;
        case 'e':
            snprintf(text, cap, zero ? "%0*.*e" : "%*.*e", width, pr, v);
            break;
        default:
            snprintf(text, cap, zero ? "%0*.*g" : "%*.*g", width, pr, v);
            break;
        }
        return 0;
    }
    if (type == 0) { /* str(): the integer, or Python's repr of the float */
        char r[64];
        if (is_int)
            snprintf(r, sizeof r, "%lld", iv);
        else
            tpu__py_repr(fv, false, r, sizeof r);
        snprintf(text, cap, "%*s", width, r);
        return 0;
    }
bad:
    return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: \"%s\". Reason: "
                     "the format spec '%s' of field '%s' is not one tpusim formats; use "
                     "[0][width]d for epoch and batch ({epoch:02d}) and [.precision]f, e or g "
                     "for values ({val_loss:.2f})", tpu__quote(fmt, q, sizeof q), spec, name);
}

int tpu__format_filepath(const char *fmt, uint64_t epoch, int64_t batch,
                         const struct tpu_logs *logs, char *out, size_t cap, struct tpu_diag *d)
{
    char q[TPU__QUOTE_PATH_BYTES];
    size_t o = 0;
    out[0] = 0;
    for (const char *p = fmt; *p;) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            if (!put(out, cap, &o, p, 1))
                goto long_path;
            p += 2;
            continue;
        }
        if (*p == '}')
            return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: \"%s\". "
                             "Reason: Single '}' encountered in format string; write '}}' for "
                             "a brace", tpu__quote(fmt, q, sizeof q));
        if (*p != '{') {
            if (!put(out, cap, &o, p, 1))
                goto long_path;
            p++;
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end)
            return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: \"%s\". "
                             "Reason: Single '{' encountered in format string; close the field "
                             "with '}' or write '{{' for a brace",
                             tpu__quote(fmt, q, sizeof q));
        char field[96];
        size_t flen = (size_t)(end - p - 1);
        if (flen == 0 || flen >= sizeof field)
            return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: \"%s\". "
                             "Reason: a field must name epoch, batch or a log (%s); write "
                             "{epoch:02d} or {val_loss:.2f}", tpu__quote(fmt, q, sizeof q),
                             flen ? "this one is too long" : "'{}' names none");
        memcpy(field, p + 1, flen);
        field[flen] = 0;
        char *colon = strchr(field, ':');
        const char *spec = "";
        if (colon) {
            *colon = 0;
            spec = colon + 1;
        }
        char text[512]; /* the longest field: %.60f of 1.8e308, about 370 characters */
        int rc;
        if (!logs) { /* syntax only */
            rc = format_field(fmt, field, spec, !strcmp(spec, "") || strchr(spec, 'd'), 1, 1.0,
                              text, sizeof text, d);
        } else if (!strcmp(field, "epoch")) {
            rc = format_field(fmt, field, spec, true, (long long)epoch + 1, 0, text,
                              sizeof text, d);
        } else if (!strcmp(field, "batch") && batch >= 0 && tpu__logs_find(logs, "batch") < 0) {
            rc = format_field(fmt, field, spec, true, (long long)batch + 1, 0, text,
                              sizeof text, d);
        } else {
            int i = tpu__logs_find(logs, field);
            if (i < 0) {
                char names[512] = "epoch";
                if (batch >= 0)
                    strcat(names, ", batch");
                for (uint32_t k = 0; k < logs->n && strlen(names) < sizeof names - 40; k++) {
                    strcat(names, ", ");
                    strcat(names, logs->name[k]);
                }
                return tpu__fail(d, TPU_EINVAL, "Failed to format this callback filepath: "
                                 "\"%s\". Reason: '%s' (the fields a save here can fill: %s); "
                                 "name one of those", tpu__quote(fmt, q, sizeof q), field,
                                 names);
            }
            rc = format_field(fmt, field, spec, false, 0, logs->value[i], text, sizeof text, d);
        }
        if (rc)
            return rc;
        if (!put(out, cap, &o, text, strlen(text)))
            goto long_path;
        p = end + 1;
    }
    return 0;
long_path:
    return tpu__fail(d, TPU_ERANGE, "ModelCheckpoint: the filepath \"%s\" formats to more than "
                     "%zu bytes; give a shorter one", tpu__quote(fmt, q, sizeof q), cap - 1);
}

/* ---- the model's params on the host ------------------------------------------------------ */

bool tpu__param_is_slot(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".vel")) || (n > 2 && !strcmp(name + n - 2, ".m")) ||
           (n > 2 && !strcmp(name + n - 2, ".v"));
}

void tpu__param_set_free(struct tpu__param_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; s->data && i < s->n; i++)
        free(s->data[i]);
    free(s->data);
    free(s->name);
    free(s->rows);
    free(s->cols);
    memset(s, 0, sizeof *s);
}

int tpu__param_set_read(struct tpu_keras_model *m, bool weights_only, struct tpu__param_set *out,
                        struct tpu_diag *d)
{
    memset(out, 0, sizeof *out);
    struct tpu_estimator *est = tpu_keras_model_estimator(m);
    const size_t total = tpu_estimator_n_params(est);
    if (total == 0)
        return tpu__fail(d, TPU_EINVAL, "the model has no params yet: they are initialized by "
                         "its first fit, evaluate or predict; save or keep weights after it");
    out->name = calloc(total, sizeof *out->name);
    out->rows = calloc(total, sizeof *out->rows);
    out->cols = calloc(total, sizeof *out->cols);
    out->data = calloc(total, sizeof *out->data);
    if (!out->name || !out->rows || !out->cols || !out->data) {
        tpu__param_set_free(out);
        return tpu__fail(d, TPU_ENOMEM, "out of memory for the model's params");
    }
    int rc = 0;
    for (size_t i = 0; i < total && !rc; i++) {
        const char *name;
        uint32_t rows, cols;
        if ((rc = tpu_estimator_param_info(est, i, &name, &rows, &cols, d)))
            break;
        if (weights_only && tpu__param_is_slot(name))
            continue;
        size_t k = out->n;
        snprintf(out->name[k], sizeof out->name[k], "%s", name);
        out->rows[k] = rows;
        out->cols[k] = cols;
        size_t bytes = (size_t)rows * cols * sizeof(float);
        out->n++;
        if (!(out->data[k] = malloc(bytes ? bytes : 1))) {
            rc = tpu__fail(d, TPU_ENOMEM, "out of memory for param '%s'", out->name[k]);
            break;
        }
        rc = tpu_estimator_read_param(est, out->name[k], out->data[k], bytes, d);
    }
    if (rc)
        tpu__param_set_free(out);
    return rc;
}

int tpu__param_set_write(struct tpu_keras_model *m, const struct tpu__param_set *s,
                         struct tpu_diag *d)
{
    struct tpu_estimator *est = tpu_keras_model_estimator(m);
    for (size_t i = 0; i < s->n; i++) {
        int rc = tpu_estimator_write_param(est, s->name[i], s->data[i],
                                           (size_t)s->rows[i] * s->cols[i] * sizeof(float), d);
        if (rc)
            return rc;
    }
    return 0;
}
