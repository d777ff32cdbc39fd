"""The AXI4-Lite register map of one MCF node (32-bit registers, byte addresses).

The PS runtime (``mcf.sw.driver``), the RTL register block and ``docs/reference.md`` all
read this table.  Unmapped addresses answer SLVERR; writes to read-only registers are
ignored and answer SLVERR too.  Writes honour WSTRB (byte lanes not strobed keep their value).

DMA descriptors are validated when DESC_PUSH is written: a descriptor with length 0, a
buffer index the node does not have, an address range outside DMA_WINDOW, an address that is
not a multiple of the DMA bus width (DMA_CAPS.bus_bytes_log2), or a LOAD longer than one
ping-pong buffer (DMA_CAPS.buffer_bytes_log2) is refused: its ERR_* counter counts it (one
cause per refused descriptor, in ErrorCause order) and nothing reaches the DMA engines.
Lengths need not be a multiple of the bus width: the last beat is partial (TKEEP on the
loader's stream, WSTRB on the writer's bursts).

The ``SEQ_*`` and following registers (from ``SEQ_BASE``) belong to the sequencer
(``mcf.spec.isa``): PROG_BASE / PROG_COUNT name the program, SEQ_CONTROL starts and aborts it,
SEQ_STATUS / SEQ_PC / SEQ_WAIT tell how it is doing, SEM_* / DIR_* / PERF_* read semaphores,
the replica directory and the performance counters through an index register.  A block
built without a sequencer answers SLVERR there.  While a program runs, the sequencer's
engines own the DMA loader, the DMA writer and the packetizer: the metadata and descriptor
queues above hold their entries until it stops (done or fault), and a start waits until
they are empty and no transfer is in flight (SEQ_STATUS.idle).  While no program runs, a
delivered data packet takes the next STORE descriptor (its payload is written at the
descriptor's address; a packet longer than the descriptor is dropped as RX_OVERFLOW; one
that finds no STORE within RX_WAIT cycles is dropped as RX_UNEXPECTED).

Access kinds: RO read-only, RW read/write, WO write-only (reads return 0), W1C write one
to clear, W1P write one to pulse (self-clearing strobe), RSUB a counter that a write
decrements by the value written (saturating at 0): writing back the value just read clears
exactly the events that were seen, none that arrived in between.

The ``ETH_*`` registers belong to the node's 10GBASE-R port (``mcf.spec.eth``); a node
built without one reads 0 there and ignores writes to the MAC table.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .bits import BitLayout, Field, SpecError
from .eth import MAC_BITS, MAC_TABLE_ENTRIES, SEQ_BITS as LINK_SEQ_BITS
from .isa import DDR_ALIGN, PerfCounter, SEM_BITS, SEM_MAX, SeqFault
from . import eth, fixed, isa, kv, packet, plan
from .bits import fingerprint
from .packet import HEADER_BITS, NODE_BITS, ROUTE_ID_BITS
from .plan import REPLICA_STATE_BITS

DATA_BITS = 32
ADDR_BITS = 16          # a 64 KiB AXI-Lite window per node
ID_VALUE = 0x4D434631   # "MCF1"


class Access(enum.Enum):
    RO = "RO"
    RW = "RW"
    WO = "WO"
    W1C = "W1C"
    W1P = "W1P"
    RSUB = "RSUB"


class ErrorCause(enum.IntEnum):
    """Per-cause drop/refusal counters (one 32-bit saturating counter each)."""
    BAD_HEADER = 0          # magic, reserved bits or check byte wrong
    UNKNOWN_OP = 1          # op / stage / collective / reduce_op not a defined value
    BAD_ROUTE = 2           # route_id names an invalid route table entry
    BAD_DST = 3             # dst >= NUM_NODES
    SHORT_PACKET = 4        # TLAST before the header or payload length was complete
    LONG_PACKET = 5         # more payload than Meta.length says
    META_QUEUE_FULL = 6     # PS wrote a full metadata queue (write refused)
    DESC_QUEUE_FULL = 7     # PS wrote a full DMA descriptor queue (write refused)
    DESC_ZERO_LENGTH = 8    # DMA descriptor with length 0
    DESC_OUT_OF_WINDOW = 9  # DMA address range outside the allowed window
    DESC_BAD_BUFFER = 10    # DMA descriptor names a buffer that does not exist
    AXI_RESP_ERROR = 11     # DDR answered SLVERR/DECERR
    DESC_UNALIGNED = 12     # DMA address not a multiple of the DMA bus width
    DESC_TOO_LONG = 13      # DMA LOAD longer than one ping-pong buffer
    ETH_BAD_FCS = 14        # received frame with a wrong FCS, a bad preamble/SFD or an error character
    ETH_RUNT = 15           # received frame shorter than 64 bytes (FCS included)
    ETH_OVERSIZE = 16       # received frame longer than the port's maximum frame
    ETH_RX_OVERFLOW = 17    # received frame dropped: the RX frame FIFO was full
    ETH_TX_OVERSIZE = 18    # packet too long for one frame (or the TX FIFO): dropped before the MAC
    ETH_NOT_MCF = 19        # received frame of another EtherType (dropped)
    ETH_SEQ_GAP = 20        # link sequence number skipped (frames lost; ETH_SEQ_GAPS counts them)
    ETH_BLOCK_LOCK_LOSS = 21  # the PCS lost 64b/66b block lock
    ETH_HI_BER = 22         # the PCS BER monitor saw >= 16 bad sync headers in 125 us
    RX_UNEXPECTED = 23      # data packet whose tag matched no posted RECV within RX_WAIT cycles (dropped)
    RX_OVERFLOW = 24        # data packet longer than what its RECV still expects (dropped)
    RX_BAD_CONTROL = 25     # control packet with a payload or a semaphore out of range, or a
                            # header-only packet that is not a control op (dropped)


class Irq(enum.IntEnum):
    """Bits of IRQ_ENABLE / IRQ_STATUS."""
    DESC_DONE = 0
    META_QUEUE_EMPTY = 1
    ERROR = 2
    RX_PACKET = 3
    SEQ_DONE = 4        # the sequencer completed END
    SEQ_FAULT = 5       # the sequencer stopped on a fault (SEQ_STATUS.fault_cause)


class LinkStatus(enum.IntEnum):
    """Bits of ETH_STATUS (the SFP+ module pins and the 10GBASE-R receiver, synchronised to
    the node clock)."""
    MODULE_ABSENT = 0   # SFP+ MOD_ABS pin: no module in the cage
    RX_LOS = 1          # SFP+ RX_LOS pin: the module sees no light / signal
    TX_FAULT = 2        # SFP+ TX_FAULT pin: the module's transmitter failed
    BLOCK_LOCK = 3      # the PCS has 64b/66b block lock
    HI_BER = 4          # the PCS BER monitor reports a high bit error rate
    LINK_UP = 5         # block lock, no high BER, a module present and a signal received


class DmaDir(enum.IntEnum):
    LOAD = 0    # DDR -> ping-pong buffer
    STORE = 1   # on-chip result / KV block -> DDR


#: One DMA descriptor as the hardware queue stores it (written through DESC_* registers).
DMA_DESCRIPTOR = BitLayout("DmaDescriptor", [
    Field("addr", 48, "Byte address in DDR (the PS physical address space is 40 bits)."),
    Field("length", 32, "Transfer length in bytes, > 0."),
    Field("buffer", 4, "Target ping-pong buffer index (loader: 0 or 1)."),
    Field("dir", 1, "Transfer direction.", enum=DmaDir),
    Field("tag", 11, "Free tag, returned in DESC_DONE_TAG when the transfer completes."),
], doc="DMA descriptor, 96 bits.")

@dataclass(frozen=True)
class DmaDescriptor:
    """One DMA transfer as the runtime writes it (DMA_DESCRIPTOR layout, via DESC_W*)."""
    addr: int
    length: int
    buffer: int = 0
    dir: DmaDir = DmaDir.LOAD
    tag: int = 0

    def pack(self) -> int:
        """The descriptor word; a field out of range raises ValueError naming it."""
        return DMA_DESCRIPTOR.pack({"addr": self.addr, "length": self.length, "buffer": self.buffer,
                                    "dir": int(self.dir), "tag": self.tag})

    @classmethod
    def unpack(cls, word: int) -> "DmaDescriptor":
        f = DMA_DESCRIPTOR.unpack(word)
        return cls(f["addr"], f["length"], f["buffer"], DmaDir(f["dir"]), f["tag"])


#: One route table entry (written through ROUTE_INDEX / ROUTE_DATA).
ROUTE_ENTRY = BitLayout("RouteEntry", [
    Field("port_mask", 16, "Network output ports the packet leaves on (bit p = port p)."),
    Field("local", 1, "Deliver a copy to this node's local port."),
    Field("fan_in", 8, "Reductions: number of contributions to combine before forwarding."),
    Field("reserved", 6, "Must be zero.", reserved=True),
    Field("valid", 1, "Entry is in use; packets on an invalid route are dropped (BAD_ROUTE)."),
], doc="Route table entry, 32 bits.")


@dataclass(frozen=True)
class RegField:
    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        """The field's bits in the register word."""
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    """One 32-bit register; its fields encode and decode like a ``BitLayout``'s (a register
    without fields is one 32-bit value)."""
    name: str
    offset: int
    access: Access
    doc: str
    fields: tuple[RegField, ...] = ()
    reset: int = 0

    def field(self, name: str) -> RegField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name}")

    @property
    def mask(self) -> int:
        """Bits the register implements (all 32 when it has no fields)."""
        if not self.fields:
            return (1 << DATA_BITS) - 1
        m = 0
        for f in self.fields:
            m |= f.mask
        return m

    def encode(self, **values: int) -> int:
        """A register word from field values (fields not named are 0); a value that does not
        fit its field raises ``SpecError`` naming it."""
        word = 0
        for name, value in values.items():
            f = self.field(name)
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, int) or not 0 <= value < (1 << f.width):
                raise SpecError(f"{self.name}.{name}={value!r} does not fit in {f.width} bits")
            word |= value << f.lsb
        return word

    def decode(self, word: int) -> dict[str, int]:
        """Field values of a register word (bits outside the fields are ignored)."""
        return {f.name: (word >> f.lsb) & ((1 << f.width) - 1) for f in self.fields}


