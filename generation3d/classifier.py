"""Category fidelity: a PointNet classifier of whole-shape point clouds, trained on a dataset's
training shapes (label = the shape's category, e.g. the furniture type), that labels generated
shapes; the fidelity of a set of generated shapes is the rate at which its label agrees with the
requested category (always reported beside the classifier's own accuracy on the test shapes).

Input: ``shape_cloud_fixed`` of a shape, ``N_POINTS`` points in the dataset's frame (z up,
centred, largest half-extent 1), the union of the part clouds subsampled uniformly over points
(each part contributes in proportion to its point count, as generated shapes do). Model
(Qi et al. 2017, without the T-nets): shared per-point MLP ``3 -> w -> 2w -> 4w``, max-pool over
points, MLP ``4w -> 2w -> n_classes``; logits over ``data.CATEGORIES``. Training (Lightning,
``common.engine``): Adam, cross entropy, seeded shuffles, each batch augmented by a random
anisotropic scale in [0.85, 1.15] per axis and Gaussian jitter (sigma 0.01); with validation
shapes the epoch with the lowest validation loss is kept (``best.ckpt``), early stopping after
``PATIENCE`` epochs without improvement.

``get_classifier(ds)`` caches the trained model under ``cache_dir("generation3d")/classifier/``
keyed by the SHA-1 of the dataset arrays and the training settings (like vision's FMNIST
classifier), so every evaluation of generators on one dataset uses the same classifier.
"""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from pathlib import Path

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from common.data_dir import cache_dir
from common.engine import BEST, CHECKPOINT_DIR, ctrl_c_interrupts, fit, make_trainer, shuffled_loader
from common.errors import CheckpointError, DataError
from common.pretrained import PretrainedMixin, checkpoint_info, register_model, register_to_config
from generation3d.data import CATEGORIES, PartDataset

CLASSIFIER_VERSION = 1  # bump when the model or its training changes (new cache key)
N_POINTS = 512
EPOCHS = 150
BATCH_SIZE = 32
LR = 2e-3
PATIENCE = 40


@register_model("shape_category_classifier")
class ShapeClassifier(PretrainedMixin, nn.Module):
    """PointNet (no T-nets): ``points (B, N, 3) -> logits (B, n_classes)``."""

    @register_to_config
    def __init__(self, n_classes: int = len(CATEGORIES), width: int = 64):
        super().__init__()
        w = width
        self.point_mlp = nn.Sequential(nn.Linear(3, w), nn.GELU(), nn.Linear(w, 2 * w), nn.GELU(),
                                       nn.Linear(2 * w, 4 * w))
        self.head = nn.Sequential(nn.GELU(), nn.Linear(4 * w, 2 * w), nn.GELU(), nn.Linear(2 * w, n_classes))

    def forward(self, points: Tensor) -> Tensor:
        return self.head(self.point_mlp(points).max(1).values)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(n_classes=3, width=4), (torch.randn(2, 10, 3, generator=torch.Generator().manual_seed(0)),)


def shape_cloud_fixed(parts_points, n: int = N_POINTS, seed: int = 0) -> np.ndarray:
    """``(n, 3)`` float32: the union of the part clouds ``[(M_i, 3), ...]``, subsampled without
    replacement (with replacement when it has fewer than ``n`` points), seeded."""
    pts = np.concatenate([np.asarray(p, dtype=np.float32).reshape(-1, 3) for p in parts_points])
    if len(pts) == 0:
        raise DataError("a shape without points cannot be classified")
    rng = np.random.default_rng(seed)
    return pts[rng.choice(len(pts), size=n, replace=len(pts) < n)]


