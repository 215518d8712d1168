"""The research variant bench (experiments/olfaction/variant_bench.py): reference rows, merging
runs, validation-weighted stacks and one real-data fold."""

from __future__ import annotations

import csv
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
    convex_blend_weights,
    format_table,
    merge_results,
    pommix_reference_rows,
    random_encoder,
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


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "olfaction" / "mixture_pairs.csv").is_file(), reason="no data")
def test_bench_set_feature_rows_on_real_data(tmp_path):
    """One random-CV fold of the real bench with a tiny random encoder: the set-feature regressors
    and the set-feature network are rows of the table, an equal-weight mean is exactly the mean of
    its components' test predictions, and the set regressors are well above chance."""
    from experiments.olfaction.variant_bench import SET_RIDGE_NAME, SET_TREES_NAME, run_bench
    from olfaction.data import load_pairs
    from olfaction.model import MixScentConfig, MolEncoderConfig
    from olfaction.train import DistanceTrainConfig

    enc = random_encoder(MolEncoderConfig(hidden=16, layers=2, emb_dim=16), seed=0)
    enc.save_pretrained(tmp_path / "enc")
    mean_name = "Set trees + ridge (equal)"
    assert EQUAL_MEANS[mean_name] == (SET_TREES_NAME, SET_RIDGE_NAME)
    rows = run_bench(
        DATA,
        tmp_path / "out",
        families=("random_cv",),
        folds=1,
        variants=("MixScentNet (+Mordred +set features)", mean_name),
        mcfg=MixScentConfig(hidden=16, heads=2),
        tcfg=DistanceTrainConfig(epochs=2, patience=2),
        encoder_dir=tmp_path / "enc",
        rf_trees=20,
        n_boot=20,
        progress=False,
    )
    by_method = {r["method"]: r for r in rows if r["family"] == "random_cv"}
    for name in (SET_TREES_NAME, SET_RIDGE_NAME, mean_name, "MixScentNet (+Mordred +set features)"):
        assert name in by_method, name
    assert by_method[SET_TREES_NAME]["all_pearson"] > 0.6 and by_method[SET_RIDGE_NAME]["all_pearson"] > 0.6
    with open(tmp_path / "out" / "olfaction_bench_folds.csv", newline="") as f:
        fold_rmse = {r["method"]: float(r["all_rmse"]) for r in csv.DictReader(f)}
    dump = json.loads((tmp_path / "out" / "olfaction_bench_predictions.json").read_text())[0]
    # an equal mean alone (no stack) still dumps its components' validation predictions
    for name in (SET_TREES_NAME, SET_RIDGE_NAME):
        assert len(dump["val_pred"][name]) == len(dump["validation"]), name
    trees, ridge = (np.asarray(dump["test_pred"][k]) for k in (SET_TREES_NAME, SET_RIDGE_NAME))
    y_test = load_pairs(DATA).y.astype(np.float64)[np.asarray(dump["testing"])]
    mean_rmse = float(np.sqrt(np.mean((0.5 * (trees + ridge) - y_test) ** 2)))
    assert fold_rmse[mean_name] == pytest.approx(mean_rmse, rel=1e-5)


def test_convex_blend_weights_by_hand():
    y = np.array([0.1, 0.4, 0.7, 0.9])
    good, bad = y.copy(), y[::-1].copy()
    np.testing.assert_allclose(convex_blend_weights(np.stack([bad, good], 1), y), [0.0, 1.0])
    # two predictions off by +d and -d: the half/half average is exact
    np.testing.assert_allclose(convex_blend_weights(np.stack([y + 0.2, y - 0.2], 1), y), [0.5, 0.5])
    w = convex_blend_weights(np.random.default_rng(0).random((10, 3)), np.zeros(10))
    assert w.sum() == pytest.approx(1.0) and (w >= 0).all()