@dataclass
class RegisterMap:
    registers: list[Register] = field(default_factory=list)

    def __post_init__(self):
        seen: dict[int, str] = {}
        for r in self.registers:
            if r.offset % 4 or not 0 <= r.offset < (1 << ADDR_BITS):
                raise SpecError(f"register {r.name}: bad offset {r.offset:#x}")
            if r.offset in seen:
                raise SpecError(f"register {r.name} overlaps {seen[r.offset]} at {r.offset:#x}")
            seen[r.offset] = r.name
            used = 0
            for f in r.fields:
                if f.lsb + f.width > DATA_BITS or used & f.mask:
                    raise SpecError(f"register {r.name}: field {f.name} overlaps or overflows")
                used |= f.mask
        self.by_name = {r.name: r for r in self.registers}
        self.by_offset = {r.offset: r for r in self.registers}

    def __getitem__(self, name: str) -> Register:
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"no register named {name}") from None

    def __iter__(self):
        return iter(sorted(self.registers, key=lambda r: r.offset))


def _f(name, lsb, width, doc):
    return RegField(name, lsb, width, doc)


_LINK_DOC = {
    LinkStatus.MODULE_ABSENT: "No SFP+ module in the cage (MOD_ABS pin).",
    LinkStatus.RX_LOS: "Receiver loss of signal (RX_LOS pin).",
    LinkStatus.TX_FAULT: "Transmitter fault (TX_FAULT pin).",
    LinkStatus.BLOCK_LOCK: "64b/66b block lock (IEEE 802.3 49.2.13.2.2).",
    LinkStatus.HI_BER: "High bit error rate (49.2.13.2.4).",
    LinkStatus.LINK_UP: "Block lock, no high BER, a module present, a signal received.",
}
assert set(_LINK_DOC) == set(LinkStatus)
#: The link sequence number that ETH_SEQ_GAPS gaps are measured in.
LINK_SEQ_MODULUS = 1 << LINK_SEQ_BITS

