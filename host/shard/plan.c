/* The shard plan (shard.h): every rule TPUEstimator applies to a pod slice's sharding, each
 * with its own message (the value, the rule, the fix), and the input_fn calls of a step.
 *
 * Where the rules come from (TPUEstimator 1.15 - 2.x, tensorflow_estimator/python/estimator/
 * tpu/), in the order TPUEstimator meets them, which is the order they are checked here:
 *   tpu_config.py TPUConfig.__new__: input_partition_dims has one or two entries (the
 *     parser), only with PER_HOST_V2, only with num_cores_per_replica set;
 *     num_cores_per_replica is 1, 2, 4, ... 128.
 *   tpu_estimator.py TPUEstimator.__init__: PER_SHARD_V1 with num_cores_per_replica is
 *     refused ("Model parallelism only supports per host input for training"); batch sizes
 *     positive.
 *   tpu_context.py num_replicas and _validate_tpu_configuration: num_cores_per_replica at
 *     most the system's cores; replicas = cores / num_cores_per_replica, and num_shards, if
 *     given, must equal it; outside PER_HOST_V2 a replica fits on one host's cores; the
 *     mode's batch divides by the replicas unless the input is broadcast (BROADCAST, or
 *     SLICED evaluation and prediction); evaluation on several hosts needs BROADCAST,
 *     SLICED or PER_HOST_V2; prediction on several hosts needs BROADCAST, SLICED, or
 *     PER_HOST_V2 with one replica.
 *   tpu_estimator.py InputsStructureRecorder: input_partition_dims[0] is not None.
 *   tpu_feed.py _PartitionedInfeedQueue._check_input_partition_dims: counts >= 1; a product
 *     of 1 is not checked further; otherwise the product is num_cores_per_replica and the
 *     rank is the tensor's.
 * Where tpusim is stricter, and why (each message says so):
 *   - num_cores_per_replica 1 with input_partition_dims: TPUEstimator accepts it when 1 is
 *     set explicitly, but it splits nothing; here 1 is also the default (TPUEstimator's
 *     None), so it is refused with TPUEstimator's "requires setting num_cores_per_replica".
 *   - SLICED with a batch that the replicas do not divide: TPUEstimator gives each replica
 *     global // replicas rows and silently drops the rest; refused here.
 *   - SLICED with input_partition_dims: TPUEstimator's broadcast infeed ignores the partition
 *     dims (a plain infeed queue feeds each replica's logical core 0); refused here.
 *   - cores that a replica cannot tile (a host's cores not a multiple of a replica's, or a
 *     replica spanning part of a host): TPUEstimator's device assignment fails on them.
 *
 * Input functions per step, by the mode's input (TPUEstimator's _InputPipeline):
 *   training PER_SHARD_V1  once per replica (= core), on its host, batch global / replicas
 *   PER_HOST_V1            once per host, batch global / hosts, split over its replicas (also
 *                          evaluation and prediction with PER_SHARD_V1 or PER_HOST_V1)
 *   PER_HOST_V2            once per replica, on the host of its logical core 0, batch
 *                          global / replicas (every mode)
 *   BROADCAST              once, on host 0, batch global, every replica all of it (every
 *                          mode; its model_fn batch is the global batch)
 *   SLICED (eval, predict) once, on host 0, batch global, sliced over the replicas
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard_int.h"
#include "tpusim/shard.h"
#include "util.h"

static const char *const input_names[] = {"PER_SHARD_V1", "PER_HOST_V1", "PER_HOST_V2",
                                          "BROADCAST"};
static const char *const batch_field[] = {"train_batch_size", "eval_batch_size",
                                          "predict_batch_size"};
static const char *const mode_words[] = {"training", "evaluation", "prediction"};

const char *tpu__shard_input_name(enum tpu_input_mode m)
{
    return (unsigned)m <= TPU_BROADCAST ? input_names[m] : "?";
}

enum tpu__shard_feed tpu__shard_feed_of(const struct tpu_shard_spec *s)
{
    if (s->mode == TPU_MODE_TRAIN)
        return s->train_input == TPU_PER_SHARD_V1 ? TPU__FEED_PER_REPLICA_V1
               : s->train_input == TPU_PER_HOST_V1 ? TPU__FEED_PER_HOST
               : s->train_input == TPU_PER_HOST_V2 ? TPU__FEED_PER_REPLICA
                                                   : TPU__FEED_BROADCAST;
    if (s->eval_input == TPU_EVAL_SLICED)
        return TPU__FEED_SLICED;
    return s->train_input == TPU_BROADCAST     ? TPU__FEED_BROADCAST
           : s->train_input == TPU_PER_HOST_V2 ? TPU__FEED_PER_REPLICA
                                               : TPU__FEED_PER_HOST;
}

const char *tpu__shard_feed_name(enum tpu__shard_feed f)
{
    static const char *const names[] = {"PER_SHARD_V1 (per replica)", "PER_HOST_V1 (per host)",
                                        "PER_HOST_V2 (per replica)", "BROADCAST",
                                        "SLICED"};
    return names[f];
}

void tpu__shard_dims_text(const struct tpu_partition_dims *dims, char *buf, size_t n)
{
    if (dims->rank == 0) {
        snprintf(buf, n, "None");
        return;
    }
    size_t at = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < dims->rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%u", i ? ", " : "", dims->dims[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

void tpu__shard_shape_text(uint64_t batch, const struct tpu_shard_tensor *t, char *buf,
                           size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[%llu", (unsigned long long)batch);
    for (uint32_t i = 0; i < t->rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, ", %llu", (unsigned long long)t->shape[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

static bool power_of_two(uint32_t v)
{
    return v && !(v & (v - 1));
}

/* The largest power of two <= v (v >= 1). */
static uint32_t pow2_below(uint32_t v)
{
    uint32_t p = 1;
    while (p <= v / 2)
        p *= 2;
    return p;
}

