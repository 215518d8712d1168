"""MoSAIC: exact recovery, routing, input validation, state safety, save/load, linear algebra."""

import copy

import numpy as np
import pytest

from common.errors import InputError
from experiments.streaming.variants import mosaic_variant
from streaming.data import StreamConfig, generate_stream
from streaming.evaluate import routing_accuracy, subspace_error
from streaming.linalg import (
    als_subspace,
    fit_observed,
    grouse_step,
    orthonormalize,
    projection_distance,
    residual_scores,
)
from streaming.model import MoSAIC


def started(m: MoSAIC, U: np.ndarray) -> MoSAIC:
    """An unfitted MoSAIC started from the bases ``U (K, n, r)`` (nothing seen)."""
    m._init_state(U.shape[1])
    m.bank_.bases = np.array(U, dtype=np.float64)
    return m


def step_size(m: MoSAIC, k: int) -> float:
    """Expert ``k``'s next step size."""
    return m.steps_.step_size(k, m.schedule, m.eta0, m.step_floor, m.r, m.drift_floor,
                              float(m.expert_stats_.level[k]))



def block_bases(n=12, r=2, K=3):
    """K subspaces spanned by disjoint coordinate blocks: perfectly separated, known by hand."""
    U = np.zeros((K, n, r))
    for k in range(K):
        for a in range(r):
            U[k, k * r + a, a] = 1.0
    return U


def test_fit_observed_matches_lstsq():
    rng = np.random.default_rng(0)
    U = orthonormalize(rng.standard_normal((3, 15, 4)))
    idx = np.array([0, 2, 3, 5, 7, 8, 11, 14])
    x = rng.standard_normal(8)
    w, res = fit_observed(U, idx, x)
    for k in range(3):
        ref, *_ = np.linalg.lstsq(U[k, idx], x, rcond=None)
        np.testing.assert_allclose(w[k], ref, atol=1e-8)
        assert res[k] == pytest.approx(np.sum((x - U[k, idx] @ ref) ** 2), abs=1e-8)


def test_grouse_step_keeps_orthonormality_and_full_step_absorbs_the_sample():
    rng = np.random.default_rng(1)
    U = orthonormalize(rng.standard_normal((20, 3)))
    x = rng.standard_normal(20)
    idx = np.arange(20)
    w, _ = fit_observed(U[None], idx, x)
    grouse_step(U, idx, x, w[0], eta=1.0)
    np.testing.assert_allclose(U.T @ U, np.eye(3), atol=1e-10)
    # eta = 1: the (fully observed) sample now lies in the span
    np.testing.assert_allclose(U @ (U.T @ x), x, atol=1e-9)


def test_als_recovers_a_low_rank_subspace_from_missing_data():
    rng = np.random.default_rng(2)
    V = orthonormalize(rng.standard_normal((30, 3)))
    X = rng.standard_normal((200, 3)) @ V.T
    M = rng.random(X.shape) < 0.5
    U = als_subspace(np.where(M, X, 0.0), M, 3, iters=40)
    assert projection_distance(U, V) < 1e-6


def test_als_extends_a_lower_rank_warm_start_to_the_full_subspace():
    rng = np.random.default_rng(3)
    V = orthonormalize(rng.standard_normal((30, 4)))
    X = rng.standard_normal((200, 4)) @ V.T
    M = rng.random(X.shape) < 0.5
    X0 = np.where(M, X, 0.0)
    U0 = als_subspace(X0, M, 2, iters=20)  # a rank-2 fit: the warm start of a growing buffer
    U = als_subspace(X0, M, 4, U0=U0, iters=40)
    assert U.shape == (30, 4)
    np.testing.assert_allclose(U.T @ U, np.eye(4), atol=1e-10)
    assert projection_distance(U, V) < 1e-6
    with pytest.raises(ValueError, match="more than the rank"):
        als_subspace(X0, M, 1, U0=U0)


