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

       η_t = max(η_min, f_k, η_0 / sqrt(1 + t_k / τ)),

   where ``t_k`` counts the updates of expert ``k`` since its schedule last restarted: at its
   last re-seed, at pretraining, when its fast residual average exceeds ``DRIFT_FACTOR`` × its
   slow average, or at the start of an epoch (epoch changes are given by the caller) *if the
   expert moved*: with ``epoch_reset="detect"`` (default) an expert restarts only when the mean
   normalised residual of its first ``RESET_CHECK`` accepted samples of the new epoch exceeds
   ``RESET_FACTOR`` × its slow average, so experts whose subspace did not change (the others of an
   abrupt replacement) keep their small steps (``"always"``: every expert restarts;
   ``"never"``). The drift floor ``f_k = min(η_0, drift_floor · sqrt(max(ℓ_k / ℓ_ref,k − 1, 0)))``
   keeps the step of an expert whose fast residual level ``ℓ_k`` stays above its level at the end of
   pretraining ``ℓ_ref,k`` (a subspace that drifts, with or without epochs; ``streaming.schedule``).
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

The state lives in small components, each a dataclass whose fields are all of its state and which
saves and loads itself through ``streaming.state`` (``COMPONENTS``): the expert bank
(``streaming.experts``), the per-expert and stream statistics, the step-size schedule and the epoch
handling (``streaming.schedule``), the change buffer and its provisional fit (``streaming.change``).
``MoSAIC`` wires them together and is the one class that is saved (``common.pretrained``).
Pretraining (``fit``) is batch k-subspaces with missing data, seeded by spectral clustering of
co-observed affinities, then by annealed mixture-of-PPCA EM on further restarts, with a robust
refit of any cluster that fits far worse than the others (``streaming.train.fit``,
``streaming.kss``); the hyper-parameters are ``streaming.config.MoSAICConfig``, older checkpoints
load through ``streaming.compat``.

Why over 400 lines: ``MoSAIC`` is one online estimator whose per-sample path (route, complete,
update, change detection, re-seed) reads and writes every component of its state; its
scikit-learn methods and checkpoint hooks are thin methods on that same state, and the algorithm
above is documented here once. Split over modules, one sample's path would cross several files.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError

from common.errors import CheckpointError, InputError
from common.pretrained import PretrainedMixin, register_model
from streaming import train
from streaming.change import (
    NOVELTY,
    PROVISIONAL_MIN_RATIO,
    SPIKE_FACTOR,
    ChangeBuffer,
    ProvisionalFit,
    reseed_fit,
    reseed_min,
)
from streaming.compat import load_flat_state, upgrade_component_state, upgrade_config
from streaming.config import MoSAICConfig
from streaming.experts import ExpertBank, ExpertStats, StreamStats, cap_completion, route_scores
from streaming.linalg import RIDGE, grouse_step, orthonormalize, random_bases, residual_scores
from streaming.observed import check_observed, check_samples
from streaming.schedule import DRIFT_FACTOR, LEVEL_RATE, SLOW_LEVEL_RATE, EpochReset, StepSchedule
from streaming.state import StateComponent

#: the components of a MoSAIC model: attribute name -> class (``streaming.state.StateComponent``); the
#: model's whole state, and the one thing ``checkpoint_state`` saves besides the config
COMPONENTS: dict[str, type[StateComponent]] = {
    "bank": ExpertBank,
    "expert_stats": ExpertStats,
    "steps": StepSchedule,
    "epochs": EpochReset,
    "stream_stats": StreamStats,
    "change_buffer": ChangeBuffer,
    "provisional_fit": ProvisionalFit,
}
#: layout of the JSON state of a checkpoint (absent: the flat layout of config versions <= 3)
STATE_LAYOUT = 2


