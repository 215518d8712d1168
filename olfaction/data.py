"""Loading and validation of the olfaction data: mixtures, mixture pairs, POMMix split JSONs,
GS-LF single-molecule labels, the blend molecules (their labelled pairs:
``experiments/olfaction/blends.py``).

All files are read through :func:`common.data_dir.require_file` with the sha256 sums published in
``shared/data/README.md``; SMILES are canonicalised with RDKit at load time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.data_dir import require_file
from common.errors import DataError, InputError

from .features import canonical_smiles

# pandas is imported inside the table loaders: validating a mixture (the predict path) does not need it

SHA256 = {
    "gs_lf.csv": "0c18b6e9f0f99b772203ba4da30a96b3d60db700349376cbafe23512a9baa704",
    "mixture_definitions.csv": "72ff4367eb6c36f79858359b0ef3d4992c73f887be043e643464547c5edde08a",
    "mixture_pairs.csv": "85fffe5a8124401a9ed0fa6de43f7c3a79f3454e9e446d77e3411a4b770de732",
    "pommix_performance_metrics.csv": "26a3835c8aee3d2cd53221d08330f598dea82874f5310a3815e5220c7adb381e",
    "blends/blend_pairs.csv": "a31a706775c1d6706dbf7de0b778c2fb66438c6c62c2aabf9d42cc469dabac60",
    "blends/label_vocabulary.csv": "9423fc91686319247bf6a5e4472dc856f8b0a1a6f2b7bcb59f21f897c7ed53f4",
    "blends/molecules.csv": "b0c468a7402351cf6a99f471250a6ac466434f16b3e909d7a6d9da2ca35576a5",
    "blends/reference_pair_auroc_per_label.csv": "481d8eea3194f52fd0008dd687182cdd20b74b020bb36b72e5304c9adb03741d",
    "blends/splits/authors_2023_v1.json": "aa99812391afdf78f1ba41931f89228bbc4eab49ead0acf713eac8ecdd110c6b",
}

SUBDIR = "olfaction"
MixtureKey = tuple[str, str]  # (dataset, mixture label)
# Components per mixture: the largest DREAM mixture has 43. The mixture level is a fully connected
# graph (C^2 edges per mixture) and the set features compare every component pair of a pair, so a
# 10,000-component mixture would need tens of GB; larger mixtures are refused at the boundary.
MAX_COMPONENTS = 100


def olf_file(data_dir: Path, name: str) -> Path:
    """Checked path of ``olfaction/<name>`` inside ``data_dir`` (DataError when missing/corrupt)."""
    return require_file(Path(data_dir), f"{SUBDIR}/{name}", SHA256.get(name))


def _label(value) -> str:
    """Mixture labels appear as ``1``, ``1.0`` or ``'1'``: normalise to ``'1'``."""
    if isinstance(value, str):
        value = value.strip()
        try:
            f = float(value)
        except ValueError:
            return value
    else:
        f = float(value)
    return str(int(f)) if float(f).is_integer() else str(f)


def validate_mixture(components: Sequence[str], where: str = "mixture") -> tuple[str, ...]:
    """Canonical, validated component tuple (sorted, so the mixture is a set).

    Raises InputError for an empty mixture, an invalid SMILES (naming it and its position) and a
    duplicate component (two entries with the same canonical SMILES), a component that is not a
    string, and more than :data:`MAX_COMPONENTS` components (checked before any SMILES is parsed)."""
    if isinstance(components, str):
        raise InputError(f"{where}: expected a list of SMILES, got one string (split it on ';')")
    components = list(components)
    if len(components) > MAX_COMPONENTS:
        raise InputError(f"{where} has {len(components)} components; at most {MAX_COMPONENTS} are supported")
    for pos, c in enumerate(components):
        if not isinstance(c, str):
            raise InputError(f"{where} component {pos + 1}: expected a SMILES string, got {type(c).__name__}")
    items = [c.strip() for c in components if c.strip()]
    if not items:
        raise InputError(f"empty mixture: {where} has no components")
    seen: dict[str, int] = {}
    for pos, smi in enumerate(items):
        can = canonical_smiles(smi, where=f"{where} component {pos + 1}")
        if can in seen:
            raise InputError(
                f"duplicate component {smi!r} in {where} (positions {seen[can] + 1} and {pos + 1})"
            )
        seen[can] = pos
    return tuple(sorted(seen))


def parse_mixture_text(text: str, where: str = "mixture") -> tuple[str, ...]:
    """``'CCO;CC(=O)O'`` (``;``-separated SMILES) -> validated canonical tuple."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"empty mixture: {where} has no components")
    if "\x00" in text:
        raise InputError(f"{where} contains a NUL byte")
    if text.count(";") >= MAX_COMPONENTS:  # before splitting a huge text
        raise InputError(f"{where} has {text.count(';') + 1} components; at most {MAX_COMPONENTS} are supported")
    return validate_mixture(text.split(";"), where=where)


