"""Metrics: subspace error (matched experts), routing accuracy, completion NRMSE, recovery time."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from streaming.linalg import projection_distance

RECOVERY_THRESHOLD = 0.25  # per-sample NRMSE on the unobserved entries that counts as "recovered"
RECOVERY_WINDOW = 10  # rolling median over this many samples of the affected classes


def subspace_error(estimated: np.ndarray, true: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean projection distance after matching experts to true subspaces.

    ``estimated (K', n, r')``, ``true (K, n, r)``. The cost matrix ``D[i, j] =
    projection_distance(true_i, est_j)`` is matched with ``linear_sum_assignment``; true
    subspaces left unmatched (``K' < K``) count as error 1. Returns ``(mean, per_true (K,),
    match (K,))`` with ``match[i]`` the expert assigned to true subspace ``i`` (−1 if none).
    """
    K = true.shape[0]
    D = np.array([[projection_distance(t, e) for e in estimated] for t in true])
    rows, cols = linear_sum_assignment(D)
    per = np.ones(K)
    match = np.full(K, -1)
    per[rows] = D[rows, cols]
    match[rows] = cols
    return float(per.mean()), per, match


def routing_accuracy(routes: np.ndarray, labels: np.ndarray, epoch: np.ndarray | None = None) -> float:
    """Fraction of samples whose expert agrees with their class, after matching experts to
    classes (``linear_sum_assignment`` on the confusion matrix) separately in each epoch, so an
    expert re-seeded onto a new subspace is not penalised for its old label."""
    routes, labels = np.asarray(routes), np.asarray(labels)
    if (routes < 0).all():
        return float("nan")
    epoch = np.zeros_like(labels) if epoch is None else np.asarray(epoch)
    correct = 0
    for e in np.unique(epoch):
        sel = epoch == e
        C = np.zeros((labels.max() + 1, max(routes.max(), 0) + 1))
        np.add.at(C, (labels[sel], routes[sel]), 1)
        rows, cols = linear_sum_assignment(-C)
        correct += C[rows, cols].sum()
    return float(correct / len(labels))


def nrmse_unobserved(completed: np.ndarray, full: np.ndarray, values: np.ndarray) -> float:
    """``sqrt(Σ_unobs (x̂ − x)² / Σ_unobs x²)`` over all unobserved entries (NaN when none)."""
    hidden = np.isnan(values)
    denom = float((full[hidden] ** 2).sum())
    if denom == 0:
        return float("nan")
    return float(np.sqrt(((completed[hidden] - full[hidden]) ** 2).sum() / denom))


def per_sample_nrmse(completed: np.ndarray, full: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``(T,)`` per-sample NRMSE on its unobserved entries (NaN for fully observed samples)."""
    hidden = np.isnan(values)
    err = np.where(hidden, (completed - full) ** 2, 0.0).sum(1)
    den = np.where(hidden, full**2, 0.0).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(err / den)


def changed_classes(bases: np.ndarray, e: int, tol: float = 1e-6) -> np.ndarray:
    """Classes whose subspace changed between epochs ``e-1`` and ``e``."""
    return np.array([k for k in range(bases.shape[1]) if projection_distance(bases[e - 1, k], bases[e, k]) > tol], int)


def recovery_times(
    err: np.ndarray, labels: np.ndarray, epoch: np.ndarray, bases: np.ndarray,
    threshold: float = RECOVERY_THRESHOLD, window: int = RECOVERY_WINDOW,
) -> list[dict]:
    """Recovery after each drift point: the number of samples of the classes whose subspace changed
    until the rolling median (``window``) of their per-sample NRMSE ``err (T,)`` first drops to
    ``threshold`` (``nan`` if it never does), also counted in stream samples (``stream_samples``)."""
    out = []
    starts = np.flatnonzero(np.diff(epoch) != 0) + 1
    for t0 in starts:
        e = int(epoch[t0])
        cls = changed_classes(bases, e)
        if cls.size == 0:
            continue
        t1 = np.flatnonzero(epoch == e)[-1] + 1
        pos = t0 + np.flatnonzero(np.isin(labels[t0:t1], cls))
        e_cls = err[pos]
        rec, stream = float("nan"), float("nan")
        for i in range(window, len(e_cls) + 1):
            if np.nanmedian(e_cls[i - window : i]) <= threshold:
                rec, stream = float(i), float(pos[i - 1] - t0 + 1)
                break
        out.append({"drift_at": int(t0), "classes": cls.tolist(), "recovery_samples": rec, "stream_samples": stream})
    return out


def summarize(stream, completed: np.ndarray, routes: np.ndarray | None) -> dict:
    """All metrics of one completion ``(T, n)`` of a stream (keys are the CSV columns)."""
    row: dict = {}
    row["nrmse"] = nrmse_unobserved(completed, stream.full, stream.values) if stream.full is not None else float("nan")
    if stream.full is not None and stream.epoch is not None:
        last = stream.epoch == stream.epoch.max()
        row["nrmse_last_epoch"] = nrmse_unobserved(completed[last], stream.full[last], stream.values[last])
    routed = routes is not None and stream.labels is not None and (np.asarray(routes) >= 0).any()
    row["routing_acc"] = routing_accuracy(routes, stream.labels, stream.epoch) if routed else float("nan")
    if stream.full is not None and stream.bases is not None and stream.labels is not None:
        rec = recovery_times(per_sample_nrmse(completed, stream.full, stream.values), stream.labels, stream.epoch, stream.bases)
        vals = [r["recovery_samples"] for r in rec]
        row["recovery_mean"] = float(np.mean(vals)) if vals and np.isfinite(vals).all() else float("nan")
        row["recovered_frac"] = float(np.mean(np.isfinite(vals))) if vals else float("nan")
    return row
