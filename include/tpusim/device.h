/* The device API: the one way the host reaches a simulated chip.
 *
 * A device is the chips one host drives (chips_per_host of a configuration, or as many as
 * asked), each with its cores. The host loads one verified program (program.h), writes
 * parameters, feeds the per-core infeed queues, launches the program on every core, and
 * drains the outfeed queues. A launch runs the program's loop as many times as its loop
 * variable says, without the host.
 *
 * Layers. The device API is a seam between the host and whatever simulates the chip:
 *
 *   host runtime (host/), CLI, tests
 *     -> device API (this header; sim/device/device.c): checks every argument, owns the
 *        loaded program, then makes one call into the backend
 *          -> backend (struct tpu_device_backend, settings.backend):
 *               native C chip (sim/chip/, the default) | the SystemC/TLM-2.0 model (systemc.h)
 *                 -> the native chip's matrix unit (struct tpu_mxu_provider, settings.mxu):
 *                      built-in (gemm.h, mxu.h) | the Verilated RTL array (rtl/)
 *
 * A backend sees only arguments the device API has checked, so every backend gives the same
 * errors for the same misuse, and a new backend plugs in without touching the host runtime.
 *
 * Threads. tpu_device_run blocks the caller while the cores run on the device's worker
 * threads. Other host threads may meanwhile push infeed and pop outfeed; those calls block
 * (in real time) while a queue is full or empty, exactly as a core does. tpu_device_cancel,
 * callable from any thread, ends a run promptly: every blocked call returns TPU_ECANCELED.
 * An error inside a core (a label out of range, say) cancels the run the same way and is
 * what tpu_device_run returns.
 *
 * Two clocks. Every core keeps its own cycle count. Host-side calls that move data take the
 * host's time expressed in device cycles (`host_cycle`): the runtime decides what the host's
 * time is (measured or modeled); the device never reads a wall clock, so device time is a
 * deterministic function of the program, the data sizes and the host_cycle arguments, for
 * any number of worker threads.
 *
 * Timing model of the native chip (sim/chip/timing.c documents every formula): per core an
 * in-order scoreboard over units; an op starts when its inputs are ready and its units are
 * free. Units: the matrix units (MXU; the core's MXUs work on one matmul together), the
 * vector unit (VPU), DMA between HBM and on-chip memory, the infeed and outfeed ports on the
 * host link, and the interconnect (ICI). Params live in HBM and stream through on-chip
 * memory; temps live in on-chip memory while they fit. */
#ifndef TPUSIM_DEVICE_H
#define TPUSIM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpusim/bf16.h"
#include "tpusim/config.h"
#include "tpusim/error.h"
#include "tpusim/mxu.h"
#include "tpusim/program.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The units of a core, for counters and the timeline. */
#define TPU_UNIT_TABLE(X)                                                                      \
    X(MXU, "mxu")                                                                              \
    X(VPU, "vpu")                                                                              \
    X(DMA, "dma")                                                                              \
    X(INFEED, "infeed")                                                                        \
    X(OUTFEED, "outfeed")                                                                      \
    X(ICI, "ici")                                                                              \
    X(CTRL, "ctrl")

enum tpu_unit {
#define TPU__UNIT_ENUM(e, name) TPU_UNIT_##e,
    TPU_UNIT_TABLE(TPU__UNIT_ENUM)
#undef TPU__UNIT_ENUM
        TPU_UNIT_COUNT
};

/* Why a core waited. */
#define TPU_STALL_TABLE(X)                                                                     \
    X(INFEED_EMPTY, "infeed_empty")   /* an infeed op waited for data from the host */       \
    X(OUTFEED_FULL, "outfeed_full")   /* an outfeed op waited for the host to drain */       \
    X(SYNC, "sync")                   /* a collective waited for the other cores */          \
    X(MEMORY, "memory")               /* compute waited for operands from HBM */

