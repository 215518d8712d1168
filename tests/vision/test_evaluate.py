import numpy as np
import pytest
import torch

from common.errors import InputError
from vision.classifier import FMNISTClassifier, classifier_features
from vision.evaluate import (
    frechet_distance,
    inception_features,
    inception_weights_path,
    precision_recall,
    to_model_range,
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


def test_frechet_distance_matches_scipy_sqrtm_when_features_outnumber_samples():
    """Both routes (f <= N: eigen-decomposition; f > N: singular values of X_a X_b^T) agree with the
    textbook formula through scipy's general matrix square root."""
    from scipy import linalg

    rng = np.random.default_rng(2)
    for n, f in ((300, 8), (20, 50)):
        a = rng.standard_normal((n, f)) @ rng.standard_normal((f, f))
        b = rng.standard_normal((n + 5, f)) * 0.5 + 1.0
        s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
        ref = ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(s_a + s_b) - 2 * np.trace(linalg.sqrtm(s_a @ s_b).real)
        assert frechet_distance(a, b) == pytest.approx(ref, rel=1e-6)


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
    assert f.shape == (3, 128)  # the last conv stage
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


@pytest.fixture(scope="module")
def lite0(tmp_path_factory):
    from common.image_encoder import EfficientNetLite0Encoder
    from vision.evaluate import FEATURE_RESOLUTION

    # a private cache: the real set's features are computed once per test
    return EfficientNetLite0Encoder(resolution=FEATURE_RESOLUTION, cache=tmp_path_factory.mktemp("lite0"))


def _blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of ``x (N, c, H, W)`` (separable, reflect-padded); sigma 0 is the identity."""
    if sigma == 0:
        return x
    r = int(3 * sigma)
    k = torch.exp(-torch.arange(-r, r + 1, dtype=torch.float32) ** 2 / (2 * sigma ** 2))
    k = (k / k.sum()).to(x.dtype)
    c = x.shape[1]
    x = torch.nn.functional.pad(x, (r, r, r, r), mode="reflect")
    x = torch.nn.functional.conv2d(x, k.view(1, 1, 1, -1).repeat(c, 1, 1, 1), groups=c)
    return torch.nn.functional.conv2d(x, k.view(1, 1, -1, 1).repeat(c, 1, 1, 1), groups=c)


def _lite0_fid(real, fake, encoder):
    from vision.evaluate import feature_metrics

    return feature_metrics(real, fake, encoder)["efficientnet_lite0_fid"]


def test_efficientnet_fid_on_known_distributions(lite0):
    """Identical sets are at ~0; two halves of the same data are close; blurring one half moves it
    away monotonically in the blur width (grayscale Fashion-MNIST, repeated to RGB)."""
    from vision.data import fashion_mnist_images

    x = fashion_mnist_images("test", limit=240, seed=0)[0]
    a, b = x[:120], x[120:]
    same = _lite0_fid(a, a.clone(), lite0)
    fids = [_lite0_fid(a, _blur(b, s), lite0) for s in (0.0, 1.0, 2.5)]
    assert abs(same) < 1e-3 * fids[0]
    assert fids == sorted(fids) and fids[-1] > 2 * fids[0], fids


def test_efficientnet_fid_on_colour_images(lite0):
    """Colour (3-channel) data: a colour shift of one half raises the distance, more for a larger
    shift; precision/recall are reported in the same features."""
    from vision.evaluate import feature_metrics

    gen = torch.Generator().manual_seed(0)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 32), torch.linspace(-1, 1, 32), indexing="ij")
    centre = torch.rand(120, 2, 1, 1, generator=gen) - 0.5  # (120, 2, 1, 1)
    disc = ((xx - centre[:, 0]) ** 2 + (yy - centre[:, 1]) ** 2 < 0.2).float()[:, None]  # (120, 1, 32, 32)
    colour = torch.rand(120, 3, 1, 1, generator=gen) * 0.8
    x = (1 - disc) * 1.0 + disc * (colour * 2 - 1)  # coloured discs on white, (120, 3, 32, 32)
    a, b = x[:60], x[60:]

    def tint(y, amount):  # push every disc towards pure red
        red = torch.tensor([1.0, -1.0, -1.0]).view(1, 3, 1, 1)
        return (y + amount * disc[60:] * (red - y)).clamp(-1, 1)

    fids = [_lite0_fid(a, tint(b, t), lite0) for t in (0.0, 0.5, 1.0)]
    assert fids == sorted(fids) and fids[-1] > 2 * fids[0], fids
    m = feature_metrics(a, b, lite0)
    assert m["efficientnet_lite0_fid"] == pytest.approx(fids[0], rel=1e-6)
    assert 0 <= m["efficientnet_lite0_precision"] <= 1 and 0 <= m["efficientnet_lite0_recall"] <= 1
    with pytest.raises(InputError):
        _lite0_fid(a[:, :2], b[:, :2], lite0)


@pytest.mark.slow  # about 20 s per dataset on a shared 2-core CPU
@pytest.mark.parametrize("data", ["fashion-mnist", "sweethome3d"])
def test_efficientnet_fid_ranks_longer_training_better(data, lite0):
    """The metric's sanity check: the same tiny MoH (same seed, same batches) trained 200 steps has
    a clearly lower EfficientNet-Lite0 FID than after 10 steps, on both datasets (32 px)."""
    from common.errors import DataError
    from vision.data import load_dataset
    from vision.models import build_moh
    from vision.sampling import MoHPipeline, make_sampler
    from vision.train import TrainConfig, fit

    channels = 1 if data == "fashion-mnist" else 3
    try:
        images = load_dataset(data, 32, channels, limit=2000)
        real = load_dataset(data, 32, channels, limit=150, split="test")
    except DataError as exc:
        pytest.skip(f"{data} is not installed: {exc}")
    fids = []
    for steps in (10, 200):
        torch.manual_seed(0)
        model = build_moh(32, channels, d_model=16, d_state=2, depth_choices=(1, 2), num_levels=3, k_levels=2,
                          level_layers=1)
        fit(model, images, TrainConfig(steps=steps, batch_size=16, lr=3e-3, warmup=5, seed=0))
        out = MoHPipeline(model, make_sampler("ddim"))(batch_size=64, num_inference_steps=10,
                                                       generator=torch.Generator().manual_seed(0))
        fids.append(_lite0_fid(real, to_model_range(out.images), lite0))
    print(f"{data}: EfficientNet-Lite0 FID after 10 / 200 steps: {fids[0]:.1f} / {fids[1]:.1f}")
    assert fids[1] < 0.9 * fids[0], fids
