// Rounding and packing of an IEEE-754 binary32 result (round to nearest, ties to even), used
// by the matrix unit's bf16 multiplier and fp32 adder. Combinational; no state.
//
// It is the arithmetic of Berkeley SoftFloat's roundPackToF32 for round-to-nearest-even:
//
//     value = sig * 2^(exp + 1 - 127 - 30)
//
// `sig` has its leading one at bit 30 (sig[31] == 0) whenever exp >= 0, and `exp` is the
// biased exponent minus one: adding the rounded significand (leading one at bit 23) into the
// exponent field then yields the biased exponent, and a carry out of the significand (1.11..1
// rounding up to 2.0) bumps it once more. The seven bits below the result's last bit decide
// the rounding: above half rounds up, below half rounds down, exactly half rounds to even.
//
//   - exp < 0: the value lies below the normal range. sig is shifted right by -exp, the bits
//     shifted out are kept as a sticky bit, and the result is rounded onto the subnormal grid
//     (multiples of 2^-149): gradual underflow, never a flush to zero. A subnormal that rounds
//     up past the largest subnormal becomes the smallest normal through the same carry.
//   - exp > 253, or exp == 253 and rounding carries: overflow, the result is +-Inf (round to
//     nearest never gives the largest finite value on overflow).
// Zero, Inf and NaN operands never come here; the callers handle them.
// The arithmetic's internal signals are left out of waveform traces (they would triple the
// traced signals of the array); its ports are traced as the PE's signals.
/* verilator tracing_off */
module mxu_fp32_round (
    input  wire               sign,
    input  wire signed [11:0] exp,
    input  wire        [31:0] sig,
    output reg         [31:0] result
);
    reg [31:0] s;   // significand after the subnormal shift, 7 rounding bits at the bottom
    reg [7:0]  e;   // exponent field before the rounded significand is added in
    reg [11:0] sh;  // right shift into the subnormal range
    reg [31:0] r;   // rounded significand, leading one at bit 23 (or 24 after a carry)
    reg        ovf;

    always @* begin
        s   = sig;
        e   = 8'd0;
        sh  = 12'd0;
        ovf = 1'b0;
        if (exp < 12'sd0) begin
            sh = -exp;
            if (sh >= 12'd31)
                s = {31'd0, |sig};
            else
                s = (sig >> sh[4:0]) | {31'd0, |(sig & ~(32'hFFFF_FFFF << sh[4:0]))};
        end else if (exp > 12'sd253 || (exp == 12'sd253 && sig >= 32'h7FFF_FFC0)) begin
            ovf = 1'b1;
        end else begin
            e = exp[7:0];
        end
        r = (s + 32'd64) >> 7;
        if (s[6:0] == 7'h40)
            r[0] = 1'b0;  // exactly half way: ties to even
        result = ovf ? {sign, 8'hFF, 23'd0} : ({sign, 31'd0} | ({1'b0, e, 23'd0} + r));
    end
endmodule
