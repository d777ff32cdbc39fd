"""Interfaces between the register block and the blocks it controls."""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.spec.eth import MAC_BITS, MAC_TABLE_ENTRIES, SEQ_BITS
from mcf.spec.packet import NODE_BITS, ROUTE_ID_BITS
from mcf.spec.regmap import ADDR_BITS, DATA_BITS, LinkStatus


class RouteTablePort(wiring.Signature):
    """Access to the NIC's route table, from the register block's side (``Out``).

    The NIC owns the table memory and takes ``In(RouteTablePort())``.  A ``w_en`` pulse
    stores ``w_data`` (RouteEntry layout) at ``addr``; an ``r_en`` pulse asks for the entry at
    ``addr``, which must be on ``r_data`` the cycle after (a synchronous memory read port).
    """

    def __init__(self):
        super().__init__({
            "addr": Out(ROUTE_ID_BITS),
            "w_data": Out(DATA_BITS),
            "w_en": Out(1),
            "r_en": Out(1),
            "r_data": In(DATA_BITS),
        })

    def __eq__(self, other):
        return isinstance(other, RouteTablePort)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "RouteTablePort()"


class EthControlPort(wiring.Signature):
    """The register block's side (``Out``) of a 10GBASE-R port (``mcf.hw.eth``), in the node's
    clock domain.

    A ``mac_w_en`` pulse stores ``mac_data`` (48-bit address, first byte on the wire in bits
    47:40) at ``mac_index`` of the port's MAC table; ``node_id`` (NODE_ID) picks the source
    address.  ``status`` holds the ``LinkStatus`` bits;
    ``seq_missing`` is the number of frames a link sequence gap just skipped (0 on other
    cycles), added to ETH_SEQ_GAPS; ``resync`` (CONTROL.clear_counters) makes the next
    received frame's link sequence number the new reference.  Error events reach the register block on its ``errors``
    input like every other cause.
    """

    def __init__(self):
        super().__init__({
            "mac_w_en": Out(1),
            "mac_index": Out(range(MAC_TABLE_ENTRIES)),
            "mac_data": Out(MAC_BITS),
            "resync": Out(1),
            "node_id": Out(NODE_BITS),
            "status": In(len(LinkStatus)),
            "seq_missing": In(SEQ_BITS),
        })

    def __eq__(self, other):
        return isinstance(other, EthControlPort)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "EthControlPort()"


class RegisterBusSignature(wiring.Signature):
    """Registers that another block implements (the sequencer's window), from the register
    block's side (``Out``).  ``addr`` is the register's word index (byte offset / 4).  A
    ``w_en`` pulse writes ``w_data`` under the byte mask ``w_strb``; an ``r_en`` pulse asks for
    a read, answered by one ``r_valid`` pulse with ``r_data`` one or more cycles later.  Both
    pulse only for an address of one of the window's registers (the register block decodes it),
    so the implementer may decode the address's bits within the window alone."""

    def __init__(self):
        super().__init__({
            "w_addr": Out(ADDR_BITS - 2),
            "w_en": Out(1),
            "w_data": Out(DATA_BITS),
            "w_strb": Out(DATA_BITS // 8),
            "r_addr": Out(ADDR_BITS - 2),
            "r_en": Out(1),
            "r_valid": In(1),
            "r_data": In(DATA_BITS),
        })

    def __eq__(self, other):
        return isinstance(other, RegisterBusSignature)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "RegisterBusSignature()"
