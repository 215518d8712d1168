"""From a finished training run to a shipped model: the side-by-side quality report of the shipped
Fashion-MNIST models (``scripts/ship_vision.py``).

Every number is measured on the Fashion-MNIST **test** split, never on images the models trained
on, and beside the floor that real images reach under the same protocol (``floors``: a sample of
training images scored against the same test images), so a FID of 9 reads against the 3 that
real garments get with the same sample sizes:

* ``quality(fake, real, classifier, encoder)``: FMNIST-classifier FID / precision / recall,
  EfficientNet-Lite0 FID / precision / recall and recognisability (``vision.evaluate``);
* ``learning_curve(run_dir, ...)``: recognisability and classifier FID of the snapshots a run
  kept (``TrainConfig.snapshot_every``), cached beside each snapshot, to say what more steps would
  buy (``common.shipped.steps_to_reach`` extrapolates it).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import Tensor

from common.engine import snapshots
from common.errors import CheckpointError
from common.shipped import cached_snapshot_result
from vision.evaluate import classifier_metrics, feature_metrics, recognisability, to_model_range
from vision.models import load_backbone
from vision.sampling import MoHPipeline, load_sampler, read_train_state


def sample(ckpt: str | Path, n: int, steps: int, seed: int = 0, batch: int = 256) -> tuple[Tensor, float]:
    """``n`` DDIM samples (``steps`` steps, generator seeded with ``seed`` per batch index) of the
    checkpoint ``ckpt`` as ``(n, c, H, W)`` in [-1, 1], and the seconds per image."""
    model = load_backbone(ckpt)
    pipe = MoHPipeline(model, load_sampler(ckpt, "ddim"))
    out, t0 = [], time.perf_counter()
    for i in range(0, n, batch):
        res = pipe(batch_size=min(batch, n - i), num_inference_steps=steps,
                   generator=torch.Generator().manual_seed(seed + i))
        out.append(to_model_range(res.images))
    return torch.cat(out), (time.perf_counter() - t0) / n


def quality(fake: Tensor, real: Tensor, classifier, encoder=None) -> dict:
    """All sample metrics of ``fake`` against ``real`` (both ``(N, 1, 32, 32)`` in [-1, 1])."""
    out = classifier_metrics(real, fake, classifier)
    out.update(feature_metrics(real, fake, encoder))
    recog = recognisability(fake, classifier)
    recog.pop("labels")
    out.update({"confident_share": recog["confident_share"], "min_class_share": recog["min_class_share"],
                "mean_confidence": recog["mean_confidence"], "class_shares": recog["class_shares"]})
    return out


def floors(train: Tensor, test: Tensor, classifier, encoder=None) -> dict:
    """``quality`` of real training images (as many as the samples scored) against the test
    images: the best value each metric can reach with these sample sizes."""
    return quality(train, test, classifier, encoder)


def learning_curve(run_dir: str | Path, real: Tensor, classifier, n: int = 256, steps: int = 25,
                   seed: int = 0) -> list[dict]:
    """Recognisability and FMNIST-classifier FID of every snapshot of ``run_dir`` (``n`` samples
    each, same seeds as the final model's). Each row is cached beside its snapshot
    (``eval_test_n<n>_real<len(real)>_steps<steps>_seed<seed>.json``, with the weights' sha256),
    so a report run again, or while the training still writes snapshots, samples only what is new."""
    rows = []
    for step, path in snapshots(run_dir):
        def measure(path=path) -> dict:
            fake, _ = sample(path, n, steps, seed)
            recog = recognisability(fake, classifier)
            return {"confident_share": recog["confident_share"], "min_class_share": recog["min_class_share"],
                    "fmnist_classifier_fid": classifier_metrics(real, fake, classifier)["fmnist_classifier_fid"]}

        name = f"eval_test_n{n}_real{len(real)}_steps{steps}_seed{seed}.json"
        rows.append({"step": step, **cached_snapshot_result(path, name, list(path.glob("*.safetensors")), measure)})
    return rows


def train_seconds(run_dir: str | Path) -> float:
    """Training time of a run: ``train_s`` of its final checkpoint (summed over resumed sittings)."""
    state = read_train_state(Path(run_dir) / "checkpoint")
    if "train_s" not in state:
        raise CheckpointError(f"{run_dir} records no training time (train it with this version's moh train)")
    return float(state["train_s"])


def grid_png(images: Tensor, path: str | Path, nrow: int = 16) -> Path:
    """Save ``images (N, 1|3, H, W)`` in [-1, 1] as one PNG grid (``nrow`` per row, 2x upscaled)."""
    from PIL import Image

    from vision.sampling import grid_image

    arr = ((images.clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).numpy()
    grid = grid_image(arr, nrow=nrow)  # uint8
    img = Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid)
    img = img.resize((img.width * 2, img.height * 2), Image.NEAREST)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path
