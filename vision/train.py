"""Training of the diffusion backbones (DDPM noise schedule, cosine betas) on the suite's
Lightning engine (``common.engine``): ``fit(model, images, TrainConfig(...), out_dir=...,
device="auto", precision="32")``.

Loss: ``E_{x0, t, ε} w_t ||target - f_θ(√ᾱ_t x0 + √(1-ᾱ_t) ε, t)||² + aux`` where ``target`` is
``x0`` (the default ``vision.sampling.PREDICTION_TYPE = "sample"``), ``ε`` (Ho et al. 2020, eq.
14) or ``v`` (see ``vision.sampling.training_target``), and ``aux`` holds the MoH routers'
balance/z/compute losses. ``w_t`` is the min-SNR-γ weighting (Hang et al. 2023, ``min_snr_weights``):
``min(SNR_t, γ)`` in x0 terms (``SNR_t = ᾱ_t / (1 - ᾱ_t)``; divided by ``SNR_t`` for ε and by
``SNR_t + 1`` for v, the same weighting of the x0 error), normalised to mean 1 over the timesteps
so the learning rate keeps its meaning; ``min_snr_gamma = 0`` weights every timestep alike.
Learning rate: linear warmup, then cosine decay to ``lr * lr_final_frac``, stepped per optimizer
step. Gradients are clipped to norm 1. Sampling uses an exponential moving average of the weights
(``ema_decay``; the effective decay ``min(ema_decay, (1 + s) / (10 + s))`` warms up so that a
short run is not dominated by the random initialisation); checkpoints hold the EMA weights. A
non-finite loss stops the run with ``common.engine.TrainingDiverged`` naming the step; the last
good checkpoint (written atomically) is kept. ``device`` and ``precision`` are the engine's
(``bf16-mixed``: bfloat16 autocast around the forward pass, fp32 weights, so checkpoints are fp32
either way); the batches are drawn on the CPU from the seed and moved to the device, so a seed
gives the same batches everywhere.

Under ``torchrun`` (``WORLD_SIZE > 1``, gloo on CPU) Lightning wraps the module in
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
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, Checkpoint
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from common.engine import (
    RUN_STATE,
    check_resumable,
    ctrl_c_interrupts,
    make_trainer,
    resume_checkpoint,
    snapshot_dir,
)
from common.engine import fit as engine_fit
from common.errors import InputError
from common.io import signals_deferred, write_json
from vision.data import check_images
from vision.sampling import (
    CHECKPOINT,
    NUM_TRAIN_TIMESTEPS,
    STATE,
    backbone_call,
    make_train_scheduler,
    min_snr_weights,
    save_checkpoint,
    training_target,
)

GRAD_CLIP = 1.0  # max global gradient norm
# min-SNR-γ: better FID at equal CPU time than uniform weighting at every seed tried
# (experiments/vision/recipe.py, docs/experiments.md, section vision)
MIN_SNR_GAMMA = 5.0


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 32  # the global batch (all ranks together)
    lr: float = 2e-3
    warmup: int = 20
    lr_final_frac: float = 0.1  # cosine decay after warmup to lr * lr_final_frac (1.0: constant)
    ema_decay: float = 0.995  # 0: no EMA, sample with the raw weights
    seed: int = 0
    checkpoint_every: int = 100  # 0: only at the end
    log_every: int = 25
    snapshot_every: int = 0  # > 0: also keep the sampling weights of every such step (learning curves)
    min_snr_gamma: float = MIN_SNR_GAMMA  # loss weight min(SNR_t, γ) (see the module docstring); 0: uniform


# Named training recipes (``moh train --preset NAME``): the exact settings behind a shipped model;
# the backbone (``--model``) is the caller's, so a baseline is trained with the same recipe.
PRESETS: dict[str, dict] = {
    "fmnist": {"data": "fashion-mnist", "size": 32, "model_size": "Ti", "limit": 60000,
               "steps": 8000, "batch_size": 32, "lr": 2e-3, "warmup": 200, "ema_decay": 0.999,
               "checkpoint_every": 500, "snapshot_every": 1000, "min_snr_gamma": MIN_SNR_GAMMA},
}


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    time_per_step_s: float
    history: list = field(default_factory=list)  # {"step", "loss"}
    route_log: list = field(default_factory=list)  # {"step", "timestep", "depth", "transform", "levels"}
    checkpoint: str | None = None
    ema_model: object | None = None  # the EMA copy sampled from (None without EMA)


def _save_atomic(model, out_dir: Path, state: dict) -> Path:
    """``save_pretrained`` into a temporary directory, then swap it in, so ``out_dir /
    checkpoint`` is always either the previous complete checkpoint or the new one. SIGINT / SIGTERM
    during the write are delivered once it is complete; on any error the temporary directory is
    removed and the previous checkpoint kept."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final, tmp, old = out_dir / CHECKPOINT, out_dir / f".{CHECKPOINT}.tmp", out_dir / f".{CHECKPOINT}.old"
    with signals_deferred():
        if old.exists() and not final.exists():  # a killed earlier swap: the old one is the last complete
            os.replace(old, final)
        for p in (tmp, old):
            shutil.rmtree(p, ignore_errors=True)
        try:
            save_checkpoint(model, tmp)
            write_json(tmp / STATE, state)
            if final.exists():
                os.replace(final, old)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if old.exists() and not final.exists():
                os.replace(old, final)
            raise
        shutil.rmtree(old, ignore_errors=True)
    return final


