"""The mixture-distance benchmark (``mixscent bench``): four split families, five methods, one
table.

Families (``r`` = mean Pearson over the family's folds):

- ``random_cv``: POMMix ``random_cv0-4``;
- ``lso_molecules``: POMMix ``lso_molecules0-4`` (test pairs contain held-out molecules, most of
  which still occur in training pairs);
- ``strict_lmo``: :func:`olfaction.data.strict_molecule_split` (no test molecule in any training
  or validation pair), seeds ``0..folds-1``;
- ``leave_dataset``: :func:`leave_dataset_split`: train on the other experiments, test on every
  pair of one of :data:`LEAVE_OUT` (Bushdid, Snitz 1-3, Ravia 1/2/4).

Methods, all fitted in the same run on the same rows (test rows are never read while fitting):

- ``RF``: random forest on the symmetric pair features (RDKit + Morgan), on training + validation
  rows (the reference);
- ``MixScentNet (paper)``: the pretrained GNN + GATv2 mixture network alone (the predictor's
  network part, epoch chosen on the validation rows);
- ``MixScentNet +Mordred +set features``: the best network alone of the research runs
  (docs/experiments.md; chosen there, not on this run): mixture level on embedding ++ cleaned
  Mordred, distance head also reading the set-level pair features and the experiment;
- ``Set regressors``: the predictor's extremely randomised trees + ridge (gated partners), equal
  mean, on training + validation rows;
- ``MixturePredictor``: the shipped combination: the set regressors' equal mean plus the network
  where it clearly helps on the validation rows (one-standard-error rule,
  :func:`olfaction.evaluate.gated_network_share`).

With ``minimol=True`` (``mixscent bench --suite minimol``; two more networks per fold), the two networks
again with MiniMol v1 embeddings (z-scored over the pairs' molecules, label-free) appended to each
molecule's input, alone:

- ``MixScentNet ++ MiniMol (paper)``: :class:`~olfaction.predictor.MixturePredictor` ``(minimol=True)``'s
  network;
- ``MixScentNet +Mordred +set features ++ MiniMol``: the best network with the same MiniMol input.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from common.device import resolve_device
from common.errors import InputError
from common.report import markdown_table

from .baselines import PairForest
from .data import PairData, Split, load_pairs, load_split, split_path, strict_molecule_split
from .evaluate import summarize_folds
from .features import molecule_table
from .inference import fit_minimol_scale
from .mixture_index import test_predictions
from .model import DistanceTrainConfig, MixScentConfig, MolEncoder
from .predictor import MixturePredictor
from .set_features import MoleculeSpaces, pair_features, pair_set_features
from .train import fit

FAMILIES = ("random_cv", "lso_molecules", "strict_lmo", "leave_dataset")
LEAVE_OUT = {
    "Bushdid": ("Bushdid",),
    "Snitz": ("Snitz 1", "Snitz 2", "Snitz 3"),
    "Ravia": ("Ravia 1", "Ravia 2", "Ravia 4"),
}
RF = "RF pair features (reference)"
PAPER = "MixScentNet (paper: pretrained GNN + GATv2, alone)"
BEST_NET = "MixScentNet +Mordred +set features (best network, alone)"
SET = "Set regressors (trees + ridge, equal)"
SHIPPED = "MixturePredictor (shipped)"
PAPER_MM = "MixScentNet ++ MiniMol (paper network + MiniMol, alone)"
BEST_NET_MM = "MixScentNet +Mordred +set features ++ MiniMol (best network + MiniMol, alone)"
METHODS = (RF, PAPER, BEST_NET, SET, SHIPPED)
MINIMOL_METHODS = (PAPER_MM, BEST_NET_MM)
# ``mixscent bench --suite``: the methods each suite runs (``minimol``: also the MiniMol networks)
SUITES = {"standard": METHODS, "minimol": METHODS + MINIMOL_METHODS}


def leave_dataset_split(pairs: PairData, group: str, seed: int = 0, val_frac: float = 0.12) -> Split:
    """Test: every pair of the experiments of ``LEAVE_OUT[group]``; validation: a seeded
    ``val_frac`` of the other experiments' pairs; training: the rest of them."""
    if group not in LEAVE_OUT:
        raise InputError(f"unknown dataset group {group!r} (choose from {', '.join(LEAVE_OUT)})")
    held = np.isin(np.asarray(pairs.dataset), LEAVE_OUT[group])
    rest = np.where(~held)[0]
    rest = rest[np.random.default_rng(seed).permutation(len(rest))]
    n_val = int(round(val_frac * len(rest)))
    return Split(f"leave_{group}", np.sort(rest[n_val:]), np.sort(rest[:n_val]), np.where(held)[0])


