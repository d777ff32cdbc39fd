"""``mcf.hw.fast_meminit``: Amaranth's RTLIL of memories with the fast init writer is the
same, byte for byte, as Amaranth's own (zero, signed, wide, struct-shaped and one-bit contents)."""
from amaranth import Module, Signal, Value, signed
from amaranth.back import rtlil
from amaranth.lib import data, memory

from mcf.hw import fast_meminit


def _design():
    m = Module()
    mems = [
        memory.Memory(shape=256, depth=64, init=[]),                                   # zeros
        memory.Memory(shape=signed(13), depth=37, init=[-1, 5, -4096, 4095, 0, -7]),   # signed, partial
        memory.Memory(shape=72, depth=9, init=[(1 << 72) - 1 - k * 0x123456789 for k in range(9)]),
        memory.Memory(shape=data.ArrayLayout(signed(5), 3), depth=4, init=[[1, -2, 3], [-16, 15, 0]]),
        memory.Memory(shape=1, depth=5, init=[1, 0, 1, 1]),
    ]
    outs = []
    for k, mem in enumerate(mems):
        m.submodules[f"mem{k}"] = mem
        rp = mem.read_port()
        addr = Signal(range(mem.depth), name=f"addr{k}")
        out = Signal(len(Value.cast(rp.data)), name=f"out{k}")
        m.d.comb += [rp.addr.eq(addr), out.eq(rp.data)]
        outs += [addr, out]
    return m, outs


def test_fast_init_is_amaranths_rtlil():
    m, ports = _design()
    fast = rtlil.convert(m, ports=ports)
    fast_meminit.uninstall()
    try:
        m, ports = _design()
        slow = rtlil.convert(m, ports=ports)
    finally:
        fast_meminit.install()
    assert "$meminit_v2" in slow and fast == slow


def test_init_constant_bit_order():
    # row 0 in the low bits, MSB first in the text; negative rows in two's complement
    assert fast_meminit.init_constant(4, [1, -1, 0]) == "12'000011110001"
