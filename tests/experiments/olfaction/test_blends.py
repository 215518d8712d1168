"""The label experiments' blend helpers (experiments/olfaction/blends.py): blend loading and
molecule-disjoint splits on a tiny fixture, multi-label stratified folds, pair features and the
multi-label logistic regression."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import InputError
from experiments.olfaction.blends import (
    MultiLabelLogReg,
    blend_fingerprints,
    load_blends,
    molecule_disjoint_blend_split,
    multilabel_stratified_kfold,
)
from olfaction.data import LabelData


def test_load_blends_tiny_fixture(blend_dir):
    blends, auth, kept = load_blends(blend_dir)
    assert blends.labels == ["fruity", "green", "floral"]
    assert kept.tolist() == [0, 1, 2, 3, 6, 7]  # invalid SMILES and self-pair dropped
    assert blends.smiles[0] == ("CC(=O)O", "CCO")  # canonical and sorted, so order-free
    np.testing.assert_array_equal(blends.y[0], [1, 1, 0])
    np.testing.assert_array_equal(blends.y[2], [0, 1, 0])  # a non-evaluated label is ignored
    np.testing.assert_array_equal(blends.y[3], [0, 0, 0])  # unlabelled pair kept, all zero
    # authors' rows remapped onto kept rows; the dropped row 4 disappears
    assert auth["training"].tolist() == [0, 1, 4] and auth["testing"].tolist() == [2, 3, 5]


def _random_blends(n_mols: int = 40, n_pairs: int = 400, seed: int = 0) -> LabelData:
    rng = np.random.default_rng(seed)
    mols = [f"M{i:02d}" for i in range(n_mols)]
    pairs = set()
    while len(pairs) < n_pairs:
        a, b = rng.choice(n_mols, 2, replace=False)
        pairs.add(tuple(sorted((mols[a], mols[b]))))
    pairs = sorted(pairs)
    y = (rng.random((len(pairs), 3)) < [0.5, 0.2, 0.01]).astype(np.float32)
    return LabelData(pairs, y, ["a", "b", "c"])


def test_molecule_disjoint_blend_split_has_no_shared_molecule():
    blends = _random_blends()
    sp = molecule_disjoint_blend_split(blends, seed=3)
    test_mols = {m for i in sp.testing for m in blends.smiles[i]}
    train_mols = {m for i in np.concatenate([sp.training, sp.validation]) for m in blends.smiles[i]}
    assert test_mols and train_mols and not (test_mols & train_mols)
    assert test_mols <= set(sp.test_molecules)
    assert not set(sp.training) & set(sp.validation)
    # evaluated labels: exactly those with a positive pair on both sides
    both = (blends.y[sp.training].sum(0) > 0) & (blends.y[sp.testing].sum(0) > 0)
    assert sp.labels.tolist() == np.where(both)[0].tolist()
    again = molecule_disjoint_blend_split(blends, seed=3)
    assert again.testing.tolist() == sp.testing.tolist()
    with pytest.raises(InputError, match="test_frac"):
        molecule_disjoint_blend_split(blends, seed=0, test_frac=1.5)


def test_multilabel_stratified_kfold_spreads_every_label():
    rng = np.random.default_rng(0)
    y = (rng.random((500, 12)) < np.linspace(0.02, 0.4, 12)).astype(int)
    folds = multilabel_stratified_kfold(y, 5, seed=1)
    allrows = np.sort(np.concatenate(folds))
    assert allrows.tolist() == list(range(500))  # a partition of the rows
    assert all(abs(len(f) - 100) <= 10 for f in folds)  # sizes within 10% of n / k
    per_fold = np.stack([y[f].sum(0) for f in folds])  # (5, 12) positives per fold
    expected = y.sum(0) / 5
    # iterative stratification keeps each label's count within 2 of its even share
    assert np.all(np.abs(per_fold - expected) <= 2.0)
    # a random KFold on the same data is far less even for the rare labels (the test can fail)
    perm = rng.permutation(500)
    rand = np.stack([y[perm[k::5]].sum(0) for k in range(5)])
    assert np.abs(rand - expected).max() > np.abs(per_fold - expected).max()
    with pytest.raises(ValueError, match="n_folds"):
        multilabel_stratified_kfold(y, 1)


def test_blend_fingerprints_order_free():
    table = {"A": np.array([1.0, 0.0]), "B": np.array([0.0, 2.0])}
    np.testing.assert_array_equal(blend_fingerprints([("A", "B"), ("B", "A")], table), [[1, 2], [1, 2]])


def test_multilabel_logreg_learns_and_handles_constant_label():
    rng = np.random.default_rng(0)
    X = rng.random((200, 4)) * 3
    Y = np.stack([X[:, 0] > 1.5, np.zeros(200, bool)], axis=1).astype(float)
    m = MultiLabelLogReg(C=1.0).fit(X, Y)
    p = m.predict_proba(X)
    assert p.shape == (200, 2)
    assert ((p[:, 0] > 0.5) == (Y[:, 0] > 0)).mean() > 0.9
    np.testing.assert_array_equal(p[:, 1], 0.0)  # no positive in training: constant score


def test_multilabel_logreg_matches_sklearn():
    """The joint torch fit minimises scikit-learn's per-label objective: same probabilities."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    X = rng.random((150, 5))
    Y = (X[:, :2] + 0.3 * rng.standard_normal((150, 2)) > 0.5).astype(float)
    ours = MultiLabelLogReg(C=0.3, log1p=False, max_iter=500).fit(X, Y).predict_proba(X)
    Xs = (X - X.mean(0)) / (X.std(0) + 1e-6)
    for j in range(2):
        ref = LogisticRegression(C=0.3, tol=1e-8, max_iter=2000).fit(Xs, Y[:, j]).predict_proba(Xs)[:, 1]
        np.testing.assert_allclose(ours[:, j], ref, atol=2e-3)
