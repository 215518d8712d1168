"""The hub in a real browser: the core tab routes a batch and shows the load plot."""

import re

import pytest

from apps.registry import APPS
from tests.retrieval.browser_steps import search_first_product

pytestmark = pytest.mark.browser


def test_core_tab_routes_a_batch_and_plots_load(page, tmp_path):
    page.get_by_role("tab", name="MoE core").click()
    page.get_by_role("button", name="Route batch").click()
    summary = page.locator("#core-routing-summary textarea")
    summary.wait_for()
    page.wait_for_function(
        "() => document.querySelector('#core-routing-summary textarea').value.includes('load entropy')"
    )
    text = summary.input_value()
    entropy = float(re.search(r"load entropy ([0-9.]+)", text).group(1))
    assert 0.0 < entropy <= 1.0 and "tokens 1024" in text
    page.locator("img, canvas, svg.main-svg, .js-plotly-plot").first.wait_for()
    page.screenshot(path=str(tmp_path / "core_tab.png"), full_page=True)


def test_streaming_tab_runs_a_stream_and_plots_tracking_error(page):
    page.get_by_role("tab", name="Streaming (MoSAIC)").click()
    page.get_by_role("button", name="Run stream").click()
    # The summary table fills with one row per method once the first chunk is streamed.
    page.wait_for_function(
        "() => ['mosaic', 'k-grouse', 'petrels'].every(m => document.body.innerText.includes(m))",
        timeout=300_000,
    )
    assert page.locator("img, canvas, svg").count() > 0


@pytest.mark.parametrize("tab", [e.title for e in APPS])
def test_every_app_tab_renders_in_the_hub(page, tab):
    page.get_by_role("tab", name=tab).click()
    panel = page.get_by_role("tabpanel")
    panel.get_by_role("button").first.wait_for()
    assert panel.get_by_role("button").count() >= 1


def _wait_for_text(page, selector: str, text: str, timeout_ms: int = 300_000) -> str:
    page.wait_for_function(
        "([sel, txt]) => { const el = document.querySelector(sel); return el && el.innerText.includes(txt); }",
        arg=[selector, text],
        timeout=timeout_ms,
    )
    return page.locator(selector).inner_text()


def test_olfaction_tab_compares_two_mixtures_and_rejects_bad_smiles(page):
    page.get_by_role("tab", name="Olfaction (MixScentNet)").click()
    page.locator("#olf_run").click()
    text = _wait_for_text(page, "#olf_result", "distance")
    assert "attention" in text
    page.locator("#olf_mix1 textarea").fill("CCO;C1CC")
    page.locator("#olf_run").click()
    assert "invalid SMILES" in _wait_for_text(page, "#olf_result", "error")


def test_vision_tab_samples_and_shows_router_choices(page):
    page.get_by_role("tab", name="Vision (MoH diffusion)").click()
    page.locator("#moh-sample").click()
    _wait_for_text(page, "#moh-status", "sampled 16 images")
    trace = page.locator("#moh-trace").inner_text()
    assert "depth" in trace and "960" in trace  # the first of the tab's 25 DDIM steps
    assert page.locator("#moh-final img").count() == 1


def test_generation3d_tab_generates_a_glb(page):
    page.get_by_role("tab", name="3D parts (MoCA)").click()
    page.locator("#moca-generate").click()
    page.wait_for_function("() => document.body.innerText.includes('generated 12 parts')", timeout=300_000)
    # the download link of the generated GLB is on the page
    assert page.locator("a[href*='.glb'], a[download]").count() >= 1


def test_retrieval_tab_searches_and_shows_group_weights(page):
    page.get_by_role("tab", name="Retrieval (MoA³CIR)").click()
    search_first_product(page)
