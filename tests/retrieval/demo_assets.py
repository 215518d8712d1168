"""Tiny assets for the retrieval tab's tests: a small built benchmark and a briefly trained MoA³CIR
that ``$MOE_APPS_RETRIEVAL_MODEL`` / ``$MOE_APPS_RETRIEVAL_DATA`` point the tab at (the tab itself
only loads; it never trains)."""

from __future__ import annotations

from pathlib import Path

import torch

from retrieval.data import load_synthetic
from retrieval.demo import DATA_ENV, MODEL_ENV
from retrieval.features import prepare_features
from retrieval.registry import build_model, save_model
from retrieval.synth import BuildConfig, build_benchmark
from retrieval.train import TrainConfig, fit

TINY_BUILD = {
    "garments": {"train": 60, "val": 10, "test": 30},
    "triplets": {"train": 240, "val": 20, "test": 40},
}
TINY_TRAIN = {"phase1_epochs": 1, "phase2_epochs": 4, "batch_size": 32, "hard_negatives": False}


def build_demo_assets(
    out_dir: Path,
    build: dict | None = None,
    train: dict | None = None,
    encoder=None,
    seed: int = 0,
) -> dict[str, str]:
    """Build a small benchmark (``out_dir/data``) and a briefly trained MoA³CIR with the default
    image encoder (``out_dir/model``) for the demo tab; returns ``{MOE_APPS_RETRIEVAL_MODEL: ...,
    MOE_APPS_RETRIEVAL_DATA: ...}`` to put in the tab's environment.

    ``build`` / ``train``: ``BuildConfig`` / ``TrainConfig`` fields (default ``TINY_BUILD`` /
    ``TINY_TRAIN``: about 20 s on 2 busy cores; the tab itself never trains). The texts of the test gallery are embedded here
    (text cache ``$MOE_APPS_CACHE``), so the tab only embeds the typed query. Existing assets in
    ``out_dir`` are reused."""
    out_dir = Path(out_dir)
    data_root, model_dir = out_dir / "data", out_dir / "model"
    if not (data_root / "controlled" / "meta.json").is_file():
        build_benchmark(data_root, BuildConfig(**(build or TINY_BUILD), seed=seed), overwrite=True)
    if not (model_dir / "config.json").is_file():
        torch.manual_seed(seed)
        model = build_model("moa3cir")
        train_split = load_synthetic(data_root, "train", "controlled")
        fit(model, prepare_features(train_split, encoder), TrainConfig(**(train or TINY_TRAIN), seed=seed))
        save_model(model, model_dir, {"demo": True})
    prepare_features(load_synthetic(data_root, "test", "controlled"), encoder)
    return {MODEL_ENV: str(model_dir), DATA_ENV: str(data_root)}
