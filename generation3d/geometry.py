"""Box-frame geometry of parts: world <-> box-frame points, the generator's box parameters
(centre, log size) and whole-shape point clouds."""

from __future__ import annotations

import math

import numpy as np
import torch

MIN_SIZE = 1e-3  # box sizes are clamped to this when normalising points into the box frame


def fourier(x: torch.Tensor, n_freq: int) -> torch.Tensor:
    """``x (..., c) -> (..., c * (2 * n_freq + 1))`` with ``[x, sin(2^f pi x), cos(2^f pi x)]``
    (points in the autoencoder, boxes in the generator and the attention's box encoding)."""
    freqs = (2.0 ** torch.arange(n_freq, device=x.device, dtype=x.dtype)) * math.pi
    ang = x.unsqueeze(-1) * freqs
    return torch.cat([x, ang.sin().flatten(-2), ang.cos().flatten(-2)], -1)


def to_canonical(points: np.ndarray | torch.Tensor, boxes):
    """World points ``(..., M, 3)`` -> box frame ``[-1, 1]^3`` given ``boxes (..., 6)``."""
    half = boxes[..., None, 3:] / 2
    half = half.clip(MIN_SIZE) if isinstance(half, np.ndarray) else half.clamp(min=MIN_SIZE)
    return (points - boxes[..., None, :3]) / half


def from_canonical(points, boxes):
    """Inverse of ``to_canonical``: ``(..., M, 3)`` box-frame points -> world coordinates."""
    half = boxes[..., None, 3:] / 2
    half = half.clip(MIN_SIZE) if isinstance(half, np.ndarray) else half.clamp(min=MIN_SIZE)
    return points * half + boxes[..., None, :3]


def box_to_param(boxes):
    """Boxes ``(..., 6)`` (centre, size) -> generator parameters ``(..., 6)`` (centre, log size).

    Sizes span two orders of magnitude (legs 0.01, shelf sides 2); in log space a small error
    on a thin part stays a small relative error instead of a negative size."""
    if isinstance(boxes, np.ndarray):
        return np.concatenate([boxes[..., :3], np.log(boxes[..., 3:].clip(MIN_SIZE))], -1)
    return torch.cat([boxes[..., :3], boxes[..., 3:].clamp(min=MIN_SIZE).log()], -1)


def param_to_box(params):
    """Inverse of ``box_to_param``: ``(..., 6)`` centre, log size -> centre, size."""
    if isinstance(params, np.ndarray):
        return np.concatenate([params[..., :3], np.exp(params[..., 3:])], -1)
    return torch.cat([params[..., :3], params[..., 3:].exp()], -1)

def shape_cloud(parts_points, n: int = 1024, seed: int = 0) -> np.ndarray:
    """Union of part clouds, subsampled to ``n`` points (area-agnostic, deterministic)."""
    pts = np.concatenate([np.asarray(p) for p in parts_points])
    rng = np.random.default_rng(seed)
    return pts[rng.choice(len(pts), size=min(n, len(pts)), replace=False)]
