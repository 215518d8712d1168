import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from common.trainer import Trainer, TrainingDiverged, shard_indices

ROOT = Path(__file__).resolve().parents[2]


def _problem():
    torch.manual_seed(0)
    x = torch.randn(128, 2)
    y = x @ torch.tensor([2.0, -1.0])
    return x, y


def _trainer(model, x, y, tmp_path, epochs, val=True, patience=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return Trainer(
        model,
        opt,
        loss_fn=lambda m, idx: nn.functional.mse_loss(m(x[idx]).squeeze(1), y[idx]),
        make_batches=lambda epoch: shard_indices(len(x), epoch, 0, 16),
        val_fn=(lambda m: float(nn.functional.mse_loss(m(x).squeeze(1), y))) if val else None,
        max_epochs=epochs,
        patience=patience,
        ckpt_dir=tmp_path,
        progress=False,
    )


def test_fit_reduces_loss_and_saves_best(tmp_path):
    x, y = _problem()
    torch.manual_seed(1)
    model = nn.Linear(2, 1)
    res = _trainer(model, x, y, tmp_path, 8).fit()
    assert res.history[-1]["val_score"] < 0.1 * res.history[0]["val_score"]
    assert (tmp_path / "best" / "model.safetensors").is_file()
    assert res.best_epoch == min(range(8), key=lambda e: res.history[e]["val_score"])


def test_resume_continues_where_it_stopped(tmp_path):
    x, y = _problem()
    torch.manual_seed(1)
    straight = nn.Linear(2, 1)
    _trainer(straight, x, y, tmp_path / "a", 6).fit()
    torch.manual_seed(1)
    first = nn.Linear(2, 1)
    _trainer(first, x, y, tmp_path / "b", 3).fit()
    torch.manual_seed(99)  # a different init: resuming must overwrite it from last/
    resumed = nn.Linear(2, 1)
    res = _trainer(resumed, x, y, tmp_path / "b", 6).fit()
    assert [r["epoch"] for r in res.history] == list(range(6))
    torch.testing.assert_close(resumed.weight, straight.weight)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    x, y = _problem()
    model = nn.Linear(2, 1)
    _trainer(model, x, y, tmp_path, 2).fit()
    good = (tmp_path / "last" / "model.safetensors").read_bytes()
    y_bad = y.clone()
    y_bad[5] = float("nan")
    with pytest.raises(TrainingDiverged, match="loss became nan"):
        _trainer(model, x, y_bad, tmp_path, 4).fit()
    assert (tmp_path / "last" / "model.safetensors").read_bytes() == good


def test_early_stopping(tmp_path):
    x, y = _problem()
    model = nn.Linear(2, 1)
    t = _trainer(model, x, y, tmp_path, 50, patience=2)
    t.val_fn = lambda m: 1.0  # never improves after the first epoch
    res = t.fit()
    assert res.stopped_early and len(res.history) == 3


def test_shards_are_disjoint_and_cover_equally():
    a = torch.cat(shard_indices(10, 0, 0, 3, rank=0, world=2))
    b = torch.cat(shard_indices(10, 0, 0, 3, rank=1, world=2))
    assert len(a) == len(b) == 5 and not set(a.tolist()) & set(b.tolist())


def test_ddp_two_processes_with_torchrun(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29517",
        str(Path(__file__).with_name("ddp_train_script.py")),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = torch.load(tmp_path / "result.pt")
    w0, w1 = result["weights"]
    assert torch.equal(w0, w1)  # DDP keeps replicas identical
    torch.testing.assert_close(w0, torch.tensor([1.0, -2.0, 0.5, 0.3]), atol=0.05, rtol=0)
    assert (tmp_path / "ck" / "last" / "model.safetensors").is_file()
