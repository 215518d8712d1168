"""Diffusion backbones (``common.pretrained`` models, one file per model), the named model sizes,
and the factory that builds MoH or a baseline parameter-matched to it; ``UNetBaseline`` is the
registry adapter of diffusers' ``UNet2DModel`` baseline.

    model = build_backbone("moh")                         # XS: MoH for 32x32x1, 105,971 parameters
    dit = build_backbone("dit", model_size="S")           # DiT with about MoH-S's parameters
    model = load_backbone("runs/moh/checkpoint")          # any backbone saved by vision.sampling

A size (``MODEL_SIZES``, DiT/timm style) fixes the patch size, width, SSM state, scan depths and
blocks per coarse level of MoH; the baselines of that size search their depth (plain Mamba, DiT)
or width and blocks per level (UNet) for the parameter count closest to MoH's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from diffusers import UNet2DModel

from common.errors import CheckpointError, InputError
from common.pretrained import load_pretrained
from common.sizes import SizeTable
from vision.models.dit import DiTBackbone
from vision.models.layers import DiffusionBackbone, count_parameters
from vision.models.moh import MoHBackbone
from vision.models.plain_mamba import PlainMambaBackbone
from vision.models.unet import UNetBaseline

__all__ = ["DiTBackbone", "MoHBackbone", "PlainMambaBackbone", "UNetBaseline", "MODEL_NAMES", "MODEL_SIZES",
           "ModelSize", "build_backbone", "build_matched", "build_moh", "load_backbone", "moh_config"]

MODEL_NAMES = ("moh", "mamba", "dit", "unet")
REGISTERED_NAMES = {"plain_mamba": "mamba"}  # common.pretrained model types that differ from MODEL_NAMES


@dataclass(frozen=True)
class ModelSize:
    """One row of the size table. MoH: ``patch_size``, ``d_model``, ``d_state``, ``depth_choices``
    (fine-grid scan depths; the stack has the largest) and ``level_layers`` (Mamba blocks per
    coarse level). Baselines: DiT heads, the depths searched for plain Mamba and DiT
    (``1..max_baseline_depth``) and the UNet widths searched (``(w, 2w)`` channels, 1 or 2 blocks
    per level). ``sequential_search``: every candidate baseline is built on the CPU in turn (each
    draws from the global RNG, so the chosen one's initial weights follow the draws of those
    before it), as the committed XS results were made; otherwise candidates are counted on the
    meta device and only the chosen one is built. ``checkpoint_scan``: MoH and plain Mamba
    recompute their S6 states in the backward pass (``MambaMixer``), which the large sizes need
    to train at a useful batch on one GPU."""

    name: str
    patch_size: int
    d_model: int
    d_state: int
    depth_choices: tuple[int, ...]
    level_layers: int
    dit_heads: int
    max_baseline_depth: int
    unet_widths: tuple[int, ...]
    sequential_search: bool = False
    checkpoint_scan: bool = False


_WIDE_UNETS = tuple(range(64, 1025, 16))
# XS is the CPU model of the benches, Ti (3x wider, SSM state 4) the CPU model that ships trained
# (`vision.train.PRESETS["fmnist"]`). S, B and L follow DiT-S/2, -B/2 and -L/2 (width 384 /
# 768 / 1024, patch 2: 256 tokens at 32 px); a Mamba block holds about half a DiT block's
# parameters, so MoH's deepest scan is 1.5x DiT's depth, which with the coarse levels gives
# 30M / 118M / 405M parameters against DiT's 33M / 130M / 457M.
MODEL_SIZES = SizeTable({
    "XS": ModelSize("XS", patch_size=4, d_model=32, d_state=4, depth_choices=(2, 4, 6), level_layers=1, dit_heads=4,
                    max_baseline_depth=16, unet_widths=(8, 12, 16, 20, 24, 32, 40), sequential_search=True),
    "Ti": ModelSize("Ti", patch_size=4, d_model=96, d_state=4, depth_choices=(2, 4, 6), level_layers=1, dit_heads=6,
                    max_baseline_depth=24, unet_widths=tuple(range(16, 161, 4)), sequential_search=True),
    "S": ModelSize("S", patch_size=2, d_model=384, d_state=16, depth_choices=(6, 12, 18), level_layers=1,
                   dit_heads=6, max_baseline_depth=48, unet_widths=_WIDE_UNETS, checkpoint_scan=True),
    "B": ModelSize("B", patch_size=2, d_model=768, d_state=16, depth_choices=(6, 12, 18), level_layers=1,
                   dit_heads=12, max_baseline_depth=48, unet_widths=_WIDE_UNETS, checkpoint_scan=True),
    "L": ModelSize("L", patch_size=2, d_model=1024, d_state=16, depth_choices=(12, 24, 36), level_layers=2,
                   dit_heads=16, max_baseline_depth=64, unet_widths=_WIDE_UNETS, checkpoint_scan=True),
}, default="XS")

# Shared by every size. depth_cost 0.002, not the model's 0.02: at 0.02 the compute penalty was
# ~10% of the x0 loss and pushed low-noise steps, where capacity matters, to the shallowest route.
MOH_SHARED = dict(expand=2, num_levels=3, k_levels=2, depth_cost=0.002)


def moh_config(size: str = "XS") -> dict:
    """MoH's constructor arguments (without the image geometry) of the size ``size``."""
    s = MODEL_SIZES.lookup(size)
    extra = {"checkpoint_scan": True} if s.checkpoint_scan else {}
    return dict(patch_size=s.patch_size, d_model=s.d_model, d_state=s.d_state, depth_choices=s.depth_choices,
                level_layers=s.level_layers, **MOH_SHARED, **extra)


