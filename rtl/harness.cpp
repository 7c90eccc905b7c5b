// Verilator harness of the matrix unit: drives rtl/mxu_array.v cycle by cycle behind the C
// API of rtl/mxu_rtl.h.
//
// It is thin on purpose (the shape of Verilator's own examples): each instance owns an
// explicit VerilatedContext and one Verilated model, inputs change while the clock is low
// (the edge on which nothing is sampled), errors are returned, never fatal. It computes no
// value and no cycle count: values are read from the array's output port when out_valid is
// high, and the cycle count is the cycle of the last valid output row plus one.
//
// What it decides is when each tile goes in: by mxu.h's port rules, checked cycle by cycle
// (see drive_cycle), not by evaluating the recurrence, so that the count the RTL produces is
// an independent check of tpu_mxu_schedule().
//
// Waveforms go through checked_vcd_file, never Verilator's own file: Verilator's VCD writer
// treats a failed write as fatal and, on that path, locks a mutex it already holds, so a
// full disk would hang the process. The checked file records the first error and discards
// what follows; the harness then stops tracing and returns the error (with the path and the
// system's reason) from the run in which it happened.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "verilated.h"
#include "verilated_vcd_c.h"

#include "mxu_rtl.h"
#include "mxu_rtl_models.h"

extern "C" {
#include "util.h"
}

namespace {

// ---- one clock cycle of a model, whatever its shape ------------------------------------------

struct port_in {
    bool rst = false;
    bool mode = false; // 0 bf16, 1 int8
    bool wl_valid = false;
    bool wl_first = false;
    bool wl_half = false;
    bool in_valid = false;
    bool in_tag = false;
    const uint16_t *wl_row = nullptr; // [cols], or nullptr for zeros
    const uint16_t *in_row = nullptr; // [rows], or nullptr for zeros
};

struct port_out {
    bool valid = false;  // out_valid in this cycle (before the clock edge)
    bool tag = false;    // out_tag in this cycle
    bool hazard = false; // the sticky hazard flag after this cycle's clock edge
};

// Verilator gives a port of up to 64 bits an integer type and a wider one a VlWide<words>.
template <class T>
typename std::enable_if<std::is_integral<T>::value>::type pack16(T &port, const uint16_t *v,
                                                                 unsigned n)
{
    uint64_t x = 0;
    if (v)
        for (unsigned i = 0; i < n; i++)
            x |= static_cast<uint64_t>(v[i]) << (16 * i);
    port = static_cast<T>(x);
}

template <std::size_t W> void pack16(VlWide<W> &port, const uint16_t *v, unsigned n)
{
    for (std::size_t w = 0; w < W; w++)
        port[w] = 0;
    if (v)
        for (unsigned i = 0; i < n; i++)
            port[i / 2] |= static_cast<EData>(v[i]) << (16 * (i % 2));
}

template <class T>
typename std::enable_if<std::is_integral<T>::value>::type unpack32(const T &port, uint32_t *v,
                                                                   unsigned n)
{
    const uint64_t x = port;
    for (unsigned i = 0; i < n; i++)
        v[i] = static_cast<uint32_t>(x >> (32 * i));
}

template <std::size_t W> void unpack32(const VlWide<W> &port, uint32_t *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        v[i] = port[i];
}

// ---- the waveform file ----------------------------------------------------------------------

// A VCD file that never reports a write error to Verilator (see the top of this file): the
// first failed write (or close) is kept in error(), later writes are dropped, and write()
// always claims the whole buffer. Owned by the model, which outlives its VerilatedVcdC's use
// of it (the VerilatedVcdC is closed and destroyed first).
class checked_vcd_file final : public VerilatedVcdFile {
public:
    ~checked_vcd_file() override { close(); }

    bool open(const std::string &name) override
    {
        fd_ = ::open(name.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0666);
        if (fd_ < 0) {
            err_ = errno;
            return false;
        }
        return true;
    }

    void close() override
    {
        if (fd_ < 0)
            return;
        if (::close(fd_) != 0 && err_ == 0)
            err_ = errno;
        fd_ = -1;
    }

