"""Export generated or dataset shapes: per-part coloured meshes (.glb/.ply/.obj) and PNG previews.

Generated parts are point clouds; each becomes a mesh (``points_to_mesh``) by its alpha shape
(open3d; ``alpha = ALPHA_SCALE`` × the cloud's bounding-box diagonal, chosen on validation parts of
the Sweet Home 3D furniture: ``experiments/generation3d/mesher_choice.py``), which keeps a part's
holes and concavities (four legs in one part stay apart), falling back to its convex hull and then
to its bounding box when a cloud is too flat or too small for either. (Relative to the point spacing
instead, alpha shapes tore the generated clouds, whose points clump, into fragments.)
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import trimesh

from common.errors import InputError
from common.io import atomic_write

EXPORT_FORMATS = (".glb", ".ply", ".obj")


def part_colours(n: int) -> np.ndarray:
    """``(n, 4)`` uint8 RGBA, distinct hues (tab20 cycled)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return (np.array([cmap(i % 20) for i in range(n)]) * 255).astype(np.uint8)


#: alpha of the alpha shapes in units of the cloud's bounding-box diagonal
ALPHA_SCALE = 0.2
#: a cloud whose thinnest direction spreads less than this fraction of its widest is flat (no volume)
FLAT = 1e-6


def alpha_shape(points: np.ndarray, scale: float = ALPHA_SCALE) -> trimesh.Trimesh | None:
    """The alpha shape of a cloud ``(M, 3)`` (open3d) at ``alpha = scale`` × its bounding-box
    diagonal, or None when it has no faces (a flat or tiny cloud)."""
    import open3d as o3d

    if len(points) < 4:
        return None
    diagonal = float(np.linalg.norm(points.max(0) - points.min(0)))
    spread = np.linalg.svd(points - points.mean(0), compute_uv=False)
    if not diagonal > 0 or spread[-1] <= FLAT * spread[0]:  # flat: qhull would only warn and fail
        return None
    o3d.utility.set_verbosity_level(o3d.utility.VerbosityLevel.Error)  # an empty shape is handled below
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points))
    try:
        mesh = o3d.geometry.TriangleMesh.create_from_point_cloud_alpha_shape(cloud, scale * diagonal)
    except RuntimeError:  # qhull on flat input
        return None
    # exported meshes are read back as parts (``meshes.check_mesh``): no edge of more than two faces
    mesh.remove_non_manifold_edges()
    mesh.remove_unreferenced_vertices()
    faces = np.asarray(mesh.triangles)
    if len(faces) == 0:
        return None
    return trimesh.Trimesh(np.asarray(mesh.vertices), faces, process=False)


def points_to_mesh(points: np.ndarray, box: np.ndarray | None = None) -> trimesh.Trimesh:
    """A part cloud ``(M, 3)`` as a mesh: its alpha shape, else ``hull_or_box``."""
    pts = np.asarray(points, dtype=np.float64)
    if len(pts) == 0:
        raise InputError("cannot mesh a part with no points")
    shape = alpha_shape(pts)
    return shape if shape is not None else hull_or_box(pts, box)


def hull_or_box(points: np.ndarray, box: np.ndarray | None = None) -> trimesh.Trimesh:
    """The convex hull of a non-empty cloud ``(M, 3)``, or its box ``(6,)`` (else the cloud's AABB)
    when the hull is degenerate."""
    pts = np.asarray(points, dtype=np.float64)
    try:
        hull = trimesh.convex.convex_hull(pts)
        if hull.volume > 1e-12 and len(hull.faces) >= 4:
            return hull
    except Exception:  # qhull raises on flat / collinear input
        pass
    if box is None:
        lo, hi = pts.min(0), pts.max(0)
        box = np.concatenate([(lo + hi) / 2, hi - lo])
    m = trimesh.creation.box(extents=np.maximum(np.asarray(box[3:], dtype=float), 1e-3))
    m.apply_translation(np.asarray(box[:3], dtype=float))
    return m


def shape_meshes(points: np.ndarray, boxes: np.ndarray | None = None) -> list[trimesh.Trimesh]:
    """One coloured mesh per part from ``points (P, M, 3)`` (``points_to_mesh``)."""
    colours = part_colours(len(points))
    meshes = []
    for i, pts in enumerate(points):
        m = points_to_mesh(pts, None if boxes is None else boxes[i])
        m.visual.face_colors = np.tile(colours[i], (len(m.faces), 1))
        meshes.append(m)
    return meshes