static bool any_dims(const struct tpu_shard_spec *s)
{
    for (uint32_t i = 0; i < s->n_tensors; i++)
        if (s->tensors[i].dims.rank)
            return true;
    return false;
}

/* The spec's own form: counts in range, tensors well formed. */
static int check_form(const struct tpu_shard_spec *s, struct tpu_diag *d)
{
    if (s->hosts < 1 || s->chips_per_host < 1 || s->cores_per_chip < 1)
        return tpu__fail(d, TPU_EINVAL, "a pod slice of %u hosts x %u chips per host x %u cores "
                         "per chip has no cores; each count must be at least 1", s->hosts,
                         s->chips_per_host, s->cores_per_chip);
    if ((unsigned)s->mode > TPU_MODE_PREDICT)
        return tpu__fail(d, TPU_EINVAL, "mode %d is not train, eval or predict", (int)s->mode);
    if ((unsigned)s->train_input > TPU_BROADCAST)
        return tpu__fail(d, TPU_EINVAL, "per_host_input_for_training %d is not one of "
                         "PER_SHARD_V1, PER_HOST_V1, PER_HOST_V2, BROADCAST",
                         (int)s->train_input);
    if ((unsigned)s->eval_input > TPU_EVAL_SLICED)
        return tpu__fail(d, TPU_EINVAL, "eval_training_input_configuration %d is not "
                         "PER_HOST_V1 or SLICED", (int)s->eval_input);
    if (s->n_tensors > TPU_SHARD_MAX_TENSORS)
        return tpu__fail(d, TPU_EINVAL, "%u input tensors: at most %u (the features first, then "
                         "the labels)", s->n_tensors, TPU_SHARD_MAX_TENSORS);
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct tpu_shard_tensor *t = &s->tensors[i];
        if (t->rank >= TPU_PARTITION_MAX_RANK)
            return tpu__fail(d, TPU_EINVAL, "tensor '%s' has %u dimensions per example; at most "
                             "%u (with the batch dimension, %u)", t->name, t->rank,
                             TPU_PARTITION_MAX_RANK - 1, TPU_PARTITION_MAX_RANK);
        for (uint32_t a = 0; a < t->rank; a++)
            if (t->shape[a] < 1)
                return tpu__fail(d, TPU_EINVAL, "tensor '%s' has size 0 in dimension %u of "
                                 "its example shape; every size must be at least 1", t->name,
                                 a + 1);
        if (t->dims.rank > TPU_PARTITION_MAX_RANK)
            return tpu__fail(d, TPU_EINVAL, "tensor '%s': %u partition dims; at most %u",
                             t->name, t->dims.rank, TPU_PARTITION_MAX_RANK);
        for (uint32_t a = 0; a < t->dims.rank; a++)
            if (t->dims.dims[a] < 1) {
                char dt[96];
                tpu__shard_dims_text(&t->dims, dt, sizeof dt);
                return tpu__fail(d, TPU_EINVAL, "tensor '%s': partition dims %s: all input "
                                 "partition dims must be >= 1 (1: that dimension is not "
                                 "split)", t->name, dt);
            }
    }
    return 0;
}

