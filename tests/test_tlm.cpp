/* The TLM-2.0 target (sim/systemc/tpu_tlm_chip.h) driven by a test initiator: every register
 * of tpu_tlm_regs.h, every misuse with its response, ERROR_CODE and message, and a run whose
 * outfeed values, ready cycles, end cycle, params, variables and counters equal the native
 * device's for the same program, data and host cycles.
 *
 * SystemC elaborates once per process, so all tests share one platform (the chip, an
 * initiator socket, the irq wire) made in sc_main before the tests run; that platform is the
 * one piece of state shared between tests. Each test's setup powers a fresh tiny chip on and
 * its teardown powers it off, so no test sees another's device. The tests call the socket
 * from sc_main between sc_start calls (the kernel is paused), and sc_start() lets a launched
 * run's completion reach the kernel: it returns when the run has ended and nothing else is
 * pending. */
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "tpu_tlm_chip.h"
#include "tpusim/config.h"

/* CMocka last: it defines a macro named fail */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

using sc_core::sc_time;
using tlm::tlm_response_status;

namespace {

struct bench : sc_core::sc_module {
    tlm_utils::simple_initiator_socket<bench> sock;
    sc_core::sc_signal<bool> irq_wire;
    tpu_tlm_chip chip;
    explicit bench(sc_core::sc_module_name n)
        : sc_core::sc_module(n), sock("sock"), irq_wire("irq_wire"), chip("chip")
    {
        sock.bind(chip.socket);
        chip.irq(irq_wire);
    }
};

bench *g_bench; /* the one platform (see the top of the file) */

/* The program of the tests: per step one infeed, a matmul, a param updated in place, one
 * outfeed; the loop count in `iterations`, a step counter in `step`. */
const char *const kProgram = "program tlm_test\n"
                             "var iterations\n"
                             "var step\n"
                             "param w: f32[8, 8]\n"
                             "param b: f32[1, 8]\n"
                             "temp x: f32[4, 8]\n"
                             "temp y: f32[4, 8]\n"
                             "temp g: f32[1, 8]\n"
                             "loop iterations {\n"
                             "    x = infeed\n"
                             "    var_add step 1\n"
                             "    y = matmul x, w passes=3\n"
                             "    y = add y, b\n"
                             "    y = relu y\n"
                             "    g = reduce_sum y axis=0\n"
                             "    b = add b, g\n"
                             "    outfeed y\n"
                             "}\n";
constexpr uint32_t kW = 0, kB = 1, kX = 2; /* buffer ids */
constexpr uint32_t kIter = 0, kStep = 1;   /* variable ids */
constexpr size_t kWBytes = 8 * 8 * 4, kBBytes = 8 * 4, kXBytes = 4 * 8 * 4;

struct xfer_opts {
    const uint8_t *be = nullptr;
    unsigned be_len = 0;
    unsigned streaming_width = 0; /* 0: the length */
    tpu_tlm_feed_ext *ext = nullptr;
    sc_time *delay = nullptr;
};

tlm_response_status xfer(tlm::tlm_command cmd, uint64_t addr, void *data, unsigned len,
                         const xfer_opts &o = xfer_opts())
{
    tlm::tlm_generic_payload t;
    sc_time local = sc_core::SC_ZERO_TIME;
    t.set_command(cmd);
    t.set_address(addr);
    t.set_data_ptr((unsigned char *)data);
    t.set_data_length(len);
    t.set_streaming_width(o.streaming_width ? o.streaming_width : len);
    t.set_byte_enable_ptr((unsigned char *)o.be);
    t.set_byte_enable_length(o.be_len);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    if (o.ext)
        t.set_extension(o.ext);
    g_bench->sock->b_transport(t, o.delay ? *o.delay : local);
    if (o.ext)
        t.clear_extension(o.ext);
    return t.get_response_status();
}

uint32_t rd(uint64_t off)
{
    uint32_t v = 0xdeadbeef;
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_BASE + off, &v, 4),
                     tlm::TLM_OK_RESPONSE);
    return v;
}

void wr(uint64_t off, uint32_t v)
{
    assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_BASE + off, &v, 4),
                     tlm::TLM_OK_RESPONSE);
}

std::string errmsg()
{
    char m[TPU_TLM_ERRMSG_SIZE];
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_ERRMSG_BASE, m, sizeof m),
                     tlm::TLM_OK_RESPONSE);
    m[sizeof m - 1] = '\0';
    return m;
}

/* Checks a failed access: its response, ERROR_CODE, ERROR_TPU, STATUS.ERROR and that the
 * message holds each of the needles; then clears the error. */
void expect_fail(tlm_response_status got, tlm_response_status want, enum tpu_tlm_err code,
                 int tpu_rc, std::initializer_list<const char *> needles)
{
    assert_int_equal(got, want);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_CODE), code);
    assert_int_equal((int32_t)rd(TPU_TLM_REG_ERROR_TPU), tpu_rc);
    assert_true(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_ERROR);
    std::string m = errmsg();
    for (const char *n : needles) {
        if (m.find(n) == std::string::npos)
            fail_msg("message \"%s\" lacks \"%s\"", m.c_str(), n);
    }
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_CLEAR_ERROR);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_CODE), 0);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_TPU), 0);
    assert_false(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_ERROR);
    assert_string_equal(errmsg().c_str(), "");
}

tlm_response_status write_reg_raw(uint64_t off, uint32_t v)
{
    return xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_BASE + off, &v, 4);
}

tlm_response_status load_text(const char *text)
{
    size_t n = strlen(text);
    assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE, (void *)text, (unsigned)n),
                     tlm::TLM_OK_RESPONSE);
    wr(TPU_TLM_REG_PROG_LEN, (uint32_t)n);
    return write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LOAD_PROGRAM);
}

uint64_t buf_offset(uint32_t id)
{
    uint64_t off = 0;
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND,
                          TPU_TLM_BUFTAB_BASE + id * TPU_TLM_BUFTAB_ENTRY + TPU_TLM_BUF_OFFSET,
                          &off, 8),
                     tlm::TLM_OK_RESPONSE);
    return off;
}

void set_var(uint32_t var, int64_t v)
{
    wr(TPU_TLM_REG_VAR_INDEX, var);
    wr(TPU_TLM_REG_VAR_VALUE_LO, (uint32_t)v);
    wr(TPU_TLM_REG_VAR_VALUE_HI, (uint32_t)((uint64_t)v >> 32));
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR);
}

int64_t get_var(uint32_t core, uint32_t var)
{
    wr(TPU_TLM_REG_VAR_INDEX, var);
    wr(TPU_TLM_REG_VAR_CORE, core);
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_GET_VAR);
    return (int64_t)((uint64_t)rd(TPU_TLM_REG_VAR_VALUE_HI) << 32 |
                     rd(TPU_TLM_REG_VAR_VALUE_LO));
}

