/* Tests of chip configurations (sim/config/config.c): the presets and their published figures, the
 * derived figures, every rejection a user can hit (checked by its message), and that a
 * failed load leaves the caller's struct untouched. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpusim/config.h"

/* A valid configuration that the error tests mutate one piece at a time. */
static const char base_json[] =
    "{\n"
    "  \"name\": \"test-chip\",\n"
    "  \"description\": \"a chip for tests\",\n"
    "  \"sources\": [\"made up\"],\n"
    "  \"notes\": [\"all figures invented\"],\n"
    "  \"chips_per_host\": 2,\n"
    "  \"cores_per_chip\": 2,\n"
    "  \"clock_mhz\": 500,\n"
    "  \"mxu\": {\"per_core\": 2, \"rows\": 8, \"cols\": 16, \"dtypes\": [\"bf16\"], "
    "\"accumulator_rows\": 32},\n"
    "  \"vector_unit\": {\"sublanes\": 4, \"lanes\": 16, \"alus_per_lane\": 1},\n"
    "  \"memory\": {\"hbm_bytes\": 1048576, \"hbm_gbytes_per_s\": 4, "
    "\"vmem_bytes_per_core\": 65536, \"dma_engines_per_core\": 1},\n"
    "  \"host_link\": {\"gbytes_per_s\": 2, \"latency_ns\": 800},\n"
    "  \"queues\": {\"infeed_entries_per_core\": 3, \"outfeed_entries_per_core\": 5},\n"
    "  \"ici\": {\"topology\": \"torus_2d\", \"links_per_chip\": 4, "
    "\"gbytes_per_s_per_link\": 10, \"latency_ns\": 300}\n"
    "}\n";

/* ---- helpers ---------------------------------------------------------------------------- */

/* base_json with the first `from` replaced by `to`; the test fails if `from` is absent, so a
 * typo cannot turn a test into one that passes for the wrong reason. Caller frees. */
static char *mutate(const char *from, const char *to)
{
    const char *at = strstr(base_json, from);
    if (!at)
        fail_msg("mutation target not found in base_json: %s", from);
    size_t head = (size_t)(at - base_json), from_len = strlen(from), to_len = strlen(to);
    size_t total = strlen(base_json) - from_len + to_len;
    char *s = malloc(total + 1);
    assert_non_null(s);
    memcpy(s, base_json, head);
    memcpy(s + head, to, to_len);
    strcpy(s + head + to_len, at + from_len);
    return s;
}

static void fill_sentinel(struct tpu_chip_config *c)
{
    memset(c, 0xA5, sizeof *c);
}

static void assert_sentinel(const struct tpu_chip_config *c)
{
    struct tpu_chip_config s;
    fill_sentinel(&s);
    assert_memory_equal(c, &s, sizeof s);
}

static void assert_msg_has(const struct tpu_diag *d, const char *part)
{
    if (!strstr(d->msg, part))
        fail_msg("message lacks \"%s\":\n  %s", part, d->msg);
}

/* Loads `json` as "t.json"; expects `code` and a message containing every part (NULL ends
 * the list); checks that the output struct is untouched. */
static void expect_error_v(const char *json, int code, va_list ap)
{
    struct tpu_chip_config out;
    struct tpu_diag d;
    fill_sentinel(&out);
    tpu_diag_clear(&d);
    int rc = tpu_config_load_string(json, "t.json", &out, &d);
    if (rc != code)
        fail_msg("expected %s, got %s: %s", tpu_err_name(code), tpu_err_name(rc), d.msg);
    assert_int_equal(d.code, code);
    for (const char *part = va_arg(ap, const char *); part; part = va_arg(ap, const char *))
        assert_msg_has(&d, part);
    assert_sentinel(&out);
}

static void expect_error(const char *json, int code, ...)
{
    va_list ap;
    va_start(ap, code);
    expect_error_v(json, code, ap);
    va_end(ap);
}

/* mutate() then expect_error(). */
static void expect_mutation_error(const char *from, const char *to, int code, ...)
{
    char *json = mutate(from, to);
    va_list ap;
    va_start(ap, code);
    expect_error_v(json, code, ap);
    va_end(ap);
    free(json);
}

static void load_ok(const char *json, struct tpu_chip_config *out)
{
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_config_load_string(json, "t.json", out, &d);
    if (rc != 0)
        fail_msg("expected success, got %s: %s", tpu_err_name(rc), d.msg);
}

static void load_preset_ok(const char *name, struct tpu_chip_config *out)
{
    struct tpu_diag d;
    tpu_diag_clear(&d);
    int rc = tpu_config_load_preset(name, out, &d);
    if (rc != 0)
        fail_msg("preset %s: %s", name, d.msg);
}

/* ---- presets ---------------------------------------------------------------------------- */

static void test_preset_names(void **state)
{
    (void)state;
    const char *const *names = tpu_config_preset_names();
    const char *want[] = {"tiny", "tpu-v1", "tpu-v2", "tpu-v3", "tpu-v4"};
    for (size_t i = 0; i < 5; i++) {
        assert_non_null(names[i]);
        assert_string_equal(names[i], want[i]);
        assert_non_null(tpu_config_preset_json(want[i]));
    }
    assert_null(names[5]);
    assert_null(tpu_config_preset_json("tpu-v5"));
    assert_null(tpu_config_preset_json(NULL));
}

