"""The hub under load, on 127.0.0.1: 20 concurrent requests are all answered correctly and are
served concurrently (up to the queue's limit), and a checkpoint path outside the allow-list is
refused in the tab before anything is read.

Concurrency is proven by overlap, not timings: a recording wrapper around the core tab's work
counts the requests inside it at once and holds each one until ``CONCURRENCY`` are inside
together (or gives up after a bound). Served one at a time, at most one is ever inside.
"""

import threading
from pathlib import Path

import pytest
import torch

import apps.core.demo as core_demo
from apps.core.routing_demo import _skewed_tokens

CONCURRENCY = 4
N_REQUESTS = 20
GATHER_TIMEOUT_S = 60  # bound only: a serial server gives up here instead of hanging the test


class InFlightRecorder:
    """Wraps a function; records how many calls run at once, holding each call until ``target``
    calls are inside together (or ``timeout_s`` has passed once, after which nobody waits)."""

    def __init__(self, fn, target: int, timeout_s: float):
        self.fn, self.target, self.timeout_s = fn, target, timeout_s
        self.now = self.max = self.calls = 0
        self.gave_up = False
        self.cond = threading.Condition()

    def __call__(self, *args, **kwargs):
        with self.cond:
            self.calls += 1
            self.now += 1
            self.max = max(self.max, self.now)
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.max >= self.target or self.gave_up, self.timeout_s):
                self.gave_up = True
                self.cond.notify_all()
        try:
            return self.fn(*args, **kwargs)
        finally:
            with self.cond:
                self.now -= 1


@pytest.fixture(scope="module")
def hub_url(tmp_path_factory):
    """``build_hub(CONCURRENCY)`` launched in this process on 127.0.0.1 (closed afterwards), its
    vision tab pointed at a tiny operator checkpoint; yields ``(url, vision checkpoint)``."""
    from tests.vision.conftest import tiny_moh
    from vision.sampling import save_checkpoint

    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("hub_load")
    mp.setenv("MOE_APPS_CACHE", str(root / "cache"))
    torch.manual_seed(0)
    save_checkpoint(tiny_moh(), root / "vision_ckpt")
    mp.setenv("MOH_DEMO_CKPT", str(root / "vision_ckpt"))
    from apps.hub import build_hub

    hub = build_hub(CONCURRENCY)
    _, url, _ = hub.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True)
    try:
        yield url, root / "vision_ckpt"
    finally:
        hub.close()
        mp.undo()


def _expected_counts(num_experts: int, k: int, num_tokens: int, skew: float, seed: int) -> list[int]:
    """Assignments per expert of softmax top-k routing, computed directly: top-k of the gate logits
    (softmax is monotonic) of the demo's synthetic tokens."""
    x, w = _skewed_tokens(num_tokens, num_experts, skew, torch.Generator().manual_seed(seed))
    top = torch.topk(x @ w.t(), k, dim=-1).indices
    return torch.bincount(top.flatten(), minlength=num_experts).tolist()


def test_twenty_concurrent_requests_are_served_concurrently_and_correctly(hub_url, monkeypatch):
    from gradio_client import Client

    url, _ = hub_url
    recorder = InFlightRecorder(core_demo.route_batch, CONCURRENCY, GATHER_TIMEOUT_S)
    monkeypatch.setattr(core_demo, "route_batch", recorder)
    client = Client(url, verbose=False)
    params = [(4 + i % 5, 1 + i % 3, 16 * (i + 1), 3.0, i) for i in range(N_REQUESTS)]
    jobs = [client.submit("softmax top-k", *p, api_name="/route_batch") for p in params]
    results = [job.result(timeout=300) for job in jobs]

    assert recorder.calls == N_REQUESTS
    assert not recorder.gave_up, f"only {recorder.max} request(s) were ever served at once"
    # served concurrently, and never more at once than the configured limit
    assert recorder.max == CONCURRENCY
    for (num_experts, k, num_tokens, skew, seed), (_, summary, table) in zip(params, results, strict=True):
        assert f"tokens {num_tokens}" in summary
        rows = table["data"]
        assert [r[0] for r in rows] == list(range(num_experts))
        assert [r[1] for r in rows] == _expected_counts(num_experts, k, num_tokens, skew, seed)
        assert sum(r[2] for r in rows) == pytest.approx(1.0, abs=1e-3)


