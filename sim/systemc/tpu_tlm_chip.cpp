/* tpu_tlm_chip: the TLM-2.0 target around the native device. tpu_tlm_chip.h says what it is
 * and how time and threads work; tpu_tlm_regs.h is the register map this file implements.
 * Here: decoding an address to a register or window, the access rules with their error
 * responses, the commands, the HBM and feed windows, and the run's path back into the
 * SystemC kernel. */
#include "tpu_tlm_chip.h"
#include "tpu_tlm_int.h"

#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

using sc_core::sc_time;
using tlm::tlm_generic_payload;
using tlm::tlm_response_status;

/* ---- the async channel ------------------------------------------------------------------ */

void tpu_tlm_async_channel::post_run_done()
{
    m_run_pending.store(true);
    async_request_update();
}

void tpu_tlm_async_channel::post_irq()
{
    m_irq_pending.store(true);
    async_request_update();
}

void tpu_tlm_async_channel::post_feed()
{
    m_feed_pending.store(true);
    async_request_update();
}

void tpu_tlm_async_channel::hold()
{
    if (m_holds++ == 0)
        async_attach_suspending();
}

void tpu_tlm_async_channel::release()
{
    if (--m_holds == 0)
        async_detach_suspending();
}

void tpu_tlm_async_channel::update()
{
    if (m_run_pending.exchange(false))
        run_done_ev.notify(sc_core::SC_ZERO_TIME);
    if (m_irq_pending.exchange(false))
        irq_ev.notify(sc_core::SC_ZERO_TIME);
    if (m_feed_pending.exchange(false))
        feed_ev.notify(sc_core::SC_ZERO_TIME);
}

using namespace tpu_tlm;

/* ---- construction, power -------------------------------------------------------------- */

tpu_tlm_chip::tpu_tlm_chip(sc_core::sc_module_name name)
    : sc_core::sc_module(name), socket("socket"), irq("irq"), m_chan("async"),
      m_kernel_tid(std::this_thread::get_id())
{
    m_res_t = sc_core::sc_get_time_resolution();
    m_res_fs = std::round(m_res_t.to_seconds() * 1e15);
    socket.register_b_transport(this, &tpu_tlm_chip::b_transport);
    socket.register_transport_dbg(this, &tpu_tlm_chip::transport_dbg);
    socket.register_get_direct_mem_ptr(this, &tpu_tlm_chip::get_direct_mem_ptr);
    SC_THREAD(completion_thread);
    SC_METHOD(irq_method);
    sensitive << m_chan.irq_ev;
}

tpu_tlm_chip::~tpu_tlm_chip()
{
    struct tpu_device *dev;
    {
        std::lock_guard<std::mutex> g(m_lock);
        dev = m_dev;
    }
    bool feeds;
    {
        std::lock_guard<std::mutex> g(m_feed_lock);
        feeds = !m_feed_threads.empty();
    }
    if (m_worker.joinable() || feeds)
        tpu_device_cancel(dev); /* wakes feed calls still blocked on a queue */
    if (m_worker.joinable())
        m_worker.join();
    {
        std::lock_guard<std::mutex> g(m_feed_lock);
        for (std::thread &th : m_feed_threads)
            th.join();
        m_feed_threads.clear();
    }
    tpu_device_close(&m_dev);
}

int tpu_tlm_chip::power_on(const struct tpu_device_settings &s, struct tpu_diag *d)
{
    std::lock_guard<std::mutex> g(m_lock);
    if (m_dev) {
        if (d) {
            d->code = TPU_EINVAL;
            snprintf(d->msg, sizeof d->msg,
                     "tpu_tlm_chip %s is already powered on: one device at a time sits behind "
                     "its registers; call power_off first",
                     name());
        }
        return TPU_EINVAL;
    }
    if (s.backend && s.backend != tpu_device_backend_native()) {
        if (d) {
            d->code = TPU_EINVAL;
            snprintf(d->msg, sizeof d->msg,
                     "tpu_tlm_chip %s: settings.backend is \"%s\", but the chip behind a TLM "
                     "target is the native chip; leave settings.backend NULL",
                     name(), s.backend->name ? s.backend->name : "?");
        }
        return TPU_EINVAL;
    }
    struct tpu_device *dev = nullptr;
    int rc = tpu_device_open(&s, &dev, d);
    if (rc)
        return rc;
    const struct tpu_chip_config *chip = tpu_device_chip(dev);
    m_dev = dev;
    m_n_cores = tpu_device_n_cores(dev);
    m_clock_mhz = chip->clock_mhz;
    m_period_ps = 1e6 / chip->clock_mhz;
    m_period_t = time_of(m_period_ps, 1e3);
    m_hbm_bytes_per_cycle = chip->hbm_gbytes_per_s * 1e3 / chip->clock_mhz;
    m_link_latency_ns = chip->host_link_latency_ns;
    m_link_gbytes_per_s = chip->host_link_gbytes_per_s;
    m_ctrl = m_error_code = m_irq_status = m_irq_enable = 0;
    m_error_tpu = m_run_status = 0;
    m_prog_len = m_var_index = m_var_core = m_counter_core = m_runs = 0;
    m_var_value = m_start_cycle = m_end_cycle = 0;
    m_busy = m_done = m_canceled = m_infeed_closed = false;
    m_start_written = false;
    m_errmsg[0] = '\0';
    m_runmsg[0] = '\0';
    m_prog.clear();
    rebuild_buffer_table_locked();
    m_chan.post_irq();
    return 0;
}

