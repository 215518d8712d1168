"""MovieLens "latest-small" as a real stream of partially observed users, and its held-out evaluation.

Data: the ``movielens`` data frame of the R package dslabs (Debian ``r-cran-dslabs``, Artistic-2.0;
the ratings are GroupLens' "ml-latest-small" of October 2016, free for research use: 100,004
ratings, 671 users x 9,066 movies, timestamps 1995-2016). It is read in place from the package's
R lazy-load database with PyPI ``rdata`` and zlib (``streaming.rlazyload.read_lazyload``); nothing is copied.

Stream (``build_stream``): the ``movies`` most-rated movies are the ``n`` coordinates (500 give
about 13 % density); users are streamed in the order of their first rating (any movie; ties by
userId), each as a vector of their star ratings on those movies with NaN where they did not rate.
Users without a rating of those movies are dropped. Of each stream user's ``m`` ratings,
``h = min(⌊holdout · m + ½⌋, m − 1)`` chosen at random (seeded) go to ``heldout`` and are removed
from ``values``, so no user arrives empty and no held-out rating is visible. The first
``source_users`` users (100 by default, about 15 % of them) are the pretraining source: all their
ratings, nothing held out, and they are not part of the stream. 100 users x ~65 ratings is the
least that identifies a handful of rank-few subspaces of n = 500 (K·r·n unknowns ≈ observed
ratings), and taking the earliest users keeps the stream causal: nothing is pretrained on the
future. Each user's ``label`` is a rough group: the genre that occurs most often among the movies
they rated (each movie counts each of its genres; ties alphabetical); ``label_names`` maps it.

Evaluation (``evaluate_heldout``): every method sees the source, then the stream in order, and
predicts each user's held-out ratings when that user arrives (before any update with the user);
RMSE and NRMSE on the held-out entries, over the whole stream and over its part after the tuning
prefix (the first ``tune_users`` stream users, the only part hyper-parameters were chosen on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.errors import DataError, InputError
from streaming.data import Stream
from streaming.rlazyload import read_lazyload

DSLABS_DATA = Path("/usr/lib/R/site-library/dslabs/data")
INSTALL_HINT = "install the Debian package r-cran-dslabs (apt-get install r-cran-dslabs)"
MOVIELENS_ROWS = 100_004  # dslabs 0.7.x: ml-latest-small of 2016
REQUIRED_COLUMNS = ("userId", "movieId", "rating", "timestamp", "genres")


def load_movielens(folder: str | Path | None = None, expected_rows: int | None = MOVIELENS_ROWS):
    """The dslabs ``movielens`` ratings as a validated ``pandas.DataFrame`` with columns
    ``userId, movieId (int64), rating (float64, 0.5-5 stars in halves), timestamp (int64, Unix s),
    genres (str, '|'-separated)`` (and ``title``, ``year`` when present), one row per rating.

    ``folder``: the package's ``data`` directory (default: Debian's ``DSLABS_DATA``).
    ``expected_rows``: the row count the documented numbers were made with (``None``: any).
    """
    import pandas as pd

    folder = DSLABS_DATA if folder is None else Path(folder)
    if not (folder / "Rdata.rdx").is_file():
        raise DataError(f"the dslabs data was not found in {folder}: {INSTALL_HINT}")
    df = read_lazyload(folder, "movielens")
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"movielens in {folder} is a {type(df).__name__}, not a data frame")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"movielens in {folder} lacks columns {missing} (has {list(df.columns)})")
    if expected_rows is not None and len(df) != expected_rows:
        raise DataError(f"movielens in {folder} has {len(df)} ratings, expected {expected_rows} "
                        "(another dslabs version: pass expected_rows=None to accept it)")
    return validate_ratings(df, str(folder))


def validate_ratings(df, where: str = "ratings"):
    """Check and normalise a ratings table (see ``load_movielens`` for the columns)."""
    import pandas as pd

    if len(df) == 0:
        raise DataError(f"{where}: no ratings")
    for col in ("userId", "movieId", "rating", "timestamp"):
        if df[col].isna().any():
            raise DataError(f"{where}: column {col} has {int(df[col].isna().sum())} missing values")
    out = pd.DataFrame({
        "userId": df["userId"].astype("int64").to_numpy(),
        "movieId": df["movieId"].astype("int64").to_numpy(),
        "rating": df["rating"].astype("float64").to_numpy(),
        "timestamp": df["timestamp"].astype("int64").to_numpy(),
        "genres": df["genres"].astype("string").fillna("(no genres listed)").astype(str).to_numpy(),
    })
    for col in ("title", "year"):
        if col in df.columns:
            out[col] = df[col].to_numpy()
    r = out["rating"].to_numpy()
    if not np.isfinite(r).all() or r.min() < 0.5 or r.max() > 5.0 or (np.round(2 * r) != 2 * r).any():
        raise DataError(f"{where}: ratings must be 0.5-5 stars in half steps, got range [{r.min()}, {r.max()}]")
    if (out["timestamp"] <= 0).any() or (out["userId"] <= 0).any() or (out["movieId"] <= 0).any():
        raise DataError(f"{where}: userId, movieId and timestamp must be positive")
    dup = out.duplicated(["userId", "movieId"])
    if dup.any():
        raise DataError(f"{where}: {int(dup.sum())} duplicate (userId, movieId) ratings")
    return out


# ---------------------------------------------------------------------------------------------
# the stream
# ---------------------------------------------------------------------------------------------
def top_movies(ratings, movies: int) -> np.ndarray:
    """movieIds ``(movies,)`` of the most-rated movies, by count descending, ties by movieId."""
    counts = ratings.groupby("movieId").size()
    if len(counts) < movies:
        raise InputError(f"--movies {movies} exceeds the {len(counts)} movies in the ratings")
    order = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return np.array([m for m, _ in order[:movies]], np.int64)


def user_order(ratings) -> np.ndarray:
    """userIds in the order of their first rating (earliest timestamp over all movies; ties by id)."""
    first = ratings.groupby("userId")["timestamp"].min()
    return np.array([u for u, _ in sorted(first.items(), key=lambda kv: (kv[1], kv[0]))], np.int64)


def _user_genre(genres_of_rated: list[str]) -> str:
    counts: dict[str, int] = {}
    for g in genres_of_rated:
        for name in g.split("|"):
            counts[name] = counts.get(name, 0) + 1
    return min(counts, key=lambda name: (-counts[name], name))


def build_stream(ratings, movies: int = 500, holdout: float = 0.2, source_users: int = 100, seed: int = 0) -> Stream:
    """Ratings table -> ``Stream`` (see the module docstring).

    Returns ``values (T, n)`` (stars, NaN = not rated or held out), ``heldout (T, n)`` (held-out
    stars, NaN elsewhere; disjoint from ``values``), ``labels (T,)`` and ``label_names (C,)``,
    ``column_ids (n,)`` (movieIds), ``sample_ids (T,)`` (userIds), ``source_values (S, n)`` and
    ``source_labels (S,)``; ``n = movies``, ``S = source_users``.
    """
    if movies < 2:
        raise InputError(f"--movies must be >= 2, got {movies}")
    if not 0.0 <= holdout < 1.0:
        raise InputError(f"--holdout must be in [0, 1), got {holdout}")
    ratings = validate_ratings(ratings)
    cols = top_movies(ratings, movies)
    col_of = {int(m): j for j, m in enumerate(cols)}
    sel = ratings[ratings["movieId"].isin(cols)]
    genre_of = dict(zip(ratings["movieId"], ratings["genres"], strict=True))
    by_user = {int(u): g for u, g in sel.groupby("userId")}
    users = [u for u in user_order(ratings) if int(u) in by_user]
    if source_users < 0 or source_users >= len(users):
        raise InputError(f"--source-users must be in [0, {len(users) - 1}] ({len(users)} users rate these movies)")
    rng = np.random.default_rng(seed)
    X = np.full((len(users), movies), np.nan)
    H = np.full((len(users), movies), np.nan)
    genre = []
    for i, u in enumerate(users):
        g = by_user[int(u)]
        j = np.array([col_of[int(m)] for m in g["movieId"]], np.int64)
        X[i, j] = g["rating"].to_numpy()
        genre.append(_user_genre([genre_of[int(m)] for m in g["movieId"]]))
        if i < source_users:
            continue
        h = min(int(np.floor(holdout * j.size + 0.5)), j.size - 1)
        hide = rng.choice(j, size=h, replace=False)
        H[i, hide] = X[i, hide]
        X[i, hide] = np.nan
    names = np.array(sorted(set(genre)))
    labels = np.searchsorted(names, np.array(genre))
    S = source_users
    return Stream(
        values=X[S:], heldout=H[S:], labels=labels[S:], label_names=names,
        column_ids=cols, sample_ids=np.asarray(users[S:], np.int64),
        source_values=X[:S] if S else None, source_labels=labels[:S] if S else None,
        meta={"dataset": "movielens-latest-small (dslabs)", "movies": movies, "holdout": holdout,
              "source_users": S, "seed": seed, "ratings": int(len(ratings))},
    )


# ---------------------------------------------------------------------------------------------
# held-out evaluation
# ---------------------------------------------------------------------------------------------
def heldout_errors(predicted: np.ndarray, heldout: np.ndarray) -> dict[str, float]:
    """RMSE and NRMSE of ``predicted (T, n)`` on the held-out entries of ``heldout (T, n)`` (NaN
    elsewhere): ``rmse = sqrt(mean (x̂ − x)²)``, ``nrmse = sqrt(Σ (x̂ − x)² / Σ x²)`` (the bench's
    NRMSE: predicting 0 scores 1), ``count`` held-out entries. NaN when there are none."""
    mask = ~np.isnan(heldout)
    count = int(mask.sum())
    if count == 0:
        return {"rmse": float("nan"), "nrmse": float("nan"), "count": 0}
    err = predicted[mask] - heldout[mask]
    if not np.isfinite(err).all():
        raise DataError(f"{int((~np.isfinite(err)).sum())} held-out predictions are not finite")
    sq = float((err**2).sum())
    return {"rmse": float(np.sqrt(sq / count)), "nrmse": float(np.sqrt(sq / float((heldout[mask] ** 2).sum()))),
            "count": count}


#: a method maps a stream to its predictions ``(T, n)`` of every entry of each user, made when the
#: user arrived (from the source, the earlier users and the user's own observed ratings only)
Method = Callable[[Stream], np.ndarray]
RATING_RANGE = (0.5, 5.0)  # every prediction is clipped to the star scale


def bias_baseline(stream: Stream, damping: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Online user-mean + item-mean predictor ``μ + b_i + b_u`` (Koren 2008's baseline predictor,
    by damped means): ``μ`` the mean of every rating seen so far, ``b_i = Σ_u (x_ui − μ) / (d + c_i)``
    over the ``c_i`` earlier ratings of movie i, ``b_u = Σ_{i∈Ω_u} (x_ui − μ − b_i) / (d + |Ω_u|)``
    over the arriving user's observed ratings, ``d = damping``. Item statistics start from the
    source and take in each stream user's observed ratings after the user's prediction.
    Returns ``(source_baseline (S, n), baseline (T, n))`` (the source rows with the source's item
    statistics)."""
    S = stream.source_values if stream.source_values is not None else np.empty((0, stream.n))
    item_sum, item_cnt = np.nansum(S, 0), (~np.isnan(S)).sum(0).astype(float)

    def predict(row: np.ndarray) -> np.ndarray:
        total = item_cnt.sum()
        mu = item_sum.sum() / total if total else float(np.nanmean(row))
        b_item = (item_sum - mu * item_cnt) / (damping + item_cnt)
        obs = ~np.isnan(row)
        b_user = (row[obs] - mu - b_item[obs]).sum() / (damping + obs.sum())
        return mu + b_item + b_user

    source_base = np.array([predict(row) for row in S]).reshape(S.shape)
    base = np.empty_like(stream.values)
    for t, row in enumerate(stream.values):
        base[t] = predict(row)
        obs = ~np.isnan(row)
        item_sum[obs] += row[obs]
        item_cnt[obs] += 1
    return source_base, base


