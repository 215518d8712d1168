"""The pretrained EfficientNet-Lite0 image encoder: offline load, ImageNet sanity, shapes, frozen
and fine-tunable parameters, and the on-disk feature cache."""

import socket

import numpy as np
import pytest
import torch

from common.errors import InputError
from common.image_encoder import (
    BLOCK_CHANNELS,
    EfficientNetLite0Encoder,
    image_keys,
    load_efficientnet_lite0,
    to_uint8_hwc,
    weights_file,
)


def _scenes(n: int = 4, size: int = 64) -> np.ndarray:
    """``(n, size, size, 3)`` uint8 synthetic scenes: a coloured disc and a bar on white, placed
    asymmetrically so that a horizontal flip changes the pixels."""
    yy, xx = np.mgrid[:size, :size] / size
    out = np.full((n, size, size, 3), 255, np.uint8)
    rng = np.random.default_rng(0)
    for i in range(n):
        cx, cy, r = 0.25 + 0.1 * rng.random(), 0.3 + 0.4 * rng.random(), 0.12 + 0.08 * rng.random()
        out[i][(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = rng.integers(0, 200, 3)
        out[i][(xx > 0.7) & (xx < 0.8) & (yy > 0.1 + 0.3 * rng.random())] = rng.integers(0, 200, 3)
    return out


@pytest.fixture(scope="module")
def encoder():
    return EfficientNetLite0Encoder(resolution=64)


def test_loads_offline_from_the_wheel(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the encoder tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert weights_file().is_file() and weights_file().name == "efficientnet-lite0-57934424.pth"
    enc = EfficientNetLite0Encoder(resolution=32)
    assert enc.encode(_scenes(1, 32)).shape == (1, 1280)


def test_shapes_determinism_and_input_forms(encoder):
    x = _scenes(3)
    pooled, tokens = encoder.encode(x), encoder.encode_tokens(x)
    assert pooled.shape == (3, 1280) and pooled.dtype == np.float32
    assert tokens.shape == (3, (64 // 16) ** 2, BLOCK_CHANNELS[10]) == (3, 16, 112)
    np.testing.assert_array_equal(encoder.encode(x), pooled)
    # the same pixels as float (n, c, H, W) in [-1, 1] (the diffusion convention) give the same features
    as_float = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 127.5 - 1
    np.testing.assert_allclose(encoder.encode(as_float), pooled, atol=1e-5)
    # grayscale (n, H, W) is repeated to RGB
    gray = x[..., 0]
    np.testing.assert_allclose(encoder.encode(gray), encoder.encode(np.repeat(gray[..., None], 3, -1)), atol=1e-6)
    assert encoder.encode(np.zeros((0, 8, 8, 3), np.uint8)).shape == (0, 1280)


def test_flip_is_closer_than_another_image(encoder):
    """ImageNet features are nearly invariant to a horizontal flip (a training augmentation), so
    an image is nearer its mirror than a different scene."""
    x = _scenes(4)
    f, f_flip = encoder.encode(x), encoder.encode(x[:, :, ::-1].copy())

    def cos(a, b):
        return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)

    assert not np.array_equal(x, x[:, :, ::-1])
    assert (cos(f, f_flip) > cos(f, np.roll(f, 1, axis=0))).all()


def test_frozen_by_default(encoder):
    assert not any(p.requires_grad for p in encoder.parameters())
    encoder.train()
    assert all(not m.training for m in encoder.modules() if isinstance(m, torch.nn.BatchNorm2d))
    encoder.eval()


def test_fine_tune_last_blocks_get_gradients(tmp_path):
    enc = EfficientNetLite0Encoder(resolution=32, trainable_blocks=2, cache=tmp_path)
    trainable = {n.split(".")[1] + ("." + n.split(".")[2] if n.startswith("net._blocks") else "")
                 for n, p in enc.named_parameters() if p.requires_grad}
    assert trainable == {"_blocks.14", "_blocks.15", "_conv_head", "_bn1"}
    enc.train()
    pooled, tokens = enc(enc.preprocess(_scenes(2, 32)))
    pooled.sum().backward()
    assert enc.net._blocks[15]._project_conv.weight.grad.abs().sum() > 0
    assert enc.net._blocks[0]._depthwise_conv.weight.grad is None
    enc.eval()
    enc.encode(_scenes(1, 32))
    assert not (tmp_path / "efficientnet-lite0").exists()  # a trainable encoder's features are never cached


def test_cache_hit_needs_no_model_call(tmp_path):
    x = _scenes(3)
    first = EfficientNetLite0Encoder(resolution=64, cache=tmp_path)
    ref, ref_tokens = first.encode(x), first.encode_tokens(x)
    shards = sorted((tmp_path / "efficientnet-lite0").rglob("shard-*.npz"))
    assert [p.parent.name for p in shards] == ["pooled-r64", "tokens-b10-r64"]

    second = EfficientNetLite0Encoder(resolution=64, cache=tmp_path)

    def no_model_call(*args, **kwargs):
        raise AssertionError("the model ran on a cached image")

    third = EfficientNetLite0Encoder(resolution=64, cache=tmp_path)
    np.testing.assert_array_equal(third.encode(x[:1], use_cache=False), ref[:1])  # computed, not stored
    assert sorted((tmp_path / "efficientnet-lite0").rglob("shard-*.npz")) == shards

    second.net.extract_features = no_model_call
    np.testing.assert_array_equal(second.encode(x[[2, 0, 2]]), ref[[2, 0, 2]])
    np.testing.assert_array_equal(second.encode_tokens(x), ref_tokens)
    with pytest.raises(AssertionError, match="the model ran"):
        second.encode(x[:, ::-1].copy())  # new pixels are a miss


def test_keys_depend_on_pixels_resolution_and_layer():
    x = _scenes(2)
    k = image_keys(x, 64, "pooled")
    assert k[0] != k[1]
    assert image_keys(x, 64, "pooled") == k
    assert image_keys(x, 128, "pooled")[0] != k[0] and image_keys(x, 64, "block10")[0] != k[0]
    x2 = x.copy()
    x2[0, 0, 0, 0] ^= 1
    assert image_keys(x2, 64, "pooled")[0] != k[0]


def test_bad_inputs():
    with pytest.raises(InputError):
        to_uint8_hwc(np.zeros((2, 8, 8, 4), np.uint8))
    with pytest.raises(InputError):
        to_uint8_hwc(np.full((1, 3, 8, 8), np.nan, np.float32))
    with pytest.raises(InputError):
        to_uint8_hwc(np.zeros((1, 3, 8, 8), np.int64))
    with pytest.raises(InputError):
        EfficientNetLite0Encoder(resolution=64, token_block=16)


# ImageNet-1k class ids (the standard synset order)
CHAIRS = {423, 559, 765, 857}  # barber chair, folding chair, rocking chair, throne
COUCHES = {831}  # studio couch
LAMPS = {846, 619}  # table lamp, lampshade
TABLES = {526, 532, 736}  # desk, dining table, pool table


def test_imagenet_classes_of_furniture_renders():
    """On real renders (Sweet Home 3D icons) the pretrained classifier names the furniture: the
    top-5 ImageNet classes of most chairs/sofas/lamps/tables contain a class of that kind."""
    from common.errors import DataError
    from common.sweethome3d import load_catalog, read_icon

    try:
        items = load_catalog()
    except DataError:
        pytest.skip("sweethome3d-furniture is not installed")
    net = load_efficientnet_lite0(224)
    enc = EfficientNetLite0Encoder(resolution=224)
    groups = {"Chair": CHAIRS, "Sofa": COUCHES, "Lamp": LAMPS, "Table": TABLES}
    for word, classes in groups.items():
        sel = [it for it in items if word in it.name.split()][:8]
        assert len(sel) >= 3, word
        x = np.stack([np.asarray(read_icon(it).resize((128, 128))) for it in sel])
        with torch.no_grad():
            top5 = net(enc.preprocess(x)).topk(5, dim=1).indices.tolist()
        hits = sum(bool(classes & set(t)) for t in top5)
        assert hits >= 0.6 * len(sel), (word, hits, len(sel))
