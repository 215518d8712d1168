"""Real-shape sources: furniture types, the y-up -> z-up frame, part splitting and merging, the
model-disjoint split, the Sweet Home 3D loader on a hand-made .sh3f archive and the user-folder
reader in each layout."""

import csv
import json
import zipfile

import numpy as np
import pytest
import trimesh

from common.errors import DataError
from generation3d.cli import main as moca_main
from generation3d.data import CATEGORIES, SPLITS, Part, PartDataset
from generation3d.sources import (
    SkipShape,
    build_parts,
    build_real_dataset,
    finish_shape,
    furniture_type,
    load_folder,
    load_sweethome3d,
    model_disjoint_split,
    sweethome3d_matrix,
    transform_parts,
)


def _box(centre, size) -> trimesh.Trimesh:
    m = trimesh.creation.box(extents=size)
    m.apply_translation(centre)
    return m


def _obj(groups: dict[str, list[trimesh.Trimesh]], keyword: str = "o") -> str:
    """OBJ text with one ``o``/``g`` block per group (several meshes in a block = one group)."""
    lines, base = ["mtllib missing.mtl"], 1  # a material file that is not there must not matter
    for name, meshes in groups.items():
        lines.append(f"{keyword} {name}")
        lines.append("usemtl wood")
        for m in meshes:
            lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in m.vertices]
            lines += [f"f {a + base} {b + base} {c + base}" for a, b, c in m.faces]
            base += len(m.vertices)
    return "\n".join(lines) + "\n"


def _extents(shape) -> np.ndarray:
    lo = np.min([p.mesh.bounds[0] for p in shape.parts], 0)
    hi = np.max([p.mesh.bounds[1] for p in shape.parts], 0)
    np.testing.assert_allclose((lo + hi) / 2, 0, atol=1e-6)  # centred like the procedural shapes
    return hi - lo


# ---------------------------------------------------------------- furniture types
@pytest.mark.parametrize("name,tags,room,expected", [
    ("Desk lamp", (), "Lights", "lamp"),
    ("Bedside table", ("Nightstand",), "Bedroom", "table"),
    ("Sofa 2 seats", ("Couch",), "Living room", "sofa"),
    ("Opened convertible sofa BZ", ("Bed",), "Bedroom", "sofa"),
    ("Chair with cushion", ("Seat",), "Living room", "chair"),
    ("Bar stool", (), "Kitchen", "chair"),
    ("Glass door cabinet", (), "Kitchen", "shelf"),
    ("Bunk bed", (), "Bedroom", "bed"),
    ("Workbench", ("Table",), "Miscellaneous", "table"),  # head noun unknown: the tag decides
    ("Table fan", ("Appliance",), "Miscellaneous", None),  # the head noun is "fan"
    ("Chest freezer", ("Fridge",), "Kitchen", None),
    ("Sleeping bag", ("Bed",), "Bedroom", None),  # the Bed tag alone does not make a bed
    ("Window with shelf", (), "Doors and windows", None),
    ("Rocking chair", ("Toy",), "Bedroom", None),
    ("Contemporary living room", ("Shelves",), "Living room", None),
])
def test_furniture_type_rule(name, tags, room, expected):
    assert furniture_type(name, tags, room) == expected


# ---------------------------------------------------------------- frame
def test_y_up_box_ends_z_up_centred_with_largest_half_extent_one():
    # y-up model: 2 wide (x), 4 tall (y), 1 deep (z), somewhere off the origin
    parts = [Part("body", _box((5.0, 7.0, -3.0), (2.0, 4.0, 1.0)))]
    shape = finish_shape("shelf", transform_parts(parts, sweethome3d_matrix(parts)), n_points=16, seed=0)
    # z-up: x = width, y = depth, z = height; scaled so the largest half-extent (2) becomes 1
    np.testing.assert_allclose(_extents(shape), [1.0, 0.5, 2.0], atol=1e-6)
    assert shape.points.shape == (1, 16, 3) and np.abs(shape.points).max() <= 1 + 1e-6


