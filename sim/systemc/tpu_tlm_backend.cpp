// The SystemC device backend: the device API's calls as TLM-2.0 transactions.
//
// include/tpusim/systemc.h says what each entry of struct tpu_device_backend becomes; this
// file is the host side of it: a host initiator module (a simple_initiator_socket and a
// tlm_quantumkeeper) bound to the chip's target (tpu_tlm_chip.h), in one shell elaborated
// once per process. It is not the chip: every value and cycle comes from the target, which
// wraps the native C chip; this file only moves bytes through the register map of
// tpu_tlm_regs.h and turns failed transactions back into the device API's codes and
// sentences.
//
// Who calls from where. The device API calls every entry but infeed, outfeed, cancel,
// infeed_close and watch from one host thread at a time, never during a run ("the host
// thread"); those five may come from any thread during a run ("feed threads"). The SystemC
// kernel itself runs on a thread of the backend's own (kernel_thread): elaboration and every
// sc_start are jobs the calling thread hands it and waits for. So:
//   - the host thread issues register, program and HBM transactions with the quantum
//     keeper's local time as their delay (loosely timed: the target adds its cost to the
//     delay and never waits). When the local time passes the global quantum, or at a launch,
//     the kernel catches up: sc_start(local time), then the keeper is reset. Only the host
//     thread (or the kernel thread on its behalf, while it waits) touches the keeper.
//   - a feed thread issues its one transaction with a zero delay of its own; the host cycle
//     goes in a tpu_tlm_feed_ext, which also brings back the call's status, sentence and
//     ready cycle (the only per-transaction result that is race-free across threads). It
//     blocks inside the target in real time while the queue is full or empty.
//   - cancel and infeed_close write CTRL, which the target allows from any thread.
//   - run: START_CYCLE and clearing IRQ_STATUS from the host thread, then one job on the
//     kernel thread: catch up, LAUNCH, and sc_start() until the interrupt line rises. While
//     the native chip runs on its own worker threads, nothing is scheduled in the kernel: the
//     gate channel below is attached as "suspending" (sc_prim_channel::
//     async_attach_suspending) during the run, so sc_start() blocks in the kernel (no
//     spinning) until the target's asynchronous update arrives; the target then advances
//     SystemC time to the run's end cycle and raises the line, on whose rising edge the
//     initiator's method pauses the kernel (sc_pause) and sc_start returns. A cancel ends the
//     native run, so the interrupt still comes: the run never hangs on the kernel.
//
// One shell per process (systemc.h): built at the first open under shell_lock and kept;
// each open re-powers the target with its own settings, and in_use makes a second open
// while one is open fail with TPU_EBUSY. This is the one process-wide state of the backend,
// and it is forced by SystemC itself (one simulation context per process, no elaboration
// after the simulation started).

#include <atomic>
#include <cinttypes>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/tlm_quantumkeeper.h>

#include "tpu_tlm_chip.h"
#include "tpu_tlm_regs.h"
#include "tpusim/systemc.h"

namespace {

const char *const k_name = "systemc";

// The kernel's global quantum: how far the host thread's local time may run ahead of
// SystemC time before it lets the kernel catch up. The device's results never depend on it
// (the device API's host_cycle arguments give device time); it only sets how often the
// host thread enters the kernel between runs. 10 us of chip time: a few hundred register
// and HBM transactions of a training loop's boundary, one catch-up.
const sc_core::sc_time k_global_quantum(10, sc_core::SC_US);

int fail(struct tpu_diag *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

int fail(struct tpu_diag *d, int code, const char *fmt, ...)
{
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(d->msg, sizeof d->msg, fmt, ap);
        va_end(ap);
        d->code = code;
    }
    return code;
}

// A prim channel whose only job is to be attached as suspending during a run (see the top
// of this file); its update does nothing.
class run_gate : public sc_core::sc_prim_channel {
  public:
    run_gate() : sc_core::sc_prim_channel("tpu_tlm_run_gate") {}
    void hold() { async_attach_suspending(); }
    void release() { async_detach_suspending(); }
};

// The host side: the initiator the device API's calls go through.
class host_initiator : public sc_core::sc_module {
  public:
    tlm_utils::simple_initiator_socket<host_initiator> socket;
    sc_core::sc_in<bool> irq;
    tlm_utils::tlm_quantumkeeper qk;
    run_gate gate;
    std::atomic<uint64_t> transactions{0};
    std::atomic<uint64_t> sc_time_ps{0}; // SystemC time after the last run, for stats
    bool irq_seen = false; // set by on_irq, read after sc_start returns: both on the kernel
                           // thread

    SC_HAS_PROCESS(host_initiator);
    explicit host_initiator(sc_core::sc_module_name n) : sc_core::sc_module(n), socket("socket")
    {
        SC_METHOD(on_irq);
        sensitive << irq.pos();
        dont_initialize();
        qk.reset();
    }

