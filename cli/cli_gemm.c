/* `tpusim gemm`: one matrix multiply, or a SCALE-Sim GEMM layer table, on a chip's matrix
 * units. Times it with the double-buffered weight-stationary schedule (`--schedule tpu`,
 * the default) or SCALE-Sim's serial-fold model (`--schedule serial`), and, unless
 * `--timing-only`, computes the product with the order-exact kernels so it can be dumped and
 * checked outside tpusim. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "options.h"
#include "tpusim/npy.h"
#include "rng.h"
#include "tpusim/topology_file.h"
#include "tpusim/config.h"
#include "tpusim/gemm.h"
#include "tpusim/scalesim.h"
#include "util.h"

static const char *const CMD = "gemm";

struct gemm_opts {
    uint64_t m, k, n;
    bool have_m, have_k, have_n;
    const char *chip;
    uint32_t array_rows, array_cols; /* 0: the chip's */
    enum tpu_dtype dtype;
    unsigned passes;
    bool have_passes;
    bool serial;
    enum tpu_dataflow dataflow;
    bool have_dataflow;
    bool timing_only;
    const char *a_path, *b_path, *dump_path, *dump_inputs, *topology;
    uint64_t seed;
    unsigned threads;
    bool json;
};

static int set_array(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                     const char *text)
{
    struct gemm_opts *o = p->target;
    unsigned long r, c;
    char x, extra, qb[TPU__QUOTE_BYTES];
    (void)opt;
    if (sscanf(text, "%lu%c%lu%c", &r, &x, &c, &extra) != 3 || (x != 'x' && x != 'X') ||
        r < 1 || c < 1 || r > 4096 || c > 4096 || strspn(text, "0123456789xX") != strlen(text))
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "--array '%s' is not ROWSxCOLS with each from 1 to 4096; give "
                              "e.g. --array 128x128",
                              tpu__quote(text, qb, sizeof qb));
    o->array_rows = (uint32_t)r;
    o->array_cols = (uint32_t)c;
    return 0;
}

/* tpu_dataflow_parse takes the names in any case ("WS"), as SCALE-Sim's files do. */
static int set_dataflow(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                        const char *text)
{
    struct gemm_opts *o = p->target;
    if (tpu_dataflow_parse(text, &o->dataflow) != 0)
        return tpu__cli_opts_bad_word(p, opt, text);
    return 0;
}

#define GEMM_SIZE_MAX (UINT64_C(1) << 31)
static const char *const dtype_words[] = {"bf16", "int8", "fp32", NULL};
static const int dtype_values[] = {TPU_BF16, TPU_INT8, TPU_F32};
static const char *const schedule_words[] = {"tpu", "serial", NULL};
static const int schedule_values[] = {0, 1};
static const char *const dataflow_words[] = {"ws", "os", "is", NULL};
static const uint64_t passes_only[] = {1, 3, 6};

