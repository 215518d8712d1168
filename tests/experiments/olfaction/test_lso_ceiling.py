"""experiments/olfaction/lso_ceiling.py: the Bushdid design summary, the molecule-identity residual
CV and the bounded predictions, on data the test builds."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.olfaction import lso_ceiling as lc


def _design(rng, n_pairs=240, pool=40, size=10):
    """Pairs of equal-size mixtures from ``pool`` molecules sharing 0, 3 or 6 components."""
    mols = [f"m{j}" for j in range(pool)]
    mix_a, mix_b = [], []
    for i in range(n_pairs):
        shared = (0, 3, 6)[i % 3]
        pick = rng.choice(pool, 2 * size - shared, replace=False)
        mix_a.append(tuple(mols[j] for j in pick[:size]))
        mix_b.append(tuple(mols[j] for j in pick[size - shared :]))
    return mix_a, mix_b


def test_conditions_and_condition_means():
    cond = lc.conditions([("a", "b"), ("a", "b"), ("c", "d")], [("a", "c"), ("b", "a"), ("e", "f")])
    assert cond == [(2, 1), (2, 2), (2, 0)]
    cond = [(2, 1), (2, 1), (2, 0)]
    y = np.array([0.2, 0.4, 0.9])
    np.testing.assert_allclose(lc.condition_means(cond, y), [0.3, 0.3, 0.9])
    np.testing.assert_allclose(lc.condition_means(cond, y, rows=np.array([0, 2])), [0.2, 0.2, 0.9])
    summary = lc.design_summary(cond, y)
    assert summary["conditions"] == 2 and summary["within_condition_var"] == pytest.approx(0.01 * 2 / 3)


def test_identity_cv_finds_a_planted_molecule_effect_and_not_noise():
    rng = np.random.default_rng(0)
    mix_a, mix_b = _design(rng)
    cond = lc.conditions(mix_a, mix_b)
    X = lc.symdiff_design(mix_a, mix_b)
    np.testing.assert_allclose(X.sum(1), 1.0)  # 1 / |A xor B| on each differing molecule
    base = np.array([{0: 0.7, 3: 0.6, 6: 0.5}[s] for _, s in cond])
    salience = rng.normal(0, 1, X.shape[1])
    planted = base + 0.3 * (X @ salience) + rng.normal(0, 0.01, len(base))
    noise = base + rng.normal(0, 0.1, len(base))
    assert lc.identity_residual_cv(X, cond, planted, seed=0) > 0.8
    assert abs(lc.identity_residual_cv(X, cond, noise, seed=0)) < 0.3


def test_bounded_predictions_replace_bushdid_and_shrink_snitz_residuals():
    datasets = ["Bushdid", "Snitz 1", "Ravia 1", "Snitz 1"]
    y = np.array([0.5, 0.4, 0.3, 0.2])
    oracle = np.array([0.55, 0.0, 0.0, 0.0])
    rows = np.array([0, 1, 2])
    out = lc.bounded_predictions([0.9, 0.6, 0.1], rows, datasets, y, oracle, snitz_scale=0.5)
    np.testing.assert_allclose(out, [0.55, 0.5, 0.1])


def test_mixture_reuse_and_per_dataset_rows():
    reuse = lc.mixture_reuse([("a", "b"), ("c",), ("d",)], [("b", "a"), ("a", "b"), ("d",)])
    assert reuse == {"mixtures": 3, "mixtures_in_one_pair": 2}  # {a,b} in two pairs; a self-pair counts once
    folds = [
        {"dataset": ["X", "X", "X", "Y"], "y": [0.1, 0.2, 0.3, 0.5], "pred": [0.1, 0.3, 0.2, 0.4], "both_seen": [1, 0, 0, 0]},
        {"dataset": ["X", "Y"], "y": [0.4, 0.6], "pred": [0.5, 0.6], "both_seen": [0, 1]},
    ]
    rows = {r["dataset"]: r for r in lc.per_dataset_rows(folds)}
    assert rows["X"]["test_rows"] == 4 and rows["X"]["both_mixtures_seen"] == 1
    assert rows["Y"]["test_rows"] == 2 and rows["Y"]["rmse"] == pytest.approx(np.sqrt(0.005))
    assert np.isnan(rows["Y"]["pearson"])  # fewer than 3 rows


def test_affine_oracle_fits_each_group_and_needed_rmse_balances_the_pool():
    pred = np.array([0.1, 0.2, 0.3, 0.5, 0.6, 0.7])
    y = np.array([0.3, 0.5, 0.7, 0.4, 0.4, 0.5])
    groups = ["A", "A", "A", "B", "B", "B"]
    out = lc.affine_oracle(pred, y, groups)
    np.testing.assert_allclose(out[:3], y[:3])  # exactly affine within A (2 * pred + 0.1)
    line = np.polyfit(pred[3:], y[3:], 1)
    np.testing.assert_allclose(out[3:], np.polyval(line, pred[3:]))
    rows = [{"dataset": "A", "test_rows": 10, "rmse": 0.2}, {"dataset": "B", "test_rows": 30, "rmse": 0.1}]
    need = lc.needed_rmse(rows, "A", 0.12)
    pooled = np.sqrt((10 * need**2 + 30 * 0.1**2) / 40)
    assert pooled == pytest.approx(0.12) and need < 0.2
    assert np.isnan(lc.needed_rmse(rows, "A", 0.05))  # B alone already exceeds 0.05


def test_learned_angle_recovers_a_planted_projection_deterministically():
    rng = np.random.default_rng(0)
    mix_a, mix_b = _design(rng, n_pairs=300, pool=30, size=6)
    molecules = sorted({m for mix in mix_a + mix_b for m in mix})
    inc_a, inc_b = lc.incidence(mix_a, molecules), lc.incidence(mix_b, molecules)
    assert inc_a.shape == (300, 30) and (inc_a.sum(1) == 6).all()
    X = rng.normal(size=(30, 12))

    def summed_angle(z):  # 1 - cos of the summed molecule rows of each pair's two mixtures
        sa, sb = inc_a @ z, inc_b @ z
        return 1 - (sa * sb).sum(1) / (np.linalg.norm(sa, axis=1) * np.linalg.norm(sb, axis=1))

    angle = summed_angle(np.log1p(np.exp(X[:, :3] * 2.0)))  # only 3 of 12 descriptors matter
    groups = np.arange(300) % 2
    y = np.where(groups == 0, 0.2, 0.4) + 3.0 * angle
    overlap = np.zeros((300, 4))  # no overlap terms: only the learned angle can explain y
    fit, test = np.arange(240), np.arange(240, 300)
    args = (X, inc_a, inc_b, groups, overlap, y, fit, test)
    pred = lc.learned_angle_predict(*args, k=8, weight_decay=0.01, steps=400)
    raw_angle = summed_angle(np.log1p(np.exp(X)))  # all 12 descriptors, nothing learned: r about 0.5
    assert np.corrcoef(pred, y[test])[0, 1] > max(0.8, np.corrcoef(raw_angle[test], y[test])[0, 1] + 0.2)
    np.testing.assert_array_equal(pred, lc.learned_angle_predict(*args, k=8, weight_decay=0.01, steps=400))
    shuffled = lc.learned_angle_predict(X, inc_a, inc_b, groups, overlap, rng.permutation(y), fit, test, k=8, steps=400)
    assert abs(np.corrcoef(shuffled, y[test])[0, 1]) < 0.5
