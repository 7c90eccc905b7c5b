/* `mpirun -np N tpusim train --hosts N ...` (and evaluate, predict): the tpusim command as
 * one rank of a pod slice whose hosts are MPI ranks (host/mpi, include/tpusim/mpi.h). Rank h
 * simulates host h: a device of its host's chips linked to the other ranks' (settings.pod),
 * and an estimator with the same run configuration as every rank plus the rank's host group;
 * the values, losses, cycles and predictions are those of one process simulating the N hosts
 * (tpusim train --hosts N), bit for bit. This file is what differs for the command line:
 *
 *   start     MPI is initialised only in a process Open MPI's mpirun started
 *             (OMPI_COMM_WORLD_SIZE); a world of one rank runs any command as usual. A
 *             process another launcher started as one of several (srun, a PMIx or MPICH
 *             launcher: PMIX_RANK, PMI_SIZE, SLURM_STEP_NUM_TASKS or SLURM_NTASKS in a step)
 *             is refused: it would run the whole job alone. On several ranks the ranks'
 *             command lines are compared first (a mismatch names the first differing
 *             argument), and only train, evaluate and predict are taken.
 *   output    rank 0 prints everything; the other ranks print nothing but their errors,
 *             each line after "rank h: " (their stdout and stderr go to /dev/null, their
 *             errors to the stderr mpirun gave them). Rank 0's errors carry "rank 0: ".
 *   agreement every rank parses the same options and checks what cannot work on ranks
 *             (tpu__cli_train_ranks_agree); the ranks then gather their outcomes
 *             (tpu__cli_ranks_outcome), so a refusal ends every rank cleanly with the
 *             refusing rank's message and code. The command agrees again after its setup
 *             (data, device, estimator), on the data (its rows and a hash of them), and
 *             after its passes: errors are kept, not printed, until then, so a failure every
 *             rank shares (a batch the data cannot fill, a missing --data) is printed once,
 *             by rank 0, and every rank ends cleanly with its code.
 *   errors    a failure of some ranks only ends the whole job (MPI_Abort: mpirun ends the
 *             others), in bounded time: the runtime's pass failures through the host
 *             group's abort (printed first), the command's own at the next agreement.
 *             A rank that dies (kill -9) is seen by mpirun, which ends the others. The last
 *             checkpoint stays loadable (checkpoints are written atomically by rank 0).
 *
 * A tpusim built without MPI (-Dmpi=disabled, or no libopenmpi-dev) refuses a world of
 * several ranks: each would run the whole job alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "tpusim/config.h"
#ifdef TPUSIM_HAVE_MPI
#include "tpusim/mpi.h"
#endif

/* A launcher other than Open MPI's mpirun started this process as one of several: its
 * variable and value in what ("PMI_SIZE=4"); false when none did. */
static bool foreign_launcher(char *what, size_t size)
{
    static const char *const sizes[] = {"PMI_SIZE", "SLURM_STEP_NUM_TASKS", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const char *v = getenv(sizes[i]);
        if (v && strtoul(v, NULL, 10) > 1) {
            snprintf(what, size, "%s=%.16s", sizes[i], v);
            return true;
        }
    }
    /* SLURM_NTASKS is also set in a batch script's own environment (one process): only a
     * task of a step (SLURM_STEP_ID, set by srun) is one of several */
    const char *nt = getenv("SLURM_NTASKS");
    if (nt && strtoul(nt, NULL, 10) > 1 && getenv("SLURM_STEP_ID")) {
        snprintf(what, size, "SLURM_NTASKS=%.16s", nt);
        return true;
    }
    /* a PMIx launcher gives every process its rank, but not the world's size */
    const char *pr = getenv("PMIX_RANK");
    if (pr && *pr) {
        snprintf(what, size, "PMIX_RANK=%.16s", pr);
        return true;
    }
    return false;
}

