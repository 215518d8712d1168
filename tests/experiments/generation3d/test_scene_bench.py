"""The scene training-step bench (formerly ``moca bench --suite scenes``): one row per method and
size with same-run ratios, its JSON, and no silent replacement of an existing one."""

import json

import pytest

from experiments.generation3d.scene_bench import SCENE_METHODS, bench_scene_training, main


def test_scene_training_bench_rows_and_same_run_ratios():
    rows = bench_scene_training(parts=(3, 6), tokens=(2,), d_model=16, n_layers=1, top_k=2, n_compressed=1, repeats=1)
    assert [(r["method"], r["parts"]) for r in rows] == [(m, p) for p in (3, 6) for m in SCENE_METHODS]
    for r in rows:
        full = next(f for f in rows if f["method"] == "full" and f["parts"] == r["parts"])
        assert r["speedup_vs_full"] == pytest.approx(full["time_ms"] / r["time_ms"])
        assert r["mem_ratio_vs_full"] == pytest.approx(r["peak_mem_mb"] / full["peak_mem_mb"])
        assert r["peak_mem_mb"] > 0 and r["time_ms"] > 0


def test_scene_bench_writes_the_step_rows(tmp_path, capsys):
    out = tmp_path / "scenes.json"
    assert main(["--parts", "3", "--tokens", "2", "--repeats", "1", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert [r["method"] for r in saved["rows"]] == ["full", "moca", "moca_no_distill"]
    assert saved["settings"] == {"parts": [3], "tokens": [2], "repeats": 1, "top_k": 4, "n_compressed": 2, "seed": 0}
    capsys.readouterr()
    assert main(["--out", str(out)]) == 2  # exists: --overwrite needed
    assert capsys.readouterr().err.startswith("error: ")
