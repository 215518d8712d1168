"""Model sizes (the README's size table), the step timer the GPU check uses, and mixed-precision
training on the CPU."""

import numpy as np
import pytest
import torch
from PIL import Image

from common.errors import InputError
from tests.vision.conftest import tiny_moh
from vision.cli import main
from vision.models import MODEL_NAMES, MODEL_SIZES, build_backbone, load_backbone, moh_config
from vision.models.layers import count_parameters
from vision.sampling import CHECKPOINT
from vision.train import TrainConfig, fit


def _images(n=32, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, size, size, generator=g) * 2 - 1


def test_bf16_mixed_training_on_cpu_keeps_fp32_weights(tmp_path):
    """bfloat16 autocast around the forward pass: the loss stays finite, the weights move, and
    the checkpoint holds fp32 weights that load on the CPU and give finite outputs."""
    torch.manual_seed(0)
    model = tiny_moh()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = fit(model, _images(), TrainConfig(steps=4, batch_size=8, lr=3e-3, warmup=1, checkpoint_every=0),
              out_dir=tmp_path, device="cpu", precision="bf16-mixed")
    assert res.steps == 4 and np.isfinite(res.final_loss)
    assert all(np.isfinite(h["loss"]) for h in res.history)
    moved = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert moved, "no weight changed"
    assert all(v.dtype == torch.float32 for v in model.state_dict().values() if v.is_floating_point())
    loaded = load_backbone(tmp_path / CHECKPOINT)
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in loaded.parameters())
    for k, v in loaded.state_dict().items():
        torch.testing.assert_close(v, model.state_dict()[k], rtol=0, atol=0)
    with torch.no_grad():
        out = loaded(_images(4), torch.tensor([1, 300, 600, 999])).sample
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


def test_bf16_autocast_forward_with_mixed_routes_matches_fp32_closely():
    """Samples routed to different scan depths (the partial-batch block path) under bf16
    autocast: same routes as fp32 and outputs close to them."""
    torch.manual_seed(0)
    model = tiny_moh(depth_choices=(1, 2, 3)).eval()
    for p in model.parameters():  # move every weight off its (often zero) initialisation
        p.data.add_(torch.randn_like(p) * 0.1)
    x, t = _images(64), torch.arange(64) * 15
    with torch.no_grad():
        ref = model(x, t)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x, t)
    assert len(ref.route["depth"].unique()) > 1, "the test needs samples on different depths"
    assert torch.isfinite(low.sample).all()
    assert (low.route["depth"] == ref.route["depth"]).float().mean() > 0.9
    err = (low.sample.float() - ref.sample).abs().mean() / ref.sample.abs().mean()
    assert err < 0.1


def test_model_sizes_grow_and_the_baselines_are_matched_to_moh():
    """On the meta device (no memory): each size has more parameters than the one before, S is
    within 10 % of DiT-S/2's 33M, and every baseline lies within 15 % of MoH of its size."""
    previous = 0
    with torch.device("meta"):
        for name in MODEL_SIZES:
            moh = count_parameters(build_backbone("moh", name))
            assert moh > previous
            previous = moh
            for baseline in MODEL_NAMES[1:]:
                n = count_parameters(build_backbone(baseline, name))
                assert abs(n - moh) / moh < 0.15, (name, baseline, n, moh)
        s = count_parameters(build_backbone("moh", "S", in_channels=4))
    assert abs(s - 32.5e6) / 32.5e6 < 0.1
    assert moh_config("XS")["d_model"] == 32 and moh_config("S")["d_model"] == 384
    with pytest.raises(InputError, match="unknown model size"):
        build_backbone("moh", "XL")


def test_xs_is_the_default_model():
    torch.manual_seed(0)
    a = build_backbone("moh")
    torch.manual_seed(0)
    b = build_backbone("moh", "XS")
    assert count_parameters(a) == 105_971  # the README's XS row
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])


def test_s_backbone_is_built_on_the_cpu_with_its_geometry():
    torch.manual_seed(0)
    model = build_backbone("dit", "S", sample_size=32, in_channels=1)
    assert model.config.d_model == 384 and model.config.patch_size == 2 and model.config.heads == 6
    assert next(model.parameters()).device.type == "cpu"
    assert count_parameters(model) == pytest.approx(count_parameters(_meta_moh("S")), rel=0.15)


def _meta_moh(size):
    with torch.device("meta"):
        return build_backbone("moh", size)


@pytest.mark.parametrize("backbone", ["moh", "dit"])
def test_time_train_step_reports_a_median_and_the_parameters(backbone):
    from vision.bench import time_train_step

    row = time_train_step("XS", backbone, "cpu", steps=2, batch_size=4)
    assert row["params"] == count_parameters(build_backbone(backbone, "XS"))
    assert row["tokens"] == 64 and row["device"].startswith("cpu") and row["forward_only"] is False
    assert len(row["ms_per_step_all"]) == 2 and row["ms_per_step"] == pytest.approx(np.median(row["ms_per_step_all"]))
    assert row["ms_per_step"] > 0 and row["peak_memory_mb"] > 0
    fwd = time_train_step("XS", backbone, "cpu", precision="bf16-mixed", steps=1, batch_size=2, forward_only=True)
    assert fwd["forward_only"] is True and fwd["precision"] == "bf16-mixed" and fwd["ms_per_step"] > 0


