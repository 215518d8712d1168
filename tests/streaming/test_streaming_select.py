"""Unknown K and r (``streaming.select``): the estimator on planted unions of subspaces, grids that
are too small, the observed-count check, and ``mosaic pretrain --K auto --r auto`` end to end."""

import json

import numpy as np
import pytest

from common.errors import InputError
from streaming.cli import main
from streaming.data import StreamConfig, generate_stream
from streaming.model import MoSAIC
from streaming.observed import LowObservationWarning, check_observed
from streaming.select import estimate_K_r, save_model, selection_of


@pytest.fixture(scope="module")
def planted():
    """K = 3 planted subspaces of rank 2 in R^20, 70 % observed, low noise: 40 source samples each."""
    return generate_stream(StreamConfig(n=20, r=2, K=3, obs_frac=0.7, noise_std=0.01, epochs=1,
                                        samples_per_epoch=30, source_per_class=40, drift="none", seed=3))


def test_planted_union_is_recovered_exactly(planted):
    est = estimate_K_r(planted.source_values)  # default grid K, r <= 20: over-specified
    assert (est.K, est.r) == (3, 2)
    # the evidence: the smaller models were tried and lose clearly, the larger ones do not help
    assert est.margin["one_expert_fewer"] > 1.0 and est.margin["one_rank_fewer"] > 1.0
    assert {(t["K"], t["r"]) for t in est.table} >= {(2, 2), (3, 1), (3, 2), (4, 2), (3, 3)}
    chosen = next(t for t in est.table if (t["K"], t["r"]) == (3, 2))
    assert chosen["eligible"] and chosen["cv_nrmse"] < 0.1
    assert not any("upper bound" in w for w in est.warnings)
    json.dumps(est.to_dict())  # the evidence is plain JSON


def test_fixed_K_or_r_searches_only_the_other(planted):
    est = estimate_K_r(planted.source_values, K=3)
    assert (est.K, est.r) == (3, 2) and {t["K"] for t in est.table} == {3}
    est = estimate_K_r(planted.source_values, r=2)
    assert (est.K, est.r) == (3, 2) and {t["r"] for t in est.table} == {2}


def test_under_specified_grid_stops_at_its_edge_and_says_so(planted):
    est = estimate_K_r(planted.source_values, r=2, k_max=2)  # two subspaces explain 2/3 of the samples, one 1/3
    assert est.K == 2 and any("K=2 is the grid's upper bound" in w for w in est.warnings)
    est = estimate_K_r(planted.source_values, K=3, r_max=1)
    assert est.r == 1 and any("r=1 is the grid's upper bound" in w for w in est.warnings)


def test_bad_arguments_raise_input_error(planted):
    with pytest.raises(InputError, match="K must be"):
        estimate_K_r(planted.source_values, K=0)
    with pytest.raises(InputError, match="holdout"):
        estimate_K_r(planted.source_values, holdout=1.0)
    with pytest.raises(InputError, match="shape"):
        estimate_K_r(planted.source_values[0])


def test_check_observed_warns_on_most_samples_below_r_plus_1_and_refuses_when_all_are():
    M = np.zeros((10, 8), bool)
    M[:, :3] = True  # m = 3 everywhere
    assert check_observed(M, 2) is None
    M[:6, 2] = False  # 6 of 10 samples at m = 2 <= r
    with pytest.warns(LowObservationWarning, match="60% of the 10 samples have at most r=2"):
        check_observed(M, 2)
    M[:, 2] = False
    with pytest.raises(InputError, match="needs more than 2 observed entries"):
        check_observed(M, 2)


def test_mosaic_fit_applies_the_same_check_from_python(planted):
    """The estimator's own ``fit`` warns (or refuses) on source samples that cannot identify rank r."""
    X = planted.source_values.copy()
    rng = np.random.default_rng(0)
    for row in X[: int(0.8 * len(X))]:  # 80 % of the samples keep only 2 observed entries
        keep = rng.choice(np.flatnonzero(~np.isnan(row)), 2, replace=False)
        drop = np.setdiff1d(np.arange(row.size), keep)
        row[drop] = np.nan
    with pytest.warns(LowObservationWarning, match="at most r=2"):
        MoSAIC(2, 3, seed=0).fit(X)
    with pytest.raises(InputError, match="needs more than 2"):
        MoSAIC(2, 3, seed=0).fit(np.where(np.arange(20) < 2, 1.0, np.nan)[None].repeat(30, 0))


def test_save_model_keeps_the_estimate_in_the_checkpoint(planted, tmp_path):
    estimate = estimate_K_r(planted.source_values, seed=0)
    model = MoSAIC(estimate.r, estimate.K, seed=0, pretrain_restarts=2).fit(planted.source_values)
    model.selection_ = estimate
    assert (model.K, model.r) == (3, 2)
    save_model(model, tmp_path / "ck")
    stored = selection_of(tmp_path / "ck")
    assert (stored["K"], stored["r"]) == (3, 2) and len(stored["table"]) == len(estimate.table)
    model.selection_ = None
    save_model(model, tmp_path / "plain")
    assert selection_of(tmp_path / "plain") is None


def test_cli_pretrain_auto_end_to_end(tmp_path, capsys):
    s = tmp_path / "s.npz"
    assert main(["simulate", "--n", "20", "--r", "2", "--K", "3", "--epochs", "1", "--samples-per-epoch", "60",
                 "--drift", "none", "--obs-frac", "0.7", "--noise", "0.01", "--source-per-class", "40",
                 "--seed", "3", "--out", str(s)]) == 0
    ck = tmp_path / "ck"
    assert main(["pretrain", "--input", str(s), "--K", "auto", "--r", "auto", "--restarts", "2", "--out", str(ck)]) == 0
    out = capsys.readouterr().out
    assert "estimated K=3 r=2" in out and "pretrained 3 experts of rank 2" in out
    meta = json.loads((ck / "config.json").read_text())
    assert (meta["config"]["K"], meta["config"]["r"]) == (3, 2)
    assert (meta["extra"]["auto_K_r"]["K"], meta["extra"]["auto_K_r"]["r"]) == (3, 2)
    ck2 = tmp_path / "ck2"
    assert main(["pretrain", "--input", str(s), "--K", "3", "--r", "auto", "--restarts", "1", "--out", str(ck2)]) == 0
    assert json.loads((ck2 / "config.json").read_text())["extra"]["auto_K_r"]["settings"]["K"] == 3


def test_cli_stream_warns_when_most_samples_cannot_identify_the_rank(tmp_path, capsys):
    s = tmp_path / "sparse.npz"
    assert main(["simulate", "--n", "20", "--r", "4", "--K", "2", "--epochs", "1", "--samples-per-epoch", "40",
                 "--obs-frac", "0.15", "--source-per-class", "30", "--out", str(s)]) == 0
    capsys.readouterr()
    assert main(["stream", "--input", str(s), "--K", "2", "--r", "4", "--output", str(tmp_path / "o.npz")]) == 0
    err = capsys.readouterr().err
    # the source samples and the stream; and the source (60 samples, median 3 of 20 entries seen)
    # cannot identify two rank-4 experts
    assert err.count("warning:") == 3 and err.count("have at most r=4 observed entries") == 2
    assert "every partition fits exactly" in err
