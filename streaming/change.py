"""MoSAIC's change detection: the buffer of novel samples, its provisional fit, and the re-seed fit.

A sample that no expert explains (``NOVELTY``, ``SPIKE_FACTOR``) goes to the ``ChangeBuffer``.
Until the buffer identifies a rank-``r`` subspace, its samples are completed by the
``ProvisionalFit`` of the buffer (the posterior mean under Soft-Impute, then probabilistic PCA; or a
shrunk least-squares fit where the mean observed count ``m̄ < PROVISIONAL_MIN_RATIO · r``); once the
buffer holds ``reseed_min`` samples, ``reseed_fit`` fits a rank-``r`` subspace that re-seeds an expert
(the choice of the expert is ``streaming.model.MoSAIC``'s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streaming.experts import cap_completion
from streaming.linalg import (
    TINY,
    als_subspace,
    batch_fit,
    fit_observed,
    orthonormalize,
    posterior_mean,
    ppca_missing,
    soft_impute,
)
from streaming.state import StateComponent

#: a sample is novel when its best score exceeds ``NOVELTY · (1 - r/m)`` and ``SPIKE_FACTOR`` × its
#: expert's level (constants chosen on tuning seeds)
NOVELTY = 0.3
SPIKE_FACTOR = 8.0
#: relative ridge of the ALS fits to the change buffer (``linalg.als_subspace``), and the iterations of a
#: change-buffer fit that has a start (ALS and the warm PPCA refits; cold fits run 10-30)
FIT_SHRINK = 0.05
WARM_ITERS = 5
#: the provisional posterior (Soft-Impute, then PPCA) needs a mean observed count m̄ >= this × r; below
#: it the least-squares ALS completion, used when its residual is < ``PROVISIONAL_ACCEPT`` × a random
#: subspace's
PROVISIONAL_MIN_RATIO = 2.25
PROVISIONAL_ACCEPT = 0.9


def identifiable_rank(n: int, r: int, m: float, s: int) -> int:
    """Largest rank ``q <= r`` whose unknowns, ``q (n - q)`` for an ``(n, q)`` subspace and ``s q``
    for the coefficients, ``s`` samples of ``m`` observed entries each can pin down."""
    q = 0
    while q < r and (q + 1) * (n - q - 1) + s * (q + 1) <= s * m:
        q += 1
    return q


def reseed_min(n: int, r: int, mean_m: float) -> int:
    """Buffer size that triggers a re-seed: enough observations to pin down ``n r`` unknowns."""
    dof = max(mean_m - r, 1.0)
    return int(np.ceil(2.0 * n * r / dof)) + r


@dataclass(slots=True)
class ChangeBuffer(StateComponent):
    """Novel samples (observed indices ``idx[j] (m_j,)``, values ``values[j] (m_j,)``, arrival counts
    ``stamps[j]``), the buffer size of the next re-seed try, the arrival count of the last novel
    sample, and the log of re-seeds ``(sample index, expert)``."""

    idx: list = field(default_factory=list)
    values: list = field(default_factory=list)
    stamps: list = field(default_factory=list)
    next_try: int = 0
    last_novel: int = -(10**12)
    reseeds: list = field(default_factory=list)

    json_decoders = {"reseeds": lambda v: [tuple(x) for x in v]}

    def __len__(self) -> int:
        return len(self.stamps)

    def append(self, idx: np.ndarray, xo: np.ndarray, stamp: int) -> None:
        self.idx.append(idx.copy())
        self.values.append(xo.copy())
        self.stamps.append(stamp)

    def keep(self, keep) -> None:
        """Keep the samples where ``keep`` (a sequence of bools, one per sample) is true."""
        sel = [j for j, ok in enumerate(keep) if ok]
        self.idx = [self.idx[j] for j in sel]
        self.values = [self.values[j] for j in sel]
        self.stamps = [self.stamps[j] for j in sel]

    def expire(self, oldest: int) -> None:
        """Forget samples that arrived before ``oldest``."""
        if self.stamps and self.stamps[0] < oldest:
            self.keep([t >= oldest for t in self.stamps])

    def arrays(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Zero-filled values ``X0 (B, n)`` and mask ``M (B, n)`` of the buffered samples."""
        X0 = np.zeros((len(self), n))
        M = np.zeros((len(self), n), bool)
        for j, (idx, xo) in enumerate(zip(self.idx, self.values, strict=True)):
            X0[j, idx] = xo
            M[j, idx] = True
        return X0, M

    def nbytes(self) -> int:
        return sum(i.nbytes + v.nbytes for i, v in zip(self.idx, self.values, strict=True))


