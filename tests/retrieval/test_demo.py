import numpy as np
import pytest
import torch

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

    with pytest.raises(gr.Error):
        demo._search(None, "make it red", "")
    with pytest.raises(gr.Error):
        demo._search(np.zeros((32, 32, 3), np.uint8), "   ", "")


def test_build_tab_constructs():
    import gradio as gr

    with gr.Blocks() as app, gr.Tab("Retrieval"):
        demo.build_tab()
    assert app is not None
