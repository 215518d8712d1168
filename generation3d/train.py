"""Training of the part autoencoder (``pretrain``) and the flow-matching generator (``fit``) on the
suite's Lightning engine (``common.engine``), on any device and precision of ``common.device``.

Both are ``LightningModule`` s fitted by ``make_trainer`` for a fixed number of optimizer steps:
AdamW, linear warm-up (5 % of the steps) then cosine decay to 0 (``_warmup_cosine``, stepped per
optimizer step), gradients clipped to norm 1, a NaN/Inf loss stops the run
(``common.engine.TrainingDiverged``). Every random draw of the batches comes from a private
``torch.Generator`` / ``numpy`` generator seeded with ``seed`` inside the batch stream, and the
models are initialised right after ``make_trainer`` seeds the global RNGs, so a run repeats bit
for bit. Checkpoints are written by the callers with the pipeline's save functions
(``sampling.save_autoencoder``, ``MoCAPipeline.save``); with ``run_dir`` Lightning's CSV log of
the training loss goes to ``run_dir/logs``.

A generator run can be interrupted and continued (``fit(..., resume=True)``): Lightning's full
state (weights, optimizer, schedule, step; the dense warm-up phase follows from the step) goes to
``run_dir/checkpoints/last.ckpt`` every ``checkpoint_every`` steps with the run's settings, its
history, its training time summed over sittings and the global RNG states (the distillation
target's query subsample draws from them); a resumed run draws (and drops) the batches
already trained on, so its weights equal an uninterrupted run's bit for bit, and a state written
with other settings is refused. ``snapshot_every`` keeps the pipeline of every such step in
``run_dir/snapshots/step_<n>`` (learning curves; each loads with ``MoCAPipeline.load``).

* Autoencoder: batches of ``batch_size`` training parts drawn with replacement; loss = squared
  Chamfer distance between the reconstruction and the part's points in its box frame.
* Generator: batches of training shapes with similar part counts (``_shape_batches``: sorted
  buckets, shuffled order, reshuffled every pass), rectified-flow loss
  (``losses.flow_matching_loss``); for MoCA the DeepSeek-V3.2 recipe: dense (k = P) for the first
  ``config.dense_warmup`` of the steps and the router distillation loss with weight
  ``config.router_distill`` throughout (README "Router distillation + dense warm-up").
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
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
from generation3d.augment import AUGMENT_PROB, ShapeAugmenter
from generation3d.data import PartDataset
from generation3d.geometry import to_canonical
from generation3d.losses import (
    chamfer_batch,
    collate,
    draw_flow_noise,
    encode_parts,
    flow_matching_loss,
    latent_stats,
)
from generation3d.model import AEConfig, GenConfig, PartAutoencoder, PartFlowTransformer
from generation3d.text import default_encoder, shape_descriptions

GRAD_CLIP = 1.0  # max global gradient norm
LOG_EVERY = 50  # history entries every this many steps (and the last)


def _warmup_cosine(opt: torch.optim.Optimizer, steps: int, warmup_frac: float = 0.05):
    """Linear warm-up then cosine decay to 0 over ``steps`` (any ``steps >= 1``)."""
    warm = max(1, int(warmup_frac * steps))
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))


def _loader(batches: IterableDataset, seed: int, device: torch.device) -> DataLoader:
    # a private generator: the loader's base seed must not consume the global RNG. Pinned memory on
    # a GPU, but no worker processes: each would replay the whole seeded batch stream
    return DataLoader(batches, batch_size=None, generator=torch.Generator().manual_seed(seed),
                      pin_memory=device.type == "cuda")


def _fit(trainer: L.Trainer, module: L.LightningModule, resume: bool = False) -> None:
    with ctrl_c_interrupts(), warnings.catch_warnings():  # the batch stream is sized on purpose
        warnings.filterwarnings("ignore", message=r".*`IterableDataset` has `__len__` defined.*")
        warnings.filterwarnings("ignore", message=r".*Total length of `\w+` across ranks is zero.*")  # a finished run
        engine_fit(trainer, module, resume=resume)


def _trainer(run_dir, steps: int, seed: int, progress: bool, device: str = "auto", precision: str = "32",
             callbacks: list[Callback] | None = None) -> L.Trainer:
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    return make_trainer(run_dir, max_steps=steps, grad_clip=GRAD_CLIP, seed=seed, progress=progress,
                        checkpoint=False, use_distributed_sampler=False, log_every_n_steps=LOG_EVERY,
                        device=device, precision=precision, callbacks=callbacks or [])


def _announce(trainer: L.Trainer, message: str) -> None:
    """One line on stderr as the first step starts, when the run shows progress (the CLI's runs)."""
    if trainer.progress_bar_callback is not None and trainer.is_global_zero:
        print(message, file=sys.stderr, flush=True)


class PartBatches(IterableDataset):
    """``steps`` batches ``(batch_size, M, 3)`` of rows of ``points (N, M, 3)`` drawn with
    replacement by one ``torch.Generator`` seeded with ``seed``."""

    def __init__(self, points: Tensor, batch_size: int, steps: int, seed: int) -> None:
        self.points, self.batch_size, self.steps, self.seed = points, batch_size, steps, seed

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            yield self.points[torch.randint(len(self.points), (self.batch_size,), generator=gen)]


class AutoencoderModule(L.LightningModule):
    """Squared-Chamfer reconstruction of part clouds ``(b, M, 3)`` (box frame) by ``model``;
    AdamW (weight decay 1e-4) with ``_warmup_cosine``. ``history``: ``{"step", "loss"}`` every
    ``LOG_EVERY`` steps and at the last."""

    def __init__(self, model: PartAutoencoder, points: Tensor, steps: int, batch_size: int, lr: float, seed: int):
        super().__init__()
        self.model, self.points = model, points
        self.steps, self.batch_size, self.lr, self.seed = steps, batch_size, lr, seed
        self.history: list[dict] = []

    def train_dataloader(self) -> DataLoader:
        return _loader(PartBatches(self.points, self.batch_size, self.steps, self.seed), self.seed, self.device)

    def on_train_start(self) -> None:
        _announce(self.trainer, f"training the autoencoder for {self.steps} steps")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=1e-4)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _warmup_cosine(opt, self.steps), "interval": "step"}}

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        loss = chamfer_batch(self.model(batch), batch).mean()
        self.log("train_loss", loss.detach())
        step = self.global_step
        if step % LOG_EVERY == 0 or step == self.steps - 1:
            self.history.append({"step": step, "loss": float(loss.detach())})
        return loss


