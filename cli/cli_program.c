/* `tpusim program`: device programs in their text form, from the shell.
 *
 *   tpusim program check FILE [--chip C]     parse, verify against the chip, print it back
 *   tpusim program run FILE [options]        run it on a simulated device with generated
 *                                            infeed data and report each core's counters
 *                                            (--ops: and each op's statistics, device.h)
 *
 * `run` feeds every infeed op a tensor of its buffer's shape (uniform random floats in
 * [-1, 1) from --seed, zeros for integers: a valid label), drains every outfeed, and sets
 * every variable named on the command line (--var NAME=VALUE; the loop count among them). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "options.h"
#include "rng.h"
#include "tpusim/device.h"
#include "tpusim/program.h"
#include "util.h"

#define MAX_VARS 16
/* The largest program text read, in bytes: far beyond any real program, small enough that a
 * wrong file (a disk image, /dev/zero) fails at once. */
#define PROGRAM_TEXT_MAX_BYTES (16 << 20)

struct prog_opts {
    const char *sub, *file, *chip, *trace;
    uint32_t chips;
    unsigned threads;
    uint64_t seed;
    bool timing_only, json, ops;
    const char *var_name[MAX_VARS];
    int64_t var_value[MAX_VARS];
    int n_vars;
};

static const char *const CMD = "program";

/* --var NAME=INTEGER, up to MAX_VARS of them. */
static int set_var(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                   const char *val)
{
    struct prog_opts *o = p->target;
    char qb[TPU__QUOTE_BYTES];
    const char *eq = strchr(val, '=');
    char *end = NULL;
    (void)opt;
    errno = 0;
    long long x = eq ? strtoll(eq + 1, &end, 10) : 0;
    if (o->n_vars == MAX_VARS)
        return tpu__cli_error(CMD, TPU_CLI_USAGE, "more than %d --var options; set at "
                              "most %d variables", MAX_VARS, MAX_VARS);
    if (!eq || eq == val || !end || end == eq + 1 || *end)
        return tpu__cli_error(CMD, TPU_CLI_USAGE, "--var '%s' is not NAME=INTEGER; "
                              "e.g. --var iterations=10",
                              tpu__quote(val, qb, sizeof qb));
    if (errno == ERANGE)
        return tpu__cli_error(CMD, TPU_CLI_USAGE, "--var '%s': the value is out of "
                              "range (%lld to %lld)", tpu__quote(val, qb, sizeof qb),
                              LLONG_MIN, LLONG_MAX);
    o->var_name[o->n_vars] = val;
    o->var_value[o->n_vars++] = x;
    return 0;
}

/* The program file: one operand. */
static int set_file(const struct tpu__cli_parse *p, const char *arg)
{
    struct prog_opts *o = p->target;
    char qb[TPU__QUOTE_BYTES], qb2[TPU__QUOTE_BYTES];
    if (o->file)
        return tpu__cli_error(CMD, TPU_CLI_USAGE, "one program file at a time: '%s' "
                              "and '%s'", tpu__quote(o->file, qb, sizeof qb),
                              tpu__quote(arg, qb2, sizeof qb2));
    o->file = arg;
    return 0;
}

/* check and run share the table: what only run takes is marked so. */
enum { PROG_CHECK = 1, PROG_RUN = 2 };
static const char *const prog_scopes[] = {"program check", "program run", NULL};
#define RUN_ONLY .scope = PROG_RUN, .scope_why = "check only parses and verifies"

