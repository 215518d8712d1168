"""Label benchmarks (GS-LF stratified CV, blend-pair labels) of MixScentNet label variants,
seed averages and rank ensembles against logreg / RF baselines: the research behind the GS-LF
0.89 and blend 0.80 figures (docs/experiments.md).

    python -m experiments.olfaction.label_bench --tasks gslf --out runs/olfaction_labels

Label benchmarks, MixScentNet against fingerprint/descriptor baselines in the same run:

- GS-LF single molecules (a mixture of one), 138 descriptors: ``folds``-fold multi-label
  stratified CV (iterative stratification), macro ROC-AUC per fold.
- Blend pairs (two-molecule mixtures), the 74 evaluated labels: a seeded molecule-disjoint split
  (the paper's "carving", :func:`experiments.olfaction.blends.molecule_disjoint_blend_split`) and the authors'
  2023 split; macro ROC-AUC over the labels present in both training and test.

Every network picks its epoch on validation rows carved from the training rows; test rows are
used once, for the reported score. Molecule features for the mixture level come from the frozen
Mordred-pretrained encoder (``embedding``), the cleaned Mordred vector (``mordred``) or both
(``embedding+mordred``); pretraining and descriptor scaling are self-supervised (no labels).

GS-LF label models beyond the networks (session 5): a network spec may end in ``*N`` (N seeds
``seed .. seed+N-1``, probabilities averaged; ``*1`` is the plain network), ``rf`` is a
multi-output random forest on Mordred ++ log1p Morgan counts (:class:`LabelForest`), and
``ensemble=`` specs (:func:`parse_ensemble`) average the per-label ranks (or probabilities) of
such members with weights fixed before the run (:func:`ensemble_scores`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from scipy.stats import rankdata
from sklearn.ensemble import RandomForestClassifier

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, positive_int
from common.data_dir import resolve_data_dir
from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table
from experiments.olfaction.blends import (
    MultiLabelLogReg,
    blend_fingerprints,
    load_blends,
    molecule_disjoint_blend_split,
    multilabel_stratified_kfold,
    sum_absdiff_pairs,
)
from experiments.olfaction.odour_transfer import odour_profiles, transfer_inputs
from olfaction.data import LabelData, load_gslf
from olfaction.evaluate import macro_roc_auc
from olfaction.features import morgan_counts
from olfaction.labels import LabelTrainConfig, fit_labels
from olfaction.mixture_index import MixtureIndex, mixture_label_logits
from olfaction.model import MixScentConfig, MixScentNet, MolEncoder
from olfaction.molecules import FEATURE_KINDS, molecule_features

MOE_EXPERTS, MOE_TOP_K = 4, 2


@torch.no_grad()
def predict_labels(model: MixScentNet, index: MixtureIndex, ids) -> np.ndarray:
    """Label probabilities ``(len(ids), L)``."""
    model.eval()
    out = [torch.sigmoid(mixture_label_logits(model, index, list(ids[s : s + 512]))).cpu()
           for s in range(0, len(ids), 512)]
    return torch.cat(out).numpy()


@dataclass
class LabelBenchConfig:
    """Network and training settings shared by both label benchmarks."""

    hidden: int = 128
    dropout: float = 0.2
    epochs: int = 60
    patience: int = 8
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    logreg_c: float = 0.05
    rf_trees: int = 100


def _split_seeds(spec: str) -> tuple[str, int]:
    """``"kind/moe*5"`` -> ("kind/moe", 5); no ``*`` -> (spec, 1)."""
    base, star, n = spec.partition("*")
    if not star:
        return spec, 1
    if not n.isdigit() or int(n) < 1:
        raise InputError(f"label variant {spec!r}: '*' must be followed by a seed count >= 1")
    return base, int(n)


def parse_variant(spec: str) -> tuple[str, int]:
    """``"embedding+mordred"`` -> (kind, 0); ``"embedding+mordred/moe"`` -> (kind, MOE_EXPERTS):
    the same network with the routed :class:`~olfaction.model.MoELabelHead`. A trailing ``*N``
    (seed count, see :func:`parse_seeded`) is accepted and ignored here."""
    kind, _, head = _split_seeds(spec)[0].partition("/")
    if kind not in FEATURE_KINDS or head not in ("", "moe"):
        raise InputError(
            f"unknown label variant {spec!r}: use a feature kind of {list(FEATURE_KINDS)}, optionally"
            " + '/moe', optionally + '*N' (N seeds averaged)"
        )
    return kind, MOE_EXPERTS if head == "moe" else 0


def parse_seeded(spec: str) -> tuple[str, int, int]:
    """``"embedding+mordred/moe*5"`` -> (kind, experts, 5 seeds)."""
    return (*parse_variant(spec), _split_seeds(spec)[1])


def variant_name(spec: str, models: dict[str, str] | None = None) -> str:
    """Row name of a label-model spec; ``models``: the task's non-network models (GS-LF's default)."""
    models = GSLF_BASELINES if models is None else models
    if spec in models:
        return models[spec]
    if spec.startswith("ensemble"):
        members, combine = parse_ensemble(spec, models)
        inner = ", ".join(f"{m} {w:.3g}" for m, w in members)
        return f"ensemble [{combine}] ({inner})"
    kind, experts, n_seeds = parse_seeded(spec)
    name = f"MixScentNet ({kind}{f', MoE head {experts}x top-{MOE_TOP_K}' if experts else ''})"
    return name + (f" x{n_seeds} seeds" if n_seeds > 1 else "")


# non-network GS-LF label models (fitted on the whole training part of a fold) and their row names
GSLF_BASELINES = {
    "logreg-morgan": "logreg (Morgan counts)",
    "logreg-mordred": "logreg (Mordred)",
    "rf": "RF (Mordred ++ Morgan counts)",
}
# non-network blend-pair label models (fitted on the training pairs)
BLEND_BASELINES = {
    "logreg-morgan": "logreg (summed Morgan counts)",
    "logreg-mordred": "logreg (Mordred sum ++ |diff|)",
    "logreg-odour": "logreg (GS-LF odour-transfer logits sum ++ |diff|)",
}


def parse_ensemble(spec: str, models: dict[str, str] | None = None) -> tuple[list[tuple[str, float]], str]:
    """``"ensemble[:rank|:prob]=m1:w1&m2&m3"`` -> ([(m1, w1), (m2, w), (m3, w)], combine).

    Members are network specs (``kind[/moe][*N]``) or keys of ``models`` (default
    :data:`GSLF_BASELINES`; :data:`BLEND_BASELINES` for blends), joined by
    ``&`` (not ``+``: feature kinds such as ``embedding+mordred`` contain it); ``:w`` fixes a member's weight, the rest share ``1 - sum(fixed)`` equally; weights are
    normalised to sum 1. ``combine`` is ``rank`` (default: per-label ranks scaled to (0, 1],
    averaged; ROC-AUC depends on ranks only) or ``prob`` (probabilities averaged)."""
    head, eq, body = spec.partition("=")
    combine = head.partition(":")[2] or "rank"
    if not head.startswith("ensemble") or head not in ("ensemble", f"ensemble:{combine}") or not eq:
        raise InputError(f"ensemble spec {spec!r}: use 'ensemble[:rank|:prob]=member[:weight]&member...'")
    if combine not in ("rank", "prob"):
        raise InputError(f"ensemble spec {spec!r}: combine must be rank or prob, got {combine!r}")
    parsed: list[tuple[str, float | None]] = []
    for part in (p.strip() for p in body.split("&")):
        if not part:
            raise InputError(f"ensemble spec {spec!r} has an empty member")
        name, colon, w = part.partition(":")
        if name not in (GSLF_BASELINES if models is None else models):
            parse_variant(name)  # raises for an unknown member
        try:
            weight = float(w) if colon else None
        except ValueError:
            raise InputError(f"ensemble member {part!r}: weight {w!r} is not a number") from None
        if weight is not None and weight <= 0:
            raise InputError(f"ensemble member {part!r}: weight must be > 0")
        parsed.append((name, weight))
    fixed = sum(w for _, w in parsed if w is not None)
    free = [m for m, w in parsed if w is None]
    if free and fixed >= 1.0:
        raise InputError(f"ensemble spec {spec!r}: fixed weights sum to >= 1, nothing left for {free}")
    share = (1.0 - fixed) / len(free) if free else 0.0
    weights = [w if w is not None else share for _, w in parsed]
    total = sum(weights)
    return [(m, w / total) for (m, _), w in zip(parsed, weights, strict=True)], combine


def ensemble_scores(
    preds: Sequence[np.ndarray], weights: Sequence[float], combine: str = "rank"
) -> np.ndarray:
    """Weighted average ``(N, L)`` of member scores ``preds`` (each ``(N, L)``): per-label ranks
    scaled to (0, 1] (``rank``, ties averaged) or the raw probabilities (``prob``)."""
    if not preds or len(preds) != len(weights):
        raise InputError("ensemble_scores needs one weight per (non-empty list of) member predictions")
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    if combine == "rank":
        parts = [rankdata(np.asarray(p, np.float64), axis=0) / len(p) for p in preds]
    elif combine == "prob":
        parts = [np.asarray(p, np.float64) for p in preds]
    else:
        raise InputError(f"unknown ensemble combine {combine!r}; choose rank or prob")
    return np.tensordot(w, np.stack(parts), axes=1)


def _resolve_specs(
    feature_kinds: Sequence[str], models: dict[str, str], defaults: Sequence[str]
) -> tuple[dict, dict[str, tuple[str, int, int]], list[str]]:
    """Split a task's label specs into ``(ensembles {spec: parse_ensemble}, networks {spec:
    parse_seeded}, non-network model keys)``: ``feature_kinds``, then ``defaults`` (the task's
    baselines), then the ensembles' members, each once, in that order."""
    ensembles = {spec: parse_ensemble(spec, models) for spec in feature_kinds if spec.startswith("ensemble")}
    wanted = [s for s in feature_kinds if s not in ensembles] + list(defaults)
    wanted += [m for members, _ in ensembles.values() for m, _ in members]
    wanted = list(dict.fromkeys(wanted))
    nets = {spec: parse_seeded(spec) for spec in wanted if spec not in models}
    return ensembles, nets, [spec for spec in wanted if spec in models]


