/* Where a value sits in JSON text, and how a message quotes a value (io/json_loc.h). The
 * scan follows a path through text that jansson has already accepted, so it checks nothing
 * and needs no recursion: arrays and objects it passes over are skipped by counting
 * brackets outside strings. */
#include <stdio.h>
#include <string.h>

#include "io/json_loc.h"
#include "util.h"

/* A position in the text while scanning it: `col` counts the characters of the current line
 * before p, so the character at p is at (line, col + 1). */
struct scan {
    const char *p, *end;
    int line, col;
};

static void scan_advance(struct scan *s)
{
    if (*s->p == '\n') {
        s->line++;
        s->col = 0;
    } else if (((unsigned char)*s->p & 0xC0) != 0x80) { /* not a UTF-8 continuation byte */
        s->col++;
    }
    s->p++;
}

static void scan_space(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        scan_advance(s);
}

/* Skips a string token (s->p at its opening quote). */
static void scan_string(struct scan *s)
{
    scan_advance(s);
    while (s->p < s->end && *s->p != '"') {
        if (*s->p == '\\' && s->p + 1 < s->end)
            scan_advance(s);
        scan_advance(s);
    }
    if (s->p < s->end)
        scan_advance(s);
}

/* Skips one value of valid JSON (s->p at its first character). Arrays and objects are
 * skipped by counting brackets outside strings, so nesting costs no recursion. */
static void scan_value(struct scan *s)
{
    if (s->p >= s->end)
        return;
    if (*s->p == '"') {
        scan_string(s);
        return;
    }
    if (*s->p != '[' && *s->p != '{') {
        while (s->p < s->end && !strchr(",]} \t\r\n", *s->p))
            scan_advance(s);
        return;
    }
    size_t depth = 0;
    while (s->p < s->end) {
        char c = *s->p;
        if (c == '"') {
            scan_string(s);
            continue;
        }
        scan_advance(s);
        if (c == '[' || c == '{')
            depth++;
        else if ((c == ']' || c == '}') && --depth == 0)
            return;
    }
}

/* Whether the string token tok[0..len) (its quotes included) spells `key`. */
static bool token_is(const char *tok, size_t len, const char *key)
{
    if (!memchr(tok, '\\', len))
        return len - 2 == strlen(key) && !memcmp(tok + 1, key, len - 2);
    json_t *v = json_loadb(tok, len, JSON_DECODE_ANY, NULL); /* escapes: let jansson decode */
    bool same = v && json_is_string(v) && !strcmp(json_string_value(v), key);
    json_decref(v);
    return same;
}

void tpu__json_locate(const char *text, size_t len, const struct tpu__json_step *path,
                      size_t n, bool at_key, int *line, int *col)
{
    struct scan s = {text, text + len, 1, 0};
    scan_space(&s);
    for (size_t k = 0; k < n && s.p < s.end; k++) {
        char open = path[k].key ? '{' : '[';
        if (*s.p != open)
            break;
        scan_advance(&s);
        scan_space(&s);
        bool found = false;
        for (size_t i = 0; s.p < s.end && *s.p != ']' && *s.p != '}'; i++) {
            if (path[k].key) {
                struct scan key = s;
                scan_string(&s);
                bool match = token_is(key.p, (size_t)(s.p - key.p), path[k].key);
                if (match && at_key && k + 1 == n) {
                    *line = key.line;
                    *col = key.col + 1;
                    return;
                }
                scan_space(&s);
                if (s.p < s.end && *s.p == ':')
                    scan_advance(&s);
                scan_space(&s);
                found = match;
            } else {
                found = i == path[k].index;
            }
            if (found)
                break;
            scan_value(&s);
            scan_space(&s);
            if (s.p < s.end && *s.p == ',')
                scan_advance(&s);
            scan_space(&s);
        }
        if (!found)
            break;
    }
    *line = s.line;
    *col = s.col + 1;
}

const char *tpu__json_describe(const json_t *v, char *buf, size_t n)
{
    char q[TPU__QUOTE_BYTES];
    switch (json_typeof(v)) {
    case JSON_INTEGER:
        snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        snprintf(buf, n, "%.15g", json_real_value(v));
        if (!strpbrk(buf, ".eEn")) /* 10.0 prints as "10": say it was written as a real */
            strncat(buf, ".0", n - strlen(buf) - 1);
        break;
    case JSON_STRING:
        snprintf(buf, n, "the string \"%s\"", tpu__quote(json_string_value(v), q, sizeof q));
        break;
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
        snprintf(buf, n, "an array of %zu", json_array_size(v));
        break;
    case JSON_OBJECT:
        snprintf(buf, n, "an object");
        break;
    }
    return buf;
}
