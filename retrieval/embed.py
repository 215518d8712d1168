"""Embedding with a trained model: gallery items, the queries of a split's triplets, and one
query typed by a user. The model moves to ``device`` (``common.device``: ``auto`` is a CUDA GPU
when present, else the CPU); the features stay on the CPU and batches move; results come back as
float32 NumPy arrays.

    g = embed_gallery(model, f)              # (N, E) one row per item of the split
    q, weights = embed_queries(model, f)     # (T, E) one row per triplet, (T, G) routing weights
"""

from __future__ import annotations

import numpy as np
import torch

from common.device import resolve_device, to_device
from common.errors import InputError

from .features import (
    Features,
    attach_image_tokens,
    description_tokens,
    gallery_batch,
    query_batch,
    text_tokens,
)
from .text import TextEncoder


def _on(model: torch.nn.Module, device: str | torch.device | None) -> torch.device:
    """Put ``model`` in eval mode on ``device``; returns that device."""
    target = resolve_device(device)
    model.to(target).eval()
    return target


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().float().cpu().numpy()


@torch.no_grad()
def embed_gallery(model, f: Features, batch_size: int = 256, device: str | torch.device | None = "auto") -> np.ndarray:
    """(N, E) gallery embeddings of every item of ``f``."""
    dev = _on(model, device)
    attach_image_tokens(model, f)
    out = [
        model.encode_gallery(to_device(gallery_batch(f, torch.arange(s, min(s + batch_size, len(f.images)))), dev))
        for s in range(0, len(f.images), batch_size)
    ]
    return _numpy(torch.cat(out)) if out else np.zeros((0, 1), np.float32)


@torch.no_grad()
def embed_queries(
    model, f: Features, batch_size: int = 256, device: str | torch.device | None = "auto"
) -> tuple[np.ndarray, np.ndarray | None]:
    """(T, E) query embeddings and (T, G) group routing weights (None for baselines)."""
    dev = _on(model, device)
    attach_image_tokens(model, f)
    qs, ws = [], []
    for s in range(0, len(f.ref), batch_size):
        q, info = model.encode_query(to_device(query_batch(f, torch.arange(s, min(s + batch_size, len(f.ref)))), dev))
        qs.append(q)
        if "group_weights" in info:
            ws.append(info["group_weights"])
    q = _numpy(torch.cat(qs)) if qs else np.zeros((0, 1), np.float32)
    return q, (_numpy(torch.cat(ws)) if ws else None)


@torch.no_grad()
def encode_single_query(
    model,
    image: np.ndarray,
    text: str,
    description: str | None = None,
    encoder: TextEncoder | None = None,
    device: str | torch.device | None = "auto",
) -> tuple[np.ndarray, np.ndarray | None]:
    """One query: image (32, 32, 3) uint8 + modification text (+ reference description).

    Returns q (1, E) and the (G,) attribute-group routing weights (None for baselines)."""
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
    dev = _on(model, device)
    q, info = model.encode_query(to_device(batch, dev))
    w = info.get("group_weights")
    return _numpy(q), (None if w is None else _numpy(w[0]))

