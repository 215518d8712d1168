"""Suite-wide fixtures: offline settings, and the Gradio hub driven by headless Chromium."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MOE_APPS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_demo_models(root: Path) -> dict[str, str]:
    """Tiny, untrained (or 3-step) models for the tabs that load one; returns the env vars that
    point the hub's tabs at them. Real models come from ``make demo``."""
    import torch

    from generation3d.data import PartDataset
    from generation3d.model import AEConfig, GenConfig
    from generation3d.sampling import MoCAPipeline
    from generation3d.shapes import build_dataset
    from generation3d.train import fit, pretrain
    from olfaction.predictor import MixturePredictor
    from vision.models import MoHBackbone
    from vision.sampling import save_checkpoint

    torch.manual_seed(0)
    MixturePredictor.tiny_example()[0].save_pretrained(root / "olfaction")
    save_checkpoint(MoHBackbone(
        sample_size=16,
        in_channels=1,
        patch_size=4,
        d_model=16,
        d_state=2,
        depth_choices=(1, 3),
        num_levels=3,
        k_levels=2,
        level_layers=1,
    ), root / "vision")
    build_dataset(root / "parts", n_per_category=4, n_scenes=1, n_points=64, seed=0, min_scene_parts=20)
    ds = PartDataset.load(root / "parts")
    ae, _ = pretrain(
        ds, AEConfig(n_latents=4, d_latent=4, d_model=32, n_out=64), steps=3, batch_size=8
    )
    gen, stats, _ = fit(
        ds,
        ae,
        GenConfig(n_latents=4, d_latent=4, max_parts=40, d_model=32, n_layers=1),
        steps=3,
        batch_size=4,
    )
    MoCAPipeline(ae, gen, stats).save(root / "generation3d")
    from tests.retrieval.demo_assets import build_demo_assets

    retrieval_env = build_demo_assets(root / "retrieval")
    return {
        **retrieval_env,
        "MIXSCENT_MODEL": str(root / "olfaction"),
        "MOH_DEMO_CKPT": str(root / "vision"),
        "MOCA_DEMO_CKPT": str(root / "generation3d"),
    }


def _serve_hub(env: dict[str, str], log: Path):
    """Start ``moe-demo`` on a free loopback port with ``env``; yields its URL, stops it after."""
    port = _free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "apps.hub", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 240
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"hub exited early:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail(f"hub did not start in time:\n{log.read_text()[-3000:]}")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def hub_url(tmp_path_factory):
    """Start ``moe-demo`` on 127.0.0.1 in a subprocess, its tabs pointed at tiny demo models;
    yields its URL."""
    log = tmp_path_factory.mktemp("hub") / "hub.log"
    models = _tiny_demo_models(tmp_path_factory.mktemp("demo_models"))
    yield from _serve_hub({**os.environ, "PYTHONPATH": str(ROOT), **models}, log)


#: the environment variables that point hub tabs at other models than the shipped ones
TAB_MODEL_VARS = ("MIXSCENT_MODEL", "MOE_APPS_RETRIEVAL_MODEL", "MOE_APPS_RETRIEVAL_DATA", "MOH_DEMO_CKPT",
                  "MOCA_DEMO_CKPT")


@pytest.fixture(scope="session")
def fresh_hub_url(tmp_path_factory):
    """``moe-demo`` as a fresh clone starts it: an empty cache directory, no model variables, so
    every tab runs on what ships with the project; yields its URL."""
    root = tmp_path_factory.mktemp("fresh_hub")
    env = {k: v for k, v in os.environ.items() if k not in TAB_MODEL_VARS}
    env.update(PYTHONPATH=str(ROOT), MOE_APPS_CACHE=str(root / "empty_cache"))
    yield from _serve_hub(env, root / "hub.log")


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright."""
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


def _open_page(browser, url: str, timeout_ms: int):
    """A new browser page on ``url`` (its own context); closed after the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(timeout_ms)
    pg.goto(url)
    yield pg
    context.close()


@pytest.fixture
def page(browser, hub_url):
    yield from _open_page(browser, hub_url, 120_000)


@pytest.fixture
def fresh_page(browser, fresh_hub_url):
    """A page on the hub as a fresh clone serves it (``fresh_hub_url``)."""
    yield from _open_page(browser, fresh_hub_url, 240_000)