def test_exact_recovery_noiseless_full_observation():
    cfg = StreamConfig(n=20, r=3, K=3, obs_frac=1.0, noise_std=0.0, epochs=1, samples_per_epoch=90,
                       drift="none", source_per_class=30, seed=4)
    s = generate_stream(cfg)
    m = MoSAIC(3, 3, pretrain_restarts=3).fit(s.source_values)
    err, per, _ = subspace_error(m.bases_, s.bases[0])
    assert err < 1e-8
    routes = m.route(s.values)
    assert routing_accuracy(routes, s.labels) == 1.0
    # with a third of each sample hidden, completion is exact too
    hidden = s.full.copy()
    hidden[:, ::3] = np.nan
    np.testing.assert_allclose(m.transform(hidden), s.full, atol=1e-8)


def test_routing_on_well_separated_subspaces():
    U = block_bases()
    m = MoSAIC(2, 3)
    started(m, U)
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, 50)
    X = np.einsum("tnr,tr->tn", U[labels], rng.standard_normal((50, 2))) + 0.01 * rng.standard_normal((50, 12))
    full = X.copy()
    X[rng.random(X.shape) < 0.4] = np.nan
    for t, k in enumerate(labels):  # a sample's own block must be seen (else nothing identifies it)
        X[t, 2 * k : 2 * k + 2] = full[t, 2 * k : 2 * k + 2]
    np.testing.assert_array_equal(m.route(X), labels)
    _, routes = m.process(X)
    np.testing.assert_array_equal(routes, labels)


def test_streaming_noiseless_stays_exact_after_pretraining():
    cfg = StreamConfig(n=20, r=3, K=3, obs_frac=1.0, noise_std=0.0, epochs=1, samples_per_epoch=60,
                       drift="none", source_per_class=30, seed=6)
    s = generate_stream(cfg)
    m = MoSAIC(3, 3, pretrain_restarts=3).fit(s.source_values)
    hidden = s.full.copy()
    hidden[:, 1::4] = np.nan
    completed, routes = m.process(hidden)
    np.testing.assert_allclose(completed, s.full, atol=1e-7)
    assert subspace_error(m.bases_, s.bases[0])[0] < 1e-6


def _state(m):
    tensors, state = m.checkpoint_state()  # every field of every component
    return {k: v.numpy().copy() for k, v in tensors.items()} | {"json": np.array(repr(state))}


@pytest.mark.parametrize("bad", ["no_observed", "nan_observed", "inf", "wrong_dim", "bad_mask_shape", "bad_in_batch"])
def test_rejected_sample_leaves_state_unchanged(bad):
    m = MoSAIC(2, 3)
    started(m, block_bases())
    before = _state(m)
    x = np.ones(12)
    mask = None
    if bad == "no_observed":
        x = np.full(12, np.nan)
    elif bad == "nan_observed":
        mask = np.ones(12, bool)
        x[3] = np.nan
    elif bad == "inf":
        x[0] = np.inf
    elif bad == "wrong_dim":
        x = np.ones(11)
    elif bad == "bad_mask_shape":
        mask = np.ones(5, bool)
    elif bad == "bad_in_batch":  # a valid first sample must not be applied either
        x = np.ones((2, 12))
        x[1] = np.nan
    with pytest.raises(InputError):
        m.partial_fit(x, mask=mask)
    after = _state(m)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


@pytest.mark.parametrize("kw", [dict(r=10, K=2), dict(r=2, K=0), dict(r=0, K=2)])
def test_bad_hyperparameters_are_refused_by_fit_and_partial_fit(kw):
    model = MoSAIC(**kw)  # scikit-learn: the constructor only stores them
    X = np.random.default_rng(0).standard_normal((20, 10))  # n = 10
    with pytest.raises(InputError):
        model.fit(X)
    with pytest.raises(InputError):
        model.partial_fit(X)
    assert not hasattr(model, "bank_")