int tpu_tlm_chip::power_off(struct tpu_diag *d)
{
    std::lock_guard<std::mutex> g(m_lock);
    if (m_busy) {
        if (d) {
            d->code = TPU_EINVAL;
            snprintf(d->msg, sizeof d->msg,
                     "tpu_tlm_chip %s cannot power off during a run: write CANCEL to CTRL and "
                     "wait for the run's interrupt (STATUS.DONE) first",
                     name());
        }
        return TPU_EINVAL;
    }
    tpu_device_close(&m_dev);
    m_n_cores = 0;
    m_buftab.clear();
    m_buf_off.clear();
    m_buf_size.clear();
    m_prog.clear();
    m_irq_status = 0;
    m_chan.post_irq();
    return 0;
}

bool tpu_tlm_chip::powered() const
{
    std::lock_guard<std::mutex> g(m_lock);
    return m_dev != nullptr;
}

struct tpu_device *tpu_tlm_chip::device() const
{
    std::lock_guard<std::mutex> g(m_lock);
    return m_dev;
}

sc_time tpu_tlm_chip::time_of(double v, double unit_fs) const
{
    /* sc_time(v, unit)'s rounding (SystemC 2.3: v x unit / resolution + 0.5, truncated),
     * made of the cached resolution with inline arithmetic only */
    double steps = std::trunc(v * (unit_fs / m_res_fs) + 0.5);
    return m_res_t * steps;
}

sc_time tpu_tlm_chip::clock_period() const { return m_period_t; }

sc_time tpu_tlm_chip::cycles_to_time(uint64_t cycles) const
{
    return sc_time((double)cycles * m_period_ps, sc_core::SC_PS);
}

uint64_t tpu_tlm_chip::time_to_cycles(const sc_time &t) const
{
    if (m_period_ps <= 0)
        return 0;
    /* half a resolution step up before rounding down: a time made by cycles_to_time
     * (rounded to the nearest step) gives its cycle count back */
    double ps = (double)t.value() * m_res_fs * 1e-3;
    double half_step_ps = m_res_fs * 1e-3 / 2;
    return (uint64_t)std::floor((ps + half_step_ps) / m_period_ps);
}

/* ---- errors --------------------------------------------------------------------------- */

void tpu_tlm_chip::record_locked(enum tpu_tlm_err code, int tpu_rc, const char *msg)
{
    m_error_code = (uint32_t)code;
    m_error_tpu = tpu_rc;
    snprintf(m_errmsg, sizeof m_errmsg, "%s", msg);
}

