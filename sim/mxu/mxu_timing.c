/* The matrix unit's cycle model: the recurrence and closed forms of include/tpusim/mxu.h.
 *
 * This file only counts cycles; it computes no values (mxu_tile.c and gemm.c do). The
 * recurrence is what the Verilog array does when it is given work as early as it can take
 * it; the closed forms are that recurrence solved for tiles of equal row counts, so a whole
 * GEMM is timed in O(1) per matrix unit rather than O(cycles). */
#include "tpusim/mxu.h"
#include "util.h"

/* Fill plus drain: from presenting an unskewed input row to its de-skewed output row being
 * valid. Input skew of row i (i cycles) plus the trip down R rows ends at the bottom of
 * column 0 after R - 1 cycles and of column C-1 after R + C - 2; the output register adds 1
 * and the de-skew delays every column to the last one's time. */
static uint64_t fill_drain_cycles(uint32_t rows, uint32_t cols)
{
    return (uint64_t)rows + cols - 1;
}

uint64_t tpu_mxu_tile_cycles(uint32_t rows, uint32_t cols, uint64_t m_rows)
{
    return tpu_mxu_seq_cycles(rows, cols, 1, m_rows);
}

uint64_t tpu_mxu_seq_cycles(uint32_t rows, uint32_t cols, uint64_t n_tiles, uint64_t m_rows)
{
    if (n_tiles == 0)
        return 0;
    /* s_t = R + t * max(M, R): see mxu.h for why the recurrence settles to this. */
    uint64_t interval = tpu__max_u64(m_rows, rows);
    return (uint64_t)rows + (n_tiles - 1) * interval + m_rows + fill_drain_cycles(rows, cols);
}

void tpu_mxu_sched_init(struct tpu_mxu_sched *s, uint32_t rows, uint32_t cols)
{
    *s = (struct tpu_mxu_sched){.rows = rows, .cols = cols};
}

void tpu_mxu_sched_push(struct tpu_mxu_sched *s, uint64_t m_rows, uint64_t *load_start,
                        uint64_t *stream_start)
{
    /* L_t = max(L_{t-1} + R, s_{t-2} + M_{t-2});  s_t = max(L_t + R, s_{t-1} + M_{t-1}) */
    uint64_t load = 0;
    if (s->n >= 1)
        load = s->load_prev + s->rows;
    if (s->n >= 2)
        load = tpu__max_u64(load, s->stream_prev2 + s->m_prev2);
    uint64_t stream = load + s->rows;
    if (s->n >= 1)
        stream = tpu__max_u64(stream, s->stream_prev + s->m_prev);
    if (load_start)
        *load_start = load;
    if (stream_start)
        *stream_start = stream;
    s->stream_prev2 = s->stream_prev;
    s->m_prev2 = s->m_prev;
    s->load_prev = load;
    s->stream_prev = stream;
    s->m_prev = m_rows;
    s->n++;
}

uint64_t tpu_mxu_sched_total(const struct tpu_mxu_sched *s)
{
    if (s->n == 0)
        return 0;
    return s->stream_prev + s->m_prev + fill_drain_cycles(s->rows, s->cols);
}

uint64_t tpu_mxu_schedule(uint32_t rows, uint32_t cols, const uint64_t *m_rows, size_t n_tiles,
                          uint64_t *load_start, uint64_t *stream_start)
{
    struct tpu_mxu_sched s;
    tpu_mxu_sched_init(&s, rows, cols);
    for (size_t t = 0; t < n_tiles; t++)
        tpu_mxu_sched_push(&s, m_rows[t], load_start ? &load_start[t] : NULL,
                           stream_start ? &stream_start[t] : NULL);
    return tpu_mxu_sched_total(&s);
}
