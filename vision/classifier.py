"""The feature classifier of the FMNIST-classifier FID (``vision.evaluate.classifier_metrics``):
a small CNN trained here on Fashion-MNIST on the suite's Lightning engine and cached, so that the
metric needs no downloaded weights."""

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
from common.pretrained import PretrainedMixin, checkpoint_info, register_model

CLASSIFIER_VERSION = "fmnist_classifier_v3"


@register_model("fmnist_classifier")
class FMNISTClassifier(PretrainedMixin, nn.Module):
    """Small CNN on ``(b, 1, 32, 32)`` images in [-1, 1]: three conv-BN-ReLU stages (16/32/64
    channels, 2x2 pooling) and global average pooling give ``features (b, 64)``; a linear head
    gives ``logits (b, 10)``."""

    def __init__(self) -> None:
        super().__init__()
        layers, c_in = [], 1
        for c in (16, 32, 64):
            layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(64, 10)

    def features(self, x: Tensor) -> Tensor:
        return self.body(x).mean(dim=(2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    @classmethod
    def upgrade_config(cls, config: dict, from_version: int) -> dict:
        if from_version == 0 and config.get("arch") == "FMNISTClassifier":  # common.checkpoint layout
            return {}
        return super().upgrade_config(config, from_version)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(), (torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1,)


class ClassifierModule(L.LightningModule):
    """Cross-entropy training of an ``FMNISTClassifier`` with Adam: batches ``(x (b, 1, 32, 32),
    y (b,))``."""

    def __init__(self, model: FMNISTClassifier, lr: float) -> None:
        super().__init__()
        self.model, self.lr = model, lr

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.lr)


def train_classifier(images: Tensor, labels: Tensor, epochs: int = 2, batch_size: int = 64, seed: int = 0,
                     lr: float = 2e-3) -> FMNISTClassifier:
    """Fit the feature classifier on ``images (N, 1, 32, 32)``, ``labels (N,)`` (seeded shuffles)."""
    trainer = make_trainer(None, max_epochs=epochs, seed=seed, progress=False)
    model = FMNISTClassifier()  # initialised after seeding
    trainer.fit(ClassifierModule(model, lr), shuffled_loader(TensorDataset(images, labels), batch_size, seed))
    return model.eval()


@torch.no_grad()
def accuracy(model: FMNISTClassifier, images: Tensor, labels: Tensor) -> float:
    preds = torch.cat([model(images[i:i + 512]).argmax(1) for i in range(0, len(images), 512)])
    return float((preds == labels).float().mean())


def get_classifier(cache: Path | None = None, train_limit: int = 12000, seed: int = 0) -> tuple[FMNISTClassifier, dict]:
    """The cached feature classifier (trained on ``train_limit`` Fashion-MNIST training images
    on first use, test accuracy recorded). Returns ``(model, info)``."""
    from vision.data import fashion_mnist_images

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