tlm_response_status tpu_tlm_chip::reject(bool debug, tlm_response_status st,
                                         enum tpu_tlm_err code, int tpu_rc, const char *fmt,
                                         ...)
{
    if (debug)
        return st;
    char msg[TPU_DIAG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record_locked(code, tpu_rc, msg);
    return st;
}

/* ---- transport entries ---------------------------------------------------------------- */

void tpu_tlm_chip::b_transport(tlm_generic_payload &t, sc_time &delay)
{
    t.set_dmi_allowed(false);
    t.set_response_status(access(t, &delay, false));
}

unsigned tpu_tlm_chip::transport_dbg(tlm_generic_payload &t)
{
    if (!t.is_read())
        return 0; /* debug writes are not supported: they would bypass the commands */
    tlm_response_status st = access(t, nullptr, true);
    return st == tlm::TLM_OK_RESPONSE ? t.get_data_length() : 0;
}

bool tpu_tlm_chip::get_direct_mem_ptr(tlm_generic_payload &t, tlm::tlm_dmi &dmi)
{
    /* No DMI anywhere (tpu_tlm_regs.h says why); the whole address space is denied so that
     * an initiator does not ask again. */
    (void)t;
    dmi.init();
    dmi.allow_none();
    dmi.set_start_address(0);
    dmi.set_end_address(~(sc_dt::uint64)0);
    return false;
}

tlm_response_status tpu_tlm_chip::access(tlm_generic_payload &t, sc_time *delay, bool debug)
{
    const uint64_t a = (uint64_t)t.get_address();
    const uint64_t len = t.get_data_length();
    if (t.is_read() == t.is_write()) /* TLM_IGNORE_COMMAND */
        return tlm::TLM_OK_RESPONSE;

    /* the feed windows: no register lock, any thread */
    if (a >= TPU_TLM_INFEED_BASE && a - TPU_TLM_INFEED_BASE < 2 * kFeedSpan) {
        bool infeed = a < TPU_TLM_OUTFEED_BASE;
        uint64_t off = a - (infeed ? TPU_TLM_INFEED_BASE : TPU_TLM_OUTFEED_BASE);
        if (debug)
            return tlm::TLM_COMMAND_ERROR_RESPONSE; /* a debug read would take a tensor */
        return feed_access(t, (uint32_t)(off / TPU_TLM_CORE_STRIDE), infeed, delay);
    }

    std::lock_guard<std::mutex> g(m_lock);
    if (len == 0)
        return reject(debug, tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                      "%s of 0 bytes at 0x%012" PRIx64 ": every access moves at least one byte; "
                      "set the payload's data length",
                      cmd_word(t), a);
    if (a < TPU_TLM_REG_SIZE) {
        if (a >= TPU_TLM_REG_COUNTERS && a < kCountersEnd)
            return counters_read(t, a - TPU_TLM_REG_COUNTERS, debug);
        return reg_access(t, a, delay, debug);
    }
    if (t.get_streaming_width() < len)
        return reject(debug, tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                      "%s of %" PRIu64 " bytes at 0x%012" PRIx64 " with streaming width %u: the "
                      "chip's windows are memory, not FIFOs; set the streaming width to the "
                      "data length",
                      cmd_word(t), len, a, t.get_streaming_width());
    const bool read_only_window =
        (a >= TPU_TLM_ERRMSG_BASE && a < TPU_TLM_ERRMSG_BASE + TPU_TLM_ERRMSG_SIZE) ||
        (a >= TPU_TLM_RUNMSG_BASE && a < TPU_TLM_RUNMSG_BASE + TPU_TLM_RUNMSG_SIZE) ||
        (a >= TPU_TLM_WATCH_BASE && a < TPU_TLM_WATCH_BASE + TPU_TLM_WATCH_SIZE) ||
        (a >= TPU_TLM_BUFTAB_BASE && a < TPU_TLM_BUFTAB_BASE + TPU_TLM_BUFTAB_SIZE);
    if (read_only_window && t.get_byte_enable_ptr() && t.get_byte_enable_length() > 0)
        return reject(debug, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                      "%s at 0x%012" PRIx64 " with byte enables: the error message window and "
                      "the buffer table take whole bytes; clear the byte enable pointer",
                      cmd_word(t), a);
    if (a >= TPU_TLM_ERRMSG_BASE && a < TPU_TLM_ERRMSG_BASE + TPU_TLM_ERRMSG_SIZE) {
        static_assert(sizeof m_errmsg == TPU_TLM_ERRMSG_SIZE, "message window size");
        return window_read(t, a - TPU_TLM_ERRMSG_BASE, (const uint8_t *)m_errmsg,
                           sizeof m_errmsg, debug);
    }
    if (a >= TPU_TLM_RUNMSG_BASE && a < TPU_TLM_RUNMSG_BASE + TPU_TLM_RUNMSG_SIZE) {
        static_assert(sizeof m_runmsg == TPU_TLM_RUNMSG_SIZE, "run message window size");
        return window_read(t, a - TPU_TLM_RUNMSG_BASE, (const uint8_t *)m_runmsg,
                           sizeof m_runmsg, debug);
    }
    if (a >= TPU_TLM_WATCH_BASE && a < TPU_TLM_WATCH_BASE + TPU_TLM_WATCH_SIZE) {
        uint8_t snap[TPU_TLM_WATCH_SIZE] = {};
        if (m_dev) {
            struct tpu_device_watch w = {};
            tpu_device_watch(m_dev, &w);
            put32(snap + TPU_TLM_WATCH_FLAGS, (w.running ? TPU_TLM_WATCH_RUNNING : 0u) |
                                                  (w.cores_blocked ? TPU_TLM_WATCH_BLOCKED : 0u));
            put32(snap + TPU_TLM_WATCH_HOST_CALLS, w.host_calls_waiting);
            put64(snap + TPU_TLM_WATCH_MOVES, w.moves);
            std::memcpy(snap + TPU_TLM_WATCH_WHY, w.why, sizeof w.why);
            snap[TPU_TLM_WATCH_WHY + TPU_TLM_WATCH_WHY_SIZE - 1] = 0;
        }
        return window_read(t, a - TPU_TLM_WATCH_BASE, snap, sizeof snap, debug);
    }
    if (a >= TPU_TLM_BUFTAB_BASE && a < TPU_TLM_BUFTAB_BASE + TPU_TLM_BUFTAB_SIZE) {
        if (!inside(a - TPU_TLM_BUFTAB_BASE, len, TPU_TLM_BUFTAB_SIZE))
            return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                          "%s of %" PRIu64 " bytes at 0x%012" PRIx64 " runs past the end of the "
                          "buffer table (0x%012llx + 0x%llx); keep the access inside it",
                          cmd_word(t), len, a, TPU_TLM_BUFTAB_BASE, TPU_TLM_BUFTAB_SIZE);
        /* entries past N_BUFFERS read as zeros */
        uint64_t off = a - TPU_TLM_BUFTAB_BASE;
        if (t.is_write())
            return window_read(t, off, m_buftab.data(), m_buftab.size(), debug);
        std::memset(t.get_data_ptr(), 0, len);
        if (off < m_buftab.size()) {
            uint64_t n = m_buftab.size() - off < len ? m_buftab.size() - off : len;
            std::memcpy(t.get_data_ptr(), m_buftab.data() + off, n);
        }
        if (delay)
            *delay += clock_period();
        return tlm::TLM_OK_RESPONSE;
    }
    if (a >= TPU_TLM_PROG_BASE && a < TPU_TLM_PROG_BASE + TPU_TLM_PROG_SIZE)
        return prog_access(t, a - TPU_TLM_PROG_BASE, debug);
    if (a >= TPU_TLM_HBM_BASE && a - TPU_TLM_HBM_BASE < kFeedSpan) {
        uint64_t off = a - TPU_TLM_HBM_BASE;
        return hbm_access(t, (uint32_t)(off / TPU_TLM_CORE_STRIDE), off % TPU_TLM_CORE_STRIDE,
                          delay, debug);
    }
    return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                  "%s at 0x%012" PRIx64 ": no register or window of the chip is there; see "
                  "tpu_tlm_regs.h's address map",
                  cmd_word(t), a);
}