def test_save_load_round_trip_continues_identically(tmp_path):
    cfg = StreamConfig(n=20, r=2, K=3, obs_frac=0.6, epochs=2, samples_per_epoch=120, drift="abrupt",
                       source_per_class=40, seed=7)
    s = generate_stream(cfg)
    m = MoSAIC(2, 3, pretrain_restarts=2, seed=1).fit(s.source_values)
    m.process(s.values[:150], epoch=s.epoch[:150])
    assert m.provisional_fit_.si_Z is not None  # the change buffer's Soft-Impute warm start travels too
    m.save_pretrained(tmp_path / "ckpt")
    m2 = MoSAIC.from_pretrained(tmp_path / "ckpt")
    np.testing.assert_array_equal(m2.provisional_fit_.si_Z, m.provisional_fit_.si_Z)
    c1, r1 = m.process(s.values[150:], epoch=s.epoch[150:])
    c2, r2 = m2.process(s.values[150:], epoch=s.epoch[150:])
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(m.bases_, m2.bases_)


def test_fit_is_deterministic_under_seed():
    s = generate_stream(StreamConfig(n=20, r=2, K=3, source_per_class=40, samples_per_epoch=10, epochs=1, seed=8))
    a = MoSAIC(2, 3, seed=3, pretrain_restarts=2).fit(s.source_values)
    b = MoSAIC(2, 3, seed=3, pretrain_restarts=2).fit(s.source_values)
    np.testing.assert_array_equal(a.bases_, b.bases_)


def test_state_memory_is_order_Knr():
    cfg = StreamConfig(n=600, r=2, K=3, obs_frac=0.2, noise_std=0.01, epochs=2, samples_per_epoch=90,
                       drift="abrupt", source_per_class=30, seed=9)
    s = generate_stream(cfg)
    m = MoSAIC(2, 3, pretrain_restarts=1).fit(s.source_values)
    m.process(s.values, epoch=s.epoch)
    K, n, r = 3, 600, 2
    # bases + the drift prediction's anchor and alternatives + counters + change buffer, no O(n²) or O(T n)
    assert m.memory_bytes() <= 4 * K * n * r * 8


def test_batched_process_equals_one_sample_at_a_time_and_routes_by_route_by_score():
    import copy

    import torch

    from moe.routing import route_by_score

    cfg = StreamConfig(n=30, r=3, K=4, obs_frac=0.5, epochs=3, samples_per_epoch=300, drift="abrupt",
                       source_per_class=60, seed=11)
    s = generate_stream(cfg)
    a = MoSAIC(3, 4, pretrain_restarts=2, seed=2).fit(s.source_values)
    b = copy.deepcopy(a)
    c1, r1 = a.process(s.values, epoch=s.epoch)
    M = ~np.isnan(s.values)
    c2, r2 = np.empty_like(c1), np.empty_like(r1)
    for t in range(len(s.values)):
        idx = np.flatnonzero(M[t])
        xo = s.values[t, idx]
        _, score = residual_scores(b.bank_.bases, idx, xo, b.bank_.ridge)
        routed = int(route_by_score(torch.from_numpy(score[None])).indices[0, 0])
        c2[t : t + 1], r2[t : t + 1] = b.process(s.values[t : t + 1], epoch=s.epoch[t : t + 1])
        assert r2[t] == routed
    assert a.reseeds_ and a.reseeds_ == b.reseeds_  # the change-detection path is exercised too
    np.testing.assert_array_equal(r1, r2)
    # equal up to rounding: the batched fits and the per-sample ones are different BLAS calls, whose
    # last bit depends on the kernel (OpenBLAS Prescott differs by one ulp)
    np.testing.assert_allclose(c1, c2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a.bases_, b.bases_, rtol=1e-10, atol=1e-12)
    # the inline argmin is route_by_score's rule, ties to the lower index included
    tied = np.array([[0.3, 0.1, 0.1, 0.5]])
    assert int(route_by_score(torch.from_numpy(tied)).indices[0, 0]) == int(tied.argmin()) == 1


