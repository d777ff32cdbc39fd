"""The AXI4-Stream signature (hw/axis.py): members and widths, equality, refused widths."""
import pytest

from mcf.hw.axis import AXIStreamSignature
from mcf.spec import SpecError


@pytest.mark.parametrize("width", [32, 64, 128, 512])
def test_members(width):
    m = AXIStreamSignature(width).members
    assert {n: m[n].shape for n in m} == {"tdata": width, "tkeep": width // 8, "tlast": 1, "tvalid": 1,
                                          "tready": 1}
    assert AXIStreamSignature(width) == AXIStreamSignature(width)


@pytest.mark.parametrize("width", [16, 48, 100])
def test_bad_width(width):
    with pytest.raises(SpecError, match=f"^data_width={width}: must be a power of two >= 32$"):
        AXIStreamSignature(width)


def test_register_stage():
    """AxisRegister under random valid / ready: every beat once, in order, a cycle after it was
    taken; ``i.tready`` the same whatever ``o.tready`` is in that cycle (a register); a beat a
    cycle with ready always high."""
    import random

    from mcf.hw.axis import AxisRegister
    from mcf.sim.amaranth_util import simulate
    dut = AxisRegister(32)
    rng = random.Random(7)
    beats = [(rng.getrandbits(32), rng.getrandbits(4), rng.getrandbits(1)) for _ in range(600)]
    got, taken_at, out_at = [], [], []

    async def bench(ctx):
        k = 0
        for cyc in range(3000):
            p_in, p_out = (1.0, 1.0) if cyc < 200 else (0.7, 0.6)
            give = k < len(beats) and rng.random() < p_in
            ctx.set(dut.i.tvalid, give)
            if k < len(beats):
                d, kp, last = beats[k]
                ctx.set(dut.i.tdata, d)
                ctx.set(dut.i.tkeep, kp)
                ctx.set(dut.i.tlast, last)
            r = []
            for ready in (0, 1):
                ctx.set(dut.o.tready, ready)
                await ctx.delay(1e-9)
                r.append(ctx.get(dut.i.tready))
            assert r[0] == r[1], f"cycle {cyc}: i.tready follows o.tready"
            ready = rng.random() < p_out
            ctx.set(dut.o.tready, ready)
            await ctx.delay(1e-9)
            if ctx.get(dut.o.tvalid) and ready:
                got.append((ctx.get(dut.o.tdata), ctx.get(dut.o.tkeep), ctx.get(dut.o.tlast)))
                out_at.append(cyc)
            if give and ctx.get(dut.i.tready):
                taken_at.append(cyc)
                k += 1
            await ctx.tick()
            if len(got) == len(beats):
                break

    simulate(dut, bench)
    assert got == beats
    assert out_at[0] == taken_at[0] + 1
    assert out_at[:150] == [c + 1 for c in taken_at[:150]]     # ready always high: no bubble


def test_skid_register_primitive_equals_the_plain_build(tmp_path):
    """Round 33: ``skid_register(primitive=True)`` (the output register's choice two bits a LUT6_2, the node's
    AXI-Stream register stages) against the plain build in Icarus (hw/lut6.v's model), every cycle: random
    input valid and output ready (stalls fill the skid), random beats of an odd width (the last bit's plain
    choice); its output beat, valid and input ready compared."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from amaranth import Cat, Signal
    from mcf.hw.axis import skid_register
    from tests.hw.test_lut import _Pair, _run
    w = 13

    def build(m, stim, primitive):
        tag = "p" if primitive else "q"
        i_ready, o_valid, o_beat = Signal(name=f"ir{tag}"), Signal(name=f"ov{tag}"), Signal(w, name=f"ob{tag}")
        skid_register(m, stim[0], i_ready, stim[2:2 + w], o_valid, stim[1], o_beat, f"s{tag}_", primitive)
        return Cat(o_beat, o_valid, i_ready), o_valid & stim[1]
    bad, fires = _run(tmp_path, _Pair(2 + w, build))
    assert bad == 0 and fires > 0