/* ---- registers ------------------------------------------------------------------------- */

uint32_t tpu_tlm_chip::status_locked() const
{
    uint32_t s = 0;
    if (m_dev)
        s |= TPU_TLM_STATUS_POWERED;
    if (m_dev && tpu_device_program(m_dev))
        s |= TPU_TLM_STATUS_LOADED;
    if (m_busy)
        s |= TPU_TLM_STATUS_BUSY;
    if (m_done)
        s |= TPU_TLM_STATUS_DONE;
    if (m_error_code)
        s |= TPU_TLM_STATUS_ERROR;
    if (m_canceled)
        s |= TPU_TLM_STATUS_CANCELED;
    if (m_infeed_closed)
        s |= TPU_TLM_STATUS_INFEED_CLOSED;
    return s;
}

namespace {
/* Whether off is a register, and whether it takes writes. */
bool reg_exists(uint64_t off, bool *writable)
{
    switch (off) {
    case TPU_TLM_REG_CTRL:
    case TPU_TLM_REG_IRQ_STATUS:
    case TPU_TLM_REG_IRQ_ENABLE:
    case TPU_TLM_REG_PROG_LEN:
    case TPU_TLM_REG_VAR_INDEX:
    case TPU_TLM_REG_VAR_CORE:
    case TPU_TLM_REG_VAR_VALUE_LO:
    case TPU_TLM_REG_VAR_VALUE_HI:
    case TPU_TLM_REG_START_CYCLE_LO:
    case TPU_TLM_REG_START_CYCLE_HI:
    case TPU_TLM_REG_COUNTER_CORE:
        *writable = true;
        return true;
    case TPU_TLM_REG_ID:
    case TPU_TLM_REG_VERSION:
    case TPU_TLM_REG_STATUS:
    case TPU_TLM_REG_ERROR_CODE:
    case TPU_TLM_REG_ERROR_TPU:
    case TPU_TLM_REG_N_CORES:
    case TPU_TLM_REG_N_BUFFERS:
    case TPU_TLM_REG_N_VARS:
    case TPU_TLM_REG_END_CYCLE_LO:
    case TPU_TLM_REG_END_CYCLE_HI:
    case TPU_TLM_REG_RUN_STATUS:
    case TPU_TLM_REG_RUNS:
    case TPU_TLM_REG_CLOCK_PERIOD_PS:
        *writable = false;
        return true;
    default:
        return false;
    }
}
} // namespace

