"""The figures of ``moh bench``: routing statistics per timestep, FID against training steps and
quality against training compute. Each writes a PNG from its own
``matplotlib.figure.Figure`` (no pyplot state is shared, so they are safe to call from several
threads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_routing(route_log: list[dict], trace: list[dict], path: Path, depth_options, n_transforms: int, n_levels: int) -> None:
    """Routing statistics per timestep: mean scan depth, transform-expert shares and level use
    over timestep bins (training routes), plus the route taken at each sampling step."""
    from matplotlib.figure import Figure

    bins = np.linspace(0, 1000, 11)
    t = np.array([r["timestep"] for r in route_log])
    d = np.array([r["depth"] for r in route_log], dtype=float)
    tr = np.array([r["transform"] for r in route_log])
    lv = np.zeros((len(route_log), n_levels))
    for i, r in enumerate(route_log):
        lv[i, r["levels"]] = 1
    which = np.clip(np.digitize(t, bins) - 1, 0, 9)
    centers = (bins[:-1] + bins[1:]) / 2
    fig = Figure(figsize=(17, 3.3))
    ax = fig.subplots(1, 4)
    ax[0].plot(centers, [d[which == b].mean() if (which == b).any() else np.nan for b in range(10)], "o-")
    ax[0].set(xlabel="timestep", ylabel="mean scan depth", title="depth (training routes)", ylim=(0, max(depth_options) + 0.5))
    share = np.array([[(tr[which == b] == e).mean() if (which == b).any() else 0 for e in range(n_transforms)] for b in range(10)])
    ax[1].stackplot(centers, share.T, labels=[f"expert {e}" for e in range(n_transforms)])
    ax[1].set(xlabel="timestep", ylabel="share", title="transform expert")
    ax[1].legend(fontsize=7, loc="upper right")
    for lvl in range(n_levels):
        ax[2].plot(centers, [lv[which == b, lvl].mean() if (which == b).any() else np.nan for b in range(10)], "o-", label=f"level {lvl}")
    ax[2].set(xlabel="timestep", ylabel="use", title="representation levels", ylim=(-0.05, 1.05))
    ax[2].legend(fontsize=7)
    ax[3].plot([r["timestep"] for r in trace], [r["depth"] for r in trace], "s-")
    ax[3].invert_xaxis()
    ax[3].set(xlabel="timestep (sampling runs right to left)", ylabel="depth", title="route per sampling step")
    fig.tight_layout()
    save_png(fig, path)


def plot_curves(curve: list[dict], path: Path, x: str, xlabel: str, panels: tuple[tuple[str, str], ...],
                figsize: tuple[float, float], legend_size: float | None = None, title: str | None = None) -> None:
    """One panel per ``(key, ylabel)`` of ``panels``: the ``curve`` rows' ``key`` against their
    ``x``, one line per model, titled ``title`` or the label before its bracket (FID against
    training steps in ``vision.bench``, quality against training minutes in ``vision.compute``)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, label) in zip(axes, panels, strict=True):
        for m in dict.fromkeys(c["model"] for c in curve):
            pts = sorted((c[x], c[key]) for c in curve if c["model"] == m)
            ax.plot(*zip(*pts, strict=True), "o-", label=m)
        ax.set(xlabel=xlabel, ylabel=label, title=title or label.split(" (")[0])
        ax.legend(fontsize=legend_size)
    fig.tight_layout()
    save_png(fig, path)


def save_png(fig, path: Path) -> None:
    """Write ``fig`` as PNG atomically (a reader never sees half a plot)."""
    from common.io import atomic_write

    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