def _seed_averaged(
    nets: dict[str, tuple[str, int, int]], seed: int, fit_predict
) -> dict[str, tuple[np.ndarray, int | None]]:
    """``{spec: (test scores averaged over the spec's seeds, best epoch or None for several seeds)}``;
    ``fit_predict(kind, experts, s) -> (scores, best_epoch)`` runs once per (kind, experts, seed)."""
    single: dict[tuple, tuple[np.ndarray, int]] = {}
    out = {}
    for spec, (kind, experts, n_seeds) in nets.items():
        for s in range(seed, seed + n_seeds):
            if (kind, experts, s) not in single:
                single[kind, experts, s] = fit_predict(kind, experts, s)
        members = [single[kind, experts, s] for s in range(seed, seed + n_seeds)]
        out[spec] = np.mean([p for p, _ in members], axis=0), members[0][1] if n_seeds == 1 else None
    return out


class LabelForest:
    """Multi-output random forest label model (sklearn's native multi-label trees: one tree set
    for all labels, ``sqrt`` features per split). Labels without both classes in training get
    their constant training rate."""

    def __init__(self, n_estimators: int = 100, seed: int = 0, n_jobs: int = 1):
        self.n_estimators, self.seed, self.n_jobs = n_estimators, seed, n_jobs

    def fit(self, X: np.ndarray, Y: np.ndarray) -> LabelForest:
        Y = (np.asarray(Y) > 0).astype(np.int64)
        self.const_ = Y.mean(0)
        self.rf_ = RandomForestClassifier(
            n_estimators=self.n_estimators, max_features="sqrt", n_jobs=self.n_jobs, random_state=self.seed
        ).fit(X, Y)
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """``(N, L)`` probabilities of the positive class."""
        out = np.tile(self.const_, (len(X), 1)).astype(np.float64)
        probs = self.rf_.predict_proba(X)
        probs = probs if isinstance(probs, list) else [probs]
        for j, (p, classes) in enumerate(zip(probs, self.rf_.classes_, strict=True)):
            if len(classes) == 2:
                out[:, j] = p[:, 1]
        return out