def export_meshes(meshes: list[trimesh.Trimesh], path: str | Path) -> Path:
    """Write parts to ``path``: .glb/.obj keep one node/object per part, .ply is merged (vertex
    colours per part). Written atomically (an existing file is only replaced on success)."""
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in EXPORT_FORMATS:
        raise InputError(f"unsupported export format {ext or path.name!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if not meshes:
        raise InputError("nothing to export: the shape has no parts")
    if ext == ".ply":
        merged = trimesh.util.concatenate(meshes)
        data = merged.export(file_type="ply")
    else:
        scene = trimesh.Scene()
        for i, m in enumerate(meshes):
            name = f"part_{i:03d}"
            scene.add_geometry(m, node_name=name, geom_name=name)
        data = scene.export(file_type=ext[1:])
    if isinstance(data, str):
        data = data.encode()
    with atomic_write(path, "wb") as f:
        f.write(data)
    return path


def face_colour(mesh: trimesh.Trimesh, i: int) -> tuple:
    """First face colour of a mesh as RGB in [0, 1] (loaded meshes may carry texture visuals)."""
    try:
        visual = mesh.visual.to_color() if hasattr(mesh.visual, "to_color") else mesh.visual
        fc = np.asarray(visual.face_colors, dtype=float).reshape(-1, 4)
        if len(fc):
            return tuple(fc[0, :3] / 255.0)
    except (AttributeError, ValueError):
        pass
    return tuple(part_colours(i + 1)[i, :3] / 255.0)


def _draw_parts(ax, meshes: list[trimesh.Trimesh], elev: float, azim: float) -> None:
    """Coloured part meshes on a matplotlib 3D axis, in a cube of view around them, no axes."""
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    allv = np.concatenate([m.vertices for m in meshes])
    for i, m in enumerate(meshes):
        ax.add_collection3d(Poly3DCollection(m.vertices[m.faces], facecolor=face_colour(m, i),
                                             edgecolor=(0, 0, 0, 0.15), linewidths=0.2))
    c, r = (allv.max(0) + allv.min(0)) / 2, max((allv.max(0) - allv.min(0)).max() / 2, 1e-3)
    ax.set_xlim(c[0] - r, c[0] + r)
    ax.set_ylim(c[1] - r, c[1] + r)
    ax.set_zlim(c[2] - r, c[2] + r)
    ax.view_init(elev=elev, azim=azim)
    ax.set_axis_off()


def preview_png(meshes: list[trimesh.Trimesh], path: str | Path | None = None, title: str = "", elev: float = 20, azim: float = -60) -> bytes:
    """Matplotlib render of coloured part meshes (z up); returns PNG bytes, writes ``path`` if given."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 5))  # no pyplot: its global figure state is shared by the hub's concurrent requests
    ax = fig.add_subplot(111, projection="3d")
    _draw_parts(ax, meshes, elev, azim)
    if title:
        ax.set_title(title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    png = buf.getvalue()
    if path is not None:
        with atomic_write(path, "wb") as f:
            f.write(png)
    return png


def preview_grid(shapes: list[list[trimesh.Trimesh]], path: str | Path, titles: list[str] | None = None,
                 ncols: int = 4, elev: float = 20, azim: float = -60) -> Path:
    """One matplotlib PNG of several shapes side by side (``ncols`` per row), each a list of
    coloured part meshes (z up) in its own cube of view with its ``titles`` entry; written
    atomically to ``path``."""
    from matplotlib.figure import Figure

    if not shapes:
        raise InputError("nothing to render: no shapes")
    ncols = min(ncols, len(shapes))
    nrows = -(-len(shapes) // ncols)
    fig = Figure(figsize=(3 * ncols, 3 * nrows))
    for k, meshes in enumerate(shapes):
        ax = fig.add_subplot(nrows, ncols, k + 1, projection="3d")
        _draw_parts(ax, meshes, elev, azim)
        if titles:
            ax.set_title(titles[k], fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    path = Path(path)
    with atomic_write(path, "wb") as f:
        f.write(buf.getvalue())
    return path
