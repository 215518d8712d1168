"""Procedural dataset, user mesh loading and its errors, export round trip."""

import numpy as np
import pytest
import trimesh

from common.errors import DataError, InputError
from generation3d.data import CATEGORIES, PartDataset
from generation3d.export import export_meshes, shape_meshes
from generation3d.geometry import from_canonical, to_canonical
from generation3d.meshes import check_mesh, load_part_mesh
from generation3d.shapes import make_scene, make_shape


@pytest.mark.parametrize("category", ["chair", "table", "shelf", "lamp"])
def test_objects_have_parts_points_inside_boxes_and_are_normalised(category):
    s = make_shape(category, np.random.default_rng(0), n_points=32)
    assert len(s.parts) >= 2
    pts, boxes = s.points, s.boxes
    lo, hi = boxes[:, None, :3] - boxes[:, None, 3:] / 2, boxes[:, None, :3] + boxes[:, None, 3:] / 2
    assert ((pts >= lo - 1e-5) & (pts <= hi + 1e-5)).all()
    assert np.isclose(np.abs(np.concatenate([lo, hi])).max(), 1.0, atol=1e-5)


def test_part_counts_vary_and_scenes_reach_many_parts_without_collisions():
    rng = np.random.default_rng(1)
    counts = {len(make_shape("chair", rng, 8).parts) for _ in range(10)}
    assert len(counts) > 2
    parts = make_scene(np.random.default_rng(0), min_parts=256)
    assert len(parts) >= 256
    # object footprints (xy boxes of each object's parts) never overlap
    objs = {}
    for p in parts:
        objs.setdefault(p.name.split("/")[0], []).append(p.mesh.bounds)
    fps = [(np.min([b[0] for b in bs], 0), np.max([b[1] for b in bs], 0)) for bs in objs.values()]
    for i in range(len(fps)):
        for j in range(i + 1, len(fps)):
            (lo1, hi1), (lo2, hi2) = fps[i], fps[j]
            overlap = np.minimum(hi1[:2], hi2[:2]) - np.maximum(lo1[:2], lo2[:2])
            assert (overlap <= 1e-9).any()


def test_dataset_round_trip_and_canonical_frame(tiny_data):
    ds = PartDataset.load(tiny_data)
    assert len(ds) == 4 * 4 + 1 and set(ds.split.tolist()) == {0, 1}
    assert max(ds.n_parts(i) for i in range(len(ds))) >= 20
    c = to_canonical(ds.points, ds.boxes)
    assert np.abs(c).max() <= 1.0 + 1e-4
    np.testing.assert_allclose(from_canonical(c, ds.boxes), ds.points, atol=1e-5)


