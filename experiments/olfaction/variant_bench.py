"""Mixture-distance benchmark: MixScentNet variants vs RF on symmetric pair features vs the Snitz
angle distance vs regressors on set-level pair features (:mod:`olfaction.set_features`), on the
POMMix split families (``random_cv0-4``, ``lso_molecules0-4``) and a strict leave-molecules-out
family, in one run. Prints a table, writes CSV/JSON and a scatter plot. The research behind
docs/experiments.md's network and ensemble lines; the product's
benchmark is ``mixscent bench`` (:mod:`olfaction.bench`).

    python -m experiments.olfaction.variant_bench --families random_cv --variants MixScentNet --out runs/v

Every metric is reported on all test pairs and without self-pairs; the epoch of each network is
chosen on the split's validation rows only (baselines train on training + validation rows).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table
from experiments.olfaction.blend_pretrain import pretrain_mixture_level
from experiments.olfaction.blends import load_blends
from experiments.olfaction.set_fits import fit_predict_rows
from olfaction.baselines import PairForest, SnitzAngle
from olfaction.data import (
    DATASETS,
    load_pairs,
    load_split,
    olf_file,
    split_path,
    strict_molecule_split,
)
from olfaction.encoder import default_encoder_dir, load_encoder
from olfaction.evaluate import pair_metrics, summarize_folds
from olfaction.features import DescriptorScaler, compute_mordred, molecule_table, scaled_molecule_table
from olfaction.mixture_index import test_predictions
from olfaction.model import MixScentConfig, MolEncoder, MolEncoderConfig
from olfaction.molecules import molecule_features
from olfaction.set_features import MoleculeSpaces, pair_features, pair_set_features
from olfaction.train import DistanceTrainConfig, fit

VARIANTS = {
    "MixScentNet": {},
    "MixScentNet (no pretraining)": {"pretrained": False},
    "MixScentNet (mean pooling)": {"conv": "none", "readout": "mean"},
    "MixScentNet (GAT)": {"conv": "gat"},
    # molecule level = pretrained embedding ++ cleaned Mordred (the pooled-descriptor signal that
    # makes the RF strong, fed through the mixture graph instead of a plain mean)
    "MixScentNet (+Mordred)": {"features": "embedding+mordred"},
    "MixScentNet (+Mordred) x5 seeds": {"features": "embedding+mordred", "seeds": 5},
    # mixture level first trained on blend odour labels (olfaction.blend_pretrain), then fine-tuned;
    # the Mordred scaler of the +Mordred one is fitted on the distance + blend molecules together
    "MixScentNet (blend-pretrained)": {"blend_pretrain": True},
    "MixScentNet (+Mordred) (blend-pretrained)": {"features": "embedding+mordred", "blend_pretrain": True},
    # hybrid: the distance head also reads the RF's pair features (standardised RDKit + Morgan)
    "MixScentNet (+pair features)": {"pair_features": True},
    "MixScentNet (+pair features) x3 seeds": {"pair_features": True, "seeds": 3},
    # the distance head also reads the set-level pair features (olfaction.set_features) and the
    # dataset one-hot, as the set-feature regressors do
    "MixScentNet (+Mordred +set features)": {"features": "embedding+mordred", "set_features": True},
    "MixScentNet (+Mordred +set features) x5 seeds": {
        "features": "embedding+mordred",
        "set_features": True,
        "seeds": 5,
    },
    # seeds 0-4 are the x5 runs (shared within a bench run), 5-9 are new
    "MixScentNet (+Mordred +set features) x10 seeds": {
        "features": "embedding+mordred",
        "set_features": True,
        "seeds": 10,
    },
}
# fixed-weight (0.5 / 0.5, chosen a priori, not on test rows) average of a network variant and RF
ENSEMBLES = {"MixScentNet (+Mordred) x5 seeds + RF": "MixScentNet (+Mordred) x5 seeds"}
RF_NAME = "RF pair features (RDKit+Morgan)"
HGB_NAME = "HGB pair features (RDKit+Morgan)"
# regressors on set-level pair features (olfaction.set_features: overlap, set distances in three
# molecule spaces, dataset, out-of-fold target encodings); fitted like RF on training + validation rows
SET_TREES_NAME = "ExtraTrees pair + set features"
SET_RIDGE_NAME = "Ridge set features x dataset"
# the same two with the common-partner features, gated: only pairs whose mixtures share a
# measured partner go through the partner-aware model (olfaction.set_models, session 14)
SET_TREES_GATED_NAME = "ExtraTrees pair + set features (gated partners)"
SET_RIDGE_GATED_NAME = "Ridge set features x dataset (gated partners)"
SET_KINDS = {
    SET_TREES_NAME: ("trees", "off"),
    SET_RIDGE_NAME: ("ridge", "off"),
    SET_TREES_GATED_NAME: ("trees", "gated"),
    SET_RIDGE_GATED_NAME: ("ridge", "gated"),
}
# equal-weight means, fixed a priori (no weights fitted): the set-feature regressors alone, and with
# a network variant (olfaction/README.md, session 13, says how the headline one was chosen)
EQUAL_MEANS = {
    "Set trees + ridge (equal)": (SET_TREES_NAME, SET_RIDGE_NAME),
    "MixScentNet (+Mordred) x5 seeds + set trees + ridge (equal)": (
        "MixScentNet (+Mordred) x5 seeds",
        SET_TREES_NAME,
        SET_RIDGE_NAME,
    ),
    "MixScentNet (+Mordred +set features) x5 seeds + set trees + ridge (equal)": (
        "MixScentNet (+Mordred +set features) x5 seeds",
        SET_TREES_NAME,
        SET_RIDGE_NAME,
    ),
    "Set trees + ridge with gated partners (equal)": (SET_TREES_GATED_NAME, SET_RIDGE_GATED_NAME),
    "MixScentNet (+Mordred +set features) x5 seeds + set trees + ridge with gated partners (equal)": (
        "MixScentNet (+Mordred +set features) x5 seeds",
        SET_TREES_GATED_NAME,
        SET_RIDGE_GATED_NAME,
    ),
    "MixScentNet (+Mordred +set features) x10 seeds + set trees + ridge with gated partners (equal)": (
        "MixScentNet (+Mordred +set features) x10 seeds",
        SET_TREES_GATED_NAME,
        SET_RIDGE_GATED_NAME,
    ),
}
# convex blends whose weights are chosen per fold on the split's validation rows only
# (:func:`stack_predictions`); RF/HGB are refitted on training rows for their validation predictions
STACKS = {
    "RF + HGB (val-weighted)": (RF_NAME, HGB_NAME),
    "MixScentNet + RF (val-weighted)": ("MixScentNet", RF_NAME),
    "MixScentNet (+pair features) + RF (val-weighted)": ("MixScentNet (+pair features)", RF_NAME),
    "MixScentNet (+pair features) x3 seeds + RF + HGB (val-weighted)": (
        "MixScentNet (+pair features) x3 seeds",
        RF_NAME,
        HGB_NAME,
    ),
    "MixScentNet (+Mordred) x5 seeds + set trees + ridge (val-weighted)": (
        "MixScentNet (+Mordred) x5 seeds",
        SET_TREES_NAME,
        SET_RIDGE_NAME,
    ),
    "MixScentNet (+Mordred +set features) x5 seeds + set trees + ridge (val-weighted)": (
        "MixScentNet (+Mordred +set features) x5 seeds",
        SET_TREES_NAME,
        SET_RIDGE_NAME,
    ),
}
FAMILIES = ("random_cv", "lso_molecules", "strict_lmo")


def random_encoder(enc_cfg: MolEncoderConfig, seed: int) -> MolEncoder:
    """An unpretrained encoder (seeded), in eval mode: the ablation without pretraining."""
    torch.manual_seed(seed)
    return MolEncoder(enc_cfg).eval()


class PairBoosting:
    """Histogram gradient-boosted trees (scikit-learn) on :func:`olfaction.set_features.pair_features`: a fixed, small
    learning rate and number of rounds (no early stopping, so no rows are held out inside)."""

    def __init__(self, max_iter: int = 300, learning_rate: float = 0.05, seed: int = 0):
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.gb = HistGradientBoostingRegressor(
            max_iter=max_iter,
            learning_rate=learning_rate,
            max_leaf_nodes=15,
            min_samples_leaf=10,
            l2_regularization=1.0,
            early_stopping=False,
            random_state=seed,
        )

    def fit(self, X: np.ndarray, y: np.ndarray) -> PairBoosting:
        self.gb.fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.gb.predict(X)


def convex_blend_weights(preds: np.ndarray, y: np.ndarray, step: float = 0.05) -> np.ndarray:
    """Weights ``w (k,)`` on the simplex grid (``w_j`` multiples of ``step``, ``sum w = 1``) that
    minimise the RMSE of ``preds (n, k) @ w`` against ``y (n,)``. Meant for validation rows only:
    the caller passes the components' validation predictions, never test rows. Ties go to the
    first grid point, which puts weight on the earlier components."""
    preds, y = np.asarray(preds, np.float64), np.asarray(y, np.float64)
    if preds.ndim != 2 or preds.shape[0] != len(y):
        raise ValueError(f"preds must be (n, k) with n = len(y) = {len(y)}, got {preds.shape}")
    n_steps = int(round(1.0 / step))
    k = preds.shape[1]
    best_w, best = None, np.inf
    for combo in _simplex(k, n_steps):
        w = np.asarray(combo, np.float64) / n_steps
        rmse = float(np.sqrt(np.mean((preds @ w - y) ** 2)))
        if rmse < best - 1e-12:
            best_w, best = w, rmse
    return best_w


def _simplex(k: int, n: int):
    """All ``k``-tuples of non-negative integers summing to ``n``, largest first entry first."""
    if k == 1:
        yield (n,)
        return
    for first in range(n, -1, -1):
        for rest in _simplex(k - 1, n - first):
            yield (first, *rest)


def family_splits(data_dir: Path, pairs, family: str, folds: int):
    if family == "strict_lmo":
        return [strict_molecule_split(pairs, seed) for seed in range(folds)]
    return [load_split(split_path(data_dir, f"{family}{f}"), len(pairs)) for f in range(folds)]


def pommix_reference_rows(data_dir: Path) -> list[dict]:
    """Published figures (``pommix_performance_metrics.csv``) as reference rows."""
    df = pd.read_csv(olf_file(data_dir, "pommix_performance_metrics.csv"))
    rows = []
    for name, g in df.groupby("fname", sort=False):
        row = {"family": "random_cv (published)", "method": str(name).replace("\n", " ") + " [published]"}
        for _, r in g.iterrows():
            row[f"all_{r['metric']}"] = float(r["mean"])
            row[f"all_{r['metric']}_lo"], row[f"all_{r['metric']}_hi"] = (
                float(r["low_ci"]),
                float(r["upper_ci"]),
            )
        rows.append(row)
    return rows


def run_bench(
    data_dir: Path,
    out_dir: Path,
    families=FAMILIES,
    folds: int = 5,
    variants=tuple(VARIANTS) + tuple(ENSEMBLES) + tuple(EQUAL_MEANS) + tuple(STACKS),
    seed: int = 0,
    mcfg: MixScentConfig | None = None,
    tcfg: DistanceTrainConfig | None = None,
    encoder_dir: Path | None = None,
    rf_trees: int = 200,
    n_boot: int = 1000,
    progress: bool = True,
) -> list[dict]:
    """Run the benchmark; returns the summary rows (one per family x method)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = load_pairs(data_dir)
    mols = sorted(pairs.molecules())
    mix_a, mix_b = pairs.sides()
    rf_table = molecule_table(mols)
    X_rf = pair_features(mix_a, mix_b, rf_table)
    desc_table, _ = scaled_molecule_table(rf_table)
    mordred = compute_mordred(mols, progress=progress)
    raw = np.stack([mordred[s] for s in mols])
    scaler = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])])
    snitz_table = dict(zip(mols, scaler.transform(raw), strict=False))
    X_set = pair_set_features(mix_a, mix_b, MoleculeSpaces(mols, mordred=mordred))
    vocabulary = sorted(set(pairs.dataset))
    pair_set = {(ka, kb): X_set[i] for i, (ka, kb) in enumerate(zip(pairs.keys_a, pairs.keys_b, strict=True))}

    def set_regressor(kind: tuple[str, str], fit_rows: np.ndarray, pred_rows: np.ndarray) -> np.ndarray:
        model, partners = kind
        return fit_predict_rows(
            model, X_rf, X_set, pairs.dataset, mix_a, mix_b, pairs.y, fit_rows, pred_rows, vocabulary, seed, partners
        )
    mcfg = mcfg or MixScentConfig()
    tcfg = tcfg or DistanceTrainConfig(seed=seed)
    enc_dir = Path(encoder_dir) if encoder_dir else default_encoder_dir()
    pretrained = load_encoder(enc_dir)
    scratch = random_encoder(
        MolEncoderConfig(**{k: getattr(pretrained.cfg, k) for k in ("hidden", "layers", "emb_dim")}), seed
    )

    blends = None  # read once, when the first blend-pretrained variant runs
    blend_feats: dict[tuple, dict] = {}  # (feature kind, encoder) -> features over distance + blend molecules
    blend_cache: dict[tuple, tuple] = {}

    def blend_init(features: str, encoder, cfg: MixScentConfig, s: int):
        """Molecule features over distance + blend molecules (once per feature kind and encoder)
        and the blend-pretrained mixture level for them (once per config and seed too); both are
        split-independent."""
        nonlocal blends
        key = (features, id(encoder), repr(cfg), s)
        if key not in blend_cache:
            if blends is None:
                blends = load_blends(data_dir)[0]
            if key[:2] not in blend_feats:
                union = sorted(set(mols) | {m for p in blends.smiles for m in p})
                blend_feats[key[:2]] = molecule_features(union, features, encoder)
            feats = blend_feats[key[:2]]
            t0 = time.time()
            state, hist = pretrain_mixture_level(feats, cfg, blends=blends, seed=s)
            if progress:
                print(
                    f"[bench] blend pretraining ({features}, seed {s}): val AUC {hist['val_auc']:.3f}, "
                    f"epoch {hist['best_epoch']}, {time.time() - t0:.0f}s",
                    flush=True,
                )
            blend_cache[key] = (feats, state)
        return blend_cache[key]

    preds: dict[tuple[str, str], list[dict]] = {}
    scatter: list[dict] = []
    dumps: list[dict] = []  # per-fold validation/test predictions of every component
    fold_rows: list[dict] = []
    for family in families:
        for split in family_splits(data_dir, pairs, family, folds):
            t0 = time.time()
            trval = np.concatenate([split.training, split.validation])
            rf = PairForest(n_estimators=rf_trees, seed=seed).fit(X_rf[trval], pairs.y[trval])
            rf_pred = rf.predict(X_rf[split.testing])
            _add(preds, family, RF_NAME, pairs, split.testing, rf_pred)
            hgb_pred = PairBoosting(seed=seed).fit(X_rf[trval], pairs.y[trval]).predict(X_rf[split.testing])
            _add(preds, family, HGB_NAME, pairs, split.testing, hgb_pred)
            sn = SnitzAngle(snitz_table).fit(
                [mix_a[i] for i in trval], [mix_b[i] for i in trval], pairs.y[trval]
            )
            _add(
                preds,
                family,
                "Snitz angle (Mordred)",
                pairs,
                split.testing,
                sn.predict([mix_a[i] for i in split.testing], [mix_b[i] for i in split.testing]),
            )
            set_test = {name: set_regressor(kind, trval, split.testing) for name, kind in SET_KINDS.items()}
            for name, pred in set_test.items():
                _add(preds, family, name, pairs, split.testing, pred)
            net_preds, val_preds = {}, {}
            fitted: dict[tuple, tuple] = {}  # (pretrained, features, pair, opts, seed) -> run, shared
            for name in [v for v in variants if v in VARIANTS]:
                opts = dict(VARIANTS[name])
                use_pretrained = opts.pop("pretrained", True)
                features = opts.pop("features", "embedding")
                use_pair = opts.pop("pair_features", False)
                n_seeds = opts.pop("seeds", 1)
                blend = opts.pop("blend_pretrain", False)
                use_set = opts.pop("set_features", False)
                if use_set:
                    opts["n_datasets"] = len(DATASETS)
                runs = []
                for k in range(n_seeds):
                    key = (use_pretrained, features, use_pair, blend, tuple(sorted(opts.items())), seed + k)
                    if key not in fitted:
                        encoder = pretrained if use_pretrained else scratch
                        feats, init = None, None
                        if blend:
                            feats, init = blend_init(features, encoder, replace(mcfg, **opts), seed + k)
                        model, index, hist = fit(
                            pairs,
                            split,
                            encoder,
                            replace(mcfg, **opts),
                            replace(tcfg, seed=seed + k),
                            features,
                            descriptors=desc_table if use_pair else None,
                            mol_features=feats,
                            mixture_init=init,
                            pair_set=pair_set if use_set else None,
                        )
                        val = hist["history"][hist["best_epoch"]] if hist["history"] else {}
                        tp = test_predictions(model, index, pairs, split.testing)
                        vp = test_predictions(model, index, pairs, split.validation)
                        fitted[key] = (tp["pred"], hist, val, vp["pred"])
                    runs.append(fitted[key])
                pred = np.mean([r[0] for r in runs], axis=0)
                net_preds[name] = pred
                val_preds[name] = np.mean([r[3] for r in runs], axis=0)
                _add(
                    preds,
                    family,
                    name,
                    pairs,
                    split.testing,
                    pred,
                    best_epoch=float(np.mean([r[1]["best_epoch"] for r in runs])),
                    val_rmse=float(np.mean([r[2].get("rmse", np.nan) for r in runs])),
                )
                if name == "MixScentNet":
                    scatter += [
                        {"family": family, "y": float(a), "pred": float(b)}
                        for a, b in zip(pairs.y[split.testing], pred, strict=False)
                    ]
            for name in [v for v in variants if v in ENSEMBLES]:
                if ENSEMBLES[name] not in net_preds:
                    raise InputError(f"ensemble {name!r} needs variant {ENSEMBLES[name]!r} in the same run")
                _add(preds, family, name, pairs, split.testing, 0.5 * (net_preds[ENSEMBLES[name]] + rf_pred))
            test_of = {RF_NAME: rf_pred, HGB_NAME: hgb_pred, **set_test, **net_preds}
            for name in [v for v in variants if v in EQUAL_MEANS]:
                missing = [c for c in EQUAL_MEANS[name] if c not in test_of]
                if missing:
                    raise InputError(f"mean {name!r} needs variant {missing[0]!r} in the same run")
                _add(preds, family, name, pairs, split.testing, np.mean([test_of[c] for c in EQUAL_MEANS[name]], 0))
            stacks = [v for v in variants if v in STACKS]
            if stacks or any(v in EQUAL_MEANS for v in variants):
                # tree baselines refitted on training rows only: their validation predictions (for
                # the stacks' weights and experiments/olfaction/validation_choice.py)
                tr = split.training
                val_preds[RF_NAME] = (
                    PairForest(n_estimators=rf_trees, seed=seed)
                    .fit(X_rf[tr], pairs.y[tr])
                    .predict(X_rf[split.validation])
                )
                val_preds[HGB_NAME] = (
                    PairBoosting(seed=seed).fit(X_rf[tr], pairs.y[tr]).predict(X_rf[split.validation])
                )
                for name, kind in SET_KINDS.items():
                    val_preds[name] = set_regressor(kind, tr, split.validation)
            for name in stacks:
                missing = [c for c in STACKS[name] if c not in test_of]
                if missing:
                    raise InputError(f"stack {name!r} needs variant {missing[0]!r} in the same run")
                pred, w = stack_predictions(
                    {c: val_preds[c] for c in STACKS[name]},
                    pairs.y[split.validation],
                    {c: test_of[c] for c in STACKS[name]},
                )
                _add(preds, family, name, pairs, split.testing, pred, weights=w.tolist())
            dumps.append(
                {
                    "family": family,
                    "split": split.identifier,
                    "validation": split.validation.tolist(),
                    "testing": split.testing.tolist(),
                    "val_pred": {k: np.asarray(v).tolist() for k, v in val_preds.items()},
                    "test_pred": {k: np.asarray(v).tolist() for k, v in test_of.items()},
                }
            )
            write_json(out_dir / "olfaction_bench_predictions.json", dumps)
            fold_rows += _fold_rows(preds, family, split.identifier)
            write_csv(out_dir / "olfaction_bench_folds.csv", fold_rows)  # per-fold metrics as they come
            if progress:
                print(f"[bench] {split.identifier}: {time.time() - t0:.0f}s", flush=True)

    rows = []
    for (family, method), folds_ in preds.items():
        summary = summarize_folds(folds_, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "family": family,
                "method": method,
                "folds": len(folds_),
                **summary,
                "best_epoch_mean": float(np.mean([f.get("best_epoch", np.nan) for f in folds_])),
                "val_rmse_mean": float(np.mean([f.get("val_rmse", np.nan) for f in folds_])),
                **({"weights_per_fold": [f["weights"] for f in folds_]} if "weights" in folds_[0] else {}),
            }
        )
    rows += pommix_reference_rows(data_dir)
    write_csv(out_dir / "olfaction_bench.csv", rows)
    write_json(
        out_dir / "olfaction_bench.json",
        {"rows": rows, "config": {"model": mcfg.__dict__, "train": tcfg.__dict__}},
    )
    _scatter_plot(scatter, out_dir / "olfaction_scatter.png")
    table = format_table(rows)
    (out_dir / "olfaction_bench.md").write_text(table)
    print(table)
    return rows


