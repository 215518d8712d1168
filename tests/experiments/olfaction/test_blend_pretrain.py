"""Mixture level pretrained on blend labels: determinism, that it learns, and that the distance
model starts from exactly those weights."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from common.errors import InputError
from experiments.olfaction.blend_pretrain import pretrain_mixture_level
from experiments.olfaction.variant_bench import VARIANTS
from olfaction.data import LabelData, Split
from olfaction.model import MixScentConfig, MolEncoder
from olfaction.molecules import molecule_features
from olfaction.train import DistanceTrainConfig, fit
from tests.olfaction.test_model import MOLS, TINY_ENC, _tiny_pairs

MCFG = MixScentConfig(hidden=16, heads=2, dropout=0.0)


def _toy_blends(features: dict[str, np.ndarray], seed: int = 0) -> LabelData:
    """Every pair of the feature molecules; label j fires when the pair's summed features point
    along a fixed random direction, so the labels are learnable from the mixture."""
    rng = np.random.default_rng(seed)
    mols = sorted(features)
    pairs = list(itertools.combinations(mols, 2))
    d = len(next(iter(features.values())))
    w = rng.normal(size=(d, 2))
    y = np.stack([(features[a] + features[b]) @ w > 0 for a, b in pairs]).astype(np.float32)
    return LabelData(pairs, y, ["x", "y"])


def _random_features(n: int = 24, d: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"M{i:02d}": rng.normal(size=d).astype(np.float32) for i in range(n)}


def test_pretraining_is_deterministic_and_learns():
    feats = _random_features()
    blends = _toy_blends(feats)
    s1, h1 = pretrain_mixture_level(feats, MCFG, blends=blends, seed=3, max_pairs=250, epochs=25)
    s2, h2 = pretrain_mixture_level(feats, MCFG, blends=blends, seed=3, max_pairs=250, epochs=25)
    assert h1 == h2 and h1["n_pairs"] == 250
    assert set(s1) == set(s2)
    for k in s1:
        torch.testing.assert_close(s1[k], s2[k], rtol=0, atol=0)
    assert h1["val_auc"] > 0.75  # the held-out tenth of the pairs, labels learnable from the mixture
    s3, _ = pretrain_mixture_level(feats, MCFG, blends=blends, seed=4, max_pairs=250, epochs=2)
    assert any(not torch.equal(s1[k], s3[k]) for k in s1)


def test_distance_model_starts_from_the_blend_pretrained_mixture_level():
    torch.manual_seed(0)
    enc = MolEncoder(TINY_ENC).eval()
    pairs = _tiny_pairs()
    feats = molecule_features(MOLS, "embedding", enc)
    state, _ = pretrain_mixture_level(feats, MCFG, blends=_toy_blends(feats), seed=0, max_pairs=100, epochs=2)
    n = len(pairs)
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    # no epoch: the model is exactly the initialisation
    model, _, _ = fit(
        pairs, split, enc, MCFG, DistanceTrainConfig(epochs=0), mol_features=feats, mixture_init=state
    )
    for k, v in model.mixture.state_dict().items():
        torch.testing.assert_close(v, state[k], rtol=0, atol=0)
    # fine-tuning moves it, deterministically
    tcfg = DistanceTrainConfig(epochs=3, batch_size=8, seed=1)
    a, _, ha = fit(pairs, split, enc, MCFG, tcfg, mol_features=feats, mixture_init=state)
    b, _, hb = fit(pairs, split, enc, MCFG, tcfg, mol_features=feats, mixture_init=state)
    assert ha == hb
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, b.state_dict()[k], rtol=0, atol=0)


def test_bad_inputs_name_the_problem():
    feats = _random_features()
    blends = _toy_blends(feats)
    with pytest.raises(InputError, match="no molecule features for"):
        pretrain_mixture_level({k: feats[k] for k in list(feats)[:-1]}, MCFG, blends=blends, max_pairs=300)
    with pytest.raises(InputError, match="data_dir or blends"):
        pretrain_mixture_level(feats, MCFG)
    with pytest.raises(InputError, match="max_pairs"):
        pretrain_mixture_level(feats, MCFG, blends=blends, max_pairs=5)
    # an 8-dimensional mixture level does not fit a model over 16-dimensional embeddings
    state, _ = pretrain_mixture_level(feats, MCFG, blends=blends, seed=0, max_pairs=60, epochs=1)
    torch.manual_seed(0)
    enc = MolEncoder(TINY_ENC).eval()
    pairs = _tiny_pairs()
    n = len(pairs)
    split = Split("tiny", np.arange(0, n - 12), np.arange(n - 12, n - 6), np.arange(n - 6, n))
    with pytest.raises(InputError, match="mixture_init does not fit"):
        fit(pairs, split, enc, MCFG, DistanceTrainConfig(epochs=0), mixture_init=state)


def test_bench_lists_the_blend_pretrained_variants():
    assert VARIANTS["MixScentNet (blend-pretrained)"] == {"blend_pretrain": True}
    assert VARIANTS["MixScentNet (+Mordred) (blend-pretrained)"]["blend_pretrain"] is True
