"""The one save/load round trip over every registered model of every app (timm / diffusers style),
the registry's coverage of the apps' models, and the checkpoint errors of ``common.pretrained``."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
from dataclasses import dataclass, fields, is_dataclass

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn

from common.errors import CheckpointError
from common.pretrained import (
    CONFIG,
    FORMAT_VERSION,
    MODEL_REGISTRY,
    WEIGHTS,
    PretrainedMixin,
    checkpoint_info,
    load_pretrained,
    register_to_config,
)

APP_PACKAGES = ("olfaction", "retrieval", "generation3d", "vision", "streaming", "apps")


def _import_all() -> list[str]:
    """Import every module of the app packages (so every model class is defined and registered)."""
    names = []
    for pkg_name in APP_PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg_name}."):
            importlib.import_module(info.name)
            names.append(info.name)
    return names


MODULES = _import_all()

# Every model a train/pipeline path builds, saves or loads, by app (removing a registration fails here).
EXPECTED = {
    "olfaction": {"mol_encoder", "descriptor_pretrainer", "mixscent", "mixture_predictor"},
    "retrieval": {"moa3cir", "combiner_cir", "attribute_classifier"},
    "generation3d": {"part_autoencoder", "moca_generator"},
    "vision": {"moh", "plain_mamba", "dit", "unet", "fmnist_classifier"},
    "streaming": {"mosaic"},
}

# nn.Module classes of the apps that are neither registered nor inside a registered model's tiny
# example: each is a building block of a registered model (in a configuration the tiny example
# does not use) or a demo model that is never saved.
NOT_MODELS = {
    "olfaction.model.MoELabelHead": "label head of MixScentNet (label_experts > 0)",
    "olfaction.onnx_export.DistanceGraph": "ONNX-export view of the saved MixturePredictor's distance network",
    "olfaction.onnx_export.LabelGraph": "ONNX-export view of the saved MixturePredictor's label network",
    "generation3d.attention.ComponentAttention": "base of the MoCA generator's token mixers",
    "generation3d.attention.FullAttention": "token mixer of the generator (attention='full')",
    "generation3d.attention.TopKAttention": "token mixer of the generator (attention='topk')",
    "generation3d.attention.LocalWindowAttention": "token mixer of the generator (attention='local')",
    "generation3d.attention.SparseComponentAttention": "base of the routed token mixers of the generator",
    "retrieval.towers.CIRTowers": "base class of the registered retrieval models (towers, phase-1 losses)",
    "vision.models.layers.DiffusionBackbone": "base class of the registered vision backbones",
    "vision.models.layers.FixedStackBackbone": "base class of the fixed-depth vision backbones (plain Mamba, DiT)",
    "apps.core.quick.MoEClassifier": "make demo's core model, trained and evaluated in memory, never saved",
    "apps.core.quick.DenseClassifier": "make demo's core baseline, trained and evaluated in memory, never saved",
}


def _tensors(out) -> list:
    """The tensors / arrays of a model output (tuples, lists, dicts, diffusers outputs)."""
    if isinstance(out, (torch.Tensor, np.ndarray)):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _tensors(v)]
    return []


def _assert_same(a, b, where: str = "model") -> None:
    """Deep equality of two values: arrays and tensors by dtype and value, containers item by item,
    RNGs by state, objects by their attributes."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif is_dataclass(a) and not hasattr(a, "__dict__"):  # slots=True: the fields are all its attributes
        _assert_same({f.name: getattr(a, f.name) for f in fields(a)}, {f.name: getattr(b, f.name) for f in fields(b)}, where)
    elif is_dataclass(a) or hasattr(a, "__dict__") and not isinstance(a, type):
        _assert_same(vars(a), vars(b), where)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _other_model(cls) -> type:
    """A registered class of another app than ``cls``."""
    return next(c for c in MODEL_REGISTRY.values() if c.app != cls.app)


