"""Preview PNGs: open3d's off-screen renderer in a subprocess, matplotlib as the fallback.

Open3D's ``OffscreenRenderer`` (Filament; headless through Vulkan/llvmpipe or EGL) can hang or
abort the whole process when no usable graphics backend exists, so it never runs in the calling
process: ``render_preview`` writes the part meshes to a temporary ``.npz``, runs
``python -m generation3d.render <scene.npz> <out.png> <width> <height>`` with a timeout, and
checks the PNG it produced. When the subprocess fails, aborts, times out or writes no valid PNG,
the preview is drawn with matplotlib (``export.preview_png``) instead.

Choosing the renderer: ``renderer="auto"`` (default) tries open3d, then matplotlib;
``"matplotlib"`` skips open3d; ``"open3d"`` raises ``RenderError`` instead of falling back.
The env var ``MOCA_RENDERER`` (same values) sets the default for ``"auto"`` callers, e.g.
``MOCA_RENDERER=matplotlib`` on machines where open3d should not even be tried.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from common.errors import MoeAppsError
from common.io import atomic_write

RENDERERS = ("auto", "open3d", "matplotlib")
RENDERER_ENV = "MOCA_RENDERER"
TIMEOUT_S = 60.0
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class RenderError(MoeAppsError):
    """The requested renderer could not produce a preview."""


def _scene_arrays(meshes) -> dict[str, np.ndarray]:
    """Part meshes -> flat arrays: vertices, faces, per-part offsets and RGB colours in [0, 1]."""
    from generation3d.export import face_colour

    verts = [np.asarray(m.vertices, np.float32) for m in meshes]
    faces = [np.asarray(m.faces, np.int32) for m in meshes]
    return {
        "vertices": np.concatenate(verts), "faces": np.concatenate(faces),
        "vertex_offsets": np.cumsum([0] + [len(v) for v in verts]), "face_offsets": np.cumsum([0] + [len(f) for f in faces]),
        "colours": np.array([face_colour(m, i) for i, m in enumerate(meshes)], np.float32).reshape(-1, 3),
    }


def worker_command(scene_file: Path, png_file: Path, width: int, height: int) -> list[str]:
    """argv of the render subprocess."""
    return [sys.executable, "-m", "generation3d.render", str(scene_file), str(png_file), str(width), str(height)]


def _render_open3d(meshes, width: int, height: int, timeout_s: float) -> bytes:
    """PNG bytes from the open3d subprocess; RenderError when it fails, aborts or times out."""
    with tempfile.TemporaryDirectory(prefix="moca_render_") as tmp:
        scene, png = Path(tmp) / "scene.npz", Path(tmp) / "out.png"
        np.savez(scene, **_scene_arrays(meshes))
        try:
            proc = subprocess.run(worker_command(scene, png, width, height), capture_output=True, text=True,
                                  timeout=timeout_s, env={**os.environ, "OMP_NUM_THREADS": "1"})
        except subprocess.TimeoutExpired:
            raise RenderError(f"open3d renderer timed out after {timeout_s:g} s") from None
        except OSError as exc:
            raise RenderError(f"cannot start the open3d renderer: {exc}") from exc
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            raise RenderError(f"open3d renderer exited with code {proc.returncode}: {tail[0][:200]}")
        data = png.read_bytes() if png.is_file() else b""
        if not data.startswith(PNG_MAGIC):
            raise RenderError("open3d renderer wrote no PNG")
        return data


def render_preview(meshes, path: str | Path | None = None, title: str = "", renderer: str = "auto",
                   width: int = 400, height: int = 400, timeout_s: float = TIMEOUT_S) -> str:
    """Render part meshes (trimesh, coloured) to ``path``; returns the renderer used
    (``"open3d"`` or ``"matplotlib"``). ``title`` is drawn by matplotlib only."""
    from generation3d.export import preview_png

    if renderer not in RENDERERS:
        raise RenderError(f"unknown renderer {renderer!r}; choose from {', '.join(RENDERERS)}")
    if renderer == "auto":
        renderer = os.environ.get(RENDERER_ENV, "auto") or "auto"
        if renderer not in RENDERERS:
            raise RenderError(f"${RENDERER_ENV}={renderer!r} is not one of {', '.join(RENDERERS)}")
    if not meshes:
        raise RenderError("nothing to render: no parts")
    if renderer in ("auto", "open3d"):
        try:
            data = _render_open3d(meshes, width, height, timeout_s)
        except RenderError as exc:
            if renderer == "open3d":
                raise
            warnings.warn(f"{exc}; using the matplotlib preview", RuntimeWarning, stacklevel=2)
        else:
            if path is not None:
                with atomic_write(path, "wb") as f:
                    f.write(data)
            return "open3d"
    preview_png(meshes, path, title=title)
    return "matplotlib"


def _camera(vertices: np.ndarray, elev_deg: float = 20.0, azim_deg: float = -60.0, fov_deg: float = 40.0):
    """(centre, eye, up) looking at the bounding box from elevation/azimuth, z up, fitting it."""
    lo, hi = vertices.min(0), vertices.max(0)
    centre = (lo + hi) / 2
    radius = max(float(np.linalg.norm(hi - lo)) / 2, 1e-3)
    dist = radius / math.sin(math.radians(fov_deg) / 2) * 1.05
    e, a = math.radians(elev_deg), math.radians(azim_deg)
    eye = centre + dist * np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])
    return centre, eye, np.array([0.0, 0.0, 1.0])


def _worker_main(argv: list[str]) -> int:
    """Subprocess entry: render ``scene.npz`` to ``out.png`` with open3d's OffscreenRenderer."""
    scene_file, png_file, width, height = argv[0], argv[1], int(argv[2]), int(argv[3])
    import open3d as o3d

    z = np.load(scene_file)
    r = o3d.visualization.rendering.OffscreenRenderer(width, height)
    r.scene.set_background([1.0, 1.0, 1.0, 1.0])
    # one geometry with per-vertex part colours: Filament on software Vulkan slows down sharply
    # with the number of geometries (11 lit parts at 320x320 took 15 s here, one merged unlit mesh far less)
    vo = z["vertex_offsets"]
    colours = np.repeat(z["colours"], np.diff(vo), axis=0).astype(np.float64)
    faces = z["faces"] + np.repeat(vo[:-1], np.diff(z["face_offsets"]))[:, None]
    mesh = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(z["vertices"].astype(np.float64)),
                                     o3d.utility.Vector3iVector(faces.astype(np.int32)))
    mesh.vertex_colors = o3d.utility.Vector3dVector(colours)
    mesh.compute_vertex_normals()
    mat = o3d.visualization.rendering.MaterialRecord()
    mat.shader = "defaultUnlit"
    r.scene.add_geometry("parts", mesh, mat)
    centre, eye, up = _camera(z["vertices"])
    r.setup_camera(40.0, centre, eye, up)
    img = r.render_to_image()
    if not o3d.io.write_image(png_file, img):
        print(f"open3d could not write {png_file}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_worker_main(sys.argv[1:]))
