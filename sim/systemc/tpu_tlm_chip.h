/* tpu_tlm_chip: the tpusim chip as a loosely-timed TLM-2.0 target (SystemC 2.3, C++17).
 *
 * What it is. An sc_module with one tlm_utils::simple_target_socket and an interrupt output,
 * wrapping a native device (device.h: the C chip of sim/). An initiator drives it through
 * the register map of tpu_tlm_regs.h: it writes the program's text form into the program
 * window and loads it, writes params through the HBM windows, sets the loop variable,
 * launches, feeds the infeed windows, takes the outfeed, and waits for the interrupt. The
 * chip's values and cycle counts are the native chip's, bit for bit: the module adds bus
 * plumbing and SystemC time, never a model of its own.
 *
 * What it is not. Not a cycle-accurate bus model (the chip's time is the device's cycle
 * count, not the time the transactions take), not a second chip model, and not the host
 * runtime's backend (that is the initiator side, SCB's tpu_tlm_backend).
 *
 * Why loosely timed (LT) and not approximately timed (AT). The chip computes its own time in
 * cycles from the program, the data sizes and the host cycles the host gives with each feed
 * (device.h, "Two clocks"); the interleaving of bus phases cannot change a single device
 * cycle, so AT's four phases would buy no accuracy and cost a process switch per phase.
 * The queue windows wait while a queue is full or empty (the device API's promise), which a
 * blocking b_transport expresses directly. IEEE 1666 lets b_transport call wait() when the
 * initiator is a thread process, and the feed windows do exactly that: called from a
 * SystemC thread process (SC_THREAD / SC_CTHREAD), the device call runs on a helper thread
 * and the process waits on an event the helper posts through async_request_update when the
 * call returns, so the kernel keeps running the platform's other processes (a second
 * process draining the outfeed, a ticker) meanwhile. Called from any other thread (the host
 * runtime's feed threads, sc_main between sc_start calls) or from an SC_METHOD, which may not
 * wait, the call blocks the calling thread in real time. The other windows and the registers
 * never wait: they add their cost to the delay.
 *
 * The initiator's side. An LT initiator keeps a tlm_utils::tlm_quantumkeeper: it adds the
 * delay each b_transport returns to its local time offset and runs ahead of SystemC time
 * (temporal decoupling) until the offset passes the global quantum, then calls sync(), which
 * wait()s for the offset and lets the rest of the platform catch up. Before it waits for the
 * interrupt it must sync() too, so its local time is part of SystemC time. The module's
 * annotations: a register access is one chip cycle, an HBM access its bytes over the chip's
 * HBM bandwidth, a feed transfer the host link's latency plus its bytes over the link's
 * bandwidth (config.h).
 *
 * A run. LAUNCH starts tpu_device_run(START_CYCLE) on a worker thread the module owns and
 * returns at once (STATUS.BUSY). The cores run on the device's own threads, in real time,
 * while SystemC time stands still or moves on with the rest of the platform; an attached
 * "suspending" primitive channel (sc_prim_channel::async_attach_suspending) keeps the kernel
 * from ending the simulation for lack of events meanwhile. When the run returns, the worker
 * hands its result to the kernel through sc_prim_channel::async_request_update (the one
 * SystemC call that is safe from a foreign thread); the module's completion process then
 * advances SystemC time to the run's end cycle through the chip clock (if SystemC time is
 * already later, it does not go back), sets END_CYCLE, RUN_STATUS and STATUS.DONE, raises
 * IRQ_STATUS.DONE (or .FAILED) and drives `irq` high when that bit is enabled.
 *
 *   idle --LAUNCH--> busy (worker: tpu_device_run) --run returns--> completing (SystemC time
 *   advances to END_CYCLE x period) --> done (IRQ) --LAUNCH--> busy ...
 *
 * Threads. Feed windows: any thread, concurrently (each transaction is one
 * tpu_device_infeed / tpu_device_outfeed; from a SystemC thread process it suspends the
 * process, elsewhere it blocks the thread, see above). Registers, the program window and HBM: one lock
 * (m_lock) serializes them; they are meant for SystemC processes. The irq output is only
 * ever written by the module's own processes.
 *
 * Clock. The period is 1 / clock_mhz of the chip configuration. The module reads SystemC's
 * time resolution when it is constructed, so sc_set_time_resolution, if a platform calls
 * it, comes before the module is made (as SystemC asks of any sc_time anyway). cycles_to_time rounds to the
 * SystemC time resolution (1 ps by default); time_to_cycles rounds down after adding half a
 * resolution step, so time_to_cycles(cycles_to_time(c)) == c whenever the period is longer
 * than one step (any clock below 1 THz at the default resolution). */