ERROR_COUNTER_BASE = 0x0100
DMA_ADDR_BITS = DMA_DESCRIPTOR["addr"].width
#: Width of a DMA descriptor's tag (DESC_DONE_TAG, the engines' completion tags).
DMA_TAG_BITS = DMA_DESCRIPTOR["tag"].width
META_WORDS = HEADER_BITS // DATA_BITS
DESC_WORDS = (DMA_DESCRIPTOR.total_bits + DATA_BITS - 1) // DATA_BITS

#: The sequencer's registers (spec/isa.py, docs/node.md) live in their own window, which the
#: register block forwards to the sequencer.
SEQ_BASE = 0x0400
SEQ_WINDOW = range(SEQ_BASE, SEQ_BASE + 0x100)
#: Network errors that stop a running node by default (FAULT_MASK reset value).
NETWORK_FAULTS = (ErrorCause.BAD_HEADER, ErrorCause.UNKNOWN_OP, ErrorCause.BAD_ROUTE, ErrorCause.BAD_DST,
                  ErrorCause.SHORT_PACKET, ErrorCause.LONG_PACKET, ErrorCause.RX_UNEXPECTED,
                  ErrorCause.RX_OVERFLOW, ErrorCause.RX_BAD_CONTROL)
#: Instruction indices (SEQ_PC, SEQ_FAULT_PC) and PROG_COUNT are this wide.
PC_BITS = 24
WATCHDOG_RESET = 1 << 24
RX_WAIT_RESET = 1 << 16