enum tpu_stall {
#define TPU__STALL_ENUM(e, name) TPU_STALL_##e,
    TPU_STALL_TABLE(TPU__STALL_ENUM)
#undef TPU__STALL_ENUM
        TPU_STALL_COUNT
};

const char *tpu_unit_name(enum tpu_unit u);
const char *tpu_stall_name(enum tpu_stall s);

struct tpu_core_counters {
    uint64_t cycles;                   /* the core's clock */
    uint64_t busy[TPU_UNIT_COUNT];     /* cycles each unit was occupied */
    uint64_t stall[TPU_STALL_COUNT];   /* cycles the core's next op waited, by cause */
    uint64_t hbm_read_bytes, hbm_write_bytes;
    uint64_t infeed_bytes, outfeed_bytes;
    uint64_t ici_bytes;                /* collectives: an all-reduce or permute counts its
                                          buffer on every participant; a halo op the bytes
                                          the core receives from the other cores of its
                                          replica (sim/chip/timing.c) */
    uint64_t mxu_mac_slots;            /* MXU busy cycles x R x C x MXUs: what it could do */
    uint64_t macs;                     /* MACs done, bf16 passes included */
    uint64_t ops, iterations;
};

/* One matrix unit's share of one matmul: n_tiles weight tiles run back to back on the unit
 * with double-buffered weights, as mxu.h's cycle model and numerics define. The device cuts
 * the matmul exactly as gemm.h deals it over a core's MXUs (sim/chip/mxu_provider.c says how).
 * All buffers belong to the caller; a provider reads w and in and writes out only. */
struct tpu_mxu_seq {
    enum tpu_dtype dtype;           /* TPU_BF16 or TPU_INT8 */
    size_t n_tiles;                 /* >= 1 */
    const uint64_t *m_rows;         /* [n_tiles] input rows of each tile, each >= 1 */
    /* dtype BF16: */
    const tpu_bf16 *const *w_bf16;  /* [n_tiles] -> [rows][cols], W[i][j] for PE(i, j) */
    const tpu_bf16 *const *in_bf16; /* [n_tiles] -> [m_rows[t]][rows] */
    float *const *out_f32;          /* [n_tiles] -> [m_rows[t]][cols] column outputs */
    /* dtype INT8: */
    const int8_t *const *w_int8;
    const int8_t *const *in_int8;
    int32_t *const *out_i32;
};

/* A matrix-unit implementation other than the built-in one, inside the native chip (a layer
 * below the device backends): the Verilated RTL array (rtl/mxu_rtl_provider.h; the command
 * line's `--backend rtl`). With settings.mxu set, every matmul of the native chip runs its
 * tiles on the provider, and the cycles the provider reports are the op's MXU time
 * (in place of gemm.h's closed form). The device then needs values: timing_only is rejected.
 * Only one-pass matmuls run on a provider (bf16, f32 rounded to bf16, int8); an f32 matmul in
 * 3 or 6 bf16 passes fails with TPU_EUNSUPPORTED. */
struct tpu_mxu_provider {
    void *ctx;
    const char *name;    /* says which in messages ("rtl") */
    uint32_t rows, cols; /* the array it simulates; must equal the chip's */
    uint32_t n_units;    /* matrix units it simulates: at least cores x MXUs per core. Core c's
                            i-th MXU is unit c * mxu_per_core + i */
    /* Runs seq on `unit`, which starts idle, and sets *cycles to its cycle count: cycle 0 is
     * the first with work, the count ends with the cycle in which the last output row is
     * valid (mxu.h's `total`). The device calls a unit from one thread at a time; different
     * units may run concurrently on different threads. Returns 0 or a negative TPU_E* code
     * with a sentence in d. */
    int (*run)(void *ctx, uint32_t unit, const struct tpu_mxu_seq *seq, uint64_t *cycles,
               struct tpu_diag *d);
};

enum tpu_log_level { TPU_LOG_ERROR, TPU_LOG_WARN, TPU_LOG_INFO, TPU_LOG_DEBUG };

