/* Fuzz target: the values of `tpusim fit`'s options that have their own parsers, and the
 * ModelCheckpoint filepath formatter. The first byte picks the parser (byte % 5); the rest
 * of the input, up to its first NUL, is the text a user gives:
 *   0 --class-weight C:W,...     tpu__cli_fit_parse_class_weight, against 1 + (byte / 5) % 16
 *                                classes: a success lists every class once, each weight
 *                                finite and not negative;
 *   1 --validation-freq N|E,...  through tpu__cli_fit_parse_args (with --validation-split 0.5):
 *                                a success holds 1 to 64 epochs from 1 to 1000000, and an
 *                                integer (no list) is one entry;
 *   2 --early-stopping K=V,...   through tpu__cli_fit_parse_args: a success has patience and
 *                                start_from_epoch up to 1000000, finite min_delta, a finite or
 *                                NaN baseline, a mode of auto/min/max and a non-empty monitor;
 *   3 --checkpoint-freq epoch|N  through tpu__cli_fit_parse_args (with --checkpoint ckpt): a
 *                                success is 0 for 'epoch' only, else 1 to 2^40 batches;
 *   4 the filepath formatter     tpu__format_filepath with the logs a run has and without
 *                                (the syntax check --checkpoint makes), into a buffer of
 *                                1 + (byte / 5) % 128 bytes and one of 4096 bytes, each
 *                                allocated to its exact size: whatever the result, the output
 *                                is NUL-terminated inside its buffer, and a failure explains
 *                                itself.
 * The command-line paths return an exit code (0 to 125) and print their errors to stderr, so
 * the test runs this target with --quiet-target. */
#include <math.h>

#include "cli_fit.h"
#include "fuzz_util.h"
#include "../../host/keras/callbacks_int.h"

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz harness: %s (input \"%s\")\n", what, text);
    abort();
}

static void check_exit_code(int rc, const char *text)
{
    if (rc < 0 || rc > 125)
        die("the fit options' parser returned no exit code", text);
}

static void class_weight(const char *text, uint32_t classes)
{
    float *w = malloc(sizeof(float) * TPU__CLI_FIT_MAX_CLASSES);
    if (!w)
        fuzz_die("malloc for", "the class weights");
    for (uint32_t i = 0; i < TPU__CLI_FIT_MAX_CLASSES; i++)
        w[i] = -1.0f;
    uint32_t n = 77;
    int rc = tpu__cli_fit_parse_class_weight("fit", text, classes, w, &n);
    check_exit_code(rc, text);
    if (rc && n != 0)
        die("a failed --class-weight left a count of weights", text);
    if (!rc) {
        if (n != classes)
            die("a parsed --class-weight does not list every class", text);
        for (uint32_t i = 0; i < classes; i++)
            if (!isfinite(w[i]) || w[i] < 0)
                die("a parsed class weight is not finite or is negative", text);
    }
    free(w);
}

/* Runs `tpusim fit` 's option parser on argv (argc entries); returns its exit code. */
static int fit_args(struct fit_opts *o, int argc, const char *const *argv, const char *text)
{
    memset(o, 0, sizeof *o);
    o->t.cmd = "fit";
    int rc = tpu__cli_fit_parse_args(argc, (char **)argv, o);
    check_exit_code(rc, text);
    return rc;
}

static void validation_freq(struct fit_opts *o, const char *text)
{
    const char *argv[] = {"fit", "--validation-split", "0.5", "--validation-freq", text};
    if (fit_args(o, 5, argv, text))
        return;
    if (o->n_validation_freq < 1 || o->n_validation_freq > 64 ||
        (!o->validation_freq_is_list && o->n_validation_freq != 1))
        die("a parsed --validation-freq has a bad count of epochs", text);
    for (uint32_t i = 0; i < o->n_validation_freq; i++)
        if (o->validation_freq[i] < 1 || o->validation_freq[i] > 1000000)
            die("a parsed --validation-freq epoch is out of 1 .. 1000000", text);
}

static void early_stopping(struct fit_opts *o, const char *text)
{
    const char *argv[] = {"fit", "--early-stopping", text};
    if (fit_args(o, 3, argv, text))
        return;
    const struct tpu_early_stopping_args *a = &o->es;
    if (a->patience > 1000000 || a->start_from_epoch > 1000000 || !isfinite(a->min_delta) ||
        isinf(a->baseline))
        die("a parsed --early-stopping number is out of range", text);
    if (!a->mode || (strcmp(a->mode, "auto") && strcmp(a->mode, "min") && strcmp(a->mode, "max")))
        die("a parsed --early-stopping mode is not auto, min or max", text);
    if (!a->monitor || !memchr(a->monitor, '\0', TPU_LOG_NAME_MAX + 1) || !a->monitor[0])
        die("a parsed --early-stopping monitor is empty or too long", text);
}

static void checkpoint_freq(struct fit_opts *o, const char *text)
{
    const char *argv[] = {"fit", "--checkpoint", "ckpt", "--checkpoint-freq", text};
    if (fit_args(o, 5, argv, text))
        return;
    if ((o->checkpoint_freq == 0) != !strcmp(text, "epoch") ||
        o->checkpoint_freq > (UINT64_C(1) << 40))
        die("a parsed --checkpoint-freq is out of range", text);
}

static void format_into(const char *text, const struct tpu_logs *logs, uint64_t epoch,
                        int64_t batch, size_t cap)
{
    char *out = malloc(cap); /* exactly cap bytes: a write past it is an ASan finding */
    if (!out)
        fuzz_die("malloc for", "the formatted path");
    memset(out, 'x', cap);
    struct tpu_diag d = {0};
    int rc = tpu__format_filepath(text, epoch, batch, logs, out, cap, &d);
    fuzz_check_diag("tpu__format_filepath", rc, &d);
    if (!memchr(out, '\0', cap))
        die("the formatted path is not NUL-terminated inside its buffer", text);
    if (!memchr(d.msg, '\0', sizeof d.msg))
        die("the formatter's message is not NUL-terminated", text);
    free(out);
}

static void filepath(const char *text, uint8_t selector)
{
    struct tpu_logs logs;
    memset(&logs, 0, sizeof logs);
    tpu_logs_set(&logs, "loss", 0.123456789);
    tpu_logs_set(&logs, "accuracy", 0.875);
    tpu_logs_set(&logs, "val_loss", -1.5e-7);
    tpu_logs_set(&logs, "val_accuracy", 1e17);
    tpu_logs_set(&logs, "lr", NAN);
    const size_t small = 1 + (size_t)(selector / 5) % 128;
    const uint64_t epoch = selector % 2 ? UINT64_C(41) : UINT64_C(999999);
    const int64_t batch = selector % 3 ? -1 : 123456;
    format_into(text, &logs, epoch, batch, small);
    format_into(text, &logs, epoch, batch, 4096);
    format_into(text, NULL, 0, 0, small);
    format_into(text, NULL, 0, 0, 4096);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t selector = data[0];
    char *text = fuzz_string(data + 1, size - 1);
    struct fit_opts *o = malloc(sizeof *o);
    if (!o)
        fuzz_die("malloc for", "the fit options");
    switch (selector % 5) {
    case 0:
        class_weight(text, 1 + (uint32_t)(selector / 5) % 16);
        break;
    case 1:
        validation_freq(o, text);
        break;
    case 2:
        early_stopping(o, text);
        break;
    case 3:
        checkpoint_freq(o, text);
        break;
    default:
        filepath(text, selector);
        break;
    }
    free(o);
    free(text);
    return 0;
}