def _fit_net(
    index: MixtureIndex, y: np.ndarray, train, val, cfg: LabelBenchConfig, seed: int, experts: int = 0
) -> tuple[MixScentNet, dict]:
    torch.manual_seed(seed)
    net = MixScentNet(
        MixScentConfig(
            in_dim=index.x.shape[1],
            hidden=cfg.hidden,
            dropout=cfg.dropout,
            n_labels=y.shape[1],
            label_experts=experts,
            label_top_k=MOE_TOP_K,
        )
    )
    hist = fit_labels(
        net,
        index,
        y,
        train,
        val,
        LabelTrainConfig(
            epochs=cfg.epochs,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            batch_size=cfg.batch_size,
            patience=cfg.patience,
            seed=seed,
        ),
    )
    return net, hist


# ----------------------------------------------------------------------------- GS-LF


def gslf_cv(
    data_dir: Path,
    encoder: MolEncoder | None,
    folds: int = 5,
    seed: int = 0,
    feature_kinds: Sequence[str] = ("embedding", "embedding+mordred"),
    cfg: LabelBenchConfig | None = None,
    baselines: bool = True,
    progress: bool = True,
) -> list[dict]:
    """Per-fold macro ROC-AUC rows ``{"task", "fold", "method", "auc", "best_epoch"}`` of
    MixScentNet (one row per molecule feature kind) and logistic regression on Morgan counts and
    on Mordred, on the same stratified folds.

    ``feature_kinds`` may also hold ``kind[/moe]*N`` (N seeds averaged), ``rf``
    (:class:`LabelForest`) and ``ensemble=...`` specs (:func:`parse_ensemble`); an ensemble's
    members are reported as rows of their own too. Networks are fitted on 8/9 of a fold's
    training part and pick their epoch on the other 1/9; the non-network models are fitted on
    the whole training part; the test fold is only scored. Ensemble weights are fixed in the spec
    (chosen before the run), so no test label enters any choice."""
    cfg = cfg or LabelBenchConfig()
    gs = load_gslf(data_dir)
    y = gs.y
    test_folds = multilabel_stratified_kfold(y, folds, seed)
    defaults = [b for b in GSLF_BASELINES if baselines and b != "rf"]
    ensembles, nets, others = _resolve_specs(feature_kinds, GSLF_BASELINES, defaults)
    indexes = {
        kind: MixtureIndex({s: (s,) for s in gs.smiles}, molecule_features(gs.smiles, kind, encoder))
        for kind in dict.fromkeys(k for k, _, _ in nets.values())
    }
    base_x = {}
    if any(o in ("logreg-morgan", "rf") for o in others):
        base_x["morgan"] = np.stack([morgan_counts(s, 2048) for s in gs.smiles])
    if any(o in ("logreg-mordred", "rf") for o in others):
        mord = molecule_features(gs.smiles, "mordred")
        base_x["mordred"] = np.stack([mord[s] for s in gs.smiles])
    if "rf" in others:
        base_x["rf"] = np.concatenate([base_x["mordred"], np.log1p(base_x["morgan"])], axis=1)
    rng = np.random.default_rng(seed)
    rows = []
    for k, te in enumerate(test_folds):
        t0 = time.time()
        tr = rng.permutation(np.setdiff1d(np.arange(len(y)), te))
        n_val = len(tr) // 9
        val, fit_rows = tr[:n_val], tr[n_val:]

        def fit_predict(kind, experts, s, fit_rows=fit_rows, val=val, te=te):
            net, hist = _fit_net(indexes[kind], y, fit_rows, val, cfg, s, experts)
            return predict_labels(net, indexes[kind], te), hist["best_epoch"]

        preds: dict[str, np.ndarray] = {}
        fold_rows = []
        for spec, (p, epoch) in _seed_averaged(nets, seed, fit_predict).items():
            preds[spec] = p
            fold_rows.append(_row("gslf", k, variant_name(spec), macro_roc_auc(y[te], p), epoch))
        for spec in others:
            if spec == "rf":
                model = LabelForest(cfg.rf_trees, seed=seed).fit(base_x["rf"][tr], y[tr])
                preds[spec] = model.predict_proba(base_x["rf"][te])
            else:
                X = base_x[spec.removeprefix("logreg-")]
                lr = MultiLabelLogReg(C=cfg.logreg_c, log1p=spec == "logreg-morgan").fit(X[tr], y[tr])
                preds[spec] = lr.predict_proba(X[te])
            fold_rows.append(_row("gslf", k, variant_name(spec), macro_roc_auc(y[te], preds[spec])))
        for spec, (members, combine) in ensembles.items():
            p = ensemble_scores([preds[m] for m, _ in members], [w for _, w in members], combine)
            fold_rows.append(_row("gslf", k, variant_name(spec), macro_roc_auc(y[te], p)))
        rows += fold_rows
        if progress:
            done = ", ".join(f"{r['method']} {r['auc']:.3f}" for r in fold_rows)
            print(f"[gslf] fold {k}: {done} ({time.time() - t0:.0f}s)", flush=True)
    return rows


