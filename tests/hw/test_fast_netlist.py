"""``mcf.hw.fast_netlist``: Amaranth's RTLIL with the fast netlist helpers is the same, byte for
byte, as Amaranth's own (operators, variable slices, switches, an FSM, memories, a registered
block of the registry), and a combinational loop raises Amaranth's own error with the same path."""
import pytest
from amaranth import Module, Signal, signed
from amaranth.back import rtlil
from amaranth.hdl import _nir
from amaranth.lib import memory

from mcf.hw import fast_netlist, registry


def _design():
    m = Module()
    a, b = Signal(12, name="a"), Signal(signed(9), name="b")
    sel = Signal(3, name="sel")
    out = [Signal(16, name=f"out{k}") for k in range(6)]
    m.d.comb += [out[0].eq(a + b), out[1].eq((a & 0x0f0) | ~b), out[2].eq(a.bit_select(sel, 5)),
                 out[3].eq((a * b)[3:19])]
    with m.Switch(sel):
        with m.Case(0, 3):
            m.d.comb += out[4].eq(a[2:9])
        with m.Case("1-1"):
            m.d.comb += out[4][4:12].eq(b)
        with m.Default():
            m.d.comb += out[4].eq(Signal(16, name="n", init=0x1234))
    with m.FSM():
        with m.State("IDLE"):
            with m.If(a[0]):
                m.d.sync += out[5].eq(b)
                m.next = "RUN"
        with m.State("RUN"):
            m.d.sync += out[5].eq(out[5] + 1)
            with m.If(out[5] == 7):
                m.next = "IDLE"
    m.submodules.mem = mem = memory.Memory(shape=8, depth=16, init=[3, 1, 4, 1, 5])
    rd, rs = mem.read_port(domain="comb"), mem.read_port()
    wr = mem.write_port()
    extra = Signal(8, name="extra")
    m.d.comb += [rd.addr.eq(sel), rs.addr.eq(a), wr.addr.eq(sel), wr.data.eq(b), wr.en.eq(a[1]),
                 extra.eq(rd.data ^ rs.data)]
    return m, [a, b, sel, *out, extra]


def _both(make):
    fast = make()
    fast_netlist.uninstall()
    try:
        slow = make()
    finally:
        fast_netlist.install()
    return fast, slow


def test_fast_netlist_is_amaranths_rtlil():
    def convert():
        m, ports = _design()
        return rtlil.convert(m, ports=ports)
    fast, slow = _both(convert)
    assert fast == slow
    assert all(f"cell ${c} " in fast for c in ("shift", "dff", "memrd_v2", "meminit_v2", "mul", "eq"))


def test_a_registry_block_is_the_same():
    info = registry.get("header_serializer")
    fast, slow = _both(lambda: rtlil.convert(info.build(), name="header_serializer"))
    assert fast == slow


def _loop_operators():
    m = Module()
    x, y, z = Signal(4, name="x"), Signal(4, name="y"), Signal(4, name="z")
    m.d.comb += [x.eq(y + z), y.eq(x ^ 1)]
    return m, [z]


def _loop_switch_and_slice():
    """Through an assignment list (``m.If``) and a variable slice: per-bit and shared sources."""
    m = Module()
    x, y, z = Signal(8, name="x"), Signal(8, name="y"), Signal(3, name="z")
    with m.If(z[0]):
        m.d.comb += x[2:6].eq(z)
    with m.Else():
        m.d.comb += x.eq(y.bit_select(z, 8))
    m.d.comb += y.eq(Signal(8, name="w") | x)
    return m, [z]


@pytest.mark.parametrize("design", [_loop_operators, _loop_switch_and_slice])
def test_a_combinational_loop_is_amaranths_error(design):
    def message():
        with pytest.raises(_nir.CombinationalCycle) as info:
            m, ports = design()
            rtlil.convert(m, ports=ports)
        return str(info.value)
    fast, slow = _both(message)
    assert fast == slow and "signal x" in fast and "signal y" in fast


def test_values_hold_nets_only():
    assert _nir.Value([_nir.Net.from_const(1), _nir.Net.from_cell(3, 2)]) == (1, (3 << 16) | 2)
    assert _nir.Value.from_const(5, 4) == (1, 0, 1, 0)
    assert type(_nir.Value.from_const(5, 4)[1:3]) is _nir.Value
    with pytest.raises(AssertionError):
        _nir.Value([_nir.Net.from_const(1), 7])
