"""k-subspaces with missing data: MoSAIC's pretraining algorithm and its seeding and repair steps.

Samples are zero-filled ``X0 (S, n)`` with their mask ``M (S, n)`` (True = observed); the result is
``K`` orthonormal bases ``(K, n, r)``, hard labels and each sample's normalised residual. Routing
(the hard assignment) goes through ``moe.route_by_score`` on ``device`` (None: the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from streaming.experts import route_scores
from streaming.linalg import (
    RIDGE,
    TINY,
    als_subspace,
    batch_fit,
    mppca_missing,
    orthonormalize,
)


@dataclass
class KSSResult:
    """Result of k-subspaces: ``bases (K, n, r)``, hard ``labels (S,)``, each sample's normalised
    residual under its subspace ``scores (S,)`` and their total ``cost``."""

    bases: np.ndarray
    labels: np.ndarray
    scores: np.ndarray
    cost: float


def _assign(U: np.ndarray, X0: np.ndarray, M: np.ndarray, energy: np.ndarray,
            device: torch.device | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Hard assignment of every sample to its best subspace (``route_scores`` on ``device``)."""
    _, res = batch_fit(U, X0, M)
    score = res / energy[:, None]
    labels = route_scores(score, device)
    return labels, score[np.arange(len(labels)), labels]