#ifndef TPUSIM_TPU_TLM_CHIP_H
#define TPUSIM_TPU_TLM_CHIP_H

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_target_socket.h>

#include "tpusim/device.h"
#include "tpu_tlm_regs.h"

/* The bridge from the worker thread to the kernel: async_request_update from any thread,
 * update() in the kernel notifies the events. */
class tpu_tlm_async_channel : public sc_core::sc_prim_channel {
public:
    explicit tpu_tlm_async_channel(const char *name) : sc_core::sc_prim_channel(name) {}
    sc_core::sc_event run_done_ev; /* a worker's run returned */
    sc_core::sc_event irq_ev;      /* the irq level may have changed */
    sc_core::sc_event feed_ev;     /* a feed call made for a waiting SystemC process returned */
    void post_run_done();          /* any thread */
    void post_irq();               /* any thread */
    void post_feed();              /* any thread */
    /* Kernel thread only: keep the simulation alive while a run or a waiting feed is under
     * way (counted: attached while at least one hold is outstanding). */
    void hold();
    void release();

protected:
    void update() override;

private:
    std::atomic<bool> m_run_pending{false};
    std::atomic<bool> m_irq_pending{false};
    std::atomic<bool> m_feed_pending{false};
    int m_holds = 0; /* kernel thread only */
};

class tpu_tlm_chip : public sc_core::sc_module {
public:
    tlm_utils::simple_target_socket<tpu_tlm_chip> socket;
    sc_core::sc_out<bool> irq; /* level: (IRQ_STATUS & IRQ_ENABLE) != 0 */

    SC_HAS_PROCESS(tpu_tlm_chip);
    /* A module with no device behind it (STATUS.POWERED clear): power_on opens one. */
    explicit tpu_tlm_chip(sc_core::sc_module_name name);
    /* Cancels and joins a run still under way, closes the device. */
    ~tpu_tlm_chip() override;
    tpu_tlm_chip(const tpu_tlm_chip &) = delete;
    tpu_tlm_chip &operator=(const tpu_tlm_chip &) = delete;

    /* Opens a native device for settings s (tpu_device_open: s is copied; s.backend must be
     * NULL or the native one, the chip behind a TLM target being the native chip) and resets
     * every register. TPU_EINVAL if one is already open (power_off first). Returns 0 or a
     * negative TPU_E* code with its sentence in d. */
    int power_on(const struct tpu_device_settings &s, struct tpu_diag *d);
    /* Closes the device. TPU_EINVAL during a run (cancel it and wait for its interrupt
     * first). Does nothing when powered off. */
    int power_off(struct tpu_diag *d);
    bool powered() const;

    /* clock_period and time_to_cycles: any thread. cycles_to_time constructs an sc_time:
     * the kernel's thread only. */
    sc_core::sc_time clock_period() const;
    sc_core::sc_time cycles_to_time(uint64_t cycles) const;
    uint64_t time_to_cycles(const sc_core::sc_time &t) const;
    /* a time of `v` units of `unit_fs` femtoseconds, rounded as sc_time(v, unit) rounds,
     * from the cached resolution: any thread */
    sc_core::sc_time time_of(double v, double unit_fs) const;

    /* Notified (at the run's end time) each time a run's completion has been processed:
     * STATUS.DONE is set, whatever IRQ_ENABLE says. */
    const sc_core::sc_event &run_done_event() const { return m_done_ev; }

    /* The device behind the registers, for what the register map does not carry (the
     * timeline, per-op statistics, tpu_device_watch from any thread). NULL when powered
     * off. Borrowed: valid until power_off or destruction. A platform never needs it. */
    struct tpu_device *device() const;

private:
    void b_transport(tlm::tlm_generic_payload &t, sc_core::sc_time &delay);
    unsigned transport_dbg(tlm::tlm_generic_payload &t);
    bool get_direct_mem_ptr(tlm::tlm_generic_payload &t, tlm::tlm_dmi &dmi);

