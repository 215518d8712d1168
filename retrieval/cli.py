"""``moa3cir`` command line: build-data, train, eval, index, search, bench."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from common.cli import (
    ArgumentParser,
    add_overwrite_arg,
    check_outputs,
    cli_main,
    float_in,
    nonneg_int,
    positive_int,
    seed_int,
)
from common.errors import InputError
from common.io import dumps_json, write_json

DATASETS = ("synthetic", "fashioniq", "shoes")
BUILD_PRESETS = ("small", "tiny", "hard", "hard-tiny")  # retrieval.data.PRESETS, without importing it
BENCHMARKS = ("small", "hard")
# retrieval.model's IMAGE_ENCODERS / DEFAULT_IMAGE_ENCODER, repeated so that parsing imports no torch
IMAGE_ENCODERS = ("scratch", "efficientnet-lite0")
DEFAULT_IMAGE_ENCODER = "efficientnet-lite0"


def _parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="moa3cir", description="MoA³CIR composed image retrieval")
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build-data", help="build the synthetic e-commerce CIR benchmark")
    b.add_argument("--out", required=True, help="output directory (both variants go below it)")
    b.add_argument(
        "--preset",
        "--size",
        dest="preset",
        choices=BUILD_PRESETS,
        default="small",
        help="small: 32 px studio renders, one templated text per triplet; hard: 64 px photos with pose/"
        "crop/scale jitter, backdrops and colour casts, two annotators' relative captions, a larger "
        "gallery; tiny / hard-tiny: the same looks at test size (default small)",
    )
    b.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(b)

    def data_args(sp):
        sp.add_argument("--dataset", choices=DATASETS, default="synthetic")
        sp.add_argument("--root", required=True, help="dataset root (synthetic: the build-data --out dir)")
        sp.add_argument(
            "--variant",
            choices=("controlled", "confounded"),
            default="controlled",
            help="synthetic benchmark variant",
        )

    t = sub.add_parser("train", help="train a model")
    data_args(t)
    t.add_argument("--model", default="moa3cir", choices=("moa3cir", "combiner", "sum", "image", "text"))
    t.add_argument("--out", required=True, help="checkpoint directory")
    t.add_argument("--phase1-epochs", type=nonneg_int, default=2, help="alignment epochs (default 2)")
    t.add_argument(
        "--phase2-epochs",
        type=nonneg_int,
        default=None,
        help="cap on composed-retrieval epochs (default: a step budget that scales with the data; "
        "training stops earlier when validation recall stops improving)",
    )
    t.add_argument(
        "--val-fraction",
        type=float_in(0.0, 0.5),
        default=0.1,
        help="share of the training target images held out (with their triplets) for early stopping; "
        "0 trains on everything without validation (default 0.1)",
    )
    t.add_argument(
        "--patience", type=positive_int, default=5, help="epochs without better validation recall before stopping"
    )
    t.add_argument(
        "--augment", type=nonneg_int, default=0, help="self-reflective augmentation proposals (synthetic)"
    )
    t.add_argument("--no-descriptions", action="store_true")
    t.add_argument(
        "--image-encoder",
        choices=IMAGE_ENCODERS,
        default=DEFAULT_IMAGE_ENCODER,
        help=f"image towers: a small CNN trained from scratch, or the offline ImageNet EfficientNet-Lite0 "
        f"(frozen, token grid cached per image) (default {DEFAULT_IMAGE_ENCODER})",
    )
    t.add_argument(
        "--fine-tune-blocks",
        type=nonneg_int,
        default=0,
        help="with --image-encoder efficientnet-lite0: fine-tune its last N MBConv blocks (0 = frozen; "
        "N >= 9 so that the token grid of block 7 changes)",
    )
    t.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(t)

    e = sub.add_parser("eval", help="evaluate a checkpoint with the dataset's official protocol")
    data_args(e)
    e.add_argument("--model", required=True, help="checkpoint directory")
    e.add_argument("--split", default="test", choices=("val", "test"))
    e.add_argument("--out", default=None, help="write metrics JSON here")
    add_overwrite_arg(e)

    i = sub.add_parser("index", help="embed a split's gallery into a faiss index")
    data_args(i)
    i.add_argument("--model", required=True)
    i.add_argument("--split", default="test", choices=("train", "val", "test"))
    i.add_argument("--kind", default="flat", choices=("flat", "ivf", "hnsw"))
    i.add_argument("--nlist", type=positive_int, default=64)
    i.add_argument("--out", required=True, help="index directory")
    add_overwrite_arg(i)

    s = sub.add_parser("search", help="retrieve products for a reference image + modification text")
    s.add_argument("--model", required=True)
    s.add_argument("--index", required=True, help="directory written by `moa3cir index`")
    s.add_argument("--image", required=True, help="reference image file")
    s.add_argument("--text", required=True, help="modification text")
    s.add_argument("--description", default=None, help="reference item description (optional)")
    s.add_argument("--k", type=positive_int, default=10)

    bn = sub.add_parser("bench", help="MoA³CIR vs baselines table and/or the search benchmark")
    bn.add_argument(
        "--benchmark",
        choices=BENCHMARKS,
        default="small",
        help="which built benchmark (build-data --preset): built into --out/data (small) or "
        "--out/data-hard (hard) when --root is absent (default small)",
    )
    bn.add_argument("--root", default=None, help="benchmark root (built into --out when absent)")
    bn.add_argument("--out", default="runs/retrieval_bench")
    bn.add_argument("--phase1-epochs", type=nonneg_int, default=1)
    bn.add_argument("--phase2-epochs", type=nonneg_int, default=3)
    bn.add_argument("--augment", type=nonneg_int, default=800)
    bn.add_argument(
        "--variants", nargs="+", choices=("controlled", "confounded"), default=["controlled", "confounded"]
    )
    bn.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="subset of methods (default: all): moa3cir no-aug no-desc no-moa3 no-routing "
        "single-phase combiner sum image-only text-only",
    )
    bn.add_argument("--search", action="store_true", help="also run the 1M x 256 search benchmark")
    bn.add_argument("--search-only", action="store_true")
    bn.add_argument(
        "--features-only",
        action="store_true",
        help="only time the pretrained encoder's gallery features on the test gallery (cold, then cached)",
    )
    bn.add_argument(
        "--feature-threads", nargs="+", type=positive_int, default=[1], help="torch threads of --features-only runs"
    )
    bn.add_argument("--search-n", type=positive_int, default=1_000_000, help="search benchmark gallery size")
    bn.add_argument("--search-queries", type=positive_int, default=1000)
    bn.add_argument(
        "--search-threads", type=positive_int, default=1, help="threads for both NumPy (BLAS) and faiss (default 1)"
    )
    bn.add_argument(
        "--image-encoders",
        nargs="+",
        choices=IMAGE_ENCODERS,
        default=list(IMAGE_ENCODERS),
        help="train every method with each of these image encoders (default both)",
    )
    bn.add_argument(
        "--json",
        default=None,
        help="also write the rows (and the command's settings) to this JSON file, e.g. for docs/results/",
    )
    bn.add_argument("--seed", type=seed_int, default=0)
    add_overwrite_arg(bn)
    return p


def _load(args, split):
    from .data import load_dataset

    return load_dataset(args.dataset, Path(args.root), split, args.variant)


def bench_root(root: str | None, out: Path, benchmark: str, seed: int) -> Path:
    """The data root of ``moa3cir bench``: ``root`` when given (its preset must be ``benchmark``'s),
    else ``out/data`` (small) or ``out/data-hard`` (hard), built there on first use."""
    from .data import PRESETS, VARIANTS, build_benchmark, load_meta

    if root is None:
        path = out / ("data" if benchmark == "small" else f"data-{benchmark}")
        if not (path / VARIANTS[0] / "meta.json").is_file():
            build_benchmark(path, PRESETS[benchmark](seed))
        return path
    path = Path(root)
    preset = load_meta(path / VARIANTS[0]).get("preset", "small")
    if ("hard" if preset.startswith("hard") else "small") != benchmark:
        raise InputError(f"--root {root} holds the {preset!r} benchmark, not {benchmark!r} (see --benchmark)")
    return path


@cli_main
def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parser().parse_args(argv)
    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    if args.cmd == "build-data":
        from .data import build_benchmark

        check_outputs(dirs=[args.out], overwrite=args.overwrite)
        from .data import PRESETS

        cfg = PRESETS[args.preset](args.seed)
        print(dumps_json(build_benchmark(Path(args.out), cfg, overwrite=args.overwrite), indent=1))
        return 0
    if args.cmd == "train":
        from .train import TrainConfig, build_model, save_model, train_model

        out = Path(args.out)
        check_outputs(dirs=[out], inputs=[args.root], overwrite=args.overwrite)
        if args.phase1_epochs == 0 and args.phase2_epochs == 0:
            raise InputError("--phase1-epochs and --phase2-epochs are both 0: nothing would be trained")
        if args.fine_tune_blocks and args.image_encoder == "scratch":
            raise InputError("--fine-tune-blocks needs --image-encoder efficientnet-lite0")
        over = {"use_descriptions": False} if args.no_descriptions else {}
        try:
            model = build_model(args.model, image_encoder=args.image_encoder, trainable_blocks=args.fine_tune_blocks,
                                **over)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        split = _load(args, "train")
        if args.augment:
            if args.dataset != "synthetic":
                raise InputError("--augment needs the synthetic benchmark (attribute labels)")
            from .bench import augmented_train_split

            split, stats = augmented_train_split(
                Path(args.root), args.variant, split, args.augment, args.seed
            )
            print("augmentation:", dumps_json(stats.as_dict()))
        cfg = TrainConfig(
            args.phase1_epochs,
            args.phase2_epochs,
            val_fraction=args.val_fraction,
            patience=args.patience,
            seed=args.seed,
        )
        history = train_model(model, split, cfg, log=print, run_dir=out / "training")
        stops = [h for h in history if "reason" in h]
        save_model(model, out, {"dataset": args.dataset, "variant": args.variant, "training": stops})
        print(f"saved {out}")
        return 0
    if args.cmd == "eval":
        from .evaluate import evaluate_split
        from .train import embed_gallery, embed_queries, load_model, prepare_features

        check_outputs(files=[args.out], inputs=[args.root, args.model], overwrite=args.overwrite)
        model, _ = load_model(Path(args.model))
        split = _load(args, args.split)
        f = prepare_features(split)
        q, _ = embed_queries(model, f)
        metrics = evaluate_split(split, q, embed_gallery(model, f))
        print(dumps_json({k: round(v, 2) for k, v in metrics.items()}, indent=1))
        if args.out:
            write_json(Path(args.out), metrics)
        return 0
    if args.cmd == "index":
        from .index import GalleryIndex
        from .train import embed_gallery, load_model, prepare_features

        check_outputs(dirs=[args.out], inputs=[args.root, args.model], overwrite=args.overwrite)
        model, _ = load_model(Path(args.model))
        split = _load(args, args.split)
        emb = embed_gallery(model, prepare_features(split))
        idx = GalleryIndex(emb.shape[1], args.kind, nlist=args.nlist)
        idx.add(emb, split.ids)
        idx.save(Path(args.out))
        meta = {
            "dataset": args.dataset,
            "root": str(Path(args.root).resolve()),
            "variant": args.variant,
            "split": args.split,
        }
        write_json(Path(args.out) / "source.json", meta)
        print(f"indexed {len(idx)} items into {args.out}")
        return 0
    if args.cmd == "search":
        from .data import load_image
        from .index import GalleryIndex
        from .train import encode_single_query, load_model

        if not args.text.strip():
            raise InputError("modification text is empty")
        idx = GalleryIndex.load(Path(args.index))
        model, _ = load_model(Path(args.model))
        q, weights = encode_single_query(model, load_image(Path(args.image)), args.text, args.description)
        scores, ids = idx.search(q, args.k)
        for rank, (i, sc) in enumerate(zip(ids[0], scores[0], strict=False), 1):
            print(f"{rank:2d}  {sc:.4f}  {i}")
        if weights is not None:
            from .render import GROUPS

            print("routing:", ", ".join(f"{g}={w:.2f}" for g, w in zip(GROUPS, weights, strict=False)))
        return 0
    if args.cmd == "bench":
        from .bench import resolve_methods, run_retrieval_bench, run_search_bench
        from .train import TrainConfig

        methods = resolve_methods(args.methods)
        out = Path(args.out)
        rows, search_rows, feature_rows = None, None, None
        check_outputs(files=[args.json], dirs=[out], inputs=[args.root], overwrite=args.overwrite)
        train = not (args.search_only or args.features_only)
        if train and args.phase1_epochs + args.phase2_epochs == 0:
            raise InputError("--phase1-epochs and --phase2-epochs are both 0: nothing would be trained")
        if not args.search_only:
            root = bench_root(args.root, out, args.benchmark, args.seed)
        if args.features_only:
            from .bench import gallery_feature_speed
            from .data import load_synthetic

            gallery = load_synthetic(root, "test", args.variants[0]).images
            feature_rows = []
            for threads in args.feature_threads:
                torch.set_num_threads(threads)
                feature_rows.append(gallery_feature_speed(gallery))
                print(dumps_json(feature_rows[-1]))
        if train:
            rows = run_retrieval_bench(
                root,
                out,
                args.variants,
                methods,
                TrainConfig(args.phase1_epochs, args.phase2_epochs, seed=args.seed),
                augment_n=args.augment,
                seed=args.seed,
                image_encoders=args.image_encoders,
            )
        if args.search or args.search_only:
            search_rows = run_search_bench(
                out,
                n=args.search_n,
                n_queries=args.search_queries,
                threads=args.search_threads,
                seed=args.seed,
            )
        if args.json:
            config = {k: v for k, v in vars(args).items() if k not in ("cmd", "json", "overwrite")}
            write_json(Path(args.json), {"config": config, "rows": rows, "search": search_rows,
                                         "features": feature_rows})
        return 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