def user_item_means(damping: float = 5.0) -> Method:
    """The online user-mean + item-mean baseline (``bias_baseline``) as a method."""
    return lambda stream: bias_baseline(stream, damping)[1]


def on_residuals(make_model: Callable[[int], Any], damping: float = 5.0) -> Method:
    """An online subspace method run on the residuals of ``bias_baseline``: the model (from
    ``make_model(n)``) sees the source residuals first (``fit`` when it has one, else one ``step``
    per source user with the completions discarded), then each stream user's observed residuals;
    its completion plus the baseline is the prediction. A subspace through the origin cannot hold
    per-user and per-movie offsets with few ratings per user, which the baseline supplies."""

    def run(stream: Stream) -> np.ndarray:
        source_base, base = bias_baseline(stream, damping)
        model = make_model(stream.n)
        resid = stream.values - base
        if stream.source_values is not None:
            src = stream.source_values - source_base
            if hasattr(model, "fit"):
                model.fit(src)
            else:
                for row in src:
                    idx = np.flatnonzero(~np.isnan(row))
                    model.step(idx, row[idx])
        if hasattr(model, "process"):
            completed, _ = model.process(resid)
        else:
            completed = np.empty_like(resid)
            for t, row in enumerate(resid):
                idx = np.flatnonzero(~np.isnan(row))
                completed[t], _ = model.step(idx, row[idx])
        return completed + base

    return run


