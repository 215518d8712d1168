"""Features, two-phase training (Lightning modules run by ``common.engine``), embedding, and
model save/load.

Phase 1 (alignment, ``AlignmentModule``): what the data allows on gallery items: image<->description
InfoNCE with descriptions, attribute heads with attribute labels, query-vs-gallery image InfoNCE
without descriptions.
Phase 2 (composed retrieval): InfoNCE of composed queries against in-batch targets plus hard
negatives (the reference itself and an item one or two attributes away from the target),
learnable temperature, attribute + router supervision (``ComposedModule``); early stopping on
validation recall within a step budget that scales with the number of triplets.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

from common.engine import fit as engine_fit
from common.engine import make_trainer, shuffled_loader
from common.errors import CheckpointError, DataError
from common.pretrained import LEGACY_FORMAT_VERSION, checkpoint_info, load_pretrained

from .baselines import CombinerCIR, CombinerConfig
from .data import CIRSplit, carve_validation
from .evaluate import evaluate_split
from .model import MoA3CIR, MoA3Config, info_nce, slots_to_embedding
from .render import GROUPS, split_clauses, split_sentences
from .text import TextEncoder, default_encoder

MAX_DESC_TOKENS = 6
MAX_TEXT_TOKENS = 6


@dataclass
class Features:
    """Tensors for one split. images (N, 3, H, W) in [0, 255]; desc (N, ld, 384) + desc_mask (N, ld);
    text (T, lt, 384) + text_mask; ref/tgt (T,) gallery rows; changed (T, G) bool or None;
    attrs (N, G) or None; image_tokens (N, g*g, c): frozen pretrained token grids of the images,
    named by token_spec (``attach_image_tokens``; None until a model with a frozen pretrained
    encoder asks)."""

    images: torch.Tensor
    desc: torch.Tensor | None
    desc_mask: torch.Tensor | None
    text: torch.Tensor
    text_mask: torch.Tensor
    ref: torch.Tensor
    tgt: torch.Tensor
    changed: torch.Tensor | None
    attrs: torch.Tensor | None
    image_tokens: torch.Tensor | None = field(default=None, repr=False)
    token_spec: str | None = None


def attach_image_tokens(model: torch.nn.Module, f: Features) -> Features:
    """Give ``f`` the frozen token grids ``model`` reads (``model.image_input.token_spec``),
    computed once per image by the pretrained encoder and cached on disk by image hash, so epochs
    and later runs never re-run the CNN. Scratch towers and a fine-tuned encoder read ``f.images``:
    grids another model attached are dropped, so no batch carries stale ones. Returns ``f``."""
    image_input = getattr(model, "image_input", None)
    spec = None if image_input is None else image_input.token_spec
    if spec is None:
        f.image_tokens, f.token_spec = None, None
    if spec is None or f.token_spec == spec:
        return f
    uint8 = f.images.permute(0, 2, 3, 1).round().clamp(0, 255).to(torch.uint8).numpy()
    f.image_tokens, f.token_spec = image_input.frozen_tokens(uint8), spec
    return f


def _pad(
    groups: list[list[str]], table: dict[str, np.ndarray], max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(groups)
    length = max(1, min(max_len, max((len(g) for g in groups), default=1)))
    emb = np.zeros((n, length, 384), np.float32)
    mask = np.zeros((n, length), bool)
    for i, g in enumerate(groups):
        for j, s in enumerate(g[:length]):
            emb[i, j] = table[s]
            mask[i, j] = True
    return torch.from_numpy(emb), torch.from_numpy(mask)


def encode_texts(texts: list[str], encoder: TextEncoder | None = None) -> dict[str, np.ndarray]:
    encoder = encoder or default_encoder()
    uniq = list(dict.fromkeys(texts))
    return dict(zip(uniq, encoder.encode(uniq), strict=False)) if uniq else {}


def text_tokens(texts: list[str], encoder: TextEncoder | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Modification texts -> clause tokens (T, lt, 384) and mask."""
    clauses = [split_clauses(t) for t in texts]
    table = encode_texts([c for cs in clauses for c in cs], encoder)
    return _pad(clauses, table, MAX_TEXT_TOKENS)


