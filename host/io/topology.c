/* Reader of SCALE-Sim topology files (GEMM "M, N, K" and convolution formats); see
 * tpusim/topology_file.h for the formats and the rules.
 *
 * The whole file is read into memory and parsed line by line; fields are slices of that
 * buffer, and only layer names are copied out. The reader builds its table in a local
 * struct and hands it over only when the whole file is good, so a failure leaves the
 * caller's struct as it was. It does no timing: the CLI passes each layer's M, N, K to
 * tpu_serial_gemm() (tpusim/scalesim.h) or to the chip's own model. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tpusim/topology_file.h"
#include "util.h"

/* A row never needs more than 10 fields (conv with two strides and a sparsity ratio); more
 * are counted but not kept. */
#define MAX_FIELDS 16
/* How much of an offending field or line a message quotes. */
#define QUOTE_MAX 60

struct slice {
    const char *p;
    size_t len;
};

/* The column layouts a header can announce. `names` are the canonical column names used in
 * messages (the file's own spelling may differ in case and spacing). */
struct layout {
    enum tpu_topology_file_format format;
    size_t n_cols; /* columns a row must have; one more is allowed for an N:M ratio */
    const char *const *names;
    const char *joined; /* the names, for "needs 4: ..." */
    const char *kind;   /* "GEMM" or "convolution" */
};

static const char *const gemm_names[] = {"Layer", "M", "N", "K"};
static const char *const conv1_names[] = {"Layer name", "IFMAP Height", "IFMAP Width",
                                          "Filter Height", "Filter Width", "Channels",
                                          "Num Filter", "Strides"};
static const char *const conv2_names[] = {"Layer name",   "IFMAP Height", "IFMAP Width",
                                          "Filter Height", "Filter Width", "Channels",
                                          "Num Filter",   "Stride height", "Stride width"};

static const struct layout gemm_layout = {TPU_TOPOLOGY_FILE_GEMM, 4, gemm_names, "Layer, M, N, K",
                                          "GEMM"};
static const struct layout conv1_layout = {
    TPU_TOPOLOGY_FILE_CONV, 8, conv1_names,
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
    "Strides",
    "convolution"};
static const struct layout conv2_layout = {
    TPU_TOPOLOGY_FILE_CONV, 9, conv2_names,
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
    "Stride height, Stride width",
    "convolution"};

#define GEMM_HEADER "'Layer, M, N, K,'"
#define CONV_HEADER                                                                            \
    "'Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, " \
    "Strides,'"

struct parser {
    const char *source; /* file name for messages */
    struct tpu_diag *d;
    uint32_t line; /* line being read, 1-based */
    const struct layout *layout;
    struct tpu_topology_file topo; /* being built; handed over on success */
    size_t cap;                /* allocated entries of topo.layers */
};

/* ---- messages ---------------------------------------------------------------------------- */

/* "<source>:<line>: <formatted>" */
static int line_fail(struct parser *ps, int code, const char *fmt, ...) TPU__PRINTF(3, 4);

static int line_fail(struct parser *ps, int code, const char *fmt, ...)
{
    char body[TPU_DIAG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return tpu__fail(ps->d, code, "%s:%" PRIu32 ": %s", ps->source, ps->line, body);
}

/* A field or line as a message quotes it (tpu__quote_n: control characters and bytes that
 * are not UTF-8 as \xNN, cut with "..."). Returned by value so that a call can sit in a
 * message's argument list: the array lives until the end of that full expression. */
struct quoted {
    char s[QUOTE_MAX + 4];
};

static struct quoted quote(struct slice s)
{
    struct quoted q;
    tpu__quote_n(s.p, s.len, q.s, sizeof q.s);
    return q;
}

/* ---- fields ------------------------------------------------------------------------------ */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static struct slice trim(struct slice s)
{
    while (s.len > 0 && is_blank(s.p[0]))
        s.p++, s.len--;
    while (s.len > 0 && is_blank(s.p[s.len - 1]))
        s.len--;
    return s;
}

/* Splits a line at commas into trimmed fields, stops at a field starting with '#' (a
 * comment), and drops trailing empty fields. Returns the number of fields left (0 for a
 * blank or comment line); the first MAX_FIELDS of them are stored in f. */
static size_t split_fields(struct slice line, struct slice *f)
{
    const char *p = line.p, *end = line.p + line.len;
    size_t n = 0, used = 0;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *field_end = comma ? comma : end;
        struct slice s = trim((struct slice){p, (size_t)(field_end - p)});
        if (s.len > 0 && s.p[0] == '#')
            break;
        if (n < MAX_FIELDS)
            f[n] = s;
        n++;
        if (s.len > 0)
            used = n;
        if (!comma)
            break;
        p = comma + 1;
    }
    return used;
}

