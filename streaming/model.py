"""MoSAIC: a mixture of subspace experts for online matrix completion on a drifting union of subspaces.

Each of ``K`` experts is an orthonormal basis ``U_k (n, r)``; a sample ``x`` is observed on ``Ω``
(``m = |Ω|`` entries). Per sample (in full: streaming/README.md, "How it works"):

1. **Route** (``moe.route_by_score``'s rule, ties to the lower index): ``k* = argmin_k s_k`` with
   ``s_k = min_w (||x_Ω - U_{k,Ω} w||² + λ||w||²) / ||x_Ω||²`` (``λ = σ̂²/var(w)``, the MAP ridge
   estimated at pretraining; ~0 without).
2. **Complete**: ``x̂ = U_{k*} w_{k*}`` off Ω (energy capped), ``x_Ω`` on Ω.
3. **Update expert k* only**: one GROUSE step (``streaming.linalg.grouse_step``) of size
   ``η_t = max(η_min, f_k, η_0 / sqrt(1 + t_k / 2r))``; ``t_k`` restarts at a re-seed, when the
   expert's fast residual level exceeds ``DRIFT_FACTOR`` × its slow one, and at an epoch start for
   the experts the new epoch moved; ``f_k`` is the drift floor (``streaming.schedule``).
4. **Change detection** (``streaming.change``): a sample whose best score exceeds both
   ``NOVELTY · (1 - r/m)`` and ``SPIKE_FACTOR ×`` its expert's level is novel: it updates no expert
   and goes to a change buffer, completed by a provisional fit of the buffer; once the buffer holds
   ``reseed_min()`` samples, a rank-r fit of it re-seeds the expert that lost the most of its traffic.

Per-sample cost O(K m r²) to route, O(n r) to update; state O(K n r), held in the components of
``COMPONENTS`` (``streaming.state``). Pretraining (``fit``) is ``streaming.train.fit``. ``MoSAIC`` is
assembled from mixins, one role each: its hyper-parameters (``streaming.config.HyperParameters``),
what happens to a novel sample (``streaming.change.ChangeDetection``) and the state's size and
checkpoint (``streaming.state.ComponentState``).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError

from common.errors import CheckpointError, InputError
from common.pretrained import PretrainedMixin, register_model
from streaming import train
from streaming.change import NOVELTY, ChangeBuffer, ChangeDetection, ProvisionalFit
from streaming.config import ETA0, PRETRAIN_RESTARTS, SEED, HyperParameters
from streaming.experts import ExpertBank, ExpertStats, StreamStats, cap_completion
from streaming.linalg import RIDGE, grouse_step, orthonormalize, random_bases, residual_scores
from streaming.observed import check_observed, check_samples
from streaming.schedule import DRIFT_FACTOR, LEVEL_RATE, SLOW_LEVEL_RATE, EpochReset, StepSchedule
from streaming.state import ComponentState, StateComponent

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
#: an expert counts as mature (its residual spikes can flag a change) after MATURE_UPDATES × reseed_min
#: updates with a fast level under MATURE_LEVEL
MATURE_UPDATES = 3
MATURE_LEVEL = 0.5 * NOVELTY
#: re-orthonormalize an expert's basis every this many updates
ORTHONORMALIZE_EVERY = 100


@register_model("mosaic")
class MoSAIC(HyperParameters, ChangeDetection, ComponentState, PretrainedMixin, TransformerMixin, BaseEstimator):
    """Mixture of subspace experts (the module docstring has the algorithm), a scikit-learn estimator.

    Shapes: ``n`` ambient dimension (learned: ``n_features_in_``), ``r`` rank, ``K`` experts; ``bases_``
    is ``(K, n, r)``. The constructor only stores what users set (validated by ``fit`` /
    ``partial_fit``). NaN marks an unobserved entry (or pass ``mask``); sparse input is refused.
    Deterministic under ``seed``.
    """

    config_version = 7  # 7: the five constructor arguments; older checkpoints are refused
    COMPONENTS = COMPONENTS

    def __init__(self, r: int, K: int, *, eta0: float = ETA0, pretrain_restarts: int = PRETRAIN_RESTARTS,
                 seed: int = SEED) -> None:
        self.r = r
        self.K = K
        self.eta0 = eta0
        self.pretrain_restarts = pretrain_restarts
        self.seed = seed

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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN marks an unobserved entry
        tags.input_tags.sparse = False
        tags.target_tags.required = False
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    def to(self, device: torch.device | None) -> MoSAIC:
        """Run the routing of ``fit``, ``route`` and ``transform`` (``moe.route_by_score``) on ``device``
        (None: the CPU); the state and ``process`` stay numpy, checkpoints hold no device. Returns self."""
        self._device = device
        return self

    @property
    def device(self) -> torch.device | None:
        """Where the routing runs (``to``); None: the CPU."""
        return getattr(self, "_device", None)

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
    def ridge_(self) -> float:
        """λ of the least-squares fits (the MAP ``σ̂²/var(w)`` after ``fit``)."""
        self._check_fitted()
        return self.bank_.ridge

    @property
    def n_samples_seen_(self) -> int:
        """Stream samples seen by ``process`` / ``partial_fit`` (not the source)."""
        self._check_fitted()
        return self.stream_stats_.n_seen

    @property
    def reseeds_(self) -> list[tuple[int, int]]:
        """Re-seeds so far: ``(sample index, expert)``."""
        self._check_fitted()
        return self.change_buffer_.reseeds

    def _stream_samples(self, X, mask) -> tuple[np.ndarray, np.ndarray]:
        """Validate a stream batch ``X (B, n)`` / ``(n,)`` and the hyper-parameters; an unfitted model
        starts from random bases drawn from ``seed`` for this ``n``."""
        fitted = self.__sklearn_is_fitted__()
        X0, M = check_samples(self, X, mask, reset=not fitted, allow_1d=True)
        self._check_hyper_parameters(X0.shape[1])
        if not fitted:
            self._init_state(X0.shape[1])
        elif self.bank_.bases.shape != (self.K, X0.shape[1], self.r):
            raise InputError(f"K={self.K}, r={self.r} do not match the fitted experts {self.bank_.bases.shape} "
                             "(set with set_params after fitting): call fit to start over")
        return X0, M

    # ------------------------------------------------------------------ pretraining
    def fit(self, X: np.ndarray, y=None, *, mask: np.ndarray | None = None) -> MoSAIC:
        """Pretrain the experts on source samples ``X (S, n)`` (NaN = unobserved, or ``mask``;
        ``streaming.train.fit``), then set each expert's residual level from its assigned samples; the
        state starts over. ``LowObservationWarning`` when most samples have at most ``r`` observed
        entries, ``InputError`` when all have (or every observed entry is zero)."""
        X0, M = check_samples(self, X, mask, reset=True, min_samples=2)
        self._check_hyper_parameters(X0.shape[1])
        check_observed(M, self.r, "source samples")
        if not np.any(X0[M]):
            raise InputError("the source samples are all zero: there is no subspace to learn from them")
        result, ridge = train.fit(X0, M, self.K, self.r, restarts=self.pretrain_restarts, seed=self.seed,
                                  repair_rounds=self.pretrain_repair, device=self.device)
        self._init_state(X0.shape[1])
        self.bank_.bases, self.bank_.ridge = result.bases.copy(), ridge
        stats = self.expert_stats_
        levels, counts = train.assigned_levels(result, self.K)
        stats.level[:], stats.level_slow[:], self.steps_.level_ref[:] = levels, levels, levels
        self.steps_.t[:], stats.long_counts[:] = counts, counts
        stats.mature[:] = True
        self.stream_stats_.mean_m = float(M.sum(1).mean())
        self.stream_stats_.entry_energy = float((X0 * X0).sum() / max(int(M.sum()), 1))
        stats.last_update[:] = self.stream_stats_.n_seen
        self.stream_stats_.pretrained = True
        return self

    # ------------------------------------------------------------------ streaming
    def process(self, x: np.ndarray, mask: np.ndarray | None = None, epoch: np.ndarray | int | None = None):
        """Route, complete and update on each sample of ``x (B, n)`` / ``(n,)`` in order (NaN =
        unobserved, or ``mask``; ``epoch``: ``(B,)`` or one int, optional); an unfitted model starts
        from random bases. Returns ``completed (B, n)`` (the estimate when each sample arrived) and
        ``routes (B,)``, identical to processing the samples one by one. ``moe.route_by_score``'s rule
        is applied inline: a torch call per sample would cost more than the rest of the step."""
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

    def _set_epoch(self, epoch: int) -> None:
        self.epochs_.set_epoch(epoch, self.epoch_reset, self.steps_)

    def _complete_and_update(self, idx: np.ndarray, xo: np.ndarray, w: np.ndarray, score: np.ndarray, k: int,
                             xx: float) -> np.ndarray:
        """One sample's path after routing: ``idx (m,)``, ``xo (m,)`` (``xx = xo @ xo``) routed to expert
        ``k`` (coefficients ``w (K, r)``, scores ``(K,)``). Returns its completion ``(n,)``; then a novel
        sample goes to the change buffer, any other updates expert ``k``."""
        p = self.bank_.bases[k] @ w[k]
        completion = self._completion(idx, xo, p, xx)
        self.stream_stats_.observe(idx.size, xx)
        if idx.size <= self.r:  # the fit is exact whatever the subspace: nothing to learn
            return completion
        s = float(score[k])
        novel, prov = self._novelty(idx, xo, s, k)
        if novel:
            return self._buffer_novel(idx, xo, idx.size, prov)
        self._update_expert(idx, xo, w[k], p, s, k)
        return completion

    def _completion(self, idx: np.ndarray, xo: np.ndarray, p: np.ndarray, xx: float) -> np.ndarray:
        """The routed expert's fit ``p (n,)`` as a completion ``(n,)``: capped (``completion_cap``),
        observed entries kept."""
        completion = p.copy()
        if self.completion_cap:
            # against the larger of the sample's own and the running entry energy, and 10× (not
            # the 2× of the provisional fits): a correct fit's unobserved part can carry far more
            # energy than its observed part at small n (the noiseless exact-recovery test has 4.3×)
            completion[idx] = 0.0
            cap_completion(completion, xo, self.n_features_in_, self.completion_cap, self.stream_stats_.entry_energy,
                           xx)
        completion[idx] = xo
        return completion

    def _update_expert(self, idx: np.ndarray, xo: np.ndarray, wk: np.ndarray, p: np.ndarray, s: float,
                       k: int) -> None:
        """One GROUSE step on expert ``k`` (coefficients ``wk (r,)``, fit ``p (n,)``, score ``s``) with
        the step size of its schedule, then its counters and residual levels."""
        stats, steps = self.expert_stats_, self.steps_
        level = float(stats.level[k])
        if self.epochs_.pending[k]:
            self.epochs_.check(k, s, stats.level_slow[k], steps)
        eta = steps.step_size(k, self.schedule, self.eta0, self.step_floor, self.r, self.drift_floor, level)
        U = self.bank_.bases[k]
        grouse_step(U, idx, xo, wk, eta, p=p)
        t = steps.t[k] + 1.0
        steps.t[k] = t
        n_updates = int(stats.n_updates[k]) + 1
        stats.n_updates[k] = n_updates
        stats.long_counts[k] += 1.0
        stats.last_update[k] = self.stream_stats_.n_seen
        level = self._track_levels(k, s, level, t)
        if not stats.mature[k] and n_updates >= MATURE_UPDATES * self.reseed_min() and level < MATURE_LEVEL:
            stats.mature[k] = True
        if n_updates % ORTHONORMALIZE_EVERY == 0:  # ridge fits leave ρ slightly off-orthogonal
            self.bank_.bases[k] = orthonormalize(U)

    def _track_levels(self, k: int, s: float, level: float, t: float) -> float:
        """Expert ``k``'s fast and slow residual levels after score ``s`` (``level``: the fast one before,
        ``t``: its schedule's count); a jump of the fast over the slow one restarts its schedule.
        Returns the new fast level."""
        stats, steps = self.expert_stats_, self.steps_
        level += LEVEL_RATE * (s - level)
        stats.level[k] = level
        slow = float(stats.level_slow[k])
        slow += SLOW_LEVEL_RATE * (s - slow)
        stats.level_slow[k] = slow
        if self.detect and level > DRIFT_FACTOR * slow and t > steps.tau(self.r):
            steps.t[k] = 0.0  # residuals jumped: restart the step-size schedule
            stats.level_slow[k] = level
        return level

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

    # ------------------------------------------------------------------ persistence
    # the shared format of common.pretrained: config = every constructor argument; tensors and
    # state = every component's fields (``ComponentState``), nothing else; n is the bases' second dimension

    @property
    def pretrained_config(self) -> dict:
        return self.get_params()

    def load_checkpoint_state(self, tensors: dict[str, torch.Tensor], state: dict, source: str) -> None:
        """Inverse of ``checkpoint_state``. CheckpointError when something is missing or does not fit."""
        fresh = self.components_from_state(tensors, state, source)
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

