"""Rooms composed from real furniture items: many-component scenes for MoCA.

A scene is one ``data.Shape`` of category ``"scene"`` whose **components are the parts of all
placed items** (the artist's part groups of each Sweet Home 3D model, as in the object dataset),
so a room with 20 items of 3..15 parts has 60..300 components, each T latent tokens for the
generator. Items keep their real sizes in cm (the catalogue's width, depth and height).

Rules of ``compose_room`` (seeded, ``numpy.random.Generator``):

* the room is a ``width x depth`` rectangle (cm) whose area grows with the requested part count;
  every item's footprint (its axis-aligned xy bounds after a turn by a multiple of 90 degrees)
  lies inside it and **no two footprints overlap** (touching is allowed);
* groups are added until the scene has at least the drawn target of parts (uniform in
  ``[min_parts, max_parts]``); an item that would take it above ``max_parts`` is not placed:
  - *table with chairs*: a table anywhere (turned 0 or 90 degrees) and 1..8 copies of one chair
    model on its four sides, each turned to face the table, ``CHAIR_GAP`` cm from its edge;
    chairs only ever stand at tables;
  - *against a wall*: shelves/cabinets, beds and sofas stand with their back (+y of the model:
    Sweet Home 3D models face -y in the z-up frame) on a wall;
  - *lamps*: beside a sofa or bed on the same wall when there is room, else against a wall;
* items are drawn with replacement from the pool of their type; the pool of a scene is the
  furniture of its split (train / val / test, the model-disjoint split of
  ``sources.load_sweethome3d``), so test scenes are made of held-out furniture only.

``build_scene_dataset`` writes the dataset (``data.write_dataset``: every shape normalised to
largest half-extent 1, as all shapes) with ``scenes.csv`` (one row per scene: split, room size,
items, parts) and ``ATTRIBUTION.csv`` (every item used, with its creator and licence).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import trimesh

from common.errors import DataError, InputError
from common.io import write_csv
from generation3d.data import SPLITS, Part, Shape, write_dataset

CHAIR_GAP = 5.0  # cm between a table's edge and its chairs' footprints
LAMP_GAP = 5.0  # cm between a sofa/bed and the lamp beside it
AREA_PER_PART = 0.25  # m^2 of floor per requested part (the room's starting size)
MIN_AREA, MAX_AREA = 9.0, 150.0  # m^2
MAX_FAILURES = 60  # consecutive groups that find no free spot before the room is enlarged
ROOM_GROWTH = 1.25  # area factor when a room cannot reach its minimum part count
GROUPS = ("dining", "shelf", "sofa", "bed", "lamp")
GROUP_WEIGHTS = (0.35, 0.25, 0.17, 0.13, 0.10)


@dataclass
class SceneItem:
    """One furniture model in cm, front towards -y: ``parts`` are ``(name, mesh)``, moved (copies)
    so that the model's footprint is centred at x = y = 0 and its lowest point is at z = 0.
    ``source`` is the ``common.sweethome3d.FurnitureItem`` it came from (None for hand-made items)."""

    key: str
    name: str
    type: str
    parts: list[tuple[str, trimesh.Trimesh]]
    source: object = None

    def __post_init__(self):
        lo = np.min([m.bounds[0] for _, m in self.parts], 0)
        hi = np.max([m.bounds[1] for _, m in self.parts], 0)
        shift = -np.array([(lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, lo[2]])
        self.parts = [(n, m.copy()) for n, m in self.parts]
        for _, m in self.parts:
            m.apply_translation(shift)

    @property
    def extents(self) -> np.ndarray:
        """``(3,)`` size in cm along x, y, z."""
        lo = np.min([m.bounds[0] for _, m in self.parts], 0)
        hi = np.max([m.bounds[1] for _, m in self.parts], 0)
        return hi - lo

    @property
    def n_parts(self) -> int:
        return len(self.parts)

    @classmethod
    def from_shape(cls, shape: Shape, size_cm, key: str, name: str, source=None) -> SceneItem:
        """Undo ``Shape.normalise`` (largest half-extent 1): scale the shape so its largest extent
        is ``max(size_cm)`` cm."""
        scale = float(np.max(size_cm)) / 2.0
        meshes = []
        for p in shape.parts:
            m = p.mesh.copy()
            m.apply_scale(scale)
            meshes.append((p.name, m))
        return cls(key, name, shape.category, meshes, source)


@dataclass
class Placement:
    """``item`` turned by ``turns`` x 90 degrees about z (counter-clockwise) and moved to ``(x, y)``."""

    item: SceneItem
    x: float
    y: float
    turns: int

    @property
    def size_xy(self) -> tuple[float, float]:
        ex, ey = self.item.extents[:2]
        return (ey, ex) if self.turns % 2 else (ex, ey)

    @property
    def footprint(self) -> tuple[float, float, float, float]:
        """``(x0, x1, y0, y1)`` in cm."""
        w, d = self.size_xy
        return self.x - w / 2, self.x + w / 2, self.y - d / 2, self.y + d / 2

    def transform(self) -> np.ndarray:
        a = self.turns * math.pi / 2
        t = np.eye(4)
        t[:2, :2] = [[round(math.cos(a)), -round(math.sin(a))], [round(math.sin(a)), round(math.cos(a))]]
        t[:2, 3] = self.x, self.y
        return t

    def meshes(self) -> list[tuple[str, trimesh.Trimesh]]:
        t = self.transform()
        out = []
        for name, m in self.item.parts:
            m = m.copy()
            m.apply_transform(t)
            out.append((name, m))
        return out


def overlap(a, b) -> bool:
    """Whether footprints ``(x0, x1, y0, y1)`` intersect with positive area (touching is not)."""
    return a[0] < b[1] - 1e-6 and b[0] < a[1] - 1e-6 and a[2] < b[3] - 1e-6 and b[2] < a[3] - 1e-6


@dataclass
class Room:
    """A composed room: ``width_cm x depth_cm`` centred at the origin and its placements."""

    width_cm: float
    depth_cm: float
    placements: list[Placement] = field(default_factory=list)

    @property
    def n_parts(self) -> int:
        return sum(p.item.n_parts for p in self.placements)

    def fits(self, fp) -> bool:
        """``fp`` lies inside the room and overlaps no placed footprint."""
        w, d = self.width_cm / 2, self.depth_cm / 2
        inside = fp[0] >= -w - 1e-6 and fp[1] <= w + 1e-6 and fp[2] >= -d - 1e-6 and fp[3] <= d + 1e-6
        return inside and not any(overlap(fp, p.footprint) for p in self.placements)

    def try_place(self, item: SceneItem, x: float, y: float, turns: int, max_parts: int) -> Placement | None:
        p = Placement(item, float(x), float(y), int(turns) % 4)
        if self.n_parts + item.n_parts > max_parts or not self.fits(p.footprint):
            return None
        self.placements.append(p)
        return p

    def parts(self) -> list[Part]:
        """Every placed part as a ``data.Part`` named ``<type><i>/<part>`` (world cm)."""
        return [Part(f"{p.item.type}{i}/{name}", m) for i, p in enumerate(self.placements) for name, m in p.meshes()]


# ---------------------------------------------------------------- groups
def _wall_spot(room: Room, item: SceneItem, rng: np.random.Generator, wall: int) -> tuple[float, float, int]:
    """A position with the item's back (+y) on ``wall`` (0 north +y, 1 west -x, 2 south -y, 3 east +x)."""
    ex, ey = item.extents[:2]
    w, d = room.width_cm / 2, room.depth_cm / 2
    # turns t put the model's +y at (-sin, cos)(t * 90): 0 -> +y, 1 -> -x, 2 -> -y, 3 -> +x
    if wall in (0, 2):
        x = rng.uniform(-w + ex / 2, w - ex / 2) if 2 * w > ex else 0.0
        return x, (d - ey / 2) * (1 if wall == 0 else -1), wall
    y = rng.uniform(-d + ex / 2, d - ex / 2) if 2 * d > ex else 0.0
    return (w - ey / 2) * (-1 if wall == 1 else 1), y, wall


