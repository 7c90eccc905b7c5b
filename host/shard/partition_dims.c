/* The input_partition_dims parser (shard.h): the value as a user writes it in Python in a
 * TPUConfig, "[[1, 2, 2, 1], None]", into struct tpu_partition_dims. It checks the form and
 * the rules that need only the text: one or two entries (TPUConfig), counts >= 1
 * (_check_input_partition_dims), the features' entry not None (TPUEstimator's input
 * pipeline asserts it). The rules that need the cores and the tensors are the plan's.
 *
 * Grammar (whitespace anywhere between tokens; a list may be written with [] or (), the
 * brackets matching, and may end in a comma as in Python):
 *   value := list-of(entry)          one or two entries
 *   entry := None | none | null | list-of(count)
 *   count := decimal digits, 1 .. 2^31 - 1, at most TPU_PARTITION_MAX_RANK of them
 * Errors name the column (1-based) and what was expected there. */
#include <string.h>

#include "tpusim/shard.h"
#include "util.h"

#define COUNT_MAX 2147483647u

struct cursor {
    const char *text, *at;
    struct tpu_diag *d;
};

static void skip_space(struct cursor *c)
{
    while (*c->at == ' ' || *c->at == '\t' || *c->at == '\n' || *c->at == '\r')
        c->at++;
}

static unsigned column(const struct cursor *c)
{
    return (unsigned)(c->at - c->text) + 1;
}

/* What is at the cursor, for messages: "'x'" or "the end". */
static const char *seen(const struct cursor *c, char *buf, size_t n)
{
    if (!*c->at)
        return "the end of the text";
    char one[8] = {c->at[0], 0};
    char q[32];
    snprintf(buf, n, "'%s'", tpu__quote(one, q, sizeof q));
    return buf;
}

static int expected(struct cursor *c, const char *what)
{
    char b[48];
    return tpu__fail(c->d, TPU_EINVAL, "input_partition_dims: expected %s at column %u, found "
                     "%s; write it as in Python, e.g. \"[[1, 2, 2, 1], None]\"", what,
                     column(c), seen(c, b, sizeof b));
}

static char closing(char open)
{
    return open == '(' ? ')' : ']';
}

