"""MovieLens "latest-small" as a real stream of partially observed users, and its held-out errors.

Data: the ``movielens`` data frame of the R package dslabs (Debian ``r-cran-dslabs``, Artistic-2.0;
GroupLens' "ml-latest-small" of October 2016, research use: 100,004 ratings, 671 users x 9,066
movies), read in place from the package's R lazy-load database (``streaming.rlazyload``).

Stream (``build_stream``; streaming/README.md, "MovieLens stream"): the ``movies`` most-rated movies
are the coordinates; users arrive in the order of their first rating (ties by userId), each a vector
of stars with NaN where unrated (users who rated none of them are dropped). Of each stream user's
``m`` ratings, ``h = min(⌊holdout · m + ½⌋, m − 1)`` (seeded) go to ``heldout``, so no user arrives
empty. The first ``source_users`` users, all their ratings, are the pretraining source (earliest:
nothing is pretrained on the future). ``labels``: each user's most frequent genre (ties alphabetical).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

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


# ---- the stream
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
    counts = Counter(name for g in genres_of_rated for name in g.split("|"))
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
    )


# ---- held-out evaluation
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

