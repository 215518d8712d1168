"""Procedural part-labelled 3D dataset, the dataset format on disk, user mesh loader, and tensor batching.

A ``Shape`` is a list of ``Part`` s. Each part has a triangle mesh, a surface point cloud
``points (M, 3)`` and an axis-aligned box ``box (6,) = (centre xyz, size xyz)``. Objects
(chair, table, shelf, lamp) are assembled from parametric primitives (boxes, cylinders, cones,
spheres) with random proportions and part counts; scenes place many objects on a floor without
collisions (footprints do not overlap) and reach hundreds of parts. Every shape is normalised so
its bounding box is centred at the origin with largest half-extent 1 (z is up). Real shapes
(Sweet Home 3D furniture, a user's folder) are read by ``sources.py`` into the same ``Shape`` s
and written by ``write_dataset`` in the same format.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import trimesh

from common.errors import DataError, InputError
from common.io import atomic_write, write_json

OBJECT_CATEGORIES = ("chair", "table", "shelf", "lamp")  # the procedural object makers
# Category indices are stored in datasets and checkpoints: new categories are only ever appended.
CATEGORIES = OBJECT_CATEGORIES + ("scene", "sofa", "bed")
FURNITURE_TYPES = OBJECT_CATEGORIES + ("sofa", "bed")  # the types real furniture is sorted into
SPLITS = {"train": 0, "test": 1, "val": 2}  # values of the dataset's ``split`` array
DATASET_FILE = "parts.npz"
MIN_SIZE = 1e-3  # box sizes are clamped to this when normalising points into the box frame


@dataclass
class Part:
    name: str
    mesh: trimesh.Trimesh
    points: np.ndarray | None = None  # (M, 3) float32 surface samples
    box: np.ndarray | None = None  # (6,) centre xyz, size xyz

    def finalize(self, n_points: int, seed: int) -> Part:
        if len(self.mesh.faces) == 0 or self.mesh.area <= 0:
            raise DataError(f"part {self.name!r} has an empty mesh (no faces / zero area), so no points")
        pts, _ = trimesh.sample.sample_surface(self.mesh, n_points, seed=seed)
        self.points = np.asarray(pts, dtype=np.float32)
        lo, hi = self.mesh.bounds
        self.box = np.concatenate([(lo + hi) / 2, hi - lo]).astype(np.float32)
        return self


@dataclass
class Shape:
    category: str
    parts: list[Part] = field(default_factory=list)

    @property
    def boxes(self) -> np.ndarray:
        return np.stack([p.box for p in self.parts])

    @property
    def points(self) -> np.ndarray:
        return np.stack([p.points for p in self.parts])

    def normalise(self) -> Shape:
        """Centre the shape's bounding box at 0 and scale its largest half-extent to 1 (in place)."""
        lo = np.min([p.mesh.bounds[0] for p in self.parts], axis=0)
        hi = np.max([p.mesh.bounds[1] for p in self.parts], axis=0)
        centre, scale = (lo + hi) / 2, max((hi - lo).max() / 2, 1e-9)
        for p in self.parts:
            p.mesh = p.mesh.copy()
            p.mesh.apply_translation(-centre)
            p.mesh.apply_scale(1.0 / scale)
        return self


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


def check_category(category: str) -> str:
    if category not in CATEGORIES:
        raise InputError(f"unknown category {category!r}; choose from {', '.join(CATEGORIES)}")
    return category


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


# ---------------------------------------------------------------- user meshes
def mesh_problem(mesh: trimesh.Trimesh) -> str | None:
    """Why no surface points can be sampled from ``mesh`` ("no faces", "non-finite vertices",
    "zero area"), or None when it is usable."""
    if len(mesh.vertices) == 0 or len(mesh.faces) == 0:
        return "no faces"
    if not np.isfinite(mesh.vertices).all():
        return "non-finite vertices"
    if not mesh.area > 0:
        return "zero area"
    return None