void fill(std::vector<float> &v, float scale, int salt)
{
    for (size_t i = 0; i < v.size(); i++)
        v[i] = scale * (float)((int)((i * 7 + (size_t)salt * 13) % 11) - 5);
}

tpu_device_settings tiny_settings()
{
    struct tpu_chip_config chip;
    struct tpu_diag d = {};
    if (tpu_config_load_preset("tiny", &chip, &d))
        fail_msg("tiny preset: %s", d.msg);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    return s;
}

int power_on(void **state)
{
    (void)state;
    struct tpu_diag d = {};
    tpu_device_settings s = tiny_settings();
    if (g_bench->chip.power_on(s, &d)) {
        fprintf(stderr, "power_on: %s\n", d.msg);
        return -1;
    }
    return 0;
}

int power_off(void **state)
{
    (void)state;
    struct tpu_diag d = {};
    if (rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_BUSY) {
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_CANCEL);
        sc_core::sc_start();
    }
    return g_bench->chip.power_off(&d) ? -1 : 0;
}

/* ---- registers ---------------------------------------------------------------------------- */

void test_registers_after_power_on(void **state)
{
    (void)state;
    assert_int_equal(rd(TPU_TLM_REG_ID), 0x54505553u);
    assert_int_equal(rd(TPU_TLM_REG_VERSION), 0x00010000u);
    assert_int_equal(rd(TPU_TLM_REG_STATUS), TPU_TLM_STATUS_POWERED);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_CODE), 0);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_TPU), 0);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), 0);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_ENABLE), 0);
    assert_int_equal(rd(TPU_TLM_REG_N_CORES), 2);     /* tiny: 1 chip x 2 cores */
    assert_int_equal(rd(TPU_TLM_REG_N_BUFFERS), 0);   /* no program */
    assert_int_equal(rd(TPU_TLM_REG_N_VARS), 0);
    assert_int_equal(rd(TPU_TLM_REG_CLOCK_PERIOD_PS), 1000); /* 1000 MHz */
    assert_int_equal(rd(TPU_TLM_REG_RUNS), 0);
    assert_int_equal(rd(TPU_TLM_REG_RUN_STATUS), 0);
    assert_int_equal(rd(TPU_TLM_REG_END_CYCLE_LO), 0);
    assert_int_equal(rd(TPU_TLM_REG_END_CYCLE_HI), 0);
    assert_true(g_bench->chip.clock_period() == sc_time(1, sc_core::SC_NS));
    assert_true(g_bench->chip.cycles_to_time(1234) == sc_time(1234, sc_core::SC_NS));
    assert_int_equal(g_bench->chip.time_to_cycles(sc_time(1234, sc_core::SC_NS)), 1234);
    assert_int_equal(g_bench->chip.time_to_cycles(sc_time(1234999, sc_core::SC_PS)), 1234);
}

void test_registers_read_back(void **state)
{
    (void)state;
    const uint64_t rw[] = {TPU_TLM_REG_PROG_LEN,       TPU_TLM_REG_VAR_INDEX,
                           TPU_TLM_REG_VAR_CORE,       TPU_TLM_REG_VAR_VALUE_LO,
                           TPU_TLM_REG_VAR_VALUE_HI,   TPU_TLM_REG_START_CYCLE_LO,
                           TPU_TLM_REG_START_CYCLE_HI, TPU_TLM_REG_COUNTER_CORE};
    for (size_t i = 0; i < sizeof rw / sizeof rw[0]; i++) {
        uint32_t v = 0x1000u + 0x11u * (uint32_t)i;
        wr(rw[i], v);
        assert_int_equal(rd(rw[i]), v);
    }
    wr(TPU_TLM_REG_IRQ_ENABLE, 0xffffffffu);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_ENABLE), TPU_TLM_IRQ_ALL); /* unused bits read 0 */
    /* CTRL reads the last command written, also a failed one */
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_CLEAR_ERROR);
    assert_int_equal(rd(TPU_TLM_REG_CTRL), TPU_TLM_CMD_CLEAR_ERROR);
    /* every read-only register refuses writes and keeps its value */
    const uint64_t ro[] = {TPU_TLM_REG_ID,         TPU_TLM_REG_VERSION,
                           TPU_TLM_REG_STATUS,     TPU_TLM_REG_ERROR_CODE,
                           TPU_TLM_REG_ERROR_TPU,  TPU_TLM_REG_N_CORES,
                           TPU_TLM_REG_N_BUFFERS,  TPU_TLM_REG_N_VARS,
                           TPU_TLM_REG_END_CYCLE_LO, TPU_TLM_REG_END_CYCLE_HI,
                           TPU_TLM_REG_RUN_STATUS, TPU_TLM_REG_RUNS,
                           TPU_TLM_REG_CLOCK_PERIOD_PS};
    for (uint64_t off : ro) {
        uint32_t before = rd(off);
        expect_fail(write_reg_raw(off, 7), tlm::TLM_COMMAND_ERROR_RESPONSE,
                    TPU_TLM_ERR_COMMAND, 0, {"read-only register", "only CTRL"});
        if (off != TPU_TLM_REG_STATUS && off != TPU_TLM_REG_ERROR_CODE)
            assert_int_equal(rd(off), before);
    }
    /* a register access costs one chip cycle of annotated delay */
    sc_time delay = sc_core::SC_ZERO_TIME;
    uint32_t v;
    xfer_opts o;
    o.delay = &delay;
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_ID, &v, 4, o),
                     tlm::TLM_OK_RESPONSE);
    assert_true(delay == sc_time(1, sc_core::SC_NS));
    /* TLM_IGNORE_COMMAND does nothing and succeeds */
    assert_int_equal(xfer(tlm::TLM_IGNORE_COMMAND, 0x777, &v, 4), tlm::TLM_OK_RESPONSE);
}

