/* The device program's text form, parsing: tpu_program_parse (include/tpusim/program.h).
 * Printing is program_print.c; the attribute table both use is in program_int.h. This file
 * holds the cursor and its messages, declarations, op lines up to their inputs and loops;
 * the attributes of an op line are read by program_parse_attr.c. This comment is the text
 * form's reference: the grammar below is what the printer writes and the parser reads.
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
 *              | ('var' | 'lr_var') '=' VAR
 *              | ('imm' | 'warmup' | 'decay_steps') '=' INT
 *              | 'schedule' '=' ('constant' | 'step' | 'cosine' | 'host' | INT)
 *              | ('alpha' | 'beta' | 'gamma' | 'delta' | 'eps' | 'decay_rate') '=' FLOAT
 *              | ('h' | 'w' | 'c' | 'kh' | 'kw' | 'sh' | 'sw' | 'pt' | 'pl' | 'ho' | 'wo')
 *                '=' INT                    the window group's fields (struct tpu_window)
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
 * reduce_sum/reduce_max axis; softmax_xent alpha; sgd_momentum alpha; adam and adamw var,
 * alpha, beta, delta, eps; all_reduce reduce; collective_permute shift, group; rsqrt eps;
 * mse alpha; dropout_mask var, imm, alpha; var for a sgd_momentum whose schedule is step or
 * cosine; lr_var for an optimizer whose schedule is host;
 * the window ops (im2col, col2im, max_pool, max_pool_grad, avg_pool, avg_pool_grad) every
 * field of the window, each once. The others default to zero (passes to 1, schedule to
 * constant) and are printed only when they differ. An attribute the op does not read is
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

int tpu__parse_verror(struct tpu__parser *ps, const char *at, const char *fmt, va_list ap)
{
    char msg[TPU_DIAG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t col = (size_t)(at - ps->line_start) + 1;
    return tpu__fail(ps->d, TPU_EPARSE, "%s:%zu:%zu: %s", ps->origin, ps->line, col, msg);
}

static int perr(struct tpu__parser *ps, const char *at, const char *fmt, ...) TPU__PRINTF(3, 4);

/* A parse error at `at` (a position in the current line). */
static int perr(struct tpu__parser *ps, const char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tpu__parse_verror(ps, at, fmt, ap);
    va_end(ap);
    return rc;
}

/* A failure of the builder while parsing: out of memory stays TPU_ENOMEM, the rest (a name or
 * size the builder refuses) is a parse error at `at`. */
static int builder_fail(struct tpu__parser *ps, const char *at, int rc, const struct tpu_diag *d)
{
    if (rc == TPU_ENOMEM)
        return tpu__fail(ps->d, TPU_ENOMEM, "%s:%zu: out of memory", ps->origin, ps->line);
    return perr(ps, at, "%s", d->msg);
}

