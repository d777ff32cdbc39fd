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

Access kinds: RO read-only, RW read/write, WO write-only (reads return 0), W1C write one
to clear, W1P write one to pulse (self-clearing strobe).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .bits import BitLayout, Field, SpecError
from .packet import HEADER_BITS, NODE_BITS, ROUTE_ID_BITS, SPEC_VERSION

DATA_BITS = 32
ADDR_BITS = 16          # a 64 KiB AXI-Lite window per node
ID_VALUE = 0x4D434631   # "MCF1"


class Access(enum.Enum):
    RO = "RO"
    RW = "RW"
    WO = "WO"
    W1C = "W1C"
    W1P = "W1P"


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


class Irq(enum.IntEnum):
    """Bits of IRQ_ENABLE / IRQ_STATUS."""
    DESC_DONE = 0
    META_QUEUE_EMPTY = 1
    ERROR = 2
    RX_PACKET = 3


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


ERROR_COUNTER_BASE = 0x0100
DMA_ADDR_BITS = DMA_DESCRIPTOR["addr"].width
#: Width of a DMA descriptor's tag (DESC_DONE_TAG, the engines' completion tags).
DMA_TAG_BITS = DMA_DESCRIPTOR["tag"].width
META_WORDS = HEADER_BITS // DATA_BITS
DESC_WORDS = (DMA_DESCRIPTOR.total_bits + DATA_BITS - 1) // DATA_BITS

_regs = [
    Register("ID", 0x0000, Access.RO, "Identifies an MCF node (ASCII 'MCF1').", reset=ID_VALUE),
    Register("VERSION", 0x0004, Access.RO, "Wire-format / register-map version.", reset=SPEC_VERSION),
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
        _f("clear_counters", 1, 1, "Write 1: zero every error counter (self-clearing)."),
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
    Register("ROUTE_INDEX", 0x0200, Access.RW, "Route table entry selected for ROUTE_DATA.", (
        _f("index", 0, ROUTE_ID_BITS, "Route id."),)),
    Register("ROUTE_DATA", 0x0204, Access.RW,
             "Route table entry at ROUTE_INDEX (RouteEntry layout); a write stores it.", (
        *(_f(f.name, ROUTE_ENTRY.offsets[f.name], f.width, f.doc) for f in ROUTE_ENTRY.fields
          if not f.reserved),)),
]

REGISTERS = RegisterMap(_regs)