def check_mesh(mesh: trimesh.Trimesh, name: str) -> None:
    """DataError for empty meshes, zero-area meshes and non-manifold edges (> 2 faces per edge)."""
    problem = mesh_problem(mesh)
    if problem == "no faces":
        raise DataError(f"part {name!r} has an empty mesh")
    if problem == "non-finite vertices":
        raise DataError(f"part {name!r} has non-finite vertex coordinates")
    if problem == "zero area":
        raise DataError(f"part {name!r} has zero surface area, so no points")
    edges = np.sort(mesh.edges, axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    if (counts > 2).any():
        raise DataError(f"part {name!r} is non-manifold: {int((counts > 2).sum())} edges shared by more than 2 faces")


MESH_SUFFIXES = (".glb", ".gltf", ".obj", ".ply")


def read_named_meshes(path: str | Path, data: bytes | None = None) -> list[tuple[str, trimesh.Trimesh]]:
    """The triangle meshes of a GLB/GLTF/OBJ/PLY file as ``(name, mesh)`` in the file's frame: one
    per scene node (GLB/GLTF, node transforms applied) or per OBJ ``o`` object / ``g`` group. With
    ``data`` the file's bytes are parsed (``path`` gives the name and format) and OBJ materials
    are skipped, so nothing beside it is looked up. DataError when the file cannot be parsed."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in MESH_SUFFIXES:
        raise DataError(f"unsupported mesh format {path.name!r}; use {', '.join(MESH_SUFFIXES)}")
    kw = {"split_objects": True, "split_groups": True, "group_material": False} if suffix == ".obj" else {}
    try:
        if data is None:
            if not path.is_file():
                raise DataError(f"mesh file not found: {path}")
            scene = trimesh.load(str(path), force="scene", **kw)
        else:
            kw = {**kw, "skip_materials": True} if suffix == ".obj" else kw
            scene = trimesh.load(io.BytesIO(data), file_type=suffix[1:], force="scene", **kw)
    except DataError:
        raise
    except Exception as exc:  # trimesh raises many types on malformed files
        raise DataError(f"cannot read mesh {path}: {exc}") from exc
    meshes = []
    for node in scene.graph.nodes_geometry:
        transform, geom_name = scene.graph[node]
        geom = scene.geometry[geom_name]
        if not isinstance(geom, trimesh.Trimesh):
            continue
        m = geom.copy()
        m.apply_transform(transform)
        meshes.append((str(node), m))
    return meshes


def load_part_mesh(path: str | Path, category: str = "chair", n_points: int = 256, seed: int = 0) -> Shape:
    """Load a part-segmented GLB/GLTF/OBJ/PLY (one scene node / OBJ object or group per part)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"mesh file not found: {path}")
    meshes = read_named_meshes(path)
    if not meshes:
        raise DataError(f"{path} contains no triangle meshes")
    for name, m in meshes:
        check_mesh(m, name)
    shape = Shape(category, [Part(n, m) for n, m in meshes]).normalise()
    for i, p in enumerate(shape.parts):
        p.finalize(n_points, seed + i)
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


def write_dataset(out_dir: str | Path, shapes: list[Shape], split: np.ndarray, meta: dict | None = None) -> Path:
    """Write finalised ``shapes`` with ``split (S,)`` (values of ``SPLITS``) to
    ``out_dir/parts.npz`` and ``meta.json`` (counts + ``meta``), atomically. Returns the npz path."""
    if not shapes:
        raise DataError("no shapes to write")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arrays = shapes_to_arrays(shapes)
    arrays["split"] = np.asarray(split, dtype=np.int8)
    with atomic_write(out / DATASET_FILE, "wb") as f:
        np.savez_compressed(f, **arrays)
    n_parts = np.diff(arrays["offsets"])
    counts = {name: int((arrays["split"] == v).sum()) for name, v in SPLITS.items()}
    write_json(out / "meta.json", {
        "n_shapes": len(shapes), "n_parts_total": int(n_parts.sum()), "parts_min": int(n_parts.min()),
        "parts_max": int(n_parts.max()), "categories": list(CATEGORIES),
        "n_train": counts["train"], "n_val": counts["val"], "n_test": counts["test"],
        "shapes_per_category": {c: int((arrays["category"] == i).sum()) for i, c in enumerate(CATEGORIES)
                                if (arrays["category"] == i).any()},
        **(meta or {}),
    })
    return out / DATASET_FILE


def shapes_to_arrays(shapes: list[Shape]) -> dict[str, np.ndarray]:
    parts = [p for s in shapes for p in s.parts]
    verts = [np.asarray(p.mesh.vertices, np.float32) for p in parts]
    faces = [np.asarray(p.mesh.faces, np.int32) for p in parts]
    return {
        "points": np.stack([p.points for p in parts]).astype(np.float32),
        "boxes": np.stack([p.box for p in parts]).astype(np.float32),
        "offsets": np.cumsum([0] + [len(s.parts) for s in shapes]).astype(np.int64),
        "category": np.array([CATEGORIES.index(s.category) for s in shapes], np.int64),
        "part_names": np.array([p.name for p in parts]),
        "mesh_vertices": np.concatenate(verts), "mesh_faces": np.concatenate(faces),
        "vertex_offsets": np.cumsum([0] + [len(v) for v in verts]).astype(np.int64),
        "face_offsets": np.cumsum([0] + [len(f) for f in faces]).astype(np.int64),
    }