static bool slice_ieq(struct slice s, const char *word)
{
    size_t n = strlen(word);
    if (s.len != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char a = s.p[i], b = word[i];
        if (a >= 'A' && a <= 'Z')
            a = (char)(a - 'A' + 'a');
        if (a != b)
            return false;
    }
    return true;
}

static bool slice_istarts(struct slice s, const char *word)
{
    size_t n = strlen(word);
    return s.len >= n && slice_ieq((struct slice){s.p, n}, word);
}

static bool all_digits(struct slice s)
{
    if (s.len == 0)
        return false;
    for (size_t i = 0; i < s.len; i++)
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
    return true;
}

/* A whole number >= 1 in column `col`. */
static int parse_dim(struct parser *ps, struct slice s, const char *col, uint64_t *out)
{
    if (s.len == 0)
        return line_fail(ps, TPU_EPARSE, "column '%s' is empty; it needs a whole number >= 1",
                         col);
    if (!all_digits(s))
        return line_fail(ps, TPU_EPARSE, "column '%s' is '%s', not a whole number >= 1", col,
                         quote(s).s);
    uint64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        uint64_t digit = (uint64_t)(s.p[i] - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return line_fail(ps, TPU_ERANGE,
                             "column '%s' is '%s', larger than the largest value taken, "
                             "%" PRIu64,
                             col, quote(s).s, UINT64_MAX);
        v = v * 10 + digit;
    }
    if (v == 0)
        return line_fail(ps, TPU_EPARSE, "column '%s' is '%s', not a whole number >= 1", col,
                         quote(s).s);
    *out = v;
    return 0;
}

/* The optional last column: an N:M ratio, accepted when dense (N == M). */
static int check_sparsity(struct parser *ps, struct slice s, size_t column)
{
    const char *colon = memchr(s.p, ':', s.len);
    if (colon) {
        struct slice a = trim((struct slice){s.p, (size_t)(colon - s.p)});
        struct slice b = trim((struct slice){colon + 1, s.len - (size_t)(colon - s.p) - 1});
        if (all_digits(a) && all_digits(b)) {
            if (a.len == b.len && memcmp(a.p, b.p, a.len) == 0 && !slice_ieq(a, "0"))
                return 0;
            return line_fail(ps, TPU_EUNSUPPORTED,
                             "column 'Sparsity' is '%s': tpusim times dense layers only; "
                             "use 1:1 or leave the column out",
                             quote(s).s);
        }
    }
    return line_fail(ps, TPU_EPARSE,
                     "column %zu is '%s': a %s row has %zu columns (%s) and may end with an "
                     "N:M sparsity ratio such as 1:1",
                     column, quote(s).s, ps->layout->kind,
                     ps->layout->n_cols, ps->layout->joined);
}

/* a*b into *out; false on overflow. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

/* SCALE-Sim's depth-wise test: 'DP' anywhere in the (trimmed) layer name. */
static bool names_depthwise(struct slice name)
{
    for (size_t i = 0; i + 1 < name.len; i++)
        if (name.p[i] == 'D' && name.p[i + 1] == 'P')
            return true;
    return false;
}

/* ---- the table --------------------------------------------------------------------------- */

static void free_layers(struct tpu_topology_file *t)
{
    for (size_t i = 0; i < t->n_layers; i++)
        free(t->layers[i].name);
    free(t->layers);
    t->layers = NULL;
    t->n_layers = 0;
}

void tpu_topology_file_free(struct tpu_topology_file *t)
{
    if (t)
        free_layers(t);
}

/* Appends a layer named `name`, or "<name>Channel_<channel>" when channel >= 0. */
static int add_layer(struct parser *ps, struct slice name, long long channel, uint64_t m,
                     uint64_t n, uint64_t k, const struct tpu_topology_file_conv *conv)
{
    struct tpu_topology_file *t = &ps->topo;
    if (t->n_layers >= TPU_TOPOLOGY_FILE_MAX_LAYERS)
        return line_fail(ps, TPU_ERANGE, "the table has more than %zu layers, the most one "
                                         "topology may hold; split the file",
                         TPU_TOPOLOGY_FILE_MAX_LAYERS);
    if (t->n_layers == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 16;
        struct tpu_topology_file_layer *grown = realloc(t->layers, cap * sizeof *grown);
        if (!grown)
            return line_fail(ps, TPU_ENOMEM, "out of memory growing the layer table to %zu "
                                             "layers",
                             cap);
        t->layers = grown;
        ps->cap = cap;
    }
    size_t size = name.len + 1 + (channel >= 0 ? sizeof "Channel_" + 20 : 0);
    char *copy = malloc(size);
    if (!copy)
        return line_fail(ps, TPU_ENOMEM, "out of memory copying a layer name");
    if (channel >= 0)
        snprintf(copy, size, "%.*sChannel_%lld", (int)name.len, name.p, channel);
    else {
        memcpy(copy, name.p, name.len);
        copy[name.len] = '\0';
    }
    struct tpu_topology_file_layer *l = &t->layers[t->n_layers++];
    memset(l, 0, sizeof *l);
    l->name = copy;
    l->m = m;
    l->n = n;
    l->k = k;
    l->line = ps->line;
    if (conv)
        l->conv = *conv;
    return 0;
}

