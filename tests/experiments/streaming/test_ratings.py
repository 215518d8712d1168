"""Rating streams, the online recommenders and progressive validation, on streams built by hand."""

import json
import signal

import numpy as np
import pytest

from common.errors import DataError
from experiments.streaming.progressive import (
    errors,
    evaluate_progressive,
    main,
    predict_then_learn,
    prior_counts,
    progressive_metrics,
)
from experiments.streaming.ratings import from_events, load_ratings, read_ratings_csv, save_ratings
from experiments.streaming.recommend import MoSAICRecommender, OnlineBiases, SGDBiases
from tests.bad_input import assert_refused, assert_stops_on_signal


def _csv(path, rows):
    path.write_text("user,item,rating,timestamp\n" + "".join(f"{u},{i},{r},{t}\n" for u, i, r, t in rows))
    return path


def test_csv_becomes_a_time_ordered_stream_with_dense_indices(tmp_path):
    rows = [("b", 10, 4.0, 30), ("a", 20, 3.0, 10), ("a", 10, 5.0, 20), ("c", 30, 1.0, 20)]
    s = read_ratings_csv(_csv(tmp_path / "r.csv", rows))
    # by time, ties in file order: a@10, a@20, c@20, b@30
    assert s.timestamp.tolist() == [10, 20, 20, 30]
    assert s.rating.tolist() == [3.0, 5.0, 1.0, 4.0]
    assert s.user.tolist() == [0, 0, 1, 2] and s.user_ids.tolist() == ["a", "c", "b"]  # order of first appearance
    assert s.item.tolist() == [0, 1, 2, 1] and s.item_ids.tolist() == [20, 10, 30]
    save_ratings(tmp_path / "r.npz", s)
    back = load_ratings(tmp_path / "r.npz")
    for f in ("user", "item", "rating", "timestamp", "user_ids", "item_ids"):
        np.testing.assert_array_equal(getattr(back, f), getattr(s, f))


@pytest.mark.parametrize("text, match", [
    ("user,item,rating\n1,2,3\n", "lacks the columns"),
    ("user,item,rating,timestamp\n1,2,x,5\n", "line 2"),
    ("user,item,rating,timestamp\n", "no ratings"),
    ("user,item,rating,timestamp\n1,2,nan,5\n", "finite"),
    ("user,item,rating,timestamp\n1,2,3,-5\n", "timestamps"),
])
def test_malformed_csv_is_a_data_error(tmp_path, text, match):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(DataError, match=match):
        read_ratings_csv(tmp_path / "bad.csv")


def test_online_biases_by_hand():
    b = OnlineBiases(damping=1.0)
    assert b.predict_one("u", "i") == 0.0
    b.learn_one("u", "i", 4.0)  # μ was 0: b_i sum 4, b_u sum 4 - 0 - 0
    assert b.mean == 4.0 and b.item_bias("i") == pytest.approx(4.0 / 2) and b.user_bias("u") == pytest.approx(4.0 / 2)
    b.learn_one("v", "i", 2.0)  # μ = 4, b_i = 2 before: item sum 4 + (2 - 4) = 2, v's sum 2 - 4 - 2 = -4
    assert b.mean == 3.0
    assert b.item_bias("i") == pytest.approx(2.0 / 3) and b.user_bias("v") == pytest.approx(-4.0 / 2)
    assert b.predict_one("v", "j") == pytest.approx(3.0 - 2.0)  # a new item: no item bias


