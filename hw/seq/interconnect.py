"""AXI4 interconnect and DDR firewall of a node: every DDR client -> the node's HP ports.

    client 0 ─┐   per HP port: AR / AW arbiters (round robin) ─► window check ─► HP AR / AW
    client 1 ─┼─►              R by ID back to its client, W burst-locked in AW order,
      ...    ─┘                B by ID back to its client

Each client (the sequencer's fetch unit, the DMA loader of the TX engine, the DMA writer of
the RX engine, the execute unit's ports) is an AXI4 master with its own ID space; it is
statically assigned to one HP port.  On that port its transactions carry the ID
``{client slot, client ID}``, so read data and write responses go back to the client that
asked (different clients' read bursts may interleave beat by beat; one client's come back in
order, as AXI4 requires per ID).  Writes are burst-locked: W beats follow the accepted AW
bursts in order, each burst's beats from its own client.

**Firewall**: every burst is checked against the DMA window (``window_base`` ..
``window_base + window_size``) before it is issued.  A burst outside it never reaches the
HP port: the port stops taking new bursts, waits until its earlier ones have completed, and
answers the bad one itself with DECERR (read: ``len + 1`` beats, their data undefined -- the
HP port's R data lines as they are; write: the client's W
beats are taken and dropped, then one B) so that the client finishes; ``oow`` strobes once
with the client's index.  An error response from the DDR (SLVERR / DECERR) strobes
``resp_err`` once per burst.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.axi.lite import Resp
from mcf.hw.fifo import PrefetchFIFO
from mcf.hw.lut import add3, greater
from mcf.spec.regmap import DMA_ADDR_BITS


@dataclass(frozen=True)
class Client:
    """One AXI4 master of the node: ``name`` (its port is ``c_<name>``), which channels it
    has, its ID width and the HP port it uses."""
    name: str
    read: bool = True
    write: bool = True
    id_width: int = 1
    port: int = 0
    #: The client's address width (``None``: the HP ports'); a wider one is checked whole.
    addr_width: int | None = None

    def signature(self, addr_width: int, data_width: int) -> AXI4Signature:
        return AXI4Signature(self.addr_width or addr_width, data_width, self.id_width, read=self.read,
                             write=self.write)


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


def _rr_pick(m: Module, requests: list, last) -> tuple[Signal, Signal]:
    """Round robin: the first requester after ``last`` (wrapping); returns (any, index)."""
    n = len(requests)
    pick = Signal(range(max(n, 2)))
    anyreq = Signal()
    m.d.comb += anyreq.eq(Cat(*requests).any())
    # Scan candidates in priority order: those after `last` first, then the rest.
    for start in range(n):
        with m.If(last == start):
            order = [(start + 1 + k) % n for k in range(n)]
            chosen = Const(order[-1], pick.shape())
            for i in reversed(order):
                chosen = Mux(requests[i], i, chosen)
            m.d.comb += pick.eq(chosen)
    return anyreq, pick


def window_ok(m: Module, addr, last_byte, base, end, primitive: bool = False, name: str = "win"):
    """Whether a burst's bytes ``addr`` .. ``addr + last_byte`` lie in the window ``base`` .. ``end - 1``
    (all unsigned): ``addr >= base`` and ``addr + last_byte < end``, a Signal ``name``.  Plain: ``addr >= base``
    and ``last_byte < end - addr`` (a subtraction, then a compare: two carry chains beside the first compare).
    ``primitive`` (round 33): ``addr >= base`` as ``mcf.hw.lut.greater`` (half a LUT a bit) and the sign of
    ``addr + last_byte + ~end + 1`` as one ``add3`` (a LUT6_2 and the carry chain a bit); measured on the node,
    ``wic.p#_ar_ok`` 113 -> 88 LUT a port (the gated form before round 33 113)."""
    ok = Signal(name=name)
    if not primitive:
        w = max(len(addr), len(end), len(last_byte)) + 2
        room = Signal(signed(w), name=f"{name}_room")
        m.d.comb += [room.eq(end - addr), ok.eq((addr >= base) & (last_byte < room))]
        return ok
    wc = max(len(addr), len(base))
    ua, ub = Signal(wc, name=f"{name}_a"), Signal(wc, name=f"{name}_b")
    m.d.comb += [ua.eq(addr), ub.eq(base)]
    below = greater(m, ub, ua, f"{name}_lo", primitive=True)           # base > addr
    # addr + last_byte - end in n bits (two's complement: ~end + 1; |the difference| < 2^(n - 1))
    n = max(len(addr), len(end), len(last_byte)) + 2
    wend = Signal(n, name=f"{name}_end")            # (widened first: ~ of the narrower word is not -end - 1)
    m.d.comb += wend.eq(end)
    nend = ~wend
    diff = add3(m, addr.as_unsigned(), last_byte.as_unsigned(), nend, signed(n), f"{name}_d", primitive=True, cin=1)
    m.d.comb += ok.eq(~below & diff[n - 1])
    return ok