    ssize_t write(const char *buf, ssize_t len) override
    {
        ssize_t done = 0;
        while (err_ == 0 && fd_ >= 0 && done < len) {
            const ssize_t got = ::write(fd_, buf + done, static_cast<size_t>(len - done));
            if (got > 0)
                done += got;
            else if (got < 0 && errno == EINTR)
                continue;
            else
                err_ = got < 0 ? errno : EIO;
        }
        return len;
    }

    int error() const { return err_; }

private:
    int fd_ = -1;
    int err_ = 0; // the first errno of a failed open, write or close; 0 while all is well
};

class model_if {
public:
    virtual ~model_if() = default;
    // One clock cycle: present `in` while the clock is low, read the outputs (out_row into
    // row[cols] when valid), raise the clock.
    virtual void cycle(const port_in &in, port_out &out, uint32_t *row) = 0;
    // Opens a VCD at path; false with the errno in *err when the file cannot be created.
    virtual bool trace_open(const char *path, int *err) = 0;
    virtual bool tracing() const = 0;
    // The errno of a failed waveform write (0: none). A failure stops the trace: the file is
    // closed and no more is written; the error stays until trace_clear_error().
    virtual int trace_error() const = 0;
    virtual void trace_clear_error() = 0;
    // Writes out what the trace has buffered (then trace_error() tells how it went).
    virtual void trace_flush() = 0;
};

template <class V> class model final : public model_if {
public:
    model(uint32_t rows, uint32_t cols) : rows_(rows), cols_(cols)
    {
        ctx_.reset(new VerilatedContext);
        ctx_->traceEverOn(true); // must precede the model (wave traces are opened later)
        top_.reset(new V(ctx_.get(), "mxu"));
        top_->clk = 0;
    }

    ~model() override
    {
        trace_stop();
        if (top_)
            top_->final();
    }

    void cycle(const port_in &in, port_out &out, uint32_t *row) override
    {
        V &t = *top_;
        t.clk = 0;
        t.rst = in.rst;
        t.mode = in.mode;
        t.wl_valid = in.wl_valid;
        t.wl_first = in.wl_first;
        t.wl_half = in.wl_half;
        pack16(t.wl_row, in.wl_row, cols_);
        t.in_valid = in.in_valid;
        t.in_tag = in.in_tag;
        pack16(t.in_row, in.in_row, rows_);
        t.eval();
        dump();
        out.valid = t.out_valid != 0;
        out.tag = t.out_tag != 0;
        if (out.valid)
            unpack32(t.out_row, row, cols_);
        ctx_->timeInc(1);
        t.clk = 1;
        t.eval();
        dump();
        out.hazard = t.hazard != 0;
        ctx_->timeInc(1);
    }

    bool trace_open(const char *path, int *err) override
    {
        std::unique_ptr<checked_vcd_file> f(new checked_vcd_file);
        std::unique_ptr<VerilatedVcdC> v(new VerilatedVcdC(f.get()));
        top_->trace(v.get(), 99);
        v->open(path);
        if (!v->isOpen()) {
            *err = f->error() ? f->error() : EIO;
            return false;
        }
        vfile_ = std::move(f);
        vcd_ = std::move(v);
        trace_err_ = 0;
        return true;
    }

    bool tracing() const override { return vcd_ != nullptr; }

    int trace_error() const override { return trace_err_; }

    void trace_clear_error() override { trace_err_ = 0; }

    void trace_flush() override
    {
        if (!vcd_)
            return;
        vcd_->flush();
        check_trace();
    }

private:
    void dump()
    {
        if (!vcd_)
            return;
        vcd_->dump(ctx_->time());
        check_trace();
    }

    // Stops the trace at the first failed write; the file keeps what was written before it.
    void check_trace()
    {
        if (vfile_ && vfile_->error()) {
            trace_err_ = vfile_->error();
            trace_stop();
        }
    }

    // Closes the trace (its last flush goes to the checked file, which drops it after an
    // error) and frees the writer before the file it writes to.
    void trace_stop()
    {
        if (vcd_)
            vcd_->close();
        vcd_.reset();
        if (vfile_ && vfile_->error() && !trace_err_)
            trace_err_ = vfile_->error();
        vfile_.reset();
    }

    uint32_t rows_, cols_;
    std::unique_ptr<VerilatedContext> ctx_;
    std::unique_ptr<V> top_;
    std::unique_ptr<checked_vcd_file> vfile_; // what vcd_ writes through; outlives it
    std::unique_ptr<VerilatedVcdC> vcd_;
    int trace_err_ = 0;
};

struct shape_entry {
    uint32_t rows, cols;
    model_if *(*make)(uint32_t rows, uint32_t cols);
};

template <class V> model_if *make_model(uint32_t rows, uint32_t cols)
{
    return new model<V>(rows, cols);
}

#define TPU__RTL_SHAPE(r, c, cls) {r, c, &make_model<cls>},
const shape_entry shapes[] = {TPU_MXU_RTL_MODELS(TPU__RTL_SHAPE)};
#undef TPU__RTL_SHAPE
constexpr size_t n_shapes = sizeof shapes / sizeof shapes[0];

std::string shape_list()
{
    std::string s;
    for (size_t i = 0; i < n_shapes; i++) {
        if (i)
            s += ", ";
        s += std::to_string(shapes[i].rows) + "x" + std::to_string(shapes[i].cols);
    }
    return s;
}

} // namespace

