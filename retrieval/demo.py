"""Gradio tab: pick or upload a product, type a modification, see the top-10 products and the
attribute-group routing weights of MoA³CIR.

Model and gallery: ``$MOE_APPS_RETRIEVAL_MODEL`` (a checkpoint directory) /
``$MOE_APPS_RETRIEVAL_DATA`` (a ``moa3cir build-data`` root) when set, else the ``make demo`` quick
run's outputs (``results/demo/...``); when neither exists, the "prepare" button builds a small
benchmark and trains a small model (about two minutes on 2 cores). ``build_demo_assets(dir)``
makes a tiny model + gallery for tests in well under a minute and returns the two env vars.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import gradio as gr
import numpy as np

from common.errors import MoeAppsError

from .render import GROUPS
from .towers import DEFAULT_IMAGE_ENCODER

DEFAULT_MODEL = Path(f"results/demo/retrieval_bench/models/controlled/{DEFAULT_IMAGE_ENCODER}/MoA3CIR")
DEFAULT_DATA = Path("results/demo/retrieval_data")
MODEL_ENV, DATA_ENV = "MOE_APPS_RETRIEVAL_MODEL", "MOE_APPS_RETRIEVAL_DATA"

# test-sized assets (build_demo_assets default) and the larger "prepare" fallback
TINY_BUILD = {
    "garments": {"train": 60, "val": 10, "test": 30},
    "triplets": {"train": 240, "val": 20, "test": 40},
}
TINY_TRAIN = {"phase1_epochs": 1, "phase2_epochs": 4, "batch_size": 32, "hard_negatives": False}
PREPARE_BUILD = {
    "garments": {"train": 150, "val": 20, "test": 60},
    "triplets": {"train": 600, "val": 40, "test": 100},
}
PREPARE_TRAIN = {"phase1_epochs": 1, "phase2_epochs": 3}


class DemoEngine:
    """Loaded model + indexed test gallery of the synthetic benchmark."""

    def __init__(self, model_dir: Path, data_root: Path, variant: str = "controlled"):
        from .data import load_synthetic
        from .embed import embed_gallery
        from .features import prepare_features
        from .index import GalleryIndex
        from .registry import load_model

        self.model, _ = load_model(model_dir)
        self.split = load_synthetic(data_root, "test", variant)
        emb = embed_gallery(self.model, prepare_features(self.split))
        self.index = GalleryIndex(emb.shape[1], "flat")
        self.index.add(emb, self.split.ids)
        self.picks = self.split.ids[:: max(1, len(self.split.ids) // 24)][:24]

    def query(self, image: np.ndarray, text: str, description: str | None, k: int = 10):
        from .data import image_from_array
        from .embed import encode_single_query

        q, weights = encode_single_query(self.model, image_from_array(image), text, description)
        scores, ids = self.index.search(q, k)
        items = [
            (self.split.images[self.split.index[i]], f"{s:.3f} | {self.split.descriptions[i]}")
            for i, s in zip(ids[0], scores[0], strict=False)
        ]
        routing = {} if weights is None else {g: float(w) for g, w in zip(GROUPS, weights, strict=False)}
        return items, routing


_ENGINE: DemoEngine | None = None
# one engine per process: concurrent first requests (or "prepare" clicks) build and load it once
_ENGINE_LOCK = threading.Lock()


def _paths() -> tuple[Path, Path]:
    return Path(os.environ.get(MODEL_ENV, DEFAULT_MODEL)), Path(os.environ.get(DATA_ENV, DEFAULT_DATA))


def get_engine(prepare: bool = False) -> DemoEngine:
    with _ENGINE_LOCK:
        return _ENGINE if _ENGINE is not None else _load_engine(prepare)


def _load_engine(prepare: bool) -> DemoEngine:
    global _ENGINE
    model_dir, data_root = _paths()
    if not (model_dir / "config.json").is_file():
        if not prepare:
            raise gr.Error("no trained model yet: run `make demo` or press 'Prepare demo model'")
        from .text import cache_dir

        env = build_demo_assets(cache_dir() / "demo", PREPARE_BUILD, PREPARE_TRAIN)
        model_dir, data_root = Path(env[MODEL_ENV]), Path(env[DATA_ENV])
    _ENGINE = DemoEngine(model_dir, data_root)
    return _ENGINE


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
    ``TINY_TRAIN``: about 20 s on 2 busy cores). The texts of the test gallery are embedded here
    (text cache ``$MOE_APPS_CACHE``), so the tab only embeds the typed query. Existing assets in
    ``out_dir`` are reused."""
    from .data import load_synthetic
    from .features import prepare_features
    from .registry import build_model, save_model
    from .synth import BuildConfig, build_benchmark
    from .train import TrainConfig, fit

    out_dir = Path(out_dir)
    data_root, model_dir = out_dir / "data", out_dir / "model"
    if not (data_root / "controlled" / "meta.json").is_file():
        build_benchmark(data_root, BuildConfig(**(build or TINY_BUILD), seed=seed), overwrite=True)
    if not (model_dir / "config.json").is_file():
        import torch

        torch.manual_seed(seed)
        model = build_model("moa3cir")
        train_split = load_synthetic(data_root, "train", "controlled")
        fit(model, prepare_features(train_split, encoder), TrainConfig(**(train or TINY_TRAIN), seed=seed))
        save_model(model, model_dir, {"demo": True})
    prepare_features(load_synthetic(data_root, "test", "controlled"), encoder)
    return {MODEL_ENV: str(model_dir), DATA_ENV: str(data_root)}


