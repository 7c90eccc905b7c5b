/* Replicas that cost little: the native chip keeps the values that data-parallel replicas
 * hold in common once per logical core index instead of once per core, and computes their
 * updates once (settings.share_replicas, device.h). It changes no value and no cycle: every
 * core still runs every op on its own scoreboard and books its own cycles, DMA bytes,
 * counters and op statistics (timing is closed-form and needs no values); only the host's
 * memory and time shrink. With the setting off (the tests' "apart" mode) every core has
 * its own buffers and computes every op, as before; the tests compare the two byte for byte.
 *
 * What is shared (decided at load from the program alone, share_plan):
 *   - an update op U (an op of the table's rmw column that is not on the MXU: the
 *     optimizers) whose outputs are params and whose temp inputs were last written, in
 *     U's scope (the loop body, or the ops outside it), by an all_reduce over the replicas
 *     (group 0), with no op between the earliest of those all_reduces (R) and U touching
 *     U's operands, is an update candidate;
 *   - a param is shareable when every op that writes it is an update candidate and those
 *     ops read no param that is not shareable (a fixed point); a param no op writes (set by
 *     the host only) is shareable too;
 *   - an all_reduce over the replicas whose output y is a temp that only update candidates
 *     read, each with this all_reduce as y's last writer, and that no other op writes while
 *     reading it (in place, accumulate or rmw), is a reduce candidate: its sum needs to
 *     exist only once.
 * The slot of a shareable param b and a logical core index k is the buffer b of the
 * replicas' cores of index k. Its members point their bufs[b].data at value buffers; members
 * with equal values may point at the same one. Nothing else records the sharing: two
 * members share when their pointers are equal, and a value buffer is freed when no member
 * points at it any more.
 *
 * Host writes keep the device API's promise of per-core buffers (share_write): a write to
 * one core that changes its value gives that core a buffer of its own (copy on write), or
 * points it at another member's buffer that already holds those bytes; so writing the same
 * param to every core in turn (the runtime's params_to_device) ends with the members
 * sharing again, with at most two value buffers alive at any time.
 *
 * At each launch (share_begin_run) an update candidate is computed once for index k when
 * each of its output and param-input slots of index k is unified (one value buffer for
 * all members); else the slots of its outputs are split (each member gets a copy) and every
 * core computes it on its own, as with the setting off. This repeats until nothing more
 * splits. A reduce candidate writes only its leader's y (replica 0's core of index k)
 * when every update that reads y is computed once.
 *
 * Value-level order (not simulated time). The first core of index k to reach U computes
 * its values, the others skip them; a core that arrives while they are being computed waits
 * (in real time, on share_cv) until they are done. This is safe because every core of
 * index k has passed R (R completed, so each arrived there) and therefore every read of U's
 * outputs before R in its program order; no op between R and U touches them; and a core
 * goes past U only once the values are done. The one computing reads y from the leader's
 * buffers: the leader cannot have overwritten y, since y's next writer comes after U in
 * program order and the leader has not gone past U yet.
 *
 * A reader of a skipped member's y (tpu_device_read) gets the leader's: from_leader[y]
 * marks a core whose y the reduce did not write, until the core's next write of y.
 *
 * Streamed reduces. A reduce candidate in place (y is x) whose x only local ops write, in
 * its scope before it, is summed as the members arrive instead of by the last arriver: the
 * member whose turn it is (replica order) adds its x into the leader's (member 0's) x, which
 * becomes the sum; the same additions in the same order as the last arriver's, so the same
 * bits. An added member's x goes to a pool, and a core takes a buffer from the pool when it
 * next writes x (tpu__share_acquire); so the replicas hold as many copies of a gradient as
 * are waiting for their turn, not one each. The workers run the lowest ready core first
 * (chip.c) so that turns mostly come in arrival order. A member whose x went back to the pool
 * reads as the leader's sum (from_leader), which is what it would hold apart.
 *
 * Deferred products. When the only op that writes a streamed reduce's x is a matmul M of
 * one K-tile (per-replica K at most the array's rows; one bf16 pass; no accumulate) and no
 * op between M and the reduce touches x, the members do not compute their products: each
 * copies M's operands, K-major, into its replica's rows of two gathered arrays of the index
 * ([n_replicas x K][M] for op(A)^T, [n_replicas x K][N] for op(B)), and the last arriver
 * computes the sum as one GEMM whose K-tiles are the replicas' K (tile_rows = K). A GEMM
 * keeps one fp32 column sum t per tile, starting at +0, and adds it to the output (the first
 * tile stores it): the output is ((t0 + t1) + t2) + ..., where t_r is, operation for
 * operation, the one tile of replica r's own product -- the sum the streamed adds would
 * form, without writing 128 products of K = 8 rows (each as large as the gradient) and
 * reading them back. The one place the two could differ is a NaN's payload (a product's
 * NaNs are made canonical before it is added; the sum's are not, and which operand's payload
 * an addition keeps is the compiler's choice): a NaN, once formed, stays in the sum, so a sum
 * without NaN has the same bits; a sum with one is computed again the apart way, product by
 * product, with the adds' own code (tpu__sum_into_f32). The gathered operands cost
 * n_replicas x K x (M + N) values per index: the global batch's, far less than the products.
 * Only devices that stream (so never a pod's part) defer, and never with a matrix unit
 * provider (settings.mxu: it computes the values and counts the cycles).
 *
 * Packed weights. A matmul whose input is a slot that stays shared through the launch
 * (uni) tells its worker's GEMM (tpu__scratch_stable_b) that the operand's values change
 * only with its generation (gen: new at each launch and at each update of the slot); the
 * GEMM then packs those weights once per worker thread and generation instead of once per
 * replica. Values are unchanged: the same packed words.
 *
 * A run that ends early. A cancel (or an error in a core, which cancels the run) stops the
 * cores between ops, part-way through a step. Shared state is then where the run stopped,
 * which need not be where apart cores would have stopped: a shared update done by the first
 * member to reach it counts for every replica of its index, a leader's x may hold the sum of
 * only the members added before the cancel, and a member whose x went back to the pool reads
 * as that partial sum (from_leader). device.h promises nothing about buffers after such a
 * run, so nothing here undoes it; the next tpu__share_begin_run starts every turn and count
 * afresh, and only completed runs are held to the apart mode's bytes. */
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "chip_int.h"
#include "kernels/gemm_int.h"
#include "program/op_table.h"
#include "timing.h"
#include "util.h"

