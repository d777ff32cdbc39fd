"""cocotb drivers for ``amaranth.lib.stream`` ports (``<name>__payload/valid/ready``) and
plain write ports (``<name>__en/addr/data``), with random pauses like cocotbext-axi's."""
from __future__ import annotations

from cocotb.triggers import ReadOnly, RisingEdge


class StreamSource:
    def __init__(self, dut, name, clk, pause=None):
        self.payload = getattr(dut, f"{name}__payload")
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.pause = clk, pause
        self.valid.value = 0

    async def send(self, items):
        for item in items:
            while self.pause is not None and next(self.pause):
                self.valid.value = 0
                await RisingEdge(self.clk)
            self.payload.value = item
            self.valid.value = 1
            while True:
                await ReadOnly()
                taken = bool(self.ready.value)
                await RisingEdge(self.clk)
                if taken:
                    break
            self.valid.value = 0


class StreamSink:
    def __init__(self, dut, name, clk, pause=None):
        self.payload = getattr(dut, f"{name}__payload")
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.clk, self.pause = clk, pause
        self.ready.value = 0

    async def recv(self, count):
        out = []
        while len(out) < count:
            self.ready.value = 0 if (self.pause is not None and next(self.pause)) else 1
            await ReadOnly()
            if self.valid.value and self.ready.value:
                out.append(int(self.payload.value))
            await RisingEdge(self.clk)
        self.ready.value = 0
        return out


async def write_port(dut, name, clk, writes):
    en, addr, data = (getattr(dut, f"{name}__{s}") for s in ("en", "addr", "data"))
    for a, d in writes:
        en.value, addr.value, data.value = 1, a, d
        await RisingEdge(clk)
    en.value = 0
