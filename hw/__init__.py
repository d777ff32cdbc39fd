"""Amaranth RTL of one MCF node: board-independent and parameterised."""
