"""End-to-end workflows behind the CLI, the benchmark, ``quick`` and the demo: featurise,
pretrain the encoder, train/evaluate the distance model on a split, save/load a predictor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from common.errors import DataError, InputError

from .data import PairData, Split, blend_molecules, load_gslf, load_pairs
from .evaluate import pair_metrics
from .features import (
    DescriptorScaler,
    cache_dir,
    canonical_smiles,
    compute_mordred,
    load_mordred_cache,
    mordred_cache_path,
)
from .model import MixScentConfig, MixScentNet, MolEncoder, MolEncoderConfig
from .train import (
    DistanceTrainConfig,
    MixtureIndex,
    PretrainConfig,
    encode_molecules,
    fit_distance,
    predict_distance,
    pretrain_descriptors,
)


def olfaction_molecules(data_dir: Path) -> list[str]:
    """Canonical SMILES of every mixture component, then every GS-LF molecule, then every blend
    molecule (deduplicated, in that order so a ``--limit`` run covers the mixtures first)."""
    pairs = load_pairs(data_dir)
    mols = sorted(pairs.molecules())
    return list(dict.fromkeys(mols + load_gslf(data_dir).smiles + blend_molecules(data_dir)))


def featurize(data_dir: Path, limit: int | None = None, progress: bool = True, nproc: int = 1) -> dict:
    """Compute (or reuse) the cached Mordred 2D vectors of the olfaction molecules with ``nproc``
    worker processes."""
    mols = olfaction_molecules(data_dir)
    if limit is not None:
        mols = mols[:limit]
    table = compute_mordred(mols, progress=progress, nproc=nproc)
    return {"molecules": len(table), "cache": str(mordred_cache_path())}


def descriptor_matrix(smiles: Sequence[str] | None = None) -> tuple[list[str], np.ndarray, DescriptorScaler]:
    """Cleaned Mordred matrix ``(N, D_keep)`` of the cached molecules (or of ``smiles``, computing
    any that are missing), with the scaler fitted on exactly those molecules."""
    if smiles is None:
        smi, vals, cols = load_mordred_cache()
        if not smi:
            raise DataError("Mordred cache is empty: run `mixscent featurize` first")
    else:
        table = compute_mordred(smiles, progress=False)
        smi = list(table)
        vals = np.stack([table[s] for s in smi])
        cols = load_mordred_cache()[2]
    scaler = DescriptorScaler.fit(vals, cols)
    return smi, scaler.transform(vals), scaler


FEATURE_KINDS = ("embedding", "mordred", "embedding+mordred")


def molecule_features(
    smiles: Sequence[str], kind: str, encoder: MolEncoder | None = None
) -> dict[str, np.ndarray]:
    """``{smiles: (d,)}`` molecule-level inputs of the mixture level: the frozen encoder's
    embedding ``(emb_dim,)``, the cleaned Mordred vector ``(D_keep,)`` (scaler fitted on exactly
    these molecules, unsupervised) or their concatenation."""
    if kind not in FEATURE_KINDS:
        raise InputError(f"unknown molecule feature kind {kind!r}; choose from {list(FEATURE_KINDS)}")
    smiles = list(dict.fromkeys(smiles))
    parts: list[np.ndarray] = []
    if "embedding" in kind:
        if encoder is None:
            raise InputError(f"feature kind {kind!r} needs a pretrained encoder")
        emb = encode_molecules(encoder, smiles)
        parts.append(np.stack([emb[s] for s in smiles]))
    if "mordred" in kind:
        table = compute_mordred(smiles, progress=False)
        raw = np.stack([table[s] for s in smiles])
        scaler = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])])
        parts.append(scaler.transform(raw))
    x = np.concatenate(parts, axis=1).astype(np.float32)
    return {s: x[i] for i, s in enumerate(smiles)}


# ----------------------------------------------------------------------------- encoder


def pretrain_encoder(
    out_dir: Path,
    enc_cfg: MolEncoderConfig,
    cfg: PretrainConfig,
    smiles: Sequence[str] | None = None,
    progress: bool = True,
    extra_descriptors: dict[str, np.ndarray] | None = None,
) -> dict:
    """Pretrain on cached Mordred descriptors and save the encoder to ``out_dir``.

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
    model, report = pretrain_descriptors(smi, X, enc_cfg, cfg, progress=progress, n_base=n_base)
    report["n_extra"] = len(extra)
    model.encoder.save_pretrained(out_dir, {"report": report, "scaler_columns": scaler.columns})
    return report


def default_encoder_dir() -> Path:
    return cache_dir() / "encoder"


def load_encoder(path: Path) -> MolEncoder:
    return MolEncoder.from_pretrained(path)


def random_encoder(enc_cfg: MolEncoderConfig, seed: int) -> MolEncoder:
    torch.manual_seed(seed)
    return MolEncoder(enc_cfg).eval()


# ----------------------------------------------------------------------------- distance model


