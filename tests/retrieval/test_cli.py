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
