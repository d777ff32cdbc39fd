"""What the NIC blocks share (hw/nic/common.py): payload beats and the last beat's TKEEP in the
Amaranth simulator against a direct computation, and layouts sized from the spec."""
import pytest
from amaranth import Module, Signal

from mcf import spec
from mcf.hw.nic.common import (ROUTE_WORD_BITS, BufferReadSignature, RouteLookupSignature, desc_layout,
                               last_keep, payload_beats)
from mcf.sim.amaranth_util import simulate


@pytest.mark.parametrize("width", [32, 64, 128])
def test_payload_beats_and_last_keep(width):
    nb = width // 8
    m = Module()
    length = Signal(spec.META["length"].width)
    beats = Signal(spec.META["length"].width)
    keep = Signal(nb)
    m.d.comb += [beats.eq(payload_beats(length, width)), keep.eq(last_keep(length, width))]
    cases = [0, 1, nb - 1, nb, nb + 1, 3 * nb, 1000, spec.MAX_PAYLOAD_BYTES]

    async def bench(ctx):
        for n in cases:
            ctx.set(length, n)
            await ctx.delay(1e-9)
            assert ctx.get(beats) == -(-n // nb), n
            tail = n % nb
            assert ctx.get(keep) == ((1 << nb) - 1 if tail == 0 else (1 << tail) - 1), n

    simulate(m, bench, clock=False)


def test_layouts_and_signatures():
    assert ROUTE_WORD_BITS == spec.ROUTE_ENTRY.total_bits
    assert RouteLookupSignature().members["addr"].shape == spec.packet.ROUTE_ID_BITS
    d = desc_layout(5, 64)
    assert d.size == spec.HEADER_BITS + 5 + 6 + 7          # meta, output mask, start, beats
    assert BufferReadSignature(64, 64).members["data"].shape.size == 64 + 8 + 1