int tpu__cli_other_launcher(int argc, char **argv)
{
    char what[64];
    if (getenv("OMPI_COMM_WORLD_SIZE") || !foreign_launcher(what, sizeof what))
        return 0;
    return tpu__cli_error(argc > 1 ? argv[1] : "", TPU_CLI_USAGE, "this process was started "
                          "by a parallel launcher that is not Open MPI's mpirun (%s in its "
                          "environment), so each of its processes would run the whole job "
                          "alone and write the same --model-dir; tpusim runs the hosts of a "
                          "pod slice as ranks only under Open MPI's mpirun (mpirun -np N "
                          "tpusim train --hosts N ...%s), or run one process without the "
                          "launcher (--hosts N simulates N hosts in it)", what,
#ifdef TPUSIM_HAVE_MPI
                          ""
#else
                          ", with a tpusim built with MPI: meson configure -Dmpi=enabled"
#endif
                          );
}

uint32_t tpu__cli_mpirun_world_size(void)
{
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || errno || n == 0 || n > UINT32_MAX)
        return 1; /* mpirun set it, unreadably: one rank is the safe reading */
    return (uint32_t)n;
}

int tpu__cli_group_sum_u64(const struct tpu_host_group *g, const uint64_t *mine, uint64_t *sum,
                           uint32_t n, struct tpu_diag *d)
{
    uint64_t *all = calloc((size_t)g->n * n, sizeof *all);
    if (!all) {
        /* the others are (or will be) in the allgather: end the job rather than skip it */
        d->code = TPU_ENOMEM;
        snprintf(d->msg, sizeof d->msg, "out of memory for %u ranks' %u sums", g->n, n);
        g->abort(g->ctx, TPU_ENOMEM, d);
        return TPU_ENOMEM; /* an abort that returns (the tests' in-process group) */
    }
    int rc = g->allgather(g->ctx, mine, (size_t)n * sizeof *mine, all, d);
    if (!rc) {
        for (uint32_t k = 0; k < n; k++)
            sum[k] = 0;
        for (uint32_t h = 0; h < g->n; h++)
            for (uint32_t k = 0; k < n; k++)
                sum[k] += all[(size_t)h * n + k];
    }
    free(all);
    return rc;
}

#ifndef TPUSIM_HAVE_MPI

int tpu__cli_ranks_outcome(struct tpu__cli_pod *pod, int rc)
{
    (void)pod;
    return rc;
}

int tpu__cli_main_ranks(int argc, char **argv, int (*dispatch)(int argc, char **argv))
{
    const uint32_t size = tpu__cli_mpirun_world_size();
    if (size <= 1)
        return dispatch(argc, argv);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %.8s: ", rank ? rank : "?");
    tpu__cli_set_error_output(stderr, prefix);
    return tpu__cli_error(argc > 1 ? argv[1] : "", TPU_CLI_USAGE, "mpirun started %u ranks, "
                          "and this tpusim was built without MPI, so each rank would run the "
                          "whole job alone; rebuild it with MPI (apt-get install "
                          "libopenmpi-dev, then meson configure -Dmpi=enabled) to run the "
                          "hosts of a pod slice as ranks, or run one process without mpirun "
                          "(--hosts N simulates N hosts in it)", size);
}

int tpu__cli_train_ranks_agree(const struct train_opts *o, struct tpu__cli_pod *pod, int rc)
{
    (void)o;
    (void)pod;
    return rc;
}

#else

/* ---- the options on ranks ---------------------------------------------------------------- */

