"""Every OBJ group split into its connected components (#53 item 1): the part counts it gives the
Sweet Home 3D furniture, and the dataset to train on it. Tried against the product's parts (a part
per OBJ group, ``parts.build_parts``) at equal training budget, it lost category fidelity (val
shapes: 0.57 vs 0.83 after 2400 generator steps, 0.70 vs 0.87 after 6000;
``docs/results/generation3d/component_choice.json``), so it lives here, not in the product.

The split rule (``build_parts_split``): every group split into its connected components (vertices
welded by position); a component under ``TINY_FRACTION`` of the *shape's* box diagonal merged into
the nearest larger component of the same group; a group that still has more than
``MAX_GROUP_COMPONENTS`` components (crystals, slats of a blind) kept whole (not applied to a model
of a single group); every component named after its group; the shape-level tiny merge; a shape
over ``--max-parts`` falls back to the groups rule.

Parts per shape of the 230 typed models: ``groups`` (a part per OBJ group, the product's data),
``split`` and, for reference, the split without the per-group bound or ``--max-parts``. A
shape that ``groups`` skips (over ``--max-parts``) is left out, as in the dataset. Per category: shapes, parts
per shape (median, mean, 90th percentile, max) and the shapes falling back. The statistics that
chose ``MAX_GROUP_COMPONENTS``: components per group (after the sliver merge) and parts per shape
for each bound in ``CAPS``. For the items without a furniture type: the most frequent last name
words (the words ``furniture.furniture_type`` reads), to see which further categories have enough
items.

``python -m experiments.generation3d.component_split [--furniture-dir DIR] [--out split.json]``
``python -m experiments.generation3d.component_split --write-dataset DIR [--points 128]``: the Sweet
Home 3D dataset (``moca build-data --source sweethome3d``'s) with the split rule, to train on.
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
from generation3d.meshes import ArchiveResolver, read_named_meshes
from generation3d.parts import (
    TINY_FRACTION,
    SkipShape,
    box_diagonal,
    build_parts,
    connected_components,
    merge_tiny,
    usable_parts,
)

MAX_GROUP_COMPONENTS = 8  # the split rule's per-group bound (module docstring)
CAPS = (2, 4, 6, 8, 12, 16, 32, None)  # per-group bounds compared (None: no bound)
GROUP_BINS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64)  # components per group histogram: <= each, then more


def group_components(part: Part, diag: float, tiny_fraction: float = TINY_FRACTION) -> list[trimesh.Trimesh]:
    """``split`` step 1: the connected components of one group with those below ``tiny_fraction``
    of the shape's box diagonal ``diag`` merged into the nearest larger one of the group; the
    group's own mesh when that leaves one."""
    comps = merge_tiny([Part(part.name, c) for c in connected_components(part.mesh)], tiny_fraction, diag)
    return [p.mesh for p in comps] if len(comps) > 1 else [part.mesh]


def cap_groups(parts: list[Part], comps: list[list[trimesh.Trimesh]],
               max_group_components: int | None = MAX_GROUP_COMPONENTS,
               tiny_fraction: float = TINY_FRACTION) -> list[Part]:
    """``split`` steps 2-3 (module docstring) from each group's ``group_components``: a group with
    more than ``max_group_components`` (None: no bound; not applied to a model of one group) stays
    whole, every component is named after its group, then the shape-level tiny merge."""
    cap = max_group_components if max_group_components is not None and len(parts) > 1 else None
    out = []
    for part, cs in zip(parts, comps, strict=True):
        out += [Part(part.name, m) for m in (cs if cap is None or len(cs) <= cap else [part.mesh])]
    return merge_tiny(out, tiny_fraction)


def split_groups(parts: list[Part], max_group_components: int | None = MAX_GROUP_COMPONENTS,
                 tiny_fraction: float = TINY_FRACTION) -> list[Part]:
    """``split`` steps 1-3: ``cap_groups`` of every group's ``group_components``."""
    diag = box_diagonal([p.mesh for p in parts])
    return cap_groups(parts, [group_components(p, diag, tiny_fraction) for p in parts], max_group_components,
                      tiny_fraction)


def build_parts_split(meshes, max_parts: int, tiny_fraction: float = TINY_FRACTION) -> list[Part]:
    """``parts.build_parts`` with the split rule (module docstring)."""
    parts = split_groups(usable_parts(meshes), tiny_fraction=tiny_fraction)
    return parts if len(parts) <= max_parts else build_parts(meshes, max_parts, tiny_fraction)


