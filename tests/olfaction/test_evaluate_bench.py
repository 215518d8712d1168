"""Metrics, bootstrap, baselines' invariants and benchmark table plumbing."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from olfaction.baselines import SnitzAngle, angle_distance, pair_features
from olfaction.bench import format_table, merge_results, pommix_reference_rows
from olfaction.evaluate import bootstrap_ci, macro_roc_auc, pair_metrics, regression_metrics, summarize_folds

DATA = Path(os.environ.get("MOE_APPS_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def test_regression_metrics_by_hand():
    y = np.array([0.1, 0.2, 0.3, 0.4])
    m = regression_metrics(y, y + 0.1)  # a constant shift: perfect correlation, RMSE 0.1
    assert m["pearson"] == pytest.approx(1.0) and m["kendall"] == pytest.approx(1.0)
    assert m["rmse"] == pytest.approx(0.1)
    assert regression_metrics(y, y[::-1])["kendall"] == pytest.approx(-1.0)


def test_pair_metrics_reports_all_and_without_self_pairs():
    y = np.array([0.1, 0.2, 0.3, 0.4, 0.0])
    pred = np.array([0.2, 0.3, 0.4, 0.5, 0.5])  # the self-pair (last) is badly off
    m = pair_metrics(y, pred, np.array([False, False, False, False, True]))
    assert m["noself_rmse"] == pytest.approx(0.1) and m["noself_pearson"] == pytest.approx(1.0)
    assert m["all_rmse"] == pytest.approx(regression_metrics(y, pred)["rmse"]) and m["all_rmse"] > 0.1


def test_bootstrap_ci_brackets_estimate():
    rng = np.random.default_rng(0)
    y = rng.random(200)
    p = y + 0.2 * rng.standard_normal(200)
    ci = bootstrap_ci(y, p, n_boot=300, seed=0)
    r = regression_metrics(y, p)
    for k in ("pearson", "rmse"):
        assert ci[k][0] < r[k] < ci[k][1]


def test_summarize_folds_excludes_self_pairs():
    y = np.array([0.1, 0.5, 0.6, 0.9])
    pred = np.array([0.9, 0.5, 0.6, 0.9])  # only the self-pair (row 0) is wrong
    s = summarize_folds(
        [{"y": y, "pred": pred, "self_pair": np.array([True, False, False, False])}], n_boot=50
    )
    assert s["noself_rmse"] == pytest.approx(0.0, abs=1e-12)
    assert s["all_rmse"] == pytest.approx(np.sqrt(0.64 / 4))


def test_macro_auc_skips_single_class_columns():
    y = np.array([[1, 0], [0, 0], [1, 0], [0, 0]])
    scores = np.array([[0.9, 0.1], [0.1, 0.2], [0.8, 0.3], [0.2, 0.4]])
    assert macro_roc_auc(y, scores) == pytest.approx(1.0)


def test_baseline_features_symmetric():
    table = {"A": np.array([1.0, 0.0]), "B": np.array([0.0, 1.0]), "C": np.array([1.0, 1.0])}
    a, b = [("A",), ("A", "B")], [("C",), ("B",)]
    np.testing.assert_array_equal(pair_features(a, b, table), pair_features(b, a, table))
    assert angle_distance(("A",), ("B",), table) == pytest.approx(np.pi / 2)
    assert angle_distance(("A", "B"), ("C",), table) == pytest.approx(0.0, abs=1e-4)
    sn = SnitzAngle(table).fit(a + b, b + a, np.array([0.5, 0.2, 0.5, 0.2]))
    np.testing.assert_allclose(sn.predict(a, b), sn.predict(b, a))


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


@pytest.mark.skipif(not (DATA / "olfaction" / "mixture_pairs.csv").is_file(), reason="no data")
def test_bench_set_feature_rows_on_real_data(tmp_path):
    """One random-CV fold of the real bench with a tiny random encoder: the set-feature regressors
    and the set-feature network are rows of the table, an equal-weight mean is exactly the mean of
    its components' test predictions, and the set regressors are well above chance."""
    from olfaction.bench import EQUAL_MEANS, SET_RIDGE_NAME, SET_TREES_NAME, run_bench
    from olfaction.data import load_pairs
    from olfaction.model import MixScentConfig, MolEncoderConfig
    from olfaction.pipeline import random_encoder
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


@pytest.mark.skipif(not (DATA / "olfaction" / "mixture_pairs.csv").is_file(), reason="no data")
def test_evaluate_set_regressors_on_a_split(tmp_path):
    """`mixscent eval --set-regressors` path: both regressors, their mean and the mean with another
    model's test predictions, scored on the split's test rows only."""
    from olfaction.data import Split, load_pairs
    from olfaction.set_models import evaluate_set_regressors

    pairs = load_pairs(DATA)
    rng = np.random.default_rng(0)
    rows = rng.permutation(len(pairs))
    split = Split("mine", rows[:500], rows[500:600], rows[600:700])
    oracle = pairs.y[split.testing].astype(np.float64)
    out = evaluate_set_regressors(pairs, split, seed=0, others={"oracle": oracle})
    for name in ("trees", "ridge", "set_mean", "oracle+set_mean"):
        assert f"{name}/all_pearson" in out and f"{name}/noself_rmse" in out
    assert out["set_mean/all_pearson"] > 0.6
    # (trees + ridge + y) / 3 - y = 2/3 (set_mean - y): the blend's RMSE is 2/3 of the pair's
    assert out["oracle+set_mean/all_rmse"] == pytest.approx(2 / 3 * out["set_mean/all_rmse"], rel=1e-9)
    # gated partners are the default; on a random split some test pairs have a common partner,
    # so switching them off changes the scores (the gate itself is tested in test_set_features)
    off = evaluate_set_regressors(pairs, split, seed=0, partners="off")
    assert off["set_mean/all_pearson"] > 0.6 and off["set_mean/all_rmse"] != out["set_mean/all_rmse"]