/* Every preset loads, is named after its file, cites a source and passes validate. */
static void test_presets_load(void **state)
{
    (void)state;
    for (const char *const *p = tpu_config_preset_names(); *p; p++) {
        struct tpu_chip_config c;
        struct tpu_diag d;
        load_preset_ok(*p, &c);
        assert_string_equal(c.name, *p);
        assert_true(c.n_sources >= 1);
        assert_true(strlen(c.description) > 0);
        assert_int_equal(tpu_config_validate(&c, *p, &d), 0);
        /* the same text through the generic loader gives the same struct */
        struct tpu_chip_config again;
        memset(&again, 0, sizeof again);
        assert_int_equal(tpu_config_load(*p, &again, &d), 0);
        assert_memory_equal(&c, &again, sizeof c);
    }
}

/* Peak = cores x MXUs x R x C x 2 x clock against the published peaks, within 0.5 %. */
static void test_preset_peaks(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        double published_t; /* TFLOP/s (TOPS for v1) as published */
        double formula_t;   /* the same figure from the formula, to 0.1 T */
    } peaks[] = {
        {"tpu-v1", 92.0, 91.8},
        {"tpu-v2", 46.0, 45.9},
        {"tpu-v3", 123.0, 123.2},
        {"tpu-v4", 275.0, 275.3},
    };
    for (size_t i = 0; i < sizeof peaks / sizeof peaks[0]; i++) {
        struct tpu_chip_config c;
        struct tpu_chip_derived dv;
        load_preset_ok(peaks[i].name, &c);
        tpu_config_derive(&c, &dv);
        double t = dv.peak_flops_per_s / 1e12;
        if (fabs(t - peaks[i].published_t) > 0.005 * peaks[i].published_t)
            fail_msg("%s: peak %.3f T is not within 0.5%% of the published %.1f T",
                     peaks[i].name, t, peaks[i].published_t);
        assert_true(fabs(t - peaks[i].formula_t) < 0.05);
        assert_true(fabs(dv.peak_flops_per_s - 2.0 * dv.peak_macs_per_s) == 0.0);
    }
}

static void test_preset_v1_figures(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    struct tpu_chip_derived dv;
    load_preset_ok("tpu-v1", &c);
    assert_int_equal(c.cores_per_chip, 1);
    assert_int_equal(c.mxu_per_core, 1);
    assert_int_equal(c.mxu_rows, 256);
    assert_int_equal(c.mxu_cols, 256);
    assert_int_equal(c.mxu_dtypes, TPU_DTYPE_BIT(TPU_INT8));
    assert_int_equal(c.accumulator_rows, 4096);
    assert_true(c.clock_mhz == 700.0);
    assert_int_equal(c.hbm_bytes, 8ull << 30);
    assert_true(c.hbm_gbytes_per_s == 34.0);
    assert_int_equal(c.vmem_bytes, 24ull << 20);
    assert_int_equal(c.ici_topology, TPU_TOPO_NONE);
    assert_int_equal(c.ici_links_per_chip, 0);
    tpu_config_derive(&c, &dv);
    /* 65536 MACs x 700 MHz = 45.8752e12 MAC/s; / 34e9 B/s = 1349.27 MACs per byte: the
     * paper's "about 1350" */
    assert_int_equal(dv.total_mxus, 1);
    assert_true(fabs(dv.peak_macs_per_s - 45.8752e12) < 1.0);
    assert_true(fabs(dv.ridge_macs_per_byte - 1349.2706) < 0.001);
    assert_true(fabs(dv.ridge_macs_per_byte - 1350.0) < 1.0);
}

static void test_preset_v2_v3_v4_figures(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    load_preset_ok("tpu-v2", &c);
    assert_int_equal(c.cores_per_chip, 2);
    assert_int_equal(c.mxu_per_core, 1);
    assert_int_equal(c.mxu_dtypes, TPU_DTYPE_BIT(TPU_BF16));
    assert_int_equal(c.hbm_bytes, 16ull << 30);
    assert_int_equal(c.ici_topology, TPU_TOPO_TORUS_2D);
    assert_int_equal(c.ici_links_per_chip, 4);

    load_preset_ok("tpu-v3", &c);
    assert_int_equal(c.mxu_per_core, 2);
    assert_true(c.clock_mhz == 940.0);
    assert_true(c.hbm_gbytes_per_s == 900.0);
    assert_int_equal(c.hbm_bytes, 32ull << 30);

    load_preset_ok("tpu-v4", &c);
    assert_int_equal(c.cores_per_chip, 2);
    assert_int_equal(c.mxu_per_core, 4);
    assert_int_equal(c.mxu_rows, 128);
    assert_int_equal(c.mxu_cols, 128);
    assert_int_equal(c.mxu_dtypes, TPU_DTYPE_BIT(TPU_BF16) | TPU_DTYPE_BIT(TPU_INT8));
    assert_true(c.clock_mhz == 1050.0);
    assert_true(c.hbm_gbytes_per_s == 1200.0);
    assert_int_equal(c.ici_topology, TPU_TOPO_TORUS_3D);
    assert_int_equal(c.ici_links_per_chip, 6);
    assert_int_equal(c.chips_per_host, 4);
}

static void test_tiny_derived(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    struct tpu_chip_derived dv;
    load_preset_ok("tiny", &c);
    assert_int_equal(c.mxu_rows, 8);
    assert_int_equal(c.mxu_cols, 8);
    assert_int_equal(c.mxu_per_core, 1);
    assert_int_equal(c.cores_per_chip, 2);
    tpu_config_derive(&c, &dv);
    assert_int_equal(dv.total_mxus, 2);
    assert_true(dv.peak_macs_per_s == 128e9);
    assert_true(dv.peak_flops_per_s == 256e9);
    assert_true(dv.hbm_bytes_per_s == 8e9);
    assert_true(dv.ridge_macs_per_byte == 16.0);
    assert_true(dv.host_link_bytes_per_s == 1e9);
}