static const struct tpu__cli_opt prog_opts[] = {
    {.name = "--chip", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct prog_opts, chip),
     .arg = "NAME|FILE", .help = "chip preset or JSON file (default tiny)"},
    {.name = "--chips", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct prog_opts, chips), .min = 1,
     .max = 4096, RUN_ONLY, .arg = "N",
     .help = "chips on the host (default: the chip's\nchips_per_host)"},
    {.name = "--threads", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct prog_opts, threads),
     .min = 1, .max = 256, RUN_ONLY, .arg = "N",
     .help = "host threads simulating the cores\n(default: one per core, at most the CPUs)"},
    {.name = "--var", .kind = TPU__CLI_CUSTOM, .set = set_var, RUN_ONLY, .arg = "NAME=VALUE",
     .help = "set a device variable (the loop\ncount among them); repeat for each, at most 16"},
    {.name = "--seed", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct prog_opts, seed), .min = 0,
     .max = UINT64_MAX, RUN_ONLY, .arg = "N",
     .help = "seed of the generated infeed data (default 1)"},
    {.name = "--timing-only", .kind = TPU__CLI_FLAG,
     TPU__CLI_FIELD(struct prog_opts, timing_only), RUN_ONLY,
     .help = "count cycles, compute no values"},
    {.name = "--trace", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct prog_opts, trace), RUN_ONLY,
     .arg = "FILE.json", .help = "write the timeline (Chrome trace JSON,\nopens in Perfetto)"},
    {.name = "--ops", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct prog_opts, ops), RUN_ONLY,
     .help = "also each op's profile: runs, its share of\nthe core's time, busiest unit, MXU use"},
    {.name = "--json", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct prog_opts, json), RUN_ONLY,
     .help = "machine-readable output"},
};

const struct tpu__cli_opts tpu__cli_program_options = {
    .opts = prog_opts,
    .n_opts = sizeof prog_opts / sizeof prog_opts[0],
    .usage =
        "usage: tpusim program check FILE [--chip NAME|FILE]\n"
        "       tpusim program run FILE [--chip NAME|FILE] [--chips N] [--threads N]\n"
        "                               [--var NAME=VALUE]... [--seed N] [--timing-only]\n"
        "                               [--trace FILE.json] [--ops] [--json]\n"
        "\n"
        "check parses FILE (the text form of include/tpusim/program.h), verifies it against the\n"
        "chip (default tiny) and prints it back in canonical form. run also runs it once on every\n"
        "core with generated infeed data and prints each core's cycles, unit busy time and\n"
        "stalls; --ops adds a line per op (core 0; --json: every core). FILE is text of at most\n"
        "16 MiB.\n"
        "\n",
    .help_column = 25,
    .scope_names = prog_scopes,
};

/* Returns 0, TPU__CLI_HELP after printing the help, or an exit code after an error. */
static int parse_args(int argc, char **argv, struct prog_opts *o)
{
    *o = (struct prog_opts){.chip = "tiny", .seed = 1};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tpu__cli_opts_help(&tpu__cli_program_options, argc < 2 ? stderr : stdout);
        return argc < 2 ? TPU_CLI_USAGE : TPU__CLI_HELP;
    }
    o->sub = argv[1];
    if (strcmp(o->sub, "check") && strcmp(o->sub, "run"))
        return tpu__cli_unknown_command(CMD, o->sub, (const char *const[]){"check", "run", NULL});
    const bool check = !strcmp(o->sub, "check");
    const struct tpu__cli_parse p = {.table = &tpu__cli_program_options,
                                     .cmd = CMD,
                                     .scope = check ? PROG_CHECK : PROG_RUN, .target = o};
    int rc = tpu__cli_opts_parse(&p, argc, argv, 2, set_file);
    if (rc)
        return rc;
    if (!o->file)
        return tpu__cli_error(CMD, TPU_CLI_USAGE, "give the program file: tpusim program %s "
                              "FILE", o->sub);
    return 0;
}

/* The whole file as a string (caller frees), or NULL after printing the error. A program text
 * is at most PROGRAM_TEXT_MAX_BYTES (the usage text says so) and holds no NUL byte: the
 * parser reads a C string, so text after a NUL would be silently ignored. */