def test_reseed_recovers_an_abrupt_switch_quickly_without_harming_the_others():
    from streaming.evaluate import per_sample_nrmse, recovery_times

    cfg = StreamConfig(n=20, r=2, K=3, obs_frac=0.6, noise_std=0.0, epochs=2, samples_per_epoch=450,
                       drift="abrupt", source_per_class=40, seed=12)
    s = generate_stream(cfg)
    m = MoSAIC(2, 3, pretrain_restarts=2, seed=0).fit(s.source_values)
    completed, _ = m.process(s.values, epoch=s.epoch)
    (rec,) = recovery_times(per_sample_nrmse(completed, s.full, s.values), s.labels, s.epoch, s.bases)
    # identifying a rank-2 subspace of R^20 from samples with ~12 observed entries needs about
    # n r / (m - r) = 4 samples; the provisional fit, then the re-seed (~10 samples) take over
    assert rec["recovery_samples"] <= 20
    assert [t for t, _ in m.reseeds_] and all(t >= 450 for t, _ in m.reseeds_)
    # noiseless: the unchanged subspaces stay exact; the re-seeded one (a shrunk fit, then GROUSE
    # steps) is close and still converging at the end of the epoch
    from streaming.evaluate import changed_classes

    per = subspace_error(m.bases_, s.bases[1])[1]
    changed = changed_classes(s.bases, 1)
    assert changed.size == 1
    assert np.delete(per, changed).max() < 1e-6
    assert per[changed].max() < 1e-3


def test_soft_impute_completes_a_low_rank_matrix_and_thresholds_it_away():
    from streaming.linalg import soft_impute

    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 25))
    M = rng.random(X.shape) < 0.6
    V, sv, Z = soft_impute(np.where(M, X, 0.0), M, lam=0.05, iters=2000, tol=1e-9)
    assert np.linalg.norm((Z - X)[~M]) / np.linalg.norm(X[~M]) < 0.05
    assert sv.size >= 3 and V.shape == (25, sv.size)
    np.testing.assert_allclose(V.T @ V, np.eye(sv.size), atol=1e-8)
    V, sv, Z = soft_impute(np.where(M, X, 0.0), M, lam=1e6)
    assert sv.size == 0 and not Z.any()


def test_soft_impute_warm_start_reaches_the_same_optimum_in_fewer_iterations():
    from streaming.linalg import soft_impute

    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 20))
    M = rng.random(X.shape) < 0.5
    X0 = np.where(M, X, 0.0)
    _, _, Z = soft_impute(X0, M, lam=0.05, iters=5000, tol=1e-10)
    # the buffer grows by two rows: warm start = the old rows' solution, zeros for the new ones
    X1 = np.where(M[:28], X[:28], 0.0)
    _, _, Z_old = soft_impute(X1, M[:28], lam=0.05, iters=5000, tol=1e-10)
    Z0 = np.vstack([Z_old, np.zeros((2, 20))])
    _, _, Z_warm = soft_impute(X0, M, lam=0.05, iters=5000, tol=1e-10, Z0=Z0)
    np.testing.assert_allclose(Z_warm, Z, atol=1e-6)
    # from that start a 20-iteration budget gets much closer than from zeros
    _, _, Z20_warm = soft_impute(X0, M, lam=0.05, iters=20, tol=0.0, Z0=Z0)
    _, _, Z20_cold = soft_impute(X0, M, lam=0.05, iters=20, tol=0.0)
    assert np.linalg.norm(Z20_warm - Z) < 0.5 * np.linalg.norm(Z20_cold - Z)