struct tpu_device_backend; /* below */

/* A pod slice simulated as several devices, one per host, each in its own process (host/mpi:
 * an MPI rank per host) or thread (tests): settings.pod links this device to the others. The
 * device then holds its host's cores only, but its replicas are numbered in the whole pod:
 * core c of part `index` belongs to pod replica index x R + c / cores_per_replica (R the
 * device's own replica count), which is what an op that depends on the replica sees (dropout
 * masks, row masks). An all_reduce over the replicas (group=replicas) spans every part: its
 * members are the R x parts replicas' cores of one logical index, in pod replica order, so it
 * starts when the last of them arrives in the whole pod, takes the cycles of that many
 * members (the torus of all the pod's chips), and sums their x in pod replica order,
 * ((x0 + x1) + x2) + ..., bit for bit as one device holding the whole pod does. Ops within a
 * replica (halo ops, group=replica_cores) stay on the part; a collective_permute over the
 * replicas does not cross parts (the load refuses it with a message). Every part must load
 * the same program and run the same launches: the link carries only what the collectives
 * need.
 *
 * The link's entries are blocking. They are called during a run from the part's lane
 * threads (one per logical index, started by tpu_device_run for the run; never from its
 * worker threads nor from the caller's). `group` is the logical index k of the reduce
 * (0 .. cores_per_replica - 1): for one k the calls come in the same order on every part
 * (program order); calls for different k may come at the same time from different lanes.
 * Each returns 0, or a negative TPU_E* code with a sentence in d (a peer is gone), which
 * fails the run.
 *
 * What a part cannot do alone, and what its caller must do. A link call returns only when
 * the peers make the matching call or the link fails; a part cannot take back a call under
 * way. So, while a lane is in a link call:
 *   - tpu_device_cancel is not prompt: tpu_device_run returns when that call returns. With
 *     the optional `abort` entry (below) a cancel during a run, and a core's error, call it,
 *     which ends the peers' calls; without it, the caller must end them through the link's
 *     owner (the host group's abort, runtime.h) before or after canceling;
 *   - the end of input gives TPU_EEND only once no lane is busy: the parts must be fed the
 *     same steps (a part whose peers' input ended a step earlier waits in the link for them
 *     until the link fails);
 *   - tpu_device_watch's cores_blocked stays false (the reduce under way will wake its
 *     cores; the part cannot tell a slow peer from a gone one): a watchdog of a pod must
 *     judge the whole pod, e.g. by every part's `moves`.
 * Every part must have the same n_chips and cores_per_replica (hence the same replica count):
 * the first run of a load checks it through the link and fails with a message otherwise. */
struct tpu_pod_link {
    void *ctx;
    uint32_t parts; /* devices of the pod (hosts): 1 .. 4096 */
    uint32_t index; /* this device's part: < parts */
    /* *value becomes the largest *value given by any part for this call. */
    int (*max_u64)(void *ctx, uint32_t group, uint64_t *value, struct tpu_diag *d);
    /* Receives `bytes` from part index - 1's matching send_next (not called on part 0). */
    int (*recv_prev)(void *ctx, uint32_t group, void *data, size_t bytes, struct tpu_diag *d);
    /* Sends `bytes` to part index + 1 (not called on the last part). */
    int (*send_next)(void *ctx, uint32_t group, const void *data, size_t bytes,
                     struct tpu_diag *d);
    /* The last part's `bytes` at data replace every other part's. */
    int (*bcast_last)(void *ctx, uint32_t group, void *data, size_t bytes, struct tpu_diag *d);
    /* Optional (NULL: not provided). This part stops a run that its peers may still wait
     * for in link calls (tpu_device_cancel during a run, a core's error): every blocked and
     * later call of every part should return an error promptly. Called at most once per
     * run, from the thread that stops it (the caller of tpu_device_cancel or a worker),
     * with no lock of the device held; rc and d say why. It may not return (an MPI job's
     * abort). The same shape as struct tpu_host_group's abort, so one function can serve
     * both. */
    void (*abort)(void *ctx, int rc, const struct tpu_diag *d);
};

