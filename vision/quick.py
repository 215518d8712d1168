"""``make demo`` part of the vision app: a tiny same-budget MoH vs plain-Mamba vs DiT run on
Fashion-MNIST (minutes on 2 CPU cores). Trains, samples, scores with the FMNIST-classifier FID,
writes ``out_dir/vision.csv`` plus sample grids and the routing plot, and leaves the trained
MoH model where the demo tab finds it."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from common.data_dir import cache_dir
from common.io import write_csv
from vision.bench import QUICK, run_bench

DEMO_MODEL = "demo_model"


def run_quick(out_dir: Path, data_dir: Path | None = None, seed: int = 0) -> list[dict]:
    """Run the quick benchmark; ``data_dir`` is unused (Fashion-MNIST comes from the Debian
    package via ``common.data_dir``). Returns report rows."""
    out = Path(out_dir) / "vision"
    rows = run_bench(out, replace(QUICK, seed=seed))
    demo = cache_dir("vision") / DEMO_MODEL
    shutil.rmtree(demo, ignore_errors=True)
    shutil.copytree(out / "model_moh", demo)
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