def _row(task: str, fold, method: str, auc: float, best_epoch: int | None = None) -> dict:
    return {"task": task, "fold": fold, "method": method, "auc": float(auc), "best_epoch": best_epoch}


# ----------------------------------------------------------------------------- blends


def blend_bench(
    data_dir: Path,
    encoder: MolEncoder | None,
    seed: int = 0,
    splits: Sequence[str] = ("moldisjoint", "authors"),
    feature_kinds: Sequence[str] = ("embedding+mordred",),
    max_train: int | None = None,
    cfg: LabelBenchConfig | None = None,
    baselines: bool = True,
    progress: bool = True,
    blends: LabelData | None = None,
    authors_split: dict | None = None,
) -> list[dict]:
    """Macro ROC-AUC rows of MixScentNet and the Morgan-count logistic regression (summed count
    fingerprints of the two molecules) on blend splits ``moldisjoint`` (seeded carving) and/or
    ``authors`` (the authors' 2023 split, validation carved from its training pairs). Training
    pairs are subsampled (seeded) to ``max_train`` when given.

    As for GS-LF, ``feature_kinds`` may hold ``kind[/moe]*N`` and ``ensemble=...`` specs whose
    members are networks or :data:`BLEND_BASELINES` keys (``logreg-morgan``: summed Morgan
    counts; ``logreg-mordred``: symmetric pair features ``[a + b ; |a - b|]`` of the cleaned
    Mordred vectors; ``logreg-odour``: the same pair features of GS-LF odour-transfer logits,
    :mod:`olfaction.odour_transfer`, with the split's test molecules excluded from every GS-LF
    fit); the logistic regressions are fitted on the training pairs only."""
    cfg = cfg or LabelBenchConfig(batch_size=256, patience=5, epochs=40)
    if blends is None:
        blends, authors_split, _ = load_blends(data_dir)
    y = blends.y
    mols = sorted({m for p in blends.smiles for m in p})
    mixtures = dict(enumerate(blends.smiles))
    ensembles, nets, others = _resolve_specs(
        feature_kinds, BLEND_BASELINES, ["logreg-morgan"] if baselines else []
    )
    indexes = {
        kind: MixtureIndex(mixtures, molecule_features(mols, kind, encoder))
        for kind in dict.fromkeys(k for k, _, _ in nets.values())
    }
    pair_x = {}
    if "logreg-morgan" in others:
        pair_x["logreg-morgan"] = blend_fingerprints(blends.smiles, {s: morgan_counts(s, 2048) for s in mols})
    if "logreg-mordred" in others:
        mord = molecule_features(mols, "mordred")
        pair_x["logreg-mordred"] = sum_absdiff_pairs(blends.smiles, mord)
    if "logreg-odour" in others:
        gslf = load_gslf(data_dir)
        transfer_x = transfer_inputs(list(gslf.smiles) + mols)
    rng = np.random.default_rng(seed)
    rows = []
    for name in splits:
        t0 = time.time()
        if name == "moldisjoint":
            sp = molecule_disjoint_blend_split(blends, seed)
            train, val, test, labels = sp.training, sp.validation, sp.testing, sp.labels
            split_id = sp.identifier
        elif name == "authors":
            if authors_split is None:
                raise InputError("the authors' blend split needs load_blends' split dict")
            tr = rng.permutation(authors_split["training"])
            n_val = max(1, len(tr) // 10)
            train, val, test = np.sort(tr[n_val:]), np.sort(tr[:n_val]), authors_split["testing"]
            labels = np.where((y[train].sum(0) > 0) & (y[test].sum(0) > 0))[0]
            split_id = "authors_2023_v1"
        else:
            raise InputError(f"unknown blend split {name!r}; choose moldisjoint or authors")
        n_train_all = len(train)
        if max_train is not None and len(train) > max_train:
            train = np.sort(rng.choice(train, max_train, replace=False))
        info = {
            "split": split_id,
            "n_train": len(train),
            "n_train_available": n_train_all,
            "n_test": len(test),
            "n_labels": len(labels),
        }

        def fit_predict(kind, experts, s, train=train, val=val, test=test, labels=labels):
            net, hist = _fit_net(indexes[kind], y, train, val, cfg, s, experts)
            return predict_labels(net, indexes[kind], test)[:, labels], hist["best_epoch"]

        preds: dict[str, np.ndarray] = {}  # (n_test, len(labels)) scores per spec
        for spec, (p, epoch) in _seed_averaged(nets, seed, fit_predict).items():
            preds[spec] = p
            auc = macro_roc_auc(y[test][:, labels], p)
            rows.append({**_row("blends", split_id, variant_name(spec, BLEND_BASELINES), auc, epoch), **info})
        if "logreg-odour" in others:  # per split: the split's test molecules never enter the GS-LF fits
            test_mols = {m for i in test for m in blends.smiles[i]}
            profiles = odour_profiles(gslf, mols, test_mols, transfer_x, seed=seed, C=cfg.logreg_c)
            pair_x["logreg-odour"] = sum_absdiff_pairs(blends.smiles, profiles)
        for spec in others:
            X = pair_x[spec]
            lr = MultiLabelLogReg(C=cfg.logreg_c, log1p=spec == "logreg-morgan").fit(
                X[train], y[train][:, labels]
            )
            preds[spec] = lr.predict_proba(X[test])
            auc = macro_roc_auc(y[test][:, labels], preds[spec])
            rows.append({**_row("blends", split_id, BLEND_BASELINES[spec], auc), **info})
        for spec, (members, combine) in ensembles.items():
            p = ensemble_scores([preds[m] for m, _ in members], [w for _, w in members], combine)
            auc = macro_roc_auc(y[test][:, labels], p)
            rows.append({**_row("blends", split_id, variant_name(spec, BLEND_BASELINES), auc), **info})
        if progress:
            done = ", ".join(f"{r['method']} {r['auc']:.3f}" for r in rows if r["split"] == split_id)
            print(f"[blends] {split_id}: {done} ({time.time() - t0:.0f}s)", flush=True)
    return rows


# ----------------------------------------------------------------------------- report


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and std of ``auc`` over folds per (task, split, method), first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["task"], r.get("split", f"{r['task']} CV"), r["method"])
        groups.setdefault(key, []).append(r)
    out = []
    for (task, split, method), rs in groups.items():
        aucs = np.array([r["auc"] for r in rs])
        out.append(
            {
                "task": task,
                "split": split,
                "method": method,
                "folds": len(rs),
                "macro_auc": round(float(aucs.mean()), 4),
                "std": round(float(aucs.std()), 4),
                "n_train": rs[0].get("n_train", ""),
            }
        )
    return out


