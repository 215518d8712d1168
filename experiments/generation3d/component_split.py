"""How many parts the Sweet Home 3D furniture has when every OBJ group is split into its connected
components (#53 item 1), and which catalogue items a wider category list would add.

Today (``sources.build_parts``) a part is one OBJ group (a single-group model is split into its
components); four legs in one group are one part. Here every group is split into its connected
components (vertices welded by position), each labelled with its group's name, and components whose
box diagonal is under ``TINY_FRACTION`` (5 %) of the shape's are merged into the nearest larger one
(``sources.merge_tiny``, the rule the dataset already uses for tiny groups). Per category: shapes,
parts per shape (median, mean, 90th percentile, max) before and after, and the shapes over
``--max-parts``. For the items without a furniture type: the most frequent last name words (the
words ``furniture.furniture_type`` reads), to see which further categories have enough items.

``python -m experiments.generation3d.component_split [--furniture-dir DIR] [--out split.json]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import trimesh

from common.errors import DataError
from common.report import markdown_table
from generation3d.data import Part
from generation3d.furniture import furniture_type
from generation3d.meshes import mesh_problem, read_named_meshes
from generation3d.sources import TINY_FRACTION, SkipShape, build_parts, merge_tiny


def split_every_group(parts: list[Part], tiny_fraction: float = TINY_FRACTION) -> list[Part]:
    """Every part split into its connected components (named ``<group>#<i>``), tiny ones merged."""
    out = []
    for part in parts:
        mesh = trimesh.Trimesh(part.mesh.vertices, part.mesh.faces, process=True)
        comps = [c for c in mesh.split(only_watertight=False) if mesh_problem(c) is None] or [part.mesh]
        out += [Part(f"{part.name}#{i}", c) for i, c in enumerate(comps)]
    return merge_tiny(out, tiny_fraction)


def _stats(counts: list[int]) -> dict:
    c = np.asarray(counts)
    return {"median": float(np.median(c)), "mean": float(c.mean()), "p90": float(np.percentile(c, 90)),
            "max": int(c.max())}


def main(argv=None) -> int:
    from common.sweethome3d import furniture_dir, read_archive, read_member

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--furniture-dir", default=None)
    p.add_argument("--max-parts", type=int, default=64)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    items = [it for archive in sorted(furniture_dir(a.furniture_dir).glob("*.sh3f")) for it in read_archive(archive)]
    before, after, unknown, failed = {}, {}, Counter(), Counter()
    for item in items:
        ftype = furniture_type(item.name, item.tags, item.category)
        if ftype is None:
            head = re.split(r" with | on |\d", item.name.lower())[0]
            words = [w for w in re.findall(r"[a-z]+", head) if len(w) >= 3]
            unknown[words[-1] if words else "?"] += 1
            continue
        try:
            parts = build_parts(read_named_meshes(Path(item.model).name, read_member(item, item.model)), 10_000)
        except (SkipShape, DataError, ValueError) as exc:
            failed[type(exc).__name__] += 1
            continue
        before.setdefault(ftype, []).append(len(parts))
        after.setdefault(ftype, []).append(len(split_every_group(parts)))
    rows = []
    for cat in sorted(before, key=lambda c: -len(before[c])):
        b, s = _stats(before[cat]), _stats(after[cat])
        rows.append({"category": cat, "shapes": len(before[cat]),
                     **{f"before_{k}": v for k, v in b.items()}, **{f"after_{k}": v for k, v in s.items()},
                     f"over_{a.max_parts}_after": int(sum(n > a.max_parts for n in after[cat]))})
    print(markdown_table(rows, list(rows[0])))
    print("items without a furniture type, by last name word:", unknown.most_common(25))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"command": "python -m experiments.generation3d.component_split " + " ".join(argv or sys.argv[1:]),
                       "tiny_fraction": TINY_FRACTION, "items": len(items), "categories": rows,
                       "unknown_type_words": unknown.most_common(60), "failed": dict(failed)}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
