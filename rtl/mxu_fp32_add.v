// fp32 + fp32 adder of one processing element. Combinational; no state.
//
//   s = x + y rounded to fp32 (round to nearest even), IEEE-754 binary32 with gradual
//   underflow: subnormal operands and results are kept, never flushed.
//   Signed zeros: an exact zero sum of operands of opposite sign is +0 (round to nearest),
//   -0 + -0 = -0, +0 + -0 = +0. x + (+-0) = x for every non-zero x.
//   Inf + Inf = Inf, Inf + -Inf = NaN, Inf + finite = Inf, NaN + x = NaN. Every NaN it
//   produces is 0x7FC00000.
//
// Method: order the operands by magnitude, align the smaller one to the larger with three
// extra bits (guard, round, sticky: the bits shifted out are ORed into the lowest), add or
// subtract the significands, normalise and round (mxu_fp32_round). The sticky bit lies at
// least two places below the last kept bit after normalisation, which is what makes the
// rounding exact: a subtraction that cancels more than one leading bit only happens when the
// exponents differ by at most one, and then nothing was shifted out.
// The arithmetic's internal signals are left out of waveform traces (they would triple the
// traced signals of the array); its ports are traced as the PE's signals.
/* verilator tracing_off */
module mxu_fp32_add (
    input  wire [31:0] x,
    input  wire [31:0] y,
    output wire [31:0] s
);
    // Index of the most significant set bit (0 for v == 0).
    function automatic [4:0] msb28(input [27:0] v);
        integer k;
        begin
            msb28 = 5'd0;
            for (k = 0; k < 28; k = k + 1)
                if (v[k])
                    msb28 = k[4:0];
        end
    endfunction

    wire x_nan  = (&x[30:23]) & (|x[22:0]);
    wire y_nan  = (&y[30:23]) & (|y[22:0]);
    wire x_inf  = (&x[30:23]) & ~(|x[22:0]);
    wire y_inf  = (&y[30:23]) & ~(|y[22:0]);
    wire x_zero = ~(|x[30:0]);
    wire y_zero = ~(|y[30:0]);

    // |hi| >= |lo|: the bit patterns of finite magnitudes order like their values.
    wire        swap  = x[30:0] < y[30:0];
    wire [31:0] hi    = swap ? y : x;
    wire [31:0] lo    = swap ? x : y;
    wire [7:0]  eh    = hi[30:23];
    wire [7:0]  el    = lo[30:23];
    wire [7:0]  eh_ef = (eh == 8'd0) ? 8'd1 : eh;  // a subnormal has exponent 1, no hidden bit
    wire [7:0]  el_ef = (el == 8'd0) ? 8'd1 : el;
    wire [7:0]  d     = eh_ef - el_ef;
    wire [26:0] xh    = {|eh, hi[22:0], 3'd0};    // 1.f (or 0.f) and three extra bits
    wire [26:0] xl    = {|el, lo[22:0], 3'd0};

    reg [26:0] xa;  // xl shifted right by d, the bits shifted out ORed into bit 0
    always @* begin
        if (d >= 8'd27)
            xa = {26'd0, |xl};
        else
            xa = (xl >> d[4:0]) | {26'd0, |(xl & ~(27'h7FF_FFFF << d[4:0]))};
    end

    wire        sub = hi[31] ^ lo[31];
    wire [27:0] sum = sub ? ({1'b0, xh} - {1'b0, xa}) : ({1'b0, xh} + {1'b0, xa});
    wire [4:0]  pos = msb28(sum);
    wire [31:0] sig = {4'd0, sum} << (5'd30 - pos);  // leading one at bit 30
    // value = sum * 2^(eh_ef - 127 - 26); in the rounder's convention exp = eh_ef - 27 + pos
    wire signed [11:0] exp = $signed({4'd0, eh_ef}) - 12'sd27 + $signed({7'd0, pos});

    wire [31:0] rounded;
    mxu_fp32_round u_round (
        .sign  (hi[31]),
        .exp   (exp),
        .sig   (sig),
        .result(rounded)
    );

    wire nan = x_nan | y_nan | (x_inf & y_inf & (x[31] ^ y[31]));
    assign s = nan               ? 32'h7FC0_0000
             : x_inf             ? {x[31], 8'hFF, 23'd0}
             : y_inf             ? {y[31], 8'hFF, 23'd0}
             : (x_zero & y_zero) ? {x[31] & y[31], 31'd0}
             : (sum == 28'd0)    ? 32'd0                 // exact cancellation: +0
             : rounded;
endmodule
