/* The device program's text form, parsing: tpu_program_parse (include/tpusim/program.h).
 * Printing is program_print.c; the attribute table both use is in program_int.h. This
 * comment is the text form's reference: the grammar below is what the printer writes and the
 * parser reads.
 *
 * The text is what a reader sees of a program (tpusim prints it, tests and users write it),
 * so it reads like the math: outputs, '=', the op, its inputs, then attributes. Printing is
 * canonical (one spelling per program), so print -> parse -> print gives the same bytes and
 * parse(print(p)) equals p field by field. Parsing builds the program with the builder and
 * stops at the first error with "origin:line:col: message" naming what was expected and what
 * was found. It does not apply the semantic rules (shapes, dtypes, dataflow): that is
 * tpu_program_verify's job (program_verify.c).
 *
 * Grammar. One statement per line; '#' starts a comment that runs to the end of the line;
 * blank lines, indentation and spaces between tokens are free.
 *
 *   text      := header decl* stmt*
 *   header    := 'program' NAME
 *   decl      := 'var' NAME
 *              | ('param' | 'temp') NAME ':' DTYPE '[' DIM ',' DIM ']'
 *   stmt      := op | loop
 *   loop      := 'loop' VAR '{'  (newline)  op*  '}'         at most one level deep
 *   op        := [BUF (',' BUF)* '='] OPNAME [BUF (',' BUF)*] attr*
 *              | 'var_add' VAR INT
 *   attr      := 'trans_a' | 'trans_b' | 'accumulate'
 *              | ('passes' | 'axis' | 'shift') '=' INT
 *              | 'reduce' '=' ('sum' | 'mean' | INT)
 *              | 'group' '=' ('replicas' | 'replica_cores' | INT)
 *              | 'var' '=' VAR
 *              | ('alpha' | 'beta' | 'gamma' | 'delta' | 'eps') '=' FLOAT
 *   NAME      := [A-Za-z_][A-Za-z0-9_.]*, at most 47 characters (BUF, VAR: declared names)
 *   OPNAME    := a name of the op table except loop_begin and loop_end (written as loop/})
 *   DTYPE     := 'f32' | 'bf16' | 'int8' | 'int32'
 *   DIM       := a decimal integer from 1 to 4294967295
 *   INT       := [+-]? decimal digits, in the range of the attribute's field
 *   FLOAT     := a C decimal or hexadecimal float ("0.1", "1e-3", "0x1p-7"), "inf", "-inf",
 *                "nan" (the quiet NaN 0x7fc00000) or "nan:0x" and 8 hex digits (any other
 *                NaN, by its exact bits); it may not overflow to infinity or underflow to 0
 *
 * Declarations come before the first op. Loops do not nest; a second loop after the first
 * parses (the verifier rejects it), as does anything else that is well formed but wrong.
 * Outputs are listed before '=' and inputs after the op name, in the order of program.h's
 * operand roles; an op that updates buffers in place (sgd_momentum, adam) lists them as
 * outputs: "w1, v1 = sgd_momentum g1 alpha=0.1". The first word after the op name is an input
 * unless it is one of the op's flags and no buffer has that name; the inputs end at the first
 * name not preceded by a ','.
 *
 * The op table (program.h) gives each op's syntax, operands and attributes. Attributes an op
 * must state (its `required` column; a forgotten one would silently be zero): scale alpha;
 * reduce_sum/reduce_max axis; softmax_xent alpha; sgd_momentum alpha; adam var, alpha, beta,
 * delta, eps; all_reduce reduce; collective_permute shift, group. The others default to zero
 * (passes to 1) and are printed only when they differ. An attribute the op does not read is
 * printed if it is not zero, so that nothing is hidden, but the parser rejects it. How the
 * printer lays the lines out is in program_print.c's opening comment. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_int.h"
#include "util.h"

#define NAME_MAX_CHARS 47

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- parsing ------------------------------------------------------------------------------ */

struct parser {
    const char *origin;
    const char *line_start, *line_end, *cur; /* the current line and the cursor in it */
    size_t line;                             /* 1-based */
    struct tpu_program *p;
    struct tpu_diag *d;
    size_t *buf_line, *var_line; /* the line each buffer and variable was declared on */
    size_t cap_buf_line, cap_var_line;
    size_t header_line;
    size_t first_op_line; /* 0 until an op is seen */
    size_t loop_line;     /* the open loop's line, 0 when none is open */
};

static int perr(struct parser *ps, const char *at, const char *fmt, ...) TPU__PRINTF(3, 4);