def pretrain(
    ds: PartDataset, config: AEConfig | None = None, steps: int = 300, batch_size: int = 64, lr: float = 2e-3,
    seed: int = 0, progress: bool = False, run_dir: str | Path | None = None, device: str = "auto",
    precision: str = "32",
) -> tuple[PartAutoencoder, list[dict]]:
    """Fit the part autoencoder (the generator's pretraining stage) on the training parts with the
    squared Chamfer loss for ``steps`` steps on ``device`` in ``precision`` (``common.device``).
    ``run_dir``: where Lightning's CSV log goes (None: no files). Returns (model on the CPU in
    eval mode, history)."""
    idx = ds.part_indices("train")
    if len(idx) == 0:
        raise InputError("the dataset has no training parts")
    trainer = _trainer(run_dir, steps, seed, progress, device, precision)
    model = PartAutoencoder(config)  # initialised after make_trainer seeded the RNGs
    pts = torch.from_numpy(to_canonical(ds.points[idx], ds.boxes[idx])).float()
    module = AutoencoderModule(model, pts, steps, batch_size, lr, seed)
    _fit(trainer, module)
    return model.cpu().eval(), module.history


def _shape_batches(ds: PartDataset, ids: np.ndarray, batch_size: int, rng: np.random.Generator, max_tokens: int | None = None):
    """Batches of shape ids with similar part counts (sorted buckets, shuffled order); a batch
    holds at most ``max_tokens`` parts in total when given."""
    ids = ids[np.argsort([ds.n_parts(i) for i in ids], kind="stable")]
    batches, cur = [], []
    for i in ids:
        cur.append(i)
        if len(cur) >= batch_size or (max_tokens and len(cur) * ds.n_parts(i) >= max_tokens):
            batches.append(cur)
            cur = []
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


