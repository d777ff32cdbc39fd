"""Amaranth conversions with Python's cyclic garbage collector paused.

Elaborating a design and building its netlist and RTLIL allocates millions of container objects
(netlist values are tuples, every one tracked by the collector) and frees almost none until the
end; each time the collector's thresholds trip, it walks everything still alive, so a large
design's conversion spent about half of its CPU in collections that found nothing (the tiny node:
~20 -> ~10 CPU s).  ``Fragment.get`` (elaboration) and ``rtlil.convert_fragment`` (netlist,
RTLIL; ``verilog.convert`` runs both) run with the collector off and turn it back on after
(nested calls leave it to the outermost; a caller that had it off keeps it off).  Reference
counting still frees everything acyclic at once; a cycle made meanwhile is collected later.
Nothing else changes: the output is the same text.  Installed when ``mcf.hw`` is imported."""
from __future__ import annotations

import contextlib
import functools
import gc

from amaranth.back import rtlil as _rtlil
from amaranth.hdl import _ir

_ORIGINAL = {
    (_rtlil, "convert_fragment"): _rtlil.convert_fragment,
    (_ir.Fragment, "get"): _ir.Fragment.__dict__["get"],
}


@contextlib.contextmanager
def collector_paused():
    """The cyclic collector off for the block (back on after if it was on)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _paused(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with collector_paused():
            return fn(*args, **kwargs)
    return wrapper


_FAST = {
    (_rtlil, "convert_fragment"): _paused(_rtlil.convert_fragment),
    (_ir.Fragment, "get"): staticmethod(_paused(_ir.Fragment.get)),
}


def install() -> None:
    for (owner, name), fn in _FAST.items():
        setattr(owner, name, fn)


def uninstall() -> None:
    for (owner, name), fn in _ORIGINAL.items():
        setattr(owner, name, fn)
