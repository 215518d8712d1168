"""One image reader for every app: whatever a user's file holds, an 8-bit RGB or grayscale image, or
one ``error:`` line naming the file.

    img = read_image("shoe.tif")                      # PIL.Image, mode "RGB"
    arr = read_image_array(path, mode="L")            # np.uint8 (H, W)

The rules, applied in this order:

- the file must be an image PIL can identify (else ``not an image``); its header size must be at most
  ``max_pixels`` (default 64 megapixels) before any pixel is decoded, so a decompression bomb is
  refused cheaply; a truncated file is refused when its pixels are read;
- the first frame of an animated or multi-page file; EXIF orientation applied;
- 16-bit integer images (``I;16*``) are scaled by 255 / 65535; 32-bit integer images (``I``) by
  255 / 65535 too when their values fit 16 bits (PNG and TIFF store 16-bit data this way), else
  min-max scaled to 0..255;
- float images (``F``): values in [0, 1] are scaled by 255, any other finite range is min-max scaled
  to 0..255; NaN or infinite pixels are refused;
- transparency (``RGBA``, ``LA``, ``PA``, a palette or grayscale image with a transparent colour) is
  composited on white (what a product photo or an icon shows on a page);
- palette, bilevel, CMYK, YCbCr, LAB and HSV images are converted by PIL's standard conversion;
- finally the image is converted to ``mode`` (``RGB`` or ``L``; ``L`` uses ITU-R 601-2 luma).
"""

from __future__ import annotations

import atexit
import hashlib
import io
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np

from common.errors import InputError

MAX_PIXELS = 64_000_000
MODES = ("RGB", "L")
ImageSource = str | os.PathLike | bytes


class ImageError(InputError):
    """An image file that cannot be read as an image (missing, not an image, truncated, too large)."""


def _name(source: ImageSource, what: str | None) -> str:
    if what:
        return what
    return "image bytes" if isinstance(source, bytes) else str(source)


def _scale_to_uint8(arr: np.ndarray, name: str, *, sixteen_bit: bool) -> np.ndarray:
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ImageError(f"{name} has NaN or infinite pixel values")
    lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if sixteen_bit and lo >= 0 and hi <= 65535:
        out = arr * (255.0 / 65535.0)
    elif not sixteen_bit and lo >= 0 and hi <= 1.0:
        out = arr * 255.0
    elif hi > lo:
        out = (arr - lo) * (255.0 / (hi - lo))
    else:
        out = np.zeros_like(arr)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def read_image(source: ImageSource, mode: str = "RGB", *, what: str | None = None,
               max_pixels: int = MAX_PIXELS):
    """The image in ``source`` (a path or the file's bytes) as a PIL image of ``mode`` (``RGB`` or
    ``L``) by the rules of the module docstring; :class:`ImageError` otherwise. ``what`` names the
    image in messages (default: the path)."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    name = _name(source, what)
    if not isinstance(source, bytes):
        path = Path(source)
        if not path.is_file():
            raise ImageError(f"{name}: no such image file")
    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(handle) as im:
                width, height = im.size
                if width * height > max_pixels:
                    raise ImageError(f"{name} is {width}x{height} = {width * height:,} pixels, over the limit of "
                                     f"{max_pixels:,} (a decompression bomb, or an image to downscale first)")
                im.seek(0)
                im = ImageOps.exif_transpose(im) or im
                im.load()
                img = im.copy()
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"{name} is too large to decode ({exc})") from None
    except UnidentifiedImageError:
        raise ImageError(f"{name} is not an image PIL can read") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        what_went_wrong = "truncated" if "truncated" in str(exc).lower() else f"unreadable ({exc})"
        raise ImageError(f"{name} is {what_went_wrong}") from None
    return _convert(img, mode, name)


def _convert(img, mode: str, name: str):
    from PIL import Image

    if img.mode.startswith("I;16") or img.mode == "I":
        arr = np.asarray(img)
        sixteen = img.mode.startswith("I;16") or (arr.size == 0 or (arr.min() >= 0 and arr.max() <= 65535))
        img = Image.fromarray(_scale_to_uint8(arr, name, sixteen_bit=sixteen), mode="L")
    elif img.mode == "F":
        img = Image.fromarray(_scale_to_uint8(np.asarray(img), name, sixteen_bit=False), mode="L")
    if img.mode == "P" or (img.mode in ("L", "RGB") and "transparency" in img.info):
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba).convert("RGB")
    if img.mode != mode:
        img = img.convert("RGB").convert(mode) if img.mode not in ("RGB", "L") else img.convert(mode)
    return img


def read_image_array(source: ImageSource, mode: str = "RGB", *, what: str | None = None,
                     max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """:func:`read_image` as ``np.uint8``: ``(H, W, 3)`` for ``RGB``, ``(H, W)`` for ``L``."""
    return np.asarray(read_image(source, mode, what=what, max_pixels=max_pixels), dtype=np.uint8)


# ----------------------------------------------------------------------------- images a web page serves

MAX_SERVED = 512  # the oldest half of the served images is removed when the folder holds more
_SERVED_DIR: list[Path] = []
_SERVED_LOCK = threading.Lock()


def _served_dir() -> Path:
    """This process's folder of served images, in the system temp dir (Gradio serves files from
    there), created on first use and removed at exit."""
    with _SERVED_LOCK:
        if not _SERVED_DIR:
            folder = Path(tempfile.mkdtemp(prefix="moe-apps-served-"))
            atexit.register(shutil.rmtree, folder, True)
            _SERVED_DIR.append(folder)
        return _SERVED_DIR[0]


def served_png(image) -> str:
    """``image`` (a PIL image or a ``uint8`` array ``(H, W)`` / ``(H, W, 3|4)``) as
    ``<process folder>/<sha256>.png``, written atomically the first time and never rewritten: a hub
    tab returns this path instead of the array, so that a file is never replaced while it is served
    (Gradio names the files of returned arrays by their content and rewrites them in place, and two
    identical concurrent requests then cut each other's downloads short)."""
    from PIL import Image

    from common.io import atomic_write

    if not hasattr(image, "save"):
        arr = np.asarray(image)
        if arr.dtype != np.uint8:
            raise ValueError(f"served_png needs uint8 pixels, got {arr.dtype}")
        image = Image.fromarray(arr.squeeze(-1) if arr.ndim == 3 and arr.shape[-1] == 1 else arr)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    data = buf.getvalue()
    folder = _served_dir()
    path = folder / f"{hashlib.sha256(data).hexdigest()}.png"
    with _SERVED_LOCK:
        if path.is_file():
            os.utime(path)
            return str(path)
        with atomic_write(path, "wb") as fh:
            fh.write(data)
        files = sorted(folder.glob("*.png"), key=lambda f: f.stat().st_mtime if f.exists() else 0.0)
        if len(files) > MAX_SERVED:
            for f in files[: len(files) // 2]:
                f.unlink(missing_ok=True)
    return str(path)
