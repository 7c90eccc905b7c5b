/* The register map of the tpusim chip as a TLM-2.0 target (tpu_tlm_chip.h).
 *
 * This is the document a platform engineer reads to drive the chip from an initiator: every
 * address, register, command, status and interrupt bit, window and the feed extension. It is
 * not the module (tpu_tlm_chip.h) and not the host runtime's backend (SCB's systemc backend),
 * which both code against it. The constants are plain macros so that C code (firmware-like
 * tests, the backend's C side) can use them; the feed extension at the end is C++ only.
 *
 * Byte order. TLM-2.0's generic payload carries bytes in the host's order; every register
 * and every multi-byte field below is little-endian (the only byte order tpusim builds on).
 *
 * Address map (64-bit addresses, one target socket):
 *
 *   0x0000_0000_0000 +0x1000     registers (32-bit words, below), counters window at +0x100
 *   0x0000_0000_1000 +0x400      error message window: the sentence of the last failure,
 *                                NUL-terminated (read only)
 *   0x0000_0000_1400 +0x400      run message window: the sentence of the last run that ended
 *                                with an error, NUL-terminated; empty after a run that
 *                                completed (read only). Only a run's end writes it, so a feed
 *                                that fails on another thread as the run ends (a call woken by
 *                                the run's cancel) cannot replace it, as it can replace the
 *                                error message window's
 *   0x0000_0000_1800 +0x100      watch window: one snapshot of tpu_device_watch per read
 *                                (read only, any thread, also during a run; fields below)
 *   0x0000_0001_0000 +0x10_0000  buffer table of the loaded program (read only, 128-byte
 *                                entries, below)
 *   0x0000_0100_0000 +0x100_0000 program window: the program's text form
 *                                (tpu_program_print / tpu_program_parse), read/write
 *   0x1000_0000_0000 + core * 64 GiB  HBM window of core: the program's buffers at the offsets
 *                                     of the buffer table (read/write, idle chip only)
 *   0x2000_0000_0000 + core * 64 GiB  infeed window of core: one write = one tensor queued
 *   0x3000_0000_0000 + core * 64 GiB  outfeed window of core: one read = one tensor taken
 *
 * A core's HBM window holds 64 GiB, more than any preset's HBM per core (tpu-v3 and tpu-v4:
 * 16 GiB). One transaction moves at most 4 GiB - 1 bytes, TLM-2.0's data length being an
 * unsigned int: a larger buffer is reached by several transactions (parts of a buffer are
 * allowed), and a tensor of 4 GiB or more cannot be fed (the backend refuses both with
 * TPU_EUNSUPPORTED).
 *
 * Anything else answers TLM_ADDRESS_ERROR_RESPONSE. Cores are numbered as the device API
 * numbers them (device.h): n_chips x cores_per_chip, replicas of consecutive cores; N_CORES
 * says how many. At most TPU_TLM_MAX_CORES.
 *
 * Access rules and responses (every failure also sets ERROR_CODE, ERROR_TPU and the error
 * message window, and STATUS.ERROR, until CLEAR_ERROR):
 *   - registers (0x000-0x0FF): exactly 4 bytes, 4-aligned, no byte enables, streaming width
 *     >= length. A wrong length or alignment: TLM_BURST_ERROR_RESPONSE (ERROR_CODE BURST);
 *     byte enables: TLM_BYTE_ENABLE_ERROR_RESPONSE (BYTE_ENABLE); an offset with no register:
 *     TLM_ADDRESS_ERROR_RESPONSE (ADDRESS); a write to a read-only register:
 *     TLM_COMMAND_ERROR_RESPONSE (COMMAND).
 *   - counters window (0x100-0x1A7): reads of any multiple of 4 bytes, 4-aligned, inside the
 *     window (one read returns one consistent snapshot); writes: COMMAND.
 *   - error message window, run message window, watch window, buffer table: reads of any
 *     length and alignment inside the window; writes: COMMAND.
 *   - program window: reads and writes of any length and alignment inside the window.
 *   - byte enables are honoured only by the HBM windows; anywhere else they answer
 *     TLM_BYTE_ENABLE_ERROR_RESPONSE (BYTE_ENABLE).
 *   - HBM windows: reads and writes inside one buffer of the table, any length and alignment,
 *     byte enables honoured (a disabled lane is neither written nor read). Outside every
 *     buffer: ADDRESS. During a run: TLM_GENERIC_ERROR_RESPONSE (BUSY). No program: NO_PROGRAM.
 *   - feed windows: the transaction's address is the core window's base (else ADDRESS), no
 *     byte enables, streaming width >= length (else BURST); infeed takes writes, outfeed
 *     reads (else COMMAND). The length is the tensor's size in bytes.
 *   - a command that fails (CTRL write) answers TLM_GENERIC_ERROR_RESPONSE with the reason in
 *     ERROR_CODE / ERROR_TPU / the message window: a failed LOAD_PROGRAM (parse or verify
 *     error: PROGRAM), LAUNCH while busy (BUSY), an unknown command (COMMAND). The initiator
 *     learns of the failure on the very write that caused it.
 *   - a run that ends with an error is not a failed transaction (LAUNCH returned at once):
 *     RUN_STATUS holds its TPU_E* code, STATUS.DONE is set and IRQ_STATUS.FAILED rises; the
 *     run's sentence goes to the message window with ERROR_CODE DEVICE and ERROR_TPU the code
 *     (also for TPU_EEND, the end a closed infeed gives a run: the host decides whether that
 *     is an error).
 *   - tlm::TLM_IGNORE_COMMAND answers TLM_OK_RESPONSE and does nothing.
 *   - DMI: refused (get_direct_mem_ptr answers false). The HBM window is a view of buffers
 *     the native chip's cores change on their own threads during a run, assembled per
 *     buffer (no one contiguous backing store), and the feed windows are queues, not memory:
 *     a raw pointer would bypass the busy check and the queue semantics.
 *   - debug transport (transport_dbg): reads of the registers, counters, error message,
 *     buffer table, program window and (idle chip) HBM windows, without timing or side
 *     effects; writes and feed windows transfer 0 bytes.
 *
 * Threads. Feed windows may be used from any thread, also several at once and during a run
 * (each transaction maps to one tpu_device_infeed / tpu_device_outfeed call). While the
 * queue is full / empty the transaction waits: from a SystemC thread process (SC_THREAD,
 * SC_CTHREAD) b_transport wait()s, so only that process is suspended and the kernel runs
 * the others (one process may feed while another drains); from any other thread, or from
 * an SC_METHOD, it blocks the calling thread in real time, exactly as the device API does. Registers, the program window and HBM are serialized by one lock; they are meant for
 * SystemC processes of the simulation the module lives in. The CANCEL and INFEED_CLOSE
 * commands and reads of STATUS / RUN_STATUS / END_CYCLE may also come from any thread.
 *
 * Timing annotation (loosely timed; b_transport adds to the delay and waits only in the
 * feed windows' case above): a register
 * access one chip cycle; an HBM access ceil(bytes / HBM bytes per cycle of one chip); a feed
 * transaction the host link's latency plus bytes over its bandwidth (config.h). */
