/* The hosts of a pod slice as MPI ranks (host/mpi, Open MPI; built with -Dmpi=enabled).
 *
 * `mpirun -np N prog` starts N processes; each is one host of the pod slice. This module
 * gives each of them the two things the simulator needs to run its host's part of the pod:
 * the pod link of its device (device.h's struct tpu_pod_link: the cross-host all-reduce's
 * max, chain and broadcast) and the host group of its estimator (runtime.h's struct
 * tpu_host_group: the loop boundary's allgather, and the abort that ends every rank when one
 * fails). The values cross MPI; the time the simulated interconnect takes is the device's
 * business, never MPI's wall time.
 *
 * Communicators: one MPI_Comm_dup of the world for each logical index k of the link (a
 * reduce of index k runs on a worker thread while one of another index may run on another,
 * so their messages must never match each other's), and one for the host group. MPI runs
 * with MPI_THREAD_MULTIPLE: the device's worker threads call the link concurrently.
 *
 * The header declares no MPI type and compiles in every build; only a -Dmpi=enabled build
 * defines its functions (the tpusim command checks TPUSIM_HAVE_MPI). */
#ifndef TPUSIM_MPI_H
#define TPUSIM_MPI_H

#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/error.h"
#include "tpusim/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest logical index count of a link: TPUConfig's largest num_cores_per_replica. */
#define TPU_MPI_MAX_GROUPS 128u

struct tpu_mpi;

/* Initialises MPI for this process (MPI_Init_thread with MPI_THREAD_MULTIPLE) from main's
 * argc and argv. Call it once, from main's thread, before any other thread exists; only in a
 * process that mpirun started. Refuses an MPI library that cannot give
 * MPI_THREAD_MULTIPLE (TPU_EUNSUPPORTED, with the level it gave) after finalizing it. The
 * caller owns *out: tpu_mpi_finalize, or tpu_mpi_abort. */
int tpu_mpi_init(int *argc, char ***argv, struct tpu_mpi **out, struct tpu_diag *d);

/* This process's rank in the world, and the world's size (mpirun -np). */
uint32_t tpu_mpi_rank(const struct tpu_mpi *m);
uint32_t tpu_mpi_size(const struct tpu_mpi *m);

/* What the host group's abort (below) calls first, on the thread that failed, with the
 * pass's error: say, print it. It need not return; if it does, the job is aborted with exit
 * code 1. Set it before any run (NULL: nothing but the abort). ctx is borrowed. */
void tpu_mpi_on_abort(struct tpu_mpi *m, void (*fn)(void *ctx, int rc, const struct tpu_diag *d),
                      void *ctx);

/* The pod link of this rank's device: parts = the world size, index = the rank, logical
 * indices 0 .. groups - 1 (groups 1 .. TPU_MPI_MAX_GROUPS: the device's cores per replica),
 * each on a communicator of its own. Collective: every rank calls it at the same point with
 * the same groups (a later call with more groups adds communicators). The link stays owned
 * by m and valid until tpu_mpi_finalize. */
int tpu_mpi_pod_link(struct tpu_mpi *m, uint32_t groups, const struct tpu_pod_link **out,
                     struct tpu_diag *d);

/* The host group of this rank's estimator: n = the world size, rank = this rank. Its
 * allgather uses a communicator of its own; its abort calls the function of tpu_mpi_on_abort,
 * then ends the whole job (MPI_Abort), so no rank waits on one that failed. Owned by m,
 * valid until tpu_mpi_finalize. */
const struct tpu_host_group *tpu_mpi_host_group(struct tpu_mpi *m);

/* Ends every rank of the job now (MPI_Abort) with exit code `code`. Does not return. */
void tpu_mpi_abort(struct tpu_mpi *m, int code) __attribute__((noreturn));

/* Waits for every rank (MPI_Finalize is collective), frees the communicators and m, and
 * NULLs *m. Accepts NULL and a NULL *m. Returns 0, or TPU_EIO with a sentence in d. */
int tpu_mpi_finalize(struct tpu_mpi **m, struct tpu_diag *d);

#ifdef __cplusplus
}
#endif
#endif
