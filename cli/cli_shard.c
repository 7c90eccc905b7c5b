/* `tpusim shard`: how a global batch and each input tensor split over the hosts, replicas and
 * logical cores of a pod slice, as TPUEstimator splits them (include/tpusim/shard.h), or
 * the exact error TPUEstimator's rules give. It runs nothing: it prints the shard plan.
 *
 *   tpusim shard --chip tpu-v3 --hosts 2 --cores-per-replica 4 --batch 64 \
 *       --tensor images:28x28x1 --tensor labels:1 --input-partition-dims "[[1, 4, 1, 1]]"
 *
 * Text: the system, the input_fn calls of one step and the batch of each, per host, the batch
 * per replica, then per tensor each logical core's slice (its shape, its index ranges of the
 * per-replica tensor, the buffer it is padded to). --json: the same as one JSON object (the
 * schema is in `tpusim shard --help` and README.md). --svg FILE: a picture of one tensor's
 * split, the per-replica tensor's partitioned dimensions drawn as a grid of parts, each
 * labelled with its logical core, replica 0's physical core and host, its shape and ranges.
 *
 * Which partition dims apply to which tensor: input_partition_dims[0] to the first tensor
 * (the features), [1] to every later one (the labels: labels, or the targets and the mask of
 * an mse model), as the runtime applies them. Only this file prints. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "tpusim/config.h"
#include "tpusim/net.h"
#include "tpusim/shard.h"
#include "util.h"

#define SHARD_PATH_MAX 4000
#define SHARD_TEXT_MAX 255

struct shard_opts {
    char chip[SHARD_PATH_MAX + 1];
    uint32_t hosts, chips_per_host, cores_per_replica, num_shards, batch;
    int train_input, eval_input, mode;
    char dims[SHARD_TEXT_MAX + 1];
    bool dims_given;
    char model[SHARD_PATH_MAX + 1];
    const char *tensor[TPU_SHARD_MAX_TENSORS];
    uint32_t n_tensor;
    bool json;
    char svg[SHARD_PATH_MAX + 1];
    char svg_tensor[SHARD_TEXT_MAX + 1];
};

static int set_tensor(const struct tpu__cli_parse *p, const struct tpu__cli_opt *opt,
                      const char *v)
{
    (void)opt;
    struct shard_opts *o = p->target;
    if (o->n_tensor == TPU_SHARD_MAX_TENSORS)
        return tpu__cli_error(p->cmd, TPU_CLI_USAGE, "--tensor '%s': at most %u tensors (the "
                              "features first, then the labels)", v, TPU_SHARD_MAX_TENSORS);
    o->tensor[o->n_tensor++] = v;
    return 0;
}

static const char *const mode_words[] = {"train", "eval", "predict", NULL};
static const int mode_values[] = {TPU_MODE_TRAIN, TPU_MODE_EVAL, TPU_MODE_PREDICT};

#define S(f) TPU__CLI_FIELD(struct shard_opts, f)

static const struct tpu__cli_opt shard_opts_table[] = {
    {.name = "--chip", .kind = TPU__CLI_TEXT, S(chip), .max_chars = SHARD_PATH_MAX,
     .arg = "NAME|FILE", .group = "the pod slice",
     .help = "chip preset or JSON file (default tpu-v3): its cores\nper chip and chips per host"},
    {.name = "--hosts", .kind = TPU__CLI_U64, S(hosts), .min = 1, .max = TPU__CLI_MAX_HOSTS,
     .arg = "N", .help = "hosts (default 1; train's --hosts)"},
    {.name = "--chips-per-host", .kind = TPU__CLI_U64, S(chips_per_host), .min = 1,
     .max = TPU__CLI_MAX_CHIPS_PER_HOST, .arg = "N",
     .help = "chips each host drives: train's --chips (default:\n"
             "the chip's chips_per_host); hosts x chips at most 4096"},
    {.name = "--cores-per-replica", .kind = TPU__CLI_U64, S(cores_per_replica), .min = 1,
     .max = TPU__CLI_MAX_CORES_PER_REPLICA, .arg = "N", .group = "TPUConfig",
     .help = "num_cores_per_replica: 1, 2, 4, ... 128 (default 1)"},
    {.name = "--num-shards", .kind = TPU__CLI_U64, S(num_shards), .min = 1, .max = 1u << 20,
     .arg = "N", .help = "the replicas, checked (default: cores / cores per\nreplica)"},
    {.name = "--per-host-input-for-training", .kind = TPU__CLI_ENUM, S(train_input),
     .words = tpu__cli_input_mode_words, .values = tpu__cli_input_mode_values,
     .help = "how input_fn is called (default PER_HOST_V2)"},
    {.name = "--eval-training-input-configuration", .kind = TPU__CLI_ENUM, S(eval_input),
     .words = tpu__cli_eval_input_words, .values = tpu__cli_eval_input_values,
     .help = "SLICED: eval and predict input once on host 0\n(default PER_HOST_V1)"},
    {.name = "--input-partition-dims", .kind = TPU__CLI_TEXT, S(dims), TPU__CLI_GIVEN(struct shard_opts, dims_given),
     .max_chars = SHARD_TEXT_MAX, .arg = "TEXT",
     .help = "as in Python: \"[[1, 4, 1, 1]]\" (features) or\n"
             "\"[[1, 2, 2, 1], None]\" (features, labels)"},
    {.name = "--mode", .kind = TPU__CLI_ENUM, S(mode), .words = mode_words,
     .values = mode_values, .group = "the step",
     .help = "whose batch and input: train (default), eval, predict"},
    {.name = "--batch", .kind = TPU__CLI_U64, S(batch), .min = 1, .max = 1u << 30, .arg = "N",
     .help = "the global batch (train_batch_size, eval_batch_size or\npredict_batch_size)"},
    {.name = "--tensor", .kind = TPU__CLI_CUSTOM, .set = set_tensor,
     .max_chars = SHARD_TEXT_MAX, .arg = "NAME:SHAPE",
     .help = "an input tensor's shape per example, e.g. images:28x28x1\n"
             "or labels:1 (labels: a scalar); repeat it, features\n"
             "first (at most 4)"},
    {.name = "--model", .kind = TPU__CLI_TEXT, S(model), .max_chars = SHARD_PATH_MAX,
     .arg = "FILE.json",
     .help = "or a model file's tensors: x (its input), then labels\n"
             "(softmax) or targets and mask (mse); predict: x only"},
    {.name = "--json", .kind = TPU__CLI_FLAG, S(json), .group = "output",
     .help = "the plan as one JSON object (schema below)"},
    {.name = "--svg", .kind = TPU__CLI_TEXT, S(svg), .max_chars = SHARD_PATH_MAX,
     .arg = "FILE", .help = "a picture of one tensor's split (SVG)"},
    {.name = "--svg-tensor", .kind = TPU__CLI_TEXT, S(svg_tensor), .max_chars = SHARD_TEXT_MAX,
     .arg = "NAME", .help = "the tensor --svg draws (default: the first that is\n"
                            "partitioned, else the first)"},
};

const struct tpu__cli_opts tpu__cli_shard_options = {
    .opts = shard_opts_table,
    .n_opts = sizeof shard_opts_table / sizeof shard_opts_table[0],
    .usage =
        "usage: tpusim shard --batch N [options]\n"
        "How a global batch and each input tensor split over the hosts, replicas and logical\n"
        "cores of a pod slice, as TPUEstimator splits them: the input_fn calls of a step and\n"
        "their batch per host, the batch per replica, and the slice of each tensor each\n"
        "logical core receives (shape and index ranges), or the error TPUEstimator's rules\n"
        "give (exit 2). Nothing runs. Cores are numbered host by host, chip by chip; replica\n"
        "r's logical core k is core r x cores-per-replica + k.\n"
        "\n",
    .footer =
        "\n"
        "input_partition_dims[0] applies to the first tensor, [1] to every later one. A\n"
        "dimension of size n cut into p parts splits as TPU infeed splits it: parts of\n"
        "ceil(n / p) first, then what is left, then empty parts (10 over 4: 3, 3, 3, 1);\n"
        "each core's buffer has the largest part's size, zero-padded.\n"
        "Where tpusim is stricter than TPUEstimator (each error says so): input_partition_dims\n"
        "with num_cores_per_replica 1; SLICED with a batch the replicas do not divide\n"
        "(TPUEstimator drops the rest); SLICED with input_partition_dims (TPUEstimator's\n"
        "broadcast infeed ignores them).\n"
        "\n"
        "--json: {\"chip\", \"hosts\", \"chips_per_host\", \"cores_per_chip\", \"cores\",\n"
        "\"cores_per_host\", \"num_cores_per_replica\", \"replicas\", \"mode\", \"input\",\n"
        "\"global_batch\", \"batch_per_replica\", \"input_fn\": {\"calls_per_step\",\n"
        "\"per_host\": [{\"host\", \"calls\", \"batch\", \"rows\"}], \"calls\": [{\"host\",\n"
        "\"shard\", \"batch\", \"first_replica\", \"n_replicas\", \"rows_each\", \"broadcast\"}]},\n"
        "\"tensors\": [{\"name\", \"shape\", \"partition_dims\" (null: None), \"placement\"\n"
        "(replicated, core0, partitioned), \"cores\": [{\"logical_core\", \"receives\",\n"
        "\"shape\", \"begin\", \"end\", \"buffer\", \"replica0_core\", \"replica0_host\"}]}]}.\n"
        "shape, begin, end and buffer are per dimension of the per-replica tensor, the batch\n"
        "first; a core that receives nothing has shape and buffer of zeros.\n",
    .help_column = 38,
    .text_max = SHARD_TEXT_MAX,
};

/* ---- the tensors ---------------------------------------------------------------------------- */