def kmeans(V: np.ndarray, K: int, rng: np.random.Generator, n_init: int = 10, iters: int = 100) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding on rows of ``V (N, d)``; best of ``n_init`` runs.
    Returns labels ``(N,)``."""
    best, best_cost = None, np.inf
    sq = (V * V).sum(1)
    for _ in range(n_init):
        centers = [V[rng.integers(len(V))]]
        for _ in range(1, K):
            d2 = np.min([((V - c) ** 2).sum(1) for c in centers], axis=0)
            p = d2 / d2.sum() if d2.sum() > 0 else None
            centers.append(V[rng.choice(len(V), p=p)])
        C = np.array(centers)
        labels = None
        for _ in range(iters):
            D = sq[:, None] - 2 * V @ C.T + (C * C).sum(1)[None]
            new = D.argmin(1)
            if labels is not None and (new == labels).all():
                break
            labels = new
            for k in range(K):
                if (labels == k).any():
                    C[k] = V[labels == k].mean(0)
        cost = float(D[np.arange(len(V)), labels].sum())
        if cost < best_cost:
            best, best_cost = labels, cost
    return best


def spectral_seed(
    X0: np.ndarray, M: np.ndarray, K: int, r: int, rng: np.random.Generator, max_samples: int = 2000
) -> np.ndarray:
    """Initial bases ``(K, n, r)`` from spectral clustering of co-observed affinities.

    The affinity of samples i, j with co-observed set C = Ω_i ∩ Ω_j is ``a_ij = |C| · cos²(x_{i,C},
    x_{j,C})``: larger in expectation within a subspace than across, even when |C| < r. The top-K
    eigenvectors of ``D^{-1/2} A D^{-1/2}`` over at most ``max_samples`` samples are clustered by
    k-means and each cluster's subspace is fitted by ALS.
    """
    from scipy.sparse.linalg import ArpackError, eigsh

    S = X0.shape[0]
    pick = np.sort(rng.choice(S, size=min(S, max_samples), replace=False))
    X, Mf = X0[pick], M[pick].astype(float)
    G = X @ X.T
    norms = (X * X) @ Mf.T  # norms[i, j] = ||x_i restricted to Ω_i ∩ Ω_j||²
    A = G**2 / np.maximum(norms * norms.T, TINY) * (Mf @ Mf.T)
    np.fill_diagonal(A, 0.0)
    d = np.maximum(A.sum(1), TINY)
    with np.errstate(invalid="ignore", under="ignore"):
        L = A / np.sqrt(d[:, None] * d[None, :])
    L[np.isnan(L)] = 0.0  # a sample with no energy (all observed values 0): no affinity (0/0)
    if K == 1:
        labels = np.zeros(len(pick), int)
    else:
        v0 = np.full(len(pick), 1.0 / np.sqrt(len(pick)))
        try:
            _, V = eigsh(L, k=K, which="LA", v0=v0)
        except ArpackError:  # no Arnoldi factorization (tiny or degenerate affinities): the dense solver
            V = np.linalg.eigh(L)[1][:, -K:]
        V /= np.maximum(np.linalg.norm(V, axis=1, keepdims=True), TINY)
        labels = kmeans(V, K, rng)
    U = np.empty((K, X0.shape[1], r))
    for k in range(K):
        sel = labels == k
        if sel.sum() < r:  # degenerate cluster: random directions, fixed by refinement
            U[k] = orthonormalize(rng.standard_normal((X0.shape[1], r)))
        else:
            U[k] = als_subspace(X[sel], M[pick][sel], r, iters=10)
    return U


def mppca_seed(
    U0: np.ndarray, X0: np.ndarray, M: np.ndarray, rng: np.random.Generator, iters: int = 40,
    anneal: float = 4.0, max_samples: int = 2000,
) -> np.ndarray:
    """Bases ``(K, n, r)`` from a mixture of probabilistic PCA fitted by annealed EM
    (``linalg.mppca_missing``) to at most ``max_samples`` samples, started at the bases ``U0``. Soft
    assignments move samples between clusters that hard k-subspaces leaves mixed (at m/r ≈ 2–3)."""
    S, n = X0.shape
    K, _, r = U0.shape
    pick = np.sort(rng.choice(S, size=min(S, max_samples), replace=False))
    X, Ms = X0[pick], M[pick]
    energy = float((X * X).sum()) / max(int(Ms.sum()), 1)
    L, _, _ = mppca_missing(X, Ms, U0 * np.sqrt(n * energy / r), 0.1 * energy, iters=iters, anneal=anneal)
    return orthonormalize(L)


def refine(
    U: np.ndarray, X0: np.ndarray, M: np.ndarray, energy: np.ndarray, iters: int, tol: float = 1e-3,
    device: torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch k-subspaces: alternate hard assignment and per-cluster ALS until at most a fraction ``tol``
    of the labels changes; an expert left with fewer than ``2r`` samples is re-seeded on the worst-fitting
    samples."""
    K, _, r = U.shape
    U = U.copy()
    labels = None
    for _ in range(iters):
        new, score = _assign(U, X0, M, energy, device)
        if labels is not None and (new != labels).mean() <= tol:
            break
        labels = new
        for k in range(K):
            sel = labels == k
            if sel.sum() < 2 * r:
                worst = np.argsort(-score)[: max(4 * r, len(labels) // (2 * K))]
                sel = np.zeros_like(sel)
                sel[worst] = True
                U[k] = als_subspace(X0[sel], M[sel], r, iters=5)
                continue
            U[k] = als_subspace(X0[sel], M[sel], r, U0=U[k], iters=3)
    labels, score = _assign(U, X0, M, energy, device)
    return U, labels, score


def repair_clusters(
    U: np.ndarray, X0: np.ndarray, M: np.ndarray, energy: np.ndarray, labels: np.ndarray, score: np.ndarray,
    rng: np.random.Generator, factor: float = 3.0, subsets: int = 8,
) -> tuple[np.ndarray, list[int]]:
    """Refit the experts whose cluster fits far worse than the others' (median normalised residual
    above ``factor`` × the median over experts), robustly to a few samples of another class: those can
    hold one direction of the ALS fit, a local minimum that more iterations do not leave. Candidates: a
    cold fit of the whole cluster and of ``subsets`` random halves (a half misses the few foreign
    samples with fair probability); the lowest **median** residual over the cluster wins if it beats
    the expert. Returns the bases ``(K, n, r)`` and the experts replaced."""
    K, _, r = U.shape
    med = np.array([np.median(score[labels == k]) if (labels == k).any() else np.nan for k in range(K)])
    ref = float(np.nanmedian(med))
    U = U.copy()
    replaced = []
    for k in np.flatnonzero(med > factor * ref):
        sel = np.flatnonzero(labels == k)
        if sel.size < 4 * r:
            continue
        Xk, Mk, ek = X0[sel], M[sel], energy[sel]
        cands = [als_subspace(Xk, Mk, r, iters=30)]
        for _ in range(subsets):
            half = rng.random(sel.size) < 0.5
            if half.sum() >= 2 * r:
                cands.append(als_subspace(Xk[half], Mk[half], r, iters=30))
        meds = [float(np.median(batch_fit(V[None], Xk, Mk)[1][:, 0] / ek)) for V in cands]
        best = int(np.argmin(meds))
        if meds[best] < med[k]:
            U[k] = cands[best]
            replaced.append(int(k))
    return U, replaced


def k_subspaces_missing(
    X0: np.ndarray,
    M: np.ndarray,
    K: int,
    r: int,
    restarts: int = 6,
    iters: int = 30,
    seed: int = 0,
    repair_rounds: int = 2,
    device: torch.device | None = None,
) -> KSSResult:
    """k-subspaces with missing data (cf. Balzano et al., 2012) on ``X0 (S, n)`` zero-filled samples with
    their ``M (S, n)`` bool mask.

    The first restart is seeded by spectral clustering of co-observed affinities (``spectral_seed``);
    the later ones by annealed mixture-of-PPCA EM (``mppca_seed``) started at that spectral seed
    (second restart), then alternately at the best solution so far (it keeps improving a partly
    separated one) and at a fresh spectral seed (another k-means draw). Each is refined by batch
    k-subspaces (``refine``); restarts stop at the first clean solution (almost every sample explained
    far better than by a random subspace), so a generous ``restarts`` costs only where the clusters are
    hard to separate. The lowest total normalised residual wins; then, up to ``repair_rounds`` times,
    an expert whose cluster fits far worse than the others is refitted robustly (``repair_clusters``)
    and the refinement rerun, kept if it lowers the total. The routing runs on ``device`` (None: the CPU).
    """
    rng = np.random.default_rng(seed)
    energy = np.maximum((X0 * X0).sum(1), TINY)
    base = np.maximum(1.0 - r / np.maximum(M.sum(1), 1), 0.0)  # residual left by a random subspace
    best: KSSResult | None = None
    for rs in range(max(1, restarts)):
        if rs == 0:
            U = spectral_U = spectral_seed(X0, M, K, r, rng)
        else:
            if rs == 1:
                start = spectral_U
            elif rs % 2 == 0:
                start = best.bases
            else:
                start = spectral_seed(X0, M, K, r, rng)
            U = mppca_seed(start, X0, M, rng)
        U, labels, score = refine(U, X0, M, energy, iters, device=device)
        cost = float(score.sum())
        if best is None or cost < best.cost:
            best = KSSResult(U, labels, score, cost)
        # a clean solution cannot be improved by further restarts
        if np.mean(score < 0.15 * base) >= 0.95:
            break
    repair_rng = np.random.default_rng([seed, 1])
    for _ in range(repair_rounds):
        U, replaced = repair_clusters(best.bases, X0, M, energy, best.labels, best.scores, repair_rng)
        if not replaced:
            break
        U, labels, score = refine(U, X0, M, energy, iters, device=device)
        if float(score.sum()) >= best.cost:
            break
        best = KSSResult(U, labels, score, float(score.sum()))
    return best


def map_ridge(bases: np.ndarray, X0: np.ndarray, M: np.ndarray, labels: np.ndarray) -> float:
    """Wiener / MAP ridge ``λ = σ̂² / var(w)`` of the least-squares fits for ``x = U w + ε``.

    ``bases (K, n, r)``, samples ``X0, M (S, n)`` with their experts ``labels (S,)``: the noise
    variance per entry is estimated from the residuals (dof ``m - r``) and ``var(w)`` from the
    fitted coefficients; ``RIDGE`` for noise-free data, so exact recovery stays exact."""
    r = bases.shape[2]
    W, res = batch_fit(bases, X0, M)
    rows = np.arange(len(labels))
    m = M.sum(1)
    ok = m > r
    if not ok.any():
        return RIDGE
    noise_var = float(np.median(res[rows, labels][ok] / (m[ok] - r)))
    w_var = float(np.mean(W[rows, labels][ok] ** 2))
    return max(RIDGE, noise_var / max(w_var, TINY))