/* M x N x K must fit in 64 bits: tpu_serial_gemm() and the chip count MACs in uint64_t. */
static int check_macs(struct parser *ps, struct slice name, uint64_t m, uint64_t n, uint64_t k)
{
    uint64_t mn;
    if (mul_u64(m, n, &mn) && mul_u64(mn, k, &mn))
        return 0;
    return line_fail(ps, TPU_ERANGE,
                     "layer '%s' has M x N x K = %" PRIu64 " x %" PRIu64 " x %" PRIu64
                     " multiply-accumulates, more than fit in 64 bits",
                     quote(name).s, m, n, k);
}

static int read_gemm_row(struct parser *ps, const struct slice *f)
{
    uint64_t dims[3];
    for (int i = 0; i < 3; i++) {
        int rc = parse_dim(ps, f[1 + i], gemm_names[1 + i], &dims[i]);
        if (rc)
            return rc;
    }
    int rc = check_macs(ps, f[0], dims[0], dims[1], dims[2]);
    if (rc)
        return rc;
    return add_layer(ps, f[0], -1, dims[0], dims[1], dims[2], NULL);
}

static int read_conv_row(struct parser *ps, const struct slice *f)
{
    const char *const *names = ps->layout->names;
    uint64_t v[8];
    size_t n_values = ps->layout->n_cols - 1; /* 7 or 8 */
    for (size_t i = 0; i < n_values; i++) {
        int rc = parse_dim(ps, f[1 + i], names[1 + i], &v[i]);
        if (rc)
            return rc;
    }
    struct tpu_topology_file_conv c = {
        .ifmap_h = v[0],
        .ifmap_w = v[1],
        .filter_h = v[2],
        .filter_w = v[3],
        .channels = v[4],
        .num_filters = v[5],
        .stride_h = v[6],
        .stride_w = n_values == 8 ? v[7] : v[6],
    };
    /* SCALE-Sim asserts these (topology_utils.append_topo_arrays(), "ISSUE #9"). */
    if (c.filter_h > c.ifmap_h)
        return line_fail(ps, TPU_EPARSE,
                         "the filter height %" PRIu64 " is larger than the IFMAP height %" PRIu64
                         "; SCALE-Sim pads nothing, so the filter must fit in the IFMAP",
                         c.filter_h, c.ifmap_h);
    if (c.filter_w > c.ifmap_w)
        return line_fail(ps, TPU_EPARSE,
                         "the filter width %" PRIu64 " is larger than the IFMAP width %" PRIu64
                         "; SCALE-Sim pads nothing, so the filter must fit in the IFMAP",
                         c.filter_w, c.ifmap_w);
    /* SCALE-Sim's topo_calc_hyperparams(): ceil((I - F + S) / S) = ceil((I - F) / S) + 1.
     * That is one more than the usual floor((I - F) / S) + 1 when the stride does not divide
     * I - F: the last window hangs over the edge, and operand_matrix.py marks its missing
     * pixels as -1 (no read) but the array still spends the row or column on it. */
    c.ofmap_h = tpu__ceil_div_u64(c.ifmap_h - c.filter_h, c.stride_h) + 1;
    c.ofmap_w = tpu__ceil_div_u64(c.ifmap_w - c.filter_w, c.stride_w) + 1;

    uint64_t m, window;
    if (!mul_u64(c.ofmap_h, c.ofmap_w, &m))
        return line_fail(ps, TPU_ERANGE,
                         "the ofmap of %" PRIu64 " x %" PRIu64 " pixels does not fit in 64 bits",
                         c.ofmap_h, c.ofmap_w);
    if (!mul_u64(c.filter_h, c.filter_w, &window))
        return line_fail(ps, TPU_ERANGE,
                         "the filter of %" PRIu64 " x %" PRIu64 " does not fit in 64 bits",
                         c.filter_h, c.filter_w);

    /* Depth-wise, as SCALE-Sim's load_arrays_conv(): 'DP' anywhere in the name. */
    bool depthwise = names_depthwise(f[0]);
    if (!depthwise) {
        uint64_t k;
        if (!mul_u64(window, c.channels, &k))
            return line_fail(ps, TPU_ERANGE,
                             "the window of %" PRIu64 " x %" PRIu64 " x %" PRIu64
                             " channels does not fit in 64 bits",
                             c.filter_h, c.filter_w, c.channels);
        int rc = check_macs(ps, f[0], m, c.num_filters, k);
        if (rc)
            return rc;
        return add_layer(ps, f[0], -1, m, c.num_filters, k, &c);
    }
    if (c.channels > TPU_TOPOLOGY_FILE_MAX_LAYERS - ps->topo.n_layers)
        return line_fail(ps, TPU_ERANGE,
                         "depth-wise layer '%s' (its name contains 'DP') expands into "
                         "%" PRIu64 " layers, one per channel, more than the %zu one topology "
                         "may hold",
                         quote(f[0]).s, c.channels,
                         TPU_TOPOLOGY_FILE_MAX_LAYERS);
    int rc = check_macs(ps, f[0], m, c.num_filters, window);
    if (rc)
        return rc;
    uint64_t channels = c.channels;
    c.channels = 1;
    for (uint64_t ch = 0; ch < channels; ch++) {
        rc = add_layer(ps, f[0], (long long)ch, m, c.num_filters, window, &c);
        if (rc)
            return rc;
    }
    return 0;
}

