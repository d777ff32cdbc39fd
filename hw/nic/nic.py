"""The metadata-driven compute-NIC of one node (MCF section 5; design notes in docs/nic.md).

    rx[0..P-1], local_in ──► IngressPort ×(P+1) ─┬─► EgressPort ×P ──► tx[0..P-1]
      (parse, decode, route, check, buffer)      ├─► EgressPort ──────► local_out
                      ┌─► IngressPort (results) ─┤
                      │                          └─► EgressPort ─► ReduceEngine ─┐
                      └──────────────────────────────────────────────────────────┘

Every packet is routed by ``route_id`` through the route table the NIC owns (the register
block writes and reads it through ``route``).  Errors are strobes on ``errors`` (bit i = one
event of ``ErrorCause(i)`` this cycle), counted by the register block.
"""
from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from mcf import spec
from mcf.spec import packet as wire
from mcf.hw.axis import AXIStreamSignature
from mcf.hw.csr.ports import RouteTablePort
from mcf.hw.layouts import RouteEntryLayout
from mcf.hw.nic.common import ROUTE_WORD_BITS
from mcf.hw.nic.egress import EgressPort
from mcf.hw.nic.ingress import N_CAUSES, IngressPort
from mcf.hw.nic.reduce import ReduceEngine, same_key
from mcf.hw.packet.header import HeaderDeserializer
from mcf.hw.registry import block
from mcf.spec.node import RANGES as NODE_RANGES
from mcf.spec.params import Range