def load_mixtures(data_dir: Path) -> dict[MixtureKey, tuple[str, ...]]:
    """``{(dataset, label): canonical components}`` from ``mixture_definitions.csv`` (760)."""
    import pandas as pd

    df = pd.read_csv(olf_file(data_dir, "mixture_definitions.csv"))
    smi_cols = [c for c in df.columns if c.startswith("smi_")]
    if not {"Dataset", "Mixture Label"} <= set(df.columns) or not smi_cols:
        raise DataError("mixture_definitions.csv lacks Dataset / Mixture Label / smi_* columns")
    out: dict[MixtureKey, tuple[str, ...]] = {}
    for row in df.itertuples(index=False):
        key = (str(row[df.columns.get_loc("Dataset")]), _label(row[df.columns.get_loc("Mixture Label")]))
        comps = [row[df.columns.get_loc(c)] for c in smi_cols]
        comps = [c for c in comps if isinstance(c, str) and c.strip()]
        out[key] = validate_mixture(comps, where=f"mixture {key[0]}/{key[1]}")
    return out


@dataclass
class PairData:
    """Mixture pairs: ``keys_a``/``keys_b`` (P,) mixture keys, ``y`` (P,) distance in [0, 1]."""

    dataset: list[str]
    keys_a: list[MixtureKey]
    keys_b: list[MixtureKey]
    y: np.ndarray
    mixtures: dict[MixtureKey, tuple[str, ...]]

    def __len__(self) -> int:
        return len(self.y)

    @property
    def self_pair(self) -> np.ndarray:
        """(P,) bool: both sides have identical components."""
        return np.array(
            [self.mixtures[a] == self.mixtures[b] for a, b in zip(self.keys_a, self.keys_b, strict=False)]
        )

    def sides(self) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        """``(mix_a, mix_b)``: the component tuples of every pair's first and second mixture."""
        return [self.mixtures[k] for k in self.keys_a], [self.mixtures[k] for k in self.keys_b]

    def molecules(self, rows: Sequence[int] | None = None) -> set[str]:
        rows = range(len(self)) if rows is None else rows
        out: set[str] = set()
        for i in rows:
            out |= set(self.mixtures[self.keys_a[i]]) | set(self.mixtures[self.keys_b[i]])
        return out


def load_pairs(data_dir: Path) -> PairData:
    """The 865 mixture pairs; DataError for an unknown mixture label or a bad distance value."""
    mixtures = load_mixtures(data_dir)
    import pandas as pd

    df = pd.read_csv(olf_file(data_dir, "mixture_pairs.csv"))
    need = {"Dataset", "Mixture 1", "Mixture 2", "Experimental Values"}
    if not need <= set(df.columns):
        raise DataError(f"mixture_pairs.csv lacks columns {sorted(need - set(df.columns))}")
    ka, kb = [], []
    for i, row in enumerate(df.itertuples(index=False)):
        for _side, col, dest in (("1", row[1], ka), ("2", row[2], kb)):
            key = (str(row[0]), _label(col))
            if key not in mixtures:
                raise DataError(
                    f"mixture_pairs.csv row {i}: unknown mixture label {key[1]!r} in dataset {key[0]!r}"
                )
            dest.append(key)
    y = df["Experimental Values"].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise DataError("mixture_pairs.csv has non-finite Experimental Values")
    return PairData(list(df["Dataset"].astype(str)), ka, kb, y.astype(np.float32), mixtures)