def description_tokens(
    descs: list[str], encoder: TextEncoder | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    sents = [split_sentences(d) if d.strip() else [] for d in descs]  # "": an item without one
    table = encode_texts([s for ss in sents for s in ss], encoder)
    return _pad(sents, table, MAX_DESC_TOKENS)


def prepare_features(split: CIRSplit, encoder: TextEncoder | None = None) -> Features:
    desc = mask = None
    if split.descriptions is not None:
        desc, mask = description_tokens([split.descriptions.get(i, "") for i in split.ids], encoder)
    text, text_mask = text_tokens([t.text for t in split.triplets], encoder)
    changed = None
    if split.triplets and all(t.changed is not None for t in split.triplets):
        changed = torch.tensor([[g in t.changed for g in GROUPS] for t in split.triplets])
    attrs = None if split.attributes is None else torch.from_numpy(split.attributes).long()
    return Features(
        images=torch.from_numpy(split.images).permute(0, 3, 1, 2).float(),
        desc=desc,
        desc_mask=mask,
        text=text,
        text_mask=text_mask,
        ref=torch.tensor(split.rows([t.reference for t in split.triplets])),
        tgt=torch.tensor(split.rows([t.target for t in split.triplets])),
        changed=changed,
        attrs=attrs,
    )


def gallery_batch(f: Features, rows: torch.Tensor) -> dict:
    b = {"img": f.images[rows]}
    if f.image_tokens is not None:
        b["img_tokens"] = f.image_tokens[rows]
    if f.desc is not None:
        b["desc"], b["desc_mask"] = f.desc[rows], f.desc_mask[rows]
    if f.attrs is not None:
        b["attrs"] = f.attrs[rows]
    return b


def query_batch(f: Features, trip: torch.Tensor) -> dict:
    ref = f.ref[trip]
    b = {"ref_img": f.images[ref], "text": f.text[trip], "text_mask": f.text_mask[trip]}
    if f.image_tokens is not None:
        b["ref_img_tokens"] = f.image_tokens[ref]
    if f.desc is not None:
        b["ref_desc"], b["ref_desc_mask"] = f.desc[ref], f.desc_mask[ref]
    if f.attrs is not None:
        b["ref_attrs"], b["tgt_attrs"] = f.attrs[ref], f.attrs[f.tgt[trip]]
    if f.changed is not None:
        b["changed"] = f.changed[trip]
    return b


# ----------------------------------------------------------------------------- registry

MODEL_KINDS = ("moa3cir", "combiner", "sum", "image", "text")


def build_model(kind: str, **overrides) -> torch.nn.Module:
    """A fresh model of ``kind`` (:data:`MODEL_KINDS`); ``overrides``: fields of its config
    (:class:`MoA3Config` or :class:`CombinerConfig`), e.g. ``image_encoder="efficientnet-lite0"``."""
    if kind == "moa3cir":
        return MoA3CIR(MoA3Config(**overrides))
    if kind in ("combiner", "sum", "image", "text"):
        return CombinerCIR(CombinerConfig(fusion=kind, **overrides))
    raise ValueError(f"unknown model kind {kind!r} (one of {MODEL_KINDS})")


def save_model(model: torch.nn.Module, path: Path, extra: dict | None = None) -> None:
    """``model.save_pretrained(path, extra)`` (a :func:`common.pretrained` checkpoint)."""
    model.save_pretrained(Path(path), extra)


def load_model(path: Path) -> tuple[torch.nn.Module, dict]:
    """``(model in eval mode, extra)`` of a checkpoint of any of :data:`MODEL_KINDS`;
    CheckpointError when it is missing, corrupt or holds another model."""
    info = checkpoint_info(Path(path))
    if info.format_version == LEGACY_FORMAT_VERSION:  # no model type recorded: the config's kind says it
        cls = MoA3CIR if info.config.get("kind") == "moa3cir" else CombinerCIR
        model = cls.from_pretrained(Path(path))
    else:
        model = load_pretrained(Path(path))
    if not isinstance(model, (MoA3CIR, CombinerCIR)):
        raise CheckpointError(f"{path} holds a {model.app} model '{model.model_type}', not a retrieval model")
    return model, info.extra


# ----------------------------------------------------------------------------- training

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
    passed to :func:`train_model`) phase 2 stops early on validation recall (mean of R@1/5/10)
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