void test_program_window_and_buffer_table(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    assert_int_equal(rd(TPU_TLM_REG_STATUS), TPU_TLM_STATUS_POWERED | TPU_TLM_STATUS_LOADED);
    assert_int_equal(rd(TPU_TLM_REG_N_BUFFERS), 5);
    assert_int_equal(rd(TPU_TLM_REG_N_VARS), 2);
    /* the window reads back what was written */
    char back[32] = {};
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_PROG_BASE + 8, back, 8),
                     tlm::TLM_OK_RESPONSE);
    assert_memory_equal(back, "tlm_test", 8);
    /* entries: bytes, offset (64-aligned, in id order), dtype, kind, rows, cols, name */
    struct want {
        const char *name;
        uint64_t bytes, offset;
        uint32_t dtype, kind, rows, cols;
    } w[] = {{"w", 256, 0, TPU_F32, TPU_BUF_PARAM, 8, 8},
             {"b", 32, 256, TPU_F32, TPU_BUF_PARAM, 1, 8},
             {"x", 128, 320, TPU_F32, TPU_BUF_TEMP, 4, 8},
             {"y", 128, 448, TPU_F32, TPU_BUF_TEMP, 4, 8},
             {"g", 32, 576, TPU_F32, TPU_BUF_TEMP, 1, 8}};
    for (uint32_t i = 0; i < 5; i++) {
        uint8_t e[TPU_TLM_BUFTAB_ENTRY];
        assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_BUFTAB_BASE +
                                                         i * TPU_TLM_BUFTAB_ENTRY,
                              e, sizeof e),
                         tlm::TLM_OK_RESPONSE);
        uint64_t bytes, off;
        uint32_t u[4];
        memcpy(&bytes, e + TPU_TLM_BUF_BYTES, 8);
        memcpy(&off, e + TPU_TLM_BUF_OFFSET, 8);
        memcpy(u, e + TPU_TLM_BUF_DTYPE, 16);
        assert_int_equal(bytes, w[i].bytes);
        assert_int_equal(off, w[i].offset);
        assert_int_equal(u[0], w[i].dtype);
        assert_int_equal(u[1], w[i].kind);
        assert_int_equal(u[2], w[i].rows);
        assert_int_equal(u[3], w[i].cols);
        assert_string_equal((const char *)e + TPU_TLM_BUF_NAME, w[i].name);
        for (size_t k = TPU_TLM_BUF_NAME + strlen(w[i].name); k < sizeof e; k++)
            assert_int_equal(e[k], 0);
    }
    /* past N_BUFFERS the table reads zeros */
    uint8_t z[16];
    memset(z, 0xaa, sizeof z);
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_BUFTAB_BASE + 5 * TPU_TLM_BUFTAB_ENTRY,
                          z, sizeof z),
                     tlm::TLM_OK_RESPONSE);
    for (uint8_t c : z)
        assert_int_equal(c, 0);
}

void test_variables(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, -5000000000ll);
    assert_int_equal(get_var(0, kIter), -5000000000ll);
    assert_int_equal(get_var(1, kIter), -5000000000ll);
    assert_int_equal(tpu_device_get_var(g_bench->chip.device(), 1, kIter), -5000000000ll);
    assert_int_equal(get_var(1, kStep), 0);
    wr(TPU_TLM_REG_VAR_INDEX, 2);
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                {"VAR_INDEX 2 is out of range", "\"tlm_test\" has 2 variable(s)"});
    wr(TPU_TLM_REG_VAR_INDEX, 0);
    wr(TPU_TLM_REG_VAR_CORE, 2);
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_GET_VAR),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                {"VAR_CORE 2 is out of range", "2 cores (0 to 1)"});
}

void test_hbm_window(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    std::vector<float> w(64), back(64);
    fill(w, 0.25f, 1);
    sc_time delay = sc_core::SC_ZERO_TIME;
    xfer_opts o;
    o.delay = &delay;
    assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(1, buf_offset(kW)), w.data(),
                          kWBytes, o),
                     tlm::TLM_OK_RESPONSE);
    /* tiny: 8 GB/s at 1000 MHz = 8 bytes per cycle: 256 bytes take 32 cycles */
    assert_true(delay == sc_time(32, sc_core::SC_NS));
    struct tpu_diag d = {};
    assert_int_equal(tpu_device_read(g_bench->chip.device(), 1, kW, back.data(), kWBytes, &d), 0);
    assert_memory_equal(back.data(), w.data(), kWBytes);
    /* core 0's copy is untouched */
    assert_int_equal(tpu_device_read(g_bench->chip.device(), 0, kW, back.data(), kWBytes, &d), 0);
    for (float f : back)
        assert_true(f == 0.0f);
    /* a part of a buffer, with byte enables: lanes 0 and 2 of each 4 */
    uint8_t part[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint8_t be[4] = {0xff, 0x00, 0xff, 0x00};
    xfer_opts obe;
    obe.be = be;
    obe.be_len = 4;
    uint64_t at = buf_offset(kB) + 4;
    assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(0, at), part, 8, obe),
                     tlm::TLM_OK_RESPONSE);
    uint8_t b[kBBytes];
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, buf_offset(kB)), b,
                          sizeof b),
                     tlm::TLM_OK_RESPONSE);
    const uint8_t want[12] = {0, 0, 0, 0, 1, 0, 3, 0, 5, 0, 7, 0};
    assert_memory_equal(b, want, sizeof want);
    for (size_t i = sizeof want; i < sizeof b; i++)
        assert_int_equal(b[i], 0);
    /* a partial read */
    uint8_t two[2];
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, at + 2), two, 2),
                     tlm::TLM_OK_RESPONSE);
    assert_int_equal(two[0], 3);
    assert_int_equal(two[1], 0);
    /* debug transport reads HBM and registers, writes nothing */
    tlm::tlm_generic_payload t;
    uint8_t dbg[kWBytes];
    t.set_command(tlm::TLM_READ_COMMAND);
    t.set_address(TPU_TLM_HBM_ADDR(1, buf_offset(kW)));
    t.set_data_ptr(dbg);
    t.set_data_length(kWBytes);
    t.set_streaming_width(kWBytes);
    assert_int_equal(g_bench->sock->transport_dbg(t), kWBytes);
    assert_memory_equal(dbg, w.data(), kWBytes);
    uint32_t id = 0;
    t.set_address(TPU_TLM_REG_ID);
    t.set_data_ptr((unsigned char *)&id);
    t.set_data_length(4);
    t.set_streaming_width(4);
    assert_int_equal(g_bench->sock->transport_dbg(t), 4);
    assert_int_equal(id, TPU_TLM_ID_VALUE);
    t.set_command(tlm::TLM_WRITE_COMMAND);
    t.set_address(TPU_TLM_REG_PROG_LEN);
    assert_int_equal(g_bench->sock->transport_dbg(t), 0);
    assert_int_equal(rd(TPU_TLM_REG_PROG_LEN), strlen(kProgram));
    /* a debug read that would fail records no error */
    t.set_command(tlm::TLM_READ_COMMAND);
    t.set_address(0x60);
    assert_int_equal(g_bench->sock->transport_dbg(t), 0);
    t.set_address(TPU_TLM_OUTFEED_ADDR(0));
    assert_int_equal(g_bench->sock->transport_dbg(t), 0);
    assert_int_equal(rd(TPU_TLM_REG_ERROR_CODE), 0);
}

