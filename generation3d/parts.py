"""Parts of one real shape from its artist's named meshes (``build_parts``), in two component modes.

``groups`` (the default, the shipped model's data). An OBJ's ``o`` objects / ``g`` groups, a
GLB/glTF's nodes or one file per part are the parts. Parts without usable faces are dropped. A
part whose bounding-box diagonal is below ``TINY_FRACTION`` of the shape's is merged into the
nearest larger part (smallest gap between the boxes; ties go to the larger part). A model that is
a single part is split into its connected components (vertices welded by position, named
``<part>_<i>``) when that gives 2..``max_parts`` parts after the same merging; otherwise it stays
one part.

``split`` (#53 item 1: four legs in one group become four parts). Every group is split into its
connected components (vertices welded by position), then

1. a component whose box diagonal is below ``TINY_FRACTION`` of the *shape's* is merged into the
   nearest larger component of the same group (the group stays whole when all are tiny);
2. a group that still has more than ``MAX_GROUP_COMPONENTS`` components is a detailed ornament
   (crystals of a chandelier, slats of a blind, a heap of cushions) and stays one part; a model
   of a single group is only bounded by ``max_parts``, as in ``groups``;
3. every component is named after its group (``Leg`` for each of four legs: the label), and the
   shape-level tiny merge of ``groups`` runs on the result;
4. a shape with more than ``max_parts`` parts falls back to the ``groups`` rule, so ``split``
   keeps every shape that ``groups`` keeps.

``MAX_GROUP_COMPONENTS`` = 8 is read off the part counts alone (``experiments/generation3d/
component_split.py``, ``docs/results/generation3d/component_split.json``, the 229 typed Sweet Home
3D models that ``groups`` keeps): of 1,242 groups, 832 are one component, 298 have 2..8 (sets of
legs, boards, arms), 53 have 9..16 and 59 more. Every bound from 2 to 12 leaves the same 4 shapes
over 64 parts (they fall back); the p90 of parts per shape grows with the bound (6: 21, 8: 23,
12: 25, 32: 32, none: 62 with a maximum of 1,245 and 23 shapes over 64). 8 keeps sets of up to
eight legs or boards as parts at a p90 close to the smaller bounds'.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import trimesh

from common.errors import InputError
from generation3d.data import Part, face_colours
from generation3d.meshes import mesh_problem

TINY_FRACTION = 0.05  # parts with a box diagonal below this fraction of the shape's are merged
MAX_GROUP_COMPONENTS = 8  # split mode: a group with more components after merging stays whole
COMPONENT_MODES = ("groups", "split")


class SkipShape(Exception):
    """A shape that cannot be used; ``reason`` is its counted skip reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _bounds(meshes) -> tuple[np.ndarray, np.ndarray]:
    return np.min([m.bounds[0] for m in meshes], 0), np.max([m.bounds[1] for m in meshes], 0)


def check_components(components: str) -> None:
    """InputError unless ``components`` is one of ``COMPONENT_MODES``."""
    if components not in COMPONENT_MODES:
        raise InputError(f"components must be one of {', '.join(COMPONENT_MODES)}, got {components!r}")


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


def _components(mesh: trimesh.Trimesh) -> list[trimesh.Trimesh]:
    """The usable connected components of ``mesh`` (vertices welded by position)."""
    welded = trimesh.Trimesh(mesh.vertices, mesh.faces, face_colors=face_colours(mesh), process=True)
    return [c for c in welded.split(only_watertight=False) if mesh_problem(c) is None]


def split_components(part: Part, max_parts: int, tiny_fraction: float = TINY_FRACTION) -> list[Part] | None:
    """``part`` split into connected components, tiny ones merged; None unless that gives
    2..``max_parts`` parts (the ``groups`` rule for a single-part model)."""
    comps = _components(part.mesh)
    if len(comps) < 2:
        return None
    parts = merge_tiny([Part(f"{part.name}_{i}", c) for i, c in enumerate(comps)], tiny_fraction)
    return parts if 2 <= len(parts) <= max_parts else None


def group_components(part: Part, diag: float, tiny_fraction: float = TINY_FRACTION) -> list[trimesh.Trimesh]:
    """``split`` step 1: the connected components of one group with those below ``tiny_fraction``
    of the shape's box diagonal ``diag`` merged into the nearest larger one of the group; the
    group's own mesh when that leaves one."""
    comps = merge_tiny([Part(part.name, c) for c in _components(part.mesh)], tiny_fraction, diag)
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


def build_parts(meshes: list[tuple[str, trimesh.Trimesh]], max_parts: int, tiny_fraction: float = TINY_FRACTION,
                components: str = "groups") -> list[Part]:
    """Parts of one shape from its named meshes in component mode ``components`` (``COMPONENT_MODES``;
    rules in the module docstring). SkipShape when no mesh is usable (the most common problem is
    the reason) or more than ``max_parts`` remain; InputError for an unknown mode."""
    check_components(components)
    usable = usable_parts(meshes)
    if components == "split":
        parts = split_groups(usable, tiny_fraction=tiny_fraction)
        if len(parts) <= max_parts:
            return parts
    parts = usable
    if len(parts) == 1:
        parts = split_components(parts[0], max_parts, tiny_fraction) or parts
    parts = merge_tiny(parts, tiny_fraction)
    if len(parts) > max_parts:
        raise SkipShape("too many parts")
    return parts
