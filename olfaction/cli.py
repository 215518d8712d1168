"""``mixscent`` command line: featurize | pretrain | train | eval | predict | labels | white | bench |
label-bench | corpus-curve | quick.

Thin layer: parses arguments, calls :mod:`olfaction.pipeline` / :mod:`olfaction.bench`, formats.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from common.cli import (
    ArgumentParser,
    add_common_args,
    check_outputs,
    cli_main,
    int_list,
    nonneg_int,
    positive_int,
)
from common.data_dir import resolve_data_dir
from common.errors import DataError, InputError
from common.io import write_csv, write_json


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="mixscent", description="MixScentNet: mixture odour prediction")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("featurize", help="compute and cache Mordred 2D descriptors")
    add_common_args(s)
    s.add_argument("--limit", type=positive_int, default=None, help="only the first N molecules (mixtures first)")
    s.add_argument("--nproc", type=positive_int, default=1, help="Mordred worker processes")

    s = sub.add_parser("pretrain", help="self-supervised Mordred pretraining of the molecule encoder")
    add_common_args(s)
    s.add_argument("--epochs", type=positive_int, default=25)
    s.add_argument("--encoder", default=None, help="output directory (default: cache dir/encoder)")
    s.add_argument("--moses", type=nonneg_int, default=0, help="add N filtered MOSES molecules (seeded subset)")
    s.add_argument("--moses-file", default=None, help="MOSES train.csv.gz (default: the molsets package's)")

    for name, helptext in (
        ("train", "train the distance model on a split"),
        ("eval", "train on a split and report test metrics"),
    ):
        s = sub.add_parser(name, help=helptext)
        add_common_args(s)
        s.add_argument("--split", default="random_cv0", help="split JSON path, or a name under splits/")
        s.add_argument("--encoder", default=None, help="pretrained encoder directory")
        s.add_argument("--epochs", type=positive_int, default=60)
        s.add_argument("--model", default=None, help="(eval) evaluate this saved model instead of training")
        s.add_argument(
            "--pair-features",
            action="store_true",
            help="hybrid: the distance head also reads RDKit+Morgan pair features (the RF's)",
        )
        if name == "eval":
            s.add_argument(
                "--set-regressors",
                action="store_true",
                help="also fit the set-feature regressors (trees, ridge) on training + validation rows and "
                "report them, their equal mean and the equal mean with the network",
            )
            _add_partners_arg(s)

    s = sub.add_parser("predict", help="distance between two mixtures, or a DREAM-format CSV")
    add_common_args(s)
    s.add_argument("--model", default=None, help="directory written by `mixscent train --out`")
    s.add_argument("--mix1", help="';'-separated SMILES")
    s.add_argument("--mix2", help="';'-separated SMILES")
    s.add_argument("--csv", help="CSV with Dataset,Mixture_1,Mixture_2 (mixture labels)")
    s.add_argument(
        "--set-regressors",
        action="store_true",
        help="predict with the set-feature regressors (trees + ridge, fitted on all labelled pairs on the fly), "
        "averaged with --model when given (equal weights)",
    )
    s.add_argument("--dataset", default=None, help="experiment of --mix1/--mix2 (needed with --set-regressors)")
    _add_partners_arg(s)

    s = sub.add_parser("labels", help="top odour labels of a mixture")
    add_common_args(s)
    s.add_argument("--model", required=True)
    s.add_argument("--mix", required=True, help="';'-separated SMILES")
    s.add_argument("--top", type=positive_int, default=5)

    s = sub.add_parser("white", help="olfactory white: predicted distance vs number of components")
    add_common_args(s, out_default="runs/olfaction_white")
    s.add_argument("--model", required=True)
    s.add_argument("--max-n", type=positive_int, default=40)
    s.add_argument("--samples", type=positive_int, default=30)

    s = sub.add_parser("bench", help="full benchmark vs baselines (table + CSV)")
    add_common_args(s, out_default="runs/olfaction_bench")
    s.add_argument("--families", default="random_cv,lso_molecules,strict_lmo")
    s.add_argument("--folds", type=positive_int, default=5)
    s.add_argument("--variants", default=None, help="comma-separated subset of MixScentNet variants")
    s.add_argument("--epochs", type=positive_int, default=60)
    s.add_argument("--encoder", default=None)
    s.add_argument("--merge", default=None, help="comma-separated bench output dirs to merge into --out")

    s = sub.add_parser("label-bench", help="GS-LF stratified CV and blend-pair label benchmark")
    add_common_args(s, out_default="runs/olfaction_labels")
    s.add_argument("--tasks", default="gslf,blends", help="comma-separated: gslf, blends")
    s.add_argument("--folds", type=positive_int, default=5)
    s.add_argument("--encoder", default=None)
    s.add_argument(
        "--gslf-features",
        default="embedding,embedding+mordred",
        help="comma-separated GS-LF label models: a feature kind (embedding, mordred, embedding+mordred),"
        " optionally + /moe, optionally + *N (N seeds averaged); rf (random forest on Mordred ++ Morgan);"
        " ensemble[:rank|:prob]=member[:weight]&member... (fixed weights, rest shared equally)",
    )
    s.add_argument("--rf-trees", type=positive_int, default=None, help="trees of the GS-LF rf model (default 100)")
    s.add_argument("--blend-features", default="embedding+mordred")
    s.add_argument("--blend-splits", default="moldisjoint,authors")
    s.add_argument("--max-train", type=positive_int, default=None, help="subsample training blend pairs")
    s.add_argument("--epochs", type=positive_int, default=None)

    s = sub.add_parser("corpus-curve", help="pretraining corpus size (MOSES) vs R² and distance task")
    add_common_args(s, out_default="runs/olfaction_corpus")
    s.add_argument(
        "--sizes", type=int_list(0), default="0,2000,8000", help="comma-separated extra MOSES corpus sizes"
    )
    s.add_argument(
        "--splits", default="random_cv0", help="comma-separated split names for the downstream task"
    )
    s.add_argument("--pretrain-epochs", type=positive_int, default=40)
    s.add_argument("--nproc", type=positive_int, default=1, help="Mordred worker processes for the MOSES molecules")
    s.add_argument("--epochs", type=positive_int, default=60)
    s.add_argument("--moses-file", default=None, help="MOSES train.csv.gz (default: the molsets package's)")

    s = sub.add_parser("quick", help="minutes-long demo run: one fold, tiny model vs RF")
    add_common_args(s, out_default="runs/olfaction_quick")
    return p


def _split(data_dir: Path, value: str, n_rows: int):
    from .data import load_split, split_path

    path = Path(value)
    if not path.suffix:
        path = split_path(data_dir, value)
    return load_split(path, n_rows)


def _check_io(args) -> None:
    """Check every path ``args.cmd`` writes (and that none is one it reads) before any work."""
    from .pipeline import default_encoder_dir

    cmd = args.cmd
    if cmd == "train" and not args.out:
        raise InputError("train needs --out DIR for the model")
    inputs = [getattr(args, k, None) for k in ("model", "moses_file", "csv")]
    if cmd != "pretrain":
        inputs.append(getattr(args, "encoder", None))
    if cmd in ("train", "eval") and Path(args.split).suffix:
        inputs.append(args.split)
    if cmd == "bench" and args.merge:
        inputs += [d for d in args.merge.split(",") if d]
    files, dirs = [], []
    if cmd == "pretrain":
        dirs.append(args.encoder or default_encoder_dir())
    elif cmd in ("eval", "predict"):
        files.append(args.out)
    elif cmd in ("train", "white", "bench", "label-bench", "corpus-curve", "quick"):
        dirs.append(args.out)
    check_outputs(files=files, dirs=dirs, inputs=inputs, overwrite=args.overwrite)


def _encoder(value):
    from .pipeline import default_encoder_dir, load_encoder

    return load_encoder(Path(value) if value else default_encoder_dir())


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "partners"):
        from .set_models import DEFAULT_PARTNERS, partner_mode

        args.partners = partner_mode(args.partners or DEFAULT_PARTNERS)  # fails before any training
    _check_io(args)
    from . import pipeline
    from .data import load_pairs
    from .model import MixScentConfig, MolEncoderConfig
    from .train import DistanceTrainConfig, PretrainConfig

    if args.cmd == "featurize":
        print(pipeline.featurize(resolve_data_dir(args.data_dir), limit=args.limit, nproc=args.nproc))
        return 0
    if args.cmd == "pretrain":
        out = Path(args.encoder) if args.encoder else pipeline.default_encoder_dir()
        data_dir = resolve_data_dir(args.data_dir)
        extra = []
        if args.moses:
            from .moses import moses_subset

            moses_file = Path(args.moses_file) if args.moses_file else None
            exclude = set(pipeline.olfaction_molecules(data_dir))
            extra = moses_subset(args.moses, seed=args.seed, path=moses_file, exclude=exclude)
        report = pipeline.pretrain_encoder(
            out, MolEncoderConfig(), PretrainConfig(epochs=args.epochs, seed=args.seed), extra_smiles=extra
        )
        print({**report, "encoder": str(out)})
        return 0
    if args.cmd in ("train", "eval"):
        data_dir = resolve_data_dir(args.data_dir)
        pairs = load_pairs(data_dir)
        split = _split(data_dir, args.split, len(pairs))
        if args.cmd == "eval" and args.model:
            metrics = pipeline.evaluate_on_split(
                pipeline.MixScentPredictor.load(Path(args.model)), pairs, split
            )
        else:
            desc, scaler = (
                pipeline.pair_descriptors(sorted(pairs.molecules())) if args.pair_features else (None, None)
            )
            model, index, hist = pipeline.train_distance(
                pairs,
                split,
                _encoder(args.encoder),
                MixScentConfig(),
                DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
                descriptors=desc,
            )
            predictor = pipeline.MixScentPredictor(model, pair_scaler=scaler)
            metrics = pipeline.evaluate_on_split(predictor, pairs, split)
            metrics["best_epoch"] = hist["best_epoch"]
            if args.cmd == "train":
                predictor.save(Path(args.out), {"split": split.identifier, "metrics": metrics})
        if args.cmd == "eval" and args.set_regressors:
            from .set_models import evaluate_set_regressors

            network = predictor if not args.model else pipeline.MixScentPredictor.load(Path(args.model))
            net_pred = pipeline.predict_rows(network, pairs, split.testing)
            metrics.update(
                evaluate_set_regressors(pairs, split, args.seed, {"network": net_pred}, partners=args.partners)
            )
        metrics["split"] = split.identifier
        for k, v in metrics.items():
            print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
        if args.cmd == "eval" and args.out:
            write_json(Path(args.out), metrics)
        return 0
    if args.cmd == "predict":
        if not args.model and not args.set_regressors:
            raise InputError("predict needs --model DIR, --set-regressors, or both")
        rows = _read_pairs_csv(Path(args.csv)) if args.csv else None  # fails before the model loads
        predictor = pipeline.MixScentPredictor.load(Path(args.model)) if args.model else None
        if rows is not None:
            return _predict_csv(predictor, rows, args)
        if not args.mix1 or not args.mix2:
            raise InputError("predict needs --mix1 and --mix2, or --csv")
        from .data import parse_mixture_text

        if args.set_regressors and not args.dataset:
            raise InputError("predict --set-regressors with --mix1/--mix2 needs --dataset (the experiment)")
        a, b = parse_mixture_text(args.mix1, "mixture 1"), parse_mixture_text(args.mix2, "mixture 2")
        d = _distances(predictor, [a], [b], [args.dataset or ""], args)[0]
        print(f"{d:.4f}")
        return 0
    if args.cmd == "labels":
        from .data import parse_mixture_text

        predictor = pipeline.MixScentPredictor.load(Path(args.model))
        if predictor.label_model is None:
            raise InputError(f"model {args.model} has no label head")
        for name, prob in predictor.top_labels(parse_mixture_text(args.mix), k=args.top):
            print(f"{name}\t{prob:.3f}")
        return 0
    if args.cmd == "white":
        from .white import olfactory_white, plot_white, white_trend

        predictor = pipeline.MixScentPredictor.load(Path(args.model))
        pool = sorted(load_pairs(resolve_data_dir(args.data_dir)).molecules())
        rows = olfactory_white(predictor, pool, range(1, args.max_n + 1), args.samples, args.seed)
        trend = white_trend(rows)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "white.csv", rows)
        write_json(out / "white_trend.json", trend)
        plot_white(rows, out / "white.png")
        for r in rows[:: max(1, len(rows) // 8)]:
            print(f"n={r['n']:>2}  distance {r['mean_distance']:.3f} ± {r['std_distance']:.3f}")
        print(trend)
        return 0
    if args.cmd == "bench":
        from .bench import ENSEMBLES, EQUAL_MEANS, STACKS, VARIANTS, merge_results, run_bench

        if args.merge:
            merge_results([Path(d) for d in args.merge.split(",")], Path(args.out))
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
    if args.cmd == "label-bench":
        from .label_bench import run_label_bench

        def _list(v: str) -> tuple[str, ...]:
            return tuple(x.strip() for x in v.split(",") if x.strip())

        kinds = _list(args.gslf_features) + _list(args.blend_features)
        run_label_bench(
            resolve_data_dir(args.data_dir),
            Path(args.out),
            _encoder(args.encoder) if any("embedding" in k for k in kinds) else None,
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
    if args.cmd == "corpus-curve":
        from .corpus_curve import run_corpus_curve

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
    if args.cmd == "quick":
        from .quick import run_quick

        rows = run_quick(Path(args.out), resolve_data_dir(args.data_dir), seed=args.seed)
        from common.report import markdown_table

        print(markdown_table(rows))
        return 0
    return 2


def _add_partners_arg(parser) -> None:
    # no `choices` here: they live in set_models (sklearn), which `mixscent --help` does not import;
    # main() checks the value with set_models.partner_mode
    parser.add_argument(
        "--partners",
        default=None,
        help="common-partner features of the set regressors: off, on, or gated (only pairs whose mixtures "
        "share a measured partner use them; the default)",
    )


def _distances(predictor, mix_a, mix_b, datasets, args):
    """The network's distances, the set regressors' (``--set-regressors``), or their equal mean:
    (network + trees + ridge) / 3, the structure of the bench's headline mean."""
    if not args.set_regressors:
        return predictor.distances(mix_a, mix_b, datasets)
    from .data import load_pairs
    from .set_models import fit_predict_new_pairs

    pairs = load_pairs(resolve_data_dir(args.data_dir))
    set_mean = fit_predict_new_pairs(pairs, mix_a, mix_b, datasets, args.seed, args.partners)  # (trees + ridge) / 2
    if predictor is None:
        return set_mean
    return (2.0 * set_mean + predictor.distances(mix_a, mix_b, datasets)) / 3.0


