"""Register block (hw/csr/registers.py): construction, an Amaranth-simulator unit test, and the
cocotb benches with their pytest runner.

The benches drive the block through the PS driver (``mcf.sw.driver``) over cocotbext-axi
``AxiLiteMaster``, random delays on all five AXI-Lite channels.  Expectations come from the
spec (field masks, access kinds, ErrorCause) and from bench-side models (the NIC's route
table, the strobes the bench drives), never from the RTL.
"""
import random

import cocotb
import pytest
from amaranth.sim import Simulator
from cocotb.triggers import ClockCycles, FallingEdge, Timer
from cocotbext.axi import AxiLiteBus, AxiLiteMaster
from cocotbext.axi.constants import AxiResp

from mcf import spec
from mcf.hw.csr import ControlRegisters
from mcf.sim.cocotb_util import bounded, params, pauses, refused, start
from mcf.sim.runner import run_cocotb
from mcf.spec import REGISTERS, Access, DmaDir, ErrorCause, Irq, LinkStatus
from mcf.spec.regmap import ID_VALUE, SEQ_WINDOW
from mcf.sw.driver import BusError, CocotbBackend, Descriptor, Driver, DriverTimeout

#: The registers a block built without a sequencer decodes (the SEQ window answers SLVERR).
LOCAL = [r for r in REGISTERS if r.offset not in SEQ_WINDOW]
ROUTE_GARBAGE = 0xDEADBEEF
TIMEOUT_NS = 2_000_000


async def setup(dut, seed: int, max_polls: int = 1000):
    # Reset asserted before the first clock edge: no edge may sample undriven (X) inputs.
    dut.rst.value = 1
    await Timer(1, "ns")
    master = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
    for i, ch in enumerate([master.write_if.aw_channel, master.write_if.w_channel, master.write_if.b_channel,
                            master.read_if.ar_channel, master.read_if.r_channel]):
        ch.set_pause_generator(pauses(seed + i, 0.4))
    dut.errors.value = 0
    dut.busy.value = 0
    dut.desc_done.value = 0
    dut.desc_done_tag.value = 0
    dut.rx_packet.value = 0
    dut.meta__ready.value = 0
    dut.desc__ready.value = 0
    dut.route__r_data.value = ROUTE_GARBAGE
    dut.eth__status.value = 0
    dut.eth__seq_missing.value = 0
    await start(dut)
    return master, Driver(CocotbBackend(master, dut.clk), max_polls=max_polls)


def route_table_model(dut, table: dict):
    """The NIC's side of RouteTablePort: a synchronous memory (data the cycle after r_en,
    garbage otherwise, so a CSR that samples at the wrong time reads garbage)."""
    async def run():
        pending = None
        while True:
            await FallingEdge(dut.clk)
            dut.route__r_data.value = table.get(pending, 0) if pending is not None else ROUTE_GARBAGE
            addr = dut.route__addr.value.to_unsigned()
            pending = addr if dut.route__r_en.value else None
            if dut.route__w_en.value:
                table[addr] = dut.route__w_data.value.to_unsigned()
    return cocotb.start_soon(run())


def stream_sink(dut, name: str, out: list, rng: random.Random, ready_p: float = 0.6):
    """Take beats of stream ``name`` with random ready; ``out`` gets the payloads."""
    valid, ready, payload = (getattr(dut, f"{name}__{s}") for s in ("valid", "ready", "payload"))

    async def run():
        while True:
            await FallingEdge(dut.clk)
            r = int(rng.random() < ready_p)
            ready.value = r
            if r and valid.value:
                out.append(payload.value.to_unsigned())
    return cocotb.start_soon(run())


