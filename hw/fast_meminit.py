"""Memory initial contents in Amaranth 0.5's RTLIL backend, written in one step.

``amaranth.back.rtlil.ModuleEmitter.emit_memory`` builds a memory's ``$meminit_v2`` DATA bit by
bit through the generic signal emitter: a netlist object per bit, then a constant chunk made of
them.  For the Qwen node (the scratchpad's 4 x 8 192 beats of 256 bits, the attention unit's and
the NIC's buffers: ~13 M bits) that was about a quarter of the Verilog conversion's time, for
nothing but zeros.  ``emit_memory`` below writes the very same RTLIL constant (``<bits>'<MSB ..
LSB>``, rows from the last to the first) straight from the init words; the output is
byte-identical (``tests/hw/testfast_meminit.py`` converts designs both ways and compares).
Installed when ``mcf.hw`` is imported."""
from __future__ import annotations

from amaranth.back import rtlil as _rtlil
from amaranth.hdl import _nir

_ORIGINAL = _rtlil.ModuleEmitter.emit_memory


def init_constant(width: int, init) -> str:
    """The RTLIL constant of a memory's contents: ``width`` bits a row, row 0 in the low bits."""
    mask = (1 << width) - 1
    bits = "".join(format(row & mask, f"0{width}b") for row in reversed(tuple(init)))
    return f"{len(bits)}'{bits}"


def emit_memory(self, cell_idx, cell):
    if cell.width == 0 or cell.depth == 0:
        return _ORIGINAL(self, cell_idx, cell)
    memory_info = self.memories[cell_idx]
    self.builder.cell("$meminit_v2", ports={
        "ADDR": self.sigspec(),
        "DATA": init_constant(cell.width, cell.init),
        "EN": self.sigspec(_nir.Value.ones(cell.width)),
    }, parameters={
        "MEMID": memory_info.memid,
        "ABITS": 0,
        "WIDTH": cell.width,
        "WORDS": cell.depth,
        "PRIORITY": 0,
    }, src_loc=cell.src_loc)


def install() -> None:
    _rtlil.ModuleEmitter.emit_memory = emit_memory


def uninstall() -> None:
    _rtlil.ModuleEmitter.emit_memory = _ORIGINAL