def test_vision_tab_refuses_paths_outside_the_allow_list_and_reads_nothing(hub_url, monkeypatch, tmp_path):
    from gradio_client import Client

    import vision.models

    url, ckpt = hub_url
    loaded = []
    real_load = vision.models.load_backbone
    monkeypatch.setattr(vision.models, "load_backbone", lambda path: loaded.append(path) or real_load(path))
    client = Client(url, verbose=False)
    (tmp_path / "escape").symlink_to("/etc", target_is_directory=True)
    for path in ("/etc", f"{ckpt}/../..", str(tmp_path / "escape")):
        status = client.predict(path, 2, 2, 0, api_name="/moh_sample")[3]
        assert status.startswith("**error:** checkpoint directory") and "outside" in status, status
        assert "Traceback" not in status
    assert loaded == []
    # the operator's configured checkpoint ($MOH_DEMO_CKPT) is served
    status = client.predict(str(ckpt), 2, 2, 0, api_name="/moh_sample")[3]
    assert status == "sampled 2 images in 2 steps"
    assert [p.resolve() for p in loaded] == [ckpt.resolve()]


# ----------------------------------------------------------------------------- every tab at once


@pytest.fixture(scope="module")
def every_tab_hub(tmp_path_factory):
    """The hub with every tab pointed at tiny demo models (``tests.conftest._tiny_demo_models``),
    launched in this process on 127.0.0.1; yields ``(url, models env)``."""
    from tests.conftest import _tiny_demo_models

    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("hub_every_tab")
    mp.setenv("MOE_APPS_CACHE", str(root / "cache"))
    models = _tiny_demo_models(root / "models")
    for key, value in models.items():
        mp.setenv(key, value)
    from apps.hub import build_hub

    hub = build_hub(CONCURRENCY)
    _, url, _ = hub.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True)
    try:
        yield url, models
    finally:
        hub.close()
        mp.undo()


def test_every_tab_answers_concurrent_requests(every_tab_hub, tmp_path):
    """Six requests per tab, all tabs at once (identical requests among them, which share output
    files by content), over HTTP: every one is answered with a result, none with an error."""
    from gradio_client import Client, handle_file
    from PIL import Image

    from olfaction.demo import DEFAULT_DATASET, EXAMPLES

    url, models = every_tab_hub
    client = Client(url, verbose=False)
    client.predict(api_name="/retrieval_products")
    ref = tmp_path / "ref.png"
    Image.new("RGB", (64, 64), (200, 30, 30)).save(ref)
    mixtures = list(EXAMPLES.values())
    seeds = [0, 0, 1, 1, 2, 3]  # pairs of identical requests
    jobs = {"olfaction": [], "retrieval": [], "generation3d": [], "vision": [], "streaming": []}
    for i, seed in enumerate(seeds):
        a, b = mixtures[seed % len(mixtures)], mixtures[(seed + 1) % len(mixtures)]
        jobs["olfaction"].append(client.submit(a, b, DEFAULT_DATASET, api_name="/olfaction_compare"))
        jobs["retrieval"].append(client.submit(handle_file(str(ref)), ["make it blue", "add stripes"][i % 2], "",
                                               api_name="/retrieval_search"))
        jobs["generation3d"].append(client.submit(models["MOCA_DEMO_CKPT"], "chair", 4, seed, 2, "",
                                                  api_name="/moca_generate"))
        jobs["vision"].append(client.submit(models["MOH_DEMO_CKPT"], 2, 2, seed, api_name="/moh_sample"))
        jobs["streaming"].append(client.submit(15, 2, 2, 0.6, 0.02, "abrupt", 200, seed, api_name="/mosaic_run"))
    results = {tab: [job.result(timeout=600) for job in tab_jobs] for tab, tab_jobs in jobs.items()}

    for text, img_a, img_b in results["olfaction"]:
        assert text.startswith("**distance:"), text
        assert Path(img_a).is_file() and Path(img_b).is_file()
    for items, _routing in results["retrieval"]:
        assert len(items) >= 1
    for _viewer, preview, download, status, _rows in results["generation3d"]:
        assert not status.startswith("**error"), status
        assert Path(preview).is_file() and Path(download).is_file()
    for final, _trace, _plot, status, _step in results["vision"]:  # (the frames are a gr.State)
        assert status == "sampled 2 images in 2 steps", status
        assert Path(final).is_file()
    for _plot, table in results["streaming"]:
        assert table["data"], table
    # identical requests give identical answers
    assert results["olfaction"][0][0] == results["olfaction"][1][0]
    assert results["generation3d"][0][3] == results["generation3d"][1][3]
