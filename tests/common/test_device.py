"""``common.device`` (device names, precision, autocast, loader settings) and the engine on a chosen
device and precision. CI has no GPU: the GPU branches are checked for their refusals here and run
for real by ``scripts/device_check.py`` on a GPU machine."""

from __future__ import annotations

import argparse

import lightning.pytorch as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from apps.hub import main as hub_main
from common import device as dev
from common.engine import make_trainer
from common.pretrained import PretrainedMixin, load_pretrained, register_model, register_to_config

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")


@pytest.fixture(autouse=True)
def _reset_default():
    yield
    dev.set_default_device(None)


@pytest.mark.parametrize("text,expected", [("auto", "auto"), ("cpu", "cpu"), (" CPU ", "cpu"), ("AUTO", "auto")])
def test_parse_device_accepts_names(text, expected):
    assert dev.parse_device(text) == expected


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "cuda:-1", "", "mps", "cpu:0", "cuda0"])
def test_parse_device_refuses_other_names(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected auto, cpu, cuda or cuda:N"):
        dev.parse_device(text)


@no_gpu
def test_auto_is_the_cpu_without_a_gpu():
    assert dev.resolve_device("auto") == torch.device("cpu")
    assert dev.resolve_device(None) == torch.device("cpu")
    assert dev.resolve_device(torch.device("cpu")) == torch.device("cpu")


@no_gpu
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_asked_for_and_absent_is_refused(name):
    with pytest.raises(dev.DeviceError, match="asked for a GPU") as info:
        dev.resolve_device(name)
    assert "\n" not in str(info.value) and "--device cpu" in str(info.value)
    with pytest.raises(argparse.ArgumentTypeError, match="GPU"):  # at parse time, before any work
        dev.parse_device(name)


@no_gpu
def test_default_device_changes_what_auto_means():
    dev.set_default_device("cpu")
    assert dev.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(dev.DeviceError):
        dev.set_default_device("cuda")
    dev.set_default_device(None)
    assert dev.resolve_device("auto") == torch.device("cpu")


def test_precision_checks():
    cpu = torch.device("cpu")
    assert dev.check_precision("32", cpu) == "32"
    assert dev.check_precision("bf16-mixed", cpu) == "bf16-mixed"
    with pytest.raises(dev.DeviceError, match="16-mixed needs a CUDA GPU"):
        dev.check_precision("16-mixed", cpu)
    with pytest.raises(dev.DeviceError, match="must be one of"):
        dev.check_precision("64", cpu)


def test_autocast_runs_matmuls_in_bf16_on_the_cpu():
    cpu = torch.device("cpu")
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with dev.autocast(cpu, "bf16-mixed"):
        assert (a @ b).dtype == torch.bfloat16
    with dev.autocast(cpu, "32"):
        assert (a @ b).dtype == torch.float32


def test_trainer_and_loader_settings(monkeypatch):
    cpu = torch.device("cpu")
    assert dev.trainer_kwargs(cpu) == {"accelerator": "cpu", "devices": 1}
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert dev.trainer_kwargs(cpu, world=4) == {"accelerator": "cpu", "devices": 2}
    assert dev.loader_kwargs(cpu) == {}
    assert dev.describe(cpu).startswith("cpu (")


@register_model("device_probe")
class _Probe(PretrainedMixin, nn.Module):
    """A two-layer MLP: ``x: (b, 4) -> (b, 1)``."""

    @register_to_config
    def __init__(self, hidden: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)

    @classmethod
    def tiny_example(cls):
        return cls(hidden=4), (torch.randn(2, 4),)


class _Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = _Probe()
        self.dtypes: list[torch.dtype] = []

    def training_step(self, batch, _):
        x, y = batch
        out = self.model(x)
        self.dtypes.append(out.dtype)
        return nn.functional.mse_loss(out.float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def test_bf16_mixed_training_on_the_cpu_keeps_fp32_weights_that_load_anywhere(tmp_path):
    module = _Module()
    before = [p.detach().clone() for p in module.parameters()]
    trainer = make_trainer(None, max_steps=4, progress=False, checkpoint=False, device="cpu", precision="bf16-mixed")
    trainer.fit(module, _loader())
    assert module.dtypes and set(module.dtypes) == {torch.bfloat16}  # autocast was on
    assert all(p.dtype == torch.float32 for p in module.parameters())  # master weights stay fp32
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    module.model.save_pretrained(tmp_path / "probe")
    loaded = load_pretrained(tmp_path / "probe")
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in loaded.parameters())
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x), module.model(x))


def test_fp32_default_is_unchanged_by_the_device_arguments():
    results = []
    for kw in ({}, {"device": "cpu", "precision": "32"}, {"device": "auto"}):
        torch.manual_seed(0)
        module = _Module()
        make_trainer(None, max_steps=4, progress=False, checkpoint=False, **kw).fit(module, _loader())
        results.append([p.detach().clone() for p in module.parameters()])
        assert set(module.dtypes) == {torch.float32}
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


@no_gpu
def test_engine_refuses_an_absent_gpu_and_fp16_on_the_cpu():
    with pytest.raises(dev.DeviceError, match="asked for a GPU"):
        make_trainer(None, device="cuda", progress=False)
    with pytest.raises(dev.DeviceError, match="16-mixed"):
        make_trainer(None, device="cpu", precision="16-mixed", progress=False)


@no_gpu
def test_hub_device_flag(capsys):
    assert hub_main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "GPU" in err[0]


def test_to_device_moves_nested_tensors_and_keeps_the_rest():
    cpu = torch.device("cpu")
    x = torch.ones(2)
    out = dev.to_device({"a": x, "b": [x, (x, 3)], "c": "text", "d": None}, cpu)
    assert out["a"].device == cpu and isinstance(out["b"], list) and isinstance(out["b"][1], tuple)
    assert out["b"][1][1] == 3 and out["c"] == "text" and out["d"] is None
    assert torch.equal(out["b"][1][0], x)
