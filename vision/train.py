"""Training loop for the diffusion backbones (epsilon prediction, DDPM noise schedule).

Loss: ``E_{x0, t, ε} ||ε - ε_θ(√ᾱ_t x0 + √(1-ᾱ_t) ε, t)||² + aux`` (Ho et al. 2020, eq. 14),
where ``aux`` holds the MoH routers' balance/z/compute losses. A non-finite loss stops the run
with an InputError naming the step; the last good checkpoint (written atomically) is kept.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from common.errors import InputError
from common.io import read_json, write_json
from common.seed import seed_everything
from vision.data import check_images
from vision.pipeline import NUM_TRAIN_TIMESTEPS, backbone_call, make_train_scheduler

CHECKPOINT = "checkpoint"
STATE = "train_state.json"


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup: int = 20
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


def save_atomic(model, out_dir: Path, state: dict) -> Path:
    """``save_pretrained`` into a temporary directory, then swap it in, so ``out_dir /
    checkpoint`` is always either the previous complete checkpoint or the new one."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final, tmp, old = out_dir / CHECKPOINT, out_dir / f".{CHECKPOINT}.tmp", out_dir / f".{CHECKPOINT}.old"
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    write_json(tmp / STATE, state)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def _lr_at(step: int, cfg: TrainConfig) -> float:
    warm = min(1.0, (step + 1) / max(1, cfg.warmup))
    return cfg.lr * warm


def train(model, images: Tensor, cfg: TrainConfig, out_dir: str | Path | None = None,
          callback=None) -> TrainResult:
    """Train ``model`` on ``images (N, c, H, W)`` in [-1, 1] for ``cfg.steps`` steps.

    ``callback(step, model)`` runs after every step (evaluation curves). With ``out_dir`` a
    checkpoint is saved every ``checkpoint_every`` steps and at the end.
    """
    mc = model.config
    check_images(images, mc.in_channels, mc.sample_size)
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {cfg.steps}, {cfg.batch_size}")
    gen = seed_everything(cfg.seed)
    sched = make_train_scheduler()
    alphas = sched.alphas_cumprod
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    result = TrainResult(steps=0, final_loss=float("nan"), time_per_step_s=0.0)
    last_good = None
    compute_s = 0.0
    for step in range(cfg.steps):
        idx = torch.randint(0, images.shape[0], (cfg.batch_size,), generator=gen)
        x0 = images[idx]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, NUM_TRAIN_TIMESTEPS, (cfg.batch_size,), generator=gen)
        a = alphas[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg)
        t0 = time.perf_counter()
        eps, aux, info = backbone_call(model, xt, t)
        loss = torch.nn.functional.mse_loss(eps, noise) + aux
        if not torch.isfinite(loss):
            where = f"; last good checkpoint kept at {last_good}" if last_good else "; no checkpoint was written"
            raise InputError(
                f"loss became {float(loss.detach())} at step {step + 1} (learning rate too high or bad data); "
                f"training stopped{where}"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        compute_s += time.perf_counter() - t0
        result.steps, result.final_loss = step + 1, float(loss.detach())
        if "depth" in info:
            for i in range(0, cfg.batch_size, max(1, cfg.batch_size // 8)):
                result.route_log.append({"step": step + 1, "timestep": int(t[i]), "depth": int(info["depth"][i]),
                                         "transform": int(info["transform"][i]),
                                         "levels": [int(v) for v in info["levels"][i].nonzero().flatten()]})
        if (step + 1) % cfg.log_every == 0 or step == 0:
            result.history.append({"step": step + 1, "loss": float(loss.detach())})
        if out_dir is not None and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            last_good = save_atomic(model, Path(out_dir), {"step": step + 1, "loss": float(loss.detach()), "config": asdict(cfg)})
        if callback is not None:
            callback(step + 1, model)
    result.time_per_step_s = compute_s / max(1, result.steps)
    if out_dir is not None:
        last_good = save_atomic(model, Path(out_dir), {"step": result.steps, "loss": result.final_loss, "config": asdict(cfg)})
        result.checkpoint = str(last_good)
    model.eval()
    return result


def read_train_state(checkpoint_dir: str | Path) -> dict:
    return read_json(Path(checkpoint_dir) / STATE)