def _planted(users=60, items=30, per_user=20, seed=0):
    """Users on two taste groups (rank 1 each) rating in random order over time."""
    rng = np.random.default_rng(seed)
    taste = np.stack([np.where(np.arange(items) < items // 2, 1.0, -1.0), np.linspace(-1, 1, items)])
    rows = []
    for u in range(users):
        for i in rng.choice(items, per_user, replace=False):
            rows.append((u, i, 3.0 + taste[u % 2, i] * rng.uniform(0.5, 1.5), int(rng.integers(0, 10**6))))
    u, i, r, t = map(np.array, zip(*rows, strict=True))
    return from_events(u, i, r, t.astype(np.int64))


def test_predictions_come_before_learning_and_cold_users_and_new_items_get_the_biases():
    s = _planted()
    cut = len(s) // 2
    rec = MoSAICRecommender(1, 2, items=20, pretrain_at=cut, pretrain_restarts=2, seed=0)
    ref = SGDBiases(0.05, 0.1)  # the recommender's own biases (its defaults)
    preds = predict_then_learn(s, rec, stop=cut)
    np.testing.assert_array_equal(preds, predict_then_learn(s, ref, stop=cut))  # before pretraining: biases
    assert rec.fitted and len(rec.column) == 20
    outside = next(i for i in range(s.n_items) if i not in rec.column)
    cold = 10**6  # a user never seen
    assert rec.predict_one(cold, 0) == ref.predict_one(cold, 0)  # cold user: the biases
    warm = max(rec.history, key=lambda u: rec.rated_columns(u))
    assert rec.predict_one(warm, outside) == ref.predict_one(warm, outside)  # an item outside the coordinates
    assert rec.predict_one(warm, next(iter(rec.column))) != ref.predict_one(warm, next(iter(rec.column)))
    before = rec.mosaic.n_samples_seen_
    rec.learn_one(warm, next(iter(rec.column)), 4.0)
    assert rec.mosaic.n_samples_seen_ == before + 1  # one expert update per learned rating of a coordinate


def test_mosaic_recommender_beats_the_biases_on_planted_taste_groups():
    s = _planted(users=80, per_user=25)
    cut = len(s) // 3
    clip = (float(s.rating.min()), float(s.rating.max()))
    rec = predict_then_learn(s, MoSAICRecommender(1, 2, items=30, pretrain_at=cut, pretrain_restarts=4, seed=0),
                             clip=clip)
    base = predict_then_learn(s, SGDBiases(0.05, 0.1), clip=clip)  # its own biases alone
    late = slice(2 * len(s) // 3, None)  # users are warm there
    assert errors(rec[late], s.rating[late])["rmse"] < 0.8 * errors(base[late], s.rating[late])["rmse"]


def test_prior_counts_and_metrics_by_hand():
    assert prior_counts(np.array([3, 1, 3, 3, 1])).tolist() == [0, 0, 1, 2, 1]
    s = from_events(np.array([1, 1, 2, 1]), np.array([7, 8, 7, 7]), np.array([1.0, 2.0, 3.0, 4.0]),
                    np.arange(4, dtype=np.int64))
    m = progressive_metrics(s, np.array([0.0, 0.0, 1.0, 2.0]), start=1, slices=2)
    # evaluated: errors 2, 2, 2 (events 1..3); all are a cold user's, the item 7 is new (< 5 earlier)
    assert m["rmse"] == m["mae"] == 2.0 and m["ratings"] == 3
    assert [sl["ratings"] for sl in m["slices"]] == [2, 1] and m["cold_users"]["ratings"] == 3
    assert m["warm_users"]["ratings"] == 0 and m["new_items"]["ratings"] == 3


class _Constant:
    """Predicts ``c``; records how many ratings it has learned before each prediction."""

    def __init__(self, c, log):
        self.c, self.log, self.n = c, log, 0

    def predict_one(self, user, item, x=None):
        self.log.append(self.n)
        return self.c

    def learn_one(self, user, item, y, x=None):
        self.n += 1


def test_settings_are_chosen_on_the_tuning_part_only():
    # ratings 1 in the first 20 % (one 5 first: the clip range is [1, 5]), 5 afterwards: the constant 1
    # wins the tuning and is kept, however it does later
    r = np.r_[5.0, np.ones(19), np.full(80, 5.0)]
    s = from_events(np.arange(100) % 7, np.arange(100) % 5, r, np.arange(100, dtype=np.int64))
    logs = {}

    def constant(c):
        return lambda pretrain_at: _Constant(c, logs.setdefault((c, pretrain_at), []))

    out = evaluate_progressive(s, {"const": {f"c={c}": constant(c) for c in (1.0, 5.0)}}, tune_frac=0.2)
    m = out["methods"]["const"]
    assert m["setting"] == "c=1.0" and m["tuning"] == {"c=1.0": 0.0, "c=5.0": 4.0}  # on events 10..19
    assert m["rmse"] == pytest.approx(4.0) and m["ratings"] == 80 and out["protocol"]["clip"] == [1.0, 5.0]
    assert logs[(1.0, 20)] == list(range(100))  # the final run predicted each rating before learning it
    assert logs[(1.0, 10)] == list(range(20))  # the tuning run saw the tuning part only


def test_river_reco_calling_convention_gives_the_progressive_predictions():
    """river's reco models are driven with ``x = {"user": u, "item": i}`` as ``predict_one(**x)`` then
    ``learn_one(**x, y=y)``; the adapter gives the same predictions as ``predict_then_learn``."""
    s = _planted(users=20, per_user=15)
    model = MoSAICRecommender(1, 2, items=30, pretrain_at=150, pretrain_restarts=2)
    preds = []
    for u, i, y in zip(s.user.tolist(), s.item.tolist(), s.rating.tolist(), strict=True):
        x = {"user": u, "item": i}
        preds.append(model.predict_one(**x))
        model.learn_one(**x, y=y)
    ref = predict_then_learn(s, MoSAICRecommender(1, 2, items=30, pretrain_at=150, pretrain_restarts=2))
    assert model.fitted
    np.testing.assert_array_equal(np.array(preds), ref)


def test_progressive_command_on_a_ratings_csv(tmp_path):
    s = _planted(users=30, per_user=12)
    rows = [(int(u), int(i), float(y), int(t)) for u, i, y, t in zip(s.user, s.item, s.rating, s.timestamp, strict=True)]
    csv, npz, out = _csv(tmp_path / "r.csv", rows), tmp_path / "r.npz", tmp_path / "p.json"
    assert main(["--input", str(csv), "--write-stream", str(npz), "--items", "10", "--out", str(out)]) == 0
    assert len(load_ratings(npz)) == len(s)
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"user_item_means", "kgrouse_pretrained", "mosaic", "river_baseline",
                                     "river_biased_mf", "river_funk_mf"}
    assert set(result["references"]) == {"surprise_svd_refit", "surprise_svdpp_refit"}
    assert result["protocol"]["tuning_events"] == int(0.2 * len(s))
    assert main(["--input", str(npz), "--out", str(out)]) == 2  # exists


# ----------------------------------------------------------------------------- bad input is one line

HEADER = "user,item,rating,timestamp\n"


@pytest.mark.parametrize("body, match", [
    (HEADER.encode() + b"1,10,4,100\n2,caf\xe9,3,200\n", "line 3: not UTF-8"),
    (HEADER.encode() + b"1,10,nan,100\n", "line 2: rating must be a finite number"),
    (HEADER.encode() + b"1,10,inf,100\n", "finite"),
    (HEADER.encode() + b"1,10,4,100\n2,11,3,200\n1,10,4,100\n", "line 4: repeats line 2"),
    (HEADER.encode() + b"1,10,4\n", "line 2: expected a non-empty user, item, rating, timestamp"),
    (HEADER.encode() + b"1,,4,100\n", "line 2: expected a non-empty"),
    (HEADER.encode() + b"1,10,4,1.5e9\n", "timestamp an integer"),
    (b"user;item;rating;timestamp\n1;10;4;100\n", "lacks the columns"),
    (HEADER.encode() + b"1,10,4,1\x00\n", "bad.csv"),
])
def test_ratings_csv_errors_name_the_file_and_line(tmp_path, body, match):
    (tmp_path / "bad.csv").write_bytes(body)
    line = assert_refused(main, ["--input", str(tmp_path / "bad.csv")], tmp_path, match=match, timeout_s=30)
    assert "bad.csv" in line


@pytest.mark.parametrize("key, value, match", [
    ("user", ["a", "b"], "user must be a 1-d array of integers"),
    ("rating", ["x", "y"], "rating must be a 1-d array of numbers"),
    ("item_ids", [[1, 2]], "item_ids must be a 1-d array"),
])
def test_ratings_file_errors_name_the_entry(tmp_path, key, value, match):
    import numpy as np

    arrays = {"format_version": np.array(1), "kind": np.array("ratings"), "user": np.array([0, 1]),
              "item": np.array([0, 0]), "rating": np.array([4.0, 3.0]), "timestamp": np.array([1, 2]),
              "user_ids": np.array([7, 8]), "item_ids": np.array([9])}
    arrays[key] = np.array(value)
    np.savez(tmp_path / "r.npz", **arrays)
    assert_refused(main, ["--input", str(tmp_path / "r.npz")], tmp_path, match=match, timeout_s=60)


def test_progressive_eval_stops_on_sigint(tmp_path):
    pytest.importorskip("river")
    pytest.importorskip("surprise")
    rng = np.random.default_rng(0)
    rows = [f"{rng.integers(300)},{rng.integers(200)},{rng.integers(1, 6)},{t}" for t in range(40_000)]
    (tmp_path / "r.csv").write_text("user,item,rating,timestamp\n" + "\n".join(rows) + "\n")
    assert_stops_on_signal(["-m", "experiments.streaming.progressive", "--input", "r.csv", "--items", "50",
                            "--out", "res.json"], tmp_path, signal.SIGINT, ready="progressive:")
    assert not (tmp_path / "res.json").exists()