def test_missing_or_corrupt_dataset_errors(tmp_path):
    with pytest.raises(DataError, match="no dataset"):
        PartDataset.load(tmp_path)
    (tmp_path / "parts.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="corrupt"):
        PartDataset.load(tmp_path)


def test_unknown_category():
    with pytest.raises(InputError, match="unknown category 'spaceship'"):
        make_shape("spaceship", np.random.default_rng(0))
    assert "chair" in CATEGORIES
    with pytest.raises(InputError, match="no procedural maker for 'sofa'"):  # a real-furniture category
        make_shape("sofa", np.random.default_rng(0))
    # indices are stored in datasets and checkpoints: the first five never move
    assert CATEGORIES[:5] == ("chair", "table", "shelf", "lamp", "scene")


def test_export_glb_round_trip_keeps_parts_and_boxes(tmp_path):
    s = make_shape("table", np.random.default_rng(3), n_points=128)
    meshes = shape_meshes(s.points, s.boxes)
    for ext in (".glb", ".obj", ".ply"):
        path = export_meshes(meshes, tmp_path / f"t{ext}")
        assert path.stat().st_size > 0
    back = load_part_mesh(tmp_path / "t.glb", "table", n_points=64)
    assert len(back.parts) == len(s.parts)
    # boxes match after the loader's own normalisation (input was already normalised)
    np.testing.assert_allclose(np.sort(back.boxes[:, 3]), np.sort(np.array([m.extents[0] for m in meshes])), atol=1e-4)
    obj = load_part_mesh(tmp_path / "t.obj", "table", n_points=16)
    assert len(obj.parts) == len(s.parts)
    colours = {tuple(m.visual.face_colors[0]) for m in meshes}
    assert len(colours) == len(meshes)


def test_loader_errors_empty_and_non_manifold(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_part_mesh(tmp_path / "nope.glb")
    empty = trimesh.Trimesh(vertices=np.zeros((3, 3)), faces=np.array([[0, 1, 2]]))
    with pytest.raises(DataError, match="zero surface area"):
        check_mesh(empty, "flat")
    # three triangles sharing one edge: non-manifold
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]], float)
    fan = trimesh.Trimesh(vertices=v, faces=np.array([[0, 1, 2], [0, 1, 3], [0, 1, 4]]), process=False)
    with pytest.raises(DataError, match="non-manifold"):
        check_mesh(fan, "fan")
    bad = tmp_path / "bad.glb"
    bad.write_bytes(b"garbage")
    with pytest.raises(DataError):
        load_part_mesh(bad)
    with pytest.raises(InputError, match="unsupported export format"):
        export_meshes([trimesh.creation.box()], tmp_path / "x.stl")
    assert not (tmp_path / "x.stl").exists()


def test_empty_parts_and_files_with_bad_parts_are_rejected(tmp_path):
    from generation3d.data import Part
    from generation3d.export import points_to_mesh

    with pytest.raises(DataError, match="empty mesh"):
        check_mesh(trimesh.Trimesh(vertices=np.zeros((0, 3)), faces=np.zeros((0, 3), int)), "nothing")
    with pytest.raises(DataError, match="no points"):
        Part("ghost", trimesh.Trimesh(vertices=np.zeros((0, 3)), faces=np.zeros((0, 3), int))).finalize(16, 0)
    with pytest.raises(InputError, match="no points"):
        points_to_mesh(np.zeros((0, 3)))
    # a GLB whose second node is non-manifold: the loader names that part
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]], float)
    fan = trimesh.Trimesh(vertices=v, faces=np.array([[0, 1, 2], [0, 1, 3], [0, 1, 4]]), process=False)
    scene = trimesh.Scene()
    scene.add_geometry(trimesh.creation.box(), node_name="good", geom_name="good")
    scene.add_geometry(fan, node_name="fan_part", geom_name="fan_part")
    path = tmp_path / "bad_part.glb"
    path.write_bytes(scene.export(file_type="glb"))
    with pytest.raises(DataError, match="fan_part.*non-manifold"):
        load_part_mesh(path)


def test_alpha_shape_keeps_four_legs_apart_and_flat_clouds_fall_back():
    from generation3d.export import hull_or_box, points_to_mesh

    rng = np.random.default_rng(0)
    legs = []
    for cx, cy in [(-1, -1), (1, -1), (-1, 1), (1, 1)]:  # one part of four thin legs
        t, z = rng.uniform(0, 2 * np.pi, 64), rng.uniform(0, 2, 64)
        legs.append(np.stack([cx + 0.08 * np.cos(t), cy + 0.08 * np.sin(t), z], 1))
    legs = np.concatenate(legs)
    alpha, hull = points_to_mesh(legs), hull_or_box(legs)
    assert alpha.area < 0.3 * hull.area  # the hull spans the legs; the alpha shape does not
    centres = alpha.triangles_center[:, :2]
    assert np.all(np.abs(np.abs(centres) - 1).max(1) < 0.3)  # every face lies on a leg, none spans two
    flat = np.c_[rng.uniform(-1, 1, (50, 2)), np.zeros(50)]  # no volume: the box fallback
    assert len(points_to_mesh(flat, np.array([0, 0, 0, 2, 2, 0.0])).faces) == 12
