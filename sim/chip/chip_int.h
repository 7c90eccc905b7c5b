/* The native chip's internal state: the first backend of the device API (device.h, struct
 * tpu_device_backend; tpu_device_backend_native). Shared by the files of sim/chip/ that
 * implement it: chip.c (open, load, host access, the run scheduler, the backend table),
 * chip_exec.c (ops on a core: values, timing, collectives), feed.c (infeed and outfeed
 * queues), trace.c (the timeline), share.c (replica sharing) and pod.c (the all-reduces
 * across a pod's parts, settings.pod). The device API (sim/device/device.c) has checked every
 * argument before it reaches a function here, and owns the loaded program, lent to us.
 *
 * Locking. One mutex per device, `lock`, guards every field marked [L]: the scheduler's core
 * states, the queues, the collectives' arrival counts, the cancel flag. A core's own fields
 * (buffers, clocks, counters, pc) are touched only by the one worker thread that runs that
 * core at a time (state RUNNING), or by the last arriver of a collective while every other
 * participant waits in CORE_WAIT_COLL (on a pod's part: by the lane thread that completes
 * the reduce, pod.c, while every member waits); so they need no lock. Host calls that touch buffers
 * (write/read/load) are only allowed while no run is in progress.
 *
 * Replica sharing (share.c, settings.share_replicas): the cores of one logical index may
 * point their bufs[b].data of a shareable param b at one value buffer; an update op of
 * such a buffer is computed by the first core to reach it, the others wait on share_cv
 * under `lock` while it computes; every core still books its own timing. */
#ifndef TPUSIM_SIM_CHIP_INT_H
#define TPUSIM_SIM_CHIP_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/ops.h"
#include "tpusim/device.h"
#include "tpusim/program.h"

enum core_state {
    CORE_READY,        /* can run: waiting for a worker */
    CORE_RUNNING,      /* a worker is running it */
    CORE_WAIT_INFEED,  /* its infeed queue is empty */
    CORE_WAIT_OUTFEED, /* its outfeed queue is full */
    CORE_WAIT_COLL,    /* arrived at a collective, waiting for the others */
    CORE_DONE,
};

/* One entry of a feed queue. Its buffer stays with the slot and is reused (grown when a
 * larger tensor comes), so steady-state feeding allocates nothing. */
struct feed_slot {
    void *data;           /* the slot's buffer, cap bytes */
    size_t cap;
    size_t bytes;         /* the tensor's size */
    bool has_data;        /* false in timing-only mode */
    uint64_t ready_cycle; /* infeed: in HBM at this cycle; outfeed: at the host */
    uint64_t link_cycles; /* infeed: the host link's time carrying it (bytes / bandwidth) */
};

/* A bounded queue between the host and one core (feed.c). [L] */
struct feed {
    struct feed_slot *slots; /* [depth] ring */
    uint32_t depth, head, count;
    uint64_t *slot_free_cycle; /* [depth]: device cycle each slot was last emptied */
    uint64_t pushes, pops;
};

#define TPU__TRACE_LABEL_MAX 80 /* an opcode's name, a space, a buffer's name (48) */

/* A trace event: a unit busy from start to end. */
struct trace_event {
    uint64_t start, end;
    uint32_t op;   /* index into the device's op_labels (the log's op_base plus the op's index
                      in its program), or UINT32_MAX for a host transfer */
    uint8_t unit;  /* enum tpu_unit */
    uint8_t kind;  /* 0 compute, 1 dma in, 2 dma out, 3 stall */
};

struct trace_counter {
    uint64_t cycle;
    uint32_t infeed_depth, outfeed_depth;
};

struct trace_log {
    struct trace_event *events;
    size_t n, cap;
    uint32_t op_base;   /* added to the op index of each event recorded: the first label of the
                           loaded program in the device's op_labels (0 for the host's log) */
    struct trace_counter *counters;
    size_t n_counters, cap_counters;
};

/* Where a buffer lives. */
enum placement { IN_HBM, IN_VMEM };

