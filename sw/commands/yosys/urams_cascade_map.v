// MCF: the techmap of urams_cascade.txt's $__MCF_URAM_CAS2_ (mcf synth): two URAM288 in a depth
// cascade, FIRST and LAST (UG573, UG974 URAM288): each block compares address bit 12 with its
// SELF_ADDR (SELF_MASK 11'h7FE: the other bits of ADDR[22:12] not compared); the LAST block takes
// address, control and write data from the cascade and its DOUT is the pair's read data.  The
// other pins as Yosys's urams_map.v sets them (no input / output registers, no ECC).
module $__MCF_URAM_CAS2_ (...);
	parameter OPTION_BYTEWIDTH = 8;
	localparam WR_BE_WIDTH = 72 / OPTION_BYTEWIDTH;
	parameter CLK_C_POL = 1;
	parameter PORT_A_CLK_POL = 1;
	parameter PORT_A_OPTION_RST_MODE = "SYNC";
	parameter PORT_B_CLK_POL = 1;
	parameter PORT_B_OPTION_RST_MODE = "SYNC";
	input CLK_C;
	input PORT_A_CLK;
	input PORT_A_CLK_EN;
	input PORT_A_RD_SRST;
	input PORT_A_RD_ARST;
	input PORT_A_WR_EN;
	input [WR_BE_WIDTH-1:0] PORT_A_WR_BE;
	input [12:0] PORT_A_ADDR;
	input [71:0] PORT_A_WR_DATA;
	output [71:0] PORT_A_RD_DATA;
	input PORT_B_CLK;
	input PORT_B_CLK_EN;
	input PORT_B_RD_SRST;
	input PORT_B_RD_ARST;
	input PORT_B_WR_EN;
	input [WR_BE_WIDTH-1:0] PORT_B_WR_BE;
	input [12:0] PORT_B_ADDR;
	input [71:0] PORT_B_WR_DATA;
	output [71:0] PORT_B_RD_DATA;
	wire [22:0] ca_a, ca_b; wire [8:0] cb_a, cb_b; wire [71:0] cdi_a, cdi_b, cdo_a, cdo_b;
	wire ce_a, ce_b, cr_a, cr_b, cw_a, cw_b, cd_a, cd_b, cs_a, cs_b;
	URAM288 #(
		.CASCADE_ORDER_A("FIRST"), .CASCADE_ORDER_B("FIRST"),
		.SELF_ADDR_A(11'h000), .SELF_ADDR_B(11'h000), .SELF_MASK_A(11'h7FE), .SELF_MASK_B(11'h7FE),
		.BWE_MODE_A("PARITY_INDEPENDENT"), .BWE_MODE_B("PARITY_INDEPENDENT"),
		.IREG_PRE_A("FALSE"), .IREG_PRE_B("FALSE"), .OREG_A("FALSE"), .OREG_B("FALSE"),
		.IS_CLK_INVERTED(!CLK_C_POL),
		.RST_MODE_A(PORT_A_OPTION_RST_MODE), .RST_MODE_B(PORT_B_OPTION_RST_MODE)
	) first (
		.ADDR_A({10'b0, PORT_A_ADDR}), .BWE_A(PORT_A_WR_BE), .EN_A(PORT_A_CLK_EN), .RDB_WR_A(PORT_A_WR_EN),
		.INJECT_DBITERR_A(1'b0), .INJECT_SBITERR_A(1'b0), .DIN_A(PORT_A_WR_DATA),
		.RST_A(PORT_A_OPTION_RST_MODE == "SYNC" ? PORT_A_RD_SRST : PORT_A_RD_ARST),
		.ADDR_B({10'b0, PORT_B_ADDR}), .BWE_B(PORT_B_WR_BE), .EN_B(PORT_B_CLK_EN), .RDB_WR_B(PORT_B_WR_EN),
		.INJECT_DBITERR_B(1'b0), .INJECT_SBITERR_B(1'b0), .DIN_B(PORT_B_WR_DATA),
		.RST_B(PORT_B_OPTION_RST_MODE == "SYNC" ? PORT_B_RD_SRST : PORT_B_RD_ARST),
		.CAS_OUT_ADDR_A(ca_a), .CAS_OUT_BWE_A(cb_a), .CAS_OUT_DIN_A(cdi_a), .CAS_OUT_DOUT_A(cdo_a),
		.CAS_OUT_EN_A(ce_a), .CAS_OUT_RDACCESS_A(cr_a), .CAS_OUT_RDB_WR_A(cw_a), .CAS_OUT_DBITERR_A(cd_a),
		.CAS_OUT_SBITERR_A(cs_a),
		.CAS_OUT_ADDR_B(ca_b), .CAS_OUT_BWE_B(cb_b), .CAS_OUT_DIN_B(cdi_b), .CAS_OUT_DOUT_B(cdo_b),
		.CAS_OUT_EN_B(ce_b), .CAS_OUT_RDACCESS_B(cr_b), .CAS_OUT_RDB_WR_B(cw_b), .CAS_OUT_DBITERR_B(cd_b),
		.CAS_OUT_SBITERR_B(cs_b),
		.CLK(CLK_C), .SLEEP(1'b0)
	);
	URAM288 #(
		.CASCADE_ORDER_A("LAST"), .CASCADE_ORDER_B("LAST"),
		.SELF_ADDR_A(11'h001), .SELF_ADDR_B(11'h001), .SELF_MASK_A(11'h7FE), .SELF_MASK_B(11'h7FE),
		.BWE_MODE_A("PARITY_INDEPENDENT"), .BWE_MODE_B("PARITY_INDEPENDENT"),
		.IREG_PRE_A("FALSE"), .IREG_PRE_B("FALSE"), .OREG_A("FALSE"), .OREG_B("FALSE"),
		.IS_CLK_INVERTED(!CLK_C_POL),
		.RST_MODE_A(PORT_A_OPTION_RST_MODE), .RST_MODE_B(PORT_B_OPTION_RST_MODE)
	) last (
		.CAS_IN_ADDR_A(ca_a), .CAS_IN_BWE_A(cb_a), .CAS_IN_DIN_A(cdi_a), .CAS_IN_DOUT_A(cdo_a),
		.CAS_IN_EN_A(ce_a), .CAS_IN_RDACCESS_A(cr_a), .CAS_IN_RDB_WR_A(cw_a), .CAS_IN_DBITERR_A(cd_a),
		.CAS_IN_SBITERR_A(cs_a),
		.CAS_IN_ADDR_B(ca_b), .CAS_IN_BWE_B(cb_b), .CAS_IN_DIN_B(cdi_b), .CAS_IN_DOUT_B(cdo_b),
		.CAS_IN_EN_B(ce_b), .CAS_IN_RDACCESS_B(cr_b), .CAS_IN_RDB_WR_B(cw_b), .CAS_IN_DBITERR_B(cd_b),
		.CAS_IN_SBITERR_B(cs_b),
		.DOUT_A(PORT_A_RD_DATA), .DOUT_B(PORT_B_RD_DATA),
		.CLK(CLK_C), .SLEEP(1'b0)
	);
endmodule
