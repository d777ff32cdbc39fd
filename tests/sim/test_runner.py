"""sim/runner.py: what the Verilator build cache is keyed on."""
from mcf.sim import runner


def test_build_key_follows_the_make_overrides(monkeypatch):
    """A cached Verilator executable is reused only for the same Verilog, options and make step:
    another OPT_FAST (or compiler) builds anew instead of running an executable built otherwise."""
    key = runner.build_key("module m; endmodule", "m", ["-Wno-fatal"], False)
    assert runner.build_key("module m; endmodule", "m", ["-Wno-fatal"], False) == key
    assert runner.build_key("module m; endmodule // x", "m", ["-Wno-fatal"], False) != key
    assert runner.build_key("module m; endmodule", "m", [], False) != key
    monkeypatch.setattr(runner, "VERILATOR_OPT", runner.VERILATOR_OPT + " -fno-inline")
    assert runner.build_key("module m; endmodule", "m", ["-Wno-fatal"], False) != key
