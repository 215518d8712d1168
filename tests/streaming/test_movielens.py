"""MovieLens stream: the R lazy-load reader on a fake database written here, the stream builder on
a hand-made ratings table, the held-out metrics and baseline by hand, the format additions."""

from __future__ import annotations

import gzip
import lzma
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.errors import DataError, InputError
from streaming.cli import main as mosaic_main
from streaming.data import Stream, load_stream, save_stream
from streaming.movielens import (
    DSLABS_DATA,
    build_stream,
    heldout_errors,
    load_movielens,
    user_order,
)
from streaming.rlazyload import decompress_chunk, read_lazyload

rdata = pytest.importorskip("rdata")


def _serialize(obj) -> bytes:
    from rdata.conversion import convert_python_to_r_data
    from rdata.unparser import unparse_data

    return unparse_data(convert_python_to_r_data(obj, file_type="rds"))


def write_lazyload(folder: Path, objects: dict, kind: int = 1) -> None:
    """An R lazy-load database ``Rdata.rdx/.rdb`` as R's ``makeLazyLoadDB`` writes it: each object
    serialised, compressed after a 4-byte big-endian length (zlib; ``kind`` 3: type byte + xz)."""
    folder.mkdir(parents=True, exist_ok=True)
    rdb, variables = b"", {}
    for name, obj in objects.items():
        raw = _serialize(obj)
        body = zlib.compress(raw) if kind == 1 else b"Z" + lzma.compress(raw)
        chunk = struct.pack(">I", len(raw)) + body
        variables[name] = np.array([len(rdb), len(chunk)], np.int32)
        rdb += chunk
    (folder / "Rdata.rdb").write_bytes(rdb)
    index = {"variables": variables, "references": {}, "compressed": np.array([kind], np.int32) if kind != 1 else True}
    (folder / "Rdata.rdx").write_bytes(gzip.compress(_serialize(index)))


def ratings_frame(rows) -> pd.DataFrame:
    """rows: (userId, movieId, rating, timestamp, genres)."""
    u, m, r, t, g = zip(*rows, strict=True)
    return pd.DataFrame({
        "movieId": pd.array(m, dtype="Int32"), "title": pd.array([f"movie {x}" for x in m], dtype="string"),
        "year": pd.array([2000] * len(m), dtype="Int32"), "genres": pd.Categorical(g),
        "userId": pd.array(u, dtype="Int32"), "rating": np.asarray(r, float), "timestamp": pd.array(t, dtype="Int32"),
    })


# 4 users, 4 movies. Ratings per movie: 10 -> 4, 20 -> 3, 30 -> 3, 40 -> 1, so the top 3 are
# 10, 20, 30 (20 before 30 by id). First ratings: user 7 at t=5, user 3 at t=8 (on movie 40, not
# a top movie), user 5 at t=20, user 9 at t=30 -> stream order 7, 3, 5, 9.
ROWS = [
    (3, 40, 1.0, 8, "Horror"), (3, 10, 2.0, 50, "Drama"), (3, 20, 3.0, 51, "Comedy"),
    (5, 10, 4.0, 20, "Drama"), (5, 30, 4.5, 21, "Comedy|Drama"), (5, 20, 5.0, 22, "Comedy"),
    (7, 10, 3.5, 5, "Drama"), (7, 30, 0.5, 6, "Comedy|Drama"),
    (9, 10, 1.5, 30, "Drama"), (9, 20, 2.5, 31, "Comedy"), (9, 30, 3.0, 32, "Comedy|Drama"),
]


@pytest.fixture
def fake_db(tmp_path) -> Path:
    write_lazyload(tmp_path / "data", {"other": pd.DataFrame({"x": [1.0, 2.0]}), "movielens": ratings_frame(ROWS)})
    return tmp_path / "data"


def test_lazyload_reads_each_object(fake_db, tmp_path):
    other = read_lazyload(fake_db, "other")
    assert list(other["x"]) == [1.0, 2.0]
    ml = read_lazyload(fake_db, "movielens")
    assert len(ml) == len(ROWS) and list(ml["userId"]) == [r[0] for r in ROWS]
    write_lazyload(tmp_path / "xz", {"movielens": ratings_frame(ROWS)}, kind=3)
    assert list(read_lazyload(tmp_path / "xz", "movielens")["rating"]) == [r[2] for r in ROWS]