/* A parse error at `at` (a position in the current line). */
static int perr(struct parser *ps, const char *at, const char *fmt, ...)
{
    char msg[TPU_DIAG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t col = (size_t)(at - ps->line_start) + 1;
    return tpu__fail(ps->d, TPU_EPARSE, "%s:%zu:%zu: %s", ps->origin, ps->line, col, msg);
}

/* A failure of the builder while parsing: out of memory stays TPU_ENOMEM, the rest (a name or
 * size the builder refuses) is a parse error at `at`. */
static int builder_fail(struct parser *ps, const char *at, int rc, const struct tpu_diag *d)
{
    if (rc == TPU_ENOMEM)
        return tpu__fail(ps->d, TPU_ENOMEM, "%s:%zu: out of memory", ps->origin, ps->line);
    return perr(ps, at, "%s", d->msg);
}

static bool is_ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_ident_char(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

static void skip_ws(struct parser *ps)
{
    while (ps->cur < ps->line_end && (*ps->cur == ' ' || *ps->cur == '\t' || *ps->cur == '\r'))
        ps->cur++;
    if (ps->cur < ps->line_end && *ps->cur == '#')
        ps->cur = ps->line_end;
}

static bool at_eol(struct parser *ps)
{
    skip_ws(ps);
    return ps->cur == ps->line_end;
}

/* Describes what is at the cursor, for "found ..." in messages. */
static void describe(struct parser *ps, char out[64])
{
    skip_ws(ps);
    const char *s = ps->cur;
    if (s == ps->line_end) {
        snprintf(out, 64, "the end of the line");
        return;
    }
    size_t n = 0;
    if (is_ident_char(*s) || *s == '-' || *s == '+') {
        while (s + n < ps->line_end && (is_ident_char(s[n]) || s[n] == '-' || s[n] == '+' ||
                                         s[n] == ':'))
            n++;
    } else {
        /* one character: a UTF-8 one whole, so that it shows as itself (or as \xNN bytes) */
        n = 1;
        if ((unsigned char)*s >= 0xC0)
            while (n < 4 && s + n < ps->line_end && ((unsigned char)s[n] & 0xC0) == 0x80)
                n++;
    }
    char q[48];
    snprintf(out, 64, "'%s'", tpu__quote_n(s, n, q, sizeof q));
}

static int expect_char(struct parser *ps, char c, const char *context)
{
    skip_ws(ps);
    if (ps->cur < ps->line_end && *ps->cur == c) {
        ps->cur++;
        return 0;
    }
    char found[64];
    describe(ps, found);
    return perr(ps, ps->cur, "expected '%c' %s, found %s", c, context, found);
}

static int expect_eol(struct parser *ps, const char *after)
{
    if (at_eol(ps))
        return 0;
    char found[64];
    describe(ps, found);
    return perr(ps, ps->cur, "expected the end of the line after %s, found %s", after, found);
}

/* Reads a NAME into out (at most 47 characters); `what` says what was expected. */
static int read_name(struct parser *ps, char out[NAME_MAX_CHARS + 1], const char *what)
{
    skip_ws(ps);
    const char *s = ps->cur;
    if (s == ps->line_end || !is_ident_start(*s)) {
        char found[64];
        describe(ps, found);
        return perr(ps, s, "expected %s, found %s", what, found);
    }
    size_t n = 0;
    while (s + n < ps->line_end && is_ident_char(s[n]))
        n++;
    if (n > NAME_MAX_CHARS)
        return perr(ps, s, "name '%.40s...' has %zu characters; at most %d are allowed", s, n,
                    NAME_MAX_CHARS);
    memcpy(out, s, n);
    out[n] = '\0';
    ps->cur = s + n;
    return 0;
}

/* True if the next token is a NAME (without consuming it). */
static bool next_is_name(struct parser *ps)
{
    skip_ws(ps);
    return ps->cur < ps->line_end && is_ident_start(*ps->cur);
}

/* The character after the NAME at the cursor (skipping spaces), or '\0' at the end. */
static char char_after_name(struct parser *ps)
{
    const char *s = ps->cur;
    while (s < ps->line_end && is_ident_char(*s))
        s++;
    while (s < ps->line_end && (*s == ' ' || *s == '\t' || *s == '\r'))
        s++;
    return s < ps->line_end && *s != '#' ? *s : '\0';
}

/* Reads a value token (up to a space, ',', ']', '#' or the end of the line) into out. */
static const char *read_token(struct parser *ps, char out[64])
{
    skip_ws(ps);
    const char *s = ps->cur;
    size_t n = 0;
    while (s + n < ps->line_end && s[n] != ' ' && s[n] != '\t' && s[n] != '\r' &&
           s[n] != ',' && s[n] != ']' && s[n] != '#')
        n++;
    /* quoted: a token with a control character or a byte that is not UTF-8 shows it as \xNN
     * in messages, and an overlong one ends in "..." (it then matches no name or number
     * instead of being cut to a different valid one) */
    tpu__quote_n(s, n, out, 64);
    ps->cur = s + n;
    return s;
}

/* Keeps the candidate closest to `word` in *best (a suggestion only if close enough). */
static void consider(const char *word, const char *cand, const char **best, size_t *best_d)
{
    size_t lw = strlen(word), lc = strlen(cand);
    size_t dist = tpu__edit_distance(word, cand);
    size_t limit = lw / 3 > 2 ? lw / 3 : 2;
    bool prefix = lw >= 3 && lc > lw && strncmp(word, cand, lw) == 0;
    if (prefix && dist > limit)
        dist = limit; /* "softmax" -> "softmax_xent" */
    if (dist <= limit && dist < *best_d) {
        *best = cand;
        *best_d = dist;
    }
}

static int grow_lines(size_t **arr, size_t *cap, size_t n)
{
    if (n < *cap)
        return 0;
    size_t cap_new = *cap ? *cap * 2 : 64;
    size_t *a = realloc(*arr, cap_new * sizeof *a);
    if (!a)
        return TPU_ENOMEM;
    *arr = a;
    *cap = cap_new;
    return 0;
}

/* Fails if `name` is already declared. */
static int check_new_name(struct parser *ps, const char *at, const char *name)
{
    uint32_t id;
    if (tpu_program_find_buffer(ps->p, name, &id) == 0)
        return perr(ps, at, "duplicate name '%s': already declared as a buffer at line %zu",
                    name, ps->buf_line[id]);
    if (tpu_program_find_var(ps->p, name, &id) == 0)
        return perr(ps, at, "duplicate name '%s': already declared as a variable at line %zu",
                    name, ps->var_line[id]);
    return 0;
}

static int parse_header(struct parser *ps)
{
    const char *at = (skip_ws(ps), ps->cur);
    size_t n = 0;
    while (at + n < ps->line_end && is_ident_char(at[n]))
        n++;
    if (n != 7 || strncmp(at, "program", 7) != 0) {
        char found[64];
        describe(ps, found);
        return perr(ps, at, "expected 'program <name>' as the first line, found %s", found);
    }
    ps->cur = at + n;
    char name[NAME_MAX_CHARS + 1];
    int rc = read_name(ps, name, "the program's name after 'program'");
    if (!rc)
        rc = expect_eol(ps, "the program's name");
    if (rc)
        return rc;
    rc = tpu_program_create(name, &ps->p);
    if (rc)
        return tpu__fail(ps->d, TPU_ENOMEM, "%s:%zu: out of memory creating program '%s'",
                         ps->origin, ps->line, name);
    ps->header_line = ps->line;
    return 0;
}

/* "var NAME" or "param|temp NAME: DTYPE[DIM, DIM]" after the keyword (`kw`). */
static int parse_decl(struct parser *ps, const char *kw, const char *kw_at)
{
    if (ps->first_op_line)
        return perr(ps, kw_at, "'%s' declaration after the first op (line %zu); declare every "
                    "variable and buffer before the ops", kw, ps->first_op_line);
    bool is_var = strcmp(kw, "var") == 0;
    char name[NAME_MAX_CHARS + 1];
    const char *name_at = (skip_ws(ps), ps->cur);
    int rc = read_name(ps, name, is_var ? "a variable name after 'var'"
                                        : "a buffer name after the buffer kind");
    if (!rc)
        rc = check_new_name(ps, name_at, name);
    if (rc)
        return rc;
    if (is_var) {
        rc = expect_eol(ps, "the variable's name");
        if (rc)
            return rc;
        if (grow_lines(&ps->var_line, &ps->cap_var_line, tpu_program_n_vars(ps->p)))
            return builder_fail(ps, name_at, TPU_ENOMEM, NULL);
        struct tpu_diag d;
        uint32_t id;
        rc = tpu_program_add_var(ps->p, name, &id, &d);
        if (rc)
            return builder_fail(ps, name_at, rc, &d);
        ps->var_line[id] = ps->line;
        return 0;
    }
    rc = expect_char(ps, ':', "after the buffer name (as in 'x: f32[8, 16]')");
    if (rc)
        return rc;
    char tok[64];
    skip_ws(ps);
    const char *dt_at = ps->cur;
    size_t n = 0;
    while (dt_at + n < ps->line_end && is_ident_char(dt_at[n]))
        n++;
    snprintf(tok, sizeof tok, "%.*s", (int)(n < 63 ? n : 63), dt_at);
    ps->cur = dt_at + n;
    enum tpu_dtype dtype;
    if (n == 0 || tpu_dtype_parse(tok, &dtype)) {
        ps->cur = dt_at;
        char found[64];
        describe(ps, found);
        return perr(ps, dt_at, "expected a dtype (f32, bf16, int8 or int32) for buffer '%s', "
                    "found %s", name, found);
    }
    rc = expect_char(ps, '[', "after the dtype (as in 'f32[8, 16]')");
    if (rc)
        return rc;
    uint32_t dims[2];
    for (int k = 0; k < 2; k++) {
        skip_ws(ps);
        const char *at = read_token(ps, tok);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(tok, &end, 10);
        bool digits = tok[0] >= '0' && tok[0] <= '9';
        if (!digits || *end != '\0') {
            ps->cur = at;
            char found[64];
            describe(ps, found);
            return perr(ps, at, "expected the %s of buffer '%s' (a positive integer), found %s",
                        k == 0 ? "row count" : "column count", name, found);
        }
        if (errno == ERANGE || v > UINT32_MAX || v == 0)
            return perr(ps, at, "%s %s of buffer '%s' is out of range; dimensions are 1 to "
                        "4294967295", k == 0 ? "row count" : "column count", tok, name);
        dims[k] = (uint32_t)v;
        if (k == 0) {
            skip_ws(ps);
            if (ps->cur < ps->line_end && *ps->cur == ']')
                return perr(ps, ps->cur, "buffer '%s' has one dimension; buffers are 2-D "
                            "[rows, cols]: write [1, %s] for a row vector", name, tok);
            rc = expect_char(ps, ',', "between the two dimensions");
        } else {
            skip_ws(ps);
            if (ps->cur < ps->line_end && *ps->cur == ',')
                return perr(ps, ps->cur, "buffer '%s' has more than two dimensions; buffers "
                            "are 2-D [rows, cols]", name);
            rc = expect_char(ps, ']', "after the two dimensions");
        }
        if (rc)
            return rc;
    }
    rc = expect_eol(ps, "the buffer's shape");
    if (rc)
        return rc;
    if (grow_lines(&ps->buf_line, &ps->cap_buf_line, tpu_program_n_buffers(ps->p)))
        return builder_fail(ps, name_at, TPU_ENOMEM, NULL);
    struct tpu_diag d;
    uint32_t id;
    rc = tpu_program_add_buffer(ps->p, name, dtype,
                                strcmp(kw, "param") == 0 ? TPU_BUF_PARAM : TPU_BUF_TEMP,
                                dims[0], dims[1], &id, &d);
    if (rc)
        return builder_fail(ps, name_at, rc, &d);
    ps->buf_line[id] = ps->line;
    return 0;
}

/* Resolves a variable name at `at`. */
static int lookup_var(struct parser *ps, const char *at, const char *name, uint32_t *id)
{
    if (tpu_program_find_var(ps->p, name, id) == 0)
        return 0;
    if (tpu_program_find_buffer(ps->p, name, NULL) == 0)
        return perr(ps, at, "'%s' is a buffer, not a variable; declare a variable with "
                    "'var <name>'", name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (uint32_t v = 0; v < tpu_program_n_vars(ps->p); v++)
        consider(name, tpu_program_var_name(ps->p, v), &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown variable '%s'%s; declare it with 'var %s' before the ops",
                name, dym, name);
}

/* Resolves a buffer name at `at`. */
static int lookup_buf(struct parser *ps, const char *at, const char *name, uint32_t *id)
{
    if (tpu_program_find_buffer(ps->p, name, id) == 0)
        return 0;
    if (tpu_program_find_var(ps->p, name, NULL) == 0)
        return perr(ps, at, "'%s' is a variable, not a buffer; ops read and write buffers "
                    "(declared with 'param' or 'temp')", name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (uint32_t b = 0; b < tpu_program_n_buffers(ps->p); b++)
        consider(name, tpu_program_buffer(ps->p, b)->name, &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown buffer '%s'%s; declare it with 'param' or 'temp' before the "
                "ops", name, dym);
}

/* "(a, b)" or "" for the op's outputs or inputs. */
static void role_list(enum tpu_opcode code, bool out, char buf[96])
{
    size_t len = 0;
    buf[0] = '\0';
    const char *r;
    for (unsigned i = 0; (r = tpu_opcode_operand_name(code, out, i)) != NULL; i++)
        len += (size_t)snprintf(buf + len, 96 - len, "%s%s", i ? ", " : " (", r);
    if (len)
        snprintf(buf + len, 96 - len, ")");
}

/* "trans_a, trans_b, accumulate, passes=<1|3|6>" for the op. */
static void attr_list(enum tpu_opcode code, char buf[256])
{
    size_t len = 0;
    buf[0] = '\0';
    unsigned used = tpu_opcode_attrs(code);
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (used & tpu__text_attrs[i].bit)
            len += (size_t)snprintf(buf + len, 256 - len, "%s%s", len ? ", " : "",
                                    tpu__text_attrs[i].hint);
}

static const struct tpu__text_attr *find_attr(const char *name)
{
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (strcmp(tpu__text_attrs[i].name, name) == 0)
            return &tpu__text_attrs[i];
    return NULL;
}

/* Parses an integer token into [lo, hi]. */
static int parse_int(struct parser *ps, const char *at, const char *tok, const char *what,
                     long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    bool digits = tok[0] != '\0' && (tok[0] == '-' || tok[0] == '+' ||
                                     (tok[0] >= '0' && tok[0] <= '9'));
    if (!digits || end == tok || *end != '\0')
        return perr(ps, at, "expected an integer for %s, found '%s'", what, tok);
    if (errno == ERANGE || v < lo || v > hi)
        return perr(ps, at, "%s=%s is out of range (%lld to %lld)", what, tok, lo, hi);
    *out = v;
    return 0;
}

/* Parses a FLOAT token (see the grammar). */
static int parse_float(struct parser *ps, const char *at, const char *tok, const char *what,
                       float *out)
{
    if (strncmp(tok, "nan:0x", 6) == 0) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(tok + 6, &end, 16);
        if (strlen(tok + 6) != 8 || *end != '\0' || errno)
            return perr(ps, at, "expected 8 hex digits after 'nan:0x' for %s, found '%s'", what,
                        tok);
        float f = bits_float((uint32_t)v);
        if (!isnan(f))
            return perr(ps, at, "%s=%s is not a NaN bit pattern (exponent all ones, mantissa "
                        "not zero); write the number itself", what, tok);
        *out = f;
        return 0;
    }
    if (strcmp(tok, "nan") == 0) {
        *out = bits_float(0x7fc00000u);
        return 0;
    }
    if (strcmp(tok, "inf") == 0 || strcmp(tok, "+inf") == 0 || strcmp(tok, "-inf") == 0) {
        *out = tok[0] == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    char c0 = tok[0] == '-' || tok[0] == '+' ? tok[1] : tok[0];
    if (!((c0 >= '0' && c0 <= '9') || c0 == '.'))
        return perr(ps, at, "expected a number for %s, found '%s'", what, tok);
    char *end;
    errno = 0;
    float f = strtof(tok, &end);
    if (end == tok || *end != '\0')
        return perr(ps, at, "expected a number for %s, found '%s'", what, tok);
    if (errno == ERANGE && isinf(f))
        return perr(ps, at, "%s=%s overflows f32 (the largest is 3.40282347e+38)", what, tok);
    if (errno == ERANGE && f == 0.0f)
        return perr(ps, at, "%s=%s underflows to zero in f32 (the smallest is 1.4e-45); write "
                    "0 if you mean zero", what, tok);
    *out = f;
    return 0;
}

/* The value of attribute `ad` (its name, at `at`, already read) into op's attributes. */
static int parse_attr_value(struct parser *ps, struct tpu_op *op, const char *at,
                            const char *name, const struct tpu__text_attr *ad)
{
    int rc;
    skip_ws(ps);
    bool has_value = ps->cur < ps->line_end && *ps->cur == '=';
    if (ad->type == TPU__TA_FLAG) {
        if (has_value)
            return perr(ps, at, "'%s' is a flag: write '%s' alone, without '='", name, name);
        *tpu__text_attr_flag(&op->attrs, ad->bit) = true;
        return 0;
    }
    if (!has_value)
        return perr(ps, at, "attribute '%s' needs a value: %s", name, ad->hint);
    ps->cur++;
    skip_ws(ps);
    char tok[64];
    const char *val_at = read_token(ps, tok);
    if (tok[0] == '\0') {
        ps->cur = val_at;
        char found[64];
        describe(ps, found);
        return perr(ps, val_at, "expected a value for '%s' (%s), found %s", name, ad->hint,
                    found);
    }
    long long v;
    switch (ad->type) {
    case TPU__TA_PASSES:
        rc = parse_int(ps, val_at, tok, name, 0, UINT8_MAX, &v);
        if (!rc)
            op->attrs.passes = (uint8_t)v;
        return rc;
    case TPU__TA_REDUCE:
    case TPU__TA_GROUP: {
        const char *n0 = ad->type == TPU__TA_REDUCE ? "sum" : "replicas";
        const char *n1 = ad->type == TPU__TA_REDUCE ? "mean" : "replica_cores";
        if (strcmp(tok, n0) == 0 || strcmp(tok, n1) == 0) {
            *tpu__text_attr_int32(&op->attrs, ad->bit) = strcmp(tok, n1) == 0;
            return 0;
        }
        if (is_ident_start(tok[0]))
            return perr(ps, val_at, "%s=%s is not known; write %s=%s or %s=%s", name, tok, name,
                        n0, name, n1);
        rc = parse_int(ps, val_at, tok, name, INT32_MIN, INT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_int32(&op->attrs, ad->bit) = (int32_t)v;
        return rc;
    }
    case TPU__TA_INT32:
        rc = parse_int(ps, val_at, tok, name, INT32_MIN, INT32_MAX, &v);
        if (!rc)
            *tpu__text_attr_int32(&op->attrs, ad->bit) = (int32_t)v;
        return rc;
    case TPU__TA_VAR: {
        ps->cur = val_at;
        char var[NAME_MAX_CHARS + 1];
        rc = read_name(ps, var, "a variable name after 'var='");
        if (!rc)
            rc = lookup_var(ps, val_at, var, &op->attrs.var);
        return rc;
    }
    case TPU__TA_FLOAT:
        return parse_float(ps, val_at, tok, name, tpu__text_attr_float(&op->attrs, ad->bit));
    case TPU__TA_FLAG:
    case TPU__TA_IMM:
        break;
    }
    return 0;
}


/* The error for `name` (at `at`), a word after op's inputs that is not one of the attributes
 * it reads (ad is NULL if no op has such an attribute). `n_ins` inputs were read. */
static int unknown_attr(struct parser *ps, const struct tpu_op *op, const char *at,
                        const char *name, const struct tpu__text_attr *ad, unsigned n_ins)
{
    const char *opname = tpu_opcode_name(op->code);
    unsigned used = tpu_opcode_attrs(op->code);
    char list[256];
    attr_list(op->code, list);
    if (!ad && tpu_program_find_buffer(ps->p, name, NULL) == 0) {
        if (tpu_opcode_n_in(op->code) == 0)
            return perr(ps, at, "%s takes no inputs, got '%s'", opname, name);
        return perr(ps, at, "'%s' is a buffer, not an attribute of %s; separate inputs "
                    "with ','", name, opname);
    }
    unsigned n_in = tpu_opcode_n_in(op->code);
    if (!ad && n_ins < n_in) {
        char roles[96];
        role_list(op->code, false, roles);
        return perr(ps, at, "'%s' is not an attribute of %s, and %s takes %u inputs%s but "
                    "got %u: separate inputs with ','", name, opname, opname, n_in, roles,
                    n_ins);
    }
    if (!used)
        return perr(ps, at, "%s takes no attributes, got '%s'", opname, name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < tpu__text_n_attrs; i++)
        if (used & tpu__text_attrs[i].bit)
            consider(name, tpu__text_attrs[i].name, &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown attribute '%s' for %s%s; %s takes %s", name, opname, dym,
                opname, list);
}

/* One "name" or "name=value" attribute of op at the cursor. `seen` collects the bits. */
static int parse_attr(struct parser *ps, struct tpu_op *op, unsigned *seen, unsigned n_ins)
{
    const char *at = ps->cur;
    char name[NAME_MAX_CHARS + 1];
    int rc = read_name(ps, name, "an attribute");
    if (rc)
        return rc;
    const struct tpu__text_attr *ad = find_attr(name);
    if (!ad || !(tpu_opcode_attrs(op->code) & ad->bit))
        return unknown_attr(ps, op, at, name, ad, n_ins);
    if (*seen & ad->bit)
        return perr(ps, at, "attribute '%s' given twice", name);
    *seen |= ad->bit;
    return parse_attr_value(ps, op, at, name, ad);
}

/* "var_add VAR INT" after the op name. */
static int parse_var_add(struct parser *ps, struct tpu_op *op)
{
    char var[NAME_MAX_CHARS + 1];
    const char *at = (skip_ws(ps), ps->cur);
    int rc = read_name(ps, var, "a variable after var_add (var_add <variable> <int>)");
    if (!rc)
        rc = lookup_var(ps, at, var, &op->attrs.var);
    if (rc)
        return rc;
    char tok[64];
    skip_ws(ps);
    const char *num_at = read_token(ps, tok);
    if (tok[0] == '\0') {
        ps->cur = num_at;
        char found[64];
        describe(ps, found);
        return perr(ps, num_at, "expected the integer to add after 'var_add %s', found %s", var,
                    found);
    }
    long long v;
    rc = parse_int(ps, num_at, tok, "var_add's increment", INT64_MIN, INT64_MAX, &v);
    if (!rc) {
        op->attrs.imm = (int64_t)v;
        rc = expect_eol(ps, "var_add's increment");
    }
    return rc;
}

/* What parse_op has read of an op line so far. */
struct op_line {
    uint32_t outs[TPU_OP_MAX_OUT + 1];
    unsigned n_outs;
    char first_out[NAME_MAX_CHARS + 1];
    char opname[NAME_MAX_CHARS + 1];
    const char *op_at; /* where the op name starts */
    unsigned n_ins;
    const char *ins_at; /* where the inputs start */
    struct tpu_op op;
};

/* The outputs "word, NAME, ... =" and the op name after them; or, when the line has no '=',
 * the op name `word` itself. */
static int parse_outputs(struct parser *ps, const char *word, const char *word_at,
                         struct op_line *ol)
{
    ol->op_at = word_at;
    skip_ws(ps);
    if (!(ps->cur < ps->line_end && (*ps->cur == '=' || *ps->cur == ','))) {
        snprintf(ol->opname, sizeof ol->opname, "%s", word);
        return 0;
    }
    const char *name_at = word_at;
    char name[NAME_MAX_CHARS + 1];
    snprintf(name, sizeof name, "%s", word);
    snprintf(ol->first_out, sizeof ol->first_out, "%s", word);
    for (;;) {
        uint32_t id;
        int rc = lookup_buf(ps, name_at, name, &id);
        if (rc)
            return rc;
        if (ol->n_outs < TPU_OP_MAX_OUT + 1)
            ol->outs[ol->n_outs] = id;
        ol->n_outs++;
        skip_ws(ps);
        if (ps->cur < ps->line_end && *ps->cur == ',') {
            ps->cur++;
            name_at = (skip_ws(ps), ps->cur);
            rc = read_name(ps, name, "an output buffer after ','");
            if (rc)
                return rc;
            continue;
        }
        rc = expect_char(ps, '=', "after the outputs");
        if (rc)
            return rc;
        break;
    }
    ol->op_at = (skip_ws(ps), ps->cur);
    return read_name(ps, ol->opname, "an op name after '='");
}

/* The opcode of ol->opname: an op the text writes as "outputs = op inputs" or var_add. */
static int resolve_opcode(struct parser *ps, const struct op_line *ol, enum tpu_opcode *code)
{
    if (tpu_opcode_parse(ol->opname, code)) {
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (unsigned i = 0; i < TPU_OP_COUNT; i++) {
            enum tpu__op_syntax syn = tpu__op_info((enum tpu_opcode)i)->syntax;
            if (syn != TPU__SYNTAX_LOOP && syn != TPU__SYNTAX_LOOP_END)
                consider(ol->opname, tpu_opcode_name((enum tpu_opcode)i), &best, &best_d);
        }
        char dym[80];
        tpu__did_you_mean(best, dym, sizeof dym);
        if (ol->n_outs == 0 && !best && next_is_name(ps))
            return perr(ps, ol->op_at, "unknown op '%s'; an op line reads '<outputs> = <op> "
                        "<inputs>' (did you forget the '='?)", ol->opname);
        return perr(ps, ol->op_at, "unknown op '%s'%s", ol->opname, dym);
    }
    enum tpu__op_syntax syn = tpu__op_info(*code)->syntax;
    if (syn == TPU__SYNTAX_LOOP || syn == TPU__SYNTAX_LOOP_END)
        return perr(ps, ol->op_at, "'%s' is written as %s in the text form", ol->opname,
                    syn == TPU__SYNTAX_LOOP ? "'loop <variable> {'" : "'}'");
    return 0;
}

/* Checks the number of outputs against the op's and stores them in ol->op. */
static int take_outputs(struct parser *ps, struct op_line *ol)
{
    enum tpu_opcode code = ol->op.code;
    unsigned n_out = tpu_opcode_n_out(code);
    if (ol->n_outs != n_out) {
        char roles[96];
        role_list(code, true, roles);
        if (n_out == 0)
            return perr(ps, ol->op_at, "%s has no outputs, got %u ('%s'); write '%s <inputs>'",
                        ol->opname, ol->n_outs, ol->first_out, ol->opname);
        return perr(ps, ol->op_at, "%s has %u output%s%s, got %u", ol->opname, n_out,
                    n_out == 1 ? "" : "s", roles, ol->n_outs);
    }
    for (unsigned i = 0; i < n_out; i++)
        ol->op.out[i] = ol->outs[i];
    return 0;
}

/* The inputs after the op name: "NAME (',' NAME)*", unless the first word is one of the op's
 * flags (and no buffer has that name) or, for an op without inputs, no buffer or variable
 * has that name (it is then reported as an attribute). */
static int parse_inputs(struct parser *ps, struct op_line *ol)
{
    ol->ins_at = (skip_ws(ps), ps->cur);
    if (!next_is_name(ps) || char_after_name(ps) == '=')
        return 0;
    enum tpu_opcode code = ol->op.code;
    char name[NAME_MAX_CHARS + 1];
    const char *name_at = ps->cur;
    int rc = read_name(ps, name, "an input buffer");
    if (rc)
        return rc;
    const struct tpu__text_attr *ad = find_attr(name);
    bool is_flag = ad && ad->type == TPU__TA_FLAG && (tpu_opcode_attrs(code) & ad->bit);
    if (is_flag && tpu_program_find_buffer(ps->p, name, NULL) != 0) {
        ps->cur = name_at; /* a flag: no inputs */
        return 0;
    }
    if (tpu_opcode_n_in(code) == 0 && tpu_program_find_buffer(ps->p, name, NULL) != 0 &&
        tpu_program_find_var(ps->p, name, NULL) != 0) {
        ps->cur = name_at; /* reported as an attribute of an op without inputs */
        return 0;
    }
    for (;;) {
        uint32_t id;
        rc = lookup_buf(ps, name_at, name, &id);
        if (rc)
            return rc;
        if (ol->n_ins < TPU_OP_MAX_IN)
            ol->op.in[ol->n_ins] = id;
        ol->n_ins++;
        skip_ws(ps);
        if (ps->cur >= ps->line_end || *ps->cur != ',')
            return 0;
        ps->cur++;
        name_at = (skip_ws(ps), ps->cur);
        rc = read_name(ps, name, "an input buffer after ','");
        if (rc)
            return rc;
    }
}

/* The attributes up to the end of the line, then the checks that need the whole line: the
 * number of inputs and the attributes the op must state. */
static int parse_attrs(struct parser *ps, struct op_line *ol)
{
    enum tpu_opcode code = ol->op.code;
    unsigned seen = 0;
    while (!at_eol(ps)) {
        if (!next_is_name(ps)) {
            char found[64];
            describe(ps, found);
            return perr(ps, ps->cur, "expected an attribute or the end of the line after "
                        "%s's operands, found %s", ol->opname, found);
        }
        int rc = parse_attr(ps, &ol->op, &seen, ol->n_ins);
        if (rc)
            return rc;
    }
    unsigned n_in = tpu_opcode_n_in(code);
    if (ol->n_ins != n_in) {
        char roles[96];
        role_list(code, false, roles);
        if (n_in == 0)
            return perr(ps, ol->ins_at, "%s takes no inputs, got %u", ol->opname, ol->n_ins);
        return perr(ps, ol->op_at, "%s takes %u input%s%s, got %u", ol->opname, n_in,
                    n_in == 1 ? "" : "s", roles, ol->n_ins);
    }
    unsigned missing = tpu__op_info(code)->required & ~seen;
    for (size_t i = 0; missing && i < tpu__text_n_attrs; i++)
        if (missing & tpu__text_attrs[i].bit)
            return perr(ps, ol->op_at, "%s needs attribute %s", ol->opname,
                        tpu__text_attrs[i].hint);
    return 0;
}

/* An op line; `word` (at `word_at`) is its first name, already read. */
static int parse_op(struct parser *ps, const char *word, const char *word_at)
{
    struct op_line ol = {.n_outs = 0};
    enum tpu_opcode code;
    int rc = parse_outputs(ps, word, word_at, &ol);
    if (!rc)
        rc = resolve_opcode(ps, &ol, &code);
    if (rc)
        return rc;
    if (!ps->first_op_line)
        ps->first_op_line = ps->line;
    tpu_op_init(&ol.op, code);
    rc = take_outputs(ps, &ol);
    if (rc)
        return rc;
    if (tpu__op_info(code)->syntax == TPU__SYNTAX_VAR_IMM) {
        rc = parse_var_add(ps, &ol.op);
    } else {
        rc = parse_inputs(ps, &ol);
        if (!rc)
            rc = parse_attrs(ps, &ol);
    }
    if (rc)
        return rc;
    struct tpu_diag d;
    rc = tpu_program_add_op(ps->p, &ol.op, &d);
    if (rc)
        return builder_fail(ps, ol.op_at, rc, &d);
    return 0;
}

/* "loop VAR {" after the keyword. */
static int parse_loop(struct parser *ps, const char *kw_at)
{
    if (ps->loop_line)
        return perr(ps, kw_at, "nested loop: the loop opened at line %zu is still open; a "
                    "program has one level of loop (close it with '}' first)", ps->loop_line);
    char var[NAME_MAX_CHARS + 1];
    const char *at = (skip_ws(ps), ps->cur);
    int rc = read_name(ps, var, "the loop's variable after 'loop' (loop <variable> {)");
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_LOOP_BEGIN);
    if (!rc)
        rc = lookup_var(ps, at, var, &op.attrs.var);
    if (!rc)
        rc = expect_char(ps, '{', "after 'loop <variable>'");
    if (!rc)
        rc = expect_eol(ps, "'{' (the loop's ops go on the following lines)");
    if (rc)
        return rc;
    if (!ps->first_op_line)
        ps->first_op_line = ps->line;
    struct tpu_diag d;
    rc = tpu_program_add_op(ps->p, &op, &d);
    if (rc)
        return builder_fail(ps, kw_at, rc, &d);
    ps->loop_line = ps->line;
    return 0;
}

static int parse_close(struct parser *ps)
{
    const char *at = ps->cur;
    if (!ps->loop_line)
        return perr(ps, at, "stray '}': no loop is open");
    ps->cur++;
    int rc = expect_eol(ps, "'}'");
    if (rc)
        return rc;
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_LOOP_END);
    struct tpu_diag d;
    rc = tpu_program_add_op(ps->p, &op, &d);
    if (rc)
        return builder_fail(ps, at, rc, &d);
    ps->loop_line = 0;
    return 0;
}

/* One non-empty line. */
static int parse_line(struct parser *ps)
{
    if (!ps->p)
        return parse_header(ps);
    const char *at = ps->cur;
    if (*at == '}')
        return parse_close(ps);
    if (!is_ident_start(*at)) {
        char found[64];
        describe(ps, found);
        return perr(ps, at, "expected a declaration, an op, 'loop' or '}', found %s", found);
    }
    char word[NAME_MAX_CHARS + 1];
    int rc = read_name(ps, word, "a name");
    if (rc)
        return rc;
    skip_ws(ps);
    char next = ps->cur < ps->line_end ? *ps->cur : '\0';
    if (next == '=' || next == ',')
        return parse_op(ps, word, at);
    if (strcmp(word, "program") == 0)
        return perr(ps, at, "a second 'program' line; the text holds one program (its header "
                    "is at line %zu)", ps->header_line);
    if (strcmp(word, "var") == 0 || strcmp(word, "param") == 0 || strcmp(word, "temp") == 0) {
        if (ps->loop_line)
            return perr(ps, at, "'%s' declaration inside the loop; declare every variable and "
                        "buffer before the ops", word);
        return parse_decl(ps, word, at);
    }
    if (strcmp(word, "loop") == 0)
        return parse_loop(ps, at);
    return parse_op(ps, word, at);
}

int tpu_program_parse(const char *text, const char *origin, struct tpu_program **out,
                      struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "no place to store the parsed program");
    *out = NULL;
    char qorigin[TPU__QUOTE_PATH_BYTES];
    struct parser ps = {.origin = tpu__quote(origin ? origin : "<text>", qorigin,
                                             sizeof qorigin),
                        .d = d, .line = 0};
    if (!text)
        return tpu__fail(d, TPU_EINVAL, "%s: no text to parse", ps.origin);
    int rc = 0;
    const char *s = text;
    for (;;) {
        ps.line++;
        ps.line_start = ps.cur = s;
        const char *nl = strchr(s, '\n');
        ps.line_end = nl ? nl : s + strlen(s);
        if (!at_eol(&ps)) {
            rc = parse_line(&ps);
            if (rc)
                break;
        }
        if (!nl)
            break;
        s = nl + 1;
    }
    if (!rc && !ps.p) {
        ps.cur = ps.line_end;
        rc = perr(&ps, ps.cur, "expected 'program <name>' as the first line, found the end of "
                  "the text");
    }
    if (!rc && ps.loop_line) {
        size_t end_line = ps.line, end_col = (size_t)(ps.line_end - ps.line_start) + 1;
        rc = tpu__fail(d, TPU_EPARSE, "%s:%zu:%zu: missing '}': the loop opened at line %zu is "
                       "not closed at the end of the text", ps.origin, end_line, end_col,
                       ps.loop_line);
    }
    free(ps.buf_line);
    free(ps.var_line);
    if (rc) {
        tpu_program_destroy(&ps.p);
        return rc;
    }
    *out = ps.p;
    return 0;
}
