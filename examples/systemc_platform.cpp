/* A small SystemC virtual platform with the tpusim chip in it (README: "Dropping the chip
 * into a SystemC platform").
 *
 * host_cpu stands in for the platform's CPU: an SC_THREAD behind a loosely-timed initiator
 * socket with a quantum keeper, as an instruction-set simulator's bus interface would be. It
 * drives the chip only through the register map of sim/systemc/tpu_tlm_regs.h:
 *   1. write the program's text form into the program window, PROG_LEN, LOAD_PROGRAM;
 *   2. find the params in the buffer table by name and write them through the HBM windows;
 *   3. set the loop variable (SET_VAR), enable the DONE interrupt, LAUNCH;
 *   4. feed one tensor per step and core into the infeed windows;
 *   5. sync the quantum keeper and wait for the interrupt;
 *   6. read the outfeed, END_CYCLE and the counters, and print them.
 * The loop runs as many steps as the outfeed queue holds, so the host may read the outfeed
 * after the interrupt. A longer loop drains the outfeed during the run from a second
 * SC_THREAD with its own initiator path: a feed transaction that has to wait for its queue
 * wait()s inside b_transport (it suspends the calling process, never the kernel's OS
 * thread), so the feeding process and the draining one take turns as the queues fill and
 * empty (tests/test_tlm_threads.cpp runs that platform).
 *
 * Usage: systemc_platform [CHIP]   (a preset name or a JSON file; default "tiny")
 * Exit status 0 when every transaction succeeded and the run completed. */
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/tlm_quantumkeeper.h>

#include "tpu_tlm_chip.h"
#include "tpusim/config.h"

namespace {

/* One dense layer with a bias that learns nothing but moves: per step y = relu(x w + b),
 * b += the column sums of y, and y goes out. */
const char *const kProgram = "program platform_demo\n"
                             "var iterations\n"
                             "param w: f32[8, 8]\n"
                             "param b: f32[1, 8]\n"
                             "temp x: f32[4, 8]\n"
                             "temp y: f32[4, 8]\n"
                             "temp g: f32[1, 8]\n"
                             "loop iterations {\n"
                             "    x = infeed\n"
                             "    y = matmul x, w passes=3\n"
                             "    y = add y, b\n"
                             "    y = relu y\n"
                             "    g = reduce_sum y axis=0\n"
                             "    b = add b, g\n"
                             "    outfeed y\n"
                             "}\n";
constexpr uint32_t kVarIterations = 0; /* the program's first variable */
constexpr unsigned kRows = 4, kCols = 8;

struct host_cpu : sc_core::sc_module {
    tlm_utils::simple_initiator_socket<host_cpu> socket;
    sc_core::sc_in<bool> irq;
    int status = 1; /* the process's result: 0 once everything worked */

    SC_HAS_PROCESS(host_cpu);
    explicit host_cpu(sc_core::sc_module_name n)
        : sc_core::sc_module(n), socket("socket"), irq("irq")
    {
        SC_THREAD(main);
    }

private:
    tlm_utils::tlm_quantumkeeper m_qk;
    bool m_ok = true;

    /* One blocking transaction with the quantum keeper's local time. */
    void xfer(tlm::tlm_command cmd, uint64_t addr, void *data, unsigned len,
              tpu_tlm_feed_ext *ext = nullptr)
    {
        tlm::tlm_generic_payload t;
        sc_core::sc_time delay = m_qk.get_local_time();
        t.set_command(cmd);
        t.set_address(addr);
        t.set_data_ptr(static_cast<unsigned char *>(data));
        t.set_data_length(len);
        t.set_streaming_width(len);
        t.set_byte_enable_ptr(nullptr);
        t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
        if (ext)
            t.set_extension(ext);
        socket->b_transport(t, delay);
        if (ext)
            t.clear_extension(ext);
        m_qk.set(delay);
        if (m_qk.need_sync())
            m_qk.sync();
        if (t.is_response_error()) {
            char msg[TPU_TLM_ERRMSG_SIZE] = {};
            read_error(msg);
            std::fprintf(stderr, "systemc_platform: %s at 0x%012" PRIx64 " failed (%s): %s\n",
                         cmd == tlm::TLM_READ_COMMAND ? "read" : "write", addr,
                         t.get_response_string().c_str(), msg);
            m_ok = false;
        }
    }

    void read_error(char *msg)
    {
        tlm::tlm_generic_payload t;
        t.set_command(tlm::TLM_READ_COMMAND);
        t.set_address(TPU_TLM_ERRMSG_BASE);
        t.set_data_ptr(reinterpret_cast<unsigned char *>(msg));
        t.set_data_length(TPU_TLM_ERRMSG_SIZE);
        t.set_streaming_width(TPU_TLM_ERRMSG_SIZE);
        socket->transport_dbg(t); /* no time, no side effects */
        msg[TPU_TLM_ERRMSG_SIZE - 1] = '\0';
    }

