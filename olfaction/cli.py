"""``mixscent`` command line: featurize | pretrain | train | eval | predict | labels | white | bench |
quick.

Thin layer: parses arguments, calls the Python API (:class:`olfaction.predictor.MixturePredictor`,
:mod:`olfaction.encoder`, :mod:`olfaction.bench`, ...), formats. Every command that runs torch
takes ``--device``; the commands that train take ``--precision``. Research commands live in
``experiments/olfaction/`` (``python -m experiments.olfaction.<name>``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.cli import ArgumentParser, add_common_args, check_outputs, int_in, positive_int, subcommand_main
from common.data_dir import resolve_data_dir
from common.device import add_device_arg, add_precision_arg
from common.errors import CheckpointError, InputError
from common.io import write_csv, write_json
from common.limits import add_force_arg
from common.shipped import resolve_checkpoint

from .limits import FORCE_HELP, MAX_FOLDS, MAX_NPROC, MAX_WHITE_N, check_soft_limits

# The names of olfaction.bench.SUITES, spelled here so that building the parser imports neither
# torch nor the training code: `mixscent predict` on its ONNX export runs without torch (a one-pair
# call in a third of a second). common.device's options import torch only for a GPU name.
BENCH_SUITES = ("standard", "minimol")
LIGHT_DEVICES = ("auto", "cpu")


def add_device_args(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """``--device`` and, for a command that trains, ``--precision`` (common.device's options)."""
    add_device_arg(parser)
    if training:
        add_precision_arg(parser)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="mixscent", description="MixScentNet: mixture odour prediction")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("featurize", help="compute and cache Mordred 2D descriptors")
    add_common_args(s)
    s.add_argument("--limit", type=positive_int, default=None, help="only the first N molecules (mixtures first)")
    s.add_argument("--nproc", type=int_in(1, MAX_NPROC), default=1, help=f"Mordred worker processes (at most {MAX_NPROC})")
    s.set_defaults(fn=cmd_featurize)

    s = sub.add_parser("pretrain", help="self-supervised Mordred pretraining of the molecule encoder")
    add_common_args(s)
    add_device_args(s, training=True)
    s.add_argument("--epochs", type=positive_int, default=25, help="at most 2000 without --force")
    s.add_argument("--encoder", default=None, help="output directory (default: cache dir/encoder)")
    add_force_arg(s, FORCE_HELP)
    s.set_defaults(fn=cmd_pretrain)

    for name, helptext in (
        ("train", "train the mixture predictor (network, set regressors, label network) on a split"),
        ("eval", "test metrics of a saved predictor (--model) or of one trained on the split"),
    ):
        s = sub.add_parser(name, help=helptext)
        add_common_args(s)
        add_device_args(s, training=True)
        s.add_argument("--split", default="random_cv0", help="split JSON path, or a name under splits/")
        s.add_argument("--encoder", default=None, help="pretrained encoder directory (default: cache dir/encoder)")
        s.add_argument("--epochs", type=positive_int, default=60, help="distance network epochs (at most)")
        s.add_argument("--label-epochs", type=positive_int, default=40, help="label network epochs (at most)")
        s.add_argument("--trees", type=positive_int, default=300, help="trees of the set regressors")
        s.add_argument("--minimol", action="store_true",
                       help="MiniMol v1 embeddings beside the pretrained GNN as the network's molecule input")
        s.add_argument("--label-features", default="minimol", choices=("morgan", "minimol", "morgan+minimol"),
                       help="label network molecule input (predictor.LABEL_FEATURES)")
        add_force_arg(s, FORCE_HELP)
        if name == "eval":
            s.add_argument("--model", default=None, help="evaluate this saved predictor instead of training")
        s.set_defaults(fn=cmd_train if name == "train" else cmd_eval)

    s = sub.add_parser("predict", help="distance between two mixtures, or a DREAM-format CSV")
    add_common_args(s)
    add_device_args(s)
    s.add_argument("--model", required=True, help="directory written by `mixscent train --out`, or the shipped mixscent-dream")
    s.add_argument("--mix1", help="';'-separated SMILES")
    s.add_argument("--mix2", help="';'-separated SMILES")
    s.add_argument("--dataset", default=None, help="experiment of --mix1/--mix2 (e.g. 'Snitz 1'; see `labels`)")
    s.add_argument("--csv", help="CSV with Dataset,Mixture_1,Mixture_2 (mixture labels)")
    s.add_argument("--components", action="store_true", help="also print the network / trees / ridge distances")
    s.add_argument("--backend", choices=("auto", "onnx", "torch"), default="auto",
                   help="auto: the model folder's ONNX export without torch when present (fast start), else torch")
    s.set_defaults(fn=cmd_predict)

    s = sub.add_parser("labels", help="top odour labels of a mixture")
    add_common_args(s)
    add_device_args(s)
    s.add_argument("--model", required=True, help="saved predictor directory, or the shipped mixscent-dream")
    s.add_argument("--mix", help="';'-separated SMILES")
    s.add_argument("--file", help="mixtures text: one ';'-separated SMILES mixture per line (CSV to --out or stdout)")
    s.add_argument("--top", type=positive_int, default=5)
    s.set_defaults(fn=cmd_labels)

    s = sub.add_parser("white", help="olfactory white: predicted distance vs number of components")
    add_common_args(s, out_default="runs/olfaction_white")
    add_device_args(s)
    s.add_argument("--model", required=True, help="saved predictor directory, or the shipped mixscent-dream")
    s.add_argument("--max-n", type=int_in(1, MAX_WHITE_N), default=40,
                   help=f"largest number of components (at most {MAX_WHITE_N} and half the molecule pool)")
    s.add_argument("--samples", type=positive_int, default=30, help="pairs per n (at most 10000 without --force)")
    add_force_arg(s, FORCE_HELP)
    s.add_argument("--dataset", default="Bushdid", help="experiment the distances are predicted for")
    s.set_defaults(fn=cmd_white)

    s = sub.add_parser("bench", help="distance benchmark: RF, the networks alone, set regressors, the predictor")
    add_common_args(s, out_default="docs/results/olfaction/bench.json")
    add_device_args(s, training=True)
    s.add_argument("--suite", choices=BENCH_SUITES, default="standard",
                   help="standard: the five methods; minimol: also the two networks with MiniMol v1 beside the "
                        "GNN, alone (two more networks per fold)")
    s.add_argument("--families", default="random_cv,lso_molecules,strict_lmo,leave_dataset")
    s.add_argument("--folds", type=int_in(1, MAX_FOLDS), default=5,
                   help=f"splits per family (at most {MAX_FOLDS}; leave_dataset has 3)")
    s.add_argument("--epochs", type=positive_int, default=60, help="network epochs (at most)")
    s.add_argument("--trees", type=positive_int, default=300, help="trees of the set regressors")
    s.add_argument("--encoder", default=None, help="pretrained encoder directory (default: cache dir/encoder)")
    add_force_arg(s, FORCE_HELP)
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("quick", help="minutes-long demo run: one fold, tiny model vs RF")
    add_common_args(s, out_default="runs/olfaction_quick")
    add_device_args(s, training=True)
    s.set_defaults(fn=cmd_quick)
    return p