/* "images:28x28x1" (or "labels:" for a scalar per example) into t (cli.h). */
int tpu__cli_shard_parse_tensor(const char *cmd, const char *v, struct tpu_shard_tensor *t)
{
    char qb[TPU__QUOTE_BYTES];
    memset(t, 0, sizeof *t);
    const char *colon = strchr(v, ':');
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof t->name)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--tensor '%s' is not NAME:SHAPE with a name "
                              "of 1 to %zu characters; give e.g. --tensor images:28x28x1",
                              tpu__quote(v, qb, sizeof qb), sizeof t->name - 1);
    memcpy(t->name, v, (size_t)(colon - v));
    const char *p = colon + 1;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9')
            break;
        unsigned long long n = strtoull(p, &end, 10);
        if (n < 1 || n > (1ull << 32) || t->rank + 1 >= TPU_PARTITION_MAX_RANK ||
            (*end && *end != 'x'))
            break;
        t->shape[t->rank++] = n;
        p = *end ? end + 1 : end;
        if (!*p && *end == 'x')
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--tensor '%s': the shape ends in 'x'; "
                                  "give sizes joined by x, e.g. 28x28x1",
                                  tpu__quote(v, qb, sizeof qb));
    }
    if (*p)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--tensor '%s': the shape '%s' is not 1 to %u "
                              "sizes from 1 to 2^32 joined by x (per example, the batch left "
                              "out), e.g. 28x28x1, or nothing for a scalar",
                              tpu__quote(v, qb, sizeof qb), colon + 1,
                              TPU_PARTITION_MAX_RANK - 1);
    return 0;
}

