"""Tiny datasets in the official FashionIQ and Shoes layouts (as released: no description or
attribute files), written from coloured shapes so that captions name what changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30), "yellow": (230, 220, 30)}
SHAPES = ("square", "bar")


def _image(colour: str, shape: str, size: int = 48) -> Image.Image:
    a = np.full((size, size, 3), 245, np.uint8)
    c = COLOURS[colour]
    if shape == "square":
        a[12:36, 12:36] = c
    else:
        a[4:44, 20:28] = c
    return Image.fromarray(a)


def _items(prefix: str):
    """(id, colour, shape) for every combination: 8 items."""
    return [(f"{prefix}{n:03d}", col, sh) for n, (col, sh) in
            enumerate((c, s) for c in COLOURS for s in SHAPES)]


def _triplets(items):
    """Every ordered pair that differs in colour only or shape only, with two annotator captions."""
    out = []
    for rid, rc, rs in items:
        for tid, tc, ts in items:
            if rid == tid or (rc != tc and rs != ts):
                continue
            change = f"is {tc}" if rc != tc else f"is a {ts}"
            out.append((rid, tid, [change, f"make it {tc} {ts}"]))
    return out


def write_fashioniq(root: Path, categories=("dress", "shirt"), splits=("train", "val")) -> Path:
    """``images/<asin>.png``, ``image_splits/split.<cat>.<split>.json`` (list of ids) and
    ``captions/cap.<cat>.<split>.json`` ([{"target", "candidate", "captions": [two strings]}])."""
    root = Path(root)
    for d in ("images", "image_splits", "captions"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for cat in categories:
        for split in splits:
            items = _items(f"{cat[0].upper()}{split[0]}")
            for iid, col, sh in items:
                _image(col, sh).save(root / "images" / f"{iid}.png")
            (root / "image_splits" / f"split.{cat}.{split}.json").write_text(json.dumps([i for i, _, _ in items]))
            caps = [{"target": t, "candidate": r, "captions": c} for r, t, c in _triplets(items)]
            (root / "captions" / f"cap.{cat}.{split}.json").write_text(json.dumps(caps))
    return root


def write_shoes(root: Path) -> Path:
    """``relative_captions_shoes.json`` ([{"ImageName", "ReferenceImageName", "RelativeCaption"}]),
    ``train_im_names.txt`` / ``eval_im_names.txt`` and images under ``attributedata/<cat>/0/``."""
    root = Path(root)
    caps, names = [], {"train": [], "eval": []}
    for split in ("train", "eval"):
        items = [(f"img_womens_{sh}_{split}_{n}.jpg", col, sh) for n, (_, col, sh) in enumerate(_items("x"))]
        for name, col, sh in items:
            d = root / "attributedata" / f"womens_{sh}" / "0"
            d.mkdir(parents=True, exist_ok=True)
            _image(col, sh).save(d / name)
            names[split].append(name)
        caps += [{"ImageName": t, "ReferenceImageName": r, "RelativeCaption": c[0]} for r, t, c in _triplets(items)]
    (root / "train_im_names.txt").write_text("\n".join(names["train"]) + "\n")
    (root / "eval_im_names.txt").write_text("\n".join(names["eval"]) + "\n")
    (root / "relative_captions_shoes.json").write_text(json.dumps(caps))
    return root