static bool word_at(const struct cursor *c, const char *w)
{
    const size_t n = strlen(w);
    if (strncmp(c->at, w, n))
        return false;
    const char next = c->at[n];
    return !((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
             (next >= '0' && next <= '9') || next == '_');
}

/* A count (>= 1) at the cursor. */
static int parse_count(struct cursor *c, uint32_t *out)
{
    const unsigned col = column(c);
    bool negative = false;
    if (*c->at == '-' || *c->at == '+') {
        negative = *c->at == '-';
        c->at++;
        skip_space(c);
    }
    if (!(*c->at >= '0' && *c->at <= '9'))
        return expected(c, "a count (a whole number >= 1)");
    const char *digits = c->at;
    uint64_t v = 0;
    bool huge = false;
    for (; *c->at >= '0' && *c->at <= '9'; c->at++)
        if (!huge && (v = v * 10 + (uint64_t)(*c->at - '0')) > COUNT_MAX)
            huge = true;
    if (*c->at == '.' || *c->at == '_' || (*c->at >= 'a' && *c->at <= 'z') ||
        (*c->at >= 'A' && *c->at <= 'Z'))
        return expected(c, "',' or a closing bracket after a whole number");
    if (huge && !negative)
        return tpu__fail(c->d, TPU_EINVAL, "input_partition_dims: the count at column %u is "
                         "larger than %u; a dimension is split into at most as many parts as "
                         "a replica has cores (1 to 128)", col, COUNT_MAX);
    if (negative || v == 0)
        return tpu__fail(c->d, TPU_EINVAL, "input_partition_dims: the count %s%.*s at column "
                         "%u is below 1; all input partition dims must be >= 1 (1: that "
                         "dimension is not split)", negative ? "-" : "",
                         (int)(c->at - digits < 24 ? c->at - digits : 24), digits, col);
    *out = (uint32_t)v;
    return 0;
}

/* One entry: None or a list of counts. */
static int parse_entry(struct cursor *c, uint32_t index, struct tpu_partition_dims *out)
{
    memset(out, 0, sizeof *out);
    skip_space(c);
    if (word_at(c, "None") || word_at(c, "none") || word_at(c, "null")) {
        c->at += 4;
        return 0;
    }
    if (*c->at != '[' && *c->at != '(')
        return expected(c, "None or a list of counts such as [1, 2, 2, 1]");
    const char open = *c->at, close = closing(open);
    const unsigned at_open = column(c);
    c->at++;
    for (;;) {
        skip_space(c);
        if (*c->at == close)
            break;
        if (out->rank == TPU_PARTITION_MAX_RANK)
            return tpu__fail(c->d, TPU_EINVAL, "input_partition_dims: entry %u (column %u) has "
                             "more than %u counts; a tensor has at most %u dimensions, the "
                             "batch dimension first", index, at_open, TPU_PARTITION_MAX_RANK,
                             TPU_PARTITION_MAX_RANK);
        int rc = parse_count(c, &out->dims[out->rank]);
        if (rc)
            return rc;
        out->rank++;
        skip_space(c);
        if (*c->at == ',') {
            c->at++;
            continue;
        }
        if (*c->at != close) {
            char what[48];
            snprintf(what, sizeof what, "',' or '%c'", close);
            return expected(c, what);
        }
    }
    if (out->rank == 0)
        return tpu__fail(c->d, TPU_EINVAL, "input_partition_dims: entry %u (column %u) is an "
                         "empty list; give one count per dimension of the tensor, the batch "
                         "dimension first (e.g. [1, 2, 1, 1]), or None to send the whole "
                         "tensor to every core of a replica", index, at_open);
    c->at++;
    return 0;
}

int tpu_partition_dims_parse(const char *text, struct tpu_partition_dims out[2], uint32_t *n,
                             struct tpu_diag *d)
{
    *n = 0;
    memset(out, 0, 2 * sizeof *out);
    struct cursor c = {.text = text, .at = text, .d = d};
    skip_space(&c);
    if (*c.at != '[' && *c.at != '(')
        return expected(&c, "'[' opening the list of one (features) or two (features, "
                        "labels) entries");
    const char close = closing(*c.at);
    c.at++;
    uint32_t count = 0;
    struct tpu_partition_dims entry;
    for (;;) {
        skip_space(&c);
        if (*c.at == close)
            break;
        const unsigned at = column(&c);
        int rc = parse_entry(&c, count, &entry);
        if (rc)
            return rc;
        if (count == 2)
            return tpu__fail(d, TPU_EINVAL, "input_partition_dims has a third entry (column "
                             "%u); it must be a list with one or two elements: the features' "
                             "partition dims, then optionally the labels'", at);
        out[count++] = entry;
        skip_space(&c);
        if (*c.at == ',') {
            c.at++;
            continue;
        }
        if (*c.at != close) {
            char what[48];
            snprintf(what, sizeof what, "',' or '%c'", close);
            return expected(&c, what);
        }
    }
    c.at++;
    skip_space(&c);
    if (*c.at)
        return expected(&c, "nothing after the closing bracket");
    if (count == 0)
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims is an empty list; it must be a "
                         "list with one or two elements: the features' partition dims, then "
                         "optionally the labels' (e.g. \"[[1, 2, 1, 1]]\"), or leave it out");
    if (out[0].rank == 0)
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims[0] (the features) must not be "
                         "None, as TPUEstimator requires; give the features' counts (e.g. "
                         "[1, 2, 1, 1]), or leave input_partition_dims out to send every "
                         "tensor whole to every core");
    memset(&out[count], 0, (2 - count) * sizeof *out);
    *n = count;
    return 0;
}
