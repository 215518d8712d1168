"""Olfactory white (Weiss et al. 2012): as two non-overlapping random mixtures drawn from a fixed
pool grow, their perceived distance falls. Here the trained model's predicted distance is
measured against the number of components ``n``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from common.errors import InputError

SAMPLE_CHUNK = 1024  # pairs drawn and predicted at once (memory stays bounded for any ``samples``)


def check_white_sizes(n_values: Sequence[int], pool_size: int) -> None:
    """InputError unless every ``n`` is in ``[1, pool_size // 2]`` (two disjoint ``n``-component
    mixtures must fit in the pool). A ``range`` is checked from its ends, never iterated."""
    if isinstance(n_values, range):
        if len(n_values) == 0:
            raise InputError("no mixture sizes to measure")
        lo, hi = min(n_values[0], n_values[-1]), max(n_values[0], n_values[-1])
    else:
        if len(n_values) == 0:
            raise InputError("no mixture sizes to measure")
        lo, hi = min(n_values), max(n_values)
    if lo < 1:
        raise InputError(f"mixture sizes must be >= 1, got {lo}")
    if 2 * hi > pool_size:
        raise InputError(f"pool of {pool_size} molecules is too small for two disjoint {hi}-component mixtures "
                         f"(at most {pool_size // 2})")


def olfactory_white(
    predictor,
    pool: Sequence[str],
    n_values: Sequence[int] = range(1, 41),
    samples: int = 30,
    seed: int = 0,
    dataset: str = "Bushdid",
    progress: bool = False,
) -> list[dict]:
    """For each ``n``: ``samples`` pairs of disjoint ``n``-component mixtures drawn (seeded) from
    ``pool``, their distances by a :class:`~olfaction.predictor.MixturePredictor` as if measured
    in ``dataset``; returns rows ``{"n", "mean_distance", "std_distance", "samples"}``. Pairs are
    drawn and predicted :data:`SAMPLE_CHUNK` at a time (the mean and sd accumulate); ``progress``:
    a tqdm bar over the sizes on stderr."""
    pool = sorted(set(pool))
    check_white_sizes(n_values, len(pool))
    if samples < 1:
        raise InputError(f"samples must be >= 1, got {samples}")
    rng = np.random.default_rng(seed)
    rows = []
    from tqdm import tqdm

    for n in tqdm(n_values, desc="white", unit="size", file=sys.stderr, disable=not progress):
        total = total_sq = 0.0
        d = np.zeros(0)
        for start in range(0, samples, SAMPLE_CHUNK):
            a, b = [], []
            for _ in range(min(SAMPLE_CHUNK, samples - start)):
                pick = rng.choice(len(pool), size=2 * n, replace=False)
                a.append(tuple(sorted(pool[i] for i in pick[:n])))
                b.append(tuple(sorted(pool[i] for i in pick[n:])))
            d = np.asarray(predictor.predict_distance(a, b, [dataset] * len(a)), np.float64)
            total, total_sq = total + float(d.sum()), total_sq + float((d * d).sum())
        if samples <= SAMPLE_CHUNK:  # one chunk: numpy's own mean / sd of it
            mean, sd = float(d.mean()), float(d.std())
        else:
            mean = total / samples
            sd = float(np.sqrt(max(total_sq / samples - mean * mean, 0.0)))
        rows.append(
            {
                "n": int(n),
                "mean_distance": mean,
                "std_distance": sd,
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
    """The curve (mean ± sd of the predicted distance against ``n``) as a PNG at ``path``, drawn
    with matplotlib's object API (no pyplot state: safe beside other threads) and written atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from common.io import atomic_write

    n = [r["n"] for r in rows]
    m = np.array([r["mean_distance"] for r in rows])
    s = np.array([r["std_distance"] for r in rows])
    fig = Figure(figsize=(5, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(n, m, "o-", ms=3)
    ax.fill_between(n, m - s, m + s, alpha=0.2)
    ax.set(xlabel="components per mixture (n)", ylabel="predicted distance", title="olfactory white")
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=100, format="png")