@cocotb.test()
async def run_registers(dut):
    """ID/VERSION/CAPS, every RW register round-trips (masked by its fields), WSTRB, SLVERR."""
    p = params()
    rng = random.Random(p.get("seed", 1))
    master, drv = await setup(dut, p.get("seed", 1))
    await drv.check_id()
    assert await drv.read32("VERSION") == spec.SPEC_VERSION
    # CYCLES counts clock cycles: reads 1000 cycles apart differ by 1000 + a few reads' latency
    c0 = await drv.cycles()
    await ClockCycles(dut.clk, 1000)
    c1 = await drv.cycles()
    assert 1000 < c1 - c0 < 1060, (c0, c1)
    caps = await drv.read_fields("CAPS")
    assert caps == {"data_bytes": p["data_bytes"], "net_ports": p["net_ports"],
                    "meta_queue_log2": p["meta_queue_depth"].bit_length() - 1,
                    "desc_queue_log2": p["desc_queue_depth"].bit_length() - 1}, caps
    dma_caps = await drv.read_fields("DMA_CAPS")
    assert dma_caps == {"bus_bytes_log2": p["dma_bus_bytes"].bit_length() - 1, "buffers": p["dma_buffers"],
                        "buffer_bytes_log2": p["dma_buffer_bytes"].bit_length() - 1}, dma_caps
    assert await drv.read32("NUM_NODES") == REGISTERS["NUM_NODES"].reset

    rw = [r for r in LOCAL if r.access is Access.RW and r.name not in ("ROUTE_DATA", "CONTROL")]
    expect = {}
    for r in rw:
        v = rng.getrandbits(32)
        await drv.write32(r.name, v)
        expect[r.name] = v & r.mask
    for r in rng.sample(rw, len(rw)):
        got = await drv.read32(r.name)
        assert got == expect[r.name], f"{r.name}: read {got:#x}, expected {expect[r.name]:#x}"
    assert dut.node_id.value == expect["NODE_ID"] and dut.num_nodes.value == expect["NUM_NODES"]

    # Byte writes (WSTRB): only the strobed lanes change.
    for _ in range(8):
        r = rng.choice([x for x in rw if not x.fields])
        lane, n = rng.randrange(4), 1
        data = rng.randbytes(n)
        resp = await master.write(r.offset + lane, data)
        assert resp.resp == AxiResp.OKAY
        b = bytearray(expect[r.name].to_bytes(4, "little"))
        b[lane:lane + n] = data
        expect[r.name] = int.from_bytes(b, "little")
        assert await drv.read32(r.name) == expect[r.name], r.name

    # Unmapped addresses and RO writes answer SLVERR and change nothing.
    mapped = {r.offset for r in LOCAL}
    unmapped = [o for o in range(0, 1 << 16, 4) if o not in mapped]
    for off in rng.sample(unmapped, 12) + [0xFFFC, 0x0300, REGISTERS["SEQ_STATUS"].offset]:
        if off in mapped:
            continue
        assert (await master.read(off, 4)).resp == AxiResp.SLVERR, f"read {off:#x}"
        assert (await master.write(off, b"\x01\x02\x03\x04")).resp == AxiResp.SLVERR, f"write {off:#x}"
    for r in LOCAL:
        if r.access is Access.RO:
            before = await drv.read32(r.name) if not r.name.startswith("ERR_") else None
            try:
                await drv.write32(r.name, 0xFFFF_FFFF)
            except BusError:
                pass
            else:
                raise AssertionError(f"write to RO {r.name} answered OKAY")
            if before is not None and r.name in ("ID", "VERSION", "CAPS", "DMA_CAPS"):
                assert await drv.read32(r.name) == before
        elif r.access in (Access.W1P, Access.WO):
            assert await drv.read32(r.name) == 0, f"{r.name} reads non-zero"
    # Nothing was pushed by those RO/garbage writes.
    assert await drv.read32("META_LEVEL") == 0 and await drv.read32("DESC_LEVEL") == 0
    errs = await drv.read_errors()
    assert all(v == 0 for v in errs.values()), errs


@cocotb.test()
async def run_route(dut):
    """ROUTE_INDEX / ROUTE_DATA reach the NIC's table (write pulse, read one cycle later)."""
    p = params()
    rng = random.Random(p.get("seed", 2))
    _, drv = await setup(dut, p.get("seed", 2) + 10)
    table: dict[int, int] = {}
    route_table_model(dut, table)
    written = {}
    for _ in range(p.get("routes", 24)):
        rid = rng.randrange(spec.ROUTE_TABLE_ENTRIES)
        entry = {"port_mask": rng.getrandbits(16), "local": rng.getrandbits(1),
                 "fan_in": rng.getrandbits(8), "valid": rng.getrandbits(1)}
        await drv.write_route(rid, entry)
        written[rid] = entry
        assert table[rid] == spec.ROUTE_ENTRY.pack({**entry, "reserved": 0})
    for rid in rng.sample(sorted(written), len(written)):
        got = await drv.read_route(rid)
        assert {k: got[k] for k in written[rid]} == written[rid], (rid, got)


