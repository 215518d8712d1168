"""Real part-labelled shapes for MoCA: Sweet Home 3D furniture and a user's folder of meshes.

Both read meshes into ``data.Shape`` s in the project's frame (z up; bounding box centred at the
origin with largest half-extent 1, as the procedural shapes) and are written by
``data.write_dataset`` in the same format, with a model-disjoint train/val/test split per
category. A shape that cannot be used is skipped with a counted reason (``Skips``), never an
exception: no faces, zero area, non-finite vertices, too many parts, parse error, unknown type.

Parts (``parts.build_parts``): the artist's groups, rules in ``generation3d/parts.py``.

Sweet Home 3D items are sorted into types by ``furniture.furniture_type``.
"""

from __future__ import annotations

import csv
import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import trimesh

from common.errors import DataError, InputError
from common.io import atomic_write, write_csv
from generation3d.data import CATEGORIES, SPLITS, Part, Shape, write_dataset
from generation3d.furniture import furniture_type
from generation3d.meshes import MESH_SUFFIXES, ArchiveResolver, read_named_meshes
from generation3d.parts import SkipShape, build_parts

VAL_FRACTION, TEST_FRACTION = 0.1, 0.2
CATEGORY_CSV = "categories.csv"  # optional in a user folder: columns shape,category
# (x, y, z) y-up -> (x, -z, y) z-up: up stays up, a model's front (+z in y-up) faces -y, as the
# procedural shapes (chair backs at +y)
Y_UP_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])

@dataclass
class Skips:
    """Skipped shapes: ``counts`` per reason and one row (shape, name, reason) per skip."""

    counts: Counter = field(default_factory=Counter)
    rows: list[dict] = field(default_factory=list)

    def add(self, shape: str, name: str, reason: str) -> None:
        self.counts[reason] += 1
        self.rows.append({"shape": shape, "name": name, "reason": reason})

    def summary(self) -> str:
        return ", ".join(f"{r} {n}" for r, n in self.counts.most_common()) or "none"


@dataclass
class RealShapes:
    """Shapes read from a source, their split ``(S,)`` (``data.SPLITS`` values), one record per
    shape (written to ``shapes.csv``), the skips and, for Sweet Home 3D, the catalogue items used."""

    shapes: list[Shape]
    split: np.ndarray
    records: list[dict]
    skips: Skips
    items: list = field(default_factory=list)


# ---------------------------------------------------------------- frame, sampling, split
def transform_parts(parts: list[Part], matrix: np.ndarray) -> list[Part]:
    """Apply the linear map ``matrix (3, 3)`` to every part's mesh (in place); returns ``parts``."""
    t = np.eye(4)
    t[:3, :3] = matrix
    for p in parts:
        p.mesh.apply_transform(t)
    return parts


def sweethome3d_matrix(parts: list[Part], rotation: Sequence[float] = (),
                       size_cm: Sequence[float] | None = None) -> np.ndarray:
    """The ``(3, 3)`` map from a Sweet Home 3D model to the z-up frame: the catalogue's
    ``modelRotation`` (row-major, y-up), then the per-axis scale that Sweet Home 3D applies to
    fit the model to ``size_cm = (width, depth, height)`` (x, z, y of the y-up model; skipped
    when a size is missing), then y-up -> z-up."""
    rot = np.asarray(rotation, float).reshape(3, 3) if len(rotation) == 9 else np.eye(3)
    scale = np.ones(3)
    if size_cm is not None:
        width, depth, height = size_cm
        target = np.array([width, height, depth], float)
        verts = np.concatenate([p.mesh.vertices for p in parts]) @ rot.T
        extent = verts.max(0) - verts.min(0)
        if np.isfinite(target).all() and (target > 0).all() and (extent > 1e-9 * extent.max()).all():
            scale = target / extent
    return Y_UP_TO_Z_UP @ np.diag(scale) @ rot


def finish_shape(category: str, parts: list[Part], n_points: int, seed: int) -> Shape:
    """Normalise (``Shape.normalise``) and sample ``n_points`` surface points per part."""
    shape = Shape(category, parts).normalise()
    for i, p in enumerate(shape.parts):
        p.finalize(n_points, seed + i)
    return shape


