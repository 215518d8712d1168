"""Hybrid distance model (descriptor pair path) and validation-weighted stacking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.errors import InputError
from olfaction.bench import STACKS, VARIANTS, stack_predictions
from olfaction.data import Split
from olfaction.evaluate import convex_blend_weights
from olfaction.model import MixScentConfig, MolEncoder
from olfaction.pipeline import MixScentPredictor, pair_descriptors, train_distance
from olfaction.train import DistanceTrainConfig, predict_distance

from .test_model import TINY_ENC, _tiny_pairs


def test_convex_blend_weights_by_hand():
    y = np.array([0.1, 0.4, 0.7, 0.9])
    good, bad = y.copy(), y[::-1].copy()
    np.testing.assert_allclose(convex_blend_weights(np.stack([bad, good], 1), y), [0.0, 1.0])
    # two predictions off by +d and -d: the half/half average is exact
    np.testing.assert_allclose(convex_blend_weights(np.stack([y + 0.2, y - 0.2], 1), y), [0.5, 0.5])
    w = convex_blend_weights(np.random.default_rng(0).random((10, 3)), np.zeros(10))
    assert w.sum() == pytest.approx(1.0) and (w >= 0).all()


def test_stack_weight_is_chosen_on_validation_rows_not_test_rows():
    """Component "a" is exact on validation and useless on test, "b" the reverse: a blend picked
    on validation rows puts all weight on "a" and so scores badly on test. Picking on test rows
    would give weight 1 to "b" and this test would fail."""
    rng = np.random.default_rng(1)
    y_val, y_test = rng.random(40), rng.random(30)
    val = {"a": y_val.copy(), "b": rng.random(40)}
    test = {"a": rng.random(30), "b": y_test.copy()}
    pred, w = stack_predictions(val, y_val, test)
    np.testing.assert_allclose(w, [1.0, 0.0])
    np.testing.assert_allclose(pred, test["a"])
    # and the weights do not move when only the test labels change (they are not an input)
    pred2, w2 = stack_predictions(val, y_val, {k: v[::-1] for k, v in test.items()})
    np.testing.assert_array_equal(w, w2)


def test_stack_components_are_bench_methods():
    from olfaction.bench import EQUAL_MEANS, HGB_NAME, RF_NAME, SET_KINDS

    for name, parts in {**STACKS, **EQUAL_MEANS}.items():
        assert all(p in VARIANTS or p in (RF_NAME, HGB_NAME, *SET_KINDS) for p in parts), name
        assert "," not in name, f"`mixscent bench --variants` splits on commas: {name}"


def test_hybrid_symmetric_save_load_identical(tmp_path):
    """The hybrid (embedding + descriptor pair path) is symmetric, its training path and its
    on-the-fly predictor agree, and a save/load round trip gives identical outputs with no
    temporary files left behind (checkpoint files are written atomically)."""
    pairs = _tiny_pairs()
    n = len(pairs)
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    torch.manual_seed(0)
    enc = MolEncoder(TINY_ENC).eval()
    desc, scaler = pair_descriptors(sorted(pairs.molecules()))
    mcfg = MixScentConfig(hidden=16, heads=2, dropout=0.0)
    tcfg = DistanceTrainConfig(epochs=4, lr=5e-3, batch_size=8, patience=4, seed=1)
    model, index, _ = train_distance(pairs, split, enc, mcfg, tcfg, descriptors=desc)
    assert model.cfg.desc_dim == len(next(iter(desc.values()))) == len(scaler.keep)
    ka = [pairs.keys_a[i] for i in range(n)]
    kb = [pairs.keys_b[i] for i in range(n)]
    p_ab = predict_distance(model, index, ka, kb)
    np.testing.assert_allclose(p_ab, predict_distance(model, index, kb, ka), atol=1e-6)
    with pytest.raises(InputError, match="pair_scaler"):
        MixScentPredictor(model)
    pred = MixScentPredictor(model, pair_scaler=scaler)
    ma = [pairs.mixtures[k] for k in ka]
    mb = [pairs.mixtures[k] for k in kb]
    np.testing.assert_allclose(pred.distances(ma, mb), p_ab, atol=1e-5)
    pred.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    loaded = MixScentPredictor.load(tmp_path / "m")
    assert loaded.model.cfg.desc_dim == model.cfg.desc_dim
    np.testing.assert_array_equal(loaded.distances(ma, mb), pred.distances(ma, mb))
    # the head really reads the descriptors: other descriptor values give other distances
    index.desc = index.desc + 1.0
    assert not np.allclose(predict_distance(model, index, ka, kb), p_ab)
