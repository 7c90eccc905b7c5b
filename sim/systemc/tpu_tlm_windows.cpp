/* tpu_tlm_chip's windows: the counters window, the read-only windows (error message,
 * buffer table), the program window, the HBM windows (whole buffers straight to the device,
 * parts through a copy) and the feed windows (one device infeed / outfeed call per
 * transaction, from any thread). The access rules are tpu_tlm_regs.h's; the address decoding,
 * registers, commands and the run are in tpu_tlm_chip.cpp. */
#include "tpu_tlm_chip.h"
#include "tpu_tlm_int.h"

#include <atomic>
#include <cinttypes>
#include <iterator>
#include <list>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstring>

using sc_core::sc_time;
using tlm::tlm_generic_payload;
using tlm::tlm_response_status;
using namespace tpu_tlm;

/* ---- read-only windows, counters, program ------------------------------------------------ */

tlm_response_status tpu_tlm_chip::window_read(tlm_generic_payload &t, uint64_t off,
                                              const uint8_t *src, size_t src_len, bool debug)
{
    const uint64_t len = t.get_data_length();
    if (t.is_write())
        return reject(debug, tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                      "write of %" PRIu64 " bytes at 0x%012" PRIx64 ": the error message window "
                      "and the buffer table are read only",
                      len, (uint64_t)t.get_address());
    if (!inside(off, len, src_len))
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "read of %" PRIu64 " bytes at 0x%012" PRIx64 " runs past the end of its "
                      "window (%zu bytes); keep the access inside it",
                      len, (uint64_t)t.get_address(), src_len);
    std::memcpy(t.get_data_ptr(), src + off, len);
    return tlm::TLM_OK_RESPONSE;
}

tlm_response_status tpu_tlm_chip::counters_read(tlm_generic_payload &t, uint64_t off,
                                                bool debug)
{
    const uint64_t len = t.get_data_length();
    if (off % 4 || len % 4 || t.get_streaming_width() < len)
        return reject(debug, tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                      "counters %s of %" PRIu64 " bytes at offset 0x%03" PRIx64 ": the counters "
                      "window takes a multiple of 4 bytes at a 4-aligned offset",
                      cmd_word(t), len, TPU_TLM_REG_COUNTERS + off);
    if (t.get_byte_enable_ptr() && t.get_byte_enable_length() > 0)
        return reject(debug, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                      "counters read at offset 0x%03" PRIx64 " with byte enables: the counters "
                      "window takes all byte lanes; clear the byte enable pointer",
                      TPU_TLM_REG_COUNTERS + off);
    if (!inside(off, len, TPU_TLM_COUNTERS_SIZE))
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "counters read of %" PRIu64 " bytes at offset 0x%03" PRIx64 " runs past "
                      "the window's end (0x%03" PRIx64 ")",
                      len, TPU_TLM_REG_COUNTERS + off, kCountersEnd);
    if (t.is_write())
        return reject(debug, tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                      "write to the counters window at offset 0x%03" PRIx64 ": counters are "
                      "read only (they start at zero when the chip is powered on)",
                      TPU_TLM_REG_COUNTERS + off);
    if (!m_dev)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                      "counters read while the chip is powered off: power it on first");
    if (m_busy)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                      "counters read during a run: the cores change them on their own "
                      "threads; read them after the run's interrupt (STATUS.DONE)");
    if (m_counter_core >= m_n_cores)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                      "counters read: COUNTER_CORE %" PRIu32 " is out of range: the device has "
                      "%" PRIu32 " cores (0 to %" PRIu32 ")",
                      m_counter_core, m_n_cores, m_n_cores - 1);
    struct tpu_core_counters c;
    tpu_device_counters(m_dev, m_counter_core, &c);
    uint64_t v[TPU_TLM_N_COUNTERS];
    v[TPU_TLM_CNT_CYCLES] = c.cycles;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        v[TPU_TLM_CNT_BUSY(u)] = c.busy[u];
    for (int s = 0; s < TPU_STALL_COUNT; s++)
        v[TPU_TLM_CNT_STALL(s)] = c.stall[s];
    v[TPU_TLM_CNT_HBM_READ_BYTES] = c.hbm_read_bytes;
    v[TPU_TLM_CNT_HBM_WRITE_BYTES] = c.hbm_write_bytes;
    v[TPU_TLM_CNT_INFEED_BYTES] = c.infeed_bytes;
    v[TPU_TLM_CNT_OUTFEED_BYTES] = c.outfeed_bytes;
    v[TPU_TLM_CNT_ICI_BYTES] = c.ici_bytes;
    v[TPU_TLM_CNT_MXU_MAC_SLOTS] = c.mxu_mac_slots;
    v[TPU_TLM_CNT_MACS] = c.macs;
    v[TPU_TLM_CNT_OPS] = c.ops;
    v[TPU_TLM_CNT_ITERATIONS] = c.iterations;
    uint8_t bytes[TPU_TLM_COUNTERS_SIZE];
    for (int i = 0; i < TPU_TLM_N_COUNTERS; i++)
        put64(bytes + 8 * i, v[i]);
    std::memcpy(t.get_data_ptr(), bytes + off, len);
    return tlm::TLM_OK_RESPONSE;
}