def _split(data_dir: Path, value: str, n_rows: int):
    from .data import load_split, split_path

    path = Path(value)
    if not path.suffix:
        path = split_path(data_dir, value)
    return load_split(path, n_rows)


def _encoder_dir(value: str | None) -> Path:
    from .encoder import default_encoder_dir

    return Path(value) if value else default_encoder_dir()


def _encoder(value: str | None):
    from .encoder import load_encoder

    return load_encoder(_encoder_dir(value))


def cmd_featurize(args: argparse.Namespace) -> int:
    from .molecules import featurize

    print(featurize(resolve_data_dir(args.data_dir), limit=args.limit, nproc=args.nproc))
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    from .encoder import pretrain_encoder
    from .model import MolEncoderConfig
    from .train import PretrainConfig

    check_soft_limits(args)
    out = _encoder_dir(args.encoder)
    check_outputs(dirs=[out], overwrite=args.overwrite)
    report = pretrain_encoder(out, MolEncoderConfig(), PretrainConfig(epochs=args.epochs, seed=args.seed),
                              device=args.device, precision=args.precision)
    print({**report, "encoder": str(out)})
    return 0


def _fit_or_load(args: argparse.Namespace, train: bool) -> int:
    """``train`` (fit on the split, save to ``--out``) and ``eval`` (test metrics of ``--model`` or of
    a predictor fitted on the split, optionally written to ``--out``)."""
    check_soft_limits(args)
    inputs = [getattr(args, "model", None), args.encoder] + ([args.split] if Path(args.split).suffix else [])
    if train:
        if not args.out:
            raise InputError("train needs --out DIR for the model")
        check_outputs(dirs=[args.out], inputs=inputs, overwrite=args.overwrite)
    else:
        check_outputs(files=[args.out], inputs=inputs, overwrite=args.overwrite)
    from .data import load_gslf, load_pairs
    from .evaluate import evaluate_predictor
    from .model import DistanceTrainConfig, MixScentConfig
    from .predictor import LabelNetConfig, MixturePredictor

    data_dir = resolve_data_dir(args.data_dir)
    pairs = load_pairs(data_dir)
    split = _split(data_dir, args.split, len(pairs))
    if not train and args.model:
        predictor = load_torch_predictor(args.model, args.device)
    else:
        predictor = MixturePredictor(
            MixScentConfig(),
            DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
            LabelNetConfig(epochs=args.label_epochs, features=args.label_features),
            n_estimators=args.trees,
            seed=args.seed,
            minimol=args.minimol,
        )
        predictor.fit(pairs, split, _encoder(args.encoder), load_gslf(data_dir) if train else None,
                      device=args.device, precision=args.precision)
    metrics = evaluate_predictor(predictor, pairs, split)
    metrics["weights"] = dict(zip(("network", "trees", "ridge"), predictor.weights.tolist(), strict=True))
    metrics["split"] = split.identifier
    if train:
        predictor.save_pretrained(Path(args.out), {"split": split.identifier, "metrics": metrics})
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    if not train and args.out:
        write_json(Path(args.out), metrics)
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    return _fit_or_load(args, train=True)