static const struct tpu__cli_opt gemm_opts[] = {
    {.name = "-m", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, m),
     TPU__CLI_GIVEN(struct gemm_opts, have_m), .min = 1, .max = GEMM_SIZE_MAX, .arg = "M",
     .help = "GEMM size: rows of A and Y (1 .. 2^31)"},
    {.name = "-k", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, k),
     TPU__CLI_GIVEN(struct gemm_opts, have_k), .min = 1, .max = GEMM_SIZE_MAX, .arg = "K",
     .help = "GEMM size: columns of A, rows of B (1 .. 2^31)"},
    {.name = "-n", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, n),
     TPU__CLI_GIVEN(struct gemm_opts, have_n), .min = 1, .max = GEMM_SIZE_MAX, .arg = "N",
     .help = "GEMM size: columns of B and Y (1 .. 2^31)"},
    {.name = "--chip", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct gemm_opts, chip),
     .arg = "NAME|FILE",
     .help = "chip preset or JSON file (default tpu-v4; tpusim config list)"},
    {.name = "--array", .kind = TPU__CLI_CUSTOM, .set = set_array, .arg = "RxC",
     .help = "override the matrix unit size, e.g. 32x32"},
    {.name = "--dtype", .kind = TPU__CLI_ENUM, TPU__CLI_FIELD(struct gemm_opts, dtype),
     .words = dtype_words, .values = dtype_values,
     .help = "operand type (default bf16); fp32 runs as bf16 passes"},
    {.name = "--passes", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, passes),
     TPU__CLI_GIVEN(struct gemm_opts, have_passes), .min = 1, .max = 6, .only = passes_only,
     .n_only = 3, .values_help = "(bf16, XLA HIGH, XLA HIGHEST)",
     .help = "bf16 passes for fp32 (default 6 = XLA HIGHEST; 3 = HIGH)"},
    {.name = "--schedule", .kind = TPU__CLI_ENUM, TPU__CLI_FIELD(struct gemm_opts, serial),
     .words = schedule_words, .values = schedule_values,
     .values_help = "(tpu: double-buffered weight-stationary; serial: SCALE-Sim v2)",
     .help = "tpu: double-buffered weight-stationary (default);\n"
             "serial: SCALE-Sim v2's fold-by-fold compute model"},
    {.name = "--dataflow", .kind = TPU__CLI_CUSTOM, .set = set_dataflow,
     TPU__CLI_GIVEN(struct gemm_opts, have_dataflow), .words = dataflow_words,
     .help = "dataflow for --schedule serial (default ws)"},
    {.name = "--timing-only", .kind = TPU__CLI_FLAG,
     TPU__CLI_FIELD(struct gemm_opts, timing_only), .help = "count cycles only; compute no values"},
    {.name = "--a", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct gemm_opts, a_path), .arg = "A.npy",
     .help = "operand A from a NumPy file (float32; int8 for --dtype int8);\n"
             "with --b; otherwise random from --seed"},
    {.name = "--b", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct gemm_opts, b_path), .arg = "B.npy",
     .help = "operand B, the same way"},
    {.name = "--seed", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, seed), .min = 0,
     .max = UINT64_MAX, .arg = "N", .help = "seed for random operands (default 1)"},
    {.name = "--dump", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct gemm_opts, dump_path),
     .arg = "Y.npy", .help = "write the result (float32, or int32 for int8)"},
    {.name = "--dump-inputs", .kind = TPU__CLI_STR,
     TPU__CLI_FIELD(struct gemm_opts, dump_inputs), .arg = "PREFIX",
     .help = "write the operands as the chip saw them: PREFIX_a.npy and\n"
             "PREFIX_b.npy (bf16 values stored as float32)"},
    {.name = "--topology", .kind = TPU__CLI_STR, TPU__CLI_FIELD(struct gemm_opts, topology),
     .arg = "FILE.csv",
     .help = "SCALE-Sim GEMM topology (Layer,M,N,K rows): one row per layer"},
    {.name = "--threads", .kind = TPU__CLI_U64, TPU__CLI_FIELD(struct gemm_opts, threads),
     .min = 1, .max = 256, .arg = "N",
     .help = "host threads for the values (default: all online CPUs)"},
    {.name = "--json", .kind = TPU__CLI_FLAG, TPU__CLI_FIELD(struct gemm_opts, json),
     .help = "machine-readable output"},
};

const struct tpu__cli_opts tpu__cli_gemm_options = {
    .opts = gemm_opts,
    .n_opts = sizeof gemm_opts / sizeof gemm_opts[0],
    .usage = "usage: tpusim gemm -m M -k K -n N [options]\n"
             "       tpusim gemm --topology LAYERS.csv [options]\n"
             "\n"
             "Simulates Y[M][N] = A[M][K] * B[K][N] on a chip's matrix units.\n"
             "\n",
    .help_column = 25,
};

