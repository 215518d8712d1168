"""Which regression target (x0 / v / epsilon) gives the most recognisable Fashion-MNIST samples
once a model trains for thousands of steps?

``vision.sampling.PREDICTION_TYPE`` (x0) was chosen at 600 steps, where the global layout is all
a model has learned. The shipped models' samples are grainy: the x0 loss weights every timestep
alike, so the low-noise steps that remove the last grain carry little of it, while epsilon
weights them most and v sits in between. Protocol: one backbone per target, the same seed, batch
and schedule (``TrainConfig``: AdamW 2e-3, 200 warm-up steps, cosine, EMA 0.999) on all 60k
training images; 256 DDIM-25 samples (seed 0) scored by the shipped ``fmnist-classifier``
(confident share >= 0.8, smallest class share) and its FID against 1,000 **test** images, the
protocol of ``scripts/ship_vision.py``. Seeds and sizes here are not the ones the README reports.

    python -m experiments.vision.prediction_target --size XS --steps 3000 --out results/prediction_target
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import vision.sampling as sampling
from common.io import write_json
from vision.classifier import get_classifier
from vision.data import fashion_mnist_images, load_dataset
from vision.evaluate import classifier_metrics, recognisability
from vision.models import build_backbone
from vision.release import sample
from vision.train import TrainConfig, fit

TARGETS = ("sample", "v_prediction", "epsilon")


def run(target: str, size: str, steps: int, out: Path, images, real, classifier, n: int = 256) -> dict:
    """Train MoH of ``size`` for ``steps`` steps regressing ``target`` and score its samples."""
    saved = sampling.PREDICTION_TYPE
    sampling.PREDICTION_TYPE = target  # read by make_train_scheduler; the checkpoint records it
    try:
        torch.manual_seed(0)
        model = build_backbone("moh", model_size=size)
        cfg = TrainConfig(steps=steps, batch_size=32, lr=2e-3, warmup=200, ema_decay=0.999, seed=0,
                          checkpoint_every=0)
        t0 = time.perf_counter()
        fit(model, images, cfg, out_dir=out / target)
        wall = time.perf_counter() - t0
    finally:
        sampling.PREDICTION_TYPE = saved
    fake, _ = sample(out / target / "checkpoint", n, 25, seed=0)
    recog = recognisability(fake, classifier)
    return {"target": target, "size": size, "steps": steps, "train_s": round(wall, 1),
            "confident_share": recog["confident_share"], "min_class_share": recog["min_class_share"],
            "fmnist_classifier_fid": classifier_metrics(real, fake, classifier)["fmnist_classifier_fid"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="XS")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    p.add_argument("--limit", type=int, default=60000, help="training images")
    p.add_argument("--n", type=int, default=256, help="samples scored")
    p.add_argument("--out", type=Path, default=Path("results/prediction_target"))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    images = load_dataset("fashion-mnist", 32, 1, limit=a.limit)
    real, _ = fashion_mnist_images("test", limit=1000, seed=0)
    classifier, _ = get_classifier()
    rows = []
    for target in a.targets:
        rows.append(run(target, a.size, a.steps, a.out, images, real, classifier, a.n))
        print(rows[-1], flush=True)
        write_json(a.out / "prediction_target.json", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
