"""The KR260 as the bitstream flow sees it: the part and one pin table (the PL clock and the
other facts the PS side needs are in ``ps.py``, which runs on the board without Amaranth).

Pin facts: K26 SOM (XCK26-SFVC784-2LV-C) on the KR260 carrier, per the carrier's schematic
(XTP743) and the SOM240 connector pinout, cross-checked against public KR260 constraint files.
The table is the only place a package pin is written: ``xdc()`` renders the constraints of the
ports a build creates, ``KR260Platform`` (Amaranth) takes its resources from it, and
``docs/board.md`` lists it.

Bank voltages matter: the HD banks 43, 44 and 45 (the SFP+ sideband, the fan) run at 3.3 V on
the KR260 carrier, so their pins are LVCMOS33; the HP bank 66 (LEDs, the 25 MHz clock) at
1.8 V, LVCMOS18.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.build import Attrs, Clock, Pins, Resource
from amaranth.vendor import XilinxPlatform

from .ps import PL_CLOCK_HZ, PS_PLL_HZ, ps_clock_divisor  # noqa: F401  (re-exported)

#: The SoC part, as Vivado spells it.
PART = "xck26-sfvc784-2LV-c"


@dataclass(frozen=True)
class Pin:
    port: str          # port name in the block design and the XDC
    site: str          # package pin (or transceiver site for kind "gt")
    iostandard: str    # "" for transceiver pins (dedicated, no IO buffer)
    direction: str     # "in", "out", "inout"
    som240: str        # SOM240 connector pin
    signal: str        # carrier schematic net / FPGA bank function
    kind: str = "io"   # "io", "gt_refclk", "gt_channel"
    note: str = ""


#: Every PL pin the flow may use.  Verified against the KR260 carrier schematic (XTP743) and the
#: K26 SOM240 pinout; cross-checked with public KR260 targets (Corundum / taxi) for the facts.
PINS: tuple[Pin, ...] = (
    Pin("clk25", "C3", "LVCMOS18", "in", "som240_1_a6", "HPA_CLK0P (25 MHz from U91), bank 66"),
    Pin("led0", "F8", "LVCMOS18", "out", "som240_1_d13", "HPA14_P, user LED UF1, bank 66",
        note="on while the node is out of reset"),
    Pin("led1", "E8", "LVCMOS18", "out", "som240_1_d14", "HPA14_N, user LED UF2, bank 66",
        note="the node's interrupt line"),
    Pin("fan_en_b", "A12", "LVCMOS33", "out", "som240_1_c24", "HDA20, fan enable (active low), bank 45",
        note="driven low: fan on whenever the PL is loaded"),
    Pin("sfp_refclk_p", "Y6", "", "in", "som240_2_c3", "MGTREFCLK0P_224, 156.25 MHz from U90",
        kind="gt_refclk"),
    Pin("sfp_refclk_n", "Y5", "", "in", "som240_2_c4", "MGTREFCLK0N_224", kind="gt_refclk"),
    Pin("sfp_rx_p", "T2", "", "in", "som240_2_b1", "MGTHRXP2_224 (GTH_DP2_C2M_P), GTHE4_CHANNEL_X0Y6",
        kind="gt_channel"),
    Pin("sfp_rx_n", "T1", "", "in", "som240_2_b2", "MGTHRXN2_224", kind="gt_channel"),
    Pin("sfp_tx_p", "R4", "", "out", "som240_2_b5", "MGTHTXP2_224 (GTH_DP2_M2C_P), GTHE4_CHANNEL_X0Y6",
        kind="gt_channel"),
    Pin("sfp_tx_n", "R3", "", "out", "som240_2_b6", "MGTHTXN2_224", kind="gt_channel"),
    Pin("sfp_tx_disable", "Y10", "LVCMOS33", "out", "som240_2_a47", "HDB19, SFP+ TX_DISABLE, bank 43",
        note="driven low: transmitter on"),
    Pin("sfp_mod_abs", "W10", "LVCMOS33", "in", "som240_2_a46", "HDB18, SFP+ MOD_ABS, bank 43",
        note="high: no module in the cage"),
    Pin("sfp_rx_los", "J12", "LVCMOS33", "in", "som240_1_a16", "HDA10, SFP+ RX_LOS, bank 45"),
    Pin("sfp_tx_fault", "A10", "LVCMOS33", "in", "som240_1_c23", "HDA19, SFP+ TX_FAULT, bank 45"),
    Pin("sfp_i2c_scl", "AB11", "LVCMOS33", "inout", "som240_2_b49", "HDB16, SFP+ module I2C SCL, bank 43"),
    Pin("sfp_i2c_sda", "AC11", "LVCMOS33", "inout", "som240_2_b50", "HDB17, SFP+ module I2C SDA, bank 43"),
)
PIN = {p.port: p for p in PINS}
#: The GTH channel wired to the SFP+ cage and its reference clock.  The K26 (SFVC784) has one
#: GTH quad, bank 224 = GTHE4_COMMON_X0Y1 with channels X0Y4..X0Y7 (RX P pins Y2/V2/T2/P2, TX P
#: pins W4/U4/R4/N4 for lanes 0..3, per the part's BSDL package mapping); the cage's T2/R4 pair is
#: lane 2, GTHE4_CHANNEL_X0Y6, and its 156.25 MHz reference MGTREFCLK0 of the same quad (Y6/Y5).
#: Public KR260 designs that use the cage's lane agree (a KR260 White Rabbit reference design
#: configures the transceiver wizard with CHANNEL_ENABLE X0Y6).  The earlier X1Y12 (quad
#: numbering of a larger part) does not exist on the K26.
SFP_GT_SITE = "X0Y6"                       # the transceiver wizard's name for the channel
SFP_GT_CHANNEL = f"GTHE4_CHANNEL_{SFP_GT_SITE}"
SFP_GT_COMMON = "GTHE4_COMMON_X0Y1"
SFP_GT_REFCLK = "clk0"                     # MGTREFCLK0 of quad 224 (the wizard's REFCLK_SOURCE)
SFP_REFCLK_HZ = 156_250_000

#: Board-level ports each network mode creates (the XDC constrains exactly these).
PORTS = {
    "loopback": ("led0", "led1", "fan_en_b"),
    "sfp": ("led0", "led1", "fan_en_b", "sfp_refclk_p", "sfp_refclk_n", "sfp_rx_p", "sfp_rx_n",
            "sfp_tx_p", "sfp_tx_n", "sfp_tx_disable", "sfp_mod_abs", "sfp_rx_los", "sfp_tx_fault"),
}


def xdc(network: str) -> str:
    """The constraints of the board ports a ``network`` build creates, from ``PINS``."""
    if network not in PORTS:
        raise ValueError(f"network={network!r}: must be one of {', '.join(PORTS)}")
    lines = [f"# Generated by mcf.boards.kr260.platform from its pin table ({network} build).",
             "# Package pins: KR260 carrier schematic (XTP743) and the K26 SOM240 pinout.", ""]
    ports = PORTS[network]
    for name in ports:
        p = PIN[name]
        # transceiver pins are dedicated (no IO buffer, no IOSTANDARD): the channel's LOC below
        # places them; their PACKAGE_PIN only states which lane the cage is wired to
        props = f"PACKAGE_PIN {p.site}" + (f" IOSTANDARD {p.iostandard}" if p.iostandard else "")
        if p.direction == "out" and p.iostandard:
            props += " SLEW SLOW DRIVE 8"
        lines.append(f"set_property -dict {{{props}}} [get_ports {p.port}] ;# {p.som240}: {p.signal}")
    slow_out = [n for n in ports if PIN[n].kind == "io" and PIN[n].direction == "out"]
    slow_in = [n for n in ports if PIN[n].kind == "io" and PIN[n].direction == "in"]
    lines += ["", "# Static signals: no timing relation to any clock."]
    if slow_out:
        lines += [f"set_false_path -to [get_ports {{{' '.join(slow_out)}}}]"]
    if slow_in:
        lines += [f"set_false_path -from [get_ports {{{' '.join(slow_in)}}}]"]
    if "sfp_refclk_p" in ports:
        lines += ["", f"# SFP+ reference clock ({SFP_REFCLK_HZ / 1e6:g} MHz) and the GTH lane of the cage.",
                  f"create_clock -period {1e9 / SFP_REFCLK_HZ:.3f} -name sfp_refclk [get_ports sfp_refclk_p]",
                  f"set_property LOC {SFP_GT_CHANNEL} [get_cells -hierarchical -filter {{REF_NAME == GTHE4_CHANNEL}}]",
                  "", "# The GT's user clocks (TX, and RX recovered from the peer) derive from sfp_refclk and are",
                  "# unrelated to the node clock (the PS's pl_clk0): the 10GBASE-R port crosses between them only",
                  "# through gray-coded pointers and two-flop synchronizers (hw/eth/cdc.py; ASYNC_REG in mcf_node.v).",
                  "set_clock_groups -asynchronous -group [get_clocks -include_generated_clocks sfp_refclk]"]
    return "\n".join(lines) + "\n"


class KR260Platform(XilinxPlatform):
    """Amaranth view of the PL pins (for standalone PL tests); the PS comes from the block design."""
    device = "xck26"
    package = "sfvc784"
    speed = "2LV-c"
    default_clk = "clk25"
    resources = [
        Resource("clk25", 0, Pins(PIN["clk25"].site, dir="i"), Clock(25e6),
                 Attrs(IOSTANDARD=PIN["clk25"].iostandard)),
        *(Resource("led", i, Pins(PIN[f"led{i}"].site, dir="o"), Attrs(IOSTANDARD=PIN[f"led{i}"].iostandard))
          for i in range(2)),
    ]
    connectors = []