tlm_response_status tpu_tlm_chip::prog_access(tlm_generic_payload &t, uint64_t off, bool debug)
{
    const uint64_t len = t.get_data_length();
    if (!inside(off, len, TPU_TLM_PROG_SIZE))
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "program window %s of %" PRIu64 " bytes at offset 0x%" PRIx64 " runs past "
                      "the window's end (%llu bytes); a program's text must fit the window",
                      cmd_word(t), len, off, TPU_TLM_PROG_SIZE);
    if (t.get_byte_enable_ptr() && t.get_byte_enable_length() > 0)
        return reject(debug, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                      "program window %s with byte enables: the program window takes whole "
                      "bytes; clear the byte enable pointer",
                      cmd_word(t));
    if (t.is_write()) {
        if (m_prog.size() < off + len)
            m_prog.resize(off + len, 0);
        std::memcpy(m_prog.data() + off, t.get_data_ptr(), len);
    } else {
        std::memset(t.get_data_ptr(), 0, len);
        if (off < m_prog.size()) {
            uint64_t n = m_prog.size() - off < len ? m_prog.size() - off : len;
            std::memcpy(t.get_data_ptr(), m_prog.data() + off, n);
        }
    }
    return tlm::TLM_OK_RESPONSE;
}

/* ---- HBM ------------------------------------------------------------------------------ */