class ShapeBatches(IterableDataset):
    """``steps`` flow-matching batches: ``collate`` of the ``_shape_batches`` of ``ids`` (order
    from ``np.random.default_rng(seed)``, reshuffled every pass over the shapes) plus
    ``"noise"``, the step's ``draw_flow_noise`` from one ``torch.Generator`` seeded with ``seed``.
    ``start``: a resumed run's first step; the batches before it are drawn and dropped, so the
    rest are those of an uninterrupted run. ``augmenter``: each shape is replaced by an
    ``augment.ShapeAugmenter`` variant with probability ``augment.AUGMENT_PROB``, drawn from a
    second generator (seeded ``[seed, 1]``, so the batches' order is that of a run without it)."""

    def __init__(self, ds: PartDataset, ids: np.ndarray, latents: Tensor, stats: dict, text: Tensor | None,
                 batch_size: int, max_tokens: int | None, steps: int, seed: int, start: int = 0,
                 augmenter: ShapeAugmenter | None = None) -> None:
        self.ds, self.ids, self.latents, self.stats, self.text = ds, ids, latents, stats, text
        self.batch_size, self.max_tokens, self.steps, self.seed, self.start = batch_size, max_tokens, steps, seed, start
        self.augmenter = augmenter

    def __len__(self) -> int:
        return self.steps - self.start

    def __iter__(self):
        rng, gen = np.random.default_rng(self.seed), torch.Generator().manual_seed(self.seed)
        aug_rng = np.random.default_rng([self.seed, 1])
        step = 0
        while step < self.steps:
            for ids_b in _shape_batches(self.ds, self.ids, self.batch_size, rng, self.max_tokens):
                if step >= self.steps:
                    break
                replaced = None
                if self.augmenter is not None:
                    replaced = {j: self.augmenter(i, aug_rng) for j, i in enumerate(ids_b)
                                if aug_rng.random() < AUGMENT_PROB}
                batch = collate(self.ds, self.latents, ids_b, self.stats, self.text, replaced)
                batch["noise"] = draw_flow_noise(batch, gen)
                if step >= self.start:
                    yield batch
                step += 1