def run_label_bench(
    data_dir: Path,
    out_dir: Path,
    encoder: MolEncoder | None,
    tasks: Sequence[str] = ("gslf", "blends"),
    seed: int = 0,
    folds: int = 5,
    max_train: int | None = None,
    gslf_kinds: Sequence[str] = ("embedding", "embedding+mordred"),
    blend_kinds: Sequence[str] = ("embedding+mordred",),
    blend_splits: Sequence[str] = ("moldisjoint", "authors"),
    epochs: int | None = None,
    progress: bool = True,
    rf_trees: int | None = None,
) -> list[dict]:
    """Run the chosen label tasks; writes ``label_bench_folds.csv``, ``label_bench.csv``,
    ``label_bench.md`` and ``label_bench.json`` under ``out_dir``; returns the summary rows."""
    unknown = [t for t in tasks if t not in ("gslf", "blends")]
    if unknown:
        raise InputError(f"unknown label task {unknown[0]!r}; choose gslf and/or blends")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    if "gslf" in tasks:
        cfg = LabelBenchConfig() if epochs is None else LabelBenchConfig(epochs=epochs)
        cfg = cfg if rf_trees is None else replace(cfg, rf_trees=rf_trees)
        rows += gslf_cv(data_dir, encoder, folds, seed, gslf_kinds, cfg, progress=progress)
        write_csv(out_dir / "label_bench_folds.csv", rows)
    if "blends" in tasks:
        cfg = LabelBenchConfig(batch_size=256, patience=5, epochs=40)
        cfg = cfg if epochs is None else replace(cfg, epochs=epochs)
        rows += blend_bench(
            data_dir, encoder, seed, blend_splits, blend_kinds, max_train, cfg, progress=progress
        )
        write_csv(out_dir / "label_bench_folds.csv", rows)
    summary = summarize(rows)
    write_csv(out_dir / "label_bench.csv", summary)
    write_json(out_dir / "label_bench.json", {"summary": summary, "folds": rows, "seed": seed})
    table = markdown_table(summary)
    (out_dir / "label_bench.md").write_text(table)
    if progress:
        print(table)
    return summary