struct core {
    uint32_t id, chip, replica, index_in_replica;
    uint32_t pod_replica;       /* the replica in the whole pod (device.h, settings.pod:
                                   index x n_replicas + replica), what ops that depend on the
                                   replica see; replica without a pod */
    enum core_state state;      /* [L] */
    struct tpu__bufmem *bufs;   /* [n_buffers] */
    int64_t *vars;              /* [n_vars] */

    /* execution position */
    size_t pc;
    int64_t loop_left;
    bool in_loop;

    /* scoreboard (cycles) */
    uint64_t last_issue;                /* in-order: no op starts before the previous */
    uint64_t prefetch_from;             /* the next op's input DMA may start from here */
    uint64_t unit_free[TPU_UNIT_COUNT];
    uint64_t *buf_ready;                /* [n_buffers] value complete */
    uint64_t *buf_read_done;            /* [n_buffers] last reader done (WAR) */
    uint64_t coll_arrival;              /* set when it arrives at a collective */
    uint64_t provider_mxu_cycles;       /* the current matmul's MXU cycles when settings.mxu
                                           computed it (mxu_provider.h) */
    uint64_t frontier;                  /* the latest end of any op so far (tpu_op_stats'
                                           share_cycles); set at each launch */
    struct tpu_op_stats *stats;         /* [n_ops] per-op statistics of the loaded program, or
                                           NULL when settings.op_stats is off */

    uint64_t *upd_runs;                 /* [n_ops] times this core reached each shared
                                           update op in this run (share.c), or NULL */
    bool *from_leader;                  /* [n_buffers] y left to the leader by a shared
                                           reduce: read replica 0's (share.c), or NULL */

    struct tpu_core_counters ctr;
    struct feed infeed, outfeed;        /* [L] */
    uint32_t infeed_waiters, outfeed_waiters; /* [L] host calls waiting on host_cv for space
                                           in the infeed, for data in the outfeed */
    uint64_t link_in_free, link_out_free; /* [L] this core's share of the host link */
    pthread_cond_t host_cv;             /* host calls on this core's queues wait here */
    bool host_cv_ready;
    struct trace_log trace;
};

/* Participants of collectives: the replicas that share an index_in_replica (all_reduce,
 * permute group 0), or the cores of one replica (permute group 1). [L] */
struct coll_group {
    uint32_t n;          /* members */
    uint32_t *members;   /* core ids, in replica (or index) order */
    uint32_t arrived;
    /* a streamed reduce (share.c): members whose x is ready, how many (in member order)
     * are in the leader's sum, and whether a core is adding one */
    uint8_t *ready;      /* [n] */
    uint32_t added;
    bool adding;
};

struct share_defer; /* share.c */

/* Value buffers of one temp that streamed reduces let go of, for the next core that writes
 * the temp (share.c). [L] */
struct share_pool {
    void **v;
    size_t n, cap;
};

/* The all-reduces over the replicas of a pod's part (pod.c): one lane per logical index k,
 * whose thread makes the pod link's calls for k's reduces, so that a worker never waits in
 * the link (a worker blocked there could be the one another part's reduce of another k
 * needs here). The last local arriver hands the reduce to its lane and leaves its core
 * waiting like the others. [L] */
struct pod_lane {
    struct chip_device *dev;
    uint32_t k;
    bool has_job;             /* [L] a reduce was handed over and not yet taken */
    bool quit;                /* [L] the run is over: the thread returns */
    size_t pc;                /* the job: the op at pc over group k */
    bool leader_only;
    bool checked;             /* the lane's first reduce checked the parts' shapes */
    void *acc;                /* the lane thread's running sum, acc_cap bytes */
    size_t acc_cap;
    pthread_t th;
    bool started;
};

/* A worker thread of a run. Its working memory for the ops (ops.h: a matmul's packed
 * blocks) belongs to the thread, not to the cores it runs, so it stays warm in the thread's
 * caches as the thread moves from core to core; it is kept across runs. */
struct worker {
    struct chip_device *dev;
    struct tpu__scratch scratch;
};

/* The native backend's impl (what struct tpu_device_backend calls `impl`). */
struct chip_device {
    struct tpu_device_settings s;
    struct tpu_chip_config cfg;
    uint32_t n_cores, n_replicas, cores_per_replica;

