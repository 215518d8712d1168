"""``moh bench --suite compute`` plumbing on a tiny budget: one training per model, snapshots at
the budget's fractions, their scores, the JSON and the plot (nothing here depends on timings)."""

import json
import math

import pytest
import torch

import vision.compute as compute
from vision.classifier import FMNISTClassifier
from vision.cli import main as moh_main


@pytest.fixture()
def untrained_classifier(monkeypatch):
    # the real classifier is trained and cached on first use (minutes); the plumbing is what is tested
    torch.manual_seed(0)
    clf = FMNISTClassifier().eval()
    monkeypatch.setattr(compute, "get_classifier", lambda: (clf, {"test_accuracy": float("nan")}))


TINY = dict(model_size="XS", budget_min=0.002, batch_size=4, train_limit=64, n_real=16, n_samples=8, sample_steps=2,
            calibration_steps=1)


def test_compute_suite_scores_every_model_at_every_fraction(tmp_path, untrained_classifier):
    cfg = compute.ComputeConfig(models=("moh", "dit"), **TINY)
    result = compute.run_compute(tmp_path, cfg, log=lambda msg: None, device="cpu")
    assert [m["model"] for m in result["models"]] == ["moh", "dit"]
    for m in result["models"]:
        rows = [c for c in result["curve"] if c["model"] == m["model"]]
        steps = m["steps"]
        assert steps >= 3
        # one snapshot per fraction, at the fraction's step, with the compute spent so far
        assert [r["budget_fraction"] for r in rows] == list(cfg.fractions)
        assert [r["step"] for r in rows] == [max(1, round(steps * f)) for f in cfg.fractions]
        assert rows[-1]["step"] == steps
        minutes = [r["train_min"] for r in rows]
        assert 0 < minutes[0] <= minutes[1] <= minutes[2]
        for r in rows:
            assert all(math.isfinite(r[k]) for k in compute.METRICS)
            assert 0 <= r["confident_share"] <= 1 and 0 <= r["precision"] <= 1 and 0 <= r["recall"] <= 1
    assert result["clock"] == "process CPU time"
    for f in ("compute.json", "compute.png", "samples_moh.png", "samples_dit.png"):
        assert (tmp_path / f).is_file(), f
    assert json.loads((tmp_path / "compute.json").read_text())["curve"] == json.loads(json.dumps(result["curve"]))


def test_same_budget_gives_the_same_snapshots_and_scores(tmp_path, untrained_classifier, monkeypatch):
    """The steps follow from the calibrated step time; with it fixed, two runs are identical."""
    monkeypatch.setattr(compute, "time_train_step", lambda *a, **k: {"ms_per_step": 20.0})
    cfg = compute.ComputeConfig(models=("mamba",), **{**TINY, "budget_min": 0.003})  # 0.18 s / 20 ms = 9 steps
    a = compute.run_compute(tmp_path / "a", cfg, log=lambda msg: None, device="cpu")
    b = compute.run_compute(tmp_path / "b", cfg, log=lambda msg: None, device="cpu")
    assert a["models"][0]["steps"] == 9
    assert [r["step"] for r in a["curve"]] == [3, 6, 9]
    strip = [{k: v for k, v in r.items() if k != "train_min"} for r in a["curve"]]
    assert strip == [{k: v for k, v in r.items() if k != "train_min"} for r in b["curve"]]


def test_cli_writes_json_and_plot_beside_it(tmp_path, untrained_classifier, monkeypatch):
    real_config = compute.ComputeConfig
    monkeypatch.setattr(compute, "ComputeConfig", lambda **kw: real_config(**{**TINY, **kw}))
    path = tmp_path / "compute.json"
    argv = ["bench", "--suite", "compute", "--models", "moh", "--budget-min", "0.002", "--n-samples", "8",
            "--model-size", "XS", "--out", str(tmp_path / "run"), "--json", str(path), "--device", "cpu"]
    assert moh_main(argv) == 0
    data = json.loads(path.read_text())
    assert data["config"]["models"] == ["moh"] and data["config"]["budget_min"] == 0.002
    assert len(data["curve"]) == 3
    assert path.with_suffix(".png").is_file()
    assert moh_main(argv) == 2  # refuses to overwrite without --overwrite


def test_workers_train_each_model_in_its_own_process(tmp_path):
    """With workers the rows come back per model, in the order asked (the shipped classifier scores
    them in the worker processes)."""
    cfg = compute.ComputeConfig(models=("dit", "moh"), workers=2, **{**TINY, "budget_min": 0.001})
    result = compute.run_compute(tmp_path, cfg, log=lambda msg: None, device="cpu")
    assert [m["model"] for m in result["models"]] == ["dit", "moh"]
    assert [(c["model"], c["budget_fraction"]) for c in result["curve"]] == [
        (m, f) for m in ("dit", "moh") for f in cfg.fractions]
    assert (tmp_path / "samples_moh.png").is_file() and (tmp_path / "samples_dit.png").is_file()
