"""Set-level pair features for the mixture-distance task.

The RF baseline sees two mixtures only through their mean descriptor vectors, so it cannot tell
how many components the mixtures share, nor how far apart the components that differ are. Those
are what the psychophysics varies (Bushdid 2014: overlap of 10/20/30-component mixtures; Snitz
2013: angle between summed descriptor vectors). This module computes, for a pair ``(A, B)`` of
component sets, all symmetric in ``A <-> B``:

- the RF baseline's features (:func:`pair_features`): absolute difference and sum of the two
  mixture-mean molecule rows;
- overlap: shared count, Jaccard, shared / min size, min / max size, size gap, size sum;
- set distances in several molecule spaces (scaled RDKit 2D and cleaned Mordred with Euclidean
  cost, binary Morgan 2048 with Tanimoto cost): chamfer distance, optimal one-to-one matching
  cost (``scipy.optimize.linear_sum_assignment``), distance of the mean vectors, angle distance
  of the summed vectors (Snitz) and mean pairwise cost;
- the same set distances between the components that differ (``A \\ B`` vs ``B \\ A``), plus the
  number and fractions of differing components;
- target encodings (:class:`TargetEncoder`): smoothed mean distance of the *training* pairs a
  mixture / its molecules occur in, out-of-fold for training rows; optionally the common-partner
  features of a pair (a third mixture ``C`` whose distances to both ``A`` and ``B`` were measured
  bounds ``d(A, B)`` between ``|d(A, C) - d(B, C)|`` and ``d(A, C) + d(B, C)``).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from common.errors import InputError

from .features import (
    DescriptorScaler,
    compute_mordred,
    morgan_counts,
    rdkit_descriptors,
    scaled_molecule_table,
)

Mixture = tuple[str, ...]
SET_DISTANCES = ("chamfer", "matching", "mean_gap", "angle", "mean_pairwise")
OVERLAP = ("shared", "jaccard", "shared_over_min", "n_min", "n_max", "n_gap", "n_sum")
DIFFERENCE = ("n_differ", "frac_differ", "max_frac_differ")


def mixture_mean(components: Sequence[str], table: dict[str, np.ndarray]) -> np.ndarray:
    return np.mean([table[s] for s in components], axis=0)


def pair_features(mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], table: dict[str, np.ndarray]) -> np.ndarray:
    """The RF's symmetric features ``(P, 2D)``: ``[|m_a - m_b| ; m_a + m_b]`` of the mixture-mean
    rows of ``table`` (:func:`olfaction.features.molecule_table`)."""
    ma = np.stack([mixture_mean(m, table) for m in mix_a])
    mb = np.stack([mixture_mean(m, table) for m in mix_b])
    return np.concatenate([np.abs(ma - mb), ma + mb], axis=1)


def cost_matrix(Xa: np.ndarray, Xb: np.ndarray, metric: str) -> np.ndarray:
    """``(na, nb)`` costs between molecule rows: ``euclidean`` or ``tanimoto`` (binary rows)."""
    if metric == "tanimoto":
        inter = Xa @ Xb.T
        union = Xa.sum(1)[:, None] + Xb.sum(1)[None, :] - inter
        return 1.0 - inter / np.maximum(union, 1e-9)
    if metric == "euclidean":
        return np.sqrt(np.maximum(((Xa[:, None, :] - Xb[None, :, :]) ** 2).sum(-1), 0.0))
    raise ValueError(f"unknown metric {metric!r}")


@functools.cache
def assignment_solver():
    """SciPy's ``scipy.optimize.linear_sum_assignment`` (the same compiled function), loaded from
    its extension module ``scipy/optimize/_lsap`` without running the ``scipy.optimize`` package
    import (0.7-1 s, most of the torch-free ``mixscent predict``'s budget); the plain import where
    that module is not found or does not load."""
    try:
        import scipy

        folder = Path(scipy.__file__).parent / "optimize"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if (folder / f"_lsap{suffix}").is_file():
                loader = importlib.machinery.ExtensionFileLoader("scipy.optimize._lsap", str(folder / f"_lsap{suffix}"))
                module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
                loader.exec_module(module)
                return module.linear_sum_assignment
    except (ImportError, OSError, AttributeError):
        pass
    from scipy.optimize import linear_sum_assignment as solve

    return solve


def set_distances(Xa: np.ndarray, Xb: np.ndarray, metric: str) -> list[float]:
    """:data:`SET_DISTANCES` between two sets of molecule rows ``Xa (na, D)``, ``Xb (nb, D)``."""
    cost = cost_matrix(Xa, Xb, metric)
    rows, cols = assignment_solver()(cost)
    sa, sb = Xa.sum(0), Xb.sum(0)
    cos = float(sa @ sb / (np.linalg.norm(sa) * np.linalg.norm(sb) + 1e-12))
    return [
        0.5 * float(cost.min(1).mean() + cost.min(0).mean()),
        float(cost[rows, cols].mean()),
        float(np.linalg.norm(Xa.mean(0) - Xb.mean(0))),
        1.0 - cos,
        float(cost.mean()),
    ]


def overlap_features(a: Mixture, b: Mixture) -> list[float]:
    """:data:`OVERLAP` of two component sets."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        raise InputError("set features: empty mixture")
    shared, na, nb = len(sa & sb), len(sa), len(sb)
    return [
        shared,
        shared / len(sa | sb),
        shared / min(na, nb),
        min(na, nb),
        max(na, nb),
        abs(na - nb),
        na + nb,
    ]


class MoleculeSpaces:
    """Per-molecule tables of the spaces the set distances use, fitted label-free on exactly the
    molecules given: ``rdkit`` (cleaned, robust-scaled RDKit 2D; Euclidean), ``morgan`` (binary
    Morgan 2048; Tanimoto), ``mordred`` (cleaned, scaled Mordred 2D; Euclidean; from the cache)."""

    METRICS = {"rdkit": "euclidean", "morgan": "tanimoto", "mordred": "euclidean"}

    def __init__(
        self,
        smiles: Sequence[str],
        mordred: dict[str, np.ndarray] | None = None,
        progress: bool = False,
        scalers: dict[str, DescriptorScaler] | None = None,
    ):
        """``scalers`` (``{"rdkit", "mordred"}``, the :attr:`scalers` of an earlier instance) scale
        these molecules as that instance did (new molecules at prediction time); None fits them on
        exactly ``smiles``."""
        smiles = sorted(set(smiles))
        self.tables: dict[str, dict[str, np.ndarray]] = {}
        rdkit = {s: rdkit_descriptors(s) for s in smiles}
        mordred = mordred if mordred is not None else compute_mordred(smiles, progress=progress)
        raw = np.stack([mordred[s] for s in smiles])
        if scalers is None:
            self.tables["rdkit"], rdkit_scaler = scaled_molecule_table(rdkit)
            mordred_scaler = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])])
        else:
            rdkit_scaler, mordred_scaler = scalers["rdkit"], scalers["mordred"]
            x = rdkit_scaler.transform(np.stack([rdkit[s] for s in smiles]))
            self.tables["rdkit"] = {s: x[i] for i, s in enumerate(smiles)}
        self.scalers = {"rdkit": rdkit_scaler, "mordred": mordred_scaler}
        self.tables["morgan"] = {s: (morgan_counts(s, 2048) > 0).astype(np.float64) for s in smiles}
        self.tables["mordred"] = dict(zip(smiles, mordred_scaler.transform(raw).astype(np.float64), strict=True))

    def rows(self, space: str, mixture: Sequence[str]) -> np.ndarray:
        table = self.tables[space]
        missing = [s for s in mixture if s not in table]
        if missing:
            raise InputError(f"set features: no descriptors for molecule {missing[0]!r}")
        return np.stack([table[s] for s in mixture])