tlm_response_status tpu_tlm_chip::hbm_access(tlm_generic_payload &t, uint32_t core, uint64_t off,
                                             sc_time *delay, bool debug)
{
    const uint64_t len = t.get_data_length();
    if (!m_dev)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                      "HBM %s while the chip is powered off: power it on first", cmd_word(t));
    if (core >= m_n_cores)
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "HBM %s at 0x%012" PRIx64 " is in the window of core %" PRIu32 ", but the "
                      "device has %" PRIu32 " cores (0 to %" PRIu32 ")",
                      cmd_word(t), (uint64_t)t.get_address(), core, m_n_cores, m_n_cores - 1);
    if (m_buf_off.empty())
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                      "HBM %s with no program loaded: the HBM windows hold the loaded program's "
                      "buffers; LOAD_PROGRAM first",
                      cmd_word(t));
    if (m_busy)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                      "HBM %s during a run: the cores own HBM until the run ends; wait for the "
                      "run's interrupt (STATUS.DONE)",
                      cmd_word(t));
    /* the buffer holding off: the last whose offset is <= off */
    size_t lo = 0, hi = m_buf_off.size();
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (m_buf_off[mid] <= off)
            lo = mid;
        else
            hi = mid;
    }
    const uint32_t id = (uint32_t)lo;
    if (off < m_buf_off[id] || !inside(off - m_buf_off[id], len, m_buf_size[id]))
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "HBM %s of %" PRIu64 " bytes at core %" PRIu32 " offset 0x%" PRIx64
                      ": an access lies inside one buffer of the buffer table (the nearest, "
                      "buffer %" PRIu32 ", is 0x%" PRIx64 "-0x%" PRIx64 ")",
                      cmd_word(t), len, core, off, id, m_buf_off[id],
                      m_buf_off[id] + m_buf_size[id]);
    const uint64_t boff = off - m_buf_off[id];
    const uint64_t bsize = m_buf_size[id];
    const bool whole = boff == 0 && len == bsize && !(t.get_byte_enable_ptr() &&
                                                      t.get_byte_enable_length() > 0);
    struct tpu_diag d = {};
    int rc;
    if (whole) {
        rc = t.is_write() ? tpu_device_write(m_dev, core, id, t.get_data_ptr(), len, &d)
                          : tpu_device_read(m_dev, core, id, t.get_data_ptr(), len, &d);
    } else {
        /* part of a buffer: through a copy of the whole one */
        m_scratch.resize(bsize);
        rc = tpu_device_read(m_dev, core, id, m_scratch.data(), bsize, &d);
        if (!rc) {
            uint8_t *p = t.get_data_ptr();
            for (uint64_t i = 0; i < len; i++) {
                if (!lane_enabled(t, i))
                    continue;
                if (t.is_write())
                    m_scratch[boff + i] = p[i];
                else
                    p[i] = m_scratch[boff + i];
            }
            if (t.is_write())
                rc = tpu_device_write(m_dev, core, id, m_scratch.data(), bsize, &d);
        }
    }
    if (rc)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_DEVICE, rc,
                      "HBM %s of core %" PRIu32 " buffer %" PRIu32 ": %s", cmd_word(t), core, id,
                      d.msg);
    if (delay)
        *delay += clock_period() * std::ceil((double)len / m_hbm_bytes_per_cycle);
    return tlm::TLM_OK_RESPONSE;
}

/* ---- feeds ------------------------------------------------------------------------------ */

/* Whether the caller is a SystemC thread process of this simulation, which may wait(). Only
 * the kernel's own OS thread is asked for its current process: another thread is never one. */
bool tpu_tlm_chip::on_sc_thread() const
{
    if (std::this_thread::get_id() != m_kernel_tid)
        return false;
    sc_core::sc_process_handle h = sc_core::sc_get_current_process_handle();
    return h.valid() && (h.proc_kind() == sc_core::SC_THREAD_PROC_ ||
                         h.proc_kind() == sc_core::SC_CTHREAD_PROC_);
}

/* One tpu_device_infeed / tpu_device_outfeed. From a SystemC thread process the call runs on
 * a helper thread while the process wait()s on feed_ev (posted through async_request_update
 * when the call returns), so the kernel keeps scheduling the other processes meanwhile: a
 * process draining an outfeed does not stop another from feeding the infeed the run needs.
 * Elsewhere (a host thread, sc_main between sc_start calls, an SC_METHOD, which may not wait)
 * the call blocks the calling thread, as the device API does. */
int tpu_tlm_chip::feed_call(struct tpu_device *dev, uint32_t core, bool infeed, uint8_t *data,
                            size_t len, uint64_t host_cycle, uint64_t *ready,
                            struct tpu_diag *d)
{
    if (!on_sc_thread())
        return infeed ? tpu_device_infeed(dev, core, data, len, host_cycle, d)
                      : tpu_device_outfeed(dev, core, data, len, host_cycle, ready, d);
    std::atomic<bool> done{false};
    int rc = 0;
    std::list<std::thread>::iterator it;
    m_chan.hold(); /* the simulation must not end for lack of events while the call blocks */
    {
        std::lock_guard<std::mutex> g(m_feed_lock);
        m_feed_threads.emplace_back();
        it = std::prev(m_feed_threads.end());
        *it = std::thread([&] {
            rc = infeed ? tpu_device_infeed(dev, core, data, len, host_cycle, d)
                        : tpu_device_outfeed(dev, core, data, len, host_cycle, ready, d);
            done.store(true);
            m_chan.post_feed();
        });
    }
    while (!done.load())
        sc_core::wait(m_chan.feed_ev);
    {
        std::lock_guard<std::mutex> g(m_feed_lock);
        it->join();
        m_feed_threads.erase(it);
    }
    m_chan.release();
    return rc;
}

