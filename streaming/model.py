"""MoSAIC: a mixture of subspace experts for online matrix completion on a drifting union of subspaces.

Each of ``K`` experts is an orthonormal basis ``U_k (n, r)``. For a sample ``x`` observed on
``Ω`` (``m = |Ω|`` entries):

1. **Route** (hard, score-based, through ``moe.route_by_score``): the score of expert ``k`` is the
   normalised least-squares residual ``s_k = min_w (||x_Ω - U_{k,Ω} w||² + λ||w||²) / ||x_Ω||²``
   (``λ = σ̂²/var(w)`` estimated at pretraining, the MAP fit; ~0 without pretraining); the sample
   goes to ``k* = argmin_k s_k`` (ties to the lower index).
2. **Complete**: ``x̂ = U_{k*} w_{k*}`` on the unobserved entries, ``x_Ω`` on the observed ones.
3. **Update only expert k*** with one greedy GROUSE step (``streaming.linalg.grouse_step``) of
   angle ``θ = η_t · arctan(||ρ||/||p||)``, with the step-size schedule (sublinear contraction
   within an epoch)

       η_t = max(η_min, η_0 / sqrt(1 + t_k / τ)),

   where ``t_k`` counts the updates of expert ``k`` since its schedule last restarted: at its
   last re-seed, at pretraining, when its fast residual average exceeds ``DRIFT_FACTOR`` × its
   slow average, or at the start of an epoch (epoch changes are given by the caller) *if the
   expert moved*: with ``epoch_reset="detect"`` (default) an expert restarts only when the mean
   normalised residual of its first ``RESET_CHECK`` accepted samples of the new epoch exceeds
   ``RESET_FACTOR`` × its slow average, so experts whose subspace did not change (the others of an
   abrupt replacement) keep their small steps (``"always"``: every expert restarts, the pre-session-11
   rule; ``"never"``).
4. **Change detection** (abrupt replacement of a subspace): a sample whose best score exceeds
   both ``NOVELTY · (1 - r/m)`` (a fraction of what a random subspace leaves) and
   ``SPIKE_FACTOR ×`` the routed expert's running residual level is *novel*: it updates no
   expert and goes to a change buffer. Its unobserved entries come from a *provisional*
   probabilistic fit of the buffer (the posterior mean: Soft-Impute directions while a rank-r
   subspace is still under-determined by the buffer, then probabilistic PCA of rank r; where the
   mean observed count is below 2.25 r, a shrunk rank-q least-squares fit instead), or are
   predicted as 0 (abstention) while the buffer is too small for any fit. Once the buffer holds
   ``reseed_min()`` samples, a rank-r subspace is fitted to it (ALS with trimming); when at least half the buffer fits it, it re-seeds the
   expert whose recent share of traffic fell most relative to its long-run share (experts
   re-seeded within the last window are protected).

Per-sample cost: O(K m r²) for routing, O(n r) for the update. State is O(K n r).
Pretraining (``fit``) is batch k-subspaces with missing data, seeded by spectral clustering of
co-observed affinities, then by annealed mixture-of-PPCA EM on further restarts, with a robust
refit of any cluster that fits far worse than the others (``streaming.train.k_subspaces_missing``).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from common.errors import CheckpointError, InputError
from common.pretrained import PretrainedMixin, register_model
from moe.routing import route_by_score
from streaming.linalg import (
    RIDGE,
    als_subspace,
    batch_fit,
    fit_observed,
    grouse_step,
    orthonormalize,
    posterior_mean,
    ppca_missing,
    random_bases,
    residual_scores,
    soft_impute,
)

_TINY = 1e-300


#: constants of the online phase (chosen in sessions 10-12 on tuning seeds; never set otherwise, so not
#: configuration): a sample is novel when its best score exceeds ``NOVELTY · (1 - r/m)`` and
#: ``SPIKE_FACTOR`` × its expert's level; an expert's schedule restarts when its fast residual level
#: exceeds ``DRIFT_FACTOR`` × its slow level; at an epoch start, ``epoch_reset="detect"`` restarts it when
#: the mean residual of its first ``RESET_CHECK`` samples exceeds ``RESET_FACTOR`` × its slow level
NOVELTY = 0.3
SPIKE_FACTOR = 8.0
DRIFT_FACTOR = 4.0
RESET_CHECK = 5
RESET_FACTOR = 2.0
#: relative ridge of the ALS fits to the change buffer (``linalg.als_subspace``), and the iterations of a
#: change-buffer fit that has a start (ALS and the warm PPCA refits; cold fits run 10-30)
FIT_SHRINK = 0.05
WARM_ITERS = 5
#: the provisional posterior (Soft-Impute, then PPCA) needs a mean observed count m̄ >= this × r; below
#: it the least-squares ALS completion, used when its residual is < ``PROVISIONAL_ACCEPT`` × a random
#: subspace's
PROVISIONAL_MIN_RATIO = 2.25
PROVISIONAL_ACCEPT = 0.9


@dataclass
class MoSAICConfig:
    """Hyper-parameters of MoSAIC (defaults are the ones used in the benchmarks); every field is set
    by a command, a baseline, an ablation or a test."""

    n: int
    r: int
    K: int
    eta0: float = 1.0  # session 11 (was 0.5): with epoch_reset="detect", chosen on tuning seeds 1100-1101
    eta_min: float = 0.05
    schedule: str = "sublinear"  # or "constant" (η = eta0 always, k-GROUSE style)
    detect: bool = True  # change detection (novel samples -> change buffer -> re-seed)
    epoch_reset: str = "detect"  # restart the schedule at an epoch start: "detect" (only experts that moved), "always", "never"
    provisional: bool = True  # complete novel samples with a growing-rank fit of the change buffer
    provisional_growth: float = 0.0  # refit it when the buffer has grown by this fraction (0 = auto: 0.05 posterior, 0.2 als)
    provisional_lambda: float = 0.1  # Soft-Impute threshold of the under-determined buffer, × rms(x_Ω) sqrt(m̄)
    provisional_estimator: str = "auto"  # "posterior", "als" (least-squares completion, shrunk and capped) or
    # "auto": posterior when the mean observed count m̄ >= PROVISIONAL_MIN_RATIO × r, else als
    completion_cap: float = 10.0  # energy cap of a routed expert's completion (``cap_completion``); 0 = off
    pretrain_restarts: int = 16  # session 12 (was 6): restarts stop at the first clean solution, so only hard cases pay
    # rounds of the robust refit of a cluster that fits far worse than the others (train.repair_clusters); 0 = off
    pretrain_repair: int = 2
    seed: int = 0

    def validate(self) -> None:
        if self.K < 1:
            raise InputError(f"K must be >= 1, got {self.K}")
        if self.n < 2:
            raise InputError(f"n must be >= 2, got {self.n}")
        if not 1 <= self.r < self.n:
            raise InputError(f"rank r must satisfy 1 <= r < n, got r={self.r}, n={self.n}")
        if self.provisional_lambda <= 0:
            raise InputError(f"provisional_lambda must be > 0, got {self.provisional_lambda}")
        if self.provisional_estimator not in ("auto", "posterior", "als"):
            raise InputError(
                f"provisional_estimator must be 'auto', 'posterior' or 'als', got {self.provisional_estimator!r}")
        if self.completion_cap < 0:
            raise InputError(f"completion_cap must be >= 0 (0 = off), got {self.completion_cap}")
        if self.provisional_growth < 0:
            raise InputError(f"provisional_growth must be >= 0 (0 = auto), got {self.provisional_growth}")
        if self.epoch_reset not in ("detect", "always", "never"):
            raise InputError(f"epoch_reset must be 'detect', 'always' or 'never', got {self.epoch_reset!r}")
        if self.pretrain_repair < 0:
            raise InputError(f"pretrain_repair must be >= 0 (0 = off), got {self.pretrain_repair}")
        if self.schedule not in ("sublinear", "constant"):
            raise InputError(f"schedule must be 'sublinear' or 'constant', got {self.schedule!r}")
        if not (0 < self.eta0 <= 1 and 0 <= self.eta_min <= self.eta0):
            raise InputError("step sizes must satisfy 0 <= eta_min <= eta0 <= 1, eta0 > 0")


def as_observed(x: np.ndarray, mask: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate samples at the API boundary.

    ``x (n,)`` or ``(B, n)``; ``mask`` bool of the same shape (True = observed) or None, meaning
    "observed where x is not NaN". Returns ``(X0 (B, n) zero-filled float64, M (B, n) bool)``.
    Raises InputError for a wrong dimension, a sample with no observed entry, or a NaN/inf
    observed value. Nothing is modified, so a rejected batch leaves a model untouched.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[1] != n:
        raise InputError(f"samples must have shape ({n},) or (B, {n}), got {x.shape}")
    if mask is None:
        M = ~np.isnan(x)
    else:
        M = np.asarray(mask)
        if M.ndim == 1:
            M = M[None]
        if M.shape != x.shape:
            raise InputError(f"mask must have the shape of x {x.shape}, got {M.shape}")
        M = M.astype(bool)
    empty = ~M.any(1)
    if empty.any():
        raise InputError(f"sample {int(np.flatnonzero(empty)[0])} has no observed entry")
    if not np.isfinite(x[M]).all():
        raise InputError("observed values contain NaN or inf")
    return np.where(M, x, 0.0), M


def identifiable_rank(n: int, r: int, m: float, s: int) -> int:
    """Largest rank ``q <= r`` whose unknowns, ``q (n - q)`` for an ``(n, q)`` subspace and ``s q``
    for the coefficients, ``s`` samples of ``m`` observed entries each can pin down."""
    q = 0
    while q < r and (q + 1) * (n - q - 1) + s * (q + 1) <= s * m:
        q += 1
    return q


def cap_completion(completion: np.ndarray, xo: np.ndarray, n: int, factor: float, typical: float = 0.0) -> np.ndarray:
    """Scale the unobserved part of ``completion (n,)`` (0 on Ω, modified in place and returned)
    down to at most ``factor`` × the energy that ``n - m`` entries would have at the larger of
    the ``m`` observed values' mean square and ``typical`` (a running per-entry energy). A fit
    through an ill-conditioned ``U_Ω`` (few observations, or an expert that is wrong for the
    sample) can extrapolate to hundreds of times the sample's energy."""
    m = xo.size
    cap = factor * max(float(xo @ xo) / m, typical) * (n - m)
    energy = float(completion @ completion)
    if energy > cap:
        completion *= math.sqrt(cap / energy)
    return completion


