"""The part-labelled dataset: ``Part`` and ``Shape``, the categories and splits, and the format on disk.

A ``Shape`` is a list of ``Part`` s. Each part has a triangle mesh, a surface point cloud
``points (M, 3)`` and an axis-aligned box ``box (6,) = (centre xyz, size xyz)``; shapes are
normalised so their bounding box is centred at the origin with largest half-extent 1 (z is up).
Every source writes the same format through ``write_dataset``: procedural shapes
(``shapes.build_dataset``), real furniture and a user's folder (``sources.py``), rooms
(``scenes.py``). ``PartDataset`` loads it.

On disk: ``parts.npz`` (per part: points, box, mesh; per shape: category index into
``CATEGORIES``, split 0 = train, 1 = test, 2 = val) and ``meta.json`` (counts per split and
category, plus the source's own fields).
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import trimesh

from common.errors import DataError, InputError
from common.io import atomic_write, read_json, write_json

OBJECT_CATEGORIES = ("chair", "table", "shelf", "lamp")  # the procedural object makers
# Category indices are stored in datasets and checkpoints: new categories are only ever appended.
CATEGORIES = OBJECT_CATEGORIES + ("scene", "sofa", "bed")
FURNITURE_TYPES = OBJECT_CATEGORIES + ("sofa", "bed")  # the types real furniture is sorted into
SPLITS = {"train": 0, "test": 1, "val": 2}  # values of the dataset's ``split`` array
DATASET_FILE = "parts.npz"
DATASET_ARRAYS = ("points", "boxes", "offsets", "category", "split", "part_names")  # what PartDataset reads
MESH_ARRAYS = ("mesh_vertices", "mesh_faces", "vertex_offsets", "face_offsets")  # the part meshes, read when present
COLOUR_ARRAY = "mesh_face_colors"  # (F, 3) uint8 per face of the part meshes (datasets built before it lack it)


def face_colours(mesh: trimesh.Trimesh) -> np.ndarray:
    """``(F, 3)`` uint8 colour per face: a coloured mesh's own, a material's main colour (a
    texture's mean colour times the diffuse one), else trimesh's default grey."""
    visual = mesh.visual
    if visual.kind in ("face", "vertex"):
        return np.asarray(visual.face_colors, np.uint8)[:, :3]
    colour = np.asarray(trimesh.visual.DEFAULT_COLOR[:3], np.float64)
    material = getattr(visual, "material", None)
    if material is not None:
        colour = np.asarray(material.main_color, np.float64)[:3]
        image = getattr(material, "image", None)
        if image is not None:
            mean = np.asarray(image.convert("RGB"), np.float64).reshape(-1, 3).mean(0)
            colour = mean * colour / 255.0
    return np.tile(np.clip(colour, 0, 255).astype(np.uint8), (len(mesh.faces), 1))


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
        centre, scale = unit_frame(np.min([p.mesh.bounds[0] for p in self.parts], axis=0),
                                   np.max([p.mesh.bounds[1] for p in self.parts], axis=0))
        for p in self.parts:
            p.mesh = p.mesh.copy()
            p.mesh.apply_translation(-centre)
            p.mesh.apply_scale(1.0 / scale)
        return self


def unit_frame(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre and scale that map the bounding box ``lo..hi`` (3,) to one centred at 0 with largest
    half-extent 1 (``Shape.normalise``, ``augment``)."""
    return (lo + hi) / 2, max((hi - lo).max() / 2, 1e-9)


def check_category(category: str) -> str:
    if category not in CATEGORIES:
        raise InputError(f"unknown category {category!r}; choose from {', '.join(CATEGORIES)}")
    return category


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
        "mesh_face_colors": np.concatenate([face_colours(p.mesh) for p in parts]),
    }