    uint32_t rd(uint32_t reg)
    {
        uint32_t v = 0;
        xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_BASE + reg, &v, 4);
        return v;
    }

    void wr(uint32_t reg, uint32_t v)
    {
        xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_BASE + reg, &v, 4);
    }

    uint64_t rd64(uint32_t lo_reg)
    {
        uint64_t lo = rd(lo_reg);
        return (uint64_t)rd(lo_reg + 4) << 32 | lo;
    }

    /* The HBM offset of the named buffer, from the buffer table. */
    bool find_buffer(const char *name, uint64_t *offset, uint64_t *bytes)
    {
        uint32_t n = rd(TPU_TLM_REG_N_BUFFERS);
        for (uint32_t i = 0; i < n; i++) {
            uint8_t e[TPU_TLM_BUFTAB_ENTRY];
            xfer(tlm::TLM_READ_COMMAND, TPU_TLM_BUFTAB_BASE + i * TPU_TLM_BUFTAB_ENTRY, e,
                 sizeof e);
            if (std::strcmp(reinterpret_cast<const char *>(e + TPU_TLM_BUF_NAME), name) == 0) {
                std::memcpy(offset, e + TPU_TLM_BUF_OFFSET, 8);
                std::memcpy(bytes, e + TPU_TLM_BUF_BYTES, 8);
                return true;
            }
        }
        std::fprintf(stderr, "systemc_platform: no buffer \"%s\" in the buffer table\n", name);
        m_ok = false;
        return false;
    }

    void main()
    {
        m_qk.reset();
        const uint32_t n_cores = rd(TPU_TLM_REG_N_CORES);
        std::printf("chip: id 0x%08" PRIx32 ", version 0x%08" PRIx32 ", %" PRIu32
                    " cores, clock period %" PRIu32 " ps\n",
                    rd(TPU_TLM_REG_ID), rd(TPU_TLM_REG_VERSION), n_cores,
                    rd(TPU_TLM_REG_CLOCK_PERIOD_PS));

        /* 1. the program */
        std::string text = kProgram;
        xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE, &text[0], (unsigned)text.size());
        wr(TPU_TLM_REG_PROG_LEN, (uint32_t)text.size());
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LOAD_PROGRAM);
        if (!m_ok)
            return finish();

        /* 2. the params: w[i][j] = (i - j) / 8 on every core, b = 0 (as loaded) */
        uint64_t w_off = 0, w_bytes = 0;
        if (!find_buffer("w", &w_off, &w_bytes))
            return finish();
        std::vector<float> w(kCols * kCols);
        for (unsigned i = 0; i < kCols; i++)
            for (unsigned j = 0; j < kCols; j++)
                w[i * kCols + j] = ((float)i - (float)j) / 8.0f;
        for (uint32_t core = 0; core < n_cores; core++)
            xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(core, w_off), w.data(),
                 (unsigned)w_bytes);

        /* 3. the loop count, the interrupt, the launch at the current time */
        const uint32_t steps = 2; /* tiny's outfeed queue holds 2 tensors per core */
        wr(TPU_TLM_REG_VAR_INDEX, kVarIterations);
        wr(TPU_TLM_REG_VAR_VALUE_LO, steps);
        wr(TPU_TLM_REG_VAR_VALUE_HI, 0);
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR);
        wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_ALL);
        sc_core::sc_time now = m_qk.get_current_time();
        /* the chip's cycles at this time: sc_time over the period the chip reports */
        const uint64_t period_ps = rd(TPU_TLM_REG_CLOCK_PERIOD_PS);
        const uint64_t start = (uint64_t)(now.to_seconds() * 1e12) / period_ps;
        wr(TPU_TLM_REG_START_CYCLE_LO, (uint32_t)start);
        wr(TPU_TLM_REG_START_CYCLE_HI, (uint32_t)(start >> 32));
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
        std::printf("launched %" PRIu32 " steps at %s (cycle %" PRIu64 ")\n", steps,
                    now.to_string().c_str(), start);

        /* 4. the infeed: x[r][c] = r + c + step + core, with the host's cycle in the
         * extension (the quantum keeper's current time over the period) */
        for (uint32_t s = 0; s < steps; s++)
            for (uint32_t core = 0; core < n_cores; core++) {
                std::vector<float> x(kRows * kCols);
                for (unsigned r = 0; r < kRows; r++)
                    for (unsigned c = 0; c < kCols; c++)
                        x[r * kCols + c] = (float)(r + c + s + core);
                tpu_tlm_feed_ext ext;
                ext.host_cycle =
                    (uint64_t)(m_qk.get_current_time().to_seconds() * 1e12) / period_ps;
                xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(core), x.data(),
                     (unsigned)(x.size() * sizeof(float)), &ext);
            }

        /* 5. the interrupt */
        m_qk.sync();
        if (!irq.read())
            wait(irq.posedge_event());
        const uint32_t irq_status = rd(TPU_TLM_REG_IRQ_STATUS);
        wr(TPU_TLM_REG_IRQ_STATUS, irq_status); /* acknowledge */
        const uint64_t end = rd64(TPU_TLM_REG_END_CYCLE_LO);
        const int32_t run_status = (int32_t)rd(TPU_TLM_REG_RUN_STATUS);
        std::printf("interrupt seen at %s: IRQ_STATUS 0x%" PRIx32 ", RUN_STATUS %" PRId32
                    ", END_CYCLE %" PRIu64 "\n",
                    sc_core::sc_time_stamp().to_string().c_str(), irq_status, run_status, end);
        if (run_status != 0) {
            char msg[TPU_TLM_ERRMSG_SIZE];
            read_error(msg);
            std::fprintf(stderr, "systemc_platform: the run failed: %s\n", msg);
            m_ok = false;
            return finish();
        }

        /* 6. the outfeed and the counters */
        for (uint32_t s = 0; s < steps; s++)
            for (uint32_t core = 0; core < n_cores; core++) {
                std::vector<float> y(kRows * kCols);
                tpu_tlm_feed_ext ext;
                ext.host_cycle = end;
                xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(core), y.data(),
                     (unsigned)(y.size() * sizeof(float)), &ext);
                std::printf("outfeed core %" PRIu32 " step %" PRIu32 " (ready at cycle %" PRIu64
                            "):",
                            core, s, ext.ready_cycle);
                for (unsigned r = 0; r < kRows; r++) {
                    std::printf(" [");
                    for (unsigned c = 0; c < kCols; c++)
                        std::printf(c ? " %g" : "%g", (double)y[r * kCols + c]);
                    std::printf("]");
                }
                std::printf("\n");
            }
        for (uint32_t core = 0; core < n_cores; core++) {
            wr(TPU_TLM_REG_COUNTER_CORE, core);
            uint64_t v[TPU_TLM_N_COUNTERS];
            xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS, v, sizeof v);
            std::printf("counters core %" PRIu32 ": cycles %" PRIu64 ", iterations %" PRIu64
                        ", ops %" PRIu64 ", macs %" PRIu64 ", busy mxu %" PRIu64 " vpu %" PRIu64
                        " dma %" PRIu64 ", stall infeed_empty %" PRIu64 ", infeed bytes %" PRIu64
                        ", outfeed bytes %" PRIu64 "\n",
                        core, v[TPU_TLM_CNT_CYCLES], v[TPU_TLM_CNT_ITERATIONS], v[TPU_TLM_CNT_OPS],
                        v[TPU_TLM_CNT_MACS], v[TPU_TLM_CNT_BUSY(TPU_UNIT_MXU)],
                        v[TPU_TLM_CNT_BUSY(TPU_UNIT_VPU)], v[TPU_TLM_CNT_BUSY(TPU_UNIT_DMA)],
                        v[TPU_TLM_CNT_STALL(TPU_STALL_INFEED_EMPTY)],
                        v[TPU_TLM_CNT_INFEED_BYTES], v[TPU_TLM_CNT_OUTFEED_BYTES]);
        }
        finish();
    }

    /* The process ends here; with nothing else pending, sc_start returns. */
    void finish() { status = m_ok ? 0 : 1; }
};

struct platform : sc_core::sc_module {
    host_cpu cpu;
    tpu_tlm_chip chip;
    sc_core::sc_signal<bool> irq_wire;

    explicit platform(sc_core::sc_module_name n)
        : sc_core::sc_module(n), cpu("cpu"), chip("tpu"), irq_wire("irq_wire")
    {
        cpu.socket.bind(chip.socket);
        chip.irq(irq_wire);
        cpu.irq(irq_wire);
    }
};

} // namespace

int sc_main(int argc, char **argv)
{
    const char *chip_name = argc > 1 ? argv[1] : "tiny";
    struct tpu_chip_config chip;
    struct tpu_diag d = {};
    if (tpu_config_load(chip_name, &chip, &d)) {
        std::fprintf(stderr, "systemc_platform: %s\n", d.msg);
        return 2;
    }
    /* the global quantum: how far an initiator may run ahead of SystemC time */
    tlm_utils::tlm_quantumkeeper::set_global_quantum(sc_core::sc_time(1, sc_core::SC_US));
    platform top("top");
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    if (top.chip.power_on(s, &d)) {
        std::fprintf(stderr, "systemc_platform: %s\n", d.msg);
        return 2;
    }
    sc_core::sc_start();
    return top.cpu.status;
}