/* ---- a full document: every field lands where it belongs -------------------------------- */

static void test_base_fields(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    load_ok(base_json, &c);
    assert_string_equal(c.name, "test-chip");
    assert_string_equal(c.description, "a chip for tests");
    assert_int_equal(c.n_sources, 1);
    assert_string_equal(c.sources[0], "made up");
    assert_int_equal(c.chips_per_host, 2);
    assert_int_equal(c.cores_per_chip, 2);
    assert_true(c.clock_mhz == 500.0);
    assert_int_equal(c.mxu_per_core, 2);
    assert_int_equal(c.mxu_rows, 8);
    assert_int_equal(c.mxu_cols, 16);
    assert_int_equal(c.mxu_dtypes, TPU_DTYPE_BIT(TPU_BF16));
    assert_int_equal(c.accumulator_rows, 32);
    assert_int_equal(c.vector_sublanes, 4);
    assert_int_equal(c.vector_lanes, 16);
    assert_int_equal(c.vector_alus_per_lane, 1);
    assert_int_equal(c.hbm_bytes, 1048576);
    assert_true(c.hbm_gbytes_per_s == 4.0);
    assert_int_equal(c.vmem_bytes, 65536);
    assert_int_equal(c.dma_engines, 1);
    assert_true(c.host_link_gbytes_per_s == 2.0);
    assert_true(c.host_link_latency_ns == 800.0);
    assert_int_equal(c.infeed_queue_depth, 3);
    assert_int_equal(c.outfeed_queue_depth, 5);
    assert_int_equal(c.ici_topology, TPU_TOPO_TORUS_2D);
    assert_int_equal(c.ici_links_per_chip, 4);
    assert_true(c.ici_gbytes_per_s_per_link == 10.0);
    assert_true(c.ici_latency_ns == 300.0);
    assert_string_equal(tpu_topology_name(c.ici_topology), "torus_2d");
    assert_string_equal(tpu_topology_name(TPU_TOPO_NONE), "none");
    assert_string_equal(tpu_topology_name(TPU_TOPO_RING), "ring");
    assert_string_equal(tpu_topology_name(TPU_TOPO_TORUS_3D), "torus_3d");
    assert_string_equal(tpu_topology_name((enum tpu_topology)42), "?");
}

static void test_optional_fields_and_number_forms(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    /* description and notes may be left out */
    char *s = mutate("  \"description\": \"a chip for tests\",\n", "");
    char *t = NULL;
    load_ok(s, &c);
    assert_string_equal(c.description, "");
    free(s);
    s = mutate("  \"notes\": [\"all figures invented\"],\n", "");
    load_ok(s, &c);
    free(s);
    /* a whole number may be written with a zero fraction or an exponent */
    s = mutate("\"rows\": 8", "\"rows\": 8.0");
    load_ok(s, &c);
    assert_int_equal(c.mxu_rows, 8);
    free(s);
    s = mutate("\"hbm_bytes\": 1048576", "\"hbm_bytes\": 2e6");
    load_ok(s, &c);
    assert_int_equal(c.hbm_bytes, 2000000);
    free(s);
    /* fractional numbers where numbers may be fractional */
    s = mutate("\"clock_mhz\": 500", "\"clock_mhz\": 937.5");
    load_ok(s, &c);
    assert_true(c.clock_mhz == 937.5);
    free(s);
    /* both data types, in either order */
    s = mutate("[\"bf16\"]", "[\"int8\", \"bf16\"]");
    load_ok(s, &c);
    assert_int_equal(c.mxu_dtypes, TPU_DTYPE_BIT(TPU_BF16) | TPU_DTYPE_BIT(TPU_INT8));
    free(s);
    /* no interconnect, all of its figures zero */
    s = mutate("\"topology\": \"torus_2d\", \"links_per_chip\": 4, \"gbytes_per_s_per_link\": "
               "10, \"latency_ns\": 300",
               "\"topology\": \"none\", \"links_per_chip\": 0, \"gbytes_per_s_per_link\": 0, "
               "\"latency_ns\": 0");
    load_ok(s, &c);
    assert_int_equal(c.ici_topology, TPU_TOPO_NONE);
    free(s);
    /* more links than a topology needs (e.g. extra wraparound links) are allowed */
    s = mutate("\"links_per_chip\": 4", "\"links_per_chip\": 6");
    load_ok(s, &c);
    free(s);
    /* exactly as many accumulator rows as array rows is the smallest consistent choice */
    s = mutate("\"accumulator_rows\": 32", "\"accumulator_rows\": 8");
    load_ok(s, &c);
    free(s);
    /* an empty source list is allowed (a user's own chip need not cite anything) */
    t = mutate("[\"made up\"]", "[]");
    load_ok(t, &c);
    assert_int_equal(c.n_sources, 0);
    free(t);
}

/* ---- syntax ----------------------------------------------------------------------------- */

