"""``moh``: train, sample, evaluate and benchmark the MoH diffusion backbone and its baselines.

    moh train --model moh --steps 300 --out runs/moh          # Fashion-MNIST 32x32, model size XS
    moh train --model-size S --device cuda --precision bf16-mixed --out runs/moh_s
    moh train --data sweethome3d --size 64 --out runs/sh3d    # Sweet Home 3D furniture icons (RGB)
    moh train --data path/to/images --size 64                 # your own ImageFolder (RGB)
    moh sample --ckpt runs/moh --n 64 --out grid.png
    moh eval --ckpt runs/moh --n 256 [--inception-weights inception-2015-12-05.pt]  # data from the checkpoint
    moh bench --suite quick|full --out runs/bench [--json results.json]
    moh bench --suite sizes --json docs/results/vision/sizes.json
    moh bench --suite compute --workers 4 --out runs/compute --json docs/results/vision/compute.json
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
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    subcommand_main,
)
from common.device import add_device_arg, add_precision_arg, check_precision, resolve_device  # noqa: E402
from common.errors import InputError  # noqa: E402
from common.limits import add_force_arg  # noqa: E402
from vision.limits import MAX_IMAGES, MAX_SAMPLES, MAX_THREADS, check_max, check_sampling, check_training  # noqa: E402

SUITES = ("quick", "full", "sizes", "compute")
SAMPLERS = ("ddim", "ddpm", "dpmsolver++")  # vision.sampling.SAMPLERS, named here: parsing imports no torch
SAMPLER_HELP = "ddim (default), ddpm (ancestral) or dpmsolver++ (DPM-Solver++ 2M, one model evaluation per step)"
# options that only some suites read (any other suite refuses them)
SUITE_OPTIONS = {"n_samples": ("quick", "full", "compute"), "sizes": ("sizes",), "batch_size": ("sizes",),
                 "budget_min": ("compute",), "model_size": ("compute",), "workers": ("compute",)}


def _data_input(spec: str | None) -> str | None:
    """The image folder read by ``--data`` (None for the built-in datasets)."""
    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D

    return None if spec in FASHION_MNIST_NAMES or spec == SWEETHOME3D else spec


def cmd_train(a) -> int:
    import torch

    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D, data_spec, load_dataset, sweethome3d_items
    from vision.models import build_backbone
    from vision.train import TrainConfig, fit

    _apply_preset(a)
    out = Path(a.out or f"runs/{a.model}")
    channels = a.channels or (1 if a.data in FASHION_MNIST_NAMES else 3)
    check_training(steps=a.steps, batch_size=a.batch_size, size=a.size, channels=channels, limit=a.limit,
                   force=a.force)
    if a.patch_size and a.patch_size > a.size:
        raise InputError(f"--patch-size {a.patch_size} is larger than the image (--size {a.size})")
    check_precision(a.precision, resolve_device(a.device))
    if a.resume and a.overwrite:
        raise InputError("--resume continues the run in --out; --overwrite would replace it (choose one)")
    if a.resume and not a.checkpoint_every:
        raise InputError("--resume needs --checkpoint-every > 0 (the full state is saved that often)")
    check_outputs(dirs=[] if a.resume else [out], inputs=[_data_input(a.data)], overwrite=a.overwrite)
    torch.set_num_threads(a.threads)
    images = load_dataset(a.data, a.size, channels, limit=a.limit, seed=a.seed)
    torch.manual_seed(a.seed)
    patch = {"patch_size": a.patch_size} if a.patch_size else {}
    model = build_backbone(a.model, a.model_size, sample_size=a.size, in_channels=channels, **patch)
    print(f"training {a.model} ({a.model_size}) on {len(images)} images for {a.steps} steps on "
          f"{resolve_device(a.device)}", file=sys.stderr, flush=True)
    cfg = TrainConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed, ema_decay=a.ema_decay,
                      checkpoint_every=a.checkpoint_every, snapshot_every=a.snapshot_every,
                      min_snr_gamma=a.min_snr_gamma, **({"warmup": a.warmup} if a.warmup is not None else {}))
    res = fit(model, images, cfg, out_dir=out, progress=sys.stdout.isatty(),
              data=data_spec(a.data, a.size, channels, a.seed), device=a.device, precision=a.precision,
              resume=a.resume)
    if a.data == SWEETHOME3D and res.checkpoint is not None:  # CC-BY 3.0: the creators travel with the model
        from common.sweethome3d import write_attribution

        path = write_attribution(sweethome3d_items("train", a.seed)[:a.limit], out / "ATTRIBUTION.csv")
        print(f"attribution of the training icons (CC-BY 3.0 / CC0): {path}")
    if res.checkpoint is not None:  # rank 0 (the only one under torchrun that writes)
        print(f"trained {a.model} ({a.model_size}) for {res.steps} steps: final loss {res.final_loss:.4f}, "
              f"{res.time_per_step_s:.3f} s/step; checkpoint {res.checkpoint}")
    if torch.distributed.is_initialized():  # under torchrun: every rank has finished writing
        from common.engine import exit_distributed

        exit_distributed(0)
    return 0


TRAIN_DEFAULTS = {"data": "fashion-mnist", "size": 32, "model_size": "XS", "steps": 300, "batch_size": 32,
                  "lr": 2e-3, "ema_decay": 0.995, "limit": 20000, "checkpoint_every": 100, "snapshot_every": 0,
                  "warmup": None}


def _apply_preset(a) -> None:
    """Fill the training options left unset from ``--preset`` (``vision.train.PRESETS``), then from
    the plain defaults; an option given on the command line always wins."""
    from vision.train import MIN_SNR_GAMMA, PRESETS

    preset = PRESETS[a.preset] if a.preset else {}
    for key, default in {**TRAIN_DEFAULTS, "min_snr_gamma": MIN_SNR_GAMMA}.items():
        if getattr(a, key, None) is None:
            setattr(a, key, preset.get(key, default))
    if not 0 <= a.ema_decay < 1:
        raise InputError(f"--ema-decay must be in [0, 1), got {a.ema_decay}")


def cmd_sample(a) -> int:
    import torch

    from vision.models import load_backbone
    from vision.sampling import MoHPipeline, checkpoint_dir, load_sampler, save_grid

    path = Path(a.out or "grid.png")
    _check_counts(a)
    check_outputs(files=[path], inputs=[a.ckpt], overwrite=a.overwrite)
    ckpt = checkpoint_dir(a.ckpt)
    model = load_backbone(ckpt)
    check_sampling(n=a.n, steps=a.steps, channels=model.config.in_channels, size=model.config.sample_size,
                   force=a.force)
    device = resolve_device(a.device)
    model = model.to(device)
    print(f"sampling {a.n} images in {a.steps} {a.sampler} steps on {device}", file=sys.stderr, flush=True)
    out = MoHPipeline(model, load_sampler(ckpt, a.sampler))(
        batch_size=a.n, num_inference_steps=a.steps, generator=torch.Generator().manual_seed(a.seed))
    save_grid(out.images, path)
    depths = [r["depth"] for r in out.trace if "depth" in r]
    extra = f"; mean routed depth {sum(depths) / len(depths):.2f}" if depths else ""
    print(f"wrote {a.n} samples to {path} in {out.time_s:.1f} s{extra}")
    return 0


def cmd_eval(a) -> int:
    import torch

    from common.io import write_json
    from vision.classifier import get_classifier
    from vision.data import FASHION_MNIST_NAMES, SWEETHOME3D, load_dataset
    from vision.evaluate import (
        classifier_metrics,
        feature_encoder,
        feature_metrics,
        inception_fid,
        inception_weights_path,
        load_inception,
        recognisability,
        to_model_range,
    )
    from vision.models import load_backbone
    from vision.sampling import MoHPipeline, checkpoint_data, checkpoint_dir, load_sampler

    _check_counts(a)
    check_max("--n-real", a.n_real, MAX_IMAGES, "the reference images are held in memory", a.force)
    ckpt = checkpoint_dir(a.ckpt)
    trained_on = checkpoint_data(ckpt)
    source = a.data or (trained_on or {}).get("source", "fashion-mnist")
    split_seed = (trained_on or {}).get("seed", 0) if source == SWEETHOME3D else a.seed
    check_outputs(files=[a.out], inputs=[a.ckpt, _data_input(source), a.inception_weights],
                  overwrite=a.overwrite)
    model = load_backbone(ckpt)
    cfg = model.config
    check_sampling(n=a.n, steps=a.steps, channels=cfg.in_channels, size=cfg.sample_size, force=a.force)
    weights = inception_weights_path(a.inception_weights)
    detector = load_inception(weights) if weights is not None else None  # a bad file fails before sampling
    real = load_dataset(source, cfg.sample_size, cfg.in_channels, limit=a.n_real, split="test", seed=split_seed)
    out = MoHPipeline(model.to(resolve_device(a.device)), load_sampler(ckpt, a.sampler))(
        batch_size=a.n, num_inference_steps=a.steps, generator=torch.Generator().manual_seed(a.seed))
    fake = to_model_range(out.images)
    metrics = {"data": source, "n_real": int(real.shape[0]), "n_samples": a.n, "sampler": a.sampler,
               "sampling_steps": a.steps, "sample_s_per_image": out.time_s / a.n}
    # the encoder follows --device (features computed where the samples were)
    metrics.update(feature_metrics(real, fake, feature_encoder().to(resolve_device(a.device))))
    if cfg.in_channels == 1 and cfg.sample_size == 32 and source in FASHION_MNIST_NAMES:
        classifier = get_classifier()[0]
        metrics.update(classifier_metrics(real, fake, classifier))
        recog = recognisability(fake, classifier)
        recog.pop("labels")
        metrics.update({f"recognisable_{k}" if k != "class_shares" else k: v for k, v in recog.items()})
    if detector is not None:
        metrics["inception_fid"] = inception_fid(real, fake, detector)
    for k, v in metrics.items():
        if isinstance(v, dict):
            v = ", ".join(f"{n} {x:.2f}" for n, x in v.items())
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    if a.out:
        write_json(a.out, metrics)
    return 0


def _check_counts(a) -> None:
    """The bounds that need no checkpoint, checked before anything is read."""
    check_sampling(n=a.n, steps=a.steps, channels=1, size=1, force=a.force)


def cmd_bench(a) -> int:
    check_training(steps=a.steps, batch_size=a.batch_size, size=32, channels=3, limit=None, force=a.force)
    check_max("--n-samples", a.n_samples, MAX_SAMPLES, "the bench's samples are one batch", a.force)
    check_precision(a.precision, resolve_device(a.device))
    for option, suites in SUITE_OPTIONS.items():
        if getattr(a, option) not in (None, False) and a.suite not in suites:
            flag = "--" + option.replace("_", "-")
            raise InputError(f"{flag} applies to --suite {' / '.join(suites)} only, not {a.suite}")
    json_path = Path(a.json) if a.json else None
    if a.suite == "sizes":
        return _bench_sizes(a, json_path)
    if a.suite == "compute":
        return _bench_compute(a, json_path)
    from common.io import write_json
    from vision.bench import QUICK, BenchConfig, run_bench

    out = a.out or "runs/vision_bench"
    check_outputs(files=[json_path] if json_path else (), dirs=[out], overwrite=a.overwrite)
    cfg = QUICK if a.suite == "quick" else BenchConfig()
    overrides = {"seed": a.seed}
    if a.steps:
        overrides["steps"] = a.steps
    if a.n_samples:
        overrides["n_samples"] = a.n_samples
    if a.models:
        overrides["models"] = tuple(a.models)
    cfg = BenchConfig(**{**cfg.__dict__, **overrides})
    rows = run_bench(out, cfg, device=a.device, precision=a.precision)
    if json_path is not None:  # the README's table source: config + one row per model, NaN as null
        write_json(json_path, {"config": cfg.__dict__, "rows": rows})
    return 0


def _bench_sizes(a, json_path: Path | None) -> int:
    from common.io import write_json
    from vision.bench import SizesConfig, run_sizes

    if a.out:
        raise InputError("--out does not apply to --suite sizes (it writes its results to --json)")
    check_outputs(files=[json_path] if json_path else (), overwrite=a.overwrite)
    overrides = {k: tuple(v) for k, v in (("sizes", a.sizes), ("models", a.models)) if v}
    overrides.update({k: v for k, v in (("steps", a.steps), ("batch_size", a.batch_size)) if v})
    cfg = SizesConfig(**overrides)
    print(f"measuring sizes {' '.join(cfg.sizes)} of {' '.join(cfg.models)}, each in a fresh process",
          file=sys.stderr, flush=True)
    result = run_sizes(cfg, device=a.device, precision=a.precision)
    if json_path is not None:
        write_json(json_path, result)
        print(f"wrote {json_path}")
    return 0


def _bench_compute(a, json_path: Path | None) -> int:
    import shutil

    from common.io import write_json
    from vision.compute import ComputeConfig, run_compute
    from vision.limits import MAX_BUDGET_MIN

    if a.steps:
        raise InputError("--steps does not apply to --suite compute (the budget is --budget-min)")
    check_max("--budget-min", a.budget_min, MAX_BUDGET_MIN, "a day of training per model", a.force)
    out = Path(a.out or "runs/vision_compute")
    plot_path = json_path.with_suffix(".png") if json_path else None
    check_outputs(files=[p for p in (json_path, plot_path) if p], dirs=[out], overwrite=a.overwrite)
    overrides = {k: v for k, v in (("budget_min", a.budget_min), ("model_size", a.model_size), ("seed", a.seed),
                                   ("n_samples", a.n_samples), ("models", a.models and tuple(a.models)),
                                   ("workers", a.workers)) if v is not None}
    result = run_compute(out, ComputeConfig(**overrides), device=a.device, precision=a.precision)
    if json_path is not None:  # the README's source, plot beside it
        write_json(json_path, result)
        shutil.copyfile(out / "compute.png", plot_path)
        print(f"wrote {json_path} and {plot_path}")
    return 0


FORCE_HELP = "allow counts and sizes over their documented maxima (vision/limits.py; the memory check still applies)"


def build_parser() -> argparse.ArgumentParser:
    from vision.models import MODEL_NAMES, MODEL_SIZES
    from vision.train import PRESETS

    p = ArgumentParser(prog="moh", description="MoH: Mamba diffusion with Mixture-of-Hierarchical experts")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a backbone")
    add_common_args(t)
    add_device_arg(t)
    add_force_arg(t, FORCE_HELP)
    add_precision_arg(t)
    t.add_argument("--model", choices=MODEL_NAMES, default="moh")
    t.add_argument("--model-size", choices=tuple(MODEL_SIZES), default=None,
                   help="width, depth and patch of MoH (the baselines are matched to its parameters); "
                        "see the size table in vision/README.md (default XS)")
    t.add_argument("--data", default=None,
                   help="'fashion-mnist', 'sweethome3d' (furniture icons, seeded split by item) or an image folder")
    t.add_argument("--size", type=positive_int, default=None, help="image size in pixels (default 32)")
    t.add_argument("--channels", type=int_in(1, 4), default=None,
                   help="1 (grayscale) or 3 (RGB); default 1 for Fashion-MNIST, 3 otherwise")
    t.add_argument("--patch-size", type=positive_int, default=None, help="default: the model size's")
    t.add_argument("--steps", type=positive_int, default=None, help="default 300; at most 200000 without --force")
    t.add_argument("--batch-size", type=positive_int, default=None, help="default 32")
    t.add_argument("--lr", type=positive_float, default=None, help="default 2e-3")
    t.add_argument("--ema-decay", type=float, default=None, help="default 0.995 (0: no EMA)")
    t.add_argument("--min-snr-gamma", type=nonneg_float, default=None,
                   help="loss weight min(SNR_t, gamma) per timestep (Hang et al. 2023); default 5, 0: uniform")
    t.add_argument("--limit", type=positive_int, default=None, help="training images used (default 20000)")
    t.add_argument("--checkpoint-every", type=nonneg_int, default=None, help="default 100")
    t.add_argument("--snapshot-every", type=nonneg_int, default=None,
                   help="also keep the sampling weights every N steps in OUT/snapshots (default 0: none)")
    t.add_argument("--preset", choices=tuple(PRESETS),
                   help="a named recipe (data, size, steps, batch, learning rate, EMA, snapshots) behind a shipped model; "
                        "options given explicitly override it")
    t.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in --out from its last full checkpoint (same options)")
    t.add_argument("--threads", type=int_in(1, MAX_THREADS), default=1)
    t.set_defaults(fn=cmd_train)
    s = sub.add_parser("sample", help="sample a grid of images")
    add_common_args(s, out_default="grid.png")
    add_device_arg(s)
    add_force_arg(s, FORCE_HELP)
    s.add_argument("--ckpt", required=True)
    s.add_argument("--n", type=positive_int, default=64, help="samples, one batch (at most 4096 without --force)")
    s.add_argument("--steps", type=positive_int, default=25, help="denoising steps (at most 1000)")
    s.add_argument("--sampler", choices=SAMPLERS, default="ddim", help=SAMPLER_HELP)
    s.set_defaults(fn=cmd_sample)
    e = sub.add_parser("eval", help="EfficientNet-Lite0 FID, FMNIST-classifier FID / precision / recall "
                                    "(Inception FID with local weights)")
    add_common_args(e)
    add_device_arg(e)
    add_force_arg(e, FORCE_HELP)
    e.add_argument("--ckpt", required=True)
    e.add_argument("--data", default=None,
                   help="real images to compare with: default the checkpoint's training data (its test split)")
    e.add_argument("--n", type=positive_int, default=256)
    e.add_argument("--n-real", type=positive_int, default=1000)
    e.add_argument("--steps", type=positive_int, default=25)
    e.add_argument("--sampler", choices=SAMPLERS, default="ddim", help=SAMPLER_HELP)
    e.add_argument("--inception-weights", default=None,
                   help="TorchScript inception-2015-12-05.pt (or $MOH_INCEPTION_WEIGHTS)")
    e.set_defaults(fn=cmd_eval)
    b = sub.add_parser("bench", help="benchmark suites: quick / full same-budget table, model sizes, compute")
    add_common_args(b)
    add_device_arg(b)
    add_force_arg(b, FORCE_HELP)
    add_precision_arg(b)
    b.add_argument("--suite", choices=SUITES, default="full",
                   help="quick: 120 steps, MoH / plain Mamba / DiT (minutes); full: 500 steps, all four models; "
                        "sizes: parameters, memory and step time of every model size; compute: all models for the "
                        "same training minutes, quality against minutes (with --json also the plot beside it, .png) "
                        "(default full). The scaling trend (formerly --suite scaling with --budgets / --datasets / "
                        "--resume) is python -m experiments.vision.scaling")
    b.add_argument("--steps", type=positive_int, help="quick / full: training steps; sizes: timed steps")
    b.add_argument("--n-samples", type=positive_int, help="quick / full: samples scored")
    b.add_argument("--models", nargs="+", choices=MODEL_NAMES)
    b.add_argument("--json", metavar="PATH", help="also write the results as JSON (NaN as null)")
    b.add_argument("--sizes", nargs="+", choices=tuple(MODEL_SIZES), help="sizes: model sizes to measure")
    b.add_argument("--batch-size", type=positive_int, help="sizes: batch of the timed training steps")
    b.add_argument("--budget-min", type=positive_float,
                   help="compute: training minutes per model (CPU time on the CPU; default 5)")
    b.add_argument("--model-size", choices=tuple(MODEL_SIZES), help="compute: the models' size (default Ti)")
    b.add_argument("--workers", type=int_in(1, 8), help="compute: models trained at once, one process each")
    b.set_defaults(fn=cmd_bench)
    return p


main = subcommand_main(build_parser)


if __name__ == "__main__":
    raise SystemExit(main())
