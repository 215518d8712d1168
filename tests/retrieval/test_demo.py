import numpy as np
import pytest
import torch
from PIL import Image

import retrieval.demo as demo
from retrieval.data import load_synthetic
from retrieval.features import prepare_features
from retrieval.registry import build_model, save_model
from retrieval.render import GROUPS
from retrieval.train import TrainConfig, fit


@pytest.fixture(scope="module")
def demo_model(tiny_bench, prefilled_cache, tmp_path_factory):
    root, _ = tiny_bench
    mp = pytest.MonkeyPatch()
    mp.setenv("MOE_APPS_CACHE", str(prefilled_cache))

    torch.manual_seed(0)
    model = build_model("moa3cir")
    fit(
        model,
        prepare_features(load_synthetic(root, "train", "controlled")),
        TrainConfig(0, 1, batch_size=64, hard_negatives=False),
    )
    path = tmp_path_factory.mktemp("demo_model")
    save_model(model, path)
    mp.setenv("MOE_APPS_RETRIEVAL_MODEL", str(path))
    mp.setenv("MOE_APPS_RETRIEVAL_DATA", str(root))
    mp.setattr(demo, "_ENGINE", None)
    yield path
    mp.undo()


def test_engine_query_returns_topk_and_routing(demo_model, tiny_bench):
    eng = demo.get_engine()
    split = eng.split
    t = split.triplets[0]
    items, routing = eng.query(
        split.images[split.index[t.reference]], t.text, split.descriptions[t.reference]
    )
    assert len(items) == 10 and all(img.shape == (32, 32, 3) for img, _ in items)
    assert set(routing) == set(GROUPS) and sum(w > 0 for w in routing.values()) == 3
    # upload path: any RGB size is resized
    items2, _ = demo._search(np.zeros((60, 45, 3), np.uint8), t.text, "")
    assert len(items2) == 10


def test_search_errors(demo_model):
    import gradio as gr

    with pytest.raises(gr.Error, match="pick or upload a reference product first"):
        demo._search(None, "make it red", "")
    with pytest.raises(gr.Error, match="type the change you want first"):
        demo._search(np.zeros((32, 32, 3), np.uint8), "   ", "")


def test_search_with_a_missing_model_says_what_to_do(tmp_path, monkeypatch):
    import gradio as gr

    monkeypatch.setenv("MOE_APPS_RETRIEVAL_MODEL", str(tmp_path / "none"))
    monkeypatch.setattr(demo, "_ENGINE", None)
    monkeypatch.setattr(demo, "_CATALOG", None)
    with pytest.raises(gr.Error, match="no checkpoint at .*none and no shipped model of that name") as e:
        demo._search(np.zeros((32, 32, 3), np.uint8), "make it blue with stripes", "")
    assert e.value.message != "Error" and "\n" not in e.value.message
    assert demo._initial_picks() == [] and demo._initial_status().startswith("**error:** no checkpoint")
    # an unexpected failure still reaches the user as a sentence naming it
    monkeypatch.setattr(demo, "get_engine", lambda: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(gr.Error, match="the search failed on the server .the server log has the details."):
        demo._search(np.zeros((32, 32, 3), np.uint8), "make it blue", "")


def test_catalogue_index_in_the_hub(tiny_bench, prefilled_cache, tmp_path, monkeypatch):
    import json
    import shutil

    import gradio as gr

    from retrieval.catalog import read_catalog
    from retrieval.catalog_index import build_catalog_index

    root, _ = tiny_bench
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))
    monkeypatch.setattr(demo, "_CATALOG", None)
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    monkeypatch.setenv("MOE_APPS_DEMO_ROOTS", str(allowed))
    images = sorted((root / "controlled" / "images").glob("cont_test_*.png"))[:30]
    allowed.mkdir()
    (allowed / "shop.csv").write_text("id,image,title,colour\n" + "".join(
        f"p{n},{p},Item {n},c{n % 3}\n" for n, p in enumerate(images)))
    torch.manual_seed(0)
    model = build_model("moa3cir", "XS", image_encoder="scratch")
    save_model(model, allowed / "model")
    from retrieval.registry import load_model

    loaded = load_model(allowed / "model")[0]
    for where in (allowed, outside):
        build_catalog_index(read_catalog(allowed / "shop.csv"), loaded, where / "ix", model_dir=allowed / "model",
                            progress=False)
    with pytest.raises(gr.Error, match="outside the directories this server allows"):
        demo._load_catalog(str(outside / "ix"))
    with pytest.raises(gr.Error, match="holds no saved index"):
        demo._load_catalog(str(allowed))
    # an index inside the roots whose model lies outside them is refused too
    shutil.copytree(allowed / "ix", allowed / "ix_out")
    save_model(model, outside / "model")
    info = json.loads((allowed / "ix_out" / "catalog.json").read_text())
    (allowed / "ix_out" / "catalog.json").write_text(json.dumps({**info, "model": str(outside / "model")}))
    with pytest.raises(gr.Error, match="model directory of the catalogue index .* is outside"):
        demo._load_catalog(str(allowed / "ix_out"))
    picks, status = demo._load_catalog(str(allowed / "ix"))
    first = np.asarray(Image.open(picks[0][0]))  # gallery images are served PNG files
    assert "30 products" in status and len(picks) == 24 and first.shape == (32, 32, 3)
    # a page opening meanwhile shows the catalogue the tab serves, not the demo gallery
    assert demo._initial_status() == status and len(demo._initial_picks()) == 24
    items, routing = demo._search(first, "make it blue with stripes", "")
    assert len(items) == 10 and items[0][1].split(" | ")[1].startswith("p") and len(routing) == len(GROUPS)
    assert "Item " in items[0][1]


def test_build_tab_constructs():
    import gradio as gr

    with gr.Blocks() as app, gr.Tab("Retrieval"):
        demo.build_tab()
    assert app is not None
