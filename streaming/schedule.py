"""MoSAIC's step-size schedule and its epoch handling.

The step of expert ``k`` is ``η_t = max(η_min, f_k, η_0 / sqrt(1 + t_k / τ))`` (``"sublinear"``, ``τ = 2 r``)
or ``η_0`` (``"constant"``), ``t_k`` counting its updates since the schedule last restarted. The
*drift floor* ``f_k = min(η_0, c · sqrt(max(ℓ_k / ℓ_ref,k − 1, 0)))`` keeps the step up while the
expert's fast residual level ``ℓ_k`` stays above ``ℓ_ref,k``, its level at the end of pretraining (the
noise): a drifting subspace keeps being tracked, one that fits as well as then lets its step decay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streaming.state import StateComponent

#: an expert's schedule restarts when its fast residual level exceeds ``DRIFT_FACTOR`` × its slow level;
#: at an epoch start, ``epoch_reset="detect"`` restarts it when the mean residual of its first
#: ``RESET_CHECK`` samples exceeds ``RESET_FACTOR`` × its slow level
DRIFT_FACTOR = 4.0
#: exponential-average rates of an expert's fast and slow residual levels (per routed sample)
LEVEL_RATE = 0.05
SLOW_LEVEL_RATE = 0.005
RESET_CHECK = 5
RESET_FACTOR = 2.0


def drift_floor(c: float, eta0: float, level: float, level_ref: float) -> float:
    """The drift floor ``min(η_0, c · sqrt(max(level / level_ref − 1, 0)))`` (0 when ``c`` or
    ``level_ref`` is not positive)."""
    if c <= 0.0 or level_ref <= 0.0 or level <= level_ref:
        return 0.0
    return min(eta0, c * math.sqrt(level / level_ref - 1.0))


@dataclass(slots=True)
class StepSchedule(StateComponent):
    """Updates ``t (K,)`` of each expert since its schedule last restarted, and the reference
    residual level ``level_ref (K,)`` of its drift floor (its level at the end of pretraining; 1 without)."""

    t: np.ndarray
    level_ref: np.ndarray

    @classmethod
    def new(cls, K: int) -> StepSchedule:
        return cls(t=np.zeros(K), level_ref=np.ones(K))

    @staticmethod
    def tau(r: int) -> float:
        """Updates over which the sublinear step size halves its way down: ``2 r``."""
        return 2.0 * r

    def step_size(self, k: int, schedule: str, eta0: float, eta_min: float, r: int, floor: float = 0.0,
                  level: float = 0.0) -> float:
        """Step of expert ``k`` (``floor``: the drift-floor coefficient ``c``, ``level``: its fast level)."""
        if schedule == "constant":
            return eta0
        f = drift_floor(floor, eta0, level, float(self.level_ref[k]))
        return max(eta_min, f, eta0 / math.sqrt(1.0 + float(self.t[k]) / (2.0 * r)))


@dataclass(slots=True)
class EpochReset(StateComponent):
    """The current ``epoch`` and, with ``epoch_reset="detect"``, the experts still to decide whether
    the new epoch moved them (``pending (K,)``) with the sum and count of their normalised residuals
    in the new epoch so far."""

    epoch: int
    pending: np.ndarray
    sum: np.ndarray
    count: np.ndarray

    @classmethod
    def new(cls, K: int) -> EpochReset:
        return cls(epoch=0, pending=np.zeros(K, bool), sum=np.zeros(K), count=np.zeros(K, np.int64))

    def set_epoch(self, epoch: int, mode: str, schedule: StepSchedule) -> None:
        """Epoch of the next sample; at a change, ``"always"`` restarts every expert's schedule and
        ``"detect"`` marks every expert pending."""
        if epoch != self.epoch:
            self.epoch = epoch
            if mode == "always":
                schedule.t[:] = 0.0
            elif mode == "detect":
                self.pending[:] = True
                self.sum[:] = 0.0
                self.count[:] = 0

    def check(self, k: int, s: float, level_slow: float, schedule: StepSchedule) -> None:
        """``epoch_reset="detect"``: after expert ``k``'s first ``RESET_CHECK`` accepted samples of a
        new epoch, restart its schedule if their mean residual ``s`` is ``RESET_FACTOR`` × its slow
        level (the subspace moved at the epoch change; a rotation of 0.1 rad raises it ~4×)."""
        self.sum[k] += s
        self.count[k] += 1
        if self.count[k] >= RESET_CHECK:
            if self.sum[k] / self.count[k] > RESET_FACTOR * level_slow:
                schedule.t[k] = 0.0
            self.pending[k] = False