@cocotb.test()
async def run_queues(dut):
    """Both queues fill to their depth while disabled; a push to a full queue is refused and
    counted (never lost, never stored); draining returns every entry in order."""
    p = params()
    rng = random.Random(p.get("seed", 3))
    master, drv = await setup(dut, p.get("seed", 3) + 20, max_polls=20)
    depth_m, depth_d = p["meta_queue_depth"], p["desc_queue_depth"]
    bus = p["dma_bus_bytes"]
    await drv.set_window(0, 1 << 40)

    metas = [spec.Meta(stage=rng.choice(list(spec.Stage)), op=rng.choice(list(spec.Op)),
                       collective=rng.choice(list(spec.Collective)), reduce_op=rng.choice(list(spec.ReduceOp)),
                       src=rng.randrange(256), dst=rng.randrange(256), route_id=rng.randrange(4096),
                       kv_id=rng.randrange(1 << 24), length=rng.randrange(1 << 24), seq=rng.randrange(1 << 16))
             for _ in range(depth_m + 1)]
    descs = [Descriptor(addr=rng.randrange(1 << 30) * bus, length=rng.randrange(1, p["dma_buffer_bytes"] + 1),
                        buffer=rng.randrange(p["dma_buffers"]), dir=rng.choice(list(DmaDir)),
                        tag=rng.randrange(1 << 11)) for _ in range(depth_d + 1)]
    for i, meta in enumerate(metas[:depth_m]):
        await drv.push_meta(meta)
        assert (await drv.read_fields("META_LEVEL"))["level"] == i + 1
    for i, d in enumerate(descs[:depth_d]):
        await drv.push_descriptor(d)
        assert (await drv.read_fields("DESC_LEVEL"))["level"] == i + 1
    st = await drv.status()
    assert st["meta_queue_full"] and st["desc_queue_full"] and not st["error"], st

    # Full: the driver's bounded wait gives up; a forced push is refused and counted.
    for push, what in ((lambda: drv.push_meta(metas[-1]), "meta"), (lambda: drv.push_descriptor(descs[-1]), "desc")):
        try:
            await push()
        except DriverTimeout:
            pass
        else:
            raise AssertionError(f"push to the full {what} queue did not time out")
    await refused(drv.push_meta(metas[-1], wait=False), ErrorCause.META_QUEUE_FULL)
    await refused(drv.push_descriptor(descs[-1], wait=False), ErrorCause.DESC_QUEUE_FULL)
    await drv.push_descriptor(descs[-1], wait=False, check=False)      # unchecked: counted all the same
    errs = await drv.read_errors()
    assert errs[ErrorCause.META_QUEUE_FULL] == 1 and errs[ErrorCause.DESC_QUEUE_FULL] == 2, errs
    assert sum(errs.values()) == 3, errs
    assert (await drv.status())["error"] == 1
    assert (await drv.read_fields("META_LEVEL"))["level"] == depth_m

    # Enable and drain under random ready: exactly the accepted entries, in order.
    got_m, got_d = [], []
    stream_sink(dut, "meta", got_m, rng)
    stream_sink(dut, "desc", got_d, rng)
    await ClockCycles(dut.clk, 20)
    assert not got_m and not got_d, "queues drained while CONTROL.enable = 0"
    await drv.enable()
    await bounded(drv.wait_until("empty queues", lambda w: REGISTERS["STATUS"].decode(w)["meta_queue_empty"]
                                 and REGISTERS["STATUS"].decode(w)["desc_queue_empty"], "STATUS"),
                  TIMEOUT_NS, "queues to drain")
    await ClockCycles(dut.clk, 5)
    assert got_m == [m.to_int() for m in metas[:depth_m]]
    assert got_d == [d.pack() for d in descs[:depth_d]]
    assert (await drv.irq_pending())["meta_queue_empty"] == 1
    await drv.clear_errors()
    errs = await drv.read_errors()
    assert not any(errs.values()) and not (await drv.status())["error"], errs


