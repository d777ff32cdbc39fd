// MCF simulation model of the AMD LUT6 (UG974): O = INIT[{I5, I4, I3, I2, I1, I0}].
// (mcf-sim-model-begin: `mcf synth` drops everything from this line on, so Yosys keeps the
// instances as its own LUT6 cells; hw/lut.py builds them.)
module LUT6 #(parameter [63:0] INIT = 64'h0) (
    output O,
    input I0, input I1, input I2, input I3, input I4, input I5
);
    assign O = INIT[{I5, I4, I3, I2, I1, I0}];
endmodule

// LUT6_2 (UG974): O6 = INIT[{I5, I4, I3, I2, I1, I0}], O5 = INIT[{1'b0, I4, I3, I2, I1, I0}].
module LUT6_2 #(parameter [63:0] INIT = 64'h0) (
    output O6, output O5,
    input I0, input I1, input I2, input I3, input I4, input I5
);
    assign O6 = INIT[{I5, I4, I3, I2, I1, I0}];
    assign O5 = INIT[{1'b0, I4, I3, I2, I1, I0}];
endmodule

// CARRY4 (UG974): CO[i] = S[i] ? carry into bit i : DI[i], O[i] = S[i] ^ carry into bit i, the carry into bit 0
// CI | CYINIT.  (One wire a carry: a vector read by its own bits is a loop to Verilator, UNOPTFLAT.)
module CARRY4 (
    output [3:0] CO, output [3:0] O,
    input CI, input CYINIT, input [3:0] DI, input [3:0] S
);
    wire c0 = CI | CYINIT;
    wire c1 = S[0] ? c0 : DI[0];
    wire c2 = S[1] ? c1 : DI[1];
    wire c3 = S[2] ? c2 : DI[2];
    wire c4 = S[3] ? c3 : DI[3];
    assign CO = {c4, c3, c2, c1};
    assign O = S ^ {c3, c2, c1, c0};
endmodule

// MUXF7 / MUXF8 / MUXF9 (UG974): O = S ? I1 : I0, the slice's wide-function multiplexers (two LUT6
// outputs, two MUXF7 outputs, two MUXF8 outputs).
module MUXF7 (output O, input I0, input I1, input S);
    assign O = S ? I1 : I0;
endmodule

module MUXF8 (output O, input I0, input I1, input S);
    assign O = S ? I1 : I0;
endmodule

module MUXF9 (output O, input I0, input I1, input S);
    assign O = S ? I1 : I0;
endmodule
