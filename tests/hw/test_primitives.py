"""hw/primitives.py: the simulation models of the AMD cells the node instantiates are appended to a design
that uses them (once each, in the table's order), and ``mcf synth``'s ``strip_models`` cuts them off again."""

from mcf.hw import lut, primitives
from mcf.hw.compute import dot_array
from mcf.hw.primitives import strip_models, with_models

LUT_DESIGN = "module top; LUT6 #(.INIT(64'h0)) u (.O(), .I0(), .I1(), .I2(), .I3(), .I4(), .I5()); endmodule\n"


def test_models_appended_and_stripped():
    """``with_models`` appends the LUT6 model once to a design with an instance; ``strip_models`` cuts at
    the first model (either order of the DSP48E2's and the LUT6's)."""
    text = with_models(LUT_DESIGN)
    assert lut.MODEL_MARK in text and dot_array.MODEL_MARK not in text and with_models(text) == text
    assert strip_models(text) == LUT_DESIGN + "\n"
    both = with_models(LUT_DESIGN + "// DSP48E2 u2 ();\n")
    assert dot_array.MODEL_MARK in both and lut.MODEL_MARK in both
    assert "module LUT6" not in strip_models(both) and "module DSP48E2" not in strip_models(both)
    assert with_models("module x; endmodule") == "module x; endmodule"


def test_every_model_file_starts_with_its_mark_and_defines_its_cells():
    """A model's mark is its file's first line (where synthesis cuts), and the file defines every cell it
    is appended for (``LUT6_2 `` or ``CARRY4 `` in a design appends hw/lut6.v: it must hold them)."""
    for model in primitives.MODELS:
        text = model.path.read_text()
        assert text.startswith(model.mark), model.path
        for cell in model.cells:
            assert f"module {cell}" in text, (model.path, cell)


def test_each_cell_appends_its_model():
    for model in primitives.MODELS:
        for cell in model.cells:
            text = with_models(f"module top; {cell} u (); endmodule\n")
            assert model.mark in text and text.count(model.mark) == 1, cell
            assert strip_models(text) == f"module top; {cell} u (); endmodule\n\n"
