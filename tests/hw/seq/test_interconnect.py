"""The AXI interconnect and DDR firewall (hw/seq/interconnect.py) in the Amaranth simulator:
two clients on one HP port (a reader with a 48-bit address, a writer), a DDR model behind it.
Bursts inside the DMA window reach the DDR and their data / responses go back to the client
that asked; a burst outside it (or beyond the HP port's address bits) never reaches the DDR,
is answered DECERR to its client, and strobes ``oow`` with the client's index."""
import pytest
from amaranth.sim import Simulator

from mcf.hw.axi.lite import Resp
from mcf.hw.seq.interconnect import AxiInterconnect, Client

DW, NB = 64, 8


@pytest.mark.parametrize("full_width", [False, True])   # (round 31b: the bursts here are of the bus's width)
def test_firewall_and_routing(full_width):
    ic = AxiInterconnect([Client("rd", write=False, id_width=2, addr_width=48), Client("wr", read=False)],
                         hp_ports=1, addr_width=20, data_width=DW, full_width=full_width)
    rd, wr, hp = ic.c_rd, ic.c_wr, ic.m_axi[0]
    ddr = {a: a * 3 + 1 for a in range(0, 1 << 12, NB)}
    log = {"hp_ar": [], "hp_aw": [], "rd": [], "b": [], "oow": []}

    async def ddr_model(ctx):
        reads, writes = [], []
        ctx.set(hp.arready, 1)
        ctx.set(hp.awready, 1)
        ctx.set(hp.wready, 1)
        while True:
            if reads:
                rid, addr, left = reads[0]
                ctx.set(hp.rvalid, 1)
                ctx.set(hp.rid, rid)
                ctx.set(hp.rdata, ddr.get(addr, 0))
                ctx.set(hp.rlast, left == 1)
                ctx.set(hp.rresp, Resp.OKAY)
            else:
                ctx.set(hp.rvalid, 0)
            ctx.set(hp.bvalid, bool(writes) and writes[0][2] == 0)
            if writes:
                ctx.set(hp.bid, writes[0][0])
                ctx.set(hp.bresp, Resp.OKAY)
            (_, _, arv, araddr, arid, arlen, awv, awaddr, awid, awlen, wv, wd, bv, br, rv, rr, oow,
             oowc) = await ctx.tick().sample(hp.arvalid, hp.araddr, hp.arid, hp.arlen, hp.awvalid, hp.awaddr,
                                             hp.awid, hp.awlen, hp.wvalid, hp.wdata, hp.bvalid, hp.bready,
                                             hp.rvalid, hp.rready, ic.oow, ic.oow_client)
            if arv:
                log["hp_ar"].append(araddr)
                reads.append((arid, araddr, arlen + 1))
            if awv:
                log["hp_aw"].append(awaddr)
                writes.append([awid, awaddr, awlen + 1])
            if wv:
                w = next(w for w in writes if w[2] > 0)
                ddr[w[1]] = wd
                w[1] += NB
                w[2] -= 1
            b_taken, r_taken = bv and br, rv and rr
            if oow:
                log["oow"].append(oowc)
            if r_taken:
                rid, addr, left = reads[0]
                reads[0] = (rid, addr + NB, left - 1)
                if left == 1:
                    reads.pop(0)
            if b_taken:
                writes.pop(0)

    async def until(ctx, ready):
        """Wait for the clock edge at which ``ready`` was high (the handshake happened)."""
        while True:
            _, _, r = await ctx.tick().sample(ready)
            if r:
                return

    async def read(ctx, addr, beats, rid=1):
        ctx.set(rd.araddr, addr)
        ctx.set(rd.arlen, beats - 1)
        ctx.set(rd.arsize, 3)
        ctx.set(rd.arid, rid)
        ctx.set(rd.arvalid, 1)
        await until(ctx, rd.arready)
        ctx.set(rd.arvalid, 0)
        ctx.set(rd.rready, 1)
        out = []
        while len(out) < beats:
            _, _, v, i, d, r, last = await ctx.tick().sample(rd.rvalid, rd.rid, rd.rdata, rd.rresp, rd.rlast)
            if v:
                out.append((i, d, r, last))
        ctx.set(rd.rready, 0)
        return out

    async def write(ctx, addr, values):
        ctx.set(wr.awaddr, addr)
        ctx.set(wr.awlen, len(values) - 1)
        ctx.set(wr.awsize, 3)
        ctx.set(wr.awvalid, 1)
        await until(ctx, wr.awready)
        ctx.set(wr.awvalid, 0)
        for i, v in enumerate(values):
            ctx.set(wr.wdata, v)
            ctx.set(wr.wstrb, 0xFF)
            ctx.set(wr.wlast, i == len(values) - 1)
            ctx.set(wr.wvalid, 1)
            await until(ctx, wr.wready)
        ctx.set(wr.wvalid, 0)
        ctx.set(wr.bready, 1)
        while True:
            _, _, v, resp = await ctx.tick().sample(wr.bvalid, wr.bresp)
            if v:
                break
        ctx.set(wr.bready, 0)
        return resp

    async def bench(ctx):
        ctx.set(ic.window_base, 0x400)
        ctx.set(ic.window_size, 0x800)
        await ctx.tick()
        got = await read(ctx, 0x400, 4, rid=2)
        assert [d for _, d, _, _ in got] == [ddr[0x400 + NB * i] for i in range(4)]
        assert {r for r, _, _, _ in got} == {2} and {s for _, _, s, _ in got} == {Resp.OKAY} and got[-1][3]
        assert await write(ctx, 0x800, [11, 22]) == Resp.OKAY
        assert ddr[0x800] == 11 and ddr[0x808] == 22
        n_ar, n_aw = len(log["hp_ar"]), len(log["hp_aw"])
        # outside the window: below it, across its end, beyond the HP port's 20 address bits
        for addr, beats in ((0x3F8, 1), (0xBF0, 4), ((1 << 20) + 0x400, 1)):
            bad = await read(ctx, addr, beats)
            assert [s for _, _, s, _ in bad] == [Resp.DECERR] * beats and bad[-1][3]
        assert await write(ctx, 0x100, [5]) == Resp.DECERR
        assert ddr[0x100] == 0x100 * 3 + 1
        await ctx.tick().repeat(4)
        assert len(log["hp_ar"]) == n_ar and len(log["hp_aw"]) == n_aw, "a refused burst reached the DDR"
        assert log["oow"] == [0, 0, 0, 1]
        # and the port works on afterwards
        assert [d for _, d, _, _ in await read(ctx, 0x800, 2)] == [11, 22]
        log["finished"] = True

    sim = Simulator(ic)
    sim.add_clock(1e-8)
    sim.add_testbench(ddr_model, background=True)
    sim.add_testbench(bench)
    sim.run_until(2e-5)          # (bounded: a hang fails the checks below)
    assert log.get("finished") and len(log["oow"]) == 4, log


