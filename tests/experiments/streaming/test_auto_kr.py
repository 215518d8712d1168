"""``experiments.streaming.auto_kr``: the K/r estimator study, seed after seed, resumable."""

import signal

import pytest

from tests.bad_input import assert_refused, assert_stops_on_signal


def test_auto_kr_runs_seed_after_seed_and_resumes_an_interrupted_run(tmp_path, monkeypatch):
    import json

    import experiments.streaming.auto_kr as autokr
    import streaming.bench as stress

    calls = []

    def fake_trial(family, obs_frac, seed_index, seed, device=None):
        calls.append((family, obs_frac, seed))
        right = seed % 2 == 0
        return {"cell": f"{family}/obs{round(100 * obs_frac)}", "family": family, "obs_frac": obs_frac, "seed": seed,
                "K_hat": 4 if right else 1, "r_hat": 4 if right else 1, "correct": right, "nrmse_true_Kr": 0.1,
                "nrmse_estimated_Kr": 0.1 if right else 0.3, "nrmse_ratio": 1.0 if right else 3.0, "select_s": 1.0}

    monkeypatch.setattr(autokr, "auto_kr_trial", fake_trial)
    out = tmp_path / "kr.json"
    fams, obs = ["geodesic", "abrupt"], [0.2, 0.5]
    s0, s1 = stress.TEST_SEEDS[:2]
    # an interrupted run left the first seed's trials of two cells in the partial file
    partial = autokr.partial_path(out)
    partial.write_text("".join(json.dumps(fake_trial("geodesic", o, 0, s0)) + "\n" for o in obs))
    calls.clear()
    res = autokr.run_auto_kr(out, families=fams, obs_fracs=obs, seeds=2, resume=True)
    # seed-major order, the two resumed trials skipped
    assert calls == [("abrupt", 0.2, s0), ("abrupt", 0.5, s0)] + [(f, o, s1) for f in fams for o in obs]
    assert res["resumed_trials"] == 2 and not partial.exists() and out.exists()
    # results are grouped by cell, seeds in order; seed s0 (even) is right, s1 (odd) wrong
    assert [t["cell"] for t in res["trials"]][:2] == ["geodesic/obs20", "geodesic/obs20"]
    assert [c["correct_share"] for c in res["cells"]] == [0.5] * 4
    assert [c["nrmse_ratio_mean"] for c in res["cells"]] == [2.0] * 4
    # a shorter resumed run reuses the JSON's trials; what it leaves out (the second seed's trials, a
    # third seed's trial) stays in the partial file for a later, longer run
    s2 = stress.TEST_SEEDS[2]
    partial.write_text(json.dumps(fake_trial("abrupt", 0.5, 2, s2)) + "\n")
    calls.clear()
    res = autokr.run_auto_kr(out, families=fams, obs_fracs=obs, seeds=1, resume=True)
    assert calls == [] and res["resumed_trials"] == 4 and [c["correct_share"] for c in res["cells"]] == [1.0] * 4
    assert sorted(json.loads(line)["seed"] for line in partial.read_text().splitlines()) == [s1] * 4 + [s2]
    # without resume, the partial file is ignored and every trial is computed
    calls.clear()
    res = autokr.run_auto_kr(out, families=fams, obs_fracs=obs, seeds=1)
    assert len(calls) == 4 and res["resumed_trials"] == 0 and not partial.exists()


def _fake_trial(family, obs_frac, seed_index, seed, device=None):
    return {"cell": f"{family}/obs{round(100 * obs_frac)}", "family": family, "obs_frac": obs_frac, "seed": seed,
            "K_hat": 4, "r_hat": 4, "correct": True, "nrmse_true_Kr": 0.1, "nrmse_estimated_Kr": 0.1,
            "nrmse_ratio": 1.0, "select_s": 1.0}


def test_auto_kr_resume_skips_a_torn_last_line_and_refuses_a_torn_json(tmp_path, monkeypatch, capsys):
    import json

    import experiments.streaming.auto_kr as autokr
    from streaming.bench import TEST_SEEDS

    calls = []
    monkeypatch.setattr(autokr, "auto_kr_trial", lambda *a, **k: calls.append(a) or _fake_trial(*a, **k))
    out = tmp_path / "kr.json"
    partial = autokr.partial_path(out)
    good = json.dumps(_fake_trial("geodesic", 0.2, 0, TEST_SEEDS[0]))
    partial.write_text(good + "\n" + good[: len(good) // 2])  # killed while appending the second trial
    argv = ["--families", "geodesic", "--obs-fracs", "0.2", "0.5", "--seeds", "1", "--json", str(out), "--resume"]
    assert autokr.main(argv) == 0
    assert "skipped the torn last line 2" in capsys.readouterr().err
    assert [c[:2] for c in calls] == [("geodesic", 0.5)]  # the intact trial is reused, the torn one recomputed
    assert json.loads(out.read_text())["resumed_trials"] == 1
    out.write_text(out.read_text()[:40])  # a torn results file
    assert_refused(autokr.main, argv, tmp_path, match="kr.json", timeout_s=30)


def test_auto_kr_bench_stops_on_sigterm_and_keeps_a_resumable_progress_file(tmp_path):
    from common.io import read_jsonl_resumable

    assert_stops_on_signal(["-m", "experiments.streaming.auto_kr", "--families", "geodesic", "--json", "kr.json"],
                           tmp_path, signal.SIGTERM, ready="auto-kr:")
    assert not (tmp_path / "kr.json").exists()
    assert isinstance(read_jsonl_resumable(tmp_path / "kr.partial.jsonl"), list)


@pytest.mark.parametrize("argv, match", [(["--tuning", "--seeds", "4"], "only 3 tuning seeds"),
                                         (["--resume"], "--resume needs --json")])
def test_bad_options_are_one_line(tmp_path, argv, match):
    import experiments.streaming.auto_kr as autokr

    assert_refused(autokr.main, argv, tmp_path, match=match, timeout_s=30)