enum { ROLE_NONE = 0, ROLE_UPDATE = 1, ROLE_REDUCE = 2, ROLE_DEFER = 3 };

/* A deferred product (the file comment): matmul mm_pc, y = op(A) op(B) of [m][k] x [k][n],
 * whose x only the streamed reduce reduce_pc sums. Per index k_idx, while on[k_idx] (this
 * run: the reduce writes only the leader's y), member r's op(A)^T is rows [r k, r k + k) of
 * a[k_idx] ([n_replicas k][m]) and its op(B) rows [r k, r k + k) of b[k_idx]
 * ([n_replicas k][n]), elements as stored (a_elem, b_elem bytes: 4 f32, 2 bf16). scratch:
 * the last arriver's GEMM arena per index (reduces of different indices may run at once). */
struct share_defer {
    size_t mm_pc, reduce_pc;
    uint32_t x;
    size_t m, k, n, a_elem, b_elem;
    bool *on;                    /* [cores_per_replica] */
    unsigned char **a, **b;      /* [cores_per_replica], allocated at the first launch on */
    struct tpu__scratch *scratch; /* [cores_per_replica] */
};

static bool op_writes(const struct tpu_op *op, uint32_t b)
{
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] == b)
            return true;
    return false;
}

/* Whether op reads b: as an input, or as an output it updates (accumulate, rmw). */
static bool op_reads(const struct tpu_op *op, uint32_t b)
{
    for (int i = 0; i < TPU_OP_MAX_IN; i++)
        if (op->in[i] == b)
            return true;
    return (op->attrs.accumulate || tpu__op_info(op->code)->rmw) && op_writes(op, b);
}

/* The first op of pc's scope: after the loop_begin enclosing pc, or 0. */
static size_t scope_start(const struct tpu_program *p, size_t pc)
{
    for (size_t j = pc; j-- > 0;) {
        const enum tpu_opcode code = tpu_program_op(p, j)->code;
        if (code == TPU_OP_LOOP_BEGIN)
            return j + 1;
        if (code == TPU_OP_LOOP_END)
            return 0; /* pc is after the loop: its scope starts at the program's start */
    }
    return 0;
}

/* The last op before pc in its scope that writes b, or SIZE_MAX. */
static size_t last_writer(const struct tpu_program *p, size_t pc, uint32_t b)
{
    const size_t lo = scope_start(p, pc);
    for (size_t j = pc; j-- > lo;) {
        const struct tpu_op *o = tpu_program_op(p, j);
        if (o->code == TPU_OP_LOOP_END)
            return SIZE_MAX; /* the ops after the loop: the loop's writes are not ordered */
        if (op_writes(o, b))
            return j;
    }
    return SIZE_MAX;
}

static bool is_replica_reduce(const struct tpu_op *op)
{
    return op->code == TPU_OP_ALL_REDUCE && op->attrs.group != TPU_GROUP_REPLICA_CORES;
}

/* Whether op pc may be an update candidate (ignoring whether its param inputs are
 * shareable); *reduce_pc gets R. */
static bool update_shape(const struct tpu_program *p, size_t pc, size_t *reduce_pc)
{
    const struct tpu_op *op = tpu_program_op(p, pc);
    if (!tpu__op_info(op->code)->rmw || tpu__op_unit(op->code) == TPU_UNIT_MXU)
        return false;
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] != TPU_NO_BUF &&
            tpu_program_buffer(p, op->out[i])->kind != TPU_BUF_PARAM)
            return false;
    size_t r = SIZE_MAX;
    for (int i = 0; i < TPU_OP_MAX_IN; i++) {
        const uint32_t b = op->in[i];
        if (b == TPU_NO_BUF || tpu_program_buffer(p, b)->kind != TPU_BUF_TEMP)
            continue;
        const size_t w = last_writer(p, pc, b);
        if (w == SIZE_MAX || !is_replica_reduce(tpu_program_op(p, w)))
            return false;
        r = w < r ? w : r;
    }
    if (r == SIZE_MAX)
        return false; /* nothing orders the replicas before it */
    for (size_t j = r + 1; j < pc; j++) {
        const struct tpu_op *o = tpu_program_op(p, j);
        for (int i = 0; i < TPU_OP_MAX_OUT; i++)
            if (op->out[i] != TPU_NO_BUF &&
                (op_reads(o, op->out[i]) || op_writes(o, op->out[i])))
                return false;
        for (int i = 0; i < TPU_OP_MAX_IN; i++)
            if (op->in[i] != TPU_NO_BUF && op_writes(o, op->in[i]))
                return false;
    }
    *reduce_pc = r;
    return true;
}

/* Whether all_reduce pc is a reduce candidate (the update candidates known). */
static bool reduce_shape(const struct chip_device *dev, const struct tpu_program *p, size_t pc)
{
    const struct tpu_op *op = tpu_program_op(p, pc);
    const uint32_t y = op->out[0];
    if (!is_replica_reduce(op) || tpu_program_buffer(p, y)->kind != TPU_BUF_TEMP)
        return false;
    const size_t n = tpu_program_n_ops(p);
    bool read = false;
    for (size_t j = 0; j < n; j++) {
        const struct tpu_op *o = tpu_program_op(p, j);
        if (j != pc && op_writes(o, y) && op_reads(o, y))
            return false;
        if (j == pc || !op_reads(o, y))
            continue;
        if (dev->role[j] != ROLE_UPDATE || last_writer(p, j, y) != pc)
            return false;
        read = true;
    }
    return read;
}

/* Whether streamed reduce rpc (in place, x = y) sums the product of a matmul that can be
 * deferred (the file comment): its last writer of x in rpc's scope, the only op besides rpc
 * that writes x, with nothing in between reading x; one K-tile, one bf16 pass, shapes as
 * the verifier checked them. *df gets the matmul's figures. */
static bool defer_shape(const struct chip_device *dev, const struct tpu_program *p, size_t rpc,
                        struct share_defer *df)
{
    const uint32_t x = tpu_program_op(p, rpc)->in[0];
    const size_t w = last_writer(p, rpc, x);
    if (w == SIZE_MAX)
        return false;
    const struct tpu_op *op = tpu_program_op(p, w);
    if (op->code != TPU_OP_MATMUL || op->attrs.accumulate || op->out[0] != x ||
        op->in[0] == x || op->in[1] == x)
        return false;
    for (size_t j = 0; j < tpu_program_n_ops(p); j++) {
        const struct tpu_op *o = tpu_program_op(p, j);
        if (j != w && j != rpc && op_writes(o, x))
            return false;
        if (j > w && j < rpc && op_reads(o, x))
            return false;
    }
    const struct tpu_buffer_desc *a = tpu_program_buffer(p, op->in[0]);
    const struct tpu_buffer_desc *b = tpu_program_buffer(p, op->in[1]);
    const struct tpu_buffer_desc *y = tpu_program_buffer(p, x);
    const bool a_float = a->dtype == TPU_F32 || a->dtype == TPU_BF16;
    const bool b_float = b->dtype == TPU_F32 || b->dtype == TPU_BF16;
    if (!a_float || !b_float || y->dtype != TPU_F32 ||
        ((a->dtype == TPU_F32 || b->dtype == TPU_F32) && op->attrs.passes != 1))
        return false;
    const bool ta = op->attrs.trans_a, tb = op->attrs.trans_b;
    df->m = ta ? a->cols : a->rows;
    df->k = ta ? a->rows : a->cols;
    df->n = tb ? b->rows : b->cols;
    df->a_elem = tpu_dtype_bytes(a->dtype);
    df->b_elem = tpu_dtype_bytes(b->dtype);
    df->mm_pc = w;
    df->reduce_pc = rpc;
    df->x = x;
    return df->k >= 1 && df->k <= dev->cfg.mxu_rows && (tb ? b->cols : b->rows) == df->k &&
           y->rows == df->m && y->cols == df->n;
}

/* The deferred products of the plan (after the streamed reduces are known). 0 or
 * TPU_ENOMEM. */
static int defer_plan(struct chip_device *dev, const struct tpu_program *p)
{
    const size_t n_ops = tpu_program_n_ops(p);
    if (dev->s.mxu || dev->n_replicas < 2)
        return 0; /* a provider computes the values; one replica has nothing to sum */
    size_t n = 0;
    for (size_t pc = 0; pc < n_ops; pc++) {
        const struct tpu_op *op = tpu_program_op(p, pc);
        if (dev->role[pc] == ROLE_REDUCE && op->in[0] == op->out[0] && dev->lazy[op->in[0]])
            n++;
    }
    if (n == 0)
        return 0;
    dev->defer = calloc(n, sizeof *dev->defer);
    if (!dev->defer)
        return TPU_ENOMEM;
    for (size_t pc = 0; pc < n_ops; pc++) {
        const struct tpu_op *op = tpu_program_op(p, pc);
        struct share_defer *df = &dev->defer[dev->n_defer];
        if (dev->role[pc] != ROLE_REDUCE || op->in[0] != op->out[0] ||
            !dev->lazy[op->in[0]] || !defer_shape(dev, p, pc, df))
            continue;
        const uint32_t cpr = dev->cores_per_replica;
        df->on = calloc(cpr, sizeof *df->on);
        df->a = calloc(cpr, sizeof *df->a);
        df->b = calloc(cpr, sizeof *df->b);
        df->scratch = calloc(cpr, sizeof *df->scratch);
        dev->n_defer++; /* so that defer_free frees what was allocated */
        if (!df->on || !df->a || !df->b || !df->scratch)
            return TPU_ENOMEM;
        dev->role[df->mm_pc] = ROLE_DEFER;
    }
    return 0;
}

static void defer_free(struct chip_device *dev)
{
    for (size_t i = 0; dev->defer && i < dev->n_defer; i++) {
        struct share_defer *df = &dev->defer[i];
        for (uint32_t k = 0; k < dev->cores_per_replica; k++) {
            if (df->a)
                free(df->a[k]);
            if (df->b)
                free(df->b[k]);
            if (df->scratch)
                tpu__scratch_free(&df->scratch[k]);
        }
        free(df->a);
        free(df->b);
        free(df->scratch);
        free(df->on);
    }
    free(dev->defer);
    dev->defer = NULL;
    dev->n_defer = 0;
}

void tpu__share_free(struct chip_device *dev)
{
    defer_free(dev);
    for (size_t b = 0; dev->pool && b < dev->n_pool; b++) {
        for (size_t i = 0; i < dev->pool[b].n; i++)
            free(dev->pool[b].v[i]);
        free(dev->pool[b].v);
    }
    free(dev->pool);
    free(dev->lazy);
    free(dev->uni);
    free(dev->gen);
    dev->uni = NULL;
    dev->gen = NULL;
    dev->pool = NULL;
    dev->lazy = NULL;
    dev->streams = false;
    dev->n_pool = 0;
    free(dev->shareable);
    free(dev->role);
    free(dev->once);
    free(dev->done);
    free(dev->busy);
    dev->shareable = NULL;
    dev->role = NULL;
    dev->once = NULL;
    dev->done = NULL;
    dev->busy = NULL;
}

int tpu__share_plan(struct chip_device *dev, const struct tpu_program *p)
{
    if (!dev->s.share_replicas || dev->s.timing_only)
        return 0;
    const size_t nb = tpu_program_n_buffers(p), n_ops = tpu_program_n_ops(p);
    const size_t slots = (n_ops ? n_ops : 1) * dev->cores_per_replica;
    dev->shareable = calloc(nb ? nb : 1, sizeof *dev->shareable);
    dev->role = calloc(n_ops ? n_ops : 1, sizeof *dev->role);
    dev->once = calloc(slots, sizeof *dev->once);
    dev->done = calloc(slots, sizeof *dev->done);
    dev->busy = calloc(slots, sizeof *dev->busy);
    if (!dev->shareable || !dev->role || !dev->once || !dev->done || !dev->busy) {
        tpu__share_free(dev);
        return TPU_ENOMEM;
    }
    for (size_t pc = 0; pc < n_ops; pc++) {
        size_t r;
        if (update_shape(p, pc, &r))
            dev->role[pc] = ROLE_UPDATE;
    }
    for (size_t b = 0; b < nb; b++)
        dev->shareable[b] = tpu_program_buffer(p, (uint32_t)b)->kind == TPU_BUF_PARAM;
    /* the fixed point: a param written by anything but a candidate is not shareable, and a
     * candidate that reads or writes a param that is not shareable is no candidate */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t pc = 0; pc < n_ops; pc++) {
            const struct tpu_op *op = tpu_program_op(p, pc);
            if (dev->role[pc] != ROLE_UPDATE) {
                for (int i = 0; i < TPU_OP_MAX_OUT; i++)
                    if (op->out[i] != TPU_NO_BUF && dev->shareable[op->out[i]]) {
                        dev->shareable[op->out[i]] = false;
                        changed = true;
                    }
                continue;
            }
            bool ok = true;
            for (int i = 0; i < TPU_OP_MAX_OUT; i++)
                ok = ok && (op->out[i] == TPU_NO_BUF || dev->shareable[op->out[i]]);
            for (int i = 0; i < TPU_OP_MAX_IN; i++)
                ok = ok && (op->in[i] == TPU_NO_BUF ||
                            tpu_program_buffer(p, op->in[i])->kind != TPU_BUF_PARAM ||
                            dev->shareable[op->in[i]]);
            if (!ok) {
                dev->role[pc] = ROLE_NONE;
                changed = true;
            }
        }
    }
    for (size_t pc = 0; pc < n_ops; pc++)
        if (dev->role[pc] == ROLE_NONE && reduce_shape(dev, p, pc))
            dev->role[pc] = ROLE_REDUCE;
    /* streamed reduces: in place, x written in R's scope before it, and only by local ops
     * (which take a value buffer from the pool when the core has none) */
    dev->lazy = calloc(nb ? nb : 1, sizeof *dev->lazy);
    dev->pool = calloc(nb ? nb : 1, sizeof *dev->pool);
    dev->uni = calloc((nb ? nb : 1) * dev->cores_per_replica, sizeof *dev->uni);
    dev->gen = calloc((nb ? nb : 1) * dev->cores_per_replica, sizeof *dev->gen);
    if (!dev->lazy || !dev->pool || !dev->uni || !dev->gen) {
        tpu__share_free(dev);
        return TPU_ENOMEM;
    }
    dev->n_pool = nb;
    for (size_t pc = 0; pc < n_ops; pc++) {
        const struct tpu_op *op = tpu_program_op(p, pc);
        if (dev->role[pc] != ROLE_REDUCE || op->in[0] != op->out[0])
            continue;
        const uint32_t x = op->in[0];
        /* not on a pod's part: the pod's sum is a chain over the parts (pod.c), of which a
         * part's members are not a prefix */
        bool ok = dev->pod_parts <= 1 && last_writer(p, pc, x) != SIZE_MAX;
        for (size_t j = 0; j < n_ops && ok; j++) {
            const struct tpu_op *o = tpu_program_op(p, j);
            const enum tpu_unit u = tpu__op_unit(o->code);
            if (j != pc && op_writes(o, x))
                ok = u == TPU_UNIT_MXU || u == TPU_UNIT_VPU || u == TPU_UNIT_CTRL;
        }
        dev->lazy[x] = ok;
        dev->streams = dev->streams || ok;
    }
    if (defer_plan(dev, p)) {
        tpu__share_free(dev);
        return TPU_ENOMEM;
    }
    return 0;
}

/* Whether value buffer v is pointed at by a member of core c's slot of b other than c. */
static bool slot_shared_ptr(const struct chip_device *dev, uint32_t c, uint32_t b,
                            const void *v)
{
    const uint32_t cpr = dev->cores_per_replica, k = c % cpr;
    for (uint32_t r = 0; r < dev->n_replicas; r++) {
        const uint32_t m = r * cpr + k;
        if (m != c && dev->cores[m].bufs[b].data == v)
            return true;
    }
    return false;
}

/* A value buffer of `bytes`, its size rounded up to whole cache lines (for the kernels),
 * zeroed. The caller frees it. */
static void *value_alloc(size_t bytes)
{
    size_t cap = (bytes + 63) / 64 * 64;
    if (cap == 0)
        cap = 64;
    void *v = aligned_alloc(64, cap);
    if (v) /* zeroed by writing: the pages are the process's before the first run */
        memset(v, 0, cap);
    return v;
}

int tpu__share_alloc(struct chip_device *dev, uint32_t b, size_t bytes)
{
    const uint32_t cpr = dev->cores_per_replica;
    for (uint32_t k = 0; k < cpr; k++) {
        void *v = value_alloc(bytes);
        if (!v)
            return TPU_ENOMEM;
        for (uint32_t r = 0; r < dev->n_replicas; r++)
            dev->cores[r * cpr + k].bufs[b].data = v;
    }
    return 0;
}

void tpu__share_free_buffer(struct chip_device *dev, uint32_t b)
{
    for (uint32_t i = 0; i < dev->n_cores; i++) {
        void *v = dev->cores[i].bufs[b].data;
        if (!v)
            continue;
        for (uint32_t j = i; j < dev->n_cores; j++)
            if (dev->cores[j].bufs[b].data == v)
                dev->cores[j].bufs[b].data = NULL;
        free(v);
    }
}

int tpu__share_write(struct chip_device *dev, uint32_t c, uint32_t b, const void *data,
                     size_t bytes)
{
    struct core *core = &dev->cores[c];
    void *mine = core->bufs[b].data;
    if (memcmp(mine, data, bytes) == 0)
        return 0;
    const uint32_t cpr = dev->cores_per_replica, k = c % cpr;
    void *to = NULL;
    for (uint32_t r = 0; r < dev->n_replicas && !to; r++) {
        void *v = dev->cores[r * cpr + k].bufs[b].data;
        if (v != mine && memcmp(v, data, bytes) == 0)
            to = v;
    }
    const bool mine_shared = slot_shared_ptr(dev, c, b, mine);
    if (to) { /* another member holds these bytes: share its buffer */
        core->bufs[b].data = to;
        if (!mine_shared)
            free(mine);
        return 0;
    }
    if (!mine_shared) { /* nobody else sees it: in place */
        memcpy(mine, data, bytes);
        return 0;
    }
    void *v = value_alloc(bytes); /* copy on write */
    if (!v)
        return TPU_ENOMEM;
    memcpy(v, data, bytes);
    core->bufs[b].data = v;
    return 0;
}

/* Whether the slot of b and index k has one value buffer for every member. */
static bool unified(const struct chip_device *dev, uint32_t b, uint32_t k)
{
    const uint32_t cpr = dev->cores_per_replica;
    const void *v = dev->cores[k].bufs[b].data;
    for (uint32_t r = 1; r < dev->n_replicas; r++)
        if (dev->cores[r * cpr + k].bufs[b].data != v)
            return false;
    return true;
}

/* Gives every member of the slot of b and index k a value buffer of its own. */
static int split(struct chip_device *dev, uint32_t b, uint32_t k)
{
    const uint32_t cpr = dev->cores_per_replica;
    const size_t bytes = tpu_buffer_bytes(tpu_program_buffer(dev->prog, b));
    for (uint32_t r = 0; r < dev->n_replicas; r++) {
        struct core *m = &dev->cores[r * cpr + k];
        if (!slot_shared_ptr(dev, m->id, b, m->bufs[b].data))
            continue;
        void *v = value_alloc(bytes);
        if (!v)
            return TPU_ENOMEM;
        memcpy(v, m->bufs[b].data, bytes);
        m->bufs[b].data = v;
    }
    return 0;
}

int tpu__share_begin_run(struct chip_device *dev, struct tpu_diag *d)
{
    if (!dev->role)
        return 0;
    const struct tpu_program *p = dev->prog;
    const size_t n_ops = tpu_program_n_ops(p);
    const uint32_t cpr = dev->cores_per_replica;
    memset(dev->done, 0, n_ops * cpr * sizeof *dev->done);
    memset(dev->busy, 0, n_ops * cpr * sizeof *dev->busy);
    for (uint32_t i = 0; i < dev->n_cores; i++)
        memset(dev->cores[i].upd_runs, 0, n_ops * sizeof *dev->cores[i].upd_runs);
    for (uint32_t g = 0; g < dev->n_groups; g++) {
        memset(dev->groups[g].ready, 0, dev->groups[g].n);
        dev->groups[g].added = 0;
        dev->groups[g].adding = false;
    }
    for (uint32_t k = 0; k < cpr; k++) {
        for (size_t pc = 0; pc < n_ops; pc++)
            dev->once[pc * cpr + k] = dev->role[pc] == ROLE_UPDATE;
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t pc = 0; pc < n_ops; pc++) {
                if (!dev->once[pc * cpr + k] || dev->role[pc] != ROLE_UPDATE)
                    continue;
                const struct tpu_op *op = tpu_program_op(p, pc);
                bool ok = true;
                for (int i = 0; i < TPU_OP_MAX_OUT; i++)
                    ok = ok && (op->out[i] == TPU_NO_BUF || unified(dev, op->out[i], k));
                for (int i = 0; i < TPU_OP_MAX_IN; i++)
                    ok = ok && (op->in[i] == TPU_NO_BUF || !dev->shareable[op->in[i]] ||
                                unified(dev, op->in[i], k));
                if (ok)
                    continue;
                dev->once[pc * cpr + k] = false;
                changed = true;
                for (int i = 0; i < TPU_OP_MAX_OUT; i++)
                    if (op->out[i] != TPU_NO_BUF && split(dev, op->out[i], k))
                        return tpu__fail(d, TPU_ENOMEM, "out of memory giving the replicas "
                                         "their own copies of '%s'",
                                         tpu_program_buffer(p, op->out[i])->name);
            }
        }
        /* the slots that stay shared through the run, each with a new generation; the
         * packed-weight hint (uni) only with several replicas: one replica's weights are
         * packed once per GEMM anyway, and caching them would only copy them. (Which worker
         * runs which member is decided as the cores become ready, so whether one worker
         * runs two members is not known here.) */
        for (size_t b = 0; b < tpu_program_n_buffers(p); b++) {
            dev->uni[b * cpr + k] = dev->n_replicas > 1 && dev->shareable[b] &&
                                    unified(dev, (uint32_t)b, k);
            dev->gen[b * cpr + k] = ++dev->gen_next;
        }
        /* a reduce writes only the leader's y when every update reading y is done once */
        for (size_t pc = 0; pc < n_ops; pc++) {
            if (dev->role[pc] != ROLE_REDUCE)
                continue;
            const uint32_t y = tpu_program_op(p, pc)->out[0];
            bool ok = true;
            for (size_t j = 0; j < n_ops && ok; j++)
                if (j != pc && op_reads(tpu_program_op(p, j), y))
                    ok = dev->once[j * cpr + k];
            dev->once[pc * cpr + k] = ok;
        }
    }
    /* a product is deferred where its reduce writes only the leader's y */
    for (size_t i = 0; i < dev->n_defer; i++) {
        struct share_defer *df = &dev->defer[i];
        const size_t rows = (size_t)dev->n_replicas * df->k;
        for (uint32_t k = 0; k < cpr; k++) {
            df->on[k] = dev->once[df->reduce_pc * cpr + k];
            /* both arrays, or the one a run that failed for memory left missing */
            if (!df->on[k] || (df->a[k] && df->b[k]))
                continue;
            size_t a_bytes, b_bytes;
            if (!tpu__mul_size(rows, df->m, &a_bytes) ||
                !tpu__mul_size(a_bytes, df->a_elem, &a_bytes) ||
                !tpu__mul_size(rows, df->n, &b_bytes) ||
                !tpu__mul_size(b_bytes, df->b_elem, &b_bytes) ||
                (!df->a[k] && !(df->a[k] = aligned_alloc(64, (a_bytes + 63) / 64 * 64 + 64))) ||
                (!df->b[k] && !(df->b[k] = aligned_alloc(64, (b_bytes + 63) / 64 * 64 + 64))))
                return tpu__fail(d, TPU_ENOMEM, "out of memory gathering the %u replicas' "
                                 "operands of the product '%s' for its all_reduce",
                                 dev->n_replicas, tpu_program_buffer(p, df->x)->name);
        }
    }
    return 0;
}

bool tpu__share_reduce_leader_only(const struct chip_device *dev, size_t pc, uint32_t k)
{
    return dev->role && dev->role[pc] == ROLE_REDUCE &&
           dev->once[pc * dev->cores_per_replica + k];
}

/* The deferred product whose matmul is op (when `mm`) or whose reduce is op, if it is
 * deferred for index k in this run; else NULL. */
static struct share_defer *deferred(const struct chip_device *dev, const struct tpu_op *op,
                                    bool mm, uint32_t k)
{
    for (size_t i = 0; i < dev->n_defer; i++) {
        struct share_defer *df = &dev->defer[i];
        if (tpu_program_op(dev->prog, mm ? df->mm_pc : df->reduce_pc) == op)
            return df->on[k] ? df : NULL;
    }
    return NULL;
}

/* src [rows][cols] of es-byte elements into dst as its transpose [cols][rows]. */
static void transpose_into(unsigned char *dst, const unsigned char *src, size_t rows,
                           size_t cols, size_t es)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            memcpy(dst + (j * rows + i) * es, src + (i * cols + j) * es, es);
}

/* Matmul pc on core c, if its product is deferred: copies its operands into c's rows of the
 * index's gathered arrays (0: done), or 1 (not deferred in this run: c computes it). */
static int defer_gather(struct chip_device *dev, struct core *c, size_t pc)
{
    const struct tpu_op *op = tpu_program_op(dev->prog, pc);
    const uint32_t k = c->index_in_replica;
    const struct share_defer *df = deferred(dev, op, true, k);
    if (!df)
        return 1;
    const void *a = c->bufs[op->in[0]].data, *b = c->bufs[op->in[1]].data;
    unsigned char *ad = df->a[k] + (size_t)c->replica * df->k * df->m * df->a_elem;
    unsigned char *bd = df->b[k] + (size_t)c->replica * df->k * df->n * df->b_elem;
    if (op->attrs.trans_a) /* a is op(A)^T already: [k][m] */
        memcpy(ad, a, df->k * df->m * df->a_elem);
    else
        transpose_into(ad, a, df->m, df->k, df->a_elem);
    if (op->attrs.trans_b) /* b is [n][k] */
        transpose_into(bd, b, df->n, df->k, df->b_elem);
    else
        memcpy(bd, b, df->k * df->n * df->b_elem);
    return 0;
}

