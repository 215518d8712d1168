"""``common.shipped``: trained weights committed with the project, found by name, verified by sha256,
stored in half precision and upcast on load; and every model that really ships loads and samples."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from common import shipped
from common.errors import CheckpointError
from common.pretrained import (
    PretrainedMixin,
    checkpoint_info,
    load_pretrained,
    register_model,
    register_to_config,
)

MAX_TOTAL_BYTES = 40 * 2**20  # all shipped weights together


@register_model("shipped_probe")
class _Probe(PretrainedMixin, nn.Module):
    """``x: (b, 4) -> (b, 2)``."""

    @register_to_config
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(hidden=4), (torch.randn(2, 4),)


def smoke(model):
    return model(torch.randn(3, 4))


@pytest.fixture
def pkg_root(tmp_path, monkeypatch):
    (tmp_path / "toyapp").mkdir()
    (tmp_path / "toyapp" / "__init__.py").write_text("")
    monkeypatch.setattr(shipped, "ROOT", tmp_path)
    return tmp_path


def _ship(pkg_root, name="toy-s", **kw):
    torch.manual_seed(0)
    model = _Probe()
    fields = dict(command="toy train --steps 3", data="random", split="none", steps=3, seed=0,
                  metrics={"loss": 0.5}, trained_on="cpu", wall_s=0.1, smoke=f"{__name__}:smoke", commit="abc")
    fields.update(kw)
    return model, shipped.ship(model, name, pkg_root / "toyapp", **fields)


def test_ship_then_load_by_name_upcasts_half_precision(pkg_root):
    model, path = _ship(pkg_root)
    assert path == pkg_root / "toyapp" / "weights" / "toy-s"
    meta = json.loads((path / shipped.MANIFEST).read_text())
    assert meta["dtype"] == "float16" and meta["commit"] == "abc" and meta["model_type"] == "shipped_probe"
    assert set(meta["files"]) == {"model.safetensors", "config.json"}
    assert shipped.shipped_models() == {"toy-s": path}
    loaded = load_pretrained("toy-s")
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    for a, b in zip(model.parameters(), loaded.parameters(), strict=True):
        torch.testing.assert_close(b, a.detach().half().float())  # exactly the fp16 rounding
    assert _Probe.from_pretrained("toy-s").net[0].weight.shape == (16, 4)
    assert checkpoint_info("toy-s").path == path
    assert torch.isfinite(shipped.smoke_function(meta)(loaded)).all()


def test_altered_or_missing_files_are_one_line_errors(pkg_root):
    _, path = _ship(pkg_root)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors does not match its sha256") as info:
        load_pretrained("toy-s")
    assert "\n" not in str(info.value)
    weights.unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        load_pretrained("toy-s")
    with pytest.raises(CheckpointError, match="no checkpoint at nope"):
        load_pretrained("nope")
    with pytest.raises(CheckpointError, match="no shipped model of that name"):
        shipped.resolve_checkpoint("nope")
    (path / shipped.MANIFEST).write_text("{}")
    with pytest.raises(CheckpointError, match="lacks name"):
        shipped.verify(path)


def test_ship_refuses_oversize_bad_names_and_existing_dirs(pkg_root, monkeypatch):
    _ship(pkg_root)
    with pytest.raises(CheckpointError, match="exists"):
        _ship(pkg_root)
    with pytest.raises(ValueError, match="lower-case"):
        _ship(pkg_root, name="Bad Name")
    monkeypatch.setattr(shipped, "MAX_BYTES", 100)
    with pytest.raises(CheckpointError, match="over the"):
        _ship(pkg_root, name="toy-big")


def test_add_file_hashes_a_new_file_into_the_manifest_and_keeps_the_rest(pkg_root, tmp_path, monkeypatch):
    _, path = _ship(pkg_root)
    before = json.loads((path / shipped.MANIFEST).read_text())
    extra = tmp_path / "library.npz"
    extra.write_bytes(b"0123456789")
    shipped.add_file(path, "library.npz", extra)
    after = shipped.verify(path)
    assert set(after["files"]) == {"model.safetensors", "config.json", "library.npz"}
    assert after["size_bytes"] == before["size_bytes"] + 10
    assert {k: v for k, v in after.items() if k not in ("files", "size_bytes")} == \
        {k: v for k, v in before.items() if k not in ("files", "size_bytes")}
    (path / "library.npz").write_bytes(b"altered")
    with pytest.raises(CheckpointError, match="library.npz does not match its sha256"):
        shipped.verify(path)
    (path / "library.npz").write_bytes(b"0123456789")
    monkeypatch.setattr(shipped, "MAX_BYTES", 100)
    with pytest.raises(CheckpointError, match="over the"):
        shipped.add_file(path, "big.bin", extra)


SHIPPED = shipped.shipped_models()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_model_verifies_loads_and_samples(name):
    meta = shipped.verify(SHIPPED[name])
    assert meta["name"] == name and meta["size_bytes"] <= meta.get("max_bytes", shipped.MAX_BYTES) <= 2 * shipped.MAX_BYTES
    model = load_pretrained(name)  # by name alone: resolving it imports the app's smoke module
    assert type(model).model_type == meta["model_type"]
    out = shipped.smoke_function(meta)(model)
    assert torch.isfinite(torch.as_tensor(out)).all()


def test_every_shipped_name_loads_in_a_fresh_process():
    """A user's first call imports nothing of the app: the name alone must register the model."""
    import subprocess
    import sys

    code = ("import sys\nfrom common.pretrained import load_pretrained\n"
            "for name in sys.argv[1:]:\n    print(name, type(load_pretrained(name)).model_type)")
    out = subprocess.run([sys.executable, "-c", code, *sorted(SHIPPED)], capture_output=True, text=True,
                         cwd=shipped.ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(out.stdout.splitlines()) == len(SHIPPED)


def test_shipped_weights_stay_small():
    total = sum(f.stat().st_size for d in SHIPPED.values() for f in d.iterdir())
    assert total <= MAX_TOTAL_BYTES, f"shipped weights take {total / 2**20:.1f} MiB (limit 40 MiB)"


def test_steps_to_reach_extrapolates_per_doubling():
    curve = [{"step": s, "share": 0.1 * k} for k, s in enumerate((1000, 2000, 4000, 8000), start=1)]
    out = shipped.steps_to_reach(curve, "share", 0.6)
    assert out["slope_per_doubling"] == pytest.approx(0.1)
    assert out["predicted_step"] == 32000  # two more doublings
    assert shipped.steps_to_reach(curve[:1], "share", 0.6)["predicted_step"] is None


@pytest.mark.parametrize("values", [(0.3, 0.3), (0.3, 0.3, 0.3, 0.3), (0.717, 0.717, 0.717, 0.717),
                                    (1e-300, 1e-300, 1e-300), (0.5, 0.4, 0.3), (0.2, 0.2 + 1e-15, 0.2, 0.2 + 1e-15)])
def test_steps_to_reach_says_none_for_flat_and_falling_curves(values):
    """Flat (also within rounding) and falling curves predict no step, never an overflow, whatever
    the BLAS kernel: the fit is closed-form."""
    curve = [{"step": 1000 * 2**i, "share": v} for i, v in enumerate(values)]
    out = shipped.steps_to_reach(curve, "share", 0.75)
    assert out["predicted_step"] is None
    assert out["slope_per_doubling"] <= 1e-12


def test_steps_to_reach_caps_hopeless_extrapolations_and_reports_a_reached_target():
    slow = [{"step": 1000 * 2**i, "fid": 0.5 + 1e-6 * i} for i in range(4)]  # 0.25 needs ~250k doublings
    assert shipped.steps_to_reach(slow, "fid", 0.75)["predicted_step"] is None
    reached = [{"step": 1000, "share": 0.7}, {"step": 2000, "share": 0.8}, {"step": 4000, "share": 0.79}]
    assert shipped.steps_to_reach(reached, "share", 0.75)["predicted_step"] == 2000


def test_the_commit_is_recorded_in_full(pkg_root):
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(pkg_root), *args], capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "trained here")
    full, short = git("rev-parse", "HEAD"), git("rev-parse", "--short", "HEAD")
    _, path = _ship(pkg_root, commit=short)
    assert json.loads((path / shipped.MANIFEST).read_text())["commit"] == full
    _, path = _ship(pkg_root, name="toy-b", commit=None)  # default: the checkout's HEAD
    assert json.loads((path / shipped.MANIFEST).read_text())["commit"] == full
