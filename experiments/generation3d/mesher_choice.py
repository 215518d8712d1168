"""Which mesher turns a part's point cloud into the surface closest to the part: convex hull or an
alpha shape, and at which alpha (``generation3d.export.ALPHA_SCALE``, × the cloud's box diagonal).

Protocol: every part of a part dataset (``moca build-data``; the shipped model's is Sweet Home 3D
furniture) has ``M`` surface points. They are split at random (seeded) into two halves; the mesher
builds a mesh from one half, and the mesh is scored against the whole cloud: ``excess`` is the mean
distance from points sampled on the mesh surface to the nearest cloud point (surface the part does
not have: a hull spanning four legs), ``miss`` the mean distance from the held-out half to the nearest
mesh sample (part surface the mesh lost), ``chamfer = excess + miss`` (shape units: largest half-extent
1). The alpha scale is chosen on the ``val`` split; the table reports ``test``, per category.

``python -m experiments.generation3d.mesher_choice --data-dir DIR --out mesher.json``
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import trimesh
from scipy.spatial import cKDTree

from common.report import markdown_table
from generation3d.data import CATEGORIES, PartDataset
from generation3d.export import alpha_shape, hull_or_box

SCALES = (0.03, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5)
SAMPLES = 2000


def part_scores(points: np.ndarray, mesh: trimesh.Trimesh, held: np.ndarray, seed: int) -> tuple[float, float]:
    """``(excess, miss)`` of ``mesh`` against the cloud ``points (M, 3)`` and its held-out half ``held``."""
    surface = trimesh.sample.sample_surface(mesh, SAMPLES, seed=seed)[0]
    excess = float(cKDTree(points).query(surface)[0].mean())
    miss = float(cKDTree(surface).query(held)[0].mean())
    return excess, miss


def score(ds: PartDataset, split: str, methods: dict, seed: int = 0, max_shapes: int | None = None) -> list[dict]:
    rows = []
    ids = ds.shape_ids(split)[:max_shapes]
    rng = np.random.default_rng(seed)
    for i in ids:
        pts, boxes, cat = ds.shape(int(i))
        for p in range(len(pts)):
            cloud = np.asarray(pts[p], np.float64)
            order = rng.permutation(len(cloud))
            half, held = cloud[order[: len(cloud) // 2]], cloud[order[len(cloud) // 2:]]
            for name, make in methods.items():
                excess, miss = part_scores(cloud, make(half, boxes[p]), held, seed)
                rows.append({"shape": int(i), "category": CATEGORIES[cat], "method": name,
                             "excess": excess, "miss": miss, "chamfer": excess + miss})
    return rows


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for cat in sorted({r["category"] for r in rows}) + ["all"]:
        for m in dict.fromkeys(r["method"] for r in rows):
            sel = [r for r in rows if r["method"] == m and cat in ("all", r["category"])]
            out.append({"category": cat, "method": m, "parts": len(sel),
                        **{k: float(np.mean([r[k] for r in sel])) for k in ("excess", "miss", "chamfer")}})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-shapes", type=int, default=None, help="per split, for a quick look")
    a = p.parse_args(argv)
    ds = PartDataset.load(a.data_dir)

    def alpha(scale):
        return lambda half, box: alpha_shape(half, scale) or hull_or_box(half, box)

    hull = {"hull": hull_or_box}
    val = summary(score(ds, "val", {**hull, **{f"alpha{s:g}": alpha(s) for s in SCALES}}, a.seed, a.max_shapes))
    best = min((r for r in val if r["category"] == "all" and r["method"] != "hull"), key=lambda r: r["chamfer"])
    scale = float(best["method"][5:])
    methods = {**hull, f"alpha{scale:g}": alpha(scale)}
    test = summary(score(ds, "test", methods, a.seed, a.max_shapes))
    print("validation (choose alpha):\n" + markdown_table([r for r in val if r["category"] == "all"],
                                                          ["method", "parts", "excess", "miss", "chamfer"]))
    print(f"\ntest, alpha scale {scale:g}:\n" + markdown_table(test, ["category", "method", "parts", "excess", "miss",
                                                                       "chamfer"]))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"command": "python -m experiments.generation3d.mesher_choice " + " ".join(argv or sys.argv[1:]),
                       "data_dir": a.data_dir, "seed": a.seed, "scales": list(SCALES), "chosen_scale": scale,
                       "val": val, "test": test}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