int tpu__share_update(struct chip_device *dev, struct core *c, size_t pc,
                      const struct tpu_op *op, struct tpu__scratch *scratch,
                      struct tpu_diag *d)
{
    const size_t slot = pc * dev->cores_per_replica + c->index_in_replica;
    if (dev->role && dev->role[pc] == ROLE_DEFER)
        return defer_gather(dev, c, pc);
    if (!dev->role || dev->role[pc] != ROLE_UPDATE || !dev->once[slot])
        return 1; /* not shared: the caller computes it on this core */
    const uint64_t mine = c->upd_runs[pc]++;
    pthread_mutex_lock(&dev->lock);
    while (dev->busy[slot])
        pthread_cond_wait(&dev->share_cv, &dev->lock);
    if (dev->done[slot] > mine) { /* another core did it */
        pthread_mutex_unlock(&dev->lock);
        return 0;
    }
    dev->busy[slot] = true;
    pthread_mutex_unlock(&dev->lock);
    /* the leader's buffers: the shared slots, and y as the reduce left it */
    struct core *leader = &dev->cores[c->index_in_replica];
    int rc = tpu__op_compute_core(op, leader->bufs, c->vars, c->pod_replica,
                                  c->index_in_replica, dev->cfg.mxu_rows,
                                  dev->s.kernel_threads ? dev->s.kernel_threads : 1, scratch,
                                  d);
    pthread_mutex_lock(&dev->lock);
    dev->busy[slot] = false;
    if (!rc)
        dev->done[slot] = mine + 1;
    for (int i = 0; i < TPU_OP_MAX_OUT; i++) /* new values: packed copies are stale */
        if (op->out[i] != TPU_NO_BUF)
            dev->gen[op->out[i] * dev->cores_per_replica + c->index_in_replica] =
                ++dev->gen_next;
    pthread_cond_broadcast(&dev->share_cv);
    pthread_mutex_unlock(&dev->lock);
    return rc ? rc : 0;
}

bool tpu__share_streamed(const struct chip_device *dev, const struct tpu_op *op)
{
    return dev->lazy && op->in[0] == op->out[0] && dev->lazy[op->out[0]];
}

/* a + b where a NaN result does not depend on the operands' order or on where the element
 * sits in a call: the left operand's NaN, quieted, wins; else the right one's, quieted; else
 * (Inf + -Inf) the machine's own default NaN that the add made (x86: 0xffc00000). The
 * hardware's choice between two NaN operands depends on the instruction's operand order,
 * which the compiler picks per loop (a vector body may keep one, its tail the other). */
static inline float add_left_nan(float a, float b, float s)
{
    uint32_t u;
    if (a != a)
        memcpy(&u, &a, 4);
    else if (b != b)
        memcpy(&u, &b, 4);
    else
        return s;
    u |= 0x00400000u; /* quiet */
    memcpy(&s, &u, 4);
    return s;
}

void tpu__sum_into_f32(float *acc, const float *v, size_t count)
{
    size_t i = 0;
#if defined(__SSE2__)
    /* four at a time; a NaN in the four (rare) is fixed element by element */
    for (; i + 4 <= count; i += 4) {
        const __m128 a = _mm_loadu_ps(acc + i), b = _mm_loadu_ps(v + i);
        const __m128 s = _mm_add_ps(a, b);
        _mm_storeu_ps(acc + i, s);
        if (__builtin_expect(_mm_movemask_ps(_mm_cmpunord_ps(s, s)) != 0, 0)) {
            float fa[4], fb[4];
            _mm_storeu_ps(fa, a);
            _mm_storeu_ps(fb, b);
            for (int j = 0; j < 4; j++)
                acc[i + j] = add_left_nan(fa[j], fb[j], acc[i + j]);
        }
    }
#endif
    for (; i < count; i++) {
        const float a = acc[i], b = v[i], s = a + b;
        acc[i] = s != s ? add_left_nan(a, b, s) : s;
    }
}

void tpu__mean_f32(float *acc, size_t count, uint32_t n)
{
    for (size_t i = 0; i < count; i++)
        acc[i] = acc[i] / (float)n;
}

/* Adds member r's x into the leader's y (member 0's x, the sum so far), element by element
 * in the order reduce_range (chip_exec.c) adds a block: the same operations, the same bits. */
static void add_member(const struct chip_device *dev, const struct coll_group *g,
                       const struct tpu_op *op, uint32_t r)
{
    const uint32_t x = op->in[0];
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, x);
    const size_t count = (size_t)bd->rows * bd->cols; /* all_reduce is f32 (verified) */
    tpu__sum_into_f32(dev->cores[g->members[0]].bufs[x].data,
                      dev->cores[g->members[r]].bufs[x].data, count);
}

/* Under the lock: member r's x goes to the pool (its y is the leader's now). */
static void release(struct chip_device *dev, const struct coll_group *g, uint32_t x,
                    uint32_t r)
{
    struct core *m = &dev->cores[g->members[r]];
    struct share_pool *pl = &dev->pool[x];
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 4;
        void **nv = realloc(pl->v, cap * sizeof *nv);
        if (!nv)
            return; /* keep it: the core still owns its buffer */
        pl->v = nv;
        pl->cap = cap;
    }
    pl->v[pl->n++] = m->bufs[x].data;
    m->bufs[x].data = NULL;
}

void tpu__share_stream_add(struct chip_device *dev, struct coll_group *g, struct core *c,
                           const struct tpu_op *op)
{
    if (dev->n_defer && deferred(dev, op, false, c->index_in_replica))
        return; /* no product to add: the last arriver computes the sum (defer_sum) */
    pthread_mutex_lock(&dev->lock);
    g->ready[c->replica] = 1;
    if (!g->adding) {
        g->adding = true;
        while (g->added < g->n && g->ready[g->added]) {
            const uint32_t r = g->added;
            pthread_mutex_unlock(&dev->lock);
            if (r > 0)
                add_member(dev, g, op, r);
            pthread_mutex_lock(&dev->lock);
            if (r > 0)
                release(dev, g, op->in[0], r);
            g->added++;
        }
        g->adding = false;
        pthread_cond_broadcast(&dev->share_cv);
    }
    pthread_mutex_unlock(&dev->lock);
}

/* Whether any of y[0 .. count) is a NaN. */
static bool any_nan(const float *y, size_t count)
{
    unsigned nan = 0;
    for (size_t i = 0; i < count; i++)
        nan |= y[i] != y[i];
    return nan != 0;
}