def model_disjoint_split(categories: Sequence[str], groups: Sequence[str], seed: int = 0,
                         val_fraction: float = VAL_FRACTION, test_fraction: float = TEST_FRACTION) -> np.ndarray:
    """Split ``(S,)`` (``data.SPLITS`` values) with every shape of a group (e.g. identical model
    files) in the same split. Per category (a group's category is its first shape's), its groups
    are shuffled by ``default_rng([seed, category index])`` and ``round(test_fraction * n)`` go to
    test, ``round(val_fraction * n)`` to val (each at least 1 once the category has 3 groups)."""
    first: dict[str, str] = {}
    for c, g in zip(categories, groups, strict=True):
        first.setdefault(g, c)
    group_split: dict[str, int] = {}
    for c in sorted(set(first.values())):
        keys = sorted(g for g, gc in first.items() if gc == c)
        n = len(keys)
        n_test, n_val = round(test_fraction * n), round(val_fraction * n)
        if n >= 3:
            n_test, n_val = max(1, n_test), max(1, n_val)
        order = np.random.default_rng([seed, CATEGORIES.index(c) if c in CATEGORIES else 99]).permutation(n)
        for rank, k in enumerate(order):
            group_split[keys[k]] = (SPLITS["test"] if rank < n_test else SPLITS["val"] if rank < n_test + n_val
                                    else SPLITS["train"])
    return np.array([group_split[g] for g in groups], dtype=np.int8)


def _safe(fn, skips: Skips, key: str, name: str):
    """``fn()``, or None after counting the skip: SkipShape gives its reason, DataError "parse
    error"; anything else a third-party parser raises on a malformed model is counted too, so
    one bad model never stops a build."""
    try:
        return fn()
    except SkipShape as exc:
        skips.add(key, name, exc.reason)
    except DataError:
        skips.add(key, name, "parse error")
    except Exception as exc:  # noqa: BLE001 - trimesh/numpy raise many types on malformed meshes
        skips.add(key, name, f"error ({type(exc).__name__})")
    return None


# ---------------------------------------------------------------- Sweet Home 3D
def load_sweethome3d(furniture_dir=None, n_points: int = 256, max_parts: int = 64, seed: int = 0,
                     progress: bool = False) -> RealShapes:
    """Every Sweet Home 3D item with a furniture type as a ``Shape`` (category = type), read from
    the ``.sh3f`` archives in place (``common.sweethome3d``). DataError when the folder is missing
    or holds no archive; an unreadable archive or model is a counted skip."""
    from tqdm import tqdm

    from common.sweethome3d import furniture_dir as find_dir
    from common.sweethome3d import read_archive, read_member

    skips, items = Skips(), []
    for archive in sorted(find_dir(furniture_dir).glob("*.sh3f")):
        try:
            items.extend(read_archive(archive))
        except DataError:
            skips.add(archive.name, archive.name, "unreadable archive")
    shapes, records, groups, used = [], [], [], []
    for k, item in enumerate(tqdm(items, disable=None if progress else True, desc="sweethome3d")):
        ftype = furniture_type(item.name, item.tags, item.category)
        if ftype is None:
            skips.add(item.key, item.name, "unknown type")
            continue

        def read(item=item, ftype=ftype, k=k):
            data = read_member(item, item.model)
            meshes = read_named_meshes(Path(item.model).name, data, ArchiveResolver(item))
            parts = build_parts(meshes, max_parts)
            matrix = sweethome3d_matrix(parts, item.model_rotation, (item.width_cm, item.depth_cm, item.height_cm))
            shape = finish_shape(ftype, transform_parts(parts, matrix), n_points, seed * 1_000_003 + 1000 * k)
            return shape, hashlib.sha1(data).hexdigest()

        got = _safe(read, skips, item.key, item.name)
        if got is None:
            continue
        shapes.append(got[0])
        groups.append(got[1])
        used.append(item)
        records.append({"key": item.key, "item_id": item.item_id, "name": item.name, "type": ftype,
                        "room": item.category, "license": item.license, "creator": item.creator,
                        "archive": Path(item.archive).name, "n_parts": len(got[0].parts)})
    split = model_disjoint_split([s.category for s in shapes], groups, seed)
    return RealShapes(shapes, split, _with_split(records, split), skips, used)


def _with_split(records: list[dict], split: np.ndarray) -> list[dict]:
    names = {v: k for k, v in SPLITS.items()}
    return [{**r, "split": names[int(s)]} for r, s in zip(records, split, strict=True)]


# ---------------------------------------------------------------- a user's folder
def _read_category_csv(path: Path) -> dict[str, str]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    if not rows or not {"shape", "category"} <= set(rows[0]):
        raise DataError(f"{path} needs a header with the columns shape,category and at least one row")
    out: dict[str, str] = {}
    for row, r in enumerate(rows, start=1):
        shape = (r["shape"] or "").strip()
        parts = PurePosixPath(shape.replace("\\", "/")).parts
        if not shape or shape.startswith(("/", "\\")) or ".." in parts or ":" in shape:
            raise DataError(f"{path} row {row}: shape {shape!r} should be a path inside the folder "
                            "(relative, no '..', e.g. chairs/a.obj)")
        if shape in out:
            raise DataError(f"{path} row {row}: shape {shape!r} is listed twice")
        out[shape] = (r["category"] or "").strip()
    return out


