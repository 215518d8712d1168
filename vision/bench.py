"""``moh bench --suite NAME``: the app's benchmarks.

* ``quick`` / ``full``: same-budget comparison of MoH against its baselines on Fashion-MNIST
  (32x32). Every model trains for the same number of steps with the same batches (same seed),
  then samples with the same DDIM schedule; metrics are the FMNIST-classifier FID (see
  ``vision.evaluate``), precision/recall against held-out test images, training time per step,
  sampling time, and the Mamba blocks actually run per image. For MoH the compute saved by its
  routes is measured in the same run against the same model forced to its full route (deepest
  scan, all levels). (:func:`run_bench`)
* ``sizes``: parameters, memory and training-step time of every model size (:func:`run_sizes`,
  one :func:`time_train_step` per size and backbone).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from common.device import resolve_device
from common.io import write_csv, write_json
from common.report import markdown_table
from common.seed import seed_everything
from vision.classifier import get_classifier
from vision.data import fashion_mnist_images
from vision.evaluate import classifier_metrics, to_model_range
from vision.models import MODEL_NAMES, MODEL_SIZES, build_backbone
from vision.models.layers import count_parameters
from vision.plots import plot_curves, plot_routing
from vision.sampling import sample_ddim, save_checkpoint, save_grid
from vision.train import TrainConfig, fit


@dataclass
class BenchConfig:
    """Defaults: the README table (about 30 min on a loaded 2-core machine, one thread)."""

    steps: int = 500
    batch_size: int = 32
    n_samples: int = 256
    sample_steps: int = 25
    train_limit: int = 20000
    n_real: int = 1000
    eval_points: int = 4  # FID evaluated at steps * i / eval_points
    models: tuple[str, ...] = MODEL_NAMES
    seed: int = 0
    threads: int = 1  # on a shared 2-core machine more threads thrash (measured 10x slower)


QUICK = BenchConfig(steps=120, batch_size=32, n_samples=96, sample_steps=10, train_limit=5000, n_real=500,
                    eval_points=1, models=("moh", "mamba", "dit"))


def fid_curve_table(curve: list[dict]) -> list[dict]:
    """``fid_curve`` rows ``{"model", "step", "fmnist_classifier_fid", ...}`` -> one row per step
    with one FID column per model."""
    steps = sorted({c["step"] for c in curve})
    models = list(dict.fromkeys(c["model"] for c in curve))
    fid = {(c["model"], c["step"]): c["fmnist_classifier_fid"] for c in curve}
    return [{"step": st, **{m: fid.get((m, st), float("nan")) for m in models}} for st in steps]


def run_bench(out_dir: str | Path, cfg: BenchConfig | None = None, log=None, device: str = "auto",
              precision: str = "32") -> list[dict]:
    """Train and evaluate ``cfg.models`` under one budget; writes ``bench.csv``, ``bench.json``,
    ``fid_curve.csv``, ``samples_<model>.png``, ``routing_moh.png`` / ``.csv`` into ``out_dir``
    and returns the table rows. Training and sampling run on ``device`` (training at
    ``precision``); the metrics on the CPU."""
    cfg = cfg or BenchConfig()
    dev = resolve_device(device)
    log = log or (lambda msg: print(msg, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    classifier, cinfo = get_classifier()
    x_train, _ = fashion_mnist_images("train", limit=cfg.train_limit, seed=cfg.seed)
    x_real, _ = fashion_mnist_images("test", limit=cfg.n_real, seed=cfg.seed)
    log(f"FMNIST classifier for features: test accuracy {cinfo.get('test_accuracy', float('nan')):.3f}")
    rows, curve, extras = [], [], {}
    eval_at = {max(1, round(cfg.steps * (i + 1) / cfg.eval_points)) for i in range(cfg.eval_points)}
    for name in cfg.models:
        t_model = time.perf_counter()
        seed_everything(cfg.seed)
        model = build_backbone(name)
        params = count_parameters(model)
        log(f"[{name}] {params:,} parameters, training {cfg.steps} steps x {cfg.batch_size}")

        def on_step(step, m, sampling_model, name=name):
            if step in eval_at and step != cfg.steps:
                s = sample_ddim(sampling_model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1)
                met = classifier_metrics(x_real, to_model_range(s.images), classifier)
                curve.append({"model": name, "step": step, **met})
                log(f"[{name}] step {step}: FMNIST-classifier FID {met['fmnist_classifier_fid']:.2f}")

        result = fit(model, x_train, TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, seed=cfg.seed,
                                                 checkpoint_every=0), callback=on_step, device=device,
                     precision=precision)
        save_checkpoint(model, out / f"model_{name}")
        model.to(dev)
        s = sample_ddim(model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1)
        met = classifier_metrics(x_real, to_model_range(s.images), classifier)
        curve.append({"model": name, "step": cfg.steps, **met})
        save_grid(s.images[:64], out / f"samples_{name}.png")
        layers = float(np.mean([r["sample_layers"] for r in s.trace]))
        row = {"model": name, "params": params, "train_steps": cfg.steps, "final_loss": round(result.final_loss, 4),
               "train_s_per_step": result.time_per_step_s, **met,
               "sample_s_per_image": s.time_s / cfg.n_samples, "blocks_per_image_step": layers}
        if name == "moh":
            full = {"depth": max(model.depth_options), "levels": list(range(model.config.num_levels))}
            s_full = sample_ddim(model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1, route=full)
            full_layers = float(np.mean([r["sample_layers"] for r in s_full.trace]))
            row["full_route_blocks"] = full_layers
            row["blocks_saved_frac"] = 1 - layers / full_layers
            row["sample_time_vs_full_route"] = s.time_s / s_full.time_s
            row["full_route_fid"] = classifier_metrics(x_real, to_model_range(s_full.images), classifier)["fmnist_classifier_fid"]
            write_csv(out / "routing_moh.csv", [{**r, "levels": " ".join(map(str, r["levels"]))} for r in result.route_log])
            write_json(out / "sampling_trace_moh.json", s.trace)
            plot_routing(result.route_log, s.trace, out / "routing_moh.png", model.depth_options,
                         len(model.transforms), model.config.num_levels)
            late = [r for r in result.route_log if r["step"] > cfg.steps // 2]
            for lo, hi in ((0, 333), (333, 666), (666, 1000)):
                sel = [r["depth"] for r in late if lo <= r["timestep"] < hi]
                row[f"train_depth_t{lo}-{hi}"] = float(np.mean(sel)) if sel else float("nan")
            extras["moh_trace"] = s.trace
        row["wall_s"] = time.perf_counter() - t_model
        rows.append(row)
        log(f"[{name}] FMNIST-classifier FID {met['fmnist_classifier_fid']:.2f}  "
            f"{result.time_per_step_s:.3f} s/step  ({row['wall_s']:.0f} s in all)")
    base = next((r for r in rows if r["model"] == "mamba"), None)
    for r in rows:
        if base:
            r["fid_vs_mamba"] = r["fmnist_classifier_fid"] / base["fmnist_classifier_fid"]
            r["step_time_vs_mamba"] = r["train_s_per_step"] / base["train_s_per_step"]
    write_csv(out / "bench.csv", rows)
    write_csv(out / "fid_curve.csv", curve)
    plot_curves(curve, out / "fid_curve.png", "step", "training step",
                (("fmnist_classifier_fid", "FMNIST-classifier FID"),), figsize=(5, 3.3), title="FID vs training steps")
    write_json(out / "bench.json", {"config": cfg.__dict__, "classifier": cinfo, "rows": rows, "fid_curve": curve})
    cols = ["model", "params", "train_s_per_step", "step_time_vs_mamba", "fmnist_classifier_fid", "fid_vs_mamba",
            "precision", "recall", "sample_s_per_image", "blocks_per_image_step"]
    log(markdown_table(rows, cols))
    log("FMNIST-classifier FID vs training steps:\n" + markdown_table(fid_curve_table(curve)))
    if any(r["model"] == "moh" for r in rows):
        m = next(r for r in rows if r["model"] == "moh")
        log(f"MoH routes ran {m['blocks_per_image_step']:.2f} Mamba blocks per image per step vs "
            f"{m['full_route_blocks']:.2f} on the full route ({100 * m['blocks_saved_frac']:.0f}% fewer); "
            f"sampling time ratio {m['sample_time_vs_full_route']:.2f}; full-route FID {m['full_route_fid']:.2f}")
        log("MoH mean routed depth by timestep (second half of training): " + ", ".join(
            f"{k.removeprefix('train_depth_')}: {v:.2f}" for k, v in m.items() if k.startswith("train_depth_")))
    return rows


# ----------------------------------------------------------------------------- model sizes


def time_train_step(model_size: str, backbone: str, device="auto", precision: str = "32", steps: int = 3,
                    batch_size: int = 32, image_size: int = 32, in_channels: int = 1,
                    forward_only: bool = False, clock=time.perf_counter) -> dict:
    """Time the training step of ``backbone`` (``moh``, ``mamba``, ``dit``, ``unet``) of
    ``model_size`` on ``device`` at ``precision``: AdamW on the x0 loss of random images
    ``(batch_size, in_channels, image_size, image_size)`` at random timesteps. One untimed warm-up
    step, then ``steps`` timed ones (``forward_only``: forward passes without gradients), read on
    ``clock`` (wall time; ``time.process_time`` for CPU time on a shared machine).

    Returns ``{"model_size", "backbone", "device", "precision", "batch_size", "image_size",
    "tokens", "params", "steps", "ms_per_step" (median), "ms_per_step_all", "peak_memory_mb",
    "memory"}``; ``peak_memory_mb`` is ``torch.cuda.max_memory_allocated`` on a GPU and the
    process's peak resident memory on the CPU (meaningful in a fresh process, which
    :func:`run_sizes` uses)."""
    from common.device import autocast, check_precision, describe
    from vision.sampling import backbone_call, make_train_scheduler

    dev = resolve_device(device)
    check_precision(precision, dev)
    torch.manual_seed(0)
    model = build_backbone(backbone, model_size, sample_size=image_size, in_channels=in_channels).to(dev)
    model.train(not forward_only)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "16-mixed")
    g = torch.Generator().manual_seed(0)
    shape = (batch_size, in_channels, image_size, image_size)
    x0, noise = torch.rand(shape, generator=g) * 2 - 1, torch.randn(shape, generator=g)
    t = torch.randint(0, 1000, (batch_size,), generator=g)
    a = make_train_scheduler().alphas_cumprod[t].view(-1, 1, 1, 1)
    xt, x0, t = (a.sqrt() * x0 + (1 - a).sqrt() * noise).to(dev), x0.to(dev), t.to(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times = []
    for _ in range(steps + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = clock()
        if forward_only:
            with torch.no_grad(), autocast(dev, precision):
                backbone_call(model, xt, t)
        else:
            with autocast(dev, precision):
                pred, aux, _ = backbone_call(model, xt, t)
                loss = torch.nn.functional.mse_loss(pred.float(), x0) + aux
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(1000 * (clock() - t0))
    if dev.type == "cuda":
        memory, peak = "cuda max allocated", torch.cuda.max_memory_allocated(dev) / 2**20
    else:
        import resource

        memory, peak = "process peak RSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    patch = model.config["patch_size"] if "patch_size" in model.config else None
    return {"model_size": model_size, "backbone": backbone, "device": describe(dev), "precision": precision,
            "batch_size": batch_size, "image_size": image_size, "in_channels": in_channels,
            "tokens": (image_size // patch) ** 2 if patch else None, "params": count_parameters(model),
            "forward_only": forward_only, "steps": steps, "ms_per_step": float(np.median(times[1:])),
            "ms_per_step_all": times[1:], "peak_memory_mb": peak, "memory": memory}


@dataclass
class SizesConfig:
    """``run_sizes``: the sizes described, the backbones timed, and the step measured per size
    (``train_sizes``: ``steps`` training steps at ``batch_size``; the others: one forward pass at
    ``forward_batch_size``)."""

    sizes: tuple[str, ...] = tuple(MODEL_SIZES)
    models: tuple[str, ...] = ("moh",)
    train_sizes: tuple[str, ...] = ("XS", "Ti", "S")
    steps: int = 2
    batch_size: int = 2
    forward_batch_size: int = 1
    image_size: int = 32
    threads: int = 1


def describe_size(name: str, image_size: int = 32) -> dict:
    """The size table's row ``name``: MoH's shape (``width``, ``depth_choices``, ``d_state``,
    ``patch_size``, ``level_layers``, ``tokens`` at ``image_size``) and the parameter counts of
    MoH and its matched baselines for 1-channel images (counted on the meta device)."""
    from vision.models import moh_config

    cfg = moh_config(name)
    with torch.device("meta"):
        params = {m: count_parameters(build_backbone(m, name, sample_size=image_size)) for m in MODEL_NAMES}
    return {"model_size": name, "width": cfg["d_model"], "depth_choices": list(cfg["depth_choices"]),
            "d_state": cfg["d_state"], "patch_size": cfg["patch_size"], "level_layers": cfg["level_layers"],
            "tokens": (image_size // cfg["patch_size"]) ** 2, "params": params}


def _time_in_fresh_process(kwargs: dict, threads: int) -> dict:
    torch.set_num_threads(threads)
    return time_train_step(**kwargs)


def run_sizes(cfg: SizesConfig | None = None, device: str = "auto", precision: str = "32", log=None) -> dict:
    """The size table: :func:`describe_size` of every size of ``cfg`` and one
    :func:`time_train_step` per size and timed backbone, each in a fresh process (so that the
    CPU's peak resident memory is that row's; an interruption ends that process at once). Returns
    ``{"config", "device", "precision", "sizes", "rows"}``."""
    import multiprocessing as mp

    from common.device import describe

    cfg = cfg or SizesConfig()
    log = log or (lambda msg: print(msg, flush=True))
    dev = resolve_device(device)
    sizes = [describe_size(size, cfg.image_size) for size in cfg.sizes]
    rows = []
    for size in cfg.sizes:
        train_step = size in cfg.train_sizes
        for name in cfg.models:
            kwargs = dict(model_size=size, backbone=name, device=str(dev), precision=precision,
                          steps=cfg.steps if train_step else 1, image_size=cfg.image_size,
                          batch_size=cfg.batch_size if train_step else cfg.forward_batch_size,
                          forward_only=not train_step)
            # a Pool, not a ProcessPoolExecutor: leaving the block terminates the worker, so Ctrl-C or
            # SIGTERM does not wait for a long timed step to finish
            with mp.get_context("spawn").Pool(1) as pool:
                row = pool.apply_async(_time_in_fresh_process, (kwargs, cfg.threads)).get()
            rows.append(row)
            log(f"[{size}] {name}: {row['params']:,} params, {row['tokens']} tokens, "
                f"{'forward' if row['forward_only'] else 'train step'} {row['ms_per_step']:.0f} ms "
                f"(batch {row['batch_size']}), peak memory {row['peak_memory_mb']:.0f} MB")
    log(markdown_table([{**{k: v for k, v in r.items() if k != "params"}, **{f"{m}_params": n for m, n in
                                                                              r["params"].items()}} for r in sizes]))
    log(markdown_table(rows, ["model_size", "backbone", "params", "tokens", "forward_only", "batch_size",
                              "ms_per_step", "peak_memory_mb"]))
    return {"config": cfg.__dict__, "device": describe(dev), "precision": precision, "sizes": sizes, "rows": rows}