def test_load_movielens_validates(fake_db, tmp_path):
    df = load_movielens(fake_db, expected_rows=None)
    assert list(df.columns[:5]) == ["userId", "movieId", "rating", "timestamp", "genres"]
    assert df["userId"].dtype == np.int64 and df["genres"].iloc[4] == "Comedy|Drama"
    with pytest.raises(DataError, match="11 ratings, expected 100004"):
        load_movielens(fake_db)
    with pytest.raises(DataError, match="r-cran-dslabs"):
        load_movielens(tmp_path / "nowhere")
    write_lazyload(tmp_path / "stars", {"movielens": ratings_frame([(1, 1, 6.0, 1, "Drama")])})
    with pytest.raises(DataError, match="half steps"):
        load_movielens(tmp_path / "stars", expected_rows=None)
    write_lazyload(tmp_path / "dup", {"movielens": ratings_frame([(1, 1, 3.0, 1, "Drama"), (1, 1, 4.0, 2, "Drama")])})
    with pytest.raises(DataError, match="duplicate"):
        load_movielens(tmp_path / "dup", expected_rows=None)
    write_lazyload(tmp_path / "cols", {"movielens": pd.DataFrame({"userId": [1.0]})})
    with pytest.raises(DataError, match="lacks columns"):
        load_movielens(tmp_path / "cols", expected_rows=None)


def test_lazyload_malformed(fake_db):
    with pytest.raises(DataError, match="no object 'nope'"):
        read_lazyload(fake_db, "nope")
    rdb = fake_db / "Rdata.rdb"
    rdb.write_bytes(rdb.read_bytes()[:-40])  # truncated: movielens lies past the end
    with pytest.raises(DataError, match="outside the file"):
        read_lazyload(fake_db, "movielens")
    (fake_db / "Rdata.rdx").write_bytes(b"garbage, not R")
    with pytest.raises(DataError, match="Rdata.rdx"):
        read_lazyload(fake_db, "movielens")


def test_decompress_chunk_checks_length():
    raw = b"X\n" + bytes(range(50))
    assert decompress_chunk(struct.pack(">I", len(raw)) + zlib.compress(raw), 1, "t") == raw
    assert decompress_chunk(struct.pack(">I", len(raw)) + b"0" + raw, 2, "t") == raw
    with pytest.raises(DataError, match="header says 99"):
        decompress_chunk(struct.pack(">I", 99) + zlib.compress(raw), 1, "t")
    with pytest.raises(DataError, match="cannot decompress"):
        decompress_chunk(struct.pack(">I", len(raw)) + b"not zlib data", 1, "t")


def test_build_stream_by_hand():
    df = load_like(ROWS)
    assert list(user_order(df)) == [7, 3, 5, 9]
    s = build_stream(df, movies=3, holdout=0.5, source_users=1, seed=0)
    assert list(s.column_ids) == [10, 20, 30]
    assert list(s.sample_ids) == [3, 5, 9]  # user 7 is the source
    np.testing.assert_array_equal(s.source_values, [[3.5, np.nan, 0.5]])
    ratings = {3: [2.0, 3.0, np.nan], 5: [4.0, 5.0, 4.5], 9: [1.5, 2.5, 3.0]}
    for i, u in enumerate(s.sample_ids):
        full = np.array(ratings[int(u)])
        obs, held = ~np.isnan(s.values[i]), ~np.isnan(s.heldout[i])
        assert not (obs & held).any()  # no held-out rating is visible
        np.testing.assert_array_equal(obs | held, ~np.isnan(full))  # together: all the user's ratings
        np.testing.assert_array_equal(s.values[i, obs], full[obs])
        np.testing.assert_array_equal(s.heldout[i, held], full[held])
        m = int((~np.isnan(full)).sum())
        assert held.sum() == min(int(np.floor(0.5 * m + 0.5)), m - 1)  # 2 ratings -> 1, 3 -> 2
    # genre labels: user 3 rated 10 (Drama), 20 (Comedy), 40 (Horror, not a top movie) -> tie, Comedy first
    names = list(s.label_names)
    assert [names[k] for k in s.labels] == ["Comedy", "Comedy", "Comedy"]
    assert names[s.source_labels[0]] == "Drama"  # user 7: Drama, Comedy|Drama -> Drama 2, Comedy 1


def load_like(rows) -> pd.DataFrame:
    from streaming.movielens import validate_ratings

    return validate_ratings(ratings_frame(rows))