  private:
    void on_irq()
    {
        irq_seen = true;
        sc_core::sc_pause();
    }
};

// The thread that runs the SystemC kernel: elaboration and every sc_start of the backend
// happen on it, whichever host thread opens, loads or runs, and the calling thread waits for
// each job. One thread for the kernel keeps SystemC's coroutine switches (its processes run
// as coroutines on stacks of their own) away from the host threads' stacks: AddressSanitizer's
// detection of stack use after return keeps frames on a per-thread fake stack that those
// switches would otherwise corrupt, and the only frames live on this thread across a switch
// are this file's (built without fake frames, sim/systemc/meson.build). It lives as long as
// the process (detached; it waits for jobs on cv).
class kernel_thread {
  public:
    kernel_thread() { std::thread([this] { loop(); }).detach(); }

    // Runs job on the kernel thread and returns when it has returned.
    void call(const std::function<void()> &job)
    {
        std::unique_lock<std::mutex> lock(m_lock);
        m_job = &job;
        m_cv.notify_all();
        m_cv.wait(lock, [this] { return m_job == nullptr; });
    }

  private:
    void loop()
    {
        std::unique_lock<std::mutex> lock(m_lock);
        for (;;) {
            m_cv.wait(lock, [this] { return m_job != nullptr; });
            (*m_job)();
            m_job = nullptr;
            m_cv.notify_all();
        }
    }

    std::mutex m_lock; // guards m_job
    std::condition_variable m_cv;
    const std::function<void()> *m_job = nullptr;
};

// The one shell of the process: the chip's target, the host initiator and the wire between
// them, and the thread their kernel runs on.
struct shell {
    tpu_tlm_chip chip;
    host_initiator host;
    sc_core::sc_signal<bool> irq;
    kernel_thread *kernel;