@cocotb.test()
async def run_bad_descriptors(dut):
    """Each malformed descriptor is refused with its own counter; no descriptor leaves."""
    p = params()
    rng = random.Random(p.get("seed", 4))
    _, drv = await setup(dut, p.get("seed", 4) + 30)
    bus, nbuf, bufsz = p["dma_bus_bytes"], p["dma_buffers"], p["dma_buffer_bytes"]
    base, size = 0x8_0000_0000 + 0x1000, 0x10_0000
    await drv.set_window(base, size)
    await drv.enable()
    got = []
    stream_sink(dut, "desc", got, rng, ready_p=1.0)
    good = Descriptor(base + 64 * bus, bufsz, nbuf - 1, DmaDir.LOAD, 7)
    cases = [
        (ErrorCause.DESC_ZERO_LENGTH, Descriptor(base, 0, 0)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(base - bus, bus, 0)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(base + size - bus, 2 * bus, 0)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(base + size, bus, 0, DmaDir.STORE)),
        (ErrorCause.DESC_OUT_OF_WINDOW, Descriptor(0, bus, 0)),
        (ErrorCause.DESC_BAD_BUFFER, Descriptor(base, bus, nbuf)),
        (ErrorCause.DESC_BAD_BUFFER, Descriptor(base, bus, 15, DmaDir.STORE)),
        (ErrorCause.DESC_UNALIGNED, Descriptor(base + 1, bus, 0)),
        (ErrorCause.DESC_TOO_LONG, Descriptor(base, bufsz + 1, 0, DmaDir.LOAD)),
        (ErrorCause.DESC_ZERO_LENGTH, Descriptor(base + 3, 0, 15)),   # first cause counts
    ]
    expected = {c: 0 for c in ErrorCause}
    for cause, d in rng.sample(cases, len(cases)):
        await refused(drv.push_descriptor(d), cause)
        expected[cause] += 1
        errs = await drv.read_errors()
        assert errs == expected, (d, errs, expected)
    assert not got, f"refused descriptors reached the DMA: {got}"
    # The edges of the window and a STORE longer than a buffer are fine.
    fine = [good, Descriptor(base, bus, 0), Descriptor(base + size - bus, bus, 0, DmaDir.STORE, 1),
            Descriptor(base, 4 * bufsz, 0, DmaDir.STORE, 2)]
    for d in fine:
        await drv.push_descriptor(d)
    await ClockCycles(dut.clk, 10)
    assert got == [d.pack() for d in fine]
    assert await drv.read_errors() == expected


@cocotb.test()
async def run_errors_and_irq(dut):
    """Error strobes count per cause; interrupts set, mask and clear; DESC_DONE; STATUS.busy."""
    p = params()
    rng = random.Random(p.get("seed", 5))
    _, drv = await setup(dut, p.get("seed", 5) + 40)
    counts = {c: 0 for c in ErrorCause}
    await FallingEdge(dut.clk)
    for _ in range(200):
        bits = rng.getrandbits(len(ErrorCause)) if rng.random() < 0.5 else 0
        dut.errors.value = bits
        for c in ErrorCause:
            counts[c] += (bits >> c) & 1
        await FallingEdge(dut.clk)
    dut.errors.value = 0
    assert await drv.read_errors() == counts
    assert (await drv.irq_pending())["error"] == 1
    assert not dut.irq.value, "irq raised while IRQ_ENABLE = 0"

    await drv.irq_clear(0xF)
    assert await drv.read32("IRQ_STATUS") == 0
    await drv.write32("IRQ_ENABLE", 1 << Irq.DESC_DONE)
    for n in range(1, 4):
        tag = rng.randrange(1 << 11)
        await FallingEdge(dut.clk)
        dut.desc_done.value, dut.desc_done_tag.value = 1, tag
        await FallingEdge(dut.clk)
        dut.desc_done.value = 0
        assert await drv.wait_desc_done(n) == {"count": n, "tag": tag}
        assert dut.irq.value == 1
        await drv.irq_clear(1 << Irq.DESC_DONE)
        await ClockCycles(dut.clk, 2)
        assert dut.irq.value == 0
    await FallingEdge(dut.clk)
    dut.rx_packet.value = 1
    await FallingEdge(dut.clk)
    dut.rx_packet.value = 0
    assert (await drv.irq_pending())["rx_packet"] == 1 and dut.irq.value == 0
    await drv.write32("IRQ_ENABLE", 1 << Irq.RX_PACKET)
    await ClockCycles(dut.clk, 2)
    assert dut.irq.value == 1

    dut.busy.value = 1
    assert (await drv.status())["busy"] == 1
    dut.busy.value = 0
    assert (await drv.status())["busy"] == 0
    await drv.clear_errors()
    assert not any((await drv.read_errors()).values())
    assert (await drv.read_fields("CONTROL"))["enable"] == 0
    assert await drv.read32("ID") == ID_VALUE