def cmd_eval(args: argparse.Namespace) -> int:
    return _fit_or_load(args, train=False)


def load_torch_predictor(model: str | Path, device: str = "auto"):
    """The saved :class:`~olfaction.predictor.MixturePredictor` ``model`` (a directory, or the
    shipped ``mixscent-dream``) on ``device``."""
    from common.device import resolve_device

    from .predictor import MixturePredictor

    return MixturePredictor.from_pretrained(model).to(resolve_device(device))


def cmd_labels(args: argparse.Namespace) -> int:
    """``mixscent labels``: the top labels of ``--mix``, or of every mixture of ``--file`` (checked
    in full before the model loads, then predicted in chunks: :mod:`olfaction.batch_predict`)."""
    if (args.mix is None) == (args.file is None):
        raise InputError("labels needs --mix or --file (one of them)")
    check_outputs(files=[args.out], inputs=[args.model, args.file], overwrite=args.overwrite)
    if args.file:
        from .batch_predict import check_mixtures_text, predict_labels_file, write_to

        total = check_mixtures_text(Path(args.file))
        predictor = load_torch_predictor(args.model, args.device)
        if not predictor.label_names:
            raise InputError("this model has no label network (train with GS-LF labels)")
        write_to(args.out, lambda fh: predict_labels_file(predictor, Path(args.file), fh, args.top, total, total > 1))
        return 0
    from .data import parse_mixture_text

    mixture = parse_mixture_text(args.mix)  # before the model loads
    predictor = load_torch_predictor(args.model, args.device)
    for name, prob in predictor.top_labels(mixture, k=args.top):
        print(f"{name}\t{prob:.3f}")
    return 0


def cmd_white(args: argparse.Namespace) -> int:
    from .data import load_pairs
    from .white import check_white_sizes, olfactory_white, plot_white, white_trend

    check_soft_limits(args)
    check_outputs(dirs=[args.out], inputs=[args.model], overwrite=args.overwrite)
    pool = sorted(load_pairs(resolve_data_dir(args.data_dir)).molecules())
    sizes = range(1, args.max_n + 1)
    check_white_sizes(sizes, len(pool))  # before the model loads
    predictor = load_torch_predictor(args.model, args.device)
    _check_dataset(predictor, args.dataset)
    rows = olfactory_white(predictor, pool, sizes, args.samples, args.seed, args.dataset, progress=True)
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


def _bench_command(args: argparse.Namespace, families: tuple[str, ...]) -> str:
    """The command line that reruns this bench (every setting spelled out)."""
    parts = ["mixscent", "bench", "--suite", args.suite, "--families", ",".join(families), "--folds",
             str(args.folds), "--epochs", str(args.epochs), "--trees", str(args.trees), "--seed", str(args.seed)]
    if args.encoder:
        parts += ["--encoder", args.encoder]
    return " ".join(parts)


def cmd_bench(args: argparse.Namespace) -> int:
    families = tuple(f.strip() for f in args.families.split(",") if f.strip())
    from .bench import FAMILIES

    unknown = [f for f in families if f not in FAMILIES] or ([] if families else ["(none)"])
    if unknown:
        raise InputError(f"unknown split family {unknown[0]!r} (choose from {', '.join(FAMILIES)})")
    check_soft_limits(args)
    check_outputs(files=[args.out], inputs=[args.encoder], overwrite=args.overwrite)
    from .bench import format_table, run_bench
    from .model import DistanceTrainConfig

    result = run_bench(resolve_data_dir(args.data_dir), _encoder(args.encoder), families=families, folds=args.folds,
                       seed=args.seed, training=DistanceTrainConfig(epochs=args.epochs, seed=args.seed),
                       n_estimators=args.trees, minimol=args.suite == "minimol", device=args.device,
                       precision=args.precision)
    write_json(Path(args.out), {"command": _bench_command(args, families), **result})
    print(format_table(result["rows"]))
    return 0


