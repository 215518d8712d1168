import csv

import pytest
import torch

import vision.bench as bench
import vision.scaling as scaling
from vision.classifier import FMNISTClassifier


@pytest.fixture()
def untrained_classifier(monkeypatch):
    # the real classifier is trained and cached on first use (minutes); the harness is what is tested here
    torch.manual_seed(0)
    clf = FMNISTClassifier().eval()
    monkeypatch.setattr(bench, "get_classifier", lambda: (clf, {"test_accuracy": float("nan")}))


def test_bench_harness_writes_table_csv_grids_and_routing(tmp_path, untrained_classifier, capsys):
    cfg = bench.BenchConfig(steps=2, batch_size=4, n_samples=8, sample_steps=2, train_limit=64, n_real=16,
                            eval_points=2, models=("moh", "mamba"), scan_lengths=(40,))
    rows = bench.run_bench(tmp_path, cfg)
    assert [r["model"] for r in rows] == ["moh", "mamba"]
    moh, mamba = rows
    assert mamba["fid_vs_mamba"] == 1.0 and mamba["step_time_vs_mamba"] == 1.0
    assert moh["blocks_per_image_step"] <= moh["full_route_blocks"]
    assert moh["full_route_blocks"] == 6 + 2  # deepest scan + one block on each coarse level
    for f in ("bench.csv", "bench.json", "fid_curve.csv", "fid_curve.png", "scan.csv", "samples_moh.png", "samples_mamba.png",
              "routing_moh.png", "routing_moh.csv", "model_moh/config.json"):
        assert (tmp_path / f).is_file(), f
    with open(tmp_path / "fid_curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert [(c["model"], c["step"]) for c in curve] == [("moh", "1"), ("moh", "2"), ("mamba", "1"), ("mamba", "2")]
    scan = list(csv.DictReader(open(tmp_path / "scan.csv")))
    assert float(scan[0]["max_abs_diff"]) < 1e-4
    assert "fmnist_classifier_fid" in capsys.readouterr().out


def test_run_quick_writes_report_rows_and_demo_model(tmp_path, untrained_classifier, monkeypatch):
    import vision.quick as quick

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    tiny = bench.BenchConfig(steps=2, batch_size=4, n_samples=8, sample_steps=2, train_limit=64, n_real=16,
                             eval_points=1, models=("moh", "mamba"), scan_lengths=(16,))
    monkeypatch.setattr(quick, "QUICK", tiny)
    rows = quick.run_quick(tmp_path / "out", None, seed=0)
    assert {r["method"] for r in rows} == {"moh", "mamba"}
    assert all(set(r) == {"app", "task", "method", "metric", "value", "split", "seed"} for r in rows)
    assert any(r["metric"] == "blocks_saved_vs_full_route" for r in rows)
    assert (tmp_path / "out" / "vision.csv").is_file()
    assert (tmp_path / "cache" / "vision" / "demo_model" / "config.json").is_file()
    from vision.demo import default_checkpoint
    from vision.sampling import checkpoint_data

    sh3d = tmp_path / "cache" / "vision" / "demo_model_sweethome3d"
    assert default_checkpoint("sweethome3d") == str(sh3d)
    from common.errors import DataError
    from common.sweethome3d import furniture_dir

    try:
        furniture_dir()
    except DataError:
        return  # the second dataset is not installed here
    assert checkpoint_data(sh3d / "checkpoint")["source"] == "sweethome3d"
    assert (sh3d / "ATTRIBUTION.csv").is_file()


def test_fid_curve_table_pivots_per_step():
    curve = [{"model": "moh", "step": 10, "fmnist_classifier_fid": 3.0},
             {"model": "mamba", "step": 10, "fmnist_classifier_fid": 4.0},
             {"model": "moh", "step": 20, "fmnist_classifier_fid": 2.0}]
    table = bench.fid_curve_table(curve)
    assert table[0] == {"step": 10, "moh": 3.0, "mamba": 4.0}
    assert table[1]["moh"] == 2.0 and table[1]["mamba"] != table[1]["mamba"]  # missing -> NaN


def test_scaling_harness_rows_summary_ratios_and_plot(tmp_path, monkeypatch):
    """Two tiny budgets x two seeds at the first: one row per (budget, seed, model); the summary's
    FID ratio is the per-seed mean of FID / plain Mamba's (so Mamba's is exactly 1)."""
    import json

    import vision.evaluate

    feats = {}

    def fake_fid(real, fake, encoder=None):  # a cheap stand-in for the encoder; the harness is under test
        key = float(fake.mean())
        feats.setdefault(key, len(feats) + 1.0)
        return feats[key]

    monkeypatch.setattr(vision.evaluate, "efficientnet_lite0_fid", fake_fid)
    monkeypatch.setattr(scaling, "SCALING_BUDGETS", (scaling.Budget("S", 8, 2, seeds=(0, 1)), scaling.Budget("M", 16, 3)))
    cfg = scaling.ScalingConfig(budgets=("S", "M"), datasets=("fashion-mnist",), models=("moh", "mamba"), size=32,
                              batch_size=4, train_limit=32, n_real=8, n_samples=4, sample_steps=2)
    res = scaling.run_scaling(tmp_path, cfg)
    assert [(r["budget"], r["seed"], r["model"]) for r in res["rows"]] == [
        ("S", 0, "moh"), ("S", 0, "mamba"), ("S", 1, "moh"), ("S", 1, "mamba"), ("M", 0, "moh"), ("M", 0, "mamba")]
    by = {(r["budget"], r["seed"], r["model"]): r["efficientnet_lite0_fid"] for r in res["rows"]}
    s_moh = next(r for r in res["summary"] if (r["budget"], r["model"]) == ("S", "moh"))
    expected = (by["S", 0, "moh"] / by["S", 0, "mamba"] + by["S", 1, "moh"] / by["S", 1, "mamba"]) / 2
    assert s_moh["fid_vs_mamba"] == pytest.approx(expected) and s_moh["seeds"] == 2
    assert all(r["fid_vs_mamba"] == 1.0 for r in res["summary"] if r["model"] == "mamba")
    assert {r["d_model"] for r in res["rows"]} == {8, 16}
    for f in ("scaling.csv", "scaling_summary.csv", "scaling.json", "scaling.png", "samples_fashion-mnist_S_moh.png"):
        assert (tmp_path / f).is_file(), f
    assert json.loads((tmp_path / "scaling.json").read_text())["summary"][0]["dataset"] == "fashion-mnist"


def test_scaling_resume_keeps_finished_runs(tmp_path, monkeypatch):
    """An interrupted scaling run resumes: the runs recorded in scaling_rows.jsonl are not repeated,
    the missing one is, and the rows are those of an uninterrupted run; other settings start afresh."""
    import vision.evaluate

    calls = []

    def fake_fid(real, fake, encoder=None):
        calls.append(1)
        return float(fake.mean()) + 10.0

    monkeypatch.setattr(vision.evaluate, "efficientnet_lite0_fid", fake_fid)
    monkeypatch.setattr(scaling, "SCALING_BUDGETS", (scaling.Budget("S", 8, 2, seeds=(0,)),))
    cfg = scaling.ScalingConfig(budgets=("S",), datasets=("fashion-mnist",), models=("moh", "mamba"), size=32,
                              batch_size=4, train_limit=32, n_real=8, n_samples=4, sample_steps=2)
    full = scaling.run_scaling(tmp_path, cfg)
    assert len(calls) == 2
    log = tmp_path / "scaling_rows.jsonl"
    first = log.read_text().splitlines()[0]
    log.write_text(first + "\n" + '{"torn": ')  # interrupted during the second run
    res = scaling.run_scaling(tmp_path, cfg, resume=True)
    assert len(calls) == 3  # only mamba ran again
    strip = [{k: v for k, v in r.items() if k not in ("wall_s", "train_s_per_step")} for r in res["rows"]]
    assert strip == [{k: v for k, v in r.items() if k not in ("wall_s", "train_s_per_step")} for r in full["rows"]]
    other = scaling.ScalingConfig(**{**cfg.__dict__, "n_samples": 6})
    scaling.run_scaling(tmp_path, other, resume=True)
    assert len(calls) == 5  # different settings: nothing reused