def resolve_mixture(mixtures: dict[MixtureKey, tuple[str, ...]], dataset: str, label) -> tuple[str, ...]:
    """Components of a named mixture; InputError naming an unknown label."""
    key = (str(dataset), _label(label))
    if key not in mixtures:
        raise InputError(f"unknown mixture label {key[1]!r} in dataset {key[0]!r}")
    return mixtures[key]


# ----------------------------------------------------------------------------- splits


DATASETS = ["Bushdid", "Ravia 1", "Ravia 2", "Ravia 4", "Snitz 1", "Snitz 2", "Snitz 3"]


def dataset_one_hot(datasets: Sequence[str], vocabulary: Sequence[str] = DATASETS) -> np.ndarray:
    """``(P, V)`` float32 one-hot of each pair's experiment over ``vocabulary`` (the network reads it
    over :data:`DATASETS`, the set regressors over their training vocabulary); InputError names an
    unknown dataset."""
    index = {d: i for i, d in enumerate(vocabulary)}
    unknown = [d for d in datasets if d not in index]
    if unknown:
        raise InputError(f"unknown dataset {unknown[0]!r} (known: {', '.join(vocabulary)})")
    out = np.zeros((len(datasets), len(vocabulary)), np.float32)
    out[np.arange(len(datasets)), np.array([index[d] for d in datasets], np.int64)] = 1.0
    return out


@dataclass
class Split:
    """A POMMix split: row indices (0-based into the pairs file) for train/validation/test."""

    identifier: str
    training: np.ndarray
    validation: np.ndarray
    testing: np.ndarray
    removed_smiles: list[list[str]] = field(default_factory=list)


def _indices(obj: dict, key: str, n_rows: int, src: str, required: bool = True) -> np.ndarray:
    if key not in obj:
        if required:
            raise DataError(f"split {src} lacks key {key!r}")
        return np.zeros(0, dtype=np.int64)
    vals = obj[key]
    if not isinstance(vals, list):
        raise DataError(f"split {src}: {key!r} must be a list of integer row indices, got {type(vals).__name__}")
    for pos, v in enumerate(vals):
        if not isinstance(v, int) or isinstance(v, bool):
            raise DataError(f"split {src}: {key}[{pos}] is {v!r}; expected an integer row index")
    arr = np.asarray(vals, dtype=np.int64)
    bad = arr[(arr < 0) | (arr >= n_rows)]
    if bad.size:
        raise DataError(f"split {src}: {key} index {int(bad[0])} out of range [0, {n_rows})")
    if len(np.unique(arr)) != len(arr):
        raise DataError(f"split {src}: {key!r} has repeated indices")
    return arr