@cocotb.test()
async def run_concurrent(dut):
    """Reads and writes in flight at the same time (the master's read and write sides run
    independently), under random delays: every response belongs to its own request."""
    p = params()
    rng = random.Random(p.get("seed", 6))
    master, drv = await setup(dut, p.get("seed", 6) + 50)
    rw = [r for r in LOCAL if r.access is Access.RW and not r.fields]     # plain 32-bit words
    constants = {"ID": ID_VALUE, "VERSION": spec.SPEC_VERSION}
    expect = {}

    async def writer():
        for _ in range(40):
            r = rng.choice(rw)
            v = rng.getrandbits(32)
            resp = await master.write(r.offset, v.to_bytes(4, "little"))
            assert resp.resp == AxiResp.OKAY
            expect[r.name] = v

    async def reader():
        for _ in range(40):
            name = rng.choice(list(constants))
            resp = await master.read(REGISTERS[name].offset, 4)
            assert resp.resp == AxiResp.OKAY and int.from_bytes(resp.data, "little") == constants[name], name
            bad = await master.read(0x3F0, 4)
            assert bad.resp == AxiResp.SLVERR

    w, r = cocotb.start_soon(writer()), cocotb.start_soon(reader())
    await bounded(w, TIMEOUT_NS, "writes")
    await bounded(r, TIMEOUT_NS, "reads")
    for name, v in expect.items():
        assert await drv.read32(name) == v, name


@cocotb.test()
async def run_eth(dut):
    """The 10GBASE-R port's registers: MAC table writes leave on ``eth`` (one pulse, the staged
    address at the staged index), ETH_STATUS shows the port's status bits, ETH_SEQ_GAPS adds
    the missing-frame counts and a write subtracts (saturating at 0), so a read-then-clear
    keeps gaps that arrive in between."""
    p = params()
    rng = random.Random(p.get("seed", 7))
    _, drv = await setup(dut, p.get("seed", 7) + 60)
    writes = []

    async def table_model():
        while True:
            await FallingEdge(dut.clk)
            if dut.eth__mac_w_en.value:
                writes.append((int(dut.eth__mac_index.value), int(dut.eth__mac_data.value)))
    cocotb.start_soon(table_model())
    want = []
    for _ in range(6):
        index, mac = rng.randrange(256), rng.getrandbits(48)
        await drv.write_mac(index, mac)
        want.append((index, mac))
    await ClockCycles(dut.clk, 2)
    assert writes == want, (writes, want)

    for _ in range(8):
        bits = rng.getrandbits(len(LinkStatus))
        dut.eth__status.value = bits
        assert await drv.link_status() == {s: bool((bits >> s) & 1) for s in LinkStatus}

    async def gaps(counts):
        for n in counts:
            await FallingEdge(dut.clk)
            dut.eth__seq_missing.value = n
        await FallingEdge(dut.clk)
        dut.eth__seq_missing.value = 0

    counts = [rng.randrange(1, 1 << 16) for _ in range(5)]
    await gaps(counts)
    assert await drv.read_seq_gaps() == sum(counts)
    assert await drv.read_seq_gaps(clear=True) == sum(counts)
    assert await drv.read_seq_gaps() == 0
    # events during the read-and-clear are kept
    task = cocotb.start_soon(gaps([3] * 40))
    first = await drv.read_seq_gaps(clear=True)
    await task
    assert first + await drv.read_seq_gaps() == 120, first
    await drv.read_seq_gaps(clear=True)
    await gaps([5])
    await drv.write32("ETH_SEQ_GAPS", 9)        # more than is there: 0, not a wrap
    assert await drv.read_seq_gaps() == 0
    await gaps([4])
    await drv.clear_errors()                    # CONTROL.clear_counters clears it too
    assert await drv.read_seq_gaps() == 0