def test_build_stream_holdout_share_and_seed():
    rng = np.random.default_rng(0)
    rows = [(u, m, float(rng.integers(1, 11)) / 2, 100 * u + m, "Drama") for u in range(1, 41) for m in range(1, 31)
            if rng.random() < 0.5]
    df = load_like(rows)
    a = build_stream(df, movies=20, holdout=0.2, source_users=5, seed=1)
    b = build_stream(df, movies=20, holdout=0.2, source_users=5, seed=1)
    c = build_stream(df, movies=20, holdout=0.2, source_users=5, seed=2)
    np.testing.assert_array_equal(a.heldout, b.heldout)
    assert not np.array_equal(np.isnan(a.heldout), np.isnan(c.heldout))
    m = (~np.isnan(a.values)).sum(1) + (~np.isnan(a.heldout)).sum(1)
    np.testing.assert_array_equal((~np.isnan(a.heldout)).sum(1), np.minimum(np.floor(0.2 * m + 0.5), m - 1))
    assert list(a.sample_ids) == list(range(6, 41))  # first ratings at 100 u + m: id order
    with pytest.raises(InputError, match="exceeds the 30 movies"):
        build_stream(df, movies=31)
    with pytest.raises(InputError, match="source-users"):
        build_stream(df, movies=20, source_users=40)


def test_heldout_errors_by_hand():
    H = np.array([[np.nan, 4.0], [2.0, np.nan]])
    P = np.array([[9.0, 3.0], [4.0, 9.0]])  # errors -1 and 2 on the held-out entries
    e = heldout_errors(P, H)
    assert e["count"] == 2
    assert e["rmse"] == pytest.approx(np.sqrt(5 / 2))
    assert e["nrmse"] == pytest.approx(np.sqrt(5 / 20))
    assert np.isnan(heldout_errors(P, np.full((2, 2), np.nan))["rmse"])


def test_format_round_trip_and_checks(tmp_path):
    s = build_stream(load_like(ROWS), movies=3, holdout=0.5, source_users=1)
    save_stream(tmp_path / "s.npz", s)
    back = load_stream(tmp_path / "s.npz")
    for key in ("values", "heldout", "labels", "label_names", "column_ids", "sample_ids", "source_values"):
        np.testing.assert_array_equal(getattr(back, key), getattr(s, key))
    bad = Stream(values=s.values, heldout=np.where(np.isnan(s.heldout), s.values, s.heldout))
    save_stream(tmp_path / "bad.npz", bad)
    with pytest.raises(DataError, match="overlaps"):
        load_stream(tmp_path / "bad.npz")
    bad = Stream(values=s.values, labels=s.labels + 5, label_names=s.label_names)
    save_stream(tmp_path / "bad2.npz", bad)
    with pytest.raises(DataError, match="index label_names"):
        load_stream(tmp_path / "bad2.npz")


def test_cli_data(tmp_path):
    rng = np.random.default_rng(3)
    rows = [(u, m, float(rng.integers(1, 11)) / 2, 100 * u + m, ["Drama", "Comedy"][m % 2])
            for u in range(1, 31) for m in range(1, 13) if rng.random() < 0.6]
    write_lazyload(tmp_path / "data", {"movielens": ratings_frame(rows)})
    out = tmp_path / "ml.npz"
    assert mosaic_main(["data", "movielens", "--data-dir", str(tmp_path / "data"), "--movies", "10",
                        "--source-users", "8", "--out", str(out)]) == 0
    s = load_stream(out)
    assert s.values.shape == (22, 10) and s.heldout is not None
    assert mosaic_main(["data", "movielens", "--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 2  # exists


@pytest.mark.skipif(not (DSLABS_DATA / "Rdata.rdx").is_file(), reason="r-cran-dslabs is not installed")
def test_real_movielens():
    df = load_movielens()
    assert len(df) == 100_004 and df["userId"].nunique() == 671 and df["movieId"].nunique() == 9066
    years = pd.to_datetime(df["timestamp"], unit="s").dt.year
    assert years.min() == 1995 and years.max() == 2016
    s = build_stream(df)
    total = (~np.isnan(s.values)).sum() + (~np.isnan(s.heldout)).sum() + (~np.isnan(s.source_values)).sum()
    raters = df.loc[df["movieId"].isin(s.column_ids), "userId"].nunique()
    assert s.values.shape == (raters - 100, 500)
    counts = df["movieId"].value_counts()
    assert counts[s.column_ids].min() >= counts.drop(s.column_ids).max()  # the most-rated movies
    assert 0.12 < total / (671 * 500) < 0.15  # "about 13 %"
