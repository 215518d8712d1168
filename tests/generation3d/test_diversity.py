"""``generation3d.diversity``: spread, copies and final-mesh set metrics, with answers known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from generation3d.data import CATEGORIES, PartDataset
from generation3d.diversity import COPY_RATIO, diversity_report, final_mesh_set_metrics, spread_and_copies
from generation3d.export import shape_meshes


class _Sample:
    def __init__(self, points, boxes):
        self.points, self.boxes = points, boxes


class TrainingShapes:
    """A stand-in generator that returns training shape ``seed`` of the category (a perfect copier),
    or always the first one (``collapse``)."""

    def __init__(self, ds: PartDataset, categories, collapse: bool = False):
        self.ds, self.categories, self.collapse = ds, categories, collapse
        self.gen = type("G", (), {"config": type("C", (), {"max_parts": 40})()})()

    def sample(self, category, parts, seed=0, steps=25):
        c = CATEGORIES.index(category)
        ids = [i for i in self.ds.shape_ids("train") if self.ds.category[i] == c]
        pts, boxes, _ = self.ds.shape(int(ids[0 if self.collapse else seed % len(ids)]))
        return [_Sample(pts, boxes)]

    def meshes(self, g, decoder="points"):
        return shape_meshes(g.points, g.boxes), []


def test_a_collapsed_copier_has_no_spread_and_only_copies(tiny_data):
    ds = PartDataset.load(tiny_data)
    rep = spread_and_copies(TrainingShapes(ds, ["chair", "table"], collapse=True), ds, seeds=3, n_points=256)
    for row in rep["categories"].values():
        assert row["spread"] == pytest.approx(0.0, abs=1e-3) and row["real_spread"] > 0
        assert row["spread_ratio"] < 0.05
    # the samples are the first training shape meshed: its nearest training shape is itself
    assert rep["copy_share"] == 1.0 and all(r < COPY_RATIO for row in rep["categories"].values() for r in row["nn_ratio"])


def test_distinct_training_shapes_spread_like_the_data(tiny_data):
    ds = PartDataset.load(tiny_data)
    rep = spread_and_copies(TrainingShapes(ds, ["chair"]), ds, seeds=3, n_points=256)
    assert rep["categories"]["chair"]["spread_ratio"] > 0.3


def test_final_mesh_metrics_sit_beside_the_oracle_and_the_report_runs_on_a_real_pipeline(tiny_data, tiny_pipeline):
    from generation3d.sampling import MoCAPipeline

    ds = PartDataset.load(tiny_data)
    pipe = MoCAPipeline.load(tiny_pipeline)
    fm = final_mesh_set_metrics(pipe, ds, n_shapes=4, steps=2, n_points=128)
    for row in (fm["generated"], fm["oracle"]):
        assert 0 < row["coverage"] <= 1 and row["mmd"] >= 0 and 0 <= row["1nna"] <= 1
    rep = diversity_report(pipe, ds, seeds=2, n_shapes=3, steps=2)
    assert set(rep["categories"]) == set(pipe.categories) and 0 <= rep["copy_share"] <= 1
    assert np.isfinite(rep["min_spread_ratio"])
