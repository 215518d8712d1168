import json

import numpy as np
import pytest
from PIL import Image

from retrieval.cli import main


@pytest.fixture()
def cached_env(prefilled_cache, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))


def test_end_to_end_train_eval_index_search(tiny_bench, cached_env, tmp_path, capsys):
    root, _ = tiny_bench
    model = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--root",
                str(root),
                "--out",
                str(model),
                "--phase1-epochs",
                "0",
                "--phase2-epochs",
                "1",
            ]
        )
        == 0
    )
    assert (model / "model.safetensors").is_file()
    assert main(["eval", "--root", str(root), "--model", str(model), "--out", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert {"R@10", "R@50", "R@10/tops", "avg"} <= set(metrics)
    assert main(["index", "--root", str(root), "--model", str(model), "--out", str(tmp_path / "ix")]) == 0
    img = sorted((root / "controlled" / "images").glob("cont_test_*.png"))[0]
    caps = json.loads((root / "controlled" / "captions" / "cap.tops.test.json").read_text())
    capsys.readouterr()
    assert (
        main(
            [
                "search",
                "--model",
                str(model),
                "--index",
                str(tmp_path / "ix"),
                "--image",
                str(img),
                "--text",
                caps[0]["captions"][0],
                "--k",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("cont_test_") == 5 and "routing:" in out


def test_cli_bad_input_exits_nonzero(tiny_bench, tmp_path, capsys):
    root, _ = tiny_bench
    (tmp_path / "wrong").mkdir()
    assert (
        main(["eval", "--dataset", "fashioniq", "--root", str(tmp_path / "wrong"), "--model", str(tmp_path)])
        == 2
    )
    assert (
        main(["eval", "--dataset", "shoes", "--root", str(tmp_path / "wrong"), "--model", str(tmp_path)]) == 2
    )
    bad = tmp_path / "bad.png"
    bad.write_text("no image here")
    assert (
        main(
            [
                "search",
                "--model",
                str(tmp_path),
                "--index",
                str(tmp_path),
                "--image",
                str(bad),
                "--text",
                "  ",
            ]
        )
        == 2
    )
    assert "error: modification text is empty" in capsys.readouterr().err
    good = tmp_path / "x.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(good)
    assert (
        main(
            [
                "search",
                "--model",
                str(tmp_path / "nomodel"),
                "--index",
                str(tmp_path),
                "--image",
                str(good),
                "--text",
                "red",
            ]
        )
        == 2
    )
    (tmp_path / "full").mkdir()
    keep = tmp_path / "full" / "keep.txt"
    keep.write_text("keep")
    assert main(["build-data", "--out", str(tmp_path / "full"), "--size", "tiny"]) == 2
    assert keep.read_text() == "keep" and len(list((tmp_path / "full").iterdir())) == 1


def test_bench_methods_subset_and_bad_method(tiny_bench, cached_env, tmp_path, capsys):
    root, _ = tiny_bench
    out = tmp_path / "bench"
    argv = ["bench", "--root", str(root), "--out", str(out), "--variants", "controlled"]
    argv += ["--phase1-epochs", "0", "--phase2-epochs", "1", "--methods", "no-routing", "image-only"]
    assert main([*argv, "--json", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((out / "retrieval_bench.json").read_text())
    res = [r for r in rows if "R@10" in r]  # every method with both image encoders (the default)
    assert [(r["method"], r["image_encoder"]) for r in res] == [
        ("MoA3CIR w/o routing (uniform groups)", "scratch"), ("MoA3CIR w/o routing (uniform groups)", "efficientnet-lite0"),
        ("image-only", "scratch"), ("image-only", "efficientnet-lite0"),
    ]
    speed = next(r for r in rows if r["method"] == "gallery features")
    n_test = len(list((root / "controlled" / "images").glob("cont_test_*.png")))
    assert speed["images"] == n_test and speed["cached_run_cnn_images"] == 0  # second run: all from the cache
    assert json.loads((tmp_path / "rows.json").read_text())["rows"] == rows
    assert all(r["split"] == "test" and r["seed"] == 0 for r in res)
    assert main(["bench", "--root", str(root), "--out", str(tmp_path / "b2"), "--methods", "nope"]) == 2
    assert "unknown method 'nope'" in capsys.readouterr().err and not (tmp_path / "b2").exists()


def test_bench_router_metrics_reported(tiny_bench, cached_env, tmp_path):
    from retrieval.bench import run_retrieval_bench
    from retrieval.train import TrainConfig

    root, _ = tiny_bench
    rows = run_retrieval_bench(
        root,
        tmp_path,
        ("controlled",),
        ["no-aug"],
        TrainConfig(0, 1, hard_negatives=False),
        log=lambda *_: None,
    )
    r = rows[0]
    assert 0 <= r["router P@k"] <= 1 and 0 <= r["router R@k"] <= 1
    assert {"router w_mentioned", "router w_other"} <= set(r)


def test_search_bench_small(tmp_path):
    from retrieval.search_bench import run_search_bench

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
    # the CLI wiring (default IVF1024), on a gallery just big enough to train it
    out = tmp_path / "cli"
    assert (
        main(["bench", "--suite", "search", "--search-n", "1100", "--search-queries", "5", "--out", str(out)])
        == 0
    )
    assert json.loads((out / "search_bench.json").read_text())[0]["n"] == 1100
    # --json writes the same rows plus the settings; an existing file is kept without --overwrite
    res = tmp_path / "res.json"
    argv = ["bench", "--suite", "search", "--search-n", "1100", "--search-queries", "5"]
    argv += ["--out", str(tmp_path / "c2")]
    assert main([*argv, "--json", str(res)]) == 0
    doc = json.loads(res.read_text())
    assert doc["rows"] is None
    assert doc["search"] == json.loads((tmp_path / "c2" / "search_bench.json").read_text())
    assert doc["config"]["search_n"] == 1100 and doc["config"]["search_queries"] == 5
    assert doc["config"]["out"] == str(tmp_path / "c2") and "json" not in doc["config"]
    res.write_text("keep")
    assert main([*argv[:-1], str(tmp_path / "c3"), "--json", str(res)]) == 2
    assert res.read_text() == "keep" and not (tmp_path / "c3").exists()


def test_numpy_topk_partition_and_sort_agree_with_a_hand_ranking():
    from retrieval.search_bench import numpy_topk

    gal = np.eye(5, dtype=np.float32)[[0, 1, 2, 3, 4]] * np.array([[1], [5], [3], [4], [2]], np.float32)
    q = np.ones((3, 5), np.float32)  # scores = row norms 1, 5, 3, 4, 2 -> ranking 1, 3, 2
    for select in ("partition", "sort"):
        scores, rows = numpy_topk(q, gal, 3, block=2, select=select)
        assert rows.tolist() == [[1, 3, 2]] * 3 and scores[0].tolist() == [5, 4, 3]
    with pytest.raises(ValueError, match="select"):
        numpy_topk(q, gal, 3, select="heap")


def test_train_model_size_and_bf16_precision_reach_the_checkpoint(tiny_bench, cached_env, tmp_path):
    from retrieval.registry import MODEL_SIZES, load_model

    root, _ = tiny_bench
    out = tmp_path / "xs"
    argv = ["train", "--root", str(root), "--out", str(out), "--phase1-epochs", "1", "--phase2-epochs", "1",
            "--model-size", "XS", "--precision", "bf16-mixed", "--device", "cpu", "--image-encoder", "scratch"]
    assert main(argv) == 0
    model, extra = load_model(out)
    xs = MODEL_SIZES["XS"]
    assert (model.config.d_model, model.config.d_slot, model.config.heads_per_group) == (
        xs.d_model, xs.d_slot, xs.heads_per_group)
    assert extra["model_size"] == "XS"
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in model.parameters())  # fp32 on disk
    metrics = tmp_path / "m.json"
    assert main(["eval", "--root", str(root), "--model", str(out), "--device", "cpu", "--out", str(metrics)]) == 0
    assert 0 <= json.loads(metrics.read_text())["R@10"] <= 100