def write_split_dataset(out, n_points: int, max_parts: int, furniture_dir=None) -> int:
    """``sources.build_real_dataset`` of Sweet Home 3D with ``build_parts_split``; the shapes written."""
    import generation3d.sources as sources

    saved, sources.build_parts = sources.build_parts, build_parts_split
    try:
        real = sources.build_real_dataset(out, "sweethome3d", n_points=n_points, max_parts=max_parts,
                                          furniture_dir=furniture_dir, progress=True)
    finally:
        sources.build_parts = saved
    return len(real.shapes)


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
    p.add_argument("--write-dataset", default=None, metavar="DIR", help="write the split dataset to DIR instead")
    p.add_argument("--points", type=int, default=128, help="with --write-dataset: surface points per part")
    a = p.parse_args(argv)
    if a.write_dataset:
        n = write_split_dataset(a.write_dataset, a.points, a.max_parts, a.furniture_dir)
        print(f"wrote {n} shapes to {a.write_dataset}")
        return 0
    items = [it for archive in sorted(furniture_dir(a.furniture_dir).glob("*.sh3f")) for it in read_archive(archive)]
    counts: dict[str, dict] = {}  # category -> {"groups" | "split" | cap in CAPS: [parts per shape]}
    group_sizes, fallback, unknown, failed = Counter(), Counter(), Counter(), Counter()
    for item in items:
        ftype = furniture_type(item.name, item.tags, item.category)
        if ftype is None:
            head = re.split(r" with | on |\d", item.name.lower())[0]
            words = [w for w in re.findall(r"[a-z]+", head) if len(w) >= 3]
            unknown[words[-1] if words else "?"] += 1
            continue
        try:
            meshes = read_named_meshes(Path(item.model).name, read_member(item, item.model), ArchiveResolver(item))
            groups = len(build_parts(meshes, a.max_parts))  # the shipped rule; skips as the dataset does
            usable = usable_parts(meshes)
            diag = box_diagonal([p.mesh for p in usable])
            comps = [group_components(p, diag) for p in usable]
        except SkipShape as exc:
            failed[exc.reason] += 1
            continue
        except (DataError, ValueError) as exc:
            failed[type(exc).__name__] += 1
            continue
        group_sizes.update(len(c) for c in comps)
        c = counts.setdefault(ftype, {})
        c.setdefault("groups", []).append(groups)
        for cap in CAPS:
            c.setdefault(cap, []).append(len(cap_groups(usable, comps, cap)))
        split = c[MAX_GROUP_COMPONENTS][-1]
        fallback[ftype] += split > a.max_parts
        c.setdefault("split", []).append(split if split <= a.max_parts else groups)  # build_parts_split
    rows = []
    for cat in sorted(counts, key=lambda c: -len(counts[c]["groups"])):
        c = counts[cat]
        rows.append({"category": cat, "shapes": len(c["groups"]),
                     **{f"groups_{k}": v for k, v in _stats(c["groups"]).items()},
                     **{f"split_{k}": v for k, v in _stats(c["split"]).items()},
                     **{f"uncapped_{k}": v for k, v in _stats(c[None]).items()}, "split_fallback": fallback[cat]})
    every = {cap: [n for c in counts.values() for n in c[cap]] for cap in CAPS}
    sweep = [{"max_group_components": "none" if cap is None else cap, **_stats(every[cap]),
              f"over_{a.max_parts}": int(sum(n > a.max_parts for n in every[cap]))} for cap in CAPS]
    edges = (0, *GROUP_BINS)
    hist = {f"{lo + 1}..{hi}" if hi > lo + 1 else str(hi): sum(group_sizes[k] for k in range(lo + 1, hi + 1))
            for lo, hi in zip(edges, edges[1:], strict=False)}
    hist[f">{GROUP_BINS[-1]}"] = sum(n for k, n in group_sizes.items() if k > GROUP_BINS[-1])
    print(markdown_table(rows, list(rows[0])))
    print(markdown_table(sweep, list(sweep[0])))
    print("groups by components (after the sliver merge):", hist)
    print("items without a furniture type, by last name word:", unknown.most_common(25))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"command": "python -m experiments.generation3d.component_split " + " ".join(argv or sys.argv[1:]),
                       "tiny_fraction": TINY_FRACTION, "max_group_components": MAX_GROUP_COMPONENTS,
                       "max_parts": a.max_parts, "items": len(items), "categories": rows, "cap_sweep": sweep,
                       "groups_by_components": hist, "unknown_type_words": unknown.most_common(60),
                       "failed": dict(failed)}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