struct tpu_device_settings {
    struct tpu_chip_config chip;  /* copied at open */
    uint32_t n_chips;             /* default: chip.chips_per_host */
    uint32_t cores_per_replica;   /* model parallelism: 1 (default), 2, 4, ... */
    unsigned n_threads;           /* worker threads simulating cores; 0: min(cores, CPUs) */
    unsigned kernel_threads;      /* host threads inside one matmul kernel; default 1 */
    bool timing_only;             /* count cycles, compute no values */
    bool trace;                   /* record the timeline (tpu_device_write_trace) */
    bool op_stats;                /* collect per-op statistics (tpu_device_op_stats); off by
                                     default: when off the cores record nothing per op */
    bool share_replicas;          /* on by default: data-parallel replicas hold what they
                                     have in common once (below, "Replicas that cost
                                     little"); off: every core keeps and computes all of its
                                     own values (the same values, cycles and counters) */
    const struct tpu_mxu_provider *mxu; /* the native chip's matrix unit; NULL: built in.
                                           Borrowed: it must outlive the device */
    const struct tpu_device_backend *backend; /* what simulates the chip; NULL: the native
                                                 chip (tpu_device_backend_native). Borrowed:
                                                 it must outlive the device */
    const struct tpu_pod_link *pod; /* NULL: the device is the whole pod slice. Otherwise
                                       this device is part pod->index of pod->parts (above);
                                       the native chip only (another backend refuses it).
                                       Borrowed: it must outlive the device */
    void (*log)(void *ctx, enum tpu_log_level level, const char *msg);
    void *log_ctx;
};

/* Replicas that cost little (settings.share_replicas; the native chip, sim/chip/share.c).
 * Data-parallel replicas hold identical params and optimizer state after every all-reduce.
 * With sharing on, the chip keeps such a param once per logical core index (shared by the
 * replicas' cores of that index) rather than once per core, computes its optimizer update
 * once rather than on every replica, and sums a gradient all-reduce that only the updates
 * read into one copy (a gradient that is one matmul of each replica's few rows, as one
 * product over every replica's rows: the same additions in the same order, without a
 * gradient-sized product per replica). The device API's promises stay: each core still has
 * its own buffers as far as tpu_device_write and tpu_device_read can tell (a write to one
 * core that makes its value differ gives that core its own copy, and the replicas then
 * compute apart from the next launch on; writing the same bytes to every core makes them
 * share again), and every core books its own cycles, counters and op statistics exactly as
 * with sharing off. What is shared is decided from the program: a param written only by
 * optimizer updates whose gradient comes straight from an all_reduce over the replicas (or
 * never written by the program). Turn sharing off to compare (the tests do, byte for byte)
 * or to measure what replicas would cost apart.
 *
 * A run that ends early (tpu_device_cancel, or an error in a core, which cancels it) stops
 * the cores part-way through a step, and there the two modes may differ: an update done once
 * for every replica may have run while apart only some replicas' would have, a gradient sum
 * may hold only the members added so far, and a replica whose gradient went back to the pool
 * reads as that partial sum. The device promises nothing about buffer values after such a
 * run in either mode (write or load what the next run needs); after a run that completes,
 * the two modes give the same bytes on every core.
 *
 * Fills settings with documented defaults for a chip (copied): one chip set of
 * chip.chips_per_host chips, 1 core per replica, threads min(cores, CPUs), kernel_threads
 * 1, share_replicas on, everything else off. */
void tpu_device_default_settings(struct tpu_device_settings *s,
                                 const struct tpu_chip_config *chip);

struct tpu_device;

/* Opens a device on settings.backend (NULL: the native chip). Refuses a backend whose table
 * lacks an entry. The caller owns the device; close with tpu_device_close (NULLs the
 * pointer; accepts NULL). */