/* TPUConfig's and TPUEstimator's constructor rules. */
static int check_config(const struct tpu_shard_spec *s, uint32_t cpr, struct tpu_diag *d)
{
    if (any_dims(s)) {
        if (s->train_input != TPU_PER_HOST_V2)
            return tpu__fail(d, TPU_EINVAL, "input_partition_dims is only supported in "
                             "PER_HOST_V2 mode (TPUConfig), and per_host_input_for_training is "
                             "%s; set per_host_input_for_training to PER_HOST_V2 or leave "
                             "input_partition_dims out", tpu__shard_input_name(s->train_input));
        if (cpr == 1)
            return tpu__fail(d, TPU_EINVAL, "input_partition_dims requires setting "
                             "num_cores_per_replica (TPUConfig), and it is %u: with one core "
                             "per replica there is nothing to split over; set "
                             "num_cores_per_replica to the product of the partition dims "
                             "(2, 4, ... 128) or leave input_partition_dims out",
                             s->num_cores_per_replica);
    }
    if (!power_of_two(cpr) || cpr > 128) {
        const uint32_t lo = cpr > 128 ? 128 : pow2_below(cpr);
        char fix[64];
        if (cpr > 128 || lo == cpr)
            snprintf(fix, sizeof fix, "use %u", lo);
        else
            snprintf(fix, sizeof fix, "use %u or %u", lo, 2 * lo);
        return tpu__fail(d, TPU_EINVAL, "num_cores_per_replica must be 1, 2, 4, 8, 16, 32, 64 "
                         "or 128 (TPUConfig); got %u; %s", cpr, fix);
    }
    if (s->train_input == TPU_PER_SHARD_V1 && cpr > 1)
        return tpu__fail(d, TPU_EINVAL, "model parallelism (num_cores_per_replica %u) only "
                         "supports per host input for training, and per_host_input_for_training "
                         "is PER_SHARD_V1 (TPUEstimator refuses it); use PER_HOST_V2 (or "
                         "PER_HOST_V1, BROADCAST), or num_cores_per_replica 1", cpr);
    if (s->global_batch == 0)
        return tpu__fail(d, TPU_EINVAL, "%s is not set; %s needs the global batch size%s",
                         batch_field[s->mode], mode_words[s->mode],
                         s->mode == TPU_MODE_TRAIN && s->train_input == TPU_BROADCAST
                             ? " (BROADCAST: any size, every replica gets all of it)"
                             : ", a multiple of the number of replicas");
    return 0;
}

/* "2 hosts x 4 chips x 2 cores" (hosts: with the hosts), "1 chip x 2 cores" (without). */
static void slice_text(const struct tpu_shard_spec *s, bool hosts, char *buf, size_t n)
{
    size_t at = 0;
    if (hosts)
        at = (size_t)snprintf(buf, n, "%u host%s x ", s->hosts, s->hosts == 1 ? "" : "s");
    snprintf(buf + at, n - at, "%u chip%s x %u core%s", s->chips_per_host,
             s->chips_per_host == 1 ? "" : "s", s->cores_per_chip,
             s->cores_per_chip == 1 ? "" : "s");
}

