"""``experiments.vision.scaling``: the scaling trend's harness (rows, summary ratios, plot), its
resume from the progress file, and the refusal of a malformed one (formerly ``moh bench --suite
scaling``)."""

import json

import pytest

import experiments.vision.scaling as scaling
from tests.bad_input import assert_refused


def test_scaling_harness_rows_summary_ratios_and_plot(tmp_path, monkeypatch):
    """Two tiny budgets x two seeds at the first: one row per (budget, seed, model); the summary's
    FID ratio is the per-seed mean of FID / plain Mamba's (so Mamba's is exactly 1)."""
    feats = {}

    def fake_fid(real, fake, encoder=None):  # a cheap stand-in for the encoder; the harness is under test
        key = float(fake.mean())
        feats.setdefault(key, len(feats) + 1.0)
        return feats[key]

    monkeypatch.setattr(scaling, "efficientnet_lite0_fid", fake_fid)
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
    calls = []

    def fake_fid(real, fake, encoder=None):
        calls.append(1)
        return float(fake.mean()) + 10.0

    monkeypatch.setattr(scaling, "efficientnet_lite0_fid", fake_fid)
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


def _scaling_record(**row) -> dict:
    base = {"dataset": "fashion-mnist", "budget": "S", "budget_index": 0, "d_model": 16, "steps": 200, "seed": 0,
            "model": "moh", "params": 1000, "train_s_per_step": 0.1, "efficientnet_lite0_fid": 50.0, "wall_s": 30.0}
    return {"signature": scaling.scaling_signature(scaling.ScalingConfig()), "row": {**base, **row}}


@pytest.mark.parametrize(("lines", "match"), [
    (["{not json", json.dumps(_scaling_record())], "line 1 is not JSON"),
    ([json.dumps([1, 2]), json.dumps(_scaling_record())], "line 1 is not a JSON object"),
    ([json.dumps(_scaling_record(steps="200"))], "row field 'steps' missing or not an integer"),
    ([json.dumps({"signature": {}, "row": [1]})], "expected {'signature'"),
])
def test_scaling_resume_refuses_a_malformed_progress_file(tmp_path, lines, match):
    out = tmp_path / "scaling"
    out.mkdir()
    (out / "scaling_rows.jsonl").write_text("\n".join(lines) + "\n")
    line = assert_refused(scaling.main, ["--resume", "--out", str(out)], tmp_path, match=match)
    assert "scaling_rows.jsonl" in line


def test_scaling_resume_skips_a_torn_tail(tmp_path, capsys):
    path = tmp_path / "scaling_rows.jsonl"
    good = _scaling_record()
    path.write_text(json.dumps(good) + "\n" + json.dumps(_scaling_record(model="dit"))[:25])
    rows = scaling.read_finished_rows(path, scaling.ScalingConfig())
    assert list(rows.values()) == [good["row"]]
    assert "torn last line" in capsys.readouterr().err
