"""Losses and batch preparation shared by training (``train.py``) and evaluation (``evaluate.py``).

* ``chamfer_batch``: SQUARED Chamfer distance of batched clouds (the autoencoder's loss and the
  metric of ``evaluate.py``);
* ``encode_parts``, ``latent_stats``, ``collate``: part latents, their standardisation and padded
  shape batches for the flow model;
* ``draw_flow_noise``, ``flow_errors``, ``flow_matching_loss``: the rectified-flow objective.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from generation3d.data import PartDataset
from generation3d.geometry import box_to_param, to_canonical

NULL_PROB = 0.1  # probability of dropping the category / text condition in training (CFG)


def chamfer_batch(a: Tensor, b: Tensor, exact: bool = False) -> Tensor:
    """Squared Chamfer distance of batched clouds ``a (B,N,3)``, ``b (B,M,3)`` -> ``(B,)``:
    ``mean_a min_b ||a-b||^2 + mean_b min_a ||a-b||^2``. ``exact`` computes differences directly
    (metrics) instead of the faster matmul expansion (training)."""
    mode = "donot_use_mm_for_euclid_dist" if exact else "use_mm_for_euclid_dist_if_necessary"
    d = torch.cdist(a, b, compute_mode=mode).pow(2)
    return d.min(2).values.mean(1) + d.min(1).values.mean(1)


@torch.no_grad()
def encode_parts(ae, ds: PartDataset, batch_size: int = 512, mirror: bool = False) -> Tensor:
    """Latents of every part in the dataset: ``(N_parts, T, d_z)`` on the CPU (encoded where ``ae`` is);
    ``mirror``: of the parts reflected in the box frame's x (``augment.MIRROR_AXIS``)."""
    pts = torch.from_numpy(to_canonical(ds.points, ds.boxes)).float()
    if mirror:
        pts[..., 0] = -pts[..., 0]
    dev = next(ae.parameters()).device
    return torch.cat([ae.encode(pts[i : i + batch_size].to(dev)).cpu() for i in range(0, len(pts), batch_size)])


def latent_stats(ds: PartDataset, latents: Tensor) -> dict:
    """Per-channel mean / std of the training parts' latents ``(d_z,)`` and box parameters
    ``(6,)`` (centre, log size)."""
    idx = torch.from_numpy(ds.part_indices("train"))
    z, box = latents[idx], box_to_param(torch.from_numpy(ds.boxes[idx.numpy()]))
    return {
        "z_mean": z.mean((0, 1)), "z_std": z.std((0, 1)).clamp(min=1e-4),
        "box_mean": box.mean(0), "box_std": box.std(0).clamp(min=1e-4),
    }


def collate(ds: PartDataset, latents: Tensor, ids, stats: dict, text: Tensor | None = None,
            replaced: dict | None = None) -> dict:
    """Pad shapes to the largest P in the batch: z (B,P,T,dz), box (B,P,6) as standardised
    ``box_to_param`` (centre, log size), valid (B,P), category (B,), n_parts (B,); ``text (B,
    d_text)`` rows of the per-shape embeddings ``text (S, d_text)`` when given. ``replaced``: batch
    position -> ``(latents (P,T,dz), boxes (P,6))`` used instead of that shape's own (augmentation)."""
    p_max = max(ds.n_parts(i) for i in ids)
    t, dz = latents.shape[1:]
    z = torch.zeros(len(ids), p_max, t, dz)
    box = torch.zeros(len(ids), p_max, 6)
    valid = torch.zeros(len(ids), p_max, dtype=torch.bool)
    for j, i in enumerate(ids):
        a, b = ds.offsets[i], ds.offsets[i + 1]
        z_i, box_i = replaced[j] if replaced and j in replaced else (latents[a:b], ds.boxes[a:b])
        z[j, : b - a] = (z_i - stats["z_mean"]) / stats["z_std"]
        box[j, : b - a] = (box_to_param(torch.from_numpy(box_i)) - stats["box_mean"]) / stats["box_std"]
        valid[j, : b - a] = True
    return {
        "z": z, "box": box, "valid": valid, "category": torch.from_numpy(np.asarray(ds.category[ids])).long(),
        "n_parts": valid.sum(1), "text": None if text is None else text[torch.as_tensor(ids)],
    }


def flow_errors(
    model, batch: dict, s: Tensor, ez: Tensor, eb: Tensor, cat: Tensor, text_keep: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-part squared velocity errors ``(B, P)`` of latents and boxes at noise levels ``s (B,)``
    with noise ``ez, eb``: ``x_s = (1 - s) x_0 + s eps`` and target ``eps - x_0`` (rectified flow)."""
    z0, box0 = batch["z"], batch["box"]
    zs = (1 - s[:, None, None, None]) * z0 + s[:, None, None, None] * ez
    bs = (1 - s[:, None, None]) * box0 + s[:, None, None] * eb
    vz, vb = model(zs, bs, s * 1000, cat, batch["n_parts"], batch["valid"], batch.get("text"), text_keep)
    return ((vz - (ez - z0)) ** 2).mean((2, 3)), ((vb - (eb - box0)) ** 2).mean(2)


def draw_flow_noise(batch: dict, gen: torch.Generator, null_prob: float = NULL_PROB) -> dict:
    """The random draws of one training step, in this order from ``gen``: noise level
    ``s = sigmoid(N(0, 1)) (B,)`` (logit-normal, as in SD3), noise ``ez`` like ``z``, ``eb`` like
    ``box``, ``drop (B,)`` (category -> null class with probability ``null_prob``) and
    ``text_keep (B,)`` (text kept with probability ``1 - null_prob``)."""
    b = batch["z"].shape[0]
    s = torch.sigmoid(torch.randn(b, generator=gen))
    ez, eb = torch.randn(batch["z"].shape, generator=gen), torch.randn(batch["box"].shape, generator=gen)
    drop = torch.rand(b, generator=gen) < null_prob
    text_keep = torch.rand(b, generator=gen) >= null_prob
    return {"s": s, "ez": ez, "eb": eb, "drop": drop, "text_keep": text_keep}


def flow_matching_loss(model, batch: dict, noise: dict) -> Tensor:
    """Rectified-flow loss ``|| v_theta(x_s, s) - (eps - x_0) ||^2`` (mean over latent channels /
    box channels, summed, then mean over valid parts) with the draws ``noise`` of
    :func:`draw_flow_noise`; dropped categories become the null class ``n_categories``."""
    cat = batch["category"].clone()
    cat[noise["drop"]] = model.config.n_categories
    err_z, err_b = flow_errors(model, batch, noise["s"], noise["ez"], noise["eb"], cat, noise["text_keep"])
    m = batch["valid"].float()
    return ((err_z + err_b) * m).sum() / m.sum()