struct tpu_mxu_rtl {
    uint32_t rows, cols;
    std::unique_ptr<model_if> m;
    std::string vcd_path; // the waveform file, for messages; empty when none was opened
};

// ---- the driver ---------------------------------------------------------------------------------

namespace {

// Where each port stands; one of these per run.
struct driver {
    const tpu_mxu_rtl_job *job;
    uint32_t R, C;
    size_t T;
    bool forced;

    size_t next_load = 0;    // the next tile whose load has not begun
    bool loading = false;    // the load port presents tile next_load - 1
    uint32_t load_row = 0;   // rows of that load presented so far
    size_t next_stream = 0;  // the next tile whose stream has not begun
    bool streaming = false;  // the input port presents tile next_stream - 1
    uint64_t stream_row = 0; // its rows presented so far

    std::vector<uint64_t> L, S;         // load and stream start per tile (valid once begun)
    std::vector<uint64_t> load_end;     // L + R: first cycle the stream may use the weights
    std::vector<uint64_t> stream_end;   // S + M: first cycle after the tile's last row
    std::vector<bool> load_ended, stream_ended;
    std::vector<uint16_t> wrow, irow;   // the rows on the ports this cycle

    uint64_t rows_out = 0, rows_total = 0; // output rows collected / expected
    size_t out_tile = 0;
    uint64_t out_row = 0;
    std::vector<uint32_t> orow;
};

uint16_t weight_bits(const tpu_mxu_rtl_job *job, size_t t, size_t idx)
{
    if (job->dtype == TPU_BF16)
        return job->w_bf16[t][idx].bits;
    return static_cast<uint8_t>(job->w_int8[t][idx]);
}

uint16_t input_bits(const tpu_mxu_rtl_job *job, size_t t, size_t idx)
{
    if (job->dtype == TPU_BF16)
        return job->in_bf16[t][idx].bits;
    return static_cast<uint8_t>(job->in_int8[t][idx]);
}

// Decides what the two ports present in cycle c, by mxu.h's rules:
//   load port: a load presents one weight row per cycle for R cycles (the row for array row
//     R-1 first); tile t's load may begin in cycle c once tile t-1's load has ended and every
//     row of tile t-2 (the last user of the buffer half t overwrites) was presented before c;
//   input port: one row per cycle; tile t's stream may begin in cycle c once its load has
//     ended (c >= L_t + R) and tile t-1's stream has ended.
// A forced schedule instead begins each load and stream in the cycle it names.
void drive_cycle(driver &dv, uint64_t c, port_in &in)
{
    const tpu_mxu_rtl_job *job = dv.job;
    in = port_in();
    in.mode = job->dtype == TPU_INT8;

    if (!dv.loading && dv.next_load < dv.T) {
        const size_t t = dv.next_load;
        bool go;
        if (dv.forced)
            go = c == job->force_load_start[t];
        else
            go = t < 2 || (dv.stream_ended[t - 2] && dv.stream_end[t - 2] <= c);
        if (go) {
            dv.L[t] = c;
            dv.loading = true;
            dv.load_row = 0;
            dv.next_load++;
        }
    }
    if (dv.loading) {
        const size_t t = dv.next_load - 1;
        const uint32_t i = dv.R - 1 - dv.load_row; // array row this weight row belongs to
        for (uint32_t j = 0; j < dv.C; j++)
            dv.wrow[j] = weight_bits(job, t, static_cast<size_t>(i) * dv.C + j);
        in.wl_valid = true;
        in.wl_first = dv.load_row == 0;
        in.wl_half = (t & 1) != 0;
        in.wl_row = dv.wrow.data();
        if (++dv.load_row == dv.R) {
            dv.loading = false;
            dv.load_end[t] = c + 1;
            dv.load_ended[t] = true;
        }
    }

    if (!dv.streaming && dv.next_stream < dv.T) {
        const size_t t = dv.next_stream;
        bool go;
        if (dv.forced)
            go = c == job->force_stream_start[t];
        else
            go = dv.load_ended[t] && dv.load_end[t] <= c;
        if (go) {
            dv.S[t] = c;
            dv.streaming = true;
            dv.stream_row = 0;
            dv.next_stream++;
        }
    }
    if (dv.streaming) {
        const size_t t = dv.next_stream - 1;
        for (uint32_t i = 0; i < dv.R; i++)
            dv.irow[i] = input_bits(job, t, static_cast<size_t>(dv.stream_row) * dv.R + i);
        in.in_valid = true;
        in.in_tag = (t & 1) != 0;
        in.in_row = dv.irow.data();
        if (++dv.stream_row == job->m_rows[t]) {
            dv.streaming = false;
            dv.stream_end[t] = c + 1;
            dv.stream_ended[t] = true;
        }
    }
}

int check_job(const tpu_mxu_rtl *rtl, const tpu_mxu_rtl_job *job, tpu_diag *d)
{
    if (job->dtype != TPU_BF16 && job->dtype != TPU_INT8)
        return tpu__fail(d, TPU_EINVAL,
                         "the RTL array was given dtype %s; it takes bf16 or int8 only",
                         tpu_gemm_dtype_name(job->dtype));
    if (job->n_tiles == 0)
        return 0;
    if (!job->m_rows)
        return tpu__fail(d, TPU_EINVAL, "the job has %zu tiles but no m_rows array",
                         job->n_tiles);
    const bool bf = job->dtype == TPU_BF16;
    if (bf ? (!job->w_bf16 || !job->in_bf16 || !job->out_f32)
           : (!job->w_int8 || !job->in_int8 || !job->out_i32))
        return tpu__fail(d, TPU_EINVAL,
                         "the %s job lacks its weight, input or output arrays (w_%s, in_%s, "
                         "out_%s must all be set)",
                         bf ? "bf16" : "int8", bf ? "bf16" : "int8", bf ? "bf16" : "int8",
                         bf ? "f32" : "i32");
    for (size_t t = 0; t < job->n_tiles; t++) {
        if (job->m_rows[t] == 0)
            return tpu__fail(d, TPU_EINVAL,
                             "tile %zu streams 0 input rows; every tile streams at least 1", t);
        if (job->m_rows[t] > (UINT64_C(1) << 40))
            return tpu__fail(d, TPU_EINVAL,
                             "tile %zu streams %" PRIu64 " rows; the harness takes at most 2^40",
                             t, job->m_rows[t]);
        const bool missing = bf ? (!job->w_bf16[t] || !job->in_bf16[t] || !job->out_f32[t])
                                : (!job->w_int8[t] || !job->in_int8[t] || !job->out_i32[t]);
        if (missing)
            return tpu__fail(d, TPU_EINVAL, "tile %zu has a NULL weight, input or output buffer",
                             t);
    }
    if ((job->force_load_start == nullptr) != (job->force_stream_start == nullptr))
        return tpu__fail(d, TPU_EINVAL,
                         "a forced schedule needs both force_load_start and force_stream_start");
    if (job->force_load_start) {
        const uint64_t *L = job->force_load_start, *S = job->force_stream_start;
        for (size_t t = 0; t < job->n_tiles; t++) {
            if (L[t] > (UINT64_C(1) << 40) || S[t] > (UINT64_C(1) << 40))
                return tpu__fail(d, TPU_EINVAL,
                                 "tile %zu is forced to begin after cycle 2^40; give earlier "
                                 "cycles", t);
            if (t > 0 && L[t] < L[t - 1] + rtl->rows)
                return tpu__fail(d, TPU_EINVAL,
                                 "forced load of tile %zu begins in cycle %" PRIu64
                                 ", while tile %zu's load holds the load port until cycle %"
                                 PRIu64 "; it may begin at %" PRIu64 " at the earliest",
                                 t, L[t], t - 1, L[t - 1] + rtl->rows - 1,
                                 L[t - 1] + rtl->rows);
            if (t > 0 && S[t] < S[t - 1] + job->m_rows[t - 1])
                return tpu__fail(d, TPU_EINVAL,
                                 "forced stream of tile %zu begins in cycle %" PRIu64
                                 ", while tile %zu's stream holds the input port until cycle %"
                                 PRIu64 "; it may begin at %" PRIu64 " at the earliest",
                                 t, S[t], t - 1, S[t - 1] + job->m_rows[t - 1] - 1,
                                 S[t - 1] + job->m_rows[t - 1]);
            if (S[t] < L[t])
                return tpu__fail(d, TPU_EINVAL,
                                 "forced stream of tile %zu begins in cycle %" PRIu64
                                 ", before its own load (cycle %" PRIu64 ")",
                                 t, S[t], L[t]);
        }
    }
    return 0;
}

// The error of a failed waveform write, once: the trace has already stopped.
int trace_failed(tpu_mxu_rtl *rtl, tpu_diag *d)
{
    const int err = rtl->m->trace_error();
    rtl->m->trace_clear_error();
    return tpu__fail(d, TPU_EIO,
                     "writing the waveform file '%s' failed: %s; the trace stopped there "
                     "(free some space or give a path on another file system)",
                     rtl->vcd_path.c_str(), std::strerror(err));
}

int run_job(tpu_mxu_rtl *rtl, tpu_mxu_rtl_job *job, tpu_diag *d)
{
    driver dv;
    dv.job = job;
    dv.R = rtl->rows;
    dv.C = rtl->cols;
    dv.T = job->n_tiles;
    dv.forced = job->force_load_start != nullptr;
    dv.L.assign(dv.T, 0);
    dv.S.assign(dv.T, 0);
    dv.load_end.assign(dv.T, 0);
    dv.stream_end.assign(dv.T, 0);
    dv.load_ended.assign(dv.T, false);
    dv.stream_ended.assign(dv.T, false);
    dv.wrow.assign(dv.C, 0);
    dv.irow.assign(dv.R, 0);
    dv.orow.assign(dv.C, 0);
    std::vector<uint64_t> first_out(dv.T, 0);
    for (size_t t = 0; t < dv.T; t++)
        dv.rows_total += job->m_rows[t];

    model_if &m = *rtl->m;
    port_in in;
    port_out out;

    // One reset cycle before cycle 0 clears the valid bits, the load state and the hazard.
    in.rst = true;
    in.mode = job->dtype == TPU_INT8;
    m.cycle(in, out, dv.orow.data());

    // A generous bound: every load and row one after another, then the drain, plus the
    // forced schedule's own latest start. Reaching it means the RTL lost rows.
    uint64_t limit = 0;
    for (size_t t = 0; t < dv.T; t++)
        limit += dv.R + job->m_rows[t];
    if (dv.forced)
        limit += job->force_load_start[dv.T - 1] + job->force_stream_start[dv.T - 1];
    limit += 2 * (static_cast<uint64_t>(dv.R) + dv.C) + 4;

    uint64_t last_valid = 0;
    bool hazard = false;
    for (uint64_t c = 0; dv.rows_out < dv.rows_total; c++) {
        if (c > limit)
            return tpu__fail(d, TPU_EBACKEND,
                             "the RTL array gave %" PRIu64 " of %" PRIu64
                             " output rows by cycle %" PRIu64 "; rows were lost",
                             dv.rows_out, dv.rows_total, limit);
        drive_cycle(dv, c, in);
        m.cycle(in, out, dv.orow.data());
        if (m.trace_error())
            return trace_failed(rtl, d);
        hazard = out.hazard;
        if (!out.valid)
            continue;
        if (dv.out_tile >= dv.T)
            return tpu__fail(d, TPU_EBACKEND,
                             "the RTL array gave an output row in cycle %" PRIu64
                             " after all %" PRIu64 " rows were out",
                             c, dv.rows_total);
        const size_t t = dv.out_tile;
        if (out.tag != ((t & 1) != 0))
            return tpu__fail(d, TPU_EBACKEND,
                             "output row %" PRIu64 " of tile %zu (cycle %" PRIu64
                             ") carries buffer tag %d, the tile's rows use %d",
                             dv.out_row, t, c, out.tag ? 1 : 0, static_cast<int>(t & 1));
        if (dv.out_row == 0)
            first_out[t] = c;
        const size_t base = static_cast<size_t>(dv.out_row) * dv.C;
        for (uint32_t j = 0; j < dv.C; j++) {
            if (job->dtype == TPU_BF16) {
                std::memcpy(&job->out_f32[t][base + j], &dv.orow[j], sizeof(float));
            } else {
                const int32_t v = static_cast<int32_t>(dv.orow[j]);
                job->out_i32[t][base + j] = v;
            }
        }
        last_valid = c;
        dv.rows_out++;
        if (++dv.out_row == job->m_rows[t]) {
            dv.out_tile++;
            dv.out_row = 0;
        }
    }

    // what the trace still buffers goes out now, so a write error surfaces in this run
    m.trace_flush();
    if (m.trace_error())
        return trace_failed(rtl, d);

    job->hazard = hazard;
    job->cycles = dv.T ? last_valid + 1 : 0;
    for (size_t t = 0; t < dv.T; t++) {
        if (job->load_start)
            job->load_start[t] = dv.L[t];
        if (job->stream_start)
            job->stream_start[t] = dv.S[t];
        if (job->first_out_cycle)
            job->first_out_cycle[t] = first_out[t];
    }
    if (hazard && !dv.forced)
        return tpu__fail(d, TPU_EBACKEND,
                         "the RTL array reported a weight-buffer hazard under the cycle "
                         "model's own schedule; the RTL and mxu.h disagree");
    return 0;
}

} // namespace

