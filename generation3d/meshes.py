"""Part-segmented mesh files: read GLB/GLTF/OBJ/PLY files as named part meshes, check them, and load
one file as a ``Shape`` (one scene node / OBJ object or group per part)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import trimesh

from common.errors import DataError
from generation3d.data import Part, Shape, face_colours


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
MAX_MESH_BYTES = 512 * 2**20  # a larger file is refused before parsing (the parsers hold it all in memory)


class ArchiveResolver(trimesh.resolvers.Resolver):
    """Reads the files an item's model names (its materials and textures) from beside the model in
    the item's archive; a missing one is read as absent (trimesh then skips that material)."""

    def __init__(self, item):
        self.item, self.folder = item, Path(item.model).parent

    def keys(self):
        return []

    def get(self, name: str) -> bytes:
        from common.sweethome3d import read_member

        return read_member(self.item, (self.folder / name).as_posix())

    def write(self, name, data):
        raise NotImplementedError("the furniture archives are read-only")

    def namespaced(self, namespace):
        return self


def read_named_meshes(path: str | Path, data: bytes | None = None,
                      resolver: trimesh.resolvers.Resolver | None = None) -> list[tuple[str, trimesh.Trimesh]]:
    """The triangle meshes of a GLB/GLTF/OBJ/PLY file as ``(name, mesh)`` in the file's frame: one
    per scene node (GLB/GLTF, node transforms applied) or per OBJ ``o`` object / ``g`` group, each
    coloured per face (``face_colours``). With ``data`` the file's bytes are parsed (``path`` gives
    the name and format) and OBJ materials are skipped unless a ``resolver`` reads the files beside
    it. DataError when the file cannot be parsed."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in MESH_SUFFIXES:
        raise DataError(f"unsupported mesh format {path.name!r}; use {', '.join(MESH_SUFFIXES)}")
    size = len(data) if data is not None else path.stat().st_size if path.is_file() else 0
    if size > MAX_MESH_BYTES:
        raise DataError(f"mesh file {path} is {size / 2**20:.3g} MiB, over the {MAX_MESH_BYTES / 2**20:g} MiB limit")
    kw = {"split_objects": True, "split_groups": True, "group_material": False} if suffix == ".obj" else {}
    try:
        if data is None:
            if not path.is_file():
                raise DataError(f"mesh file not found: {path}")
            scene = trimesh.load(str(path), force="scene", **kw)
        else:
            kw = {**kw, "skip_materials": True} if suffix == ".obj" and resolver is None else kw
            scene = trimesh.load(io.BytesIO(data), file_type=suffix[1:], force="scene", resolver=resolver, **kw)
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
        m = trimesh.Trimesh(geom.vertices, geom.faces, face_colors=face_colours(geom), process=False)
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
