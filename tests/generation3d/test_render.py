"""Preview rendering: open3d off-screen in a subprocess, matplotlib fallback on failure/abort/timeout."""

import io
import sys

import numpy as np
import pytest
import trimesh

from generation3d import render
from generation3d.export import shape_meshes
from generation3d.render import RenderError, render_preview

PNG = b"\x89PNG\r\n\x1a\n"


def _two_parts():
    red, blue = trimesh.creation.box(extents=(1, 1, 1)), trimesh.creation.box(extents=(0.5, 0.5, 2))
    blue.apply_translation((1.5, 0, 0))
    red.visual.face_colors = [220, 20, 20, 255]
    blue.visual.face_colors = [20, 20, 220, 255]
    return [red, blue]


def _pixels(path):
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB")).astype(int)


def test_open3d_subprocess_renders_the_part_colours(tmp_path):
    pytest.importorskip("open3d")
    out = tmp_path / "p.png"
    # Filament on software Vulkan renders this in ~5 s, but once (CI stop 15, 2 slow cores) its
    # process hung past 120 s. A hang is an environment failure that ``renderer="auto"`` already
    # answers with the matplotlib fallback (tested below), so retry in fresh processes and skip
    # only when every try hangs; any other failure (non-zero exit, no PNG, wrong colours) fails.
    for _ in range(3):
        try:
            used = render_preview(_two_parts(), out, renderer="open3d", width=160, height=120, timeout_s=40)
            break
        except RenderError as exc:
            if "timed out" not in str(exc):
                raise
    else:
        pytest.skip("open3d's off-screen renderer hung in 3 fresh processes on this machine")
    assert used == "open3d" and out.read_bytes().startswith(PNG)
    img = _pixels(out)
    assert img.shape == (120, 160, 3)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    assert ((r > 120) & (r > 2 * g) & (r > 2 * b)).sum() > 50  # the red part is visible
    assert ((b > 120) & (b > 2 * g) & (b > 2 * r)).sum() > 50  # and the blue one


@pytest.mark.parametrize("failure", ["abort", "exit", "timeout"])
def test_failing_subprocess_falls_back_to_matplotlib(failure, tmp_path, monkeypatch):
    code = {"abort": "import os; os.abort()", "exit": "raise SystemExit(3)", "timeout": "import time; time.sleep(30)"}
    monkeypatch.setattr(render, "worker_command", lambda *a: [sys.executable, "-c", code[failure]])
    out = tmp_path / "p.png"
    with pytest.warns(RuntimeWarning, match="matplotlib"):
        used = render_preview(_two_parts(), out, timeout_s=3)
    assert used == "matplotlib" and out.read_bytes().startswith(PNG)
    # asking for open3d explicitly: a clear error and the existing preview is left untouched
    before = out.read_bytes()
    with pytest.raises(RenderError, match="timed out" if failure == "timeout" else "exited with code"):
        render_preview(_two_parts(), out, renderer="open3d", timeout_s=3)
    assert out.read_bytes() == before


def test_env_var_and_argument_select_matplotlib_without_a_subprocess(tmp_path, monkeypatch):
    def never(*a):
        raise AssertionError("the open3d subprocess must not start")

    monkeypatch.setattr(render, "worker_command", never)
    pts = np.random.default_rng(0).uniform(-1, 1, (3, 20, 3))
    meshes = shape_meshes(pts)
    assert render_preview(meshes, tmp_path / "a.png", renderer="matplotlib") == "matplotlib"
    monkeypatch.setenv(render.RENDERER_ENV, "matplotlib")
    assert render_preview(meshes, tmp_path / "b.png") == "matplotlib"
    assert (tmp_path / "b.png").read_bytes().startswith(PNG)
    monkeypatch.setenv(render.RENDERER_ENV, "vulkan")
    with pytest.raises(RenderError, match="MOCA_RENDERER"):
        render_preview(meshes, tmp_path / "c.png")
    with pytest.raises(RenderError, match="unknown renderer"):
        render_preview(meshes, tmp_path / "c.png", renderer="povray")
    with pytest.raises(RenderError, match="no parts"):
        render_preview([], tmp_path / "c.png", renderer="matplotlib")
    assert not (tmp_path / "c.png").exists()
