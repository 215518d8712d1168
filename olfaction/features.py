"""Featurisation: canonical SMILES, RDKit molecule graphs, Mordred descriptors (cached), pooled
RDKit descriptors and folded Morgan counts for the baselines.

The Mordred cache lives under :func:`cache_dir` as
``mordred2d_<version>.npz`` (keys ``smiles`` (M,), ``values`` (M, D) float32 with NaN for failed
descriptors, ``columns`` (D,)) plus a ``.json`` with the sha256 of the npz; a cache whose checksum
or layout does not match is rebuilt, never used silently.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rdkit import Chem, RDLogger
from rdkit.Chem import Descriptors, rdFingerprintGenerator

from common.data_dir import cache_dir as _app_cache_dir
from common.errors import InputError
from common.io import atomic_write, sha256_file


def cache_dir() -> Path:
    """``$MOE_APPS_CACHE/olfaction`` (default ``~/.cache/moe-apps/olfaction``)."""
    return _app_cache_dir("olfaction")


RDLogger.DisableLog("rdApp.*")

# ----------------------------------------------------------------------------- SMILES


MAX_SMILES_CHARS = 1000  # odorants are small volatile molecules: GS-LF's longest SMILES has 189 characters


def canonical_smiles(smiles: str, where: str = "") -> str:
    """RDKit canonical SMILES (stereo kept). ``where`` names the position for the error message;
    a SMILES over :data:`MAX_SMILES_CHARS` characters is refused before RDKit parses it."""
    loc = f" at {where}" if where else ""
    if not isinstance(smiles, str) or not smiles.strip():
        raise InputError(f"empty SMILES{loc}")
    if len(smiles) > MAX_SMILES_CHARS:
        raise InputError(f"SMILES {smiles[:20]!r}...{loc} has {len(smiles)} characters; at most {MAX_SMILES_CHARS}")
    mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None:
        raise InputError(f"invalid SMILES {smiles!r}{loc}")
    return Chem.MolToSmiles(mol)


# ----------------------------------------------------------------------------- graphs

_ELEMENTS = ["C", "N", "O", "S", "F", "Cl", "Br", "I", "P", "Si", "B", "Se", "Na", "K"]
_HYB = [
    Chem.rdchem.HybridizationType.SP,
    Chem.rdchem.HybridizationType.SP2,
    Chem.rdchem.HybridizationType.SP3,
    Chem.rdchem.HybridizationType.SP3D,
    Chem.rdchem.HybridizationType.SP3D2,
]
_BONDS = [
    Chem.rdchem.BondType.SINGLE,
    Chem.rdchem.BondType.DOUBLE,
    Chem.rdchem.BondType.TRIPLE,
    Chem.rdchem.BondType.AROMATIC,
]


def _one_hot(value, choices) -> list[float]:
    """One-hot over ``choices`` plus a trailing 'other' slot."""
    out = [0.0] * (len(choices) + 1)
    out[choices.index(value) if value in choices else len(choices)] = 1.0
    return out


def atom_features(atom: Chem.Atom) -> list[float]:
    """Element, degree, formal charge, #H, hybridisation, aromatic, ring, mass/100."""
    return (
        _one_hot(atom.GetSymbol(), _ELEMENTS)
        + _one_hot(atom.GetTotalDegree(), [0, 1, 2, 3, 4, 5])
        + _one_hot(atom.GetFormalCharge(), [-1, 0, 1])
        + _one_hot(atom.GetTotalNumHs(), [0, 1, 2, 3])
        + _one_hot(atom.GetHybridization(), _HYB)
        + [float(atom.GetIsAromatic()), float(atom.IsInRing()), atom.GetMass() / 100.0]
    )


def bond_features(bond: Chem.Bond) -> list[float]:
    """Bond type, conjugated, in ring, has stereo."""
    return _one_hot(bond.GetBondType(), _BONDS) + [
        float(bond.GetIsConjugated()),
        float(bond.IsInRing()),
        float(bond.GetStereo() != Chem.rdchem.BondStereo.STEREONONE),
    ]


