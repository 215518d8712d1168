"""Augmentation of whole training shapes for the generator (``moca train --augment``).

A furniture set of a few hundred shapes gives a generator few layouts per category and part count.
``ShapeAugmenter`` draws, for a training shape, a variant in the generator's own terms (part
latents and boxes, so nothing is re-meshed or re-encoded per step):

* **mirror** (probability 1/2): reflected in x (a horizontal axis of the Sweet Home 3D frames,
  where z is up): box centres ``x -> -x`` and each part's latent replaced by the latent of its
  reflected points (``losses.encode_parts(..., mirror=True)``, encoded once);
* **per-axis scale**: centres and sizes times a factor per axis, log-uniform in
  ``[1 / SCALE_MAX, SCALE_MAX]``, then normalised again like the data (``data.Shape.normalise``:
  bounding box centred, largest half-extent 1). Box-frame latents do not change with the box;
* **component swaps**: each part, with probability ``SWAP_PROB``, takes the latent of a part of
  another training shape of the same category, drawn among the ``SWAP_NEAREST`` whose box sizes are
  nearest in log space (the part keeps its box). Sweet Home 3D's group names are the modellers'
  object names ("Cube.001"), not roles, so the box stands in for the label.

Each shape of a batch is augmented with probability ``AUGMENT_PROB``; the draws come from the
generator passed in (``train.ShapeBatches`` seeds its own), so a run repeats bit for bit.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from generation3d.data import PartDataset, unit_frame

AUGMENT_PROB = 0.5
SCALE_MAX = 1.25
SWAP_PROB = 0.25
SWAP_NEAREST = 3
MIRROR_AXIS = 0


class ShapeAugmenter:
    """Variants of the training shapes ``ids`` of ``ds`` (module docstring). ``latents`` and
    ``mirrored``: ``(N_parts, T, d_z)`` latents of every part of ``ds`` and of its reflection."""

    def __init__(self, ds: PartDataset, ids: np.ndarray, latents: Tensor, mirrored: Tensor) -> None:
        self.ds, self.latents, self.mirrored = ds, latents, mirrored
        self.pool: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # category -> parts, owners, log sizes
        for c in np.unique(ds.category[ids]):
            owners = [i for i in ids if ds.category[i] == c]
            parts = np.concatenate([np.arange(ds.offsets[i], ds.offsets[i + 1]) for i in owners])
            shape_of = np.concatenate([np.full(ds.n_parts(i), i) for i in owners])
            self.pool[int(c)] = (parts, shape_of, _log_size(ds.boxes[parts]))

    def __call__(self, i: int, rng: np.random.Generator) -> tuple[Tensor, np.ndarray]:
        """A variant of shape ``i``: ``(latents (P, T, d_z), boxes (P, 6))``."""
        a, b = int(self.ds.offsets[i]), int(self.ds.offsets[i + 1])
        boxes = self.ds.boxes[a:b].astype(np.float64)
        mirror = rng.random() < 0.5
        source = self.mirrored if mirror else self.latents
        if mirror:
            boxes[:, MIRROR_AXIS] = -boxes[:, MIRROR_AXIS]
        boxes = _normalised(boxes * np.tile(np.exp(rng.uniform(-np.log(SCALE_MAX), np.log(SCALE_MAX), 3)), 2))
        z = source[a:b].clone()
        parts, shape_of, log_size = self.pool[int(self.ds.category[i])]
        others = shape_of != i
        own_size = _log_size(self.ds.boxes[a:b])
        for p in np.nonzero(rng.random(b - a) < SWAP_PROB)[0]:
            if not others.any():
                break
            d = np.abs(log_size[others] - own_size[p]).sum(1)
            near = np.argsort(d, kind="stable")[:SWAP_NEAREST]
            z[p] = source[parts[others][near[rng.integers(len(near))]]]
        return z, boxes.astype(self.ds.boxes.dtype)


def _log_size(boxes: np.ndarray) -> np.ndarray:
    """Log box sizes ``(P, 3)`` of boxes ``(P, 6)`` (sizes floored at 1e-3), the swaps' distance space."""
    return np.log(np.maximum(boxes[:, 3:], 1e-3))


def _normalised(boxes: np.ndarray) -> np.ndarray:
    """Boxes ``(P, 6)`` moved and scaled so their bounding box is centred with largest half-extent 1."""
    centre, half = unit_frame((boxes[:, :3] - boxes[:, 3:] / 2).min(0), (boxes[:, :3] + boxes[:, 3:] / 2).max(0))
    return np.concatenate([(boxes[:, :3] - centre) / half, boxes[:, 3:] / half], 1)