def test_catalogue_size_and_model_rotation_are_applied_before_the_frame_change():
    # a unit cube fitted to width 100, depth 50, height 200 cm
    parts = [Part("cube", _box((0, 0, 0), (1.0, 1.0, 1.0)))]
    m = sweethome3d_matrix(parts, (), (100.0, 50.0, 200.0))
    np.testing.assert_allclose(_extents(finish_shape("shelf", transform_parts(parts, m), 8, 0)), [1.0, 0.5, 2.0],
                               atol=1e-6)
    # modelRotation of 90 degrees about y swaps the model's x and z before anything else
    parts = [Part("body", _box((0, 0, 0), (2.0, 1.0, 4.0)))]
    m = sweethome3d_matrix(parts, (0, 0, 1, 0, 1, 0, -1, 0, 0))
    np.testing.assert_allclose(_extents(finish_shape("shelf", transform_parts(parts, m), 8, 0)), [2.0, 1.0, 0.5],
                               atol=1e-6)
    # a missing catalogue size leaves the proportions alone
    parts = [Part("body", _box((0, 0, 0), (2.0, 4.0, 1.0)))]
    m = sweethome3d_matrix(parts, (), (float("nan"), 50.0, 200.0))
    np.testing.assert_allclose(_extents(finish_shape("shelf", transform_parts(parts, m), 8, 0)), [1.0, 0.5, 2.0],
                               atol=1e-6)


# ---------------------------------------------------------------- parts
def test_single_group_with_two_disjoint_boxes_becomes_two_parts():
    both = trimesh.util.concatenate([_box((0, 0, 0), (1, 1, 1)), _box((3, 0, 0), (1, 2, 1))])
    parts = build_parts([("table", both)], max_parts=8)
    assert len(parts) == 2
    assert sorted(round(float(p.mesh.extents[1]), 6) for p in parts) == [1.0, 2.0]
    assert all(len(p.mesh.faces) == 12 for p in parts)


def test_tiny_group_is_merged_into_the_nearest_part():
    seat = _box((0, 0, 1.0), (2.0, 2.0, 0.2))
    legs = [_box((x, y, 0.5), (0.2, 0.2, 1.0)) for x in (-0.9, 0.9) for y in (-0.9, 0.9)]
    screw = _box((0.9, 0.9, 0.05), (0.02, 0.02, 0.02))  # touches the last leg only; far below 5 % of the size
    meshes = [("seat", seat)] + [(f"leg{i}", m) for i, m in enumerate(legs)] + [("screw", screw)]
    parts = build_parts(meshes, max_parts=8)
    assert [p.name for p in parts] == ["seat", "leg0", "leg1", "leg2", "leg3"]
    assert [len(p.mesh.faces) for p in parts] == [12, 12, 12, 12, 24]  # leg3 + the screw
    # a single group of one seat and a tiny knob stays one part (splitting gives only 1 non-tiny part)
    knob = _box((0, 0, 1.11), (0.02, 0.02, 0.02))
    assert len(build_parts([("seat", trimesh.util.concatenate([seat, knob]))], max_parts=8)) == 1


def test_unusable_models_raise_counted_reasons():
    empty = trimesh.Trimesh(np.zeros((3, 3)), np.zeros((0, 3), int))
    flat = trimesh.Trimesh(np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], float), np.array([[0, 1, 2]]))
    for meshes, reason in [([("a", empty)], "no faces"), ([("a", flat)], "zero area"), ([], "no faces")]:
        with pytest.raises(SkipShape) as exc:
            build_parts(meshes, max_parts=8)
        assert exc.value.reason == reason
    # empty groups are dropped from an otherwise good model
    assert len(build_parts([("a", empty), ("b", _box((0, 0, 0), (1, 1, 1)))], max_parts=8)) == 1
    many = [(f"p{i}", _box((2.0 * i, 0, 0), (1, 1, 1))) for i in range(5)]
    with pytest.raises(SkipShape, match="too many parts"):
        build_parts(many, max_parts=4)


