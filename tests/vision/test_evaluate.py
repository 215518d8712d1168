import numpy as np
import pytest
import torch

from common.errors import InputError
from vision.evaluate import (
    FMNISTClassifier,
    classifier_features,
    frechet_distance,
    inception_features,
    inception_weights_path,
    precision_recall,
)


def test_frechet_distance_closed_form():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4000, 3))
    # same distribution shifted by mu: FD = |mu|^2 (covariances equal)
    b = a + np.array([1.0, 2.0, 0.0])
    assert frechet_distance(a, b) == pytest.approx(5.0, rel=1e-6)
    # diagonal covariances: FD = sum (s1 - s2)^2 for std devs s1, s2
    c = a * np.array([2.0, 1.0, 3.0])
    sa = a.std(0, ddof=1)
    expected = ((sa - sa * np.array([2.0, 1.0, 3.0])) ** 2).sum()
    assert frechet_distance(a, c) == pytest.approx(expected, rel=0.05)
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-8)
    with pytest.raises(InputError):
        frechet_distance(a[:1], b)


def test_precision_recall_by_construction():
    rng = np.random.default_rng(1)
    real = rng.standard_normal((200, 2))
    assert precision_recall(real, real.copy()) == (1.0, 1.0)
    far = real + 100.0
    assert precision_recall(real, far) == (0.0, 0.0)
    # generated covers only half of the real modes: high precision, about half the recall
    two = np.concatenate([real[:100] - 10, real[100:] + 10])
    one = real[:100] - 10
    p, r = precision_recall(two, one)
    assert p == 1.0 and 0.4 < r < 0.6


def test_classifier_features_shape_and_validation():
    torch.manual_seed(0)
    clf = FMNISTClassifier()
    f = classifier_features(clf, torch.zeros(3, 1, 32, 32))
    assert f.shape == (3, 64)
    with pytest.raises(InputError):
        classifier_features(clf, torch.zeros(3, 1, 28, 28))


class _FakeDetector(torch.nn.Module):
    """Stands in for the TorchScript Inception detector (same call signature)."""

    def forward(self, x: torch.Tensor, return_features: bool = True) -> torch.Tensor:
        return x.mean(dim=(2, 3)).repeat(1, 4)


def test_inception_plumbing_with_user_weights(tmp_path, monkeypatch):
    path = tmp_path / "inception.pt"
    torch.jit.script(_FakeDetector()).save(str(path))
    monkeypatch.setenv("MOH_INCEPTION_WEIGHTS", str(path))
    assert inception_weights_path() == path
    feats = inception_features(path, torch.zeros(2, 1, 8, 8))
    assert feats.shape == (2, 12) and np.allclose(feats, 127.5)  # gray [-1,1]->[0,255], 3 channels
    with pytest.raises(InputError, match="not found"):
        inception_weights_path(str(tmp_path / "missing.pt"))