@pytest.mark.parametrize("shape", [(30, 80), (80, 30)])
def test_singular_value_threshold_matches_the_svd_reference(shape):
    from streaming.linalg import soft_impute

    rng = np.random.default_rng(3)
    Y = rng.standard_normal((shape[0], 6)) @ rng.standard_normal((6, shape[1])) + 0.05 * rng.standard_normal(shape)
    U, s, Vt = np.linalg.svd(Y, full_matrices=False)
    lam = 1.0
    keep = s > lam
    Z_ref = (U[:, keep] * (s[keep] - lam)) @ Vt[keep]
    V, sv, Z = soft_impute(Y, np.ones(shape, bool), lam)  # fully observed: one threshold, then a fixed point
    np.testing.assert_allclose(Z, Z_ref, atol=1e-10)
    np.testing.assert_allclose(sv, s[keep] - lam, atol=1e-10)
    np.testing.assert_allclose(np.abs((V.T @ Vt[keep].T).diagonal()), 1.0, atol=1e-10)
    assert not soft_impute(Y, np.ones(shape, bool), 10 * s[0])[2].any()  # everything thresholded away


def test_accelerated_soft_impute_reaches_the_plain_optimum_faster():
    from streaming.linalg import singular_value_threshold, soft_impute

    def plain(iters):  # the unaccelerated iteration Z <- S_lam(P_Ω(X) + P_Ω⊥(Z))
        Z = np.zeros_like(X0)
        for _ in range(iters):
            Z, Z_old = singular_value_threshold(np.where(M, X0, Z), 0.5)[0], Z
            if np.linalg.norm(Z - Z_old) < 1e-12 * np.linalg.norm(X0):
                break
        return Z

    rng = np.random.default_rng(5)
    X = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 100))
    M = rng.random(X.shape) < 0.4
    X0 = np.where(M, X, 0.0)
    Z_plain = plain(20000)
    _, _, Z_fast = soft_impute(X0, M, lam=0.5, iters=20000, tol=1e-12)
    np.testing.assert_allclose(Z_fast, Z_plain, atol=1e-7)
    fast = soft_impute(X0, M, lam=0.5, iters=60, tol=0.0)[2]
    assert np.linalg.norm(fast - Z_plain) < 0.5 * np.linalg.norm(plain(60) - Z_plain)


def test_ppca_missing_recovers_the_span_and_the_noise_variance():
    from streaming.linalg import ppca_missing

    rng = np.random.default_rng(5)
    V = orthonormalize(rng.standard_normal((30, 3)))
    X = rng.standard_normal((300, 3)) @ V.T * 3.0 + 0.1 * rng.standard_normal((300, 30))
    M = rng.random(X.shape) < 0.5
    L, v = ppca_missing(np.where(M, X, 0.0), M, rng.standard_normal((30, 3)), 1.0, iters=200)
    assert projection_distance(orthonormalize(L), V) < 0.02
    assert v == pytest.approx(0.01, rel=0.2)


def _replaced_class_error(cfg, **overrides):
    """Relative completion error of the replaced class's first 40 samples after the switch."""
    s = generate_stream(cfg)
    m = mosaic_variant(cfg.r, cfg.K, pretrain_restarts=2, seed=0, **overrides).fit(s.source_values)
    completed, _ = m.process(s.values, epoch=s.epoch)
    from streaming.evaluate import changed_classes

    k = int(changed_classes(s.bases, 1)[0])
    idx = np.flatnonzero((s.epoch == 1) & (s.labels == k))[:40]
    unobs = np.isnan(s.values[idx])
    err = np.where(unobs, completed[idx] - s.full[idx], 0.0)
    truth = np.where(unobs, s.full[idx], 0.0)
    return float(np.sqrt((err**2).sum() / (truth**2).sum()))


def test_posterior_provisional_completion_beats_abstaining_and_the_least_squares_estimator():
    # (40, 4, 3) at 40 % observed: a new rank-4 subspace needs n r / (m - r) = 13 samples to be
    # identified and is re-seeded after ~26; before that only the change buffer can complete it
    errs = {"posterior": [], "als": []}
    for seed in range(3):
        cfg = StreamConfig(n=40, r=4, K=3, obs_frac=0.4, epochs=2, samples_per_epoch=300, drift="abrupt",
                           source_per_class=60, seed=20 + seed)
        for est in errs:
            errs[est].append(_replaced_class_error(cfg, provisional_estimator=est))
    assert max(errs["posterior"]) < 0.9  # abstaining gives 1
    assert np.mean(errs["posterior"]) < np.mean(errs["als"])