static void test_syntax_errors(void **state)
{
    (void)state;
    /* a missing comma after line 2: jansson stops at the next key, line 3 column 15 */
    char *s = mutate("\"test-chip\",", "\"test-chip\"");
    expect_error(s, TPU_EPARSE, "t.json:3:15: syntax error:", "'}' expected", NULL);
    free(s);
    expect_error("", TPU_EPARSE, "t.json", "syntax error", NULL);
    expect_error("{\"name\": \"a\",\n\"name\": \"b\"}", TPU_EPARSE, "t.json:2:",
                 "duplicate object key", NULL);
    expect_error("{\"name\": 'x'}", TPU_EPARSE, "t.json:1:", "syntax error", NULL);
    /* comments are not JSON */
    expect_error("{ // a comment\n}", TPU_EPARSE, "t.json:1:", "syntax error", NULL);
    /* an integer too big for any field is caught by the parser */
    s = mutate("\"hbm_bytes\": 1048576", "\"hbm_bytes\": 99999999999999999999999");
    expect_error(s, TPU_EPARSE, "t.json:11:", "too big integer", NULL);
    free(s);
}

static void test_not_an_object(void **state)
{
    (void)state;
    expect_error("[1, 2]", TPU_ECONFIG, "t.json: a chip configuration is a JSON object",
                 "got an array", NULL);
    expect_mutation_error("\"mxu\": {\"per_core\": 2, \"rows\": 8, \"cols\": 16, \"dtypes\": "
                          "[\"bf16\"], \"accumulator_rows\": 32}",
                          "\"mxu\": [8, 8]", TPU_ECONFIG,
                          "field 'mxu' must be an object with the fields per_core, rows, cols, "
                          "dtypes, accumulator_rows; got an array",
                          NULL);
}

/* ---- unknown and missing fields --------------------------------------------------------- */

static void test_unknown_fields(void **state)
{
    (void)state;
    expect_mutation_error("\"clock_mhz\"", "\"clock_ghz\"", TPU_ECONFIG,
                          "t.json: unknown field 'clock_ghz' (did you mean 'clock_mhz'?)",
                          "the fields of the top level are: name, description, sources, notes, "
                          "chips_per_host, cores_per_chip, clock_mhz, mxu, vector_unit, memory, "
                          "host_link, queues, ici",
                          NULL);
    expect_mutation_error("\"rows\"", "\"row\"", TPU_ECONFIG,
                          "unknown field 'mxu.row' (did you mean 'rows'?); the fields of 'mxu' "
                          "are: per_core, rows, cols, dtypes, accumulator_rows",
                          NULL);
    /* far from every key: no guess */
    expect_mutation_error("\"alus_per_lane\": 1", "\"alus_per_lane\": 1, \"colour\": 3",
                          TPU_ECONFIG, "unknown field 'vector_unit.colour'; the fields of "
                          "'vector_unit' are: sublanes, lanes, alus_per_lane",
                          NULL);
    expect_mutation_error("\"latency_ns\": 300", "\"latency_ns\": 300, \"pod_chips\": 256",
                          TPU_ECONFIG, "unknown field 'ici.pod_chips'",
                          "topology, links_per_chip, gbytes_per_s_per_link, latency_ns", NULL);
}

static void test_missing_fields(void **state)
{
    (void)state;
    expect_mutation_error("  \"clock_mhz\": 500,\n", "", TPU_ECONFIG,
                          "t.json: required field 'clock_mhz' is missing (core clock in MHz: a "
                          "number from 1 to 10000)",
                          NULL);
    expect_mutation_error("\"cols\": 16, ", "", TPU_ECONFIG,
                          "required field 'mxu.cols' is missing", "a whole number from 1 to 4096",
                          NULL);
    expect_mutation_error("  \"sources\": [\"made up\"],\n", "", TPU_ECONFIG,
                          "required field 'sources' is missing", NULL);
    expect_mutation_error("  \"queues\": {\"infeed_entries_per_core\": 3, "
                          "\"outfeed_entries_per_core\": 5},\n",
                          "", TPU_ECONFIG, "required field 'queues' is missing", NULL);
    expect_mutation_error("\"topology\": \"torus_2d\", ", "", TPU_ECONFIG,
                          "required field 'ici.topology' is missing", NULL);
}

/* ---- types and ranges ------------------------------------------------------------------- */

static void test_wrong_types(void **state)
{
    (void)state;
    expect_mutation_error("\"rows\": 8", "\"rows\": \"8\"", TPU_ECONFIG,
                          "t.json: field 'mxu.rows' (rows of each matrix unit, the K dimension "
                          "of a tile) must be a whole number from 1 to 4096, got the string "
                          "\"8\"; write numbers without quotes",
                          NULL);
    expect_mutation_error("\"cores_per_chip\": 2", "\"cores_per_chip\": true", TPU_ECONFIG,
                          "field 'cores_per_chip'", "got true", NULL);
    expect_mutation_error("\"clock_mhz\": 500", "\"clock_mhz\": null", TPU_ECONFIG,
                          "field 'clock_mhz'", "got null", NULL);
    expect_mutation_error("\"lanes\": 16", "\"lanes\": [16]", TPU_ECONFIG,
                          "field 'vector_unit.lanes'", "got an array", NULL);
    expect_mutation_error("\"name\": \"test-chip\"", "\"name\": 7", TPU_ECONFIG,
                          "field 'name' must be a string, got 7", NULL);
    expect_mutation_error("[\"made up\"]", "\"made up\"", TPU_ECONFIG,
                          "field 'sources' must be an array of strings, got the string", NULL);
    expect_mutation_error("[\"made up\"]", "[\"made up\", 2]", TPU_ECONFIG,
                          "field 'sources[1]' must be a string, got 2", NULL);
    expect_mutation_error("[\"all figures invented\"]", "[\"ok\", {}]", TPU_ECONFIG,
                          "field 'notes[1]' must be a string, got an object", NULL);
    /* an escaped NUL would cut a C string short: the parser refuses it */
    expect_mutation_error("\"a chip for tests\"", "\"a\\u0000b\"", TPU_EPARSE,
                          "t.json:3:27: syntax error: \\u0000 is not allowed", NULL);
}

