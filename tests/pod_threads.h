/* A pod slice's hosts as threads of one process: the in-process twin of host/mpi, used by the
 * tests.
 *
 * host/mpi links the parts of a pod (device.h's struct tpu_pod_link) and its hosts
 * (runtime.h's struct tpu_host_group) over MPI, one rank per host. This module gives the
 * same two tables built on one mutex and condition variable, so that a test can run n part
 * devices and n estimators on n threads of one process and compare them with one device of
 * the whole pod, under ThreadSanitizer too. It is not a mock of MPI (the MPI runs are tested
 * on their own): it keeps the contracts of the two headers, with checks that make a misuse
 * fail loudly (a call whose size or kind differs between the parts of one round).
 *
 * The link: for each logical index `group`, max_u64 and bcast_last are rounds that every part
 * joins (the n-th arrival completes it); send_next queues a copy for part index + 1 (it never
 * blocks) and recv_prev waits for the oldest one from part index - 1. Rounds of different
 * groups are independent, so concurrent reduces of different k never mix. The host group's
 * allgather is a round of its own, on the callers' threads.
 *
 * Failure: the host group's abort(ctx, rc, d), or the link's (the same function: a device
 * part calls it when it is canceled during a run or a core fails), marks the pod failed with
 * "host R failed: <its message>"; every call blocked in any part or host, and every later
 * one, then returns TPU_ECANCELED with that sentence, so a fault test ends promptly on every
 * thread. */
#ifndef TPUSIM_TESTS_POD_THREADS_H
#define TPUSIM_TESTS_POD_THREADS_H

#include <stdint.h>

#include "tpusim/device.h"
#include "tpusim/runtime.h"

struct pod_threads;

/* A pod of n hosts (1 .. 4096): n links (parts 0 .. n-1) and n host groups (ranks
 * 0 .. n-1). Returns 0 or TPU_ENOMEM (TPU_EINVAL for n out of range). The caller owns *out
 * (pod_threads_destroy). */
int pod_threads_create(uint32_t n, struct pod_threads **out);
/* Frees the pod; no thread may be in one of its calls. Accepts NULL. */
void pod_threads_destroy(struct pod_threads *pt);
/* The link of part `index` (settings.pod); owned by pt, valid until it is destroyed. */
const struct tpu_pod_link *pod_threads_link(struct pod_threads *pt, uint32_t index);
/* The host group of host `rank` (run config's host_group); owned by pt. */
const struct tpu_host_group *pod_threads_group(struct pod_threads *pt, uint32_t rank);
/* fn(args[i]) on n threads, i = 0 .. n-1; joins them all. */
void pod_threads_run(struct pod_threads *pt, void *(*fn)(void *), void *const *args);

#endif
