// One processing element (PE) of the weight-stationary systolic array (mxu_array.v).
//
// Each cycle it takes an input value from the left and a partial sum from above, multiplies
// the input by the weight of the buffer half named by the tag travelling with the input, adds
// the product to the partial sum, and registers the input (with its valid bit and tag) for the
// PE to the right and the new partial sum for the PE below. One register stage per PE: a
// value entering PE(i, j) in cycle c leaves it in cycle c + 1.
//
// Numerics (the words of include/tpusim/mxu.h):
//   bf16 x bf16 -> fp32 (mode 0). Each PE computes  p = fp32(a) * fp32(w)  rounded to fp32
//   (round to nearest even; the product of two bf16 is exact unless it overflows or falls
//   below the normal range) and  psum_out = psum_in + p  rounded to fp32 (nearest even).
//   Everything is IEEE-754 binary32 with gradual underflow: subnormal inputs, products and
//   sums are kept, never flushed. Inf and NaN follow IEEE (Inf*0 = NaN, Inf + -Inf = NaN).
//   int8 x int8 -> int32 (mode 1). p = a * w (exact in 16 bits), psum_out = psum_in + p in
//   two's-complement int32 with wrap-around. The int8 operands are the low bytes of the
//   16-bit input and weight.
//
// Weights: two registers w0 and w1 (the double buffer). A tile's weights are loaded into one
// half by shifting them down the column *through that half* (the half is the load's shift
// register). The load is a diagonal wavefront: its first value (the weight for the bottom
// row) reaches PE(i, j) in the cycle the load's head arrives here (ld_head_in); from then on
// this PE's half takes the value from the PE above each cycle until the load's last cycle
// (ld_last, broadcast down the column), after which it holds the weight for row i. Before
// the head arrives the half is not touched, so a row of an older tile may still use it: the
// half is busy for a load from the head's arrival to the load's last cycle, both inclusive.
// `hazard` is high in a cycle in which this PE is busy loading the half that the input row
// here uses (a row using weights being replaced, or weights not yet complete): the cycle
// model of mxu.h never lets that happen, so it is a checked invariant.
module mxu_pe (
    input  wire        clk,
    input  wire        rst,
    input  wire        mode,        // 0: bf16 -> fp32, 1: int8 -> int32; constant while busy
    // input values, moving right
    input  wire [15:0] a_in,
    input  wire        v_in,        // a_in belongs to an input row
    input  wire        tag_in,      // the weight half that row uses
    output reg  [15:0] a_out,
    output reg         v_out,
    output reg         tag_out,
    // partial sums, moving down
    input  wire [31:0] psum_in,
    output reg  [31:0] psum_out,
    // weight load, moving down through the loading half
    input  wire        ld_v,        // the column's load presents a row this cycle
    input  wire        ld_half,     // the half it writes
    input  wire        ld_last,     // this is the load's last cycle in this column
    input  wire        ld_head_in,  // the load's head reaches this PE this cycle
    output reg         ld_head_out,
    input  wire [15:0] ld_w_in,     // the loading half of the PE above (or the column input)
    output wire [15:0] ld_w_out,    // this PE's loading half, for the PE below
    output wire        hazard
);
    reg [15:0] w0;
    reg [15:0] w1;
    reg        armed;  // the head has passed and the load's last cycle has not

    wire        ld_en = ld_v & (ld_head_in | armed);
    wire [15:0] w     = tag_in ? w1 : w0;

    assign ld_w_out = ld_half ? w1 : w0;
    assign hazard   = ld_en & v_in & (tag_in == ld_half);

    // bf16 x bf16 -> fp32
    wire [31:0] f_prod;
    wire [31:0] f_sum;
    mxu_bf16_mul u_mul (.a(a_in), .b(w), .p(f_prod));
    mxu_fp32_add u_add (.x(psum_in), .y(f_prod), .s(f_sum));

    // int8 x int8 -> int32
    wire signed [15:0] i_prod = $signed(a_in[7:0]) * $signed(w[7:0]);
    wire        [31:0] i_sum  = psum_in + {{16{i_prod[15]}}, i_prod};

    always @(posedge clk) begin
        a_out    <= a_in;
        tag_out  <= tag_in;
        psum_out <= mode ? i_sum : f_sum;
        if (ld_en) begin
            if (ld_half)
                w1 <= ld_w_in;
            else
                w0 <= ld_w_in;
        end
        if (rst) begin
            v_out       <= 1'b0;
            armed       <= 1'b0;
            ld_head_out <= 1'b0;
        end else begin
            v_out       <= v_in;
            armed       <= ld_en & ~ld_last;
            ld_head_out <= ld_v & ld_head_in;
        end
    end
endmodule