/* The rules that join several options, after each was parsed on its own. */
static int check_combinations(struct gemm_opts *o)
{
    if (o->have_passes && o->dtype != TPU_F32)
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "--passes applies to --dtype fp32 only (bf16 and int8 are one "
                              "pass); drop --passes or add --dtype fp32");
    if (o->have_dataflow && !o->serial && o->dataflow != TPU_DATAFLOW_WS)
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "--dataflow %s needs --schedule serial: the tpu schedule is "
                              "weight-stationary only",
                              tpu_dataflow_name(o->dataflow));
    if ((o->a_path != NULL) != (o->b_path != NULL))
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "--a and --b go together: give both operand files, or neither "
                              "for random operands");
    if (o->topology) {
        if (o->have_m || o->have_k || o->have_n || o->a_path)
            return tpu__cli_error(CMD, TPU_CLI_USAGE,
                                  "--topology takes the sizes from the file; drop -m/-k/-n "
                                  "and --a/--b");
        if (o->dump_path || o->dump_inputs)
            return tpu__cli_error(CMD, TPU_CLI_USAGE,
                                  "--topology runs timing only; --dump and --dump-inputs need "
                                  "a single GEMM (-m -k -n)");
        o->timing_only = true;
        return 0;
    }
    if (o->timing_only && (o->a_path || o->dump_path || o->dump_inputs))
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "--timing-only computes no values, so --a/--b, --dump and "
                              "--dump-inputs cannot be used with it");
    if (!o->a_path && !(o->have_m && o->have_k && o->have_n))
        return tpu__cli_error(CMD, TPU_CLI_USAGE,
                              "give the GEMM size with -m, -k and -n (or --a/--b files, or "
                              "--topology FILE.csv); e.g. tpusim gemm -m 256 -k 512 -n 128");
    return 0;
}

/* Returns 0, TPU__CLI_HELP after printing the help, or an exit code after an error. */
static int parse_args(int argc, char **argv, struct gemm_opts *o)
{
    *o = (struct gemm_opts){.chip = "tpu-v4", .dtype = TPU_BF16, .passes = 6, .seed = 1};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = ncpu > 0 ? (unsigned)ncpu : 1;
    const struct tpu__cli_parse p = {.table = &tpu__cli_gemm_options, .cmd = CMD, .target = o};
    int rc = tpu__cli_opts_parse(&p, argc, argv, 1, NULL);
    return rc ? rc : check_combinations(o);
}

/* ---- operands ------------------------------------------------------------------------ */

struct operands {
    size_t m, k, n;
    float *a32, *b32;        /* fp32 inputs (fp32 dtype) */
    tpu_bf16 *a16, *b16;     /* bf16 inputs (bf16 dtype) */
    int8_t *a8, *b8;         /* int8 inputs */
    void *y;                 /* [m][n] float or int32 */
};

static void operands_free(struct operands *op)
{
    free(op->a32);
    free(op->b32);
    free(op->a16);
    free(op->b16);
    free(op->a8);
    free(op->b8);
    free(op->y);
}

static int load_operand(const char *path, const char *which, enum tpu_dtype dtype,
                        struct tpu_npy *arr)
{
    struct tpu_diag d = {0};
    if (tpu_npy_read(path, arr, &d) != 0)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    enum tpu_dtype want = dtype == TPU_INT8 ? TPU_INT8 : TPU_F32;
    if (arr->dtype != want) {
        char qp[TPU__QUOTE_PATH_BYTES];
        int rc = tpu__cli_error(CMD, TPU_CLI_FAIL,
                                "%s (operand %s) holds %s; --dtype %s needs %s data (numpy: "
                                "a.astype(np.%s))",
                                tpu__quote(path, qp, sizeof qp), which,
                                tpu_npy_dtype_name(arr->dtype),
                                tpu_gemm_dtype_name(dtype), tpu_npy_dtype_name(want),
                                tpu_npy_dtype_name(want));
        tpu_npy_free(arr);
        return rc;
    }
    return 0;
}

