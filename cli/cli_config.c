/* `tpusim config`: list the built-in chip presets, show one configuration with its derived
 * figures, or check configuration files.
 *
 * This file only formats: loading and every rule about what a valid configuration is live in
 * sim/config/config.c (the library), so the CLI and the simulator accept exactly the same files.
 * `show --json` prints {"config": <the document as given>, "derived": {...}}; its "config"
 * member is itself a valid configuration file, so a user can start a new chip from a preset. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli.h"
#include "options.h"
#include "tpusim/config.h"
#include "util.h"

static const char usage_config[] =
    "usage: tpusim config <command> [options]\n"
    "\n"
    "Print or check a chip configuration. NAME is a built-in preset (see 'tpusim config\n"
    "list'); FILE is a JSON file in the same format. To write your own, start from a preset:\n"
    "the \"config\" member of 'tpusim config show tiny --json' is a valid file; each field's\n"
    "meaning and unit are in its name, and 'check' names any field that is wrong.\n"
    "\n"
    "commands:\n"
    "  list [--json]             the built-in presets, one line each\n"
    "  show NAME|FILE [--json]   every figure, the derived peaks and roofline ridge point,\n"
    "                            the sources and notes\n"
    "  check NAME|FILE...        validate; prints 'FILE: ok (...)' or the error\n"
    "\n"
    "Run 'tpusim config <command> --help' for each. Exit status: 0 ok, 1 a configuration\n"
    "was rejected or could not be read, 2 the command line was wrong.\n";

/* The options of list, show and check: --json (not for check) and the operands. */
struct config_args {
    bool json;
    char **pos; /* the first `cap` operands */
    int cap, n_pos;
};

static int add_operand(const struct tpu__cli_parse *p, const char *arg)
{
    struct config_args *a = p->target;
    if (a->n_pos < a->cap)
        a->pos[a->n_pos] = (char *)arg;
    a->n_pos++;
    return 0;
}

static const struct tpu__cli_opt list_opts[] = {
    {.name = "--json", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct config_args, json),
     .help = "print a JSON array of {\"name\", \"description\", \"derived\"} instead"},
};

static const struct tpu__cli_opt show_opts[] = {
    {.name = "--json", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct config_args, json),
     .help = "print {\"config\": <the configuration as given>, \"derived\": {...}}"},
};

const struct tpu__cli_opts tpu__cli_config_list_options = {
    .opts = list_opts,
    .n_opts = 1,
    .usage =
        "usage: tpusim config list [--json]\n"
        "\n"
        "Lists the chip presets compiled into tpusim, one line each: cores, matrix units, data\n"
        "types, clock, peak rate, off-chip memory and interconnect.\n",
    .help_column = 14,
    .dash_is_operand = true,
};

const struct tpu__cli_opts tpu__cli_config_show_options = {
    .opts = show_opts,
    .n_opts = 1,
    .usage =
        "usage: tpusim config show NAME|FILE [--json]\n"
        "\n"
        "Prints a chip configuration (a preset NAME, or a JSON FILE) with the figures derived\n"
        "from it: total matrix units, peak MAC/s and FLOP/s (or OPS for int8), HBM bandwidth,\n"
        "the roofline ridge point (peak MACs per byte of HBM traffic), host link bandwidth; then\n"
        "the sources and notes the configuration cites.\n",
    .help_column = 14,
    .dash_is_operand = true,
};

const struct tpu__cli_opts tpu__cli_config_check_options = {
    .n_opts = 0,
    .usage =
        "usage: tpusim config check NAME|FILE...\n"
        "\n"
        "Validates each configuration and prints 'FILE: ok (name ..., peak ...)' for a good one\n"
        "or the error (which names the file, the field and the rule) for a bad one. Exit status\n"
        "1 if any configuration is rejected.\n",
    .help_column = 14,
    .dash_is_operand = true,
};

/* ---- formatting ------------------------------------------------------------------------- */

/* 275.3 T, 256 G: value with an SI prefix, 4 significant digits. */
static void fmt_si(char *buf, size_t n, double v, const char *unit)
{
    static const char *const prefix[] = {"", "k", "M", "G", "T", "P", "E"};
    size_t p = 0;
    while (v >= 1000.0 && p + 1 < sizeof prefix / sizeof prefix[0]) {
        v /= 1000.0;
        p++;
    }
    snprintf(buf, n, "%.4g %s%s", v, prefix[p], unit);
}