@dataclass(slots=True)
class ProvisionalFit(StateComponent):
    """The fit of the change buffer that completes novel samples: the routing ``basis (n, q)``, the
    buffer size at its last refit ``at``, the probabilistic fit behind the posterior completion
    (``loadings (n, q)``, ``noise`` variance), and the last Soft-Impute solution of the buffer
    (arrival counts ``si_stamps (s,)``, ``si_Z (s, n)``), its warm start."""

    basis: np.ndarray | None = None
    at: int = 0
    loadings: np.ndarray | None = None
    noise: float | None = None
    si_stamps: np.ndarray | None = None
    si_Z: np.ndarray | None = None

    def reset(self) -> None:
        self.basis, self.loadings, self.noise, self.at = None, None, None, 0

    def fit_sample(self, idx: np.ndarray, xo: np.ndarray, m: int, n: int, ridge: float) -> tuple[float, np.ndarray | None]:
        """Fit of a sample under the provisional basis ``(n, q)``: its residual relative to what a
        random rank-q subspace leaves (``score / (1 - q/m)``), and a completion ``(n,)`` (0 on Ω).

        With a probabilistic fit (``"posterior"``, what ``"auto"`` uses where m̄ >= 2.25 r): the
        posterior mean under it, which shrinks what the buffer does not determine. Otherwise
        (``"als"``): the least-squares completion shrunk by the unexplained fraction, or None when
        ``rel >= PROVISIONAL_ACCEPT``. Either is capped at twice the sample's energy per observed
        entry: a fit to few samples can extrapolate."""
        U = self.basis
        q = U.shape[1]
        w, res = fit_observed(U[None], idx, xo, ridge)
        rel = float(res[0]) / max(float(xo @ xo), TINY) / max(1.0 - q / m, TINY)
        if self.loadings is not None:
            completion = posterior_mean(self.loadings, self.noise, idx, xo)
        elif rel >= PROVISIONAL_ACCEPT:
            return rel, None
        else:
            completion = (1.0 - rel) * (U @ w[0])
            completion[idx] = 0.0
        return rel, cap_completion(completion, xo, n, 2.0)

    def _soft_impute_start(self, buffer: ChangeBuffer, n: int) -> np.ndarray | None:
        """Warm start ``(s, n)`` of the buffer's Soft-Impute: the last solution's rows for the
        samples still buffered (matched by arrival count), zeros for the new ones."""
        if self.si_Z is None:
            return None
        row = {int(t): j for j, t in enumerate(self.si_stamps)}
        Z0 = np.zeros((len(buffer), n))
        for j, t in enumerate(buffer.stamps):
            if t in row:
                Z0[j] = self.si_Z[row[t]]
        return Z0

    def refit(self, buffer: ChangeBuffer, n: int, r: int, mean_m: float, estimator: str, growth: float,
              lam_rel: float, levels: np.ndarray, noise_seed: int) -> None:
        """Refit once the buffer has grown by ``growth`` (a fraction) since the last fit.

        With ``q = min(r, q_id)``, ``q_id`` the identifiable rank of the ``s`` buffered samples
        (``identifiable_rank``): while a rank-r subspace is still under-determined (``q_id < r``) the
        posterior comes from Soft-Impute of the buffer (threshold ``lam_rel · rms(x_Ω) sqrt(m̄)``: its
        directions, coefficient variances ``sv²/s`` and unexplained variance), which uses every
        direction the data supports, shrunk; once it is determined, from probabilistic PCA of rank r
        (EM, ``linalg.ppca_missing``, warm-started from the previous fit). The routing basis is a
        rank-q ALS fit started at the Soft-Impute directions, then the span of the PPCA loadings.
        ``estimator="als"``: a rank-q ALS fit only. The unexplained variance is never below what the
        other experts leave (the median of their residual levels ``levels (K,)``); ``noise_seed`` seeds the
        small random start of directions Soft-Impute shrank away."""
        B = len(buffer)
        if B < self.at:  # the buffer was trimmed (re-seed or a failed try): start again
            self.reset()
        if self.basis is not None and B < (1.0 + growth) * self.at:
            return
        if estimator == "als":  # its rank: the q (n + s) <= m̄ s count of earlier versions
            q_id = int(mean_m * B / (n + B))
        else:
            q_id = identifiable_rank(n, r, mean_m, B)
        q = min(r, q_id)
        if q < 1:
            return
        X0, M = buffer.arrays(n)
        self.at = B
        if estimator == "als":
            # warm-started from the previous fit (extended to rank q): the buffer grew by a fifth
            warm = self.basis if self.basis is not None and self.basis.shape[1] <= q else None
            iters = 10 if warm is None else WARM_ITERS
            self.basis = als_subspace(X0, M, q, U0=warm, iters=iters, shrink=FIT_SHRINK)
            self.loadings, self.noise = None, None
            return
        obs = max(int(M.sum()), 1)
        energy = float((X0 * X0).sum()) / obs
        # a fit to few samples also fits their noise: never trust an unexplained variance below
        # what the other experts leave on their samples
        floor = float(np.median(levels)) * energy / max(1.0 - r / mean_m, TINY)
        warm_ppca = q_id >= r and self.loadings is not None and self.loadings.shape[1] == r
        if warm_ppca:
            # warm start from the previous span, at the scale of the current buffer's energy
            L0, v0, iters = self.basis * math.sqrt(n * energy / r), self.noise, WARM_ITERS
        else:
            # tol 1e-3 (not 1e-4): on tuning seeds 1100-1102 it changed NRMSE by <= 1e-4 at a quarter less time
            V, sv, Z = soft_impute(X0, M, lam_rel * math.sqrt(energy * obs / B), tol=1e-3,
                                   Z0=self._soft_impute_start(buffer, n))
            self.si_stamps, self.si_Z = np.array(buffer.stamps, np.int64), Z
            v_si = max(energy - float((Z * Z).mean()), floor, 1e-6 * energy)
            L_si = V * (sv / math.sqrt(B))  # loadings of unit-variance scores
            if q_id < r:
                self.loadings, self.noise = (L_si, v_si) if sv.size else (None, None)
                warm = V[:, :q] if V.shape[1] >= q else None
                self.basis = als_subspace(X0, M, q, U0=warm, iters=WARM_ITERS, shrink=FIT_SHRINK)
                return
            L0 = np.zeros((n, r))
            k = min(r, L_si.shape[1])
            L0[:, :k] = L_si[:, :k]
            if k < r:  # directions Soft-Impute shrank away start small and random
                noise = np.random.default_rng(noise_seed).standard_normal((n, r - k))
                L0[:, k:] = 1e-3 * math.sqrt(energy) * noise
            v0, iters = v_si, 30
        L, v = ppca_missing(X0, M, L0, v0, iters=iters)
        self.loadings, self.noise = L, max(v, floor, 1e-6 * energy)
        self.basis = orthonormalize(L)