def _wait_fields(q: str, lsb: int):
    return (_f(f"{q}_sem_wait", lsb, 1, f"The {q.upper()} queue's head waits on its semaphore."),
            _f(f"{q}_sem", lsb + 1, SEM_BITS, f"The semaphore the {q.upper()} queue's head waits on."))


_SEQ_REGS = [
    Register("SEQ_CAPS", SEQ_BASE + 0x00, Access.RO, "Build parameters of the sequencer.", (
        _f("num_sems", 0, SEM_BITS + 1, "Semaphores (an instruction naming one beyond is illegal)."),
        _f("rx_slots", 6, 6, "Receive-table entries (RECVs posted at once)."),
        _f("queue_log2", 12, 4, "log2 of the EX / TX / RX queue depth."),
        _f("hp_ports", 16, 3, "AXI4 masters into the DDR."),
        _f("max_payload_log2", 19, 5, "log2 of the largest packet payload a SEND emits, in bytes."),
        _f("exec", 24, 1, "1: an execute unit is built (0: every EX instruction faults)."),
    )),
    Register("PROG_BASE_LO", SEQ_BASE + 0x04, Access.RW, "Program address (bytes), bits 31:0; a multiple "
             f"of {DDR_ALIGN} (the low bits are not stored).", (
        _f("addr", DDR_ALIGN.bit_length() - 1, 33 - DDR_ALIGN.bit_length(),
           f"Address bits 31:{DDR_ALIGN.bit_length() - 1}."),)),
    Register("PROG_BASE_HI", SEQ_BASE + 0x08, Access.RW, "Program address, bits 47:32.",
             (_f("addr_hi", 0, DMA_ADDR_BITS - 32, "Address bits 47:32."),)),
    Register("PROG_COUNT", SEQ_BASE + 0x0C, Access.RW, "Instructions in the program; fetching beyond "
             "them without reaching END faults PROGRAM_OVERRUN.", (
        _f("count", 0, PC_BITS, "Instruction count."),)),
    Register("SEQ_CONTROL", SEQ_BASE + 0x10, Access.W1P, "Sequencer control strobes.", (
        _f("start", 0, 1, "Write 1: clear semaphores, queues, receive table and performance counters and "
                          "run the program at PROG_BASE (taken once SEQ_STATUS.idle; ignored while running)."),
        _f("abort", 1, 1, "Write 1: stop a running program (fault ABORTED)."),
    )),
    Register("SEQ_STATUS", SEQ_BASE + 0x14, Access.RO, "Sequencer status.", (
        _f("running", 0, 1, "A program is running."),
        _f("done", 1, 1, "The last program completed END (until the next start)."),
        _f("fault", 2, 1, "The last program stopped on a fault (until the next start)."),
        _f("idle", 3, 1, "No DMA transfer, packet or DDR transaction of the engines is in flight."),
        _f("start_pending", 4, 1, "A start was written and waits for idle."),
        _f("fault_cause", 8, 8, "Why the program stopped (SeqFault)."),
    )),
    Register("SEQ_PC", SEQ_BASE + 0x18, Access.RO, "Instructions dispatched since start (the index of the "
             "next one).", (_f("pc", 0, PC_BITS, "Instruction index."),)),
    Register("SEQ_FAULT_PC", SEQ_BASE + 0x1C, Access.RO, "Index of the instruction that faulted (illegal, "
             "out of window, execute-unit fault; for a RECV's writes the RECV); for a network error, "
             "watchdog or abort the next instruction to dispatch.", (_f("pc", 0, PC_BITS, "Instruction index."),)),
    Register("SEQ_WAIT", SEQ_BASE + 0x20, Access.RO, "What the queues wait on (a stalled program's reason).", (
        *_wait_fields("ex", 0), *_wait_fields("tx", 8), *_wait_fields("rx", 16),
        _f("rx_slot", 24, 1, "A RECV waits for a free receive-table entry."),
        _f("ex_busy", 25, 1, "An EX instruction is executing."),
        _f("tx_busy", 26, 1, "A SEND or CREDIT is being sent."),
        _f("end", 27, 1, "END waits for the queues, sends and posted receives to drain."),
        _f("fetch", 28, 1, "Dispatch waits for instruction words from DDR."),
    )),
    Register("SEQ_LEVELS", SEQ_BASE + 0x24, Access.RO, "Queue fill levels.", (
        _f("ex", 0, 8, "EX queue entries."), _f("tx", 8, 8, "TX queue entries."),
        _f("rx", 16, 8, "RX queue entries."), _f("posted", 24, 8, "Receive-table entries in use."),
    )),
    Register("FAULT_MASK", SEQ_BASE + 0x28, Access.RW, "One bit per ErrorCause: an error of an enabled "
             "cause while a program runs stops it (fault NETWORK).",
             reset=sum(1 << int(c) for c in NETWORK_FAULTS)),
    Register("WATCHDOG", SEQ_BASE + 0x2C, Access.RW, "Cycles without a retired instruction and without "
             "any DDR or network beat after which a running program faults WATCHDOG (0: never).",
             reset=WATCHDOG_RESET),
    Register("RX_WAIT", SEQ_BASE + 0x30, Access.RW, "Cycles a delivered data packet waits for a matching "
             "RECV before it is dropped (RX_UNEXPECTED).", reset=RX_WAIT_RESET),
    Register("SEM_INDEX", SEQ_BASE + 0x34, Access.RW, "Semaphore selected for SEM_DATA.", (
        _f("index", 0, SEM_BITS, "Semaphore."),)),
    Register("SEM_DATA", SEQ_BASE + 0x38, Access.RO, "Value of the semaphore at SEM_INDEX.", (
        _f("value", 0, SEM_MAX.bit_length(), "Semaphore value."),)),
    Register("DIR_INDEX", SEQ_BASE + 0x3C, Access.RW, "Replica-directory entry selected for DIR_DATA.", (
        _f("index", 0, 16, "KV block id."),)),
    Register("DIR_DATA", SEQ_BASE + 0x40, Access.RO, "Replica-directory entry at DIR_INDEX.", (
        _f("state", 0, REPLICA_STATE_BITS, "ReplicaState."),)),
    Register("PERF_INDEX", SEQ_BASE + 0x44, Access.RW, "Performance counter selected for PERF_LO / PERF_HI.", (
        _f("index", 0, 8, "PerfCounter."),)),
    Register("PERF_LO", SEQ_BASE + 0x48, Access.RO, "Counter at PERF_INDEX, bits 31:0; the read also "
             "snapshots bits 63:32 for PERF_HI."),
    Register("PERF_HI", SEQ_BASE + 0x4C, Access.RO, "Bits 63:32 of the counter snapshot taken by the last "
             "PERF_LO read."),
]

