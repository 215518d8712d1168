"""Trained weights that ship with the project, found by name.

A shipped model is a checkpoint directory of :mod:`common.pretrained` committed under its app's
package, ``<app>/weights/<name>/``, with a third file, ``manifest.json``, that says how it was made::

    {"name": "moh-fmnist-s", "app": "vision", "model_type": "moh",
     "command": "moh train --preset fmnist-s ...",      # the exact command that trained it
     "data": "Fashion-MNIST (Debian dataset-fashion-mnist)", "split": "train 60k / test 10k",
     "steps": 20000, "seed": 0, "commit": "<the commit it was trained at>",
     "trained_on": "NVIDIA H100 80GB HBM3", "wall_s": 1234.5,
     "metrics": {"fid_classifier": 3.1, ...},
     "smoke": "vision.sampling:smoke_sample",          # model -> a few samples, for the shipped test
     "dtype": "float16",                                # storage dtype; loading upcasts to fp32
     "files": {"model.safetensors": "<sha256>", "config.json": "<sha256>"}}

``resolve_checkpoint("moh-fmnist-s")`` (and therefore every ``from_pretrained`` / ``load_pretrained``
given a name that is not a path) verifies the files against the manifest's sha256 sums and returns
the directory; a missing or altered file is a one-line ``CheckpointError``. :func:`ship` writes such
a directory from a trained model (half-precision storage, at most 10 MB). ``tests/common/
test_shipped.py`` loads every shipped model, checks its hashes and that its smoke function samples.
:func:`steps_to_reach` says where a shipped model's learning curve is heading when a target is unmet.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import CheckpointError
from common.io import atomic_write, dumps_json, read_json, sha256_file, write_json

MANIFEST = "manifest.json"
WEIGHTS_DIR = "weights"
MAX_BYTES = 10 * 2**20
DTYPES = ("float32", "float16", "bfloat16")  # storage dtypes: torch's names
REQUIRED = ("name", "app", "model_type", "command", "data", "split", "steps", "seed", "commit", "trained_on",
            "wall_s", "metrics", "smoke", "dtype", "files")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
ROOT = Path(__file__).resolve().parents[1]  # the directory holding the suite's packages
#: a relative change below this is rounding, not a trend (steps_to_reach)
EPS = 1e-9
#: steps_to_reach predicts no step beyond 2 ** this many doublings (past a float's range: the curve is flat)
MAX_DOUBLINGS = 1000


def shipped_models(root: Path | None = None) -> dict[str, Path]:
    """Name -> directory of every shipped model: ``<package>/weights/<name>/manifest.json`` for
    the suite's packages beside ``common``."""
    base = root or ROOT
    out: dict[str, Path] = {}
    for manifest in sorted(base.glob(f"*/{WEIGHTS_DIR}/*/{MANIFEST}")):
        pkg = manifest.parents[2]
        if (pkg / "__init__.py").is_file():
            out[manifest.parent.name] = manifest.parent
    return out


def read_manifest(path_dir: str | os.PathLike) -> dict[str, Any]:
    """The validated manifest of a shipped model directory (CheckpointError when missing or malformed)."""
    path = Path(path_dir) / MANIFEST
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"shipped model {Path(path_dir).name}: {MANIFEST} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise CheckpointError(f"shipped model {Path(path_dir).name}: corrupt {MANIFEST} ({exc})") from None
    missing = [k for k in REQUIRED if k not in meta] if isinstance(meta, dict) else list(REQUIRED)
    if missing:
        raise CheckpointError(f"shipped model {Path(path_dir).name}: {MANIFEST} lacks {', '.join(missing)}")
    if not isinstance(meta["files"], dict) or not meta["files"]:
        raise CheckpointError(f"shipped model {Path(path_dir).name}: {MANIFEST} lists no files")
    return meta


def verify(path_dir: str | os.PathLike) -> dict[str, Any]:
    """Check every file of a shipped model against its manifest's sha256; returns the manifest."""
    path = Path(path_dir)
    meta = read_manifest(path)
    for name, digest in meta["files"].items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"shipped model {path.name}: {name} is missing (reinstall or `git checkout` it)")
        if sha256_file(file) != digest:
            raise CheckpointError(f"shipped model {path.name}: {name} does not match its sha256 in {MANIFEST} "
                                  "(altered or a Git LFS pointer); restore it from the repository")
    return meta


