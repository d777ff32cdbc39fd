"""``mcf plan --plot``: per-node KV memory and replica factor over the prefill steps (MCF Fig. 4).
matplotlib is imported here only, so plain planning does not pay for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .planner import Plan


def plot_plan(plan: Plan, path: str | Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    C = plan.num_chunks
    steps = np.arange(C + 1)
    mib = plan.memory / 2**20
    owner_only = np.zeros((C + 1, plan.nodes))            # the layout with no temporary replicas
    owner_only[1:] = np.cumsum(np.eye(plan.nodes)[plan.owner] * plan.block_bytes[:, None], axis=0)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.fill_between(steps, mib.min(axis=1), mib.max(axis=1), alpha=0.25, label="min..max over nodes")
    a.plot(steps, mib.mean(axis=1), label="mean per node")
    a.plot(steps, owner_only.max(axis=1) / 2**20, "--", label="owner-only (no replicas), max")
    a.axhline(plan.request.budget_bytes / 2**20, color="r", lw=0.8, label="budget S_node")
    a.set_ylim(0, max(mib.max(), owner_only.max() / 2**20) * 1.15 or 1)
    a.set_xlabel("prefill step (step C = decode-ready layout)")
    a.set_ylabel("KV memory per node (MiB)")
    a.legend(fontsize=8)
    b.step(steps, plan.r_step, where="post")
    b.set_xlabel("prefill step")
    b.set_ylabel("active replica factor r")
    b.set_ylim(0, plan.nodes + 1)
    a.set_title("KV memory per node")
    b.set_title("replica factor")
    fig.suptitle(f"{plan.scheme}: {plan.request.model.name}, S={plan.request.seq_len}, "
                 f"N={plan.nodes}, B={plan.chunk_size}, TTFT {plan.ttft_s:.3g} s (model)")
    fig.tight_layout()
    from mcf.sw.cliutil import save_figure
    save_figure(fig, path, what="--plot")
    plt.close(fig)
    return path