@dataclass
class PartDataset:
    """In-memory dataset. ``points (N_parts, M, 3)`` world coords; ``boxes (N_parts, 6)``;
    ``offsets (S+1,)`` part ranges per shape; ``category (S,)``; ``split (S,)`` 0=train 1=test 2=val."""

    points: np.ndarray
    boxes: np.ndarray
    offsets: np.ndarray
    category: np.ndarray
    split: np.ndarray
    part_names: np.ndarray

    @classmethod
    def load(cls, data_dir: str | Path) -> PartDataset:
        path = Path(data_dir) / DATASET_FILE
        if not path.is_file():
            raise DataError(f"no dataset at {path}: run `moca build-data --out {data_dir}` first")
        try:
            z = np.load(path, allow_pickle=False)
            ds = cls(z["points"], z["boxes"], z["offsets"], z["category"], z["split"], z["part_names"])
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"corrupt dataset {path}: {exc}") from exc
        if len(ds.offsets) != len(ds.category) + 1 or ds.offsets[-1] != len(ds.points):
            raise DataError(f"corrupt dataset {path}: offsets do not match the part arrays")
        return ds

    def __len__(self) -> int:
        return len(self.category)

    def n_parts(self, i: int) -> int:
        return int(self.offsets[i + 1] - self.offsets[i])

    def shape_ids(self, split: str = "train", max_parts: int | None = None) -> np.ndarray:
        s = SPLITS[split]
        ids = np.nonzero(self.split == s)[0]
        if max_parts is not None:
            ids = np.array([i for i in ids if self.n_parts(i) <= max_parts], dtype=np.int64)
        return ids

    def shape(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.points[a:b], self.boxes[a:b], int(self.category[i])

    def part_indices(self, split: str = "train") -> np.ndarray:
        ids = self.shape_ids(split)
        if len(ids) == 0:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in ids])


def trained_categories(ds: PartDataset, max_parts: int | None = None) -> list[str]:
    """The categories (in ``CATEGORIES`` order) of the training shapes with at most ``max_parts`` parts."""
    present = set(ds.category[ds.shape_ids("train", max_parts)].tolist())
    return [c for i, c in enumerate(CATEGORIES) if i in present]


def to_canonical(points: np.ndarray | torch.Tensor, boxes):
    """World points ``(..., M, 3)`` -> box frame ``[-1, 1]^3`` given ``boxes (..., 6)``."""
    half = boxes[..., None, 3:] / 2
    half = half.clip(MIN_SIZE) if isinstance(half, np.ndarray) else half.clamp(min=MIN_SIZE)
    return (points - boxes[..., None, :3]) / half


def from_canonical(points, boxes):
    """Inverse of ``to_canonical``: ``(..., M, 3)`` box-frame points -> world coordinates."""
    half = boxes[..., None, 3:] / 2
    half = half.clip(MIN_SIZE) if isinstance(half, np.ndarray) else half.clamp(min=MIN_SIZE)
    return points * half + boxes[..., None, :3]


def box_to_param(boxes):
    """Boxes ``(..., 6)`` (centre, size) -> generator parameters ``(..., 6)`` (centre, log size).

    Sizes span two orders of magnitude (legs 0.01, shelf sides 2); in log space a small error
    on a thin part stays a small relative error instead of a negative size."""
    if isinstance(boxes, np.ndarray):
        return np.concatenate([boxes[..., :3], np.log(boxes[..., 3:].clip(MIN_SIZE))], -1)
    return torch.cat([boxes[..., :3], boxes[..., 3:].clamp(min=MIN_SIZE).log()], -1)


def param_to_box(params):
    """Inverse of ``box_to_param``: ``(..., 6)`` centre, log size -> centre, size."""
    if isinstance(params, np.ndarray):
        return np.concatenate([params[..., :3], np.exp(params[..., 3:])], -1)
    return torch.cat([params[..., :3], params[..., 3:].exp()], -1)


def read_meta(data_dir: str | Path) -> dict:
    p = Path(data_dir) / "meta.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def shape_cloud(parts_points, n: int = 1024, seed: int = 0) -> np.ndarray:
    """Union of part clouds, subsampled to ``n`` points (area-agnostic, deterministic)."""
    pts = np.concatenate([np.asarray(p) for p in parts_points])
    rng = np.random.default_rng(seed)
    return pts[rng.choice(len(pts), size=min(n, len(pts)), replace=False)]
