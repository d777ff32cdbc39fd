"""Amaranth RTL of one MCF node: board-independent and parameterised."""

from . import fast_convert, fast_meminit, fast_netlist

fast_convert.install()
fast_meminit.install()
fast_netlist.install()