/* What cannot work when each host is a process of its own, with the reason and the fix. */
static int check_rank_options(const struct train_opts *o, const struct tpu__cli_pod *pod)
{
    const char *cmd = o->cmd;
    const uint32_t hosts = o->rc.num_hosts ? o->rc.num_hosts : 1;
    if (hosts != pod->size)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--hosts %u under mpirun with %u ranks: "
                              "each rank is one host of the pod slice, so --hosts must be the "
                              "number of ranks; give --hosts %u, or start %u ranks (mpirun "
                              "-np %u)", hosts, pod->size, pod->size, hosts, hosts);
    if (o->check_equivalence || o->equivalence_free_running)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--check-equivalence compares the sharded "
                              "run with one core inside one process; on %u ranks there is no "
                              "one process holding the pod: run it without mpirun (with "
                              "--hosts %u, the same sharding)", pod->size, pod->size);
    if (o->backend == TRAIN_BACKEND_SYSTEMC)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--backend systemc simulates a whole device "
                              "in one process; a pod's part on a rank runs on the native chip "
                              "only: use --backend native on ranks (the same values and "
                              "cycles), or run --backend systemc without mpirun");
    struct tpu_chip_config chip;
    struct tpu_diag d = {0};
    const uint32_t cpr = o->rc.num_cores_per_replica ? o->rc.num_cores_per_replica : 1;
    if (tpu_config_load(o->chip, &chip, &d) == 0) { /* else the command says why */
        const uint64_t chips = o->chips ? o->chips : chip.chips_per_host;
        const uint64_t host_cores = chips * chip.cores_per_chip;
        if (cpr > host_cores)
            return tpu__cli_error(cmd, TPU_CLI_USAGE, "--cores-per-replica %u is more than "
                                  "a host's %llu cores (%llu chips x %u cores of '%s'): on "
                                  "ranks a replica's cores must be on one host, since the pod "
                                  "link between the ranks carries only the all-reduce over the "
                                  "replicas; give --chips %llu or more, or a smaller "
                                  "--cores-per-replica, or run without mpirun (one process "
                                  "with --hosts %u)", cpr, (unsigned long long)host_cores,
                                  (unsigned long long)chips, chip.cores_per_chip, chip.name,
                                  (unsigned long long)((cpr + chip.cores_per_chip - 1) /
                                                       chip.cores_per_chip), pod->size);
    }
    if (o->rc.host_time == TPU_HOST_TIME_MEASURED)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--host-time measured: each rank would "
                              "measure its own host phases, and the ranks must agree on every "
                              "loop's figures (and on the loop sizes that --iterations-per-loop "
                              "auto or a time derive from them); use --host-time modeled (the "
                              "default) on ranks, or measure without mpirun");
    return 0;
}

/* One rank's outcome as the ranks gather it. */
struct outcome {
    int32_t rc;
    char line[TPU__CLI_ERROR_LINE_MAX];
};

int tpu__cli_ranks_outcome(struct tpu__cli_pod *pod, int rc)
{
    struct tpu_mpi *m = pod->mpi;
    const struct tpu_host_group *g = pod->group;
    struct outcome *mine = calloc(1, sizeof *mine), *all = calloc(pod->size, sizeof *all);
    struct tpu_diag d = {0};
    if (!mine || !all)
        tpu_mpi_abort(m, tpu__cli_error_print("train", TPU_CLI_FAIL, "out of memory for %u "
                                              "ranks' outcomes", pod->size));
    mine->rc = rc;
    if (rc)
        snprintf(mine->line, sizeof mine->line, "%s", pod->error_line);
    pod->error_line[0] = '\0';
    if (g->allgather(g->ctx, mine, sizeof *mine, all, &d))
        tpu_mpi_abort(m, tpu__cli_error_print("train", TPU_CLI_FAIL, "%s", d.msg));
    free(mine);
    int first = 0;
    bool shared = true;
    for (uint32_t h = 0; h < pod->size; h++) {
        if (!first)
            first = all[h].rc;
        shared = shared && all[h].rc == all[0].rc && !strcmp(all[h].line, all[0].line);
    }
    if (!first) {
        free(all);
        return 0;
    }
    if (shared) {
        /* every rank failed the same way: said once */
        if (pod->rank == 0 && all[0].line[0])
            tpu__cli_error_line(all[0].line);
        free(all);
        pod->shared_failure = true;
        return first;
    }
    if (rc && all[pod->rank].line[0])
        tpu__cli_error_line(all[pod->rank].line);
    free(all);
    if (!pod->agreed)
        return first; /* before any run: every rank ends cleanly, the refusing rank said why */
    /* every rank has printed before any of them aborts (the abort may end a rank at once) */
    uint8_t said = 1, *heard = calloc(pod->size, 1);
    if (heard)
        g->allgather(g->ctx, &said, 1, heard, &d);
    free(heard);
    tpu_mpi_abort(m, first);
    return first;
}

