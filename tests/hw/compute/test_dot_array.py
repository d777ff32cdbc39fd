"""The MAC array's products (hw/compute/dot_array.py): the DSP48E2 packing of two INT4 x 16-bit products
is exact for every INT4 pair x the boundary 16-bit values, and Yosys maps it onto DSP48E2 slices."""
import itertools

import cocotb
import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from mcf.hw.compute.dot_array import CHAIN, PACK_SHIFT, ROUND, ROUND_JOINED, DotArray, pack_pair, split_pair
from mcf.hw.primitives import with_models
from mcf.sim.cocotb_util import params
from mcf.sim.runner import run_cocotb

INT4 = range(-8, 8)
#: The 16-bit boundaries: both ends, around zero, around the half-ranges.
EDGES = (-32768, -32767, -16385, -16384, -1, 0, 1, 16383, 16384, 32766, 32767)


def test_pack_arithmetic_exhaustive():
    """The integer identity behind the packing, every INT4 pair x boundary activation, and the
    worst chain sum: the low field of CHAIN products never leaves its signed 22-bit field (and,
    offset by ROUND, its split is wiring: ``split_round``)."""
    for lo, hi, a in itertools.product(INT4, INT4, EDGES):
        w = pack_pair(lo, hi)
        assert -(1 << 26) <= w < (1 << 26)                    # a 27-bit signed operand
        assert split_pair(w * a) == (lo * a, hi * a)
        assert split_pair(CHAIN * w * a) == (CHAIN * lo * a, CHAIN * hi * a)
        assert split_round(CHAIN * w * a + ROUND) == (CHAIN * lo * a, CHAIN * hi * a)
    assert CHAIN * 8 * 32768 < 1 << (PACK_SHIFT - 1)          # the chain bound
    assert 2 * CHAIN * 8 * 32768 >= 1 << (PACK_SHIFT - 1)     # twice the chain would not fit


def test_joined_pair_bounds():
    """A joined pair (2 CHAIN lanes in one field): its low sum reaches exactly 2^21 (every q = -8,
    every a = -32768), one past a signed 22-bit field, and its least is -2^21 + 64; offset by
    ROUND_JOINED = 2^21 - 1 it lies in [63, 2^22) for every pair of extreme lanes, so the split is
    still wiring (the high field one bit wider), and the pair's low field is one short of lo + 2^21."""
    n = 2 * CHAIN
    prods = sorted({q * a for q in INT4 for a in EDGES})
    lo_min, lo_max = n * prods[0], n * prods[-1]
    assert (lo_min, lo_max) == (-(1 << 21) + 64, 1 << 21)
    assert ROUND_JOINED == (1 << 21) - 1
    for lo, hi, a in itertools.product(INT4, INT4, EDGES):
        p = n * pack_pair(lo, hi) * a + ROUND_JOINED
        assert 0 <= (p & ((1 << PACK_SHIFT) - 1)) == n * lo * a + ROUND_JOINED < 1 << PACK_SHIFT
        assert p >> PACK_SHIFT == n * hi * a and -(1 << 22) <= n * hi * a < 1 << 22


def split_round(p):
    """The primitive array's split of P' = P + ROUND (a 48-bit two's complement word): the low
    field is P'[21:0] with bit 21 inverted, read as signed; the high field P' >> 22 (no borrow)."""
    p &= (1 << 48) - 1
    lo = (p & ((1 << PACK_SHIFT) - 1)) ^ (1 << (PACK_SHIFT - 1))
    lo -= (lo >> (PACK_SHIFT - 1)) << PACK_SHIFT
    hi = p >> PACK_SHIFT
    hi -= (hi >> (47 - PACK_SHIFT)) << (48 - PACK_SHIFT)
    return lo, hi


def vectors(rows, lanes, rng):
    """(q[rows, lanes], a[lanes]) test vectors: every INT4 pair (rows 2i, 2i+1) x every boundary
    activation on all lanes at once (the extreme chain sums), then random mixes of boundaries."""
    out = []
    for lo, hi, a in itertools.product(INT4, INT4, EDGES):
        q = np.empty((rows, lanes), dtype=np.int64)
        q[0::2], q[1::2] = lo, hi
        out.append((q, np.full(lanes, a, dtype=np.int64)))
    for _ in range(600):
        q = rng.integers(-8, 8, size=(rows, lanes))
        a = rng.choice(np.array(EDGES + (-12345, 23456)), size=lanes)
        out.append((q, a))
    return out


def encode(q, a):
    rows, lanes = q.shape
    w = sum((int(q[p, k]) & 0xF) << ((p * lanes + k) * 4) for p in range(rows) for k in range(lanes))
    av = sum((int(a[k]) & 0xFFFF) << (k * 16) for k in range(lanes))
    return w, av


