"""The pretrained molecule encoder as a saved artefact: pretraining it on the cached Mordred
descriptors (``mixscent pretrain``), where it lives by default, and loading it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .features import cache_dir, canonical_smiles
from .model import MolEncoder, MolEncoderConfig
from .molecules import descriptor_matrix
from .train import PretrainConfig, pretrain


def pretrain_encoder(
    out_dir: Path,
    enc_cfg: MolEncoderConfig,
    cfg: PretrainConfig,
    smiles: Sequence[str] | None = None,
    extra_descriptors: dict[str, np.ndarray] | None = None,
    device: str = "auto",
    precision: str = "32",
) -> dict:
    """Pretrain on cached Mordred descriptors (:func:`olfaction.train.pretrain`) and save the
    encoder to ``out_dir``; returns the pretraining report.

    ``extra_descriptors`` (``{smiles: (D,)}`` raw Mordred 2D vectors of an unlabeled corpus, e.g.
    ``experiments.olfaction.moses``) join the training molecules: they are cleaned with the
    scaler fitted on the olfaction molecules, and the held-out molecules stay the olfaction ones
    (same for every corpus size)."""
    smi, X, scaler = descriptor_matrix(smiles)
    n_base = len(smi)
    base = set(smi)
    table = {canonical_smiles(s): v for s, v in (extra_descriptors or {}).items()}
    extra = [s for s in table if s not in base]
    if extra:
        X = np.concatenate([X, scaler.transform(np.stack([table[s] for s in extra]))])
        smi = smi + extra
    model, report = pretrain(smi, X, enc_cfg, cfg, n_base=n_base, device=device, precision=precision)
    report["n_extra"] = len(extra)
    model.encoder.save_pretrained(out_dir, {"report": report, "scaler_columns": scaler.columns})
    return report


def default_encoder_dir() -> Path:
    """``<cache dir>/encoder``: where ``mixscent pretrain`` saves the encoder and the other
    commands look for it."""
    return cache_dir() / "encoder"


def load_encoder(path: Path) -> MolEncoder:
    """The saved encoder in ``path`` (CheckpointError when missing or not an encoder)."""
    return MolEncoder.from_pretrained(path)