def _place_on_wall(room, item, rng, max_parts, tries: int = 12) -> Placement | None:
    for _ in range(tries):
        x, y, turns = _wall_spot(room, item, rng, int(rng.integers(4)))
        p = room.try_place(item, x, y, turns, max_parts)
        if p is not None:
            return p
    return None


def _place_lamp_beside(room, lamp, anchor: Placement, rng, max_parts) -> Placement | None:
    """The lamp on the anchor's wall, left or right of it (its back on the same wall)."""
    ax0, ax1, ay0, ay1 = anchor.footprint
    ex, ey = lamp.extents[:2]
    turns = anchor.turns
    sides = [-1, 1] if rng.random() < 0.5 else [1, -1]
    for s in sides:
        if turns in (0, 2):  # wall along x
            x = (ax1 + LAMP_GAP + ex / 2) if s > 0 else (ax0 - LAMP_GAP - ex / 2)
            y = (ay1 - ey / 2) if turns == 0 else (ay0 + ey / 2)
        else:  # wall along y; the lamp turned like the anchor has x-size ey, y-size ex
            y = (ay1 + LAMP_GAP + ex / 2) if s > 0 else (ay0 - LAMP_GAP - ex / 2)
            x = (ax0 + ey / 2) if turns == 1 else (ax1 - ey / 2)
        p = room.try_place(lamp, x, y, turns, max_parts)
        if p is not None:
            return p
    return None


