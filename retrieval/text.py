"""Retrieval's text encoder: the shared frozen MiniLM encoder (``common.text_encoder``) on the
app's cache directory (``$MOE_APPS_CACHE/retrieval`` or ``~/.cache/moe-apps/retrieval``)."""

from __future__ import annotations

from pathlib import Path

from common import text_encoder as _te
from common.data_dir import cache_dir as _app_cache
from common.text_encoder import EMBED_DIM, TextEncoder, text_key

__all__ = ["EMBED_DIM", "MiniLMEncoder", "TextEncoder", "cache_dir", "default_encoder", "text_key"]


def cache_dir() -> Path:
    return _app_cache("retrieval")


class MiniLMEncoder(_te.MiniLMEncoder):
    """The shared encoder, defaulting to the retrieval cache (``cache``: a directory)."""

    def __init__(self, cache: str | Path | None = None, batch_size: int = 128):
        super().__init__(cache_dir() if cache is None else cache, batch_size)


def default_encoder() -> _te.MiniLMEncoder:
    return _te.default_encoder("retrieval")
