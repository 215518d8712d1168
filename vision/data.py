"""Image data for the diffusion backbones: Fashion-MNIST (padded to 32x32), the Sweet Home 3D
furniture icons and ImageFolder.

All loaders return ``images (N, c, size, size) float32`` scaled to ``[-1, 1]``.

Sweet Home 3D (``--data sweethome3d``): the 128x128 RGB catalogue renders of Debian's
``sweethome3d-furniture`` (820 items, CC0 / CC-BY 3.0), read in place through
``common.sweethome3d``: transparent pixels on white, centre-cropped to a square and resized to
``size`` (bicubic). The split is by item: the catalogue (sorted by ``item_id``) is shuffled with
``split_seed`` and the first ``SWEETHOME3D_TEST_FRACTION`` of the items form the test split, the
rest the training split; ``sweethome3d_items(split, split_seed)`` lists them (for the attribution
CSV that must ship beside anything trained on them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from common.data_dir import load_fashion_mnist
from common.errors import DataError, InputError
from vision.limits import check_memory, images_bytes

SWEETHOME3D = "sweethome3d"
SWEETHOME3D_TEST_FRACTION = 0.2
FASHION_MNIST_NAMES = (None, "", "fashion-mnist", "fmnist")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def to_unit_range(images_uint8: np.ndarray | Tensor) -> Tensor:
    """uint8 ``[0, 255]`` -> float32 ``[-1, 1]``."""
    return torch.tensor(np.asarray(images_uint8), dtype=torch.float32) / 127.5 - 1.0


def fashion_mnist_images(
    split: str = "train", size: int = 32, limit: int | None = None, folder: Path | None = None,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Fashion-MNIST as ``images (N, 1, size, size)`` in ``[-1, 1]`` and ``labels (N,)``.

    The 28x28 digits are zero-padded (background) to ``size`` (>= 28, even padding) so that
    patch sizes 2/4 and three pooling levels divide the grid. ``limit`` takes a seeded random
    subset.
    """
    if size < 28 or (size - 28) % 2:
        raise InputError(f"Fashion-MNIST size must be 28 + an even padding, got {size}")
    images, labels = load_fashion_mnist(split, folder=folder)
    if limit is not None and limit < len(images):
        idx = np.random.default_rng(seed).permutation(len(images))[:limit]
        images, labels = images[idx], labels[idx]
    check_memory(f"{len(images):,} Fashion-MNIST images at {size}x{size}", images_bytes(len(images), 1, size))
    x = to_unit_range(images)[:, None]
    pad = (size - 28) // 2
    if pad:
        x = F.pad(x, (pad, pad, pad, pad), value=-1.0)
    return x, torch.as_tensor(labels)


