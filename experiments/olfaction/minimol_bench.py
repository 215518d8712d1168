"""With / without MiniMol v1 embeddings (olfaction.minimol) in the olfaction models, one run.

Parts (``--parts``):

- ``set``: the set-feature regressors (extra trees + ridge, gated partners, as the product fits
  them; ``--n-estimators`` trees) with and without a MiniMol molecule space: set distances (chamfer, matching, mean gap,
  angle, mean pairwise; whole sets and differing components) in standardised MiniMol space
  (``+mm set``) and, for the trees, the RF-style pair features of mixture-mean MiniMol vectors
  (``+mm pair``). RF on pair features in the same folds.
- ``network``: the MixScentNet mixture level (GATv2 + attention readout, distance head) fed the
  frozen Mordred-pretrained GNN embedding, that ++ standardised MiniMol, and MiniMol alone. The
  encoder is the ``mixscent quick``-size one (64-d, 15 epochs on the mixture molecules + 300
  GS-LF molecules' Mordred vectors), pretrained once here.
- ``labels``: GS-LF odour labels on one seeded 80/10/10 molecule split: 20-NN label average
  (cosine of z-scored MiniMol vs Morgan-2048 Tanimoto) and the product's label network (Morgan
  log1p counts vs raw MiniMol vs both; epoch on the validation molecules).

Every distance method is scored on each fold's validation rows (fitted on training rows: the
numbers to choose with) and on its test rows (fitted on training + validation rows, networks with
the epoch chosen on validation rows: the numbers to report). Molecule scalers are label-free.

    python -m experiments.olfaction.minimol_bench --out docs/results/olfaction/minimol_bench.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from common.data_dir import resolve_data_dir
from common.io import write_json
from experiments.olfaction.label_bench import predict_labels as net_label_scores
from olfaction.baselines import PairForest
from olfaction.data import load_gslf, load_pairs, load_split, split_path, strict_molecule_split
from olfaction.evaluate import macro_roc_auc, regression_metrics
from olfaction.features import DescriptorScaler, compute_mordred, molecule_table, morgan_counts
from olfaction.labels import LabelTrainConfig, fit_labels
from olfaction.minimol import minimol_table
from olfaction.mixture_index import MixtureIndex, test_predictions
from olfaction.model import MixScentConfig, MolEncoderConfig
from olfaction.molecules import encode_molecules
from olfaction.set_features import (
    SET_DISTANCES,
    MoleculeSpaces,
    pair_features,
    pair_set_features,
    set_distances,
)
from olfaction.set_models import KINDS, SetFeatureRegressor
from olfaction.train import DistanceTrainConfig, PretrainConfig, fit, pretrain

FAMILIES = ("random_cv", "strict_lmo", "lso_molecules")


def family_splits(data_dir, pairs, family: str, folds: int):
    if family == "strict_lmo":
        return [strict_molecule_split(pairs, seed) for seed in range(folds)]
    return [load_split(split_path(data_dir, f"{family}{f}"), len(pairs)) for f in range(folds)]


def standardised(table: dict[str, np.ndarray], mols) -> dict[str, np.ndarray]:
    """Columns z-scored over ``mols`` (label-free)."""
    x = np.stack([table[s] for s in mols]).astype(np.float64)
    x = (x - x.mean(0)) / np.maximum(x.std(0), 1e-6)
    return {s: x[i] for i, s in enumerate(mols)}


def minimol_set_features(mix_a, mix_b, table) -> np.ndarray:
    """``(P, 10)``: :data:`SET_DISTANCES` in MiniMol space (Euclidean) of the whole sets and of the
    differing components (0 when one side has none), symmetric like ``pair_set_features``."""
    out = []
    for a_in, b_in in zip(mix_a, mix_b, strict=True):
        a, b = sorted([tuple(sorted(set(a_in))), tuple(sorted(set(b_in)))])
        row = set_distances(np.stack([table[s] for s in a]), np.stack([table[s] for s in b]), "euclidean")
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        if only_a and only_b:
            row += set_distances(np.stack([table[s] for s in only_a]), np.stack([table[s] for s in only_b]),
                                 "euclidean")
        else:
            row += [0.0] * len(SET_DISTANCES)
        out.append(row)
    return np.asarray(out)


def _score(y, pred, self_pair) -> dict:
    m = regression_metrics(y, pred)
    n = regression_metrics(y[~self_pair], pred[~self_pair])
    return {"r": m["pearson"], "rmse": m["rmse"], "r_noself": n["pearson"]}


def _summary(folds: list[dict]) -> dict:
    keys = folds[0].keys()
    return {k: float(np.mean([f[k] for f in folds])) for k in keys} | {
        "r_std": float(np.std([f["r"] for f in folds]))
    }


def distance_parts(data_dir, families, folds, parts, seed, n_estimators, log) -> dict:
    pairs = load_pairs(data_dir)
    mols = sorted(pairs.molecules())
    mix_a, mix_b = pairs.sides()
    mm_raw = minimol_table(mols)
    mm = standardised(mm_raw, mols)
    X_rf = pair_features(mix_a, mix_b, molecule_table(mols))
    X_set = pair_set_features(mix_a, mix_b, MoleculeSpaces(mols, mordred=compute_mordred(mols, progress=False)))
    X_mm_set = minimol_set_features(mix_a, mix_b, mm)
    X_mm_pair = pair_features(mix_a, mix_b, mm)
    vocabulary = sorted(set(pairs.dataset))
    set_variants = {
        "set regressors": (X_rf, X_set),
        "set regressors +mm set": (X_rf, np.hstack([X_set, X_mm_set])),
        "set regressors +mm set +mm pair": (np.hstack([X_rf, X_mm_pair]), np.hstack([X_set, X_mm_set])),
    }

    def set_fit_predict(kind, px, sx, fit_rows, rows):
        def take(r):
            return [pairs.dataset[i] for i in r], [mix_a[i] for i in r], [mix_b[i] for i in r]

        reg = SetFeatureRegressor(kind, vocabulary, seed, n_estimators, "gated")
        reg.fit(px[fit_rows], sx[fit_rows], *take(fit_rows), pairs.y[fit_rows])
        return reg.predict(px[rows], sx[rows], *take(rows))

    encoder = None
    net_variants = {}
    if "network" in parts:
        gslf = load_gslf(data_dir).smiles
        corpus = list(dict.fromkeys(mols + gslf[:300]))
        table = compute_mordred(corpus, progress=False)
        raw = np.stack([table[s] for s in corpus])
        X = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])]).transform(raw)
        t0 = time.time()
        pre, rep = pretrain(
            corpus, X, MolEncoderConfig(hidden=64, layers=3, emb_dim=64), PretrainConfig(epochs=15, seed=seed)
        )
        encoder = pre.encoder.eval()
        log(f"encoder: held-out R2 {rep.get('r2_heldout', float('nan')):.3f}, {time.time() - t0:.0f}s")
        emb = encode_molecules(encoder, mols)
        net_variants = {
            "network (GNN)": emb,
            "network (GNN ++ MiniMol)": {s: np.concatenate([emb[s], mm[s]]).astype(np.float32) for s in mols},
            "network (MiniMol)": {s: mm[s].astype(np.float32) for s in mols},
        }
    mcfg = MixScentConfig(hidden=64, heads=4)
    tcfg = DistanceTrainConfig(epochs=40, patience=12, seed=seed)  # as `mixscent quick`

    results: dict = {}
    for family in families:
        per = {"validation": {}, "test": {}}
        for split in family_splits(data_dir, pairs, family, folds):
            t0 = time.time()
            tr, va, te = split.training, split.validation, split.testing
            trval = np.concatenate([tr, va])
            for where, fit_rows, rows in (("validation", tr, va), ("test", trval, te)):
                y, sp = pairs.y[rows], pairs.self_pair[rows]
                if where == "test":  # the reference, not a choice: test rows only
                    rf = PairForest(n_estimators=200, seed=seed).fit(X_rf[fit_rows], pairs.y[fit_rows])
                    per[where].setdefault("RF pair features", []).append(_score(y, rf.predict(X_rf[rows]), sp))
                if "set" in parts:
                    for name, (px, sx) in set_variants.items():
                        pred = np.mean([set_fit_predict(kind, px, sx, fit_rows, rows) for kind in KINDS], axis=0)
                        per[where].setdefault(name, []).append(_score(y, pred, sp))
            for name, feats in net_variants.items():
                model, index, hist = fit(pairs, split, encoder, mcfg, tcfg, "precomputed", mol_features=feats)
                for where, rows in (("validation", va), ("test", te)):
                    p = test_predictions(model, index, pairs, rows)["pred"]
                    per[where].setdefault(name, []).append(_score(pairs.y[rows], p, pairs.self_pair[rows]))
            log(f"{split.identifier}: {time.time() - t0:.0f}s  " + "  ".join(
                f"{k} {v[-1]['r']:.3f}" for k, v in per["test"].items()))
        results[family] = {where: {k: _summary(v) for k, v in d.items()} for where, d in per.items()}
    return results


def label_part(data_dir, seed, k, log, nets: bool = True) -> dict:
    gslf = load_gslf(data_dir)
    order = np.random.default_rng(seed).permutation(len(gslf.smiles))
    n = len(order)
    te, va, tr = order[: n // 10], order[n // 10 : n // 5], order[n // 5 :]
    mm_tab = minimol_table(gslf.smiles)
    mm = np.stack([mm_tab[s] for s in gslf.smiles]).astype(np.float64)
    mm_z = (mm - mm.mean(0)) / np.maximum(mm.std(0), 1e-6)
    morgan = np.stack([morgan_counts(s, 2048) for s in gslf.smiles])
    out = {"split": f"GS-LF seeded permutation (seed {seed}): {len(tr)} train / {len(va)} validation / {len(te)} test molecules"}

    def knn(sim: np.ndarray) -> np.ndarray:
        nn_idx = np.argsort(-sim, axis=1)[:, :k]
        return gslf.y[tr][nn_idx].mean(1)

    bits = (morgan > 0).astype(np.float64)
    for rows, where in ((va, "validation"), (te, "test")):
        inter = bits[rows] @ bits[tr].T
        tani = inter / (bits[rows].sum(1)[:, None] + bits[tr].sum(1)[None] - inter + 1e-9)
        unit = mm_z / np.linalg.norm(mm_z, axis=1, keepdims=True)
        cos = unit[rows] @ unit[tr].T
        out.setdefault(where, {})[f"{k}-NN Morgan-2048 Tanimoto"] = macro_roc_auc(gslf.y[rows], knn(tani))
        out[where][f"{k}-NN MiniMol cosine"] = macro_roc_auc(gslf.y[rows], knn(cos))
    log("k-NN " + "  ".join(f"{w} {name} {v:.3f}" for w in ("validation", "test") for name, v in out[w].items()))
    if not nets:
        return out
    feats = {
        "label network (Morgan log1p counts)": np.log1p(morgan),
        "label network (MiniMol)": mm,
        "label network (Morgan ++ MiniMol)": np.hstack([np.log1p(morgan), mm]),
    }
    for name, x in feats.items():
        t0 = time.time()
        table = {s: x[i].astype(np.float32) for i, s in enumerate(gslf.smiles)}
        index = MixtureIndex({s: (s,) for s in gslf.smiles}, table)
        torch.manual_seed(seed)
        from olfaction.model import MixScentNet

        net = MixScentNet(MixScentConfig(in_dim=x.shape[1], hidden=512, dropout=0.1, n_labels=len(gslf.labels)))
        hist = fit_labels(net, index, gslf.y, tr, va, LabelTrainConfig(epochs=40, patience=8, seed=seed))
        out["validation"][name] = float(hist["val_auc"])
        pos = [index.pos[gslf.smiles[i]] for i in te]
        out["test"][name] = macro_roc_auc(gslf.y[te], net_label_scores(net.eval(), index, pos))
        log(f"{name}: val {hist['val_auc']:.3f} test {out['test'][name]:.3f} ({time.time() - t0:.0f}s)")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--families", default="random_cv,strict_lmo")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--parts", default="set,network,labels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-estimators", type=int, default=300)
    ap.add_argument("--knn", type=int, default=20)
    ap.add_argument("--no-label-nets", action="store_true", help="labels part: the k-NN rows only")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    data_dir = resolve_data_dir(args.data_dir)
    parts = set(args.parts.split(","))
    start = time.time()

    def log(msg: str) -> None:
        print(f"[minimol {time.time() - start:5.0f}s] {msg}", flush=True)

    result: dict = {"command": "python -m experiments.olfaction.minimol_bench " + " ".join(argv or []),
                    "seed": args.seed, "folds": args.folds}
    if parts & {"set", "network"}:
        result["distance"] = distance_parts(
            data_dir, args.families.split(","), args.folds, parts, args.seed, args.n_estimators, log
        )
        write_json(args.out, result)
    if "labels" in parts:
        result["labels"] = label_part(data_dir, args.seed, args.knn, log, nets=not args.no_label_nets)
    result["seconds"] = time.time() - start
    write_json(args.out, result)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
