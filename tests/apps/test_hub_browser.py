"""The hub in a real browser: the core tab routes a batch and shows the load plot."""

import re

import pytest

from apps.registry import APPS

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
