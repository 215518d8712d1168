"""Procedural part-labelled shapes: chairs, tables, shelves, lamps and scenes of them.

Objects are assembled from parametric primitives (boxes, cylinders, cones, spheres) with random
proportions and part counts; scenes place many objects on a floor without collisions (footprints
do not overlap) and reach hundreds of parts. ``build_dataset`` writes a procedural dataset in the
format of ``data.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

from common.errors import InputError
from generation3d.data import OBJECT_CATEGORIES, SPLITS, Part, Shape, check_category, write_dataset


# ---------------------------------------------------------------- primitives
def _box(centre, size) -> trimesh.Trimesh:
    m = trimesh.creation.box(extents=np.asarray(size, dtype=float))
    m.apply_translation(centre)
    return m


def _cyl(centre, radius, height, sections=16) -> trimesh.Trimesh:
    m = trimesh.creation.cylinder(radius=radius, height=height, sections=sections)
    m.apply_translation(centre)
    return m


def _cone(base_centre, radius, height, sections=16) -> trimesh.Trimesh:
    m = trimesh.creation.cone(radius=radius, height=height, sections=sections)
    m.apply_translation(base_centre)
    return m


def _sphere(centre, radius) -> trimesh.Trimesh:
    m = trimesh.creation.icosphere(subdivisions=1, radius=radius)
    m.apply_translation(centre)
    return m


# ---------------------------------------------------------------- objects
def make_chair(rng: np.random.Generator) -> list[Part]:
    w, d, h = rng.uniform(0.4, 0.6), rng.uniform(0.4, 0.55), rng.uniform(0.38, 0.5)
    th, leg = rng.uniform(0.03, 0.07), rng.uniform(0.02, 0.045)
    round_legs = rng.random() < 0.5
    parts = [Part("seat", _box((0, 0, h + th / 2), (w, d, th)))]
    for i, (sx, sy) in enumerate([(-1, -1), (1, -1), (-1, 1), (1, 1)]):
        c = (sx * (w / 2 - leg), sy * (d / 2 - leg), h / 2)
        parts.append(Part(f"leg{i}", _cyl(c, leg, h) if round_legs else _box(c, (2 * leg, 2 * leg, h))))
    bh, bt = rng.uniform(0.3, 0.5), rng.uniform(0.02, 0.05)
    yb = d / 2 - bt / 2
    n_slats = int(rng.integers(0, 6))
    if n_slats == 0:
        parts.append(Part("back", _box((0, yb, h + th + bh / 2), (w, bt, bh))))
    else:
        rail = 0.06
        parts.append(Part("back_rail", _box((0, yb, h + th + bh - rail / 2), (w, bt, rail))))
        sw = min(0.05, w / (2 * n_slats + 1))
        for i, x in enumerate(np.linspace(-w / 2 + sw, w / 2 - sw, n_slats + 2)[1:-1] if n_slats > 1 else [0.0]):
            parts.append(Part(f"slat{i}", _box((x, yb, h + th + (bh - rail) / 2), (sw, bt * 0.8, bh - rail))))
    if rng.random() < 0.35:
        ah = rng.uniform(0.15, 0.25)
        for s in (-1, 1):
            parts.append(Part(f"arm_support{s:+d}", _box((s * (w / 2 - 0.02), -d / 4, h + th + ah / 2), (0.04, 0.04, ah))))
            parts.append(Part(f"arm{s:+d}", _box((s * (w / 2 - 0.02), 0, h + th + ah + 0.015), (0.05, d, 0.03))))
    n_str = int(rng.choice([0, 2, 4]))
    zs = rng.uniform(0.1, 0.2)
    for i in range(n_str):
        if i < 2:
            s = -1 if i == 0 else 1
            parts.append(Part(f"stretcher{i}", _box((s * (w / 2 - leg), 0, zs), (leg, d - 2 * leg, leg))))
        else:
            s = -1 if i == 2 else 1
            parts.append(Part(f"stretcher{i}", _box((0, s * (d / 2 - leg), zs), (w - 2 * leg, leg, leg))))
    return parts


def make_table(rng: np.random.Generator) -> list[Part]:
    w, d, h = rng.uniform(0.6, 1.4), rng.uniform(0.5, 0.9), rng.uniform(0.5, 0.8)
    th = rng.uniform(0.03, 0.07)
    style = rng.choice(["four", "pedestal", "three"], p=[0.6, 0.25, 0.15])
    parts = []
    if style == "pedestal" or (style == "three"):
        r = min(w, d) / 2
        parts.append(Part("top", _cyl((0, 0, h - th / 2), r, th, sections=24)))
    else:
        parts.append(Part("top", _box((0, 0, h - th / 2), (w, d, th))))
    leg = rng.uniform(0.025, 0.05)
    if style == "four":
        for i, (sx, sy) in enumerate([(-1, -1), (1, -1), (-1, 1), (1, 1)]):
            parts.append(Part(f"leg{i}", _box((sx * (w / 2 - 2 * leg), sy * (d / 2 - 2 * leg), (h - th) / 2), (2 * leg, 2 * leg, h - th))))
        if rng.random() < 0.4:
            parts.append(Part("lower_shelf", _box((0, 0, 0.15 * h), (w - 4 * leg, d - 4 * leg, th * 0.7))))
        for i in range(int(rng.integers(0, 3))):
            x = (i - 0.5) * w / 2 if rng.random() < 0.9 else 0.0
            parts.append(Part(f"drawer{i}", _box((x, 0, h - th - 0.06), (w / 2.5, d * 0.8, 0.1))))
    elif style == "three":
        r = min(w, d) / 2
        for i in range(3):
            a = 2 * np.pi * i / 3
            parts.append(Part(f"leg{i}", _cyl((0.7 * r * np.cos(a), 0.7 * r * np.sin(a), (h - th) / 2), leg, h - th)))
    else:
        parts.append(Part("column", _cyl((0, 0, (h - th) / 2), rng.uniform(0.04, 0.08), h - th)))
        parts.append(Part("base", _cyl((0, 0, 0.02), min(w, d) / 3, 0.04, sections=24)))
    return parts


def make_shelf(rng: np.random.Generator) -> list[Part]:
    w, d, h = rng.uniform(0.5, 1.2), rng.uniform(0.25, 0.4), rng.uniform(0.6, 1.8)
    t = rng.uniform(0.02, 0.04)
    parts = [
        Part("side_left", _box((-w / 2 + t / 2, 0, h / 2), (t, d, h))),
        Part("side_right", _box((w / 2 - t / 2, 0, h / 2), (t, d, h))),
        Part("bottom", _box((0, 0, t / 2), (w - 2 * t, d, t))),
        Part("top", _box((0, 0, h - t / 2), (w - 2 * t, d, t))),
    ]
    n = int(rng.integers(1, 8))
    for i, z in enumerate(np.linspace(0, h, n + 2)[1:-1]):
        parts.append(Part(f"shelf{i}", _box((0, 0, z), (w - 2 * t, d, t))))
    if rng.random() < 0.5:
        parts.append(Part("back", _box((0, d / 2 - t / 4, h / 2), (w - 2 * t, t / 2, h - 2 * t))))
    for i in range(int(rng.integers(0, 3))):
        x = (i + 1) * w / (3 + 1) - w / 2
        parts.append(Part(f"divider{i}", _box((x, 0, h / 2), (t, d * 0.95, h - 2 * t))))
    return parts


def make_lamp(rng: np.random.Generator) -> list[Part]:
    br, bh = rng.uniform(0.1, 0.2), rng.uniform(0.02, 0.05)
    parts = [Part("base", _cyl((0, 0, bh / 2), br, bh))]
    z, x = bh, 0.0
    n_seg = int(rng.integers(1, 4))
    pr = rng.uniform(0.01, 0.02)
    for i in range(n_seg):
        seg = rng.uniform(0.2, 0.45)
        parts.append(Part(f"pole{i}", _cyl((x, 0, z + seg / 2), pr, seg)))
        z += seg
        if i < n_seg - 1:
            parts.append(Part(f"joint{i}", _sphere((x, 0, z), 2 * pr)))
            x += rng.uniform(-0.05, 0.1)
    sr, sh = rng.uniform(0.1, 0.25), rng.uniform(0.12, 0.25)
    parts.append(Part("shade", _cone((x, 0, z - sh * 0.3), sr, sh)))
    if rng.random() < 0.5:
        parts.append(Part("bulb", _sphere((x, 0, z), rng.uniform(0.03, 0.05))))
    return parts


_MAKERS = {"chair": make_chair, "table": make_table, "shelf": make_shelf, "lamp": make_lamp}

def make_object(category: str, rng: np.random.Generator) -> list[Part]:
    """Raw (un-normalised, floor at z=0) parts of one procedural object."""
    check_category(category)
    if category == "scene":
        raise InputError("use make_scene for category 'scene'")
    if category not in _MAKERS:
        raise InputError(f"no procedural maker for {category!r}; procedural categories: {', '.join(_MAKERS)}")
    return _MAKERS[category](rng)


def make_scene(rng: np.random.Generator, min_parts: int = 64, max_objects: int = 60, room: float = 6.0) -> list[Part]:
    """Objects placed on a ``room x room`` floor, footprints never overlapping (rejection
    sampling with a margin), until the scene has at least ``min_parts`` parts."""
    parts: list[Part] = []
    footprints: list[tuple[float, float, float, float]] = []
    for obj_i in range(max_objects):
        if len(parts) >= min_parts:
            break
        cat = str(rng.choice(OBJECT_CATEGORIES))
        obj = make_object(cat, rng)
        lo = np.min([p.mesh.bounds[0] for p in obj], axis=0)
        hi = np.max([p.mesh.bounds[1] for p in obj], axis=0)
        for _ in range(50):
            x, y = rng.uniform(-room / 2 - lo[0], room / 2 - hi[0]), rng.uniform(-room / 2 - lo[1], room / 2 - hi[1])
            fp = (x + lo[0] - 0.05, x + hi[0] + 0.05, y + lo[1] - 0.05, y + hi[1] + 0.05)
            if all(fp[1] <= f[0] or f[1] <= fp[0] or fp[3] <= f[2] or f[3] <= fp[2] for f in footprints):
                footprints.append(fp)
                for p in obj:
                    p.mesh.apply_translation((x, y, 0))
                    p.name = f"{cat}{obj_i}/{p.name}"
                parts.extend(obj)
                break
    return parts


def make_shape(category: str, rng: np.random.Generator, n_points: int = 256, min_scene_parts: int = 64) -> Shape:
    """A normalised ``Shape`` with sampled points and boxes."""
    check_category(category)
    parts = make_scene(rng, min_parts=min_scene_parts) if category == "scene" else make_object(category, rng)
    shape = Shape(category, parts).normalise()
    for i, p in enumerate(shape.parts):
        p.finalize(n_points, seed=int(rng.integers(2**31 - 1)) + i)
    return shape

# ---------------------------------------------------------------- dataset on disk
def build_dataset(
    out_dir: str | Path, n_per_category: int = 50, n_scenes: int = 4, n_points: int = 256, seed: int = 0,
    test_fraction: float = 0.2, min_scene_parts: int = 64, categories: tuple[str, ...] = OBJECT_CATEGORIES,
) -> Path:
    """Build the procedural dataset into ``out_dir/parts.npz`` (+ ``meta.json``), atomically."""
    if n_per_category < 1:
        raise InputError(f"n_per_category must be >= 1, got {n_per_category}")
    for c in categories:
        check_category(c)
    rng = np.random.default_rng(seed)
    shapes = [make_shape(c, rng, n_points) for c in categories for _ in range(n_per_category)]
    shapes += [make_shape("scene", rng, n_points, min_scene_parts) for _ in range(n_scenes)]
    split = np.zeros(len(shapes), dtype=np.int8)
    order = rng.permutation(len(shapes))
    split[order[: max(1, int(round(test_fraction * len(shapes))))]] = SPLITS["test"]
    return write_dataset(out_dir, shapes, split, {"source": "procedural", "n_points": n_points, "seed": seed})