    const struct tpu_program *prog; /* the loaded program, lent by the device API (device.h:
                                       valid until the next load or close), or NULL */
    enum placement *place;      /* [n_buffers] */
    struct core *cores;         /* [n_cores] */

    struct coll_group *groups;  /* [cores_per_replica + n_replicas] */
    uint32_t n_groups;

    /* settings.pod with more than one part (pod.c); pod_parts is 1 without */
    uint32_t pod_parts;
    struct pod_lane *lanes;     /* [cores_per_replica] during a run of a pod's part, or NULL */
    uint32_t pod_busy;          /* [L] reduces handed to lanes and not yet completed */
    pthread_cond_t pod_cv;      /* lanes wait here for a job; the run's end for pod_busy 0 */

    /* replica sharing (share.c); all NULL when the device does not share */
    bool *shareable;            /* [n_buffers] the param may be held once per index */
    uint8_t *role;              /* [n_ops] update candidate, reduce candidate, or neither */
    bool *once;                 /* [n_ops x cores_per_replica] this run: computed once for the
                                   index (update) / only the leader's y written (reduce) */
    uint64_t *done;             /* [L] [n_ops x cores_per_replica] times computed this run */
    bool *busy;                 /* [L] [n_ops x cores_per_replica] being computed */
    bool *lazy;                 /* [n_buffers] the in-place x of a reduce candidate: a
                                   streamed reduce lets its members' copies go */
    struct share_pool *pool;    /* [L] [n_buffers] */
    size_t n_pool;
    bool streams;               /* the program has a streamed reduce (some lazy[b]) */
    struct share_defer *defer;  /* [n_defer] products left to their streamed reduce's sum */
    size_t n_defer;
    bool *uni;                  /* [n_buffers x cores_per_replica] this run: a shareable slot
                                   with one value buffer, written only by updates done once */
    uint64_t *gen;              /* [n_buffers x cores_per_replica] its values' generation:
                                   new at each launch and each update (the GEMM's cache of
                                   packed weights, scratch.h tpu__scratch_stable_b) */
    uint64_t gen_next;          /* [L] */
    pthread_cond_t share_cv;    /* cores wait here for an update another core computes */

    pthread_mutex_t lock;
    pthread_cond_t work_cv;     /* workers wait for a READY core */
    /* host feed calls wait on their core's host_cv (struct core) for space or data */
    bool running;               /* [L] */
    unsigned n_workers;         /* worker threads of the current run */
    struct worker *workers;     /* [n_cores]: at most one worker per core */
    bool canceled;              /* [L] */
    bool infeed_closed;         /* [L] tpu_device_infeed_close was called */
    int error;                  /* [L] first error of the run */
    struct tpu_diag error_diag; /* [L] */
    uint32_t n_done;            /* [L] */

    struct trace_log host_trace; /* host phases (tpu_device_trace_host); an event's op
                                    field indexes host_names */
    struct trace_log run_trace;  /* each run's span [start_cycle, end] (the launches) */
    char (*host_names)[32];
    size_t n_host_names, cap_host_names;

    /* The label of every op of every program loaded while tracing ("matmul h1"), so that the
     * events recorded under a program keep their names after another program replaces it
     * (train, then evaluate). A program whose labels equal the previous one's reuses them. */
    char (*op_labels)[TPU__TRACE_LABEL_MAX];
    size_t n_op_labels, cap_op_labels;
    size_t last_labels_base, last_labels_n; /* the labels of the last program loaded */
};

/* chip_exec.c: runs core c from its pc until it finishes (returns 1), blocks (returns 0,
 * having set its state under the lock), or fails (negative, message in d). */
int tpu__core_run(struct chip_device *dev, struct core *c, struct tpu__scratch *scratch,
                  struct tpu_diag *d);

/* feed.c: the backend's infeed and outfeed entries (impl is a struct chip_device) */
int tpu__chip_infeed(void *impl, uint32_t core, const void *data, size_t bytes,
                     uint64_t host_cycle, struct tpu_diag *d);
int tpu__chip_outfeed(void *impl, uint32_t core, void *data, size_t bytes, uint64_t host_cycle,
                      uint64_t *ready_cycle, struct tpu_diag *d);
int tpu__feed_init(struct feed *f, uint32_t depth);
/* Drops the queued tensors (their slots keep their buffers and the cycles they were last
 * emptied at); under the lock, or with no run and no host feed call under way. */
