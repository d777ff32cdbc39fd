"""Interfaces between the register block and the blocks it controls."""
from __future__ import annotations

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.spec.packet import ROUTE_ID_BITS
from mcf.spec.regmap import DATA_BITS


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
