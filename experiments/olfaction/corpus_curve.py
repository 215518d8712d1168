"""Pretraining corpus size (extra MOSES molecules) vs held-out descriptor R² and the distance
task (docs/experiments.md: +8,000 MOSES molecules did not pay). Formerly ``mixscent corpus-curve``.

    python -m experiments.olfaction.corpus_curve --sizes 0,2000,8000 --out runs/olfaction_corpus
"""

from __future__ import annotations

import sys
from pathlib import Path

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, int_list, positive_int
from common.data_dir import resolve_data_dir


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
    from olfaction.corpus_curve import run_corpus_curve
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