/* "32 GiB (34359738368 bytes)", "512 KiB (524288 bytes)", "1000 bytes" */
static void fmt_bytes(char *buf, size_t n, uint64_t b)
{
    static const struct {
        uint64_t size;
        const char *unit;
    } units[] = {
        {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (b >= units[i].size && b % units[i].size == 0) {
            snprintf(buf, n, "%" PRIu64 " %s (%" PRIu64 " bytes)", b / units[i].size,
                     units[i].unit, b);
            return;
        }
    snprintf(buf, n, "%" PRIu64 " bytes", b);
}

static void fmt_dtypes(char *buf, size_t n, uint32_t bits)
{
    snprintf(buf, n, "%s%s%s", (bits & TPU_DTYPE_BIT(TPU_BF16)) ? "bf16" : "",
             (bits & TPU_DTYPE_BIT(TPU_BF16)) && (bits & TPU_DTYPE_BIT(TPU_INT8)) ? "," : "",
             (bits & TPU_DTYPE_BIT(TPU_INT8)) ? "int8" : "");
}

/* The peak as users quote it: FLOP/s when the chip multiplies bf16, else int8 OPS. */
static void fmt_peak(char *buf, size_t n, const struct tpu_chip_config *cfg,
                     const struct tpu_chip_derived *dv)
{
    fmt_si(buf, n, dv->peak_flops_per_s,
           (cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)) ? "FLOP/s" : "OPS (int8)");
}

/* Prints `text` word-wrapped to 92 columns: the first line after `first`, the others after
 * `cont` spaces. */
static void print_wrapped(const char *first, size_t cont, const char *text)
{
    const size_t width = 92, indent = strlen(first);
    size_t col = indent;
    fputs(first, stdout);
    while (*text) {
        while (*text == ' ')
            text++;
        size_t word = strcspn(text, " ");
        if (word == 0)
            break;
        if (col > indent && col + 1 + word > width) {
            printf("\n%*s", (int)cont, "");
            col = cont;
        } else if (col > indent) {
            putchar(' ');
            col++;
        }
        fwrite(text, 1, word, stdout);
        col += word;
        text += word;
    }
    putchar('\n');
}

#define ROW(label, ...)                                                                        \
    do {                                                                                       \
        printf("  %-26s", label);                                                              \
        printf(__VA_ARGS__);                                                                   \
        putchar('\n');                                                                         \
    } while (0)

static void print_show(const struct tpu_chip_config *cfg, const json_t *doc)
{
    struct tpu_chip_derived dv;
    tpu_config_derive(cfg, &dv);
    char a[96], b[96], dt[32];

    printf("%s%s%s\n", cfg->name, cfg->description[0] ? ": " : "", cfg->description);

    printf("\nchip\n");
    ROW("chips per host", "%" PRIu32, cfg->chips_per_host);
    ROW("cores per chip", "%" PRIu32, cfg->cores_per_chip);
    ROW("clock", "%g MHz", cfg->clock_mhz);

    printf("\nmatrix units (per core)\n");
    ROW("count", "%" PRIu32, cfg->mxu_per_core);
    ROW("shape", "%" PRIu32 " x %" PRIu32 " (rows x cols)", cfg->mxu_rows, cfg->mxu_cols);
    fmt_dtypes(dt, sizeof dt, cfg->mxu_dtypes);
    ROW("data types", "%s", dt);
    ROW("accumulator rows", "%" PRIu32, cfg->accumulator_rows);

    printf("\nvector unit (per core)\n");
    ROW("shape", "%" PRIu32 " sublanes x %" PRIu32 " lanes x %" PRIu32 " ALUs per lane",
        cfg->vector_sublanes, cfg->vector_lanes, cfg->vector_alus_per_lane);

    printf("\nmemory\n");
    fmt_bytes(a, sizeof a, cfg->hbm_bytes);
    ROW("off-chip (HBM) per chip", "%s", a);
    ROW("off-chip bandwidth", "%g GB/s", cfg->hbm_gbytes_per_s);
    fmt_bytes(a, sizeof a, cfg->vmem_bytes);
    ROW("on-chip (VMEM) per core", "%s", a);
    ROW("DMA engines per core", "%" PRIu32, cfg->dma_engines);

    printf("\nhost link (per chip)\n");
    ROW("bandwidth", "%g GB/s each way", cfg->host_link_gbytes_per_s);
    ROW("latency", "%g ns", cfg->host_link_latency_ns);
    ROW("infeed queue per core", "%" PRIu32 " entries", cfg->infeed_queue_depth);
    ROW("outfeed queue per core", "%" PRIu32 " entries", cfg->outfeed_queue_depth);

    printf("\ninterconnect (ICI)\n");
    ROW("topology", "%s", tpu_topology_name(cfg->ici_topology));
    if (cfg->ici_topology != TPU_TOPO_NONE) {
        ROW("links per chip", "%" PRIu32, cfg->ici_links_per_chip);
        ROW("bandwidth per link", "%g GB/s each way", cfg->ici_gbytes_per_s_per_link);
        ROW("latency per hop", "%g ns", cfg->ici_latency_ns);
    }

    printf("\nderived (per chip)\n");
    ROW("matrix units", "%" PRIu32 " (%" PRIu32 " core%s x %" PRIu32 ")", dv.total_mxus,
        cfg->cores_per_chip, cfg->cores_per_chip == 1 ? "" : "s", cfg->mxu_per_core);
    fmt_si(a, sizeof a, dv.peak_macs_per_s, "MAC/s");
    ROW("peak MAC rate", "%s", a);
    if (cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)) {
        fmt_si(b, sizeof b, dv.peak_flops_per_s, "FLOP/s");
        ROW("peak bf16", "%s", b);
    }
    if (cfg->mxu_dtypes & TPU_DTYPE_BIT(TPU_INT8)) {
        fmt_si(b, sizeof b, dv.peak_flops_per_s, "OPS");
        ROW("peak int8", "%s", b);
    }
    fmt_si(a, sizeof a, dv.hbm_bytes_per_s, "B/s");
    ROW("off-chip bandwidth", "%s", a);
    ROW("ridge point", "%.1f MACs per byte of off-chip traffic", dv.ridge_macs_per_byte);
    fmt_si(a, sizeof a, dv.host_link_bytes_per_s, "B/s");
    ROW("host link", "%s each way", a);
    if (cfg->ici_topology != TPU_TOPO_NONE) {
        fmt_si(a, sizeof a, cfg->ici_links_per_chip * cfg->ici_gbytes_per_s_per_link * 1e9,
               "B/s");
        ROW("interconnect, all links", "%s each way", a);
    }

    printf("\nsources\n");
    if (cfg->n_sources == 0)
        printf("  (none given)\n");
    for (uint32_t i = 0; i < cfg->n_sources; i++)
        print_wrapped("  ", 6, cfg->sources[i]);

    const json_t *notes = doc ? json_object_get(doc, "notes") : NULL;
    if (notes && json_array_size(notes) > 0) {
        printf("\nnotes\n");
        for (size_t i = 0; i < json_array_size(notes); i++)
            print_wrapped("  - ", 4, json_string_value(json_array_get(notes, i)));
    }
}

