"""The Fashion-MNIST classifier behind the FMNIST-classifier FID, precision / recall
(``vision.evaluate.classifier_metrics``) and the recognisability of samples
(``vision.evaluate.recognisability``): a small CNN trained here on the 60k Fashion-MNIST training
images on the suite's Lightning engine. It ships with the project as ``fmnist-classifier``
(``vision/weights/``, made by ``python scripts/ship_vision.py classifier``), so the metric needs no
download and no training; without the shipped weights it is trained once and cached."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from common.data_dir import cache_dir
from common.engine import make_trainer, shuffled_loader
from common.errors import CheckpointError, InputError
from common.pretrained import PretrainedMixin, checkpoint_info, register_model, register_to_config

CLASSIFIER_VERSION = "fmnist_classifier_v4"
SHIPPED_NAME = "fmnist-classifier"
EPOCHS = 6


@register_model("fmnist_classifier")
class FMNISTClassifier(PretrainedMixin, nn.Module):
    """Small CNN on ``(b, 1, 32, 32)`` images in [-1, 1]: three conv-BN-ReLU stages (``channels``,
    default 32/64/128, 2x2 pooling) and global average pooling give ``features (b, channels[-1])``;
    dropout and a linear head give ``logits (b, 10)``."""

    @register_to_config
    def __init__(self, channels: tuple[int, ...] = (32, 64, 128), dropout: float = 0.2) -> None:
        super().__init__()
        layers, c_in = [], 1
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        self.body = nn.Sequential(*layers)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(c_in, 10)

    def features(self, x: Tensor) -> Tensor:
        return self.body(x).mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.features(x)))

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(channels=(4, 8, 8)), (torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1,)


class ClassifierModule(L.LightningModule):
    """Cross-entropy training of an ``FMNISTClassifier`` with AdamW and a one-cycle learning rate over
    ``total_steps``: batches ``(x (b, 1, 32, 32), y (b,))``, each image mirrored left-right with
    probability 1/2 (garments are symmetric enough; the seeded global RNG draws the flips)."""

    def __init__(self, model: FMNISTClassifier, lr: float, total_steps: int) -> None:
        super().__init__()
        self.model, self.lr, self.total_steps = model, lr, total_steps

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        flip = torch.rand(x.shape[0], device=x.device) < 0.5
        x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=self.total_steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def train_classifier(images: Tensor, labels: Tensor, epochs: int = EPOCHS, batch_size: int = 128, seed: int = 0,
                     lr: float = 4e-3, progress: bool = False) -> FMNISTClassifier:
    """Fit the classifier on ``images (N, 1, 32, 32)``, ``labels (N,)`` (seeded shuffles)."""
    trainer = make_trainer(None, max_epochs=epochs, seed=seed, progress=progress)
    model = FMNISTClassifier()  # initialised after seeding
    loader = shuffled_loader(TensorDataset(images, labels), batch_size, seed)
    trainer.fit(ClassifierModule(model, lr, total_steps=epochs * len(loader)), loader)
    return model.eval()


@torch.no_grad()
def accuracy(model: FMNISTClassifier, images: Tensor, labels: Tensor) -> float:
    preds = torch.cat([model(images[i:i + 512]).argmax(1) for i in range(0, len(images), 512)])
    return float((preds == labels).float().mean())


def get_classifier(cache: Path | None = None, train_limit: int | None = None,
                   seed: int = 0) -> tuple[FMNISTClassifier, dict]:
    """The shipped classifier (``fmnist-classifier``, its manifest's metrics as ``info``); without
    it, or with ``cache``, the one cached there (trained on ``train_limit`` Fashion-MNIST training
    images, all by default, on first use, test accuracy recorded). Returns ``(model, info)``."""
    from common.shipped import read_manifest, shipped_models
    from vision.data import fashion_mnist_images

    if cache is None and SHIPPED_NAME in shipped_models():
        model = FMNISTClassifier.from_pretrained(SHIPPED_NAME).eval()
        return model, dict(read_manifest(shipped_models()[SHIPPED_NAME])["metrics"])
    path = Path(cache) if cache else cache_dir("vision") / CLASSIFIER_VERSION
    if (path / "config.json").is_file():
        try:
            return FMNISTClassifier.from_pretrained(path), checkpoint_info(path).extra
        except CheckpointError:
            pass  # a damaged cache is rebuilt below
    x, y = fashion_mnist_images("train", limit=train_limit, seed=seed)
    model = train_classifier(x, y, seed=seed)
    xt, yt = fashion_mnist_images("test")
    info = {"test_accuracy": accuracy(model, xt, yt), "train_images": int(x.shape[0]), "seed": seed}
    model.save_pretrained(path, info)
    return model, info


@torch.no_grad()
def classifier_features(model: FMNISTClassifier, images: Tensor) -> np.ndarray:
    """``images (N, 1, 32, 32)`` in [-1, 1] -> ``(N, 64)`` float64 features."""
    if images.dim() != 4 or images.shape[1:] != (1, 32, 32):
        raise InputError(f"FMNIST-classifier features need (N, 1, 32, 32) images, got {tuple(images.shape)}")
    model.eval()
    return torch.cat([model.features(images[i:i + 512]) for i in range(0, len(images), 512)]).double().detach().cpu().numpy()


@torch.no_grad()
def smoke_classify(model: FMNISTClassifier) -> Tensor:
    """Class probabilities ``(2, 10)`` of two random images (the shipped-weights test)."""
    x = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    return model.eval()(x).softmax(-1)