static char *read_file(const char *path)
{
    char qp[TPU__QUOTE_PATH_BYTES];
    tpu__quote(path, qp, sizeof qp);
    FILE *f = fopen(path, "rb");
    if (!f) {
        tpu__cli_error(CMD, TPU_CLI_FAIL, "cannot open '%s': %s", qp, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        tpu__cli_error(CMD, TPU_CLI_FAIL, "'%s' is a directory; give a program text file "
                       "(see 'tpusim program --help')", qp);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    bool too_big = false;
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n > PROGRAM_TEXT_MAX_BYTES) {
            too_big = true;
            break;
        }
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf) {
        tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory reading '%s'", qp);
        return NULL;
    }
    if (too_big || read_errno) {
        free(buf);
        if (too_big)
            tpu__cli_error(CMD, TPU_CLI_FAIL, "'%s' is larger than %d MiB (%d bytes), the limit "
                           "for a program text; a program is a few kilobytes of text: is this "
                           "the right file?", qp, PROGRAM_TEXT_MAX_BYTES >> 20,
                           PROGRAM_TEXT_MAX_BYTES);
        else
            tpu__cli_error(CMD, TPU_CLI_FAIL, "cannot read '%s': %s", qp, strerror(read_errno));
        return NULL;
    }
    const char *nul = memchr(buf, '\0', n);
    if (nul) {
        size_t line = 1, col = 1;
        for (const char *c = buf; c < nul; c++, col++)
            if (*c == '\n') {
                line++;
                col = 0;
            }
        tpu__cli_error(CMD, TPU_CLI_FAIL, "%s:%zu:%zu: a NUL byte (\\x00); a program is text "
                       "and holds none (is this a binary file?)", qp, line, col);
        free(buf);
        return NULL;
    }
    if (n == 0) {
        tpu__cli_error(CMD, TPU_CLI_FAIL, "'%s' is empty; a program text starts with 'program "
                       "<name>' (see 'tpusim program --help')", qp);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* The infeed (or outfeed) buffers in the order one run meets them. */
static size_t feed_order(const struct tpu_program *p, enum tpu_opcode code, int64_t trips,
                         uint32_t *out, size_t cap)
{
    size_t n = 0, begin = SIZE_MAX;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++) {
        const struct tpu_op *op = tpu_program_op(p, i);
        if (op->code == TPU_OP_LOOP_BEGIN) {
            begin = i;
            continue;
        }
        if (op->code == TPU_OP_LOOP_END) {
            /* the body again, trips - 1 more times */
            for (int64_t t = 1; t < trips; t++)
                for (size_t k = begin + 1; k < i; k++) {
                    const struct tpu_op *b = tpu_program_op(p, k);
                    if (b->code == code && n < cap)
                        out[n++] = code == TPU_OP_INFEED ? b->out[0] : b->in[0];
                }
            if (trips <= 0) /* the body never ran: drop what was counted for it */
                for (size_t k = begin + 1; k < i; k++)
                    if (tpu_program_op(p, k)->code == code && n > 0)
                        n--;
            begin = SIZE_MAX;
            continue;
        }
        if (op->code == code && n < cap)
            out[n++] = code == TPU_OP_INFEED ? op->out[0] : op->in[0];
    }
    return n;
}

struct feeder {
    struct tpu_device *dev;
    const struct tpu_program *p;
    const uint32_t *order;
    size_t n;
    uint64_t seed;
    bool timing_only;
    int rc;
    struct tpu_diag d;
};

static void *feed(void *arg)
{
    struct feeder *f = arg;
    struct tpu__rng r;
    tpu__rng_seed(&r, f->seed);
    for (size_t i = 0; i < f->n && !f->rc; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(f->p, f->order[i]);
        size_t bytes = tpu_buffer_bytes(b), count = (size_t)b->rows * b->cols;
        void *data = f->timing_only ? NULL : calloc(1, bytes ? bytes : 1);
        if (data && b->dtype == TPU_F32)
            for (size_t k = 0; k < count; k++)
                ((float *)data)[k] = tpu__rng_uniform(&r) * 2.0f - 1.0f;
        if (data && b->dtype == TPU_BF16)
            for (size_t k = 0; k < count; k++)
                ((tpu_bf16 *)data)[k] = tpu_bf16_from_f32(tpu__rng_uniform(&r) * 2.0f - 1.0f);
        for (uint32_t c = 0; c < tpu_device_n_cores(f->dev) && !f->rc; c++)
            f->rc = tpu_device_infeed(f->dev, c, data, bytes, 0, &f->d);
        free(data);
    }
    return NULL;
}

struct drainer {
    struct tpu_device *dev;
    const struct tpu_program *p;
    const uint32_t *order;
    size_t n;
    uint32_t core;
    int rc;
};

static void *drain(void *arg)
{
    struct drainer *g = arg;
    for (size_t i = 0; i < g->n && !g->rc; i++) {
        size_t bytes = tpu_buffer_bytes(tpu_program_buffer(g->p, g->order[i]));
        void *buf = malloc(bytes ? bytes : 1);
        g->rc = buf ? tpu_device_outfeed(g->dev, g->core, buf, bytes, 0, NULL, NULL) : TPU_ENOMEM;
        free(buf);
    }
    return NULL;
}

/* Sets the variables named by --var; returns 0 or an exit code after the error. */
static int set_vars(const struct prog_opts *o, const struct tpu_program *p,
                    struct tpu_device *dev)
{
    for (int i = 0; i < o->n_vars; i++) {
        char name[64];
        size_t len = (size_t)(strchr(o->var_name[i], '=') - o->var_name[i]);
        snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), o->var_name[i]);
        uint32_t id;
        if (tpu_program_find_var(p, name, &id)) {
            char qb[TPU__QUOTE_BYTES], qn[TPU__QUOTE_BYTES];
            return tpu__cli_error(CMD, TPU_CLI_USAGE, "--var %s: the program has no variable "
                                  "'%s'", tpu__quote(o->var_name[i], qb, sizeof qb),
                                  tpu__quote(name, qn, sizeof qn));
        }
        tpu_device_set_var(dev, id, o->var_value[i]);
    }
    return 0;
}