class AxiInterconnect(wiring.Component):
    """``clients``: list of ``Client``; ``hp_ports``: AXI4 masters to the DDR
    (``m_axi[p]``); ``max_writes``: write bursts in flight per port.

    Outputs: ``oow`` + ``oow_client`` (a burst outside the window was refused),
    ``resp_err`` + ``resp_err_client`` (the DDR answered an error), ``idle`` (no burst in
    flight on any port), ``rd_bytes[p]`` / ``wr_bytes[p]`` (bytes moved per port
    ``BYTES_LATENCY`` cycles before: the beat's handshake and strobes are registered, then their
    count, so that a performance counter's adders are nowhere near a client's W path) and
    ``activity`` (some beat moved)."""

    #: Cycles from a beat to its bytes on ``rd_bytes`` / ``wr_bytes``.
    BYTES_LATENCY = 2

    def __init__(self, clients: list[Client], hp_ports: int = 1, addr_width: int = 40,
                 data_width: int = 128, max_writes: int = 8, full_width: bool = False, primitive: bool = False):
        if not clients:
            raise ValueError("an interconnect needs at least one client")
        names = [c.name for c in clients]
        if len(set(names)) != len(names):
            raise ValueError(f"client names must be unique: {names}")
        for c in clients:
            if not 0 <= c.port < hp_ports:
                raise ValueError(f"client {c.name}: port {c.port} is not one of the {hp_ports} HP ports")
        self.clients, self.hp_ports = list(clients), hp_ports
        self.addr_width, self.data_width, self.max_writes = addr_width, data_width, max_writes
        self.bus_log2 = (data_width // 8).bit_length() - 1
        #: (round 31b) every client's bursts are of the bus's width (AxSIZE = ``bus_log2``: the node's
        #: clients, the sequencer's fetch, the DMA loader and writer, the execute unit's streams and
        #: weight loaders): the window check and the HP port's AxSIZE use the constant, the clients'
        #: AxSIZE lines are not read (issue 14: the check's shift of the length by the held size,
        #: ~30 LUT a channel)
        self.full_width = full_width
        #: (round 33) the window check on LUT6_2 / CARRY4 instances (``window_ok``): the node's builds
        #: with ``dsp_primitives``
        self.primitive = bool(primitive)
        #: Addresses are held and checked at the widest client's width, issued at ``addr_width``.
        self.check_width = max([addr_width] + [c.addr_width or addr_width for c in clients])
        self.on_port = [[i for i, c in enumerate(clients) if c.port == p] for p in range(hp_ports)]
        self.max_id = max(c.id_width for c in clients)
        self.port_id_width = [self.max_id + _bits(len(cs)) for cs in self.on_port]
        members = {f"c_{c.name}": In(c.signature(addr_width, data_width)) for c in clients}
        members.update({
            "m_axi": Out(AXI4Signature(addr_width, data_width, max(self.port_id_width))).array(hp_ports),
            "window_base": In(DMA_ADDR_BITS),
            "window_size": In(DMA_ADDR_BITS),
            "oow": Out(1), "oow_client": Out(range(len(clients))),
            "resp_err": Out(1), "resp_err_client": Out(range(len(clients))),
            "idle": Out(1),
            "rd_bytes": Out(range(data_width // 8 + 1)).array(hp_ports),
            "wr_bytes": Out(range(data_width // 8 + 1)).array(hp_ports),
            "activity": Out(1),
        })
        super().__init__(members)

    def client_port(self, index: int):
        return getattr(self, f"c_{self.clients[index].name}")

    def elaborate(self, platform):
        m = Module()
        oow_ev, err_ev, idles, acts = [], [], [], []
        for p in range(self.hp_ports):
            o, e, idle, act = self._port(m, p)
            oow_ev.append(o)
            err_ev.append(e)
            idles.append(idle)
            acts.append(act)
        # One event per cycle is reported (ports rarely fault together; the node stops at the first).
        # The client is named only with its strobe (without one: the last port's, not behind
        # the strobes' logic).
        for events, strobe, who in ((oow_ev, self.oow, self.oow_client),
                                    (err_ev, self.resp_err, self.resp_err_client)):
            m.d.comb += [strobe.eq(Cat(*(valid for valid, _ in events)).any()), who.eq(events[-1][1])]
            for valid, client in reversed(events[:-1]):
                with m.If(valid):
                    m.d.comb += who.eq(client)
        m.d.comb += [self.idle.eq(Cat(*idles).all()), self.activity.eq(Cat(*acts).any())]
        return m

    #: AR / AW fields a client's burst carries through the port unchanged.
    _ADDR_FIELDS = ("addr", "len", "size", "burst", "lock", "cache", "prot", "qos")

    def _address(self, m: Module, p: int, ch: str, ports: list, members: list, in_window, gate=Const(1)):
        """The AR (``ch="ar"``) or AW (``"aw"``) stage of port ``p``: take one burst from the
        ``members`` (slots of ``ports``) by round robin, hold it, check it against the window in
        the next cycle, then offer it to the HP port (when ``gate``) with the ID
        ``{slot, client ID}``.  Returns ``(hold, held, checked, ok, fire)``; the caller clears
        ``held`` when it answers a refused burst itself."""
        hp = self.m_axi[p]
        n, cid = len(ports), self.max_id
        layout = data.StructLayout({"addr": self.check_width, "len": 8, "size": 3, "burst": 2, "lock": 1,
                                    "cache": 4, "prot": 3, "qos": 4, "id": cid, "slot": range(max(n, 2))})
        hold = Signal(layout, name=f"p{p}_{ch}")
        held = Signal(name=f"p{p}_{ch}_held")
        checked = Signal(name=f"p{p}_{ch}_checked")    # the window check result is registered
        ok = Signal(name=f"p{p}_{ch}_ok")
        last = Signal(range(max(n, 2)), name=f"p{p}_{ch}_last")
        reqs = [getattr(ports[k], f"{ch}valid") if k in members else Const(0) for k in range(n)]
        anyreq, pick = _rr_pick(m, reqs, last)
        with m.If(~held & anyreq):
            m.d.sync += [held.eq(1), checked.eq(0), last.eq(pick), hold.slot.eq(pick)]
            for k in members:
                with m.If(pick == k):
                    c = ports[k]
                    m.d.comb += getattr(c, f"{ch}ready").eq(1)
                    m.d.sync += [getattr(hold, f).eq(getattr(c, f"{ch}{f}")) for f in self._ADDR_FIELDS + ("id",)]
        # (the check outside the ``If``: its signals' comb assignments would otherwise be gated by it, an AND a
        # bit in front of the check -- round 33)
        win = in_window(hold.addr, hold.len, self.bus_log2 if self.full_width else hold.size, ch)
        with m.If(held & ~checked):
            m.d.sync += [checked.eq(1), ok.eq(win)]
        fire = Signal(name=f"p{p}_{ch}_fire")
        m.d.comb += [getattr(hp, f"{ch}valid").eq(held & checked & ok & gate),
                     getattr(hp, f"{ch}id").eq(Cat(hold.id, hold.slot[:_bits(n)])),
                     fire.eq(getattr(hp, f"{ch}valid") & getattr(hp, f"{ch}ready"))]
        m.d.comb += [getattr(hp, f"{ch}{f}").eq(getattr(hold, f)) for f in self._ADDR_FIELDS]
        if self.full_width:
            m.d.comb += getattr(hp, f"{ch}size").eq(self.bus_log2)
        with m.If(fire):
            m.d.sync += held.eq(0)
        return hold, held, checked, ok, fire

    # --- one HP port -------------------------------------------------------------------------------
    def _port(self, m: Module, p: int):
        hp = self.m_axi[p]
        idx = self.on_port[p]                      # global client indices on this port
        ports = [self.client_port(i) for i in idx]
        n = len(idx)
        sbits = _bits(n)
        cid = self.max_id
        nbytes = self.data_width // 8
        readers = [k for k, i in enumerate(idx) if self.clients[i].read]
        writers = [k for k, i in enumerate(idx) if self.clients[i].write]
        base = self.window_base
        # the window's end, capped at the top of the HP port's space (no wrap-around when
        # narrowed), registered (issue 14: the window is set while no burst is being checked; a
        # burst checked in the cycle right after a write of it sees the old end)
        end = Signal(max(DMA_ADDR_BITS, self.addr_width) + 1, name=f"p{p}_window_end")
        window_end = base + self.window_size
        m.d.sync += end.eq(Mux(window_end > (1 << self.addr_width), 1 << self.addr_width, window_end))

        def in_window(addr, length, size, ch):
            # the burst's bytes less one, ((len + 1) << size) - 1 = (len << size) | the size's low
            # ones, without an adder (issue 14: the HP port's ARLEN went through len + 1 into
            # the check, 8.1 levels)
            last_byte = Signal(range(256 << 7), name=f"p{p}_burst_last")
            if isinstance(size, int):       # (``full_width``: the length's bits above the size's ones)
                m.d.comb += last_byte.eq(Cat(Const((1 << size) - 1, size), length))
            else:
                m.d.comb += last_byte.eq((length << size) | Cat(*(size > i for i in range(7))))
            # addr + bytes <= end, i.e. bytes - 1 < end - addr (``window_ok``), without the sum in front
            return window_ok(m, addr, last_byte, base, end, self.primitive, f"p{p}_{ch}_win")

        oow, oow_client = Signal(name=f"p{p}_oow"), Signal(range(len(self.clients)), name=f"p{p}_oow_client")
        err, err_client = Signal(name=f"p{p}_err"), Signal(range(len(self.clients)), name=f"p{p}_err_client")
        rd_out = Signal(range(256 * 8 + 1), name=f"p{p}_rd_out")     # read bursts in flight
        wr_out = Signal(range(256 * 8 + 1), name=f"p{p}_wr_out")     # write bursts in flight
        busy_parts = []

        # ---------------------------------------------------------------- reads
        if readers:
            hold, held, checked, ok, ar_fire = self._address(m, p, "ar", ports, readers, in_window)
            # A bad burst: answered here once the port's earlier reads have completed.
            resp_beat = Signal(9, name=f"p{p}_rresp_beat")
            responding = Signal(name=f"p{p}_rresp_active")
            with m.If(held & checked & ~ok & ~responding & (rd_out == 0)):
                m.d.sync += [responding.eq(1), resp_beat.eq(0)]
                m.d.comb += oow.eq(1)
                for k in range(n):
                    with m.If(hold.slot == k):
                        m.d.comb += oow_client.eq(idx[k])

            # R: from the HP port by ID, or from the responder.
            r_slot = Signal(range(max(n, 2)), name=f"p{p}_r_slot")
            r_fire = Signal(name=f"p{p}_r_fire")
            m.d.comb += r_slot.eq(hp.rid[cid:cid + sbits] if n > 1 else 0)
            bad_seen = Signal(n, name=f"p{p}_r_bad")
            for k in readers:
                c = ports[k]
                # R data: the HP port's lines in every cycle, a refused burst's beats too (their
                # data is not defined: DECERR; every client counts the error and no client keeps
                # such a beat's data as valid).  Round 26: zeroing them cost a LUT per data bit of
                # every reader (~0.6 K in the top).
                m.d.comb += c.rdata.eq(hp.rdata)
                with m.If(responding):
                    m.d.comb += [c.rvalid.eq(hold.slot == k), c.rresp.eq(Resp.DECERR),
                                 c.rid.eq(hold.id), c.rlast.eq(resp_beat == hold.len)]
                with m.Else():
                    m.d.comb += [c.rvalid.eq(hp.rvalid & (r_slot == k)),
                                 c.rresp.eq(hp.rresp), c.rlast.eq(hp.rlast), c.rid.eq(hp.rid[:cid])]
                    with m.If(r_slot == k):
                        m.d.comb += hp.rready.eq(c.rready)
                with m.If(responding & (hold.slot == k) & c.rready):
                    m.d.sync += resp_beat.eq(resp_beat + 1)
                    with m.If(resp_beat == hold.len):
                        m.d.sync += [responding.eq(0), held.eq(0)]
            m.d.comb += r_fire.eq(hp.rvalid & hp.rready)
            beat_bad = hp.rresp != Resp.OKAY
            # (the client of the R beat whether or not it errs: the ID's, not behind the beat's
            # handshake; it names the client only with ``err``)
            for k in readers:
                with m.If(r_slot == k):
                    m.d.comb += err_client.eq(idx[k])
            for k in readers:
                with m.If(r_fire & (r_slot == k)):
                    with m.If(hp.rlast):
                        m.d.sync += bad_seen[k].eq(0)
                        with m.If(bad_seen[k] | beat_bad):
                            m.d.comb += err.eq(1)
                    with m.Else():
                        m.d.sync += bad_seen[k].eq(bad_seen[k] | beat_bad)
            # (a burst's last beat leaves the count a cycle later, through a register: issue 14,
            # the client's RREADY went through the R handshake into the count's adder.  The
            # count is never lower than the bursts in flight: the port idle and a bad burst
            # answered a cycle later after a read burst)
            r_done = Signal(name=f"p{p}_r_done")
            m.d.sync += [r_done.eq(r_fire & hp.rlast), rd_out.eq(rd_out + ar_fire - r_done)]
            r_fire_q = Signal(name=f"p{p}_r_fire_q")
            m.d.sync += [r_fire_q.eq(r_fire), self.rd_bytes[p].eq(Mux(r_fire_q, nbytes, 0))]
            busy_parts += [held, rd_out != 0]
        else:
            r_fire = Const(0)

        # ---------------------------------------------------------------- writes
        if writers:
            # W order: the slot of every accepted burst (good ones only; a bad one is handled alone).
            # (a PrefetchFIFO: the pop at a burst's last W beat, behind the client's WVALID and the
            # port's WREADY, reaches only its output registers, not a level counter)
            m.submodules[f"p{p}_w_order"] = w_order = PrefetchFIFO(max(sbits, 1), self.max_writes, exact=True)
            hold, held, checked, ok, aw_fire = self._address(m, p, "aw", ports, writers, in_window,
                                                             gate=w_order.w_rdy)
            m.d.comb += [w_order.w_data.eq(hold.slot), w_order.w_en.eq(aw_fire)]

            # A bad burst: once every earlier burst has its data and response, take and drop
            # its W beats, then answer one DECERR B.
            dropping = Signal(name=f"p{p}_w_drop")
            b_pending = Signal(name=f"p{p}_b_pending")
            with m.If(held & checked & ~ok & ~dropping & ~b_pending & (wr_out == 0) & ~w_order.o.valid):
                m.d.sync += dropping.eq(1)
                for k in range(n):
                    with m.If(hold.slot == k):
                        m.d.comb += [oow.eq(1), oow_client.eq(idx[k])]

            # W: from the client at the head of the order FIFO (or the one being dropped).
            w_slot = Signal(range(max(n, 2)), name=f"p{p}_w_slot")
            m.d.comb += w_slot.eq(w_order.o.payload)
            w_fire = Signal(name=f"p{p}_w_fire")
            for k in writers:
                c = ports[k]
                with m.If(dropping):
                    with m.If(hold.slot == k):
                        m.d.comb += c.wready.eq(1)
                        with m.If(c.wvalid & c.wlast):
                            m.d.sync += [dropping.eq(0), b_pending.eq(1)]
                with m.Elif(w_order.o.valid & (w_slot == k)):
                    m.d.comb += [hp.wvalid.eq(c.wvalid), hp.wdata.eq(c.wdata), hp.wstrb.eq(c.wstrb),
                                 hp.wlast.eq(c.wlast), c.wready.eq(hp.wready)]
            m.d.comb += w_fire.eq(hp.wvalid & hp.wready)
            with m.If(w_fire & hp.wlast):
                m.d.comb += w_order.o.ready.eq(1)

            # B: by ID, or the responder's.
            b_slot = Signal(range(max(n, 2)), name=f"p{p}_b_slot")
            m.d.comb += b_slot.eq(hp.bid[cid:cid + sbits] if n > 1 else 0)
            b_fire = Signal(name=f"p{p}_b_fire")
            for k in writers:
                c = ports[k]
                with m.If(b_pending):
                    m.d.comb += [c.bvalid.eq(hold.slot == k), c.bresp.eq(Resp.DECERR), c.bid.eq(hold.id)]
                    with m.If((hold.slot == k) & c.bready):
                        m.d.sync += [b_pending.eq(0), held.eq(0)]
                with m.Else():
                    m.d.comb += [c.bvalid.eq(hp.bvalid & (b_slot == k)), c.bresp.eq(hp.bresp),
                                 c.bid.eq(hp.bid[:cid])]
                    with m.If(b_slot == k):
                        m.d.comb += hp.bready.eq(c.bready)
            m.d.comb += b_fire.eq(hp.bvalid & hp.bready)
            for k in writers:
                with m.If(b_fire & (b_slot == k) & (hp.bresp != Resp.OKAY)):
                    m.d.comb += [err.eq(1), err_client.eq(idx[k])]
            m.d.sync += wr_out.eq(wr_out + aw_fire - b_fire)
            w_strb_q, w_fire_q = Signal(nbytes, name=f"p{p}_wstrb_q"), Signal(name=f"p{p}_w_fire_q")
            m.d.sync += [w_strb_q.eq(hp.wstrb), w_fire_q.eq(w_fire)]
            m.d.sync += self.wr_bytes[p].eq(Mux(w_fire_q, sum(w_strb_q[i] for i in range(nbytes)), 0))
            busy_parts += [held, wr_out != 0, w_order.o.valid]
        else:
            w_fire = Const(0)

        idle = Signal(name=f"p{p}_idle")
        m.d.comb += idle.eq(~Cat(*busy_parts).any())
        act = Signal(name=f"p{p}_act")
        m.d.comb += act.eq(r_fire | w_fire)
        return (oow, oow_client), (err, err_client), idle, act
