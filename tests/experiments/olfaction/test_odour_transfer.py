"""GS-LF odour transfer for blend pairs: the leakage rules of the cross-fitted odour profiles and
the ``logreg-odour`` blend model in the label benchmark."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import InputError
from experiments.olfaction.blends import sum_absdiff_pairs
from experiments.olfaction.label_bench import LabelBenchConfig, blend_bench
from experiments.olfaction.odour_transfer import odour_profiles, stereo_free, transfer_inputs
from olfaction.data import LabelData
from tests.experiments.olfaction.test_label_ensemble import gslf_dir  # noqa: F401  (the tiny GS-LF fixture)

_MOLS = [f"C{'C' * i}O" for i in range(12)] + ["C[C@H](N)O", "CC(N)O", "c1ccccc1"]


def _toy(seed: int = 0):
    """GS-LF look-alike: 14 molecules (one a stereo twin of another), 3 labels learnable from
    random inputs; the benzene molecule is outside GS-LF."""
    rng = np.random.default_rng(seed)
    gs_smiles = _MOLS[:12] + ["CC(N)O", "CCCCCCCCCCCCCCO"]
    inputs = {s: rng.normal(size=6).astype(np.float32) for s in _MOLS + gs_smiles}
    w = rng.normal(size=(6, 3))
    y = (np.stack([inputs[s] for s in gs_smiles]) @ w > 0).astype(np.float32)
    return LabelData(gs_smiles, y, ["a", "b", "c"]), inputs


def test_profiles_shapes_and_determinism():
    gs, inputs = _toy()
    a = odour_profiles(gs, _MOLS, {"CCO"}, inputs, folds=3, seed=1)
    b = odour_profiles(gs, _MOLS, {"CCO"}, inputs, folds=3, seed=1)
    assert list(a) == _MOLS
    for s in _MOLS:
        assert a[s].shape == (3,) and np.isfinite(a[s]).all()
        np.testing.assert_array_equal(a[s], b[s])


def test_excluded_molecule_labels_never_enter_any_fit():
    gs, inputs = _toy()
    banned = {"CCCO", "C[C@H](N)O"}  # the second bans its stereo-free GS-LF twin CC(N)O too
    base = odour_profiles(gs, _MOLS, banned, inputs, folds=3, seed=0)
    flipped = LabelData(gs.smiles, gs.y.copy(), gs.labels)
    for s in ("CCCO", "CC(N)O"):
        flipped.y[gs.smiles.index(s)] = 1 - flipped.y[gs.smiles.index(s)]
    again = odour_profiles(flipped, _MOLS, banned, inputs, folds=3, seed=0)
    for s in _MOLS:
        np.testing.assert_array_equal(base[s], again[s])
    # without the exclusion, the flipped labels do change the profiles
    free = odour_profiles(gs, _MOLS, set(), inputs, folds=3, seed=0)
    free_flipped = odour_profiles(flipped, _MOLS, set(), inputs, folds=3, seed=0)
    assert any(not np.array_equal(free[s], free_flipped[s]) for s in _MOLS)


def test_pool_molecule_profile_is_cross_fitted():
    """A GS-LF molecule's own labels never shape its own profile (other molecules' may change)."""
    gs, inputs = _toy()
    base = odour_profiles(gs, _MOLS, set(), inputs, folds=4, seed=0)
    i = gs.smiles.index("CCCCO")
    flipped = LabelData(gs.smiles, gs.y.copy(), gs.labels)
    flipped.y[i] = 1 - flipped.y[i]
    again = odour_profiles(flipped, _MOLS, set(), inputs, folds=4, seed=0)
    np.testing.assert_array_equal(base["CCCCO"], again["CCCCO"])


def test_pair_features_symmetric_and_errors():
    gs, inputs = _toy()
    prof = odour_profiles(gs, _MOLS, set(), inputs, folds=3)
    x = sum_absdiff_pairs([("CCO", "CCCO"), ("CCCO", "CCO")], prof)
    assert x.shape == (2, 6)
    np.testing.assert_array_equal(x[0], x[1])
    assert stereo_free("C[C@H](N)O") == stereo_free("CC(N)O")
    with pytest.raises(InputError, match="folds >= 2"):
        odour_profiles(gs, _MOLS, set(), inputs, folds=1)
    with pytest.raises(InputError, match="no predictor input"):
        odour_profiles(gs, _MOLS + ["CCCl"], set(), inputs, folds=3)
    with pytest.raises(InputError, match="GS-LF molecules left"):
        odour_profiles(gs, _MOLS, set(_MOLS), inputs, folds=3)


def test_transfer_inputs_concatenate_mordred_and_morgan(gslf_dir):  # noqa: F811
    x = transfer_inputs(["CCO", "c1ccccc1", "CCO"])
    assert list(x) == ["CCO", "c1ccccc1"]
    assert x["CCO"].shape == x["c1ccccc1"].shape and x["CCO"].shape[0] > 2048


def test_blend_bench_odour_member(gslf_dir, blend_dir):  # noqa: F811  (both write under tmp_path; this order)
    cfg = LabelBenchConfig(epochs=2, patience=1, batch_size=4)
    kinds = ("logreg-odour", "ensemble=logreg-odour", "ensemble=logreg-odour&logreg-mordred")
    rows = blend_bench(blend_dir, None, splits=("authors",), feature_kinds=kinds, cfg=cfg, progress=False)
    again = blend_bench(blend_dir, None, splits=("authors",), feature_kinds=kinds, cfg=cfg, progress=False)
    assert [r["method"] for r in rows] == [
        "logreg (GS-LF odour-transfer logits sum ++ |diff|)",
        "logreg (summed Morgan counts)",
        "logreg (Mordred sum ++ |diff|)",
        "ensemble [rank] (logreg-odour 1)",
        "ensemble [rank] (logreg-odour 0.5, logreg-mordred 0.5)",
    ]
    assert [r["auc"] for r in rows] == pytest.approx([r["auc"] for r in again], nan_ok=True)
