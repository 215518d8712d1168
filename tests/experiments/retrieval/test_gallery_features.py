"""``experiments.retrieval.gallery_features`` (formerly ``moa3cir bench --suite features``): one row
per thread count on the benchmark's test gallery, the JSON with its settings, an existing output
kept without ``--overwrite``."""

import json

import torch

import experiments.retrieval.gallery_features as gf
from retrieval.data import load_synthetic
from tests.bad_input import assert_refused
from tests.retrieval.conftest import tiny_bench  # noqa: F401  (fixture)


def test_one_row_per_thread_count_on_the_test_gallery(tiny_bench, tmp_path, monkeypatch):  # noqa: F811
    root, _ = tiny_bench
    seen = []

    def fake_speed(images):  # the encoder's own speed is not under test here, the wiring is
        seen.append((len(images), torch.get_num_threads()))
        return {"images": len(images), "threads": torch.get_num_threads()}

    monkeypatch.setattr(gf, "gallery_feature_speed", fake_speed)
    threads = torch.get_num_threads()
    try:
        out, res = tmp_path / "out", tmp_path / "features.json"
        argv = ["--root", str(root), "--out", str(out), "--feature-threads", "1", "2", "--json", str(res)]
        assert gf.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    n_test = len(load_synthetic(root, "test", "controlled").images)
    assert seen == [(n_test, 1), (n_test, 2)]
    doc = json.loads(res.read_text())
    assert [r["threads"] for r in doc["features"]] == [1, 2] and doc["config"]["feature_threads"] == [1, 2]
    res.write_text("keep")
    assert_refused(gf.main, ["--root", str(root), "--out", str(tmp_path / "o2"), "--json", str(res)], tmp_path,
                   match="exists")
    assert res.read_text() == "keep"
