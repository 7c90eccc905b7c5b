/* Helpers shared by the subcommands: error printing, strict number parsing, and checks that
 * an output path can be written before any work is done. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tpusim/runtime.h"
#include "util.h"

/* TPUEstimator's input modes as the options spell them, in the enums' order (a word's index
 * is its value): one table for `tpusim train` and `tpusim shard`. */
const char *const tpu__cli_input_mode_words[] = {"PER_SHARD_V1", "PER_HOST_V1",
                                                 "PER_HOST_V2", "BROADCAST", NULL};
const int tpu__cli_input_mode_values[] = {TPU_PER_SHARD_V1, TPU_PER_HOST_V1,
                                          TPU_PER_HOST_V2, TPU_BROADCAST};
const char *const tpu__cli_eval_input_words[] = {"PER_HOST_V1", "SLICED", NULL};
const int tpu__cli_eval_input_values[] = {TPU_EVAL_PER_HOST_V1, TPU_EVAL_SLICED};

/* Where errors go: stderr, unless this process is one rank of several (cli_ranks.c), whose
 * errors carry its rank ("rank 1: tpusim train: error: ...") and whose other output is
 * dropped on ranks above 0. Set once by tpu__cli_set_error_output in main's thread before
 * any other thread exists, then only read: the process's output setup, not state. */
static FILE *error_stream;
static char error_prefix[32];
/* On ranks: where tpu__cli_error keeps its line instead of printing it (the ranks then agree
 * on their outcomes, cli_ranks.c, and a failure every rank shares is printed once). Set by
 * tpu__cli_set_error_capture in main's thread; written only from main's thread (the
 * commands' own errors; a pass failure on another thread prints through
 * tpu__cli_error_line). */
static char *capture_buf;
static size_t capture_size;

void tpu__cli_set_error_output(FILE *f, const char *prefix)
{
    error_stream = f;
    snprintf(error_prefix, sizeof error_prefix, "%s", prefix ? prefix : "");
}

FILE *tpu__cli_error_stream(void)
{
    return error_stream ? error_stream : stderr;
}

void tpu__cli_set_error_capture(char *buf, size_t size)
{
    capture_buf = size ? buf : NULL;
    capture_size = size;
    if (capture_buf)
        capture_buf[0] = '\0';
}

void tpu__cli_error_line(const char *line)
{
    FILE *f = tpu__cli_error_stream();
    fprintf(f, "%s%s\n", error_prefix, line);
    fflush(f);
}

/* The line of an error ("tpusim <cmd>: error: <text>"), printed or kept (capture). */
__attribute__((format(printf, 3, 0))) static void error_out(bool capture, const char *cmd,
                                                            const char *fmt, va_list ap)
{
    /* One line of valid UTF-8 whatever the user typed: values echoed raw (a newline, an
     * escape sequence, a stray byte) are shown as \xNN. */
    char msg[4096], safe[4 * sizeof msg], line[sizeof safe + 128];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    tpu__quote(msg, safe, sizeof safe);
    snprintf(line, sizeof line, "tpusim %s: error: %s%s", cmd, safe,
             n >= (int)sizeof msg ? "..." : "");
    if (!capture || !capture_buf) {
        tpu__cli_error_line(line);
        return;
    }
    if (!capture_buf[0]) /* the first error is the cause; what follows from it is not kept */
        snprintf(capture_buf, capture_size, "%s", line);
}

int tpu__cli_error_print(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_out(false, cmd, fmt, ap);
    va_end(ap);
    return code;
}

int tpu__cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_out(true, cmd, fmt, ap);
    va_end(ap);
    return code;
}

int tpu__cli_unknown_command(const char *cmd, const char *word, const char *const *names)
{
    char list[256] = "", qb[TPU__QUOTE_BYTES];
    size_t n = 0, len = 0;
    while (names[n])
        n++;
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0 ? "" : i + 1 == n ? " and " : ", ", names[i]);
    tpu__quote(word, qb, sizeof qb);
    if (!cmd) {
        fprintf(stderr, "tpusim: error: '%s' is not a command of tpusim; the commands are %s "
                "(run 'tpusim --help')\n", qb, list);
        return TPU_CLI_USAGE;
    }
    return tpu__cli_error(cmd, TPU_CLI_USAGE, "'%s' is not a command of tpusim %s; the commands "
                          "are %s (run 'tpusim %s --help')", qb, cmd, list, cmd);
}

void tpu__cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

double tpu__cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The directory part of path ("." for a bare name), in dir (cap bytes); false if too long. */
static bool parent_dir(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return snprintf(dir, cap, ".") < (int)cap;
    size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/x": the root */
    if (n >= cap)
        return false;
    memcpy(dir, path, n);
    dir[n] = '\0';
    return true;
}

/* Whether dir is an existing directory the process may create files in; if not, prints why
 * for option opt's value `value`. */
static int check_writable_dir(const char *cmd, const char *opt, const char *value,
                              const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s': the directory '%s' does not "
                                  "exist; create it first (mkdir -p '%s') or give another path",
                                  opt, value, dir, dir);
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s': the directory '%s' cannot be used: "
                              "%s", opt, value, dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s': '%s' is not a directory, so "
                              "nothing can be written under it; give another path", opt, value,
                              dir);
    if (access(dir, W_OK | X_OK) != 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s': the directory '%s' is not writable "
                              "(%s); give a path in a directory you can write", opt, value, dir,
                              strerror(errno));
    return 0;
}

int tpu__cli_check_output_file(const char *cmd, const char *opt, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s' is a directory; give the name of "
                                  "a file to write, e.g. '%s/%s'", opt, path, path,
                                  !strcmp(opt, "--output") ? "logits.npy" :
                                  !strcmp(opt, "--vcd") ? "mxu.vcd" : "trace.json");
        if (access(path, W_OK) != 0)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s' exists and is not writable (%s); "
                                  "give another file", opt, path, strerror(errno));
        if (!S_ISREG(st.st_mode))
            return 0; /* a device or FIFO is written in place: its directory is not touched */
    } else if (errno != ENOENT) {
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s' cannot be written: %s", opt, path,
                              strerror(errno));
    }
    char dir[4096];
    if (!parent_dir(path, dir, sizeof dir))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%.40s...' is longer than %zu characters",
                              opt, path, sizeof dir - 1);
    return check_writable_dir(cmd, opt, path, dir);
}

int tpu__cli_check_output_dir(const char *cmd, const char *opt, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s' is a file, not a directory; give "
                                  "a directory (it is created if missing)", opt, path);
        return check_writable_dir(cmd, opt, path, path);
    }
    if (errno != ENOENT)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%s' cannot be used: %s", opt, path,
                              strerror(errno));
    /* missing: it will be created with its missing parents, in the nearest one that exists */
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s '%.40s...' is longer than %zu characters",
                              opt, path, sizeof dir - 1);
    for (;;) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') /* "a/b/" is "a/b" */
            dir[--n] = '\0';
        char *slash = strrchr(dir, '/');
        if (!slash)
            snprintf(dir, sizeof dir, ".");
        else
            slash[slash == dir ? 1 : 0] = '\0';
        if (stat(dir, &st) == 0 || errno != ENOENT || !strcmp(dir, ".") || !strcmp(dir, "/"))
            break;
    }
    return check_writable_dir(cmd, opt, path, dir);
}

void tpu__cli_group_digits(uint64_t n, char *buf, size_t size)
{
    char digits[24];
    const int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
    size_t k = 0;
    for (int i = 0; i < len && k + 1 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0 && k + 2 < size)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    if (size)
        buf[k < size ? k : size - 1] = '\0';
}
