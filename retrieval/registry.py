"""The retrieval models by name and size: build a fresh one, save it, load any saved one.

    model = build_model("moa3cir")                       # MoA³CIR, size S (the default)
    model = build_model("combiner", size="XS")           # a baseline matched to the XS towers
    save_model(model, Path("runs/m"), {"note": "..."})   # a common.pretrained directory
    model, extra = load_model(Path("runs/m"))            # any of MODEL_KINDS, in eval mode

Sizes name the towers' widths (``MODEL_SIZES``, :mod:`retrieval.sizes`; the README's model sizes
table).
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.errors import CheckpointError
from common.pretrained import checkpoint_info, load_pretrained

from .baselines import CombinerCIR, CombinerConfig
from .model import MoA3CIR, MoA3Config
from .sizes import DEFAULT_MODEL_SIZE, MODEL_SIZES

MODEL_KINDS = ("moa3cir", "combiner", "sum", "image", "text")


def build_model(kind: str, size: str = DEFAULT_MODEL_SIZE, **overrides) -> torch.nn.Module:
    """A fresh model of ``kind`` (:data:`MODEL_KINDS`) at ``size`` (:data:`MODEL_SIZES`);
    ``overrides``: fields of its config (:class:`MoA3Config` or :class:`CombinerConfig`), e.g.
    ``image_encoder="scratch"``, applied over the size's widths. InputError for an unknown size,
    ValueError for an unknown kind or field value."""
    widths = MODEL_SIZES.lookup(size)
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r} (one of {MODEL_KINDS})")
    fields = {**widths.overrides(kind), **overrides}
    if kind == "moa3cir":
        return MoA3CIR(MoA3Config(**fields))
    return CombinerCIR(CombinerConfig(fusion=kind, **fields))


def save_model(model: torch.nn.Module, path: Path, extra: dict | None = None) -> None:
    """``model.save_pretrained(path, extra)`` (a :mod:`common.pretrained` checkpoint, CPU tensors)."""
    model.save_pretrained(Path(path), extra)


def load_model(path: Path) -> tuple[torch.nn.Module, dict]:
    """``(model in eval mode on the CPU, extra)`` of a checkpoint of any of :data:`MODEL_KINDS`;
    CheckpointError when it is missing, corrupt or holds another model."""
    info = checkpoint_info(Path(path))
    model = load_pretrained(info.path)
    if not isinstance(model, (MoA3CIR, CombinerCIR)):
        raise CheckpointError(f"{path} holds a {model.app} model '{model.model_type}', not a retrieval model")
    return model, info.extra


@torch.no_grad()
def smoke_query(model: torch.nn.Module) -> torch.Tensor:
    """``(2, E)`` query embeddings of two random reference images with a typed change (the
    shipped-weights test; ``common.shipped``)."""
    from .embed import encode_single_query

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 32, 32, 3), generator=g, dtype=torch.uint8).numpy()
    rows = [encode_single_query(model, im, "make it blue with stripes", "A red checked coat.", device="cpu")[0]
            for im in images]
    return torch.cat([torch.from_numpy(r) for r in rows])