class GeneratorModule(L.LightningModule):
    """Rectified-flow training of ``model`` on ``ShapeBatches``; AdamW (no weight decay) with
    ``_warmup_cosine``; MoCA's dense warm-up and router distillation per step (module docstring).
    ``history``: ``{"step", "loss", "time_s"[, "router_distill"]}`` every ``LOG_EVERY`` steps and
    at the last (``loss`` without the distillation term)."""

    def __init__(self, model: PartFlowTransformer, batches: ShapeBatches, steps: int, lr: float, seed: int,
                 settings: dict | None = None):
        super().__init__()
        self.model, self.batches, self.steps, self.lr, self.seed = model, batches, steps, lr, seed
        self.settings = settings or {}
        cfg = model.config
        self.distill, self.n_dense = cfg.router_distill > 0, int(round(cfg.dense_warmup * steps))
        self.history: list[dict] = []
        self.t0, self.earlier_s = time.perf_counter(), 0.0
        self.saved_rng: dict | None = None  # the global RNG states of the resume state, set on load

    @property
    def train_s(self) -> float:
        """Training time so far, summed over the sittings of a resumed run."""
        return self.earlier_s + time.perf_counter() - self.t0

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # the global RNG too: the distillation target's query subsample (attention.py) draws from it
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        checkpoint[RUN_STATE] = {"settings": self.settings, "history": self.history, "train_s": self.train_s,
                                 "rng": rng}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get(RUN_STATE, {})
        self.history, self.earlier_s = list(saved.get("history", [])), float(saved.get("train_s", 0.0))
        self.saved_rng = saved.get("rng")

    def train_dataloader(self) -> DataLoader:
        return _loader(self.batches, self.seed, self.device)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=0.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": _warmup_cosine(opt, self.steps), "interval": "step"}}

    def on_train_start(self) -> None:
        _announce(self.trainer, f"training the {self.model.config.attention} generator for {self.steps} steps")
        if self.saved_rng is not None:  # a resumed run: the global RNG where the interrupted run left it
            torch.set_rng_state(self.saved_rng["cpu"])
            if "cuda" in self.saved_rng and self.device.type == "cuda":
                torch.cuda.set_rng_state(self.saved_rng["cuda"], self.device)
        self.t0 = time.perf_counter()

    def training_step(self, batch: dict, batch_idx: int) -> Tensor:
        step = self.global_step
        if self.distill or self.n_dense:
            self.model.set_sparse_training(distill=self.distill, dense=step < self.n_dense)
        noise = batch.pop("noise")
        loss = flow_matching_loss(self.model, batch, noise)
        aux = self.model.router_distill_loss() if self.distill else None
        self.log("train_loss", loss.detach())
        if step % LOG_EVERY == 0 or step == self.steps - 1:
            self.history.append({"step": step, "loss": float(loss.detach()), "time_s": self.train_s,
                                 **({} if aux is None else {"router_distill": float(aux.detach())})})
        return loss if aux is None else loss + self.model.config.router_distill * aux

    def on_train_end(self) -> None:
        if self.distill or self.n_dense:
            self.model.set_sparse_training(False, False)


class PipelineSnapshots(Callback):
    """Every ``every`` steps, the pipeline (``ae`` + the generator being trained + ``stats``,
    ``descriptions``, ``categories``) saved with ``MoCAPipeline.save`` into
    ``out_dir/snapshots/step_<n>`` (its generator's extra holds ``step``)."""

    def __init__(self, out_dir: str | Path, every: int, ae: PartAutoencoder, stats: dict, descriptions: list[str],
                 categories: list[str]) -> None:
        self.out_dir, self.every = Path(out_dir), every
        self.ae, self.stats, self.descriptions, self.categories = ae, stats, descriptions, categories

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every or not trainer.is_global_zero:
            return
        from generation3d.sampling import MoCAPipeline

        gen = pl_module.model
        was_training = gen.training
        pipe = MoCAPipeline(self.ae, gen, self.stats, self.descriptions, categories=self.categories)
        pipe.save(snapshot_dir(self.out_dir, step), {"step": step, "seed": pl_module.seed})
        gen.train(was_training)  # the pipeline puts its models in eval mode


