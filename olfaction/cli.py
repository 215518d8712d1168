"""``mixscent`` command line: featurize | pretrain | train | eval | predict | labels | white | bench |
quick.

Thin layer: parses arguments, calls :class:`olfaction.predictor.MixturePredictor`,
:mod:`olfaction.pipeline` / :mod:`olfaction.bench`, formats. Research commands live in
``experiments/olfaction/`` (``python -m experiments.olfaction.<name>``).
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
    positive_int,
)
from common.data_dir import resolve_data_dir
from common.errors import CheckpointError, DataError, InputError
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

    for name, helptext in (
        ("train", "train the mixture predictor (network, set regressors, label network) on a split"),
        ("eval", "test metrics of a saved predictor (--model) or of one trained on the split"),
    ):
        s = sub.add_parser(name, help=helptext)
        add_common_args(s)
        s.add_argument("--split", default="random_cv0", help="split JSON path, or a name under splits/")
        s.add_argument("--encoder", default=None, help="pretrained encoder directory (default: cache dir/encoder)")
        s.add_argument("--epochs", type=positive_int, default=60, help="distance network epochs (at most)")
        s.add_argument("--label-epochs", type=positive_int, default=40, help="label network epochs (at most)")
        s.add_argument("--minimol", action="store_true",
                       help="MiniMol v1 embeddings beside the pretrained GNN as the network's molecule input")
        s.add_argument("--label-features", default="minimol", choices=("morgan", "minimol", "morgan+minimol"),
                       help="label network molecule input (predictor.LABEL_FEATURES)")
        if name == "eval":
            s.add_argument("--model", default=None, help="evaluate this saved predictor instead of training")

    s = sub.add_parser("predict", help="distance between two mixtures, or a DREAM-format CSV")
    add_common_args(s)
    s.add_argument("--model", required=True, help="directory written by `mixscent train --out`")
    s.add_argument("--mix1", help="';'-separated SMILES")
    s.add_argument("--mix2", help="';'-separated SMILES")
    s.add_argument("--dataset", default=None, help="experiment of --mix1/--mix2 (e.g. 'Snitz 1'; see `labels`)")
    s.add_argument("--csv", help="CSV with Dataset,Mixture_1,Mixture_2 (mixture labels)")
    s.add_argument("--components", action="store_true", help="also print the network / trees / ridge distances")
    s.add_argument("--backend", choices=("auto", "onnx", "torch"), default="auto",
                   help="auto: the model folder's ONNX export without torch when present (fast start), else torch")

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
    s.add_argument("--dataset", default="Bushdid", help="experiment the distances are predicted for")

    s = sub.add_parser("bench", help="distance benchmark: RF, the networks alone, set regressors, the predictor")
    add_common_args(s, out_default="docs/results/olfaction/bench.json")
    s.add_argument("--families", default="random_cv,lso_molecules,strict_lmo,leave_dataset")
    s.add_argument("--folds", type=positive_int, default=5, help="splits per family (leave_dataset has 3)")
    s.add_argument("--epochs", type=positive_int, default=60, help="network epochs (at most)")
    s.add_argument("--trees", type=positive_int, default=300, help="trees of the set regressors")
    s.add_argument("--encoder", default=None, help="pretrained encoder directory (default: cache dir/encoder)")
    s.add_argument("--minimol", action="store_true",
                   help="also the two networks with MiniMol v1 beside the GNN, alone (two more networks per fold)")

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
    cmd = args.cmd
    if cmd == "train" and not args.out:
        raise InputError("train needs --out DIR for the model")
    inputs = [getattr(args, k, None) for k in ("model", "csv")]
    if cmd != "pretrain":
        inputs.append(getattr(args, "encoder", None))
    if cmd in ("train", "eval") and Path(args.split).suffix:
        inputs.append(args.split)
    files, dirs = [], []
    if cmd == "pretrain":
        from .pipeline import default_encoder_dir

        dirs.append(args.encoder or default_encoder_dir())
    elif cmd in ("eval", "predict", "bench"):
        files.append(args.out)
    elif cmd in ("train", "white", "quick"):
        dirs.append(args.out)
    check_outputs(files=files, dirs=dirs, inputs=inputs, overwrite=args.overwrite)


def _encoder(value):
    from .pipeline import default_encoder_dir, load_encoder

    return load_encoder(Path(value) if value else default_encoder_dir())


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _check_io(args)
    if args.cmd == "predict":  # the light path: no training code is imported
        return _predict(args)
    from . import pipeline
    from .data import load_pairs
    from .model import DistanceTrainConfig, MixScentConfig, MolEncoderConfig
    from .train import PretrainConfig

    if args.cmd == "featurize":
        print(pipeline.featurize(resolve_data_dir(args.data_dir), limit=args.limit, nproc=args.nproc))
        return 0
    if args.cmd == "pretrain":
        out = Path(args.encoder) if args.encoder else pipeline.default_encoder_dir()
        report = pipeline.pretrain_encoder(out, MolEncoderConfig(), PretrainConfig(epochs=args.epochs, seed=args.seed))
        print({**report, "encoder": str(out)})
        return 0
    if args.cmd in ("train", "eval"):
        from .data import load_gslf
        from .predictor import LabelNetConfig, MixturePredictor

        data_dir = resolve_data_dir(args.data_dir)
        pairs = load_pairs(data_dir)
        split = _split(data_dir, args.split, len(pairs))
        if args.cmd == "eval" and args.model:
            predictor = MixturePredictor.from_pretrained(Path(args.model))
        else:
            predictor = MixturePredictor(
                MixScentConfig(),
                DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
                LabelNetConfig(epochs=args.label_epochs, features=args.label_features),
                seed=args.seed,
                minimol=args.minimol,
            )
            predictor.fit(pairs, split, _encoder(args.encoder), load_gslf(data_dir) if args.cmd == "train" else None)
        metrics = pipeline.evaluate_predictor(predictor, pairs, split)
        metrics["weights"] = dict(zip(("network", "trees", "ridge"), predictor.weights.tolist(), strict=True))
        metrics["split"] = split.identifier
        if args.cmd == "train":
            predictor.save_pretrained(Path(args.out), {"split": split.identifier, "metrics": metrics})
        for k, v in metrics.items():
            print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
        if args.cmd == "eval" and args.out:
            write_json(Path(args.out), metrics)
        return 0
    if args.cmd == "labels":
        from .data import parse_mixture_text
        from .predictor import MixturePredictor

        predictor = MixturePredictor.from_pretrained(Path(args.model))
        for name, prob in predictor.top_labels(parse_mixture_text(args.mix), k=args.top):
            print(f"{name}\t{prob:.3f}")
        return 0
    if args.cmd == "white":
        from .predictor import MixturePredictor
        from .white import olfactory_white, plot_white, white_trend

        predictor = MixturePredictor.from_pretrained(Path(args.model))
        pool = sorted(load_pairs(resolve_data_dir(args.data_dir)).molecules())
        rows = olfactory_white(predictor, pool, range(1, args.max_n + 1), args.samples, args.seed, args.dataset)
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
        from .bench import FAMILIES, format_table, run_bench

        families = tuple(f.strip() for f in args.families.split(",") if f.strip())
        unknown = [f for f in families if f not in FAMILIES] or ([] if families else ["(none)"])
        if unknown:
            raise InputError(f"unknown split family {unknown[0]!r} (choose from {', '.join(FAMILIES)})")
        result = run_bench(
            resolve_data_dir(args.data_dir),
            _encoder(args.encoder),
            families=families,
            folds=args.folds,
            seed=args.seed,
            training=DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
            n_estimators=args.trees,
            minimol=args.minimol,
        )
        command = " ".join(["mixscent", *(argv if argv is not None else sys.argv[1:])])
        write_json(Path(args.out), {"command": command, **result})
        print(format_table(result["rows"]))
        return 0
    if args.cmd == "quick":
        from .quick import run_quick

        rows = run_quick(Path(args.out), resolve_data_dir(args.data_dir), seed=args.seed)
        from common.report import markdown_table

        print(markdown_table(rows))
        return 0
    return 2


def load_for_predict(model: Path, backend: str = "auto"):
    """The saved predictor ``model`` for prediction: :class:`olfaction.inference.OnnxPredictor`
    (no torch, PyG or scikit-learn import) when ``backend`` is ``onnx``, or ``auto`` and the folder
    holds a usable ONNX export; else :class:`olfaction.predictor.MixturePredictor` (``auto`` says
    why on stderr)."""
    from .inference import OnnxPredictor, onnx_problem

    if backend != "torch":
        problem = onnx_problem(model)
        if problem is None:
            return OnnxPredictor(model)
        if backend == "onnx":
            raise CheckpointError(f"--backend onnx: {problem}")
    from .predictor import MixturePredictor

    predictor = MixturePredictor.from_pretrained(model)
    if backend == "auto":  # a model saved before the export existed (or whose export failed its check)
        print(f"note: {problem}; predicting through torch (slower start; saving the model again with this "
              "version writes the export)", file=sys.stderr)
    return predictor


def _predict(args) -> int:
    """``mixscent predict``: load the saved predictor (nothing is fitted; :func:`load_for_predict`)
    and print / write distances."""
    rows = _read_pairs_csv(Path(args.csv)) if args.csv else None  # fails before the model loads
    if rows is None and (not args.mix1 or not args.mix2 or not args.dataset):
        raise InputError("predict needs --mix1, --mix2 and --dataset, or --csv")
    predictor = load_for_predict(Path(args.model), args.backend)
    if rows is not None:
        return _predict_csv(predictor, rows, args)
    from .data import parse_mixture_text

    a, b = parse_mixture_text(args.mix1, "mixture 1"), parse_mixture_text(args.mix2, "mixture 2")
    parts = predictor.predict_components([a], [b], [args.dataset])
    print(f"{parts['combined'][0]:.4f}")
    if args.components:
        print(", ".join(f"{k} {v[0]:.4f}" for k, v in parts.items() if k != "combined"))
    return 0


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
    pred = predictor.predict_distance(a, b, [r["Dataset"] for r in rows])
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