def _square_resize(im, size: int, channels: int) -> np.ndarray:
    """A PIL image centre-cropped to a square, resized to ``size`` (bicubic) -> ``(size, size,
    channels)`` uint8 (1 = grayscale, 3 = RGB)."""
    from PIL import Image

    im = im.convert("L" if channels == 1 else "RGB")
    w, h = im.size
    s = min(w, h)
    im = im.crop(((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s))
    return np.asarray(im.resize((size, size), Image.BICUBIC)).reshape(size, size, channels)


def sweethome3d_items(split: str = "train", split_seed: int = 0, folder: str | Path | None = None) -> list:
    """The ``common.sweethome3d.FurnitureItem`` s of ``split`` ("train" or "test"; see the module
    docstring for the seeded split by item). DataError when the catalogue is not installed."""
    from common.sweethome3d import load_catalog

    if split not in ("train", "test"):
        raise InputError(f"split must be 'train' or 'test', got {split!r}")
    items = sorted(load_catalog(folder), key=lambda it: it.item_id)
    order = np.random.default_rng(split_seed).permutation(len(items))
    n_test = max(1, round(SWEETHOME3D_TEST_FRACTION * len(items))) if len(items) > 1 else 0
    chosen = order[:n_test] if split == "test" else order[n_test:]
    return [items[i] for i in sorted(chosen)]


def sweethome3d_images(split: str = "train", size: int = 32, channels: int = 3, limit: int | None = None,
                       split_seed: int = 0, folder: str | Path | None = None) -> Tensor:
    """The icons of ``split`` as ``(N, channels, size, size)`` in [-1, 1] (``limit``: the first
    ``limit`` items of the split, in catalogue order)."""
    from common.sweethome3d import read_icon

    if channels not in (1, 3):
        raise InputError(f"channels must be 1 or 3, got {channels}")
    if size < 4:
        raise InputError(f"image size must be >= 4, got {size}")
    items = sweethome3d_items(split, split_seed, folder)[:limit]
    if not items:
        raise DataError(f"the Sweet Home 3D {split} split is empty")
    check_memory(f"{len(items):,} Sweet Home 3D icons at {channels}x{size}x{size}",
                 images_bytes(len(items), channels, size))
    out = np.stack([_square_resize(read_icon(it), size, channels) for it in items])
    return to_unit_range(out).permute(0, 3, 1, 2).contiguous()


def load_image_folder(
    path: str | Path, size: int, channels: int = 3, limit: int | None = None
) -> Tensor:
    """Every image under ``path`` (recursively, sorted), read by ``common.images.read_image``
    (16-bit and float images scaled, transparency on white, bombs and truncated files refused),
    centre-cropped to a square, resized to ``size`` and converted to ``channels`` (1 = grayscale,
    3 = RGB). Returns ``(N, c, size, size)`` in ``[-1, 1]``. Raises DataError for a missing/empty
    folder or an unreadable image (naming the file)."""
    from common.images import ImageError, read_image

    if channels not in (1, 3):
        raise InputError(f"channels must be 1 or 3, got {channels}")
    if size < 4:
        raise InputError(f"image size must be >= 4, got {size}")
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"image folder does not exist: {root}")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise DataError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {root}")
    files = files[:limit] if limit else files
    check_memory(f"{len(files):,} images of {root} at {channels}x{size}x{size}",
                 images_bytes(len(files), channels, size, copies=2))
    out = np.empty((len(files), size, size, channels), dtype=np.uint8)
    for i, f in enumerate(files):
        try:
            im = read_image(f, "L" if channels == 1 else "RGB")
        except ImageError as exc:
            raise DataError(f"cannot read image: {exc}") from None
        out[i] = _square_resize(im, size, channels)
    return to_unit_range(out).permute(0, 3, 1, 2).contiguous()


def check_images(images: Tensor, channels: int, size: int, name: str = "images") -> Tensor:
    """Validate a training/eval batch at the boundary: ``(N, channels, size, size)``, finite,
    in ``[-1, 1]`` (InputError otherwise)."""
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise InputError(f"{name} must be a tensor (N, c, H, W), got {getattr(images, 'shape', type(images))}")
    if images.shape[0] == 0:
        raise InputError(f"{name} is empty")
    if images.shape[1] != channels:
        raise InputError(f"{name} have {images.shape[1]} channels, the model expects {channels}")
    if tuple(images.shape[2:]) != (size, size):
        raise InputError(f"{name} are {tuple(images.shape[2:])}, the model expects ({size}, {size})")
    if not torch.isfinite(images).all():
        raise InputError(f"{name} contain NaN or inf")
    if images.min() < -1.0001 or images.max() > 1.0001:
        raise InputError(f"{name} must be scaled to [-1, 1], got range [{images.min():.3g}, {images.max():.3g}]")
    return images


def load_dataset(spec: str | None, size: int, channels: int, limit: int | None = None, split: str = "train",
                 seed: int = 0) -> Tensor:
    """``spec`` None / ``"fashion-mnist"`` -> Fashion-MNIST split (``seed``: the subset drawn by
    ``limit``); ``"sweethome3d"`` -> the icons of ``split`` (``seed``: the split seed); otherwise
    an image folder (all of it, whatever ``split``)."""
    if spec in FASHION_MNIST_NAMES:
        if channels != 1:
            raise InputError(f"Fashion-MNIST is grayscale (1 channel), the model expects {channels}")
        return fashion_mnist_images(split, size=size, limit=limit, seed=seed)[0]
    if spec == SWEETHOME3D:
        return sweethome3d_images(split, size, channels, limit, split_seed=seed)
    return load_image_folder(spec, size, channels, limit)


def data_spec(spec: str | None, size: int, channels: int, seed: int = 0) -> dict:
    """What a checkpoint remembers of its training data so that ``eval`` can default to it:
    ``{"source": "fashion-mnist" | "sweethome3d" | absolute folder, "size", "channels", "seed"}``
    (``seed``: the Sweet Home 3D split seed / the Fashion-MNIST subset seed)."""
    if spec in FASHION_MNIST_NAMES:
        source = "fashion-mnist"
    elif spec == SWEETHOME3D:
        source = SWEETHOME3D
    else:
        source = str(Path(spec).expanduser().resolve())
    return {"source": source, "size": int(size), "channels": int(channels), "seed": int(seed)}
