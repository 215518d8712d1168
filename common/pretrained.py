"""One save/load mechanism for every model of the suite (diffusers ``ConfigMixin`` + ``ModelMixin``,
Hugging Face ``PyTorchModelHubMixin`` style) and a registry of the models (timm style).

A checkpoint is a directory with two files:

* ``model.safetensors``: the tensors (an ``nn.Module``'s ``state_dict``);
* ``config.json``: ``{"format_version", "app", "model_type", "config_version", "config", "extra",
  "weights_id"}`` where ``config`` holds the constructor arguments that rebuild the model
  (dataclass arguments as dicts), ``extra`` whatever the caller attached (metrics, label names,
  statistics), ``weights_id`` a random stamp also written into the safetensors header, so a
  weights file and a config of two different saves are never loaded together. A model that
  keeps state outside tensors (MoSAIC) adds ``"state"``.

Usage::

    @register_model("moh")
    class MoHBackbone(PretrainedMixin, nn.Module):
        config_version = 1
        def __init__(self, d_model: int = 64, ...): ...     # arguments captured automatically
        @classmethod
        def tiny_example(cls): return cls(d_model=8), (x, t)   # for the one round-trip test

    model.save_pretrained(path, extra={"fid": 12.3})
    model = MoHBackbone.from_pretrained(path)      # CheckpointError unless it holds a 'moh'
    model = load_pretrained(path)                  # whatever registered model it holds
    model = load_pretrained("moh-fmnist-s")        # a shipped model by name (common.shipped)
    checkpoint_info(path).extra                    # {"fid": 12.3}

Config capture: a model's ``__init__`` is decorated with :func:`register_to_config` (as diffusers'
models are), so the arguments of the outermost constructor call are recorded (defaults included,
``**kwargs`` flattened, a dataclass-typed argument left ``None`` as that dataclass's defaults), so a new constructor
argument cannot be forgotten by the save code. Arguments must be JSON values or dataclasses of
JSON values (else a TypeError at construction).

Versions: ``format_version`` is the layout of the directory (this module's, 2); ``config_version``
is the class's (bump it when the meaning of its config changes). The loader reads exactly the
current format and the class's current config version; an older one (no shipped or documented
checkpoint has one), a newer one, a corrupt, missing or other model's checkpoint is a one-line
``CheckpointError`` (the CLIs print ``error: ...`` and exit 2).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import os
import types
import typing
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_bytes

from common.errors import CheckpointError
from common.io import atomic_write, dumps_json

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 2

MODEL_REGISTRY: dict[str, type[PretrainedMixin]] = {}


def app_of(cls: type) -> str:
    """The app a class belongs to: its top-level package (``apps.core.x`` -> ``core``)."""
    parts = cls.__module__.split(".")
    return parts[1] if parts[0] == "apps" and len(parts) > 1 else parts[0]


def register_model(name: str):
    """Class decorator: register a ``PretrainedMixin`` class under the model type ``name``
    (unique over the suite) and stamp ``cls.model_type`` / ``cls.app``. The class must provide
    ``tiny_example()``; the round-trip test in ``tests/common/test_pretrained.py`` runs on it."""

    def decorate(cls: type[PretrainedMixin]) -> type[PretrainedMixin]:
        if not (isinstance(cls, type) and issubclass(cls, PretrainedMixin)):
            raise TypeError(f"register_model({name!r}) needs a PretrainedMixin subclass, got {cls!r}")
        if "tiny_example" not in vars(cls):
            raise TypeError(f"{cls.__qualname__} must define the classmethod tiny_example() to be registered")
        old = MODEL_REGISTRY.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"model type {name!r} is already registered by {old.__module__}.{old.__qualname__}")
        cls.model_type, cls.app = name, app_of(cls)
        MODEL_REGISTRY[name] = cls
        return cls

    return decorate


# ----------------------------------------------------------------------------- config values


def _encode(value: Any, where: str) -> Any:
    """A constructor argument as plain JSON (dataclass -> dict, tuple -> list)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value}: configs must be finite to be saved as JSON")
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name), f"{where}.{f.name}") for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _encode(v, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(
        f"{where} is a {type(value).__name__}; a saved model's constructor takes JSON values or dataclasses"
    )


def _dataclass_in(hint: Any) -> type | None:
    """The dataclass type of an annotation such as ``Cfg`` or ``Cfg | None``."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a) and isinstance(a, type)]
        return found[0] if len(found) == 1 else None
    return None


def _decode(value: Any, hint: Any) -> Any:
    """Inverse of :func:`_encode` for a value whose annotation is (or contains) a dataclass."""
    dc = _dataclass_in(hint)
    if dc is None or not isinstance(value, dict):
        return value
    hints = typing.get_type_hints(dc)
    return dc(**{k: _decode(v, hints.get(k)) for k, v in value.items()})


def _init_hints(init) -> dict[str, Any]:
    """Resolved annotations of a constructor ({} when one cannot be resolved: no dataclass rebuild)."""
    try:
        return typing.get_type_hints(init)
    except Exception:  # a name only imported under TYPE_CHECKING, say
        return {}


def register_to_config(init):
    """Decorate a ``PretrainedMixin`` model's ``__init__`` so the outermost constructor call records
    its bound arguments as the model's config (``pretrained_config``; the module docstring). A
    subclass with its own ``__init__`` decorates it too; a model that builds its config otherwise
    (an estimator validated at fit) overrides ``pretrained_config`` instead."""
    sig = inspect.signature(init)
    params = list(sig.parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        raise TypeError(f"{init.__qualname__} takes *args; a saved model's arguments must have names")

    @functools.cache
    def dataclass_params() -> dict[str, type]:
        hints = _init_hints(init)
        return {p.name: dc for p in params if (dc := _dataclass_in(hints.get(p.name))) is not None}

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if type(self).__init__ is not wrapped:  # a subclass's __init__ records its own call
            return
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        config: dict[str, Any] = {}
        for p in params:
            value = bound.arguments[p.name]
            if value is None and p.name in dataclass_params():  # `cfg: Cfg | None = None` means Cfg()
                value = dataclass_params()[p.name]()
            if p.kind is p.VAR_KEYWORD:
                config.update({k: _encode(v, f"{type(self).__name__}({k}=...)") for k, v in value.items()})
            else:
                config[p.name] = _encode(value, f"{type(self).__name__}({p.name}=...)")
        object.__setattr__(self, "_pretrained_config", config)

    return wrapped


# ----------------------------------------------------------------------------- the mixin


class PretrainedMixin:
    """``save_pretrained`` / ``from_pretrained`` for a model class (see the module docstring).

    Subclasses: ``(PretrainedMixin, nn.Module)`` models work as they are; a model that is not an
    ``nn.Module`` overrides ``checkpoint_state`` / ``load_checkpoint_state``. Registered classes
    (``@register_model``) define ``tiny_example() -> (model, example_inputs tuple)``; their
    ``example_forward(*example_inputs)`` (default ``self(*inputs)``) is what the round-trip test
    compares before and after a save."""

    model_type: ClassVar[str]
    app: ClassVar[str]
    config_version: ClassVar[int] = 1

    # -- config
    @property
    def pretrained_config(self) -> dict[str, Any]:
        """The constructor arguments (JSON form) that rebuild this model: ``cls(**config)`` after
        dataclass arguments are rebuilt from their dicts."""
        try:
            return json.loads(json.dumps(self.__dict__["_pretrained_config"]))
        except KeyError:
            raise TypeError(f"{type(self).__name__}.__init__ is not decorated with @register_to_config") from None

    @classmethod
    def tiny_example(cls) -> tuple[PretrainedMixin, tuple]:
        """A tiny seeded instance and example inputs for the registry round-trip test."""
        raise NotImplementedError(f"{cls.__name__} defines no tiny_example()")

    def example_forward(self, *inputs):
        """The outputs the round-trip test compares (default: ``self(*inputs)``)."""
        return self(*inputs)

    # -- state: nn.Module defaults
    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """``(tensors, state)`` to save: the ``state_dict`` and no JSON state for an ``nn.Module``."""
        return dict(self.state_dict()), {}

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any], source: str) -> None:
        """Strict load of ``tensors``; CheckpointError naming the first missing or unexpected key
        or the first shape mismatch."""
        own = self.state_dict()
        problems = [f"missing key {k!r}" for k in own if k not in tensors]
        problems += [f"unexpected key {k!r}" for k in tensors if k not in own]
        problems += [
            f"size mismatch for {k!r}: checkpoint {tuple(tensors[k].shape)}, model {tuple(v.shape)}"
            for k, v in own.items() if k in tensors and tensors[k].shape != v.shape
        ]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CheckpointError(f"{source} does not match the model: {problems[0]}{more}")
        self.load_state_dict(tensors, strict=True)

    # -- save / load
    def save_pretrained(self, path_dir: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
        """Write ``model.safetensors`` + ``config.json`` into the directory ``path_dir`` (created);
        returns it. Each file is written with :func:`common.io.atomic_write` (kept permissions, no
        temp file left behind), both before either replaces its target: the weights are replaced,
        then the config. Their shared ``weights_id`` makes a torn pair a CheckpointError."""
        cls = type(self)
        if "model_type" not in vars(cls):
            raise TypeError(f"{cls.__qualname__} is not registered: decorate it with @register_model(name)")
        tensors, state = self.checkpoint_state()
        weights_id = uuid.uuid4().hex
        meta = {"format_version": FORMAT_VERSION, "app": cls.app, "model_type": cls.model_type,
                "config_version": cls.config_version, "config": self.pretrained_config, "extra": extra or {},
                "weights_id": weights_id}
        if state:
            meta["state"] = state
        text = dumps_json(meta, indent=2) + "\n"
        blob = safetensors_bytes(_detached(tensors), metadata={"weights_id": weights_id})
        path = Path(path_dir)
        if path.exists() and not path.is_dir():
            raise CheckpointError(f"cannot save a checkpoint to {path}: it exists and is not a directory")
        # the inner block (weights) is replaced first, the outer (config) right after; an error in
        # either removes both temporary files
        with atomic_write(path / CONFIG, "w", encoding="utf-8") as config_file, \
                atomic_write(path / WEIGHTS, "wb") as weights_file:
            config_file.write(text)
            weights_file.write(blob)
        return path

    @classmethod
    def from_pretrained(cls, path_dir: str | os.PathLike):
        """Rebuild the model saved in ``path_dir`` (eval mode, on the CPU); CheckpointError when
        the directory is missing, corrupt, of another app or model type, or of another config version."""
        info = checkpoint_info(path_dir)
        if (info.app, info.model_type) != (cls.app, cls.model_type):
            raise CheckpointError(
                f"{info.path} holds a {info.app} model '{info.model_type}', not {cls.app} '{cls.model_type}'"
            )
        _version(info.config_version, f"{cls.app} '{cls.model_type}' config version", info.path, cls.config_version)
        try:
            hints = _init_hints(cls.__init__)
            kwargs = {k: _decode(v, hints.get(k)) for k, v in info.config.items()}
            model = cls(**kwargs)
        except CheckpointError:
            raise
        except Exception as exc:  # TypeError/ValueError/InputError of a config the class rejects
            raise CheckpointError(
                f"{info.path} has a config that does not fit {cls.app} '{cls.model_type}': {_first_line(exc)}"
            ) from exc
        tensors = _read_weights(info)
        model.load_checkpoint_state(tensors, info.state, str(info.path))
        if isinstance(model, torch.nn.Module):
            model.eval()
        return model


@dataclass(frozen=True)
class CheckpointInfo:
    """The validated ``config.json`` of a checkpoint directory."""

    path: Path
    app: str
    model_type: str
    config_version: int
    config: dict[str, Any]
    extra: dict[str, Any]
    state: dict[str, Any]
    weights_id: str | None


def checkpoint_info(path_dir: str | os.PathLike) -> CheckpointInfo:
    """Read and validate ``config.json`` (the weights are not read); CheckpointError when the
    directory or a file is missing, the JSON is corrupt, or the format version is not a number or
    not the one this code reads."""
    path = Path(path_dir)
    if not path.exists():  # a shipped model's name (common.shipped): its verified directory
        from common.shipped import resolve_checkpoint, shipped_models

        if str(path_dir) in shipped_models():
            path = resolve_checkpoint(path_dir)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise CheckpointError(f"no checkpoint at {path} (needs {WEIGHTS} and {CONFIG})")
    try:
        meta = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise CheckpointError(f"corrupt checkpoint config {path / CONFIG}: {_first_line(exc)}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise CheckpointError(f"corrupt checkpoint config {path / CONFIG}: no 'config' object")
    _version(meta.get("format_version"), "format version", path, FORMAT_VERSION)
    extra = meta.get("extra") or {}
    state = meta.get("state") or {}
    if not isinstance(extra, dict) or not isinstance(state, dict):
        raise CheckpointError(f"corrupt checkpoint config {path / CONFIG}: 'extra' and 'state' must be objects")
    app, model_type = meta.get("app"), meta.get("model_type")
    if not isinstance(app, str) or not isinstance(model_type, str):
        raise CheckpointError(f"corrupt checkpoint config {path / CONFIG}: no app / model_type")
    return CheckpointInfo(
        path, app, model_type, _version(meta.get("config_version"), "config version", path),
        meta["config"], extra, state, meta.get("weights_id"),
    )


def load_pretrained(path_dir: str | os.PathLike):
    """Rebuild whatever registered model ``path_dir`` holds (its class must be imported, i.e.
    registered). CheckpointError for an unregistered model type."""
    info = checkpoint_info(path_dir)
    cls = MODEL_REGISTRY.get(info.model_type)
    if cls is None or cls.app != info.app:
        raise CheckpointError(
            f"{info.path} holds a {info.app} model '{info.model_type}' that is not registered "
            f"(import the {info.app} package that defines it)"
        )
    return cls.from_pretrained(info.path)


# ----------------------------------------------------------------------------- file helpers


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _version(value: Any, what: str, path: Path, reads: int | None = None) -> int:
    """``value``, a checkpoint's ``what``; CheckpointError when it is not a number or not ``reads``
    (a newer one needs a newer moe-apps, an older one, from before this version, a retrained model)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"checkpoint {path} has a non-numeric {what} {value!r}")
    if reads is not None and value != reads:
        newer = value > reads
        raise CheckpointError(f"checkpoint {path} has {what} {value}, {'newer' if newer else 'older'} than this "
                              f"version reads ({reads}); {'update moe-apps' if newer else 'retrain the model'}")
    return value


def _detached(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous, and no two tensors sharing memory (safetensors refuses shared storage)."""
    out, seen = {}, set()
    for k, v in tensors.items():
        t = v.detach().cpu().contiguous()
        key = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else None
        if key is not None and key in seen:
            t = t.clone()
        seen.add(key)
        out[k] = t
    return out


def _read_weights(info: CheckpointInfo) -> dict[str, torch.Tensor]:
    file = info.path / WEIGHTS
    try:
        with safe_open(str(file), framework="pt") as f:
            stamp = (f.metadata() or {}).get("weights_id")
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"cannot load checkpoint {info.path}: corrupt weights {file.name} ({_first_line(exc)})") from exc
    if info.weights_id is not None and stamp != info.weights_id:
        raise CheckpointError(
            f"cannot load checkpoint {info.path}: {WEIGHTS} and {CONFIG} come from different saves "
            "(an interrupted save?); save the model again"
        )
    return tensors