def test_model_disjoint_split_keeps_groups_together_and_is_seeded():
    cats = ["chair"] * 20 + ["lamp"] * 3 + ["bed"] * 2
    groups = [f"c{i // 2}" for i in range(20)] + ["l0", "l1", "l2", "b0", "b1"]  # chairs come in identical pairs
    split = model_disjoint_split(cats, groups, seed=3)
    for g in set(groups):
        assert len({int(s) for s, gg in zip(split, groups, strict=True) if gg == g}) == 1
    chair_groups = split[:20:2]
    assert (chair_groups == SPLITS["test"]).sum() == 2 and (chair_groups == SPLITS["val"]).sum() == 1  # of 10
    assert sorted(split[20:23].tolist()) == [0, 1, 2]  # 3 groups: one each
    assert (split[23:] == SPLITS["train"]).all()  # too few groups to hold any out
    assert (model_disjoint_split(cats, groups, seed=3) == split).all()
    assert any((model_disjoint_split(cats, groups, seed=s) != split).any() for s in range(4, 8))


# ---------------------------------------------------------------- Sweet Home 3D archive
CATALOG = """id=Test
provider=tester
id#1=Test#chair
name#1=Oak chair
tags#1=Seat
category#1=Living room
icon#1=/t/chair.png
model#1=/t/chair/chair.obj
width#1=40
depth#1=40
height#1=80
creator#1=Alice
id#2=Test#cup
name#2=Cup
category#2=Kitchen
icon#2=/t/cup.png
model#2=/t/cup/cup.obj
id#3=Test#table
name#3=Round table
category#3=Living room
icon#3=/t/table.png
model#3=/t/table/table.obj
creator#3=Bob
id#4=Test#lamp
name#4=Lamp
category#4=Lights
icon#4=/t/lamp.png
model#4=/t/lamp/lamp.obj
id#5=Test#chair2
name#5=Chair
category#5=Office
icon#5=/t/chair.png
model#5=/t/chair2/chair.obj
width#5=50
depth#5=50
height#5=100
modelRotation#5=0 0 1 0 1 0 -1 0 0
creator#5=Alice
"""


def _chair_obj() -> str:
    """A y-up chair (cm): seat at height 45, four legs, a back at -z (its back), a tiny screw."""
    legs = [_box((x, 22.5, z), (4, 45, 4)) for x in (-18, 18) for z in (-18, 18)]
    return _obj({"sit_Plane": [_box((0, 46, 0), (40, 2, 40))], "Legs_Cube": legs,
                 "Back_Cube": [_box((0, 66, -19), (40, 38, 2))], "screw": [_box((18, 1, 18), (0.5, 0.5, 0.5))]})


