/* Helpers of the row-partitioning tests (test_partition_ops.c, test_partition_rules.c): a
 * program parsed and loaded on a device of the tiny preset with `parts` cores per replica
 * (op statistics on), its buffers written and read by name on each core, and a run that
 * fails the test with the library's message. Include after <cmocka.h>. */
#ifndef TPUSIM_TESTS_PARTITION_HELPERS_H
#define TPUSIM_TESTS_PARTITION_HELPERS_H

#include <stdlib.h>

#include "tpusim/device.h"
#include "tpusim/program.h"
#include "device_helpers.h"

/* A window of 8 rows, 3x3 'same' of stride 1: over 2 cores hc = hoc = 4, E = 6. */
#define WIN8 "h=8 w=4 c=2 kh=3 kw=3 sh=1 sw=1 pt=1 pl=1 ho=8 wo=4"

static inline float *alloc_f(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

/* n_chips 0: parts / 2 chips (the tiny preset has 2 cores per chip) */
struct part_run {
    struct tpu_device *dev;
    struct tpu_program *prog;
};

static inline struct part_run run_start(const char *text, uint32_t parts, uint32_t n_chips)
{
    struct part_run r = {0};
    struct tpu_chip_config cfg = tiny();
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &cfg);
    s.n_chips = n_chips ? n_chips : (parts + 1) / 2;
    s.cores_per_replica = parts;
    s.n_threads = 2;
    s.op_stats = true;
    r.dev = open_settings(&s);
    r.prog = parse(text);
    load(r.dev, r.prog);
    return r;
}

static inline void put(struct part_run *r, uint32_t core, const char *name, const float *v)
{
    uint32_t id;
    assert_int_equal(tpu_program_find_buffer(r->prog, name, &id), 0);
    struct tpu_diag d = {0};
    if (tpu_device_write(r->dev, core, id, v, tpu_buffer_bytes(tpu_program_buffer(r->prog, id)),
                         &d) != 0)
        fail_msg("write %s: %s", name, d.msg);
}

static inline float *get(struct part_run *r, uint32_t core, const char *name)
{
    uint32_t id;
    assert_int_equal(tpu_program_find_buffer(r->prog, name, &id), 0);
    const uint64_t bytes = tpu_buffer_bytes(tpu_program_buffer(r->prog, id));
    float *v = alloc_f(bytes / 4);
    struct tpu_diag d = {0};
    if (tpu_device_read(r->dev, core, id, v, bytes, &d) != 0)
        fail_msg("read %s: %s", name, d.msg);
    return v;
}

static inline void run_end(struct part_run *r)
{
    tpu_device_close(&r->dev);
    tpu_program_destroy(&r->prog);
}

static inline void go(struct part_run *r)
{
    struct tpu_diag d = {0};
    if (tpu_device_run(r->dev, 0, NULL, &d) != 0)
        fail_msg("run: %s", d.msg);
}

#endif
