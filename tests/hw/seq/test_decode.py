"""The instruction decoder (hw/seq/decode.py) in the Amaranth simulator: every opcode's queue,
END and SYNC flags, and the refusals (unknown opcode, reserved bits, enum values out of range,
local semaphores beyond this build, DDR addresses beyond its address bits, zero counts/lengths),
each expectation from ``spec.isa``."""
from amaranth.sim import Simulator

from mcf.hw.seq.decode import Decoder
from mcf.spec.isa import (INSTR_BYTES, QUEUE_OF, Credit, End, Load, Opcode, Queue, Recv, Send, Sync,
                          encode_program)
from mcf.spec import Collective, Op, ReduceOp, Stage


def word(ins) -> int:
    return int.from_bytes(encode_program([ins]), "little")


def decode(words, num_sems=16, ddr_addr_bits=24):
    dut = Decoder(num_sems, ddr_addr_bits)
    out = []

    async def bench(ctx):
        for w in words:
            ctx.set(dut.word, w)
            await ctx.delay(1e-9)
            out.append({k: ctx.get(getattr(dut, k)) for k in ("queue", "end", "sync", "illegal")})

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return out


def send(**kw):
    base = dict(stage=Stage.PREFILL, mop=Op.KV_FETCH, collective=Collective.UNICAST, reduce_op=ReduceOp.NONE,
                dst=1, route_id=1, seq=0, ddr=0x40, length=100, tag=3)
    return Send(**{**base, **kw})


def test_queues_and_flags():
    prog = [End(), Sync(on=Queue.TX), Sync(on=Queue.RX), Load(ddr=64, spad=0, beats=1, row_beats=0), send(),
            Credit(dst=1, route_id=1, sem=2, count=1),
            Recv(tag=1, ddr=128, length=64, done_sem=3, credit=0, credit_dst=0, credit_route=0, credit_sem=0)]
    got = decode([word(i) for i in prog])
    assert [g["illegal"] for g in got] == [0] * len(prog)
    assert [g["queue"] for g in got] == [Queue.EX, Queue.TX, Queue.RX, Queue.EX, Queue.TX, Queue.TX, Queue.RX]
    assert [QUEUE_OF[i.OPCODE] for i in prog if i.OPCODE != Opcode.SYNC] == \
        [Queue(g["queue"]) for g, i in zip(got, prog) if i.OPCODE != Opcode.SYNC]
    assert [g["end"] for g in got] == [1, 0, 0, 0, 0, 0, 0]
    assert [g["sync"] for g in got] == [0, 1, 1, 0, 0, 0, 0]


def test_refusals():
    unknown = max(int(o) for o in Opcode) + 1
    reserved = word(End()) | (1 << (8 * INSTR_BYTES - 1))
    bad = [
        unknown,                                                    # no such opcode
        reserved,                                                   # a reserved bit set
        word(Sync(on=Queue.EX, wait_sem=16, wait_cnt=1)),           # semaphore beyond num_sems = 16
        word(Load(ddr=1 << 24, spad=0, beats=1, row_beats=0)),      # DDR beyond 24 address bits
        word(Credit(dst=1, route_id=1, sem=2, count=0)),            # CREDIT of nothing
        word(Recv(tag=1, ddr=128, length=0, done_sem=3, credit=0, credit_dst=0, credit_route=0, credit_sem=0)),
    ]
    assert [g["illegal"] for g in decode(bad)] == [1] * len(bad)
    good = [word(Sync(on=Queue.EX, wait_sem=15, wait_cnt=1)), word(Load(ddr=(1 << 24) - 64, spad=0, beats=1,
                                                                        row_beats=0))]
    assert [g["illegal"] for g in decode(good)] == [0, 0]
