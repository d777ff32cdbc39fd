"""Every plot the project writes, rendered as a user makes it, meets the plot rules of issue 12
(``tests/sw/plot_rules.py``): titles on every panel, legends = what is drawn, plain log-axis
labels, no offset text, coinciding curves said to coincide or drawn so each shows."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

from mcf.sw.cli import main  # noqa: E402

from .plot_rules import violations  # noqa: E402


@pytest.fixture
def checked(monkeypatch):
    """Every figure saved is checked first; returns {file name: violations} (the name the
    atomic writer renames the temporary file to)."""
    import re
    seen: dict[str, list[str]] = {}
    original = matplotlib.figure.Figure.savefig

    def savefig(fig, fname, *args, **kwargs):
        name = str(fname).rsplit("/", 1)[-1]
        seen[re.sub(r"^\.(.+)\.\w+\.png$", r"\1", name)] = violations(fig)
        return original(fig, fname, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_the_checker_catches_each_rule():
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2)
    from matplotlib.lines import Line2D
    x, = a.plot([1, 2, 3], [1.0001, 1.0002, 1.0003], label="x")
    y, = a.plot([1, 2, 3], [1.0001, 1.0002, 1.0003], label="y")
    a.legend(handles=[x, y, Line2D([], [], label="ghost")])
    b.set_title("b")
    b.plot([1, 10, 1000], [1, 2, 3])
    b.set_xscale("log")
    found = " | ".join(violations(fig))
    plt.close(fig)
    for rule in ("panel 0 (untitled): no title", "legend entry 'ghost'", "offset text", "10^k tick labels",
                 "'x' and 'y' coincide"):
        assert rule in found, (rule, found)


def test_plan_plot(checked, tmp_path, capsys):
    assert main(["plan", "--seq", "4096", "--nodes", "4", "--plot", str(tmp_path / "plan.png")]) == 0
    assert checked == {"plan.png": []}


def test_bench_paper_and_sweep_plots(checked, tmp_path, capsys):
    assert main(["bench", "paper", "--quick", "--out", str(tmp_path / "paper")]) == 0
    assert main(["bench", "sweep", "--quick", "--out", str(tmp_path / "sweep")]) == 0
    assert len(checked) == 5, sorted(checked)
    assert {k: v for k, v in checked.items() if v} == {}


def test_kv_replay_plot(checked, tmp_path, capsys):
    assert main(["kv", "replay", "--synthetic", "16", "--arrival-rate", "200", "--prefixes", "2",
                 "--prefix-tokens", "256:512", "--suffix-tokens", "4:20", "--model", "small", "--chunk", "32",
                 "--server-mb", "16", "--ranks", "2", "--compare", "--prime", "--plot", str(tmp_path / "kv.png")]) == 0
    assert len(checked) == 1 and {k: v for k, v in checked.items() if v} == {}
