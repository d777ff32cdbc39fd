"""The one stream-driving loop of the Amaranth-simulator benches (``amaranth.sim``, async
testbenches).

Per cycle: every ``Feed`` presents its current item (``valid`` high while items remain), the
combinational logic settles, the bench samples what it wants (``sample``; return True to stop
after this cycle), the clock ticks, and every feed whose ``ready`` was high moves to its next
item.  Ports may be ``amaranth.lib.stream`` (``valid``/``payload``/``ready``) or AXI-Stream
(``tvalid``/``tdata``/``tready``) interfaces: ``Feed.of(port, items)`` picks the members.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from amaranth.sim import Simulator


@dataclass
class Feed:
    """One input stream.  ``also``: further ``(valid, data, items)`` that move with this one
    (operands a unit consumes together, advanced by this feed's ``ready``)."""
    valid: object
    ready: object
    data: object
    items: list
    also: tuple = ()
    index: int = field(default=0, init=False)

    @classmethod
    def of(cls, port, items, *, raw: bool = False, also: tuple = ()) -> "Feed":
        """A feed on a stream or AXI-Stream port; ``raw`` drives a layout payload as bits."""
        if hasattr(port, "tvalid"):
            return cls(port.tvalid, port.tready, port.tdata, list(items), also)
        data = port.payload.as_value() if raw else port.payload
        return cls(port.valid, port.ready, data, list(items), also)

    @property
    def pending(self) -> bool:
        return self.index < len(self.items)

    def present(self, ctx) -> None:
        for valid, data, items in ((self.valid, self.data, self.items), *self.also):
            ctx.set(valid, self.index < len(items))
            if items:
                ctx.set(data, items[min(self.index, len(items) - 1)])

    def stop(self, ctx) -> None:
        for valid, _, _ in ((self.valid, None, None), *self.also):
            ctx.set(valid, 0)


async def drive(ctx, feeds: list[Feed], sample, max_cycles: int) -> int:
    """Run the per-cycle loop until ``sample(ctx)`` returns True (checked before the tick of
    that cycle) or ``max_cycles`` pass; returns the cycles run.  Leaves every feed idle."""
    cycles = 0
    for _ in range(max_cycles):
        for f in feeds:
            f.present(ctx)
        await ctx.delay(1e-9)
        taken = [bool(ctx.get(f.ready)) and f.pending for f in feeds]
        done = sample(ctx)
        await ctx.tick()
        cycles += 1
        for f, t in zip(feeds, taken):
            f.index += t
        if done:
            break
    for f in feeds:
        f.stop(ctx)
    return cycles


async def write_port(ctx, port, writes) -> None:
    """``(addr, data)`` pairs through a plain write port (``en``/``addr``/``data``)."""
    for a, d in writes:
        ctx.set(port.en, 1)
        ctx.set(port.addr, a)
        ctx.set(port.data, d)
        await ctx.tick()
    ctx.set(port.en, 0)


async def send_command(ctx, port, payload) -> None:
    """One command beat on a stream the unit takes while idle (valid for one cycle)."""
    ctx.set(port.payload, payload)
    ctx.set(port.valid, 1)
    await ctx.tick()
    ctx.set(port.valid, 0)


def simulate(dut, bench, clock: bool = True) -> None:
    """Run ``bench(ctx)`` as the testbench of ``dut`` (with a 100 MHz clock unless told not)."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
