"""MOSES corpus: filtering, seeded nested subsets, errors; pretraining with an extra corpus keeps
the held-out molecules of the base set."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from common.errors import DataError
from experiments.olfaction.moses import MAX_HEAVY_ATOMS, moses_descriptors, moses_subset
from olfaction.model import MolEncoderConfig
from olfaction.train import PretrainConfig, pretrain

GOOD = ["CCO", "CC(=O)OC", "c1ccccc1O", "CCCCC=O", "CSC", "FC(F)CCl", "CC(C)CBr", "OCC=CC", "N#CCC", "CCOCC"]
BAD = [
    "[NH4+]",  # charged
    "CC[Si](C)C",  # element outside the odorant set
    "C" * (MAX_HEAVY_ATOMS + 1),  # too large
    "C1CC",  # invalid
    "OCC",  # duplicate of CCO after canonicalisation
]
TINY_ENC = MolEncoderConfig(hidden=16, layers=2, emb_dim=16)


def _moses_file(path, smiles):
    with gzip.open(path, "wt") as fh:
        fh.write("SMILES,SPLIT\n" + "".join(f"{s},train\n" for s in smiles))
    return path


def test_subset_filters_is_seeded_and_nested(tmp_path):
    f = _moses_file(tmp_path / "train.csv.gz", GOOD + BAD)
    full = moses_subset(10, seed=1, path=f)
    assert len(full) == len(set(full)) == 10  # every BAD row rejected, the duplicate kept once
    assert not {"[NH4+]", "CCC(C)[Si]", "C1CC"} & set(full)
    assert moses_subset(10, seed=1, path=f) == full
    assert moses_subset(4, seed=1, path=f) == full[:4]  # nested in n: a corpus curve reuses work
    assert moses_subset(10, seed=2, path=f) != full
    assert "CCO" not in moses_subset(9, seed=1, path=f, exclude={"CCO"})
    assert moses_subset(0, path=tmp_path / "missing.csv.gz") == []  # nothing to read


def test_subset_errors(tmp_path):
    f = _moses_file(tmp_path / "train.csv.gz", GOOD)
    with pytest.raises(DataError, match="only 10 molecules"):
        moses_subset(11, path=f)
    (tmp_path / "bad.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="cannot read MOSES file"):
        moses_subset(3, path=tmp_path / "bad.csv.gz")
    with pytest.raises(ValueError, match=">= 0"):
        moses_subset(-1, path=f)


def test_extra_corpus_only_trains_and_keeps_the_heldout_base():
    base, extra = GOOD[:8], GOOD[8:]
    targets = np.stack([[len(s), s.count("O"), s.count("C")] for s in base + extra]).astype(np.float32)
    cfg = PretrainConfig(epochs=2, batch_size=4, heldout_frac=0.25, seed=0)
    _, alone = pretrain(base, targets[:8], TINY_ENC, cfg)
    _, more = pretrain(base + extra, targets, TINY_ENC, cfg, n_base=len(base))
    assert alone["n_heldout"] == more["n_heldout"] == 2
    assert more["n_train"] == alone["n_train"] + len(extra)
    with pytest.raises(ValueError, match="n_base"):
        pretrain(base, targets[:8], TINY_ENC, cfg, n_base=9)


def test_pretrain_encoder_with_extra_corpus(tmp_path, monkeypatch):
    from olfaction.encoder import load_encoder, pretrain_encoder

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    cfg = PretrainConfig(epochs=1, batch_size=4, heldout_frac=0.2, seed=0)
    report = pretrain_encoder(
        tmp_path / "enc", TINY_ENC, cfg, smiles=GOOD[:6],
        extra_descriptors=moses_descriptors(GOOD[4:], progress=False),
    )
    assert report["n_extra"] == 4  # the two overlapping with the base set are not added twice
    assert report["n_heldout"] == 1 and report["n_train"] == 5 + 4
    assert (tmp_path / "cache" / "olfaction").glob("moses_mordred2d_*.npz")
    assert load_encoder(tmp_path / "enc").cfg.emb_dim == 16