#ifndef TPUSIM_TPU_TLM_REGS_H
#define TPUSIM_TPU_TLM_REGS_H

#include <stdint.h>

#include "tpusim/error.h"

/* ---- address map ----------------------------------------------------------------------- */

#define TPU_TLM_REG_BASE 0x000000000000ull
#define TPU_TLM_REG_SIZE 0x1000ull
#define TPU_TLM_ERRMSG_BASE 0x000000001000ull
#define TPU_TLM_ERRMSG_SIZE 0x400ull /* TPU_DIAG_MAX bytes */
#define TPU_TLM_RUNMSG_BASE 0x000000001400ull
#define TPU_TLM_RUNMSG_SIZE 0x400ull /* TPU_DIAG_MAX bytes */
#define TPU_TLM_WATCH_BASE 0x000000001800ull
#define TPU_TLM_WATCH_SIZE 0x100ull
#define TPU_TLM_BUFTAB_BASE 0x000000010000ull
#define TPU_TLM_BUFTAB_SIZE 0x100000ull
#define TPU_TLM_PROG_BASE 0x000001000000ull
#define TPU_TLM_PROG_SIZE 0x1000000ull /* the longest program text, bytes */
#define TPU_TLM_HBM_BASE 0x100000000000ull
#define TPU_TLM_INFEED_BASE 0x200000000000ull
#define TPU_TLM_OUTFEED_BASE 0x300000000000ull
#define TPU_TLM_CORE_STRIDE 0x1000000000ull /* 64 GiB per core in the HBM and feed windows */
#define TPU_TLM_MAX_CORES 256u

#define TPU_TLM_HBM_ADDR(core, offset)                                                         \
    (TPU_TLM_HBM_BASE + (uint64_t)(core) * TPU_TLM_CORE_STRIDE + (uint64_t)(offset))
