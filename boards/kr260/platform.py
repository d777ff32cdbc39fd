"""The KR260 as an Amaranth platform (PL pins only; the PS comes from the Vivado block design).

Pin facts: K26 SOM (XCK26-SFVC784-2LV-C) on the KR260 carrier, per the carrier's schematic
and the SOM240 connector pinout; the SFP+ cage is wired to a GTH lane with a 156.25 MHz
reference clock.  Amaranth's ``XilinxPlatform`` knows the part but has no PS8 support, so
the bitstream flow (``vivado.py``) builds a block design around our Verilog instead of using
``platform.build``; this class serves pin/constraint generation and standalone PL tests.
"""
from __future__ import annotations

from amaranth.build import Attrs, Clock, Pins, Resource
from amaranth.vendor import XilinxPlatform

from mcf.spec.node import PL_CLOCK_HZ   # the node's PL clock (pl_clk0), defined once in the spec

#: The SoC part, as Vivado spells it.
PART = "xck26-sfvc784-2LV-c"


class KR260Platform(XilinxPlatform):
    device = "xck26"
    package = "sfvc784"
    speed = "2LV-c"
    default_clk = "clk25"
    resources = [
        # 25 MHz oscillator into the PL (HPA_CLK0P, SOM240_1 A6).
        Resource("clk25", 0, Pins("C3", dir="i"), Clock(25e6), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("led", 0, Pins("F8", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
        Resource("led", 1, Pins("E8", dir="o"), Attrs(IOSTANDARD="LVCMOS18")),
    ]
    connectors = []

    #: The SFP+ cage is wired to a GTH lane (RX T2/T1, TX R4/R3: dedicated pins placed by the
    #: transceiver's location, not by IO buffers), so it is not an Amaranth resource; the
    #: block design's 10G MAC takes these constraints for its reference clock and TX_DISABLE.
    SFP_XDC = """\
# SFP+ port 0 (KR260 carrier): GTH reference clock and TX disable
set_property PACKAGE_PIN Y6 [get_ports sfp_refclk_clk_p]
create_clock -period 6.400 -name sfp_refclk [get_ports sfp_refclk_clk_p]
set_property -dict {PACKAGE_PIN Y10 IOSTANDARD LVCMOS18} [get_ports sfp0_tx_disable]
"""
