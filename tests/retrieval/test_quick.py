import pytest


@pytest.mark.slow
def test_run_quick(tmp_path):
    from retrieval.quick import run_quick

    rows = run_quick(tmp_path, None, seed=0)
    assert (tmp_path / "retrieval.csv").is_file()
    assert {"app", "task", "method", "metric", "value", "split", "seed"} <= set(rows[0])
    r10 = {r["method"]: r["value"] for r in rows if r["metric"] == "R@10"}
    assert r10["MoA3CIR w/o augmentation"] > r10["image-only"]
    saved = tmp_path / "retrieval_bench" / "models" / "controlled" / "efficientnet-lite0" / "MoA3CIR"
    assert (saved / "config.json").is_file()
