"""NIC egress (hw/nic/egress.py): the round-robin arbiter against a Python model over every
request pattern, and construction (the NIC bench in test_nic.py runs the port itself)."""
import itertools

import pytest
from amaranth import Module, Signal

from mcf.hw.nic.egress import EgressPort, round_robin
from mcf.sim.amaranth_util import simulate


@pytest.mark.parametrize("n", [1, 3, 4])
def test_round_robin_grants_the_next_requester(n):
    m = Module()
    req, last = Signal(n), Signal(range(n))
    grant, found = round_robin(m, req, last, n)

    async def bench(ctx):
        for r, l in itertools.product(range(1 << n), range(n)):
            ctx.set(req, r); ctx.set(last, l)
            await ctx.delay(1e-9)
            order = [(l + 1 + k) % n for k in range(n)]
            want = next((i for i in order if r >> i & 1), None)
            assert bool(ctx.get(found)) == (want is not None), (r, l)
            if want is not None:
                assert ctx.get(grant) == want, (r, l)

    simulate(m, bench, clock=False)


def test_construction():
    eg = EgressPort(64, n_in=4, n_out=5, depth=64)
    assert len(eg.rd) == len(eg.heads) == 4 and len(eg.o.tdata) == 64 and eg.hb == 2