int tpu_device_open(const struct tpu_device_settings *s, struct tpu_device **out,
                    struct tpu_diag *d);
void tpu_device_close(struct tpu_device **dev);

uint32_t tpu_device_n_cores(const struct tpu_device *dev);
uint32_t tpu_device_n_replicas(const struct tpu_device *dev);
/* settings.pod (NULL when the device is the whole pod slice). */
const struct tpu_pod_link *tpu_device_pod(const struct tpu_device *dev);
const struct tpu_chip_config *tpu_device_chip(const struct tpu_device *dev);

/* Verifies the program against the chip and gives every core its buffers (params zeroed,
 * variables 0) and empty feed queues (tensors that a stopped run left queued are dropped).
 * The device keeps its own copy. Replaces any earlier program. A program the
 * chip cannot run is refused with the earlier one still loaded; if the backend fails to
 * take it (out of memory), no program is loaded afterwards. Not during a run (TPU_EINVAL).
 * A row-partitioned op (a window with parts > 1, program.h) runs over the cores of one
 * replica, so its parts must equal settings.cores_per_replica (TPU_EINVAL otherwise, the
 * message naming the op, parts, the cores per replica and the fix). */
int tpu_device_load(struct tpu_device *dev, const struct tpu_program *prog, struct tpu_diag *d);

/* Host access to a param buffer of one core (bytes must be the buffer's size, data not
 * NULL). Not during a run. Writing charges no device time (weights are set up before
 * training). */
int tpu_device_write(struct tpu_device *dev, uint32_t core, uint32_t buf, const void *data,
                     size_t bytes, struct tpu_diag *d);
int tpu_device_read(const struct tpu_device *dev, uint32_t core, uint32_t buf, void *data,
                    size_t bytes, struct tpu_diag *d);
/* Sets a device variable on every core (TPU_EINVAL for an unknown variable or during a
 * run) / reads one core's (0 for an unknown core or variable). */
int tpu_device_set_var(struct tpu_device *dev, uint32_t var, int64_t value);
int64_t tpu_device_get_var(const struct tpu_device *dev, uint32_t core, uint32_t var);

/* Queues one tensor for core's next infeed op. Blocks while the queue is full (returns
 * TPU_ECANCELED if the run is canceled meanwhile). `data` is copied; it may be NULL in
 * timing-only mode. The transfer starts at device cycle max(host_cycle, the host link free,
 * the queue slot free) and the data is ready after latency + bytes / bandwidth. */
int tpu_device_infeed(struct tpu_device *dev, uint32_t core, const void *data, size_t bytes,
                      uint64_t host_cycle, struct tpu_diag *d);
/* Takes the next outfeed tensor of core (copied to data; bytes must match). Blocks while
 * the queue is empty, between runs too (the next run's tensors will come): a caller that
 * waits for tensors a run will never outfeed is released only by tpu_device_cancel, and then
 * returns TPU_ECANCELED. *ready_cycle (if not NULL) gets the device cycle at which it reached
 * the host. `host_cycle` is when the host takes it (frees the slot). */
int tpu_device_outfeed(struct tpu_device *dev, uint32_t core, void *data, size_t bytes,
                       uint64_t host_cycle, uint64_t *ready_cycle, struct tpu_diag *d);

/* Runs the loaded program once on every core (the loop as many times as its variable says),
 * starting no earlier than start_cycle. Blocks until every core is done; returns 0 or the
 * first error. *end_cycle (if not NULL) gets the latest core clock, also when the run ends
 * with TPU_EEND (then it is where the stopped cores' last op left them). */
int tpu_device_run(struct tpu_device *dev, uint64_t start_cycle, uint64_t *end_cycle,
                   struct tpu_diag *d);
/* The host will queue no more infeed. A run in which every core that is not done waits for
 * infeed or for a collective, with at least one waiting for infeed, then ends with TPU_EEND:
 * the cores stopped at the start of the step whose data never came, so their params and
 * variables hold the state after the last complete step (all updates follow the step's
 * collectives). Cleared by tpu_device_reset_cancel. */
