"""KV block writer: BFP16 K/V rows -> KV4 blocks (golden ``fixed.quantize_kv``), bit for bit.

A block is one (token, KV head) row of ``head_dim`` mantissas sharing one exponent; it arrives
as ``head_dim / lanes`` beats on ``i`` (``last`` on the final beat, ``exp`` on every beat)
and leaves as the same number of beats on ``o``: ``lanes`` INT4 values plus the block scale
(A, E) repeated on every beat.

    amax = max |mant|; t = amax * RCP7; Ep = bitlen(t) - 8; A = t >> Ep
    q = sat4(rshr(mant * KV_RCP_LUT[A - 128], 8 + Ep)); E = Ep - 16 + exp  (all zero: A = E = 0)

The block must be seen whole before its scale is known, so the writer buffers it (``lanes``
wide registers), then quantizes ``lanes`` values per cycle: 2 * beats + 2 cycles per block,
one ``lanes`` x (16 x 18) multiplier row.  Overlapping collection with emission (a second
buffer) would halve that; the projection feeding it produces a KV row every head_dim / rows
cycles anyway.
"""
from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from mcf.hw.arith import abs_, bitlen, rshr_pos, sat, write_indexed
from mcf.hw.compute.common import KVWriterState
from mcf.hw.registry import block
from mcf.spec.params import Range
from mcf.spec import fixed as fx
from mcf.spec.fixed import EXP_BITS, KV_A_BITS, MANT_BITS, W_BITS


def kv_in_layout(lanes):
    return data.StructLayout({"mant": lanes * MANT_BITS, "exp": signed(EXP_BITS), "last": 1})


def kv_out_layout(lanes):
    return data.StructLayout({"q": lanes * W_BITS, "a": KV_A_BITS, "e": signed(EXP_BITS), "last": 1})


class KVWriter(wiring.Component):
    def __init__(self, head_dim: int = 16, lanes: int = 4):
        if lanes < 1 or head_dim % lanes:
            raise ValueError(f"lanes={lanes} does not divide head_dim={head_dim}")
        self.head_dim, self.lanes = head_dim, lanes
        self.beats = head_dim // lanes
        super().__init__({
            "i": In(stream.Signature(kv_in_layout(lanes))),
            "o": Out(stream.Signature(kv_out_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        L, NB = self.lanes, self.beats
        buf_regs = [Signal(L * 16, name=f"buf{i}") for i in range(NB)]
        buf = Array(buf_regs)
        idx = Signal(range(NB))
        amax = Signal(17)
        exp = Signal(signed(8))

        m.submodules.rcp = rcp = memory.Memory(shape=18, depth=128, init=[int(v) for v in fx.KV_RCP_LUT])
        rd = rcp.read_port()

        # Running max of |mant| over the beat being accepted.
        beat_max = Signal(17)
        mags = [abs_(m, self.i.payload.mant[k * 16:(k + 1) * 16].as_signed()) for k in range(L)]
        cur = amax
        for k, mag in enumerate(mags):
            nxt = Signal(17, name=f"max{k}")
            m.d.comb += nxt.eq(Mux(mag > cur, mag, cur))
            cur = nxt
        m.d.comb += beat_max.eq(cur)

        # Scale: t = amax * RCP7, Ep = bitlen(t) - 8, A = t >> Ep.
        t = Signal(31)
        m.d.comb += t.eq(amax * fx.RCP7)
        ep = Signal(signed(6))
        m.d.comb += ep.eq(bitlen(m, t) - fx.KV_A_BITS)
        a = Signal(8)
        m.d.comb += a.eq(t >> ep.as_unsigned()[:5])
        a_r, ep_r, e_r, zero = Signal(8), Signal(5), Signal(signed(8)), Signal()
        m.d.comb += [rd.addr.eq(a - 128), rd.en.eq(1)]

        # Quantize one beat.
        qs = []
        for k in range(L):
            mk = buf[idx][k * 16:(k + 1) * 16].as_signed()
            prod = Signal(signed(35), name=f"prod{k}")
            m.d.comb += prod.eq(mk * rd.data)
            qs.append(sat(m, rshr_pos(m, prod, ep_r + 8, 36), 4))

        # Explicit state register (not m.FSM): outputs are plain comb functions of it, which
        # Icarus evaluates from time 0.
        collect, scale, emit = KVWriterState
        state = Signal(KVWriterState)
        in_collect, in_emit = Signal(), Signal()
        m.d.comb += [in_collect.eq(state == collect), in_emit.eq(state == emit)]
        m.d.comb += [
            self.i.ready.eq(in_collect),
            self.o.valid.eq(in_emit),
            self.o.payload.q.eq(Mux(zero, 0, Cat(*[q[:4] for q in qs]))),
            self.o.payload.a.eq(Mux(zero, 0, a_r)),
            self.o.payload.e.eq(Mux(zero, 0, e_r)),
            self.o.payload.last.eq(idx == NB - 1),
        ]
        with m.If(in_collect & self.i.valid):
            write_indexed(m, buf_regs, idx, self.i.payload.mant)
            m.d.sync += [amax.eq(beat_max),
                         exp.eq(self.i.payload.exp), idx.eq(idx + 1)]
            with m.If(self.i.payload.last | (idx == NB - 1)):
                m.d.sync += [idx.eq(0), state.eq(scale)]
        with m.If(state == scale):      # the LUT read (addressed by A) lands next cycle
            m.d.sync += [a_r.eq(a), ep_r.eq(ep.as_unsigned()[:5]), zero.eq(amax == 0),
                         e_r.eq(ep - 16 + exp), state.eq(emit)]
        with m.If(in_emit & self.o.ready):
            m.d.sync += idx.eq(idx + 1)
            with m.If(idx == NB - 1):
                m.d.sync += [idx.eq(0), amax.eq(0), state.eq(collect)]
        return m


@block("compute_kv_writer", "BFP16 K/V rows -> INT4 KV blocks with per-block scale",
       variants=({"head_dim": 128, "lanes": 16},), head_dim=16, lanes=4,
       ranges={"head_dim": Range(1, 1024), "lanes": Range(1, 256)})
def _kv_writer(head_dim, lanes):
    return KVWriter(head_dim, lanes)