@dataclass
class PartDataset:
    """In-memory dataset. ``points (N_parts, M, 3)`` world coords; ``boxes (N_parts, 6)``;
    ``offsets (S+1,)`` part ranges per shape; ``category (S,)``; ``split (S,)`` 0=train 1=test 2=val;
    ``meshes``: the ``MESH_ARRAYS`` of the part meshes (None when not loaded)."""

    points: np.ndarray
    boxes: np.ndarray
    offsets: np.ndarray
    category: np.ndarray
    split: np.ndarray
    part_names: np.ndarray
    meshes: dict[str, np.ndarray] | None = None
    root: Path | None = None  # the directory it was loaded from

    @classmethod
    def load(cls, data_dir: str | Path, with_meshes: bool = False) -> PartDataset:
        path = Path(data_dir) / DATASET_FILE
        if not path.is_file():
            raise DataError(f"no dataset at {path}: run `moca build-data --out {data_dir}` first")
        try:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in DATASET_ARRAYS if k not in z.files]
                if missing:
                    raise DataError(f"{path} is not a MoCA dataset: no {', '.join(missing)} array "
                                    f"(expected {', '.join(DATASET_ARRAYS)}; rebuild it with `moca build-data`)")
                arrays = {k: z[k] for k in DATASET_ARRAYS}
                meshes = {k: z[k] for k in MESH_ARRAYS + (COLOUR_ARRAY,) if k in z.files} if with_meshes else None
                meshes = meshes if meshes and set(MESH_ARRAYS) <= set(meshes) else None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise DataError(f"corrupt dataset {path}: {exc}") from exc
        _check_arrays(path, arrays)
        return cls(**arrays, meshes=meshes, root=Path(data_dir))

    def part_mesh(self, p: int) -> trimesh.Trimesh:
        """The mesh of part ``p`` (DataError when the dataset was loaded without meshes)."""
        if self.meshes is None:
            raise DataError("this dataset was loaded without its part meshes (PartDataset.load(..., with_meshes=True))")
        m = self.meshes
        v = m["mesh_vertices"][m["vertex_offsets"][p]: m["vertex_offsets"][p + 1]]
        f = m["mesh_faces"][m["face_offsets"][p]: m["face_offsets"][p + 1]]
        colours = m[COLOUR_ARRAY][m["face_offsets"][p]: m["face_offsets"][p + 1]] if COLOUR_ARRAY in m else None
        return trimesh.Trimesh(np.asarray(v, np.float64), f, face_colors=colours, process=False)

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


def _check_arrays(path: Path, z: dict[str, np.ndarray]) -> None:
    """DataError naming the array and what was expected when the arrays of a dataset file do not
    fit together (shapes, dtypes, ranges, finite values)."""

    def bad(key: str, expected: str, got) -> DataError:
        return DataError(f"corrupt dataset {path}: array {key!r} should be {expected}, got {got}")

    pts, boxes, off, cat, split = z["points"], z["boxes"], z["offsets"], z["category"], z["split"]
    if pts.ndim != 3 or pts.shape[2] != 3 or pts.shape[1] < 1 or pts.dtype.kind != "f":
        raise bad("points", "float (parts, points, 3)", f"{pts.dtype} {pts.shape}")
    if boxes.shape != (len(pts), 6) or boxes.dtype.kind != "f":
        raise bad("boxes", f"float ({len(pts)}, 6)", f"{boxes.dtype} {boxes.shape}")
    if not (np.isfinite(pts).all() and np.isfinite(boxes).all()):
        raise bad("points/boxes", "finite", "NaN or inf values")
    for key in ("offsets", "category", "split"):
        if z[key].ndim != 1 or z[key].dtype.kind not in "iu":
            raise bad(key, "a 1-D integer array", f"{z[key].dtype} {z[key].shape}")
    if len(off) != len(cat) + 1 or len(split) != len(cat) or len(cat) == 0:
        raise bad("offsets", f"one more entry than the {len(cat)} shapes (and split one per shape)",
                  f"{len(off)} offsets, {len(split)} splits")
    if off[0] != 0 or off[-1] != len(pts) or (np.diff(off) < 1).any():
        raise bad("offsets", f"increasing from 0 to the {len(pts)} parts, at least one part per shape",
                  f"{off[0]}..{off[-1]}")
    if ((cat < 0) | (cat >= len(CATEGORIES))).any():
        raise bad("category", f"indices 0..{len(CATEGORIES) - 1} into {', '.join(CATEGORIES)}", f"{cat.min()}..{cat.max()}")
    if not np.isin(split, list(SPLITS.values())).all():
        raise bad("split", "0 (train), 1 (test) or 2 (val)", sorted(set(split.tolist()) - set(SPLITS.values())))
    if z["part_names"].shape != (len(pts),) or z["part_names"].dtype.kind != "U":
        raise bad("part_names", f"{len(pts)} strings", f"{z['part_names'].dtype} {z['part_names'].shape}")


def trained_categories(ds: PartDataset, max_parts: int | None = None) -> list[str]:
    """The categories (in ``CATEGORIES`` order) of the training shapes with at most ``max_parts`` parts."""
    present = set(ds.category[ds.shape_ids("train", max_parts)].tolist())
    return [c for i, c in enumerate(CATEGORIES) if i in present]

def read_meta(data_dir: str | Path) -> dict:
    """``meta.json`` of a dataset ({} when there is none); DataError when it is not a JSON object."""
    p = Path(data_dir) / "meta.json"
    if not p.is_file():
        return {}
    meta = read_json(p)
    if not isinstance(meta, dict):
        raise DataError(f"{p} should hold a JSON object, got {type(meta).__name__}")
    return meta