def soft_impute_offline(lam_rel: float = 1.0, damping: float = 5.0, iters: int = 100) -> Method:
    """Offline reference (sees the future): Soft-Impute (Mazumder, Hastie & Tibshirani 2010;
    ``streaming.linalg.soft_impute``) of the whole observed matrix (source and stream users, held-out
    entries hidden) after removing offline damped user + item means; nuclear-norm threshold
    ``lam = lam_rel · σ_x √max(N, n)`` with ``σ_x`` the residuals' standard deviation (the size of
    a noise matrix's top singular value). Not a competitor of the online methods."""
    from streaming.linalg import soft_impute

    def run(stream: Stream) -> np.ndarray:
        S = stream.source_values if stream.source_values is not None else np.empty((0, stream.n))
        Y = np.vstack([S, stream.values])
        M = ~np.isnan(Y)
        mu = float(Y[M].mean())
        b_item = np.where(M, Y - mu, 0.0).sum(0) / (damping + M.sum(0))
        b_user = np.where(M, Y - mu - b_item, 0.0).sum(1) / (damping + M.sum(1))
        base = mu + b_item[None, :] + b_user[:, None]
        R0 = np.where(M, Y - base, 0.0)
        lam = lam_rel * float(R0[M].std()) * np.sqrt(max(Y.shape))
        _, _, Z = soft_impute(R0, M, lam, iters=iters)
        return (base + Z)[S.shape[0]:]

    return run


