"""Parts of one real shape from its artist's named meshes (``build_parts``).

An OBJ's ``o`` objects / ``g`` groups, a GLB/glTF's nodes or one file per part are the parts.
Parts without usable faces are dropped. A part whose bounding-box diagonal is below
``TINY_FRACTION`` of the shape's is merged into the nearest larger part (smallest gap between the
boxes; ties go to the larger part). A model that is a single part is split into its connected
components (vertices welded by position, named ``<part>_<i>``) when that gives 2..``max_parts``
parts after the same merging; otherwise it stays one part. (Splitting every group into its
connected components was tried against this at equal training budget and lost category fidelity:
``experiments/generation3d/component_split.py``.)
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import trimesh

from generation3d.data import Part, face_colours
from generation3d.meshes import mesh_problem

TINY_FRACTION = 0.05  # parts with a box diagonal below this fraction of the shape's are merged


class SkipShape(Exception):
    """A shape that cannot be used; ``reason`` is its counted skip reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _bounds(meshes) -> tuple[np.ndarray, np.ndarray]:
    return np.min([m.bounds[0] for m in meshes], 0), np.max([m.bounds[1] for m in meshes], 0)


def box_diagonal(meshes) -> float:
    """The diagonal of the bounding box of ``meshes`` together."""
    lo, hi = _bounds(meshes)
    return float(np.linalg.norm(hi - lo))


def _box_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Euclidean gap between two axis-aligned boxes given as ``bounds (2, 3)`` (0 when they touch)."""
    return float(np.linalg.norm(np.maximum(0.0, np.maximum(a[0] - b[1], b[0] - a[1]))))


def merge_tiny(parts: list[Part], tiny_fraction: float = TINY_FRACTION, diag: float | None = None) -> list[Part]:
    """Merge every part whose box diagonal is below ``tiny_fraction`` of ``diag`` (default: the
    parts' own box diagonal) into the nearest part that is not tiny (smallest box gap; ties to the
    larger part). When all parts are tiny they become one part (named after the largest)."""
    if len(parts) < 2:
        return parts
    diag = box_diagonal([p.mesh for p in parts]) if diag is None else diag
    sizes = [float(np.linalg.norm(p.mesh.extents)) for p in parts]
    big = [i for i, s in enumerate(sizes) if s >= tiny_fraction * diag]
    if not big:
        return [Part(parts[int(np.argmax(sizes))].name, trimesh.util.concatenate([p.mesh for p in parts]))]
    members = {i: [parts[i].mesh] for i in big}
    for i in (i for i in range(len(parts)) if i not in members):
        j = min(big, key=lambda j: (_box_gap(parts[i].mesh.bounds, parts[j].mesh.bounds), -sizes[j], j))
        members[j].append(parts[i].mesh)
    return [Part(parts[i].name, ms[0] if len(ms) == 1 else trimesh.util.concatenate(ms))
            for i, ms in members.items()]


def connected_components(mesh: trimesh.Trimesh) -> list[trimesh.Trimesh]:
    """The usable connected components of ``mesh`` (vertices welded by position)."""
    welded = trimesh.Trimesh(mesh.vertices, mesh.faces, face_colors=face_colours(mesh), process=True)
    return [c for c in welded.split(only_watertight=False) if mesh_problem(c) is None]


def split_components(part: Part, max_parts: int, tiny_fraction: float = TINY_FRACTION) -> list[Part] | None:
    """``part`` split into connected components, tiny ones merged; None unless that gives
    2..``max_parts`` parts (the ``groups`` rule for a single-part model)."""
    comps = connected_components(part.mesh)
    if len(comps) < 2:
        return None
    parts = merge_tiny([Part(f"{part.name}_{i}", c) for i, c in enumerate(comps)], tiny_fraction)
    return parts if 2 <= len(parts) <= max_parts else None


def usable_parts(meshes: list[tuple[str, trimesh.Trimesh]]) -> list[Part]:
    """The named meshes with usable faces as parts; SkipShape when none is (the most common
    problem is the reason)."""
    usable, problems = [], Counter()
    for name, m in meshes:
        problem = mesh_problem(m)
        if problem is None:
            usable.append(Part(name, trimesh.Trimesh(m.vertices, m.faces, face_colors=face_colours(m), process=False)))
        else:
            problems[problem] += 1
    if not usable:
        raise SkipShape(problems.most_common(1)[0][0] if problems else "no faces")
    return usable


def build_parts(meshes: list[tuple[str, trimesh.Trimesh]], max_parts: int,
                tiny_fraction: float = TINY_FRACTION) -> list[Part]:
    """Parts of one shape from its named meshes (rules in the module docstring). SkipShape when no
    mesh is usable (the most common problem is the reason) or more than ``max_parts`` remain."""
    parts = usable_parts(meshes)
    if len(parts) == 1:
        parts = split_components(parts[0], max_parts, tiny_fraction) or parts
    parts = merge_tiny(parts, tiny_fraction)
    if len(parts) > max_parts:
        raise SkipShape("too many parts")
    return parts
