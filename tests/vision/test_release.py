"""``vision.release``: the report behind the shipped models (learning curves, floors)."""

import pytest
import torch

from common.engine import snapshots
from tests.vision.conftest import tiny_moh
from vision.classifier import get_classifier
from vision.release import grid_png, learning_curve, quality
from vision.train import TrainConfig, fit


def test_learning_curve_reads_every_snapshot_once(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = tiny_moh(sample_size=32)
    images = torch.rand(16, 1, 32, 32) * 2 - 1
    fit(model, images, TrainConfig(steps=4, batch_size=4, snapshot_every=2, checkpoint_every=2), out_dir=tmp_path)
    assert [s for s, _ in snapshots(tmp_path)] == [2, 4]
    classifier, _ = get_classifier()
    curve = learning_curve(tmp_path, images, classifier, n=4, steps=2)
    assert [r["step"] for r in curve] == [2, 4]
    assert all(0 <= r["confident_share"] <= 1 and r["fmnist_classifier_fid"] >= 0 for r in curve)
    # measured once per snapshot weights: a second report reads the cache beside each snapshot
    import vision.release as release

    monkeypatch.setattr(release, "sample", lambda *a, **k: pytest.fail("sampled a cached snapshot"))
    assert learning_curve(tmp_path, images, classifier, n=4, steps=2) == curve
    monkeypatch.undo()
    for f in ("model.safetensors", "config.json"):  # new weights at step 4 (step 2's): measured again
        (tmp_path / "snapshots" / "step_4" / f).write_bytes((tmp_path / "snapshots" / "step_2" / f).read_bytes())
    again = learning_curve(tmp_path, images, classifier, n=4, steps=2)
    assert again[1] == {**again[0], "step": 4}
    learning_curve(tmp_path, images, classifier, n=4, steps=1)  # another protocol: a cache of its own
    assert len(list((tmp_path / "snapshots" / "step_2").glob("eval_test_n4_real16_steps*_seed0.json"))) == 2


def test_quality_of_real_images_beats_noise_and_grid_is_written(tmp_path):
    from vision.data import fashion_mnist_images

    classifier, _ = get_classifier()
    real, _ = fashion_mnist_images("test", limit=64, seed=0)
    train, _ = fashion_mnist_images("train", limit=64, seed=1)
    noise = torch.rand(64, 1, 32, 32) * 2 - 1
    good, bad = quality(train, real, classifier), quality(noise, real, classifier)
    assert good["confident_share"] > 0.7 > bad["confident_share"]
    assert good["fmnist_classifier_fid"] < 0.2 * bad["fmnist_classifier_fid"]
    assert sum(good["class_shares"].values()) == pytest.approx(1.0)
    path = grid_png(train[:8], tmp_path / "g.png", nrow=4)
    from PIL import Image

    assert Image.open(path).size == (2 * (4 * 33 + 1), 2 * (2 * 33 + 1))
