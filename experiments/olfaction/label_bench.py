"""Label benchmarks (GS-LF stratified CV, blend-pair labels) of MixScentNet label variants,
seed averages and rank ensembles against logreg / RF baselines: the research behind the GS-LF
0.89 and blend 0.80 figures (docs/experiments.md). Formerly ``mixscent label-bench``.

    python -m experiments.olfaction.label_bench --tasks gslf --out runs/olfaction_labels
"""

from __future__ import annotations

import sys
from pathlib import Path

from common.cli import ArgumentParser, add_common_args, check_outputs, cli_main, positive_int
from common.data_dir import resolve_data_dir


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
    from olfaction.label_bench import run_label_bench
    from olfaction.pipeline import default_encoder_dir, load_encoder

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