void tpu_device_infeed_close(struct tpu_device *dev);
/* Ends a run from any thread; blocked calls return TPU_ECANCELED. Idempotent. */
void tpu_device_cancel(struct tpu_device *dev);
/* Clears the canceled and infeed-closed states before the next run. */
void tpu_device_reset_cancel(struct tpu_device *dev);

/* Whether the device computes no values (settings.timing_only): then tpu_device_write and
 * tpu_device_read fail and outfeed tensors read as zeros. */
bool tpu_device_timing_only(const struct tpu_device *dev);

/* A snapshot for watchdogs, callable from any thread. */
struct tpu_device_watch {
    bool running;                /* a tpu_device_run is under way */
    bool cores_blocked;          /* ... and no core can move on its own: every core that is not
                                    done waits for infeed, for the host to drain its outfeed,
                                    or for a collective */
    uint32_t host_calls_waiting; /* tpu_device_infeed / tpu_device_outfeed calls blocked on a
                                    queue right now: on a full infeed, an empty outfeed (a
                                    call woken by a slot or a tensor is not counted, even
                                    before its thread runs again) */
    uint64_t moves;              /* tensors pushed and popped on all queues so far */
    char why[200];               /* what each core that is not done is doing */
};
/* If cores_blocked holds, every host thread that feeds or drains the device is among
 * host_calls_waiting, and `moves` did not change between two snapshots, the run is
 * deadlocked: nothing can wake anything. The runtime uses this to end such a run with an
 * error instead of hanging. */
void tpu_device_watch(const struct tpu_device *dev, struct tpu_device_watch *w);

int tpu_device_counters(const struct tpu_device *dev, uint32_t core,
                        struct tpu_core_counters *out);

/* What one op of the loaded program did on one core, summed over every time it ran since
 * the program was loaded (settings.op_stats). The fields mean what the core's counters mean
 * (struct tpu_core_counters), split by op: over the ops of a program, each of busy (but
 * busy[TPU_UNIT_INFEED]), stall, the byte counts, mxu_mac_slots and macs adds up to the
 * change of the core's counter since the load.
 *
 * share_cycles is the op's share of the core's time. The core's finish frontier is the
 * latest end of any op so far on the core (at a launch: the core's clock, or start_cycle if
 * later); an op that ends at E adds max(0, E - frontier) and moves the frontier to E. So an
 * op that overlaps others (a DMA streaming under a matmul) takes only the time by which it
 * outlasts them, an op that waited (for infeed, a collective, the host's outfeed drain)
 * takes its wait, and the shares add up exactly to the core's busy span: the sum over
 * launches of the core's clock after the launch minus its start (its clock before, or
 * start_cycle if later).
 *
 * busy[TPU_UNIT_INFEED] is the host link's time carrying the tensor the op took (bytes over
 * the core's share of the link's bandwidth; the transfer runs when the host queues it, so
 * the core's counters do not count it). Loop markers run (runs counts them: loop_begin once
 * per launch, loop_end once per iteration) but take no time.
 *
 * Statistics are sums that only grow until the next load: the difference of two snapshots is
 * what the ops did in between (one training step, say). */
struct tpu_op_stats {
    uint64_t runs;                    /* times the op ran */
    uint64_t share_cycles;            /* its share of the core's time (above) */
    uint64_t busy[TPU_UNIT_COUNT];    /* cycles it occupied each unit */
    uint64_t stall[TPU_STALL_COUNT];  /* cycles it waited, by cause */
    uint64_t hbm_read_bytes, hbm_write_bytes;
    uint64_t infeed_bytes, outfeed_bytes, ici_bytes;
    uint64_t mxu_mac_slots;           /* MXU busy cycles x R x C x MXUs */
    uint64_t macs;                    /* MACs done, bf16 passes included */
};