#define TPU_TLM_INFEED_ADDR(core) (TPU_TLM_INFEED_BASE + (uint64_t)(core) * TPU_TLM_CORE_STRIDE)
#define TPU_TLM_OUTFEED_ADDR(core)                                                             \
    (TPU_TLM_OUTFEED_BASE + (uint64_t)(core) * TPU_TLM_CORE_STRIDE)

/* ---- registers (offsets from TPU_TLM_REG_BASE; RO read only, RW read/write, W1C write one
 * to clear). 64-bit values are two words, LO at the lower address; write LO then HI (the
 * value takes effect when used, so the order only matters for reading back). -------------- */

#define TPU_TLM_REG_ID 0x000          /* RO: TPU_TLM_ID_VALUE */
#define TPU_TLM_REG_VERSION 0x004     /* RO: TPU_TLM_VERSION_VALUE (major << 16 | minor) */
#define TPU_TLM_REG_CTRL 0x008        /* RW: write a command (TPU_TLM_CMD_*); reads the last
                                         command written */
#define TPU_TLM_REG_STATUS 0x00C      /* RO: TPU_TLM_STATUS_* bits */
#define TPU_TLM_REG_ERROR_CODE 0x010  /* RO: enum tpu_tlm_err of the last failure, 0 none */
#define TPU_TLM_REG_ERROR_TPU 0x014   /* RO: the TPU_E* code (error.h, negative, as int32) of
                                         the device call behind it, 0 if none */
#define TPU_TLM_REG_IRQ_STATUS 0x018  /* W1C: TPU_TLM_IRQ_* bits raised */
#define TPU_TLM_REG_IRQ_ENABLE 0x01C  /* RW: the irq output is (IRQ_STATUS & IRQ_ENABLE) != 0 */
#define TPU_TLM_REG_PROG_LEN 0x020    /* RW: bytes of program text in the program window that
                                         LOAD_PROGRAM parses (<= TPU_TLM_PROG_SIZE) */
#define TPU_TLM_REG_N_CORES 0x024     /* RO: cores of the device */
#define TPU_TLM_REG_N_BUFFERS 0x028   /* RO: buffers of the loaded program (0: none loaded) */
#define TPU_TLM_REG_N_VARS 0x02C      /* RO: variables of the loaded program */
#define TPU_TLM_REG_VAR_INDEX 0x030   /* RW: variable id for SET_VAR / GET_VAR */
#define TPU_TLM_REG_VAR_CORE 0x034    /* RW: core GET_VAR reads */
#define TPU_TLM_REG_VAR_VALUE_LO 0x038 /* RW: int64 value SET_VAR writes, GET_VAR leaves */
#define TPU_TLM_REG_VAR_VALUE_HI 0x03C
#define TPU_TLM_REG_START_CYCLE_LO 0x040 /* RW: device cycle LAUNCH starts no earlier than.
                                            Not written since the last LAUNCH: LAUNCH sets it
                                            to its own time, (SystemC time + the LAUNCH
                                            write's timing annotation) / the clock period
                                            (from a thread other than the kernel's, the
                                            value stands). A written value is used once. */
#define TPU_TLM_REG_START_CYCLE_HI 0x044
#define TPU_TLM_REG_END_CYCLE_LO 0x048 /* RO: the last run's end cycle (tpu_device_run's) */
#define TPU_TLM_REG_END_CYCLE_HI 0x04C
#define TPU_TLM_REG_RUN_STATUS 0x050  /* RO: the last run's TPU_E* code (0: it completed; e.g.
                                         TPU_EEND after INFEED_CLOSE, TPU_ECANCELED) */
#define TPU_TLM_REG_RUNS 0x054        /* RO: runs completed since power-on (wraps) */
#define TPU_TLM_REG_CLOCK_PERIOD_PS 0x058 /* RO: the chip clock's period in ps, rounded */
#define TPU_TLM_REG_COUNTER_CORE 0x05C /* RW: the core the counters window shows */

/* Counters window: COUNTER_CORE's struct tpu_core_counters (device.h) as uint64 values,
 * 8 bytes each at TPU_TLM_REG_COUNTERS + 8 * index, in this order. Not during a run (BUSY). */
#define TPU_TLM_REG_COUNTERS 0x100
#define TPU_TLM_CNT_CYCLES 0
#define TPU_TLM_CNT_BUSY(unit) (1 + (unit))    /* enum tpu_unit: mxu, vpu, dma, infeed,
                                                  outfeed, ici, ctrl (7) */
#define TPU_TLM_CNT_STALL(stall) (8 + (stall)) /* enum tpu_stall: infeed_empty, outfeed_full,
                                                  sync, memory (4) */