int tpu__cli_train_ranks_agree(const struct train_opts *o, struct tpu__cli_pod *pod, int rc)
{
    struct tpu_mpi *m = pod->mpi;
    struct tpu_diag d = {0};
    if (!rc)
        rc = check_rank_options(o, pod);
    if ((rc = tpu__cli_ranks_outcome(pod, rc)))
        return rc;
    pod->agreed = true;
    const uint32_t cpr = o->rc.num_cores_per_replica ? o->rc.num_cores_per_replica : 1;
    if (tpu_mpi_pod_link(m, cpr, &pod->link, &d))
        return tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg);
    return 0;
}

/* ---- start ------------------------------------------------------------------------------- */

/* Rank 0 keeps its stdout and stderr; the others' go to /dev/null, and their errors to the
 * stderr they had. Every rank's errors carry its rank. */
static int setup_output(const struct tpu__cli_pod *pod)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %u: ", pod->rank);
    if (pod->rank == 0) {
        tpu__cli_set_error_output(stderr, prefix);
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    int err_fd = dup(STDERR_FILENO), null_fd = open("/dev/null", O_WRONLY);
    FILE *err = err_fd >= 0 ? fdopen(err_fd, "w") : NULL;
    if (!err || null_fd < 0 || dup2(null_fd, STDOUT_FILENO) < 0 ||
        dup2(null_fd, STDERR_FILENO) < 0) {
        fprintf(err ? err : stderr, "%stpusim: error: cannot send rank %u's output to "
                "/dev/null: %s\n", prefix, pod->rank, strerror(errno));
        return TPU_CLI_FAIL;
    }
    close(null_fd);
    setvbuf(err, NULL, _IOLBF, 0);
    tpu__cli_set_error_output(err, prefix); /* the process's error stream from now on */
    return 0;
}

/* The ranks' command lines (after the program's name) must be the same; rank 0 names the
 * first argument that differs. 0, or the exit code on every rank. */
static int compare_argv(const struct tpu__cli_pod *pod, int argc, char **argv)
{
    const struct tpu_host_group *g = pod->group;
    struct tpu_diag d = {0};
    uint64_t len = 0;
    for (int i = 1; i < argc; i++)
        len += strlen(argv[i]) + 1;
    uint64_t *lens = calloc(pod->size, sizeof *lens);
    if (!lens || g->allgather(g->ctx, &len, sizeof len, lens, &d))
        return tpu__cli_error_print("train", TPU_CLI_FAIL, "comparing the ranks' command lines: %s",
                              lens ? d.msg : "out of memory");
    uint64_t max = 0;
    for (uint32_t h = 0; h < pod->size; h++)
        max = lens[h] > max ? lens[h] : max;
    free(lens);
    max++; /* room for a final NUL on every rank */
    char *mine = calloc(max, 1), *all = calloc(pod->size, max);
    if (!mine || !all) {
        free(mine);
        free(all);
        return tpu__cli_error_print("train", TPU_CLI_FAIL, "out of memory for %u command lines of "
                              "%llu bytes", pod->size, (unsigned long long)max);
    }
    for (int i = 1, off = 0; i < argc; i++) {
        memcpy(mine + off, argv[i], strlen(argv[i]) + 1);
        off += (int)strlen(argv[i]) + 1;
    }
    int rc = g->allgather(g->ctx, mine, max, all, &d);
    if (rc) {
        free(mine);
        free(all);
        return tpu__cli_error_print("train", TPU_CLI_FAIL, "comparing the ranks' command lines: %s",
                              d.msg);
    }
    /* rank h's arguments are NUL-ended strings up to the first empty one (past its end) */
    const char *base = all;
    for (uint32_t h = 1; h < pod->size && !rc; h++) {
        const char *a = base, *b = all + (size_t)h * max, *a_end = base + max,
                   *b_end = b + max;
        for (unsigned i = 1;; i++) {
            const bool a_has = a < a_end && *a, b_has = b < b_end && *b;
            if (!a_has && !b_has)
                break;
            if (a_has && b_has && !strcmp(a, b)) {
                a += strlen(a) + 1;
                b += strlen(b) + 1;
                continue;
            }
            rc = TPU_CLI_USAGE;
            if (pod->rank == 0)
                tpu__cli_error_print("train", rc, "rank %u's command line differs from rank 0's at "
                               "argument %u: %s%s%s where rank 0 has %s%s%s; every rank is one "
                               "host of the same pod slice: run every rank with the same "
                               "command line (mpirun -np %u tpusim train ...)", h, i,
                               b_has ? "'" : "", b_has ? b : "nothing", b_has ? "'" : "",
                               a_has ? "'" : "", a_has ? a : "nothing", a_has ? "'" : "",
                               pod->size);
            break;
        }
    }
    free(mine);
    free(all);
    return rc;
}