/* The model file's input tensors (the order the runtime infeeds them). */
static int model_tensors(const char *cmd, const char *file, enum tpu_mode mode,
                         struct tpu_shard_spec *s)
{
    struct tpu_diag d = {0};
    struct tpu_net *net = NULL;
    if (tpu_net_load_file(file, &net, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "--model: %s", d.msg);
    struct tpu_layer_info in, out;
    uint32_t tensor = 0;
    enum tpu_loss loss = TPU_LOSS_SOFTMAX_XENT;
    tpu_net_layer(net, 0, &in);
    tpu_net_output(net, &tensor, &loss);
    tpu_net_layer(net, tensor, &out);
    tpu_net_destroy(&net);
    struct tpu_shard_tensor *t = &s->tensors[s->n_tensors++];
    snprintf(t->name, sizeof t->name, "x");
    if (in.out.h == 1 && in.out.w == 1) {
        t->rank = 1;
        t->shape[0] = in.out.c;
    } else {
        t->rank = 3;
        t->shape[0] = in.out.h;
        t->shape[1] = in.out.w;
        t->shape[2] = in.out.c;
    }
    if (mode == TPU_MODE_PREDICT)
        return 0;
    t = &s->tensors[s->n_tensors++];
    t->rank = 1;
    t->shape[0] = 1;
    if (loss == TPU_LOSS_SOFTMAX_XENT) {
        snprintf(t->name, sizeof t->name, "labels");
        return 0;
    }
    snprintf(t->name, sizeof t->name, "targets");
    t->shape[0] = (uint64_t)out.out.h * out.out.w * out.out.c;
    t = &s->tensors[s->n_tensors++];
    snprintf(t->name, sizeof t->name, "mask");
    t->rank = 1;
    t->shape[0] = 1;
    return 0;
}

/* ---- printing ------------------------------------------------------------------------------- */

static const char *input_name(const struct tpu_shard_spec *s)
{
    if (s->mode == TPU_MODE_TRAIN)
        return tpu__cli_input_mode_words[s->train_input];
    if (s->eval_input == TPU_EVAL_SLICED)
        return "SLICED";
    return s->train_input == TPU_PER_SHARD_V1 ? "PER_HOST_V1"
                                              : tpu__cli_input_mode_words[s->train_input];
}

static void print_dims(FILE *f, const uint64_t *v, uint32_t n, const char *open,
                       const char *sep, const char *close)
{
    fputs(open, f);
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, "%s%" PRIu64, i ? sep : "", v[i]);
    fputs(close, f);
}

