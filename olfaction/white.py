"""Olfactory white (Weiss et al. 2012): as two non-overlapping random mixtures drawn from a fixed
pool grow, their perceived distance falls. Here the trained model's predicted distance is
measured against the number of components ``n``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from common.errors import InputError


def olfactory_white(
    predictor,
    pool: Sequence[str],
    n_values: Sequence[int] = range(1, 41),
    samples: int = 30,
    seed: int = 0,
    dataset: str = "Bushdid",
) -> list[dict]:
    """For each ``n``: ``samples`` pairs of disjoint ``n``-component mixtures drawn (seeded) from
    ``pool``, their distances by a :class:`~olfaction.predictor.MixturePredictor` as if measured
    in ``dataset``; returns rows ``{"n", "mean_distance", "std_distance", "samples"}``."""
    pool = sorted(set(pool))
    if 2 * max(n_values) > len(pool):
        raise InputError(
            f"pool of {len(pool)} molecules is too small for two disjoint {max(n_values)}-component mixtures"
        )
    rng = np.random.default_rng(seed)
    rows = []
    for n in n_values:
        a, b = [], []
        for _ in range(samples):
            pick = rng.choice(len(pool), size=2 * n, replace=False)
            a.append(tuple(sorted(pool[i] for i in pick[:n])))
            b.append(tuple(sorted(pool[i] for i in pick[n:])))
        d = predictor.predict_distance(a, b, [dataset] * len(a))
        rows.append(
            {
                "n": int(n),
                "mean_distance": float(d.mean()),
                "std_distance": float(d.std()),
                "samples": samples,
            }
        )
    return rows


def white_trend(rows: list[dict]) -> dict:
    """Spearman correlation of mean distance with ``n`` and the fitted slope per component."""
    n = np.array([r["n"] for r in rows], float)
    d = np.array([r["mean_distance"] for r in rows])
    rho = float(spearmanr(n, d)[0]) if len(rows) > 2 else float("nan")
    slope = float(np.polyfit(n, d, 1)[0]) if len(rows) > 1 else float("nan")
    return {"spearman_n_vs_distance": rho, "slope_per_component": slope, "falls_with_n": bool(rho < 0)}


def plot_white(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["n"] for r in rows]
    m = np.array([r["mean_distance"] for r in rows])
    s = np.array([r["std_distance"] for r in rows])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(n, m, "o-", ms=3)
    ax.fill_between(n, m - s, m + s, alpha=0.2)
    ax.set(xlabel="components per mixture (n)", ylabel="predicted distance", title="olfactory white")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