void tpu__feed_clear(struct feed *f);
void tpu__feed_free(struct feed *f);
/* Core side of the queues (under the lock inside). take: 1 with the head tensor copied to
 * dst (if its size is dst_bytes; *got_bytes is its size), the cycle the infeed op completes
 * and the link time that carried it, or 0 with the core set waiting. put: 1 with the
 * transfer's start and end, or 0 with the core set waiting (or *err set on failure). */
int tpu__core_infeed_take(struct chip_device *dev, struct core *c, uint64_t issue, void *dst,
                          size_t dst_bytes, size_t *got_bytes, uint64_t *done_cycle,
                          uint64_t *link_cycles);
int tpu__core_outfeed_put(struct chip_device *dev, struct core *c, const void *data,
                          size_t bytes, uint64_t earliest, uint64_t *start_cycle,
                          uint64_t *end_cycle, int *err);

/* trace.c: the backend's trace_host and write_trace entries (impl is a struct chip_device;
 * the device API calls them only when settings.trace is on) */
int tpu__chip_trace_host(void *impl, const char *name, uint64_t start_cycle,
                         uint64_t end_cycle);
int tpu__chip_write_trace(void *impl, const char *path, struct tpu_diag *d);
/* Records the op labels of prog, about to be loaded, and points every core's log at them.
 * Does nothing when the device does not trace. Returns 0 or TPU_ENOMEM (message in d). */
int tpu__trace_program(struct chip_device *dev, const struct tpu_program *prog,
                       struct tpu_diag *d);
void tpu__trace_event(struct trace_log *t, uint8_t unit, uint8_t kind, uint32_t op,
                      uint64_t start, uint64_t end);
void tpu__trace_counter(struct trace_log *t, uint64_t cycle, uint32_t infeed_depth,
                        uint32_t outfeed_depth);
void tpu__trace_free(struct trace_log *t);

/* chip_exec.c: the backend's op_stats entry (impl is a struct chip_device). */
void tpu__chip_op_stats(void *impl, uint32_t core, struct tpu_op_stats *out, size_t n_ops);

/* share.c: replica sharing (the top of share.c explains it).
 * plan: at load, after dev->prog is set and before the buffers: which params are shareable
 * and which ops are update and reduce candidates (nothing when the settings do not share).
 * TPU_ENOMEM or 0. free: lets the plan go. */
int tpu__share_plan(struct chip_device *dev, const struct tpu_program *p);
void tpu__share_free(struct chip_device *dev);
/* Gives the slots of shareable buffer b one zeroed value buffer per index (all the
 * replicas' cores of the index point at it) / frees every value buffer of b once. */
int tpu__share_alloc(struct chip_device *dev, uint32_t b, size_t bytes);
void tpu__share_free_buffer(struct chip_device *dev, uint32_t b);
/* The host writes core c's shareable buffer b (copy on write). 0 or TPU_ENOMEM. */
int tpu__share_write(struct chip_device *dev, uint32_t c, uint32_t b, const void *data,
                     size_t bytes);
/* At each launch, before the cores run: which updates run once, which reduces write only
 * the leader (splitting slots where the replicas' values differ). 0 or TPU_ENOMEM (d). */
int tpu__share_begin_run(struct chip_device *dev, struct tpu_diag *d);
/* The values of op pc on core c if it is a shared update: 0 when done (by c or another
 * core), 1 when it is not shared and c computes it itself, negative on error (d). */
int tpu__share_update(struct chip_device *dev, struct core *c, size_t pc,
                      const struct tpu_op *op, struct tpu__scratch *scratch,
                      struct tpu_diag *d);
/* Before a matmul-unit op on core c: tells the worker's GEMM which of the op's inputs is a
 * shared param whose packed blocks it may keep (or none); op NULL (after it): none. */
void tpu__share_hint(const struct chip_device *dev, const struct core *c,
                     const struct tpu_op *op, struct tpu__scratch *scratch);

/* Whether all_reduce pc writes only its leader's y for index k in this run. */
bool tpu__share_reduce_leader_only(const struct chip_device *dev, size_t pc, uint32_t k);
/* Whether all_reduce op (leader-only for c's index) is streamed: its members' x are added
 * into the leader's y as they arrive, in member order, and let go once added. */