def default_methods(seed: int = 0, device: torch.device | None = None) -> dict[str, dict[str, Method]]:
    """The compared methods, each as a small grid ``{setting: method}`` whose setting is chosen on
    the tuning prefix: user + item means (damping), GROUSE and PETRELS (one rank-r subspace, from
    a random start warmed on the source), MoSAIC (K experts of rank r, pretrained on the source,
    step size η0), the pretrained k-GROUSE (MoSAIC's pretraining, then plain routed GROUSE steps of
    a constant size from ``KGROUSE_ETA_GRID``), all four on the baseline's residuals; the offline
    Soft-Impute reference. MoSAIC's and k-GROUSE's routing runs on ``device`` (None: the CPU)."""
    from streaming.baselines import KGROUSE_ETA_GRID, Grouse, KGrousePretrained, Petrels
    from streaming.model import MoSAIC

    def grouse(r, eta):
        return on_residuals(lambda n: Grouse(n, r, eta=eta, seed=seed))

    def petrels(r, lam):
        return on_residuals(lambda n: Petrels(n, r, lam=lam, seed=seed))

    def mosaic(K, r, eta0):
        return on_residuals(lambda n: MoSAIC(r, K, eta0=eta0, eta_min=min(0.05, eta0), seed=seed).to(device))

    def kgrouse_pretrained(K, r, eta):
        return on_residuals(lambda n: KGrousePretrained(n, r, K, eta=eta, seed=seed, device=device))

    return {
        "user_item_means": {f"damping={d}": user_item_means(d) for d in (1.0, 5.0, 25.0)},
        "grouse": {f"r={r},eta={e}": grouse(r, e) for r in (1, 2, 5) for e in (0.03, 0.1, 0.3)},
        "petrels": {f"r={r},lambda={lam}": petrels(r, lam) for r in (1, 2, 5) for lam in (0.98, 0.995, 1.0)},
        "mosaic": {f"K={K},r={r},eta0={e}": mosaic(K, r, e) for K in (2, 3, 5) for r in (1, 2, 5) for e in (0.3, 1.0)},
        "kgrouse_pretrained": {f"K={K},r={r},eta={e}": kgrouse_pretrained(K, r, e)
                               for K in (2, 3, 5) for r in (1, 2, 5) for e in KGROUSE_ETA_GRID},
        "soft_impute_offline": {f"lam_rel={v}": soft_impute_offline(v) for v in (0.25, 0.5, 1.0, 2.0)},
    }