// ---- the C API ------------------------------------------------------------------------------------

extern "C" {

size_t tpu_mxu_rtl_shape_count(void)
{
    return n_shapes;
}

void tpu_mxu_rtl_shape(size_t i, uint32_t *rows, uint32_t *cols)
{
    const bool ok = i < n_shapes;
    if (rows)
        *rows = ok ? shapes[i].rows : 0;
    if (cols)
        *cols = ok ? shapes[i].cols : 0;
}

int tpu_mxu_rtl_create(uint32_t rows, uint32_t cols, struct tpu_mxu_rtl **out,
                       struct tpu_diag *d)
{
    if (!out)
        return tpu__fail(d, TPU_EINVAL, "tpu_mxu_rtl_create needs somewhere to put the array");
    *out = nullptr;
    for (size_t i = 0; i < n_shapes; i++) {
        if (shapes[i].rows != rows || shapes[i].cols != cols)
            continue;
        try {
            std::unique_ptr<tpu_mxu_rtl> r(new tpu_mxu_rtl);
            r->rows = rows;
            r->cols = cols;
            r->m.reset(shapes[i].make(rows, cols));
            *out = r.release();
            return 0;
        } catch (const std::bad_alloc &) {
            return tpu__fail(d, TPU_ENOMEM, "out of memory making the %ux%u RTL array", rows,
                             cols);
        }
    }
    return tpu__fail(d, TPU_EUNSUPPORTED,
                     "no RTL array of %u rows x %u columns is built into this binary; the "
                     "built shapes are %s (rtl/meson.build lists them)",
                     rows, cols, shape_list().c_str());
}

void tpu_mxu_rtl_destroy(struct tpu_mxu_rtl *rtl)
{
    delete rtl;
}

uint32_t tpu_mxu_rtl_rows(const struct tpu_mxu_rtl *rtl)
{
    return rtl ? rtl->rows : 0;
}

uint32_t tpu_mxu_rtl_cols(const struct tpu_mxu_rtl *rtl)
{
    return rtl ? rtl->cols : 0;
}

int tpu_mxu_rtl_trace_open(struct tpu_mxu_rtl *rtl, const char *vcd_path, struct tpu_diag *d)
{
    if (!rtl || !vcd_path)
        return tpu__fail(d, TPU_EINVAL, "tpu_mxu_rtl_trace_open needs an array and a path");
    if (rtl->m->tracing())
        return tpu__fail(d, TPU_EINVAL,
                         "a waveform trace is already open on this array; one per array");
    bool ok;
    int err = 0;
    try {
        ok = rtl->m->trace_open(vcd_path, &err);
        if (ok)
            rtl->vcd_path = vcd_path;
    } catch (const std::bad_alloc &) {
        return tpu__fail(d, TPU_ENOMEM, "out of memory opening the waveform trace");
    }
    if (!ok)
        return tpu__fail(d, TPU_EIO, "cannot create the waveform file '%s': %s", vcd_path,
                         std::strerror(err));
    return 0;
}

int tpu_mxu_rtl_run(struct tpu_mxu_rtl *rtl, struct tpu_mxu_rtl_job *job, struct tpu_diag *d)
{
    if (!rtl || !job)
        return tpu__fail(d, TPU_EINVAL, "tpu_mxu_rtl_run needs an array and a job");
    job->cycles = 0;
    job->hazard = false;
    int rc = check_job(rtl, job, d);
    if (rc != 0 || job->n_tiles == 0)
        return rc;
    try {
        return run_job(rtl, job, d);
    } catch (const std::bad_alloc &) {
        return tpu__fail(d, TPU_ENOMEM, "out of memory running %zu tiles on the RTL array",
                         job->n_tiles);
    }
}

int tpu_mxu_rtl_run_bf16(struct tpu_mxu_rtl *rtl, size_t n_tiles, const tpu_bf16 *const *w_tiles,
                         const tpu_bf16 *const *in, const uint64_t *m_rows, float *const *out,
                         uint64_t *cycles_out, struct tpu_diag *d)
{
    tpu_mxu_rtl_job job;
    std::memset(&job, 0, sizeof job);
    job.dtype = TPU_BF16;
    job.n_tiles = n_tiles;
    job.m_rows = m_rows;
    job.w_bf16 = w_tiles;
    job.in_bf16 = in;
    job.out_f32 = out;
    const int rc = tpu_mxu_rtl_run(rtl, &job, d);
    if (cycles_out)
        *cycles_out = job.cycles;
    return rc;
}

int tpu_mxu_rtl_run_int8(struct tpu_mxu_rtl *rtl, size_t n_tiles, const int8_t *const *w_tiles,
                         const int8_t *const *in, const uint64_t *m_rows, int32_t *const *out,
                         uint64_t *cycles_out, struct tpu_diag *d)
{
    tpu_mxu_rtl_job job;
    std::memset(&job, 0, sizeof job);
    job.dtype = TPU_INT8;
    job.n_tiles = n_tiles;
    job.m_rows = m_rows;
    job.w_int8 = w_tiles;
    job.in_int8 = in;
    job.out_i32 = out;
    const int rc = tpu_mxu_rtl_run(rtl, &job, d);
    if (cycles_out)
        *cycles_out = job.cycles;
    return rc;
}

} // extern "C"
