"""``mcf kv replay --plot``: TTFT percentiles over prompt length, and the load-or-recompute
choices over hit length beside the break-even bandwidth B* = s R.  matplotlib (Agg) is imported
here only; the file is written atomically."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from .replay import percentile


def _plain_log_axis(ax, which: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def fmt(v, _pos):
        if v <= 0:
            return ""
        for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if v >= div:
                return f"{v / div:g}{unit}"
        return f"{v:g}"
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_formatter(NullFormatter())


def plot_replay(arms, cost, path, title: str) -> Path:
    """``arms``: [(label, ReplayResult)]."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12.5, 4.8))

    # (a) TTFT percentiles per prompt-length bin
    all_n = np.array([r.n for _, res in arms for r in res.records], dtype=float)
    edges = np.unique(np.quantile(all_n, np.linspace(0, 1, 7)))
    if edges.size < 2:
        edges = np.array([all_n.min() * 0.9, all_n.max() * 1.1])
    for i, (label, res) in enumerate(arms):
        n = np.array([r.n for r in res.records], dtype=float)
        t = np.array([r.ttft_s for r in res.records])
        xs, p50, p99 = [], [], []
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = (n >= lo) & ((n <= hi) if hi == edges[-1] else (n < hi))
            if m.any():
                xs.append(float(np.median(n[m])))
                p50.append(percentile(t[m], 50))
                p99.append(percentile(t[m], 99))
        color, size = f"C{i}", 9 - 2.5 * i          # later arms smaller: coinciding lines stay visible
        a.plot(xs, p50, "o-", color=color, ms=size, mfc="none" if i else color, label=f"{label}: p50")
        a.plot(xs, p99, "s--", color=color, ms=size, mfc="none" if i else color, label=f"{label}: p99")
    a.set_xscale("log")
    a.set_yscale("log")
    _plain_log_axis(a, "x")
    _plain_log_axis(a, "y")
    a.set_xlabel("prompt length (tokens)")
    a.set_ylabel("TTFT (s)")
    a.set_title("TTFT percentiles by prompt length")
    a.grid(True, which="major", alpha=0.3)
    a.legend(fontsize=8)

    # (b) choices over hit length, beside B* = s R and the break-even with T0
    hits = np.array([r.hit_chunks * cost.chunk for _, res in arms for r in res.records if r.hit_chunks])
    if hits.size:
        xs = np.unique(np.geomspace(cost.chunk, max(hits.max(), 2 * cost.chunk), 60).astype(int))
        b.plot(xs, [cost.b_star(x) for x in xs], "k-", label="B* = s R (model)")
        be = np.array([cost.breakeven_bandwidth(x) for x in xs])
        ok = np.isfinite(be)
        if ok.any():
            b.plot(xs[ok], be[ok], "k--", label=f"break-even with T0 = {cost.t0 * 1e3:.3g} ms")
        b.axhline(cost.total_bandwidth, color="C2", lw=1.2,
                  label=f"B of the cost model, {cost.ranks} ranks = {cost.total_bandwidth / 1e9:.3g} GB/s")
        drawn = set()
        for label, res in arms:
            for r in res.records:
                if not r.hit_chunks or r.decision not in ("load", "recompute"):
                    continue
                x = r.hit_chunks * cost.chunk
                if r.decision == "load" and r.load_s > 0:
                    y = x * cost.s / r.load_s           # bandwidth this load achieved (measured)
                    key, style = "load", dict(marker="o", color="C0", alpha=0.4, ls="none", ms=4)
                else:
                    y = x * cost.s / max(cost.load_s(r.hit_chunks) - cost.t0, 1e-12)
                    key, style = "recompute", dict(marker="x", color="C3", ls="none", ms=5)
                lab = {"load": "chosen: load (bandwidth it achieved, L1 + servers, measured)",
                       "recompute": "chosen: recompute (model's bandwidth)"}[key] if key not in drawn else None
                drawn.add(key)
                b.plot([x], [y], label=lab, **style)
        b.set_xscale("log")
        b.set_yscale("log")
        _plain_log_axis(b, "x")
        _plain_log_axis(b, "y")
        b.legend(fontsize=8)
    else:
        b.text(0.5, 0.5, "no request had a hit", ha="center", va="center", transform=b.transAxes)
    b.set_xlabel("hit length (tokens)")
    b.set_ylabel("bandwidth (bytes/s)")
    b.set_title("load or recompute (a hit pays off above the dashed line)")
    b.grid(True, which="major", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=".plot-", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    """The process umask (mkstemp creates 0600; a written output gets the usual mode)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