OFFLINE = frozenset({"soft_impute_offline"})  # methods that see the whole matrix: references only


def evaluate_heldout(stream: Stream, methods: dict[str, Method | dict[str, Method]], tune_users: int = 150) -> dict:
    """Held-out RMSE/NRMSE of every method on ``stream`` (which must have ``heldout``).

    ``methods``: name -> a ``Method`` or a grid ``{setting: Method}``; every grid point runs on the
    whole stream (methods are causal, so its predictions on the first ``tune_users`` users are
    those of a run on them alone), the setting with the lowest RMSE there is chosen, and the
    reported ``test`` errors are on the users after them. Predictions are clipped to
    ``RATING_RANGE``. Returns ``{"methods": {name: {"setting", "tune", "test", "all", "time_s",
    "grid": {setting: {"tune_rmse", "test_rmse"}}}}, "tune_users", "test_users", "ranking"}``
    with ``ranking`` the names by test RMSE.
    """
    if stream.heldout is None:
        raise DataError("the stream has no held-out entries (write it with `mosaic data movielens`)")
    T = stream.values.shape[0]
    if not 0 < tune_users < T:
        raise InputError(f"--tune-users must be in [1, {T - 1}] for a stream of {T} users")
    H = stream.heldout
    out: dict = {}
    for name, grid in methods.items():
        grid = grid if isinstance(grid, dict) else {"default": grid}
        rows, preds = {}, {}
        start = time.perf_counter()
        for setting, method in grid.items():
            P = np.clip(method(stream), *RATING_RANGE)
            if P.shape != H.shape:
                raise DataError(f"{name} ({setting}) predicted shape {P.shape}, expected {H.shape}")
            preds[setting] = P
            rows[setting] = {"tune_rmse": heldout_errors(P[:tune_users], H[:tune_users])["rmse"],
                             "test_rmse": heldout_errors(P[tune_users:], H[tune_users:])["rmse"]}
        best = min(rows, key=lambda k: rows[k]["tune_rmse"])
        P = preds[best]
        out[name] = {
            "setting": best, "offline": name in OFFLINE,
            "tune": heldout_errors(P[:tune_users], H[:tune_users]),
            "test": heldout_errors(P[tune_users:], H[tune_users:]),
            "all": heldout_errors(P, H),
            "time_s": (time.perf_counter() - start) / len(grid), "grid": rows,
        }
    ranking = sorted(out, key=lambda k: out[k]["test"]["rmse"])
    return {"tune_users": tune_users, "test_users": T - tune_users, "methods": out, "ranking": ranking}


def format_table(result: dict) -> str:
    """Markdown table of ``evaluate_heldout``'s result (test part; ratio to user + item means)."""
    ref = result["methods"].get("user_item_means", {}).get("test", {}).get("rmse", float("nan"))
    lines = ["| method | setting (chosen on tuning users) | test RMSE | test NRMSE | vs user+item means |",
             "|---|---|---|---|---|"]
    for name in result["ranking"]:
        m = result["methods"][name]
        label = f"{name} (offline reference)" if m["offline"] else name
        lines.append(f"| {label} | {m['setting']} | {m['test']['rmse']:.4f} | {m['test']['nrmse']:.4f} | "
                     f"{m['test']['rmse'] / ref:.3f} |")
    return "\n".join(lines)
