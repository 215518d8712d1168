"""Demo tab: analysis function, tab construction and (slow) a browser round trip."""

from __future__ import annotations

import pytest

from common.errors import InputError
from olfaction import demo
from olfaction.predictor import MixturePredictor


@pytest.fixture()
def tiny_model(tmp_path, monkeypatch):
    MixturePredictor.tiny_example()[0].save_pretrained(tmp_path / "model")
    monkeypatch.setenv("MIXSCENT_MODEL", str(tmp_path / "model"))
    demo._PREDICTOR.clear()
    return tmp_path / "model"


def test_analyse(tiny_model):
    r = demo.analyse("CCO;c1ccccc1", "CC(=O)O", "Bushdid")
    assert 0 < r["distance"] < 1
    assert set(r["attention_a"]) == {"CCO", "c1ccccc1"}
    assert sum(r["attention_a"].values()) == pytest.approx(1.0, abs=1e-5)
    assert r["attention_b"] == {"CC(=O)O": pytest.approx(1.0)}
    names = [n for n, _ in r["labels_a"]]
    assert sorted(names) == ["a", "b", "c"]  # the tiny model's three labels
    probs = [p for _, p in r["labels_a"]]
    assert probs == sorted(probs, reverse=True)
    assert r["image_a"].size[0] > 0
    with pytest.raises(InputError, match="invalid SMILES 'xx'"):
        demo.analyse("CCO;xx", "CCO")


def test_the_tab_uses_the_shipped_predictor_and_says_how_to_make_a_missing_one(tmp_path, monkeypatch):
    from common.errors import CheckpointError
    from common.shipped import shipped_models

    monkeypatch.delenv("MIXSCENT_MODEL", raising=False)
    assert demo.model_dir() == shipped_models()[demo.SHIPPED_MODEL]
    monkeypatch.setenv("MIXSCENT_MODEL", str(tmp_path / "none"))
    with pytest.raises(CheckpointError, match="mixscent train --split random_cv0 --out") as info:
        demo.model_dir()
    assert "\n" not in str(info.value)
    text, a, b = demo.compare("CCO", "CCC")
    assert text.startswith("**error:** no predictor at") and a is b is None


def test_build_tab(tiny_model):
    gr = pytest.importorskip("gradio")
    with gr.Blocks() as blocks:
        with gr.Tab("olfaction"):
            demo.build_tab()
    ids = {getattr(c, "elem_id", None) for c in blocks.blocks.values()}
    assert {"olf_mix1", "olf_mix2", "olf_run", "olf_result"} <= ids


@pytest.mark.slow
@pytest.mark.browser
def test_browser_round_trip(tiny_model):
    gr = pytest.importorskip("gradio")
    sync_api = pytest.importorskip("playwright.sync_api")
    with gr.Blocks() as blocks:
        with gr.Tab("olfaction"):
            demo.build_tab()
    _, url, _ = blocks.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(url)
            page.locator("#olf_run").click()
            page.wait_for_function(
                "document.querySelector('#olf_result').innerText.includes('distance')", timeout=60000
            )
            text = page.locator("#olf_result").inner_text()
            assert "distance:" in text and "attention" in text
            page.locator("#olf_mix1 textarea").fill("CCO;C1CC")
            page.locator("#olf_run").click()
            page.wait_for_function(
                "document.querySelector('#olf_result').innerText.includes('error')", timeout=60000
            )
            assert "invalid SMILES" in page.locator("#olf_result").inner_text()
            browser.close()
    finally:
        blocks.close()
