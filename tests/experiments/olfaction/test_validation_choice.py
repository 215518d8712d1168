"""experiments/olfaction/validation_choice.py: equal means scored on validation rows, with the
components of a mean merged from several bench runs on the same splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.olfaction import validation_choice as vc
from experiments.olfaction.variant_bench import EQUAL_MEANS, SET_RIDGE_GATED_NAME, SET_TREES_GATED_NAME

NET10 = "MixScentNet (+Mordred +set features) x10 seeds"
MEAN10 = f"{NET10} + set trees + ridge with gated partners (equal)"


def _dump(run: Path, val_pred: dict, validation=(0, 1, 2, 3)) -> Path:
    run.mkdir()
    fold = {"family": "random_cv", "split": "cv0", "validation": list(validation), "testing": [4]}
    (run / "olfaction_bench_predictions.json").write_text(json.dumps([{**fold, "val_pred": val_pred}]))
    return run


def test_components_from_two_runs_are_merged_into_the_mean(tmp_path):
    assert EQUAL_MEANS[MEAN10] == (NET10, SET_TREES_GATED_NAME, SET_RIDGE_GATED_NAME)
    y = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    trees, ridge, net = [0.1, 0.2, 0.3, 0.5], [0.1, 0.3, 0.3, 0.4], [0.2, 0.2, 0.3, 0.4]
    a = _dump(tmp_path / "a", {SET_TREES_GATED_NAME: trees, SET_RIDGE_GATED_NAME: ridge})
    b = _dump(tmp_path / "b", {NET10: net, SET_TREES_GATED_NAME: trees})
    rows = {r["method"]: r for r in vc.validation_rows([a, b], y)}
    assert rows[MEAN10]["equal_mean"] and rows[MEAN10]["folds"] == 1
    mean = np.mean([trees, ridge, net], axis=0)
    assert rows[MEAN10]["val_rmse"] == pytest.approx(float(np.sqrt(np.mean((mean - y[:4]) ** 2))))
    assert MEAN10 not in {r["method"] for r in vc.validation_rows([b], y)}  # ridge missing: no mean
    # runs that disagree are refused, not silently mixed
    c = _dump(tmp_path / "c", {SET_TREES_GATED_NAME: [0.9, 0.9, 0.9, 0.9]})
    with pytest.raises(SystemExit, match="differ"):
        vc.validation_rows([a, c], y)
    d = _dump(tmp_path / "d", {NET10: net}, validation=(0, 1, 2, 4))
    with pytest.raises(SystemExit, match="validation rows"):
        vc.validation_rows([a, d], y)
