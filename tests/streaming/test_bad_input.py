"""Bad input to ``mosaic``: sizes that parse but cannot run are refused before any work."""

import pytest

from streaming import cli
from streaming.cli import main
from tests.bad_input import assert_refused


def test_simulate_refuses_a_stream_too_large_for_memory(tmp_path):
    out = tmp_path / "s.npz"
    line = assert_refused(main, ["simulate", "--epochs", "1000000000000", "--out", str(out)], tmp_path, match="GiB",
                          timeout_s=30)
    assert "--force" in line and not out.exists()


def test_simulate_force_lifts_the_memory_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "SIMULATE_MAX_BYTES", 1000)
    argv = ["simulate", "--n", "10", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "20"]
    assert_refused(main, [*argv, "--out", str(tmp_path / "a.npz")], tmp_path, match="at most", timeout_s=30)
    assert main([*argv, "--out", str(tmp_path / "b.npz"), "--force"]) == 0 and (tmp_path / "b.npz").exists()


@pytest.mark.parametrize("flag", ["--restarts", "--select-restarts"])
def test_pretrain_refuses_restarts_that_would_run_for_years(tmp_path, flag):
    argv = ["pretrain", "--input", str(tmp_path / "none.npz"), "--K", "2", "--r", "2", flag, "1000000000000",
            "--out", str(tmp_path / "ck")]
    assert_refused(main, argv, tmp_path, match="1000", timeout_s=30)


@pytest.mark.parametrize("observed", ["partly", "fully"])
def test_stream_refuses_an_all_zero_source(tmp_path, observed):
    import numpy as np

    assert main(["simulate", "--n", "10", "--r", "2", "--K", "2", "--epochs", "1", "--samples-per-epoch", "50",
                 "--out", str(tmp_path / "s.npz")]) == 0
    d = dict(np.load(tmp_path / "s.npz", allow_pickle=False))
    for key in ("values", "source_values"):
        d[key] = np.where(np.isnan(d[key]), np.nan, 0.0) if observed == "partly" else np.zeros_like(d[key])
    np.savez(tmp_path / "zero.npz", **d)
    assert_refused(main, ["stream", "--input", str(tmp_path / "zero.npz"), "--output", str(tmp_path / "o.npz"),
                          "--K", "2", "--r", "2"], tmp_path, match="all zero", timeout_s=60)


def _fake_trial(family, obs_frac, seed_index, seed, device=None):
    return {"cell": f"{family}/obs{round(100 * obs_frac)}", "family": family, "obs_frac": obs_frac, "seed": seed,
            "K_hat": 4, "r_hat": 4, "correct": True, "nrmse_true_Kr": 0.1, "nrmse_estimated_Kr": 0.1,
            "nrmse_ratio": 1.0, "select_s": 1.0}


def test_auto_kr_resume_skips_a_torn_last_line_and_refuses_a_torn_json(tmp_path, monkeypatch, capsys):
    import json

    import streaming.autokr as autokr
    from streaming.stress import TEST_SEEDS

    calls = []
    monkeypatch.setattr(autokr, "auto_kr_trial", lambda *a, **k: calls.append(a) or _fake_trial(*a, **k))
    out = tmp_path / "kr.json"
    partial = autokr.partial_path(out)
    good = json.dumps(_fake_trial("geodesic", 0.2, 0, TEST_SEEDS[0]))
    partial.write_text(good + "\n" + good[: len(good) // 2])  # killed while appending the second trial
    argv = ["bench", "--suite", "auto-kr", "--families", "geodesic", "--obs-fracs", "0.2", "0.5",
            "--stress-seeds", "1", "--json", str(out), "--resume"]
    assert main(argv) == 0
    assert "skipped the torn last line 2" in capsys.readouterr().err
    assert [c[:2] for c in calls] == [("geodesic", 0.5)]  # the intact trial is reused, the torn one recomputed
    assert json.loads(out.read_text())["resumed_trials"] == 1
    out.write_text(out.read_text()[:40])  # a torn results file
    assert_refused(main, argv, tmp_path, match="kr.json", timeout_s=30)
