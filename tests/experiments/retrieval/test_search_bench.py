"""``experiments.retrieval.search_bench``: the search speed study (formerly ``moa3cir bench --suite
search``) on small galleries: exact rows identical to brute force, IVF at nprobe = nlist exact,
IVF-PQ recall rising with re-ranking, HNSW, the command line and its refusals."""

import json

import numpy as np
import pytest

from experiments.retrieval.search_bench import main, numpy_topk, run_search_bench
from tests.bad_input import assert_refused


def test_search_bench_small(tmp_path):
    rows = run_search_bench(
        tmp_path, n=3000, d=32, n_queries=20, nlist=32, nprobes=(1, 32), log=lambda *_: None, pq_m=8,
        pq_nprobe=32, reranks=(0, 4, 16),
    )
    by = {r["method"]: r for r in rows}
    flat, ivf_all = by["faiss IndexFlatIP"], by["faiss IVF32 nprobe=32"]
    assert flat["identical_topk_sets"] == 1.0 and flat["max_score_diff"] < 1e-4
    assert by["numpy brute force (full argsort)"]["identical_topk_sets"] == 1.0
    assert ivf_all["recall@10_vs_exact"] == 1.0  # nprobe = nlist searches every cell: exact
    assert rows[-1]["method"] == "targets" and rows[-1]["exact_identical"] is True
    assert rows[-1]["exact_speedup_vs_numpy_sort"] == flat["speedup_vs_numpy_sort"] > 0
    assert rows[-1]["ivf_chosen"] in {"faiss IVF32 nprobe=1", "faiss IVF32 nprobe=32"}
    assert (tmp_path / "search_bench.csv").is_file() and (tmp_path / "search_bench.json").is_file()
    # IVF-PQ without and with exact re-ranking: compressed codes, recall against exact, queries/s
    pq, pq4, pq16 = (by[f"faiss IVF32,PQ8 nprobe=32{s}"] for s in ("", " + exact re-rank of top 4k",
                                                                   " + exact re-rank of top 16k"))
    assert pq["memory_bytes_per_item"] < flat["memory_bytes_per_item"] / 4 < pq4["memory_bytes_per_item"]
    assert 0 < pq["recall@10_vs_exact"] < pq4["recall@10_vs_exact"] <= pq16["recall@10_vs_exact"]
    assert pq16["recall@10_vs_exact"] > 0.9 and pq["queries_per_s"] > 0
    hn = run_search_bench(tmp_path / "h", n=3000, d=32, n_queries=20, nlist=32, methods=("hnsw",),
                          log=lambda *_: None)
    assert [r["method"] for r in hn] == ["faiss IndexFlatIP", "faiss HNSW32 efSearch=64", "targets"]
    assert hn[1]["recall@10_vs_exact"] > 0.9 and hn[-1]["exact_speedup_vs_numpy"] is None
    # the command line (default IVF1024), on a gallery just big enough to train it
    out = tmp_path / "cli"
    assert main(["--search-n", "1100", "--search-queries", "5", "--out", str(out)]) == 0
    assert json.loads((out / "search_bench.json").read_text())[0]["n"] == 1100
    # --json writes the same rows plus the settings; an existing file is kept without --overwrite
    res = tmp_path / "res.json"
    argv = ["--search-n", "1100", "--search-queries", "5"]
    argv += ["--out", str(tmp_path / "c2")]
    assert main([*argv, "--json", str(res)]) == 0
    doc = json.loads(res.read_text())
    assert doc["search"] == json.loads((tmp_path / "c2" / "search_bench.json").read_text())
    assert doc["config"]["search_n"] == 1100 and doc["config"]["search_queries"] == 5
    assert doc["config"]["out"] == str(tmp_path / "c2") and "json" not in doc["config"]
    res.write_text("keep")
    assert main([*argv[:-1], str(tmp_path / "c3"), "--json", str(res)]) == 2
    assert res.read_text() == "keep" and not (tmp_path / "c3").exists()


def test_numpy_topk_partition_and_sort_agree_with_a_hand_ranking():
    gal = np.eye(5, dtype=np.float32)[[0, 1, 2, 3, 4]] * np.array([[1], [5], [3], [4], [2]], np.float32)
    q = np.ones((3, 5), np.float32)  # scores = row norms 1, 5, 3, 4, 2 -> ranking 1, 3, 2
    for select in ("partition", "sort"):
        scores, rows = numpy_topk(q, gal, 3, block=2, select=select)
        assert rows.tolist() == [[1, 3, 2]] * 3 and scores[0].tolist() == [5, 4, 3]
    with pytest.raises(ValueError, match="select"):
        numpy_topk(q, gal, 3, select="heap")


def test_the_search_suite_names_its_memory_estimate_before_any_work(tmp_path):
    out = tmp_path / "out"
    line = assert_refused(main, ["--search-n", "1000000000", "--out", str(out)], tmp_path, match="GiB of memory")
    assert "--force" in line
    assert not out.exists()


@pytest.mark.parametrize(("argv", "match"), [
    (["--search-n", "1000000000000"], "--search-n"),
    (["--search-queries", "1000000000000"], "--search-queries"),
])
def test_counts_past_their_maximum_are_refused_at_parse(argv, match, tmp_path):
    line = assert_refused(main, [*argv, "--out", str(tmp_path / "out")], tmp_path, match=match)
    assert "at most" in line or "in [" in line
