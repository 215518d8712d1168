"""Mixed precision on the CPU: the app's trainings in ``bf16-mixed`` (Lightning's bfloat16
autocast) give finite losses, move the weights, and leave fp32 CPU weights that save and load as
fp32; and the device options of the predictor's loading path."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from olfaction.data import LabelData, PairData, Split
from olfaction.fitting import all_rows, fit_module, shuffled_rows
from olfaction.mixture_index import MixtureIndex, predict_distance
from olfaction.model import DistanceTrainConfig, MixScentConfig, MixScentNet, MolEncoderConfig
from olfaction.molecules import molecule_features
from olfaction.predictor import LabelNetConfig, MixturePredictor
from olfaction.train import DistanceModule, PretrainConfig, pretrain

from .test_model import seeded_encoder

MOLS = ["CCO", "CCCO", "CC(=O)O", "CCOC(C)=O", "c1ccccc1", "CC(C)=O", "CCN", "OCCc1ccccc1"]
TINY_ENC = MolEncoderConfig(hidden=8, layers=1, emb_dim=8)


def _tiny_pairs(n_pairs: int = 24) -> PairData:
    """Pairs of one- and two-component mixtures of :data:`MOLS` with distances in [0.2, 0.8]."""
    mixtures = {("D", i): tuple(sorted({MOLS[i % 8], MOLS[(i + 3) % 8]})) for i in range(8)}
    mixtures.update({("D", 8 + i): (MOLS[i],) for i in range(8)})
    keys = list(mixtures)
    rng = np.random.default_rng(0)
    ka = [keys[i % 16] for i in range(n_pairs)]
    kb = [keys[(i + 5) % 16] for i in range(n_pairs)]
    y = rng.uniform(0.2, 0.8, n_pairs).astype(np.float32)
    return PairData(["Bushdid" if i % 2 else "Snitz 1" for i in range(n_pairs)], ka, kb, y, mixtures)


def _train_distance(precision: str):
    """A tiny distance network trained 3 epochs (2 batches each) in ``precision`` on the CPU:
    ``(pairs, index, model, weights before, training losses, module)``."""
    pairs = _tiny_pairs()
    index = MixtureIndex(pairs.mixtures, molecule_features(sorted(pairs.molecules()), "embedding",
                                                           seeded_encoder(TINY_ENC)))
    torch.manual_seed(0)
    model = MixScentNet(MixScentConfig(in_dim=8, hidden=8, heads=2, dropout=0.0, n_datasets=7))
    before = copy.deepcopy(model.state_dict())
    module = DistanceModule(model, index, pairs, DistanceTrainConfig(epochs=3, lr=1e-2, batch_size=8))
    losses = []
    module.on_train_batch_end = lambda out, batch, idx: losses.append(float(out["loss"]))
    fit_module(module, shuffled_rows(np.arange(16), 8, 0), all_rows(np.arange(16, 24)), 3, 0,
               "val_rmse", "min", None, device="cpu", precision=precision)
    return pairs, index, model, before, losses, module


def test_bf16_mixed_distance_training_on_cpu_moves_fp32_weights_and_saves_fp32(tmp_path):
    pairs, index, model, before, losses, module = _train_distance("bf16-mixed")
    assert len(losses) == 6 and all(np.isfinite(losses))  # 3 epochs of 2 batches, each loss finite
    assert all(np.isfinite(h["rmse"]) for h in module.history)
    # autocast really ran in bfloat16: same seeds and batches, losses near the fp32 run's but not equal
    fp32_losses = _train_distance("32")[4]
    assert losses != fp32_losses
    np.testing.assert_allclose(losses, fp32_losses, rtol=0.1)
    after = model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "bf16-mixed training did not move the weights"
    assert all(v.dtype == before[k].dtype and v.device.type == "cpu" for k, v in after.items())
    model.save_pretrained(tmp_path / "net")
    loaded = MixScentNet.from_pretrained(tmp_path / "net")
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in loaded.parameters())
    ka, kb = pairs.keys_a, pairs.keys_b
    np.testing.assert_array_equal(predict_distance(loaded, index, ka, kb, pairs.dataset),
                                  predict_distance(model, index, ka, kb, pairs.dataset))


def test_bf16_mixed_predictor_and_pretraining_end_to_end(tmp_path):
    pairs = _tiny_pairs()
    split = Split("tiny", np.arange(16), np.arange(16, 24), np.arange(0))
    y = (np.random.default_rng(1).uniform(size=(8, 3)) > 0.5).astype(np.float32)
    y[0], y[1] = 1, 0  # both classes in every column
    targets = np.random.default_rng(2).normal(size=(len(MOLS), 5)).astype(np.float32)
    pre, report = pretrain(MOLS, targets, TINY_ENC, PretrainConfig(epochs=2, batch_size=4, seed=0),
                           device="cpu", precision="bf16-mixed")
    assert np.isfinite(report["loss"]) and next(pre.parameters()).dtype == torch.float32
    model = MixturePredictor(MixScentConfig(hidden=8, heads=2), DistanceTrainConfig(epochs=2),
                             LabelNetConfig(hidden=8, epochs=2, features="morgan"), n_estimators=3)
    model.fit(pairs, split, pre.encoder, LabelData(MOLS, y, ["a", "b", "c"]), device="cpu", precision="bf16-mixed")
    model.save_pretrained(tmp_path / "m")
    loaded = MixturePredictor.from_pretrained(tmp_path / "m")
    for net in (loaded.distance_net, loaded.label_net):
        assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in net.parameters())
    a, b = [("CCO", "CCCO"), ("c1ccccc1",)], [("CC(C)=O",), ("CCO", "CC(=O)O")]
    want = model.predict_components(a, b, ["Bushdid", "Snitz 1"])
    got = loaded.predict_components(a, b, ["Bushdid", "Snitz 1"])
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
        assert np.isfinite(got[k]).all()
    np.testing.assert_array_equal(loaded.predict_labels(a), model.predict_labels(a))


def test_sixteen_bit_mixed_precision_is_refused_on_the_cpu():
    from common.device import DeviceError

    pairs = _tiny_pairs()
    split = Split("tiny", np.arange(16), np.arange(16, 24), np.arange(0))
    with pytest.raises(DeviceError, match="16-mixed needs a CUDA GPU"):
        MixturePredictor(MixScentConfig(hidden=8, heads=2), DistanceTrainConfig(epochs=1), n_estimators=3).fit(
            pairs, split, seeded_encoder(TINY_ENC), device="cpu", precision="16-mixed")