#: config fields deleted in each config version (dropped when an older checkpoint loads): 2 the drift
#: prediction; 3 the stream repair of a defective expert and the knobs nobody set (now module constants
#: at their defaults, or the sublinear schedule's fixed ``tau = 2 r``)
REMOVED_FIELDS_BY_VERSION = {
    2: ("drift_predict", "predict_check", "predict_max_angle"),
    3: ("repair_factor", "tau", "novelty", "spike_factor", "reseed_min", "drift_factor", "reset_check",
        "reset_factor", "fit_shrink", "warm_iters", "provisional_rank", "provisional_accept",
        "provisional_min_ratio", "pretrain_passes", "pretrain_iters", "pretrain_spectral", "pretrain_em"),
}
REMOVED_FIELDS = tuple(f for fields in REMOVED_FIELDS_BY_VERSION.values() for f in fields)


@register_model("mosaic")
class MoSAIC(PretrainedMixin):
    """Mixture of subspace experts (see the module docstring for the algorithm).

    Shapes: ``n`` ambient dimension, ``r`` rank, ``K`` experts; ``bases`` is ``(K, n, r)``.
    sklearn-style API: ``fit(source)``, ``partial_fit(x, mask)``, ``complete(x, mask)``,
    ``route(x, mask)``; ``process`` does route + complete + update in one pass (what a stream
    uses). Deterministic under ``config.seed``.
    """

    config_version = 3  # 2: drift prediction deleted; 3: stream repair and unset knobs (REMOVED_FIELDS_BY_VERSION)

    def __init__(self, n: int, r: int, K: int, **kwargs) -> None:
        self.config = MoSAICConfig(n=n, r=r, K=K, **kwargs)
        self.config.validate()
        self._rng = np.random.default_rng(self.config.seed)
        self.bases = random_bases(self._rng, K, n, r)
        self.t = np.zeros(K)  # updates since the schedule's last restart (drives the step size)
        # epoch_reset="detect": experts still to decide whether a new epoch moved them, with the sum
        # and count of their normalised residuals in the new epoch so far
        self._reset_pending = np.zeros(K, bool)
        self._reset_sum = np.zeros(K)
        self._reset_count = np.zeros(K, np.int64)
        self.level = np.ones(K)  # EWMA of normalised residual of accepted samples
        self.level_slow = np.ones(K)
        self.mature = np.zeros(K, bool)
        self.n_updates = np.zeros(K, np.int64)
        self.long_counts = np.zeros(K)
        self.n_seen = 0
        self.epoch = 0
        self._mean_m = float(n)
        self._entry_energy = 0.0  # running mean square of an observed entry (the completion cap)
        self._last_update = np.zeros(K, np.int64)  # sample count at each expert's last update
        self._buffer: list[tuple[np.ndarray, np.ndarray, int]] = []  # (idx, values, arrival count)
        self._next_try = 0
        self._prov: np.ndarray | None = None  # provisional basis (n, q) fitted to the buffer
        self._prov_at = 0  # buffer length at its last fit
        # probabilistic fit behind the provisional completion: (loadings (n, q), noise variance)
        self._prov_post: tuple[np.ndarray, float] | None = None
        # last Soft-Impute solution of the buffer (arrival counts (s,), Z (s, n)): its warm start
        self._si_warm: tuple[np.ndarray, np.ndarray] | None = None
        self._last_novel = -(10**12)  # sample count at the last novel sample
        self._reseeded_at = np.full(K, -(10**12), np.int64)
        self.reseeds: list[tuple[int, int]] = []  # (sample index, expert)
        self.pretrained = False
        self.ridge = RIDGE  # λ of the least-squares fits; set to σ̂²/var(w) by ``fit``

    # ------------------------------------------------------------------ helpers
    @property
    def n(self) -> int:
        return self.config.n

    @property
    def r(self) -> int:
        return self.config.r

    @property
    def K(self) -> int:
        return self.config.K

    def _tau(self) -> float:
        """Updates over which the sublinear step size halves its way down: ``2 r``."""
        return 2.0 * self.r

    def reseed_min(self) -> int:
        """Buffer size that triggers a re-seed: enough observations to pin down ``n r`` unknowns."""
        dof = max(self._mean_m - self.r, 1.0)
        return int(np.ceil(2.0 * self.n * self.r / dof)) + self.r

    def _window_len(self) -> int:
        return max(50, self.K * self.reseed_min())

    def step_size(self, k: int) -> float:
        c = self.config
        if c.schedule == "constant":
            return c.eta0
        return max(c.eta_min, c.eta0 / math.sqrt(1.0 + float(self.t[k]) / self._tau()))

    def _scores(self, idx: np.ndarray, xo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return residual_scores(self.bases, idx, xo, self.ridge)

    def memory_bytes(self) -> int:
        """Bytes held by the model state (bases + per-expert counters + change buffer)."""
        buf = sum(i.nbytes + v.nbytes for i, v, _ in self._buffer)
        buf += 0 if self._prov is None else self._prov.nbytes
        per_k = self.t.nbytes + self.level.nbytes + self.level_slow.nbytes + self.mature.nbytes
        return int(self.bases.nbytes + per_k + self.n_updates.nbytes + self.long_counts.nbytes + self._last_update.nbytes + buf)

    # ------------------------------------------------------------------ pretraining
    def fit(self, source: np.ndarray, mask: np.ndarray | None = None) -> MoSAIC:
        """Pretrain the experts on source samples ``(S, n)`` (NaN = unobserved, or ``mask``).

        Runs k-subspaces with missing data (online seeding passes + restarts + batch
        refinement), then sets each expert's residual level from its assigned samples.
        """
        from streaming.train import pretrain_experts

        X0, M = as_observed(source, mask, self.n)
        c = self.config
        result, self.ridge = pretrain_experts(
            X0, M, self.K, self.r, restarts=c.pretrain_restarts, seed=c.seed, repair_rounds=c.pretrain_repair)
        self.bases = result.bases.copy()
        for k in range(self.K):
            s = result.scores[result.labels == k]
            lvl = float(np.median(s)) if s.size else 1.0
            self.level[k] = self.level_slow[k] = max(lvl, 1e-6)
            self.t[k] = s.size
            self.long_counts[k] = s.size
        self.mature[:] = True
        self._mean_m = float(M.sum(1).mean())
        self._entry_energy = float((X0 * X0).sum() / max(int(M.sum()), 1))
        self._last_update[:] = self.n_seen
        self.pretrained = True
        return self

    # ------------------------------------------------------------------ streaming
    def process(self, x: np.ndarray, mask: np.ndarray | None = None, epoch: np.ndarray | int | None = None):
        """Route, complete and update on each sample in order (the fast path of a stream).

        ``x (B, n)`` or ``(n,)``; returns ``completed (B, n)`` (the estimate when the sample
        arrived, observed entries kept) and ``routes (B,)``. The whole batch is validated first,
        the observed indices of every sample are split out in one pass, and each sample is then
        routed by ``moe.route_by_score``'s rule (argmin of the scores, ties to the lower index)
        applied inline: a torch call per sample would cost more than the rest of the step.
        The result is identical to calling ``step`` on each sample (tested).
        """
        X0, M = as_observed(x, mask, self.n)
        B = X0.shape[0]
        epochs = None if epoch is None else np.broadcast_to(np.asarray(epoch, np.int64), (B,))
        completed = np.empty_like(X0)
        routes = np.empty(B, np.int64)
        cols = np.nonzero(M)[1]
        ends = np.cumsum(M.sum(1))
        start = 0
        for j in range(B):
            idx = cols[start : ends[j]]
            start = ends[j]
            if epochs is not None:
                self._set_epoch(int(epochs[j]))
            xo = X0[j, idx]
            w, score = self._scores(idx, xo)
            k = int(score.argmin())
            completed[j] = self._complete_and_update(idx, xo, w, score, k)
            routes[j] = k
        return completed, routes

    def partial_fit(self, x: np.ndarray, mask: np.ndarray | None = None, epoch=None) -> MoSAIC:
        """Update on samples ``x (B, n)`` / ``(n,)`` in order (validated first; see ``process``)."""
        self.process(x, mask, epoch)
        return self

    def step(self, idx: np.ndarray, xo: np.ndarray, epoch: int | None = None) -> tuple[np.ndarray, int]:
        """One validated sample: ``idx (m,)`` observed indices, ``xo (m,)`` values.

        Routes through ``moe.route_by_score``; returns ``(completion (n,), routed expert)``
        computed before the update.
        """
        if epoch is not None:
            self._set_epoch(epoch)
        w, score = self._scores(idx, xo)
        k = int(route_by_score(torch.from_numpy(score[None])).indices[0, 0])
        return self._complete_and_update(idx, xo, w, score, k), k

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            if self.config.epoch_reset == "always":
                self.t[:] = 0.0
            elif self.config.epoch_reset == "detect":
                self._reset_pending[:] = True
                self._reset_sum[:] = 0.0
                self._reset_count[:] = 0

    def _install_basis(self, k: int, U: np.ndarray) -> None:
        """Replace expert ``k``'s basis by a re-seed ``U (n, r)``: its schedule restarts, and a pending
        epoch-reset decision of the old basis goes."""
        self.bases[k] = U
        self.t[k] = 0.0
        self._reset_pending[k] = False
        self._reseeded_at[k] = self.n_seen

    def _check_epoch_reset(self, k: int, s: float) -> None:
        """``epoch_reset="detect"``: after expert ``k``'s first ``RESET_CHECK`` accepted samples of a
        new epoch, restart its schedule if their mean residual ``s`` is ``RESET_FACTOR`` × its slow
        level (the subspace moved at the epoch change; a rotation of 0.1 rad raises it ~4×)."""
        self._reset_sum[k] += s
        self._reset_count[k] += 1
        if self._reset_count[k] >= RESET_CHECK:
            if self._reset_sum[k] / self._reset_count[k] > RESET_FACTOR * self.level_slow[k]:
                self.t[k] = 0.0
            self._reset_pending[k] = False

    def _complete_and_update(self, idx: np.ndarray, xo: np.ndarray, w: np.ndarray, score: np.ndarray, k: int) -> np.ndarray:
        """Completion ``(n,)`` of a sample routed to expert ``k``, then the update / change detection."""
        c = self.config
        p = self.bases[k] @ w[k]
        completion = p.copy()
        if c.completion_cap:
            # against the larger of the sample's own and the running entry energy, and 10× (not
            # the 2× of the provisional fits): a correct fit's unobserved part can carry far more
            # energy than its observed part at small n (the noiseless exact-recovery test has 4.3×)
            completion[idx] = 0.0
            cap_completion(completion, xo, self.n, c.completion_cap, self._entry_energy)
        completion[idx] = xo
        m = idx.size
        self.n_seen += 1
        self._mean_m += (m - self._mean_m) * 0.01
        self._entry_energy += (float(xo @ xo) / m - self._entry_energy) * 0.01
        if m <= self.r:  # the fit is exact whatever the subspace: nothing to learn
            return completion
        s = float(score[k])
        level = float(self.level[k])
        novel = c.detect and self.mature[k] and s > max(NOVELTY * (1.0 - self.r / m), SPIKE_FACTOR * level)
        prov = None
        if c.detect and self._prov is not None and self.n_seen - self._last_novel <= self._window_len():
            # the provisional basis competes in the routing while a change is being buffered: a
            # sample it explains better (relative to a random subspace of each rank) is novel too
            prov = self._provisional_fit(idx, xo, m)
            novel = novel or prov[0] < s / (1.0 - self.r / m)
        if novel:
            self._last_novel = self.n_seen
            # no expert explains the sample: a wrong expert's guess is uncorrelated with the truth
            # (error ~ sqrt 2); use the provisional fit of the change buffer, else abstain (error 1)
            if prov is None and self._prov is not None:
                prov = self._provisional_fit(idx, xo, m)
            completion = np.zeros(self.n) if prov is None or prov[1] is None else prov[1]
            completion[idx] = xo
            self._expire_buffer()
            self._buffer.append((idx.copy(), xo.copy(), self.n_seen))
            self._maybe_reseed()
            self._maybe_refit_provisional()
            return completion
        if self._reset_pending[k]:
            self._check_epoch_reset(k, s)
        eta = self.step_size(k)
        grouse_step(self.bases[k], idx, xo, w[k], eta, p=p)
        self.t[k] += 1
        self.n_updates[k] += 1
        self.long_counts[k] += 1
        self._last_update[k] = self.n_seen
        level += 0.05 * (s - level)
        self.level[k] = level
        self.level_slow[k] += 0.005 * (s - self.level_slow[k])
        if c.detect and level > DRIFT_FACTOR * self.level_slow[k] and self.t[k] > self._tau():
            self.t[k] = 0.0  # residuals jumped: restart the step-size schedule
            self.level_slow[k] = level
        if not self.mature[k] and self.n_updates[k] >= 3 * self.reseed_min() and level < 0.5 * NOVELTY:
            self.mature[k] = True
        if self.n_updates[k] % 100 == 0:  # ridge fits leave ρ slightly off-orthogonal
            self.bases[k] = orthonormalize(self.bases[k])
        return completion

    def _provisional_fit(self, idx: np.ndarray, xo: np.ndarray, m: int) -> tuple[float, np.ndarray | None]:
        """Fit of a sample under the provisional basis ``(n, q)``: its residual relative to what a
        random rank-q subspace leaves (``score / (1 - q/m)``), and a completion ``(n,)`` (0 on Ω).

        ``"posterior"`` (what ``"auto"`` uses where m̄ >= 2.25 r): the posterior mean under the fit
        of the buffer (``_fold_in``), which shrinks what the buffer does not determine. ``"als"``
        (the previous estimator; ``"auto"`` below 2.25 r): the least-squares completion shrunk by the
        unexplained fraction, or None when ``rel >= PROVISIONAL_ACCEPT``. Either is capped at
        twice the sample's energy per observed entry: a fit to few samples can extrapolate."""
        U = self._prov
        q = U.shape[1]
        w, res = fit_observed(U[None], idx, xo, self.ridge)
        rel = float(res[0]) / max(float(xo @ xo), _TINY) / max(1.0 - q / m, _TINY)
        if self._prov_post is not None:
            completion = self._fold_in(idx, xo)
        elif rel >= PROVISIONAL_ACCEPT:
            return rel, None
        else:
            completion = (1.0 - rel) * (U @ w[0])
            completion[idx] = 0.0
        return rel, cap_completion(completion, xo, self.n, 2.0)

    def _fold_in(self, idx: np.ndarray, xo: np.ndarray) -> np.ndarray:
        """Posterior-mean completion ``(n,)`` (0 on Ω) of a sample under the probabilistic fit of
        the buffer: ``x = L a + e`` with ``a ~ N(0, I)``, loadings ``L (n, q)`` and ``e`` of the
        buffer's unexplained variance ``v`` per entry."""
        L, v = self._prov_post
        return posterior_mean(L, v, idx, xo)

    def _expire_buffer(self) -> None:
        """Forget buffered samples older than two windows: a change is re-acquired within one, so
        older novel samples are outliers or a change already handled, and would bias the fits."""
        oldest = self.n_seen - 2 * self._window_len()
        if self._buffer and self._buffer[0][2] < oldest:
            self._buffer = [b for b in self._buffer if b[2] >= oldest]

    def _stack(self, samples) -> tuple[np.ndarray, np.ndarray]:
        """Zero-filled values ``X0 (B, n)`` and mask ``M (B, n)`` of samples ``(idx, values, ...)``."""
        X0 = np.zeros((len(samples), self.n))
        M = np.zeros((len(samples), self.n), bool)
        for j, (idx, xo, *_) in enumerate(samples):
            X0[j, idx] = xo
            M[j, idx] = True
        return X0, M

    def _buffer_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self._stack(self._buffer)

    def provisional_estimator(self) -> str:
        """The provisional estimator in use: ``config.provisional_estimator``, with ``"auto"``
        resolved by the running mean observed count ``m̄``. The posterior (Soft-Impute, then rank-r
        PPCA) needs observations to spare beyond the rank: with ``m̄ < 2.25 r`` (e.g. (100,25,5) at
        40 %, m̄/r = 1.6) it was both worse and ~10× slower than ALS on the tuning seeds."""
        c = self.config
        if c.provisional_estimator != "auto":
            return c.provisional_estimator
        return "posterior" if self._mean_m >= PROVISIONAL_MIN_RATIO * self.r else "als"

    def _maybe_refit_provisional(self) -> None:
        """Refit the provisional fit of the change buffer once it has grown by ``provisional_growth``.

        With ``q = min(r, q_id)``, ``q_id`` the identifiable rank of the ``s``
        buffered samples (``identifiable_rank``): while a rank-r subspace is still
        under-determined (``q_id < r``) the posterior comes from Soft-Impute of the buffer (its
        directions, coefficient variances ``sv²/s`` and unexplained variance), which uses every
        direction the data supports, shrunk; once it is determined, from probabilistic PCA of rank r
        (EM, ``linalg.ppca_missing``, warm-started from the previous fit). The routing basis
        ``_prov`` is a rank-q ALS fit started at the Soft-Impute directions, then the span of the
        PPCA loadings."""
        c = self.config
        B = len(self._buffer)
        if not c.provisional or B == 0:
            self._prov, self._prov_post, self._prov_at = None, None, 0
            return
        if B < self._prov_at:  # the buffer was trimmed (re-seed or a failed try): start again
            self._prov, self._prov_post, self._prov_at = None, None, 0
        estimator = self.provisional_estimator()
        growth = c.provisional_growth or (0.2 if estimator == "als" else 0.05)
        if self._prov is not None and B < (1.0 + growth) * self._prov_at:
            return
        if estimator == "als":  # its rank: the q (n + s) <= m̄ s count of earlier versions
            q_id = int(self._mean_m * B / (self.n + B))
        else:
            q_id = identifiable_rank(self.n, self.r, self._mean_m, B)
        q = min(self.r, q_id)
        if q < 1:
            return
        X0, M = self._buffer_arrays()
        self._prov_at = B
        if estimator == "als":
            # warm-started from the previous fit (extended to rank q): the buffer grew by a fifth
            warm = self._prov if self._prov is not None and self._prov.shape[1] <= q else None
            iters = 10 if warm is None else WARM_ITERS
            self._prov, self._prov_post = als_subspace(X0, M, q, U0=warm, iters=iters, shrink=FIT_SHRINK), None
            return
        obs = max(int(M.sum()), 1)
        energy = float((X0 * X0).sum()) / obs
        # a fit to few samples also fits their noise: never trust an unexplained variance below
        # what the other experts leave on their samples
        floor = float(np.median(self.level)) * energy / max(1.0 - self.r / self._mean_m, _TINY)
        warm_ppca = q_id >= self.r and self._prov_post is not None and self._prov_post[0].shape[1] == self.r
        if warm_ppca:
            # warm start from the previous span, at the scale of the current buffer's energy
            L0, v0, iters = self._prov * math.sqrt(self.n * energy / self.r), self._prov_post[1], WARM_ITERS
        else:
            # tol 1e-3 (not 1e-4): on tuning seeds 1100-1102 it changed NRMSE by <= 1e-4 at a quarter less time
            V, sv, Z = soft_impute(X0, M, c.provisional_lambda * math.sqrt(energy * obs / B), tol=1e-3,
                                   Z0=self._soft_impute_start())
            self._si_warm = (np.array([t for _, _, t in self._buffer], np.int64), Z)
            v_si = max(energy - float((Z * Z).mean()), floor, 1e-6 * energy)
            L_si = V * (sv / math.sqrt(B))  # loadings of unit-variance scores
            if q_id < self.r:
                self._prov_post = (L_si, v_si) if sv.size else None
                warm = V[:, :q] if V.shape[1] >= q else None
                self._prov = als_subspace(X0, M, q, U0=warm, iters=WARM_ITERS, shrink=FIT_SHRINK)
                return
            L0 = np.zeros((self.n, self.r))
            k = min(self.r, L_si.shape[1])
            L0[:, :k] = L_si[:, :k]
            if k < self.r:  # directions Soft-Impute shrank away start small and random
                noise = np.random.default_rng(self.n_seen).standard_normal((self.n, self.r - k))
                L0[:, k:] = 1e-3 * math.sqrt(energy) * noise
            v0, iters = v_si, 30
        L, v = ppca_missing(X0, M, L0, v0, iters=iters)
        self._prov_post = (L, max(v, floor, 1e-6 * energy))
        self._prov = orthonormalize(L)

    def _soft_impute_start(self) -> np.ndarray | None:
        """Warm start ``(s, n)`` of the buffer's Soft-Impute: the last solution's rows for the
        samples still buffered (matched by arrival count), zeros for the new ones."""
        if self._si_warm is None:
            return None
        stamps, Z = self._si_warm
        row = {int(t): j for j, t in enumerate(stamps)}
        Z0 = np.zeros((len(self._buffer), self.n))
        for j, (_, _, t) in enumerate(self._buffer):
            if t in row:
                Z0[j] = Z[row[t]]
        return Z0

    def _reseed_fit(self, X0, M, warm):
        """Rank-r ALS fit ``(n, r)`` of buffered samples ``X0, M (B, n)`` (a re-seed), from ``warm``
        (``WARM_ITERS`` iterations) or cold (15), trimmed to its best-fitting 60 % (twice at most)
        while < 90 % of the buffer are inliers, then refit on all inliers. Returns the basis, each
        sample's normalised residual ``(B,)`` and the inlier mask (residual < half the novelty
        threshold)."""
        energy = np.maximum((X0 * X0).sum(1), _TINY)
        base = 1.0 - self.r / M.sum(1)
        U = als_subspace(X0, M, self.r, U0=warm, iters=15 if warm is None else WARM_ITERS, shrink=FIT_SHRINK)

        def fit_scores(U):
            _, res = batch_fit(U[None], X0, M)
            score = res[:, 0] / energy
            return score, score < 0.5 * NOVELTY * base

        score, inlier = fit_scores(U)
        for _ in range(2):  # a buffer mixing several changes: trim to the samples that fit best
            if inlier.mean() >= 0.9:
                break
            keep = score <= np.quantile(score, 0.6)
            U = als_subspace(X0[keep], M[keep], self.r, U0=U, iters=WARM_ITERS, shrink=FIT_SHRINK)
            score, inlier = fit_scores(U)
        # refit on all inliers: a trimmed subset may leave rows of U seen too rarely to be determined
        if inlier.sum() > self.r and not inlier.all():
            U = als_subspace(X0[inlier], M[inlier], self.r, U0=U, iters=WARM_ITERS, shrink=FIT_SHRINK)
            score, inlier = fit_scores(U)
        return U, score, inlier

    def _maybe_reseed(self) -> None:
        need = self.reseed_min()
        if len(self._buffer) < max(need, self._next_try):
            return
        B = len(self._buffer)
        X0, M = self._buffer_arrays()
        warm = self._prov if self._prov is not None and self._prov.shape[1] == self.r else None
        U, score, inlier = self._reseed_fit(X0, M, warm)
        if inlier.mean() < 0.5 and warm is not None:
            # a poor provisional basis can trap the short warm-started fit (seen at m = 3r): retry cold
            U, score, inlier = self._reseed_fit(X0, M, None)
        if inlier.mean() >= 0.5:
            # the victim is the expert that has missed the most of its expected traffic since its
            # last update: (samples since then) × (its long-run share of the traffic)
            long = self.long_counts / max(self.long_counts.sum(), 1.0)
            missed = (self.n_seen - self._last_update) * long
            # an expert re-seeded within the last window has had no time to collect traffic
            protected = self.n_seen - self._reseeded_at < self._window_len()
            if not protected.all():
                missed[protected] = -np.inf
            victim = int(np.argmax(missed))
            self._install_basis(victim, U)
            # a fit to few samples overfits their residuals: never trust a level tighter than the
            # typical level of the other experts
            typical = float(np.median(np.delete(self.level, victim))) if self.K > 1 else 0.0
            self.level[victim] = self.level_slow[victim] = max(float(np.median(score[inlier])), typical, 1e-6)
            self.mature[victim] = True
            self.long_counts[victim] = max(self.long_counts.mean(), 1.0)
            self._last_update[victim] = self.n_seen
            self._buffer = [b for b, ok in zip(self._buffer, inlier, strict=True) if not ok]
            self.reseeds.append((self.n_seen - 1, victim))
            self._next_try = 0
        else:
            if B >= 3 * need:
                self._buffer = self._buffer[B - 2 * need :]
            self._next_try = len(self._buffer) + max(1, need // 4)

    # ------------------------------------------------------------------ inference only
    def route(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Expert of each sample ``(B,)`` (no update), through ``moe.route_by_score``."""
        X0, M = as_observed(x, mask, self.n)
        _, res = batch_fit(self.bases, X0, M, ridge=self.ridge)
        score = res / np.maximum((X0 * X0).sum(1), _TINY)[:, None]
        return route_by_score(torch.from_numpy(score)).indices[:, 0].numpy().copy()

    def complete(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Completed samples ``(B, n)`` (no update): routed expert's fit on Ω, observed kept."""
        X0, M = as_observed(x, mask, self.n)
        W, res = batch_fit(self.bases, X0, M, ridge=self.ridge)
        score = res / np.maximum((X0 * X0).sum(1), _TINY)[:, None]
        k = route_by_score(torch.from_numpy(score)).indices[:, 0].numpy()
        est = np.where(M, 0.0, np.einsum("bnr,br->bn", self.bases[k], W[np.arange(len(k)), k]))
        if self.config.completion_cap:
            for b in range(len(est)):
                cap_completion(est[b], X0[b, M[b]], self.n, self.config.completion_cap, self._entry_energy)
        return np.where(M, X0, est)

    def subspaces(self) -> np.ndarray:
        """Current expert bases ``(K, n, r)`` (a copy)."""
        return self.bases.copy()

    # ------------------------------------------------------------------ persistence
    # the shared format of common.pretrained: config = the full MoSAICConfig (every field, so a
    # default changed later cannot change a saved model), tensors = arrays, state = the rest

    @property
    def pretrained_config(self) -> dict:
        return asdict(self.config)

    def save(self, path_dir: str | os.PathLike) -> Path:
        """Save the full state (so a reloaded model continues the stream identically)."""
        return self.save_pretrained(path_dir)

    @classmethod
    def load(cls, path_dir: str | os.PathLike) -> MoSAIC:
        return cls.from_pretrained(path_dir)

    @classmethod
    def upgrade_config(cls, config: dict, from_version: int) -> dict:
        if from_version == 0 and config.get("model") == "MoSAIC":  # common.checkpoint: {"model", **fields}
            return {k: v for k, v in config.items() if k not in ("model", *REMOVED_FIELDS)}
        if from_version in (1, 2):  # before / during the stress suite (issue 33): deleted mechanisms' fields
            return {k: v for k, v in config.items() if k not in REMOVED_FIELDS}
        return super().upgrade_config(config, from_version)

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict]:
        """``(tensors, state)``: every array of the model, and its scalars, lists and RNG state."""
        arrays = {
            "bases": self.bases, "t": self.t, "level": self.level, "level_slow": self.level_slow,
            "mature": self.mature.astype(np.uint8), "n_updates": self.n_updates,
            "long_counts": self.long_counts, "last_update": self._last_update, "reseeded_at": self._reseeded_at,
            "reset_pending": self._reset_pending.astype(np.uint8), "reset_sum": self._reset_sum,
            "reset_count": self._reset_count,
        }
        for j, (idx, xo, _) in enumerate(self._buffer):
            arrays[f"buffer_idx_{j}"], arrays[f"buffer_val_{j}"] = idx.astype(np.int64), xo
        if self._prov is not None:
            arrays["provisional"] = self._prov
        if self._prov_post is not None:
            arrays["provisional_loadings"] = self._prov_post[0]
        if self._si_warm is not None:
            arrays["soft_impute_stamps"], arrays["soft_impute_Z"] = self._si_warm
        tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
        state = {
            "n_seen": self.n_seen, "epoch": self.epoch, "mean_m": self._mean_m, "entry_energy": self._entry_energy,
            "next_try": self._next_try, "buffer_t": [t for _, _, t in self._buffer], "reseeds": self.reseeds,
            "pretrained": self.pretrained,
            "rng": self._rng.bit_generator.state, "ridge": self.ridge,
            "provisional_at": self._prov_at, "last_novel": self._last_novel,
            "provisional_noise": None if self._prov_post is None else self._prov_post[1],
        }
        return tensors, state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict, source: str) -> None:
        """Inverse of :meth:`checkpoint_state` (also of the ``common.checkpoint`` layout, whose
        older fields default as they were trained); CheckpointError when something is missing."""
        try:
            arr = {k: v.numpy().copy() for k, v in tensors.items()}
            K, n, r = self.K, self.n, self.r
            if arr["bases"].shape != (K, n, r):
                raise CheckpointError(f"bases in {source} have shape {arr['bases'].shape}, expected {(K, n, r)}")
            self.bases, self.t, self.level = arr["bases"], arr["t"], arr["level"]
            self.level_slow, self.mature = arr["level_slow"], arr["mature"].astype(bool)
            self.n_updates, self.long_counts, self._last_update = arr["n_updates"], arr["long_counts"], arr["last_update"]
            self._reseeded_at = arr["reseeded_at"]
            if "reset_pending" in arr:  # older checkpoints: no pending epoch-reset decision
                self._reset_pending = arr["reset_pending"].astype(bool)
                self._reset_sum, self._reset_count = arr["reset_sum"], arr["reset_count"]
            buffer_t = state["buffer_t"]
            self._buffer = [(arr[f"buffer_idx_{j}"], arr[f"buffer_val_{j}"], int(buffer_t[j]))
                            for j in range(state.get("buffer_len", len(buffer_t)))]
            self.n_seen, self.epoch = int(state["n_seen"]), int(state["epoch"])
            self._mean_m, self._next_try = float(state["mean_m"]), int(state["next_try"])
            self._entry_energy = float(state.get("entry_energy", 0.0))  # older checkpoints: no floor
            self.reseeds = [tuple(x) for x in state["reseeds"]]
            self.pretrained = bool(state["pretrained"])
            self.ridge = float(state["ridge"])
            self._prov = arr.get("provisional")
            self._prov_at = int(state.get("provisional_at", 0))
            if "provisional_loadings" in arr:
                self._prov_post = (arr["provisional_loadings"], float(state["provisional_noise"]))
            if "soft_impute_Z" in arr:
                self._si_warm = (arr["soft_impute_stamps"], arr["soft_impute_Z"])
            self._last_novel = int(state.get("last_novel", -(10**12)))
            self._rng.bit_generator.state = state["rng"]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"incomplete MoSAIC checkpoint {source}: {exc}") from exc

    @classmethod
    def tiny_example(cls):
        """A pretrained model part-way through an abruptly switching stream, with every piece of
        state in use (change buffer, provisional fit, Soft-Impute warm start); input: the next 20
        samples and their epochs."""
        from streaming.data import StreamConfig, generate_stream

        s = generate_stream(StreamConfig(n=20, r=2, K=3, obs_frac=0.6, epochs=2, samples_per_epoch=120,
                                         drift="abrupt", source_per_class=40, seed=7))
        m = cls(20, 2, 3, pretrain_restarts=2, seed=1).fit(s.source_values)
        m.process(s.values[:150], epoch=s.epoch[:150])
        return m, (s.values[150:170], None, s.epoch[150:170])

    def example_forward(self, x: np.ndarray, mask: np.ndarray | None, epoch: np.ndarray):
        """Continue the stream: ``process`` returns ``(completed (B, n), routes (B,))``."""
        return self.process(x, mask, epoch)