/* Copies core's per-op statistics of the loaded program into out[0 .. n_ops), n_ops being
 * the program's op count (out[i] is op i's). Fails with TPU_EINVAL (message in d) when the
 * device was opened without settings.op_stats, when no program is loaded, for a core out of
 * range, when n_ops is not the program's op count, or during a run. */
int tpu_device_op_stats(const struct tpu_device *dev, uint32_t core, struct tpu_op_stats *out,
                        size_t n_ops, struct tpu_diag *d);

/* What the loaded program takes of each core's HBM (tpu_program_memory: params plus the
 * peak of live temps), the figure tpu_device_load checked against the core's share of HBM.
 * TPU_EINVAL when no program is loaded. */
int tpu_device_memory(const struct tpu_device *dev, struct tpu_program_memory *out);

/* The loaded program (the device's own copy: op i of it is op i of tpu_device_op_stats), or
 * NULL when none is loaded. Borrowed: valid until the next load or close. */
const struct tpu_program *tpu_device_program(const struct tpu_device *dev);

/* Adds an event of the host's own to the timeline (a loop phase: "hooks", "launch"). */
int tpu_device_trace_host(struct tpu_device *dev, const char *name, uint64_t start_cycle,
                          uint64_t end_cycle);
/* Writes the recorded timeline as Chrome trace event JSON (opens in Perfetto):
 * one process per chip, one track per unit per core, queue depths as counters, host
 * phases on a host track, and a "loops" process with the device's launches: "device loop",
 * each tpu_device_run's span from its start cycle to its end, and "device idle", the gap
 * before it since the previous run's end (or cycle 0), when the host runs its loop boundary
 * and the launch (the bubble between loops). Atomically (temporary file, rename). */
int tpu_device_write_trace(const struct tpu_device *dev, const char *path, struct tpu_diag *d);

/* ---- the backend seam ------------------------------------------------------------------ */

/* What simulates the chip behind the device API: a table of functions with a name. The
 * native chip (sim/chip/) is one; the SystemC/TLM-2.0 model (systemc.h) another. A backend
 * is chosen with settings.backend at open.
 *
 * Division of work. The device API (sim/device/device.c) does everything every backend would
 * otherwise repeat, and the backend gets only calls that passed it:
 *  - open: the table has a name and every entry below (none is optional); the chip
 *    configuration is valid; n_chips and cores_per_replica are in range. The device's shape
 *    follows from the settings: n_cores = n_chips x chip.cores_per_chip, replicas of
 *    cores_per_replica consecutive cores.
 *  - load: the program is verified against the chip (tpu_program_verify), its collectives
 *    can reach their cores, its matmuls' dtypes are the chip's. The device API keeps its own
 *    copy of the program and lends it to the backend.
 *  - every call naming a core, a buffer or a variable: each exists; byte counts equal the
 *    buffer's size; data is not NULL where values are needed; a program is loaded; write and
 *    read happen on a device with values and not during a run; run is not already running.
 *  - the queries that follow from the settings (n_cores, n_replicas, chip, timing_only) or
 *    from the program (tpu_device_memory), the trace switch (settings.trace off: trace_host
 *    does nothing, write_trace fails) and the op_stats switch (settings.op_stats off:
 *    tpu_device_op_stats fails) never reach the backend.
 * The API calls the backend exactly once per call that passed its checks: the per-batch
 * calls (infeed, outfeed) cost one indirect call over the backend's own work.
 *
 * Every entry is required. `impl` is what open made; the device API never looks inside it.
 * An entry that fails returns a negative TPU_E* code and writes its sentence into d (which
 * may be NULL), naming the value, the rule and the fix, as the rest of the API does.
 *
 * Threads. The backend keeps the device API's threading promises (top of this header):
 * infeed, outfeed, cancel, infeed_close and watch may be called from other threads during
 * run, and must not hang: cancel (and an error inside the chip) wakes every blocked call
 * with TPU_ECANCELED. Everything else is called from one host thread at a time and never
 * during run. The device API itself takes no lock and keeps no state that changes during a
 * run except its "running" flag (atomic).
 *
 * Ownership. The table and ctx are borrowed: they must outlive every device opened on them.
 * impl belongs to the backend from open until close. The program lent by load stays valid
 * until the next load returns or close; the backend may keep the pointer, never frees it. */
