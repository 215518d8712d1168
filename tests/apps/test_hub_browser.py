"""The hub in a real browser: the core tab routes a batch and shows the load plot."""

import re

import pytest

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