def set_feature_names() -> list[str]:
    names = list(OVERLAP)
    for space in MoleculeSpaces.METRICS:
        names += [f"{space}_{d}" for d in SET_DISTANCES]
    names += list(DIFFERENCE)
    for space in MoleculeSpaces.METRICS:
        names += [f"{space}_differ_{d}" for d in SET_DISTANCES]
    return names


def pair_set_features(
    mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], spaces: MoleculeSpaces
) -> np.ndarray:
    """``(P, K)`` symmetric set features (:func:`set_feature_names`) of ``P`` mixture pairs.
    Differing-component distances are 0 when one side has no component the other lacks. Each
    side's components are sorted and the two sides put in a fixed order first, so the features are
    exactly (bitwise) invariant to component order and to swapping the sides."""
    out = []
    for a_in, b_in in zip(mix_a, mix_b, strict=True):
        a, b = sorted([tuple(sorted(set(a_in))), tuple(sorted(set(b_in)))])
        row = overlap_features(a, b)
        for space, metric in MoleculeSpaces.METRICS.items():
            row += set_distances(spaces.rows(space, a), spaces.rows(space, b), metric)
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        na, nb = len(set(a)), len(set(b))
        row += [
            len(only_a) + len(only_b),
            (len(only_a) + len(only_b)) / (na + nb),
            max(len(only_a) / na, len(only_b) / nb),
        ]
        for space, metric in MoleculeSpaces.METRICS.items():
            if only_a and only_b:
                row += set_distances(spaces.rows(space, only_a), spaces.rows(space, only_b), metric)
            else:
                row += [0.0] * len(SET_DISTANCES)
        out.append(row)
    return np.asarray(out, dtype=np.float64)