/* The sum of the deferred product df over group g (index k) into the leader's x: one GEMM
 * over the gathered operands whose K-tiles are the members' (the file comment); with a NaN
 * in it, again product by product and added in member order as the streamed adds do. */
static int defer_sum(struct chip_device *dev, const struct coll_group *g,
                     struct share_defer *df, uint32_t k, struct tpu_diag *d)
{
    struct core *leader = &dev->cores[g->members[0]];
    int rc = tpu__share_acquire_buf(dev, leader, df->x, d);
    if (rc)
        return rc;
    float *y = leader->bufs[df->x].data;
    /* The step's update waits for this sum, so the other workers mostly wait for it too:
     * it takes the workers' share of the CPUs that each core index has (at least the
     * matmuls' own settings.kernel_threads). A GEMM's bits do not depend on its threads. */
    const unsigned kt = dev->s.kernel_threads ? dev->s.kernel_threads : 1;
    const unsigned per_index = dev->n_workers / dev->cores_per_replica;
    const unsigned threads = per_index > kt ? per_index : kt;
    struct tpu__gemm_operand oa = {df->a[k], df->a_elem == 4, true, 0};
    struct tpu__gemm_operand ob = {df->b[k], df->b_elem == 4, false, 0};
    const size_t count = df->m * df->n;
    rc = tpu__gemm_ex(&oa, &ob, y, df->m, (size_t)g->n * df->k, df->n, (uint32_t)df->k, false,
                      threads, &df->scratch[k], NULL, NULL);
    float *t = NULL;
    if (!rc && any_nan(y, count)) {
        t = malloc(count * sizeof *t + 1);
        rc = t ? 0 : TPU_ENOMEM;
        for (uint32_t r = 0; r < g->n && !rc; r++) {
            oa.data = df->a[k] + (size_t)r * df->k * df->m * df->a_elem;
            ob.data = df->b[k] + (size_t)r * df->k * df->n * df->b_elem;
            rc = tpu__gemm_ex(&oa, &ob, r ? t : y, df->m, df->k, df->n, dev->cfg.mxu_rows,
                              false, threads, &df->scratch[k], NULL, NULL);
            if (!rc && r)
                tpu__sum_into_f32(y, t, count);
        }
        free(t);
    }
    if (rc)
        return tpu__fail(d, rc, "the all_reduce of '%s' over %u replicas: its sum of the "
                         "replicas' [%zu][%zu] x [%zu][%zu] products failed (%s)",
                         tpu_program_buffer(dev->prog, df->x)->name, g->n, df->m, df->k,
                         df->k, df->n, tpu_strerror(rc));
    return 0;
}

int tpu__share_stream_finish(struct chip_device *dev, struct coll_group *g,
                             const struct tpu_op *op, struct tpu_diag *d)
{
    const uint32_t k = dev->cores[g->members[0]].index_in_replica;
    struct share_defer *df = dev->n_defer ? deferred(dev, op, false, k) : NULL;
    pthread_mutex_lock(&dev->lock);
    while (!df && g->added < g->n)
        pthread_cond_wait(&dev->share_cv, &dev->lock);
    g->added = 0;
    memset(g->ready, 0, g->n);
    pthread_mutex_unlock(&dev->lock);
    if (df) {
        int rc = defer_sum(dev, g, df, k, d);
        if (rc)
            return rc;
    }
    if (op->attrs.reduce != TPU_REDUCE_MEAN)
        return 0;
    const uint32_t y = op->out[0];
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, y);
    const size_t count = (size_t)bd->rows * bd->cols; /* all_reduce is f32 (verified) */
    tpu__mean_f32(dev->cores[g->members[0]].bufs[y].data, count, g->n);
    return 0;
}

int tpu__share_acquire_buf(struct chip_device *dev, struct core *c, uint32_t b,
                           struct tpu_diag *d)
{
    if (c->bufs[b].data)
        return 0;
    void *v = NULL;
    pthread_mutex_lock(&dev->lock);
    if (dev->pool && b < dev->n_pool && dev->pool[b].n)
        v = dev->pool[b].v[--dev->pool[b].n];
    pthread_mutex_unlock(&dev->lock);
    const struct tpu_buffer_desc *bd = tpu_program_buffer(dev->prog, b);
    if (!v && !(v = value_alloc(tpu_buffer_bytes(bd))))
        return tpu__fail(d, TPU_ENOMEM, "core %u: out of memory for temp '%s'", c->id,
                         bd->name);
    c->bufs[b].data = v;
    return 0;
}

int tpu__share_acquire(struct chip_device *dev, struct core *c, const struct tpu_op *op,
                       struct tpu_diag *d)
{
    if (dev->n_defer && deferred(dev, op, true, c->index_in_replica))
        return 0; /* its product is left to the reduce: nothing is written */
    for (int i = 0; i < TPU_OP_MAX_OUT; i++)
        if (op->out[i] != TPU_NO_BUF && dev->lazy[op->out[i]]) {
            int rc = tpu__share_acquire_buf(dev, c, op->out[i], d);
            if (rc)
                return rc;
        }
    return 0;
}

void tpu__share_hint(const struct chip_device *dev, const struct core *c,
                     const struct tpu_op *op, struct tpu__scratch *scratch)
{
    const uint32_t cpr = dev->cores_per_replica, k = c->index_in_replica;
    for (int i = TPU_OP_MAX_IN; op && i-- > 0;) {
        const uint32_t b = op->in[i];
        if (b != TPU_NO_BUF && dev->uni[b * cpr + k]) {
            /* no memory for the cache: the GEMM packs as usual */
            (void)tpu__scratch_stable_b(scratch, c->bufs[b].data, dev->gen[b * cpr + k]);
            return;
        }
    }
    (void)tpu__scratch_stable_b(scratch, NULL, 0);
}