void test_dmi_refused(void **state)
{
    (void)state;
    tlm::tlm_generic_payload t;
    tlm::tlm_dmi dmi;
    t.set_address(TPU_TLM_HBM_ADDR(0, 0));
    t.set_command(tlm::TLM_READ_COMMAND);
    assert_false(g_bench->sock->get_direct_mem_ptr(t, dmi));
    assert_true(dmi.is_none_allowed());
    assert_int_equal(dmi.get_start_address(), 0);
    assert_true(dmi.get_end_address() == ~(sc_dt::uint64)0);
    /* and b_transport never hints at DMI */
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    tlm::tlm_generic_payload r;
    uint32_t v;
    r.set_command(tlm::TLM_READ_COMMAND);
    r.set_address(TPU_TLM_REG_ID);
    r.set_data_ptr((unsigned char *)&v);
    r.set_data_length(4);
    r.set_streaming_width(4);
    r.set_dmi_allowed(true);
    sc_time delay = sc_core::SC_ZERO_TIME;
    g_bench->sock->b_transport(r, delay);
    assert_false(r.is_dmi_allowed());
}

/* ---- misuse ------------------------------------------------------------------------------ */

void test_misuse_address(void **state)
{
    (void)state;
    uint32_t v = 0;
    expect_fail(xfer(tlm::TLM_READ_COMMAND, 0x060, &v, 4), tlm::TLM_ADDRESS_ERROR_RESPONSE,
                TPU_TLM_ERR_ADDRESS, 0, {"offset 0x060", "no register there"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, 0x2000, &v, 4), tlm::TLM_ADDRESS_ERROR_RESPONSE,
                TPU_TLM_ERR_ADDRESS, 0, {"0x000000002000", "no register or window"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, 0x040000000000ull, &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"0x040000000000", "address map"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_ERRMSG_BASE + 0x3fe, &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"runs past the end"});
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(2, 0), &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"window of core 2", "2 cores (0 to 1)"});
    /* between b (256..288) and x (320..): the alignment gap */
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, 300), &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"offset 0x12c", "inside one buffer", "buffer 1, is 0x100-0x120"});
    /* across the end of w into b's gap */
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, 254), &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"4 bytes at core 0 offset 0xfe"});
    /* past the last buffer */
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(1, 0x100000), &v, 4),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"core 1 offset 0x100000"});
    std::vector<uint8_t> x(kXBytes);
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(5), x.data(), kXBytes),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"infeed write", "window of core 5"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(1) + 8, x.data(), kXBytes),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"one transaction is one tensor", "0x201000000000"});
    std::vector<uint8_t> big(TPU_TLM_PROG_SIZE / 2 + 8);
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE + TPU_TLM_PROG_SIZE / 2,
                     big.data(), (unsigned)big.size()),
                tlm::TLM_ADDRESS_ERROR_RESPONSE, TPU_TLM_ERR_ADDRESS, 0,
                {"runs past the window's end"});
}

void test_misuse_burst_and_byte_enables(void **state)
{
    (void)state;
    uint8_t b8[8] = {};
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_ID, b8, 2), tlm::TLM_BURST_ERROR_RESPONSE,
                TPU_TLM_ERR_BURST, 0, {"2 bytes at offset 0x000", "exactly 4 bytes"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_VAR_VALUE_LO, b8, 8),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                {"8 bytes at offset 0x038"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, 0x006, b8, 4), tlm::TLM_BURST_ERROR_RESPONSE,
                TPU_TLM_ERR_BURST, 0, {"4-aligned offset"});
    xfer_opts sw;
    sw.streaming_width = 2;
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_ID, b8, 4, sw),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0, {"streaming width 2"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS + 2, b8, 4),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                {"counters read of 4 bytes at offset 0x102", "multiple of 4"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_PROG_BASE, b8, 0),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0, {"read of 0 bytes"});
    const uint8_t be[4] = {0xff, 0xff, 0xff, 0x00};
    xfer_opts obe;
    obe.be = be;
    obe.be_len = 4;
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_IRQ_ENABLE, b8, 4, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"offset 0x01c with byte enables", "all four byte lanes"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS, b8, 4, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"counters read"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_ERRMSG_BASE, b8, 4, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"0x000000001000 with byte enables"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_BUFTAB_BASE, b8, 4, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"the buffer table take whole bytes"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE, b8, 4, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"program window write with byte enables"});
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    std::vector<uint8_t> x(kXBytes);
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(0), x.data(), kXBytes, obe),
                tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, TPU_TLM_ERR_BYTE_ENABLE, 0,
                {"infeed write with byte enables", "a tensor moves whole"});
    xfer_opts sw4;
    sw4.streaming_width = 4;
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(0), x.data(), kXBytes, sw4),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                {"128 bytes with streaming width 4"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(0, 0), x.data(), kXBytes, sw4),
                tlm::TLM_BURST_ERROR_RESPONSE, TPU_TLM_ERR_BURST, 0,
                {"streaming width 4", "not FIFOs"});
}

void test_misuse_commands(void **state)
{
    (void)state;
    uint8_t b8[8] = {};
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, 0x99), tlm::TLM_GENERIC_ERROR_RESPONSE,
                TPU_TLM_ERR_COMMAND, 0, {"command 0x99 is unknown"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_ERRMSG_BASE, b8, 4),
                tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0, {"read only"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_BUFTAB_BASE, b8, 4),
                tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0, {"read only"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_COUNTERS, b8, 8),
                tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                {"counters are read only"});
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                {"LAUNCH with no program loaded", "LOAD_PROGRAM first"});
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                {"SET_VAR with no program loaded"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, 0), b8, 4),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_PROGRAM, 0,
                {"HBM read with no program loaded"});
    expect_fail(write_reg_raw(TPU_TLM_REG_PROG_LEN, TPU_TLM_PROG_SIZE + 1),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                {"PROG_LEN 16777217 is larger than the program window"});
    wr(TPU_TLM_REG_COUNTER_CORE, 2);
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS, b8, 8),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_RANGE, 0,
                {"COUNTER_CORE 2 is out of range"});
    /* a program that does not parse: the parser's line and column, the earlier state kept */
    expect_fail(load_text("program p\nvar n\nloop n {\n    frobnicate\n}\n"),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_PROGRAM, TPU_EPARSE,
                {"LOAD_PROGRAM: program window:4:5:", "frobnicate"});
    assert_false(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_LOADED);
    /* one that parses but does not verify: the verifier's sentence */
    expect_fail(load_text("program p\nparam a: f32[4, 8]\nparam c: f32[4, 4]\n"
                          "temp y: f32[4, 8]\ny = add a, c\n"),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_PROGRAM, TPU_ESHAPE,
                {"LOAD_PROGRAM: ", "add"});
    assert_false(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_LOADED);
    /* a loaded program stays loaded after a failed load */
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    expect_fail(load_text("program q\nparam"), tlm::TLM_GENERIC_ERROR_RESPONSE,
                TPU_TLM_ERR_PROGRAM, TPU_EPARSE, {"program window:2:"});
    assert_true(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_LOADED);
    assert_int_equal(rd(TPU_TLM_REG_N_BUFFERS), 5);
    /* feeds in the wrong direction */
    std::vector<uint8_t> x(kXBytes);
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_INFEED_ADDR(0), x.data(), kXBytes),
                tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                {"read of the infeed window of core 0", "the infeed window takes writes"});
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_OUTFEED_ADDR(1), x.data(), kXBytes),
                tlm::TLM_COMMAND_ERROR_RESPONSE, TPU_TLM_ERR_COMMAND, 0,
                {"write of the outfeed window of core 1"});
}