/* Runs the loaded program once with a feeder thread for the infeeds and a drainer per core
 * for the outfeeds (in_order and out_order: their orders, n_in and n_out long). */
static int run_fed(const struct prog_opts *o, struct tpu_program *p, struct tpu_device *dev,
                   const uint32_t *in_order, size_t n_in, const uint32_t *out_order,
                   size_t n_out, uint64_t *end)
{
    struct tpu_diag d = {0};
    struct feeder fd = {.dev = dev, .p = p, .order = in_order, .n = n_in, .seed = o->seed,
                        .timing_only = o->timing_only};
    uint32_t n_cores = tpu_device_n_cores(dev);
    struct drainer *dr = calloc(n_cores, sizeof *dr);
    pthread_t ft, *dt = calloc(n_cores, sizeof *dt);
    if (!dr || !dt) {
        free(dr);
        free(dt);
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory");
    }
    pthread_create(&ft, NULL, feed, &fd);
    for (uint32_t c = 0; c < n_cores; c++) {
        dr[c] = (struct drainer){.dev = dev, .p = p, .order = out_order, .n = n_out, .core = c};
        pthread_create(&dt[c], NULL, drain, &dr[c]);
    }
    int r = tpu_device_run(dev, 0, end, &d);
    if (r)
        tpu_device_cancel(dev); /* release the feeding threads */
    pthread_join(ft, NULL);
    for (uint32_t c = 0; c < n_cores; c++)
        pthread_join(dt[c], NULL);
    free(dr);
    free(dt);
    if (r)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    return 0;
}

/* The unit an op kept busiest ("-" for none): what bounds it. */
static const char *bound_unit(const struct tpu_op_stats *st)
{
    int best = -1;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        if (st->busy[u] && (best < 0 || st->busy[u] > st->busy[best]))
            best = u;
    return best < 0 ? "-" : tpu_unit_name((enum tpu_unit)best);
}