def feed(items, i, early, loads=None, rng=None):
    """The ``w`` and ``a`` words of enabled cycle ``i``: item i's (``w_early``: item i's weights,
    item i - 1's activations); ``loads`` (``w_hold``): item i's weights only if it loads them,
    else random bits (the array must not read them)."""
    last = len(items) - 1
    w = encode(*items[min(i, last)])[0]
    if loads is not None and not (i <= last and loads[i]):
        bits = items[0][0].size * 4
        w = int.from_bytes(rng.bytes(bits // 8), "little")
    return w, encode(*items[min(max(i - early, 0), last)])[1]


def held(items, rng):
    """``w_hold``'s items: runs of 1 .. 4 consecutive items (a weight beat's tokens) share their
    first item's weights, which only that item loads; returns (items, loads)."""
    out, loads = [], []
    while len(out) < len(items):
        q = items[len(out)][0]
        for t in range(min(int(rng.integers(1, 5)), len(items) - len(out))):
            out.append((q, items[len(out)][1]))
            loads.append(t == 0)
    return out, loads


def run_dots(dut, items, stall_every=0, loads=None):
    """Feed ``items`` one per enabled cycle (``en`` low every ``stall_every``-th cycle; ``w_early``:
    the weights a cycle ahead; ``loads``: ``w_load`` and the items' weights only on the loading
    items, random bits and loads on disabled cycles); return the dots of each item, taken
    ``latency`` enabled cycles after its activations."""
    got = []
    early = int(dut.w_early)
    rng = np.random.default_rng(11)

    async def bench(ctx):
        fed, cycle, enabled = 0, 0, 0
        while len(got) < len(items):
            en = not (stall_every and cycle % stall_every == stall_every - 1)
            w, a = feed(items, fed, early, loads if en else [False] * len(items), rng)
            ctx.set(dut.w, w)
            ctx.set(dut.a, a)
            ctx.set(dut.en, en)
            if loads is not None:
                ctx.set(dut.w_load, loads[fed] if en and fed < len(loads) else (0 if en else int(rng.integers(0, 2))))
            await ctx.tick()
            cycle += 1
            if en:
                fed += 1
                enabled += 1
                if enabled >= dut.latency + early:
                    got.append([ctx.get(dut.dots[p]) for p in range(dut.rows)])

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got


@pytest.mark.parametrize("packed,stall,early,hold", [(True, 0, 0, 0), (True, 3, 0, 0), (False, 0, 0, 0),
                                                     (True, 3, 1, 0), (True, 3, 1, 1), (False, 3, 0, 1)])
def test_dots_exact(packed, stall, early, hold):
    """Packed (two products per multiplier) and unpacked arrays equal the exact sums q @ a for
    every INT4 pair x boundary activation; two chains per row (8 lanes: the low field of one
    8-lane chain would overflow on the all-extreme vector); ``en`` low freezes the pipeline;
    ``w_early`` takes the weights a cycle before their activations; ``w_hold`` reads a beat only
    when loaded (random bits on ``w`` otherwise) and keeps it for the items after it."""
    rows, lanes = 4, 8
    items = vectors(rows, lanes, np.random.default_rng(7))
    if stall:
        items = items[::4]
    loads = None
    if hold:
        items, loads = held(items, np.random.default_rng(3))
    dut = DotArray(rows, lanes, packed=packed, w_early=bool(early), w_hold=bool(hold))
    got = run_dots(dut, items, stall, loads)
    for i, ((q, a), dots) in enumerate(zip(items, got)):
        assert dots == [int(x) for x in q @ a], f"item {i}: q={q.tolist()} a={a.tolist()}"


def test_construction():
    d = DotArray(64, 32)
    assert (d.multipliers, d.latency, d.dot_width, d.lo_carry) == (1024, CHAIN + 2, 25, 0)
    j = DotArray(64, 32, primitive=True, joined=True)
    assert (j.multipliers, j.latency, j.chains, j.lo_carry) == (1024, CHAIN + 3, 4, 1)
    with pytest.raises(ValueError, match="joined chains need"):
        DotArray(2, 8, joined=True)
    with pytest.raises(ValueError, match="joined chains need"):
        DotArray(2, 12, primitive=True, joined=True)
    assert DotArray(64, 32, packed=False).multipliers == 2048
    with pytest.raises(ValueError, match="even number of rows"):
        DotArray(3, 4)
    with pytest.raises(ValueError, match="multiple of 4"):
        DotArray(2, 6)
    with pytest.raises(ValueError, match="packed products only"):
        DotArray(2, 4, packed=False, primitive=True)
    assert with_models("module x; endmodule") == "module x; endmodule"


def test_yosys_maps_packed_pairs_to_dsp48e2(tmp_path):
    """Yosys (synth_xilinx -family xcup, as `mcf synth` runs it) maps a 2 x 8 packed array onto
    exactly 8 DSP48E2 slices — one per lane for the two rows — and no multiplier is left in the
    fabric (a 27 x 16 soft multiplier alone is hundreds of LUTs).  Inferred, the chain adders and
    P registers stay in the fabric (Yosys 0.70 packs post-adders only into DSP48E1); as DSP48E2
    instances (``primitive``) the chain runs on PCOUT -> PCIN and the fabric keeps only the skew,
    the split and the sum of the two chains: less than half the LUTs and FFs."""
    from mcf.hw.registry import get
    from mcf.sw.commands.synth import count, synthesize
    info = get("compute_dot_array")
    res = {}
    for primitive in (0, 1):
        cells = synthesize(info.name, info.verilog(rows=2, lanes=8, packed=1, primitive=primitive),
                           tmp_path / str(primitive), timeout=600)
        res[primitive] = count(cells)
        assert res[primitive]["DSP"] == 8, cells
    assert res[0]["LUT"] < 60 * 8, res
    assert res[1]["LUT"] < res[0]["LUT"] / 2 and res[1]["FF"] < res[0]["FF"] / 2, res


@cocotb.test()
async def run_dots_model(dut):
    """The packed array on DSP48E2 instances (the model hw/compute/dsp48e2.v) under random ``en``
    pauses: every item's dots equal q @ a, taken ``latency`` enabled cycles after it went in."""
    p = params()
    rows, lanes, latency, early = p["rows"], p["lanes"], p["latency"], p["early"]
    short = [p["lo_carry"] * (1 - r % 2) for r in range(rows)]     # what the low rows' dots lack
    items = vectors(rows, lanes, np.random.default_rng(p["seed"]))[::p["stride"]]
    loads = None
    if p["hold"]:
        items, loads = held(items, np.random.default_rng(p["seed"] + 2))
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value, dut.en.value = 0, 0
    if loads is not None:
        dut.w_load.value = 0
    for _ in range(2):           # idle edges first: Icarus evaluates the design's combinational blocks
        await FallingEdge(dut.clk)
    rng = np.random.default_rng(p["seed"] + 1)
    fed = enabled = 0
    expect = []
    while len(expect) < len(items) + latency + early:
        en = int(rng.random() < 0.75)
        w, av = feed(items, fed, early, loads if en else [False] * len(items), rng)
        dut.w.value, dut.a.value, dut.en.value = w, av, en
        if loads is not None:
            dut.w_load.value = int(loads[fed]) if en and fed < len(loads) else (0 if en else int(rng.integers(0, 2)))
        await RisingEdge(dut.clk)
        await ReadOnly()
        if en:
            q, a = items[min(fed, len(items) - 1)]
            expect.append([int(x) - s for x, s in zip(q @ a, short)])
            fed, enabled = fed + 1, enabled + 1
            if enabled >= latency + early:
                i = enabled - latency - early
                width = (len(dut.dots) // rows)

                def words(port):
                    word = int(port.value)
                    got = [((word >> (r * width)) & ((1 << width) - 1)) for r in range(rows)]
                    return [g - (1 << width) if g >> (width - 1) else g for g in got]
                got = words(dut.dots)
                if p["split"]:              # (round 33) a row's dot is dots + dots_b
                    got = [x + y for x, y in zip(got, words(dut.dots_b))]
                assert got == expect[i], f"item {i}: q={items[i][0].tolist()} a={items[i][1].tolist()}"
        await FallingEdge(dut.clk)


@pytest.mark.cocotb
@pytest.mark.parametrize("early,hold,lanes,joined,split", [(0, 0, 8, 0, 0), (1, 0, 8, 0, 0), (1, 1, 8, 0, 0),
                                                          (1, 1, 16, 1, 0), (0, 0, 24, 1, 0), (1, 1, 32, 1, 1),
                                                          (1, 1, 16, 1, 1), (0, 0, 24, 1, 1), (1, 0, 16, 0, 1)])
def test_dots_on_dsp48e2_model(build_dir, early, hold, lanes, joined, split):
    """``primitive=True``: the same exhaustive vectors through DSP48E2 instances (the model
    hw/compute/dsp48e2.v, Icarus) equal the exact sums; ``w_early``: the packing on the slices'
    pre-adders, the weights a cycle before their activations; ``w_hold``: the slices' A2 / D / AD
    and the skew's registers hold a loaded beat (clock-enabled by the load), ``w`` random bits
    between loads.  ``joined``: chains in pairs (the first's P into the second's last slice, its C
    port), 8-lane fields (the all-extreme vectors reach the pair's corner, 2^21), two and three
    pairs a row (the low fields summed unsigned, and signed); the low rows' dots one short.  ``split``
    (round 33, the node's matrix): a row's last field sum on ``dots_b``, dots + dots_b the row's dot (two
    short with ``joined``): four, two and three pairs a row, and unjoined chains."""
    dut = DotArray(4, lanes, primitive=True, w_early=bool(early), w_hold=bool(hold), joined=bool(joined),
                   split=bool(split))
    build_dir.mkdir(parents=True)
    src = build_dir / "dut.v"
    src.write_text(with_models(verilog.convert(dut, name="dut")))
    run_cocotb(src, __name__, build_dir, testcase="run_dots_model",
               params={"rows": 4, "lanes": lanes, "latency": dut.latency, "seed": 5, "stride": 2, "early": early,
                       "hold": hold, "lo_carry": dut.lo_carry, "split": split})