def family_splits(data_dir: Path, pairs: PairData, family: str, folds: int, seed: int = 0) -> list[Split]:
    """The first ``folds`` splits of ``family`` (``leave_dataset``: Bushdid, Snitz, Ravia, in
    that order)."""
    if family == "random_cv" or family == "lso_molecules":
        return [load_split(split_path(data_dir, f"{family}{f}"), len(pairs)) for f in range(folds)]
    if family == "strict_lmo":
        return [strict_molecule_split(pairs, seed + f) for f in range(folds)]
    if family == "leave_dataset":
        return [leave_dataset_split(pairs, g, seed) for g in list(LEAVE_OUT)[:folds]]
    raise InputError(f"unknown split family {family!r} (choose from {', '.join(FAMILIES)})")


def _best_network_inputs(pairs: PairData):
    """Label-free inputs of the best network: the set-level pair features of every pair,
    ``{(key_a, key_b): (K,)}`` (scalers fitted on all molecules, no distances read)."""

    mix_a, mix_b = pairs.sides()
    X = pair_set_features(mix_a, mix_b, MoleculeSpaces(sorted(pairs.molecules())))
    return {(a, b): X[i] for i, (a, b) in enumerate(zip(pairs.keys_a, pairs.keys_b, strict=True))}


def run_bench(
    data_dir: Path,
    encoder: MolEncoder,
    families=FAMILIES,
    folds: int = 5,
    seed: int = 0,
    network: MixScentConfig | None = None,
    training: DistanceTrainConfig | None = None,
    n_estimators: int = 300,
    rf_trees: int = 200,
    n_boot: int = 200,
    progress: bool = True,
    minimol: bool = False,
    device: str = "auto",
    precision: str = "32",
) -> dict:
    """Fit and score :data:`METHODS` (and :data:`MINIMOL_METHODS` with ``minimol``: the suite
    ``minimol``) on ``folds`` splits of each family; the networks train on ``device`` in
    ``precision``. Returns
    ``{"config", "rows", "folds"}``: a row per family x method with ``pearson`` (mean over folds),
    ``pearson_std``, ``rmse``, ``noself_pearson``, ``noself_rmse`` and pooled-bootstrap CIs; a fold
    row per family x split x method."""
    from .data import DATASETS
    from .evaluate import pair_metrics

    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise InputError(f"unknown split family {unknown[0]!r} (choose from {', '.join(FAMILIES)})")
    network = network or MixScentConfig()
    training = training or DistanceTrainConfig(seed=seed)
    where = resolve_device(device)  # the networks predict the test rows where they trained
    pairs = load_pairs(data_dir)
    mix_a, mix_b = pairs.sides()
    X_rf = pair_features(mix_a, mix_b, molecule_table(sorted(pairs.molecules())))
    pair_set = _best_network_inputs(pairs)
    best_cfg = replace(network, n_datasets=len(DATASETS))
    methods = METHODS + (MINIMOL_METHODS if minimol else ())
    if minimol:  # the same z-scored rows the predictor builds with minimol=True
        _, mm_rows = fit_minimol_scale(sorted(pairs.molecules()))
    preds: dict[tuple[str, str], list[dict]] = {}
    fold_rows: list[dict] = []
    for family in families:
        for split in family_splits(data_dir, pairs, family, folds, seed):
            t0 = time.time()
            te = split.testing
            trval = np.concatenate([split.training, split.validation])
            out = {RF: PairForest(n_estimators=rf_trees, seed=seed).fit(X_rf[trval], pairs.y[trval]).predict(X_rf[te])}
            model = MixturePredictor(network, training, n_estimators=n_estimators, seed=seed).fit(
                pairs, split, encoder, device=device, precision=precision).to(where)
            parts = model.predict_components([mix_a[i] for i in te], [mix_b[i] for i in te], [pairs.dataset[i] for i in te])
            out[PAPER], out[SHIPPED] = parts["network"], parts["combined"]
            out[SET] = (parts["trees"] + parts["ridge"]) / 2
            net, index, _ = fit(pairs, split, encoder, best_cfg, training, "embedding+mordred",
                                pair_set=pair_set, device=device, precision=precision)
            out[BEST_NET] = test_predictions(net.to(where), index, pairs, te)["pred"]
            if minimol:
                mm = MixturePredictor(network, training, n_estimators=n_estimators, seed=seed, minimol=True)
                mm.fit(pairs, split, encoder, set_regressors=False, device=device, precision=precision).to(where)
                out[PAPER_MM] = mm.predict_components(
                    [mix_a[i] for i in te], [mix_b[i] for i in te], [pairs.dataset[i] for i in te])["network"]
                net, index, _ = fit(pairs, split, encoder, best_cfg, training, "embedding+mordred",
                                    pair_set=pair_set, mol_extra=mm_rows, device=device, precision=precision)
                out[BEST_NET_MM] = test_predictions(net.to(where), index, pairs, te)["pred"]
            for method in methods:
                fold = {"y": pairs.y[te], "pred": np.asarray(out[method], np.float64), "self_pair": pairs.self_pair[te]}
                preds.setdefault((family, method), []).append(fold)
                m = pair_metrics(fold["y"], fold["pred"], fold["self_pair"])
                fold_rows.append({"family": family, "split": split.identifier, "method": method, "n_test": len(te),
                                  **{k: m[k] for k in ("all_pearson", "all_rmse", "noself_pearson", "noself_rmse")}})
            shipped = next(r for r in fold_rows[-len(methods):] if r["method"] == SHIPPED)
            shipped["weights"] = dict(zip(("network", "trees", "ridge"), model.weights.tolist(), strict=True))
            shipped["validation"] = {k: v for k, v in model.validation.items() if k.startswith("network_")}
            if progress:
                rs = ", ".join(f"{r['method'].split(' (')[0]} {r['all_pearson']:.3f}" for r in fold_rows[-len(methods):])
                print(f"[bench] {split.identifier} ({time.time() - t0:.0f}s): r {rs}", flush=True)
    rows = []
    for (family, method), fs in preds.items():
        s = summarize_folds(fs, n_boot=n_boot, seed=seed)
        rows.append({
            "family": family, "method": method, "folds": len(fs),
            "pearson": s["all_pearson"], "pearson_std": s["all_pearson_std"],
            "pearson_ci": [s["all_pearson_lo"], s["all_pearson_hi"]],
            "rmse": s["all_rmse"], "noself_pearson": s["noself_pearson"], "noself_rmse": s["noself_rmse"],
        })
    config = {
        "families": list(families), "folds_per_family": folds, "seed": seed, "network": asdict(network),
        "training": asdict(training), "set_trees": n_estimators, "rf_trees": rf_trees, "n_boot": n_boot,
        "encoder": asdict(encoder.cfg), "minimol": minimol,
    }
    return {"config": config, "rows": rows, "folds": fold_rows}


def format_table(rows: list[dict]) -> str:
    """Markdown table: one line per family x method, r (mean over folds) ± std, RMSE, r and RMSE
    without self-pairs."""
    view = [
        {
            "family": r["family"],
            "method": r["method"],
            "folds": r["folds"],
            "r": f"{r['pearson']:.3f} ± {r['pearson_std']:.3f}",
            "RMSE": f"{r['rmse']:.3f}",
            "r (no self)": f"{r['noself_pearson']:.3f}",
            "RMSE (no self)": f"{r['noself_rmse']:.3f}",
        }
        for r in rows
    ]
    return markdown_table(view)