def folder_entries(root: Path) -> list[tuple[Path, str | None]]:
    """(shape path, category or None when unknown/missing) for every shape in ``root``."""
    csv_path = root / CATEGORY_CSV
    if csv_path.is_file():
        entries = [(root / rel, cat) for rel, cat in _read_category_csv(csv_path).items()]
        for path, _ in entries:
            if not path.resolve().is_relative_to(root.resolve()):
                raise DataError(f"{csv_path}: shape {str(path.relative_to(root))!r} leads outside {root} (a link?)")
        return entries
    entries = []
    for sub in sorted(p for p in root.iterdir() if not p.name.startswith(".")):
        if sub.is_dir():
            entries.extend((e, sub.name) for e in sorted(sub.iterdir()) if not e.name.startswith("."))
        else:
            entries.append((sub, None))
    return entries


def read_shape_meshes(path: Path) -> list[tuple[str, trimesh.Trimesh]]:
    """Named part meshes of one user shape: a mesh file (its nodes / OBJ groups are the parts) or
    a folder with one mesh file per part (the file's stem is the part name). SkipShape when the
    path is missing or holds no mesh file."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in MESH_SUFFIXES)
        if not files:
            raise SkipShape("no mesh files")
        meshes = []
        for f in files:
            ms = [m for _, m in read_named_meshes(f)]
            if ms:
                meshes.append((f.stem, ms[0] if len(ms) == 1 else trimesh.util.concatenate(ms)))
        return meshes
    if not path.is_file():
        raise SkipShape("missing file")
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise SkipShape("unsupported format")
    return read_named_meshes(path)


def load_folder(root, n_points: int = 256, max_parts: int = 64, seed: int = 0, up: str = "z") -> RealShapes:
    """The shapes of a user's folder (layouts in generation3d/README.md): ``root/<category>/<shape>``
    where a shape is a mesh file or a folder of one mesh file per part, or, with
    ``root/categories.csv`` (columns ``shape,category``; shape = path relative to ``root``), the
    shapes it lists. ``up`` is the input's up axis ("y" is rotated to z). DataError when ``root``
    is not a folder or no shape is usable."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"shape folder not found: {root}")
    if up not in ("y", "z"):
        raise InputError(f"up axis must be 'y' or 'z', got {up!r}")
    matrix = Y_UP_TO_Z_UP if up == "y" else np.eye(3)
    skips, shapes, records = Skips(), [], []
    for k, (path, category) in enumerate(folder_entries(root)):
        key = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        if category is None:
            skips.add(key, path.stem, "no category")
            continue
        if category not in CATEGORIES:
            skips.add(key, path.stem, "unknown category")
            continue

        def read(path=path, category=category, k=k):
            parts = build_parts(read_shape_meshes(path), max_parts)
            return finish_shape(category, transform_parts(parts, matrix), n_points, seed * 1_000_003 + 1000 * k)

        shape = _safe(read, skips, key, path.stem)
        if shape is not None:
            shapes.append(shape)
            records.append({"key": key, "name": path.stem, "type": category, "n_parts": len(shape.parts)})
    if not shapes:
        raise DataError(f"no usable shapes in {root} (skipped: {skips.summary()})")
    split = model_disjoint_split([s.category for s in shapes], [r["key"] for r in records], seed)
    return RealShapes(shapes, split, _with_split(records, split), skips)


# ---------------------------------------------------------------- dataset
def build_real_dataset(out_dir, source: str, n_points: int = 256, max_parts: int = 64, seed: int = 0,
                       furniture_dir=None, up: str = "z", progress: bool = False) -> RealShapes:
    """Read ``source`` ("sweethome3d" or a folder) and write the dataset (``data.write_dataset``)
    to ``out_dir`` with ``shapes.csv`` (one row per shape: name, type, split, ...),
    ``skipped.csv`` (shape, name, reason) and, for Sweet Home 3D, ``ATTRIBUTION.csv``
    (``common.sweethome3d.write_attribution``). ``meta.json`` holds the skip counts."""
    if source == "sweethome3d":
        real = load_sweethome3d(furniture_dir, n_points, max_parts, seed, progress)
    else:
        real = load_folder(source, n_points, max_parts, seed, up)
    if not real.shapes:
        raise DataError(f"no usable shapes in {source} (skipped: {real.skips.summary()})")
    out = Path(out_dir)
    write_dataset(out, real.shapes, real.split, {
        "source": source, "n_points": n_points, "max_parts": max_parts, "seed": seed,
        "n_skipped": sum(real.skips.counts.values()), "skipped": dict(real.skips.counts.most_common()),
    })
    write_csv(out / "shapes.csv", real.records)
    with atomic_write(out / "skipped.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["shape", "name", "reason"])
        writer.writeheader()
        writer.writerows(real.skips.rows)
    if real.items:
        from common.sweethome3d import write_attribution

        write_attribution(real.items, out / "ATTRIBUTION.csv")
    return real
