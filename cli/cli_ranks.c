/* `mpirun -np N tpusim train --hosts N ...`: the tpusim command as one rank of a pod slice
 * whose hosts are MPI ranks (host/mpi, include/tpusim/mpi.h). Rank h simulates host h: a
 * device of its host's chips linked to the other ranks' (settings.pod), and an estimator
 * with the same run configuration as every rank plus the rank's host group; the values,
 * losses and cycles are those of one process simulating the N hosts (tpusim train --hosts N),
 * bit for bit. This file is what differs for the command line:
 *
 *   start     MPI is initialised only in a process mpirun started (OMPI_COMM_WORLD_SIZE);
 *             a world of one rank runs any command as usual. On several ranks the ranks'
 *             command lines are compared first (a mismatch names the first differing
 *             argument), and only train is taken.
 *   output    rank 0 prints everything; the other ranks print nothing but their errors,
 *             each line after "rank h: " (their stdout and stderr go to /dev/null, their
 *             errors to the stderr mpirun gave them). Rank 0's errors carry "rank 0: ".
 *   agreement every rank parses the same options and checks what cannot work on ranks
 *             (tpu__cli_train_ranks_agree); the ranks then gather their outcomes, so a
 *             refusal ends every rank cleanly with the refusing rank's message and code.
 *   errors    after the agreement, any rank's error ends the whole job (MPI_Abort: mpirun
 *             ends the others), in bounded time: the runtime's pass failures through the
 *             host group's abort (printed first), the command's own through its exit code.
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
#ifdef TPUSIM_HAVE_MPI
#include "tpusim/mpi.h"
#endif

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

#ifndef TPUSIM_HAVE_MPI

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
    if (o->rc.host_time == TPU_HOST_TIME_MEASURED)
        return tpu__cli_error(cmd, TPU_CLI_USAGE, "--host-time measured: each rank would "
                              "measure its own host phases, and the ranks must agree on every "
                              "loop's figures (and on the loop sizes that --iterations-per-loop "
                              "auto or a time derive from them); use --host-time modeled (the "
                              "default) on ranks, or measure without mpirun");
    return 0;
}

int tpu__cli_train_ranks_agree(const struct train_opts *o, struct tpu__cli_pod *pod, int rc)
{
    struct tpu_mpi *m = pod->mpi;
    if (!rc)
        rc = check_rank_options(o, pod);
    const struct tpu_host_group *g = pod->group;
    int32_t mine = rc, *all = calloc(pod->size, sizeof *all);
    struct tpu_diag d = {0};
    if (!all)
        tpu_mpi_abort(m, tpu__cli_error(o->cmd, TPU_CLI_FAIL, "out of memory for %u ranks' "
                                        "outcomes", pod->size));
    if (g->allgather(g->ctx, &mine, sizeof mine, all, &d))
        tpu_mpi_abort(m, tpu__cli_error(o->cmd, TPU_CLI_FAIL, "%s", d.msg));
    int first = 0;
    for (uint32_t h = 0; h < pod->size && !first; h++)
        first = all[h];
    free(all);
    if (rc || first)
        return rc ? rc : first; /* the refusing rank said why */
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
        return tpu__cli_error("train", TPU_CLI_FAIL, "comparing the ranks' command lines: %s",
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
        return tpu__cli_error("train", TPU_CLI_FAIL, "out of memory for %u command lines of "
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
        return tpu__cli_error("train", TPU_CLI_FAIL, "comparing the ranks' command lines: %s",
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
                tpu__cli_error("train", rc, "rank %u's command line differs from rank 0's at "
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
    tpu__cli_error("train", TPU_CLI_FAIL, "%s", d && d->msg[0] ? d->msg : "the run failed");
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
        if (!(rc = compare_argv(&pod, argc, argv))) {
            if (argc < 2 || strcmp(argv[1], "train"))
                rc = pod.rank ? TPU_CLI_USAGE
                     : tpu__cli_error(argc > 1 ? argv[1] : "", TPU_CLI_USAGE, "'tpusim%s%s' "
                                      "on %u MPI ranks: only 'tpusim train' runs the hosts of "
                                      "a pod slice as ranks (mpirun -np %u tpusim train "
                                      "--hosts %u ...); run it without mpirun (--hosts N "
                                      "simulates N hosts in one process)", argc > 1 ? " " : "",
                                      argc > 1 ? argv[1] : "", pod.size, pod.size, pod.size);
            else
                rc = tpu__cli_train_on(argc - 1, argv + 1, &pod);
        }
        if (rc && pod.agreed)
            tpu_mpi_abort(m, rc); /* the others may wait in a collective for this rank */
    }
    fflush(stdout);
    if (tpu_mpi_finalize(&m, &d) && !rc)
        rc = tpu__cli_error("train", TPU_CLI_FAIL, "%s", d.msg);
    return rc;
}

#endif
