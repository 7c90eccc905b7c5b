/* Fuzz target: the command line's list-shaped values that have their own parsers. The first
 * byte picks the parser (byte % 2); the rest of the input, up to its first NUL, is the text a
 * user gives:
 *   0 shard's --tensor NAME:SHAPE   tpu__cli_shard_parse_tensor: a success has a name of 1 to
 *                                   31 characters that is the text before the first ':', and
 *                                   0 to 7 sizes from 1 to 2^32 whose decimal forms joined
 *                                   by x are the text after it;
 *   1 bench loops' --list 1,4,16    tpu__cli_bench_parse_list: a success holds 1 to
 *                                   TPU_SWEEP_MAX_SIZES loop sizes from 1 to
 *                                   TPU_SWEEP_MAX_LOOP_SIZE in strictly ascending order whose
 *                                   decimal forms joined by commas are the text.
 * Both print their errors to stderr and return an exit code (0 to 125), so the test runs
 * this target with --quiet-target. */
#include <inttypes.h>
#include <stdbool.h>

#include "cli.h"
#include "fuzz_util.h"
#include "tpusim/shard.h"
#include "tpusim/sweep.h"

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz harness: %s (input \"%s\")\n", what, text);
    abort();
}

static void tensor(const char *text)
{
    struct tpu_shard_tensor t;
    int rc = tpu__cli_shard_parse_tensor("shard", text, &t);
    if (rc < 0 || rc > 125)
        die("--tensor's parser returned no exit code", text);
    if (rc)
        return;
    const size_t name_len = strlen(t.name);
    const char *colon = strchr(text, ':');
    if (name_len < 1 || name_len > 31 || !colon || (size_t)(colon - text) != name_len ||
        memcmp(text, t.name, name_len) != 0)
        die("a parsed --tensor's name is not the text before its ':'", text);
    if (t.rank > TPU_PARTITION_MAX_RANK - 1)
        die("a parsed --tensor has too many sizes", text);
    char again[256] = "";
    size_t k = 0;
    for (uint32_t i = 0; i < t.rank; i++) {
        if (t.shape[i] < 1 || t.shape[i] > (UINT64_C(1) << 32))
            die("a parsed --tensor has a size out of range", text);
        k += (size_t)snprintf(again + k, sizeof again - k, "%s%" PRIu64, i ? "x" : "",
                              t.shape[i]);
    }
    /* the shape as given, each size without its leading zeros (the parser takes 028) */
    char given[1024];
    size_t g = 0;
    for (const char *q = colon + 1; *q; q++) {
        const bool starts_size = q == colon + 1 || q[-1] == 'x';
        if (*q == '0' && (starts_size || (g && given[g - 1] == '\0')) && q[1] >= '0' &&
            q[1] <= '9') {
            given[g++] = '\0'; /* a dropped zero: marks that the size has not started */
            continue;
        }
        given[g++] = *q;
    }
    size_t m = 0; /* squeeze out the marks */
    for (size_t i = 0; i < g; i++)
        if (given[i])
            given[m++] = given[i];
    given[m] = '\0';
    if (strcmp(again, given) != 0)
        die("a parsed --tensor's sizes do not spell its shape", text);
}

static void loop_list(const char *text)
{
    uint64_t sizes[TPU_SWEEP_MAX_SIZES];
    size_t n = 0;
    int rc = tpu__cli_bench_parse_list(text, sizes, &n);
    if (rc < 0 || rc > 125)
        die("--list's parser returned no exit code", text);
    if (rc)
        return;
    if (n < 1 || n > TPU_SWEEP_MAX_SIZES)
        die("a parsed --list has a bad count of loop sizes", text);
    char again[TPU_SWEEP_MAX_SIZES * 12] = "";
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (sizes[i] < 1 || sizes[i] > TPU_SWEEP_MAX_LOOP_SIZE || (i && sizes[i] <= sizes[i - 1]))
            die("a parsed --list is out of range or not strictly ascending", text);
        k += (size_t)snprintf(again + k, sizeof again - k, "%s%" PRIu64, i ? "," : "", sizes[i]);
    }
    if (strcmp(again, text) != 0)
        die("a parsed --list's sizes do not spell its text", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char text[1024];
    size_t len = size - 1 < sizeof text - 1 ? size - 1 : sizeof text - 1;
    memcpy(text, data + 1, len);
    text[len] = '\0'; /* up to the first NUL */
    if (data[0] % 2 == 0)
        tensor(text);
    else
        loop_list(text);
    return 0;
}
