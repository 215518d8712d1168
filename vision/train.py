"""Training loop for the diffusion backbones (DDPM noise schedule, cosine betas).

Loss: ``E_{x0, t, ε} ||target - f_θ(√ᾱ_t x0 + √(1-ᾱ_t) ε, t)||² + aux`` where ``target`` is
``x0`` (the default ``vision.pipeline.PREDICTION_TYPE = "sample"``), ``ε`` (Ho et al. 2020, eq.
14) or ``v`` (see ``vision.pipeline.training_target``), and ``aux`` holds the MoH routers'
balance/z/compute losses. Learning rate: linear warmup, then cosine decay to
``lr * lr_final_frac``. Sampling uses an exponential moving average of the
weights (``ema_decay``; the effective decay ``min(ema_decay, (1 + s) / (10 + s))`` warms up so
that a short run is not dominated by the random initialisation); checkpoints hold the EMA
weights. A non-finite loss stops the run with an InputError naming the step; the last good
checkpoint (written atomically) is kept.

Under ``torchrun`` (``WORLD_SIZE > 1``, gloo on CPU) the backbone is wrapped in
``DistributedDataParallel``: every rank draws the same global batch (images, noise, timesteps)
from the seed and trains on its slice ``[rank::world]``, so gradients are averaged over the
global batch exactly as in one process; ``batch_size`` is the global batch and must divide by
the world size. A non-finite loss on any rank stops all ranks; only rank 0 writes checkpoints
and runs the callback.
"""

from __future__ import annotations

import copy
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from common.errors import InputError
from common.io import read_json, write_json
from common.seed import seed_everything
from common.trainer import setup_distributed
from vision.data import check_images
from vision.pipeline import (
    NUM_TRAIN_TIMESTEPS,
    backbone_call,
    make_train_scheduler,
    save_checkpoint,
    training_target,
)

CHECKPOINT = "checkpoint"
STATE = "train_state.json"


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup: int = 20
    lr_final_frac: float = 0.1  # cosine decay after warmup to lr * lr_final_frac (1.0: constant)
    ema_decay: float = 0.995  # 0: no EMA, sample with the raw weights
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100  # 0: only at the end
    log_every: int = 25


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    time_per_step_s: float
    history: list = field(default_factory=list)  # {"step", "loss"}
    route_log: list = field(default_factory=list)  # {"timestep", "depth", "transform", "levels"}
    checkpoint: str | None = None
    ema_model: object | None = None  # the EMA copy sampled from (None without EMA)


