"""``make demo`` part of the olfaction app: minutes on 2 CPU cores.

Pretrains a small encoder on the Mordred vectors of the mixture molecules plus a slice of GS-LF,
fits a :class:`~olfaction.predictor.MixturePredictor` on ``random_cv0`` (a small distance network,
the set regressors, their weights chosen on the validation rows, and the label network on all of
GS-LF), compares it and its parts with the RF pair-feature baseline and the Snitz angle distance
on the same test rows, writes ``out_dir/olfaction.csv`` (and the same rows in ``olfaction.json``) and a scatter plot, and saves the
predictor (``out_dir/olfaction_model``; also :func:`olfaction.demo.model_dir` when that is empty)
for the demo tab.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.data_dir import resolve_data_dir
from common.device import resolve_device
from common.io import atomic_write, write_csv, write_json

from .baselines import PairForest, SnitzAngle
from .data import load_gslf, load_pairs, load_split, split_path
from .demo import model_dir
from .evaluate import regression_metrics
from .features import DescriptorScaler, compute_mordred, molecule_table
from .model import MixScentConfig, MolEncoderConfig
from .predictor import COMPONENTS, MixturePredictor
from .set_features import pair_features
from .train import DistanceTrainConfig, PretrainConfig, pretrain


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0, n_gslf: int = 300,
              device: str = "auto", precision: str = "32") -> list[dict]:
    """Train a tiny MixScentNet on one CV fold vs RF and Snitz (the networks on ``device`` in
    ``precision``); returns summary rows."""
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
    pre, rep = pretrain(corpus, X, enc_cfg, PretrainConfig(epochs=15, seed=seed), device=device, precision=precision)

    split = load_split(split_path(data_dir, "random_cv0"), len(pairs))
    predictor = MixturePredictor(
        MixScentConfig(hidden=64, heads=4), DistanceTrainConfig(epochs=40, patience=12, seed=seed), seed=seed
    ).fit(pairs, split, pre.encoder, load_gslf(data_dir), device=device, precision=precision)
    predictor.to(resolve_device(device))  # the test rows are predicted where the networks trained
    predictor.save_pretrained(out_dir / "olfaction_model", {"split": split.identifier})
    demo_model = model_dir()
    if not (demo_model / "config.json").is_file():  # the demo tab's default model
        predictor.save_pretrained(demo_model, {"split": split.identifier, "source": "run_quick"})
    te = split.testing
    mix_a, mix_b = pairs.sides()
    parts = predictor.predict_components(
        [mix_a[i] for i in te], [mix_b[i] for i in te], [pairs.dataset[i] for i in te]
    )
    trval = np.concatenate([split.training, split.validation])
    Xrf = pair_features(mix_a, mix_b, molecule_table(mix_mols))
    rf_pred = PairForest(n_estimators=100, seed=seed).fit(Xrf[trval], pairs.y[trval]).predict(Xrf[te])
    snitz_tab = {s: X[i] for i, s in enumerate(corpus) if s in set(mix_mols)}
    sn_pred = (
        SnitzAngle(snitz_tab)
        .fit([mix_a[i] for i in trval], [mix_b[i] for i in trval], pairs.y[trval])
        .predict([mix_a[i] for i in te], [mix_b[i] for i in te])
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
            "method": f"label network ({predictor.labels_cfg.features})",
            "metric": "macro_roc_auc",
            "value": predictor.validation["labels_val_macro_auc"],
            "split": "GS-LF, 10% validation molecules (the epoch is chosen on them)",
            "seed": seed,
        }
    )
    sp = pairs.self_pair[te]
    w = ", ".join(f"{c} {x:.2f}" for c, x in zip(COMPONENTS, predictor.weights, strict=True))
    for method, pred in (
        ("MixScentNet (tiny network alone)", parts["network"]),
        ("Set trees + ridge with gated partners (equal)", (parts["trees"] + parts["ridge"]) / 2),
        (f"MixturePredictor ({w}, chosen on validation rows)", parts["combined"]),
        ("RF pair features", rf_pred),
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
    write_json(out_dir / "olfaction.json", {"command": "mixscent quick", "seed": seed, "rows": rows})
    _plot(pairs.y[te], {"MixturePredictor": parts["combined"], "RF": rf_pred}, out_dir / "olfaction_scatter.png")
    return rows


def _plot(y, preds: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4 * len(preds), 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(preds), squeeze=False)
    for ax, (name, p) in zip(axes[0], preds.items(), strict=False):
        ax.scatter(y, p, s=8, alpha=0.6)
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set(title=f"{name} (random_cv0)", xlabel="experimental", ylabel="predicted")
    fig.tight_layout()
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, dpi=100, format="png")