    explicit shell(kernel_thread *k) : chip("tpu_chip"), host("tpu_host"), irq("tpu_irq"), kernel(k)
    {
        host.socket.bind(chip.socket);
        chip.irq(irq);
        host.irq(irq);
    }
};

std::mutex shell_lock; // guards the_shell's creation and in_use
shell *the_shell;      // made at the first open, kept until the process ends
bool in_use;

// The per-device state (impl).
struct sc_device {
    shell *sh;
    uint32_t n_cores;
    std::vector<uint64_t> buf_offset; // per buffer id: its offset in each core's HBM window
    std::atomic<bool> running{false};
};

// ---- transactions --------------------------------------------------------------------------

const char *response_text(tlm::tlm_response_status s)
{
    switch (s) {
    case tlm::TLM_OK_RESPONSE: return "TLM_OK_RESPONSE";
    case tlm::TLM_INCOMPLETE_RESPONSE: return "TLM_INCOMPLETE_RESPONSE";
    case tlm::TLM_GENERIC_ERROR_RESPONSE: return "TLM_GENERIC_ERROR_RESPONSE";
    case tlm::TLM_ADDRESS_ERROR_RESPONSE: return "TLM_ADDRESS_ERROR_RESPONSE";
    case tlm::TLM_COMMAND_ERROR_RESPONSE: return "TLM_COMMAND_ERROR_RESPONSE";
    case tlm::TLM_BURST_ERROR_RESPONSE: return "TLM_BURST_ERROR_RESPONSE";
    case tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE: return "TLM_BYTE_ENABLE_ERROR_RESPONSE";
    }
    return "an unknown TLM response";
}

// One debug read (no timing, no side effects): the error registers and message.
void debug_read(shell *sh, uint64_t addr, void *data, unsigned len)
{
    tlm::tlm_generic_payload t;
    t.set_command(tlm::TLM_READ_COMMAND);
    t.set_address(addr);
    t.set_data_ptr(static_cast<unsigned char *>(data));
    t.set_data_length(len);
    t.set_streaming_width(len);
    sh->host.socket->transport_dbg(t);
}

// After a failed transaction of the host thread: the target's code and sentence into d,
// then CLEAR_ERROR so the next failure is told apart. A target that gives no TPU_E* code
// (an access the backend got wrong, which the device API's checks should make impossible)
// is TPU_EBACKEND, naming the transaction.
int target_failure(shell *sh, const char *what, uint64_t addr, tlm::tlm_response_status st,
                   struct tpu_diag *d);

// One TLM-2.0 transaction carries at most UINT_MAX bytes (the generic payload's data length
// is an unsigned int): 0, or TPU_EUNSUPPORTED naming the transfer.
int check_length(size_t len, const char *what, struct tpu_diag *d)
{
    if (len <= UINT_MAX)
        return 0;
    return fail(d, TPU_EUNSUPPORTED, "%s: %zu bytes, but one TLM-2.0 transaction of the %s "
                "backend carries at most %u bytes (its data length is 32-bit); use the native "
                "backend for tensors and buffers of 4 GiB or more",
                what, len, k_name, UINT_MAX);
}

// Issues one transaction from the host thread with the keeper's local time; 0 or the
// failure (target_failure).
int host_transport(shell *sh, tlm::tlm_command cmd, uint64_t addr, void *data, size_t len,
                   const char *what, struct tpu_diag *d)
{
    if (int rc = check_length(len, what, d))
        return rc;
    tlm::tlm_generic_payload t;
    t.set_command(cmd);
    t.set_address(addr);
    t.set_data_ptr(static_cast<unsigned char *>(data));
    t.set_data_length(static_cast<unsigned>(len));
    t.set_streaming_width(static_cast<unsigned>(len));
    t.set_byte_enable_ptr(nullptr);
    t.set_dmi_allowed(false);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    sc_core::sc_time delay = sh->host.qk.get_local_time();
    sh->host.transactions.fetch_add(1, std::memory_order_relaxed);
    sh->host.socket->b_transport(t, delay);
    sh->host.qk.set(delay);
    if (sh->host.qk.need_sync()) {
        // let the kernel catch up with the host's local time (nothing is scheduled in it
        // between runs, so this only moves SystemC time)
        sh->kernel->call([sh] {
            sc_core::sc_start(sh->host.qk.get_local_time());
            sh->host.qk.reset();
        });
    }
    if (t.get_response_status() != tlm::TLM_OK_RESPONSE)
        return target_failure(sh, what, addr, t.get_response_status(), d);
    return 0;
}

int write_reg(shell *sh, uint64_t reg, uint32_t value, const char *what, struct tpu_diag *d)
{
    return host_transport(sh, tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_BASE + reg, &value,
                          sizeof value, what, d);
}

int read_reg(shell *sh, uint64_t reg, uint32_t *value, const char *what, struct tpu_diag *d)
{
    return host_transport(sh, tlm::TLM_READ_COMMAND, TPU_TLM_REG_BASE + reg, value,
                          sizeof *value, what, d);
}

int write_reg64(shell *sh, uint64_t lo_reg, uint64_t value, const char *what,
                struct tpu_diag *d)
{
    int rc = write_reg(sh, lo_reg, static_cast<uint32_t>(value), what, d);
    return rc ? rc : write_reg(sh, lo_reg + 4, static_cast<uint32_t>(value >> 32), what, d);
}

int read_reg64(shell *sh, uint64_t lo_reg, uint64_t *value, const char *what,
               struct tpu_diag *d)
{
    uint32_t lo = 0, hi = 0;
    int rc = read_reg(sh, lo_reg, &lo, what, d);
    if (!rc)
        rc = read_reg(sh, lo_reg + 4, &hi, what, d);
    *value = static_cast<uint64_t>(hi) << 32 | lo;
    return rc;
}

int command(shell *sh, uint32_t cmd, const char *what, struct tpu_diag *d)
{
    return write_reg(sh, TPU_TLM_REG_CTRL, cmd, what, d);
}

int target_failure(shell *sh, const char *what, uint64_t addr, tlm::tlm_response_status st,
                   struct tpu_diag *d)
{
    uint32_t err = 0, tpu = 0;
    char msg[TPU_TLM_ERRMSG_SIZE] = {0};
    debug_read(sh, TPU_TLM_REG_BASE + TPU_TLM_REG_ERROR_CODE, &err, sizeof err);
    debug_read(sh, TPU_TLM_REG_BASE + TPU_TLM_REG_ERROR_TPU, &tpu, sizeof tpu);
    debug_read(sh, TPU_TLM_ERRMSG_BASE, msg, sizeof msg - 1);
    int code = static_cast<int32_t>(tpu);
    uint32_t clear = TPU_TLM_CMD_CLEAR_ERROR;
    tlm::tlm_generic_payload t;
    t.set_command(tlm::TLM_WRITE_COMMAND);
    t.set_address(TPU_TLM_REG_BASE + TPU_TLM_REG_CTRL);
    t.set_data_ptr(reinterpret_cast<unsigned char *>(&clear));
    t.set_data_length(sizeof clear);
    t.set_streaming_width(sizeof clear);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    sh->host.socket->b_transport(t, delay);
    if (code < 0 && msg[0])
        return fail(d, code, "%s", msg);
    return fail(d, code < 0 ? code : TPU_EBACKEND,
                "systemc backend: the TLM target answered %s to %s (address 0x%012" PRIx64
                ", ERROR_CODE %u)%s%s",
                response_text(st), what, addr, err, msg[0] ? ": " : "", msg);
}

// A command from the kernel thread (LAUNCH, inside the run's job): a zero delay of its own,
// not through the quantum keeper (whose catch-up would be a job for the kernel thread itself).
int plain_command(shell *sh, uint32_t cmd, const char *what, struct tpu_diag *d)
{
    tlm::tlm_generic_payload t;
    t.set_command(tlm::TLM_WRITE_COMMAND);
    t.set_address(TPU_TLM_REG_BASE + TPU_TLM_REG_CTRL);
    t.set_data_ptr(reinterpret_cast<unsigned char *>(&cmd));
    t.set_data_length(sizeof cmd);
    t.set_streaming_width(sizeof cmd);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    sh->host.transactions.fetch_add(1, std::memory_order_relaxed);
    sh->host.socket->b_transport(t, delay);
    if (t.get_response_status() != tlm::TLM_OK_RESPONSE)
        return target_failure(sh, what, TPU_TLM_REG_BASE + TPU_TLM_REG_CTRL,
                              t.get_response_status(), d);
    return 0;
}

// A feed transaction from any thread: its own delay, the host cycle and the results in the
// extension. Returns the device call's status with its sentence.
int feed_transport(shell *sh, tlm::tlm_command cmd, uint64_t addr, void *data, size_t bytes,
                   uint64_t host_cycle, uint64_t *ready_cycle, struct tpu_diag *d)
{
    if (int rc = check_length(bytes, cmd == tlm::TLM_WRITE_COMMAND ? "infeed" : "outfeed", d))
        return rc;
    tpu_tlm_feed_ext ext;
    ext.host_cycle = host_cycle;
    tlm::tlm_generic_payload t;
    t.set_command(cmd);
    t.set_address(addr);
    t.set_data_ptr(static_cast<unsigned char *>(data));
    t.set_data_length(static_cast<unsigned>(bytes));
    t.set_streaming_width(static_cast<unsigned>(bytes));
    t.set_byte_enable_ptr(nullptr);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    t.set_extension(&ext);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    sh->host.transactions.fetch_add(1, std::memory_order_relaxed);
    sh->host.socket->b_transport(t, delay);
    t.clear_extension(&ext);
    if (ext.status != 0) {
        if (d)
            *d = ext.diag;
        return ext.status;
    }
    if (t.get_response_status() != tlm::TLM_OK_RESPONSE)
        return fail(d, TPU_EBACKEND, "systemc backend: the TLM target answered %s to the %s "
                    "of %zu bytes at 0x%012" PRIx64 " and gave no status in the feed "
                    "extension", response_text(t.get_response_status()),
                    cmd == tlm::TLM_WRITE_COMMAND ? "infeed" : "outfeed", bytes, addr);
    if (ready_cycle)
        *ready_cycle = ext.ready_cycle;
    return 0;
}

// ---- the entries ---------------------------------------------------------------------------

int sc_open(void *ctx, const struct tpu_device_settings *s, void **impl, struct tpu_diag *d)
{
    (void)ctx;
    if (s->mxu)
        return fail(d, TPU_EUNSUPPORTED, "the %s backend runs the chip of the TLM model, whose "
                    "matrix units are the native chip's: the '%s' matrix-unit provider plugs "
                    "into the native chip only (leave settings.mxu NULL, or use the native "
                    "backend)", k_name, s->mxu->name ? s->mxu->name : "?");
    if (s->trace)
        return fail(d, TPU_EUNSUPPORTED, "the %s backend records no timeline: the TLM model "
                    "exposes registers, counters and memory windows, not the chip's unit "
                    "events (leave settings.trace off, or trace the same run on the native "
                    "backend, which gives the same cycles)", k_name);
    if (s->pod)
        return fail(d, TPU_EUNSUPPORTED, "the %s backend simulates one whole device: it "
                    "cannot be part %u of a pod of %u devices (settings.pod), whose all-reduces "
                    "cross to the other parts; leave settings.pod NULL, or open the part on the "
                    "native backend", k_name, s->pod->index, s->pod->parts);
    if (s->op_stats)
        return fail(d, TPU_EUNSUPPORTED, "the %s backend keeps no per-op statistics: the TLM "
                    "model exposes registers, counters and memory windows, not the chip's ops "
                    "(leave settings.op_stats off, or measure the same run on the native "
                    "backend, which gives the same cycles)", k_name);
    sc_device *dev = new (std::nothrow) sc_device;
    if (!dev)
        return fail(d, TPU_ENOMEM, "the %s backend: out of memory for a device", k_name);

    std::lock_guard<std::mutex> lock(shell_lock);
    if (in_use) {
        delete dev;
        return fail(d, TPU_EBUSY, "the %s backend drives one device at a time (SystemC runs "
                    "one simulation per process, and its chip is open): close the open "
                    "device first, or open this one on the native backend", k_name);
    }
    if (!the_shell) {
        // the library prints nothing: no banner unless the environment asks for one
        setenv("SC_COPYRIGHT_MESSAGE", "DISABLE", 0);
        // elaboration, on the kernel thread; the first sc_start ends it
        kernel_thread *k = new kernel_thread;
        k->call([k] {
            the_shell = new shell(k);
            tlm_utils::tlm_quantumkeeper::set_global_quantum(k_global_quantum);
            sc_core::sc_start(sc_core::SC_ZERO_TIME);
            the_shell->host.qk.reset();
        });
    }
    shell *sh = the_shell;
    // the chip behind the target is the native one; the rest of the settings are the caller's
    struct tpu_device_settings native = *s;
    native.backend = nullptr;
    int rc = sh->chip.power_on(native, d);
    if (rc) {
        delete dev;
        return rc;
    }
    dev->sh = sh;
    uint32_t n_cores = 0;
    if ((rc = read_reg(sh, TPU_TLM_REG_N_CORES, &n_cores, "reading N_CORES", d)) ||
        (rc = write_reg(sh, TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_ALL, "enabling the interrupts",
                        d))) {
        sh->chip.power_off(nullptr);
        delete dev;
        return rc;
    }
    dev->n_cores = n_cores;
    in_use = true;
    *impl = dev;
    return 0;
}

void sc_close(void *impl)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    std::lock_guard<std::mutex> lock(shell_lock);
    dev->sh->chip.power_off(nullptr);
    in_use = false;
    delete dev;
}