/* _validate_tpu_configuration's rules on the system: cores, replicas, hosts. */
static int check_system(const struct tpu_shard_spec *s, uint32_t cpr, uint32_t cores,
                        uint32_t cores_per_host, struct tpu_diag *d)
{
    char all[96], host[64];
    slice_text(s, true, all, sizeof all);
    slice_text(s, false, host, sizeof host);
    if (cpr > cores)
        return tpu__fail(d, TPU_EINVAL, "the num of cores required by the model parallelism, "
                         "num_cores_per_replica %u, is larger than the total num of TPU cores "
                         "in the system, %u (%s); use num_cores_per_replica %u or less, or "
                         "more hosts or chips", cpr, cores, all, pow2_below(cores));
    if (cores % cpr)
        return tpu__fail(d, TPU_EINVAL, "the %u cores of the system (%s) do not divide into "
                         "replicas of num_cores_per_replica %u; use num_cores_per_replica %u "
                         "(the largest power of two that divides %u), or a core count that %u "
                         "divides", cores, all, cpr, cores & (~cores + 1), cores, cpr);
    const uint32_t replicas = cores / cpr;
    if (s->num_shards && s->num_shards != replicas)
        return tpu__fail(d, TPU_EINVAL, "num_shards %u is not set correctly: the system has "
                         "%u cores and num_cores_per_replica is %u, so num_replicas is %u "
                         "(num_shards x num_cores_per_replica must be the total num of cores); "
                         "set num_shards to %u or leave it unset (0)", s->num_shards, cores, cpr,
                         replicas, replicas);
    if (cpr > cores_per_host && s->train_input != TPU_PER_HOST_V2)
        return tpu__fail(d, TPU_EINVAL, "except in PER_HOST_V2 mode, a replica must fit on one "
                         "host: num_cores_per_replica %u is more than the %u cores per host "
                         "(%s), and per_host_input_for_training is %s; use PER_HOST_V2, or "
                         "num_cores_per_replica %u or less", cpr, cores_per_host, host,
                         tpu__shard_input_name(s->train_input), pow2_below(cores_per_host));
    if (cpr <= cores_per_host && cores_per_host % cpr)
        return tpu__fail(d, TPU_EINVAL, "a host's %u cores (%s) do not hold a whole number of "
                         "replicas of %u cores, so a replica would straddle two hosts; use "
                         "num_cores_per_replica that divides %u, or chips and cores per host "
                         "that %u divides", cores_per_host, host, cpr, cores_per_host, cpr);
    if (cpr > cores_per_host && cpr % cores_per_host)
        return tpu__fail(d, TPU_EINVAL, "a replica of %u cores spans hosts of %u cores (%s) but "
                         "not a whole number of them; use chips and cores per host that divide "
                         "%u", cpr, cores_per_host, host, cpr);
    return 0;
}

/* The batch of the mode against the replicas and hosts. */
static int check_batch(const struct tpu_shard_spec *s, enum tpu__shard_feed feed,
                       uint32_t replicas, struct tpu_diag *d)
{
    const uint32_t g = s->global_batch;
    if (feed != TPU__FEED_BROADCAST && g % replicas) {
        /* the nearest multiples below and above; only the one above when none is below */
        const uint64_t lo = (uint64_t)g / replicas * replicas, hi = lo + replicas;
        char fix[96];
        if (lo)
            snprintf(fix, sizeof fix, "use %llu or %llu", (unsigned long long)lo,
                     (unsigned long long)hi);
        else
            snprintf(fix, sizeof fix, "use at least %llu (one example per replica)",
                     (unsigned long long)hi);
        return tpu__fail(d, TPU_EINVAL,
                         "%s %u must be divisible by the number of replicas (num_shards) %u, "
                         "since each replica takes the same share of the global batch%s; %s%s",
                         batch_field[s->mode], g, replicas,
                         feed == TPU__FEED_SLICED
                             ? " (SLICED: TPUEstimator would drop the rest silently)"
                             : "",
                         fix,
                         s->mode == TPU_MODE_TRAIN
                             ? ", or per_host_input_for_training BROADCAST (every replica gets "
                               "the whole batch)"
                             : "");
    }
    if (s->mode == TPU_MODE_EVAL && s->hosts > 1 &&
        !(feed == TPU__FEED_BROADCAST || feed == TPU__FEED_SLICED ||
          feed == TPU__FEED_PER_REPLICA))
        return tpu__fail(d, TPU_EINVAL, "evaluation on %u hosts is only supported with "
                         "per_host_input_for_training BROADCAST or PER_HOST_V2, or "
                         "eval_training_input_configuration SLICED (TPUEstimator.evaluate), and "
                         "per_host_input_for_training is %s with eval_training_input_"
                         "configuration PER_HOST_V1; use one of those, or one host", s->hosts,
                         tpu__shard_input_name(s->train_input));
    if (s->mode == TPU_MODE_PREDICT && s->hosts > 1 &&
        !(feed == TPU__FEED_BROADCAST || feed == TPU__FEED_SLICED ||
          (feed == TPU__FEED_PER_REPLICA && replicas == 1)))
        return tpu__fail(d, TPU_EINVAL, "prediction on %u hosts is only supported with "
                         "per_host_input_for_training BROADCAST, eval_training_input_"
                         "configuration SLICED, or PER_HOST_V2 with one replica "
                         "(TPUEstimator.predict), and it is %s with %u replicas; use BROADCAST "
                         "or SLICED, or one host", s->hosts,
                         tpu__shard_input_name(s->train_input), replicas);
    return 0;
}

