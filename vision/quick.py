"""``make demo`` part of the vision app: a tiny same-budget MoH vs plain-Mamba vs DiT run on
Fashion-MNIST (minutes on 2 CPU cores). Trains, samples, scores with the FMNIST-classifier FID,
writes ``out_dir/vision.csv`` plus sample grids and the routing plot, and leaves the trained
MoH model where the demo tab finds it; then trains the same MoH for the same steps on the Sweet
Home 3D icons (32 px RGB, when installed) as the tab's second dataset, with its attribution
CSV beside it."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from common.data_dir import cache_dir
from common.io import write_csv
from vision.bench import QUICK, run_bench

DEMO_MODEL = "demo_model"


def demo_model_dir(dataset: str = "fashion-mnist") -> Path:
    """Where ``run_quick`` leaves the demo model of ``dataset`` (in ``cache_dir("vision")``)."""
    return cache_dir("vision") / (DEMO_MODEL if dataset == "fashion-mnist" else f"{DEMO_MODEL}_{dataset}")


def train_sweethome3d_demo(seed: int = 0) -> Path | None:
    """MoH trained ``QUICK.steps`` steps on the Sweet Home 3D training icons at 32 px, saved to
    ``demo_model_dir("sweethome3d")`` with ``ATTRIBUTION.csv``; None when the catalogue is not
    installed."""
    from common.errors import DataError
    from common.seed import seed_everything
    from common.sweethome3d import write_attribution
    from vision.data import data_spec, load_dataset, sweethome3d_items
    from vision.models import build_backbone
    from vision.train import TrainConfig, fit

    try:
        images = load_dataset("sweethome3d", 32, 3, seed=seed)
    except DataError:
        return None
    seed_everything(seed)
    model = build_backbone("moh", sample_size=32, in_channels=3)
    run = demo_model_dir("sweethome3d")
    shutil.rmtree(run, ignore_errors=True)
    fit(model, images, TrainConfig(steps=QUICK.steps, batch_size=QUICK.batch_size, seed=seed, checkpoint_every=0),
        out_dir=run, data=data_spec("sweethome3d", 32, 3, seed))
    write_attribution(sweethome3d_items("train", seed), run / "ATTRIBUTION.csv")
    return run


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0) -> list[dict]:
    """Run the quick benchmark; ``data_dir`` is unused (Fashion-MNIST comes from the Debian
    package via ``common.data_dir``). Returns report rows."""
    out = Path(out_dir) / "vision"
    rows = run_bench(out, replace(QUICK, seed=seed))
    demo = demo_model_dir()
    shutil.rmtree(demo, ignore_errors=True)
    shutil.copytree(out / "model_moh", demo)
    train_sweethome3d_demo(seed)
    summary = []
    for r in rows:
        task = f"Fashion-MNIST 32x32 generation, {QUICK.steps} steps x {QUICK.batch_size}"
        for metric in ("fmnist_classifier_fid", "precision", "recall", "train_s_per_step"):
            summary.append({"app": "vision", "task": task, "method": r["model"], "metric": metric,
                            "value": round(float(r[metric]), 4), "split": f"test ({QUICK.n_real} real vs {QUICK.n_samples} samples)",
                            "seed": seed})
        if r["model"] == "moh":
            summary.append({"app": "vision", "task": task, "method": "moh", "metric": "blocks_saved_vs_full_route",
                            "value": round(float(r["blocks_saved_frac"]), 4), "split": "sampling", "seed": seed})
    write_csv(Path(out_dir) / "vision.csv", summary)
    return summary
