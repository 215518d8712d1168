"""The blend data (``blends/``: pairs of molecules with odour labels of their blend): the blend
molecules, the labelled pairs with the authors' split, and the seeded molecule-disjoint split.

Files are read through :func:`olfaction.data.olf_file` (checked sha256 sums); SMILES are
canonicalised at load time (pairs with an invalid SMILES are dropped)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import DataError, InputError

from .data import LabelData, olf_file
from .features import canonical_smiles


def blend_molecules(data_dir: Path) -> list[str]:
    """Canonical SMILES of the blend molecules (``blends/molecules.csv``; invalid ones skipped)."""
    import pandas as pd

    df = pd.read_csv(olf_file(data_dir, "blends/molecules.csv"), keep_default_na=False)
    if "smiles" not in df.columns:
        raise DataError("blends/molecules.csv lacks the smiles column")
    out = []
    for s in df["smiles"]:
        try:
            out.append(canonical_smiles(s))
        except InputError:
            continue
    return list(dict.fromkeys(out))


def load_blends(data_dir: Path, eval_only: bool = True) -> tuple[LabelData, dict, np.ndarray]:
    """Blend pairs: ``LabelData`` with ``smiles`` = ``(mol_a, mol_b)`` canonical tuples and
    ``y (N, L)`` over the 74 evaluated labels (or all 104); the authors' split dict (indices
    remapped onto the kept rows); ``kept (N,)`` original row indices (pairs with an invalid SMILES
    are dropped)."""
    import pandas as pd

    df = pd.read_csv(olf_file(data_dir, "blends/blend_pairs.csv"), keep_default_na=False)
    vocab = pd.read_csv(olf_file(data_dir, "blends/label_vocabulary.csv"))
    labels = list(vocab.loc[vocab["in_paper_eval_74"] == 1, "label"]) if eval_only else list(vocab["label"])
    col = {lab: j for j, lab in enumerate(labels)}
    cache: dict[str, str | None] = {}

    def can(s: str):
        if s not in cache:
            try:
                cache[s] = canonical_smiles(s)
            except InputError:
                cache[s] = None
        return cache[s]

    pairs, kept, ys = [], [], []
    for i, (a, b, lab) in enumerate(zip(df["mol_a_smiles"], df["mol_b_smiles"], df["labels"], strict=False)):
        ca, cb = can(a), can(b)
        if ca is None or cb is None or ca == cb:
            continue
        row = np.zeros(len(labels), np.float32)
        for t in lab.split(";") if lab else []:
            if t in col:
                row[col[t]] = 1.0
        pairs.append(tuple(sorted((ca, cb))))
        kept.append(i)
        ys.append(row)
    kept_arr = np.asarray(kept)
    remap = -np.ones(len(df), np.int64)
    remap[kept_arr] = np.arange(len(kept_arr))
    split = json.loads(olf_file(data_dir, "blends/splits/authors_2023_v1.json").read_text())
    auth = {k: remap[np.asarray(split[k])] for k in ("training", "testing")}
    auth = {k: v[v >= 0] for k, v in auth.items()}
    return LabelData(pairs, np.stack(ys), labels), auth, kept_arr


@dataclass
class BlendSplit:
    """Row indices into a blend ``LabelData``: ``training``/``validation``/``testing`` and the
    label columns ``labels`` (indices) with positives in both the training and test parts."""

    identifier: str
    training: np.ndarray
    validation: np.ndarray
    testing: np.ndarray
    labels: np.ndarray
    test_molecules: list[str]


def molecule_disjoint_blend_split(
    blends: LabelData, seed: int, test_frac: float = 0.5, val_frac: float = 0.1
) -> BlendSplit:
    """The paper's "carving", seeded: molecules are split ``test_frac`` / rest at random; a pair
    is a test pair when both molecules are test molecules, a training pair when neither is, and
    cross pairs are dropped, so no test molecule occurs in any training pair. Validation is a
    seeded random ``val_frac`` of the training pairs (epoch selection only). Only labels with a
    positive pair in both training and test are evaluated."""
    if not 0 < test_frac < 1 or not 0 <= val_frac < 1:
        raise InputError(f"test_frac must be in (0, 1) and val_frac in [0, 1), got {test_frac}, {val_frac}")
    rng = np.random.default_rng(seed)
    mols = sorted({m for pair in blends.smiles for m in pair})
    test_mols = set(np.asarray(mols)[rng.random(len(mols)) < test_frac].tolist())
    side = np.array([[a in test_mols, b in test_mols] for a, b in blends.smiles])
    test = np.where(side.all(1))[0]
    train = np.where(~side.any(1))[0]
    if len(test) == 0 or len(train) == 0:
        raise DataError("molecule-disjoint blend split is empty on one side (too few molecules)")
    train = train[rng.permutation(len(train))]
    n_val = int(round(val_frac * len(train)))
    val, train = np.sort(train[:n_val]), np.sort(train[n_val:])
    both = (blends.y[train].sum(0) > 0) & (blends.y[test].sum(0) > 0)
    return BlendSplit(f"blends_moldisjoint{seed}", train, val, test, np.where(both)[0], sorted(test_mols))