def _lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, then cosine decay."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.lr_final_frac + (1 - cfg.lr_final_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


class _WarmupCosineLR(torch.optim.lr_scheduler.LRScheduler):
    """``_lr_at(step, cfg)`` for every parameter group; stepped once per optimizer step."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> None:
        self.cfg = cfg
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        return [_lr_at(self.last_epoch, self.cfg) for _ in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """The schedule's position without the config object (checkpoints load with ``weights_only``)."""
        return {k: v for k, v in super().state_dict().items() if k != "cfg"}


@torch.no_grad()
def _ema_update(ema, model, step: int, decay: float) -> None:
    """``θ_ema <- β θ_ema + (1 - β) θ`` with ``β = min(decay, (1 + step) / (10 + step))``;
    buffers are copied."""
    beta = min(decay, (1 + step) / (10 + step))
    for pe, p in zip(ema.parameters(), model.parameters(), strict=True):
        pe.lerp_(p, 1 - beta)
    for be, b in zip(ema.buffers(), model.buffers(), strict=True):
        be.copy_(b)


class _GlobalBatches(IterableDataset):
    """``steps`` training batches ``(x0 (b, c, H, W), noise (b, c, H, W), t (b,))``: each global
    batch of ``batch_size`` (image indices with replacement, Gaussian noise, timesteps) is drawn
    from one ``torch.Generator`` seeded with ``seed``, and this rank keeps its slice
    ``[rank::world]`` (``b = batch_size / world``), so the ranks together see the one-process batch."""

    def __init__(self, images: Tensor, batch_size: int, steps: int, seed: int, rank: int = 0, world: int = 1,
                 start: int = 0):
        self.images, self.batch_size, self.steps, self.seed = images, batch_size, steps, seed
        self.rank, self.world, self.start = rank, world, start

    def __len__(self) -> int:
        return self.steps - self.start

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed)
        shape = (self.batch_size, *self.images.shape[1:])
        for step in range(self.steps):
            idx = torch.randint(0, self.images.shape[0], (self.batch_size,), generator=gen)
            if step < self.start:  # a resumed run: draw (and drop) the batches already trained on
                torch.randn(shape, generator=gen)
                torch.randint(0, NUM_TRAIN_TIMESTEPS, (self.batch_size,), generator=gen)
                continue
            x0 = self.images[idx]
            noise = torch.randn(x0.shape, generator=gen)
            t = torch.randint(0, NUM_TRAIN_TIMESTEPS, (self.batch_size,), generator=gen)
            yield x0[self.rank::self.world], noise[self.rank::self.world], t[self.rank::self.world]