def _read_pairs_csv(path: Path) -> list[dict]:
    """Rows of a DREAM-format CSV (``Dataset,Mixture_1,Mixture_2``); DataError naming the file and
    the problem (missing, not UTF-8, malformed, no rows, a short row)."""
    need = ("Dataset", "Mixture_1", "Mixture_2")
    if not path.is_file():
        raise DataError(f"CSV not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = reader.fieldnames or []
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"malformed CSV {path}: {exc}") from None
    if not columns:
        raise DataError(f"{path} is empty (expected a header {','.join(need)})")
    missing = [c for c in need if c not in columns]
    if missing:
        raise DataError(f"{path} needs columns {list(need)}; missing {missing}")
    if not rows:
        raise DataError(f"{path} has a header but no rows")
    for i, row in enumerate(rows, start=2):
        empty = [c for c in need if not (row.get(c) or "").strip()]
        if empty:
            raise DataError(f"{path} line {i}: no value for {empty[0]}")
    return rows


def _predict_csv(predictor, rows: list[dict], args) -> int:
    """DREAM submission format: reads ``Dataset,Mixture_1,Mixture_2``, writes the same rows plus
    ``Predicted_Experimental_Values`` to ``--out`` (or stdout)."""
    from .data import load_mixtures, resolve_mixture

    mixtures = load_mixtures(resolve_data_dir(args.data_dir))
    a = [resolve_mixture(mixtures, r["Dataset"], r["Mixture_1"]) for r in rows]
    b = [resolve_mixture(mixtures, r["Dataset"], r["Mixture_2"]) for r in rows]
    pred = _distances(predictor, a, b, [r["Dataset"] for r in rows], args)
    out_rows = [
        {
            "Dataset": r["Dataset"],
            "Mixture_1": r["Mixture_1"],
            "Mixture_2": r["Mixture_2"],
            "Predicted_Experimental_Values": float(p),
        }
        for r, p in zip(rows, pred, strict=False)
    ]
    if args.out:
        write_csv(Path(args.out), out_rows)
    else:
        w = csv.DictWriter(sys.stdout, fieldnames=list(out_rows[0]))
        w.writeheader()
        w.writerows(out_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
