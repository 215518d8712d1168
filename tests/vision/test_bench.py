import csv

import pytest
import torch

import vision.bench as bench
from vision.classifier import FMNISTClassifier


@pytest.fixture()
def untrained_classifier(monkeypatch):
    # the real classifier is trained and cached on first use (minutes); the harness is what is tested here
    torch.manual_seed(0)
    clf = FMNISTClassifier().eval()
    monkeypatch.setattr(bench, "get_classifier", lambda: (clf, {"test_accuracy": float("nan")}))


def test_bench_harness_writes_table_csv_grids_and_routing(tmp_path, untrained_classifier, capsys):
    cfg = bench.BenchConfig(steps=2, batch_size=4, n_samples=8, sample_steps=2, train_limit=64, n_real=16,
                            eval_points=2, models=("moh", "mamba"))
    rows = bench.run_bench(tmp_path, cfg)
    assert [r["model"] for r in rows] == ["moh", "mamba"]
    moh, mamba = rows
    assert mamba["fid_vs_mamba"] == 1.0 and mamba["step_time_vs_mamba"] == 1.0
    assert moh["blocks_per_image_step"] <= moh["full_route_blocks"]
    assert moh["full_route_blocks"] == 6 + 2  # deepest scan + one block on each coarse level
    for f in ("bench.csv", "bench.json", "fid_curve.csv", "fid_curve.png", "samples_moh.png", "samples_mamba.png",
              "routing_moh.png", "routing_moh.csv", "model_moh/config.json"):
        assert (tmp_path / f).is_file(), f
    with open(tmp_path / "fid_curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert [(c["model"], c["step"]) for c in curve] == [("moh", "1"), ("moh", "2"), ("mamba", "1"), ("mamba", "2")]
    assert "fmnist_classifier_fid" in capsys.readouterr().out


def test_run_quick_writes_report_rows_and_demo_model(tmp_path, untrained_classifier, monkeypatch):
    import vision.quick as quick

    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    tiny = bench.BenchConfig(steps=2, batch_size=4, n_samples=8, sample_steps=2, train_limit=64, n_real=16,
                             eval_points=1, models=("moh", "mamba"))
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