def cmd_quick(args: argparse.Namespace) -> int:
    from common.report import markdown_table

    from .quick import run_quick

    check_outputs(dirs=[args.out], overwrite=args.overwrite)
    rows = run_quick(Path(args.out), resolve_data_dir(args.data_dir), seed=args.seed, device=args.device,
                     precision=args.precision)
    print(markdown_table(rows))
    return 0


def load_for_predict(model: Path, backend: str = "auto", device: str = "auto"):
    """The saved predictor ``model`` for prediction: :class:`olfaction.inference.OnnxPredictor`
    (no torch, PyG or scikit-learn import; onnxruntime on the CPU) when ``backend`` is ``onnx``,
    or ``auto`` and the folder holds a usable ONNX export and ``device`` is ``auto`` or ``cpu``;
    else :class:`olfaction.predictor.MixturePredictor` on ``device`` (``auto`` says why on
    stderr when the export is missing)."""
    from .inference import OnnxPredictor, onnx_problem

    gpu = device not in LIGHT_DEVICES
    if backend == "onnx" and gpu:
        raise InputError(f"--backend onnx runs on the CPU; use --backend torch for --device {device}")
    model = resolve_checkpoint(model, register=False)  # a shipped name (mixscent-dream): its verified directory
    problem = None
    if backend == "onnx" or (backend == "auto" and not gpu):
        problem = onnx_problem(model)
        if problem is None:
            return OnnxPredictor(model)
        if backend == "onnx":
            raise CheckpointError(f"--backend onnx: {problem}")
    predictor = load_torch_predictor(model, device)
    if problem is not None:  # a model saved before the export existed (or whose export failed its check)
        print(f"note: {problem}; predicting through torch (slower start; saving the model again with this "
              "version writes the export)", file=sys.stderr)
    return predictor


def cmd_predict(args: argparse.Namespace) -> int:
    """``mixscent predict``: load the saved predictor (nothing is fitted; :func:`load_for_predict`)
    and print / write distances; ``--csv`` streams the file in chunks (:mod:`olfaction.batch_predict`)."""
    check_outputs(files=[args.out], inputs=[args.model, args.csv], overwrite=args.overwrite)
    if args.csv:
        return _predict_csv(args)
    if not args.mix1 or not args.mix2 or not args.dataset:
        raise InputError("predict needs --mix1, --mix2 and --dataset, or --csv")
    from .data import parse_mixture_text

    a, b = parse_mixture_text(args.mix1, "mixture 1"), parse_mixture_text(args.mix2, "mixture 2")
    predictor = load_for_predict(args.model, args.backend, args.device)
    _check_dataset(predictor, args.dataset)
    parts = predictor.predict_components([a], [b], [args.dataset])
    print(f"{parts['combined'][0]:.4f}")
    if args.components:
        print(", ".join(f"{k} {v[0]:.4f}" for k, v in parts.items() if k != "combined"))
    return 0


def _check_dataset(predictor, dataset: str) -> None:
    known = predictor.datasets
    if known and dataset not in known:
        raise InputError(f"unknown dataset {dataset!r} (the model knows {', '.join(known)})")


def _predict_csv(args: argparse.Namespace) -> int:
    """DREAM submission format: reads ``Dataset,Mixture_1,Mixture_2``, writes the same rows plus
    ``Predicted_Experimental_Values`` to ``--out`` (atomically) or stdout, chunk by chunk. Every row
    is checked before the model loads."""
    from .batch_predict import check_datasets, check_pairs_csv, predict_pairs_csv, write_to
    from .data import load_mixtures

    path = Path(args.csv)
    mixtures = load_mixtures(resolve_data_dir(args.data_dir))
    total, datasets = check_pairs_csv(path, mixtures)
    predictor = load_for_predict(args.model, args.backend, args.device)
    check_datasets(path, datasets, predictor.datasets)
    write_to(args.out, lambda fh: predict_pairs_csv(predictor, path, mixtures, fh, total=total, progress=total > 1))
    return 0


main = subcommand_main(build_parser)


if __name__ == "__main__":
    sys.exit(main())
