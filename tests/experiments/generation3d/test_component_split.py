"""``experiments.generation3d.component_split``: the split rule on hand-made meshes, its dataset
writer on a user folder, and the per-group bounds it compares."""

import trimesh

from experiments.generation3d.component_split import (
    CAPS,
    MAX_GROUP_COMPONENTS,
    build_parts_split,
)
from generation3d.parts import build_parts
from tests.generation3d.test_sources import _box


def test_the_chosen_bound_is_among_the_compared_ones():
    assert MAX_GROUP_COMPONENTS in CAPS and None in CAPS


def _legs_and_seat():
    legs = trimesh.util.concatenate([_box((x, 0, 0.5), (0.2, 0.2, 1.0)) for x in (-0.9, 0.9)])
    return [("seat", _box((0, 0, 1.1), (2.0, 1.0, 0.2))), ("Leg", legs)]


def test_split_mode_makes_each_component_of_a_group_a_part_named_after_the_group():
    assert [p.name for p in build_parts(_legs_and_seat(), max_parts=8)] == ["seat", "Leg"]
    parts = build_parts_split(_legs_and_seat(), max_parts=8)
    assert [p.name for p in parts] == ["seat", "Leg", "Leg"]
    assert sorted(round(float(p.mesh.centroid[0]), 6) for p in parts[1:]) == [-0.9, 0.9]
    assert all(len(p.mesh.faces) == 12 for p in parts)


def test_split_mode_merges_a_sliver_into_the_nearest_component_of_its_own_group():
    legs = [_box((x, 0, 0.5), (0.2, 0.2, 1.0)) for x in (-0.9, 0.9)]
    sliver = _box((0.9, 0, 1.02), (0.02, 0.02, 0.02))  # on the right leg, far below 5 % of the shape
    near_seat = _box((-0.5, 0, 1.22), (0.02, 0.02, 0.02))  # touches the seat, nearest leg component: the left one
    meshes = [("seat", _box((0, 0, 1.1), (2.0, 1.0, 0.2))), ("Leg", trimesh.util.concatenate([*legs, sliver, near_seat]))]
    parts = build_parts_split(meshes, max_parts=8)
    assert [p.name for p in parts] == ["seat", "Leg", "Leg"]
    faces = {round(float(p.mesh.bounds[0][0]), 6): len(p.mesh.faces) for p in parts[1:]}
    assert faces == {-1.0: 24, 0.8: 24} and len(parts[0].mesh.faces) == 12  # the seat got nothing


def test_split_mode_keeps_a_group_of_many_components_whole():
    n = MAX_GROUP_COMPONENTS + 1
    beads = trimesh.util.concatenate([_box((0.25 * i, 0, 2.0), (0.2, 0.2, 0.2)) for i in range(n)])
    legs = _legs_and_seat()[1][1]
    meshes = [("base", _box((0, 0, 0), (2.0, 2.0, 0.2))), ("beads", beads), ("Leg", legs)]
    assert [p.name for p in build_parts_split(meshes, max_parts=16)] == ["base", "beads", "Leg", "Leg"]
    # a model of one group is bounded by max_parts only, as in groups mode
    assert len(build_parts_split([("beads", beads)], max_parts=16)) == n


def test_split_mode_falls_back_to_groups_over_max_parts():
    meshes = _legs_and_seat()
    assert len(build_parts_split(meshes, max_parts=2)) == 2  # 3 split parts > 2: the groups
    assert [p.name for p in build_parts_split(meshes, max_parts=3)] == ["seat", "Leg", "Leg"]
