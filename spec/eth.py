"""MCF over Ethernet: the frame an MCF packet travels in between boards (10GBASE-R).

An MCF packet (``{Meta, Payload}``, see ``mcf.spec.packet``) crosses a 10G link as the
payload of an Ethernet II frame::

    byte  0      6      12        14        16                  16 + 16 + Meta.length
          | dst  | src  | type    | seq     | Meta (16 B) | payload | pad to 60 | FCS (4) |
          |  MAC | MAC  | 0x88B5  | (BE 16) |                       |           |         |

* ``dst`` / ``src``: MAC addresses from the node's MAC table (``ETH_MAC_*`` registers):
  ``src`` is the entry at ``NODE_ID``, ``dst`` the entry at ``Meta.dst`` (a node id, or a
  destination-group tag whose entry may hold a multicast address), so boards can meet at an
  ordinary 10G switch.  A receiver accepts every frame of EtherType ``ETHERTYPE`` whatever
  its destination address: on a direct cable a frame may be addressed to a node further
  along its route, and on a switch the switch filters.
* ``type``: 0x88B5, IEEE 802 "local experimental" EtherType.  Frames of any other type are
  dropped and counted (``ETH_NOT_MCF``).
* ``seq``: the *link sequence number*, big-endian, one counter per transmitting port,
  +1 per frame (mod 2^16).  It is a link-level field of its own, not the Meta's ``seq``
  (which tags chunks and decode steps end to end and must not change on a hop), and its two
  bytes make the link header 16 bytes long, so the Meta starts on a 64- or 128-bit beat
  boundary and the datapath never shifts bytes.  The receiver counts a gap (``ETH_SEQ_GAP``
  per event, ``ETH_SEQ_GAPS`` frames missing), frames lost while the link was down
  included; CONTROL.clear_counters makes the next frame's number the new reference (the
  runtime clears after bringing links up, so a peer that restarted its count is no gap).
* The receiver takes the packet length from ``Meta.length`` (16 + length bytes), not from
  the padded frame; the FCS (CRC-32, IEEE 802.3 clause 3.2.9) is checked and stripped by the
  MAC.

Frame sizes follow IEEE 802.3: at least ``MIN_FRAME_BYTES`` (64, FCS included, padded by the
transmitter), at most ``MAX_FRAME_BYTES`` (jumbo: a 9000-byte Ethernet payload).
"""
from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass

from .bits import SpecError

#: IEEE 802 local experimental EtherType 1.
ETHERTYPE = 0x88B5
MAC_BYTES = 6
MAC_BITS = 8 * MAC_BYTES
ETH_HEADER_BYTES = 14
SEQ_BYTES = 2
SEQ_BITS = 8 * SEQ_BYTES
#: dst + src + type + seq: 16 bytes, so the Meta that follows is beat aligned.
LINK_HEADER_BYTES = ETH_HEADER_BYTES + SEQ_BYTES
DST_OFFSET, SRC_OFFSET, TYPE_OFFSET, SEQ_OFFSET = 0, 6, 12, 14
FCS_BYTES = 4
MIN_FRAME_BYTES = 64                      # FCS included
MIN_DATA_BYTES = MIN_FRAME_BYTES - FCS_BYTES  # what the transmitter pads to (60)
MAX_PAYLOAD_BYTES = 9000                  # jumbo frames
MAX_FRAME_BYTES = ETH_HEADER_BYTES + MAX_PAYLOAD_BYTES + FCS_BYTES   # 9018
#: Preamble (7 x 0x55) and start frame delimiter; XGMII replaces the first byte by /S/.
PREAMBLE = bytes([0x55] * 7 + [0xD5])
PREAMBLE_BYTES = len(PREAMBLE)
#: Inter-frame gap, bytes (the /T/ counts); the MAC keeps it on average with a deficit idle count.
IFG_BYTES = 12
#: Table entries: one per node id / destination-group tag (Meta.dst is 8 bits).
MAC_TABLE_ENTRIES = 256

