"""``moh``: train, sample, evaluate and benchmark the MoH diffusion backbone and its baselines.

    moh train --model moh --steps 300 --out runs/moh          # Fashion-MNIST 32x32
    moh train --data sweethome3d --size 64 --out runs/sh3d    # Sweet Home 3D furniture icons (RGB)
    moh train --data path/to/images --size 64                 # your own ImageFolder (RGB)
    moh sample --ckpt runs/moh --n 64 --out grid.png
    moh eval --ckpt runs/moh --n 256 [--inception-weights inception-2015-12-05.pt]  # data from the checkpoint
    moh bench [--quick] --out runs/bench [--json results.json]
    moh bench --scaling --out runs/scaling --json docs/results/vision/scaling.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from common.cli import (  # noqa: E402
    ArgumentParser,
    add_common_args,
    check_outputs,
    int_in,
    nonneg_int,
    positive_float,
    positive_int,
    subcommand_main,
)
from common.errors import InputError  # noqa: E402


def _checkpoint_dir(path: str) -> Path:
    p = Path(path)
    return p / "checkpoint" if (p / "checkpoint").is_dir() else p


def _data_input(spec: str | None) -> str | None:
    """The image folder read by ``--data`` (None for the built-in datasets)."""
    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D

    return None if spec in FASHION_MNIST_NAMES or spec == SWEETHOME3D else spec


def _train(a) -> int:
    import torch

    from vision.baselines import build_model
    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D, data_spec, load_dataset, sweethome3d_items
    from vision.train import TrainConfig, train

    out = Path(a.out or f"runs/{a.model}")
    check_outputs(dirs=[out], inputs=[_data_input(a.data)], overwrite=a.overwrite)
    torch.set_num_threads(a.threads)
    channels = a.channels or (1 if a.data in FASHION_MNIST_NAMES else 3)
    images = load_dataset(a.data, a.size, channels, limit=a.limit, seed=a.seed)
    torch.manual_seed(a.seed)
    model = build_model(a.model, sample_size=a.size, in_channels=channels, patch_size=a.patch_size)
    res = train(model, images, TrainConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed,
                                           checkpoint_every=a.checkpoint_every), out_dir=out,
                progress=sys.stdout.isatty(), data=data_spec(a.data, a.size, channels, a.seed))
    if a.data == SWEETHOME3D and res.checkpoint is not None:  # CC-BY 3.0: the creators travel with the model
        from common.sweethome3d import write_attribution

        path = write_attribution(sweethome3d_items("train", a.seed)[:a.limit], out / "ATTRIBUTION.csv")
        print(f"attribution of the training icons (CC-BY 3.0 / CC0): {path}")
    if res.checkpoint is not None:  # rank 0 (the only one under torchrun that writes)
        print(f"trained {a.model} for {res.steps} steps: final loss {res.final_loss:.4f}, "
              f"{res.time_per_step_s:.3f} s/step; checkpoint {res.checkpoint}")
    if torch.distributed.is_initialized():  # under torchrun: every rank has finished writing
        from common.engine import exit_distributed

        exit_distributed(0)
    return 0


def _sample(a) -> int:
    import torch

    from vision.baselines import load_model
    from vision.pipeline import MoHPipeline, load_sampler, save_grid

    path = Path(a.out or "grid.png")
    check_outputs(files=[path], inputs=[a.ckpt], overwrite=a.overwrite)
    ckpt = _checkpoint_dir(a.ckpt)
    model = load_model(ckpt)
    out = MoHPipeline(model, load_sampler(ckpt, a.sampler))(
        batch_size=a.n, num_inference_steps=a.steps, generator=torch.Generator().manual_seed(a.seed))
    save_grid(out.images, path)
    depths = [r["depth"] for r in out.trace if "depth" in r]
    extra = f"; mean routed depth {sum(depths) / len(depths):.2f}" if depths else ""
    print(f"wrote {a.n} samples to {path} in {out.time_s:.1f} s{extra}")
    return 0


def _eval(a) -> int:
    import torch

    from common.io import write_json
    from vision.baselines import load_model
    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D, load_dataset
    from vision.evaluate import (
        classifier_metrics,
        feature_metrics,
        get_classifier,
        inception_fid,
        inception_weights_path,
        to_model_range,
    )
    from vision.pipeline import MoHPipeline, load_sampler
    from vision.train import STATE, checkpoint_data

    ckpt = _checkpoint_dir(a.ckpt)
    trained_on = checkpoint_data(ckpt) if (ckpt / STATE).is_file() else None
    source = a.data or (trained_on or {}).get("source", "fashion-mnist")
    split_seed = (trained_on or {}).get("seed", 0) if source == SWEETHOME3D else a.seed
    check_outputs(files=[a.out], inputs=[a.ckpt, _data_input(source), a.inception_weights],
                  overwrite=a.overwrite)
    model = load_model(ckpt)
    cfg = model.config
    weights = inception_weights_path(a.inception_weights)
    real = load_dataset(source, cfg.sample_size, cfg.in_channels, limit=a.n_real, split="test", seed=split_seed)
    out = MoHPipeline(model, load_sampler(ckpt, "ddim"))(batch_size=a.n, num_inference_steps=a.steps,
                                                   generator=torch.Generator().manual_seed(a.seed))
    fake = to_model_range(out.images)
    metrics = {"data": source, "n_real": int(real.shape[0]), "n_samples": a.n, "sampling_steps": a.steps,
               "sample_s_per_image": out.time_s / a.n}
    metrics.update(feature_metrics(real, fake))
    if cfg.in_channels == 1 and cfg.sample_size == 32 and source in FASHION_MNIST_NAMES:
        metrics.update(classifier_metrics(real, fake, get_classifier()[0]))
    if weights is not None:
        metrics["inception_fid"] = inception_fid(real, fake, weights)
    for k, v in metrics.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if a.out:
        write_json(a.out, metrics)
    return 0


def _bench(a) -> int:
    from common.io import write_json
    from vision.bench import QUICK, BenchConfig, run_bench

    json_path = Path(a.json) if a.json else None
    if a.resume and not a.scaling:
        raise InputError("--resume applies to --scaling only")
    if a.scaling:
        return _bench_scaling(a, json_path)
    check_outputs(files=[json_path] if json_path else (), dirs=[a.out or "runs/vision_bench"],
                  overwrite=a.overwrite)
    cfg = QUICK if a.quick else BenchConfig()
    overrides = {"seed": a.seed}
    if a.steps:
        overrides["steps"] = a.steps
    if a.models:
        overrides["models"] = tuple(a.models)
    cfg = BenchConfig(**{**cfg.__dict__, **overrides})
    rows = run_bench(a.out or "runs/vision_bench", cfg)
    if json_path is not None:  # the README's table source: config + one row per model, NaN as null
        write_json(json_path, {"config": cfg.__dict__, "rows": rows})
    return 0


def _bench_scaling(a, json_path: Path | None) -> int:
    import shutil

    from common.io import write_json
    from vision.bench import ScalingConfig, run_scaling

    out = Path(a.out or "runs/vision_scaling")
    plot_path = json_path.with_suffix(".png") if json_path else None
    check_outputs(files=[p for p in (json_path, plot_path) if p], dirs=[] if a.resume else [out],
                  overwrite=a.overwrite)
    overrides = {k: tuple(v) for k, v in (("budgets", a.budgets), ("datasets", a.datasets), ("models", a.models)) if v}
    result = run_scaling(out, ScalingConfig(**overrides), resume=a.resume)
    if json_path is not None:  # the README's source: config, per-run rows and the summary, plot beside it
        write_json(json_path, result)
        shutil.copyfile(out / "scaling.png", plot_path)
        print(f"wrote {json_path} and {plot_path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vision.baselines import MODEL_NAMES

    p = ArgumentParser(prog="moh", description="MoH: Mamba diffusion with Mixture-of-Hierarchical experts")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a backbone")
    add_common_args(t)
    t.add_argument("--model", choices=MODEL_NAMES, default="moh")
    t.add_argument("--data", default="fashion-mnist",
                   help="'fashion-mnist', 'sweethome3d' (furniture icons, seeded split by item) or an image folder")
    t.add_argument("--size", type=positive_int, default=32)
    t.add_argument("--channels", type=int_in(1, 4), default=None,
                   help="1 (grayscale) or 3 (RGB); default 1 for Fashion-MNIST, 3 otherwise")
    t.add_argument("--patch-size", type=positive_int, default=4)
    t.add_argument("--steps", type=positive_int, default=300)
    t.add_argument("--batch-size", type=positive_int, default=32)
    t.add_argument("--lr", type=positive_float, default=2e-3)
    t.add_argument("--limit", type=positive_int, default=20000, help="training images used")
    t.add_argument("--checkpoint-every", type=nonneg_int, default=100)
    t.add_argument("--threads", type=positive_int, default=1)
    t.set_defaults(fn=_train)
    s = sub.add_parser("sample", help="sample a grid of images")
    add_common_args(s, out_default="grid.png")
    s.add_argument("--ckpt", required=True)
    s.add_argument("--n", type=positive_int, default=64)
    s.add_argument("--steps", type=positive_int, default=25)
    s.add_argument("--sampler", choices=("ddim", "ddpm"), default="ddim")
    s.set_defaults(fn=_sample)
    e = sub.add_parser("eval", help="EfficientNet-Lite0 FID, FMNIST-classifier FID / precision / recall "
                                    "(Inception FID with local weights)")
    add_common_args(e)
    e.add_argument("--ckpt", required=True)
    e.add_argument("--data", default=None,
                   help="real images to compare with: default the checkpoint's training data (its test split)")
    e.add_argument("--n", type=positive_int, default=256)
    e.add_argument("--n-real", type=positive_int, default=1000)
    e.add_argument("--steps", type=positive_int, default=25)
    e.add_argument("--inception-weights", default=None,
                   help="TorchScript inception-2015-12-05.pt (or $MOH_INCEPTION_WEIGHTS)")
    e.set_defaults(fn=_eval)
    b = sub.add_parser("bench", help="same-budget comparison table, CSV and sample grids")
    add_common_args(b)
    b.add_argument("--quick", action="store_true")
    b.add_argument("--steps", type=positive_int)
    b.add_argument("--models", nargs="+", choices=MODEL_NAMES)
    b.add_argument("--json", metavar="PATH", help="also write the results rows as JSON (NaN as null)")
    b.add_argument("--scaling", action="store_true",
                   help="the scaling trend: all models at budgets S/M/L on both datasets (EfficientNet-Lite0 "
                        "FID); with --json also the plot beside it (same name, .png)")
    b.add_argument("--budgets", nargs="+", choices=("S", "M", "L"), help="with --scaling: budgets to run")
    b.add_argument("--datasets", nargs="+", choices=("fashion-mnist", "sweethome3d"),
                   help="with --scaling: datasets to run")
    b.add_argument("--resume", action="store_true",
                   help="with --scaling: continue in an existing --out directory, keeping its finished runs")
    b.set_defaults(fn=_bench)
    return p


main = subcommand_main(build_parser)


if __name__ == "__main__":
    raise SystemExit(main())
