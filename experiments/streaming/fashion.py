"""Fashion-MNIST as a stream on a union of class subspaces (the real-image rows of ``mosaic bench``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.errors import InputError
from streaming.data import Stream


def fashion_mnist_stream(
    classes: tuple[int, ...] = (0, 1, 5, 7, 8),
    side: int = 14,
    obs_frac: float = 0.4,
    samples_per_epoch: int = 1000,
    epochs: int = 3,
    source_per_class: int = 300,
    seed: int = 0,
    folder: Path | None = None,
) -> Stream:
    """Fashion-MNIST images (downsampled to ``side × side``, pixels in [0, 1]) as a stream.

    Pretraining source: ``source_per_class`` training images per class, uniform mix. Stream
    (test images): epoch 0 uniform class mix; epoch 1 a skewed mix (half the samples from the
    first two classes); epoch 2 a change of appearance (images shifted right by one pixel and
    contrast-reduced to 0.7). ``labels`` are indices into ``classes``. ``n = side²``.
    """
    from common.data_dir import load_fashion_mnist

    if side not in (7, 14, 28):
        raise InputError(f"side must be 7, 14 or 28, got {side}")
    rng = np.random.default_rng(seed)
    tr_x, tr_y = load_fashion_mnist("train", folder)
    te_x, te_y = load_fashion_mnist("test", folder)
    f = 28 // side

    def prep(img: np.ndarray) -> np.ndarray:
        return img.astype(np.float64).reshape(-1, side, f, side, f).mean((2, 4)).reshape(len(img), -1) / 255.0

    def pick(x, y, counts):
        idx = np.concatenate([rng.choice(np.flatnonzero(y == c), size=k, replace=False) for c, k in zip(classes, counts, strict=True)])
        lab = np.concatenate([np.full(k, i) for i, k in enumerate(counts)])
        order = rng.permutation(idx.size)
        return x[idx[order]], lab[order]

    def mask(full):
        observed = rng.random(full.shape) < obs_frac
        observed[~observed.any(1), 0] = True
        return np.where(observed, full, np.nan)

    C = len(classes)
    sx, sl = pick(tr_x, tr_y, [source_per_class] * C)
    src = prep(sx)
    mixes = [np.full(C, 1.0 / C), np.r_[np.full(2, 0.25), np.full(C - 2, 0.5 / (C - 2))], np.full(C, 1.0 / C)]
    vals, fulls, labs, eps = [], [], [], []
    for e in range(epochs):
        counts = np.round(mixes[min(e, 2)] * samples_per_epoch).astype(int)
        ex, el = pick(te_x, te_y, counts)
        if e >= 2:
            ex = (np.roll(ex, 1, axis=2) * 0.7).astype(np.float64)
        full = prep(ex)
        vals.append(mask(full)), fulls.append(full), labs.append(el), eps.append(np.full(el.shape, e))
    return Stream(
        values=np.concatenate(vals),
        labels=np.concatenate(labs),
        epoch=np.concatenate(eps),
        full=np.concatenate(fulls),
        source_values=mask(src),
        source_labels=sl,
    )
