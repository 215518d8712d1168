"""Browser test of the vision tab: launched alone in a gr.Blocks, driven by headless Chromium."""

import socket

import pytest

from tests.vision.conftest import tiny_moh
from vision.sampling import save_checkpoint


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def vision_tab_url(tmp_path, monkeypatch):
    import gradio as gr

    from vision.demo import build_tab

    ckpt = tmp_path / "ck"
    save_checkpoint(tiny_moh(), ckpt)
    monkeypatch.setenv("MOH_DEMO_CKPT", str(ckpt))
    with gr.Blocks() as app, gr.Tab("vision"):
        build_tab()
    port = _free_port()
    app.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    app.close()


def test_demo_samples_and_shows_router_choices(browser, vision_tab_url):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(vision_tab_url)
    page.click("#moh-sample")
    page.wait_for_function("document.querySelector('#moh-status').innerText.includes('sampled 16 images')")
    text = page.locator("#moh-trace").inner_text()
    # one row per DDIM step: the default 25 steps over 1000 training timesteps visit 960, 920, ..., 0
    for t in ("960", "520", "40"):
        assert t in text, text[:500]
    assert "depth" in text and "blocks/image" in text
    assert page.locator("#moh-final img").count() == 1
    context.close()


def test_demo_reports_bad_checkpoint(tmp_path):
    from common.errors import CheckpointError
    from vision.demo import sample_with_trace

    with pytest.raises(CheckpointError):
        sample_with_trace(str(tmp_path / "missing"), 2, 2, 0)


def test_tab_samples_the_shipped_models_by_name(monkeypatch):
    """Without an operator checkpoint the Fashion-MNIST choice is the shipped MoH and its plain-Mamba
    baseline; both sample by name, with no path and no training."""
    from common.shipped import shipped_models
    from vision.demo import BASELINE, default_checkpoint, run_sample

    monkeypatch.delenv("MOH_DEMO_CKPT", raising=False)
    assert {"moh-fmnist", "mamba-fmnist"} <= set(shipped_models())
    assert default_checkpoint() == "moh-fmnist" and default_checkpoint(BASELINE) == "mamba-fmnist"
    for name in ("moh-fmnist", "mamba-fmnist"):
        final, frames, rows, _fig = run_sample(name, 2, 2, 0)
        assert final.shape == (34, 67, 1)  # two 32 px samples side by side, 1 px gaps
        assert len(frames) == 2 and len(rows) == 2
    assert run_sample("moh-fmnist-typo", 2, 2, 0).startswith("**error:**")