static json_t *derived_json(const struct tpu_chip_config *cfg)
{
    struct tpu_chip_derived dv;
    tpu_config_derive(cfg, &dv);
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}", "total_mxus", (json_int_t)dv.total_mxus,
                     "peak_macs_per_s", dv.peak_macs_per_s, "peak_flops_per_s",
                     dv.peak_flops_per_s, "hbm_bytes_per_s", dv.hbm_bytes_per_s,
                     "ridge_macs_per_byte", dv.ridge_macs_per_byte, "host_link_bytes_per_s",
                     dv.host_link_bytes_per_s);
}

static int print_json(const char *cmd, json_t *root)
{
    if (!root)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory building the JSON output");
    int rc = json_dumpf(root, stdout, JSON_INDENT(2));
    json_decref(root);
    putchar('\n');
    if (rc != 0)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "could not write the JSON output");
    return TPU_CLI_OK;
}

/* The document as given, for notes and --json. Same rule as tpu_config_load(): a preset
 * name wins over a file of that name. Caller owns the result (json_decref). */
static json_t *load_document(const char *name_or_path, json_error_t *err)
{
    const char *text = tpu_config_preset_json(name_or_path);
    if (text)
        return json_loads(text, 0, err);
    return json_load_file(name_or_path, 0, err);
}

/* The configuration and its document from one read of a file that can be read only once (a
 * pipe, a FIFO: `tpusim config show <(...)`): tpu_config_load() would drain it and
 * load_document() then find it empty. The same limit and rules as tpu_config_load_file().
 * Returns 0, or the CLI status after printing the error. */
