"""``experiments.streaming.movielens_users``: the online methods on MovieLens users' held-out ratings."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from common.errors import InputError
from experiments.streaming.movielens_users import bias_baseline, evaluate_heldout, main
from streaming.data import Stream, save_stream
from streaming.movielens import build_stream, validate_ratings


def test_bias_baseline_by_hand():
    # source: one user with ratings 4 and 2 on movies 0, 1; stream user 1 rates movie 0 with 5
    s = Stream(values=np.array([[5.0, np.nan], [np.nan, 1.0]]), source_values=np.array([[4.0, 2.0]]))
    _, base = bias_baseline(s, damping=0.0)
    # user 1: mu = 3, b = (1, -1); b_u = 5 - 3 - 1 = 1 -> (5, 3)
    np.testing.assert_allclose(base[0], [5.0, 3.0])
    # user 2 after user 1: sums (9, 2), counts (2, 1), mu = 11/3; b = (9/2 - 11/3, 2 - 11/3)
    mu = 11 / 3
    b = np.array([4.5 - mu, 2 - mu])
    np.testing.assert_allclose(base[1], mu + b + (1.0 - mu - b[1]))


def test_evaluate_heldout_chooses_on_the_tuning_users():
    H = np.array([[3.0, np.nan], [np.nan, 4.0], [2.0, np.nan]])
    s = Stream(values=np.array([[np.nan, 1.0], [1.0, np.nan], [np.nan, 1.0]]), heldout=H)
    good_early = np.array([[3.0, 0.0], [0.0, 1.0], [5.0, 0.0]])  # tune (user 0) exact, test errors 3, 3
    good_late = np.array([[4.0, 0.0], [0.0, 4.0], [2.0, 0.0]])  # tune error 1, test exact
    result = evaluate_heldout(s, {"m": {"early": lambda st: good_early, "late": lambda st: good_late},
                                  "c": lambda st: np.full((3, 2), 6.0)}, tune_users=1)
    m = result["methods"]["m"]
    assert m["setting"] == "early" and m["tune"]["rmse"] == 0.0
    assert m["test"]["rmse"] == pytest.approx(3.0)
    assert m["grid"]["late"]["test_rmse"] == 0.0
    # "c" predicts 6, clipped to 5 stars: test errors 1 and 3
    assert result["methods"]["c"]["test"]["rmse"] == pytest.approx(np.sqrt(5.0))
    assert result["ranking"] == ["c", "m"]
    with pytest.raises(InputError):
        evaluate_heldout(s, {}, tune_users=3)


def test_compare_runs_every_method(tmp_path):
    rng = np.random.default_rng(3)
    rows = [(u, m, float(rng.integers(1, 11)) / 2, 100 * u + m, ["Drama", "Comedy"][m % 2])
            for u in range(1, 31) for m in range(1, 13) if rng.random() < 0.6]
    u, m, r, t, g = zip(*rows, strict=True)
    df = validate_ratings(pd.DataFrame({
        "movieId": pd.array(m, dtype="Int32"), "title": pd.array([f"movie {x}" for x in m], dtype="string"),
        "year": pd.array([2000] * len(m), dtype="Int32"), "genres": pd.Categorical(g),
        "userId": pd.array(u, dtype="Int32"), "rating": np.asarray(r, float), "timestamp": pd.array(t, dtype="Int32"),
    }))
    save_stream(tmp_path / "ml.npz", build_stream(df, movies=10, source_users=8))
    res = tmp_path / "res.json"
    assert main(["--input", str(tmp_path / "ml.npz"), "--tune-users", "6", "--out", str(res)]) == 0
    result = json.loads(res.read_text())
    assert {"user_item_means", "grouse", "petrels", "mosaic", "kgrouse_pretrained",
            "soft_impute_offline"} <= set(result["methods"])
    assert all(np.isfinite(m["test"]["rmse"]) for m in result["methods"].values())
