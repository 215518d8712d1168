"""Metrics, bootstrap, baselines' invariants and benchmark table plumbing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from common.errors import InputError
from olfaction.baselines import SnitzAngle, angle_distance
from olfaction.data import PairData
from olfaction.evaluate import (
    bootstrap_ci,
    gated_network_share,
    macro_roc_auc,
    pair_metrics,
    regression_metrics,
    summarize_folds,
)
from olfaction.set_features import pair_features

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


def _dataset_pairs(datasets):
    mixtures = {("X", i): (f"{'C' * (i + 1)}O",) for i in range(len(datasets) + 1)}
    keys = list(mixtures)
    return PairData(list(datasets), keys[:-1], keys[1:], np.linspace(0.1, 0.9, len(datasets), dtype=np.float32),
                    mixtures)


def _blend_case(seed, n=50, net_noise=2.0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n)
    base = y + rng.normal(size=n)
    return y + net_noise * rng.normal(size=n), base, y


def test_gated_network_share_one_standard_error_rule():
    for seed in range(5):
        net, base, y = _blend_case(seed)
        g = gated_network_share(net, base, y)
        # the unguarded share is the grid point with the lowest RMSE (checked by brute force)
        grid = np.round(np.arange(21) * 0.05, 10)
        rmse = [np.sqrt(np.mean((a * net + (1 - a) * base - y) ** 2)) for a in grid]
        assert g["share_unguarded"] == pytest.approx(grid[int(np.argmin(rmse))])
        blend = g["share_unguarded"] * net + (1 - g["share_unguarded"]) * base
        assert g["gain"] == pytest.approx(np.corrcoef(y, blend)[0, 1] - np.corrcoef(y, base)[0, 1])
        # kept only when the validation gain exceeds its bootstrap standard error
        assert g["share"] == (g["share_unguarded"] if g["gain"] > g["gain_se"] else 0.0)
    # seed 1: the RMSE-best share is 0.15 but its gain (0.013) is within one SE (0.036): dropped
    g = gated_network_share(*_blend_case(1))
    assert g["share_unguarded"] > 0 and g["share"] == 0.0 and g["gain"] < g["gain_se"]
    # a network far better than the base is kept
    g = gated_network_share(*_blend_case(0, net_noise=0.2))
    assert g["share"] == g["share_unguarded"] >= 0.8 and g["gain"] > g["gain_se"] > 0
    # a network identical to the base adds nothing: every share ties, the smallest (0) is chosen
    net, base, y = _blend_case(2)
    assert gated_network_share(base.copy(), base, y)["share"] == 0.0
    with pytest.raises(ValueError, match="one length"):
        gated_network_share(net[:-1], base, y)


def test_leave_dataset_split_holds_out_exactly_one_group():
    from olfaction.bench import LEAVE_OUT, family_splits, leave_dataset_split

    datasets = ["Bushdid"] * 10 + ["Snitz 1"] * 6 + ["Snitz 3"] * 4 + ["Ravia 2"] * 5 + ["Ravia 4"] * 5
    pairs = _dataset_pairs(datasets)
    for group, members in LEAVE_OUT.items():
        split = leave_dataset_split(pairs, group, seed=0)
        test_ds = {datasets[i] for i in split.testing}
        assert test_ds == set(members) & set(datasets)
        assert len(split.testing) == sum(d in members for d in datasets)
        rest = np.concatenate([split.training, split.validation])
        assert sorted(rest.tolist()) == [i for i, d in enumerate(datasets) if d not in members]
        assert len(split.validation) == round(0.12 * len(rest)) and not set(split.training) & set(split.validation)
    assert [s.identifier for s in family_splits(Path("."), pairs, "leave_dataset", 5)] == [
        "leave_Bushdid", "leave_Snitz", "leave_Ravia"]
    with pytest.raises(InputError, match="unknown dataset group 'Nope'"):
        leave_dataset_split(pairs, "Nope")
    with pytest.raises(InputError, match="unknown split family 'nope'"):
        family_splits(Path("."), pairs, "nope", 1)


def test_bench_table_formats_rows():
    from olfaction.bench import format_table

    row = {"family": "leave_dataset", "method": "RF", "folds": 3, "pearson": 0.5, "pearson_std": 0.1,
           "rmse": 0.2, "noself_pearson": 0.4, "noself_rmse": 0.25}
    table = format_table([row])
    assert "| leave_dataset | RF | 3 | 0.500 ± 0.100 | 0.200 | 0.400 | 0.250 |" in table


@pytest.mark.slow
def test_bench_one_fold_every_method_and_the_gated_combination():
    """`mixscent bench --suite minimol` end to end on one leave-dataset-out fold with tiny models."""
    from olfaction.bench import SET, SHIPPED, SUITES, run_bench
    from olfaction.model import DistanceTrainConfig, MixScentConfig, MolEncoderConfig

    from .test_model import seeded_encoder

    if not (DATA / "olfaction" / "mixture_pairs.csv").is_file():
        pytest.skip(f"no DREAM mixture data under {DATA}")
    result = run_bench(
        DATA, seeded_encoder(MolEncoderConfig(hidden=8, layers=1, emb_dim=8)), families=("leave_dataset",),
        folds=1, network=MixScentConfig(hidden=8, heads=2), training=DistanceTrainConfig(epochs=1),
        n_estimators=3, rf_trees=3, n_boot=5, progress=False, minimol=True,
    )
    assert [r["method"] for r in result["rows"]] == list(SUITES["minimol"])
    assert all(np.isfinite(r["pearson"]) for r in result["rows"])
    fold = {f["method"]: f for f in result["folds"]}
    w, gate = fold[SHIPPED]["weights"], fold[SHIPPED]["validation"]
    assert w["trees"] == pytest.approx(w["ridge"]) and sum(w.values()) == pytest.approx(1.0)
    assert w["network"] == (gate["network_share_unguarded"] if gate["network_gain"] > gate["network_gain_se"] else 0)
    if w["network"] == 0:  # the shipped predictor is then exactly the set regressors' equal mean
        assert fold[SHIPPED]["all_pearson"] == pytest.approx(fold[SET]["all_pearson"])