def write_archive(path, models: dict[str, str]) -> None:
    """A ``.sh3f``-style zip at ``path``: ``CATALOG``, an icon per catalogue item and ``models``
    (path under ``t/`` -> OBJ text)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("PluginFurnitureCatalog.properties", CATALOG)
        for name in ("chair", "cup", "table", "lamp"):
            zf.writestr(f"t/{name}.png", b"png")
        for name, text in models.items():
            zf.writestr(f"t/{name}", text)


@pytest.fixture
def furniture(tmp_path):
    root = tmp_path / "furniture"
    root.mkdir()
    write_archive(root / "BlendSwap-CC-0.sh3f", {
        "chair/chair.obj": _chair_obj(),
        "chair2/chair.obj": _chair_obj(),  # the same model again: same split
        "cup/cup.obj": _obj({"cup": [_box((0, 0, 0), (1, 1, 1))]}),
        "table/table.obj": "v 0 0 0\nv 1 0 0\nv 0 1 0\n",  # vertices, no faces
        "lamp/lamp.obj": "v 0 0 0\nv 1 0 0\nv 2 0 0\nf 1 2 3\n",  # one degenerate face
    })
    (root / "Broken.sh3f").write_bytes(b"PK\x03\x04 truncated")
    return root


def test_sweethome3d_loader_on_a_hand_made_archive(furniture):
    real = load_sweethome3d(furniture, n_points=32, max_parts=8, seed=0)
    assert [r["name"] for r in real.records] == ["Oak chair", "Chair"]
    assert dict(real.skips.counts) == {"unreadable archive": 1, "unknown type": 1, "no faces": 1, "zero area": 1}
    chair = real.shapes[0]
    assert chair.category == "chair" and real.records[0]["creator"] == "Alice"
    assert real.records[0]["license"] == "CC0" and real.records[0]["type"] == "chair"
    assert sorted(p.name for p in chair.parts) == ["Back_Cube", "Legs_Cube", "sit_Plane"]  # screw merged
    # z-up: 40 x 40 x 80 cm, so x and y half-extents 0.5 and z 1; the back (y-up -z) now at +y
    np.testing.assert_allclose(_extents(chair), [1.0, 1.0, 2.0], atol=1e-5)
    back = next(p for p in chair.parts if p.name == "Back_Cube")
    assert back.box[1] > 0.4 and back.box[2] > 0.4
    # the second item: the same model under modelRotation (row-major R, v' = R v: x' = z, z' = -x), so its
    # back (z = -19 cm) moves to x = -19 cm
    back2 = next(p for p in real.shapes[1].parts if p.name == "Back_Cube")
    assert back2.box[0] < -0.4 and abs(back2.box[1]) < 0.1
    assert real.split[0] == real.split[1]  # identical model files share a split


def test_build_real_dataset_writes_the_format_attribution_and_skips(furniture, tmp_path):
    out = tmp_path / "ds"
    build_real_dataset(out, "sweethome3d", n_points=16, max_parts=8, seed=0, furniture_dir=furniture)
    ds = PartDataset.load(out)
    assert len(ds) == 2 and [CATEGORIES[c] for c in ds.category] == ["chair", "chair"]
    assert ds.points.shape == (6, 16, 3) and ds.boxes.shape == (6, 6)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"] == "sweethome3d" and meta["n_skipped"] == 4 and meta["skipped"]["unknown type"] == 1
    attribution = list(csv.DictReader(open(out / "ATTRIBUTION.csv", encoding="utf-8")))
    assert [(r["name"], r["creator"], r["license"]) for r in attribution] == [
        ("Oak chair", "Alice", "CC0"), ("Chair", "Alice", "CC0")]
    skipped = list(csv.DictReader(open(out / "skipped.csv", encoding="utf-8")))
    assert sorted(r["reason"] for r in skipped) == ["no faces", "unknown type", "unreadable archive", "zero area"]
    shapes = list(csv.DictReader(open(out / "shapes.csv", encoding="utf-8")))
    assert [r["split"] for r in shapes] == ["train", "train"] and shapes[0]["n_parts"] == "3"


# ---------------------------------------------------------------- a user's folder
def _write_glb(path, parts: dict[str, trimesh.Trimesh]):
    scene = trimesh.Scene()
    for name, m in parts.items():
        scene.add_geometry(m, node_name=name, geom_name=name)
    path.write_bytes(scene.export(file_type="glb"))


@pytest.fixture
def user_folder(tmp_path):
    root = tmp_path / "mine"
    (root / "chair").mkdir(parents=True)
    (root / "table").mkdir()
    (root / "lamp" / "lamp1").mkdir(parents=True)
    (root / "spaceship").mkdir()
    # OBJ groups (g), y-up: a seat above a leg
    (root / "chair" / "c1.obj").write_text(_obj({"seat": [_box((0, 1, 0), (1, 0.1, 1))],
                                                 "leg": [_box((0, 0.5, 0), (0.1, 1, 0.1))]}, keyword="g"))
    (root / "chair" / "empty.obj").write_text("v 0 0 0\nv 1 0 0\n")
    # GLB nodes
    _write_glb(root / "table" / "t1.glb", {"top": _box((0, 0, 1), (2, 1, 0.1)), "leg_a": _box((-0.9, 0, 0.5), (0.1, 0.1, 1)),
                                           "leg_b": _box((0.9, 0, 0.5), (0.1, 0.1, 1))})
    # one PLY per part in a folder per shape
    _box((0, 0, 0.05), (0.5, 0.5, 0.1)).export(root / "lamp" / "lamp1" / "base.ply")
    _box((0, 0, 0.6), (0.05, 0.05, 1.0)).export(root / "lamp" / "lamp1" / "pole.ply")
    (root / "spaceship" / "x.obj").write_text(_obj({"hull": [_box((0, 0, 0), (1, 1, 1))]}))
    (root / "notes.txt").write_text("not a shape\n")
    return root


def test_user_folder_with_a_subfolder_per_category(user_folder):
    real = load_folder(user_folder, n_points=16, max_parts=8, seed=0, up="y")
    got = {r["name"]: (r["type"], r["n_parts"]) for r in real.records}
    assert got == {"c1": ("chair", 2), "t1": ("table", 3), "lamp1": ("lamp", 2)}
    assert dict(real.skips.counts) == {"no category": 1, "unknown category": 1, "no faces": 1}
    chair = real.shapes[[r["name"] for r in real.records].index("c1")]
    assert sorted(p.name for p in chair.parts) == ["leg", "seat"]
    seat = next(p for p in chair.parts if p.name == "seat")
    assert seat.box[2] > 0.9 and seat.box[5] < seat.box[3]  # y-up input: the seat is on top and flat in z
    lamp = real.shapes[[r["name"] for r in real.records].index("lamp1")]
    assert sorted(p.name for p in lamp.parts) == ["base", "pole"]


def test_user_folder_with_a_category_csv(user_folder, tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    (root / "a.obj").write_bytes((user_folder / "chair" / "c1.obj").read_bytes())
    (root / "b.glb").write_bytes((user_folder / "table" / "t1.glb").read_bytes())
    (root / "categories.csv").write_text("shape,category\na.obj,chair\nb.glb,table\nc.obj,chair\nd.obj,car\n")
    real = load_folder(root, n_points=16, max_parts=8)
    assert [(r["name"], r["type"]) for r in real.records] == [("a", "chair"), ("b", "table")]
    assert dict(real.skips.counts) == {"missing file": 1, "unknown category": 1}
    (root / "categories.csv").write_text("file,kind\na.obj,chair\n")
    with pytest.raises(DataError, match="shape,category"):
        load_folder(root)


def test_folder_without_usable_shapes_is_one_error(tmp_path):
    (tmp_path / "chair").mkdir()
    (tmp_path / "chair" / "e.obj").write_text("v 0 0 0\n")
    with pytest.raises(DataError, match="no usable shapes.*no faces 1"):
        load_folder(tmp_path)
    with pytest.raises(DataError, match="not found"):
        load_folder(tmp_path / "missing")


def test_cli_build_data_from_a_folder(user_folder, tmp_path, capsys):
    out = tmp_path / "ds"
    assert moca_main(["build-data", "--source", str(user_folder), "--up", "y", "--points", "16",
                      "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "skipped 3" in text and "wrote 3 shapes" in text
    assert len(PartDataset.load(out)) == 3 and not (out / "ATTRIBUTION.csv").exists()
    assert moca_main(["build-data", "--source", str(user_folder), "--out", str(out)]) == 2  # exists
    assert moca_main(["build-data", "--source", str(user_folder), "--out", str(user_folder / "ds")]) == 2