/* The pass failed on this rank (the runtime's first error, on the thread that hit it): say
 * so before host/mpi ends the job. */
static void on_abort(void *ctx, int rc, const struct tpu_diag *d)
{
    (void)ctx;
    (void)rc;
    tpu__cli_error_print("train", TPU_CLI_FAIL, "%s", d && d->msg[0] ? d->msg : "the run "
                         "failed");
}

int tpu__cli_main_ranks(int argc, char **argv, int (*dispatch)(int argc, char **argv))
{
    struct tpu_mpi *m = NULL;
    struct tpu_diag d = {0};
    if (tpu_mpi_init(&argc, &argv, &m, &d)) {
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        fprintf(stderr, "rank %.8s: tpusim: error: MPI did not start: %s\n", rank ? rank : "?",
                d.msg);
        return TPU_CLI_FAIL;
    }
    int rc;
    if (tpu_mpi_size(m) == 1) {
        rc = dispatch(argc, argv);
    } else {
        struct tpu__cli_pod pod = {.rank = tpu_mpi_rank(m), .size = tpu_mpi_size(m), .mpi = m,
                                   .group = tpu_mpi_host_group(m)};
        tpu_mpi_on_abort(m, on_abort, &pod);
        if ((rc = setup_output(&pod)))
            tpu_mpi_abort(m, rc); /* the others would wait for this rank's command line */
        /* errors are kept until the ranks agree on their outcomes (tpu__cli_ranks_outcome) */
        tpu__cli_set_error_capture(pod.error_line, sizeof pod.error_line);
        if (!(rc = compare_argv(&pod, argc, argv))) {
            if (argc < 2 || (strcmp(argv[1], "train") && strcmp(argv[1], "evaluate") &&
                             strcmp(argv[1], "predict")))
                rc = pod.rank ? TPU_CLI_USAGE
                     : tpu__cli_error_print(argc > 1 ? argv[1] : "", TPU_CLI_USAGE, "'tpusim"
                                            "%s%s' on %u MPI ranks: only 'tpusim train', "
                                            "'tpusim evaluate' and 'tpusim predict' run the "
                                            "hosts of a pod slice as ranks (mpirun -np %u "
                                            "tpusim train --hosts %u ...); run it without "
                                            "mpirun (--hosts N simulates N hosts in one "
                                            "process)",
                                            argc > 1 ? " " : "", argc > 1 ? argv[1] : "",
                                            pod.size, pod.size, pod.size);
            else
                rc = tpu__cli_train_on(argc - 1, argv + 1, &pod);
        }
        /* an error after the agreement that was not agreed on: the others may wait in a
         * collective for this rank */
        if (rc && pod.agreed && !pod.shared_failure) {
            if (pod.error_line[0])
                tpu__cli_error_line(pod.error_line);
            tpu_mpi_abort(m, rc);
        }
        tpu__cli_set_error_capture(NULL, 0);
    }
    fflush(stdout);
    if (tpu_mpi_finalize(&m, &d) && !rc)
        rc = tpu__cli_error_print("train", TPU_CLI_FAIL, "%s", d.msg);
    return rc;
}

#endif