#define SHOW_ONCE_MAX_BYTES (1u << 20) /* sim/config/config.c's limit for a configuration file */
static int load_once(const char *cmd, const char *path, struct tpu_chip_config *cfg,
                     json_t **doc)
{
    char qp[TPU__QUOTE_PATH_BYTES];
    tpu__quote(path, qp, sizeof qp);
    FILE *f = fopen(path, "rb");
    if (!f)
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "cannot open chip configuration file '%s': %s",
                              qp, strerror(errno));
    char *text = malloc(SHOW_ONCE_MAX_BYTES + 1);
    size_t len = text ? fread(text, 1, SHOW_ONCE_MAX_BYTES + 1, f) : 0;
    int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    int rc = 0;
    if (!text)
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory reading '%s'", qp);
    else if (read_errno)
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "cannot read chip configuration file '%s': %s",
                            qp, strerror(read_errno));
    else if (len > SHOW_ONCE_MAX_BYTES)
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "chip configuration file '%s' is larger than %u "
                            "bytes; a configuration is a few kilobytes of JSON: is this the "
                            "right file?", qp, SHOW_ONCE_MAX_BYTES);
    else if (memchr(text, '\0', len))
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "chip configuration file '%s' holds a NUL byte "
                            "at byte offset %zu; a configuration is JSON text", qp,
                            (size_t)((char *)memchr(text, '\0', len) - text));
    if (rc) {
        free(text);
        return rc;
    }
    text[len] = '\0';
    struct tpu_diag d;
    tpu_diag_clear(&d);
    json_error_t err;
    if (tpu_config_load_string(text, path, cfg, &d) != 0)
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    else if (!(*doc = json_loads(text, 0, &err)))
        rc = tpu__cli_error(cmd, TPU_CLI_FAIL, "%s: %s", qp, err.text);
    free(text);
    return rc;
}

/* ---- subcommands ------------------------------------------------------------------------ */

/* Parses argv[1..] with table t: returns TPU__CLI_HELP after printing the help, 0 to go on,
 * or an exit code after an error. The operands are counted in a->n_pos. */
static int scan_args(const char *cmd, int argc, char **argv, const struct tpu__cli_opts *t,
                     struct config_args *a)
{
    const struct tpu__cli_parse p = {.table = t, .cmd = cmd, .target = a};
    return tpu__cli_opts_parse(&p, argc, argv, 1, add_operand);
}

static int cmd_list(int argc, char **argv)
{
    const char *cmd = "config list";
    bool json = false;
    char *pos[2];
    int n_pos;
    struct config_args args = {.pos = pos, .cap = 2};
    int rc = scan_args(cmd, argc, argv, &tpu__cli_config_list_options, &args);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    json = args.json;
    n_pos = args.n_pos;
    if (n_pos > 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE,
                              "'config list' takes no arguments, got '%s'; to see one "
                              "configuration run 'tpusim config show %s'",
                              pos[0], pos[0]);
    json_t *arr = json ? json_array() : NULL;
    if (!json)
        printf("%-8s %-42s %-14s %-21s %s\n", "NAME", "MATRIX UNITS", "PEAK",
               "OFF-CHIP MEMORY", "ICI");
    for (const char *const *p = tpu_config_preset_names(); *p; p++) {
        struct tpu_chip_config cfg;
        struct tpu_diag d;
        tpu_diag_clear(&d);
        if (tpu_config_load_preset(*p, &cfg, &d) != 0) {
            json_decref(arr);
            return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
        }
        if (json) {
            json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "name", cfg.name,
                                                 "description", cfg.description, "derived",
                                                 derived_json(&cfg)));
            continue;
        }
        struct tpu_chip_derived dv;
        tpu_config_derive(&cfg, &dv);
        char units[96], peak[32], mem[96], hbm[48], dt[32], ici[64];
        fmt_dtypes(dt, sizeof dt, cfg.mxu_dtypes);
        snprintf(units, sizeof units,
                 "%" PRIu32 " core%s x %" PRIu32 " x %" PRIu32 "x%" PRIu32 " %s %g MHz",
                 cfg.cores_per_chip, cfg.cores_per_chip == 1 ? "" : "s", cfg.mxu_per_core,
                 cfg.mxu_rows, cfg.mxu_cols, dt, cfg.clock_mhz);
        fmt_si(peak, sizeof peak, dv.peak_flops_per_s,
               (cfg.mxu_dtypes & TPU_DTYPE_BIT(TPU_BF16)) ? "FLOP/s" : "OPS");
        fmt_bytes(hbm, sizeof hbm, cfg.hbm_bytes);
        char *paren = strstr(hbm, " (");
        if (paren)
            *paren = '\0';
        snprintf(mem, sizeof mem, "%s at %g GB/s", hbm, cfg.hbm_gbytes_per_s);
        if (cfg.ici_topology == TPU_TOPO_NONE)
            snprintf(ici, sizeof ici, "none");
        else
            snprintf(ici, sizeof ici, "%s, %" PRIu32 " x %g GB/s",
                     tpu_topology_name(cfg.ici_topology), cfg.ici_links_per_chip,
                     cfg.ici_gbytes_per_s_per_link);
        printf("%-8s %-42s %-14s %-21s %s\n", cfg.name, units, peak, mem, ici);
    }
    if (json)
        return print_json(cmd, arr);
    printf("\n(matrix units: cores x units per core x rows x cols; peak per chip; "
           "'tpusim config show NAME' for details)\n");
    return TPU_CLI_OK;
}