def load_split(path: str | Path, n_rows: int, require_validation: bool = True) -> Split:
    """Read and validate a split JSON (keys ``identifier``, ``training``, ``validation``,
    ``testing``, optional ``removed_smiles``). Indices must be ints in ``[0, n_rows)`` and the three
    parts disjoint."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"split file not found: {path}")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"split {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"split {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise DataError(f"split {path} is nested too deeply to be a split") from None
    src = str(path)
    if not isinstance(obj, dict):
        raise DataError(f"split {src} must be a JSON object with training / validation / testing, got "
                        f"{type(obj).__name__}")
    tr = _indices(obj, "training", n_rows, src)
    va = _indices(obj, "validation", n_rows, src, required=require_validation)
    te = _indices(obj, "testing", n_rows, src)
    for a, b, na, nb in (
        (tr, va, "training", "validation"),
        (tr, te, "training", "testing"),
        (va, te, "validation", "testing"),
    ):
        inter = np.intersect1d(a, b)
        if inter.size:
            raise DataError(f"split {src}: row {int(inter[0])} is in both {na} and {nb}")
    if len(tr) == 0 or len(te) == 0:
        raise DataError(f"split {src}: training and testing must be non-empty")
    identifier = obj.get("identifier", path.stem)
    if not isinstance(identifier, (str, int)) or isinstance(identifier, bool):
        raise DataError(f"split {src}: 'identifier' must be a string, got {type(identifier).__name__}")
    removed = obj.get("removed_smiles", [])
    if not isinstance(removed, list) or not all(
        isinstance(group, list) and all(isinstance(m, str) for m in group) for group in removed
    ):
        raise DataError(f"split {src}: 'removed_smiles' must be a list of lists of SMILES strings")
    return Split(str(identifier), tr, va, te, removed)


def split_path(data_dir: Path, name: str) -> Path:
    """``olfaction/splits/<name>.json`` (no checksum: splits are many small files). ``name`` is a
    name (letters, digits, ``_``, ``-``), never a path: InputError otherwise."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", name):
        raise InputError(f"split name {name!r} is not a name (letters, digits, '_' and '-'; a split file "
                         "is given by a path ending in .json)")
    return require_file(Path(data_dir), f"{SUBDIR}/splits/{name}.json")


def strict_molecule_split(
    pairs: PairData, seed: int, test_frac: float = 0.15, val_frac: float = 0.12
) -> Split:
    """A strict leave-molecules-out split: molecules are drawn (seeded) until the pairs containing
    any of them make up ``test_frac`` of the rows; those pairs are the test set and no test
    molecule occurs in any training or validation pair. Validation is a random part of the rest."""
    rng = np.random.default_rng(seed)
    mols = sorted(pairs.molecules())
    order = rng.permutation(len(mols))
    rows_mols = [
        set(pairs.mixtures[a]) | set(pairs.mixtures[b])
        for a, b in zip(pairs.keys_a, pairs.keys_b, strict=False)
    ]
    held: set[str] = set()
    test = np.zeros(len(pairs), bool)
    for i in order:
        cand = held | {mols[i]}
        cand_test = np.array([bool(r & cand) for r in rows_mols])
        if cand_test.mean() > test_frac * 1.25:
            continue  # this molecule alone would take too many pairs: skip it
        held, test = cand, cand_test
        if test.mean() >= test_frac:
            break
    rest = np.where(~test)[0]
    rest = rest[rng.permutation(len(rest))]
    n_val = int(round(val_frac * len(rest)))
    return Split(
        f"strict_lmo{seed}",
        np.sort(rest[n_val:]),
        np.sort(rest[:n_val]),
        np.where(test)[0],
        [[m] for m in sorted(held)],
    )


# ----------------------------------------------------------------------------- labels


@dataclass
class LabelData:
    """Single-molecule (or blend) multi-label targets: ``smiles`` (N,) canonical (for blends
    ``smiles`` holds ``(a, b)`` tuples), ``y (N, L)`` {0,1} float32, ``labels`` (L,) names."""

    smiles: list
    y: np.ndarray
    labels: list[str]


def load_gslf(data_dir: Path) -> LabelData:
    """GS-LF: 4,983 molecules x 138 odour descriptors (rows whose SMILES fail are dropped)."""
    import pandas as pd

    df = pd.read_csv(olf_file(data_dir, "gs_lf.csv"))
    if "nonStereoSMILES" not in df.columns:
        raise DataError("gs_lf.csv lacks the nonStereoSMILES column")
    label_cols = [c for c in df.columns if c not in ("nonStereoSMILES", "descriptors")]
    smiles, rows = [], []
    seen = set()
    for i, s in enumerate(df["nonStereoSMILES"]):
        try:
            can = canonical_smiles(s)
        except InputError:
            continue
        if can in seen:
            continue
        seen.add(can)
        smiles.append(can)
        rows.append(i)
    y = df.loc[rows, label_cols].to_numpy(dtype=np.float32)
    return LabelData(smiles, y, label_cols)


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