def test_construction_and_caps():
    dut = ControlRegisters(meta_queue_depth=8, desc_queue_depth=4, data_bytes=16, net_ports=3)
    assert REGISTERS["CAPS"].decode(dut.caps) == {"data_bytes": 16, "net_ports": 3, "meta_queue_log2": 3,
                                                  "desc_queue_log2": 2}
    assert len(dut.errors) == len(ErrorCause)
    assert len(dut.meta.payload.as_value()) == spec.HEADER_BITS


@pytest.mark.parametrize("kw", [{"meta_queue_depth": 12}, {"dma_bus_bytes": 3}, {"net_ports": 16}])
def test_bad_parameters(kw):
    with pytest.raises(ValueError):
        ControlRegisters(**kw)


def _axil_sim(dut, body):
    """Run ``body(ctx, write, read)`` with plain AXI-Lite transactions (no bus model)."""
    bus = dut.s_axil

    async def write(ctx, addr, value, strb=0xF):
        ctx.set(bus.awaddr, addr); ctx.set(bus.awvalid, 1)
        ctx.set(bus.wdata, value); ctx.set(bus.wstrb, strb); ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        aw = w = False
        for _ in range(20):
            await ctx.tick()
            aw = aw or ctx.get(bus.awready) or False
            w = w or ctx.get(bus.wready) or False
            # (ready is sampled after the edge: both are accepted on the first edge here)
            ctx.set(bus.awvalid, 0); ctx.set(bus.wvalid, 0)
            if ctx.get(bus.bvalid):
                resp = ctx.get(bus.bresp)
                await ctx.tick()
                ctx.set(bus.bready, 0)
                return resp
        raise AssertionError("no write response")

    async def read(ctx, addr):
        ctx.set(bus.araddr, addr); ctx.set(bus.arvalid, 1); ctx.set(bus.rready, 1)
        await ctx.tick()
        ctx.set(bus.arvalid, 0)
        for _ in range(20):
            if ctx.get(bus.rvalid):
                v, r = ctx.get(bus.rdata), ctx.get(bus.rresp)
                await ctx.tick()
                ctx.set(bus.rready, 0)
                return v, r
            await ctx.tick()
        raise AssertionError("no read response")

    async def bench(ctx):
        await body(ctx, lambda *a, **k: write(ctx, *a, **k), lambda *a: read(ctx, *a))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_amaranth_sim_basic():
    dut = ControlRegisters(meta_queue_depth=4, desc_queue_depth=4)
    off = {r.name: r.offset for r in REGISTERS}

    async def body(ctx, write, read):
        assert await read(off["ID"]) == (spec.regmap.ID_VALUE, 0)
        assert (await read(0x3FC))[1] == 2                       # unmapped: SLVERR
        assert await write(off["ID"], 0) == 2                     # RO: SLVERR
        assert await write(off["NODE_ID"], 0x1234_5607) == 0
        assert await read(off["NODE_ID"]) == (0x07, 0)           # only the field is stored
        assert ctx.get(dut.node_id) == 7
        assert await write(off["META_W0"], 0xAABBCCDD, strb=0b0101) == 0
        assert (await read(off["META_W0"]))[0] == 0x00BB00DD
        assert await write(off["META_PUSH"], 1) == 0
        assert (await read(off["META_LEVEL"]))[0] == 1
        assert not ctx.get(dut.meta.valid)                        # held while disabled
        assert await write(off["CONTROL"], 1) == 0
        assert ctx.get(dut.meta.valid) and ctx.get(dut.meta.payload.as_value()) == 0x00BB00DD

    _axil_sim(dut, body)


CSR_PARAMS = {"meta_queue_depth": 4, "desc_queue_depth": 4, "data_bytes": 8, "net_ports": 2,
              "dma_bus_bytes": 16, "dma_buffers": 2, "dma_buffer_bytes": 1024}


@pytest.mark.cocotb
@pytest.mark.parametrize("case", ["registers", "route", "queues", "bad_descriptors", "errors_and_irq",
                                  "concurrent", "eth"])
def test_csr_cocotb(case, build_dir):
    run_cocotb(ControlRegisters(**CSR_PARAMS), __name__, build_dir, testcase=f"run_{case}",
               params=CSR_PARAMS)