def resolve_checkpoint(path_or_name: str | os.PathLike, register: bool = True) -> Path:
    """``path_or_name`` when it is an existing path, else the verified directory of the shipped
    model of that name; CheckpointError naming both possibilities otherwise. ``register=False``
    skips importing the app's model module (a reader that needs no torch model)."""
    path = Path(path_or_name)
    if path.exists():
        return path
    text = str(path_or_name)
    shipped = shipped_models()
    if text in shipped:
        meta = verify(shipped[text])
        if not register:
            return shipped[text]
        # the smoke function's module is the app's own use of the model: importing it registers the
        # model type, so a name loads in a process that has imported nothing of the app yet
        importlib.import_module(meta["smoke"].partition(":")[0])
        return shipped[text]
    known = ", ".join(sorted(shipped)) or "none"
    raise CheckpointError(f"no checkpoint at {text} and no shipped model of that name (shipped: {known})")


def machine_description() -> str:
    """This machine as a manifest's ``trained_on`` says it: ``CPU (<processor>), N torch thread(s)``."""
    import platform

    import torch

    return f"CPU ({platform.processor() or platform.machine()}), {torch.get_num_threads()} torch thread(s)"


def _git_commit(rev: str = "HEAD") -> str:
    """The full hash of ``rev`` in this checkout ("unknown" outside git); a revision git does not
    know is kept as given."""
    fallback = "unknown" if rev == "HEAD" else rev
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return fallback
    return out.stdout.strip() if out.returncode == 0 else fallback


