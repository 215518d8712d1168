"""Metrics, baselines and pretraining on small cases with independently known answers."""

import numpy as np
import pytest

from streaming.baselines import Grouse, KGrouse, Petrels, oracle_completion
from streaming.data import StreamConfig, generate_stream
from streaming.evaluate import (
    nrmse_unobserved,
    per_sample_nrmse,
    recovery_times,
    routing_accuracy,
    subspace_error,
    summarize,
)
from streaming.harness import run_online
from streaming.kss import k_subspaces_missing, refine, repair_clusters
from streaming.linalg import als_subspace, batch_fit, orthonormalize, projection_distance, random_bases
from streaming.model import MoSAIC


def test_subspace_error_is_permutation_invariant_and_reports_the_match():
    rng = np.random.default_rng(0)
    U = random_bases(rng, 4, 15, 3)
    perm = np.array([2, 0, 3, 1])
    err, per, match = subspace_error(U[perm], U)
    assert err == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_array_equal(perm[match], np.arange(4))


def test_subspace_error_of_orthogonal_subspaces_is_one():
    U = np.eye(6)[:, :3][None]
    V = np.eye(6)[:, 3:][None]
    assert subspace_error(U, V)[0] == pytest.approx(1.0)


def test_routing_accuracy_matches_experts_to_classes_per_epoch():
    labels = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    routes = np.array([1, 1, 0, 0, 0, 0, 1, 0])  # epoch 0 perfectly permuted, epoch 1 one error
    epoch = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert routing_accuracy(routes, labels, epoch) == pytest.approx(7 / 8)


def test_nrmse_by_hand():
    full = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 1.0]])
    values = np.array([[1.0, np.nan, 3.0], [np.nan, 0.0, np.nan]])
    completed = np.array([[1.0, 1.0, 3.0], [4.0, 0.0, 3.0]])
    # unobserved: (2 -> 1), (4 -> 4), (1 -> 3): errors 1, 0, 4; energy 4 + 16 + 1
    assert nrmse_unobserved(completed, full, values) == pytest.approx(np.sqrt(5 / 21))
    np.testing.assert_allclose(per_sample_nrmse(completed, full, values), [0.5, np.sqrt(4 / 17)])


def test_recovery_time_counts_affected_class_samples():
    bases = np.zeros((2, 2, 4, 1))
    bases[0, 0, 0, 0] = bases[0, 1, 1, 0] = bases[1, 1, 1, 0] = 1.0
    bases[1, 0, 2, 0] = 1.0  # class 0 replaced at the drift
    labels = np.tile([0, 1], 80)
    epoch = np.repeat([0, 1], 80)
    err = np.full(160, 0.05)
    cls0_after = np.flatnonzero((labels == 0) & (epoch == 1))
    err[cls0_after[:15]] = 1.0  # bad for the first 15 class-0 samples after the drift
    rec = recovery_times(err, labels, epoch, bases, threshold=0.25, window=10)
    assert len(rec) == 1 and rec[0]["classes"] == [0]
    # rolling median over 10 drops to 0.05 once at least 6 of the last 10 are good: sample 15 + 6 = 21
    assert rec[0]["recovery_samples"] == 21


def test_k_subspaces_missing_recovers_separated_subspaces():
    cfg = StreamConfig(n=30, r=3, K=4, obs_frac=0.5, noise_std=0.01, epochs=1, samples_per_epoch=10,
                       source_per_class=80, seed=1)
    s = generate_stream(cfg)
    M = ~np.isnan(s.source_values)
    res = k_subspaces_missing(np.where(M, s.source_values, 0.0), M, 4, 3, restarts=2, seed=0)
    assert subspace_error(res.bases, s.bases[0])[0] < 0.05
    assert routing_accuracy(res.labels, s.source_labels) > 0.98


