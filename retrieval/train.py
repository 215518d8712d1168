"""Features, two-phase training, embedding, and model save/load.

Phase 1 (alignment): image<->description InfoNCE and attribute heads on gallery items.
Phase 2 (composed retrieval): InfoNCE of composed queries against in-batch targets plus hard
negatives (the reference itself and an item one or two attributes away from the target),
learnable temperature, attribute + router supervision.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import CheckpointError
from common.pretrained import LEGACY_FORMAT_VERSION, checkpoint_info, load_pretrained

from .baselines import CombinerCIR, CombinerConfig
from .data import CIRSplit
from .model import MoA3CIR, MoA3Config, info_nce, slots_to_embedding
from .render import GROUPS, split_clauses, split_sentences
from .text import TextEncoder, default_encoder

MAX_DESC_TOKENS = 6
MAX_TEXT_TOKENS = 6


@dataclass
class Features:
    """Tensors for one split. desc (N, ld, 384) + desc_mask (N, ld); text (T, lt, 384) +
    text_mask; ref/tgt (T,) gallery rows; changed (T, G) bool or None; attrs (N, G) or None."""

    images: torch.Tensor
    desc: torch.Tensor | None
    desc_mask: torch.Tensor | None
    text: torch.Tensor
    text_mask: torch.Tensor
    ref: torch.Tensor
    tgt: torch.Tensor
    changed: torch.Tensor | None
    attrs: torch.Tensor | None


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
    sents = [split_sentences(d) for d in descs]
    table = encode_texts([s for ss in sents for s in ss], encoder)
    return _pad(sents, table, MAX_DESC_TOKENS)


def prepare_features(split: CIRSplit, encoder: TextEncoder | None = None) -> Features:
    desc = mask = None
    if split.descriptions is not None:
        desc, mask = description_tokens([split.descriptions[i] for i in split.ids], encoder)
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
    if f.desc is not None:
        b["desc"], b["desc_mask"] = f.desc[rows], f.desc_mask[rows]
    if f.attrs is not None:
        b["attrs"] = f.attrs[rows]
    return b


def query_batch(f: Features, trip: torch.Tensor) -> dict:
    ref = f.ref[trip]
    b = {"ref_img": f.images[ref], "text": f.text[trip], "text_mask": f.text_mask[trip]}
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


@dataclass
class TrainConfig:
    phase1_epochs: int = 2
    phase2_epochs: int = 8
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    hard_negatives: bool = True
    seed: int = 0


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


def fit(model: torch.nn.Module, f: Features, cfg: TrainConfig, log=None) -> list[dict]:
    """Train ``model`` in place (two phases); returns the per-epoch loss history."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    n_items, n_trip = len(f.images), len(f.ref)
    steps = cfg.phase1_epochs * max(1, n_items // cfg.batch_size) + cfg.phase2_epochs * max(
        1, n_trip // cfg.batch_size
    )
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=max(steps, 1), pct_start=0.1)
    history = []
    pools = hard_negative_pool(f, seed=cfg.seed) if cfg.hard_negatives else None
    model.train()
    for phase, epochs, n in ((1, cfg.phase1_epochs, n_items), (2, cfg.phase2_epochs, n_trip)):
        for epoch in range(epochs):
            perm = torch.randperm(n, generator=gen)
            total, count = 0.0, 0
            for s in range(0, n - cfg.batch_size + 1 if n >= cfg.batch_size else 1, cfg.batch_size):
                idx = perm[s : s + cfg.batch_size]
                if phase == 1:
                    loss = model.alignment_loss(gallery_batch(f, idx))
                else:
                    loss = composed_loss(model, f, idx, pools, rng)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                opt.step()
                if sched.last_epoch < sched.total_steps - 1:
                    sched.step()
                total += float(loss.detach())
                count += 1
            history.append({"phase": phase, "epoch": epoch, "loss": total / max(count, 1)})
            if log:
                log(f"phase {phase} epoch {epoch}: loss {total / max(count, 1):.4f}")
    model.eval()
    return history


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
    model.eval()
    out = [
        model.encode_gallery(gallery_batch(f, torch.arange(s, min(s + batch_size, len(f.images)))))
        for s in range(0, len(f.images), batch_size)
    ]
    return torch.cat(out).numpy() if out else np.zeros((0, 1), np.float32)


@torch.no_grad()
def embed_queries(model, f: Features, batch_size: int = 256) -> tuple[np.ndarray, np.ndarray | None]:
    """(T, E) query embeddings and (T, G) group routing weights (None for baselines)."""
    model.eval()
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