void test_misuse_powered_off(void **state)
{
    (void)state;
    struct tpu_diag d = {};
    assert_int_equal(g_bench->chip.power_off(&d), 0);
    assert_int_equal(rd(TPU_TLM_REG_STATUS), 0);
    assert_int_equal(rd(TPU_TLM_REG_ID), TPU_TLM_ID_VALUE);
    assert_int_equal(rd(TPU_TLM_REG_N_CORES), 0);
    assert_null(g_bench->chip.device());
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LOAD_PROGRAM),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                {"LOAD_PROGRAM while the chip is powered off", "power_on"});
    uint8_t b8[8];
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(0, 0), b8, 8),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                {"HBM read while the chip is powered off"});
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(0), b8, 8),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_NO_DEVICE, 0,
                {"outfeed read while the chip is powered off"});
    /* powering on twice is refused */
    tpu_device_settings s = tiny_settings();
    assert_int_equal(g_bench->chip.power_on(s, &d), 0);
    assert_int_equal(g_bench->chip.power_on(s, &d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "already powered on"));
    s.backend = nullptr;
}

/* ---- runs ------------------------------------------------------------------------------ */

/* Launches with no infeed: the cores wait, so the run stays busy until canceled. */
void test_misuse_while_busy(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, 3);
    wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_ALL);
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
    assert_true(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_BUSY);
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                {"LAUNCH while a run is under way", "CANCEL"});
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LOAD_PROGRAM),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0, {"LOAD_PROGRAM while"});
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0, {"SET_VAR while"});
    expect_fail(write_reg_raw(TPU_TLM_REG_CTRL, TPU_TLM_CMD_RESET_CANCEL),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0, {"RESET_CANCEL while"});
    std::vector<uint8_t> w(kWBytes);
    expect_fail(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(0, 0), w.data(), kWBytes),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                {"HBM write during a run", "the cores own HBM"});
    uint8_t c[8];
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS, c, 8),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_BUSY, 0,
                {"counters read during a run"});
    struct tpu_diag d = {};
    assert_int_equal(g_bench->chip.power_off(&d), TPU_EINVAL);
    assert_non_null(strstr(d.msg, "cannot power off during a run"));
    /* cancel: the run ends with TPU_ECANCELED, IRQ_STATUS.FAILED, the irq wire high */
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_CANCEL);
    assert_true(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_CANCELED);
    sc_core::sc_start();
    assert_int_equal(rd(TPU_TLM_REG_STATUS), TPU_TLM_STATUS_POWERED | TPU_TLM_STATUS_LOADED |
                                                 TPU_TLM_STATUS_DONE | TPU_TLM_STATUS_ERROR |
                                                 TPU_TLM_STATUS_CANCELED);
    assert_int_equal((int32_t)rd(TPU_TLM_REG_RUN_STATUS), TPU_ECANCELED);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), TPU_TLM_IRQ_FAILED);
    assert_int_equal(rd(TPU_TLM_REG_RUNS), 1);
    assert_true(g_bench->irq_wire.read());
    expect_fail(tlm::TLM_OK_RESPONSE, tlm::TLM_OK_RESPONSE, TPU_TLM_ERR_DEVICE, TPU_ECANCELED,
                {""});
    /* W1C clears the bit and the wire */
    wr(TPU_TLM_REG_IRQ_STATUS, TPU_TLM_IRQ_FAILED);
    sc_core::sc_start();
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), 0);
    assert_false(g_bench->irq_wire.read());
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_RESET_CANCEL);
    assert_false(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_CANCELED);
}

/* What one run produced, on either side. */
struct run_result {
    std::vector<std::vector<float>> out[2];   /* [core][step] outfeed tensors */
    std::vector<uint64_t> ready[2];           /* [core][step] their ready cycles */
    uint64_t end_cycle = 0;
    std::vector<float> b[2];                  /* each core's b after the run */
    int64_t step[2] = {0, 0};
    struct tpu_core_counters c[2];
};

constexpr int kSteps = 6;

/* The host's inputs: core k's step i tensor and its host cycle. */
std::vector<float> input(uint32_t core, int step)
{
    std::vector<float> x(kXBytes / 4);
    fill(x, 0.5f, (int)core * 31 + step);
    return x;
}
uint64_t in_cycle(int step) { return 400u * (uint64_t)step; }
uint64_t out_cycle(int step) { return 900u * (uint64_t)step + 50; }

void native_run(run_result &r, const std::vector<float> &w)
{
    struct tpu_diag d = {};
    tpu_device_settings s = tiny_settings();
    struct tpu_device *dev = nullptr;
    assert_int_equal(tpu_device_open(&s, &dev, &d), 0);
    struct tpu_program *p = nullptr;
    assert_int_equal(tpu_program_parse(kProgram, nullptr, &p, &d), 0);
    assert_int_equal(tpu_device_load(dev, p, &d), 0);
    tpu_program_destroy(&p);
    for (uint32_t k = 0; k < 2; k++)
        assert_int_equal(tpu_device_write(dev, k, kW, w.data(), kWBytes, &d), 0);
    assert_int_equal(tpu_device_set_var(dev, kIter, kSteps), 0);
    std::thread feeder([&] {
        for (int i = 0; i < kSteps; i++)
            for (uint32_t k = 0; k < 2; k++) {
                std::vector<float> x = input(k, i);
                struct tpu_diag fd = {};
                if (tpu_device_infeed(dev, k, x.data(), kXBytes, in_cycle(i), &fd))
                    fprintf(stderr, "native infeed: %s\n", fd.msg);
            }
    });
    std::thread drainer([&] {
        for (int i = 0; i < kSteps; i++)
            for (uint32_t k = 0; k < 2; k++) {
                std::vector<float> y(kXBytes / 4);
                uint64_t ready = 0;
                struct tpu_diag fd = {};
                if (tpu_device_outfeed(dev, k, y.data(), kXBytes, out_cycle(i), &ready, &fd))
                    fprintf(stderr, "native outfeed: %s\n", fd.msg);
                r.out[k].push_back(y);
                r.ready[k].push_back(ready);
            }
    });
    assert_int_equal(tpu_device_run(dev, 0, &r.end_cycle, &d), 0);
    feeder.join();
    drainer.join();
    for (uint32_t k = 0; k < 2; k++) {
        r.b[k].resize(kBBytes / 4);
        assert_int_equal(tpu_device_read(dev, k, kB, r.b[k].data(), kBBytes, &d), 0);
        r.step[k] = tpu_device_get_var(dev, k, kStep);
        assert_int_equal(tpu_device_counters(dev, k, &r.c[k]), 0);
    }
    tpu_device_close(&dev);
}