// Whether the text form gives the program back op for op (tpu_program_print promises it
// only for unnested loops and ops that set only the attributes they read): parsed here, the
// copy must have the same buffers, variables and ops (code, operands and every attribute
// byte). 0, or TPU_EUNSUPPORTED naming the first difference.
int check_round_trip(const struct tpu_program *prog, const char *text, struct tpu_diag *d)
{
    struct tpu_program *back = nullptr;
    struct tpu_diag pd = {};
    if (tpu_program_parse(text, "program window", &back, &pd) != 0)
        return fail(d, TPU_EUNSUPPORTED, "program '%s' does not parse back from its text form "
                    "(%s); the %s backend carries programs as text: use the native backend",
                    tpu_program_name(prog), pd.msg, k_name);
    char what[160] = "";
    const size_t n_bufs = tpu_program_n_buffers(prog), n_vars = tpu_program_n_vars(prog);
    const size_t n_ops = tpu_program_n_ops(prog);
    if (tpu_program_n_buffers(back) != n_bufs || tpu_program_n_vars(back) != n_vars ||
        tpu_program_n_ops(back) != n_ops)
        snprintf(what, sizeof what, "%zu buffers, %zu variables and %zu ops come back as %zu, "
                 "%zu and %zu", n_bufs, n_vars, n_ops, tpu_program_n_buffers(back),
                 tpu_program_n_vars(back), tpu_program_n_ops(back));
    for (uint32_t i = 0; !what[0] && i < n_bufs; i++) {
        const struct tpu_buffer_desc *a = tpu_program_buffer(prog, i);
        const struct tpu_buffer_desc *b = tpu_program_buffer(back, i);
        if (std::strcmp(a->name, b->name) || a->dtype != b->dtype || a->kind != b->kind ||
            a->rows != b->rows || a->cols != b->cols)
            snprintf(what, sizeof what, "buffer %u ('%s') comes back different", i, a->name);
    }
    for (uint32_t i = 0; !what[0] && i < n_vars; i++)
        if (std::strcmp(tpu_program_var_name(prog, i), tpu_program_var_name(back, i)))
            snprintf(what, sizeof what, "variable %u ('%s') comes back as '%s'", i,
                     tpu_program_var_name(prog, i), tpu_program_var_name(back, i));
    for (size_t i = 0; !what[0] && i < n_ops; i++) {
        const struct tpu_op *a = tpu_program_op(prog, i), *b = tpu_program_op(back, i);
        if (a->code != b->code || std::memcmp(a->out, b->out, sizeof a->out) ||
            std::memcmp(a->in, b->in, sizeof a->in))
            snprintf(what, sizeof what, "op %zu comes back with another opcode or operands", i);
        else if (std::memcmp(&a->attrs, &b->attrs, sizeof a->attrs))
            snprintf(what, sizeof what, "op %zu comes back with other attributes (an attribute "
                     "the op does not read is set, or a loop is nested)", i);
    }
    tpu_program_destroy(&back);
    if (what[0])
        return fail(d, TPU_EUNSUPPORTED, "program '%s' is not given back by its text form: %s; "
                    "the %s backend carries programs as text (tpu_program_print), so it runs "
                    "only programs whose loops are not nested and whose ops set only the "
                    "attributes they read: clear the others or use the native backend",
                    tpu_program_name(prog), what, k_name);
    return 0;
}