static void test_whole_numbers_and_ranges(void **state)
{
    (void)state;
    expect_mutation_error("\"rows\": 8", "\"rows\": 8.5", TPU_ECONFIG,
                          "field 'mxu.rows'", "must be a whole number from 1 to 4096, got 8.5",
                          NULL);
    expect_mutation_error("\"rows\": 8", "\"rows\": -3", TPU_ECONFIG,
                          "field 'mxu.rows'", "got -3", NULL);
    expect_mutation_error("\"rows\": 8", "\"rows\": 0", TPU_ECONFIG, "field 'mxu.rows'",
                          "got 0", NULL);
    expect_mutation_error("\"cols\": 16", "\"cols\": 5000", TPU_ECONFIG,
                          "field 'mxu.cols' (columns of each matrix unit, the N dimension of a "
                          "tile) must be a whole number from 1 to 4096, got 5000",
                          NULL);
    expect_mutation_error("\"clock_mhz\": 500", "\"clock_mhz\": 20000", TPU_ECONFIG,
                          "field 'clock_mhz' (core clock in MHz) must be a number from 1 to "
                          "10000, got 20000",
                          NULL);
    expect_mutation_error("\"clock_mhz\": 500", "\"clock_mhz\": -700", TPU_ECONFIG,
                          "field 'clock_mhz'", "got -700", NULL);
    expect_mutation_error("\"hbm_gbytes_per_s\": 4", "\"hbm_gbytes_per_s\": 0", TPU_ECONFIG,
                          "field 'memory.hbm_gbytes_per_s'",
                          "must be a number greater than 0 and at most 100000, got 0", NULL);
    expect_mutation_error("\"gbytes_per_s\": 2", "\"gbytes_per_s\": -1", TPU_ECONFIG,
                          "field 'host_link.gbytes_per_s'", "greater than 0", NULL);
    expect_mutation_error("\"latency_ns\": 800", "\"latency_ns\": -5", TPU_ECONFIG,
                          "field 'host_link.latency_ns'", "a number from 0 to", "got -5", NULL);
    expect_mutation_error("\"hbm_bytes\": 1048576", "\"hbm_bytes\": 0", TPU_ECONFIG,
                          "field 'memory.hbm_bytes'", "got 0", NULL);
    expect_mutation_error("\"hbm_bytes\": 1048576", "\"hbm_bytes\": 1e30", TPU_ECONFIG,
                          "field 'memory.hbm_bytes'", "got 1e+30", NULL);
    expect_mutation_error("\"per_core\": 2", "\"per_core\": 0", TPU_ECONFIG,
                          "field 'mxu.per_core'", NULL);
    expect_mutation_error("\"dma_engines_per_core\": 1", "\"dma_engines_per_core\": 0",
                          TPU_ECONFIG, "field 'memory.dma_engines_per_core'", NULL);
    expect_mutation_error("\"infeed_entries_per_core\": 3", "\"infeed_entries_per_core\": 0",
                          TPU_ECONFIG, "field 'queues.infeed_entries_per_core'", NULL);
    expect_mutation_error("\"chips_per_host\": 2", "\"chips_per_host\": 2.25", TPU_ECONFIG,
                          "field 'chips_per_host'", "got 2.25", NULL);
    expect_mutation_error("\"links_per_chip\": 4", "\"links_per_chip\": 65", TPU_ECONFIG,
                          "field 'ici.links_per_chip'", "from 0 to 64", NULL);
}

static void test_strings(void **state)
{
    (void)state;
    expect_mutation_error("\"test-chip\"", "\"my chip\"", TPU_ECONFIG,
                          "field 'name' is \"my chip\", which contains ' '", NULL);
    expect_mutation_error("\"test-chip\"", "\"\"", TPU_ECONFIG, "field 'name' is empty", NULL);
    /* control characters (JSON escapes) are quoted, not echoed raw */
    expect_mutation_error("\"test-chip\"", "\"my\\nchip\\u001b[31m\"", TPU_ECONFIG,
                          "field 'name' is \"my\\x0Achip\\x1B[31m\", which contains '\\x0A'",
                          NULL);
    expect_mutation_error("\"mxu\": {", "\"mxu\": {\"r\\tws\": 1, ", TPU_ECONFIG,
                          "unknown field 'mxu.r\\x09ws'", NULL);
    expect_mutation_error("\"torus_2d\"", "\"ring\\u0085\"", TPU_ECONFIG,
                          "field 'ici.topology' is \"ring\\xC2\\x85\", which is not a topology",
                          NULL);
    char name[80];
    memset(name, 'x', sizeof name);
    name[0] = '"';
    name[65] = '"';
    name[66] = '\0'; /* 64 characters */
    expect_mutation_error("\"test-chip\"", name, TPU_ECONFIG,
                          "field 'name' is 64 bytes long, more than the 63 that fit", NULL);
    expect_mutation_error("[\"made up\"]",
                          "[\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\"]",
                          TPU_ECONFIG, "field 'sources' has 9 entries, more than the 8 that fit",
                          NULL);
    /* a source of 512 characters does not fit in the struct */
    char *long_src = malloc(520);
    assert_non_null(long_src);
    memset(long_src, 'y', 519);
    long_src[0] = '[';
    long_src[1] = '"';
    long_src[514] = '"';
    long_src[515] = ']';
    long_src[516] = '\0';
    expect_mutation_error("[\"made up\"]", long_src, TPU_ECONFIG,
                          "field 'sources[0]' is 512 bytes long, more than the 511 that fit",
                          NULL);
    free(long_src);
}

