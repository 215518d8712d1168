"""Sharded on-disk feature cache shared by the frozen encoders (``common.text_encoder``,
``common.image_encoder``).

A cache folder holds shards ``shard-<uuid>.npz`` with ``keys`` (n,) str and ``emb`` (n, ...)
float32 (one row per key, every row of a folder the same shape). Each shard is written to a
temporary name and renamed into place, so concurrent processes never see a torn file; a shard
that cannot be read is skipped (its entries are recomputed); a read-only folder is used without
persisting new entries. Entries are never overwritten: a key maps to one value for ever, so the
key must hash everything the value depends on (input content, model, resolution, layer).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import numpy as np


def sha1_hex(*parts: bytes | str) -> str:
    """sha1 hex digest of the concatenated ``parts`` (str encoded as UTF-8, separated by NUL)."""
    h = hashlib.sha1()
    for i, p in enumerate(parts):
        if i:
            h.update(b"\0")
        h.update(p.encode("utf-8") if isinstance(p, str) else p)
    return h.hexdigest()


class ShardedFeatureCache:
    """Feature rows by key in ``folder`` (see the module docstring); an in-memory index of the
    shards read so far, refreshed on every lookup so shards written by other processes are seen."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._mem: dict[str, np.ndarray] = {}
        self._loaded_shards: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._mem

    def __getitem__(self, key: str) -> np.ndarray:
        return self._mem[key]

    def refresh(self) -> None:
        """Read every shard not read yet (corrupt ones are skipped)."""
        if not self.folder.is_dir():
            return
        for p in sorted(self.folder.glob("shard-*.npz")):
            if p.name in self._loaded_shards:
                continue
            try:
                z = np.load(p, allow_pickle=False)
                for k, v in zip(z["keys"], z["emb"], strict=True):
                    self._mem[str(k)] = v
            except (OSError, ValueError, KeyError):
                pass  # a corrupt shard is ignored; its entries are recomputed
            self._loaded_shards.add(p.name)

    def missing(self, keys: list[str]) -> list[int]:
        """Positions in ``keys`` whose value is not cached (first occurrence of each key only),
        after a refresh."""
        self.refresh()
        seen, out = set(), []
        for i, k in enumerate(keys):
            if k not in self._mem and k not in seen:
                seen.add(k)
                out.append(i)
        return out

    def get(self, keys: list[str]) -> np.ndarray:
        """``(len(keys), ...)`` float32 rows of cached ``keys`` (KeyError for a missing one)."""
        return np.stack([self._mem[k] for k in keys]).astype(np.float32, copy=False)

    def put(self, keys: list[str], values: np.ndarray) -> None:
        """Remember ``values (n, ...)`` under ``keys (n,)`` in memory and, when the folder is
        writable, in one new shard (atomic rename)."""
        values = np.asarray(values, dtype=np.float32)
        self._mem.update(zip(keys, values, strict=True))
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"shard-{uuid.uuid4().hex}.npz"
            tmp = self.folder / f".{name}.tmp.npz"
            np.savez(tmp, keys=np.array(keys), emb=values)
            os.replace(tmp, self.folder / name)
            self._loaded_shards.add(name)
        except OSError:
            pass  # read-only cache: keep going without persisting