ATOM_DIM = len(_ELEMENTS) + 1 + 7 + 4 + 5 + 6 + 3
BOND_DIM = len(_BONDS) + 1 + 3


def mol_graph_arrays(smiles: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The atom graph of one molecule as numpy arrays (RDKit only; the one featuriser of both the
    torch and the ONNX path): ``x (n_atoms, ATOM_DIM)`` float32, ``edge_index (2, 2*n_bonds)``
    int64 (both directions), ``edge_attr (2*n_bonds, BOND_DIM)`` float32."""
    mol = Chem.MolFromSmiles(canonical_smiles(smiles))
    x = np.asarray([atom_features(a) for a in mol.GetAtoms()], dtype=np.float32).reshape(-1, ATOM_DIM)
    src, dst, attr = [], [], []
    for b in mol.GetBonds():
        i, j, f = b.GetBeginAtomIdx(), b.GetEndAtomIdx(), bond_features(b)
        src += [i, j]
        dst += [j, i]
        attr += [f, f]
    edge_index = np.asarray([src, dst], dtype=np.int64).reshape(2, -1)
    edge_attr = np.asarray(attr, dtype=np.float32).reshape(-1, BOND_DIM)
    return x, edge_index, edge_attr


def batch_graph_arrays(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """The graphs of ``U`` molecules stacked as PyG's ``Batch.from_data_list`` does: ``atom_x (N,
    ATOM_DIM)``, ``edge_index (2, E)`` (atom indices offset per molecule), ``edge_attr (E,
    BOND_DIM)``, ``atom_mol (N,)`` int64 (the molecule 0..U-1 of each atom)."""
    graphs = [mol_graph_arrays(s) for s in smiles]
    offsets = np.cumsum([0] + [len(g[0]) for g in graphs[:-1]])
    return {
        "atom_x": np.concatenate([g[0] for g in graphs]),
        "edge_index": np.concatenate([g[1] + o for g, o in zip(graphs, offsets, strict=True)], axis=1),
        "edge_attr": np.concatenate([g[2] for g in graphs]),
        "atom_mol": np.repeat(np.arange(len(graphs), dtype=np.int64), [len(g[0]) for g in graphs]),
    }


def mol_graph(smiles: str):
    """PyG ``Data`` for one molecule: the tensors of :func:`mol_graph_arrays` (``x``,
    ``edge_index``, ``edge_attr``) and ``smiles`` (canonical)."""
    import torch
    from torch_geometric.data import Data

    x, edge_index, edge_attr = (torch.from_numpy(a) for a in mol_graph_arrays(smiles))
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, smiles=canonical_smiles(smiles))


_GRAPHS: dict[str, object] = {}


def graphs_for(smiles: Sequence[str]) -> list:
    """PyG graphs (:func:`mol_graph`) for canonical ``smiles`` (memoised in-process)."""
    out = []
    for s in smiles:
        if s not in _GRAPHS:
            _GRAPHS[s] = mol_graph(s)
        out.append(_GRAPHS[s])
    return out


# ----------------------------------------------------------------------------- Mordred cache


def _mordred_calculator():
    from mordred import Calculator, descriptors

    return Calculator(descriptors, ignore_3D=True)


def _mordred_version() -> str:
    from importlib.metadata import version  # here: importlib.metadata costs the predict path 0.1-0.2 s

    return version("mordredcommunity")


def mordred_cache_path() -> Path:
    return cache_dir() / f"mordred2d_{_mordred_version()}.npz"


def load_mordred_cache(path: Path | None = None) -> tuple[list[str], np.ndarray, list[str]]:
    """Read the cache; returns ``(smiles, values (M, D), columns)``; empty when absent.

    A cache whose checksum sidecar is missing/wrong or whose arrays are inconsistent is reported on
    stderr and treated as absent (so it is rebuilt), never returned."""
    path = path or mordred_cache_path()
    meta = path.with_suffix(".json")
    if not path.exists():
        return [], np.zeros((0, 0), np.float32), []
    try:
        recorded = json.loads(meta.read_text())["sha256"]
        if recorded != sha256_file(path):
            raise ValueError("checksum mismatch")
        with np.load(path, allow_pickle=False) as z:
            smiles, values, columns = list(z["smiles"]), z["values"], list(z["columns"])
        if values.shape != (len(smiles), len(columns)):
            raise ValueError("shape mismatch")
    except Exception as exc:  # corrupt cache: rebuild rather than trust it
        print(f"warning: Mordred cache {path} unusable ({exc}); rebuilding", file=sys.stderr)
        return [], np.zeros((0, 0), np.float32), []
    return [str(s) for s in smiles], values.astype(np.float32), [str(c) for c in columns]


def _save_mordred_cache(path: Path, smiles: list[str], values: np.ndarray, columns: list[str]):
    with atomic_write(path, mode="wb") as fh:
        np.savez(fh, smiles=np.array(smiles), values=values.astype(np.float32), columns=np.array(columns))
    with atomic_write(path.with_suffix(".json"), mode="w") as fh:
        json.dump(
            {"sha256": sha256_file(path), "n": len(smiles), "mordredcommunity": _mordred_version()},
            fh,
        )


def compute_mordred(
    smiles: Iterable[str],
    path: Path | None = None,
    nproc: int | None = None,
    chunk: int = 400,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """Raw 2D Mordred vectors ``(D,)`` (NaN where a descriptor fails) for canonical ``smiles``.

    Missing molecules are computed (in chunks, saved after each chunk so an interrupted run keeps
    its work) and appended to the on-disk cache. One thread at a time reads and extends the cache
    (concurrent demo requests would otherwise interleave its two files and lose rows)."""
    with _MORDRED_LOCK:
        return _compute_mordred(smiles, path, nproc, chunk, progress)


_MORDRED_LOCK = threading.Lock()


def _compute_mordred(smiles, path, nproc, chunk, progress) -> dict[str, np.ndarray]:
    path = path or mordred_cache_path()
    wanted = list(dict.fromkeys(smiles))
    have_smiles, have_values, columns = load_mordred_cache(path)
    index = {s: i for i, s in enumerate(have_smiles)}
    todo = [s for s in wanted if s not in index]
    if todo:
        calc = _mordred_calculator()
        calc_columns = [str(d) for d in calc.descriptors]
        if columns and columns != calc_columns:
            have_smiles, have_values, index = [], np.zeros((0, len(calc_columns)), np.float32), {}
            todo = wanted
        columns = calc_columns
        if have_values.size == 0:
            have_values = np.zeros((0, len(columns)), np.float32)
        if nproc is None:
            # Mordred's pool forks this process; forking while other threads run (a Gradio server,
            # a browser driver, torch's intra-op pool) can leave a child blocked on a lock held at
            # fork time, so only a single-threaded process computes in parallel.
            nproc = max(1, min(2, os.cpu_count() or 1)) if threading.active_count() == 1 else 1
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="Mordred 2D", unit="mol")
        for start in range(0, len(todo), chunk):
            part = todo[start : start + chunk]
            mols = [Chem.MolFromSmiles(s) for s in part]
            frame = calc.pandas(mols, nproc=nproc, quiet=True).fill_missing(np.nan)
            vals = frame.to_numpy(dtype=np.float64)
            vals[~np.isfinite(vals)] = np.nan
            vals = np.clip(vals, -1e30, 1e30).astype(np.float32)
            have_values = np.concatenate([have_values, vals], axis=0)
            for s in part:
                index[s] = len(have_smiles)
                have_smiles.append(s)
            _save_mordred_cache(path, have_smiles, have_values, columns)
            if bar is not None:
                bar.update(len(part))
        if bar is not None:
            bar.close()
    return {s: have_values[index[s]] for s in wanted}


@dataclass
class DescriptorScaler:
    """Cleaning + robust scaling of raw descriptor vectors, fitted on a set of molecules.

    Keeps columns with at most ``max_nan`` NaN fraction and non-zero IQR/variance; imputes the
    median; scales ``(x - median) / iqr`` and clips to ``[-clip, clip]``."""

    keep: np.ndarray  # (D_keep,) int column indices
    median: np.ndarray  # (D_keep,)
    scale: np.ndarray  # (D_keep,)
    columns: list[str]
    clip: float = 6.0

    @classmethod
    def fit(cls, values: np.ndarray, columns: Sequence[str], max_nan: float = 0.1, clip: float = 6.0):
        nan_frac = np.isnan(values).mean(axis=0)
        med = np.nanmedian(np.where(nan_frac[None] < 1, values, 0), axis=0)
        q75 = np.nanpercentile(np.where(nan_frac[None] < 1, values, 0), 75, axis=0)
        q25 = np.nanpercentile(np.where(nan_frac[None] < 1, values, 0), 25, axis=0)
        std = np.nanstd(np.where(nan_frac[None] < 1, values, 0), axis=0)
        iqr = q75 - q25
        scale = np.where(iqr > 1e-8, iqr, std)
        keep = np.where((nan_frac <= max_nan) & (scale > 1e-8))[0]
        return cls(keep, med[keep], scale[keep], [columns[i] for i in keep], clip)

    def transform(self, values: np.ndarray) -> np.ndarray:
        """``values (N, D)`` raw -> ``(N, D_keep)`` float32 cleaned."""
        x = values[:, self.keep].astype(np.float64)
        x = np.where(np.isnan(x), self.median[None], x)
        x = np.clip((x - self.median[None]) / self.scale[None], -self.clip, self.clip)
        return x.astype(np.float32)

    def to_dict(self) -> dict:
        return {
            "keep": self.keep.tolist(),
            "median": self.median.tolist(),
            "scale": self.scale.tolist(),
            "columns": self.columns,
            "clip": self.clip,
        }

    @classmethod
    def from_dict(cls, d: dict) -> DescriptorScaler:
        return cls(
            np.asarray(d["keep"], dtype=np.int64),
            np.asarray(d["median"], dtype=np.float64),
            np.asarray(d["scale"], dtype=np.float64),
            list(d["columns"]),
            float(d["clip"]),
        )


# ----------------------------------------------------------------------------- baseline features

_RDKIT_DESC = [(n, f) for n, f in Descriptors.descList]
_MORGAN = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=512)


_RDKIT_ROWS: dict[str, np.ndarray] = {}


def rdkit_descriptors(smiles: str) -> np.ndarray:
    """The ~200 RDKit 2D descriptors of one molecule, ``(D_rdkit,)`` float32, non-finite -> 0
    (memoised in-process: the set regressors read them twice per molecule; a copy is returned)."""
    if smiles not in _RDKIT_ROWS:
        _RDKIT_ROWS[smiles] = _rdkit_descriptors(smiles)
    return _RDKIT_ROWS[smiles].copy()


def _rdkit_descriptors(smiles: str) -> np.ndarray:
    mol = Chem.MolFromSmiles(smiles)
    out = []
    for _, fn in _RDKIT_DESC:
        try:
            out.append(float(fn(mol)))
        except Exception:
            out.append(0.0)
    arr = np.asarray(out, dtype=np.float64)
    arr[~np.isfinite(arr)] = 0.0
    return np.clip(arr, -1e6, 1e6).astype(np.float32)


def morgan_counts(smiles: str, n_bits: int = 512) -> np.ndarray:
    """Folded radius-2 Morgan count fingerprint ``(n_bits,)`` float32."""
    gen = _MORGAN if n_bits == 512 else rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=n_bits)
    return gen.GetCountFingerprintAsNumPy(Chem.MolFromSmiles(smiles)).astype(np.float32)


def molecule_table(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-molecule features of the pair baselines: RDKit descriptors ++ Morgan counts."""
    return {s: np.concatenate([rdkit_descriptors(s), morgan_counts(s)]) for s in smiles}


def scaled_molecule_table(table: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], DescriptorScaler]:
    """:func:`molecule_table` rows cleaned and robust-scaled (:class:`DescriptorScaler`, fitted
    on exactly these molecules, label-free): the network's view of the RF's features."""
    keys = list(table)
    raw = np.stack([table[k] for k in keys])
    scaler = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])])
    x = scaler.transform(raw)
    return {k: x[i] for i, k in enumerate(keys)}, scaler
