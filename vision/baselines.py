"""Model registry: MoH and the baselines (plain Mamba at matched parameters, small DiT,
diffusers ``UNet2DModel``), built for one image geometry; checkpoint load with clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from diffusers import UNet2DModel
from safetensors import SafetensorError
from safetensors.torch import load_file

from common.errors import CheckpointError, InputError
from common.pretrained import CONFIG, load_pretrained
from vision.models import DiTBackbone, MoHBackbone, PlainMambaBackbone, UNetBaseline
from vision.models.layers import DiffusionBackbone, count_parameters

MODEL_NAMES = ("moh", "mamba", "dit", "unet")
# classes by the name diffusers' config.json records (checkpoints saved before common.pretrained)
LEGACY_CLASSES = {"MoHBackbone": MoHBackbone, "PlainMambaBackbone": PlainMambaBackbone,
                  "DiTBackbone": DiTBackbone, "UNet2DModel": UNetBaseline}
LEGACY_WEIGHTS = "diffusion_pytorch_model.safetensors"

# Tiny CPU defaults (Fashion-MNIST 32x32, patch 4 -> 8x8 tokens). depth_cost 0.002, not the
# model's 0.02: at 0.02 the compute penalty was ~10% of the x0 loss and pushed low-noise steps,
# where capacity matters, to the shallowest route (FID 17.97 vs 16.92 at 300 steps, README).
MOH_DEFAULTS = dict(patch_size=4, d_model=32, d_state=4, expand=2, depth_choices=(2, 4, 6),
                    num_levels=3, k_levels=2, level_layers=1, depth_cost=0.002)


def build_moh(sample_size: int = 32, in_channels: int = 1, **overrides) -> MoHBackbone:
    kw = {**MOH_DEFAULTS, **overrides}
    return MoHBackbone(sample_size=sample_size, in_channels=in_channels, **kw)


def _closest(candidates, target: int):
    return min(candidates, key=lambda m: abs(count_parameters(m) - target))


def build_matched(name: str, reference_params: int, sample_size: int = 32, in_channels: int = 1,
                  d_model: int = 32, d_state: int = 4, patch_size: int = 4):
    """Baseline ``name`` whose depth is chosen so that its parameter count is closest to
    ``reference_params`` (the MoH model's)."""
    geo = dict(sample_size=sample_size, in_channels=in_channels, patch_size=patch_size)
    if name == "mamba":
        return _closest([PlainMambaBackbone(**geo, d_model=d_model, d_state=d_state, depth=k) for k in range(1, 17)],
                        reference_params)
    if name == "dit":
        return _closest([DiTBackbone(**geo, d_model=d_model, depth=k, heads=4) for k in range(1, 17)], reference_params)
    if name == "unet":
        cands = [UNet2DModel(sample_size=sample_size, in_channels=in_channels, out_channels=in_channels,
                             block_out_channels=(w, 2 * w), layers_per_block=layers, norm_num_groups=4,
                             down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                             up_block_types=("AttnUpBlock2D", "UpBlock2D"))
                 for w in (8, 12, 16, 20, 24, 32, 40) for layers in (1, 2)]
        return _closest(cands, reference_params)
    raise InputError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")


def build_model(name: str, sample_size: int = 32, in_channels: int = 1, **moh_overrides):
    """``moh`` with defaults (plus overrides), or a baseline matched to that MoH's parameters."""
    moh = build_moh(sample_size, in_channels, **moh_overrides)
    if name == "moh":
        return moh
    kw = {k: moh.config[k] for k in ("d_model", "d_state", "patch_size")}
    return build_matched(name, count_parameters(moh), sample_size, in_channels, **kw)


def model_kind(model) -> str:
    return {MoHBackbone: "moh", PlainMambaBackbone: "mamba", DiTBackbone: "dit", UNet2DModel: "unet"}[type(model)]


def load_model(path: str | Path):
    """Load any backbone saved with ``vision.pipeline.save_checkpoint`` (the ``UNet2DModel``
    unwrapped from its adapter), also one saved by diffusers' ``save_pretrained`` before
    (format of ``common.pretrained`` 1: config version 0); CheckpointError when the directory is
    missing, its config is unreadable or names another model, or the weights are corrupt."""
    path = Path(path)
    legacy = _diffusers_class(path)
    model = _load_diffusers(path, legacy) if legacy else load_pretrained(path)
    if not isinstance(model, DiffusionBackbone):
        raise CheckpointError(f"{path} holds a {model.app} model '{model.model_type}', not a vision backbone")
    return model.unet if isinstance(model, UNetBaseline) else model


def _diffusers_class(path: Path) -> str | None:
    """The ``_class_name`` of a diffusers-format ``config.json`` (None for any other directory)."""
    try:
        meta = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # missing or corrupt: load_pretrained names the problem
    return meta.get("_class_name") if isinstance(meta, dict) and "config" not in meta else None


def _load_diffusers(path: Path, cls_name: str) -> DiffusionBackbone:
    if cls_name not in LEGACY_CLASSES:
        raise CheckpointError(f"checkpoint {path} holds an unknown model class {cls_name!r}")
    cls = LEGACY_CLASSES[cls_name]
    config = cls.upgrade_config(json.loads((path / CONFIG).read_text(encoding="utf-8")), 0)
    try:
        model = cls(**config)
        state = load_file(str(path / LEGACY_WEIGHTS))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"cannot load checkpoint {path}: corrupt or missing {LEGACY_WEIGHTS} ({exc})") from exc
    except (TypeError, ValueError, InputError) as exc:
        raise CheckpointError(f"cannot load checkpoint {path}: its config does not fit {cls_name} ({exc})") from exc
    if cls is UNetBaseline:
        state = {f"unet.{k}": v for k, v in state.items()}
    model.load_checkpoint_state(state, {}, str(path))
    return model.eval()
