"""The online recommenders against river's own evaluation, river's and Surprise's baselines, and the
cold-start, new-item and drift cases."""

import numpy as np
import pytest

from experiments.streaming.progressive import errors, predict_then_learn
from experiments.streaming.ratings import from_events
from experiments.streaming.recommend import MoSAICRecommender, SGDBiases

river = pytest.importorskip("river")


def _planted(users=60, items=30, per_user=20, seed=0, switch=None):
    """Users on two taste groups (rank 1 each) rating in random order over time; a user listed in
    ``switch`` moves to the other group halfway through the stream."""
    rng = np.random.default_rng(seed)
    taste = np.stack([np.where(np.arange(items) < items // 2, 1.0, -1.0), np.linspace(-1, 1, items)])
    rows = []
    for u in range(users):
        for i in rng.choice(items, per_user, replace=False):
            rows.append((u, int(i), int(rng.integers(0, 10**6))))
    rows.sort(key=lambda row: row[2])
    out = []
    for k, (u, i, t) in enumerate(rows):
        g = (u + (k >= len(rows) // 2 and u in (switch or ()))) % 2
        out.append((u, i, 3.0 + taste[g, i] * rng.uniform(0.5, 1.5), t))
    u, i, r, t = map(np.array, zip(*out, strict=True))
    return from_events(u, i, r, t.astype(np.int64)), taste


def test_river_progressive_val_score_matches_an_independent_loop():
    from river import evaluate, metrics

    from experiments.streaming.river_reco import RiverMoSAIC

    s, _ = _planted(users=20, per_user=15)
    dataset = [({"user": u, "item": i}, y) for u, i, y in zip(s.user.tolist(), s.item.tolist(), s.rating.tolist(),
                                                             strict=True)]
    model = RiverMoSAIC(1, 2, items=30, pretrain_at=150, pretrain_restarts=2)
    metric = evaluate.progressive_val_score(dataset, model, metrics.RMSE())
    assert model.recommender.fitted  # the experts were pretrained mid-stream and then used
    pred = predict_then_learn(s, MoSAICRecommender(1, 2, items=30, pretrain_at=150, pretrain_restarts=2))
    assert metric.get() == pytest.approx(np.sqrt(np.mean((pred - s.rating) ** 2)), rel=1e-12)
    assert model.clone()._get_params() == model._get_params()  # river can rebuild it from its parameters


def test_river_baselines_learn_the_planted_stream():
    from experiments.streaming.river_reco import river_methods

    s, _ = _planted(users=60, per_user=25)
    grids = river_methods(seed=0)
    assert set(grids) == {"river_baseline", "river_biased_mf", "river_funk_mf"}
    late = slice(len(s) // 2, None)
    const = errors(np.full(len(s) - len(s) // 2, s.rating.mean()), s.rating[late])["rmse"]
    pred = predict_then_learn(s, grids["river_biased_mf"]["lr=0.025,l2=0.0"](0), clip=(1.0, 5.0))
    assert errors(pred[late], s.rating[late])["rmse"] < 0.98 * const  # learned something online
    a = predict_then_learn(s, grids["river_funk_mf"]["lr=0.05,l2=0.0"](0))
    np.testing.assert_array_equal(a, predict_then_learn(s, grids["river_funk_mf"]["lr=0.05,l2=0.0"](0)))  # seeded


class _Recorder:
    """A Surprise-like algorithm: predicts the trainset's global mean, records each trainset's size."""

    fits: list = []

    def fit(self, trainset):
        self.fits.append(trainset.n_ratings)
        self.mean = trainset.global_mean
        return self

    def predict(self, u, i, clip=False):
        from surprise.prediction_algorithms.predictions import Prediction

        return Prediction(u, i, None, self.mean, {})


def test_refit_references_fit_on_everything_before_each_slice_only():
    pytest.importorskip("surprise")
    from experiments.streaming.refit import evaluate_refit

    s, _ = _planted(users=20, per_user=10)  # 200 events: tuning 40, slices of 40 from event 40
    _Recorder.fits = []
    out = evaluate_refit(s, {"all": ({"m": _Recorder}, None), "last": ({"m": _Recorder}, 1)}, slices=4)
    # tuning fit on the first 20 events; then a refit before each slice (and the last slice only)
    assert _Recorder.fits == [20, 40, 80, 120, 160, 20, 160]
    y = s.rating
    last = np.clip(np.full(40, y[:160].mean()), y[:40].min(), y[:40].max())
    assert out["last"]["rmse"] == pytest.approx(errors(last, y[160:])["rmse"])
    assert [sl["slice"] for sl in out["last"]["slices"]] == [3] and out["all"]["ratings"] == 160


def test_surprise_svd_reference_beats_the_mean_on_the_planted_stream():
    pytest.importorskip("surprise")
    from experiments.streaming.refit import evaluate_refit, surprise_methods

    s, _ = _planted(users=60, per_user=25)
    grid, _ = surprise_methods(seed=0)["surprise_svd_refit"]
    out = evaluate_refit(s, {"svd": ({"f20": grid["n_factors=20,reg=0.02"]}, 2)}, slices=4)["svd"]
    const = errors(np.full(len(s), s.rating.mean()), s.rating)["rmse"]
    assert out["refits"] == 2 and out["rmse"] < 0.95 * const


def test_cold_user_gets_the_biases_until_min_ratings_then_mosaic():
    s, _ = _planted()
    rec = MoSAICRecommender(1, 2, items=30, pretrain_at=len(s), pretrain_restarts=2, seed=0, min_ratings=3)
    predict_then_learn(s, rec)
    assert rec.fitted
    ref = SGDBiases(0.05, 0.1)  # the recommender's own biases (its defaults)
    predict_then_learn(s, ref)
    new_user = "someone new"
    for k, item in enumerate([0, 1, 2, 3]):
        expect_biases = k < 3
        same = rec.predict_one(new_user, 10) == pytest.approx(ref.predict_one(new_user, 10), abs=1e-12)
        assert same == expect_biases, k
        rec.learn_one(new_user, item, 4.5)
        ref.learn_one(new_user, item, 4.5)


def test_sgd_biases_equal_river_baseline():
    """``SGDBiases`` is river ``reco.Baseline``'s rule: the same predictions, rating by rating."""
    reco = pytest.importorskip("river.reco")
    from river import optim

    s, _ = _planted(users=30, per_user=12)
    ours = predict_then_learn(s, SGDBiases(0.05, 0.1))
    theirs = predict_then_learn(s, reco.Baseline(optimizer=optim.SGD(0.05), l2=0.1, seed=0))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def test_new_item_is_served_by_the_biases_and_its_bias_follows_its_ratings():
    s, _ = _planted()
    rec = MoSAICRecommender(1, 2, items=30, pretrain_at=len(s), pretrain_restarts=2, seed=0)
    predict_then_learn(s, rec)
    b = rec.biases
    user = 0
    new_item = "a new film"
    assert rec.predict_one(user, new_item) == pytest.approx(b.mean + b.user_bias(user))
    before = rec.predict_one(user, new_item)
    for other in range(1, 11):
        rec.learn_one(other, new_item, 5.0)
    after = rec.predict_one(user, new_item)
    assert after > before + 0.5  # ten 5-star ratings raise the new item's bias
    assert after == pytest.approx(b.mean + b.user_bias(user) + b.item_bias(new_item))  # outside the coordinates


def test_returning_user_drift_is_followed_through_the_window():
    """User 0 switches taste group halfway through. With a window of recent ratings MoSAIC's fold-in
    follows the new taste (the second half of the user's post-switch ratings is predicted better than
    the first, and better than by the biases); completing from all of the user's ratings does not."""
    s, _ = _planted(users=60, items=60, per_user=40, switch=(0,))
    cut = len(s) // 4
    after = np.flatnonzero((s.user_ids[s.user] == 0) & (np.arange(len(s)) >= len(s) // 2))
    early, late = after[: len(after) // 2], after[len(after) // 2:]

    def rmse(model, part):
        pred = predict_then_learn(s, model, clip=(1.0, 5.0))
        return errors(pred[part], s.rating[part])["rmse"]

    windowed = MoSAICRecommender(1, 2, items=60, pretrain_at=cut, pretrain_restarts=4, seed=0, window=12)
    pred = predict_then_learn(s, windowed, clip=(1.0, 5.0))
    late_err = errors(pred[late], s.rating[late])["rmse"]
    assert late_err < 0.5 * errors(pred[early], s.rating[early])["rmse"]
    assert late_err < 0.75 * rmse(SGDBiases(0.05, 0.1), late)  # its own biases alone (which follow drift too)
    assert late_err < 0.5 * rmse(MoSAICRecommender(1, 2, items=60, pretrain_at=cut, pretrain_restarts=4, seed=0), late)
    with pytest.raises(ValueError, match="window"):
        MoSAICRecommender(window=0)


def test_ridge_fold_in_by_hand_and_shrinks_toward_the_biases():
    s, _ = _planted()
    rec = MoSAICRecommender(1, 2, items=30, pretrain_at=len(s), pretrain_restarts=2, seed=0, fold_ridge=0.3)
    predict_then_learn(s, rec)
    user, item = 0, next(i for i in rec.column if i not in rec.history[0])
    e = rec._residual_vector(user)
    U = rec.mosaic.bases_[rec.mosaic.route(e[None])[0]]
    obs = ~np.isnan(e)
    A = np.vstack([U[obs], np.sqrt(0.3) * np.eye(1)])  # ridge as least squares on stacked rows
    w = np.linalg.lstsq(A, np.r_[e[obs], 0.0], rcond=None)[0]
    base = rec.biases.predict_one(user, item)
    assert rec.predict_one(user, item) == pytest.approx(base + U[rec.column[item]] @ w, rel=1e-9)
    shifts = []
    for lam in (0.01, 0.3, 3.0, 1e6):
        rec.fold_ridge = lam
        shifts.append(abs(rec.predict_one(user, item) - base))
    assert shifts == sorted(shifts, reverse=True) and shifts[-1] < 1e-4 < shifts[0]
    with pytest.raises(ValueError, match="fold_ridge"):
        MoSAICRecommender(fold_ridge=-1.0)