@pytest.mark.parametrize("aw,ew,bw", [(40, 49, 48), (12, 14, 12)])
def test_window_ok_primitive_equals_the_plain_check(tmp_path, aw, ew, bw):
    """Round 33: the window check on ``greater`` + ``add3`` instances (the node's build) equals the plain
    ``addr >= base and last_byte < end - addr`` in Icarus (hw/lut6.v's models), every cycle: random words, and
    (3 in 4 cycles) ``base`` and ``end`` a small signed step from ``addr`` / ``addr + last_byte`` -- the
    bounds' hard cases: equal, one below, one above."""
    import shutil
    if shutil.which("iverilog") is None:
        pytest.skip("needs Icarus Verilog")
    from amaranth import Mux, Signal
    from mcf.hw.seq.interconnect import window_ok
    from tests.hw.test_lut import _Pair, _run
    lw = 15

    def build(m, stim, primitive):
        mode, d1, d2 = stim[0:2], stim[2:5].as_signed(), stim[5:8].as_signed()
        addr, last = stim[8:8 + aw], stim[8 + aw:8 + aw + lw]
        rb, re = stim[8 + aw + lw:8 + aw + lw + bw], stim[8 + aw + lw + bw:8 + aw + lw + bw + ew]
        base, end = Signal(bw, name="b" + "pq"[primitive]), Signal(ew, name="e" + "pq"[primitive])
        m.d.comb += [base.eq(Mux(mode == 0, rb, addr + d1)), end.eq(Mux(mode == 0, re, addr + last + 1 + d2))]
        return window_ok(m, addr, last, base, end, primitive, "w" + "pq"[primitive]), stim[0] | stim[1]
    bad, fires = _run(tmp_path, _Pair(8 + aw + lw + bw + ew, build))
    assert bad == 0 and fires > 0