def test_auto_provisional_estimator_follows_the_observed_count_per_rank():
    # m̄ = 40 of n = 100: rank 10 leaves observations to spare (posterior), rank 25 does not (ALS)
    for r, expected in ((10, "posterior"), (25, "als")):
        m = MoSAIC(r, 2, seed=0)
        started(m, orthonormalize(np.random.default_rng(0).standard_normal((2, 100, r))))  # n = 100
        m.stream_stats_.mean_m = 40.0
        assert m._provisional_settings()[0] == expected
        variant = mosaic_variant(r, 2, provisional_estimator="als")
        started(variant, m.bases_)
        variant.stream_stats_.mean_m = 40.0
        assert variant._provisional_settings()[0] == "als"
    with pytest.raises(InputError, match="provisional_estimator"):
        mosaic_variant(2, 2, provisional_estimator="ppca").partial_fit(np.ones((1, 10)))
    with pytest.raises(InputError, match="provisional_growth"):
        mosaic_variant(2, 2, provisional_growth=-1.0).partial_fit(np.ones((1, 10)))


def test_an_ill_conditioned_routed_fit_cannot_blow_up_the_completion():
    from streaming.experts import cap_completion

    n, r = 20, 2
    obs = np.arange(6)
    U = np.zeros((n, r))
    U[obs, 0], U[obs, 1] = 1e-3, np.linspace(-1e-3, 1e-3, obs.size)  # U_Ω nearly zero
    U[10, 0], U[11, 1] = 1.0, 1.0
    model = mosaic_variant(r, 1, seed=0, detect=False)
    started(model, orthonormalize(U)[None])
    x = np.full(n, np.nan)
    x[obs] = np.linspace(0.5, 1.5, obs.size)
    model.stream_stats_.entry_energy = 0.01  # below the sample's own mean square: the cap follows the sample
    budget = model.completion_cap * float(np.nansum(x**2)) / obs.size * (n - obs.size)
    uncapped = model.bases_[0] @ fit_observed(model.bases_[:1], obs, x[obs], model.ridge_)[0][0]
    assert float((np.delete(uncapped, obs) ** 2).sum()) > 100 * budget  # the fit extrapolates
    done = model.transform(x[None])[0]
    streamed, _ = model.process(x[None])
    for c in (done, streamed[0]):
        np.testing.assert_array_equal(c[obs], x[obs])
        assert float((np.delete(c, obs) ** 2).sum()) == pytest.approx(budget, rel=1e-9)
    np.testing.assert_allclose(done, streamed[0], rtol=1e-12)
    model.completion_cap = 0.0  # off: the extrapolated fit (of the bases after process's update) comes through
    raw = model.bases_[0] @ fit_observed(model.bases_[:1], obs, x[obs], model.ridge_)[0][0]
    assert float((np.delete(raw, obs) ** 2).sum()) > 100 * budget
    np.testing.assert_allclose(np.delete(model.transform(x[None])[0], obs), np.delete(raw, obs), rtol=1e-12)
    with pytest.raises(InputError, match="completion_cap"):
        mosaic_variant(2, 2, completion_cap=-1.0).partial_fit(np.ones((1, 10)))
    small = np.array([0.0, 0.1, 0.0])
    np.testing.assert_array_equal(cap_completion(small.copy(), np.array([1.0]), 3, 4.0), small)  # under the cap: unchanged


