"""Mixtures as index lists into a table of precomputed molecule features: the training and
benchmark-variant view of the data (:class:`MixtureIndex`), and the networks' predictions through
it (distances of keyed mixture pairs, label probabilities of keyed mixtures).

The product's prediction on arbitrary SMILES goes through :mod:`olfaction.predictor` instead
(molecules encoded on the fly); this path serves training and the networks whose molecule
inputs are fixed tables (cleaned Mordred, set-level pair features)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .data import PairData, dataset_one_hot
from .model import MixScentNet


class MixtureIndex:
    """Mixtures as index lists into ``U`` unique molecules with features ``x (U, d)``.

    ``mixtures``: ``{key: components}``; ``features``: ``{smiles: (d,)}`` (a frozen encoder's
    embeddings or descriptors); ``descriptors``: optional ``{smiles: (D,)}`` for a model with a
    descriptor pair path (``desc (U, D)``). Keys may be any hashable (dataset/label tuples or
    ad-hoc). Tensors stay on the CPU; the predictions move what they use to the network's device."""

    def __init__(
        self,
        mixtures: dict,
        features: dict[str, np.ndarray],
        descriptors: dict[str, np.ndarray] | None = None,
        pair_set: dict[tuple, np.ndarray] | None = None,
    ):
        self.pair_set = pair_set
        self.keys = list(mixtures)
        self.pos = {k: i for i, k in enumerate(self.keys)}
        mols = sorted({s for comps in mixtures.values() for s in comps})
        self.mol_index = {s: i for i, s in enumerate(mols)}
        self.smiles = mols
        self.x = torch.as_tensor(np.stack([features[s] for s in mols]), dtype=torch.float32)
        self.desc = (
            torch.as_tensor(np.stack([descriptors[s] for s in mols]), dtype=torch.float32)
            if descriptors is not None
            else None
        )
        self.comps = [
            torch.tensor([self.mol_index[s] for s in mixtures[k]], dtype=torch.long) for k in self.keys
        ]

    def set_features(self, keys_a: Sequence, keys_b: Sequence) -> torch.Tensor:
        """``(P, K)`` set-level features of the pairs ``(keys_a[i], keys_b[i])`` from
        ``pair_set`` (``{(key_a, key_b): (K,)}``; looked up in either order, the features being
        symmetric)."""
        if self.pair_set is None:
            raise ValueError("this mixture index has no set-level pair features")
        rows = []
        for a, b in zip(keys_a, keys_b, strict=True):
            row = self.pair_set.get((a, b))
            row = self.pair_set.get((b, a)) if row is None else row
            if row is None:
                raise KeyError(f"no set-level features for the pair {a!r}, {b!r}")
            rows.append(row)
        return torch.as_tensor(np.stack(rows), dtype=torch.float32)

    def batch(self, mix_ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``comp (C,)`` molecule indices and ``comp_batch (C,)`` local mixture ids 0..len-1."""
        parts = [self.comps[i] for i in mix_ids]
        comp = torch.cat(parts)
        comp_batch = torch.repeat_interleave(torch.arange(len(parts)), torch.tensor([len(p) for p in parts]))
        return comp, comp_batch


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def pair_distances(model: MixScentNet, index: MixtureIndex, keys_a, keys_b, datasets) -> torch.Tensor:
    """Distances ``(P,)`` (with gradients, on the model's device) of the keyed mixture pairs
    ``(keys_a[i], keys_b[i])`` of experiment ``datasets[i]``: the distinct mixtures of the batch
    are embedded once. ``datasets`` None: no experiment input (the head reads zeros)."""
    device = _device(model)
    ids_a = [index.pos[k] for k in keys_a]
    ids_b = [index.pos[k] for k in keys_b]
    uniq = sorted(set(ids_a) | set(ids_b))
    local = {m: i for i, m in enumerate(uniq)}
    comp, comp_batch = index.batch(uniq)
    pa = torch.tensor([local[m] for m in ids_a], device=device)
    pb = torch.tensor([local[m] for m in ids_b], device=device)
    read_dataset = model.cfg.n_datasets and datasets is not None
    oh = torch.from_numpy(dataset_one_hot(datasets)).to(device) if read_dataset else None
    ps = index.set_features(keys_a, keys_b).to(device) if model.cfg.set_dim else None
    desc = index.desc.to(device) if index.desc is not None else None
    return model(index.x.to(device), comp.to(device), comp_batch.to(device), len(uniq), pa, pb, oh, desc, ps)


def mixture_label_logits(model: MixScentNet, index: MixtureIndex, ids: Sequence[int]) -> torch.Tensor:
    """Label logits ``(len(ids), L)`` (with gradients, on the model's device) of the mixtures
    ``index.keys[i]``."""
    device = _device(model)
    comp, comp_batch = index.batch(list(ids))
    return model.label_logits(index.x.to(device), comp.to(device), comp_batch.to(device), len(ids))


@torch.no_grad()
def predict_distance(model: MixScentNet, index: MixtureIndex, keys_a, keys_b, datasets=None) -> np.ndarray:
    """Distances ``(P,)`` for mixture keys ``keys_a[i]`` vs ``keys_b[i]`` of experiment
    ``datasets[i]`` (None: as in :func:`pair_distances`)."""
    model.eval()
    out = [
        pair_distances(model, index, keys_a[s : s + 256], keys_b[s : s + 256],
                       None if datasets is None else datasets[s : s + 256]).cpu()
        for s in range(0, len(keys_a), 256)
    ]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def test_predictions(model: MixScentNet, index: MixtureIndex, pairs: PairData, rows) -> dict:
    """``{"y", "pred", "self_pair", "rows"}`` of the pair rows ``rows`` of ``pairs`` (test rows of a
    split): targets, the network's distances through ``index``, the self-pair flags."""
    rows = np.asarray(rows)
    pred = predict_distance(
        model,
        index,
        [pairs.keys_a[i] for i in rows],
        [pairs.keys_b[i] for i in rows],
        [pairs.dataset[i] for i in rows],
    )
    return {"y": pairs.y[rows], "pred": pred, "self_pair": pairs.self_pair[rows], "rows": rows}
