"""The retrieval tab in headless Chromium, against the tiny assets of ``tests.retrieval.demo_assets``."""

import socket

import pytest

import retrieval.demo as demo
from tests.retrieval.browser_steps import search_first_product
from tests.retrieval.demo_assets import build_demo_assets

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def demo_assets(tmp_path_factory):
    """Tiny benchmark + model (real MiniLM text embeddings), the tab pointed at them by env."""
    mp = pytest.MonkeyPatch()
    env = build_demo_assets(tmp_path_factory.mktemp("retrieval_demo"))
    for k, v in env.items():
        mp.setenv(k, v)
    mp.setattr(demo, "_ENGINE", None)
    yield env
    mp.undo()


def test_build_demo_assets_points_the_tab_at_a_model(demo_assets):
    from retrieval.registry import load_model

    model, extra = load_model(demo_assets[demo.MODEL_ENV])
    assert extra == {"demo": True} and model.config.attention == "moa3"
    model_dir, gallery = demo._sources()
    assert model_dir.as_posix() == demo_assets[demo.MODEL_ENV] and gallery.name == "synthetic-controlled"
    # reused, not rebuilt, on a second call
    weights = (model_dir / "model.safetensors").stat().st_mtime_ns
    build_demo_assets(model_dir.parent)
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == weights


def test_tab_in_browser(demo_assets, browser):
    import gradio as gr

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with gr.Blocks() as app, gr.Tab("Retrieval"):
        demo.build_tab()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True)
    try:
        page = browser.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"http://127.0.0.1:{port}/")
        search_first_product(page)
    finally:
        app.close()
