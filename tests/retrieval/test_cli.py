import json

import numpy as np
import pytest
from PIL import Image

from retrieval.cli import main


@pytest.fixture()
def cached_env(prefilled_cache, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))
    import retrieval.text as text

    monkeypatch.setattr(text, "_DEFAULT", None)


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