uint32_t tpu_tlm_chip::reg_read(uint64_t off) const
{
    const struct tpu_program *p = m_dev ? tpu_device_program(m_dev) : nullptr;
    switch (off) {
    case TPU_TLM_REG_ID: return TPU_TLM_ID_VALUE;
    case TPU_TLM_REG_VERSION: return TPU_TLM_VERSION_VALUE;
    case TPU_TLM_REG_CTRL: return m_ctrl;
    case TPU_TLM_REG_STATUS: return status_locked();
    case TPU_TLM_REG_ERROR_CODE: return m_error_code;
    case TPU_TLM_REG_ERROR_TPU: return (uint32_t)m_error_tpu;
    case TPU_TLM_REG_IRQ_STATUS: return m_irq_status;
    case TPU_TLM_REG_IRQ_ENABLE: return m_irq_enable;
    case TPU_TLM_REG_PROG_LEN: return m_prog_len;
    case TPU_TLM_REG_N_CORES: return m_n_cores;
    case TPU_TLM_REG_N_BUFFERS: return p ? (uint32_t)tpu_program_n_buffers(p) : 0;
    case TPU_TLM_REG_N_VARS: return p ? (uint32_t)tpu_program_n_vars(p) : 0;
    case TPU_TLM_REG_VAR_INDEX: return m_var_index;
    case TPU_TLM_REG_VAR_CORE: return m_var_core;
    case TPU_TLM_REG_VAR_VALUE_LO: return (uint32_t)m_var_value;
    case TPU_TLM_REG_VAR_VALUE_HI: return (uint32_t)(m_var_value >> 32);
    case TPU_TLM_REG_START_CYCLE_LO: return (uint32_t)m_start_cycle;
    case TPU_TLM_REG_START_CYCLE_HI: return (uint32_t)(m_start_cycle >> 32);
    case TPU_TLM_REG_END_CYCLE_LO: return (uint32_t)m_end_cycle;
    case TPU_TLM_REG_END_CYCLE_HI: return (uint32_t)(m_end_cycle >> 32);
    case TPU_TLM_REG_RUN_STATUS: return (uint32_t)m_run_status;
    case TPU_TLM_REG_RUNS: return m_runs;
    case TPU_TLM_REG_CLOCK_PERIOD_PS: return (uint32_t)std::lround(m_period_ps);
    case TPU_TLM_REG_COUNTER_CORE: return m_counter_core;
    default: return 0;
    }
}

tlm_response_status tpu_tlm_chip::reg_access(tlm_generic_payload &t, uint64_t off,
                                             sc_time *delay, bool debug)
{
    const uint64_t len = t.get_data_length();
    bool writable = false;
    if (len != 4 || off % 4 != 0 || t.get_streaming_width() < 4)
        return reject(debug, tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                      "register %s of %" PRIu64 " bytes at offset 0x%03" PRIx64 " (streaming "
                      "width %u): registers take exactly 4 bytes at a 4-aligned offset; use one "
                      "32-bit access per register",
                      cmd_word(t), len, off, t.get_streaming_width());
    if (t.get_byte_enable_ptr() && t.get_byte_enable_length() > 0)
        return reject(debug, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                      "register %s at offset 0x%03" PRIx64 " with byte enables: registers take "
                      "all four byte lanes; clear the payload's byte enable pointer",
                      cmd_word(t), off);
    if (!reg_exists(off, &writable))
        return reject(debug, tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                      "register %s at offset 0x%03" PRIx64 ": no register there; the registers "
                      "are 0x000-0x%03x and the counters window 0x%03x-0x%03" PRIx64
                      " (tpu_tlm_regs.h)",
                      cmd_word(t), off, TPU_TLM_REG_COUNTER_CORE, TPU_TLM_REG_COUNTERS,
                      kCountersEnd - 1);
    const bool have_delay = delay != nullptr;
    const sc_time at = delay ? *delay : sc_core::SC_ZERO_TIME; /* before this access's cost */
    if (delay)
        *delay += clock_period();
    if (t.is_read()) {
        put32(t.get_data_ptr(), reg_read(off));
        return tlm::TLM_OK_RESPONSE;
    }
    if (!writable)
        return reject(debug, tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                      "write to the read-only register at offset 0x%03" PRIx64 "; only CTRL, "
                      "IRQ_STATUS, IRQ_ENABLE, PROG_LEN, VAR_*, START_CYCLE_* and COUNTER_CORE "
                      "take writes",
                      off);
    m_have_access_delay = have_delay;
    m_access_delay = at;
    tlm_response_status st = reg_write(off, get32(t.get_data_ptr()), debug);
    m_have_access_delay = false;
    return st;
}