/* Fills the operands from files or from the seed, converted to what the chip consumes. */
static int make_operands(const struct gemm_opts *o, struct operands *op)
{
    struct tpu_npy fa = {0}, fb = {0};
    int rc = 0;
    if (o->a_path) {
        if ((rc = load_operand(o->a_path, "A", o->dtype, &fa)) ||
            (rc = load_operand(o->b_path, "B", o->dtype, &fb)))
            goto out;
        if (fa.cols != fb.rows) {
            rc = tpu__cli_error(CMD, TPU_CLI_FAIL,
                                "A is %zux%zu and B is %zux%zu: A's columns (K=%zu) must equal "
                                "B's rows (%zu)",
                                fa.rows, fa.cols, fb.rows, fb.cols, fa.cols, fb.rows);
            goto out;
        }
        if ((o->have_m && o->m != fa.rows) || (o->have_k && o->k != fa.cols) ||
            (o->have_n && o->n != fb.cols)) {
            rc = tpu__cli_error(CMD, TPU_CLI_FAIL,
                                "-m/-k/-n disagree with the files (A %zux%zu, B %zux%zu); "
                                "drop them or make them match",
                                fa.rows, fa.cols, fb.rows, fb.cols);
            goto out;
        }
        op->m = fa.rows;
        op->k = fa.cols;
        op->n = fb.cols;
    } else {
        op->m = (size_t)o->m;
        op->k = (size_t)o->k;
        op->n = (size_t)o->n;
    }
    size_t na, nb, ny; /* checked: the sizes of two files may multiply past 2^64 */
    if (!tpu__mul_size(op->m, op->k, &na) || !tpu__mul_size(op->k, op->n, &nb) ||
        !tpu__mul_size(op->m, op->n, &ny) || (double)na > 1e9 || (double)nb > 1e9 ||
        (double)ny > 1e9) {
        rc = tpu__cli_error(CMD, TPU_CLI_FAIL,
                            "computing values for M=%zu K=%zu N=%zu needs more than 1e9 "
                            "elements in one operand; add --timing-only",
                            op->m, op->k, op->n);
        goto out;
    }
    struct tpu__rng rng;
    tpu__rng_seed(&rng, o->seed);
    op->y = malloc(ny * 4);
    if (o->dtype == TPU_INT8) {
        op->a8 = malloc(na);
        op->b8 = malloc(nb);
        if (!op->a8 || !op->b8 || !op->y)
            goto nomem;
        if (fa.data) {
            memcpy(op->a8, fa.data, na);
            memcpy(op->b8, fb.data, nb);
        } else {
            for (size_t i = 0; i < na; i++)
                op->a8[i] = (int8_t)(tpu__rng_next(&rng) >> 56);
            for (size_t i = 0; i < nb; i++)
                op->b8[i] = (int8_t)(tpu__rng_next(&rng) >> 56);
        }
    } else {
        op->a32 = malloc(na * 4);
        op->b32 = malloc(nb * 4);
        if (!op->a32 || !op->b32 || !op->y)
            goto nomem;
        if (fa.data) {
            memcpy(op->a32, fa.data, na * 4);
            memcpy(op->b32, fb.data, nb * 4);
        } else {
            for (size_t i = 0; i < na; i++)
                op->a32[i] = tpu__rng_uniform(&rng) * 2.0f - 1.0f;
            for (size_t i = 0; i < nb; i++)
                op->b32[i] = tpu__rng_uniform(&rng) * 2.0f - 1.0f;
        }
        if (o->dtype == TPU_BF16) {
            op->a16 = malloc(na * sizeof *op->a16);
            op->b16 = malloc(nb * sizeof *op->b16);
            if (!op->a16 || !op->b16)
                goto nomem;
            for (size_t i = 0; i < na; i++)
                op->a16[i] = tpu_bf16_from_f32(op->a32[i]);
            for (size_t i = 0; i < nb; i++)
                op->b16[i] = tpu_bf16_from_f32(op->b32[i]);
        }
    }
    goto out;
nomem:
    rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory for M=%zu K=%zu N=%zu operands",
                        op->m, op->k, op->n);
out:
    tpu_npy_free(&fa);
    tpu_npy_free(&fb);
    return rc;
}

/* Writes a bf16 operand widened to float32 (exactly the values the array multiplies). */
static int dump_bf16(const char *path, const tpu_bf16 *x, size_t rows, size_t cols)
{
    float *w = malloc(rows * cols * sizeof *w);
    if (!w)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory writing '%s'", path);
    for (size_t i = 0; i < rows * cols; i++)
        w[i] = tpu_bf16_to_f32(x[i]);
    struct tpu_diag d = {0};
    int rc = tpu_npy_write(path, TPU_F32, rows, cols, w, &d);
    free(w);
    return rc ? tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg) : 0;
}