class TargetEncoder:
    """Smoothed target encodings of mixtures and molecules from training pairs.

    ``enc(mixture) = (sum of y over training pairs containing it + m * mean y) / (count + m)``,
    keyed by the set of components; a molecule's encoding is the same over the pairs whose either
    side contains it, and a mixture's molecule encoding is the mean over its components. Features
    of a pair ``(A, B)``, symmetric: ``[e_A + e_B, |e_A - e_B|, min(count_A, count_B),
    mol_A + mol_B, |mol_A - mol_B|]``.

    With ``partners=True`` five common-partner features follow (:data:`PARTNER_FEATURES`): over the
    mixtures ``C`` (other than ``A`` and ``B``) with a training distance to both ``A`` and ``B``
    (replicates averaged), their count, the mean and max of ``|d(A, C) - d(B, C)|`` (lower bounds of
    ``d(A, B)`` were it a metric), the min of ``d(A, C) + d(B, C)`` (an upper bound) and an
    indicator that at least one exists; without one they are ``[0, 0, 0, 2 * mean y, 0]``.

    Training rows are encoded out-of-fold (``folds`` seeded folds of the training rows), so a
    row's own label never enters its features."""

    BASE_FEATURES = 5
    PARTNER_FEATURES = ("n_partners", "partner_gap_mean", "partner_gap_max", "partner_sum_min", "has_partner")

    def __init__(self, smoothing: float = 2.0, folds: int = 5, seed: int = 0, partners: bool = False):
        if folds < 2:
            raise InputError(f"target encoding needs folds >= 2, got {folds}")
        self.smoothing, self.folds, self.seed, self.partners = smoothing, folds, seed, partners

    @property
    def n_features(self) -> int:
        return self.BASE_FEATURES + (len(self.PARTNER_FEATURES) if self.partners else 0)

    @staticmethod
    def _sums(mix_a, mix_b, y):
        mix_sum, mix_n = defaultdict(float), defaultdict(int)
        mol_sum, mol_n = defaultdict(float), defaultdict(int)
        edges = defaultdict(lambda: defaultdict(list))  # mixture -> partner mixture -> distances
        for a, b, t in zip(mix_a, mix_b, y, strict=True):
            ka, kb = frozenset(a), frozenset(b)
            for key in {ka, kb}:
                mix_sum[key] += t
                mix_n[key] += 1
            for m in set(a) | set(b):
                mol_sum[m] += t
                mol_n[m] += 1
            if ka != kb:
                edges[ka][kb].append(t)
                edges[kb][ka].append(t)
        return mix_sum, mix_n, mol_sum, mol_n, edges

    def _partner_features(self, edges, prior: float, ka: frozenset, kb: frozenset) -> list[float]:
        near_a, near_b = edges.get(ka, {}), edges.get(kb, {})
        common = [c for c in near_a if c in near_b and c != ka and c != kb]
        if not common:
            return [0.0, 0.0, 0.0, 2.0 * prior, 0.0]
        da = np.array([np.mean(near_a[c]) for c in common])
        db = np.array([np.mean(near_b[c]) for c in common])
        gap = np.abs(da - db)
        return [float(len(common)), float(gap.mean()), float(gap.max()), float((da + db).min()), 1.0]

    def _encode(self, stats, prior: float, mix_a, mix_b) -> np.ndarray:
        mix_sum, mix_n, mol_sum, mol_n, edges = stats
        m = self.smoothing

        def mix(x):
            k = frozenset(x)
            return (mix_sum.get(k, 0.0) + m * prior) / (mix_n.get(k, 0) + m), mix_n.get(k, 0)

        def mol(x):
            return float(np.mean([(mol_sum.get(s, 0.0) + m * prior) / (mol_n.get(s, 0) + m) for s in x]))

        out = []
        for a, b in zip(mix_a, mix_b, strict=True):
            (ea, ca), (eb, cb) = mix(a), mix(b)
            ma, mb = mol(a), mol(b)
            row = [ea + eb, abs(ea - eb), min(ca, cb), ma + mb, abs(ma - mb)]
            if self.partners:
                row += self._partner_features(edges, prior, frozenset(a), frozenset(b))
            out.append(row)
        return np.asarray(out, dtype=np.float64).reshape(-1, self.n_features)

    def fit(self, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], y: np.ndarray) -> TargetEncoder:
        """Remember the training pairs ``(mix_a[i], mix_b[i], y[i])``."""
        y = np.asarray(y, dtype=np.float64)
        if len(y) < self.folds:
            raise InputError(f"target encoding needs at least {self.folds} training pairs, got {len(y)}")
        if not np.all(np.isfinite(y)):
            raise InputError("target encoding: non-finite training distance")
        self.mix_a_, self.mix_b_, self.y_ = list(mix_a), list(mix_b), y
        self.prior_ = float(y.mean())
        self.stats_ = self._sums(self.mix_a_, self.mix_b_, y)
        return self

    def transform(self, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture]) -> np.ndarray:
        """``(P, n_features)`` encodings of new pairs from all training pairs."""
        return self._encode(self.stats_, self.prior_, mix_a, mix_b)

    def fit_transform(self, mix_a: Sequence[Mixture], mix_b: Sequence[Mixture], y: np.ndarray) -> np.ndarray:
        """Fit, then ``(N, n_features)`` out-of-fold encodings of the training pairs themselves."""
        self.fit(mix_a, mix_b, y)
        n = len(self.y_)
        fold_of = np.empty(n, dtype=np.int64)
        fold_of[np.random.default_rng(self.seed).permutation(n)] = np.arange(n) % self.folds
        out = np.zeros((n, self.n_features))
        for k in range(self.folds):
            inside, rest = np.flatnonzero(fold_of == k), np.flatnonzero(fold_of != k)
            stats = self._sums([self.mix_a_[i] for i in rest], [self.mix_b_[i] for i in rest], self.y_[rest])
            prior = float(self.y_[rest].mean())
            out[inside] = self._encode(
                stats, prior, [self.mix_a_[i] for i in inside], [self.mix_b_[i] for i in inside]
            )
        return out
