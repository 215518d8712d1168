"""Pretraining the mixture level on blend labels before the distance task.

The blend pairs (two-molecule mixtures with odour labels, ``blends/``) teach the mixture level
(GATv2 over the component molecules + attention readout, :class:`~olfaction.model.MixtureEncoder`)
how components combine into a mixture odour. :func:`pretrain_mixture_level` fits a
:class:`~olfaction.model.MixScentNet` with a label head on a seeded subset of the blend pairs
(epoch chosen on a held-out tenth of them by macro ROC-AUC) and returns the mixture level's
weights; :func:`olfaction.train.fit` starts its mixture level from them
(``mixture_init``) and fine-tunes everything on the distance pairs.

Only odour *labels* of blend molecules are used, never a perceptual distance, so no distance test
row is seen; as with POMMix's GS-LF-trained molecule embeddings, a distance test molecule may have
blend labels of its own.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from common.errors import InputError
from experiments.olfaction.blends import load_blends
from olfaction.data import LabelData
from olfaction.labels import LabelTrainConfig, fit_labels
from olfaction.mixture_index import MixtureIndex
from olfaction.model import MixScentConfig, MixScentNet


def pretrain_mixture_level(
    features: dict[str, np.ndarray],
    mcfg: MixScentConfig,
    data_dir: Path | None = None,
    blends: LabelData | None = None,
    seed: int = 0,
    max_pairs: int = 40000,
    epochs: int = 20,
) -> tuple[dict[str, torch.Tensor], dict]:
    """Mixture-level weights (a :class:`~olfaction.model.MixtureEncoder` state dict for
    ``mcfg`` with ``in_dim`` = the feature size) and the label-fit history.

    ``features``: ``{smiles: (in_dim,)}`` molecule inputs covering every blend molecule (the
    same vectors the distance model will read); ``blends``: preloaded blend data (else read from
    ``data_dir``); ``max_pairs`` blend pairs drawn with ``seed``, a tenth of them held out for the
    epoch choice."""
    if blends is None:
        if data_dir is None:
            raise InputError("pretrain_mixture_level needs data_dir or blends")
        blends, _, _ = load_blends(data_dir)
    if max_pairs < 20:
        raise InputError(f"blend pretraining needs max_pairs >= 20, got {max_pairs}")
    rng = np.random.default_rng(seed)
    ids = rng.permutation(len(blends.smiles))[:max_pairs]
    mixtures = {j: blends.smiles[i] for j, i in enumerate(ids)}
    missing = next((m for pair in mixtures.values() for m in pair if m not in features), None)
    if missing is not None:
        raise InputError(f"blend pretraining: no molecule features for {missing!r}")
    index = MixtureIndex(mixtures, features)
    y = blends.y[ids]
    n_val = max(len(ids) // 10, 1)
    order = np.arange(len(ids))
    val, train = order[:n_val], order[n_val:]
    cfg = MixScentConfig(
        **{
            **asdict(mcfg),
            "in_dim": index.x.shape[1],
            "n_labels": y.shape[1],
            "label_experts": 0,
            "n_datasets": 0,
            "desc_dim": 0,
            "mol_encoder": None,
        }
    )
    torch.manual_seed(seed)
    net = MixScentNet(cfg)
    hist = fit_labels(
        net,
        index,
        y,
        train,
        val,
        LabelTrainConfig(epochs=epochs, batch_size=256, patience=5, seed=seed),
    )
    state = {k: v.detach().clone() for k, v in net.mixture.state_dict().items()}
    return state, {**hist, "n_pairs": len(ids)}