class Nic(wiring.Component):
    """P network ports + one local port.

    Parameters: ``data_width`` (bits), ``net_ports`` (P), ``buffer_depth`` (beats buffered
    per input; also the longest payload accepted), ``desc_depth`` (packets buffered per
    input), ``route_entries`` (route table size), ``reduce_slots`` (reductions in progress
    at once), ``reduce_beats`` (longest reduction payload, in beats), ``softmax_fan_in``
    (most contributions of one SOFTMAX_MERGE; 0 builds no softmax merge), ``state_words``
    (words per (m, l, o) row: head_dim + 2; 130 for Qwen2.5-1.5B).
    """

    def __init__(self, data_width: int = 64, net_ports: int = 3, buffer_depth: int = 256,
                 desc_depth: int = 16, route_entries: int = spec.ROUTE_TABLE_ENTRIES,
                 reduce_slots: int = 4, reduce_beats: int = 128, softmax_fan_in: int = 4,
                 state_words: int = 130, primitive: bool = False):
        if not 1 <= route_entries <= spec.ROUTE_TABLE_ENTRIES or route_entries & (route_entries - 1):
            raise ValueError(f"route_entries={route_entries}: a power of two <= {spec.ROUTE_TABLE_ENTRIES}")
        self.data_width = data_width
        self.net_ports = net_ports
        self.buffer_depth = buffer_depth
        self.desc_depth = desc_depth
        self.route_entries = route_entries
        self.reduce_slots = reduce_slots
        self.reduce_beats = reduce_beats
        self.softmax_fan_in = softmax_fan_in
        self.state_words = state_words
        self.primitive = primitive          # (round 30, the node's build) the slot key compares as LUT6 instances
        for name, v in (("buffer_depth", buffer_depth), ("reduce_beats", reduce_beats)):
            if v < 2 or v & (v - 1):
                raise ValueError(f"{name}={v}: must be a power of two >= 2")
        if not 1 <= net_ports <= spec.ROUTE_ENTRY["port_mask"].width:
            raise ValueError(f"net_ports={net_ports}: 1..{spec.ROUTE_ENTRY['port_mask'].width}")
        if reduce_beats > buffer_depth:
            raise ValueError(f"reduce_beats={reduce_beats} > buffer_depth={buffer_depth}: a result "
                             "must fit the buffer it leaves from")
        if softmax_fan_in and (softmax_fan_in < 2 or softmax_fan_in & (softmax_fan_in - 1)):
            raise ValueError(f"softmax_fan_in={softmax_fan_in}: 0 (off) or a power of two >= 2")
        if reduce_slots < 1 or desc_depth < 2:
            raise ValueError("reduce_slots must be >= 1 and desc_depth >= 2")
        if data_width % wire.REDUCE_WORD_BITS:
            raise ValueError(f"data_width={data_width}: must hold whole 32-bit words")
        axis = AXIStreamSignature(data_width)
        super().__init__({
            "rx": In(axis).array(net_ports),
            "tx": Out(axis).array(net_ports),
            "local_in": In(axis),
            "local_out": Out(axis),
            "route": In(RouteTablePort()),
            "errors": Out(N_CAUSES),
            "node_id": In(wire.NODE_BITS),
            "num_nodes": In(wire.NODE_BITS + 1),
            "enable": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        w, P = self.data_width, self.net_ports
        n_in, n_out = P + 2, P + 2
        LOCAL, REDUCE = P, P + 1      # outputs
        RESULT = P + 1                # input: reduction results

        # --- route table: written/read by the register block, read by every ingress ----
        # (round 29: in UltraRAM -- a 4 096 x 72 block holds a copy of the full table, where block
        # RAM takes four 4 096 x 9 a copy, and the table is copied per read port: the CSR's and one
        # an ingress; the block RAM it frees holds the weight loaders' buffers, LUT RAM before.
        # The reduction engine reads only ``fan_in``: a copy of that field alone, one 4 096 x 9
        # block RAM, not a fifth UltraRAM -- the K26's 80 % allows 51)
        big = self.route_entries * ROUTE_WORD_BITS > 36 * 1024
        m.submodules.routes = routes = Memory(shape=ROUTE_WORD_BITS, depth=self.route_entries, init=[],
                                              attrs={"ram_style": "ultra"} if big else {})
        abits = (self.route_entries - 1).bit_length()
        wp = routes.write_port()
        in_table = (self.route.addr >> abits) == 0 if abits < wire.ROUTE_ID_BITS else 1
        m.d.comb += [wp.addr.eq(self.route.addr[:abits]), wp.data.eq(self.route.w_data),
                     wp.en.eq(self.route.w_en & in_table)]
        csr_rp = routes.read_port()
        m.d.comb += [csr_rp.addr.eq(self.route.addr[:abits]), csr_rp.en.eq(self.route.r_en),
                     self.route.r_data.eq(csr_rp.data)]

        def lookup_port(iface):
            rp = routes.read_port()
            m.d.comb += [rp.addr.eq(iface.addr[:abits]), iface.entry.eq(rp.data)]

        def fan_in_port(iface):
            """A look-up of ``fan_in`` alone (the other fields read 0)."""
            if not big:
                return lookup_port(iface)
            field = RouteEntryLayout["fan_in"]
            m.submodules.route_fan_in = fan = Memory(shape=field.shape, depth=self.route_entries, init=[])
            fwp, rp = fan.write_port(), fan.read_port()
            m.d.comb += [fwp.addr.eq(wp.addr), fwp.en.eq(wp.en),
                         fwp.data.eq(wp.data[field.offset:field.offset + field.width]),
                         rp.addr.eq(iface.addr[:abits]), iface.entry.fan_in.eq(rp.data)]

        # --- ingress -------------------------------------------------------------------
        ing = []
        for i in range(n_in):
            role = "local" if i == LOCAL else "result" if i == RESULT else "net"
            port = IngressPort(w, P, self.buffer_depth, self.desc_depth, self.route_entries,
                               self.reduce_beats, role=role, softmax_fan_in=self.softmax_fan_in)
            m.submodules[f"ingress{i}"] = port
            ing.append(port)
            m.d.comb += [port.node_id.eq(self.node_id), port.num_nodes.eq(self.num_nodes)]
            lookup_port(port.lookup)
        for i, src in enumerate(list(self.rx) + [self.local_in]):
            # While disabled the NIC accepts nothing (CONTROL.enable).
            port = ing[i]
            m.d.comb += [port.i.tdata.eq(src.tdata), port.i.tkeep.eq(src.tkeep),
                         port.i.tlast.eq(src.tlast), port.i.tvalid.eq(src.tvalid & self.enable),
                         src.tready.eq(port.i.tready & self.enable)]

        # --- egress: one per output ------------------------------------------------------
        egs = []
        for j in range(n_out):
            eg = EgressPort(w, n_in, n_out, self.buffer_depth)
            m.submodules[f"egress{j}"] = eg
            egs.append(eg)
            for i in range(n_in):
                m.d.comb += [eg.heads[i].eq(ing[i].head),
                             ing[i].rd[j].addr.eq(eg.rd[i].addr), ing[i].rd[j].en.eq(eg.rd[i].en),
                             ing[i].rd[j].zero.eq(eg.rd[i].zero),
                             eg.rd[i].data.eq(ing[i].rd[j].data)]
        for i in range(n_in):
            m.d.comb += ing[i].done.eq(Cat(egs[j].done[i] for j in range(n_out)))
        for j in range(n_out):
            if j != REDUCE:
                m.d.comb += egs[j].pending.eq(Cat(ing[i].pending[j] for i in range(n_in)))
        for p in range(P):
            wiring.connect(m, egs[p].o, wiring.flipped(self.tx[p]))
        wiring.connect(m, egs[LOCAL].o, wiring.flipped(self.local_out))

        # --- reduction engine --------------------------------------------------------------
        m.submodules.reduce_deser = rdes = HeaderDeserializer(w)
        m.submodules.reduce = red = ReduceEngine(w, self.reduce_slots, self.reduce_beats,
                                                      self.softmax_fan_in, self.state_words, self.primitive)
        wiring.connect(m, egs[REDUCE].o, rdes.i)
        wiring.connect(m, rdes.meta, red.meta)
        wiring.connect(m, rdes.o, red.payload)
        m.d.comb += red.node_id.eq(self.node_id)
        fan_in_port(red.lookup)     # (it reads only the fan-in)
        # Only a contribution that has a slot (an open one with its key, or a free one) is
        # sent, and no other until it is placed: the engine never holds the egress waiting
        # for a slot, so contributions of other reductions keep moving.  (Once placed, the
        # slot state is current; the next one streams in while this one is folded.)
        inflight = Signal()
        with m.If(egs[REDUCE].start):
            m.d.sync += inflight.eq(1)
        with m.Elif(red.placed):
            m.d.sync += inflight.eq(0)
        # The egress's grant is a cycle old: ``hold`` keeps it from starting a second
        # contribution in the cycle after one started.
        for j in range(n_out):
            m.d.comb += egs[j].hold.eq(inflight if j == REDUCE else 0)
        # The slot check is registered (a key compare against every slot): ``slot_ok_q[i]``
        # is last cycle's answer, used only when neither the slots (a valid bit flipped: a
        # slot opened or released) nor input i's head (popped or arriving) changed since.
        free_slot = ~red.slot_valid.all()
        slot_valid_q = Signal.like(red.slot_valid)
        m.d.sync += slot_valid_q.eq(red.slot_valid)
        slots_same = red.slot_valid == slot_valid_q
        for i in range(n_in):
            has_slot = Cat(red.slot_valid[s] & same_key(red.slot_meta[s], ing[i].head.meta, m, self.primitive,
                                                        f"slot{s}_in{i}_eq")
                           for s in range(self.reduce_slots)).any()
            slot_ok_q = Signal(name=f"slot_ok_q{i}")
            head_same = Signal(name=f"head_same{i}")
            m.d.sync += [slot_ok_q.eq(has_slot | free_slot),
                         head_same.eq(ing[i].head_valid & ~ing[i].head_pop)]
            m.d.comb += egs[REDUCE].pending[i].eq(ing[i].pending[REDUCE] & ~inflight & slot_ok_q
                                                  & head_same & slots_same)

        # Results re-enter like packets (a REDUCE result leaves per its route, e.g. towards
        # the next level of a reduction tree; an ALL_REDUCE result is delivered locally).
        # Through a register stage: the result's last-beat keep comes from the reduction's
        # header (its length), which the ingress would otherwise check in the same cycle.
        r = ing[RESULT].i
        with m.If(~r.tvalid | r.tready):
            m.d.sync += [r.tvalid.eq(red.o.tvalid), r.tdata.eq(red.o.tdata), r.tkeep.eq(red.o.tkeep),
                         r.tlast.eq(red.o.tlast)]
        m.d.comb += red.o.tready.eq(~r.tvalid | r.tready)

        # --- error strobes: one event per cause per cycle; lower inputs first ------------
        for i in range(n_in):
            blocked = 0
            for j in range(i):
                blocked = blocked | (ing[j].err.valid & (ing[j].err.payload == ing[i].err.payload))
            m.d.comb += ing[i].err.ready.eq(~blocked)
        for c in range(N_CAUSES):
            m.d.comb += self.errors[c].eq(Cat(p.err.valid & (p.err.payload == c) for p in ing).any())
        return m


@block("nic", "metadata-driven NIC: P network ports + local port, route table, multicast, reduction",
       variants=({"data_width": 128},), data_width=64, net_ports=3, buffer_depth=256,
       desc_depth=16, route_entries=spec.ROUTE_TABLE_ENTRIES, reduce_slots=4, reduce_beats=128,
       softmax_fan_in=4, state_words=130,
       ranges={"net_ports": Range(1, spec.ROUTE_ENTRY["port_mask"].width), "buffer_depth": NODE_RANGES["nic_buffer_depth"],
               "desc_depth": NODE_RANGES["nic_desc_depth"], "state_words": Range(3, 1026)})
def _nic(**params):
    return Nic(**params)