def test_read_choice_lut6_equals_the_plain_build(tmp_path):
    """Round 28b: the node's build (the read word's group choice as hw/lut.py's LUT6 instances) equals
    the plain one in Icarus: both on the same random inputs every cycle (AXI4-Lite reads of random
    words of the register file's 512, writes, the units' ports), every output compared every cycle."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from amaranth import Cat, Const
    from amaranth.lib import wiring
    from tests.hw.test_lut import _Pair, _run

    def ports(csr):
        ins, outs = [], []
        for path, member, value in csr.signature.flatten(csr):
            (ins if member.flow is wiring.In else outs).append(value)
        return ins, outs

    ins, _ = ports(ControlRegisters(seq=True))
    width = sum(len(v) for v in ins)

    def build(m, stim, primitive):
        m.submodules[f"csr{int(primitive)}"] = csr = ControlRegisters(seq=True, primitive=primitive)
        ins, outs = ports(csr)
        m.d.comb += Cat(*ins).eq(stim[:width])
        # (the read address within the register file: words 0 .. 511, its last assignment wins)
        m.d.comb += csr.s_axil.araddr.eq(Cat(stim[width:width + 11], Const(0, len(csr.s_axil.araddr) - 11)))
        return Cat(*outs), csr.s_axil.rvalid & csr.s_axil.rready & (csr.s_axil.rdata != 0)
    bad, fires = _run(tmp_path, _Pair(width + 11, build))
    assert bad == 0 and fires > 0


def test_error_counters_split_equal_the_plain_build(tmp_path, monkeypatch):
    """Round 31b: the node's error counters (low bits in flip-flops, the rest in LUT RAM visited in turn)
    equal the plain ones in Icarus, narrowed to 8 bits (2 bits in the RAM) so they saturate: both builds
    on the same random inputs every cycle, the error strobes at 63/64 per cause (a counter saturates in
    ~260 cycles; runs of 63 events in a row, so a carry just after a counter's visit can bring it to all
    ones before the next), half the reads at an ERR_* word, 1/16 of the writes at CONTROL (a clear of the
    counters ~1 in 1 000 cycles), every output (the read data) compared every cycle over 20 000 cycles."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from amaranth import Cat, Const, Mux
    from amaranth.lib import wiring
    from tests.hw import test_lut
    from tests.hw.test_lut import _Pair, _run
    monkeypatch.setattr(test_lut, "CYCLES", 20_000)
    err0, control = REGISTERS[f"ERR_{ErrorCause(0).name}"].offset, REGISTERS["CONTROL"].offset

    def ports(csr):
        ins, outs = [], []
        for path, member, value in csr.signature.flatten(csr):
            (ins if member.flow is wiring.In else outs).append(value)
        return ins, outs

    ins, _ = ports(ControlRegisters(seq=True, err_bits=8))
    n = len(ErrorCause)
    width = sum(len(v) for v in ins)

    def build(m, stim, primitive):
        m.submodules[f"csr{int(primitive)}"] = csr = ControlRegisters(seq=True, primitive=primitive, err_bits=8)
        ins, outs = ports(csr)
        m.d.comb += Cat(*ins).eq(stim[:width])
        x = stim[width:]
        bus = csr.s_axil
        m.d.comb += [
            bus.araddr.eq(Mux(x[0], err0 + (x[1:6] << 2), Cat(x[6:17], Const(0, len(bus.araddr) - 11)))),
            bus.awaddr.eq(Mux(x[17:21].all(), control, Cat(x[23:34], Const(0, len(bus.awaddr) - 11)))),
            csr.errors.eq(~(x[34:34 + n] & x[34 + n:34 + 2 * n] & x[34 + 2 * n:34 + 3 * n] & x[34 + 3 * n:34 + 4 * n]
                            & x[34 + 4 * n:34 + 5 * n] & x[34 + 5 * n:34 + 6 * n])),    # 63/64 a cycle
        ]
        # (fired: a read of 255, a saturated counter)
        return Cat(*outs), bus.rvalid & bus.rready & (bus.rdata == 0xFF)
    bad, fires = _run(tmp_path, _Pair(width + 34 + 6 * n, build))
    assert bad == 0 and fires > 0