bool tpu__parse_is_ident_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_ident_char(char c)
{
    return tpu__parse_is_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

void tpu__parse_skip_ws(struct tpu__parser *ps)
{
    while (ps->cur < ps->line_end && (*ps->cur == ' ' || *ps->cur == '\t' || *ps->cur == '\r'))
        ps->cur++;
    if (ps->cur < ps->line_end && *ps->cur == '#')
        ps->cur = ps->line_end;
}

bool tpu__parse_at_eol(struct tpu__parser *ps)
{
    tpu__parse_skip_ws(ps);
    return ps->cur == ps->line_end;
}

/* Describes what is at the cursor, for "found ..." in messages. */
void tpu__parse_describe(struct tpu__parser *ps, char out[64])
{
    tpu__parse_skip_ws(ps);
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

static int expect_char(struct tpu__parser *ps, char c, const char *context)
{
    tpu__parse_skip_ws(ps);
    if (ps->cur < ps->line_end && *ps->cur == c) {
        ps->cur++;
        return 0;
    }
    char found[64];
    tpu__parse_describe(ps, found);
    return perr(ps, ps->cur, "expected '%c' %s, found %s", c, context, found);
}

int tpu__parse_expect_eol(struct tpu__parser *ps, const char *after)
{
    if (tpu__parse_at_eol(ps))
        return 0;
    char found[64];
    tpu__parse_describe(ps, found);
    return perr(ps, ps->cur, "expected the end of the line after %s, found %s", after, found);
}

/* Reads a NAME into out (at most 47 characters); `what` says what was expected. */
int tpu__parse_read_name(struct tpu__parser *ps, char out[TPU__TEXT_NAME_MAX_CHARS + 1],
                         const char *what)
{
    tpu__parse_skip_ws(ps);
    const char *s = ps->cur;
    if (s == ps->line_end || !tpu__parse_is_ident_start(*s)) {
        char found[64];
        tpu__parse_describe(ps, found);
        return perr(ps, s, "expected %s, found %s", what, found);
    }
    size_t n = 0;
    while (s + n < ps->line_end && is_ident_char(s[n]))
        n++;
    if (n > TPU__TEXT_NAME_MAX_CHARS)
        return perr(ps, s, "name '%.40s...' has %zu characters; at most %d are allowed", s, n,
                    TPU__TEXT_NAME_MAX_CHARS);
    memcpy(out, s, n);
    out[n] = '\0';
    ps->cur = s + n;
    return 0;
}

/* True if the next token is a NAME (without consuming it). */
bool tpu__parse_next_is_name(struct tpu__parser *ps)
{
    tpu__parse_skip_ws(ps);
    return ps->cur < ps->line_end && tpu__parse_is_ident_start(*ps->cur);
}

/* The character after the NAME at the cursor (skipping spaces), or '\0' at the end. */
static char char_after_name(struct tpu__parser *ps)
{
    const char *s = ps->cur;
    while (s < ps->line_end && is_ident_char(*s))
        s++;
    while (s < ps->line_end && (*s == ' ' || *s == '\t' || *s == '\r'))
        s++;
    return s < ps->line_end && *s != '#' ? *s : '\0';
}

/* Reads a value token (up to a space, ',', ']', '#' or the end of the line) into out. */
const char *tpu__parse_read_token(struct tpu__parser *ps, char out[64])
{
    tpu__parse_skip_ws(ps);
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
void tpu__parse_consider(const char *word, const char *cand, const char **best, size_t *best_d)
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
static int check_new_name(struct tpu__parser *ps, const char *at, const char *name)
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

static int parse_header(struct tpu__parser *ps)
{
    const char *at = (tpu__parse_skip_ws(ps), ps->cur);
    size_t n = 0;
    while (at + n < ps->line_end && is_ident_char(at[n]))
        n++;
    if (n != 7 || strncmp(at, "program", 7) != 0) {
        char found[64];
        tpu__parse_describe(ps, found);
        return perr(ps, at, "expected 'program <name>' as the first line, found %s", found);
    }
    ps->cur = at + n;
    char name[TPU__TEXT_NAME_MAX_CHARS + 1];
    int rc = tpu__parse_read_name(ps, name, "the program's name after 'program'");
    if (!rc)
        rc = tpu__parse_expect_eol(ps, "the program's name");
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
static int parse_decl(struct tpu__parser *ps, const char *kw, const char *kw_at)
{
    if (ps->first_op_line)
        return perr(ps, kw_at, "'%s' declaration after the first op (line %zu); declare every "
                    "variable and buffer before the ops", kw, ps->first_op_line);
    bool is_var = strcmp(kw, "var") == 0;
    char name[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *name_at = (tpu__parse_skip_ws(ps), ps->cur);
    int rc = tpu__parse_read_name(ps, name, is_var ? "a variable name after 'var'"
                                        : "a buffer name after the buffer kind");
    if (!rc)
        rc = check_new_name(ps, name_at, name);
    if (rc)
        return rc;
    if (is_var) {
        rc = tpu__parse_expect_eol(ps, "the variable's name");
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
    tpu__parse_skip_ws(ps);
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
        tpu__parse_describe(ps, found);
        return perr(ps, dt_at, "expected a dtype (f32, bf16, int8 or int32) for buffer '%s', "
                    "found %s", name, found);
    }
    rc = expect_char(ps, '[', "after the dtype (as in 'f32[8, 16]')");
    if (rc)
        return rc;
    uint32_t dims[2];
    for (int k = 0; k < 2; k++) {
        tpu__parse_skip_ws(ps);
        const char *at = tpu__parse_read_token(ps, tok);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(tok, &end, 10);
        bool digits = tok[0] >= '0' && tok[0] <= '9';
        if (!digits || *end != '\0') {
            ps->cur = at;
            char found[64];
            tpu__parse_describe(ps, found);
            return perr(ps, at, "expected the %s of buffer '%s' (a positive integer), found %s",
                        k == 0 ? "row count" : "column count", name, found);
        }
        if (errno == ERANGE || v > UINT32_MAX || v == 0)
            return perr(ps, at, "%s %s of buffer '%s' is out of range; dimensions are 1 to "
                        "4294967295", k == 0 ? "row count" : "column count", tok, name);
        dims[k] = (uint32_t)v;
        if (k == 0) {
            tpu__parse_skip_ws(ps);
            if (ps->cur < ps->line_end && *ps->cur == ']')
                return perr(ps, ps->cur, "buffer '%s' has one dimension; buffers are 2-D "
                            "[rows, cols]: write [1, %s] for a row vector", name, tok);
            rc = expect_char(ps, ',', "between the two dimensions");
        } else {
            tpu__parse_skip_ws(ps);
            if (ps->cur < ps->line_end && *ps->cur == ',')
                return perr(ps, ps->cur, "buffer '%s' has more than two dimensions; buffers "
                            "are 2-D [rows, cols]", name);
            rc = expect_char(ps, ']', "after the two dimensions");
        }
        if (rc)
            return rc;
    }
    rc = tpu__parse_expect_eol(ps, "the buffer's shape");
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
int tpu__parse_lookup_var(struct tpu__parser *ps, const char *at, const char *name, uint32_t *id)
{
    if (tpu_program_find_var(ps->p, name, id) == 0)
        return 0;
    if (tpu_program_find_buffer(ps->p, name, NULL) == 0)
        return perr(ps, at, "'%s' is a buffer, not a variable; declare a variable with "
                    "'var <name>'", name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (uint32_t v = 0; v < tpu_program_n_vars(ps->p); v++)
        tpu__parse_consider(name, tpu_program_var_name(ps->p, v), &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown variable '%s'%s; declare it with 'var %s' before the ops",
                name, dym, name);
}

/* Resolves a buffer name at `at`. */
static int lookup_buf(struct tpu__parser *ps, const char *at, const char *name, uint32_t *id)
{
    if (tpu_program_find_buffer(ps->p, name, id) == 0)
        return 0;
    if (tpu_program_find_var(ps->p, name, NULL) == 0)
        return perr(ps, at, "'%s' is a variable, not a buffer; ops read and write buffers "
                    "(declared with 'param' or 'temp')", name);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (uint32_t b = 0; b < tpu_program_n_buffers(ps->p); b++)
        tpu__parse_consider(name, tpu_program_buffer(ps->p, b)->name, &best, &best_d);
    char dym[80];
    tpu__did_you_mean(best, dym, sizeof dym);
    return perr(ps, at, "unknown buffer '%s'%s; declare it with 'param' or 'temp' before the "
                "ops", name, dym);
}

/* The outputs "word, NAME, ... =" and the op name after them; or, when the line has no '=',
 * the op name `word` itself. */
static int parse_outputs(struct tpu__parser *ps, const char *word, const char *word_at,
                         struct tpu__op_line *ol)
{
    ol->op_at = word_at;
    tpu__parse_skip_ws(ps);
    if (!(ps->cur < ps->line_end && (*ps->cur == '=' || *ps->cur == ','))) {
        snprintf(ol->opname, sizeof ol->opname, "%s", word);
        return 0;
    }
    const char *name_at = word_at;
    char name[TPU__TEXT_NAME_MAX_CHARS + 1];
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
        tpu__parse_skip_ws(ps);
        if (ps->cur < ps->line_end && *ps->cur == ',') {
            ps->cur++;
            name_at = (tpu__parse_skip_ws(ps), ps->cur);
            rc = tpu__parse_read_name(ps, name, "an output buffer after ','");
            if (rc)
                return rc;
            continue;
        }
        rc = expect_char(ps, '=', "after the outputs");
        if (rc)
            return rc;
        break;
    }
    ol->op_at = (tpu__parse_skip_ws(ps), ps->cur);
    return tpu__parse_read_name(ps, ol->opname, "an op name after '='");
}

/* The opcode of ol->opname: an op the text writes as "outputs = op inputs" or var_add. */
static int resolve_opcode(struct tpu__parser *ps, const struct tpu__op_line *ol,
                          enum tpu_opcode *code)
{
    if (tpu_opcode_parse(ol->opname, code)) {
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (unsigned i = 0; i < TPU_OP_COUNT; i++) {
            enum tpu__op_syntax syn = tpu__op_info((enum tpu_opcode)i)->syntax;
            if (syn != TPU__SYNTAX_LOOP && syn != TPU__SYNTAX_LOOP_END)
                tpu__parse_consider(ol->opname, tpu_opcode_name((enum tpu_opcode)i), &best,
                                    &best_d);
        }
        char dym[80];
        tpu__did_you_mean(best, dym, sizeof dym);
        if (ol->n_outs == 0 && !best && tpu__parse_next_is_name(ps))
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
static int take_outputs(struct tpu__parser *ps, struct tpu__op_line *ol)
{
    enum tpu_opcode code = ol->op.code;
    unsigned n_out = tpu_opcode_n_out(code);
    if (ol->n_outs != n_out) {
        char roles[96];
        tpu__parse_role_list(code, true, roles);
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
static int parse_inputs(struct tpu__parser *ps, struct tpu__op_line *ol)
{
    ol->ins_at = (tpu__parse_skip_ws(ps), ps->cur);
    if (!tpu__parse_next_is_name(ps) || char_after_name(ps) == '=')
        return 0;
    enum tpu_opcode code = ol->op.code;
    char name[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *name_at = ps->cur;
    int rc = tpu__parse_read_name(ps, name, "an input buffer");
    if (rc)
        return rc;
    const struct tpu__text_attr *ad = tpu__parse_find_attr(name);
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
        tpu__parse_skip_ws(ps);
        if (ps->cur >= ps->line_end || *ps->cur != ',')
            return 0;
        ps->cur++;
        name_at = (tpu__parse_skip_ws(ps), ps->cur);
        rc = tpu__parse_read_name(ps, name, "an input buffer after ','");
        if (rc)
            return rc;
    }
}

/* An op line; `word` (at `word_at`) is its first name, already read. */
static int parse_op(struct tpu__parser *ps, const char *word, const char *word_at)
{
    struct tpu__op_line ol = {.n_outs = 0};
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
        rc = tpu__parse_var_add(ps, &ol.op);
    } else {
        rc = parse_inputs(ps, &ol);
        if (!rc)
            rc = tpu__parse_attrs(ps, &ol);
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
static int parse_loop(struct tpu__parser *ps, const char *kw_at)
{
    if (ps->loop_line)
        return perr(ps, kw_at, "nested loop: the loop opened at line %zu is still open; a "
                    "program has one level of loop (close it with '}' first)", ps->loop_line);
    char var[TPU__TEXT_NAME_MAX_CHARS + 1];
    const char *at = (tpu__parse_skip_ws(ps), ps->cur);
    int rc = tpu__parse_read_name(ps, var, "the loop's variable after 'loop' (loop <variable> {)");
    struct tpu_op op;
    tpu_op_init(&op, TPU_OP_LOOP_BEGIN);
    if (!rc)
        rc = tpu__parse_lookup_var(ps, at, var, &op.attrs.var);
    if (!rc)
        rc = expect_char(ps, '{', "after 'loop <variable>'");
    if (!rc)
        rc = tpu__parse_expect_eol(ps, "'{' (the loop's ops go on the following lines)");
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

static int parse_close(struct tpu__parser *ps)
{
    const char *at = ps->cur;
    if (!ps->loop_line)
        return perr(ps, at, "stray '}': no loop is open");
    ps->cur++;
    int rc = tpu__parse_expect_eol(ps, "'}'");
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
static int parse_line(struct tpu__parser *ps)
{
    if (!ps->p)
        return parse_header(ps);
    const char *at = ps->cur;
    if (*at == '}')
        return parse_close(ps);
    if (!tpu__parse_is_ident_start(*at)) {
        char found[64];
        tpu__parse_describe(ps, found);
        return perr(ps, at, "expected a declaration, an op, 'loop' or '}', found %s", found);
    }
    char word[TPU__TEXT_NAME_MAX_CHARS + 1];
    int rc = tpu__parse_read_name(ps, word, "a name");
    if (rc)
        return rc;
    tpu__parse_skip_ws(ps);
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
    struct tpu__parser ps = {.origin = tpu__quote(origin ? origin : "<text>", qorigin,
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
        if (!tpu__parse_at_eol(&ps)) {
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