/* The partition dims of each tensor against the replica and the tensor. */
static int check_dims(const struct tpu_shard_spec *s, enum tpu__shard_feed feed, uint32_t cpr,
                      uint32_t per_replica, struct tpu_diag *d)
{
    if (!any_dims(s))
        return 0;
    if (s->n_tensors && s->tensors[0].dims.rank == 0)
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims[0] (the features, tensor '%s') "
                         "must not be None when labels are partitioned, as TPUEstimator "
                         "requires; give the features' counts (e.g. [1, %u, 1, 1])",
                         s->tensors[0].name, cpr);
    if (feed == TPU__FEED_SLICED)
        return tpu__fail(d, TPU_EINVAL, "input_partition_dims with eval_training_input_"
                         "configuration SLICED: %s input is broadcast from host 0 through an "
                         "infeed that TPUEstimator does not partition (each replica's logical "
                         "core 0 would get the whole slice); use eval_training_input_"
                         "configuration PER_HOST_V1 (with PER_HOST_V2, one input_fn call per "
                         "replica, partitioned)", mode_words[s->mode]);
    for (uint32_t i = 0; i < s->n_tensors; i++) {
        const struct tpu_shard_tensor *t = &s->tensors[i];
        if (t->dims.rank == 0)
            continue;
        uint64_t product = 1;
        for (uint32_t a = 0; a < t->dims.rank; a++)
            product = product > UINT32_MAX ? product : product * t->dims.dims[a];
        if (product == 1)
            continue;
        char dt[96], st[160];
        tpu__shard_dims_text(&t->dims, dt, sizeof dt);
        tpu__shard_shape_text(per_replica, t, st, sizeof st);
        if (product != cpr) {
            char pt[40];
            if (product > UINT32_MAX)
                snprintf(pt, sizeof pt, "more than %u", UINT32_MAX);
            else
                snprintf(pt, sizeof pt, "%llu", (unsigned long long)product);
            return tpu__fail(d, TPU_EINVAL, "tensor '%s': the product of its input partition "
                             "dims %s is %s, and it should equal num_cores_per_replica %u "
                             "(each part goes to one core of the replica) or be 1 (the whole "
                             "tensor to logical core 0); change the counts so that they "
                             "multiply to %u", t->name, dt, pt, cpr, cpr);
        }
        if (t->dims.rank != t->rank + 1)
            return tpu__fail(d, TPU_EINVAL, "tensor '%s' of shape %s has %u dimensions (the "
                             "batch first), and its input partition dims %s have %u; give one "
                             "count per dimension of the tensor", t->name, st, t->rank + 1, dt,
                             t->dims.rank);
    }
    return 0;
}

void tpu_shard_spec_set_config(struct tpu_shard_spec *s, const struct tpu_run_config *c,
                               uint32_t hosts, uint32_t chips_per_host, uint32_t cores_per_chip,
                               enum tpu_mode mode)
{
    s->hosts = hosts ? hosts : 1;
    s->chips_per_host = chips_per_host;
    s->cores_per_chip = cores_per_chip;
    s->num_cores_per_replica = c->num_cores_per_replica ? c->num_cores_per_replica : 1;
    s->num_shards = c->num_shards;
    s->train_input = c->per_host_input_for_training;
    s->eval_input = c->eval_training_input_configuration;
    s->mode = mode;
    s->global_batch = mode == TPU_MODE_TRAIN  ? c->train_batch_size
                      : mode == TPU_MODE_EVAL ? c->eval_batch_size
                                              : c->predict_batch_size;
}

