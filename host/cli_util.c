/* Helpers shared by the subcommands: error printing and strict number parsing. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli.h"

int tpu__cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "tpusim %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int tpu__cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t min,
                       uint64_t max, uint64_t *out)
{
    char *end = NULL;
    if (!text || !*text || *text == '-' || *text == '+')
        goto bad;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        goto bad;
    *out = (uint64_t)v;
    return 0;
bad:
    return tpu__cli_error(cmd, TPU_CLI_USAGE,
                          "%s '%s' is not a whole number from %" PRIu64 " to %" PRIu64
                          "; give e.g. %s %" PRIu64,
                          opt, text ? text : "", min, max, opt, min);
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
