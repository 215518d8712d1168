"""Devices, precision and model sizes: bf16-mixed training on the CPU, GPU requests refused
without a GPU, and the named tower sizes."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch

from common.device import DeviceError
from common.errors import InputError
from experiments.retrieval.model_sizes import synthetic_features  # random Features of the benchmark's shapes
from retrieval.baselines import CombinerConfig
from retrieval.cli import main
from retrieval.embed import embed_gallery, embed_queries
from retrieval.model import MoA3Config
from retrieval.registry import MODEL_SIZES, build_model, load_model, save_model
from retrieval.train import TrainConfig, fit

TINY = TrainConfig(phase1_epochs=1, phase2_epochs=2, batch_size=16, val_fraction=0)


@pytest.mark.parametrize("encoder", ["scratch", "efficientnet-lite0"])
def test_bf16_mixed_training_on_the_cpu_learns_and_saves_fp32(encoder, tmp_path):
    torch.manual_seed(0)
    model = build_model("moa3cir", "XS", image_encoder=encoder)
    f = synthetic_features(model, n_items=48, n_triplets=48)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    dtypes: set[torch.dtype] = set()
    hook = model.q_text.net[0].register_forward_hook(lambda m, i, out: dtypes.add(out.dtype) if m.training else None)
    history = fit(model, f, TINY, device="cpu", precision="bf16-mixed")
    hook.remove()
    assert torch.bfloat16 in dtypes  # the training forward ran under bfloat16 autocast
    losses = [h["loss"] for h in history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    after = model.state_dict()
    trained = [k for k, p in model.named_parameters() if p.requires_grad]
    assert trained and all(not torch.equal(before[k], after[k]) for k in trained)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast keeps fp32 master weights
    save_model(model, tmp_path / "m")
    loaded, _ = load_model(tmp_path / "m")
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in loaded.parameters())
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, after[k]), k
    q, _ = embed_queries(loaded, f, device="cpu")
    assert q.dtype == "float32" and q.shape == (48, loaded.config.embed_dim)


def test_sixteen_bit_mixed_precision_needs_a_gpu():
    model = build_model("moa3cir", "XS", image_encoder="scratch")
    with pytest.raises(DeviceError, match="16-mixed needs a CUDA GPU"):
        fit(model, synthetic_features(model, 16, 16), TINY, device="cpu", precision="16-mixed")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_a_gpu_asked_for_without_one_is_refused(capsys):
    model = build_model("moa3cir", "XS", image_encoder="scratch")
    f = synthetic_features(model, 8, 8)
    with pytest.raises(DeviceError, match="GPU"):
        embed_gallery(model, f, device="cuda")
    with pytest.raises(DeviceError, match="GPU"):
        fit(model, f, TINY, device="cuda:0")
    assert main(["train", "--precision", "16-mixed", "--device", "cpu", "--root", "x", "--out", "y"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "16-mixed" in err[0]


def test_named_sizes_scale_the_towers_and_match_the_baselines():
    # S is the default configuration (the committed results were trained at it)
    assert asdict(build_model("moa3cir").config) == asdict(MoA3Config())
    assert asdict(build_model("combiner").config) == asdict(CombinerConfig())
    params = {}
    for size, s in MODEL_SIZES.items():
        m, c = build_model("moa3cir", size), build_model("combiner", size)
        assert (m.config.d_model, m.config.d_slot, m.config.heads_per_group) == (s.d_model, s.d_slot, s.heads_per_group)
        assert c.config.d_model == s.d_model and c.config.embed_dim == m.config.embed_dim == 8 * s.d_slot
        params[size] = sum(p.numel() for p in m.parameters() if p.requires_grad)
    assert params["XS"] < params["S"] < params["B"]
    # an override wins over the size's width
    assert build_model("moa3cir", "B", d_slot=8).config.d_slot == 8
    with pytest.raises(InputError, match="unknown model size 'XL'; choose from XS, S, B"):
        build_model("moa3cir", "XL")


def test_cli_model_size(tmp_path, capsys):
    assert main(["train", "--model-size", "XL", "--root", "x", "--out", str(tmp_path / "m")]) == 2
    assert "--model-size" in capsys.readouterr().err