def test_sizes_suite_writes_json_rows(tmp_path):
    import json

    path = tmp_path / "sizes.json"
    assert main(["bench", "--suite", "sizes", "--sizes", "XS", "--models", "moh", "--steps", "1",
                 "--batch-size", "2", "--device", "cpu", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    (row,) = data["rows"]
    assert (row["model_size"], row["backbone"], row["params"], row["batch_size"]) == ("XS", "moh", 105_971, 2)
    assert data["config"]["sizes"] == ["XS"] and data["device"].startswith("cpu")
    (size,) = data["sizes"]
    assert size["width"] == 32 and size["depth_choices"] == [2, 4, 6] and size["tokens"] == 64
    assert size["params"] == {"moh": 105_971, "mamba": 106_864, "dit": 102_928, "unet": 100_045}  # the XS results


def test_cli_trains_bf16_on_the_cpu_then_samples(tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(folder / f"{i}.png")
    out = tmp_path / "run"
    assert main(["train", "--data", str(folder), "--size", "16", "--channels", "1", "--model-size", "XS",
                 "--steps", "2", "--batch-size", "2", "--device", "cpu", "--precision", "bf16-mixed",
                 "--out", str(out)]) == 0
    assert "(XS)" in capsys.readouterr().out
    model = load_backbone(out / CHECKPOINT)
    assert model.config.d_model == 32 and all(p.dtype == torch.float32 for p in model.parameters())
    assert main(["sample", "--ckpt", str(out), "--n", "2", "--steps", "2", "--device", "cpu",
                 "--out", str(tmp_path / "g.png")]) == 0


@pytest.mark.parametrize("argv, message", [
    (["train", "--model-size", "XL"], "invalid choice"),
    (["train", "--precision", "16-mixed", "--device", "cpu", "--steps", "1"], "16-mixed"),
    (["bench", "--suite", "quick", "--sizes", "S"], "--sizes applies to --suite sizes only"),
    (["bench", "--suite", "sizes", "--budget-min", "1"], "--budget-min applies to --suite compute only"),
    (["bench", "--suite", "compute", "--steps", "3"], "--steps does not apply"),
    (["bench", "--suite", "scaling"], "invalid choice"),
    (["bench", "--suite", "sizes"], "--out does not apply"),
])
def test_bad_size_precision_and_suite_options_are_one_line_errors(argv, message, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


@pytest.mark.slow
def test_cli_size_s_trains_samples_and_evaluates(tmp_path, capsys):
    """The GPU check's path (``moh train --model-size S --precision bf16-mixed`` then ``sample`` and
    ``eval`` on the checkpoint) on the CPU, at 16 px and one step (about a minute)."""
    import json

    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(folder / f"{i}.png")
    run = tmp_path / "run"
    assert main(["train", "--model-size", "S", "--data", str(folder), "--size", "16", "--channels", "1",
                 "--steps", "1", "--batch-size", "2", "--device", "cpu", "--precision", "bf16-mixed",
                 "--out", str(run)]) == 0
    model = load_backbone(run / CHECKPOINT)
    assert (model.config.d_model, model.config.patch_size) == (384, 2)
    assert count_parameters(model) == count_parameters(_meta_moh_at(16))
    assert main(["sample", "--ckpt", str(run), "--n", "2", "--steps", "2", "--device", "cpu",
                 "--out", str(tmp_path / "g.png")]) == 0
    assert main(["eval", "--ckpt", str(run), "--data", str(folder), "--n", "6", "--steps", "2", "--device", "cpu",
                 "--out", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["efficientnet_lite0_fid"] >= 0


def _meta_moh_at(size):
    with torch.device("meta"):
        return build_backbone("moh", "S", sample_size=size)


def test_checkpointed_scan_gives_the_same_outputs_and_gradients():
    """``checkpoint_scan`` recomputes the S6 states in the backward pass: values and gradients
    equal those of the stored-states path, bit for bit on the CPU."""
    from vision.models.layers import MambaMixer

    torch.manual_seed(0)
    plain = MambaMixer(16, d_state=4)
    ckpt = MambaMixer(16, d_state=4, checkpoint_scan=True)
    ckpt.load_state_dict(plain.state_dict())
    u = torch.randn(2, 40, 16)
    outs, grads = [], []
    for m in (plain, ckpt):
        x = u.clone().requires_grad_()
        y = m(x)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append([x.grad] + [p.grad for p in m.parameters()])
    assert torch.equal(outs[0], outs[1])
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


def test_large_sizes_checkpoint_the_scan_and_plain_mamba_has_its_registered_name():
    with torch.device("meta"):
        moh = build_backbone("moh", "S")
        mamba = build_backbone("plain_mamba", "S")
    assert moh.config.checkpoint_scan and mamba.config.checkpoint_scan
    assert type(mamba).__name__ == "PlainMambaBackbone"
    assert not build_backbone("moh", "XS").config.checkpoint_scan