static void test_dtypes_and_topology_names(void **state)
{
    (void)state;
    expect_mutation_error("[\"bf16\"]", "[\"bf16\", \"fp16\"]", TPU_ECONFIG,
                          "field 'mxu.dtypes[1]' is \"fp16\", which is not a matrix-unit data "
                          "type; allowed: bf16, int8",
                          NULL);
    expect_mutation_error("[\"bf16\"]", "[]", TPU_ECONFIG,
                          "field 'mxu.dtypes' is empty; a matrix unit multiplies at least one",
                          NULL);
    expect_mutation_error("[\"bf16\"]", "[\"bf16\", \"bf16\"]", TPU_ECONFIG,
                          "field 'mxu.dtypes' lists \"bf16\" twice", NULL);
    expect_mutation_error("[\"bf16\"]", "\"bf16\"", TPU_ECONFIG,
                          "field 'mxu.dtypes' must be an array of data type names", NULL);
    expect_mutation_error("\"torus_2d\"", "\"mesh_2d\"", TPU_ECONFIG,
                          "field 'ici.topology' is \"mesh_2d\", which is not a topology; "
                          "allowed: none, ring, torus_2d, torus_3d",
                          NULL);
}

/* ---- consistency ------------------------------------------------------------------------ */

static void test_ici_consistency(void **state)
{
    (void)state;
    /* no interconnect but links */
    expect_mutation_error("\"torus_2d\"", "\"none\"", TPU_ECONFIG,
                          "field 'ici.links_per_chip' is 4 but 'ici.topology' is \"none\"; a "
                          "chip without an interconnect has no links",
                          NULL);
    expect_mutation_error("\"topology\": \"torus_2d\", \"links_per_chip\": 4",
                          "\"topology\": \"none\", \"links_per_chip\": 0", TPU_ECONFIG,
                          "field 'ici.gbytes_per_s_per_link' is 10 but 'ici.topology' is "
                          "\"none\"",
                          NULL);
    expect_mutation_error("\"topology\": \"torus_2d\", \"links_per_chip\": 4, "
                          "\"gbytes_per_s_per_link\": 10",
                          "\"topology\": \"none\", \"links_per_chip\": 0, "
                          "\"gbytes_per_s_per_link\": 0",
                          TPU_ECONFIG, "field 'ici.latency_ns' is 300 but 'ici.topology' is",
                          NULL);
    /* a topology with too few links */
    expect_mutation_error("\"links_per_chip\": 4", "\"links_per_chip\": 2", TPU_ECONFIG,
                          "field 'ici.links_per_chip' is 2 but a torus_2d topology needs at "
                          "least 4 links per chip (two per dimension, X and Y)",
                          NULL);
    expect_mutation_error("\"torus_2d\"", "\"torus_3d\"", TPU_ECONFIG,
                          "field 'ici.links_per_chip' is 4 but a torus_3d topology needs at "
                          "least 6 links per chip",
                          NULL);
    expect_mutation_error("\"topology\": \"torus_2d\", \"links_per_chip\": 4",
                          "\"topology\": \"ring\", \"links_per_chip\": 1", TPU_ECONFIG,
                          "a ring topology needs at least 2 links per chip", NULL);
    expect_mutation_error("\"topology\": \"torus_2d\", \"links_per_chip\": 4",
                          "\"topology\": \"ring\", \"links_per_chip\": 0", TPU_ECONFIG,
                          "field 'ici.links_per_chip' is 0 but a ring topology", NULL);
    /* links that carry nothing */
    expect_mutation_error("\"gbytes_per_s_per_link\": 10", "\"gbytes_per_s_per_link\": 0",
                          TPU_ECONFIG,
                          "field 'ici.gbytes_per_s_per_link' is 0 but 'ici.topology' is "
                          "\"torus_2d\"; links that carry no data",
                          NULL);
}

static void test_memory_and_mxu_consistency(void **state)
{
    (void)state;
    expect_mutation_error("\"accumulator_rows\": 32", "\"accumulator_rows\": 7", TPU_ECONFIG,
                          "field 'mxu.accumulator_rows' is 7 but 'mxu.rows' is 8",
                          "raise accumulator_rows to at least 8", NULL);
    /* 2 cores x 1 MiB of on-chip memory against 1 MiB of HBM */
    expect_mutation_error("\"vmem_bytes_per_core\": 65536", "\"vmem_bytes_per_core\": 1048576",
                          TPU_ECONFIG,
                          "on-chip memory exceeds off-chip memory: 'memory.vmem_bytes_per_core' "
                          "1048576 x 'cores_per_chip' 2 = 2097152 bytes, but 'memory.hbm_bytes' "
                          "is 1048576",
                          NULL);
    /* one 8x16 bf16 tile is 256 bytes */
    expect_mutation_error("\"vmem_bytes_per_core\": 65536", "\"vmem_bytes_per_core\": 255",
                          TPU_ECONFIG,
                          "field 'memory.vmem_bytes_per_core' is 255 bytes, less than one 8x16 "
                          "bf16 weight tile (256 bytes)",
                          NULL);
    /* with int8 only, the tile is 128 bytes and 255 is enough */
    char *s = mutate("\"vmem_bytes_per_core\": 65536", "\"vmem_bytes_per_core\": 255");
    char *t = strstr(s, "[\"bf16\"]");
    assert_non_null(t);
    memcpy(t, "[\"int8\"]", 8);
    struct tpu_chip_config c;
    load_ok(s, &c);
    assert_int_equal(c.vmem_bytes, 255);
    free(s);
}