/* Core c's per-op statistics: a JSON array, or (text) a table. */
static int print_op_stats(const struct prog_opts *o, const struct tpu_program *p,
                          struct tpu_device *dev, uint32_t c)
{
    const size_t n = tpu_program_n_ops(p);
    struct tpu_op_stats *st = calloc(n ? n : 1, sizeof *st);
    struct tpu_diag d = {0};
    if (!st)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory");
    if (tpu_device_op_stats(dev, c, st, n, &d)) {
        free(st);
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += st[i].share_cycles;
    if (!o->json)
        printf("ops of core %u (share: the cycles the op added to the core's finish;\n"
               "bound: its busiest unit; mxu: MACs per MAC slot while the MXU was busy)\n"
               "   op  runs        share      %%  bound    mxu  hbm bytes  op\n", c);
    for (size_t i = 0; i < n; i++) {
        const struct tpu_op_stats *t = &st[i];
        char line[160];
        tpu_program_format_op(p, i, line, sizeof line);
        if (o->json) {
            printf("%s{\"op\": %zu, \"runs\": %" PRIu64 ", \"share_cycles\": %" PRIu64
                   ", \"bound\": \"%s\", \"macs\": %" PRIu64 ", \"mxu_mac_slots\": %" PRIu64
                   ", \"hbm_read_bytes\": %" PRIu64 ", \"hbm_write_bytes\": %" PRIu64,
                   i ? ", " : "", i, t->runs, t->share_cycles, bound_unit(t), t->macs,
                   t->mxu_mac_slots, t->hbm_read_bytes, t->hbm_write_bytes);
            for (int u = 0; u < TPU_UNIT_COUNT; u++)
                printf(", \"busy_%s\": %" PRIu64, tpu_unit_name((enum tpu_unit)u), t->busy[u]);
            for (int k = 0; k < TPU_STALL_COUNT; k++)
                printf(", \"stall_%s\": %" PRIu64, tpu_stall_name((enum tpu_stall)k),
                       t->stall[k]);
            printf("}");
            continue;
        }
        char mxu[16] = "-";
        if (t->mxu_mac_slots)
            snprintf(mxu, sizeof mxu, "%.1f%%", 100.0 * (double)t->macs / (double)t->mxu_mac_slots);
        printf("  %3zu %5" PRIu64 " %12" PRIu64 " %5.1f%%  %-7s %6s %10" PRIu64 "  %s\n", i,
               t->runs, t->share_cycles, total ? 100.0 * (double)t->share_cycles / (double)total
                                               : 0.0,
               bound_unit(t), mxu, t->hbm_read_bytes + t->hbm_write_bytes, line);
    }
    free(st);
    return 0;
}

/* Each core's cycles, unit busy time and stalls, as text or JSON. */
static int print_counters(const struct prog_opts *o, const struct tpu_program *p,
                          const struct tpu_chip_config *chip, struct tpu_device *dev,
                          uint64_t end)
{
    uint32_t n_cores = tpu_device_n_cores(dev);
    if (o->json)
        printf("{\"program\": \"%s\", \"chip\": \"%s\", \"cycles\": %" PRIu64 ", \"cores\": [",
               tpu_program_name(p), chip->name, end);
    else
        printf("program %s on %s: %u cores, %" PRIu64 " cycles (%.3f us at %.0f MHz)%s\n",
               tpu_program_name(p), chip->name, n_cores, end, end / chip->clock_mhz,
               chip->clock_mhz, o->timing_only ? ", timing only" : "");
    for (uint32_t c = 0; c < n_cores; c++) {
        struct tpu_core_counters k;
        tpu_device_counters(dev, c, &k);
        if (o->json) {
            printf("%s{\"cycles\": %" PRIu64 ", \"ops\": %" PRIu64 ", \"macs\": %" PRIu64,
                   c ? ", " : "", k.cycles, k.ops, k.macs);
            for (int u = 0; u < TPU_UNIT_COUNT; u++)
                printf(", \"busy_%s\": %" PRIu64, tpu_unit_name((enum tpu_unit)u), k.busy[u]);
            for (int t = 0; t < TPU_STALL_COUNT; t++)
                printf(", \"stall_%s\": %" PRIu64, tpu_stall_name((enum tpu_stall)t), k.stall[t]);
            if (o->ops) {
                printf(", \"op_stats\": [");
                int rc = print_op_stats(o, p, dev, c);
                if (rc)
                    return rc;
                printf("]");
            }
            printf("}");
            continue;
        }
        printf("  core %u: %" PRIu64 " cycles, %" PRIu64 " ops;", c, k.cycles, k.ops);
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            if (k.busy[u])
                printf(" %s %" PRIu64, tpu_unit_name((enum tpu_unit)u), k.busy[u]);
        printf(";  stalls:");
        for (int t = 0; t < TPU_STALL_COUNT; t++)
            printf(" %s %" PRIu64, tpu_stall_name((enum tpu_stall)t), k.stall[t]);
        printf("\n");
    }
    struct tpu_program_memory m = {0};
    tpu_device_memory(dev, &m);
    const uint64_t hbm = chip->hbm_bytes / chip->cores_per_chip;
    if (o->json && o->ops)
        printf("], \"hbm\": {\"bytes\": %" PRIu64 ", \"param_bytes\": %" PRIu64
               ", \"temp_peak_bytes\": %" PRIu64 ", \"peak_op\": %lld, \"temp_bytes\": %"
               PRIu64 ", \"core_bytes\": %" PRIu64 "}}\n",
               m.hbm_bytes, m.param_bytes, m.temp_peak_bytes,
               m.peak_op == SIZE_MAX ? -1 : (long long)m.peak_op, m.temp_bytes, hbm);
    else if (o->json)
        printf("]}\n");
    if (o->json || !o->ops)
        return 0;
    printf("HBM per core: %" PRIu64 " of %" PRIu64 " bytes: params %" PRIu64 " + the peak of "
           "live temps %" PRIu64, m.hbm_bytes, hbm, m.param_bytes, m.temp_peak_bytes);
    if (m.peak_op != SIZE_MAX)
        printf(" at op %zu", m.peak_op);
    printf(" (all temps: %" PRIu64 ")\n", m.temp_bytes);
    return print_op_stats(o, p, dev, 0);
}

static int run(const struct prog_opts *o, struct tpu_program *p,
               const struct tpu_chip_config *chip)
{
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, chip);
    if (o->chips)
        s.n_chips = o->chips;
    s.n_threads = o->threads;
    s.timing_only = o->timing_only;
    s.trace = o->trace != NULL;
    s.op_stats = o->ops;
    struct tpu_device *dev = NULL;
    struct tpu_diag d = {0};
    int rc = 0;
    uint32_t *in_order = NULL, *out_order = NULL;
    if (tpu_device_open(&s, &dev, &d) || tpu_device_load(dev, p, &d)) {
        rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
        goto out;
    }
    if ((rc = set_vars(o, p, dev)))
        goto out;
    int64_t trips = 0;
    for (size_t i = 0; i < tpu_program_n_ops(p); i++)
        if (tpu_program_op(p, i)->code == TPU_OP_LOOP_BEGIN)
            trips = tpu_device_get_var(dev, 0, tpu_program_op(p, i)->attrs.var);
    const size_t cap = 1u << 20;
    in_order = malloc(cap * sizeof *in_order);
    out_order = malloc(cap * sizeof *out_order);
    if (!in_order || !out_order) {
        rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory");
        goto out;
    }
    size_t n_in = feed_order(p, TPU_OP_INFEED, trips, in_order, cap);
    size_t n_out = feed_order(p, TPU_OP_OUTFEED, trips, out_order, cap);
    uint64_t end = 0;
    if ((rc = run_fed(o, p, dev, in_order, n_in, out_order, n_out, &end)))
        goto out;
    if (o->trace && tpu_device_write_trace(dev, o->trace, &d)) {
        rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
        goto out;
    }
    rc = print_counters(o, p, chip, dev, end);
out:
    free(in_order);
    free(out_order);
    tpu_device_close(&dev);
    return rc;
}

int tpu__cli_program(int argc, char **argv)
{
    struct prog_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    if (tpu_config_load(o.chip, &chip, &d))
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    char *text = read_file(o.file);
    if (!text)
        return TPU_CLI_FAIL;
    struct tpu_program *p = NULL;
    rc = tpu_program_parse(text, o.file, &p, &d);
    free(text);
    if (rc)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    if (tpu_program_verify(p, &chip, &d)) {
        tpu_program_destroy(&p);
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    }
    if (!strcmp(o.sub, "check"))
        rc = tpu_program_print(p, stdout) ? TPU_CLI_FAIL : TPU_CLI_OK;
    else
        rc = run(&o, p, &chip);
    tpu_program_destroy(&p);
    return rc;
}