int sc_load(void *impl, const struct tpu_program *prog, struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    shell *sh = dev->sh;
    dev->buf_offset.clear();
    char *text = nullptr;
    if (tpu_program_to_string(prog, &text))
        return fail(d, TPU_ENOMEM, "the %s backend: out of memory printing program '%s' for "
                    "the program window", k_name, tpu_program_name(prog));
    const size_t len = std::strlen(text);
    if (len > TPU_TLM_PROG_SIZE) {
        std::free(text);
        return fail(d, TPU_EUNSUPPORTED, "program '%s' is %zu bytes in text form; the TLM "
                    "model's program window holds at most %llu (tpu_tlm_regs.h "
                    "TPU_TLM_PROG_SIZE): split the model or use the native backend",
                    tpu_program_name(prog), len, static_cast<unsigned long long>(TPU_TLM_PROG_SIZE));
    }
    int rc = check_round_trip(prog, text, d);
    if (rc) {
        std::free(text);
        return rc;
    }
    rc = host_transport(sh, tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE, text, len,
                        "writing the program window", d);
    std::free(text);
    if (rc || (rc = write_reg(sh, TPU_TLM_REG_PROG_LEN, static_cast<uint32_t>(len),
                              "setting PROG_LEN", d)) ||
        (rc = command(sh, TPU_TLM_CMD_LOAD_PROGRAM, "the LOAD_PROGRAM command", d)))
        return rc;
    uint32_t n_buffers = 0;
    if ((rc = read_reg(sh, TPU_TLM_REG_N_BUFFERS, &n_buffers, "reading N_BUFFERS", d)))
        return rc;
    if (n_buffers != tpu_program_n_buffers(prog))
        return fail(d, TPU_EBACKEND, "the %s backend: the TLM model loaded program '%s' with "
                    "%u buffers, but it has %zu (its text form did not give it back)", k_name,
                    tpu_program_name(prog), n_buffers, tpu_program_n_buffers(prog));
    dev->buf_offset.resize(n_buffers);
    for (uint32_t i = 0; i < n_buffers; i++) {
        uint64_t entry[2]; // bytes, offset
        if ((rc = host_transport(sh, tlm::TLM_READ_COMMAND,
                                 TPU_TLM_BUFTAB_BASE + uint64_t{i} * TPU_TLM_BUFTAB_ENTRY, entry,
                                 sizeof entry, "reading the buffer table", d)))
            return rc;
        if (entry[0] != tpu_buffer_bytes(tpu_program_buffer(prog, i)))
            return fail(d, TPU_EBACKEND, "the %s backend: buffer %u of program '%s' is %" PRIu64
                        " bytes in the TLM model's buffer table, not %zu", k_name, i,
                        tpu_program_name(prog), entry[0],
                        tpu_buffer_bytes(tpu_program_buffer(prog, i)));
        dev->buf_offset[i] = entry[1];
    }
    return 0;
}

