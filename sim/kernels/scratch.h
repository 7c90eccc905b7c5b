/* Scratch memory that the op computations reuse from one op to the next: the GEMM's packed
 * blocks and the ops' working copies. One arena per worker thread of the chip (struct worker
 * in chip_int.h), used by that thread only, so it needs no lock. Grow-only: a request larger
 * than what a slot holds replaces the slot's block by a larger one (the old contents are
 * dropped); a smaller one reuses it. So after the first pass over a program no op allocates,
 * and no op touches fresh pages (a fresh page costs a page fault on first touch). Memory is
 * returned by tpu__scratch_free only. Internal to sim/; implemented in gemm.c. */
#ifndef TPUSIM_SIM_SCRATCH_H
#define TPUSIM_SIM_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

/* Independent blocks, for users whose scratch lives at the same time. */
enum tpu__scratch_slot {
    TPU__SCRATCH_GEMM = 0, /* the GEMM driver: its workers and their packed blocks */
    TPU__SCRATCH_OPS = 1,  /* an op's working copies, alive while it calls the GEMM */
    TPU__SCRATCH_BCACHE = 2, /* not a block: the GEMM's cache of packed B blocks
                                (tpu__scratch_stable_b); never given by tpu__scratch_get */
    TPU__SCRATCH_SLOTS = 3,
};

/* All-zero (`= {0}` or calloc) is an empty arena. */
struct tpu__scratch {
    void *mem[TPU__SCRATCH_SLOTS];
    size_t bytes[TPU__SCRATCH_SLOTS];
};

/* A block of at least `bytes` bytes (64-byte aligned) from `slot`, valid until the next call
 * for the same slot or tpu__scratch_free. Its contents are undefined. NULL when out of memory
 * (the slot then keeps its previous block). */
void *tpu__scratch_get(struct tpu__scratch *s, enum tpu__scratch_slot slot, size_t bytes);

/* A promise from the caller for the GEMMs that follow, until the next call: a B operand
 * stored at `data` holds the same values whenever `gen` is the same (the chip passes a
 * param that data-parallel replicas share, with a generation that changes at each of its
 * updates). The GEMM then keeps the packed blocks of that B in the arena and reuses them
 * instead of packing again: the values, and so the results, are the same. data NULL
 * withdraws the promise. Returns 0, or TPU_ENOMEM (the GEMMs then pack as usual). */
int tpu__scratch_stable_b(struct tpu__scratch *s, const void *data, uint64_t gen);

/* Frees every block; the arena is empty again (and may be used again). */
void tpu__scratch_free(struct tpu__scratch *s);

#endif