def train_distance(
    pairs: PairData,
    split: Split,
    encoder: MolEncoder,
    mcfg: MixScentConfig,
    tcfg: DistanceTrainConfig,
    features: str = "embedding",
    descriptors: dict[str, np.ndarray] | None = None,
    mol_features: dict[str, np.ndarray] | None = None,
    mixture_init: dict | None = None,
    pair_set: dict[tuple, np.ndarray] | None = None,
    mol_extra: dict[str, np.ndarray] | None = None,
) -> tuple[MixScentNet, MixtureIndex, dict]:
    """Fit a MixScentNet on ``split.training``, selecting the epoch on ``split.validation``.

    ``mol_features`` (``{smiles: (d,)}``) replace the ``features`` computed here (e.g. vectors
    whose Mordred scaler was fitted on a larger molecule set); ``mixture_init`` is a mixture-level
    state dict to start from (:func:`olfaction.blend_pretrain.pretrain_mixture_level`), fine-tuned
    with the rest.

    ``descriptors`` (``{smiles: (D,)}``, e.g. :func:`olfaction.baselines.scaled_molecule_table`)
    turn on the distance head's descriptor pair path (``MixScentConfig.desc_dim = D``).
    ``pair_set`` (``{(key_a, key_b): (K,)}`` for the pairs' mixture keys, e.g. rows of
    :func:`olfaction.set_features.pair_set_features`) turns on its set-feature path
    (``set_dim = K``), standardised with the mean / std of the training pairs' features.
    ``mol_extra`` (``{smiles: (k,)}``, e.g. standardised MiniMol embeddings) is appended to each
    molecule's features; with the encoder as molecule level, prediction then passes the same
    vectors as the graph batch's ``mol_extra`` (:meth:`MixScentNet.molecule_features`).

    ``features="embedding"``: the frozen ``encoder`` is the model's molecule level (the model
    then works on any SMILES, see :class:`~olfaction.predictor.MixturePredictor`); other :data:`FEATURE_KINDS` feed
    precomputed molecule vectors (e.g. embedding ++ cleaned Mordred) to the mixture level, a
    benchmark variant that predicts through the returned index only."""
    feats = (
        mol_features
        if mol_features is not None
        else molecule_features(sorted(pairs.molecules()), features, encoder)
    )
    if mol_extra is not None:
        feats = {s: np.concatenate([feats[s], mol_extra[s]]).astype(np.float32) for s in sorted(pairs.molecules())}
    index = MixtureIndex(pairs.mixtures, feats, descriptors, pair_set)
    torch.manual_seed(tcfg.seed)
    with_encoder = features == "embedding"
    mcfg = MixScentConfig(
        **{
            **asdict(mcfg),
            "in_dim": index.x.shape[1],
            "desc_dim": 0 if index.desc is None else index.desc.shape[1],
            "set_dim": 0 if pair_set is None else len(next(iter(pair_set.values()))),
            "mol_encoder": asdict(encoder.cfg) if with_encoder else None,
        }
    )
    model = MixScentNet(mcfg)
    if pair_set is not None:
        tr = index.set_features([pairs.keys_a[i] for i in split.training], [pairs.keys_b[i] for i in split.training])
        model.set_mean.copy_(tr.mean(0))
        model.set_std.copy_(tr.std(0).clamp(min=1e-6))
    if with_encoder:
        model.mol_encoder.load_state_dict(encoder.state_dict())
        for p in model.mol_encoder.parameters():
            p.requires_grad_(False)
    if mixture_init is not None:
        try:
            model.mixture.load_state_dict(mixture_init)
        except RuntimeError as exc:
            raise InputError(
                f"mixture_init does not fit this model's mixture level: {str(exc).splitlines()[0]}"
            ) from None
    hist = fit_distance(model, index, pairs, split.training, split.validation, tcfg)
    return model, index, hist


def test_predictions(model: MixScentNet, index: MixtureIndex, pairs: PairData, rows) -> dict:
    rows = np.asarray(rows)
    pred = predict_distance(
        model,
        index,
        [pairs.keys_a[i] for i in rows],
        [pairs.keys_b[i] for i in rows],
        [pairs.dataset[i] for i in rows],
    )
    return {"y": pairs.y[rows], "pred": pred, "self_pair": pairs.self_pair[rows], "rows": rows}


def evaluate_predictor(predictor, pairs: PairData, split: Split) -> dict:
    """Test metrics of a :class:`~olfaction.predictor.MixturePredictor` on ``split.testing``: the
    combined distance (``all_*`` / ``noself_*``, :func:`~olfaction.evaluate.pair_metrics`) and
    each component's (``network/...``, ``trees/...``, ``ridge/...``)."""
    rows = split.testing
    mix_a, mix_b = pairs.sides()
    parts = predictor.predict_components(
        [mix_a[i] for i in rows], [mix_b[i] for i in rows], [pairs.dataset[i] for i in rows]
    )
    out = pair_metrics(pairs.y[rows], parts.pop("combined"), pairs.self_pair[rows])
    for name, pred in parts.items():
        out.update({f"{name}/{k}": v for k, v in pair_metrics(pairs.y[rows], pred, pairs.self_pair[rows]).items()})
    out["n_test"] = int(len(rows))
    return out
