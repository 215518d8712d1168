"""Checkpoints: a directory with ``model.safetensors`` + ``config.json``, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from common.errors import CheckpointError
from common.io import atomic_write, write_json

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
FORMAT_VERSION = 1


def save_checkpoint(
    path_dir: str | os.PathLike,
    state_dict: dict[str, torch.Tensor],
    config: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save weights and the config needed to rebuild the model. Each file is replaced
    atomically; the config (written last) records the format version."""
    path = Path(path_dir)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    with atomic_write(path / WEIGHTS, "wb") as f:
        f.write(save(tensors))
    write_json(path / CONFIG, {"format_version": FORMAT_VERSION, "config": config, "extra": extra or {}})
    return path


def load_checkpoint(path_dir: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict, dict]:
    """Load ``(state_dict, config, extra)``; raises CheckpointError when missing or corrupt."""
    path = Path(path_dir)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise CheckpointError(f"no checkpoint at {path} (needs {WEIGHTS} and {CONFIG})")
    try:
        meta = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        config, extra = meta["config"], meta.get("extra", {})
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"corrupt checkpoint config {path / CONFIG}: {exc}") from exc
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {meta.get('format_version')}, expected {FORMAT_VERSION}"
        )
    try:
        state = load_file(str(path / WEIGHTS))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"corrupt checkpoint weights {path / WEIGHTS}: {exc}") from exc
    return state, config, extra


def load_into(
    model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str = "checkpoint"
) -> None:
    """``load_state_dict(strict=True)`` with a CheckpointError naming the mismatch."""
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointError(f"{source} does not match the model: {first}") from exc