def _chair_slots(table: Placement, chair: SceneItem) -> list[tuple[float, float, int]]:
    """Chair positions around ``table``: per side up to 3 (long) / 2 (short) evenly spaced, each
    chair turned to face the table (its front, -y of the model, towards the table)."""
    x0, x1, y0, y1 = table.footprint
    cw, cd = chair.extents[:2]
    slots = []
    for side, turns in (("south", 2), ("north", 0), ("west", 1), ("east", 3)):
        along = (x1 - x0) if side in ("south", "north") else (y1 - y0)
        n = max(1, min(3, int(along // (cw + 10.0))))
        offsets = [(i + 0.5) / n * along - along / 2 for i in range(n)]
        for o in offsets:
            if side == "south":
                slots.append(((x0 + x1) / 2 + o, y0 - CHAIR_GAP - cd / 2, turns))
            elif side == "north":
                slots.append(((x0 + x1) / 2 + o, y1 + CHAIR_GAP + cd / 2, turns))
            elif side == "west":
                slots.append((x0 - CHAIR_GAP - cd / 2, (y0 + y1) / 2 + o, turns))
            else:
                slots.append((x1 + CHAIR_GAP + cd / 2, (y0 + y1) / 2 + o, turns))
    return slots


def _place_dining(room, pools, rng, max_parts) -> bool:
    table = pools["table"][int(rng.integers(len(pools["table"])))]
    w, d = room.width_cm / 2, room.depth_cm / 2
    for _ in range(12):
        turns = int(rng.integers(2))
        tw, td = (table.extents[1], table.extents[0]) if turns else table.extents[:2]
        if tw > 2 * w or td > 2 * d:
            continue
        t = room.try_place(table, rng.uniform(-w + tw / 2, w - tw / 2), rng.uniform(-d + td / 2, d - td / 2),
                           turns, max_parts)
        if t is None:
            continue
        if pools.get("chair"):
            chair = pools["chair"][int(rng.integers(len(pools["chair"])))]
            slots = _chair_slots(t, chair)
            want = int(rng.integers(1, len(slots) + 1))
            for j in rng.permutation(len(slots))[:want]:
                room.try_place(chair, *slots[j], max_parts)
        return True
    return False


def _place_group(room: Room, group: str, pools: dict, rng: np.random.Generator, max_parts: int) -> bool:
    if group == "dining":
        return bool(pools.get("table")) and _place_dining(room, pools, rng, max_parts)
    if not pools.get(group):
        return False
    item = pools[group][int(rng.integers(len(pools[group])))]
    if group == "lamp":
        anchors = [p for p in room.placements if p.item.type in ("sofa", "bed")]
        for j in rng.permutation(len(anchors)):
            if _place_lamp_beside(room, item, anchors[j], rng, max_parts) is not None:
                return True
        return _place_on_wall(room, item, rng, max_parts) is not None
    placed = _place_on_wall(room, item, rng, max_parts)
    if placed is not None and group in ("sofa", "bed") and pools.get("lamp") and rng.random() < 0.6:
        _place_lamp_beside(room, pools["lamp"][int(rng.integers(len(pools["lamp"])))], placed, rng, max_parts)
    return placed is not None


def compose_room(pools: dict[str, list[SceneItem]], rng: np.random.Generator, min_parts: int = 32,
                 max_parts: int = 256) -> Room:
    """A room of real items with between ``min_parts`` and ``max_parts`` parts (rules in the module
    docstring). ``pools``: items per furniture type (drawn with replacement). DataError when the
    pools cannot reach ``min_parts`` even in the largest room."""
    if not 1 <= min_parts <= max_parts:
        raise InputError(f"need 1 <= min_parts <= max_parts, got {min_parts} and {max_parts}")
    pools = {t: items for t, items in pools.items() if items}
    if not pools:
        raise DataError("no furniture to compose rooms from")
    target = int(rng.integers(min_parts, max_parts + 1))
    area = float(np.clip(AREA_PER_PART * target, MIN_AREA, MAX_AREA))
    weights = np.array([w if (g in pools or (g == "dining" and "table" in pools)) else 0.0
                        for g, w in zip(GROUPS, GROUP_WEIGHTS, strict=True)])
    if weights.sum() == 0:
        raise DataError(f"no furniture type that rooms are made of (have: {', '.join(sorted(pools))})")
    weights /= weights.sum()
    while True:
        aspect = rng.uniform(0.6, 1.0 / 0.6)
        room = Room(100 * math.sqrt(area * aspect), 100 * math.sqrt(area / aspect))
        failures = 0
        while room.n_parts < target and failures < MAX_FAILURES:
            placed = _place_group(room, GROUPS[int(rng.choice(len(GROUPS), p=weights))], pools, rng, max_parts)
            failures = 0 if placed else failures + 1
        if room.n_parts >= min_parts:
            return room
        if area >= MAX_AREA:
            raise DataError(f"cannot reach {min_parts} parts with this furniture (a room of {MAX_AREA:.0f} m^2 "
                            f"holds {room.n_parts}); lower the minimum part count")
        area = min(MAX_AREA, area * ROOM_GROWTH)


# ---------------------------------------------------------------- dataset
def scene_items(real) -> tuple[list[SceneItem], np.ndarray]:
    """``sources.RealShapes`` of Sweet Home 3D (normalised shapes + catalogue items) -> the items
    in cm and their split ``(N,)``; items without a positive catalogue size are left out."""
    out, split = [], []
    for shape, item, s in zip(real.shapes, real.items, real.split, strict=True):
        size = np.array([item.width_cm, item.depth_cm, item.height_cm], float)
        if np.isfinite(size).all() and (size > 0).all():
            out.append(SceneItem.from_shape(shape, size, item.key, item.name, item))
            split.append(s)
    return out, np.asarray(split, np.int8)


def split_pools(items: list[SceneItem], split: np.ndarray) -> dict[int, dict[str, list[SceneItem]]]:
    """Items per split value and furniture type."""
    pools: dict[int, dict[str, list[SceneItem]]] = {v: {} for v in SPLITS.values()}
    for it, s in zip(items, split, strict=True):
        pools[int(s)].setdefault(it.type, []).append(it)
    return pools


def scene_splits(n_scenes: int, seed: int, val_fraction: float = 0.1, test_fraction: float = 0.2) -> np.ndarray:
    """``(n_scenes,)`` split values: ``round(test_fraction * n)`` test and ``round(val_fraction * n)``
    val scenes (each at least 1 from 3 scenes on), the rest train, in a seeded order."""
    n_test, n_val = round(test_fraction * n_scenes), round(val_fraction * n_scenes)
    if n_scenes >= 3:
        n_test, n_val = max(1, n_test), max(1, n_val)
    split = np.full(n_scenes, SPLITS["train"], np.int8)
    order = np.random.default_rng([seed, 7]).permutation(n_scenes)
    split[order[:n_test]] = SPLITS["test"]
    split[order[n_test : n_test + n_val]] = SPLITS["val"]
    return split


def compose_scenes(items: list[SceneItem], item_split: np.ndarray, n_scenes: int, min_parts: int, max_parts: int,
                   n_points: int = 128, seed: int = 0) -> tuple[list[Shape], np.ndarray, list[Room]]:
    """``n_scenes`` rooms (``compose_room``, scene i seeded with ``[seed, i]``), each from the items
    of its split (``scene_splits``), as normalised ``Shape`` s with ``n_points`` points per part.
    Returns (shapes, split ``(n_scenes,)``, rooms in cm)."""
    from generation3d.sources import finish_shape

    if n_scenes < 1:
        raise InputError(f"need at least one scene, got {n_scenes}")
    pools = split_pools(items, item_split)
    split = scene_splits(n_scenes, seed)
    shapes, rooms = [], []
    for i, s in enumerate(split):
        pool = pools[int(s)]
        if not pool:
            raise DataError(f"no furniture in the {[k for k, v in SPLITS.items() if v == s][0]} split to compose rooms from")
        room = compose_room(pool, np.random.default_rng([seed, i]), min_parts, max_parts)
        rooms.append(room)
        shapes.append(finish_shape("scene", room.parts(), n_points, seed * 1_000_003 + 10_000 * i))
    return shapes, split, rooms


def build_scene_dataset(out_dir, n_scenes: int = 8, min_parts: int = 32, max_parts: int = 256, n_points: int = 128,
                        seed: int = 0, furniture_dir=None, item_max_parts: int = 64, progress: bool = False) -> list[Room]:
    """Compose ``n_scenes`` rooms from Debian's Sweet Home 3D furniture
    (``sources.load_sweethome3d``, items with at most ``item_max_parts`` parts) and write them to
    ``out_dir`` in the dataset format (category ``scene``), with ``scenes.csv`` and
    ``ATTRIBUTION.csv`` (the items placed in at least one scene). Returns the rooms (cm)."""
    from common.sweethome3d import write_attribution
    from generation3d.sources import load_sweethome3d

    real = load_sweethome3d(furniture_dir, n_points=16, max_parts=item_max_parts, seed=seed, progress=progress)
    items, item_split = scene_items(real)
    if not items:
        raise DataError(f"no usable furniture items (skipped: {real.skips.summary()})")
    shapes, split, rooms = compose_scenes(items, item_split, n_scenes, min_parts, max_parts, n_points, seed)
    out = Path(out_dir)
    n_parts = [r.n_parts for r in rooms]
    used = {p.item.key: p.item for r in rooms for p in r.placements}
    write_dataset(out, shapes, split, {
        "source": "scenes", "n_points": n_points, "seed": seed, "scene_min_parts": min_parts,
        "scene_max_parts": max_parts, "n_items_available": len(items), "n_items_used": len(used),
        "items_per_type": dict(Counter(it.type for it in items)), "parts_per_scene": n_parts,
    })
    names = {v: k for k, v in SPLITS.items()}
    write_csv(out / "scenes.csv", [{
        "scene": i, "split": names[int(s)], "width_cm": round(r.width_cm, 1), "depth_cm": round(r.depth_cm, 1),
        "n_items": len(r.placements), "n_parts": r.n_parts,
        "items": ";".join(f"{p.item.key}@{p.x:.0f},{p.y:.0f},{90 * p.turns}" for p in r.placements),
    } for i, (r, s) in enumerate(zip(rooms, split, strict=True))])
    write_attribution([it.source for it in used.values() if it.source is not None], out / "ATTRIBUTION.csv")
    return rooms
