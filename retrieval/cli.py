"""``moa3cir`` command line: build-data, train, eval, index, search, bench.

    moa3cir build-data --out data/cir                              # the built benchmark (both variants)
    moa3cir train --root data/cir --out runs/m [--model-size XS|S|B] [--device cuda --precision bf16-mixed]
    moa3cir eval --root data/cir --model runs/m --split test
    moa3cir index --root data/cir --model runs/m --out runs/idx     # a dataset split's gallery
    moa3cir index --catalog shop.csv --model runs/m --out runs/shop   # then --add new.csv | --remove ID...
    moa3cir train --triplets shop_triplets.csv --catalog shop.csv --out runs/m
    moa3cir search --model runs/m --index runs/shop --image shirt.png --text "make it red" [--json]
    moa3cir bench --out runs/rbench [--json F]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common.cli import (  # noqa: E402
    ArgumentParser,
    add_overwrite_arg,
    check_outputs,
    float_in,
    int_in,
    nonneg_int,
    seed_int,
    subcommand_main,
)
from common.device import add_device_arg, add_precision_arg, check_precision, resolve_device  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.io import dumps_json, write_json  # noqa: E402

from . import bounds as lim  # noqa: E402
from .sizes import DEFAULT_MODEL_SIZE, MODEL_SIZES  # noqa: E402

DATASETS = ("synthetic", "fashioniq", "shoes")
# repeated from retrieval.synth.PRESETS and retrieval.towers.IMAGE_ENCODERS / DEFAULT_IMAGE_ENCODER,
# so that parsing imports no torch
BUILD_PRESETS = ("small", "tiny", "hard", "hard-tiny")
BENCHMARKS = ("small", "hard")
IMAGE_ENCODERS = ("scratch", "efficientnet-lite0")
DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"
# bench suites: the results table (the speed and size studies are in experiments/retrieval/)
SUITES = ("table",)
INDEX_KINDS = ("flat", "ivf", "ivfpq", "hnsw")  # retrieval.index.KINDS


def _data_args(sp: argparse.ArgumentParser, required: bool = True) -> None:
    sp.add_argument("--dataset", choices=DATASETS, default="synthetic")
    sp.add_argument("--root", required=required, help="dataset root (synthetic: the build-data --out dir)")
    sp.add_argument("--variant", choices=("controlled", "confounded"), default="controlled", help="synthetic variant")


def _model_size_arg(sp: argparse.ArgumentParser, what: str) -> None:
    sp.add_argument("--model-size", choices=tuple(MODEL_SIZES), default=DEFAULT_MODEL_SIZE,
                    help=f"tower widths of {what} (README: model sizes) (default {DEFAULT_MODEL_SIZE})")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="moa3cir", description="MoA³CIR composed image retrieval")
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build-data", help="build the synthetic e-commerce CIR benchmark")
    b.add_argument("--out", required=True, help="output directory (both variants go below it)")
    b.add_argument(
        "--preset", "--size", dest="preset", choices=BUILD_PRESETS, default="small",
        help="small: 32 px studio renders, one templated text per triplet; hard: 64 px photos with pose/"
        "crop/scale jitter, backdrops and colour casts, two annotators' relative captions, a larger "
        "gallery; tiny / hard-tiny: the same looks at test size (default small)",
    )
    b.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(b)
    b.set_defaults(fn=cmd_build_data)

    t = sub.add_parser("train", help="train a model")
    add_device_arg(t)
    add_precision_arg(t)
    _data_args(t, required=False)
    t.add_argument("--triplets", default=None,
                   help="a shop's triplet table (CSV: reference, target, text) over --catalog, instead of --root")
    t.add_argument("--catalog", default=None, help="with --triplets: the catalogue CSV or image folder")
    t.add_argument("--model", default="moa3cir", choices=("moa3cir", "combiner", "sum", "image", "text"))
    _model_size_arg(t, "the model")
    t.add_argument("--out", required=True, help="checkpoint directory")
    t.add_argument("--phase1-epochs", type=lim.epochs_int, default=2,
                   help=f"alignment epochs, at most {lim.MAX_EPOCHS} (default 2)")
    t.add_argument(
        "--phase2-epochs", type=lim.epochs_int, default=None,
        help=f"cap on composed-retrieval epochs, at most {lim.MAX_EPOCHS} (default: a step budget that scales "
        "with the data; training stops earlier when validation recall stops improving)",
    )
    t.add_argument(
        "--val-fraction", type=float_in(0.0, 0.5), default=0.1,
        help="share of the training target images held out (with their triplets) for early stopping; "
        "0 trains on everything without validation (default 0.1)",
    )
    t.add_argument("--patience", type=int_in(1, lim.MAX_EPOCHS), default=5,
                   help=f"epochs without better validation recall before stopping, at most {lim.MAX_EPOCHS}")
    t.add_argument("--augment", type=int_in(0, lim.MAX_AUGMENT), default=0,
                   help=f"self-reflective augmentation proposals (synthetic), at most {lim.MAX_AUGMENT}")
    t.add_argument("--no-descriptions", action="store_true")
    t.add_argument(
        "--request-emphasis", type=float_in(0.0, 50.0), default=0.0,
        help="MoA3CIR, at search time: attribute group g of the query weighs 1 + E * (its routing weight) in "
        "the match, so the groups a request names outweigh what the reference keeps (0 = every group equal, "
        "the default; training is the same either way; the shipped moa3cir-fmnist uses 5: "
        "docs/results/retrieval/shipped.json)",
    )
    t.add_argument(
        "--image-encoder", choices=IMAGE_ENCODERS, default=DEFAULT_IMAGE_ENCODER,
        help=f"image towers: a small CNN trained from scratch, or the offline ImageNet EfficientNet-Lite0 "
        f"(frozen, token grid cached per image) (default {DEFAULT_IMAGE_ENCODER})",
    )
    t.add_argument(
        "--fine-tune-blocks", type=int_in(0, lim.NUM_BLOCKS), default=0,
        help="with --image-encoder efficientnet-lite0: fine-tune its last N MBConv blocks (0 = frozen; "
        "N >= 9 so that the token grid of block 7 changes)",
    )
    t.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(t)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint with the dataset's official protocol")
    add_device_arg(e)
    _data_args(e)
    e.add_argument("--model", required=True, help="checkpoint directory")
    e.add_argument("--split", default="test", choices=("val", "test"))
    e.add_argument("--out", default=None, help="write metrics JSON here")
    add_overwrite_arg(e)
    e.set_defaults(fn=cmd_eval)

    i = sub.add_parser("index", help="embed a catalogue (or a split's gallery) into a faiss index; add/remove items")
    add_device_arg(i)
    _data_args(i, required=False)
    i.add_argument("--catalog", default=None,
                   help="a catalogue CSV (id, image, optional title/description, metadata) or image folder")
    i.add_argument("--add", default=None, metavar="FILE",
                   help="add the items of this catalogue CSV/folder to the index at --out")
    i.add_argument("--remove", nargs="+", default=None, metavar="ID", help="remove these ids from the index at --out")
    i.add_argument("--model", default=None, help="checkpoint directory (--add: default the one the index was built with)")
    i.add_argument("--split", default="test", choices=("train", "val", "test"))
    i.add_argument("--kind", default="flat", choices=INDEX_KINDS,
                   help="flat: exact; ivf / hnsw: approximate; ivfpq: compressed codes (default flat)")
    i.add_argument("--nlist", type=int_in(1, lim.MAX_NLIST), default=64, help=f"IVF cells, at most {lim.MAX_NLIST} (default 64)")
    i.add_argument("--nprobe", type=int_in(1, lim.MAX_NLIST), default=16, help="IVF cells searched per query")
    i.add_argument("--pq-m", type=nonneg_int, default=0,
                   help="ivfpq: bytes per item (divides the embedding width; 0 = width / 8)")
    i.add_argument("--rerank", type=int_in(0, lim.MAX_K), default=0,
                   help="ivfpq: re-score the top rerank*k candidates exactly from stored floats (0 = off)")
    i.add_argument("--batch-size", type=int_in(1, 65_536), default=256, help="images embedded per batch")
    i.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    i.add_argument("--out", required=True, help="index directory")
    add_overwrite_arg(i)
    i.set_defaults(fn=cmd_index)

    s = sub.add_parser("search", help="retrieve products for a reference image + modification text")
    add_device_arg(s)
    s.add_argument("--model", required=True)
    s.add_argument("--index", required=True, help="directory written by `moa3cir index`")
    s.add_argument("--image", required=True, help="reference image file")
    s.add_argument("--text", required=True, help="modification text")
    s.add_argument("--description", default=None, help="reference item description (optional)")
    s.add_argument("--k", type=int_in(1, lim.MAX_K), default=10, help=f"results, at most {lim.MAX_K} (default 10)")
    s.add_argument("--json", action="store_true", help="print the results as one JSON object")
    s.set_defaults(fn=cmd_search)

    bn = sub.add_parser("bench", help="the results table: MoA³CIR, ablations and baselines")
    add_device_arg(bn)
    add_precision_arg(bn)
    bn.add_argument(
        "--suite", nargs="+", choices=SUITES, default=["table"],
        help="table: MoA³CIR, ablations and baselines on the built benchmark (the default and only suite). "
        "Moved to experiments with their options: the model sizes (formerly --suite sizes) are python -m "
        "experiments.retrieval.model_sizes, the gallery-feature speed (--suite features, --feature-threads) "
        "python -m experiments.retrieval.gallery_features, the 1M x 256 search study (--suite search, "
        "--search-n / --search-queries / --search-methods / --search-threads / --force) python -m "
        "experiments.retrieval.search_bench",
    )
    bn.add_argument(
        "--benchmark", choices=BENCHMARKS, default="small",
        help="which built benchmark (build-data --preset): built into --out/data (small) or "
        "--out/data-hard (hard) when --root is absent (default small)",
    )
    bn.add_argument("--root", default=None, help="benchmark root (built into --out when absent)")
    bn.add_argument("--out", default="runs/retrieval_bench")
    _model_size_arg(bn, "every trained method (the baselines matched to it)")
    bn.add_argument("--phase1-epochs", type=lim.epochs_int, default=1, help=f"at most {lim.MAX_EPOCHS} (default 1)")
    bn.add_argument("--phase2-epochs", type=lim.epochs_int, default=3, help=f"at most {lim.MAX_EPOCHS} (default 3)")
    bn.add_argument("--augment", type=int_in(0, lim.MAX_AUGMENT), default=800, help=f"at most {lim.MAX_AUGMENT} (default 800)")
    bn.add_argument("--variants", nargs="+", choices=("controlled", "confounded"),
                    default=["controlled", "confounded"])
    bn.add_argument(
        "--methods", nargs="+", default=None,
        help="subset of methods (default: all): moa3cir no-aug no-desc no-moa3 no-routing "
        "single-phase combiner sum image-only text-only raw-pixel",
    )
    bn.add_argument(
        "--image-encoders", nargs="+", choices=IMAGE_ENCODERS, default=list(IMAGE_ENCODERS),
        help="train every method with each of these image encoders (default both)",
    )
    bn.add_argument("--json", default=None,
                    help="also write the rows (and the command's settings) to this JSON file, e.g. for docs/results/")
    bn.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(bn)
    bn.set_defaults(fn=cmd_bench)
    return p


def _torch_threads() -> None:
    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


def cmd_build_data(args) -> int:
    from .synth import PRESETS, build_benchmark

    check_outputs(dirs=[args.out], overwrite=args.overwrite)
    cfg = PRESETS[args.preset](args.seed)
    print(dumps_json(build_benchmark(Path(args.out), cfg, overwrite=args.overwrite), indent=1))
    return 0


def cmd_train(args) -> int:
    _torch_threads()
    from .catalog import read_catalog, read_triplets
    from .data import load_dataset
    from .registry import build_model, save_model
    from .train import TrainConfig, fit

    out = Path(args.out)
    check_precision(args.precision, resolve_device(args.device))
    if (args.root is None) == (args.triplets is None) or (args.triplets is None) != (args.catalog is None):
        raise InputError("train on a dataset (--root DIR) or on a shop's table (--triplets FILE.csv --catalog "
                         "FILE.csv|DIR), not both")
    check_outputs(dirs=[out], inputs=[args.root, args.triplets, args.catalog], overwrite=args.overwrite)
    if args.phase1_epochs == 0 and args.phase2_epochs == 0:
        raise InputError("--phase1-epochs and --phase2-epochs are both 0: nothing would be trained")
    if args.fine_tune_blocks and args.image_encoder == "scratch":
        raise InputError("--fine-tune-blocks needs --image-encoder efficientnet-lite0")
    over = {"use_descriptions": False} if args.no_descriptions else {}
    if args.request_emphasis:
        if args.model != "moa3cir":
            raise InputError("--request-emphasis weighs MoA3CIR's attribute groups; it needs --model moa3cir")
        over["request_emphasis"] = args.request_emphasis
    import torch

    torch.manual_seed(args.seed)  # the initial weights too: a run is repeatable under --seed
    try:
        model = build_model(args.model, args.model_size, image_encoder=args.image_encoder,
                            trainable_blocks=args.fine_tune_blocks, **over)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if args.triplets:
        split = read_triplets(Path(args.triplets), read_catalog(Path(args.catalog)))
        print(f"training on {len(split.triplets)} triplets over {len(split.ids)} catalogue items")
    else:
        split = load_dataset(args.dataset, Path(args.root), "train", args.variant)
    if args.augment:
        if args.dataset != "synthetic" or args.triplets:
            raise InputError("--augment needs the synthetic benchmark (attribute labels)")
        from .bench import augmented_train_split

        split, stats = augmented_train_split(Path(args.root), args.variant, split, args.augment, args.seed,
                                             device=args.device)
        print("augmentation:", dumps_json(stats.as_dict()))
    cfg = TrainConfig(args.phase1_epochs, args.phase2_epochs, val_fraction=args.val_fraction,
                      patience=args.patience, seed=args.seed)
    history = fit(model, split, cfg, log=print, run_dir=out / "training", device=args.device,
                  precision=args.precision)
    stops = [h for h in history if "reason" in h]
    source = ({"triplets": str(Path(args.triplets).resolve()), "catalog": str(Path(args.catalog).resolve())}
              if args.triplets else {"dataset": args.dataset, "variant": args.variant})
    save_model(model, out, {**source, "model_size": args.model_size, "training": stops})
    print(f"saved {out}")
    return 0


def cmd_eval(args) -> int:
    _torch_threads()
    from .data import load_dataset
    from .embed import embed_gallery, embed_queries
    from .evaluate import evaluate_split
    from .features import prepare_features
    from .registry import load_model

    check_outputs(files=[args.out], inputs=[args.root, args.model], overwrite=args.overwrite)
    model, _ = load_model(Path(args.model))
    split = load_dataset(args.dataset, Path(args.root), args.split, args.variant)
    f = prepare_features(split)
    q, _ = embed_queries(model, f, device=args.device)
    metrics = evaluate_split(split, q, embed_gallery(model, f, device=args.device))
    print(dumps_json({k: round(v, 2) for k, v in metrics.items()}, indent=1))
    if args.out:
        write_json(Path(args.out), metrics)
    return 0


def cmd_index(args) -> int:
    _torch_threads()
    from .catalog_cli import index_catalog

    return index_catalog(args)


def cmd_search(args) -> int:
    _torch_threads()
    from .catalog_index import CatalogIndex, search_products
    from .data import load_image
    from .registry import load_model

    if not args.text.strip():
        raise InputError("modification text is empty")
    idx = CatalogIndex.load(Path(args.index))
    model, _ = load_model(Path(args.model))
    products, routing = search_products(model, idx, load_image(Path(args.image)), args.text, args.description,
                                        args.k, device=args.device)
    if args.json:
        print(dumps_json({"results": [p.as_dict() for p in products], "routing": routing}, indent=1))
        return 0
    for rank, p in enumerate(products, 1):
        extra = " | ".join(x for x in (p.title, ", ".join(f"{k}={v}" for k, v in p.metadata.items())) if x)
        print(f"{rank:2d}  {p.score:.4f}  {p.id}  {p.path}" + (f"  {extra}" if extra else ""))
    if routing:
        print("routing:", ", ".join(f"{g}={w:.2f}" for g, w in routing.items()))
    return 0


def cmd_bench(args) -> int:
    _torch_threads()
    from .bench import bench_root, resolve_methods, run_retrieval_bench
    from .train import TrainConfig

    check_precision(args.precision, resolve_device(args.device))
    methods = resolve_methods(args.methods)
    out = Path(args.out)
    check_outputs(files=[args.json], dirs=[out], inputs=[args.root], overwrite=args.overwrite)
    if args.phase1_epochs + args.phase2_epochs == 0:
        raise InputError("--phase1-epochs and --phase2-epochs are both 0: nothing would be trained")
    root = bench_root(args.root, out, args.benchmark, args.seed)
    rows = run_retrieval_bench(
        root, out, args.variants, methods, TrainConfig(args.phase1_epochs, args.phase2_epochs, seed=args.seed),
        augment_n=args.augment, seed=args.seed, image_encoders=args.image_encoders,
        model_size=args.model_size, device=args.device, precision=args.precision,
    )
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("cmd", "json", "overwrite", "fn")}
        write_json(Path(args.json), {"config": config, "rows": rows})
    return 0


main = subcommand_main(build_parser)

if __name__ == "__main__":
    sys.exit(main())
