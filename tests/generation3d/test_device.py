"""Devices, precision and model sizes: bf16-mixed training on the CPU, sampling that follows the
pipeline's device, the named sizes and ``bench.time_train_step``."""

import copy
import json

import pytest
import torch

from common.device import DeviceError
from common.errors import InputError
from generation3d.bench import run_sizes_bench, time_train_step
from generation3d.cli import main
from generation3d.model import MODEL_SIZES, AEConfig, GenConfig, PartFlowTransformer
from generation3d.sampling import MoCAPipeline


class Enc:  # a stand-in for MiniLM: deterministic 384-d embeddings
    def encode(self, texts):
        return torch.stack([torch.full((384,), float(len(t)) / 100) for t in texts]).numpy()


def test_bf16_mixed_training_of_a_tiny_generator_on_the_cpu(tiny_data, tmp_path):
    from generation3d.data import PartDataset
    from generation3d.train import fit, pretrain

    ds = PartDataset.load(tiny_data)
    ae, ae_hist = pretrain(ds, AEConfig(n_latents=4, d_latent=4, d_model=32, n_out=64), steps=2, batch_size=8,
                           device="cpu", precision="bf16-mixed")
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in ae_hist)
    torch.manual_seed(0)
    cfg = GenConfig(n_latents=4, d_latent=4, max_parts=40, d_model=32, n_layers=2, attention="moca", dense_warmup=0.5)
    init = PartFlowTransformer(cfg)
    before = copy.deepcopy(init.state_dict())
    gen, stats, hist = fit(ds, ae, steps=4, batch_size=4, text_encoder=Enc(), device="cpu", precision="bf16-mixed",
                           init=init)
    assert all(torch.isfinite(torch.tensor([h["loss"], h["router_distill"]])).all() for h in hist)
    after = gen.state_dict()
    assert all(v.dtype == torch.float32 for v in after.values())  # mixed precision keeps fp32 weights
    changed = [k for k in after if not torch.equal(before[k], after[k])]
    assert any("router" in k for k in changed) and any("qkv" in k for k in changed) and "z_out.weight" in changed
    MoCAPipeline(ae, gen, stats).save(tmp_path / "pipe")
    loaded = MoCAPipeline.load(tmp_path / "pipe")
    assert next(loaded.gen.parameters()).device.type == "cpu"
    assert all(v.dtype == torch.float32 and torch.equal(v, after[k]) for k, v in loaded.gen.state_dict().items())
    g = loaded.sample("chair", 5, seed=0, steps=2)[0]
    assert g.points.dtype.name == "float32" and torch.isfinite(torch.from_numpy(g.points)).all()


def test_16_mixed_and_a_missing_gpu_are_refused(tiny_data):
    from generation3d.data import PartDataset
    from generation3d.train import pretrain

    ds = PartDataset.load(tiny_data)
    with pytest.raises(DeviceError, match="16-mixed needs a CUDA GPU"):
        pretrain(ds, AEConfig(n_latents=2, d_latent=2, d_model=8, n_heads=2, n_out=16), steps=1, device="cpu",
                 precision="16-mixed")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="GPU"):
            time_train_step("S", "moca", 4, 2, device="cuda")


def test_sampling_follows_the_pipeline_device(tiny_pipeline):
    pipe = MoCAPipeline.load(tiny_pipeline)
    a = pipe.sample("table", 4, seed=1, steps=2)[0]
    b = pipe.to("cpu").sample("table", 4, seed=1, steps=2)[0]
    assert pipe.device.type == "cpu"
    assert (a.points == b.points).all() and (a.boxes == b.boxes).all()


def test_the_default_size_is_the_results_recipe():
    s, cfg, ae = MODEL_SIZES.lookup(MODEL_SIZES.default), GenConfig(), AEConfig()
    assert (s.d_model, s.n_layers, s.n_heads, s.tokens_per_part) == (cfg.d_model, cfg.n_layers, cfg.n_heads, ae.n_latents)
    widths = [MODEL_SIZES[n].d_model for n in MODEL_SIZES]
    assert widths == sorted(widths) and all(m.d_model % m.n_heads == 0 for m in MODEL_SIZES.values())
    with pytest.raises(InputError, match="unknown model size 'XXL'; choose from S, B, L"):
        MODEL_SIZES.lookup("XXL")


def test_time_train_step_reports_a_finite_step_and_the_model_size():
    row = time_train_step("S", "moca", parts=6, tokens_per_part=2, device="cpu", steps=1)
    size = MODEL_SIZES["S"]
    cfg = GenConfig(n_latents=2, d_latent=8, max_parts=6, d_model=size.d_model, n_layers=size.n_layers,
                    n_heads=size.n_heads)
    assert row["params"] == sum(p.numel() for p in PartFlowTransformer(cfg).parameters())
    assert row["time_ms"] > 0 and row["peak_mem_mb"] > 0 and row["device"].startswith("cpu")
    full = time_train_step("S", "full", parts=6, tokens_per_part=2, device="cpu", steps=1, precision="bf16-mixed")
    assert full["params"] < row["params"]  # no router, no compressor
    assert full["precision"] == "bf16-mixed"


def test_sizes_suite_writes_one_row_per_size(tmp_path, monkeypatch):
    import generation3d.bench as bench

    calls = []

    def fake(name, attention, parts, tokens, device, precision, steps, seed):
        calls.append((name, tokens))
        return {"model_size": name, "tokens_per_part": tokens, "params": 1, "time_ms": 1.0, "peak_mem_mb": 1.0,
                "d_model": 1, "n_layers": 1, "n_heads": 1}

    monkeypatch.setattr(bench, "time_train_step", fake)
    run_sizes_bench(tmp_path / "sizes.json", parts=4, steps=1, device="cpu")
    assert calls == [(n, MODEL_SIZES[n].tokens_per_part) for n in MODEL_SIZES]
    assert [r["model_size"] for r in json.loads((tmp_path / "sizes.json").read_text())["rows"]] == list(MODEL_SIZES)
    assert main(["bench", "--suite", "sizes", "--out", str(tmp_path / "sizes.json")]) == 2  # exists, no --overwrite