struct tpu_device_backend {
    const char *name; /* says which in messages ("native") */
    void *ctx;        /* the backend's own context, given to open (NULL for the native one) */

    /* Makes the backend's state for a device of settings s (checked as above; s and what it
     * points to may be gone after open returns, except s->mxu, which outlives the device).
     * A backend that cannot run its matrix units on a provider refuses a non-NULL s->mxu
     * with TPU_EUNSUPPORTED, naming itself. On failure *impl is untouched and nothing is
     * left allocated. */
    int (*open)(void *ctx, const struct tpu_device_settings *s, void **impl,
                struct tpu_diag *d);
    /* Frees everything of impl. Never called during a run. */
    void (*close)(void *impl);
    /* Takes prog (verified, lent: see Ownership) as the program of every core: buffers of the
     * program's sizes with params zeroed, variables 0, empty feed queues. The earlier
     * program, if any, is still valid during the call and let go by it. On failure the
     * backend holds no program. */
    int (*load)(void *impl, const struct tpu_program *prog, struct tpu_diag *d);
    /* Copies bytes (the buffer's size) into / out of buffer buf of core. */
    int (*write)(void *impl, uint32_t core, uint32_t buf, const void *data, size_t bytes,
                 struct tpu_diag *d);
    int (*read)(void *impl, uint32_t core, uint32_t buf, void *data, size_t bytes,
                struct tpu_diag *d);
    /* Sets variable var on every core / reads core's. */
    void (*set_var)(void *impl, uint32_t var, int64_t value);
    int64_t (*get_var)(void *impl, uint32_t core, uint32_t var);
    /* tpu_device_infeed and tpu_device_outfeed, as documented there (data may be NULL on a
     * timing-only device / when the caller wants no values). */
    int (*infeed)(void *impl, uint32_t core, const void *data, size_t bytes,
                  uint64_t host_cycle, struct tpu_diag *d);
    int (*outfeed)(void *impl, uint32_t core, void *data, size_t bytes, uint64_t host_cycle,
                   uint64_t *ready_cycle, struct tpu_diag *d);
    /* tpu_device_run with a program loaded and no run under way; end_cycle may be NULL. */
    int (*run)(void *impl, uint64_t start_cycle, uint64_t *end_cycle, struct tpu_diag *d);
    /* tpu_device_infeed_close, tpu_device_cancel, tpu_device_reset_cancel. */
    void (*infeed_close)(void *impl);
    void (*cancel)(void *impl);
    void (*reset_cancel)(void *impl);
    /* Fills *w (zeroed by the caller), from any thread. */
    void (*watch)(void *impl, struct tpu_device_watch *w);
    /* Copies core's counters into *out. */
    void (*counters)(void *impl, uint32_t core, struct tpu_core_counters *out);
    /* Copies core's per-op statistics of the loaded program into out[0 .. n_ops) (n_ops is
     * the program's op count). Called only on a device opened with settings.op_stats, with a
     * program loaded and no run under way. Statistics start at zero at each load. */
    void (*op_stats)(void *impl, uint32_t core, struct tpu_op_stats *out, size_t n_ops);
    /* tpu_device_trace_host and tpu_device_write_trace on a device opened with trace. */
    int (*trace_host)(void *impl, const char *name, uint64_t start_cycle, uint64_t end_cycle);
    int (*write_trace)(void *impl, const char *path, struct tpu_diag *d);
};

/* The native chip (sim/chip/): cores on worker threads, the matrix unit built in or
 * settings.mxu's provider. A constant table; never NULL. */
const struct tpu_device_backend *tpu_device_backend_native(void);

#ifdef __cplusplus
}
#endif
#endif