/* ---- tpu_config_validate on a struct built in code -------------------------------------- */

static void test_validate_struct(void **state)
{
    (void)state;
    struct tpu_chip_config base, c;
    struct tpu_diag d;
    load_ok(base_json, &base);
    assert_int_equal(tpu_config_validate(&base, "sweep", &d), 0);

    c = base;
    c.mxu_rows = 0;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "sweep: field 'mxu.rows'");
    assert_msg_has(&d, "got 0");

    c = base;
    snprintf(c.name, sizeof c.name, "bad\nname\xfe");
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "sweep: field 'name' is \"bad\\x0Aname\\xFE\", which contains '\\x0A'");

    c = base;
    c.clock_mhz = NAN;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'clock_mhz'");

    c = base;
    c.hbm_bytes = 1ull << 50;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'memory.hbm_bytes'");

    c = base;
    c.mxu_dtypes = 0;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'mxu.dtypes'");
    c.mxu_dtypes = 1u << 7;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);

    c = base;
    c.ici_topology = (enum tpu_topology)9;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'ici.topology' holds 9, which is not a topology");

    c = base;
    memset(c.name, 'n', sizeof c.name); /* no terminating NUL */
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'name'");

    c = base;
    c.n_sources = TPU_CONFIG_MAX_SOURCES + 1;
    assert_int_equal(tpu_config_validate(&c, "sweep", &d), TPU_ECONFIG);
    assert_msg_has(&d, "field 'sources' has 9 entries");

    c = base;
    c.accumulator_rows = 4;
    assert_int_equal(tpu_config_validate(&c, NULL, &d), TPU_ECONFIG);
    assert_msg_has(&d, "configuration: field 'mxu.accumulator_rows' is 4");

    assert_int_equal(tpu_config_validate(NULL, "x", &d), TPU_EINVAL);
    /* a NULL diag is allowed */
    assert_int_equal(tpu_config_validate(&c, "x", NULL), TPU_ECONFIG);
}

static void test_null_arguments(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    struct tpu_diag d;
    assert_int_equal(tpu_config_load_string(NULL, "x", &c, &d), TPU_EINVAL);
    assert_int_equal(tpu_config_load_string(base_json, "x", NULL, &d), TPU_EINVAL);
    assert_int_equal(tpu_config_load_file(NULL, &c, &d), TPU_EINVAL);
    assert_int_equal(tpu_config_load_preset(NULL, &c, &d), TPU_EINVAL);
    assert_int_equal(tpu_config_load(NULL, &c, &d), TPU_EINVAL);
    /* an unnamed string is called <string> in messages */
    fill_sentinel(&c);
    assert_int_equal(tpu_config_load_string("[", NULL, &c, &d), TPU_EPARSE);
    assert_msg_has(&d, "<string>:");
    assert_sentinel(&c);
    /* success clears the diagnostic */
    assert_int_equal(tpu_config_load_string(base_json, NULL, &c, &d), 0);
    assert_int_equal(d.code, 0);
    assert_string_equal(d.msg, "");
}

/* ---- presets by name and files ---------------------------------------------------------- */