static int dump_inputs(const char *prefix, const struct operands *op)
{
    size_t len = strlen(prefix) + 8;
    char *pa = malloc(len), *pb = malloc(len);
    int rc = 0;
    if (!pa || !pb) {
        rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "out of memory");
        goto out;
    }
    snprintf(pa, len, "%s_a.npy", prefix);
    snprintf(pb, len, "%s_b.npy", prefix);
    struct tpu_diag d = {0};
    if (op->a16) {
        rc = dump_bf16(pa, op->a16, op->m, op->k);
        if (!rc)
            rc = dump_bf16(pb, op->b16, op->k, op->n);
    } else {
        enum tpu_dtype t = op->a8 ? TPU_INT8 : TPU_F32;
        const void *a = op->a8 ? (const void *)op->a8 : op->a32;
        const void *b = op->b8 ? (const void *)op->b8 : op->b32;
        if (tpu_npy_write(pa, t, op->m, op->k, a, &d) ||
            tpu_npy_write(pb, t, op->k, op->n, b, &d))
            rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    }
out:
    free(pa);
    free(pb);
    return rc;
}

/* Computes Y; returns host seconds through *secs. */
static int compute(const struct gemm_opts *o, uint32_t tile_rows, struct operands *op,
                   double *secs)
{
    double t0 = tpu__cli_now_s();
    int rc;
    if (o->dtype == TPU_INT8)
        rc = tpu_gemm_int8(op->a8, op->b8, op->y, op->m, op->k, op->n, tile_rows, false,
                           o->threads);
    else if (o->dtype == TPU_BF16)
        rc = tpu_gemm_bf16(op->a16, op->b16, op->y, op->m, op->k, op->n, tile_rows, false,
                           o->threads);
    else
        rc = tpu_gemm_f32(op->a32, op->b32, op->y, op->m, op->k, op->n, tile_rows, o->passes,
                          o->threads);
    *secs = tpu__cli_now_s() - t0;
    if (rc)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "the GEMM kernel failed: %s",
                              tpu_strerror(rc));
    return 0;
}

/* ---- timing --------------------------------------------------------------------------- */

/* One layer's timing under either schedule, in the units the report prints. */
struct layer_time {
    uint64_t cycles;
    double utilization, mapping_efficiency, seconds, achieved_flops_per_s;
    struct tpu_gemm_timing tpu;    /* --schedule tpu */
    struct tpu_serial_result ser;  /* --schedule serial */
};

static int time_layer(const struct gemm_opts *o, const struct tpu_chip_config *cfg,
                      uint64_t m, uint64_t k, uint64_t n, struct layer_time *lt)
{
    struct tpu_diag d = {0};
    *lt = (struct layer_time){0};
    struct tpu_gemm_params p = {.m = m, .k = k, .n = n, .dtype = o->dtype, .passes = o->passes};
    if (tpu_gemm_check(cfg, &p, &d) != 0)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    if (o->serial) {
        enum tpu_dataflow df = o->have_dataflow ? o->dataflow : TPU_DATAFLOW_WS;
        unsigned passes = o->dtype == TPU_F32 ? o->passes : 1;
        /* fp32 passes are that many GEMMs with K unchanged, one after another */
        if (tpu_serial_gemm(cfg->mxu_rows, cfg->mxu_cols, df, m, n, k, &lt->ser, &d) != 0)
            return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
        lt->cycles = lt->ser.total_cycles * passes;
        lt->utilization = lt->ser.overall_util_pct / 100.0;
        lt->mapping_efficiency = lt->ser.mapping_efficiency_pct / 100.0;
        lt->seconds = (double)lt->cycles / (cfg->clock_mhz * 1e6);
    } else {
        if (tpu_gemm_time(cfg, &p, &lt->tpu, &d) != 0)
            return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
        lt->cycles = lt->tpu.cycles;
        lt->utilization = lt->tpu.utilization;
        lt->mapping_efficiency = lt->tpu.mapping_efficiency;
        lt->seconds = lt->tpu.seconds;
    }
    lt->achieved_flops_per_s = 2.0 * (double)m * (double)k * (double)n / lt->seconds;
    return 0;
}

static void describe_chip(FILE *f, const struct tpu_chip_config *cfg, bool serial)
{
    if (serial)
        fprintf(f, "chip %s: one %ux%u array at %.0f MHz (SCALE-Sim models a single array)\n",
                cfg->name, cfg->mxu_rows, cfg->mxu_cols, cfg->clock_mhz);
    else
        fprintf(f, "chip %s: %u core%s x %u MXU of %ux%u at %.0f MHz, %u accumulator rows\n",
                cfg->name, cfg->cores_per_chip, cfg->cores_per_chip == 1 ? "" : "s",
                cfg->mxu_per_core, cfg->mxu_rows, cfg->mxu_cols, cfg->clock_mhz,
                cfg->accumulator_rows);
}

