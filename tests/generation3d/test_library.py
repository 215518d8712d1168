"""``generation3d.library``: the retrieve-and-fit decoder's component library, its fitting and its use
by the pipeline, the CLI and the shipped model."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import trimesh

from common.errors import CheckpointError
from generation3d.data import CATEGORIES, PartDataset
from generation3d.geometry import to_canonical
from generation3d.library import LIBRARY_FILE, MAX_DISTORTION, ComponentLibrary, fitted_scale
from generation3d.sampling import MoCAPipeline


@pytest.fixture(scope="module")
def with_library(tiny_data, tiny_pipeline, tmp_path_factory):
    """The tiny pipeline copied, with the library of the tiny dataset's training parts beside it."""
    path = tmp_path_factory.mktemp("g3lib") / "pipe"
    shutil.copytree(tiny_pipeline, path)
    pipe = MoCAPipeline.load(path)
    ComponentLibrary.build(pipe, PartDataset.load(tiny_data, with_meshes=True)).save(path)
    return path


def test_fitted_scale_is_exact_within_the_cap_and_capped_beyond_it():
    assert np.allclose(fitted_scale([2.0, 1.0, 1.5], [1.6, 1.0, 1.2]), [1.25, 1.0, 1.25])
    # within a factor sqrt(cap) of the geometric mean (4^(1/3)): exact
    assert np.allclose(fitted_scale([4.0, 1.0, 1.0], [1.0, 1.0, 1.0], max_distortion=8.0), [4.0, 1.0, 1.0])
    a = fitted_scale([4.0, 1.0, 1.0], [1.0, 1.0, 1.0], max_distortion=1.5)
    assert a.max() / a.min() == pytest.approx(1.5)
    centre = np.log(4.0) / 3  # clipped around the geometric mean of the wanted scales
    assert np.allclose(np.log(a), centre + np.log(1.5) / 2 * np.array([1, -1, -1]))
    assert fitted_scale([4.0, 1.0, 1.0], [1.0, 1.0, 1.0]).max() / fitted_scale([4.0, 1.0, 1.0], [1.0, 1.0, 1.0]).min() \
        == pytest.approx(MAX_DISTORTION)
    # a thin axis (a flat board) takes the mean scale instead of stretching a zero-thickness extent
    thin = fitted_scale([1.0, 1.0, 0.5], [1.0, 1.0, 1e-4])
    assert np.allclose(thin, 1.0)


def test_library_round_trip_and_components_are_the_training_parts(with_library, tiny_data):
    lib = ComponentLibrary.load(with_library)
    ds = PartDataset.load(tiny_data, with_meshes=True)
    assert len(lib) == len(ds.part_indices("train"))
    assert set(lib.category.tolist()) == set(ds.category[ds.shape_ids("train")].tolist())
    first = ds.part_indices("train")[0]
    # a component fitted into its own box is its training mesh (float16 box-frame vertices)
    mesh = lib.fit(0, ds.boxes[first])
    assert np.allclose(mesh.bounds, ds.part_mesh(int(first)).bounds, atol=2e-3)
    assert len(mesh.faces) == len(ds.part_mesh(int(first)).faces)


def test_a_generated_part_takes_a_near_component_of_its_category(with_library, tiny_data):
    lib = ComponentLibrary.load(with_library)
    ds = PartDataset.load(tiny_data)
    pipe = MoCAPipeline.load(with_library)
    # the latents of a real training part find that part first (k = 1), inside its category
    p = int(ds.part_indices("train")[3])
    with torch.no_grad():
        z = pipe.ae.encode(torch.from_numpy(to_canonical(ds.points[p:p + 1], ds.boxes[p:p + 1])).float())
    cat = CATEGORIES[int(lib.category[3])]
    chosen = lib.choose(z.numpy(), ds.boxes[p:p + 1], cat, seed=0, k=1)
    assert chosen.tolist() == [3]
    # two parts generated alike take one component (a chair's legs match); a request is seeded
    z2 = np.repeat(z.numpy(), 2, axis=0)
    boxes = np.repeat(ds.boxes[p:p + 1], 2, axis=0)
    a = lib.choose(z2, boxes, cat, seed=5)
    assert a[0] == a[1] and np.array_equal(a, lib.choose(z2, boxes, cat, seed=5))
    assert (lib.category[lib.choose(z2, boxes, cat, seed=1)] == CATEGORIES.index(cat)).all()


