// MCF simulation model of the AMD DSP48E2 slice (UG579), the subset the MAC array uses.
// (mcf-sim-model-begin: `mcf synth` drops everything from this line on, so Yosys and Vivado
// map the instances onto their own DSP48E2 primitive.)
//
// Supported configuration (anything else stops the simulation at time 0 with a message):
//   A_INPUT = B_INPUT = "DIRECT", AREG, BREG = 1 (the A2 / B2 registers, CEA2 / CEB2, RSTA / RSTB) or
//   0 (A / B straight into the multiplier), MREG = 0 or 1 (the M register, CEM, RSTM), PREG = 1 (CEP,
//   RSTP), BMULTSEL = "B", USE_MULT = "MULTIPLY", USE_SIMD = "ONE48", the C port unregistered (CREG = 0),
//   INMODEREG = OPMODEREG = 0 or 1 (the inputs are constants), ALUMODE = 4'b0000, CARRYIN = 0, and
//   either AMULTSEL = "A", INMODE = 5'b00000 (the multiplier takes A2), or AMULTSEL = "AD",
//   DREG = 1 (CED, RSTD), INMODE = 5'b00100 (the pre-adder: D + A2, or D + A when AREG = 0), ADREG = 1
//   (its register AD, CEAD) or 0 (the sum straight into the multiplier);
//   OPMODE with W = 00 (0), 10 (RND) or 11 (C), X = Y = 01 (the multiplier's two partial products: M),
//   Z = 000 (0), 001 (PCIN), 010 (P: the accumulator's feedback) or 011 (C).
// Arithmetic (UG579, "ALUMODE 0000: Z + W + X + Y + CIN"):
//   M = A2[26:0] or AD (or D + A2 unregistered) (signed 27 bits) x B2 (signed, 18 bits)   45 bits, sign-extended to 48
//   (A / B for AREG / BREG = 0; MREG = 1: M the register of that product, on CEM)
//   P <= Z + W + M  (mod 2^48)                   PCOUT = P (the dedicated cascade to the next PCIN)
module DSP48E2 #(
    parameter integer AREG = 1,
    parameter integer BREG = 1,
    parameter integer MREG = 1,
    parameter integer PREG = 1,
    parameter integer CREG = 0,
    parameter A_INPUT = "DIRECT",
    parameter B_INPUT = "DIRECT",
    parameter AMULTSEL = "A",
    parameter BMULTSEL = "B",
    parameter USE_MULT = "MULTIPLY",
    parameter USE_SIMD = "ONE48",
    parameter integer DREG = 1,
    parameter integer ADREG = 1,
    parameter integer INMODEREG = 1,
    parameter integer OPMODEREG = 1,
    parameter [47:0] RND = 48'd0
) (
    input wire CLK,
    input wire [29:0] A,
    input wire [17:0] B,
    input wire [26:0] D,
    input wire [47:0] PCIN,
    input wire [47:0] C,
    input wire [8:0] OPMODE,
    input wire [3:0] ALUMODE,
    input wire [4:0] INMODE,
    input wire CARRYIN,
    input wire CEA2,
    input wire CEB2,
    input wire CED,
    input wire CEAD,
    input wire CEM,
    input wire CEP,
    input wire RSTA,
    input wire RSTB,
    input wire RSTD,
    input wire RSTM,
    input wire RSTP,
    output wire [47:0] P,
    output wire [47:0] PCOUT
);
    reg [29:0] a2 = 30'd0;
    reg [17:0] b2 = 18'd0;
    reg [26:0] d = 27'd0;
    reg [26:0] ad = 27'd0;
    reg [47:0] p = 48'd0;
    reg [47:0] mr = 48'd0;
    wire pre = AMULTSEL == "AD";
    wire [26:0] aa = AREG ? a2[26:0] : A[26:0];
    wire [26:0] am = pre ? (ADREG ? ad : d + aa) : aa;
    wire [17:0] bm = BREG ? b2 : B;
    wire signed [47:0] mu = $signed(am) * $signed(bm);
    wire [47:0] m = MREG ? mr : mu;
    wire [47:0] z = OPMODE[6:4] == 3'b001 ? PCIN : OPMODE[6:4] == 3'b010 ? p
                  : OPMODE[6:4] == 3'b011 ? C : 48'd0;
    wire [47:0] w = OPMODE[8:7] == 2'b10 ? RND : OPMODE[8:7] == 2'b11 ? C : 48'd0;

    initial begin
        if (AREG > 1 || BREG > 1 || MREG > 1 || PREG != 1 || CREG != 0 || A_INPUT != "DIRECT"
                || B_INPUT != "DIRECT" || (AMULTSEL != "A" && AMULTSEL != "AD") || BMULTSEL != "B"
                || USE_MULT != "MULTIPLY" || USE_SIMD != "ONE48" || INMODEREG > 1 || OPMODEREG > 1
                || (AMULTSEL == "AD" && (DREG != 1 || ADREG > 1))) begin
            $display("DSP48E2 model: unsupported configuration (hw/compute/dsp48e2.v)");
            $finish;
        end
    end

    always @(posedge CLK) begin
        if (OPMODE[8:7] == 2'b01 || OPMODE[3:0] != 4'b0101
                || OPMODE[6] != 1'b0 || ALUMODE != 4'b0000
                || INMODE != (pre ? 5'b00100 : 5'b00000) || CARRYIN != 1'b0) begin
            $display("DSP48E2 model: unsupported OPMODE/ALUMODE/INMODE/CARRYIN");
            $finish;
        end
        if (RSTA) a2 <= 30'd0; else if (CEA2) a2 <= A;
        if (RSTB) b2 <= 18'd0; else if (CEB2) b2 <= B;
        if (pre) begin
            if (RSTD) d <= 27'd0; else if (CED) d <= D;
            if (CEAD) ad <= d + aa;
        end
        if (RSTM) mr <= 48'd0; else if (CEM) mr <= mu;
        if (RSTP) p <= 48'd0; else if (CEP) p <= z + w + m;
    end

    assign P = p;
    assign PCOUT = p;
endmodule