@register_model("mosaic")
class MoSAIC(PretrainedMixin, TransformerMixin, BaseEstimator):
    """Mixture of subspace experts (see the module docstring for the algorithm).

    Shapes: ``n`` ambient dimension (learned from the data: ``n_features_in_``), ``r`` rank, ``K``
    experts; ``bases_`` is ``(K, n, r)``. A scikit-learn estimator: the constructor only stores the
    hyper-parameters (defaults and checks: ``streaming.config.MoSAICConfig``), which are validated by
    ``fit`` / ``partial_fit``; ``fit(X)`` pretrains on source samples, ``partial_fit(X, epoch=)``
    streams samples (route, complete, update; the first call on an unfitted model starts from random
    bases), and ``transform(X)`` completes samples without updating; ``process`` is ``partial_fit``
    that also returns the completions and routes, ``step`` one pre-split sample. NaN marks an
    unobserved entry (or pass ``mask``); sparse input is refused. Everything learned ends in ``_``:
    the state components (``bank_``, ``expert_stats_``, ``steps_``, ``epochs_``, ``stream_stats_``,
    ``change_buffer_``, ``provisional_fit_``) and ``bases_``, ``K_``, ``r_``, ``ridge_``, ``n_features_in_``,
    ``n_samples_seen_``, ``reseeds_``. Deterministic under ``seed``.
    """

    # 2: drift prediction deleted; 3: stream repair and unset knobs; 4: component state; 5: drift floor;
    # 6: n learned at fit (no constructor argument)
    config_version = 6

    def __init__(self, r: int, K: int, *, eta0: float = MoSAICConfig.eta0,
                 eta_min: float = MoSAICConfig.eta_min, drift_floor: float = MoSAICConfig.drift_floor,
                 schedule: str = MoSAICConfig.schedule, detect: bool = MoSAICConfig.detect,
                 epoch_reset: str = MoSAICConfig.epoch_reset, provisional: bool = MoSAICConfig.provisional,
                 provisional_growth: float = MoSAICConfig.provisional_growth,
                 provisional_lambda: float = MoSAICConfig.provisional_lambda,
                 provisional_estimator: str = MoSAICConfig.provisional_estimator,
                 completion_cap: float = MoSAICConfig.completion_cap,
                 pretrain_restarts: int = MoSAICConfig.pretrain_restarts,
                 pretrain_repair: int = MoSAICConfig.pretrain_repair, seed: int = MoSAICConfig.seed) -> None:
        self.r = r
        self.K = K
        self.eta0 = eta0
        self.eta_min = eta_min
        self.drift_floor = drift_floor
        self.schedule = schedule
        self.detect = detect
        self.epoch_reset = epoch_reset
        self.provisional = provisional
        self.provisional_growth = provisional_growth
        self.provisional_lambda = provisional_lambda
        self.provisional_estimator = provisional_estimator
        self.completion_cap = completion_cap
        self.pretrain_restarts = pretrain_restarts
        self.pretrain_repair = pretrain_repair
        self.seed = seed

    # ------------------------------------------------------------------ hyper-parameters
    @property
    def config(self) -> MoSAICConfig:
        """The hyper-parameters with the fitted ``n`` (a new ``MoSAICConfig``; ``set_params`` changes them)."""
        return MoSAICConfig(n=self.n, **self.get_params())

    def _checked_config(self, n: int) -> MoSAICConfig:
        """The hyper-parameters for ``n`` features, validated (InputError on a bad value)."""
        config = MoSAICConfig(n=n, **self.get_params())
        config.validate()
        return config

    def _init_state(self, n: int) -> None:
        """Fresh components for ``n`` features: random bases drawn from ``seed``, nothing seen."""
        bases = random_bases(np.random.default_rng(self.seed), self.K, n, self.r)
        self.n_features_in_ = n
        self.bank_ = ExpertBank(bases=bases, ridge=RIDGE)
        self.expert_stats_ = ExpertStats.new(self.K)
        self.steps_ = StepSchedule.new(self.K)
        self.epochs_ = EpochReset.new(self.K)
        self.stream_stats_ = StreamStats(mean_m=float(n))
        self.change_buffer_ = ChangeBuffer()
        self.provisional_fit_ = ProvisionalFit()

    def components(self) -> dict[str, StateComponent]:
        """The state components by their checkpoint name (``COMPONENTS``)."""
        return {name: getattr(self, name + "_") for name in COMPONENTS}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN marks an unobserved entry
        tags.input_tags.sparse = False
        tags.target_tags.required = False
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    # ------------------------------------------------------------------ device
    def to(self, device: torch.device | None) -> MoSAIC:
        """Run the torch part (the routing of ``fit``, ``step``, ``route`` and ``transform`` through
        ``moe.route_by_score``) on ``device`` (a ``torch.device`` from ``common.device.resolve_device``;
        None: the CPU). The state stays in host numpy arrays (the per-sample path of ``process`` is
        numpy throughout) and checkpoints hold no device. Returns the model."""
        self._device = device
        return self

    @property
    def device(self) -> torch.device | None:
        """Where the routing runs (``to``); None: the CPU."""
        return getattr(self, "_device", None)

    # ------------------------------------------------------------------ fitted state (scikit-learn)
    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "bank_")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError("this MoSAIC is not fitted yet: call fit (pretraining) or partial_fit first")

    @property
    def n(self) -> int:
        """The ambient dimension ``n_features_in_`` (NotFittedError before ``fit`` / ``partial_fit``)."""
        self._check_fitted()
        return self.n_features_in_

    @property
    def bases_(self) -> np.ndarray:
        """The live expert bases ``(K, n, r)`` (``bank_.bases``)."""
        self._check_fitted()
        return self.bank_.bases

    @property
    def bases(self) -> np.ndarray:
        """``bases_``, assignable: a new ``(K, n, r)`` array replaces the experts (on an unfitted
        model it starts the state with them, ``n`` from their shape)."""
        return self.bases_

    @bases.setter
    def bases(self, value: np.ndarray) -> None:
        value = np.asarray(value, dtype=np.float64)
        n = self.n_features_in_ if self.__sklearn_is_fitted__() else (value.shape[1] if value.ndim == 3 else -1)
        if value.shape != (self.K, n, self.r):
            raise InputError(f"bases must have shape (K, n, r) = {(self.K, n, self.r)}, got {value.shape}")
        if not self.__sklearn_is_fitted__():
            self._checked_config(n)
            self._init_state(n)
        self.bank_.bases = value

    @property
    def K_(self) -> int:
        """Number of experts of the fitted state."""
        return self.bases_.shape[0]

    @property
    def r_(self) -> int:
        """Rank of the fitted experts."""
        return self.bases_.shape[2]

    @property
    def ridge_(self) -> float:
        """λ of the least-squares fits (the MAP ``σ̂²/var(w)`` after ``fit``)."""
        self._check_fitted()
        return self.bank_.ridge

    @property
    def ridge(self) -> float:
        return self.ridge_

    @property
    def n_samples_seen_(self) -> int:
        """Stream samples seen by ``partial_fit`` / ``process`` / ``step`` (not the source)."""
        self._check_fitted()
        return self.stream_stats_.n_seen

    @property
    def reseeds_(self) -> list[tuple[int, int]]:
        """Re-seeds so far: ``(sample index, expert)``."""
        self._check_fitted()
        return self.change_buffer_.reseeds

    @property
    def reseeds(self) -> list[tuple[int, int]]:
        return self.reseeds_

    @property
    def pretrained(self) -> bool:
        return self.__sklearn_is_fitted__() and self.stream_stats_.pretrained

    # ------------------------------------------------------------------ helpers
    def reseed_min(self) -> int:
        """Buffer size that triggers a re-seed: enough observations to pin down ``n r`` unknowns."""
        return reseed_min(self.n_features_in_, self.r, self.stream_stats_.mean_m)

    def _window_len(self) -> int:
        return max(50, self.K * reseed_min(self.n_features_in_, self.r, self.stream_stats_.mean_m))

    def step_size(self, k: int) -> float:
        return self.steps_.step_size(k, self.schedule, self.eta0, self.eta_min, self.r, self.drift_floor,
                                     float(self.expert_stats_.level[k]))

    def memory_bytes(self) -> int:
        """Bytes of every array the model state holds (all components: bases, counters, change buffer,
        provisional fit)."""
        total = 0
        for comp in self.components().values():
            for name in comp.field_names():
                value = getattr(comp, name)
                if isinstance(value, np.ndarray):
                    total += value.nbytes
                elif isinstance(value, list):
                    total += sum(v.nbytes for v in value if isinstance(v, np.ndarray))
        return int(total)

    def _stream_samples(self, X, mask) -> tuple[np.ndarray, np.ndarray]:
        """Validate a stream batch ``X (B, n)`` / ``(n,)`` and the hyper-parameters; an unfitted model
        starts from random bases drawn from ``seed`` for this ``n``."""
        fitted = self.__sklearn_is_fitted__()
        X0, M = check_samples(self, X, mask, reset=not fitted, allow_1d=True)
        self._checked_config(X0.shape[1])
        if not fitted:
            self._init_state(X0.shape[1])
        elif self.bank_.bases.shape != (self.K, X0.shape[1], self.r):
            raise InputError(f"K={self.K}, r={self.r} do not match the fitted experts {self.bank_.bases.shape} "
                             "(set with set_params after fitting): call fit to start over")
        return X0, M

    # ------------------------------------------------------------------ pretraining
    def fit(self, X: np.ndarray, y=None, *, mask: np.ndarray | None = None) -> MoSAIC:
        """Pretrain the experts on source samples ``X (S, n)`` (NaN = unobserved, or ``mask``); the
        state starts over and ``n_features_in_ = n``. ``y`` is ignored (scikit-learn's signature).

        Runs k-subspaces with missing data (online seeding passes + restarts + batch
        refinement), then sets each expert's residual level from its assigned samples. Samples with
        at most ``r`` observed entries cannot identify a rank-``r`` subspace: a
        ``LowObservationWarning`` when most samples are so, an ``InputError`` when all are (and when
        every observed entry is zero).
        """
        X0, M = check_samples(self, X, mask, reset=True, min_samples=2)
        self._checked_config(X0.shape[1])
        check_observed(M, self.r, "source samples")
        if not np.any(X0[M]):
            raise InputError("the source samples are all zero: there is no subspace to learn from them")
        result, ridge = train.fit(X0, M, self.K, self.r, restarts=self.pretrain_restarts, seed=self.seed,
                                  repair_rounds=self.pretrain_repair, device=self.device)
        self._init_state(X0.shape[1])
        self.bank_.bases, self.bank_.ridge = result.bases.copy(), ridge
        stats = self.expert_stats_
        for k in range(self.K):
            s = result.scores[result.labels == k]
            lvl = float(np.median(s)) if s.size else 1.0
            stats.level[k] = stats.level_slow[k] = max(lvl, 1e-6)
            self.steps_.t[k] = s.size
            self.steps_.level_ref[k] = stats.level[k]
            stats.long_counts[k] = s.size
        stats.mature[:] = True
        self.stream_stats_.mean_m = float(M.sum(1).mean())
        self.stream_stats_.entry_energy = float((X0 * X0).sum() / max(int(M.sum()), 1))
        stats.last_update[:] = self.stream_stats_.n_seen
        self.stream_stats_.pretrained = True
        return self

    # ------------------------------------------------------------------ streaming
    def process(self, x: np.ndarray, mask: np.ndarray | None = None, epoch: np.ndarray | int | None = None):
        """Route, complete and update on each sample in order (the fast path of a stream).

        ``x (B, n)`` or ``(n,)`` (NaN = unobserved, or ``mask``); ``epoch`` ``(B,)`` or one int,
        optional; an unfitted model starts from random bases. Returns ``completed (B, n)``
        (the estimate when the sample arrived, observed entries kept) and ``routes (B,)``. The whole
        batch is validated first, the observed indices of every sample are split out in one pass,
        and each sample is then routed by ``moe.route_by_score``'s rule (argmin of the scores, ties
        to the lower index) applied inline: a torch call per sample would cost more than the rest of
        the step. The result is identical to calling ``step`` on each sample (tested).
        """
        X0, M = self._stream_samples(x, mask)
        B = X0.shape[0]
        epochs = None if epoch is None else np.broadcast_to(np.asarray(epoch, np.int64), (B,)).tolist()
        completed = np.empty_like(X0)
        routes = np.empty(B, np.int64)
        cols = np.nonzero(M)[1]  # observed indices of every sample, row after row
        vals = X0[M]  # their values, in the same order (sample j's are a slice, not a gather)
        bounds = [0, *np.cumsum(M.sum(1)).tolist()]
        bank = self.bank_
        for j in range(B):
            if epochs is not None and epochs[j] != self.epochs_.epoch:
                self._set_epoch(epochs[j])
            start, end = bounds[j], bounds[j + 1]
            idx, xo = cols[start:end], vals[start:end]
            xx = float(xo @ xo)
            w, score = residual_scores(bank.bases, idx, xo, bank.ridge, xx)
            k = int(score.argmin())
            completed[j] = self._complete_and_update(idx, xo, w, score, k, xx)
            routes[j] = k
        return completed, routes

    def partial_fit(self, X: np.ndarray, y=None, *, mask: np.ndarray | None = None, epoch=None) -> MoSAIC:
        """Stream samples ``X (B, n)`` / ``(n,)`` in order: route, complete, update (see ``process``);
        ``y`` is ignored. On an unfitted model the experts start from random bases."""
        self.process(X, mask, epoch)
        return self

    def step(self, idx: np.ndarray, xo: np.ndarray, epoch: int | None = None) -> tuple[np.ndarray, int]:
        """One validated sample of a fitted model: ``idx (m,)`` observed indices, ``xo (m,)`` values.

        Routes through ``moe.route_by_score``; returns ``(completion (n,), routed expert)``
        computed before the update.
        """
        self._check_fitted()
        if epoch is not None:
            self._set_epoch(epoch)
        xx = float(xo @ xo)
        w, score = self.bank_.scores(idx, xo, xx)
        k = int(route_scores(score[None], self.device)[0])
        return self._complete_and_update(idx, xo, w, score, k, xx), k

    def _set_epoch(self, epoch: int) -> None:
        self.epochs_.set_epoch(epoch, self.epoch_reset, self.steps_)

    def _install_basis(self, k: int, U: np.ndarray) -> None:
        """Replace expert ``k``'s basis by a re-seed ``U (n, r)``: its schedule restarts, and a pending
        epoch-reset decision of the old basis goes."""
        self.bank_.bases[k] = U
        self.steps_.t[k] = 0.0
        self.epochs_.pending[k] = False
        self.expert_stats_.reseeded_at[k] = self.stream_stats_.n_seen

    def _complete_and_update(self, idx: np.ndarray, xo: np.ndarray, w: np.ndarray, score: np.ndarray, k: int,
                             xx: float) -> np.ndarray:
        """Completion ``(n,)`` of a sample (``idx``, ``xo (m,)``, ``xx = xo @ xo``) routed to expert ``k``
        (coefficients ``w (K, r)``, scores ``(K,)``), then the update / change detection."""
        c = self
        n, r = self.n_features_in_, self.r
        bank, stats, stream, steps = self.bank_, self.expert_stats_, self.stream_stats_, self.steps_
        m = idx.size
        U, wk = bank.bases[k], w[k]
        p = U @ wk
        completion = p.copy()
        if c.completion_cap:
            # against the larger of the sample's own and the running entry energy, and 10× (not
            # the 2× of the provisional fits): a correct fit's unobserved part can carry far more
            # energy than its observed part at small n (the noiseless exact-recovery test has 4.3×)
            completion[idx] = 0.0
            cap_completion(completion, xo, n, c.completion_cap, stream.entry_energy, xx)
        completion[idx] = xo
        stream.observe(m, xx)
        if m <= r:  # the fit is exact whatever the subspace: nothing to learn
            return completion
        s = float(score[k])
        level = float(stats.level[k])
        novel = c.detect and stats.mature[k] and s > max(NOVELTY * (1.0 - r / m), SPIKE_FACTOR * level)
        prov = None
        prov_fit = self.provisional_fit_
        if c.detect and prov_fit.basis is not None and stream.n_seen - self.change_buffer_.last_novel <= self._window_len():
            # the provisional basis competes in the routing while a change is being buffered: a
            # sample it explains better (relative to a random subspace of each rank) is novel too
            prov = prov_fit.fit_sample(idx, xo, m, n, bank.ridge)
            novel = novel or prov[0] < s / (1.0 - r / m)
        if novel:
            return self._buffer_novel(idx, xo, m, prov)
        if self.epochs_.pending[k]:
            self.epochs_.check(k, s, stats.level_slow[k], steps)
        eta = steps.step_size(k, c.schedule, c.eta0, c.eta_min, r, c.drift_floor, level)
        grouse_step(U, idx, xo, wk, eta, p=p)
        t = steps.t[k] + 1.0
        steps.t[k] = t
        n_updates = int(stats.n_updates[k]) + 1
        stats.n_updates[k] = n_updates
        stats.long_counts[k] += 1.0
        stats.last_update[k] = stream.n_seen
        level += LEVEL_RATE * (s - level)
        stats.level[k] = level
        slow = float(stats.level_slow[k])
        slow += SLOW_LEVEL_RATE * (s - slow)
        stats.level_slow[k] = slow
        if c.detect and level > DRIFT_FACTOR * slow and t > steps.tau(r):
            steps.t[k] = 0.0  # residuals jumped: restart the step-size schedule
            stats.level_slow[k] = level
        if not stats.mature[k] and n_updates >= 3 * self.reseed_min() and level < 0.5 * NOVELTY:
            stats.mature[k] = True
        if n_updates % 100 == 0:  # ridge fits leave ρ slightly off-orthogonal
            bank.bases[k] = orthonormalize(U)
        return completion

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
            self._install_basis(victim, U)
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

    def resolved_provisional_estimator(self) -> str:
        """The provisional estimator in use: ``provisional_estimator``, with ``"auto"`` resolved by
        the running mean observed count ``m̄``. The posterior (Soft-Impute, then rank-r PPCA) needs
        observations to spare beyond the rank: with ``m̄ < 2.25 r`` (e.g. (100,25,5) at 40 %,
        m̄/r = 1.6) it was both worse and ~10× slower than ALS on the tuning seeds."""
        c = self
        if c.provisional_estimator != "auto":
            return c.provisional_estimator
        return "posterior" if self.stream_stats_.mean_m >= PROVISIONAL_MIN_RATIO * self.r else "als"

    def _maybe_refit_provisional(self) -> None:
        """Refit the provisional fit of the change buffer (``ProvisionalFit.refit``) once it has
        grown by ``provisional_growth`` (0: 0.05 for the posterior, 0.2 for ALS)."""
        c = self
        if not c.provisional or len(self.change_buffer_) == 0:
            self.provisional_fit_.reset()
            return
        estimator = self.resolved_provisional_estimator()
        growth = c.provisional_growth or (0.2 if estimator == "als" else 0.05)
        self.provisional_fit_.refit(self.change_buffer_, self.n, self.r, self.stream_stats_.mean_m, estimator, growth,
                                   c.provisional_lambda, self.expert_stats_.level, self.stream_stats_.n_seen)

    # ------------------------------------------------------------------ inference only
    def route(self, X: np.ndarray, *, mask: np.ndarray | None = None) -> np.ndarray:
        """Expert of each sample ``X (B, n)`` (``(B,)``, no update), through ``moe.route_by_score``."""
        self._check_fitted()
        X0, M = check_samples(self, X, mask, reset=False)
        return self.bank_.batch_route(X0, M, self.device)[1]

    def transform(self, X: np.ndarray, *, mask: np.ndarray | None = None) -> np.ndarray:
        """Completed samples ``X (B, n)`` (``(B, n)``, no update): the routed expert's fit, observed
        entries kept."""
        self._check_fitted()
        X0, M = check_samples(self, X, mask, reset=False)
        W, k = self.bank_.batch_route(X0, M, self.device)
        est = np.where(M, 0.0, np.einsum("bnr,br->bn", self.bank_.bases[k], W[np.arange(len(k)), k]))
        if self.completion_cap:
            for b in range(len(est)):
                cap_completion(est[b], X0[b, M[b]], self.n, self.completion_cap,
                               self.stream_stats_.entry_energy)
        return np.where(M, X0, est)

    def complete(self, X: np.ndarray, *, mask: np.ndarray | None = None) -> np.ndarray:
        """``transform``: completed samples ``(B, n)``, no update."""
        return self.transform(X, mask=mask)

    def subspaces(self) -> np.ndarray:
        """Current expert bases ``(K, n, r)`` (a copy)."""
        return self.bank_.bases.copy()

    # ------------------------------------------------------------------ persistence
    # the shared format of common.pretrained: config = every constructor argument (so a default
    # changed later cannot change a saved model); tensors and state = every component's fields
    # (streaming.state), nothing else; n is the bases' second dimension

    @property
    def pretrained_config(self) -> dict:
        return self.get_params()

    def save(self, path_dir: str | os.PathLike) -> Path:
        """Save the full state (so a reloaded model continues the stream identically)."""
        return self.save_pretrained(path_dir)

    @classmethod
    def load(cls, path_dir: str | os.PathLike) -> MoSAIC:
        return cls.from_pretrained(path_dir)

    @classmethod
    def upgrade_config(cls, config: dict, from_version: int) -> dict:
        """Older configs through ``streaming.compat.upgrade_config``."""
        upgraded = upgrade_config(config, from_version)
        return upgraded if upgraded is not None else super().upgrade_config(config, from_version)

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict]:
        """``(tensors, state)``: every field of every component (``COMPONENTS``)."""
        tensors: dict[str, torch.Tensor] = {}
        state: dict = {"layout": STATE_LAYOUT}
        for name, comp in self.components().items():
            t, s = comp.to_state(name)
            tensors.update(t)
            state[name] = s
        return tensors, state

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict, source: str) -> None:
        """Inverse of :meth:`checkpoint_state`; older layouts through ``streaming.compat``.
        CheckpointError when something is missing or does not fit."""
        if state.get("layout") != STATE_LAYOUT:
            fresh = load_flat_state(tensors, state, self.K, source)
        else:
            unknown = set(state) - {"layout", *COMPONENTS}
            if unknown:
                raise CheckpointError(f"{source}: unknown MoSAIC state {sorted(unknown)}")
            state = upgrade_component_state(state)
            fresh = {name: cls.__new__(cls) for name, cls in COMPONENTS.items()}
            for name, comp in fresh.items():
                comp.load_state(tensors, state.get(name), source)
        shape = fresh["bank"].bases.shape
        if len(shape) != 3 or (shape[0], shape[2]) != (self.K, self.r):
            raise CheckpointError(f"bases in {source} have shape {shape}, expected (K, n, r) = ({self.K}, n, {self.r})")
        for name, comp in fresh.items():
            setattr(self, name + "_", comp)
        self.n_features_in_ = int(shape[1])

    @classmethod
    def tiny_example(cls):
        """A pretrained model part-way through an abruptly switching stream, with every piece of
        state in use (a re-seed done, a change buffer, provisional fit and Soft-Impute warm start);
        input: the next 20 samples and their epochs."""
        from streaming.data import StreamConfig, generate_stream

        s = generate_stream(StreamConfig(n=20, r=2, K=3, obs_frac=0.6, epochs=2, samples_per_epoch=120,
                                         drift="abrupt", source_per_class=40, seed=7))
        m = cls(2, 3, pretrain_restarts=2, seed=1).fit(s.source_values)
        m.process(s.values[:210], epoch=s.epoch[:210])
        return m, (s.values[210:230], None, s.epoch[210:230])

    def example_forward(self, x: np.ndarray, mask: np.ndarray | None, epoch: np.ndarray):
        """Continue the stream: ``process`` returns ``(completed (B, n), routes (B,))``."""
        return self.process(x, mask, epoch)

