"""The research variant bench (experiments/olfaction/variant_bench.py): reference rows, merging
runs, validation-weighted stacks and one real-data fold."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from experiments.olfaction.variant_bench import (
    EQUAL_MEANS,
    HGB_NAME,
    RF_NAME,
    SET_KINDS,
    STACKS,
    VARIANTS,
    format_table,
    merge_results,
    pommix_reference_rows,
    stack_predictions,
)

DATA = Path(os.environ.get("MOE_APPS_DATA", Path(__file__).resolve().parents[3].parent / "shared" / "data"))


@pytest.mark.skipif(not (DATA / "olfaction" / "pommix_performance_metrics.csv").is_file(), reason="no data")
def test_pommix_reference_rows():
    rows = {r["method"]: r for r in pommix_reference_rows(DATA)}
    assert rows["POMMix [published]"]["all_pearson"] == pytest.approx(0.779, abs=1e-3)
    assert "POMMix [published]" in format_table(list(rows.values()))


def test_merge_results_dedupes(tmp_path):
    row = {
        "family": "random_cv",
        "method": "RF",
        "all_pearson": 0.7,
        "all_pearson_lo": 0.6,
        "all_pearson_hi": 0.8,
    }
    for name, method in (("a", "MixScentNet"), ("b", "MixScentNet (GAT)")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "olfaction_bench.json").write_text(
            json.dumps({"rows": [row, {**row, "method": method}]})
        )
    rows = merge_results([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    assert [r["method"] for r in rows] == ["RF", "MixScentNet", "MixScentNet (GAT)"]
    assert "0.700 [0.600, 0.800]" in (tmp_path / "out" / "olfaction_bench.md").read_text()


def test_stack_weight_is_chosen_on_validation_rows_not_test_rows():
    """Component "a" is exact on validation and useless on test, "b" the reverse: a blend picked
    on validation rows puts all weight on "a" and so scores badly on test. Picking on test rows
    would give weight 1 to "b" and this test would fail."""
    rng = np.random.default_rng(1)
    y_val, y_test = rng.random(40), rng.random(30)
    val = {"a": y_val.copy(), "b": rng.random(40)}
    test = {"a": rng.random(30), "b": y_test.copy()}
    pred, w = stack_predictions(val, y_val, test)
    np.testing.assert_allclose(w, [1.0, 0.0])
    np.testing.assert_allclose(pred, test["a"])
    # and the weights do not move when only the test labels change (they are not an input)
    pred2, w2 = stack_predictions(val, y_val, {k: v[::-1] for k, v in test.items()})
    np.testing.assert_array_equal(w, w2)


def test_stack_components_are_bench_methods():

    for name, parts in {**STACKS, **EQUAL_MEANS}.items():
        assert all(p in VARIANTS or p in (RF_NAME, HGB_NAME, *SET_KINDS) for p in parts), name
        assert "," not in name, f"`variant_bench --variants` splits on commas: {name}"