def _prepare():
    try:
        eng = get_engine(prepare=True)
    except MoeAppsError as exc:
        raise gr.Error(str(exc)) from exc
    return [
        (eng.split.images[eng.split.index[i]], i) for i in eng.picks
    ], f"ready: {len(eng.split.ids)} products"


def _on_pick(evt: gr.SelectData):
    eng = get_engine()
    item = eng.picks[evt.index]
    return eng.split.images[eng.split.index[item]], eng.split.descriptions[item]


def _search(image, text, description):
    if image is None:
        raise gr.Error("pick or upload a reference product image")
    if not text or not text.strip():
        raise gr.Error("type a modification, e.g. 'make it blue with stripes'")
    try:
        items, routing = get_engine().query(np.asarray(image), text, description or None)
    except MoeAppsError as exc:
        raise gr.Error(str(exc)) from exc
    return items, routing


def build_tab() -> None:
    """Components of the retrieval tab (called inside an open ``gr.Tab``)."""
    gr.Markdown(
        "**MoA³CIR**: composed image retrieval with item descriptions. Pick a product (or upload "
        "an image), describe the change, and get the top-10 products; the bars show how the "
        "`moe/` router weights the attribute head groups for your text."
    )
    with gr.Row():
        prepare = gr.Button("Prepare demo model / load products")
        status = gr.Markdown("")
    picks = gr.Gallery(label="Pick a reference product", columns=8, height=220, allow_preview=False)
    with gr.Row():
        ref = gr.Image(label="Reference image (or upload)", type="numpy", height=200)
        with gr.Column():
            desc = gr.Textbox(label="Reference description (optional)", lines=2)
            text = gr.Textbox(label="Modification", value="make it blue with stripes")
            go = gr.Button("Search", variant="primary")
    routing = gr.Label(label="Attribute-group routing weights", num_top_classes=len(GROUPS))
    results = gr.Gallery(label="Top-10 products", columns=5, height=360)
    prepare.click(_prepare, outputs=[picks, status])
    picks.select(_on_pick, outputs=[ref, desc])
    go.click(_search, inputs=[ref, text, desc], outputs=[results, routing])
    text.submit(_search, inputs=[ref, text, desc], outputs=[results, routing])
