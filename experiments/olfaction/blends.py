"""The blend data of the label experiments (``blends/``: pairs of molecules with odour labels of
their blend): the labelled pairs with the authors' split, the seeded molecule-disjoint split and
multi-label stratified folds, order-free pair features and the multi-label logistic-regression
baseline (``label_bench``, ``odour_transfer``, ``variant_bench``, ``blend_pretrain``).

Files are read through :func:`olfaction.data.olf_file` (checked sha256 sums); SMILES are
canonicalised at load time (pairs with an invalid SMILES are dropped)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from common.errors import DataError, InputError
from olfaction.data import LabelData, olf_file
from olfaction.features import canonical_smiles


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


def multilabel_stratified_kfold(y: np.ndarray, n_folds: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Iterative stratification (Sechidis et al. 2011) of a multi-label matrix ``y (N, L)``
    into ``n_folds`` disjoint test folds (arrays of row indices, covering every row once).

    Rarest label first: each of its unassigned rows goes to the fold that still wants most of that
    label (ties: the fold that wants most rows overall, then a seeded random choice), so every
    label's positives are spread as evenly as the counts allow. Rows without any label fill the
    folds that want most rows."""
    y = np.asarray(y) > 0
    n, n_labels = y.shape
    if n_folds < 2 or n_folds > n:
        raise ValueError(f"n_folds must be in [2, {n}], got {n_folds}")
    rng = np.random.default_rng(seed)
    want_rows = np.full(n_folds, n / n_folds)
    want_label = np.tile(y.sum(0) / n_folds, (n_folds, 1))  # (K, L)
    fold_of = -np.ones(n, np.int64)
    remaining = y.copy()
    while True:
        counts = remaining.sum(0)
        if not counts.any():
            break
        label = int(np.where(counts > 0, counts, np.inf).argmin())
        rows = np.where(remaining[:, label])[0]
        for i in rows[rng.permutation(len(rows))]:
            w = want_label[:, label]
            cand = np.where(w == w.max())[0]
            if len(cand) > 1:
                cand = cand[want_rows[cand] == want_rows[cand].max()]
            k = int(rng.choice(cand))
            fold_of[i] = k
            want_rows[k] -= 1
            want_label[k] -= y[i]
            remaining[i] = False
    for i in np.where(fold_of < 0)[0][rng.permutation(int((fold_of < 0).sum()))]:
        k = int(rng.choice(np.where(want_rows == want_rows.max())[0]))
        fold_of[i] = k
        want_rows[k] -= 1
    return [np.where(fold_of == k)[0] for k in range(n_folds)]


def blend_fingerprints(pairs: list[tuple[str, ...]], table: dict[str, np.ndarray]) -> np.ndarray:
    """Order-free features of a mixture ``(P, D)``: the sum of its components' rows of ``table``
    (for the authors' Morgan baseline, the summed count fingerprints of the two molecules)."""
    return np.stack([np.sum([table[s] for s in p], axis=0) for p in pairs])


def sum_absdiff_pairs(pairs, vectors: dict[str, np.ndarray]) -> np.ndarray:
    """``(N, 2D)`` symmetric features ``[a + b ; |a - b|]`` of two-molecule pairs ``(a, b)`` from
    per-molecule vectors ``{smiles: (D,)}`` (blend pairs: Mordred or odour-profile logits)."""
    return np.stack([np.concatenate([vectors[a] + vectors[b], np.abs(vectors[a] - vectors[b])]) for a, b in pairs])


class MultiLabelLogReg:
    """L2-regularised logistic regression, one per label, fitted jointly (full-batch L-BFGS in
    torch, so 74-138 labels on 40k rows take seconds) on standardised ``log1p`` features;
    scikit-learn's objective per label, ``0.5 |w|^2 + C sum_i BCE_i``, divided by ``C n``.
    Labels without both classes in training get their constant training rate."""

    def __init__(self, C: float = 0.05, max_iter: int = 200, log1p: bool = True):
        self.C, self.max_iter, self.log1p = C, max_iter, log1p

    def _prep(self, X: np.ndarray) -> torch.Tensor:
        X = np.log1p(np.maximum(X, 0)) if self.log1p else X
        return torch.as_tensor((X - self.mean_) / self.std_, dtype=torch.float32)

    def fit(self, X: np.ndarray, Y: np.ndarray) -> MultiLabelLogReg:
        """``X (N, D)``, ``Y (N, L)`` in {0, 1}."""
        Xl = np.log1p(np.maximum(X, 0)) if self.log1p else X
        self.mean_, self.std_ = Xl.mean(0), Xl.std(0) + 1e-6
        x = self._prep(X)
        y = torch.as_tensor(Y, dtype=torch.float32)
        self.const_ = Y.mean(0)
        self.active_ = (Y.sum(0) > 0) & (Y.sum(0) < len(Y))
        w = torch.zeros(x.shape[1], Y.shape[1], requires_grad=True)
        b = torch.zeros(Y.shape[1], requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=self.max_iter, line_search_fn="strong_wolfe")
        penalty = 1.0 / (2.0 * self.C * len(Y))

        def closure():
            opt.zero_grad()
            bce = F.binary_cross_entropy_with_logits(x @ w + b, y, reduction="none").mean(0)
            loss = (bce + penalty * (w**2).sum(0)).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self.w_, self.b_ = w.detach(), b.detach()
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """``(N, L)`` probabilities."""
        with torch.no_grad():
            p = torch.sigmoid(self._prep(X) @ self.w_ + self.b_).numpy().astype(np.float64)
        p[:, ~self.active_] = self.const_[~self.active_]
        return p
