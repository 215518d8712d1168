import pytest
import torch

from common.errors import CheckpointError, InputError
from tests.vision.conftest import tiny_models, tiny_moh
from vision.models import build_backbone, load_backbone
from vision.models.layers import AdaLNMambaBlock, count_parameters
from vision.sampling import backbone_call, load_sampler, make_train_scheduler, save_checkpoint

NAMES = ["moh", "mamba", "dit", "unet"]


def _batch(b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 1, 16, 16, generator=g), torch.tensor([5, 500, 999][:b])


def _perturb(model):
    # zero-initialised heads would make every output 0: give all weights random values first
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip_identical_outputs(name, tmp_path):
    model = _perturb(tiny_models()[name]).eval()
    x, t = _batch()
    with torch.no_grad():
        before = backbone_call(model, x, t)[0]
    save_checkpoint(model, tmp_path / name)
    loaded = load_backbone(tmp_path / name)
    with torch.no_grad():
        after = backbone_call(loaded, x, t)[0]
    assert type(loaded) is type(model)
    assert before.abs().sum() > 0
    assert torch.equal(before, after)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_under_seed(name):
    a, b = tiny_models()[name], tiny_models()[name]
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=False):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize("name", ["moh", "mamba", "dit"])
def test_wrong_image_size_or_channels_is_input_error(name):
    model = tiny_models()[name]
    with pytest.raises(InputError, match="expected images of shape"):
        model(torch.randn(2, 3, 16, 16), 10)
    with pytest.raises(InputError, match="expected images of shape"):
        model(torch.randn(2, 1, 20, 20), 10)
    with pytest.raises(InputError, match="timestep"):
        model(torch.randn(2, 1, 16, 16), torch.tensor([1, 2, 3]))


def test_corrupt_checkpoint_is_checkpoint_error(tmp_path):
    model = tiny_moh()
    save_checkpoint(model, tmp_path / "ck")
    weights = next((tmp_path / "ck").glob("*.safetensors"))
    weights.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="cannot load checkpoint"):
        load_backbone(tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="corrupt checkpoint config"):
        load_backbone(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_backbone(tmp_path / "missing")


def test_router_is_deterministic_and_timestep_conditioned():
    model = _perturb(tiny_moh()).eval()
    x = torch.randn(4, 1, 16, 16)
    t = torch.tensor([7, 7, 900, 900])
    with torch.no_grad():
        r1 = model(x, t).route
        r2 = model(x.flip(0), t).route  # routes depend on the timestep only, not the image
    for key in ("depth", "levels", "transform"):
        assert torch.equal(r1[key], r2[key])
        assert torch.equal(r1[key][0], r1[key][1]) and torch.equal(r1[key][2], r1[key][3])
    assert r1["levels"][:, 0].all()  # the fine level is always used
    assert (r1["levels"].sum(1) == 2).all()  # k_levels = 2


def _count_block_calls(model, x, t, route):
    calls = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: calls.append(inp[0].shape[0]))
             for m in model.modules() if isinstance(m, AdaLNMambaBlock)]
    with torch.no_grad():
        info = model(x, t, route=route).route
    for h in hooks:
        h.remove()
    return sum(calls), info


def test_shallower_route_runs_fewer_layers():
    model = tiny_moh().eval()
    x, t = _batch()
    shallow, info_s = _count_block_calls(model, x, t, {"depth": 1, "levels": [0]})
    deep, info_d = _count_block_calls(model, x, t, {"depth": 3, "levels": [0]})
    full, info_f = _count_block_calls(model, x, t, {"depth": 3, "levels": [0, 1, 2]})
    assert shallow == 3 * 1 and deep == 3 * 3 and full == 3 * (3 + 2)  # batch 3, 1 block per coarse level
    assert (info_s["sample_layers"], info_d["sample_layers"], info_f["sample_layers"]) == (shallow, deep, full)