def reseed_fit(X0: np.ndarray, M: np.ndarray, r: int, warm: np.ndarray | None):
    """Rank-r ALS fit ``(n, r)`` of buffered samples ``X0, M (B, n)`` (a re-seed), from ``warm``
    (``WARM_ITERS`` iterations) or cold (15), trimmed to its best-fitting 60 % (twice at most)
    while < 90 % of the buffer are inliers, then refit on all inliers. Returns the basis, each
    sample's normalised residual ``(B,)`` and the inlier mask (residual < half the novelty
    threshold)."""
    energy = np.maximum((X0 * X0).sum(1), TINY)
    base = 1.0 - r / M.sum(1)
    U = als_subspace(X0, M, r, U0=warm, iters=15 if warm is None else WARM_ITERS, shrink=FIT_SHRINK)

    def fit_scores(U):
        _, res = batch_fit(U[None], X0, M)
        score = res[:, 0] / energy
        return score, score < 0.5 * NOVELTY * base

    score, inlier = fit_scores(U)
    for _ in range(2):  # a buffer mixing several changes: trim to the samples that fit best
        if inlier.mean() >= 0.9:
            break
        keep = score <= np.quantile(score, 0.6)
        U = als_subspace(X0[keep], M[keep], r, U0=U, iters=WARM_ITERS, shrink=FIT_SHRINK)
        score, inlier = fit_scores(U)
    # refit on all inliers: a trimmed subset may leave rows of U seen too rarely to be determined
    if inlier.sum() > r and not inlier.all():
        U = als_subspace(X0[inlier], M[inlier], r, U0=U, iters=WARM_ITERS, shrink=FIT_SHRINK)
        score, inlier = fit_scores(U)
    return U, score, inlier
