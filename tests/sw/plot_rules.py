"""The plot rules of issue 12, checked on a drawn matplotlib figure: a title on every panel,
legends that list only what is drawn, log axes with plain tick labels (no 10^k mathtext), no
offset text (a 1.000 that an offset turns into a trend), and curves that coincide either said
to (a label with "=" or "coincide") or drawn so each shows (different line style or marker)."""
from __future__ import annotations

import numpy as np


def _drawn(ax) -> dict[str, object]:
    """Label -> artist for every labelled artist of ``ax`` with at least one finite point."""
    out = {}
    for line in ax.get_lines():
        x, y = (np.asarray(a, dtype=float) for a in line.get_data())
        if line.get_label().startswith("_") or not line.get_visible():
            continue
        if x.size and np.isfinite(x).any() and np.isfinite(y).any():
            out[line.get_label()] = line
    for coll in ax.collections:
        if not coll.get_label().startswith("_") and coll.get_visible():
            off = np.asarray(coll.get_offsets())
            paths = coll.get_paths()
            if (off.size and np.isfinite(off).any()) or paths:
                out[coll.get_label()] = coll
    for patch in ax.patches:
        if not patch.get_label().startswith("_") and patch.get_visible():
            out[patch.get_label()] = patch
    for cont in ax.containers:
        if not cont.get_label().startswith("_") and len(cont):
            out[cont.get_label()] = cont
    return out


def violations(fig) -> list[str]:
    """What of the rules ``fig`` breaks (empty: none)."""
    fig.canvas.draw()
    bad = []
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    panels = [ax for ax in fig.axes if ax.axison and not ax.get_label() == "<colorbar>"]
    for i, ax in enumerate(panels):
        name = f"panel {i} ({ax.get_title() or suptitle or 'untitled'})"
        if not any(ax.get_title(loc=loc) for loc in ("left", "center", "right")) \
                and not (len(panels) == 1 and suptitle):
            bad.append(f"{name}: no title")
        drawn = _drawn(ax)
        legend = ax.get_legend()
        if legend is not None:
            for text in legend.get_texts():
                if text.get_text() not in drawn:
                    bad.append(f"{name}: legend entry {text.get_text()!r} is not drawn")
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            labels = [t.get_text() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            if scale == "log" and any("^" in t or "mathdefault" in t for t in labels):
                bad.append(f"{name}: log axis with 10^k tick labels {labels[:3]}")
            offset = axis.get_offset_text().get_text()
            if offset:
                bad.append(f"{name}: offset text {offset!r} on the {axis.axis_name} axis")
        lines = [ln for ln in ax.get_lines() if ln.get_visible() and len(ln.get_xdata()) > 1]
        for a in range(len(lines)):
            for b in range(a + 1, len(lines)):
                la, lb = lines[a], lines[b]
                xa, ya = (np.asarray(v, dtype=float) for v in la.get_data())
                xb, yb = (np.asarray(v, dtype=float) for v in lb.get_data())
                if xa.shape != xb.shape or not (np.allclose(xa, xb) and np.allclose(ya, yb, rtol=1e-3)):
                    continue
                distinct = (la.get_linestyle() != lb.get_linestyle() or la.get_marker() != lb.get_marker())
                said = any(("=" in s or "coincide" in s.lower())
                           for s in (la.get_label(), lb.get_label(), ax.get_title()))
                if not (distinct or said):
                    bad.append(f"{name}: {la.get_label()!r} and {lb.get_label()!r} coincide, drawn alike "
                               "and not said to")
    return bad
