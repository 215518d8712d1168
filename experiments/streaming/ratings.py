"""Rating streams: ``(user, item, rating, timestamp)`` events in time order, the way online
recommenders are evaluated (predict each rating from what came before, then learn it).

A ``RatingStream`` holds ``T`` events as dense indices ``user (T,)``, ``item (T,)`` (0-based, in
order of first appearance), ``rating (T,)`` float64 and ``timestamp (T,)`` int64, sorted by time
(ties keep the input order: a stable sort), with the external ids ``user_ids (U,)`` /
``item_ids (I,)`` of each index. Sources: any CSV with the columns ``user, item, rating, timestamp``
(``read_ratings_csv``; ids are integers or strings) and dslabs' MovieLens ratings
(``from_movielens``). File format (``.npz``, ``kind = "ratings"``): the six arrays above plus
``format_version`` and ``kind``.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import DataError
from common.io import atomic_write, read_npz

FORMAT_VERSION = 1
KIND = "ratings"
CSV_COLUMNS = ("user", "item", "rating", "timestamp")


@dataclass
class RatingStream:
    """Time-ordered rating events (see the module docstring for the fields)."""

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    timestamp: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.rating.shape[0])

    @property
    def n_users(self) -> int:
        return int(self.user_ids.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.item_ids.shape[0])


def from_events(user_ids, item_ids, rating, timestamp, where: str = "ratings") -> RatingStream:
    """Validate raw events (external ids, ratings, Unix timestamps; one entry each per event) and
    sort them by time into a ``RatingStream``. DataError on an empty stream, unequal lengths, a
    non-finite rating or a negative timestamp."""
    user_ids, item_ids = np.asarray(user_ids), np.asarray(item_ids)
    rating = np.asarray(rating, dtype=np.float64)
    timestamp = np.asarray(timestamp)
    T = rating.shape[0] if rating.ndim == 1 else -1
    if T < 1 or any(a.shape != (T,) for a in (user_ids, item_ids, timestamp)):
        raise DataError(f"{where}: expected one user, item, rating and timestamp per event, got shapes "
                        f"{user_ids.shape}, {item_ids.shape}, {rating.shape}, {timestamp.shape}")
    if not np.isfinite(rating).all():
        raise DataError(f"{where}: ratings must be finite numbers")
    if timestamp.dtype.kind not in "iu" or (timestamp < 0).any():
        raise DataError(f"{where}: timestamps must be non-negative integers (Unix seconds)")
    order = np.argsort(timestamp, kind="stable")
    users, user = np.unique(user_ids[order], return_inverse=True)
    items, item = np.unique(item_ids[order], return_inverse=True)
    # dense indices in order of first appearance in time
    user_first = np.full(users.size, T)
    np.minimum.at(user_first, user, np.arange(T))
    item_first = np.full(items.size, T)
    np.minimum.at(item_first, item, np.arange(T))
    user_rank = np.empty(users.size, np.int64)
    user_rank[np.argsort(user_first, kind="stable")] = np.arange(users.size)
    item_rank = np.empty(items.size, np.int64)
    item_rank[np.argsort(item_first, kind="stable")] = np.arange(items.size)
    return RatingStream(
        user=user_rank[user], item=item_rank[item], rating=rating[order], timestamp=timestamp[order].astype(np.int64),
        user_ids=users[np.argsort(user_rank)], item_ids=items[np.argsort(item_rank)])


def _ids(values: list[str]) -> np.ndarray:
    """Integer ids when every value is an integer, else the strings."""
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        return np.array(values, dtype=str)


def read_ratings_csv(path: str | os.PathLike) -> RatingStream:
    """A UTF-8 CSV file with a header holding the columns ``user, item, rating, timestamp`` (others are
    ignored), one rating event per row: non-empty ids, a finite rating, a non-negative integer
    timestamp; the same (user, item, timestamp) twice is refused. DataError naming the file and line
    on anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"ratings file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: not UTF-8 text (byte {raw[exc.start]:#04x}); save the CSV as UTF-8"
                        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    users, items, ratings, times = [], [], [], []
    seen: dict[tuple[str, str, int], int] = {}
    try:
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(f"{path} lacks the columns {missing} (header: {reader.fieldnames}); expected "
                            f"{','.join(CSV_COLUMNS)}")
        for row in reader:
            row_no = reader.line_num
            fields = [row.get(c) for c in CSV_COLUMNS]
            if any(v is None or not v.strip() for v in fields):
                raise DataError(f"{path}, line {row_no}: expected a non-empty {', '.join(CSV_COLUMNS)}, got "
                                f"{dict(zip(CSV_COLUMNS, fields, strict=True))}")
            user, item, rating_text, time_text = fields
            try:
                rating, timestamp = float(rating_text), int(time_text)
            except ValueError:
                raise DataError(f"{path}, line {row_no}: rating must be a number and timestamp an integer, "
                                f"got {rating_text!r}, {time_text!r}") from None
            if not math.isfinite(rating):
                raise DataError(f"{path}, line {row_no}: rating must be a finite number, got {rating_text!r}")
            if timestamp < 0 or timestamp >= 2**63:
                raise DataError(f"{path}, line {row_no}: timestamps must be non-negative integers (Unix seconds), got {time_text!r}")
            key = (user, item, timestamp)
            if key in seen:
                raise DataError(f"{path}, line {row_no}: repeats line {seen[key]} (user {user!r}, item {item!r}, "
                                f"timestamp {timestamp}); remove the duplicate row")
            seen[key] = row_no
            users.append(user), items.append(item), ratings.append(rating), times.append(timestamp)
    except csv.Error as exc:
        raise DataError(f"{path}, line {reader.line_num}: not a readable CSV row ({exc})") from None
    if not ratings:
        raise DataError(f"{path} holds no ratings")
    return from_events(_ids(users), _ids(items), ratings, np.array(times, dtype=np.int64), str(path))


