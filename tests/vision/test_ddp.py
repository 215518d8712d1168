"""``moh train`` under torchrun (2 processes, gloo): the same global batch split over two ranks
gives the single-process weights, MoH's routed (partly unused) experts train under DDP, and
only rank 0 writes the checkpoint."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    for i in range(16):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(d / f"{i}.png")
    return d


def _train(folder: Path, out: Path, model: str, nproc: int, port: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = ["-m", "vision.cli", "train", "--data", str(folder), "--size", "16", "--channels", "1", "--model", model,
            "--steps", "3", "--batch-size", "8", "--checkpoint-every", "0", "--out", str(out), "--seed", "0"]
    launcher = [sys.executable] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(port)]
    proc = subprocess.run(launcher + args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _weights(out: Path) -> dict:
    return load_file(next((out / "checkpoint").glob("*.safetensors")))


def test_two_ranks_match_one_process_on_the_same_global_batch(folder, tmp_path):
    _train(folder, tmp_path / "one", "mamba", 1, 0)
    proc = _train(folder, tmp_path / "two", "mamba", 2, 29531)
    one, two = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert one.keys() == two.keys()
    for k in one:
        torch.testing.assert_close(two[k], one[k], atol=1e-5, rtol=1e-4)
    init = _weights_after_zero_steps(folder, tmp_path)
    moved = sum(not torch.equal(one[k], init[k]) for k in one)
    assert moved > 0  # training changed the weights, so the comparison is not vacuous
    assert proc.stdout.count("trained mamba") == 1  # one report: rank 0's
    assert (tmp_path / "two" / "checkpoint" / "scheduler_config.json").is_file()


def _weights_after_zero_steps(folder: Path, tmp_path: Path) -> dict:
    from vision.models import build_backbone

    torch.manual_seed(0)
    return {k: v.detach() for k, v in build_backbone("mamba", sample_size=16, in_channels=1).state_dict().items()}


def test_moh_routes_train_under_ddp(folder, tmp_path):
    _train(folder, tmp_path / "moh", "moh", 2, 29532)
    w = _weights(tmp_path / "moh")
    assert all(torch.isfinite(v).all() for v in w.values())
