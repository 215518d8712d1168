"""Offline references for the progressive protocol: Surprise's SVD / SVD++ refit from scratch on
every rating before each time slice, then predicting that slice (the reference an online method
should approach; it sees no rating of the slice it predicts). Needs the ``bench`` extra
(``scikit-surprise``, ``pandas``).

Protocol (``evaluate_refit``): the slices are those of ``experiments.streaming.progressive.progressive_metrics``
(``slices`` equal-count slices of the events after the tuning part). A setting is chosen on the
tuning part alone (fit on its first half, RMSE on its second half); the chosen setting is refit
before each of the last ``last_slices`` slices (all of them by default; SVD++ is limited to fewer
because each of its fits takes about half a minute on MovieLens latest-small). Predictions are
clipped to the tuning part's rating range. Ratings per second = predicted ratings over the CPU
seconds of all the refits and predictions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from experiments.streaming.progressive import COLD, TUNE_FRAC, errors, prior_counts
from experiments.streaming.ratings import RatingStream

SurpriseFactory = Callable[[], object]  # -> an unfitted surprise algorithm


def surprise_methods(seed: int = 0) -> dict[str, tuple[dict[str, SurpriseFactory], int | None]]:
    """``{method: (grid, last_slices)}``: SVD over factors x regularisation on every slice; SVD++ with
    its default settings on the last slice only."""
    from surprise import SVD, SVDpp

    def svd(f: int, reg: float) -> SurpriseFactory:
        return lambda: SVD(n_factors=f, reg_all=reg, random_state=seed)

    return {
        "surprise_svd_refit": ({f"n_factors={f},reg={g}": svd(f, g) for f in (20, 100) for g in (0.02, 0.05)}, None),
        "surprise_svdpp_refit": ({"defaults": lambda: SVDpp(random_state=seed, cache_ratings=True)}, 1),
    }


def _trainset(stream: RatingStream, stop: int):
    import pandas as pd
    from surprise import Dataset, Reader

    df = pd.DataFrame({"u": stream.user[:stop], "i": stream.item[:stop], "r": stream.rating[:stop]})
    lo, hi = float(stream.rating.min()), float(stream.rating.max())
    return Dataset.load_from_df(df, Reader(rating_scale=(lo, hi))).build_full_trainset()


def fit_predict(stream: RatingStream, make: SurpriseFactory, fit_stop: int, start: int, stop: int) -> np.ndarray:
    """``(stop - start,)``: predictions of events ``start..stop`` by ``make()`` fitted on events
    ``0..fit_stop``."""
    algo = make()
    algo.fit(_trainset(stream, fit_stop))
    users, items = stream.user[start:stop].tolist(), stream.item[start:stop].tolist()
    return np.array([algo.predict(u, i, clip=False).est for u, i in zip(users, items, strict=True)])


def evaluate_refit(stream: RatingStream, methods: dict, tune_frac: float = TUNE_FRAC, slices: int = 8) -> dict:
    """``{method: {"setting", "tuning", "refits", metrics..., "ratings_per_s"}}`` under the protocol
    of the module docstring; the metrics are ``experiments.streaming.progressive.progressive_metrics``' over the
    predicted slices (``"slices"`` lists only those, each with its index)."""
    T = len(stream)
    cut = int(tune_frac * T)
    half = cut // 2
    clip = (float(stream.rating[:cut].min()), float(stream.rating[:cut].max()))
    parts = [p + cut for p in np.array_split(np.arange(T - cut), slices) if p.size]
    cold = prior_counts(stream.user) < COLD
    new = prior_counts(stream.item) < COLD
    out = {}
    for name, (grid, last) in methods.items():
        tuning = {s: errors(np.clip(fit_predict(stream, make, half, half, cut), *clip), stream.rating[half:cut])["rmse"]
                  for s, make in grid.items()}
        best = min(tuning, key=tuning.get)
        chosen = list(range(len(parts)))[-last:] if last else list(range(len(parts)))
        idx = np.concatenate([parts[k] for k in chosen])
        pred = np.empty(T)
        t0 = time.process_time()
        for k in chosen:
            p = parts[k]
            pred[p] = fit_predict(stream, grid[best], int(p[0]), int(p[0]), int(p[-1]) + 1)
        cpu_s = time.process_time() - t0
        pred = np.clip(pred, *clip)
        y = stream.rating
        ts = stream.timestamp
        out[name] = {
            "setting": best, **errors(pred[idx], y[idx]),
            "slices": [{"slice": k, **errors(pred[parts[k]], y[parts[k]]), "from_ts": int(ts[parts[k][0]]),
                        "to_ts": int(ts[parts[k][-1]])} for k in chosen],
            "cold_users": errors(pred[idx][cold[idx]], y[idx][cold[idx]]),
            "warm_users": errors(pred[idx][~cold[idx]], y[idx][~cold[idx]]),
            "new_items": errors(pred[idx][new[idx]], y[idx][new[idx]]),
            "ratings_per_s": idx.size / max(cpu_s, 1e-9), "tuning": tuning, "refits": len(chosen),
        }
    return out
