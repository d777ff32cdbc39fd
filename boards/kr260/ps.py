"""What the PS side needs to know about the KR260 design, in pure Python (no Amaranth: this
module runs on the board, Python 3.10): the PL clock the PS makes (``NodeConfig``'s clock, the
one constant ``mcf.spec.node.PL_CLOCK_HZ``, and its PS divisor), where the node's registers and
interrupt are.

The PL clock comes from the PS: pl_clk0 = IOPLL (1500 MHz) / n, so only 1500/n MHz exists
(n = 5 gives 300 MHz, n = 6 gives 250 MHz, n = 8 gives 187.5 MHz; "200 MHz" would be 187.5).
``ps_clock_divisor`` refuses every other rate with a one-line error.
"""
from __future__ import annotations

from mcf.spec.node import PL_CLOCK_HZ  # noqa: F401  (the one constant: NodeConfig's clock)
from mcf.spec.regmap import ADDR_BITS
from mcf.sw.driver.fpga import DESIGN, FIRMWARE_DIR, FPGA_MANAGER  # noqa: F401  (re-exported)

#: The PS PLL that feeds the PL clocks (IOPLL), nominally; the Kria preset runs it at 1499.985 MHz.
PS_PLL_HZ = 1_500_000_000
#: Fastest pl_clk the PS can drive into the PL (Zynq UltraScale+ data sheet, -2 speed grade).
PL_CLOCK_MAX_HZ = 333_333_333
#: The PL reference clock dividers (PL0_REF_CTRL DIVISOR0/1) are 6 bits each.
_DIV_MAX = 63

#: Where the block design puts the node's registers (first slave on M_AXI_HPM0_FPD).
REGS_BASE = 0xA000_0000
REGS_SIZE = 1 << ADDR_BITS
#: The node's interrupt: pl_ps_irq0[0] is GIC SPI 89 on Zynq UltraScale+.
IRQ_SPI = 89


def ps_clock_divisor(hz: int) -> tuple[int, int]:
    """(DIVISOR0, DIVISOR1) that make ``hz`` from the PS PLL; ValueError (one line) otherwise."""
    hz = int(hz)
    if hz > PL_CLOCK_MAX_HZ:
        raise ValueError(f"PL clock {hz / 1e6:g} MHz: above the PS's {PL_CLOCK_MAX_HZ / 1e6:.0f} MHz "
                         f"limit for pl_clk0 (use n >= 5: {PS_PLL_HZ / 5 / 1e6:g} MHz)")
    if hz <= 0 or PS_PLL_HZ % hz:
        n = max(1, PS_PLL_HZ // max(hz, 1))
        lo, hi = PS_PLL_HZ / (n + 1) / 1e6, PS_PLL_HZ / n / 1e6
        raise ValueError(f"PL clock {hz / 1e6:g} MHz: the PS makes only {PS_PLL_HZ / 1e6:g}/n MHz; "
                         f"nearest {lo:g} MHz (n={n + 1}) or {hi:g} MHz (n={n})")
    n = PS_PLL_HZ // hz
    for d0 in range(1, _DIV_MAX + 1):
        if n % d0 == 0 and n // d0 <= _DIV_MAX:
            return d0, n // d0
    raise ValueError(f"PL clock {hz / 1e6:g} MHz: divisor {n} is not a product of two 6-bit dividers")
