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
ALS_COLD_ITERS = 10  # a provisional ALS fit without a start
PPCA_COLD_ITERS = 30  # a PPCA fit started at Soft-Impute's loadings
#: the provisional posterior (Soft-Impute, then PPCA) needs a mean observed count m̄ >= this × r; below
#: it the least-squares ALS completion, used when its residual is < ``PROVISIONAL_ACCEPT`` × a random
#: subspace's
PROVISIONAL_MIN_RATIO = 2.25
PROVISIONAL_ACCEPT = 0.9
#: the provisional fit is refit when the buffer has grown by this fraction (posterior, ALS)
POSTERIOR_GROWTH = 0.05
ALS_GROWTH = 0.2
#: Soft-Impute threshold of the under-determined buffer, × rms(x_Ω) sqrt(m̄)
PROVISIONAL_LAMBDA = 0.1
#: the change window: at least this many samples (and K × the re-seed size)
MIN_WINDOW = 50


def identifiable_rank(n: int, r: int, m: float, s: int) -> int:
    """Largest rank ``q <= r`` whose unknowns, ``q (n - q)`` for an ``(n, q)`` subspace and ``s q``
    for the coefficients, ``s`` samples of ``m`` observed entries each can pin down."""
    q = 0
    while q < r and (q + 1) * (n - q - 1) + s * (q + 1) <= s * m:
        q += 1
    return q


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
        """A sample's residual under the provisional basis ``(n, q)`` relative to a random rank-q
        subspace's (``score / (1 - q/m)``) and its completion ``(n,)`` (0 on Ω): the posterior mean
        when there are ``loadings``, else the least-squares completion shrunk by the unexplained
        fraction (None when ``rel >= PROVISIONAL_ACCEPT``); capped at twice the sample's energy per
        entry (a fit to few samples can extrapolate)."""
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

    def due(self, size: int, growth: float) -> bool:
        """Whether a buffer of ``size`` samples needs a refit: it grew by ``growth`` (a fraction) since
        the last fit, or was trimmed (a re-seed or a failed try), which starts the fit over."""
        if size < self.at:
            self.reset()
        return self.basis is None or size >= (1.0 + growth) * self.at

    def refit(self, buffer: ChangeBuffer, n: int, r: int, mean_m: float, estimator: str, lam_rel: float,
              floor_level: float, noise_seed: int) -> None:
        """Refit to the ``buffer`` of ``n``-dimensional samples (mean observed count ``mean_m``).

        ``q_id``: the identifiable rank of the ``s`` buffered samples. While ``q_id < r`` the posterior
        comes from Soft-Impute of the buffer (threshold ``lam_rel · rms(x_Ω) sqrt(m̄)``) and the routing
        basis is a rank-``q_id`` ALS fit started at its directions; then from rank-r probabilistic PCA
        (``linalg.ppca_missing``, warm-started from the previous fit) and the span of its loadings.
        ``estimator="als"``: a rank-q ALS fit only. The unexplained variance is never below
        ``floor_level`` (the other experts' median level) × the entry energy; ``noise_seed`` seeds the
        random start of the directions Soft-Impute shrank away."""
        B = len(buffer)
        # the ALS rank: the q (n + s) <= m̄ s count of earlier versions
        q_id = int(mean_m * B / (n + B)) if estimator == "als" else identifiable_rank(n, r, mean_m, B)
        q = min(r, q_id)
        if q < 1:
            return
        X0, M = buffer.arrays(n)
        self.at = B
        if estimator == "als":
            self._fit_als(X0, M, q)
            return
        obs = max(int(M.sum()), 1)
        energy = float((X0 * X0).sum()) / obs
        # a fit to few samples also fits their noise: never trust an unexplained variance below
        # what the other experts leave on their samples
        floor = floor_level * energy / max(1.0 - r / mean_m, TINY)
        if q_id >= r and self.loadings is not None and self.loadings.shape[1] == r:
            # warm start from the previous span, at the scale of the current buffer's energy
            L0, v0, iters = self.basis * math.sqrt(n * energy / r), self.noise, WARM_ITERS
        else:
            V, L_si, v_si = self._soft_impute(buffer, X0, M, lam_rel * math.sqrt(energy * obs / B), energy, floor)
            if q_id < r:
                self.loadings, self.noise = (L_si, v_si) if L_si.shape[1] else (None, None)
                warm = V[:, :q] if V.shape[1] >= q else None
                self.basis = als_subspace(X0, M, q, U0=warm, iters=WARM_ITERS, shrink=FIT_SHRINK)
                return
            L0, v0, iters = _ppca_start(L_si, r, energy, noise_seed), v_si, PPCA_COLD_ITERS
        L, v = ppca_missing(X0, M, L0, v0, iters=iters)
        self.loadings, self.noise = L, max(v, floor, 1e-6 * energy)
        self.basis = orthonormalize(L)

    def _fit_als(self, X0: np.ndarray, M: np.ndarray, q: int) -> None:
        """The ALS estimator: a rank-``q`` fit, warm-started from the previous one (extended to rank q)."""
        warm = self.basis if self.basis is not None and self.basis.shape[1] <= q else None
        self.basis = als_subspace(X0, M, q, U0=warm, iters=ALS_COLD_ITERS if warm is None else WARM_ITERS,
                                  shrink=FIT_SHRINK)
        self.loadings, self.noise = None, None

    def _soft_impute(self, buffer: ChangeBuffer, X0: np.ndarray, M: np.ndarray, lam: float, energy: float,
                     floor: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Soft-Impute of the buffer ``X0, M (s, n)`` at threshold ``lam``, warm-started from the last
        solution (which it replaces): its directions ``V (n, k)``, loadings of unit-variance scores
        ``V sv / sqrt(s)`` and unexplained variance (at least ``floor``)."""
        # tol 1e-3 (not 1e-4): on tuning seeds 1100-1102 it changed NRMSE by <= 1e-4 at a quarter less time
        V, sv, Z = soft_impute(X0, M, lam, tol=1e-3, Z0=self._soft_impute_start(buffer, X0.shape[1]))
        self.si_stamps, self.si_Z = np.array(buffer.stamps, np.int64), Z
        v_si = max(energy - float((Z * Z).mean()), floor, 1e-6 * energy)
        return V, V * (sv / math.sqrt(len(buffer))), v_si


def _ppca_start(L_si: np.ndarray, r: int, energy: float, noise_seed: int) -> np.ndarray:
    """PPCA's start ``(n, r)``: the Soft-Impute loadings ``L_si (n, k)``; directions it shrank away
    (``k < r``) start small and random (seeded by ``noise_seed``)."""
    n = L_si.shape[0]
    L0 = np.zeros((n, r))
    k = min(r, L_si.shape[1])
    L0[:, :k] = L_si[:, :k]
    if k < r:
        noise = np.random.default_rng(noise_seed).standard_normal((n, r - k))
        L0[:, k:] = 1e-3 * math.sqrt(energy) * noise
    return L0


def reseed_fit(X0: np.ndarray, M: np.ndarray, r: int, warm: np.ndarray | None):
    """Rank-r ALS fit ``(n, r)`` of buffered samples ``X0, M (B, n)`` (a re-seed) from ``warm`` or cold,
    trimmed to its best-fitting 60 % (twice at most) while < 90 % of the buffer are inliers (residual
    < half the novelty threshold), then refit on all inliers. Returns the basis, each sample's
    normalised residual ``(B,)`` and the inlier mask."""
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


class ChangeDetection:
    """What ``streaming.model.MoSAIC`` does with a sample no expert explains: the novelty test, the
    change buffer, the provisional fit of the buffer, and the re-seed of an expert from it. A mixin
    of ``MoSAIC``: it reads and writes the model's state components (``bank_``, ``expert_stats_``,
    ``steps_``, ``epochs_``, ``stream_stats_``, ``change_buffer_``, ``provisional_fit_``) and its
    hyper-parameters (``detect``, ``provisional``)."""

    def reseed_min(self) -> int:
        """Buffer size that triggers a re-seed: enough observations to pin down ``n r`` unknowns."""
        dof = max(self.stream_stats_.mean_m - self.r, 1.0)
        return int(np.ceil(2.0 * self.n_features_in_ * self.r / dof)) + self.r

    def _window_len(self) -> int:
        return max(MIN_WINDOW, self.K * self.reseed_min())

    def _novelty(self, idx: np.ndarray, xo: np.ndarray, s: float, k: int) -> tuple[bool, tuple | None]:
        """Change detection for a sample whose best score ``s`` is expert ``k``'s: whether it is novel,
        and its provisional fit (None unless the provisional basis competes)."""
        if not self.detect:
            return False, None
        r, m, stats = self.r, idx.size, self.expert_stats_
        novel = bool(stats.mature[k]) and s > max(NOVELTY * (1.0 - r / m), SPIKE_FACTOR * float(stats.level[k]))
        prov = None
        if (self.provisional_fit_.basis is not None
                and self.stream_stats_.n_seen - self.change_buffer_.last_novel <= self._window_len()):
            # the provisional basis competes in the routing while a change is being buffered: a
            # sample it explains better (relative to a random subspace of each rank) is novel too
            prov = self.provisional_fit_.fit_sample(idx, xo, m, self.n_features_in_, self.bank_.ridge)
            novel = novel or prov[0] < s / (1.0 - r / m)
        return novel, prov

    def _buffer_novel(self, idx: np.ndarray, xo: np.ndarray, m: int, prov) -> np.ndarray:
        """A sample no expert explains (``prov``: its provisional fit, or None): it updates no expert
        and goes to the change buffer; returns its completion ``(n,)``."""
        buffer, n_seen = self.change_buffer_, self.stream_stats_.n_seen
        buffer.last_novel = n_seen
        # no expert explains the sample: a wrong expert's guess is uncorrelated with the truth
        # (error ~ sqrt 2); use the provisional fit of the change buffer, else abstain (error 1)
        if prov is None and self.provisional_fit_.basis is not None:
            prov = self.provisional_fit_.fit_sample(idx, xo, m, self.n, self.bank_.ridge)
        completion = np.zeros(self.n) if prov is None or prov[1] is None else prov[1]
        completion[idx] = xo
        # forget buffered samples older than two windows: a change is re-acquired within one, so
        # older novel samples are outliers or a change already handled, and would bias the fits
        buffer.expire(n_seen - 2 * self._window_len())
        buffer.append(idx, xo, n_seen)
        self._maybe_reseed()
        self._maybe_refit_provisional()
        return completion

    def _maybe_reseed(self) -> None:
        buffer, stats, n_seen = self.change_buffer_, self.expert_stats_, self.stream_stats_.n_seen
        need = self.reseed_min()
        if len(buffer) < max(need, buffer.next_try):
            return
        B = len(buffer)
        X0, M = buffer.arrays(self.n)
        prov = self.provisional_fit_.basis
        warm = prov if prov is not None and prov.shape[1] == self.r else None
        U, score, inlier = reseed_fit(X0, M, self.r, warm)
        if inlier.mean() < 0.5 and warm is not None:
            # a poor provisional basis can trap the short warm-started fit (seen at m = 3r): retry cold
            U, score, inlier = reseed_fit(X0, M, self.r, None)
        if inlier.mean() >= 0.5:
            # the victim is the expert that has missed the most of its expected traffic since its
            # last update: (samples since then) × (its long-run share of the traffic)
            long = stats.long_counts / max(stats.long_counts.sum(), 1.0)
            missed = (n_seen - stats.last_update) * long
            # an expert re-seeded within the last window has had no time to collect traffic
            protected = n_seen - stats.reseeded_at < self._window_len()
            if not protected.all():
                missed[protected] = -np.inf
            victim = int(np.argmax(missed))
            self.bank_.bases[victim] = U
            self.steps_.t[victim] = 0.0  # its schedule restarts
            self.epochs_.pending[victim] = False  # a pending epoch-reset decision was the old basis's
            stats.reseeded_at[victim] = n_seen
            # a fit to few samples overfits their residuals: never trust a level tighter than the
            # typical level of the other experts
            typical = float(np.median(np.delete(stats.level, victim))) if self.K > 1 else 0.0
            stats.level[victim] = stats.level_slow[victim] = max(float(np.median(score[inlier])), typical, 1e-6)
            stats.mature[victim] = True
            stats.long_counts[victim] = max(stats.long_counts.mean(), 1.0)
            stats.last_update[victim] = n_seen
            buffer.keep(~inlier)
            buffer.reseeds.append((n_seen - 1, victim))
            buffer.next_try = 0
        else:
            if B >= 3 * need:
                buffer.keep(np.arange(B) >= B - 2 * need)
            buffer.next_try = len(buffer) + max(1, need // 4)

    def _provisional_settings(self) -> tuple[str, float, float]:
        """The provisional fit's estimator, the buffer growth that triggers a refit, and Soft-Impute's
        threshold: by the running mean observed count ``m̄``, the posterior (``POSTERIOR_GROWTH``) when
        ``m̄ >= PROVISIONAL_MIN_RATIO × r``, else ALS (``ALS_GROWTH``): the posterior needs observations
        to spare beyond the rank (with ``m̄ < 2.25 r`` it was both worse and ~10× slower than ALS on the
        tuning seeds); threshold ``PROVISIONAL_LAMBDA``."""
        if self.stream_stats_.mean_m >= PROVISIONAL_MIN_RATIO * self.r:
            return "posterior", POSTERIOR_GROWTH, PROVISIONAL_LAMBDA
        return "als", ALS_GROWTH, PROVISIONAL_LAMBDA

    def _maybe_refit_provisional(self) -> None:
        """Refit the provisional fit of the change buffer (``ProvisionalFit.refit``) once it has
        grown enough (``_provisional_settings``)."""
        fit = self.provisional_fit_
        if not self.provisional or len(self.change_buffer_) == 0:
            fit.reset()
            return
        estimator, growth, lam_rel = self._provisional_settings()
        if fit.due(len(self.change_buffer_), growth):
            fit.refit(self.change_buffer_, self.n, self.r, self.stream_stats_.mean_m, estimator, lam_rel,
                      float(np.median(self.expert_stats_.level)), self.stream_stats_.n_seen)