    tlm::tlm_response_status access(tlm::tlm_generic_payload &t, sc_core::sc_time *delay,
                                    bool debug);
    tlm::tlm_response_status reject(bool debug, tlm::tlm_response_status st, enum tpu_tlm_err code,
                                  int tpu_rc, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
    void record_locked(enum tpu_tlm_err code, int tpu_rc, const char *msg);

    tlm::tlm_response_status reg_access(tlm::tlm_generic_payload &t, uint64_t off,
                                        sc_core::sc_time *delay, bool debug);
    tlm::tlm_response_status reg_write(uint64_t off, uint32_t v, bool debug);
    uint32_t reg_read(uint64_t off) const;
    tlm::tlm_response_status command(uint32_t cmd, bool debug);
    tlm::tlm_response_status cmd_load(bool debug);
    tlm::tlm_response_status cmd_launch(bool debug);
    tlm::tlm_response_status counters_read(tlm::tlm_generic_payload &t, uint64_t off,
                                           bool debug);
    tlm::tlm_response_status window_read(tlm::tlm_generic_payload &t, uint64_t off,
                                         const uint8_t *src, size_t src_len, bool debug);
    tlm::tlm_response_status prog_access(tlm::tlm_generic_payload &t, uint64_t off, bool debug);
    tlm::tlm_response_status hbm_access(tlm::tlm_generic_payload &t, uint32_t core,
                                        uint64_t off, sc_core::sc_time *delay, bool debug);
    tlm::tlm_response_status feed_access(tlm::tlm_generic_payload &t, uint32_t core, bool infeed,
                                         sc_core::sc_time *delay);
    void rebuild_buffer_table_locked();
    uint32_t status_locked() const;
    void completion_thread();
    void irq_method();
    bool on_sc_thread() const;
    int feed_call(struct tpu_device *dev, uint32_t core, bool infeed, uint8_t *data, size_t len,
                  uint64_t host_cycle, uint64_t *ready, struct tpu_diag *d);

    tpu_tlm_async_channel m_chan;
    sc_core::sc_event m_done_ev;

    mutable std::mutex m_lock; /* guards everything below */
    struct tpu_device *m_dev = nullptr;
    /* SystemC's time resolution, read once at construction (elaboration, the kernel's
     * thread): the sc_time constructors and sc_get_time_resolution write SystemC's time
     * parameters, so off the kernel's thread only sc_time's inline arithmetic is used on
     * these cached values */
    sc_core::sc_time m_res_t;
    double m_res_fs = 0;
    sc_core::sc_time m_period_t; /* one chip cycle, set at power_on */
    double m_clock_mhz = 0, m_period_ps = 0, m_hbm_bytes_per_cycle = 0;
    double m_link_latency_ns = 0, m_link_gbytes_per_s = 0;
    uint32_t m_n_cores = 0;
    /* registers */
    uint32_t m_ctrl = 0, m_error_code = 0, m_irq_status = 0, m_irq_enable = 0;
    int32_t m_error_tpu = 0, m_run_status = 0;
    uint32_t m_prog_len = 0, m_var_index = 0, m_var_core = 0, m_counter_core = 0, m_runs = 0;
    uint64_t m_var_value = 0, m_start_cycle = 0, m_end_cycle = 0;
    bool m_busy = false, m_done = false, m_canceled = false, m_infeed_closed = false;
    /* START_CYCLE written since the last LAUNCH (else LAUNCH takes its transaction's time) */
    bool m_start_written = false;
    /* the timing annotation of the register write being processed (kernel thread only) */
    bool m_have_access_delay = false;
    sc_core::sc_time m_access_delay;
    char m_errmsg[TPU_DIAG_MAX] = {};
    char m_runmsg[TPU_DIAG_MAX] = {}; /* the run message window: the last run's sentence */
    /* windows */
    std::vector<uint8_t> m_prog;      /* the program window's bytes written so far */
    std::vector<uint8_t> m_buftab;    /* [n_buffers][TPU_TLM_BUFTAB_ENTRY] */
    std::vector<uint64_t> m_buf_off;  /* [n_buffers] offset in each core's HBM window */
    std::vector<uint64_t> m_buf_size; /* [n_buffers] bytes */
    std::vector<uint8_t> m_scratch;   /* one buffer, for partial HBM accesses */
    /* feed calls made for SystemC threads (feed_call): joined by their waiter, or by the
     * destructor after a cancel */
    std::mutex m_feed_lock;
    std::list<std::thread> m_feed_threads;
    std::thread::id m_kernel_tid; /* the thread that elaborated the module: the kernel's */
    /* the run */
    std::thread m_worker;
    int m_run_rc = 0;                 /* set by the worker before it posts */
    uint64_t m_run_end = 0;
    struct tpu_diag m_run_diag = {};
};

#endif
