"""MoSAIC's hyper-parameters: one mixin, the single source of their defaults and their checks.

``MoSAIC``'s constructor takes the ones users set (``r``, ``K``, ``eta0``, ``pretrain_restarts``,
``seed``; their defaults are ``ETA0``, ``PRETRAIN_RESTARTS``, ``SEED``); the others are fixed class
attributes of ``HyperParameters``, which a variant (a baseline, an ablation in experiments/) overrides
in a subclass. ``n`` is learned by ``fit``, which validates what users set.
"""

from __future__ import annotations

from common.errors import InputError

ETA0 = 1.0  # with epoch_reset="detect", chosen on the tuning seeds
PRETRAIN_RESTARTS = 16  # restarts stop at the first clean solution, so only hard cases pay
SEED = 0


class HyperParameters:
    """Mixin of ``streaming.model.MoSAIC``: the fixed hyper-parameters (defaults chosen on the tuning
    seeds) as class attributes, and the check of the ones users set."""

    eta_min: float = 0.05  # capped at eta0 (``step_floor``)
    drift_floor: float = 0.3  # ``streaming.schedule.drift_floor``'s coefficient, chosen on the tuning seeds; 0 = off
    schedule: str = "sublinear"  # or "constant" (η = eta0 always, k-GROUSE style)
    detect: bool = True  # change detection (novel samples -> change buffer -> re-seed)
    epoch_reset: str = "detect"  # restart the schedule at an epoch start: "detect" (only experts that moved), "always", "never"
    provisional: bool = True  # complete novel samples with a growing-rank fit of the change buffer
    completion_cap: float = 10.0  # energy cap of a routed expert's completion (``cap_completion``); 0 = off
    # rounds of the robust refit of a cluster that fits far worse than the others (kss.repair_clusters); 0 = off
    pretrain_repair: int = 2

    @property
    def step_floor(self) -> float:
        """The floor of the sublinear step: ``eta_min``, capped at ``eta0``."""
        return min(self.eta_min, self.eta0)

    def _check_hyper_parameters(self, n: int) -> None:
        """InputError when what users set is out of range for ``n`` features (the fixed ones are the
        class's own; a variant that changes them checks them, ``experiments.streaming.variants``)."""
        if self.K < 1:
            raise InputError(f"K must be >= 1, got {self.K}")
        if n < 2:
            raise InputError(f"n must be >= 2, got {n}")
        if not 1 <= self.r < n:
            raise InputError(f"rank r must satisfy 1 <= r < n, got r={self.r}, n={n}")
        if not 0 < self.eta0 <= 1:  # the floor min(eta_min, eta0) then lies in [0, eta0]
            raise InputError("step sizes must satisfy 0 <= eta_min <= eta0 <= 1, eta0 > 0")