bool tpu__share_streamed(const struct chip_device *dev, const struct tpu_op *op);
/* A member (core c) of group g arrives at a streamed reduce: adds every member whose turn
 * has come. The last arriver then calls finish, which waits for the last add (or, for a
 * deferred product, computes the whole sum) and divides for a mean: 0, or TPU_ENOMEM /
 * TPU_ETHREAD with the message in d. */
void tpu__share_stream_add(struct chip_device *dev, struct coll_group *g, struct core *c,
                           const struct tpu_op *op);
int tpu__share_stream_finish(struct chip_device *dev, struct coll_group *g,
                             const struct tpu_op *op, struct tpu_diag *d);
/* acc[i] = acc[i] + v[i] for i < count: every in-order sum of an all_reduce over fp32 adds
 * with this one function (reduce_range, the pod chain, the streamed adds, a deferred
 * product's NaN case). A NaN sum follows one rule, whatever the split of the buffer into
 * calls and the element's place in a call: the left operand's NaN, quieted, wins; else the
 * right one's, quieted; else (Inf + -Inf) the machine's default NaN. So one device with any
 * worker count, a pod's parts, and replica sharing on or off give the same bits. */
void tpu__sum_into_f32(float *acc, const float *v, size_t count);
/* acc[i] = acc[i] / (float)n for i < count: an all_reduce's mean (share.c). */
void tpu__mean_f32(float *acc, size_t count, uint32_t n);
/* Gives core c a value buffer for each output of op that a streamed reduce let go.
 * 0 or TPU_ENOMEM (d). */
int tpu__share_acquire(struct chip_device *dev, struct core *c, const struct tpu_op *op,
                       struct tpu_diag *d);
int tpu__share_acquire_buf(struct chip_device *dev, struct core *c, uint32_t b,
                           struct tpu_diag *d);

/* chip_exec.c: books a collective over group g that starts at `start` on every member (SYNC
 * stalls, the ICI unit for the cycles of n_coll members, ici_bytes, its op statistics,
 * finish), advances every member's pc but c's (c NULL: every member's) and wakes them. The
 * values are done. leader_only: a replica-shared reduce wrote only member 0's y. */
void tpu__collective_book(struct chip_device *dev, const struct coll_group *g,
                          const struct core *c, size_t pc, const struct tpu_op *op,
                          uint64_t start, uint32_t n_coll, bool leader_only);
/* chip_exec.c: when a collective over g starts on this device: its last member's arrival. */
uint64_t tpu__coll_start(const struct chip_device *dev, const struct coll_group *g);
/* chip.c, under the lock: the run fails with rc and d (the first real error stays: a cancel
 * is only the echo of one) and stops; the workers and host calls wake. */
void tpu__fail_run_locked(struct chip_device *dev, int rc, const struct tpu_diag *d);

/* pod.c: the all-reduces over the replicas across a pod's parts (pod_parts > 1).
 * start: at a run's start, one lane thread per logical index (0 or TPU_ETHREAD, d).
 * stop: at its end, once the workers are gone: waits for the lanes' reduces under way (a
 * link call returns when its peers answer or the link fails), then ends their threads.
 * reduce: core c, the last local arriver at the all_reduce at pc over group g, hands it to
 * its lane and waits with the others (returns 0). */
int tpu__pod_start(struct chip_device *dev, struct tpu_diag *d);
void tpu__pod_stop(struct chip_device *dev);
int tpu__pod_reduce(struct chip_device *dev, struct core *c, size_t pc, bool leader_only);
/* pod.c: this part stops a run its peers may wait for (a cancel during the run, a core's
 * error): calls the link's optional abort with rc and why. No device lock held. */
void tpu__pod_release(struct chip_device *dev, int rc, const struct tpu_diag *why);

/* Under the lock: every host call blocked on a queue rechecks (chip.c). */
void tpu__wake_hosts(struct chip_device *dev);

/* Wakes a core waiting in `state` (under the lock). */
void tpu__wake_core(struct chip_device *dev, struct core *c, enum core_state state);

#endif