_regs = [
    Register("ID", 0x0000, Access.RO, "Identifies an MCF node (ASCII 'MCF1').", reset=ID_VALUE),
    Register("VERSION", 0x0004, Access.RO, "Spec fingerprint (``SPEC_VERSION``): CRC-32 of the wire format, "
             "register map, instruction set, KV and fixed-point formats the bitstream was built from; the "
             "driver refuses a node whose fingerprint differs from its own."),
    Register("CAPS", 0x0008, Access.RO, "Build parameters of this node's datapath.", (
        _f("data_bytes", 0, 8, "AXI-Stream data width in bytes."),
        _f("net_ports", 8, 4, "Number of network ports."),
        _f("meta_queue_log2", 12, 4, "log2 of the metadata queue depth."),
        _f("desc_queue_log2", 16, 4, "log2 of the DMA descriptor queue depth."),
    )),
    Register("DMA_CAPS", 0x000C, Access.RO, "Build parameters of the DMA engines.", (
        _f("bus_bytes_log2", 0, 4, "log2 of the AXI4 data width in bytes (addresses align to it)."),
        _f("buffers", 4, 4, "Number of ping-pong buffers (valid DmaDescriptor.buffer values)."),
        _f("buffer_bytes_log2", 8, 5, "log2 of one ping-pong buffer's size in bytes (LOAD limit)."),
    )),
    Register("CONTROL", 0x0010, Access.RW, "Datapath control.", (
        _f("enable", 0, 1, "Run the datapath; while 0, queues hold and the NIC accepts nothing."),
        _f("clear_counters", 1, 1, "Write 1: zero every error counter and ETH_SEQ_GAPS, and take the next "
           "received frame's link sequence number as the new reference (self-clearing)."),
    )),
    Register("STATUS", 0x0014, Access.RO, "Datapath status.", (
        _f("busy", 0, 1, "A DMA transfer or packet is in flight."),
        _f("meta_queue_empty", 1, 1, "Metadata queue is empty."),
        _f("meta_queue_full", 2, 1, "Metadata queue is full (writes are refused)."),
        _f("desc_queue_empty", 3, 1, "DMA descriptor queue is empty."),
        _f("desc_queue_full", 4, 1, "DMA descriptor queue is full (writes are refused)."),
        _f("error", 5, 1, "Some error counter is non-zero."),
    )),
    Register("NODE_ID", 0x0018, Access.RW, "This node's id.", (
        _f("node_id", 0, NODE_BITS, "Node id, compared with Meta.dst."),)),
    Register("NUM_NODES", 0x001C, Access.RW, "Cluster size; Meta.dst >= NUM_NODES is dropped.", (
        _f("num_nodes", 0, NODE_BITS + 1, "Number of nodes (1..256)."),), reset=1),
    Register("IRQ_ENABLE", 0x0020, Access.RW, "Interrupt enable, one bit per Irq.", (
        *(_f(i.name.lower(), int(i), 1, f"Enable the {i.name} interrupt.") for i in Irq),)),
    Register("IRQ_STATUS", 0x0024, Access.W1C, "Pending interrupts (write 1 to clear).", (
        *(_f(i.name.lower(), int(i), 1, f"{i.name} pending.") for i in Irq),)),
    # Metadata queue: stage the 128-bit header in META_W0..3, then pulse META_PUSH.
    *(Register(f"META_W{i}", 0x0040 + 4 * i, Access.RW,
               f"Staged Meta header bits [{32 * i + 31}:{32 * i}].") for i in range(META_WORDS)),
    Register("META_PUSH", 0x0050, Access.W1P,
             "Write 1: push the staged header into the metadata queue (refused and counted "
             "as META_QUEUE_FULL when full).", (_f("push", 0, 1, "Push strobe."),)),
    Register("META_LEVEL", 0x0054, Access.RO, "Entries in the metadata queue.", (
        _f("level", 0, 16, "Fill level."),)),
    # DMA descriptor queue: stage DESC_W0..2 (DmaDescriptor layout), then pulse DESC_PUSH.
    *(Register(f"DESC_W{i}", 0x0060 + 4 * i, Access.RW,
               f"Staged DMA descriptor bits [{32 * i + 31}:{32 * i}].") for i in range(DESC_WORDS)),
    Register("DESC_PUSH", 0x0070, Access.W1P,
             "Write 1: validate and push the staged descriptor (bad ones are refused and counted).",
             (_f("push", 0, 1, "Push strobe."),)),
    Register("DESC_LEVEL", 0x0074, Access.RO, "Entries in the DMA descriptor queue.", (
        _f("level", 0, 16, "Fill level."),)),
    Register("DESC_DONE", 0x0078, Access.RO, "Completed DMA descriptors since reset.", (
        _f("count", 0, 16, "Completion count (wraps)."),
        _f("tag", 16, 11, "Tag of the last completed descriptor."),)),
    Register("DMA_WINDOW_BASE_LO", 0x0080, Access.RW, "Lowest DDR address DMA may touch, bits 31:0."),
    Register("DMA_WINDOW_BASE_HI", 0x0084, Access.RW, "Lowest DDR address DMA may touch, bits 47:32.",
             (_f("base_hi", 0, DMA_ADDR_BITS - 32, "Address bits 47:32."),)),
    Register("DMA_WINDOW_SIZE_LO", 0x0088, Access.RW, "Size of the DMA window in bytes, bits 31:0 "
             "(reset 0: every descriptor is refused until the PS opens a window)."),
    Register("DMA_WINDOW_SIZE_HI", 0x008C, Access.RW, "Size of the DMA window in bytes, bits 47:32.",
             (_f("size_hi", 0, DMA_ADDR_BITS - 32, "Size bits 47:32."),)),
    Register("CYCLES_LO", 0x0090, Access.RO, "Free-running count of node clock cycles since reset, "
             "bits 31:0 (the runtime measures the PL clock with it: read HI, LO, HI until HI repeats)."),
    Register("CYCLES_HI", 0x0094, Access.RO, "Free-running count of node clock cycles since reset, bits 63:32."),
    *(Register(f"ERR_{c.name}", ERROR_COUNTER_BASE + 4 * int(c), Access.RO,
               f"Error counter: {c.name} (saturating).") for c in ErrorCause),
    # 10GBASE-R port (mcf.spec.eth).
    Register("ETH_STATUS", 0x0300, Access.RO, "Link status of the 10GBASE-R port, one bit per LinkStatus.", (
        *(_f(s.name.lower(), int(s), 1, _LINK_DOC[s]) for s in LinkStatus),)),
    Register("ETH_MAC_INDEX", 0x0304, Access.RW, "MAC table entry that ETH_MAC_WRITE stores to "
             "(a node id or a destination-group tag, as in Meta.dst).", (
        _f("index", 0, (MAC_TABLE_ENTRIES - 1).bit_length(), "Table index."),)),
    Register("ETH_MAC_LO", 0x0308, Access.RW, "Staged MAC address bits 31:0 (the last four bytes "
             "on the wire: 02:4D:43:46:00:01 has LO 0x46000001)."),
    Register("ETH_MAC_HI", 0x030C, Access.RW, "Staged MAC address bits 47:32 (the first two bytes).", (
        _f("mac_hi", 0, MAC_BITS - 32, "Address bits 47:32."),)),
    Register("ETH_MAC_WRITE", 0x0310, Access.W1P, "Write 1: store the staged address at ETH_MAC_INDEX. "
             "Frames leave with source = entry NODE_ID and destination = entry Meta.dst.", (
        _f("write", 0, 1, "Write strobe."),)),
    Register("ETH_SEQ_GAPS", 0x0314, Access.RSUB, "Frames missing on the receive link, from gaps "
             "in the link sequence number (saturating; write back the value read to clear it).", (
        _f("missing", 0, DATA_BITS, "Frames lost."),)),
    Register("ROUTE_INDEX", 0x0200, Access.RW, "Route table entry selected for ROUTE_DATA.", (
        _f("index", 0, ROUTE_ID_BITS, "Route id."),)),
    Register("ROUTE_DATA", 0x0204, Access.RW,
             "Route table entry at ROUTE_INDEX (RouteEntry layout); a write stores it.", (
        *(_f(f.name, ROUTE_ENTRY.offsets[f.name], f.width, f.doc) for f in ROUTE_ENTRY.fields
          if not f.reserved),)),
    *_SEQ_REGS,
]

#: The spec's fingerprint (``bits.fingerprint``) over every format hardware and software share: the
#: wire format, the 10GBASE-R framing, the instruction set, KV blocks, fixed-point constants, the
#: plan vocabulary and this register map (offsets, fields, access; not docs or reset values).  The
#: VERSION register reads it: a bitstream built from another spec is refused by the driver.
SPEC_VERSION = fingerprint(vars(packet), vars(eth), vars(isa), vars(kv), vars(fixed), vars(plan), globals(),
                           {"REGISTERS": _regs})
_regs = [replace(r, reset=SPEC_VERSION) if r.name == "VERSION" else r for r in _regs]
REGISTERS = RegisterMap(_regs)