def dataset_clouds(ds: PartDataset, ids: np.ndarray, n: int = N_POINTS, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Clouds ``(S, n, 3)`` and category labels ``(S,)`` of the shapes ``ids``."""
    clouds = [shape_cloud_fixed(ds.shape(int(i))[0], n, seed + int(i)) for i in ids]
    labels = ds.category[np.asarray(ids, dtype=np.int64)].astype(np.int64)
    return torch.from_numpy(np.stack(clouds)) if clouds else torch.zeros(0, n, 3), torch.from_numpy(labels)


class ClassifierModule(L.LightningModule):
    """Cross entropy of ``model`` on batches ``(points (b, N, 3), labels (b,))`` with Adam; the
    training batches are augmented (module docstring) with draws from a generator seeded ``seed``.
    Logs ``train_loss`` and, on validation batches, ``val_loss`` / ``val_acc``."""

    def __init__(self, model: ShapeClassifier, lr: float, seed: int) -> None:
        super().__init__()
        self.model, self.lr = model, lr
        self.gen = torch.Generator().manual_seed(seed)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        scale = 0.85 + 0.3 * torch.rand(x.shape[0], 1, 3, generator=self.gen)
        x = x * scale + 0.01 * torch.randn(x.shape, generator=self.gen)
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss.detach())
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self.model(x)
        self.log("val_loss", F.cross_entropy(logits, y), batch_size=len(y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), batch_size=len(y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.lr)


def train_classifier(ds: PartDataset, epochs: int = EPOCHS, batch_size: int = BATCH_SIZE, lr: float = LR,
                     seed: int = 0, n_points: int = N_POINTS, width: int = 64) -> ShapeClassifier:
    """Fit the classifier on the training shapes of ``ds`` (validation shapes, if any, pick the
    best epoch and stop early). Returns it in eval mode."""
    x, y = dataset_clouds(ds, ds.shape_ids("train"), n_points, seed)
    if len(x) == 0:
        raise DataError("the dataset has no training shapes to train the category classifier on")
    xv, yv = dataset_clouds(ds, ds.shape_ids("val"), n_points, seed)
    with tempfile.TemporaryDirectory(prefix="moca-classifier-") as run_dir:
        val = len(xv) > 0
        trainer = make_trainer(run_dir, max_epochs=epochs, seed=seed, progress=False,
                               monitor="val_loss" if val else None, patience=PATIENCE if val else None,
                               checkpoint=val, log_every_n_steps=1)
        model = ShapeClassifier(len(CATEGORIES), width)  # initialised after make_trainer seeded the RNGs
        val_loader = torch.utils.data.DataLoader(TensorDataset(xv, yv), batch_size=256) if val else None
        with ctrl_c_interrupts(), warnings.catch_warnings():  # without validation shapes the validation step is unused
            warnings.filterwarnings("ignore", message=r".*`validation_step` but have no `val_dataloader`.*")
            fit(trainer, ClassifierModule(model, lr, seed), shuffled_loader(TensorDataset(x, y), batch_size, seed),
                val_loader, resume=False)
        best = Path(run_dir) / CHECKPOINT_DIR / f"{BEST}.ckpt"
        if val and best.is_file():
            state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
            model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    return model.cpu().eval()


@torch.no_grad()
def predict(model: ShapeClassifier, clouds: Tensor | np.ndarray) -> np.ndarray:
    """Predicted category indices ``(S,)`` of ``clouds (S, N, 3)``."""
    x = torch.as_tensor(np.asarray(clouds, dtype=np.float32))
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    dev = next(model.parameters()).device
    return torch.cat([model(x[i:i + 256].to(dev)).argmax(1).cpu() for i in range(0, len(x), 256)]).numpy()


def category_fidelity(model: ShapeClassifier, clouds, requested) -> float:
    """Rate at which the predicted category of ``clouds (S, N, 3)`` equals ``requested (S,)``
    (category indices)."""
    requested = np.asarray(requested, dtype=np.int64)
    if len(requested) == 0:
        raise DataError("category fidelity needs at least one shape")
    return float((predict(model, clouds) == requested).mean())


def dataset_hash(ds: PartDataset, **settings) -> str:
    """SHA-1 of the dataset arrays (points, offsets, categories, splits) and ``settings``."""
    h = hashlib.sha1()
    for arr in (ds.points, ds.offsets, ds.category, ds.split):
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(repr(sorted(settings.items())).encode())
    return h.hexdigest()


def get_classifier(ds: PartDataset, cache: str | Path | None = None, seed: int = 0,
                   epochs: int = EPOCHS) -> tuple[ShapeClassifier, dict]:
    """The category classifier of ``ds``: loaded from the cache when one was trained on the same
    dataset with the same settings, else trained and saved there with its test accuracy. Returns
    ``(model, info)``; ``info``: ``test_accuracy`` (None without test shapes), ``n_train``,
    ``n_test``, ``categories`` (those of the training shapes), ``dataset_sha1``, ``seed``."""
    settings = dict(version=CLASSIFIER_VERSION, epochs=epochs, batch_size=BATCH_SIZE, lr=LR, n_points=N_POINTS,
                    seed=seed)
    key = dataset_hash(ds, **settings)
    path = Path(cache) if cache else cache_dir("generation3d") / "classifier" / f"v{CLASSIFIER_VERSION}-{key[:16]}"
    if (path / "config.json").is_file():
        try:
            info = checkpoint_info(path).extra
            if info.get("dataset_sha1") == key:
                return ShapeClassifier.from_pretrained(path), info
        except CheckpointError:
            pass  # a damaged cache is rebuilt below
    model = train_classifier(ds, epochs=epochs, seed=seed)
    test_ids = ds.shape_ids("test")
    xt, yt = dataset_clouds(ds, test_ids, N_POINTS, seed)
    present = sorted(set(ds.category[ds.shape_ids("train")].tolist()))
    info = {"test_accuracy": category_fidelity(model, xt, yt) if len(yt) else None,
            "n_train": int(len(ds.shape_ids("train"))), "n_test": int(len(test_ids)),
            "categories": [CATEGORIES[i] for i in present], "dataset_sha1": key, "seed": seed}
    model.save_pretrained(path, info)
    return model, info