def fit(
    ds: PartDataset, ae: PartAutoencoder, config: GenConfig | None = None, steps: int = 300, batch_size: int = 16,
    lr: float = 1e-3, seed: int = 0, progress: bool = False, max_tokens: int = 512, text_encoder=None,
    run_dir: str | Path | None = None, device: str = "auto", precision: str = "32",
    init: PartFlowTransformer | None = None, stats: dict | None = None, resume: bool = False,
    checkpoint_every: int = 0, snapshot_every: int = 0, augment: bool = False,
) -> tuple[PartFlowTransformer, dict, list[dict]]:
    """Train the generator on training shapes with at most ``config.max_parts`` parts,
    conditioned on category, part count and the MiniLM embedding of each shape's description
    (``text.describe_shape``; ``text_encoder`` defaults to ``text.default_encoder()``), on
    ``device`` in ``precision`` (``common.device``). ``init``: continue from this model (its
    config is used) instead of a new one; ``stats``: latent statistics to standardise with
    (default: those of ``ds``). ``run_dir``: where Lightning's CSV log goes (None: no files).

    ``checkpoint_every`` (> 0, needs ``run_dir``): Lightning's full state to
    ``run_dir/checkpoints/last.ckpt`` every so many steps; ``resume``: continue from it when it
    exists (module docstring; InputError for a state of other settings). ``snapshot_every`` (> 0,
    needs ``run_dir``): ``PipelineSnapshots``. ``augment``: mirror, per-axis scale and component
    swaps of the training shapes (``augment.py``). Returns (model on the CPU in eval mode, latent stats
    as lists, history); the history's ``time_s`` is the training time summed over sittings."""
    from generation3d.data import trained_categories

    config = init.config if init is not None else config or GenConfig()
    ids = ds.shape_ids("train", max_parts=config.max_parts)
    if len(ids) == 0:
        raise InputError(f"no training shapes with at most {config.max_parts} parts (raise --max-parts)")
    if (resume or checkpoint_every or snapshot_every) and run_dir is None:
        raise InputError("checkpoints, snapshots and resuming need a run directory")
    if resume and not checkpoint_every:
        raise InputError("resuming needs checkpoint_every > 0 (the full state is saved that often)")
    latents = encode_parts(ae, ds)
    stats = latent_stats(ds, latents) if stats is None else {k: torch.as_tensor(v) for k, v in stats.items()}
    settings = {"config": asdict(config), "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
                "max_tokens": max_tokens, "precision": precision, "train_shapes": [int(i) for i in ids],
                "init": init is not None, **({"augment": True} if augment else {})}
    start = check_resumable(run_dir, settings) if resume else 0
    callbacks: list[Callback] = []
    if snapshot_every:
        callbacks.append(PipelineSnapshots(run_dir, snapshot_every, ae, {k: v.tolist() for k, v in stats.items()},
                                           shape_descriptions(ds, "train"), trained_categories(ds, config.max_parts)))
    if checkpoint_every:
        callbacks.append(resume_checkpoint(run_dir, checkpoint_every))
    trainer = _trainer(run_dir, steps, seed, progress, device, precision, callbacks)
    text = torch.from_numpy((text_encoder or default_encoder()).encode(shape_descriptions(ds)))
    model = (init if init is not None else PartFlowTransformer(config)).train()  # new: initialised after the seeding
    augmenter = ShapeAugmenter(ds, ids, latents, encode_parts(ae, ds, mirror=True)) if augment else None
    batches = ShapeBatches(ds, ids, latents, stats, text, batch_size, max_tokens, steps, seed, start, augmenter)
    module = GeneratorModule(model, batches, steps, lr, seed, settings)
    _fit(trainer, module, resume=resume)
    return model.cpu().eval(), {k: v.tolist() for k, v in stats.items()}, module.history


def train_pipeline(ds: PartDataset, ae: PartAutoencoder, config: GenConfig, out: Path, extra: dict,
                   ae_extra: dict | None = None, **fit_options):
    """``fit`` the generator (progress shown, ``run_dir=out``, ``fit_options`` as ``fit``'s) and
    save the whole pipeline to ``out``: autoencoder, generator, latent statistics, the training
    descriptions and categories, the component library (``library.dataset_library``), and ``extra`` plus ``history`` and ``train_s`` (``ae_extra``: the
    autoencoder's). Returns ``(pipeline, history)``."""
    from generation3d.data import trained_categories
    from generation3d.library import dataset_library
    from generation3d.sampling import MoCAPipeline
    from generation3d.text import shape_descriptions

    gen, stats, hist = fit(ds, ae, config, progress=True, run_dir=out, **fit_options)
    pipe = MoCAPipeline(ae, gen, stats, shape_descriptions(ds, "train"),
                        categories=trained_categories(ds, config.max_parts))
    pipe.library = dataset_library(pipe, ds)
    pipe.save(out, {"history": hist, **extra, "train_s": hist[-1]["time_s"]}, ae_extra=ae_extra)
    return pipe, hist
