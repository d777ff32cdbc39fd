"""Interfaces between the register block and the blocks it controls."""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.spec.packet import ROUTE_ID_BITS
from mcf.spec.regmap import ADDR_BITS, DATA_BITS


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


class RegisterBusSignature(wiring.Signature):
    """Registers that another block implements (the sequencer's window), from the register
    block's side (``Out``).  ``addr`` is the register's word index (byte offset / 4).  A
    ``w_en`` pulse writes ``w_data`` under the byte mask ``w_strb``; an ``r_en`` pulse asks for
    a read, answered by one ``r_valid`` pulse with ``r_data`` one or more cycles later."""

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
