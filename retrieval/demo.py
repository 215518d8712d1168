"""Gradio tab: pick or upload a product, type a modification, see the top-10 products and the
attribute-group routing weights of MoA³CIR; optionally over a shop's catalogue index
(``moa3cir index --catalog``) inside the directories the server allows (``common.allowlist``).

Model and gallery: the shipped ``moa3cir-fmnist`` (``common.shipped``) and its demo gallery (the
built benchmark's controlled test split, ``retrieval.gallery``), loaded when the page opens, with
no build step and no training. ``$MOE_APPS_RETRIEVAL_MODEL`` (a checkpoint directory or shipped
name) and ``$MOE_APPS_RETRIEVAL_DATA`` (a ``moa3cir build-data`` root: its controlled test split)
replace them (the tests point them at a tiny model and gallery, ``tests/retrieval/demo_assets.py``).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import gradio as gr
import numpy as np

from common.allowlist import check_allowed_path
from common.errors import InputError, MoeAppsError
from common.images import served_png

from .render import GROUPS

log = logging.getLogger(__name__)

SHIPPED_MODEL = "moa3cir-fmnist"
MODEL_ENV, DATA_ENV = "MOE_APPS_RETRIEVAL_MODEL", "MOE_APPS_RETRIEVAL_DATA"
DEFAULT_REQUEST = "make it blue with stripes"
# what each hub error tells the user to do
NO_IMAGE = "pick or upload a reference product first (click a product above or drop an image)"
NO_TEXT = "type the change you want first, e.g. 'make it blue with stripes'"
PICKS = 24  # products offered to pick from



class DemoEngine:
    """A loaded model and its indexed gallery (a ``CIRSplit`` with descriptions)."""

    def __init__(self, model_dir: str | Path, gallery):
        from .catalog_index import split_index
        from .registry import load_model

        self.model, _ = load_model(model_dir)
        self.split = gallery
        self.index = split_index(self.model, self.split)
        self.picks = self.split.ids[:: max(1, len(self.split.ids) // PICKS)][:PICKS]

    def query(self, image: np.ndarray, text: str, description: str | None, k: int = 10):
        from .data import image_from_array
        from .embed import encode_single_query

        q, weights = encode_single_query(self.model, image_from_array(image), text, description)
        scores, ids = self.index.search(q, k)
        items = [
            (self.split.images[self.split.index[i]], f"{s:.3f} | {self.split.descriptions[i]}")
            for i, s in zip(ids[0], scores[0], strict=False)
        ]
        routing = {} if weights is None else {g: round(float(w), 3) for g, w in zip(GROUPS, weights, strict=False)}
        return items, routing


class CatalogEngine:
    """A shop's catalogue index and the model it was built with (recorded in its catalog.json)."""

    def __init__(self, index_dir: Path):
        from .catalog_index import CatalogIndex, model_fingerprint
        from .registry import load_model

        self.index = CatalogIndex.load(index_dir)
        model_dir = self.index.info.get("model")
        if self.index.info.get("format", 0) < 1 or not model_dir:
            raise InputError(f"{index_dir} is not a catalogue index; build one with `moa3cir index --catalog "
                             "FILE.csv --model M --out DIR`")
        self.model, _ = load_model(check_allowed_path(model_dir, "model directory of the catalogue index"))
        if model_fingerprint(self.model) != self.index.info.get("model_fingerprint"):
            raise InputError(f"the model {model_dir} changed since {index_dir} was built; rebuild the index")
        self.picks = [it.id for it in self.index.items[:: max(1, len(self.index) // 24)][:24]]
        self.by_id = {it.id: it for it in self.index.items}
        self.source = str(index_dir)

    def image(self, item_id: str) -> np.ndarray:
        """The product's image, or a grey square when its file is gone."""
        from .data import load_image
        from .render import IMAGE_SIZE

        try:
            return load_image(Path(self.by_id[item_id].path))
        except InputError:
            return np.full((IMAGE_SIZE, IMAGE_SIZE, 3), 128, np.uint8)

    def query(self, image: np.ndarray, text: str, description: str | None, k: int = 10):
        from .catalog_index import search_products
        from .data import image_from_array

        products, routing = search_products(self.model, self.index, image_from_array(image), text, description, k)
        label = lambda p: " | ".join(x for x in (f"{p.score:.3f}", p.id, p.title or p.description) if x)  # noqa: E731
        return [(self.image(p.id), label(p)) for p in products], routing


_CATALOG: CatalogEngine | None = None
_ENGINE: DemoEngine | None = None
# one engine per process: concurrent first requests load it once
_ENGINE_LOCK = threading.Lock()


def _sources() -> tuple[Path, object]:
    """``(model directory, gallery)`` of the tab: the environment's, else the shipped model and its gallery."""
    from common.shipped import resolve_checkpoint

    from .data import load_synthetic
    from .gallery import GALLERY_FILE, load_gallery

    chosen, data = os.environ.get(MODEL_ENV), os.environ.get(DATA_ENV)
    shipped = None if chosen and data else resolve_checkpoint(SHIPPED_MODEL)  # verified once
    model_dir = resolve_checkpoint(chosen) if chosen else shipped
    if data:
        return model_dir, load_synthetic(Path(data), "test", "controlled")
    return model_dir, load_gallery(shipped / GALLERY_FILE, SHIPPED_MODEL)


def get_engine() -> DemoEngine:
    """The tab's engine, loaded once per process (concurrent first requests load it once)."""
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = DemoEngine(*_sources())
        return _ENGINE


def _friendly(exc: Exception, what: str) -> gr.Error:
    """A hub error that says what happened and what to do (never a bare "Error")."""
    if isinstance(exc, gr.Error):
        return exc
    if isinstance(exc, MoeAppsError):
        return gr.Error(str(exc))
    log.error("retrieval tab: %s failed", what, exc_info=exc)  # the details for the operator
    return gr.Error(f"{what} failed on the server (the server log has the details); try again, or pick "
                    "another product")


def _gallery(items: list) -> list:
    """Gallery entries ``(image, caption)`` with each image as a PNG file that never changes while it
    is served (``common.images.served_png``): concurrent identical requests cannot cut a download."""
    return [(served_png(np.asarray(img)) if not isinstance(img, str) else img, cap) for img, cap in items]


def _demo_engine() -> DemoEngine:
    try:
        return get_engine()
    except Exception as exc:  # noqa: BLE001 - every failure reaches the user as a message
        raise _friendly(exc, "loading the demo model") from exc


def _demo_picks(eng: DemoEngine) -> list:
    return _gallery([(eng.split.images[eng.split.index[i]], i) for i in eng.picks])


def _demo_status(eng: DemoEngine) -> str:
    return f"ready: {len(eng.split.ids)} products of {eng.split.name}"


def _products():
    """The "Demo products" button: the demo gallery's products to pick from and a status line (the
    tab's demo gallery again after a catalogue index)."""
    global _CATALOG
    eng = _demo_engine()
    _CATALOG = None
    return _demo_picks(eng), _demo_status(eng)


def _initial_picks() -> list:
    """The picks when a page opens: those of the catalogue index the tab serves, else of the demo
    gallery (empty, with the reason in the status line, when it cannot load)."""
    cat = _CATALOG
    if cat is not None:
        return _catalog_picks(cat)
    try:
        return _demo_picks(_demo_engine())
    except gr.Error:
        return []


def _initial_status() -> str:
    cat = _CATALOG
    if cat is not None:
        return _catalog_status(cat)
    try:
        return _demo_status(_demo_engine())
    except gr.Error as exc:
        return f"**error:** {exc.message}"


def _load_catalog(path: str):
    """Point the tab at a catalogue index inside the allowed roots; returns the picks and a status."""
    global _CATALOG
    try:
        cat = CatalogEngine(check_allowed_path(path, "catalogue index directory"))
    except Exception as exc:  # noqa: BLE001
        raise _friendly(exc, "loading the catalogue index") from exc
    _CATALOG = cat
    return _catalog_picks(cat), _catalog_status(cat)


def _catalog_picks(cat: CatalogEngine) -> list:
    return _gallery([(cat.image(i), i) for i in cat.picks])


def _catalog_status(cat: CatalogEngine) -> str:
    return f"ready: {len(cat.index)} products of {cat.source}"


def _on_pick(evt: gr.SelectData):
    if _CATALOG is not None:
        item = _CATALOG.by_id[_CATALOG.picks[evt.index]]
        return _CATALOG.image(item.id), item.text
    eng = get_engine()
    item = eng.picks[evt.index]
    return eng.split.images[eng.split.index[item]], eng.split.descriptions[item]


def _search(image, text, description):
    if image is None:
        raise gr.Error(NO_IMAGE)
    if not text or not text.strip():
        raise gr.Error(NO_TEXT)
    try:
        engine = _CATALOG if _CATALOG is not None else get_engine()
        items, routing = engine.query(np.asarray(image), text, description or None)
    except Exception as exc:  # noqa: BLE001
        raise _friendly(exc, "the search") from exc
    return _gallery(items), routing


def build_tab() -> None:
    """Components of the retrieval tab (called inside an open ``gr.Tab``): the shipped model's
    products are on the page when it opens."""
    gr.Markdown(
        "**MoA³CIR**: composed image retrieval with item descriptions. Pick a product (or upload "
        "an image), describe the change (\"make it red\", or a step: \"make it darker\", \"a lighter one in "
        "red\", \"more colourful\"), and get the top-10 products; the bars show how the `moe/` router "
        "weights the attribute head groups for your text (lightness and saturation take a step from the reference)."
    )
    with gr.Row():
        products = gr.Button("Demo products")
        catalog = gr.Textbox(label="or a catalogue index (moa3cir index --catalog ... --out DIR)", scale=2)
        load = gr.Button("Load catalogue")
        status = gr.Markdown(_initial_status, elem_id="retrieval-status")
    picks = gr.Gallery(_initial_picks, label="Pick a reference product", columns=8, height=220, allow_preview=False)
    with gr.Row():
        ref = gr.Image(label="Reference image (or upload)", type="numpy", height=200)
        with gr.Column():
            desc = gr.Textbox(label="Reference description (optional)", lines=2)
            text = gr.Textbox(label="Modification", value=DEFAULT_REQUEST)
            go = gr.Button("Search", variant="primary")
    routing = gr.Label(label="Attribute-group routing weights", num_top_classes=len(GROUPS))
    results = gr.Gallery(label="Top-10 products", columns=5, height=360)
    products.click(_products, outputs=[picks, status], api_name="retrieval_products")
    load.click(_load_catalog, inputs=[catalog], outputs=[picks, status])
    picks.select(_on_pick, outputs=[ref, desc])
    go.click(_search, inputs=[ref, text, desc], outputs=[results, routing], api_name="retrieval_search")
    text.submit(_search, inputs=[ref, text, desc], outputs=[results, routing])