def test_mixed_depths_in_one_batch_run_per_sample_blocks():
    model = tiny_moh().eval()
    x, t = _batch()
    with torch.no_grad():
        out = model(x, t)
    calls, info = _count_block_calls(model, x, t, None)
    expected = int(info["depth"].sum()) + int(info["levels"][:, 1:].sum())
    assert calls == expected == info["sample_layers"]
    # per-sample results equal running each sample alone (grouping does not mix samples)
    with torch.no_grad():
        single = torch.cat([model(x[i:i + 1], t[i:i + 1]).sample for i in range(3)])
    assert torch.allclose(out.sample, single, atol=1e-5)


def test_forced_route_validation():
    model = tiny_moh()
    x, t = _batch()
    with pytest.raises(InputError, match="depth must be one of"):
        model(x, t, route={"depth": 2})
    with pytest.raises(InputError, match="levels must be in"):
        model(x, t, route={"levels": [5]})
    with pytest.raises(InputError, match="forces 'depth' and / or 'levels'"):
        model(x, t, route={"transform": 1})


def test_routers_receive_gradient():
    model = _perturb(tiny_moh()).train()
    x, t = _batch()
    out = model(x, t)
    (out.sample.pow(2).mean() + out.aux_loss).backward()
    for router in (model.transform_router.gate, model.depth_router.gate, model.level_gate):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_sequential_and_parallel_scan_give_same_model_output(monkeypatch):
    import vision.models.layers as layers
    from vision.scan import selective_scan_sequential

    model = _perturb(tiny_moh()).eval()
    x, t = _batch()
    with torch.no_grad():
        par = model(x, t).sample
        monkeypatch.setattr(layers, "selective_scan", selective_scan_sequential)  # the reference loop
        seq = model(x, t).sample
    assert torch.allclose(par, seq, atol=1e-5)


def test_baselines_are_parameter_matched():
    moh = build_backbone("moh")
    target = count_parameters(moh)
    for name in ("mamba", "dit", "unet"):
        assert abs(count_parameters(build_backbone(name)) - target) / target < 0.15, name


def test_checkpoint_carries_its_prediction_type_and_refuses_without_one(tmp_path):
    from diffusers import DDIMScheduler, DDPMScheduler

    model = tiny_moh()
    eps = DDPMScheduler.from_config(make_train_scheduler().config, prediction_type="epsilon")
    save_checkpoint(model, tmp_path / "eps", scheduler=eps)
    ddim = load_sampler(tmp_path / "eps", "ddim")
    assert isinstance(ddim, DDIMScheduler) and ddim.config.prediction_type == "epsilon"
    dpm = load_sampler(tmp_path / "eps", "dpmsolver++")
    assert dpm.config.prediction_type == "epsilon" and dpm.config.beta_schedule == eps.config.beta_schedule
    save_checkpoint(model, tmp_path / "x0")
    assert load_sampler(tmp_path / "x0", "ddpm").config.prediction_type == make_train_scheduler().config.prediction_type
    model.save_pretrained(str(tmp_path / "bare"))  # weights only: the prediction type would be a guess
    with pytest.raises(CheckpointError, match="no scheduler_config.json"):
        load_sampler(tmp_path / "bare")
    (tmp_path / "x0" / "scheduler_config.json").write_text('{"_class_name": "DDPMScheduler", "prediction_type": "flow"}')
    with pytest.raises(CheckpointError, match="unsupported prediction_type 'flow'"):
        load_sampler(tmp_path / "x0")


@pytest.mark.parametrize("name", ["moh-fmnist", "mamba-fmnist"])
def test_shipped_weights_predict_the_same_with_the_reference_scan(name, monkeypatch):
    """The shipped weights were trained with the chunked scan; the model's scan (now the recurrent
    form) must give the function they were trained as, the reference recurrence's."""
    import vision.models.layers as layers
    from common.shipped import shipped_models
    from vision.scan import selective_scan_sequential

    model = load_backbone(shipped_models()[name]).eval()
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(4, 1, 32, 32, generator=g), torch.tensor([10, 300, 600, 990])
    with torch.no_grad():
        fast = model(x, t).sample
        monkeypatch.setattr(layers, "selective_scan", selective_scan_sequential)  # the reference loop
        ref = model(x, t).sample
    assert torch.allclose(fast, ref, atol=1e-5 * float(ref.abs().max()), rtol=0)