void tlm_run(run_result &r, const std::vector<float> &w)
{
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    for (uint32_t k = 0; k < 2; k++)
        assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(k, buf_offset(kW)),
                              (void *)w.data(), kWBytes),
                         tlm::TLM_OK_RESPONSE);
    set_var(kIter, kSteps);
    wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_DONE);
    wr(TPU_TLM_REG_START_CYCLE_LO, 0);
    wr(TPU_TLM_REG_START_CYCLE_HI, 0);
    const sc_time before = sc_core::sc_time_stamp();
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
    /* the host's feed threads call the windows from outside the SystemC kernel */
    std::thread feeder([&] {
        for (int i = 0; i < kSteps; i++)
            for (uint32_t k = 0; k < 2; k++) {
                std::vector<float> x = input(k, i);
                tpu_tlm_feed_ext ext;
                ext.host_cycle = in_cycle(i);
                xfer_opts o;
                o.ext = &ext;
                if (xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(k), x.data(), kXBytes, o) !=
                    tlm::TLM_OK_RESPONSE)
                    fprintf(stderr, "tlm infeed: %s\n", ext.diag.msg);
            }
    });
    std::thread drainer([&] {
        for (int i = 0; i < kSteps; i++)
            for (uint32_t k = 0; k < 2; k++) {
                std::vector<float> y(kXBytes / 4);
                tpu_tlm_feed_ext ext;
                ext.host_cycle = out_cycle(i);
                xfer_opts o;
                o.ext = &ext;
                if (xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(k), y.data(), kXBytes, o) !=
                    tlm::TLM_OK_RESPONSE)
                    fprintf(stderr, "tlm outfeed: %s\n", ext.diag.msg);
                r.out[k].push_back(y);
                r.ready[k].push_back(ext.ready_cycle);
            }
    });
    sc_core::sc_start(); /* returns once the run's completion has been processed */
    feeder.join();
    drainer.join();
    assert_int_equal(rd(TPU_TLM_REG_STATUS),
                     TPU_TLM_STATUS_POWERED | TPU_TLM_STATUS_LOADED | TPU_TLM_STATUS_DONE);
    assert_int_equal(rd(TPU_TLM_REG_RUN_STATUS), 0);
    assert_int_equal(rd(TPU_TLM_REG_RUNS), 1);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), TPU_TLM_IRQ_DONE);
    assert_true(g_bench->irq_wire.read());
    r.end_cycle = (uint64_t)rd(TPU_TLM_REG_END_CYCLE_HI) << 32 | rd(TPU_TLM_REG_END_CYCLE_LO);
    /* SystemC time went to the end cycle through the clock (or stayed, if already later) */
    sc_time end_t = g_bench->chip.cycles_to_time(r.end_cycle);
    assert_true(sc_core::sc_time_stamp() == (end_t > before ? end_t : before));
    for (uint32_t k = 0; k < 2; k++) {
        r.b[k].resize(kBBytes / 4);
        assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_HBM_ADDR(k, buf_offset(kB)),
                              r.b[k].data(), kBBytes),
                         tlm::TLM_OK_RESPONSE);
        r.step[k] = get_var(k, kStep);
        wr(TPU_TLM_REG_COUNTER_CORE, k);
        uint64_t v[TPU_TLM_N_COUNTERS];
        assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS, v, sizeof v),
                         tlm::TLM_OK_RESPONSE);
        struct tpu_core_counters &c = r.c[k];
        memset(&c, 0, sizeof c);
        c.cycles = v[TPU_TLM_CNT_CYCLES];
        for (int u = 0; u < TPU_UNIT_COUNT; u++)
            c.busy[u] = v[TPU_TLM_CNT_BUSY(u)];
        for (int st = 0; st < TPU_STALL_COUNT; st++)
            c.stall[st] = v[TPU_TLM_CNT_STALL(st)];
        c.hbm_read_bytes = v[TPU_TLM_CNT_HBM_READ_BYTES];
        c.hbm_write_bytes = v[TPU_TLM_CNT_HBM_WRITE_BYTES];
        c.infeed_bytes = v[TPU_TLM_CNT_INFEED_BYTES];
        c.outfeed_bytes = v[TPU_TLM_CNT_OUTFEED_BYTES];
        c.ici_bytes = v[TPU_TLM_CNT_ICI_BYTES];
        c.mxu_mac_slots = v[TPU_TLM_CNT_MXU_MAC_SLOTS];
        c.macs = v[TPU_TLM_CNT_MACS];
        c.ops = v[TPU_TLM_CNT_OPS];
        c.iterations = v[TPU_TLM_CNT_ITERATIONS];
        /* one 4-byte read of a counter's halves gives the same value */
        wr(TPU_TLM_REG_COUNTER_CORE, k);
        uint32_t lo, hi;
        assert_int_equal(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_REG_COUNTERS + 8 * TPU_TLM_CNT_MACS,
                              &lo, 4),
                         tlm::TLM_OK_RESPONSE);
        assert_int_equal(xfer(tlm::TLM_READ_COMMAND,
                              TPU_TLM_REG_COUNTERS + 8 * TPU_TLM_CNT_MACS + 4, &hi, 4),
                         tlm::TLM_OK_RESPONSE);
        assert_int_equal((uint64_t)hi << 32 | lo, c.macs);
    }
    /* a feed that fails reports through the extension too: after CANCEL, an outfeed read
     * returns TPU_ECANCELED instead of waiting for a tensor no run will make */
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_CANCEL);
    std::vector<float> y(kXBytes / 4);
    tpu_tlm_feed_ext ext;
    xfer_opts o;
    o.ext = &ext;
    expect_fail(xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(0), y.data(), kXBytes, o),
                tlm::TLM_GENERIC_ERROR_RESPONSE, TPU_TLM_ERR_DEVICE, TPU_ECANCELED,
                {"outfeed of core 0: ", "canceled"});
    assert_int_equal(ext.status, TPU_ECANCELED);
    assert_int_equal(ext.diag.code, TPU_ECANCELED);
    assert_non_null(strstr(ext.diag.msg, "canceled"));
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_RESET_CANCEL);
}