# --- 10GBASE-R physical layer (IEEE 802.3 clause 49) ----------------------------------------
#: Line rate, reference clock, and the PCS block rate.
LINE_RATE_BPS = 10_312_500_000
REFCLK_HZ = 156_250_000
BLOCK_BITS = 66
BLOCK_RATE_HZ = LINE_RATE_BPS // BLOCK_BITS            # 156.25 M blocks/s
XGMII_BITS = 64
#: The GT's user interface: 64 bits a cycle at 10.3125 Gb/s / 64 = 161.1328125 MHz; the
#: gearbox takes a 66-bit block on 32 cycles out of 33.
GT_DATA_BITS = 64
GT_USRCLK_HZ = LINE_RATE_BPS / GT_DATA_BITS
#: Payload rate at the MAC: 64 bits per block.
MAC_RATE_BPS = BLOCK_RATE_HZ * XGMII_BITS              # 10 Gb/s
#: Sync headers as 2-bit integers, bit 0 first on the wire (clause 49: "01" data, "10" control).
SYNC_DATA = 0b10
SYNC_CTRL = 0b01
#: Self-synchronous scrambler 1 + x^39 + x^58 over the 64 payload bits of each block.
SCRAMBLER_TAPS = (39, 58)
#: Block lock (49.2.13.2.2): 64 good sync headers lock; 16 bad ones in 64 slip.
LOCK_GOOD_HEADERS = 64
LOCK_BAD_HEADERS = 16
#: BER monitor (49.2.13.2.4): 16 bad headers within 125 us is a high bit error rate.
BER_BAD_HEADERS = 16
BER_WINDOW_S = 125e-6
BER_WINDOW_BLOCKS = int(BER_WINDOW_S * BLOCK_RATE_HZ)  # 19531


class Xgmii(enum.IntEnum):
    """XGMII control characters (clause 46, with TXC/RXC = 1)."""
    IDLE = 0x07
    START = 0xFB
    TERMINATE = 0xFD
    ERROR = 0xFE
    SEQUENCE = 0x9C     # sequence ordered set (link fault signalling)
    SIGNAL = 0x5C


class BlockType(enum.IntEnum):
    """Block type field of a control block (clause 49, figure 49-7): lanes named C control,
    D data, S start, T terminate, O ordered set."""
    C7 = 0x1E          # C0 C1 C2 C3 C4 C5 C6 C7
    C3_O4 = 0x2D       # C0 C1 C2 C3 O4 D5 D6 D7
    C3_S4 = 0x33       # C0 C1 C2 C3 S4 D5 D6 D7
    O0_S4 = 0x66       # O0 D1 D2 D3 S4 D5 D6 D7
    O0_O4 = 0x55       # O0 D1 D2 D3 O4 D5 D6 D7
    S0 = 0x78          # S0 D1 D2 D3 D4 D5 D6 D7
    O0_C4 = 0x4B       # O0 D1 D2 D3 C4 C5 C6 C7
    T0 = 0x87          # T0 C1 ... C7
    T1 = 0x99          # D0 T1 C2 ... C7
    T2 = 0xAA
    T3 = 0xB4
    T4 = 0xCC
    T5 = 0xD2
    T6 = 0xE1
    T7 = 0xFF          # D0 ... D6 T7


#: Block type of a terminate block by the number of data bytes before /T/ (0..7).
TERMINATE_TYPES = (BlockType.T0, BlockType.T1, BlockType.T2, BlockType.T3, BlockType.T4,
                   BlockType.T5, BlockType.T6, BlockType.T7)


class ControlCode(enum.IntEnum):
    """7-bit control codes of a 64b/66b control block (clause 49, table 49-1)."""
    IDLE = 0x00
    LPI = 0x06
    ERROR = 0x1E


#: Ordered-set code (4 bits) of a sequence ordered set (/Q/, link fault signalling).
O_CODE_SEQUENCE = 0x0