tlm_response_status tpu_tlm_chip::reg_write(uint64_t off, uint32_t v, bool debug)
{
    switch (off) {
    case TPU_TLM_REG_CTRL:
        m_ctrl = v;
        return command(v, debug);
    case TPU_TLM_REG_IRQ_STATUS:
        m_irq_status &= ~v;
        m_chan.post_irq();
        break;
    case TPU_TLM_REG_IRQ_ENABLE:
        m_irq_enable = v & TPU_TLM_IRQ_ALL;
        m_chan.post_irq();
        break;
    case TPU_TLM_REG_PROG_LEN:
        if (v > TPU_TLM_PROG_SIZE)
            return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                          "PROG_LEN %" PRIu32 " is larger than the program window (%llu bytes); "
                          "a program's text must fit the window",
                          v, TPU_TLM_PROG_SIZE);
        m_prog_len = v;
        break;
    case TPU_TLM_REG_VAR_INDEX: m_var_index = v; break;
    case TPU_TLM_REG_VAR_CORE: m_var_core = v; break;
    case TPU_TLM_REG_VAR_VALUE_LO: m_var_value = (m_var_value & ~0xffffffffull) | v; break;
    case TPU_TLM_REG_VAR_VALUE_HI:
        m_var_value = (m_var_value & 0xffffffffull) | (uint64_t)v << 32;
        break;
    case TPU_TLM_REG_START_CYCLE_LO:
        m_start_cycle = (m_start_cycle & ~0xffffffffull) | v;
        m_start_written = true;
        break;
    case TPU_TLM_REG_START_CYCLE_HI:
        m_start_cycle = (m_start_cycle & 0xffffffffull) | (uint64_t)v << 32;
        m_start_written = true;
        break;
    case TPU_TLM_REG_COUNTER_CORE: m_counter_core = v; break;
    default: break;
    }
    return tlm::TLM_OK_RESPONSE;
}

/* ---- commands -------------------------------------------------------------------------- */

namespace {
const char *cmd_name(uint32_t cmd)
{
    switch (cmd) {
    case TPU_TLM_CMD_LOAD_PROGRAM: return "LOAD_PROGRAM";
    case TPU_TLM_CMD_LAUNCH: return "LAUNCH";
    case TPU_TLM_CMD_CANCEL: return "CANCEL";
    case TPU_TLM_CMD_RESET_CANCEL: return "RESET_CANCEL";
    case TPU_TLM_CMD_INFEED_CLOSE: return "INFEED_CLOSE";
    case TPU_TLM_CMD_SET_VAR: return "SET_VAR";
    case TPU_TLM_CMD_GET_VAR: return "GET_VAR";
    case TPU_TLM_CMD_CLEAR_ERROR: return "CLEAR_ERROR";
    default: return nullptr;
    }
}
} // namespace