def test_repair_clusters_refits_a_cluster_pulled_by_a_few_foreign_samples():
    cfg = StreamConfig(n=30, r=3, K=3, obs_frac=0.35, noise_std=0.01, epochs=1, samples_per_epoch=10,
                       source_per_class=80, seed=0)
    s = generate_stream(cfg)
    M = ~np.isnan(s.source_values)
    X0 = np.where(M, s.source_values, 0.0)
    energy = (X0 * X0).sum(1)
    B = s.bases[0]
    labels = s.source_labels.copy()
    foreign = np.flatnonzero(labels == 1)[:3]
    labels[foreign] = 0  # three class-1 samples sit in cluster 0
    # the self-consistent defect: one of cluster 0's directions fitted to the foreign samples, and
    # ALS of the contaminated cluster from there stays put
    F = als_subspace(X0[foreign], M[foreign], 1, iters=10)
    U = B.copy()
    U[0] = als_subspace(X0[labels == 0], M[labels == 0], 3, U0=orthonormalize(np.concatenate([B[0][:, :2], F], 1)), iters=30)
    assert projection_distance(U[0], B[0]) > 0.3
    _, res = batch_fit(U, X0, M)
    score = res[np.arange(len(labels)), labels] / energy
    V, replaced = repair_clusters(U, X0, M, energy, labels, score, np.random.default_rng(0))
    assert replaced == [0]
    assert projection_distance(V[0], B[0]) < 0.05
    np.testing.assert_array_equal(V[1:], U[1:])
    V, new_labels, _ = refine(V, X0, M, energy, 10)
    assert (new_labels[foreign] == 1).all() and projection_distance(V[0], B[0]) < 0.02
    # a clean clustering is left alone
    _, res = batch_fit(B, X0, M)
    true = s.source_labels
    W, replaced = repair_clusters(B, X0, M, energy, true, res[np.arange(len(true)), true] / energy, np.random.default_rng(0))
    assert replaced == [] and np.array_equal(W, B)


@pytest.mark.parametrize("make", [lambda n, r: Grouse(n, r, eta=0.5), lambda n, r: Petrels(n, r)])
def test_single_subspace_trackers_converge_on_one_subspace(make):
    cfg = StreamConfig(n=30, r=3, K=1, obs_frac=0.5, noise_std=0.01, epochs=1, samples_per_epoch=1500,
                       drift="none", source_per_class=10, seed=3)
    s = generate_stream(cfg)
    run = run_online(make(30, 3), s.values)
    last = slice(1000, None)
    assert nrmse_unobserved(run.completed[last], s.full[last], s.values[last]) < 0.05


def test_oracle_completion_is_exact_without_noise():
    cfg = StreamConfig(n=20, r=3, K=3, obs_frac=0.5, noise_std=0.0, epochs=2, samples_per_epoch=50,
                       source_per_class=10, seed=4)
    s = generate_stream(cfg)
    out = oracle_completion(s.values, s.labels, s.epoch, s.bases)
    np.testing.assert_allclose(out, s.full, atol=1e-6)


def test_mosaic_recovers_abruptly_replaced_subspace_quickly_and_beats_kgrouse():
    cfg = StreamConfig(n=40, r=3, K=4, obs_frac=0.5, noise_std=0.02, epochs=2, samples_per_epoch=1200,
                       drift="abrupt", n_replace=1, seed=6)
    s = generate_stream(cfg)
    mosaic = MoSAIC(3, 4, pretrain_restarts=2).fit(s.source_values)
    run = run_online(mosaic, s.values, s.epoch)
    row = summarize(s, run.completed, run.routes)
    assert len(mosaic.reseeds_) >= 1
    assert row["recovered_frac"] == 1.0 and row["recovery_mean"] <= 100
    assert subspace_error(mosaic.bases_, s.bases[-1])[0] < 0.05
    kg = run_online(KGrouse(3, 4, eta=0.3), s.values, s.epoch)
    assert row["nrmse"] < summarize(s, kg.completed, kg.routes)["nrmse"]