class DiffusionModule(L.LightningModule):
    """The denoising objective of ``backbone`` on ``images (N, c, H, W)`` in [-1, 1] (see the
    module docstring), AdamW with the warmup-cosine schedule, and the EMA copy ``ema`` updated
    after every optimizer step. Records ``history`` ({"step", "loss"} every ``log_every``
    steps), ``route_log`` (MoH routes of up to 8 samples per step), ``final_loss`` and the
    compute time of the steps ``compute_s``."""

    def __init__(self, backbone, images: Tensor, cfg: TrainConfig, start_step: int = 0) -> None:
        super().__init__()
        self.backbone, self.images, self.cfg, self.start_step = backbone, images, cfg, start_step
        self.ema = copy.deepcopy(backbone).requires_grad_(False).eval() if cfg.ema_decay > 0 else None
        self.sched = make_train_scheduler()
        # ᾱ_t (T,) as a buffer, so that it follows the module to its device
        self.register_buffer("alphas_cumprod", self.sched.alphas_cumprod.clone(), persistent=False)
        weights = min_snr_weights(self.alphas_cumprod, self.sched.config.prediction_type, cfg.min_snr_gamma)
        self.register_buffer("loss_weight", weights, persistent=False)  # (T,) or None
        self.history: list[dict] = []
        self.route_log: list[dict] = []
        self.final_loss, self.compute_s = float("nan"), 0.0

    @property
    def sampling_model(self):
        """The weights to sample from: the EMA copy, or the backbone without EMA."""
        return self.ema if self.ema is not None else self.backbone

    def train(self, mode: bool = True):
        """Lightning switches modes on the whole module; the EMA copy always stays in eval mode."""
        super().train(mode)
        if self.ema is not None:
            self.ema.eval()
        return self

    def train_dataloader(self) -> DataLoader:
        batches = _GlobalBatches(self.images, self.cfg.batch_size, self.cfg.steps, self.cfg.seed,
                                self.global_rank, self.trainer.world_size, start=self.start_step)
        # a private generator: the loader's base seed must not consume the global RNG
        return DataLoader(batches, batch_size=None, generator=torch.Generator().manual_seed(self.cfg.seed))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # the settings a resumed run must repeat, and the training time summed over the sittings
        checkpoint[RUN_STATE] = {"settings": asdict(self.cfg), "train_s": self.compute_s}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.compute_s = float(checkpoint.get(RUN_STATE, {}).get("train_s", 0.0))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.backbone.parameters(), lr=self.cfg.lr, weight_decay=0.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _WarmupCosineLR(opt, self.cfg), "interval": "step"}}

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        x0, noise, t = batch
        step = self.global_step + 1  # 1-based number of this optimizer step
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        pred, aux, info = backbone_call(self.backbone, xt, t)
        target = training_target(self.sched, x0, noise, t)
        if self.loss_weight is None:
            loss = F.mse_loss(pred, target) + aux
        else:
            per_sample = (pred.float() - target).pow(2).flatten(1).mean(1)
            loss = (self.loss_weight[t] * per_sample).mean() + aux
        self.final_loss = float(loss.detach())
        self.log("train_loss", self.final_loss)
        if "depth" in info:
            for i in range(0, t.shape[0], max(1, t.shape[0] // 8)):
                self.route_log.append({"step": step, "timestep": int(t[i]), "depth": int(info["depth"][i]),
                                       "transform": int(info["transform"][i]),
                                       "levels": [int(v) for v in info["levels"][i].nonzero().flatten()]})
        if step % self.cfg.log_every == 0 or step == 1:
            self.history.append({"step": step, "loss": self.final_loss})
        return loss

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        step = self.global_step  # 0-based, before the step
        t0 = time.perf_counter()
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)  # forward, backward, clip, step
        if self.ema is not None:
            _ema_update(self.ema, self.backbone, step, self.cfg.ema_decay)
        if self.device.type == "cuda":  # kernels run asynchronously: wait for them before reading the clock
            torch.cuda.synchronize(self.device)
        self.compute_s += time.perf_counter() - t0


class _SamplingCheckpoint(Checkpoint):
    """Rank 0 writes the sampling (EMA) weights with ``vision.sampling.save_checkpoint`` plus
    ``train_state.json`` into ``out_dir/checkpoint`` every ``every`` steps (0: never during
    training) and when training ends, atomically (``_save_atomic``). ``last_model_path`` is the
    last complete one, which ``common.engine.DivergenceGuard`` names when the loss diverges."""

    def __init__(self, out_dir: str | Path, every: int, cfg: TrainConfig, data: dict | None = None) -> None:
        self.out_dir, self.every, self.cfg, self.data = Path(out_dir), every, cfg, data
        self.last_model_path, self._saved_step = "", 0

    def _save(self, trainer: L.Trainer, module: DiffusionModule) -> None:
        self._saved_step = trainer.global_step
        if trainer.is_global_zero:
            state = {"step": trainer.global_step, "loss": module.final_loss, "config": asdict(self.cfg),
                     "world_size": trainer.world_size, "train_s": module.compute_s}
            if self.data is not None:
                state["data"] = self.data
            self.last_model_path = str(_save_atomic(module.sampling_model, self.out_dir, state))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every and trainer.global_step % self.every == 0:
            self._save(trainer, pl_module)
        snap = self.cfg.snapshot_every
        if snap and trainer.global_step % snap == 0 and trainer.is_global_zero:
            dest = snapshot_dir(self.out_dir, trainer.global_step)
            with signals_deferred():
                shutil.rmtree(dest, ignore_errors=True)
                save_checkpoint(pl_module.sampling_model, dest)
                write_json(dest / STATE, {"step": trainer.global_step, "config": asdict(self.cfg),
                                          **({"data": self.data} if self.data is not None else {})})

    def on_train_end(self, trainer, pl_module) -> None:
        if self._saved_step != trainer.global_step:
            self._save(trainer, pl_module)


class _StepCallback(Callback):
    """Calls ``fn(step, model, sampling_model)`` on rank 0 after every optimizer step."""

    def __init__(self, fn) -> None:
        self.fn = fn

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero:
            self.fn(trainer.global_step, pl_module.backbone, pl_module.sampling_model)


def fit(model, images: Tensor, cfg: TrainConfig, out_dir: str | Path | None = None,
        callback=None, progress: bool = False, data: dict | None = None, device: str = "auto",
        precision: str = "32", resume: bool = False) -> TrainResult:
    """Train ``model`` on ``images (N, c, H, W)`` in [-1, 1] for ``cfg.steps`` steps.

    ``callback(step, model, sampling_model)`` runs after every step (evaluation curves;
    ``sampling_model`` is the EMA copy, or ``model`` without EMA). With ``out_dir`` a checkpoint
    of the sampling weights is saved every ``checkpoint_every`` steps and at the end, and
    Lightning's CSV log goes to ``out_dir/logs``. On return ``model`` holds the sampling (EMA)
    weights. ``progress``: a tqdm bar. ``data``: the data source and preprocessing
    (``vision.data.data_spec``) recorded in the checkpoint's ``train_state.json`` so that
    evaluation defaults to it (``vision.sampling.checkpoint_data``). ``device``: ``auto`` (a CUDA GPU when
    present, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; ``precision``: ``32``,
    ``bf16-mixed`` or ``16-mixed`` (CUDA only). ``model`` is back on the CPU on return.

    ``resume`` (needs ``out_dir`` and ``checkpoint_every``): Lightning's full training state
    (weights, EMA copy, optimizer, schedule, step) is also written to
    ``out_dir/checkpoints/last.ckpt`` every ``checkpoint_every`` steps, and a run that finds one
    continues from it, drawing the same remaining batches as an uninterrupted run (so the weights
    match it); ``cfg`` must equal the interrupted run's. ``snapshot_every`` keeps the sampling
    weights of every such step in ``out_dir/snapshots/step_<n>`` (learning curves).
    """
    mc = model.config
    check_images(images, mc.in_channels, mc.sample_size)
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {cfg.steps}, {cfg.batch_size}")
    if not 0 <= cfg.ema_decay < 1:
        raise InputError(f"ema_decay must be in [0, 1), got {cfg.ema_decay}")
    ckpt = _SamplingCheckpoint(out_dir, cfg.checkpoint_every, cfg, data) if out_dir is not None else None
    callbacks = [c for c in (_StepCallback(callback) if callback is not None else None, ckpt) if c is not None]
    start_step = 0
    if resume:
        if out_dir is None or not cfg.checkpoint_every:
            raise InputError("resuming needs an output directory and checkpoint_every > 0")
        callbacks.append(resume_checkpoint(out_dir, cfg.checkpoint_every))
        start_step = check_resumable(out_dir, asdict(cfg))
    # MoH routes skip experts per sample, so some parameters get no gradient on a rank.
    trainer = make_trainer(out_dir, max_steps=cfg.steps, grad_clip=GRAD_CLIP, seed=cfg.seed, progress=progress,
                           checkpoint=False, callbacks=callbacks, find_unused_parameters=True,
                           use_distributed_sampler=False, log_every_n_steps=cfg.log_every, device=device,
                           precision=precision)
    if cfg.batch_size % trainer.world_size:
        raise InputError(f"batch_size {cfg.batch_size} must be divisible by the number of processes "
                         f"({trainer.world_size})")
    module = DiffusionModule(model, images, cfg, start_step=start_step)
    with warnings.catch_warnings():  # the EMA copy is in eval mode on purpose; the batch stream is sized
        warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode.*")
        warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
        with ctrl_c_interrupts():
            engine_fit(trainer, module, resume=resume)
    trainer.strategy.barrier()  # the final checkpoint exists before any rank returns
    model.cpu()
    if module.ema is not None:
        module.ema.cpu()
        model.load_state_dict(module.ema.state_dict())
    model.eval()
    steps = trainer.global_step
    return TrainResult(steps=steps, final_loss=module.final_loss, time_per_step_s=module.compute_s / max(1, steps),
                       history=module.history, route_log=module.route_log,
                       checkpoint=(ckpt.last_model_path or None) if ckpt is not None else None, ema_model=module.ema)