def from_movielens(df) -> RatingStream:
    """The ratings of ``streaming.movielens.load_movielens`` (userId, movieId, rating, timestamp) as a
    rating stream."""
    return from_events(df["userId"].to_numpy(np.int64), df["movieId"].to_numpy(np.int64),
                       df["rating"].to_numpy(np.float64), df["timestamp"].to_numpy(np.int64), "movielens")


def save_ratings(path: str | os.PathLike, stream: RatingStream) -> Path:
    """Write ``stream`` as a ``.npz`` rating-stream file (atomically)."""
    with atomic_write(path, "wb") as f:
        np.savez_compressed(f, format_version=np.array(FORMAT_VERSION), kind=np.array(KIND), user=stream.user,
                            item=stream.item, rating=stream.rating, timestamp=stream.timestamp,
                            user_ids=stream.user_ids, item_ids=stream.item_ids)
    return Path(path)


def is_ratings_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a rating-stream file (``kind = "ratings"``), not a sample stream."""
    z = read_npz(path, "stream file")
    return "kind" in z and str(z["kind"]) == KIND


def load_ratings(path: str | os.PathLike) -> RatingStream:
    """Read a rating-stream file; DataError when it is not one or is inconsistent."""
    z = read_npz(path, "ratings file")
    if "kind" not in z or str(z["kind"]) != KIND:
        raise DataError(f"{path} is not a rating stream (write one with `mosaic data movielens --protocol ratings`)")
    missing = [k for k in ("user", "item", "rating", "timestamp", "user_ids", "item_ids") if k not in z]
    if missing:
        raise DataError(f"{path} lacks {missing}")
    kinds = {"user": "iu", "item": "iu", "timestamp": "iu", "rating": "fiu"}
    for key, ok in kinds.items():
        if z[key].dtype.kind not in ok or z[key].ndim != 1:
            raise DataError(f"{path}: {key} must be a 1-d array of {'numbers' if key == 'rating' else 'integers'}, "
                            f"got {z[key].dtype} of shape {z[key].shape}")
    for key in ("user_ids", "item_ids"):
        if z[key].ndim != 1 or z[key].dtype.kind not in "iuU":
            raise DataError(f"{path}: {key} must be a 1-d array of integer or string ids, got {z[key].dtype} "
                            f"of shape {z[key].shape}")
    s = RatingStream(user=z["user"].astype(np.int64), item=z["item"].astype(np.int64),
                     rating=z["rating"].astype(np.float64), timestamp=z["timestamp"].astype(np.int64),
                     user_ids=z["user_ids"], item_ids=z["item_ids"])
    T = len(s)
    if any(a.shape != (T,) for a in (s.user, s.item, s.timestamp)) or T == 0:
        raise DataError(f"{path}: user, item, rating and timestamp must be equally long and non-empty")
    if s.user.min() < 0 or s.user.max() >= s.n_users or s.item.min() < 0 or s.item.max() >= s.n_items:
        raise DataError(f"{path}: user or item indices outside their id tables")
    if (np.diff(s.timestamp) < 0).any():
        raise DataError(f"{path}: events are not in time order")
    if not np.isfinite(s.rating).all():
        raise DataError(f"{path}: ratings must be finite")
    return s
