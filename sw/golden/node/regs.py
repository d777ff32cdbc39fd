"""A simulated node's register block: ``read32`` / ``write32`` at the offsets of
``mcf.spec.regmap`` with the semantics of the node's CSR (ID, VERSION, CAPS, CONTROL, STATUS,
NODE_ID, NUM_NODES, the DMA window, the free-running cycle counter, the error counters, the
route table, the interrupts and the sequencer's SEQ_* window), so that ``mcf.sw.driver.Driver``
drives an ISA-simulated node with the code that drives the RTL and a board.

``pause()`` advances the whole cluster (every node's backend shares one ``ClusterSim``) until a
node stops or ``poll_cycles`` pass.  The PS-driven Meta / DMA queues of the datapath are not
modelled: pushing to them answers SLVERR (``RegisterError``).
"""
from __future__ import annotations

from mcf.spec import REGISTERS
from mcf.spec.isa import Opcode, Queue
from mcf.spec.regmap import ID_VALUE, ErrorCause, Irq
from mcf.spec import SPEC_VERSION

from ..nic import RouteEntry
from .cluster import ClusterSim

_MASK32 = (1 << 32) - 1


class RegisterError(OSError):
    """The register block answered SLVERR (unmapped or unmodelled register)."""


def _log2(v: int) -> int:
    return max(0, int(v).bit_length() - 1)