def _list(v: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in v.split(",") if x.strip())


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m experiments.olfaction.label_bench", description=__doc__.split("\n\n")[0])
    add_common_args(p, out_default="runs/olfaction_labels")
    p.add_argument("--tasks", default="gslf,blends", help="comma-separated: gslf, blends")
    p.add_argument("--folds", type=positive_int, default=5)
    p.add_argument("--encoder", default=None, help="pretrained encoder directory (default: cache dir/encoder)")
    p.add_argument(
        "--gslf-features",
        default="embedding,embedding+mordred",
        help="comma-separated GS-LF label models: a feature kind (embedding, mordred, embedding+mordred),"
        " optionally + /moe, optionally + *N (N seeds averaged); rf; ensemble[:rank|:prob]=member[:weight]&...",
    )
    p.add_argument("--rf-trees", type=positive_int, default=None, help="trees of the GS-LF rf model (default 100)")
    p.add_argument("--blend-features", default="embedding+mordred")
    p.add_argument("--blend-splits", default="moldisjoint,authors")
    p.add_argument("--max-train", type=positive_int, default=None, help="subsample training blend pairs")
    p.add_argument("--epochs", type=positive_int, default=None)
    args = p.parse_args(argv)
    check_outputs(dirs=[args.out], inputs=[args.encoder], overwrite=args.overwrite)
    from olfaction.encoder import default_encoder_dir, load_encoder

    kinds = _list(args.gslf_features) + _list(args.blend_features)
    encoder = None
    if any("embedding" in k for k in kinds):
        encoder = load_encoder(Path(args.encoder) if args.encoder else default_encoder_dir())
    run_label_bench(
        resolve_data_dir(args.data_dir),
        Path(args.out),
        encoder,
        tasks=_list(args.tasks),
        seed=args.seed,
        folds=args.folds,
        max_train=args.max_train,
        gslf_kinds=_list(args.gslf_features),
        blend_kinds=_list(args.blend_features),
        blend_splits=_list(args.blend_splits),
        epochs=args.epochs,
        rf_trees=args.rf_trees,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
