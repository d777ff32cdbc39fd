"""The AMD primitives the node instantiates by name, and their simulation models.

The node's build places some cells itself: DSP48E2 slices (the product array, the matrix unit's
accumulators and requantizer window: ``mcf.hw.compute.dot_array``) and LUT6 / LUT6_2 / CARRY4 cells
(``mcf.hw.lut``).  Verilog simulators (Icarus, Verilator) need a model of each; synthesis must not see
one, so that Yosys (or Vivado) maps the instance onto its own cell.  Each model is a Verilog file whose
first line is its mark: ``with_models`` appends the models a design instantiates, ``strip_models`` cuts
a design's Verilog at the first mark (``mcf synth``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcf.hw import lut
from mcf.hw.compute import dot_array

__all__ = ["MODELS", "Model", "strip_models", "with_models"]


@dataclass(frozen=True)
class Model:
    """A simulation model: its file, its first line's mark, the cells it defines."""
    path: Path
    mark: str
    cells: tuple


#: The models, in the order ``with_models`` appends them.
MODELS = (Model(dot_array.MODEL, dot_array.MODEL_MARK, ("DSP48E2",)),
          Model(lut.MODEL, lut.MODEL_MARK, lut.MODEL_CELLS))


def with_models(text: str) -> str:
    """``text`` (a converted design) with the model of each cell family it instantiates appended once."""
    for model in MODELS:
        if any(f"{cell} " in text for cell in model.cells) and model.mark not in text:
            text = text + "\n" + model.path.read_text()
    return text


def strip_models(text: str) -> str:
    """``text`` without the appended simulation models (what synthesis reads): cut at the first one."""
    cuts = [i for i in (text.find(model.mark) for model in MODELS) if i >= 0]
    return text[:min(cuts)] if cuts else text