int sc_write(void *impl, uint32_t core, uint32_t buf, const void *data, size_t bytes,
             struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    return host_transport(dev->sh, tlm::TLM_WRITE_COMMAND,
                          TPU_TLM_HBM_ADDR(core, dev->buf_offset[buf]), const_cast<void *>(data),
                          bytes, "an HBM window write", d);
}

int sc_read(void *impl, uint32_t core, uint32_t buf, void *data, size_t bytes,
            struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    return host_transport(dev->sh, tlm::TLM_READ_COMMAND,
                          TPU_TLM_HBM_ADDR(core, dev->buf_offset[buf]), data, bytes,
                          "an HBM window read", d);
}

// set_var and get_var return no status (device.h): the device API checked the variable
// and the core, so the target accepts them.
void sc_set_var(void *impl, uint32_t var, int64_t value)
{
    shell *sh = static_cast<sc_device *>(impl)->sh;
    if (!write_reg(sh, TPU_TLM_REG_VAR_INDEX, var, "setting VAR_INDEX", nullptr) &&
        !write_reg64(sh, TPU_TLM_REG_VAR_VALUE_LO, static_cast<uint64_t>(value),
                     "setting VAR_VALUE", nullptr))
        command(sh, TPU_TLM_CMD_SET_VAR, "the SET_VAR command", nullptr);
}

int64_t sc_get_var(void *impl, uint32_t core, uint32_t var)
{
    shell *sh = static_cast<sc_device *>(impl)->sh;
    uint64_t value = 0;
    if (write_reg(sh, TPU_TLM_REG_VAR_INDEX, var, "setting VAR_INDEX", nullptr) ||
        write_reg(sh, TPU_TLM_REG_VAR_CORE, core, "setting VAR_CORE", nullptr) ||
        command(sh, TPU_TLM_CMD_GET_VAR, "the GET_VAR command", nullptr) ||
        read_reg64(sh, TPU_TLM_REG_VAR_VALUE_LO, &value, "reading VAR_VALUE", nullptr))
        return 0;
    return static_cast<int64_t>(value);
}

int sc_infeed(void *impl, uint32_t core, const void *data, size_t bytes, uint64_t host_cycle,
              struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    return feed_transport(dev->sh, tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(core),
                          const_cast<void *>(data), bytes, host_cycle, nullptr, d);
}

