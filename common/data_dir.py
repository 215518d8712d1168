"""Where data lives: resolution of the data directory, checksummed files, Fashion-MNIST."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from common.errors import DataError
from common.io import sha256_file

DATA_ENV = "MOE_APPS_DATA"
FASHION_MNIST_ENV = "MOE_APPS_FASHION_MNIST"
CACHE_ENV = "MOE_APPS_CACHE"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
FASHION_MNIST_DEFAULT = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


def resolve_data_dir(cli_value: str | os.PathLike | None = None) -> Path:
    """The data directory: ``cli_value`` > ``$MOE_APPS_DATA`` > ``../shared/data`` beside the
    project root (also tried beside the current directory). Raises DataError when none exists."""
    for source, value in (("--data-dir", cli_value), (DATA_ENV, os.environ.get(DATA_ENV))):
        if value:
            path = Path(value).expanduser()
            if not path.is_dir():
                raise DataError(f"data directory from {source} does not exist: {path}")
            return path
    for candidate in (PROJECT_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    raise DataError(
        f"no data directory: pass --data-dir or set {DATA_ENV} (default ../shared/data beside the project)"
    )


def require_file(data_dir: Path, relpath: str, sha256: str | None = None) -> Path:
    """``data_dir / relpath``, checked to exist and, when given, to match ``sha256``."""
    path = Path(data_dir) / relpath
    if not path.is_file():
        raise DataError(f"missing data file {relpath} in {data_dir}")
    if sha256 is not None:
        actual = sha256_file(path)
        if actual != sha256:
            raise DataError(
                f"checksum mismatch for {path}: expected sha256 {sha256[:12]}…, got {actual[:12]}…"
            )
    return path


def cache_root() -> Path:
    """The cache root of every app: ``$MOE_APPS_CACHE``, default ``~/.cache/moe-apps``."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "moe-apps"))


def cache_dir(app: str) -> Path:
    """Per-app cache directory (``$MOE_APPS_CACHE/<app>``, default ``~/.cache/moe-apps/<app>``)."""
    path = cache_root() / app
    path.mkdir(parents=True, exist_ok=True)
    return path


def fashion_mnist_dir() -> Path:
    """Fashion-MNIST folder: ``$MOE_APPS_FASHION_MNIST`` or Debian's ``dataset-fashion-mnist``."""
    path = Path(os.environ.get(FASHION_MNIST_ENV, FASHION_MNIST_DEFAULT))
    if not path.is_dir():
        raise DataError(
            f"Fashion-MNIST not found at {path}: `apt-get install dataset-fashion-mnist` "
            f"or set {FASHION_MNIST_ENV}"
        )
    return path


def _read_idx(path: Path, expected_dims: int) -> np.ndarray:
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] != expected_dims:
        raise DataError(f"{path} is not an idx uint8 file with {expected_dims} dims")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(expected_dims))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * expected_dims)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path} is truncated: header says {shape}, found {data.size} values")
    return data.reshape(shape)


def _find(folder: Path, stem: str) -> Path:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"missing Fashion-MNIST file {stem}(.gz) in {folder}")


def load_fashion_mnist(split: str = "train", folder: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``images uint8 (N, 28, 28)`` and ``labels int64 (N,)``; ``split`` is
    ``"train"`` (60k) or ``"test"`` (10k)."""
    if split not in ("train", "test"):
        raise DataError(f"Fashion-MNIST split must be 'train' or 'test', got {split!r}")
    folder = fashion_mnist_dir() if folder is None else Path(folder)
    prefix = "train" if split == "train" else "t10k"
    images = _read_idx(_find(folder, f"{prefix}-images-idx3-ubyte"), 3)
    labels = _read_idx(_find(folder, f"{prefix}-labels-idx1-ubyte"), 1).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"Fashion-MNIST {split}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels
