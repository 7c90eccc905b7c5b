/* Private to sim/systemc/: what tpu_tlm_chip.cpp (registers, commands, the run) and
 * tpu_tlm_windows.cpp (counters, program, HBM and feed windows) share. Little-endian field
 * access for the register map and the access-rule helpers. */
#ifndef TPUSIM_TPU_TLM_INT_H
#define TPUSIM_TPU_TLM_INT_H

#include <cstddef>
#include <cstdint>

#include <tlm>

#include "tpu_tlm_regs.h"
#include "tpusim/device.h"

namespace tpu_tlm {

inline constexpr uint64_t kCountersEnd = TPU_TLM_REG_COUNTERS + TPU_TLM_COUNTERS_SIZE;
inline constexpr uint64_t kFeedSpan = (uint64_t)TPU_TLM_MAX_CORES * TPU_TLM_CORE_STRIDE;

static_assert(kFeedSpan <= TPU_TLM_INFEED_BASE - TPU_TLM_HBM_BASE &&
                  TPU_TLM_OUTFEED_BASE - TPU_TLM_INFEED_BASE == kFeedSpan,
              "the HBM, infeed and outfeed windows of every core do not overlap");
static_assert(TPU_TLM_CORE_STRIDE >= (16ull << 30),
              "a core's HBM window holds the largest preset's HBM per core (16 GiB)");
static_assert(TPU_UNIT_COUNT == 7 && TPU_STALL_COUNT == 4,
              "tpu_tlm_regs.h's counter indices follow device.h's unit and stall tables");
static_assert(TPU_TLM_ERRMSG_SIZE == TPU_DIAG_MAX, "the message window holds one tpu_diag");
static_assert(sizeof(((struct tpu_device_watch *)nullptr)->why) == TPU_TLM_WATCH_WHY_SIZE &&
                  TPU_TLM_WATCH_WHY + TPU_TLM_WATCH_WHY_SIZE <= TPU_TLM_WATCH_SIZE,
              "the watch window holds one tpu_device_watch");
static_assert(TPU_TLM_BUF_NAME + TPU_PROGRAM_NAME_MAX + 1 <= TPU_TLM_BUFTAB_ENTRY,
              "a buffer's name fits its table entry");

/* Whether [off, off + len) lies inside a window of `size` bytes (no overflow). */
inline bool inside(uint64_t off, uint64_t len, uint64_t size)
{
    return len <= size && off <= size - len;
}

inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

inline bool lane_enabled(const tlm::tlm_generic_payload &t, size_t i)
{
    const unsigned char *be = t.get_byte_enable_ptr();
    unsigned be_len = t.get_byte_enable_length();
    return !be || be_len == 0 || be[i % be_len] == TLM_BYTE_ENABLED;
}

inline const char *cmd_word(const tlm::tlm_generic_payload &t)
{
    return t.is_write() ? "write" : "read";
}

} // namespace tpu_tlm

#endif