int sc_outfeed(void *impl, uint32_t core, void *data, size_t bytes, uint64_t host_cycle,
               uint64_t *ready_cycle, struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    return feed_transport(dev->sh, tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(core), data,
                          bytes, host_cycle, ready_cycle, d);
}

int sc_run(void *impl, uint64_t start_cycle, uint64_t *end_cycle, struct tpu_diag *d)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    shell *sh = dev->sh;
    host_initiator &host = sh->host;
    int rc = write_reg64(sh, TPU_TLM_REG_START_CYCLE_LO, start_cycle, "setting START_CYCLE", d);
    if (!rc)
        rc = write_reg(sh, TPU_TLM_REG_IRQ_STATUS, TPU_TLM_IRQ_ALL, "clearing IRQ_STATUS", d);
    if (rc)
        return rc;
    dev->running.store(true);
    // one job on the kernel thread for the whole launch (each hand-over between threads costs
    // a wake-up, which a loaded machine makes slow)
    sh->kernel->call([sh, &host, &rc, d] {
        // the kernel catches up with the host's transactions since the last run
        if (host.qk.get_local_time() > sc_core::SC_ZERO_TIME) {
            sc_core::sc_start(host.qk.get_local_time());
            host.qk.reset();
        }
        // the line falls in the kernel's next delta cycles (the target drives it from its own
        // process): let it, so that the rising edge waited for below is this run's
        for (int delta = 0; sh->irq.read() && delta < 16; delta++)
            sc_core::sc_start(sc_core::SC_ZERO_TIME);
        host.irq_seen = false;
        host.gate.hold();
        // LAUNCH, then the kernel suspends (the gate) while the native cores run, until the
        // interrupt
        rc = plain_command(sh, TPU_TLM_CMD_LAUNCH, "the LAUNCH command", d);
        while (rc == 0 && !host.irq_seen)
            sc_core::sc_start();
        host.gate.release();
        host.sc_time_ps.store(static_cast<uint64_t>(sc_core::sc_time_stamp() /
                                                    sc_core::sc_time(1, sc_core::SC_PS)));
    });
    dev->running.store(false);
    if (rc)
        return rc;
    uint32_t run_status = 0;
    uint64_t end = 0;
    if ((rc = read_reg(sh, TPU_TLM_REG_RUN_STATUS, &run_status, "reading RUN_STATUS", d)) ||
        (rc = read_reg64(sh, TPU_TLM_REG_END_CYCLE_LO, &end, "reading END_CYCLE", d)))
        return rc;
    if (end_cycle)
        *end_cycle = end;
    const int code = static_cast<int32_t>(run_status);
    if (code != 0) {
        // the run's sentence is in the run message window (the error message window may
        // already hold a feed call's failure: one woken by the run's end on another thread)
        char msg[TPU_TLM_RUNMSG_SIZE] = {0};
        debug_read(sh, TPU_TLM_RUNMSG_BASE, msg, sizeof msg - 1);
        command(sh, TPU_TLM_CMD_CLEAR_ERROR, "the CLEAR_ERROR command", nullptr);
        return fail(d, code, "%s", msg);
    }
    return 0;
}

// CANCEL and INFEED_CLOSE come from any thread, also during a run (the target takes them
// then): plain commands, not through the host thread's quantum keeper. They cannot fail on an
// open device.
void any_thread_command(shell *sh, uint32_t cmd)
{
    plain_command(sh, cmd, cmd == TPU_TLM_CMD_CANCEL ? "the CANCEL command"
                                                     : "the INFEED_CLOSE command", nullptr);
}

void sc_infeed_close(void *impl)
{
    any_thread_command(static_cast<sc_device *>(impl)->sh, TPU_TLM_CMD_INFEED_CLOSE);
}

void sc_cancel(void *impl)
{
    any_thread_command(static_cast<sc_device *>(impl)->sh, TPU_TLM_CMD_CANCEL);
}

void sc_reset_cancel(void *impl)
{
    command(static_cast<sc_device *>(impl)->sh, TPU_TLM_CMD_RESET_CANCEL,
            "the RESET_CANCEL command", nullptr);
}

void sc_watch(void *impl, struct tpu_device_watch *w)
{
    sc_device *dev = static_cast<sc_device *>(impl);
    // one debug read of the watch window: no timing, no side effect, any thread
    uint8_t snap[TPU_TLM_WATCH_SIZE] = {0};
    dev->sh->host.transactions.fetch_add(1, std::memory_order_relaxed);
    debug_read(dev->sh, TPU_TLM_WATCH_BASE, snap, sizeof snap);
    auto u32 = [&snap](size_t o) {
        uint32_t v = 0;
        for (int i = 3; i >= 0; i--)
            v = v << 8 | snap[o + (size_t)i];
        return v;
    };
    const uint32_t flags = u32(TPU_TLM_WATCH_FLAGS);
    std::memset(w, 0, sizeof *w);
    w->running = (flags & TPU_TLM_WATCH_RUNNING) != 0;
    w->cores_blocked = (flags & TPU_TLM_WATCH_BLOCKED) != 0;
    w->host_calls_waiting = u32(TPU_TLM_WATCH_HOST_CALLS);
    w->moves = static_cast<uint64_t>(u32(TPU_TLM_WATCH_MOVES + 4)) << 32 | u32(TPU_TLM_WATCH_MOVES);
    std::memcpy(w->why, snap + TPU_TLM_WATCH_WHY, sizeof w->why);
    w->why[sizeof w->why - 1] = '\0';
    // the device API's run is this backend's: the target's run may already have ended while
    // the host thread has not yet taken the interrupt
    w->running = w->running || dev->running.load();
}

