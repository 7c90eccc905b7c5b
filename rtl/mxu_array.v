// The matrix unit: a weight-stationary ROWS x COLS systolic array with double-buffered
// weights, input skew and output de-skew (include/tpusim/mxu.h is the contract; this file
// implements its cycle model exactly, and tests/test_cosim.c holds the C model to it).
//
// Ports, all sampled at the rising edge of clk (a value presented "in cycle c" is on the port
// during cycle c and sampled at the edge that ends it):
//   rst        synchronous reset of the control state (valid bits, load state, hazard).
//   mode       0: bf16 x bf16 -> fp32, 1: int8 x int8 -> int32. Constant while busy.
//   wl_*       the weight-load port. A tile is presented one row per cycle for ROWS
//              consecutive cycles, the row for array row ROWS-1 first (wl_first high with
//              it); wl_row holds that row's COLS weights, column j at bits [16j+15:16j];
//              wl_half names the buffer half it goes into (constant over the load).
//   in_*       the input port: one unskewed input row per cycle, value for array row i at
//              bits [16i+15:16i], with the tag naming the weight half it uses.
//   out_*      one de-skewed output row: column j's result at bits [32j+31:32j], with the
//              row's tag, valid in the cycle out_valid is high. In bf16 mode every NaN is
//              replaced by the canonical 0x7FC00000.
//   hazard     sticky: some PE saw a row use a weight half while a load was writing it.
//
// Timing (mxu.h's cycle model). The value for array row i passes through i skew registers,
// then one register per PE along the row: input row m presented in cycle s+m is in PE(i, j)
// in cycle s+m+i+j. Partial sums move down one PE per cycle in step with it (+0.0 enters at
// the top), so column j's sum for row m leaves PE(ROWS-1, j) in cycle s+m+ROWS+j; COLS-1-j
// de-skew registers align the columns, and the whole output row is valid in cycle
//     s + m + ROWS + COLS - 1
// (ROWS - 1 for the input skew and the trip down the rows, COLS - 1 across, +1 for the output
// register; the COLS - 1 de-skew is folded in). The valid bit and tag of PE(ROWS-1, COLS-1)
// are those of the output row.
// The weight load enters column j through j skew registers (the diagonal wavefront): a load
// presented in cycles [L, L+ROWS) reaches PE(i, j) in cycle L+i+j and has written every PE of
// column j by the end of cycle L+ROWS-1+j. See mxu_pe.v for how the load moves through the
// shadow half.
module mxu_array #(
    parameter ROWS = 8,
    parameter COLS = 8
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 mode,
    input  wire                 wl_valid,
    input  wire                 wl_first,
    input  wire                 wl_half,
    input  wire [COLS*16-1:0]   wl_row,
    input  wire                 in_valid,
    input  wire                 in_tag,
    input  wire [ROWS*16-1:0]   in_row,
    output wire                 out_valid,
    output wire                 out_tag,
    output wire [COLS*32-1:0]   out_row,
    output reg                  hazard
);
    genvar i, j;

    // ---- weight-load port: which cycle is a load's last -----------------------------------
    reg  [31:0] wl_count;  // rows of the current load presented before this cycle
    wire [31:0] wl_index = wl_first ? 32'd0 : wl_count;
    wire        wl_last  = wl_valid & (wl_index == ROWS - 1);

    always @(posedge clk) begin
        if (rst)
            wl_count <= 32'd0;
        else if (wl_valid)
            wl_count <= wl_last ? 32'd0 : wl_index + 32'd1;
    end

    // ---- column skew of the load: column j sees the port j cycles late -----------------------
    // Row ROWS of these arrays is unused: the bottom PEs' load outputs go nowhere.
    /* verilator lint_off UNUSEDSIGNAL */
    wire        ld_v    [0:COLS-1];
    wire        ld_half [0:COLS-1];
    wire        ld_last [0:COLS-1];
    wire        ld_head [0:ROWS][0:COLS-1];  // [i][j]: the load's head enters PE(i, j)
    wire [15:0] ld_w    [0:ROWS][0:COLS-1];  // [i][j]: value shifting into PE(i, j)
    /* verilator lint_on UNUSEDSIGNAL */

    generate
        for (j = 0; j < COLS; j = j + 1) begin : lskew
            if (j == 0) begin : port
                assign ld_v[j]       = wl_valid;
                assign ld_half[j]    = wl_half;
                assign ld_last[j]    = wl_last;
                assign ld_head[0][j] = wl_valid & wl_first;
                assign ld_w[0][j]    = wl_row[15:0];
            end else begin : delay
                reg        v_q, half_q, last_q, head_q;
                reg [15:0] w_q [0:j-1];  // column j's weight, delayed j cycles
                integer    k;
                always @(posedge clk) begin
                    half_q <= ld_half[j-1];
                    w_q[0] <= wl_row[16*j +: 16];
                    for (k = 1; k < j; k = k + 1)
                        w_q[k] <= w_q[k-1];
                    if (rst) begin
                        v_q    <= 1'b0;
                        last_q <= 1'b0;
                        head_q <= 1'b0;
                    end else begin
                        v_q    <= ld_v[j-1];
                        last_q <= ld_last[j-1];
                        head_q <= ld_head[0][j-1];
                    end
                end
                assign ld_v[j]       = v_q;
                assign ld_half[j]    = half_q;
                assign ld_last[j]    = last_q;
                assign ld_head[0][j] = head_q;
                assign ld_w[0][j]    = w_q[j-1];
            end
        end
    endgenerate

    // ---- input skew: array row i sees the port i cycles late ---------------------------------
    // Column COLS of these arrays is the right edge: only PE(ROWS-1, COLS-1)'s valid bit and
    // tag are used there (they are the output row's).
    /* verilator lint_off UNUSEDSIGNAL */
    wire [15:0] a_h   [0:ROWS-1][0:COLS];  // [i][j]: value entering PE(i, j) from the left
    wire        v_h   [0:ROWS-1][0:COLS];
    wire        tag_h [0:ROWS-1][0:COLS];
    /* verilator lint_on UNUSEDSIGNAL */
    wire [31:0] psum_v [0:ROWS][0:COLS-1]; // [i][j]: partial sum entering PE(i, j) from above

    generate
        for (i = 0; i < ROWS; i = i + 1) begin : iskew
            if (i == 0) begin : port
                assign a_h[0][0]   = in_row[15:0];
                assign v_h[0][0]   = in_valid;
                assign tag_h[0][0] = in_tag;
            end else begin : delay
                reg        v_q, tag_q;
                reg [15:0] a_q [0:i-1];  // row i's value, delayed i cycles
                integer    k;
                always @(posedge clk) begin
                    tag_q  <= tag_h[i-1][0];
                    a_q[0] <= in_row[16*i +: 16];
                    for (k = 1; k < i; k = k + 1)
                        a_q[k] <= a_q[k-1];
                    if (rst)
                        v_q <= 1'b0;
                    else
                        v_q <= v_h[i-1][0];
                end
                assign a_h[i][0]   = a_q[i-1];
                assign v_h[i][0]   = v_q;
                assign tag_h[i][0] = tag_q;
            end
        end
    endgenerate

    // ---- the PE grid ----------------------------------------------------------------------------
    wire [ROWS*COLS-1:0] pe_hazard;

    generate
        for (j = 0; j < COLS; j = j + 1) begin : top
            assign psum_v[0][j] = 32'd0;  // +0.0 (and integer 0) at the top of every column
        end
        for (i = 0; i < ROWS; i = i + 1) begin : row
            for (j = 0; j < COLS; j = j + 1) begin : col
                mxu_pe u_pe (
                    .clk        (clk),
                    .rst        (rst),
                    .mode       (mode),
                    .a_in       (a_h[i][j]),
                    .v_in       (v_h[i][j]),
                    .tag_in     (tag_h[i][j]),
                    .a_out      (a_h[i][j+1]),
                    .v_out      (v_h[i][j+1]),
                    .tag_out    (tag_h[i][j+1]),
                    .psum_in    (psum_v[i][j]),
                    .psum_out   (psum_v[i+1][j]),
                    .ld_v       (ld_v[j]),
                    .ld_half    (ld_half[j]),
                    .ld_last    (ld_last[j]),
                    .ld_head_in (ld_head[i][j]),
                    .ld_head_out(ld_head[i+1][j]),
                    .ld_w_in    (ld_w[i][j]),
                    .ld_w_out   (ld_w[i+1][j]),
                    .hazard     (pe_hazard[i*COLS+j])
                );
            end
        end
    endgenerate

    always @(posedge clk) begin
        if (rst)
            hazard <= 1'b0;
        else if (|pe_hazard)
            hazard <= 1'b1;
    end

    // ---- output de-skew: column j waits COLS-1-j cycles for the last column ------------------
    generate
        for (j = 0; j < COLS; j = j + 1) begin : dskew
            wire [31:0] y;
            if (j == COLS - 1) begin : none
                assign y = psum_v[ROWS][j];
            end else begin : delay
                reg [31:0] y_q [0:COLS-2-j];
                integer    k;
                always @(posedge clk) begin
                    y_q[0] <= psum_v[ROWS][j];
                    for (k = 1; k < COLS - 1 - j; k = k + 1)
                        y_q[k] <= y_q[k-1];
                end
                assign y = y_q[COLS-2-j];
            end
            // every NaN leaving the array is the canonical quiet NaN (bf16 mode)
            wire y_nan = (&y[30:23]) & (|y[22:0]);
            assign out_row[32*j +: 32] = (~mode & y_nan) ? 32'h7FC0_0000 : y;
        end
    endgenerate

    assign out_valid = v_h[ROWS-1][COLS];
    assign out_tag   = tag_h[ROWS-1][COLS];
endmodule
