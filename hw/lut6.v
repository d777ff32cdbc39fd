// MCF simulation model of the AMD LUT6 (UG974): O = INIT[{I5, I4, I3, I2, I1, I0}].
// (mcf-sim-model-begin: `mcf synth` drops everything from this line on, so Yosys keeps the
// instances as its own LUT6 cells; hw/lut.py builds them.)
module LUT6 #(parameter [63:0] INIT = 64'h0) (
    output O,
    input I0, input I1, input I2, input I3, input I4, input I5
);
    assign O = INIT[{I5, I4, I3, I2, I1, I0}];
endmodule