def stack_predictions(
    val_preds: dict[str, np.ndarray], y_val: np.ndarray, test_preds: dict[str, np.ndarray], step: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Convex blend of components: weights chosen on validation rows (``val_preds``, ``y_val``)
    by :func:`convex_blend_weights`, applied to ``test_preds`` (same keys). Test labels are not an
    argument, so they cannot influence the weights. Returns ``(test prediction, weights)``."""
    names = list(val_preds)
    w = convex_blend_weights(np.stack([val_preds[n] for n in names], axis=1), y_val, step)
    return np.stack([test_preds[n] for n in names], axis=1) @ w, w


def _fold_rows(preds, family: str, split_id: str) -> list[dict]:
    """Metrics of the latest fold of every method of ``family``."""
    out = []
    for (fam, method), folds in preds.items():
        if fam != family:
            continue
        f = folds[-1]
        row = {"family": family, "split": split_id, "method": method}
        row.update(pair_metrics(f["y"], f["pred"], f["self_pair"]))
        out.append(row)
    return out


def _add(preds, family, method, pairs, rows, pred, **extra):
    preds.setdefault((family, method), []).append(
        {"y": pairs.y[rows], "pred": np.asarray(pred), "self_pair": pairs.self_pair[rows], **extra}
    )


def _ci(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None:
        return ""
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{v:.3f}"


def format_table(rows: list[dict]) -> str:
    """Markdown table: Pearson/Kendall/RMSE (all pairs, pooled bootstrap 95% CI) and Pearson/RMSE
    without self-pairs."""
    view = [
        {
            "family": r["family"],
            "method": r["method"],
            "folds": r.get("folds", ""),
            "pearson": _ci(r, "all_pearson"),
            "kendall": _ci(r, "all_kendall"),
            "rmse": _ci(r, "all_rmse"),
            "pearson (no self)": _ci(r, "noself_pearson"),
            "rmse (no self)": _ci(r, "noself_rmse"),
        }
        for r in rows
    ]
    return markdown_table(view)


def _scatter_plot(points: list[dict], path: Path) -> None:
    if not points:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = sorted({p["family"] for p in points})
    fig, axes = plt.subplots(1, len(fams), figsize=(4 * len(fams), 4), squeeze=False)
    for ax, fam in zip(axes[0], fams, strict=False):
        pts = [p for p in points if p["family"] == fam]
        ax.scatter([p["y"] for p in pts], [p["pred"] for p in pts], s=6, alpha=0.5)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set(title=f"MixScentNet, {fam}", xlabel="experimental distance", ylabel="predicted")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def merge_results(run_dirs: list[Path], out_dir: Path) -> list[dict]:
    """Concatenate the summary rows of several ``run_bench`` outputs (e.g. one process per split
    family), dropping repeated (family, method) rows, and write one table/CSV."""
    from common.io import read_json

    rows, seen = [], set()
    for d in run_dirs:
        for r in read_json(Path(d) / "olfaction_bench.json")["rows"]:
            key = (r["family"], r["method"])
            if key not in seen:
                seen.add(key)
                rows.append(r)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "olfaction_bench.csv", rows)
    write_json(out_dir / "olfaction_bench.json", {"rows": rows, "merged_from": [str(d) for d in run_dirs]})
    table = format_table(rows)
    (out_dir / "olfaction_bench.md").write_text(table)
    print(table)
    return rows


def main(argv: list[str] | None = None) -> int:
    from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, positive_int
    from common.data_dir import resolve_data_dir

    @cli_main
    def run(argv):
        p = ArgumentParser(prog="python -m experiments.olfaction.variant_bench", description=__doc__.split("\n\n")[0])
        add_common_args(p, out_default="runs/olfaction_variant_bench")
        p.add_argument("--families", default="random_cv,lso_molecules,strict_lmo")
        p.add_argument("--folds", type=positive_int, default=5)
        p.add_argument("--variants", default=None, help="comma-separated subset of the variants")
        p.add_argument("--epochs", type=positive_int, default=60)
        p.add_argument("--encoder", default=None)
        p.add_argument("--merge", default=None, help="comma-separated bench output dirs to merge into --out")
        args = p.parse_args(argv)
        merge = [d for d in (args.merge or "").split(",") if d]
        check_outputs(dirs=[args.out], inputs=[args.encoder, *merge], overwrite=args.overwrite)
        if merge:
            merge_results([Path(d) for d in merge], Path(args.out))
            return 0
        known = {**VARIANTS, **ENSEMBLES, **EQUAL_MEANS, **STACKS}
        variants = tuple(v.strip() for v in args.variants.split(",")) if args.variants else tuple(known)
        unknown = [v for v in variants if v not in known]
        if unknown:
            raise InputError(f"unknown variant {unknown[0]!r}; choose from {sorted(known)}")
        run_bench(
            resolve_data_dir(args.data_dir),
            Path(args.out),
            families=tuple(args.families.split(",")),
            folds=args.folds,
            variants=variants,
            seed=args.seed,
            tcfg=DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
            encoder_dir=Path(args.encoder) if args.encoder else None,
        )
        return 0

    return run(argv)


if __name__ == "__main__":
    raise SystemExit(main())
