"""Tensors of a CIR split for the models: item images, MiniLM token embeddings of the
descriptions (one token per sentence) and modification texts (one token per clause), triplet
rows, labels, and the frozen pretrained image token grids; and the batches cut from them.

    f = prepare_features(split)                    # Features of a loaded CIRSplit
    items = gallery_batch(f, rows)                 # img, desc, desc_mask, attrs of gallery rows
    queries = query_batch(f, triplet_rows)         # ref_img, text, text_mask, ref_desc, ... of triplets
    queries = common.device.to_device(queries, device)   # Features stay on the CPU; batches move
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import Dataset

from .captions import split_clauses, split_sentences
from .data import CIRSplit
from .render import GROUPS
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


class RowIndex(Dataset):
    """Index dataset: ``ds[idx] = idx`` (a sampler's batch of rows, (b,) int64)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx):
        return idx
