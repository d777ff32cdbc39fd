"""KV block writer (hw/compute/kv_writer.py): construction, an Amaranth-simulator test and the
cocotb bench with its pytest runner, against ``fixed.quantize_kv`` (random pauses on both
streams)."""
import cocotb
import numpy as np
import pytest

from mcf.hw.compute.kv_writer import KVWriter
from mcf.sim.cocotb_util import StreamSink, StreamSource, bounded, params, pauses, start
from mcf.sim.compute.drive import run_kv_writer
from mcf.sim.compute.jobs import kv_blocks
from mcf.sim.runner import run_cocotb


@cocotb.test()
async def run_quantize(dut):
    p = params()
    seed = p.get("seed", 1)
    beats_in, expected = kv_blocks(np.random.default_rng(seed), p["blocks"], p["head_dim"], p["lanes"])
    src = StreamSource(dut, "i", dut.clk, pauses(seed + 1))
    sink = StreamSink(dut, "o", dut.clk, pauses(seed + 2))
    await start(dut)
    cocotb.start_soon(src.send(beats_in))
    got = await bounded(sink.recv(len(expected)), 40 * len(expected) * 10 + 5000, "KV blocks")
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a == b, f"beat {i}: got {a:#x} expected {b:#x}"


def test_construction():
    w = KVWriter(head_dim=128, lanes=16)
    assert w.beats == 8 and len(w.o.payload.q) == 64
    with pytest.raises(ValueError):
        KVWriter(head_dim=16, lanes=3)


def test_quantize_amaranth_sim():
    rng = np.random.default_rng(3)
    dut = KVWriter(head_dim=16, lanes=4)
    beats_in, expected = kv_blocks(rng, 6, 16, 4)
    assert run_kv_writer(dut, beats_in, 6) == expected


@pytest.mark.cocotb
@pytest.mark.parametrize("head_dim,lanes,primitive", [(16, 4, False), (16, 16, False), (32, 16, True)])
def test_quantize_cocotb(build_dir, head_dim, lanes, primitive):
    """Against the golden quantizer; ``primitive`` (round 32): the node's build, its maxima on LUT6_2 compares
    (``greater``) and 4:1 LUT6 picks (the four groups of four lanes and the beat's four groups)."""
    run_cocotb(KVWriter(head_dim, lanes, primitive=primitive), __name__, build_dir,
               testcase="run_quantize", params={"head_dim": head_dim, "lanes": lanes, "blocks": 40})


def test_every_scale_exponent_and_the_block_rate():
    """Blocks whose amax takes every bit length (1 .. 32768: every Ep) and signs, back to back
    on always-ready streams: bit-exact, and one block every ``beats + 4`` cycles (collect, four
    max stages) with the first output 12 cycles after the last input beat of the first block
    (the pipelined writer's rate and latency, docs in kv_writer.py)."""
    from mcf.sim.amaranth_util import Feed, drive, simulate
    from mcf.sim.compute.jobs import kv_beats
    rng = np.random.default_rng(7)
    d, lanes = 16, 4
    rows = []
    for k in range(16):
        for amax in sorted({1 << k, (1 << (k + 1)) - 1} - {1 << 15, (1 << 16) - 1} | ({32767} if k == 15 else set())):
            row = rng.integers(-amax, amax + 1, d)
            row[rng.integers(d)] = amax * rng.choice([-1, 1])
            rows.append(row)
    rows.append(np.full(d, -32768))
    m = np.array(rows, dtype=np.int64)
    e = rng.integers(-20, 20, len(rows))
    beats_in, expected = kv_beats(m, e, lanes)
    dut = KVWriter(head_dim=d, lanes=lanes)
    got, when = [], []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = [0]

        def sample(ctx):
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload.as_value()))
                when.append(cycle[0])
            cycle[0] += 1
            return len(got) == len(expected)

        await drive(ctx, [Feed.of(dut.i, beats_in, raw=True)], sample, 20 * len(expected))

    simulate(dut, bench)
    assert got == expected
    nb = dut.beats
    assert when[0] == (nb - 1) + 12
    starts = when[::nb]
    assert all(b - a == nb + 4 for a, b in zip(starts, starts[1:]))
    assert all(when[i + 1] == when[i] + 1 for i in range(len(when) - 1) if (i + 1) % nb)


def test_quantiser_window_covers_every_scale():
    """The quantiser keeps SHD_BITS bits of mant * rcp >> (7 + Ep) and no 4-bit clamp: for every
    amax (1 .. 32768) and its extreme mantissas +-amax (the floor shift is monotonic in mant),
    the golden scale's shifted product fits SHD_BITS signed bits and its rounding lies in [-7, 7],
    and Ep spans EP_MIN .. EP_MAX (the window's 16 places)."""
    from mcf.hw.compute.kv_writer import EP_MAX, EP_MIN, SHD_BITS
    from mcf.spec import fixed as fx
    from mcf.sw.golden.fixed import bitlen
    amax = np.arange(1, 32769, dtype=np.int64)
    t = amax * fx.RCP7
    ep = bitlen(t) - fx.KV_A_BITS
    rcp = fx.KV_RCP_LUT[(t >> ep) - 128]
    s = 7 + ep
    hi = (np.minimum(amax, 32767) * rcp) >> s
    lo = (-amax * rcp) >> s
    assert (ep.min(), ep.max()) == (EP_MIN, EP_MAX)
    assert lo.min() >= -(1 << (SHD_BITS - 1)) and hi.max() < (1 << (SHD_BITS - 1))
    assert ((lo + 1) >> 1).min() >= -7 and ((hi + 1) >> 1).max() <= 7