def _draw_unit(rng, U, labels):
    """Samples of the classes ``labels`` from bases ``U (K, n, r)`` with unit-norm coefficients (no
    near-zero sample whose residual is all noise), noise 0.01, 70 % observed (NaN elsewhere)."""
    n, r = U.shape[1:]
    w = rng.standard_normal((len(labels), r))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    x = np.einsum("nir,nr->ni", U[labels], w) + 0.01 * rng.standard_normal((len(labels), n))
    return np.where(rng.random(x.shape) < 0.7, x, np.nan)


@pytest.mark.parametrize("mode", ["detect", "always", "never"])
def test_epoch_reset_restarts_the_schedule_of_the_experts_that_moved(mode):
    rng = np.random.default_rng(21)
    n, r, K = 30, 3, 2
    U0 = orthonormalize(rng.standard_normal((K, n, r)))
    U1 = U0.copy()  # epoch 1: expert 0's subspace turns by 0.3 rad, expert 1's stays
    Q = rng.standard_normal((n, r))
    Q = orthonormalize(Q - U0[0] @ (U0[0].T @ Q))
    U1[0] = np.cos(0.3) * U0[0] + np.sin(0.3) * Q

    def draw(U, labels):
        return _draw_unit(rng, U, labels)

    m = mosaic_variant(r, K, epoch_reset=mode, pretrain_restarts=2, seed=0).fit(draw(U0, np.repeat([0, 1], 100)))
    moved = int(np.argmin([projection_distance(m.bases_[k], U0[0]) for k in range(K)]))
    still = 1 - moved
    m.process(draw(U0, np.tile([0, 1], 40)), epoch=0)
    t_before, updates_before = m.steps_.t.copy(), m.expert_stats_.n_updates.copy()
    m.process(draw(U1, np.tile([0, 1], 20)), epoch=1)
    updates = m.expert_stats_.n_updates - updates_before
    assert updates[still] == 20
    # the expert whose subspace did not move keeps its schedule unless every expert restarts
    assert m.steps_.t[still] == (20 if mode == "always" else t_before[still] + 20)
    if mode != "never":  # the moved one restarts at the epoch change, before its 5th update at the latest
        assert m.steps_.t[moved] <= updates[moved] < t_before[moved]
        assert not m.epochs_.pending.any()


def test_epoch_reset_rejects_unknown_modes():
    with pytest.raises(InputError, match="epoch_reset"):
        mosaic_variant(2, 2, epoch_reset="sometimes").partial_fit(np.ones((1, 10)))


@pytest.mark.parametrize("version", [1, 4, 6])
def test_a_checkpoint_of_an_older_version_is_refused_in_one_line(tmp_path, version):
    import json

    from common.errors import CheckpointError

    m = MoSAIC(2, 2, seed=0).partial_fit(np.ones((1, 12)))
    m.save_pretrained(tmp_path / "ckpt")
    cfg_path = tmp_path / "ckpt" / "config.json"
    meta = json.loads(cfg_path.read_text())
    meta["config_version"] = version
    cfg_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="retrain"):
        MoSAIC.from_pretrained(tmp_path / "ckpt")



def test_drift_floor_by_hand():
    from streaming.schedule import drift_floor

    # c · sqrt(level / ref - 1), capped at eta0; nothing while the expert fits as well as at pretraining
    assert drift_floor(0.3, 1.0, 2.0, 1.0) == pytest.approx(0.3)
    assert drift_floor(0.3, 1.0, 0.05, 0.01) == pytest.approx(0.6)  # sqrt(4) = 2
    assert drift_floor(0.3, 0.5, 0.05, 0.01) == 0.5
    assert drift_floor(0.3, 1.0, 0.01, 0.01) == drift_floor(0.3, 1.0, 0.005, 0.01) == 0.0
    assert drift_floor(0.0, 1.0, 0.05, 0.01) == 0.0


