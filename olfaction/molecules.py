"""Molecule-level inputs of the mixture models: the olfaction molecules, their cached Mordred
descriptors (``mixscent featurize``), the cleaned descriptor matrix the encoder is pretrained on,
and the per-molecule feature vectors (frozen encoder embeddings, cleaned Mordred, or both) the
mixture level reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Batch

from common.errors import DataError, InputError

from .data import blend_molecules, load_gslf, load_pairs
from .features import DescriptorScaler, compute_mordred, graphs_for, load_mordred_cache, mordred_cache_path
from .model import MolEncoder

FEATURE_KINDS = ("embedding", "mordred", "embedding+mordred")


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


@torch.no_grad()
def embed_graphs(encoder: MolEncoder, graphs: list, batch_size: int = 256) -> np.ndarray:
    """``(N, emb_dim)`` float32 embeddings of PyG molecule graphs by ``encoder`` (eval mode, on
    the encoder's device, in batches of ``batch_size``)."""
    encoder.eval()
    device = next(encoder.parameters()).device
    out = [
        encoder(Batch.from_data_list(graphs[s : s + batch_size]).to(device)).detach().cpu()
        for s in range(0, len(graphs), batch_size)
    ]
    return torch.cat(out).numpy()


def encode_molecules(encoder: MolEncoder, smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """``{smiles: embedding (emb_dim,)}`` from a (frozen) encoder."""
    emb = embed_graphs(encoder, graphs_for(smiles))
    return {s: emb[i] for i, s in enumerate(smiles)}


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
