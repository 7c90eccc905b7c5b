/* The SystemC/TLM-2.0 model of the chip as a device backend (built with -Dsystemc=enabled).
 *
 * tpu_device_backend_systemc() is a struct tpu_device_backend (device.h) whose every entry
 * but open and close is carried out as TLM-2.0 transactions (open and close power the chip
 * on and off: a side-band platform call, tpu_tlm_chip::power_on / power_off, as a
 * platform's power controller would, not a bus access): a host-side initiator (a simple_initiator_socket
 * with a tlm_quantumkeeper, sim/systemc/tpu_tlm_backend.cpp) is bound to the chip's TLM
 * target (sim/systemc/tpu_tlm_chip.h), which wraps the native C chip behind the register
 * map of sim/systemc/tpu_tlm_regs.h. So the values and device cycles are the native
 * backend's, bit for bit and cycle for cycle, and what differs is only how the host reaches
 * the chip:
 *
 *   load          the program's text form (tpu_program_print) into the program window,
 *                 PROG_LEN, the LOAD_PROGRAM command; the buffer table read back
 *   write, read   HBM window transfers at the buffer table's offsets
 *   set_var       VAR_INDEX, VAR_VALUE, the SET_VAR command; get_var: VAR_INDEX, VAR_CORE,
 *                 GET_VAR, VAR_VALUE read back
 *   infeed        one write to the core's infeed window, outfeed one read of its outfeed
 *                 window, each with the host cycle in a tpu_tlm_feed_ext (which brings the
 *                 outfeed's ready cycle and the call's status and sentence back). Called
 *                 from the runtime's feed threads during a run, in real time: they block
 *                 while a queue is full or empty, as on the native chip
 *   run           START_CYCLE, the LAUNCH command, then the calling thread drives the
 *                 SystemC kernel (sc_start) until the chip's interrupt line rises; the
 *                 run's code and end cycle are read from RUN_STATUS and END_CYCLE
 *   cancel, infeed_close, reset_cancel   the CANCEL, INFEED_CLOSE, RESET_CANCEL commands
 *   counters      COUNTER_CORE and one read of the counters window
 *   watch         one debug-transport read of the watch window (any thread, during a run)
 * A failed transaction's sentence is the target's (its error message window or the feed
 * extension), so every misuse the target sees reads as on the native chip; the device API
 * checks every call before the backend anyway (device.h).
 *
 * What the backend refuses (at open, TPU_EUNSUPPORTED, the message naming the systemc
 * backend and the fix): settings.mxu (the RTL matrix unit plugs into the native chip, not
 * into the TLM model), settings.trace and settings.op_stats (the timeline and the per-op
 * statistics are the native chip's internals; the TLM model exposes registers, counters and
 * windows only). The same run on the native backend gives the same cycles with both.
 *
 * One simulation per process. SystemC elaborates once per process and cannot build a second
 * module hierarchy after the simulation started. The backend therefore elaborates one shell
 * (target, initiator, interrupt wire) at the first open and keeps it until the process
 * ends; every later open re-powers the chip inside that shell with its own settings. One
 * device at a time: an open while another systemc device is open fails with TPU_EBUSY.
 * Devices on the native backend are not affected.
 *
 * Threads. The device API's promises hold (device.h): infeed, outfeed, cancel, infeed_close
 * and watch may come from any thread during a run; cancel wakes every blocked call with
 * TPU_ECANCELED. The SystemC kernel runs on a thread of the backend's own (elaboration and
 * every sc_start), for whichever host thread opens, loads or runs, so open and close may come
 * from different threads at different times; tpu_device_run waits while that thread drives
 * the kernel to the chip's interrupt. The SystemC banner is not printed (the
 * library never prints): the backend sets SC_COPYRIGHT_MESSAGE=DISABLE before it
 * elaborates, unless the environment already says otherwise. */
#ifndef TPUSIM_SYSTEMC_H
#define TPUSIM_SYSTEMC_H

#include "tpusim/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The SystemC backend: a constant table; never NULL. Give it as settings.backend. */
const struct tpu_device_backend *tpu_device_backend_systemc(void);

/* What the backend's initiator did since the process elaborated the shell: transactions
 * it issued (every b_transport call, feed calls included), the SystemC time reached (ps),
 * and the kernel's global quantum (ps). For reports and benchmarks. */
struct tpu_systemc_stats {
    uint64_t transactions;
    uint64_t sc_time_ps;
    uint64_t quantum_ps;
};
/* Fills *out; all zero when no systemc device was ever opened in this process. From any
 * thread. */
void tpu_systemc_stats(struct tpu_systemc_stats *out);

#ifdef __cplusplus
}
#endif
#endif