class _Rows(Dataset):
    """Index dataset: ``ds[idx] = idx`` (the sampler's batch of rows, (b,) int64)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx):
        return idx


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
        terms = self.model.alignment_terms(gallery_batch(self.f, rows))
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
        loss = composed_loss(self.model, self.f, rows, self.pools, self.rng)
        self.log("train_loss", loss.detach(), batch_size=len(rows))
        self._losses.append(float(loss.detach()))
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        split, f = self.val
        q, _ = embed_queries(self.model, f)
        m = evaluate_split(split, q, embed_gallery(self.model, f), ks=(1, 5, 10))
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
    return shuffled_loader(_Rows(n), cfg.batch_size, seed=cfg.seed + salt)


def fit(
    model: torch.nn.Module,
    f: Features,
    cfg: TrainConfig,
    log=None,
    val: tuple[CIRSplit, Features] | None = None,
    run_dir: Path | None = None,
) -> list[dict]:
    """Train ``model`` in place, both phases as Lightning runs (``common.engine``); returns the
    history (per-epoch losses, validation rounds, and one ``{"phase", "stopped", "reason", ...}``
    record per phase).

    Phase 1 (``AlignmentModule``): ``cfg.phase1_epochs`` epochs over the gallery items. Phase 2
    (``ComposedModule``): up to :func:`phase2_max_steps` steps over the triplets; with ``val``
    (a split and its features) it validates every epoch, stops after ``cfg.patience`` epochs
    without a better ``val_recall`` (not before ``EARLY_STOP_AFTER`` of the budget) and restores
    the best epoch's weights. ``run_dir``: Lightning
    CSV logs (``phase1/logs``, ``phase2/logs``: ``metrics.csv`` with losses and validation
    recall; a temporary directory when None); the best checkpoint is removed once restored. ``log``: a print-like callable for progress lines.
    """
    say = log or (lambda *_: None)
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
                                   progress=False, checkpoint=False)
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
                               progress=False, checkpoint=val is not None, callbacks=callbacks, **monitor)
        say(f"phase 2: {n_trip} triplets, budget {max_steps} steps ({max_steps / per_epoch:.0f} epochs)"
            + (f", early stopping on validation recall ({len(val[0].triplets)} held-out triplets), "
               f"patience {cfg.patience} epochs after step {int(EARLY_STOP_AFTER * max_steps)}"
               if val is not None else ", no validation split"))
        engine_fit(trainer, m2, _loader(n_trip, cfg, 2), _val_loader() if val is not None else None, resume=False)
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


class CriticModule(L.LightningModule):
    """The augmentation critic's attribute classifier: ``model(img (b, 3, 32, 32))`` -> one
    (b, n_values_g) logit tensor per group, trained with the sum over groups of cross-entropy on
    labels ``y`` (n, G) (-1 ignored), AdamW lr 3e-3, on batches of rows (b,) of ``x`` (n, 3, 32, 32)."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
        super().__init__()
        self.model, self.x, self.y = model, x, y

    def training_step(self, rows: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits, y = self.model(self.x[rows]), self.y[rows]
        loss = sum(F.cross_entropy(lg, y[:, g], ignore_index=-1) for g, lg in enumerate(logits) if (y[:, g] >= 0).any())
        self.log("train_loss", loss.detach(), batch_size=len(rows))
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def fit_attribute_classifier(
    model: torch.nn.Module, images: np.ndarray, attrs: np.ndarray, epochs: int, seed: int = 0, batch_size: int = 128
) -> torch.nn.Module:
    """Train ``model`` in place for ``epochs`` epochs on (n, 32, 32, 3) uint8 images and (n, G)
    labels (a fixed budget: the critic is judged by the augmentation's acceptance, not a split)."""
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    module = CriticModule(model, x, torch.from_numpy(attrs).long())
    trainer = make_trainer(None, max_epochs=epochs, seed=seed, progress=False, checkpoint=False)
    engine_fit(trainer, module, shuffled_loader(_Rows(len(x)), batch_size, seed=seed), resume=False)
    model.eval()
    return model


def _val_loader() -> DataLoader:
    """One validation batch per round: ``ComposedModule.validation_step`` embeds the whole split."""
    return DataLoader([0], batch_size=None)


def train_model(
    model: torch.nn.Module,
    train: CIRSplit,
    cfg: TrainConfig | None = None,
    val: CIRSplit | None = None,
    log=None,
    run_dir: Path | None = None,
    encoder: TextEncoder | None = None,
) -> list[dict]:
    """Train ``model`` on a loaded split (the Python API behind ``moa3cir train``).

    Without ``val``, ``cfg.val_fraction`` of the training *targets* (and their triplets) are held
    out as the validation split (:func:`retrieval.data.carve_validation`). Logs whether item
    descriptions were found. Returns :func:`fit`'s history."""
    cfg = cfg or TrainConfig()
    say = log or (lambda *_: None)
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
    return fit(model, f, cfg, log, val_pair, run_dir)


def composed_loss(model, f: Features, idx: torch.Tensor, pools, rng) -> torch.Tensor:
    qb = query_batch(f, idx)
    tgt = f.tgt[idx]
    q, info = model.encode_query(qb)
    tb = gallery_batch(f, tgt)
    g_slots = model.gallery_slots(tb)
    g = slots_to_embedding(g_slots) if g_slots.dim() == 3 else torch.nn.functional.normalize(g_slots, dim=-1)
    same = tgt[:, None] == tgt[None, :]
    extra = neg_same = None
    if pools is not None:
        ref = f.ref[idx]
        hard = torch.tensor([int(rng.choice(pools[int(t)])) for t in tgt])
        neg_rows = torch.cat([ref, hard])
        extra = model.encode_gallery(gallery_batch(f, neg_rows))
        neg_same = tgt[:, None] == neg_rows[None, :]
    loss = info_nce(q, g, model.logit_scale, extra, same, neg_same)
    return loss + model.auxiliary_loss(info, qb, g_slots)


@torch.no_grad()
def embed_gallery(model, f: Features, batch_size: int = 256) -> np.ndarray:
    """(N, E) gallery embeddings of every item of ``f``."""
    model.eval()
    attach_image_tokens(model, f)
    out = [
        model.encode_gallery(gallery_batch(f, torch.arange(s, min(s + batch_size, len(f.images)))))
        for s in range(0, len(f.images), batch_size)
    ]
    return torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)