tlm_response_status tpu_tlm_chip::feed_access(tlm_generic_payload &t, uint32_t core, bool infeed,
                                              sc_time *delay)
{
    const char *win = infeed ? "infeed" : "outfeed";
    const uint64_t a = (uint64_t)t.get_address();
    const uint64_t len = t.get_data_length();
    tpu_tlm_feed_ext *ext = nullptr;
    t.get_extension(ext);
    struct tpu_device *dev;
    uint32_t n_cores;
    double link_latency_ns, link_gbytes_per_s;
    {
        std::lock_guard<std::mutex> g(m_lock);
        dev = m_dev;
        n_cores = m_n_cores;
        link_latency_ns = m_link_latency_ns;
        link_gbytes_per_s = m_link_gbytes_per_s;
        tlm_response_status st = tlm::TLM_OK_RESPONSE;
        if (!dev)
            st = reject(false, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                        "%s %s while the chip is powered off: power it on first", win,
                        cmd_word(t));
        else if (core >= n_cores)
            st = reject(false, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                        "%s %s at 0x%012" PRIx64 " is in the window of core %" PRIu32 ", but the "
                        "device has %" PRIu32 " cores (0 to %" PRIu32 ")",
                        win, cmd_word(t), a, core, n_cores, n_cores - 1);
        else if (a % TPU_TLM_CORE_STRIDE)
            st = reject(false, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                        "%s %s at 0x%012" PRIx64 ": one transaction is one tensor and starts at "
                        "its core's window base 0x%012" PRIx64,
                        win, cmd_word(t), a, (uint64_t)(a - a % TPU_TLM_CORE_STRIDE));
        else if (len == 0 || t.get_streaming_width() < len)
            st = reject(false, tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                        "%s %s of %" PRIu64 " bytes with streaming width %u: one transaction "
                        "carries one whole tensor; set the streaming width to the data length",
                        win, cmd_word(t), len, t.get_streaming_width());
        else if (t.get_byte_enable_ptr() && t.get_byte_enable_length() > 0)
            st = reject(false, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                        "%s %s with byte enables: a tensor moves whole; clear the byte enable "
                        "pointer",
                        win, cmd_word(t));
        else if (t.is_write() != infeed)
            st = reject(false, tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                        "%s of the %s window of core %" PRIu32 ": the infeed window takes "
                        "writes, the outfeed window reads",
                        cmd_word(t), win, core);
        if (st != tlm::TLM_OK_RESPONSE) {
            if (ext) {
                ext->status = TPU_EINVAL;
                ext->diag.code = ext->status;
                snprintf(ext->diag.msg, sizeof ext->diag.msg, "%s", m_errmsg);
            }
            return st;
        }
    }
    uint64_t host_cycle;
    if (ext) {
        host_cycle = ext->host_cycle;
    } else {
        /* the transaction's SystemC time; only meaningful from a SystemC process */
        host_cycle = time_to_cycles(sc_core::sc_time_stamp() +
                                    (delay ? *delay : sc_core::SC_ZERO_TIME));
    }
    struct tpu_diag d = {};
    uint64_t ready = 0;
    int rc = feed_call(dev, core, infeed, t.get_data_ptr(), len, host_cycle, &ready, &d);
    if (ext) {
        ext->status = rc;
        ext->diag = d;
        ext->ready_cycle = ready;
    }
    if (rc) {
        std::lock_guard<std::mutex> g(m_lock);
        return reject(false, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_DEVICE, rc,
                      "%s of core %" PRIu32 ": %s", win, core, d.msg);
    }
    if (delay) {
        double ns = link_latency_ns + (double)len / link_gbytes_per_s;
        *delay += time_of(ns, 1e6); /* no sc_time constructor: any thread */
    }
    return tlm::TLM_OK_RESPONSE;
}
