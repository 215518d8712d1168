"""``experiments.generation3d.component_split``: every group split into its connected components."""

import trimesh

from experiments.generation3d.component_split import split_every_group
from generation3d.data import Part


def test_two_legs_in_one_group_become_two_parts_named_after_the_group_and_slivers_merge():
    leg = trimesh.creation.box(extents=(0.1, 0.1, 1.0))
    other = leg.copy()
    other.apply_translation((1.0, 0.0, 0.0))
    top = trimesh.creation.box(extents=(1.2, 0.2, 0.1))
    top.apply_translation((0.5, 0.0, 0.55))
    sliver = trimesh.creation.box(extents=(0.01, 0.01, 0.01))
    sliver.apply_translation((0.5, 0.0, 0.62))
    parts = split_every_group([Part("legs", trimesh.util.concatenate([leg, other])),
                               Part("top", trimesh.util.concatenate([top, sliver]))])
    assert sorted(p.name for p in parts) == ["legs#0", "legs#1", "top#0"]  # the sliver joined the top