static const char *schedule_name(const struct gemm_opts *o)
{
    return o->serial ? "serial" : "tpu";
}

static const char *dataflow_used(const struct gemm_opts *o)
{
    return tpu_dataflow_name(o->have_dataflow ? o->dataflow : TPU_DATAFLOW_WS);
}

static int run_topology(const struct gemm_opts *o, const struct tpu_chip_config *cfg)
{
    struct tpu_topology_file topo = {0};
    struct tpu_diag d = {0};
    if (tpu_topology_file_read(o->topology, &topo, &d) != 0)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    int rc = 0;
    uint64_t total_cycles = 0;
    double total_flops = 0, total_pe_cycles_used = 0;
    const double pe = (double)cfg->mxu_rows * cfg->mxu_cols *
                      (o->serial ? 1.0 : (double)cfg->cores_per_chip * cfg->mxu_per_core);
    if (o->json)
        printf("{\"chip\": \"%s\", \"schedule\": \"%s\", \"dataflow\": \"%s\", \"dtype\": \"%s\","
               " \"array\": [%u, %u], \"layers\": [",
               cfg->name, schedule_name(o), dataflow_used(o), tpu_gemm_dtype_name(o->dtype),
               cfg->mxu_rows, cfg->mxu_cols);
    else {
        describe_chip(stdout, cfg, o->serial);
        printf("schedule %s%s%s, dtype %s, timing only\n\n", schedule_name(o),
               o->serial ? ", dataflow " : "", o->serial ? dataflow_used(o) : "",
               tpu_gemm_dtype_name(o->dtype));
        printf("%-20s %8s %8s %8s %14s %8s %8s %12s %10s\n", "layer", "M", "N", "K", "cycles",
               "util%", "map%", "time_us", "TFLOP/s");
    }
    for (size_t i = 0; i < topo.n_layers; i++) {
        const struct tpu_topology_file_layer *l = &topo.layers[i];
        struct layer_time lt;
        rc = time_layer(o, cfg, l->m, l->k, l->n, &lt);
        if (rc)
            break;
        total_cycles += lt.cycles;
        total_flops += 2.0 * (double)l->m * (double)l->k * (double)l->n;
        total_pe_cycles_used += lt.utilization * (double)lt.cycles * pe;
        if (o->json) {
            printf("%s{\"name\": ", i ? ", " : "");
            tpu__cli_json_string(stdout, l->name);
            printf(", \"m\": %" PRIu64 ", \"n\": %" PRIu64 ", \"k\": %" PRIu64
                   ", \"cycles\": %" PRIu64 ", \"utilization\": %.6f, "
                   "\"mapping_efficiency\": %.6f, \"seconds\": %.9g, \"flops_per_s\": %.6g}",
                   l->m, l->n, l->k, lt.cycles, lt.utilization, lt.mapping_efficiency,
                   lt.seconds, lt.achieved_flops_per_s);
        } else {
            printf("%-20.20s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %14" PRIu64
                   " %8.2f %8.2f %12.3f %10.3f\n",
                   l->name, l->m, l->n, l->k, lt.cycles, 100 * lt.utilization,
                   100 * lt.mapping_efficiency, lt.seconds * 1e6,
                   lt.achieved_flops_per_s * 1e-12);
        }
    }
    if (!rc) {
        double secs = (double)total_cycles / (cfg->clock_mhz * 1e6);
        double util = total_pe_cycles_used / ((double)total_cycles * pe);
        if (o->json)
            printf("], \"total\": {\"cycles\": %" PRIu64 ", \"utilization\": %.6f, "
                   "\"seconds\": %.9g, \"flops_per_s\": %.6g}}\n",
                   total_cycles, util, secs, total_flops / secs);
        else
            printf("%-20s %8s %8s %8s %14" PRIu64 " %8.2f %8s %12.3f %10.3f\n", "total", "",
                   "", "", total_cycles, 100 * util, "", secs * 1e6,
                   total_flops / secs * 1e-12);
    } else if (o->json) {
        printf("]}\n");
    }
    tpu_topology_file_free(&topo);
    return rc;
}

