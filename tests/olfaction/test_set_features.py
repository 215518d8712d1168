"""Set-level pair features, out-of-fold target encodings and the set-feature regressors."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import InputError
from olfaction.set_features import (
    MoleculeSpaces,
    TargetEncoder,
    cost_matrix,
    overlap_features,
    pair_set_features,
    set_distances,
    set_feature_names,
)
from olfaction.set_models import SetFeatureRegressor

from .test_model import MOLS


def _spaces() -> MoleculeSpaces:
    """Real RDKit / Morgan tables; a seeded stand-in for the Mordred table (no cache needed)."""
    rng = np.random.default_rng(0)
    fake_mordred = {s: rng.standard_normal(12) for s in MOLS}
    return MoleculeSpaces(MOLS, mordred=fake_mordred)


def test_overlap_features_by_hand():
    a, b = ("x", "y", "z"), ("y", "z", "u", "v")
    # shared 2, union 5, min size 3, max 4
    assert overlap_features(a, b) == [2, 2 / 5, 2 / 3, 3, 4, 1, 7]
    with pytest.raises(InputError, match="empty mixture"):
        overlap_features((), b)


def test_set_distances_by_hand():
    Xa, Xb = np.array([[0.0], [10.0]]), np.array([[1.0], [12.0]])
    chamfer, matching, mean_gap, angle, mean_pairwise = set_distances(Xa, Xb, "euclidean")
    assert chamfer == pytest.approx(1.5)  # nearest: 0->1, 10->12 and back
    assert matching == pytest.approx(1.5)  # (|0-1| + |10-12|) / 2
    assert mean_gap == pytest.approx(1.5)  # |5 - 6.5|
    assert angle == pytest.approx(0.0, abs=1e-12)  # parallel sums in 1-D
    assert mean_pairwise == pytest.approx((1 + 12 + 9 + 2) / 4)
    # Tanimoto on binary rows: {0, 1} vs {0, 2} share 1 of 3 bits
    t = cost_matrix(np.array([[1.0, 1.0, 0.0]]), np.array([[1.0, 0.0, 1.0]]), "tanimoto")
    assert t[0, 0] == pytest.approx(1 - 1 / 3)
    with pytest.raises(ValueError):
        cost_matrix(Xa, Xb, "cosine")


def test_pair_set_features_symmetric_permutation_invariant_and_self_pair():
    spaces = _spaces()
    a, b = tuple(MOLS[:4]), tuple(MOLS[2:])
    f_ab = pair_set_features([a], [b], spaces)
    assert f_ab.shape == (1, len(set_feature_names()))
    np.testing.assert_array_equal(pair_set_features([b], [a], spaces), f_ab)
    np.testing.assert_array_equal(pair_set_features([a[::-1]], [b[::-1]], spaces), f_ab)
    # a mixture against itself: full overlap, zero distances, no differing components
    self_row = dict(zip(set_feature_names(), pair_set_features([a], [a], spaces)[0], strict=True))
    assert self_row["shared"] == 4 and self_row["jaccard"] == 1.0
    for name in ("rdkit_chamfer", "morgan_matching", "mordred_mean_gap", "n_differ", "rdkit_differ_chamfer"):
        assert self_row[name] == pytest.approx(0.0, abs=1e-9), name
    with pytest.raises(InputError, match="no descriptors for molecule"):
        pair_set_features([("CCCCCCCCCCO",)], [a], spaces)


def test_target_encoding_by_hand_and_out_of_fold():
    A, B, C = ("a",), ("b",), ("c",)
    mix_a, mix_b, y = [A, A, B, A, B, C], [B, C, C, A, B, C], np.array([0.2, 0.4, 0.6, 0.1, 0.3, 0.5])
    enc = TargetEncoder(smoothing=2.0, folds=3, seed=0).fit(mix_a, mix_b, y)
    prior = y.mean()
    # mixture A occurs in rows 0, 1, 3 (a self-pair counts once); molecule "a" likewise
    e_a = (0.2 + 0.4 + 0.1 + 2 * prior) / (3 + 2)
    e_b = (0.2 + 0.6 + 0.3 + 2 * prior) / (3 + 2)
    np.testing.assert_allclose(
        enc.transform([A], [B])[0], [e_a + e_b, abs(e_a - e_b), 3, e_a + e_b, abs(e_a - e_b)]
    )
    # an unseen mixture gets the prior and count 0
    np.testing.assert_allclose(enc.transform([("z",)], [("z",)])[0], [2 * prior, 0, 0, 2 * prior, 0])
    # out of fold: a training row's own label never enters its own features
    rng = np.random.default_rng(0)
    mixes = [tuple(MOLS[i : i + 2]) for i in range(0, 6, 2)]
    ma = [mixes[i] for i in rng.integers(0, 3, 40)]
    mb = [mixes[i] for i in rng.integers(0, 3, 40)]
    yy = rng.random(40)
    base = TargetEncoder(seed=1).fit_transform(ma, mb, yy)
    for row in (0, 17, 39):
        y2 = yy.copy()
        y2[row] += 5.0
        np.testing.assert_array_equal(TargetEncoder(seed=1).fit_transform(ma, mb, y2)[row], base[row])
    with pytest.raises(InputError, match="folds >= 2"):
        TargetEncoder(folds=1)
    with pytest.raises(InputError, match="non-finite"):
        TargetEncoder().fit(ma, mb, np.full(40, np.nan))


def test_partner_features_by_hand_symmetric_and_out_of_fold():
    A, B, C, D, E, F = (("a",), ("b",), ("c",), ("d",), ("e",), ("f",))
    # C and D are measured against both A and B (A-C twice: replicates are averaged); the A-B pair
    # itself never makes A or B a partner of its own pair
    mix_a = [A, C, B, A, B, A, E, A]
    mix_b = [C, A, C, D, D, B, F, F]
    y = np.array([0.2, 0.4, 0.5, 0.3, 0.35, 0.9, 0.6, 0.1])
    enc = TargetEncoder(folds=2, partners=True).fit(mix_a, mix_b, y)
    assert enc.n_features == 10
    d_ac, d_bc, d_ad, d_bd = 0.3, 0.5, 0.3, 0.35
    gaps, sums = [abs(d_ac - d_bc), abs(d_ad - d_bd)], [d_ac + d_bc, d_ad + d_bd]
    row = enc.transform([A], [B])[0]
    np.testing.assert_allclose(row[5:], [2, np.mean(gaps), max(gaps), min(sums), 1])
    np.testing.assert_array_equal(enc.transform([B[::-1]], [A])[0], row)
    # E's only partner is F; A's partners do not include F's other partners -> no common partner
    np.testing.assert_allclose(enc.transform([E], [B])[0][5:], [0, 0, 0, 2 * y.mean(), 0])
    # the first five columns are the plain encodings
    np.testing.assert_array_equal(row[:5], TargetEncoder(folds=2).fit(mix_a, mix_b, y).transform([A], [B])[0])
    # out of fold, partners included
    rng = np.random.default_rng(0)
    mixes = [tuple(MOLS[i : i + 2]) for i in range(0, 8, 2)]
    ma = [mixes[i] for i in rng.integers(0, 4, 60)]
    mb = [mixes[i] for i in rng.integers(0, 4, 60)]
    yy = rng.random(60)
    base = TargetEncoder(seed=2, partners=True).fit_transform(ma, mb, yy)
    assert base[:, -1].any()
    for r in (0, 31, 59):
        y2 = yy.copy()
        y2[r] += 5.0
        np.testing.assert_array_equal(TargetEncoder(seed=2, partners=True).fit_transform(ma, mb, y2)[r], base[r])


def _overlap_task(n_pairs: int = 120, seed: int = 0):
    """Random pairs of 1-4 component mixtures; distance falls with the Jaccard overlap."""
    rng = np.random.default_rng(seed)
    mix_a, mix_b, y = [], [], []
    for _ in range(n_pairs):
        a = tuple(rng.choice(MOLS, size=rng.integers(1, 5), replace=False))
        b = tuple(rng.choice(MOLS, size=rng.integers(1, 5), replace=False))
        jac = len(set(a) & set(b)) / len(set(a) | set(b))
        mix_a.append(a)
        mix_b.append(b)
        y.append(0.8 - 0.6 * jac + 0.02 * rng.standard_normal())
    return mix_a, mix_b, np.asarray(y)


@pytest.mark.parametrize("kind", ["trees", "ridge"])
def test_set_regressor_learns_overlap_symmetric_deterministic(kind):
    spaces = _spaces()
    mix_a, mix_b, y = _overlap_task()
    S_ab = pair_set_features(mix_a, mix_b, spaces)
    S_ba = pair_set_features(mix_b, mix_a, spaces)
    pair_X = np.zeros((len(y), 4))  # symmetric stand-in for the RF pair features
    ds = ["d1" if i % 2 else "d2" for i in range(len(y))]
    tr, te = np.arange(90), np.arange(90, 120)

    def take(lst, rows):
        return [lst[i] for i in rows]

    def fitted():
        return SetFeatureRegressor(kind, seed=3, n_estimators=50).fit(
            pair_X[tr], S_ab[tr], take(ds, tr), take(mix_a, tr), take(mix_b, tr), y[tr]
        )

    model = fitted()
    pred = model.predict(pair_X[te], S_ab[te], take(ds, te), take(mix_a, te), take(mix_b, te))
    assert np.corrcoef(pred, y[te])[0, 1] > 0.8
    swapped = model.predict(pair_X[te], S_ba[te], take(ds, te), take(mix_b, te), take(mix_a, te))
    np.testing.assert_array_equal(swapped, pred)
    again = fitted().predict(pair_X[te], S_ab[te], take(ds, te), take(mix_a, te), take(mix_b, te))
    np.testing.assert_array_equal(again, pred)
    with pytest.raises(InputError, match="unknown dataset"):
        model.predict(pair_X[te], S_ab[te], ["d9"] * len(te), take(mix_a, te), take(mix_b, te))


@pytest.mark.parametrize("kind", ["trees", "ridge"])
def test_gated_partner_regressor_routes_only_pairs_with_a_common_partner(kind):
    spaces = _spaces()
    mix_a, mix_b, y = _overlap_task(160, seed=1)
    S_ab, S_ba = pair_set_features(mix_a, mix_b, spaces), pair_set_features(mix_b, mix_a, spaces)
    pair_X = np.zeros((len(y), 4))
    ds = ["d"] * len(y)
    tr, te = np.arange(120), np.arange(120, 160)

    def take(lst, rows):
        return [lst[i] for i in rows]

    def fit(mode):
        return SetFeatureRegressor(kind, seed=3, n_estimators=50, partners=mode).fit(
            pair_X[tr], S_ab[tr], ds[:120], take(mix_a, tr), take(mix_b, tr), y[tr]
        )

    args = (pair_X[te], S_ab[te], ds[120:], take(mix_a, te), take(mix_b, te))
    plain, gated, full = fit("off").predict(*args), fit("gated").predict(*args), fit("on").predict(*args)
    gate = fit("gated").encoder_.transform(take(mix_a, te), take(mix_b, te))[:, -1] > 0
    assert gate.any() and not gate.all()
    np.testing.assert_array_equal(gated[~gate], plain[~gate])
    np.testing.assert_array_equal(gated[gate], full[gate])
    assert not np.array_equal(gated[gate], plain[gate])
    swapped = fit("gated").predict(pair_X[te], S_ba[te], ds[120:], take(mix_b, te), take(mix_a, te))
    np.testing.assert_array_equal(swapped, gated)


def test_set_regressor_errors():
    with pytest.raises(InputError, match="unknown set-feature regressor"):
        SetFeatureRegressor("forest")
    with pytest.raises(InputError, match="unknown partner mode"):
        SetFeatureRegressor("trees", partners="always")
    spaces = _spaces()
    mix_a, mix_b, y = _overlap_task(20)
    S = pair_set_features(mix_a, mix_b, spaces)
    ds = ["d"] * 20
    y_bad = y.copy()
    y_bad[3] = np.nan
    with pytest.raises(InputError, match="non-finite training distance"):
        SetFeatureRegressor("ridge").fit(None, S, ds, mix_a, mix_b, y_bad)
    with pytest.raises(InputError, match="needs the RF pair features"):
        SetFeatureRegressor("trees").fit(None, S, ds, mix_a, mix_b, y)
    with pytest.raises(InputError, match="set features must be"):
        SetFeatureRegressor("ridge").fit(None, S[:5], ds, mix_a, mix_b, y)


def test_network_set_feature_path_symmetric_fitted_on_training_rows_and_roundtrip(tmp_path):
    """MixScentNet with the set-feature head: symmetric in the two mixtures, standardisation
    buffers equal the training pairs' mean / std, the head really reads the features, and a
    safetensors save/load round trip gives identical outputs; the on-the-fly predictor refuses it."""
    import torch

    from olfaction.data import Split
    from olfaction.mixture_index import predict_distance
    from olfaction.model import MixScentConfig, MixScentNet, MolEncoder
    from olfaction.train import DistanceTrainConfig, fit

    from .test_model import TINY_ENC, _tiny_pairs

    pairs = _tiny_pairs()
    n = len(pairs)
    pairs.dataset = ["Bushdid", "Snitz 1"] * (n // 2) + ["Bushdid"] * (n % 2)  # the head reads the experiment
    spaces = _spaces()
    keys = list(zip(pairs.keys_a, pairs.keys_b, strict=True))
    S = pair_set_features([pairs.mixtures[a] for a, _ in keys], [pairs.mixtures[b] for _, b in keys], spaces)
    pair_set = {k: S[i] for i, k in enumerate(keys)}
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    torch.manual_seed(0)
    enc = MolEncoder(TINY_ENC).eval()
    mcfg = MixScentConfig(hidden=16, heads=2, dropout=0.0, n_datasets=7)
    tcfg = DistanceTrainConfig(epochs=4, lr=5e-3, batch_size=8, patience=4, seed=1)
    model, index, _ = fit(pairs, split, enc, mcfg, tcfg, pair_set=pair_set)
    assert model.cfg.set_dim == S.shape[1]
    np.testing.assert_allclose(model.set_mean.numpy(), S[split.training].mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        model.set_std.numpy(), np.maximum(S[split.training].std(0, ddof=1), 1e-6), rtol=1e-4, atol=1e-5
    )
    ka, kb = list(pairs.keys_a), list(pairs.keys_b)
    p_ab = predict_distance(model, index, ka, kb)
    np.testing.assert_allclose(p_ab, predict_distance(model, index, kb, ka), atol=1e-6)
    model.save_pretrained(tmp_path / "m")
    loaded = MixScentNet.from_pretrained(tmp_path / "m")
    np.testing.assert_array_equal(predict_distance(loaded, index, ka, kb), p_ab)
    # the head reads the set features: other feature values give other distances
    index.pair_set = {k: v + 1.0 for k, v in pair_set.items()}
    assert not np.allclose(predict_distance(model, index, ka, kb), p_ab)
    index.pair_set = {}
    with pytest.raises(KeyError, match="no set-level features"):
        predict_distance(model, index, ka, kb)