static int cmd_show(int argc, char **argv)
{
    const char *cmd = "config show";
    bool json = false;
    char *pos[2];
    int n_pos;
    struct config_args args = {.pos = pos, .cap = 2};
    int rc = scan_args(cmd, argc, argv, &tpu__cli_config_show_options, &args);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    json = args.json;
    n_pos = args.n_pos;
    if (n_pos == 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE,
                              "name a preset or a file, e.g. 'tpusim config show tpu-v4' "
                              "('tpusim config list' lists the presets)");
    if (n_pos > 1)
        return tpu__cli_error(cmd, TPU_CLI_USAGE,
                              "shows one configuration at a time, got '%s' and '%s'; run it "
                              "once for each",
                              pos[0], pos[1]);

    struct tpu_chip_config cfg;
    json_t *doc = NULL;
    struct stat st;
    if (!tpu_config_preset_json(pos[0]) && stat(pos[0], &st) == 0 && !S_ISREG(st.st_mode) &&
        !S_ISDIR(st.st_mode)) {
        if ((rc = load_once(cmd, pos[0], &cfg, &doc)) != 0)
            return rc;
    } else {
        struct tpu_diag d;
        tpu_diag_clear(&d);
        if (tpu_config_load(pos[0], &cfg, &d) != 0)
            return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
        json_error_t err;
        doc = load_document(pos[0], &err);
        if (!doc) { /* the file changed since it was validated */
            char qp[TPU__QUOTE_PATH_BYTES];
            return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s: %s",
                                  tpu__quote(pos[0], qp, sizeof qp), err.text);
        }
    }
    if (json) {
        json_t *root = json_object();
        json_object_set(root, "config", doc);
        json_object_set_new(root, "derived", derived_json(&cfg));
        json_decref(doc);
        return print_json(cmd, root);
    }
    print_show(&cfg, doc);
    json_decref(doc);
    return TPU_CLI_OK;
}

static int cmd_check(int argc, char **argv)
{
    const char *cmd = "config check";
    char *pos[256];
    int n_pos;
    struct config_args args = {.pos = pos, .cap = 256};
    int rc = scan_args(cmd, argc, argv, &tpu__cli_config_check_options, &args);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    n_pos = args.n_pos;
    if (n_pos == 0)
        return tpu__cli_error(cmd, TPU_CLI_USAGE,
                              "name at least one file, e.g. 'tpusim config check my-chip.json'");
    if (n_pos > 256)
        return tpu__cli_error(cmd, TPU_CLI_USAGE,
                              "checks at most 256 configurations at a time, got %d; run it "
                              "in batches",
                              n_pos);
    int status = TPU_CLI_OK;
    for (int i = 0; i < n_pos; i++) {
        struct tpu_chip_config cfg;
        struct tpu_diag d;
        tpu_diag_clear(&d);
        if (tpu_config_load(pos[i], &cfg, &d) != 0) {
            status = tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
            continue;
        }
        struct tpu_chip_derived dv;
        tpu_config_derive(&cfg, &dv);
        char peak[48];
        fmt_peak(peak, sizeof peak, &cfg, &dv);
        printf("%s: ok (name %s, %" PRIu32 " core%s x %" PRIu32 " MXU%s of %" PRIu32
               "x%" PRIu32 ", peak %s)\n",
               pos[i], cfg.name, cfg.cores_per_chip, cfg.cores_per_chip == 1 ? "" : "s",
               cfg.mxu_per_core, cfg.mxu_per_core == 1 ? "" : "s", cfg.mxu_rows, cfg.mxu_cols,
               peak);
    }
    return status;
}

int tpu__cli_config(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_config, stderr);
        return TPU_CLI_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        fputs(usage_config, stdout);
        return TPU_CLI_OK;
    }
    if (!strcmp(sub, "list"))
        return cmd_list(argc - 1, argv + 1);
    if (!strcmp(sub, "show"))
        return cmd_show(argc - 1, argv + 1);
    if (!strcmp(sub, "check"))
        return cmd_check(argc - 1, argv + 1);
    return tpu__cli_unknown_command("config", sub,
                                    (const char *const[]){"list", "show", "check", NULL});
}
