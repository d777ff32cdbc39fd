"""The logic-depth walk (``mcf.sw.timing``) on hand-made mapped netlists: every cost of the
model counted as docs/timing.md says, names and groups readable, bad netlists refused."""
import pytest

from mcf.sw import timing
from mcf.sw.timing import BRAM_START_LEVELS, BUDGET_LEVELS, CARRY4_HOP, NetlistError, analyze


def cell(ctype, conns, dirs=None, **params):
    dirs = dirs or {p: ("output" if p in ("Q", "O", "O5", "O6", "CO", "DOUTBDOUT") else "input") for p in conns}
    return {"type": ctype, "connections": conns, "port_directions": dirs, "parameters": params}


def module(cells, netnames=None, ports=None):
    nets = {name: {"bits": bits} for name, bits in (netnames or {}).items()}
    return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                "ports": ports or {}, "cells": cells, "netnames": nets}}}


def chain(n_luts):
    """a (flip-flop) -> n LUTs -> b (flip-flop); nets numbered from 10."""
    cells = {"ff_a": cell("FDRE", {"C": [2], "D": [3], "Q": [10]})}
    for i in range(n_luts):
        cells[f"lut{i}"] = cell("LUT2", {"I0": [10 + i], "I1": [4], "O": [11 + i]})
    cells["ff_b"] = cell("FDRE", {"C": [2], "D": [10 + n_luts], "Q": [5]})
    return cells


def test_lut_levels_between_two_registers():
    d = analyze(module(chain(3), {"a": [10], "b": [5]}))
    assert d.max_levels == 3
    worst = d.paths[0]
    assert (worst.levels, worst.luts, worst.carries, worst.start, worst.end) == (3, 3, 0, "a", "b")
    assert d.histogram[3] == 1


def test_carry_chain_costs_one_level_and_a_hop_per_further_carry4():
    cells = {"ff_a": cell("FDRE", {"C": [2], "D": [3], "Q": [10]}),
             "lut": cell("LUT1", {"I0": [10], "O": [11]}),
             "c0": cell("CARRY4", {"S": [11, 1, 1, 1], "DI": [1, 1, 1, 1], "CI": [1], "O": [20, 21, 22, 23],
                                    "CO": [24, 25, 26, 27]}),
             "c1": cell("CARRY4", {"S": [1, 1, 1, 1], "DI": [1, 1, 1, 1], "CI": [27], "O": [30, 31, 32, 33],
                                    "CO": [34, 35, 36, 37]}),
             "ff_b": cell("FDRE", {"C": [2], "D": [33], "Q": [5]})}
    d = analyze(module(cells, {"a": [10], "sum": [5]}))
    assert d.max_levels == pytest.approx(2 + CARRY4_HOP)
    assert (d.paths[0].luts, d.paths[0].carries) == (1, 1)


def test_block_ram_without_output_register_starts_late():
    def bram(reg):
        return {"ram": cell("RAMB36E2", {"CLKBWRCLK": [2], "ADDRBWRADDR": [3], "DOUTBDOUT": [10]},
                            DOB_REG=reg),
                "lut": cell("LUT1", {"I0": [10], "O": [11]}),
                "ff": cell("FDRE", {"C": [2], "D": [11], "Q": [5]})}
    assert analyze(module(bram(0))).max_levels == pytest.approx(BRAM_START_LEVELS + 1)
    assert analyze(module(bram(1))).max_levels == 1


def test_dsp_input_through_an_unregistered_pre_adder_costs_more():
    """Round 33: a DSP48E2's A pin, not registered, into the multiplier (M register): the multiplier's half
    (DSP_HALF_LEVELS); through the pre-adder without its AD register (AMULTSEL "AD", ADREG 0) half as much
    again (DSP_PREADD_LEVELS); a registered D pin ends at its register."""
    def dsp(**params):
        return {"ff": cell("FDRE", {"C": [2], "D": [3], "Q": [10]}),
                "lut": cell("LUT1", {"I0": [10], "O": [11]}),
                "dsp": cell("DSP48E2", {"CLK": [2], "A": [11], "D": [12], "P": [20]},
                            {"CLK": "input", "A": "input", "D": "input", "P": "output"},
                            AREG=0, DREG=1, MREG=1, PREG=1, **params),
                "ffd": cell("FDRE", {"C": [2], "D": [4], "Q": [12]})}
    plain = analyze(module(dsp(AMULTSEL="A", ADREG=1))).max_levels
    assert plain == pytest.approx(1 + timing.DSP_HALF_LEVELS)
    assert analyze(module(dsp(AMULTSEL="AD", ADREG=1))).max_levels == pytest.approx(plain)
    assert analyze(module(dsp(AMULTSEL="AD", ADREG=0))).max_levels == pytest.approx(plain + timing.DSP_PREADD_LEVELS)


def test_ports_are_start_and_end_points():
    cells = {"lut": cell("LUT2", {"I0": [3], "I1": [4], "O": [6]})}
    ports = {"x": {"direction": "input", "bits": [3, 4]}, "y": {"direction": "output", "bits": [6]}}
    d = analyze(module(cells, ports=ports))
    assert d.max_levels == 1 and d.paths[0].start.startswith("port x") and d.paths[0].end == "port y"


def test_budget_is_the_250_mhz_period_in_levels():
    assert BUDGET_LEVELS == int((4.0 - timing.OVERHEAD_NS) / timing.LEVEL_NS) == 8
    d = analyze(module(chain(BUDGET_LEVELS + 1)))
    assert d.as_dict()["endpoints_over_budget"] == 1 and len(d.over()) == 1