tlm_response_status tpu_tlm_chip::command(uint32_t cmd, bool debug)
{
    const char *name_ = cmd_name(cmd);
    if (!name_)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                      "CTRL command 0x%02" PRIx32 " is unknown; the commands are 0x01 "
                      "LOAD_PROGRAM to 0x08 CLEAR_ERROR (tpu_tlm_regs.h)",
                      cmd);
    if (cmd == TPU_TLM_CMD_CLEAR_ERROR) {
        record_locked(TPU_TLM_ERR_NONE, 0, "");
        return tlm::TLM_OK_RESPONSE;
    }
    if (!m_dev)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                      "CTRL command %s while the chip is powered off: power it on first "
                      "(tpu_tlm_chip::power_on)",
                      name_);
    bool needs_idle = cmd == TPU_TLM_CMD_LOAD_PROGRAM || cmd == TPU_TLM_CMD_LAUNCH ||
                      cmd == TPU_TLM_CMD_RESET_CANCEL || cmd == TPU_TLM_CMD_SET_VAR ||
                      cmd == TPU_TLM_CMD_GET_VAR;
    if (needs_idle && m_busy)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                      "CTRL command %s while a run is under way (STATUS.BUSY): wait for the run's "
                      "interrupt (STATUS.DONE), or write CANCEL first",
                      name_);
    const struct tpu_program *p = tpu_device_program(m_dev);
    switch (cmd) {
    case TPU_TLM_CMD_LOAD_PROGRAM: return cmd_load(debug);
    case TPU_TLM_CMD_LAUNCH: return cmd_launch(debug);
    case TPU_TLM_CMD_CANCEL:
        tpu_device_cancel(m_dev);
        m_canceled = true;
        return tlm::TLM_OK_RESPONSE;
    case TPU_TLM_CMD_RESET_CANCEL:
        tpu_device_reset_cancel(m_dev);
        m_canceled = m_infeed_closed = false;
        return tlm::TLM_OK_RESPONSE;
    case TPU_TLM_CMD_INFEED_CLOSE:
        tpu_device_infeed_close(m_dev);
        m_infeed_closed = true;
        return tlm::TLM_OK_RESPONSE;
    default: break;
    }
    /* SET_VAR, GET_VAR */
    if (!p)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                      "CTRL command %s with no program loaded: write the program's text to the "
                      "program window, its length to PROG_LEN, and LOAD_PROGRAM first",
                      name_);
    size_t n_vars = tpu_program_n_vars(p);
    if (m_var_index >= n_vars)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                      "%s: VAR_INDEX %" PRIu32 " is out of range: program \"%s\" has %zu "
                      "variable(s), ids 0 to %zu",
                      name_, m_var_index, tpu_program_name(p), n_vars,
                      n_vars ? n_vars - 1 : (size_t)0);
    if (cmd == TPU_TLM_CMD_SET_VAR) {
        tpu_device_set_var(m_dev, m_var_index, (int64_t)m_var_value);
        return tlm::TLM_OK_RESPONSE;
    }
    if (m_var_core >= m_n_cores)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                      "GET_VAR: VAR_CORE %" PRIu32 " is out of range: the device has %" PRIu32
                      " cores (0 to %" PRIu32 ")",
                      m_var_core, m_n_cores, m_n_cores - 1);
    m_var_value = (uint64_t)tpu_device_get_var(m_dev, m_var_core, m_var_index);
    return tlm::TLM_OK_RESPONSE;
}

tlm_response_status tpu_tlm_chip::cmd_load(bool debug)
{
    std::string text((const char *)m_prog.data(),
                     m_prog_len <= m_prog.size() ? m_prog_len : m_prog.size());
    text.resize(m_prog_len, '\0'); /* bytes never written read as zeros: the text ends there */
    struct tpu_diag d = {};
    struct tpu_program *prog = nullptr;
    int rc = tpu_program_parse(text.c_str(), "program window", &prog, &d);
    if (rc)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_PROGRAM, rc,
                      "LOAD_PROGRAM: %s", d.msg);
    /* the HBM layout must fit a core's window and the table its window */
    size_t n = tpu_program_n_buffers(prog);
    uint64_t end = 0;
    for (size_t i = 0; i < n; i++) {
        end = (end + TPU_TLM_HBM_ALIGN - 1) / TPU_TLM_HBM_ALIGN * TPU_TLM_HBM_ALIGN;
        end += tpu_buffer_bytes(tpu_program_buffer(prog, (uint32_t)i));
    }
    if (n * TPU_TLM_BUFTAB_ENTRY > TPU_TLM_BUFTAB_SIZE || end > TPU_TLM_CORE_STRIDE) {
        tpu_program_destroy(&prog);
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_PROGRAM, TPU_ERANGE,
                      "LOAD_PROGRAM: the program's %zu buffers take %" PRIu64 " bytes laid out in "
                      "HBM; a core's HBM window holds %llu bytes and the buffer table %llu "
                      "buffers; split the program",
                      n, end, TPU_TLM_CORE_STRIDE, TPU_TLM_BUFTAB_SIZE / TPU_TLM_BUFTAB_ENTRY);
    }
    rc = tpu_device_load(m_dev, prog, &d);
    tpu_program_destroy(&prog);
    rebuild_buffer_table_locked();
    if (rc)
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_PROGRAM, rc,
                      "LOAD_PROGRAM: %s", d.msg);
    return tlm::TLM_OK_RESPONSE;
}

