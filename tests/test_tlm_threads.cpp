/* The feed windows used from SystemC thread processes (tpu_tlm_chip.h, "Threads"): a feed
 * transaction that has to wait for its queue suspends the calling process, not the OS thread
 * that runs the kernel, so the platform's other processes keep running. The scenario: one
 * SC_THREAD launches a run of more steps than the outfeed queue holds and feeds core 0 then
 * core 1 each step; a second SC_THREAD drains the outfeeds, core 1 first. Either process
 * blocks on a queue the other one serves; with a feed that blocked the kernel's thread the
 * simulation would hang (the test's meson timeout would then fail it). Every outfeed tensor
 * is checked against the step that made it, and the run ends with DONE and no error.
 * SystemC elaborates once per process, so this is its own program with its own platform. */
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "tpu_tlm_chip.h"
#include "tpusim/config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

namespace {

/* y = x + b with b = 0: the outfeed of a step equals its infeed, exactly */
const char *const kProgram = "program feeds\n"
                             "var iterations\n"
                             "param b: f32[1, 8]\n"
                             "temp x: f32[4, 8]\n"
                             "temp y: f32[4, 8]\n"
                             "loop iterations {\n"
                             "    x = infeed\n"
                             "    y = add x, b\n"
                             "    outfeed y\n"
                             "}\n";

struct cpu : sc_core::sc_module {
    tlm_utils::simple_initiator_socket<cpu> sock;
    sc_core::sc_in<bool> irq;
    sc_core::sc_event launched;
    unsigned steps = 0;
    unsigned outs_checked = 0, bad = 0;
    bool fed = false, drained = false, run_ok = false;
    uint32_t n_cores = 0;

    SC_HAS_PROCESS(cpu);
    explicit cpu(sc_core::sc_module_name n) : sc_core::sc_module(n), sock("sock"), irq("irq")
    {
        SC_THREAD(main_p);
        SC_THREAD(drain_p);
    }
    tlm::tlm_response_status x(tlm::tlm_command c, uint64_t a, void *d, unsigned len)
    {
        tlm::tlm_generic_payload t;
        sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
        t.set_command(c);
        t.set_address(a);
        t.set_data_ptr((unsigned char *)d);
        t.set_data_length(len);
        t.set_streaming_width(len);
        t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
        sock->b_transport(t, delay);
        wait(delay);
        return t.get_response_status();
    }
    void wr(uint32_t r, uint32_t v) { x(tlm::TLM_WRITE_COMMAND, r, &v, 4); }
    uint32_t rd(uint32_t r)
    {
        uint32_t v = 0;
        x(tlm::TLM_READ_COMMAND, r, &v, 4);
        return v;
    }
    static float value(unsigned step, unsigned core, unsigned i)
    {
        return (float)(step * 100 + core * 10) + (float)i / 64.0f;
    }
    void main_p()
    {
        std::string t = kProgram;
        x(tlm::TLM_WRITE_COMMAND, TPU_TLM_PROG_BASE, &t[0], (unsigned)t.size());
        wr(TPU_TLM_REG_PROG_LEN, (uint32_t)t.size());
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LOAD_PROGRAM);
        n_cores = rd(TPU_TLM_REG_N_CORES);
        /* b = 0 on every core (the first buffer, at offset 0) */
        std::vector<float> b(8, 0.0f);
        for (uint32_t c = 0; c < n_cores; c++)
            if (x(tlm::TLM_WRITE_COMMAND, TPU_TLM_HBM_ADDR(c, 0), b.data(), 32) !=
                tlm::TLM_OK_RESPONSE)
                bad++;
        wr(TPU_TLM_REG_VAR_INDEX, 0);
        wr(TPU_TLM_REG_VAR_VALUE_LO, steps);
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_SET_VAR);
        wr(TPU_TLM_REG_IRQ_ENABLE, TPU_TLM_IRQ_DONE | TPU_TLM_IRQ_FAILED);
        wr(TPU_TLM_REG_CTRL, TPU_TLM_CMD_LAUNCH);
        launched.notify();
        std::vector<float> in(32);
        for (unsigned s = 0; s < steps; s++)
            for (uint32_t c = 0; c < n_cores; c++) {
                for (unsigned i = 0; i < 32; i++)
                    in[i] = value(s, c, i);
                if (x(tlm::TLM_WRITE_COMMAND, TPU_TLM_INFEED_ADDR(c), in.data(), 128) !=
                    tlm::TLM_OK_RESPONSE)
                    bad++;
            }
        fed = true;
        if (!irq.read())
            wait(irq.posedge_event());
        run_ok = (rd(TPU_TLM_REG_STATUS) & TPU_TLM_STATUS_DONE) && rd(TPU_TLM_REG_RUN_STATUS) == 0;
        while (!drained)
            wait(1, sc_core::SC_US);
        sc_core::sc_stop();
    }
    void drain_p()
    {
        wait(launched);
        std::vector<float> out(32);
        for (unsigned s = 0; s < steps; s++)
            for (uint32_t k = 0; k < n_cores; k++) {
                uint32_t c = n_cores - 1 - k; /* the last core first */
                if (x(tlm::TLM_READ_COMMAND, TPU_TLM_OUTFEED_ADDR(c), out.data(), 128) !=
                    tlm::TLM_OK_RESPONSE) {
                    bad++;
                    continue;
                }
                for (unsigned i = 0; i < 32; i++)
                    if (out[i] != value(s, c, i))
                        bad++;
                outs_checked++;
            }
        drained = true;
    }
};

void test_two_threads_feed_and_drain(void **state)
{
    (void)state;
    struct tpu_chip_config chip;
    struct tpu_diag d = {};
    assert_int_equal(tpu_config_load("tiny", &chip, &d), 0);
    cpu c("cpu");
    tpu_tlm_chip tpu("tpu");
    sc_core::sc_signal<bool> w("w");
    c.sock.bind(tpu.socket);
    tpu.irq(w);
    c.irq(w);
    struct tpu_device_settings s;
    tpu_device_default_settings(&s, &chip);
    assert_int_equal(tpu.power_on(s, &d), 0);
    /* more steps than either queue holds: the drain must overlap the feeding */
    c.steps = chip.outfeed_queue_depth + chip.infeed_queue_depth + 3;
    sc_core::sc_start();
    assert_true(c.fed);
    assert_true(c.drained);
    assert_true(c.run_ok);
    assert_int_equal(c.bad, 0);
    assert_int_equal(c.outs_checked, c.steps * c.n_cores);
    assert_true(c.n_cores >= 2);
}

} // namespace

int sc_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_threads_feed_and_drain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
