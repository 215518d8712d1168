"""First contact: the hub as a fresh clone serves it (an empty cache, no model variables), in
headless Chromium. Every tab's main action with its default inputs gives a result from what ships
with the project, with no error and no training, and the numbers on the page are rounded to what
they mean."""

import re

import pytest

pytestmark = pytest.mark.browser

NUMBER = re.compile(r"\d+\.\d+")


def overlong(text: str) -> list[str]:
    """Numbers printed with more than 4 significant digits (0.10938815522327412)."""
    return [n for n in NUMBER.findall(text) if len(n.replace(".", "").lstrip("0")) > 4]


def _panel_text(page) -> str:
    return page.get_by_role("tabpanel").inner_text()


def _no_error_and_rounded(page) -> None:
    text = _panel_text(page)
    assert "error:" not in text.lower(), text[:2000]
    assert page.locator(".toast-body.error").count() == 0
    assert not overlong(text), overlong(text)[:5]


def test_overlong_finds_unrounded_numbers():
    assert overlong("r 0.10938815522327412 and 12.5 and 0.001234 and 1394 and 12.345") == ["0.10938815522327412",
                                                                                         "12.345"]


def _wait_for(page, text: str, timeout_ms: int = 240_000) -> None:
    page.wait_for_function("t => document.body.innerText.includes(t)", arg=text, timeout=timeout_ms)


def test_core_tab(fresh_page):
    fresh_page.get_by_role("tab", name="MoE core").click()
    fresh_page.get_by_role("button", name="Route batch").click()
    fresh_page.wait_for_function(
        "() => document.querySelector('#core-routing-summary textarea').value.includes('load entropy')")
    _no_error_and_rounded(fresh_page)


def test_olfaction_tab_compares_the_default_mixtures_with_the_shipped_predictor(fresh_page):
    fresh_page.get_by_role("tab", name="Olfaction (MixScentNet)").click()
    fresh_page.locator("#olf_run").click()
    _wait_for(fresh_page, "top labels")
    text = fresh_page.locator("#olf_result").inner_text()
    assert text.startswith("distance:"), text
    assert 0.0 <= float(re.search(r"distance: ([0-9.]+)", text).group(1)) <= 1.0
    assert "(no label head)" not in text  # the shipped predictor names odour labels
    _no_error_and_rounded(fresh_page)


def test_retrieval_tab_searches_the_first_product_with_the_default_request(fresh_page):
    fresh_page.get_by_role("tab", name="Retrieval (MoA³CIR)").click()
    _wait_for(fresh_page, "ready: 1392 products")
    fresh_page.locator(".thumbnail-item").first.click()
    fresh_page.get_by_role("button", name="Search").click()
    fresh_page.get_by_text("colour").first.wait_for()
    _wait_for(fresh_page, "Top-10 products")
    fresh_page.wait_for_function("() => document.querySelectorAll('.thumbnail-item').length >= 24 + 10")
    _no_error_and_rounded(fresh_page)


def test_vision_tab_samples_the_shipped_model(fresh_page):
    fresh_page.get_by_role("tab", name="Vision (MoH diffusion)").click()
    fresh_page.locator("#moh-sample").click()
    _wait_for(fresh_page, "sampled 16 images")
    assert fresh_page.locator("#moh-final img").count() == 1
    _no_error_and_rounded(fresh_page)


def test_generation3d_tab_generates_with_the_shipped_pipeline(fresh_page):
    fresh_page.get_by_role("tab", name="3D parts (MoCA)").click()
    fresh_page.locator("#moca-generate").click()
    _wait_for(fresh_page, "generated 12 parts")
    assert fresh_page.locator("a[href*='.glb'], a[download]").count() >= 1
    _no_error_and_rounded(fresh_page)


def test_streaming_tab_runs_the_default_stream(fresh_page):
    fresh_page.get_by_role("tab", name="Streaming (MoSAIC)").click()
    fresh_page.get_by_role("button", name="Run stream").click()
    fresh_page.wait_for_function(
        "() => ['mosaic', 'k-grouse', 'petrels'].every(m => document.body.innerText.includes(m))")
    _no_error_and_rounded(fresh_page)
