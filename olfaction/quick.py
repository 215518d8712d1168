"""``make demo`` part of the olfaction app: minutes on 2 CPU cores.

Pretrains a small encoder on the Mordred vectors of the mixture molecules plus a slice of GS-LF,
trains MixScentNet on ``random_cv0`` (epoch chosen on its validation rows), compares it with the
RF pair-feature baseline, the set-feature regressors (trees + ridge, equal mean) and the Snitz
angle distance on the same test rows, writes
``out_dir/olfaction.csv`` and a scatter plot, and saves the model (``out_dir/olfaction_model``)
for the demo tab.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.data_dir import resolve_data_dir
from common.io import write_csv

from .baselines import PairForest, SnitzAngle, molecule_table, pair_features
from .data import load_gslf, load_pairs, load_split, split_path
from .evaluate import regression_metrics
from .features import DescriptorScaler, cache_dir, compute_mordred
from .model import MixScentConfig, MolEncoderConfig
from .pipeline import MixScentPredictor, test_predictions, train_distance
from .set_features import MoleculeSpaces, pair_set_features
from .set_models import DEFAULT_PARTNERS, fit_predict_set_mean
from .train import DistanceTrainConfig, PretrainConfig, pretrain_descriptors


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0, n_gslf: int = 300) -> list[dict]:
    """Train a tiny MixScentNet on one CV fold vs RF and Snitz; returns summary rows."""
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data_dir = resolve_data_dir(data_dir)
    pairs = load_pairs(data_dir)
    mix_mols = sorted(pairs.molecules())
    corpus = list(dict.fromkeys(mix_mols + load_gslf(data_dir).smiles[:n_gslf]))
    table = compute_mordred(corpus, progress=False)
    raw = np.stack([table[s] for s in corpus])
    scaler = DescriptorScaler.fit(raw, [str(i) for i in range(raw.shape[1])])
    X = scaler.transform(raw)
    enc_cfg = MolEncoderConfig(hidden=64, layers=3, emb_dim=64)
    pre, rep = pretrain_descriptors(corpus, X, enc_cfg, PretrainConfig(epochs=15, seed=seed))

    split = load_split(split_path(data_dir, "random_cv0"), len(pairs))
    model, index, hist = train_distance(
        pairs,
        split,
        pre.encoder,
        MixScentConfig(hidden=64, heads=4),
        DistanceTrainConfig(epochs=40, patience=12, seed=seed),
    )
    tp = test_predictions(model, index, pairs, split.testing)
    label_model, label_names, label_auc = _tiny_label_model(data_dir, pre.encoder, seed)
    predictor = MixScentPredictor(model, label_model, label_names)
    predictor.save(out_dir / "olfaction_model", {"split": split.identifier})
    if not (cache_dir() / "model" / "config.json").is_file():  # the demo tab's default model
        predictor.save(cache_dir() / "model", {"split": split.identifier, "source": "run_quick"})

    mix_a, mix_b = pairs.sides()
    trval = np.concatenate([split.training, split.validation])
    te = split.testing
    Xrf = pair_features(mix_a, mix_b, molecule_table(mix_mols))
    rf_pred = PairForest(n_estimators=100, seed=seed).fit(Xrf[trval], pairs.y[trval]).predict(Xrf[te])
    snitz_tab = {s: X[i] for i, s in enumerate(corpus) if s in set(mix_mols)}
    sn_pred = (
        SnitzAngle(snitz_tab)
        .fit([mix_a[i] for i in trval], [mix_b[i] for i in trval], pairs.y[trval])
        .predict([mix_a[i] for i in te], [mix_b[i] for i in te])
    )
    X_set = pair_set_features(mix_a, mix_b, MoleculeSpaces(mix_mols, mordred=table))
    set_pred = fit_predict_set_mean(
        Xrf, X_set, pairs.dataset, mix_a, mix_b, pairs.y, trval, te, seed=seed, partners=DEFAULT_PARTNERS
    )
    rows = [
        {
            "app": "olfaction",
            "task": "pretrain",
            "method": "MolEncoder (Mordred)",
            "metric": "heldout_R2",
            "value": rep.get("r2_heldout", float("nan")),
            "split": f"{rep['n_heldout']} held-out molecules",
            "seed": seed,
        }
    ]
    rows.append(
        {
            "app": "olfaction",
            "task": "GS-LF labels (1 component)",
            "method": "MixScentNet label head (tiny)",
            "metric": "macro_roc_auc",
            "value": label_auc,
            "split": "GS-LF 2000-molecule slice, 25% held out",
            "seed": seed,
        }
    )
    sp = pairs.self_pair[te]
    for method, pred in (
        ("MixScentNet (tiny)", tp["pred"]),
        ("RF pair features", rf_pred),
        ("Set trees + ridge with gated partners (equal)", set_pred),
        ("Snitz angle", sn_pred),
    ):
        for tag, keep in (("", np.ones(len(te), bool)), ("_noself", ~sp)):
            m = regression_metrics(pairs.y[te][keep], pred[keep])
            for metric in ("pearson", "rmse"):
                rows.append(
                    {
                        "app": "olfaction",
                        "task": "mixture distance",
                        "method": method,
                        "metric": metric + tag,
                        "value": m[metric],
                        "split": "random_cv0",
                        "seed": seed,
                    }
                )
    write_csv(out_dir / "olfaction.csv", rows)
    _plot(pairs.y[te], {"MixScentNet": tp["pred"], "RF": rf_pred}, out_dir / "olfaction_scatter.png")
    return rows


def _tiny_label_model(data_dir: Path, encoder, seed: int, n: int = 2000):
    """Label head on the frozen encoder, trained on a seeded GS-LF slice (a mixture of one)."""
    from dataclasses import asdict

    from .evaluate import macro_roc_auc
    from .model import MixScentNet
    from .train import LabelTrainConfig, MixtureIndex, encode_molecules, fit_labels, predict_labels

    gs = load_gslf(data_dir)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(len(gs.smiles))[:n]
    smiles = [gs.smiles[i] for i in ids]
    y = gs.y[ids]
    index = MixtureIndex({s: (s,) for s in smiles}, encode_molecules(encoder, smiles))
    torch.manual_seed(seed)
    net = MixScentNet(
        MixScentConfig(
            in_dim=encoder.cfg.emb_dim, hidden=64, n_labels=y.shape[1], mol_encoder=asdict(encoder.cfg)
        )
    )
    net.mol_encoder.load_state_dict(encoder.state_dict())
    n_te, n_va = n // 4, n // 8
    fit_labels(
        net,
        index,
        y,
        np.arange(n_te + n_va, n),
        np.arange(n_te, n_te + n_va),
        LabelTrainConfig(epochs=20, seed=seed),
    )
    auc = macro_roc_auc(y[:n_te], predict_labels(net, index, np.arange(n_te)))
    return net, gs.labels, auc


def _plot(y, preds: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(preds), figsize=(4 * len(preds), 4), squeeze=False)
    for ax, (name, p) in zip(axes[0], preds.items(), strict=False):
        ax.scatter(y, p, s=8, alpha=0.6)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set(title=f"{name} (random_cv0)", xlabel="experimental", ylabel="predicted")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
