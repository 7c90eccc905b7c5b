// bf16 x bf16 -> fp32 multiplier of one processing element. Combinational; no state.
//
//   p = fp32(a) * fp32(b) rounded to fp32 (round to nearest even). The product of two bf16
//   significands has at most 16 bits, so it is exact unless it overflows (then +-Inf) or
//   falls below the normal range (then it is rounded onto the subnormal grid: gradual
//   underflow, never flushed). Subnormal inputs are kept (no denormals-are-zero).
//   Inf * 0 = NaN; NaN * x = NaN; Inf * finite non-zero = +-Inf; a zero product carries the
//   sign sa ^ sb. Every NaN it produces is 0x7FC00000 (the payload of a NaN inside the array
//   never reaches its outputs: the column outputs are made canonical).
// The arithmetic's internal signals are left out of waveform traces (they would triple the
// traced signals of the array); its ports are traced as the PE's signals.
/* verilator tracing_off */
module mxu_bf16_mul (
    input  wire [15:0] a,
    input  wire [15:0] b,
    output wire [31:0] p
);
    // Index of the most significant set bit (0 for v == 0).
    function automatic [3:0] msb16(input [15:0] v);
        integer k;
        begin
            msb16 = 4'd0;
            for (k = 0; k < 16; k = k + 1)
                if (v[k])
                    msb16 = k[3:0];
        end
    endfunction

    wire       sign   = a[15] ^ b[15];
    wire [7:0] ea     = a[14:7];
    wire [7:0] eb     = b[14:7];
    wire       a_nan  = (&ea) & (|a[6:0]);
    wire       b_nan  = (&eb) & (|b[6:0]);
    wire       a_inf  = (&ea) & ~(|a[6:0]);
    wire       b_inf  = (&eb) & ~(|b[6:0]);
    wire       a_zero = ~(|a[14:0]);
    wire       b_zero = ~(|b[14:0]);

    // Significands with the hidden bit; a subnormal has exponent 1 and no hidden bit.
    wire [7:0]  ma     = {|ea, a[6:0]};
    wire [7:0]  mb     = {|eb, b[6:0]};
    wire [7:0]  ea_eff = (ea == 8'd0) ? 8'd1 : ea;
    wire [7:0]  eb_eff = (eb == 8'd0) ? 8'd1 : eb;
    wire [15:0] prod   = {8'd0, ma} * {8'd0, mb};  // exact: value = prod * 2^(ea+eb-254-14)
    wire [3:0]  q      = msb16(prod);
    wire [15:0] norm   = prod << (4'd15 - q);      // leading one at bit 15

    // norm at bits 30..15 of the rounder's significand; exp = ea + eb - 142 + q (see
    // mxu_fp32_round for the convention: 1.0 * 1.0 gives 127 + 127 - 142 + 14 = 126).
    wire signed [11:0] exp = $signed({4'd0, ea_eff}) + $signed({4'd0, eb_eff})
                             - 12'sd142 + $signed({8'd0, q});
    wire [31:0] rounded;
    mxu_fp32_round u_round (
        .sign  (sign),
        .exp   (exp),
        .sig   ({1'b0, norm, 15'd0}),
        .result(rounded)
    );

    wire nan = a_nan | b_nan | (a_inf & b_zero) | (a_zero & b_inf);
    wire inf = a_inf | b_inf;
    wire zero = a_zero | b_zero;
    assign p = nan  ? 32'h7FC0_0000
             : inf  ? {sign, 8'hFF, 23'd0}
             : zero ? {sign, 31'd0}
             : rounded;
endmodule
