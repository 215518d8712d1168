"""Two-phase training of the retrieval models: Lightning modules run by ``common.engine`` and
the one entry point :func:`fit` (the Python API behind ``moa3cir train``).

Phase 1 (alignment, ``AlignmentModule``): what the data allows on gallery items: image<->description
InfoNCE with descriptions, attribute heads with attribute labels, query-vs-gallery image InfoNCE
without descriptions (``CIRTowers.alignment_terms``).
Phase 2 (composed retrieval): InfoNCE of composed queries against in-batch targets plus hard
negatives (the reference itself and an item one or two attributes away from the target),
learnable temperature, attribute + router supervision (``ComposedModule``); early stopping on
validation recall within a step budget that scales with the number of triplets.

The features stay on the CPU; every batch moves to the trainer's device, so the same code trains
on the CPU and on GPUs, in fp32 or mixed precision (``device`` / ``precision`` of
``common.engine.make_trainer``).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader

from common.device import to_device
from common.engine import fit as engine_fit
from common.engine import make_trainer, shuffled_loader
from common.errors import DataError

from .data import CIRSplit, carve_validation
from .embed import embed_gallery, embed_queries
from .evaluate import evaluate_split
from .features import (
    Features,
    RowIndex,
    attach_image_tokens,
    gallery_batch,
    prepare_features,
    query_batch,
)
from .text import TextEncoder
from .towers import info_nce

# a run without a validation split (fixed budget, the benchmark) is intended, not a mistake
warnings.filterwarnings("ignore", message=r".*`validation_step` but have no `val_dataloader`.*")
# a frozen pretrained image encoder keeps its batch norms in eval mode on purpose
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")

PHASE2_BUDGET_EPOCHS = 30  # step budget of phase 2: this many epochs of the training triplets ...
PHASE2_MIN_STEPS = 200  # ... but at least this many steps (small data: the model still converges)
PHASE2_MAX_STEPS = 20_000  # ... and at most this many (FashionIQ-sized data: about 70 epochs of 18k)
EARLY_STOP_AFTER = 0.25  # no early stopping in the first quarter of the budget (warm-up, peak LR)


class WarmEarlyStopping(EarlyStopping):
    """Lightning's ``EarlyStopping`` that starts counting only after ``min_steps`` optimizer steps:
    during the one-cycle warm-up validation recall is flat and would stop a small run before the
    learning rate ever peaked."""

    def __init__(self, min_steps: int, **kwargs):
        super().__init__(**kwargs)
        self.min_steps = min_steps

    def _run_early_stopping_check(self, trainer: L.Trainer) -> None:
        if trainer.global_step >= self.min_steps:
            super()._run_early_stopping_check(trainer)


@dataclass
class TrainConfig:
    """Two-phase training. ``phase2_epochs=None``: the step budget :func:`phase2_max_steps`;
    an int caps phase 2 at that many epochs. With ``val_fraction > 0`` (or a validation split
    passed to :func:`fit`) phase 2 stops early on validation recall (mean of R@1/5/10)
    after ``patience`` epochs without improvement (counted from ``EARLY_STOP_AFTER`` of the
    budget on) and keeps the best epoch's weights."""

    phase1_epochs: int = 2
    phase2_epochs: int | None = None
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    hard_negatives: bool = True
    val_fraction: float = 0.1
    patience: int = 5
    seed: int = 0


def phase2_max_steps(n_triplets: int, cfg: TrainConfig) -> int:
    """Phase 2 step budget: ``phase2_epochs`` epochs when set, else ``PHASE2_BUDGET_EPOCHS``
    epochs of ``ceil(n_triplets / batch_size)`` steps clamped to [``PHASE2_MIN_STEPS``,
    ``PHASE2_MAX_STEPS``]."""
    per_epoch = max(1, math.ceil(n_triplets / cfg.batch_size))
    if cfg.phase2_epochs is not None:
        return cfg.phase2_epochs * per_epoch
    return int(min(PHASE2_MAX_STEPS, max(PHASE2_MIN_STEPS, PHASE2_BUDGET_EPOCHS * per_epoch)))


def hard_negative_pool(f: Features, max_per_item: int = 16, seed: int = 0) -> list[np.ndarray]:
    """Per gallery row: rows whose attributes differ in 1-2 groups (random rows without labels)."""
    n = len(f.images)
    rng = np.random.default_rng(seed)
    if f.attrs is None:
        return [rng.integers(0, n, size=max_per_item) for _ in range(n)]
    a = f.attrs.numpy()
    pools = []
    for i in range(n):
        d = (a != a[i]).sum(1)
        cand = np.nonzero((d >= 1) & (d <= 2))[0]
        if not len(cand):
            cand = np.nonzero(d >= 1)[0]
        pools.append(rng.permutation(cand)[:max_per_item] if len(cand) else np.array([i]))
    return pools


