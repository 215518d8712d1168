"""Which server directories the demo hub may read from when a user types a path.

A path typed into a demo tab (a checkpoint directory) is served only when, after resolving
symlinks and ``..``, it lies inside an allowed root:

- ``<project>/results`` and ``./results`` (where ``make demo`` writes),
- the cache root (``$MOE_APPS_CACHE``, default ``~/.cache/moe-apps``; ``common.data_dir.cache_root``),
- each entry of ``$MOE_APPS_DEMO_ROOTS`` (``os.pathsep``-separated),
- each root the operator added in this process (``moe-demo --allow-root DIR``, :func:`add_allowed_roots`),
- the ``extra_roots`` a tab passes (its operator-configured default checkpoint).

The check only resolves the path; nothing under it is opened or listed before it passes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from common.data_dir import PROJECT_ROOT, cache_root
from common.errors import InputError

ROOTS_ENV = "MOE_APPS_DEMO_ROOTS"

_operator_roots: list[Path] = []
_lock = threading.Lock()


def _resolve(path: str | os.PathLike) -> Path:
    return Path(path).expanduser().resolve(strict=False)


def add_allowed_roots(*roots: str | os.PathLike) -> None:
    """Allow ``roots`` (existing directories) for the rest of this process; raises ``InputError``
    for one that is not a directory."""
    resolved = []
    for root in roots:
        path = _resolve(root)
        if not path.is_dir():
            raise InputError(f"allowed root {root} is not a directory")
        resolved.append(path)
    with _lock:
        _operator_roots.extend(p for p in resolved if p not in _operator_roots)


def clear_allowed_roots() -> None:
    """Forget the roots added by :func:`add_allowed_roots` (the built-in and env roots stay)."""
    with _lock:
        _operator_roots.clear()


def allowed_roots(extra_roots: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """Every allowed root, resolved (see the module docstring), without duplicates."""
    candidates: list[str | os.PathLike] = [PROJECT_ROOT / "results", Path.cwd() / "results", cache_root()]
    candidates += [r for r in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if r.strip()]
    with _lock:
        candidates += list(_operator_roots)
    candidates += [r for r in extra_roots if r]
    roots: list[Path] = []
    for root in candidates:
        path = _resolve(root)
        if path not in roots:
            roots.append(path)
    return roots


def check_allowed_path(
    path: str | os.PathLike | None,
    what: str = "checkpoint directory",
    extra_roots: Iterable[str | os.PathLike] = (),
) -> Path:
    """``path`` resolved (symlinks and ``..``) when it lies inside an allowed root; raises
    ``InputError`` (naming the path as typed, not the roots) otherwise or when it is blank."""
    if path is None or not str(path).strip():
        raise InputError(f"no {what} given")
    resolved = _resolve(str(path).strip())
    if any(resolved.is_relative_to(root) for root in allowed_roots(extra_roots)):
        return resolved
    raise InputError(
        f"{what} {str(path).strip()!r} is outside the directories this server allows; the operator can "
        f"add one with `moe-demo --allow-root DIR` or ${ROOTS_ENV}"
    )