/* ---- report ----------------------------------------------------------------------------- */

struct value_summary {
    double sum, max_abs;
    size_t n_nan;
};

static struct value_summary summarize(const struct gemm_opts *o, const struct operands *op)
{
    struct value_summary s = {0};
    size_t ny = op->m * op->n;
    for (size_t i = 0; i < ny; i++) {
        double v = o->dtype == TPU_INT8 ? (double)((const int32_t *)op->y)[i]
                                              : (double)((const float *)op->y)[i];
        if (isnan(v)) {
            s.n_nan++;
            continue;
        }
        s.sum += v;
        if (fabs(v) > s.max_abs)
            s.max_abs = fabs(v);
    }
    return s;
}

static void print_report(const struct gemm_opts *o, const struct tpu_chip_config *cfg,
                         uint64_t m, uint64_t k, uint64_t n, const struct layer_time *lt,
                         const struct operands *op, double host_s)
{
    const bool values = !o->timing_only;
    struct value_summary vs = {0};
    if (values)
        vs = summarize(o, op);
    const double peak = o->serial ? 2.0 * cfg->mxu_rows * cfg->mxu_cols * cfg->clock_mhz * 1e6
                                  : lt->tpu.peak_flops_per_s;
    if (o->json) {
        printf("{\"m\": %" PRIu64 ", \"k\": %" PRIu64 ", \"n\": %" PRIu64 ", \"dtype\": \"%s\","
               " \"passes\": %u, \"chip\": ",
               m, k, n, tpu_gemm_dtype_name(o->dtype), o->dtype == TPU_F32 ? o->passes : 1);
        tpu__cli_json_string(stdout, cfg->name);
        printf(", \"array\": [%u, %u], \"clock_mhz\": %.6g, \"schedule\": \"%s\"",
               cfg->mxu_rows, cfg->mxu_cols, cfg->clock_mhz, schedule_name(o));
        if (o->serial)
            printf(", \"dataflow\": \"%s\", \"row_folds\": %" PRIu64 ", \"col_folds\": %" PRIu64
                   ", \"compute_util\": %.6f",
                   dataflow_used(o), lt->ser.row_folds, lt->ser.col_folds,
                   lt->ser.compute_util_pct / 100.0);
        else
            printf(", \"mxus\": %u, \"mxus_busy\": %u, \"weight_tiles\": %" PRIu64
                   ", \"k_tiles\": %" PRIu64 ", \"n_tiles\": %" PRIu64 ", \"m_chunks\": %" PRIu64
                   ", \"min_hbm_bytes\": %" PRIu64 ", \"hbm_seconds\": %.9g",
                   lt->tpu.n_mxu, lt->tpu.n_mxu_busy, lt->tpu.weight_tiles, lt->tpu.k_tiles,
                   lt->tpu.n_tiles, lt->tpu.m_chunks, lt->tpu.min_hbm_bytes,
                   lt->tpu.hbm_seconds);
        printf(", \"cycles\": %" PRIu64 ", \"seconds\": %.9g, \"utilization\": %.6f, "
               "\"mapping_efficiency\": %.6f, \"flops_per_s\": %.6g, \"peak_flops_per_s\": %.6g",
               lt->cycles, lt->seconds, lt->utilization, lt->mapping_efficiency,
               lt->achieved_flops_per_s, peak);
        if (values)
            printf(", \"values\": {\"sum\": %.17g, \"max_abs\": %.9g, \"nan\": %zu, "
                   "\"host_seconds\": %.6f, \"threads\": %u}",
                   vs.sum, vs.max_abs, vs.n_nan, host_s, o->threads);
        printf("}\n");
        return;
    }
    printf("tpusim gemm: Y[%" PRIu64 "][%" PRIu64 "] = A[%" PRIu64 "][%" PRIu64 "] * B[%" PRIu64
           "][%" PRIu64 "], %s%s\n",
           m, n, m, k, k, n, tpu_gemm_dtype_name(o->dtype),
           o->dtype == TPU_F32 ? (o->passes == 6   ? " as 6 bf16 passes (XLA HIGHEST)"
                                         : o->passes == 3 ? " as 3 bf16 passes (XLA HIGH)"
                                                          : " as 1 bf16 pass (XLA DEFAULT)")
                                      : "");
    describe_chip(stdout, cfg, o->serial);
    if (o->serial) {
        printf("schedule          serial folds (SCALE-Sim v2 compute model), dataflow %s\n",
               dataflow_used(o));
        printf("folds             %" PRIu64 " row x %" PRIu64 " column\n", lt->ser.row_folds,
               lt->ser.col_folds);
    } else {
        printf("schedule          tpu: weight-stationary, double-buffered weights\n");
        printf("weight tiles      %" PRIu64 " (%" PRIu64 " K x %" PRIu64 " N x %" PRIu64
               " M-chunk%s%s) on %u of %u MXUs\n",
               lt->tpu.weight_tiles, lt->tpu.k_tiles, lt->tpu.n_tiles, lt->tpu.m_chunks,
               lt->tpu.m_chunks == 1 ? "" : "s",
               o->dtype == TPU_F32 && o->passes > 1 ? " x passes" : "",
               lt->tpu.n_mxu_busy, lt->tpu.n_mxu);
    }
    printf("cycles            %" PRIu64 "  (%.3f us at %.0f MHz)\n", lt->cycles,
           lt->seconds * 1e6, cfg->clock_mhz);
    printf("utilization       %.2f %% of peak MACs, mapping efficiency %.2f %%\n",
           100 * lt->utilization, 100 * lt->mapping_efficiency);
    printf("throughput        %.3f TFLOP/s of %.3f peak\n", lt->achieved_flops_per_s * 1e-12,
           peak * 1e-12);
    if (!o->serial)
        printf("memory            at least %.3f MB to move: %.3f us at %.0f GB/s HBM (%s; "
               "not included in the cycles above)\n",
               lt->tpu.min_hbm_bytes * 1e-6, lt->tpu.hbm_seconds * 1e6, cfg->hbm_gbytes_per_s,
               lt->tpu.hbm_seconds > lt->seconds ? "memory-bound" : "compute-bound");
    if (values)
        printf("values            sum %.9g, max |y| %.6g, %zu NaN; computed on the host in "
               "%.3f s with %u thread%s\n",
               vs.sum, vs.max_abs, vs.n_nan, host_s, o->threads, o->threads == 1 ? "" : "s");
    else
        printf("values            not computed (--timing-only)\n");
}

