"""Scene composer: rooms of real-sized items with no overlapping footprints, everything inside the
room, chairs facing their tables, wall items with their backs on a wall, part counts in range,
determinism, and ``moca build-data --source scenes`` on a hand-made .sh3f archive."""

import csv
import json
import zipfile

import numpy as np
import pytest
import trimesh

from common.errors import DataError
from generation3d.cli import main as moca_main
from generation3d.data import CATEGORIES, SPLITS, PartDataset
from generation3d.scenes import CHAIR_GAP, SceneItem, compose_room, compose_scenes
from tests.generation3d.test_sources import _box, _obj


def _item(key, kind, parts: dict[str, tuple]) -> SceneItem:
    """A hand-made item in cm (front towards -y) from ``{part: (centre, size)}``."""
    return SceneItem(key, key, kind, [(n, _box(c, s)) for n, (c, s) in parts.items()])


def _chair(w=45.0):
    legs = {f"leg{i}": ((sx * (w / 2 - 2), sy * 18, 22.5), (4, 4, 45)) for i, (sx, sy) in
            enumerate([(-1, -1), (1, -1), (-1, 1), (1, 1)])}
    return _item(f"chair{w:.0f}", "chair", {**legs, "seat": ((0, 0, 46), (w, 40, 2)), "back": ((0, 19, 70), (w, 2, 46))})


def _pools():
    table = _item("table", "table", {"top": ((0, 0, 73), (140, 80, 4)), "leg0": ((-60, -30, 35.5), (6, 6, 71)),
                                      "leg1": ((60, 30, 35.5), (6, 6, 71))})
    shelf = _item("shelf", "shelf", {"side0": ((-40, 0, 90), (2, 35, 180)), "side1": ((40, 0, 90), (2, 35, 180)),
                                      "board": ((0, 0, 90), (78, 35, 2)), "back": ((0, 17, 90), (78, 1, 180))})
    sofa = _item("sofa", "sofa", {"seat": ((0, -5, 22), (200, 80, 44)), "back": ((0, 40, 55), (200, 10, 70))})
    bed = _item("bed", "bed", {"mattress": ((0, 0, 25), (160, 190, 50)), "headboard": ((0, 97, 60), (160, 6, 120))})
    lamp = _item("lamp", "lamp", {"base": ((0, 0, 2), (30, 30, 4)), "pole": ((0, 0, 80), (3, 3, 150)),
                                   "shade": ((0, 0, 160), (40, 40, 30))})
    return {"chair": [_chair(), _chair(55)], "table": [table], "shelf": [shelf], "sofa": [sofa], "bed": [bed],
            "lamp": [lamp]}


def _item_bounds(room):
    """Per placement: xy bounds of its placed meshes, computed from the meshes themselves."""
    out = []
    for p in room.placements:
        ms = [m for _, m in p.meshes()]
        lo, hi = np.min([m.bounds[0] for m in ms], 0), np.max([m.bounds[1] for m in ms], 0)
        out.append((lo, hi))
    return out


@pytest.mark.parametrize("seed,lo,hi", [(0, 32, 32), (1, 64, 64), (2, 128, 128), (3, 256, 300), (4, 32, 256)])
def test_footprints_never_overlap_and_stay_inside_the_room(seed, lo, hi):
    room = compose_room(_pools(), np.random.default_rng(seed), lo, hi)
    assert lo <= room.n_parts <= hi and len(room.parts()) == room.n_parts
    bounds = _item_bounds(room)
    w, d = room.width_cm / 2, room.depth_cm / 2
    for a_lo, a_hi in bounds:
        assert a_lo[0] >= -w - 1e-6 and a_hi[0] <= w + 1e-6 and a_lo[1] >= -d - 1e-6 and a_hi[1] <= d + 1e-6
        assert abs(a_lo[2]) < 1e-6  # standing on the floor
    for i in range(len(bounds)):
        for j in range(i):
            (a_lo, a_hi), (b_lo, b_hi) = bounds[i], bounds[j]
            inter = np.minimum(a_hi[:2], b_hi[:2]) - np.maximum(a_lo[:2], b_lo[:2])
            assert not (inter > 1e-6).all(), f"items {i} and {j} overlap by {inter}"