def build_moh(sample_size: int = 32, in_channels: int = 1, model_size: str = "XS", **overrides) -> MoHBackbone:
    """MoH of ``model_size`` for ``(in_channels, sample_size, sample_size)`` images, with ``overrides``
    of its constructor arguments."""
    return MoHBackbone(sample_size=sample_size, in_channels=in_channels, **{**moh_config(model_size), **overrides})


def _baseline_maker(name: str, size: ModelSize, sample_size: int, in_channels: int, d_model: int, d_state: int,
                    patch_size: int):
    """``(make(option) -> model, options)``: the search space of baseline ``name``."""
    geo = dict(sample_size=sample_size, in_channels=in_channels, patch_size=patch_size)
    depths = list(range(1, size.max_baseline_depth + 1))
    if name == "mamba":
        extra = {"checkpoint_scan": True} if size.checkpoint_scan else {}
        return (lambda k: PlainMambaBackbone(**geo, d_model=d_model, d_state=d_state, depth=k, **extra)), depths
    if name == "dit":
        return (lambda k: DiTBackbone(**geo, d_model=d_model, depth=k, heads=size.dit_heads)), depths
    if name == "unet":
        def make(option):
            w, layers = option
            return UNet2DModel(sample_size=sample_size, in_channels=in_channels, out_channels=in_channels,
                               block_out_channels=(w, 2 * w), layers_per_block=layers, norm_num_groups=4,
                               down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                               up_block_types=("AttnUpBlock2D", "UpBlock2D"))

        return make, [(w, layers) for w in size.unet_widths for layers in (1, 2)]
    raise InputError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")


def build_matched(name: str, reference_params: int, sample_size: int = 32, in_channels: int = 1,
                  model_size: str = "XS", d_model: int | None = None, d_state: int | None = None,
                  patch_size: int | None = None):
    """Baseline ``name`` of ``model_size`` (width, SSM state and patch of that size unless given)
    whose depth (UNet: width and blocks per level) gives the parameter count closest to
    ``reference_params`` (the MoH model's); the first of equally close candidates wins."""
    size = MODEL_SIZES.lookup(model_size)
    make, options = _baseline_maker(name, size, sample_size, in_channels, d_model or size.d_model,
                                    d_state or size.d_state, patch_size or size.patch_size)
    if size.sequential_search:
        candidates = [make(o) for o in options]
        return min(candidates, key=lambda m: abs(count_parameters(m) - reference_params))
    with torch.device("meta"):
        if name == "unet":
            counts = [count_parameters(make(o)) for o in options]
        else:  # identical blocks: the count grows by one block's parameters per depth
            one, two = count_parameters(make(1)), count_parameters(make(2))
            counts = [one + (k - 1) * (two - one) for k in options]
    best = min(range(len(options)), key=lambda i: abs(counts[i] - reference_params))
    return make(options[best])


def build_backbone(name: str, model_size: str = "XS", sample_size: int = 32, in_channels: int = 1,
                   **moh_overrides):
    """``moh`` of ``model_size`` (plus ``moh_overrides`` of its constructor arguments), or the
    baseline ``mamba`` / ``dit`` / ``unet`` of that size matched to that MoH's parameter count
    (same width, SSM state and patch). A backbone may also be named by its registered model type
    (``plain_mamba``)."""
    name = REGISTERED_NAMES.get(name, name)
    size = MODEL_SIZES.lookup(model_size)
    if name == "moh":
        return build_moh(sample_size, in_channels, model_size, **moh_overrides)
    if name not in MODEL_NAMES:
        raise InputError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")
    if size.sequential_search:
        moh = build_moh(sample_size, in_channels, model_size, **moh_overrides)
    else:
        with torch.device("meta"):
            moh = build_moh(sample_size, in_channels, model_size, **moh_overrides)
    kw = {k: moh.config[k] for k in ("d_model", "d_state", "patch_size")}
    return build_matched(name, count_parameters(moh), sample_size, in_channels, model_size, **kw)


def load_backbone(path: str | Path):
    """Load any backbone saved with ``vision.sampling.save_checkpoint`` (the ``UNet2DModel``
    unwrapped from its adapter) on the CPU in eval mode; CheckpointError when the directory is
    missing, its config is unreadable, of another version or names another model, or the weights
    are corrupt."""
    model = load_pretrained(path)
    if not isinstance(model, DiffusionBackbone):
        raise CheckpointError(f"{path} holds a {model.app} model '{model.model_type}', not a vision backbone")
    return model.unet if isinstance(model, UNetBaseline) else model