static void dims_text(const struct tpu_partition_dims *dm, char *buf, size_t n)
{
    if (!dm->rank) {
        snprintf(buf, n, "None");
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < dm->rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%u", i ? ", " : "", dm->dims[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

static const char *placement(const struct tpu_shard_tensor *t)
{
    if (!t->dims.rank)
        return "replicated";
    uint64_t prod = 1;
    for (uint32_t i = 0; i < t->dims.rank; i++)
        prod = prod > UINT32_MAX ? prod : prod * t->dims.dims[i];
    return prod == 1 ? "core0" : "partitioned";
}

static void full_shape(const struct tpu_shard_plan *p, const struct tpu_shard_tensor *t,
                       uint64_t *shape)
{
    shape[0] = p->per_replica_batch;
    for (uint32_t i = 0; i < t->rank; i++)
        shape[i + 1] = t->shape[i];
}

/* The host of replica 0's logical core k. */
static uint32_t host_of(const struct tpu_shard_plan *p, uint32_t core)
{
    return core / p->cores_per_host;
}

/* Per host: its calls, the batch of each (all the same), the rows it reads. */
struct host_row {
    uint32_t calls, batch;
    uint64_t rows;
};

static struct host_row *host_rows(const struct tpu_shard_plan *p)
{
    struct host_row *h = calloc(p->hosts, sizeof *h);
    if (!h)
        return NULL;
    for (uint32_t i = 0; i < p->n_calls; i++) {
        struct host_row *r = &h[p->calls[i].host];
        r->calls++;
        r->batch = p->calls[i].batch;
        r->rows += p->calls[i].batch;
    }
    return h;
}

static void print_text(const char *chip, const struct tpu_shard_spec *s,
                       const struct tpu_shard_plan *p, const struct host_row *hr)
{
    static const char *const mode_text[] = {"training", "evaluation", "prediction"};
    printf("pod slice: %u host%s x %u chip%s x %u core%s (%s) = %u cores, %u per host\n",
           s->hosts, s->hosts == 1 ? "" : "s", s->chips_per_host,
           s->chips_per_host == 1 ? "" : "s", s->cores_per_chip,
           s->cores_per_chip == 1 ? "" : "s", chip, p->n_cores, p->cores_per_host);
    printf("replicas: %u of %u core%s (num_cores_per_replica); replica r's logical core k is "
           "core r x %u + k\n", p->n_replicas, p->cores_per_replica,
           p->cores_per_replica == 1 ? "" : "s", p->cores_per_replica);
    printf("%s, input %s: global batch %u, batch per replica %u%s\n", mode_text[s->mode],
           input_name(s), s->global_batch, p->per_replica_batch,
           p->n_calls == 1 && p->calls[0].broadcast ? " (every replica gets all of it)" : "");
    printf("input_fn calls per step: %u\n", p->n_calls);
    for (uint32_t h = 0; h < p->hosts; h++) {
        if (!hr[h].calls) {
            printf("  host %u: no calls\n", h);
            continue;
        }
        printf("  host %u: %u call%s of batch %u (%" PRIu64 " rows)\n", h, hr[h].calls,
               hr[h].calls == 1 ? "" : "s", hr[h].batch, hr[h].rows);
    }
    printf("%6s %5s %6s %7s  %s\n", "call", "host", "shard", "batch", "feeds");
    for (uint32_t i = 0; i < p->n_calls; i++) {
        const struct tpu_shard_call *c = &p->calls[i];
        printf("%6u %5u %6u %7u  ", i, c->host, c->shard, c->batch);
        if (c->broadcast)
            printf("replicas 0-%u, all %u rows to each\n", c->n_replicas - 1, c->batch);
        else if (c->n_replicas == 1)
            printf("replica %u, rows 0-%u\n", c->first_replica, c->rows_each - 1);
        else
            printf("replicas %u-%u in order, %u rows each (rows 0-%u to replica %u, %u-%u "
                   "to replica %u, ...)\n", c->first_replica,
                   c->first_replica + c->n_replicas - 1, c->rows_each, c->rows_each - 1,
                   c->first_replica, c->rows_each, 2 * c->rows_each - 1, c->first_replica + 1);
    }
    for (uint32_t t = 0; t < s->n_tensors; t++) {
        const struct tpu_shard_tensor *te = &s->tensors[t];
        uint64_t shape[TPU_PARTITION_MAX_RANK];
        full_shape(p, te, shape);
        char dt[96];
        dims_text(&te->dims, dt, sizeof dt);
        printf("tensor '%s' ", te->name);
        print_dims(stdout, shape, te->rank + 1, "[", ", ", "]");
        printf(" per replica, partition dims %s: %s%s\n", dt,
               !strcmp(placement(te), "replicated") ? "every core of a replica gets all of it"
               : !strcmp(placement(te), "core0")    ? "logical core 0 gets all of it"
                                                    : "split over the replica's cores",
               /* TPUEstimator's plain InfeedQueue feeds tpu_ordinal(replica) only */
               p->cores_per_replica > 1 && !strcmp(placement(te), "replicated")
                   ? " (tpusim; TPUEstimator with no input_partition_dims at all feeds "
                     "logical core 0 only)"
                   : "");
        printf("  %7s %5s %4s  %-20s %-28s %s\n", "logical", "core", "host", "shape", "ranges",
               "buffer");
        for (uint32_t k = 0; k < p->cores_per_replica; k++) {
            struct tpu_shard_slice sl;
            tpu_shard_slice_of(s, p, t, k, &sl, NULL);
            char sh[96] = "-", rg[160] = "-", bf[96] = "-";
            if (sl.receives) {
                size_t a = 0, b = 0, c = 0;
                for (uint32_t i = 0; i < sl.rank; i++) {
                    a += (size_t)snprintf(sh + a, sizeof sh - a, "%s%" PRIu64, i ? "x" : "",
                                          sl.end[i] - sl.begin[i]);
                    b += (size_t)snprintf(rg + b, sizeof rg - b, "%s%" PRIu64 ":%" PRIu64,
                                          i ? ", " : "[", sl.begin[i], sl.end[i]);
                    c += (size_t)snprintf(bf + c, sizeof bf - c, "%s%" PRIu64, i ? "x" : "",
                                          sl.padded[i]);
                }
                snprintf(rg + b, sizeof rg - b, "]");
            } else {
                snprintf(sh, sizeof sh, "nothing");
            }
            printf("  %7u %5u %4u  %-20s %-28s %s\n", k, k, host_of(p, k), sh, rg, bf);
        }
    }
    if (s->n_tensors)
        printf("(core and host: replica 0's; replica r's cores are r x %u + logical core)\n",
               p->cores_per_replica);
}

static void json_u64s(const uint64_t *v, uint32_t n)
{
    print_dims(stdout, v, n, "[", ", ", "]");
}

static void print_json(const char *chip, const struct tpu_shard_spec *s,
                       const struct tpu_shard_plan *p, const struct host_row *hr)
{
    printf("{\"chip\": ");
    tpu__cli_json_string(stdout, chip);
    printf(", \"hosts\": %u, \"chips_per_host\": %u, \"cores_per_chip\": %u, \"cores\": %u, "
           "\"cores_per_host\": %u, \"num_cores_per_replica\": %u, \"replicas\": %u, "
           "\"mode\": \"%s\", \"input\": \"%s\", \"global_batch\": %u, "
           "\"batch_per_replica\": %u, \"input_fn\": {\"calls_per_step\": %u, \"per_host\": [",
           s->hosts, s->chips_per_host, s->cores_per_chip, p->n_cores, p->cores_per_host,
           p->cores_per_replica, p->n_replicas, mode_words[s->mode], input_name(s),
           s->global_batch, p->per_replica_batch, p->n_calls);
    for (uint32_t h = 0; h < p->hosts; h++)
        printf("%s{\"host\": %u, \"calls\": %u, \"batch\": %u, \"rows\": %" PRIu64 "}",
               h ? ", " : "", h, hr[h].calls, hr[h].batch, hr[h].rows);
    printf("], \"calls\": [");
    for (uint32_t i = 0; i < p->n_calls; i++) {
        const struct tpu_shard_call *c = &p->calls[i];
        printf("%s{\"host\": %u, \"shard\": %u, \"batch\": %u, \"first_replica\": %u, "
               "\"n_replicas\": %u, \"rows_each\": %u, \"broadcast\": %s}", i ? ", " : "",
               c->host, c->shard, c->batch, c->first_replica, c->n_replicas, c->rows_each,
               c->broadcast ? "true" : "false");
    }
    printf("]}, \"tensors\": [");
    for (uint32_t t = 0; t < s->n_tensors; t++) {
        const struct tpu_shard_tensor *te = &s->tensors[t];
        uint64_t shape[TPU_PARTITION_MAX_RANK];
        full_shape(p, te, shape);
        printf("%s{\"name\": ", t ? ", " : "");
        tpu__cli_json_string(stdout, te->name);
        printf(", \"shape\": ");
        json_u64s(shape, te->rank + 1);
        printf(", \"partition_dims\": ");
        if (te->dims.rank) {
            printf("[");
            for (uint32_t i = 0; i < te->dims.rank; i++)
                printf("%s%u", i ? ", " : "", te->dims.dims[i]);
            printf("]");
        } else {
            printf("null");
        }
        printf(", \"placement\": \"%s\", \"cores\": [", placement(te));
        for (uint32_t k = 0; k < p->cores_per_replica; k++) {
            struct tpu_shard_slice sl;
            tpu_shard_slice_of(s, p, t, k, &sl, NULL);
            uint64_t size[TPU_PARTITION_MAX_RANK];
            for (uint32_t i = 0; i < sl.rank; i++)
                size[i] = sl.end[i] - sl.begin[i];
            printf("%s{\"logical_core\": %u, \"receives\": %s, \"shape\": ", k ? ", " : "", k,
                   sl.receives ? "true" : "false");
            json_u64s(size, sl.rank);
            printf(", \"begin\": ");
            json_u64s(sl.begin, sl.rank);
            printf(", \"end\": ");
            json_u64s(sl.end, sl.rank);
            printf(", \"buffer\": ");
            json_u64s(sl.padded, sl.rank);
            printf(", \"replica0_core\": %u, \"replica0_host\": %u}", k, host_of(p, k));
        }
        printf("]}");
    }
    printf("]}\n");
}

/* ---- the picture ---------------------------------------------------------------------------- */

#define CELL_W 230
#define CELL_H 96
#define MARGIN 20
#define TITLE_H 64

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* The per-replica tensor's partitioned dimensions drawn as a grid: rows are the parts of
 * the first dimension cut in more than one part, columns the parts of all the later ones
 * (row-major, so the cell at row i, column j is logical core i x columns + j). A tensor that
 * is not split is one cell. Each cell is one part, labelled with its logical core, replica
 * 0's physical core and host, its shape and its index ranges; empty parts are dashed. */
static void write_svg(FILE *f, const char *chip, const struct tpu_shard_spec *s,
                      const struct tpu_shard_plan *p, uint32_t t)
{
    const struct tpu_shard_tensor *te = &s->tensors[t];
    const char *pl = placement(te);
    const bool split = !strcmp(pl, "partitioned");
    uint32_t rows = 1, cols = 1, first = TPU_PARTITION_MAX_RANK;
    if (split)
        for (uint32_t a = 0; a < te->dims.rank; a++) {
            if (te->dims.dims[a] <= 1)
                continue;
            if (first == TPU_PARTITION_MAX_RANK) {
                first = a;
                rows = te->dims.dims[a];
            } else {
                cols *= te->dims.dims[a];
            }
        }
    /* one row of parts when only one dimension is cut: easier to read */
    if (split && cols == 1) {
        cols = rows;
        rows = 1;
    }
    const uint32_t width = 2 * MARGIN + cols * CELL_W, height = TITLE_H + MARGIN + rows * CELL_H;
    uint64_t shape[TPU_PARTITION_MAX_RANK];
    full_shape(p, te, shape);
    char dt[96], title[512];
    dims_text(&te->dims, dt, sizeof dt);
    size_t at = (size_t)snprintf(title, sizeof title, "tensor '%s' [", te->name);
    for (uint32_t i = 0; i <= te->rank; i++)
        at += (size_t)snprintf(title + at, sizeof title - at, "%s%" PRIu64, i ? ", " : "",
                               shape[i]);
    snprintf(title + at, sizeof title - at, "] per replica, input_partition_dims %s", dt);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" "
               "viewBox=\"0 0 %u %u\" font-family=\"sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<title>");
    xml_text(f, title);
    fprintf(f, "</title>\n<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%u\" fill=\"white\"/>\n",
            width, height);
    fprintf(f, "<text x=\"%u\" y=\"24\" font-size=\"15\" font-weight=\"bold\">", MARGIN);
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"%u\" y=\"46\" font-size=\"12\">", MARGIN);
    char sub[256];
    snprintf(sub, sizeof sub, "%u host(s) x %u chip(s) x %u core(s) of %s; %u replicas of %u "
             "cores; cores and hosts shown for replica 0 (replica r: core + r x %u)",
             s->hosts, s->chips_per_host, s->cores_per_chip, chip, p->n_replicas,
             p->cores_per_replica, p->cores_per_replica);
    xml_text(f, sub);
    fprintf(f, "</text>\n");
    const uint32_t n_parts = split ? p->cores_per_replica : 1;
    for (uint32_t k = 0; k < n_parts; k++) {
        struct tpu_shard_slice sl;
        tpu_shard_slice_of(s, p, t, k, &sl, NULL);
        bool empty = false;
        for (uint32_t i = 0; i < sl.rank; i++)
            empty |= sl.end[i] == sl.begin[i];
        const uint32_t x = MARGIN + (k % cols) * CELL_W, y = TITLE_H + (k / cols) * CELL_H;
        fprintf(f, "<g class=\"part\" data-logical-core=\"%u\" data-empty=\"%s\">\n", k,
                empty ? "true" : "false");
        fprintf(f, "<rect class=\"part\" x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" "
                   "fill=\"%s\" stroke=\"#333\" stroke-width=\"1.5\"%s/>\n",
                x + 2, y + 2, CELL_W - 4, CELL_H - 4, empty ? "#eeeeee" : "#cfe3f7",
                empty ? " stroke-dasharray=\"6 4\"" : "");
        char line[4][200];
        if (split)
            snprintf(line[0], sizeof line[0], "logical core %u%s", k, empty ? " (empty)" : "");
        else if (!strcmp(pl, "core0"))
            snprintf(line[0], sizeof line[0], "logical core 0 only (others: nothing)");
        else
            snprintf(line[0], sizeof line[0], "every logical core (0-%u): all of it",
                     p->cores_per_replica - 1);
        const uint32_t last = p->cores_per_replica - 1;
        if (split || !strcmp(pl, "core0"))
            snprintf(line[1], sizeof line[1], "core %u, host %u", k, host_of(p, k));
        else if (host_of(p, last))
            snprintf(line[1], sizeof line[1], "cores 0-%u, hosts 0-%u", last, host_of(p, last));
        else
            snprintf(line[1], sizeof line[1], "cores 0-%u, host 0", last);
        size_t a = (size_t)snprintf(line[2], sizeof line[2], "shape ");
        size_t b = (size_t)snprintf(line[3], sizeof line[3], "[");
        for (uint32_t i = 0; i < sl.rank; i++) {
            a += (size_t)snprintf(line[2] + a, sizeof line[2] - a, "%s%" PRIu64, i ? "x" : "",
                                  sl.end[i] - sl.begin[i]);
            b += (size_t)snprintf(line[3] + b, sizeof line[3] - b, "%s%" PRIu64 ":%" PRIu64,
                                  i ? ", " : "", sl.begin[i], sl.end[i]);
        }
        snprintf(line[3] + b, sizeof line[3] - b, "]");
        for (int l = 0; l < 4; l++) {
            fprintf(f, "<text x=\"%u\" y=\"%u\" font-size=\"12\">", x + 10, y + 22 + 20 * l);
            xml_text(f, line[l]);
            fprintf(f, "</text>\n");
        }
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</svg>\n");
}

static int save_svg(const char *cmd, const char *path, const char *chip,
                    const struct tpu_shard_spec *s, const struct tpu_shard_plan *p, uint32_t t)
{
    struct tpu_diag d = {0};
    FILE *f;
    char *tmp;
    if (tpu__atomic_open(path, "w", &f, &tmp, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    write_svg(f, chip, s, p, t);
    if (tpu__atomic_commit(f, tmp, path, true, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    return 0;
}

/* ---- the spec of a run (shared with train, evaluate and predict) ------------------------- */

int tpu__cli_shard_spec(const char *cmd, const struct tpu_chip_config *chip,
                        uint32_t chips_per_host, const struct tpu_run_config *rc,
                        int mode_value, const char *model_file, struct tpu_shard_spec *s)
{
    const enum tpu_mode mode = (enum tpu_mode)mode_value;
    tpu_shard_spec_set_config(s, rc, rc->num_hosts,
                              chips_per_host ? chips_per_host : chip->chips_per_host,
                              chip->cores_per_chip, mode);
    const uint64_t chips = (uint64_t)s->hosts * s->chips_per_host;
    if (chips > TPU__CLI_MAX_CHIPS)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--hosts %u x %u chips per host is %llu "
                              "chips; tpusim simulates at most %u in one process: use fewer "
                              "--hosts or %s", s->hosts, s->chips_per_host,
                              (unsigned long long)chips, TPU__CLI_MAX_CHIPS,
                              strcmp(cmd, "shard") ? "--chips" : "--chips-per-host");
    int rc_model;
    if (model_file && model_file[0] && (rc_model = model_tensors(cmd, model_file, mode, s)))
        return rc_model;
    tpu_shard_spec_set_dims(s, rc);
    return 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

int tpu__cli_shard(int argc, char **argv)
{
    const char *cmd = "shard";
    struct shard_opts o;
    memset(&o, 0, sizeof o);
    snprintf(o.chip, sizeof o.chip, "tpu-v3");
    o.hosts = 1;
    o.cores_per_replica = 1;
    o.train_input = TPU_PER_HOST_V2;
    o.eval_input = TPU_EVAL_PER_HOST_V1;
    o.mode = TPU_MODE_TRAIN;
    const struct tpu__cli_parse ps = {.table = &tpu__cli_shard_options, .cmd = cmd,
                                      .target = &o};
    int rc = tpu__cli_opts_parse(&ps, argc, argv, 1, NULL);
    if (rc)
        return rc == TPU__CLI_HELP ? TPU_CLI_OK : rc;
    if (!o.batch)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "give the global batch: --batch N (the "
                              "train, eval or predict batch size of --mode)");
    if (o.n_tensor && o.model[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "give the tensors with --tensor or with "
                              "--model, not both");
    if (o.svg[0] && (rc = tpu__cli_check_output_file(cmd, "--svg", o.svg)))
        return rc;
    struct tpu_diag d = {0};
    struct tpu_chip_config chip;
    if (tpu_config_load(o.chip, &chip, &d))
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "%s", d.msg);
    struct tpu_shard_spec s;
    memset(&s, 0, sizeof s);
    for (uint32_t i = 0; i < o.n_tensor; i++) {
        if ((rc = tpu__cli_shard_parse_tensor(cmd, o.tensor[i], &s.tensors[i])))
            return rc;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(s.tensors[j].name, s.tensors[i].name))
                return tpu__cli_error(cmd, TPU_CLI_USAGE, "--tensor '%s': a tensor named '%s' "
                                      "is already given; give each tensor once, with its own "
                                      "name", o.tensor[i], s.tensors[i].name);
        s.n_tensors++;
    }
    struct tpu_run_config rcfg;
    memset(&rcfg, 0, sizeof rcfg);
    rcfg.num_hosts = o.hosts;
    rcfg.num_cores_per_replica = o.cores_per_replica;
    rcfg.num_shards = o.num_shards;
    rcfg.per_host_input_for_training = (enum tpu_input_mode)o.train_input;
    rcfg.eval_training_input_configuration = (enum tpu_eval_input)o.eval_input;
    rcfg.train_batch_size = rcfg.eval_batch_size = rcfg.predict_batch_size = o.batch;
    if (o.dims_given) {
        if (tpu_partition_dims_parse(o.dims, rcfg.input_partition_dims,
                                     &rcfg.n_input_partition_dims, &d))
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--input-partition-dims: %s", d.msg);
        if (!s.n_tensors && !o.model[0])
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--input-partition-dims applies to input "
                                  "tensors, and none is given; give them with --tensor "
                                  "NAME:SHAPE (features first) or --model FILE");
    }
    if ((rc = tpu__cli_shard_spec(cmd, &chip, o.chips_per_host, &rcfg, o.mode, o.model, &s)))
        return rc;
    /* the labels' dims with no tensor after the features (prediction, or one --tensor) */
    if (rcfg.n_input_partition_dims == 2 && rcfg.input_partition_dims[1].rank &&
        s.n_tensors < 2)
        fprintf(stderr, "tpusim shard: warning: input_partition_dims[1] applies to no tensor: "
                "it is for the tensors after the features (the labels), and %s; give them "
                "(--tensor, or --mode train or eval with --model) or write None there\n",
                s.n_tensors ? "only the features are given" : "no tensor is given");
    uint32_t svg_t = 0;
    if (o.svg_tensor[0] && !o.svg[0])
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--svg-tensor says which tensor --svg draws; "
                              "give --svg FILE too");
    if (o.svg[0]) {
        if (!s.n_tensors)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--svg draws a tensor's split, and no "
                                  "tensor is given; give --tensor NAME:SHAPE or --model FILE");
        if (o.svg_tensor[0]) {
            for (svg_t = 0; svg_t < s.n_tensors; svg_t++)
                if (!strcmp(s.tensors[svg_t].name, o.svg_tensor))
                    break;
            if (svg_t == s.n_tensors) {
                char names[256] = "";
                size_t at = 0;
                for (uint32_t i = 0; i < s.n_tensors; i++)
                    at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "",
                                           s.tensors[i].name);
                return tpu__cli_error(cmd, TPU_CLI_USAGE, "--svg-tensor '%s' is none of the "
                                      "tensors (%s); give one of them", o.svg_tensor, names);
            }
        } else {
            for (svg_t = 0; svg_t < s.n_tensors; svg_t++)
                if (!strcmp(placement(&s.tensors[svg_t]), "partitioned"))
                    break;
            if (svg_t == s.n_tensors)
                svg_t = 0;
        }
    }
    struct tpu_shard_plan plan;
    if (tpu_shard_plan_make(&s, &plan, &d))
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "%s", d.msg);
    struct host_row *hr = host_rows(&plan);
    if (!hr) {
        tpu_shard_plan_free(&plan);
        return tpu__cli_error(cmd, TPU_CLI_FAIL, "out of memory");
    }
    if (o.json)
        print_json(chip.name, &s, &plan, hr);
    else
        print_text(chip.name, &s, &plan, hr);
    rc = o.svg[0] ? save_svg(cmd, o.svg, chip.name, &s, &plan, svg_t) : 0;
    if (!rc && o.svg[0] && !o.json)
        printf("wrote %s (tensor '%s')\n", o.svg, s.tensors[svg_t].name);
    free(hr);
    tpu_shard_plan_free(&plan);
    return rc;
}
