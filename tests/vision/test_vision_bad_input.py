"""Bad input to ``moh`` and the vision tab: absurd counts and sizes refused before any work, image
folders with odd or hostile files, malformed checkpoint state and progress files, interrupted
training and sampling, and the tab's sampling under concurrent requests. Every case is
time-bounded by the helpers of ``tests/bad_input.py``."""

from __future__ import annotations

import json
import signal
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.bad_input import assert_refused, assert_stops_on_signal
from tests.vision.conftest import tiny_moh
from vision.cli import main as moh_main
from vision.sampling import CHECKPOINT, STATE, save_checkpoint

BIG = "1000000000000"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A tiny MoH checkpoint (16x16 grayscale) with a valid train_state.json; its weights are
    perturbed off the zero-initialised output so that samples depend on the seed."""
    d = tmp_path_factory.mktemp("ck") / "ck"
    torch.manual_seed(0)
    model = tiny_moh()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    save_checkpoint(model, d)
    (d / STATE).write_text(json.dumps({"step": 1, "data": {"source": "fashion-mnist", "size": 16, "channels": 1,
                                                           "seed": 0}}))
    return d


# ----------------------------------------------------------------------------- counts and sizes


@pytest.mark.parametrize(("argv", "match"), [
    (["sample", "--ckpt", "{ck}", "--n", BIG], "--n 1,000,000,000,000 is over the documented maximum of 4,096"),
    (["sample", "--ckpt", "{ck}", "--n", BIG, "--force"], "of memory, more than this machine's"),
    (["sample", "--ckpt", "{ck}", "--steps", "5000"], "--steps 5,000 is over the maximum of 1,000"),
    (["sample", "--ckpt", "{ck}", "--steps", "5000", "--force"], "the training schedule has 1,000 timesteps"),
    (["sample", "--ckpt", "{ck}", "--n", "100000000", "--force"], "more than this machine's"),
    (["train", "--steps", BIG], "--steps 1,000,000,000,000 is over the documented maximum of 200,000"),
    (["train", "--batch-size", "100000"], "--batch-size 100,000 is over the documented maximum"),
    (["train", "--size", "100000"], "--size 100,000 is over the documented maximum of 512"),
    (["train", "--size", "8192", "--batch-size", "4096", "--force"], "of memory"),
    (["train", "--limit", BIG], "--limit 1,000,000,000,000 is over the documented maximum"),
    (["train", "--patch-size", "64", "--size", "32"], "larger than the image"),
    (["eval", "--ckpt", "{ck}", "--n", BIG], "--n 1,000,000,000,000 is over the documented maximum"),
    (["eval", "--ckpt", "{ck}", "--n-real", BIG], "--n-real 1,000,000,000,000 is over the documented maximum"),
    (["bench", "--suite", "quick", "--steps", BIG], "--steps 1,000,000,000,000 is over the documented maximum"),
    (["bench", "--suite", "quick", "--n-samples", BIG], "--n-samples 1,000,000,000,000 is over"),
    (["bench", "--suite", "sizes", "--batch-size", BIG], "--batch-size 1,000,000,000,000 is over"),
    (["bench", "--suite", "compute", "--budget-min", BIG], "--budget-min 1,000,000,000,000"),
    (["bench", "--suite", "compute", "--steps", "5"], "--steps does not apply to --suite compute"),
    (["bench", "--suite", "quick", "--budget-min", "5"], "--budget-min applies to --suite compute only"),
    (["train", "--threads", "100000"], "in [1, 256]"),
])
def test_absurd_counts_are_refused_before_work(argv, match, ckpt, tmp_path):
    argv = [a.replace("{ck}", str(ckpt)) for a in argv] + ["--out", str(tmp_path / "out")]
    if argv[0] == "bench" and "sizes" in argv:
        argv = argv[:-2]
    assert_refused(moh_main, argv, tmp_path, match=match, timeout_s=60)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- image folders


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


def _bomb_png(path: Path, side: int = 9000) -> None:
    """A 1-bit PNG of ``side`` x ``side`` pixels whose header alone says 81 megapixels (the
    compressed rows are a few kB)."""
    row = b"\x00" + b"\x00" * ((side + 7) // 8)
    ihdr = side.to_bytes(4, "big") * 2 + bytes([1, 0, 0, 0, 0])
    idat = zlib.compress(row * side, 9)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat)
                     + _png_chunk(b"IEND", b""))


def _folder_with(tmp_path: Path, name: str, write) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    from PIL import Image

    Image.new("RGB", (20, 20), (10, 200, 30)).save(folder / "a_ok.png")
    write(folder / name)
    return folder


@pytest.mark.parametrize(("name", "write", "match"), [
    ("bomb.png", _bomb_png, "over the limit of 64,000,000"),
    ("cut.png", lambda p: p.write_bytes(_small_png_bytes()[:-40]), "truncated"),
    ("notes.png", lambda p: p.write_text("not an image"), "not an image"),
])
def test_bad_images_in_a_training_folder_are_refused(tmp_path, name, write, match):
    folder = _folder_with(tmp_path, name, write)
    line = assert_refused(moh_main, ["train", "--data", str(folder), "--size", "16", "--steps", "1",
                                     "--out", str(tmp_path / "run")], tmp_path, match=match, timeout_s=90)
    assert name in line
    assert not (tmp_path / "run").exists()


def _small_png_bytes() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("suffix", [".png", ".tif"])
def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path, suffix):
    from PIL import Image

    from vision.data import load_image_folder

    folder = tmp_path / "imgs"
    folder.mkdir()
    # a 16-bit ramp: the old reader clipped every value over 255 to white
    values = np.linspace(0, 65535, 16 * 16).reshape(16, 16).astype(np.uint16)
    Image.fromarray(values).save(folder / f"ramp{suffix}")
    x = load_image_folder(folder, 16, channels=1)
    expected = np.rint(values.astype(np.float64) * 255 / 65535) / 127.5 - 1
    np.testing.assert_allclose(x[0, 0].numpy(), expected, atol=1e-6)
    assert (x < 0.99).float().mean() > 0.9  # not white


def test_transparent_icon_is_composited_on_white(tmp_path):
    from PIL import Image

    from vision.data import load_image_folder

    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGBA", (16, 16), (0, 0, 0, 0)).save(folder / "clear.png")
    x = load_image_folder(folder, 16, channels=3)
    assert torch.allclose(x, torch.ones_like(x))


# ----------------------------------------------------------------------------- checkpoint state, progress files


@pytest.mark.parametrize(("state", "match"), [
    ([1, 2], "must hold a JSON object, got list"),
    ({"step": 1, "data": "fashion-mnist"}, "entry 'data' must be an object"),
    ({"step": 1, "data": {"source": "fashion-mnist", "size": "16", "channels": 1, "seed": 0}},
     "'size' missing or not an integer"),
    ({"step": 1, "data": {"size": 16, "channels": 1, "seed": 0}}, "'source' missing or not a string"),
])
def test_malformed_train_state_is_named(tmp_path, ckpt, state, match):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(ckpt, ck)
    (ck / STATE).write_text(json.dumps(state))
    line = assert_refused(moh_main, ["eval", "--ckpt", str(ck), "--out", str(tmp_path / "m.json")], tmp_path,
                          match=match)
    assert STATE in line


def test_non_utf8_train_state_is_refused(tmp_path, ckpt):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(ckpt, ck)
    (ck / STATE).write_bytes(b"\xff\xfe{")
    assert_refused(moh_main, ["eval", "--ckpt", str(ck)], tmp_path, match=STATE)


def test_bad_inception_weights_fail_before_sampling(tmp_path, ckpt):
    bad = tmp_path / "inception.pt"
    bad.write_bytes(b"not torchscript")
    assert_refused(moh_main, ["eval", "--ckpt", str(ckpt), "--n", "4096", "--steps", "1000", "--inception-weights",
                              str(bad)], tmp_path, match="cannot load Inception TorchScript", timeout_s=30)


# ----------------------------------------------------------------------------- interrupted runs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_training_stops_on_signal_with_a_whole_checkpoint(tmp_path, sig):
    """A checkpoint every step, so the signal very likely lands during a write."""
    from vision.models import load_backbone

    fm = tmp_path / "imgs"
    fm.mkdir()
    from PIL import Image

    for i in range(4):
        Image.fromarray(np.full((16, 16), 60 * i, dtype=np.uint8)).save(fm / f"{i}.png")
    argv = ["-m", "vision.cli", "train", "--data", str(fm), "--channels", "1", "--size", "16", "--steps", "100000",
            "--checkpoint-every", "1", "--batch-size", "4", "--out", str(tmp_path / "run")]
    text = assert_stops_on_signal(argv, tmp_path, sig, ready="training moh", within_s=20)
    if sig == signal.SIGINT:
        assert "interrupted" in text
    assert not list((tmp_path / "run").glob(f".{CHECKPOINT}.*"))
    if (tmp_path / "run" / CHECKPOINT).exists():  # the last whole checkpoint loads
        load_backbone(tmp_path / "run" / CHECKPOINT)


def test_sampling_stops_on_sigint(tmp_path, ckpt):
    argv = ["-m", "vision.cli", "sample", "--ckpt", str(ckpt), "--n", "4096", "--steps", "1000",
            "--out", str(tmp_path / "grid.png")]
    text = assert_stops_on_signal(argv, tmp_path, signal.SIGINT, ready="sampling 4096 images")
    assert "interrupted" in text
    assert not (tmp_path / "grid.png").exists()


def test_sizes_bench_stops_on_sigterm_without_waiting_for_its_worker(tmp_path):
    """SIGTERM while the fresh worker process times 100,000 steps: the worker is ended, not waited for."""
    import os
    import subprocess
    import sys
    import time

    from tests.bad_input import ROOT, stray_temps

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vision.cli", "bench", "--suite", "sizes", "--sizes", "XS",
                             "--steps", "100000"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # bounded: the process prints it within its start-up
        assert "measuring sizes" in line, line
        time.sleep(20)  # the worker is spawned and inside its timed steps
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert code == 143, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    assert not stray_temps(tmp_path)


def test_checkpoint_write_defers_a_signal_until_complete(tmp_path, monkeypatch):
    """SIGINT raised in the middle of the checkpoint write: the write completes, then the
    interrupt arrives; no temporary directory is left."""
    import vision.train as train
    from vision.models import load_backbone

    model = tiny_moh()
    real = train.save_checkpoint

    def save_then_interrupt(m, path):
        real(m, path)
        signal.raise_signal(signal.SIGINT)  # arrives while the state file is still to be written

    monkeypatch.setattr(train, "save_checkpoint", save_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        train._save_atomic(model, tmp_path, {"step": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT]
    assert json.loads((tmp_path / CHECKPOINT / STATE).read_text()) == {"step": 1}
    load_backbone(tmp_path / CHECKPOINT)


# ----------------------------------------------------------------------------- the hub tab


@pytest.fixture()
def tab_ckpt(ckpt, monkeypatch):
    monkeypatch.setenv("MOE_APPS_DEMO_ROOTS", str(ckpt.parent))
    return ckpt


@pytest.mark.parametrize(("ckpt_v", "n", "steps", "seed", "match"), [
    ("{ck}", 4, 3, 1e30, "seed must be a whole number"),
    ("{ck}", 4, 3, float("nan"), "seed must be a whole number"),
    ("{ck}", 10**9, 3, 0, "images must be a whole number from 1 to 64"),
    ("{ck}", 4, 2.5, 0, "DDIM steps must be a whole number"),
    ("/tmp/x\x00y", 4, 3, 0, "or the directory of a trained checkpoint"),
    ("/etc", 4, 3, 0, "outside the directories this server allows"),
    ("{missing}", 4, 3, 0, "error:"),
])
def test_tab_errors_are_page_messages(tab_ckpt, ckpt_v, n, steps, seed, match):
    from vision.demo import run_sample

    ckpt_v = ckpt_v.replace("{ck}", str(tab_ckpt)).replace("{missing}", str(tab_ckpt.parent / "missing"))
    msg = run_sample(ckpt_v, n, steps, seed)
    assert isinstance(msg, str) and msg.startswith("**error:**") and match in msg, msg
    assert "Traceback" not in msg


def test_tab_serves_eight_concurrent_requests(tab_ckpt):
    from matplotlib.figure import Figure

    from vision.demo import run_sample

    seeds = list(range(8))
    serial = {s: run_sample(str(tab_ckpt), 4, 3, s) for s in seeds}
    results: dict[int, object] = {}
    barrier = threading.Barrier(len(seeds))

    def request(seed: int) -> None:
        barrier.wait(30)
        results[seed] = run_sample(str(tab_ckpt), 4, 3, seed)

    threads = [threading.Thread(target=request, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert sorted(results) == seeds
    for seed, result in results.items():
        assert not isinstance(result, str), result
        grid, frames, rows, fig = result
        assert isinstance(fig, Figure) and len(frames) == len(rows) == 3
        np.testing.assert_array_equal(grid, serial[seed][0])
        assert rows == serial[seed][2]
    assert not np.array_equal(results[0][0], results[5][0])


@pytest.mark.parametrize("name", ["../../../x", "/etc", "fashion-mnist/../../x", ""])
def test_tab_dataset_is_a_name_never_a_path(name):
    from common.errors import InputError
    from vision.demo import default_checkpoint

    with pytest.raises(InputError, match="dataset must be one of"):
        default_checkpoint(name)
