import json

import numpy as np
import pytest
import torch
from PIL import Image

from tests.vision.conftest import tiny_moh
from vision.cli import main
from vision.sampling import save_checkpoint


@pytest.fixture()
def ckpt(tmp_path):
    path = tmp_path / "ck"
    save_checkpoint(tiny_moh(), path)
    return path


def test_sample_writes_grid(ckpt, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["sample", "--ckpt", str(ckpt), "--n", "4", "--steps", "2", "--out", str(out)]) == 0
    img = np.asarray(Image.open(out))
    assert img.shape == (2 * 17 + 1, 2 * 17 + 1)  # 2x2 mosaic of 16x16 with 1-px gaps
    assert "mean routed depth" in capsys.readouterr().out
    assert main(["sample", "--ckpt", str(ckpt), "--n", "2", "--steps", "3", "--sampler", "dpmsolver++",
                 "--out", str(out), "--overwrite"]) == 0
    assert "3 dpmsolver++ steps" in capsys.readouterr().err


def test_corrupt_checkpoint_exits_2(ckpt, tmp_path, capsys):
    next(ckpt.glob("*.safetensors")).write_bytes(b"\x00" * 10)
    assert main(["sample", "--ckpt", str(ckpt), "--n", "2", "--out", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load checkpoint") and err.count("\n") == 1
    assert not (tmp_path / "g.png").exists()


def test_train_on_image_folder_and_errors(tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    assert main(["train", "--data", str(folder), "--size", "16", "--channels", "3", "--steps", "1"]) == 2
    assert "no images" in capsys.readouterr().err
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    out = tmp_path / "run"
    code = main(["train", "--data", str(folder), "--size", "16", "--channels", "3", "--steps", "2",
                 "--batch-size", "2", "--out", str(out), "--threads", "1"])
    assert code == 0 and (out / "checkpoint" / "config.json").is_file()
    assert main(["sample", "--ckpt", str(out), "--n", "1", "--steps", "1", "--out", str(tmp_path / "s.png")]) == 0
    assert np.asarray(Image.open(tmp_path / "s.png")).shape == (18, 18, 3)
    # Fashion-MNIST is grayscale: asking for 3 channels is a clear error
    assert main(["train", "--data", "fashion-mnist", "--channels", "3", "--steps", "1"]) == 2
    assert "grayscale" in capsys.readouterr().err


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("train", "sample", "eval", "bench"):
        assert cmd in out


class _FakeDetector(torch.nn.Module):
    def forward(self, x: torch.Tensor, return_features: bool = True) -> torch.Tensor:
        return torch.cat([x.mean(dim=(2, 3)), x.std(dim=(2, 3))], dim=1)


def test_eval_on_image_folder_with_user_inception_weights(ckpt, tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(folder / f"{i}.png")
    weights = tmp_path / "inception.pt"
    torch.jit.script(_FakeDetector()).save(str(weights))
    out = tmp_path / "metrics.json"
    code = main(["eval", "--ckpt", str(ckpt), "--data", str(folder), "--n", "6", "--steps", "2",
                 "--sampler", "dpmsolver++", "--inception-weights", str(weights), "--out", str(out)])
    assert code == 0
    metrics = json.loads(out.read_text())
    assert metrics["inception_fid"] >= 0 and "fmnist_classifier_fid" not in metrics
    assert metrics["sampler"] == "dpmsolver++"
    assert main(["eval", "--ckpt", str(ckpt), "--inception-weights", str(tmp_path / "nope.pt")]) == 2
    assert "Inception weights not found" in capsys.readouterr().err


def test_bench_json_writes_rows_with_nan_as_null(tmp_path, monkeypatch):
    import vision.bench

    seen = {}

    def fake_run_bench(out, cfg, **kwargs):
        seen["cfg"] = cfg
        return [{"model": "moh", "fmnist_classifier_fid": 12.5, "fid_vs_mamba": float("nan")}]

    monkeypatch.setattr(vision.bench, "run_bench", fake_run_bench)
    path = tmp_path / "bench.json"
    assert main(["bench", "--suite", "quick", "--steps", "7", "--out", str(tmp_path / "b"), "--json", str(path)]) == 0
    text = path.read_text()
    assert "NaN" not in text
    data = json.loads(text)
    assert data["rows"] == [{"model": "moh", "fmnist_classifier_fid": 12.5, "fid_vs_mamba": None}]
    assert data["config"]["steps"] == 7 == seen["cfg"].steps


@pytest.mark.parametrize("where", ["existing", "under_a_file", "a_directory"])
def test_bad_bench_json_path_is_refused_before_running(tmp_path, monkeypatch, capsys, where):
    import vision.bench

    monkeypatch.setattr(vision.bench, "run_bench", lambda *a, **k: pytest.fail("bench ran"))
    (tmp_path / "existing.json").write_text("{}")
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_directory").mkdir()
    path = {"existing": tmp_path / "existing.json", "under_a_file": tmp_path / "a_file" / "b.json",
            "a_directory": tmp_path / "a_directory"}[where]
    assert main(["bench", "--suite", "quick", "--out", str(tmp_path / "b"), "--json", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
    assert (tmp_path / "existing.json").read_text() == "{}"