def test_every_app_model_is_registered():
    registered = {(c.app, name) for name, c in MODEL_REGISTRY.items()}
    for app, names in EXPECTED.items():
        assert {(app, n) for n in names} <= registered, app
    inside = set()  # classes of the sub-modules of the registered models' tiny examples
    for cls in MODEL_REGISTRY.values():
        model = cls.tiny_example()[0]
        if isinstance(model, nn.Module):
            inside.update(type(m) for m in model.modules())
    missing = []
    for name in MODULES:
        for _, obj in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            qual = f"{obj.__module__}.{obj.__qualname__}"
            if obj.__module__ != name or not issubclass(obj, nn.Module):
                continue
            if issubclass(obj, pl.LightningModule):  # training wrappers around a registered model
                continue
            if obj in MODEL_REGISTRY.values() or obj in inside or qual in NOT_MODELS:
                continue
            missing.append(qual)
    assert not missing, f"register these models (@register_model) or list them in NOT_MODELS: {missing}"
    for qual in NOT_MODELS:  # no stale entries
        module, _, cls_name = qual.rpartition(".")
        cls = getattr(importlib.import_module(module), cls_name)
        assert cls not in MODEL_REGISTRY.values() and cls not in inside, f"{qual} needs no NOT_MODELS entry"


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_round_trip(name, tmp_path):
    cls = MODEL_REGISTRY[name]
    model, inputs = cls.tiny_example()
    assert type(model) is cls
    if isinstance(model, nn.Module):
        model.eval()
    path = model.save_pretrained(tmp_path / "ck", extra={"note": "round trip", "epochs": 3})
    extra_files = getattr(cls, "extra_files", ())  # what a model's own save writes beside the two (ONNX exports)
    assert sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) == sorted([CONFIG, WEIGHTS, *extra_files])
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]
    meta = json.loads((path / CONFIG).read_text())
    assert (meta["format_version"], meta["app"], meta["model_type"], meta["config_version"]) == (
        FORMAT_VERSION, cls.app, name, cls.config_version)
    assert meta["extra"] == {"note": "round trip", "epochs": 3} == checkpoint_info(path).extra

    loaded = load_pretrained(path)
    assert type(loaded) is cls and type(cls.from_pretrained(path)) is cls
    assert loaded.pretrained_config == model.pretrained_config == meta["config"]
    tensors, state = model.checkpoint_state()
    tensors2, state2 = loaded.checkpoint_state()
    _assert_same(tensors, tensors2, "tensors")
    _assert_same(state, state2, "state")
    if isinstance(model, nn.Module):
        assert not loaded.training
    else:  # not a state_dict: every attribute must survive (the captured arguments are compared above)
        attrs = [{k: v for k, v in vars(m).items() if k != "_pretrained_config"} for m in (model, loaded)]
        _assert_same(*attrs, cls.__name__)
    with torch.no_grad():
        before, after = _tensors(model.example_forward(*inputs)), _tensors(loaded.example_forward(*inputs))
    assert before and any(float(np.abs(np.asarray(t)).sum()) > 0 for t in before)
    _assert_same(before, after, "outputs")


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_wrong_model_and_damaged_checkpoints_are_checkpoint_errors(name, tmp_path):
    cls = MODEL_REGISTRY[name]
    model, _ = cls.tiny_example()
    path = model.save_pretrained(tmp_path / "ck")
    other = _other_model(cls)
    with pytest.raises(CheckpointError, match=f"holds a {cls.app} model '{name}', not {other.app} '{other.model_type}'"):
        other.from_pretrained(path)
    same_app = [c for c in MODEL_REGISTRY.values() if c.app == cls.app and c is not cls]
    for c in same_app[:1]:
        with pytest.raises(CheckpointError, match=f"not {cls.app} '{c.model_type}'"):
            c.from_pretrained(path)

    meta = json.loads((path / CONFIG).read_text())
    newer = {**meta, "config_version": cls.config_version + 1}
    (path / CONFIG).write_text(json.dumps(newer))
    with pytest.raises(CheckpointError, match="newer than this version reads"):
        cls.from_pretrained(path)
    (path / CONFIG).write_text(json.dumps({**meta, "format_version": "2a"}))
    with pytest.raises(CheckpointError, match="non-numeric format version '2a'"):
        cls.from_pretrained(path)
    (path / CONFIG).write_text(json.dumps({**meta, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(CheckpointError, match="newer than this version reads"):
        load_pretrained(path)
    (path / CONFIG).write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt checkpoint config"):
        load_pretrained(path)
    (path / CONFIG).write_text(json.dumps(meta))
    weights = (path / WEIGHTS).read_bytes()
    (path / WEIGHTS).write_bytes(weights[: len(weights) // 2])
    with pytest.raises(CheckpointError, match="corrupt weights"):
        cls.from_pretrained(path)
    (path / WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_pretrained(path)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        cls.from_pretrained(tmp_path / "missing")


def test_state_dict_mismatch_names_the_first_key(tmp_path):
    from retrieval.augment import AttributeClassifier

    model, _ = AttributeClassifier.tiny_example()
    path = model.save_pretrained(tmp_path / "ck")
    meta = json.loads((path / CONFIG).read_text())
    (path / CONFIG).write_text(json.dumps({**meta, "config": {"d": 16}}))
    with pytest.raises(CheckpointError, match="does not match the model: .*size mismatch"):
        AttributeClassifier.from_pretrained(path)
    model.heads.append(nn.Linear(128, 2))  # an extra head the class does not build
    model.save_pretrained(path)
    with pytest.raises(CheckpointError, match="unexpected key 'heads.8.(weight|bias)'"):  # 8 attribute groups
        AttributeClassifier.from_pretrained(path)
    del model.heads[-2:]
    model.save_pretrained(path)
    with pytest.raises(CheckpointError, match="missing key 'heads.7.weight'"):
        AttributeClassifier.from_pretrained(path)
    (path / CONFIG).write_text(json.dumps({**meta, "config": {"d": 8, "width": 3}}))
    with pytest.raises(CheckpointError, match="config that does not fit retrieval 'attribute_classifier'"):
        AttributeClassifier.from_pretrained(path)


def test_an_interrupted_save_keeps_the_old_checkpoint_and_a_torn_pair_is_refused(tmp_path, monkeypatch):
    from retrieval.augment import AttributeClassifier

    old, inputs = AttributeClassifier.tiny_example()
    path = old.save_pretrained(tmp_path / "ck")
    os.chmod(path / CONFIG, 0o640)
    torch.manual_seed(1)
    new = AttributeClassifier(d=8)
    real_replace, calls = os.replace, []

    def crash_before_first_replace(src, dst):
        calls.append(dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash_before_first_replace)
    with pytest.raises(KeyboardInterrupt):
        new.save_pretrained(path)
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(p.name for p in path.iterdir()) == sorted([CONFIG, WEIGHTS])  # no temporary file left
    _assert_same(AttributeClassifier.from_pretrained(path).state_dict(), old.state_dict())
    # a kill between the two replaces: new weights beside the old config
    stale_config = (path / CONFIG).read_bytes()
    new.save_pretrained(path)
    assert (path / CONFIG).stat().st_mode & 0o777 == 0o640  # the replaced file keeps its permissions
    (path / CONFIG).write_bytes(stale_config)
    with pytest.raises(CheckpointError, match="come from different saves"):
        AttributeClassifier.from_pretrained(path)


def test_an_older_format_or_config_version_is_refused_in_one_line(tmp_path, monkeypatch):
    """No shipped or documented checkpoint has an older version: the loader reads the current ones
    only, and says so in one line (retrain), through every loader of the suite."""
    from retrieval.augment import AttributeClassifier
    from retrieval.registry import load_model
    from vision.models import load_backbone

    model, _ = AttributeClassifier.tiny_example()
    path = model.save_pretrained(tmp_path / "ck")
    monkeypatch.setattr(AttributeClassifier, "config_version", 2)
    with pytest.raises(CheckpointError, match=r"retrieval 'attribute_classifier' config version 1, older than "
                                              r"this version reads \(2\); retrain the model$"):
        AttributeClassifier.from_pretrained(path)
    monkeypatch.undo()
    meta = json.loads((path / CONFIG).read_text())
    # format 1 (common.checkpoint: no app or model type) and an unknown format 0
    for fmt in (1, 0):
        (path / CONFIG).write_text(json.dumps({"format_version": fmt, "config": meta["config"], "extra": {}}))
        for load in (AttributeClassifier.from_pretrained, load_pretrained, load_model, load_backbone):
            with pytest.raises(CheckpointError, match=rf"has format version {fmt}, older than this version reads "
                                                      rf"\({FORMAT_VERSION}\); retrain the model$") as err:
                load(path)
            assert "\n" not in str(err.value)
    # diffusers' own save_pretrained layout (config.json with _class_name) is not a checkpoint
    (tmp_path / "unet").mkdir()
    (tmp_path / "unet" / CONFIG).write_text(json.dumps({"_class_name": "UNet2DModel", "sample_size": 16}))
    (tmp_path / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_backbone(tmp_path / "unet")


@dataclass
class _Cfg:
    width: int = 4
    tags: tuple = ("a",)


def test_register_to_config_captures_the_constructor_arguments():
    class Probe(PretrainedMixin, nn.Module):
        @register_to_config
        def __init__(self, depth: int, cfg: _Cfg | None = None, scale: float = 0.5, **options):
            super().__init__()
            self.lin = nn.Linear(depth, depth)

    p = Probe(3, scale=2.0, act="relu")
    assert p.pretrained_config == {"depth": 3, "cfg": {"width": 4, "tags": ["a"]}, "scale": 2.0, "act": "relu"}

    class Sub(Probe):  # the outermost constructor's arguments are the config
        @register_to_config
        def __init__(self, n: int = 2):
            super().__init__(n + 1, _Cfg(width=n))

    assert Sub(5).pretrained_config == {"n": 5}
    with pytest.raises(TypeError, match="JSON values or dataclasses"):
        Probe(2, extra_tensor=torch.zeros(1))

    class Undecorated(PretrainedMixin, nn.Module):  # no capture without the decorator
        def __init__(self, depth: int = 2):
            super().__init__()

    with pytest.raises(TypeError, match="not decorated with @register_to_config"):
        _ = Undecorated().pretrained_config
    with pytest.raises(TypeError, match="not registered"):
        p.save_pretrained("unused")
    with pytest.raises(TypeError, match=r"\*args"):

        class Bad(PretrainedMixin, nn.Module):
            @register_to_config
            def __init__(self, *sizes):
                super().__init__()