def test_combinational_loop_and_unknown_cells_are_refused():
    loop = {"l0": cell("LUT1", {"I0": [11], "O": [10]}), "l1": cell("LUT1", {"I0": [10], "O": [11]}),
            "ff": cell("FDRE", {"C": [2], "D": [10], "Q": [5]})}
    with pytest.raises(NetlistError, match="loop"):
        analyze(module(loop))
    with pytest.raises(NetlistError, match="not in the timing model"):
        analyze(module({"x": cell("MYSTERY", {"I": [3], "O": [4]})}))


def test_a_black_box_part_is_a_registered_boundary():
    """``mcf synth --method blocks``: a part synthesized on its own is a black box in its parent;
    its inputs end paths and its outputs start them (at 0 levels, as its own run times its ports)."""
    cells = {"ff_a": cell("FDRE", {"C": [2], "D": [3], "Q": [10]}),
             "l0": cell("LUT1", {"I0": [10], "O": [11]}),
             "part": cell("node.exec", {"x": [11], "y": [20]}, {"x": "input", "y": "output"}),
             "l1": cell("LUT1", {"I0": [20], "O": [21]}), "l2": cell("LUT1", {"I0": [21], "O": [22]}),
             "ff_b": cell("FDRE", {"C": [2], "D": [22], "Q": [5]})}
    with pytest.raises(NetlistError, match="not in the timing model"):
        analyze(module(cells))
    d = analyze(module(cells, {"a": [10], "b": [5]}), boundaries={"\\node.exec"})
    assert d.max_levels == 2 and d.endpoints == 2      # part:y -> b (2), a -> part:x (1); ff_a:D is undriven
    assert (d.paths[0].start, d.paths[0].end) == ("part:y", "b")
    assert (d.paths[1].start, d.paths[1].end) == ("a", "part:x")


def test_a_part_joins_its_parents_paths_at_its_pins():
    """The part's own run says when its outputs are ready and how deep its inputs go; the parent
    adds its own levels on both sides of the pins."""
    part = {"ff": cell("FDRE", {"C": [2], "D": [31], "Q": [32]}),
            "i0": cell("LUT1", {"I0": [3], "O": [30]}), "i1": cell("LUT1", {"I0": [30], "O": [31]}),
            "o0": cell("LUT1", {"I0": [32], "O": [33]}), "o1": cell("LUT1", {"I0": [33], "O": [34]}),
            "o2": cell("LUT1", {"I0": [34], "O": [35]})}
    ports = {"x": {"direction": "input", "bits": [3]}, "y": {"direction": "output", "bits": [35]},
             "z": {"direction": "output", "bits": [1]}}
    own = analyze(module(part, ports=ports))
    assert own.ports == {"in": {"x": [2.0]}, "out": {"y": [3.0], "z": [None]}}
    parent = {"ff_a": cell("FDRE", {"C": [2], "D": [3], "Q": [10]}),
              "l0": cell("LUT1", {"I0": [10], "O": [11]}),
              "part": cell("top.u", {"x": [11], "y": [20]}, {"x": "input", "y": "output"}),
              "l1": cell("LUT1", {"I0": [20], "O": [21]}),
              "ff_b": cell("FDRE", {"C": [2], "D": [21], "Q": [5]})}
    d = analyze(module(parent, {"a": [10], "b": [5]}), boundaries={"top.u": own.ports})
    assert d.max_levels == 4 and (d.paths[0].start, d.paths[0].end) == ("part:y", "b")   # 3 + 1
    assert d.paths[1].levels == 3 and (d.paths[1].start, d.paths[1].end) == ("a", "part:x")  # 1 + 2


def test_a_lut_has_arcs_only_from_the_inputs_its_function_reads():
    """Round 30: a LUT's arcs come from its INIT.  A chain of LUT6_2 whose O5 feeds the next one's I3
    (``mcf.hw.lut.add3``'s carry-save carries) does not ripple: O5 (add3's INIT: the majority of I0 .. I2)
    reads no I3, so each bit is one LUT from the registers, and O6 (which reads I3) two.  A LUT2 whose
    INIT ignores I1 has no arc from it; without an INIT every input counts."""
    from mcf.hw.lut import ADD3_INIT
    init = format(ADD3_INIT, "064b")
    cells = {f"ff{i}": cell("FDRE", {"C": [2], "D": [3], "Q": [10 + i]}) for i in range(3)}
    k = [1]                                                    # the first bit's I3: a constant
    for i in range(6):
        cells[f"l{i}"] = cell("LUT6_2", {"I0": [10], "I1": [11], "I2": [12], "I3": k[-1:], "I4": ["0"], "I5": ["1"],
                                         "O5": [100 + i], "O6": [200 + i]}, INIT=init)
        k = [100 + i]
        cells[f"q{i}"] = cell("FDRE", {"C": [2], "D": [200 + i], "Q": [300 + i]})
    d = analyze(module(cells))
    assert d.max_levels == 2
    # the same chain read without the function (the old model): the O5s ripple, 6 LUTs deep
    for i in range(6):
        del cells[f"l{i}"]["parameters"]["INIT"]
    assert analyze(module(cells)).max_levels == 6
    # a LUT2 at the end of a 3-LUT chain whose INIT reads only I1 (bit a of 1100 is a's I1: O = I1), I1 a
    # register: one level, not three
    cells = chain(3)
    cells["ff_c"] = cell("FDRE", {"C": [2], "D": [3], "Q": [4]})
    assert analyze(module(cells)).max_levels == 3
    cells["lut2"]["parameters"]["INIT"] = "1100"
    assert analyze(module(cells)).max_levels == 1


def test_lut6_2_counts_one_lut():
    from mcf.sw.commands.synth import count
    assert count({"LUT6_2": 10, "LUT2": 3, "INV": 1, "CARRY4": 4})["LUT"] == 14