void test_run_equals_native(void **state)
{
    (void)state;
    std::vector<float> w(64);
    fill(w, 0.125f, 3);
    run_result nat, sc;
    native_run(nat, w);
    tlm_run(sc, w);
    assert_true(nat.end_cycle > 0);
    assert_int_equal(sc.end_cycle, nat.end_cycle);
    for (uint32_t k = 0; k < 2; k++) {
        assert_int_equal(sc.out[k].size(), (size_t)kSteps);
        assert_int_equal(nat.out[k].size(), (size_t)kSteps);
        for (int i = 0; i < kSteps; i++) {
            assert_memory_equal(sc.out[k][i].data(), nat.out[k][i].data(), kXBytes);
            assert_int_equal(sc.ready[k][i], nat.ready[k][i]);
        }
        assert_memory_equal(sc.b[k].data(), nat.b[k].data(), kBBytes);
        assert_int_equal(sc.step[k], kSteps);
        assert_int_equal(nat.step[k], kSteps);
        assert_memory_equal(&sc.c[k], &nat.c[k], sizeof sc.c[k]);
        assert_int_equal(sc.c[k].iterations, (uint64_t)kSteps);
        assert_int_equal(sc.c[k].infeed_bytes, (uint64_t)kSteps * kXBytes);
    }
    /* the values are not trivially zero: relu of a non-zero matmul */
    bool nonzero = false;
    for (float f : nat.out[1][kSteps - 1])
        nonzero = nonzero || f != 0.0f;
    assert_true(nonzero);
}

/* Without the extension the host cycle is the transaction's SystemC time over the clock. */
void test_feed_without_extension(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, 1);
    std::vector<float> x = input(0, 0);
    sc_time delay = sc_time(5, sc_core::SC_US);
    xfer_opts o;
    o.delay = &delay;
    const sc_time now = sc_core::sc_time_stamp();
    for (uint32_t k = 0; k < 2; k++) {
        delay = sc_time(5, sc_core::SC_US);
        assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(k), x.data(), kXBytes,
                              o),
                         tlm::TLM_OK_RESPONSE);
        /* annotation: the link's 1000 ns latency plus 128 bytes at 1 GB/s */
        assert_true(delay == sc_time(5, sc_core::SC_US) + sc_time(1128, sc_core::SC_NS));
    }
    uint64_t start = g_bench->chip.time_to_cycles(now);
    wr(TPU_TLM_REG_START_CYCLE_LO, (uint32_t)start);
    wr(TPU_TLM_REG_START_CYCLE_HI, (uint32_t)(start >> 32));
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
    sc_core::sc_start();
    assert_int_equal(rd(TPU_TLM_REG_RUN_STATUS), 0);
    /* the infeed arrived at cycle now + 5000 (host) + 1000 (latency) + 128 (bytes): the run
     * cannot end before it */
    uint64_t end = (uint64_t)rd(TPU_TLM_REG_END_CYCLE_HI) << 32 | rd(TPU_TLM_REG_END_CYCLE_LO);
    assert_true(end >= start + 5000 + 1128);
    assert_true(sc_core::sc_time_stamp() == g_bench->chip.cycles_to_time(end));
    /* the native device with the same host cycle ends on the same cycle */
    struct tpu_diag d = {};
    tpu_device_settings s = tiny_settings();
    struct tpu_device *dev = nullptr;
    struct tpu_program *p = nullptr;
    assert_int_equal(tpu_device_open(&s, &dev, &d), 0);
    assert_int_equal(tpu_program_parse(kProgram, nullptr, &p, &d), 0);
    assert_int_equal(tpu_device_load(dev, p, &d), 0);
    tpu_program_destroy(&p);
    assert_int_equal(tpu_device_set_var(dev, kIter, 1), 0);
    for (uint32_t k = 0; k < 2; k++)
        assert_int_equal(tpu_device_infeed(dev, k, x.data(), kXBytes, start + 5000, &d), 0);
    uint64_t nat_end = 0;
    std::thread drain([&] {
        std::vector<float> y(kXBytes / 4);
        for (uint32_t k = 0; k < 2; k++)
            tpu_device_outfeed(dev, k, y.data(), kXBytes, 0, nullptr, nullptr);
    });
    assert_int_equal(tpu_device_run(dev, start, &nat_end, &d), 0);
    drain.join();
    tpu_device_close(&dev);
    assert_int_equal(end, nat_end);
}

/* Two launches of one step each: the second continues from the first's params and
 * variables, RUNS counts both, LAUNCH clears STATUS.DONE, and with IRQ_ENABLE 0 the bit is
 * raised but the wire stays low. */
void test_two_launches(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, 1);
    wr(TPU_TLM_REG_IRQ_ENABLE, 0);
    uint64_t ends[2];
    for (int launch = 0; launch < 2; launch++) {
        std::vector<float> x = input(0, launch);
        for (uint32_t k = 0; k < 2; k++)
            assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(k), x.data(),
                                  kXBytes),
                             tlm::TLM_OK_RESPONSE);
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
        uint32_t st = rd(TPU_TLM_REG_STATUS);
        assert_true(st & TPU_TLM_STATUS_BUSY);
        assert_false(st & TPU_TLM_STATUS_DONE);
        std::thread drain([] {
            std::vector<float> y(kXBytes / 4);
            for (uint32_t k = 0; k < 2; k++)
                xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(k), y.data(), kXBytes);
        });
        sc_core::sc_start();
        drain.join();
        assert_int_equal(rd(TPU_TLM_REG_RUN_STATUS), 0);
        assert_int_equal(rd(TPU_TLM_REG_RUNS), (uint32_t)launch + 1);
        assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), TPU_TLM_IRQ_DONE);
        assert_false(g_bench->irq_wire.read());
        ends[launch] = (uint64_t)rd(TPU_TLM_REG_END_CYCLE_HI) << 32 |
                       rd(TPU_TLM_REG_END_CYCLE_LO);
        /* the next launch starts where this one ended */
        wr(TPU_TLM_REG_START_CYCLE_LO, (uint32_t)ends[launch]);
        wr(TPU_TLM_REG_START_CYCLE_HI, (uint32_t)(ends[launch] >> 32));
    }
    assert_true(ends[1] > ends[0]);
    assert_int_equal(get_var(0, kStep), 2);
    assert_int_equal(get_var(1, kStep), 2);
    wr(TPU_TLM_REG_COUNTER_CORE, 1);
    uint64_t iters = 0;
    assert_int_equal(xfer(tlm::TLM_READ_COMMAND,
                          TPU_TLM_REG_COUNTERS + 8 * TPU_TLM_CNT_ITERATIONS, &iters, 8),
                     tlm::TLM_OK_RESPONSE);
    assert_int_equal(iters, 2);
    /* enabling the pending bit raises the wire */
    wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_DONE);
    sc_core::sc_start();
    assert_true(g_bench->irq_wire.read());
}

/* INFEED_CLOSE: a run waiting for infeed ends with TPU_EEND, reported by RUN_STATUS and the
 * FAILED interrupt, with the run's sentence in the message window. */