static int read_row(struct parser *ps, const struct slice *f, size_t n)
{
    const struct layout *lay = ps->layout;
    if (n < lay->n_cols)
        return line_fail(ps, TPU_EPARSE, "the row has %zu column%s, but a %s row needs %zu: %s",
                         n, n == 1 ? "" : "s", lay->kind, lay->n_cols, lay->joined);
    if (n > lay->n_cols + 1)
        return line_fail(ps, TPU_EPARSE,
                         "the row has %zu columns, but a %s row has %zu (%s) and may end with an "
                         "N:M sparsity ratio such as 1:1",
                         n, lay->kind, lay->n_cols, lay->joined);
    if (n == lay->n_cols + 1) {
        int rc = check_sparsity(ps, f[lay->n_cols], lay->n_cols + 1);
        if (rc)
            return rc;
    }
    if (f[0].len == 0)
        return line_fail(ps, TPU_EPARSE, "the layer name (column 1) is empty; give every layer "
                                         "a name");
    return lay->format == TPU_TOPOLOGY_FILE_GEMM ? read_gemm_row(ps, f) : read_conv_row(ps, f);
}

static int read_header(struct parser *ps, const struct slice *f, size_t n, struct slice line)
{
    size_t cols = n;
    if (cols >= 2 && cols <= MAX_FIELDS && slice_ieq(f[cols - 1], "sparsity"))
        cols--;
    if (cols == 4 && slice_ieq(f[1], "m") && slice_ieq(f[2], "n") && slice_ieq(f[3], "k")) {
        ps->layout = &gemm_layout;
        return 0;
    }
    if (cols >= 2 && cols <= MAX_FIELDS && slice_istarts(f[1], "ifmap")) {
        if (cols == 8) {
            ps->layout = &conv1_layout;
            return 0;
        }
        if (cols == 9) {
            ps->layout = &conv2_layout;
            return 0;
        }
        return line_fail(ps, TPU_EPARSE,
                         "the convolution header has %zu columns; SCALE-Sim's has 8 (%s) or 9 "
                         "(with 'Stride height, Stride width' for 'Strides'), optionally "
                         "followed by 'Sparsity'",
                         cols, conv1_layout.joined);
    }
    line = trim(line);
    if (n >= 2 && n <= MAX_FIELDS && all_digits(f[1]))
        return line_fail(ps, TPU_EPARSE,
                         "the first line is a layer ('%s'), not a header; SCALE-Sim skips "
                         "the first line unread, so add a header: " GEMM_HEADER
                         " for a GEMM topology or " CONV_HEADER " for a convolution topology",
                         quote(line).s);
    return line_fail(ps, TPU_EPARSE,
                     "'%s' is not a SCALE-Sim topology header; expected " GEMM_HEADER
                     " (GEMM) or " CONV_HEADER " (convolution)",
                     quote(line).s);
}