struct files {
    char dir[64];
    char good[128];
    char bad[128];
    char big[128];
    char locked[128];
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static int files_setup(void **state)
{
    struct files *fs = calloc(1, sizeof *fs);
    if (!fs)
        return -1;
    snprintf(fs->dir, sizeof fs->dir, "/tmp/tpusim-test-config-XXXXXX");
    if (!mkdtemp(fs->dir)) {
        free(fs);
        return -1;
    }
    snprintf(fs->good, sizeof fs->good, "%s/good.json", fs->dir);
    snprintf(fs->bad, sizeof fs->bad, "%s/bad.json", fs->dir);
    snprintf(fs->big, sizeof fs->big, "%s/big.json", fs->dir);
    snprintf(fs->locked, sizeof fs->locked, "%s/locked.json", fs->dir);
    *state = fs;
    return 0;
}

static int files_teardown(void **state)
{
    struct files *fs = *state;
    unlink(fs->good);
    unlink(fs->bad);
    unlink(fs->big);
    unlink(fs->locked);
    rmdir(fs->dir);
    free(fs);
    return 0;
}

static void test_load_file_ok(void **state)
{
    struct files *fs = *state;
    struct tpu_chip_config from_file, preset;
    struct tpu_diag d;
    write_file(fs->good, tpu_config_preset_json("tpu-v4"));
    assert_int_equal(tpu_config_load_file(fs->good, &from_file, &d), 0);
    load_preset_ok("tpu-v4", &preset);
    assert_memory_equal(&from_file, &preset, sizeof preset);
    /* tpu_config_load takes a path too */
    memset(&from_file, 0, sizeof from_file);
    assert_int_equal(tpu_config_load(fs->good, &from_file, &d), 0);
    assert_memory_equal(&from_file, &preset, sizeof preset);
}

static void test_load_file_errors(void **state)
{
    struct files *fs = *state;
    struct tpu_chip_config c;
    struct tpu_diag d;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.json", fs->dir);

    fill_sentinel(&c);
    assert_int_equal(tpu_config_load_file(missing, &c, &d), TPU_EIO);
    assert_msg_has(&d, "cannot open chip configuration file '");
    assert_msg_has(&d, "missing.json': No such file or directory");
    assert_sentinel(&c);

    /* an empty file is named as one (jansson: "'[' or '{' expected near end of file") */
    assert_int_equal(tpu_config_load_file("/dev/null", &c, &d), TPU_EPARSE);
    assert_msg_has(&d, "chip configuration file '/dev/null' is empty; a configuration is a "
                       "JSON object ({...})");

    /* a directory is named as one (it used to be "cannot read ...: Is a directory") */
    assert_int_equal(tpu_config_load_file(fs->dir, &c, &d), TPU_EIO);
    assert_msg_has(&d, "' is a directory; give a chip configuration JSON file (such as "
                       "configs/tpu-v4.json) or a preset name");
    assert_sentinel(&c);

    /* syntax and semantic errors name the file */
    write_file(fs->bad, "{\n  \"name\": \"x\",\n  \"cores_per_chip\": 2,,\n}\n");
    assert_int_equal(tpu_config_load_file(fs->bad, &c, &d), TPU_EPARSE);
    char want[200];
    snprintf(want, sizeof want, "%s:3:", fs->bad);
    assert_msg_has(&d, want);
    assert_msg_has(&d, "syntax error");
    assert_sentinel(&c);

    char *s = mutate("\"rows\": 8", "\"rows\": -3");
    write_file(fs->bad, s);
    free(s);
    assert_int_equal(tpu_config_load_file(fs->bad, &c, &d), TPU_ECONFIG);
    snprintf(want, sizeof want, "%s: field 'mxu.rows'", fs->bad);
    assert_msg_has(&d, want);
    assert_msg_has(&d, "got -3");
    assert_sentinel(&c);

    /* something far larger than a configuration */
    FILE *f = fopen(fs->big, "wb");
    assert_non_null(f);
    for (int i = 0; i < (1 << 20) + 10; i++)
        fputc(' ', f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(tpu_config_load_file(fs->big, &c, &d), TPU_EIO);
    assert_msg_has(&d, "is larger than 1048576 bytes");
    assert_sentinel(&c);
}

static void test_load_file_unreadable(void **state)
{
    struct files *fs = *state;
    struct tpu_chip_config c;
    struct tpu_diag d;
    write_file(fs->locked, base_json);
    assert_int_equal(chmod(fs->locked, 0), 0);
    if (geteuid() == 0) {
        /* root reads any file: the permission check cannot be provoked */
        skip();
    }
    fill_sentinel(&c);
    assert_int_equal(tpu_config_load_file(fs->locked, &c, &d), TPU_EIO);
    assert_msg_has(&d, "cannot open chip configuration file");
    assert_msg_has(&d, "Permission denied");
    assert_sentinel(&c);
}

static void test_load_by_name(void **state)
{
    (void)state;
    struct tpu_chip_config c;
    struct tpu_diag d;

    fill_sentinel(&c);
    assert_int_equal(tpu_config_load_preset("tpu-v9", &c, &d), TPU_ENOTFOUND);
    assert_msg_has(&d, "no built-in chip preset is named 'tpu-v9'; the presets are: tiny, "
                       "tpu-v1, tpu-v2, tpu-v3, tpu-v4");
    assert_sentinel(&c);

    /* neither a preset nor a file */
    assert_int_equal(tpu_config_load("tpu-v9", &c, &d), TPU_ENOTFOUND);
    assert_msg_has(&d, "'tpu-v9' is neither a built-in chip preset nor an existing file; the "
                       "presets are: tiny, tpu-v1, tpu-v2, tpu-v3, tpu-v4");
    assert_null(strstr(d.msg, "did you mean")); /* equally near several presets: no guess */
    assert_sentinel(&c);

    /* one near preset: a guess */
    assert_int_equal(tpu_config_load("tpuv4", &c, &d), TPU_ENOTFOUND);
    assert_msg_has(&d, "(did you mean 'tpu-v4'?)");
    assert_sentinel(&c);

    /* something that looks like a path is read as a file, and the presets are listed */
    assert_int_equal(tpu_config_load("no/such/chip.json", &c, &d), TPU_EIO);
    assert_msg_has(&d, "cannot open chip configuration file 'no/such/chip.json': No such file "
                       "or directory (built-in presets: tiny, tpu-v1");
    assert_sentinel(&c);

    assert_int_equal(tpu_config_load("tpu-v2", &c, &d), 0);
    assert_string_equal(c.name, "tpu-v2");
}

int main(void)
{
    const struct CMUnitTest presets[] = {
        cmocka_unit_test(test_preset_names),
        cmocka_unit_test(test_presets_load),
        cmocka_unit_test(test_preset_peaks),
        cmocka_unit_test(test_preset_v1_figures),
        cmocka_unit_test(test_preset_v2_v3_v4_figures),
        cmocka_unit_test(test_tiny_derived),
    };
    const struct CMUnitTest documents[] = {
        cmocka_unit_test(test_base_fields),
        cmocka_unit_test(test_optional_fields_and_number_forms),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_not_an_object),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_whole_numbers_and_ranges),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_dtypes_and_topology_names),
        cmocka_unit_test(test_ici_consistency),
        cmocka_unit_test(test_memory_and_mxu_consistency),
        cmocka_unit_test(test_validate_struct),
        cmocka_unit_test(test_null_arguments),
    };
    const struct CMUnitTest files[] = {
        cmocka_unit_test(test_load_file_ok),
        cmocka_unit_test(test_load_file_errors),
        cmocka_unit_test(test_load_file_unreadable),
        cmocka_unit_test(test_load_by_name),
    };
    int failed = cmocka_run_group_tests_name("config presets", presets, NULL, NULL);
    failed += cmocka_run_group_tests_name("config documents", documents, NULL, NULL);
    failed += cmocka_run_group_tests_name("config files", files, files_setup, files_teardown);
    return failed ? 1 : 0;
}
