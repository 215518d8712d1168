"""Session-5 GS-LF label models: seed-averaged networks (``*N``), the multi-output random forest
(``rf``) and fixed-weight rank/probability ensembles, on tiny data."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import InputError
from experiments.olfaction.label_bench import (
    LabelBenchConfig,
    LabelForest,
    blend_bench,
    ensemble_scores,
    gslf_cv,
    parse_ensemble,
    parse_seeded,
    summarize,
    variant_name,
)
from olfaction import data as olf_data
from olfaction.evaluate import macro_roc_auc

_SMILES = [
    "CCO", "CCCO", "CCCCO", "CCCCCO", "CC(C)O", "CC(=O)O", "CCC(=O)O", "CCCC(=O)O", "CCOC(C)=O",
    "CCCOC(C)=O", "CC=O", "CCC=O", "CCCC=O", "c1ccccc1", "Cc1ccccc1", "CCc1ccccc1", "Oc1ccccc1",
    "COc1ccccc1", "O=Cc1ccccc1", "CC(=O)c1ccccc1", "CCN", "CCCN", "CCS", "CCCS",
]  # fmt: skip


@pytest.fixture
def gslf_dir(tmp_path, monkeypatch):
    """A 24-molecule GS-LF look-alike with 3 labels (one rare) plus an invalid and a duplicate row."""
    root = tmp_path / "olfaction"
    root.mkdir()
    rng = np.random.default_rng(0)
    lines = ["nonStereoSMILES,descriptors,fruity,green,rare"]
    for i, s in enumerate(_SMILES + ["C1CC", "OCC"]):
        fruity = int("O" in s and i % 2 == 0)
        green = int(rng.random() < 0.4 or "c1" in s)
        rare = int(i in (3, 17, 22))
        lines.append(f"{s},x,{fruity},{green},{rare}")
    (root / "gs_lf.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.delitem(olf_data.SHA256, "gs_lf.csv")  # the fixture is not the published file
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_parse_ensemble_weights_and_errors():
    members, combine = parse_ensemble("ensemble=mordred*3:0.5&logreg-mordred&rf")
    assert combine == "rank"
    assert members == [("mordred*3", 0.5), ("logreg-mordred", 0.25), ("rf", 0.25)]
    members, combine = parse_ensemble("ensemble:prob=embedding+mordred/moe:2&rf:2")
    assert combine == "prob" and members == [("embedding+mordred/moe", 0.5), ("rf", 0.5)]
    assert parse_seeded("embedding+mordred/moe*5") == ("embedding+mordred", 4, 5)
    assert parse_seeded("mordred") == ("mordred", 0, 1)
    assert variant_name("mordred*2") == "MixScentNet (mordred) x2 seeds"
    assert variant_name("mordred*1") == variant_name("mordred")
    for bad, msg in [
        ("ensemble=fingerprint", "unknown label variant"),
        ("ensemble:mean=rf", "combine must be rank or prob"),
        ("ensemble=rf:0.7&mordred:0.4&logreg-mordred", "nothing left"),
        ("ensemble=rf:-1", "must be > 0"),
        ("ensemble=rf&", "empty member"),
        ("ensemble", "use 'ensemble"),
        ("mordred*0", "seed count"),
    ]:
        with pytest.raises(InputError, match=msg):
            parse_seeded(bad) if not bad.startswith("ensemble") else parse_ensemble(bad)


def test_ensemble_scores_one_member_is_the_model():
    rng = np.random.default_rng(0)
    y = (rng.random((60, 4)) < 0.3).astype(int)
    p = rng.random((60, 4))
    q = np.clip(y * 0.5 + rng.random((60, 4)), 0, 1)
    np.testing.assert_array_equal(ensemble_scores([p], [1.0], "prob"), p)
    r = ensemble_scores([p], [3.0], "rank")
    assert r.shape == p.shape and r.max() <= 1.0 and r.min() > 0.0
    assert macro_roc_auc(y, r) == pytest.approx(macro_roc_auc(y, p))
    # weights are normalised; an average of two probabilities is their mean
    np.testing.assert_allclose(ensemble_scores([p, q], [2.0, 2.0], "prob"), (p + q) / 2)
    # rank averaging is invariant to a monotone transform of one member, probability averaging is not
    np.testing.assert_allclose(ensemble_scores([p, q], [1, 1]), ensemble_scores([p**3, q], [1, 1]))
    with pytest.raises(InputError):
        ensemble_scores([p], [1.0, 2.0])
    with pytest.raises(InputError, match="unknown ensemble combine"):
        ensemble_scores([p], [1.0], "max")


def test_label_forest_deterministic_and_constant_label():
    rng = np.random.default_rng(0)
    X = rng.random((80, 5))
    Y = np.stack([X[:, 0] > 0.5, X[:, 1] > 0.7, np.zeros(80, bool)], axis=1).astype(float)
    a = LabelForest(20, seed=1).fit(X[:60], Y[:60]).predict_proba(X[60:])
    b = LabelForest(20, seed=1).fit(X[:60], Y[:60]).predict_proba(X[60:])
    assert a.shape == (20, 3)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:, 2], 0.0)  # no positive in training: constant rate
    assert macro_roc_auc(Y[60:, :2], a[:, :2]) > 0.8


def test_gslf_cv_ensembles_on_fixture(gslf_dir):
    cfg = LabelBenchConfig(hidden=16, epochs=3, patience=2, batch_size=8, rf_trees=10)
    kinds = (
        "mordred",
        "mordred*2",
        "rf",
        "ensemble:prob=mordred",
        "ensemble=logreg-mordred",
        "ensemble=mordred*2:0.6&logreg-mordred&rf",
    )
    rows = gslf_cv(gslf_dir, None, folds=2, seed=0, feature_kinds=kinds, cfg=cfg, progress=False)
    again = gslf_cv(gslf_dir, None, folds=2, seed=0, feature_kinds=kinds, cfg=cfg, progress=False)
    assert [(r["method"], r["auc"]) for r in rows] == [(r["method"], r["auc"]) for r in again]
    by = {(r["fold"], r["method"]): r["auc"] for r in rows}
    methods = list(dict.fromkeys(r["method"] for r in rows))
    assert methods == [
        "MixScentNet (mordred)",
        "MixScentNet (mordred) x2 seeds",
        "RF (Mordred ++ Morgan counts)",
        "logreg (Morgan counts)",
        "logreg (Mordred)",
        "ensemble [prob] (mordred 1)",
        "ensemble [rank] (logreg-mordred 1)",
        "ensemble [rank] (mordred*2 0.6, logreg-mordred 0.2, rf 0.2)",
    ]
    assert len(rows) == 2 * len(methods)
    for fold in (0, 1):  # an ensemble of one member scores exactly as that member
        assert by[fold, "ensemble [prob] (mordred 1)"] == by[fold, "MixScentNet (mordred)"]
        assert by[fold, "ensemble [rank] (logreg-mordred 1)"] == pytest.approx(by[fold, "logreg (Mordred)"])
    assert all(0.0 <= r["auc"] <= 1.0 for r in rows)
    assert rows[1]["best_epoch"] is None and rows[0]["best_epoch"] is not None


def test_blend_bench_ensemble_on_fixture(blend_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    cfg = LabelBenchConfig(hidden=16, epochs=2, patience=1, batch_size=4)
    kinds = ("mordred", "ensemble:prob=mordred", "ensemble=mordred*2:0.5&logreg-mordred&logreg-morgan")
    rows = blend_bench(blend_dir, None, splits=("authors",), feature_kinds=kinds, cfg=cfg, progress=False)
    assert [r["method"] for r in rows] == [
        "MixScentNet (mordred)",
        "MixScentNet (mordred) x2 seeds",
        "logreg (summed Morgan counts)",
        "logreg (Mordred sum ++ |diff|)",
        "ensemble [prob] (mordred 1)",
        "ensemble [rank] (mordred*2 0.5, logreg-mordred 0.25, logreg-morgan 0.25)",
    ]
    assert rows[4]["auc"] == rows[0]["auc"] or (np.isnan(rows[4]["auc"]) and np.isnan(rows[0]["auc"]))
    with pytest.raises(InputError, match="unknown label variant 'rf'"):  # no forest for blends
        blend_bench(
            blend_dir, None, splits=("authors",), feature_kinds=("ensemble=rf",), cfg=cfg, progress=False
        )


def test_blend_bench_on_fixture(blend_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MOE_APPS_CACHE", str(tmp_path / "cache"))
    cfg = LabelBenchConfig(hidden=16, epochs=2, patience=1, batch_size=4)
    rows = blend_bench(
        blend_dir, None, seed=0, splits=("authors",), feature_kinds=("mordred",), cfg=cfg, progress=False
    )
    assert [r["method"] for r in rows] == ["MixScentNet (mordred)", "logreg (summed Morgan counts)"]
    assert all(r["split"] == "authors_2023_v1" and r["n_test"] == 3 for r in rows)
    assert all(np.isnan(r["auc"]) or 0.0 <= r["auc"] <= 1.0 for r in rows)
    s = summarize(rows + [{**rows[0], "auc": 0.0}])
    assert s[0]["folds"] == 2 and s[0]["macro_auc"] == pytest.approx(rows[0]["auc"] / 2)
    with pytest.raises(InputError, match="unknown blend split 'mine'"):
        blend_bench(blend_dir, None, splits=("mine",), feature_kinds=("mordred",), cfg=cfg, progress=False)