int tpu_topology_file_parse(const char *text, size_t len, const char *source,
                        struct tpu_topology_file *out, struct tpu_diag *d)
{
    if (!out || (!text && len > 0))
        return tpu__fail(d, TPU_EINVAL, "tpu_topology_file_parse needs text and a result struct");
    if (!source)
        source = "topology";
    struct parser ps = {.source = source, .d = d};

    /* Text only: a NUL byte means a binary file (or UTF-16, which SCALE-Sim cannot read
     * either). */
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul) {
        ps.line = 1;
        for (const char *p = text; p < nul; p++)
            ps.line += *p == '\n';
        return line_fail(&ps, TPU_EPARSE, "the line holds a NUL byte; a topology file is plain "
                                          "text (CSV)");
    }

    size_t pos = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3; /* UTF-8 byte-order mark, as spreadsheet programs write */

    uint32_t header_line = 0;
    int rc = 0;
    while (pos < len) {
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - start) : len - pos;
        pos += line_len + (nl ? 1 : 0);
        ps.line++;

        struct slice f[MAX_FIELDS];
        struct slice line = {start, line_len};
        size_t n = split_fields(line, f);
        if (n == 0)
            continue;
        if (!ps.layout) {
            rc = read_header(&ps, f, n, line);
            if (rc)
                goto fail;
            ps.topo.format = ps.layout->format;
            header_line = ps.line;
            continue;
        }
        rc = read_row(&ps, f, n);
        if (rc)
            goto fail;
    }

    if (!ps.layout)
        return tpu__fail(d, TPU_EPARSE,
                         "%s: the file is empty; a SCALE-Sim topology starts with a header "
                         "such as " GEMM_HEADER " and has one row per layer",
                         source);
    if (ps.topo.n_layers == 0) {
        rc = tpu__fail(d, TPU_EPARSE,
                       "%s: no layers: the header on line %" PRIu32 " is followed by no layer "
                       "rows; add one row per layer, such as %s",
                       source, header_line,
                       ps.layout->format == TPU_TOPOLOGY_FILE_GEMM
                           ? "'fc1, 128, 256, 784,'"
                           : "'Conv1, 224, 224, 11, 11, 3, 96, 4,'");
        goto fail;
    }
    *out = ps.topo;
    return 0;

fail:
    free_layers(&ps.topo);
    return rc;
}

int tpu_topology_file_read(const char *path, struct tpu_topology_file *out, struct tpu_diag *d)
{
    if (!path || !out)
        return tpu__fail(d, TPU_EINVAL, "tpu_topology_file_read needs a path and a result struct");
    char why[256], qpath[TPU__QUOTE_PATH_BYTES];
    FILE *f = fopen(path, "rb");
    const char *raw_path = path;
    path = tpu__quote(raw_path, qpath, sizeof qpath); /* for messages, and as the source */
    if (!f) {
        int e = errno;
        if (strerror_r(e, why, sizeof why) != 0)
            snprintf(why, sizeof why, "error %d", e);
        return tpu__fail(d, TPU_EIO, "cannot open topology file '%s': %s", path, why);
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return tpu__fail(d, TPU_EIO, "'%s' is a directory; give a SCALE-Sim topology file "
                         "(CSV, such as 'Layer, M, N, K,' then one row per layer)", path);
    }

    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    if (!buf) {
        rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
        goto out;
    }
    /* Read at most one byte more than the limit, to tell "at the limit" from "over it". */
    for (;;) {
        if (len == cap) {
            if (cap > TPU_TOPOLOGY_FILE_MAX_BYTES) {
                rc = tpu__fail(d, TPU_ERANGE,
                               "'%s' is larger than %zu MiB; a topology file is a small CSV "
                               "table of layers (is this the right file?)",
                               path, TPU_TOPOLOGY_FILE_MAX_BYTES >> 20);
                goto out;
            }
            size_t grown_cap = cap * 2;
            if (grown_cap > TPU_TOPOLOGY_FILE_MAX_BYTES + 1)
                grown_cap = TPU_TOPOLOGY_FILE_MAX_BYTES + 1;
            char *grown = realloc(buf, grown_cap);
            if (!grown) {
                rc = tpu__fail(d, TPU_ENOMEM, "out of memory reading '%s'", path);
                goto out;
            }
            buf = grown;
            cap = grown_cap;
        }
        errno = 0;
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                if (strerror_r(e, why, sizeof why) != 0)
                    snprintf(why, sizeof why, "error %d", e);
                rc = tpu__fail(d, TPU_EIO, "cannot read topology file '%s': %s", path, why);
                goto out;
            }
            break;
        }
    }
    rc = tpu_topology_file_parse(buf, len, path, out, d);
out:
    free(buf);
    fclose(f);
    return rc;
}