ENCODER_LR_SCALE = 0.1  # fine-tuned pretrained blocks learn at a tenth of the learning rate


def _one_cycle(module: L.LightningModule, cfg: TrainConfig, total_steps: int):
    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    pretrained = [p for n, p in params if ".image_input.encoder." in f".{n}"]
    groups = [{"params": [p for n, p in params if ".image_input.encoder." not in f".{n}"], "lr": cfg.lr}]
    if pretrained:
        groups.append({"params": pretrained, "lr": cfg.lr * ENCODER_LR_SCALE})
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    # warm-up over 10% of the steps, but at least 1.5 steps: torch's OneCycleLR divides by
    # (pct_start * total_steps - 1), zero for a 10-step run
    steps = max(total_steps, 2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in groups], total_steps=steps,
                                                pct_start=max(0.1, 1.5 / steps))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class AlignmentModule(L.LightningModule):
    """Phase 1: the model's ``alignment_terms`` on batches of gallery rows (b,) of ``f``; logs
    every term (``train_<term>``) and remembers which ran (``objectives``)."""

    def __init__(self, model: torch.nn.Module, f: Features, cfg: TrainConfig, total_steps: int):
        super().__init__()
        self.model, self.f, self.cfg, self.total_steps = model, f, cfg, total_steps
        self.objectives: list[str] = []
        self.history: list[dict] = []
        self._losses: list[float] = []

    def training_step(self, rows: torch.Tensor, batch_idx: int) -> torch.Tensor:
        terms = self.model.alignment_terms(to_device(gallery_batch(self.f, rows.cpu()), self.device))
        for name, value in terms.items():
            if name not in self.objectives:
                self.objectives.append(name)
            self.log(f"train_{name}", value.detach(), batch_size=len(rows))
        loss = sum(terms.values())
        self.log("train_loss", loss.detach(), batch_size=len(rows))
        self._losses.append(float(loss.detach()))
        return loss

    def on_train_epoch_end(self) -> None:
        self.history.append({"phase": 1, "epoch": self.current_epoch, "loss": float(np.mean(self._losses))})
        self._losses = []

    def configure_optimizers(self):
        return _one_cycle(self, self.cfg, self.total_steps)