int tpu__cli_gemm(int argc, char **argv)
{
    struct gemm_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;

    struct tpu_chip_config cfg;
    struct tpu_diag d = {0};
    if (tpu_config_load(o.chip, &cfg, &d) != 0)
        return tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
    if (o.array_rows) {
        cfg.mxu_rows = o.array_rows;
        cfg.mxu_cols = o.array_cols;
        if (cfg.accumulator_rows < cfg.mxu_rows)
            cfg.accumulator_rows = cfg.mxu_rows;
    }
    if (o.topology)
        return run_topology(&o, &cfg);

    struct operands op = {0};
    double host_s = 0;
    uint64_t m = o.m, k = o.k, n = o.n;
    if (!o.timing_only) {
        rc = make_operands(&o, &op);
        if (rc)
            goto out;
        m = op.m;
        k = op.k;
        n = op.n;
    }
    struct layer_time lt;
    rc = time_layer(&o, &cfg, m, k, n, &lt);
    if (rc)
        goto out;
    if (!o.timing_only) {
        rc = compute(&o, cfg.mxu_rows, &op, &host_s);
        if (!rc && o.dump_inputs)
            rc = dump_inputs(o.dump_inputs, &op);
        if (!rc && o.dump_path) {
            enum tpu_dtype t = o.dtype == TPU_INT8 ? TPU_INT32 : TPU_F32;
            if (tpu_npy_write(o.dump_path, t, op.m, op.n, op.y, &d) != 0)
                rc = tpu__cli_error(CMD, TPU_CLI_FAIL, "%s", d.msg);
        }
        if (rc)
            goto out;
    }
    print_report(&o, &cfg, m, k, n, &lt, &op, host_s);
out:
    operands_free(&op);
    return rc;
}