def test_chairs_face_a_table_and_wall_items_back_onto_a_wall():
    room = compose_room(_pools(), np.random.default_rng(5), 150, 200)
    tables = [p for p in room.placements if p.item.type == "table"]
    chairs = [p for p in room.placements if p.item.type == "chair"]
    assert tables and chairs
    for c in chairs:
        parts = dict(c.meshes())
        seat, back = parts["seat"].bounds.mean(0)[:2], parts["back"].bounds.mean(0)[:2]
        cx0, cx1, cy0, cy1 = c.footprint

        def gap(t, c=(cx0, cx1, cy0, cy1)):
            x0, x1, y0, y1 = t.footprint
            return max(x0 - c[1], c[0] - x1, y0 - c[3], c[2] - y1)

        table = min(tables, key=gap)
        assert gap(table) == pytest.approx(CHAIR_GAP, abs=1e-6)
        centre = np.array([table.x, table.y])
        assert np.linalg.norm(back - centre) > np.linalg.norm(seat - centre)  # it faces the table
    w, d = room.width_cm / 2, room.depth_cm / 2
    for p in room.placements:
        if p.item.type not in ("shelf", "sofa", "bed"):
            continue
        back_part = {"shelf": "back", "sofa": "back", "bed": "headboard"}[p.item.type]
        lo, hi = dict(p.meshes())[back_part].bounds
        # the back part touches one of the four walls
        assert min(abs(hi[1] - d), abs(lo[1] + d), abs(hi[0] - w), abs(lo[0] + w)) < 1e-6


def test_composition_is_deterministic_per_seed():
    def layout(seed):
        room = compose_room(_pools(), np.random.default_rng(seed), 40, 120)
        return [(p.item.key, round(p.x, 6), round(p.y, 6), p.turns) for p in room.placements], room.width_cm

    assert layout(7) == layout(7)
    assert layout(7) != layout(8)


def test_compose_scenes_uses_only_the_furniture_of_each_scene_split():
    pools = _pools()
    items = [it for its in pools.values() for it in its]
    test_item = _item("test_shelf", "shelf", {"side": ((0, 0, 50), (60, 30, 100))})
    items.append(test_item)
    split = np.array([SPLITS["train"]] * (len(items) - 1) + [SPLITS["test"]])
    with pytest.raises(DataError, match="val"):  # no val furniture at all
        compose_scenes(items, split, 10, 10, 20, n_points=8)
    split_with_val = split.copy()
    split_with_val[3] = SPLITS["val"]  # the shelf
    shapes, scene_split, rooms = compose_scenes(items, split_with_val, 10, 4, 20, n_points=8)
    assert sorted(scene_split.tolist()) == [0] * 7 + [1] * 2 + [2]
    for shape, s, room in zip(shapes, scene_split, rooms, strict=True):
        keys = {p.item.key for p in room.placements}
        if s == SPLITS["test"]:
            assert keys == {"test_shelf"}
        else:
            assert "test_shelf" not in keys
        assert shape.category == "scene" and len(shape.parts) == room.n_parts
        assert np.abs(np.concatenate([p.points for p in shape.parts])).max() <= 1 + 1e-5  # normalised


def test_too_few_parts_possible_is_an_error():
    tiny = {"lamp": [_item("lamp", "lamp", {"base": ((0, 0, 5), (400, 400, 10))})]}  # 4 m x 4 m, one part
    with pytest.raises(DataError, match="cannot reach"):
        compose_room(tiny, np.random.default_rng(0), 200, 300)


# ---------------------------------------------------------------- moca build-data --source scenes
ITEMS = {  # name: (type-giving name, OBJ groups as (centre, size) in y-up cm)
    "chair": ("Oak chair", {"sit": ((0, 46, 0), (45, 2, 40)), "legs": ((0, 22, 0), (40, 44, 35)),
                            "back": ((0, 70, -19), (45, 46, 2))}),
    "table": ("Dining table", {"top": ((0, 73, 0), (140, 4, 80)), "legs": ((0, 35, 0), (130, 70, 70))}),
    "shelf": ("Bookcase", {"frame": ((0, 90, 0), (80, 180, 35)), "back": ((0, 90, -17), (80, 180, 1))}),
    "sofa": ("Sofa", {"seat": ((0, 22, 5), (200, 44, 80)), "back": ((0, 55, -40), (200, 70, 10))}),
    "bed": ("Double bed", {"mattress": ((0, 25, 0), (160, 50, 190)), "head": ((0, 60, -97), (160, 120, 6))}),
    "lamp": ("Floor lamp", {"base": ((0, 2, 0), (30, 4, 30)), "shade": ((0, 150, 0), (40, 30, 40))}),
}