void tpu_shard_spec_set_dims(struct tpu_shard_spec *s, const struct tpu_run_config *c)
{
    for (uint32_t i = 0; i < s->n_tensors && i < TPU_SHARD_MAX_TENSORS; i++) {
        const uint32_t which = i == 0 ? 0 : 1;
        if (which < c->n_input_partition_dims)
            s->tensors[i].dims = c->input_partition_dims[which];
    }
}

int tpu_shard_plan_make(const struct tpu_shard_spec *s, struct tpu_shard_plan *out,
                        struct tpu_diag *d)
{
    memset(out, 0, sizeof *out);
    int rc = check_form(s, d);
    if (rc)
        return rc;
    const uint32_t cpr = s->num_cores_per_replica ? s->num_cores_per_replica : 1;
    const uint64_t cores64 = (uint64_t)s->hosts * s->chips_per_host * s->cores_per_chip;
    if (cores64 > (1u << 20))
        return tpu__fail(d, TPU_EINVAL, "a pod slice of %u hosts x %u chips x %u cores has %llu "
                         "cores; at most %u", s->hosts, s->chips_per_host, s->cores_per_chip,
                         (unsigned long long)cores64, 1u << 20);
    const uint32_t cores = (uint32_t)cores64, cores_per_host = cores / s->hosts;
    if ((rc = check_config(s, cpr, d)) || (rc = check_system(s, cpr, cores, cores_per_host, d)))
        return rc;
    const uint32_t replicas = cores / cpr;
    const enum tpu__shard_feed feed = tpu__shard_feed_of(s);
    if ((rc = check_batch(s, feed, replicas, d)))
        return rc;
    const uint32_t g = s->global_batch;
    const uint32_t per_replica = feed == TPU__FEED_BROADCAST ? g : g / replicas;
    if ((rc = check_dims(s, feed, cpr, per_replica, d)))
        return rc;

    const bool per_host = feed == TPU__FEED_PER_HOST;
    const bool once = feed == TPU__FEED_BROADCAST || feed == TPU__FEED_SLICED;
    const uint32_t n_calls = once ? 1 : per_host ? s->hosts : replicas;
    struct tpu_shard_call *calls = calloc(n_calls, sizeof *calls);
    if (!calls)
        return tpu__fail(d, TPU_ENOMEM, "out of memory for %u input_fn calls", n_calls);
    for (uint32_t i = 0; i < n_calls; i++) {
        struct tpu_shard_call *c = &calls[i];
        if (once) {
            c->host = 0;
            c->shard = 0;
            c->batch = g;
            c->first_replica = 0;
            c->n_replicas = replicas;
            c->broadcast = feed == TPU__FEED_BROADCAST;
            c->rows_each = per_replica;
        } else if (per_host) {
            /* a host's replicas are consecutive: its cores hold whole replicas */
            c->host = i;
            c->shard = i;
            c->batch = g / s->hosts;
            c->n_replicas = replicas / s->hosts;
            c->first_replica = i * c->n_replicas;
            c->rows_each = per_replica;
        } else {
            /* one call per replica, on the host of its logical core 0 */
            c->host = i * cpr / cores_per_host;
            c->shard = i;
            c->batch = per_replica;
            c->first_replica = i;
            c->n_replicas = 1;
            c->rows_each = per_replica;
        }
    }
    out->n_cores = cores;
    out->n_replicas = replicas;
    out->cores_per_replica = cpr;
    out->cores_per_host = cores_per_host;
    out->hosts = s->hosts;
    out->per_replica_batch = per_replica;
    out->n_calls = n_calls;
    out->calls = calls;
    return 0;
}

void tpu_shard_plan_free(struct tpu_shard_plan *p)
{
    if (!p)
        return;
    free(p->calls);
    p->calls = NULL;
    p->n_calls = 0;
}