void tpu_tlm_chip::rebuild_buffer_table_locked()
{
    m_buftab.clear();
    m_buf_off.clear();
    m_buf_size.clear();
    const struct tpu_program *p = m_dev ? tpu_device_program(m_dev) : nullptr;
    if (!p)
        return;
    size_t n = tpu_program_n_buffers(p);
    m_buftab.assign(n * TPU_TLM_BUFTAB_ENTRY, 0);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tpu_buffer_desc *b = tpu_program_buffer(p, (uint32_t)i);
        uint8_t *e = m_buftab.data() + i * TPU_TLM_BUFTAB_ENTRY;
        off = (off + TPU_TLM_HBM_ALIGN - 1) / TPU_TLM_HBM_ALIGN * TPU_TLM_HBM_ALIGN;
        uint64_t bytes = tpu_buffer_bytes(b);
        put64(e + TPU_TLM_BUF_BYTES, bytes);
        put64(e + TPU_TLM_BUF_OFFSET, off);
        put32(e + TPU_TLM_BUF_DTYPE, (uint32_t)b->dtype);
        put32(e + TPU_TLM_BUF_KIND, (uint32_t)b->kind);
        put32(e + TPU_TLM_BUF_ROWS, b->rows);
        put32(e + TPU_TLM_BUF_COLS, b->cols);
        std::memcpy(e + TPU_TLM_BUF_NAME, b->name, strnlen(b->name, TPU_PROGRAM_NAME_MAX));
        m_buf_off.push_back(off);
        m_buf_size.push_back(bytes);
        off += bytes;
    }
}

tlm_response_status tpu_tlm_chip::cmd_launch(bool debug)
{
    if (!tpu_device_program(m_dev))
        return reject(debug, tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                      "LAUNCH with no program loaded: write the program's text to the program "
                      "window, its length to PROG_LEN, and LOAD_PROGRAM first");
    if (m_worker.joinable())
        m_worker.join(); /* the previous run's thread has returned (its completion ran) */
    m_busy = true;
    m_done = false;
    m_chan.hold();
    struct tpu_device *dev = m_dev;
    /* START_CYCLE not written since the last LAUNCH: the run starts no earlier than the
     * LAUNCH write's own time, SystemC time plus its timing annotation (a quantum keeper's
     * local offset). Only the kernel's thread may read SystemC time; from elsewhere the
     * register's value stands. */
    if (!m_start_written && std::this_thread::get_id() == m_kernel_tid)
        m_start_cycle = time_to_cycles(sc_core::sc_time_stamp() +
                                       (m_have_access_delay ? m_access_delay
                                                            : sc_core::SC_ZERO_TIME));
    m_start_written = false;
    uint64_t start = m_start_cycle;
    m_worker = std::thread([this, dev, start] {
        struct tpu_diag d = {};
        uint64_t end = 0;
        int rc = tpu_device_run(dev, start, &end, &d);
        {
            std::lock_guard<std::mutex> g(m_lock);
            m_run_rc = rc;
            m_run_end = end;
            m_run_diag = d;
        }
        m_chan.post_run_done();
    });
    return tlm::TLM_OK_RESPONSE;
}

/* The kernel side of a run's end: SystemC time to the end cycle, then the registers and the
 * interrupt. */
void tpu_tlm_chip::completion_thread()
{
    for (;;) {
        wait(m_chan.run_done_ev);
        uint64_t end;
        {
            std::lock_guard<std::mutex> g(m_lock);
            end = m_run_end;
        }
        sc_time t_end = cycles_to_time(end);
        if (t_end > sc_core::sc_time_stamp())
            wait(t_end - sc_core::sc_time_stamp());
        m_worker.join();
        {
            std::lock_guard<std::mutex> g(m_lock);
            m_busy = false;
            m_done = true;
            m_end_cycle = end;
            m_run_status = m_run_rc;
            m_runs++;
            m_irq_status |= m_run_rc ? TPU_TLM_IRQ_FAILED : TPU_TLM_IRQ_DONE;
            if (m_run_rc)
                record_locked(TPU_TLM_ERR_DEVICE, m_run_rc, m_run_diag.msg);
            snprintf(m_runmsg, sizeof m_runmsg, "%s", m_run_rc ? m_run_diag.msg : "");
        }
        m_chan.release();
        m_chan.post_irq();
        m_done_ev.notify(sc_core::SC_ZERO_TIME);
    }
}

void tpu_tlm_chip::irq_method()
{
    bool level;
    {
        std::lock_guard<std::mutex> g(m_lock);
        level = (m_irq_status & m_irq_enable) != 0;
    }
    irq.write(level);
}
