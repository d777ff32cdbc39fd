"""The plot rules every figure MCF writes follows (issue 12), applied once before saving
(``mcf.sw.cliutil.save_figure`` calls ``tidy``):

* log axes label their ticks plainly (``100``, ``0.01``, ``2e+06``), never as ``10^k`` mathtext;
* linear axes have no offset text and span at least 2 % of their values (an offset or a zoom
  turns a flat 1.000 into a trend);
* curves that coincide in a panel are drawn so each shows (each its own line style and marker,
  markers shrinking so the one beneath stays visible) and the legend is redrawn to match.

matplotlib is imported by the caller (Agg); nothing here imports it at module level.
"""
from __future__ import annotations

STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "v", "D", "x")


def _plain(value, _pos=None) -> str:
    return f"{value:g}"


def plain_log_axis(axis) -> None:
    """Ticks labelled plainly (``20``, ``0.5``): the powers of ten, and when the axis spans
    few decades some minor ticks too (matplotlib's own thresholds), so no axis goes bare."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):     # 0.6, 20, 2e+06: never 6e-01 or 10^k
            return f"{x:g}"
    axis.set_major_formatter(Plain(labelOnlyBase=False))
    axis.set_minor_formatter(Plain(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


#: A linear axis spans at least this fraction of its largest value: differences below it (a
#: ratio of 0.99999997) are drawn flat, not stretched over the whole panel.
MIN_RELATIVE_SPAN = 0.02


def no_offset(ax, which: str) -> None:
    """No offset text, and no zoom into differences below ``MIN_RELATIVE_SPAN``."""
    from matplotlib.ticker import ScalarFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    get, set_ = (ax.get_xlim, ax.set_xlim) if which == "x" else (ax.get_ylim, ax.set_ylim)
    lo, hi = get()
    ref = max(abs(lo), abs(hi))
    if ref > 0 and abs(hi - lo) < MIN_RELATIVE_SPAN * ref:
        mid, half = (lo + hi) / 2, MIN_RELATIVE_SPAN * ref / 2
        set_(mid - half, mid + half) if hi >= lo else set_(mid + half, mid - half)
    fmt = axis.get_major_formatter()
    if isinstance(fmt, ScalarFormatter):
        fmt.set_useOffset(False)
        fmt.set_scientific(False)


def _coincide(a, b) -> bool:
    import numpy as np
    xa, ya = (np.asarray(v, dtype=float) for v in a.get_data())
    xb, yb = (np.asarray(v, dtype=float) for v in b.get_data())
    return (xa.shape == xb.shape and xa.size > 1 and np.allclose(xa, xb, equal_nan=True)
            and np.allclose(ya, yb, rtol=1e-3, equal_nan=True))


def separate_coinciding(ax) -> bool:
    """Give each line of a group of coinciding lines its own style and marker; True if any."""
    lines = [ln for ln in ax.get_lines() if ln.get_visible()]
    done, changed = set(), False
    for i, a in enumerate(lines):
        if i in done:
            continue
        group = [i] + [j for j in range(i + 1, len(lines)) if j not in done and _coincide(a, lines[j])]
        if len(group) < 2:
            continue
        for k, j in enumerate(group):
            ln = lines[j]
            ln.set_linestyle(STYLES[k % len(STYLES)])
            ln.set_marker(MARKERS[k % len(MARKERS)])
            ln.set_markersize(max(3.0, 9.0 - 2.0 * k))
            ln.set_markerfacecolor("none" if k == 0 else ln.get_color())
            ln.set_zorder(2 + k)
            done.add(j)
        changed = True
    return changed


def _redraw_legend(ax) -> None:
    old = ax.get_legend()
    if old is None:
        return
    texts = old.get_texts()
    kwargs = {"fontsize": texts[0].get_fontsize()} if texts else {}
    ax.legend(loc=old._loc, ncols=getattr(old, "_ncols", 1), **kwargs)


def tidy(fig) -> None:
    """Apply the rules to every panel of ``fig``."""
    for ax in fig.axes:
        for which, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
            if scale == "log":
                plain_log_axis(axis)
            elif scale == "linear":
                no_offset(ax, which)
        if separate_coinciding(ax):
            _redraw_legend(ax)
