"""Label benchmarks, MixScentNet against fingerprint/descriptor baselines in the same run:

- GS-LF single molecules (a mixture of one), 138 descriptors: ``folds``-fold multi-label
  stratified CV (iterative stratification), macro ROC-AUC per fold.
- Blend pairs (two-molecule mixtures), the 74 evaluated labels: a seeded molecule-disjoint split
  (the paper's "carving", :func:`olfaction.data.molecule_disjoint_blend_split`) and the authors'
  2023 split; macro ROC-AUC over the labels present in both training and test.

Every network picks its epoch on validation rows carved from the training rows; test rows are
used once, for the reported score. Molecule features for the mixture level come from the frozen
Mordred-pretrained encoder (``embedding``), the cleaned Mordred vector (``mordred``) or both
(``embedding+mordred``); pretraining and descriptor scaling are self-supervised (no labels).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table

from .baselines import MultiLabelLogReg, blend_fingerprints
from .data import LabelData, load_blends, load_gslf, molecule_disjoint_blend_split
from .evaluate import macro_roc_auc, multilabel_stratified_kfold
from .features import morgan_counts
from .model import MixScentConfig, MixScentNet, MolEncoder
from .pipeline import FEATURE_KINDS, molecule_features
from .train import LabelTrainConfig, MixtureIndex, fit_labels, predict_labels

MOE_EXPERTS, MOE_TOP_K = 4, 2


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


def parse_variant(spec: str) -> tuple[str, int]:
    """``"embedding+mordred"`` -> (kind, 0); ``"embedding+mordred/moe"`` -> (kind, MOE_EXPERTS):
    the same network with the routed :class:`~olfaction.model.MoELabelHead`."""
    kind, _, head = spec.partition("/")
    if kind not in FEATURE_KINDS or head not in ("", "moe"):
        raise InputError(
            f"unknown label variant {spec!r}: use a feature kind of {list(FEATURE_KINDS)}, optionally + '/moe'"
        )
    return kind, MOE_EXPERTS if head == "moe" else 0


def variant_name(spec: str) -> str:
    kind, experts = parse_variant(spec)
    return f"MixScentNet ({kind}{f', MoE head {experts}x top-{MOE_TOP_K}' if experts else ''})"


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
    on Mordred, on the same stratified folds."""
    cfg = cfg or LabelBenchConfig()
    gs = load_gslf(data_dir)
    y = gs.y
    test_folds = multilabel_stratified_kfold(y, folds, seed)
    specs = {spec: parse_variant(spec) for spec in feature_kinds}
    indexes = {
        kind: MixtureIndex({s: (s,) for s in gs.smiles}, molecule_features(gs.smiles, kind, encoder))
        for kind in dict.fromkeys(k for k, _ in specs.values())
    }
    base_x = {}
    if baselines:
        base_x["logreg (Morgan counts)"] = np.stack([morgan_counts(s, 2048) for s in gs.smiles])
        mord = molecule_features(gs.smiles, "mordred")
        base_x["logreg (Mordred)"] = np.stack([mord[s] for s in gs.smiles])
    rng = np.random.default_rng(seed)
    rows = []
    for k, te in enumerate(test_folds):
        t0 = time.time()
        tr = rng.permutation(np.setdiff1d(np.arange(len(y)), te))
        n_val = len(tr) // 9
        val, fit_rows = tr[:n_val], tr[n_val:]
        for spec, (kind, experts) in specs.items():
            net, hist = _fit_net(indexes[kind], y, fit_rows, val, cfg, seed, experts)
            auc = macro_roc_auc(y[te], predict_labels(net, indexes[kind], te))
            rows.append(_row("gslf", k, variant_name(spec), auc, hist["best_epoch"]))
        for name, X in base_x.items():
            lr = MultiLabelLogReg(C=cfg.logreg_c, log1p=name.endswith("counts)")).fit(X[tr], y[tr])
            rows.append(_row("gslf", k, name, macro_roc_auc(y[te], lr.predict_proba(X[te]))))
        if progress:
            done = ", ".join(f"{r['method']} {r['auc']:.3f}" for r in rows if r["fold"] == k)
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
    pairs are subsampled (seeded) to ``max_train`` when given."""
    cfg = cfg or LabelBenchConfig(batch_size=256, patience=5, epochs=40)
    if blends is None:
        blends, authors_split, _ = load_blends(data_dir)
    y = blends.y
    mols = sorted({m for p in blends.smiles for m in p})
    mixtures = dict(enumerate(blends.smiles))
    specs = {spec: parse_variant(spec) for spec in feature_kinds}
    indexes = {
        kind: MixtureIndex(mixtures, molecule_features(mols, kind, encoder))
        for kind in dict.fromkeys(k for k, _ in specs.values())
    }
    morgan = {s: morgan_counts(s, 2048) for s in mols} if baselines else {}
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
        for spec, (kind, experts) in specs.items():
            net, hist = _fit_net(indexes[kind], y, train, val, cfg, seed, experts)
            p = predict_labels(net, indexes[kind], test)
            rows.append(
                {
                    **_row(
                        "blends",
                        split_id,
                        variant_name(spec),
                        macro_roc_auc(y[test][:, labels], p[:, labels]),
                        hist["best_epoch"],
                    ),
                    **info,
                }
            )
        if baselines:
            X = blend_fingerprints(blends.smiles, morgan)
            lr = MultiLabelLogReg(C=cfg.logreg_c).fit(X[train], y[train][:, labels])
            auc = macro_roc_auc(y[test][:, labels], lr.predict_proba(X[test]))
            rows.append({**_row("blends", split_id, "logreg (summed Morgan counts)", auc), **info})
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