class NodeRegisters:
    """The register backend of node ``node`` of ``cluster``."""

    def __init__(self, cluster: ClusterSim, node: int, poll_cycles: int = 4096):
        self.cluster, self.poll_cycles, self.index = cluster, poll_cycles, node
        self.node = cluster.nodes[node]
        self.words = {r.name: r.reset for r in REGISTERS}
        self.irq_status = 0
        self.perf_hi = 0
        self._seen = self.node.state
        cfg = self.node.cfg
        self.words["CAPS"] = REGISTERS["CAPS"].encode(
            data_bytes=cfg.data_bytes, net_ports=cfg.net_ports, meta_queue_log2=_log2(cfg.meta_queue_depth),
            desc_queue_log2=_log2(cfg.desc_queue_depth))
        self.words["DMA_CAPS"] = REGISTERS["DMA_CAPS"].encode(
            bus_bytes_log2=_log2(cfg.data_bytes), buffers=cfg.buffers, buffer_bytes_log2=_log2(cfg.buffer_bytes))
        self.words["SEQ_CAPS"] = REGISTERS["SEQ_CAPS"].encode(
            num_sems=cfg.num_sems, rx_slots=cfg.rx_slots, queue_log2=_log2(cfg.seq_queue_depth),
            hp_ports=cfg.hp_ports, max_payload_log2=_log2(cfg.max_payload), exec=1)
        n = self.node
        self.words["FAULT_MASK"], self.words["WATCHDOG"], self.words["RX_WAIT"] = n.fault_mask, n.watchdog, n.rx_wait

    # --- the backend interface --------------------------------------------------------------------
    async def read32(self, offset: int) -> int:
        return self._read(self._reg(offset)) & _MASK32

    async def write32(self, offset: int, value: int) -> None:
        self._write(self._reg(offset), int(value) & _MASK32)

    async def pause(self) -> None:
        """Let the cluster run a little (until a node stops, or poll_cycles)."""
        c = self.cluster
        states = [m.state for m in c.nodes]
        c.run(self.poll_cycles, until=lambda: [m.state for m in c.nodes] != states)
        self._note()

    # --- semantics ----------------------------------------------------------------------------------
    def _reg(self, offset: int):
        reg = REGISTERS.by_offset.get(offset)
        if reg is None:
            raise RegisterError(f"register offset {offset:#06x}: unmapped (SLVERR)")
        return reg

    def _note(self) -> None:
        st = self.node.state
        if st != self._seen:
            if st == "done":
                self.irq_status |= 1 << Irq.SEQ_DONE
            elif st == "fault":
                self.irq_status |= 1 << Irq.SEQ_FAULT
            self._seen = st
        if any(self.node.errors.values()):
            self.irq_status |= 1 << Irq.ERROR

    def _read(self, reg) -> int:
        n, name = self.node, reg.name
        self._note()
        if name == "ID":
            return ID_VALUE
        if name == "VERSION":
            return SPEC_VERSION
        if name == "STATUS":
            return reg.encode(busy=int(n.running), meta_queue_empty=1, desc_queue_empty=1,
                              error=int(any(n.errors.values())))
        if name == "NODE_ID":
            return n.node_id
        if name == "NUM_NODES":
            return n.num_nodes
        if name == "IRQ_STATUS":
            return self.irq_status
        if name in ("CYCLES_LO", "CYCLES_HI"):
            return self.cluster.now & _MASK32 if name == "CYCLES_LO" else self.cluster.now >> 32
        if name.startswith("ERR_"):
            return n.errors[ErrorCause[name[4:]]]
        if name == "DMA_WINDOW_BASE_LO":
            return n.window_base & _MASK32
        if name == "DMA_WINDOW_BASE_HI":
            return n.window_base >> 32
        if name == "DMA_WINDOW_SIZE_LO":
            return n.window_size & _MASK32
        if name == "DMA_WINDOW_SIZE_HI":
            return n.window_size >> 32
        if name == "ROUTE_DATA":
            e = n.routes.get(self.words["ROUTE_INDEX"])
            return 0 if e is None else e.word()
        if name == "PROG_BASE_LO":
            return n.prog_base & _MASK32
        if name == "PROG_BASE_HI":
            return n.prog_base >> 32
        if name == "PROG_COUNT":
            return n.prog_count
        if name == "SEQ_STATUS":
            return reg.encode(running=int(n.running), done=int(n.state == "done"), fault=int(n.state == "fault"),
                              idle=int(not n.running), start_pending=0, fault_cause=int(n.fault_cause))
        if name == "SEQ_PC":
            return n.pc
        if name == "SEQ_FAULT_PC":
            return n.fault_pc
        if name == "SEQ_WAIT":
            return self._seq_wait()
        if name == "SEQ_LEVELS":
            return reg.encode(ex=len(n.queues[Queue.EX]), tx=len(n.queues[Queue.TX]), rx=len(n.queues[Queue.RX]),
                              posted=len(n.rx_table))
        if name == "FAULT_MASK":
            return n.fault_mask
        if name == "WATCHDOG":
            return n.watchdog
        if name == "RX_WAIT":
            return n.rx_wait
        if name == "SEM_DATA":
            i = self.words["SEM_INDEX"]
            return int(n.sems[i]) if i < len(n.sems) else 0
        if name == "DIR_DATA":
            i = self.words["DIR_INDEX"]
            return int(n.directory[i]) if i < len(n.directory) else 0
        if name == "PERF_LO":
            i = self.words["PERF_INDEX"]
            v = int(n.perf[i]) if i < len(n.perf) else 0
            if i == 0 and n.running:
                v = self.cluster.now - n.start_time
            self.perf_hi = v >> 32
            return v & _MASK32
        if name == "PERF_HI":
            return self.perf_hi
        if name in ("META_PUSH", "DESC_PUSH", "DESC_DONE", "META_LEVEL", "DESC_LEVEL"):
            return 0
        return self.words[name]

    def _seq_wait(self) -> int:
        n = self.node
        f = {}
        for q in Queue:
            h = n.head(q)
            if h is not None and h[1].wait_cnt and n.sems[h[1].wait_sem] < h[1].wait_cnt:
                f[f"{q.name.lower()}_sem_wait"] = 1
                f[f"{q.name.lower()}_sem"] = h[1].wait_sem
        h = n.head(Queue.RX)
        if h is not None and h[1].OPCODE == Opcode.RECV and len(n.rx_table) >= n.cfg.rx_slots:
            f["rx_slot"] = 1
        f["ex_busy"] = int(n.busy[Queue.EX] is not None)
        f["tx_busy"] = int(n.busy[Queue.TX] is not None)
        h = n.head(Queue.EX)
        f["end"] = int(h is not None and h[1].OPCODE == Opcode.END)
        return REGISTERS["SEQ_WAIT"].encode(**f)

    def _write(self, reg, value: int) -> None:
        n, name = self.node, reg.name
        if reg.access.value == "RO":
            raise RegisterError(f"{name} is read-only (SLVERR)")
        value &= reg.mask
        if name in ("META_PUSH", "DESC_PUSH"):
            raise RegisterError(f"{name}: the PS-driven datapath is not modelled by the ISA simulator (SLVERR)")
        if name == "IRQ_STATUS":
            self.irq_status &= ~value
            return
        if name == "CONTROL":
            if reg.decode(value)["clear_counters"]:
                for c in n.errors:
                    n.errors[c] = 0
            value &= ~reg.field("clear_counters").mask
        self.words[name] = value
        if name == "NODE_ID":
            n.node_id = value
        elif name == "NUM_NODES":
            n.num_nodes = value
        elif name == "DMA_WINDOW_BASE_LO":
            n.window_base = (n.window_base & ~_MASK32) | value
        elif name == "DMA_WINDOW_BASE_HI":
            n.window_base = (n.window_base & _MASK32) | (value << 32)
        elif name == "DMA_WINDOW_SIZE_LO":
            n.window_size = (n.window_size & ~_MASK32) | value
        elif name == "DMA_WINDOW_SIZE_HI":
            n.window_size = (n.window_size & _MASK32) | (value << 32)
        elif name == "ROUTE_DATA":
            f = REGISTERS["ROUTE_DATA"].decode(value)
            n.routes[self.words["ROUTE_INDEX"]] = RouteEntry(port_mask=f["port_mask"], local=f["local"],
                                                             fan_in=f["fan_in"], valid=f["valid"])
        elif name == "PROG_BASE_LO":
            n.prog_base = (n.prog_base & ~_MASK32) | value
        elif name == "PROG_BASE_HI":
            n.prog_base = (n.prog_base & _MASK32) | (value << 32)
        elif name == "PROG_COUNT":
            n.prog_count = value
        elif name == "SEQ_CONTROL":
            f = reg.decode(value)
            if f["abort"]:
                n.abort()
            if f["start"] and not n.running:
                self.cluster.start([self.index])
                self._seen = n.state
            self.words[name] = 0
        elif name == "FAULT_MASK":
            n.fault_mask = value
        elif name == "WATCHDOG":
            n.watchdog = value
        elif name == "RX_WAIT":
            n.rx_wait = value