def _drifting_expert(drift_floor):
    """A model pretrained on two subspaces, then streamed (epochs withheld) on samples where expert
    ``moved``'s subspace has turned by 0.3 rad: ``(model, moved, still, next sample (n,) of the turned subspace)``."""
    rng = np.random.default_rng(22)
    n, r, K = 30, 3, 2
    U0 = orthonormalize(rng.standard_normal((K, n, r)))
    U1 = U0.copy()
    Q = rng.standard_normal((n, r))
    Q = orthonormalize(Q - U0[0] @ (U0[0].T @ Q))
    U1[0] = np.cos(0.3) * U0[0] + np.sin(0.3) * Q
    m = mosaic_variant(r, K, drift_floor=drift_floor, pretrain_restarts=2, seed=0).fit(
        _draw_unit(rng, U0, np.repeat([0, 1], 100)))
    moved = int(np.argmin([projection_distance(m.bases_[k], U0[0]) for k in range(K)]))
    m.process(_draw_unit(rng, U1, np.tile([0, 1], 30)))
    return m, moved, 1 - moved, _draw_unit(rng, U1, [0])[0]


def test_drift_floor_keeps_the_step_of_an_expert_that_fits_worse_than_at_pretraining():
    m, moved, still, _ = _drifting_expert(0.3)
    off, *_ = _drifting_expert(0.0)
    np.testing.assert_array_equal(m.steps_.level_ref, off.steps_.level_ref)
    np.testing.assert_array_equal(m.steps_.level_ref, np.maximum(m.steps_.level_ref, 1e-6))
    for mm in (m, off):
        for k in (moved, still):
            t = mm.steps_.t[k]
            sublinear = max(0.05, 1.0 / np.sqrt(1.0 + t / 6.0))  # eta0 = 1, tau = 2 r = 6
            excess = max(mm.expert_stats_.level[k] / mm.steps_.level_ref[k] - 1.0, 0.0)
            floor = min(1.0, mm.drift_floor * np.sqrt(excess))
            assert step_size(mm, k) == pytest.approx(max(sublinear, floor))
    # by hand: far into the schedule (sublinear step at eta_min 0.05), an expert at 5x its pretraining
    # level steps 0.3 · sqrt(4) = 0.6, one at its pretraining level 0.05; without the floor both 0.05
    for mm in (m, off):
        mm.steps_.t[:] = 10_000
        mm.expert_stats_.level[moved] = 5.0 * mm.steps_.level_ref[moved]
        mm.expert_stats_.level[still] = mm.steps_.level_ref[still]
    assert step_size(m, moved) == pytest.approx(0.6)
    assert step_size(m, still) == step_size(off, moved) == step_size(off, still) == 0.05


def test_drift_floor_tracks_a_rotation_without_epoch_information():
    from streaming.evaluate import nrmse_unobserved

    s = generate_stream(StreamConfig(n=30, r=3, K=3, obs_frac=0.4, drift="shared_rotation", angle_rad=0.2,
                                     epochs=4, samples_per_epoch=240, seed=5))
    base = MoSAIC(3, 3, pretrain_restarts=2, seed=0).fit(s.source_values)
    err = {}
    for c in (0.0, 0.3):
        m = copy.deepcopy(base)
        m.drift_floor = c
        err[c] = nrmse_unobserved(m.process(s.values)[0], s.full, s.values)
    assert err[0.3] < 0.9 * err[0.0]


def test_the_streamed_step_is_the_schedules_step_size():
    m, moved, still, x = _drifting_expert(0.3)
    idx = np.flatnonzero(~np.isnan(x))
    xo = x[idx]
    w, score = residual_scores(m.bases_, idx, xo, m.ridge_)
    k = int(score.argmin())
    assert k == moved and m.expert_stats_.n_updates[k] % 100 != 99  # no re-orthonormalisation after it
    assert step_size(m, k) > 1.0 / np.sqrt(1.0 + m.steps_.t[k] / 6.0)  # the drift floor sets this step
    U = m.bases_[k].copy()
    grouse_step(U, idx, xo, w[k], step_size(m, k))
    _, routed = m.process(x[None])
    assert routed[0] == k
    np.testing.assert_allclose(m.bases_[k], U, rtol=0, atol=1e-12)

