/* CSVLogger (keras.h's tpu_callback_csv_logger): the file Keras 2.15 writes with Python's csv
 * module (excel dialect), column for column and byte for byte where the values agree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keras/callbacks_int.h"
#include "util.h"

struct csv_logger {
    char *filename;
    char sep;
    bool append;
    FILE *f;
    bool append_header;
    bool have_keys;
    uint32_t n_keys;
    char keys[2 * TPU_LOGS_MAX][TPU_LOG_NAME_MAX + 5];
};

static void csv_destroy(void *ctx)
{
    struct csv_logger *c = ctx;
    if (c->f)
        fclose(c->f);
    free(c->filename);
    free(c);
}

/* One field, quoted as csv.QUOTE_MINIMAL does (the separator, a quote, \r or \n inside). */
static void put_field(const struct csv_logger *c, const char *s)
{
    bool quote = strchr(s, c->sep) || strpbrk(s, "\"\r\n");
    if (!quote) {
        fputs(s, c->f);
        return;
    }
    fputc('"', c->f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', c->f);
        fputc(*s, c->f);
    }
    fputc('"', c->f);
}

static int csv_train_begin(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                           struct tpu_diag *d)
{
    (void)m, (void)logs;
    struct csv_logger *c = ctx;
    char q[TPU__QUOTE_PATH_BYTES];
    c->append_header = true;
    if (c->append) {
        FILE *r = fopen(c->filename, "r");
        if (r) {
            int ch = fgetc(r);
            c->append_header = ch == EOF; /* Keras: not len(f.readline()) */
            fclose(r);
        }
    }
    if (c->f)
        fclose(c->f);
    c->f = fopen(c->filename, c->append ? "a" : "w");
    if (!c->f)
        return tpu__fail(d, TPU_EIO, "CSVLogger: cannot open '%s' for writing: %s; give a "
                         "file in a directory that exists and that you may write to",
                         tpu__quote(c->filename, q, sizeof q), strerror(errno));
    c->have_keys = false;
    return 0;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(a, b);
}

static int csv_epoch_end(void *ctx, struct tpu_keras_model *m, uint64_t epoch,
                         struct tpu_logs *logs, struct tpu_diag *d)
{
    struct csv_logger *c = ctx;
    char q[TPU__QUOTE_PATH_BYTES];
    if (!c->f)
        return tpu__fail(d, TPU_EINVAL, "CSVLogger: epoch %llu ended before training began "
                         "(on_train_begin opens '%s'); call the hooks in fit's order",
                         (unsigned long long)epoch, tpu__quote(c->filename, q, sizeof q));
    if (!c->have_keys) {
        /* the keys: sorted; when none is a "val_" one, "val_<key>" for each is added (Keras
         * does this so that a validation_freq > 1 run's later rows fit the header) */
        c->n_keys = 0;
        for (uint32_t k = 0; logs && k < logs->n && k < TPU_LOGS_MAX; k++)
            snprintf(c->keys[c->n_keys++], sizeof c->keys[0], "%s", logs->name[k]);
        qsort(c->keys, c->n_keys, sizeof c->keys[0], cmp_keys);
        bool val = false;
        for (uint32_t k = 0; k < c->n_keys; k++)
            val = val || !strncmp(c->keys[k], "val_", 4);
        if (!val) {
            const uint32_t n = c->n_keys;
            for (uint32_t k = 0; k < n; k++) {
                char key[sizeof c->keys[0] + 4];
                memcpy(key, "val_", 4);
                memcpy(key + 4, c->keys[k], sizeof c->keys[0]);
                key[sizeof c->keys[0] - 1] = '\0'; /* a log name has at most TPU_LOG_NAME_MAX */
                memcpy(c->keys[c->n_keys++], key, sizeof c->keys[0]);
            }
        }
        c->have_keys = true;
        if (c->append_header) {
            put_field(c, "epoch");
            for (uint32_t k = 0; k < c->n_keys; k++) {
                fputc(c->sep, c->f);
                put_field(c, c->keys[k]);
            }
            fputs("\r\n", c->f);
        }
    }
    (void)m; /* Keras writes "NA" for a missing key whether or not model.stop_training */
    fprintf(c->f, "%llu", (unsigned long long)epoch);
    for (uint32_t k = 0; k < c->n_keys; k++) {
        fputc(c->sep, c->f);
        int i = tpu__logs_find(logs, c->keys[k]);
        char v[64];
        put_field(c, i < 0 ? "NA" : tpu__py_repr(logs->value[i], false, v, sizeof v));
    }
    fputs("\r\n", c->f);
    if (fflush(c->f) || ferror(c->f))
        return tpu__fail(d, TPU_EIO, "CSVLogger: cannot write '%s': %s; free space or give "
                         "another file", tpu__quote(c->filename, q, sizeof q), strerror(errno));
    return 0;
}

static int csv_train_end(void *ctx, struct tpu_keras_model *m, const struct tpu_logs *logs,
                         struct tpu_diag *d)
{
    (void)m, (void)logs;
    struct csv_logger *c = ctx;
    if (!c->f)
        return 0;
    int rc = fclose(c->f);
    c->f = NULL;
    c->have_keys = false;
    if (rc) {
        char q[TPU__QUOTE_PATH_BYTES];
        return tpu__fail(d, TPU_EIO, "CSVLogger: cannot write '%s': %s; free space or give "
                         "another file", tpu__quote(c->filename, q, sizeof q), strerror(errno));
    }
    return 0;
}

int tpu_callback_csv_logger(const char *filename, char separator, bool append,
                            struct tpu_callback *cb, struct tpu_diag *d)
{
    if (!cb)
        return tpu__fail(d, TPU_EINVAL, "CSVLogger: no callback to fill (cb is NULL)");
    memset(cb, 0, sizeof *cb);
    if (!filename || !filename[0])
        return tpu__fail(d, TPU_EINVAL, "CSVLogger: filename is empty; give the CSV file to "
                         "write, e.g. \"training.log\"");
    if (separator == '"' || separator == '\r' || separator == '\n' || separator == 0)
        return tpu__fail(d, TPU_EINVAL, "CSVLogger: separator 0x%02x cannot separate CSV "
                         "fields (it is a quote, a line end or NUL); give ',' (the default), "
                         "';' or '\\t'", (unsigned)(unsigned char)separator);
    struct csv_logger *c = calloc(1, sizeof *c);
    if (!c || !(c->filename = strdup(filename))) {
        free(c);
        return tpu__fail(d, TPU_ENOMEM, "CSVLogger: out of memory");
    }
    c->sep = separator;
    c->append = append;
    *cb = (struct tpu_callback){
        .ctx = c,
        .on_train_begin = csv_train_begin,
        .on_train_end = csv_train_end,
        .on_epoch_end = csv_epoch_end,
        .destroy = csv_destroy,
    };
    return 0;
}