void test_infeed_close_ends_run(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, 4);
    wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_FAILED);
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_INFEED_CLOSE);
    assert_true(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_INFEED_CLOSED);
    sc_core::sc_start();
    assert_int_equal((int32_t)rd(TPU_TLM_REG_RUN_STATUS), TPU_EEND);
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), TPU_TLM_IRQ_FAILED);
    assert_true(g_bench->irq_wire.read());
    assert_int_equal(rd(TPU_TLM_REG_ERROR_CODE), TPU_TLM_ERR_DEVICE);
    assert_int_equal((int32_t)rd(TPU_TLM_REG_ERROR_TPU), TPU_EEND);
    assert_true(errmsg().size() > 0);
    wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_RESET_CANCEL);
    assert_false(rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_INFEED_CLOSED);
    /* IRQ_ENABLE gates the wire: disabling it lowers the wire, the bit stays */
    wr(TPU_TLM_REG_IRQ_ENABLE, 0);
    sc_core::sc_start();
    assert_false(g_bench->irq_wire.read());
    assert_int_equal(rd(TPU_TLM_REG_IRQ_STATUS), TPU_TLM_IRQ_FAILED);
}

/* One launch of a one-step run on both cores with its input queued; returns the run's
 * START_CYCLE and END_CYCLE registers after its completion. */
void launch_one(int salt, const sc_time *delay, uint64_t *start, uint64_t *end)
{
    std::vector<float> x = input(0, salt);
    for (uint32_t k = 0; k < 2; k++)
        assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(k), x.data(), kXBytes),
                         tlm::TLM_OK_RESPONSE);
    uint32_t cmd = TPU_TLM_CMD_LAUNCH;
    xfer_opts o;
    sc_time d = delay ? *delay : sc_core::SC_ZERO_TIME;
    o.delay = &d;
    assert_int_equal(xfer(tlm::TLM_WRITE_COMMAND, TPU_TLM_REG_BASE + TPU_TLM_REG_CTRL, &cmd, 4, o),
                     tlm::TLM_OK_RESPONSE);
    std::thread drain([] {
        std::vector<float> y(kXBytes / 4);
        for (uint32_t k = 0; k < 2; k++)
            xfer(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(k), y.data(), kXBytes);
    });
    sc_core::sc_start();
    drain.join();
    assert_int_equal(rd(TPU_TLM_REG_RUN_STATUS), 0);
    *start = (uint64_t)rd(TPU_TLM_REG_START_CYCLE_HI) << 32 | rd(TPU_TLM_REG_START_CYCLE_LO);
    *end = (uint64_t)rd(TPU_TLM_REG_END_CYCLE_HI) << 32 | rd(TPU_TLM_REG_END_CYCLE_LO);
}

/* A core's HBM window holds 16 GiB (tpu-v3 and tpu-v4 per core) and more: a program whose
 * buffers take 8 GiB is not refused by the window check of LOAD_PROGRAM (the tiny chip's
 * own HBM check refuses it instead, before allocating anything); one of 80 GiB still is. */
void test_hbm_window_holds_16_gib(void **state)
{
    (void)state;
    static_assert(TPU_TLM_CORE_STRIDE >= (16ull << 30), "16 GiB per core");
    assert_int_equal(load_text("program big\nparam w: f32[32768, 65536]\n"),
                     tlm::TLM_GENERIC_ERROR_RESPONSE);
    std::string m = errmsg();
    assert_null(std::strstr(m.c_str(), "HBM window"));
    assert_int_equal(load_text("program huge\nparam w: f32[163840, 131072]\n"),
                     tlm::TLM_GENERIC_ERROR_RESPONSE);
    m = errmsg();
    if (!std::strstr(m.c_str(), "a core's HBM window holds 68719476736 bytes"))
        fail_msg("unexpected message: %s", m.c_str());
}

/* LAUNCH with START_CYCLE not written since the last launch starts at its own time, SystemC
 * time plus the write's timing annotation; a written START_CYCLE is taken as it is, once. */
void test_launch_takes_its_time(void **state)
{
    (void)state;
    assert_int_equal(load_text(kProgram), tlm::TLM_OK_RESPONSE);
    set_var(kIter, 1);
    wr(TPU_TLM_REG_IRQ_ENABLE, 0);
    sc_core::sc_start(sc_time(1, sc_core::SC_MS)); /* SystemC time moves on, no run */
    const sc_time at = sc_core::sc_time_stamp() + sc_time(250, sc_core::SC_NS);
    const sc_time annot(250, sc_core::SC_NS);
    const uint64_t want = g_bench->chip.time_to_cycles(at);
    assert_true(want > 0);
    uint64_t start, end;
    launch_one(1, &annot, &start, &end);
    assert_int_equal(start, want);
    assert_true(end > want);
    /* the completion comes at END_CYCLE x period: nothing else moves time in this bench */
    assert_true(sc_core::sc_time_stamp() == g_bench->chip.cycles_to_time(end));
    /* a written START_CYCLE (here later than now) is used as written */
    const uint64_t later = end + 1000;
    wr(TPU_TLM_REG_START_CYCLE_LO, (uint32_t)later);
    wr(TPU_TLM_REG_START_CYCLE_HI, (uint32_t)(later >> 32));
    uint64_t start2, end2;
    launch_one(2, nullptr, &start2, &end2);
    assert_int_equal(start2, later);
    assert_true(end2 > later);
    /* and only once: the next launch takes its time again */
    sc_core::sc_start(sc_time(10, sc_core::SC_US));
    const uint64_t want3 = g_bench->chip.time_to_cycles(sc_core::sc_time_stamp());
    uint64_t start3, end3;
    launch_one(3, nullptr, &start3, &end3);
    assert_int_equal(start3, want3);
    assert_true(end3 > want3);
}

} // namespace

int sc_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    bench b("bench");
    g_bench = &b;
    sc_core::sc_start(sc_core::SC_ZERO_TIME); /* elaborate */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_registers_after_power_on, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_registers_read_back, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_program_window_and_buffer_table, power_on,
                                        power_off),
        cmocka_unit_test_setup_teardown(test_variables, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_hbm_window, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_dmi_refused, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_misuse_address, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_misuse_burst_and_byte_enables, power_on,
                                        power_off),
        cmocka_unit_test_setup_teardown(test_misuse_commands, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_misuse_powered_off, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_misuse_while_busy, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_run_equals_native, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_feed_without_extension, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_two_launches, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_infeed_close_ends_run, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_launch_takes_its_time, power_on, power_off),
        cmocka_unit_test_setup_teardown(test_hbm_window_holds_16_gib, power_on, power_off),
    };
    int rc = cmocka_run_group_tests(tests, nullptr, nullptr);
    g_bench = nullptr;
    return rc;
}