# --- the frame header ----------------------------------------------------------------------
def mac_bytes(mac: int) -> bytes:
    """A 48-bit MAC address as its 6 bytes, first transmitted byte first
    (``0x02_00_00_00_00_01`` is ``02:00:00:00:00:01``)."""
    if isinstance(mac, bool) or not isinstance(mac, int) or not 0 <= mac < (1 << MAC_BITS):
        raise SpecError(f"MAC address {mac!r} is not a 48-bit integer")
    return mac.to_bytes(MAC_BYTES, "big")


def parse_mac(text: str) -> int:
    """``"02:00:00:00:00:01"`` -> ``0x020000000001``."""
    parts = text.split(":")
    try:
        values = [int(p, 16) for p in parts]
    except ValueError:
        values = []
    if len(parts) != MAC_BYTES or len(values) != MAC_BYTES or any(not 0 <= v < 256 or len(p) != 2
                                                                 for v, p in zip(values, parts)):
        raise SpecError(f"{text!r} is not a MAC address like 02:00:00:00:00:01")
    return int.from_bytes(bytes(values), "big")


def node_mac(node: int, base: int = 0x02_4D_43_46_00_00) -> int:
    """A default, locally administered MAC address for node ``node`` (02:4D:43:46:00:nn)."""
    if not 0 <= node < MAC_TABLE_ENTRIES:
        raise SpecError(f"node {node} out of range [0, {MAC_TABLE_ENTRIES - 1}]")
    return base | node


@dataclass(frozen=True)
class LinkHeader:
    """The 16 bytes in front of an MCF packet: Ethernet II header + link sequence number."""
    dst: int
    src: int
    seq: int
    ethertype: int = ETHERTYPE

    def encode(self) -> bytes:
        if not 0 <= self.seq < (1 << SEQ_BITS):
            raise SpecError(f"link seq {self.seq} out of range [0, {(1 << SEQ_BITS) - 1}]")
        if not 0 <= self.ethertype < (1 << 16):
            raise SpecError(f"EtherType {self.ethertype!r} is not 16 bits")
        return (mac_bytes(self.dst) + mac_bytes(self.src) + self.ethertype.to_bytes(2, "big")
                + self.seq.to_bytes(SEQ_BYTES, "big"))

    @classmethod
    def decode(cls, frame: bytes) -> "LinkHeader":
        if len(frame) < LINK_HEADER_BYTES:
            raise SpecError(f"truncated link header: {len(frame)} bytes, it has {LINK_HEADER_BYTES}")
        return cls(int.from_bytes(frame[0:6], "big"), int.from_bytes(frame[6:12], "big"),
                   int.from_bytes(frame[14:16], "big"), int.from_bytes(frame[12:14], "big"))


def fcs(data: bytes) -> bytes:
    """The frame check sequence of ``data`` as transmitted (CRC-32, least significant byte
    first)."""
    return zlib.crc32(bytes(data)).to_bytes(FCS_BYTES, "little")


def frame(packet: bytes, dst: int, src: int, seq: int) -> bytes:
    """The Ethernet frame (no preamble, with padding and FCS) that carries ``packet``."""
    body = LinkHeader(dst, src, seq).encode() + bytes(packet)
    if len(body) > MAX_FRAME_BYTES - FCS_BYTES:
        raise SpecError(f"packet of {len(packet)} bytes does not fit a {MAX_FRAME_BYTES}-byte frame")
    body += bytes(max(0, MIN_DATA_BYTES - len(body)))
    return body + fcs(body)


def max_packet_bytes(max_frame: int = MAX_FRAME_BYTES) -> int:
    """The longest MCF packet (Meta + payload) one frame carries."""
    return max_frame - FCS_BYTES - LINK_HEADER_BYTES


def wire_bytes(frame_bytes: int) -> int:
    """Bytes a frame takes on the line: preamble + frame + the average inter-frame gap."""
    return PREAMBLE_BYTES + max(frame_bytes, MIN_FRAME_BYTES) + IFG_BYTES
