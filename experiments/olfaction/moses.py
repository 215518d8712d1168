"""MOSES unlabeled corpus for encoder pretraining (``experiments.olfaction.corpus_curve``; it did
not pay, docs/experiments.md, so it is not in the product): locate ``molsets``' ``train.csv.gz`` (without
importing ``moses``), filter it to small, odorant-like organic molecules, and draw a seeded subset.

Its Mordred descriptors are cached apart from the olfaction cache, at
``cache_dir()/moses_mordred2d_<version>.npz`` (same layout, checksum and resumable chunks as
:func:`olfaction.features.compute_mordred`), keyed by canonical SMILES.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

import numpy as np
from rdkit import Chem

from common.errors import DataError
from olfaction.features import cache_dir, compute_mordred

# Elements of odorants; MOSES is already restricted to C N S O F Cl Br H.
_ALLOWED = {"C", "N", "O", "S", "F", "Cl", "Br"}
MAX_HEAVY_ATOMS = 21  # odorants are small (GS-LF median ~11 heavy atoms, max ~30)


def moses_train_path() -> Path:
    """Path of MOSES' ``train.csv.gz`` inside the installed ``molsets`` package.

    Raises ``DataError`` naming the install command when ``molsets`` is not installed."""
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("MOSES corpus needs the molsets package: pip install --no-deps molsets")
    path = Path(list(spec.submodule_search_locations)[0]) / "dataset" / "data" / "train.csv.gz"
    if not path.exists():
        raise DataError(
            f"molsets is installed but {path} is missing; reinstall: pip install --no-deps molsets"
        )
    return path


def moses_mordred_path() -> Path:
    return cache_dir() / f"moses_mordred2d_{version('mordredcommunity')}.npz"


def _keep(smiles: str) -> str | None:
    """Canonical SMILES of an acceptable molecule (neutral, allowed elements, <= MAX_HEAVY_ATOMS),
    else None."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumHeavyAtoms() > MAX_HEAVY_ATOMS:
        return None
    if any(a.GetSymbol() not in _ALLOWED or a.GetFormalCharge() != 0 for a in mol.GetAtoms()):
        return None
    return Chem.MolToSmiles(mol)


def moses_subset(
    n: int, seed: int = 0, path: Path | None = None, exclude: set[str] | None = None
) -> list[str]:
    """``n`` canonical SMILES drawn from MOSES train after filtering, deterministic in ``seed``.

    Nested in ``n``: the first ``k`` of ``moses_subset(n)`` equal ``moses_subset(k)`` for the same
    seed, so a corpus-size curve reuses cached descriptors. ``exclude`` (canonical SMILES, e.g.
    the olfaction molecules) are skipped."""
    import pandas as pd

    if n < 0:
        raise ValueError(f"extra corpus size must be >= 0, got {n}")
    if n == 0:
        return []
    path = path or moses_train_path()
    try:
        frame = pd.read_csv(path, usecols=["SMILES"])
    except Exception as exc:
        raise DataError(f"cannot read MOSES file {path}: {exc}") from exc
    raw = frame["SMILES"].astype(str).to_numpy()
    order = np.random.default_rng(seed).permutation(len(raw))
    exclude = exclude or set()
    out: list[str] = []
    seen: set[str] = set()
    for i in order:
        can = _keep(raw[i])
        if can is None or can in exclude or can in seen:
            continue
        seen.add(can)
        out.append(can)
        if len(out) == n:
            break
    if len(out) < n:
        raise DataError(f"MOSES file {path} has only {len(out)} molecules passing the filter (asked {n})")
    return out


def moses_descriptors(smiles: list[str], progress: bool = True, nproc: int = 1) -> dict[str, np.ndarray]:
    """Raw Mordred 2D vectors ``(D,)`` for canonical ``smiles`` (as :func:`moses_subset` returns
    them), computed once into the MOSES cache."""
    return compute_mordred(smiles, path=moses_mordred_path(), nproc=nproc, progress=progress)