class ComposedModule(L.LightningModule):
    """Phase 2: composed InfoNCE (+ auxiliary losses) on batches of triplet rows (b,) of ``f``;
    validation embeds ``val`` (its split and features) and logs ``val_recall`` = mean of R@1/5/10
    under the dataset's protocol, in percent."""

    def __init__(self, model: torch.nn.Module, f: Features, cfg: TrainConfig, total_steps: int,
                 val: tuple[CIRSplit, Features] | None = None):
        super().__init__()
        self.model, self.f, self.cfg, self.total_steps, self.val = model, f, cfg, total_steps, val
        self.pools = hard_negative_pool(f, seed=cfg.seed) if cfg.hard_negatives else None
        self.rng = np.random.default_rng(cfg.seed)
        self.history: list[dict] = []
        self._losses: list[float] = []

    def training_step(self, rows: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = _composed_loss(self.model, self.f, rows.cpu(), self.pools, self.rng, self.device)
        self.log("train_loss", loss.detach(), batch_size=len(rows))
        self._losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        split, f = self.val
        q, _ = embed_queries(self.model, f, device=self.device)
        m = evaluate_split(split, q, embed_gallery(self.model, f, device=self.device), ks=(1, 5, 10))
        value = float(np.mean([m["R@1"], m["R@5"], m["R@10"]]))
        self.log("val_recall", value, batch_size=1)
        self.log("val_R@10", m["R@10"], batch_size=1)
        self.history.append({"phase": 2, "epoch": self.current_epoch, "step": self.global_step,
                             "val_recall": value, "val_R@10": m["R@10"]})

    def on_train_epoch_end(self) -> None:
        self.history.append({"phase": 2, "epoch": self.current_epoch, "loss": float(np.mean(self._losses))})
        self._losses = []

    def configure_optimizers(self):
        return _one_cycle(self, self.cfg, self.total_steps)


def _loader(n: int, cfg: TrainConfig, salt: int) -> DataLoader:
    return shuffled_loader(RowIndex(n), cfg.batch_size, seed=cfg.seed + salt)


def _val_loader() -> DataLoader:
    """One validation batch per round: ``ComposedModule.validation_step`` embeds the whole split."""
    return DataLoader([0], batch_size=None)


def _composed_loss(model, f: Features, idx: torch.Tensor, pools, rng, device: torch.device) -> torch.Tensor:
    """Phase-2 loss of the triplet rows ``idx`` (b,) (CPU) of ``f``, computed on ``device``."""
    qb = to_device(query_batch(f, idx), device)
    tgt = f.tgt[idx]
    q, info = model.encode_query(qb)
    g_slots = model.gallery_slots(to_device(gallery_batch(f, tgt), device))
    g = model.gallery_embedding(g_slots)
    same = (tgt[:, None] == tgt[None, :]).to(device)
    extra = neg_same = None
    if pools is not None:
        ref = f.ref[idx]
        hard = torch.tensor([int(rng.choice(pools[int(t)])) for t in tgt])
        neg_rows = torch.cat([ref, hard])
        extra = model.encode_gallery(to_device(gallery_batch(f, neg_rows), device))
        neg_same = (tgt[:, None] == neg_rows[None, :]).to(device)
    loss = info_nce(q, g, model.logit_scale, extra, same, neg_same)
    return loss + model.auxiliary_loss(info, qb, g_slots)


def fit(
    model: torch.nn.Module,
    train: CIRSplit | Features,
    cfg: TrainConfig | None = None,
    *,
    val: CIRSplit | tuple[CIRSplit, Features] | None = None,
    log=None,
    run_dir: Path | None = None,
    encoder: TextEncoder | None = None,
    device: str | torch.device | None = "auto",
    precision: str = "32",
) -> list[dict]:
    """Train ``model`` in place, both phases as Lightning runs (``common.engine``) on ``device``
    in ``precision``; returns the history (per-epoch losses, validation rounds, and one
    ``{"phase", "stopped", "reason", ...}`` record per phase).

    ``train``: a loaded split, or its :class:`~retrieval.features.Features` when the caller
    prepared them (a benchmark training several models on one split). With a split, ``val`` is a
    validation split (or, without one, ``cfg.val_fraction`` of the training *targets* and their
    triplets are held out, :func:`retrieval.data.carve_validation`) and whether item descriptions
    were found is logged; with features, ``val`` is a ``(split, features)`` pair or None (no
    validation, no hold-out: a fixed budget).

    Phase 1 (``AlignmentModule``): ``cfg.phase1_epochs`` epochs over the gallery items. Phase 2
    (``ComposedModule``): up to :func:`phase2_max_steps` steps over the triplets; with a
    validation split it validates every epoch, stops after ``cfg.patience`` epochs without a
    better ``val_recall`` (not before ``EARLY_STOP_AFTER`` of the budget) and restores the best
    epoch's weights. ``run_dir``: Lightning CSV logs (``phase1/logs``, ``phase2/logs``:
    ``metrics.csv`` with losses and validation recall; a temporary directory when None); the best
    checkpoint is removed once restored. ``log``: a print-like callable for progress lines.
    ``encoder``: the text encoder of the features (default MiniLM)."""
    cfg = cfg or TrainConfig()
    say = log or (lambda *_: None)
    if isinstance(train, Features):
        if val is not None and not (isinstance(val, tuple) and isinstance(val[1], Features)):
            raise TypeError("with prepared Features, val is a (split, Features) pair or None")
        return _fit_features(model, train, cfg, say, val, run_dir, device, precision)
    if not train.triplets:
        raise DataError(f"{train.name}/{train.split} has no triplets to train on")
    if train.descriptions:
        say(f"descriptions: found for {len(train.descriptions)} of {len(train.ids)} items "
            f"({', '.join(train.description_files) or 'built benchmark'})")
    else:
        say("descriptions: none found (optional: descriptions/desc.<split>.json or "
            "descriptions/desc.<category>.<split>.json, {image id: text})")
    if val is None:
        train, val = carve_validation(train, cfg.val_fraction, cfg.seed)
    f = prepare_features(train, encoder)
    val_pair = (val, prepare_features(val, encoder)) if val is not None and val.triplets else None
    return _fit_features(model, f, cfg, say, val_pair, run_dir, device, precision)


def _fit_features(model, f: Features, cfg: TrainConfig, say, val: tuple[CIRSplit, Features] | None,
                  run_dir: Path | None, device, precision: str) -> list[dict]:
    """:func:`fit` on prepared features (``val``: a split and its features, or None)."""
    history: list[dict] = []
    attach_image_tokens(model, f)
    if val is not None:
        attach_image_tokens(model, val[1])
    n_items, n_trip = len(f.images), len(f.ref)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(run_dir) if run_dir is not None else Path(tmp)
        if cfg.phase1_epochs > 0:
            steps = cfg.phase1_epochs * math.ceil(n_items / cfg.batch_size)
            m1 = AlignmentModule(model, f, cfg, steps)
            trainer = make_trainer(base / "phase1", max_epochs=cfg.phase1_epochs, grad_clip=5.0, seed=cfg.seed,
                                   progress=False, checkpoint=False, device=device, precision=precision)
            engine_fit(trainer, m1, _loader(n_items, cfg, 1), resume=False)
            history += m1.history
            for h in m1.history:
                say(f"phase 1 epoch {h['epoch']}: loss {h['loss']:.4f}")
            say(f"phase 1 objectives: {', '.join(m1.objectives)} ({trainer.global_step} steps)")
            history.append({"phase": 1, "objectives": m1.objectives, "stopped": trainer.global_step,
                            "reason": f"{cfg.phase1_epochs} epochs done"})
        if n_trip == 0 or (cfg.phase2_epochs is not None and cfg.phase2_epochs == 0):
            model.eval()
            return history
        max_steps = phase2_max_steps(n_trip, cfg)
        per_epoch = math.ceil(n_trip / cfg.batch_size)
        m2 = ComposedModule(model, f, cfg, max_steps, val)
        monitor, callbacks = {}, []
        if val is not None:
            monitor = dict(monitor="val_recall", mode="max")
            callbacks = [WarmEarlyStopping(int(EARLY_STOP_AFTER * max_steps), patience=cfg.patience, **monitor)]
        trainer = make_trainer(base / "phase2", max_epochs=-1, max_steps=max_steps, grad_clip=5.0, seed=cfg.seed,
                               progress=False, checkpoint=val is not None, callbacks=callbacks, device=device,
                               precision=precision, **monitor)
        say(f"phase 2: {n_trip} triplets, budget {max_steps} steps ({max_steps / per_epoch:.0f} epochs)"
            + (f", early stopping on validation recall ({len(val[0].triplets)} held-out triplets), "
               f"patience {cfg.patience} epochs after step {int(EARLY_STOP_AFTER * max_steps)}"
               if val is not None else ", no validation split"))
        engine_fit(trainer, m2, _loader(n_trip, cfg, 2), _val_loader() if val is not None else None,
                   resume=False)
        history += m2.history
        for h in m2.history:
            if "loss" in h:
                say(f"phase 2 epoch {h['epoch']}: loss {h['loss']:.4f}")
            else:
                say(f"phase 2 epoch {h['epoch']}: validation mean R@1/5/10 {h['val_recall']:.2f}, "
                    f"R@10 {h['val_R@10']:.2f}")
        record = {"phase": 2, "stopped": trainer.global_step, "epochs": trainer.current_epoch,
                  "max_steps": max_steps}
        early = next((cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping)), None)
        if early is not None and early.stopped_epoch > 0:
            record["reason"] = (f"early stopping: validation recall did not improve for {cfg.patience} epochs")
        elif trainer.global_step >= max_steps:
            record["reason"] = f"step budget of {max_steps} steps reached"
        else:
            record["reason"] = "epoch limit reached"
        ckpt = trainer.checkpoint_callback
        if val is not None and isinstance(ckpt, ModelCheckpoint) and ckpt.best_model_path:
            state = torch.load(ckpt.best_model_path, map_location="cpu", weights_only=False)["state_dict"]
            m2.load_state_dict(state)
            best = max((h for h in m2.history if "val_recall" in h), key=lambda h: h["val_recall"])
            record.update(best_epoch=best["epoch"], best_val_recall=best["val_recall"],
                          best_val_R10=best["val_R@10"])
            shutil.rmtree(Path(ckpt.best_model_path).parent)  # the weights live on in the model
            record["reason"] += (f"; kept the best epoch {best['epoch']} (validation mean R@1/5/10 "
                                 f"{best['val_recall']:.2f}, R@10 {best['val_R@10']:.2f})")
        say(f"phase 2 stopped after {trainer.global_step} steps ({trainer.current_epoch} epochs): {record['reason']}")
        history.append(record)
    model.eval()
    return history

