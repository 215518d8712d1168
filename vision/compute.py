"""``moh bench --suite compute``: sample quality against training compute, one curve per model.

MoH and its parameter-matched baselines (plain Mamba, DiT, UNet) of one size each train once for
the same compute budget; snapshots of their sampling (EMA) weights at fractions of it are scored
with the Fashion-MNIST classifier (``vision.evaluate``: FID, precision / recall against held-out
test images, the share of confidently classified samples) on the same DDIM samples (count, steps
and seed). The budget is converted into training steps per model from a timed training step
(``vision.bench.time_train_step``), so every model's learning-rate schedule ends at its budget;
the curves' x axis is the training compute actually measured up to each snapshot (evaluation
excluded): process CPU time on the CPU, wall time on a GPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common.device import resolve_device
from common.io import write_json
from common.report import markdown_table
from common.seed import seed_everything
from vision.bench import time_train_step
from vision.classifier import get_classifier
from vision.data import fashion_mnist_images
from vision.evaluate import classifier_metrics, recognisability, to_model_range
from vision.models import MODEL_NAMES, build_backbone
from vision.models.layers import count_parameters
from vision.plots import plot_curves
from vision.sampling import sample_ddim, save_grid
from vision.train import MIN_SNR_GAMMA, TrainConfig, fit

METRICS = ("fmnist_classifier_fid", "precision", "recall", "confident_share")
# the figure's panels: (metric, axis label)
PANELS = (("fmnist_classifier_fid", "FMNIST-classifier FID (lower is better)"), ("precision", "precision"),
          ("recall", "recall"), ("confident_share", "confident share (classifier p >= 0.8)"))


@dataclass
class ComputeConfig:
    """Defaults: the README's table (four Ti models, 5 CPU minutes each: about 35 CPU minutes with
    the evaluations)."""

    model_size: str = "Ti"
    budget_min: float = 5.0  # training minutes per model
    fractions: tuple[float, ...] = (1 / 3, 2 / 3, 1.0)  # snapshots, as fractions of the budget
    models: tuple[str, ...] = MODEL_NAMES
    batch_size: int = 32
    train_limit: int = 20000
    n_real: int = 1000
    n_samples: int = 256
    sample_steps: int = 25
    calibration_steps: int = 3
    seed: int = 0
    threads: int = 1  # per model
    workers: int = 1  # models trained at once, each in its own process
    min_snr_gamma: float = MIN_SNR_GAMMA  # the training loss weighting of every model (vision.train)


def score_snapshot(model, cfg: ComputeConfig, real: torch.Tensor, classifier) -> tuple[dict, object]:
    """``METRICS`` of ``cfg.n_samples`` DDIM samples of ``model`` (seed ``cfg.seed + 1``) against
    ``real (N, 1, 32, 32)``, and the samples."""
    s = sample_ddim(model, cfg.n_samples, cfg.sample_steps, cfg.seed + 1)
    fake = to_model_range(s.images)
    rec = recognisability(fake, classifier)
    return {**classifier_metrics(real, fake, classifier), "confident_share": rec["confident_share"],
            "min_class_share": rec["min_class_share"]}, s.images


def _print(msg: str) -> None:
    print(msg, flush=True)


def train_and_score(name: str, cfg: ComputeConfig, out: Path, device: str = "auto", precision: str = "32",
                    log=_print) -> tuple[dict, list[dict]]:
    """Train backbone ``name`` once for ``cfg.budget_min`` and score its snapshots. Returns its row
    ``{"model", "params", "steps", "calibrated_s_per_step"}`` and its curve rows ``{"model",
    "budget_fraction", "step", "train_min", METRICS..., "min_class_share"}``; writes
    ``samples_<name>.png`` (full budget) into ``out``."""
    dev = resolve_device(device)
    torch.set_num_threads(cfg.threads)
    clock = time.process_time if dev.type == "cpu" else time.perf_counter
    classifier, _ = get_classifier()
    x_train, _ = fashion_mnist_images("train", limit=cfg.train_limit, seed=cfg.seed)
    x_real, _ = fashion_mnist_images("test", limit=cfg.n_real, seed=cfg.seed)
    step_s = time_train_step(cfg.model_size, name, device=str(dev), precision=precision,
                             steps=cfg.calibration_steps, batch_size=cfg.batch_size, clock=clock)["ms_per_step"] / 1000
    steps = max(len(cfg.fractions), round(60 * cfg.budget_min / step_s))
    snapshots = {max(1, round(steps * f)): f for f in cfg.fractions}
    seed_everything(cfg.seed)
    model = build_backbone(name, cfg.model_size)
    log(f"[{name}] {count_parameters(model):,} parameters, {1000 * step_s:.0f} ms per step -> {steps} steps "
        f"in {cfg.budget_min:g} min")
    curve, spent = [], {"start": clock(), "eval": 0.0}

    def on_step(step, m, sampling_model):
        if step not in snapshots:
            return
        train_min = (clock() - spent["start"] - spent["eval"]) / 60
        t0 = clock()
        met, images = score_snapshot(sampling_model, cfg, x_real, classifier)
        if snapshots[step] == max(cfg.fractions):
            save_grid(images[:64], out / f"samples_{name}.png")
        spent["eval"] += clock() - t0
        curve.append({"model": name, "budget_fraction": snapshots[step], "step": step, "train_min": train_min,
                      **met})
        log(f"[{name}] step {step} ({train_min:.1f} min): FID {met['fmnist_classifier_fid']:.2f}, "
            f"confident {met['confident_share']:.3f}")

    fit(model, x_train, TrainConfig(steps=steps, batch_size=cfg.batch_size, seed=cfg.seed, checkpoint_every=0,
                                        min_snr_gamma=cfg.min_snr_gamma),
        callback=on_step, device=device, precision=precision)
    return {"model": name, "params": count_parameters(model), "steps": steps, "calibrated_s_per_step": step_s}, curve


def run_compute(out_dir: str | Path, cfg: ComputeConfig | None = None, log=None, device: str = "auto",
                precision: str = "32") -> dict:
    """Train and score ``cfg.models`` under the budget (:func:`train_and_score`; with ``cfg.workers
    > 1`` that many models at once, each in its own process, which leaves every model's CPU time
    its own); writes ``compute.json``, ``compute.png`` and ``samples_<model>.png`` (full budget)
    into ``out_dir``. Returns ``{"config", "device", "clock", "classifier", "models" (one row per
    model: params, steps, calibrated step time), "curve" (one row per model and snapshot: budget
    fraction, step, measured training minutes, METRICS)}``."""
    import multiprocessing as mp

    cfg = cfg or ComputeConfig()
    dev = resolve_device(device)
    log = log or _print
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clock_name = "process CPU time" if dev.type == "cpu" else "wall time"
    jobs = [(name, cfg, out, device, precision) for name in cfg.models]
    if cfg.workers > 1 and len(jobs) > 1:
        # a Pool, not a ProcessPoolExecutor: leaving the block terminates the workers (Ctrl-C, SIGTERM)
        with mp.get_context("spawn").Pool(min(cfg.workers, len(jobs))) as pool:
            results = pool.starmap(train_and_score, jobs)
    else:
        results = [train_and_score(*job, log=log) for job in jobs]
    models = [row for row, _ in results]
    curve = [c for _, rows in results for c in rows]
    plot_curves(curve, out / "compute.png", "train_min", f"training minutes ({clock_name})", PANELS,
                figsize=(18, 3.4), legend_size=7)
    params = {m["model"]: m["params"] for m in models}
    full = [dict(c, params=params[c["model"]]) for c in curve if c["budget_fraction"] == max(cfg.fractions)]
    log(markdown_table(full, ["model", "params", "step", "train_min", *METRICS]))
    result = {"config": cfg.__dict__, "device": str(dev), "clock": clock_name, "classifier": get_classifier()[1],
              "models": models, "curve": curve}
    write_json(out / "compute.json", result)
    return result