#define TPU_TLM_CNT_HBM_READ_BYTES 12
#define TPU_TLM_CNT_HBM_WRITE_BYTES 13
#define TPU_TLM_CNT_INFEED_BYTES 14
#define TPU_TLM_CNT_OUTFEED_BYTES 15
#define TPU_TLM_CNT_ICI_BYTES 16
#define TPU_TLM_CNT_MXU_MAC_SLOTS 17
#define TPU_TLM_CNT_MACS 18
#define TPU_TLM_CNT_OPS 19
#define TPU_TLM_CNT_ITERATIONS 20
#define TPU_TLM_N_COUNTERS 21
#define TPU_TLM_COUNTERS_SIZE (8 * TPU_TLM_N_COUNTERS) /* 0x100 - 0x1A7 */

#define TPU_TLM_ID_VALUE 0x54505553u      /* "TPUS" */
#define TPU_TLM_VERSION_VALUE 0x00010000u /* 1.0 */

/* ---- commands (written to CTRL) ------------------------------------------------------- */

#define TPU_TLM_CMD_LOAD_PROGRAM 0x01 /* parse PROG_LEN bytes of the program window, verify
                                         and load it (tpu_device_load): buffers zeroed,
                                         variables 0, the buffer table filled. Idle chip. */
#define TPU_TLM_CMD_LAUNCH 0x02       /* start tpu_device_run(START_CYCLE) and return at
                                         once: STATUS.BUSY until it ends, then END_CYCLE,
                                         RUN_STATUS, STATUS.DONE and an IRQ bit. When the
                                         IRQ comes: the native run takes real time, and
                                         the completion is processed at the later of
                                         END_CYCLE x period and the SystemC time at which
                                         the run's result reached the kernel. So the IRQ
                                         time is exactly END_CYCLE x period when nothing
                                         else advances SystemC time during the run (the
                                         platform's processes wait for the IRQ or for
                                         feeds); a timed process that keeps running
                                         meanwhile (a ticker, a timer, an ISS) can carry
                                         SystemC time past it, and then the IRQ comes
                                         later, at a time that depends on host speed.
                                         END_CYCLE itself never depends on it. */
#define TPU_TLM_CMD_CANCEL 0x03       /* tpu_device_cancel: end a run promptly */
#define TPU_TLM_CMD_RESET_CANCEL 0x04 /* tpu_device_reset_cancel (idle chip) */
#define TPU_TLM_CMD_INFEED_CLOSE 0x05 /* tpu_device_infeed_close */
#define TPU_TLM_CMD_SET_VAR 0x06      /* variable VAR_INDEX := VAR_VALUE on every core (idle) */
#define TPU_TLM_CMD_GET_VAR 0x07      /* VAR_VALUE := core VAR_CORE's variable VAR_INDEX */
#define TPU_TLM_CMD_CLEAR_ERROR 0x08  /* ERROR_CODE, ERROR_TPU, the message and STATUS.ERROR
                                         := 0 */

/* ---- STATUS bits ----------------------------------------------------------------------- */

#define TPU_TLM_STATUS_POWERED (1u << 0) /* a device is open behind the registers */
#define TPU_TLM_STATUS_LOADED (1u << 1)  /* a program is loaded */
#define TPU_TLM_STATUS_BUSY (1u << 2)    /* a run is under way (LAUNCH until it ends) */
#define TPU_TLM_STATUS_DONE (1u << 3)    /* the last run ended (cleared by LAUNCH) */
#define TPU_TLM_STATUS_ERROR (1u << 4)   /* ERROR_CODE != 0 */
#define TPU_TLM_STATUS_CANCELED (1u << 5)      /* CANCEL given, until RESET_CANCEL */
#define TPU_TLM_STATUS_INFEED_CLOSED (1u << 6) /* INFEED_CLOSE given, until RESET_CANCEL */

/* ---- IRQ bits (IRQ_STATUS, IRQ_ENABLE) ------------------------------------------------- */

#define TPU_TLM_IRQ_DONE (1u << 0)   /* a run completed (RUN_STATUS 0) */
#define TPU_TLM_IRQ_FAILED (1u << 1) /* a run ended with an error (RUN_STATUS != 0) */
#define TPU_TLM_IRQ_ALL (TPU_TLM_IRQ_DONE | TPU_TLM_IRQ_FAILED)

/* ---- ERROR_CODE values ----------------------------------------------------------------- */

