"""Backend: cocotbext-axi ``AxiLiteMaster`` in a running cocotb simulation."""
from __future__ import annotations

from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_time
from cocotbext.axi.constants import AxiResp

from .core import BusError


class CocotbBackend:
    """The driver's waits run on simulated time here: ``now()`` is the simulator's clock in
    seconds and a wait without progress gives up after ``default_timeout_s`` (1 ms: 100 000
    cycles of the benches' 100 MHz clock) unless the driver says otherwise."""

    default_timeout_s = 1e-3

    def __init__(self, master, clock, base: int = 0, poll_cycles: int = 8):
        self.master, self.clock, self.base, self.poll_cycles = master, clock, base, poll_cycles

    @staticmethod
    def now() -> float:
        return get_sim_time("sec")

    async def read32(self, offset: int) -> int:
        resp = await self.master.read(self.base + offset, 4)
        if resp.resp != AxiResp.OKAY:
            raise BusError(f"read of {offset:#06x} answered {AxiResp(resp.resp).name}")
        return int.from_bytes(resp.data, "little")

    async def write32(self, offset: int, value: int) -> None:
        resp = await self.master.write(self.base + offset, value.to_bytes(4, "little"))
        if resp.resp != AxiResp.OKAY:
            raise BusError(f"write of {offset:#06x} answered {AxiResp(resp.resp).name}")

    async def pause(self) -> None:
        await ClockCycles(self.clock, self.poll_cycles)
