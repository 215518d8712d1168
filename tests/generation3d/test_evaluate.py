"""Metrics on hand-built shapes with known values."""

import numpy as np
import pytest

from generation3d.evaluate import (
    box_overlap,
    chamfer_distance,
    count_valid_parts,
    fscore,
    match_parts,
    outside_rate,
    part_metrics,
    penetration_rate,
    set_metrics,
)


def test_chamfer_is_squared_and_symmetric():
    a = np.array([[0.0, 0, 0]])
    b = np.array([[3.0, 4, 0]])
    assert chamfer_distance(a, b) == pytest.approx(50.0)  # 25 + 25, squared distances
    c = np.array([[0.0, 0, 0], [1, 0, 0]])
    d = np.array([[0.0, 0, 0]])
    # c->d: (0 + 1)/2 ; d->c: 0
    assert chamfer_distance(c, d) == pytest.approx(0.5)
    assert chamfer_distance(d, c) == pytest.approx(0.5)
    assert chamfer_distance(c, c) == 0.0


def test_fscore_hand_values():
    a = np.array([[0.0, 0, 0], [1, 0, 0]])
    b = np.array([[0.0, 0, 0.01], [5, 0, 0]])
    # precision 1/2 (only the first point of a is near b), recall 1/2
    assert fscore(a, b, tau=0.05) == pytest.approx(0.5)
    assert fscore(a, a, tau=0.0) == 1.0
    assert fscore(a, b + 100, tau=0.05) == 0.0


def test_hungarian_recovers_permutation():
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(20, 3)) + 5 * i for i in range(4)]
    perm = [2, 0, 3, 1]
    gi, ri, _ = match_parts([parts[p] for p in perm], parts)
    assert [perm[g] for g in gi] == list(ri)
    m = part_metrics([parts[p] for p in perm], parts)
    assert m["part_cd"] == 0.0 and m["part_fscore"] == 1.0
    # one missing part counts as F = 0 for that part
    assert part_metrics(parts[:3], parts)["part_fscore"] == pytest.approx(0.75)


def test_set_metrics_identical_and_disjoint_sets():
    rng = np.random.default_rng(0)
    ref = [rng.normal(size=(30, 3)) + 10 * i for i in range(4)]
    same = set_metrics([r.copy() for r in ref], ref)
    assert same["coverage"] == 1.0 and same["mmd"] == 0.0
    far = set_metrics([r + 1000 for r in ref], ref)
    assert far["1nna"] == 1.0  # perfectly separable sets
    collapsed = set_metrics([ref[0]] * 4, ref)
    assert collapsed["coverage"] == 0.25


def test_penetration_and_counts():
    boxes = np.array([[0, 0, 0, 1, 1, 1], [0.1, 0, 0, 1, 1, 1], [5, 5, 5, 1, 1, 1], [0.5, 0, 0, 0.0001, 1, 1]], float)
    ov = box_overlap(boxes[:3])
    assert ov[0, 1] == pytest.approx(0.9) and ov[0, 2] == 0.0
    assert penetration_rate(boxes[:3]) == pytest.approx(1 / 3)
    touching = np.array([[0, 0, 0, 1, 1, 1], [1, 0, 0, 1, 1, 1]], float)
    assert penetration_rate(touching) == 0.0
    assert count_valid_parts(boxes) == 2  # box 2 lies outside the frame, box 3 is degenerate


def test_outside_rate_counts_parts_reaching_beyond_the_frame():
    boxes = np.array([
        [0.0, 0, 0, 2, 2, 2],        # exactly fills [-1, 1]^3: inside
        [0.5, 0, 0, 1.08, 0.2, 0.2],  # reaches x = 1.04 <= 1 + 0.05: inside
        [0.5, 0, 0, 1.2, 0.2, 0.2],   # reaches x = 1.1: outside
        [0.0, 0, -0.95, 0.2, 0.2, 0.3],  # reaches z = -1.1: outside
    ])
    assert outside_rate(boxes) == pytest.approx(0.5)
    assert outside_rate(boxes, tol=0.2) == 0.0
    assert outside_rate(boxes[:2]) == 0.0 and outside_rate(np.zeros((0, 6))) == 0.0


def test_heldout_flow_loss_is_seeded_and_equals_the_target_variance_for_a_zero_velocity(tiny_pipeline, tiny_data):
    """With the output heads zeroed the velocity is 0, so the loss is E||eps - x_0||^2 = 1 + E[x_0^2]
    per standardised channel, about 2 for latents and boxes alike (sampling noise of ~2000 draws)."""
    import torch

    from generation3d.data import PartDataset
    from generation3d.evaluate import heldout_flow_loss
    from generation3d.sampling import MoCAPipeline

    pipe, ds = MoCAPipeline.load(tiny_pipeline), PartDataset.load(tiny_data)
    a, b = heldout_flow_loss(pipe, ds, levels=(0.2, 0.8)), heldout_flow_loss(pipe, ds, levels=(0.2, 0.8))
    assert a == b and a["n_shapes"] == len(ds) and len(a["z_by_level"]) == 2
    assert a != heldout_flow_loss(pipe, ds, levels=(0.2, 0.8), seed=1)
    with torch.no_grad():
        for lin in (pipe.gen.z_out, pipe.gen.box_out):
            lin.weight.zero_()
            lin.bias.zero_()
    zero = heldout_flow_loss(pipe, ds, levels=(0.2, 0.8))
    assert 1.5 < zero["z"] < 2.5 and 1.4 < zero["box"] < 2.6
    assert zero["loss"] == pytest.approx(zero["z"] + zero["box"])
