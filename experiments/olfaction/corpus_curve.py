"""Pretraining corpus size (extra MOSES molecules) vs held-out descriptor R² and the distance
task (docs/experiments.md: +8,000 MOSES molecules did not pay).

    python -m experiments.olfaction.corpus_curve --sizes 0,2000,8000 --out runs/olfaction_corpus

Pretraining corpus-size curve: how held-out descriptor R² and the downstream distance task grow
with the size of the extra unlabeled corpus (a nested, seeded MOSES subset) added to the
olfaction molecules, against a randomly initialised encoder in the same run.

For every size the encoder is pretrained with the same config and epochs on the olfaction
molecules plus the first ``size`` molecules of one MOSES draw (so the corpora are nested), the
held-out molecules are the same olfaction molecules every time, and the distance model (the
default MixScentNet, frozen encoder) is trained on each split with the epoch chosen on its
validation rows. Writes ``corpus_curve.csv/.json`` and ``corpus_curve.png``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, int_list, positive_int
from common.data_dir import resolve_data_dir
from common.errors import InputError
from common.io import write_csv, write_json
from common.report import markdown_table
from olfaction.data import load_pairs, load_split, split_path
from olfaction.encoder import load_encoder, pretrain_encoder
from olfaction.evaluate import pair_metrics
from olfaction.mixture_index import test_predictions
from olfaction.model import MixScentConfig, MolEncoderConfig
from olfaction.molecules import olfaction_molecules
from olfaction.train import DistanceTrainConfig, PretrainConfig, fit

from .moses import moses_descriptors, moses_subset
from .variant_bench import random_encoder


def _downstream(pairs, splits, encoder, mcfg, tcfg) -> dict:
    """Mean over ``splits`` of the test metrics (all pairs and without self-pairs)."""
    per = []
    for split in splits:
        model, index, _ = fit(pairs, split, encoder, mcfg, tcfg)
        tp = test_predictions(model, index, pairs, split.testing)
        per.append(pair_metrics(tp["y"], tp["pred"], tp["self_pair"]))
    return {k: float(np.mean([p[k] for p in per])) for k in per[0]}


def run_corpus_curve(
    data_dir: Path,
    out_dir: Path,
    sizes: tuple[int, ...] = (0, 2000, 8000),
    splits: tuple[str, ...] = ("random_cv0",),
    pretrain: PretrainConfig | None = None,
    tcfg: DistanceTrainConfig | None = None,
    enc_cfg: MolEncoderConfig | None = None,
    seed: int = 0,
    moses_file: Path | None = None,
    progress: bool = True,
    nproc: int = 1,
) -> list[dict]:
    """One row per corpus size plus a ``random encoder`` row; returns the rows."""
    if not sizes or any(s < 0 for s in sizes):
        raise InputError(f"corpus sizes must be a non-empty list of integers >= 0, got {list(sizes)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pretrain = replace(pretrain or PretrainConfig(), seed=seed)
    tcfg = tcfg or DistanceTrainConfig(seed=seed)
    enc_cfg = enc_cfg or MolEncoderConfig()
    mcfg = MixScentConfig()
    pairs = load_pairs(data_dir)
    split_objs = [load_split(split_path(data_dir, name), len(pairs)) for name in splits]
    corpus = moses_subset(max(sizes), seed=seed, path=moses_file, exclude=set(olfaction_molecules(data_dir)))

    rows = []
    scratch = random_encoder(enc_cfg, seed)
    rows.append(
        {
            "encoder": "random (no pretraining)",
            "extra_molecules": 0,
            **_downstream(pairs, split_objs, scratch, mcfg, tcfg),
        }
    )
    for size in sorted(set(sizes)):
        enc_dir = out_dir / f"encoder_moses{size}"
        report = pretrain_encoder(
            enc_dir,
            enc_cfg,
            pretrain,
            extra_descriptors=moses_descriptors(corpus[:size], progress=progress, nproc=nproc),
        )
        metrics = _downstream(pairs, split_objs, load_encoder(enc_dir), mcfg, tcfg)
        rows.append(
            {
                "encoder": f"pretrained, olfaction + {size} MOSES",
                "extra_molecules": size,
                "n_pretrain": report["n_train"],
                "r2_heldout": report.get("r2_heldout"),
                "r2_probe": report.get("r2_heldout_pretrained_probe"),
                "r2_probe_random": report.get("r2_heldout_random_encoder"),
                **metrics,
            }
        )
        if progress:
            print(
                f"[corpus-curve] +{size}: R2 {report.get('r2_heldout'):.3f}, r {metrics['all_pearson']:.3f}",
                flush=True,
            )
        write_csv(out_dir / "corpus_curve.csv", rows)  # partial results as they come
    meta = {"splits": list(splits), "seed": seed, "pretrain": pretrain.__dict__, "train": tcfg.__dict__}
    write_csv(out_dir / "corpus_curve.csv", rows)
    write_json(out_dir / "corpus_curve.json", {"rows": rows, "config": meta})
    _plot(rows, out_dir / "corpus_curve.png")
    print(
        markdown_table(
            rows,
            ["encoder", "n_pretrain", "r2_heldout", "r2_probe", "all_pearson", "all_rmse", "noself_pearson"],
        )
    )
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pre = [r for r in rows if "r2_heldout" in r]
    x = [r["extra_molecules"] for r in pre]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].plot(x, [r["r2_heldout"] for r in pre], "o-")
    axes[0].set(xlabel="extra MOSES molecules", ylabel="held-out Mordred R²", title="pretraining")
    axes[1].plot(x, [r["all_pearson"] for r in pre], "o-", label="pretrained")
    axes[1].axhline(rows[0]["all_pearson"], color="grey", ls="--", label="random encoder")
    axes[1].set(xlabel="extra MOSES molecules", ylabel="test Pearson r", title="distance task")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

@cli_main
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m experiments.olfaction.corpus_curve", description=__doc__.split("\n\n")[0])
    add_common_args(p, out_default="runs/olfaction_corpus")
    p.add_argument("--sizes", type=int_list(0), default="0,2000,8000", help="comma-separated extra MOSES corpus sizes")
    p.add_argument("--splits", default="random_cv0", help="comma-separated split names for the downstream task")
    p.add_argument("--pretrain-epochs", type=positive_int, default=40)
    p.add_argument("--nproc", type=positive_int, default=1, help="Mordred worker processes for the MOSES molecules")
    p.add_argument("--epochs", type=positive_int, default=60)
    p.add_argument("--moses-file", default=None, help="MOSES train.csv.gz (default: the molsets package's)")
    args = p.parse_args(argv)
    check_outputs(dirs=[args.out], inputs=[args.moses_file], overwrite=args.overwrite)
    from olfaction.train import DistanceTrainConfig, PretrainConfig

    run_corpus_curve(
        resolve_data_dir(args.data_dir),
        Path(args.out),
        sizes=args.sizes,
        splits=tuple(x.strip() for x in args.splits.split(",") if x.strip()),
        pretrain=PretrainConfig(epochs=args.pretrain_epochs, seed=args.seed),
        tcfg=DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
        seed=args.seed,
        moses_file=Path(args.moses_file) if args.moses_file else None,
        nproc=args.nproc,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