def ship(model, name: str, app_dir: str | os.PathLike, *, command: str, data: str, split: str, steps: int,
         seed: int, metrics: dict[str, Any], trained_on: str, wall_s: float, smoke: str,
         dtype: str = "float16", commit: str | None = None, overwrite: bool = False,
         extra_files: dict[str, str | os.PathLike] | None = None, exact: tuple[str, ...] = (),
         max_bytes: int | None = None) -> Path:
    """Write ``model`` (a registered ``PretrainedMixin``) as the shipped model ``name`` under
    ``app_dir/weights/name`` with floating tensors stored in ``dtype`` and a manifest; refuses a
    directory over ``max_bytes`` (:data:`MAX_BYTES` unless the caller says why more), a malformed
    name and, without ``overwrite``, an existing one. Tensors whose names start with one of
    ``exact`` keep their saved dtype (a tree's thresholds, say, which half precision would move).
    ``extra_files`` (file name -> source path) are copied in beside the weights and hashed with them
    (a sampler's schedule, say)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    if not _NAME_RE.match(name):
        raise ValueError(f"shipped model names are lower-case words with - . _, got {name!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    module, _, func = smoke.partition(":")
    if not module or not func:
        raise ValueError(f"smoke must be 'module:function', got {smoke!r}")
    out = Path(app_dir) / WEIGHTS_DIR / name
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out} exists (pass overwrite=True to replace it)")
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    for file_name, source in (extra_files or {}).items():
        _check_file_name(file_name)
        shutil.copyfile(source, out / file_name)
    weights = out / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    tensors = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() and not k.startswith(exact) else v
               for k, v in tensors.items()}
    save_file(tensors, str(weights), metadata=meta)
    files = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.name != MANIFEST}
    size = sum((out / n).stat().st_size for n in files)
    limit = MAX_BYTES if max_bytes is None else max_bytes
    if size > limit:
        raise CheckpointError(f"shipped model {name} is {size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB "
                              "limit: use a smaller model or half-precision storage")
    manifest = {"name": name, "app": type(model).app, "model_type": type(model).model_type, "command": command,
                "data": data, "split": split, "steps": steps, "seed": seed, "commit": _git_commit(commit or "HEAD"),
                "trained_on": trained_on, "wall_s": wall_s, "metrics": metrics, "smoke": smoke, "dtype": dtype,
                "size_bytes": size, **({} if max_bytes is None else {"max_bytes": limit}), "files": files}
    _write_manifest(out, manifest)
    return out


def _check_file_name(file_name: str) -> None:
    if Path(file_name).name != file_name or file_name == MANIFEST:
        raise ValueError(f"extra files are plain names other than {MANIFEST}, got {file_name!r}")


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    with atomic_write(out / MANIFEST, "w", encoding="utf-8") as f:
        f.write(dumps_json(manifest, indent=2) + "\n")


def add_file(path_dir: str | os.PathLike, file_name: str, source: str | os.PathLike,
             max_bytes: int | None = None) -> Path:
    """Copy ``source`` into the shipped model directory ``path_dir`` as ``file_name`` (replacing
    one of that name) and hash it into the manifest, whose other fields are kept; refuses a
    directory over ``max_bytes`` (the manifest's, else :data:`MAX_BYTES`)."""
    out = Path(path_dir)
    meta = verify(out)
    _check_file_name(file_name)
    files = {**meta["files"], file_name: sha256_file(source)}
    size = sum((out / n).stat().st_size for n in files if n != file_name) + Path(source).stat().st_size
    limit = max_bytes or meta.get("max_bytes", MAX_BYTES)
    if size > limit:
        raise CheckpointError(f"shipped model {out.name} would be {size / 2**20:.1f} MiB, over the "
                              f"{limit / 2**20:.0f} MiB limit")
    shutil.copyfile(source, out / file_name)
    _write_manifest(out, {**meta, "size_bytes": size, "files": dict(sorted(files.items()))})
    return out / file_name


def smoke_function(meta: dict[str, Any]):
    """The manifest's ``smoke`` callable (``module:function``: model -> samples)."""
    module, _, func = meta["smoke"].partition(":")
    return getattr(importlib.import_module(module), func)


def steps_to_reach(curve: list[dict], key: str, target: float, last: int = 4) -> dict:
    """Where a learning curve is heading: a least-squares line of ``key`` against ``log2(step)``
    over the ``last`` points of ``curve`` (rows with ``"step"``), and the step at which that line
    reaches ``target``. ``predicted_step`` is the first measured step when a point already reached
    it, and ``None`` when the line does not rise (flat within rounding, or falling: more steps are
    not predicted to help) or reaches it only after more than ``MAX_DOUBLINGS`` doublings.
    Returns ``{"slope_per_doubling", "predicted_step", "points"}``."""
    rows = [r for r in curve if r.get(key) is not None][-last:]
    if len(rows) < 2:
        return {"slope_per_doubling": None, "predicted_step": None, "points": len(rows)}
    x = np.log2(np.array([r["step"] for r in rows], dtype=float))
    y = np.array([r[key] for r in rows], dtype=float)
    # the closed-form fit with exactly rounded sums (not np.polyfit's BLAS least squares, whose
    # +-1e-17 slope of a flat curve depended on the CPU and overflowed the extrapolation)
    xc, yc = x - math.fsum(x) / len(x), y - math.fsum(y) / len(y)
    sxx = math.fsum(xc * xc)
    slope = math.fsum(xc * yc) / sxx if sxx > 0 else 0.0
    intercept = math.fsum(y) / len(y) - slope * math.fsum(x) / len(x)
    reached = [r["step"] for r in rows if r[key] >= target]
    step = None
    if reached:
        step = int(reached[0])
    elif slope > EPS * max(1.0, float(np.abs(y).max())):
        doublings = (target - intercept) / slope
        if doublings <= MAX_DOUBLINGS:
            step = int(round(2.0**doublings))
    return {"slope_per_doubling": slope, "predicted_step": step, "points": len(rows)}


def cached_snapshot_result(snapshot: str | os.PathLike, name: str, weights: list[Path],
                           compute) -> dict:
    """``compute()`` (a JSON-able dict) of the snapshot directory ``snapshot``, cached in
    ``snapshot / name`` with the sha256 of each of ``weights`` (the files it measured): a report
    run again, or while the training still writes snapshots, computes only what is new or
    changed. CheckpointError when ``weights`` is empty (a snapshot not completely written)."""
    snapshot = Path(snapshot)
    if not weights:
        raise CheckpointError(f"{snapshot} holds no weights yet")
    digest = {str(Path(w).relative_to(snapshot)): sha256_file(w) for w in sorted(weights)}
    cache = snapshot / name
    if cache.is_file():
        saved = read_json(cache)
        if saved.get("weights") == digest:
            return saved["result"]
    result = compute()
    write_json(cache, {"weights": digest, "result": result})
    return result