@torch.no_grad()
def embed_queries(model, f: Features, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray | None]:
    """(T, E) query embeddings and (T, G) group routing weights (None for baselines)."""
    model.eval()
    attach_image_tokens(model, f)
    qs, ws = [], []
    for s in range(0, len(f.ref), batch_size):
        q, info = model.encode_query(query_batch(f, torch.arange(s, min(s + batch_size, len(f.ref)))))
        qs.append(q)
        if "group_weights" in info:
            ws.append(info["group_weights"])
    q = torch.cat(qs).numpy() if qs else np.zeros((0, 1), np.float32)
    return q, (torch.cat(ws).numpy() if ws else None)


def train_config_dict(cfg: TrainConfig) -> dict:
    return asdict(cfg)


@torch.no_grad()
def encode_single_query(
    model, image: np.ndarray, text: str, description: str | None = None, encoder: TextEncoder | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """One query: image (32, 32, 3) uint8 + modification text (+ reference description).

    Returns q (1, E) and the (G,) attribute-group routing weights (None for baselines)."""
    from common.errors import InputError

    if not isinstance(text, str) or not text.strip():
        raise InputError("modification text is empty")
    text_emb, text_mask = text_tokens([text], encoder)
    batch = {
        "ref_img": torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)[None].float(),
        "text": text_emb,
        "text_mask": text_mask,
    }
    if description is not None and description.strip():
        batch["ref_desc"], batch["ref_desc_mask"] = description_tokens([description], encoder)
    model.eval()
    q, info = model.encode_query(batch)
    w = info.get("group_weights")
    return q.numpy(), (None if w is None else w[0].numpy())
