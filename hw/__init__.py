"""Amaranth RTL of one MCF node: board-independent and parameterised."""

from . import _fast_meminit

_fast_meminit.install()
