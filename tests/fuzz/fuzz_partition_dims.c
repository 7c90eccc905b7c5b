/* Fuzz target: input_partition_dims as a user writes it (`tpusim shard|train
 * --input-partition-dims TEXT`, the config files' input_partition_dims key), parsed by
 * tpu_partition_dims_parse exactly as the command line parses it. Besides "no crash" it
 * checks what the plan relies on:
 *   - a failure is TPU_EINVAL with a one-line message and leaves *n = 0;
 *   - a success has one or two entries, the features' not None, every count >= 1, at most
 *     TPU_PARTITION_MAX_RANK counts, the unused entry zeroed;
 *   - printing the result in Python's form and parsing that again gives the same dims;
 *   - when the features' counts multiply to a replica size (2, 4, ... 128), a shard plan over
 *     a tensor of that rank is made and every logical core's slice lies inside the tensor, is
 *     no larger than its padded buffer, and the parts of each dimension tile it exactly. */
#include "fuzz_util.h"
#include "tpusim/shard.h"

static void die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz harness: %s (input \"%s\")\n", what, text);
    abort();
}

static size_t print_dims(const struct tpu_partition_dims *v, uint32_t n, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].rank == 0) {
            at += (size_t)snprintf(buf + at, size - at, "%sNone", i ? ", " : "");
            continue;
        }
        at += (size_t)snprintf(buf + at, size - at, "%s[", i ? ", " : "");
        for (uint32_t k = 0; k < v[i].rank; k++)
            at += (size_t)snprintf(buf + at, size - at, "%s%u", k ? ", " : "", v[i].dims[k]);
        at += (size_t)snprintf(buf + at, size - at, "]");
    }
    return at + (size_t)snprintf(buf + at, size - at, "]");
}

/* A plan over one tensor partitioned by dims (product a power of two from 2 to 128). */
static void check_plan(const struct tpu_partition_dims *dims, uint64_t product, const char *text)
{
    struct tpu_shard_spec s;
    memset(&s, 0, sizeof s);
    s.hosts = 1;
    s.chips_per_host = 1;
    s.cores_per_chip = (uint32_t)product;
    s.num_cores_per_replica = (uint32_t)product;
    s.train_input = TPU_PER_HOST_V2;
    s.mode = TPU_MODE_TRAIN;
    s.global_batch = 3;
    s.n_tensors = 1;
    struct tpu_shard_tensor *t = &s.tensors[0];
    snprintf(t->name, sizeof t->name, "x");
    t->rank = dims->rank - 1;
    for (uint32_t a = 0; a < t->rank; a++)
        t->shape[a] = 1 + (a * 5 + dims->dims[a + 1]) % 11; /* 1 .. 11: even and uneven */
    t->dims = *dims;
    struct tpu_shard_plan p;
    struct tpu_diag d = {0};
    int rc = tpu_shard_plan_make(&s, &p, &d);
    fuzz_check_diag("tpu_shard_plan_make", rc, &d);
    if (rc)
        die("a plan over dims whose product is the replica's cores failed", text);
    uint64_t shape[TPU_PARTITION_MAX_RANK], covered[TPU_PARTITION_MAX_RANK] = {0};
    shape[0] = p.per_replica_batch;
    for (uint32_t a = 0; a < t->rank; a++)
        shape[a + 1] = t->shape[a];
    for (uint32_t k = 0; k < p.cores_per_replica; k++) {
        struct tpu_shard_slice sl;
        if (tpu_shard_slice_of(&s, &p, 0, k, &sl, &d) || !sl.receives || sl.rank != dims->rank)
            die("a slice of a partitioned tensor failed or is missing", text);
        /* the part index of each dimension, row-major: count each part's length once, when
         * the other dimensions' part indices are 0 */
        uint32_t rest = k, idx[TPU_PARTITION_MAX_RANK];
        for (uint32_t a = sl.rank; a-- > 0;) {
            idx[a] = rest % dims->dims[a];
            rest /= dims->dims[a];
        }
        for (uint32_t a = 0; a < sl.rank; a++) {
            if (sl.begin[a] > sl.end[a] || sl.end[a] > shape[a] ||
                sl.end[a] - sl.begin[a] > sl.padded[a])
                die("a slice lies outside its tensor or its buffer", text);
            bool first = true;
            for (uint32_t b = 0; b < sl.rank; b++)
                if (b != a && idx[b])
                    first = false;
            if (first) {
                if (sl.begin[a] != covered[a])
                    die("the parts of a dimension do not follow one another", text);
                covered[a] = sl.end[a];
            }
        }
    }
    for (uint32_t a = 0; a < dims->rank; a++)
        if (covered[a] != shape[a])
            die("the parts of a dimension do not cover it", text);
    tpu_shard_plan_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    struct tpu_partition_dims out[2];
    uint32_t n = 77;
    struct tpu_diag d = {0};
    int rc = tpu_partition_dims_parse(text, out, &n, &d);
    fuzz_check_diag("tpu_partition_dims_parse", rc, &d);
    if (rc) {
        if (rc != TPU_EINVAL || n != 0 || strchr(d.msg, '\n'))
            die("a failure is not TPU_EINVAL with n = 0 and a one-line message", text);
        free(text);
        return 0;
    }
    if (n < 1 || n > 2 || out[0].rank == 0)
        die("a success without one or two entries, the features' not None", text);
    for (uint32_t i = 0; i < 2; i++) {
        if (out[i].rank > TPU_PARTITION_MAX_RANK || (i >= n && out[i].rank))
            die("an entry with too many counts, or an unused entry not zeroed", text);
        for (uint32_t k = 0; k < out[i].rank; k++)
            if (out[i].dims[k] < 1)
                die("a count below 1 parsed", text);
    }
    char printed[512];
    print_dims(out, n, printed, sizeof printed);
    struct tpu_partition_dims again[2];
    uint32_t n2 = 0;
    if (tpu_partition_dims_parse(printed, again, &n2, &d) || n2 != n ||
        memcmp(again, out, sizeof again))
        die("printing the parsed dims and parsing them again gives other dims", text);
    uint64_t product = 1;
    for (uint32_t k = 0; k < out[0].rank && product <= 128; k++)
        product *= out[0].dims[k];
    if (product >= 2 && product <= 128 && !(product & (product - 1)))
        check_plan(&out[0], product, text);
    free(text);
    return 0;
}