enum tpu_tlm_err {
    TPU_TLM_ERR_NONE = 0,
    TPU_TLM_ERR_ADDRESS = 1,     /* no register or window there, or outside every buffer */
    TPU_TLM_ERR_BURST = 2,       /* wrong length, alignment or streaming width */
    TPU_TLM_ERR_BYTE_ENABLE = 3, /* byte enables where none are allowed */
    TPU_TLM_ERR_COMMAND = 4,     /* write to read-only / read of write-only / unknown CTRL */
    TPU_TLM_ERR_BUSY = 5,        /* needs an idle chip: a run is under way */
    TPU_TLM_ERR_NO_PROGRAM = 6,  /* needs a loaded program */
    TPU_TLM_ERR_PROGRAM = 7,     /* LOAD_PROGRAM: the text failed to parse or verify */
    TPU_TLM_ERR_DEVICE = 8,      /* a device call failed (ERROR_TPU: its code) */
    TPU_TLM_ERR_RANGE = 9,       /* VAR_INDEX, VAR_CORE, COUNTER_CORE or PROG_LEN too big */
    TPU_TLM_ERR_NO_DEVICE = 10,  /* the chip is powered off (no device open) */
};

/* ---- buffer table ---------------------------------------------------------------------- */

/* Entry i (buffer id i of the loaded program, i < N_BUFFERS) at TPU_TLM_BUFTAB_BASE +
 * i * TPU_TLM_BUFTAB_ENTRY. Buffers sit in every core's HBM window at the same offsets:
 * each buffer starts at the previous one's end rounded up to TPU_TLM_HBM_ALIGN. */
#define TPU_TLM_BUFTAB_ENTRY 128
#define TPU_TLM_HBM_ALIGN 64
#define TPU_TLM_BUF_BYTES 0x00  /* uint64: the buffer's size (tpu_buffer_bytes) */
#define TPU_TLM_BUF_OFFSET 0x08 /* uint64: its offset in each core's HBM window */
#define TPU_TLM_BUF_DTYPE 0x10  /* uint32: enum tpu_dtype */
#define TPU_TLM_BUF_KIND 0x14   /* uint32: enum tpu_buf_kind */
#define TPU_TLM_BUF_ROWS 0x18   /* uint32 */
#define TPU_TLM_BUF_COLS 0x1C   /* uint32 */
#define TPU_TLM_BUF_NAME 0x20   /* char[48]: the name, NUL-padded; the rest of the entry 0 */

/* ---- the feed extension ---------------------------------------------------------------- */

#ifdef __cplusplus
#include <cstring>
#include <tlm>

/* Attached by the initiator to infeed and outfeed transactions (optional):
 *   in:  host_cycle  when the host moves the tensor, in device cycles (the device API's
 *                    host_cycle). Without the extension the target uses the transaction's
 *                    SystemC time (sc_time_stamp() + delay) over the clock period, rounded
 *                    down: only valid when called from a SystemC process.
 *   out: ready_cycle (outfeed) the device cycle the tensor reached the host
 *        status      0 or the TPU_E* code of the device call (TPU_ECANCELED when the
 *                    run was canceled, TPU_ESHAPE for a wrong size, ...)
 *        diag        its sentence
 * The extension is the only per-transaction result a feed thread can read without a race:
 * ERROR_CODE and the message window also record a failed feed, but another thread's failure
 * may replace them. Memory management is the initiator's (set_extension / clear_extension);
 * the target never frees it. */
struct tpu_tlm_feed_ext : tlm::tlm_extension<tpu_tlm_feed_ext> {
    uint64_t host_cycle = 0;
    uint64_t ready_cycle = 0;
    int32_t status = 0;
    struct tpu_diag diag = {};

    tlm::tlm_extension_base *clone() const override { return new tpu_tlm_feed_ext(*this); }
    void copy_from(const tlm::tlm_extension_base &ext) override
    {
        *this = static_cast<const tpu_tlm_feed_ext &>(ext);
    }
};
#endif

/* ---- the watch window (TPU_TLM_WATCH_BASE): tpu_device_watch's snapshot (device.h), taken
 * when the window is read; all zero while the chip is powered off. From any thread, also
 * during a run and through debug transport: it is how a host sees a blocked run. -------- */
#define TPU_TLM_WATCH_FLAGS 0x00      /* uint32: TPU_TLM_WATCH_* bits */
#define TPU_TLM_WATCH_HOST_CALLS 0x04 /* uint32: host_calls_waiting */
#define TPU_TLM_WATCH_MOVES 0x08      /* uint64: moves */
#define TPU_TLM_WATCH_WHY 0x10        /* char[200]: why, NUL-terminated */
#define TPU_TLM_WATCH_WHY_SIZE 200
#define TPU_TLM_WATCH_RUNNING (1u << 0) /* running */
#define TPU_TLM_WATCH_BLOCKED (1u << 1) /* cores_blocked */

#endif