def save_atomic(model, out_dir: Path, state: dict) -> Path:
    """``save_pretrained`` into a temporary directory, then swap it in, so ``out_dir /
    checkpoint`` is always either the previous complete checkpoint or the new one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final, tmp, old = out_dir / CHECKPOINT, out_dir / f".{CHECKPOINT}.tmp", out_dir / f".{CHECKPOINT}.old"
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    save_checkpoint(model, tmp)
    write_json(tmp / STATE, state)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.lr_final_frac + (1 - cfg.lr_final_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def ema_update(ema, model, step: int, decay: float) -> None:
    """``θ_ema <- β θ_ema + (1 - β) θ`` with ``β = min(decay, (1 + step) / (10 + step))``;
    buffers are copied."""
    beta = min(decay, (1 + step) / (10 + step))
    for pe, p in zip(ema.parameters(), model.parameters(), strict=True):
        pe.lerp_(p, 1 - beta)
    for be, b in zip(ema.buffers(), model.buffers(), strict=True):
        be.copy_(b)


def train(model, images: Tensor, cfg: TrainConfig, out_dir: str | Path | None = None,
          callback=None) -> TrainResult:
    """Train ``model`` on ``images (N, c, H, W)`` in [-1, 1] for ``cfg.steps`` steps.

    ``callback(step, model, sampling_model)`` runs after every step (evaluation curves;
    ``sampling_model`` is the EMA copy, or ``model`` without EMA). With ``out_dir`` a checkpoint
    of the sampling weights is saved every ``checkpoint_every`` steps and at the end. On return
    ``model`` holds the sampling (EMA) weights.
    """
    mc = model.config
    check_images(images, mc.in_channels, mc.sample_size)
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {cfg.steps}, {cfg.batch_size}")
    if not 0 <= cfg.ema_decay < 1:
        raise InputError(f"ema_decay must be in [0, 1), got {cfg.ema_decay}")
    rank, world = setup_distributed()
    if cfg.batch_size % world:
        raise InputError(f"batch_size {cfg.batch_size} must be divisible by the number of processes ({world})")
    gen = seed_everything(cfg.seed)
    sched = make_train_scheduler()
    alphas = sched.alphas_cumprod
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    ema = copy.deepcopy(model).eval().requires_grad_(False) if cfg.ema_decay > 0 else None
    sampling_model = ema if ema is not None else model
    # MoH routes skip experts per sample, so some parameters get no gradient on a rank.
    net = DistributedDataParallel(model, find_unused_parameters=True) if world > 1 else model
    save_dir = Path(out_dir) if out_dir is not None and rank == 0 else None
    result = TrainResult(steps=0, final_loss=float("nan"), time_per_step_s=0.0)
    last_good = None
    compute_s = 0.0
    for step in range(cfg.steps):
        idx = torch.randint(0, images.shape[0], (cfg.batch_size,), generator=gen)
        x0 = images[idx]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, NUM_TRAIN_TIMESTEPS, (cfg.batch_size,), generator=gen)
        if world > 1:  # this rank's slice of the global batch
            x0, noise, t = x0[rank::world], noise[rank::world], t[rank::world]
        a = alphas[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg)
        t0 = time.perf_counter()
        pred, aux, info = backbone_call(net, xt, t)
        loss = torch.nn.functional.mse_loss(pred, training_target(sched, x0, noise, t)) + aux
        if not _finite_everywhere(loss, world):
            where = f"; last good checkpoint kept at {last_good}" if last_good else "; no checkpoint was written"
            raise InputError(
                f"loss became {float(loss.detach())} at step {step + 1} (learning rate too high or bad data); "
                f"training stopped{where}"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        if ema is not None:
            ema_update(ema, model, step, cfg.ema_decay)
        compute_s += time.perf_counter() - t0
        result.steps, result.final_loss = step + 1, float(loss.detach())
        if "depth" in info:
            for i in range(0, t.shape[0], max(1, t.shape[0] // 8)):
                result.route_log.append({"step": step + 1, "timestep": int(t[i]), "depth": int(info["depth"][i]),
                                         "transform": int(info["transform"][i]),
                                         "levels": [int(v) for v in info["levels"][i].nonzero().flatten()]})
        if (step + 1) % cfg.log_every == 0 or step == 0:
            result.history.append({"step": step + 1, "loss": float(loss.detach())})
        if save_dir is not None and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            last_good = save_atomic(sampling_model, save_dir,
                                    {"step": step + 1, "loss": float(loss.detach()), "config": asdict(cfg), "world_size": world})
        if callback is not None and rank == 0:
            callback(step + 1, model, sampling_model)
    result.time_per_step_s = compute_s / max(1, result.steps)
    if ema is not None:
        model.load_state_dict(ema.state_dict())
        result.ema_model = ema
    if save_dir is not None:
        last_good = save_atomic(model, save_dir, {"step": result.steps, "loss": result.final_loss, "config": asdict(cfg),
                                                  "world_size": world})
        result.checkpoint = str(last_good)
    if world > 1:
        dist.barrier()  # the final checkpoint exists before any rank returns
    model.eval()
    return result


def _finite_everywhere(loss: Tensor, world: int) -> bool:
    """Whether the loss is finite on every rank (one all-reduce under DDP)."""
    bad = torch.tensor(0.0 if torch.isfinite(loss.detach()) else 1.0)
    if world > 1:
        dist.all_reduce(bad)
    return bool(bad.item() == 0)


def read_train_state(checkpoint_dir: str | Path) -> dict:
    return read_json(Path(checkpoint_dir) / STATE)