void sc_counters(void *impl, uint32_t core, struct tpu_core_counters *out)
{
    shell *sh = static_cast<sc_device *>(impl)->sh;
    uint64_t v[TPU_TLM_N_COUNTERS] = {0};
    if (write_reg(sh, TPU_TLM_REG_COUNTER_CORE, core, "setting COUNTER_CORE", nullptr) == 0)
        host_transport(sh, tlm::TLM_READ_COMMAND, TPU_TLM_REG_BASE + TPU_TLM_REG_COUNTERS, v,
                       sizeof v, "reading the counters window", nullptr);
    *out = tpu_core_counters{};
    out->cycles = v[TPU_TLM_CNT_CYCLES];
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
        out->busy[u] = v[TPU_TLM_CNT_BUSY(u)];
    for (int st = 0; st < TPU_STALL_COUNT; st++)
        out->stall[st] = v[TPU_TLM_CNT_STALL(st)];
    out->hbm_read_bytes = v[TPU_TLM_CNT_HBM_READ_BYTES];
    out->hbm_write_bytes = v[TPU_TLM_CNT_HBM_WRITE_BYTES];
    out->infeed_bytes = v[TPU_TLM_CNT_INFEED_BYTES];
    out->outfeed_bytes = v[TPU_TLM_CNT_OUTFEED_BYTES];
    out->ici_bytes = v[TPU_TLM_CNT_ICI_BYTES];
    out->mxu_mac_slots = v[TPU_TLM_CNT_MXU_MAC_SLOTS];
    out->macs = v[TPU_TLM_CNT_MACS];
    out->ops = v[TPU_TLM_CNT_OPS];
    out->iterations = v[TPU_TLM_CNT_ITERATIONS];
}

// op_stats, trace_host and write_trace: open refuses settings.op_stats and settings.trace,
// so the device API never calls the first and the last (device.h), and trace_host is not
// called either (trace off). They still answer sensibly if called.
void sc_op_stats(void *impl, uint32_t core, struct tpu_op_stats *out, size_t n_ops)
{
    (void)impl;
    (void)core;
    for (size_t i = 0; i < n_ops; i++)
        out[i] = tpu_op_stats{};
}

int sc_trace_host(void *impl, const char *name, uint64_t start_cycle, uint64_t end_cycle)
{
    (void)impl;
    (void)name;
    (void)start_cycle;
    (void)end_cycle;
    return 0;
}

int sc_write_trace(void *impl, const char *path, struct tpu_diag *d)
{
    (void)impl;
    return fail(d, TPU_EUNSUPPORTED, "the %s backend records no timeline, so there is none "
                "to write to '%s': trace the same run on the native backend", k_name, path);
}

const struct tpu_device_backend systemc_backend = {
    k_name,          nullptr,          sc_open,      sc_close,    sc_load,
    sc_write,        sc_read,          sc_set_var,   sc_get_var,  sc_infeed,
    sc_outfeed,      sc_run,           sc_infeed_close, sc_cancel, sc_reset_cancel,
    sc_watch,        sc_counters,      sc_op_stats,  sc_trace_host, sc_write_trace,
};

} // namespace

extern "C" const struct tpu_device_backend *tpu_device_backend_systemc(void)
{
    return &systemc_backend;
}

extern "C" void tpu_systemc_stats(struct tpu_systemc_stats *out)
{
    *out = {};
    std::lock_guard<std::mutex> lock(shell_lock);
    if (!the_shell)
        return;
    out->transactions = the_shell->host.transactions.load();
    out->sc_time_ps = static_cast<uint64_t>(the_shell->host.sc_time_ps.load());
    out->quantum_ps = static_cast<uint64_t>(k_global_quantum.to_seconds() * 1e12 + 0.5);
}

// libsystemc's own main() (never used: tpusim's programs have their own) refers to sc_main,
// so every program that links the SystemC library needs one to link. This weak one is it; a
// platform's own sc_main (the example platform's) replaces it. It is never called.
extern "C" int sc_main(int argc, char *argv[]) __attribute__((weak));
extern "C" int sc_main(int argc, char *argv[])
{
    (void)argc;
    (void)argv;
    return 1;
}