def test_the_pipeline_meshes_real_components_in_the_generated_boxes(with_library, tiny_pipeline):
    pipe = MoCAPipeline.load(with_library)
    assert pipe.library is not None and MoCAPipeline.load(tiny_pipeline).library is None
    g = pipe.sample("chair", 4, seed=0, steps=2)[0]
    meshes, credits = pipe.meshes(g)
    assert len(meshes) == 4 and all(isinstance(m, trimesh.Trimesh) and len(m.faces) for m in meshes)
    for m, box in zip(meshes, g.boxes, strict=True):  # centred in the box
        assert np.allclose(m.bounds.mean(0), box[:3], atol=1e-2 + 0.01 * box[3:].max())
    assert len(credits) >= 1
    points_meshes, none = pipe.meshes(g, "points")
    assert len(points_meshes) == 4 and none == []
    # without a library, retrieve falls back to the points
    assert MoCAPipeline.load(tiny_pipeline).meshes(g)[1] == []


def test_a_broken_library_is_one_clear_error(with_library, tmp_path):
    bad = tmp_path / "pipe"
    shutil.copytree(with_library, bad)
    (bad / LIBRARY_FILE).write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="corrupt component library"):
        MoCAPipeline.load(bad)
    arrays = dict(np.load(with_library / LIBRARY_FILE))
    arrays["source"] = arrays["source"] + 10_000
    np.savez(bad / LIBRARY_FILE, **arrays)
    with pytest.raises(CheckpointError, match="do not fit together"):
        MoCAPipeline.load(bad)


def test_cli_sample_writes_real_components_and_their_credits(tmp_path, capsys):
    from generation3d.cli import main

    out = tmp_path / "chair.glb"
    assert main(["sample", "--ckpt", "moca-furniture", "--category", "chair", "--parts", "4", "--steps", "4",
                 "--renderer", "matplotlib", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    credits = (tmp_path / "chair_ATTRIBUTION.csv").read_text().splitlines()
    assert credits[0] == "name,creator,license" and len(credits) >= 2 and "real components from" in said
    scene = trimesh.load(out, force="scene")
    assert len(scene.geometry) == 4 and sum(len(g.faces) for g in scene.geometry.values()) > 4 * 12
    # the components keep the archives' material colours (the shipped library has them)
    lib = MoCAPipeline.load("moca-furniture").library
    assert np.mean([lib.coloured(i) for i in range(len(lib))]) > 0.9
    # --decoder points: the decoded clouds meshed, no credits file
    out2 = tmp_path / "points.glb"
    assert main(["sample", "--ckpt", "moca-furniture", "--parts", "4", "--steps", "4", "--decoder", "points",
                 "--renderer", "matplotlib", "--out", str(out2)]) == 0
    assert not (tmp_path / "points_ATTRIBUTION.csv").exists()


def test_cli_sample_without_a_library_says_it_falls_back(tiny_pipeline, tmp_path, capsys):
    from generation3d.cli import main

    assert main(["sample", "--ckpt", str(tiny_pipeline), "--category", "chair", "--parts", "3", "--steps", "2",
                 "--renderer", "matplotlib", "--out", str(tmp_path / "c.glb")]) == 0
    assert "no component library" in capsys.readouterr().out


def test_face_colours_survive_decimation():
    from generation3d.library import decimate

    sphere = trimesh.creation.icosphere(5)
    colours = np.where(sphere.triangles_center[:, 2:3] > 0, [200, 30, 30], [30, 30, 200]).astype(np.uint8)
    sphere.visual.face_colors = np.hstack([colours, np.full((len(colours), 1), 255, np.uint8)])
    small = decimate(sphere, 400)
    assert len(small.faces) <= 400
    top = small.visual.face_colors[small.triangles_center[:, 2] > 0.3, :3]
    bottom = small.visual.face_colors[small.triangles_center[:, 2] < -0.3, :3]
    assert (top[:, 0] > 150).all() and (bottom[:, 2] > 150).all()
