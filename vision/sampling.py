"""Sampling: a diffusers ``DiffusionPipeline`` over any backbone here, with a per-step trace of
the router's choices, DDPM/DDIM scheduler construction, and the checkpoint layout.

A checkpoint directory holds the backbone (``config.json`` + ``model.safetensors``,
``common.pretrained``) and the noise schedule it was trained with (``scheduler_config.json``,
diffusers ``save_config``), so its prediction type (x0 / ε / v) travels with the weights:
``save_checkpoint`` writes both, ``load_sampler`` rebuilds the sampler from the saved schedule
and refuses a checkpoint without one instead of guessing. A training run keeps its checkpoint in
``RUN/checkpoint``, with ``train_state.json`` (step, loss, training config and the data spec that
``moh eval`` defaults to); ``checkpoint_dir`` accepts either the run or the checkpoint directory.

The pipeline runs where its backbone's parameters are (``model.to(device)`` first); the initial
noise is drawn on the CPU from the caller's generator, so a seed gives the same noise on any
device."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from diffusers import DDIMScheduler, DDPMScheduler, DiffusionPipeline, DPMSolverMultistepScheduler
from diffusers.utils import BaseOutput
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from common.errors import CheckpointError, InputError
from common.io import read_json
from vision import models as _registered  # noqa: F401  (registers the backbones: a shipped name loads in a fresh process)

NUM_TRAIN_TIMESTEPS = 1000
CHECKPOINT = "checkpoint"  # a training run's checkpoint subdirectory
STATE = "train_state.json"  # beside the weights: step, loss, training config, data spec
PREDICTION_TYPE = "sample"  # x0-prediction: measured best of epsilon / v / sample at a CPU budget (README)


def make_train_scheduler() -> DDPMScheduler:
    """DDPM noise schedule used for training and sampling (cosine betas, ``PREDICTION_TYPE``)."""
    return DDPMScheduler(num_train_timesteps=NUM_TRAIN_TIMESTEPS, beta_schedule="squaredcos_cap_v2",
                         prediction_type=PREDICTION_TYPE, clip_sample=True)


def training_target(sched: DDPMScheduler, x0: Tensor, noise: Tensor, t: Tensor) -> Tensor:
    """What the backbone regresses at ``x_t = √ᾱ_t x0 + √(1-ᾱ_t) ε``: ``ε`` (epsilon),
    ``v = √ᾱ_t ε - √(1-ᾱ_t) x0`` (v_prediction, Salimans & Ho 2022) or ``x0`` (sample);
    all ``(b, c, H, W)``."""
    kind = sched.config.prediction_type
    if kind == "epsilon":
        return noise
    if kind == "v_prediction":
        return sched.get_velocity(x0, noise, t)
    if kind == "sample":
        return x0
    raise ValueError(f"unsupported prediction_type {kind!r}")


def min_snr_weights(alphas_cumprod: Tensor, prediction_type: str, gamma: float) -> Tensor | None:
    """Per-timestep loss weights ``(T,)`` of min-SNR-γ for ``prediction_type`` ("sample", "epsilon"
    or "v_prediction"), mean 1 over the timesteps; None for ``gamma == 0`` (uniform)."""
    if gamma < 0:
        raise ValueError(f"min_snr_gamma must be >= 0, got {gamma}")
    if gamma == 0:
        return None
    a = alphas_cumprod.double()
    snr = (a / (1 - a)).clamp(min=torch.finfo(torch.float64).tiny)  # > 0: the ε weight min(snr, γ) / snr
    per_target = {"sample": 1.0, "epsilon": snr, "v_prediction": snr + 1}
    if prediction_type not in per_target:
        raise ValueError(f"unsupported prediction_type {prediction_type!r}")
    weight = snr.clamp(max=gamma) / per_target[prediction_type]
    return (weight / weight.mean()).float()


SUPPORTED_PREDICTIONS = ("epsilon", "v_prediction", "sample")
SCHEDULER_FILE = "scheduler_config.json"


SAMPLERS = ("ddim", "ddpm", "dpmsolver++")
Sampler = DDPMScheduler | DDIMScheduler | DPMSolverMultistepScheduler


def make_sampler(kind: str = "ddim", base: DDPMScheduler | None = None) -> Sampler:
    """``ddim`` (deterministic, few steps), ``ddpm`` (ancestral) or ``dpmsolver++`` (DPM-Solver++,
    Lu et al. 2022: deterministic, second order, multistep, so one model evaluation per step as
    DDIM; timesteps spaced evenly from T - 1, the spacing that scored best with it in
    ``experiments/vision/sampler_choice.py``) sampler over the training schedule ``base``
    (default: ``make_train_scheduler()``)."""
    base = base if base is not None else make_train_scheduler()
    if kind == "ddim":
        return DDIMScheduler.from_config(base.config)
    if kind == "ddpm":
        return base
    if kind == "dpmsolver++":
        return DPMSolverMultistepScheduler.from_config(base.config, algorithm_type="dpmsolver++", solver_order=2,
                                                       timestep_spacing="linspace")
    raise InputError(f"sampler must be one of {', '.join(SAMPLERS)}, got {kind!r}")


def checkpoint_dir(path: str | Path) -> Path:
    """The checkpoint directory of ``path``: ``path / CHECKPOINT`` for a training run's directory,
    the verified directory of a shipped model's name (``moh-fmnist``; ``common.shipped``), else
    ``path`` itself."""
    p = Path(path)
    if not p.exists():
        from common.shipped import resolve_checkpoint, shipped_models

        if str(path) in shipped_models():
            return resolve_checkpoint(path)
    return p / CHECKPOINT if (p / CHECKPOINT).is_dir() else p


DATA_SPEC_FIELDS = {"source": str, "size": int, "channels": int, "seed": int}


def read_train_state(path: str | Path) -> dict:
    """``train_state.json`` of the checkpoint directory ``path`` (CheckpointError when it is not a
    JSON object)."""
    from common.errors import DataError

    file = Path(path) / STATE
    try:
        state = read_json(file)
    except DataError as exc:
        raise CheckpointError(str(exc)) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{file} must hold a JSON object, got {type(state).__name__}")
    return state


def checkpoint_data(path: str | Path) -> dict | None:
    """The ``data`` spec (``vision.data.data_spec``) the checkpoint at ``path`` was trained on
    (None for checkpoints without one); CheckpointError naming the entry when it is malformed."""
    if not (Path(path) / STATE).is_file():
        return None
    data = read_train_state(path).get("data")
    if data is None:
        return None
    where = f"{Path(path) / STATE} entry 'data'"
    if not isinstance(data, dict):
        raise CheckpointError(f"{where} must be an object {{source, size, channels, seed}}, "
                              f"got {type(data).__name__}")
    for key, kind in DATA_SPEC_FIELDS.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise CheckpointError(f"{where}: {key!r} missing or not {'a string' if kind is str else 'an integer'}")
    return data


def save_checkpoint(model, path, scheduler: DDPMScheduler | None = None) -> Path:
    """Write ``model`` (``save_pretrained`` of ``common.pretrained``; a diffusers ``UNet2DModel``
    through its ``UNetBaseline`` adapter) and its training ``scheduler``'s config (default
    ``make_train_scheduler()``) into the directory ``path``; returns it."""
    from diffusers import UNet2DModel

    from vision.models import UNetBaseline

    path = Path(path)
    (UNetBaseline.wrap(model) if isinstance(model, UNet2DModel) else model).save_pretrained(path)
    (scheduler if scheduler is not None else make_train_scheduler()).save_config(str(path))
    return path


def load_sampler(path, kind: str = "ddim") -> Sampler:
    """The ``kind`` sampler over the noise schedule saved with the checkpoint at ``path``.

    CheckpointError when the schedule is missing (the prediction type the weights were trained
    for would be a guess), unreadable, or names an unsupported prediction type."""
    file = Path(path) / SCHEDULER_FILE
    if not file.is_file():
        raise CheckpointError(f"checkpoint {path} has no {SCHEDULER_FILE}: its prediction type (x0/epsilon/v) "
                              "is unknown; re-save it with vision.sampling.save_checkpoint or retrain")
    try:
        base = DDPMScheduler.from_config(DDPMScheduler.load_config(str(path)))
    except Exception as exc:  # diffusers raises several types for a damaged config
        raise CheckpointError(f"corrupt scheduler config {file}: {exc}") from exc
    kind_saved = base.config.prediction_type
    if kind_saved not in SUPPORTED_PREDICTIONS:
        raise CheckpointError(f"checkpoint {path} uses unsupported prediction_type {kind_saved!r}")
    return make_sampler(kind, base)


def backbone_call(model, x: Tensor, t: Tensor, route: dict | None = None):
    """Uniform call over our backbones and diffusers' ``UNet2DModel``:
    returns ``(eps (b, c, H, W), aux_loss scalar, route info dict)``. ``model`` may be wrapped
    in ``DistributedDataParallel``."""
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    if hasattr(inner, "t_embed"):  # our backbones
        out = model(x, t, route=route)
        return out.sample, out.aux_loss, out.route or {}
    out = model(x, t)
    n_blocks = len(inner.down_blocks) + len(inner.up_blocks) + 1
    return out.sample, x.new_zeros(()), {"sample_layers": n_blocks * x.shape[0]}


@dataclass
class SamplingOutput(BaseOutput):
    """``images (b, H, W, c)`` float in [0, 1]; ``trace`` one dict per denoising step
    (timestep, router choices, blocks run); ``intermediates`` ``(steps, b, c, H, W)`` predicted
    clean images per step (only with ``return_intermediates``); ``time_s`` wall time."""

    images: np.ndarray
    trace: list = field(default_factory=list)
    intermediates: np.ndarray | None = None
    time_s: float = 0.0


class MoHPipeline(DiffusionPipeline):
    """Unconditional sampling: ``pipe(batch_size, num_inference_steps, generator)`` on the
    device of ``unet``'s parameters (``generator``: a CPU generator)."""

    def __init__(self, unet, scheduler) -> None:
        super().__init__()
        self.register_modules(unet=unet, scheduler=scheduler)

    @torch.no_grad()
    def __call__(
        self,
        batch_size: int = 16,
        num_inference_steps: int = 25,
        generator: torch.Generator | None = None,
        route: dict | None = None,
        return_intermediates: bool = False,
    ) -> SamplingOutput:
        if batch_size < 1 or num_inference_steps < 1:
            raise InputError(f"batch_size and num_inference_steps must be >= 1, got {batch_size}, {num_inference_steps}")
        cfg = self.unet.config
        shape = (batch_size, cfg.in_channels, cfg.sample_size, cfg.sample_size)
        was_training = self.unet.training
        self.unet.eval()
        device = next(self.unet.parameters()).device
        start = time.perf_counter()
        x = torch.randn(shape, generator=generator).to(device)
        self.scheduler.set_timesteps(num_inference_steps)
        trace, inter = [], []
        for t in self.scheduler.timesteps:
            tt = torch.full((batch_size,), int(t), dtype=torch.long, device=device)
            eps, _, info = backbone_call(self.unet, x, tt, route)
            step = self.scheduler.step(eps, t, x, generator=generator) if isinstance(self.scheduler, DDPMScheduler) \
                else self.scheduler.step(eps, t, x)
            x = step.prev_sample
            trace.append(_summarise_route(int(t), info, batch_size))
            if return_intermediates:  # DPM-Solver++ keeps its x0 prediction instead of returning it
                x0 = getattr(step, "pred_original_sample", None)
                x0 = x0 if x0 is not None else self.scheduler.model_outputs[-1]
                inter.append(x0.clamp(-1, 1).detach().cpu().numpy())
        self.unet.train(was_training)
        images = ((x.clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).detach().cpu().numpy()
        return SamplingOutput(images=images, trace=trace,
                              intermediates=np.stack(inter) if inter else None,
                              time_s=time.perf_counter() - start)


def sample_ddim(model, n: int, steps: int, seed: int, route: dict | None = None) -> SamplingOutput:
    """``n`` DDIM-``steps`` samples of ``model`` (on the device of its parameters) from the
    training schedule, initial noise seeded with ``seed``; ``route`` forces MoH's choices."""
    pipe = MoHPipeline(model, make_sampler("ddim"))
    return pipe(batch_size=n, num_inference_steps=steps, generator=torch.Generator().manual_seed(seed), route=route)


def _summarise_route(t: int, info: dict, b: int) -> dict:
    row = {"timestep": t, "sample_layers": int(info.get("sample_layers", 0)) / b}
    if "depth" in info:
        depth = info["depth"]
        row["depth"] = float(depth.float().mean())
        row["levels"] = [int(i) for i in info["levels"].float().mean(0).round().nonzero().flatten()]
        row["level_use"] = [round(float(v), 3) for v in info["levels"].float().mean(0)]
        row["transform"] = int(torch.mode(info["transform"]).values)
    return row


def grid_image(images: np.ndarray, nrow: int | None = None) -> np.ndarray:
    """``(b, H, W, c)`` in [0, 1] -> one ``(rows*H, nrow*W, c)`` uint8 mosaic (1 px gaps)."""
    b, h, w, c = images.shape
    nrow = nrow or int(np.ceil(np.sqrt(b)))
    rows = int(np.ceil(b / nrow))
    out = np.ones(((h + 1) * rows + 1, (w + 1) * nrow + 1, c), dtype=np.float32)
    for i in range(b):
        r, q = divmod(i, nrow)
        out[1 + r * (h + 1): 1 + r * (h + 1) + h, 1 + q * (w + 1): 1 + q * (w + 1) + w] = images[i]
    return (out * 255).round().astype(np.uint8)


def save_grid(images: np.ndarray, path) -> None:
    """Write a sample mosaic as PNG (atomically)."""
    from PIL import Image

    from common.io import atomic_write

    g = grid_image(images)
    img = Image.fromarray(g[..., 0] if g.shape[-1] == 1 else g)
    with atomic_write(path, "wb") as f:
        img.save(f, format="PNG")


def smoke_sample(model) -> np.ndarray:
    """Two 2-step DDIM samples of a backbone, ``(2, H, W, c)`` in [0, 1] (the shipped-weights test)."""
    out = MoHPipeline(model.eval(), make_sampler("ddim"))(batch_size=2, num_inference_steps=2,
                                                          generator=torch.Generator().manual_seed(0))
    return out.images