@pytest.fixture
def furniture(tmp_path):
    """Three slightly different models per type (so each type has a train, val and test model)."""
    root = tmp_path / "furniture"
    root.mkdir()
    lines, members = ["id=Test"], {}
    i = 0
    for key, (name, groups) in ITEMS.items():
        for v in range(3):
            i += 1
            scale = 1 + 0.05 * v
            obj = _obj({g: [_box(np.array(c) * scale, np.array(s) * scale)] for g, (c, s) in groups.items()})
            members[f"t/{key}{v}/m.obj"] = obj
            members[f"t/{key}{v}.png"] = b"png"
            w, h, d = (np.max([np.array(c) + np.array(s) / 2 for c, s in groups.values()], 0)
                       - np.min([np.array(c) - np.array(s) / 2 for c, s in groups.values()], 0)) * scale
            lines += [f"id#{i}=Test#{key}{v}", f"name#{i}={name}", f"category#{i}=Living room",
                      f"icon#{i}=/t/{key}{v}.png", f"model#{i}=/t/{key}{v}/m.obj", f"width#{i}={w:.1f}",
                      f"depth#{i}={d:.1f}", f"height#{i}={h:.1f}", f"creator#{i}=Maker{i}"]
    with zipfile.ZipFile(root / "Contributions.sh3f", "w") as zf:
        zf.writestr("PluginFurnitureCatalog.properties", "\n".join(lines) + "\n")
        for m, data in members.items():
            zf.writestr(m, data)
    return root


def test_cli_build_scenes_writes_the_dataset_csv_and_attribution(furniture, tmp_path, capsys):
    out = tmp_path / "scenes"
    args = ["build-data", "--source", "scenes", "--furniture-dir", str(furniture), "--scenes", "5",
            "--scene-parts", "20", "--scene-max-parts", "40", "--points", "8", "--out", str(out)]
    assert moca_main(args) == 0
    ds = PartDataset.load(out)
    assert len(ds) == 5 and (ds.category == CATEGORIES.index("scene")).all()
    assert all(20 <= ds.n_parts(i) <= 40 for i in range(5))
    assert sorted(ds.split.tolist()) == [0, 0, 0, 1, 2]
    rows = list(csv.DictReader(open(out / "scenes.csv", encoding="utf-8")))
    assert [int(r["n_parts"]) for r in rows] == [ds.n_parts(i) for i in range(5)]
    used = {it.split("@")[0] for r in rows for it in r["items"].split(";")}
    attribution = list(csv.DictReader(open(out / "ATTRIBUTION.csv", encoding="utf-8")))
    assert len(attribution) == len(used) and all(r["creator"].startswith("Maker") for r in attribution)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["source"] == "scenes" and meta["n_items_available"] == 18
    # the same command again (new folder) gives the same arrays
    assert moca_main(args[:-1] + [str(tmp_path / "again")]) == 0
    again = PartDataset.load(tmp_path / "again")
    np.testing.assert_array_equal(again.points, ds.points)
    # the output exists: refused without --overwrite
    assert moca_main(args) == 2
    assert "error:" in capsys.readouterr().err


def test_scene_item_from_shape_restores_centimetres():
    from generation3d.data import Part, Shape

    shape = Shape("table", [Part("top", trimesh.creation.box(extents=(120, 60, 4))),
                            Part("leg", _box((0, 0, -38), (5, 5, 72)))]).normalise()
    item = SceneItem.from_shape(shape, (120, 60, 76), "t", "table")
    np.testing.assert_allclose(item.extents, [120, 60, 76], atol=1e-6)
    lo = np.min([m.bounds[0] for _, m in item.parts], 0)
    np.testing.assert_allclose(lo, [-60, -30, 0], atol=1e-6)

